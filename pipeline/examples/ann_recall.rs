//! Recall of the approximate index against the exact scan on real questions: for each kb table,
//! its inverted file (the merge's, or one built in memory as the merge builds it: `[ann] lists`,
//! 0: √rows), and
//! each question's top K through it, at each number of probed lists, is compared with the exact
//! top K (recall@K: the share of the exact top K found), beside milliseconds per question of
//! both, the whole batch at once (median of three).
//!
//! `cargo run -p flexstruct-pipeline --example ann_recall -- INDEX QUESTIONS.jsonl [PROBES=8,16,32,48,64] [K=10]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use flexstruct_pipeline::config::Config;
use flexstruct_pipeline::query::scan::Ivf;

mod common;
use common::{engine_and_questions, median_ms, tables};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (index, questions) = (Path::new(&args[0]), Path::new(&args[1]));
    let probes: Vec<usize> =
        args.get(2).map_or("8,16,32,48,64", String::as_str).split(',').map(|p| p.parse().unwrap()).collect();
    let k: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(10);
    let config = Config::load(None).expect("config");
    let (engine, vectors) = engine_and_questions(index, questions, &config);
    let queries: Vec<&[f32]> = vectors.iter().map(Vec::as_slice).collect();
    let n = queries.len() as f64;
    println!("{} questions, top {k}, {} threads", queries.len(), rayon::current_num_threads());
    println!(
        "{:<11} {:>8} {:>6} {:>8} {:>7} {:>10} {:>9} {:>9}",
        "table", "rows", "lists", "build s", "probes", "recall@k", "ann ms", "exact ms"
    );
    for (name, vectors) in tables(&engine.kb) {
        if vectors.is_empty() {
            continue;
        }
        let exact = vectors.exact_top_k_batch(&queries, f32::MIN, k);
        let exact_ms = median_ms(|| {
            std::hint::black_box(vectors.exact_top_k_batch(&queries, f32::MIN, k));
        });
        // The merge's index when the kb has one (build time 0), else one built here.
        let started = Instant::now();
        let ivf = Arc::new(match vectors.ann() {
            Some((ivf, _)) => ivf.clone(),
            None => Ivf::build(&vectors.to_f32(), vectors.dim(), config.ann.lists_for(vectors.len())),
        });
        let build = if vectors.ann().is_some() { 0.0 } else { started.elapsed().as_secs_f64() };
        for &p in &probes {
            let approximate = vectors.clone().with_ann(ivf.clone(), p);
            let found = approximate.top_k_batch(&queries, f32::MIN, k);
            let (mut hits, mut wanted) = (0usize, 0usize);
            for (a, e) in found.iter().zip(&exact) {
                wanted += e.len();
                hits += e.iter().filter(|x| a.iter().any(|h| h.row == x.row)).count();
            }
            let ann_ms = median_ms(|| {
                std::hint::black_box(approximate.top_k_batch(&queries, f32::MIN, k));
            });
            println!(
                "{name:<11} {:>8} {:>6} {build:>8.2} {p:>7} {:>10.4} {:>9.3} {:>9.3}",
                vectors.len(),
                ivf.lists(),
                hits as f64 / wanted.max(1) as f64,
                ann_ms / n,
                exact_ms / n
            );
        }
    }
}
