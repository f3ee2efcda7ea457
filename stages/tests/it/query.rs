//! The query binary on the sample corpus: cited answers for one question and for a questions
//! file (JSONL + Parquet), every mode and toggle, clear errors, and answers from the test LLM
//! server with their citations and call records.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use flexstruct_testkit::{FakeLlm, Reply};
use serde_json::Value;

use crate::kb::{ENV, build, sample_corpus};
use crate::util::*;

/// The sample corpus indexed once (rules backend, hashing vectors) for every test that only
/// reads it.
pub(crate) fn sample_index() -> &'static Path {
    static INDEX: OnceLock<PathBuf> = OnceLock::new();
    INDEX.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let index = dir.join("index");
        build(&index, &sample_corpus(), false);
        index
    })
}

pub(crate) fn questions_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/sample/questions.jsonl")
}

fn query_env(args: &[&str], extra: &[(&str, &str)]) -> Run {
    let index = sample_index().to_str().unwrap();
    let mut all = vec!["--index", index];
    all.extend(args);
    let mut env = ENV.to_vec();
    env.extend(extra);
    run_env("query", &all, &env)
}

fn answers(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The code points `start..end` of a document of the sample index.
fn source(doc_id: &str, start: i64, end: i64) -> String {
    let rows = query(sample_index(), &format!("SELECT text FROM documents WHERE doc_id = '{doc_id}'"));
    rows[0]["text"].as_str().unwrap().chars().skip(start as usize).take((end - start) as usize).collect()
}

#[test]
fn one_question_prints_the_answer_and_its_cited_source() {
    let out = query_env(&["In what year was the trawler Morning Star lost?"], &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let mut lines = out.stdout.lines();
    assert_eq!(lines.next(), Some("Q: In what year was the trawler Morning Star lost?"));
    let answer = lines.next().unwrap();
    assert!(answer.starts_with("A: ") && answer.contains("1952"), "{}", out.stdout);
    assert!(out.stdout.contains("cited: doc-36cfe2cc0f44aeef ["), "{}", out.stdout);
    assert!(out.stdout.contains("Evidence (hybrid, "), "{}", out.stdout);
    assert!(out.stderr.contains("retrieval p50"), "{}", out.stderr);
}

#[test]
fn a_questions_file_gives_cited_answers_as_jsonl_and_parquet() {
    let tmp = tempfile::tempdir().unwrap();
    let out_path = tmp.path().join("answers.jsonl");
    let out = query_env(
        &["--questions", questions_file().to_str().unwrap(), "--out", out_path.to_str().unwrap(), "--quiet"],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let answers = answers(&out_path);
    assert_eq!(answers.len(), 12);
    for a in &answers {
        for key in [
            "id",
            "question",
            "mode",
            "answer",
            "context_tokens",
            "retrieval_ms",
            "generation_ms",
            "evidence",
            "citations",
        ] {
            assert!(a.get(key).is_some(), "{key} missing in {a}");
        }
        assert_eq!(a["mode"], "hybrid");
        assert_eq!(a["generator"], "extractive");
        let context_tokens = a["context_tokens"].as_u64().unwrap();
        assert!(context_tokens > 0 && context_tokens <= 12_000);
        // The extractive answer (a sentence, or the sentence a short answer comes from) is exactly
        // the text its citations point at.
        let c = &a["citations"][0];
        let cited = source(c["doc_id"].as_str().unwrap(), c["start"].as_i64().unwrap(), c["end"].as_i64().unwrap());
        let answer = a["answer"].as_str().unwrap();
        match a.get("support") {
            Some(support) => {
                assert_eq!(cited, support.as_str().unwrap());
                // A short answer is in its support, or (a choice) one of the question's options.
                let lower = answer.to_lowercase();
                let question = a["question"].as_str().unwrap().to_lowercase();
                assert!(
                    answer == "yes"
                        || answer == "no"
                        || cited.to_lowercase().contains(&lower)
                        || question.contains(&lower),
                    "{a}"
                );
            }
            // A sentence, or (a question of two asks) the cited sentences in turn.
            None => {
                let all: Vec<String> = a["citations"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| {
                        source(c["doc_id"].as_str().unwrap(), c["start"].as_i64().unwrap(), c["end"].as_i64().unwrap())
                    })
                    .collect();
                assert!(cited == answer || all.join(" ") == answer, "{a}");
            }
        }
        // A chunk's span is its text; a hyperedge's span is its verbatim reference text.
        for e in a["evidence"].as_array().unwrap() {
            let text =
                || source(e["doc_id"].as_str().unwrap(), e["start"].as_i64().unwrap(), e["end"].as_i64().unwrap());
            if e["unit"] == "chunk" {
                assert_eq!(text(), e["text"].as_str().unwrap(), "{e}");
            } else if e["unit"] == "hyperedge" {
                let id = e["id"].as_str().unwrap();
                let reference =
                    query(sample_index(), &format!("SELECT ref_text FROM kb.hyperedges WHERE hyperedge_id = '{id}'"));
                assert_eq!(text(), reference[0]["ref_text"].as_str().unwrap(), "{e}");
            }
        }
    }

    let file = std::fs::File::open(tmp.path().join("answers.parquet")).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap();
    let batches: Vec<_> = reader.map(Result::unwrap).collect();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 12);
    assert_eq!(batches[0].schema().fields(), flexstruct_schemas::answers_schema().fields());
}

#[test]
fn every_mode_and_toggle_runs_on_the_same_index() {
    let question = "Who is the chair of the Port Ellery Harbour Lights Society?";
    let units_env = |args: &[&str], env: &[(&str, &str)]| {
        let tmp = tempfile::tempdir().unwrap();
        let out_path = tmp.path().join("a.jsonl");
        let q = tmp.path().join("q.jsonl");
        std::fs::write(&q, serde_json::json!({"id": "x", "question": question}).to_string()).unwrap();
        let mut all = vec!["--questions", q.to_str().unwrap(), "--out", out_path.to_str().unwrap(), "--quiet"];
        all.extend(args);
        let out = query_env(&all, env);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let a = answers(&out_path).remove(0);
        let mut units: Vec<String> =
            a["evidence"].as_array().unwrap().iter().map(|e| e["unit"].as_str().unwrap().to_owned()).collect();
        units.sort();
        units.dedup();
        (a["variant"].as_str().unwrap().to_owned(), units)
    };
    let units = |args: &[&str]| units_env(args, &[]);
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // The fused assembly gives passages (hyperedges with their neighbours, merged); the paper's
    // gives each module's units, and the edges retrieved here state facts whose source sentences
    // are already in the context (as hyperedges), so they add nothing and are left out.
    assert_eq!(units(&[]), ("hybrid".into(), s(&["passage"])));
    assert_eq!(units(&["--no-bridges", "--no-lexical"]), ("hybrid w/o BR+LR".into(), s(&["passage"])));
    assert_eq!(units(&["--mode", "hypergraph"]).1, s(&["passage"]));
    assert_eq!(units(&["--assembly", "paper"]), ("hybrid-paper".into(), s(&["cluster", "entity", "hyperedge"])));
    assert_eq!(
        units(&["--assembly", "paper", "--no-bridges"]),
        ("hybrid-paper w/o BR".into(), s(&["cluster", "entity", "hyperedge"]))
    );
    assert_eq!(units(&["--mode", "hypergraph", "--assembly", "paper"]).1, s(&["cluster", "entity", "hyperedge"]));
    // The thresholds are those the merge derived from the kb's own (hashing) vectors; with no
    // threshold at all, graph retrieval gives edges and entities.
    assert_eq!(units(&["--mode", "graph", "--tau-e=-1"]).1, s(&["edge", "entity"]));
    assert_eq!(units_env(&["--mode", "chunks"], &[("FLEXSTRUCT_QUERY__TAU_CHUNK", "-1")]).1, s(&["chunk"]));
    assert_eq!(units(&["--mode", "none"]), ("none".into(), vec![]));
    assert_eq!(
        units_env(&["--mode", "hypergraphrag"], &[("FLEXSTRUCT_QUERY__TAU_CHUNK", "-1")]).1,
        s(&["chunk", "entity", "hyperedge"])
    );
    // Bridge retrieval is a module of its own, switched off apart from HR.
    let paper = |more: &[&str]| units(&[&["--assembly", "paper"], more].concat());
    assert_eq!(paper(&["--no-hyperedges", "--no-clusters"]).0, "hybrid-paper w/o HR+SSC");
    assert_eq!(
        paper(&["--no-hyperedges", "--no-clusters", "--no-bridges"]),
        ("hybrid-paper w/o HR+SSC+BR".into(), s(&["edge", "entity"]))
    );
    assert_eq!(
        paper(&["--no-entities", "--no-edges"]),
        ("hybrid-paper w/o ER+EnR".into(), s(&["cluster", "hyperedge"]))
    );
    // Fused, the entities' facts alone still come as passages; with no module left, nothing.
    assert_eq!(
        units(&["--no-hyperedges", "--no-lexical", "--no-bridges"]),
        ("hybrid w/o HR+BR+LR".into(), s(&["passage"]))
    );
    assert_eq!(units(&["--no-hyperedges", "--no-lexical", "--no-bridges", "--no-entities"]).1, Vec::<String>::new());
    // A budget caps the context.
    let tmp = tempfile::tempdir().unwrap();
    let out_path = tmp.path().join("a.jsonl");
    let out = query_env(
        &[
            "--questions",
            questions_file().to_str().unwrap(),
            "--out",
            out_path.to_str().unwrap(),
            "--max-context-tokens",
            "150",
            "-q",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    for a in answers(&out_path) {
        assert!(a["context_tokens"].as_u64().unwrap() <= 150, "{a}");
    }
}

/// A film whose director's birthplace only her own page gives, and pages about the film whose
/// sentences share the question's words and fill a small cap.
const SECOND_HOP_CORPUS: &[(&str, &[u8])] = &[
    (
        "grey-tide.md",
        b"# Grey Tide\n\nThe idea for the film Grey Tide was born on a ferry. Grey Tide is a 1992 film whose \
director was Ilse Varga, born abroad. The lead actor of Grey Tide was born where the film was shot. Grey Tide, the film, \
was born of a storm, the director said. Where the film Grey Tide was born, the tide is grey.\n",
    ),
    (
        "grey-tide-reviews.md",
        b"# Grey Tide reviews\n\nCritics said the film Grey Tide was born of patience. The director of Grey Tide \
was praised where the film opened. A film like Grey Tide is born once a decade. Grey Tide was the film \
where the director was born again as an artist. The grey tide of the title was born of the winter sea. \
Where was a film this patient born, one critic asked of Grey Tide.\n",
    ),
    (
        "ilse-varga.md",
        b"# Ilse Varga\n\nIlse Varga made documentaries about the sea. Varga was born in Kelso Ford. \
She taught at the Aldra school of photography.\n",
    ),
];

/// A tiny corpus built into an index, asked one question with and without the second hop.
struct SecondHop {
    _dir: tempfile::TempDir,
    index: PathBuf,
}

impl SecondHop {
    fn build(files: &[(&str, &[u8])]) -> SecondHop {
        let dir = tempfile::tempdir().unwrap();
        let corpus = dir.path().join("corpus");
        write_files(&corpus, files);
        let index = dir.path().join("index");
        build(&index, &corpus, false);
        SecondHop { _dir: dir, index }
    }

    /// The answer to `question` under `cap` tokens, by similarity and words only (entity and
    /// bridge retrieval off, so that the first retrieval is what the question's words find),
    /// with `query.second_hop` as given.
    fn ask(&self, question: &str, cap: &str, second_hop: &str) -> Value {
        let mut env = ENV.to_vec();
        env.extend([
            ("FLEXSTRUCT_QUERY__ENTITIES", "false"),
            ("FLEXSTRUCT_QUERY__BRIDGES", "false"),
            ("FLEXSTRUCT_QUERY__SECOND_HOP", second_hop),
        ]);
        let args = ["--index", self.index.to_str().unwrap(), "--max-context-tokens", cap, "--jsonl", question];
        let out = run_env("query", &args, &env);
        assert_eq!(out.code, 0, "{}", out.stderr);
        serde_json::from_str::<Value>(out.stdout.lines().next().unwrap()).unwrap()
    }

    /// The id of the document titled `title`.
    fn doc(&self, title: &str) -> Value {
        query(&self.index, &format!("SELECT doc_id FROM documents WHERE title = '{title}'"))[0]["doc_id"].clone()
    }
}

/// The documents of an answer's evidence.
fn evidence_docs(answer: &Value) -> Vec<Value> {
    answer["evidence"].as_array().unwrap().iter().map(|e| e["doc_id"].clone()).collect()
}

#[test]
fn a_relation_question_retrieves_again_about_the_entity_its_chain_reached() {
    let kb = SecondHop::build(SECOND_HOP_CORPUS);
    let q = "Where was the director of film Grey Tide born?";
    let varga = kb.doc("Ilse Varga");
    let once = kb.ask(q, "200", "0");
    assert!(!evidence_docs(&once).contains(&varga), "{once}");
    assert_ne!(once["answer"], "Kelso Ford", "{once}");
    let twice = kb.ask(q, "200", "4");
    assert!(evidence_docs(&twice).contains(&varga), "{twice}");
    assert_eq!(twice["answer"], "Kelso Ford", "{twice}");
    assert!(twice["context_tokens"].as_u64().unwrap() <= 200, "{twice}");
}

/// Two films and their directors, whose dates only the directors' own pages give, and pages
/// that share the question's words and fill a small cap.
const COMPARISON_CORPUS: &[(&str, &[u8])] = &[
    ("grey-tide.md", b"# Grey Tide\n\nGrey Tide is a 1992 film. It was directed by Ilse Varga.\n"),
    ("salt-roads.md", b"# Salt Roads\n\nSalt Roads is a 1994 film directed by Oren Castel.\n"),
    (
        "festival.md",
        b"# Festival notes\n\nWhich film was first, Grey Tide or Salt Roads, the festival asked. Which film has \
the director who was born first is a question every film festival asks.\n",
    ),
    (
        "critics.md",
        b"# Critics\n\nThe director of Grey Tide was born first, one critic said. The director of Salt Roads \
was born first, said another critic of the film.\n",
    ),
    ("ilse-varga.md", b"# Ilse Varga\n\nIlse Varga (2 March 1940 - 5 May 2001) made documentaries.\n"),
    ("oren-castel.md", b"# Oren Castel\n\nOren Castel (4 May 193112 June 1999) made westerns.\n"),
];

#[test]
fn a_comparison_of_directors_retrieves_again_about_each_undated_director() {
    let kb = SecondHop::build(COMPARISON_CORPUS);
    let q = "Which film has the director who was born first, Grey Tide or Salt Roads?";
    let (varga, castel) = (kb.doc("Ilse Varga"), kb.doc("Oren Castel"));
    let once = kb.ask(q, "260", "0");
    assert!(!evidence_docs(&once).contains(&varga) && !evidence_docs(&once).contains(&castel), "{once}");
    // Without the directors' dates the films' own stand in: the earlier film, wrongly.
    assert_eq!(once["answer"], "Grey Tide", "{once}");
    let twice = kb.ask(q, "260", "4");
    assert!(evidence_docs(&twice).contains(&varga) && evidence_docs(&twice).contains(&castel), "{twice}");
    assert_eq!(twice["answer"], "Salt Roads", "{twice}");
    assert!(twice["context_tokens"].as_u64().unwrap() <= 260, "{twice}");
}

#[test]
fn a_threshold_that_nothing_passes_is_said_in_the_answer() {
    let question = "Who is the chair of the Port Ellery Harbour Lights Society?";
    let out = query_env(&["--mode", "graph", "--tau-e", "0.999", question], &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains(
            "note: no edge of the kb is as similar to the question as the threshold 0.999 asks (query.tau_e)"
        ),
        "{}",
        out.stdout
    );
    // The derived thresholds are in the kb, one per kind of unit.
    let rows = query(sample_index(), "SELECT unit, percentile FROM kb.thresholds ORDER BY unit");
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows.iter().all(|r| r["percentile"] == 0.95));
}

#[test]
fn unusable_inputs_get_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    // An index without a kb.
    let bare = tmp.path().join("bare");
    let ingest =
        run("ingest", &["--index", bare.to_str().unwrap(), "--corpus", sample_corpus().to_str().unwrap(), "-q"]);
    assert_eq!(ingest.code, 0, "{}", ingest.stderr);
    let out = run_env("query", &["--index", bare.to_str().unwrap(), "anything?"], &ENV);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("has no merged knowledge base") && out.stderr.contains("make index"), "{}", out.stderr);
    // Another embedding model than the index's.
    let out = query_env(&["anything?"], &[("FLEXSTRUCT_EMBED__MODEL", "hashing-32")]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("`hashing-64`") && out.stderr.contains("`hashing-32`"), "{}", out.stderr);
    // Empty questions, on the command line or in a file; a broken line.
    let out = query_env(&["  "], &[]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("the question is empty"), "{}", out.stderr);
    let q = tmp.path().join("q.jsonl");
    std::fs::write(&q, "{\"id\": \"a\", \"question\": \"Who?\"}\n{\"id\": \"b\", \"question\": \" \"}\n").unwrap();
    let out = query_env(&["--questions", q.to_str().unwrap()], &[]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("q.jsonl:2: question `b` is empty"), "{}", out.stderr);
    std::fs::write(&q, "{\"id\": \"a\", \"question\": \"Who?\"}\n{\"id\": \"b\", \"text\": \"Who?\"}\n").unwrap();
    let out = query_env(&["--questions", q.to_str().unwrap()], &[]);
    assert!(out.stderr.contains("q.jsonl:2: field `question` is missing"), "{}", out.stderr);
    std::fs::write(&q, "{\"id\": \"a\", \"question\": \"Who?\"}\nnot json\n").unwrap();
    let out = query_env(&["--questions", q.to_str().unwrap()], &[]);
    assert!(out.stderr.contains("q.jsonl:2: not a JSON object"), "{}", out.stderr);
    let out = query_env(&["Who?", "--mode", "sideways"], &[]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("invalid value 'sideways' for '--mode"), "{}", out.stderr);
    assert!(out.stderr.contains("possible values: hybrid, hypergraph"), "{}", out.stderr);
}

#[test]
fn llm_answers_cite_their_evidence_and_are_recorded() {
    let server = FakeLlm::start(|request| {
        let user = request.last_user_message();
        if user.contains("\n\nEVIDENCE:\n") {
            Reply::content("Nerys Pascoe [1]. She has chaired it since 2017 [1][2].")
        } else {
            Reply::content("{\"entities\": [\"Port Ellery Harbour Lights Society\"]}")
        }
    });
    // The index is shared: answer in a copy so that the call log and cache stay out of it.
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    copy_dir(sample_index(), &index);
    let url = server.base_url();
    let env = fake_llm_env(&url);
    let out_path = tmp.path().join("a.jsonl");
    let q = tmp.path().join("q.jsonl");
    std::fs::write(&q, "{\"id\": \"x\", \"question\": \"Who chairs the Harbour Lights Society?\"}\n").unwrap();
    let args =
        ["--index", index.to_str().unwrap(), "--questions", q.to_str().unwrap(), "--out", out_path.to_str().unwrap()];
    server.script([Reply::Status { code: 429, retry_after: Some(0.01) }]);
    let out = run_env("query", &args, &env);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let a = answers(&out_path).remove(0);
    assert_eq!(a["generator"], "llm");
    assert_eq!(a["answer"], "Nerys Pascoe [1]. She has chaired it since 2017 [1][2].");
    assert_eq!(a["cited"], serde_json::json!([1, 2]));
    assert_eq!(a["query_entities"][0]["query"], "Port Ellery Harbour Lights Society");
    assert_eq!(a["query_entities"][0]["via"], "name");
    let mut expected: Vec<Value> = a["evidence"][0]["spans"].as_array().unwrap().clone();
    for s in a["evidence"][1]["spans"].as_array().unwrap() {
        if !expected.contains(s) {
            expected.push(s.clone());
        }
    }
    assert_eq!(a["citations"].as_array().unwrap(), &expected);
    // The prompt carried the numbered evidence.
    let answer_request = server.requests().into_iter().find(|r| r.last_user_message().contains("EVIDENCE:")).unwrap();
    assert!(answer_request.last_user_message().contains("\n[1] ("), "{}", answer_request.last_user_message());

    let calls = query(
        &index,
        "SELECT purpose, count(*) AS n FROM llm_calls WHERE stage = 'query' AND status = 'ok' GROUP BY purpose ORDER BY purpose",
    );
    assert_eq!(
        calls,
        vec![
            serde_json::json!({"purpose": "answer", "n": 1}),
            serde_json::json!({"purpose": "query_entities", "n": 1})
        ]
    );
    // A rerun is answered from the cache.
    let before = server.request_count();
    let out = run_env("query", &args, &env);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(server.request_count(), before);
}

/// Hashing vectors and the fake LLM server at `url`, for the query and eval binaries.
pub(crate) fn fake_llm_env(url: &str) -> [(&'static str, &str); 5] {
    [
        ("FLEXSTRUCT_EMBED__MODEL", "hashing-64"),
        ("FLEXSTRUCT_LLM__BASE_URL", url),
        ("FLEXSTRUCT_LLM__MODEL", "fake-model"),
        ("FLEXSTRUCT_LLM__API_KEY_ENV", ""),
        ("FLEXSTRUCT_LLM__BACKOFF_INITIAL_MS", "5"),
    ]
}

pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

#[test]
fn a_question_the_llm_cannot_answer_fails_alone() {
    let server = FakeLlm::start(|request| {
        let user = request.last_user_message();
        if user.contains("\n\nEVIDENCE:\n") && user.starts_with("QUESTION: Who makes a lantern?") {
            Reply::Status { code: 400, retry_after: None }
        } else if user.contains("\n\nEVIDENCE:\n") {
            Reply::content("Nerys Pascoe [1].")
        } else {
            Reply::content("{\"entities\": []}")
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    copy_dir(sample_index(), &index);
    let url = server.base_url();
    let env = fake_llm_env(&url);
    let q = tmp.path().join("q.jsonl");
    std::fs::write(&q, "{\"id\": \"a\", \"question\": \"Who chairs the society?\"}\n{\"id\": \"b\", \"question\": \"Who makes a lantern?\"}\n").unwrap();
    let out_path = tmp.path().join("a.jsonl");
    let out = run_env(
        "query",
        &["--index", index.to_str().unwrap(), "--questions", q.to_str().unwrap(), "--out", out_path.to_str().unwrap()],
        &env,
    );
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("question `b` failed"), "{}", out.stderr);
    let got = answers(&out_path);
    assert_eq!((got[0]["generator"].as_str(), got[0]["answer"].as_str()), (Some("llm"), Some("Nerys Pascoe [1].")));
    assert_eq!(got[1]["generator"], "failed");
    assert!(got[1]["error"].as_str().unwrap().contains("400"), "{}", got[1]);
}

#[test]
fn a_reranker_orders_the_first_pieces_and_a_failing_one_leaves_the_order_alone() {
    // The stand-in re-ranker prefers the pieces sent last: it reverses the strategy's order.
    let server = FakeLlm::start(|request| {
        let n = request.body["documents"].as_array().map_or(0, Vec::len);
        let results: Vec<Value> =
            (0..n).map(|i| serde_json::json!({"index": i, "relevance_score": i as f64 / 10.0})).collect();
        Reply::Body(serde_json::json!({ "results": results }).to_string())
    });
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    copy_dir(sample_index(), &index);
    let url = server.base_url();
    let q = tmp.path().join("q.jsonl");
    std::fs::write(
        &q,
        "{\"id\": \"x\", \"question\": \"How many pupils visited the Larkspur Observatory in 2023?\"}\n",
    )
    .unwrap();
    let out_path = tmp.path().join("a.jsonl");
    let ask = |more: &[&str]| {
        let env = [
            ("FLEXSTRUCT_EMBED__MODEL", "hashing-64"),
            ("FLEXSTRUCT_RERANK__BASE_URL", url.as_str()),
            ("FLEXSTRUCT_RERANK__MODEL", "fake-reranker"),
            ("FLEXSTRUCT_RERANK__API_KEY_ENV", ""),
            ("FLEXSTRUCT_RERANK__MAX_RETRIES", "1"),
            ("FLEXSTRUCT_RERANK__BACKOFF_INITIAL_MS", "5"),
            ("FLEXSTRUCT_QUERY__RERANK_CANDIDATES", "40"),
        ];
        let mut args = vec![
            "--index",
            index.to_str().unwrap(),
            "--questions",
            q.to_str().unwrap(),
            "--out",
            out_path.to_str().unwrap(),
            "--mode",
            "sentence-window",
        ];
        args.extend(more);
        let out = run_env("query", &args, &env);
        assert_eq!(out.code, 0, "{}", out.stderr);
        answers(&out_path).remove(0)
    };
    let texts = |a: &Value| -> Vec<String> {
        a["evidence"].as_array().unwrap().iter().map(|e| e["text"].as_str().unwrap().to_owned()).collect()
    };

    // Off (the flag wins over the variable): no request, the strategy's own order.
    let own = ask(&["--rerank-candidates", "0"]);
    assert_eq!((server.request_count(), own["variant"].as_str()), (0, Some("sentence-window")));
    assert!(texts(&own).len() >= 2, "{own}");

    let reranked = ask(&[]);
    assert_eq!(
        (reranked["variant"].as_str(), reranked["rerank"].as_str()),
        (Some("sentence-window +rerank"), Some("reranked"))
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/rerank");
    assert_eq!(requests[0].body["query"], "How many pupils visited the Larkspur Observatory in 2023?");
    let sent: Vec<&str> =
        requests[0].body["documents"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
    assert!(sent.len() >= 2);
    // What the re-ranker scored highest leads the context, and the context holds what it held.
    assert!(texts(&reranked)[0].contains(sent[sent.len() - 1].trim()), "{reranked}");
    assert!(texts(&own)[0].contains(sent[0].trim()), "{own}");
    assert_ne!(texts(&own), texts(&reranked));
    let mut a = texts(&own).join(" ").split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let mut b = texts(&reranked).join(" ").split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    let calls = query(&index, "SELECT purpose, status, model FROM llm_calls WHERE stage = 'query'");
    assert_eq!(calls, vec![serde_json::json!({"purpose": "rerank", "status": "ok", "model": "fake-reranker"})]);

    // Answered again from the cache; then a re-ranker that refuses leaves the order alone and
    // says so.
    assert_eq!(texts(&ask(&[])), texts(&reranked));
    assert_eq!(server.request_count(), 1);
    std::fs::remove_dir_all(index.join("llm_cache")).ok();
    server.script([Reply::Status { code: 400, retry_after: None }]);
    let refused = ask(&[]);
    assert_eq!(texts(&refused), texts(&own));
    // Labelled with what happened: not re-ranked.
    assert_eq!((refused["variant"].as_str(), refused["rerank"].as_str()), (Some("sentence-window"), Some("failed")));
    let notes = refused["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n.as_str().unwrap().starts_with("rerank: the endpoint answered HTTP 400")),
        "{refused}"
    );
}

#[test]
fn the_stand_ins_oracle_reranker_puts_a_piece_with_the_answer_first() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    copy_dir(sample_index(), &index);
    let questions = questions_file();
    let standin =
        crate::llm_extract::Standin::start_with(tmp.path(), "0", &["--rerank-oracle", questions.to_str().unwrap()]);
    let out_path = tmp.path().join("a.jsonl");
    let env = [
        ("FLEXSTRUCT_EMBED__MODEL", "hashing-64"),
        ("FLEXSTRUCT_RERANK__BASE_URL", standin.url.as_str()),
        ("FLEXSTRUCT_RERANK__MODEL", "oracle"),
        ("FLEXSTRUCT_RERANK__API_KEY_ENV", ""),
        // Every chunk of the sample is a candidate, whatever the hashing vectors make of it.
        ("FLEXSTRUCT_QUERY__CHUNK_K", "40"),
        ("FLEXSTRUCT_QUERY__TAU_CHUNK", "-1"),
    ];
    let args = [
        "--index",
        index.to_str().unwrap(),
        "--questions",
        questions.to_str().unwrap(),
        "--out",
        out_path.to_str().unwrap(),
        "--mode",
        "chunks",
        "--max-context-tokens",
        "0",
    ];
    let out = run_env("query", &args, &env);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let golds: Vec<Value> = std::fs::read_to_string(&questions)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut led = 0;
    for (a, q) in answers(&out_path).iter().zip(&golds) {
        assert_eq!(a["variant"], "chunks +rerank");
        let gold = normal(q["answers"][0].as_str().unwrap());
        let holds = |e: &Value| normal(e["text"].as_str().unwrap()).contains(&gold);
        let evidence = a["evidence"].as_array().unwrap();
        if evidence.iter().any(holds) {
            assert!(holds(&evidence[0]), "{}: {a}", q["id"]);
            led += 1;
        }
    }
    // Every factoid's answer is in some chunk of the sample.
    assert!(led >= 9, "{led} of {}", golds.len());
}

/// SQuAD-style normal form of an answer: lowercase, no punctuation or articles.
fn normal(answer: &str) -> String {
    let lower = answer.to_lowercase();
    let words = lower.split(|c: char| !c.is_alphanumeric() && c != ',' && c != '.').filter(|w| !w.is_empty());
    words.filter(|w| !["a", "an", "the"].contains(w)).collect::<Vec<_>>().join(" ")
}

/// `make demo`'s promise, with the model the demo runs (MiniLM from `make model`, in ONNX Runtime
/// from `make onnx`): every sample question with a short answer (factoid, comparison, yes/no) is
/// answered exactly, in the fused assembly's default context, each with a citation to its
/// supporting sentence.
#[test]
fn the_demo_answers_its_sample_questions() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/models");
    let (model, library) = (data.join("all-MiniLM-L6-v2"), data.join("onnxruntime/libonnxruntime.so"));
    let env = [
        ("FLEXSTRUCT_EMBED__MODEL_DIR", model.to_str().unwrap()),
        ("FLEXSTRUCT_EMBED__ONNX_LIBRARY", library.to_str().unwrap()),
    ];
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    let i = index.to_str().unwrap();
    let mut runs = vec![run_env("ingest", &["--index", i, "--corpus", sample_corpus().to_str().unwrap(), "-q"], &env)];
    for stage in ["chunk", "extract", "hypergraph", "graph", "embed", "cluster", "merge"] {
        let quiet: &[&str] = if stage == "embed" { &[] } else { &["-q"] };
        runs.push(run_env(stage, &[&["--index", i], quiet].concat(), &env));
    }
    for r in &runs {
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    // The default runtime, as `make demo` runs it: ONNX Runtime where `make onnx` could fetch it
    // (make test does), candle elsewhere.
    let engine = if cfg!(all(target_os = "linux", target_arch = "x86_64")) { "onnx" } else { "candle" };
    let embed = &runs[5]; // after ingest, chunk, extract, hypergraph and graph
    assert!(embed.stderr.contains(&format!("embed:   engine: \"{engine}\"")), "{}", embed.stderr);
    let out_path = tmp.path().join("answers.jsonl");
    let questions = questions_file();
    let q = run_env(
        "query",
        &["--index", i, "--questions", questions.to_str().unwrap(), "--out", out_path.to_str().unwrap()],
        &env,
    );
    assert_eq!(q.code, 0, "{}", q.stderr);
    let gold: Vec<Value> =
        std::fs::read_to_string(&questions).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let answers = answers(&out_path);
    let mut checked = 0;
    for (g, a) in gold.iter().zip(&answers) {
        assert_eq!(g["id"], a["id"]);
        if g["type"] == "free-form" {
            // A free-form answer quotes the evidence the question was written from.
            let evidence = g["evidence"].as_array().unwrap();
            let quoted = normal(a["answer"].as_str().unwrap());
            assert!(evidence.iter().all(|e| quoted.contains(&normal(e.as_str().unwrap()))), "{}: {a}", g["question"]);
            continue;
        }
        checked += 1;
        let wanted: Vec<String> =
            g["answers"].as_array().unwrap().iter().map(|x| normal(x.as_str().unwrap())).collect();
        assert!(wanted.contains(&normal(a["answer"].as_str().unwrap())), "{}: {a}", g["question"]);
        assert!(a.get("support").is_some() && !a["citations"].as_array().unwrap().is_empty(), "{a}");
    }
    assert_eq!(checked, 10, "every short-answer type of the sample is checked");
}
