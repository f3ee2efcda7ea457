//! `flexstruct-sql`: read-only SQL over the tables of an index.

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use flexstruct_pipeline::core::threads;
use flexstruct_pipeline::io::sql::{IndexSql, OutputFormat, SqlLimits, format_batches};
use flexstruct_pipeline::io::{Index, IndexLocation, RemoteIndex};
use flexstruct_stages::{IndexArg, Outcome, ThreadsArg, exit, print_stdout};

/// Runs SQL over an index: tables `documents`, `chunks`, …, `failures`, `manifest`, and the
/// merged `kb.entities`, `kb.hyperedges`, …. Read-only.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "The query comes from the argument, else --file, else standard input.\n\
                  Example: flexstruct-sql --index data/indexes/sample \
                  \"SELECT doc_id, count(*) AS chunks FROM chunks GROUP BY doc_id\"\n\
                  Exit codes: 0 ok, 2 error (including a refused statement or one over a limit)."
)]
struct Args {
    /// The index (an `s3://` one is read in place).
    #[command(flatten)]
    index: IndexArg,
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
    /// Memory a statement may use, in MiB: DataFusion's pool for joins, sorts, aggregations and
    /// recursive queries, and separately the rows it returns.
    #[arg(long, env = "FLEXSTRUCT_SQL_MEMORY_MB", value_name = "MIB", default_value_t = 2048, value_parser = clap::value_parser!(u64).range(1..))]
    memory_limit: u64,
    /// Seconds a statement may run.
    #[arg(long, env = "FLEXSTRUCT_SQL_TIMEOUT", value_name = "SECONDS", default_value_t = 300.0)]
    timeout: f64,
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
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        bail!("--timeout: expected a number of seconds above 0, got {}", args.timeout);
    }
    let limits = SqlLimits {
        memory_bytes: usize::try_from(args.memory_limit.saturating_mul(1 << 20)).unwrap_or(usize::MAX),
        timeout: Duration::from_secs_f64(args.timeout),
    };
    let results = threads::runtime()?.block_on(async {
        let session = match &args.index.location {
            IndexLocation::Local(path) => IndexSql::open_limited(&Index::open(path)?, Some(limits)).await?,
            IndexLocation::Remote(url) => IndexSql::open_remote(&RemoteIndex::open(url)?, Some(limits)).await?,
        };
        session.run(&sql).await
    })?;
    let mut stdout = String::new();
    for (i, batches) in results.iter().enumerate() {
        if i > 0 && args.format == OutputFormat::Table {
            stdout.push('\n');
        }
        stdout.push_str(&format_batches(batches, args.format, args.max_width)?);
    }
    print_stdout(&stdout)?;
    Ok(Outcome::Ok)
}
