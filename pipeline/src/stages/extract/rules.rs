//! The offline extractor: every sentence (or clause of a long sentence, or list item, or
//! heading) of the target chunk becomes an item whose reference span is exactly that text, with
//! the entity mentions found in it. Deterministic; uses the window only to tell ordinary words
//! from names at the start of sentences.

use std::collections::HashSet;
use std::ops::Range;

use super::{ExtractedItem, Extractor, ItemRequest};
use crate::core::backend::BackendId;
use crate::core::names::normalize;
use crate::core::text::{paragraphs, sentences, trim};
use crate::io::UnitError;
use crate::rules::{looks_like_person, mentions};

/// Sentences longer than this many words are split into clauses.
const LONG_SENTENCE_WORDS: usize = 60;
/// Clauses of a long sentence are packed up to about this many words.
const CLAUSE_WORDS: usize = 40;

/// The rules extractor.
#[derive(Debug, Clone, Copy, Default)]
pub struct RulesExtractor;

impl Extractor for RulesExtractor {
    fn identity(&self) -> BackendId {
        BackendId::RULES
    }

    fn extract_all(&self, requests: &[ItemRequest<'_>]) -> Vec<Result<Vec<ExtractedItem>, UnitError>> {
        use rayon::prelude::*;
        requests.par_iter().map(|r| self.extract(r)).collect()
    }
}

impl RulesExtractor {
    /// Items of one request (never fails: every unit of the chunk is an item).
    pub fn extract(&self, request: &ItemRequest<'_>) -> Result<Vec<ExtractedItem>, UnitError> {
        let target = request.target;
        let mut known_lower = HashSet::new();
        for text in request.window.iter().chain(std::iter::once(&target)) {
            known_lower.extend(
                text.split(|c: char| !c.is_alphanumeric() && c != '-')
                    .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_lowercase() || c == '-'))
                    .map(str::to_owned),
            );
        }
        let mut items = Vec::new();
        let mut antecedents = Antecedents::default();
        for unit in units(target) {
            let mut entities: Vec<String> = Vec::new();
            let mut seen = HashSet::new();
            for m in mentions(target, unit.clone(), &known_lower) {
                let surface = target[m.bytes].to_owned();
                let key = normalize(&surface);
                if !key.is_empty() && seen.insert(key) {
                    entities.push(surface);
                }
            }
            if let Some(referent) = antecedents.resolve(&target[unit.clone()]).filter(|r| seen.insert(normalize(r))) {
                entities.insert(0, referent);
            }
            antecedents.update(&entities);
            items.push(ExtractedItem {
                text: clean(&target[unit.clone()]),
                ref_text: target[unit.clone()].to_owned(),
                entities,
                span: Some(unit),
            });
        }
        Ok(items)
    }
}

/// Words in a unit's opening that refer back to a person (`he`, `she`, …) or a thing (`it`).
const PERSON_PRONOUNS: [&str; 4] = ["he", "she", "his", "her"];
const THING_PRONOUNS: [&str; 2] = ["it", "its"];
/// How many opening words are searched for a pronoun ("In 1990 he moved …").
const PRONOUN_OPENING_WORDS: usize = 5;

/// What a pronoun in the chunk's next unit can refer to: the chunk's topic (the first entity of
/// its first unit that names one — an encyclopaedia passage's subject) and the person named
/// last. A unit that opens with a pronoun and names nobody else first gets that referent as its
/// subject, so the statement joins its entity's incidence and summary ("He directed Taken." is
/// about the person of the sentence before).
#[derive(Debug, Default)]
struct Antecedents {
    topic: Option<String>,
    person: Option<String>,
}

impl Antecedents {
    fn resolve(&self, unit: &str) -> Option<String> {
        for (i, raw) in unit.split_whitespace().take(PRONOUN_OPENING_WORDS).enumerate() {
            let raw = raw.trim_matches(|c: char| !c.is_alphanumeric());
            let word = raw.to_lowercase();
            if PERSON_PRONOUNS.contains(&word.as_str()) {
                return self.person.clone().or_else(|| self.topic.clone());
            }
            if THING_PRONOUNS.contains(&word.as_str()) {
                return self.topic.clone();
            }
            if i > 0 && raw.chars().next().is_some_and(char::is_uppercase) {
                // A name comes before any pronoun: the unit states its own subject.
                return None;
            }
        }
        None
    }

    fn update(&mut self, entities: &[String]) {
        if self.topic.is_none() {
            self.topic = entities.first().cloned();
        }
        if let Some(person) = entities.iter().rev().find(|e| looks_like_person(e)) {
            self.person = Some(person.clone());
        }
    }
}

/// Byte ranges of the units of a chunk: headings and list items line by line, prose sentence by
/// sentence, long sentences clause by clause. Units without a letter or digit are dropped.
fn units(text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    for para in paragraphs(text) {
        let lines: Vec<Range<usize>> = line_ranges(text, para.clone());
        let structured = lines.iter().all(|l| is_heading_or_list(&text[l.clone()]));
        let pieces = if structured { lines } else { sentences(text, para) };
        for piece in pieces {
            if text[piece.clone()].split_whitespace().count() > LONG_SENTENCE_WORDS {
                out.extend(clauses(text, piece));
            } else {
                out.push(piece);
            }
        }
    }
    out.retain(|r| text[r.clone()].chars().any(char::is_alphanumeric));
    out
}

fn line_ranges(text: &str, range: Range<usize>) -> Vec<Range<usize>> {
    let s = &text[range.clone()];
    let mut out = Vec::new();
    let mut offset = 0;
    for line in s.split_inclusive('\n') {
        if let Some(r) = trim(s, offset..offset + line.len()) {
            out.push(range.start + r.start..range.start + r.end);
        }
        offset += line.len();
    }
    out
}

fn is_heading_or_list(line: &str) -> bool {
    let l = line.trim_start();
    l.starts_with('#')
        || l.starts_with("- ")
        || l.starts_with("* ")
        || l.starts_with("+ ")
        || l.split_once(". ")
            .is_some_and(|(n, _)| !n.is_empty() && n.len() <= 3 && n.chars().all(|c| c.is_ascii_digit()))
}

/// Splits a long sentence at `;`, `:` and line breaks, then packs the pieces up to
/// `CLAUSE_WORDS` words; a piece still longer stays whole.
fn clauses(text: &str, range: Range<usize>) -> Vec<Range<usize>> {
    let s = &text[range.clone()];
    let mut cuts = vec![0];
    cuts.extend(s.char_indices().filter(|(_, c)| matches!(c, ';' | ':' | '\n')).map(|(i, c)| i + c.len_utf8()));
    cuts.push(s.len());
    let pieces: Vec<Range<usize>> = cuts.windows(2).filter_map(|w| trim(s, w[0]..w[1])).collect();
    let mut out: Vec<Range<usize>> = Vec::new();
    let mut words_in_last = 0;
    for piece in pieces {
        let words = s[piece.clone()].split_whitespace().count();
        match out.last_mut() {
            Some(last) if words_in_last + words <= CLAUSE_WORDS => {
                last.end = piece.end;
                words_in_last += words;
            }
            _ => {
                out.push(piece);
                words_in_last = words;
            }
        }
    }
    out.into_iter().map(|r| range.start + r.start..range.start + r.end).collect()
}

/// Item text: the unit without Markdown heading marks, bullets or emphasis, whitespace collapsed.
fn clean(unit: &str) -> String {
    let s = unit.trim_start_matches('#').trim_start();
    let s = s.strip_prefix("- ").or_else(|| s.strip_prefix("* ")).or_else(|| s.strip_prefix("+ ")).unwrap_or(s);
    s.replace("**", "").replace("__", "").split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extract(target: &str) -> Vec<ExtractedItem> {
        RulesExtractor.extract(&ItemRequest { doc_id: "d", window: &[], target }).unwrap()
    }

    #[test]
    fn sentences_list_items_and_headings_become_items_with_exact_spans() {
        let chunk = "## The tiers\n\nThe compact defines four tiers. It was signed by Dr. Peter Vance in Aldermoor.\n\n\
                     - **Tier A (above 9.0 m³/s):** normal operation.\n- Tier B: towns suspend watering.";
        let items = extract(chunk);
        let refs: Vec<&str> = items.iter().map(|i| i.ref_text.as_str()).collect();
        assert_eq!(
            refs,
            [
                "## The tiers",
                "The compact defines four tiers.",
                "It was signed by Dr. Peter Vance in Aldermoor.",
                "- **Tier A (above 9.0 m³/s):** normal operation.",
                "- Tier B: towns suspend watering."
            ]
        );
        for item in &items {
            assert_eq!(&chunk[item.span.clone().unwrap()], item.ref_text);
        }
        assert_eq!(items[0].text, "The tiers");
        assert_eq!(items[3].text, "Tier A (above 9.0 m³/s): normal operation.");
        assert_eq!(items[2].entities, ["Dr. Peter Vance", "Aldermoor"]);
        assert_eq!(items[3].entities, ["Tier A", "9.0 m³/s"]);
    }

    #[test]
    fn opening_pronouns_take_the_topic_or_the_last_person() {
        let chunk = "Taken is a 2008 thriller directed by Pierre Morel. It stars Liam Neeson as Bryan Mills. \
                     In the film he rescues his daughter. Its budget was $25 million. \
                     The studio hired Luc Besson; he wrote it.";
        let items = extract(chunk);
        let entities: Vec<&[String]> = items.iter().map(|i| i.entities.as_slice()).collect();
        assert_eq!(entities[0], ["Taken", "2008", "Pierre Morel"]);
        // `It` is the passage's subject; `he` the person named last; a name before the pronoun
        // keeps the unit as it is.
        assert_eq!(entities[1], ["Taken", "Liam Neeson", "Bryan Mills"]);
        assert_eq!(entities[2], ["Bryan Mills"]);
        assert_eq!(entities[3][0], "Taken");
        assert!(!entities[4].contains(&"Taken".to_owned()) && !entities[4].contains(&"Bryan Mills".to_owned()));
        // No antecedent yet: nothing is added.
        assert_eq!(extract("It rained. Then he left.")[1].entities, Vec::<String>::new());
    }

    #[test]
    fn long_sentences_split_into_clauses() {
        let long =
            format!("{}; {}; {}.", "word ".repeat(30).trim(), "more ".repeat(30).trim(), "end ".repeat(10).trim());
        let items = extract(&long);
        assert_eq!(items.len(), 2, "{items:?}");
        assert!(items.iter().all(|i| i.ref_text.split_whitespace().count() <= 40));
    }

    #[test]
    fn window_tells_ordinary_words_from_names() {
        let target = "Drainage began early.";
        let alone = RulesExtractor.extract(&ItemRequest { doc_id: "d", window: &[], target }).unwrap();
        assert_eq!(alone[0].entities, ["Drainage"]);
        let with_window = RulesExtractor
            .extract(&ItemRequest { doc_id: "d", window: &["The drainage of the fen."], target })
            .unwrap();
        assert!(with_window[0].entities.is_empty());
    }
}
