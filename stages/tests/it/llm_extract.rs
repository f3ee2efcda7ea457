//! The extract stage with the LLM backend, against the local fake server: items and call
//! records, faults survived, failures recorded and retried, a killed run resumed without
//! asking again what was answered.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use flexstruct_pipeline::core::ids::sha256_hex;
use flexstruct_testkit::{FakeLlm, Reply, Request, items_from_target};

use crate::util::*;

/// A corpus of `docs` documents, each a few short paragraphs, chunked small.
fn corpus_index(dir: &Path, name: &str, docs: usize) -> PathBuf {
    let corpus = dir.join("corpus.jsonl");
    if !corpus.exists() {
        let lines: String = (0..docs)
            .map(|d| {
                let text = (0..4)
                    .map(|p| {
                        format!(
                            "Station {d} of the Kestrel Survey logged {p} readings. Ana Lind checked them on day {p}."
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n\n");
                serde_json::json!({"doc_id": format!("doc{d}"), "text": text}).to_string() + "\n"
            })
            .collect();
        std::fs::write(&corpus, lines).unwrap();
        std::fs::write(dir.join("small.toml"), "[index]\nbuckets = 4\n\n[chunk]\nct_min = 10\nct_max = 25\n").unwrap();
    }
    let index = dir.join(name);
    let config = dir.join("small.toml");
    let (ingest, chunk) = ingest_chunk(&index, &corpus, Some(&config));
    assert_eq!((ingest.code, chunk.code), (0, 0), "{}{}", ingest.stderr, chunk.stderr);
    index
}

fn llm_env(server: &FakeLlm, config: &Path) -> Vec<(String, String)> {
    vec![
        ("FLEXSTRUCT_CONFIG".into(), config.display().to_string()),
        ("FLEXSTRUCT_BACKENDS__ALL".into(), "llm".into()),
        ("FLEXSTRUCT_LLM__BASE_URL".into(), server.base_url()),
        ("FLEXSTRUCT_LLM__MODEL".into(), "fake-model".into()),
        ("FLEXSTRUCT_LLM__API_KEY_ENV".into(), "FAKE_LLM_KEY".into()),
        ("FAKE_LLM_KEY".into(), "sk-never-stored".into()),
        ("FLEXSTRUCT_LLM__MAX_CONCURRENCY".into(), "2".into()),
        ("FLEXSTRUCT_LLM__BACKOFF_INITIAL_MS".into(), "5".into()),
        ("FLEXSTRUCT_LLM__TIMEOUT_SECS".into(), "5".into()),
    ]
}

fn extract(index: &Path, env: &[(String, String)]) -> Run {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    run_env("extract", &["--index", index.to_str().unwrap()], &env)
}

/// Data files that a rerun must reproduce (logs and the cache left out).
fn tables(index: &Path) -> BTreeMap<String, String> {
    let mut files = data_files(index);
    files.retain(|k, _| {
        !k.starts_with("llm_calls") && !k.starts_with("llm_cache") && !k.rsplit('/').next().unwrap().starts_with('.')
    });
    files
}

#[test]
fn llm_items_are_located_and_every_call_is_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let index = corpus_index(tmp.path(), "index", 3);
    let server = FakeLlm::start(items_from_target);
    server
        .script([Reply::Status { code: 429, retry_after: Some(0.05) }, Reply::Status { code: 500, retry_after: None }]);
    let env = llm_env(&server, &tmp.path().join("small.toml"));
    let out = extract(&index, &env);
    assert_eq!(out.code, 0, "{}", out.stderr);

    let chunks = scalar(&index, "SELECT count(*) FROM chunks").as_i64().unwrap() as usize;
    assert_eq!(server.request_count(), chunks + 2);
    assert_eq!(scalar(&index, "SELECT count(*) FROM items WHERE extractor <> 'llm:fake-model'"), 0);
    assert_eq!(scalar(&index, "SELECT count(*) FROM items WHERE ref_start IS NULL"), 0);
    assert_eq!(
        scalar(
            &index,
            "SELECT count(*) FROM items i JOIN documents d USING (doc_id) \
                        WHERE substr(d.text, i.ref_start + 1, i.ref_end - i.ref_start) <> i.ref_text"
        ),
        0
    );
    let calls = query(&index, "SELECT status, count(*) AS n FROM llm_calls GROUP BY status ORDER BY status");
    let calls: Vec<String> = calls.iter().map(|r| format!("{}={}", r["status"].as_str().unwrap(), r["n"])).collect();
    assert_eq!(calls, ["http_429=1", "http_500=1", format!("ok={chunks}").as_str()]);
    // The key went to the server and nowhere else.
    assert!(server.requests().iter().all(|r| r.authorization.as_deref() == Some("Bearer sk-never-stored")));
    for (file, _) in data_files(&index) {
        let bytes = std::fs::read(index.join(&file)).unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains("sk-never-stored"), "{file}");
    }

    // A rerun asks nothing.
    let before = server.request_count();
    let again = extract(&index, &env);
    assert!(again.stderr.contains(" 0 done,"), "{}", again.stderr);
    assert_eq!(server.request_count(), before);
}

#[test]
fn failed_chunks_are_recorded_and_only_they_are_asked_again() {
    let tmp = tempfile::tempdir().unwrap();
    let index = corpus_index(tmp.path(), "index", 3);
    // Chunks that mention "day 2" get an answer that stays unreadable after the repair round.
    let broken = FakeLlm::start(|r: &Request| {
        if r.body["messages"][1]["content"]
            .as_str()
            .unwrap_or("")
            .rsplit("TARGET:")
            .next()
            .unwrap_or("")
            .contains("day 2")
        {
            Reply::content("no json, sorry")
        } else {
            items_from_target(r)
        }
    });
    let env = llm_env(&broken, &tmp.path().join("small.toml"));
    let out = extract(&index, &env);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let failed = scalar(&index, "SELECT count(*) FROM failures WHERE stage = 'extract' AND kind = 'unparseable'")
        .as_i64()
        .unwrap();
    assert!(failed > 0);
    assert!(out.stderr.contains("unreadable answer after a repair request"), "{}", out.stderr);

    // The endpoint is fixed: the rerun asks again for the failed chunks only.
    let fixed = FakeLlm::start(items_from_target);
    let out = extract(&index, &llm_env(&fixed, &tmp.path().join("small.toml")));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(fixed.request_count() as i64, failed);
    assert_eq!(scalar(&index, "SELECT count(*) FROM failures"), 0);
    let chunks_without_items = scalar(
        &index,
        "SELECT count(*) FROM chunks c LEFT JOIN items i USING (doc_id, chunk_idx) WHERE i.item_idx IS NULL",
    );
    assert_eq!(chunks_without_items, 0);
}

/// An extract run interrupted midway: a reference index extracted whole by a slow endpoint,
/// then a second index whose extract is started as a child (stderr as given) and waited for
/// until it has asked a few questions, however long a loaded machine takes to start it.
struct UnderWay {
    _tmp: tempfile::TempDir,
    server: FakeLlm,
    env: Vec<(String, String)>,
    reference: PathBuf,
    index: PathBuf,
    /// Requests of the reference run (the second index's are those after them: the endpoint is
    /// part of every fingerprint, so both use the same one).
    total: usize,
    child: std::process::Child,
}

fn extract_under_way(stderr: std::process::Stdio) -> UnderWay {
    let tmp = tempfile::tempdir().unwrap();
    let slow = |r: &Request| Reply::Slow { delay: Duration::from_millis(25), then: Box::new(items_from_target(r)) };
    let reference = corpus_index(tmp.path(), "reference", 24);
    let server = FakeLlm::start(slow);
    let env = llm_env(&server, &tmp.path().join("small.toml"));
    assert_eq!(extract(&reference, &env).code, 0);
    let total = server.request_count();

    let index = corpus_index(tmp.path(), "index", 24);
    let mut child = std::process::Command::new(bin("extract"));
    child.args(["--index", index.to_str().unwrap()]).stderr(stderr);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("FLEXSTRUCT_")) {
        child.env_remove(k);
    }
    let child = child.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str()))).spawn().unwrap();
    let started = std::time::Instant::now();
    while server.request_count() < total + 4 && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(5));
    }
    UnderWay { _tmp: tmp, server, env, reference, index, total, child }
}

#[test]
fn a_killed_run_resumes_without_asking_again_and_ends_with_the_same_tables() {
    let UnderWay { _tmp, server, env, reference, index, total, mut child } =
        extract_under_way(std::process::Stdio::null());
    child.kill().unwrap();
    child.wait().unwrap();
    let first: Vec<String> = server.requests()[total..].iter().map(|r| r.body.to_string()).collect();
    assert!(!first.is_empty() && first.len() < total, "the kill should land mid-run ({} of {total})", first.len());

    let out = extract(&index, &env);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let all: Vec<String> = server.requests()[total..].iter().map(|r| r.body.to_string()).collect();
    let asked_before: HashSet<&String> = first.iter().collect();
    let repeated = all[first.len()..].iter().filter(|b| asked_before.contains(b)).count();
    // Only requests that were still in flight when the run was killed (at most the concurrency
    // limit) can be asked again; everything answered came from the cache.
    assert!(repeated <= 2, "{repeated} requests were sent twice");
    assert_eq!(all.len() - repeated, total);
    assert_eq!(tables(&reference), tables(&index));
}

#[test]
fn a_run_sent_sigterm_stops_cleanly_and_a_rerun_does_the_rest() {
    // What Slurm sends before a time limit or a preemption, once the run is under way.
    let UnderWay { _tmp, server: _server, env, reference, index, child, .. } =
        extract_under_way(std::process::Stdio::piped());
    let sent = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("stopped by SIGTERM: the buckets finished are kept"), "{stderr}");
    // Nothing half-written is left: no temporary file anywhere in the index.
    let mut folders = vec![index.clone()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap().map(|e| e.unwrap().path()) {
            assert!(!entry.to_string_lossy().ends_with(".tmp"), "{} was left", entry.display());
            if entry.is_dir() {
                folders.push(entry);
            }
        }
    }
    // The rerun does the rest and ends with the tables of an uninterrupted run.
    let out = extract(&index, &env);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(tables(&reference), tables(&index));
}

#[test]
fn the_llm_writes_summaries_above_tau_s_and_relations_around_anchors() {
    let tmp = tempfile::tempdir().unwrap();
    let index = corpus_index(tmp.path(), "index", 3);
    let server = FakeLlm::start(flexstruct_testkit::pipeline_responder);
    let mut env = llm_env(&server, &tmp.path().join("small.toml"));
    env.push(("FLEXSTRUCT_HYPERGRAPH__TAU_S".into(), "1".into()));
    env.push(("FLEXSTRUCT_GRAPH__TAU_E".into(), "1".into()));
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let i = index.to_str().unwrap();
    for stage in ["extract", "hypergraph", "graph"] {
        let out = run_env(stage, &["--index", i], &env_refs);
        assert_eq!(out.code, 0, "{stage}: {}", out.stderr);
    }
    assert_eq!(
        scalar(&index, "SELECT count(*) FROM entities WHERE hyperdegree > 1 AND summary NOT LIKE 'Summary of %'"),
        0
    );
    assert_eq!(
        scalar(&index, "SELECT count(*) FROM entities WHERE hyperdegree <= 1 AND summary LIKE 'Summary of %'"),
        0
    );
    assert!(scalar(&index, "SELECT count(*) FROM edges WHERE text LIKE '% is related to %'").as_i64().unwrap() > 0);
    assert_eq!(
        scalar(&index, "SELECT count(*) FROM edges e LEFT JOIN hyperedges h USING (hyperedge_id) WHERE h.text IS NULL"),
        0
    );
    let purposes = query(&index, "SELECT DISTINCT stage, purpose FROM llm_calls ORDER BY stage");
    let purposes: Vec<String> = purposes
        .iter()
        .map(|r| format!("{}/{}", r["stage"].as_str().unwrap(), r["purpose"].as_str().unwrap()))
        .collect();
    assert_eq!(purposes, ["extract/items", "graph/relations", "hypergraph/summary"]);
}

#[test]
fn changing_a_backend_reruns_exactly_the_stages_it_affects() {
    let tmp = tempfile::tempdir().unwrap();
    let index = corpus_index(tmp.path(), "index", 3);
    let server = FakeLlm::start(flexstruct_testkit::pipeline_responder);
    let with = |backends: &[(&str, &str)]| {
        let mut env = llm_env(&server, &tmp.path().join("small.toml"));
        env.retain(|(k, _)| k != "FLEXSTRUCT_BACKENDS__ALL");
        env.push(("FLEXSTRUCT_BACKENDS__ALL".into(), "rules".into()));
        env.push(("FLEXSTRUCT_HYPERGRAPH__TAU_S".into(), "1".into()));
        env.push(("FLEXSTRUCT_GRAPH__TAU_E".into(), "1".into()));
        env.extend(backends.iter().map(|(k, v)| (format!("FLEXSTRUCT_BACKENDS__{k}"), (*v).to_owned())));
        env
    };
    let i = index.to_str().unwrap();
    // Which stages do work under `env`: a stage that is up to date reports " 0 done,".
    let worked = |env: &[(String, String)]| -> Vec<&'static str> {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        ["extract", "hypergraph", "graph"]
            .into_iter()
            .filter(|stage| {
                let out = run_env(stage, &["--index", i], &env);
                assert_eq!(out.code, 0, "{stage}: {}", out.stderr);
                !out.stderr.contains(" 0 done,")
            })
            .collect()
    };
    // Everything on the rules (with an [llm] section present): no request is sent.
    assert_eq!(worked(&with(&[])), ["extract", "hypergraph", "graph"]);
    assert_eq!(server.request_count(), 0);
    assert!(worked(&with(&[])).is_empty());
    // Summaries on the LLM: extraction is untouched; the hypergraph reruns, and the graph, whose
    // input it is.
    assert_eq!(worked(&with(&[("SUMMARIES", "llm")])), ["hypergraph", "graph"]);
    assert!(scalar(&index, "SELECT count(*) FROM entities WHERE backend = 'llm:fake-model'").as_i64().unwrap() > 0);
    assert_eq!(scalar(&index, "SELECT count(DISTINCT backend) FROM edges"), 1);
    // Relations too: only the graph reruns, and its rows say who wrote them.
    assert_eq!(worked(&with(&[("SUMMARIES", "llm"), ("RELATIONS", "llm")])), ["graph"]);
    assert_eq!(scalar(&index, "SELECT count(*) FROM edges WHERE backend <> 'llm:fake-model'"), 0);
    // Another model behind the same endpoint reruns what it wrote, and nothing else.
    let mut other = with(&[("SUMMARIES", "llm"), ("RELATIONS", "llm")]);
    other.push(("FLEXSTRUCT_LLM__MODEL".into(), "fake-model-2".into()));
    assert_eq!(worked(&other), ["hypergraph", "graph"]);
    assert_eq!(scalar(&index, "SELECT count(*) FROM items WHERE extractor <> 'rules'"), 0);
    let purposes = query(&index, "SELECT DISTINCT purpose FROM llm_calls ORDER BY purpose");
    let purposes: Vec<&str> = purposes.iter().map(|r| r["purpose"].as_str().unwrap()).collect();
    assert_eq!(purposes, ["relations", "summary"]);
}

#[test]
fn a_bucket_the_endpoint_fails_is_recorded_and_the_others_are_written() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c.jsonl");
    let lines: String = (0..8)
        .map(|i| {
            let word = if i == 5 { "poison" } else { "plain" };
            serde_json::json!({"doc_id": format!("d{i}"), "text": format!("Mara Vole wrote report {i}. It was {word}.")})
                .to_string()
                + "\n"
        })
        .collect();
    std::fs::write(&corpus, lines).unwrap();
    std::fs::write(tmp.path().join("four.toml"), "[index]\nbuckets = 4\n").unwrap();
    let config = tmp.path().join("four.toml");
    let index = tmp.path().join("index");
    let i = index.to_str().unwrap();
    let c = config.to_str().unwrap();
    assert_eq!(run("ingest", &["--index", i, "--config", c, "--corpus", corpus.to_str().unwrap()]).code, 0);
    for stage in ["chunk", "extract", "hypergraph", "graph"] {
        assert_eq!(run(stage, &["--index", i, "--config", c]).code, 0, "{stage}");
    }
    // The endpoint refuses every batch that holds the poisoned document's texts.
    let server = FakeLlm::start(|r: &Request| {
        if r.body["input"].to_string().contains("poison") {
            Reply::Status { code: 400, retry_after: None }
        } else {
            flexstruct_testkit::embeddings_responder(r)
        }
    });
    let url = server.base_url();
    let env = [
        ("FLEXSTRUCT_EMBED__MODEL", "text-embedding-fake"),
        ("FLEXSTRUCT_EMBED__BASE_URL", url.as_str()),
        ("FLEXSTRUCT_EMBED__API_KEY_ENV", ""),
    ];
    let out = run_env("embed", &["--index", i, "--config", c], &env);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let failed = query(&index, "SELECT DISTINCT doc_id, kind FROM failures WHERE stage = 'embed' ORDER BY doc_id");
    assert!(failed.iter().any(|f| f["doc_id"] == "d5"), "{failed:?}");
    assert!(failed.iter().all(|f| f["kind"] == "llm_error"), "{failed:?}");
    let written = count_parts(&index.join("embeddings"));
    assert_eq!(written, 3, "the three other buckets are written");
    let embedded = scalar(&index, "SELECT count(DISTINCT doc_id) FROM embeddings").as_i64().unwrap();
    assert_eq!(embedded as usize + failed.len(), 8);

    // The endpoint recovers: the rerun embeds the failed bucket only, and nothing is failing.
    let healthy = FakeLlm::start(flexstruct_testkit::embeddings_responder);
    let url = healthy.base_url();
    let env = [
        ("FLEXSTRUCT_EMBED__MODEL", "text-embedding-fake"),
        ("FLEXSTRUCT_EMBED__BASE_URL", url.as_str()),
        ("FLEXSTRUCT_EMBED__API_KEY_ENV", ""),
    ];
    let out = run_env("embed", &["--index", i, "--config", c], &env);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(count_parts(&index.join("embeddings")), 4);
    assert_eq!(scalar(&index, "SELECT count(*) FROM failures"), 0);
}

/// The corpus of eight short documents built through the graph stage in four buckets, ready to
/// embed against an endpoint.
fn before_embed(tmp: &Path) -> (PathBuf, PathBuf) {
    let corpus = tmp.join("c.jsonl");
    let lines: String = (0..8)
        .map(|i| {
            let text = format!("Mara Vole wrote report {i}. It was read by Ada Lind. Lind kept copy {i}.");
            serde_json::json!({"doc_id": format!("d{i}"), "text": text}).to_string() + "\n"
        })
        .collect();
    std::fs::write(&corpus, lines).unwrap();
    let config = tmp.join("four.toml");
    std::fs::write(&config, "[index]\nbuckets = 4\n").unwrap();
    let index = tmp.join("index");
    let (i, c) = (index.to_str().unwrap(), config.to_str().unwrap());
    assert_eq!(run("ingest", &["--index", i, "--config", c, "--corpus", corpus.to_str().unwrap()]).code, 0);
    for stage in ["chunk", "extract", "hypergraph", "graph"] {
        assert_eq!(run(stage, &["--index", i, "--config", c]).code, 0, "{stage}");
    }
    (index, config)
}

#[test]
fn an_embedding_endpoint_that_never_answers_is_given_up_within_its_timeout_and_deadline() {
    // Before: [embed] refused timeout_secs and max_retries, and a server that accepted and never
    // answered held each batch for the client's 120 s times seven attempts.
    let tmp = tempfile::tempdir().unwrap();
    let (index, config) = before_embed(tmp.path());
    let (i, c) = (index.to_str().unwrap(), config.to_str().unwrap());
    // Answers the dimension probe, then nothing in time.
    let silent = FakeLlm::start(|r: &Request| {
        if r.body["input"].to_string().contains("dimension probe") {
            flexstruct_testkit::embeddings_responder(r)
        } else {
            Reply::Slow { delay: Duration::from_secs(30), then: Box::new(flexstruct_testkit::embeddings_responder(r)) }
        }
    });
    let url = silent.base_url();
    let mut env = vec![
        ("FLEXSTRUCT_EMBED__MODEL", "text-embedding-fake"),
        ("FLEXSTRUCT_EMBED__BASE_URL", url.as_str()),
        ("FLEXSTRUCT_EMBED__API_KEY_ENV", ""),
        ("FLEXSTRUCT_EMBED__TIMEOUT_SECS", "1"),
        ("FLEXSTRUCT_EMBED__MAX_RETRIES", "0"),
    ];
    let started = std::time::Instant::now();
    let out = run_env("embed", &["--index", i, "--config", c], &env);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(started.elapsed() < Duration::from_secs(25), "{:?}", started.elapsed());
    let failed = scalar(&index, "SELECT count(*) FROM failures WHERE stage = 'embed' AND kind = 'llm_error'");
    assert!(failed.as_i64().unwrap() >= 1, "{failed}");

    // A deadline for the whole run: answers that come, slowly, one at a time, stop at it.
    let slow = FakeLlm::start(|r: &Request| {
        if r.body["input"].to_string().contains("dimension probe") {
            flexstruct_testkit::embeddings_responder(r)
        } else {
            Reply::Slow {
                delay: Duration::from_millis(400),
                then: Box::new(flexstruct_testkit::embeddings_responder(r)),
            }
        }
    });
    let url = slow.base_url();
    env[1] = ("FLEXSTRUCT_EMBED__BASE_URL", url.as_str());
    env[3] = ("FLEXSTRUCT_EMBED__TIMEOUT_SECS", "10");
    env.extend([
        ("FLEXSTRUCT_EMBED__DEADLINE_SECS", "2"),
        ("FLEXSTRUCT_EMBED__BATCH_SIZE", "1"),
        ("FLEXSTRUCT_EMBED__MAX_CONCURRENCY", "1"),
    ]);
    let started = std::time::Instant::now();
    let out = run_env("embed", &["--index", i, "--config", c, "--threads", "1"], &env);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(started.elapsed() < Duration::from_secs(25), "{:?}", started.elapsed());
    let messages = query(&index, "SELECT DISTINCT message FROM failures WHERE stage = 'embed'");
    assert!(
        messages.iter().any(|m| m["message"].as_str().unwrap().contains("deadline of 2 s (embed.deadline_secs)")),
        "{messages:?}"
    );
}

fn count_parts(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_str().unwrap().starts_with("part-"))
        .count()
}

/// Sentences of the TARGET block of an extraction request.
fn target_sentences(r: &Request) -> usize {
    let user = r.last_user_message();
    let target = user.rsplit("TARGET:\n<<<\n").next().unwrap_or("");
    target.matches(". ").count() + usize::from(target.trim_end_matches("\n>>>").trim_end().ends_with('.'))
}

/// An answer cut at the token limit: the first half of the full answer, `finish_reason: length`.
fn cut_answer(r: &Request) -> Reply {
    let Reply::Content { text, .. } = items_from_target(r) else { unreachable!() };
    Reply::Cut(text[..text.len() / 2].to_owned())
}

#[test]
fn an_answer_cut_at_the_token_limit_is_asked_again_and_never_taken_as_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let reference = corpus_index(tmp.path(), "reference", 3);
    let config = tmp.path().join("small.toml");
    let full = FakeLlm::start(items_from_target);
    assert_eq!(extract(&reference, &llm_env(&full, &config)).code, 0);
    let items = |index: &Path| {
        query(index, "SELECT doc_id, text, ref_text, ref_start FROM items ORDER BY doc_id, ref_start, text")
    };
    let expected = items(&reference);
    assert!(expected.len() > 6);

    // Answers of more than one item are cut at 2,048 tokens and fit in twice the room.
    let index = corpus_index(tmp.path(), "more-room", 3);
    let server = FakeLlm::start(|r: &Request| {
        if target_sentences(r) > 1 && r.body["max_tokens"] == 2048 { cut_answer(r) } else { items_from_target(r) }
    });
    let out = extract(&index, &llm_env(&server, &config));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(items(&index), expected);
    let cut = scalar(&index, "SELECT count(*) FROM llm_calls WHERE status = 'length'").as_i64().unwrap();
    assert!(cut > 0);
    assert_eq!(
        scalar(&index, "SELECT count(*) FROM llm_calls WHERE purpose = 'items_more_room'").as_i64().unwrap(),
        cut
    );
    // The same work again with that cache (a resumed run) asks nothing: the cuts are remembered
    // (temperature 0), so it goes straight to more room, whose answers are cached.
    let again = corpus_index(tmp.path(), "more-room-again", 3);
    crate::query::copy_dir(&index.join("llm_cache"), &again.join("llm_cache"));
    let asked = server.request_count();
    assert_eq!(extract(&again, &llm_env(&server, &config)).code, 0);
    assert_eq!((items(&again), server.request_count()), (expected.clone(), asked));
    assert_eq!(
        scalar(&again, "SELECT count(*) FROM llm_calls WHERE status = 'length' AND cached").as_i64().unwrap(),
        cut
    );

    // Whatever the room, only one item fits: the chunk is asked in halves.
    let index = corpus_index(tmp.path(), "halves", 3);
    let server =
        FakeLlm::start(|r: &Request| if target_sentences(r) > 1 { cut_answer(r) } else { items_from_target(r) });
    let out = extract(&index, &llm_env(&server, &config));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(items(&index), expected);
    assert!(scalar(&index, "SELECT count(*) FROM llm_calls WHERE purpose = 'items_half'").as_i64().unwrap() > 0);

    // Nothing fits: every chunk is a `truncated` failure with no items, never a shorter answer.
    let index = corpus_index(tmp.path(), "never", 3);
    let server = FakeLlm::start(cut_answer);
    let out = extract(&index, &llm_env(&server, &config));
    assert_eq!(out.code, 1, "{}", out.stderr);
    let chunks = scalar(&index, "SELECT count(*) FROM chunks");
    assert_eq!(scalar(&index, "SELECT count(*) FROM failures WHERE kind = 'truncated'"), chunks);
    assert_eq!(scalar(&index, "SELECT count(*) FROM items"), 0);
    assert!(out.stderr.contains("cut off at max_tokens = 4096"), "{}", out.stderr);
    // The failed units are asked again on the next run, not answered by their remembered cuts.
    let asked = server.request_count();
    assert_eq!(extract(&index, &llm_env(&server, &config)).code, 1);
    assert!(server.request_count() > asked);
}

#[test]
fn spans_are_the_documents_own_text_or_have_no_offsets_and_edges_never_guess_their_fact() {
    let tmp = tempfile::tempdir().unwrap();
    let index = corpus_index(tmp.path(), "index", 3);
    // The model rewrites the case and spacing of every other span, invents one item per chunk,
    // writes a placeholder item, copies the prompt's example (as written, and without its period
    // in lowercase) and a blank entity name; for the chunks of day 3 it writes nothing but the
    // placeholder and the copies.
    let example = flexstruct_pipeline::llm::prompts::ITEMS_EXAMPLE.items[0];
    let (example, example_span) = (example.statement, example.span);
    let server = FakeLlm::start(move |r: &Request| {
        let user = r.last_user_message();
        if user.starts_with("ANCHOR: ") {
            // Relations citing a fact that was never given, and one to nobody in the document.
            let Reply::Content { text, .. } = flexstruct_testkit::pipeline_responder(r) else { unreachable!() };
            let mut answer: serde_json::Value =
                serde_json::from_str(&text.replace("\"fact\":1", "\"fact\":99")).unwrap();
            let unknown =
                serde_json::json!({"source": "Nobody Known", "target": "Nowhere", "relation": "x", "fact": 1});
            answer["relations"].as_array_mut().unwrap().push(unknown);
            return Reply::content(answer.to_string());
        }
        if user.starts_with("ENTITY: ") {
            return flexstruct_testkit::pipeline_responder(r);
        }
        let Reply::Content { text, .. } = items_from_target(r) else { unreachable!() };
        let mut answer: serde_json::Value = serde_json::from_str(&text).unwrap();
        let junk = [
            serde_json::json!({"statement": "...", "span": "...", "entities": ["..."]}),
            serde_json::json!({"statement": example, "span": example_span, "entities": []}),
            // A copy that drops the final period and changes case is still the example.
            serde_json::json!({"statement": example.trim_end_matches('.').to_lowercase(), "span": "", "entities": []}),
        ];
        if user.rsplit("TARGET:").next().unwrap().contains("day 3") {
            return Reply::content(serde_json::json!({ "items": junk }).to_string());
        }
        let items = answer["items"].as_array_mut().unwrap();
        for (k, item) in items.iter_mut().enumerate() {
            if k % 2 == 1 {
                let span = item["span"].as_str().unwrap().to_uppercase().replace(' ', "  ");
                item["span"] = span.into();
            }
        }
        items[0]["entities"].as_array_mut().unwrap().push(" - ".into());
        items
            .push(serde_json::json!({"statement": "Invented.", "span": "A sentence that is nowhere.", "entities": []}));
        items.extend(junk);
        Reply::content(answer.to_string())
    });
    let mut env = llm_env(&server, &tmp.path().join("small.toml"));
    env.push(("FLEXSTRUCT_GRAPH__TAU_E".into(), "1".into()));
    let out = extract(&index, &env);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let chunks = scalar(&index, "SELECT count(*) FROM chunks").as_i64().unwrap();
    let day3 = scalar(&index, "SELECT count(*) FROM chunks WHERE text LIKE '%day 3%'").as_i64().unwrap();
    assert!(day3 > 0 && day3 < chunks);
    let answered = chunks - day3;
    // Nothing the model wrote is dropped without a count.
    for expected in [
        format!("unlocated: {answered}"),
        format!("dropped_empty: {chunks}"),
        format!("dropped_example: {}", 2 * chunks),
        format!("dropped_entities: {answered}"),
        format!("chunks_without_items: {day3}"),
    ] {
        assert!(out.stderr.contains(&expected), "{expected}: {}", out.stderr);
    }
    assert_eq!(scalar(&index, "SELECT count(*) FROM items WHERE ref_start IS NULL").as_i64().unwrap(), answered);
    assert_eq!(
        scalar(&index, "SELECT count(*) FROM items WHERE text = '...' OR text LIKE 'Building of the Varden%'"),
        0
    );
    assert_eq!(scalar(&index, "SELECT count(*) FROM items i WHERE array_has(i.entities, ' - ')"), 0);
    // Every located span is the document's own text at its offsets, case and spacing included.
    let located = scalar(&index, "SELECT count(*) FROM items WHERE ref_start IS NOT NULL").as_i64().unwrap();
    assert!(located > chunks);
    let equal = "SELECT count(*) FROM items i JOIN documents d USING (doc_id) \
                 WHERE substr(d.text, i.ref_start + 1, i.ref_end - i.ref_start) = i.ref_text";
    assert_eq!(scalar(&index, equal).as_i64().unwrap(), located);
    assert_eq!(
        scalar(&index, "SELECT count(*) FROM items WHERE ref_text LIKE '%  %' OR ref_text = upper(ref_text)"),
        0
    );

    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let i = index.to_str().unwrap();
    assert_eq!(run_env("hypergraph", &["--index", i], &env_refs).code, 0);
    let graph = run_env("graph", &["--index", i], &env_refs);
    assert_eq!(graph.code, 0, "{}", graph.stderr);
    let edges = scalar(&index, "SELECT count(*) FROM edges").as_i64().unwrap();
    assert!(edges > 0);
    assert_eq!(scalar(&index, "SELECT count(*) FROM edges WHERE hyperedge_id IS NULL").as_i64().unwrap(), edges);
    assert!(graph.stderr.contains(&format!("unlinked: {edges}")), "{}", graph.stderr);
    // Every relations answer named one pair that is not in the document: each is counted.
    let asked = server.requests().iter().filter(|r| r.last_user_message().starts_with("ANCHOR: ")).count();
    assert!(asked > 0);
    assert!(graph.stderr.contains(&format!("unresolved_ends: {asked}")), "{}", graph.stderr);
}

/// The stand-in LLM server, running until dropped.
pub(crate) struct Standin {
    child: std::process::Child,
    pub(crate) url: String,
    stats: PathBuf,
}

impl Standin {
    fn start(dir: &Path, faults: &str) -> Standin {
        Standin::start_with(dir, faults, &[])
    }

    /// The stand-in with a share of faults and more arguments.
    pub(crate) fn start_with(dir: &Path, faults: &str, more: &[&str]) -> Standin {
        // Files of their own per arguments (which may hold paths): a hash of them in the name.
        let name = format!("{faults}-{}", &sha256_hex(more.join("\0").as_bytes())[..16]);
        let (url_file, stats) = (dir.join(format!("url-{name}")), dir.join(format!("stats-{name}.json")));
        let child = std::process::Command::new(bin("standin-llm"))
            .args(["--faults", faults, "--slow-seconds", "1.5", "--url-file", url_file.to_str().unwrap()])
            .args(["--stats-file", stats.to_str().unwrap()])
            .args(more)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Owned at once, so that it is stopped whatever happens next.
        let mut standin = Standin { child, url: String::new(), stats };
        for _ in 0..100 {
            if let Ok(url) = std::fs::read_to_string(&url_file) {
                standin.url = url.trim().to_owned();
            }
            if !standin.url.is_empty() {
                return standin;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the stand-in did not start");
    }
}

impl Drop for Standin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every construction stage through the LLM path against `standin`; the stages run again once
/// when a unit failed. Returns whether the second round was needed.
fn llm_build(index: &Path, corpus: &Path, standin: &Standin) -> bool {
    let url = standin.url.as_str();
    let env = [
        ("FLEXSTRUCT_LLM__BASE_URL", url),
        ("FLEXSTRUCT_LLM__MODEL", "standin"),
        ("FLEXSTRUCT_LLM__API_KEY_ENV", ""),
        ("FLEXSTRUCT_LLM__TIMEOUT_SECS", "1"),
        ("FLEXSTRUCT_LLM__BACKOFF_INITIAL_MS", "5"),
        ("FLEXSTRUCT_BACKENDS__EXTRACT", "llm"),
        ("FLEXSTRUCT_BACKENDS__SUMMARIES", "llm"),
        ("FLEXSTRUCT_BACKENDS__RELATIONS", "llm"),
        ("FLEXSTRUCT_HYPERGRAPH__TAU_S", "2"),
        ("FLEXSTRUCT_EMBED__MODEL", "standin-embeddings"),
        ("FLEXSTRUCT_EMBED__BASE_URL", url),
        ("FLEXSTRUCT_EMBED__API_KEY_ENV", ""),
    ];
    let i = index.to_str().unwrap();
    let round = || {
        let mut failed = false;
        for stage in ["ingest", "chunk", "extract", "hypergraph", "graph", "embed", "cluster", "merge"] {
            let mut args = vec!["--index", i, "-q"];
            if stage == "ingest" {
                args.extend(["--corpus", corpus.to_str().unwrap()]);
            }
            let out = run_env(stage, &args, &env);
            assert!(out.code <= 1, "{stage}: {}", out.stderr);
            failed |= out.code == 1;
        }
        failed
    };
    let again = round();
    if again {
        assert!(!round(), "a second round still failed: {:?}", query(index, "SELECT * FROM failures"));
    }
    again
}

#[test]
fn the_llm_path_under_faults_builds_the_same_kb_as_without_them() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = crate::kb::sample_corpus();
    let clean = Standin::start(tmp.path(), "0");
    let reference = tmp.path().join("clean");
    assert!(!llm_build(&reference, &corpus, &clean), "no fault, no failure");
    // Seed 3 leaves failed units after the first round (the stand-in draws faults by the
    // requests' user messages, so editing our instructions does not move them).
    let faulty = Standin::start_with(tmp.path(), "0.5", &["--seed", "3"]);
    let index = tmp.path().join("faulty");
    // Units fail in the first round (seeded faults: a chunk's answer unreadable twice), so the
    // second round's retries must reach the kb: a retried bucket's outputs once carried the
    // fingerprint of complete ones, and the stages after it skipped their buckets.
    assert!(llm_build(&index, &corpus, &faulty), "the first round should leave failed units to retry");
    let stats: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&faulty.stats).unwrap()).unwrap();
    let faults: u64 = stats.iter().filter(|(k, _)| k.starts_with("fault_")).map(|(_, v)| v.as_u64().unwrap()).sum();
    assert!(faults >= 10, "{stats:?}");
    // Nothing lost, nothing invented: every kb table the same, no failure left.
    assert!(crate::kb::kb_dump(&index) == crate::kb::kb_dump(&reference), "the kbs differ (faults: {stats:?})");
    assert_eq!(scalar(&index, "SELECT count(*) FROM failures"), 0);
    assert!(scalar(&reference, "SELECT count(*) FROM kb.edges").as_i64().unwrap() > 0);

    // A reasoning model (thinking before every answer, inline or apart, JSON and an `Answer:`
    // line in it) builds the same kb and gives the same answers: its thinking is never read.
    let thinker = Standin::start_with(tmp.path(), "0", &["--reasoning"]);
    let reasoned = tmp.path().join("reasoning");
    assert!(!llm_build(&reasoned, &corpus, &thinker), "no fault, no failure");
    assert!(crate::kb::kb_dump(&reasoned) == crate::kb::kb_dump(&reference), "the reasoning model's kb differs");
    let answers = |index: &Path, standin: &Standin| {
        let env = [
            ("FLEXSTRUCT_LLM__BASE_URL", standin.url.as_str()),
            ("FLEXSTRUCT_LLM__MODEL", "standin"),
            ("FLEXSTRUCT_LLM__API_KEY_ENV", ""),
            ("FLEXSTRUCT_BACKENDS__ANSWERS", "llm"),
            ("FLEXSTRUCT_EMBED__MODEL", "standin-embeddings"),
            ("FLEXSTRUCT_EMBED__BASE_URL", standin.url.as_str()),
            ("FLEXSTRUCT_EMBED__API_KEY_ENV", ""),
        ];
        let questions = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/sample/questions.jsonl");
        let out = run_env(
            "query",
            &["--index", index.to_str().unwrap(), "--questions", questions.to_str().unwrap(), "--jsonl"],
            &env,
        );
        assert_eq!(out.code, 0, "{}", out.stderr);
        let answers: Vec<(String, String)> = out
            .stdout
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .map(|a| {
                (a["answer"].as_str().unwrap().to_owned(), a["short_answer"].as_str().unwrap_or_default().to_owned())
            })
            .collect();
        assert!(
            answers.iter().all(|(a, short)| !a.is_empty() && !a.contains("first guess") && short != "unknown"),
            "{answers:?}"
        );
        answers
    };
    assert_eq!(answers(&reasoned, &thinker), answers(&reference, &clean));

    // A model with no calibrated thresholds (the stand-in's `/v1/embeddings`) gets thresholds
    // derived from its own vectors, and retrieval finds evidence with them.
    let derived = query(&reference, "SELECT unit, tau FROM kb.thresholds WHERE model = 'standin-embeddings'");
    assert_eq!(derived.len(), 3, "{derived:?}");
    assert!(derived.iter().all(|r| r["tau"].as_f64().unwrap() < 0.9), "{derived:?}");
    let url = clean.url.as_str();
    let env = [
        ("FLEXSTRUCT_EMBED__MODEL", "standin-embeddings"),
        ("FLEXSTRUCT_EMBED__BASE_URL", url),
        ("FLEXSTRUCT_EMBED__API_KEY_ENV", ""),
    ];
    let question = "When was the Kestrel Valley Water Compact signed?";
    for mode in ["hybrid", "hypergraph"] {
        let out =
            run_env("query", &["--index", reference.to_str().unwrap(), "--mode", mode, "--show", "3", question], &env);
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(out.stdout.contains("[1]") && !out.stdout.contains("note: no "), "{mode}: {}", out.stdout);
    }
    // Edges and chunks of the stand-in are alike among themselves (relations around one anchor
    // quote the same fact; bag-of-words vectors of long chunks share their common words), so
    // their derived thresholds are high: a question that passes none gets evidence from nowhere
    // else in these modes, and the answer says why.
    for mode in ["graph", "chunks"] {
        let out = run_env("query", &["--index", reference.to_str().unwrap(), "--mode", mode, question], &env);
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(out.stdout.contains("[1]") || out.stdout.contains("note: no "), "{mode}: {}", out.stdout);
    }
    assert!(scalar(&reference, "SELECT count(*) FROM llm_calls WHERE stage = 'hypergraph'").as_i64().unwrap() > 0);
}
