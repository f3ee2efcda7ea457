//! The kb of an index on object storage, committed as a whole.
//!
//! Object storage has no rename and no lock that a reader on another machine would see, so a kb
//! there is made visible the way Delta Lake commits a table version: its files are written as
//! objects that are never overwritten — each under a name that holds its content's hash
//! (`kb/entities/part-0013.<hash>.parquet`) — and one object written last, the **commit record**
//! (`kb/commit.json`), names the objects of the kb, file by file. A reader reads the record, then
//! the objects it names: the kb of one merge, whatever merge is writing meanwhile. A merge
//! replaces the record only if it is still the one it read (a conditional `PUT` with its ETag), so
//! of two merges racing one commits and the other fails naming the generation that won.
//!
//! A sharded merge (`--shard K/N`, a Slurm array) does not commit: each task writes its buckets'
//! objects and a **staged record** of its own (`kb/staged/K-of-N.json`) naming them, which the
//! whole-index run that follows (the global thresholds) reads over the committed kb, commits as
//! one, and removes. Readers never read staged records.
//!
//! Objects named by neither the new record nor the one it replaced (nor a staged record) are
//! removed after the commit once they are older than a grace period, so that a reader still
//! pulling the previous kb finds it, and a merge uploading its objects is not robbed of them; a
//! reader that finds an object gone (its kb two commits old) reads the record again.
//!
//! The record also names the `documents` parts the kb was built from, kept as objects of their
//! own: a query reads documents' titles, and the service their text, and those must be of the
//! same generation as the kb even while an ingest rewrites `documents` for the next merge.
//!
//! An index whose kb was written before commit records existed has its kb objects under their
//! own names; it is read as it is until its next merge commits.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::index::Shard;

/// The commit record, below the index root.
pub const COMMIT_RECORD: &str = "kb/commit.json";

/// Where sharded merges stage their buckets' kb objects.
pub const STAGED_PREFIX: &str = "kb/staged/";

/// Where the `documents` parts a committed kb was built from are kept.
pub const DOCUMENTS_PREFIX: &str = "kb/documents/";

/// Version of the records' layout.
const FORMAT: u32 = 1;

/// Hex digits of the content hash in an object's name (96 bits).
const HASH_DIGITS: usize = 24;

/// One file of the kb as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KbObject {
    /// The object, below the index root.
    pub key: String,
    /// SHA-256 of its bytes.
    pub sha256: String,
    /// Its length.
    pub bytes: u64,
}

impl KbObject {
    /// The object that holds the file `logical` (`kb/entities/part-0013.parquet`) of SHA-256
    /// `digest`: a name of its own for every content, below `kb/` (a `documents` part the kb
    /// was built from is kept as `kb/documents/part-0013.<hash>.parquet`).
    pub fn new(logical: &str, digest: &[u8; 32], bytes: u64) -> KbObject {
        let hash = &hex::encode(digest)[..HASH_DIGITS];
        let (dir, file) = logical.rsplit_once('/').unwrap_or(("", logical));
        let file = match file.rsplit_once('.') {
            Some((stem, ext)) => format!("{stem}.{hash}.{ext}"),
            None => format!("{file}.{hash}"),
        };
        let key = if dir.is_empty() { file } else { format!("{dir}/{file}") };
        let key = if key.starts_with("kb/") { key } else { format!("kb/{key}") };
        KbObject { key, sha256: hex::encode(digest), bytes }
    }
}

/// Whether `relative` is an object named by [`KbObject::new`] rather than a file's own name.
pub fn is_content_named(relative: &str) -> bool {
    let file = relative.rsplit('/').next().unwrap_or(relative);
    let mut pieces = file.rsplit('.');
    let is_hash =
        |p: &str| p.len() == HASH_DIGITS && p.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    match (pieces.next(), pieces.next()) {
        (Some(last), Some(before)) => is_hash(before) || is_hash(last),
        _ => false,
    }
}

/// Whether `relative` is the commit record or a staged record.
pub fn is_record(relative: &str) -> bool {
    relative == COMMIT_RECORD || relative.starts_with(STAGED_PREFIX)
}

/// What one commit made the kb.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commit {
    /// Layout version.
    pub format: u32,
    /// 1 for the first commit, one more for each after it.
    pub generation: u64,
    /// The kb: each file, by its path below the index root, and the object holding it.
    pub objects: BTreeMap<String, KbObject>,
    /// The objects of the commit this one replaced, kept for readers still pulling them.
    #[serde(default)]
    pub previous: BTreeSet<String>,
}

impl Commit {
    /// The commit after `before` (none: the first, over the objects `uncommitted` of a kb
    /// written before commit records) that makes the kb `objects`.
    pub fn next(before: Option<&Commit>, uncommitted: BTreeSet<String>, objects: BTreeMap<String, KbObject>) -> Commit {
        Commit {
            format: FORMAT,
            generation: before.map_or(1, |b| b.generation + 1),
            objects,
            previous: before.map_or(uncommitted, |b| b.objects.values().map(|o| o.key.clone()).collect()),
        }
    }

    /// Every object this record keeps: its own and its predecessor's.
    pub fn keeps(&self) -> impl Iterator<Item = &str> {
        self.objects.values().map(|o| o.key.as_str()).chain(self.previous.iter().map(String::as_str))
    }
}

/// The buckets of the kb one task of a sharded merge wrote: each file of them, with the object
/// holding it, or none where the task removed the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Staged {
    /// Layout version.
    pub format: u32,
    /// The task's shard (`3/16`).
    pub shard: String,
    /// Each file of the shard's buckets.
    pub objects: BTreeMap<String, Option<KbObject>>,
}

impl Staged {
    /// The record of `shard`.
    pub fn new(shard: Shard, objects: BTreeMap<String, Option<KbObject>>) -> Staged {
        Staged { format: FORMAT, shard: shard.to_string(), objects }
    }

    /// Where the record of `shard` is stored, below the index root.
    pub fn location(shard: Shard) -> String {
        format!("{STAGED_PREFIX}{}-of-{}.json", shard.index, shard.count)
    }

    /// The objects it names.
    pub fn keeps(&self) -> impl Iterator<Item = &str> {
        self.objects.values().flatten().map(|o| o.key.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_named_by_their_content() {
        let digest = [0xab; 32];
        let object = KbObject::new("kb/entities/part-0013.parquet", &digest, 7);
        assert_eq!(object.key, "kb/entities/part-0013.abababababababababababab.parquet");
        assert!(is_content_named(&object.key));
        assert!(!is_content_named("kb/entities/part-0013.parquet"));
        assert!(!is_content_named("kb/entities/vectors.f32"));
        let documents = KbObject::new("documents/part-0013.parquet", &digest, 7);
        assert_eq!(documents.key, "kb/documents/part-0013.abababababababababababab.parquet");
        let bare = KbObject::new("kb/entities/README", &digest, 7);
        assert_eq!(bare.key, "kb/entities/README.abababababababababababab");
        assert!(is_content_named(&bare.key));
        assert!(is_record(COMMIT_RECORD) && is_record(&Staged::location(Shard { index: 1, count: 4 })));
        assert_eq!(Staged::location(Shard { index: 1, count: 4 }), "kb/staged/1-of-4.json");
    }

    #[test]
    fn a_commit_keeps_its_predecessors_objects() {
        let a = KbObject::new("kb/entities/part-0000.parquet", &[1; 32], 1);
        let b = KbObject::new("kb/entities/part-0000.parquet", &[2; 32], 1);
        let first = Commit::next(
            None,
            BTreeSet::new(),
            BTreeMap::from([("kb/entities/part-0000.parquet".to_owned(), a.clone())]),
        );
        assert_eq!((first.generation, first.previous.len()), (1, 0));
        let second = Commit::next(
            Some(&first),
            BTreeSet::new(),
            BTreeMap::from([("kb/entities/part-0000.parquet".to_owned(), b.clone())]),
        );
        assert_eq!(second.generation, 2);
        let kept: BTreeSet<&str> = second.keeps().collect();
        assert_eq!(kept, BTreeSet::from([a.key.as_str(), b.key.as_str()]));
    }
}
