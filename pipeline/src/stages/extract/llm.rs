//! The LLM extractor: our item prompt over an OpenAI-compatible endpoint, all chunks of a bucket
//! in flight at once (bounded by the client's concurrency limit).

use std::sync::Arc;

use super::{ExtractedItem, Extractor, ItemRequest, STAGE};
use crate::core::backend::BackendId;
use crate::io::{CallRecord, UnitError};
use crate::llm::prompts::{ItemsAnswer, Prompt, items_messages};
use crate::llm::{CallContext, Runner};

/// Extracts items with an LLM.
#[derive(Debug, Clone)]
pub struct LlmExtractor {
    runner: Arc<Runner>,
}

impl LlmExtractor {
    /// An extractor over `runner`.
    pub fn new(runner: Arc<Runner>) -> Self {
        LlmExtractor { runner }
    }
}

fn to_items(answer: ItemsAnswer) -> Vec<ExtractedItem> {
    answer
        .items
        .into_iter()
        .filter(|i| !i.statement.trim().is_empty())
        .map(|i| ExtractedItem {
            text: i.statement.trim().to_owned(),
            ref_text: i.span.trim().to_owned(),
            entities: i.entities.into_iter().map(|e| e.trim().to_owned()).filter(|e| !e.is_empty()).collect(),
            span: None,
        })
        .collect()
}

impl Extractor for LlmExtractor {
    fn identity(&self) -> BackendId {
        self.runner.identity(Prompt::Items.version())
    }

    fn extract_all(&self, requests: &[ItemRequest<'_>]) -> Vec<Result<Vec<ExtractedItem>, UnitError>> {
        let asks = requests
            .iter()
            .map(|r| {
                let context =
                    CallContext { stage: STAGE.into(), doc_id: Some(r.doc_id.to_owned()), purpose: "items".into() };
                (context, items_messages(r.window, r.target))
            })
            .collect();
        self.runner.ask_all::<ItemsAnswer>(asks).into_iter().map(|r| r.map(to_items)).collect()
    }

    fn take_calls(&self, sorted_doc_ids: &[String]) -> Vec<CallRecord> {
        self.runner.drain_calls(sorted_doc_ids)
    }
}
