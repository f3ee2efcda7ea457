//! `chunks`: standard RAG, the top `chunk_k` chunks by cosine above τ_C.

use super::{Ask, Retrieval, Scan, ScanPlan, Scanned, Strategy, tiered};
use crate::core::units::Unit;
use crate::query::config::{QueryConfig, Thresholds};

/// Chunks by cosine.
#[derive(Debug)]
pub(super) struct Chunks;

impl Strategy for Chunks {
    fn plan(&self, config: &QueryConfig, thresholds: Thresholds) -> ScanPlan {
        ScanPlan {
            chunks: Some(Scan { threshold: thresholds.chunk, k: config.breadths().chunks }),
            ..ScanPlan::default()
        }
    }

    fn retrieve(&self, ask: Ask<'_>, scanned: Scanned) -> Retrieval {
        Retrieval { rows: tiered(Unit::Chunk, scanned.chunks, ask.config.chunk_k).collect(), ..Retrieval::default() }
    }
}
