//! ψ without a model: the question as a query graph, and its cost-aware decomposition into
//! linear query paths.
//!
//! The rules read three shapes of factual question, from the question's entities (the rules
//! query-entities backend) and the words around them:
//! - a **chain** around one entity — "Who is the mother of the director of film X?" — splits the
//!   words before the entity at "of the / of a / of an" into relations, outermost first, each
//!   leading to an unknown node: `?answer —mother— ?1 —director film— X`; words after the entity
//!   ("… of film X born?") are one more relation from the answer to the chain's outermost node;
//!   and without an "of" before the entity, all the words around it are one relation to the
//!   answer ("When did X die?": `X —die— ?answer`);
//! - **parallel attributes** of entities joined only by "or", "and" or a comma — "Which film came
//!   out first, A or B?" — give each entity an unknown neighbour by the question's relation
//!   words: `A —film came first— ?1`, `B —film came first— ?2`;
//! - otherwise **a direct relation** between two entities for the words between them — "Is A the
//!   father of B?": `A —father— B` — and one answer node related to every entity by the words
//!   around them ("How many pupils visited X in 2023?": `X —many pupils visited— ?answer —…— 2023`).
//!
//! Relation words are the question's words without its stop words and wh-words; they are matched
//! against kb edges by embedding similarity, never exactly.

use std::collections::BTreeSet;

use crate::core::words::is_question_stop_word;

/// A node of a query graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryNode {
    /// The entity as written in the question; None for an unknown node.
    pub mention: Option<String>,
    /// Whether this is what the question asks for.
    pub answer: bool,
}

/// An edge of a query graph: two nodes and the relation words between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryEdge {
    /// One end.
    pub a: usize,
    /// The other end.
    pub b: usize,
    /// Relation words (may be empty: "related to").
    pub relation: String,
}

/// A question as a graph.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryGraph {
    /// Nodes.
    pub nodes: Vec<QueryNode>,
    /// Edges.
    pub edges: Vec<QueryEdge>,
}

impl QueryGraph {
    fn node(&mut self, mention: Option<&str>, answer: bool) -> usize {
        self.nodes.push(QueryNode { mention: mention.map(str::to_owned), answer });
        self.nodes.len() - 1
    }

    fn edge(&mut self, a: usize, b: usize, relation: String) {
        self.edges.push(QueryEdge { a, b, relation });
    }

    /// Neighbours of `node` (by edge order).
    pub fn neighbours(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        self.edges.iter().filter_map(move |e| match (e.a == node, e.b == node) {
            (true, _) => Some(e.b),
            (_, true) => Some(e.a),
            _ => None,
        })
    }

    /// The edge joining two nodes.
    pub fn edge_between(&self, a: usize, b: usize) -> Option<&QueryEdge> {
        self.edges.iter().find(|e| (e.a == a && e.b == b) || (e.a == b && e.b == a))
    }
}

/// The content words of a stretch of the question, lowercased, space-separated.
fn relation_words(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric() && c != '\'' && c != '-')
        .map(str::to_lowercase)
        .filter(|w| !w.is_empty() && !is_question_stop_word(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Byte ranges of the entities in the question, in order, without overlaps: an entity that
/// spans two others ("A and B" beside "A" and "B") gives way to them, else the longer one wins.
fn mentions(question: &str, entities: &[String]) -> Vec<(usize, usize)> {
    let lower = question.to_lowercase();
    let mut found: Vec<(usize, usize)> = Vec::new();
    for entity in entities {
        let needle = entity.to_lowercase();
        // Lowercasing can change byte offsets; such mentions are looked up as written only.
        let at = if lower.len() == question.len() { lower.find(&needle) } else { question.find(entity.as_str()) };
        if let Some(start) = at.filter(|_| !needle.is_empty()) {
            found.push((start, start + needle.len()));
        }
    }
    found.sort_unstable();
    found.dedup();
    let inside =
        |outer: (usize, usize), inner: (usize, usize)| outer != inner && outer.0 <= inner.0 && inner.1 <= outer.1;
    let spans_two = |m: (usize, usize)| found.iter().filter(|&&o| inside(m, o)).count() >= 2;
    let mut kept: Vec<(usize, usize)> = Vec::new();
    let mut by_length: Vec<(usize, usize)> = found.iter().copied().filter(|&m| !spans_two(m)).collect();
    by_length.sort_by_key(|&(s, e)| (std::cmp::Reverse(e - s), s));
    for m in by_length {
        if kept.iter().all(|k| m.1 <= k.0 || k.1 <= m.0) {
            kept.push(m);
        }
    }
    kept.sort_unstable();
    kept
}

/// The chain of relations in the words before an entity, innermost first, when they end in
/// "of" — "the mother of the director of film", "the date of death of" — split at "of the / of a
/// / of an"; none when they do not ("the talks on the").
fn chain_relations(prefix: &str) -> Vec<String> {
    let lower = prefix.to_lowercase();
    let mut pieces = Vec::new();
    let (mut from, mut at) = (0, 0);
    while let Some((i, len)) = ["of the ", "of a ", "of an "]
        .iter()
        .filter_map(|sep| lower[at..].find(sep).map(|p| (at + p, sep.len())))
        .filter(|(p, _)| *p == 0 || !lower.as_bytes()[*p - 1].is_ascii_alphanumeric())
        .min()
    {
        pieces.push(&lower[from..i]);
        from = i + len;
        at = from;
    }
    pieces.push(&lower[from..]);
    let words = |piece: &str| piece.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let last = words(pieces[pieces.len() - 1]);
    // "… of film X": the last piece leads to the entity through "of" and at most one word.
    let of_link = last.iter().rev().take(2).any(|w| w == "of");
    if !of_link {
        // "… director of the film X": what follows the last "of the" is only the entity's kind.
        if pieces.len() < 2 || last.len() > 1 {
            return Vec::new();
        }
        pieces.pop();
    }
    pieces.into_iter().rev().map(relation_words).filter(|r| !r.is_empty()).collect()
}

/// Whether the words between two entities only join them ("A or B", "A and B", "A, B").
fn only_joins(between: &str) -> bool {
    between.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).all(|w| {
        matches!(w.to_lowercase().as_str(), "or" | "and" | "nor" | "both" | "either" | "neither" | "vs" | "versus")
    })
}

/// The query graph of a question whose entities are `entities` (rules).
pub fn rules_query_graph(question: &str, entities: &[String]) -> QueryGraph {
    let spans = mentions(question, entities);
    let mut graph = QueryGraph::default();
    match spans.as_slice() {
        [] => {}
        [(start, end)] => {
            let entity = graph.node(Some(&question[*start..*end]), false);
            let before = &question[..*start];
            let after = relation_words(&question[*end..]);
            let mut chain = chain_relations(before);
            if chain.is_empty() {
                // One relation, from all the words around the entity.
                chain.push(relation_words(&format!("{before} {after}")));
            } else if !after.is_empty() {
                chain.push(after);
            }
            let last = chain.len() - 1;
            let mut inner = entity;
            for (i, relation) in chain.into_iter().enumerate() {
                let outer = graph.node(None, i == last);
                graph.edge(inner, outer, relation);
                inner = outer;
            }
        }
        many => {
            let nodes: Vec<usize> = many.iter().map(|&(s, e)| graph.node(Some(&question[s..e]), false)).collect();
            let around = relation_words(&format!("{} {}", &question[..many[0].0], &question[many[many.len() - 1].1..]));
            let betweens: Vec<&str> = many.windows(2).map(|p| &question[p[0].1..p[1].0]).collect();
            if betweens.iter().all(|b| only_joins(b)) {
                // A comparison: the same attribute of each entity.
                for &node in &nodes {
                    let attribute = graph.node(None, true);
                    graph.edge(node, attribute, around.clone());
                }
            } else {
                for (i, between) in betweens.iter().enumerate() {
                    let words = relation_words(between);
                    if !words.is_empty() {
                        graph.edge(nodes[i], nodes[i + 1], words);
                    }
                }
                // What is asked relates to every entity.
                if !around.is_empty() || graph.edges.is_empty() {
                    let answer = graph.node(None, true);
                    for &node in &nodes {
                        graph.edge(node, answer, around.clone());
                    }
                }
            }
        }
    }
    graph
}

/// A cost-aware decomposition of the query graph into simple paths of at most `max_length`
/// edges that together cover every edge: repeatedly the path that covers the most edges not yet
/// covered, then the one that repeats the fewest covered ones, then the lightest (the sum of its
/// nodes' degrees in the query graph: hubs of the query are costly to traverse from), then the
/// first in node order. Each path is its node sequence.
pub fn decompose(graph: &QueryGraph, max_length: usize) -> Vec<Vec<usize>> {
    let degree: Vec<usize> = (0..graph.nodes.len()).map(|n| graph.neighbours(n).count()).collect();
    let mut candidates: Vec<Vec<usize>> = Vec::new();
    for start in 0..graph.nodes.len() {
        let mut stack = vec![vec![start]];
        while let Some(path) = stack.pop() {
            if path.len() > 1 {
                candidates.push(path.clone());
            }
            if path.len() > max_length {
                continue;
            }
            let last = path[path.len() - 1];
            for next in graph.neighbours(last) {
                if !path.contains(&next) {
                    let mut longer = path.clone();
                    longer.push(next);
                    stack.push(longer);
                }
            }
        }
    }
    // A path and its reverse are the same path: keep the orientation that starts at a known
    // node when one end is known (the smaller first node otherwise).
    let known = |n: usize| graph.nodes[n].mention.is_some();
    candidates.retain(|p| {
        let (first, last) = (p[0], p[p.len() - 1]);
        match (known(first), known(last)) {
            (true, false) => true,
            (false, true) => false,
            _ => first < last,
        }
    });
    candidates.sort();
    let edge_index =
        |a: usize, b: usize| graph.edges.iter().position(|e| (e.a == a && e.b == b) || (e.a == b && e.b == a));
    let mut covered: BTreeSet<usize> = BTreeSet::new();
    let mut chosen = Vec::new();
    while covered.len() < graph.edges.len() {
        let best = candidates
            .iter()
            .map(|p| {
                let edges: Vec<usize> = p.windows(2).filter_map(|w| edge_index(w[0], w[1])).collect();
                let new = edges.iter().filter(|e| !covered.contains(e)).count();
                let weight: usize = p.iter().map(|&n| degree[n]).sum();
                (p, edges, new, weight)
            })
            .filter(|c| c.2 > 0)
            .max_by(|a, b| {
                a.2.cmp(&b.2).then((b.1.len() - b.2).cmp(&(a.1.len() - a.2))).then(b.3.cmp(&a.3)).then(b.0.cmp(a.0))
            });
        let Some((path, edges, _, _)) = best else { break };
        covered.extend(edges);
        chosen.push(path.clone());
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relations(g: &QueryGraph) -> Vec<(Option<&str>, Option<&str>, &str)> {
        g.edges
            .iter()
            .map(|e| (g.nodes[e.a].mention.as_deref(), g.nodes[e.b].mention.as_deref(), e.relation.as_str()))
            .collect()
    }

    #[test]
    fn a_compositional_question_is_a_chain_of_unknowns() {
        let g =
            rules_query_graph("Who is the mother of the director of film Polish Easter?", &["Polish Easter".into()]);
        assert_eq!(relations(&g), vec![(Some("Polish Easter"), None, "director film"), (None, None, "mother")]);
        assert!(g.nodes[2].answer && !g.nodes[1].answer);
        let g = rules_query_graph("Where was the director of film Tall Ships born?", &["Tall Ships".into()]);
        assert_eq!(relations(&g), vec![(Some("Tall Ships"), None, "director film"), (None, None, "born")]);
        let g = rules_query_graph("When did Mara Quint die?", &["Mara Quint".into()]);
        assert_eq!(relations(&g), vec![(Some("Mara Quint"), None, "die")]);
        assert_eq!(decompose(&g, 3), vec![vec![0, 1]]);
        let g = rules_query_graph("What is the date of death of Mara Quint?", &["Mara Quint".into()]);
        assert_eq!(relations(&g), vec![(Some("Mara Quint"), None, "date death")]);
        let g = rules_query_graph("Who is the mother of the director of the film Tall Ships?", &["Tall Ships".into()]);
        assert_eq!(relations(&g), vec![(Some("Tall Ships"), None, "director"), (None, None, "mother")]);
        let g = rules_query_graph(
            "Under whose chairmanship did the talks on the Velda Compact begin?",
            &["Velda Compact".into()],
        );
        assert_eq!(relations(&g), vec![(Some("Velda Compact"), None, "under chairmanship talks begin")]);
    }

    #[test]
    fn comparisons_are_parallel_attributes_and_a_relation_between_names_is_an_edge() {
        let entities = ["Tall Ships or Polish Easter".to_owned(), "Tall Ships".into(), "Polish Easter".into()];
        let g = rules_query_graph("Which film came out first, Tall Ships or Polish Easter?", &entities);
        assert_eq!(
            relations(&g),
            vec![(Some("Tall Ships"), None, "film came out"), (Some("Polish Easter"), None, "film came out")]
        );
        let paths = decompose(&g, 3);
        assert_eq!(paths.len(), 2, "two parallel paths, not one through an unknown: {paths:?}");
        let g = rules_query_graph("Is Mara Quint the mother of Ada Quint?", &["Mara Quint".into(), "Ada Quint".into()]);
        assert_eq!(relations(&g), vec![(Some("Mara Quint"), Some("Ada Quint"), "mother")]);
        let g =
            rules_query_graph("How many pupils visited Harlow Hall in 2023?", &["Harlow Hall".into(), "2023".into()]);
        assert_eq!(
            relations(&g),
            vec![(Some("Harlow Hall"), None, "many pupils visited"), (Some("2023"), None, "many pupils visited")]
        );
        assert_eq!(g.nodes.len(), 3, "one answer node for both");
        assert!(rules_query_graph("What happened?", &[]).edges.is_empty());
    }

    #[test]
    fn decomposition_covers_every_edge_with_the_fewest_paths() {
        // ?a — X — ?b — ?c: one path of three edges covers it.
        let mut g = QueryGraph::default();
        let (x, a, b, c) = (g.node(Some("X"), false), g.node(None, true), g.node(None, false), g.node(None, false));
        g.edge(x, a, "r".into());
        g.edge(x, b, "s".into());
        g.edge(b, c, "t".into());
        let paths = decompose(&g, 3);
        assert_eq!(paths.len(), 1, "{paths:?}");
        assert_eq!(paths[0].len(), 4);
        let short = decompose(&g, 1);
        assert_eq!(short.len(), 3);
        assert!(short.iter().all(|p| p.len() == 2));
    }
}
