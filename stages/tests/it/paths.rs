//! `flexstruct-paths` and `--mode paths` (SG-RAG) on the sample corpus: the path index as SQL
//! tables that agree with the kb, a rerun that does nothing, answers that say whether the
//! structure matched exactly, clear errors for a missing or stale path index, the trained GAT
//! encoder and its ablation against the sketch, and query graphs from the test LLM server.

use std::path::Path;

use flexstruct_testkit::{FakeLlm, Reply};
use serde_json::Value;

use crate::kb::{ENV, build, sample_corpus};
use crate::query::{copy_dir, fake_llm_env, questions_file, sample_index};
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

    let other_model = run_env("paths", &["--index", i, "--quiet"], &[("FLEXSTRUCT_EMBED__MODEL", "hashing-32")]);
    assert_eq!(other_model.code, 2, "{}", other_model.stderr);
    assert!(other_model.stderr.contains("built with embedding model `hashing-64`"), "{}", other_model.stderr);
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
    // The structure says what matched: the label of the node asked for, best subgraph first;
    // a fallback matched no label.
    assert_eq!(festival["structure"]["outcome"], "exact", "{festival:#}");
    assert_eq!(festival["structure"]["answers"][0], "Port Ellery", "{festival:#}");
    for a in &answers {
        let fell_back = a["structure"]["outcome"] != "exact";
        assert_eq!(fell_back, a["structure"]["answers"].as_array().unwrap().is_empty(), "{a:#}");
        assert_eq!(fell_back, !exact.iter().any(|e| e["id"] == a["id"]), "{a:#}");
    }

    // The evaluation scores it by SG-RAG's own measures beside the context measures; the other
    // strategies have none of them.
    let out = tmp.path().join("eval");
    let q = questions_file();
    let args = ["run", "--modes", "hybrid,paths", "--index", i, "--questions", q.to_str().unwrap()];
    let evaluated = run_env("eval", &[&args[..], &["--out", out.to_str().unwrap()]].concat(), &ENV);
    assert_eq!(evaluated.code, 0, "{}", evaluated.stderr);
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let share = 100.0 * exact.len() as f64 / answers.len() as f64;
    assert!((summary["paths"]["subgraph_exact"].as_f64().unwrap() - share).abs() < 0.01, "{summary:#}");
    let hit = summary["paths"]["subgraph_hit_at_1"].as_f64().unwrap();
    assert!(hit > 0.0 && hit <= summary["paths"]["subgraph_recall"].as_f64().unwrap(), "{summary:#}");
    assert!(summary["hybrid"]["subgraph_exact"].is_null() && summary["hybrid"]["subgraph_f1"].is_null());
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("## Structure matching (SG-RAG's measures)") && report.contains("| paths | factoid |"));
    assert!(!report.contains("| hybrid | all |"), "{report}");

    // The seed's GAT encoder instead of sketches: another configuration, so a rebuild; its
    // parameters a table; queries encode their stars with it without being told.
    let gat = [ENV[0], ("FLEXSTRUCT_PATHS__DOMINANCE", "gat"), ("FLEXSTRUCT_PATHS__GAT__STEPS", "40")];
    let trained = run_env("paths", &["--index", i], &gat);
    assert_eq!(trained.code, 0, "{}", trained.stderr);
    assert!(trained.stderr.contains("1 done") && trained.stderr.contains("dominance: \"gat\""), "{}", trained.stderr);
    let params = query(
        &index,
        "SELECT kind, param, n_rows * n_cols = array_length(weights) AS whole FROM kb.path_encoder ORDER BY param",
    );
    let names: Vec<&str> = params.iter().map(|r| r["param"].as_str().unwrap()).collect();
    assert_eq!(names, ["a_centre", "a_neighbour", "b_out", "w", "w_out"], "{params:?}");
    assert!(params.iter().all(|r| r["kind"] == "gat" && r["whole"] == true), "{params:?}");
    assert_eq!(scalar(&index, "SELECT count(*) FROM kb.path_nodes WHERE array_length(dominant) <> 64"), 0);
    let answered = paths_answers(&index);
    assert_eq!(answered.code, 0, "{}", answered.stderr);
    assert!(answered.stdout.lines().all(|l| l.contains("\"paths: ")), "{}", answered.stdout);

    // The ablation of the two, one command: the sketch never misses a true match.
    let ablation = run_env("paths", &["--index", i, "--ablate-dominance", "--json"], &gat);
    assert_eq!(ablation.code, 0, "{}", ablation.stderr);
    let rows: Vec<Value> = serde_json::from_str(&ablation.stdout).unwrap();
    assert_eq!(rows.len(), 2, "{rows:#?}");
    let (sketch, trained) = (&rows[0], &rows[1]);
    assert_eq!((sketch["dominance"].as_str(), trained["dominance"].as_str()), (Some("sketch"), Some("gat")));
    assert_eq!(sketch["violations_pct"], 0.0, "{sketch}");
    assert_eq!(sketch["missed_pct"], 0.0, "{sketch}");
    for r in &rows {
        assert!(r["stars"].as_u64().unwrap() > 100 && r["queries"].as_u64().unwrap() > 10, "{r}");
        let (pruned, prunable) = (r["pruned_pct"].as_f64().unwrap(), r["prunable_pct"].as_f64().unwrap());
        assert!(pruned > 50.0 && prunable > 50.0 && prunable <= 100.0, "{r}");
    }
    assert!(trained["train_seconds"].as_f64().unwrap() > 0.0, "{trained}");
    // Nothing written: the GAT index stays, and the default rebuilds the sketch one.
    assert_eq!(scalar(&index, "SELECT count(*) FROM kb.path_encoder WHERE kind = 'gat'"), 5);
    let back = run_env("paths", &["--index", i], &ENV);
    assert!(back.stderr.contains("1 done"), "{}", back.stderr);
    assert_eq!(scalar(&index, "SELECT count(*) FROM kb.path_encoder WHERE kind = 'sketch'"), 1);

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

#[test]
fn with_an_llm_the_query_graph_is_the_llm_s_and_an_unusable_one_falls_back_to_the_rules() {
    let server = FakeLlm::start(|request| {
        let user = request.last_user_message();
        if user.contains("ENTITIES FOUND IN IT:") && user.contains("Harbour Lights Festival") {
            Reply::content(
                r#"{"nodes": [{"name": "Harbour Lights Festival"}, {"name": null, "answer": true}],
                    "edges": [{"from": 0, "to": 1, "relation": "held in"}]}"#,
            )
        } else if user.contains("ENTITIES FOUND IN IT:") {
            Reply::content(r#"{"nodes": [{"name": "Nerys Pascoe"}, {"name": null}], "edges": [{"from": 0, "to": 5}]}"#)
        } else if user.contains("EVIDENCE:") {
            Reply::content("Answer: unknown\nThe evidence does not say.")
        } else {
            Reply::content(r#"{"entities": []}"#)
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    copy_dir(sample_index(), &index);
    let i = index.to_str().unwrap();
    assert_eq!(run_env("paths", &["--index", i, "--quiet"], &ENV).code, 0);
    let q = tmp.path().join("q.jsonl");
    std::fs::write(
        &q,
        "{\"id\": \"f\", \"question\": \"Where is the Harbour Lights Festival held?\"}\n\
         {\"id\": \"s\", \"question\": \"Who chairs the Harbour Lights Society?\"}\n",
    )
    .unwrap();
    let url = server.base_url();
    let out = run_env(
        "query",
        &["--index", i, "--mode", "paths", "--questions", q.to_str().unwrap(), "--jsonl"],
        &fake_llm_env(&url),
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let answers: Vec<Value> = out.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let notes = |a: &Value| -> Vec<String> {
        a["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_owned()).collect()
    };
    let festival = notes(&answers[0]);
    assert!(festival[0].starts_with("paths: exact match"), "{festival:?}");
    assert!(festival.contains(&"paths: the query graph is the LLM's".to_owned()), "{festival:?}");
    assert!(answers[0]["evidence"][0]["text"].as_str().unwrap().contains("Port Ellery"), "{:#}", answers[0]);
    let society = notes(&answers[1]);
    assert!(
        society.contains(
            &"paths: the LLM's query graph was unusable (an edge joins node 0 and node 5, of 2 nodes); the rules' instead"
                .to_owned()
        ),
        "{society:?}"
    );
    // The graph requests carried the question and its entities, and are recorded.
    let graph_requests: Vec<String> = server
        .requests()
        .into_iter()
        .map(|r| r.last_user_message())
        .filter(|m| m.contains("ENTITIES FOUND IN IT:"))
        .collect();
    assert_eq!(graph_requests.len(), 2, "{graph_requests:?}");
    assert!(graph_requests.iter().any(|m| m.starts_with("QUESTION: Where is the Harbour Lights Festival held?")));
    let calls = scalar(&index, "SELECT count(*) FROM llm_calls WHERE purpose = 'query_graph' AND status = 'ok'");
    assert_eq!(calls, 2);
}
