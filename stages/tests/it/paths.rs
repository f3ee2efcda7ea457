//! `flexstruct-paths` and `--mode paths` (SG-RAG) on the sample corpus: the path index as SQL
//! tables that agree with the kb, a rerun that does nothing, answers that say whether the
//! structure matched exactly, and clear errors for a missing or stale path index.

use std::path::Path;

use serde_json::Value;

use crate::kb::{ENV, build, sample_corpus};
use crate::query::questions_file;
use crate::util::*;

fn paths_answers(index: &Path) -> Run {
    let i = index.to_str().unwrap();
    let q = questions_file();
    run_env("query", &["--index", i, "--mode", "paths", "--questions", q.to_str().unwrap(), "--jsonl"], &ENV)
}

#[test]
fn the_path_index_agrees_with_the_kb_and_answers_say_how_the_structure_matched() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for entry in std::fs::read_dir(sample_corpus()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), corpus.join(entry.file_name())).unwrap();
    }
    let index = tmp.path().join("index");
    build(&index, &corpus, false);
    let i = index.to_str().unwrap();

    // Before the path index exists: a clear error and what to do.
    let missing = paths_answers(&index);
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    assert!(missing.stderr.contains("has no path index"), "{}", missing.stderr);
    assert!(missing.stderr.contains("hint: build it with `make paths`"), "{}", missing.stderr);
    let sharded = run_env("paths", &["--index", i, "--shard", "1/2"], &ENV);
    assert_eq!(sharded.code, 2, "{}", sharded.stderr);
    assert!(sharded.stderr.contains("whole kb in one run"), "{}", sharded.stderr);

    let built = run_env("paths", &["--index", i], &ENV);
    assert_eq!(built.code, 0, "{}", built.stderr);
    assert!(built.stderr.contains("1 done"), "{}", built.stderr);
    let again = run_env("paths", &["--index", i], &ENV);
    assert!(again.stderr.contains("0 done, 1 up to date"), "{}", again.stderr);

    // Nodes are the kb's entity names; every path's members add up to its length, follow kb
    // edges between its nodes, and name no node twice.
    let names = scalar(&index, "SELECT count(DISTINCT norm_name) FROM kb.entities WHERE norm_name <> ''");
    assert_eq!(scalar(&index, "SELECT count(*) FROM kb.path_nodes"), names);
    let lengths = query(&index, "SELECT length, count(*) AS n FROM kb.paths GROUP BY length ORDER BY length");
    assert_eq!(lengths.iter().map(|r| r["length"].as_i64().unwrap()).collect::<Vec<_>>(), vec![1, 2, 3], "{lengths:?}");
    let wrong = "SELECT count(*) FROM kb.paths p JOIN (SELECT path_id, count(*) AS members, count(DISTINCT node_id) AS nodes \
                 FROM kb.path_members GROUP BY path_id) m ON p.path_id = m.path_id \
                 WHERE m.members <> p.length + 1 OR m.nodes <> m.members";
    assert_eq!(scalar(&index, wrong), 0);
    let hops = "WITH hops AS (SELECT m.edge_id, a.norm_name AS an, b.norm_name AS bn FROM kb.path_members m \
                JOIN kb.path_members prev ON m.path_id = prev.path_id AND m.position = prev.position + 1 \
                JOIN kb.path_nodes a ON prev.node_id = a.node_id JOIN kb.path_nodes b ON m.node_id = b.node_id), \
                ends AS (SELECT e.edge_id, s.norm_name AS sn, t.norm_name AS tn FROM kb.edges e \
                JOIN kb.entities s ON e.source_id = s.entity_id JOIN kb.entities t ON e.target_id = t.entity_id) \
                SELECT count(*) AS hops, count(ends.edge_id) AS along_their_edge FROM hops LEFT JOIN ends \
                ON hops.edge_id = ends.edge_id AND ((ends.sn = hops.an AND ends.tn = hops.bn) OR (ends.sn = hops.bn AND ends.tn = hops.an))";
    let hops = &query(&index, hops)[0];
    assert!(hops["hops"].as_i64().unwrap() > 0 && hops["hops"] == hops["along_their_edge"], "{hops}");

    // Every answer says whether the question's graph matched exactly or fell back, and the
    // exact matches give cited evidence.
    let answered = paths_answers(&index);
    assert_eq!(answered.code, 0, "{}", answered.stderr);
    let answers: Vec<Value> = answered.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(answers.len(), 12);
    let note = |a: &Value| a["notes"][0].as_str().unwrap_or_default().to_owned();
    assert!(answers.iter().all(|a| note(a).starts_with("paths: ")), "{answers:#?}");
    let exact: Vec<&Value> = answers.iter().filter(|a| note(a).starts_with("paths: exact match")).collect();
    assert!(!exact.is_empty() && exact.len() < answers.len(), "some match exactly, some fall back");
    for a in &exact {
        let evidence = a["evidence"].as_array().unwrap();
        assert!(!evidence.is_empty() && evidence.iter().all(|e| !e["spans"].as_array().unwrap().is_empty()), "{a:#}");
    }
    let festival = answers.iter().find(|a| a["question"] == "Where is the Harbour Lights Festival held?").unwrap();
    assert!(note(festival).starts_with("paths: exact match"), "{festival:#}");
    assert!(festival["evidence"][0]["text"].as_str().unwrap().contains("Port Ellery"), "{festival:#}");

    // A new document changes the kb: the path index is refused as stale until rebuilt.
    write_files(
        &corpus,
        &[(
            "zz-new.txt",
            "The Harlow Ferry runs from Port Ellery to Skerry Head. Mara Quint built the Harlow Ferry.".as_bytes(),
        )],
    );
    build(&index, &corpus, false);
    let stale = paths_answers(&index);
    assert_eq!(stale.code, 2, "{}", stale.stderr);
    assert!(stale.stderr.contains("built from another kb"), "{}", stale.stderr);
    assert_eq!(run_env("paths", &["--index", i], &ENV).code, 0);
    assert_eq!(paths_answers(&index).code, 0);
}
