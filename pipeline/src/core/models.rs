//! Embedding model identities: the names vectors are stored under, their widths, and the
//! similarity thresholds calibrated for each (thresholds are a property of a model's cosine
//! scale, not of a corpus: ARCHITECTURE.md, "Calibrating the thresholds").

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
