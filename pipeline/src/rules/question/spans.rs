//! Typed spans: the candidate answers of the kind a question asks for in the best sentences,
//! scored by their sentence, their nearness to the question's words, and links from its entities.

use std::collections::HashSet;

use super::asked::{
    Asked, Event, NUMBER_WORDS, as_asked, asked_event, bare, counted_noun, is_institution, relation_stems,
};
use super::chains::chain;
use super::dates::{LifeSpan, dates_of, event_at, read_sentence};
use super::facts::{Facts, joined_end};
use super::{Short, lower_words, lowercase_in_place, word_spans};
use crate::core::names::normalize;
use crate::core::words::is_question_stop_word;
use crate::rules::countries::{countries_in, is_demonym, state_after};
use crate::rules::mentions::{CURRENCIES, MONTHS};
use crate::rules::{Mention, MentionKind, looks_like_person, mentions};

impl<'s, 'a> Facts<'s, 'a> {
    /// The best span of the kind `asked` wants among `candidates` (sentence numbers, best
    /// first), scored by its sentence's score and `bonus` and by its nearness to the question's
    /// relation words; spans that are all question words or `exclude` (the entity asked about)
    /// are not answers.
    pub(super) fn best_span(
        &self,
        asked: &Asked,
        question: &str,
        candidates: &[usize],
        bonus: impl Fn(usize) -> f32,
        exclude: &str,
    ) -> Option<Short> {
        let asked_words: HashSet<String> = lower_words(question).into_iter().collect();
        let content: HashSet<&str> =
            asked_words.iter().map(String::as_str).filter(|w| !is_question_stop_word(w)).collect();
        let exclude = normalize(exclude);
        let stems = relation_stems(question);
        let counted = counted_noun(question);
        // The birth or the death a date or a place is asked about.
        let event = if matches!(asked, Asked::Date | Asked::Place) { asked_event(question) } else { Event::Any };
        let mut best: Option<(f32, Short)> = None;
        for &i in candidates.iter().take(CANDIDATE_SENTENCES) {
            let text = self.text(i);
            let lower = lowercase_in_place(text);
            let (found, lives) = read_sentence(text);
            // Where the question's content words stand in the sentence.
            let shared: Vec<(usize, usize)> = word_spans(text)
                .into_iter()
                .filter(|&(s, e)| content.contains(text[s..e].to_lowercase().as_str()))
                .collect();
            for (start, end) in typed_spans(asked, text, &found, &lives) {
                let span = &text[start..end];
                if lower_words(span).iter().all(|w| asked_words.contains(w))
                    || (!exclude.is_empty() && normalize(span) == exclude)
                {
                    continue;
                }
                // Nearness to a relation word: the closest stem before the span, in characters.
                let cue = stems
                    .iter()
                    .filter_map(|stem| lower[..start].rfind(stem).map(|p| start - p))
                    .min()
                    .map_or(0.0, |d| CUE_WEIGHT / (1.0 + d as f32 / 24.0));
                // Nearness to the question's own words, on either side, outside the span.
                let near = shared
                    .iter()
                    .filter(|&&(s, e)| e <= start || s >= end)
                    .map(|&(s, e)| if e <= start { start - e } else { s - end })
                    .min()
                    .map_or(0.0, |d| NEAR_WEIGHT / (1.0 + d as f32 / 24.0));
                // A count of what the question counts (`how many pupils` · `3,870 pupils`).
                let counts = counted.as_deref().is_some_and(|noun| {
                    let after = lower[end..].split(|c: char| !c.is_alphanumeric()).find(|w| !w.is_empty());
                    lower_words(&text[start..end])
                        .iter()
                        .chain(after.map(str::to_owned).as_ref())
                        .any(|w| w.chars().take(5).eq(noun.chars().take(5)))
                });
                let counts = if counts { COUNTED_WEIGHT } else { 0.0 };
                // A date or place of the event asked about, or of the other one.
                let dated = match (event, event_at(&lower, &lives, start)) {
                    (Event::Any, _) | (_, Event::Any) => 0.0,
                    (asked, at) if asked == at => EVENT_WEIGHT,
                    _ => -EVENT_WEIGHT,
                };
                let score = self.sentences[i].score + cue + near + counts + dated + bonus(i);
                if best.as_ref().is_none_or(|(b, _)| score > *b) {
                    best = Some((score, Short { text: as_asked(asked, question, span), sentence: i }));
                }
            }
        }
        best.map(|(_, s)| s)
    }

    /// The answer about the entity a complete chain reached (itself, for a person asked).
    pub(super) fn at_end(
        &self,
        asked: &Asked,
        question: &str,
        reached: &str,
        hop_sentences: &[usize],
    ) -> Option<Short> {
        let &said = hop_sentences.last()?;
        if *asked == Asked::Person {
            return Some(Short { text: reached.to_owned(), sentence: said });
        }
        // The sentences that led to it are about the entities before it (`a 2017 American film
        // directed by X` gives the film's year and country, not X's), unless nothing else is
        // about it.
        let about = self.about(reached);
        let own: Vec<usize> = about.iter().copied().filter(|i| !hop_sentences.contains(i)).collect();
        let candidates = if own.is_empty() { about } else { own };
        self.best_span(asked, question, &candidates, |_| 0.0, reached)
    }

    pub(super) fn typed(&self, asked: &Asked, question: &str, entities: &[String]) -> Option<Short> {
        // A question that follows relations (`the place of birth of the director of X`): follow
        // them through the sentences from each entity it may start from, then answer about the
        // entity the first complete chain reaches.
        for (anchor, hops) in chain(question, entities) {
            let (reached, hop_sentences) = self.walk(anchor, &hops);
            if hop_sentences.len() < hops.len() {
                continue;
            }
            match self.at_end(asked, question, &reached, &hop_sentences) {
                Some(found) => return Some(found),
                None => break,
            }
        }
        // Otherwise the spans of the best sentences; a sentence that names a name standing
        // beside a question entity (the second hop of a compositional question) is preferred.
        let entity_keys: Vec<String> = entities.iter().map(|e| normalize(bare(e))).filter(|k| !k.is_empty()).collect();
        let mut linked: HashSet<String> = HashSet::new();
        for &i in &self.ranked {
            if entity_keys.iter().any(|k| self.names(i, k)) {
                let text = self.text(i);
                for m in mentions(text, 0..text.len(), &HashSet::new()) {
                    let key = normalize(&text[m.bytes]);
                    if m.kind == MentionKind::Name && !entity_keys.contains(&key) {
                        linked.insert(key);
                    }
                }
            }
        }
        let link = |i: usize| {
            let two_hop = !entity_keys.iter().any(|k| self.names(i, k)) && linked.iter().any(|l| self.names(i, l));
            if two_hop { LINK_WEIGHT } else { 0.0 }
        };
        self.best_span(asked, question, &self.ranked, link, "")
    }
}

/// Phrases a cause follows (`died of a fever`, `diagnosed with tuberculosis`).
pub(super) const CAUSE_CUES: &[&str] = &[
    "died of ",
    "died from ",
    "dying of ",
    "dying from ",
    "due to ",
    "because of ",
    "cause of death was ",
    "death from ",
    "succumbed to ",
    "diagnosed with ",
    "suffered from ",
];

/// Spans of `sentence` (whose mentions are `found` and life spans `lives`, [`read_sentence`])
/// that could be the answer to a typed question.
pub(super) fn typed_spans(asked: &Asked, sentence: &str, found: &[Mention], lives: &[LifeSpan]) -> Vec<(usize, usize)> {
    let dates = dates_of(found);
    // A name in a life span that only a comma parts from one of its dates (`1906, Graz`,
    // `Barcelona, 19 March 1946`) is the place of that event.
    let dated_place = |m: &Mention| {
        let apart = |gap: &str| gap.trim_matches([',', ' ']).is_empty() && gap.contains(',');
        lives.iter().any(|l| l.birth.contains(&m.bytes.start) || l.death.contains(&m.bytes.start))
            && dates.iter().any(|d| {
                (d.end <= m.bytes.start && apart(&sentence[d.end..m.bytes.start]))
                    || (d.start >= m.bytes.end && apart(&sentence[m.bytes.end..d.start]))
            })
    };
    let spans = found.iter().filter(|m| match asked {
        Asked::Person => m.kind == MentionKind::Name && looks_like_person(&sentence[m.bytes.clone()]),
        Asked::Date => m.kind == MentionKind::Date,
        Asked::Place => {
            // A name after `in`, `at`, `near` or beside a life span's date is a place even when
            // it reads like a person's, but never a people or a language (`sung in English and
            // Spanish`, `an American singer`).
            let before = sentence[..m.bytes.start].trim_end().to_lowercase();
            let after = |p: &str| before.ends_with(&format!(" {p}")) || before == p;
            let peoples = sentence[m.bytes.clone()].split_whitespace().filter(|w| *w != "and").all(is_demonym);
            m.kind == MentionKind::Name
                && !peoples
                && (["in", "at", "near"].iter().any(|p| after(p))
                    || dated_place(m)
                    || (after("from") && !looks_like_person(&sentence[m.bytes.clone()])))
        }
        Asked::Institution => {
            // A name an institution's word names (`Yale College`), or any other after `at`,
            // `from`, `attended`, `joined`, … that is no people, country or person.
            let before = sentence[..m.bytes.start].trim_end().to_lowercase();
            let name = &sentence[m.bytes.clone()];
            let after = ["at", "from", "attended", "joined", "for", "of"]
                .iter()
                .any(|p| before.ends_with(&format!(" {p}")) || before.ends_with(&format!(" {p} the")));
            matches!(m.kind, MentionKind::Name | MentionKind::Acronym)
                && (is_institution(name)
                    || (after
                        && !name.split_whitespace().all(is_demonym)
                        && countries_in(name).is_empty()
                        && !looks_like_person(name)))
        }
        Asked::Number => m.kind == MentionKind::Quantity,
        Asked::Nationality => {
            let word = &sentence[m.bytes.clone()];
            m.kind == MentionKind::Name
                && (["an", "ese", "ish", "ic", "i"].iter().any(|s| word.ends_with(s)) && !word.contains(' ')
                    || sentence[..m.bytes.start].trim_end().to_lowercase().ends_with(" in"))
        }
        Asked::Cause | Asked::Choice { .. } | Asked::Same { .. } | Asked::Verify => false,
    });
    let mut out: Vec<(usize, usize)> = spans
        .map(|m| {
            // A place with its state or province when the text gives one (`Winnipeg, Manitoba`;
            // not `New York City, New York`).
            let end = if *asked == Asked::Place {
                let end = joined_end(sentence, found, m.bytes.end);
                let state = state_after(&sentence[end..]);
                let named = state > 0 && sentence[m.bytes.start..end].starts_with(&sentence[end + 2..end + state]);
                if named { end } else { end + state }
            } else {
                m.bytes.end
            };
            (m.bytes.start, end)
        })
        .collect();
    if *asked == Asked::Number {
        // Bare counts ("3 tiers", "twelve members") beside the measured quantities, outside
        // dates.
        for (start, end) in word_spans(sentence) {
            let word = &sentence[start..end];
            let count =
                word.chars().all(|c| c.is_ascii_digit()) || NUMBER_WORDS.contains(&word.to_lowercase().as_str());
            let taken = out.iter().any(|&(s, e)| (s..e).contains(&start)) || dates.iter().any(|d| d.contains(&start));
            if count && !taken {
                out.push((start, end));
            }
        }
    }
    if *asked == Asked::Cause {
        let lower = lowercase_in_place(sentence);
        for cue in CAUSE_CUES {
            if let Some(i) = lower.find(cue) {
                // Without a `form of` before it.
                let start = i + cue.len();
                let start = start
                    + ["a form of ", "a rare form of ", "complications of "]
                        .iter()
                        .find(|p| sentence[start..].starts_with(**p))
                        .map_or(0, |p| p.len());
                let clause_end = sentence[start..].find([',', '.', ';', '(']).map_or(sentence.len(), |e| start + e);
                // Without when or at what age (`tuberculosis in 1917`, `a stroke at the age of 80`).
                let clause = &sentence[start..clause_end];
                let dated = |rest: &str| {
                    let word = rest.split_whitespace().next().unwrap_or_default().to_lowercase();
                    rest.starts_with(|c: char| c.is_ascii_digit()) || MONTHS.contains(&word.as_str())
                };
                let when = clause.match_indices(" in ").find(|&(i, _)| dated(&clause[i + 4..])).map(|(i, _)| i);
                // Nor what followed (`multiple sclerosis and died on …`).
                let end = [" at the age", " at age", " on ", " and died", " and was "]
                    .iter()
                    .filter_map(|p| clause.find(p))
                    .chain(when)
                    .fold(clause.len(), usize::min)
                    + start;
                if end > start {
                    out.push((start, end));
                }
            }
        }
    }
    out
}

/// Whether `sentence` holds a span of the kind `asked` wants that is not all question words
/// (`question_words`, lowercased).
pub(crate) fn holds(asked: &Asked, sentence: &str, question_words: &HashSet<String>) -> bool {
    let (found, lives) = read_sentence(sentence);
    // A question of what something cost asks for an amount of money, not any number.
    let money = *asked == Asked::Number && MONEY_ASKS.iter().any(|w| question_words.contains(*w));
    typed_spans(asked, sentence, &found, &lives).into_iter().any(|(start, end)| {
        lower_words(&sentence[start..end]).iter().any(|w| !question_words.contains(w))
            && (!money || is_amount(sentence, start, end))
    })
}

/// Question words that ask for an amount of money.
pub(super) const MONEY_ASKS: &[&str] = &["cost", "costs", "price", "spend", "spent", "pay", "paid"];

/// Whether the number at `start..end` of `sentence` is an amount of money: a currency word
/// within it or right after it, or a currency sign right before it.
pub(super) fn is_amount(sentence: &str, start: usize, end: usize) -> bool {
    let within = lower_words(&sentence[start..end]);
    let after = lower_words(&sentence[end..]).into_iter().next();
    let sign = sentence[..start].trim_end().ends_with(['£', '$', '€', '¥'])
        || sentence[start..end].contains(['£', '$', '€', '¥']);
    sign || within.iter().chain(after.iter()).any(|w| CURRENCIES.contains(&w.as_str()))
}

/// Weight of a candidate span's nearness to a relation word, in units of a sentence score.
pub(super) const CUE_WEIGHT: f32 = 1.0;
/// Weight of a candidate span's nearness to any content word of the question (the one it
/// answers about usually stands beside them), in units of a sentence score.
pub(super) const NEAR_WEIGHT: f32 = 0.5;
/// Weight of a number followed by the noun a `how many` question counts.
pub(super) const COUNTED_WEIGHT: f32 = 1.0;
/// Weight of a date or place of the event a question asks about (a birth, a death), and the
/// penalty of one of the other event.
pub(super) const EVENT_WEIGHT: f32 = 1.0;
/// Weight of a two-hop link (the sentence names someone named beside a question entity).
pub(super) const LINK_WEIGHT: f32 = 1.5;
/// Sentences, best first, whose spans a typed question considers.
pub(super) const CANDIDATE_SENTENCES: usize = 12;
