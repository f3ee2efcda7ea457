//! Files written atomically: a hidden temporary file in the same folder, then a rename, so that
//! readers and a run killed midway only ever see the old file or the complete new one. Every
//! file of an index is written this way.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::core::{Error, Result};

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A temporary sibling of `path` (hidden, so table listings never see it).
fn temp_sibling(path: &Path) -> PathBuf {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("part");
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.{}-{n}.tmp", std::process::id()))
}

/// Writes through a temporary file, fsyncs it and renames it over `path`, so that readers (and
/// a run killed midway) only ever see the old file or the complete new one.
pub(super) fn write_atomic(path: &Path, write: impl FnOnce(File) -> Result<()>) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(Error::io("creating the table folder", dir))?;
    }
    let temp = temp_sibling(path);
    let result = File::create(&temp)
        .map_err(Error::io("creating a temporary file", &temp))
        .and_then(write)
        .and_then(|()| std::fs::rename(&temp, path).map_err(Error::io("renaming the temporary file into place", path)));
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// Writes `bytes` to `path` atomically and durably (fsync before the rename).
pub fn write_file_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic(path, |mut file| {
        file.write_all(bytes).map_err(Error::io("writing", path))?;
        file.sync_all().map_err(Error::io("syncing", path))
    })
}

/// Writes `bytes` to `path` atomically but without fsync: a killed process leaves the old file
/// or the new one, never half of it; only a power loss may lose the write. For caches, where a
/// lost entry costs one repeated request and an fsync per entry would cap throughput.
pub fn write_file_atomic_unsynced(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic(path, |mut file| file.write_all(bytes).map_err(Error::io("writing", path)))
}

/// Removes a file; a missing one is not an error.
pub fn remove_file(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("removing", path)(e)),
        _ => Ok(()),
    }
}
