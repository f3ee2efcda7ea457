//! `flexstruct-hypergraph`: `items` → `hyperedges`, `hyperedge_entities`, `entities`.

use std::process::ExitCode;

use flexstruct_pipeline::compose;
use flexstruct_pipeline::stages::hypergraph;
use flexstruct_stages::table_stage_main;

fn main() -> ExitCode {
    table_stage_main(
        hypergraph::STAGE,
        "Builds the hypergraph: one hyperedge per item, entities with aliases, hyperdegrees and summaries.",
        compose::hypergraph,
    )
}
