//! Countries and the words that name them: a country's name, its common short forms and its
//! demonym (`Italian` → Italy), so that "an Italian businessman" and "born in Rome, Italy" are
//! seen to be about one country. Historical states are their own entries.

/// (country, the words that name it, lowercase). The first word is the key returned.
const COUNTRIES: &[&[&str]] = &[
    &["united states", "america", "american", "usa", "us", "u.s.", "united states of america"],
    &[
        "united kingdom",
        "uk",
        "britain",
        "great britain",
        "british",
        "england",
        "english",
        "scotland",
        "scottish",
        "wales",
        "welsh",
        "northern ireland",
    ],
    &["ireland", "irish"],
    &["canada", "canadian"],
    &["australia", "australian"],
    &["new zealand", "new zealander"],
    &["france", "french"],
    &["germany", "german", "west germany", "west german", "east germany", "east german"],
    &["italy", "italian"],
    &["spain", "spanish"],
    &["portugal", "portuguese"],
    &["netherlands", "dutch", "holland"],
    &["belgium", "belgian"],
    &["luxembourg", "luxembourgish"],
    &["switzerland", "swiss"],
    &["austria", "austrian"],
    &["denmark", "danish"],
    &["norway", "norwegian"],
    &["sweden", "swedish"],
    &["finland", "finnish"],
    &["iceland", "icelandic"],
    &["poland", "polish"],
    &["czech republic", "czech", "czechia"],
    &["czechoslovakia", "czechoslovak"],
    &["slovakia", "slovak"],
    &["hungary", "hungarian"],
    &["romania", "romanian"],
    &["bulgaria", "bulgarian"],
    &["greece", "greek"],
    &["turkey", "turkish"],
    &["ottoman empire", "ottoman"],
    &["russia", "russian"],
    &["soviet union", "soviet", "ussr"],
    &["ukraine", "ukrainian"],
    &["belarus", "belarusian"],
    &["estonia", "estonian"],
    &["latvia", "latvian"],
    &["lithuania", "lithuanian"],
    &["georgia", "georgian"],
    &["armenia", "armenian"],
    &["azerbaijan", "azerbaijani"],
    &["serbia", "serbian"],
    &["croatia", "croatian"],
    &["slovenia", "slovenian", "slovene"],
    &["bosnia and herzegovina", "bosnian", "bosnia"],
    &["yugoslavia", "yugoslav", "yugoslavian"],
    &["albania", "albanian"],
    &["north macedonia", "macedonian", "macedonia"],
    &["montenegro", "montenegrin"],
    &["india", "indian"],
    &["pakistan", "pakistani"],
    &["bangladesh", "bangladeshi"],
    &["sri lanka", "sri lankan"],
    &["nepal", "nepalese", "nepali"],
    &["china", "chinese"],
    &["taiwan", "taiwanese"],
    &["hong kong"],
    &["japan", "japanese"],
    &["south korea", "korean", "south korean", "korea"],
    &["north korea", "north korean"],
    &["philippines", "filipino", "philippine"],
    &["indonesia", "indonesian"],
    &["malaysia", "malaysian"],
    &["singapore", "singaporean"],
    &["thailand", "thai"],
    &["vietnam", "vietnamese"],
    &["iran", "iranian", "persian", "persia"],
    &["iraq", "iraqi"],
    &["israel", "israeli"],
    &["egypt", "egyptian"],
    &["saudi arabia", "saudi"],
    &["syria", "syrian"],
    &["lebanon", "lebanese"],
    &["afghanistan", "afghan"],
    &["mexico", "mexican"],
    &["brazil", "brazilian"],
    &["argentina", "argentine", "argentinian"],
    &["chile", "chilean"],
    &["colombia", "colombian"],
    &["peru", "peruvian"],
    &["venezuela", "venezuelan"],
    &["cuba", "cuban"],
    &["uruguay", "uruguayan"],
    &["nigeria", "nigerian"],
    &["south africa", "south african"],
    &["kenya", "kenyan"],
    &["ghana", "ghanaian"],
    &["ethiopia", "ethiopian"],
    &["morocco", "moroccan"],
    &["algeria", "algerian"],
    &["tunisia", "tunisian"],
];

/// The states of the United States and the provinces and territories of Canada: places there
/// are written with theirs (`Winnipeg, Manitoba`, `Brockton, Massachusetts`), and reference
/// data names them so.
const STATES_AND_PROVINCES: &[&str] = &[
    "Alabama",
    "Alaska",
    "Arizona",
    "Arkansas",
    "California",
    "Colorado",
    "Connecticut",
    "Delaware",
    "Florida",
    "Georgia",
    "Hawaii",
    "Idaho",
    "Illinois",
    "Indiana",
    "Iowa",
    "Kansas",
    "Kentucky",
    "Louisiana",
    "Maine",
    "Maryland",
    "Massachusetts",
    "Michigan",
    "Minnesota",
    "Mississippi",
    "Missouri",
    "Montana",
    "Nebraska",
    "Nevada",
    "New Hampshire",
    "New Jersey",
    "New Mexico",
    "New York",
    "North Carolina",
    "North Dakota",
    "Ohio",
    "Oklahoma",
    "Oregon",
    "Pennsylvania",
    "Rhode Island",
    "South Carolina",
    "South Dakota",
    "Tennessee",
    "Texas",
    "Utah",
    "Vermont",
    "Virginia",
    "Washington",
    "West Virginia",
    "Wisconsin",
    "Wyoming",
    "Alberta",
    "British Columbia",
    "Manitoba",
    "New Brunswick",
    "Newfoundland and Labrador",
    "Newfoundland",
    "Nova Scotia",
    "Ontario",
    "Prince Edward Island",
    "Quebec",
    "Québec",
    "Saskatchewan",
    "Northwest Territories",
    "Nunavut",
    "Yukon",
];

/// The length of `, State` at the start of `text` when State is a US state or a Canadian
/// province (the longest that ends a word there), else 0.
pub fn state_after(text: &str) -> usize {
    let Some(rest) = text.strip_prefix(", ") else { return 0 };
    STATES_AND_PROVINCES
        .iter()
        .filter(|s| rest.starts_with(**s) && !rest[s.len()..].starts_with(char::is_alphanumeric))
        .map(|s| 2 + s.len())
        .max()
        .unwrap_or(0)
}

/// The country `words` (a name or demonym, any case) stands for.
pub fn country_of(words: &str) -> Option<&'static str> {
    let key = words.trim().to_lowercase();
    COUNTRIES.iter().find(|names| names.contains(&key.as_str())).map(|names| names[0])
}

/// Whether `word` (one word, any case) is one of the list's demonyms or languages (`Italian`,
/// `English`, `Dutch`, `Swiss`), not a name of a place (`Italy`, `England`, `Holland`, `Japan`).
pub fn is_demonym(word: &str) -> bool {
    const ENDINGS: [&str; 13] = ["an", "ish", "ese", "ch", "i", "ic", "ek", "ak", "av", "ss", "ino", "ine", "ene"];
    let lower = word.trim().to_lowercase();
    lower.chars().count() >= 4
        && country_of(&lower).is_some_and(|key| key != lower)
        && ENDINGS.iter().any(|e| lower.ends_with(e))
}

/// The countries a text names, by one- and two-word windows over its capitalised words.
pub fn countries_in(text: &str) -> Vec<&'static str> {
    let words: Vec<&str> = text
        .split(|c: char| !(c.is_alphanumeric() || c == '.'))
        .map(|w| w.trim_end_matches('.'))
        .filter(|w| !w.is_empty())
        .collect();
    let capital = |w: &str| w.chars().next().is_some_and(char::is_uppercase);
    let mut out = Vec::new();
    let mut k = 0;
    while k < words.len() {
        if !capital(words[k]) {
            k += 1;
            continue;
        }
        let longer = (k + 1 < words.len()).then(|| format!("{} {}", words[k], words[k + 1]));
        if let Some(c) = longer.as_deref().and_then(country_of) {
            out.push(c);
            k += 2;
        } else {
            out.extend(country_of(words[k]));
            k += 1;
        }
    }
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_demonyms_are_one_country() {
        assert_eq!(country_of("Italian"), Some("italy"));
        assert_eq!(country_of("ITALY"), Some("italy"));
        assert_eq!(country_of("Aldovia"), None);
        assert_eq!(state_after(", Manitoba) is a director"), ", Manitoba".len());
        assert_eq!(state_after(", West Virginia, USA"), ", West Virginia".len());
        assert_eq!(state_after(", Newfoundland and Labrador"), ", Newfoundland and Labrador".len());
        assert_eq!(state_after(", Texasville"), 0);
        assert_eq!(state_after(" Manitoba"), 0);
        assert_eq!(countries_in("He was born in Rome, Italy, to a Welsh mother."), ["italy", "united kingdom"]);
        assert_eq!(countries_in("a South African and West German co-production"), ["south africa", "germany"]);
        // Lowercase words are not names.
        assert!(countries_in("he spoke french badly and wore a german helmet").is_empty());
        // Peoples and languages, told from places.
        for word in ["Italian", "English", "Dutch", "Swiss", "Thai", "Greek", "Filipino", "Czech"] {
            assert!(is_demonym(word), "{word}");
        }
        for word in ["Italy", "England", "Holland", "Japan", "Iran", "UK", "America", "Aldovian"] {
            assert!(!is_demonym(word), "{word}");
        }
    }
}
