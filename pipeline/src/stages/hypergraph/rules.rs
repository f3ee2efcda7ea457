//! The rules' summaries: an entity above τ_s keeps the texts of its first τ_s hyperedges, in
//! extraction order.

use super::{Summarizer, SummaryRequest};
use crate::core::backend::BackendId;
use crate::io::UnitError;

/// Summaries without a model.
#[derive(Debug, Clone, Copy, Default)]
pub struct RulesSummarizer;

impl Summarizer for RulesSummarizer {
    fn identity(&self) -> BackendId {
        BackendId::RULES
    }

    fn summarize_all(&self, requests: &[SummaryRequest<'_>]) -> Vec<Result<String, UnitError>> {
        requests.iter().map(|r| Ok(r.facts[..r.facts.len().min(r.tau_s)].join(" "))).collect()
    }
}
