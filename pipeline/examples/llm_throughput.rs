//! How many requests per second the LLM client sustains against a local server that answers at
//! once: the client (cache lookups and writes, limits, JSON, HTTP) must not be the bottleneck.
//!
//! `cargo run -p flexstruct-pipeline --example llm_throughput -- [REQUESTS] [CONCURRENCY]`
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Instant;

use flexstruct_pipeline::llm::LlmConfig;
use flexstruct_pipeline::llm::{CallContext, LlmClient, Message};
use flexstruct_testkit::{FakeLlm, Reply};

fn main() {
    let mut args = std::env::args().skip(1);
    let requests: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let concurrency: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(32);
    let server = FakeLlm::start(|_| Reply::content(r#"{"items": []}"#));
    let dir = tempfile::tempdir().unwrap();
    let config = LlmConfig {
        base_url: server.base_url(),
        model: "bench".into(),
        api_key_env: String::new(),
        max_concurrency: concurrency,
        ..LlmConfig::default()
    };
    let client = Arc::new(LlmClient::new(&config, dir.path()).unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let context = CallContext { stage: "bench".into(), doc_id: None, purpose: "bench".into() };
    let started = Instant::now();
    runtime.block_on(async {
        let calls = (0..requests).map(|i| {
            let (client, context) = (client.clone(), context.clone());
            async move { client.chat(&context, &[Message::user(format!("request {i}"))]).await.unwrap() }
        });
        futures::future::join_all(calls).await;
    });
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(server.request_count(), requests);
    println!(
        "{requests} requests at concurrency {concurrency}: {seconds:.2} s, {:.0} requests/s (max in flight at the server: {})",
        requests as f64 / seconds,
        server.max_in_flight()
    );
}
