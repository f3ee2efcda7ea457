//! Talking to an OpenAI-compatible LLM: the client ([`client`]), its persistent response cache
//! ([`cache`]), rate limits ([`limiter`]), tolerant JSON parsing ([`parse`]) and our prompts
//! ([`prompts`]).

pub mod cache;
pub mod client;
pub mod limiter;
pub mod parse;
pub mod prompts;
pub mod runner;

use std::sync::Arc;

use arrow::array::{BooleanArray, Int64Array, RecordBatch, StringArray};
use flexstruct_schemas::Table;

pub use client::{CallContext, CallRecord, LlmClient, LlmError, Message};

use crate::error::Result;

/// Calls as a batch of the `llm_calls` table.
pub fn calls_batch(calls: &[CallRecord]) -> Result<RecordBatch> {
    let strings = |f: fn(&CallRecord) -> Option<&str>| Arc::new(calls.iter().map(f).collect::<StringArray>()) as _;
    let ints = |f: fn(&CallRecord) -> u64| Arc::new(calls.iter().map(|c| Some(f(c) as i64)).collect::<Int64Array>()) as _;
    let bools = |f: fn(&CallRecord) -> bool| Arc::new(calls.iter().map(|c| Some(f(c))).collect::<BooleanArray>()) as _;
    Ok(RecordBatch::try_new(
        Table::LlmCalls.schema(),
        vec![
            strings(|c| Some(&c.stage)),
            strings(|c| c.doc_id.as_deref()),
            strings(|c| Some(&c.purpose)),
            strings(|c| Some(&c.model)),
            strings(|c| Some(&c.request_id)),
            ints(|c| c.prompt_tokens),
            ints(|c| c.completion_tokens),
            bools(|c| c.tokens_estimated),
            ints(|c| c.latency_ms),
            bools(|c| c.cached),
            strings(|c| Some(&c.status)),
        ],
    )?)
}
