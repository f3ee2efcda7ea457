//! The `[ingest]` section.

use serde::{Deserialize, Serialize};

use crate::core::{Error, Result};

/// The `[ingest]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct IngestConfig {
    /// Documents longer than this (bytes of UTF-8) are refused with a failure row.
    pub max_document_bytes: u64,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig { max_document_bytes: 256 * 1024 * 1024 }
    }
}

impl IngestConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        if self.max_document_bytes == 0 || self.max_document_bytes > i32::MAX as u64 {
            return Err(Error::config("ingest.max_document_bytes", "must be between 1 and 2147483647"));
        }
        Ok(())
    }
}
