//! The LLM extractor: our item prompt over an OpenAI-compatible endpoint, all chunks of a bucket
//! in flight at once (bounded by the client's concurrency limit).

use super::{ExtractedItem, Extractor, ItemRequest, STAGE};
use crate::failures::UnitError;
use crate::llm::CallContext;
use crate::llm::prompts::{ItemsAnswer, items_messages};
use crate::llm::runner::Runner;

/// Extracts items with an LLM.
#[derive(Debug)]
pub struct LlmExtractor<'a> {
    runner: &'a Runner,
}

impl<'a> LlmExtractor<'a> {
    /// An extractor over `runner`.
    pub fn new(runner: &'a Runner) -> Self {
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

impl Extractor for LlmExtractor<'_> {
    fn name(&self) -> String {
        format!("llm:{}", self.runner.client().model())
    }

    fn extract(&self, request: &ItemRequest<'_>) -> Result<Vec<ExtractedItem>, UnitError> {
        self.extract_all(std::slice::from_ref(request)).pop().unwrap_or_else(|| Ok(Vec::new()))
    }

    fn extract_all(&self, requests: &[ItemRequest<'_>]) -> Vec<Result<Vec<ExtractedItem>, UnitError>> {
        let asks = requests
            .iter()
            .map(|r| {
                let context = CallContext { stage: STAGE.into(), doc_id: Some(r.doc_id.to_owned()), purpose: "items".into() };
                (context, items_messages(r.window, r.target))
            })
            .collect();
        self.runner.ask_all::<ItemsAnswer>(asks).into_iter().map(|r| r.map(to_items)).collect()
    }
}
