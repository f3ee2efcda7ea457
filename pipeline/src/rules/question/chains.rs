//! Relation chains: the hops a question follows from the entity it names to the one it asks
//! about (`the birthplace of the director of film X`), the names a question writes, and how a
//! chain is walked through the sentences of the context, cue by cue.

use std::collections::HashSet;
use std::ops::Range;

use super::asked::{Hop, ROLE_CUES, bare, hop_phrases};
use super::facts::{Facts, TITLES, cue_at, joined_end, names_key, pronoun_opens, titled_end};
use super::lowercase_in_place;
use crate::core::names::normalize;
use crate::rules::countries::country_of;
use crate::rules::mentions::NAME_CONNECTORS;
use crate::rules::{MentionKind, looks_like_person, mentions};

/// How far (bytes) after a cue phrase the name it introduces may stand.
pub(super) const CLAUSE_REACH: usize = 80;

/// Styles that stand before a relative's name in text and are no part of the name asked for
/// (a rank such as `Prince` is: `Prince Arthur, Duke of Connaught`).
pub(super) const STYLES: &[&str] = &[
    "First Lady ",
    "Great Royal Wife ",
    "Royal Wife ",
    "President ",
    "Pharaoh ",
    "Emperor ",
    "Empress ",
    "King ",
    "Queen ",
    "Sultan ",
    "Consul ",
    "Senator ",
];

/// Cues before a parent (`son of A and B`: A the father, B the mother).
pub(super) const PARENT_CUES: &[&str] =
    &["son of ", "daughter of ", "child of ", "born to ", "children of ", "sons of ", "daughters of "];
pub(super) const FATHER_CUES: &[&str] = &["father ", "father, ", "father was "];
pub(super) const MOTHER_CUES: &[&str] = &["mother ", "mother, ", "mother was "];
pub(super) const SPOUSE_CUES: &[&str] = &[
    "married ",
    "wife ",
    "wife, ",
    "husband ",
    "husband, ",
    "wife of ",
    "husband of ",
    "spouse ",
    "widow of ",
    "consort of ",
    "consort to ",
    "marriage to ",
];
/// Cues before a child (`his son X`, `the father of X`).
pub(super) const CHILD_CUES: &[&str] =
    &["father of ", "mother of ", "son ", "son, ", "daughter ", "daughter, ", "children ", "children, ", "child "];
/// Words at most between a family cue and the name it introduces (`married to Polish Nobel
/// laureate, X`); further on, the name is seldom the relative (`her father died in 1925 when …
/// her sister Elisabeth`).
pub(super) const FAMILY_REACH_WORDS: usize = 5;
/// The same for a role's cue (`a song by Trinidadian-American rapper and singer X`; not
/// `recorded by his sextet in 1959 … on his album X`).
pub(super) const ROLE_REACH_WORDS: usize = 6;

/// Where the names a cue introduces may begin: after each of its occurrences as words of its own
/// (`directed by `), for a verb's cue also where another verb shares its `by` (`directed and
/// produced by `). A family cue does not count where it is the relative of another than `key`
/// (`Zhang's wife`, not `Raghnall's father`) or reversed by an `of` it does not hold (`father of
/// X` names a child).
pub(super) fn cue_ends(lower: &str, cue: &str, family: Option<&str>) -> Vec<usize> {
    let others = |p: usize| {
        ["'s ", "’s "].iter().find_map(|s| lower[..p].strip_suffix(s)).is_some_and(|before| {
            let owner = before.rsplit(|c: char| !c.is_alphanumeric()).next().unwrap_or_default();
            family.is_some_and(|key| !key.split(' ').any(|w| w == owner))
        })
    };
    let mut out: Vec<usize> = cue_at(lower, cue)
        .filter(|&p| {
            family.is_none() || !(others(p) || (!cue.ends_with("of ") && lower[p + cue.len()..].starts_with("of ")))
        })
        .map(|p| p + cue.len())
        .collect();
    if let Some(verb) = cue.strip_suffix("ed by ") {
        let shared = format!("{verb}ed and ");
        for p in cue_at(lower, &shared) {
            let rest = &lower[p + shared.len()..];
            if let Some(gap) = rest.find(' ').filter(|&g| rest[g..].starts_with(" by ")) {
                out.push(p + shared.len() + gap + 4);
            }
        }
        out.sort_unstable();
    }
    out
}

/// Words a title of a work may hold in lowercase besides those a name holds ([`NAME_CONNECTORS`]):
/// `Me And Bobby Mcgee`, `Death in Venice`, `A Boy at Sea`.
const TITLE_JOINERS: &[&str] = &["in", "on", "to", "a", "an", "at", "del"];

/// Words that open a question and are no part of the name after them.
pub(super) const OPENERS: &[&str] = &[
    "what", "which", "who", "whom", "whose", "where", "when", "why", "how", "is", "are", "was", "were", "did", "does",
    "do",
];

/// The whitespace-separated words of `text`, as byte ranges.
pub(super) fn tokens(text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                out.push(s..i);
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    out.extend(start.map(|s| s..text.len()));
    out
}

/// Whether a word may stand in a name as a question writes it: capitalised, a number, a joiner,
/// or punctuation (`&`, `-`).
pub(super) fn name_word(word: &str) -> bool {
    let core = word.trim_matches(|c: char| !c.is_alphanumeric());
    core.is_empty() || core.starts_with(|c: char| c.is_uppercase() || c.is_ascii_digit()) || joiner(core)
}

/// Whether a word may stand in lowercase inside a name or title.
pub(super) fn joiner(word: &str) -> bool {
    let word = word.to_lowercase();
    NAME_CONNECTORS.contains(&word.as_str()) || TITLE_JOINERS.contains(&word.as_str())
}

/// How many more brackets `word` closes than it opens.
pub(super) fn closes(word: &str) -> i32 {
    word.matches(')').count() as i32 - word.matches('(').count() as i32
}

/// The name a question writes just before `end` (`… of Victor Amadeus, Prince Of
/// Anhalt-Bernburg`, a bracketed qualifier included), without the joiners at its ends.
pub(super) fn name_before(question: &str, end: usize) -> Option<Range<usize>> {
    let text = &question[..end];
    let toks = tokens(text);
    let mut first = toks.len();
    let mut depth = 0;
    for k in (0..toks.len()).rev() {
        let w = &text[toks[k].clone()];
        if depth > 0 || closes(w) > 0 {
            depth += closes(w);
        } else if !name_word(w) || (k == 0 && OPENERS.contains(&w.to_lowercase().as_str())) {
            break;
        }
        first = k;
    }
    let first = (first..toks.len()).find(|&k| !joiner(&text[toks[k].clone()]))?;
    Some(toks[first].start..end)
}

/// The name a question writes after `start`, past up to two lowercase words (`film The Return
/// Of Swamp Thing`, `song Damage (Pharoahe Monch Song)`), without the joiners at its ends.
pub(super) fn name_after(question: &str, start: usize) -> Option<Range<usize>> {
    let text = &question[start..];
    let toks = tokens(text);
    let begin = toks
        .iter()
        .take(3)
        .position(|t| text[t.clone()].starts_with(|c: char| c.is_uppercase() || c.is_ascii_digit()))?;
    let mut last = begin;
    let mut depth = 0;
    for (k, t) in toks.iter().enumerate().skip(begin) {
        let w = &text[t.clone()];
        if depth > 0 || w.starts_with('(') {
            depth -= closes(w);
        } else if !name_word(w) {
            break;
        }
        last = k;
    }
    let last = (begin..=last).rev().find(|&k| !joiner(&text[toks[k].clone()]))?;
    let end = text[..toks[last].end].trim_end_matches(['?', '.', ',', '!']).len();
    Some(start + toks[begin].start..start + end)
}

/// Where the question names the entity its chain starts from: after the innermost hop that an
/// `of` follows (`the director of film X`), or before the possessive of the first hop (`X's
/// father`).
pub(super) fn question_anchor(question: &str, phrases: &[(Range<usize>, Vec<Hop>)]) -> Option<Range<usize>> {
    let forward = phrases
        .iter()
        .rev()
        .find_map(|(r, _)| question[r.end..].strip_prefix(" of ").map(|_| r.end + 4))
        .and_then(|at| name_after(question, at));
    forward.or_else(|| {
        phrases.iter().find_map(|(r, _)| {
            let head = &question[..r.start];
            let stem = ["'s ", "'S ", "’s ", "’S "].iter().find_map(|p| head.strip_suffix(p))?;
            name_before(question, stem.len())
        })
    })
}

/// The entities a question's chain may start from, each with the hops from it to the one the
/// question asks about: hops named before the entity (`the director of X`) apply innermost
/// first, those after it (`X's father`) in order. The name the question writes comes first,
/// then its part before a comma (`Ælfgar, Earl Of Mercia` → `Ælfgar`) and the name without its
/// rank, the longest question entity that names no hop and is no piece of that name last.
pub(super) fn chain(question: &str, entities: &[String]) -> Vec<(String, Vec<Hop>)> {
    let phrases = hop_phrases(question);
    if phrases.is_empty() {
        return Vec::new();
    }
    let mut anchors: Vec<Range<usize>> = Vec::new();
    let named = question_anchor(question, &phrases);
    if let Some(named) = named.clone() {
        let name = &question[named.clone()];
        anchors.push(named.clone());
        if let Some(comma) = name.find(", ") {
            anchors.push(named.start..named.start + comma);
        }
        // Without a rank the text may leave out (`Archduchess Maria Immakulata Of Austria` ·
        // `Maria Immakulata was the seventh child …`).
        if let Some(rank) = TITLES.iter().find(|r| name.strip_prefix(**r).is_some_and(|n| n.starts_with(' '))) {
            anchors.push(named.start + rank.len() + 1..named.end);
        }
    }
    let entity = entities
        .iter()
        .map(|e| bare(e))
        .filter(|e| !e.is_empty() && hop_phrases(e).is_empty())
        .max_by_key(|e| e.len())
        .and_then(|e| question.find(e).map(|at| at..at + e.len()))
        // Not a piece of the name the question writes (`Count Of Dreux` of `Robert III, Count Of
        // Dreux`).
        .filter(|e| named.as_ref().is_none_or(|n| e.end <= n.start || e.start >= n.end));
    anchors.extend(entity);
    let mut out: Vec<(String, Vec<Hop>)> = Vec::new();
    for at in anchors {
        let name = bare(&question[at.clone()]).to_owned();
        let mut hops: Vec<Hop> =
            phrases.iter().filter(|(p, _)| p.end <= at.start).rev().flat_map(|(_, h)| h.clone()).collect();
        hops.extend(phrases.iter().filter(|(p, _)| p.start >= at.end).flat_map(|(_, h)| h.clone()));
        if !name.is_empty() && !hops.is_empty() && !out.iter().any(|(n, _)| *n == name) {
            out.push((name, hops));
        }
    }
    out
}

impl<'s, 'a> Facts<'s, 'a> {
    /// The people the sentences about `name` name (candidates for its director, author, …).
    pub(super) fn linked_people(&self, name: &str) -> Vec<String> {
        let key = normalize(bare(name));
        let mut out: Vec<String> = Vec::new();
        for i in self.about(name) {
            let text = self.text(i);
            for m in mentions(text, 0..text.len(), &HashSet::new()) {
                let person = &text[m.bytes];
                if m.kind == MentionKind::Name
                    && looks_like_person(person)
                    && normalize(person) != key
                    && !out.iter().any(|p| p == person)
                {
                    out.push(person.to_owned());
                }
            }
        }
        out
    }

    /// The entity `hop` leads to from `name`, and the sentence that says so.
    pub(super) fn follow(&self, name: &str, hop: Hop) -> Option<(String, usize)> {
        let key = normalize(bare(name));
        let cues: &[&str] = match hop {
            Hop::Role(role) => ROLE_CUES.iter().find(|(r, _)| *r == role).map_or(&[], |(_, c)| c),
            Hop::Father => FATHER_CUES,
            Hop::Mother => MOTHER_CUES,
            Hop::Spouse => SPOUSE_CUES,
            Hop::Child => CHILD_CUES,
        };
        let family = !matches!(hop, Hop::Role(_));
        let family_key = family.then_some(key.as_str());
        let reach = if family { FAMILY_REACH_WORDS } else { ROLE_REACH_WORDS };
        // Sentences that open with the entity first (the film's own `X is a 1997 film directed
        // by Y` before another's `… starring X`), each in its rank.
        let first_word = key.split(' ').next().unwrap_or_default();
        let mut about = self.about(name);
        about.sort_by_key(|&i| !self.opens_with(i, first_word));
        for i in about {
            let text = self.text(i);
            let lower = lowercase_in_place(text);
            // A cue counts only after the entity is named (in `Anna Orr was the daughter of Y by
            // Z and of X`, Y is not X's parent), by any word of its name (`Bulnes was born …` for
            // Manuel Bulnes Pinto); anywhere in a sentence that goes on about it with a pronoun.
            let named_at = if pronoun_opens(text) {
                0
            } else {
                key.split(' ')
                    .filter(|w| w.chars().count() > 2)
                    .filter_map(|w| {
                        cue_at(&lower, w).find(|&p| !lower[p + w.len()..].starts_with(char::is_alphanumeric))
                    })
                    .min()
                    .unwrap_or(0)
            };
            let found = mentions(text, 0..text.len(), &HashSet::new());
            // Names, a mention of several (`A of B and C D`) taken apart at ` and `, a person
            // from the company after ` for ` (`directed by X for Film Booking Offices`: the
            // mention finder keeps `for` inside names of bodies, `Centers for …`).
            let names: Vec<(usize, usize)> = found
                .iter()
                .filter(|m| m.kind == MentionKind::Name)
                .flat_map(|m| {
                    let (start, end) = (m.bytes.start, joined_end(text, &found, m.bytes.end));
                    let piece = &text[start..end];
                    let mut cuts: Vec<(usize, usize)> = [" and ", " for "]
                        .iter()
                        .flat_map(|sep| piece.match_indices(sep).map(|(at, sep)| (at, sep.len())))
                        .collect();
                    cuts.sort_unstable();
                    let mut parts = Vec::new();
                    let mut from = start;
                    for (at, len) in cuts {
                        parts.push((from, start + at));
                        from = start + at + len;
                    }
                    parts.push((from, end));
                    parts
                })
                .collect();
            // The first name after `pos` in its clause that is no nationality or country, close
            // after the cue; none when that is the entity followed from (or a longer name of it).
            let after = |pos: usize| {
                let end = lower[pos..].find(['.', ';']).map_or(lower.len(), |e| pos + e).min(pos + CLAUSE_REACH);
                names
                    .iter()
                    .copied()
                    .find(|&(s, e)| {
                        // A nationality or country is no relative (`by Trinidadian-American
                        // rapper X`, `Polish Nobel Prize laureate`); a name of a country's house
                        // is (`Leopold Salvator of Austria`).
                        let first = text[s..e].split(' ').next().unwrap_or_default();
                        s >= pos && s < end && first.split('-').all(|part| country_of(part).is_none())
                    })
                    .filter(|&(s, _)| pos > named_at && text[pos..s].split_whitespace().count() <= reach)
                    .map(|(s, e)| (s, titled_end(text, &names, e)))
                    .filter(|&(s, e)| !names_key(&normalize(&text[s..e]), &key))
            };
            // The first cue, in the order of the list (the specific `performed by` before a bare
            // `by`), that a name follows.
            let mut hit = cues.iter().find_map(|cue| cue_ends(&lower, cue, family_key).into_iter().find_map(after));
            if hit.is_none() && matches!(hop, Hop::Father | Hop::Mother) {
                // `son of A and B`, `son of A by his wife B`: the father first, the mother second.
                for cue in PARENT_CUES {
                    // `He married X, daughter of Y`: Y is X's parent.
                    let pronoun = text.split(' ').next().unwrap_or_default();
                    if (pronoun == "He" && cue.starts_with("daughter")) || (pronoun == "She" && cue.starts_with("son"))
                    {
                        continue;
                    }
                    let Some(first) = cue_ends(&lower, cue, None).into_iter().find_map(after) else { continue };
                    let rest = lower[first.1..].trim_start_matches([',', ' ']);
                    let at = lower.len() - rest.len();
                    let second =
                        ["and ", "by "].iter().find(|c| rest.starts_with(**c)).and_then(|c| after(at + c.len()));
                    hit = match hop {
                        Hop::Father => Some(first),
                        _ => second,
                    };
                    if hit.is_some() {
                        // `son of John and Elizabeth Dickens`: one surname for both.
                        let father = &text[first.0..first.1];
                        if hop == Hop::Father
                            && !father.contains(' ')
                            && let Some((s, e)) = second.filter(|&(s, _)| lower[..s].ends_with(" and "))
                            && let Some((_, surname)) = text[s..e].rsplit_once(' ')
                            && surname != father
                        {
                            return Some((format!("{father} {surname}"), i));
                        }
                        break;
                    }
                }
            }
            if let Some((start, end)) = hit {
                let name = text[start..end].trim();
                // A title alone names nobody (`Count of Dreux`).
                if TITLES.iter().any(|r| name.strip_prefix(r).is_some_and(|n| n.starts_with(" of "))) {
                    continue;
                }
                // Without a style before it (`Pharaoh Akhenaten`, `First Lady Enriqueta Pinto`).
                let name = STYLES.iter().find_map(|s| name.strip_prefix(s)).filter(|n| !n.is_empty()).unwrap_or(name);
                return Some((name.to_owned(), i));
            }
        }
        None
    }

    /// Follows `hops` from `anchor`: the entity reached and the sentence of each hop found, up
    /// to the first hop the sentences do not state.
    pub(super) fn walk(&self, anchor: String, hops: &[Hop]) -> (String, Vec<usize>) {
        let mut reached = anchor;
        let mut hop_sentences = Vec::new();
        for &hop in hops {
            let Some((next, i)) = self.follow(&reached, hop) else { break };
            reached = next;
            hop_sentences.push(i);
        }
        (reached, hop_sentences)
    }
}
