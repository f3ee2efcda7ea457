//! The `[hypergraph]` section.

use serde::{Deserialize, Serialize};

use crate::core::{Error, Result};

/// The `[hypergraph]` section. Who writes the summaries above τ_s is `backends.summaries`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct HypergraphConfig {
    /// τ_s: entities with a larger hyperdegree get a condensed summary (by the summaries backend: the
    /// rules keep their first τ_s hyperedge texts, an LLM writes one), the others the
    /// concatenation of all their hyperedge texts.
    pub tau_s: usize,
}

impl Default for HypergraphConfig {
    fn default() -> Self {
        HypergraphConfig { tau_s: 9 }
    }
}

impl HypergraphConfig {
    /// Checks the values: τ_s = 0 would leave every summary empty.
    pub fn validate(&self) -> Result<()> {
        if self.tau_s == 0 {
            return Err(Error::config(
                "hypergraph.tau_s",
                "must be at least 1 (0 would leave every entity summary empty)",
            ));
        }
        Ok(())
    }
}
