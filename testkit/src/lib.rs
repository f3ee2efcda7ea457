//! A local OpenAI-compatible chat server for tests, on 127.0.0.1 (never anything else). It
//! answers `POST …/chat/completions` from a script of replies and, when the script is empty,
//! from a responder function; it can inject faults (429 with `Retry-After`, 500, slow answers,
//! malformed bodies, truncated JSON, dropped connections) and records every request and the
//! largest number of requests it had in flight at once.
#![allow(clippy::unwrap_used)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the server answers one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A normal completion whose message content is this text (with `usage` when `usage`).
    Content { text: String, usage: bool },
    /// An HTTP error status, optionally with `Retry-After` seconds.
    Status { code: u16, retry_after: Option<f64> },
    /// An HTTP error status whose JSON body carries this message (as servers name what they
    /// refuse: llama-cpp-python's answers an unsupported `response_format` with a 500 naming it).
    Error { code: u16, message: String },
    /// Wait, then answer as the inner reply.
    Slow { delay: Duration, then: Box<Reply> },
    /// Close the connection without answering.
    Drop,
    /// A 200 whose body is not JSON.
    MalformedBody,
    /// A 200 with this exact body.
    Body(String),
    /// A completion cut at the token limit: this text, `finish_reason: "length"`.
    Cut(String),
}

impl Reply {
    /// A completion with usage.
    pub fn content(text: impl Into<String>) -> Reply {
        Reply::Content { text: text.into(), usage: true }
    }
}

/// A recorded request.
#[derive(Debug, Clone)]
pub struct Request {
    /// The request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The JSON body.
    pub body: Value,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
}

impl Request {
    /// Text of the last user message.
    pub fn last_user_message(&self) -> String {
        self.body["messages"]
            .as_array()
            .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_owned()
    }
}

type Responder = Box<dyn Fn(&Request) -> Reply + Send + Sync>;

struct State {
    script: Mutex<VecDeque<Reply>>,
    responder: Responder,
    requests: Mutex<Vec<Request>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// A running fake server; it stops when dropped.
#[allow(missing_debug_implementations)]
pub struct FakeLlm {
    addr: SocketAddr,
    state: Arc<State>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeLlm {
    /// Starts a server whose unscripted requests are answered by `responder`.
    pub fn start(responder: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> FakeLlm {
        let state = Arc::new(State {
            script: Mutex::new(VecDeque::new()),
            responder: Box::new(responder),
            requests: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        });
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (shutdown, mut stop) = tokio::sync::oneshot::channel::<()>();
        let server_state = state.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            runtime.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(listener.local_addr().unwrap()).unwrap();
                loop {
                    tokio::select! {
                        _ = &mut stop => break,
                        accepted = listener.accept() => {
                            if let Ok((stream, _)) = accepted {
                                tokio::spawn(serve(stream, server_state.clone()));
                            }
                        }
                    }
                }
            });
        });
        let addr = addr_rx.recv().unwrap();
        FakeLlm { addr, state, shutdown: Some(shutdown), thread: Some(thread) }
    }

    /// Base URL to configure (`http://127.0.0.1:PORT/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Queues replies for the next requests (before the responder is used).
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.state.script.lock().unwrap().extend(replies);
    }

    /// Requests received so far (those answered and those faulted).
    pub fn requests(&self) -> Vec<Request> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Number of requests received so far.
    pub fn request_count(&self) -> usize {
        self.state.requests.lock().unwrap().len()
    }

    /// The most requests that were in flight at the same time.
    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves requests on one connection until it closes (keep-alive).
async fn serve(mut stream: TcpStream, state: Arc<State>) {
    let mut buffer = Vec::new();
    loop {
        let Some((head, body)) = read_request(&mut stream, &mut buffer).await else { return };
        let authorization = head.lines().find_map(|l| {
            l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("authorization")).map(|(_, v)| v.trim().to_owned())
        });
        let path = head.lines().next().and_then(|l| l.split_whitespace().nth(1)).unwrap_or("").to_owned();
        let request = Request { path, body: serde_json::from_slice(&body).unwrap_or(Value::Null), authorization };
        state.requests.lock().unwrap().push(request.clone());
        let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        state.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let reply = state.script.lock().unwrap().pop_front().unwrap_or_else(|| (state.responder)(&request));
        let keep = answer(&mut stream, reply).await;
        state.in_flight.fetch_sub(1, Ordering::SeqCst);
        if !keep {
            return;
        }
    }
}

/// Reads one HTTP/1.1 request: (head, body). None when the connection closed.
async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<(String, Vec<u8>)> {
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
            let length = head
                .lines()
                .find_map(|l| {
                    l.split_once(':')
                        .filter(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
                })
                .unwrap_or(0);
            while buffer.len() < end + 4 + length {
                let n = stream.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buffer.extend_from_slice(&chunk[..n]);
            }
            let body = buffer[end + 4..end + 4 + length].to_vec();
            buffer.drain(..end + 4 + length);
            return Some((head, body));
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// Writes the reply; returns whether the connection stays open.
async fn answer(stream: &mut TcpStream, reply: Reply) -> bool {
    let mut reply = reply;
    while let Reply::Slow { delay, then } = reply {
        tokio::time::sleep(delay).await;
        reply = *then;
    }
    let (status, extra, body) = match reply {
        Reply::Drop => return false,
        Reply::MalformedBody => (200, String::new(), "{\"choices\": [ this is not json".to_owned()),
        Reply::Body(body) => (200, String::new(), body),
        Reply::Status { code, retry_after } => {
            let extra = retry_after.map(|s| format!("Retry-After: {s}\r\n")).unwrap_or_default();
            (code, extra, json!({"error": {"message": format!("injected status {code}")}}).to_string())
        }
        Reply::Error { code, message } => (code, String::new(), json!({"error": {"message": message}}).to_string()),
        Reply::Cut(text) => (200, String::new(), completion(&text, "length", true).to_string()),
        Reply::Content { text, usage } => (200, String::new(), completion(&text, "stop", usage).to_string()),
        Reply::Slow { .. } => unreachable!("unwrapped above"),
    };
    let reason = match status {
        200 => "OK",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        _ => "Error",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}Connection: keep-alive\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await.is_ok()
}

/// The body of a chat completion answering `text`, ending for `finish_reason`.
fn completion(text: &str, finish_reason: &str, usage: bool) -> Value {
    let mut body = json!({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}],
    });
    if usage {
        body["usage"] = json!({"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120});
    }
    body
}

/// A responder for item extraction: every sentence of the TARGET block becomes an item whose
/// span is the sentence and whose entities are its capitalised words.
pub fn items_from_target(request: &Request) -> Reply {
    let user = request.last_user_message();
    let target = user.rsplit("TARGET:\n<<<\n").next().unwrap_or("").trim_end_matches("\n>>>");
    let items: Vec<Value> = target
        .split_inclusive(['.', '!', '?'])
        .map(str::trim)
        .filter(|s| s.chars().any(char::is_alphanumeric))
        .map(|s| {
            let entities: Vec<&str> = s
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| w.chars().next().is_some_and(char::is_uppercase))
                .collect();
            json!({"statement": s, "span": s, "entities": entities})
        })
        .collect();
    Reply::content(json!({ "items": items }).to_string())
}

/// A responder for every prompt of the pipeline: items as [`items_from_target`], a summary
/// that names the entity and repeats its first fact, and one relation between the anchor and
/// the first other entity, citing fact 1.
pub fn pipeline_responder(request: &Request) -> Reply {
    let user = request.last_user_message();
    if let Some(rest) = user.strip_prefix("ENTITY: ") {
        let (entity, facts) = rest.split_once("\nFACTS:\n").unwrap_or((rest, ""));
        let first = facts.lines().next().unwrap_or("").trim_start_matches("- ");
        return Reply::content(json!({ "summary": format!("Summary of {entity}: {first}") }).to_string());
    }
    if let Some(rest) = user.strip_prefix("ANCHOR: ") {
        let anchor = rest.lines().next().unwrap_or("");
        let others = user.rsplit("OTHER ENTITIES: ").next().unwrap_or("");
        let other = others.split("; ").next().unwrap_or("");
        let relation = json!({"source": anchor, "target": other, "relation": format!("{anchor} is related to {other}"), "fact": 1});
        return Reply::content(json!({ "relations": [relation] }).to_string());
    }
    items_from_target(request)
}

/// A responder for `/embeddings`: each input gets a 4-d vector from its length and first byte
/// (not normalised, so clients must normalise), answered in reverse order with indexes.
pub fn embeddings_responder(request: &Request) -> Reply {
    let inputs: Vec<String> = request.body["input"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .rev()
        .map(|(i, t)| json!({"index": i, "embedding": [t.len() as f64, f64::from(t.bytes().next().unwrap_or(0)), 1.0, 0.0]}))
        .collect();
    Reply::Body(json!({"object": "list", "data": data, "usage": {"prompt_tokens": inputs.len() * 3, "total_tokens": inputs.len() * 3}}).to_string())
}

/// A responder for `/rerank` (Cohere's and Jina's shape): each document scores the number of
/// distinct words of four or more letters of the query it contains — a lexical stand-in for a
/// cross-encoder — answered best first, with each document's index, and with usage.
pub fn rerank_responder(request: &Request) -> Reply {
    let words = |text: &str| -> std::collections::HashSet<String> {
        text.split(|c: char| !c.is_alphanumeric()).filter(|w| w.chars().count() >= 4).map(str::to_lowercase).collect()
    };
    let query = words(request.body["query"].as_str().unwrap_or_default());
    let documents: Vec<&str> =
        request.body["documents"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let mut results: Vec<(usize, usize)> =
        documents.iter().enumerate().map(|(i, d)| (i, words(d).intersection(&query).count())).collect();
    results.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let results: Vec<Value> =
        results.into_iter().map(|(index, score)| json!({"index": index, "relevance_score": score as f64})).collect();
    let tokens = documents.len() * 10;
    Reply::Body(json!({"results": results, "usage": {"total_tokens": tokens}}).to_string())
}
