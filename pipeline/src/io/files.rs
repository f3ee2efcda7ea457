//! Files written atomically: a hidden temporary file in the same folder, then a rename, so that
//! readers and a run killed midway only ever see the old file or the complete new one. Every
//! file of an index is written this way.

use std::collections::HashSet;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};

use crate::core::{Error, Result};

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The temporary files this process is writing now: what a stop on a signal removes.
static LIVE_TEMPS: LazyLock<Mutex<HashSet<PathBuf>>> = LazyLock::new(Default::default);

/// A temporary file being written, listed in [`LIVE_TEMPS`] while it lives.
struct LiveTemp(PathBuf);

impl LiveTemp {
    fn new(path: PathBuf) -> LiveTemp {
        if let Ok(mut live) = LIVE_TEMPS.lock() {
            live.insert(path.clone());
        }
        LiveTemp(path)
    }
}

impl Drop for LiveTemp {
    fn drop(&mut self) {
        if let Ok(mut live) = LIVE_TEMPS.lock() {
            live.remove(&self.0);
        }
    }
}

/// Removes the temporary files this process is writing (a process stopping on a signal, which
/// abandons the work in progress); returns how many it removed. What is written after this
/// call is left to [`remove_stale_temps`] of the next run.
pub fn remove_live_temps() -> usize {
    remove_live(|_| true)
}

/// Removes the live temporary files `which` picks.
fn remove_live(which: impl Fn(&Path) -> bool) -> usize {
    let Ok(mut live) = LIVE_TEMPS.lock() else { return 0 };
    let picked: Vec<PathBuf> = live.iter().filter(|path| which(path)).cloned().collect();
    picked.iter().filter(|path| live.remove(*path) && std::fs::remove_file(path).is_ok()).count()
}

/// A temporary sibling of `path` (hidden, so table listings never see it).
fn temp_sibling(path: &Path) -> PathBuf {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("part");
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.{}-{n}.tmp", std::process::id()))
}

/// Removes the temporary files in `dir` that a killed process left behind: those of a process
/// that no longer runs (where `/proc` tells), or older than a day. Temporary files of live
/// processes (a concurrent shard's writes) are left alone. Returns how many were removed.
pub fn remove_stale_temps(dir: &Path) -> Result<usize> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(0) };
    let proc_fs = Path::new("/proc/self").exists();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(temp_pid) else { continue };
        let dead = proc_fs && pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists();
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > std::time::Duration::from_secs(86_400)));
        if dead || old {
            remove_file(&entry.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// The process id in the name of a temporary file written by [`write_atomic`]
/// (`.<name>.<pid>-<n>.tmp`).
fn temp_pid(name: &str) -> Option<u32> {
    let stem = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (_, tail) = stem.rsplit_once('.')?;
    let (pid, n) = tail.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Writes through a temporary file, fsyncs it and renames it over `path`, so that readers (and
/// a run killed midway) only ever see the old file or the complete new one.
pub(super) fn write_atomic(path: &Path, write: impl FnOnce(File) -> Result<()>) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(Error::io("creating the table folder", dir))?;
    }
    let live = LiveTemp::new(temp_sibling(path));
    let temp = &live.0;
    let result = File::create(temp)
        .map_err(Error::io("creating a temporary file", temp))
        .and_then(write)
        .and_then(|()| std::fs::rename(temp, path).map_err(Error::io("renaming the temporary file into place", path)));
    if result.is_err() {
        let _ = std::fs::remove_file(temp);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_files_of_dead_processes_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(temp_pid(".part-0003.parquet.4242-7.tmp"), Some(4242));
        assert_eq!(temp_pid("part-0003.parquet"), None);
        // A pid above the kernel's limit (2^22) never runs; ours does.
        let dead = dir.path().join(".part-0000.parquet.99999999-0.tmp");
        let ours = dir.path().join(format!(".part-0001.parquet.{}-0.tmp", std::process::id()));
        let part = dir.path().join("part-0000.parquet");
        for path in [&dead, &ours, &part] {
            std::fs::write(path, b"x").unwrap();
        }
        let removed = remove_stale_temps(dir.path()).unwrap();
        if Path::new("/proc/self").exists() {
            assert_eq!(removed, 1);
            assert!(!dead.exists());
        }
        assert!(ours.exists() && part.exists());
    }

    #[test]
    fn the_temporary_files_being_written_are_removed_on_a_stop() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("part-0000.parquet");
        let (started, stop) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|s| {
            let writer = s.spawn(|| {
                write_atomic(&target, |mut file| {
                    file.write_all(b"half").map_err(Error::io("writing", &target))?;
                    started.wait();
                    stop.wait();
                    Ok(())
                })
            });
            started.wait();
            // Mid-write: the temporary file exists, and a stop removes it.
            let temps = || {
                std::fs::read_dir(dir.path())
                    .unwrap()
                    .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".tmp"))
                    .count()
            };
            assert_eq!(temps(), 1);
            // (Only this test's: other tests of this process write files at the same time.)
            assert_eq!(remove_live(|path| path.starts_with(dir.path())), 1);
            assert_eq!(temps(), 0);
            stop.wait();
            // The rename then fails: nothing half-written takes the part's place.
            assert!(writer.join().unwrap().is_err());
        });
        assert!(!target.exists());
    }
}
