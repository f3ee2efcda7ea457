//! The SQL binary: output formats (snapshots), statements from a file and stdin, refusals.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::util::*;

/// A tiny fixed index: two documents, small chunks.
fn fixture(dir: &Path) -> std::path::PathBuf {
    let corpus = dir.join("corpus.jsonl");
    let docs = [
        serde_json::json!({"doc_id": "harbour", "title": "Harbour Survey", "text":
            "# Harbour Survey\n\nThe Port Ellery Harbour Authority (PEHA) surveyed the eastern basin in March.\n\n\
             Depths were logged by Mira Okafor and Tomasz Lind.\n\nSilt had reduced the channel to 4.2 m."}),
        serde_json::json!({"doc_id": "orchard", "text":
            "Orchard notes, 12 September.\n\nThe Bramley trees near the north wall fruited early.\n\n- pick on Friday\n- store in the cool shed"}),
    ];
    let lines: String = docs.iter().map(|d| format!("{d}\n")).collect();
    std::fs::write(&corpus, lines).unwrap();
    let index = dir.join("index");
    let config = dir.join("tiny.toml");
    std::fs::write(&config, "[chunk]\nct_min = 10\nct_max = 20\n").unwrap();
    let (ingest, chunk) = ingest_chunk(&index, &corpus, Some(&config));
    assert_eq!((ingest.code, chunk.code), (0, 0), "{}{}", ingest.stderr, chunk.stderr);
    index
}

fn sql(index: &Path, args: &[&str]) -> Run {
    let mut all = vec!["--index", index.to_str().unwrap()];
    all.extend_from_slice(args);
    run("sql", &all)
}

#[test]
fn output_formats() {
    let tmp = tempfile::tempdir().unwrap();
    let index = fixture(tmp.path());
    let q = "SELECT doc_id, chunk_idx, n_tokens, char_start, char_end, text FROM chunks ORDER BY doc_id, chunk_idx";
    let table = sql(&index, &["--max-width", "40", q]);
    assert_eq!(table.code, 0, "{}", table.stderr);
    insta::assert_snapshot!("chunks_table", table.stdout);
    insta::assert_snapshot!("chunks_csv", sql(&index, &["--format", "csv", q]).stdout);
    insta::assert_snapshot!("chunks_jsonl", sql(&index, &["--format", "jsonl", q]).stdout);
    let docs =
        sql(&index, &["--format", "json", "SELECT doc_id, title, n_chars, sha256 FROM documents ORDER BY doc_id"]);
    insta::assert_snapshot!("documents_json", docs.stdout);
}

#[test]
fn several_statements_a_file_and_stdin() {
    let tmp = tempfile::tempdir().unwrap();
    let index = fixture(tmp.path());
    let two = sql(&index, &["SELECT count(*) AS docs FROM documents; SELECT count(*) AS edges FROM edges"]);
    assert_eq!(two.code, 0, "{}", two.stderr);
    insta::assert_snapshot!("two_statements", two.stdout);

    let file = tmp.path().join("q.sql");
    std::fs::write(
        &file,
        "-- chunk spans\nSELECT doc_id, min(char_start) AS s FROM chunks GROUP BY doc_id ORDER BY doc_id;\n",
    )
    .unwrap();
    let from_file = sql(&index, &["--format", "csv", "--file", file.to_str().unwrap()]);
    assert_eq!(from_file.stdout, "doc_id,s\nharbour,0\norchard,0\n");

    let mut child = Command::new(bin("sql"))
        .args(["--index", index.to_str().unwrap(), "--format", "csv"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"SELECT 1 + 1 AS two").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "two\n2\n");
}

#[test]
fn writes_and_file_access_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let index = fixture(tmp.path());
    let outside = tmp.path().join("stolen.csv");
    let statements = [
        "INSERT INTO documents SELECT * FROM documents".to_owned(),
        format!("COPY (SELECT * FROM documents) TO '{}'", outside.display()),
        "CREATE EXTERNAL TABLE pw STORED AS CSV LOCATION '/etc/passwd'".to_owned(),
        "CREATE TABLE t AS SELECT 1".to_owned(),
        "DROP TABLE chunks".to_owned(),
        "SET datafusion.execution.batch_size = 1".to_owned(),
    ];
    for statement in &statements {
        let out = sql(&index, &[statement]);
        assert_eq!(out.code, 2, "{statement} was not refused: {}", out.stdout);
        assert!(out.stderr.contains("read-only"), "{statement}: {}", out.stderr);
    }
    assert!(!outside.exists());
    assert_eq!(scalar(&index, "SELECT count(*) FROM documents"), 2);

    let syntax = sql(&index, &["SELEC 1"]);
    assert_eq!(syntax.code, 2);
    assert!(syntax.stderr.contains("SQL syntax error"), "{}", syntax.stderr);
}

#[test]
fn a_damaged_table_is_named_by_file_and_column() {
    let tmp = tempfile::tempdir().unwrap();
    let index = fixture(tmp.path());
    // Replace a chunks part with a documents part: the check names the file and the problem.
    let part = std::fs::read_dir(index.join("chunks")).unwrap().next().unwrap().unwrap().path();
    let doc_part = std::fs::read_dir(index.join("documents")).unwrap().next().unwrap().unwrap().path();
    std::fs::copy(&doc_part, &part).unwrap();
    let out = sql(&index, &["SELECT count(*) FROM chunks"]);
    assert_eq!(out.code, 2);
    let name = part.file_name().unwrap().to_str().unwrap();
    assert!(
        out.stderr.contains(name) && out.stderr.contains("holds table `documents`, expected `chunks`"),
        "{}",
        out.stderr
    );
}
