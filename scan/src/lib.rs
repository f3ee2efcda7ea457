//! Exact cosine top-k over vectors stored row-major in one slice of `f32`, or of `f16` (half
//! the memory: each block is widened to `f32` once, with the processor's conversion
//! instructions where it has them, then scanned like an `f32` one).
//!
//! Vectors are unit length, so cosine is a dot product. Rows are scanned in blocks in parallel
//! (rayon); each block keeps its own best `k` above the threshold, and the blocks' winners are
//! merged. Ties go to the lower row, so the result is exactly what a plain sort of every score
//! gives. A batch of questions is scanned block by block ([`top_k_batch`]): each block, small
//! enough to stay in the core's cache, is read from memory once for all the questions instead of
//! once per question; dot products use the processor's widest vector instructions. This crate is
//! compiled optimised even in the dev profile (the workspace's
//! `Cargo.toml`): the query stage's latency is this loop.
//!
//! ```
//! let rows = [1.0, 0.0, 0.6, 0.8, 0.0, 1.0];
//! let hits = flexstruct_scan::top_k(&rows, 2, &[1.0, 0.0], 0.5, 5);
//! assert_eq!(hits.iter().map(|h| h.row).collect::<Vec<_>>(), [0, 1]);
//! ```
#![warn(missing_docs)]

mod gelu;
mod ivf;
pub mod le;
mod softmax;
pub use gelu::gelu;
pub use ivf::{Ivf, default_lists};
pub use softmax::softmax_rows;

pub use half::f16;
use half::slice::HalfFloatSliceExt;
use pulp::{Arch, Simd, WithSimd};
use rayon::prelude::*;

/// How vectors are stored: `f32` as they are, `f16` widened to `f32` for scoring.
trait Element: Copy + Send + Sync {
    /// `values` as `f32`: themselves, or widened into `buffer`.
    fn as_f32<'a>(values: &'a [Self], buffer: &'a mut Vec<f32>) -> &'a [f32];
}

impl Element for f32 {
    #[inline(always)]
    fn as_f32<'a>(values: &'a [f32], _: &'a mut Vec<f32>) -> &'a [f32] {
        values
    }
}

impl Element for f16 {
    #[inline(always)]
    fn as_f32<'a>(values: &'a [f16], buffer: &'a mut Vec<f32>) -> &'a [f32] {
        buffer.resize(values.len(), 0.0);
        values.convert_to_f32_slice(buffer);
        buffer
    }
}

/// Rows per parallel block: 512 rows of 384 floats are 768 KiB, inside a core's L2 cache, so a
/// batch of questions scores a block while it is still cached.
pub const BLOCK_ROWS: usize = 512;

/// One row of a scan and its cosine with the query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// Row number.
    pub row: usize,
    /// Cosine similarity.
    pub score: f32,
}

/// Dot product of two equally long vectors, with the widest vector instructions the processor
/// has (AVX2 + FMA where present; chosen once at run time by `pulp`, without unsafe code): four
/// independent fused multiply-add chains, then their sum, then the scalar tail. The order is the
/// same everywhere on one machine, so equal inputs give equal scores.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    Arch::new().dispatch(Dot { a, b })
}

struct Dot<'a> {
    a: &'a [f32],
    b: &'a [f32],
}

impl WithSimd for Dot<'_> {
    type Output = f32;

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> f32 {
        dot_with(simd, self.a, self.b)
    }
}

#[inline(always)]
fn dot_with<S: Simd>(simd: S, a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let (a_head, a_tail) = S::as_simd_f32s(a);
    let (b_head, b_tail) = S::as_simd_f32s(b);
    let zero = simd.splat_f32s(0.0);
    let mut acc = [zero; 4];
    let (a_fours, b_fours) = (a_head.chunks_exact(4), b_head.chunks_exact(4));
    let (a_rest, b_rest) = (a_fours.remainder(), b_fours.remainder());
    for (x, y) in a_fours.zip(b_fours) {
        for i in 0..4 {
            acc[i] = simd.mul_add_e_f32s(x[i], y[i], acc[i]);
        }
    }
    for (x, y) in a_rest.iter().zip(b_rest) {
        acc[0] = simd.mul_add_e_f32s(*x, *y, acc[0]);
    }
    let sum = simd.add_f32s(simd.add_f32s(acc[0], acc[1]), simd.add_f32s(acc[2], acc[3]));
    let mut tail = 0.0;
    for (x, y) in a_tail.iter().zip(b_tail) {
        tail += x * y;
    }
    simd.reduce_sum_f32s(sum) + tail
}

/// One block of rows scored against every query, inside one dispatch to the vector
/// instructions (so the dot products inline into the loop).
struct BlockScan<'a> {
    values: &'a [f32],
    dim: usize,
    first_row: usize,
    queries: &'a [&'a [f32]],
    threshold: f32,
    k: usize,
}

impl WithSimd for BlockScan<'_> {
    type Output = Vec<Vec<Hit>>;

    // Plain loops, no closures: a closure is a function of its own, compiled without the
    // dispatched instruction set, and the vector operations would not inline into it.
    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> Vec<Vec<Hit>> {
        let mut out = Vec::with_capacity(self.queries.len());
        for query in self.queries {
            let mut hits = Vec::new();
            for (i, v) in self.values.chunks_exact(self.dim).enumerate() {
                let score = dot_with(simd, v, query);
                if score > self.threshold {
                    hits.push(Hit { row: self.first_row + i, score });
                }
            }
            out.push(keep_best(hits, self.k));
        }
        out
    }
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
    top_k_batch(values, dim, &[query], threshold, k).pop().unwrap_or_default()
}

/// [`top_k`] for each of `queries`, reading each block of rows once for all of them.
pub fn top_k_batch(values: &[f32], dim: usize, queries: &[&[f32]], threshold: f32, k: usize) -> Vec<Vec<Hit>> {
    top_k_blocks(values, dim, queries, threshold, k)
}

/// [`top_k_batch`] over `f16` vectors: each block is widened once for all the questions.
pub fn top_k_batch_f16(values: &[f16], dim: usize, queries: &[&[f32]], threshold: f32, k: usize) -> Vec<Vec<Hit>> {
    top_k_blocks(values, dim, queries, threshold, k)
}

// Generic, but instantiated only here (by the two functions above), so it is compiled with this
// crate's optimisation whatever the caller's.
fn top_k_blocks<T: Element>(values: &[T], dim: usize, queries: &[&[f32]], threshold: f32, k: usize) -> Vec<Vec<Hit>> {
    if k == 0 || dim == 0 || values.is_empty() {
        return vec![Vec::new(); queries.len()];
    }
    let arch = Arch::new();
    // Each worker folds its blocks' winners into one list per question, cut back to the best k
    // whenever it reaches 2k, so memory stays at a few k per question and worker however many
    // blocks there are (collecting every block's winners first took gigabytes at a million
    // rows and hundreds of questions). The order is total (score, then row), so the result does
    // not depend on how blocks were shared out.
    // Each worker also keeps one buffer to widen its `f16` blocks into.
    let cut = k.saturating_mul(2);
    let empty = || vec![Vec::new(); queries.len()];
    values
        .par_chunks(BLOCK_ROWS * dim)
        .enumerate()
        .fold(
            || (empty(), Vec::new()),
            |(mut best, mut buffer): (Vec<Vec<Hit>>, Vec<f32>), (block, values)| {
                let values = T::as_f32(values, &mut buffer);
                let first_row = block * BLOCK_ROWS;
                let found = arch.dispatch(BlockScan { values, dim, first_row, queries, threshold, k });
                for (best, found) in best.iter_mut().zip(found) {
                    best.extend(found);
                    if best.len() >= cut {
                        *best = keep_best(std::mem::take(best), k);
                    }
                }
                (best, buffer)
            },
        )
        .map(|(best, _)| best)
        .reduce(empty, |mut left, right| {
            for (left, right) in left.iter_mut().zip(right) {
                left.extend(right);
            }
            left
        })
        .into_iter()
        .map(|hits| keep_best(hits, k))
        .collect()
}

/// The cosine of `query` with the given rows, in their order. Not generic on purpose: generic
/// code is compiled in the calling crate, which may be unoptimised (a generic version of this
/// took about 0.6 µs a row from the dev-profile query code, against 0.03 µs).
pub fn scores(values: &[f32], dim: usize, query: &[f32], rows: &[u32]) -> Vec<Hit> {
    Arch::new().dispatch(RowScores { values, dim, query, rows })
}

/// [`scores`] over `f16` vectors (each row widened on its own).
pub fn scores_f16(values: &[f16], dim: usize, query: &[f32], rows: &[u32]) -> Vec<Hit> {
    Arch::new().dispatch(RowScores { values, dim, query, rows })
}

/// The rows of [`scores`], inside one dispatch (bridge retrieval scores thousands of rows).
struct RowScores<'a, T> {
    values: &'a [T],
    dim: usize,
    query: &'a [f32],
    rows: &'a [u32],
}

impl<T: Element> WithSimd for RowScores<'_, T> {
    type Output = Vec<Hit>;

    // A plain loop, like the block scan's.
    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> Vec<Hit> {
        let mut out = Vec::with_capacity(self.rows.len());
        let mut buffer = Vec::new();
        for &row in self.rows {
            let row = row as usize;
            let values = T::as_f32(&self.values[row * self.dim..(row + 1) * self.dim], &mut buffer);
            out.push(Hit { row, score: dot_with(simd, values, self.query) });
        }
        out
    }
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
        assert_eq!(rows(scores(&v, 2, &q, &[3, 1])), vec![3, 1]);
        assert_eq!(top_k_batch(&v, 2, &[], -1.0, 3), Vec::<Vec<Hit>>::new());
        assert_eq!(top_k_batch(&[], 2, &[&q, &q], -1.0, 3), vec![Vec::new(), Vec::new()]);
    }

    #[test]
    fn dot_of_every_length() {
        for n in [0, 1, 15, 16, 17, 384, 385] {
            let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let b: Vec<f32> = (0..n).map(|i| 1.0 - 0.5 * i as f32).collect();
            let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - plain).abs() <= 1e-3 * plain.abs().max(1.0), "{n}: {} vs {plain}", dot(&a, &b));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The parallel blocked scan returns exactly the rows of a plain sort, across block
        /// boundaries (each worker cutting its winners as it goes) and with duplicated rows.
        #[test]
        fn same_rows_as_a_naive_scan(
            seed in any::<u64>(), n in 0usize..(6 * BLOCK_ROWS), k in 0usize..40, threshold in -1.0f32..0.5
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
            let other: Vec<f32> = (0..dim).map(|_| rng.f32() - 0.5).collect();
            prop_assert_eq!(
                top_k_batch(&values, dim, &[&query, &other], threshold, k),
                vec![naive(&values, dim, &query, threshold, k), naive(&values, dim, &other, threshold, k)]
            );
            // Half-precision storage scores exactly as its values widened to f32 do.
            let halves: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
            let widened: Vec<f32> = halves.iter().map(|h| h.to_f32()).collect();
            prop_assert_eq!(
                top_k_batch_f16(&halves, dim, &[&query, &other], threshold, k),
                vec![naive(&widened, dim, &query, threshold, k), naive(&widened, dim, &other, threshold, k)]
            );
            let rows: Vec<u32> = (0..n as u32).rev().step_by(7).collect();
            prop_assert_eq!(scores_f16(&halves, dim, &query, &rows), scores(&widened, dim, &query, &rows));
        }
    }
}
