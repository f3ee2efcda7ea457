//! SSC time and distance-matrix memory against the number of hyperedges of one document
//! (synthetic unit vectors in topic runs, 384 dimensions).
//!
//! `cargo run -p flexstruct-pipeline --example cluster_scaling -- [N ...]`
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use flexstruct_pipeline::models::normalise;
use flexstruct_pipeline::stages::cluster::ClusterConfig;
use flexstruct_pipeline::stages::cluster::{Point, cluster_document};

fn main() {
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![500, 2000, 8000] } else { sizes };
    for n in sizes {
        let points: Vec<Point> = (0..n)
            .map(|i| {
                let topic = (i / 12) % 40;
                let mut v: Vec<f32> = (0..384).map(|d| ((d * 31 + topic * 17) % 97) as f32 / 97.0 - 0.5).collect();
                v[(i * 7) % 384] += 0.3;
                normalise(&mut v);
                Point { id: format!("h{i}"), item_idx: i as i32, ref_text: String::new(), vector: v }
            })
            .collect();
        for max_window in [3000, usize::MAX] {
            if max_window == usize::MAX && n <= 3000 {
                continue;
            }
            let config = ClusterConfig { max_window, ..ClusterConfig::default() };
            let started = Instant::now();
            let clusters = cluster_document("bench", points.clone(), &config);
            let window = max_window.min(n);
            println!(
                "n = {n}, window {window}: {:.2} s, {} clusters, distance matrix {:.0} MB",
                started.elapsed().as_secs_f64(),
                clusters.len(),
                (window * window * 4) as f64 / 1e6
            );
        }
    }
}
