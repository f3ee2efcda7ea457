//! Glue shared by the stage binaries: common flags, the progress bar, the run summary, exit
//! codes, and the hints that say what to do about an error (the library says what is wrong;
//! only the binaries know the Makefile). All logic lives in `flexstruct-pipeline`.
//!
//! Exit codes of every stage binary:
//! - `0`: done, nothing failed;
//! - `1`: done, but some units failed (each is a row in the `failures` table and is retried by
//!   the next run);
//! - `2`: nothing was done: bad flags, bad configuration, unusable index or input;
//! - `130` / `143`: stopped by SIGINT / SIGTERM (what Slurm sends before a time limit or a
//!   preemption): the buckets finished are kept, the one in progress is abandoned and its
//!   temporary files removed; a rerun does the rest.
#![warn(missing_docs)]

/// Every stage binary allocates with mimalloc. With glibc's allocator, the tensors MiniLM creates
/// and drops by the thousand went back to the system and came back as fresh pages that the
/// kernel had to fault in and zero (a tenth of the embed stage's time); mimalloc keeps them for
/// reuse: 15–20 % more texts a second, the same vectors (CHANGELOG.md, measurement history).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use flexstruct_pipeline::config::{Config, QueryConfig};
use flexstruct_pipeline::core::{Error, IndexProblem, threads};
use flexstruct_pipeline::io::{Index, IndexLocation, Selection, Shard, StageMetrics, record_run};
use flexstruct_pipeline::stages::{Progress, RunContext, merge, paths};
use flexstruct_schemas::{SchemaError, Table};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

/// `eprintln!` that never panics: a message for a closed stderr (a pipe whose reader is gone) is
/// dropped, as Unix tools do, instead of aborting the run with a panic.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// Writes `text` to stdout. A reader that went away (`… | head -2`) ends the process quietly
/// with exit code 0, as Unix tools do; other write errors are returned.
pub fn print_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => Ok(other?),
    }
}

/// `--index`, as every binary that works on one index takes it.
#[derive(Debug, Clone, clap::Args)]
pub struct IndexArg {
    /// Index folder, or `s3://bucket/prefix` on object storage (credentials and endpoint from the
    /// AWS_* variables).
    #[arg(long = "index", env = "FLEXSTRUCT_INDEX", value_name = "DIR|s3://BUCKET/PREFIX")]
    pub location: IndexLocation,
}

/// `--config`, as every binary that reads the pipeline configuration takes it.
#[derive(Debug, Clone, clap::Args)]
pub struct ConfigArg {
    /// Pipeline configuration (TOML); `FLEXSTRUCT_<SECTION>__<KEY>` variables override it
    /// (docs/configuration.md lists every key).
    #[arg(long = "config", env = "FLEXSTRUCT_CONFIG", value_name = "FILE")]
    pub file: Option<PathBuf>,
}

impl ConfigArg {
    /// The configuration: defaults, the file, the environment.
    pub fn load(&self) -> anyhow::Result<Config> {
        Ok(Config::load(self.file.as_deref())?)
    }

    /// The configuration with `overrides` (a JSON object of sections and keys) on top.
    pub fn load_with(&self, overrides: serde_json::Value) -> anyhow::Result<Config> {
        Ok(Config::load_with(self.file.as_deref(), overrides)?)
    }
}

/// The `[query]` keys given on the command line (or in a flag's own environment variable) of a
/// binary that flattens [`QueryConfig`] into its arguments, as `{"query": {…}}` for
/// [`ConfigArg::load_with`]: only those, so that every other key keeps the value of the file and
/// the environment.
pub fn query_overrides(matches: &clap::ArgMatches, parsed: &QueryConfig) -> anyhow::Result<serde_json::Value> {
    use clap::parser::ValueSource;
    let mut keys = serde_json::Map::new();
    if let serde_json::Value::Object(all) = serde_json::to_value(parsed)? {
        for (key, value) in all {
            let given = matches.try_get_raw(&key).is_ok()
                && matches!(matches.value_source(&key), Some(ValueSource::CommandLine | ValueSource::EnvVariable));
            if given {
                keys.insert(key, value);
            }
        }
    }
    Ok(serde_json::json!({ "query": keys }))
}

/// Flags every stage binary takes; each has an environment twin.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// The index (created by ingest; the other stages need it to exist).
    #[command(flatten)]
    pub index: IndexArg,
    /// The pipeline configuration.
    #[command(flatten)]
    pub config: ConfigArg,
    /// Process only the documents whose stable hash mod N is K (N must divide the index's
    /// bucket count); shards can run as separate jobs. `auto`: K and N of the Slurm array task
    /// this runs in; `auto/N`: K of the Slurm array task or Kubernetes Indexed Job, of N.
    #[arg(long, env = "FLEXSTRUCT_SHARD", value_name = "K/N|auto|auto/N", default_value = "0/1")]
    pub shard: Shard,
    /// No progress bar and no summary (failures and errors are still reported).
    #[arg(long, short, env = "FLEXSTRUCT_QUIET")]
    pub quiet: bool,
    /// How many threads the run uses.
    #[command(flatten)]
    pub threads: ThreadsArg,
}

/// The `--threads` flag every binary takes.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct ThreadsArg {
    /// Threads for parallel work (0 or unset: every core, or RAYON_NUM_THREADS).
    #[arg(long, env = "FLEXSTRUCT_THREADS", value_name = "N")]
    pub threads: Option<usize>,
}

impl ThreadsArg {
    /// Sizes the process's thread pools, and says so when the ask was cut to the cores
    /// available.
    pub fn init(self) -> anyhow::Result<()> {
        if let Some(note) = threads::init(self.threads)?.note {
            say!("note: {note}");
        }
        Ok(())
    }
}

/// Flags of a stage that reads and writes only index tables (every stage but ingest).
#[derive(Debug, Clone, clap::Parser)]
#[command(
    version,
    after_help = "Exit codes: 0 ok, 1 some units failed (see the failures table), 2 error, 130/143 stopped by \
                  SIGINT/SIGTERM (finished buckets kept; a rerun does the rest)."
)]
pub struct TableStageArgs {
    /// Flags every stage takes.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// The whole `main` of a table-to-table stage binary: parse the common flags (the help shows
/// `about`), run the stage, map the outcome to the exit code.
pub fn table_stage_main<D: Serialize>(
    name: &str,
    about: &'static str,
    body: impl FnOnce(&RunContext<'_>, &Config) -> flexstruct_pipeline::Result<StageMetrics<D>>,
) -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    let matches = TableStageArgs::command().bin_name(format!("flexstruct-{name}")).about(about).get_matches();
    match TableStageArgs::from_arg_matches(&matches) {
        Ok(args) => exit(run_stage(name, &args.common, false, body)),
        Err(e) => e.exit(),
    }
}

/// Outcome of a binary's work, mapped to an exit code by [`exit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything completed.
    Ok,
    /// Completed, but some units failed and were recorded.
    Partial,
}

/// Runs a binary's body and turns its result into the documented exit code.
pub fn exit(result: anyhow::Result<Outcome>) -> ExitCode {
    match result {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::Partial) => ExitCode::from(1),
        Err(e) => {
            say!("error: {}", flexstruct_pipeline::core::chain_message(e.as_ref()));
            if let Some(hint) = hint(&e) {
                say!("hint: {hint}");
            }
            ExitCode::from(2)
        }
    }
}

/// What to do about an error, where the binaries know better than the library (which make
/// target builds what is missing).
pub fn hint(error: &anyhow::Error) -> Option<String> {
    for cause in error.chain() {
        if let Some(e) = cause.downcast_ref::<Error>() {
            let hint = match e {
                Error::Index { problem, .. } => match problem {
                    IndexProblem::NotAnIndex(_) => {
                        "create it by running the ingest stage first (`make ingest CORPUS=… INDEX=…`)"
                    }
                    IndexProblem::Damaged(_) => {
                        "index.json was written by this program; restore it or build the index anew"
                    }
                    IndexProblem::BucketsFixed { .. } => "use a new index folder for another bucket count",
                    IndexProblem::NoKb => "build it with `make index` (or run `make merge` after the other stages)",
                    IndexProblem::IncompleteKb { .. } | IndexProblem::MixedKb { .. } => "re-run `make merge`",
                    IndexProblem::StagesIncomplete { .. } => {
                        "run the stages before merging again (`make index` redoes only what is not up to date)"
                    }
                    IndexProblem::MissingVectors { .. } => {
                        "run `make embed merge` with that model, or query with the model the index was embedded with"
                    }
                    IndexProblem::NoPathIndex { .. } => "build it with `make paths` (flexstruct-paths) after the merge",
                    IndexProblem::ModelMismatch { .. } => {
                        "query with the index's model (embed.model), or re-run `make embed merge` with the configured one"
                    }
                },
                Error::ModelMissing { path, .. }
                    if path.extension().is_some_and(|e| e == "onnx")
                        || path.file_name().is_some_and(|f| f.to_string_lossy().starts_with("libonnxruntime")) =>
                {
                    "run `make onnx` to fetch ONNX Runtime and write MiniLM's graph (embed.runtime = \"onnx\")"
                }
                Error::ModelMissing { .. } => "run `make model` to fetch and verify all-MiniLM-L6-v2",
                Error::Schema(SchemaError::Version { .. }) => {
                    "the table was written by another version of flexstruct: rerun the stage that writes it (make <stage>)"
                }
                Error::Parquet { path, op, .. }
                    if op.starts_with("reading")
                        && path.parent().and_then(|p| p.file_name()).is_some_and(|d| d == Table::Documents.dir()) =>
                {
                    "this part's documents cannot be read: move it aside (it may be restored later) and ingest the \
                     corpus again (`make index`) to read them anew; documents the corpus no longer holds are lost \
                     unless the file is restored; `flexstruct-status` lists every damaged part"
                }
                Error::Parquet { op, .. } if op.starts_with("reading") => {
                    "a damaged part: `make index` has the stage that writes it redo its bucket; `flexstruct-status` \
                     lists every damaged part"
                }
                Error::StageFailed { .. } => "rerun to retry the failed units; `SELECT * FROM failures` lists them",
                e if e.is_resources_exhausted() => {
                    "raise --memory-limit (MiB), or narrow the query (WHERE, LIMIT, fewer joins)"
                }
                _ => continue,
            };
            return Some(hint.to_owned());
        }
    }
    None
}

/// An indicatif progress bar on stderr (drawn only on a terminal, and not with `--quiet`), with
/// LLM token counters and, when prices are configured, the cost so far.
#[derive(Debug)]
pub struct Bar {
    bar: ProgressBar,
    prompt: AtomicU64,
    completion: AtomicU64,
    /// Price per million prompt and completion tokens.
    prices: (f64, f64),
}

impl Bar {
    /// A bar for `stage`.
    pub fn new(stage: &str, quiet: bool, prices: (f64, f64)) -> Bar {
        let target = if quiet || !std::io::stderr().is_terminal() {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        };
        let bar = ProgressBar::with_draw_target(None, target);
        let style =
            ProgressStyle::with_template("{prefix:>10} [{elapsed_precise}] {wide_bar} {pos}/{len} (ETA {eta}) {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_prefix(stage.to_owned());
        bar.enable_steady_tick(Duration::from_millis(200));
        Bar { bar, prompt: AtomicU64::new(0), completion: AtomicU64::new(0), prices }
    }

    /// Removes the bar from the terminal.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Progress for Bar {
    fn start(&self, total: u64) {
        self.bar.set_length(total);
    }
    fn advance(&self, n: u64) {
        self.bar.inc(n);
    }
    fn tokens(&self, prompt: u64, completion: u64) {
        let p = self.prompt.fetch_add(prompt, Ordering::Relaxed) + prompt;
        let c = self.completion.fetch_add(completion, Ordering::Relaxed) + completion;
        let cost = (p as f64 * self.prices.0 + c as f64 * self.prices.1) / 1e6;
        let cost = if cost > 0.0 { format!(", {cost:.4} spent") } else { String::new() };
        self.bar.set_message(format!("LLM tokens {p} in / {c} out{cost}"));
    }
}

/// Exit code of a run stopped by SIGINT (128 + 2, as shells report it).
pub const EXIT_SIGINT: i32 = 130;
/// Exit code of a run stopped by SIGTERM (128 + 15).
pub const EXIT_SIGTERM: i32 = 143;

/// From the first call on, SIGTERM (what Slurm sends before a time limit or a preemption, and
/// `scancel`) and SIGINT (Ctrl-C) stop the process cleanly: every part is written through a
/// temporary file renamed into place, so a finished bucket is whole on disk and the one in
/// progress has written nothing but temporary files, which are removed; the process then exits
/// with [`EXIT_SIGTERM`] or [`EXIT_SIGINT`] and a rerun does what is left. (On an `s3://` index
/// the working copy is pushed only at the end of a run: a stopped run's work is redone.)
pub fn stop_cleanly_on_signals() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let listening = std::sync::Arc::new(std::sync::Barrier::new(2));
        let ready = listening.clone();
        let spawned = std::thread::Builder::new().name("signals".into()).spawn(move || {
            use tokio::signal::unix::{SignalKind, signal};
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_io().build() else {
                ready.wait();
                return;
            };
            runtime.block_on(async move {
                let handlers = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()));
                ready.wait();
                let (Ok(mut term), Ok(mut int)) = handlers else { return };
                let (name, code) = tokio::select! {
                    _ = term.recv() => ("SIGTERM", EXIT_SIGTERM),
                    _ = int.recv() => ("SIGINT", EXIT_SIGINT),
                };
                let removed = flexstruct_pipeline::io::files::remove_live_temps();
                say!(
                    "stopped by {name}: the buckets finished are kept; the work in progress was abandoned ({removed} \
                     temporary files removed); a rerun does the rest"
                );
                std::process::exit(code);
            });
        });
        // Handlers are in place before the run begins (or there are none, and signals kill).
        if spawned.is_ok() {
            listening.wait();
        }
    });
}

/// Loads the configuration and opens (or, for ingest, creates) the index at `root`.
pub fn open(args: &CommonArgs, root: &Path, create: bool) -> anyhow::Result<(Config, Index)> {
    let config = args.config.load()?;
    let index = if create { Index::open_or_create(root, config.index.buckets)? } else { Index::open(root)? };
    Ok((config, index))
}

/// Runs a stage body with a progress bar, records the run in the manifest, reports failures and
/// the summary on stderr, and returns the outcome. On a remote index the run works on a working
/// copy of what it reads (the merge: everything; another stage: its shard's buckets) and pushes
/// back what it changed — also when the body failed, so that the units it finished are kept.
pub fn run_stage<D: Serialize>(
    name: &str,
    args: &CommonArgs,
    create_index: bool,
    body: impl FnOnce(&RunContext<'_>, &Config) -> flexstruct_pipeline::Result<StageMetrics<D>>,
) -> anyhow::Result<Outcome> {
    stop_cleanly_on_signals();
    args.threads.init()?;
    let kb_tables: Vec<Table> = Table::ALL.into_iter().filter(|t| t.is_kb()).collect();
    let selection = match (name, args.shard == Shard::ALL) {
        (merge::STAGE, true) => Selection::Everything,
        (merge::STAGE, false) => Selection::MergeShard(args.shard),
        // The path index reads the whole kb (its entities and edges, and every part's footer).
        (paths::STAGE, _) => Selection::Tables(&kb_tables),
        _ => Selection::Shard(args.shard),
    };
    let local = args.index.location.open_local(selection, create_index)?;
    let outcome = run_stage_at(name, args, local.path(), create_index, body);
    if let Some(copy) = local.copy() {
        let pushed =
            copy.push().with_context(|| format!("writing the run's results back to {}", args.index.location))?;
        if !args.quiet {
            say!("{name}: {}: pulled {} objects, {pushed}", args.index.location, copy.pulled());
        }
    }
    outcome
}

fn run_stage_at<D: Serialize>(
    name: &str,
    args: &CommonArgs,
    root: &Path,
    create_index: bool,
    body: impl FnOnce(&RunContext<'_>, &Config) -> flexstruct_pipeline::Result<StageMetrics<D>>,
) -> anyhow::Result<Outcome> {
    let (config, index) = open(args, root, create_index)?;
    index.remove_stale_temps()?;
    let prices = config.llm.as_ref().map_or((0.0, 0.0), |l| (l.price_prompt_per_mtok, l.price_completion_per_mtok));
    let bar = Bar::new(name, args.quiet, prices);
    let ctx = RunContext { index, shard: args.shard, progress: &bar, survey: None };
    let metrics = body(&ctx, &config);
    bar.finish();
    let metrics = metrics?;
    record_run(&ctx.index, &metrics, &config)?;
    report(&metrics, args.quiet)?;
    Ok(if metrics.units_failed > 0 { Outcome::Partial } else { Outcome::Ok })
}

/// Most failures listed on stderr; the rest are in the `failures` table.
const MAX_FAILURES_SHOWN: usize = 20;

fn report<D: Serialize>(m: &StageMetrics<D>, quiet: bool) -> anyhow::Result<()> {
    for f in m.failures.iter().take(MAX_FAILURES_SHOWN) {
        say!("{}: failed: {f}", m.stage);
    }
    if m.failures.len() > MAX_FAILURES_SHOWN {
        say!("{}: … and {} more failures (see the failures table)", m.stage, m.failures.len() - MAX_FAILURES_SHOWN);
    }
    if quiet {
        return Ok(());
    }
    let shard = if m.shard == "0/1" { String::new() } else { format!(" [shard {}]", m.shard) };
    say!(
        "{}{shard}: {} in → {} rows out; {} done, {} up to date, {} failed, {} removed; {:.2} s",
        m.stage,
        m.rows_in,
        m.rows_out,
        m.units_done,
        m.units_skipped,
        m.units_failed,
        m.units_removed,
        m.seconds
    );
    if let serde_json::Value::Object(details) = serde_json::to_value(&m.details)? {
        for (k, v) in &details {
            say!("{}:   {k}: {v}", m.stage);
        }
    }
    Ok(())
}
