//! The `[chunk]` section.

use serde::{Deserialize, Serialize};

use crate::core::{Error, Result};

/// The `[chunk]` section (dynamic partitioning, paper §3.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ChunkConfig {
    /// Chunks below this many tokens merge with a neighbour.
    pub ct_min: usize,
    /// Paragraphs are packed into a chunk until the next would exceed this many tokens.
    pub ct_max: usize,
    /// Tokenizer that defines a token; only `cl100k_base` is supported.
    pub tokenizer: String,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        ChunkConfig { ct_min: 500, ct_max: 600, tokenizer: "cl100k_base".into() }
    }
}

impl ChunkConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        if self.ct_max == 0 {
            return Err(Error::config("chunk.ct_max", "must be at least 1"));
        }
        if self.ct_min > self.ct_max {
            return Err(Error::config(
                "chunk.ct_min",
                format!("ct_min ({}) must not exceed chunk.ct_max ({})", self.ct_min, self.ct_max),
            ));
        }
        if self.tokenizer != "cl100k_base" {
            return Err(Error::config(
                "chunk.tokenizer",
                format!("`{}` is not supported (supported: cl100k_base)", self.tokenizer),
            ));
        }
        Ok(())
    }
}
