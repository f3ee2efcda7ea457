//! SG-RAG's structure-guided retrieval (seed 002) over the kb's graph: `--mode paths`.
//!
//! ```text
//! question ─ψ─▶ query graph (entities, unknowns, relation words) ─normalise─▶ kb nodes
//!          ─decompose─▶ query paths ─complete─▶ labelled query paths (wildcards from I_l)
//!          ─σ─▶ matching kb paths (R*-tree I_l) ─δ─▶ conflict-free subgraphs ≅ query graph
//!          ─γ─▶ their edges' source sentences, cited │ none: the entities' 1-hop neighbourhood
//! ```
//!
//! The path index is built offline by the paths stage (kb/path_nodes, kb/paths,
//! kb/path_members); [`PathIndex::load`] reads it and bulk-loads one R*-tree per path length
//! ([`tree`]). Where this departs from the seed, and why:
//! - o₀ equality at a leaf is node identity: every node has its own label (one node per
//!   normalised entity name), so the two are the same test, without float comparisons;
//! - relations are not part of exact matching (the seed's paths are node sequences too): the
//!   question's relation words rank the candidates — unknown labels, paths, subgraphs — by the
//!   similarity of the kb edges between the matched nodes, since a rules-extracted question
//!   never names a relation as the document did;
//! - ψ is the LLM's when `[llm]` is set ([`psi`]), else rules ([`graph`]); the dominant
//!   embeddings are the seed's GNN (`dominance = "gat"`, trained with the dominance loss) or,
//!   by default, sketches that hold dominance by construction ([`crate::core::dominance`]) —
//!   the trained encoder misses true matches where training left a violation, the sketch never
//!   does;
//! - the fallback neighbourhood of an entity is its kb edges and the facts (hyperedges) that
//!   name it: the rules draw binary edges only around well-connected entities, while every
//!   entity has its facts;
//! - bounds keep a question's work small whatever the graph: at most [`MAX_MATCHES`] kb paths per
//!   traversal, [`MAX_CANDIDATES`] labels per unknown node, [`MAX_LABELLINGS`] labellings per
//!   query path, [`MAX_COMBINATIONS`] path combinations and [`MAX_SUBGRAPHS`] subgraphs.

pub mod graph;
pub mod psi;
pub mod tree;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use arrow::array::{AsArray, FixedSizeListArray, Int32Array, ListArray};
use arrow::datatypes::Float32Type;
use flexstruct_schemas::{Table, col};

use self::graph::{QueryGraph, decompose};
use self::tree::{PER_NODE, PathTree, QueryBox, Visit};
use super::kb::Kb;
use super::scan::Vectors;
pub use super::strategy::{Outcome, StructureMatch};
use super::strategy::{QueryInput, Retrieved, Unit};
use crate::core::dominance::{Encoder, GatEncoder, SketchShape, dominated};
use crate::core::heap::HeapSize;
use crate::core::names::normalize;
use crate::core::{Error, IndexProblem, Result};
use crate::io::Index;
use crate::io::kb::one_batch;
use crate::io::parquet::{kb_of_derived, part_fingerprint, read_table, string_column, typed};

pub use self::graph::rules_query_graph;
pub use self::psi::{GraphOrigin, LlmQueryGraphs, QueryGraphs, RulesQueryGraphs};

/// Most kb paths one traversal of the tree collects.
pub const MAX_MATCHES: usize = 512;
/// Candidate labels kept per unknown node (the best by relation similarity).
pub const MAX_CANDIDATES: usize = 16;
/// Most labellings of one query path matched.
pub const MAX_LABELLINGS: usize = 256;
/// Most combinations of candidate paths the assembly tries per question.
pub const MAX_COMBINATIONS: usize = 20_000;
/// Most subgraphs given per question (best first).
pub const MAX_SUBGRAPHS: usize = 32;
/// Seed of the fixed random projection of label embeddings.
const PROJECTION_SEED: u64 = 0x5347_5241_4721;

/// The path index in memory.
pub struct PathIndex {
    /// Node labels.
    pub label: Vec<String>,
    norm: Vec<String>,
    node_of_norm: HashMap<String, u32>,
    /// Label embeddings o₀, row per node.
    labels: Vectors,
    /// Dominant embeddings o, `encoder.len()` per node.
    dominant: Vec<f32>,
    /// How stars became them (the query's stars become theirs the same way).
    encoder: Encoder,
    /// kb edge rows between two nodes (both orders), in kb order.
    pair_edges: HashMap<(u32, u32), Vec<u32>>,
    /// kb entity rows of each node.
    node_entities: Vec<Vec<u32>>,
    /// Neighbours of each node.
    neighbours: Vec<Vec<u32>>,
    /// Per length l (index l − 1): the paths' nodes, l + 1 per path, and the tree.
    paths: Vec<(Vec<u32>, PathTree)>,
    /// Projection rows (2 × label width).
    projection: Vec<f32>,
    /// Figures of the index.
    pub stats: PathStats,
    /// What the questions retrieved so far did, summed.
    pub tally: Tally,
}

/// What the questions retrieved from one path index did, summed (for a run's summary).
#[derive(Debug, Default)]
pub struct Tally {
    /// Questions whose graph matched exactly.
    pub exact: AtomicUsize,
    /// Questions answered from the neighbourhood.
    pub neighbourhood: AtomicUsize,
    /// Questions with no entity that became a node.
    pub nothing: AtomicUsize,
    /// R*-tree nodes opened (their MBR met the query box).
    pub opened: AtomicUsize,
    /// R*-tree nodes pruned by their MBR.
    pub pruned: AtomicUsize,
    /// Leaf paths tested against the full vectors.
    pub tested: AtomicUsize,
}

impl Tally {
    fn add(&self, retrieval: &PathRetrieval) {
        let outcome = match retrieval.structure.outcome {
            Outcome::Exact => &self.exact,
            Outcome::Neighbourhood => &self.neighbourhood,
            Outcome::Nothing => &self.nothing,
        };
        outcome.fetch_add(1, Ordering::Relaxed);
        self.opened.fetch_add(retrieval.visit.opened, Ordering::Relaxed);
        self.pruned.fetch_add(retrieval.visit.pruned, Ordering::Relaxed);
        self.tested.fetch_add(retrieval.visit.tested, Ordering::Relaxed);
    }

    /// One line for a person: outcomes and the trees' pruning.
    pub fn summary(&self) -> String {
        let get = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        let (opened, pruned) = (get(&self.opened), get(&self.pruned));
        format!(
            "exact match {}, neighbourhood {}, no node {}; R*-tree nodes reached {}, pruned by their MBRs {} ({:.1} %), leaf paths tested {}",
            get(&self.exact),
            get(&self.neighbourhood),
            get(&self.nothing),
            opened + pruned,
            pruned,
            100.0 * pruned as f64 / (opened + pruned).max(1) as f64,
            get(&self.tested)
        )
    }
}

impl std::fmt::Debug for PathIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PathIndex").field("stats", &self.stats).finish_non_exhaustive()
    }
}

/// Figures of a loaded path index.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct PathStats {
    /// Nodes.
    pub nodes: usize,
    /// Node pairs joined by a kb edge.
    pub edges: usize,
    /// Paths per length (1, 2, 3 edges).
    pub paths: Vec<usize>,
    /// R*-tree depth per length.
    pub depths: Vec<usize>,
    /// Seconds to read the tables and build the trees.
    pub load_seconds: f64,
}

/// One question's input to structure-guided retrieval.
#[derive(Debug, Clone, Copy)]
pub struct PathQuery<'a> {
    /// The question's graph.
    pub graph: &'a QueryGraph,
    /// The question: its embedding ranks the fallback neighbourhood, its entities' embeddings
    /// normalise the graph's entities.
    pub question: QueryInput<'a>,
    /// Embeddings of the graph's relation words, and of its mentions that are not among the
    /// question's entities (an LLM's graph may name them otherwise), by text.
    pub texts: &'a HashMap<String, Vec<f32>>,
}

/// What structure-guided retrieval found for one question.
#[derive(Debug, Clone)]
pub struct PathRetrieval {
    /// Evidence rows (hyperedges behind the matched edges; edges without one).
    pub rows: Vec<Retrieved>,
    /// What happened, and the labels matched for the nodes asked for.
    pub structure: StructureMatch,
    /// Notes for the answer (which of exact match or fallback, and why).
    pub notes: Vec<String>,
    /// Tree traversal figures, summed over the question's traversals.
    pub visit: Visit,
}

/// A candidate kb path of one query path: its nodes and its relation score.
#[derive(Debug, Clone)]
struct Candidate {
    nodes: Vec<u32>,
    score: f32,
}

impl HeapSize for PathIndex {
    fn heap_size(&self) -> usize {
        let encoder = match &self.encoder {
            Encoder::Sketch(_) => 0,
            Encoder::Gat(gat) => gat.params().iter().map(|p| size_of_val(p.3)).sum(),
        };
        self.label.heap_size()
            + self.norm.heap_size()
            + self.node_of_norm.heap_size()
            + self.labels.heap_sizes().0
            + self.dominant.heap_size()
            + encoder
            + self.pair_edges.heap_size()
            + self.node_entities.heap_size()
            + self.neighbours.heap_size()
            + self.paths.heap_size()
            + self.projection.heap_size()
    }
}

impl PathIndex {
    /// Reads the path index of `index` for `kb` (which must be the kb it was built from).
    pub fn load(index: &Index, kb: &Kb) -> Result<PathIndex> {
        let started = Instant::now();
        let mut fingerprints = Vec::new();
        for table in [Table::KbPathEncoder, Table::KbPathNodes, Table::KbPathMembers, Table::KbPaths] {
            fingerprints.push(part_fingerprint(&index.kb_part(table), table)?);
        }
        if fingerprints.iter().any(Option::is_none) {
            return Err(Error::index(index.root(), IndexProblem::NoPathIndex { stale: false }));
        }
        let current = fingerprints.windows(2).all(|w| w[0] == w[1])
            && fingerprints[0].as_deref().map(kb_of_derived) == Some(kb.fingerprint.as_str());
        if !current {
            return Err(Error::index(index.root(), IndexProblem::NoPathIndex { stale: true }));
        }
        let nodes = one_batch(Table::KbPathNodes, read_table(index, Table::KbPathNodes)?)?;
        let members = one_batch(Table::KbPathMembers, read_table(index, Table::KbPathMembers)?)?;
        if let Some(other) = string_column(&nodes, col::MODEL)?.iter().flatten().find(|m| *m != kb.model) {
            return Err(Error::index(
                index.root(),
                IndexProblem::ModelMismatch {
                    table: Table::KbPathNodes.to_string(),
                    found: other.to_owned(),
                    configured: kb.model.clone(),
                },
            ));
        }
        let node_ids = string_column(&nodes, col::NODE_ID)?;
        let node_row: HashMap<&str, u32> =
            node_ids.iter().enumerate().filter_map(|(i, id)| Some((id?, i as u32))).collect();
        let norm: Vec<String> =
            string_column(&nodes, col::NORM_NAME)?.iter().map(|n| n.unwrap_or_default().to_owned()).collect();
        let label: Vec<String> =
            string_column(&nodes, col::LABEL)?.iter().map(|n| n.unwrap_or_default().to_owned()).collect();
        let entity_row: HashMap<&str, u32> =
            kb.entities.id.iter().enumerate().filter_map(|(i, id)| Some((id?, i as u32))).collect();
        let mut node_of_entity: HashMap<u32, u32> = HashMap::new();
        let mut node_entities = vec![Vec::new(); nodes.num_rows()];
        let lists = typed::<ListArray>(&nodes, col::ENTITY_IDS)?;
        for (node, rows) in node_entities.iter_mut().enumerate() {
            for id in lists.value(node).as_string::<i32>().iter().flatten() {
                if let Some(&e) = entity_row.get(id) {
                    node_of_entity.insert(e, node as u32);
                    rows.push(e);
                }
            }
        }
        let vectors_of = |column: &str| -> Result<(usize, Vec<f32>)> {
            let list = typed::<FixedSizeListArray>(&nodes, column)?;
            Ok((list.value_length() as usize, list.values().as_primitive::<Float32Type>().values().to_vec()))
        };
        let (label_dim, label_values) = vectors_of(col::EMBEDDING)?;
        let (width, dominant) = vectors_of(col::DOMINANT)?;
        let encoder = read_encoder(index)?;
        if encoder.len() != width {
            return Err(damaged(
                index,
                format!(
                    "kb/path_nodes holds dominant embeddings of {width} values, its encoder makes {}",
                    encoder.len()
                ),
            ));
        }
        let labels = Vectors::new(label_dim, label_values.into());

        let mut pair_edges: HashMap<(u32, u32), Vec<u32>> = HashMap::new();
        for (row, ends) in kb.edges.ends.iter().enumerate() {
            let node = |e: Option<u32>| e.and_then(|e| node_of_entity.get(&e).copied());
            if let (Some(a), Some(b)) = (node(ends[0]), node(ends[1]))
                && a != b
            {
                pair_edges.entry((a, b)).or_default().push(row as u32);
                pair_edges.entry((b, a)).or_default().push(row as u32);
            }
        }
        let mut neighbours = vec![Vec::new(); norm.len()];
        for &(a, b) in pair_edges.keys() {
            neighbours[a as usize].push(b);
        }
        for n in &mut neighbours {
            n.sort_unstable();
        }

        // Built in this process for the tree and the queries alike, so any fixed draw will do.
        let mut rng = fastrand::Rng::with_seed(PROJECTION_SEED);
        let projection: Vec<f32> = (0..2 * label_dim).map(|_| rng.f32() * 2.0 - 1.0).collect();
        let mut index_ = PathIndex {
            label,
            node_of_norm: norm.iter().enumerate().map(|(i, n)| (n.clone(), i as u32)).collect(),
            norm,
            labels,
            dominant,
            encoder,
            pair_edges,
            node_entities,
            neighbours,
            paths: Vec::new(),
            projection,
            stats: PathStats::default(),
            tally: Tally::default(),
        };
        // Members: each path's nodes in order, paths one after the other.
        let (member_path, position, member_node) = (
            string_column(&members, col::PATH_ID)?,
            typed::<Int32Array>(&members, col::POSITION)?,
            string_column(&members, col::NODE_ID)?,
        );
        let mut by_length: Vec<Vec<u32>> = vec![Vec::new(); 3];
        let mut row = 0;
        while row < members.num_rows() {
            let id = member_path.value(row);
            let mut end = row;
            while end < members.num_rows() && member_path.value(end) == id {
                if position.value(end) as usize != end - row {
                    return Err(damaged(index, format!("path {id}: its members are not in order")));
                }
                end += 1;
            }
            let length = end - row - 1;
            if !(1..=3).contains(&length) {
                return Err(damaged(index, format!("path {id} has {length} edges (1 to 3 are indexed)")));
            }
            for r in row..end {
                let node = node_row.get(member_node.value(r)).ok_or_else(|| {
                    damaged(
                        index,
                        format!("path {id} names node {}, which is not in kb/path_nodes", member_node.value(r)),
                    )
                })?;
                by_length[length - 1].push(*node);
            }
            row = end;
        }
        for (l, flat) in by_length.into_iter().enumerate() {
            let width = l + 2;
            let count = flat.len() / width;
            let mut points = Vec::with_capacity(count * width * PER_NODE);
            for path in flat.chunks(width) {
                for &v in path {
                    points.extend(index_.reduced(v));
                }
            }
            let ids: Vec<u32> = (0..count as u32).collect();
            let tree = PathTree::build(l + 1, &points, &ids);
            index_.stats.paths.push(count);
            index_.stats.depths.push(if count == 0 { 0 } else { tree.depth() });
            index_.paths.push((flat, tree));
        }
        index_.stats.nodes = index_.norm.len();
        index_.stats.edges = index_.pair_edges.len() / 2;
        index_.stats.load_seconds = started.elapsed().as_secs_f64();
        Ok(index_)
    }

    /// The longest indexed path, in edges.
    pub fn max_length(&self) -> usize {
        self.paths.iter().rposition(|(flat, _)| !flat.is_empty()).map_or(1, |l| l + 1)
    }

    fn dominant(&self, node: u32) -> &[f32] {
        let w = self.encoder.len();
        &self.dominant[node as usize * w..(node as usize + 1) * w]
    }

    /// Reduced coordinates of a node: the projection of o₀, then the two reductions of o.
    fn reduced(&self, node: u32) -> [f32; PER_NODE] {
        let (p0, p1) = self.projection.split_at(self.labels.dim());
        let [s0, s1] = self.encoder.reduce(self.dominant(node));
        [self.labels.dot(p0, node as usize), self.labels.dot(p1, node as usize), s0, s1]
    }

    /// The node a mention of the question stands for: the node of its normalised name, else the
    /// node whose label embedding is the most similar to the mention's (entity normalisation).
    fn normalise(&self, mention: &str, vector: Option<&[f32]>) -> Option<(u32, f32)> {
        if let Some(&node) = self.node_of_norm.get(&normalize(mention)) {
            return Some((node, 1.0));
        }
        let hit = self.labels.top_k_batch(&[vector?], f32::MIN, 1).pop()?.pop()?;
        Some((hit.row as u32, hit.score))
    }

    /// The best similarity of a relation to the kb edges between two nodes (−1: no edge).
    fn relation_score(&self, kb: &Kb, relation: &[f32], a: u32, b: u32) -> f32 {
        self.pair_edges
            .get(&(a, b))
            .map_or(-1.0, |rows| rows.iter().map(|&r| kb.edges.vectors.dot(relation, r as usize)).fold(-1.0, f32::max))
    }

    /// Structure-guided retrieval for one question, counted in [`PathIndex::tally`].
    pub fn retrieve(&self, kb: &Kb, query: PathQuery<'_>) -> PathRetrieval {
        let out = self.retrieve_one(kb, query);
        self.tally.add(&out);
        out
    }

    fn retrieve_one(&self, kb: &Kb, query: PathQuery<'_>) -> PathRetrieval {
        let graph = query.graph;
        let mut out = PathRetrieval {
            rows: Vec::new(),
            structure: StructureMatch { outcome: Outcome::Nothing, answers: Vec::new() },
            notes: Vec::new(),
            visit: Visit::default(),
        };
        // Normalisation: each mention → a kb node.
        let mut mapped: Vec<Option<u32>> = vec![None; graph.nodes.len()];
        let mut names = Vec::new();
        for (n, node) in graph.nodes.iter().enumerate() {
            let Some(mention) = &node.mention else { continue };
            let vector = query
                .question
                .entities
                .iter()
                .position(|e| e.eq_ignore_ascii_case(mention))
                .and_then(|i| query.question.entity_vectors.get(i))
                .or_else(|| query.texts.get(mention))
                .map(Vec::as_slice);
            if let Some((v, _)) = self.normalise(mention, vector) {
                mapped[n] = Some(v);
                names.push(format!("{mention} → {}", self.label[v as usize]));
            }
        }
        if mapped.iter().all(Option::is_none) {
            out.notes.push("paths: no entity of the question matched a node of the graph".to_owned());
            return out;
        }
        let relation_of = |a: usize, b: usize| -> &[f32] {
            graph
                .edge_between(a, b)
                .and_then(|e| query.texts.get(&e.relation))
                .map_or(query.question.vector, Vec::as_slice)
        };
        let paths = decompose(graph, self.max_length());
        let mut per_path: Vec<Vec<Candidate>> = Vec::new();
        for path in &paths {
            let candidates = self.match_query_path(kb, graph, path, &mapped, &relation_of, &mut out.visit);
            per_path.push(candidates);
        }
        let subgraphs = assemble(graph.nodes.len(), &paths, &per_path, &mapped);
        if subgraphs.is_empty() {
            out.structure.outcome = Outcome::Neighbourhood;
            out.notes.push(format!(
                "paths: no exact match for a query graph of {} nodes and {} edges ({}); the 1-hop neighbourhood of its entities instead",
                graph.nodes.len(),
                graph.edges.len(),
                names.join(", ")
            ));
            out.rows = self.neighbourhood(kb, &mapped, query.question.vector);
            return out;
        }
        // Score each subgraph by its edges' relation similarity; evidence best subgraph first.
        let mut scored: Vec<(f32, Vec<u32>)> = subgraphs
            .into_iter()
            .map(|m| {
                let score =
                    graph.edges.iter().map(|e| self.relation_score(kb, relation_of(e.a, e.b), m[e.a], m[e.b])).sum();
                (score, m)
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        scored.truncate(MAX_SUBGRAPHS);
        out.structure.outcome = Outcome::Exact;
        out.notes.push(format!(
            "paths: exact match, {} subgraph(s) for a query graph of {} nodes and {} edges in {} path(s) ({})",
            scored.len(),
            graph.nodes.len(),
            graph.edges.len(),
            paths.len(),
            names.join(", ")
        ));
        let answer_node = graph.nodes.iter().any(|n| n.answer);
        let asked: Vec<usize> = (0..graph.nodes.len())
            .filter(|&n| if answer_node { graph.nodes[n].answer } else { graph.nodes[n].mention.is_none() })
            .collect();
        for (_, m) in &scored {
            for &q in &asked {
                let label = &self.label[m[q] as usize];
                if !out.structure.answers.contains(label) {
                    out.structure.answers.push(label.clone());
                }
            }
        }
        let count = scored.len() as f32;
        for (rank, (_, m)) in scored.iter().enumerate() {
            // Every subgraph's evidence before the next one's; within it, edges by relation.
            let base = count - rank as f32;
            for e in &graph.edges {
                let relation = relation_of(e.a, e.b);
                for &row in self.pair_edges.get(&(m[e.a], m[e.b])).into_iter().flatten() {
                    let similarity = kb.edges.vectors.dot(relation, row as usize);
                    out.rows.push(edge_evidence(kb, row, base + similarity.clamp(-1.0, 1.0) / 4.0));
                }
            }
        }
        out
    }

    /// Candidate kb paths of one query path: its unknown nodes completed from the tree
    /// (wildcards), every labelling matched exactly (σ), ranked by relation similarity.
    fn match_query_path<'q>(
        &self,
        kb: &Kb,
        graph: &QueryGraph,
        path: &[usize],
        mapped: &[Option<u32>],
        relation_of: &dyn Fn(usize, usize) -> &'q [f32],
        visit: &mut Visit,
    ) -> Vec<Candidate> {
        let length = path.len() - 1;
        let Some((flat, tree)) = self.paths.get(length - 1) else { return Vec::new() };
        // The query nodes' dominant embeddings: known neighbours by name, unknown ones counted.
        let name = |v: u32| self.norm[v as usize].as_str();
        let sketches: Vec<Vec<f32>> = path
            .iter()
            .map(|&q| {
                let (known, unknown): (Vec<usize>, Vec<usize>) =
                    graph.neighbours(q).partition(|&n| mapped[n].is_some());
                self.encoder.encode(
                    mapped[q].map(name),
                    known.iter().filter_map(|&n| mapped[n]).map(name),
                    unknown.len(),
                )
            })
            .collect();
        let score = |nodes: &[u32]| -> f32 {
            path.windows(2)
                .zip(nodes.windows(2))
                .map(|(q, v)| self.relation_score(kb, relation_of(q[0], q[1]), v[0], v[1]))
                .sum()
        };
        // Each direction of a path is indexed from its own start node (each start keeps at most
        // `max_paths_per_node`), so a query path is looked up both ways; matches come back in the
        // query path's order.
        let search = |labels: &[Option<u32>], limit: usize, visit: &mut Visit| -> Vec<Vec<u32>> {
            let width = length + 1;
            let mut out: Vec<Vec<u32>> = Vec::new();
            for reversed in [false, true] {
                let turn = |i: usize| if reversed { width - 1 - i } else { i };
                let labels: Vec<Option<u32>> = (0..width).map(|i| labels[turn(i)]).collect();
                let sketches: Vec<&Vec<f32>> = (0..width).map(|i| &sketches[turn(i)]).collect();
                let query = self.query_box(&labels, &sketches);
                let (found, v) = tree.search(&query, limit, |id| {
                    let nodes = &flat[id as usize * width..(id as usize + 1) * width];
                    nodes.iter().zip(&labels).all(|(n, l)| l.is_none_or(|l| l == *n))
                        && nodes.iter().zip(&sketches).all(|(&n, s)| dominated(s, self.dominant(n)))
                });
                visit.opened += v.opened;
                visit.pruned += v.pruned;
                visit.tested += v.tested;
                for id in found {
                    let nodes = &flat[id as usize * width..(id as usize + 1) * width];
                    let nodes: Vec<u32> = (0..width).map(|i| nodes[turn(i)]).collect();
                    if out.len() < limit && !out.contains(&nodes) {
                        out.push(nodes);
                    }
                }
                if out.len() >= limit {
                    break;
                }
            }
            out
        };
        let labels: Vec<Option<u32>> = path.iter().map(|&q| mapped[q]).collect();
        let unknown: Vec<usize> = (0..path.len()).filter(|&i| labels[i].is_none()).collect();
        if unknown.is_empty() {
            return search(&labels, 1, visit)
                .into_iter()
                .map(|nodes| Candidate { score: score(&nodes), nodes })
                .collect();
        }
        // Label completion: the wildcards' candidate labels, from the paths that match the known
        // positions, each kept at its best path's score.
        let mut completions: Vec<(f32, Vec<u32>)> =
            search(&labels, MAX_MATCHES, visit).into_iter().map(|nodes| (score(&nodes), nodes)).collect();
        completions.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let mut candidates: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
        for (_, nodes) in &completions {
            for &i in &unknown {
                let list = candidates.entry(i).or_default();
                if list.len() < MAX_CANDIDATES && !list.contains(&nodes[i]) {
                    list.push(nodes[i]);
                }
            }
        }
        // Every labelling (bounded), matched exactly.
        let mut labellings: Vec<Vec<Option<u32>>> = vec![labels];
        for &i in &unknown {
            let options = candidates.get(&i).map_or(&[][..], Vec::as_slice);
            labellings = labellings
                .iter()
                .flat_map(|l| {
                    options.iter().map(move |&v| {
                        let mut l = l.clone();
                        l[i] = Some(v);
                        l
                    })
                })
                .take(MAX_LABELLINGS)
                .collect();
        }
        let mut seen = HashSet::new();
        let mut out: Vec<Candidate> = labellings
            .iter()
            .filter(|l| l.iter().all(Option::is_some))
            .flat_map(|l| search(l, 1, visit))
            .filter(|nodes| seen.insert(nodes.clone()))
            .map(|nodes| Candidate { score: score(&nodes), nodes })
            .collect();
        out.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.nodes.cmp(&b.nodes)));
        out
    }

    /// The query box of a query path: labelled positions fixed, unknown ones free, every
    /// position's structure at least its sketch.
    fn query_box(&self, labels: &[Option<u32>], sketches: &[&Vec<f32>]) -> QueryBox {
        let mut lower = Vec::with_capacity(labels.len() * PER_NODE);
        let mut upper = Vec::with_capacity(labels.len() * PER_NODE);
        for (label, sketch) in labels.iter().zip(sketches) {
            let at_least = self.encoder.reduce(sketch);
            match label {
                Some(v) => {
                    let r = self.reduced(*v);
                    lower.extend([r[0], r[1]]);
                    upper.extend([r[0], r[1]]);
                }
                None => {
                    lower.extend([f32::MIN, f32::MIN]);
                    upper.extend([f32::MAX, f32::MAX]);
                }
            }
            lower.extend(at_least);
            upper.extend([f32::MAX, f32::MAX]);
        }
        QueryBox { lower, upper }
    }

    /// The fallback, the 1-hop neighbourhood of the mapped nodes: their kb edges and the facts
    /// (hyperedges) that name them, by similarity to the question.
    fn neighbourhood(&self, kb: &Kb, mapped: &[Option<u32>], question: &[f32]) -> Vec<Retrieved> {
        let mut rows = Vec::new();
        let mut seen = HashSet::new();
        let mut add = |r: Retrieved| {
            if seen.insert((r.unit, r.row)) {
                rows.push(r);
            }
        };
        for &v in mapped.iter().flatten() {
            for &u in &self.neighbours[v as usize] {
                for &row in self.pair_edges.get(&(v, u)).into_iter().flatten() {
                    add(edge_evidence(kb, row, kb.edges.vectors.dot(question, row as usize)));
                }
            }
            for &e in &self.node_entities[v as usize] {
                for &h in &kb.entity_hyperedges[e as usize] {
                    let score = kb.hyperedges.vectors.dot(question, h as usize);
                    add(Retrieved { unit: Unit::Hyperedge, row: h, score, len: 1, tier: 0, focus: None });
                }
            }
        }
        rows
    }
}

/// A kb edge as evidence: the hyperedge it was read from (its whole source sentence), or the
/// edge itself when it has none.
fn edge_evidence(kb: &Kb, row: u32, score: f32) -> Retrieved {
    match kb.edges.hyperedge[row as usize] {
        Some(h) => Retrieved { unit: Unit::Hyperedge, row: h, score, len: 1, tier: 0, focus: None },
        None => Retrieved { unit: Unit::Edge, row, score, len: 1, tier: 0, focus: None },
    }
}

/// The dominant-embedding encoder of the path index (`kb/path_encoder`).
fn read_encoder(index: &Index) -> Result<Encoder> {
    let batch = one_batch(Table::KbPathEncoder, read_table(index, Table::KbPathEncoder)?)?;
    let (kind, param) = (string_column(&batch, col::KIND)?, string_column(&batch, col::PARAM)?);
    let (rows, cols) = (typed::<Int32Array>(&batch, col::N_ROWS)?, typed::<Int32Array>(&batch, col::N_COLS)?);
    let weights = typed::<ListArray>(&batch, col::WEIGHTS)?;
    let mut params = HashMap::new();
    for r in 0..batch.num_rows() {
        let values = weights.value(r).as_primitive::<Float32Type>().values().to_vec();
        params
            .insert(param.value(r).to_owned(), (rows.value(r).max(0) as usize, cols.value(r).max(0) as usize, values));
    }
    let kinds: HashSet<&str> = kind.iter().flatten().collect();
    match kinds.into_iter().collect::<Vec<_>>().as_slice() {
        ["sketch"] => match params.get("hashed_positions") {
            Some((1, 1, v)) if v.len() == 1 && v[0] >= 2.0 => Ok(Encoder::Sketch(SketchShape { dims: v[0] as usize })),
            _ => Err(damaged(index, "kb/path_encoder: a sketch needs its hashed_positions (1×1, at least 2)".into())),
        },
        ["gat"] => GatEncoder::from_params(&params)
            .map(Encoder::Gat)
            .map_err(|problem| damaged(index, format!("kb/path_encoder: {problem}"))),
        other => Err(damaged(index, format!("kb/path_encoder names encoders {other:?} (one of sketch, gat)"))),
    }
}

/// δ: every conflict-free combination of one candidate per query path — each query node one kb
/// node, distinct query nodes distinct kb nodes — as the kb node of each query node (complete
/// assignments only), in the order found (candidates are ranked, so the best come first).
fn assemble(
    nodes: usize,
    paths: &[Vec<usize>],
    candidates: &[Vec<Candidate>],
    mapped: &[Option<u32>],
) -> Vec<Vec<u32>> {
    fn go(
        i: usize,
        paths: &[Vec<usize>],
        candidates: &[Vec<Candidate>],
        assignment: &mut Vec<Option<u32>>,
        tried: &mut usize,
        out: &mut Vec<Vec<u32>>,
    ) {
        if i == paths.len() {
            if let Some(full) = assignment.iter().copied().collect::<Option<Vec<u32>>>() {
                out.push(full);
            }
            return;
        }
        for c in &candidates[i] {
            if *tried >= MAX_COMBINATIONS {
                return;
            }
            *tried += 1;
            let fits = paths[i].iter().zip(&c.nodes).all(|(&q, &v)| match assignment[q] {
                Some(a) => a == v,
                None => !assignment.contains(&Some(v)),
            });
            if !fits {
                continue;
            }
            let before = assignment.clone();
            for (&q, &v) in paths[i].iter().zip(&c.nodes) {
                assignment[q] = Some(v);
            }
            go(i + 1, paths, candidates, assignment, tried, out);
            *assignment = before;
        }
    }
    let mut assignment: Vec<Option<u32>> = mapped.to_vec();
    assignment.resize(nodes, None);
    let (mut tried, mut out) = (0, Vec::new());
    if !paths.is_empty() {
        go(0, paths, candidates, &mut assignment, &mut tried, &mut out);
    }
    out
}

fn damaged(index: &Index, problem: String) -> Error {
    Error::Internal(format!("the path index of {} is damaged: {problem}", index.root().display()))
}

#[cfg(test)]
mod tests;
