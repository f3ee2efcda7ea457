//! Feature hashing as an [`Embedder`]: fast and deterministic, for tests only.

use super::{Embedder, normalise};
use crate::core::Result;
use crate::core::ids::sha256_hex;
use crate::core::models::HASHING_PREFIX;

/// Signed feature hashing of lowercase word unigrams and bigrams into `dim` buckets,
/// L2-normalised. Fast and deterministic, for tests only: it knows nothing of meaning.
#[derive(Debug, Clone)]
pub struct HashingEmbedder {
    dim: usize,
    name: String,
}

impl HashingEmbedder {
    /// A hashing embedder of dimension `dim`.
    pub fn new(dim: usize) -> Self {
        HashingEmbedder { dim: dim.max(1), name: format!("{HASHING_PREFIX}{}", dim.max(1)) }
    }
}

impl Embedder for HashingEmbedder {
    fn model(&self) -> &str {
        &self.name
    }

    fn engine(&self) -> &'static str {
        "hashing"
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        Ok(texts
            .iter()
            .map(|t| {
                let words: Vec<String> =
                    t.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect();
                let mut v = vec![0f32; self.dim];
                let features = words.iter().cloned().chain(words.windows(2).map(|w| format!("{} {}", w[0], w[1])));
                for f in features {
                    let h = sha256_hex(f.as_bytes());
                    let bucket = usize::from_str_radix(&h[..8], 16).unwrap_or(0) % self.dim;
                    let sign = if h.as_bytes()[8].is_multiple_of(2) { 1.0 } else { -1.0 };
                    v[bucket] += sign;
                }
                normalise(&mut v);
                v
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashing_vectors_are_unit_length_and_similar_for_shared_words() {
        let e = HashingEmbedder::new(64);
        let v = e.embed(&["the river fell", "the river rose", "orchard apples", ""]).unwrap();
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        assert!((dot(&v[0], &v[0]) - 1.0).abs() < 1e-5);
        assert!(dot(&v[0], &v[1]) > dot(&v[0], &v[2]));
        assert!(v[3].iter().all(|x| *x == 0.0));
        assert_eq!(e.model(), "hashing-64");
    }
}
