//! Exact cosine top-k over an embedding column held in memory.
//!
//! The vectors of a kb table are one contiguous Arrow `f32` buffer (row-major, unit length), so
//! cosine is a dot product. Rows are scanned in blocks in parallel (rayon); each block keeps its
//! own best `k`, and the blocks' winners are merged. Ties are broken by row number, so the result
//! is exactly the one a plain sort of every score gives.

use arrow::buffer::ScalarBuffer;
use rayon::prelude::*;

/// Rows per parallel block.
const BLOCK_ROWS: usize = 4096;

/// One row of a scan and its cosine with the query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// Row in the table.
    pub row: usize,
    /// Cosine similarity.
    pub score: f32,
}

/// The vectors of one kb table: `rows × dim` floats, row-major, each of unit length.
#[derive(Debug, Clone, Default)]
pub struct Vectors {
    dim: usize,
    values: ScalarBuffer<f32>,
}

/// Dot product (the same summation order everywhere, so equal inputs give equal scores).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Better-first order: higher score, then lower row.
fn better(a: &Hit, b: &Hit) -> std::cmp::Ordering {
    b.score.total_cmp(&a.score).then(a.row.cmp(&b.row))
}

/// Keeps the best `k` of `hits` in better-first order.
fn keep_best(mut hits: Vec<Hit>, k: usize) -> Vec<Hit> {
    if hits.len() > k {
        hits.select_nth_unstable_by(k, better);
        hits.truncate(k);
    }
    hits.sort_unstable_by(better);
    hits
}

impl Vectors {
    /// Vectors from a flat buffer of `dim`-wide rows.
    pub fn new(dim: usize, values: ScalarBuffer<f32>) -> Vectors {
        Vectors { dim, values }
    }

    /// Vector width.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.values.len().checked_div(self.dim).unwrap_or(0)
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The vector of one row.
    pub fn row(&self, row: usize) -> &[f32] {
        &self.values[row * self.dim..(row + 1) * self.dim]
    }

    /// The `k` rows with the highest cosine strictly above `threshold`, best first. Fewer come
    /// back when fewer pass (all of those that pass).
    pub fn top_k(&self, query: &[f32], threshold: f32, k: usize) -> Vec<Hit> {
        if k == 0 || self.is_empty() {
            return Vec::new();
        }
        let dim = self.dim;
        let winners: Vec<Hit> = self
            .values
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

    /// The cosine of the query with the given rows.
    pub fn scores(&self, query: &[f32], rows: impl Iterator<Item = usize>) -> Vec<Hit> {
        rows.map(|row| Hit { row, score: dot(self.row(row), query) }).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive(vectors: &Vectors, query: &[f32], threshold: f32, k: usize) -> Vec<Hit> {
        let mut all: Vec<Hit> = (0..vectors.len())
            .map(|row| Hit { row, score: dot(vectors.row(row), query) })
            .filter(|h| h.score > threshold)
            .collect();
        all.sort_by(|a, b| b.score.partial_cmp(&a.score).unwrap().then(a.row.cmp(&b.row)));
        all.truncate(k);
        all
    }

    fn vectors(rows: &[Vec<f32>]) -> Vectors {
        let dim = rows.first().map_or(0, Vec::len);
        Vectors::new(dim, rows.concat().into())
    }

    #[test]
    fn threshold_and_top_n_edge_cases() {
        let v = vectors(&[vec![1.0, 0.0], vec![0.0, 1.0], vec![0.6, 0.8], vec![0.8, 0.6], vec![1.0, 0.0]]);
        let q = [1.0, 0.0];
        let rows = |hits: Vec<Hit>| hits.iter().map(|h| h.row).collect::<Vec<_>>();
        // Ties (rows 0 and 4) come back in row order.
        assert_eq!(rows(v.top_k(&q, -1.0, 3)), vec![0, 4, 3]);
        // Fewer than k pass the threshold: all of those that pass.
        assert_eq!(rows(v.top_k(&q, 0.7, 10)), vec![0, 4, 3]);
        // The threshold is strict.
        assert_eq!(rows(v.top_k(&q, 0.8, 10)), vec![0, 4]);
        assert!(v.top_k(&q, 1.0, 10).is_empty());
        assert!(v.top_k(&q, -1.0, 0).is_empty());
        assert!(Vectors::default().top_k(&q, -1.0, 5).is_empty());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The parallel blocked scan returns exactly the ids of a plain sort, across block
        /// boundaries and with duplicated rows.
        #[test]
        fn same_ids_as_a_naive_scan(
            seed in any::<u64>(), n in 0usize..(3 * BLOCK_ROWS), k in 0usize..40, threshold in -1.0f32..0.5
        ) {
            let mut rng = fastrand::Rng::with_seed(seed);
            let dim = 8;
            let mut rows: Vec<Vec<f32>> = (0..n).map(|_| (0..dim).map(|_| rng.f32() - 0.5).collect()).collect();
            if n > 10 {
                rows[n - 1] = rows[3].clone();
            }
            let data = Vectors::new(dim, rows.concat().into());
            let query: Vec<f32> = (0..dim).map(|_| rng.f32() - 0.5).collect();
            let fast = data.top_k(&query, threshold, k);
            prop_assert_eq!(fast, naive(&data, &query, threshold, k));
        }
    }
}
