//! An approximate index for tables too large to scan per question: an inverted file (IVF). The
//! rows are partitioned into `lists` by their nearest centroid (spherical k-means on a sample of
//! the rows); a question is scored against the centroids, and only the rows of its `probes`
//! nearest lists are scored, exactly, against the vectors where they already are. So the index
//! holds no copy of a vector — the centroids and one row number per row (4 bytes, against 768
//! or 1,536 for the vector) — it is built with the scan's own dot product in about half a minute
//! per million rows on two cores, and the scores it returns are the exact cosines: only which
//! rows are considered is approximate. `probes` trades recall for time; with
//! `probes == lists` the search is exact.
//!
//! ```
//! use flexstruct_scan::Ivf;
//! let rows = [1.0, 0.0, 0.8, 0.6, 0.0, 1.0, -0.6, 0.8];
//! let ivf = Ivf::build(&rows, 2, 2);
//! let hits = ivf.search_batch(&rows, &[&[1.0, 0.0]], 2, -1.0, 2);
//! assert_eq!(hits[0].iter().map(|h| h.row).collect::<Vec<_>>(), [0, 1]);
//! ```

use pulp::{Arch, Simd, WithSimd};
use rayon::prelude::*;

use crate::{Element, Hit, dot_with, f16, keep_best, top_k_blocks};

/// Training rows per list: the k-means runs on at most this many rows a list, taken evenly.
const TRAIN_PER_LIST: usize = 32;
/// Rounds of k-means.
const ROUNDS: usize = 6;
/// Rows assigned to their list at a time (bounds the row slices held at once).
const ASSIGN_BATCH: usize = 16_384;

/// An inverted-file index over `rows` vectors of `dim` floats (see the module's documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct Ivf {
    dim: usize,
    rows: usize,
    /// lists × dim floats, each a unit vector.
    centroids: Vec<f32>,
    /// Where each list's rows start in `members`; lists + 1 entries.
    offsets: Vec<u32>,
    /// Row numbers, list after list, ascending within a list.
    members: Vec<u32>,
}

/// The list count for `rows` rows when none is configured: √rows, at least 1.
pub fn default_lists(rows: usize) -> usize {
    ((rows as f64).sqrt().round() as usize).clamp(1, rows.max(1))
}

fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Rows whose nearest centroid is found together: each centroid is read once for all of them
/// while they stay in the core's cache (64 rows of 384 floats are 96 KiB).
const NEAREST_ROWS: usize = 64;

/// The nearest of `centroids` to each of `rows` (ties to the lower list), in parallel over
/// blocks of rows.
fn nearest(centroids: &[f32], dim: usize, rows: &[&[f32]]) -> Vec<u32> {
    rows.par_chunks(NEAREST_ROWS).flat_map_iter(|rows| Arch::new().dispatch(Nearest { centroids, dim, rows })).collect()
}

/// One block of rows against every centroid, inside one dispatch to the vector instructions.
struct Nearest<'a> {
    centroids: &'a [f32],
    dim: usize,
    rows: &'a [&'a [f32]],
}

impl WithSimd for Nearest<'_> {
    type Output = Vec<u32>;

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> Vec<u32> {
        let mut best = vec![(f32::NEG_INFINITY, 0u32); self.rows.len()];
        for (c, centroid) in self.centroids.chunks_exact(self.dim).enumerate() {
            for (row, best) in self.rows.iter().zip(best.iter_mut()) {
                let score = dot_with(simd, row, centroid);
                if score > best.0 {
                    *best = (score, c as u32);
                }
            }
        }
        best.into_iter().map(|(_, c)| c).collect()
    }
}

impl Ivf {
    /// Bytes it keeps on the heap: its centroids, offsets and members (capacities).
    pub fn heap_size(&self) -> usize {
        (self.centroids.capacity() + self.offsets.capacity() + self.members.capacity()) * 4
    }

    /// Partitions the `dim`-wide unit rows of `values` into (at most) `lists` lists. The result
    /// depends on the values alone (deterministic: no randomness, ties to the lower row).
    pub fn build(values: &[f32], dim: usize, lists: usize) -> Ivf {
        let rows = values.len().checked_div(dim).unwrap_or(0);
        let lists = lists.clamp(1, rows.max(1));
        let row = |r: usize| &values[r * dim..(r + 1) * dim];
        if rows == 0 {
            return Ivf { dim, rows, centroids: Vec::new(), offsets: vec![0, 0], members: Vec::new() };
        }
        // An even sample to train on, and the first centroids evenly among it.
        let train = (lists * TRAIN_PER_LIST).min(rows);
        let sample: Vec<&[f32]> = (0..train).map(|i| row(i * rows / train)).collect();
        let mut centroids: Vec<f32> = (0..lists).flat_map(|c| sample[c * train / lists].iter().copied()).collect();
        for _ in 0..ROUNDS {
            let assigned = nearest(&centroids, dim, &sample);
            let mut sums = vec![0f32; lists * dim];
            let mut counts = vec![0usize; lists];
            for (v, &c) in sample.iter().zip(&assigned) {
                let c = c as usize;
                counts[c] += 1;
                sums[c * dim..(c + 1) * dim].iter_mut().zip(v.iter()).for_each(|(s, x)| *s += x);
            }
            // A list no sample row chose keeps its centroid.
            for (c, sum) in sums.chunks_exact_mut(dim).enumerate().filter(|(c, _)| counts[*c] > 0) {
                normalize(sum);
                centroids[c * dim..(c + 1) * dim].copy_from_slice(sum);
            }
        }
        let mut assigned = Vec::with_capacity(rows);
        for start in (0..rows).step_by(ASSIGN_BATCH) {
            let batch: Vec<&[f32]> = (start..(start + ASSIGN_BATCH).min(rows)).map(row).collect();
            assigned.extend(nearest(&centroids, dim, &batch));
        }
        let mut offsets = vec![0u32; lists + 1];
        for &c in &assigned {
            offsets[c as usize + 1] += 1;
        }
        for c in 0..lists {
            offsets[c + 1] += offsets[c];
        }
        let mut next = offsets.clone();
        let mut members = vec![0u32; rows];
        for (r, &c) in assigned.iter().enumerate() {
            members[next[c as usize] as usize] = r as u32;
            next[c as usize] += 1;
        }
        Ivf { dim, rows, centroids, offsets, members }
    }

    /// An index from its stored parts, checked: every row of a table of `rows` rows in exactly
    /// one list (an error says what is wrong).
    pub fn from_parts(
        dim: usize,
        rows: usize,
        centroids: Vec<f32>,
        offsets: Vec<u32>,
        members: Vec<u32>,
    ) -> Result<Ivf, String> {
        let lists = offsets.len().saturating_sub(1);
        if dim == 0 || centroids.len() != lists * dim {
            return Err(format!("{} centroid floats for {lists} lists of width {dim}", centroids.len()));
        }
        if offsets.first() != Some(&0)
            || offsets.windows(2).any(|w| w[0] > w[1])
            || offsets.last().map(|&o| o as usize) != Some(members.len())
        {
            return Err(format!("list offsets do not run from 0 to {} in order", members.len()));
        }
        let mut seen = vec![false; rows];
        for &m in &members {
            match seen.get_mut(m as usize) {
                Some(s) if !*s => *s = true,
                Some(_) => return Err(format!("row {m} is in two lists")),
                None => return Err(format!("row {m} is beyond the table's {rows} rows")),
            }
        }
        if members.len() != rows {
            return Err(format!("{} rows listed of {rows}", members.len()));
        }
        Ok(Ivf { dim, rows, centroids, offsets, members })
    }

    /// Vector width.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Rows indexed.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of lists.
    pub fn lists(&self) -> usize {
        self.offsets.len() - 1
    }

    /// The centroids, list after list.
    pub fn centroids(&self) -> &[f32] {
        &self.centroids
    }

    /// Where each list starts in [`Ivf::members`] (one more entry than lists).
    pub fn offsets(&self) -> &[u32] {
        &self.offsets
    }

    /// The rows, list after list.
    pub fn members(&self) -> &[u32] {
        &self.members
    }

    /// For each query, the `k` rows with the highest cosine strictly above `threshold` among the
    /// rows of its `probes` nearest lists, best first, scored exactly on `values` (the vectors
    /// the index was built over, `f32`).
    pub fn search_batch(
        &self,
        values: &[f32],
        queries: &[&[f32]],
        probes: usize,
        threshold: f32,
        k: usize,
    ) -> Vec<Vec<Hit>> {
        self.search(values, queries, probes, threshold, k)
    }

    /// [`Ivf::search_batch`] over the same vectors held at half precision.
    pub fn search_batch_f16(
        &self,
        values: &[f16],
        queries: &[&[f32]],
        probes: usize,
        threshold: f32,
        k: usize,
    ) -> Vec<Vec<Hit>> {
        self.search(values, queries, probes, threshold, k)
    }

    // Each list probed by any query is read once for all the queries that probe it (a batch of
    // hundreds of questions probes most lists several times over), in parallel over lists.
    fn search<T: Element>(
        &self,
        values: &[T],
        queries: &[&[f32]],
        probes: usize,
        threshold: f32,
        k: usize,
    ) -> Vec<Vec<Hit>> {
        if k == 0 || self.rows == 0 || values.len() < self.rows * self.dim {
            return vec![Vec::new(); queries.len()];
        }
        let probes = probes.clamp(1, self.lists());
        let near = top_k_blocks(&self.centroids, self.dim, queries, f32::NEG_INFINITY, probes);
        let mut probing: Vec<Vec<usize>> = vec![Vec::new(); self.lists()];
        for (q, lists) in near.iter().enumerate() {
            for list in lists {
                probing[list.row].push(q);
            }
        }
        // As in the exact scan, each worker folds the lists' winners into one list per query,
        // cut back to the best k whenever it reaches 2k: memory stays at a few k per query and
        // worker (thousands of entity probes × 96 lists × k hits otherwise).
        let empty = || vec![Vec::new(); queries.len()];
        let fold_in = |best: &mut Vec<Hit>, hits: Vec<Hit>| {
            best.extend(hits);
            if best.len() >= 2 * k {
                *best = keep_best(std::mem::take(best), k);
            }
        };
        probing
            .par_iter()
            .enumerate()
            .filter(|(_, asking)| !asking.is_empty())
            .fold(empty, |mut best, (list, asking)| {
                let rows = &self.members[self.offsets[list] as usize..self.offsets[list + 1] as usize];
                let asked: Vec<&[f32]> = asking.iter().map(|&q| queries[q]).collect();
                let scan = ListScan { values, dim: self.dim, rows, queries: &asked, threshold, k };
                for (&q, hits) in asking.iter().zip(Arch::new().dispatch(scan)) {
                    fold_in(&mut best[q], hits);
                }
                best
            })
            .reduce(empty, |mut left, right| {
                for (left, right) in left.iter_mut().zip(right) {
                    fold_in(left, right);
                }
                left
            })
            .into_iter()
            .map(|hits| keep_best(hits, k))
            .collect()
    }
}

/// The rows of one list scored against the queries that probe it, inside one dispatch; each
/// query's best `k` above `threshold`.
struct ListScan<'a, T> {
    values: &'a [T],
    dim: usize,
    rows: &'a [u32],
    queries: &'a [&'a [f32]],
    threshold: f32,
    k: usize,
}

impl<T: Element> WithSimd for ListScan<'_, T> {
    type Output = Vec<Vec<Hit>>;

    // Plain loops, as in the exact scan.
    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> Vec<Vec<Hit>> {
        let mut out = vec![Vec::new(); self.queries.len()];
        let mut buffer = Vec::new();
        let cut = self.k.saturating_mul(2);
        for &row in self.rows {
            let row = row as usize;
            let vector = T::as_f32(&self.values[row * self.dim..(row + 1) * self.dim], &mut buffer);
            for (query, hits) in self.queries.iter().zip(out.iter_mut()) {
                let score = dot_with(simd, vector, query);
                if score > self.threshold {
                    hits.push(Hit { row, score });
                    if hits.len() >= cut {
                        *hits = keep_best(std::mem::take(hits), self.k);
                    }
                }
            }
        }
        out.into_iter().map(|hits| keep_best(hits, self.k)).collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::top_k_batch;

    /// Unit rows in a few tight groups, as embeddings of related texts are.
    fn grouped(rows: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut rng = fastrand::Rng::with_seed(seed);
        let centres: Vec<Vec<f32>> = (0..12).map(|_| (0..dim).map(|_| rng.f32() - 0.5).collect()).collect();
        let mut out = Vec::with_capacity(rows * dim);
        for _ in 0..rows {
            let centre = &centres[rng.usize(..centres.len())];
            let mut v: Vec<f32> = centre.iter().map(|c| c + 0.3 * (rng.f32() - 0.5)).collect();
            normalize(&mut v);
            out.extend(v);
        }
        out
    }

    #[test]
    fn every_row_in_one_list_and_all_probes_is_exact() {
        let (dim, rows) = (16, 3_000);
        let values = grouped(rows, dim, 7);
        let ivf = Ivf::build(&values, dim, default_lists(rows));
        assert_eq!((ivf.rows(), ivf.lists(), ivf.dim()), (rows, 55, dim));
        let again = Ivf::from_parts(dim, rows, ivf.centroids.clone(), ivf.offsets.clone(), ivf.members.clone());
        assert_eq!(again.unwrap(), ivf, "every row listed once");
        assert_eq!(Ivf::build(&values, dim, default_lists(rows)), ivf, "deterministic");
        let queries: Vec<&[f32]> = (0..20).map(|i| &values[i * 131 * dim..(i * 131 + 1) * dim]).collect();
        let exact = top_k_batch(&values, dim, &queries, 0.1, 10);
        assert_eq!(ivf.search_batch(&values, &queries, ivf.lists(), 0.1, 10), exact);
        // A few probes find almost all of the exact top 10, with their exact scores.
        let approximate = ivf.search_batch(&values, &queries, 8, 0.1, 10);
        let mut found = 0;
        for (a, e) in approximate.iter().zip(&exact) {
            for hit in a {
                assert!(e.iter().any(|x| x.row == hit.row && x.score == hit.score) || hit.score <= e[9].score);
            }
            found += a.iter().filter(|h| e.iter().any(|x| x.row == h.row)).count();
        }
        assert!(found >= 190, "recall@10 {found}/200");
        // At half precision, as the exact half-precision scan scores.
        let halves: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
        assert_eq!(
            ivf.search_batch_f16(&halves, &queries, ivf.lists(), 0.1, 10),
            crate::top_k_batch_f16(&halves, dim, &queries, 0.1, 10)
        );
    }

    #[test]
    fn small_and_broken_indexes() {
        let empty = Ivf::build(&[], 4, 10);
        assert_eq!(empty.search_batch(&[], &[&[1.0, 0.0, 0.0, 0.0]], 3, -1.0, 5), vec![Vec::<Hit>::new()]);
        let one = Ivf::build(&[0.0, 1.0], 2, 10);
        assert_eq!(one.lists(), 1);
        assert_eq!(one.search_batch(&[0.0, 1.0], &[&[0.0, 1.0]], 5, 0.5, 3)[0].len(), 1);
        assert!(one.search_batch(&[0.0, 1.0], &[&[1.0, 0.0]], 5, 0.5, 3)[0].is_empty(), "threshold");
        assert!(Ivf::from_parts(2, 2, vec![1.0, 0.0], vec![0, 2], vec![0, 0]).unwrap_err().contains("two lists"));
        assert!(Ivf::from_parts(2, 2, vec![1.0, 0.0], vec![0, 2], vec![0, 5]).unwrap_err().contains("beyond"));
        assert!(Ivf::from_parts(2, 3, vec![1.0, 0.0], vec![0, 2], vec![0, 1]).unwrap_err().contains("2 rows listed"));
        assert!(Ivf::from_parts(2, 2, vec![1.0], vec![0, 2], vec![0, 1]).unwrap_err().contains("centroid"));
        assert!(Ivf::from_parts(2, 2, vec![1.0, 0.0], vec![0, 3], vec![0, 1]).unwrap_err().contains("offsets"));
    }
}
