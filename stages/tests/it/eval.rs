//! The eval binary on the sample corpus and its questions: strategies side by side (also at an
//! equal budget), the ablation table with its w/o SW sibling index, query-time and rebuilding
//! sweeps, GE from the test LLM server, and the cost table.

use std::path::Path;

use flexstruct_testkit::{FakeLlm, Reply};
use serde_json::Value;

use crate::kb::ENV;
use crate::query::{copy_dir, fake_llm_env, questions_file, sample_index};
use crate::util::*;

fn eval(args: &[&str], index: &Path, out: &Path, extra_env: &[(&str, &str)]) -> Run {
    let questions = questions_file();
    let mut all = args.to_vec();
    all.extend([
        "--index",
        index.to_str().unwrap(),
        "--questions",
        questions.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let mut env = ENV.to_vec();
    env.extend(extra_env);
    let r = run_env("eval", &all, &env);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r
}

fn summary(out: &Path) -> serde_json::Map<String, Value> {
    serde_json::from_str::<Value>(&std::fs::read_to_string(out.join("summary.json")).unwrap())
        .unwrap()
        .as_object()
        .unwrap()
        .clone()
}

fn results(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn strategies_side_by_side_and_at_an_equal_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    eval(&["run", "--modes", "hybrid,chunks,none", "--equal-budget"], sample_index(), &out, &[]);
    let s = summary(&out);
    let budget = s["hybrid"]["context_tokens_mean"].as_f64().unwrap().round() as u64;
    let mut keys: Vec<&String> = s.keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            &"chunks".to_owned(),
            &format!("chunks @{budget}"),
            &"hybrid".to_owned(),
            &format!("hybrid @{budget}"),
            &"none".to_owned()
        ]
    );
    for (name, st) in &s {
        assert_eq!(st["n"], 12, "{name}");
        assert!(st["ge"].is_null(), "GE is not measured without an LLM");
        for key in [
            "em",
            "f1",
            "answer_recall",
            "answer_token_recall",
            "evidence_recall",
            "doc_recall",
            "context_tokens_mean",
            "retrieval_ms_p50",
            "retrieval_ms_p95",
        ] {
            assert!(st[key].is_number(), "{name}.{key} = {}", st[key]);
        }
        let types = &st["by_type"];
        assert!(
            types["factoid"]["n"] == 8
                && types["free-form"]["n"] == 2
                && types["comparison"]["n"] == 1
                && types["yes-no"]["n"] == 1,
            "{st}"
        );
    }
    assert_eq!(s["none"]["answer_recall"], 0.0);
    assert_eq!(s["none"]["context_tokens_mean"], 0.0);
    assert!(s["hybrid"]["answer_recall"].as_f64().unwrap() > 0.0);
    // The cap holds for every capped question.
    for r in results(&out).iter().filter(|r| r["variant"].as_str().unwrap().contains('@')) {
        assert!(r["context_tokens"].as_u64().unwrap() <= budget, "{r}");
    }
    assert_eq!(results(&out).len(), 5 * 12);
    // Each row carries the reference answers beside the answer given, and EM compares the two.
    for r in results(&out) {
        let gold: Vec<&str> = r["gold"].as_array().unwrap().iter().map(|g| g.as_str().unwrap()).collect();
        assert!(!gold.is_empty(), "{r}");
        let given = r["short_answer"].as_str().unwrap_or_else(|| r["answer"].as_str().unwrap());
        // SQuAD's normalisation: lower case, no punctuation, no articles.
        let norm = |t: &str| {
            let t: String = t.to_lowercase().chars().map(|c| if c.is_alphanumeric() { c } else { ' ' }).collect();
            t.split_whitespace().filter(|w| !["a", "an", "the"].contains(w)).collect::<Vec<_>>().join(" ")
        };
        if r["em"] == 1.0 {
            assert!(gold.iter().any(|g| norm(g) == norm(given)), "{r}");
        }
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.contains("| hybrid | 12 |") && report.contains("not measured") && report.contains("## Cost"),
        "{report}"
    );
    assert!(report.contains("![measures per variant](measures.svg)"));
    for f in ["measures.svg", "context_tokens.svg", "results.parquet"] {
        assert!(out.join(f).is_file(), "{f}");
    }
    let file = std::fs::File::open(out.join("results.parquet")).unwrap();
    let rows: usize = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap()
        .map(|b| b.unwrap().num_rows())
        .sum();
    assert_eq!(rows, 5 * 12);
}

#[test]
fn the_ablation_table_and_its_sliding_window_sibling() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    copy_dir(sample_index(), &index);
    let out = tmp.path().join("out");
    let r = eval(&["ablate"], &index, &out, &[]);
    let s = summary(&out);
    assert_eq!(s.len(), 23);
    for label in [
        "FlexStructRAG, fused (default)",
        "fused w/o LR (BM25)",
        "fused w/o second hop",
        "fused, windows in SSC clusters",
        "FlexStructRAG + BR, paper assembly",
        "FlexStructRAG (paper)",
        "w/o SW",
        "w/o SSC",
        "w/o HR",
        "w/o EnR",
        "w/o ER",
        "w/o HR+SSC+EnR",
    ] {
        assert!(s.contains_key(label), "{label}");
    }
    assert!(r.stderr.contains("index.variants/no-sw rebuilt"), "{}", r.stderr);
    let sibling = tmp.path().join("index.variants/no-sw");
    let window = query(&sibling, "SELECT DISTINCT config FROM manifest WHERE stage = 'extract'");
    assert!(window.iter().any(|c| c["config"].as_str().unwrap().contains("\"window\":false")), "{window:?}");
    // Removing modules never adds context.
    let tokens = |k: &str| s[k]["context_tokens_mean"].as_f64().unwrap();
    assert!(tokens("w/o HR+SSC+ER") <= tokens("FlexStructRAG (paper)"));
    assert!(tokens("FlexStructRAG (paper)") <= tokens("FlexStructRAG + BR, paper assembly"));
    // The paper's row and its sibling differ only in the index.
    assert_eq!(s["w/o SW"]["n"], s["FlexStructRAG (paper)"]["n"]);
    // The base index is untouched by the sibling's rebuild.
    assert!(
        query(&index, "SELECT DISTINCT config FROM manifest WHERE stage = 'extract'")
            .iter()
            .all(|c| !c["config"].as_str().unwrap().contains("\"window\":false"))
    );
}

#[test]
fn sweeps_at_query_time_and_with_rebuilt_siblings() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    copy_dir(sample_index(), &index);
    let out = tmp.path().join("n_eh");
    eval(&["sweep", "--param", "n_eh", "--values", "1,7"], &index, &out, &[]);
    let s = summary(&out);
    let tokens = |s: &serde_json::Map<String, Value>, k: &str| s[k]["context_tokens_mean"].as_f64().unwrap();
    assert!(tokens(&s, "n_eh=1 hyperedges only") < tokens(&s, "n_eh=7 hyperedges only"));
    assert!(out.join("sweep_measures.svg").is_file() && out.join("sweep_tokens.svg").is_file());

    let out = tmp.path().join("tau_e");
    let r = eval(&["sweep", "--param", "tau_e", "--values", "1,8"], &index, &out, &[]);
    assert!(r.stderr.contains("tau_e-1 rebuilt") && r.stderr.contains("tau_e-8 rebuilt"), "{}", r.stderr);
    let edges = |v: &str| {
        scalar(&tmp.path().join(format!("index.variants/tau_e-{v}")), "SELECT count(*) FROM kb.edges").as_i64().unwrap()
    };
    assert!(edges("1") > edges("8"), "τ_e = 1 makes more anchors, so more edges");
    assert!(summary(&out).contains_key("tau_e=8 edges only"));
}

#[test]
fn ge_comes_from_the_llm_judge_and_costs_are_tabled() {
    let server = FakeLlm::start(|request| {
        let user = request.last_user_message();
        if user.contains("\n\nEVIDENCE:\n") {
            Reply::content("Answer: Rafael Ortiz [1]\nHe chaired the amendment talks [1].")
        } else if user.contains("\n\nREFERENCE: ") {
            Reply::content(
                "{\"comprehensiveness\": 8, \"knowledgeability\": 8, \"correctness\": 8, \"relevance\": 8, \"diversity\": 8, \"logical_coherence\": 8, \"factuality\": 8}",
            )
        } else {
            Reply::content("{\"entities\": []}")
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    copy_dir(sample_index(), &index);
    let out = tmp.path().join("out");
    let url = server.base_url();
    eval(&["run", "--modes", "hybrid"], &index, &out, &fake_llm_env(&url));
    let rows = results(&out);
    // GE = mean over questions of (8/10 + F1)/2, ×100.
    let expected =
        rows.iter().map(|r| (0.8 + r["f1"].as_f64().unwrap()) / 2.0).sum::<f64>() / rows.len() as f64 * 100.0;
    let ge = summary(&out)["hybrid"]["ge"].as_f64().unwrap();
    assert!((ge - expected).abs() < 0.01, "{ge} vs {expected}");
    assert!(rows.iter().all(|r| r["answer"] == "Answer: Rafael Ortiz [1]\nHe chaired the amendment talks [1]."));
    // EM and F1 score the direct answer, without its citation markers: the sample question whose
    // gold answer is Rafael Ortiz scores 1.
    let ortiz: Vec<&Value> = rows.iter().filter(|r| r["question"].as_str().unwrap().contains("chairmanship")).collect();
    assert!(!ortiz.is_empty() && ortiz.iter().all(|r| r["em"] == 1.0 && r["f1"] == 1.0), "{ortiz:?}");
    assert!(rows.iter().any(|r| r["em"] == 0.0));

    let cost = run("eval", &["cost", "--index", index.to_str().unwrap()]);
    assert_eq!(cost.code, 0, "{}", cost.stderr);
    let line =
        |stage: &str| cost.stdout.lines().find(|l| l.contains(&format!("| {stage} "))).unwrap_or_default().to_owned();
    assert!(line("query").contains("generation") && line("query").contains("| 24 "), "{}", cost.stdout);
    // The judge's calls are the evaluation's cost, not the answers'.
    assert!(line("eval").contains("evaluation") && line("eval").contains("| 12 "), "{}", cost.stdout);
    assert!(line("extract").contains("construction"), "{}", cost.stdout);

    // A report's cost table holds its own run's calls, not every run's on the index: the run's
    // report said 24 answers' requests, a second run on three of the questions says 6 (served
    // from the cache, each request counted once), and an extractive run's says none — while
    // the index's table still holds the first run's 24.
    let report_line = |out: &Path, stage: &str| {
        let report = std::fs::read_to_string(out.join("report.md")).unwrap();
        let cost = report.split("## Cost").nth(1).unwrap_or_default().to_owned();
        cost.lines().find(|l| l.contains(&format!("| {stage} "))).unwrap_or_default().to_owned()
    };
    assert!(report_line(&out, "query").contains("| 24 "), "{}", report_line(&out, "query"));
    let three = tmp.path().join("three");
    eval(&["run", "--modes", "hybrid", "--limit", "3"], &index, &three, &fake_llm_env(&url));
    assert!(report_line(&three, "query").contains("| 6 "), "{}", report_line(&three, "query"));
    assert!(report_line(&three, "eval").contains("| 3 "), "{}", report_line(&three, "eval"));
    let extractive = tmp.path().join("extractive");
    eval(&["run", "--modes", "hybrid"], &index, &extractive, &[]);
    assert_eq!(report_line(&extractive, "query"), "", "an extractive run makes no LLM call");
    assert!(report_line(&extractive, "extract").contains("construction"));
    let cost = run("eval", &["cost", "--index", index.to_str().unwrap()]);
    assert!(cost.stdout.lines().any(|l| l.contains("| query ") && l.contains("| 24 ")), "{}", cost.stdout);
}

#[test]
fn the_judge_can_be_another_endpoint_and_failed_gradings_are_counted() {
    let answers = FakeLlm::start(|request| {
        if request.last_user_message().contains("\n\nEVIDENCE:\n") {
            Reply::content("Answer: Rafael Ortiz [1]\nHe chaired the talks [1].")
        } else {
            Reply::content("{\"entities\": []}")
        }
    });
    // The judge grades every question but the ones about Tessellate, which it cannot read.
    let judge = FakeLlm::start(|request| {
        // The whole conversation: the repair round asks again about the same question.
        if request.body["messages"].to_string().contains("Tessellate") {
            Reply::content("I would rather not grade this.")
        } else {
            Reply::content(
                "{\"comprehensiveness\": 6, \"knowledgeability\": 6, \"correctness\": 6, \"relevance\": 6, \"diversity\": 6, \"logical_coherence\": 6, \"factuality\": 6}",
            )
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    copy_dir(sample_index(), &index);
    let out = tmp.path().join("out");
    let (url, judge_url) = (answers.base_url(), judge.base_url());
    let mut env = fake_llm_env(&url).to_vec();
    env.extend([
        ("FLEXSTRUCT_JUDGE__BASE_URL", judge_url.as_str()),
        ("FLEXSTRUCT_JUDGE__MODEL", "judge-model"),
        ("FLEXSTRUCT_JUDGE__API_KEY_ENV", ""),
    ]);
    eval(&["run", "--modes", "hybrid"], &index, &out, &env);
    // No grading went to the answering endpoint, and every answer went to the judge.
    assert!(answers.requests().iter().all(|r| !r.last_user_message().contains("\n\nREFERENCE: ")));
    assert!(judge.requests().iter().all(|r| r.body["model"] == "judge-model"));
    let s = &summary(&out)["hybrid"];
    let rows = results(&out);
    let unreadable = rows.iter().filter(|r| r["question"].as_str().unwrap().contains("Tessellate")).count();
    assert!(unreadable > 0);
    assert_eq!(s["n"], rows.len());
    assert_eq!(s["n_ge"], rows.len() - unreadable, "{s}");
    assert!(rows.iter().all(|r| r["ge"].is_null() == r["question"].as_str().unwrap().contains("Tessellate")));
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains(&format!("of {} graded", rows.len())), "{report}");
    assert!(report.contains("judge-model"), "the report names the judge");
}

#[test]
fn a_reranker_that_fails_is_counted_labelled_and_fails_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    copy_dir(sample_index(), &index);
    let questions = questions_file();
    let run = |url: &str, out: &Path| {
        let mut env = ENV.to_vec();
        env.extend([
            ("FLEXSTRUCT_RERANK__BASE_URL", url),
            ("FLEXSTRUCT_RERANK__MODEL", "cross-encoder"),
            ("FLEXSTRUCT_RERANK__API_KEY_ENV", ""),
            ("FLEXSTRUCT_RERANK__MAX_RETRIES", "0"),
            ("FLEXSTRUCT_QUERY__RERANK_CANDIDATES", "40"),
        ]);
        let args = ["run", "--modes", "chunks", "--index", index.to_str().unwrap(), "--questions"];
        let mut args = args.to_vec();
        args.extend([questions.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        run_env("eval", &args, &env)
    };

    // An endpoint nobody answers: every re-ranking fails, and nothing says it was re-ranked.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = tmp.path().join("never");
    let r = run(&format!("http://127.0.0.1:{port}/v1"), &out);
    assert_eq!(r.code, 2, "{}", r.stderr);
    // Every question with two pieces or more to order asked, and failed (the others had too
    // few: not asked, not failed), each saying why.
    let rows = results(&out);
    let failed = rows.iter().filter(|row| row["rerank"] == "failed").count();
    assert!(failed > 0 && rows.iter().all(|row| row["rerank"] == "failed" || row["rerank"] == "too_few"));
    for row in rows.iter().filter(|row| row["rerank"] == "failed") {
        let notes = row["notes"].as_array().unwrap();
        assert!(notes.iter().any(|n| n.as_str().unwrap().starts_with("rerank: ")), "{row}");
    }
    let never = format!("re-ranking never worked: it failed for all {failed} questions it was asked for");
    assert!(r.stderr.contains(&never), "{}", r.stderr);
    let s = summary(&out);
    let counted = (s["chunks"]["n_reranked"].as_u64(), s["chunks"]["n_rerank_failed"].as_u64());
    assert_eq!(counted, (Some(0), Some(failed as u64)));
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains(&format!("| chunks (re-ranking failed for all {failed}) | 12 |")), "{report}");
    assert!(report.contains(&format!("re-ranking FAILED for {failed} of the {failed} questions")), "{report}");
    let statuses = query(&index, "SELECT DISTINCT status FROM llm_calls WHERE purpose = 'rerank'");
    assert_eq!(statuses, vec![serde_json::json!({"status": "connection"})]);

    // One that refuses some questions: those are counted apart, the others are re-ranked.
    let server = FakeLlm::start(|request| match request.body["query"].as_str() {
        Some(q) if q.contains("Larkspur") => Reply::Status { code: 400, retry_after: None },
        _ => flexstruct_testkit::rerank_responder(request),
    });
    let out = tmp.path().join("some");
    let r = run(&server.base_url(), &out);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let rows = results(&out);
    let failed = rows.iter().filter(|r| r["rerank"] == "failed").count();
    let done = rows.iter().filter(|r| r["rerank"] == "reranked").count();
    assert!(failed > 0 && done > 0, "{failed} failed, {done} re-ranked");
    let said = format!("re-ranking failed for {failed} of {} questions", failed + done);
    assert!(r.stderr.contains(&said), "{}", r.stderr);
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains(&format!("| chunks (+rerank for {done}; failed for {failed}) | 12 |")), "{report}");
}

#[test]
fn answers_the_llm_fails_to_give_are_counted_said_and_asked_again() {
    // Every answer about Tessellate runs to the token limit, also with more room: it fails.
    let cut_tessellate = |request: &flexstruct_testkit::Request| {
        let user = request.last_user_message();
        let question = user.lines().next().unwrap_or_default().to_owned();
        if !user.contains("\n\nEVIDENCE:\n") {
            Reply::content("{\"entities\": []}")
        } else if question.contains("Tessellate") {
            Reply::Cut("Answer: Tessellate Tessellate Tessellate".into())
        } else {
            Reply::content("Answer: Rafael Ortiz [1]")
        }
    };
    let server = FakeLlm::start(cut_tessellate);
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index");
    copy_dir(sample_index(), &index);
    let questions = questions_file();
    let run = |url: &str, index: &Path, out: &Path| {
        let mut env = ENV.to_vec();
        env.extend(fake_llm_env(url));
        let args = ["run", "--modes", "hybrid", "--index", index.to_str().unwrap(), "--questions"];
        let mut args = args.to_vec();
        args.extend([questions.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        run_env("eval", &args, &env)
    };

    let out = tmp.path().join("some");
    let r = run(&server.base_url(), &index, &out);
    // Done, but not whole: exit code 1, and said.
    assert_eq!(r.code, 1, "{}", r.stderr);
    let rows = results(&out);
    let failed: Vec<&Value> = rows.iter().filter(|r| r["question"].as_str().unwrap().contains("Tessellate")).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["answer"], "");
    let notes = failed[0]["notes"].as_array().unwrap();
    assert!(notes.iter().any(|n| n.as_str().unwrap().starts_with("answer: ")), "{}", failed[0]);
    assert!(rows.iter().filter(|r| !r["question"].as_str().unwrap().contains("Tessellate")).all(|r| r["answer"] != ""));
    let n = rows.len();
    assert!(r.stderr.contains(&format!("the LLM failed to give 1 of {n} answers")), "{}", r.stderr);
    assert_eq!(summary(&out)["hybrid"]["n_answer_failed"], 1);
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains(&format!("| hybrid (answer failed for 1) | {n} |")), "{report}");
    assert!(report.contains(&format!("answers FAILED: 1 of the {n} asked")), "{report}");

    // A rerun against a server that answers asks the failed question again: nothing fails.
    let answers = FakeLlm::start(|request| {
        if request.last_user_message().contains("\n\nEVIDENCE:\n") {
            Reply::content("Answer: Tessellate Labs [1]")
        } else {
            Reply::content("{\"entities\": []}")
        }
    });
    let again = tmp.path().join("again");
    let r = run(&answers.base_url(), &index, &again);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(summary(&again)["hybrid"]["n_answer_failed"], 0);
    assert!(results(&again).iter().all(|r| r["answer"] != ""));
    assert!(answers.requests().iter().any(|r| r.last_user_message().lines().next().unwrap().contains("Tessellate")));

    // A model that never answers fails the run (exit code 2), after writing the report.
    let never = FakeLlm::start(|request| {
        if request.last_user_message().contains("\n\nEVIDENCE:\n") {
            Reply::Cut("Answer: and and and".into())
        } else {
            Reply::content("{\"entities\": []}")
        }
    });
    // (On an index of its own: the first runs' answers are in this one's cache.)
    let fresh = tmp.path().join("fresh");
    copy_dir(sample_index(), &fresh);
    let out = tmp.path().join("never");
    let r = run(&never.base_url(), &fresh, &out);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains(&format!("the LLM never answered: all {n} answers failed")), "{}", r.stderr);
    assert_eq!(summary(&out)["hybrid"]["n_answer_failed"], n);
    assert!(out.join("report.md").exists());
}
