//! Words that carry no content. Two uses, two lists: the evaluation's recall measures count the
//! content words of gold answers after SQuAD normalisation (which already drops a/an/the), and
//! extractive answers match a question's content words to evidence sentences, where question
//! words like `describe` or `role` say what is asked, not what it is about. The second list is
//! the first plus those.

use std::collections::HashSet;
use std::sync::LazyLock;

/// Words without content for the recall measures (applied to SQuAD-normalised text).
pub const STOP_WORDS: &[&str] = &[
    "of", "in", "on", "at", "by", "for", "from", "with", "to", "and", "or", "but", "is", "are", "was", "were", "be",
    "been", "being", "it", "its", "this", "that", "these", "those", "as", "into", "which", "who", "whom", "whose",
    "what", "when", "where", "why", "how", "has", "have", "had", "do", "does", "did", "he", "she", "they", "them",
    "his", "her", "their", "there", "than", "then", "so", "such", "also", "not", "no", "can", "could", "would",
    "should", "will", "may", "might", "must", "about", "s",
];

/// Further words without content when a question is matched to sentences: articles (the text
/// is not SQuAD-normalised there) and the words that ask rather than name.
pub const QUESTION_STOP_WORDS: &[&str] = &[
    "a",
    "an",
    "the",
    "shall",
    "any",
    "all",
    "some",
    "more",
    "most",
    "other",
    "if",
    "between",
    "both",
    "each",
    "same",
    "describe",
    "explain",
    "discuss",
    "according",
    "role",
    "first",
];

/// Whether `word` (lowercase) carries no content for the recall measures.
pub fn is_stop_word(word: &str) -> bool {
    STOP_WORD_SET.contains(word)
}

/// Whether `word` (lowercase) carries no content when a question is matched to sentences.
pub fn is_question_stop_word(word: &str) -> bool {
    QUESTION_STOP_WORD_SET.contains(word)
}

// Looked up for every word of every hyperedge when the kb's lexical index is built (a million
// texts in a large kb): a hash lookup, not a scan of the lists.
static STOP_WORD_SET: LazyLock<HashSet<&str>> = LazyLock::new(|| STOP_WORDS.iter().copied().collect());
static QUESTION_STOP_WORD_SET: LazyLock<HashSet<&str>> =
    LazyLock::new(|| STOP_WORDS.iter().chain(QUESTION_STOP_WORDS).copied().collect());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_question_list_extends_the_recall_list() {
        assert!(STOP_WORDS.iter().all(|w| is_question_stop_word(w)));
        assert!(is_question_stop_word("describe") && !is_stop_word("describe"));
        assert!(!is_question_stop_word("authority"));
    }
}
