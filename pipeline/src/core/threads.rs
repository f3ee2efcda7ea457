//! How many threads parallel work uses. Every rayon pool, async runtime and DataFusion session
//! of the pipeline sizes itself from [`count`], which is the size of rayon's global pool: every
//! core of the machine unless `--threads` (`FLEXSTRUCT_THREADS`), a Slurm task's
//! `SLURM_CPUS_PER_TASK` or rayon's own `RAYON_NUM_THREADS` says otherwise. Nothing is
//! hard-coded, so the same binary uses 64 cores on a 64-core node and the cores it was given in a
//! scheduler's task (Slurm does not always confine a task to its CPUs, so its count is read).

use super::error::{Error, Result};

/// The number of threads parallel work uses.
pub fn count() -> usize {
    rayon::current_num_threads().max(1)
}

/// Sizes the global thread pool: `threads` when given (and not 0), else the CPUs of the Slurm
/// task this runs in (`SLURM_CPUS_PER_TASK`), else rayon's default. Call it once, before any
/// parallel work (the binaries do, from `--threads`); afterwards the pool cannot change size, and
/// asking for another size is an error.
pub fn init(threads: Option<usize>) -> Result<usize> {
    let slurm = || std::env::var("SLURM_CPUS_PER_TASK").ok().and_then(|v| v.trim().parse::<usize>().ok());
    let Some(threads) = threads.filter(|&n| n > 0).or_else(slurm).filter(|&n| n > 0) else { return Ok(count()) };
    match rayon::ThreadPoolBuilder::new().num_threads(threads).build_global() {
        Ok(()) => Ok(threads),
        Err(_) if count() == threads => Ok(threads),
        Err(e) => {
            Err(Error::Runtime { what: "the thread pool (it was started with another size)", source: Box::new(e) })
        }
    }
}

/// A multi-threaded tokio runtime with [`count`] workers, for network requests and DataFusion.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(count())
        .enable_all()
        .build()
        .map_err(|e| Error::Runtime { what: "the async runtime", source: Box::new(e) })
}
