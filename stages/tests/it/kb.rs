//! embed → cluster → merge through the real binaries: vectors for every unit, SSC clusters, the
//! merged kb with aliases and statistics, idempotence, and incremental = full rebuild.

use std::path::{Path, PathBuf};

use crate::util::*;

const STAGES: [&str; 8] = ["chunk", "extract", "hypergraph", "graph", "embed", "cluster", "merge", ""];

pub(crate) fn sample_corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/sample/corpus")
}

/// Hashing vectors keep these tests fast; MiniLM itself is tested against reference vectors.
pub(crate) const ENV: [(&str, &str); 1] = [("FLEXSTRUCT_EMBED__MODEL", "hashing-64")];

pub(crate) fn build(index: &Path, corpus: &Path, prune: bool) -> Vec<Run> {
    let i = index.to_str().unwrap();
    let mut ingest = vec!["--index", i, "--corpus", corpus.to_str().unwrap()];
    if prune {
        ingest.push("--prune");
    }
    let mut runs = vec![run_env("ingest", &ingest, &ENV)];
    for stage in STAGES.iter().filter(|s| !s.is_empty()) {
        runs.push(run_env(stage, &["--index", i], &ENV));
    }
    for r in &runs {
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    runs
}

/// Every row of every kb table, each table in a fixed order.
pub(crate) fn kb_dump(index: &Path) -> Vec<Vec<serde_json::Value>> {
    [
        "entities",
        "hyperedges",
        "edges",
        "chunks",
        "hyperedge_entities",
        "clusters",
        "cluster_members",
        "aliases",
        "doc_stats",
    ]
    .iter()
    .map(|t| {
        // Aliases are unique only with their origin.
        let order = if *t == "aliases" { "1, 2, 3, 4" } else { "1, 2, 3" };
        query(index, &format!("SELECT * FROM kb.{t} ORDER BY {order}"))
    })
    .collect()
}

#[test]
fn the_kb_holds_every_unit_with_its_vector_and_reruns_are_free() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    build(&index, &sample_corpus(), false);

    let units = scalar(
        &index,
        "SELECT (SELECT count(*) FROM hyperedges) + (SELECT count(*) FROM edges) + (SELECT count(*) FROM entities) \
         + (SELECT count(*) FROM chunks) - (SELECT count(*) FROM embeddings WHERE model = 'hashing-64')",
    );
    assert_eq!(units, 0);
    for (kb, table) in
        [("entities", "entities"), ("hyperedges", "hyperedges"), ("edges", "edges"), ("chunks", "chunks")]
    {
        let diff = scalar(
            &index,
            &format!(
                "SELECT (SELECT count(*) FROM kb.{kb} WHERE embedding IS NOT NULL) - (SELECT count(*) FROM {table})"
            ),
        );
        assert_eq!(diff, 0, "kb.{kb}");
    }
    // Clusters: members exist, texts are their spans in extraction order.
    assert!(scalar(&index, "SELECT count(*) FROM kb.clusters").as_i64().unwrap() > 0);
    let mismatched = scalar(
        &index,
        "SELECT count(*) FROM kb.clusters c JOIN (SELECT m.cluster_id, string_agg(trim(h.ref_text), '\n' ORDER BY h.item_idx) AS t \
         FROM kb.cluster_members m JOIN kb.hyperedges h USING (hyperedge_id) GROUP BY m.cluster_id) x USING (cluster_id) WHERE x.t <> c.text",
    );
    assert_eq!(mismatched, 0);
    // Aliases: the abbreviation names the authority; stats agree with the tables.
    let kvwa = query(
        &index,
        "SELECT DISTINCT e.name FROM kb.aliases a JOIN kb.entities e USING (entity_id) WHERE a.alias = 'kvwa'",
    );
    assert_eq!(kvwa.len(), 1);
    assert_eq!(kvwa[0]["name"], "Kestrel Valley Water Authority");
    assert_eq!(scalar(&index, "SELECT sum(n_items) - (SELECT count(*) FROM items) FROM kb.doc_stats"), 0);
    insta::assert_snapshot!("kb_aliases_beyond_names", run("sql", &["--index", index.to_str().unwrap(), "--format", "csv", "SELECT a.alias, e.name, a.origin FROM kb.aliases a JOIN kb.entities e USING (entity_id) JOIN documents d ON d.doc_id = a.doc_id WHERE d.title LIKE 'The Kestrel%' AND a.origin <> 'name' ORDER BY a.alias, a.origin"]).stdout);
    insta::assert_snapshot!("kb_doc_stats", run("sql", &["--index", index.to_str().unwrap(), "--format", "csv", "SELECT d.title, s.n_chunks, s.n_items, s.n_hyperedges, s.n_entities, s.n_edges, s.n_clusters FROM kb.doc_stats s JOIN documents d USING (doc_id) ORDER BY d.title"]).stdout);

    // A second pass: nothing is embedded again, merge is skipped, no data file changes.
    let before = data_files(&index);
    let runs = build(&index, &sample_corpus(), false);
    assert!(runs[5].stderr.contains("embedded: 0"), "{}", runs[5].stderr);
    // Five buckets hold the sample's documents; the sixth unit is the global step.
    assert!(runs[7].stderr.contains("0 done, 6 up to date"), "{}", runs[7].stderr);
    assert_eq!(before, data_files(&index));

    // A moved index is still up to date.
    let moved = tmp.path().join("moved");
    std::fs::rename(&index, &moved).unwrap();
    let merge = run_env("merge", &["--index", moved.to_str().unwrap()], &ENV);
    assert!(merge.stderr.contains("0 done, 6 up to date"), "{}", merge.stderr);
}

#[test]
fn cutting_entity_summaries_reembeds_entities_only() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    build(&index, &sample_corpus(), false);
    let hashes = |unit: &str| {
        query(&index, &format!("SELECT id, input_sha256 FROM embeddings WHERE unit {unit} 'entity' ORDER BY unit, id"))
    };
    let (others, entities) = (hashes("<>"), hashes("="));
    // Summaries that eight words do not cover (a text ending after its eighth word loses its end).
    let long = query(&index, "SELECT summary FROM entities")
        .iter()
        .filter(|row| {
            let summary = row["summary"].as_str().unwrap();
            let words = summary.split_whitespace().count();
            words > 8 || (words == 8 && summary.trim_end() != summary)
        })
        .count();
    assert!(long > 0, "the sample has summaries of more than eight words");

    let i = index.to_str().unwrap();
    let cut = [ENV[0], ("FLEXSTRUCT_EMBED__ENTITY_SUMMARY_WORDS", "8")];
    let embed = run_env("embed", &["--index", i], &cut);
    assert_eq!(embed.code, 0, "{}", embed.stderr);
    assert!(embed.stderr.contains(&format!("embedded: {long}")), "{long}: {}", embed.stderr);
    assert_eq!(hashes("<>"), others, "hyperedges, edges and chunks keep their vectors");
    let changed = hashes("=").iter().zip(&entities).filter(|(a, b)| a != b).count();
    assert_eq!(changed, long);
    // The summaries themselves are whole, the kb is merged as before, and a rerun is free.
    assert_eq!(run_env("merge", &["--index", i], &cut).code, 0);
    assert!(run_env("embed", &["--index", i], &cut).stderr.contains("embedded: 0"));
    assert_eq!(scalar(&index, "SELECT count(*) FROM kb.entities WHERE embedding IS NULL"), 0);
}

#[test]
fn removing_a_document_and_merging_equals_a_rebuild_without_it() {
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full");
    build(&full, &sample_corpus(), false);

    // The same corpus without one document, built from scratch…
    let smaller = tmp.path().join("smaller-corpus");
    std::fs::create_dir_all(&smaller).unwrap();
    for entry in std::fs::read_dir(sample_corpus()).unwrap() {
        let path = entry.unwrap().path();
        if !path.file_name().unwrap().to_str().unwrap().starts_with("tessellate") {
            std::fs::copy(&path, smaller.join(path.file_name().unwrap())).unwrap();
        }
    }
    let rebuilt = tmp.path().join("rebuilt");
    build(&rebuilt, &smaller, false);

    // …and the full index with that document pruned and every stage rerun incrementally.
    build(&full, &smaller, true);
    assert_eq!(kb_dump(&full), kb_dump(&rebuilt));
    assert_eq!(scalar(&full, "SELECT count(*) FROM kb.doc_stats"), 4);
}

#[test]
fn an_edit_near_the_top_of_a_document_reembeds_only_the_texts_it_changed() {
    let tmp = tempfile::tempdir().unwrap();
    // The sample as one JSONL file with given ids, so that an edited document keeps its id (a
    // text file's id is derived from its content).
    let corpus = tmp.path().join("corpus.jsonl");
    let write_corpus = |edit: &dyn Fn(&str) -> String| {
        let mut lines = String::new();
        let mut files: Vec<PathBuf> =
            std::fs::read_dir(sample_corpus()).unwrap().map(|entry| entry.unwrap().path()).collect();
        files.sort();
        for path in files {
            let id = path.file_stem().unwrap().to_str().unwrap().to_owned();
            let mut text = std::fs::read_to_string(&path).unwrap();
            if id == "marrow-fen-restoration" {
                text = edit(&text);
            }
            lines.push_str(&serde_json::json!({ "doc_id": id, "text": text }).to_string());
            lines.push('\n');
        }
        std::fs::write(&corpus, lines).unwrap();
    };
    write_corpus(&|text| text.to_owned());
    let index = tmp.path().join("index");
    build(&index, &corpus, false);
    let hyperedges = |index: &Path| {
        query(
            index,
            "SELECT hyperedge_id, text FROM hyperedges WHERE doc_id = 'marrow-fen-restoration' ORDER BY item_idx",
        )
    };
    let texts = |index: &Path| -> std::collections::BTreeSet<String> {
        query(index, "SELECT DISTINCT input_sha256 FROM embeddings")
            .iter()
            .map(|row| row["input_sha256"].as_str().unwrap().to_owned())
            .collect()
    };
    let (before, old_texts) = (hyperedges(&index), texts(&index));

    // One sentence more under the title: every hyperedge after it is renumbered, and so renamed.
    write_corpus(&|text| {
        let (title, rest) = text.split_once("\n\n").unwrap();
        format!("{title}\n\nA shorter version appeared in the Eastmere Bulletin in 2019.\n\n{rest}")
    });
    let runs = build(&index, &corpus, false);
    let moved = hyperedges(&index)
        .iter()
        .filter(|h| before.iter().any(|b| b["text"] == h["text"] && b["hyperedge_id"] != h["hyperedge_id"]))
        .count();
    assert!(moved * 10 >= before.len() * 9, "{moved} of {} hyperedges renamed", before.len());

    // Only the texts the previous run had no vector for were embedded.
    let embed = &runs[5].stderr;
    let figure = |name: &str| -> usize {
        let line = embed.lines().find(|l| l.contains(&format!(" {name}: "))).unwrap();
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let new_texts = texts(&index).difference(&old_texts).count();
    assert_eq!(figure("embedded") - figure("identical"), new_texts, "{embed}");
    assert!(new_texts > 0 && new_texts * 3 < moved, "{new_texts} texts embedded, {moved} hyperedges renamed");
    assert!(figure("reused") > moved, "{embed}");

    // The vectors kept are those a build from nothing gives: the kb is the same.
    let fresh = tmp.path().join("fresh");
    build(&fresh, &corpus, false);
    assert_eq!(kb_dump(&index), kb_dump(&fresh));
}

#[test]
fn a_sharded_merge_equals_one_merge_and_a_new_document_rewrites_only_its_bucket() {
    let tmp = tempfile::tempdir().unwrap();
    let single = tmp.path().join("single");
    build(&single, &sample_corpus(), false);
    let sharded = tmp.path().join("sharded");
    let s = sharded.to_str().unwrap();
    let ingest = run_env("ingest", &["--index", s, "--corpus", sample_corpus().to_str().unwrap(), "-q"], &ENV);
    assert_eq!(ingest.code, 0, "{}", ingest.stderr);
    for stage in STAGES.iter().filter(|s| !s.is_empty()) {
        for shard in ["0/2", "1/2"] {
            let r = run_env(stage, &["--index", s, "--shard", shard, "-q"], &ENV);
            assert_eq!(r.code, 0, "{stage} {shard}: {}", r.stderr);
        }
    }
    // Before the global step the kb is refused (its thresholds are missing); after, it is whole.
    let q = run_env("query", &["--index", s, "Who chairs the Kestrel Valley Water Authority?"], &ENV);
    assert_eq!(q.code, 2, "{}", q.stderr);
    let global = run_env("merge", &["--index", s], &ENV);
    assert!(global.stderr.contains("1 done"), "{}", global.stderr);
    assert_eq!(kb_dump(&sharded), kb_dump(&single));
    assert_eq!(query(&sharded, "SELECT * FROM kb.thresholds"), query(&single, "SELECT * FROM kb.thresholds"));
    // The global step also wrote the vector files, the same as one merge's.
    for table in ["entities", "hyperedges", "edges", "chunks"] {
        let file = format!("kb/{table}/vectors.f32");
        let (a, b) = (std::fs::read(sharded.join(&file)).unwrap(), std::fs::read(single.join(&file)).unwrap());
        assert!(a == b && a.starts_with(b"flexstruct vectors 1\n"), "{file}");
    }

    // One more document: only its bucket's kb parts and the global thresholds are rewritten.
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for entry in std::fs::read_dir(sample_corpus()).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, corpus.join(path.file_name().unwrap())).unwrap();
    }
    write_files(
        &corpus,
        &[("zz-new.txt", b"The Orlen ferry was launched in 1998 by Ilse Brandt. It carries 40 cars.")],
    );
    let before = data_files(&single);
    build(&single, &corpus, false);
    let after = data_files(&single);
    let changed: Vec<&String> =
        after.keys().filter(|k| k.starts_with("kb/") && before.get(*k) != after.get(*k)).collect();
    let global = |k: &&&String| k.starts_with("kb/thresholds") || k.ends_with("/vectors.f32");
    let buckets: std::collections::BTreeSet<&str> =
        changed.iter().filter(|k| !global(k)).map(|k| k.rsplit('/').next().unwrap()).collect();
    assert_eq!(buckets.len(), 1, "kb parts rewritten: {changed:?}");
    assert!(changed.iter().any(|k| k.starts_with("kb/thresholds")), "{changed:?}");
    assert_eq!(changed.iter().filter(|k| k.ends_with("/vectors.f32")).count(), 4, "{changed:?}");
    assert_eq!(changed.len(), 14, "nine bucketed kb tables, the thresholds, four vector files: {changed:?}");
}

#[test]
fn large_tables_are_searched_through_the_approximate_index_the_merge_builds() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    build(&index, &sample_corpus(), false);
    let (i, questions) = (index.to_str().unwrap(), crate::query::questions_file());
    // The answers to the sample questions without their timings, and what the query said.
    let answers = |extra: &[(&str, &str)], name: &str| {
        let out = tmp.path().join(name);
        let mut env = ENV.to_vec();
        env.extend(extra);
        let args = ["--index", i, "--questions", questions.to_str().unwrap(), "--out", out.to_str().unwrap()];
        let run = run_env("query", &args, &env);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let rows: Vec<serde_json::Value> = std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|l| {
                let mut row: serde_json::Value = serde_json::from_str(l).unwrap();
                row.as_object_mut().unwrap().retain(|key, _| !key.ends_with("_ms"));
                row
            })
            .collect();
        (rows, run.stderr)
    };
    let (exact, said) = answers(&[], "exact.jsonl");
    assert!(!said.contains("approximate"), "{said}");

    // Tables of at least 30 rows get an approximate index at merge; the others none.
    let ann = ("FLEXSTRUCT_ANN__MIN_ROWS", "30");
    let merge = run_env("merge", &["--index", i], &[ENV[0], ann]);
    assert_eq!(merge.code, 0, "{}", merge.stderr);
    let rows = |table: &str| scalar(&index, &format!("SELECT count(*) FROM kb.{table}")).as_u64().unwrap();
    let file = |table: &str| index.join(format!("kb/{table}/vectors.ivf"));
    for table in ["entities", "hyperedges", "edges", "chunks"] {
        assert_eq!(file(table).is_file(), rows(table) >= 30, "{table}: {} rows", rows(table));
    }
    assert!(file("hyperedges").is_file() && file("entities").is_file());
    // The default 96 probes cover every one of √rows lists of a table this small: the exact answers.
    let (approximate, said) = answers(&[ann], "approximate.jsonl");
    assert!(said.contains("query: kb/hyperedges: approximate ("), "{said}");
    assert_eq!(approximate, exact);
    // One list probed per question: fewer candidates, so some evidence differs from the exact
    // scan's (a probe count that were not applied would give the exact answers).
    let (one, said) = answers(&[ann, ("FLEXSTRUCT_ANN__PROBES", "1")], "one.jsonl");
    assert!(said.contains("lists, 1 probed)"), "{said}");
    assert_eq!(one.len(), exact.len());
    let evidence = |rows: &[serde_json::Value]| rows.iter().map(|r| r["evidence"].clone()).collect::<Vec<_>>();
    assert_ne!(evidence(&one), evidence(&exact));
    // Without a current index the table is scanned exactly, and the query says why; the next
    // merge builds it again, and only it.
    std::fs::remove_file(file("hyperedges")).unwrap();
    let (fallback, said) = answers(&[ann], "fallback.jsonl");
    assert!(said.contains("kb/hyperedges: exact (no current approximate index"), "{said}");
    assert_eq!(fallback, exact);
    let merge = run_env("merge", &["--index", i], &[ENV[0], ann]);
    assert_eq!(merge.code, 0, "{}", merge.stderr);
    assert!(file("hyperedges").is_file());
    let bad = run_env("query", &["--index", i, "a question?"], &[ENV[0], ("FLEXSTRUCT_ANN__PROBES", "0")]);
    assert!(bad.code != 0 && bad.stderr.contains("ann.probes"), "{}", bad.stderr);
}
