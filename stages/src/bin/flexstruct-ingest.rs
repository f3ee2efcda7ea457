//! `flexstruct-ingest`: a corpus (folder of .txt/.md, JSON array, JSON lines or Parquet file of
//! `{doc_id?, title?, text}`) → the `documents` table.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use flexstruct_pipeline::compose;
use flexstruct_pipeline::stages::ingest::{self, IngestOptions};
use flexstruct_stages::{CommonArgs, exit, run_stage};

/// Reads a corpus into the index's `documents` table (upsert by doc_id).
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "Exit codes: 0 ok, 1 some inputs failed (see the failures table), 2 error, 130/143 stopped by \
                  SIGINT/SIGTERM (a rerun does the rest)."
)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Corpus file or folder.
    #[arg(long, env = "FLEXSTRUCT_CORPUS", value_name = "PATH")]
    corpus: PathBuf,
    /// Also remove the shard's documents that are not in this corpus (refused if any input fails).
    #[arg(long)]
    prune: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let options = IngestOptions { corpus: args.corpus, prune: args.prune };
    // A corpus that cannot be read must not leave a new, empty index folder behind.
    if let Err(e) = std::fs::metadata(&options.corpus) {
        return exit(Err(anyhow::anyhow!("corpus {}: cannot be read: {e}", options.corpus.display())));
    }
    exit(run_stage(ingest::STAGE, &args.common, true, |ctx, config| compose::ingest(ctx, config, &options)))
}
