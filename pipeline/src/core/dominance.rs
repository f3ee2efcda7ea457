//! Dominant embeddings of SG-RAG's 1-hop stars (seed 002), two ways ([`Encoder`]).
//!
//! **Sketches** hold the dominance property by construction: a node's 1-hop star becomes a
//! non-negative count sketch — each neighbour adds 1 at [`HASHES`]
//! positions chosen by hashing its normalised name, and the last position counts the
//! neighbours — so for a star s contained in a star g (the same centre, a subset of its
//! neighbours) o(s) ⪯ o(g) holds in every dimension, always: the structural filter never loses a
//! true match (no false negatives); collisions only weaken its pruning.
//!
//! A neighbour whose name is not known (a query graph's unknown node) adds to the count alone,
//! so "a node with three neighbours, one of them X" is a sketch too. The path index stage and
//! the query stage both build their sketches here, which is what makes them comparable.

use std::collections::HashMap;

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
    pub fn positions(self, name: &str) -> Vec<usize> {
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

/// Slope of the attention's leaky ReLU (the GAT paper's).
pub const ATTENTION_SLOPE: f32 = 0.2;

/// A graph-attention encoder of stars, trained with the dominance loss: each node's input is
/// the one-neighbour sketch of its name (`features`; an unknown node: the count alone), `w`
/// maps it to `hidden` features z, and the star's encoding is
/// `relu(w_out · Σ_u sigmoid(leaky(a_centre · z_centre + a_neighbour · z_u)) · relu(z_u) + b_out)`.
/// The attention is a gate per neighbour, not a softmax over the star (ours: a softmax makes
/// the weights of a star sum to one, so adding a neighbour lowers every other's — the opposite of
/// what dominance asks).
#[derive(Debug, Clone, PartialEq)]
pub struct GatEncoder {
    /// The input features of a node: the sketch of its name alone.
    pub features: SketchShape,
    /// Width of the hidden features.
    pub hidden: usize,
    /// Width of the encoding.
    pub dims: usize,
    /// `features.len() × hidden`, row-major.
    pub w: Vec<f32>,
    /// Attention weights of the centre's hidden features (`hidden`).
    pub a_centre: Vec<f32>,
    /// Attention weights of a neighbour's hidden features (`hidden`).
    pub a_neighbour: Vec<f32>,
    /// `hidden × dims`, row-major.
    pub w_out: Vec<f32>,
    /// `dims`.
    pub b_out: Vec<f32>,
}

impl GatEncoder {
    /// The parameters by name, with their shapes (rows, columns), as training and the index
    /// tables name them.
    pub fn params(&self) -> [(&'static str, usize, usize, &[f32]); 5] {
        [
            ("w", self.features.len(), self.hidden, &self.w),
            ("a_centre", self.hidden, 1, &self.a_centre),
            ("a_neighbour", self.hidden, 1, &self.a_neighbour),
            ("w_out", self.hidden, self.dims, &self.w_out),
            ("b_out", 1, self.dims, &self.b_out),
        ]
    }

    /// An encoder from its parameters by name, checking every shape.
    pub fn from_params(params: &HashMap<String, (usize, usize, Vec<f32>)>) -> Result<GatEncoder, String> {
        let get = |name: &str| -> Result<&(usize, usize, Vec<f32>), String> {
            let p = params.get(name).ok_or_else(|| format!("parameter {name} is missing"))?;
            if p.0 * p.1 != p.2.len() {
                return Err(format!("parameter {name}: {} values for {}×{}", p.2.len(), p.0, p.1));
            }
            Ok(p)
        };
        let (rows, hidden, w) = get("w")?;
        let (_, dims, b_out) = get("b_out")?;
        if *rows < 3 {
            return Err(format!("parameter w has {rows} rows (at least 3)"));
        }
        let encoder = GatEncoder {
            features: SketchShape { dims: rows - 1 },
            hidden: *hidden,
            dims: *dims,
            w: w.clone(),
            a_centre: get("a_centre")?.2.clone(),
            a_neighbour: get("a_neighbour")?.2.clone(),
            w_out: get("w_out")?.2.clone(),
            b_out: b_out.clone(),
        };
        for (name, rows, cols, values) in encoder.params() {
            let found = &params[name];
            if (found.0, found.1) != (rows, cols) || values.len() != rows * cols {
                return Err(format!("parameter {name} is {}×{}, expected {rows}×{cols}", found.0, found.1));
            }
        }
        Ok(encoder)
    }

    /// Hidden features of a node: `w` summed over its name's sketch positions (an unknown node:
    /// the count row alone).
    fn hidden_of(&self, name: Option<&str>) -> Vec<f32> {
        let h = self.hidden;
        let count = self.features.dims;
        let mut z = self.w[count * h..(count + 1) * h].to_vec();
        if let Some(name) = name {
            for p in self.features.positions(name) {
                for (z, w) in z.iter_mut().zip(&self.w[p * h..(p + 1) * h]) {
                    *z += w;
                }
            }
        }
        z
    }

    /// The encoding of a star: its centre (`None`: unknown), its neighbours by name, and
    /// `unknown` more neighbours of any name.
    pub fn encode<'a>(
        &self,
        centre: Option<&str>,
        known: impl IntoIterator<Item = &'a str>,
        unknown: usize,
    ) -> Vec<f32> {
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        let centre_score = dot(&self.a_centre, &self.hidden_of(centre));
        let mut pooled = vec![0.0f32; self.hidden];
        let unknown_hidden = self.hidden_of(None);
        let mut add = |z: &[f32]| {
            let e = centre_score + dot(&self.a_neighbour, z);
            let e = if e >= 0.0 { e } else { ATTENTION_SLOPE * e };
            let gate = 1.0 / (1.0 + (-e).exp());
            for (p, z) in pooled.iter_mut().zip(z) {
                *p += gate * z.max(0.0);
            }
        };
        for name in known {
            add(&self.hidden_of(Some(name)));
        }
        for _ in 0..unknown {
            add(&unknown_hidden);
        }
        let mut out = self.b_out.clone();
        for (i, p) in pooled.iter().enumerate() {
            if *p != 0.0 {
                for (o, w) in out.iter_mut().zip(&self.w_out[i * self.dims..(i + 1) * self.dims]) {
                    *o += p * w;
                }
            }
        }
        out.iter_mut().for_each(|o| *o = o.max(0.0));
        out
    }
}

/// How a star becomes its dominant embedding.
#[derive(Debug, Clone, PartialEq)]
pub enum Encoder {
    /// A count sketch: dominance by construction.
    Sketch(SketchShape),
    /// A trained graph-attention layer: dominance as well as training made it.
    Gat(GatEncoder),
}

impl Encoder {
    /// The name in the configuration and the index tables.
    pub fn kind(&self) -> &'static str {
        match self {
            Encoder::Sketch(_) => "sketch",
            Encoder::Gat(_) => "gat",
        }
    }

    /// Length of an embedding.
    pub fn len(&self) -> usize {
        match self {
            Encoder::Sketch(shape) => shape.len(),
            Encoder::Gat(gat) => gat.dims,
        }
    }

    /// Whether embeddings are empty (never, for a checked configuration).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The dominant embedding of a star: its centre (`None`: unknown), its neighbours by
    /// normalised name, and `unknown` more neighbours of any name.
    pub fn encode<'a>(
        &self,
        centre: Option<&str>,
        known: impl IntoIterator<Item = &'a str>,
        unknown: usize,
    ) -> Vec<f32> {
        match self {
            Encoder::Sketch(shape) => shape.sketch(known, unknown),
            Encoder::Gat(gat) => gat.encode(centre, known, unknown),
        }
    }

    /// Two monotone reductions of an embedding (if a ⪯ b then each of a's is ≤ b's), the
    /// R*-tree's coordinates of structure: a sketch's hashed sum and its count, a GAT
    /// encoding's two half sums.
    pub fn reduce(&self, o: &[f32]) -> [f32; 2] {
        let split = match self {
            Encoder::Sketch(shape) => shape.dims,
            Encoder::Gat(_) => o.len() / 2,
        };
        [o[..split].iter().sum(), o[split..].iter().sum()]
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
