//! Answer metrics as HippoRAG and HyperGraphRAG compute them (SQuAD normalisation: lowercase,
//! ASCII punctuation removed, the articles a/an/the dropped, whitespace collapsed; EM and
//! bag-of-tokens F1, the best over the gold answers), and the retrieval measures that need no
//! LLM: answer recall, answer-token recall, evidence recall and document recall of a context.

use std::collections::{HashMap, HashSet};

use crate::core::words::is_stop_word;

/// SQuAD/HotpotQA answer normalisation.
pub fn normalize_answer(s: &str) -> String {
    let lower = s.to_lowercase();
    let no_punct: String = lower.chars().filter(|c| !c.is_ascii_punctuation()).collect();
    no_punct.split_whitespace().filter(|w| !matches!(*w, "a" | "an" | "the")).collect::<Vec<_>>().join(" ")
}

/// Exact match, 0 or 1: the best over the gold answers.
pub fn exact_match(prediction: &str, golds: &[String]) -> f64 {
    let p = normalize_answer(prediction);
    if golds.iter().any(|g| normalize_answer(g) == p) { 1.0 } else { 0.0 }
}

fn f1_one(prediction: &str, gold: &str) -> f64 {
    let p: Vec<String> = normalize_answer(prediction).split_whitespace().map(str::to_owned).collect();
    let g: Vec<String> = normalize_answer(gold).split_whitespace().map(str::to_owned).collect();
    let mut counts: HashMap<&str, i64> = HashMap::new();
    for w in &g {
        *counts.entry(w).or_default() += 1;
    }
    let mut same = 0;
    for w in &p {
        if let Some(c) = counts.get_mut(w.as_str())
            && *c > 0
        {
            *c -= 1;
            same += 1;
        }
    }
    if same == 0 {
        return 0.0;
    }
    let precision = same as f64 / p.len() as f64;
    let recall = same as f64 / g.len() as f64;
    2.0 * precision * recall / (precision + recall)
}

/// Token F1, the best over the gold answers.
pub fn f1(prediction: &str, golds: &[String]) -> f64 {
    golds.iter().map(|g| f1_one(prediction, g)).fold(0.0, f64::max)
}

/// The content words of a text (normalised tokens without stop words).
pub fn content_words(s: &str) -> Vec<String> {
    normalize_answer(s).split_whitespace().filter(|w| !is_stop_word(w)).map(str::to_owned).collect()
}

/// A context prepared once for the recall measures.
#[derive(Debug, Clone)]
pub struct ContextText {
    /// Normalised text with a space at both ends, for whole-word containment.
    padded: String,
    /// Its distinct words.
    words: HashSet<String>,
}

impl ContextText {
    /// Prepares the text given to the generator.
    pub fn new(text: &str) -> ContextText {
        let normalised = normalize_answer(text);
        let words = normalised.split_whitespace().map(str::to_owned).collect();
        ContextText { padded: format!(" {normalised} "), words }
    }

    /// Answer recall: whether some normalised gold answer occurs in the context as whole words.
    pub fn contains_answer(&self, golds: &[String]) -> Option<f64> {
        let golds: Vec<String> = golds.iter().map(|g| normalize_answer(g)).filter(|g| !g.is_empty()).collect();
        if golds.is_empty() {
            return None;
        }
        Some(if golds.iter().any(|g| self.padded.contains(&format!(" {g} "))) { 1.0 } else { 0.0 })
    }

    /// Share of a text's content words present in the context (`None` without content words).
    pub fn token_recall(&self, text: &str) -> Option<f64> {
        let words: HashSet<String> = content_words(text).into_iter().collect();
        if words.is_empty() {
            return None;
        }
        Some(words.iter().filter(|w| self.words.contains(*w)).count() as f64 / words.len() as f64)
    }

    /// Answer-token recall: the best token recall over the gold answers.
    pub fn answer_token_recall(&self, golds: &[String]) -> Option<f64> {
        golds.iter().filter_map(|g| self.token_recall(g)).reduce(f64::max)
    }

    /// Evidence recall: the mean token recall of the gold evidence strings.
    pub fn evidence_recall(&self, evidence: &[String]) -> Option<f64> {
        mean(evidence.iter().filter_map(|e| self.token_recall(e)))
    }
}

/// Document recall: the share of gold documents among the context's documents.
/// Document recall@k: the share of the gold documents among the first `k` distinct documents of
/// `ranked` (the documents of the context's evidence, best first), as HippoRAG 2 reports passage
/// recall@5 (None without gold documents).
pub fn doc_recall_at(gold: &[String], ranked: &[&str], k: usize) -> Option<f64> {
    if gold.is_empty() {
        return None;
    }
    let mut first: Vec<&str> = Vec::with_capacity(k);
    for doc in ranked {
        if first.len() == k {
            break;
        }
        if !first.contains(doc) {
            first.push(doc);
        }
    }
    Some(gold.iter().filter(|d| first.contains(&d.as_str())).count() as f64 / gold.len() as f64)
}

/// Document recall: the share of the gold documents among the documents `cited` (None without
/// gold documents).
pub fn doc_recall(gold: &[String], cited: &HashSet<&str>) -> Option<f64> {
    if gold.is_empty() {
        return None;
    }
    Some(gold.iter().filter(|d| cited.contains(d.as_str())).count() as f64 / gold.len() as f64)
}

/// SG-RAG's measures of one question over the labels structure matching gave the node asked
/// for (best subgraph first): Hit@1 (the first label is a gold answer), recall (some label is:
/// the gold answers are aliases of one answer, so recall is 0 or 1) and F1 of that recall with
/// the precision (the share of the labels that are a gold answer). A label is a gold answer when
/// both normalise alike (as [`exact_match`]). No labels score 0; `None` without a gold answer.
pub fn label_scores(labels: &[String], golds: &[String]) -> Option<LabelScores> {
    let golds: HashSet<String> = golds.iter().map(|g| normalize_answer(g)).filter(|g| !g.is_empty()).collect();
    if golds.is_empty() {
        return None;
    }
    let correct: Vec<bool> = labels.iter().map(|l| golds.contains(&normalize_answer(l))).collect();
    let hits = correct.iter().filter(|&&c| c).count();
    let recall = if hits > 0 { 1.0 } else { 0.0 };
    let precision = if labels.is_empty() { 0.0 } else { hits as f64 / labels.len() as f64 };
    let f1 = if hits > 0 { 2.0 * precision * recall / (precision + recall) } else { 0.0 };
    Some(LabelScores { hit_at_1: if correct.first() == Some(&true) { 1.0 } else { 0.0 }, recall, f1 })
}

/// [`label_scores`] of one question.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LabelScores {
    /// The first label is a gold answer (0/1).
    pub hit_at_1: f64,
    /// Some label is (0/1).
    pub recall: f64,
    /// F1 of recall and precision.
    pub f1: f64,
}

/// Mean of the values (`None` when there are none).
pub fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// The `p` quantile (0–1) of values, nearest rank.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some(sorted[((sorted.len() - 1) as f64 * p).round() as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn normalisation_follows_squad() {
        assert_eq!(normalize_answer("The  Eiffel Tower!"), "eiffel tower");
        assert_eq!(normalize_answer("An apple, a banana & THE pear."), "apple banana pear");
        // Articles only as whole words; punctuation is removed before they are looked for.
        assert_eq!(normalize_answer("Theatre of Anatolia"), "theatre of anatolia");
        assert_eq!(normalize_answer("the-end"), "theend");
        assert_eq!(normalize_answer("a.b"), "ab");
        // Only ASCII punctuation goes (as Python's string.punctuation).
        assert_eq!(normalize_answer("“Port of Spain”"), "“port of spain”");
        assert_eq!(normalize_answer("  "), "");
    }

    #[test]
    fn exact_match_and_f1_take_the_best_gold() {
        assert_eq!(exact_match("the Eiffel tower.", &g(&["Eiffel Tower"])), 1.0);
        assert_eq!(exact_match("Eiffel", &g(&["Eiffel Tower"])), 0.0);
        assert_eq!(exact_match("Paris", &g(&["Lyon", "paris"])), 1.0);
        assert_eq!(exact_match("", &g(&["x"])), 0.0);
        assert_eq!(exact_match("x", &[]), 0.0);
        // precision 1/2, recall 1/1 → 2/3.
        assert!((f1("Port Spain", &g(&["Spain"])) - 2.0 / 3.0).abs() < 1e-9);
        assert!((f1("Phoolwari", &g(&["Aas Ka Panchhi", "Phoolwari"])) - 1.0).abs() < 1e-9);
        assert_eq!(f1("the", &g(&["a"])), 0.0);
        assert_eq!(f1("", &g(&["x"])), 0.0);
        // Repeated tokens count as many times as they appear in both.
        assert!((f1("new new york", &g(&["new york"])) - 0.8).abs() < 1e-9);
    }

    #[test]
    fn context_measures() {
        let c = ContextText::new("[1] (hyperedge; d 0-10) The trawler Morning Star was lost in 1952, off Skerry Head.");
        assert_eq!(c.contains_answer(&g(&["1952"])), Some(1.0));
        assert_eq!(c.contains_answer(&g(&["195"])), Some(0.0));
        assert_eq!(c.contains_answer(&g(&["the Morning-Star"])), Some(0.0));
        assert_eq!(c.contains_answer(&g(&["x", "skerry head"])), Some(1.0));
        assert_eq!(c.contains_answer(&g(&["", "!"])), None);
        // 3 content words of 4 (lost, 1952, storm?; "was" is a stop word).
        assert_eq!(c.answer_token_recall(&g(&["The Morning Star was lost in a storm"])), Some(0.75));
        assert_eq!(c.answer_token_recall(&g(&["of the"])), None);
        assert_eq!(
            c.evidence_recall(&g(&["(Morning Star; lost; 1952)", "(Skerry Head; county; Cornwall)"])),
            Some(0.75)
        );
        assert_eq!(c.evidence_recall(&[]), None);
        let cited: HashSet<&str> = ["a", "b"].into_iter().collect();
        assert_eq!(doc_recall(&g(&["a", "c"]), &cited), Some(0.5));
        assert_eq!(doc_recall(&[], &cited), None);
        // @k counts distinct documents in rank order.
        let ranked = ["a", "a", "b", "c", "d"];
        assert_eq!(doc_recall_at(&g(&["c", "a"]), &ranked, 2), Some(0.5));
        assert_eq!(doc_recall_at(&g(&["c", "a"]), &ranked, 3), Some(1.0));
        assert_eq!(doc_recall_at(&g(&["z"]), &ranked, 5), Some(0.0));
        assert_eq!(doc_recall_at(&[], &ranked, 5), None);
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 0.5), Some(2.0));
        assert_eq!(mean([1.0, 2.0].into_iter()), Some(1.5));
    }

    #[test]
    fn label_scores_follow_sg_rag() {
        let scores = |labels: &[&str], golds: &[&str]| label_scores(&g(labels), &g(golds));
        let one = |hit_at_1, recall, f1| Some(LabelScores { hit_at_1, recall, f1 });
        assert_eq!(scores(&["The Eiffel Tower"], &["Eiffel tower"]), one(1.0, 1.0, 1.0));
        // Second of four: precision 1/4, recall 1 → F1 0.4; not a hit at 1.
        assert_eq!(scores(&["Lyon", "Paris", "Nice", "Metz"], &["paris"]), one(0.0, 1.0, 0.4));
        // Aliases of one answer: two labels matching two aliases are both right.
        assert_eq!(scores(&["NYC", "New York"], &["New York", "NYC"]), one(1.0, 1.0, 1.0));
        // A label containing the answer is not the answer.
        assert_eq!(scores(&["Port of Spain"], &["Spain"]), one(0.0, 0.0, 0.0));
        assert_eq!(scores(&[], &["x"]), one(0.0, 0.0, 0.0));
        assert_eq!(scores(&["x"], &["", "the"]), None);
    }
}
