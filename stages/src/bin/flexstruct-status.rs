//! `flexstruct-status`: where an index stands, stage by stage — what to check between cluster jobs.

use std::process::ExitCode;

use clap::Parser;
use flexstruct_pipeline::compose::{self, IndexStatus};
use flexstruct_pipeline::io::{Index, IndexLocation, Selection, Shard};
use flexstruct_pipeline::stages::merge::KbState;
use flexstruct_stages::{ConfigArg, IndexArg, Outcome, ThreadsArg, exit, print_stdout};

/// Shows, per per-document stage, how many buckets are up to date, stale (computed from other
/// inputs or settings), missing, failed or orphaned (rows of removed documents) — exactly what the
/// stage's next run would skip, redo, compute, retry or remove — what a merge would do, and the
/// failed units. Reads only listings and Parquet footers; writes nothing.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "Exit codes: 0 everything up to date (the next `make index` would do nothing), 1 something to do or \
                  failed units, 2 error.\nExample: flexstruct-status --index data/indexes/sample"
)]
struct Args {
    /// The index (an `s3://` one is fetched into a temporary working copy).
    #[command(flatten)]
    index: IndexArg,
    /// The configuration the stages run with: a bucket is stale under another one.
    #[command(flatten)]
    config: ConfigArg,
    /// Survey only the buckets of this shard (K/N, auto or auto/N, as the stages take it).
    #[arg(long, env = "FLEXSTRUCT_SHARD", value_name = "K/N|auto|auto/N", default_value = "0/1")]
    shard: Shard,
    /// Print the status as one JSON object instead.
    #[arg(long)]
    json: bool,
    /// Failed units listed (all are in the JSON and in the failures table).
    #[arg(long, default_value_t = 20, value_name = "N")]
    show: usize,
    #[command(flatten)]
    threads: ThreadsArg,
}

fn main() -> ExitCode {
    exit(run(Args::parse()))
}

fn run(args: Args) -> anyhow::Result<Outcome> {
    args.threads.init()?;
    let config = args.config.load()?;
    let local = args.index.location.open_local(Selection::Everything, false)?;
    let index = Index::open(local.path())?;
    let status = compose::status(&index, &config, args.shard)?;
    if args.json {
        print_stdout(&(serde_json::to_string_pretty(&status)? + "\n"))?;
    } else {
        print_stdout(&for_a_person(&status, &args.index.location, args.show))?;
    }
    Ok(if status.complete() { Outcome::Ok } else { Outcome::Partial })
}

fn for_a_person(status: &IndexStatus, location: &IndexLocation, show: usize) -> String {
    let mut out = String::new();
    let shard = if status.shard == "0/1" { String::new() } else { format!(", shard {}", status.shard) };
    out += &format!(
        "index {location}: {} documents in {} of {} buckets{shard}\n\n",
        status.documents, status.buckets_with_documents, status.buckets_surveyed,
    );
    out += &format!(
        "{:<11} {:>10} {:>6} {:>8} {:>7} {:>9}  buckets to do\n",
        "stage", "up to date", "stale", "missing", "failed", "orphaned"
    );
    for s in &status.stages {
        let to_do: Vec<String> = s.to_do.iter().map(|b| format!("{b:04}")).collect();
        let more = if s.stale + s.missing + s.failed + s.orphaned > s.to_do.len() { ", …" } else { "" };
        let line = format!(
            "{:<11} {:>10} {:>6} {:>8} {:>7} {:>9}  {}{more}",
            s.stage,
            s.up_to_date,
            s.stale,
            s.missing,
            s.failed,
            s.orphaned,
            to_do.join(", ")
        );
        out += line.trim_end();
        out.push('\n');
    }
    out += &match &status.kb {
        KbState::UpToDate => "\nkb: up to date (merged from exactly these tables)\n".to_owned(),
        KbState::Stale(reasons) => {
            format!("\nkb: stale: a merge would rebuild (`make merge`):\n  {}\n", reasons.join("\n  "))
        }
        KbState::Missing => "\nkb: not merged yet (`make merge`)\n".to_owned(),
        KbState::Incomplete(problems) => {
            format!("\nkb: a merge would be refused until the stages finish:\n  {}\n", problems.join("\n  "))
        }
    };
    for damaged in &status.damaged {
        out += &format!("damaged: {damaged}\n");
    }
    if status.failures.is_empty() {
        out += "failures: none\n";
    } else {
        out += &format!("failures: {} units (a rerun of their stage retries them)\n", status.failures.len());
        for f in status.failures.iter().take(show) {
            let doc = f.doc_id.as_deref().unwrap_or("-");
            out += &format!("  {:<10} {doc}  {}  {}: {}\n", f.stage, f.unit, f.kind, f.message);
        }
        if status.failures.len() > show {
            out += &format!("  … and {} more (--json, or SELECT * FROM failures)\n", status.failures.len() - show);
        }
    }
    out
}
