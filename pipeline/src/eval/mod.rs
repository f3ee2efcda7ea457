//! Evaluation: answer a question set under several retrieval variants (modes, toggles,
//! breadths, or sibling indexes built with other construction settings) and score every
//! answer and context.
//!
//! Per question: EM and F1 against the gold answers ([`metrics`]); GE from an LLM judge when an
//! LLM is configured ([`judge`]), never estimated otherwise; answer recall, answer-token recall,
//! evidence recall and document recall of the context; context tokens; retrieval and generation
//! latency. Per variant: means (rates ×100), latency percentiles, and the same by question type.
//! [`report`] writes `results.jsonl`, `results.parquet`, `summary.json`, `report.md` and plots;
//! [`runs`] holds the ablation rows and sweep parameters, [`suite`] the comparisons, ablations
//! and sweeps that the evaluation binary runs (equal budgets and sibling indexes included),
//! [`cost`] the construction/generation cost table.

pub mod cost;
pub mod judge;
pub mod metrics;
pub mod paired;
pub mod plot;
pub mod report;
pub mod runs;
pub mod suite;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use self::judge::{GradeRequest, Judge};
use self::metrics::{ContextText, doc_recall, doc_recall_at, exact_match, f1, label_scores, mean, percentile};
use crate::core::{Error, Result};
use crate::query::paths::Outcome;
use crate::query::{Engine, Prepared, QueryConfig, Question, Reranking, read_question_records};

/// One question of an evaluation set (`questions.jsonl` of `../qa/<set>/`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct QaQuestion {
    /// Identifier.
    pub id: String,
    /// The question.
    pub question: String,
    /// Gold answers (any one counts).
    #[serde(default)]
    pub answers: Vec<String>,
    /// Question type (null in some sets).
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// Documents that hold the answer.
    #[serde(default)]
    pub doc_ids: Vec<String>,
    /// Gold evidence strings.
    #[serde(default)]
    pub evidence: Vec<String>,
}

/// Reads a question set; a bad line is an error naming the file and line (the checks of
/// [`crate::query::read_question_records`], then the set's own fields).
pub fn read_qa(path: &Path) -> Result<Vec<QaQuestion>> {
    let records = read_question_records(path)?;
    if records.is_empty() {
        return Err(Error::input(path.display().to_string(), "no questions"));
    }
    records
        .into_iter()
        .map(|(q, value)| {
            serde_json::from_value(value).map_err(|source| Error::InputJson {
                location: format!("{}: question `{}`", path.display(), q.id),
                source,
            })
        })
        .collect()
}

/// A retrieval configuration under evaluation, with the engine (index) it runs on.
#[derive(Debug, Clone)]
pub struct Variant {
    /// Name in reports (`hybrid`, `w/o ER+SSC`, `n_eh=5`, …).
    pub label: String,
    /// Query settings.
    pub config: QueryConfig,
}

/// The scores of one answered question.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// Variant label.
    pub variant: String,
    /// Retrieval strategy.
    pub mode: String,
    /// Question id.
    pub id: String,
    /// Question type (`untyped` when the set has none).
    #[serde(rename = "type")]
    pub kind: String,
    /// The question.
    pub question: String,
    /// The answer given.
    pub answer: String,
    /// Its direct answer, when the generator gave one apart (what EM and F1 score).
    pub short_answer: Option<String>,
    /// The set's reference answers (what EM, F1 and answer recall compare with), so that a miss
    /// can be read from the row alone.
    pub gold: Vec<String>,
    /// Exact match (0/1).
    pub em: f64,
    /// Token F1.
    pub f1: f64,
    /// GE (0–1), when an LLM judge ran and graded the answer.
    pub ge: Option<f64>,
    /// Whether an LLM judge was asked (a judged row without GE is a grading that failed).
    #[serde(skip)]
    pub judged: bool,
    /// The LLM failed to answer (its answer is empty and scores 0; an `answer: …` note says
    /// why, and a rerun asks it again).
    #[serde(skip)]
    pub answer_failed: bool,
    /// A gold answer occurs in the context (0/1).
    pub answer_recall: Option<f64>,
    /// Share of the gold answer's content words in the context.
    pub answer_token_recall: Option<f64>,
    /// Share of the gold evidence's content words in the context.
    pub evidence_recall: Option<f64>,
    /// Share of the gold documents among the context's documents.
    pub doc_recall: Option<f64>,
    /// Share of the gold documents among the first 2 distinct documents of the context.
    pub doc_recall_at_2: Option<f64>,
    /// Share of the gold documents among the first 5 distinct documents of the context.
    pub doc_recall_at_5: Option<f64>,
    /// The question's graph matched the kb exactly (0/1; `--mode paths` only).
    pub subgraph_exact: Option<f64>,
    /// SG-RAG's Hit@1 over the matched labels of the node asked for (`--mode paths` only;
    /// [`metrics::label_scores`]).
    pub subgraph_hit_at_1: Option<f64>,
    /// SG-RAG's recall over those labels.
    pub subgraph_recall: Option<f64>,
    /// SG-RAG's F1 over those labels.
    pub subgraph_f1: Option<f64>,
    /// Context tokens (cl100k) used.
    pub context_tokens: usize,
    /// The variant's context cap (0: none).
    pub context_cap: usize,
    /// Retrieval latency (no LLM).
    pub retrieval_ms: f64,
    /// The question-embedding part of `retrieval_ms`.
    pub embed_ms: f64,
    /// Generation latency.
    pub generation_ms: f64,
    /// What re-ranking did to the question's evidence, when a re-ranker was asked.
    pub rerank: Option<Reranking>,
    /// What the retrieval had to say (a threshold no unit passed, a re-ranking that failed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Questions prepared once for every variant of one engine.
pub fn prepare(engine: &Engine, qa: &[QaQuestion]) -> Result<Prepared> {
    engine.prepare(qa.iter().map(|q| Question { id: q.id.clone(), question: q.question.clone() }).collect())
}

/// Answers and scores every question under one variant.
pub fn evaluate(
    engine: &Engine,
    prepared: &Prepared,
    qa: &[QaQuestion],
    variant: &Variant,
    judge: &dyn Judge,
) -> Result<Vec<Row>> {
    let answers = engine.answer(prepared, &variant.config)?;
    let requests: Vec<GradeRequest<'_>> = qa
        .iter()
        .zip(&answers)
        .map(|(q, a)| GradeRequest { question: &q.question, references: &q.answers, answer: &a.answer })
        .collect();
    let ge = judge.grade(&requests);
    Ok(qa
        .iter()
        .zip(&answers)
        .zip(ge)
        .map(|((q, a), ge)| {
            // The measures look at the evidence texts only (not the numbering and spans around them).
            let text: Vec<&str> = a.evidence.iter().map(|e| e.text.as_str()).collect();
            let context = ContextText::new(&text.join("\n"));
            let ranked: Vec<&str> = a.evidence.iter().map(|e| e.doc_id.as_str()).collect();
            let docs: HashSet<&str> = ranked.iter().copied().collect();
            // The direct answer when the generator gave it apart (an LLM's `Answer:` line).
            let scored = a.short_answer.as_deref().unwrap_or(&a.answer);
            let f1 = f1(scored, &q.answers);
            let labels = a.structure.as_ref().and_then(|s| label_scores(&s.answers, &q.answers));
            let mut notes = a.notes.clone();
            notes.extend(a.error.as_ref().map(|e| format!("answer: {e}")));
            Row {
                variant: variant.label.clone(),
                mode: variant.config.mode.name().to_owned(),
                id: q.id.clone(),
                kind: q.kind.clone().unwrap_or_else(|| "untyped".into()),
                question: q.question.clone(),
                answer: a.answer.clone(),
                short_answer: a.short_answer.clone(),
                gold: q.answers.clone(),
                em: exact_match(scored, &q.answers),
                f1,
                ge: ge.map(|scores| judge::ge(&scores, f1)),
                judged: judge.measures(),
                answer_failed: a.error.is_some(),
                answer_recall: context.contains_answer(&q.answers),
                answer_token_recall: context.answer_token_recall(&q.answers),
                evidence_recall: context.evidence_recall(&q.evidence),
                doc_recall: doc_recall(&q.doc_ids, &docs),
                doc_recall_at_2: doc_recall_at(&q.doc_ids, &ranked, 2),
                doc_recall_at_5: doc_recall_at(&q.doc_ids, &ranked, 5),
                subgraph_exact: a.structure.as_ref().map(|s| f64::from(u8::from(s.outcome == Outcome::Exact))),
                subgraph_hit_at_1: labels.map(|l| l.hit_at_1),
                subgraph_recall: labels.map(|l| l.recall),
                subgraph_f1: labels.map(|l| l.f1),
                context_tokens: a.context_tokens,
                context_cap: variant.config.max_context_tokens,
                retrieval_ms: a.retrieval_ms,
                embed_ms: a.embed_ms,
                generation_ms: a.generation_ms,
                rerank: a.rerank,
                notes,
            }
        })
        .collect())
}

/// Aggregates of a set of rows; rates are percentages, `None` where nothing was measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    /// Questions.
    pub n: usize,
    /// Exact match ×100.
    pub em: Option<f64>,
    /// F1 ×100.
    pub f1: Option<f64>,
    /// GE ×100 over the graded answers (null when no LLM judge ran).
    pub ge: Option<f64>,
    /// Answers the judge graded (null when no LLM judge ran); `n - n_ge` gradings failed and
    /// are not in `ge`.
    pub n_ge: Option<usize>,
    /// Answer recall ×100.
    pub answer_recall: Option<f64>,
    /// Answer-token recall ×100.
    pub answer_token_recall: Option<f64>,
    /// Evidence recall ×100.
    pub evidence_recall: Option<f64>,
    /// Document recall ×100.
    pub doc_recall: Option<f64>,
    /// Document recall@2 ×100.
    pub doc_recall_at_2: Option<f64>,
    /// Document recall@5 ×100.
    pub doc_recall_at_5: Option<f64>,
    /// Questions whose graph matched the kb exactly ×100 (`--mode paths` only).
    pub subgraph_exact: Option<f64>,
    /// SG-RAG's Hit@1 ×100 (`--mode paths` only).
    pub subgraph_hit_at_1: Option<f64>,
    /// SG-RAG's recall ×100 (`--mode paths` only).
    pub subgraph_recall: Option<f64>,
    /// SG-RAG's F1 ×100 (`--mode paths` only).
    pub subgraph_f1: Option<f64>,
    /// Mean context tokens used.
    pub context_tokens_mean: Option<f64>,
    /// The context cap of the variant (0: none; the largest when rows differ).
    pub context_cap: Option<usize>,
    /// Median retrieval latency.
    pub retrieval_ms_p50: Option<f64>,
    /// 95th percentile retrieval latency.
    pub retrieval_ms_p95: Option<f64>,
    /// Median of the question-embedding part of retrieval latency.
    pub embed_ms_p50: Option<f64>,
    /// Questions whose evidence the re-ranker ordered (null when no re-ranker was asked).
    pub n_reranked: Option<usize>,
    /// Questions whose re-ranking failed: their evidence kept the strategy's own order (null
    /// when no re-ranker was asked; their notes in the results say why).
    pub n_rerank_failed: Option<usize>,
    /// Questions the LLM failed to answer: their answers are empty and score 0 (their notes in
    /// the results say why; a rerun asks them again).
    pub n_answer_failed: usize,
    /// The same per question type (absent inside a type).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_type: Option<BTreeMap<String, Stats>>,
}

fn pct(values: impl Iterator<Item = f64>) -> Option<f64> {
    mean(values).map(|m| (m * 10_000.0).round() / 100.0)
}

fn round2(v: Option<f64>) -> Option<f64> {
    v.map(|v| (v * 100.0).round() / 100.0)
}

/// Aggregates rows (and, when `by_type`, each question type).
pub fn stats(rows: &[&Row], by_type: bool) -> Stats {
    let latencies: Vec<f64> = rows.iter().map(|r| r.retrieval_ms).collect();
    let types = by_type.then(|| {
        let mut groups: BTreeMap<String, Vec<&Row>> = BTreeMap::new();
        for r in rows {
            groups.entry(r.kind.clone()).or_default().push(r);
        }
        groups.into_iter().map(|(k, rs)| (k, stats(&rs, false))).collect()
    });
    Stats {
        n: rows.len(),
        em: pct(rows.iter().map(|r| r.em)),
        f1: pct(rows.iter().map(|r| r.f1)),
        ge: pct(rows.iter().filter_map(|r| r.ge)),
        n_ge: rows.iter().any(|r| r.judged).then(|| rows.iter().filter(|r| r.ge.is_some()).count()),
        answer_recall: pct(rows.iter().filter_map(|r| r.answer_recall)),
        answer_token_recall: pct(rows.iter().filter_map(|r| r.answer_token_recall)),
        evidence_recall: pct(rows.iter().filter_map(|r| r.evidence_recall)),
        doc_recall: pct(rows.iter().filter_map(|r| r.doc_recall)),
        doc_recall_at_2: pct(rows.iter().filter_map(|r| r.doc_recall_at_2)),
        doc_recall_at_5: pct(rows.iter().filter_map(|r| r.doc_recall_at_5)),
        subgraph_exact: pct(rows.iter().filter_map(|r| r.subgraph_exact)),
        subgraph_hit_at_1: pct(rows.iter().filter_map(|r| r.subgraph_hit_at_1)),
        subgraph_recall: pct(rows.iter().filter_map(|r| r.subgraph_recall)),
        subgraph_f1: pct(rows.iter().filter_map(|r| r.subgraph_f1)),
        context_tokens_mean: round2(mean(rows.iter().map(|r| r.context_tokens as f64))),
        context_cap: rows.iter().map(|r| r.context_cap).max(),
        retrieval_ms_p50: round2(percentile(&latencies, 0.5)),
        retrieval_ms_p95: round2(percentile(&latencies, 0.95)),
        embed_ms_p50: round2(percentile(&rows.iter().map(|r| r.embed_ms).collect::<Vec<_>>(), 0.5)),
        n_reranked: count_rerank(rows, Reranking::Reranked),
        n_rerank_failed: count_rerank(rows, Reranking::Failed),
        n_answer_failed: rows.iter().filter(|r| r.answer_failed).count(),
        by_type: types,
    }
}

/// Rows whose re-ranking ended as `outcome`, when any row asked a re-ranker.
fn count_rerank(rows: &[&Row], outcome: Reranking) -> Option<usize> {
    rows.iter().any(|r| r.rerank.is_some()).then(|| rows.iter().filter(|r| r.rerank == Some(outcome)).count())
}

/// The summary of every variant, in the order given.
pub fn summarise(rows: &[Row], variants: &[String]) -> Vec<(String, Stats)> {
    variants
        .iter()
        .map(|v| {
            let mine: Vec<&Row> = rows.iter().filter(|r| &r.variant == v).collect();
            (v.clone(), stats(&mine, true))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: &str, em: f64, recall: Option<f64>, ms: f64) -> Row {
        Row {
            variant: "v".into(),
            mode: "hybrid".into(),
            id: "q".into(),
            kind: kind.into(),
            question: String::new(),
            answer: String::new(),
            short_answer: None,
            gold: Vec::new(),
            em,
            f1: em,
            ge: None,
            judged: false,
            answer_failed: false,
            answer_recall: recall,
            answer_token_recall: None,
            evidence_recall: None,
            doc_recall: None,
            doc_recall_at_2: None,
            doc_recall_at_5: None,
            subgraph_exact: None,
            subgraph_hit_at_1: None,
            subgraph_recall: None,
            subgraph_f1: None,
            context_tokens: 100,
            context_cap: 0,
            retrieval_ms: ms,
            embed_ms: 0.0,
            generation_ms: 0.0,
            rerank: None,
            notes: Vec::new(),
        }
    }

    #[test]
    fn stats_are_percentages_and_skip_what_was_not_measured() {
        let rows = [row("a", 1.0, Some(1.0), 1.0), row("a", 0.0, None, 2.0), row("b", 0.0, Some(0.0), 30.0)];
        let refs: Vec<&Row> = rows.iter().collect();
        let s = stats(&refs, true);
        assert_eq!(s.n, 3);
        assert_eq!(s.em, Some(33.33));
        assert_eq!(s.answer_recall, Some(50.0));
        assert_eq!(s.ge, None);
        assert_eq!(s.doc_recall, None);
        assert_eq!((s.retrieval_ms_p50, s.retrieval_ms_p95), (Some(2.0), Some(30.0)));
        let types = s.by_type.unwrap();
        assert_eq!(types["a"].n, 2);
        assert_eq!(types["b"].answer_recall, Some(0.0));
        assert!(types["a"].by_type.is_none());
    }

    #[test]
    fn question_sets_are_checked_line_by_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.jsonl");
        std::fs::write(
            &path,
            "{\"id\": \"a\", \"question\": \"Who?\", \"answers\": [\"X\"], \"type\": null}\n\n{\"id\": \"b\"}\n",
        )
        .unwrap();
        let err = read_qa(&path).unwrap_err().to_string();
        assert!(err.contains("q.jsonl:3") && err.contains("question"), "{err}");
        std::fs::write(&path, "{\"id\": \"a\", \"question\": \"Who?\"}\n{\"id\": \"a\", \"question\": \"Why?\"}\n")
            .unwrap();
        assert!(read_qa(&path).unwrap_err().to_string().contains("appears twice"));
        std::fs::write(&path, "{\"id\": \"a\", \"question\": \"Who?\", \"answers\": [\"X\"], \"doc_ids\": [\"d\"]}\n")
            .unwrap();
        let qa = read_qa(&path).unwrap();
        assert_eq!((qa[0].answers.clone(), qa[0].kind.clone(), qa[0].doc_ids.len()), (vec!["X".to_owned()], None, 1));
        // A byte-order mark before the first line is not JSON, and not an error; later, it is.
        std::fs::write(&path, "\u{feff}{\"id\": \"a\", \"question\": \"Who?\"}\n").unwrap();
        assert_eq!(read_qa(&path).unwrap()[0].question, "Who?");
        std::fs::write(
            &path,
            "{\"id\": \"a\", \"question\": \"Who?\"}\n\u{feff}{\"id\": \"b\", \"question\": \"Why?\"}\n",
        )
        .unwrap();
        assert!(read_qa(&path).unwrap_err().to_string().contains("q.jsonl:2"));
    }
}
