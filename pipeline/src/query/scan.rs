//! The vectors of one kb table, held as the Arrow `f32` buffer they were decoded into, scanned
//! with [`flexstruct_scan`] (exact, parallel, ties to the lower row).

use arrow::buffer::ScalarBuffer;
pub use flexstruct_scan::{Hit, dot};

/// `rows × dim` floats, row-major, each row of unit length.
#[derive(Debug, Clone, Default)]
pub struct Vectors {
    dim: usize,
    values: ScalarBuffer<f32>,
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

    /// Every row's vector, one after the other.
    pub fn values(&self) -> &[f32] {
        &self.values
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

    /// For each query, the `k` rows with the highest cosine strictly above `threshold`, best
    /// first (all of those that pass when fewer do); each block of rows is read once for all.
    pub fn top_k_batch(&self, queries: &[&[f32]], threshold: f32, k: usize) -> Vec<Vec<Hit>> {
        flexstruct_scan::top_k_batch(&self.values, self.dim, queries, threshold, k)
    }

    /// The cosine of the query with the given rows.
    pub fn scores(&self, query: &[f32], rows: &[u32]) -> Vec<Hit> {
        flexstruct_scan::scores(&self.values, self.dim, query, rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_an_arrow_buffer() {
        let v = Vectors::new(2, vec![1.0, 0.0, 0.6, 0.8].into());
        assert_eq!((v.len(), v.dim(), v.row(1)), (2, 2, &[0.6f32, 0.8][..]));
        assert_eq!(v.top_k_batch(&[&[0.0, 1.0]], 0.5, 5)[0].iter().map(|h| h.row).collect::<Vec<_>>(), [1]);
        assert!(Vectors::default().is_empty() && Vectors::default().top_k_batch(&[&[1.0]], -1.0, 3)[0].is_empty());
    }
}
