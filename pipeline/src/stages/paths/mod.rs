//! The paths stage: the offline path index of SG-RAG's structure-guided retrieval (seed 002),
//! built from the merged kb, read by `--mode paths`.
//!
//! The knowledge graph is the kb's: its nodes are entity names across documents (every entity
//! row with the same normalised name is one node, so a fact in one document meets a fact about
//! the same name in another), its edges the kb's binary relations (`kb/edges`, undirected, with
//! their verbatim source spans). Per node: the label embedding o₀(v) — the index's embedding
//! model on the node's label alone — and the dominant embedding o(v) of its 1-hop star
//! ([`crate::core::dominance`]: a sketch, or the seed's GAT trained here on this graph by
//! [`crate::models::gat`]). Paths of 1 to `max_length` edges are enumerated from every node,
//! simple (no node twice), its neighbours rarest first and at most `max_paths_per_node` of each
//! length, so the index stays linear in the edges; both directions of a path are kept, each from
//! its own start node. The R*-tree over the paths' reduced embeddings is built from these tables
//! when a query needs it (reading the tables and bulk loading took 7 s for 2wiki's 240 k paths,
//! dev profile): the tables are the index, SQL-inspectable like every other.
//!
//! Tables (one part each, global like `kb/thresholds`): `kb/path_encoder` (how o was made: the
//! sketch's width or the GAT's weights, one parameter a row), `kb/path_nodes` (node, label, its
//! entity rows, degree, o₀, o), `kb/paths` (path, length, end nodes) and `kb/path_members` (each
//! path's nodes in order, with the edge that leads to each). All four carry one fingerprint —
//! the kb's own fingerprint and that of the stage version, the `[paths]` section and the embedding
//! model — so a query can tell a path index built from another kb, and a rerun on the same kb
//! does nothing.

pub mod ablation;
pub mod config;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Array, RecordBatch, StringArray};
use flexstruct_schemas::{Table, col};
use rayon::prelude::*;
use serde::Serialize;

pub use self::ablation::{DominanceAblation, ablate_dominance};
pub use self::config::{Dominance, PathsConfig};
use super::Stage;
use super::driver::RunContext;
use crate::core::dominance::Encoder;
use crate::core::ids::{fingerprint, stable_id, value_fingerprint};
use crate::core::{Error, IndexProblem, Result};
use crate::io::parquet::{
    derived_fingerprint, float_lists, one_merge_fingerprint, output_fingerprint, read_columns, string_column,
    string_lists, vector_lists, write_part,
};
use crate::io::{Index, Shard, StageMetrics};
use crate::models::Embedder;
use crate::models::gat::{self, TrainStats};

/// Stage name.
pub const STAGE: &str = Stage::Paths.name();
const VERSION: &str = "2";
/// Labels embedded per call of the embedder.
const LABEL_BATCH: usize = 256;
/// The path index's tables, in the order they are written (the one a reader checks last, last).
pub const TABLES: [Table; 4] = [Table::KbPathEncoder, Table::KbPathNodes, Table::KbPathMembers, Table::KbPaths];

/// The paths stage's own figures of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PathsDetails {
    /// Embedding model of the label embeddings.
    pub model: String,
    /// How the dominant embeddings were made.
    pub dominance: String,
    /// Nodes (distinct entity names with at least one edge, or any entity name).
    pub nodes: u64,
    /// Distinct node pairs joined by at least one kb edge.
    pub edges: u64,
    /// Paths by length in edges.
    pub paths: BTreeMap<String, u64>,
    /// Seconds spent embedding node labels.
    pub label_seconds: f64,
    /// Seconds spent training the GAT encoder (0 for sketches).
    pub train_seconds: f64,
    /// The GAT's dominance loss at its first and last step (0 for sketches).
    pub train_loss: [f32; 2],
}

/// What a paths run did.
pub type PathsMetrics = StageMetrics<PathsDetails>;

/// The kb's graph: nodes by normalised name, undirected adjacency with one edge id per pair.
#[derive(Debug, Default)]
struct Graph {
    /// Normalised names, sorted (the node order).
    norm: Vec<String>,
    /// Display label of each node (its most frequent name; ties: the smallest).
    label: Vec<String>,
    /// Entity ids of each node.
    entities: Vec<Vec<String>>,
    /// Neighbours of each node with the edge id (the smallest) joining them, by node.
    neighbours: Vec<Vec<(u32, String)>>,
    /// kb rows read to build it.
    rows_read: u64,
}

impl Graph {
    /// The graph of the kb of `index`, with the rows it read; with `model`, after checking that
    /// the kb's vectors are of that model (label embeddings must be comparable with them: a
    /// query normalises with its vectors).
    fn read(index: &Index, model: Option<&str>) -> Result<Graph> {
        let entities =
            read_columns(index, Table::KbEntities, &[col::ENTITY_ID, col::NAME, col::NORM_NAME, col::MODEL])?;
        if let Some(model) = model {
            for batch in &entities {
                if let Some(other) = string_column(batch, col::MODEL)?.iter().flatten().find(|m| *m != model) {
                    let problem = IndexProblem::ModelMismatch {
                        table: Table::KbEntities.to_string(),
                        found: other.to_owned(),
                        configured: model.to_owned(),
                    };
                    return Err(Error::index(index.root(), problem));
                }
            }
        }
        let edges = read_columns(index, Table::KbEdges, &[col::EDGE_ID, col::SOURCE_ID, col::TARGET_ID])?;
        let mut graph = Graph::build(&entities, &edges)?;
        graph.rows_read = (entities.iter().chain(&edges)).map(|b| b.num_rows() as u64).sum();
        Ok(graph)
    }

    fn build(entity_batches: &[RecordBatch], edge_batches: &[RecordBatch]) -> Result<Graph> {
        let mut names: BTreeMap<String, (BTreeMap<String, usize>, Vec<String>)> = BTreeMap::new();
        let mut node_of_entity: HashMap<String, String> = HashMap::new();
        for batch in entity_batches {
            let (id, name, norm) = (
                string_column(batch, col::ENTITY_ID)?,
                string_column(batch, col::NAME)?,
                string_column(batch, col::NORM_NAME)?,
            );
            for row in 0..batch.num_rows() {
                let norm = norm.value(row);
                if norm.is_empty() {
                    continue;
                }
                let entry = names.entry(norm.to_owned()).or_default();
                *entry.0.entry(name.value(row).to_owned()).or_default() += 1;
                entry.1.push(id.value(row).to_owned());
                node_of_entity.insert(id.value(row).to_owned(), norm.to_owned());
            }
        }
        let mut graph = Graph::default();
        let mut node_of_norm: HashMap<String, u32> = HashMap::with_capacity(names.len());
        for (norm, (forms, mut ids)) in names {
            node_of_norm.insert(norm.clone(), graph.norm.len() as u32);
            // The most frequent form; BTreeMap order makes the smallest win ties.
            let label = forms.iter().fold(("", 0), |best, (f, &n)| if n > best.1 { (f, n) } else { best }).0;
            graph.label.push(label.to_owned());
            ids.sort();
            graph.entities.push(ids);
            graph.norm.push(norm);
        }
        let mut pairs: BTreeMap<(u32, u32), String> = BTreeMap::new();
        for batch in edge_batches {
            let (id, source, target) = (
                string_column(batch, col::EDGE_ID)?,
                string_column(batch, col::SOURCE_ID)?,
                string_column(batch, col::TARGET_ID)?,
            );
            for row in 0..batch.num_rows() {
                let node = |entity: &str| node_of_entity.get(entity).and_then(|n| node_of_norm.get(n)).copied();
                let (Some(a), Some(b)) = (node(source.value(row)), node(target.value(row))) else { continue };
                if a == b {
                    continue;
                }
                for key in [(a, b), (b, a)] {
                    let edge = pairs.entry(key).or_insert_with(|| id.value(row).to_owned());
                    if id.value(row) < edge.as_str() {
                        *edge = id.value(row).to_owned();
                    }
                }
            }
        }
        graph.neighbours = vec![Vec::new(); graph.norm.len()];
        for ((a, b), edge) in pairs {
            graph.neighbours[a as usize].push((b, edge));
        }
        Ok(graph)
    }

    /// The dominant-embedding encoder the configuration asks for (a GAT trained on this graph,
    /// with what its training did).
    fn encoder(&self, config: &PathsConfig) -> Result<(Encoder, Option<TrainStats>)> {
        Ok(match config.dominance {
            Dominance::Sketch => (Encoder::Sketch(config.shape()), None),
            Dominance::Gat => {
                let neighbours = self.neighbour_nodes();
                let (gat, stats) = gat::train(&self.norm, &neighbours, config.shape(), &config.gat)?;
                (Encoder::Gat(gat), Some(stats))
            }
        })
    }

    /// Each node's neighbours, without the edges.
    fn neighbour_nodes(&self) -> Vec<Vec<u32>> {
        self.neighbours.iter().map(|n| n.iter().map(|(u, _)| *u).collect()).collect()
    }

    /// The dominant embedding of node `v`'s whole star.
    fn encode(&self, encoder: &Encoder, v: usize) -> Vec<f32> {
        let names = self.neighbours[v].iter().map(|(u, _)| self.norm[*u as usize].as_str());
        encoder.encode(Some(&self.norm[v]), names, 0)
    }

    /// Simple paths of `length` edges from `start`, neighbours rarest first (then by name), at
    /// most `cap` of them: each as its nodes and the edges between them.
    fn paths_from(&self, start: u32, length: usize, cap: usize) -> Vec<(Vec<u32>, Vec<&str>)> {
        let mut out = Vec::new();
        let mut nodes = vec![start];
        let mut edges = Vec::new();
        self.extend(&mut nodes, &mut edges, length, cap, &mut out);
        out
    }

    fn extend<'a>(
        &'a self,
        nodes: &mut Vec<u32>,
        edges: &mut Vec<&'a str>,
        length: usize,
        cap: usize,
        out: &mut Vec<(Vec<u32>, Vec<&'a str>)>,
    ) {
        if edges.len() == length {
            out.push((nodes.clone(), edges.clone()));
            return;
        }
        let last = *nodes.last().unwrap_or(&0) as usize;
        let mut next: Vec<&(u32, String)> = self.neighbours[last].iter().filter(|(n, _)| !nodes.contains(n)).collect();
        next.sort_by_key(|(n, _)| (self.neighbours[*n as usize].len(), *n));
        for (n, edge) in next {
            if out.len() >= cap {
                return;
            }
            nodes.push(*n);
            edges.push(edge);
            self.extend(nodes, edges, length, cap, out);
            nodes.pop();
            edges.pop();
        }
    }
}

/// Builds (or keeps, when its fingerprint is current) the path index of the kb, embedding node
/// labels with `embedder` (the index's model).
pub fn run(ctx: &RunContext<'_>, config: &PathsConfig, embedder: &dyn Embedder) -> Result<PathsMetrics> {
    let started = std::time::Instant::now();
    config.validate()?;
    let index = &ctx.index;
    if ctx.shard != Shard::ALL {
        return Err(Error::config(
            "--shard",
            "the path index is built from the whole kb in one run (it joins nodes across every bucket)",
        ));
    }
    let kb = one_merge_fingerprint(index)?;
    // The GAT's training settings matter only to a GAT index.
    let settings = match config.dominance {
        Dominance::Sketch => PathsConfig { gat: Default::default(), ..config.clone() },
        Dominance::Gat => config.clone(),
    };
    let fp =
        derived_fingerprint(&kb, &fingerprint(&[STAGE, VERSION, &value_fingerprint(&settings)?, embedder.model()]));
    let mut metrics = PathsMetrics {
        stage: STAGE.to_owned(),
        shard: ctx.shard.to_string(),
        inputs: vec![Table::KbEntities.dir().to_owned(), Table::KbEdges.dir().to_owned()],
        details: PathsDetails {
            model: embedder.model().to_owned(),
            dominance: config.dominance.name().to_owned(),
            ..PathsDetails::default()
        },
        ..PathsMetrics::default()
    };
    let mut current = true;
    for table in TABLES {
        current &= output_fingerprint(&index.kb_part(table), table)?.as_deref() == Some(fp.as_str());
    }
    if current || ctx.survey.is_some() {
        metrics.units_skipped = u64::from(current);
        metrics.seconds = started.elapsed().as_secs_f64();
        return Ok(metrics);
    }
    let graph = Graph::read(index, Some(embedder.model()))?;
    metrics.rows_in = graph.rows_read;
    let n = graph.norm.len();
    ctx.progress.start(n.div_ceil(LABEL_BATCH) as u64 + 1);

    let label_started = std::time::Instant::now();
    let mut labels: Vec<f32> = Vec::with_capacity(n * embedder.dim());
    for batch in graph.label.chunks(LABEL_BATCH) {
        let texts: Vec<&str> = batch.iter().map(String::as_str).collect();
        for v in embedder.embed(&texts)? {
            labels.extend(v);
        }
        ctx.progress.advance(1);
    }
    metrics.details.label_seconds = label_started.elapsed().as_secs_f64();
    let (encoder, trained) = graph.encoder(config)?;
    if let Some(trained) = trained {
        metrics.details.train_seconds = trained.seconds;
        metrics.details.train_loss = [trained.first_loss, trained.last_loss];
    }
    let dominant: Vec<f32> = (0..n).into_par_iter().flat_map_iter(|v| graph.encode(&encoder, v)).collect();

    let node_ids: Vec<String> = graph.norm.iter().map(|norm| stable_id("node", &[norm])).collect();
    let nodes = RecordBatch::try_new(
        Table::KbPathNodes.schema_with_widths(&[(col::EMBEDDING, embedder.dim()), (col::DOMINANT, encoder.len())]),
        vec![
            Arc::new(StringArray::from(node_ids.clone())) as ArrayRef,
            Arc::new(StringArray::from(graph.label.clone())),
            Arc::new(StringArray::from(graph.norm.clone())),
            Arc::new(Int32Array::from_iter_values(graph.neighbours.iter().map(|n| n.len() as i32))),
            Arc::new(string_lists(graph.entities.iter().map(Vec::as_slice))),
            Arc::new(StringArray::from(vec![embedder.model(); n])),
            Arc::new(vector_lists(labels, embedder.dim())?),
            Arc::new(vector_lists(dominant, encoder.len())?),
        ],
    )?;

    // Paths, each start node's in parallel, in node order.
    let by_start: Vec<Vec<(Vec<u32>, Vec<&str>)>> = (0..n as u32)
        .into_par_iter()
        .map(|v| (1..=config.max_length).flat_map(|l| graph.paths_from(v, l, config.max_paths_per_node)).collect())
        .collect();
    let (mut path_id, mut length, mut source, mut target) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut member_path, mut position, mut member_node, mut member_edge) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (path_nodes, path_edges) in by_start.iter().flatten() {
        let node_list: Vec<&str> = path_nodes.iter().map(|&v| node_ids[v as usize].as_str()).collect();
        let id = stable_id("path", &node_list);
        *metrics.details.paths.entry(path_edges.len().to_string()).or_default() += 1;
        for (i, node) in node_list.iter().enumerate() {
            member_path.push(id.clone());
            position.push(i as i32);
            member_node.push(node.to_string());
            member_edge.push(i.checked_sub(1).map(|e| path_edges[e].to_owned()));
        }
        path_id.push(id);
        length.push(path_edges.len() as i32);
        source.push(node_list[0].to_owned());
        target.push(node_list[node_list.len() - 1].to_owned());
    }
    let members = RecordBatch::try_new(
        Table::KbPathMembers.schema(),
        vec![
            Arc::new(StringArray::from(member_path)) as ArrayRef,
            Arc::new(Int32Array::from(position)),
            Arc::new(StringArray::from(member_node)),
            Arc::new(StringArray::from(member_edge)),
        ],
    )?;
    let paths = RecordBatch::try_new(
        Table::KbPaths.schema(),
        vec![
            Arc::new(StringArray::from(path_id)) as ArrayRef,
            Arc::new(Int32Array::from(length)),
            Arc::new(StringArray::from(source)),
            Arc::new(StringArray::from(target)),
        ],
    )?;
    metrics.details.nodes = n as u64;
    metrics.details.edges = graph.neighbours.iter().map(|n| n.len() as u64).sum::<u64>() / 2;
    metrics.rows_out = (nodes.num_rows() + paths.num_rows()) as u64;
    let encoder_batch = encoder_table(&encoder)?;
    for (table, batch) in TABLES.into_iter().zip([&encoder_batch, &nodes, &members, &paths]) {
        write_part(&index.kb_part(table), table, &fp, std::slice::from_ref(batch))?;
    }
    metrics.units_done = 1;
    ctx.progress.advance(1);
    metrics.seconds = started.elapsed().as_secs_f64();
    Ok(metrics)
}

/// The encoder as a table, one parameter a row: a sketch's hashed positions, or the GAT's
/// weight matrices.
fn encoder_table(encoder: &Encoder) -> Result<RecordBatch> {
    let sketch_dims;
    let params: Vec<(&str, usize, usize, &[f32])> = match encoder {
        Encoder::Sketch(shape) => {
            sketch_dims = [shape.dims as f32];
            vec![("hashed_positions", 1, 1, &sketch_dims)]
        }
        Encoder::Gat(gat) => gat.params().to_vec(),
    };
    let weights = float_lists(params.iter().map(|p| p.3));
    Ok(RecordBatch::try_new(
        Table::KbPathEncoder.schema(),
        vec![
            Arc::new(StringArray::from(vec![encoder.kind(); params.len()])) as ArrayRef,
            Arc::new(StringArray::from_iter_values(params.iter().map(|p| p.0))),
            Arc::new(Int32Array::from_iter_values(params.iter().map(|p| p.1 as i32))),
            Arc::new(Int32Array::from_iter_values(params.iter().map(|p| p.2 as i32))),
            Arc::new(weights),
        ],
    )?)
}
