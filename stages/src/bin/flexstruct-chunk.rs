//! `flexstruct-chunk`: `documents` → `chunks` by dynamic partitioning (ct_min/ct_max tokens).

use std::process::ExitCode;

use flexstruct_pipeline::compose;
use flexstruct_pipeline::stages::chunk;
use flexstruct_stages::table_stage_main;

fn main() -> ExitCode {
    table_stage_main(
        chunk::STAGE,
        "Splits every document into token-balanced chunks with exact character offsets (dynamic partitioning).",
        compose::chunk,
    )
}
