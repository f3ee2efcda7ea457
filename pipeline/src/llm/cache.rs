//! The response cache: one small JSON file per answered request under `<index>/llm_cache/`,
//! written atomically (temporary file and rename, so a killed run never leaves a half entry),
//! keyed by the SHA-256 of (model, full prompt, sampling parameters). Shared
//! by every stage of an index, so a rerun or a resumed crashed run asks nothing twice. The API
//! key is never part of the key or the entry.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::core::{Error, Result};
use crate::io::files::{remove_file, write_file_atomic_unsynced};

/// Folder of the cache inside an index.
pub const CACHE_DIR: &str = "llm_cache";

/// A cached answer, with the cost of obtaining it the first time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedAnswer {
    /// The model's answer text.
    pub content: String,
    /// Prompt tokens of the original call.
    pub prompt_tokens: u64,
    /// Completion tokens of the original call.
    pub completion_tokens: u64,
    /// Whether the counts were estimated (the server sent no `usage`).
    pub tokens_estimated: bool,
    /// Latency of the original call.
    pub latency_ms: u64,
    /// The answer was cut at the request's token limit: not an answer, only the memory that
    /// this request, at this room, is cut (left out of entries that are answers).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

/// The cache of one index.
#[derive(Debug, Clone)]
pub struct ResponseCache {
    dir: PathBuf,
}

impl ResponseCache {
    /// The cache of the index at `root`.
    pub fn new(root: &Path) -> Self {
        ResponseCache { dir: root.join(CACHE_DIR) }
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(&key[..2]).join(format!("{key}.json"))
    }

    /// The cached answer for `key`, if any. A damaged entry (e.g. from a disk error) counts as
    /// absent and is asked again.
    pub fn get(&self, key: &str) -> Option<CachedAnswer> {
        let bytes = std::fs::read(self.path(key)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Removes an entry (a missing one is not an error).
    pub fn remove(&self, key: &str) -> Result<()> {
        remove_file(&self.path(key))
    }

    /// Stores an answer.
    pub fn put(&self, key: &str, answer: &CachedAnswer) -> Result<()> {
        let bytes = serde_json::to_vec(answer).map_err(Error::from)?;
        write_file_atomic_unsynced(&self.path(key), &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn working_copies_of_remote_indexes_know_the_cache_folder() {
        assert_eq!(crate::io::remote::CACHE_PREFIX, format!("{CACHE_DIR}/"));
    }

    #[test]
    fn put_get_and_damaged_entries() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ResponseCache::new(dir.path());
        let key = "ab".repeat(32);
        assert_eq!(cache.get(&key), None);
        let answer = CachedAnswer {
            content: "{}".into(),
            prompt_tokens: 3,
            completion_tokens: 1,
            tokens_estimated: false,
            latency_ms: 9,
            cut: false,
        };
        cache.put(&key, &answer).unwrap();
        // An answer's entry reads as it did before entries could remember a cut.
        assert!(!std::fs::read_to_string(cache.path(&key)).unwrap().contains("cut"));
        assert_eq!(cache.get(&key), Some(answer));
        std::fs::write(cache.path(&key), b"{trunc").unwrap();
        assert_eq!(cache.get(&key), None);
    }
}
