//! Embedding model identities: the names vectors are stored under, their widths, the similarity
//! thresholds calibrated for all-MiniLM-L6-v2 (used for kbs merged before thresholds were
//! derived), and the derivation of thresholds from a kb's own vectors that the merge runs for any
//! model (docs/stages.md, "Embeddings, clusters and the merge").

use std::collections::BinaryHeap;

use serde::Serialize;
use sha2::{Digest, Sha256};

/// The default, in-process model.
pub const MINILM: &str = "all-MiniLM-L6-v2";
/// Width of all-MiniLM-L6-v2 vectors.
pub const MINILM_DIM: usize = 384;
/// Prefix of the feature-hashing test embedder's names (`hashing-<dim>`).
pub const HASHING_PREFIX: &str = "hashing-";
/// Widest `hashing-<dim>` vector: real embedding models are 384 to 4,096 wide, and a wider test
/// vector only fills memory (every unit holds `dim` floats; `hashing-2000000` took 7.7 GB in a
/// minute).
pub const MAX_HASHING_DIM: usize = 4096;

/// Calibrated τ_EH for all-MiniLM-L6-v2: the 99th percentile of question–hyperedge cosines over
/// the ultradomain-mix dev questions (`examples/calibrate.rs`; docs/stages.md).
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
/// ([`ThresholdSample::threshold`]). Chosen so that, on the MiniLM dev sets, the derived thresholds keep
/// hybrid's recall within the noise of the hand-calibrated ones (CHANGELOG.md, measurement history: "Thresholds
/// derived from the index").
pub const DERIVED_PERCENTILE: f64 = 0.95;

/// Fewer pairs than this (a kb of about 32 units of a kind or fewer) make a derived threshold a
/// guess: the 95th percentile of a hundred cosines is the sixth highest, and a small corpus on one
/// subject has units so alike that it cut every unit from the questions of its own users. Such a
/// threshold is used only where it is below the model's default ([`usable_threshold`]).
pub const MIN_DERIVED_PAIRS: usize = 1000;

/// The threshold a query uses of one derived from `pairs` cosines (`derived`), given the model's
/// default for the unit: the derived one, or, from fewer than [`MIN_DERIVED_PAIRS`] pairs, the
/// lower of the two (a small kb is never searched more narrowly than the model's default).
pub fn usable_threshold(derived: f32, pairs: usize, default: f32) -> f32 {
    if pairs < MIN_DERIVED_PAIRS { derived.min(default) } else { derived }
}

/// Cosine above which two units are taken for copies of one text.
const DUPLICATE: f32 = 0.999;

/// Units a derived threshold's sample holds as probes, and as targets: each probe is compared
/// with every target (up to 2 million pairs).
const PROBES: usize = 1000;
const TARGETS: usize = 2000;

/// The sample a similarity threshold is derived from, with no question needed: the [`PROBES`]
/// units with the lowest probe keys and the [`TARGETS`] with the lowest target keys, the keys
/// being two 64-bit numbers of the SHA-256 of the unit's key (its document and id). Units may be
/// offered in any order, one at a time (only the sample is held), and which are kept depends on
/// their keys alone: the sample, and so the threshold, does not depend on the kb's row order or
/// partitioning, and an edit changes it only when a unit it adds, removes or re-embeds holds a
/// place in it (a unit does with odds of about 3,000 in the units of its kind: one in seven of
/// 2wiki's 22,000 hyperedges, one in 330 at a million).
#[derive(Debug, Default)]
pub struct ThresholdSample {
    probes: BinaryHeap<Sampled>,
    targets: BinaryHeap<Sampled>,
}

/// A unit of the sample, ordered by its key (then by its key string, so that ties are decided too).
#[derive(Debug)]
struct Sampled {
    rank: (u64, String),
    vector: Vec<f32>,
}

impl PartialEq for Sampled {
    fn eq(&self, other: &Self) -> bool {
        self.rank == other.rank
    }
}

impl Eq for Sampled {}

impl PartialOrd for Sampled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Sampled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.rank.cmp(&other.rank)
    }
}

impl ThresholdSample {
    /// Offers one unit: `key` names it uniquely in the kb (document and unit id), `vector` is its
    /// unit vector.
    pub fn offer(&mut self, key: &str, vector: &[f32]) {
        let digest = Sha256::digest(key.as_bytes());
        let half = |at: usize| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&digest[at..at + 8]);
            u64::from_be_bytes(bytes)
        };
        keep_lowest(&mut self.probes, PROBES, half(0), key, vector);
        keep_lowest(&mut self.targets, TARGETS, half(8), key, vector);
    }

    /// The cosines of every probe with every target, a unit with itself and copies (cosine ≥
    /// 0.999, units of one text) left out; in key order.
    pub fn cosines(&self) -> Vec<f32> {
        let (probes, targets) = (sorted(&self.probes), sorted(&self.targets));
        let mut cosines = Vec::with_capacity(probes.len() * targets.len());
        for probe in &probes {
            for target in &targets {
                if probe.rank.1 == target.rank.1 || probe.vector.len() != target.vector.len() {
                    continue;
                }
                let cosine = flexstruct_scan::dot(&probe.vector, &target.vector);
                // Copies (units of the same text) say nothing about how alike different units are.
                if cosine < DUPLICATE {
                    cosines.push(cosine);
                }
            }
        }
        cosines
    }

    /// The threshold: the [`DERIVED_PERCENTILE`] of [`Self::cosines`]. A unit above it is closer
    /// to the question than most units are to each other, whatever the model's cosine scale.
    /// Returns the threshold and the pairs it was measured on; None without a pair (fewer than
    /// two distinct units).
    pub fn threshold(&self) -> Option<(f32, usize)> {
        let mut cosines = self.cosines();
        if cosines.is_empty() {
            return None;
        }
        let at = ((cosines.len() - 1) as f64 * DERIVED_PERCENTILE) as usize;
        let (_, tau, _) = cosines.select_nth_unstable_by(at, f32::total_cmp);
        Some((*tau, cosines.len()))
    }
}

/// The units of `heap`, lowest key first.
fn sorted(heap: &BinaryHeap<Sampled>) -> Vec<&Sampled> {
    let mut units: Vec<&Sampled> = heap.iter().collect();
    units.sort_unstable();
    units
}

/// Keeps in `heap` the `cap` units of lowest (key, name), `vector` copied only when it enters.
fn keep_lowest(heap: &mut BinaryHeap<Sampled>, cap: usize, key: u64, name: &str, vector: &[f32]) {
    let enters =
        heap.len() < cap || heap.peek().is_some_and(|worst| (key, name) < (worst.rank.0, worst.rank.1.as_str()));
    if !enters {
        return;
    }
    if heap.len() == cap {
        heap.pop();
    }
    heap.push(Sampled { rank: (key, name.to_owned()), vector: vector.to_vec() });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sample of `vectors` (rows of `dim`), offered in order, unit `i` keyed `u{i}`.
    fn sample(vectors: &[f32], dim: usize) -> ThresholdSample {
        let mut sample = ThresholdSample::default();
        for (i, vector) in vectors.chunks(dim).enumerate() {
            sample.offer(&format!("u{i}"), vector);
        }
        sample
    }

    /// `n` unit vectors of width `dim`, pseudo-random and reproducible.
    fn scattered(n: usize, dim: usize) -> Vec<f32> {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut vectors = Vec::with_capacity(n * dim);
        for _ in 0..n {
            let row: Vec<f32> = (0..dim)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state % 2000) as f32 / 1000.0 - 1.0
                })
                .collect();
            let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
            vectors.extend(row.iter().map(|v| v / norm));
        }
        vectors
    }

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
        let (tau, pairs) = sample(&spread, dim).threshold().unwrap();
        assert_eq!(pairs, 200 * 175, "every unit against the 175 off its axis");
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
        let (tau, _) = sample(&close, dim).threshold().unwrap();
        assert!((0.79..=1.0).contains(&tau), "{tau}");
        assert_eq!(sample(&spread[..dim], dim).threshold(), None, "one unit has no pair");
    }

    #[test]
    fn the_sample_depends_on_the_units_not_on_their_order_and_an_unsampled_unit_changes_nothing() {
        let dim = 16;
        let n = 5000;
        let vectors = scattered(n, dim);
        let forward = sample(&vectors, dim);
        let forward_cosines = forward.cosines();
        let (tau, pairs) = forward.threshold().unwrap();
        assert!(pairs > 1_900_000, "{pairs}");
        // The same units in reverse order: the very same cosines, so the very same threshold.
        let mut reversed = ThresholdSample::default();
        for (i, vector) in vectors.chunks(dim).enumerate().rev() {
            reversed.offer(&format!("u{i}"), vector);
        }
        assert_eq!(reversed.cosines(), forward_cosines);
        // A unit added whose keys are not among the lowest leaves the threshold as it was; one
        // that takes a place in the sample is compared.
        let extra = scattered(n + 1, dim)[n * dim..].to_vec();
        let mut outside = None;
        let mut inside = None;
        for k in 0..10_000 {
            let mut grown = sample(&vectors, dim);
            grown.offer(&format!("extra{k}"), &extra);
            let grown_cosines = grown.cosines();
            if grown_cosines == forward_cosines {
                outside.get_or_insert(grown.threshold().unwrap());
            } else {
                inside.get_or_insert(grown_cosines.len());
            }
            if outside.is_some() && inside.is_some() {
                break;
            }
        }
        assert_eq!(outside, Some((tau, pairs)));
        assert!(inside.is_some(), "some unit takes a place in the sample");
    }
}
