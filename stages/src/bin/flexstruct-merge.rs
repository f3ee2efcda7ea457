//! `flexstruct-merge`: the per-document tables → the global `kb/` tables.

use std::process::ExitCode;

use flexstruct_pipeline::compose;
use flexstruct_pipeline::stages::merge;
use flexstruct_stages::table_stage_main;

fn main() -> ExitCode {
    table_stage_main(
        merge::STAGE,
        "Merges the per-document tables into the kb/ collections with DataFusion SQL, bucket by bucket, joining embeddings, building the alias table and statistics. With --shard K/N only the kb parts of its buckets; a merge of the whole index (no --shard) also derives the global thresholds, last.",
        compose::merge,
    )
}
