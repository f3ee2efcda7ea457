//! `flexstruct-status`: per stage, the buckets its next run would skip, redo, compute, retry or
//! remove, the kb's state and the failed units — checked against what the runs then do.

use std::path::Path;

use serde_json::Value;

use crate::util::*;

const ENV: &[(&str, &str)] = &[("FLEXSTRUCT_EMBED__MODEL", "hashing-16")];
const STAGES: [&str; 8] = ["ingest", "chunk", "extract", "hypergraph", "graph", "embed", "cluster", "merge"];

fn build(index: &str, corpus: &str, config: &str, env: &[(&str, &str)]) {
    for stage in STAGES {
        let mut args = vec!["--index", index, "--config", config, "--quiet"];
        if stage == "ingest" {
            args.extend(["--corpus", corpus]);
        }
        let r = run_env(stage, &args, env);
        assert!(r.code <= 1, "{stage}: {}", r.stderr);
    }
}

fn status(index: &str, config: &str, env: &[(&str, &str)]) -> (i32, Value) {
    let r = run_env("status", &["--index", index, "--config", config, "--json"], env);
    assert!(r.code <= 1, "{}", r.stderr);
    (r.code, serde_json::from_str(&r.stdout).unwrap())
}

/// (stage, up_to_date, stale, missing, failed, orphaned) of every stage.
fn counts(status: &Value) -> Vec<(String, u64, u64, u64, u64, u64)> {
    status["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let n = |k: &str| s[k].as_u64().unwrap();
            (
                s["stage"].as_str().unwrap().to_owned(),
                n("up_to_date"),
                n("stale"),
                n("missing"),
                n("failed"),
                n("orphaned"),
            )
        })
        .collect()
}

fn write_doc(corpus: &Path, name: &str, text: &str) {
    write_files(corpus, &[(name, text.as_bytes())]);
}

#[test]
fn status_says_what_the_next_runs_will_do() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    let config = tmp.path().join("c.toml");
    std::fs::write(&config, "[index]\nbuckets = 4\n").unwrap();
    for (i, place) in ["Harlow", "Fennick", "Aldermoor"].iter().enumerate() {
        let text = format!("The {place} library was opened in 19{i}5 by Mara Quill. It holds 4{i},000 books.");
        write_doc(&corpus, &format!("d{i}.txt"), &text);
    }
    let index = tmp.path().join("index");
    let (i, c, k) = (index.to_str().unwrap(), config.to_str().unwrap(), corpus.to_str().unwrap());
    build(i, k, c, ENV);

    let (code, built) = status(i, c, ENV);
    assert_eq!(code, 0, "{built:#}");
    assert_eq!(built["documents"], 3);
    let with_docs = built["buckets_with_documents"].as_u64().unwrap();
    assert!(counts(&built).iter().all(|s| (s.1, s.2 + s.3 + s.4 + s.5) == (with_docs, 0)), "{built:#}");
    assert_eq!(built["kb"]["state"], "up_to_date");
    let person = run_env("status", &["--index", i, "--config", c], ENV);
    assert!(person.stdout.contains("kb: up to date") && person.stdout.contains("failures: none"), "{}", person.stdout);

    // Another chunk size: every chunk bucket is stale, and nothing else changes by looking.
    let before = data_files(&index);
    let (code, other) = status(i, c, &[ENV[0], ("FLEXSTRUCT_CHUNK__CT_MAX", "1200")]);
    assert_eq!(code, 1);
    assert_eq!(counts(&other)[0], ("chunk".to_owned(), 0, with_docs, 0, 0, 0));
    assert_eq!(data_files(&index), before, "status wrote into the index");

    // A new document and an unreadable file: its bucket is to be redone (or computed) downstream
    // of ingest, the kb is behind, and the ingest failure is listed.
    write_doc(&corpus, "d3.txt", "The Kestrel bridge was rebuilt in 2011 by Tomas Venn.");
    write_files(&corpus, &[("bad.txt", b"\xff\xfe not text \xff")]);
    let r = run_env("ingest", &["--index", i, "--config", c, "--corpus", k, "--quiet"], ENV);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let (code, grown) = status(i, c, ENV);
    assert_eq!(code, 1);
    assert_eq!(grown["documents"], 4);
    let chunk = &counts(&grown)[0];
    assert_eq!(chunk.2 + chunk.3, 1, "one bucket to redo or compute: {grown:#}");
    assert_ne!(grown["kb"]["state"], "up_to_date", "{grown:#}");
    let failures = grown["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{grown:#}");
    assert_eq!((failures[0]["stage"].as_str(), failures[0]["kind"].as_str()), (Some("ingest"), Some("invalid_utf8")));

    // The runs then do exactly that: one chunk bucket done, the rest up to date.
    let r = run_env("chunk", &["--index", i, "--config", c], ENV);
    assert!(r.stderr.contains(" 1 done") || r.stderr.contains("up to date"), "{}", r.stderr);
    std::fs::remove_file(corpus.join("bad.txt")).unwrap();
    build(i, k, c, ENV);
    let (code, done) = status(i, c, ENV);
    assert_eq!(code, 0, "{done:#}");
    assert_eq!(done["kb"]["state"], "up_to_date");

    // A kb part deleted: named as such, not blamed on changed tables; the merge writes it again.
    let kb_part = std::fs::read_dir(index.join("kb/entities")).unwrap().next().unwrap().unwrap().path();
    let bucket = kb_part.file_stem().unwrap().to_str().unwrap().trim_start_matches("part-").to_owned();
    std::fs::remove_file(&kb_part).unwrap();
    let (code, deleted) = status(i, c, ENV);
    assert_eq!((code, deleted["kb"]["state"].as_str()), (1, Some("stale")), "{deleted:#}");
    assert_eq!(
        deleted["kb"]["problems"],
        serde_json::json!([format!(
            "bucket {bucket}: no readable part of kb/entities (deleted, damaged or never written)"
        )])
    );
    let person = run_env("status", &["--index", i, "--config", c], ENV);
    assert!(person.stdout.contains("kb: stale: a merge would rebuild (`make merge`):\n  bucket "), "{}", person.stdout);
    assert_eq!(run_env("merge", &["--index", i, "--config", c, "-q"], ENV).code, 0);
    assert_eq!(status(i, c, ENV).0, 0);

    // A stage's part lost: that bucket is missing there, and a merge would be refused, saying why.
    let items = index.join("items");
    let part = std::fs::read_dir(&items).unwrap().next().unwrap().unwrap().path();
    std::fs::remove_file(&part).unwrap();
    let (code, lost) = status(i, c, ENV);
    assert_eq!(code, 1);
    assert_eq!(counts(&lost)[1].3, 1, "{lost:#}");
    assert_eq!(lost["kb"]["state"], "incomplete");
    assert!(lost["kb"]["problems"][0].as_str().unwrap().contains("items lacks the rows"), "{lost:#}");
}
