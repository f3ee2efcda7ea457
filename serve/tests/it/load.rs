//! A bounded load while the index changes: at least 2,000 questions, 16 in flight, while one
//! document is added and another deleted. No request fails, and every answer cites only
//! documents of the kb generation that gave it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};

use crate::util::*;

const FERRY: &str = "The electric ferry Tern carries 96 passengers between Orrin Quay and the island of Vell.";
const DELETED: &str = "doc-36cfe2cc0f44aeef";

fn questions() -> Vec<String> {
    let file = std::fs::read_to_string(sample_corpus().join("../questions.jsonl")).unwrap();
    let mut questions: Vec<String> = file
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["question"].as_str().unwrap().to_owned())
        .collect();
    questions.push("How many passengers does the electric ferry Tern carry?".into());
    questions.push("In what year was the trawler Morning Star lost?".into());
    questions
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_thousand_questions_at_16_in_flight_while_documents_change() {
    let (_dir, index) = sample_copy();
    let server = Arc::new(serve(&[("live", &index)], Options::default()).await);
    let (_, first) = server.get("/v1/indexes/live/documents?limit=1000").await;
    let original: BTreeSet<String> =
        first["documents"].as_array().unwrap().iter().map(|d| d["doc_id"].as_str().unwrap().to_owned()).collect();
    assert!(original.contains(DELETED));

    let questions = Arc::new(questions());
    let sent = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    // The updates start once the load runs, and the load runs until both have ended.
    let updates = {
        let server = server.clone();
        let sent = sent.clone();
        tokio::spawn(async move {
            while sent.load(Ordering::Relaxed) < 200 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let (status, add) = server
                .post("/v1/indexes/live/documents", json!({"documents": [{"doc_id": "ferry", "text": FERRY}]}))
                .await;
            assert_eq!(status, 202, "{add}");
            let (status, delete) = server.delete(&format!("/v1/indexes/live/documents/{DELETED}")).await;
            assert_eq!(status, 202, "{delete}");
            let add = server.wait_job("live", add["id"].as_str().unwrap()).await;
            let delete = server.wait_job("live", delete["id"].as_str().unwrap()).await;
            (add, delete)
        })
    };
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let asks = futures::stream::iter(0..10_000usize)
        .take_while(|&n| {
            let more = n < 2_000 || (!done.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(240));
            std::future::ready(more)
        })
        .map(|n| {
            let server = server.clone();
            let questions = questions.clone();
            let sent = sent.clone();
            async move {
                sent.fetch_add(1, Ordering::Relaxed);
                let path = if n % 4 == 0 { "/v1/query" } else { "/v1/retrieve" };
                let body = json!({"question": questions[n % questions.len()], "id": n.to_string()});
                let response = server.client.post(server.url(path)).json(&body).send().await.unwrap();
                let generation: u64 = response.headers()["x-flexstruct-generation"].to_str().unwrap().parse().unwrap();
                let (status, body) = status_json(response).await;
                (status, generation, body)
            }
        })
        .buffer_unordered(16);
    let watcher = {
        let done = done.clone();
        tokio::spawn(async move {
            let result = updates.await.unwrap();
            done.store(true, Ordering::Relaxed);
            result
        })
    };
    let results: Vec<(u16, u64, Value)> = asks.collect().await;
    let (add, delete) = watcher.await.unwrap();
    assert_eq!((add["state"].as_str(), delete["state"].as_str()), (Some("done"), Some("done")), "{add}\n{delete}");
    assert!(results.len() >= 2_000);

    // The documents of each generation, from the jobs' outcomes.
    let (added_at, deleted_at) = (add["generation"].as_u64().unwrap(), delete["generation"].as_u64().unwrap());
    let documents = |generation: u64| -> BTreeSet<String> {
        let mut docs = original.clone();
        if generation >= added_at {
            docs.insert("ferry".into());
        }
        if generation >= deleted_at {
            docs.remove(DELETED);
        }
        docs
    };
    let mut by_generation: BTreeMap<u64, usize> = BTreeMap::new();
    for (status, generation, body) in &results {
        assert_eq!(*status, 200, "{body}");
        *by_generation.entry(*generation).or_default() += 1;
        let served = documents(*generation);
        let cited = body["citations"].as_array().unwrap().iter().chain(body["evidence"].as_array().unwrap());
        for c in cited {
            let doc = c["doc_id"].as_str().unwrap();
            assert!(served.contains(doc), "generation {generation} cites {doc}, which it does not serve: {body}");
        }
    }
    // Answers came from the kb before the updates and from the one after both.
    assert!(by_generation.contains_key(&1), "{by_generation:?}");
    assert!(by_generation.keys().any(|&g| g >= added_at.max(deleted_at)), "{by_generation:?}");
    let ferry_answers = results
        .iter()
        .filter(|(_, g, b)| *g >= added_at && b["evidence"].as_array().unwrap().iter().any(|e| e["doc_id"] == "ferry"));
    assert!(ferry_answers.count() > 0, "no answer of the new kb used the added document");
    let (_, after) = server.get(&format!("/v1/indexes/live/documents/{DELETED}")).await;
    assert_eq!(after["error"]["field"], "doc_id");
}
