//! Provenance: where an item's verbatim reference span is in its document. Exact match first
//! (from a hint position, then anywhere), then a match that ignores case and differences in
//! whitespace. A span that cannot be found has no offsets; offsets are never guessed.

use std::ops::Range;

/// A document prepared for repeated lookups.
#[derive(Debug)]
pub struct Locator<'a> {
    text: &'a str,
    /// Lowercased text with whitespace runs collapsed to one space.
    folded: String,
    /// Byte offset in `text` of each byte of `folded` (plus one past the end).
    origin: Vec<usize>,
}

/// How a span was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// The text occurs verbatim.
    Exact,
    /// It occurs up to case and whitespace.
    Normalised,
}

impl<'a> Locator<'a> {
    /// Prepares `text`.
    pub fn new(text: &'a str) -> Self {
        let (folded, origin) = fold(text);
        Locator { text, folded, origin }
    }

    /// Byte range of `needle` in the document, preferring a match at or after `hint` (a byte
    /// offset, e.g. the start of the chunk the item came from).
    pub fn find(&self, needle: &str, hint: usize) -> Option<(Range<usize>, Match)> {
        let needle_trimmed = needle.trim();
        if needle_trimmed.is_empty() {
            return None;
        }
        let hint = floor_char_boundary(self.text, hint.min(self.text.len()));
        if let Some(pos) = self.text[hint..].find(needle_trimmed) {
            return Some((hint + pos..hint + pos + needle_trimmed.len(), Match::Exact));
        }
        if let Some(pos) = self.text.find(needle_trimmed) {
            return Some((pos..pos + needle_trimmed.len(), Match::Exact));
        }
        let (folded_needle, _) = fold(needle_trimmed);
        let folded_needle = folded_needle.trim();
        if folded_needle.is_empty() {
            return None;
        }
        let folded_hint = self.origin.partition_point(|&o| o < hint);
        let folded_hint = floor_char_boundary(&self.folded, folded_hint.min(self.folded.len()));
        let pos = self.folded[folded_hint..]
            .find(folded_needle)
            .map(|p| p + folded_hint)
            .or_else(|| self.folded.find(folded_needle))?;
        let start = self.origin[pos];
        // End: just past the last original character that produced the match.
        let last = pos + folded_needle.len() - 1;
        let last_start = self.origin[last];
        let end = last_start + self.text[last_start..].chars().next().map_or(0, char::len_utf8);
        Some((start..end, Match::Normalised))
    }
}

/// Lowercases and collapses whitespace runs, remembering where each output byte came from.
fn fold(text: &str) -> (String, Vec<usize>) {
    let mut folded = String::with_capacity(text.len());
    let mut origin = Vec::with_capacity(text.len() + 1);
    let mut in_space = false;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            if !in_space {
                folded.push(' ');
                origin.push(i);
            }
            in_space = true;
            continue;
        }
        in_space = false;
        let before = folded.len();
        // Keep lowercasing length-preserving per character so that the origin map stays simple.
        let lower: String = c.to_lowercase().collect();
        if lower.chars().count() == 1 {
            folded.push_str(&lower);
        } else {
            folded.push(c);
        }
        origin.extend(std::iter::repeat_n(i, folded.len() - before));
    }
    origin.push(text.len());
    (folded, origin)
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_then_normalised_then_nothing() {
        let doc = "Intro.\n\nThe KVWA  was founded\nin 2009. The KVWA was founded in 2009.";
        let loc = Locator::new(doc);
        let (r, m) = loc.find("The KVWA was founded in 2009.", 0).unwrap();
        assert_eq!((m, &doc[r.clone()]), (Match::Exact, "The KVWA was founded in 2009."));
        assert_eq!(r.start, 39);
        let (r, m) = loc.find("the kvwa was founded in 2009", 0).unwrap();
        assert_eq!((m, &doc[r]), (Match::Normalised, "The KVWA  was founded\nin 2009"));
        let (r, _) = loc.find("the kvwa was founded in 2009", 30).unwrap();
        assert_eq!(&doc[r], "The KVWA was founded in 2009");
        assert_eq!(loc.find("founded in 2010", 0), None);
        assert_eq!(loc.find("   ", 0), None);
    }

    #[test]
    fn unicode_text_keeps_char_boundaries() {
        let doc = "Zürich — İstanbul\tand ÅRHUS were visited.";
        let loc = Locator::new(doc);
        // Turkish dotted I lowercases to two characters: it is kept as is, the rest still folds.
        let (r, m) = loc.find("zürich — İstanbul and århus", 0).unwrap();
        assert_eq!((m, &doc[r]), (Match::Normalised, "Zürich — İstanbul\tand ÅRHUS"));
    }
}
