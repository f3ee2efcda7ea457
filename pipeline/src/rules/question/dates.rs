//! Dates in sentences: parsing, ordering, life spans in parentheses, and the event (a birth, a
//! death) each date or place stands for.

use std::collections::HashSet;
use std::ops::Range;

use super::asked::Event;
use super::{lower_words, lowercase_in_place};
use crate::rules::mentions::MONTHS;
use crate::rules::{Mention, MentionKind, mentions};

/// A date as (year, month, day), month and day 0 when not given.
pub(super) type Ymd = (i32, u32, u32);

/// A date as a day count that orders dates (months and years padded, not calendar-exact).
pub(super) fn days(d: Ymd) -> i64 {
    i64::from(d.0) * 372 + i64::from(d.1) * 31 + i64::from(d.2)
}

pub(super) fn parse_date(text: &str) -> Option<Ymd> {
    let words: Vec<String> = lower_words(text);
    let year = words.iter().rev().find_map(|w| (w.len() == 4).then(|| w.parse::<i32>().ok()).flatten())?;
    let month = words.iter().find_map(|w| MONTHS.iter().position(|m| m == w)).map_or(0, |m| m as u32 + 1);
    let day = words.iter().find_map(|w| w.parse::<u32>().ok().filter(|d| (1..=31).contains(d))).unwrap_or(0);
    Some((year, month, day))
}

/// A life span in parentheses (`(1697 – 10 January 1768)`, `(6 June 1906, Graz – 2 November
/// 1994, Le Plessis-Bouchard)`): the byte ranges of its birth side and its death side.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct LifeSpan {
    pub(super) birth: Range<usize>,
    pub(super) death: Range<usize>,
}

/// The life spans of `sentence`, whose dates are `dates` (byte ranges): parentheses that hold a
/// dash between words and a date.
pub(super) fn life_spans(sentence: &str, dates: &[Range<usize>]) -> Vec<LifeSpan> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(o) = sentence[from..].find('(') {
        let open = from + o + 1;
        let close = sentence[open..].find(')').map_or(sentence.len(), |c| open + c);
        let inner = &sentence[open..close];
        // An en or em dash, or a hyphen with a digit or a space beside it (`1880-1958`,
        // `Tunis- 1 March 1918`; not the one inside `Plessis-Bouchard`).
        let dash = inner.char_indices().find(|&(i, c)| match c {
            '–' | '—' => true,
            '-' => {
                let edge = |c: Option<char>| c.is_some_and(|c| c == ' ' || c.is_ascii_digit());
                edge(inner[..i].chars().next_back()) || edge(inner[i + 1..].chars().next())
            }
            _ => false,
        });
        if let Some((i, c)) = dash
            && dates.iter().any(|d| d.start >= open && d.end <= close)
        {
            let at = open + i;
            out.push(LifeSpan { birth: open..at, death: at + c.len_utf8()..close });
        }
        from = close;
    }
    out
}

/// The event a date or a place at byte `start` of `sentence` (lowercased in place: `lower`)
/// belongs to: `born` or `died` just before it, else its side of a life span.
pub(super) fn event_at(lower: &str, spans: &[LifeSpan], start: usize) -> Event {
    let near: String = lower[..start].chars().rev().take(24).collect::<Vec<_>>().into_iter().rev().collect();
    if near.contains("born") || near.contains("birth") {
        Event::Birth
    } else if near.contains("died") || near.contains("death") {
        Event::Death
    } else if spans.iter().any(|s| s.birth.contains(&start)) {
        Event::Birth
    } else if spans.iter().any(|s| s.death.contains(&start)) {
        Event::Death
    } else {
        Event::Any
    }
}

/// The byte ranges of the date mentions among `found`.
pub(super) fn dates_of(found: &[Mention]) -> Vec<Range<usize>> {
    found.iter().filter(|m| m.kind == MentionKind::Date).map(|m| m.bytes.clone()).collect()
}

/// The mentions of `sentence` and its life spans: what reading it for a typed answer needs, found
/// once.
pub(super) fn read_sentence(sentence: &str) -> (Vec<Mention>, Vec<LifeSpan>) {
    let found = mentions(sentence, 0..sentence.len(), &HashSet::new());
    let lives = life_spans(sentence, &dates_of(&found));
    (found, lives)
}

/// The dates a sentence gives, each with the event it dates: `born D`, `died D`, the sides of a
/// life span (`(D1 – D2)`: birth and death), any other date.
pub(super) fn dated_events(sentence: &str) -> Vec<(Event, Ymd)> {
    let sentence = &unglued(sentence);
    let (found, spans) = read_sentence(sentence);
    let lower = lowercase_in_place(sentence);
    dates_of(&found)
        .iter()
        .filter_map(|d| parse_date(&sentence[d.clone()]).map(|date| (event_at(&lower, &spans, d.start), date)))
        .collect()
}

/// A life span whose dash the text lost, the year before it glued to the day after it
/// (`(8 March 181522 February 1888)`: 39 of 2wiki's passages), given its dash back (`1815 – 22
/// February`): a run of five or six digits before a month's name is a four-digit year and a day.
pub(super) fn unglued(sentence: &str) -> std::borrow::Cow<'_, str> {
    let bytes = sentence.as_bytes();
    let mut out = String::new();
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() || (i > 0 && bytes[i - 1].is_ascii_alphanumeric()) {
            i += 1;
            continue;
        }
        let run = bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        let after = &sentence[i + run..];
        let month_follows = after.strip_prefix(' ').is_some_and(|rest| {
            let word: String = rest.chars().take_while(|c| c.is_alphabetic()).collect::<String>().to_lowercase();
            MONTHS.contains(&word.as_str())
        });
        // The year a plausible one, the day a day of a month (not a count: `12000 May Day`).
        let glued = (5..=6).contains(&run)
            && sentence[i..i + 4].parse::<u32>().is_ok_and(|y| (1000..=2100).contains(&y))
            && sentence[i + 4..i + run].parse::<u32>().is_ok_and(|d| (1..=31).contains(&d));
        if glued && month_follows {
            out.push_str(&sentence[copied..i + 4]);
            out.push_str(" – ");
            copied = i + 4;
        }
        i += run;
    }
    if copied == 0 {
        return std::borrow::Cow::Borrowed(sentence);
    }
    out.push_str(&sentence[copied..]);
    std::borrow::Cow::Owned(out)
}
