//! The vectors of one kb table, held in one shared buffer at full or half precision
//! ([`Precision`]), scanned with [`flexstruct_scan`] (exact, parallel, ties to the lower row) —
//! or, for a table with an approximate index ([`crate::io::ann`]), searched through it.

use std::sync::Arc;

use arrow::buffer::ScalarBuffer;
use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::io::kb::{Floats, Precision};
pub use flexstruct_scan::{Hit, Ivf, dot};

/// `rows × dim` floats, row-major, each row of unit length; cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct Vectors {
    dim: usize,
    values: Values,
    /// The approximate index searched instead of every row, and its probes.
    ann: Option<(Arc<Ivf>, usize)>,
}

#[derive(Debug, Clone)]
enum Values {
    F32(ScalarBuffer<f32>),
    F16(ScalarBuffer<f16>),
}

impl Default for Vectors {
    fn default() -> Self {
        Vectors { dim: 0, values: Values::F32(ScalarBuffer::from(Vec::new())), ann: None }
    }
}

impl Vectors {
    /// Vectors from a flat buffer of `dim`-wide rows.
    pub fn new(dim: usize, values: Floats) -> Vectors {
        let values = match values {
            Floats::F32(values) => Values::F32(values.into()),
            Floats::F16(values) => Values::F16(values.into()),
        };
        Vectors { dim, values, ann: None }
    }

    /// These vectors searched through `ivf` (built over them), scoring the rows of `probes`
    /// lists per query, instead of scanning every row.
    pub fn with_ann(self, ivf: Arc<Ivf>, probes: usize) -> Vectors {
        Vectors { ann: Some((ivf, probes)), ..self }
    }

    /// The approximate index searched, if any, and its probes.
    pub fn ann(&self) -> Option<(&Ivf, usize)> {
        self.ann.as_ref().map(|(ivf, probes)| (ivf.as_ref(), *probes))
    }

    /// Vector width.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The precision the vectors are held at.
    pub fn precision(&self) -> Precision {
        match self.values {
            Values::F32(_) => Precision::F32,
            Values::F16(_) => Precision::F16,
        }
    }

    /// Bytes of its floats, and of its approximate index (0 without one).
    pub fn heap_sizes(&self) -> (usize, usize) {
        let floats = match &self.values {
            Values::F32(values) => values.inner().capacity(),
            Values::F16(values) => values.inner().capacity(),
        };
        (floats, self.ann.as_ref().map_or(0, |(ivf, _)| ivf.heap_size()))
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        let floats = match &self.values {
            Values::F32(values) => values.len(),
            Values::F16(values) => values.len(),
        };
        floats.checked_div(self.dim).unwrap_or(0)
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// For each query, the `k` rows with the highest cosine strictly above `threshold`, best
    /// first (all of those that pass when fewer do); each block of rows is read once for all.
    /// With an approximate index, the best among the rows of each query's nearest lists.
    pub fn top_k_batch(&self, queries: &[&[f32]], threshold: f32, k: usize) -> Vec<Vec<Hit>> {
        match (&self.values, &self.ann) {
            (Values::F32(values), None) => flexstruct_scan::top_k_batch(values, self.dim, queries, threshold, k),
            (Values::F16(values), None) => flexstruct_scan::top_k_batch_f16(values, self.dim, queries, threshold, k),
            (Values::F32(values), Some((ivf, probes))) => ivf.search_batch(values, queries, *probes, threshold, k),
            (Values::F16(values), Some((ivf, probes))) => ivf.search_batch_f16(values, queries, *probes, threshold, k),
        }
    }

    /// [`Vectors::top_k_batch`] scanning every row, whether or not an approximate index is set.
    pub fn exact_top_k_batch(&self, queries: &[&[f32]], threshold: f32, k: usize) -> Vec<Vec<Hit>> {
        Vectors { ann: None, ..self.clone() }.top_k_batch(queries, threshold, k)
    }

    /// The cosine of the query with the given rows.
    pub fn scores(&self, query: &[f32], rows: &[u32]) -> Vec<Hit> {
        match &self.values {
            Values::F32(values) => flexstruct_scan::scores(values, self.dim, query, rows),
            Values::F16(values) => flexstruct_scan::scores_f16(values, self.dim, query, rows),
        }
    }

    /// Every row's vector at full precision (widened when held at half), one after the other.
    pub fn to_f32(&self) -> Vec<f32> {
        match &self.values {
            Values::F32(values) => values.to_vec(),
            Values::F16(values) => values.to_f32_vec(),
        }
    }

    /// The dot product of `query` with one row (its cosine, for a unit `query`): the row read in
    /// place (one row widened, at half precision), for callers that score rows one at a time.
    pub fn dot(&self, query: &[f32], row: usize) -> f32 {
        let span = row * self.dim..(row + 1) * self.dim;
        match &self.values {
            Values::F32(values) => dot(&values[span], query),
            Values::F16(values) => dot(&values[span].to_f32_vec(), query),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_at_either_precision() {
        let values = vec![1.0, 0.0, 0.6, 0.8];
        let half = Floats::F16(values.iter().map(|&v| f16::from_f32(v)).collect());
        for v in [Vectors::new(2, Floats::F32(values.clone())), Vectors::new(2, half)] {
            assert_eq!((v.len(), v.dim()), (2, 2));
            assert!((v.dot(&[0.6, 0.8], 1) - 1.0).abs() < 1e-3, "{:?}", v.precision());
            assert_eq!(v.dot(&[0.6, 0.8], 0), v.scores(&[0.6, 0.8], &[0])[0].score, "as the batch scores it");
            assert_eq!(v.top_k_batch(&[&[0.0, 1.0]], 0.5, 5)[0].iter().map(|h| h.row).collect::<Vec<_>>(), [1]);
            assert_eq!(v.scores(&[1.0, 0.0], &[1, 0]).iter().map(|h| h.row).collect::<Vec<_>>(), [1, 0]);
            // Through an approximate index probing every list: what the exact scan finds.
            let approximate = v.clone().with_ann(Arc::new(Ivf::build(&values, 2, 2)), 2);
            assert_eq!(approximate.ann().map(|(ivf, probes)| (ivf.lists(), probes)), Some((2, 2)));
            let query: &[f32] = &[0.6, 0.8];
            assert_eq!(approximate.top_k_batch(&[query], -1.0, 2), v.top_k_batch(&[query], -1.0, 2));
            assert_eq!(approximate.exact_top_k_batch(&[query], -1.0, 2), v.top_k_batch(&[query], -1.0, 2));
        }
        assert!(Vectors::default().is_empty() && Vectors::default().top_k_batch(&[&[1.0]], -1.0, 3)[0].is_empty());
    }
}
