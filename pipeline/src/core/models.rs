//! Embedding model identities: the names vectors are stored under, their widths, the similarity
//! thresholds calibrated for all-MiniLM-L6-v2 (used for kbs merged before thresholds were
//! derived), and the derivation of thresholds from a kb's own vectors that the merge runs for any
//! model (ARCHITECTURE.md, "Thresholds derived from the index").

use serde::Serialize;

/// The default, in-process model.
pub const MINILM: &str = "all-MiniLM-L6-v2";
/// Width of all-MiniLM-L6-v2 vectors.
pub const MINILM_DIM: usize = 384;
/// Prefix of the feature-hashing test embedder's names (`hashing-<dim>`).
pub const HASHING_PREFIX: &str = "hashing-";

/// Calibrated τ_EH for all-MiniLM-L6-v2: the 99th percentile of question–hyperedge cosines over
/// the ultradomain-mix dev questions (`examples/calibrate.rs`; ARCHITECTURE.md).
pub const MINILM_TAU_EH: f32 = 0.28;
/// Calibrated τ_E for all-MiniLM-L6-v2 (same procedure, question–edge cosines).
pub const MINILM_TAU_E: f32 = 0.28;
/// Calibrated τ_C for all-MiniLM-L6-v2 (same procedure, question–chunk cosines).
pub const MINILM_TAU_CHUNK: f32 = 0.30;

/// Similarity thresholds in effect for one embedding model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Thresholds {
    /// τ_EH.
    pub hyperedge: f32,
    /// τ_E.
    pub edge: f32,
    /// τ_C.
    pub chunk: f32,
}

/// The thresholds calibrated for `model`: all-MiniLM-L6-v2's own, none for the hashing test
/// embedder, and the paper's 0.9 (HyperGraphRAG's 0.5 for chunks) for any other model until it
/// is calibrated the same way.
pub fn calibrated_thresholds(model: &str) -> Thresholds {
    if model == MINILM {
        Thresholds { hyperedge: MINILM_TAU_EH, edge: MINILM_TAU_E, chunk: MINILM_TAU_CHUNK }
    } else if model.starts_with(HASHING_PREFIX) {
        Thresholds { hyperedge: f32::MIN, edge: f32::MIN, chunk: f32::MIN }
    } else {
        Thresholds { hyperedge: 0.9, edge: 0.9, chunk: 0.5 }
    }
}

/// The percentile of unit-to-unit cosines that a threshold derived from a kb is
/// ([`derive_threshold`]). Chosen so that, on the MiniLM dev sets, the derived thresholds keep
/// hybrid's recall within the noise of the hand-calibrated ones (BENCHMARKS.md, "Thresholds
/// derived from the index").
pub const DERIVED_PERCENTILE: f64 = 0.95;

/// Cosine above which two units are taken for copies of one text.
const DUPLICATE: f32 = 0.999;

/// Most units a derived threshold compares each sampled unit with, and most units sampled.
const PROBES: usize = 1000;
const TARGETS: usize = 2000;

/// A similarity threshold for units of one kind, derived from their own vectors with no question
/// needed: the [`DERIVED_PERCENTILE`] of the cosines between evenly spaced pairs of them (up to
/// 1,000 × 2,000 pairs; pairs of copies, cosine ≥ 0.999, left out). A unit above it is closer to
/// the question than most units are to each other, whatever the model's cosine scale. `vectors` holds `rows` unit vectors of width `dim`,
/// row after row. None when there are fewer than two units. Returns the threshold and the pairs
/// it was measured on.
pub fn derive_threshold(vectors: &[f32], dim: usize, rows: usize) -> Option<(f32, usize)> {
    let mut cosines = sampled_cosines(vectors, dim, rows);
    if cosines.is_empty() {
        return None;
    }
    let at = ((cosines.len() - 1) as f64 * DERIVED_PERCENTILE) as usize;
    let (_, tau, _) = cosines.select_nth_unstable_by(at, f32::total_cmp);
    Some((*tau, cosines.len()))
}

/// The cosines a threshold is derived from: evenly spaced pairs of the `rows` unit vectors of
/// width `dim` in `vectors` (up to 1,000 × 2,000), copies (cosine ≥ 0.999) left out; unordered.
pub fn sampled_cosines(vectors: &[f32], dim: usize, rows: usize) -> Vec<f32> {
    if rows < 2 || dim == 0 || vectors.len() < rows * dim {
        return Vec::new();
    }
    let row = |i: usize| &vectors[i * dim..(i + 1) * dim];
    let step = |k: usize| (rows / k.min(rows)).max(1);
    let mut cosines = Vec::new();
    for p in (0..rows).step_by(step(PROBES)) {
        for t in (0..rows).step_by(step(TARGETS)).map(|t| (t + p / 2 + 1) % rows) {
            let cosine = flexstruct_scan::dot(row(p), row(t));
            // Copies (units of the same text) say nothing about how alike different units are.
            if t != p && cosine < DUPLICATE {
                cosines.push(cosine);
            }
        }
    }
    cosines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_threshold_follows_the_scale_of_the_vectors() {
        // 200 unit vectors spread over 8 axes: pairs on the same axis have cosine 1, others 0.
        let dim = 8;
        let mut spread = Vec::new();
        for i in 0..200 {
            let mut v = vec![0.0f32; dim];
            v[i % dim] = 1.0;
            spread.extend(v);
        }
        // Units on the same axis are copies and left out; the others are orthogonal.
        let (tau, pairs) = derive_threshold(&spread, dim, 200).unwrap();
        assert!(pairs > 1000);
        assert!(tau.abs() < 1e-6, "{tau}");
        // A model whose cosines are all about 0.8 gets a threshold about 0.8.
        let mut close = Vec::new();
        for i in 0..300 {
            let x = 0.8f32.sqrt();
            let mut v = vec![0.0f32; dim];
            v[0] = x;
            v[1 + i % (dim - 1)] = (1.0 - x * x).sqrt();
            close.extend(v);
        }
        let (tau, _) = derive_threshold(&close, dim, 300).unwrap();
        assert!((0.79..=1.0).contains(&tau), "{tau}");
        assert_eq!(derive_threshold(&spread[..dim], dim, 1), None);
    }
}
