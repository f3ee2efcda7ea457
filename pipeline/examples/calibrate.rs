//! Calibrates the similarity thresholds of an embedding model on questions with gold answers.
//!
//! For every question, the relevant units are those whose text contains a gold answer
//! (normalised as for EM); the question's best cosine with a relevant hyperedge, edge and chunk
//! is collected. A threshold is a filter against unrelated evidence, so it is set at the 10th
//! percentile of those best cosines: nine questions in ten keep their best relevant unit above
//! it. The distribution of every unit's cosine is printed beside it, to see what the threshold
//! cuts.
//!
//! `cargo run -p flexstruct-pipeline --example calibrate -- INDEX QUESTIONS.jsonl [CONFIG]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use flexstruct_pipeline::config::Config;
use flexstruct_pipeline::index::Index;
use flexstruct_pipeline::query::scan::{Vectors, dot};
use flexstruct_pipeline::query::{Engine, read_questions};

/// Lowercase, punctuation to spaces, articles dropped, whitespace collapsed.
fn normalise(s: &str) -> String {
    let cleaned: String = s.to_lowercase().chars().map(|c| if c.is_alphanumeric() { c } else { ' ' }).collect();
    cleaned.split_whitespace().filter(|w| !matches!(*w, "a" | "an" | "the")).collect::<Vec<_>>().join(" ")
}

fn percentile(values: &mut [f32], p: f32) -> f32 {
    if values.is_empty() {
        return f32::NAN;
    }
    values.sort_by(f32::total_cmp);
    values[((values.len() - 1) as f32 * p).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (index, questions) = (Path::new(&args[0]), Path::new(&args[1]));
    let config = Config::load(args.get(2).map(Path::new)).expect("config");
    let gold: Vec<Vec<String>> = std::fs::read_to_string(questions)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["answers"].as_array().map(|a| a.iter().filter_map(|x| x.as_str()).map(normalise).filter(|s| !s.is_empty()).collect()).unwrap_or_default()
        })
        .collect();
    let index = Index::open(index).expect("index");
    let engine = Engine::open(&index, &config).expect("engine");
    let prepared = engine.prepare(read_questions(questions).unwrap()).unwrap();
    let kb = &engine.kb;
    let texts = |array: &arrow::array::StringArray| array.iter().map(|t| normalise(t.unwrap_or_default())).collect::<Vec<_>>();
    let units: [(&str, Vec<String>, &Vectors); 3] = [
        ("hyperedge", texts(&kb.hyperedges.ref_text), &kb.hyperedges.vectors),
        ("edge", texts(&kb.edges.text), &kb.edges.vectors),
        ("chunk", texts(&kb.chunks.text), &kb.chunks.vectors),
    ];
    println!("{} questions, model {}", prepared.questions.len(), kb.model);
    for (name, normalised, vectors) in &units {
        let mut best_relevant = Vec::new();
        let mut sample_all = Vec::new();
        for (q, answers) in prepared.vectors.iter().zip(&gold) {
            let relevant = (0..vectors.len())
                .filter(|&r| answers.iter().any(|a| format!(" {} ", normalised[r]).contains(&format!(" {a} "))))
                .map(|r| dot(vectors.row(r), q))
                .fold(f32::NAN, f32::max);
            if !relevant.is_nan() {
                best_relevant.push(relevant);
            }
            sample_all.extend((0..vectors.len()).step_by(97).map(|r| dot(vectors.row(r), q)));
        }
        let found = best_relevant.len();
        let p10 = percentile(&mut best_relevant, 0.10);
        let p50 = percentile(&mut best_relevant, 0.50);
        let all50 = percentile(&mut sample_all, 0.50);
        let all90 = percentile(&mut sample_all, 0.90);
        let all99 = percentile(&mut sample_all, 0.99);
        println!(
            "{name:>9}: {found} questions with a relevant unit; best relevant cosine p10 {p10:.3}, p50 {p50:.3}; \
             every unit p50 {all50:.3}, p90 {all90:.3}, p99 {all99:.3} → threshold {p10:.2}"
        );
    }
}
