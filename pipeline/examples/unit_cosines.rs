//! Percentiles of unit-to-unit cosines of a kb (hyperedges, edges, chunks): the distribution the
//! merge derives its thresholds from (the same sample, `stages::merge::threshold_samples`).
//! `cargo run -p flexstruct-pipeline --example unit_cosines -- INDEX...`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flexstruct_pipeline::config::Config;
use flexstruct_pipeline::io::Index;
use flexstruct_pipeline::stages::merge::threshold_samples;

fn main() {
    let config = Config::load(None).unwrap();
    for path in std::env::args().skip(1) {
        let index = Index::open(std::path::Path::new(&path)).unwrap();
        // No kb fingerprint: the vectors are decoded from Parquet, whatever vector files exist.
        let samples = threshold_samples(&index, &config.embed.model, None).unwrap();
        for (unit, sample) in samples {
            let mut c = sample.cosines();
            if c.is_empty() {
                continue;
            }
            c.sort_by(f32::total_cmp);
            let q = |p: f64| c[((c.len() - 1) as f64 * p) as usize];
            let rank = |x: f32| c.partition_point(|&y| y < x) as f64 / c.len() as f64;
            println!(
                "{path} {}: pairs {} p50 {:.3} p90 {:.3} p95 {:.3} p98 {:.3} p99 {:.3}; rank of 0.28 {:.4}, of 0.30 {:.4}",
                unit.name(),
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
