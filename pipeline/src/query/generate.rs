//! Answers from a context: through the LLM (our answer prompt, citations as `[n]`), or offline
//! as an extractive answer — the evidence sentence that best supports the question, quoted
//! verbatim with its exact source span.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::context::Context;
use super::kb::Span;
use crate::extract::entities::{MentionKind, looks_like_person, mentions};
use crate::text::sentences;

/// An answer and what it rests on.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Generated {
    /// The answer text (empty when there is nothing to answer from).
    pub answer: String,
    /// Evidence numbers (0-based positions in the context) the answer cites.
    pub cited: Vec<usize>,
    /// Source spans of the answer.
    pub citations: Vec<Span>,
}

/// Words that carry no content for matching a question to a sentence.
const STOP_WORDS: &[&str] = &[
    "a", "an", "the", "of", "in", "on", "at", "by", "for", "from", "with", "to", "and", "or", "but", "is", "are",
    "was", "were", "be", "been", "being", "do", "does", "did", "has", "have", "had", "what", "which", "who",
    "whom", "whose", "when", "where", "why", "how", "that", "this", "these", "those", "it", "its", "as", "into",
    "about", "than", "then", "there", "their", "they", "them", "he", "she", "his", "her", "can", "could",
    "would", "should", "will", "shall", "may", "might", "must", "not", "no", "any", "all", "some", "more",
    "most", "other", "such", "also", "if", "so", "between", "both", "each", "same", "describe", "explain",
    "discuss", "according", "role", "first", "s",
];

/// Lowercased content words of a text.
pub fn content_words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
        .collect()
}

/// What a question asks for, when its first words say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AnswerType {
    /// `when`, `what year`, `what date`.
    Date,
    /// `how many`, `how much`, `how long`, …
    Number,
    /// `who`, `whom`, `whose`.
    Person,
}

const MONTHS: &[&str] = &[
    "january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
    "november", "december",
];

/// Weight of a sentence holding the kind of thing the question asks for, in units of one rare
/// shared word.
const TYPE_BONUS: f32 = 1.5;

impl AnswerType {
    fn of(question: &str) -> Option<AnswerType> {
        let q = question.trim_start().to_lowercase();
        let starts = |p: &str| q.starts_with(p);
        if starts("when") || starts("what year") || starts("in what year") || starts("in which year") || starts("what date") {
            Some(AnswerType::Date)
        } else if starts("how many") || starts("how much") || starts("how long") || starts("how far") || starts("how old") || starts("how big") {
            Some(AnswerType::Number)
        } else if starts("who") || starts("whom") || starts("whose") {
            Some(AnswerType::Person)
        } else {
            None
        }
    }

    /// Whether `sentence` holds an answer of this type that the question does not already
    /// contain.
    fn found_in(self, sentence: &str, asked: &HashSet<String>) -> bool {
        let words = sentence.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty());
        match self {
            AnswerType::Number => words.filter(|w| w.chars().any(|c| c.is_ascii_digit())).any(|w| !asked.contains(w)),
            AnswerType::Date => words.map(str::to_lowercase).any(|w| {
                let year = w.len() == 4 && w.chars().all(|c| c.is_ascii_digit()) && (w.starts_with('1') || w.starts_with("20"));
                (year || MONTHS.contains(&w.as_str())) && !asked.contains(&w)
            }),
            AnswerType::Person => {
                mentions(sentence, 0..sentence.len(), &HashSet::new()).iter().any(|m| {
                    let name = &sentence[m.bytes.clone()];
                    m.kind == MentionKind::Name && looks_like_person(name) && content_words(name).iter().any(|w| !asked.contains(w))
                })
            }
        }
    }
}

/// A sentence of the context that could be the answer.
struct Candidate {
    evidence: usize,
    text: String,
    span: Option<Span>,
    /// Ordered, so that the float sum of a score is the same in every run.
    words: BTreeSet<String>,
}

fn candidates(context: &Context) -> Vec<Candidate> {
    let mut out = Vec::new();
    for (i, e) in context.evidence.iter().enumerate() {
        for piece in &e.pieces {
            for range in sentences(&piece.text, 0..piece.text.len()) {
                let text = &piece.text[range.clone()];
                let span = piece.span.as_ref().map(|s| {
                    let start = s.start + piece.text[..range.start].chars().count() as i64;
                    Span { doc_id: s.doc_id.clone(), start, end: start + text.chars().count() as i64 }
                });
                out.push(Candidate { evidence: i, text: text.to_owned(), span, words: content_words(text).into_iter().collect() });
            }
        }
    }
    out
}

/// The extractive answer: the sentence of the evidence whose content words best cover the
/// question's (each word weighted by its rarity among the candidate sentences), preferring
/// sentences that add words the question does not contain, then higher-ranked evidence.
pub fn extractive(question: &str, context: &Context) -> Generated {
    let asked: HashSet<String> = content_words(question).into_iter().collect();
    let candidates = candidates(context);
    if candidates.is_empty() {
        return Generated::default();
    }
    let mut df: HashMap<&str, usize> = HashMap::new();
    for c in &candidates {
        for w in &c.words {
            *df.entry(w.as_str()).or_default() += 1;
        }
    }
    let n = candidates.len() as f32;
    let idf = |w: &str| ((n + 1.0) / (df.get(w).copied().unwrap_or(0) as f32 + 0.5)).ln();
    let wanted = AnswerType::of(question);
    let score = |c: &Candidate| {
        let overlap: f32 = c.words.iter().filter(|w| asked.contains(*w)).map(|w| idf(w)).sum();
        let adds = c.words.iter().any(|w| !asked.contains(w));
        let typed = if wanted.is_some_and(|t| t.found_in(&c.text, &asked)) { TYPE_BONUS } else { 0.0 };
        (adds, overlap + typed)
    };
    let mut best = 0;
    let mut best_score = score(&candidates[0]);
    for (i, c) in candidates.iter().enumerate().skip(1) {
        let s = score(c);
        // Strictly better only: earlier (higher-ranked) evidence wins ties.
        if (s.0 && !best_score.0) || (s.0 == best_score.0 && s.1 > best_score.1) {
            best = i;
            best_score = s;
        }
    }
    let c = &candidates[best];
    let citations = match &c.span {
        Some(span) => vec![span.clone()],
        None => context.evidence[c.evidence].spans.clone(),
    };
    Generated { answer: c.text.trim().to_owned(), cited: vec![c.evidence], citations }
}

/// Evidence numbers cited as `[n]`, `[n, m]` or `[n][m]` in an LLM answer, as 0-based positions
/// among `count` pieces of evidence (numbers out of range are ignored), in first-cited order.
pub fn cited_numbers(answer: &str, count: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut rest = answer;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else { break };
        for part in after[..close].split([',', ';', ' ']) {
            if let Ok(n) = part.trim().parse::<usize>()
                && (1..=count).contains(&n)
                && !out.contains(&(n - 1))
            {
                out.push(n - 1);
            }
        }
        rest = &after[close..];
    }
    out
}

/// The answer of an LLM over `context`: its citations are the spans of the evidence it cites
/// (every piece of evidence when it cites none).
pub fn from_llm(answer: String, context: &Context) -> Generated {
    let mut cited = cited_numbers(&answer, context.evidence.len());
    if cited.is_empty() {
        cited = (0..context.evidence.len()).collect();
    }
    let mut citations: Vec<Span> = cited.iter().flat_map(|&i| context.evidence[i].spans.iter().cloned()).collect();
    let mut seen = HashSet::new();
    citations.retain(|s| seen.insert(s.clone()));
    Generated { answer: answer.trim().to_owned(), cited, citations }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn citation_markers() {
        assert_eq!(cited_numbers("Paris [2]. It is big [1, 3][3] and [9] old [x].", 3), vec![1, 0, 2]);
        assert_eq!(cited_numbers("no markers", 3), Vec::<usize>::new());
        assert_eq!(cited_numbers("unclosed [1", 3), Vec::<usize>::new());
    }

    #[test]
    fn content_words_drop_question_words() {
        assert_eq!(content_words("Who founded the Velda Basin Authority?"), vec!["founded", "velda", "basin", "authority"]);
    }
}
