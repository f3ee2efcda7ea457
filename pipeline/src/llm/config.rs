//! The `[llm]` section: an OpenAI-compatible chat endpoint and how the client treats it.

use serde::{Deserialize, Serialize};

use crate::core::{Error, Result};

/// An OpenAI-compatible chat endpoint (OpenAI, DashScope, vLLM, Ollama, llama.cpp server, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LlmConfig {
    /// Base URL up to and including `/v1`, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Model name sent with every request.
    pub model: String,
    /// Name of the environment variable that holds the API key (the key itself is never in
    /// the configuration, the cache, the tables, the logs or error messages). Empty: no key.
    pub api_key_env: String,
    /// Sampling temperature.
    pub temperature: f32,
    /// Most completion tokens per request.
    pub max_tokens: u32,
    /// Seconds before a request is abandoned (and retried).
    pub timeout_secs: u64,
    /// Most requests in flight at once.
    pub max_concurrency: usize,
    /// Retries after a 429, a 5xx, a timeout or a connection error.
    pub max_retries: u32,
    /// First backoff delay in milliseconds (doubled per retry, with jitter, unless the server
    /// sends `Retry-After`).
    pub backoff_initial_ms: u64,
    /// Longest backoff delay in milliseconds.
    pub backoff_max_ms: u64,
    /// Requests per minute (0: unlimited).
    pub requests_per_minute: u32,
    /// Prompt + completion tokens per minute (0: unlimited).
    pub tokens_per_minute: u32,
    /// Largest answer body read, in bytes: a larger one is refused (recorded `too_large`, not
    /// retried) before it fills memory.
    pub max_response_bytes: u64,
    /// Prices in currency units per million prompt / completion tokens, for the cost counters
    /// (0: not shown).
    pub price_prompt_per_mtok: f64,
    /// See `price_prompt_per_mtok`.
    pub price_completion_per_mtok: f64,
}

/// The default largest answer body: 64 MiB, far above any chat answer, a batch of embeddings
/// (256 texts of 4,096 dimensions are about 20 MB of JSON) or a re-ranking.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 64 << 20;

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            base_url: String::new(),
            model: String::new(),
            api_key_env: "OPENAI_API_KEY".into(),
            temperature: 0.0,
            max_tokens: 2048,
            timeout_secs: 120,
            max_concurrency: 8,
            max_retries: 6,
            backoff_initial_ms: 500,
            backoff_max_ms: 60_000,
            requests_per_minute: 0,
            tokens_per_minute: 0,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            price_prompt_per_mtok: 0.0,
            price_completion_per_mtok: 0.0,
        }
    }
}

impl LlmConfig {
    /// Checks the values of the `[llm]` section.
    pub fn validate(&self) -> Result<()> {
        self.validate_as("llm")
    }

    /// Checks the values of a section with these keys (`llm`, `judge`, `rerank`), naming it.
    pub fn validate_as(&self, section: &'static str) -> Result<()> {
        if self.base_url.trim().is_empty() || self.model.trim().is_empty() {
            return Err(Error::config(
                section,
                format!("{section}.base_url and {section}.model must both be set when [{section}] is given"),
            ));
        }
        if !(self.base_url.starts_with("http://") || self.base_url.starts_with("https://")) {
            return Err(Error::config(
                format!("{section}.base_url"),
                format!("`{}` must start with http:// or https://", self.base_url),
            ));
        }
        if self.max_concurrency == 0 || self.timeout_secs == 0 {
            return Err(Error::config(
                section,
                format!("{section}.max_concurrency and {section}.timeout_secs must be at least 1"),
            ));
        }
        if self.max_response_bytes < 1024 {
            return Err(Error::config(
                format!("{section}.max_response_bytes"),
                format!("{} bytes is too small for any answer: give at least 1024", self.max_response_bytes),
            ));
        }
        Ok(())
    }
}
