//! The query-graphs capability, ψ of structure-guided retrieval: the question as a graph.
//! Backends: [`RulesQueryGraphs`] (the rules of [`super::graph`]) and [`LlmQueryGraphs`] (our
//! query-graph prompt, as the seed does it; an answer that is not a usable graph falls back to
//! the rules, and the answer's notes say so).

use std::sync::Arc;

use super::graph::{QueryEdge, QueryGraph, QueryNode, rules_query_graph};
use crate::core::backend::BackendId;
use crate::io::CallRecord;
use crate::llm::prompts::{Prompt, QueryGraphAnswer, query_graph_messages};
use crate::llm::{CallContext, Runner};
use crate::query::STAGE;

/// Most nodes of a query graph from the LLM.
pub const MAX_NODES: usize = 8;

/// Where a question's graph came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraphOrigin {
    /// The rules.
    Rules,
    /// The LLM.
    Llm,
    /// The rules, because the LLM's answer was not a usable graph (why).
    RulesAfterLlm(String),
}

/// Makes the graphs of questions.
pub trait QueryGraphs: Send + Sync {
    /// Who makes them.
    fn identity(&self) -> BackendId;
    /// The graph of each question, given the entities found in it, with where it came from.
    fn graphs_all(&self, questions: &[&str], entities: &[Vec<String>]) -> Vec<(QueryGraph, GraphOrigin)>;
    /// The calls made since the last time (for `llm_calls`).
    fn take_calls(&self) -> Vec<CallRecord> {
        Vec::new()
    }
}

/// Query graphs by the rules.
#[derive(Debug, Clone, Copy, Default)]
pub struct RulesQueryGraphs;

impl QueryGraphs for RulesQueryGraphs {
    fn identity(&self) -> BackendId {
        BackendId::RULES
    }

    fn graphs_all(&self, questions: &[&str], entities: &[Vec<String>]) -> Vec<(QueryGraph, GraphOrigin)> {
        questions.iter().zip(entities).map(|(q, e)| (rules_query_graph(q, e), GraphOrigin::Rules)).collect()
    }
}

/// Query graphs by an LLM.
#[derive(Debug, Clone)]
pub struct LlmQueryGraphs {
    runner: Arc<Runner>,
}

impl LlmQueryGraphs {
    /// A backend over `runner`.
    pub fn new(runner: Arc<Runner>) -> Self {
        LlmQueryGraphs { runner }
    }
}

impl QueryGraphs for LlmQueryGraphs {
    fn identity(&self) -> BackendId {
        self.runner.identity(Prompt::QueryGraph.version())
    }

    fn graphs_all(&self, questions: &[&str], entities: &[Vec<String>]) -> Vec<(QueryGraph, GraphOrigin)> {
        let context = CallContext { stage: STAGE.into(), doc_id: None, purpose: "query_graph".into() };
        let asks = questions
            .iter()
            .zip(entities)
            .map(|(q, e)| {
                let e: Vec<&str> = e.iter().map(String::as_str).collect();
                (context.clone(), query_graph_messages(q, &e))
            })
            .collect();
        self.runner
            .ask_all::<QueryGraphAnswer>(asks)
            .into_iter()
            .zip(questions.iter().zip(entities))
            .map(|(answer, (q, e))| {
                let problem = match answer {
                    Ok(answer) => match from_answer(&answer) {
                        Ok(graph) => return (graph, GraphOrigin::Llm),
                        Err(problem) => problem,
                    },
                    Err(e) => e.message,
                };
                (rules_query_graph(q, e), GraphOrigin::RulesAfterLlm(problem))
            })
            .collect()
    }

    fn take_calls(&self) -> Vec<CallRecord> {
        self.runner.drain_all_calls()
    }
}

/// The LLM's answer as a query graph, when it is one the matcher can use: 2 to [`MAX_NODES`]
/// nodes, at least one named, every edge between two different nodes in range (each pair once),
/// every node on an edge. Empty names (or names without a letter or digit) are unknowns; without a node marked as the answer, the
/// last unknown is.
pub fn from_answer(answer: &QueryGraphAnswer) -> Result<QueryGraph, String> {
    let n = answer.nodes.len();
    if !(2..=MAX_NODES).contains(&n) {
        return Err(format!("{n} nodes (2 to {MAX_NODES})"));
    }
    let mut graph = QueryGraph::default();
    for node in &answer.nodes {
        let mention =
            node.name.as_deref().map(str::trim).filter(|m| !crate::core::text::is_blank(m)).map(str::to_owned);
        graph.nodes.push(QueryNode { answer: node.answer && mention.is_none(), mention });
    }
    if graph.nodes.iter().all(|n| n.mention.is_none()) {
        return Err("no node names an entity".into());
    }
    for edge in &answer.edges {
        let (a, b) = (edge.from, edge.to);
        if a >= n || b >= n {
            return Err(format!("an edge joins node {a} and node {b}, of {n} nodes"));
        }
        if a == b {
            return Err(format!("an edge joins node {a} to itself"));
        }
        if graph.edge_between(a, b).is_some() {
            return Err(format!("nodes {a} and {b} are joined twice"));
        }
        graph.edges.push(QueryEdge { a, b, relation: edge.relation.trim().to_lowercase() });
    }
    if let Some(lonely) = (0..n).find(|&v| graph.neighbours(v).next().is_none()) {
        return Err(format!("node {lonely} is on no edge"));
    }
    if !graph.nodes.iter().any(|n| n.answer)
        && let Some(last) = graph.nodes.iter().rposition(|n| n.mention.is_none())
    {
        graph.nodes[last].answer = true;
    }
    Ok(graph)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(json: &str) -> QueryGraphAnswer {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_chain_from_the_llm_becomes_a_query_graph() {
        let graph = from_answer(&answer(
            r#"{"nodes": [{"name": "Changed It"}, {"name": "..."}, {"name": "", "answer": true}],
                "edges": [{"from": 0, "to": 1, "relation": "Performer"}, {"from": 1, "to": 2, "relation": "place of birth"}]}"#,
        ))
        .unwrap();
        assert_eq!(graph.nodes[0].mention.as_deref(), Some("Changed It"));
        assert_eq!((graph.nodes[1].mention.clone(), graph.nodes[1].answer), (None, false));
        assert_eq!((graph.nodes[2].mention.clone(), graph.nodes[2].answer), (None, true));
        assert_eq!(graph.edge_between(1, 0).unwrap().relation, "performer");
        // Without an answer marked, the last unknown is the answer.
        let graph = from_answer(&answer(
            r#"{"nodes": [{"name": "A"}, {"name": null}], "edges": [{"from": 0, "to": 1, "relation": "founded"}]}"#,
        ))
        .unwrap();
        assert!(graph.nodes[1].answer && !graph.nodes[0].answer);
    }

    #[test]
    fn graphs_the_matcher_cannot_use_are_refused_with_the_reason() {
        let cases = [
            (r#"{"nodes": [{"name": "A"}]}"#, "1 nodes"),
            (r#"{"nodes": [{"name": null}, {"name": null}], "edges": [{"from": 0, "to": 1}]}"#, "no node names"),
            (r#"{"nodes": [{"name": "A"}, {"name": null}], "edges": [{"from": 0, "to": 2}]}"#, "of 2 nodes"),
            (r#"{"nodes": [{"name": "A"}, {"name": null}], "edges": [{"from": 1, "to": 1}]}"#, "to itself"),
            (
                r#"{"nodes": [{"name": "A"}, {"name": null}], "edges": [{"from": 0, "to": 1}, {"from": 1, "to": 0}]}"#,
                "joined twice",
            ),
            (r#"{"nodes": [{"name": "A"}, {"name": null}, {"name": "B"}], "edges": [{"from": 0, "to": 1}]}"#, "node 2"),
        ];
        for (json, expected) in cases {
            let problem = from_answer(&answer(json)).unwrap_err();
            assert!(problem.contains(expected), "{json}: {problem}");
        }
    }
}
