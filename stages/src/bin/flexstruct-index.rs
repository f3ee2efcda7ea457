//! `flexstruct-index`: every construction stage in order in one process — ingest (with
//! `--corpus`), chunk, extract, hypergraph, graph, embed, cluster, merge, and with `--paths` the
//! path index — with the flags, shard handling, progress and summaries of the stage binaries.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use flexstruct_pipeline::compose;
use flexstruct_pipeline::stages::Stage;
use flexstruct_pipeline::stages::ingest::IngestOptions;
use flexstruct_stages::{CommonArgs, Outcome, exit, run_stage, say};

/// Builds (or brings up to date) an index: runs the construction stages in order, each skipping
/// what is up to date, and stops after a stage whose units failed (a rerun retries them) unless
/// told to keep going.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "Examples:\n  flexstruct-index --index data/indexes/sample --corpus data/sample/corpus\n  \
                  flexstruct-index --index IDX --from embed --paths\n  \
                  flexstruct-index --list-stages\n\
                  With --shard K/N every stage works on its shard's buckets, the merge included; run the \
                  merge once more without --shard when every shard is done.\n\
                  Exit codes: 0 ok, 1 a stage left failed units (see the failures table), 2 error, 130/143 stopped \
                  by SIGINT/SIGTERM (finished buckets kept; a rerun does the rest)."
)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Corpus file or folder: ingest it first (without it the index's documents are taken as
    /// they are, and the run starts at chunk).
    #[arg(long, env = "FLEXSTRUCT_CORPUS", value_name = "PATH")]
    corpus: Option<PathBuf>,
    /// With --corpus: also remove the shard's documents that are not in it.
    #[arg(long, requires = "corpus")]
    prune: bool,
    /// Start at this stage (the earlier ones are taken as they are).
    #[arg(long, value_name = "STAGE", value_parser = stage)]
    from: Option<Stage>,
    /// Build the path index of `--mode paths` after the merge.
    #[arg(long)]
    paths: bool,
    /// Go on after a stage whose units failed (the later stages work on what it finished), and
    /// exit 1 at the end, as `make -k` would.
    #[arg(long)]
    keep_going: bool,
    /// Print the stages this command runs, in order, one per line, and exit (scripts that run
    /// the stage binaries one by one take their order from here).
    #[arg(long)]
    list_stages: bool,
}

fn stage(name: &str) -> Result<Stage, String> {
    Stage::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = Stage::ALL.iter().chain(&Stage::OPTIONAL).map(|s| s.name()).collect();
        format!("unknown stage `{name}` (one of {})", names.join(", "))
    })
}

/// The stages to run, in order: from `from` (else ingest with a corpus, chunk without), with the
/// path index after the merge when asked.
fn plan(from: Option<Stage>, corpus: bool, paths: bool) -> Vec<Stage> {
    let first = from.unwrap_or(if corpus { Stage::Ingest } else { Stage::Chunk });
    let mut stages: Vec<Stage> = first.and_after().to_vec();
    if paths || first == Stage::Paths {
        stages.push(Stage::Paths);
    }
    stages
}

fn main() -> ExitCode {
    use clap::CommandFactory;
    // `--list-stages` needs no index: read the flags without requiring it first.
    let lenient = Args::command().mut_arg("location", |a| a.required(false)).get_matches();
    if lenient.get_flag("list_stages") {
        let from = lenient.get_one::<Stage>("from").copied();
        for stage in plan(from, lenient.contains_id("corpus"), lenient.get_flag("paths")) {
            println!("{}", stage.name());
        }
        return ExitCode::SUCCESS;
    }
    exit(run(Args::parse()))
}

fn run(args: Args) -> anyhow::Result<Outcome> {
    let stages = plan(args.from, args.corpus.is_some(), args.paths);
    let common = &args.common;
    if stages.contains(&Stage::Ingest) && args.corpus.is_none() {
        anyhow::bail!("the run starts at ingest: give the corpus with --corpus");
    }
    let mut failed = false;
    for &stage in &stages {
        let outcome = match (stage, &args.corpus) {
            (Stage::Ingest, Some(corpus)) => {
                // A corpus that cannot be read must not leave a new, empty index folder behind.
                if let Err(e) = std::fs::metadata(corpus) {
                    anyhow::bail!("corpus {}: cannot be read: {e}", corpus.display());
                }
                let options = IngestOptions { corpus: corpus.clone(), prune: args.prune };
                run_stage(stage.name(), common, true, |ctx, config| compose::ingest(ctx, config, &options))?
            }
            _ => run_stage(stage.name(), common, false, |ctx, config| compose::run_stage(stage, ctx, config))?,
        };
        if outcome == Outcome::Partial {
            failed = true;
            if !args.keep_going {
                say!("index: stopped after {}: some of its units failed; rerun to retry them and go on", stage.name());
                return Ok(Outcome::Partial);
            }
        }
    }
    Ok(if failed { Outcome::Partial } else { Outcome::Ok })
}
