//! extract → hypergraph → graph through the real binaries on the bundled sample corpus.

use std::path::{Path, PathBuf};

use crate::util::*;

fn sample_corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/sample/corpus")
}

fn build(index: &Path, extra: &[&str]) -> Vec<Run> {
    let i = index.to_str().unwrap();
    let mut runs = vec![run("ingest", &["--index", i, "--corpus", sample_corpus().to_str().unwrap(), "--quiet"])];
    for stage in ["chunk", "extract", "hypergraph", "graph"] {
        let mut args = vec!["--index", i];
        args.extend_from_slice(extra);
        runs.push(run(stage, &args));
    }
    for r in &runs {
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    runs
}

#[test]
fn the_sample_corpus_becomes_a_consistent_hypergraph_and_graph() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    build(&index, &[]);

    // Every chunk produced items; every item's span is located and reproduces the document text.
    assert_eq!(
        scalar(
            &index,
            "SELECT count(*) FROM chunks c LEFT JOIN items i USING (doc_id, chunk_idx) WHERE i.item_idx IS NULL"
        ),
        0
    );
    assert_eq!(scalar(&index, "SELECT count(*) FROM items WHERE ref_start IS NULL"), 0);
    assert_eq!(
        scalar(
            &index,
            "SELECT count(*) FROM items i JOIN documents d USING (doc_id) \
                        WHERE substr(d.text, i.ref_start + 1, i.ref_end - i.ref_start) <> i.ref_text"
        ),
        0
    );
    assert_eq!(scalar(&index, "SELECT count(DISTINCT extractor) FROM items WHERE extractor = 'rules'"), 1);
    // Item indexes run 0..n per document, in chunk order.
    assert_eq!(
        scalar(
            &index,
            "SELECT count(*) FROM (SELECT doc_id, max(item_idx) + 1 AS m, count(*) AS n FROM items GROUP BY doc_id) WHERE m <> n"
        ),
        0
    );

    // One hyperedge per item; incidences point at existing entities; hyperdegree = incidences.
    assert_eq!(scalar(&index, "SELECT (SELECT count(*) FROM items) - (SELECT count(*) FROM hyperedges)"), 0);
    assert_eq!(
        scalar(
            &index,
            "SELECT count(*) FROM hyperedge_entities x LEFT JOIN entities e USING (entity_id) WHERE e.name IS NULL"
        ),
        0
    );
    assert_eq!(
        scalar(
            &index,
            "SELECT count(*) FROM entities e JOIN (SELECT entity_id, count(*) AS n FROM hyperedge_entities \
                        GROUP BY entity_id) x USING (entity_id) WHERE x.n <> e.hyperdegree"
        ),
        0
    );
    // Aliases: the acronym and the long name are one entity.
    let kvwa = query(&index, "SELECT name, aliases FROM entities WHERE norm_name = 'kestrel valley water authority'");
    assert_eq!(kvwa.len(), 1);
    assert!(kvwa[0]["aliases"].as_array().unwrap().iter().any(|a| a == "KVWA"), "{kvwa:?}");
    assert_eq!(scalar(&index, "SELECT count(*) FROM entities WHERE norm_name = 'kvwa'"), 0);

    // Edges join entities of the same document, one end an anchor, each tied to a hyperedge
    // whose span contains the edge text.
    assert!(scalar(&index, "SELECT count(*) FROM edges").as_i64().unwrap() > 0);
    assert_eq!(
        scalar(
            &index,
            "SELECT count(*) FROM edges e JOIN entities s ON s.entity_id = e.source_id \
                        JOIN entities t ON t.entity_id = e.target_id \
                        JOIN hyperedges h ON h.hyperedge_id = e.hyperedge_id \
                        WHERE s.hyperdegree <= 3 AND t.hyperdegree <= 3 OR strpos(h.ref_text, e.text) = 0 \
                        OR s.doc_id <> e.doc_id OR t.doc_id <> e.doc_id"
        ),
        0
    );
    assert_eq!(
        scalar(
            &index,
            "SELECT count(*) FROM edges e LEFT JOIN entities s ON s.entity_id = e.source_id WHERE s.name IS NULL"
        ),
        0
    );
}

#[test]
fn construction_reruns_are_free_and_config_changes_rerun_what_they_affect() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    build(&index, &[]);
    let before = data_files(&index);
    let runs = build(&index, &[]);
    for r in &runs[1..] {
        assert!(r.stderr.contains(" 0 done,"), "{}", r.stderr);
    }
    assert_eq!(before, data_files(&index));

    // Turning the window off reruns extraction (and what follows), nothing before it.
    let i = index.to_str().unwrap();
    let off = run_env("extract", &["--index", i], &[("FLEXSTRUCT_EXTRACT__WINDOW", "false")]);
    assert_eq!(off.code, 0, "{}", off.stderr);
    assert!(!off.stderr.contains(" 0 done,"), "{}", off.stderr);
    let chunk = run("chunk", &["--index", i]);
    assert!(chunk.stderr.contains(" 0 done,"), "{}", chunk.stderr);

    // A higher tau_e gives fewer edges.
    let edges_before = scalar(&index, "SELECT count(*) FROM edges").as_i64().unwrap();
    let graph = run_env("graph", &["--index", i], &[("FLEXSTRUCT_GRAPH__TAU_E", "5")]);
    assert_eq!(graph.code, 0, "{}", graph.stderr);
    assert!(scalar(&index, "SELECT count(*) FROM edges").as_i64().unwrap() < edges_before);
}

#[test]
fn errors_say_what_is_wrong_and_the_binaries_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    build(&index, &[]);
    let i = index.to_str().unwrap();
    // The library names the missing file; the binary adds the make target that fetches it.
    let out = run_env("embed", &["--index", i], &[("FLEXSTRUCT_EMBED__MODEL_DIR", "no/such/model")]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("no/such/model/config.json is missing"), "{}", out.stderr);
    assert!(out.stderr.contains("hint: run `make model`"), "{}", out.stderr);
    // An LLM backend without an [llm] section is refused, naming the key.
    let out = run_env("extract", &["--index", i], &[("FLEXSTRUCT_BACKENDS__EXTRACT", "llm")]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("backends.extract") && out.stderr.contains("no [llm] section"), "{}", out.stderr);
    // The metrics name the backend of each stage.
    let out = run("hypergraph", &["--index", i]);
    assert!(out.stderr.contains(r#"summaries: {"backend":"rules","version":"1"}"#), "{}", out.stderr);
}
