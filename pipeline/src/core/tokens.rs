//! Token counting with OpenAI's cl100k_base encoding, the budget unit of chunking and context.

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

    /// Byte length of each token of `text`, in order; they add up to `text.len()`.
    pub fn token_byte_lengths(&self, text: &str) -> Vec<usize> {
        self.bpe.encode_ordinary(text).into_iter().map(|t| self.bpe.decode_bytes(&[t]).map_or(0, |b| b.len())).collect()
    }
}

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
    fn token_lengths_cover_the_text() {
        let t = TokenCounter::cl100k();
        let text = "Zürich — 東京 🚀 tokens";
        let lens = t.token_byte_lengths(text);
        assert_eq!(lens.len(), t.count(text));
        assert_eq!(lens.iter().sum::<usize>(), text.len());
    }
}
