//! The `[graph]` section.

use serde::{Deserialize, Serialize};

/// The `[graph]` section. Who finds the relations is `backends.relations`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct GraphConfig {
    /// τ_e: entities with a larger hyperdegree are anchors whose pairwise relations are extracted.
    pub tau_e: usize,
    /// Rules backend: longest connecting phrase (in words) between two entities that makes an edge.
    pub max_connector_words: usize,
}

impl Default for GraphConfig {
    fn default() -> Self {
        GraphConfig { tau_e: 3, max_connector_words: 12 }
    }
}
