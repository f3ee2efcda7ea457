//! Talking to an OpenAI-compatible LLM: its settings ([`config`]), the client ([`client`]), its
//! persistent response cache ([`cache`]), rate limits ([`limiter`]), tolerant JSON parsing
//! ([`parse`]), our prompts ([`prompts`]), and the runner that puts many requests in flight from
//! synchronous code ([`runner`]). The LLM backends of each capability (in the stage, query and
//! evaluation folders) are built on these.

pub mod cache;
pub mod client;
pub mod config;
pub mod limiter;
pub mod parse;
pub mod prompts;
pub mod runner;

pub use client::{CallContext, LlmClient, LlmError, Message};
pub use config::{LlmConfig, StructuredOutput};
pub use runner::Runner;
