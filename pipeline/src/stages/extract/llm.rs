//! The LLM extractor: our item prompt over an OpenAI-compatible endpoint, all chunks of a bucket
//! in flight at once (bounded by the client's concurrency limit).

use std::sync::Arc;

use super::{ExtractedItem, Extractor, ItemRequest, STAGE};
use crate::core::backend::BackendId;
use crate::io::{CallRecord, FailureKind, UnitError};
use crate::llm::prompts::{ITEMS_EXAMPLE, ItemsAnswer, ItemsExample, Prompt, items_messages};
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

/// The items of an answer as the model wrote them (trimmed); the stage screens out empty ones
/// and copies of the prompt's example, and counts them.
fn to_items(answer: ItemsAnswer) -> Vec<ExtractedItem> {
    answer
        .items
        .into_iter()
        .map(|i| ExtractedItem {
            text: i.statement.trim().to_owned(),
            ref_text: i.span.trim().to_owned(),
            entities: i.entities.into_iter().map(|e| e.trim().to_owned()).collect(),
            span: None,
        })
        .collect()
}

/// How many times a chunk whose items do not fit in an answer is halved (up to 4 parts).
const MAX_SPLITS: u32 = 2;

impl LlmExtractor {
    /// Items of every request; a target whose answer is cut off even with twice the room is
    /// split in two at the sentence end nearest its middle and each half asked on its own (the
    /// same window as context), up to `splits` times; the halves' items together are the
    /// chunk's.
    fn extract_parts(
        &self,
        requests: &[ItemRequest<'_>],
        purpose: &str,
        splits: u32,
    ) -> Vec<Result<Vec<ExtractedItem>, UnitError>> {
        let asks = requests
            .iter()
            .map(|r| {
                let context =
                    CallContext { stage: STAGE.into(), doc_id: Some(r.doc_id.to_owned()), purpose: purpose.into() };
                (context, items_messages(r.window, r.target))
            })
            .collect();
        let mut results: Vec<Result<Vec<ExtractedItem>, UnitError>> =
            self.runner.ask_all::<ItemsAnswer>(asks).into_iter().map(|r| r.map(to_items)).collect();
        if splits == 0 {
            return results;
        }
        let cut: Vec<(usize, (&str, &str))> = results
            .iter()
            .enumerate()
            .filter(|(_, r)| matches!(r, Err(e) if e.kind == FailureKind::Truncated))
            .filter_map(|(i, _)| halves(requests[i].target).map(|h| (i, h)))
            .collect();
        if cut.is_empty() {
            return results;
        }
        let parts: Vec<ItemRequest<'_>> =
            cut.iter().flat_map(|&(i, (a, b))| [a, b].map(|target| ItemRequest { target, ..requests[i] })).collect();
        let mut answers = self.extract_parts(&parts, &format!("{purpose}_half"), splits - 1).into_iter();
        for (i, _) in cut {
            let (first, second) = (answers.next(), answers.next());
            results[i] = match (first, second) {
                (Some(Ok(mut a)), Some(Ok(b))) => {
                    a.extend(b);
                    Ok(a)
                }
                (Some(Err(e)), _) | (_, Some(Err(e))) => Err(e),
                _ => continue,
            };
        }
        results
    }
}

/// `text` split at the sentence end (else the whitespace) nearest its middle, when it has one.
fn halves(text: &str) -> Option<(&str, &str)> {
    let middle = text.len() / 2;
    let mut cuts = crate::core::text::sentence_ends(text);
    if cuts.iter().all(|&c| c == 0 || c >= text.trim_end().len()) {
        cuts = text.char_indices().filter(|(_, c)| c.is_whitespace()).map(|(i, _)| i).collect();
    }
    let at = cuts.into_iter().filter(|&c| c > 0 && c < text.trim_end().len()).min_by_key(|&c| c.abs_diff(middle))?;
    let (a, b) = text.split_at(at);
    (!a.trim().is_empty() && !b.trim().is_empty()).then_some((a, b))
}

impl Extractor for LlmExtractor {
    fn identity(&self) -> BackendId {
        self.runner.identity(Prompt::Items.version())
    }

    fn extract_all(&self, requests: &[ItemRequest<'_>]) -> Vec<Result<Vec<ExtractedItem>, UnitError>> {
        self.extract_parts(requests, "items", MAX_SPLITS)
    }

    fn take_calls(&self, sorted_doc_ids: &[String]) -> Vec<CallRecord> {
        self.runner.drain_calls(sorted_doc_ids)
    }

    fn worked_example(&self) -> Option<ItemsExample> {
        Some(ITEMS_EXAMPLE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_halved_at_the_sentence_end_nearest_its_middle() {
        let text = "One short. Two is a longer sentence. Three. Four is the last one here.";
        let (a, b) = halves(text).unwrap();
        assert_eq!(a, "One short. Two is a longer sentence.");
        assert_eq!(b, " Three. Four is the last one here.");
        assert_eq!(halves("one two").unwrap(), ("one", " two"));
        assert_eq!(halves("single"), None);
    }
}
