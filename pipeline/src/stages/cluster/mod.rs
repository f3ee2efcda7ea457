//! The cluster stage: structure-aware semantic clustering (SSC, paper §3.1) of each document's
//! hyperedges → `clusters`, `cluster_members`.
//!
//! Dis_ij = (1 − cos(h_i, h_j)) + α·|k_i − k_j|, with k the item index (extraction order), then
//! HDBSCAN on the precomputed matrix. Noise hyperedges stay unclustered. A cluster's text is
//! the reference spans of its hyperedges in extraction order. The matrix is n² floats, so long
//! documents are clustered in overlapping windows of hyperedges (`max_window`), each hyperedge
//! taking its cluster from the window in which it lies most centrally.

pub mod config;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{FixedSizeListArray, Float32Array, Int32Array, RecordBatch, StringArray};
use flexstruct_schemas::{Table, col};
use hdbscan::{DistanceMetric, Hdbscan, HdbscanHyperParams};
use rayon::prelude::*;
use serde::Serialize;

pub use config::ClusterConfig;

use super::Stage;
use super::driver::{BucketOutput, BucketStage, RunContext, run_buckets};
use crate::core::Result;
use crate::core::ids::{stable_id, value_fingerprint};
use crate::core::units::Unit;
use crate::io::StageMetrics;
use crate::io::parquet::{string_column, typed, vector_at};

/// Stage name.
pub const STAGE: &str = Stage::Cluster.name();
const VERSION: &str = "1";

/// The cluster stage's own figures of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ClusterDetails {
    /// Hyperedges clustered in this run (those with a vector).
    pub hyperedges: u64,
    /// Of those, the ones in a cluster (the rest is noise).
    pub members: u64,
}

/// What a cluster run did.
pub type ClusterMetrics = StageMetrics<ClusterDetails>;

/// Runs the cluster stage over the context's shard.
pub fn run(ctx: &RunContext<'_>, config: &ClusterConfig) -> Result<ClusterMetrics> {
    config.validate()?;
    let stage = BucketStage {
        name: STAGE,
        version: VERSION,
        config_fingerprint: value_fingerprint(config)?,
        inputs: vec![Table::Hyperedges, Table::Embeddings],
        outputs: vec![Table::Clusters, Table::ClusterMembers],
    };
    let (hyperedges, members) = (AtomicU64::new(0), AtomicU64::new(0));
    let metrics = run_buckets(ctx, &stage, |_, inputs| {
        let (clusters, member_rows, clustered) = cluster_bucket(&inputs[0], &inputs[1], config)?;
        hyperedges.fetch_add(clustered, Ordering::Relaxed);
        members.fetch_add(member_rows.num_rows() as u64, Ordering::Relaxed);
        Ok(BucketOutput { tables: vec![vec![clusters], vec![member_rows]], ..BucketOutput::default() })
    })?;
    Ok(metrics.with_details(ClusterDetails { hyperedges: hyperedges.into_inner(), members: members.into_inner() }))
}

/// A hyperedge as SSC needs it.
#[derive(Debug, Clone)]
pub struct Point {
    /// Hyperedge id.
    pub id: String,
    /// Item index k.
    pub item_idx: i32,
    /// Reference span.
    pub ref_text: String,
    /// Unit-length embedding.
    pub vector: Vec<f32>,
}

/// A cluster of one document.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterOut {
    /// Stable id.
    pub cluster_id: String,
    /// Member spans in extraction order.
    pub text: String,
    /// (hyperedge id, membership probability), in extraction order.
    pub members: Vec<(String, f32)>,
}

/// SSC of one document's hyperedges (any order).
pub fn cluster_document(doc_id: &str, mut points: Vec<Point>, config: &ClusterConfig) -> Vec<ClusterOut> {
    points.sort_by_key(|p| p.item_idx);
    let n = points.len();
    if n < config.min_cluster_size.max(2) {
        return Vec::new();
    }
    // Per point: its label, a (window, cluster) pair, its probability, and how central it lies
    // in that window.
    type Assigned = ((usize, i32), f32, f64);
    let mut assignment: Vec<Option<Assigned>> = vec![None; n];
    let window = config.max_window.max(config.min_cluster_size * 2).min(n);
    let step = (window - window / 4).max(1);
    let mut starts: Vec<usize> = (0..n.saturating_sub(window) + 1).step_by(step).collect();
    if starts.last().is_some_and(|&s| s + window < n) {
        starts.push(n - window);
    }
    // Windows are independent: one huge document still uses every core.
    let labelled: Vec<(Vec<i32>, Vec<f32>)> =
        starts.par_iter().map(|&start| hdbscan_labels(&points[start..start + window], config)).collect();
    for (w, (&start, (labels, probabilities))) in starts.iter().zip(labelled).enumerate() {
        let centre = start as f64 + window as f64 / 2.0;
        for (offset, (label, probability)) in labels.into_iter().zip(probabilities).enumerate() {
            let i = start + offset;
            // Keep the window in which the point is most central.
            let centrality = -((i as f64) - centre).abs();
            let better = assignment[i].as_ref().is_none_or(|a| centrality > a.2);
            if better {
                assignment[i] =
                    (label >= 0).then_some(((w, label), probability, centrality)).or(Some(((w, -1), 0.0, centrality)));
            }
        }
    }
    let mut groups: BTreeMap<(usize, i32), Vec<(usize, f32)>> = BTreeMap::new();
    for (i, a) in assignment.into_iter().enumerate() {
        if let Some((label, p, _)) = a
            && label.1 >= 0
        {
            groups.entry(label).or_default().push((i, p));
        }
    }
    let mut clusters: Vec<(usize, ClusterOut)> = groups
        .into_values()
        .filter(|members| members.len() >= 2)
        .map(|members| {
            let ids: Vec<&str> = members.iter().map(|(i, _)| points[*i].id.as_str()).collect();
            let mut parts = vec![doc_id];
            parts.extend(&ids);
            let cluster = ClusterOut {
                cluster_id: stable_id("cl", &parts),
                text: members.iter().map(|(i, _)| points[*i].ref_text.trim()).collect::<Vec<_>>().join("\n"),
                members: members.iter().map(|(i, p)| (points[*i].id.clone(), *p)).collect(),
            };
            (members[0].0, cluster)
        })
        .collect();
    // Clusters in the order of their first member.
    clusters.sort_by_key(|(first, _)| *first);
    clusters.into_iter().map(|(_, c)| c).collect()
}

/// HDBSCAN labels (−1 = noise) and membership probabilities of a window of points.
fn hdbscan_labels(points: &[Point], config: &ClusterConfig) -> (Vec<i32>, Vec<f32>) {
    let n = points.len();
    let matrix = distance_matrix(points, config.alpha);
    let params = HdbscanHyperParams::builder()
        .min_cluster_size(config.min_cluster_size.max(2))
        .min_samples(config.min_samples.max(1))
        .dist_metric(DistanceMetric::Precalculated)
        .build();
    let labels = match Hdbscan::new(&matrix, params).cluster() {
        Ok(labels) => labels,
        // Only an empty or non-finite input can fail; treat everything as noise.
        Err(_) => vec![-1; n],
    };
    // Membership probability: HDBSCAN's λ_p / λ_max approximated with core distances (the
    // distance to the min_samples-th neighbour): the densest member of a cluster has 1.
    let k = config.min_samples.max(1).min(n.saturating_sub(1)).max(1);
    let core: Vec<f32> = matrix
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let mut d: Vec<f32> = row.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, v)| *v).collect();
            // The k-th smallest in linear time (a full sort per row made long documents n² log n).
            if d.len() < k {
                return 0.0;
            }
            *d.select_nth_unstable_by(k - 1, f32::total_cmp).1
        })
        .collect();
    let mut densest: HashMap<i32, f32> = HashMap::new();
    for (l, c) in labels.iter().zip(&core) {
        if *l >= 0 {
            let e = densest.entry(*l).or_insert(f32::MAX);
            *e = e.min(*c);
        }
    }
    let probabilities = labels
        .iter()
        .zip(&core)
        .map(|(l, c)| match densest.get(l) {
            Some(&min) if *c > 0.0 => (min / c).clamp(0.0, 1.0),
            Some(_) => 1.0,
            None => 0.0,
        })
        .collect();
    (labels, probabilities)
}

/// Dis_ij = (1 − cos) + α·|k_i − k_j| over unit vectors (cosine = dot product). The n×n dot
/// products are one matrix product (candle's optimised gemm).
pub fn distance_matrix(points: &[Point], alpha: f32) -> Vec<Vec<f32>> {
    let n = points.len();
    let dim = points.first().map_or(0, |p| p.vector.len());
    let dots = cosine_matrix(points, dim).unwrap_or_else(|| {
        points
            .iter()
            .map(|p| points.iter().map(|q| p.vector.iter().zip(&q.vector).map(|(a, b)| a * b).sum()).collect())
            .collect()
    });
    (0..n)
        .into_par_iter()
        .map(|i| {
            (0..n)
                .map(|j| {
                    if i == j {
                        0.0
                    } else {
                        (1.0 - dots[i][j]).max(0.0)
                            + alpha * (points[i].item_idx - points[j].item_idx).unsigned_abs() as f32
                    }
                })
                .collect()
        })
        .collect()
}

/// All pairwise dot products, or None if the vectors disagree in length.
fn cosine_matrix(points: &[Point], dim: usize) -> Option<Vec<Vec<f32>>> {
    if dim == 0 || points.iter().any(|p| p.vector.len() != dim) {
        return None;
    }
    let flat: Vec<f32> = points.iter().flat_map(|p| p.vector.iter().copied()).collect();
    let m = candle_core::Tensor::from_vec(flat, (points.len(), dim), &candle_core::Device::Cpu).ok()?;
    m.matmul(&m.t().ok()?).ok()?.to_vec2::<f32>().ok()
}

/// The clusters and memberships of a bucket, and how many hyperedges were clustered.
fn cluster_bucket(
    hyperedges: &[RecordBatch],
    embeddings: &[RecordBatch],
    config: &ClusterConfig,
) -> Result<(RecordBatch, RecordBatch, u64)> {
    let mut vectors: HashMap<String, Vec<f32>> = HashMap::new();
    for batch in embeddings {
        let units = string_column(batch, col::UNIT)?;
        let ids = string_column(batch, col::ID)?;
        let lists = typed::<FixedSizeListArray>(batch, col::EMBEDDING)?;
        for i in 0..batch.num_rows() {
            if units.value(i) == Unit::Hyperedge.name() {
                vectors.insert(ids.value(i).to_owned(), vector_at(lists, i)?);
            }
        }
    }
    let mut docs: BTreeMap<String, Vec<Point>> = BTreeMap::new();
    for batch in hyperedges {
        let (doc, id, refs) = (
            string_column(batch, col::DOC_ID)?,
            string_column(batch, col::HYPEREDGE_ID)?,
            string_column(batch, col::REF_TEXT)?,
        );
        let idx = typed::<Int32Array>(batch, col::ITEM_IDX)?;
        for i in 0..batch.num_rows() {
            // A hyperedge without a vector (embed not run since it appeared) is not clustered.
            if let Some(v) = vectors.get(id.value(i)) {
                docs.entry(doc.value(i).to_owned()).or_default().push(Point {
                    id: id.value(i).to_owned(),
                    item_idx: idx.value(i),
                    ref_text: refs.value(i).to_owned(),
                    vector: v.clone(),
                });
            }
        }
    }
    let clustered = docs.values().map(|points| points.len() as u64).sum();
    let per_doc: Vec<(String, Vec<ClusterOut>)> = docs
        .into_par_iter()
        .map(|(doc_id, points)| {
            let c = cluster_document(&doc_id, points, config);
            (doc_id, c)
        })
        .collect();
    let clusters: Vec<(&str, &ClusterOut)> =
        per_doc.iter().flat_map(|(d, cs)| cs.iter().map(move |c| (d.as_str(), c))).collect();
    let members: Vec<(&str, &str, &(String, f32))> =
        clusters.iter().flat_map(|(d, c)| c.members.iter().map(move |m| (*d, c.cluster_id.as_str(), m))).collect();
    let clusters_batch = RecordBatch::try_new(
        Table::Clusters.schema(),
        vec![
            Arc::new(clusters.iter().map(|c| Some(c.1.cluster_id.as_str())).collect::<StringArray>()),
            Arc::new(clusters.iter().map(|c| Some(c.0)).collect::<StringArray>()),
            Arc::new(clusters.iter().map(|c| Some(c.1.text.as_str())).collect::<StringArray>()),
        ],
    )?;
    let members_batch = RecordBatch::try_new(
        Table::ClusterMembers.schema(),
        vec![
            Arc::new(members.iter().map(|m| Some(m.1)).collect::<StringArray>()),
            Arc::new(members.iter().map(|m| Some(m.0)).collect::<StringArray>()),
            Arc::new(members.iter().map(|m| Some(m.2.0.as_str())).collect::<StringArray>()),
            Arc::new(members.iter().map(|m| Some(m.2.1)).collect::<Float32Array>()),
        ],
    )?;
    Ok((clusters_batch, members_batch, clustered))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(alpha: f32) -> ClusterConfig {
        ClusterConfig { alpha, min_cluster_size: 3, min_samples: 2, max_window: 3000 }
    }

    /// A unit vector near axis `axis` (of 8), slightly perturbed by `jitter`.
    fn point(i: i32, axis: usize, jitter: f32) -> Point {
        let mut v = vec![0.0f32; 8];
        v[axis] = 1.0;
        v[(axis + 1) % 8] = jitter;
        crate::models::normalise(&mut v);
        Point { id: format!("h{i}"), item_idx: i, ref_text: format!("span {i}."), vector: v }
    }

    #[test]
    fn planted_clusters_are_recovered() {
        // Three topics, each five consecutive hyperedges.
        let points: Vec<Point> = (0..15).map(|i| point(i, (i / 5) as usize * 3, 0.05 * (i % 5) as f32)).collect();
        let clusters = cluster_document("d", points, &config(0.01));
        let groups: Vec<Vec<String>> =
            clusters.iter().map(|c| c.members.iter().map(|m| m.0.clone()).collect()).collect();
        let expected: Vec<Vec<String>> =
            (0..3).map(|t| (t * 5..t * 5 + 5).map(|i| format!("h{i}")).collect()).collect();
        assert_eq!(groups, expected);
        assert_eq!(clusters[0].text, "span 0.\nspan 1.\nspan 2.\nspan 3.\nspan 4.");
        assert!(clusters.iter().flat_map(|c| &c.members).all(|m| m.1 > 0.0 && m.1 <= 1.0));
    }

    #[test]
    fn locality_keeps_far_apart_twins_apart() {
        // Topic A at the start and again far later; with a large alpha the two runs split.
        let mut points: Vec<Point> = (0..4).map(|i| point(i, 0, 0.01 * i as f32)).collect();
        points.extend((4..40).map(|i| point(i, 4, 0.01 * (i % 7) as f32)));
        points.extend((40..44).map(|i| point(i, 0, 0.01 * (i - 40) as f32)));
        let together = cluster_document("d", points.clone(), &config(0.0));
        let first_run_cluster = |cs: &[ClusterOut]| cs.iter().find(|c| c.members.iter().any(|m| m.0 == "h0")).cloned();
        let c = first_run_cluster(&together).unwrap();
        assert!(c.members.iter().any(|m| m.0 == "h41"), "alpha 0 joins the twins: {c:?}");
        let apart = cluster_document("d", points, &config(0.5));
        if let Some(c) = first_run_cluster(&apart) {
            assert!(c.members.iter().all(|m| m.0 != "h41"), "alpha 0.5 keeps them apart: {c:?}");
        }
    }

    #[test]
    fn degenerate_inputs() {
        assert!(cluster_document("d", Vec::new(), &config(0.1)).is_empty());
        assert!(cluster_document("d", vec![point(0, 0, 0.0)], &config(0.1)).is_empty());
        assert!(cluster_document("d", vec![point(0, 0, 0.0), point(1, 0, 0.0)], &config(0.1)).is_empty());
        // Identical vectors: no error, every point accounted for at most once.
        let same: Vec<Point> = (0..10).map(|i| point(i, 2, 0.0)).collect();
        let clusters = cluster_document("d", same, &config(0.0));
        let members: usize = clusters.iter().map(|c| c.members.len()).sum();
        assert!(members <= 10);
    }

    #[test]
    fn long_documents_are_clustered_in_windows() {
        let points: Vec<Point> = (0..60).map(|i| point(i, (i / 10) as usize % 8, 0.02 * (i % 10) as f32)).collect();
        let mut cfg = config(0.01);
        cfg.max_window = 20;
        let clusters = cluster_document("d", points, &cfg);
        let mut seen = std::collections::HashSet::new();
        for c in &clusters {
            for m in &c.members {
                assert!(seen.insert(m.0.clone()), "{} in two clusters", m.0);
            }
        }
        assert!(clusters.len() >= 4, "{}", clusters.len());
    }
}

#[cfg(test)]
mod timing {
    use super::*;

    /// Seconds of `cluster_document` on `n` random 384-dim points, per window size
    /// (`cargo test -p flexstruct-pipeline cluster_timing -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn cluster_timing() {
        let mut rng = fastrand::Rng::with_seed(7);
        for (n, repeated) in [(1000usize, false), (3000, false), (6000, false), (3000, true), (6000, true)] {
            let points: Vec<Point> = (0..n)
                .map(|i| {
                    // A text repeated over and over: 20 distinct vectors.
                    let topic = (i / 20) % 50;
                    let noise = if repeated { 0.0 } else { 0.3 };
                    let mut v: Vec<f32> =
                        (0..384).map(|d| if d % 50 == topic { 1.0 } else { rng.f32() * noise }).collect();
                    crate::models::normalise(&mut v);
                    Point { id: format!("h{i}"), item_idx: i as i32, ref_text: String::new(), vector: v }
                })
                .collect();
            for window in [1000usize, 3000] {
                let config = ClusterConfig { max_window: window, ..ClusterConfig::default() };
                let t = std::time::Instant::now();
                let c = cluster_document("d", points.clone(), &config);
                println!(
                    "n {n} repeated {repeated} window {window}: {:.2} s, {} clusters",
                    t.elapsed().as_secs_f64(),
                    c.len()
                );
            }
        }
    }
}
