//! The evaluations the `flexstruct-eval` binary runs, as typed functions: every strategy side by
//! side, optionally again at an equal budget ([`compare`]); the paper's ablation table with its
//! w/o SW sibling index ([`ablate`]); a sensitivity sweep, with a sibling index per value of a
//! construction setting ([`sweep`]). Each writes its report folder and returns the report's
//! path; progress goes to an [`Observer`] (the library never prints).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::judge::{Judge, judge_for};
use super::report::{self, Header};
use super::runs::{self, Parameter};
use super::{QaQuestion, Row, Stats, Variant, cost, plot};
use crate::compose::{self, Backends, Sibling};
use crate::config::Config;
use crate::core::ids::doc_hash;
use crate::core::{Error, Result};
use crate::io::calls::append_calls;
use crate::io::sql::OutputFormat;
use crate::io::{CallRecord, Index};
use crate::query::{Engine, Mode, Prepared, QueryConfig, Reranking};

/// Hears what an evaluation is doing (the binary prints it).
pub trait Observer {
    /// A variant was evaluated.
    fn evaluated(&self, _label: &str, _stats: &Stats) {}
    /// A sibling index was built or brought up to date.
    fn sibling(&self, _sibling: &Sibling) {}
}

/// An observer that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl Observer for Quiet {}

/// Which half of a question set an evaluation runs on. The halves are fixed by the question id
/// (the first 8 bytes of its SHA-256, big-endian, even or odd), so a change can be tuned on one
/// half and reported on the other, the same split in every run and on every machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Split {
    /// Every question.
    #[default]
    All,
    /// The questions whose id hashes to an even number: for tuning.
    Tune,
    /// The others: for reporting what was tuned on the other half.
    Test,
}

impl Split {
    /// Whether question `id` belongs to this split.
    pub fn keeps(self, id: &str) -> bool {
        match self {
            Split::All => true,
            Split::Tune => doc_hash(id).is_multiple_of(2),
            Split::Test => !doc_hash(id).is_multiple_of(2),
        }
    }

    /// The name used in flags and reports.
    pub fn name(self) -> &'static str {
        match self {
            Split::All => "all",
            Split::Tune => "tune",
            Split::Test => "test",
        }
    }
}

impl std::str::FromStr for Split {
    type Err = Error;
    fn from_str(s: &str) -> Result<Split> {
        [Split::All, Split::Tune, Split::Test]
            .into_iter()
            .find(|split| split.name() == s)
            .ok_or_else(|| Error::config("--split", format!("unknown split `{s}` (all, tune or test)")))
    }
}

/// What an evaluation runs on: the configuration, the index and the question set.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The configuration (its `[query]` section is the base of every variant).
    pub config: Config,
    /// The index, built from the question set's corpus.
    pub index: Index,
    /// The questions file.
    pub questions_path: PathBuf,
    /// The questions.
    pub qa: Vec<QaQuestion>,
    /// The half of the set they are.
    pub split: Split,
}

impl Setup {
    /// Opens `index` and reads the questions (`questions` is a file, or a folder holding
    /// `questions.jsonl`) of `split`; `limit` keeps the first of them only.
    pub fn new(index: &Path, questions: &Path, config: Config, split: Split, limit: Option<usize>) -> Result<Setup> {
        let questions_path = if questions.is_dir() { questions.join("questions.jsonl") } else { questions.to_owned() };
        let mut qa = super::read_qa(&questions_path)?;
        qa.retain(|q| split.keeps(&q.id));
        if let Some(n) = limit {
            qa.truncate(n);
        }
        let index = Index::open(index)?;
        Ok(Setup { config, index, questions_path, qa, split })
    }
}

/// An index's engine and judge, which evaluate variants on one prepared batch of questions
/// (embedded and given their entities once, however many variants follow).
struct Bench {
    engine: Engine,
    judge: Box<dyn Judge>,
    prepared: std::sync::OnceLock<Prepared>,
    /// The LLM calls its evaluations made (for the report's cost of this run alone).
    calls: std::sync::Mutex<Vec<CallRecord>>,
}

impl Bench {
    fn open(index: &Index, config: &Config) -> Result<Bench> {
        let backends = Backends::new(config, index.root())?;
        let engine = compose::engine(index, config, &backends)?;
        Ok(Bench {
            engine,
            judge: judge_for(&backends),
            prepared: std::sync::OnceLock::new(),
            calls: std::sync::Mutex::default(),
        })
    }

    /// Evaluates `variants` on the questions `qa` (the same questions at every call), telling
    /// `observer` about each, and records the LLM calls made.
    fn evaluate(&self, qa: &[QaQuestion], variants: &[Variant], observer: &dyn Observer) -> Result<Vec<Row>> {
        let prepared = match self.prepared.get() {
            Some(p) => p,
            None => {
                let p = super::prepare(&self.engine, qa)?;
                self.prepared.get_or_init(|| p)
            }
        };
        let mut rows = Vec::new();
        for v in variants {
            let mine = super::evaluate(&self.engine, prepared, qa, v, self.judge.as_ref())?;
            let refs: Vec<&Row> = mine.iter().collect();
            observer.evaluated(&v.label, &super::stats(&refs, false));
            rows.extend(mine);
        }
        let mut calls = self.engine.record_calls()?;
        let judged = self.judge.take_calls();
        append_calls(self.engine.index(), "eval", "all", &judged)?;
        calls.extend(judged);
        self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(calls);
        Ok(rows)
    }

    /// The LLM calls its evaluations made so far.
    fn calls(&self) -> Vec<CallRecord> {
        self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The report's header: what was evaluated, with which backends.
    fn header(&self, setup: &Setup, what: &str) -> Header {
        let (entities, answers) = self.engine.backends();
        let judge = if self.judge.measures() {
            self.judge.identity().label()
        } else {
            "not measured (no LLM judge)".to_owned()
        };
        let budget = match setup.config.query.max_context_tokens {
            0 => "no context cap".to_owned(),
            n => format!("context cap {n} tokens (cl100k)"),
        };
        let sizes: Vec<String> = self.engine.kb.sizes().iter().map(|(n, c)| format!("{c} {n}")).collect();
        Header {
            title: format!("{what}: {}", setup.questions_path.display()),
            settings: vec![
                format!(
                    "index `{}` ({}), embedding model `{}`",
                    setup.index.root().display(),
                    sizes.join(", "),
                    self.engine.kb.model
                ),
                match setup.split {
                    Split::All => format!("{} questions", setup.qa.len()),
                    split => format!(
                        "{} questions: the `{}` half of the set (by a stable hash of the id)",
                        setup.qa.len(),
                        split.name()
                    ),
                },
                format!("query entities: {}; answers: {}; GE judge: {judge}", entities.label(), answers.label()),
                match self.engine.reranker() {
                    Some(service) if setup.config.query.rerank_candidates > 0 => format!(
                        "re-ranker {service}, asked to order every strategy's first {} pieces",
                        setup.config.query.rerank_candidates
                    ),
                    _ => "no re-ranking".to_owned(),
                },
                budget,
                format!("kb loaded in {:.2} s", self.engine.load_seconds),
            ]
            .into_iter()
            .chain(self.engine.kb.notes.iter().map(|note| format!("kb load: {note}")))
            .collect(),
        }
    }
}

/// The variants of `modes` capped at `budget` tokens and filling it (labels `<mode> @<budget>`):
/// every strategy takes evidence in rank order until the budget is full or its candidates run
/// out; `none` retrieves nothing and is left out.
pub fn equal_budget_variants(base: &QueryConfig, modes: &[Mode], budget: usize) -> Vec<Variant> {
    modes
        .iter()
        .filter(|m| **m != Mode::None)
        .map(|&mode| Variant {
            label: format!("{} @{budget}", mode.name()),
            config: QueryConfig { mode, max_context_tokens: budget, fill: true, ..base.clone() },
        })
        .collect()
}

/// Every mode of `modes` side by side; with `equal_budget`, every mode again capped at hybrid's
/// mean context tokens, so that strategies are compared on the same number of tokens.
pub fn compare(
    setup: &Setup,
    modes: &[Mode],
    equal_budget: bool,
    out: &Path,
    observer: &dyn Observer,
) -> Result<Written> {
    let bench = Bench::open(&setup.index, &setup.config)?;
    let base = &setup.config.query;
    let mut variants: Vec<Variant> = modes
        .iter()
        .map(|&mode| Variant { label: mode.name().to_owned(), config: QueryConfig { mode, ..base.clone() } })
        .collect();
    let mut rows = bench.evaluate(&setup.qa, &variants, observer)?;
    if equal_budget {
        let hybrid: Vec<&Row> = rows.iter().filter(|r| r.variant == Mode::Hybrid.name()).collect();
        if hybrid.is_empty() {
            return Err(Error::config(
                "--equal-budget",
                "needs hybrid among the modes: its mean context is the budget",
            ));
        }
        let budget = super::stats(&hybrid, false).context_tokens_mean.unwrap_or(0.0).round() as usize;
        let capped = equal_budget_variants(base, modes, budget);
        rows.extend(bench.evaluate(&setup.qa, &capped, observer)?);
        variants.extend(capped);
    }
    let labels: Vec<String> = variants.iter().map(|v| v.label.clone()).collect();
    finish(
        out,
        &bench.header(setup, "Strategies"),
        &rows,
        &labels,
        &cost_section(&setup.index, &bench.calls())?,
        Vec::new(),
        "strategies",
    )
}

/// The paper's ablation table: our default, the paper's module rows on the index itself, and
/// w/o SW on a sibling index rebuilt from extraction with the sliding window off.
pub fn ablate(setup: &Setup, out: &Path, observer: &dyn Observer) -> Result<Written> {
    let bench = Bench::open(&setup.index, &setup.config)?;
    let base = QueryConfig { mode: Mode::Hybrid, ..setup.config.query.clone() };
    let variants = runs::ablation_variants(&base);
    let mut rows = bench.evaluate(&setup.qa, &variants, observer)?;
    let mut labels: Vec<String> = variants.iter().map(|v| v.label.clone()).collect();

    let mut no_sw = setup.config.clone();
    no_sw.extract.window = false;
    let sibling = compose::build_sibling(&setup.index, "no-sw", &no_sw, crate::stages::Stage::Extract)?;
    observer.sibling(&sibling);
    // The paper's system on the sibling: after the paper's row.
    let paper = variants.iter().find(|v| v.label == runs::PAPER_ROW).map_or(base, |v| v.config.clone());
    let no_sw_row = Variant { label: "w/o SW".into(), config: paper };
    let sibling_bench = Bench::open(&sibling.index, &no_sw)?;
    rows.extend(sibling_bench.evaluate(&setup.qa, std::slice::from_ref(&no_sw_row), observer)?);
    let mut calls = bench.calls();
    calls.extend(sibling_bench.calls());
    let at = labels.iter().position(|l| l == runs::PAPER_ROW).map_or(labels.len(), |i| i + 1);
    labels.insert(at, no_sw_row.label);
    finish(
        out,
        &bench.header(setup, "Ablation: the fused assembly's pieces, then the paper's Table 2"),
        &rows,
        &labels,
        &cost_section(&setup.index, &calls)?,
        Vec::new(),
        "ablation",
    )
}

/// A sensitivity sweep of `param` over `values` (its defaults when empty): each point evaluates
/// the full system and the module the parameter acts on alone, on the index for a query-time
/// parameter and on a sibling index rebuilt from the affected stage for τ_s and τ_e.
pub fn sweep(
    setup: &Setup,
    param: Parameter,
    values: &[usize],
    out: &Path,
    observer: &dyn Observer,
) -> Result<Written> {
    let values = if values.is_empty() { param.default_values() } else { values.to_vec() };
    let base = Bench::open(&setup.index, &setup.config)?;
    let mut rows = Vec::new();
    let mut labels = Vec::new();
    let mut points: Vec<(usize, Vec<String>)> = Vec::new();
    for &value in &values {
        let config = param.apply(&setup.config, value);
        let sibling_bench;
        let bench = match param.first_stage() {
            Some(first) => {
                let sibling =
                    compose::build_sibling(&setup.index, &format!("{}-{value}", param.name()), &config, first)?;
                observer.sibling(&sibling);
                sibling_bench = Bench::open(&sibling.index, &config)?;
                &sibling_bench
            }
            None => &base,
        };
        let variants: Vec<Variant> = param
            .variants(&config.query)
            .into_iter()
            .map(|v| Variant { label: format!("{}={value} {}", param.name(), v.label), config: v.config })
            .collect();
        rows.extend(bench.evaluate(&setup.qa, &variants, observer)?);
        let names: Vec<String> = variants.iter().map(|v| v.label.clone()).collect();
        labels.extend(names.iter().cloned());
        points.push((value, names));
    }
    // Curves: each measure of each variant kind against the parameter.
    let summary = super::summarise(&rows, &labels);
    let stat = |label: &str| summary.iter().find(|(l, _)| l == label).map(|(_, st)| st.clone());
    let xs: Vec<f64> = points.iter().map(|(v, _)| *v as f64).collect();
    let kinds: Vec<String> = param.variants(&setup.config.query).into_iter().map(|v| v.label).collect();
    let mut series: Vec<(String, Vec<Option<f64>>)> = Vec::new();
    let mut tokens: Vec<(String, Vec<Option<f64>>)> = Vec::new();
    for (k, kind) in kinds.iter().enumerate() {
        for (measure, pick) in [
            ("answer recall", (|st: &Stats| st.answer_recall) as fn(&Stats) -> Option<f64>),
            ("answer-token recall", |st| st.answer_token_recall),
            ("F1", |st| st.f1),
        ] {
            series.push((
                format!("{measure} ({kind})"),
                points.iter().map(|(_, names)| stat(&names[k]).and_then(|st| pick(&st))).collect(),
            ));
        }
        tokens.push((
            format!("context tokens ({kind})"),
            points.iter().map(|(_, names)| stat(&names[k]).and_then(|st| st.context_tokens_mean)).collect(),
        ));
    }
    std::fs::create_dir_all(out).map_err(Error::io("creating the output folder", out))?;
    plot::curves(
        &out.join("sweep_measures.svg"),
        &format!("{} sweep: measures", param.name()),
        param.name(),
        "%",
        &xs,
        &as_refs(&series),
    )?;
    plot::curves(
        &out.join("sweep_tokens.svg"),
        &format!("{} sweep: context tokens", param.name()),
        param.name(),
        "tokens",
        &xs,
        &as_refs(&tokens),
    )?;
    let mut extra = String::new();
    let _ = writeln!(
        extra,
        "\n## Sweep of {} over {:?}\n\nEach point evaluates the full system (hybrid) and the module the parameter acts on alone.",
        param.name(),
        values
    );
    let charts = vec![
        ("measures against the parameter".to_owned(), "sweep_measures.svg".to_owned()),
        ("context tokens against the parameter".to_owned(), "sweep_tokens.svg".to_owned()),
    ];
    finish(out, &base.header(setup, &format!("Sweep of {}", param.name())), &rows, &labels, &extra, charts, "sweep")
}

/// The report's cost table: the index's construction, and this run's own `calls` at query time.
fn cost_section(index: &Index, calls: &[CallRecord]) -> Result<String> {
    Ok(format!(
        "\n## Cost (paper Table 3)\n\nLLM requests, tokens and seconds per stage from `llm_calls` (each request once: the index's construction, and this evaluation's own generation and judging), and stage wall time from the manifest:\n\n```text\n{}```\n",
        cost::run_cost_table(index, calls, OutputFormat::Table)?
    ))
}

fn as_refs(v: &[(String, Vec<Option<f64>>)]) -> Vec<(&str, Vec<Option<f64>>)> {
    v.iter().map(|(n, ys)| (n.as_str(), ys.clone())).collect()
}

/// What an evaluation wrote, and what of it did not go as configured.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    /// The report (`report.md`; the results, summary and charts beside it).
    pub report: PathBuf,
    /// Questions (over every variant) whose evidence a re-ranker was asked to order.
    pub rerank_asked: usize,
    /// Those whose re-ranking failed: they kept the strategy's own order, and say so.
    pub rerank_failed: usize,
    /// Why the first of them failed.
    pub rerank_failure: Option<String>,
    /// Answers asked (a question's under each variant).
    pub answers_asked: usize,
    /// Those the LLM failed to give: empty, scored 0, asked again by a rerun.
    pub answers_failed: usize,
    /// Why the first of them failed.
    pub answer_failure: Option<String>,
}

impl Written {
    fn of(report: PathBuf, rows: &[Row]) -> Written {
        let asked = rows.iter().filter(|r| matches!(r.rerank, Some(Reranking::Reranked | Reranking::Failed)));
        let failed: Vec<&Row> = rows.iter().filter(|r| r.rerank == Some(Reranking::Failed)).collect();
        let rerank_failure = failed.iter().flat_map(|r| &r.notes).find(|n| n.starts_with("rerank: ")).cloned();
        let unanswered: Vec<&Row> = rows.iter().filter(|r| r.answer_failed).collect();
        let answer_failure = unanswered.iter().flat_map(|r| &r.notes).find(|n| n.starts_with("answer: ")).cloned();
        Written {
            report,
            rerank_asked: asked.count(),
            rerank_failed: failed.len(),
            rerank_failure,
            answers_asked: rows.len(),
            answers_failed: unanswered.len(),
            answer_failure,
        }
    }

    /// The header line that says how many answers failed, when any did.
    fn answer_line(&self) -> Option<String> {
        (self.answers_failed > 0).then(|| {
            format!(
                "answers FAILED: {} of the {} asked (over every variant); they are empty and score 0 in EM and \
                 F1, and a rerun asks for them again ({})",
                self.answers_failed,
                self.answers_asked,
                self.answer_failure.as_deref().unwrap_or("see the notes in results.jsonl")
            )
        })
    }

    /// The header line that says what re-ranking did, when it was asked.
    fn rerank_line(&self) -> Option<String> {
        match (self.rerank_asked, self.rerank_failed) {
            (0, _) => None,
            (_, 0) => Some(format!("re-ranking worked for all {} questions it was asked for", self.rerank_asked)),
            (asked, failed) => Some(format!(
                "re-ranking FAILED for {failed} of the {asked} questions it was asked for: those keep the \
                 strategy's own order and are not labelled +rerank ({})",
                self.rerank_failure.as_deref().unwrap_or("see the notes in results.jsonl")
            )),
        }
    }
}

/// Summary, charts and report of an evaluation.
fn finish(
    out: &Path,
    header: &Header,
    rows: &[Row],
    labels: &[String],
    extra: &str,
    mut charts: Vec<(String, String)>,
    title: &str,
) -> Result<Written> {
    let summary = super::summarise(rows, labels);
    std::fs::create_dir_all(out).map_err(Error::io("creating the output folder", out))?;
    let mut all = report::comparison_charts(out, title, &summary)?;
    all.append(&mut charts);
    let mut written = Written::of(PathBuf::new(), rows);
    let mut header = header.clone();
    header.settings.extend(written.rerank_line());
    header.settings.extend(written.answer_line());
    written.report = report::write(out, &header, rows, &summary, extra, &all)?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_halves_are_fixed_and_cover_the_set() {
        let ids: Vec<String> = (0..1000).map(|i| format!("q{i}")).collect();
        let tune = ids.iter().filter(|id| Split::Tune.keeps(id)).count();
        let test = ids.iter().filter(|id| Split::Test.keeps(id)).count();
        assert_eq!(tune + test, 1000);
        assert!((400..600).contains(&tune), "{tune}");
        assert!(ids.iter().all(|id| Split::All.keeps(id) && Split::Tune.keeps(id) != Split::Test.keeps(id)));
        assert_eq!("test".parse::<Split>().unwrap(), Split::Test);
        assert!("half".parse::<Split>().is_err());
    }

    #[test]
    fn equal_budget_variants_fill_the_budget_and_skip_none() {
        let base = QueryConfig::default();
        let v = equal_budget_variants(&base, &[Mode::Hybrid, Mode::Chunks, Mode::None], 1193);
        let labels: Vec<&str> = v.iter().map(|v| v.label.as_str()).collect();
        assert_eq!(labels, ["hybrid @1193", "chunks @1193"]);
        assert!(v.iter().all(|v| v.config.max_context_tokens == 1193 && v.config.fills()));
        assert!(v[1].config.breadths().chunks >= crate::query::config::FILL_POOL);
    }
}
