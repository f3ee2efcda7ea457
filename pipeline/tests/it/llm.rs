//! The LLM client against the local fake server: retries, Retry-After, timeouts, dropped
//! connections, concurrency, caching, key hygiene, token accounting, repair rounds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flexstruct_pipeline::io::FailureKind;
use flexstruct_pipeline::llm::prompts::{ItemsAnswer, ask_json, items_messages};
use flexstruct_pipeline::llm::{CallContext, LlmClient, LlmError, Message};
use flexstruct_pipeline::llm::{LlmConfig, StructuredOutput};
use flexstruct_testkit::{FakeLlm, Reply};

fn config(server: &FakeLlm) -> LlmConfig {
    LlmConfig {
        base_url: server.base_url(),
        model: "fake-model".into(),
        api_key_env: String::new(),
        timeout_secs: 1,
        max_concurrency: 4,
        max_retries: 5,
        backoff_initial_ms: 10,
        backoff_max_ms: 2_000,
        ..LlmConfig::default()
    }
}

fn context() -> CallContext {
    CallContext { stage: "test".into(), doc_id: Some("d1".into()), purpose: "items".into() }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn retryable_faults_are_retried_until_an_answer_comes() {
    let server = FakeLlm::start(|_| Reply::content("fine"));
    server.script([
        Reply::Status { code: 429, retry_after: Some(0.3) },
        Reply::Status { code: 500, retry_after: None },
        Reply::Drop,
        Reply::MalformedBody,
    ]);
    let dir = tempfile::tempdir().unwrap();
    let client = LlmClient::new(&config(&server), dir.path()).unwrap();
    let started = Instant::now();
    let answer = runtime().block_on(client.chat(&context(), &[Message::user("hello")])).unwrap();
    assert_eq!(answer, "fine");
    assert_eq!(server.request_count(), 5);
    // Retry-After: 0.3 s was honoured.
    assert!(started.elapsed() >= Duration::from_millis(300));
    let statuses: Vec<String> = client.calls().into_iter().map(|c| c.status).collect();
    assert_eq!(statuses, ["http_429", "http_500", "connection", "bad_response", "ok"]);
}

#[test]
fn a_slow_answer_times_out_and_is_retried() {
    let server = FakeLlm::start(|_| Reply::content("fast"));
    server.script([Reply::Slow { delay: Duration::from_millis(1_600), then: Box::new(Reply::content("late")) }]);
    let dir = tempfile::tempdir().unwrap();
    let client = LlmClient::new(&config(&server), dir.path()).unwrap();
    let answer = runtime().block_on(client.chat(&context(), &[Message::user("hello")])).unwrap();
    assert_eq!(answer, "fast");
    let statuses: Vec<String> = client.calls().into_iter().map(|c| c.status).collect();
    assert_eq!(statuses, ["timeout", "ok"]);
}

#[test]
fn retries_run_out_and_refusals_are_not_retried() {
    let server = FakeLlm::start(|_| Reply::Status { code: 503, retry_after: None });
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&server);
    cfg.max_retries = 2;
    let client = LlmClient::new(&cfg, dir.path()).unwrap();
    let err = runtime().block_on(client.chat(&context(), &[Message::user("x")])).unwrap_err();
    assert!(matches!(err, LlmError::Exhausted { attempts: 3, .. }), "{err}");
    assert_eq!(server.request_count(), 3);

    let server = FakeLlm::start(|_| Reply::Status { code: 400, retry_after: None });
    let client = LlmClient::new(&config(&server), dir.path()).unwrap();
    let err = runtime().block_on(client.chat(&context(), &[Message::user("x")])).unwrap_err();
    assert!(matches!(err, LlmError::Refused { status: 400, .. }), "{err}");
    assert_eq!(server.request_count(), 1);
}

#[test]
fn answers_are_cached_across_clients_and_usage_is_accounted() {
    let server = FakeLlm::start(|_| Reply::Content { text: "an answer of a few words".into(), usage: false });
    let dir = tempfile::tempdir().unwrap();
    let messages = [Message::system("instructions"), Message::user("question")];
    let first = LlmClient::new(&config(&server), dir.path()).unwrap();
    runtime().block_on(first.chat(&context(), &messages)).unwrap();
    let call = &first.calls()[0];
    assert!(call.tokens_estimated && !call.cached && call.prompt_tokens > 0 && call.completion_tokens == 6);

    // A new client on the same index (a rerun) asks nothing and reports the original cost.
    let second = LlmClient::new(&config(&server), dir.path()).unwrap();
    assert_eq!(runtime().block_on(second.chat(&context(), &messages)).unwrap(), "an answer of a few words");
    assert_eq!(server.request_count(), 1);
    let hit = &second.calls()[0];
    assert!(hit.cached && hit.prompt_tokens == call.prompt_tokens && hit.request_id == call.request_id);
}

#[test]
fn concurrency_never_exceeds_the_limit() {
    let server =
        FakeLlm::start(|_| Reply::Slow { delay: Duration::from_millis(60), then: Box::new(Reply::content("ok")) });
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&server);
    cfg.max_concurrency = 3;
    let client = Arc::new(LlmClient::new(&cfg, dir.path()).unwrap());
    runtime().block_on(async {
        let calls = (0..20).map(|i| {
            let client = client.clone();
            async move { client.chat(&context(), &[Message::user(format!("q{i}"))]).await }
        });
        for r in futures::future::join_all(calls).await {
            r.unwrap();
        }
    });
    assert_eq!(server.request_count(), 20);
    // Never more than the limit; on a busy machine the requests may not all overlap, so reaching
    // the limit exactly is not asserted (it made this test flaky), only that they ran concurrently.
    let peak = server.max_in_flight();
    assert!((2..=3).contains(&peak), "{peak} requests were in flight at once");
}

#[test]
fn the_api_key_is_sent_but_never_stored_or_shown() {
    let secret = "sk-test-0123456789abcdef";
    let server = FakeLlm::start(move |r| {
        if r.last_user_message() == "leak" {
            Reply::Status { code: 401, retry_after: None }
        } else {
            Reply::content("ok")
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let client = LlmClient::with_api_key(&config(&server), dir.path(), Some(secret.into())).unwrap();
    let rt = runtime();
    rt.block_on(client.chat(&context(), &[Message::user("hello")])).unwrap();
    assert_eq!(server.requests()[0].authorization.as_deref(), Some(format!("Bearer {secret}").as_str()));
    let err = rt.block_on(client.chat(&context(), &[Message::user("leak")])).unwrap_err();
    assert!(!err.to_string().contains(secret));
    assert!(!format!("{client:?}").contains(secret));
    // Nothing under the index holds the key.
    for entry in walk(dir.path()) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains(secret), "{}", entry.display());
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() { out.extend(walk(&p)) } else { out.push(p) }
    }
    out
}

#[test]
fn unreadable_answers_get_one_repair_round() {
    let good = r#"{"items": [{"statement": "A met B.", "span": "A met B.", "entities": ["A", "B"]}]}"#;
    let server = FakeLlm::start(|_| Reply::content("I cannot answer in JSON, sorry."));
    server
        .script([Reply::content("Here are the items: none, really."), Reply::content(format!("```json\n{good}\n```"))]);
    let dir = tempfile::tempdir().unwrap();
    let client = LlmClient::new(&config(&server), dir.path()).unwrap();
    let rt = runtime();
    let answer: ItemsAnswer = rt.block_on(ask_json(&client, &context(), items_messages(&[], "A met B."))).unwrap();
    assert_eq!(answer.items.len(), 1);
    let repair = &server.requests()[1];
    assert!(repair.last_user_message().contains("could not be read as the requested JSON"));
    assert_eq!(repair.body["messages"].as_array().unwrap().len(), 4);

    // Twice unreadable: a failure of kind `unparseable`.
    let err = rt.block_on(ask_json::<ItemsAnswer>(&client, &context(), items_messages(&[], "other"))).unwrap_err();
    assert_eq!(err.kind, FailureKind::Unparseable);

    // An answer that stops mid-JSON is not read as a shorter one: the repair round asks again,
    // and the whole answer is what counts.
    let whole = r#"{"items": [{"statement": "C.", "span": "C.", "entities": []}, {"statement": "D.", "span": "D.", "entities": []}]}"#;
    server.script([
        Reply::content(r#"{"items": [{"statement": "C.", "span": "C.", "entities": []}, {"statement": "D"#),
        Reply::content(whole),
    ]);
    let before = server.request_count();
    let answer: ItemsAnswer = rt.block_on(ask_json(&client, &context(), items_messages(&[], "third"))).unwrap();
    assert_eq!((answer.items.len(), server.request_count() - before), (2, 2));
    assert!(server.requests().last().unwrap().last_user_message().contains("cut off"));
}

#[test]
fn a_reasoning_models_thinking_is_never_read_as_its_answer() {
    // The thinking holds JSON of the right shape and an `Answer:` line of its own: neither may
    // be taken for the answer, whether the server sends it inline or apart.
    let thinking = r#"Maybe {"items": [{"statement": "Wrong.", "span": "Wrong.", "entities": []}]}? Answer: no"#;
    let good = r#"{"items": [{"statement": "A met B.", "span": "A met B.", "entities": ["A", "B"]}]}"#;
    let inline = format!("<think>{thinking}</think>\n{good}");
    let server = FakeLlm::start(move |_| Reply::Content { text: inline.clone(), usage: false });
    let dir = tempfile::tempdir().unwrap();
    let client = LlmClient::new(&config(&server), dir.path()).unwrap();
    let rt = runtime();
    let answer: ItemsAnswer = rt.block_on(ask_json(&client, &context(), items_messages(&[], "A met B."))).unwrap();
    assert_eq!(answer.items[0].statement, "A met B.");
    // The thinking was written and counted; the cache keeps the answer alone.
    let call = &client.calls()[0];
    assert!(call.tokens_estimated && call.completion_tokens > 30, "{call:?}");
    let again = LlmClient::new(&config(&server), dir.path()).unwrap();
    let cached = rt.block_on(again.chat(&context(), &items_messages(&[], "A met B."))).unwrap();
    assert_eq!((cached.as_str(), server.request_count()), (good, 1));

    // Apart (`reasoning_content`), and an answer that is all thinking: the repair round asks
    // again rather than read the thinking.
    let body = move |content: serde_json::Value| {
        serde_json::json!({"choices": [{"message": {"content": content, "reasoning_content": thinking},
            "finish_reason": "stop"}]})
        .to_string()
    };
    let server = FakeLlm::start(move |_| Reply::Body(body(good.into())));
    server.script([Reply::Body(body(serde_json::Value::Null))]);
    let client = LlmClient::new(&config(&server), tempfile::tempdir().unwrap().path()).unwrap();
    let answer: ItemsAnswer = rt.block_on(ask_json(&client, &context(), items_messages(&[], "A met B."))).unwrap();
    assert_eq!((answer.items[0].statement.as_str(), server.request_count()), ("A met B.", 2));
    assert!(server.requests()[1].last_user_message().contains("could not be read as the requested JSON"));
}

#[test]
fn extra_body_fields_are_sent_and_key_the_cache() {
    let server = FakeLlm::start(|_| Reply::content("fine"));
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&server);
    let extra = serde_json::json!({"repeat_penalty": 1.1, "chat_template_kwargs": {"enable_thinking": false}});
    cfg.extra_body = extra.as_object().unwrap().clone();
    cfg.validate().unwrap();
    let rt = runtime();
    let messages = [Message::user("hello")];
    rt.block_on(LlmClient::new(&cfg, dir.path()).unwrap().chat(&context(), &messages)).unwrap();
    let sent = &server.requests()[0].body;
    assert_eq!(
        (&sent["repeat_penalty"], &sent["chat_template_kwargs"]),
        (&extra["repeat_penalty"], &extra["chat_template_kwargs"])
    );
    assert_eq!((sent["model"].as_str(), sent["messages"][0]["content"].as_str()), (Some("fake-model"), Some("hello")));
    // The same fields answer from the cache; other fields (or none) ask again.
    rt.block_on(LlmClient::new(&cfg, dir.path()).unwrap().chat(&context(), &messages)).unwrap();
    assert_eq!(server.request_count(), 1);
    cfg.extra_body.insert("repeat_penalty".into(), 1.3.into());
    rt.block_on(LlmClient::new(&cfg, dir.path()).unwrap().chat(&context(), &messages)).unwrap();
    rt.block_on(LlmClient::new(&config(&server), dir.path()).unwrap().chat(&context(), &messages)).unwrap();
    assert_eq!(server.request_count(), 3);
    // A field the client writes itself is refused, by name.
    cfg.extra_body.insert("max_tokens".into(), 5.into());
    let err = cfg.validate().unwrap_err().to_string();
    assert!(err.contains("llm.extra_body.max_tokens"), "{err}");
}

#[test]
fn a_cut_answer_is_asked_again_with_twice_the_room_and_never_taken_whole() {
    use flexstruct_pipeline::llm::Runner;
    use flexstruct_pipeline::query::context::Context;
    use flexstruct_pipeline::query::{AnswerOptions, Answerer, LlmAnswerer};
    let server = FakeLlm::start(|_| Reply::content("Answer: Oslo\nIt is in Norway."));
    server.script([Reply::Cut("Answer: Oslo\nIt is in Nor".into())]);
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&server);
    cfg.max_tokens = 50;
    let answerer = LlmAnswerer::new(Arc::new(Runner::connect(&cfg, dir.path()).unwrap()));
    let context = Context::default();
    let ask = |q: &str| answerer.answer_all(&[q], &[&context], AnswerOptions::default()).remove(0);
    let answered = ask("Where?");
    assert_eq!((answered.generator, answered.generated.answer.as_str()), ("llm", "Answer: Oslo\nIt is in Norway."));
    let rooms: Vec<u64> = server.requests().iter().map(|r| r.body["max_tokens"].as_u64().unwrap()).collect();
    assert_eq!(rooms, [50, 100]);
    let purposes: Vec<String> =
        answerer.take_calls().into_iter().map(|c| format!("{} {}", c.purpose, c.status)).collect();
    assert_eq!(purposes, ["answer length", "answer_more_room ok"]);
    // Cut twice: the question fails, saying why.
    server.script([Reply::Cut("Answer: Ber".into()), Reply::Cut("Answer: Bergen, and".into())]);
    let failed = ask("Which?");
    assert_eq!((failed.generator, failed.generated.answer.as_str()), ("failed", ""));
    assert!(failed.error.unwrap().contains("max_tokens = 100"));
    // Its rerun asks again (the cuts of a failed question are not remembered).
    let before = server.request_count();
    assert_eq!(ask("Which?").generator, "llm");
    assert_eq!(server.request_count(), before + 1);
}

#[test]
fn each_answer_of_a_batch_is_timed_from_its_own_request_and_kept_in_question_order() {
    use flexstruct_pipeline::llm::Runner;
    use flexstruct_pipeline::query::context::Context;
    use flexstruct_pipeline::query::{AnswerOptions, Answerer, LlmAnswerer};
    let names = ["alpha", "beta", "gamma", "delta"];
    let server = FakeLlm::start(move |r| {
        let asked = r.last_user_message();
        let name = names.iter().find(|n| asked.contains(&format!("about {n}?"))).copied().unwrap_or("none");
        Reply::Slow { delay: Duration::from_millis(80), then: Box::new(Reply::content(format!("Answer: {name}"))) }
    });
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&server);
    cfg.max_concurrency = 1;
    let answerer = LlmAnswerer::new(Arc::new(Runner::connect(&cfg, dir.path()).unwrap()));
    let questions: Vec<String> = names.iter().map(|n| format!("What about {n}?")).collect();
    let questions: Vec<&str> = questions.iter().map(String::as_str).collect();
    let context = Context::default();
    let started = Instant::now();
    let answered = answerer.answer_all(&questions, &[&context; 4], AnswerOptions::default());
    let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
    let answers: Vec<&str> = answered.iter().map(|a| a.generated.answer.as_str()).collect();
    assert_eq!(answers, names.map(|n| format!("Answer: {n}")));
    // One request at a time: the questions' own times cannot add up to more than the batch's,
    // as they would if each question's clock ran while it waited behind the ones before it.
    let own_ms: f64 = answered.iter().map(|a| a.ms).sum();
    assert!(own_ms <= wall_ms, "the questions' times add up to {own_ms:.0} ms in a batch of {wall_ms:.0} ms");
    assert!(answered.iter().all(|a| a.ms >= 80.0), "{:?}", answered.iter().map(|a| a.ms).collect::<Vec<_>>());
    assert_eq!(server.max_in_flight(), 1);
}

#[test]
fn a_cut_is_remembered_at_temperature_0_and_asked_again_above_it() {
    let server = FakeLlm::start(|_| Reply::Cut("{\"items\": [".into()));
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let messages = [Message::user("long")];
    let cut = |cfg: &LlmConfig| rt.block_on(LlmClient::new(cfg, dir.path()).unwrap().chat(&context(), &messages));
    assert!(matches!(cut(&config(&server)), Err(LlmError::Cut { max_tokens: 2048 })));
    // A rerun (a new client on the same index) knows the cut without asking, and logs it as a
    // cached `length` call with the original cost.
    let rerun = LlmClient::new(&config(&server), dir.path()).unwrap();
    assert!(matches!(rt.block_on(rerun.chat(&context(), &messages)), Err(LlmError::Cut { max_tokens: 2048 })));
    assert_eq!(server.request_count(), 1);
    let call = &rerun.calls()[0];
    assert!(call.cached && call.status == "length" && call.completion_tokens > 0, "{call:?}");
    // More room is another request.
    let more = rt.block_on(rerun.chat_with_room(&context(), &messages, 4096));
    assert!(matches!(more, Err(LlmError::Cut { max_tokens: 4096 })));
    assert_eq!(server.request_count(), 2);
    // Above temperature 0 a cut answer may come out shorter when asked again: it is.
    let mut warm = config(&server);
    warm.temperature = 0.7;
    assert!(cut(&warm).is_err() && cut(&warm).is_err());
    assert_eq!(server.request_count(), 4);
}

/// A server that takes `response_format` forms as llama-cpp-python's does (`json_object` with a
/// schema, and a 500 naming `response_format` for `json_schema`), or, with `none_only`, refuses
/// every form with a 400 naming it.
fn formats_server(none_only: bool) -> FakeLlm {
    let good = r#"{"items": [{"statement": "A met B.", "span": "A met B.", "entities": ["A", "B"]}]}"#;
    FakeLlm::start(move |request| match request.body["response_format"]["type"].as_str() {
        Some(form) if none_only => Reply::Error { code: 400, message: format!("unsupported response_format {form}") },
        Some("json_schema") => Reply::Error {
            code: 500,
            message: "1 validation error for CreateChatCompletionRequest: response_format: input should be \
                      'text' or 'json_object'"
                .into(),
        },
        Some(_) | None => Reply::content(good),
    })
}

#[test]
fn a_refused_response_format_steps_down_once_and_the_client_keeps_to_what_worked() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let server = formats_server(false);
    let client = LlmClient::new(&config(&server), dir.path()).unwrap();
    assert_eq!(client.structured_output(), StructuredOutput::JsonSchema);
    let first: ItemsAnswer = rt.block_on(ask_json(&client, &context(), items_messages(&[], "A met B."))).unwrap();
    assert_eq!(first.items.len(), 1);
    // The 500 naming response_format is a refusal, asked again at once with the next form: two
    // requests, not a retry with backoff.
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body["response_format"]["type"], "json_schema");
    let schema = &requests[0].body["response_format"]["json_schema"];
    assert_eq!(schema["name"], "items_answer");
    assert_eq!(schema["schema"]["required"], serde_json::json!(["items"]));
    assert_eq!(requests[1].body["response_format"]["type"], "json_object");
    assert_eq!(requests[1].body["response_format"]["schema"], schema["schema"]);
    assert_eq!(client.structured_output(), StructuredOutput::JsonObject);
    // The next request goes straight to the form that worked.
    let _: ItemsAnswer = rt.block_on(ask_json(&client, &context(), items_messages(&[], "C met D."))).unwrap();
    assert_eq!(server.requests()[2].body["response_format"]["type"], "json_object");
    let statuses: Vec<String> = client.calls().into_iter().map(|c| c.status).collect();
    assert_eq!(statuses, ["format_refused_json_schema", "ok", "ok"]);

    // A server that takes no form: down to none, then asked without one.
    let server = formats_server(true);
    let client = LlmClient::new(&config(&server), tempfile::tempdir().unwrap().path()).unwrap();
    let answer: ItemsAnswer = rt.block_on(ask_json(&client, &context(), items_messages(&[], "A met B."))).unwrap();
    assert_eq!(answer.items.len(), 1);
    let statuses: Vec<String> = client.calls().into_iter().map(|c| c.status).collect();
    assert_eq!(statuses, ["format_refused_json_schema", "format_refused_json_object", "ok"]);
    assert!(server.requests()[2].body.get("response_format").is_none());
    assert_eq!(client.structured_output(), StructuredOutput::None);

    // Configured `none`: no response_format is ever sent; plain chat never sends one.
    let server = formats_server(true);
    let none = LlmConfig { structured_output: StructuredOutput::None, ..config(&server) };
    let client = LlmClient::new(&none, tempfile::tempdir().unwrap().path()).unwrap();
    let _: ItemsAnswer = rt.block_on(ask_json(&client, &context(), items_messages(&[], "A met B."))).unwrap();
    rt.block_on(client.chat(&context(), &[Message::user("hello")])).unwrap();
    assert!(server.requests().iter().all(|r| r.body.get("response_format").is_none()));
    assert_eq!(server.request_count(), 2);
}

#[test]
fn remote_embeddings_are_ordered_normalised_cached_and_recorded() {
    use flexstruct_pipeline::models::EmbedConfig;
    use flexstruct_pipeline::models::{Embedder, RemoteEmbedder};
    let server = FakeLlm::start(flexstruct_testkit::embeddings_responder);
    server.script([Reply::Status { code: 429, retry_after: Some(0.0) }]);
    let dir = tempfile::tempdir().unwrap();
    let config = EmbedConfig {
        model: "text-embedding-fake".into(),
        base_url: server.base_url(),
        api_key_env: String::new(),
        batch_size: 2,
        ..EmbedConfig::default()
    };
    let embedder = RemoteEmbedder::connect(&config, dir.path()).unwrap();
    assert_eq!((embedder.dim(), embedder.model()), (4, "text-embedding-fake"));
    let vectors = embedder.embed(&["a", "bb", "ccc"]).unwrap();
    let norm = |v: &Vec<f32>| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!(vectors.iter().all(|v| (norm(v) - 1.0).abs() < 1e-6));
    // Order follows the inputs although the server answered in reverse.
    assert!(vectors[0][0] < vectors[1][0] && vectors[1][0] < vectors[2][0]);
    assert!(server.requests().iter().all(|r| r.path == "/v1/embeddings"));
    let calls = embedder.take_calls();
    assert!(calls.iter().any(|c| c.status == "http_429") && calls.iter().all(|c| c.purpose == "embeddings"));

    // A new client on the same index asks nothing for what was embedded.
    let before = server.request_count();
    let again = RemoteEmbedder::connect(&config, dir.path()).unwrap();
    assert_eq!(again.embed(&["a", "bb", "ccc"]).unwrap(), vectors);
    assert_eq!(server.request_count(), before);
}

#[test]
fn rerank_scores_follow_the_documents_and_are_cached_and_checked() {
    let server = FakeLlm::start(flexstruct_testkit::rerank_responder);
    server.script([Reply::Status { code: 503, retry_after: Some(0.0) }]);
    let dir = tempfile::tempdir().unwrap();
    let client = LlmClient::new(&config(&server), dir.path()).unwrap();
    let rt = runtime();
    let ctx = CallContext { stage: "query".into(), doc_id: None, purpose: "rerank".into() };
    let documents = ["the harbour lights", "nothing here", "harbour lights society chair"];
    let scores = rt.block_on(client.rerank(&ctx, "Who chairs the harbour lights society?", &documents)).unwrap();
    // The server answers best first; the scores come back in the documents' order.
    assert_eq!(scores, vec![2.0, 0.0, 3.0]);
    let requests = server.requests();
    assert!(requests.iter().all(|r| r.path == "/v1/rerank"));
    assert_eq!(requests[1].body["top_n"], 3);
    assert_eq!(requests[1].body["documents"][2], "harbour lights society chair");
    // Cached: a second client on the same folder asks nothing.
    let again = LlmClient::new(&config(&server), dir.path()).unwrap();
    let before = server.request_count();
    assert_eq!(rt.block_on(again.rerank(&ctx, "Who chairs the harbour lights society?", &documents)).unwrap(), scores);
    assert_eq!(server.request_count(), before);
    let calls = client.calls();
    assert!(calls.iter().any(|c| c.status == "http_503") && calls.iter().any(|c| c.status == "ok"));
    assert!(calls.iter().all(|c| c.purpose == "rerank"));

    // An answer that leaves a document out is refused and not kept: the next request asks again.
    server.script([Reply::Body(r#"{"results":[{"index":0,"relevance_score":1.0}]}"#.into())]);
    let err = rt.block_on(client.rerank(&ctx, "q", &["a", "b"])).unwrap_err();
    assert!(err.to_string().contains("scored 1 of the 2 documents"), "{err}");
    // The call is recorded as refused, not as an answer.
    assert_eq!(client.calls().last().map(|c| c.status.as_str()), Some("refused"));
    assert_eq!(rt.block_on(client.rerank(&ctx, "q", &["a", "b"])).unwrap(), vec![0.0, 0.0]);
    // A bare list, the shape of Text Embeddings Inference's answers, is read too.
    server.script([Reply::Body(r#"[{"index":1,"score":0.25},{"index":0,"score":-3.5}]"#.into())]);
    assert_eq!(rt.block_on(client.rerank(&ctx, "other", &["a", "b"])).unwrap(), vec![-3.5, 0.25]);
}

#[test]
fn an_answer_larger_than_max_response_bytes_is_refused_before_it_is_read() {
    let rt = runtime();
    let ctx = CallContext { stage: "query".into(), doc_id: None, purpose: "rerank".into() };
    // A well-formed re-ranking answer of 2 MB (padded with JSON whitespace): read whole without
    // the cap.
    let padded = format!(
        "{}{}",
        r#"{"results":[{"index":0,"relevance_score":1},{"index":1,"relevance_score":2}]}"#,
        " ".repeat(2 << 20)
    );
    let server = FakeLlm::start(move |_| Reply::Body(padded.clone()));
    let dir = tempfile::tempdir().unwrap();
    let capped = LlmConfig { max_response_bytes: 1 << 20, ..config(&server) };
    let client = LlmClient::new(&capped, dir.path()).unwrap();
    let err = rt.block_on(client.rerank(&ctx, "q", &["a", "b"])).unwrap_err().to_string();
    assert!(err.contains("over the 1048576 bytes max_response_bytes allows"), "{err}");
    // Refused once, not retried, and recorded as such.
    assert_eq!(server.request_count(), 1);
    assert_eq!(client.calls().iter().map(|c| c.status.as_str()).collect::<Vec<_>>(), ["too_large"]);
    // Within the cap the same answer is read.
    let roomy = LlmClient::new(&LlmConfig { max_response_bytes: 4 << 20, ..config(&server) }, dir.path()).unwrap();
    assert_eq!(rt.block_on(roomy.rerank(&ctx, "q", &["a", "b"])).unwrap(), vec![1.0, 2.0]);

    // A server that gives no length: the body is cut off as it streams in.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let streaming = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut socket, _) = listener.accept().unwrap();
        let mut request = [0u8; 4096];
        let _ = socket.read(&mut request);
        let _ = socket.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n[");
        let chunk = vec![b' '; 64 << 10];
        // 8 MB at most; the client hangs up long before.
        for _ in 0..128 {
            if socket.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    let endless = LlmConfig {
        base_url: format!("http://127.0.0.1:{port}/v1"),
        max_response_bytes: 1 << 20,
        max_retries: 0,
        ..config(&server)
    };
    let client = LlmClient::new(&endless, dir.path()).unwrap();
    let err = rt.block_on(client.rerank(&ctx, "q2", &["a", "b"])).unwrap_err().to_string();
    assert!(err.contains("the answer is larger, over the 1048576 bytes"), "{err}");
    streaming.join().unwrap();
}
