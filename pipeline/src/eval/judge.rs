//! GE, HyperGraphRAG's generation evaluation: an LLM judge scores an answer 0–10 on seven
//! dimensions against the reference answer; each dimension counts (s/10 + F1)/2 and GE is their
//! mean. The judge is a capability like the others ([`Judge`]): [`LlmJudge`] grades with our
//! judge prompt; the rules backend, [`NoJudge`], grades nothing, because GE is never estimated
//! without an LLM. A question whose grading fails gets no GE (never a guess).

use std::sync::Arc;

use serde::Deserialize;

use crate::compose::Backends;
use crate::core::backend::{BackendId, Capability};
use crate::io::CallRecord;
use crate::llm::prompts::{Prompt, judge_messages};
use crate::llm::{CallContext, Runner};

/// The seven dimensions, in report order.
pub const DIMENSIONS: [&str; 7] = [
    "comprehensiveness",
    "knowledgeability",
    "correctness",
    "relevance",
    "diversity",
    "logical_coherence",
    "factuality",
];

/// One answer to grade.
#[derive(Debug, Clone, Copy)]
pub struct GradeRequest<'a> {
    /// The question.
    pub question: &'a str,
    /// The gold answers.
    pub references: &'a [String],
    /// The answer given.
    pub answer: &'a str,
}

/// Grades answers on the seven dimensions.
pub trait Judge: Sync {
    /// Who grades (the report says it).
    fn identity(&self) -> BackendId;
    /// Whether this judge grades at all (the rules' judge does not: GE is not measured).
    fn measures(&self) -> bool;
    /// The seven scores (0–10) of every answer, `None` where there are none.
    fn grade(&self, requests: &[GradeRequest<'_>]) -> Vec<Option<[f64; 7]>>;
    /// The calls made since the last time (for `llm_calls`).
    fn take_calls(&self) -> Vec<CallRecord> {
        Vec::new()
    }
}

/// The rules' judge: no grades, so GE stays "not measured".
#[derive(Debug, Clone, Copy, Default)]
pub struct NoJudge;

impl Judge for NoJudge {
    fn identity(&self) -> BackendId {
        BackendId::RULES
    }

    fn measures(&self) -> bool {
        false
    }

    fn grade(&self, requests: &[GradeRequest<'_>]) -> Vec<Option<[f64; 7]>> {
        vec![None; requests.len()]
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Grades {
    comprehensiveness: f64,
    knowledgeability: f64,
    correctness: f64,
    relevance: f64,
    diversity: f64,
    logical_coherence: f64,
    factuality: f64,
}

/// The LLM judge.
#[derive(Debug, Clone)]
pub struct LlmJudge {
    runner: Arc<Runner>,
}

impl LlmJudge {
    /// A judge over `runner`.
    pub fn new(runner: Arc<Runner>) -> LlmJudge {
        LlmJudge { runner }
    }
}

impl Judge for LlmJudge {
    fn identity(&self) -> BackendId {
        self.runner.identity(Prompt::Judge.version())
    }

    fn measures(&self) -> bool {
        true
    }

    fn grade(&self, requests: &[GradeRequest<'_>]) -> Vec<Option<[f64; 7]>> {
        let context = CallContext { stage: "eval".into(), doc_id: None, purpose: "judge".into() };
        let asks =
            requests.iter().map(|r| (context.clone(), judge_messages(r.question, r.references, r.answer))).collect();
        self.runner
            .ask_all::<Grades>(asks)
            .into_iter()
            .map(|g| {
                g.ok().map(|g| {
                    [
                        g.comprehensiveness,
                        g.knowledgeability,
                        g.correctness,
                        g.relevance,
                        g.diversity,
                        g.logical_coherence,
                        g.factuality,
                    ]
                    .map(|s| s.clamp(0.0, 10.0))
                })
            })
            .collect()
    }

    fn take_calls(&self) -> Vec<CallRecord> {
        self.runner.drain_all_calls()
    }
}

/// The judge `backends.judge` chooses.
pub fn judge_for(backends: &Backends) -> Box<dyn Judge> {
    match backends.llm(Capability::Judge) {
        Some(runner) => Box::new(LlmJudge::new(runner)),
        None => Box::new(NoJudge),
    }
}

/// GE of one answer (0–1): the mean over dimensions of (score/10 + F1)/2.
pub fn ge(scores: &[f64; 7], f1: f64) -> f64 {
    scores.iter().map(|s| (s / 10.0 + f1) / 2.0).sum::<f64>() / scores.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ge_mixes_the_judge_and_f1_per_dimension() {
        assert!((ge(&[10.0; 7], 1.0) - 1.0).abs() < 1e-12);
        assert!((ge(&[0.0; 7], 0.0)).abs() < 1e-12);
        // (0.8 + 0.5)/2 = 0.65 on every dimension.
        assert!((ge(&[8.0; 7], 0.5) - 0.65).abs() < 1e-12);
        let mixed = [10.0, 0.0, 10.0, 0.0, 10.0, 0.0, 10.0];
        assert!((ge(&mixed, 0.0) - (4.0 * 0.5) / 7.0).abs() < 1e-12);
    }
}
