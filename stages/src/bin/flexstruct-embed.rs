//! `flexstruct-embed`: `hyperedges`, `edges`, `entities`, `chunks` → `embeddings`.

use std::process::ExitCode;

use flexstruct_pipeline::compose;
use flexstruct_pipeline::stages::embed;
use flexstruct_stages::table_stage_main;

fn main() -> ExitCode {
    table_stage_main(
        embed::STAGE,
        "Embeds every retrievable unit (hyperedges and edges with their entity names, entities with their summaries, chunks) with the configured model; only new or changed units are embedded.",
        compose::embed,
    )
}
