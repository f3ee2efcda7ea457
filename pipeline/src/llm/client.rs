//! The client of an OpenAI-compatible chat endpoint: response cache first, then bounded
//! concurrency, rate limits, a per-request timeout, and retries with exponential backoff and
//! jitter on 429, 5xx, timeouts and connection errors (honouring `Retry-After`). Every HTTP
//! attempt and every cache hit is recorded for the `llm_calls` table.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::Semaphore;

use super::cache::{CachedAnswer, ResponseCache};
use super::config::{LlmConfig, StructuredOutput};
use super::limiter::RateLimiter;
use crate::core::ids::sha256_hex;
use crate::core::tokens::TokenCounter;
use crate::core::{Error, Result};
use crate::io::CallRecord;

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// Text.
    pub content: String,
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Message { role: "system".into(), content: content.into() }
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message { role: "user".into(), content: content.into() }
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Message { role: "assistant".into(), content: content.into() }
    }
}

/// What a call is for (recorded in `llm_calls`).
#[derive(Debug, Clone)]
pub struct CallContext {
    /// Stage making the call.
    pub stage: String,
    /// Document concerned.
    pub doc_id: Option<String>,
    /// `items`, `summary`, `relations`, `query_entities`, `repair`, …
    pub purpose: String,
}

/// Why a call failed for good.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LlmError {
    /// The server refused the request (a 4xx other than 429): retrying will not help.
    #[error("the endpoint answered HTTP {status}: {message}")]
    Refused {
        /// HTTP status.
        status: u16,
        /// Server message (truncated).
        message: String,
    },
    /// The answer was cut at the token limit (`finish_reason: "length"`): it is incomplete, so
    /// it is never used (at temperature 0 the cache remembers that this request was cut).
    #[error("the answer was cut off at max_tokens = {max_tokens} (finish_reason \"length\")")]
    Cut {
        /// The limit it hit.
        max_tokens: u32,
    },
    /// The server refused the request's `response_format` (an error naming it, whatever its
    /// status: llama-cpp-python's server answers an unsupported one with a 500): asked again
    /// with the next form down, never retried as it was.
    #[error("the endpoint refused response_format {form} (HTTP {status}): {message}")]
    FormatRefused {
        /// The form refused.
        form: &'static str,
        /// HTTP status.
        status: u16,
        /// Server message (truncated).
        message: String,
    },
    /// Every attempt failed with a retryable error.
    #[error("no answer after {attempts} attempts; last error: {last}")]
    Exhausted {
        /// Attempts made.
        attempts: u32,
        /// The last error.
        last: String,
    },
}

/// The client.
pub struct LlmClient {
    http: reqwest::Client,
    config: LlmConfig,
    api_key: Option<String>,
    semaphore: Semaphore,
    limiter: RateLimiter,
    cache: ResponseCache,
    counter: TokenCounter,
    calls: Mutex<Vec<CallRecord>>,
    /// The form of `response_format` this endpoint takes, as far as the process has learnt
    /// (shared by every client of the same endpoint, model and configured form).
    structured: Arc<Mutex<StructuredOutput>>,
}

/// What each endpoint (base URL, model, configured form) was found to take, for the life of
/// the process: the clients of the stages and queries of one run learn a refusal once.
fn learnt_form(config: &LlmConfig) -> Arc<Mutex<StructuredOutput>> {
    type Forms = HashMap<(String, String, StructuredOutput), Arc<Mutex<StructuredOutput>>>;
    static FORMS: LazyLock<Mutex<Forms>> = LazyLock::new(Mutex::default);
    let key = (config.base_url.clone(), config.model.clone(), config.structured_output);
    let mut forms = FORMS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    forms.entry(key).or_insert_with(|| Arc::new(Mutex::new(config.structured_output))).clone()
}

impl std::fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("LlmClient")
            .field("base_url", &self.config.base_url)
            .field("model", &self.config.model)
            .field("api_key_env", &self.config.api_key_env)
            .finish_non_exhaustive()
    }
}

/// What a 200 body holds: the text to cache, the (prompt, completion) usage if reported,
/// whether the answer was cut at `max_tokens` (`finish_reason: "length"`), and a reasoning
/// model's reasoning, kept apart from the answer (counted in the usage it spent when the server
/// reports none; never cached, never parsed).
struct Parsed {
    content: String,
    usage: Option<(u64, u64)>,
    cut: bool,
    reasoning: String,
}

/// Turns a 200 body into its [`Parsed`] content.
type ParseBody = fn(&str) -> Result<Parsed, String>;

/// Whether parsed content answers the request it was sent with (e.g. a score for every document
/// asked about): an answer it refuses is recorded as `refused`, never cached, never used.
type Accept<'a> = &'a (dyn Fn(&str) -> Result<(), String> + Sync);

/// Whether an error answer to `body` is the server refusing its `response_format`: the request
/// had one and the answer names it (or the JSON schema in it).
fn names_response_format(body: &serde_json::Value, answer: &str) -> bool {
    let answer = answer.to_ascii_lowercase();
    body.get("response_format").is_some()
        && ["response_format", "json_schema", "response format"].iter().any(|n| answer.contains(n))
}

/// Every well-formed answer answers its request.
fn any_answer(_: &str) -> Result<(), String> {
    Ok(())
}

/// How one attempt ended.
enum Attempt {
    Answer(Parsed),
    Retry { status: String, error: String, after: Option<Duration> },
    Fail(LlmError, String),
}

impl LlmClient {
    /// A client for `config`, caching in the index at `index_root`. The API key is read from
    /// the environment variable `config.api_key_env` (no key is sent when it is unset, which is
    /// what local servers expect).
    pub fn new(config: &LlmConfig, index_root: &std::path::Path) -> Result<LlmClient> {
        let api_key = (!config.api_key_env.is_empty()).then(|| std::env::var(&config.api_key_env).ok()).flatten();
        Self::with_api_key(config, index_root, api_key)
    }

    /// A client with an explicit API key (None or empty: no key is sent).
    pub fn with_api_key(
        config: &LlmConfig,
        index_root: &std::path::Path,
        api_key: Option<String>,
    ) -> Result<LlmClient> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(config.timeout_secs))
            .pool_max_idle_per_host(config.max_concurrency)
            .build()
            .map_err(|e| Error::Runtime { what: "the HTTP client", source: Box::new(e) })?;
        let api_key = api_key.filter(|k| !k.is_empty());
        Ok(LlmClient {
            http,
            config: config.clone(),
            api_key,
            semaphore: Semaphore::new(config.max_concurrency),
            limiter: RateLimiter::new(config.requests_per_minute, config.tokens_per_minute),
            cache: ResponseCache::new(index_root),
            counter: TokenCounter::cl100k(),
            calls: Mutex::new(Vec::new()),
            structured: learnt_form(config),
        })
    }

    /// The model name.
    pub fn model(&self) -> &str {
        &self.config.model
    }

    /// The endpoint's settings.
    pub fn config(&self) -> &LlmConfig {
        &self.config
    }

    /// The service, as errors name it: model and endpoint.
    pub fn service(&self) -> String {
        format!("{} at {}", self.config.model, self.config.base_url)
    }

    /// The cache key of a request: model, full prompt and sampling parameters (never the key).
    pub fn request_id(&self, messages: &[Message]) -> String {
        self.request_id_with(messages, self.config.max_tokens)
    }

    fn request_id_with(&self, messages: &[Message], max_tokens: u32) -> String {
        let mut identity = json!({
            "model": self.config.model,
            "messages": messages,
            "temperature": self.config.temperature,
            "max_tokens": max_tokens,
        });
        // Only when set, so that the keys of answers cached before it existed still hold.
        if !self.config.extra_body.is_empty() {
            identity["extra_body"] = self.config.extra_body.clone().into();
        }
        sha256_hex(identity.to_string().as_bytes())
    }

    /// Drops the cached answer of a request, so that the next identical request is sent again
    /// (used when an answer turned out to be unusable).
    pub fn forget(&self, messages: &[Message]) {
        self.forget_with_room(messages, self.config.max_tokens);
    }

    /// [`LlmClient::forget`] for the request with room for `max_tokens`.
    fn forget_with_room(&self, messages: &[Message], max_tokens: u32) {
        let _ = self.cache.remove(&self.request_id_with(messages, max_tokens));
    }

    /// Sends a chat request (or answers it from the cache) and returns the answer text.
    pub async fn chat(&self, context: &CallContext, messages: &[Message]) -> Result<String, LlmError> {
        self.chat_with_room(context, messages, self.config.max_tokens).await
    }

    /// [`LlmClient::chat`] with room for `max_tokens` in the answer (a retry of an answer that
    /// was cut off asks with more).
    pub async fn chat_with_room(
        &self,
        context: &CallContext,
        messages: &[Message],
        max_tokens: u32,
    ) -> Result<String, LlmError> {
        self.chat_as(context, messages, max_tokens, None).await
    }

    /// The whole answer to `messages` — JSON of `schema` (named `name`) when one is given, the
    /// request carrying it as `response_format` in the form the endpoint takes
    /// ([`LlmConfig::structured_output`], then the forms below it as the server refuses them;
    /// the cache key leaves the form out: an answer is the same whichever form asked). An answer
    /// cut at `max_tokens` is asked again once with twice the room (purpose
    /// `<purpose>_more_room`); cut again, the error is the cut — never a cut answer taken as
    /// whole — and the request's remembered cuts are forgotten, so that the unit's retry on the
    /// next run asks again.
    pub async fn chat_whole(
        &self,
        context: &CallContext,
        messages: &[Message],
        schema: Option<(&str, &serde_json::Value)>,
    ) -> Result<String, LlmError> {
        let room = self.config.max_tokens;
        match self.chat_as(context, messages, room, schema).await {
            Err(LlmError::Cut { .. }) => {
                let more_room = CallContext { purpose: format!("{}_more_room", context.purpose), ..context.clone() };
                let more = room.saturating_mul(2);
                let answer = self.chat_as(&more_room, messages, more, schema).await;
                if matches!(answer, Err(LlmError::Cut { .. })) {
                    self.forget_with_room(messages, room);
                    self.forget_with_room(messages, more);
                }
                answer
            }
            other => other,
        }
    }

    /// The form of `response_format` this client now sends.
    pub fn structured_output(&self) -> StructuredOutput {
        self.structured.lock().map(|s| *s).unwrap_or(StructuredOutput::None)
    }

    async fn chat_as(
        &self,
        context: &CallContext,
        messages: &[Message],
        max_tokens: u32,
        schema: Option<(&str, &serde_json::Value)>,
    ) -> Result<String, LlmError> {
        let key = self.request_id_with(messages, max_tokens);
        let prompt_estimate = messages.iter().map(|m| self.counter.count(&m.content) as u64 + 4).sum::<u64>();
        let reserve = prompt_estimate + u64::from(max_tokens.min(512));
        loop {
            let form = self.structured_output();
            let mut body = json!(self.config.extra_body);
            body["model"] = json!(self.config.model);
            body["messages"] = json!(messages);
            body["temperature"] = json!(self.config.temperature);
            body["max_tokens"] = json!(max_tokens);
            if let Some(format) = schema.and_then(|(name, schema)| form.response_format(name, schema)) {
                body["response_format"] = format;
            }
            let answer = self
                .send(
                    context,
                    &key,
                    "chat/completions",
                    &body,
                    (prompt_estimate, reserve),
                    parse_completion,
                    &any_answer,
                )
                .await;
            match (answer, form.next()) {
                (Err(LlmError::FormatRefused { .. }), Some(next)) => {
                    // Another request may have stepped down already: never step back up.
                    if let Ok(mut current) = self.structured.lock()
                        && *current == form
                    {
                        *current = next;
                    }
                }
                (answer, _) => return answer,
            }
        }
    }

    /// Embeds `inputs` with the `/embeddings` endpoint (or answers from the cache): one vector
    /// per input, in order.
    pub async fn embeddings(&self, context: &CallContext, inputs: &[&str]) -> Result<Vec<Vec<f32>>, LlmError> {
        let identity = json!({ "endpoint": "embeddings", "model": self.config.model, "input": inputs });
        let key = sha256_hex(identity.to_string().as_bytes());
        let prompt_estimate = inputs.iter().map(|t| self.counter.count(t) as u64).sum::<u64>();
        let body = json!({ "model": self.config.model, "input": inputs });
        let content = self
            .send(context, &key, "embeddings", &body, (prompt_estimate, prompt_estimate), parse_embeddings, &any_answer)
            .await?;
        let vectors: Vec<Vec<f32>> = serde_json::from_str(&content)
            .map_err(|e| LlmError::Exhausted { attempts: 0, last: format!("cached embeddings unreadable: {e}") })?;
        if vectors.len() != inputs.len() {
            return Err(LlmError::Refused {
                status: 200,
                message: format!("{} vectors for {} inputs", vectors.len(), inputs.len()),
            });
        }
        Ok(vectors)
    }

    /// Scores each of `documents` for its relevance to `query` with a re-ranking endpoint
    /// (`POST …/rerank`, the shape of Cohere's, Jina's, vLLM's, Infinity's and llama.cpp's
    /// servers; a bare list of `{index, score}`, the shape of Text Embeddings Inference's answers,
    /// is read too), or answers from the cache: one score per document, in order, higher = more
    /// relevant.
    pub async fn rerank(&self, context: &CallContext, query: &str, documents: &[&str]) -> Result<Vec<f32>, LlmError> {
        let identity =
            json!({ "endpoint": "rerank", "model": self.config.model, "query": query, "documents": documents });
        let key = sha256_hex(identity.to_string().as_bytes());
        let query_tokens = self.counter.count(query) as u64;
        let prompt_estimate = documents.iter().map(|d| query_tokens + self.counter.count(d) as u64).sum::<u64>();
        let body = json!({
            "model": self.config.model,
            "query": query,
            "documents": documents,
            "top_n": documents.len(),
            "return_documents": false,
        });
        let count = documents.len();
        let accept = move |content: &str| -> Result<(), String> {
            let scores: Vec<Option<f32>> =
                serde_json::from_str(content).map_err(|e| format!("cached scores unreadable: {e}"))?;
            if scores.len() == count && scores.iter().all(Option::is_some) {
                return Ok(());
            }
            let scored = scores.iter().take(count).flatten().count();
            let beyond = if scores.len() > count { " (and indexes beyond them)" } else { "" };
            Err(format!("the re-ranker scored {scored} of the {count} documents{beyond}"))
        };
        let reserve = (prompt_estimate, prompt_estimate);
        let content = self.send(context, &key, "rerank", &body, reserve, parse_rerank, &accept).await?;
        // `accept` read these scores: one per document.
        let scores: Vec<Option<f32>> = serde_json::from_str(&content).unwrap_or_default();
        Ok(scores.into_iter().flatten().collect())
    }

    /// The shared path of every request: cache, concurrency permit, rate limits, retries,
    /// call records. `parse` turns a 200 body into the text to cache and the usage; `accept`
    /// refuses content that does not answer this request (recorded `refused`, not cached, and a
    /// cached answer it refuses is dropped and asked again). `(prompt_estimate, reserve)`: the
    /// prompt tokens when the server reports none, and what the rate limiter reserves.
    #[allow(clippy::too_many_arguments)]
    async fn send(
        &self,
        context: &CallContext,
        key: &str,
        path: &str,
        body: &serde_json::Value,
        (prompt_estimate, reserve): (u64, u64),
        parse: ParseBody,
        accept: Accept<'_>,
    ) -> Result<String, LlmError> {
        let max_tokens = body["max_tokens"].as_u64().unwrap_or_default() as u32;
        if let Some(hit) = self.cache.get(key) {
            if hit.cut {
                // This request was cut at this room before (remembered at temperature 0 only):
                // the caller goes on to more room without paying for the same cut again.
                let (prompt, completion, estimated) = (hit.prompt_tokens, hit.completion_tokens, hit.tokens_estimated);
                self.record(context, key, body, prompt, completion, estimated, 0, true, "length");
                return Err(LlmError::Cut { max_tokens });
            }
            if accept(&hit.content).is_ok() {
                self.record(
                    context,
                    key,
                    body,
                    hit.prompt_tokens,
                    hit.completion_tokens,
                    hit.tokens_estimated,
                    0,
                    true,
                    "ok",
                );
                return Ok(hit.content);
            }
            let _ = self.cache.remove(key);
        }
        let _permit = self
            .semaphore
            .acquire()
            .await
            .map_err(|_| LlmError::Exhausted { attempts: 0, last: "client closed".into() })?;
        let mut last_error = String::new();
        for attempt in 0..=self.config.max_retries {
            let wait = self.limiter.reserve(reserve);
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            let started = Instant::now();
            let outcome = self.attempt(path, body, parse).await;
            let latency = started.elapsed().as_millis() as u64;
            match outcome {
                Attempt::Answer(Parsed { content, usage, cut, reasoning }) => {
                    let (prompt, completion, estimated) = match usage {
                        Some((p, c)) => (p, c, false),
                        None if path == "embeddings" || path == "rerank" => (prompt_estimate, 0, true),
                        None => {
                            let written = self.counter.count(&reasoning) + self.counter.count(&content);
                            (prompt_estimate, written as u64, true)
                        }
                    };
                    let entry = CachedAnswer {
                        content,
                        prompt_tokens: prompt,
                        completion_tokens: completion,
                        tokens_estimated: estimated,
                        latency_ms: latency,
                        cut,
                    };
                    if cut {
                        // Spent, recorded, and not an answer: the caller asks again with more room.
                        // At temperature 0 the same request gets the same cut answer, so that is
                        // remembered: a resumed run goes straight to more room (a caller whose
                        // unit fails after all forgets it, so that the unit's retry asks again).
                        // Above it, asking again may give a shorter answer.
                        self.record(context, key, body, prompt, completion, estimated, latency, false, "length");
                        if self.config.temperature == 0.0 {
                            let _ = self.cache.put(key, &entry);
                        }
                        return Err(LlmError::Cut { max_tokens });
                    }
                    let content = entry.content.clone();
                    if let Err(message) = accept(&content) {
                        self.record(context, key, body, prompt, completion, estimated, latency, false, "refused");
                        return Err(LlmError::Refused { status: 200, message });
                    }
                    self.record(context, key, body, prompt, completion, estimated, latency, false, "ok");
                    // A cache that cannot be written costs a repeated request later, not this answer.
                    let _ = self.cache.put(key, &entry);
                    return Ok(content);
                }
                Attempt::Fail(error, status) => {
                    self.record(context, key, body, 0, 0, false, latency, false, &status);
                    return Err(error);
                }
                Attempt::Retry { status, error, after } => {
                    self.record(context, key, body, 0, 0, false, latency, false, &status);
                    last_error = error;
                    if attempt < self.config.max_retries {
                        tokio::time::sleep(after.unwrap_or_else(|| self.backoff(attempt))).await;
                    }
                }
            }
        }
        Err(LlmError::Exhausted { attempts: self.config.max_retries + 1, last: last_error })
    }

    /// Exponential backoff with jitter: a random delay between half and all of
    /// `initial · 2^attempt`, capped.
    fn backoff(&self, attempt: u32) -> Duration {
        let base =
            self.config.backoff_initial_ms.saturating_mul(1u64 << attempt.min(20)).min(self.config.backoff_max_ms);
        Duration::from_millis(base / 2 + fastrand::u64(0..=base / 2))
    }

    async fn attempt(&self, path: &str, body: &serde_json::Value, parse: ParseBody) -> Attempt {
        let url = format!("{}/{path}", self.config.base_url.trim_end_matches('/'));
        let mut request = self.http.post(&url).json(body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => return self.transport_error(&e),
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| Duration::from_secs_f64(s.min(self.config.backoff_max_ms as f64 / 1000.0)));
        let text = match self.read_capped(response).await {
            Ok(t) => t,
            Err(attempt) => return attempt,
        };
        if !status.is_success() && status.as_u16() != 429 && names_response_format(body, &text) {
            let form = match body["response_format"]["type"].as_str() {
                Some("json_schema") => StructuredOutput::JsonSchema.name(),
                _ => StructuredOutput::JsonObject.name(),
            };
            return Attempt::Fail(
                LlmError::FormatRefused { form, status: status.as_u16(), message: self.redact(&text) },
                format!("format_refused_{form}"),
            );
        }
        if status.as_u16() == 429 || status.is_server_error() {
            return Attempt::Retry {
                status: format!("http_{}", status.as_u16()),
                error: format!("HTTP {}: {}", status.as_u16(), self.redact(&text)),
                after: retry_after,
            };
        }
        if !status.is_success() {
            let mut message = self.redact(&text);
            if status.as_u16() == 401 && self.api_key.is_none() {
                message.push_str(&format!(
                    " (no API key was sent: set the environment variable {})",
                    self.config.api_key_env
                ));
            }
            return Attempt::Fail(
                LlmError::Refused { status: status.as_u16(), message },
                format!("http_{}", status.as_u16()),
            );
        }
        match parse(&text) {
            Ok(parsed) => Attempt::Answer(parsed),
            Err(e) => Attempt::Retry { status: "bad_response".into(), error: e, after: None },
        }
    }

    /// The body of `response`, read up to `max_response_bytes`: a larger one (by its
    /// Content-Length, or as it streams in) is refused before it fills memory.
    async fn read_capped(&self, mut response: reqwest::Response) -> Result<String, Attempt> {
        let cap = self.config.max_response_bytes;
        let status = response.status().as_u16();
        let too_large = |what: String| {
            Attempt::Fail(
                LlmError::Refused {
                    status,
                    message: format!(
                        "the answer is {what}, over the {cap} bytes max_response_bytes allows; raise it if this \
                         server's answers are that large"
                    ),
                },
                "too_large".to_owned(),
            )
        };
        if let Some(length) = response.content_length().filter(|&l| l > cap) {
            return Err(too_large(format!("{length} bytes")));
        }
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if (body.len() + chunk.len()) as u64 > cap {
                        return Err(too_large("larger".to_owned()));
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => return Ok(String::from_utf8_lossy(&body).into_owned()),
                Err(e) => return Err(self.transport_error(&e)),
            }
        }
    }

    fn transport_error(&self, e: &reqwest::Error) -> Attempt {
        let status = if e.is_timeout() { "timeout" } else { "connection" };
        Attempt::Retry { status: status.into(), error: self.redact(&format!("{status}: {e}")), after: None }
    }

    /// Server text for error messages: shortened, and never containing the key.
    fn redact(&self, text: &str) -> String {
        let mut s: String = text.chars().take(300).collect();
        if let Some(key) = &self.api_key {
            s = s.replace(key.as_str(), "[redacted]");
        }
        s
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &self,
        context: &CallContext,
        request_id: &str,
        body: &serde_json::Value,
        prompt: u64,
        completion: u64,
        estimated: bool,
        latency_ms: u64,
        cached: bool,
        status: &str,
    ) {
        let record = CallRecord {
            stage: context.stage.clone(),
            doc_id: context.doc_id.clone(),
            purpose: context.purpose.clone(),
            model: self.config.model.clone(),
            request_id: request_id.to_owned(),
            prompt_tokens: prompt,
            completion_tokens: completion,
            tokens_estimated: estimated,
            latency_ms,
            cached,
            status: status.to_owned(),
            response_format: body
                .get("response_format")
                .and_then(|f| f.get("type"))
                .and_then(|t| t.as_str())
                .map(str::to_owned),
        };
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(record);
        }
    }

    /// Every recorded call not yet drained.
    pub fn calls(&self) -> Vec<CallRecord> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Takes the recorded calls of the documents for which `belongs` is true.
    pub fn drain_calls(&self, belongs: impl Fn(Option<&str>) -> bool) -> Vec<CallRecord> {
        let Ok(mut calls) = self.calls.lock() else { return Vec::new() };
        let (taken, kept): (Vec<_>, Vec<_>) = calls.drain(..).partition(|c| belongs(c.doc_id.as_deref()));
        *calls = kept;
        taken
    }
}

/// The vectors (as JSON text, in input order) and usage of an OpenAI-style embeddings body.
fn parse_embeddings(body: &str) -> Result<Parsed, String> {
    #[derive(Deserialize)]
    struct Embeddings {
        data: Vec<Datum>,
        usage: Option<Usage>,
    }
    #[derive(Deserialize)]
    struct Datum {
        index: Option<usize>,
        embedding: Vec<f32>,
    }
    #[derive(Deserialize)]
    struct Usage {
        prompt_tokens: Option<u64>,
    }
    let mut parsed: Embeddings = serde_json::from_str(body).map_err(|e| format!("unreadable embeddings body: {e}"))?;
    parsed.data.sort_by_key(|d| d.index.unwrap_or(usize::MAX));
    let vectors: Vec<Vec<f32>> = parsed.data.into_iter().map(|d| d.embedding).collect();
    let content = serde_json::to_string(&vectors).map_err(|e| e.to_string())?;
    let usage = parsed.usage.and_then(|u| u.prompt_tokens).map(|p| (p, 0));
    Ok(Parsed { content, usage, cut: false, reasoning: String::new() })
}

/// More documents than any re-ranking request carries (an index beyond it is the server's error).
const MAX_RERANK_DOCUMENTS: usize = 1 << 20;

/// The scores of a re-ranking body, as JSON text of one score (or null, when the server left a
/// document out) per document in input order, and the usage when reported. Reads
/// `{"results": [{"index", "relevance_score"}], "usage": {"total_tokens"}}` (Cohere, Jina, vLLM,
/// Infinity, llama.cpp) and a bare `[{"index", "score"}]` (Text Embeddings Inference's shape); an index
/// given twice, and a score that is not a finite number, make the body unusable.
fn parse_rerank(body: &str) -> Result<Parsed, String> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Body {
        Results { results: Vec<Scored>, usage: Option<Usage> },
        Bare(Vec<Scored>),
    }
    #[derive(Deserialize)]
    struct Scored {
        index: usize,
        #[serde(alias = "score")]
        relevance_score: f64,
    }
    #[derive(Deserialize)]
    struct Usage {
        prompt_tokens: Option<u64>,
        total_tokens: Option<u64>,
    }
    let (results, usage) = match serde_json::from_str(body).map_err(|e| format!("unreadable re-ranking body: {e}"))? {
        Body::Results { results, usage } => (results, usage.and_then(|u| u.prompt_tokens.or(u.total_tokens))),
        Body::Bare(results) => (results, None),
    };
    let count = results.iter().map(|r| r.index.saturating_add(1)).max().unwrap_or(0);
    if count > MAX_RERANK_DOCUMENTS {
        return Err(format!("the re-ranker scored document {}, beyond any request's", count - 1));
    }
    let mut scores: Vec<Option<f32>> = vec![None; count];
    for r in results {
        if !r.relevance_score.is_finite() {
            return Err(format!("the re-ranker gave document {} the score {}", r.index, r.relevance_score));
        }
        // Scores are kept as 32-bit floats: one beyond their range would become infinite.
        let score = r.relevance_score as f32;
        if !score.is_finite() {
            return Err(format!(
                "the re-ranker gave document {} the score {:e}, beyond the ±{:e} a score may be",
                r.index,
                r.relevance_score,
                f32::MAX
            ));
        }
        if scores[r.index].replace(score).is_some() {
            return Err(format!("the re-ranker scored document {} twice", r.index));
        }
    }
    let content = serde_json::to_string(&scores).map_err(|e| e.to_string())?;
    Ok(Parsed { content, usage: usage.map(|p| (p, 0)), cut: false, reasoning: String::new() })
}

/// The answer text and usage of an OpenAI-style chat completion body.
fn parse_completion(body: &str) -> Result<Parsed, String> {
    #[derive(Deserialize)]
    struct Completion {
        choices: Vec<Choice>,
        usage: Option<Usage>,
    }
    #[derive(Deserialize)]
    struct Choice {
        message: ChoiceMessage,
        finish_reason: Option<String>,
    }
    #[derive(Deserialize)]
    struct ChoiceMessage {
        content: Option<String>,
        /// A reasoning model's reasoning, where the server keeps it apart (vLLM's and llama.cpp's
        /// reasoning parsers, DeepSeek's API: `reasoning_content`; others, and newer vLLM
        /// beside it: `reasoning`).
        reasoning_content: Option<String>,
        reasoning: Option<String>,
    }
    #[derive(Deserialize)]
    struct Usage {
        prompt_tokens: Option<u64>,
        completion_tokens: Option<u64>,
    }
    let completion: Completion = serde_json::from_str(body).map_err(|e| format!("unreadable completion body: {e}"))?;
    let choice = completion.choices.into_iter().next().ok_or_else(|| "the completion has no choices".to_owned())?;
    let cut = choice.finish_reason.as_deref() == Some("length");
    let ChoiceMessage { content, reasoning_content, reasoning } = choice.message;
    let apart = reasoning_content.or(reasoning);
    let content = match (content, &apart) {
        (Some(content), _) => content,
        // All reasoning and no answer (a server that keeps them apart sends no content then).
        (None, Some(_)) => String::new(),
        (None, None) => return Err("the completion has no message content".to_owned()),
    };
    // Reasoning written into the answer itself (a server without a reasoning parser).
    let (inline, answer) = super::parse::split_reasoning(&content);
    let reasoning = [apart.as_deref().unwrap_or_default(), inline].concat();
    let usage = completion.usage.and_then(|u| Some((u.prompt_tokens?, u.completion_tokens?)));
    Ok(Parsed { content: answer.to_owned(), usage, cut, reasoning })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_parse_with_and_without_usage() {
        let body = r#"{"choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#;
        let parsed = parse_completion(body).unwrap();
        assert_eq!((parsed.content.as_str(), parsed.usage, parsed.cut), ("hi", Some((5, 1)), false));
        let body = r#"{"choices":[{"message":{"content":"hi"}}]}"#;
        let parsed = parse_completion(body).unwrap();
        assert_eq!((parsed.content.as_str(), parsed.usage, parsed.cut), ("hi", None, false));
        let cut = r#"{"choices":[{"message":{"content":"{\"items\": ["},"finish_reason":"length"}]}"#;
        assert!(parse_completion(cut).unwrap().cut);
        assert!(parse_completion(r#"{"choices":[]}"#).is_err());
        assert!(parse_completion("<html>").is_err());
    }

    #[test]
    fn reasoning_is_kept_out_of_the_answer_in_any_of_its_shapes() {
        let read = |message: &str| {
            let parsed =
                parse_completion(&format!(r#"{{"choices":[{{"message":{message},"finish_reason":"stop"}}]}}"#))
                    .unwrap();
            (parsed.content, parsed.reasoning)
        };
        let answer = |text: &str| (text.to_owned(), "sure {\"x\": 1}".to_owned());
        // Inline, with both tags or with the closing one only.
        assert_eq!(read(r#"{"content":"<think>sure {\"x\": 1}</think>\n{\"items\": []}"}"#), answer("{\"items\": []}"));
        assert_eq!(read(r#"{"content":"sure {\"x\": 1}</think>Answer: Oslo"}"#), answer("Answer: Oslo"));
        // Apart, under either name.
        assert_eq!(read(r#"{"content":"Answer: Oslo","reasoning_content":"sure {\"x\": 1}"}"#), answer("Answer: Oslo"));
        assert_eq!(read(r#"{"content":"Answer: Oslo","reasoning":"sure {\"x\": 1}"}"#), answer("Answer: Oslo"));
        let both = r#"{"content":"Answer: Oslo","reasoning":"sure {\"x\": 1}","reasoning_content":"sure {\"x\": 1}"}"#;
        assert_eq!(read(both), answer("Answer: Oslo"));
        // All reasoning: an empty answer, not a missing one.
        assert_eq!(read(r#"{"content":null,"reasoning_content":"sure {\"x\": 1}"}"#), answer(""));
        assert_eq!(read(r#"{"content":"<think>sure {\"x\": 1}"}"#), answer(""));
    }

    #[test]
    fn rerank_bodies_of_either_shape_give_scores_in_input_order() {
        let scores =
            |body: &str| -> Vec<Option<f32>> { serde_json::from_str(&parse_rerank(body).unwrap().content).unwrap() };
        let cohere = r#"{"id":"x","results":[{"index":1,"relevance_score":0.9},{"index":0,"relevance_score":0.1}],"usage":{"total_tokens":12}}"#;
        assert_eq!(scores(cohere), vec![Some(0.1), Some(0.9)]);
        assert_eq!(parse_rerank(cohere).unwrap().usage, Some((12, 0)));
        let tei = r#"[{"index":2,"score":-1.5},{"index":0,"score":3.0}]"#;
        assert_eq!(scores(tei), vec![Some(3.0), None, Some(-1.5)]);
        assert!(
            parse_rerank(r#"{"results":[{"index":0,"relevance_score":1},{"index":0,"relevance_score":2}]}"#)
                .err()
                .unwrap()
                .contains("twice")
        );
        assert!(parse_rerank(r#"{"results":[{"index":0}]}"#).is_err());
        assert!(parse_rerank(r#"[{"index":18446744073709551615,"score":1}]"#).err().unwrap().contains("beyond"));
        assert!(parse_rerank("<html>").err().unwrap().contains("unreadable re-ranking body"));
        // A score beyond a 32-bit float's range is named as such, not taken for a missing one.
        let huge = parse_rerank(r#"[{"index":0,"score":1e300}]"#).err().unwrap();
        assert!(huge.contains("the score 1e300, beyond"), "{huge}");
    }

    #[test]
    fn request_ids_depend_on_model_prompt_and_sampling_but_not_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let config = LlmConfig {
            base_url: "http://127.0.0.1:9".into(),
            model: "m".into(),
            api_key_env: "FLEXSTRUCT_TEST_NO_SUCH_KEY".into(),
            ..LlmConfig::default()
        };
        let a = LlmClient::new(&config, dir.path()).unwrap();
        let messages = [Message::user("x")];
        let id = a.request_id(&messages);
        let mut other = config.clone();
        other.temperature = 0.5;
        assert_ne!(id, LlmClient::new(&other, dir.path()).unwrap().request_id(&messages));
        let mut other = config.clone();
        other.api_key_env = "SOMETHING_ELSE".into();
        assert_eq!(id, LlmClient::new(&other, dir.path()).unwrap().request_id(&messages));
        assert_ne!(id, a.request_id(&[Message::user("y")]));
    }
}
