//! `flexstruct-cluster`: `hyperedges`, `embeddings` → `clusters`, `cluster_members` (SSC).

use std::process::ExitCode;

use flexstruct_pipeline::compose;
use flexstruct_pipeline::stages::cluster;
use flexstruct_stages::table_stage_main;

fn main() -> ExitCode {
    table_stage_main(
        cluster::STAGE,
        "Clusters each document's hyperedges by semantic and positional distance with HDBSCAN (structure-aware semantic clustering).",
        compose::cluster,
    )
}
