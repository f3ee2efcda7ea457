//! Stable ids and hashes: every id and fingerprint of an index is derived from its inputs with
//! SHA-256, never random, so reruns reproduce them on any machine.

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::error::Result;

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Stable 64-bit hash of a document id (first 8 bytes of its SHA-256, big-endian): the same on
/// every machine and in every language, so external schedulers can compute shards too.
pub fn doc_hash(doc_id: &str) -> u64 {
    let digest = Sha256::digest(doc_id.as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(bytes)
}

/// A stable id: `prefix-` and 16 hex digits of the SHA-256 of the parts.
pub fn stable_id(prefix: &str, parts: &[&str]) -> String {
    format!("{prefix}-{}", &sha256_hex(parts.join("\u{0}").as_bytes())[..16])
}

/// Stable fingerprint of a list of strings.
pub fn fingerprint(parts: &[&str]) -> String {
    sha256_hex(parts.join("\u{0}").as_bytes())
}

/// Fingerprint of a serialisable value (a configuration section, a backend identity).
pub fn value_fingerprint(value: &impl Serialize) -> Result<String> {
    Ok(sha256_hex(&serde_json::to_vec(value)?))
}

/// Id of a chunk where chunks are addressed by one string (`embeddings.id`, evidence ids):
/// `doc_id#chunk_idx`.
pub fn chunk_id(doc_id: &str, chunk_idx: i32) -> String {
    format!("{doc_id}#{chunk_idx}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_and_ids_are_pinned() {
        // Shard assignment and ids must never change between versions.
        assert_eq!(doc_hash("mix-00"), 0xacf8_168f_10a7_d071);
        assert_eq!(stable_id("ent", &["d", "kvwa"]), format!("ent-{}", &sha256_hex(b"d\0kvwa")[..16]));
        assert_eq!(chunk_id("d", 3), "d#3");
        assert_ne!(fingerprint(&["a", "bc"]), fingerprint(&["ab", "c"]));
    }
}
