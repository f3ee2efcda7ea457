//! `flexstruct-extract`: `chunks` → `items` by truncated sliding-window extraction.

use std::process::ExitCode;

use flexstruct_pipeline::compose;
use flexstruct_pipeline::stages::extract;
use flexstruct_stages::table_stage_main;

fn main() -> ExitCode {
    table_stage_main(
        extract::STAGE,
        "Extracts knowledge items (statement, verbatim reference span, entities) from every chunk, with the preceding chunks of its window as context.",
        compose::extract,
    )
}
