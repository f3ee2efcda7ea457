//! The ablation of the two dominant embeddings on an index's own graph
//! (`flexstruct-paths --ablate-dominance`): how often each breaks dominance, so that the
//! structural filter drops a true match (a false negative), and how much each prunes.
//!
//! Query stars are drawn the way query graphs have them: a node of the graph, one to three of
//! its neighbours, each made unknown with probability ⅖ (at least one kept by name), the centre
//! kept or made unknown. **Violations**: the share of those stars whose embedding is not
//! dominated by the embedding of the whole star they were drawn from. **Pruning**: for stars
//! with an unknown centre (a wildcard of a query path, the filter's real work), the share of
//! the graph's nodes the filter excludes, beside the share it could exclude (nodes whose star
//! does not contain the query star: a named neighbour missing, or too few neighbours) and the
//! share of containing nodes it wrongly excludes.

use std::collections::HashSet;
use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;

use super::{Graph, PathsConfig};
use crate::core::Result;
use crate::core::dominance::{Encoder, dominated};
use crate::io::Index;
use crate::models::gat::Star;

/// Query stars drawn for the violation measure.
pub const STARS: usize = 5000;
/// Of them, stars with an unknown centre scanned against every node for the pruning measure.
pub const QUERIES: usize = 300;
/// Seed of the draws.
const SEED: u64 = 2002;

/// One dominant embedding's figures on a graph.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DominanceAblation {
    /// `sketch` or `gat`.
    pub dominance: String,
    /// Seconds training the encoder (0 for sketches).
    pub train_seconds: f64,
    /// Seconds encoding every node's star.
    pub encode_seconds: f64,
    /// Query stars drawn.
    pub stars: usize,
    /// Percent of them not dominated by their own node's embedding.
    pub violations_pct: f64,
    /// Stars with an unknown centre scanned against every node.
    pub queries: usize,
    /// Mean percent of nodes the filter excludes.
    pub pruned_pct: f64,
    /// Mean percent of nodes whose star does not contain the query star (what an exact filter
    /// would exclude).
    pub prunable_pct: f64,
    /// Mean percent of the nodes whose star contains the query star that the filter excludes
    /// (false negatives).
    pub missed_pct: f64,
}

/// A query-like star of node `v`: one to three neighbours, some unknown, at least one by name.
fn query_star(v: u32, neighbours: &[u32], rng: &mut fastrand::Rng) -> Star {
    let mut chosen = neighbours.to_vec();
    rng.shuffle(&mut chosen);
    chosen.truncate(rng.usize(1..=3.min(neighbours.len())));
    let mut star = Star { centre: if rng.bool() { Some(v) } else { None }, known: Vec::new(), unknown: 0 };
    for (i, u) in chosen.into_iter().enumerate() {
        if i > 0 && rng.f32() < 0.4 {
            star.unknown += 1;
        } else {
            star.known.push(u);
        }
    }
    star
}

/// Measures the sketch and the GAT (trained as `config` says) on the kb graph of `index`.
pub fn ablate_dominance(index: &Index, config: &PathsConfig) -> Result<Vec<DominanceAblation>> {
    config.validate()?;
    let graph = Graph::read(index, None)?;
    let neighbours = graph.neighbour_nodes();
    let with_edges: Vec<u32> = (0..graph.norm.len() as u32).filter(|&v| !neighbours[v as usize].is_empty()).collect();
    let mut rng = fastrand::Rng::with_seed(SEED);
    let mut stars: Vec<(u32, Star)> = Vec::with_capacity(STARS);
    for _ in 0..STARS.min(with_edges.len() * 8) {
        let v = with_edges[rng.usize(0..with_edges.len())];
        stars.push((v, query_star(v, &neighbours[v as usize], &mut rng)));
    }
    // Of the drawn stars, those with an unknown centre, by position.
    let queries: Vec<usize> = (0..stars.len()).filter(|&i| stars[i].1.centre.is_none()).take(QUERIES).collect();
    // The truth: which nodes' stars contain each query star.
    let sets: Vec<HashSet<u32>> = neighbours.iter().map(|n| n.iter().copied().collect()).collect();
    let containing: Vec<Vec<bool>> = queries
        .par_iter()
        .map(|&q| {
            let s = &stars[q].1;
            sets.iter().map(|n| n.len() >= s.known.len() + s.unknown && s.known.iter().all(|u| n.contains(u))).collect()
        })
        .collect();

    let mut out = Vec::new();
    for dominance in [super::Dominance::Sketch, super::Dominance::Gat] {
        let config = PathsConfig { dominance, ..config.clone() };
        let (encoder, trained) = graph.encoder(&config)?;
        let started = Instant::now();
        let nodes: Vec<Vec<f32>> = (0..graph.norm.len()).into_par_iter().map(|v| graph.encode(&encoder, v)).collect();
        let encode_seconds = started.elapsed().as_secs_f64();
        let encoded: Vec<Vec<f32>> = stars.par_iter().map(|(_, s)| embed(&graph, &encoder, s)).collect();
        let violations = stars.iter().zip(&encoded).filter(|((v, _), o)| !dominated(o, &nodes[*v as usize])).count();
        let per_query: Vec<(f64, f64, f64)> = queries
            .par_iter()
            .zip(&containing)
            .map(|(&q, truth)| {
                let o = &encoded[q];
                let kept: Vec<bool> = nodes.iter().map(|n| dominated(o, n)).collect();
                let n = nodes.len() as f64;
                let contain = truth.iter().filter(|t| **t).count();
                let missed = truth.iter().zip(&kept).filter(|(t, k)| **t && !**k).count();
                (
                    100.0 * kept.iter().filter(|k| !**k).count() as f64 / n,
                    100.0 * (nodes.len() - contain) as f64 / n,
                    if contain == 0 { 0.0 } else { 100.0 * missed as f64 / contain as f64 },
                )
            })
            .collect();
        let mean = |f: fn(&(f64, f64, f64)) -> f64| {
            if per_query.is_empty() { 0.0 } else { per_query.iter().map(f).sum::<f64>() / per_query.len() as f64 }
        };
        out.push(DominanceAblation {
            dominance: dominance.name().to_owned(),
            train_seconds: trained.map_or(0.0, |t| t.seconds),
            encode_seconds,
            stars: stars.len(),
            violations_pct: if stars.is_empty() { 0.0 } else { 100.0 * violations as f64 / stars.len() as f64 },
            queries: queries.len(),
            pruned_pct: mean(|q| q.0),
            prunable_pct: mean(|q| q.1),
            missed_pct: mean(|q| q.2),
        });
    }
    Ok(out)
}

/// The embedding of a drawn star.
fn embed(graph: &Graph, encoder: &Encoder, s: &Star) -> Vec<f32> {
    let name = |v: u32| graph.norm[v as usize].as_str();
    encoder.encode(s.centre.map(name), s.known.iter().map(|&u| name(u)), s.unknown)
}
