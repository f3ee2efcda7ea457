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

/// The size of the global thread pool, and why it is not what was asked, when it is not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sized {
    /// Threads of the pool.
    pub threads: usize,
    /// What was asked and why it was cut, for the run to say (a number of threads above the
    /// cores this process may use only costs memory and start-up: 100,000 once took a no-op
    /// stage eleven minutes and 2.4 GB before it aborted).
    pub note: Option<String>,
}

/// The cores this process may use (its CPU affinity and quota, as the standard library sees
/// them).
pub fn available() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The threads to use: the first of `threads` (`--threads`), `SLURM_CPUS_PER_TASK` and
/// `RAYON_NUM_THREADS` that is set and above 0, at most `cores`; none of them: `None` (rayon's
/// default, every core). With the note of [`Sized`] when the ask was cut.
pub fn plan(
    threads: Option<usize>,
    env: impl Fn(&str) -> Option<String>,
    cores: usize,
) -> (Option<usize>, Option<String>) {
    let from_env = |name: &'static str| {
        env(name).and_then(|v| v.trim().parse::<usize>().ok()).filter(|&n| n > 0).map(|n| (n, name))
    };
    let asked = threads
        .filter(|&n| n > 0)
        .map(|n| (n, "--threads"))
        .or_else(|| from_env("SLURM_CPUS_PER_TASK"))
        .or_else(|| from_env("RAYON_NUM_THREADS"));
    match asked {
        None => (None, None),
        Some((n, _)) if n <= cores => (Some(n), None),
        Some((n, source)) => (
            Some(cores),
            Some(format!(
                "{source} asks for {n} threads, more than the {cores} cores this process may use: using {cores}"
            )),
        ),
    }
}

/// Sizes the global thread pool ([`plan`]: `--threads`, else the CPUs of the Slurm task this runs
/// in, else `RAYON_NUM_THREADS`, at most the cores available; else every core). Call it once,
/// before any parallel work (the binaries do, from `--threads`); afterwards the pool cannot
/// change size, and asking for another size is an error.
pub fn init(threads: Option<usize>) -> Result<Sized> {
    let (threads, note) = plan(threads, |name| std::env::var(name).ok(), available());
    let Some(threads) = threads else {
        // rayon would read RAYON_NUM_THREADS itself; an unusable value is left to its default.
        match rayon::ThreadPoolBuilder::new().num_threads(available()).build_global() {
            Ok(()) | Err(_) => return Ok(Sized { threads: count(), note }),
        }
    };
    match rayon::ThreadPoolBuilder::new().num_threads(threads).build_global() {
        Ok(()) => Ok(Sized { threads, note }),
        Err(_) if count() == threads => Ok(Sized { threads, note }),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn an_ask_above_the_cores_is_cut_to_them_and_said() {
        let (threads, note) = plan(None, env(&[("SLURM_CPUS_PER_TASK", "100000")]), 2);
        assert_eq!(threads, Some(2));
        assert_eq!(
            note.as_deref(),
            Some("SLURM_CPUS_PER_TASK asks for 100000 threads, more than the 2 cores this process may use: using 2")
        );
        let (threads, note) = plan(Some(3000), env(&[]), 8);
        assert_eq!(threads, Some(8));
        assert!(note.is_some_and(|n| n.starts_with("--threads asks for 3000")));
        let (threads, note) = plan(None, env(&[("RAYON_NUM_THREADS", "64")]), 4);
        assert_eq!((threads, note.is_some()), (Some(4), true));
    }

    #[test]
    fn an_ask_within_the_cores_is_kept_in_order_of_precedence() {
        let vars = [("SLURM_CPUS_PER_TASK", "3"), ("RAYON_NUM_THREADS", "2")];
        assert_eq!(plan(Some(1), env(&vars), 4), (Some(1), None));
        assert_eq!(plan(None, env(&vars), 4), (Some(3), None));
        assert_eq!(plan(Some(0), env(&[("RAYON_NUM_THREADS", "2")]), 4), (Some(2), None));
        assert_eq!(plan(None, env(&[("SLURM_CPUS_PER_TASK", "x"), ("RAYON_NUM_THREADS", "0")]), 4), (None, None));
    }
}
