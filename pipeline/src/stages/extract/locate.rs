//! Provenance: where an item's verbatim reference span is in its document. The span is looked
//! for in the target chunk first, then in the window the extractor saw, then in the whole
//! document; in each, an exact match first, then one that ignores case and differences in
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

    /// Byte range of `needle` in the document: the first match inside the first of `scopes`
    /// (byte ranges of the document, narrowest first, e.g. the target chunk, its window, the
    /// whole text) that has one, exact before normalised within each scope.
    pub fn find(&self, needle: &str, scopes: &[Range<usize>]) -> Option<(Range<usize>, Match)> {
        let needle = needle.trim();
        if needle.is_empty() {
            return None;
        }
        let (folded_needle, _) = fold(needle);
        let folded_needle = folded_needle.trim();
        for scope in scopes {
            let start = floor_char_boundary(self.text, scope.start.min(self.text.len()));
            let end = floor_char_boundary(self.text, scope.end.min(self.text.len()));
            if start >= end {
                continue;
            }
            if let Some(pos) = self.text[start..end].find(needle) {
                return Some((start + pos..start + pos + needle.len(), Match::Exact));
            }
            if folded_needle.is_empty() {
                continue;
            }
            // The folded bytes that came from this scope.
            let from = self.origin.partition_point(|&o| o < start);
            let to = self.origin.partition_point(|&o| o < end);
            let (from, to) = (ceil_char_boundary(&self.folded, from), floor_char_boundary(&self.folded, to));
            if from >= to {
                continue;
            }
            if let Some(pos) = self.folded[from..to].find(folded_needle).map(|p| p + from) {
                let first = self.origin[pos];
                // End: just past the last original character that produced the match.
                let last_start = self.origin[pos + folded_needle.len() - 1];
                let last = last_start + self.text[last_start..].chars().next().map_or(0, char::len_utf8);
                return Some((first..last, Match::Normalised));
            }
        }
        None
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

fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole document as the one scope.
    fn whole(doc: &str) -> Vec<Range<usize>> {
        std::iter::once(0..doc.len()).collect()
    }

    #[test]
    fn exact_then_normalised_then_nothing() {
        let doc = "Intro.\n\nThe KVWA  was founded\nin 2009. The KVWA was founded in 2009.";
        let all = whole(doc);
        let loc = Locator::new(doc);
        let (r, m) = loc.find("The KVWA was founded in 2009.", &all).unwrap();
        assert_eq!((m, &doc[r.clone()]), (Match::Exact, "The KVWA was founded in 2009."));
        assert_eq!(r.start, 39);
        let (r, m) = loc.find("the kvwa was founded in 2009", &all).unwrap();
        assert_eq!((m, &doc[r]), (Match::Normalised, "The KVWA  was founded\nin 2009"));
        assert_eq!(loc.find("founded in 2010", &all), None);
        assert_eq!(loc.find("   ", &all), None);
    }

    #[test]
    fn the_narrowest_scope_with_a_match_wins() {
        // The same sentence in chunk 1 (verbatim) and chunk 2 (re-wrapped): a span extracted
        // from chunk 2 is found in chunk 2, even though only chunk 1 has it verbatim.
        let doc = "Ana met Bo in Lund.\n\nLater: Ana  met\nBo in Lund.";
        let chunk2 = 20..doc.len();
        let loc = Locator::new(doc);
        let (r, m) = loc.find("Ana met Bo in Lund.", &[chunk2.clone(), 0..doc.len()]).unwrap();
        assert_eq!((m, &doc[r.clone()]), (Match::Normalised, "Ana  met\nBo in Lund."));
        assert!(r.start >= chunk2.start);
        // Not in the chunk at all: the document is searched last.
        let (r, m) = loc.find("Ana met Bo in Lund.", &[30..doc.len(), 0..doc.len()]).unwrap();
        assert_eq!((m, r.start), (Match::Exact, 0));
        // A span that is nowhere: no offsets.
        assert_eq!(loc.find("Bo met Ana", &whole(doc)), None);
    }

    #[test]
    fn unicode_text_keeps_char_boundaries() {
        let doc = "Zürich — İstanbul\tand ÅRHUS were visited.";
        let loc = Locator::new(doc);
        // Turkish dotted I lowercases to two characters: it is kept as is, the rest still folds.
        let (r, m) = loc.find("zürich — İstanbul and århus", &whole(doc)).unwrap();
        assert_eq!((m, &doc[r]), (Match::Normalised, "Zürich — İstanbul\tand ÅRHUS"));
    }
}
