//! The question reader: short answers offline. What a factoid question asks for (a person, a
//! date, a place, an institution, a number, a nationality, one of two options it names, yes or
//! no), found in the sentences of the context without a model. The query stage's extractive
//! answerer uses it and falls back to the best sentence when the question is not a factoid or
//! the evidence does not decide; its second retrieval asks it which entity a relation chain
//! reached without the evidence it needs ([`unanswered_bridges`], [`second_query`]).
//!
//! By concern: [`asked`](mod@asked) (what is asked), [`choices`] (which of two, same or not, yes or
//! no), [`chains`] (the relations a question follows and how they are walked), [`spans`] (typed
//! candidate spans and their scores), over [`dates`] (dates and life spans) and [`facts`] (the
//! sentences as facts about the entities they name).
//!
//! - **Typed questions** (who, when, where, how many, what nationality, why): the candidate spans
//!   of the best sentences (entity mentions of the asked kind, or the phrase after a cause word),
//!   scored by their sentence's score, by how close they stand to the question's relation words
//!   ("born", "died", "directed" for "director"), and by a link from the question's entities:
//!   a sentence that names an entity named beside a question entity (the director of the film
//!   the question names) answers a two-hop question.
//! - **Choices** ("Which film came out first, A or B?", "Who was born later, A or B?"): the
//!   dates of each option (in sentences that name it, or, when the question asks about a role —
//!   "the director who was born first" — in sentences that name the person its sentences name),
//!   compared the way the question says.
//! - **Yes or no** ("Are A and B from the same country?"): whether the places and nationalities
//!   the sentences about A and about B give have one in common.

mod asked;
mod chains;
mod choices;
mod dates;
mod facts;
mod spans;
#[cfg(test)]
mod tests;

pub(crate) use self::asked::{Asked, Hop, asked, hop_phrases};
pub(crate) use self::spans::holds;

use self::asked::single_factoid;
use self::chains::{OPENERS, chain};
use self::facts::Facts;

/// A sentence of the context, with its score from the extractive answerer (higher is better).
#[derive(Debug, Clone, Copy)]
pub struct Sentence<'a> {
    /// Its text.
    pub text: &'a str,
    /// Its score.
    pub score: f32,
    /// Which piece of evidence it is in (sentences of one piece follow each other in order).
    pub group: usize,
}

/// A short answer and the sentence it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Short {
    /// The answer as written in the sentence (or the question, for a choice).
    pub text: String,
    /// The sentence (index into the sentences given) that supports it.
    pub sentence: usize,
}

/// `text` lowercased where that keeps every byte offset (a character whose lowercase is longer,
/// as `İ`'s, stays as it is), so that positions found in it index `text` too.
fn lowercase_in_place(text: &str) -> String {
    text.chars()
        .map(|c| {
            let mut lower = c.to_lowercase();
            match (lower.next(), lower.next()) {
                (Some(l), None) if l.len_utf8() == c.len_utf8() => l,
                _ => c,
            }
        })
        .collect()
}

fn lower_words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

/// Byte ranges of the alphanumeric words of `text`.
fn word_spans(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices().chain(std::iter::once((text.len(), ' '))) {
        match (c.is_alphanumeric(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// Whether a second retrieval may help `question` ([`unanswered_bridges`]): it follows a
/// relation, or compares the holders of a role in two works.
pub fn may_bridge(question: &str) -> bool {
    !hop_phrases(question).is_empty()
        || (single_factoid(question) && matches!(asked(question), Some(Asked::Choice { role: Some(_), .. })))
}

/// The entities a second retrieval should look for: for a relation question, the entity its
/// chain reaches before the evidence runs out (`unanswered_bridge`); for a comparison of role
/// holders (`Which film has the director who died first, A or B?`), each holder the evidence
/// names without the date compared. Empty when the evidence answers or names no one to ask
/// about.
pub fn unanswered_bridges(question: &str, entities: &[String], sentences: &[Sentence<'_>]) -> Vec<String> {
    match asked(question) {
        Some(Asked::Choice { options, order, event, role: Some(role) }) if single_factoid(question) => {
            Facts::new(sentences).undated_holders(&options, order, event, role)
        }
        // Checks that the question is a single factoid itself.
        _ => unanswered_bridge(question, entities, sentences).into_iter().collect(),
    }
}

/// The entity a relation question's chain reaches, hop by hop, before the evidence runs out:
/// the last entity reached when a later hop is not stated, or the entity at the chain's end
/// when no sentence about it gives what the question asks; none when the chain ends in an
/// answer or no hop is found at all. A second retrieval about it may hold what is missing.
fn unanswered_bridge(question: &str, entities: &[String], sentences: &[Sentence<'_>]) -> Option<String> {
    if !single_factoid(question) {
        return None;
    }
    let asked = asked(question)?;
    if matches!(asked, Asked::Choice { .. } | Asked::Same { .. } | Asked::Verify) {
        return None;
    }
    let facts = Facts::new(sentences);
    let mut deepest: Option<(usize, String)> = None;
    for (anchor, hops) in chain(question, entities) {
        let (reached, hop_sentences) = facts.walk(anchor, &hops);
        if hop_sentences.is_empty() {
            continue;
        }
        if hop_sentences.len() == hops.len() {
            return facts.at_end(&asked, question, &reached, &hop_sentences).is_none().then_some(reached);
        }
        if deepest.as_ref().is_none_or(|(d, _)| hop_sentences.len() > *d) {
            deepest = Some((hop_sentences.len(), reached));
        }
    }
    deepest.map(|(_, name)| name)
}

/// What a second retrieval about `entity` asks: the entity and the question's own words, less
/// its names and the hops already followed (`Where was the director of film Peter's Lane born?`
/// about Ken Varga → `Ken Varga where was the of film born`).
pub fn second_query(question: &str, entity: &str) -> String {
    let hops = hop_phrases(question);
    let words: Vec<&str> = word_spans(question)
        .into_iter()
        .filter(|&(s, _)| !hops.iter().any(|(r, _)| r.contains(&s)))
        .map(|(s, e)| &question[s..e])
        .filter(|w| !w.starts_with(char::is_uppercase) || OPENERS.contains(&w.to_lowercase().as_str()))
        .collect();
    format!("{entity} {}", words.join(" ").to_lowercase())
}

/// The short answer to `question` from `sentences` (with the question's `entities`), if the
/// question is a factoid and the evidence decides it.
pub fn short_answer(question: &str, entities: &[String], sentences: &[Sentence<'_>]) -> Option<Short> {
    if !single_factoid(question) {
        return None;
    }
    let asked = asked(question)?;
    let facts = Facts::new(sentences);
    match &asked {
        Asked::Choice { options, order, event, role } => facts.choice(options, *order, *event, *role),
        Asked::Same { subjects } => facts.same(subjects),
        Asked::Verify => facts.verify(question, entities),
        _ => facts.typed(&asked, question, entities),
    }
}
