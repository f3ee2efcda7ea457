//! MiniLM sentences per second on generated ~30-word sentences (the reference workload of the
//! design notes), or on the questions of a `questions.jsonl` file. Prints the first (cold) call
//! apart from the median of three warm runs. Threads follow RAYON_NUM_THREADS.
//!
//! `cargo run -p flexstruct-pipeline --example embed_throughput -- [SENTENCES] [BATCH] [QUESTIONS.jsonl]`
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use flexstruct_pipeline::models::{Embedder, MiniLm};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let batch: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(32);
    let sentences: Vec<String> = match args.next() {
        Some(path) => std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["question"].as_str().unwrap().to_string())
            .take(n)
            .collect(),
        None => {
            let words = [
                "river",
                "authority",
                "measured",
                "the",
                "flow",
                "at",
                "gauge",
                "every",
                "summer",
                "and",
                "published",
                "readings",
                "for",
                "towns",
                "farms",
                "drought",
                "fund",
                "paid",
                "growers",
                "compact",
                "signed",
                "in",
                "May",
            ];
            (0..n)
                .map(|i| {
                    (0..30).map(|k| words[(i * 7 + k * 13 + k * k) % words.len()]).collect::<Vec<_>>().join(" ") + "."
                })
                .collect()
        }
    };
    let n = sentences.len();
    let texts: Vec<&str> = sentences.iter().map(String::as_str).collect();
    let model = MiniLm::load(std::path::Path::new("data/models/all-MiniLM-L6-v2"), batch).unwrap();
    let started = Instant::now();
    model.embed(&texts).unwrap();
    let cold = started.elapsed().as_secs_f64();
    let mut runs = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        model.embed(&texts).unwrap();
        runs.push(started.elapsed().as_secs_f64());
    }
    runs.sort_by(|a, b| a.total_cmp(b));
    println!(
        "{n} texts, batch {batch}, threads {}: median {:.0} texts/s ({:.2} ms each); first call {:.2} ms each",
        rayon::current_num_threads(),
        n as f64 / runs[1],
        runs[1] * 1000.0 / n as f64,
        cold * 1000.0 / n as f64
    );
}
