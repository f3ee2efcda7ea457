//! The vectors of one kb table, held in one shared buffer at full or half precision
//! ([`Precision`]), scanned with [`flexstruct_scan`] (exact, parallel, ties to the lower row).

use arrow::buffer::ScalarBuffer;
use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::io::kb::{Floats, Precision};
pub use flexstruct_scan::{Hit, dot};

/// `rows × dim` floats, row-major, each row of unit length; cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct Vectors {
    dim: usize,
    values: Values,
}

#[derive(Debug, Clone)]
enum Values {
    F32(ScalarBuffer<f32>),
    F16(ScalarBuffer<f16>),
}

impl Default for Vectors {
    fn default() -> Self {
        Vectors { dim: 0, values: Values::F32(ScalarBuffer::from(Vec::new())) }
    }
}

impl Vectors {
    /// Vectors from a flat buffer of `dim`-wide rows.
    pub fn new(dim: usize, values: Floats) -> Vectors {
        let values = match values {
            Floats::F32(values) => Values::F32(values.into()),
            Floats::F16(values) => Values::F16(values.into()),
        };
        Vectors { dim, values }
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
    pub fn top_k_batch(&self, queries: &[&[f32]], threshold: f32, k: usize) -> Vec<Vec<Hit>> {
        match &self.values {
            Values::F32(values) => flexstruct_scan::top_k_batch(values, self.dim, queries, threshold, k),
            Values::F16(values) => flexstruct_scan::top_k_batch_f16(values, self.dim, queries, threshold, k),
        }
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
        }
        assert!(Vectors::default().is_empty() && Vectors::default().top_k_batch(&[&[1.0]], -1.0, 3)[0].is_empty());
    }
}
