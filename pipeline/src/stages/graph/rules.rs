//! The rules' relations: for every anchor and every entity that shares one of its hyperedges,
//! the verbatim stretch of the span from one mention to the other, when it is short and crosses
//! no sentence, clause or parenthesis boundary — so every edge is itself a span of its
//! hyperedge.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use rayon::prelude::*;

use super::{DocGraph, EdgeOut, EntityIn, GraphConfig, RelationExtractor, Relations};
use crate::core::backend::BackendId;
use crate::core::ids::stable_id;

/// Relations without a model.
#[derive(Debug, Clone, Copy, Default)]
pub struct RulesRelations;

impl RelationExtractor for RulesRelations {
    fn identity(&self) -> BackendId {
        BackendId::RULES
    }

    fn relations(&self, docs: &[DocGraph], config: &GraphConfig) -> Relations {
        let edges = docs
            .par_iter()
            .map(|d| {
                let spans: BTreeMap<String, String> =
                    d.hyperedges.iter().map(|(h, (_, span))| (h.clone(), span.clone())).collect();
                document_edges(&d.doc_id, &d.entities, &spans, &d.incidence, config.tau_e, config.max_connector_words)
            })
            .collect();
        Relations { edges, ..Relations::default() }
    }
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
                    hyperedge_id: Some((*hyperedge_id).to_owned()),
                });
            }
        }
    }
    // The same relation found from both of its anchors is one edge.
    let mut seen = BTreeSet::new();
    edges.into_iter().filter(|e| seen.insert(e.edge_id.clone())).collect()
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
            (
                "h1".to_owned(),
                "The first, by the engineer Ingrid Solberg for the regional government, argued.".to_owned(),
            ),
            (
                "h2".to_owned(),
                "Solberg was born in a village far to the north of the old market town of Aldermoor.".to_owned(),
            ),
        ]
        .into();
        let incidence: Vec<(String, String)> = [("h1", "e1"), ("h1", "e2"), ("h2", "e1"), ("h2", "e3")]
            .iter()
            .map(|(a, b)| ((*a).into(), (*b).into()))
            .collect();
        let edges = document_edges("d", &entities, &hyperedges, &incidence, 3, 12);
        assert_eq!(edges.len(), 1, "{edges:?}");
        assert_eq!(edges[0].text, "Ingrid Solberg for the regional government");
        assert_eq!(
            (edges[0].source_id.as_str(), edges[0].target_id.as_str(), edges[0].hyperedge_id.as_deref().unwrap()),
            ("e1", "e2", "h1")
        );
        // With a longer connector allowed, the alias mention in h2 relates Solberg to Aldermoor.
        let edges = document_edges("d", &entities, &hyperedges, &incidence, 3, 20);
        assert_eq!(edges.len(), 2);
        assert!(edges.iter().any(|e| e.text.starts_with("Solberg was born") && e.text.ends_with("Aldermoor")));
        // No anchor above tau_e: no edges.
        assert!(document_edges("d", &entities, &hyperedges, &incidence, 4, 20).is_empty());
    }
}
