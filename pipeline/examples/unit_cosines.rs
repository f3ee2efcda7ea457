//! Percentiles of unit-to-unit cosines of a kb (hyperedges, edges, chunks): the distribution the
//! merge derives its thresholds from (the same sample, `core::models::sampled_cosines`).
//! `cargo run -p flexstruct-pipeline --example unit_cosines -- INDEX...`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flexstruct_pipeline::config::Config;
use flexstruct_pipeline::core::models::sampled_cosines;
use flexstruct_pipeline::io::Index;
use flexstruct_pipeline::query::kb::Kb;

fn main() {
    let config = Config::load(None).unwrap();
    for path in std::env::args().skip(1) {
        let index = Index::open(std::path::Path::new(&path)).unwrap();
        let kb = Kb::load(&index, &config.embed.model, config.query.vector_precision, &config.ann).unwrap();
        for (name, v) in
            [("hyperedge", &kb.hyperedges.vectors), ("edge", &kb.edges.vectors), ("chunk", &kb.chunks.vectors)]
        {
            let mut c = sampled_cosines(&v.to_f32(), v.dim(), v.len());
            c.sort_by(f32::total_cmp);
            let q = |p: f64| c[((c.len() - 1) as f64 * p) as usize];
            let rank = |x: f32| c.partition_point(|&y| y < x) as f64 / c.len() as f64;
            println!(
                "{path} {name}: n {} pairs {} p50 {:.3} p90 {:.3} p95 {:.3} p98 {:.3} p99 {:.3}; rank of 0.28 {:.4}, of 0.30 {:.4}",
                v.len(),
                c.len(),
                q(0.5),
                q(0.9),
                q(0.95),
                q(0.98),
                q(0.99),
                rank(0.28),
                rank(0.30)
            );
        }
    }
}
