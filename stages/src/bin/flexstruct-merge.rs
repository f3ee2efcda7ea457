//! `flexstruct-merge`: the per-document tables → the global `kb/` tables.

use std::process::ExitCode;

use flexstruct_pipeline::compose;
use flexstruct_pipeline::stages::merge;
use flexstruct_stages::table_stage_main;

fn main() -> ExitCode {
    table_stage_main(
        merge::STAGE,
        "Merges the per-document tables into the global kb/ collections with DataFusion SQL, joining embeddings, building the alias table and statistics.",
        compose::merge,
    )
}
