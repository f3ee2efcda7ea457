//! One regression test per defect of the red-team run (concurrent runs, killed runs, odd paths,
//! Unicode, expensive SQL, closed pipes, bad settings), each named after what must hold.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::kb::{ENV, build, sample_corpus};
use crate::query::copy_dir;
use crate::util::*;

/// A JSON-lines corpus of documents `first..first + n`.
fn numbered_corpus(path: &Path, first: usize, n: usize) -> PathBuf {
    let lines: String = (first..first + n)
        .map(|i| {
            serde_json::json!({"doc_id": format!("d{i}"), "text": format!("Document {i} says {i}.")}).to_string() + "\n"
        })
        .collect();
    std::fs::write(path, lines).unwrap();
    path.to_owned()
}

fn count(index: &Path, sql: &str) -> i64 {
    scalar(index, sql).as_i64().unwrap()
}

fn spawn(name: &str, args: &[&str], env: &[(&str, &str)]) -> std::process::Child {
    let mut cmd = Command::new(bin(name));
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("FLEXSTRUCT_")) {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied()).spawn().unwrap()
}

fn finish(child: std::process::Child) -> Run {
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn concurrent_ingests_of_one_index_lose_no_document() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("four.toml");
    std::fs::write(&config, "[index]\nbuckets = 4\n").unwrap();
    let index = tmp.path().join("index");
    let (c, i) = (config.to_str().unwrap(), index.to_str().unwrap());
    // The index exists first, so both runs race on its buckets rather than on its creation.
    let seed = numbered_corpus(&tmp.path().join("seed.jsonl"), 9000, 1);
    assert_eq!(run("ingest", &["--index", i, "--config", c, "--corpus", seed.to_str().unwrap()]).code, 0);
    for round in 0..3 {
        let halves: Vec<PathBuf> = (0..2)
            .map(|h| numbered_corpus(&tmp.path().join(format!("half{round}{h}.jsonl")), round * 500 + h * 250, 250))
            .collect();
        let children: Vec<_> = halves
            .iter()
            .map(|h| spawn("ingest", &["--index", i, "--config", c, "-q", "--corpus", h.to_str().unwrap()], &[]))
            .collect();
        for child in children {
            let out = finish(child);
            assert_eq!(out.code, 0, "{}", out.stderr);
        }
        assert_eq!(count(&index, "SELECT count(*) FROM documents"), 1 + (round as i64 + 1) * 500);
    }
}

#[test]
fn an_index_path_with_glob_characters_is_taken_literally() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("idx[1]*?");
    build(&index, &sample_corpus(), false);
    assert!(count(&index, "SELECT count(*) FROM chunks") > 0);
    let hyperedges = count(&index, "SELECT count(*) FROM hyperedges");
    assert!(hyperedges > 0);
    assert_eq!(count(&index, "SELECT count(*) FROM kb.hyperedges"), hyperedges);
    let question = "When was the Kestrel Valley Water Compact signed?";
    let q = run_env("query", &["--index", index.to_str().unwrap(), "--show", "3", question], &ENV);
    assert_eq!(q.code, 0, "{}", q.stderr);
    assert!(q.stdout.contains("14 May 2009"), "no evidence: {}", q.stdout);
}

/// The sample corpus and a copy of it without one document, both built (hashing vectors).
/// The sample's index, and the index of the sample with its first document edited (same
/// document, so the same bucket, other rows).
fn two_kbs(dir: &Path) -> (PathBuf, PathBuf) {
    let full = dir.join("full");
    build(&full, &sample_corpus(), false);
    let edited = dir.join("corpus");
    std::fs::create_dir_all(&edited).unwrap();
    let mut files: Vec<_> = std::fs::read_dir(sample_corpus()).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    for f in &files {
        std::fs::copy(f, edited.join(f.file_name().unwrap())).unwrap();
    }
    let first = edited.join(files[0].file_name().unwrap());
    let text = std::fs::read_to_string(&first).unwrap();
    std::fs::write(&first, text + "\n\nThe archive was moved to Harlow in 2020 by Ines Varga.\n").unwrap();
    let other = dir.join("other");
    build(&other, &edited, false);
    (full, other)
}

#[test]
fn a_kb_written_by_an_interrupted_merge_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (full, other) = two_kbs(tmp.path());
    // What a merge killed after writing two tables of the edited document's bucket leaves: the
    // rest is of the last merge.
    let full_parts = data_files(&full);
    let changed: Vec<String> = data_files(&other)
        .into_iter()
        .filter(|(k, v)| k.starts_with("kb/entities/part-") && full_parts.get(k) != Some(v))
        .map(|(k, _)| k.rsplit('/').next().unwrap().to_owned())
        .collect();
    assert_eq!(changed.len(), 1, "{changed:?}");
    for table in ["kb/entities", "kb/hyperedges"] {
        std::fs::copy(other.join(table).join(&changed[0]), full.join(table).join(&changed[0])).unwrap();
    }
    let q = run_env(
        "query",
        &["--index", full.to_str().unwrap(), "When was the Kestrel Valley Water Compact signed?"],
        &ENV,
    );
    assert_eq!(q.code, 2, "{}", q.stderr);
    assert!(q.stderr.contains("mixes the output of different merges"), "{}", q.stderr);
    assert!(q.stderr.contains(&format!("[kb/entities, kb/hyperedges ({})]", changed[0])), "{}", q.stderr);
    assert!(q.stderr.contains("re-run `make merge`"), "{}", q.stderr);
    // Merging again repairs it.
    let m = run_env("merge", &["--index", full.to_str().unwrap()], &ENV);
    assert_eq!(m.code, 0, "{}", m.stderr);
    let q = run_env(
        "query",
        &["--index", full.to_str().unwrap(), "When was the Kestrel Valley Water Compact signed?"],
        &ENV,
    );
    assert_eq!(q.code, 0, "{}", q.stderr);
}

#[test]
fn a_query_waits_while_a_merge_writes_the_kb() {
    use flexstruct_pipeline::io::Index;
    use flexstruct_pipeline::io::lock::{LockName, exclusive};
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    build(&index, &sample_corpus(), false);
    let ask = || {
        spawn("query", &["--index", index.to_str().unwrap(), "When was the Kestrel Valley Water Compact signed?"], &ENV)
    };
    // Unhindered, the query ends; how long it takes bounds the wait below.
    let started = Instant::now();
    let free = finish(ask());
    assert_eq!(free.code, 0, "{}", free.stderr);
    let alone = started.elapsed();
    // This test holds the kb lock as a merge does while it writes: the query is still waiting
    // well after it would have ended, and answers once the lock is released.
    let writer = exclusive(&Index::open(&index).unwrap(), LockName::Kb).unwrap();
    let mut child = ask();
    std::thread::sleep((alone * 3).max(Duration::from_millis(1500)));
    assert!(child.try_wait().unwrap().is_none(), "the query ended while a merge held the kb");
    drop(writer);
    let out = finish(child);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout, free.stdout);
    let sql = spawn("sql", &["--index", index.to_str().unwrap(), "SELECT count(*) AS n FROM kb.entities"], &[]);
    assert_eq!(finish(sql).code, 0);
}

#[test]
fn prune_with_an_empty_corpus_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let corpus = numbered_corpus(&tmp.path().join("c.jsonl"), 0, 5);
    let i = index.to_str().unwrap();
    assert_eq!(run("ingest", &["--index", i, "--corpus", corpus.to_str().unwrap()]).code, 0);
    let empty_dir = tmp.path().join("empty");
    std::fs::create_dir_all(&empty_dir).unwrap();
    write_files(tmp.path(), &[("zero.jsonl", b""), ("none.json", b"[]")]);
    for empty in [tmp.path().join("zero.jsonl"), tmp.path().join("none.json"), empty_dir] {
        let out = run("ingest", &["--index", i, "--prune", "--corpus", empty.to_str().unwrap()]);
        assert_eq!(out.code, 2, "{}: {}", empty.display(), out.stderr);
        assert!(out.stderr.contains("holds no documents: --prune would remove every document"), "{}", out.stderr);
        assert_eq!(count(&index, "SELECT count(*) FROM documents"), 5);
    }
}

#[test]
fn a_symlink_loop_in_a_corpus_is_read_once() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    write_files(&corpus, &[("a.txt", b"Alpha text."), ("sub/b.txt", b"Beta text.")]);
    std::os::unix::fs::symlink(&corpus, corpus.join("sub/loop")).unwrap();
    std::os::unix::fs::symlink(corpus.join("sub"), corpus.join("again")).unwrap();
    let index = tmp.path().join("index");
    let out = run("ingest", &["--index", index.to_str().unwrap(), "--corpus", corpus.to_str().unwrap()]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(count(&index, "SELECT count(*) FROM documents"), 2);
    let failures = query(&index, "SELECT unit, kind, message FROM failures ORDER BY unit");
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert_eq!(failures[0]["unit"], "again");
    assert_eq!(failures[1]["unit"], "sub/loop");
    assert!(failures.iter().all(|f| f["kind"] == "symlink_loop"));
    let real = std::fs::canonicalize(&corpus).unwrap();
    assert!(failures[1]["message"].as_str().unwrap().contains(&real.display().to_string()), "{failures:?}");
}

#[test]
fn nfd_text_and_an_nfc_question_meet_on_the_same_entity() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus.jsonl");
    let text = "Zu\u{308}rich is a city in Switzerland. Zu\u{308}rich hosts the Limmat Festival every summer.";
    std::fs::write(&corpus, serde_json::json!({"doc_id": "z", "title": "Zu\u{308}rich", "text": text}).to_string())
        .unwrap();
    let index = tmp.path().join("index");
    build(&index, &corpus, false);
    let stored = query(&index, "SELECT text, title FROM documents");
    assert!(stored[0]["text"].as_str().unwrap().starts_with("Zürich is"), "{stored:?}");
    assert_eq!(stored[0]["title"], "Zürich");
    let names = query(&index, "SELECT norm_name FROM kb.entities WHERE norm_name LIKE 'z%'");
    assert!(names.iter().any(|r| r["norm_name"] == "zürich"), "{names:?}");
    let q = run_env("query", &["--index", index.to_str().unwrap(), "--show", "3", "What does Zürich host?"], &ENV);
    assert_eq!(q.code, 0, "{}", q.stderr);
    assert!(q.stdout.contains("Zürich hosts the Limmat Festival"), "{}", q.stdout);
}

#[test]
fn failures_of_an_input_stay_until_it_is_read_or_pruned() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let i = index.to_str().unwrap();
    let bad = tmp.path().join("bad");
    write_files(&bad, &[("good.txt", b"Good text."), ("broken.jsonl", b"{not json\n{\"text\": \"fine\"}\n")]);
    assert_eq!(run("ingest", &["--index", i, "--corpus", bad.to_str().unwrap()]).code, 1);
    let other = numbered_corpus(&tmp.path().join("other.jsonl"), 0, 3);
    assert_eq!(run("ingest", &["--index", i, "--corpus", other.to_str().unwrap()]).code, 0);
    assert_eq!(count(&index, "SELECT count(*) FROM failures"), 1, "another corpus does not clear them");
    // The input is repaired: its failure goes.
    write_files(&bad, &[("broken.jsonl", b"{\"text\": \"now\"}\n{\"text\": \"fine\"}\n")]);
    assert_eq!(run("ingest", &["--index", i, "--corpus", bad.to_str().unwrap()]).code, 0);
    assert_eq!(count(&index, "SELECT count(*) FROM failures"), 0);
    // Broken again, then pruned away by another corpus: the failure goes with it.
    write_files(&bad, &[("broken.jsonl", b"{not json\n")]);
    assert_eq!(run("ingest", &["--index", i, "--corpus", bad.to_str().unwrap()]).code, 1);
    assert_eq!(run("ingest", &["--index", i, "--prune", "--corpus", other.to_str().unwrap()]).code, 0);
    assert_eq!(count(&index, "SELECT count(*) FROM failures"), 0);
    assert_eq!(count(&index, "SELECT count(*) FROM documents"), 3);
}

#[test]
fn concurrent_ingest_shards_record_each_input_failure_once() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("four.toml");
    std::fs::write(&config, "[index]\nbuckets = 4\n").unwrap();
    let corpus = tmp.path().join("c.jsonl");
    let mut lines = std::fs::read_to_string(numbered_corpus(&corpus, 0, 20)).unwrap();
    lines.push_str("{broken\n{\"title\": \"no text\"}\n{\"doc_id\": \"d3\", \"text\": \"again\"}\n");
    std::fs::write(&corpus, lines).unwrap();
    let index = tmp.path().join("index");
    let (i, c) = (index.to_str().unwrap(), config.to_str().unwrap());
    let seed = numbered_corpus(&tmp.path().join("seed.jsonl"), 100, 1);
    assert_eq!(run("ingest", &["--index", i, "--config", c, "--corpus", seed.to_str().unwrap()]).code, 0);
    let shards: Vec<_> = ["0/2", "1/2"]
        .iter()
        .map(|s| {
            spawn(
                "ingest",
                &["--index", i, "--config", c, "-q", "--shard", s, "--corpus", corpus.to_str().unwrap()],
                &[],
            )
        })
        .collect();
    let codes: Vec<i32> = shards.into_iter().map(|s| finish(s).code).collect();
    assert!(codes.contains(&1), "{codes:?}");
    let failures = query(&index, "SELECT unit, kind FROM failures ORDER BY unit");
    let units: Vec<&str> = failures.iter().map(|f| f["unit"].as_str().unwrap()).collect();
    assert_eq!(units, ["c.jsonl:21", "c.jsonl:22", "c.jsonl:23"], "{failures:?}");
    assert_eq!(count(&index, "SELECT count(*) FROM documents"), 21);
}

#[test]
fn a_closed_stdout_or_stderr_ends_quietly() {
    let index = crate::query::sample_index();
    let i = index.to_str().unwrap();
    // stdout: the reader (`head`) goes away after the first bytes of a long result.
    let mut child = Command::new(bin("sql"))
        .args(["--index", i, "SELECT h.text FROM kb.hyperedges h, kb.hyperedges g"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // stderr: an error message for nobody is dropped; the exit code still says what happened.
    let mut child = Command::new(bin("sql"))
        .args(["--index", i, "SELECT nope FROM documents"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    assert_eq!(child.wait().unwrap().code(), Some(2));
}

#[test]
fn a_hashing_model_of_no_dimension_is_refused_and_merge_wants_vectors_of_its_model() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let corpus = numbered_corpus(&tmp.path().join("c.jsonl"), 0, 2);
    let args = ["--index", index.to_str().unwrap(), "--corpus", corpus.to_str().unwrap()];
    let out = run_env("ingest", &args, &[("FLEXSTRUCT_EMBED__MODEL", "hashing-0")]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("embed.model: `hashing-0`: expected hashing-<dim> with a dimension from 1 to 4096"),
        "{}",
        out.stderr
    );
    // A dimension no real model has is refused before it fills memory (it took 7.7 GB in a minute).
    let started = Instant::now();
    let out = run_env("ingest", &args, &[("FLEXSTRUCT_EMBED__MODEL", "hashing-2000000")]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("`hashing-2000000`: expected hashing-<dim> with a dimension from 1 to 4096"));
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    let index = tmp.path().join("built");
    build(&index, &sample_corpus(), false);
    let out = run_env("merge", &["--index", index.to_str().unwrap()], &[("FLEXSTRUCT_EMBED__MODEL", "hashing-32")]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("have no vector of embedding model `hashing-32`"), "{}", out.stderr);
    assert!(out.stderr.contains("make embed merge"), "{}", out.stderr);
}

#[test]
fn counts_add_up_when_every_llm_call_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let corpus = numbered_corpus(&tmp.path().join("c.jsonl"), 0, 3);
    let (ingest, chunk) = ingest_chunk(&index, &corpus, None);
    assert_eq!((ingest.code, chunk.code), (0, 0));
    // Nothing listens on port 9 of the loopback.
    let env = [
        ("FLEXSTRUCT_BACKENDS__EXTRACT", "llm"),
        ("FLEXSTRUCT_LLM__BASE_URL", "http://127.0.0.1:9/v1"),
        ("FLEXSTRUCT_LLM__MODEL", "nobody"),
        ("FLEXSTRUCT_LLM__API_KEY_ENV", ""),
        ("FLEXSTRUCT_LLM__MAX_RETRIES", "0"),
        ("FLEXSTRUCT_LLM__TIMEOUT_SECS", "2"),
    ];
    let out = run_env("extract", &["--index", index.to_str().unwrap()], &env);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("3 in → 0 rows out; 0 done, 0 up to date, 3 failed"), "{}", out.stderr);
}

#[test]
fn temporary_files_of_a_killed_run_are_removed_by_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let corpus = numbered_corpus(&tmp.path().join("c.jsonl"), 0, 2);
    ingest_chunk(&index, &corpus, None);
    // What `kill -9` during a write leaves: a hidden temporary file of a process that is gone.
    let stale = index.join("chunks/.part-0003.parquet.99999999-0.tmp");
    std::fs::write(&stale, b"half a part").unwrap();
    let out = run("chunk", &["--index", index.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!stale.exists());
}

#[test]
fn merge_refuses_an_index_whose_stages_have_not_finished() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    build(&index, &sample_corpus(), false);
    let part = std::fs::read_dir(index.join("clusters")).unwrap().next().unwrap().unwrap().path();
    let bucket = part.file_name().unwrap().to_str().unwrap()[5..9].to_owned();
    std::fs::remove_file(&part).unwrap();
    let out = run_env("merge", &["--index", index.to_str().unwrap()], &ENV);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("clusters lacks the rows of documents in 1 bucket(s): {bucket}")),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("make index"), "{}", out.stderr);
    // A pruned document whose rows the stages have not removed yet.
    let docs = std::fs::read_dir(index.join("documents")).unwrap().next().unwrap().unwrap().path();
    std::fs::remove_file(docs).unwrap();
    let out = run_env("merge", &["--index", index.to_str().unwrap()], &ENV);
    assert!(out.stderr.contains("keeps rows of removed documents"), "{}", out.stderr);
}

#[test]
fn empty_results_print_their_header() {
    let index = crate::query::sample_index();
    let i = index.to_str().unwrap();
    let table = run("sql", &["--index", i, "SELECT doc_id, title FROM documents WHERE false"]);
    assert_eq!(table.code, 0, "{}", table.stderr);
    assert!(table.stdout.contains("| doc_id | title |"), "{}", table.stdout);
    let csv = run("sql", &["--index", i, "--format", "csv", "SELECT doc_id, title FROM documents WHERE false"]);
    assert_eq!(csv.stdout, "doc_id,title\n");
}

#[test]
fn expensive_sql_hits_a_limit_with_a_clean_error() {
    let index = crate::query::sample_index();
    let i = index.to_str().unwrap();
    let slow = run("sql", &["--index", i, "--timeout", "1", "SELECT count(*) FROM generate_series(1, 10000000000)"]);
    assert_eq!(slow.code, 2, "{}", slow.stderr);
    assert!(slow.stderr.contains("ran longer than the time limit of 1 s"), "{}", slow.stderr);
    let big =
        "SELECT string_agg(a.text || b.text || c.text, ',') FROM kb.hyperedges a, kb.hyperedges b, kb.hyperedges c";
    let out = run("sql", &["--index", i, "--memory-limit", "64", big]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("Resources exhausted"), "{}", out.stderr);
    assert!(out.stderr.contains("--memory-limit"), "{}", out.stderr);
    let wide = "SELECT a.text, b.text FROM kb.hyperedges a, kb.hyperedges b, kb.hyperedges c";
    let out = run("sql", &["--index", i, "--memory-limit", "16", wide]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("larger than the memory limit of 16 MiB"), "{}", out.stderr);
}

#[test]
fn a_zero_tau_s_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = numbered_corpus(&tmp.path().join("c.jsonl"), 0, 1);
    let index = tmp.path().join("i");
    let args = ["--index", index.to_str().unwrap(), "--corpus", corpus.to_str().unwrap()];
    let out = run_env("ingest", &args, &[("FLEXSTRUCT_HYPERGRAPH__TAU_S", "0")]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("hypergraph.tau_s: must be at least 1"), "{}", out.stderr);
}

#[test]
fn a_single_underscore_override_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = numbered_corpus(&tmp.path().join("c.jsonl"), 0, 1);
    let index = tmp.path().join("i");
    let args = ["--index", index.to_str().unwrap(), "--corpus", corpus.to_str().unwrap()];
    let out = run_env("ingest", &args, &[("FLEXSTRUCT_CHUNK_CT_MAX", "800")]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains(
            "FLEXSTRUCT_CHUNK_CT_MAX: unknown variable (a configuration override is FLEXSTRUCT_CHUNK__CT_MAX)"
        ),
        "{}",
        out.stderr
    );
}

#[test]
fn a_missing_corpus_creates_no_index() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("never");
    let out =
        run("ingest", &["--index", index.to_str().unwrap(), "--corpus", tmp.path().join("nope").to_str().unwrap()]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("nope: cannot be read"), "{}", out.stderr);
    assert!(!index.exists());
}

#[test]
fn a_truncated_output_part_is_rebuilt() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let corpus = numbered_corpus(&tmp.path().join("c.jsonl"), 0, 4);
    ingest_chunk(&index, &corpus, None);
    let before = query(&index, "SELECT * FROM chunks ORDER BY doc_id, chunk_idx");
    let part = std::fs::read_dir(index.join("chunks")).unwrap().next().unwrap().unwrap().path();
    let bytes = std::fs::read(&part).unwrap();
    std::fs::write(&part, &bytes[..bytes.len() / 2]).unwrap();
    let out = run("chunk", &["--index", index.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(query(&index, "SELECT * FROM chunks ORDER BY doc_id, chunk_idx"), before);
    // A damaged input is named, not rebuilt.
    let docs = std::fs::read_dir(index.join("documents")).unwrap().next().unwrap().unwrap().path();
    std::fs::write(&docs, b"PAR1").unwrap();
    let out = run("chunk", &["--index", index.to_str().unwrap()]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains(docs.file_name().unwrap().to_str().unwrap()), "{}", out.stderr);
}

#[test]
fn a_context_cap_below_one_piece_is_refused() {
    let index = crate::query::sample_index();
    let out =
        run_env("query", &["--index", index.to_str().unwrap(), "--max-context-tokens", "10", "What is it?"], &ENV);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("10 is too small: 0 (no cap) or at least 64 tokens"), "{}", out.stderr);
}

#[test]
fn a_merge_killed_at_any_moment_leaves_a_kb_that_loads_whole_or_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (full, _) = two_kbs(tmp.path());
    let i = full.to_str().unwrap();
    let old_kb = tmp.path().join("old-kb");
    copy_dir(&full.join("kb"), &old_kb);
    // The index now holds the edited corpus less one document in every per-document table; its
    // kb is the old one. The two kbs differ in two places: the old one has the removed document,
    // the new one the edit (a sentence naming Ines Varga).
    let smaller = tmp.path().join("corpus");
    let mut files: Vec<_> = std::fs::read_dir(&smaller).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let removed_source = files.last().unwrap().file_name().unwrap().to_str().unwrap().to_owned();
    let removed = scalar(&full, &format!("SELECT doc_id FROM documents WHERE source LIKE '%{removed_source}'"));
    let removed = removed.as_str().unwrap().to_owned();
    std::fs::remove_file(files.last().unwrap()).unwrap();
    for stage in ["ingest", "chunk", "extract", "hypergraph", "graph", "embed", "cluster"] {
        let mut args = vec!["--index", i, "-q"];
        if stage == "ingest" {
            args.extend(["--prune", "--corpus", smaller.to_str().unwrap()]);
        }
        assert_eq!(run_env(stage, &args, &ENV).code, 0, "{stage}");
    }
    // Which kb the files hold: (has the removed document, has the edit).
    let generation = || {
        let has_removed = count(&full, &format!("SELECT count(*) FROM kb.doc_stats WHERE doc_id = '{removed}'")) > 0;
        let edited = count(&full, "SELECT count(*) FROM kb.hyperedges WHERE text LIKE '%Ines Varga%'") > 0;
        (has_removed, edited)
    };
    let restore = || {
        std::fs::remove_dir_all(full.join("kb")).unwrap();
        copy_dir(&old_kb, &full.join("kb"));
    };
    restore();
    assert_eq!(generation(), (true, false), "the old kb");
    let started = Instant::now();
    assert_eq!(run_env("merge", &["--index", i, "-q"], &ENV).code, 0);
    let merge_ms = started.elapsed().as_millis() as u64;
    assert_eq!(generation(), (false, true), "the new kb");
    let (mut old, mut new, mut refused) = (0, 0, 0);
    for step in 1..=10 {
        restore();
        let mut merge = spawn("merge", &["--index", i, "-q"], &ENV);
        std::thread::sleep(Duration::from_millis(merge_ms * step / 10));
        let _ = merge.kill();
        let _ = merge.wait();
        let q = run_env("query", &["--index", i, "When was the Kestrel Valley Water Compact signed?"], &ENV);
        if q.code == 0 {
            // A kb that loads is one merge's, never a mix of the two.
            match generation() {
                (true, false) => old += 1,
                (false, true) => new += 1,
                mixed => panic!("step {step}: a killed merge left a mixed kb that loads: {mixed:?}"),
            }
        } else {
            assert_eq!(q.code, 2, "{}", q.stderr);
            assert!(q.stderr.contains("mixes the output of different merges"), "step {step}: {}", q.stderr);
            refused += 1;
        }
    }
    // Rerunning the merge always repairs it.
    assert_eq!(run_env("merge", &["--index", i], &ENV).code, 0);
    let q = run_env("query", &["--index", i, "When was the Kestrel Valley Water Compact signed?"], &ENV);
    assert_eq!(q.code, 0, "{}", q.stderr);
    assert_eq!(generation(), (false, true));
    eprintln!("merge {merge_ms} ms; of 10 killed merges, {old} left the old kb, {new} the new, {refused} one refused");
}

#[test]
fn threads_beyond_the_cores_are_cut_to_them_with_a_note_not_an_abort() {
    // Before: SLURM_CPUS_PER_TASK=100000 made a no-op chunk run start 100,000 threads, take eleven
    // minutes and 2.4 GB, and abort (exit 134); --threads 3000 took 20 s and 600 MB.
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    build(&index, &sample_corpus(), false);
    let i = index.to_str().unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (args, env) in [
        (vec!["--index", i], vec![("SLURM_CPUS_PER_TASK", "100000")]),
        (vec!["--index", i, "--threads", "3000"], vec![]),
    ] {
        let started = Instant::now();
        let out = run_env("chunk", &args, &env);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let note = format!("more than the {cores} cores this process may use: using {cores}");
        assert!(out.stderr.contains("note: ") && out.stderr.contains(&note), "{}", out.stderr);
        assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
    }
}

#[test]
fn a_damaged_vector_file_is_not_used_as_data_and_the_merge_repairs_it() {
    // Before: a vector file with a current header and a body of NaN was read as the vectors:
    // answers came back empty with exit 0, status said "up to date", and the merge kept it.
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    copy_dir(crate::query::sample_index(), &index);
    let i = index.to_str().unwrap();
    let ask = || run_env("query", &["--index", i, "Under whose chairmanship did the talks begin?"], &ENV);
    let before = ask();
    assert_eq!(before.code, 0, "{}", before.stderr);
    let path = index.join("kb/hyperedges/vectors.f32");
    let whole = std::fs::read(&path).unwrap();
    let body_at = whole.splitn(3, |&b| b == b'\n').take(2).map(|line| line.len() + 1).sum::<usize>();
    let mut nan = whole[..body_at].to_vec();
    nan.extend(std::iter::repeat_n(f32::NAN.to_le_bytes(), (whole.len() - body_at) / 4).flatten());
    std::fs::write(&path, &nan).unwrap();

    // The Parquet vectors are read instead: the same answer, and a note naming the file.
    let damaged = ask();
    assert_eq!(damaged.code, 0, "{}", damaged.stderr);
    assert_eq!(damaged.stdout, before.stdout);
    assert!(damaged.stderr.contains("kb/hyperedges/vectors.f32 is damaged"), "{}", damaged.stderr);
    // Status names it and is not "up to date".
    let status = run_env("status", &["--index", i], &ENV);
    assert_eq!(status.code, 1, "{}", status.stdout);
    assert!(
        status.stdout.contains("damaged: ") && status.stdout.contains("`make merge` rewrites it"),
        "{}",
        status.stdout
    );
    // The merge writes it again, whole.
    assert_eq!(run_env("merge", &["--index", i, "-q"], &ENV).code, 0);
    assert_eq!(std::fs::read(&path).unwrap(), whole);
    assert_eq!(run_env("status", &["--index", i], &ENV).code, 0);
    assert!(!ask().stderr.contains("damaged"));
}

#[test]
fn damaged_parts_are_named_by_status_with_their_repair_and_the_index_run_repairs_them() {
    // Before: a truncated part made flexstruct-status exit 2 with "Corrupt footer" and no bucket
    // or hint; a truncated documents part left status and ingest failing with no way forward.
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    copy_dir(crate::query::sample_index(), &index);
    let i = index.to_str().unwrap();
    let corpus = sample_corpus();
    let truncate = |path: &Path| {
        let bytes = std::fs::read(path).unwrap();
        std::fs::write(path, &bytes[..bytes.len() / 2]).unwrap();
    };
    let part = |table: &str, n: usize| {
        let mut parts: Vec<PathBuf> =
            std::fs::read_dir(index.join(table)).unwrap().map(|e| e.unwrap().path()).collect();
        parts.sort();
        parts[n].clone()
    };
    let status = || {
        let r = run_env("status", &["--index", i, "--json"], &ENV);
        (r.code, serde_json::from_str::<serde_json::Value>(&r.stdout).unwrap_or_default())
    };

    // A stage's output: its bucket is to do in that stage and the ones that read it.
    let chunks = part("chunks", 0);
    let bucket: u64 = chunks.file_stem().unwrap().to_str().unwrap()["part-".len()..].parse().unwrap();
    truncate(&chunks);
    let (code, damaged) = status();
    assert_eq!(code, 1, "{damaged:#}");
    let named = damaged["damaged"][0].as_str().unwrap();
    assert!(named.contains(chunks.to_str().unwrap()) && named.contains("redoes its bucket (`make index`)"), "{named}");
    for stage in ["chunk", "extract"] {
        let row = damaged["stages"].as_array().unwrap().iter().find(|s| s["stage"] == stage).unwrap();
        assert!(row["to_do"].as_array().unwrap().contains(&bucket.into()), "{stage}: {damaged:#}");
    }
    let run = run_env("index", &["--index", i, "-q"], &ENV);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(status().0, 0);

    // A documents part: its documents cannot be read; status and ingest say what to do.
    let documents = part("documents", 0);
    truncate(&documents);
    let (code, damaged) = status();
    assert_eq!(code, 1, "{damaged:#}");
    let named = damaged["damaged"][0].as_str().unwrap();
    assert!(named.contains("move it aside and ingest the corpus again"), "{named}");
    let ingest = run_env("index", &["--index", i, "--corpus", corpus.to_str().unwrap(), "-q"], &ENV);
    assert_eq!(ingest.code, 2, "{}", ingest.stderr);
    assert!(ingest.stderr.contains(documents.to_str().unwrap()), "{}", ingest.stderr);
    assert!(ingest.stderr.contains("hint: this part's documents cannot be read: move it aside"), "{}", ingest.stderr);
    // Done as said: the corpus gives its documents again and the index is whole.
    std::fs::rename(&documents, tmp.path().join("documents-part.damaged")).unwrap();
    let ingest = run_env("index", &["--index", i, "--corpus", corpus.to_str().unwrap(), "-q"], &ENV);
    assert_eq!(ingest.code, 0, "{}", ingest.stderr);
    let (code, whole) = status();
    assert_eq!((code, whole["documents"].as_u64()), (0, Some(5)), "{whole:#}");
}

#[test]
fn a_small_kb_is_not_searched_more_narrowly_than_the_models_default() {
    // Before: two Markdown files of a few paragraphs gave a threshold derived from about a hundred
    // pairs that no hyperedge about the ferries' capacity passed; the answer came without it.
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::write(
        corpus.join("ferries.md"),
        "# The Lindqvist Harbour electric ferries\n\nLindqvist Harbour replaced its two diesel ferries with \
         electric ones in 2024. The new vessels, named Aurora and Tern, were built by the Saltmarsh yard in \
         Kellby.\n\nEach electric ferry carries 180 passengers and up to 24 bicycles. The crossing to Holm \
         Island takes twelve minutes.\n",
    )
    .unwrap();
    std::fs::write(
        corpus.join("pier.md"),
        "# The new charging pier\n\nThe charging pier at Holm Island was designed by the engineer Sunniva Roth. \
         It draws power from the island's wind park, which was extended with three turbines in 2023.\n",
    )
    .unwrap();
    let index = tmp.path().join("index");
    let i = index.to_str().unwrap();
    let built = run_env("index", &["--index", i, "--corpus", corpus.to_str().unwrap(), "-q"], &ENV);
    assert_eq!(built.code, 0, "{}", built.stderr);
    let pairs = scalar(&index, "SELECT pairs FROM kb.thresholds WHERE unit = 'hyperedge'").as_i64().unwrap();
    assert!(pairs < 1000, "{pairs} pairs");
    for mode in ["hypergraph", "hybrid"] {
        let q = run_env("query", &["--index", i, "--mode", mode, "How many passengers can the ferries take?"], &ENV);
        assert_eq!(q.code, 0, "{}", q.stderr);
        assert!(!q.stdout.contains("tau_eh"), "{mode}: {}", q.stdout);
        assert!(q.stdout.contains("cited: ") && q.stdout.contains("180 passengers"), "{mode}: {}", q.stdout);
    }
}
