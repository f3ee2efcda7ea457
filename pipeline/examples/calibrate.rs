//! Calibrates the similarity thresholds of an embedding model on dev questions.
//!
//! A threshold is the paper's filter against unrelated evidence: a unit must be more similar to
//! the question than what an unrelated unit typically is. For every question the cosine with
//! every unit of a kind (hyperedge, edge, chunk) is computed; the threshold proposed is the 99th
//! percentile of all of them (a unit above it is closer to the question than 99 % of the kb).
//! Where gold answers are short enough to be found verbatim, the best cosine of a unit that
//! contains one is collected too, and its 10th percentile printed: a threshold above it would
//! drop the best relevant unit of more than one question in ten.
//!
//! `cargo run -p flexstruct-pipeline --example calibrate -- INDEX QUESTIONS.jsonl [CONFIG]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use flexstruct_pipeline::config::Config;
use flexstruct_pipeline::io::Index;
use flexstruct_pipeline::query::read_questions;
use flexstruct_pipeline::query::scan::Vectors;

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
            v["answers"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x.as_str()).map(normalise).filter(|s| !s.is_empty()).collect())
                .unwrap_or_default()
        })
        .collect();
    let index = Index::open(index).expect("index");
    let engine = flexstruct_pipeline::compose::open_engine(&index, &config).expect("engine");
    let prepared = engine.prepare(read_questions(questions).unwrap()).unwrap();
    let kb = &engine.kb;
    let texts =
        |array: &arrow::array::StringArray| array.iter().map(|t| normalise(t.unwrap_or_default())).collect::<Vec<_>>();
    let units: [(&str, Vec<String>, &Vectors); 3] = [
        ("hyperedge", texts(&kb.hyperedges.ref_text), &kb.hyperedges.vectors),
        ("edge", texts(&kb.edges.text), &kb.edges.vectors),
        ("chunk", texts(&kb.chunks.text), &kb.chunks.vectors),
    ];
    println!("{} questions, model {}", prepared.questions.len(), kb.model);
    for (name, normalised, vectors) in &units {
        let mut best_relevant = Vec::new();
        let mut all = Vec::new();
        for (q, answers) in prepared.vectors.iter().zip(&gold) {
            let scores: Vec<f32> = (0..vectors.len()).map(|r| vectors.dot(q, r)).collect();
            let relevant = (0..vectors.len())
                .filter(|&r| {
                    answers.iter().any(|a| {
                        a.split(' ').count() <= 8 && format!(" {} ", normalised[r]).contains(&format!(" {a} "))
                    })
                })
                .map(|r| scores[r])
                .fold(f32::NAN, f32::max);
            if !relevant.is_nan() {
                best_relevant.push(relevant);
            }
            all.extend(scores);
        }
        let found = best_relevant.len();
        let p99 = percentile(&mut all, 0.99);
        println!(
            "{name:>9}: every unit p50 {:.3}, p90 {:.3}, p99 {p99:.3}, p99.9 {:.3}; best relevant cosine ({found} questions) p10 {:.3}, p50 {:.3} → threshold {p99:.2}",
            percentile(&mut all, 0.5),
            percentile(&mut all, 0.9),
            percentile(&mut all, 0.999),
            percentile(&mut best_relevant, 0.10),
            percentile(&mut best_relevant, 0.50),
        );
    }
}
