//! The graph stage: binary relations around anchor entities (paper §3.1) → `edges`.
//!
//! Anchors are entities whose hyperdegree exceeds τ_e. For each anchor, its incident hyperedges
//! and the entities that share them are the evidence; a relation is an explicit pairwise
//! statement supported by a hyperedge's span. The rules backend takes the verbatim stretch of
//! the span from one entity's mention to the other's when the words between them are few
//! (`max_connector_words`): "Ingrid Solberg for the regional government". Every edge keeps the
//! hyperedge it came from.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use arrow::array::{Array, ListArray, RecordBatch, StringArray};
use flexstruct_schemas::{Table, col};
use rayon::prelude::*;

use crate::config::GraphConfig;
use crate::error::Result;
use crate::extract::entities::normalize;
use crate::failures::Failure;
use crate::llm::CallContext;
use crate::llm::prompts::{RelationsAnswer, relations_messages};
use crate::llm::runner::Runner;
use crate::hypergraph::stable_id;
use crate::io::{string_column, typed};
use crate::stage::{BucketOutput, BucketStage, RunContext, StageMetrics, config_fingerprint, run_buckets};

/// Stage name.
pub const STAGE: &str = "graph";
const VERSION: &str = "1";

/// Runs the graph stage.
pub fn run(ctx: &RunContext<'_>) -> Result<StageMetrics> {
    let config = ctx.config.graph.clone();
    let stage = BucketStage {
        name: STAGE,
        version: VERSION,
        config_fingerprint: config_fingerprint(&config)?,
        inputs: vec![Table::Entities, Table::Hyperedges, Table::HyperedgeEntities],
        outputs: vec![Table::Edges],
    };
    let runner = Runner::for_config(&ctx.config, ctx.index.root())?;
    let mut metrics = run_buckets(ctx, &stage, |_, inputs| {
        build_bucket(&inputs[0], &inputs[1], &inputs[2], &config, runner.as_ref())
    })?;
    metrics.details.insert("relations".into(), if runner.is_some() { "llm" } else { "rules" }.into());
    Ok(metrics)
}

/// Most facts in one relations prompt; anchors with more get several prompts.
const FACTS_PER_PROMPT: usize = 40;

/// One relations prompt of one anchor.
struct AnchorAsk {
    doc: usize,
    anchor: String,
    /// (hyperedge id, statement, span)
    facts: Vec<(String, String, String)>,
}

/// Relations of every anchor of every document by the LLM: the anchor, its incident facts and
/// the entities that share them go in; relations whose two ends name known entities come out,
/// each tied to the fact the model cites (or the first fact that holds both entities).
fn llm_edges(docs: &[(String, Doc)], tau_e: usize, runner: &Runner) -> (Vec<Vec<EdgeOut>>, Vec<Failure>) {
    let mut asks = Vec::new();
    let mut messages = Vec::new();
    for (d, (doc_id, (entities, hyperedges, incidence))) in docs.iter().enumerate() {
        let names: HashMap<&str, &str> = entities.iter().map(|e| (e.entity_id.as_str(), e.name.as_str())).collect();
        let mut members: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (h, e) in incidence {
            members.entry(h.as_str()).or_default().push(e.as_str());
        }
        for anchor in entities.iter().filter(|e| e.hyperdegree as usize > tau_e) {
            let incident: Vec<&str> =
                members.iter().filter(|(_, ids)| ids.contains(&anchor.entity_id.as_str())).map(|(h, _)| *h).collect();
            for group in incident.chunks(FACTS_PER_PROMPT) {
                let facts: Vec<(String, String, String)> = group
                    .iter()
                    .filter_map(|h| hyperedges.get(*h).map(|(text, span)| ((*h).to_owned(), text.clone(), span.clone())))
                    .collect();
                let mut others: Vec<&str> = group
                    .iter()
                    .flat_map(|h| members[h].iter())
                    .filter(|id| **id != anchor.entity_id)
                    .filter_map(|id| names.get(id).copied())
                    .collect();
                others.sort_unstable();
                others.dedup();
                if others.is_empty() {
                    continue;
                }
                let pairs: Vec<(&str, &str)> = facts.iter().map(|(_, t, s)| (t.as_str(), s.as_str())).collect();
                let context = CallContext { stage: STAGE.into(), doc_id: Some(doc_id.clone()), purpose: "relations".into() };
                messages.push((context, relations_messages(&anchor.name, &pairs, &others)));
                asks.push(AnchorAsk { doc: d, anchor: anchor.name.clone(), facts });
            }
        }
    }
    let mut edges: Vec<BTreeSet<EdgeOut>> = vec![BTreeSet::new(); docs.len()];
    let mut failures = Vec::new();
    for (ask, answer) in asks.into_iter().zip(runner.ask_all::<RelationsAnswer>(messages)) {
        let (doc_id, (entities, _, incidence)) = &docs[ask.doc];
        let answer = match answer {
            Ok(a) => a,
            Err(e) => {
                failures.push(Failure {
                    stage: STAGE.to_owned(),
                    doc_id: Some(doc_id.clone()),
                    unit: format!("relations of {}", ask.anchor),
                    kind: e.kind,
                    message: format!("{doc_id}: relations of `{}`: {}", ask.anchor, e.message),
                });
                continue;
            }
        };
        let resolve = entity_resolver(entities);
        for relation in answer.relations {
            let (Some(source), Some(target)) = (resolve(&relation.source), resolve(&relation.target)) else { continue };
            let text = relation.relation.trim();
            if source == target || text.is_empty() {
                continue;
            }
            let cited = relation.fact.and_then(|f| f.checked_sub(1)).and_then(|f| ask.facts.get(f)).map(|f| f.0.clone());
            let holding_both = || {
                ask.facts.iter().map(|f| &f.0).find(|h| {
                    incidence.iter().any(|(x, e)| x == *h && e == source) && incidence.iter().any(|(x, e)| x == *h && e == target)
                })
            };
            let Some(hyperedge_id) = cited.or_else(|| holding_both().cloned()).or_else(|| ask.facts.first().map(|f| f.0.clone()))
            else {
                continue;
            };
            edges[ask.doc].insert(EdgeOut {
                edge_id: stable_id("edge", &[doc_id, source, target, text]),
                source_id: source.to_owned(),
                target_id: target.to_owned(),
                text: text.to_owned(),
                hyperedge_id,
            });
        }
    }
    (edges.into_iter().map(|set| set.into_iter().collect()).collect(), failures)
}

/// Maps a name the model wrote to an entity id: exact name or alias first, then normalised.
fn entity_resolver<'a>(entities: &'a [EntityIn]) -> impl Fn(&str) -> Option<&'a str> + 'a {
    let mut exact: HashMap<&'a str, &'a str> = HashMap::new();
    let mut normal: HashMap<String, &'a str> = HashMap::new();
    for e in entities {
        for form in std::iter::once(&e.name).chain(&e.aliases) {
            exact.entry(form.as_str()).or_insert(&e.entity_id);
            normal.entry(normalize(form)).or_insert(&e.entity_id);
        }
    }
    move |name: &str| exact.get(name.trim()).copied().or_else(|| normal.get(&normalize(name)).copied())
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
    /// The hyperedge whose span supports it.
    pub hyperedge_id: String,
}

/// Byte range of the first mention of an entity (name, then aliases; exact case first).
fn find_mention(text: &str, entity: &EntityIn) -> Option<(usize, usize)> {
    let forms = std::iter::once(&entity.name).chain(&entity.aliases);
    let mut best: Option<(usize, usize)> = None;
    for form in forms.clone() {
        if let Some(p) = text.find(form.as_str()) {
            best = Some(best.map_or((p, p + form.len()), |b| if p < b.0 { (p, p + form.len()) } else { b }));
        }
    }
    if best.is_none() {
        let lower = text.to_lowercase();
        // Lowercasing can change byte lengths; use it only when it does not.
        if lower.len() == text.len() {
            for form in forms {
                if let Some(p) = lower.find(&form.to_lowercase()) {
                    return Some((p, p + form.len()));
                }
            }
        }
    }
    best
}

/// Relations of one document: for every anchor (hyperdegree > τ_e), every co-occurring entity in
/// each incident hyperedge, the verbatim connecting stretch when it is short enough.
pub fn document_edges(
    doc_id: &str,
    entities: &[EntityIn],
    hyperedges: &BTreeMap<String, String>,
    incidence: &[(String, String)],
    tau_e: usize,
    max_connector_words: usize,
) -> Vec<EdgeOut> {
    let by_id: HashMap<&str, &EntityIn> = entities.iter().map(|e| (e.entity_id.as_str(), e)).collect();
    let mut members: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (h, e) in incidence {
        members.entry(h.as_str()).or_default().push(e.as_str());
    }
    let mut edges = BTreeSet::new();
    for anchor in entities.iter().filter(|e| e.hyperdegree as usize > tau_e) {
        for (hyperedge_id, ids) in &members {
            if !ids.contains(&anchor.entity_id.as_str()) {
                continue;
            }
            let Some(span) = hyperedges.get(*hyperedge_id) else { continue };
            let Some(a) = find_mention(span, anchor) else { continue };
            for other in ids.iter().filter(|id| **id != anchor.entity_id).filter_map(|id| by_id.get(id)) {
                let Some(b) = find_mention(span, other) else { continue };
                let (first, second, source, target) =
                    if a.0 <= b.0 { (a, b, anchor, *other) } else { (b, a, *other, anchor) };
                if second.0 < first.1 {
                    continue; // overlapping mentions
                }
                let between = &span[first.1..second.0];
                let words = between.split_whitespace().count();
                let crosses_sentence = between.contains(['.', ';', ':', '!', '?', '(', ')', '\n']);
                if words == 0 || words > max_connector_words || crosses_sentence {
                    continue;
                }
                let text = span[first.0..second.1].to_owned();
                let edge_id = stable_id("edge", &[doc_id, &source.entity_id, &target.entity_id, &text]);
                edges.insert(EdgeOut {
                    edge_id,
                    source_id: source.entity_id.clone(),
                    target_id: target.entity_id.clone(),
                    text,
                    hyperedge_id: (*hyperedge_id).to_owned(),
                });
            }
        }
    }
    // The same relation found from both of its anchors is one edge.
    let mut seen = BTreeSet::new();
    edges.into_iter().filter(|e| seen.insert(e.edge_id.clone())).collect()
}

/// One document's entities, hyperedges (id → statement, span) and incidences.
type Doc = (Vec<EntityIn>, BTreeMap<String, (String, String)>, Vec<(String, String)>);

fn build_bucket(
    entities: &[RecordBatch],
    hyperedges: &[RecordBatch],
    incidence: &[RecordBatch],
    config: &GraphConfig,
    runner: Option<&Runner>,
) -> Result<BucketOutput> {
    let mut docs: BTreeMap<String, Doc> = BTreeMap::new();
    for batch in entities {
        let doc = string_column(batch, col::DOC_ID)?;
        let id = string_column(batch, col::ENTITY_ID)?;
        let name = string_column(batch, col::NAME)?;
        let degree = typed::<arrow::array::Int32Array>(batch, col::HYPERDEGREE)?;
        let aliases = typed::<ListArray>(batch, col::ALIASES)?;
        for i in 0..batch.num_rows() {
            let list = aliases.value(i);
            let forms = list.as_any().downcast_ref::<StringArray>().map(|a| a.iter().flatten().map(str::to_owned).collect());
            docs.entry(doc.value(i).to_owned()).or_default().0.push(EntityIn {
                entity_id: id.value(i).to_owned(),
                name: name.value(i).to_owned(),
                aliases: forms.unwrap_or_default(),
                hyperdegree: degree.value(i),
            });
        }
    }
    for batch in hyperedges {
        let doc = string_column(batch, col::DOC_ID)?;
        let id = string_column(batch, col::HYPEREDGE_ID)?;
        let text = string_column(batch, col::TEXT)?;
        let span = string_column(batch, col::REF_TEXT)?;
        for i in 0..batch.num_rows() {
            let entry = (text.value(i).to_owned(), span.value(i).to_owned());
            docs.entry(doc.value(i).to_owned()).or_default().1.insert(id.value(i).to_owned(), entry);
        }
    }
    for batch in incidence {
        let doc = string_column(batch, col::DOC_ID)?;
        let h = string_column(batch, col::HYPEREDGE_ID)?;
        let e = string_column(batch, col::ENTITY_ID)?;
        for i in 0..batch.num_rows() {
            docs.entry(doc.value(i).to_owned()).or_default().2.push((h.value(i).to_owned(), e.value(i).to_owned()));
        }
    }
    let docs: Vec<(String, Doc)> = docs.into_iter().collect();
    let mut output = BucketOutput::default();
    let per_doc: Vec<(&str, Vec<EdgeOut>)> = match runner {
        Some(runner) => {
            let (edges, failures) = llm_edges(&docs, config.tau_e, runner);
            output.failures = failures;
            output.llm_calls = runner.drain_calls(&docs.iter().map(|(d, _)| d.clone()).collect::<Vec<_>>());
            docs.iter().map(|(d, _)| d.as_str()).zip(edges).collect()
        }
        None => docs
            .par_iter()
            .map(|(doc_id, (ents, hes, inc))| {
                let spans: BTreeMap<String, String> = hes.iter().map(|(h, (_, span))| (h.clone(), span.clone())).collect();
                (doc_id.as_str(), document_edges(doc_id, ents, &spans, inc, config.tau_e, config.max_connector_words))
            })
            .collect(),
    };
    let rows: Vec<(&str, &EdgeOut)> = per_doc.iter().flat_map(|(d, es)| es.iter().map(move |e| (*d, e))).collect();
    let batch = RecordBatch::try_new(
        Table::Edges.schema(),
        vec![
            Arc::new(rows.iter().map(|r| Some(r.1.edge_id.as_str())).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| Some(r.0)).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| Some(r.1.source_id.as_str())).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| Some(r.1.target_id.as_str())).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| Some(r.1.text.as_str())).collect::<StringArray>()),
            Arc::new(rows.iter().map(|r| Some(r.1.hyperedge_id.as_str())).collect::<StringArray>()),
        ],
    )?;
    output.tables = vec![vec![batch]];
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(id: &str, name: &str, aliases: &[&str], degree: i32) -> EntityIn {
        EntityIn {
            entity_id: id.into(),
            name: name.into(),
            aliases: aliases.iter().map(|s| (*s).to_owned()).collect(),
            hyperdegree: degree,
        }
    }

    #[test]
    fn anchors_relate_to_co_occurring_entities_through_short_connectors() {
        let entities = [
            entity("e1", "Ingrid Solberg", &["Solberg"], 4),
            entity("e2", "regional government", &[], 1),
            entity("e3", "Aldermoor", &[], 2),
        ];
        let hyperedges: BTreeMap<String, String> = [
            ("h1".to_owned(), "The first, by the engineer Ingrid Solberg for the regional government, argued.".to_owned()),
            ("h2".to_owned(), "Solberg was born in a village far to the north of the old market town of Aldermoor.".to_owned()),
        ]
        .into();
        let incidence: Vec<(String, String)> =
            [("h1", "e1"), ("h1", "e2"), ("h2", "e1"), ("h2", "e3")].iter().map(|(a, b)| ((*a).into(), (*b).into())).collect();
        let edges = document_edges("d", &entities, &hyperedges, &incidence, 3, 12);
        assert_eq!(edges.len(), 1, "{edges:?}");
        assert_eq!(edges[0].text, "Ingrid Solberg for the regional government");
        assert_eq!((edges[0].source_id.as_str(), edges[0].target_id.as_str(), edges[0].hyperedge_id.as_str()), ("e1", "e2", "h1"));
        // With a longer connector allowed, the alias mention in h2 relates Solberg to Aldermoor.
        let edges = document_edges("d", &entities, &hyperedges, &incidence, 3, 20);
        assert_eq!(edges.len(), 2);
        assert!(edges.iter().any(|e| e.text.starts_with("Solberg was born") && e.text.ends_with("Aldermoor")));
        // No anchor above tau_e: no edges.
        assert!(document_edges("d", &entities, &hyperedges, &incidence, 4, 20).is_empty());
    }
}
