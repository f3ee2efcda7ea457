//! Entity mentions without a model: capitalised names, acronyms, quantities with units, dates and
//! determiner-led noun phrases; whether a name is a person's; aliases from parenthesised
//! abbreviations. (The identity key of a name is [`crate::core::names::normalize`].)

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use crate::core::names::{TITLES, normalize};

/// What kind of span a mention is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MentionKind {
    /// A run of capitalised words (people, places, organisations, titles).
    Name,
    /// An all-capitals token such as `KVWA` or `COVID-19`.
    Acronym,
    /// A number with a unit or currency (`3.4 million euros`, `27 percent`).
    Quantity,
    /// A date or a year (`14 May 2009`, `2021`).
    Date,
    /// A lowercase noun phrase after a determiner (`the drought fund`).
    Phrase,
}

/// An entity mention in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mention {
    /// Byte range in the text given to [`mentions`] (without a trailing possessive).
    pub bytes: Range<usize>,
    /// What kind of span it is.
    pub kind: MentionKind,
}

/// Words that start sentences or headings without being names.
const FUNCTION_WORDS: &[&str] = &[
    "a",
    "an",
    "the",
    "this",
    "that",
    "these",
    "those",
    "it",
    "its",
    "he",
    "she",
    "they",
    "we",
    "i",
    "you",
    "his",
    "her",
    "their",
    "our",
    "my",
    "your",
    "in",
    "on",
    "at",
    "by",
    "for",
    "from",
    "with",
    "without",
    "to",
    "of",
    "and",
    "or",
    "but",
    "nor",
    "so",
    "yet",
    "if",
    "when",
    "while",
    "where",
    "after",
    "before",
    "since",
    "until",
    "during",
    "as",
    "because",
    "although",
    "though",
    "once",
    "then",
    "there",
    "here",
    "every",
    "each",
    "all",
    "some",
    "any",
    "no",
    "not",
    "neither",
    "either",
    "both",
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
    "first",
    "second",
    "third",
    "last",
    "next",
    "other",
    "another",
    "such",
    "what",
    "which",
    "who",
    "whom",
    "whose",
    "why",
    "how",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "has",
    "have",
    "had",
    "do",
    "does",
    "did",
    "can",
    "could",
    "will",
    "would",
    "shall",
    "should",
    "may",
    "might",
    "must",
    "also",
    "only",
    "even",
    "still",
    "just",
    "more",
    "most",
    "many",
    "much",
    "few",
    "several",
    "about",
    "over",
    "under",
    "between",
    "among",
    "into",
    "through",
    "against",
    "per",
    "via",
    "yes",
    "no",
    "present",
    "apologies",
    "minutes",
    "decision",
    "decisions",
    "actions",
    "note",
    "notes",
    "however",
    "therefore",
    "thus",
    "meanwhile",
    "instead",
    "today",
];

/// Frequent verbs that end a noun-phrase candidate (`the river fell`).
const COMMON_VERBS: &[&str] = &[
    "is", "was", "are", "were", "fell", "rose", "met", "began", "said", "made", "took", "gave", "ran", "came", "went",
    "grew", "kept", "left", "paid", "pays", "stayed", "sank", "lost", "won", "held", "found", "built", "became",
    "remains", "has", "had", "have", "includes", "requires", "caps", "runs", "takes", "gives", "makes", "goes",
    "comes", "sits", "lies", "means", "shows", "uses", "needs", "keep", "keeps", "make", "take", "give", "get", "gets",
    "see", "sees", "say", "says", "tell", "tells", "defines", "define", "produced", "produces", "wanted", "wants",
    "accepted", "refused",
];

/// Words that commonly follow a noun phrase.
const PHRASE_BOUNDARIES: &[&str] = &[
    "of", "in", "on", "at", "by", "for", "from", "with", "to", "into", "and", "or", "but", "that", "which", "who",
    "is", "was", "are", "were", "has", "had", "have", "will", "would", "can", "could", "may", "must", "should", "as",
    "than", "under", "over", "after", "before", "since", "between",
];

/// Connectors allowed inside a multi-word name (`University of Tartu`, `Hallam & Price`).
pub const NAME_CONNECTORS: &[&str] =
    &["of", "the", "de", "la", "le", "du", "van", "von", "der", "den", "da", "di", "y", "&", "for", "and"];

/// Month names (lowercase).
pub const MONTHS: &[&str] = &[
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];
const WEEKDAYS: &[&str] = &["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"];

/// Currencies, as the unit of a number (lowercase; matched on whole words).
pub const CURRENCIES: &[&str] =
    &["euro", "euros", "pound", "pounds", "dollar", "dollars", "eur", "usd", "gbp", "cents"];

/// Whether a lowercase word is a unit or a currency.
fn is_unit(word: &str) -> bool {
    UNITS.contains(&word) || CURRENCIES.contains(&word)
}

/// Units besides currencies that make a number a quantity (lowercase; matched on whole words).
const UNITS: &[&str] = &[
    "%",
    "percent",
    "per",
    "cent",
    "m",
    "km",
    "cm",
    "mm",
    "metre",
    "metres",
    "meter",
    "meters",
    "kilometre",
    "kilometres",
    "kilometer",
    "kilometers",
    "centimetre",
    "centimetres",
    "hectare",
    "hectares",
    "ha",
    "acre",
    "acres",
    "tonne",
    "tonnes",
    "ton",
    "tons",
    "kg",
    "g",
    "gram",
    "grams",
    "litre",
    "litres",
    "liter",
    "liters",
    "m³/s",
    "m³",
    "m3",
    "cubic",
    "square",
    "second",
    "seconds",
    "minute",
    "minutes",
    "hour",
    "hours",
    "day",
    "days",
    "week",
    "weeks",
    "month",
    "months",
    "year",
    "years",
    "people",
    "persons",
    "residents",
    "visitors",
    "members",
    "staff",
    "pupils",
    "students",
    "schools",
    "lines",
    "cores",
    "nights",
    "vessels",
    "boats",
    "gb",
    "mb",
    "tb",
    "kb",
    "degrees",
    "°c",
    "°f",
    "magnitudes",
    "mph",
    "kph",
    "miles",
    "mile",
    "feet",
    "inches",
    "times",
    "arcsecond",
    "arcseconds",
    "papers",
    "trees",
    "birds",
    "nests",
    "workers",
    "employees",
    "votes",
];
const MULTIPLIERS: &[&str] = &["thousand", "million", "billion", "trillion", "hundred"];

/// Words that mark a name as an organisation, place or work rather than a person.
const NOT_PERSON: &[&str] = &[
    "authority",
    "cooperative",
    "co-operative",
    "town",
    "city",
    "village",
    "university",
    "institute",
    "agency",
    "river",
    "fund",
    "trust",
    "board",
    "society",
    "council",
    "court",
    "labs",
    "lab",
    "ltd",
    "inc",
    "survey",
    "festival",
    "compact",
    "school",
    "college",
    "zoo",
    "company",
    "group",
    "office",
    "ministry",
    "department",
    "centre",
    "center",
    "museum",
    "library",
    "hall",
    "house",
    "street",
    "road",
    "bridge",
    "head",
    "quay",
    "harbour",
    "harbor",
    "port",
    "fen",
    "valley",
    "lake",
    "sea",
    "ocean",
    "mountain",
    "island",
    "county",
    "state",
    "kingdom",
    "republic",
    "church",
    "bank",
    "hospital",
    "observatory",
    "optics",
    "code",
    "act",
    "treaty",
    "agreement",
    "project",
    "programme",
    "program",
    "api",
    "system",
    "license",
    "licence",
    "foundation",
    "association",
    "union",
    "party",
    "army",
    "navy",
    "war",
    "battle",
    "prize",
    "award",
    "star",
    "mine",
    "press",
    "times",
    "news",
    "review",
    "journal",
];

fn is_function_word(w: &str) -> bool {
    FUNCTION_WORDS.contains(&w)
}

/// A whitespace-separated token with its core (surrounding punctuation removed).
#[derive(Debug, Clone)]
struct Token {
    core: Range<usize>,
    /// Punctuation right after the core (`,` `.` `)` `:` …) ends a name.
    closes: bool,
    /// Punctuation right before the core (`(` `"` …) starts a new name.
    opens: bool,
}

fn tokens(text: &str, range: Range<usize>) -> Vec<Token> {
    let s = &text[range.clone()];
    let mut out = Vec::new();
    let mut offset = 0;
    for raw in s.split_inclusive(char::is_whitespace) {
        let start = offset;
        offset += raw.len();
        let word = raw.trim_end();
        let is_edge = |c: char| !(c.is_alphanumeric() || matches!(c, '&' | '%' | '³' | '°' | '€' | '£' | '$'));
        let lead = word.len() - word.trim_start_matches(is_edge).len();
        let core = word.trim_start_matches(is_edge).trim_end_matches(is_edge);
        if core.is_empty() {
            continue;
        }
        let trail = &word[lead + core.len()..];
        let begin = range.start + start + lead;
        // "Dr." and "J." continue a name; other trailing punctuation ends it.
        let possessive_plural = (trail == "'" || trail == "’") && core.ends_with('s');
        let abbreviated = possessive_plural
            || trail == "."
                && (TITLES.contains(&core.to_lowercase().as_str())
                    || (core.chars().count() == 1 && core.chars().all(char::is_uppercase)));
        out.push(Token { core: begin..begin + core.len(), closes: !trail.is_empty() && !abbreviated, opens: lead > 0 });
    }
    out
}

fn strip_possessive(s: &str) -> &str {
    s.strip_suffix("'s")
        .or_else(|| s.strip_suffix("’s"))
        .or_else(|| s.strip_suffix('\''))
        .or_else(|| s.strip_suffix('’'))
        .unwrap_or(s)
}

fn starts_upper(s: &str) -> bool {
    s.chars().next().is_some_and(char::is_uppercase)
}

/// An all-capitals token of at least two letters, digits and hyphens allowed (`KVWA`, `COVID-19`).
pub fn is_acronym(s: &str) -> bool {
    let letters = s.chars().filter(|c| c.is_alphabetic()).count();
    letters >= 2
        && s.chars().all(|c| c.is_uppercase() || c.is_ascii_digit() || c == '-' || c == '&')
        && s.chars().next().is_some_and(char::is_uppercase)
}

fn is_number(s: &str) -> bool {
    let s = s.trim_start_matches(['€', '£', '$']);
    !s.is_empty()
        && s.chars().next().is_some_and(|c| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_digit() || c == ',' || c == '.' || c == '%')
}

fn is_year(s: &str) -> bool {
    s.len() == 4 && s.chars().all(|c| c.is_ascii_digit()) && (s.starts_with('1') || s.starts_with("20"))
}

/// Mentions in `text[range]`, in text order, without overlaps. `known_lower` holds the words the
/// surrounding text (window and chunk) uses in lowercase: a capitalised word at the start of a
/// sentence that also appears in lowercase is taken for an ordinary word.
pub fn mentions(text: &str, range: Range<usize>, known_lower: &HashSet<String>) -> Vec<Mention> {
    let toks = tokens(text, range);
    let word = |t: &Token| &text[t.core.clone()];
    let lower = |t: &Token| word(t).to_lowercase();
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        let w = word(t);
        let lw = lower(t);

        // Dates: [day] Month [year], Month day[,] year.
        if let Some((end, len)) = date_at(text, &toks, i) {
            out.push(Mention { bytes: t.core.start..end, kind: MentionKind::Date });
            i += len;
            continue;
        }
        // Quantities: number [multiplier] unit [unit] [per x].
        if is_number(w) {
            let mut j = i;
            let mut end = t.core.end;
            let has_percent = w.ends_with('%');
            if !t.closes && j + 1 < toks.len() && MULTIPLIERS.contains(&lower(&toks[j + 1]).as_str()) {
                j += 1;
                end = toks[j].core.end;
            }
            let mut units = 0;
            while !toks[j].closes && j + 1 < toks.len() && units < 4 && is_unit(&lower(&toks[j + 1])) {
                j += 1;
                units += 1;
                end = toks[j].core.end;
            }
            // A dangling "per" is not part of the unit.
            if units > 0 && lower(&toks[j]) == "per" {
                j -= 1;
                units -= 1;
                end = toks[j].core.end;
            }
            let currency = w.starts_with(['€', '£', '$']);
            if units > 0 || has_percent || currency {
                out.push(Mention { bytes: t.core.start..end, kind: MentionKind::Quantity });
                i = j + 1;
                continue;
            }
            if is_year(w) {
                out.push(Mention { bytes: t.core.clone(), kind: MentionKind::Date });
            }
            i += 1;
            continue;
        }
        // Noun phrases: a determiner, then two or three lowercase content words that end where
        // a noun phrase usually ends: before punctuation, a preposition or conjunction, or a verb.
        if matches!(lw.as_str(), "the" | "a" | "an") && !t.closes {
            let content = |k: usize| {
                let w = word(&toks[k]);
                let l = w.to_lowercase();
                w.chars().all(|c| c.is_lowercase() || c == '-')
                    && l.chars().count() > 2
                    && !is_function_word(&l)
                    && !l.ends_with("ly")
            };
            let verb_like = |k: usize| {
                let l = lower(&toks[k]);
                l.ends_with("ed") || l.ends_with("ing") || COMMON_VERBS.contains(&l.as_str())
            };
            let mut j = i;
            while j + 1 < toks.len() && j - i < 3 && content(j + 1) && !verb_like(j + 1) {
                j += 1;
                if toks[j].closes {
                    break;
                }
            }
            let ends_well = toks[j].closes
                || j + 1 >= toks.len()
                || verb_like(j + 1)
                || PHRASE_BOUNDARIES.contains(&lower(&toks[j + 1]).as_str());
            if j - i >= 2 && ends_well {
                let last = &toks[j];
                let end = last.core.start + strip_possessive(word(last)).len();
                out.push(Mention { bytes: toks[i + 1].core.start..end, kind: MentionKind::Phrase });
                i = j + 1;
                continue;
            }
        }
        // Names and acronyms: runs of capitalised words with connectors inside.
        if starts_upper(w) {
            let sentence_start = i == 0;
            let mut j = i;
            let mut last_cap = i;
            while !toks[j].closes && j + 1 < toks.len() && !toks[j + 1].opens {
                let next = &toks[j + 1];
                if starts_upper(word(next)) && !is_number(word(next)) {
                    j += 1;
                    last_cap = j;
                } else if NAME_CONNECTORS.contains(&lower(next).as_str())
                    && j + 2 < toks.len()
                    && !next.closes
                    && starts_upper(word(&toks[j + 2]))
                    && !toks[j + 2].opens
                {
                    j += 2;
                    last_cap = j;
                } else {
                    break;
                }
            }
            let mut first = i;
            // Leading function words ("The", "In") are not part of a name.
            while first <= last_cap && is_function_word(&lower(&toks[first])) {
                first += 1;
                while first <= last_cap && NAME_CONNECTORS.contains(&lower(&toks[first]).as_str()) {
                    first += 1;
                }
            }
            if first <= last_cap {
                let single = first == last_cap;
                let first_word = lower(&toks[first]);
                let ordinary = single
                    && (MONTHS.contains(&first_word.as_str())
                        || WEEKDAYS.contains(&first_word.as_str())
                        || (sentence_start && first == i && known_lower.contains(&first_word))
                        || word(&toks[first]).chars().count() < 2);
                if !ordinary {
                    let start = toks[first].core.start;
                    let end_word = word(&toks[last_cap]);
                    let end = toks[last_cap].core.start + strip_possessive(end_word).len();
                    let kind =
                        if single && is_acronym(word(&toks[first])) { MentionKind::Acronym } else { MentionKind::Name };
                    out.push(Mention { bytes: start..end, kind });
                }
            }
            i = last_cap + 1;
            continue;
        }
        i += 1;
    }
    out
}

/// A date starting at token `i`: returns (end byte, tokens used).
fn date_at(text: &str, toks: &[Token], i: usize) -> Option<(usize, usize)> {
    let word = |k: usize| toks.get(k).map(|t| &text[t.core.clone()]);
    let is_day = |s: &str| s.len() <= 2 && s.parse::<u8>().is_ok_and(|d| (1..=31).contains(&d));
    let is_month = |s: &str| MONTHS.contains(&s.to_lowercase().as_str());
    let w0 = word(i)?;
    // 14 May [2009]
    if is_day(w0) && !toks[i].closes && word(i + 1).is_some_and(is_month) {
        let with_year = !toks[i + 1].closes && word(i + 2).is_some_and(is_year);
        let last = if with_year { i + 2 } else { i + 1 };
        return Some((toks[last].core.end, last - i + 1));
    }
    // May 14[,] 2009 | May 2009
    if is_month(w0) && !toks[i].closes {
        if word(i + 1).is_some_and(is_year) {
            return Some((toks[i + 1].core.end, 2));
        }
        if word(i + 1).is_some_and(is_day) {
            let with_year = word(i + 2).is_some_and(is_year);
            let last = if with_year { i + 2 } else { i + 1 };
            return Some((toks[last].core.end, last - i + 1));
        }
    }
    None
}

/// Whether a name looks like a person's: two or three capitalised words (after titles), none of
/// them an organisation or place word, no acronym.
pub fn looks_like_person(name: &str) -> bool {
    let words: Vec<&str> = name.split_whitespace().collect();
    let words: Vec<&str> = words
        .iter()
        .skip_while(|w| TITLES.contains(&w.trim_end_matches('.').to_lowercase().as_str()))
        .copied()
        .collect();
    (2..=3).contains(&words.len())
        && words.iter().all(|w| {
            starts_upper(w)
                && w.chars().all(|c| c.is_alphabetic() || c == '-' || c == '\'' || c == '’' || c == '.')
                && !is_acronym(w)
                && !NOT_PERSON.contains(&w.to_lowercase().as_str())
        })
}

/// Aliases found in a document: parenthesised abbreviations after a name
/// (`Kestrel Valley Water Authority (KVWA)` maps `kvwa` to the long name) and the reverse
/// (`KVWA (Kestrel Valley Water Authority)`). Keys and values are normalised names.
pub fn abbreviation_aliases(text: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let empty = HashSet::new();
    for (open, _) in text.match_indices('(') {
        let Some(close) = text[open..].find(')').map(|c| open + c) else { continue };
        let inside = text[open + 1..close].trim();
        if inside.is_empty() || inside.len() > 120 {
            continue;
        }
        // The sentence (or line) before the parenthesis.
        let line_start = text[..open].rfind(['\n', '.', ';', ':']).map_or(0, |p| p + 1);
        let before_mentions = mentions(text, line_start..open, &empty);
        let Some(before) = before_mentions.last().filter(|m| text[m.bytes.end..open].trim().is_empty()) else {
            continue;
        };
        let before_text = &text[before.bytes.clone()];
        if is_acronym(inside) && before.kind == MentionKind::Name {
            if let Some(long) = longest_expansion(before_text, inside) {
                out.insert(normalize(inside), normalize(long));
            }
        } else if before.kind == MentionKind::Acronym && longest_expansion(inside, before_text).is_some() {
            out.insert(normalize(before_text), normalize(inside));
        }
    }
    out
}

/// The longest word-suffix of `name` whose capitals contain `abbreviation`'s letters in order,
/// starting with its first letter.
fn longest_expansion<'a>(name: &'a str, abbreviation: &str) -> Option<&'a str> {
    let letters: Vec<char> = abbreviation.chars().filter(|c| c.is_alphabetic()).collect();
    let word_starts: Vec<usize> = name.match_indices(char::is_whitespace).map(|(i, c)| i + c.len()).collect();
    std::iter::once(0).chain(word_starts).find_map(|start| {
        let candidate = name[start..].trim();
        let capitals: Vec<char> = candidate.chars().filter(|c| c.is_uppercase()).collect();
        let first_matches = capitals.first().is_some_and(|c| Some(c) == letters.first());
        let mut remaining = letters.iter().peekable();
        for c in &capitals {
            if remaining.peek() == Some(&c) {
                remaining.next();
            }
        }
        (first_matches && remaining.peek().is_none() && !candidate.is_empty()).then_some(candidate)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Vec<(&str, MentionKind)> {
        let lower: HashSet<String> =
            text.split_whitespace().filter(|w| w.chars().all(char::is_lowercase)).map(str::to_owned).collect();
        mentions(text, 0..text.len(), &lower).into_iter().map(|m| (&text[m.bytes], m.kind)).collect()
    }

    use MentionKind::*;

    #[test]
    fn names_acronyms_and_connectors() {
        assert_eq!(
            found("The Port Ellery Harbour Authority (PEHA) and the University of Tartu hired Hallam & Price."),
            [
                ("Port Ellery Harbour Authority", Name),
                ("PEHA", Acronym),
                ("University of Tartu", Name),
                ("Hallam & Price", Name)
            ]
        );
        assert_eq!(found("Fennick's leakage rate fell."), [("Fennick", Name)]);
        assert_eq!(found("the drought fund pays irrigators"), [("drought fund", Phrase)]);
        assert_eq!(found("a small public body with a staff."), [("small public body", Phrase)]);
        assert!(found("the compact defines four tiers").is_empty());
        assert_eq!(
            found("The Valley Growers' Cooperative (VGC) met."),
            [("Valley Growers' Cooperative", Name), ("VGC", Acronym)]
        );
    }

    #[test]
    fn sentence_initial_ordinary_words_are_not_names() {
        // "Drainage" also appears in lowercase in the context, so at a sentence start it is an
        // ordinary word; a month alone is not a name.
        let text = "Drainage began in the 1790s. The drainage board met.";
        assert_eq!(found(text).iter().map(|(s, _)| *s).collect::<Vec<_>>(), ["drainage board"]);
        assert!(found("In March the river fell.").is_empty());
    }

    #[test]
    fn quantities_dates_and_years() {
        assert_eq!(
            found("On 14 May 2009 it carried 11.2 cubic metres per second, 27 percent and 3.4 million euros in 2021."),
            [
                ("14 May 2009", Date),
                ("11.2 cubic metres per second", Quantity),
                ("27 percent", Quantity),
                ("3.4 million euros", Quantity),
                ("2021", Date)
            ]
        );
        assert_eq!(found("It cost £210,000 in March 2014."), [("£210,000", Quantity), ("March 2014", Date)]);
    }

    #[test]
    fn people_and_abbreviations() {
        assert!(looks_like_person("Dr. Hanne Wirtanen"));
        assert!(looks_like_person("Rafael Ortiz"));
        assert!(!looks_like_person("Kestrel Valley Water Authority"));
        assert!(!looks_like_person("University of Tartu"));
        let text = "It is run by the Kestrel Valley Water Authority (KVWA), with the Nordic Institute for \
                    Resource Economics (NIRE). REAPI (Remote Execution API) is used. A note (see below).";
        let aliases = abbreviation_aliases(text);
        assert_eq!(aliases.get("kvwa").map(String::as_str), Some("kestrel valley water authority"));
        assert_eq!(aliases.get("nire").map(String::as_str), Some("nordic institute for resource economics"));
        assert_eq!(aliases.get("reapi").map(String::as_str), Some("remote execution api"));
        assert_eq!(aliases.len(), 3);
    }
}
