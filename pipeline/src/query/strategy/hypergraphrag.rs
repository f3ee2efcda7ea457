//! `hypergraphrag`: HyperGraphRAG (seed 003) on our knowledge base.

use std::collections::HashMap;

use super::{Ask, Retrieval, Retrieved, Scan, ScanPlan, Scanned, Strategy, hits, sorted, tiered};
use crate::core::units::Unit;
use crate::query::config::{QueryConfig, Thresholds};
use crate::query::kb::Kb;
use crate::query::scan::Hit;

/// HyperGraphRAG's retrieval.
#[derive(Debug)]
pub(super) struct Hypergraphrag;

impl Strategy for Hypergraphrag {
    fn plan(&self, config: &QueryConfig, thresholds: Thresholds) -> ScanPlan {
        ScanPlan {
            hyperedges: Some(Scan::top(config.hgr_k_h)),
            chunks: Some(Scan { threshold: thresholds.chunk, k: config.breadths().chunks }),
            entities: Some(config.hgr_k_v),
            ..ScanPlan::default()
        }
    }

    fn retrieve(&self, ask: Ask<'_>, scanned: Scanned) -> Retrieval {
        hypergraphrag(ask.kb, ask.config, scanned)
    }

    fn embeds_entities(&self) -> bool {
        true
    }
}

/// HyperGraphRAG (seed 003): entities by embedding similarity of the question's entities (k_V),
/// hyperedges by similarity to the question (k_H), bidirectional expansion (the hyperedges of
/// every retrieved entity, the entities of every retrieved hyperedge), fused with chunk
/// retrieval (k_C, τ_C). Its confidence-weighted thresholds τ_V and τ_H have no counterpart in
/// this index (no extraction confidences), so only the breadths apply.
fn hypergraphrag(kb: &Kb, config: &QueryConfig, scanned: Scanned) -> Retrieval {
    let mut entities: HashMap<u32, f32> = HashMap::new();
    for h in scanned.entities.iter().flatten() {
        let s = entities.entry(h.row as u32).or_insert(f32::MIN);
        *s = s.max(h.score);
    }
    let mut entity_hits: Vec<Hit> = entities.into_iter().map(|(row, score)| Hit { row: row as usize, score }).collect();
    entity_hits = sorted(entity_hits);
    entity_hits.truncate(config.hgr_k_v);

    let mut hyperedges: HashMap<u32, f32> = HashMap::new();
    let mut all_entities: HashMap<u32, f32> = HashMap::new();
    let raise = |map: &mut HashMap<u32, f32>, row: u32, score: f32| {
        let s = map.entry(row).or_insert(f32::MIN);
        *s = s.max(score);
    };
    for h in &scanned.hyperedges {
        raise(&mut hyperedges, h.row as u32, h.score);
        for &e in &kb.hyperedge_entities[h.row] {
            raise(&mut all_entities, e, h.score);
        }
    }
    for e in &entity_hits {
        raise(&mut all_entities, e.row as u32, e.score);
        for &h in &kb.entity_hyperedges[e.row] {
            raise(&mut hyperedges, h, e.score);
        }
    }
    let to_hits =
        |map: HashMap<u32, f32>| sorted(map.into_iter().map(|(row, score)| Hit { row: row as usize, score }).collect());
    let mut rows: Vec<Retrieved> = hits(Unit::Entity, to_hits(all_entities)).collect();
    rows.extend(hits(Unit::Hyperedge, to_hits(hyperedges)));
    rows.extend(tiered(Unit::Chunk, scanned.chunks, config.chunk_k));
    Retrieval { rows, ..Retrieval::default() }
}
