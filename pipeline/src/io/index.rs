//! The index folder: one sub-folder per table, each a dataset of Parquet part files.
//!
//! Per-document tables are bucketed: the rows of a document live in the part file of its bucket
//! (`<table>/part-0007.parquet`, bucket = stable hash of the doc_id mod the index's bucket count).
//! Every per-document stage reads bucket b of its input and writes bucket b of its output, so a
//! changed document rewrites one small file, a shard job (`--shard K/N`, N dividing the bucket
//! count) owns whole buckets and never writes a file another shard writes, and reading one
//! document's rows opens one file.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use flexstruct_schemas::Table;
use serde::{Deserialize, Serialize};

use crate::core::ids::doc_hash;
use crate::core::{Error, IndexProblem, Result};

/// Name of the settings file at the index root.
pub const SETTINGS_FILE: &str = "index.json";

/// The `[index]` section: settings of a new index folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct IndexConfig {
    /// Document buckets per per-document table, fixed when the index is created (default
    /// [`DEFAULT_BUCKETS`]); an existing index keeps its own. A shard count given with
    /// `--shard K/N` must divide it: pick a power of two at least as large as the largest number
    /// of parallel jobs you will run.
    pub buckets: Option<u32>,
}

impl IndexConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        if self.buckets == Some(0) {
            return Err(Error::config("index.buckets", "must be at least 1"));
        }
        Ok(())
    }
}

/// Buckets of a new index when the configuration does not say.
pub const DEFAULT_BUCKETS: u32 = 64;

/// Settings fixed when an index is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexSettings {
    /// Number of document buckets (part files per per-document table).
    pub buckets: u32,
}

/// An index folder.
#[derive(Debug, Clone)]
pub struct Index {
    root: PathBuf,
    settings: IndexSettings,
}

impl Index {
    /// Opens the index at `root`, creating it with `buckets` buckets (default
    /// [`DEFAULT_BUCKETS`]) if it does not exist yet. An existing index keeps its
    /// bucket count; asking for another one is an error.
    pub fn open_or_create(root: &Path, buckets: Option<u32>) -> Result<Index> {
        if root.join(SETTINGS_FILE).exists() {
            let index = Index::open(root)?;
            if let Some(buckets) = buckets.filter(|&b| b != index.settings.buckets) {
                return Err(Error::index(
                    root,
                    IndexProblem::BucketsFixed { created: index.settings.buckets, asked: buckets },
                ));
            }
            return Ok(index);
        }
        let buckets = buckets.unwrap_or(DEFAULT_BUCKETS);
        IndexConfig { buckets: Some(buckets) }.validate()?;
        std::fs::create_dir_all(root).map_err(Error::io("creating the index folder", root))?;
        let settings = IndexSettings { buckets };
        let json = serde_json::to_vec_pretty(&settings)?;
        super::files::write_file_atomic(&root.join(SETTINGS_FILE), &json)?;
        Ok(Index { root: root.to_owned(), settings })
    }

    /// Opens an existing index.
    pub fn open(root: &Path) -> Result<Index> {
        let path = root.join(SETTINGS_FILE);
        let bytes = std::fs::read(&path).map_err(|e| Error::index(root, IndexProblem::NotAnIndex(e)))?;
        let settings: IndexSettings =
            serde_json::from_slice(&bytes).map_err(|e| Error::index(root, IndexProblem::Damaged(e)))?;
        Ok(Index { root: root.to_owned(), settings })
    }

    /// The index root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The settings fixed at creation.
    pub fn settings(&self) -> IndexSettings {
        self.settings
    }

    /// Folder of a table.
    pub fn table_dir(&self, table: Table) -> PathBuf {
        self.root.join(table.dir())
    }

    /// The one part file of a merged `kb/` table.
    pub fn kb_part(&self, table: Table) -> PathBuf {
        self.table_dir(table).join("part-0000.parquet")
    }

    /// Bucket of a document.
    pub fn bucket_of(&self, doc_id: &str) -> u32 {
        (doc_hash(doc_id) % u64::from(self.settings.buckets)) as u32
    }

    /// Part file of a bucket of a per-document table.
    pub fn bucket_path(&self, table: Table, bucket: u32) -> PathBuf {
        self.table_dir(table).join(format!("part-{bucket:04}.parquet"))
    }

    /// Bucket number of a per-document part file name, if it is one.
    pub fn bucket_of_path(path: &Path) -> Option<u32> {
        let name = path.file_name()?.to_str()?;
        name.strip_prefix("part-")?.strip_suffix(".parquet")?.parse().ok()
    }

    /// Part files of a table, sorted by name; hidden and temporary files are not part of it.
    pub fn parts(&self, table: Table) -> Result<Vec<PathBuf>> {
        let dir = self.table_dir(table);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("listing the table folder", dir)(e)),
        };
        let mut parts = Vec::new();
        for entry in entries {
            let path = entry.map_err(Error::io("listing the table folder", &dir))?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if !name.starts_with('.') && name.ends_with(".parquet") {
                parts.push(path);
            }
        }
        parts.sort();
        Ok(parts)
    }

    /// Removes the temporary files that killed runs left in the index's folders
    /// ([`super::files::remove_stale_temps`]); returns how many.
    pub fn remove_stale_temps(&self) -> Result<usize> {
        let mut removed = super::files::remove_stale_temps(&self.root)?;
        for table in Table::ALL {
            removed += super::files::remove_stale_temps(&self.table_dir(table))?;
        }
        Ok(removed)
    }

    /// Checks that `shard` can run on this index (its N divides the bucket count).
    pub fn check_shard(&self, shard: Shard) -> Result<()> {
        if !self.settings.buckets.is_multiple_of(shard.count) {
            return Err(Error::config(
                "--shard",
                format!(
                    "{shard}: the shard count must divide the index's bucket count ({}) so that every bucket belongs \
                     to exactly one shard",
                    self.settings.buckets
                ),
            ));
        }
        Ok(())
    }

    /// Buckets owned by `shard`.
    pub fn shard_buckets(&self, shard: Shard) -> impl Iterator<Item = u32> + '_ {
        (0..self.settings.buckets).filter(move |b| shard.owns_bucket(*b))
    }
}

/// A slice of the documents: those whose stable hash mod `count` equals `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// K in K/N, 0-based.
    pub index: u32,
    /// N in K/N.
    pub count: u32,
}

impl Shard {
    /// The whole index.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// Whether the document belongs to this shard.
    pub fn owns_doc(self, doc_id: &str) -> bool {
        doc_hash(doc_id) % u64::from(self.count) == u64::from(self.index)
    }

    /// Whether the bucket belongs to this shard (valid when `count` divides the bucket count).
    pub fn owns_bucket(self, bucket: u32) -> bool {
        bucket % self.count == self.index
    }

    /// Short tag used in file names: `all` or `3of8`.
    pub fn tag(self) -> String {
        if self == Shard::ALL { "all".into() } else { format!("{}of{}", self.index, self.count) }
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// The shard of the job this runs in, from the scheduler's environment: a Slurm array task
    /// (`SLURM_ARRAY_TASK_ID` of `SLURM_ARRAY_TASK_COUNT`, ids counted from
    /// `SLURM_ARRAY_TASK_MIN` in steps of `SLURM_ARRAY_TASK_STEP`: the tasks of `--array=0-6:2`
    /// are shards 0 to 3 of 4), else, when `count` is given, a Kubernetes Indexed Job
    /// (`JOB_COMPLETION_INDEX`). A variable that is set must be a whole number: a typo is named,
    /// never taken for its absence.
    pub fn from_scheduler(count: Option<u32>, env: impl Fn(&str) -> Option<String>) -> Result<Shard, String> {
        let number = |name: &str| -> Result<Option<u32>, String> {
            match env(name) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse::<u32>()
                    .map(Some)
                    .map_err(|_| format!("--shard auto: {name}=`{v}` is not a whole number")),
            }
        };
        let (index, n) = if let Some(id) = number("SLURM_ARRAY_TASK_ID")? {
            let min = number("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
            let step = number("SLURM_ARRAY_TASK_STEP")?.unwrap_or(1).max(1);
            let offset = id
                .checked_sub(min)
                .ok_or_else(|| format!("--shard auto: SLURM_ARRAY_TASK_ID {id} is below SLURM_ARRAY_TASK_MIN {min}"))?;
            if offset % step != 0 {
                return Err(format!("--shard auto: task {id} is not one of the array's ({min}, {min}+{step}, …)"));
            }
            let n = match (count, number("SLURM_ARRAY_TASK_COUNT")?, number("SLURM_ARRAY_TASK_MAX")?) {
                (Some(n), _, _) | (None, Some(n), _) => Some(n),
                (None, None, max) => max.map(|max| max.saturating_sub(min) / step + 1),
            };
            (offset / step, n)
        } else if let Some(index) = number("JOB_COMPLETION_INDEX")? {
            (index, count)
        } else {
            return Err("--shard auto: not in a Slurm array task (SLURM_ARRAY_TASK_ID) nor a Kubernetes Indexed \
                        Job (JOB_COMPLETION_INDEX)"
                .into());
        };
        match n {
            None => Err("--shard auto: the shard count is unknown; give it as auto/N".into()),
            Some(count) if index < count => Ok(Shard { index, count }),
            Some(count) => Err(format!("--shard auto: task {index} is not below the shard count {count}")),
        }
    }
}

impl FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(rest) = s.strip_prefix("auto") {
            let count = match rest.strip_prefix('/') {
                Some(n) => Some(
                    n.trim()
                        .parse::<u32>()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| format!("invalid shard `{s}`: expected auto or auto/N with N > 0"))?,
                ),
                None if rest.is_empty() => None,
                None => return Err(format!("invalid shard `{s}`: expected auto or auto/N")),
            };
            return Shard::from_scheduler(count, |name| std::env::var(name).ok());
        }
        let bad = || format!("invalid shard `{s}`: expected K/N with 0 <= K < N (e.g. 0/4), auto or auto/N");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u32 = k.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::error::chain_message;

    #[test]
    fn shards_parse_and_partition_buckets() {
        assert_eq!("2/4".parse::<Shard>().unwrap(), Shard { index: 2, count: 4 });
        for bad in ["4/4", "1", "a/2", "0/0", "-1/3"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open_or_create(dir.path(), Some(8)).unwrap();
        index.check_shard("1/3".parse().unwrap()).unwrap_err();
        let shard: Shard = "1/4".parse().unwrap();
        assert_eq!(index.shard_buckets(shard).collect::<Vec<_>>(), [1, 5]);
        for i in 0..200 {
            let id = format!("doc-{i}");
            assert_eq!(shard.owns_doc(&id), shard.owns_bucket(index.bucket_of(&id)));
        }
    }

    #[test]
    fn the_shard_of_a_scheduler_task_comes_from_its_environment() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
        };
        let slurm = env(&[("SLURM_ARRAY_TASK_ID", "3"), ("SLURM_ARRAY_TASK_COUNT", "4")]);
        assert_eq!(Shard::from_scheduler(None, slurm), Ok(Shard { index: 3, count: 4 }));
        // An array numbered 1-4: ids from the minimum, count from the range.
        let from_one =
            env(&[("SLURM_ARRAY_TASK_ID", "1"), ("SLURM_ARRAY_TASK_MIN", "1"), ("SLURM_ARRAY_TASK_MAX", "4")]);
        assert_eq!(Shard::from_scheduler(None, from_one), Ok(Shard { index: 0, count: 4 }));
        let k8s = env(&[("JOB_COMPLETION_INDEX", "2")]);
        assert_eq!(Shard::from_scheduler(Some(8), k8s), Ok(Shard { index: 2, count: 8 }));
        assert!(Shard::from_scheduler(None, k8s).unwrap_err().contains("auto/N"));
        assert!(Shard::from_scheduler(None, env(&[])).unwrap_err().contains("not in a Slurm array task"));
        let beyond = Shard::from_scheduler(Some(2), env(&[("JOB_COMPLETION_INDEX", "5")])).unwrap_err();
        assert_eq!(beyond, "--shard auto: task 5 is not below the shard count 2");
        // A stepped array (--array=0-6:2): tasks 0, 2, 4, 6 are shards 0 to 3 of 4.
        for (id, shard) in [("0", 0), ("2", 1), ("4", 2), ("6", 3)] {
            let vars = [("SLURM_ARRAY_TASK_ID", id), ("SLURM_ARRAY_TASK_MIN", "0"), ("SLURM_ARRAY_TASK_MAX", "6")];
            let stepped = |name: &str| {
                vars.iter()
                    .chain(&[("SLURM_ARRAY_TASK_STEP", "2")])
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            };
            assert_eq!(Shard::from_scheduler(None, stepped), Ok(Shard { index: shard, count: 4 }), "task {id}");
        }
        // Set but not a number: named, not taken for unset.
        let typo = Shard::from_scheduler(None, env(&[("SLURM_ARRAY_TASK_ID", "3x")])).unwrap_err();
        assert_eq!(typo, "--shard auto: SLURM_ARRAY_TASK_ID=`3x` is not a whole number");
        let min =
            env(&[("SLURM_ARRAY_TASK_ID", "3"), ("SLURM_ARRAY_TASK_MIN", "abc"), ("SLURM_ARRAY_TASK_COUNT", "4")]);
        assert!(Shard::from_scheduler(None, min).unwrap_err().contains("SLURM_ARRAY_TASK_MIN=`abc`"));
        let below =
            env(&[("SLURM_ARRAY_TASK_ID", "0"), ("SLURM_ARRAY_TASK_MIN", "1"), ("SLURM_ARRAY_TASK_COUNT", "4")]);
        assert!(Shard::from_scheduler(None, below).unwrap_err().contains("is below SLURM_ARRAY_TASK_MIN 1"));
        assert!("auto/0".parse::<Shard>().is_err() && "autox".parse::<Shard>().is_err());
    }

    #[test]
    fn bucket_count_is_fixed_at_creation() {
        let dir = tempfile::tempdir().unwrap();
        Index::open_or_create(dir.path(), Some(16)).unwrap();
        assert_eq!(Index::open(dir.path()).unwrap().settings().buckets, 16);
        let err = Index::open_or_create(dir.path(), Some(32)).unwrap_err();
        assert!(chain_message(&err).contains("created with 16 buckets"), "{err}");
        let err = Index::open(&dir.path().join("nope")).unwrap_err();
        assert!(chain_message(&err).contains("not an index folder"), "{err}");
    }
}
