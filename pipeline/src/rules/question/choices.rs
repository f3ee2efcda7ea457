//! Choices and yes-or-no questions: the dates of each option compared the way the question
//! says, the places of two subjects compared, and a statement verified against the sentences.

use std::collections::HashSet;

use super::asked::{Event, Hop, Order, bare};
use super::dates::days;
use super::facts::Facts;
use super::spans::CANDIDATE_SENTENCES;
use super::{Short, lower_words};
use crate::core::words::is_question_stop_word;

impl<'s, 'a> Facts<'s, 'a> {
    /// A person's value in a comparison (a date, or a life span, in days) and the sentence that
    /// gives it.
    pub(super) fn compared(&self, who: &str, order: Order, event: Event) -> Option<(i64, usize)> {
        match order {
            Order::LongestLife | Order::ShortestLife => {
                let (birth, i) = self.date_of(who, Event::Birth)?;
                let (death, _) = self.date_of(who, Event::Death)?;
                Some((days(death) - days(birth), i))
            }
            _ => self.date_of(who, event).map(|(d, i)| (days(d), i)),
        }
    }

    /// The people a comparison of role holders (`the director who was born first`) names in
    /// the role without the value it compares: what a second retrieval should look for.
    pub(super) fn undated_holders(
        &self,
        options: &[String],
        order: Order,
        event: Event,
        role: &'static str,
    ) -> Vec<String> {
        options
            .iter()
            .filter_map(|o| self.follow(o, Hop::Role(role)))
            .map(|(person, _)| person)
            .filter(|p| self.compared(p, order, event).is_none())
            .collect()
    }

    pub(super) fn choice(
        &self,
        options: &[String],
        order: Order,
        event: Event,
        role: Option<&'static str>,
    ) -> Option<Short> {
        let dates = |who: &str| self.compared(who, order, event);
        let value = |name: &str| -> Option<(i64, usize)> {
            let Some(role) = role else { return dates(name) };
            // The person in the role (`directed by X`), else anyone its sentences name.
            let stated = self.follow(name, Hop::Role(role)).map(|(p, _)| p);
            stated.into_iter().chain(self.linked_people(name)).find_map(|p| dates(&p))
        };
        let (a, b) = match (value(&options[0]), value(&options[1])) {
            (Some(a), Some(b)) => (a, b),
            // Without both people's dates, the works' own dates stand in for them (the
            // director of a 1928 film was most likely born, and died, before the director of a
            // 1986 one); a life's length has no such stand-in.
            _ if role.is_some() && matches!(order, Order::Earliest | Order::Latest) => {
                let work = |name: &str| self.date_of(name, Event::Any).map(|(d, i)| (days(d), i));
                (work(&options[0])?, work(&options[1])?)
            }
            _ => return None,
        };
        if a.0 == b.0 {
            return None;
        }
        let first_wins = match order {
            Order::Earliest | Order::ShortestLife => a.0 < b.0,
            Order::Latest | Order::LongestLife => a.0 > b.0,
        };
        let (pick, support) = if first_wins { (&options[0], a.1) } else { (&options[1], b.1) };
        Some(Short { text: bare(pick).to_owned(), sentence: support })
    }

    pub(super) fn same(&self, subjects: &[String]) -> Option<Short> {
        let (a, b) = (self.subject(&subjects[0])?, self.subject(&subjects[1])?);
        let support = *self.about(&a).first()?;
        self.about(&b).first()?;
        // Countries where the sentences name them, else the other names they give.
        let (ca, cb) = (self.countries(&a), self.countries(&b));
        let shared = if !ca.is_empty() && !cb.is_empty() {
            ca.intersection(&cb).next().is_some()
        } else {
            let (oa, ob) = (self.origins(&a), self.origins(&b));
            if oa.is_empty() || ob.is_empty() {
                return None;
            }
            oa.intersection(&ob).next().is_some()
        };
        Some(Short { text: if shared { "yes" } else { "no" }.to_owned(), sentence: support })
    }

    /// A yes-or-no question: yes when one of the best sentences holds every content word of the
    /// question (a word matches by its first five letters: `cancel` · `cancelled`; of a
    /// question entity, its last word is enough: `the festival` for `the Harbour Lights
    /// Festival`), no when it does with a negation the question does not have; undecided
    /// otherwise.
    pub(super) fn verify(&self, question: &str, entities: &[String]) -> Option<Short> {
        let stem = |w: &str| w.chars().take(5).collect::<String>();
        let mut named: HashSet<String> = HashSet::new();
        for e in entities {
            let words = lower_words(e);
            named.extend(words.iter().take(words.len().saturating_sub(1)).map(|w| stem(w)));
        }
        let asked: Vec<String> = lower_words(question)
            .into_iter()
            .filter(|w| !is_question_stop_word(w))
            .map(|w| stem(&w))
            .filter(|w| !named.contains(w))
            .collect();
        let negated =
            |words: &[String]| words.iter().any(|w| ["not", "never", "no", "nor", "neither"].contains(&w.as_str()));
        let question_negated = negated(&lower_words(question));
        if asked.is_empty() {
            return None;
        }
        for &i in self.ranked.iter().take(CANDIDATE_SENTENCES) {
            let words = lower_words(self.text(i));
            let stems: HashSet<String> = words.iter().map(|w| stem(w)).collect();
            if asked.iter().all(|w| stems.contains(w)) {
                let yes = negated(&words) == question_negated;
                return Some(Short { text: if yes { "yes" } else { "no" }.to_owned(), sentence: i });
            }
        }
        None
    }
}
