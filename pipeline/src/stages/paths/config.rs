//! The `[paths]` section: the path index of SG-RAG's structure-guided retrieval (`--mode paths`).

use serde::{Deserialize, Serialize};

use crate::core::dominance::SketchShape;
use crate::core::{Error, Result};
use crate::models::gat::GatTraining;

/// How the nodes' dominant embeddings are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Dominance {
    /// Non-negative count sketches of each node's star: dominance holds by construction.
    #[default]
    Sketch,
    /// The seed's graph-attention encoder, trained on the kb's graph with the dominance loss:
    /// dominance as well as training made it (`flexstruct-paths --ablate-dominance` measures it).
    Gat,
}

impl Dominance {
    /// The name in the configuration and the stage's metrics.
    pub fn name(self) -> &'static str {
        match self {
            Dominance::Sketch => "sketch",
            Dominance::Gat => "gat",
        }
    }
}

/// The `[paths]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PathsConfig {
    /// Longest indexed path, in edges (1 to 3).
    pub max_length: usize,
    /// Most paths of each length kept per start node (neighbours taken rarest first), which keeps
    /// the index linear in the edges: at most nodes × max_length × this many paths.
    pub max_paths_per_node: usize,
    /// How dominant embeddings are made.
    pub dominance: Dominance,
    /// Hashed positions of a sketch (it has one more: the neighbour count); each neighbour adds
    /// to two of them. The GAT's input features are the sketch of one name.
    pub sketch_dims: usize,
    /// How the GAT encoder is trained (`dominance = "gat"`).
    pub gat: GatTraining,
}

impl Default for PathsConfig {
    fn default() -> Self {
        PathsConfig {
            max_length: 3,
            max_paths_per_node: 32,
            dominance: Dominance::Sketch,
            sketch_dims: 64,
            gat: GatTraining::default(),
        }
    }
}

impl PathsConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        if !(1..=3).contains(&self.max_length) {
            return Err(Error::config("paths.max_length", format!("must be 1, 2 or 3, not {}", self.max_length)));
        }
        if self.max_paths_per_node == 0 {
            return Err(Error::config("paths.max_paths_per_node", "must be at least 1"));
        }
        if self.sketch_dims < 2 {
            return Err(Error::config("paths.sketch_dims", format!("must be at least 2, not {}", self.sketch_dims)));
        }
        self.gat.validate()
    }

    /// The shape of the sketches (and of the GAT's input features).
    pub fn shape(&self) -> SketchShape {
        SketchShape { dims: self.sketch_dims }
    }
}
