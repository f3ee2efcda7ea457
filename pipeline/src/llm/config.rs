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
    /// How a prompt that expects JSON asks the server to constrain its answer to the answer's
    /// JSON Schema (`response_format`). A server that refuses a form is asked once more with
    /// the next one down (`json_schema` → `json_object` → `none`), and the client keeps to the
    /// form that worked for the rest of the run.
    pub structured_output: StructuredOutput,
    /// Prices in currency units per million prompt / completion tokens, for the cost counters
    /// (0: not shown).
    pub price_prompt_per_mtok: f64,
    /// See `price_prompt_per_mtok`.
    pub price_completion_per_mtok: f64,
    /// Further fields sent in every chat request's body, for what a server takes beyond the
    /// OpenAI protocol: e.g. `chat_template_kwargs = { enable_thinking = false }` (a Qwen3
    /// behind vLLM or llama.cpp, thinking off), `repeat_penalty = 1.1` (llama.cpp), `top_k`.
    /// Part of every request's cache key and of the backend's identity (they change answers).
    /// The fields the client writes itself (`model`, `messages`, `temperature`, `max_tokens`,
    /// `response_format`, `stream`, `n`) cannot be set here.
    #[schemars(with = "std::collections::BTreeMap<String, serde_json::Value>")]
    pub extra_body: serde_json::Map<String, serde_json::Value>,
}

/// The fields of a chat request the client writes itself: not for `extra_body`.
const OWN_FIELDS: [&str; 7] = ["model", "messages", "temperature", "max_tokens", "response_format", "stream", "n"];

/// How a prompt that expects JSON asks for it (`response_format` of the chat request).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StructuredOutput {
    /// `{"type": "json_schema", "json_schema": {"name", "schema"}}`: structured outputs
    /// (OpenAI, vLLM, llama.cpp's `llama-server`, Ollama's compatible endpoint), decoding
    /// constrained to the answer's schema.
    #[default]
    JsonSchema,
    /// `{"type": "json_object", "schema": …}`: JSON mode, with the schema for servers that
    /// constrain to it (llama-cpp-python's server does; OpenAI's JSON mode ignores it).
    JsonObject,
    /// No `response_format`: the answer is read by the tolerant parser, with one repair round.
    None,
}

impl StructuredOutput {
    /// The form to fall back to when a server refuses this one.
    pub fn next(self) -> Option<StructuredOutput> {
        match self {
            StructuredOutput::JsonSchema => Some(StructuredOutput::JsonObject),
            StructuredOutput::JsonObject => Some(StructuredOutput::None),
            StructuredOutput::None => None,
        }
    }

    /// Its name in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            StructuredOutput::JsonSchema => "json_schema",
            StructuredOutput::JsonObject => "json_object",
            StructuredOutput::None => "none",
        }
    }

    /// The `response_format` of a request for JSON of `schema` (named `name`), if any.
    pub fn response_format(self, name: &str, schema: &serde_json::Value) -> Option<serde_json::Value> {
        match self {
            StructuredOutput::JsonSchema => Some(serde_json::json!({
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema},
            })),
            StructuredOutput::JsonObject => Some(serde_json::json!({"type": "json_object", "schema": schema})),
            StructuredOutput::None => None,
        }
    }
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
            structured_output: StructuredOutput::JsonSchema,
            price_prompt_per_mtok: 0.0,
            price_completion_per_mtok: 0.0,
            extra_body: serde_json::Map::new(),
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
        if let Some(own) = self.extra_body.keys().find(|k| OWN_FIELDS.contains(&k.as_str())) {
            return Err(Error::config(
                format!("{section}.extra_body.{own}"),
                format!("`{own}` is written by the client itself; set it elsewhere (or not at all)"),
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
