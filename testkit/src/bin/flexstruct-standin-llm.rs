//! `flexstruct-standin-llm`: a stand-in for an LLM endpoint, for whole-corpus runs of the LLM
//! path in tests and benchmarks. It is NOT a model: it answers our own prompts deterministically
//! from the text in the prompt (items by the rules extractor on the TARGET passage, summaries
//! from the first facts, relations between the anchor and the entities its facts name, query
//! entities and query graphs by the rules, answers from the first piece of evidence, fixed grades), written as JSON
//! the way a model would, with `usage` and `finish_reason`. It serves `/v1/chat/completions`,
//! `/v1/embeddings` (hashing vectors) and `/v1/rerank` on 127.0.0.1 only, on a free port it
//! writes to `--url-file`.
//!
//! `/v1/rerank` scores each document by the question's words it holds (a lexical stand-in for a
//! cross-encoder) or, with `--rerank-oracle QUESTIONS.jsonl`, for a question of that file, by the
//! share of a gold answer's content words it holds — an oracle that knows the answers, for
//! measuring what a perfect re-ranker of a strategy's candidates could give (never a model).
//!
//! With `--faults RATE`, the first attempt of a request is faulted with that probability, the
//! kind drawn uniformly (seeded by the request, so runs repeat): HTTP 429 with `Retry-After`, 500,
//! 503, a timeout, a dropped connection, an answer cut at the token limit, JSON in a code fence,
//! JSON inside prose, trailing commas, spans with changed case and spacing, an invented item whose
//! span is nowhere in the text, an empty answer. Retries of the same request are answered
//! cleanly, so a client that retries, asks again when an answer is cut or unreadable, and never
//! keeps what it cannot locate ends with what a fault-free run gives.
//!
//! With `--reasoning`, it answers as a reasoning model does: thinking before every chat answer
//! — thinking that holds JSON and an `Answer:` line of its own — sent inside the content
//! (`<think>…</think>`, or only the closing tag, as when the chat template writes the opening
//! one) or apart (`reasoning_content`), the shape drawn by request. A client that never reads
//! the thinking as the answer ends with what a plain run gives.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use flexstruct_pipeline::core::ids::sha256_hex;
use flexstruct_pipeline::core::text::nfc;
use flexstruct_pipeline::core::tokens::TokenCounter;
use flexstruct_pipeline::eval::metrics::ContextText;
use flexstruct_pipeline::models::{Embedder, HashingEmbedder};
use flexstruct_pipeline::query::entities::rules_query_entities;
use flexstruct_pipeline::query::paths::rules_query_graph;
use flexstruct_pipeline::query::read_question_records;
use flexstruct_pipeline::stages::extract::{Extractor, ItemRequest, RulesExtractor};
use flexstruct_testkit::{FakeLlm, Reply, Request};
use serde_json::{Value, json};

/// Serves a deterministic stand-in of an OpenAI-compatible LLM on 127.0.0.1 (not a model).
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Share of first attempts that get a fault (0 to 1).
    #[arg(long, default_value_t = 0.0)]
    faults: f64,
    /// Seed of the fault draw.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Seconds a `timeout` fault waits before answering (set the client's timeout below it).
    #[arg(long, default_value_t = 3.0)]
    slow_seconds: f64,
    /// Milliseconds every answer waits before it is sent (a slow server, for tests that stop a
    /// run midway).
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// Where to write the base URL (`http://127.0.0.1:PORT/v1`) once the server listens.
    #[arg(long, value_name = "FILE")]
    url_file: PathBuf,
    /// Where to keep the counts of requests and faults by kind (rewritten as they change).
    #[arg(long, value_name = "FILE")]
    stats_file: Option<PathBuf>,
    /// Think before every chat answer, as a reasoning model does (see the module's comment).
    #[arg(long)]
    reasoning: bool,
    /// Score `/rerank` documents by the gold answers (`answers`) of this questions file's
    /// questions: each document's answer-token recall (an oracle, for ceilings).
    #[arg(long, value_name = "QUESTIONS.jsonl")]
    rerank_oracle: Option<PathBuf>,
}

/// The faults, in draw order.
const FAULTS: [&str; 12] = [
    "http_429",
    "http_500",
    "http_503",
    "timeout",
    "dropped",
    "cut",
    "fenced",
    "prose",
    "trailing_commas",
    "span_case_spacing",
    "invented_span",
    "empty",
];

struct State {
    rate: f64,
    seed: u64,
    slow: Duration,
    attempts: Mutex<HashMap<String, u32>>,
    stats: Mutex<BTreeMap<String, u64>>,
    stats_file: Option<PathBuf>,
    counter: TokenCounter,
    /// Gold answers by question (NFC), for `--rerank-oracle`.
    golds: HashMap<String, Vec<String>>,
    /// `--reasoning`.
    reasoning: bool,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if !(0.0..=1.0).contains(&args.faults) {
        eprintln!("error: --faults must be between 0 and 1, not {}", args.faults);
        return std::process::ExitCode::from(2);
    }
    let golds = match args.rerank_oracle.as_deref().map(gold_answers).transpose() {
        Ok(golds) => golds.unwrap_or_default(),
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let state = Arc::new(State {
        rate: args.faults,
        seed: args.seed,
        slow: Duration::from_secs_f64(args.slow_seconds.max(0.0)),
        attempts: Mutex::new(HashMap::new()),
        stats: Mutex::new(BTreeMap::new()),
        stats_file: args.stats_file,
        counter: TokenCounter::cl100k(),
        golds,
        reasoning: args.reasoning,
    });
    let server = {
        let state = state.clone();
        let latency = Duration::from_millis(args.latency_ms);
        FakeLlm::start(move |request| match respond(&state, request) {
            reply if latency.is_zero() => reply,
            reply => Reply::Slow { delay: latency, then: Box::new(reply) },
        })
    };
    if let Err(e) = std::fs::write(&args.url_file, server.base_url()) {
        eprintln!("error: {}: {e}", args.url_file.display());
        return std::process::ExitCode::from(2);
    }
    eprintln!("standin-llm: serving {} (faults {})", server.base_url(), args.faults);
    // Serve until killed.
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn respond(state: &State, request: &Request) -> Reply {
    // A request is the same request whatever `response_format` asked for its answer (the client
    // sends it again with another form when one is refused).
    let mut body = request.body.clone();
    if let Some(body) = body.as_object_mut() {
        body.remove("response_format");
    }
    let key = sha256_hex(body.to_string().as_bytes());
    let attempt = {
        let mut attempts = state.attempts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = attempts.entry(key.clone()).or_insert(0);
        *n += 1;
        *n
    };
    // Faults are drawn by what the request asks about, not by how our instructions word it, so
    // that editing a prompt's instructions does not move the faults of a seeded run.
    if let Some(messages) = body.get_mut("messages").and_then(|m| m.as_array_mut()) {
        messages.retain(|m| m["role"] != "system");
    }
    let draw_key = sha256_hex(body.to_string().as_bytes());
    let fault = (attempt == 1).then(|| draw(state, &draw_key)).flatten();
    count(state, &format!("requests{}", request.path.replace('/', "_")));
    if request.path.ends_with("/embeddings") {
        // Any fault of an embeddings request is a 503 (content faults do not apply).
        if fault.is_some() {
            count(state, "fault_embeddings_503");
        }
        return embeddings(request, fault);
    }
    if request.path.ends_with("/rerank") {
        // Any fault of a re-ranking request is a 503, as for embeddings.
        if fault.is_some() {
            count(state, "fault_rerank_503");
            return Reply::Status { code: 503, retry_after: Some(0.05) };
        }
        return rerank(state, request);
    }
    if let Some(kind) = fault {
        count(state, &format!("fault_{kind}"));
    }
    let clean = answer(request);
    let reply = |text: String| completion(state, request, &text, "stop");
    match fault {
        None => reply(clean),
        Some("http_429") => Reply::Status { code: 429, retry_after: Some(0.05) },
        Some("http_500") => Reply::Status { code: 500, retry_after: None },
        Some("http_503") => Reply::Status { code: 503, retry_after: None },
        Some("dropped") => Reply::Drop,
        Some("timeout") => Reply::Slow { delay: state.slow, then: Box::new(reply(clean)) },
        Some("cut") => {
            completion(state, request, &clean.chars().take(clean.chars().count() / 2).collect::<String>(), "length")
        }
        Some("fenced") => reply(format!("```json\n{clean}\n```")),
        Some("prose") => reply(format!("Here is the JSON you asked for:\n{clean}\nI hope this helps.")),
        Some("trailing_commas") => reply(trailing_comma(&clean)),
        Some("span_case_spacing") => reply(reshape_spans(&clean, |s| s.to_lowercase().replace(' ', "  "))),
        Some("invented_span") => reply(invent_item(&clean)),
        Some(_) => reply(String::new()),
    }
}

/// The gold answers of every question of a questions file (`question`, `answers`), by the
/// question in NFC (as the query stage sends it).
fn gold_answers(path: &std::path::Path) -> Result<HashMap<String, Vec<String>>, String> {
    let records = read_question_records(path).map_err(|e| e.to_string())?;
    Ok(records
        .into_iter()
        .map(|(q, value)| {
            let answers =
                value["answers"].as_array().map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect());
            (nfc(q.question), answers.unwrap_or_default())
        })
        .collect())
}

/// The scores of a `/rerank` request, best first as servers answer: a question of
/// `--rerank-oracle`'s file scores each document's answer-token recall of its gold answers; any
/// other, the share of the question's content words the document holds.
fn rerank(state: &State, request: &Request) -> Reply {
    let query = request.body["query"].as_str().unwrap_or_default();
    let documents: Vec<&str> =
        request.body["documents"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let golds = state.golds.get(query);
    let mut results: Vec<(usize, f64)> = documents
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let text = ContextText::new(d);
            let score = match golds {
                Some(golds) => text.answer_token_recall(golds),
                None => text.token_recall(query),
            };
            (i, score.unwrap_or(0.0))
        })
        .collect();
    results.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let query_tokens = state.counter.count(query);
    let tokens: usize = documents.iter().map(|d| query_tokens + state.counter.count(d)).sum();
    let results: Vec<Value> =
        results.into_iter().map(|(index, score)| json!({"index": index, "relevance_score": score})).collect();
    Reply::Body(json!({"id": "standin", "results": results, "usage": {"total_tokens": tokens}}).to_string())
}

/// A chat completion of `text` ending for `finish_reason`, with the usage counted in cl100k
/// tokens of the messages and of the text.
fn completion(state: &State, request: &Request, text: &str, finish_reason: &str) -> Reply {
    let messages = request.body["messages"].as_array().map(Vec::as_slice).unwrap_or_default();
    let prompt: usize =
        messages.iter().map(|m| state.counter.count(m["content"].as_str().unwrap_or_default()) + 4).sum();
    let mut message = json!({"role": "assistant", "content": text});
    if state.reasoning {
        let thinking = "The request asks for {\"items\": []} or so; first guess below.\nAnswer: unknown\n";
        match sha256_hex(request.body.to_string().as_bytes()).as_bytes()[0] % 3 {
            0 => message["content"] = format!("<think>\n{thinking}</think>\n\n{text}").into(),
            1 => message["content"] = format!("{thinking}</think>\n{text}").into(),
            _ => message["reasoning_content"] = thinking.into(),
        }
    }
    // The thinking is written, and counted, wherever it is sent.
    let written = |field: &str| state.counter.count(message[field].as_str().unwrap_or_default());
    let completion = written("content") + written("reasoning_content");
    Reply::Body(
        json!({
            "id": "standin",
            "object": "chat.completion",
            "model": request.body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        })
        .to_string(),
    )
}

/// The fault of a first attempt, if this request draws one.
fn draw(state: &State, key: &str) -> Option<&'static str> {
    let hash = sha256_hex(format!("{}:{key}", state.seed).as_bytes());
    let x = u64::from_str_radix(&hash[..12], 16).ok()? as f64 / (1u64 << 48) as f64;
    if x >= state.rate {
        return None;
    }
    let pick = u64::from_str_radix(&hash[12..20], 16).ok()? as usize % FAULTS.len();
    Some(FAULTS[pick])
}

fn count(state: &State, what: &str) {
    let mut stats = state.stats.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    *stats.entry(what.to_owned()).or_insert(0) += 1;
    if let Some(path) = &state.stats_file {
        let _ = std::fs::write(path, serde_json::to_string_pretty(&*stats).unwrap_or_default());
    }
}

/// Hashing vectors of the inputs (64 dimensions); a fault makes the answer an error.
fn embeddings(request: &Request, fault: Option<&str>) -> Reply {
    if fault.is_some() {
        return Reply::Status { code: 503, retry_after: Some(0.05) };
    }
    let inputs: Vec<String> = request.body["input"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let texts: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let vectors = HashingEmbedder::new(64).embed(&texts).unwrap_or_default();
    let data: Vec<Value> =
        vectors.iter().enumerate().map(|(i, v)| json!({"index": i, "embedding": v, "object": "embedding"})).collect();
    let tokens: usize = texts.iter().map(|t| t.split_whitespace().count()).sum();
    Reply::Body(
        json!({"object": "list", "data": data, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}).to_string(),
    )
}

/// The first user message of the conversation: the prompt (a repair round repeats it).
fn prompt(request: &Request) -> String {
    request.body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// The clean answer to one of our prompts.
fn answer(request: &Request) -> String {
    let system = request.body["messages"][0]["content"].as_str().unwrap_or_default();
    if system.starts_with("Answer the question from your own knowledge") {
        return "Answer: unknown\nThe stand-in knows nothing without evidence.".to_owned();
    }
    let user = prompt(request);
    if let Some((_, target)) = user.rsplit_once("TARGET:\n<<<\n") {
        return items(target.trim_end_matches("\n>>>"));
    }
    if let Some(rest) = user.strip_prefix("ENTITY: ") {
        let facts = rest.split_once("\nFACTS:\n").map_or("", |(_, f)| f);
        let summary: Vec<&str> = facts.lines().map(|l| l.trim_start_matches("- ")).take(9).collect();
        return json!({ "summary": summary.join(" ") }).to_string();
    }
    if let Some(rest) = user.strip_prefix("ANCHOR: ") {
        return relations(rest);
    }
    if let Some(rest) = user.strip_prefix("QUESTION: ") {
        if let Some((_, evidence)) = rest.split_once("\n\nEVIDENCE:\n") {
            let first = evidence.lines().next().unwrap_or_default();
            let text = first.split_once("] ").map_or(first, |(_, t)| t);
            let sentence = text.split_inclusive(". ").next().unwrap_or(text).trim();
            return format!("Answer: {sentence}\nThis is what the first piece of evidence says [1].");
        }
        if let Some((_, answer)) = rest.split_once("\n\nANSWER: ") {
            let score = if answer.trim().is_empty() { 0 } else { 5 };
            let names = ["comprehensiveness", "knowledgeability", "correctness", "relevance", "diversity"];
            let mut grades: serde_json::Map<String, Value> =
                names.iter().map(|n| ((*n).to_owned(), json!(score))).collect();
            grades.insert("logical_coherence".into(), json!(score));
            grades.insert("factuality".into(), json!(score));
            return Value::Object(grades).to_string();
        }
        if let Some((question, entities)) = rest.split_once("\nENTITIES FOUND IN IT: ") {
            let entities: Vec<String> = entities.split("; ").filter(|e| !e.is_empty()).map(str::to_owned).collect();
            let graph = rules_query_graph(question, &entities);
            let nodes: Vec<Value> =
                graph.nodes.iter().map(|n| json!({"name": n.mention, "answer": n.answer})).collect();
            let edges: Vec<Value> =
                graph.edges.iter().map(|e| json!({"from": e.a, "to": e.b, "relation": e.relation})).collect();
            return json!({ "nodes": nodes, "edges": edges }).to_string();
        }
        return json!({ "entities": rules_query_entities(rest) }).to_string();
    }
    json!({ "error": "the stand-in does not know this prompt" }).to_string()
}

/// Items of a TARGET passage, by the rules extractor.
fn items(target: &str) -> String {
    let request = ItemRequest { doc_id: "standin", window: &[], target };
    let found = RulesExtractor.extract_all(&[request]).pop().and_then(Result::ok).unwrap_or_default();
    let items: Vec<Value> =
        found.iter().map(|i| json!({"statement": i.text, "span": i.ref_text, "entities": i.entities})).collect();
    json!({ "items": items }).to_string()
}

/// Relations between the anchor and each other entity named in the source of a fact.
fn relations(rest: &str) -> String {
    let anchor = rest.lines().next().unwrap_or_default();
    let others: Vec<&str> = rest
        .rsplit_once("OTHER ENTITIES: ")
        .map_or("", |(_, o)| o)
        .split("; ")
        .filter(|o| !o.is_empty() && *o != anchor)
        .collect();
    let mut relations = Vec::new();
    let mut number = 0;
    for line in rest.lines() {
        // `N. statement`, then `   source: "span"`.
        if let Some((n, _)) =
            line.split_once(". ").filter(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        {
            number = n.parse().unwrap_or(number);
            continue;
        }
        let Some(source) = line.trim_start().strip_prefix("source: \"").and_then(|s| s.strip_suffix('"')) else {
            continue;
        };
        for other in &others {
            if source.contains(other) {
                relations.push(json!({"source": anchor, "target": other, "relation": source, "fact": number}));
            }
        }
    }
    json!({ "relations": relations }).to_string()
}

/// The answer with a trailing comma before its last closing bracket (always structural: the
/// answer is one compact JSON object).
fn trailing_comma(clean: &str) -> String {
    match clean.trim_end().strip_suffix('}') {
        Some(body) => match body.strip_suffix(']') {
            Some(list) => format!("{list},]}}"),
            None => format!("{body},}}"),
        },
        None => clean.to_owned(),
    }
}

/// The answer with every item's span rewritten by `change`.
fn reshape_spans(clean: &str, change: impl Fn(&str) -> String) -> String {
    let Ok(mut value) = serde_json::from_str::<Value>(clean) else { return clean.to_owned() };
    if let Some(items) = value["items"].as_array_mut() {
        for item in items {
            if let Some(span) = item["span"].as_str() {
                item["span"] = json!(change(span));
            }
        }
    }
    value.to_string()
}

/// The answer with one more item, whose span is in no document.
fn invent_item(clean: &str) -> String {
    let Ok(mut value) = serde_json::from_str::<Value>(clean) else { return clean.to_owned() };
    if let Some(items) = value["items"].as_array_mut() {
        items.push(json!({
            "statement": "The stand-in made this statement up.",
            "span": "A sentence the stand-in made up, found in no document.",
            "entities": ["Stand-in"]
        }));
    }
    value.to_string()
}
