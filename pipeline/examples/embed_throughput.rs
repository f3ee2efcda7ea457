//! MiniLM sentences per second on generated ~30-word sentences (the reference workload of the
//! design notes). Threads follow RAYON_NUM_THREADS.
//!
//! `cargo run -p flexstruct-pipeline --example embed_throughput -- [SENTENCES] [BATCH]`
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use flexstruct_pipeline::embed::{Embedder, MiniLm};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let batch: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(32);
    let words = ["river", "authority", "measured", "the", "flow", "at", "gauge", "every", "summer", "and", "published",
        "readings", "for", "towns", "farms", "drought", "fund", "paid", "growers", "compact", "signed", "in", "May"];
    let sentences: Vec<String> = (0..n)
        .map(|i| (0..30).map(|k| words[(i * 7 + k * 13 + k * k) % words.len()]).collect::<Vec<_>>().join(" ") + ".")
        .collect();
    let texts: Vec<&str> = sentences.iter().map(String::as_str).collect();
    let model = MiniLm::load(std::path::Path::new("data/models/all-MiniLM-L6-v2"), batch).unwrap();
    model.embed(&texts[..batch.min(n)]).unwrap(); // warm-up
    let mut runs = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        model.embed(&texts).unwrap();
        runs.push(n as f64 / started.elapsed().as_secs_f64());
    }
    runs.sort_by(|a, b| a.total_cmp(b));
    println!("{n} sentences, batch {batch}, threads {}: median {:.0} sentences/s", rayon::current_num_threads(), runs[1]);
}
