//! The graph stage: binary relations around anchor entities (paper §3.1) → `edges`.
//!
//! Anchors are entities whose hyperdegree exceeds τ_e. For each anchor, its incident hyperedges
//! and the entities that share them are the evidence; a relation is an explicit pairwise
//! statement supported by a hyperedge's span, found by the relations backend
//! ([`RelationExtractor`]). The rules take the verbatim stretch of the span from one entity's
//! mention to the other's when the words between them are few (`max_connector_words`):
//! "Ingrid Solberg for the regional government". Every edge keeps the hyperedge it came from.

pub mod config;
pub mod llm;
pub mod rules;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ListArray, RecordBatch, StringArray};
use flexstruct_schemas::{Table, col};
use serde::Serialize;

pub use config::GraphConfig;
pub use llm::LlmRelations;
pub use rules::{RulesRelations, document_edges};

use super::Stage;
use super::driver::{BucketOutput, BucketStage, RunContext, run_buckets};
use crate::core::backend::BackendId;
use crate::core::ids::value_fingerprint;
use crate::core::{Error, Result};
use crate::io::parquet::{string_column, typed};
use crate::io::{CallRecord, Failure, StageMetrics};

/// Stage name.
pub const STAGE: &str = Stage::Graph.name();
const VERSION: &str = "1";

/// One document's entities, hyperedges and incidences, as a relations backend sees them.
#[derive(Debug, Clone, Default)]
pub struct DocGraph {
    /// The document.
    pub doc_id: String,
    /// Its entities.
    pub entities: Vec<EntityIn>,
    /// Its hyperedges: id → (statement, verbatim span).
    pub hyperedges: BTreeMap<String, (String, String)>,
    /// (hyperedge id, entity id) pairs.
    pub incidence: Vec<(String, String)>,
}

/// The edges a relations backend found in a bucket's documents.
#[derive(Debug, Clone, Default)]
pub struct Relations {
    /// The edges of each document, in the order of the documents given.
    pub edges: Vec<Vec<EdgeOut>>,
    /// Units (an anchor's prompt) that failed; the edges found elsewhere stand.
    pub failures: Vec<Failure>,
    /// What an answer held that could not become an edge.
    pub dropped: RelationDrops,
}

/// Relations an answer held that did not become edges, by why: counted in the stage's metrics,
/// never dropped without a trace.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RelationDrops {
    /// An end names no entity of the document (neither a name nor an alias, even normalised).
    pub unresolved_ends: u64,
    /// Both ends name the same entity.
    pub self_relations: u64,
    /// The relation's own text is empty.
    pub empty_relations: u64,
}

impl RelationDrops {
    fn add(&mut self, o: &RelationDrops) {
        self.unresolved_ends += o.unresolved_ends;
        self.self_relations += o.self_relations;
        self.empty_relations += o.empty_relations;
    }
}

/// The pairwise-relations capability: the edges around every anchor (hyperdegree > τ_e) of
/// some documents. Backends: [`RulesRelations`] (offline) and [`LlmRelations`].
pub trait RelationExtractor: Sync {
    /// Who finds the relations: part of the fingerprint of `edges`, and its label is
    /// `edges.backend`.
    fn identity(&self) -> BackendId;
    /// The edges of `docs`.
    fn relations(&self, docs: &[DocGraph], config: &GraphConfig) -> Relations;
    /// The calls made for the documents `sorted_doc_ids` since the last time (for `llm_calls`).
    fn take_calls(&self, _sorted_doc_ids: &[String]) -> Vec<CallRecord> {
        Vec::new()
    }
}

/// The graph stage's own figures of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GraphDetails {
    /// Who found the relations.
    pub relations: BackendId,
    /// Edges written in this run without a supporting hyperedge (no valid citation).
    pub unlinked: u64,
    /// Relations of this run's answers that did not become edges.
    #[serde(flatten)]
    pub dropped: RelationDrops,
}

/// What a graph run did.
pub type GraphMetrics = StageMetrics<GraphDetails>;

/// Runs the graph stage with `relations` over the context's shard.
pub fn run(ctx: &RunContext<'_>, config: &GraphConfig, relations: &dyn RelationExtractor) -> Result<GraphMetrics> {
    let identity = relations.identity();
    let stage = BucketStage {
        name: STAGE,
        version: VERSION,
        config_fingerprint: value_fingerprint(&(config, &identity))?,
        inputs: vec![Table::Entities, Table::Hyperedges, Table::HyperedgeEntities],
        outputs: vec![Table::Edges],
    };
    let label = identity.label();
    let unlinked = std::sync::atomic::AtomicU64::new(0);
    let dropped = std::sync::Mutex::new(RelationDrops::default());
    let metrics = run_buckets(ctx, &stage, |_, inputs| {
        let (output, bucket_dropped) = build_bucket(&inputs[0], &inputs[1], &inputs[2], config, relations, &label)?;
        let nulls = output.tables[0].iter().map(|b| b.column(5).null_count() as u64).sum::<u64>();
        unlinked.fetch_add(nulls, std::sync::atomic::Ordering::Relaxed);
        dropped.lock().map_err(|_| Error::Internal("counter lock poisoned".into()))?.add(&bucket_dropped);
        Ok(output)
    })?;
    let dropped = dropped.into_inner().map_err(|_| Error::Internal("counter lock poisoned".into()))?;
    Ok(metrics.with_details(GraphDetails { relations: identity, unlinked: unlinked.into_inner(), dropped }))
}

/// An entity as the graph stage needs it.
#[derive(Debug, Clone)]
pub struct EntityIn {
    /// Entity id.
    pub entity_id: String,
    /// Display name.
    pub name: String,
    /// Other surface forms.
    pub aliases: Vec<String>,
    /// Number of incident hyperedges.
    pub hyperdegree: i32,
}

/// An edge row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct EdgeOut {
    /// Stable id.
    pub edge_id: String,
    /// Entity mentioned first.
    pub source_id: String,
    /// Entity mentioned second.
    pub target_id: String,
    /// The relation, verbatim from the span.
    pub text: String,
    /// The hyperedge whose span supports it; None when the relation came with no valid citation
    /// of one (an LLM's), since a guessed link would be invented provenance.
    pub hyperedge_id: Option<String>,
}

fn build_bucket(
    entities: &[RecordBatch],
    hyperedges: &[RecordBatch],
    incidence: &[RecordBatch],
    config: &GraphConfig,
    relations: &dyn RelationExtractor,
    label: &str,
) -> Result<(BucketOutput, RelationDrops)> {
    let mut docs: BTreeMap<String, DocGraph> = BTreeMap::new();
    fn doc<'a>(docs: &'a mut BTreeMap<String, DocGraph>, id: &str) -> &'a mut DocGraph {
        docs.entry(id.to_owned()).or_insert_with(|| DocGraph { doc_id: id.to_owned(), ..DocGraph::default() })
    }
    for batch in entities {
        let doc_ids = string_column(batch, col::DOC_ID)?;
        let id = string_column(batch, col::ENTITY_ID)?;
        let name = string_column(batch, col::NAME)?;
        let degree = typed::<arrow::array::Int32Array>(batch, col::HYPERDEGREE)?;
        let aliases = typed::<ListArray>(batch, col::ALIASES)?;
        for i in 0..batch.num_rows() {
            let list = aliases.value(i);
            let forms =
                list.as_any().downcast_ref::<StringArray>().map(|a| a.iter().flatten().map(str::to_owned).collect());
            doc(&mut docs, doc_ids.value(i)).entities.push(EntityIn {
                entity_id: id.value(i).to_owned(),
                name: name.value(i).to_owned(),
                aliases: forms.unwrap_or_default(),
                hyperdegree: degree.value(i),
            });
        }
    }
    for batch in hyperedges {
        let doc_ids = string_column(batch, col::DOC_ID)?;
        let id = string_column(batch, col::HYPEREDGE_ID)?;
        let text = string_column(batch, col::TEXT)?;
        let span = string_column(batch, col::REF_TEXT)?;
        for i in 0..batch.num_rows() {
            let entry = (text.value(i).to_owned(), span.value(i).to_owned());
            doc(&mut docs, doc_ids.value(i)).hyperedges.insert(id.value(i).to_owned(), entry);
        }
    }
    for batch in incidence {
        let doc_ids = string_column(batch, col::DOC_ID)?;
        let h = string_column(batch, col::HYPEREDGE_ID)?;
        let e = string_column(batch, col::ENTITY_ID)?;
        for i in 0..batch.num_rows() {
            doc(&mut docs, doc_ids.value(i)).incidence.push((h.value(i).to_owned(), e.value(i).to_owned()));
        }
    }
    let docs: Vec<DocGraph> = docs.into_values().collect();
    let found = relations.relations(&docs, config);
    let doc_ids: Vec<String> = docs.iter().map(|d| d.doc_id.clone()).collect();
    let rows: Vec<(&str, &EdgeOut)> =
        docs.iter().zip(&found.edges).flat_map(|(d, es)| es.iter().map(move |e| (d.doc_id.as_str(), e))).collect();
    let batch = RecordBatch::try_new(
        Table::Edges.schema(),
        vec![
            Arc::new(rows.iter().map(|r| Some(r.1.edge_id.as_str())).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| Some(r.0)).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| Some(r.1.source_id.as_str())).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| Some(r.1.target_id.as_str())).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| Some(r.1.text.as_str())).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| r.1.hyperedge_id.as_deref()).collect::<StringArray>()),
            Arc::new(StringArray::from(vec![label; rows.len()])),
        ],
    )?;
    let output =
        BucketOutput { tables: vec![vec![batch]], failures: found.failures, llm_calls: relations.take_calls(&doc_ids) };
    Ok((output, found.dropped))
}
