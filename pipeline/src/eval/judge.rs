//! GE, HyperGraphRAG's generation evaluation: an LLM judge scores an answer 0–10 on seven
//! dimensions against the reference answer; each dimension counts (s/10 + F1)/2 and GE is their
//! mean. Only with a configured LLM; a question whose grading fails gets no GE (never a guess).

use serde::Deserialize;

use crate::error::Result;
use crate::llm::client::{CallContext, Message};
use crate::llm::runner::Runner;
use crate::query::Answer;

use super::QaQuestion;

/// The seven dimensions, in report order.
pub const DIMENSIONS: [&str; 7] =
    ["comprehensiveness", "knowledgeability", "correctness", "relevance", "diversity", "logical_coherence", "factuality"];

/// Instructions of the judge.
const JUDGE_INSTRUCTIONS: &str = "\
You grade an ANSWER to a QUESTION, with the REFERENCE answer as the standard of what is true and \
complete. Give an integer from 0 (worst) to 10 (best) for each of: comprehensiveness (covers \
what the question asks), knowledgeability (shows command of the subject), correctness (agrees \
with the reference), relevance (stays on the question), diversity (brings in the different \
aspects that matter), logical_coherence (hangs together), factuality (states nothing false). \
An empty answer scores 0 everywhere. Answer with JSON only: {\"comprehensiveness\": 0, \
\"knowledgeability\": 0, \"correctness\": 0, \"relevance\": 0, \"diversity\": 0, \
\"logical_coherence\": 0, \"factuality\": 0}";

#[derive(Debug, Deserialize)]
struct Grades {
    comprehensiveness: f64,
    knowledgeability: f64,
    correctness: f64,
    relevance: f64,
    diversity: f64,
    logical_coherence: f64,
    factuality: f64,
}

/// The judge: the LLM of the engine's configuration.
#[derive(Debug)]
pub struct Judge<'a> {
    runner: &'a Runner,
}

impl<'a> Judge<'a> {
    /// A judge over a runner.
    pub fn new(runner: &'a Runner) -> Judge<'a> {
        Judge { runner }
    }

    /// The seven scores (0–10) of every answer, `None` where the judge gave no usable grades.
    pub fn grade(&self, qa: &[QaQuestion], answers: &[Answer]) -> Result<Vec<Option<[f64; 7]>>> {
        let context = CallContext { stage: "eval".into(), doc_id: None, purpose: "judge".into() };
        let asks = qa
            .iter()
            .zip(answers)
            .map(|(q, a)| {
                let user = format!("QUESTION: {}\n\nREFERENCE: {}\n\nANSWER: {}", q.question, q.answers.join(" | "), a.answer);
                (context.clone(), vec![Message::system(JUDGE_INSTRUCTIONS), Message::user(user)])
            })
            .collect();
        Ok(self
            .runner
            .ask_all::<Grades>(asks)
            .into_iter()
            .map(|g| {
                g.ok().map(|g| {
                    [g.comprehensiveness, g.knowledgeability, g.correctness, g.relevance, g.diversity, g.logical_coherence, g.factuality]
                        .map(|s| s.clamp(0.0, 10.0))
                })
            })
            .collect())
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
