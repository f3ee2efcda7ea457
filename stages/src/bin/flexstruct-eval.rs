//! `flexstruct-eval`: answers a question set under several retrieval variants and scores it
//! (EM, F1, GE with an LLM judge, answer/evidence/document recall, context tokens, latency);
//! runs the paper's ablation table and sensitivity sweeps; prints the cost table of an index.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use flexstruct_pipeline::config::{Config, Mode, QueryConfig};
use flexstruct_pipeline::eval::judge::Judge;
use flexstruct_pipeline::eval::report::{self, Header};
use flexstruct_pipeline::eval::runs::{self, Parameter};
use flexstruct_pipeline::eval::{self, QaQuestion, Row, Variant, cost, plot};
use flexstruct_pipeline::index::Index;
use flexstruct_pipeline::query::Engine;
use flexstruct_pipeline::sql::OutputFormat;
use flexstruct_stages::{Outcome, exit};

/// Evaluates retrieval strategies on a question set (`{id, question, answers, type, doc_ids,
/// evidence}` per line) over an index built from its corpus.
#[derive(Debug, Parser)]
#[command(version, after_help = "Exit codes: 0 ok, 2 error.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Every given mode side by side.
    Run(RunArgs),
    /// The paper's ablation table: module toggles on the index, and w/o SW on a sibling index
    /// rebuilt with the sliding window off.
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
    /// Pipeline configuration (TOML); `FLEXSTRUCT_<SECTION>__<KEY>` variables override it.
    #[arg(long, env = "FLEXSTRUCT_CONFIG")]
    config: Option<PathBuf>,
    /// Cap every variant's context at this many tokens (0: no cap; unset: query.max_context_tokens).
    #[arg(long, env = "FLEXSTRUCT_MAX_CONTEXT_TOKENS")]
    max_context_tokens: Option<usize>,
    /// Only the first N questions (quick runs).
    #[arg(long)]
    limit: Option<usize>,
}

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    common: Common,
    /// Comma-separated modes.
    #[arg(long, default_value = "hybrid,hypergraph,graph,chunks,hypergraphrag,none", value_delimiter = ',')]
    modes: Vec<Mode>,
    /// Also run every other mode capped at hybrid's mean context tokens, so that strategies
    /// are compared at an equal budget (labels `<mode> @<tokens>`).
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

fn run(cli: Cli) -> anyhow::Result<Outcome> {
    match cli.command {
        Command::Run(args) => compare(&args),
        Command::Ablate(args) => ablate(&args),
        Command::Sweep(args) => sweep(&args),
        Command::Cost { index } => {
            print!("{}", cost::cost_table(&Index::open(&index)?, OutputFormat::Table)?);
            Ok(Outcome::Ok)
        }
    }
}

/// Configuration, index and questions of a run.
struct Setup {
    config: Config,
    index: Index,
    questions_path: PathBuf,
    qa: Vec<QaQuestion>,
}

fn setup(c: &Common) -> anyhow::Result<Setup> {
    let mut config = Config::load(c.config.as_deref())?;
    if let Some(max) = c.max_context_tokens {
        config.query.max_context_tokens = max;
    }
    let questions_path = if c.questions.is_dir() { c.questions.join("questions.jsonl") } else { c.questions.clone() };
    let mut qa = eval::read_qa(&questions_path)?;
    if let Some(n) = c.limit {
        qa.truncate(n);
    }
    let index = Index::open(&c.index)?;
    Ok(Setup { config, index, questions_path, qa })
}

fn header(s: &Setup, what: &str, engine: &Engine) -> Header {
    let generator = match &s.config.llm {
        Some(l) => format!("LLM `{}` at {} (answers, query entities, GE judge)", l.model, l.base_url),
        None => "offline: extractive answers, rules query entities; GE not measured (no LLM)".to_owned(),
    };
    let budget = match s.config.query.max_context_tokens {
        0 => "no context cap".to_owned(),
        n => format!("context cap {n} tokens (cl100k)"),
    };
    Header {
        title: format!("{what}: {}", s.questions_path.display()),
        settings: vec![
            format!("index `{}` ({}), embedding model `{}`", s.index.root().display(), kb_sizes(engine), engine.kb.model),
            format!("{} questions", s.qa.len()),
            generator,
            budget,
            format!("kb loaded in {:.2} s", engine.load_seconds),
        ],
    }
}

fn kb_sizes(engine: &Engine) -> String {
    engine.kb.sizes().iter().map(|(n, c)| format!("{c} {n}")).collect::<Vec<_>>().join(", ")
}

/// Evaluates variants on one engine, printing a line per variant.
fn evaluate_all(engine: &Engine, qa: &[QaQuestion], variants: &[Variant]) -> anyhow::Result<Vec<Row>> {
    let prepared = eval::prepare(engine, qa)?;
    let judge = engine.runner().map(Judge::new);
    let mut rows = Vec::new();
    for v in variants {
        let mine = eval::evaluate(engine, &prepared, qa, v, judge.as_ref())?;
        let refs: Vec<&Row> = mine.iter().collect();
        let s = eval::stats(&refs, false);
        eprintln!(
            "eval: {:<28} answer recall {:>6}  token recall {:>6}  F1 {:>6}  context {:>7} tokens  retrieval p50 {:>6} ms",
            v.label,
            fmt(s.answer_recall),
            fmt(s.answer_token_recall),
            fmt(s.f1),
            fmt(s.context_tokens_mean),
            fmt(s.retrieval_ms_p50)
        );
        rows.extend(mine);
    }
    engine.record_calls()?;
    Ok(rows)
}

fn as_refs(v: &[(String, Vec<Option<f64>>)]) -> Vec<(&str, Vec<Option<f64>>)> {
    v.iter().map(|(n, ys)| (n.as_str(), ys.clone())).collect()
}

fn fmt(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{v:.2}"))
}

fn with_mode(base: &QueryConfig, mode: Mode) -> QueryConfig {
    QueryConfig { mode, ..base.clone() }
}

fn cost_section(index: &Index) -> anyhow::Result<String> {
    Ok(format!(
        "\n## Cost (paper Table 3)\n\nLLM requests, tokens and seconds per stage from `llm_calls` (each request once), and stage wall time from the manifest:\n\n```text\n{}```\n",
        cost::cost_table(index, OutputFormat::Table)?
    ))
}

fn finish(out: &Path, h: &Header, rows: &[Row], labels: &[String], extra: &str, mut charts: Vec<(String, String)>, title: &str) -> anyhow::Result<Outcome> {
    let summary = eval::summarise(rows, labels);
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut all = report::comparison_charts(out, title, &summary)?;
    all.append(&mut charts);
    let path = report::write(out, h, rows, &summary, extra, &all)?;
    eprintln!("eval: report {}", path.display());
    Ok(Outcome::Ok)
}

/// Chunks the chunk strategy may retrieve when compared at an equal budget.
const EQUAL_BUDGET_CHUNKS: usize = 100;

fn compare(args: &RunArgs) -> anyhow::Result<Outcome> {
    let s = setup(&args.common)?;
    let engine = Engine::open(&s.index, &s.config)?;
    let base = &s.config.query;
    let mut variants: Vec<Variant> = args.modes.iter().map(|m| Variant { label: m.name().to_owned(), config: with_mode(base, *m) }).collect();
    let mut rows = evaluate_all(&engine, &s.qa, &variants)?;
    if args.equal_budget {
        let hybrid: Vec<&Row> = rows.iter().filter(|r| r.variant == "hybrid").collect();
        if hybrid.is_empty() {
            bail!("--equal-budget needs hybrid among --modes");
        }
        let budget = eval::stats(&hybrid, false).context_tokens_mean.unwrap_or(0.0).round() as usize;
        let capped: Vec<Variant> = args
            .modes
            .iter()
            .filter(|m| **m != Mode::None)
            .map(|m| Variant {
                label: format!("{} @{budget}", m.name()),
                // The budget, not the number of chunks, limits the chunk strategy here, so that
                // it can fill the budget when its chunks are short (one-paragraph passages).
                config: QueryConfig { max_context_tokens: budget, chunk_k: base.chunk_k.max(EQUAL_BUDGET_CHUNKS), ..with_mode(base, *m) },
            })
            .collect();
        rows.extend(evaluate_all(&engine, &s.qa, &capped)?);
        variants.extend(capped);
    }
    let labels: Vec<String> = variants.iter().map(|v| v.label.clone()).collect();
    finish(&args.common.out, &header(&s, "Strategies", &engine), &rows, &labels, &cost_section(&s.index)?, Vec::new(), "strategies")
}

/// Where the sibling indexes of an index live.
fn sibling(index: &Index, name: &str) -> PathBuf {
    let root = index.root();
    let file = root.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_else(|| "index".into());
    root.with_file_name(format!("{file}.variants")).join(name)
}

/// A sibling index of `base` under `config`, rebuilt from stage `first`.
fn build_sibling(base: &Index, name: &str, config: &Config, first: &str) -> anyhow::Result<Index> {
    let path = sibling(base, name);
    runs::copy_index(base.root(), &path)?;
    let index = Index::open(&path)?;
    let started = std::time::Instant::now();
    let stages = runs::rebuild(&index, config, first)?;
    let done: Vec<String> = stages.iter().map(|m| format!("{} {:.1} s ({} done, {} up to date)", m.stage, m.seconds, m.units_done, m.units_skipped)).collect();
    eprintln!("eval: sibling index {} rebuilt in {:.1} s: {}", path.display(), started.elapsed().as_secs_f64(), done.join(", "));
    Ok(index)
}

fn ablate(args: &Common) -> anyhow::Result<Outcome> {
    let s = setup(args)?;
    let engine = Engine::open(&s.index, &s.config)?;
    let base = with_mode(&s.config.query, Mode::Hybrid);
    let variants = runs::ablation_variants(&base);
    let mut rows = evaluate_all(&engine, &s.qa, &variants)?;
    let mut labels: Vec<String> = variants.iter().map(|v| v.label.clone()).collect();

    // w/o SW: the paper's FlexStructRAG on the same pipeline with the window off, from
    // extraction on.
    let mut no_sw = s.config.clone();
    no_sw.extract.window = false;
    let sibling_index = build_sibling(&s.index, "no-sw", &no_sw, "extract")?;
    let sibling_engine = Engine::open(&sibling_index, &no_sw)?;
    let paper = Variant { label: "w/o SW".into(), config: QueryConfig { bridges: false, ..base.clone() } };
    rows.extend(evaluate_all(&sibling_engine, &s.qa, std::slice::from_ref(&paper))?);
    labels.insert(2, "w/o SW".into());
    finish(args.out.as_path(), &header(&s, "Ablation (paper Table 2)", &engine), &rows, &labels, &cost_section(&s.index)?, Vec::new(), "ablation")
}

fn sweep(args: &SweepArgs) -> anyhow::Result<Outcome> {
    let s = setup(&args.common)?;
    let param = Parameter::parse(&args.param)?;
    let values = if args.values.is_empty() { param.default_values() } else { args.values.clone() };
    let base_engine = Engine::open(&s.index, &s.config)?;
    let mut rows = Vec::new();
    let mut labels = Vec::new();
    let mut points: Vec<(usize, Vec<String>)> = Vec::new();
    for &value in &values {
        let config = param.apply(&s.config, value);
        let sibling_engine;
        let engine = if param.rebuilds() {
            let first = if param == Parameter::TauS { "hypergraph" } else { "graph" };
            let index = build_sibling(&s.index, &format!("{}-{value}", param.name()), &config, first)?;
            sibling_engine = Engine::open(&index, &config)?;
            &sibling_engine
        } else {
            &base_engine
        };
        let variants: Vec<Variant> = param
            .variants(&config.query)
            .into_iter()
            .map(|v| Variant { label: format!("{}={value} {}", param.name(), v.label), config: v.config })
            .collect();
        rows.extend(evaluate_all(engine, &s.qa, &variants)?);
        let names: Vec<String> = variants.iter().map(|v| v.label.clone()).collect();
        labels.extend(names.iter().cloned());
        points.push((value, names));
    }
    // Curves: each measure of each variant kind against the parameter.
    let summary = eval::summarise(&rows, &labels);
    let stat = |label: &str| summary.iter().find(|(l, _)| l == label).map(|(_, st)| st.clone());
    let xs: Vec<f64> = points.iter().map(|(v, _)| *v as f64).collect();
    let kinds: Vec<String> = param.variants(&s.config.query).into_iter().map(|v| v.label).collect();
    let mut series: Vec<(String, Vec<Option<f64>>)> = Vec::new();
    let mut tokens: Vec<(String, Vec<Option<f64>>)> = Vec::new();
    for (k, kind) in kinds.iter().enumerate() {
        for (measure, pick) in [
            ("answer recall", (|st: &eval::Stats| st.answer_recall) as fn(&eval::Stats) -> Option<f64>),
            ("answer-token recall", |st| st.answer_token_recall),
            ("F1", |st| st.f1),
        ] {
            series.push((format!("{measure} ({kind})"), points.iter().map(|(_, names)| stat(&names[k]).and_then(|st| pick(&st))).collect()));
        }
        tokens.push((format!("context tokens ({kind})"), points.iter().map(|(_, names)| stat(&names[k]).and_then(|st| st.context_tokens_mean)).collect()));
    }
    let out = &args.common.out;
    std::fs::create_dir_all(out)?;
    plot::curves(&out.join("sweep_measures.svg"), &format!("{} sweep: measures", param.name()), param.name(), "%", &xs, &as_refs(&series))?;
    plot::curves(&out.join("sweep_tokens.svg"), &format!("{} sweep: context tokens", param.name()), param.name(), "tokens", &xs, &as_refs(&tokens))?;
    let mut extra = String::new();
    let _ = writeln!(extra, "\n## Sweep of {} over {:?}\n\nEach point evaluates the full system (hybrid) and the module the parameter acts on alone.", param.name(), values);
    let charts = vec![("measures against the parameter".to_owned(), "sweep_measures.svg".to_owned()), ("context tokens against the parameter".to_owned(), "sweep_tokens.svg".to_owned())];
    finish(out, &header(&s, &format!("Sweep of {}", param.name()), &base_engine), &rows, &labels, &extra, charts, "sweep")
}
