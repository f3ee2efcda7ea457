//! The identity key of entity names: what makes two surface forms the same entity, used when
//! the hypergraph is built, when kb aliases are merged and when a question's entities are
//! matched.

/// Person titles stripped from names for identity.
pub const TITLES: &[&str] = &[
    "dr",
    "doctor",
    "prof",
    "professor",
    "mr",
    "mrs",
    "ms",
    "miss",
    "sir",
    "dame",
    "lord",
    "lady",
    "rev",
    "reverend",
    "judge",
    "mayor",
    "captain",
    "capt",
    "st",
    "saint",
    "king",
    "queen",
    "president",
];

/// The identity key of an entity name: lowercase, possessives, titles, leading articles and
/// punctuation removed (`&` reads as `and`, a decimal point between digits is kept), in Unicode
/// NFC (a name typed with combining accents is the same key as its composed form).
pub fn normalize(name: &str) -> String {
    let lowered = super::text::nfc(name.to_lowercase()).replace('’', "'");
    let chars: Vec<char> = lowered.chars().collect();
    let mut cleaned = String::with_capacity(lowered.len());
    for (k, &c) in chars.iter().enumerate() {
        let between_digits =
            k > 0 && k + 1 < chars.len() && chars[k - 1].is_ascii_digit() && chars[k + 1].is_ascii_digit();
        if c.is_alphanumeric() || c == '%' || c == '³' || (c == '.' && between_digits) {
            cleaned.push(c);
        } else if c == ',' && between_digits {
            // 1,900 → 1900
        } else if c == '&' {
            cleaned.push_str(" and ");
        } else if c == '\'' {
            // possessive or elision: drop a following "s" at the end of a word
            if chars.get(k + 1) == Some(&'s') && chars.get(k + 2).is_none_or(|n| !n.is_alphanumeric()) {
                cleaned.push('\u{1}');
            }
        } else {
            cleaned.push(' ');
        }
    }
    let cleaned = cleaned.replace("\u{1}s", "");
    let mut words: Vec<&str> = cleaned.split_whitespace().collect();
    while words.len() > 1 && (matches!(words[0], "the" | "a" | "an") || TITLES.contains(&words[0])) {
        words.remove(0);
    }
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_is_an_identity_key() {
        assert_eq!(normalize("Fennick's"), "fennick");
        assert_eq!(normalize("Dr. Hanne Wirtanen"), "hanne wirtanen");
        assert_eq!(normalize("The  Valley Growers’ Cooperative"), "valley growers cooperative");
        assert_eq!(normalize("Hallam & Price"), "hallam and price");
        assert_eq!(normalize("COVID-19"), "covid 19");
        assert_eq!(normalize("4.2 m, 1,900 hectares"), "4.2 m 1900 hectares");
    }
}
