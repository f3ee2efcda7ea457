//! `flexstruct-paths`: `kb/entities`, `kb/edges` → the path index of `--mode paths` (SG-RAG);
//! with `--ablate-dominance`, the two dominant embeddings measured on the kb's graph instead.

use std::process::ExitCode;

use clap::Parser;
use flexstruct_pipeline::compose;
use flexstruct_pipeline::io::{Index, Selection};
use flexstruct_pipeline::stages::paths::{self, DominanceAblation};
use flexstruct_stages::{CommonArgs, Outcome, exit, print_stdout, run_stage};

/// Builds the path index of structure-guided retrieval (--mode paths) from the merged kb: one
/// node per entity name, its label embedding and dominant embedding (paths.dominance: sketch or
/// gat), and the paths of 1 to paths.max_length edges (kb/path_encoder, kb/path_nodes, kb/paths,
/// kb/path_members). Run it after a merge; it does nothing when the kb has not changed.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "Exit codes: 0 ok, 1 some units failed (see the failures table), 2 error, 130/143 stopped by \
                  SIGINT/SIGTERM.\nExamples:\n  \
                  flexstruct-paths --index data/indexes/sample\n  \
                  flexstruct-paths --index data/indexes/sample --ablate-dominance"
)]
struct Args {
    /// Flags every stage takes.
    #[command(flatten)]
    common: CommonArgs,
    /// Write nothing: train the GAT encoder ([paths.gat]) on the kb's graph, encode every node
    /// with it and with the sketch, and print how often each breaks dominance on drawn query
    /// stars (false negatives of the structural filter) and how much of the graph each prunes.
    #[arg(long)]
    ablate_dominance: bool,
    /// With --ablate-dominance: print JSON instead of a table.
    #[arg(long, requires = "ablate_dominance")]
    json: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.ablate_dominance {
        exit(ablate(&args))
    } else {
        exit(run_stage(paths::STAGE, &args.common, false, compose::paths))
    }
}

fn ablate(args: &Args) -> anyhow::Result<Outcome> {
    args.common.threads.init()?;
    let config = args.common.config.load()?;
    let kb_tables: Vec<_> = flexstruct_schemas::Table::ALL.into_iter().filter(|t| t.is_kb()).collect();
    let local = args.common.index.location.open_local(Selection::Tables(&kb_tables), false)?;
    let rows = paths::ablate_dominance(&Index::open(local.path())?, &config.paths)?;
    if args.json {
        print_stdout(&(serde_json::to_string_pretty(&rows)? + "\n"))?;
    } else {
        print_stdout(&table(&rows))?;
    }
    Ok(Outcome::Ok)
}

fn table(rows: &[DominanceAblation]) -> String {
    let mut out = String::from(
        "| dominance | train s | encode s | query stars | violations % | wildcard stars | pruned % | prunable % | missed % |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        out += &format!(
            "| {} | {:.1} | {:.1} | {} | {:.2} | {} | {:.2} | {:.2} | {:.2} |\n",
            r.dominance,
            r.train_seconds,
            r.encode_seconds,
            r.stars,
            r.violations_pct,
            r.queries,
            r.pruned_pct,
            r.prunable_pct,
            r.missed_pct
        );
    }
    out
}
