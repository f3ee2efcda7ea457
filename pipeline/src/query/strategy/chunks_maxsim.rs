//! `chunks-maxsim`: a strong simple baseline, chunks ranked by their best sentence.

use std::collections::HashMap;

use super::{Ask, Retrieval, Scan, ScanPlan, Scanned, Strategy, sorted, tiered};
use crate::core::units::Unit;
use crate::query::config::{QueryConfig, Thresholds};
use crate::query::kb::Kb;
use crate::query::scan::Hit;

/// Chunks by their best hyperedge.
#[derive(Debug)]
pub(super) struct ChunksMaxsim;

impl Strategy for ChunksMaxsim {
    /// The best sentences decide: a pool of hyperedges large enough that every chunk ranked (and
    /// then taken) has its best hyperedge in it; chunks without a located hyperedge compete with
    /// their own vector.
    fn plan(&self, config: &QueryConfig, _thresholds: Thresholds) -> ScanPlan {
        let chunks = config.breadths().chunks;
        let pool = chunks.saturating_mul(MAXSIM_HYPEREDGES_PER_CHUNK).max(MAXSIM_POOL);
        ScanPlan { hyperedges: Some(Scan::top(pool)), chunks: Some(Scan::top(chunks)), ..ScanPlan::default() }
    }

    fn retrieve(&self, ask: Ask<'_>, scanned: Scanned) -> Retrieval {
        chunks_maxsim(ask.kb, ask.config, scanned)
    }
}

/// Fewest hyperedges scanned for `chunks-maxsim`, and how many per chunk it takes.
const MAXSIM_POOL: usize = 1024;
const MAXSIM_HYPEREDGES_PER_CHUNK: usize = 64;

/// Chunks ranked by their best sentence: a chunk's score is the highest cosine of a hyperedge
/// whose span lies in it (its own cosine when none does); the top `chunk_k` (or, filling a cap,
/// every candidate) in that order.
fn chunks_maxsim(kb: &Kb, config: &QueryConfig, scanned: Scanned) -> Retrieval {
    let mut best: HashMap<u32, f32> = HashMap::new();
    let mut raise = |chunk: u32, score: f32| {
        let s = best.entry(chunk).or_insert(f32::MIN);
        *s = s.max(score);
    };
    for h in &scanned.hyperedges {
        if let Some(chunk) = kb.hyperedge_chunk[h.row] {
            raise(chunk, h.score);
        }
    }
    for c in scanned.chunks.iter().filter(|c| !kb.chunk_has_hyperedges[c.row]) {
        raise(c.row as u32, c.score);
    }
    let mut ranked = sorted(best.into_iter().map(|(row, score)| Hit { row: row as usize, score }).collect());
    ranked.truncate(config.breadths().chunks);
    Retrieval { rows: tiered(Unit::Chunk, ranked, config.chunk_k).collect(), ..Retrieval::default() }
}
