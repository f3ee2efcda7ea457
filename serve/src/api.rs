//! Questions: `POST /v1/query` (an answer, as a line of the answers file), `POST /v1/retrieve`
//! (the context only) and the OpenAI-compatible `POST /v1/chat/completions` and
//! `GET /v1/models`, whose model names an index and optionally a strategy (`sample:chunks`).

use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use flexstruct_pipeline::config::Mode;
use flexstruct_pipeline::core::tokens::TokenCounter;
use flexstruct_pipeline::query::context::Evidence;
use flexstruct_pipeline::query::kb::Span;
use flexstruct_pipeline::query::paths::StructureMatch;
use flexstruct_pipeline::query::strategy::EntityMatch;
use flexstruct_pipeline::query::{Answer, QueryConfig, Question, Reranking};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::auth::Access;
use crate::batch::{Output, Reply, Want};
use crate::error::{ApiError, ApiResult, JsonBody};
use crate::generation::Generation;
use crate::served::Served;
use crate::server::{AppState, Server, authorization};

/// The header that says which kb generation answered.
pub const GENERATION_HEADER: &str = "x-flexstruct-generation";

/// Longest question taken, in bytes.
const MAX_QUESTION_BYTES: usize = 16 << 10;

/// A question with the strategy and settings to answer it with.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueryRequest {
    /// The index (may be left out when the server serves one).
    #[serde(default)]
    pub index: Option<String>,
    /// The question.
    pub question: String,
    /// An id kept in the answer (`q` unless given).
    #[serde(default)]
    pub id: Option<String>,
    /// The retrieval strategy (`hybrid` unless the index's configuration says otherwise; see
    /// `flexstruct-query --help` for all nine).
    #[serde(default)]
    pub mode: Option<String>,
    /// Module switches of hybrid, hypergraph and graph (the paper's ablations).
    #[serde(default)]
    pub toggles: Option<Toggles>,
    /// The context budget in cl100k tokens (`query.max_context_tokens`; 0: no limit).
    #[serde(default)]
    pub budget: Option<usize>,
    /// Fill the budget: keep taking evidence in rank order until it is full.
    #[serde(default)]
    pub fill: Option<bool>,
    /// Any other key of the `[query]` section (`{"n_eh": 10, "tau_eh": 0.3}`).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub settings: Option<serde_json::Map<String, Value>>,
}

/// Module switches; a switch left out keeps the index's setting.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Toggles {
    /// Entity retrieval (EnR).
    pub entities: Option<bool>,
    /// Hyperedge retrieval (HR).
    pub hyperedges: Option<bool>,
    /// Edge retrieval (ER).
    pub edges: Option<bool>,
    /// Cluster retrieval (SSC).
    pub clusters: Option<bool>,
    /// Bridge retrieval (BR).
    pub bridges: Option<bool>,
    /// Lexical retrieval (LR, BM25).
    pub lexical: Option<bool>,
}

/// What `POST /v1/retrieve` gives: the context a generator would get, and where it comes from.
#[derive(Debug, Serialize, ToSchema)]
pub struct Retrieval {
    /// The index.
    pub index: String,
    /// The kb generation it was retrieved from.
    pub generation: u64,
    /// The question's id.
    pub id: String,
    /// The question.
    pub question: String,
    /// The strategy.
    #[schema(value_type = String)]
    pub mode: Mode,
    /// The strategy with its switched-off modules (`hybrid w/o ER`).
    pub variant: String,
    /// The context as the generator gets it: numbered evidence lines.
    pub context: String,
    /// cl100k tokens of the context.
    pub context_tokens: usize,
    /// The evidence, in context order: unit, id, document, span, text, score, tokens.
    #[schema(value_type = Vec<Object>)]
    pub evidence: Vec<Evidence>,
    /// Every source span the evidence rests on, in context order.
    #[schema(value_type = Vec<Object>)]
    pub citations: Vec<Span>,
    /// Evidence retrieved but left out by the budget.
    pub trimmed: usize,
    /// Milliseconds from question to context (its share of its batch's).
    pub retrieval_ms: f64,
    /// The part of them spent embedding the question.
    pub embed_ms: f64,
    /// The question's entities and how they matched.
    #[schema(value_type = Vec<Object>)]
    pub query_entities: Vec<EntityMatch>,
    /// What retrieval had to say (a threshold no unit passed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// What re-ranking did (`reranked`, `too_few`, `failed`), when a re-ranker was asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub rerank: Option<Reranking>,
    /// Structure matching (`paths`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub structure: Option<StructureMatch>,
}

/// `query.<key>` settings of a request over the index's configuration.
fn query_config(served: &Served, request: &QueryRequest) -> ApiResult<QueryConfig> {
    let mut config = served.config().query.clone();
    if let Some(settings) = &request.settings {
        if settings.contains_key("vector_precision") {
            return Err(ApiError::field(
                "settings.vector_precision",
                "is chosen when the kb is loaded, not per question (set it in the server's configuration)",
            ));
        }
        let mut value = serde_json::to_value(&config).map_err(|e| ApiError::internal(e.to_string()))?;
        if let Value::Object(map) = &mut value {
            map.extend(settings.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        config = serde_path_to_error::deserialize(value).map_err(|e| {
            let message = e.inner().to_string();
            let path = e.path().to_string();
            let key = match message.strip_prefix("unknown field `").and_then(|m| m.split('`').next()) {
                Some(key) if path == "." => key.to_owned(),
                _ => path,
            };
            ApiError::field(format!("settings.{key}"), message)
        })?;
    }
    if let Some(mode) = &request.mode {
        config.mode = mode.parse().map_err(|e: flexstruct_pipeline::core::Error| match e {
            flexstruct_pipeline::core::Error::Config { problem, .. } => ApiError::field("mode", problem),
            other => ApiError::field("mode", other.to_string()),
        })?;
    }
    if let Some(t) = &request.toggles {
        let switches = [
            (t.entities, &mut config.entities),
            (t.hyperedges, &mut config.hyperedges),
            (t.edges, &mut config.edges),
            (t.clusters, &mut config.clusters),
            (t.bridges, &mut config.bridges),
            (t.lexical, &mut config.lexical),
        ];
        for (given, setting) in switches {
            if let Some(on) = given {
                *setting = on;
            }
        }
    }
    if let Some(budget) = request.budget {
        config.max_context_tokens = budget;
    }
    if let Some(fill) = request.fill {
        config.fill = fill;
    }
    config.validate().map_err(|e| ApiError::from_pipeline(&e))?;
    Ok(config)
}

/// The question of a request, checked.
fn question(id: Option<&str>, text: &str, field: &str) -> ApiResult<Question> {
    if text.trim().is_empty() {
        return Err(ApiError::field(field, "the question is empty"));
    }
    if text.len() > MAX_QUESTION_BYTES {
        return Err(ApiError::field(field, format!("the question is longer than {MAX_QUESTION_BYTES} bytes")));
    }
    Ok(Question { id: id.unwrap_or("q").to_owned(), question: text.to_owned() })
}

/// Asks `served` one question and waits for its batch.
pub async fn ask(served: &Served, question: Question, config: QueryConfig, want: Want) -> ApiResult<Reply> {
    let reply = served.batcher().ask(question, config, want);
    reply
        .await
        .map_err(|_| ApiError::unavailable("the index is shutting down", 5))?
        .map_err(|e| ApiError::from_pipeline(&e))
}

/// The index, settings and question of a request, checked (the token may read the index).
fn asked<'a>(
    server: &'a Server,
    headers: &HeaderMap,
    request: &QueryRequest,
) -> ApiResult<(&'a Arc<Served>, QueryConfig, Question)> {
    let served = server.index(headers, request.index.as_deref(), Access::Read)?;
    let config = query_config(served, request)?;
    Ok((served, config, question(request.id.as_deref(), &request.question, "question")?))
}

fn with_generation(mut response: Response, generation: &Generation) -> Response {
    response.headers_mut().insert(GENERATION_HEADER, HeaderValue::from(generation.number));
    response
}

/// Answers a question: the answer, its short form, the evidence and the citations with their
/// spans (one line of an answers file). The `x-flexstruct-generation` header names the kb.
#[utoipa::path(post, path = "/v1/query", request_body = QueryRequest,
    responses((status = 200, description = "The answer: a line of the answers file", body = Object),
              (status = 400, description = "A field of the request is wrong; the error names it"),
              (status = 404, description = "No such index")))]
pub async fn query(
    State(server): AppState,
    headers: HeaderMap,
    JsonBody(request): JsonBody<QueryRequest>,
) -> ApiResult<Response> {
    let (served, config, question) = asked(&server, &headers, &request)?;
    let reply = ask(served, question, config, Want::Answer).await?;
    let Output::Answer(answer) = reply.output else { return Err(ApiError::internal("a context came for an answer")) };
    Ok(with_generation(Json(answer).into_response(), &reply.generation))
}

/// Retrieves a question's context without answering it.
#[utoipa::path(post, path = "/v1/retrieve", request_body = QueryRequest,
    responses((status = 200, body = Retrieval),
              (status = 400, description = "A field of the request is wrong; the error names it"),
              (status = 404, description = "No such index")))]
pub async fn retrieve(
    State(server): AppState,
    headers: HeaderMap,
    JsonBody(request): JsonBody<QueryRequest>,
) -> ApiResult<Response> {
    let (served, config, question) = asked(&server, &headers, &request)?;
    let reply = ask(served, question.clone(), config.clone(), Want::Context).await?;
    let Output::Context(found) = reply.output else { return Err(ApiError::internal("an answer came for a context")) };
    let generation = &reply.generation;
    let mut citations: Vec<Span> = Vec::new();
    for span in found.context.evidence.iter().flat_map(|e| &e.spans) {
        if !citations.contains(span) {
            citations.push(span.clone());
        }
    }
    let retrieval = Retrieval {
        index: served.name.clone(),
        generation: generation.number,
        id: question.id,
        question: question.question,
        mode: config.mode,
        variant: found.label(&config),
        rerank: found.rerank,
        context: found.context.render(),
        context_tokens: found.context.tokens,
        evidence: found.context.evidence,
        citations,
        trimmed: found.context.trimmed,
        retrieval_ms: found.retrieval_ms,
        embed_ms: found.embed_ms,
        query_entities: found.entities,
        notes: found.context.notes,
        structure: found.context.structure,
    };
    Ok(with_generation(Json(retrieval).into_response(), generation))
}

/// An OpenAI chat request. Fields of OpenAI's API that do not apply (temperature, max_tokens,
/// …) are accepted and ignored.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ChatRequest {
    /// An index, or `index:strategy` (`sample:chunks`).
    pub model: String,
    /// The conversation; the last user message is the question.
    pub messages: Vec<ChatMessage>,
    /// Answer as server-sent events.
    #[serde(default)]
    pub stream: bool,
    /// Choices wanted (only 1).
    #[serde(default)]
    pub n: Option<u32>,
}

/// A message of a conversation.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, ….
    pub role: String,
    /// Text, or a list of content parts (`{"type": "text", "text": …}`).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub content: Value,
}

/// A source an answer cites.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatCitation {
    /// Its number in the answer (`[2]`).
    pub number: usize,
    /// The document.
    pub doc_id: String,
    /// The document's title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// First code point of the cited span.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<i64>,
    /// One past its last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<i64>,
    /// The evidence's text.
    pub text: String,
}

/// The strategy a chat model name asks for.
fn chat_model(server: &Server, headers: &HeaderMap, model: &str) -> ApiResult<(Arc<Served>, QueryConfig)> {
    let (name, mode) = match model.split_once(':') {
        Some((name, mode)) => (name, Some(mode)),
        None => (model, None),
    };
    let served = server.indexes.get(name).ok_or_else(|| {
        ApiError::not_found(
            "model",
            format!("the model `{model}` does not exist: models are the served indexes, see /v1/models"),
        )
    })?;
    server.tokens.check(authorization(headers), Some(name), Access::Read)?;
    let mut config = served.config().query.clone();
    if let Some(mode) = mode {
        config.mode = mode.parse().map_err(|_| {
            let modes: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
            ApiError::not_found(
                "model",
                format!("`{mode}` of model `{model}` is not a strategy (one of {})", modes.join(", ")),
            )
        })?;
    }
    Ok((served.clone(), config))
}

/// The text of a message's content.
fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        _ => None,
    }
}

/// The evidence an answer cites, with their documents' titles.
fn citations(answer: &Answer, generation: &Generation) -> Vec<ChatCitation> {
    answer
        .cited
        .iter()
        .filter_map(|&n| answer.evidence.get(n.wrapping_sub(1)).map(|e| (n, e)))
        .map(|(number, e)| ChatCitation {
            number,
            doc_id: e.doc_id.clone(),
            title: generation.title(&e.doc_id).map(str::to_owned),
            start: e.start,
            end: e.end,
            text: e.text.clone(),
        })
        .collect()
}

/// The answer as a chat message: its text, then its sources, numbered as cited.
fn message_text(answer: &Answer, citations: &[ChatCitation]) -> String {
    let mut text = if answer.answer.is_empty() {
        "I found nothing in the index to answer this from.".to_owned()
    } else {
        answer.answer.clone()
    };
    if !citations.is_empty() {
        text.push_str("\n\nSources:");
        for c in citations {
            let name = c.title.as_deref().unwrap_or(&c.doc_id);
            let span = match (c.start, c.end) {
                (Some(s), Some(e)) => format!(", characters {s}–{e}"),
                _ => String::new(),
            };
            text.push_str(&format!("\n[{}] {name} ({}{span})", c.number, c.doc_id));
        }
    }
    text
}

/// Answers the last user message of a conversation from the index the model names, with the
/// configured `[llm]` or, offline, the extractive reader; the sources it cites are listed in the
/// message and given as `citations`. With `stream`, as server-sent events.
#[utoipa::path(post, path = "/v1/chat/completions", request_body = ChatRequest,
    responses((status = 200, description = "An OpenAI chat completion (or its chunks as server-sent events), with `citations`", body = Object),
              (status = 400, description = "A field of the request is wrong; the error names it"),
              (status = 404, description = "The model names no served index")))]
pub async fn chat(
    State(server): AppState,
    headers: HeaderMap,
    JsonBody(request): JsonBody<ChatRequest>,
) -> ApiResult<Response> {
    let (served, config) = chat_model(&server, &headers, &request.model)?;
    if request.n.is_some_and(|n| n != 1) {
        return Err(ApiError::field("n", "only one choice is given (n = 1)"));
    }
    let (at, last) = request
        .messages
        .iter()
        .enumerate()
        .rev()
        .find(|(_, m)| m.role == "user")
        .ok_or_else(|| ApiError::field("messages", "no message of role `user`: its text is the question"))?;
    let text = content_text(&last.content)
        .ok_or_else(|| ApiError::field(format!("messages[{at}].content"), "the question must be text"))?;
    let question = question(None, &text, &format!("messages[{at}].content"))?;
    let id = format!("chatcmpl-{:016x}", fastrand::u64(..));
    let created = chrono::Utc::now().timestamp();
    let model = request.model.clone();
    if request.stream {
        return Ok(stream_chat(served, question, config, id, created, model).into_response());
    }
    let reply = ask(&served, question.clone(), config, Want::Answer).await?;
    let Output::Answer(answer) = reply.output else { return Err(ApiError::internal("a context came for an answer")) };
    let cited = citations(&answer, &reply.generation);
    let content = message_text(&answer, &cited);
    let counter = TokenCounter::cl100k();
    let prompt = answer.context_tokens + counter.count(&question.question);
    let completion = counter.count(&content);
    let body = serde_json::json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": content },
            "finish_reason": "stop",
        }],
        "usage": { "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion },
        "citations": cited,
        "system_fingerprint": format!("{}-kb{}", served.name, reply.generation.number),
    });
    Ok(with_generation(Json(body).into_response(), &reply.generation))
}

/// The chunks of a streamed chat completion: the assistant's role at once, then the answer a few
/// words at a time once it is ready, then a last chunk with the finish reason and the citations.
/// (The answer is generated whole, then streamed; an error becomes an error event.)
fn stream_chat(
    served: Arc<Served>,
    question: Question,
    config: QueryConfig,
    id: String,
    created: i64,
    model: String,
) -> Sse<impl futures::Stream<Item = Result<Event, Infallible>>> {
    let (sender, receiver) = tokio::sync::mpsc::channel::<Event>(64);
    let chunk = move |delta: Value, finish: Option<&str>, extra: Option<(&str, Value)>| {
        let mut body = serde_json::json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
        });
        if let Some((key, value)) = extra {
            body[key] = value;
        }
        Event::default().data(body.to_string())
    };
    tokio::spawn(async move {
        let _ = sender.send(chunk(serde_json::json!({"role": "assistant", "content": ""}), None, None)).await;
        match ask(&served, question, config, Want::Answer).await {
            Ok(Reply { generation, output: Output::Answer(answer) }) => {
                let cited = citations(&answer, &generation);
                let text = message_text(&answer, &cited);
                for piece in pieces(&text) {
                    if sender.send(chunk(serde_json::json!({ "content": piece }), None, None)).await.is_err() {
                        return;
                    }
                }
                let citations = serde_json::to_value(&cited).unwrap_or_default();
                let _ = sender.send(chunk(serde_json::json!({}), Some("stop"), Some(("citations", citations)))).await;
            }
            Ok(_) => {}
            Err(error) => {
                let body = serde_json::json!({ "error": { "message": error.message, "field": error.field } });
                let _ = sender.send(Event::default().data(body.to_string())).await;
            }
        }
        let _ = sender.send(Event::default().data("[DONE]")).await;
    });
    let stream = futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|event| (Ok(event), receiver))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// `text` in pieces of a few words, each with the spaces that follow it; joined, the text.
fn pieces(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut words = 0;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            continue;
        }
        let after_space = i > 0 && text[..i].ends_with(char::is_whitespace);
        if after_space {
            words += 1;
            if words == 4 {
                out.push(&text[start..i]);
                start = i;
                words = 0;
            }
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// An entry of `GET /v1/models`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Model {
    /// `index` or `index:strategy`.
    pub id: String,
    /// Always `model`.
    pub object: &'static str,
    /// When the server started (Unix seconds).
    pub created: i64,
    /// Always `flexstruct`.
    pub owned_by: &'static str,
}

/// The models: each served index (the token may read), alone and with each strategy.
#[utoipa::path(get, path = "/v1/models", responses((status = 200, description = "OpenAI's model list", body = Object)))]
pub async fn models(State(server): AppState, headers: HeaderMap) -> ApiResult<Json<Value>> {
    server.any(&headers)?;
    let created = chrono::Utc::now().timestamp() - server.started.elapsed().as_secs() as i64;
    let mut data = Vec::new();
    for name in server.indexes.keys().filter(|n| server.tokens.allows(authorization(&headers), n)) {
        let ids = std::iter::once(name.clone()).chain(Mode::ALL.iter().map(|m| format!("{name}:{}", m.name())));
        data.extend(ids.map(|id| Model { id, object: "model", created, owned_by: "flexstruct" }));
    }
    Ok(Json(serde_json::json!({ "object": "list", "data": data })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_join_to_the_text() {
        for text in ["", "one", "one two three four five six seven eight nine", "  lead\n\nSources:\n[1] a (b)  "] {
            let parts = pieces(text);
            assert_eq!(parts.concat(), text);
            assert!(parts.iter().all(|p| !p.is_empty()));
        }
        assert_eq!(pieces("a b c d e f").len(), 2);
    }

    #[test]
    fn message_content_may_be_text_or_parts() {
        assert_eq!(content_text(&serde_json::json!("hi")).as_deref(), Some("hi"));
        let parts =
            serde_json::json!([{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]);
        assert_eq!(content_text(&parts).as_deref(), Some("a\nb"));
        assert_eq!(content_text(&serde_json::json!(null)), None);
    }
}
