//! Plain-text helpers shared by chunking, the rules backends and answers: paragraphs, sentence
//! boundaries that know common abbreviations, and code-point offsets.

use std::ops::Range;

use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick};

/// `s` in Unicode Normalization Form C (composed: `u` + U+0308 becomes `ü`). Every text stored in
/// an index and every question is in NFC, so that names, keys and spans compare equal however
/// the input encoded its accents; a string already in NFC (most are) is returned as it is.
pub fn nfc(s: String) -> String {
    if is_nfc_quick(s.chars()) == IsNormalized::Yes { s } else { s.nfc().collect() }
}

/// Words after which a period does not end a sentence.
const ABBREVIATIONS: &[&str] = &[
    "dr", "mr", "mrs", "ms", "prof", "st", "sr", "jr", "mt", "ft", "no", "vs", "etc", "e.g", "i.e", "cf", "fig", "al",
    "inc", "ltd", "co", "corp", "dept", "univ", "approx", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep",
    "sept", "oct", "nov", "dec", "gen", "col", "capt", "lt", "sgt", "rev", "hon",
];

/// Whether a text says nothing: no letter or digit (empty, or a placeholder such as "..." or
/// "-" that a model copied from a prompt).
pub fn is_blank(text: &str) -> bool {
    !text.chars().any(char::is_alphanumeric)
}

/// Byte offsets just after each sentence end in `s`: a `.`, `!`, `?` or `…` (with any closing
/// quotes or brackets) followed by whitespace, except after abbreviations, initials and inside
/// numbers.
pub fn sentence_ends(s: &str) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if !matches!(c, '.' | '!' | '?' | '…' | '。' | '！' | '？') {
            continue;
        }
        let mut end = i + c.len_utf8();
        while let Some(&(j, q)) = chars.peek() {
            if matches!(q, '"' | '\'' | '”' | '’' | ')' | ']' | '»') || q == c {
                end = j + q.len_utf8();
                chars.next();
            } else {
                break;
            }
        }
        let followed_by_space = chars.peek().is_some_and(|&(_, n)| n.is_whitespace());
        if followed_by_space && !(c == '.' && is_abbreviation_before(&s[..i])) {
            ends.push(end);
        }
    }
    ends
}

/// Whether the word just before a period is an abbreviation or initials: one capital ("J."), or
/// letters joined by periods ("J.W.", "U.S.", "Y.W.C.A.", "a.k.a.", "p.m."), which in running
/// text almost always go on ("J.W. Hart", "the U.S. Army") — the rare sentence that ends on them
/// runs on into the next one instead of a name being cut in two.
fn is_abbreviation_before(before: &str) -> bool {
    let word = before.rsplit(|c: char| c.is_whitespace() || c == '(').next().unwrap_or("");
    let lower = word.to_lowercase();
    let letter = |part: &str| {
        let mut chars = part.chars();
        chars.next().is_some_and(char::is_alphabetic) && chars.next().is_none()
    };
    let initial = letter(word) && word.chars().all(char::is_uppercase);
    let joined = word.contains('.') && word.split('.').all(letter);
    initial || joined || ABBREVIATIONS.contains(&lower.as_str())
}

/// Sentence spans of `range` in `text`, trimmed, non-empty.
pub fn sentences(text: &str, range: Range<usize>) -> Vec<Range<usize>> {
    let s = &text[range.clone()];
    let mut cuts = vec![0];
    cuts.extend(sentence_ends(s));
    cuts.push(s.len());
    cuts.windows(2).filter_map(|w| trim(s, w[0]..w[1])).map(|r| range.start + r.start..range.start + r.end).collect()
}

/// `range` of `s` without surrounding whitespace, or None if nothing is left.
pub fn trim(s: &str, range: Range<usize>) -> Option<Range<usize>> {
    let piece = &s[range.clone()];
    let start = range.start + (piece.len() - piece.trim_start().len());
    let end = range.start + piece.trim_end().len();
    (start < end).then_some(start..end)
}

/// Byte ranges of the paragraphs of `text`: maximal runs of non-blank lines, trimmed of
/// surrounding whitespace. A blank line is one holding only whitespace.
pub fn paragraphs(text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut current: Option<Range<usize>> = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let line_start = offset;
        offset += line.len();
        let trimmed_start = line.len() - line.trim_start().len();
        if trimmed_start == line.len() {
            out.extend(current.take());
            continue;
        }
        let start = line_start + trimmed_start;
        let end = line_start + line.trim_end().len();
        match &mut current {
            Some(range) => range.end = end,
            None => current = Some(start..end),
        }
    }
    out.extend(current);
    out
}

/// Converts increasing byte offsets of one string into code-point offsets in a single pass.
#[derive(Debug)]
pub struct CharOffsets<'a> {
    text: &'a str,
    byte: usize,
    chars: usize,
}

impl<'a> CharOffsets<'a> {
    /// A converter for `text`, starting at offset 0.
    pub fn new(text: &'a str) -> Self {
        CharOffsets { text, byte: 0, chars: 0 }
    }

    /// Code-point offset of byte offset `byte` (a char boundary). Cheap for increasing offsets;
    /// a smaller offset restarts from the beginning.
    pub fn at(&mut self, byte: usize) -> usize {
        if byte < self.byte {
            self.byte = 0;
            self.chars = 0;
        }
        self.chars += self.text[self.byte..byte].chars().count();
        self.byte = byte;
        self.chars
    }
}

/// Converts increasing code-point offsets of one string into byte offsets in a single pass.
#[derive(Debug)]
pub struct ByteOffsets<'a> {
    text: &'a str,
    byte: usize,
    chars: usize,
}

impl<'a> ByteOffsets<'a> {
    /// A converter for `text`, starting at offset 0.
    pub fn new(text: &'a str) -> Self {
        ByteOffsets { text, byte: 0, chars: 0 }
    }

    /// Byte offset of code point `chars` (`text.len()` for the end), or None past the end.
    /// Cheap for increasing offsets; a smaller offset restarts from the beginning.
    pub fn at(&mut self, chars: usize) -> Option<usize> {
        if chars < self.chars {
            self.byte = 0;
            self.chars = 0;
        }
        let mut it = self.text[self.byte..].char_indices();
        while self.chars < chars {
            let (_, c) = it.next()?;
            self.byte += c.len_utf8();
            self.chars += 1;
        }
        Some(self.byte)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &str) -> Vec<&str> {
        sentences(s, 0..s.len()).into_iter().map(|r| &s[r]).collect()
    }

    #[test]
    fn sentences_respect_abbreviations_initials_and_numbers() {
        assert_eq!(
            split(
                "Dr. Hanne Wirtanen of NIRE spoke. Flow fell to 4.1 m³/s in 2003! Was J. R. Smith there? Yes (he was.) Done"
            ),
            [
                "Dr. Hanne Wirtanen of NIRE spoke.",
                "Flow fell to 4.1 m³/s in 2003!",
                "Was J. R. Smith there?",
                "Yes (he was.)",
                "Done"
            ]
        );
        assert_eq!(split("e.g. this stays. Then \"quoted.\" Next"), ["e.g. this stays.", "Then \"quoted.\"", "Next"]);
        assert_eq!(
            split("O.K. Connery is a film by J.W. Hart of the U.S. Navy and the Y.W.C.A. It ran. A.Bc. Ok."),
            ["O.K. Connery is a film by J.W. Hart of the U.S. Navy and the Y.W.C.A. It ran.", "A.Bc.", "Ok."]
        );
        assert_eq!(
            split("The Bunch (a.k.a. Ghosts) is a 1980 film. It opens at 8 p.m. daily. A plan a. Then"),
            ["The Bunch (a.k.a. Ghosts) is a 1980 film.", "It opens at 8 p.m. daily.", "A plan a.", "Then"]
        );
    }

    #[test]
    fn paragraphs_are_trimmed_blocks_between_blank_lines() {
        let text = "  # Title\n\nFirst line\nsecond line  \n \t \n\n- item\n- item two\n\n";
        let paras: Vec<&str> = paragraphs(text).into_iter().map(|r| &text[r]).collect();
        assert_eq!(paras, ["# Title", "First line\nsecond line", "- item\n- item two"]);
        assert!(paragraphs(" \n\t\n").is_empty());
    }

    #[test]
    fn char_offsets_count_code_points() {
        let text = "aé東🚀b";
        let mut offsets = CharOffsets::new(text);
        assert_eq!(offsets.at(1), 1);
        assert_eq!(offsets.at(3), 2);
        assert_eq!(offsets.at(text.len()), 5);
        assert_eq!(offsets.at(0), 0);
        let mut bytes = ByteOffsets::new(text);
        assert_eq!(bytes.at(2), Some(3));
        assert_eq!(bytes.at(5), Some(text.len()));
        assert_eq!(bytes.at(1), Some(1));
        assert_eq!(bytes.at(6), None);
    }
}
