//! The stand-in LLM server as the scripts and the stage tests start it: a process that writes its
//! URL to a file, answers embeddings, re-ranking and chat on 127.0.0.1, and serves until killed.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(dir: &Path, args: &[&str]) -> (Server, String) {
    let url_file = dir.join("url");
    let child = Command::new(env!("CARGO_BIN_EXE_flexstruct-standin-llm"))
        .arg("--url-file")
        .arg(&url_file)
        .args(args)
        .spawn()
        .unwrap();
    let server = Server(child);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        if let Ok(url) = std::fs::read_to_string(&url_file).map(|u| u.trim().to_owned())
            && !url.is_empty()
        {
            return (server, url);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the stand-in wrote no URL within 30 s");
}

fn post(url: &str, body: Value) -> Value {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
        let response = client.post(url).json(&body).send().await.unwrap();
        assert!(response.status().is_success(), "{url}: {}", response.status());
        response.json().await.unwrap()
    })
}

#[test]
fn it_answers_embeddings_rerank_and_chat_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, url) = start(dir.path(), &[]);
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/v1"), "{url}");

    // Hashing vectors: one per input, 64 wide, the same text the same vector.
    let body = json!({"model": "standin-embeddings", "input": ["Mara Quint chairs the board.", "Mara Quint chairs the board.", "Rain in May."]});
    let embedded = post(&format!("{url}/embeddings"), body);
    let vectors: Vec<&Value> = embedded["data"].as_array().unwrap().iter().map(|d| &d["embedding"]).collect();
    assert_eq!(vectors.len(), 3);
    assert_eq!(vectors[0].as_array().unwrap().len(), 64);
    assert_eq!(vectors[0], vectors[1]);
    assert_ne!(vectors[0], vectors[2]);

    // Re-ranking by the question's words: the document that holds them first.
    let body =
        json!({"query": "Who chairs the board?", "documents": ["Rain fell in May.", "Mara Quint chairs the board."]});
    let ranked = post(&format!("{url}/rerank"), body);
    assert_eq!(ranked["results"][0]["index"], 1, "{ranked}");

    // A question without evidence gets the closed-book answer, with usage counted.
    let body = json!({"model": "standin", "messages": [
        {"role": "system", "content": "Answer the question from your own knowledge."},
        {"role": "user", "content": "Who chairs the board?"},
    ]});
    let answer = post(&format!("{url}/chat/completions"), body);
    assert!(answer["choices"][0]["message"]["content"].as_str().unwrap().starts_with("Answer: unknown"), "{answer}");
    assert!(answer["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
}

#[test]
fn a_fault_rate_outside_zero_to_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_flexstruct-standin-llm"))
        .args(["--faults", "1.5", "--url-file"])
        .arg(dir.path().join("url"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--faults must be between 0 and 1"));
}
