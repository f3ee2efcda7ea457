//! The sentences of the context as facts: their identity keys, their ranking, and what they say
//! about the entities they name.

use std::collections::HashSet;

use super::Sentence;
use super::asked::{Event, bare, hop_phrases};
use super::dates::{Ymd, dated_events};
use crate::core::names::normalize;
use crate::rules::countries::countries_in;
use crate::rules::{Mention, MentionKind, looks_like_person, mentions};

/// The sentences of the context, their identity keys and their ranking, with what they say
/// about the entities they name.
pub(super) struct Facts<'s, 'a> {
    pub(super) sentences: &'s [Sentence<'a>],
    pub(super) keys: Vec<String>,
    pub(super) ranked: Vec<usize>,
    /// For each sentence, the first sentence of the run of its evidence it stands in.
    pub(super) leads: Vec<usize>,
}

impl<'s, 'a> Facts<'s, 'a> {
    pub(super) fn new(sentences: &'s [Sentence<'a>]) -> Self {
        let keys = sentences.iter().map(|s| normalize(s.text)).collect();
        let mut ranked: Vec<usize> = (0..sentences.len()).collect();
        ranked.sort_by(|&a, &b| sentences[b].score.total_cmp(&sentences[a].score).then(a.cmp(&b)));
        let mut leads: Vec<usize> = Vec::with_capacity(sentences.len());
        for (i, s) in sentences.iter().enumerate() {
            let lead = match i.checked_sub(1) {
                Some(j) if sentences[j].group == s.group => leads[j],
                _ => i,
            };
            leads.push(lead);
        }
        Facts { sentences, keys, ranked, leads }
    }

    pub(super) fn text(&self, i: usize) -> &'a str {
        self.sentences[i].text
    }

    /// Whether sentence `i` names `key` (an identity key).
    pub(super) fn names(&self, i: usize, key: &str) -> bool {
        names_key(&self.keys[i], key)
    }

    /// Whether sentence `i` opens with a name whose first word is `first` (among its first four
    /// words) or with a pronoun that continues one about it.
    pub(super) fn opens_with(&self, i: usize, first: &str) -> bool {
        pronoun_opens(self.text(i)) || self.keys[i].split(' ').take(4).any(|w| w == first)
    }

    /// Sentences about `name`, best first: those that name it, and the ones that continue them
    /// in the same evidence with a pronoun or a short form of its name (`He was born in …`).
    pub(super) fn about(&self, name: &str) -> Vec<usize> {
        let key = normalize(bare(name));
        let naming: Vec<bool> = (0..self.sentences.len()).map(|i| self.names(i, &key)).collect();
        // In evidence that opens with its name (its biography), a later sentence may name it
        // short: by its surname (`Branagh trained at …`), or a titled name without its place
        // (`Maria Immakulata was …` for Maria Immakulata of Austria; not `Jordan` for Abdullah I
        // of Jordan).
        let short = match key.split_once(" of ") {
            Some((name, _)) => name,
            None => key.rsplit_once(' ').map_or("", |(_, last)| last),
        };
        let short = (short != key && short.chars().count() > 2).then_some(short);
        let continues = |i: usize| {
            let first = self.text(i).split_whitespace().next().unwrap_or_default();
            // The sentences before it in the same run of evidence, from the run's first.
            let (lead, earlier) = (self.leads[i], self.leads[i]..i);
            // `It` and a participle go on about a work on its own page (`Grey Tide is a 1992
            // film. It was directed by …`, `Directed by …, the film …`), not about a person its
            // first sentence names.
            let pronoun = ["He", "She", "His", "Her", "Born", "They"].contains(&first)
                || (["It", "Directed", "Written", "Produced", "Composed"].contains(&first)
                    && self.opens_with(lead, key.split(' ').next().unwrap_or_default()));
            let by_short = !earlier.is_empty() && short.is_some_and(|w| names_key(&self.keys[i], w)) && {
                let head: Vec<&str> = self.keys[lead].split(' ').take(key.split(' ').count() + 3).collect();
                names_key(&head.join(" "), &key)
            };
            (pronoun && earlier.clone().any(|j| naming[j])) || by_short
        };
        self.ranked.iter().copied().filter(|&i| naming[i] || continues(i)).collect()
    }

    /// The date of `event` for an entity, from the sentences about it (best first).
    pub(super) fn date_of(&self, name: &str, event: Event) -> Option<(Ymd, usize)> {
        let mut any = None;
        for i in self.about(name) {
            for (e, date) in dated_events(self.text(i)) {
                if e == event || (event == Event::Any && e != Event::Death) {
                    return Some((date, i));
                }
                if any.is_none() && event == Event::Any {
                    any = Some((date, i));
                }
            }
        }
        any
    }

    /// Capitalised words of the sentences about `name` that are not part of its name: the
    /// places and nationalities they state it is from or in.
    pub(super) fn origins(&self, name: &str) -> HashSet<String> {
        let key = normalize(bare(name));
        let own: HashSet<&str> = key.split(' ').collect();
        let mut out = HashSet::new();
        for i in self.about(name) {
            let text = self.text(i);
            for m in mentions(text, 0..text.len(), &HashSet::new()) {
                if m.kind != MentionKind::Name {
                    continue;
                }
                let word = normalize(&text[m.bytes]);
                if !word.is_empty() && !word.split(' ').all(|w| own.contains(w)) && !looks_like_person(&word) {
                    out.insert(word.split(' ').next_back().unwrap_or_default().to_owned());
                }
            }
        }
        out
    }

    /// The entity a subject of a comparison stands for: itself, or the one its relations
    /// lead to (`director of film X` → X's director).
    pub(super) fn subject(&self, subject: &str) -> Option<String> {
        let phrases = hop_phrases(subject);
        if phrases.is_empty() {
            return Some(bare(subject).to_owned());
        }
        let anchor = subject.rsplit(" of ").next().unwrap_or(subject);
        let anchor = ["film ", "song ", "album ", "the film ", "the song ", "the album "]
            .iter()
            .find_map(|p| anchor.strip_prefix(p))
            .unwrap_or(anchor);
        phrases
            .iter()
            .rev()
            .flat_map(|(_, hops)| hops)
            .try_fold(bare(anchor).to_owned(), |at, &hop| self.follow(&at, hop).map(|(next, _)| next))
    }

    /// The countries the sentences about `name` name, outside its own name.
    pub(super) fn countries(&self, name: &str) -> HashSet<&'static str> {
        let own: HashSet<&str> = countries_in(name).into_iter().collect();
        self.about(name).into_iter().flat_map(|i| countries_in(self.text(i))).filter(|c| !own.contains(c)).collect()
    }
}

/// Whether a sentence's identity key names `key`: its words in order, with at most two other
/// words among them (`maria wisława anna szymborska` names `wisława szymborska`, `tony lee
/// bettenhausen jr` names `tony bettenhausen jr`), an initial standing for a word it begins
/// (`robert adolf stemmle` names `robert a stemmle`; a regnal number stands for itself), a
/// short given name for a longer one it begins (`ken burns` · `kenneth burns`).
pub(super) fn names_key(sentence: &str, key: &str) -> bool {
    let want: Vec<&str> = key.split(' ').filter(|w| !w.is_empty()).collect();
    if want.is_empty() {
        return false;
    }
    // A regnal number is no initial (`reginald i` does not name `reginald ii`).
    let roman = |w: &str| w.chars().all(|c| "ivxlc".contains(c));
    let same = |word: &str, wanted: &str| {
        word == wanted || (wanted.chars().count() == 1 && word.len() > 1 && word.starts_with(wanted) && !roman(word))
    };
    let words: Vec<&str> = sentence.split(' ').collect();
    // A short given name stands for a longer one it begins (`ken burns` names `kenneth lauren
    // burns`; `gia` is not `gian`) when more of the name follows.
    let given = |word: &str| {
        word == want[0]
            || (want.len() > 1
                && want[0].chars().count() >= 3
                && word.chars().count() >= want[0].chars().count() + 3
                && word.starts_with(want[0]))
    };
    (0..words.len()).filter(|&i| given(words[i])).any(|start| {
        let mut k = 1;
        let mut skipped = 0;
        for w in &words[start + 1..] {
            if k == want.len() {
                break;
            }
            if same(w, want[k]) {
                k += 1;
            } else {
                skipped += 1;
                if skipped > 2 {
                    return false;
                }
            }
        }
        k == want.len()
    })
}

/// Where `cue` stands in `lower` as words of its own: a cue that begins with a letter does not
/// match inside a word (`daughter of ` is no cue in `granddaughter of `).
pub(super) fn cue_at<'t>(lower: &'t str, cue: &'t str) -> impl Iterator<Item = usize> + 't {
    let free = !cue.starts_with(char::is_alphanumeric);
    lower
        .match_indices(cue)
        .map(|(p, _)| p)
        .filter(move |&p| free || lower[..p].chars().next_back().is_none_or(|c| !c.is_alphanumeric()))
}

/// Whether a sentence opens with a pronoun (it goes on about the one its evidence was about).
pub(super) fn pronoun_opens(text: &str) -> bool {
    ["He ", "She ", "His ", "Her ", "It "].iter().any(|p| text.starts_with(p))
}

/// The end of a name mention, extended over ` of ` and the name after it (`Port of Spain`,
/// `Miguel I of Portugal`).
pub(super) fn joined_end(text: &str, found: &[Mention], end: usize) -> usize {
    match text[end..].strip_prefix(" of ") {
        Some(_) => {
            found.iter().find(|m| m.kind == MentionKind::Name && m.bytes.start == end + 4).map_or(end, |m| m.bytes.end)
        }
        None => end,
    }
}

/// Titles of rank: before a name, where the text may leave them out (`Archduchess Maria
/// Immakulata Of Austria`), after a comma (`Karl Aust, Prince of Velde`), or alone (`Count of
/// Dreux`, which names nobody).
pub(super) const TITLES: &[&str] = &[
    "Archduchess",
    "Archduke",
    "Princess",
    "Prince",
    "Infanta",
    "Infante",
    "Duchess",
    "Duke",
    "Countess",
    "Count",
    "Emperor",
    "Empress",
    "King",
    "Queen",
    "Lady",
    "Lord",
    "Sir",
    "Earl",
    "Baron",
    "Baroness",
    "Viscount",
    "Marquess",
    "Margrave",
    "Landgrave",
    "Elector",
];

/// The end of a person's name `names` lists, extended over a title after it (`Gerd III,
/// Count of Halm`): `end` itself when none follows.
pub(super) fn titled_end(text: &str, names: &[(usize, usize)], end: usize) -> usize {
    let Some(rest) = text[end..].strip_prefix(", ") else { return end };
    // An ordinal before the title (`Edmund of Langley, 1st Duke of York`).
    let ordinal = rest
        .split_once(' ')
        .filter(|(w, _)| {
            w.starts_with(|c: char| c.is_ascii_digit()) && ["st", "nd", "rd", "th"].iter().any(|s| w.ends_with(s))
        })
        .map_or(0, |(w, _)| w.len() + 1);
    let rest = &rest[ordinal..];
    let Some(title) = TITLES.iter().find(|t| rest.strip_prefix(**t).is_some_and(|r| r.starts_with(" of "))) else {
        return end;
    };
    // The name of the place, a mention of its own or the end of one that holds the title.
    let place = end + 2 + ordinal + title.len() + 4;
    names.iter().find(|&&(s, e)| s >= end + 2 && s <= place && e > place).map_or(end, |&(_, e)| e)
}
