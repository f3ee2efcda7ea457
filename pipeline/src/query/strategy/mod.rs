//! Retrieval strategies: the paper's modes over the hypergraph, graph and clusters, and the peers
//! over the same knowledge base, each a [`Strategy`] in a file of its own.
//!
//! A strategy says what it scans ([`Strategy::plan`]: which kb tables, with which threshold and
//! breadth), how it retrieves one question from its scans ([`Strategy::retrieve`]), and what it
//! costs beyond the question's embedding ([`Strategy::embeds_entities`]). The engine plans the
//! scans of a batch, scans each table once for all its questions ([`scan`]), and hands each
//! question's hits to the strategy; a strategy that does not search the kb's vectors (SG-RAG's
//! path index) retrieves the batch its own way ([`Strategy::retrieve_prepared`]).
//!
//! Every retrieved row carries a score used to rank evidence in the context: its cosine with the
//! question (a matched entity is ranked by the cosine of its name + summary; a cluster by its
//! best retrieved member; an expanded HyperGraphRAG row by the row it was reached from).
//!
//! Adding a strategy: a file here implementing [`Strategy`], its row in the table of modes
//! ([`Mode`]), and its line in [`of`].

mod chunks;
mod chunks_maxsim;
mod graph;
mod hybrid;
mod hypergraph;
mod hypergraphrag;
mod modules;
mod none;
mod paths;
mod sentence_window;

use arrow::array::Array;
use rayon::prelude::*;
use serde::Serialize;

pub use self::modules::MAX_BRIDGE_NODES;
use super::config::{Assembly, Breadths, FILL_POOL, Mode, QueryConfig, Thresholds};
use super::kb::Kb;
use super::scan::Hit;
use super::{Engine, Prepared};
use crate::core::Result;
use crate::core::names::normalize;
pub use crate::core::units::Unit;

/// A retrieval strategy: what it scans, how it retrieves, what it costs.
pub trait Strategy: Sync {
    /// The modules it runs before the toggles narrow them (the paper's four, bridges, lexical);
    /// none for a peer.
    fn modules(&self) -> Modules {
        Modules::NONE
    }

    /// Whether it assembles its context by fusion when `query.assembly = "fused"` (else as the
    /// paper).
    fn fusable(&self) -> bool {
        false
    }

    /// Whether its context always merges evidence that overlaps (whatever `query.merge` says).
    fn always_merges(&self) -> bool {
        false
    }

    /// What it scans for a batch of questions: each kb table with its threshold and breadth.
    fn plan(&self, _config: &QueryConfig, _thresholds: Thresholds) -> ScanPlan {
        ScanPlan::default()
    }

    /// One question's retrieval from its scans.
    fn retrieve(&self, _ask: Ask<'_>, _scanned: Scanned) -> Retrieval {
        Retrieval::default()
    }

    /// What it costs beyond the question's embedding: whether it embeds the question's entities
    /// too (a second embedding call per batch).
    fn embeds_entities(&self) -> bool {
        false
    }

    /// Whether it retrieves at all (`none` answers closed-book).
    fn retrieves(&self) -> bool {
        true
    }

    /// Every prepared question's retrieval. The default plans the scans, scans once for the batch
    /// and retrieves each question from its hits ([`retrieve_batch`]); a strategy that does not
    /// search the kb's vectors retrieves its own way.
    fn retrieve_prepared(
        &self,
        engine: &Engine,
        prepared: &Prepared,
        config: &QueryConfig,
        thresholds: Thresholds,
    ) -> Result<Vec<Retrieval>> {
        Ok(retrieve_batch(&engine.kb, config, thresholds, &prepared.inputs()))
    }
}

/// What one question's retrieval reads: the kb, the configuration, the thresholds in effect, and
/// the question.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// The knowledge base.
    pub kb: &'a Kb,
    /// The strategy's configuration.
    pub config: &'a QueryConfig,
    /// The similarity thresholds in effect.
    pub thresholds: Thresholds,
    /// The question.
    pub query: QueryInput<'a>,
}

/// The strategy of `mode`.
pub fn of(mode: Mode) -> &'static dyn Strategy {
    match mode {
        Mode::Hybrid => &hybrid::HYBRID,
        Mode::Hypergraph => &hypergraph::HYPERGRAPH,
        Mode::Graph => &graph::GRAPH,
        Mode::Chunks => &chunks::Chunks,
        Mode::None => &none::None,
        Mode::Hypergraphrag => &hypergraphrag::Hypergraphrag,
        Mode::ChunksMaxsim => &chunks_maxsim::ChunksMaxsim,
        Mode::SentenceWindow => &sentence_window::SentenceWindow,
        Mode::Paths => &paths::Paths,
    }
}

impl QueryConfig {
    /// The strategy of `query.mode`.
    pub fn strategy(&self) -> &'static dyn Strategy {
        of(self.mode)
    }

    /// Whether this strategy's context merges what overlaps ([`QueryConfig::merge`], and always
    /// for sentence windows, widened hyperedges and the fused assembly).
    pub fn merges(&self) -> bool {
        self.merge || self.strategy().always_merges() || self.widen > 0 || self.fuses()
    }

    /// Whether this strategy assembles its context by fusion: the fused assembly of hybrid or
    /// hypergraph (graph, whose modules are entities and edges, keeps the paper's).
    pub fn fuses(&self) -> bool {
        self.assembly == Assembly::Fused && self.strategy().fusable()
    }

    /// Whether this strategy fills its cap ([`QueryConfig::fill`] with a cap set).
    pub fn fills(&self) -> bool {
        self.fill && self.max_context_tokens > 0
    }

    /// The candidates each module offers: its configured breadth, or at least [`FILL_POOL`]
    /// when the strategy fills its cap or fuses rankings (a breadth of 0 stays 0: the module is
    /// off).
    pub fn breadths(&self) -> Breadths {
        // The fused assembly ranks whole pools and takes its breadths from them.
        let pool = |n: usize| if (self.fills() || self.fuses()) && n > 0 { n.max(FILL_POOL) } else { n };
        Breadths {
            hyperedges: pool(self.n_eh),
            edges: pool(self.n_e),
            bridges: pool(self.n_b),
            chunks: pool(self.chunk_k),
        }
    }
}

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
    /// No module: what the peers run.
    pub const NONE: Modules =
        Modules { entities: false, hyperedges: false, edges: false, clusters: false, bridges: false, lexical: false };

    /// The modules of a FlexStructRAG mode with the configured toggles applied (peers: none).
    pub fn of(config: &QueryConfig) -> Modules {
        let full = config.strategy().modules();
        Modules {
            entities: full.entities && config.entities,
            hyperedges: full.hyperedges && config.hyperedges,
            edges: full.edges && config.edges,
            clusters: full.clusters && config.clusters,
            bridges: full.bridges && config.bridges && config.n_b > 0,
            lexical: full.lexical && config.lexical && config.fuses(),
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

/// One table's scan: the rows above `threshold`, the best `k` of them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scan {
    /// Least cosine (`f32::MIN`: none; a threshold above it is noted when nothing passes).
    pub threshold: f32,
    /// Most rows.
    pub k: usize,
}

impl Scan {
    /// The best `k` rows, whatever their cosine.
    pub fn top(k: usize) -> Scan {
        Scan { threshold: f32::MIN, k }
    }
}

/// What a strategy scans for a batch of questions.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ScanPlan {
    /// Hyperedges by the question's vector.
    pub hyperedges: Option<Scan>,
    /// Edges by the question's vector.
    pub edges: Option<Scan>,
    /// Chunks by the question's vector.
    pub chunks: Option<Scan>,
    /// Entities: the best this many for each of the question's entities (their vectors), or for
    /// the question when it has none (HyperGraphRAG).
    pub entities: Option<usize>,
}

/// The vector scans of one question: the top rows of each table its strategy searches.
#[derive(Debug, Clone, Default)]
pub struct Scanned {
    /// Hyperedges, best first.
    pub hyperedges: Vec<Hit>,
    /// Edges, best first.
    pub edges: Vec<Hit>,
    /// Chunks, best first.
    pub chunks: Vec<Hit>,
    /// The top entities of each probe (the question's entities, else the question).
    pub entities: Vec<Vec<Hit>>,
}

/// Runs the configured strategy for one question.
pub fn retrieve(kb: &Kb, config: &QueryConfig, thresholds: Thresholds, query: QueryInput<'_>) -> Retrieval {
    retrieve_batch(kb, config, thresholds, &[query]).pop().unwrap_or_default()
}

/// Runs the configured strategy for a batch of questions: its plan scanned once for all of them
/// (see [`flexstruct_scan::top_k_batch`]), then each question retrieved from its hits.
pub fn retrieve_batch(
    kb: &Kb,
    config: &QueryConfig,
    thresholds: Thresholds,
    queries: &[QueryInput<'_>],
) -> Vec<Retrieval> {
    let strategy = config.strategy();
    let plan = strategy.plan(config, thresholds);
    // Each question's lookups run on any core: a batch is spread like its scans.
    scan(kb, &plan, queries)
        .into_par_iter()
        .zip(queries)
        .map(|(scanned, query)| {
            let notes = threshold_notes(kb, &plan, &scanned);
            let mut retrieval = strategy.retrieve(Ask { kb, config, thresholds, query: *query }, scanned);
            retrieval.notes = notes;
            retrieval
        })
        .collect()
}

/// A note for each kind of unit whose similarity scan came back empty because of its threshold
/// (the kb has such units, none is as similar to the question as the threshold asks), or because
/// the strategy asks for none of them (a breadth of 0), so that an answer from little or no
/// evidence says why.
fn threshold_notes(kb: &Kb, plan: &ScanPlan, scanned: &Scanned) -> Vec<String> {
    let scans = [
        ("hyperedge", "tau_eh", "n_eh", plan.hyperedges, &scanned.hyperedges, kb.hyperedges.vectors.len()),
        ("edge", "tau_e", "n_e", plan.edges, &scanned.edges, kb.edges.vectors.len()),
        ("chunk", "tau_chunk", "chunk_k", plan.chunks, &scanned.chunks, kb.chunks.vectors.len()),
    ];
    scans
        .into_iter()
        .filter_map(|(unit, tau_key, breadth_key, scan, hits, units)| {
            let Scan { threshold: tau, k } = scan?;
            if !hits.is_empty() || units == 0 {
                return None;
            }
            if k == 0 {
                return Some(format!(
                    "no {unit} is retrieved: the strategy asks for 0 of them (query.{breadth_key}, or its own breadth, \
                     is 0)"
                ));
            }
            (tau > f32::MIN).then(|| {
                format!(
                    "no {unit} of the kb is as similar to the question as the threshold {tau:.3} asks \
                     (query.{tau_key}); lower it to search wider"
                )
            })
        })
        .collect()
}

/// Scans each table of `plan` once for every question.
pub fn scan(kb: &Kb, plan: &ScanPlan, queries: &[QueryInput<'_>]) -> Vec<Scanned> {
    let mut out = vec![Scanned::default(); queries.len()];
    let vectors: Vec<&[f32]> = queries.iter().map(|q| q.vector).collect();
    let tables = [
        (plan.hyperedges, &kb.hyperedges.vectors, (|s| &mut s.hyperedges) as fn(&mut Scanned) -> &mut Vec<Hit>),
        (plan.edges, &kb.edges.vectors, |s| &mut s.edges),
        (plan.chunks, &kb.chunks.vectors, |s| &mut s.chunks),
    ];
    for (scan, vectors_of, slot) in tables {
        let Some(scan) = scan else { continue };
        for (scanned, hits) in out.iter_mut().zip(vectors_of.top_k_batch(&vectors, scan.threshold, scan.k)) {
            *slot(scanned) = hits;
        }
    }
    if let Some(k) = plan.entities {
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
        let mut entity_hits = kb.entities.vectors.top_k_batch(&probes.concat(), f32::MIN, k).into_iter();
        for (scanned, probes) in out.iter_mut().zip(&probes) {
            scanned.entities = entity_hits.by_ref().take(probes.len()).collect();
        }
    }
    out
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
