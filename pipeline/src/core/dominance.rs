//! Dominant embeddings that hold SG-RAG's dominance property by construction (seed 002): a
//! node's 1-hop star becomes a non-negative count sketch — each neighbour adds 1 at [`HASHES`]
//! positions chosen by hashing its normalised name, and the last position counts the
//! neighbours — so for a star s contained in a star g (the same centre, a subset of its
//! neighbours) o(s) ⪯ o(g) holds in every dimension, always: the structural filter never loses a
//! true match (no false negatives); collisions only weaken its pruning.
//!
//! A neighbour whose name is not known (a query graph's unknown node) adds to the count alone,
//! so "a node with three neighbours, one of them X" is a sketch too. The path index stage and
//! the query stage both build their sketches here, which is what makes them comparable.

use sha2::{Digest, Sha256};

/// Positions each neighbour adds 1 to (fewer when the sketch has fewer).
pub const HASHES: usize = 2;

/// How a star becomes a sketch: `dims` hashed positions and the count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SketchShape {
    /// Hashed positions (the sketch has one more: the neighbour count).
    pub dims: usize,
}

impl SketchShape {
    /// Length of a sketch: the hashed positions and the count.
    pub fn len(self) -> usize {
        self.dims + 1
    }

    /// Whether the shape has no hashed positions (never, for a checked configuration).
    pub fn is_empty(self) -> bool {
        self.dims == 0
    }

    /// The sketch of a star whose neighbours are `known` (normalised names) and `unknown` more
    /// neighbours of any name.
    pub fn sketch<'a>(self, known: impl IntoIterator<Item = &'a str>, unknown: usize) -> Vec<f32> {
        let mut out = vec![0.0; self.len()];
        let mut count = unknown;
        for name in known {
            count += 1;
            for position in self.positions(name) {
                out[position] += 1.0;
            }
        }
        out[self.dims] = count as f32;
        out
    }

    /// The hashed positions of one neighbour: [`HASHES`] distinct positions when `dims` allows
    /// (taken from one SHA-256 of the name, so the same on every machine).
    fn positions(self, name: &str) -> Vec<usize> {
        let digest = Sha256::digest(name.as_bytes());
        let mut positions = Vec::with_capacity(HASHES);
        let mut i = 0;
        while positions.len() < HASHES.min(self.dims) {
            let bytes = [digest[(2 * i) % 32], digest[(2 * i + 1) % 32], digest[(2 * i + 7) % 32], i as u8];
            let p = u32::from_le_bytes(bytes) as usize % self.dims;
            if !positions.contains(&p) {
                positions.push(p);
            }
            i += 1;
        }
        positions
    }
}

/// Whether `small` ⪯ `large` in every dimension (the dominance relation).
pub fn dominated(small: &[f32], large: &[f32]) -> bool {
    small.len() == large.len() && small.iter().zip(large).all(|(s, l)| s <= l)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const SHAPE: SketchShape = SketchShape { dims: 16 };

    proptest! {
        /// The property the structural filter rests on: a star's sub-star is dominated by it,
        /// also when some of the sub-star's neighbours are unknown.
        #[test]
        fn a_sub_star_is_always_dominated(names in proptest::collection::btree_set("[a-z]{1,6}", 1..12),
                                          keep in proptest::collection::vec(any::<u8>(), 12)) {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let star = SHAPE.sketch(names.iter().copied(), 0);
            let kept: Vec<&str> = names.iter().zip(&keep).filter(|(_, k)| **k % 3 == 0).map(|(n, _)| *n).collect();
            let unknown = names.iter().zip(&keep).filter(|(_, k)| **k % 3 == 1).count();
            prop_assert!(dominated(&SHAPE.sketch(kept.iter().copied(), unknown), &star));
        }
    }

    #[test]
    fn a_missing_neighbour_or_a_larger_star_is_not_dominated() {
        let star = SHAPE.sketch(["paris", "london"], 0);
        assert!(!dominated(&SHAPE.sketch(["paris", "london"], 1), &star), "one neighbour too many");
        assert_eq!(star[SHAPE.dims], 2.0);
        assert_eq!(star.iter().take(SHAPE.dims).sum::<f32>(), 4.0, "two positions per neighbour");
        // Some name of a large alphabet collides with neither: it is told apart.
        let other = ["rome", "berlin", "oslo", "lima", "kyiv"]
            .into_iter()
            .find(|n| !dominated(&SHAPE.sketch([*n], 0), &star))
            .expect("a name that is not in the star");
        assert!(!dominated(&SHAPE.sketch([other], 0), &star));
        assert_eq!(SHAPE.sketch(["paris"], 0), SHAPE.sketch(["paris"], 0), "stable");
    }
}
