//! Exact cosine top-k over vectors stored row-major in one `f32` slice.
//!
//! Vectors are unit length, so cosine is a dot product. Rows are scanned in blocks in parallel
//! (rayon); each block keeps its own best `k` above the threshold, and the blocks' winners are
//! merged. Ties go to the lower row, so the result is exactly what a plain sort of every score
//! gives. This crate is compiled optimised even in the dev profile (the workspace's
//! `Cargo.toml`): the query stage's latency is this loop.
//!
//! ```
//! let rows = [1.0, 0.0, 0.6, 0.8, 0.0, 1.0];
//! let hits = flexstruct_scan::top_k(&rows, 2, &[1.0, 0.0], 0.5, 5);
//! assert_eq!(hits.iter().map(|h| h.row).collect::<Vec<_>>(), [0, 1]);
//! ```
#![warn(missing_docs)]

use rayon::prelude::*;

/// Rows per parallel block.
pub const BLOCK_ROWS: usize = 4096;

/// One row of a scan and its cosine with the query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// Row number.
    pub row: usize,
    /// Cosine similarity.
    pub score: f32,
}

/// Dot product (the same summation order everywhere, so equal inputs give equal scores).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Better-first order: higher score, then lower row.
pub fn better(a: &Hit, b: &Hit) -> std::cmp::Ordering {
    b.score.total_cmp(&a.score).then(a.row.cmp(&b.row))
}

/// Keeps the best `k` of `hits`, in better-first order.
pub fn keep_best(mut hits: Vec<Hit>, k: usize) -> Vec<Hit> {
    if hits.len() > k {
        hits.select_nth_unstable_by(k, better);
        hits.truncate(k);
    }
    hits.sort_unstable_by(better);
    hits
}

/// The `k` rows of `values` (`dim` floats each) with the highest cosine with `query` strictly
/// above `threshold`, best first; fewer when fewer pass (all of those that pass).
pub fn top_k(values: &[f32], dim: usize, query: &[f32], threshold: f32, k: usize) -> Vec<Hit> {
    if k == 0 || dim == 0 || values.is_empty() {
        return Vec::new();
    }
    let winners: Vec<Hit> = values
        .par_chunks(BLOCK_ROWS * dim)
        .enumerate()
        .flat_map_iter(|(block, values)| {
            let hits = values
                .chunks_exact(dim)
                .enumerate()
                .map(|(i, v)| Hit { row: block * BLOCK_ROWS + i, score: dot(v, query) })
                .filter(|h| h.score > threshold)
                .collect();
            keep_best(hits, k)
        })
        .collect();
    keep_best(winners, k)
}

/// The cosine of `query` with the given rows.
pub fn scores(values: &[f32], dim: usize, query: &[f32], rows: impl Iterator<Item = usize>) -> Vec<Hit> {
    rows.map(|row| Hit { row, score: dot(&values[row * dim..(row + 1) * dim], query) }).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn naive(values: &[f32], dim: usize, query: &[f32], threshold: f32, k: usize) -> Vec<Hit> {
        let mut all: Vec<Hit> = values
            .chunks_exact(dim)
            .enumerate()
            .map(|(row, v)| Hit { row, score: dot(v, query) })
            .filter(|h| h.score > threshold)
            .collect();
        all.sort_by(|a, b| b.score.partial_cmp(&a.score).unwrap().then(a.row.cmp(&b.row)));
        all.truncate(k);
        all
    }

    #[test]
    fn threshold_and_top_n_edge_cases() {
        let v = [1.0, 0.0, 0.0, 1.0, 0.6, 0.8, 0.8, 0.6, 1.0, 0.0];
        let q = [1.0, 0.0];
        let rows = |hits: Vec<Hit>| hits.iter().map(|h| h.row).collect::<Vec<_>>();
        // Ties (rows 0 and 4) come back in row order.
        assert_eq!(rows(top_k(&v, 2, &q, -1.0, 3)), vec![0, 4, 3]);
        // Fewer than k pass the threshold: all of those that pass.
        assert_eq!(rows(top_k(&v, 2, &q, 0.7, 10)), vec![0, 4, 3]);
        // The threshold is strict.
        assert_eq!(rows(top_k(&v, 2, &q, 0.8, 10)), vec![0, 4]);
        assert!(top_k(&v, 2, &q, 1.0, 10).is_empty());
        assert!(top_k(&v, 2, &q, -1.0, 0).is_empty());
        assert!(top_k(&[], 2, &q, -1.0, 5).is_empty());
        assert_eq!(rows(scores(&v, 2, &q, [3, 1].into_iter())), vec![3, 1]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The parallel blocked scan returns exactly the rows of a plain sort, across block
        /// boundaries and with duplicated rows.
        #[test]
        fn same_rows_as_a_naive_scan(
            seed in any::<u64>(), n in 0usize..(3 * BLOCK_ROWS), k in 0usize..40, threshold in -1.0f32..0.5
        ) {
            let mut rng = fastrand::Rng::with_seed(seed);
            let dim = 8;
            let mut rows: Vec<Vec<f32>> = (0..n).map(|_| (0..dim).map(|_| rng.f32() - 0.5).collect()).collect();
            if n > 10 {
                rows[n - 1] = rows[3].clone();
            }
            let values = rows.concat();
            let query: Vec<f32> = (0..dim).map(|_| rng.f32() - 0.5).collect();
            prop_assert_eq!(top_k(&values, dim, &query, threshold, k), naive(&values, dim, &query, threshold, k));
        }
    }
}
