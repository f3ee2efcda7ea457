//! Milliseconds per question of the exact top-k scan over each kb table, one question at a time
//! against a whole batch at once (each block of rows read once for all questions), with the
//! questions' own embeddings. The two give the same rows; the batch reads each table once.
//!
//! `cargo run -p flexstruct-pipeline --example scan_batch -- INDEX QUESTIONS.jsonl [K]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Instant;

use flexstruct_pipeline::config::Config;
use flexstruct_pipeline::io::Index;
use flexstruct_pipeline::query::read_questions;
use flexstruct_pipeline::query::scan::Vectors;

/// Median of three runs of `f`, in milliseconds.
fn median_ms(mut f: impl FnMut()) -> f64 {
    let mut runs: Vec<f64> = (0..3)
        .map(|_| {
            let started = Instant::now();
            f();
            started.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[1]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (index, questions) = (Path::new(&args[0]), Path::new(&args[1]));
    let k: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(7);
    let index = Index::open(index).expect("index");
    let engine =
        flexstruct_pipeline::compose::open_engine(&index, &Config::load(None).expect("config")).expect("engine");
    let prepared = engine.prepare(read_questions(questions).unwrap()).unwrap();
    let queries: Vec<&[f32]> = prepared.vectors.iter().map(Vec::as_slice).collect();
    let n = queries.len() as f64;
    let kb = &engine.kb;
    let tables: [(&str, &Vectors); 4] = [
        ("entities", &kb.entities.vectors),
        ("hyperedges", &kb.hyperedges.vectors),
        ("edges", &kb.edges.vectors),
        ("chunks", &kb.chunks.vectors),
    ];
    println!("{} questions, top {k}, {} threads", queries.len(), rayon::current_num_threads());
    println!("{:<11} {:>8} {:>14} {:>14}", "table", "rows", "one by one ms", "batched ms");
    for (name, vectors) in tables {
        let batched = vectors.top_k_batch(&queries, f32::MIN, k);
        let single: Vec<_> = queries.iter().map(|q| vectors.top_k_batch(&[q], f32::MIN, k).remove(0)).collect();
        assert_eq!(batched, single, "{name}: batched and single scans differ");
        let one = median_ms(|| {
            for q in &queries {
                std::hint::black_box(vectors.top_k_batch(&[q], f32::MIN, k));
            }
        });
        let all = median_ms(|| {
            std::hint::black_box(vectors.top_k_batch(&queries, f32::MIN, k));
        });
        println!("{name:<11} {:>8} {:>14.3} {:>14.3}", vectors.len(), one / n, all / n);
    }
}
