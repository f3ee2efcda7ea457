//! `flexstruct-graph`: `entities`, `hyperedges` → `edges` around anchor entities.

use std::process::ExitCode;

use flexstruct_pipeline::compose;
use flexstruct_pipeline::stages::graph;
use flexstruct_stages::table_stage_main;

fn main() -> ExitCode {
    table_stage_main(
        graph::STAGE,
        "Builds the binary graph: pairwise relations around anchor entities (hyperdegree > tau_e).",
        compose::graph,
    )
}
