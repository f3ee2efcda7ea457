//! What a question asks for: the kind of answer (a person, a date, a place, an institution, a
//! number, a nationality, a cause), the two options of a choice, the subjects of a same-or-not
//! question, and the relation words that state it in text.

use std::ops::Range;

use std::collections::HashSet;

use super::{lower_words, lowercase_in_place, word_spans};
use crate::core::words::is_question_stop_word;
use crate::rules::countries::is_demonym;

/// How the dates of a choice are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    Earliest,
    Latest,
    LongestLife,
    ShortestLife,
}

/// Which date of an entity a choice compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    Birth,
    Death,
    Any,
}

/// What a question asks for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Asked {
    Choice {
        options: Vec<String>,
        order: Order,
        event: Event,
        role: Option<&'static str>,
    },
    Same {
        subjects: Vec<String>,
    },
    /// Any other yes-or-no question: whether a sentence states it.
    Verify,
    Person,
    Date,
    Place,
    /// Where someone studied or works: a school, a university, an employer.
    Institution,
    Number,
    Nationality,
    Cause,
}

/// Relation words of questions and the stems that state them in text.
pub(super) const RELATION_STEMS: &[(&str, &[&str])] = &[
    ("director", &["direct"]),
    ("directed", &["direct"]),
    ("producer", &["produc"]),
    ("composer", &["compos", "music"]),
    ("performer", &["perform", "sung", "sing", "by"]),
    ("author", &["author", "written", "wrote", "writer"]),
    ("writer", &["written", "wrote", "writer"]),
    ("father", &["father", "son", "daughter"]),
    ("mother", &["mother", "son", "daughter"]),
    ("husband", &["husband", "married", "wife"]),
    ("wife", &["wife", "married", "husband"]),
    ("spouse", &["married", "wife", "husband", "spouse"]),
    ("born", &["born", "birth"]),
    ("birth", &["born", "birth"]),
    ("died", &["died", "death"]),
    ("die", &["died", "death"]),
    ("death", &["died", "death"]),
    ("buried", &["buried", "grave"]),
    ("work", &["work", "employ", "professor", "taught", "join"]),
    ("study", &["stud", "graduat", "educat", "attend", "alumn", "degree"]),
    ("studied", &["stud", "graduat", "educat", "attend", "alumn", "degree"]),
    ("graduate", &["graduat", "stud", "alumn", "degree"]),
    ("educated", &["educat", "stud", "graduat", "attend"]),
    ("founded", &["found", "establish"]),
];

/// The two options of a choice question, and the words before them.
pub(super) fn options(question: &str) -> Option<(String, Vec<String>)> {
    let q = question.trim().trim_end_matches('?').trim();
    let (head, tail) = if let Some(i) = q.find(" out of ").or_else(|| q.find(" between ")) {
        let skip = if q[i..].starts_with(" out of ") { " out of ".len() } else { " between ".len() };
        (&q[..i], &q[i + skip..])
    } else {
        let i = q.find(", ")?;
        (&q[..i], &q[i + 2..])
    };
    let split = tail.rfind(" or ").map(|i| (i, 4)).or_else(|| tail.rfind(" and ").map(|i| (i, 5)))?;
    let (a, b) = (tail[..split.0].trim(), tail[split.0 + split.1..].trim());
    (!a.is_empty() && !b.is_empty()).then(|| (head.to_lowercase(), vec![a.to_owned(), b.to_owned()]))
}

/// Two subjects a question writes with one role for both (`directors of films A and B`, `films
/// A and B have the directors`), each with its role written out (`director of film A`).
pub(super) fn distributed(a: &str, b: &str) -> Option<(String, String)> {
    let (lower_a, lower_b) = (a.to_lowercase(), b.to_lowercase());
    for (role, _) in ROLE_CUES {
        for work in ["film", "song", "album"] {
            let each = |a: &str, b: &str| Some((format!("{role} of {work} {a}"), format!("{role} of {work} {b}")));
            let both = format!("{role}s of {work}s ");
            if lower_a.starts_with(&both) {
                return each(&a[both.len()..], b);
            }
            let owned = format!(" have the {role}s");
            let first =
                [format!("{work}s: "), format!("{work}s ")].into_iter().find(|p| lower_a.starts_with(p.as_str()));
            if let Some(first) = first
                && lower_b.ends_with(&owned)
            {
                return each(&a[first.len()..], &b[..b.len() - owned.len()]);
            }
        }
    }
    None
}

/// What `question` asks for, when it is a factoid.
pub(crate) fn asked(question: &str) -> Option<Asked> {
    let q = question.trim().to_lowercase();
    let starts = |p: &str| q.starts_with(p);
    let has = |w: &str| lower_words(&q).iter().any(|x| x == w);
    let first = lower_words(&q).into_iter().next().unwrap_or_default();
    let yes_no = ["is", "are", "was", "were", "do", "does", "did", "has", "have", "had"].contains(&first.as_str());
    if yes_no && q.contains("same") {
        let body = question.trim().trim_end_matches('?');
        let body = body.split_once(' ').map_or(body, |(_, rest)| rest);
        let body = body.trim_start_matches("both ").trim();
        let end =
            [" from the same", " both ", " located in", " in the same", " of the same", " have the same", " share"]
                .iter()
                .filter_map(|m| body.find(m))
                .min()
                .unwrap_or(body.len());
        let (a, b) = body[..end].split_once(" and ")?;
        let (a, b) = (a.trim(), b.trim());
        let subjects = match distributed(a, b) {
            Some((a, b)) => vec![a, b],
            None => vec![a.to_owned(), b.to_owned()],
        };
        return Some(Asked::Same { subjects });
    }
    if !yes_no && let Some((head, options)) = options(question) {
        let order = if head.contains("lived longer") || head.contains("longer life") {
            Some(Order::LongestLife)
        } else if head.contains("shorter life") || head.contains("lived shorter") {
            Some(Order::ShortestLife)
        } else if ["first", "earlier", "earliest", "older", "oldest", "before"]
            .iter()
            .any(|w| has(w) && head.contains(w))
        {
            Some(Order::Earliest)
        } else if ["later", "latest", "last", "younger", "youngest", "recently", "after", "newer", "recent"]
            .iter()
            .any(|w| head.contains(w))
        {
            Some(Order::Latest)
        } else {
            None
        };
        if let Some(order) = order {
            let event = if ["born", "birth", "older", "younger", "oldest", "youngest"].iter().any(|w| head.contains(w))
            {
                Event::Birth
            } else if ["died", "death", "lived"].iter().any(|w| head.contains(w)) {
                if matches!(order, Order::LongestLife | Order::ShortestLife) { Event::Any } else { Event::Death }
            } else {
                Event::Any
            };
            // `Which film has the director who …`: the options' directors are compared (not so
            // in `Which director …`, `Who …`, whose options are the people themselves).
            let head_words = lower_words(&head);
            let role =
                ROLE_CUES.iter().map(|(r, _)| *r).find(|r| head_words.iter().any(|w| w == r)).filter(|r| {
                    head_words.get(1).is_none_or(|w| w != r) && head_words.first().is_none_or(|w| w != "who")
                });
            return Some(Asked::Choice { options, order, event, role });
        }
    }
    if yes_no {
        return (!q.contains(" or ")).then_some(Asked::Verify);
    }
    // `Who …`, and `By whom …`, `Under whose …`.
    let second = lower_words(&q).into_iter().nth(1).unwrap_or_default();
    let by_whom = ["by", "under", "with", "for", "to", "from"].contains(&first.as_str())
        && ["whom", "whose"].contains(&second.as_str());
    if starts("who") || starts("whom") || starts("whose") || by_whom {
        Some(Asked::Person)
    } else if starts("when")
        || starts("what year")
        || starts("in what year")
        || starts("in which year")
        || starts("which year")
        || starts("what date")
        || q.contains("date of birth")
        || q.contains("date of death")
    {
        Some(Asked::Date)
    } else if starts("where") && INSTITUTION_VERBS.iter().any(|w| has(w)) {
        Some(Asked::Institution)
    } else if starts("where")
        || q.contains("place of birth")
        || q.contains("place of death")
        || q.contains("place of burial")
    {
        Some(Asked::Place)
    } else if ["how many", "how much", "how long", "how far", "how old", "how big", "how tall"]
        .iter()
        .any(|p| starts(p))
        || (starts("what") && has("cost"))
    {
        Some(Asked::Number)
    } else if q.contains("nationality") || starts("which country") || starts("what country") || q.contains(" country ")
    {
        Some(Asked::Nationality)
    } else if starts("why") || q.contains("cause of death") {
        Some(Asked::Cause)
    } else {
        None
    }
}

/// Verbs of a `where` question that asks for an institution rather than a place (`Where did X
/// study?`, `Where does X work?`).
pub(super) const INSTITUTION_VERBS: &[&str] = &[
    "study",
    "studied",
    "graduate",
    "graduated",
    "educated",
    "attend",
    "attended",
    "work",
    "works",
    "worked",
    "teach",
];

/// Words that make a name an institution's (`Yale College`, `Saint Petersburg Conservatory`).
pub(super) const INSTITUTION_WORDS: &[&str] = &[
    "University",
    "College",
    "School",
    "Institute",
    "Conservatory",
    "Academy",
    "Seminary",
    "Polytechnic",
    "Gymnasium",
    "Lyceum",
    "Conservatoire",
];

pub(super) fn is_institution(name: &str) -> bool {
    name.split_whitespace().any(|w| INSTITUTION_WORDS.contains(&w))
}

/// Whether `question` asks one short thing: not two questions in one (`Who was X, and what did
/// he …?`) and not for a description (`Who was X?`).
pub(super) fn single_factoid(question: &str) -> bool {
    let q = question.trim().to_lowercase();
    let compound =
        [", and ", " and what ", " and how ", " and why ", " and which ", " and who "].iter().any(|c| q.contains(c));
    let describe = ["who was ", "who is ", "who were ", "who are "].iter().any(|p| q.starts_with(p))
        && hop_phrases(question).is_empty()
        && lower_words(&q).len() <= 6;
    !compound && !describe
}

/// The event a question about a date or a place asks for: `born`, `birthday` → birth; `die`,
/// `death` → death; any other (`buried`, `founded`) → any.
pub(super) fn asked_event(question: &str) -> Event {
    let words = lower_words(question);
    let has = |list: &[&str]| words.iter().any(|w| list.contains(&w.as_str()));
    if has(&["born", "birth", "birthday", "birthplace"]) {
        Event::Birth
    } else if has(&["die", "died", "dies", "death"]) {
        Event::Death
    } else {
        Event::Any
    }
}

/// The name a question gives an option or entity, without a parenthesised qualifier
/// (`Mutiny (1952 Film)` → `Mutiny`) or a possessive.
pub(super) fn bare(name: &str) -> &str {
    let name = name.split(" (").next().unwrap_or(name).trim();
    name.strip_suffix("'s").or_else(|| name.strip_suffix("’s")).unwrap_or(name).trim()
}

/// A span cut to what the question asks: the year of a date for `what year`, a count without
/// the noun the question already names (`how many pupils` · `3,870 pupils` → `3,870`).
pub(super) fn as_asked(asked: &Asked, question: &str, span: &str) -> String {
    let q = question.to_lowercase();
    let span = span.trim();
    match asked {
        Asked::Date if ["what year", "which year"].iter().any(|p| q.contains(p)) => word_spans(span)
            .into_iter()
            .map(|(s, e)| &span[s..e])
            .rfind(|w| w.len() == 4 && w.chars().all(|c| c.is_ascii_digit()))
            .unwrap_or(span)
            .to_owned(),
        // An institution without the office held in it (`President of Yale College`).
        Asked::Institution => match span.split_once(" of ") {
            Some((office, name)) if !is_institution(office) && is_institution(name) => name.to_owned(),
            _ => span.to_owned(),
        },
        // A compound nationality's first part, the origin (`Austrian-American` → `Austrian`).
        Asked::Nationality => match span.split_once('-') {
            Some((first, _)) if is_demonym(first) => first.to_owned(),
            _ => span.to_owned(),
        },
        Asked::Number => {
            let asked_words: HashSet<String> = lower_words(&q).into_iter().collect();
            let mut end = span.len();
            for (s, e) in word_spans(span).into_iter().skip(1).rev() {
                if e == end && asked_words.contains(&span[s..e].to_lowercase()) {
                    end = span[..s].trim_end().len();
                }
            }
            span[..end].to_owned()
        }
        _ => span.to_owned(),
    }
}

/// Counts written as words.
pub(super) const NUMBER_WORDS: &[&str] = &[
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
    "thirty",
    "forty",
    "fifty",
    "hundred",
    "thousand",
    "dozen",
];

/// The noun a `how many` / `how much` question counts (`How many pupils …` → `pupils`).
pub(super) fn counted_noun(question: &str) -> Option<String> {
    let words = lower_words(question);
    let at = words.windows(2).position(|w| w[0] == "how" && (w[1] == "many" || w[1] == "much"))?;
    words.get(at + 2).filter(|w| !is_question_stop_word(w)).cloned()
}

/// The stems that state the question's relation words in text.
pub(super) fn relation_stems(question: &str) -> Vec<&'static str> {
    lower_words(question)
        .iter()
        .flat_map(|w| RELATION_STEMS.iter().filter(move |(r, _)| r == w).flat_map(|(_, stems)| stems.iter().copied()))
        .collect()
}

/// A relation a question follows from the entity it names to the one it asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hop {
    /// The director, performer, … of a work (the role word).
    Role(&'static str),
    Father,
    Mother,
    Spouse,
    /// A son or daughter.
    Child,
}

/// Role words and how text states the role (`directed by X`).
pub(super) const ROLE_CUES: &[(&str, &[&str])] = &[
    ("director", &["directed by ", "director ", "film by "]),
    ("performer", &["performed by ", "sung by ", "recorded by ", " by "]),
    ("composer", &["composed by ", "music by ", "music written by ", "score by ", "composer "]),
    ("producer", &["produced by ", "producer "]),
    ("author", &["written by ", "author ", " by "]),
    ("writer", &["written by ", "writer ", " by "]),
    ("screenwriter", &["written by ", "screenplay by ", "screenwriter "]),
    ("founder", &["founded by ", "founder "]),
    ("creator", &["created by ", "creator "]),
    ("editor", &["edited by ", "editor "]),
];

/// The hops a question's words name, with the byte range of each phrase.
pub(crate) fn hop_phrases(question: &str) -> Vec<(Range<usize>, Vec<Hop>)> {
    let lower = lowercase_in_place(question);
    let words: Vec<(usize, usize)> = word_spans(&lower);
    let word = |k: usize| words.get(k).map_or("", |&(s, e)| &lower[s..e]);
    let mut out = Vec::new();
    let mut k = 0;
    while k < words.len() {
        let at = words[k].0;
        let (hops, len): (Vec<Hop>, usize) = match (word(k), word(k + 1), word(k + 2)) {
            ("paternal", "grandfather", _) => (vec![Hop::Father, Hop::Father], 2),
            ("paternal", "grandmother", _) => (vec![Hop::Father, Hop::Mother], 2),
            ("maternal", "grandfather", _) => (vec![Hop::Mother, Hop::Father], 2),
            ("maternal", "grandmother", _) => (vec![Hop::Mother, Hop::Mother], 2),
            ("grandfather", ..) => (vec![Hop::Father, Hop::Father], 1),
            ("grandmother", ..) => (vec![Hop::Father, Hop::Mother], 1),
            ("mother", "in", "law") => (vec![Hop::Spouse, Hop::Mother], 3),
            ("father", "in", "law") => (vec![Hop::Spouse, Hop::Father], 3),
            ("father", ..) => (vec![Hop::Father], 1),
            ("mother", ..) => (vec![Hop::Mother], 1),
            ("husband" | "wife" | "spouse", ..) => (vec![Hop::Spouse], 1),
            ("child" | "son" | "daughter", ..) => (vec![Hop::Child], 1),
            (w, ..) => match ROLE_CUES.iter().find(|(r, _)| *r == w) {
                Some((r, _)) => (vec![Hop::Role(r)], 1),
                None => (Vec::new(), 1),
            },
        };
        if !hops.is_empty() {
            out.push((at..words[k + len - 1].1, hops));
        }
        k += len;
    }
    out
}
