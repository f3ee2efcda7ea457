//! `flexstruct-sql`: read-only SQL over the tables of an index.

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Parser;
use flexstruct_pipeline::core::threads;
use flexstruct_pipeline::io::Index;
use flexstruct_pipeline::io::sql::{IndexSql, OutputFormat, format_batches};
use flexstruct_stages::{Outcome, ThreadsArg, exit};

/// Runs SQL over an index: tables `documents`, `chunks`, …, `failures`, `manifest`, and the
/// merged `kb.entities`, `kb.hyperedges`, …. Read-only.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "The query comes from the argument, else --file, else standard input.\n\
                  Example: flexstruct-sql --index data/indexes/sample \
                  \"SELECT doc_id, count(*) AS chunks FROM chunks GROUP BY doc_id\"\n\
                  Exit codes: 0 ok, 2 error (including a refused statement)."
)]
struct Args {
    /// Index folder.
    #[arg(long, env = "FLEXSTRUCT_INDEX", value_name = "DIR")]
    index: PathBuf,
    /// SQL to run (several statements may be separated by `;`).
    query: Option<String>,
    /// Read the SQL from this file.
    #[arg(long, short, value_name = "FILE", conflicts_with = "query")]
    file: Option<PathBuf>,
    /// Output format: table, csv, json, jsonl.
    #[arg(long, default_value = "table")]
    format: OutputFormat,
    /// In the table format, cut values longer than this many characters (0: never).
    #[arg(long, default_value_t = 60)]
    max_width: usize,
    #[command(flatten)]
    threads: ThreadsArg,
}

fn main() -> ExitCode {
    exit(run(Args::parse()))
}

fn run(args: Args) -> anyhow::Result<Outcome> {
    args.threads.init()?;
    let sql = match (&args.query, &args.file) {
        (Some(q), _) => q.clone(),
        (None, Some(f)) => std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?,
        (None, None) if !std::io::stdin().is_terminal() => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s).context("reading the query from standard input")?;
            s
        }
        (None, None) => bail!("no query: give it as an argument, with --file, or on standard input"),
    };
    let index = Index::open(&args.index)?;
    let results = threads::runtime()?.block_on(async {
        let session = IndexSql::open(&index).await?;
        session.run(&sql).await
    })?;
    let mut stdout = String::new();
    for (i, batches) in results.iter().enumerate() {
        if i > 0 && args.format == OutputFormat::Table {
            stdout.push('\n');
        }
        stdout.push_str(&format_batches(batches, args.format, args.max_width)?);
    }
    print!("{stdout}");
    Ok(Outcome::Ok)
}
