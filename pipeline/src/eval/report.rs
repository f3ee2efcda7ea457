//! Writing an evaluation: `results.jsonl` and `results.parquet` (one row per variant and
//! question), `summary.json`, `report.md` with its tables, and SVG charts beside it.

use std::fmt::Write as _;
use std::path::Path;

use super::paired::{self, Paired};
use super::plot;
use super::{Row, Stats};
use crate::core::{Error, Result};
use crate::io::files::write_file_atomic;
use crate::io::parquet::write_rows_parquet;

/// What a report is about, for its header.
#[derive(Debug, Clone, Default)]
pub struct Header {
    /// Title line.
    pub title: String,
    /// Lines of settings (index, questions, model, generator, budget, …).
    pub settings: Vec<String>,
}

fn cell(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_owned(), |v| format!("{v:.2}"))
}

/// The summary table in Markdown.
pub fn summary_table(summary: &[(String, Stats)]) -> String {
    let mut s = String::from(
        "| variant | n | EM | F1 | GE | answer recall | answer-token recall | evidence recall | doc recall | doc recall@2 | doc recall@5 | context tokens | cap | retrieval p50 ms | retrieval p95 ms | of which embedding p50 ms |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (name, st) in summary {
        // A variant is labelled re-ranked only for the questions that were.
        let name = match (st.n_reranked, st.n_rerank_failed) {
            (Some(_), Some(0)) => format!("{name} +rerank"),
            (Some(0), Some(failed)) => format!("{name} (re-ranking failed for all {failed})"),
            (Some(done), Some(failed)) => format!("{name} (+rerank for {done}; failed for {failed})"),
            _ => name.clone(),
        };
        // Failed answers score 0: said beside the scores, not hidden in them.
        let name = match st.n_answer_failed {
            0 => name,
            failed => format!("{name} (answer failed for {failed})"),
        };
        let _ = writeln!(
            s,
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            st.n,
            cell(st.em),
            cell(st.f1),
            match (st.ge, st.n_ge) {
                (_, None) => "not measured".to_owned(),
                (Some(v), Some(graded)) if graded == st.n => format!("{v:.2}"),
                // Failed gradings are said, not hidden in the mean.
                (Some(v), Some(graded)) => format!("{v:.2} ({graded} of {} graded)", st.n),
                (None, Some(_)) => format!("none of {} graded", st.n),
            },
            cell(st.answer_recall),
            cell(st.answer_token_recall),
            cell(st.evidence_recall),
            cell(st.doc_recall),
            cell(st.doc_recall_at_2),
            cell(st.doc_recall_at_5),
            cell(st.context_tokens_mean),
            st.context_cap.filter(|&c| c > 0).map_or_else(|| "–".to_owned(), |c| c.to_string()),
            cell(st.retrieval_ms_p50),
            cell(st.retrieval_ms_p95),
            cell(st.embed_ms_p50),
        );
    }
    s
}

/// SG-RAG's own measures of the variants that match structure (`--mode paths`), overall and
/// per question type, in Markdown; empty when no variant does.
pub fn structure_table(summary: &[(String, Stats)]) -> String {
    let mut s = String::new();
    let mut line = |name: &str, kind: &str, st: &Stats| {
        if st.subgraph_exact.is_some() {
            let _ = writeln!(
                s,
                "| {name} | {kind} | {} | {} | {} | {} | {} |",
                st.n,
                cell(st.subgraph_exact),
                cell(st.subgraph_hit_at_1),
                cell(st.subgraph_recall),
                cell(st.subgraph_f1)
            );
        }
    };
    for (name, st) in summary {
        line(name, "all", st);
        for (kind, per) in st.by_type.iter().flatten() {
            line(name, kind, per);
        }
    }
    if s.is_empty() {
        return s;
    }
    format!(
        "\n## Structure matching (SG-RAG's measures)\n\nExact: questions whose graph matched the kb exactly (the rest got the 1-hop neighbourhood). Hit@1, recall and F1 score the labels the matched subgraphs give the node asked for, best subgraph first, against the gold answers (normalised equality; no match scores 0).\n\n\
         | variant | type | n | exact | Hit@1 | recall | F1 |\n|---|---|---:|---:|---:|---:|---:|\n{s}"
    )
}

/// The paired differences in Markdown.
pub fn paired_table(pairs: &[Paired]) -> String {
    let mut s = String::from(
        "| hybrid | variant | measure | n | hybrid − variant | 95 % interval | wins / losses / ties |\n|---|---|---|---:|---:|---|---|\n",
    );
    for p in pairs {
        let mark = if p.significant() { " *" } else { "" };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:+.2}{mark} | [{:+.2}, {:+.2}] | {} / {} / {} |",
            p.reference, p.variant, p.measure, p.n, p.difference, p.low, p.high, p.wins, p.losses, p.ties
        );
    }
    s
}

/// Writes every output of an evaluation into `out` and returns the report's path. `extra` is
/// Markdown appended to the report (cost table, sweep tables).
pub fn write(
    out: &Path,
    header: &Header,
    rows: &[Row],
    summary: &[(String, Stats)],
    extra: &str,
    plots: &[(String, String)],
) -> Result<std::path::PathBuf> {
    std::fs::create_dir_all(out).map_err(Error::io("creating the output folder", out))?;
    let mut jsonl = String::new();
    for r in rows {
        jsonl.push_str(&serde_json::to_string(r)?);
        jsonl.push('\n');
    }
    write_file_atomic(&out.join("results.jsonl"), jsonl.as_bytes())?;
    write_rows_parquet(&out.join("results.parquet"), flexstruct_schemas::eval_results_schema(), rows)?;
    let mut json = serde_json::Map::new();
    for (name, st) in summary {
        json.insert(name.clone(), serde_json::to_value(st)?);
    }
    write_file_atomic(&out.join("summary.json"), serde_json::to_string_pretty(&json)?.as_bytes())?;
    let labels: Vec<String> = summary.iter().map(|(name, _)| name.clone()).collect();
    let pairs = paired::against_hybrid(rows, &labels);
    write_file_atomic(&out.join("paired.json"), serde_json::to_string_pretty(&pairs)?.as_bytes())?;

    let mut md = format!("# {}\n\n", header.title);
    for line in &header.settings {
        let _ = writeln!(md, "- {line}");
    }
    md.push_str("\nRates are percentages over the questions where they apply (answer recall needs a gold answer, evidence recall gold evidence, document recall gold documents); GE needs an LLM judge and is never estimated.\n\n");
    md.push_str(&summary_table(summary));
    let mut types: Vec<&String> = summary.iter().flat_map(|(_, s)| s.by_type.iter().flat_map(|t| t.keys())).collect();
    types.sort();
    types.dedup();
    if types.len() > 1 {
        md.push_str("\n## By question type\n");
        for t in types {
            let per: Vec<(String, Stats)> = summary
                .iter()
                .filter_map(|(name, s)| s.by_type.as_ref().and_then(|b| b.get(t)).map(|st| (name.clone(), st.clone())))
                .collect();
            let _ = write!(md, "\n### {t}\n\n{}", summary_table(&per));
        }
    }
    md.push_str(&structure_table(summary));
    if !pairs.is_empty() {
        let _ = write!(
            md,
            "\n## Paired differences against hybrid\n\nPer question, hybrid minus the variant (at the same budget), ×100: the mean, a 95 % \
             percentile-bootstrap interval ({} resamples, fixed seed) and the sign counts; `*` marks an interval that excludes 0 \
             (a margin beyond the question-level noise).\n\n{}",
            paired::RESAMPLES,
            paired_table(&pairs)
        );
    }
    md.push_str(extra);
    if !plots.is_empty() {
        md.push_str("\n## Charts\n\n");
        for (caption, file) in plots {
            let _ = writeln!(md, "![{caption}]({file})\n");
        }
    }
    let path = out.join("report.md");
    write_file_atomic(&path, md.as_bytes())?;
    Ok(path)
}

/// The standard charts of a comparison: the recall measures and F1 per variant, and context
/// tokens per variant. Returns (caption, file name) pairs.
pub fn comparison_charts(out: &Path, title: &str, summary: &[(String, Stats)]) -> Result<Vec<(String, String)>> {
    let names: Vec<String> = summary.iter().map(|(n, _)| n.clone()).collect();
    let pick = |f: fn(&Stats) -> Option<f64>| summary.iter().map(|(_, s)| f(s)).collect::<Vec<_>>();
    let measures = vec![
        ("answer recall", pick(|s| s.answer_recall)),
        ("answer-token recall", pick(|s| s.answer_token_recall)),
        ("evidence recall", pick(|s| s.evidence_recall)),
        ("doc recall", pick(|s| s.doc_recall)),
        ("doc recall@5", pick(|s| s.doc_recall_at_5)),
        ("F1", pick(|s| s.f1)),
    ];
    plot::grouped_bars(&out.join("measures.svg"), &format!("{title}: measures"), &names, "%", &measures)?;
    plot::grouped_bars(
        &out.join("context_tokens.svg"),
        &format!("{title}: context tokens per question"),
        &names,
        "tokens (cl100k)",
        &[("context tokens", pick(|s| s.context_tokens_mean))],
    )?;
    Ok(vec![
        ("measures per variant".into(), "measures.svg".into()),
        ("context tokens per variant".into(), "context_tokens.svg".into()),
    ])
}
