//! The hypergraph stage: `items` → `hyperedges`, `hyperedge_entities`, `entities` (paper §3.1).
//!
//! One hyperedge per item. Entities are the union of the items' entities, identified within a
//! document by their normalised name after alias resolution: a parenthesised abbreviation
//! (`KVWA` for `Kestrel Valley Water Authority`) and the surname of a person named in full
//! elsewhere in the document (`Ortiz` for `Rafael Ortiz`, when no other person shares it) name
//! the same entity. Summaries are written only once all of a document's hyperedges exist: the
//! concatenation of the incident hyperedge texts when the hyperdegree is at most τ_s, a condensed
//! summary by the summaries backend otherwise ([`Summarizer`]: the rules keep the first τ_s
//! texts, an LLM writes one).

pub mod config;
pub mod llm;
pub mod rules;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{Array, Int32Array, Int64Array, ListArray, RecordBatch, StringArray};
use flexstruct_schemas::{Table, col};
use rayon::prelude::*;
use serde::Serialize;

pub use config::HypergraphConfig;
pub use llm::LlmSummarizer;
pub use rules::RulesSummarizer;

use super::Stage;
use super::driver::{BucketOutput, BucketStage, RunContext, run_buckets};
use crate::core::backend::{BackendId, RULES_LABEL};
use crate::core::ids::{stable_id, value_fingerprint};
use crate::core::names::normalize;
use crate::core::{Error, Result};
use crate::io::parquet::{string_column, string_lists, typed};
use crate::io::{CallRecord, Failure, FailureKind, StageMetrics, UnitError};
use crate::rules::{abbreviation_aliases, looks_like_person};

/// Stage name.
pub const STAGE: &str = Stage::Hypergraph.name();
const VERSION: &str = "1";

/// What a summaries backend is asked for one entity above τ_s.
#[derive(Debug, Clone)]
pub struct SummaryRequest<'a> {
    /// The entity's document.
    pub doc_id: &'a str,
    /// The entity's name.
    pub entity: &'a str,
    /// The texts of its incident hyperedges, in extraction order (more than `tau_s` of them).
    pub facts: Vec<&'a str>,
    /// τ_s.
    pub tau_s: usize,
}

/// The entity-summary capability: condensed summaries of entities whose hyperdegree exceeds
/// τ_s. Backends: [`RulesSummarizer`] (offline) and [`LlmSummarizer`].
pub trait Summarizer: Sync {
    /// Who summarises: part of the fingerprint of the hypergraph tables, and the label of the
    /// entities it summarised (`entities.backend`).
    fn identity(&self) -> BackendId;
    /// A summary per request, in order.
    fn summarize_all(&self, requests: &[SummaryRequest<'_>]) -> Vec<Result<String, UnitError>>;
    /// The calls made for the documents `sorted_doc_ids` since the last time (for `llm_calls`).
    fn take_calls(&self, _sorted_doc_ids: &[String]) -> Vec<CallRecord> {
        Vec::new()
    }
}

/// The hypergraph stage's own figures of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HypergraphDetails {
    /// Who wrote the summaries above τ_s.
    pub summaries: BackendId,
    /// Entities above τ_s whose summary that backend wrote in this run.
    pub condensed: u64,
    /// Items left out because their span was found in no text: a fact without a source is not
    /// put in the knowledge base (they stay in `items`, with null offsets).
    pub unsupported: u64,
}

/// What a hypergraph run did.
pub type HypergraphMetrics = StageMetrics<HypergraphDetails>;

/// Runs the hypergraph stage with `summarizer` over the context's shard.
pub fn run(ctx: &RunContext<'_>, config: &HypergraphConfig, summarizer: &dyn Summarizer) -> Result<HypergraphMetrics> {
    let tau_s = config.tau_s;
    let identity = summarizer.identity();
    let stage = BucketStage {
        name: STAGE,
        version: VERSION,
        config_fingerprint: value_fingerprint(&(config, &identity))?,
        inputs: vec![Table::Items, Table::Documents],
        outputs: vec![Table::Hyperedges, Table::HyperedgeEntities, Table::Entities],
    };
    let (condensed, unsupported) = (AtomicU64::new(0), AtomicU64::new(0));
    let metrics = run_buckets(ctx, &stage, |_, inputs| {
        let (output, n, left_out) = build_bucket(&inputs[0], &inputs[1], tau_s, summarizer)?;
        condensed.fetch_add(n, Ordering::Relaxed);
        unsupported.fetch_add(left_out, Ordering::Relaxed);
        Ok(output)
    })?;
    let details = HypergraphDetails {
        summaries: identity,
        condensed: condensed.into_inner(),
        unsupported: unsupported.into_inner(),
    };
    Ok(metrics.with_details(details))
}

/// Gives the entities above τ_s their summaries from `summarizer`. An entity whose summary fails
/// keeps the rules summary and gets a failure row (retried on the next run). Returns the
/// failures and how many summaries the backend wrote.
fn summarize(graphs: &mut [(String, DocHypergraph)], tau_s: usize, summarizer: &dyn Summarizer) -> (Vec<Failure>, u64) {
    let mut targets = Vec::new();
    let answers = {
        let mut requests = Vec::new();
        for (d, (doc_id, graph)) in graphs.iter().enumerate() {
            if graph.entities.iter().all(|e| e.hyperdegree as usize <= tau_s) {
                continue;
            }
            let texts: HashMap<&str, &str> =
                graph.hyperedges.iter().map(|(id, item)| (id.as_str(), item.text.as_str())).collect();
            let mut facts: HashMap<&str, Vec<&str>> = HashMap::new();
            for (h, e) in &graph.incidence {
                facts.entry(e.as_str()).or_default().push(texts[h.as_str()]);
            }
            for (k, entity) in graph.entities.iter().enumerate() {
                if entity.hyperdegree as usize > tau_s {
                    let entity_facts = facts.get(entity.entity_id.as_str()).cloned().unwrap_or_default();
                    requests.push(SummaryRequest { doc_id, entity: &entity.name, facts: entity_facts, tau_s });
                    targets.push((d, k));
                }
            }
        }
        summarizer.summarize_all(&requests)
    };
    let label = summarizer.identity().label();
    let mut failures = Vec::new();
    let mut written = 0;
    for ((d, k), answer) in targets.into_iter().zip(answers) {
        let (doc_id, graph) = &mut graphs[d];
        let entity = &mut graph.entities[k];
        match answer {
            Ok(summary) if !summary.trim().is_empty() => {
                entity.summary = summary.trim().to_owned();
                entity.backend.clone_from(&label);
                written += 1;
            }
            Ok(_) => {
                failures.push(summary_failure(doc_id, &entity.name, FailureKind::Unparseable, "empty summary".into()))
            }
            Err(e) => failures.push(summary_failure(doc_id, &entity.name, e.kind, e.message)),
        }
    }
    (failures, written)
}

fn summary_failure(doc_id: &str, name: &str, kind: FailureKind, message: String) -> Failure {
    Failure {
        stage: STAGE.to_owned(),
        doc_id: Some(doc_id.to_owned()),
        unit: format!("summary of {name}"),
        kind,
        message: format!("{doc_id}: summary of `{name}`: {message}"),
    }
}

/// One item as the hypergraph needs it.
#[derive(Debug, Clone)]
pub struct ItemIn {
    /// Extraction order within the document.
    pub item_idx: i32,
    /// Statement.
    pub text: String,
    /// Verbatim span.
    pub ref_text: String,
    /// Span offsets, when located.
    pub ref_start: Option<i64>,
    /// Span end.
    pub ref_end: Option<i64>,
    /// Entity surface forms.
    pub entities: Vec<String>,
    /// Who extracted it (`items.extractor`), kept as the hyperedge's `backend`.
    pub extractor: String,
}

/// The hypergraph of one document.
#[derive(Debug, Default)]
pub struct DocHypergraph {
    /// (hyperedge_id, item) in item order.
    pub hyperedges: Vec<(String, ItemIn)>,
    /// (hyperedge_id, entity_id) pairs.
    pub incidence: Vec<(String, String)>,
    /// Entities, by normalised name.
    pub entities: Vec<EntityOut>,
}

/// An entity row.
#[derive(Debug, Clone, PartialEq)]
pub struct EntityOut {
    /// Stable id.
    pub entity_id: String,
    /// Display name (the most frequent full surface form).
    pub name: String,
    /// Identity key.
    pub norm_name: String,
    /// Summary.
    pub summary: String,
    /// Number of incident hyperedges.
    pub hyperdegree: i32,
    /// Other surface forms that name it.
    pub aliases: Vec<String>,
    /// Who wrote the summary: `rules` (a concatenation, or the rules' condensed summary), or
    /// the summaries backend's label.
    pub backend: String,
}

/// Builds one document's hypergraph from its items (any order) and text.
pub fn build_document(doc_id: &str, text: &str, mut items: Vec<ItemIn>, tau_s: usize) -> DocHypergraph {
    items.sort_by_key(|i| i.item_idx);
    let canonical = alias_resolver(text, &items);

    // entity norm → (surface counts, incident hyperedge positions)
    let mut entities: BTreeMap<String, (BTreeMap<String, usize>, BTreeSet<usize>)> = BTreeMap::new();
    let mut out = DocHypergraph::default();
    let mut incident_norms: Vec<Vec<String>> = Vec::new();
    for (pos, item) in items.into_iter().enumerate() {
        let id = stable_id("he", &[doc_id, &item.item_idx.to_string(), &item.text]);
        let mut norms: Vec<String> = Vec::new();
        for surface in &item.entities {
            let norm = normalize(surface);
            if norm.is_empty() {
                continue;
            }
            let key = canonical.get(&norm).cloned().unwrap_or(norm);
            let entry = entities.entry(key.clone()).or_default();
            *entry.0.entry(surface.trim().to_owned()).or_default() += 1;
            entry.1.insert(pos);
            if !norms.contains(&key) {
                norms.push(key);
            }
        }
        incident_norms.push(norms);
        out.hyperedges.push((id, item));
    }

    let mut ids: HashMap<String, String> = HashMap::new();
    for (norm, (surfaces, edges)) in &entities {
        let entity_id = stable_id("ent", &[doc_id, norm]);
        ids.insert(norm.clone(), entity_id.clone());
        // The name: among surfaces whose own normal form is the key (not an alias), the most
        // frequent, then the longest.
        let name = surfaces
            .iter()
            .filter(|(s, _)| normalize(s) == *norm)
            .max_by(|a, b| a.1.cmp(b.1).then(a.0.len().cmp(&b.0.len())).then(b.0.cmp(a.0)))
            .or_else(|| surfaces.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0))))
            .map(|(s, _)| s.clone())
            .unwrap_or_else(|| norm.clone());
        let aliases: Vec<String> = surfaces.keys().filter(|s| **s != name).cloned().collect();
        let texts: Vec<&str> = edges.iter().map(|&p| out.hyperedges[p].1.text.as_str()).collect();
        let summary = if texts.len() > tau_s { texts[..tau_s].join(" ") } else { texts.join(" ") };
        out.entities.push(EntityOut {
            entity_id,
            name,
            norm_name: norm.clone(),
            summary,
            hyperdegree: edges.len() as i32,
            aliases,
            backend: RULES_LABEL.to_owned(),
        });
    }
    for ((hyperedge_id, _), norms) in out.hyperedges.iter().zip(&incident_norms) {
        for norm in norms {
            out.incidence.push((hyperedge_id.clone(), ids[norm].clone()));
        }
    }
    out
}

/// Maps alias normal forms to the normal form of the entity they name.
fn alias_resolver(text: &str, items: &[ItemIn]) -> HashMap<String, String> {
    let mut map = abbreviation_aliases(text);
    // Surnames of people named in full: unique ones are aliases.
    let mut by_surname: HashMap<String, BTreeSet<String>> = HashMap::new();
    for surface in items.iter().flat_map(|i| &i.entities) {
        if looks_like_person(surface) {
            let norm = normalize(surface);
            if let Some(surname) = norm.rsplit(' ').next().filter(|s| *s != norm) {
                by_surname.entry(surname.to_owned()).or_default().insert(norm.clone());
            }
        }
    }
    for (surname, people) in by_surname {
        if people.len() == 1
            && !map.contains_key(&surname)
            && let Some(full) = people.into_iter().next()
        {
            map.insert(surname, full);
        }
    }
    map
}

fn build_bucket(
    items: &[RecordBatch],
    documents: &[RecordBatch],
    tau_s: usize,
    summarizer: &dyn Summarizer,
) -> Result<(BucketOutput, u64, u64)> {
    let mut texts: HashMap<&str, &str> = HashMap::new();
    let mut unsupported = 0;
    for batch in documents {
        let ids = string_column(batch, col::DOC_ID)?;
        let t = string_column(batch, col::TEXT)?;
        texts.extend((0..batch.num_rows()).map(|i| (ids.value(i), t.value(i))));
    }
    let mut by_doc: BTreeMap<String, Vec<ItemIn>> = BTreeMap::new();
    for batch in items {
        let ids = string_column(batch, col::DOC_ID)?;
        let idx = typed::<Int32Array>(batch, col::ITEM_IDX)?;
        let text = string_column(batch, col::TEXT)?;
        let refs = string_column(batch, col::REF_TEXT)?;
        let starts = typed::<Int64Array>(batch, col::REF_START)?;
        let ends = typed::<Int64Array>(batch, col::REF_END)?;
        let ents = typed::<ListArray>(batch, col::ENTITIES)?;
        let extractors = string_column(batch, col::EXTRACTOR)?;
        for i in 0..batch.num_rows() {
            if starts.is_null(i) {
                unsupported += 1;
                continue;
            }
            let list = ents.value(i);
            let names = list
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| Error::Internal("items.entities is not a list of strings".into()))?;
            by_doc.entry(ids.value(i).to_owned()).or_default().push(ItemIn {
                item_idx: idx.value(i),
                text: text.value(i).to_owned(),
                ref_text: refs.value(i).to_owned(),
                ref_start: starts.is_valid(i).then(|| starts.value(i)),
                ref_end: ends.is_valid(i).then(|| ends.value(i)),
                entities: names.iter().flatten().map(str::to_owned).collect(),
                extractor: extractors.value(i).to_owned(),
            });
        }
    }
    let mut graphs: Vec<(String, DocHypergraph)> = by_doc
        .into_par_iter()
        .map(|(doc_id, items)| {
            let text = texts.get(doc_id.as_str()).copied().unwrap_or("");
            let graph = build_document(&doc_id, text, items, tau_s);
            (doc_id, graph)
        })
        .collect();
    let (failures, condensed) = summarize(&mut graphs, tau_s, summarizer);
    let doc_ids: Vec<String> = graphs.iter().map(|(d, _)| d.clone()).collect();
    let output = BucketOutput {
        tables: vec![vec![hyperedges_batch(&graphs)?], vec![incidence_batch(&graphs)?], vec![entities_batch(&graphs)?]],
        failures,
        llm_calls: summarizer.take_calls(&doc_ids),
    };
    Ok((output, condensed, unsupported))
}

fn hyperedges_batch(graphs: &[(String, DocHypergraph)]) -> Result<RecordBatch> {
    let rows: Vec<(&str, &String, &ItemIn)> =
        graphs.iter().flat_map(|(d, g)| g.hyperedges.iter().map(move |(id, item)| (d.as_str(), id, item))).collect();
    Ok(RecordBatch::try_new(
        Table::Hyperedges.schema(),
        vec![
            Arc::new(rows.iter().map(|r| Some(r.1.as_str())).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| Some(r.0)).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| Some(r.2.item_idx)).collect::<Int32Array>()),
            Arc::new(rows.iter().map(|r| Some(r.2.text.as_str())).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| Some(r.2.ref_text.as_str())).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| r.2.ref_start).collect::<Int64Array>()),
            Arc::new(rows.iter().map(|r| r.2.ref_end).collect::<Int64Array>()),
            Arc::new(rows.iter().map(|r| Some(r.2.extractor.as_str())).collect::<StringArray>()),
        ],
    )?)
}

fn incidence_batch(graphs: &[(String, DocHypergraph)]) -> Result<RecordBatch> {
    let rows: Vec<(&str, &(String, String))> =
        graphs.iter().flat_map(|(d, g)| g.incidence.iter().map(move |p| (d.as_str(), p))).collect();
    Ok(RecordBatch::try_new(
        Table::HyperedgeEntities.schema(),
        vec![
            Arc::new(rows.iter().map(|r| Some(r.1.0.as_str())).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| Some(r.1.1.as_str())).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| Some(r.0)).collect::<StringArray>()),
        ],
    )?)
}

fn entities_batch(graphs: &[(String, DocHypergraph)]) -> Result<RecordBatch> {
    let rows: Vec<(&str, &EntityOut)> =
        graphs.iter().flat_map(|(d, g)| g.entities.iter().map(move |e| (d.as_str(), e))).collect();
    Ok(RecordBatch::try_new(
        Table::Entities.schema(),
        vec![
            Arc::new(rows.iter().map(|r| Some(r.1.entity_id.as_str())).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| Some(r.0)).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| Some(r.1.name.as_str())).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| Some(r.1.norm_name.as_str())).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| Some(r.1.summary.as_str())).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| Some(r.1.hyperdegree)).collect::<Int32Array>()),
            Arc::new(string_lists(rows.iter().map(|r| r.1.aliases.as_slice()))),
            Arc::new(rows.iter().map(|r| Some(r.1.backend.as_str())).collect::<StringArray>()),
        ],
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(idx: i32, text: &str, entities: &[&str]) -> ItemIn {
        ItemIn {
            item_idx: idx,
            text: text.into(),
            ref_text: text.into(),
            ref_start: None,
            ref_end: None,
            entities: entities.iter().map(|s| (*s).to_owned()).collect(),
            extractor: RULES_LABEL.to_owned(),
        }
    }

    #[test]
    fn aliases_merge_and_summaries_follow_tau_s() {
        let text = "The Kestrel Valley Water Authority (KVWA) runs it. Talks were chaired by Rafael Ortiz.";
        let items = vec![
            item(2, "Ortiz insisted on three rules.", &["Ortiz"]),
            item(0, "The Kestrel Valley Water Authority (KVWA) runs it.", &["Kestrel Valley Water Authority", "KVWA"]),
            item(1, "Talks were chaired by Rafael Ortiz.", &["Rafael Ortiz"]),
            item(3, "The KVWA's budget grew.", &["KVWA's"]),
        ];
        let g = build_document("d", text, items, 1);
        let names: Vec<(&str, i32, Vec<&str>)> = g
            .entities
            .iter()
            .map(|e| (e.name.as_str(), e.hyperdegree, e.aliases.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            names,
            [("Kestrel Valley Water Authority", 2, vec!["KVWA", "KVWA's"]), ("Rafael Ortiz", 2, vec!["Ortiz"]),]
        );
        // Hyperedges keep extraction order; one incidence per (hyperedge, entity).
        assert_eq!(g.hyperedges.iter().map(|h| h.1.item_idx).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(g.incidence.len(), 4);
        // tau_s = 1: entities of hyperdegree 2 keep only their first hyperedge text.
        assert_eq!(g.entities[1].summary, "Talks were chaired by Rafael Ortiz.");
        let g = build_document("d", text, g.hyperedges.into_iter().map(|h| h.1).collect(), 9);
        assert_eq!(g.entities[1].summary, "Talks were chaired by Rafael Ortiz. Ortiz insisted on three rules.");
    }

    #[test]
    fn shared_surnames_are_not_merged_and_ids_are_stable() {
        let items =
            vec![item(0, "Ana Lind met Tomasz Lind.", &["Ana Lind", "Tomasz Lind"]), item(1, "Lind spoke.", &["Lind"])];
        let g = build_document("d", "", items.clone(), 9);
        assert_eq!(g.entities.len(), 3);
        let again = build_document("d", "", items, 9);
        assert_eq!(g.entities, again.entities);
        assert_eq!(g.entities[0].entity_id, stable_id("ent", &["d", &g.entities[0].norm_name]));
    }
}
