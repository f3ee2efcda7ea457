//! `flexstruct-chunk`: `documents` → `chunks` by dynamic partitioning (ct_min/ct_max tokens).

use std::process::ExitCode;

use clap::Parser;
use flexstruct_pipeline::chunk;
use flexstruct_stages::{CommonArgs, exit, run_stage};

/// Splits every document into token-balanced chunks with exact character offsets.
#[derive(Debug, Parser)]
#[command(version, after_help = "Exit codes: 0 ok, 1 some documents failed (see the failures table), 2 error.")]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> ExitCode {
    let args = Args::parse();
    exit(run_stage(chunk::STAGE, &args.common, false, chunk::run))
}
