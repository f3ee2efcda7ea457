//! Relations by an LLM: for every anchor, our relations prompt with its incident facts and the
//! entities that share them; every anchor of a bucket in flight at once.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::{DocGraph, EdgeOut, EntityIn, GraphConfig, RelationDrops, RelationExtractor, Relations, STAGE};
use crate::core::backend::BackendId;
use crate::core::ids::stable_id;
use crate::core::names::normalize;
use crate::io::{CallRecord, Failure};
use crate::llm::prompts::{Prompt, RelationsAnswer, relations_messages};
use crate::llm::{CallContext, Runner};

/// Finds relations with an LLM.
#[derive(Debug, Clone)]
pub struct LlmRelations {
    runner: Arc<Runner>,
}

impl LlmRelations {
    /// A relations backend over `runner`.
    pub fn new(runner: Arc<Runner>) -> Self {
        LlmRelations { runner }
    }
}

impl RelationExtractor for LlmRelations {
    fn identity(&self) -> BackendId {
        self.runner.identity(Prompt::Relations.version())
    }

    fn relations(&self, docs: &[DocGraph], config: &GraphConfig) -> Relations {
        llm_edges(docs, config.tau_e, &self.runner)
    }

    fn take_calls(&self, sorted_doc_ids: &[String]) -> Vec<CallRecord> {
        self.runner.drain_calls(sorted_doc_ids)
    }
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
/// each tied to the fact the model cites (none when it cites no fact it was given).
fn llm_edges(docs: &[DocGraph], tau_e: usize, runner: &Runner) -> Relations {
    let mut asks = Vec::new();
    let mut messages = Vec::new();
    for (d, DocGraph { doc_id, entities, hyperedges, incidence }) in docs.iter().enumerate() {
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
                    .filter_map(|h| {
                        hyperedges.get(*h).map(|(text, span)| ((*h).to_owned(), text.clone(), span.clone()))
                    })
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
                let context =
                    CallContext { stage: STAGE.into(), doc_id: Some(doc_id.clone()), purpose: "relations".into() };
                messages.push((context, relations_messages(&anchor.name, &pairs, &others)));
                asks.push(AnchorAsk { doc: d, anchor: anchor.name.clone(), facts });
            }
        }
    }
    let mut edges: Vec<BTreeSet<EdgeOut>> = vec![BTreeSet::new(); docs.len()];
    let mut failures = Vec::new();
    let mut dropped = RelationDrops::default();
    for (ask, answer) in asks.into_iter().zip(runner.ask_all::<RelationsAnswer>(messages)) {
        let DocGraph { doc_id, entities, .. } = &docs[ask.doc];
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
            let (Some(source), Some(target)) = (resolve(&relation.source), resolve(&relation.target)) else {
                dropped.unresolved_ends += 1;
                continue;
            };
            let text = relation.relation.trim();
            if source == target {
                dropped.self_relations += 1;
                continue;
            }
            if crate::core::text::is_blank(text) {
                dropped.empty_relations += 1;
                continue;
            }
            // The fact the model cites, when it is one of those it was given; otherwise the
            // edge has no supporting hyperedge rather than a guessed one.
            let hyperedge_id =
                relation.fact.and_then(|f| f.checked_sub(1)).and_then(|f| ask.facts.get(f)).map(|f| f.0.clone());
            edges[ask.doc].insert(EdgeOut {
                edge_id: stable_id("edge", &[doc_id, source, target, text]),
                source_id: source.to_owned(),
                target_id: target.to_owned(),
                text: text.to_owned(),
                hyperedge_id,
            });
        }
    }
    Relations { edges: edges.into_iter().map(|set| set.into_iter().collect()).collect(), failures, dropped }
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
