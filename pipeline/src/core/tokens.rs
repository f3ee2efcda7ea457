//! Token counting with OpenAI's cl100k_base encoding, the budget unit of chunking and context.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, OnceLock};

use tiktoken_rs::CoreBPE;

/// Counts cl100k_base tokens. Cheap to copy; the encoding tables are loaded once per process.
#[derive(Clone, Copy)]
pub struct TokenCounter {
    bpe: &'static CoreBPE,
}

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenCounter(cl100k_base)")
    }
}

impl Default for TokenCounter {
    fn default() -> Self {
        Self::cl100k()
    }
}

impl TokenCounter {
    /// The cl100k_base encoding (GPT-4, text-embedding-3; the paper's token budgets).
    pub fn cl100k() -> Self {
        TokenCounter { bpe: tiktoken_rs::cl100k_base_singleton() }
    }

    /// Number of tokens of `text` (special-token strings are counted as ordinary text).
    pub fn count(&self, text: &str) -> usize {
        self.bpe.encode_ordinary(text).len()
    }

    /// [`TokenCounter::count`], remembered: the counts of texts counted before (by their length
    /// and a 64-bit hash; two different texts of one length share a hash with a chance of about
    /// 2⁻²⁹ when the memo is full) come from a process-wide memo of at most [`MEMO_ENTRIES`]
    /// texts, emptied when full. For texts counted again and again: a query's evidence lines.
    pub fn count_memo(&self, text: &str) -> usize {
        let mut hasher = DefaultHasher::new();
        text.hash(&mut hasher);
        let key = (text.len(), hasher.finish());
        let memo = MEMO.get_or_init(Mutex::default);
        if let Some(&n) = memo.lock().ok().as_ref().and_then(|m| m.get(&key)) {
            return n as usize;
        }
        let n = self.count(text);
        if let Ok(mut memo) = memo.lock() {
            if memo.len() >= MEMO_ENTRIES {
                memo.clear();
            }
            memo.insert(key, u32::try_from(n).unwrap_or(u32::MAX));
        }
        n
    }

    /// Byte length of each token of `text`, in order; they add up to `text.len()`.
    pub fn token_byte_lengths(&self, text: &str) -> Vec<usize> {
        self.bpe.encode_ordinary(text).into_iter().map(|t| self.bpe.decode_bytes(&[t]).map_or(0, |b| b.len())).collect()
    }
}

/// Most texts [`TokenCounter::count_memo`] remembers (a key and a count, 24 bytes, and the
/// table's spare room: 7 to 13 MB when full).
pub const MEMO_ENTRIES: usize = 1 << 18;

/// Token counts by (byte length, hash) of the text.
static MEMO: OnceLock<Mutex<HashMap<(usize, u64), u32>>> = OnceLock::new();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_match_known_cl100k_values() {
        let t = TokenCounter::cl100k();
        assert_eq!(t.count(""), 0);
        assert_eq!(t.count("hello world"), 2);
        assert_eq!(t.count("<|endoftext|>"), 7);
    }

    #[test]
    fn remembered_counts_are_the_counts() {
        let t = TokenCounter::cl100k();
        for text in ["", "hello world", "hello world", "Zürich — 東京 🚀 tokens", "hello worle"] {
            assert_eq!(t.count_memo(text), t.count(text), "{text:?}");
            assert_eq!(t.count_memo(text), t.count(text), "{text:?} again");
        }
    }

    #[test]
    fn token_lengths_cover_the_text() {
        let t = TokenCounter::cl100k();
        let text = "Zürich — 東京 🚀 tokens";
        let lens = t.token_byte_lengths(text);
        assert_eq!(lens.len(), t.count(text));
        assert_eq!(lens.iter().sum::<usize>(), text.len());
    }
}
