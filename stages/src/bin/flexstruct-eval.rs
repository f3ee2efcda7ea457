//! `flexstruct-eval`: answers a question set under several retrieval variants and scores it
//! (EM, F1, GE with an LLM judge, answer/evidence/document recall, context tokens, latency);
//! runs the ablation table and sensitivity sweeps; prints the cost table of an index.
//! Flags and printing only: the evaluations are `flexstruct_pipeline::eval::suite`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use flexstruct_pipeline::compose::Sibling;
use flexstruct_pipeline::config::Mode;
use flexstruct_pipeline::eval::runs::Parameter;
use flexstruct_pipeline::eval::suite::{self, Observer, Setup, Split};
use flexstruct_pipeline::eval::{Stats, cost};
use flexstruct_pipeline::io::Index;
use flexstruct_pipeline::io::sql::OutputFormat;
use flexstruct_stages::{ConfigArg, Outcome, ThreadsArg, exit};

/// Evaluates retrieval strategies on a question set (`{id, question, answers, type, doc_ids,
/// evidence}` per line) over an index built from its corpus.
#[derive(Debug, Parser)]
#[command(version, after_help = "Exit codes: 0 ok, 2 error.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    threads: ThreadsArg,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Every given mode side by side.
    Run(RunArgs),
    /// The ablation table: the fused assembly's pieces, then the paper's module toggles on the
    /// index, and w/o SW on a sibling index rebuilt with the sliding window off.
    Ablate(Common),
    /// A sensitivity sweep of N_EH, N_E (query time) or τ_s, τ_e (sibling indexes rebuilt from
    /// the affected stage).
    Sweep(SweepArgs),
    /// The cost table (LLM tokens and seconds per stage, stage wall time) of an index.
    Cost {
        /// Index folder.
        #[arg(long, env = "FLEXSTRUCT_INDEX")]
        index: PathBuf,
    },
}

#[derive(Debug, Args)]
struct Common {
    /// Index folder (built from the question set's corpus).
    #[arg(long, env = "FLEXSTRUCT_INDEX")]
    index: PathBuf,
    /// Questions file, or a folder holding questions.jsonl.
    #[arg(long)]
    questions: PathBuf,
    /// Output folder (results.jsonl, results.parquet, summary.json, report.md, charts).
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    config: ConfigArg,
    /// Cap every variant's context at this many tokens, each filling it (taking evidence until the
    /// cap is full), so that variants use the same budget (0: no cap; unset: query.max_context_tokens,
    /// without filling).
    #[arg(long, env = "FLEXSTRUCT_MAX_CONTEXT_TOKENS")]
    max_context_tokens: Option<usize>,
    /// Which half of the questions: all, tune or test (fixed by a stable hash of the question id).
    #[arg(long, default_value = "all", env = "FLEXSTRUCT_SPLIT")]
    split: Split,
    /// Only the first N questions (quick runs).
    #[arg(long)]
    limit: Option<usize>,
}

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    common: Common,
    /// Comma-separated modes (default: those `flexstruct-query --list-modes` marks with `*`,
    /// every strategy but `paths`, whose index `make paths` builds).
    #[arg(long, value_delimiter = ',')]
    modes: Vec<Mode>,
    /// Also run every mode capped at hybrid's mean context tokens and filling them, so that
    /// strategies are compared at an equal budget (labels `<mode> @<tokens>`).
    #[arg(long)]
    equal_budget: bool,
}

#[derive(Debug, Args)]
struct SweepArgs {
    #[command(flatten)]
    common: Common,
    /// n_eh, n_e, tau_s, tau_e or n_b.
    #[arg(long)]
    param: String,
    /// Comma-separated values (default: a range around the paper's value).
    #[arg(long, value_delimiter = ',')]
    values: Vec<usize>,
}

fn main() -> ExitCode {
    exit(run(Cli::parse()))
}

/// Prints a line per evaluated variant and per rebuilt sibling index.
struct Printer;

fn fmt(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{v:.2}"))
}

impl Observer for Printer {
    fn evaluated(&self, label: &str, s: &Stats) {
        flexstruct_stages::say!(
            "eval: {:<28} answer recall {:>6}  token recall {:>6}  F1 {:>6}  context {:>7} tokens  retrieval p50 {:>6} ms",
            label,
            fmt(s.answer_recall),
            fmt(s.answer_token_recall),
            fmt(s.f1),
            fmt(s.context_tokens_mean),
            fmt(s.retrieval_ms_p50)
        );
    }

    fn sibling(&self, sibling: &Sibling) {
        let done: Vec<String> = sibling
            .runs
            .iter()
            .map(|m| format!("{} {:.1} s ({} done, {} up to date)", m.stage, m.seconds, m.units_done, m.units_skipped))
            .collect();
        flexstruct_stages::say!(
            "eval: sibling index {} rebuilt in {:.1} s: {}",
            sibling.index.root().display(),
            sibling.seconds,
            done.join(", ")
        );
    }
}

fn setup(c: &Common) -> anyhow::Result<Setup> {
    let mut config = c.config.load()?;
    if let Some(max) = c.max_context_tokens {
        config.query.max_context_tokens = max;
        config.query.fill = max > 0;
        config.validate()?;
    }
    Ok(Setup::new(&c.index, &c.questions, config, c.split, c.limit)?)
}

fn run(cli: Cli) -> anyhow::Result<Outcome> {
    cli.threads.init()?;
    let report = match cli.command {
        Command::Run(args) => {
            let modes = match args.modes.as_slice() {
                [] => Mode::ALL.iter().copied().filter(|m| m.compared_by_default()).collect(),
                given => given.to_vec(),
            };
            suite::compare(&setup(&args.common)?, &modes, args.equal_budget, &args.common.out, &Printer)?
        }
        Command::Ablate(args) => suite::ablate(&setup(&args)?, &args.out, &Printer)?,
        Command::Sweep(args) => {
            let param = Parameter::parse(&args.param)?;
            suite::sweep(&setup(&args.common)?, param, &args.values, &args.common.out, &Printer)?
        }
        Command::Cost { index } => {
            flexstruct_stages::print_stdout(&cost::cost_table(&Index::open(&index)?, OutputFormat::Table)?)?;
            return Ok(Outcome::Ok);
        }
    };
    flexstruct_stages::say!("eval: report {}", report.report.display());
    // A configured step that did not work is said loudly and in the exit code, after the
    // results (labelled with what happened) are written.
    let answers = match (report.answers_asked, report.answers_failed) {
        (_, 0) => Outcome::Ok,
        (asked, failed) if failed == asked => anyhow::bail!(
            "the LLM never answered: all {asked} answers failed ({}); the report scores them 0 — rerun to \
             ask them again",
            report.answer_failure.as_deref().unwrap_or("no reason recorded")
        ),
        (asked, failed) => {
            flexstruct_stages::say!(
                "eval: the LLM failed to give {failed} of {asked} answers ({}); they score 0 in the report \
                 and a rerun asks for them again",
                report.answer_failure.as_deref().unwrap_or("no reason recorded")
            );
            Outcome::Partial
        }
    };
    match (report.rerank_asked, report.rerank_failed) {
        (_, 0) => Ok(answers),
        (asked, failed) if failed == asked => anyhow::bail!(
            "re-ranking never worked: it failed for all {asked} questions it was asked for ({}); the report \
             gives the strategies' own order, not labelled +rerank",
            report.rerank_failure.as_deref().unwrap_or("no reason recorded")
        ),
        (asked, failed) => {
            flexstruct_stages::say!(
                "eval: re-ranking failed for {failed} of {asked} questions ({}); they keep the strategy's own \
                 order and are counted in the report",
                report.rerank_failure.as_deref().unwrap_or("no reason recorded")
            );
            Ok(Outcome::Partial)
        }
    }
}
