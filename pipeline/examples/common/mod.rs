//! What the scan examples share: a kb loaded with the vectors of a questions file, its four
//! vector tables, and a median timing.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Instant;

use flexstruct_pipeline::config::Config;
use flexstruct_pipeline::io::Index;
use flexstruct_pipeline::query::kb::Kb;
use flexstruct_pipeline::query::scan::Vectors;
use flexstruct_pipeline::query::{Engine, read_questions};

/// Median of three runs of `f`, in milliseconds.
pub fn median_ms(mut f: impl FnMut()) -> f64 {
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

/// The engine of `index` under `config` and the embedded questions of `questions`.
pub fn engine_and_questions(index: &Path, questions: &Path, config: &Config) -> (Engine, Vec<Vec<f32>>) {
    let index = Index::open(index).expect("index");
    let engine = flexstruct_pipeline::compose::open_engine(&index, config).expect("engine");
    let prepared = engine.prepare(read_questions(questions).unwrap()).unwrap();
    let vectors = prepared.vectors.clone();
    (engine, vectors)
}

/// The kb's vector tables by name.
pub fn tables(kb: &Kb) -> [(&'static str, &Vectors); 4] {
    [
        ("entities", &kb.entities.vectors),
        ("hyperedges", &kb.hyperedges.vectors),
        ("edges", &kb.edges.vectors),
        ("chunks", &kb.chunks.vectors),
    ]
}
