//! The answers capability: answers from a context. Backends: [`LlmAnswerer`] (our answer
//! prompt, citations as `[n]`) and [`ExtractiveAnswerer`], the rules' answer — the evidence
//! sentence that best supports the question, quoted verbatim with its exact source span.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;

use super::context::Context;
use super::kb::Span;
use super::{STAGE, rules_query_entities};
use crate::core::backend::BackendId;
use crate::core::text::sentences;
use crate::core::words::is_question_stop_word;
use crate::io::CallRecord;
use crate::llm::prompts::{Prompt, answer_messages};
use crate::llm::{CallContext, Runner};
use crate::rules::question as reader;

/// One question's answer as a backend gives it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Answered {
    /// The answer and what it rests on.
    pub generated: Generated,
    /// `llm`, `extractive`, `none` (nothing to answer from), or `failed` (see `error`).
    pub generator: &'static str,
    /// Milliseconds spent producing it, from when its request could go out (not counting its
    /// wait behind the other questions of a batch).
    pub ms: f64,
    /// Why the answer is missing, when the backend failed for this question.
    pub error: Option<String>,
}

/// Answers questions from their contexts.
pub trait Answerer: Send + Sync {
    /// Who answers (reported with the answers' evaluation).
    fn identity(&self) -> BackendId;
    /// The answer to each question from its context, in order, as `options` say.
    fn answer_all(&self, questions: &[&str], contexts: &[&Context], options: AnswerOptions) -> Vec<Answered>;
    /// The calls made since the last time (for `llm_calls`).
    fn take_calls(&self) -> Vec<CallRecord> {
        Vec::new()
    }
}

/// How a batch is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AnswerOptions {
    /// The questions without their evidence (the no-retrieval peer).
    pub closed_book: bool,
    /// Short answers where the question is a factoid (the extractive answerer; an LLM answers
    /// as its prompt says).
    pub short: bool,
}

/// The rules' answers: extractive.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExtractiveAnswerer;

impl Answerer for ExtractiveAnswerer {
    fn identity(&self) -> BackendId {
        BackendId::RULES
    }

    fn answer_all(&self, questions: &[&str], contexts: &[&Context], options: AnswerOptions) -> Vec<Answered> {
        questions
            .iter()
            .zip(contexts)
            .map(|(q, context)| {
                let started = Instant::now();
                let generated = extractive(q, context, options.short);
                let generator = if generated.answer.is_empty() { "none" } else { "extractive" };
                Answered { generated, generator, ms: started.elapsed().as_secs_f64() * 1000.0, error: None }
            })
            .collect()
    }
}

/// Answers by an LLM.
#[derive(Debug, Clone)]
pub struct LlmAnswerer {
    runner: Arc<Runner>,
}

impl LlmAnswerer {
    /// A backend over `runner`.
    pub fn new(runner: Arc<Runner>) -> Self {
        LlmAnswerer { runner }
    }
}

impl Answerer for LlmAnswerer {
    fn identity(&self) -> BackendId {
        self.runner.identity(Prompt::Answer.version())
    }

    fn answer_all(&self, questions: &[&str], contexts: &[&Context], options: AnswerOptions) -> Vec<Answered> {
        let client = self.runner.client();
        // At most as many questions in flight as the client sends at once, so that a question's
        // clock starts when its request can go out: its time is its own, not its wait behind
        // the batch's earlier questions (answers are put back in question order below).
        let in_flight = client.config().max_concurrency.max(1);
        let asks = questions.iter().zip(contexts).enumerate().map(|(i, (q, context))| async move {
            let started = Instant::now();
            let evidence = (!options.closed_book).then(|| context.render());
            let call = CallContext { stage: STAGE.into(), doc_id: None, purpose: "answer".into() };
            let messages = answer_messages(q, evidence.as_deref());
            // Cut even with twice the room, the question fails (never a cut answer taken whole).
            let answer = client.chat_whole(&call, &messages, None).await;
            (i, answer, started.elapsed().as_secs_f64() * 1000.0)
        });
        let mut answers: Vec<_> =
            self.runner.block_on(futures::stream::iter(asks).buffer_unordered(in_flight).collect());
        answers.sort_unstable_by_key(|(i, ..)| *i);
        answers
            .into_iter()
            .zip(contexts)
            .map(|((_, answer, ms), context)| match answer {
                Ok(answer) => Answered { generated: from_llm(answer, context), generator: "llm", ms, error: None },
                // One failed question does not stop the batch; a rerun asks it again (answered
                // ones come from the cache).
                Err(e) => {
                    Answered { generated: Generated::default(), generator: "failed", ms, error: Some(e.to_string()) }
                }
            })
            .collect()
    }

    fn take_calls(&self) -> Vec<CallRecord> {
        self.runner.drain_all_calls()
    }
}

/// An answer and what it rests on.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Generated {
    /// The answer text (empty when there is nothing to answer from).
    pub answer: String,
    /// The direct answer alone, when the answer gives it apart from an explanation.
    pub short: Option<String>,
    /// The sentence the answer comes from, when the answer is a short span of it (or an option
    /// of the question that it decides).
    pub support: Option<String>,
    /// Evidence numbers (0-based positions in the context) the answer cites.
    pub cited: Vec<usize>,
    /// Source spans of the answer.
    pub citations: Vec<Span>,
}

/// Lowercased content words of a text.
pub fn content_words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !is_question_stop_word(w))
        .collect()
}

/// Weight of a sentence holding the kind of thing the question asks for, in units of one rare
/// shared word.
const TYPE_BONUS: f32 = 1.5;

/// Score given to a sentence that adds nothing to the question, below every sentence that does.
const ADDS_NOTHING: f32 = -1.0e6;

/// A sentence of the context that could be the answer.
struct Candidate {
    evidence: usize,
    text: String,
    span: Option<Span>,
    /// Ordered, so that the float sum of a score is the same in every run.
    words: BTreeSet<String>,
    /// The name words of the sentence a pronoun continues (`It was signed …` after `The Kestrel
    /// Valley Water Compact is …`): they match the question's words as its own do.
    carried: BTreeSet<String>,
}

/// Words that open a sentence continuing the subject of the one before it.
const CONTINUING: &[&str] = &["It", "Its", "He", "His", "She", "Her", "They", "Their"];

/// The lowercased words of `text` written with a capital (the names it states).
fn name_words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().next().is_some_and(char::is_uppercase))
        .map(str::to_lowercase)
        .filter(|w| !is_question_stop_word(w))
        .collect()
}

/// The sentences of the context that an answer may be: those it can cite (a sentence of a piece
/// with a source span, or of evidence with spans). An answer is never shown without the source it
/// came from, so derived text without a span is read by no one.
fn candidates(context: &Context) -> Vec<Candidate> {
    let mut out = Vec::new();
    for (i, e) in context.evidence.iter().enumerate() {
        for piece in e.pieces.iter().filter(|p| p.span.is_some() || !e.spans.is_empty()) {
            // The names of the last sentence that did not open with a pronoun.
            let mut subject = BTreeSet::new();
            for range in sentences(&piece.text, 0..piece.text.len()) {
                let text = &piece.text[range.clone()];
                let span = piece.span.as_ref().map(|s| {
                    let start = s.start + piece.text[..range.start].chars().count() as i64;
                    Span { doc_id: s.doc_id.clone(), start, end: start + text.chars().count() as i64 }
                });
                let opener = text.split(|c: char| !c.is_alphanumeric()).find(|w| !w.is_empty()).unwrap_or_default();
                let carried = if CONTINUING.contains(&opener) {
                    subject.clone()
                } else {
                    subject = name_words(text);
                    BTreeSet::new()
                };
                out.push(Candidate {
                    evidence: i,
                    text: text.to_owned(),
                    span,
                    words: content_words(text).into_iter().collect(),
                    carried,
                });
            }
        }
    }
    out
}

/// The extractive answer. Each sentence of the evidence is scored by how well its content words
/// cover the question's (each word weighted by its rarity among the candidate sentences), plus
/// [`TYPE_BONUS`] when it holds the kind of thing the question asks for; sentences that add
/// nothing to the question come last, and higher-ranked evidence wins ties. With `short`, a
/// factoid question is answered by the span that answers it ([`reader::short_answer`]), with the
/// sentence it comes from as `support`; otherwise (or when the evidence does not decide) the
/// answer is the best sentence.
pub fn extractive(question: &str, context: &Context, short: bool) -> Generated {
    let candidates = candidates(context);
    if candidates.is_empty() {
        return Generated::default();
    }
    if let Some(answer) = compound(question, context, &candidates) {
        return answer;
    }
    let asked: HashSet<String> = content_words(question).into_iter().collect();
    let scores = scores(question, &asked, &candidates);
    let best = best_of(&scores, |_| true).unwrap_or(0);
    let found = short
        .then(|| {
            reader::short_answer(question, &rules_query_entities(question), &reader_sentences(&candidates, &scores))
        })
        .flatten();
    let (answer, c) = match found {
        Some(s) => (s.text, &candidates[s.sentence]),
        None => (candidates[best].text.trim().to_owned(), &candidates[best]),
    };
    let support = (answer != c.text.trim()).then(|| c.text.trim().to_owned());
    Generated { answer, short: None, support, cited: vec![c.evidence], citations: c.citations(context) }
}

impl Candidate {
    /// What cites the sentence: its exact span, or its evidence's spans when it has none.
    fn citations(&self, context: &Context) -> Vec<Span> {
        match &self.span {
            Some(span) => vec![span.clone()],
            None => context.evidence[self.evidence].spans.clone(),
        }
    }
}

/// The best-scored candidate among those `allowed`; strictly better only, so earlier
/// (higher-ranked) evidence wins ties. None when none is allowed.
fn best_of(scores: &[f32], allowed: impl Fn(usize) -> bool) -> Option<usize> {
    (0..scores.len()).filter(|&i| allowed(i)).fold(None, |best, i| match best {
        Some(b) if scores[i] <= scores[b] => Some(b),
        _ => Some(i),
    })
}

/// Question words that open the second ask of a question that asks two things.
const ASKS: &[&str] = &["what", "why", "how", "who", "whom", "whose", "where", "when", "which"];

/// The asks of a question that asks two or more things (`Why was X drained, and what did it
/// cost?`): the question cut before each `and` or `;` that a question word follows, keeping the
/// parts with content words of their own (`…, and by whom?` adds none and stays one ask).
fn asks(question: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut at) = (0, 0);
    while at < question.len() {
        let rest = &question[at..];
        let cut = [", and ", " and ", "; "].iter().find(|sep| rest.starts_with(**sep)).and_then(|sep| {
            let next = rest[sep.len()..].split(|c: char| !c.is_alphanumeric()).next().unwrap_or_default();
            ASKS.contains(&next.to_lowercase().as_str()).then_some(sep.len())
        });
        match cut {
            Some(len) => {
                parts.push(&question[start..at]);
                start = at + len;
                at = start;
            }
            None => at += question[at..].chars().next().map_or(1, char::len_utf8),
        }
    }
    parts.push(&question[start..]);
    parts.retain(|p| !content_words(p).is_empty());
    parts
}

/// The answer to a question of several asks ([`asks`]): the best sentence for each, in the
/// order asked (one sentence that answers two asks is given once). None for a question of one
/// ask, or when one sentence is the best for every ask (the single answer then stands).
fn compound(question: &str, context: &Context, candidates: &[Candidate]) -> Option<Generated> {
    let parts = asks(question);
    if parts.len() < 2 {
        return None;
    }
    let mut chosen: Vec<usize> = Vec::new();
    for part in parts {
        let asked: HashSet<String> = content_words(part).into_iter().collect();
        let scores = scores(part, &asked, candidates);
        // A Markdown heading names a section; it states nothing that answers an ask.
        let best = best_of(&scores, |i| !candidates[i].text.trim_start().starts_with('#'));
        if let Some(best) = best.filter(|&b| scores[b] > 0.0 && !chosen.contains(&b)) {
            chosen.push(best);
        }
    }
    if chosen.len() < 2 {
        return None;
    }
    let answer = chosen.iter().map(|&c| candidates[c].text.trim()).collect::<Vec<_>>().join(" ");
    let mut cited: Vec<usize> = Vec::new();
    let mut citations: Vec<Span> = Vec::new();
    for &c in &chosen {
        let c = &candidates[c];
        if !cited.contains(&c.evidence) {
            cited.push(c.evidence);
        }
        citations.extend(c.citations(context));
    }
    Some(Generated { answer, short: None, support: None, cited, citations })
}

/// Each candidate sentence's score: its content words' overlap with the question's `asked`
/// words (each weighted by its rarity among the candidates), plus [`TYPE_BONUS`] when it holds
/// the kind of thing the question asks for, [`ADDS_NOTHING`] when it only repeats the question.
fn scores(question: &str, asked: &HashSet<String>, candidates: &[Candidate]) -> Vec<f32> {
    let mut df: HashMap<&str, usize> = HashMap::new();
    for c in candidates {
        for w in &c.words {
            *df.entry(w.as_str()).or_default() += 1;
        }
    }
    let n = candidates.len() as f32;
    let idf = |w: &str| ((n + 1.0) / (df.get(w).copied().unwrap_or(0) as f32 + 0.5)).ln();
    let wanted = reader::asked(question);
    candidates
        .iter()
        .map(|c| {
            let overlap: f32 = c.words.union(&c.carried).filter(|w| asked.contains(*w)).map(|w| idf(w)).sum();
            let typed =
                if wanted.as_ref().is_some_and(|t| reader::holds(t, &c.text, asked)) { TYPE_BONUS } else { 0.0 };
            let adds = c.words.iter().any(|w| !asked.contains(w));
            overlap + typed + if adds { 0.0 } else { ADDS_NOTHING }
        })
        .collect()
}

/// The entities `context` says too little about for `question` ([`reader::unanswered_bridges`]:
/// the entity a relation chain reaches, the undated holders of a compared role), read with the
/// answerer's own sentence scores: what second retrievals should look for.
pub fn unanswered_bridges(question: &str, context: &Context) -> Vec<String> {
    let asked: HashSet<String> = content_words(question).into_iter().collect();
    let candidates = candidates(context);
    let scores = scores(question, &asked, &candidates);
    reader::unanswered_bridges(question, &rules_query_entities(question), &reader_sentences(&candidates, &scores))
}

/// The candidates with their scores, as the short-answer reader takes them.
fn reader_sentences<'c>(candidates: &'c [Candidate], scores: &[f32]) -> Vec<reader::Sentence<'c>> {
    candidates
        .iter()
        .zip(scores)
        .map(|(c, &score)| reader::Sentence { text: &c.text, score, group: c.evidence })
        .collect()
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
    let short = short_of(&answer);
    Generated { answer: answer.trim().to_owned(), short, support: None, cited, citations }
}

/// The direct answer of an LLM's answer: what follows `Answer:` on its first such line (the
/// answer prompt asks for it), else its first sentence; citation markers and markdown emphasis
/// removed. None for an empty answer.
pub fn short_of(answer: &str) -> Option<String> {
    let labelled = answer.lines().find_map(|line| {
        let line = line.trim().trim_start_matches(['*', '_', '#', ' ']);
        let (label, rest) = line.split_once(':')?;
        label.trim_end_matches(['*', '_']).trim().eq_ignore_ascii_case("answer").then_some(rest)
    });
    let text = match labelled {
        Some(rest) => rest.to_owned(),
        None => {
            let first = answer.trim();
            let end = crate::core::text::sentence_ends(first).first().copied().unwrap_or(first.len());
            first[..end].to_owned()
        }
    };
    let mut short = String::with_capacity(text.len());
    let mut rest = text.as_str();
    // Drop `[n]`, `[n, m]` markers.
    while let Some(open) = rest.find('[') {
        let (before, after) = rest.split_at(open);
        short.push_str(before);
        match after.find(']') {
            Some(close) if after[1..close].chars().all(|c| c.is_ascii_digit() || c == ',' || c == ' ') => {
                rest = &after[close + 1..];
            }
            _ => {
                short.push('[');
                rest = &after[1..];
            }
        }
    }
    short.push_str(rest);
    let short = short.replace("**", "").split_whitespace().collect::<Vec<_>>().join(" ");
    let short = short.trim().trim_end_matches(['.', ' ']).trim().to_owned();
    (!short.is_empty()).then_some(short)
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
    fn the_short_answer_is_the_answer_line_without_markers() {
        assert_eq!(short_of("Answer: Rafael Ortiz [1].\nHe chaired the talks [1][3]."), Some("Rafael Ortiz".into()));
        assert_eq!(short_of("**Answer:** 14 May 2009 [2]\n\nSigned in Aldermoor."), Some("14 May 2009".into()));
        assert_eq!(short_of("Rafael Ortiz [1]. He chaired the talks."), Some("Rafael Ortiz".into()));
        assert_eq!(short_of("answer: yes"), Some("yes".into()));
        assert_eq!(short_of("Answer: the [draft] text [1, 2]"), Some("the [draft] text".into()));
        assert_eq!(short_of("  "), None);
    }

    #[test]
    fn content_words_drop_question_words() {
        assert_eq!(
            content_words("Who founded the Velda Basin Authority?"),
            vec!["founded", "velda", "basin", "authority"]
        );
    }
}
