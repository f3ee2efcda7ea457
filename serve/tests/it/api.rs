//! Questions, the graph and the server's own endpoints over a served sample index: answers equal
//! the engine's, citations read back as the spans they name, every malformed request names its
//! field, tokens and limits hold.

use std::time::Duration;

use flexstruct_pipeline::config::{BackendChoice, BackendsConfig, LlmConfig};
use flexstruct_pipeline::io::Index;
use flexstruct_pipeline::query::Question;
use flexstruct_serve::Limits;
use flexstruct_serve::auth::Tokens;
use flexstruct_testkit::{FakeLlm, Reply};
use serde_json::{Value, json};

use crate::util::*;

const QUESTION: &str = "In what year was the trawler Morning Star lost?";

/// An answer without its timings (they differ from run to run).
fn untimed(mut answer: Value) -> Value {
    for key in ["retrieval_ms", "embed_ms", "generation_ms"] {
        answer.as_object_mut().unwrap().remove(key);
    }
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_the_engines_with_citations_that_read_back_as_their_spans() {
    let server = serve(&[("sample", sample_index())], Options::default()).await;
    let response = server
        .client
        .post(server.url("/v1/query"))
        .json(&json!({"question": QUESTION, "id": "s3"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-flexstruct-generation"], "1");
    let (status, answer) = status_json(response).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["answer"].as_str().unwrap().contains("1952"), "{answer}");
    assert_eq!(answer["id"], "s3");

    // The same object as a line of flexstruct-query's answers file.
    let expected = tokio::task::spawn_blocking(|| {
        let index = Index::open(sample_index()).unwrap();
        let config = config();
        let engine = flexstruct_pipeline::compose::open_engine(&index, &config).unwrap();
        let prepared = engine.prepare(vec![Question { id: "s3".into(), question: QUESTION.into() }]).unwrap();
        // Through text, as an answers file holds it (an f32 score reads back as the same f64).
        serde_json::from_str::<Value>(
            &serde_json::to_string(&engine.answer(&prepared, &config.query).unwrap()[0]).unwrap(),
        )
        .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(untimed(answer.clone()), untimed(expected));

    // Every citation reads back from the document as the span it names, and the cited evidence
    // holds that text.
    let citations = answer["citations"].as_array().unwrap();
    assert!(!citations.is_empty(), "{answer}");
    for c in citations {
        let (doc, start, end) =
            (c["doc_id"].as_str().unwrap(), c["start"].as_i64().unwrap(), c["end"].as_i64().unwrap());
        let (status, span) = server.get(&format!("/v1/indexes/sample/documents/{doc}?start={start}&end={end}")).await;
        assert_eq!(status, 200, "{span}");
        let text = span["text"].as_str().unwrap();
        assert_eq!(text.chars().count() as i64, end - start);
        let (_, whole) = server.get(&format!("/v1/indexes/sample/documents/{doc}")).await;
        let from_whole: String =
            whole["text"].as_str().unwrap().chars().skip(start as usize).take((end - start) as usize).collect();
        assert_eq!(text, from_whole);
        let cited = answer["cited"].as_array().unwrap();
        let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            cited.iter().any(|n| words(answer["evidence"][n.as_u64().unwrap() as usize - 1]["text"].as_str().unwrap())
                .contains(&words(text))),
            "no cited evidence holds {text:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrieval_gives_the_context_of_the_answer_without_answering() {
    let server = serve(&[("sample", sample_index())], Options::default()).await;
    // (Hashing vectors are far below MiniLM's calibrated chunk threshold.)
    let ask = json!({"index": "sample", "question": QUESTION, "mode": "chunks", "budget": 400, "settings": {"tau_chunk": 0.0}});
    let (status, retrieved) = server.post("/v1/retrieve", ask.clone()).await;
    assert_eq!(status, 200, "{retrieved}");
    assert!(retrieved.get("answer").is_none());
    assert_eq!((retrieved["mode"].as_str(), retrieved["variant"].as_str()), (Some("chunks"), Some("chunks")));
    assert!(retrieved["context_tokens"].as_u64().unwrap() <= 400);
    assert!(retrieved["context"].as_str().unwrap().starts_with("[1]"), "{retrieved}");
    assert!(retrieved["context"].as_str().unwrap().contains("Morning Star"));
    let (_, answered) = server.post("/v1/query", ask).await;
    assert_eq!(retrieved["evidence"], answered["evidence"]);
    assert_eq!(retrieved["generation"], 1);

    // Toggles and settings change what is retrieved, and the label says so.
    let (status, fewer) = server
        .post(
            "/v1/retrieve",
            json!({"question": QUESTION, "toggles": {"edges": false, "clusters": false}, "settings": {"n_eh": 2, "second_hop": 0}}),
        )
        .await;
    assert_eq!(status, 200, "{fewer}");
    assert_eq!(fewer["variant"], "hybrid w/o SSC+ER+2nd hop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_malformed_request_is_a_client_error_naming_its_field() {
    let server = serve(&[("sample", sample_index()), ("other", sample_index())], Options::default()).await;
    let cases: Vec<(Value, u16, &str, &str)> = vec![
        (json!({"question": QUESTION}), 400, "index", "this server serves other, sample"),
        (json!({"index": "nope", "question": QUESTION}), 404, "index", "no index `nope`"),
        (json!({"index": "sample"}), 400, "question", "missing field `question`"),
        (json!({"index": "sample", "question": "  "}), 400, "question", "empty"),
        (json!({"index": "sample", "question": 7}), 400, "question", "expected a string"),
        (json!({"index": "sample", "question": QUESTION, "mode": "best"}), 400, "mode", "unknown query mode `best`"),
        (json!({"index": "sample", "question": QUESTION, "toggles": {"edges": "no"}}), 400, "toggles.edges", "boolean"),
        (
            json!({"index": "sample", "question": QUESTION, "toggles": {"magic": true}}),
            400,
            "toggles.magic",
            "unknown field",
        ),
        (json!({"index": "sample", "question": QUESTION, "budget": -5}), 400, "budget", "invalid value"),
        (json!({"index": "sample", "question": QUESTION, "colour": "red"}), 400, "colour", "unknown field"),
        (
            json!({"index": "sample", "question": QUESTION, "settings": {"n_eh": "many"}}),
            400,
            "settings.n_eh",
            "invalid type",
        ),
        (
            json!({"index": "sample", "question": QUESTION, "settings": {"nope": 1}}),
            400,
            "settings.nope",
            "unknown field",
        ),
        (
            json!({"index": "sample", "question": QUESTION, "settings": {"vector_precision": "f16"}}),
            400,
            "settings.vector_precision",
            "when the kb is loaded",
        ),
        (json!({"index": "sample", "question": QUESTION, "settings": {"rrf_k": -1.0}}), 400, "settings.rrf_k", ""),
        (json!({"index": "sample", "question": "x".repeat(20_000)}), 400, "question", "longer than"),
    ];
    for (body, want_status, want_field, want_message) in cases {
        for path in ["/v1/query", "/v1/retrieve"] {
            let (status, error_body) = server.post(path, body.clone()).await;
            let (field, message) = error(&error_body);
            assert_eq!((status, field), (want_status, want_field), "{path} {body}: {error_body}");
            assert!(message.contains(want_message), "{path} {body}: {message}");
        }
    }
    // A strategy the index cannot run is the index's state, not the request's fault.
    let (status, body) =
        server.post("/v1/query", json!({"index": "sample", "question": QUESTION, "mode": "paths"})).await;
    assert_eq!(status, 409, "{body}");
    assert!(error(&body).1.contains("path index"), "{body}");
    // Not JSON, not an object, the wrong content type.
    let raw = |body: &'static str, content_type: &'static str| {
        server.client.post(server.url("/v1/query")).header("content-type", content_type).body(body).send()
    };
    let (status, body) = status_json(raw("{\"question\": ", "application/json").await.unwrap()).await;
    assert_eq!(status, 400);
    assert!(error(&body).1.contains("not valid JSON"), "{body}");
    let (status, body) = status_json(raw("[1, 2]", "application/json").await.unwrap()).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = status_json(raw("question=x", "application/x-www-form-urlencoded").await.unwrap()).await;
    assert_eq!(status, 400);
    assert!(error(&body).1.contains("must be JSON"), "{body}");
    // A path the server does not have, and an unknown path parameter.
    let (status, body) = server.get("/v2/everything").await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = server.get("/v1/indexes/nope/documents").await;
    assert_eq!((status, error(&body).0), (404, "index"));
    let (status, body) = server.get("/v1/indexes/sample/documents/doc-none").await;
    assert_eq!((status, error(&body).0), (404, "doc_id"));
    let (status, body) = server.get("/v1/indexes/sample/jobs/x").await;
    assert_eq!((status, error(&body).0), (404, "id"));
    // Spans outside the document.
    let (_, page) = server.get("/v1/indexes/sample/documents?limit=1").await;
    let doc = page["documents"][0]["doc_id"].as_str().unwrap().to_owned();
    for (query, field) in
        [("start=5&end=2", "end"), ("start=0&end=99999999", "end"), ("start=3", "end"), ("end=3", "start")]
    {
        let (status, body) = server.get(&format!("/v1/indexes/sample/documents/{doc}?{query}")).await;
        assert_eq!((status, error(&body).0), (400, field), "{query}: {body}");
    }
    // A parameter that is not a number is named too.
    for (query, field) in [("start=x&end=2", "start"), ("start=0&end=-1", "end")] {
        let (status, body) = server.get(&format!("/v1/indexes/sample/documents/{doc}?{query}")).await;
        assert_eq!((status, error(&body).0), (400, field), "{query}: {body}");
    }
    for (query, field) in
        [("limit=0", "limit"), ("limit=5000", "limit"), ("status=gone", "status"), ("offset=-1", "offset")]
    {
        let (status, body) = server.get(&format!("/v1/indexes/sample/documents?{query}")).await;
        assert_eq!((status, error(&body).0), (400, field), "{query}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_graph_of_an_entity_and_a_hyperedge() {
    let server = serve(&[("sample", sample_index())], Options::default()).await;
    let (status, found) = server.get("/v1/indexes/sample/entities?q=Morning%20Star").await;
    assert_eq!(status, 200, "{found}");
    let first = &found[0];
    assert_eq!((first["name"].as_str(), first["via"].as_str()), (Some("Morning Star"), Some("name")), "{found}");
    let id = first["id"].as_str().unwrap();
    let (status, entity) = server.get(&format!("/v1/indexes/sample/entities/{id}")).await;
    assert_eq!(status, 200, "{entity}");
    assert_eq!(entity["name"], "Morning Star");
    let hyperedges = entity["hyperedges"].as_array().unwrap();
    assert_eq!(hyperedges.len() as u64, entity["hyperdegree"].as_u64().unwrap());
    assert!(hyperedges.iter().all(|h| h["entities"].as_array().unwrap().iter().any(|e| e["id"] == id)));
    assert!(!entity["neighbours"].as_array().unwrap().is_empty(), "{entity}");
    let h = hyperedges[0]["id"].as_str().unwrap();
    let (status, hyperedge) = server.get(&format!("/v1/indexes/sample/hyperedges/{h}")).await;
    assert_eq!(status, 200, "{hyperedge}");
    assert!(hyperedge["entities"].as_array().unwrap().iter().any(|e| e["id"] == id));
    // Its span is the verbatim source text.
    let (doc, start, end) = (
        hyperedge["doc_id"].as_str().unwrap(),
        hyperedge["start"].as_i64().unwrap(),
        hyperedge["end"].as_i64().unwrap(),
    );
    let (_, span) = server.get(&format!("/v1/indexes/sample/documents/{doc}?start={start}&end={end}")).await;
    assert_eq!(span["text"], hyperedge["ref_text"]);
    // A part of a name finds it too; nothing and unknown ids are errors.
    let (_, part) = server.get("/v1/indexes/sample/entities?q=morning").await;
    assert!(part.as_array().unwrap().iter().any(|e| e["id"] == id), "{part}");
    let (status, body) = server.get("/v1/indexes/sample/entities?q=%20").await;
    assert_eq!((status, error(&body).0), (400, "q"));
    let (status, body) = server.get("/v1/indexes/sample/entities").await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = server.get("/v1/indexes/sample/entities/e-none").await;
    assert_eq!((status, error(&body).0), (404, "id"));
    let (status, body) = server.get("/v1/indexes/sample/hyperedges/h-none").await;
    assert_eq!((status, error(&body).0), (404, "id"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_answer_with_citations_plain_and_streamed() {
    let server = serve(&[("sample", sample_index())], Options::default()).await;
    let (status, models) = server.get("/v1/models").await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = models["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&"sample") && ids.contains(&"sample:chunks") && ids.contains(&"sample:paths"), "{ids:?}");

    let ask = |model: &str, stream: bool| {
        json!({"model": model, "stream": stream, "temperature": 0.2, "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Who chairs the authority?"},
            {"role": "assistant", "content": "Which one?"},
            {"role": "user", "content": [{"type": "text", "text": QUESTION}]},
        ]})
    };
    let (status, completion) = server.post("/v1/chat/completions", ask("sample", false)).await;
    assert_eq!(status, 200, "{completion}");
    assert_eq!(completion["object"], "chat.completion");
    let content = completion["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.contains("1952") && content.contains("Sources:\n[1] "), "{content}");
    let citations = completion["citations"].as_array().unwrap();
    assert!(!citations.is_empty() && citations[0]["doc_id"].as_str().unwrap().starts_with("doc-"), "{completion}");
    assert!(completion["usage"]["total_tokens"].as_u64().unwrap() > 0);

    // Streamed: the same text, in chunks, then the citations and [DONE].
    let response =
        server.client.post(server.url("/v1/chat/completions")).json(&ask("sample", true)).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let body = response.text().await.unwrap();
    let events: Vec<&str> = body.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(events.last(), Some(&"[DONE]"), "{body}");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    let streamed: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(streamed, content);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert_eq!(&last["citations"], &completion["citations"]);

    // A strategy by model name, and the errors.
    let (status, chunks_answer) = server.post("/v1/chat/completions", ask("sample:chunks", false)).await;
    assert_eq!(status, 200, "{chunks_answer}");
    for (body, want, field) in [
        (ask("nope", false), 404, "model"),
        (ask("sample:magic", false), 404, "model"),
        (json!({"model": "sample", "messages": [{"role": "system", "content": "hi"}]}), 400, "messages"),
        (json!({"model": "sample", "messages": [{"role": "user", "content": null}]}), 400, "messages[0].content"),
        (json!({"model": "sample", "messages": [{"role": "user", "content": " "}]}), 400, "messages[0].content"),
        (json!({"model": "sample", "n": 3, "messages": [{"role": "user", "content": "q"}]}), 400, "n"),
        (json!({"messages": []}), 400, "model"),
    ] {
        let (status, error_body) = server.post("/v1/chat/completions", body.clone()).await;
        assert_eq!((status, error(&error_body).0), (want, field), "{body}: {error_body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_answers_come_from_the_configured_llm_given_the_retrieved_context() {
    let llm = FakeLlm::start(|request| {
        let prompt = request.last_user_message();
        if prompt.contains(QUESTION) && prompt.contains("[1]") && prompt.contains("Morning Star") {
            Reply::content("Answer: 1952 [1]\nThe trawler was lost in a storm off Skerry Head [1].")
        } else {
            Reply::content("Answer: I cannot tell.")
        }
    });
    let mut config = config();
    config.llm = Some(LlmConfig { base_url: llm.base_url(), model: "fake-model".into(), ..LlmConfig::default() });
    config.backends =
        BackendsConfig { all: BackendChoice::Rules, answers: Some(BackendChoice::Llm), ..Default::default() };
    // The LLM's response cache is kept in the index: a copy of its own.
    let (_dir, index) = sample_copy();
    let server = serve(&[("sample", &index)], Options { config, ..Options::default() }).await;
    let ask = |stream: bool| json!({"model": "sample", "stream": stream, "messages": [{"role": "user", "content": QUESTION}]});
    let (status, completion) = server.post("/v1/chat/completions", ask(false)).await;
    assert_eq!(status, 200, "{completion}");
    let content = completion["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.starts_with("Answer: 1952 [1]\nThe trawler was lost"), "{content}");
    assert_eq!(completion["citations"][0]["number"], 1, "{completion}");
    assert_eq!(llm.request_count(), 1);
    let (_, answer) = server.post("/v1/query", json!({"question": QUESTION})).await;
    assert_eq!(
        (answer["generator"].as_str(), answer["short_answer"].as_str()),
        (Some("llm"), Some("1952")),
        "{answer}"
    );
    // Streamed: the same text (the same request again comes from the LLM's cache).
    let body = server.client.post(server.url("/v1/chat/completions")).json(&ask(true)).send().await.unwrap();
    let text = body.text().await.unwrap();
    let streamed: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|e| *e != "[DONE]")
        .filter_map(|e| {
            serde_json::from_str::<Value>(e).unwrap()["choices"][0]["delta"]["content"].as_str().map(str::to_owned)
        })
        .collect();
    assert_eq!(streamed, content);
    assert_eq!(llm.request_count(), 1, "the repeated question was not answered from the cache");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_metrics_indexes_and_an_openapi_description_of_every_route() {
    // A copy with a path index, so that the memory of each part can be seen.
    let (_dir, index) = sample_copy();
    let at = index.clone();
    std::thread::spawn(move || {
        use flexstruct_pipeline::stages::{NoProgress, RunContext};
        let index = Index::open(&at).unwrap();
        let ctx = RunContext { index, shard: flexstruct_pipeline::io::Shard::ALL, progress: &NoProgress, survey: None };
        flexstruct_pipeline::compose::paths(&ctx, &config()).unwrap();
    })
    .join()
    .unwrap();
    let server = serve(&[("sample", &index)], Options::default()).await;
    let (status, health) = server.get("/healthz").await;
    assert_eq!((status, health["status"].as_str()), (200, Some("ok")));
    let (_, indexes) = server.get("/v1/indexes").await;
    assert_eq!(indexes[0]["name"], "sample");
    assert_eq!(indexes[0]["model"], "hashing-64");
    assert!(indexes[0]["rows"]["hyperedges"].as_u64().unwrap() > 0);
    server.post("/v1/query", json!({"question": QUESTION})).await;
    server.post("/v1/query", json!({"question": ""})).await;
    let metrics = server.client.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    for line in [
        "flexstruct_requests_total{route=\"/v1/query\",method=\"POST\",status=\"200\"} 1",
        "flexstruct_requests_total{route=\"/v1/query\",method=\"POST\",status=\"400\"} 1",
        "flexstruct_request_errors_total{route=\"/v1/query\"} 1",
        "flexstruct_request_duration_seconds_count{route=\"/v1/query\"} 2",
        "flexstruct_kb_generation{index=\"sample\"} 1",
        "flexstruct_jobs{index=\"sample\",state=\"queued\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
    assert!(metrics.contains("flexstruct_kb_rows{index=\"sample\",table=\"hyperedges\"}"));

    // The heap the index keeps, by part: its vectors at least their floats (hashing-64, f32),
    // its texts at least their bytes; the graph lookups and the path index once built.
    let memory = memory_parts(&metrics);
    let rows: u64 =
        ["entities", "hyperedges", "edges", "chunks"].iter().map(|t| indexes[0]["rows"][t].as_u64().unwrap()).sum();
    assert!(memory["vectors"] >= rows * 64 * 4 && memory["vectors"] < rows * 64 * 4 * 2, "{memory:?} for {rows} rows");
    assert!(
        memory["texts"] > 0 && memory["documents"] > 0 && memory["lookups"] > 0 && memory["lexical"] > 0,
        "{memory:?}"
    );
    assert_eq!((memory["graph lookups"], memory["path index"]), (0, 0), "{memory:?}");
    let (_, found) = server.get("/v1/indexes/sample/entities?q=Morning%20Star").await;
    server.get(&format!("/v1/indexes/sample/entities/{}", found[0]["id"].as_str().unwrap())).await;
    let (status, body) = server.post("/v1/query", json!({"question": QUESTION, "mode": "paths"})).await;
    assert_eq!(status, 200, "{body}");
    let metrics = server.client.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let after = memory_parts(&metrics);
    assert!(after["graph lookups"] > 0 && after["path index"] > 0, "{after:?}");
    assert_eq!(after["vectors"], memory["vectors"]);

    // The description has every route of the router, with the method it answers.
    let (_, openapi) = server.get("/openapi.json").await;
    let paths = openapi["paths"].as_object().unwrap();
    for (path, method) in [
        ("/v1/query", "post"),
        ("/v1/retrieve", "post"),
        ("/v1/chat/completions", "post"),
        ("/v1/models", "get"),
        ("/v1/indexes", "get"),
        ("/v1/indexes/{index}/documents", "post"),
        ("/v1/indexes/{index}/documents", "get"),
        ("/v1/indexes/{index}/documents/{doc_id}", "get"),
        ("/v1/indexes/{index}/documents/{doc_id}", "delete"),
        ("/v1/indexes/{index}/jobs", "get"),
        ("/v1/indexes/{index}/jobs/{id}", "get"),
        ("/v1/indexes/{index}/entities", "get"),
        ("/v1/indexes/{index}/entities/{id}", "get"),
        ("/v1/indexes/{index}/hyperedges/{id}", "get"),
        ("/healthz", "get"),
        ("/metrics", "get"),
        ("/openapi.json", "get"),
    ] {
        assert!(paths.get(path).and_then(|p| p.get(method)).is_some(), "{method} {path} not described");
    }
    assert!(openapi["components"]["schemas"]["QueryRequest"]["properties"]["toggles"].is_object(), "{openapi}");

    // The explorer and its files, which may load nothing from elsewhere.
    let page = server.client.get(server.url("/")).send().await.unwrap();
    let policy = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(policy.contains("default-src 'self'"));
    assert!(page.text().await.unwrap().contains("/assets/app.js"));
    for asset in ["app.js", "app.css"] {
        let response = server.client.get(server.url(&format!("/assets/{asset}"))).send().await.unwrap();
        assert_eq!(response.status(), 200);
    }
    let (status, _) = server.get("/assets/..%2Fsrc%2Flib.rs").await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_separate_reading_from_writing_and_one_index_from_another() {
    let vars = [("FLEXSTRUCT_SERVE_READ_TOKENS", "reader"), ("FLEXSTRUCT_SERVE_WRITE_TOKENS", "other-writer@other")];
    let tokens =
        Tokens::from_env(&["sample", "other"], |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()));
    let (_dir, copy) = sample_copy();
    let server = serve(&[("sample", sample_index()), ("other", &copy)], Options { tokens, ..Options::default() }).await;
    let ask = |token: Option<&str>, index: &str| {
        let mut request =
            server.client.post(server.url("/v1/retrieve")).json(&json!({"index": index, "question": QUESTION}));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    assert_eq!(ask(None, "sample").await.unwrap().status(), 401);
    assert_eq!(ask(Some("wrong"), "sample").await.unwrap().status(), 401);
    assert_eq!(ask(Some("reader"), "sample").await.unwrap().status(), 200);
    assert_eq!(ask(Some("reader"), "other").await.unwrap().status(), 200);
    assert_eq!(ask(Some("other-writer"), "other").await.unwrap().status(), 200);
    assert_eq!(ask(Some("other-writer"), "sample").await.unwrap().status(), 403);
    let upload = |token: &str, index: &str| {
        server
            .client
            .post(server.url(&format!("/v1/indexes/{index}/documents")))
            .bearer_auth(token)
            .json(&json!({"documents": [{"text": "The lighthouse at Skerry Head was automated in 1987."}]}))
            .send()
    };
    assert_eq!(upload("reader", "other").await.unwrap().status(), 403);
    assert_eq!(upload("other-writer", "sample").await.unwrap().status(), 403);
    assert_eq!(upload("other-writer", "other").await.unwrap().status(), 202);
    // The models a token lists are the indexes it may read; health needs no token.
    let models = server.client.get(server.url("/v1/models")).bearer_auth("other-writer").send().await.unwrap();
    let (_, models) = status_json(models).await;
    assert!(models["data"].as_array().unwrap().iter().all(|m| m["id"].as_str().unwrap().starts_with("other")));
    assert_eq!(server.client.get(server.url("/metrics")).send().await.unwrap().status(), 401);
    assert_eq!(server.client.get(server.url("/healthz")).send().await.unwrap().status(), 200);
    let unauthorised = ask(None, "sample").await.unwrap();
    assert_eq!(unauthorised.headers()["www-authenticate"], "Bearer");
}

/// A request body that arrives after `delay`.
fn slow_body(delay: Duration, body: Value) -> reqwest::Body {
    let stream = futures::stream::once(async move {
        tokio::time::sleep(delay).await;
        Ok::<_, std::io::Error>(serde_json::to_vec(&body).unwrap())
    });
    reqwest::Body::wrap_stream(stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_answer_503_with_retry_after_and_413() {
    let limits = Limits { max_in_flight: 1, request_timeout: Duration::from_secs(1), max_request_bytes: 2000 };
    let server = serve(&[("sample", sample_index())], Options { limits, ..Options::default() }).await;
    // One request in flight (its body is slow to come) fills the server.
    let slow = server
        .client
        .post(server.url("/v1/retrieve"))
        .header("content-type", "application/json")
        .body(slow_body(Duration::from_millis(600), json!({"question": QUESTION})))
        .send();
    let slow = tokio::spawn(slow);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, body) = server.post("/v1/retrieve", json!({"question": QUESTION})).await;
    assert_eq!(status, 503, "{body}");
    assert!(error(&body).1.contains("--max-in-flight"), "{body}");
    let first = slow.await.unwrap().unwrap();
    assert_eq!(first.status(), 200);
    // Now free again.
    let response =
        server.client.post(server.url("/v1/retrieve")).json(&json!({"question": QUESTION})).send().await.unwrap();
    assert_eq!(response.status(), 200);

    // A request over the time limit.
    let late = server
        .client
        .post(server.url("/v1/retrieve"))
        .header("content-type", "application/json")
        .body(slow_body(Duration::from_millis(2500), json!({"question": QUESTION})))
        .send()
        .await
        .unwrap();
    assert_eq!(late.status(), 503);
    assert!(late.headers().contains_key("retry-after"));
    let (_, body) = status_json(late).await;
    assert!(error(&body).1.contains("--request-timeout-secs"), "{body}");

    // A body over the size limit.
    let (status, body) = server.post("/v1/retrieve", json!({"question": "x".repeat(5000)})).await;
    assert_eq!(status, 413, "{body}");
}

/// `flexstruct_index_memory_bytes` of the sample index, by part.
fn memory_parts(metrics: &str) -> std::collections::BTreeMap<String, u64> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("flexstruct_index_memory_bytes{index=\"sample\",part=\""))
        .map(|l| {
            let (part, value) = l.split_once("\"} ").unwrap();
            (part.to_owned(), value.parse().unwrap())
        })
        .collect()
}
