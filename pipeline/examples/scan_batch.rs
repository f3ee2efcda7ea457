//! Milliseconds per question of the exact top-k scan over each kb table (whether or not it has an
//! approximate index), one question at a time against a whole batch at once (each block of rows
//! read once for all questions), with the questions' own embeddings. The two give the same rows;
//! the batch reads each table once.
//!
//! `cargo run -p flexstruct-pipeline --example scan_batch -- INDEX QUESTIONS.jsonl [K]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use flexstruct_pipeline::config::Config;

mod common;
use common::{engine_and_questions, median_ms, tables};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (index, questions) = (Path::new(&args[0]), Path::new(&args[1]));
    let k: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(7);
    let (engine, vectors) = engine_and_questions(index, questions, &Config::load(None).expect("config"));
    let queries: Vec<&[f32]> = vectors.iter().map(Vec::as_slice).collect();
    let n = queries.len() as f64;
    println!("{} questions, top {k}, {} threads", queries.len(), rayon::current_num_threads());
    println!("{:<11} {:>8} {:>14} {:>14}", "table", "rows", "one by one ms", "batched ms");
    for (name, vectors) in tables(&engine.kb) {
        let batched = vectors.exact_top_k_batch(&queries, f32::MIN, k);
        let single: Vec<_> = queries.iter().map(|q| vectors.exact_top_k_batch(&[q], f32::MIN, k).remove(0)).collect();
        assert_eq!(batched, single, "{name}: batched and single scans differ");
        let one = median_ms(|| {
            for q in &queries {
                std::hint::black_box(vectors.exact_top_k_batch(&[q], f32::MIN, k));
            }
        });
        let all = median_ms(|| {
            std::hint::black_box(vectors.exact_top_k_batch(&queries, f32::MIN, k));
        });
        println!("{name:<11} {:>8} {:>14.3} {:>14.3}", vectors.len(), one / n, all / n);
    }
}
