//! ingest + chunk through the real binaries: bad inputs, idempotence, updates, pruning, shards,
//! crash safety.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::util::*;

fn paragraph(seed: usize, words: usize) -> String {
    (0..words).map(|i| format!("w{seed}x{}", i % 13)).collect::<Vec<_>>().join(" ")
}

fn long_doc(seed: usize, paragraphs: usize) -> String {
    (0..paragraphs).map(|p| paragraph(seed * 100 + p, 15 + (p * 7) % 30)).collect::<Vec<_>>().join("\n\n")
}

/// A JSON-lines corpus of `docs` documents `d0`, `d1`, … of `paragraphs` paragraphs each.
fn jsonl_corpus(dir: &Path, docs: usize, paragraphs: usize) -> PathBuf {
    let lines: String = (0..docs)
        .map(|i| serde_json::json!({"doc_id": format!("d{i}"), "text": long_doc(i, paragraphs)}).to_string() + "\n")
        .collect();
    let corpus = dir.join("corpus.jsonl");
    std::fs::write(&corpus, lines).unwrap();
    corpus
}

/// A folder corpus with one file of every kind of bad input next to good ones.
fn messy_corpus(dir: &Path) {
    let jsonl = format!(
        "{}\n{}\n{{\"doc_id\": \"j3\", \"text\": \"broken\"\n{}\n{}\n",
        serde_json::json!({"doc_id": "Keep Me/As-Is 1", "title": "J1", "text": long_doc(1, 6)}),
        serde_json::json!({"doc_id": "j2", "text": long_doc(2, 3)}),
        serde_json::json!({"doc_id": "j2", "text": "duplicate id"}),
        serde_json::json!({"title": "no text"}),
    );
    write_files(
        dir,
        &[
            ("notes/alpha.md", format!("# Alpha Report\n\n{}", long_doc(3, 5)).as_bytes()),
            ("notes/beta.txt", long_doc(4, 2).as_bytes()),
            ("notes/latin1.txt", b"caf\xe9 au lait\n"),
            ("notes/image.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"),
            ("notes/empty.md", b"\n   \n"),
            ("notes/.hidden.txt", b"never read"),
            ("docs.jsonl", jsonl.as_bytes()),
        ],
    );
}

/// The messy corpus ingested and chunked: (corpus, index, config, ingest run, chunk run).
fn messy_index(dir: &Path) -> (PathBuf, PathBuf, PathBuf, Run, Run) {
    let corpus = dir.join("corpus");
    messy_corpus(&corpus);
    let index = dir.join("index");
    let config = small_chunks_config(dir);
    let (ingest, chunk) = ingest_chunk(&index, &corpus, Some(&config));
    (corpus, index, config, ingest, chunk)
}

#[test]
fn bad_inputs_are_named_recorded_and_good_documents_go_through() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, index, _, ingest, chunk) = messy_index(tmp.path());

    assert_eq!(ingest.code, 1, "ingest must report failures: {}", ingest.stderr);
    for expected in [
        "notes/latin1.txt: invalid UTF-8 at line 1, byte 3",
        "notes/image.txt: binary file",
        "notes/empty.md: empty document",
        "docs.jsonl:3: malformed JSON",
        "docs.jsonl:4: duplicate doc_id `j2`, first seen at docs.jsonl:2",
        "docs.jsonl:5: field `text` is missing",
    ] {
        assert!(ingest.stderr.contains(expected), "missing `{expected}` in:\n{}", ingest.stderr);
    }
    let failures = query(&index, "SELECT stage, unit, kind FROM failures ORDER BY unit");
    let kinds: Vec<String> = failures.iter().map(|r| format!("{}|{}", r["unit"], r["kind"])).collect();
    assert_eq!(
        kinds,
        [
            r#""docs.jsonl:3"|"malformed_json""#,
            r#""docs.jsonl:4"|"duplicate_id""#,
            r#""docs.jsonl:5"|"missing_text""#,
            r#""notes/empty.md"|"empty""#,
            r#""notes/image.txt"|"binary""#,
            r#""notes/latin1.txt"|"invalid_utf8""#,
        ]
    );

    assert_eq!(chunk.code, 0, "{}", chunk.stderr);
    let docs = query(&index, "SELECT doc_id, title, source FROM documents ORDER BY source");
    assert_eq!(docs.len(), 4);
    // Given ids are kept exactly; files get content-derived ids and their heading as title.
    assert_eq!(docs[0]["doc_id"], "Keep Me/As-Is 1");
    assert_eq!(docs[0]["source"], "docs.jsonl:1");
    assert_eq!(docs[2]["title"], "Alpha Report");
    assert!(docs[2]["doc_id"].as_str().unwrap().starts_with("doc-"));

    // Chunks reproduce the document text at their offsets, and every document has chunks.
    let bad = scalar(
        &index,
        "SELECT count(*) FROM chunks c JOIN documents d USING (doc_id) \
         WHERE substr(d.text, c.char_start + 1, c.char_end - c.char_start) <> c.text",
    );
    assert_eq!(bad, 0);
    let per_doc = query(&index, "SELECT doc_id, count(*) AS n FROM chunks GROUP BY doc_id");
    assert_eq!(per_doc.len(), 4);
    assert!(per_doc.iter().any(|r| r["n"].as_i64().unwrap() > 1));

    // The manifest recorded both runs with their row counts.
    let runs = query(&index, "SELECT stage, rows_in, rows_out, units_failed FROM manifest ORDER BY started_at");
    assert_eq!(runs.len(), 2);
    assert_eq!(
        (runs[0]["stage"].as_str(), runs[0]["rows_out"].as_i64(), runs[0]["units_failed"].as_i64()),
        (Some("ingest"), Some(4), Some(6))
    );
    assert_eq!(runs[1]["stage"], "chunk");
}

#[test]
fn rerun_does_no_work_and_changes_nothing_then_a_fix_is_picked_up() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, index, config, _, _) = messy_index(tmp.path());
    let before = data_files(&index);

    let args = ["--index", index.to_str().unwrap(), "--config", config.to_str().unwrap()];
    let chunk = run("chunk", &args);
    assert!(chunk.stderr.contains("0 done, 4 up to date, 0 failed"), "{}", chunk.stderr);
    let ingest = run("ingest", &[&args[..], &["--corpus", corpus.to_str().unwrap()]].concat());
    assert!(ingest.stderr.contains("0 done, 4 up to date, 6 failed"), "{}", ingest.stderr);
    assert_eq!(before, data_files(&index), "an unchanged rerun must not change any data file");

    // Fixing a bad file on the next run: it is ingested and its failure row disappears.
    std::fs::write(corpus.join("notes/latin1.txt"), "café au lait\n").unwrap();
    let (ingest, chunk) = ingest_chunk(&index, &corpus, Some(&config));
    assert_eq!(ingest.code, 1);
    assert_eq!(chunk.code, 0);
    assert_eq!(scalar(&index, "SELECT count(*) FROM documents"), 5);
    assert_eq!(scalar(&index, "SELECT count(*) FROM failures WHERE unit = 'notes/latin1.txt'"), 0);
    let after = data_files(&index);
    let changed: Vec<_> = after.iter().filter(|(k, v)| before.get(*k) != Some(v)).map(|(k, _)| k.clone()).collect();
    // One documents bucket, one chunks bucket and the ingest failures part changed; nothing else.
    assert_eq!(changed.len(), 3, "{changed:?}");
}

#[test]
fn prune_removes_documents_and_their_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    write_files(
        &corpus,
        &[
            ("a.txt", long_doc(1, 4).as_bytes()),
            ("b.txt", long_doc(2, 4).as_bytes()),
            ("c.txt", long_doc(3, 4).as_bytes()),
        ],
    );
    let index = tmp.path().join("index");
    let (ingest, chunk) = ingest_chunk(&index, &corpus, None);
    assert_eq!((ingest.code, chunk.code), (0, 0));
    assert_eq!(scalar(&index, "SELECT count(DISTINCT doc_id) FROM chunks"), 3);

    std::fs::remove_file(corpus.join("b.txt")).unwrap();
    // Without --prune, ingest only adds and updates.
    let (ingest, _) = ingest_chunk(&index, &corpus, None);
    assert_eq!(ingest.code, 0);
    assert_eq!(scalar(&index, "SELECT count(*) FROM documents"), 3);

    let i = index.to_str().unwrap();
    let ingest = run("ingest", &["--index", i, "--corpus", corpus.to_str().unwrap(), "--prune"]);
    assert!(ingest.stderr.contains("1 removed"), "{}", ingest.stderr);
    let chunk = run("chunk", &["--index", i]);
    assert!(chunk.stderr.contains("1 removed"), "{}", chunk.stderr);
    assert_eq!(scalar(&index, "SELECT count(*) FROM documents WHERE source = 'b.txt'"), 0);
    assert_eq!(scalar(&index, "SELECT count(DISTINCT doc_id) FROM chunks"), 2);

    // Prune is refused while an input fails: a document that cannot be read is not deleted.
    std::fs::write(corpus.join("c.txt"), b"\xff\xfe broken").unwrap();
    let ingest = run("ingest", &["--index", i, "--corpus", corpus.to_str().unwrap(), "--prune"]);
    assert_eq!(ingest.code, 1);
    assert!(ingest.stderr.contains("prune: \"skipped"), "{}", ingest.stderr);
    assert_eq!(scalar(&index, "SELECT count(*) FROM documents"), 2);
}

#[test]
fn an_edited_file_replaces_its_older_version_in_its_own_corpus_only() {
    let tmp = tempfile::tempdir().unwrap();
    // Its real path: a corpus is recorded under its real path.
    let root = tmp.path().canonicalize().unwrap();
    let (a, b) = (root.join("a"), root.join("b"));
    write_files(
        &a,
        &[
            ("same.txt", long_doc(1, 4).as_bytes()),
            ("kept.txt", long_doc(2, 4).as_bytes()),
            ("notes/moved.md", long_doc(3, 4).as_bytes()),
        ],
    );
    write_files(&b, &[("same.txt", long_doc(4, 4).as_bytes())]);
    let index = tmp.path().join("index");
    let i = index.to_str().unwrap();
    for corpus in [&a, &b] {
        let (ingest, chunk) = ingest_chunk(&index, corpus, None);
        assert_eq!((ingest.code, chunk.code), (0, 0), "{}", ingest.stderr);
    }
    let id_of = |corpus: &Path, source: &str| {
        let sql = format!("SELECT doc_id FROM documents WHERE source = '{source}' AND corpus = '{}'", corpus.display());
        query(&index, &sql).iter().map(|r| r["doc_id"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    let old = id_of(&a, "same.txt");
    assert_eq!(old.len(), 1);
    let b_same = id_of(&b, "same.txt");
    assert_eq!(b_same.len(), 1);

    // An edit gives the file a new content-derived id; the version it replaces goes, with its
    // chunks, and the other corpus's file of the same name stays.
    std::fs::write(a.join("same.txt"), long_doc(5, 4)).unwrap();
    let ingest = run("ingest", &["--index", i, "--corpus", a.to_str().unwrap()]);
    let chunk = run("chunk", &["--index", i]);
    assert!(ingest.stderr.contains("1 done, 2 up to date, 0 failed, 1 removed"), "{}", ingest.stderr);
    assert!(ingest.stderr.contains("replaced: 1"), "{}", ingest.stderr);
    assert!(chunk.stderr.contains("1 removed"), "{}", chunk.stderr);
    let new = id_of(&a, "same.txt");
    assert_eq!(new.len(), 1);
    assert_ne!(new, old);
    assert_eq!(id_of(&b, "same.txt"), b_same);
    assert_eq!(scalar(&index, "SELECT count(*) FROM documents"), 4);
    assert_eq!(scalar(&index, &format!("SELECT count(*) FROM chunks WHERE doc_id = '{}'", old[0])), 0);

    // A file moved inside its corpus keeps its id (the same text) under its new name.
    std::fs::create_dir_all(a.join("archive")).unwrap();
    std::fs::rename(a.join("notes/moved.md"), a.join("archive/moved.md")).unwrap();
    let ingest = run("ingest", &["--index", i, "--corpus", a.to_str().unwrap()]);
    assert!(ingest.stderr.contains("0 done, 3 up to date, 0 failed, 0 removed"), "{}", ingest.stderr);
    assert_eq!(id_of(&a, "archive/moved.md").len(), 1);
    assert_eq!(scalar(&index, "SELECT count(*) FROM documents"), 4);

    // The same folder reached another way (through `..`, or a symlink) is the same corpus: an
    // edit read through it replaces the older version as well.
    for (round, path) in [a.join("notes").join(".."), root.join("link")].into_iter().enumerate() {
        if round == 1 {
            std::os::unix::fs::symlink(&a, &path).unwrap();
        }
        std::fs::write(a.join("same.txt"), long_doc(6 + round, 4)).unwrap();
        let ingest = run("ingest", &["--index", i, "--corpus", path.to_str().unwrap()]);
        assert!(ingest.stderr.contains("replaced: 1"), "{}: {}", path.display(), ingest.stderr);
        assert_eq!(id_of(&a, "same.txt").len(), 1);
        assert_eq!(scalar(&index, "SELECT count(*) FROM documents"), 4);
    }

    // A file that cannot be read this time is no proof of anything: its last version stays.
    let kept = id_of(&a, "kept.txt");
    std::fs::write(a.join("kept.txt"), b"\xff\xfe broken").unwrap();
    let ingest = run("ingest", &["--index", i, "--corpus", a.to_str().unwrap()]);
    assert_eq!(ingest.code, 1);
    assert_eq!(id_of(&a, "kept.txt"), kept);
    assert_eq!(scalar(&index, "SELECT count(*) FROM documents"), 4);
}

#[test]
fn shards_partition_the_work_and_add_up_to_a_full_run() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = jsonl_corpus(tmp.path(), 40, 3);
    let config = small_chunks_config(tmp.path());

    let full = tmp.path().join("full");
    ingest_chunk(&full, &corpus, Some(&config));
    let sharded = tmp.path().join("sharded");
    let s = sharded.to_str().unwrap();
    let c = config.to_str().unwrap();
    for shard in ["0/2", "1/2"] {
        let ingest = run(
            "ingest",
            &["--index", s, "--config", c, "--corpus", corpus.to_str().unwrap(), "--shard", shard, "--quiet"],
        );
        assert_eq!(ingest.code, 0, "{}", ingest.stderr);
        let chunk = run("chunk", &["--index", s, "--config", c, "--shard", shard]);
        assert!(chunk.stderr.contains(&format!("[shard {shard}]")), "{}", chunk.stderr);
    }
    assert_eq!(data_files(&full), data_files(&sharded));

    let bad = run("chunk", &["--index", s, "--shard", "1/3"]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("must divide the index's bucket count (4)"), "{}", bad.stderr);
}

#[test]
fn a_killed_chunk_run_leaves_whole_tables_and_a_rerun_finishes_the_job() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = jsonl_corpus(tmp.path(), 300, 40);
    let reference = tmp.path().join("reference");
    ingest_chunk(&reference, &corpus, None);

    let index = tmp.path().join("index");
    let i = index.to_str().unwrap();
    assert_eq!(run("ingest", &["--index", i, "--corpus", corpus.to_str().unwrap(), "--quiet"]).code, 0);
    let mut child = std::process::Command::new(bin("chunk")).args(["--index", i, "--quiet"]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(150));
    child.kill().unwrap();
    child.wait().unwrap();

    // Whatever was written is complete: every visible part reads.
    let partial = run("sql", &["--index", i, "SELECT count(*) FROM chunks"]);
    assert_eq!(partial.code, 0, "{}", partial.stderr);
    let rerun = run("chunk", &["--index", i]);
    assert_eq!(rerun.code, 0, "{}", rerun.stderr);
    // The same tables, and the rerun removed the temporary files the killed run left.
    assert_eq!(data_files(&reference), data_files(&index));
}

#[test]
fn usage_errors_exit_2_with_a_clear_message() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nowhere");
    let out = run("chunk", &["--index", missing.to_str().unwrap()]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("not an index folder"), "{}", out.stderr);

    let index = tmp.path().join("index");
    let out = run("ingest", &["--index", index.to_str().unwrap(), "--corpus", missing.to_str().unwrap()]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("nowhere: cannot be read"), "{}", out.stderr);

    let config = tmp.path().join("bad.toml");
    std::fs::write(&config, "[chunk]\nct_max = \"big\"\n").unwrap();
    let out = run("chunk", &["--index", index.to_str().unwrap(), "--config", config.to_str().unwrap()]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("ct_max"), "{}", out.stderr);

    let out =
        run_env("chunk", &[], &[("FLEXSTRUCT_INDEX", index.to_str().unwrap()), ("FLEXSTRUCT_CHUNK__CT_MIN", "9000")]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("ct_min (9000) must not exceed"), "{}", out.stderr);
}
