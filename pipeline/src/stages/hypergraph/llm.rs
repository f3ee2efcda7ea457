//! Summaries by an LLM: our summary prompt over the entity's facts, every entity of a bucket in
//! flight at once (bounded by the client's concurrency limit).

use std::sync::Arc;

use super::{STAGE, Summarizer, SummaryRequest};
use crate::core::backend::BackendId;
use crate::io::{CallRecord, UnitError};
use crate::llm::prompts::{Prompt, SummaryAnswer, summary_messages};
use crate::llm::{CallContext, Runner};

/// Most facts given to the LLM for one entity summary.
const MAX_SUMMARY_FACTS: usize = 60;

/// Writes summaries with an LLM.
#[derive(Debug, Clone)]
pub struct LlmSummarizer {
    runner: Arc<Runner>,
}

impl LlmSummarizer {
    /// A summarizer over `runner`.
    pub fn new(runner: Arc<Runner>) -> Self {
        LlmSummarizer { runner }
    }
}

impl Summarizer for LlmSummarizer {
    fn identity(&self) -> BackendId {
        self.runner.identity(Prompt::Summary.version())
    }

    fn summarize_all(&self, requests: &[SummaryRequest<'_>]) -> Vec<Result<String, UnitError>> {
        let asks = requests
            .iter()
            .map(|r| {
                let context =
                    CallContext { stage: STAGE.into(), doc_id: Some(r.doc_id.to_owned()), purpose: "summary".into() };
                (context, summary_messages(r.entity, &r.facts[..r.facts.len().min(MAX_SUMMARY_FACTS)]))
            })
            .collect();
        self.runner.ask_all::<SummaryAnswer>(asks).into_iter().map(|a| a.map(|a| a.summary)).collect()
    }

    fn take_calls(&self, sorted_doc_ids: &[String]) -> Vec<CallRecord> {
        self.runner.drain_calls(sorted_doc_ids)
    }
}
