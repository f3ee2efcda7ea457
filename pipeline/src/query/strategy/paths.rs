//! `paths`: SG-RAG's structure-guided retrieval. The question becomes a graph (ψ: the rules or
//! the LLM), matched exactly against the kb's graph through the path index (`flexstruct-paths`,
//! [`crate::query::paths`]); the 1-hop neighbourhood of its entities when nothing matches.

use std::collections::HashMap;

use rayon::prelude::*;

use super::{Retrieval, Strategy};
use crate::core::Result;
use crate::query::config::{QueryConfig, Thresholds};
use crate::query::paths::{GraphOrigin, PathQuery};
use crate::query::{Engine, Prepared};

/// Structure-guided retrieval through the path index.
#[derive(Debug)]
pub(super) struct Paths;

impl Strategy for Paths {
    fn embeds_entities(&self) -> bool {
        true
    }

    /// Structure-guided retrieval for every prepared question: each question's graph (ψ: rules
    /// or the LLM), its relation words and unfamiliar mentions embedded once for the batch, then
    /// the path index.
    fn retrieve_prepared(
        &self,
        engine: &Engine,
        prepared: &Prepared,
        _config: &QueryConfig,
        _thresholds: Thresholds,
    ) -> Result<Vec<Retrieval>> {
        let index = engine.path_index()?;
        let questions: Vec<&str> = prepared.questions.iter().map(|q| q.question.as_str()).collect();
        let graphs = engine.query_graphs.graphs_all(&questions, &prepared.entities);
        let mut texts: Vec<&str> = Vec::new();
        for ((graph, _), entities) in graphs.iter().zip(&prepared.entities) {
            texts.extend(graph.edges.iter().map(|e| e.relation.as_str()));
            let unfamiliar = graph.nodes.iter().filter_map(|n| n.mention.as_deref());
            texts.extend(unfamiliar.filter(|m| !entities.iter().any(|e| e.eq_ignore_ascii_case(m))));
        }
        texts.retain(|t| !t.is_empty());
        texts.sort_unstable();
        texts.dedup();
        let embedded: HashMap<String, Vec<f32>> =
            texts.iter().map(|t| t.to_string()).zip(engine.embedder.embed(&texts)?).collect();
        Ok(prepared
            .inputs()
            .into_par_iter()
            .enumerate()
            .map(|(i, question)| {
                let (graph, origin) = &graphs[i];
                let mut found = index.retrieve(&engine.kb, PathQuery { graph, question, texts: &embedded });
                match origin {
                    GraphOrigin::Rules => {}
                    GraphOrigin::Llm => found.notes.push("paths: the query graph is the LLM's".to_owned()),
                    GraphOrigin::RulesAfterLlm(why) => found
                        .notes
                        .push(format!("paths: the LLM's query graph was unusable ({why}); the rules' instead")),
                }
                Retrieval {
                    rows: found.rows,
                    notes: found.notes,
                    structure: Some(found.structure),
                    ..Retrieval::default()
                }
            })
            .collect())
    }
}
