//! The four retrieval modules of the paper (§3.2), the modes and toggles that combine them, and
//! the peer strategies over the same knowledge base.
//!
//! - entity retrieval: query entities → normalised name match → alias table when no name matches;
//! - hyperedge retrieval: cosine > τ_EH, the top N_EH (all that pass when fewer do);
//! - edge retrieval: cosine > τ_E, the top N_E;
//! - cluster retrieval: every cluster with at least one retrieved hyperedge.
//!
//! Every retrieved row carries a score used to rank evidence in the context: its cosine with the
//! question (a matched entity is ranked by the cosine of its name + summary; a cluster by its
//! best retrieved member; an expanded HyperGraphRAG row by the row it was reached from).

use std::collections::HashMap;

use arrow::array::Array;
use rayon::prelude::*;

use serde::Serialize;

use super::config::{Mode, QueryConfig, Thresholds, WindowIn};
use super::kb::Kb;
use super::scan::Hit;
use crate::core::names::normalize;
pub use crate::core::units::Unit;

/// One retrieved row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retrieved {
    /// Kind (and so which kb table `row` is in; a passage's rows are hyperedges).
    pub unit: Unit,
    /// Row in the kb table (a passage: its first hyperedge).
    pub row: u32,
    /// Ranking score (see the module documentation).
    pub score: f32,
    /// Rows it covers from `row` on: 1, or a passage's consecutive hyperedges.
    pub len: u32,
    /// 0 for what the strategy's breadths retrieve, 1 for the further candidates it takes only
    /// to fill a cap: the context takes every tier-0 piece (by score) before any tier-1 piece, so
    /// filling never changes what the breadths alone give, it only adds after it.
    pub tier: u8,
    /// A cluster given in part: the retrieved member hyperedge (row) its window is centred on;
    /// the window is that member and the `len` members on each side of it in the cluster's
    /// reading order. None: the whole cluster (and for every other unit).
    pub focus: Option<u32>,
}

/// What a question brings to retrieval.
#[derive(Debug, Clone, Copy)]
pub struct QueryInput<'a> {
    /// The question.
    pub text: &'a str,
    /// The question's unit-length embedding.
    pub vector: &'a [f32],
    /// Entities named in the question (from the LLM prompt or the rules extractor).
    pub entities: &'a [String],
    /// Embeddings of `entities` (HyperGraphRAG's entity retrieval); may be empty.
    pub entity_vectors: &'a [Vec<f32>],
}

/// How an entity of the question was found in the kb.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EntityMatch {
    /// The query entity as extracted.
    pub query: String,
    /// `name`, `alias`, or `none`.
    pub via: &'static str,
    /// Entity rows it matched.
    #[serde(skip)]
    pub rows: Vec<u32>,
}

/// Entity retrieval (EnR): normalised string match against entity names, then the alias table
/// for a query entity no name matches.
pub fn match_entities(kb: &Kb, query_entities: &[String]) -> Vec<EntityMatch> {
    query_entities
        .iter()
        .map(|q| {
            let key = normalize(q);
            if let Some(rows) = kb.by_name.get(&key).filter(|_| !key.is_empty()) {
                EntityMatch { query: q.clone(), via: "name", rows: rows.clone() }
            } else if let Some(rows) = kb.by_alias.get(&key).filter(|_| !key.is_empty()) {
                EntityMatch { query: q.clone(), via: "alias", rows: rows.clone() }
            } else {
                EntityMatch { query: q.clone(), via: "none", rows: Vec::new() }
            }
        })
        .collect()
}

/// How the question's entities matched, and the entity rows they matched (sorted, once each).
fn matched_rows(kb: &Kb, query_entities: &[String]) -> (Vec<EntityMatch>, Vec<u32>) {
    let matches = match_entities(kb, query_entities);
    let mut rows: Vec<u32> = matches.iter().flat_map(|m| m.rows.iter().copied()).collect();
    rows.sort_unstable();
    rows.dedup();
    (matches, rows)
}

/// Which modules a query runs: the mode, narrowed by the toggles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Modules {
    /// Entity retrieval.
    pub entities: bool,
    /// Hyperedge retrieval (hyperedges in the context).
    pub hyperedges: bool,
    /// Edge retrieval.
    pub edges: bool,
    /// Cluster retrieval.
    pub clusters: bool,
    /// Bridge retrieval (hybrid and hypergraph modes).
    pub bridges: bool,
    /// Lexical retrieval (hybrid and hypergraph modes, fused assembly).
    pub lexical: bool,
}

impl Modules {
    /// The modules of a FlexStructRAG mode with the configured toggles applied (peers: none).
    pub fn of(config: &QueryConfig) -> Modules {
        let (entities, hyperedges, edges, clusters, bridges, lexical) = match config.mode {
            Mode::Hybrid => (true, true, true, true, true, true),
            Mode::Hypergraph => (true, true, false, true, true, true),
            Mode::Graph => (true, false, true, false, false, false),
            Mode::Chunks
            | Mode::None
            | Mode::Hypergraphrag
            | Mode::ChunksMaxsim
            | Mode::SentenceWindow
            | Mode::Paths => (false, false, false, false, false, false),
        };
        Modules {
            entities: entities && config.entities,
            hyperedges: hyperedges && config.hyperedges,
            edges: edges && config.edges,
            clusters: clusters && config.clusters,
            bridges: bridges && config.bridges && config.n_b > 0,
            lexical: lexical && config.lexical && config.fuses(),
        }
    }

    /// The modules a strategy runs: [`Modules::fused`] for the fused assembly, else
    /// [`Modules::of`].
    pub fn active(config: &QueryConfig) -> Modules {
        if config.fuses() { Modules::fused(config) } else { Modules::of(config) }
    }

    /// The modules whose rankings the fused assembly fuses: those of [`Modules::of`] whose
    /// weight is above 0.
    pub fn fused(config: &QueryConfig) -> Modules {
        let on = Modules::of(config);
        let w = config.weights;
        Modules {
            entities: on.entities && w.entities > 0.0,
            hyperedges: on.hyperedges && w.hyperedges > 0.0,
            edges: on.edges && w.edges > 0.0,
            bridges: on.bridges && w.bridges > 0.0,
            lexical: on.lexical && w.lexical > 0.0,
            ..on
        }
    }
}

/// Everything one question retrieved, best first within each unit.
#[derive(Debug, Clone, Default)]
pub struct Retrieval {
    /// Retrieved rows of every unit.
    pub rows: Vec<Retrieved>,
    /// How the question's entities matched (entity retrieval only).
    pub entity_matches: Vec<EntityMatch>,
    /// What the reader of the answer should know about the retrieval: a similarity threshold
    /// that no unit of a kind passed.
    pub notes: Vec<String>,
    /// What structure matching gave (`--mode paths` only).
    pub structure: Option<StructureMatch>,
}

/// How a question was answered by structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Subgraphs isomorphic to the query graph were found.
    Exact,
    /// None: the 1-hop neighbourhood of the question's entities.
    Neighbourhood,
    /// No entity of the question became a node.
    Nothing,
}

/// What structure matching gave one question: for the answer's reader and SG-RAG's own
/// measures (Hit@1, recall and F1 of the answer over the matched labels).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StructureMatch {
    /// Exact match, the neighbourhood fallback, or no node at all.
    pub outcome: Outcome,
    /// The labels the matched subgraphs give the nodes asked for (the query graph's answer node;
    /// without one, its unknown nodes), best subgraph first, each once; empty without a match.
    pub answers: Vec<String>,
}

fn hits(unit: Unit, hits: Vec<Hit>) -> impl Iterator<Item = Retrieved> {
    tiered(unit, hits, usize::MAX)
}

/// The hits of one module, best first: the first `breadth` of tier 0, the rest of tier 1.
fn tiered(unit: Unit, hits: Vec<Hit>, breadth: usize) -> impl Iterator<Item = Retrieved> {
    hits.into_iter().enumerate().map(move |(i, h)| Retrieved {
        unit,
        row: h.row as u32,
        score: h.score,
        len: 1,
        tier: u8::from(i >= breadth),
        focus: None,
    })
}

/// The vector scans of one question: the top rows of each table its strategy searches.
#[derive(Debug, Clone, Default)]
struct Scanned {
    hyperedges: Vec<Hit>,
    edges: Vec<Hit>,
    chunks: Vec<Hit>,
    /// HyperGraphRAG: the top entities of each probe (the question's entities, else the question).
    entities: Vec<Vec<Hit>>,
}

/// Runs the configured strategy for one question.
pub fn retrieve(kb: &Kb, config: &QueryConfig, thresholds: Thresholds, query: QueryInput<'_>) -> Retrieval {
    retrieve_batch(kb, config, thresholds, &[query]).pop().unwrap_or_default()
}

/// Runs the configured strategy for a batch of questions; each table is scanned once for all of
/// them (see [`flexstruct_scan::top_k_batch`]).
pub fn retrieve_batch(
    kb: &Kb,
    config: &QueryConfig,
    thresholds: Thresholds,
    queries: &[QueryInput<'_>],
) -> Vec<Retrieval> {
    // Each question's lookups run on any core: a batch is spread like its scans.
    scan(kb, config, thresholds, queries)
        .into_par_iter()
        .zip(queries)
        .map(|(scanned, query)| {
            let notes = threshold_notes(kb, config, thresholds, &scanned);
            let mut retrieval = match config.mode {
                // Structure-guided retrieval runs on the path index (`super::paths`), not here.
                Mode::None | Mode::Paths => Retrieval::default(),
                Mode::Chunks => Retrieval {
                    rows: tiered(Unit::Chunk, scanned.chunks, config.chunk_k).collect(),
                    ..Retrieval::default()
                },
                Mode::Hypergraphrag => hypergraphrag(kb, config, scanned),
                Mode::ChunksMaxsim => chunks_maxsim(kb, config, scanned),
                Mode::SentenceWindow => sentence_windows(kb, config, scanned),
                Mode::Hybrid | Mode::Hypergraph | Mode::Graph if config.fuses() => fused(kb, config, *query, scanned),
                Mode::Hybrid | Mode::Hypergraph | Mode::Graph => flexstruct(kb, config, thresholds, *query, scanned),
            };
            retrieval.notes = notes;
            retrieval
        })
        .collect()
}

/// A note for each kind of unit whose similarity scan came back empty because of its threshold
/// (the kb has such units, none is as similar to the question as the threshold asks), so that an
/// answer from little or no evidence says why.
fn threshold_notes(kb: &Kb, config: &QueryConfig, thresholds: Thresholds, scanned: &Scanned) -> Vec<String> {
    let modules = Modules::active(config);
    let dense = matches!(config.mode, Mode::Hybrid | Mode::Hypergraph | Mode::Graph);
    let scans = [
        (
            "hyperedge",
            "tau_eh",
            thresholds.hyperedge,
            dense && (modules.hyperedges || modules.clusters || modules.bridges),
            &scanned.hyperedges,
            kb.hyperedges.vectors.len(),
        ),
        ("edge", "tau_e", thresholds.edge, dense && modules.edges, &scanned.edges, kb.edges.vectors.len()),
        (
            "chunk",
            "tau_chunk",
            thresholds.chunk,
            matches!(config.mode, Mode::Chunks | Mode::Hypergraphrag),
            &scanned.chunks,
            kb.chunks.vectors.len(),
        ),
    ];
    scans
        .into_iter()
        .filter(|&(_, _, tau, scanned_here, hits, units)| {
            scanned_here && hits.is_empty() && units > 0 && tau > f32::MIN
        })
        .map(|(unit, key, tau, ..)| {
            format!(
                "no {unit} of the kb is as similar to the question as the threshold {tau:.3} asks (query.{key}); \
                 lower it to search wider"
            )
        })
        .collect()
}

fn scan(kb: &Kb, config: &QueryConfig, thresholds: Thresholds, queries: &[QueryInput<'_>]) -> Vec<Scanned> {
    let mut out = vec![Scanned::default(); queries.len()];
    let vectors: Vec<&[f32]> = queries.iter().map(|q| q.vector).collect();
    let b = config.breadths();
    let fill = |hits: Vec<Vec<Hit>>, slot: fn(&mut Scanned) -> &mut Vec<Hit>, out: &mut Vec<Scanned>| {
        for (scanned, hits) in out.iter_mut().zip(hits) {
            *slot(scanned) = hits;
        }
    };
    match config.mode {
        Mode::None | Mode::Paths => {}
        Mode::Chunks => {
            fill(kb.chunks.vectors.top_k_batch(&vectors, thresholds.chunk, b.chunks), |s| &mut s.chunks, &mut out);
        }
        Mode::ChunksMaxsim => {
            // The best sentences decide: a pool of hyperedges large enough that every chunk
            // ranked (and then taken) has its best hyperedge in it; chunks without a located
            // hyperedge compete with their own vector.
            let pool = b.chunks.saturating_mul(MAXSIM_HYPEREDGES_PER_CHUNK).max(MAXSIM_POOL);
            fill(kb.hyperedges.vectors.top_k_batch(&vectors, f32::MIN, pool), |s| &mut s.hyperedges, &mut out);
            fill(kb.chunks.vectors.top_k_batch(&vectors, f32::MIN, b.chunks), |s| &mut s.chunks, &mut out);
        }
        Mode::SentenceWindow => {
            let found = kb.hyperedges.vectors.top_k_batch(&vectors, f32::MIN, b.hyperedges);
            fill(found, |s| &mut s.hyperedges, &mut out);
        }
        Mode::Hybrid | Mode::Hypergraph | Mode::Graph => {
            let modules = Modules::active(config);
            // Clusters and bridges are found through the retrieved hyperedges, so the scan runs
            // for any of these modules.
            if modules.hyperedges || modules.clusters || modules.bridges {
                let found = kb.hyperedges.vectors.top_k_batch(&vectors, thresholds.hyperedge, b.hyperedges);
                fill(found, |s| &mut s.hyperedges, &mut out);
            }
            if modules.edges {
                fill(kb.edges.vectors.top_k_batch(&vectors, thresholds.edge, b.edges), |s| &mut s.edges, &mut out);
            }
        }
        Mode::Hypergraphrag => {
            let probes: Vec<Vec<&[f32]>> = queries
                .iter()
                .map(|q| {
                    if q.entity_vectors.is_empty() {
                        vec![q.vector]
                    } else {
                        q.entity_vectors.iter().map(Vec::as_slice).collect()
                    }
                })
                .collect();
            let mut entity_hits =
                kb.entities.vectors.top_k_batch(&probes.concat(), f32::MIN, config.hgr_k_v).into_iter();
            for (scanned, probes) in out.iter_mut().zip(&probes) {
                scanned.entities = entity_hits.by_ref().take(probes.len()).collect();
            }
            fill(
                kb.hyperedges.vectors.top_k_batch(&vectors, f32::MIN, config.hgr_k_h),
                |s| &mut s.hyperedges,
                &mut out,
            );
            fill(kb.chunks.vectors.top_k_batch(&vectors, thresholds.chunk, b.chunks), |s| &mut s.chunks, &mut out);
        }
    }
    out
}

fn flexstruct(
    kb: &Kb,
    config: &QueryConfig,
    thresholds: Thresholds,
    query: QueryInput<'_>,
    scanned: Scanned,
) -> Retrieval {
    let modules = Modules::of(config);
    let mut out = Retrieval::default();
    // The matched entity rows, for entity retrieval and as the first hop of bridge retrieval.
    let mut matched: Vec<u32> = Vec::new();
    if modules.entities {
        (out.entity_matches, matched) = matched_rows(kb, query.entities);
        let scored = kb.entities.vectors.scores(query.vector, &matched);
        out.rows.extend(hits(Unit::Entity, sorted(scored)));
    }
    // The hyperedges the breadth N_EH retrieves; those beyond it only fill a cap (tier 1).
    let first = &scanned.hyperedges[..config.n_eh.min(scanned.hyperedges.len())];
    if modules.clusters {
        // A cluster's score is its best retrieved member, its tier that of its best member.
        let mut best: HashMap<u32, (u8, f32)> = HashMap::new();
        for (i, h) in scanned.hyperedges.iter().enumerate() {
            let tier = u8::from(i >= first.len());
            for &c in &kb.hyperedge_clusters[h.row] {
                best.entry(c).or_insert((tier, h.score));
            }
        }
        let mut clusters: Vec<Retrieved> = best
            .into_iter()
            .map(|(row, (tier, score))| Retrieved { unit: Unit::Cluster, row, score, len: 1, tier, focus: None })
            .collect();
        clusters.sort_by(|a, b| a.tier.cmp(&b.tier).then(b.score.total_cmp(&a.score)).then(a.row.cmp(&b.row)));
        out.rows.extend(clusters);
    }
    if modules.bridges {
        // Bridges start from (and skip) what the breadths retrieve, so that filling a cap adds
        // bridges after the usual ones instead of replacing them.
        let found = bridges(kb, query.vector, &matched, first, thresholds.hyperedge, config.breadths().bridges);
        out.rows.extend(tiered(Unit::Hyperedge, found, config.n_b));
    }
    if modules.hyperedges {
        let retrieved = tiered(Unit::Hyperedge, scanned.hyperedges, config.n_eh);
        match config.widen {
            0 => out.rows.extend(retrieved),
            k => out.rows.extend(retrieved.map(|r| widen(kb, r, k))),
        }
    }
    if modules.edges {
        out.rows.extend(tiered(Unit::Edge, scanned.edges, config.n_e));
    }
    out
}

/// The fused assembly (ours): every module ranks hyperedges — entity retrieval the hyperedges
/// of the matched entities and of the documents titled with their names (by cosine), bridge
/// retrieval its bridges (by cosine plus their link, [`bridge_candidates`]), hyperedge retrieval
/// by cosine, lexical retrieval by BM25, edge retrieval the hyperedges behind its edges — and
/// the rankings are fused by weighted reciprocal rank (`query.weights`, `query.rrf_k`; the
/// entity and bridge weights times `query.hop_boost` when the question follows a relation).
/// Each hyperedge, in fused order, comes with its `query.window_k` neighbours on each side, in
/// its document or (`query.window_in = "cluster"`, with cluster retrieval) in its SSC cluster;
/// the context merges what overlaps. Each module ranks a pool of [`super::config::FILL_POOL`]
/// candidates (every rank counts in the fusion); those within some module's breadth (N_EH for
/// cosine, BM25 and entities, N_B, N_E) are what the strategy retrieves (tier 0), and a strategy
/// that fills a cap takes the others after them (tier 1).
fn fused(kb: &Kb, config: &QueryConfig, query: QueryInput<'_>, scanned: Scanned) -> Retrieval {
    let modules = Modules::fused(config);
    let pool = config.breadths();
    let w = config.weights;
    let boost = if follows_relation(query.text) { config.hop_boost } else { 1.0 };
    let mut out = Retrieval::default();
    // Each module's ranking, with its weight and the breadth within which it is tier 0.
    let mut rankings: Vec<(Vec<usize>, f32, usize)> = Vec::new();
    let mut named = Named::default();
    if modules.entities {
        let matched;
        (out.entity_matches, matched) = matched_rows(kb, query.entities);
        named = Named::of(kb, &matched);
        let mut ranked = sorted(kb.hyperedges.vectors.scores(query.vector, &named.hyperedges));
        ranked.truncate(pool.hyperedges);
        rankings.push((ranked.into_iter().map(|h| h.row).collect(), w.entities * boost, config.n_eh));
    }
    if modules.bridges {
        let first = &scanned.hyperedges[..config.n_eh.min(scanned.hyperedges.len())];
        let candidates = bridge_candidates(kb, query.vector, &named, first);
        let rows: Vec<u32> = candidates.iter().map(|c| c.0).collect();
        let cosines = kb.hyperedges.vectors.scores(query.vector, &rows);
        let scored = cosines.into_iter().zip(&candidates).map(|(h, c)| Hit { score: h.score + c.1, ..h }).collect();
        let found = flexstruct_scan::keep_best(scored, pool.bridges);
        rankings.push((found.into_iter().map(|h| h.row).collect(), w.bridges * boost, config.n_b));
    }
    if modules.hyperedges {
        rankings.push((scanned.hyperedges.iter().map(|h| h.row).collect(), w.hyperedges, config.n_eh));
    }
    if modules.lexical {
        let found = kb.lexical.search(query.text, pool.hyperedges);
        rankings.push((found.into_iter().map(|h| h.row).collect(), w.lexical, config.n_eh));
    }
    if modules.edges {
        let mut rows: Vec<usize> = Vec::new();
        for g in &scanned.edges {
            if let Some(h) = kb.edges.hyperedge[g.row].map(|h| h as usize).filter(|h| !rows.contains(h)) {
                rows.push(h);
            }
        }
        rankings.push((rows, w.edges, config.n_e));
    }
    // Weighted reciprocal-rank fusion over every module's whole pool; a hyperedge is tier 0 when
    // some module ranks it within its breadth. Without filling, only tier 0 is taken.
    let mut fused: HashMap<usize, (u8, f32)> = HashMap::new();
    for (ranking, weight, breadth) in &rankings {
        for (rank, &h) in ranking.iter().enumerate() {
            let entry = fused.entry(h).or_insert((1, 0.0));
            entry.0 = entry.0.min(u8::from(rank >= *breadth));
            entry.1 += weight / (config.rrf_k + rank as f32 + 1.0);
        }
    }
    let fills = config.fills();
    let mut seeds: Vec<(usize, (u8, f32))> = fused.into_iter().filter(|s| fills || s.1.0 == 0).collect();
    seeds.sort_by(|a, b| a.1.0.cmp(&b.1.0).then(b.1.1.total_cmp(&a.1.1)).then(a.0.cmp(&b.0)));
    let k = config.window_k;
    out.rows = seeds
        .into_iter()
        .map(|(h, (tier, score))| {
            let seed = Retrieved { unit: Unit::Hyperedge, row: h as u32, score, len: 1, tier, focus: None };
            let cluster =
                kb.hyperedge_clusters[h].first().filter(|_| modules.clusters && config.window_in == WindowIn::Cluster);
            match cluster {
                Some(&c) => Retrieved { unit: Unit::Cluster, row: c, len: k as u32, focus: Some(h as u32), ..seed },
                None if k > 0 => widen(kb, seed, k),
                None => seed,
            }
        })
        .collect();
    out
}

/// Whether a question follows a relation from the entity it names to the one it asks about
/// (`the place of birth of the director of film X`, `X's paternal grandmother`). A child alone
/// does not count: `son` and `daughter` are common words of questions about stories, and the
/// boost cost the novels' tune half half a point of answer-token recall with them, while on
/// 2wiki it changed nothing.
fn follows_relation(question: &str) -> bool {
    crate::rules::question::hop_phrases(question)
        .iter()
        .any(|(_, hops)| hops.iter().any(|h| *h != crate::rules::question::Hop::Child))
}

/// Names shared by more entity nodes than this are hubs (a country, a common word), not
/// bridges: following them would pull in facts from everywhere.
pub const MAX_BRIDGE_NODES: usize = 64;

/// Bridge retrieval (BR; ours, beyond the paper's four modules). A multi-hop question names one
/// end of a chain ("the birthplace of the performer of *Changed It*"): the first hop names the
/// entity in the middle (the performer), and the answer is a fact about that entity, stated in
/// its own document, that the question's wording alone rarely ranks high.
///
/// The first hop is what the question names: the hyperedges of its matched entities and of the
/// documents titled with their names (or, when no entity matched, the retrieved hyperedges).
/// The entities those hyperedges name are the neighbours; each offers the hyperedges of its
/// nodes (the same name in every document) and of the documents titled with its name. Those not
/// in the first hop (nor retrieved already) are scored by cosine with the question, and the `n`
/// best above `threshold` are retrieved. Numbers and dates are not followed, nor hub names
/// (more than [`MAX_BRIDGE_NODES`] nodes).
fn bridges(kb: &Kb, query: &[f32], matched: &[u32], found: &[Hit], threshold: f32, n: usize) -> Vec<Hit> {
    let named = Named::of(kb, matched);
    let candidates: Vec<u32> = bridge_candidates(kb, query, &named, found).into_iter().map(|(h, _)| h).collect();
    let scored = kb.hyperedges.vectors.scores(query, &candidates);
    flexstruct_scan::keep_best(scored.into_iter().filter(|h| h.score > threshold).collect(), n)
}

/// The hyperedge rows of the documents titled `name` (normalised).
fn titled<'a>(kb: &'a Kb, name: &str) -> impl Iterator<Item = u32> + 'a {
    kb.by_title.get(name).into_iter().flatten().copied()
}

/// Pushes `h` onto `rows` unless `seen` marks it, and marks it.
fn mark(seen: &mut [bool], rows: &mut Vec<u32>, h: u32) {
    if !std::mem::replace(&mut seen[h as usize], true) {
        rows.push(h);
    }
}

/// What a question names: the normalised names of its matched entities (sorted, once each), and
/// the hyperedges of those entities and of the documents titled with their names, each once.
#[derive(Debug, Default)]
struct Named<'a> {
    names: Vec<&'a str>,
    hyperedges: Vec<u32>,
}

impl<'a> Named<'a> {
    fn of(kb: &'a Kb, matched: &[u32]) -> Named<'a> {
        let mut names: Vec<&str> = matched.iter().map(|&e| kb.entities.norm_name.value(e as usize)).collect();
        names.sort_unstable();
        names.dedup();
        let mut seen = vec![false; kb.hyperedge_entities.len()];
        let mut hyperedges = Vec::new();
        let titled = names.iter().flat_map(|name| titled(kb, name));
        for h in matched.iter().flat_map(|&e| kb.entity_hyperedges[e as usize].iter().copied()).chain(titled) {
            mark(&mut seen, &mut hyperedges, h);
        }
        Named { names, hyperedges }
    }
}

/// What a bridge candidate in the document titled with its neighbour's name (the neighbour's
/// own article) adds to its link (set on the 2wiki tune half).
const OWN_ARTICLE_LINK: f32 = 0.2;

/// The bridge candidates of [`bridges`], each with its link: the best cosine with the question
/// of a first-hop hyperedge that names the neighbour it was reached through (how relevant the
/// fact is that leads to it: `… directed by Clarence Brown` for the director of the film asked
/// about, before `… released by Universal Pictures`), plus [`OWN_ARTICLE_LINK`] in the
/// neighbour's own article.
fn bridge_candidates(kb: &Kb, query: &[f32], named: &Named<'_>, found: &[Hit]) -> Vec<(u32, f32)> {
    // Sets as marks over the rows, not tree or hash sets: this runs per question, its lists
    // run to thousands of hyperedges on long documents, and the dev profile leaves this crate
    // unoptimised (sorting 3,000 ids there took 1.3 ms).
    let names = &kb.entities.norm_name;
    let own = &named.names;
    let mut seen = vec![false; kb.hyperedge_entities.len()];
    let mut first_hop = named.hyperedges.clone();
    for &h in &first_hop {
        seen[h as usize] = true;
    }
    if own.is_empty() {
        for h in found {
            mark(&mut seen, &mut first_hop, h.row as u32);
        }
    }
    // Retrieved already: not candidates either.
    for h in found {
        seen[h.row] = true;
    }
    // Each neighbour with its link: the best first-hop hyperedge naming it.
    let mut links: HashMap<&str, f32> = HashMap::new();
    for hop in kb.hyperedges.vectors.scores(query, &first_hop) {
        for &e in &kb.hyperedge_entities[hop.row] {
            let name = names.value(e as usize);
            // A name joined with `and` ("nicki minaj and american") also stands for its parts.
            let parts = name.contains(" and ").then(|| name.split(" and ")).into_iter().flatten();
            for name in std::iter::once(name).chain(parts) {
                if own.binary_search(&name).is_err() && name.chars().any(char::is_alphabetic) {
                    let link = links.entry(name).or_insert(f32::MIN);
                    *link = link.max(hop.score);
                }
            }
        }
    }
    let mut neighbours: Vec<(&str, f32)> = links.into_iter().collect();
    neighbours.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut candidates = Vec::new();
    let mut link_of: HashMap<u32, f32> = HashMap::new();
    for (name, link) in neighbours {
        let nodes = kb.by_name.get(name).filter(|nodes| nodes.len() <= MAX_BRIDGE_NODES).into_iter().flatten();
        let nodes = nodes.flat_map(|&e| kb.entity_hyperedges[e as usize].iter().map(move |&h| (h, link)));
        for (h, link) in nodes.chain(titled(kb, name).map(|h| (h, link + OWN_ARTICLE_LINK))) {
            mark(&mut seen, &mut candidates, h);
            let best = link_of.entry(h).or_insert(f32::MIN);
            *best = best.max(link);
        }
    }
    candidates.into_iter().map(|h| (h, link_of[&h])).collect()
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

/// Sentence windows: each of the top hyperedges widened to its ±`window_k` neighbours in
/// extraction order within its document, as passages ranked by their seed. Windows that overlap
/// or touch become one passage when the context is assembled (this mode always merges,
/// [`super::context`]), so a window only costs the sentences it adds.
fn sentence_windows(kb: &Kb, config: &QueryConfig, scanned: Scanned) -> Retrieval {
    let rows =
        tiered(Unit::Hyperedge, scanned.hyperedges, config.n_eh).map(|r| widen(kb, r, config.window_k)).collect();
    Retrieval { rows, ..Retrieval::default() }
}

/// A retrieved hyperedge as the passage of it and its ±`k` neighbours in extraction order within
/// its document (kb hyperedges are in reading order, so neighbours are neighbouring rows).
fn widen(kb: &Kb, r: Retrieved, k: usize) -> Retrieved {
    let h = &kb.hyperedges;
    let seed = r.row as usize;
    let same_doc = |a: usize| h.doc_id.value(a) == h.doc_id.value(seed);
    let (mut lo, mut hi) = (seed, seed);
    while lo > 0 && seed - lo < k && same_doc(lo - 1) {
        lo -= 1;
    }
    while hi + 1 < h.id.len() && hi - seed < k && same_doc(hi + 1) {
        hi += 1;
    }
    Retrieved { unit: Unit::Passage, row: lo as u32, len: (hi - lo + 1) as u32, ..r }
}

/// Best first, ties by row.
fn sorted(mut hits: Vec<Hit>) -> Vec<Hit> {
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.row.cmp(&b.row)));
    hits
}
