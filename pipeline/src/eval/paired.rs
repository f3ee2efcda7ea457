//! Paired comparisons of two variants on the same questions: the mean per-question difference
//! of a measure, a 95 % percentile-bootstrap interval of it, and the sign counts (wins, losses,
//! ties). A margin whose interval contains 0 is within the question-level noise.

use std::collections::HashMap;

use serde::Serialize;

use super::Row;

/// Resamples of the bootstrap.
pub const RESAMPLES: usize = 2000;
/// Seed of the bootstrap, so that a report is reproducible.
const SEED: u64 = 0x5eed_f1e5;

/// How to read a measure from a row.
pub type Measure = fn(&Row) -> Option<f64>;

/// The measures compared, by name.
pub const MEASURES: [(&str, Measure); 4] = [
    ("answer recall", |r| r.answer_recall),
    ("answer-token recall", |r| r.answer_token_recall),
    ("doc recall@5", |r| r.doc_recall_at_5),
    ("F1", |r| Some(r.f1)),
];

/// One measure of `variant` against `reference` on the questions both have it for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Paired {
    /// The reference variant.
    pub reference: String,
    /// The variant compared with it.
    pub variant: String,
    /// The measure.
    pub measure: String,
    /// Questions in the comparison.
    pub n: usize,
    /// Mean of reference − variant, ×100.
    pub difference: f64,
    /// 2.5th percentile of the bootstrapped mean difference, ×100.
    pub low: f64,
    /// 97.5th percentile, ×100.
    pub high: f64,
    /// Questions where the reference is higher.
    pub wins: usize,
    /// Questions where the variant is higher.
    pub losses: usize,
    /// Questions where they are equal.
    pub ties: usize,
}

impl Paired {
    /// Whether the interval excludes 0: the difference is larger than the question-level noise.
    pub fn significant(&self) -> bool {
        self.low > 0.0 || self.high < 0.0
    }
}

/// The paired comparison of one measure, None when no question has it for both.
pub fn compare(reference: &[&Row], variant: &[&Row], measure: &str, pick: Measure) -> Option<Paired> {
    let by_id: HashMap<&str, f64> = variant.iter().filter_map(|r| pick(r).map(|v| (r.id.as_str(), v))).collect();
    let diffs: Vec<f64> =
        reference.iter().filter_map(|r| Some(pick(r)? - by_id.get(r.id.as_str()).copied()?)).collect();
    if diffs.is_empty() {
        return None;
    }
    let n = diffs.len();
    let mean = diffs.iter().sum::<f64>() / n as f64;
    let mut rng = fastrand::Rng::with_seed(SEED);
    let mut means: Vec<f64> =
        (0..RESAMPLES).map(|_| (0..n).map(|_| diffs[rng.usize(0..n)]).sum::<f64>() / n as f64).collect();
    means.sort_by(f64::total_cmp);
    let at = |p: f64| means[((RESAMPLES as f64 - 1.0) * p).round() as usize];
    let round = |v: f64| (v * 10_000.0).round() / 100.0;
    Some(Paired {
        reference: reference[0].variant.clone(),
        variant: variant.first().map(|r| r.variant.clone()).unwrap_or_default(),
        measure: measure.to_owned(),
        n,
        difference: round(mean),
        low: round(at(0.025)),
        high: round(at(0.975)),
        wins: diffs.iter().filter(|d| **d > 0.0).count(),
        losses: diffs.iter().filter(|d| **d < 0.0).count(),
        ties: diffs.iter().filter(|d| **d == 0.0).count(),
    })
}

/// The budget of a variant label (`chunks @1100` → `@1100`; no budget → empty), which pairs it
/// with the hybrid of the same budget.
fn budget(label: &str) -> &str {
    label.rfind(" @").map_or("", |i| &label[i + 1..])
}

/// Every variant against the hybrid of its budget (`hybrid` for the own-budget rows,
/// `hybrid @<n>` for a capped row), on every measure of [`MEASURES`] that applies.
pub fn against_hybrid(rows: &[Row], labels: &[String]) -> Vec<Paired> {
    let of = |label: &str| rows.iter().filter(|r| r.variant == label).collect::<Vec<_>>();
    let mut out = Vec::new();
    for label in labels {
        let reference = match budget(label) {
            "" => "hybrid".to_owned(),
            b => format!("hybrid {b}"),
        };
        if *label == reference || !labels.contains(&reference) {
            continue;
        }
        let (a, b) = (of(&reference), of(label));
        for (measure, pick) in MEASURES {
            out.extend(compare(&a, &b, measure, pick));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(variant: &str, id: usize, recall: f64) -> Row {
        Row {
            variant: variant.into(),
            mode: String::new(),
            id: id.to_string(),
            kind: "t".into(),
            question: String::new(),
            answer: String::new(),
            short_answer: None,
            gold: Vec::new(),
            em: 0.0,
            f1: 0.0,
            ge: None,
            judged: false,
            answer_failed: false,
            answer_recall: Some(recall),
            answer_token_recall: None,
            evidence_recall: None,
            doc_recall: None,
            doc_recall_at_2: None,
            doc_recall_at_5: None,
            subgraph_exact: None,
            subgraph_hit_at_1: None,
            subgraph_recall: None,
            subgraph_f1: None,
            context_tokens: 0,
            context_cap: 0,
            retrieval_ms: 0.0,
            embed_ms: 0.0,
            generation_ms: 0.0,
            rerank: None,
            notes: Vec::new(),
        }
    }

    fn refs(v: &[Row]) -> Vec<&Row> {
        v.iter().collect()
    }

    #[test]
    fn a_clear_margin_is_significant_and_noise_is_not() {
        let a: Vec<Row> = (0..200).map(|i| row("hybrid", i, if i % 4 == 0 { 0.0 } else { 1.0 })).collect();
        let b: Vec<Row> = (0..200).map(|i| row("chunks", i, if i % 2 == 0 { 0.0 } else { 1.0 })).collect();
        let p = compare(&refs(&a), &refs(&b), "answer recall", |r| r.answer_recall).unwrap();
        assert_eq!((p.n, p.difference), (200, 25.0));
        assert!(p.significant() && p.low > 10.0 && p.high < 40.0, "{p:?}");
        assert_eq!((p.wins, p.losses, p.ties), (50, 0, 150));
        // The same answers in another order: no difference.
        let c: Vec<Row> = (0..200).map(|i| row("other", i, if (i + 1) % 4 == 0 { 0.0 } else { 1.0 })).collect();
        let p = compare(&refs(&a), &refs(&c), "answer recall", |r| r.answer_recall).unwrap();
        assert!(!p.significant(), "{p:?}");
        assert_eq!(p.difference, 0.0);
    }

    #[test]
    fn variants_pair_with_the_hybrid_of_their_budget() {
        let mut rows = Vec::new();
        for v in ["hybrid", "chunks", "hybrid @1100", "chunks @1100"] {
            rows.extend((0..5).map(|i| row(v, i, 1.0)));
        }
        let labels: Vec<String> = ["hybrid", "chunks", "hybrid @1100", "chunks @1100"].map(String::from).to_vec();
        let pairs = against_hybrid(&rows, &labels);
        let names: Vec<(String, String)> = pairs
            .iter()
            .filter(|p| p.measure == "answer recall")
            .map(|p| (p.reference.clone(), p.variant.clone()))
            .collect();
        assert_eq!(names, [("hybrid".into(), "chunks".into()), ("hybrid @1100".into(), "chunks @1100".into())]);
    }
}
