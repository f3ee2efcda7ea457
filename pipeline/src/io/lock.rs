//! Advisory locks between processes working on one index (`std::fs::File::lock`: `flock` on
//! Unix, `LockFileEx` on Windows). A lock is released when it is dropped or its process dies, so
//! a killed run never leaves an index locked. Lock files live in the index's hidden `.locks/`
//! folder and hold no data.
//!
//! What is locked:
//! - a bucket of `documents` while ingest reads, merges and rewrites it, so that two ingest runs at
//!   once (two halves of a corpus, or two shards) both end up in the index;
//! - the `kb/` tables: merge holds the lock exclusively while it writes them, the query stage and
//!   SQL sessions share it while they read, so that a reader never sees a half-written kb.

use std::fs::{File, OpenOptions};
use std::path::PathBuf;

use super::index::Index;
use crate::core::{Error, Result};

/// A held lock; dropping it releases it.
#[derive(Debug)]
pub struct Lock {
    _file: Option<File>,
}

/// Which lock of an index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockName {
    /// A bucket of the `documents` table.
    DocumentsBucket(u32),
    /// The merged `kb/` tables.
    Kb,
}

fn lock_path(index: &Index, name: LockName) -> PathBuf {
    let file = match name {
        LockName::DocumentsBucket(b) => format!("documents-{b:04}.lock"),
        LockName::Kb => "kb.lock".to_owned(),
    };
    index.root().join(".locks").join(file)
}

fn open(index: &Index, name: LockName) -> Result<(File, PathBuf)> {
    let path = lock_path(index, name);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(Error::io("creating the lock folder", dir))?;
    }
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(Error::io("opening a lock file", &path))?;
    Ok((file, path))
}

/// Takes `name` for this process alone, waiting while another process holds it.
pub fn exclusive(index: &Index, name: LockName) -> Result<Lock> {
    let (file, path) = open(index, name)?;
    file.lock().map_err(Error::io("locking", &path))?;
    Ok(Lock { _file: Some(file) })
}

/// Takes `name` shared with other readers, waiting while a writer holds it. On an index this
/// process may not write (a read-only copy or mount) no writer can run either, and reading goes
/// on without a lock.
pub fn shared(index: &Index, name: LockName) -> Result<Lock> {
    let file = match open(index, name) {
        Ok((file, _)) => file,
        Err(Error::Io { source, .. })
            if matches!(
                source.kind(),
                std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
            ) =>
        {
            match File::open(lock_path(index, name)) {
                Ok(file) => file,
                Err(_) => return Ok(Lock { _file: None }),
            }
        }
        Err(e) => return Err(e),
    };
    let path = lock_path(index, name);
    file.lock_shared().map_err(Error::io("locking", &path))?;
    Ok(Lock { _file: Some(file) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[test]
    fn an_exclusive_lock_waits_for_readers_and_readers_share() {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open_or_create(dir.path(), Some(1)).unwrap();
        let r1 = shared(&index, LockName::Kb).unwrap();
        let r2 = shared(&index, LockName::Kb).unwrap();
        let taken = Arc::new(AtomicBool::new(false));
        let writer = {
            let (index, taken) = (index.clone(), taken.clone());
            std::thread::spawn(move || {
                let _w = exclusive(&index, LockName::Kb).unwrap();
                taken.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        assert!(!taken.load(Ordering::SeqCst), "the writer must wait for both readers");
        drop((r1, r2));
        writer.join().unwrap();
        assert!(taken.load(Ordering::SeqCst));
        // Buckets are locked one by one.
        let _a = exclusive(&index, LockName::DocumentsBucket(0)).unwrap();
        let _b = exclusive(&index, LockName::DocumentsBucket(1)).unwrap();
    }
}
