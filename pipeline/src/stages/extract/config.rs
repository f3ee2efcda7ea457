//! The `[extract]` section.

use serde::{Deserialize, Serialize};

use crate::core::{Error, Result};

/// The `[extract]` section (truncated sliding-window extraction, paper §3.1). Which backend
/// extracts is `backends.extract` ([`crate::core::backend::BackendsConfig`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ExtractConfig {
    /// `false` extracts every chunk without its preceding chunks (the paper's "w/o SW").
    pub window: bool,
    /// Maximum window size g_max, the target chunk included.
    pub g_max: usize,
    /// Overlap g_overlap between consecutive windows.
    pub g_overlap: usize,
}

impl Default for ExtractConfig {
    fn default() -> Self {
        ExtractConfig { window: true, g_max: 3, g_overlap: 2 }
    }
}

impl ExtractConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        if self.g_max == 0 || self.g_overlap >= self.g_max {
            return Err(Error::config(
                "extract.g_overlap",
                format!(
                    "g_overlap ({}) must be smaller than extract.g_max ({}), and g_max at least 1",
                    self.g_overlap, self.g_max
                ),
            ));
        }
        Ok(())
    }
}
