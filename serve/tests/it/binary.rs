//! The binary: killed in the middle of an update, it serves a whole kb on restart (the old one,
//! or the new one once it has finished the job), and the job says what happened; it never logs a
//! token; it will not listen beyond loopback without tokens unless told to.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::*;

fn command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_flexstruct-serve"));
    command.env("FLEXSTRUCT_EMBED__MODEL", "hashing-64").env_remove("FLEXSTRUCT_CONFIG");
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("FLEXSTRUCT_SERVE_")) {
        command.env_remove(k);
    }
    command
}

/// The binary serving `index` as `live` on a free port; returns it and its base URL.
fn start(index: &Path) -> (Child, String) {
    let (child, base, _) = start_with(command().args(["--quiet"]), index, None);
    (child, base)
}

/// The binary, with `command`'s settings, serving `index` as `live` on a free port; returns it,
/// its base URL, and when `log` is given its log, gathered there as it comes.
fn start_with(
    command: &mut Command,
    index: &Path,
    log: Option<std::sync::Arc<std::sync::Mutex<String>>>,
) -> (Child, String, Option<std::sync::Arc<std::sync::Mutex<String>>>) {
    let mut child = command
        .args(["--index", &format!("live={}", index.display()), "--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut log_so_far = String::new();
    while Instant::now() < deadline {
        let Some(Ok(line)) = lines.next() else { break };
        log_so_far.push_str(&line);
        log_so_far.push('\n');
        if let Some(rest) = line.split(" on http://").nth(1) {
            let address = rest.split('/').next().unwrap().to_owned();
            // Keep reading the log so that the server never blocks on a full pipe.
            let gathered = log.clone();
            std::thread::spawn(move || {
                for line in lines.map_while(Result::ok) {
                    if let Some(log) = &gathered {
                        log.lock().unwrap().push_str(&(line + "\n"));
                    }
                }
            });
            if let Some(gathered) = &log {
                gathered.lock().unwrap().push_str(&log_so_far);
            }
            return (child, format!("http://{address}"), log);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the server did not start:\n{log_so_far}");
}

fn kill(mut child: Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

async fn get(client: &reqwest::Client, url: String) -> (u16, Value) {
    status_json(client.get(url).send().await.unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_update_serves_a_whole_kb_and_finishes_the_job_on_restart() {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
    let mut killed_running = 0;
    for stage in ["ingest", "extract", "embed", "merge"] {
        let (_dir, index) = sample_copy();
        let (child, base) = start(&index);
        let (_, before) = get(&client, format!("{base}/v1/indexes/live/documents?limit=1000")).await;
        let documents: Vec<Value> = (0..40)
            .map(|i| json!({"doc_id": format!("note-{i}"), "text": format!("Harbour note {i}: the pilot boat Wren {i} left Orrin Quay at dawn with {i} crew and returned by noon.")}))
            .collect();
        let response = client
            .post(format!("{base}/v1/indexes/live/documents"))
            .json(&json!({"documents": documents}))
            .send()
            .await
            .unwrap();
        let (status, accepted) = status_json(response).await;
        assert_eq!(status, 202, "{accepted}");
        let id = accepted["id"].as_str().unwrap().to_owned();
        // Kill it once the job reaches the stage (or has passed it).
        let order = ["ingest", "chunk", "extract", "hypergraph", "graph", "embed", "cluster", "merge"];
        let at = order.iter().position(|s| *s == stage).unwrap();
        let mut killed_in = None;
        for _ in 0..6000 {
            let (_, job) = get(&client, format!("{base}/v1/indexes/live/jobs/{id}")).await;
            let now = job["stage"].as_str().and_then(|s| order.iter().position(|o| *o == s));
            if job["state"] == "done" || now.is_some_and(|n| n >= at) {
                killed_in = Some(job);
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        kill(child);
        let killed_in = killed_in.expect("the job never reached the stage");
        if killed_in["state"] == "running" {
            killed_running += 1;
        }

        let (child, base) = start(&index);
        // Whatever the moment, the kb served now is whole: the old one, or the new one.
        let (_, served) = get(&client, format!("{base}/v1/indexes/live/documents?status=processed&limit=1000")).await;
        let count = served["total"].as_u64().unwrap();
        let old = before["total"].as_u64().unwrap();
        assert!(count == old || count == old + 40, "{stage}: {count} documents served, neither {old} nor {}", old + 40);
        // The job resumes and ends with the new kb.
        let mut job = Value::Null;
        for _ in 0..600 {
            (_, job) = get(&client, format!("{base}/v1/indexes/live/jobs/{id}")).await;
            if job["state"] == "done" || job["state"] == "failed" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!((job["state"].as_str(), job["kb"].as_str()), (Some("done"), Some("new")), "{stage}: {job}");
        if killed_in["state"] != "done" {
            let notes = job["notes"].to_string();
            assert!(notes.contains("resumed"), "{stage}: {job}");
        }
        assert!(job["documents"].as_array().unwrap().iter().all(|d| d["status"] == "processed"), "{job}");
        let (_, served) = get(&client, format!("{base}/v1/indexes/live/documents?status=processed&limit=1000")).await;
        assert_eq!(served["total"].as_u64().unwrap(), old + 40, "{stage}");
        let response = client
            .post(format!("{base}/v1/query"))
            .json(&json!({"question": "How many crew did the pilot boat Wren 17 have?"}))
            .send()
            .await
            .unwrap();
        let (status, answer) = status_json(response).await;
        assert_eq!(status, 200, "{answer}");
        assert!(answer["evidence"].as_array().unwrap().iter().any(|e| e["doc_id"] == "note-17"), "{stage}: {answer}");
        kill(child);
    }
    // The job may outrun the poll now and then; most kills must land in the middle of it.
    assert!(killed_running >= 3, "only {killed_running} of 4 kills landed while the job ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_reaches_the_log() {
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let mut command = command();
    command
        .env("FLEXSTRUCT_SERVE_READ_TOKENS", "reader-secret-4711")
        .env("FLEXSTRUCT_SERVE_WRITE_TOKENS", "writer-secret-0815@live");
    let (child, base, _) = start_with(&mut command, sample_index(), Some(log.clone()));
    let client = reqwest::Client::new();
    for token in ["reader-secret-4711", "writer-secret-0815", "wrong-secret-1234"] {
        let response = client
            .post(format!("{base}/v1/query?token={token}"))
            .bearer_auth(token)
            .json(&json!({"question": "In what year was the trawler Morning Star lost?"}))
            .send()
            .await
            .unwrap();
        let expected = if token.starts_with("wrong") { 401 } else { 200 };
        assert_eq!(response.status(), expected);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    kill(child);
    let log = log.lock().unwrap().clone();
    assert!(log.contains("POST /v1/query 200"), "{log}");
    for secret in ["reader-secret-4711", "writer-secret-0815", "wrong-secret-1234"] {
        assert!(!log.contains(secret), "{secret} is in the log:\n{log}");
    }
}

#[test]
fn listening_beyond_loopback_without_tokens_is_refused() {
    let out = command()
        .args(["--index", &format!("live={}", sample_index().display()), "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("beyond loopback without bearer tokens") && stderr.contains("--allow-open"), "{stderr}");
    // A bad index is named.
    let out = command().args(["--index", "live=/nonexistent/index", "--listen", "127.0.0.1:0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent/index"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = command().args(["--index", "a=x", "--index", "a=y"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("two indexes are named `a`"));
}
