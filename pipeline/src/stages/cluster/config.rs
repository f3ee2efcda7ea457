//! The `[cluster]` section.

use serde::{Deserialize, Serialize};

use crate::core::{Error, Result};

/// The `[cluster]` section (structure-aware semantic clustering).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// α: weight of positional distance |k_i − k_j| against cosine distance.
    pub alpha: f32,
    /// HDBSCAN minimum cluster size.
    pub min_cluster_size: usize,
    /// HDBSCAN min_samples (neighbourhood size of core distances).
    pub min_samples: usize,
    /// Most hyperedges clustered at once; longer documents go in overlapping windows (the
    /// distance matrix is max_window² floats: 3,000 → 36 MB per concurrent document).
    pub max_window: usize,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig { alpha: 0.1, min_cluster_size: 3, min_samples: 2, max_window: 3000 }
    }
}

impl ClusterConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        if !(self.alpha.is_finite() && self.alpha >= 0.0) {
            return Err(Error::config("cluster.alpha", format!("must be a finite number >= 0, not {}", self.alpha)));
        }
        if self.min_cluster_size < 2 || self.max_window < 4 {
            return Err(Error::config(
                "cluster",
                "cluster.min_cluster_size must be at least 2 and cluster.max_window at least 4",
            ));
        }
        Ok(())
    }
}
