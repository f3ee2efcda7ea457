//! Percentiles of unit-to-unit cosines of a kb (hyperedges, edges, chunks): the distribution the
//! merge derives its thresholds from.
//! `cargo run -p flexstruct-pipeline --example unit_cosines -- INDEX...`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flexstruct_pipeline::config::Config;
use flexstruct_pipeline::io::Index;
use flexstruct_pipeline::query::kb::Kb;
use flexstruct_pipeline::query::scan::{Vectors, dot};

fn sample(v: &Vectors, probes: usize, targets: usize) -> Vec<f32> {
    let n = v.len();
    if n < 2 {
        return Vec::new();
    }
    let step = |k: usize| (n / k.min(n)).max(1);
    let mut out = Vec::new();
    for p in (0..n).step_by(step(probes)) {
        for t in (0..n).step_by(step(targets)).map(|t| (t + p / 2 + 1) % n) {
            if t != p {
                out.push(dot(v.row(p), v.row(t)));
            }
        }
    }
    out.sort_by(f32::total_cmp);
    out
}

fn main() {
    let config = Config::load(None).unwrap();
    for path in std::env::args().skip(1) {
        let index = Index::open(std::path::Path::new(&path)).unwrap();
        let kb = Kb::load(&index, &config.embed.model).unwrap();
        for (name, v) in
            [("hyperedge", &kb.hyperedges.vectors), ("edge", &kb.edges.vectors), ("chunk", &kb.chunks.vectors)]
        {
            let c = sample(v, 1000, 2000);
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
