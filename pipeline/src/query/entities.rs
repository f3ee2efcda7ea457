//! The query-entities capability: the entities a question names, for entity retrieval and
//! HyperGraphRAG's entity probes. Backends: [`RulesQueryEntities`] (the rules' mention finder)
//! and [`LlmQueryEntities`] (our query-entities prompt; a question whose answer is unusable
//! falls back to the rules).

use std::collections::HashSet;
use std::sync::Arc;

use super::STAGE;
use crate::core::backend::BackendId;
use crate::io::CallRecord;
use crate::llm::prompts::{Prompt, QueryEntitiesAnswer, query_entities_messages};
use crate::llm::{CallContext, Runner};
use crate::rules::mentions;

/// Finds the entities of questions.
pub trait QueryEntities: Send + Sync {
    /// Who finds them (reported with the answers' evaluation).
    fn identity(&self) -> BackendId;
    /// The entities of each question, in order.
    fn entities_all(&self, questions: &[&str]) -> Vec<Vec<String>>;
    /// The calls made since the last time (for `llm_calls`).
    fn take_calls(&self) -> Vec<CallRecord> {
        Vec::new()
    }
}

/// Query entities without a model.
#[derive(Debug, Clone, Copy, Default)]
pub struct RulesQueryEntities;

impl QueryEntities for RulesQueryEntities {
    fn identity(&self) -> BackendId {
        BackendId::RULES
    }

    fn entities_all(&self, questions: &[&str]) -> Vec<Vec<String>> {
        questions.iter().map(|q| rules_query_entities(q)).collect()
    }
}

/// Query entities by an LLM.
#[derive(Debug, Clone)]
pub struct LlmQueryEntities {
    runner: Arc<Runner>,
}

impl LlmQueryEntities {
    /// A backend over `runner`.
    pub fn new(runner: Arc<Runner>) -> Self {
        LlmQueryEntities { runner }
    }
}

impl QueryEntities for LlmQueryEntities {
    fn identity(&self) -> BackendId {
        self.runner.identity(Prompt::QueryEntities.version())
    }

    fn entities_all(&self, questions: &[&str]) -> Vec<Vec<String>> {
        let context = CallContext { stage: STAGE.into(), doc_id: None, purpose: "query_entities".into() };
        let asks = questions.iter().map(|q| (context.clone(), query_entities_messages(q))).collect();
        self.runner
            .ask_all::<QueryEntitiesAnswer>(asks)
            .into_iter()
            .zip(questions)
            .map(|(answer, q)| match answer {
                Ok(a) => a.entities.into_iter().filter(|e| !crate::core::text::is_blank(e)).collect(),
                Err(_) => rules_query_entities(q),
            })
            .collect()
    }

    fn take_calls(&self) -> Vec<CallRecord> {
        self.runner.drain_all_calls()
    }
}

/// Capitalised words that open questions without naming anything.
const QUESTION_OPENERS: &[&str] = &[
    "according",
    "during",
    "describe",
    "explain",
    "discuss",
    "compare",
    "given",
    "based",
    "considering",
    "regarding",
    "list",
    "name",
    "identify",
    "summarize",
    "summarise",
    "outline",
];

/// Entities of a question found by the rules extractor (names, acronyms, quantities, dates,
/// determiner-led phrases). Questions often join two names with "and" or "or" (`Who was born
/// first, A and B?`), which the document extractor keeps together as one name (`Hallam & Price`);
/// here each side is also a query entity.
pub fn rules_query_entities(question: &str) -> Vec<String> {
    let lower: HashSet<String> = question
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().next().is_some_and(char::is_lowercase))
        .map(str::to_owned)
        .collect();
    let mut out: Vec<String> = Vec::new();
    let mut add = |name: &str| {
        let name = name.trim();
        if !name.is_empty()
            && !QUESTION_OPENERS.contains(&name.to_lowercase().as_str())
            && !out.iter().any(|n| n == name)
        {
            out.push(name.to_owned());
        }
    };
    for m in mentions(question, 0..question.len(), &lower) {
        let name = &question[m.bytes];
        add(name);
        for sep in [" and ", " or "] {
            if name.contains(sep) {
                name.split(sep).for_each(&mut add);
            }
        }
    }
    out
}
