//! Indexes on object storage: `--index s3://bucket/prefix`.
//!
//! A stage run on a remote index works on a *working copy*: it pulls the objects it reads (its
//! shard's buckets of the per-document tables, the small shared tables, `index.json`) into a
//! temporary folder (under `$TMPDIR`, node-local scratch on a cluster), runs exactly as on a local
//! index, and pushes back what it changed, each object as one whole `PUT` — or, above 64 MiB, one
//! multipart upload, which S3 needs beyond 5 GB (a million-fact kb's vector file is 3 GB) — both
//! atomic on object storage (readers see the old object or the new one), removing the objects it
//! removed. Objects stream between the store and the files, so a transfer holds a few parts in
//! memory, not the index. Shards
//! own disjoint buckets and write the log tables (`failures`, `manifest`, `llm_calls`) under keys
//! of their own, so concurrent shards never write one key. A push writes an object only if it is
//! still the version it pulled, and creates one only if none exists (unless with the same bytes):
//! conditional `PUT`s (`If-Match` with the pulled ETag, `If-None-Match: *`), so that no other
//! run's write can land between a check and the write; multipart uploads and removals, which
//! object_store cannot make conditional, are checked just before. A concurrent run that changed
//! an object is reported as a conflict and nothing of that object is overwritten; a rerun redoes
//! the work.
//!
//! The kb is the exception: its files are objects that are never overwritten, made visible as a
//! whole by one object written last, the commit record ([`super::commit`]); a working copy holds
//! the kb as the record names it, and its push writes the kb's new objects, then the record.
//!
//! The query stage pulls only `kb/` and `documents`; SQL reads the objects in place
//! (DataFusion over the same store, see [`super::sql::IndexSql::open_remote`]).
//!
//! Credentials, region and endpoint come from the standard AWS environment variables
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT`,
//! `AWS_ALLOW_HTTP`, …) through `object_store`'s own reader of them; they are never logged or
//! written anywhere.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use object_store::path::{Path as Key, PathPart};
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::errors::ParquetError;
use parquet::file::metadata::ParquetMetaDataReader;
use sha2::{Digest, Sha256};

use super::commit::{
    COMMIT_RECORD, Commit, DOCUMENTS_PREFIX, KbObject, STAGED_PREFIX, Staged, is_content_named, is_record,
};
use super::index::{Index, SETTINGS_FILE, Shard};
use crate::core::{Error, IndexProblem, Result};
use flexstruct_schemas::Table;

/// Objects of the LLM response cache start with this.
pub const CACHE_PREFIX: &str = "llm_cache/";

/// Objects transferred at once.
const CONCURRENCY: usize = 16;

/// How objects are uploaded: whole up to `multipart_above` bytes, in parts of `part_bytes` beyond.
#[derive(Debug, Clone, Copy)]
struct Upload {
    multipart_above: u64,
    part_bytes: usize,
}

/// Up to 64 MiB in one `PUT`, larger objects in 16 MiB parts (S3 allows 5 MiB to 5 GiB a part
/// and 5 GiB a `PUT`).
const UPLOAD: Upload = Upload { multipart_above: 64 << 20, part_bytes: 16 << 20 };

/// Parts of one object in flight at once.
const PARTS_IN_FLIGHT: usize = 2;

/// Pulls made before giving up when objects vanish under one (a merge removed the kb being read).
const PULL_ATTEMPTS: usize = 3;

/// How old an object that no record names must be before a commit removes it: time for readers
/// still pulling the kb it belonged to, and for a merge still uploading its own.
const GARBAGE_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// The SHA-256 and length of a file, read in blocks.
fn file_digest(path: &Path) -> Result<([u8; 32], u64)> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(Error::io("reading the working copy", path))?;
    let (mut hasher, mut buf, mut length) = (Sha256::new(), vec![0u8; 1 << 20], 0u64);
    loop {
        let n = file.read(&mut buf).map_err(Error::io("reading the working copy", path))?;
        if n == 0 {
            return Ok((hasher.finalize().into(), length));
        }
        hasher.update(&buf[..n]);
        length += n as u64;
    }
}

/// Where an index lives: a local folder, or a URL of object storage (`s3://bucket/prefix`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexLocation {
    /// A folder of this machine.
    Local(PathBuf),
    /// A prefix of an object store.
    Remote(url::Url),
}

impl FromStr for IndexLocation {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let Some((scheme, _)) = s.split_once("://") else { return Ok(IndexLocation::Local(PathBuf::from(s))) };
        let url = url::Url::parse(s).map_err(|e| format!("invalid index URL `{s}`: {e}"))?;
        match scheme {
            "file" => url
                .to_file_path()
                .map(IndexLocation::Local)
                .map_err(|()| format!("invalid index URL `{s}`: not a local path")),
            "s3" | "s3a" if url.host_str().is_some_and(|h| !h.is_empty()) => Ok(IndexLocation::Remote(url)),
            "s3" | "s3a" => Err(format!("invalid index URL `{s}`: expected s3://bucket/prefix")),
            other => Err(format!(
                "index URL `{s}`: the `{other}` scheme is not supported (a local folder, file://… or s3://bucket/prefix)"
            )),
        }
    }
}

impl fmt::Display for IndexLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexLocation::Local(path) => write!(f, "{}", path.display()),
            IndexLocation::Remote(url) => write!(f, "{url}"),
        }
    }
}

impl IndexLocation {
    /// The index as a folder of this machine: a local index as it is; a remote one as a new
    /// working copy of what `selection` names (which must exist, unless `create`).
    pub fn open_local(&self, selection: Selection<'_>, create: bool) -> Result<LocalIndex> {
        Ok(match self {
            IndexLocation::Local(path) => LocalIndex { path: path.clone(), copy: None },
            IndexLocation::Remote(url) => {
                let copy = RemoteIndex::open(url)?.pull(selection, create)?;
                LocalIndex { path: copy.path().to_owned(), copy: Some(copy) }
            }
        })
    }
}

/// An index as a folder of this machine ([`IndexLocation::open_local`]): the index itself, or
/// the working copy of a remote one (removed when this is dropped).
#[derive(Debug)]
pub struct LocalIndex {
    path: PathBuf,
    copy: Option<WorkingCopy>,
}

impl LocalIndex {
    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The working copy, when the index is remote.
    pub fn copy(&self) -> Option<&WorkingCopy> {
        self.copy.as_ref()
    }
}

/// What a working copy pulls of a remote index.
#[derive(Debug, Clone, Copy)]
pub enum Selection<'a> {
    /// Every object (the merge, which reads every table and rewrites `kb/`).
    Everything,
    /// What a stage run by `shard` reads: the shard's buckets of the per-document tables, every
    /// object outside the tables (`index.json`, the LLM response cache) and the log tables;
    /// no `kb/`.
    Shard(Shard),
    /// `index.json` and these tables, whole.
    Tables(&'a [Table]),
    /// What a merge run by `shard` reads and writes: [`Selection::Shard`] and the shard's
    /// buckets of the kb tables.
    MergeShard(Shard),
}

impl Selection<'_> {
    fn wants(&self, relative: &str) -> bool {
        let table = table_of(relative);
        match (self, table) {
            (Selection::Everything, _) => true,
            (Selection::Shard(_), None) => true,
            (Selection::Shard(shard), Some(table)) if table.is_per_document() => {
                Index::bucket_of_path(Path::new(relative)).is_some_and(|b| shard.owns_bucket(b))
            }
            (Selection::Shard(_), Some(table)) => !table.is_kb(),
            (Selection::MergeShard(shard), Some(table)) if table.is_kb() && !table.is_whole_kb() => {
                Index::bucket_of_path(Path::new(relative)).is_some_and(|b| shard.owns_bucket(b))
            }
            (Selection::MergeShard(shard), _) => Selection::Shard(*shard).wants(relative),
            (Selection::Tables(_), None) => relative == SETTINGS_FILE,
            (Selection::Tables(tables), Some(table)) => tables.contains(&table),
        }
    }

    /// How a run pulling this sees the index.
    fn view(&self) -> View {
        match self {
            Selection::Everything | Selection::MergeShard(_) => View::Merge,
            Selection::Shard(_) => View::Live,
            Selection::Tables(_) => View::Reader,
        }
    }

    /// The tables whose files in the commit record a push of this copy replaces by its own.
    fn committed_tables(&self) -> Vec<Table> {
        let committed = |t: &Table| t.is_kb() || *t == Table::Documents;
        match self {
            Selection::Everything => Table::ALL.into_iter().filter(committed).collect(),
            Selection::Tables(tables) => tables.iter().copied().filter(committed).collect(),
            Selection::Shard(_) | Selection::MergeShard(_) => Vec::new(),
        }
    }
}

/// How a run sees an index on object storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum View {
    /// The tables as they are, the kb as committed (stages before the merge, SQL).
    Live,
    /// Also what sharded merges staged (a merge, and status, which says what a merge would do).
    Merge,
    /// The kb as committed and the `documents` it was built from (queries, the service, the
    /// path index).
    Reader,
}

/// The table whose folder holds the object at `relative` (a path below the index root).
fn table_of(relative: &str) -> Option<Table> {
    Table::ALL.into_iter().find(|t| relative.strip_prefix(t.dir()).is_some_and(|rest| rest.starts_with('/')))
}

/// An index under a prefix of an object store.
#[derive(Debug, Clone)]
pub struct RemoteIndex {
    url: url::Url,
    store: Arc<dyn ObjectStore>,
    prefix: Key,
}

/// A version of an object as pulled.
#[derive(Debug, Clone)]
struct Pulled {
    digest: [u8; 32],
    e_tag: Option<String>,
    /// The object it came from, below the index root (for a kb file, not the file's own name).
    key: String,
    bytes: u64,
}

/// The objects of an index as a run sees them: by the path of the file each holds, the kb's
/// as its commit record (and, for a merge, the staged records) name them.
#[derive(Debug)]
struct Snapshot {
    files: BTreeMap<String, ObjectMeta>,
    kb: KbBase,
}

/// The kb records a snapshot was taken from.
#[derive(Debug, Clone, Default)]
struct KbBase {
    /// The commit record and its ETag, when there is one.
    commit: Option<(Commit, Option<String>)>,
    /// The staged records read over it, with their ETags.
    staged: Vec<(String, Option<String>)>,
}

impl KbBase {
    fn commit(&self) -> Option<&Commit> {
        self.commit.as_ref().map(|(c, _)| c)
    }
}

impl RemoteIndex {
    /// The index at `url` (`s3://bucket/prefix`), with the S3 client configured from the AWS
    /// environment variables.
    pub fn open(url: &url::Url) -> Result<RemoteIndex> {
        let store = object_store::aws::AmazonS3Builder::from_env()
            .with_url(url.as_str())
            .build()
            .map_err(Error::store("configuring the S3 client (from the AWS_* environment variables)", url))?;
        RemoteIndex::with_store(url.clone(), Arc::new(store))
    }

    /// The index at `url` in `store` (tests give an in-memory store).
    pub fn with_store(url: url::Url, store: Arc<dyn ObjectStore>) -> Result<RemoteIndex> {
        let prefix = Key::from_url_path(url.path()).map_err(Error::store("reading the prefix of", &url))?;
        Ok(RemoteIndex { url, store, prefix })
    }

    /// The index's URL.
    pub fn url(&self) -> &url::Url {
        &self.url
    }

    /// The object store (for DataFusion sessions reading the index in place).
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The URL of a table's folder (`s3://bucket/prefix/chunks/`).
    pub fn table_url(&self, table: Table) -> String {
        let key = self.key(&format!("{}/", table.dir()));
        format!("{}://{}/{key}/", self.url.scheme(), self.url.host_str().unwrap_or_default())
    }

    /// The URL of the store itself (`s3://bucket`), under which DataFusion registers it.
    pub fn store_url(&self) -> String {
        format!("{}://{}", self.url.scheme(), self.url.host_str().unwrap_or_default())
    }

    fn key(&self, relative: &str) -> Key {
        self.prefix.parts().chain(relative.split('/').filter(|p| !p.is_empty()).map(PathPart::from)).collect()
    }

    fn relative(&self, key: &Key) -> Option<String> {
        let parts: Vec<String> = key.prefix_match(&self.prefix)?.map(|p| p.as_ref().to_owned()).collect();
        // Hidden names (temporary files, locks) are never part of an index.
        (!parts.is_empty() && !parts.iter().any(|p| p.starts_with('.'))).then(|| parts.join("/"))
    }

    fn location(&self, relative: &str) -> String {
        format!("{}/{relative}", self.url.as_str().trim_end_matches('/'))
    }

    /// Every object of the index (hidden names excepted), with its path below the index root.
    pub async fn list(&self) -> Result<Vec<(String, ObjectMeta)>> {
        let listed: Vec<ObjectMeta> =
            self.store.list(Some(&self.prefix)).try_collect().await.map_err(Error::store("listing", &self.url))?;
        let mut objects: Vec<(String, ObjectMeta)> =
            listed.into_iter().filter_map(|m| Some((self.relative(&m.location)?, m))).collect();
        objects.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(objects)
    }

    /// The index as a run sees it: every object outside the kb as it is listed, and the kb's
    /// files as the commit record names them (an index whose kb predates commit records: its
    /// kb objects as they are); for a reader, the documents too, when the record names them;
    /// for a merge, overlaid by the staged records, oldest first.
    async fn snapshot(&self, view: View) -> Result<Snapshot> {
        let objects = self.list().await?;
        let listed: BTreeMap<&str, &ObjectMeta> = objects.iter().map(|(rel, meta)| (rel.as_str(), meta)).collect();
        let commit = match listed.get(COMMIT_RECORD) {
            Some(meta) => Some(self.read_record::<Commit>(COMMIT_RECORD, &meta.location).await?),
            None => None,
        };
        let mut files = BTreeMap::new();
        for (rel, meta) in &objects {
            let committed = is_record(rel) || rel.starts_with(DOCUMENTS_PREFIX);
            if committed || in_kb(rel) && (commit.is_some() || is_content_named(rel)) {
                continue;
            }
            files.insert(rel.clone(), meta.clone());
        }
        let named = |object: &KbObject, by: &str| {
            listed.get(object.key.as_str()).map(|meta| (*meta).clone()).ok_or_else(|| {
                let gone = object_store::Error::NotFound { path: object.key.clone(), source: "not listed".into() };
                Error::store(
                    "reading an object that the kb's record names",
                    format!("{} ({by})", self.location(&object.key)),
                )(gone)
            })
        };
        if let Some((commit, _)) = &commit {
            let is_documents = |file: &str| table_of(file) == Some(Table::Documents);
            let pinned = view == View::Reader && commit.objects.keys().any(|f| is_documents(f));
            if pinned {
                files.retain(|rel, _| !is_documents(rel));
            }
            for (file, object) in commit.objects.iter().filter(|(file, _)| in_kb(file) || pinned) {
                files.insert(file.clone(), named(object, COMMIT_RECORD)?);
            }
        }
        let mut kb = KbBase { commit, staged: Vec::new() };
        if view == View::Merge {
            let mut records: Vec<&(String, ObjectMeta)> =
                objects.iter().filter(|(rel, _)| rel.starts_with(STAGED_PREFIX)).collect();
            records.sort_by_key(|(_, meta)| meta.last_modified);
            for (rel, meta) in records {
                let (record, e_tag) = self.read_record::<Staged>(rel, &meta.location).await?;
                for (file, object) in &record.objects {
                    match object {
                        Some(object) => files.insert(file.clone(), named(object, rel)?),
                        None => files.remove(file),
                    };
                }
                kb.staged.push((rel.clone(), e_tag));
            }
        }
        Ok(Snapshot { files, kb })
    }

    /// Reads a record (JSON) of the kb, with its ETag.
    async fn read_record<T: serde::de::DeserializeOwned>(&self, rel: &str, key: &Key) -> Result<(T, Option<String>)> {
        let object = self.store.get(key).await.map_err(Error::store("reading", self.location(rel)))?;
        let e_tag = object.meta.e_tag.clone();
        let bytes = object.bytes().await.map_err(Error::store("reading", self.location(rel)))?;
        let record = serde_json::from_slice(&bytes).map_err(Error::store(
            "reading the kb's record (damaged: remove it, and run flexstruct-merge to write the kb again)",
            self.location(rel),
        ))?;
        Ok((record, e_tag))
    }

    /// The objects as SQL sees them ([`RemoteIndex::list`], with the kb as committed), by the
    /// path of the file each holds.
    pub async fn files(&self) -> Result<BTreeMap<String, ObjectMeta>> {
        Ok(self.snapshot(View::Live).await?.files)
    }

    /// Fails unless `files` (as [`RemoteIndex::files`] returns them) hold the index's settings.
    pub fn check_exists(&self, files: &BTreeMap<String, ObjectMeta>) -> Result<()> {
        if files.contains_key(SETTINGS_FILE) {
            return Ok(());
        }
        let missing = std::io::Error::new(std::io::ErrorKind::NotFound, format!("no {SETTINGS_FILE}"));
        Err(Error::index(self.url.as_str(), IndexProblem::NotAnIndex(missing)))
    }

    /// The objects holding the part files of `table` among `files` (as [`RemoteIndex::files`]
    /// returns them).
    pub fn parts(files: &BTreeMap<String, ObjectMeta>, table: Table) -> Vec<&ObjectMeta> {
        files
            .iter()
            .filter(|(rel, _)| table_of(rel) == Some(table) && rel.ends_with(".parquet"))
            .map(|(_, meta)| meta)
            .collect()
    }

    /// Pulls the objects `selection` names into a new working copy. Unless `create`, the
    /// index must exist (have its `index.json`). Objects that vanish meanwhile (a merge removed
    /// the kb generation being read) make it start again, a few times.
    pub fn pull(&self, selection: Selection<'_>, create: bool) -> Result<WorkingCopy> {
        let mut attempt = 1;
        loop {
            match self.pull_once(selection, create) {
                Err(e) if attempt < PULL_ATTEMPTS && is_not_found(&e) => attempt += 1,
                pulled => return pulled,
            }
        }
    }

    fn pull_once(&self, selection: Selection<'_>, create: bool) -> Result<WorkingCopy> {
        let dir = tempfile::Builder::new()
            .prefix("flexstruct-index-")
            .tempdir()
            .map_err(Error::io("creating a working copy", std::env::temp_dir()))?;
        let root = dir.path().to_owned();
        let (pulled, kb) = block_on(async {
            let Snapshot { files, kb } = self.snapshot(selection.view()).await?;
            if !create {
                self.check_exists(&files)?;
            }
            let pulled = futures::stream::iter(files.into_iter().filter(|(rel, _)| selection.wants(rel)))
                .map(|(rel, meta)| {
                    let root = &root;
                    async move {
                        let path = root.join(&rel);
                        if let Some(parent) = path.parent() {
                            std::fs::create_dir_all(parent).map_err(Error::io("creating a folder", parent))?;
                        }
                        let mut file =
                            std::fs::File::create(&path).map_err(Error::io("writing the working copy", &path))?;
                        let key = self.relative(&meta.location).unwrap_or_else(|| rel.clone());
                        let digest = self
                            .stream(&key, &meta.location, |chunk| {
                                use std::io::Write;
                                file.write_all(chunk).map_err(Error::io("writing the working copy", &path))
                            })
                            .await?;
                        Ok::<_, Error>((rel, Pulled { digest, e_tag: meta.e_tag, key, bytes: meta.size }))
                    }
                })
                .buffer_unordered(CONCURRENCY)
                .try_collect::<BTreeMap<_, _>>()
                .await?;
            Ok::<_, Error>((pulled, kb))
        })??;
        let writes_kb = match selection {
            Selection::MergeShard(shard) => KbWrites::Stage(shard),
            _ => KbWrites::Commit,
        };
        Ok(WorkingCopy {
            remote: self.clone(),
            dir,
            pulled,
            upload: UPLOAD,
            kb,
            writes_kb,
            committed: selection.committed_tables(),
            grace: GARBAGE_GRACE,
        })
    }

    /// The footer of a part file, read from the end of its object (a few kB, not the rows):
    /// its metadata and Arrow schema.
    pub async fn footer(&self, meta: &ObjectMeta) -> Result<ArrowReaderMetadata> {
        let location = format!("{}://{}/{}", self.url.scheme(), self.url.host_str().unwrap_or_default(), meta.location);
        let size = meta.size;
        let mut want = size.min(64 * 1024);
        loop {
            let bytes = self
                .store
                .get_range(&meta.location, size - want..size)
                .await
                .map_err(Error::store("reading the Parquet footer", &location))?;
            let mut reader = ParquetMetaDataReader::new();
            match reader.try_parse_sized(&bytes, size) {
                Ok(()) => {
                    let metadata = reader.finish().map_err(Error::store("reading the Parquet footer", &location))?;
                    return ArrowReaderMetadata::try_new(Arc::new(metadata), ArrowReaderOptions::default())
                        .map_err(Error::store("reading the Parquet footer", &location));
                }
                Err(ParquetError::NeedMoreData(needed)) if needed as u64 > want && needed as u64 <= size => {
                    want = needed as u64;
                }
                Err(e) => return Err(Error::store("reading the Parquet footer", &location)(e)),
            }
        }
    }

    /// Reads an object chunk by chunk into `each`; returns its SHA-256.
    async fn stream(&self, relative: &str, key: &Key, mut each: impl FnMut(&[u8]) -> Result<()>) -> Result<[u8; 32]> {
        let location = || self.location(relative);
        let object = self.store.get(key).await.map_err(Error::store("reading", location()))?;
        let mut chunks = object.into_stream();
        let mut hasher = Sha256::new();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(Error::store("reading", location()))?;
            hasher.update(&chunk);
            each(&chunk)?;
        }
        Ok(hasher.finalize().into())
    }
}

/// A temporary local copy of (part of) a remote index; [`WorkingCopy::push`] writes back what
/// changed. Dropping it removes the folder.
#[derive(Debug)]
pub struct WorkingCopy {
    remote: RemoteIndex,
    dir: tempfile::TempDir,
    pulled: BTreeMap<String, Pulled>,
    upload: Upload,
    kb: KbBase,
    writes_kb: KbWrites,
    /// The tables whose files in the commit record this copy's push replaces.
    committed: Vec<Table>,
    grace: std::time::Duration,
}

/// How a push makes the kb files it wrote visible.
#[derive(Debug, Clone, Copy)]
enum KbWrites {
    /// In a new commit record (the whole-index merge, the path index).
    Commit,
    /// In the staged record of a task of a sharded merge.
    Stage(Shard),
}

/// What a push wrote and removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pushed {
    /// Objects written.
    pub written: usize,
    /// Bytes written.
    pub bytes: u64,
    /// Of the objects written, those uploaded in parts (larger than 64 MiB).
    pub in_parts: usize,
    /// Objects removed.
    pub removed: usize,
    /// The kb generation the push committed, when it changed the kb.
    pub committed: Option<u64>,
    /// Whether it staged the kb files of a sharded merge's task.
    pub staged: bool,
    /// Objects of earlier kbs removed after the commit.
    pub collected: usize,
    /// Time spent committing: the record written, staged records and earlier kbs' objects
    /// removed (the kb's own objects are written with the tables, before).
    pub committing: std::time::Duration,
}

impl fmt::Display for Pushed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mb = self.bytes as f64 / 1e6;
        write!(f, "wrote {} ({mb:.1} MB; {} in parts), removed {}", self.written, self.in_parts, self.removed)?;
        if let Some(generation) = self.committed {
            write!(f, "; committed kb generation {generation} in {} ms", self.committing.as_millis())?;
            if self.collected > 0 {
                write!(f, " (removed {} objects of earlier kbs)", self.collected)?;
            }
        }
        if self.staged {
            write!(f, "; staged its kb buckets for the whole-index merge")?;
        }
        Ok(())
    }
}

/// Whether `relative` is a file of the kb (committed through its record, not written in place).
fn in_kb(relative: &str) -> bool {
    table_of(relative).is_some_and(Table::is_kb)
}

impl WorkingCopy {
    /// The local folder (open it with [`Index::open`]).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Objects pulled.
    pub fn pulled(&self) -> usize {
        self.pulled.len()
    }

    /// The kb generation the copy was pulled at (none: no commit record yet).
    pub fn generation(&self) -> Option<u64> {
        self.kb.commit().map(|c| c.generation)
    }

    /// Writes every file that is new or changed since the pull as one whole object (a `PUT`, or a
    /// multipart upload for a large one, read from the file part by part), and removes
    /// the objects of pulled files that are gone: the tables first, then `failures`, then
    /// `manifest` (so that a run's record never precedes its rows). An object changed by another
    /// run since the pull is a conflict: it is left as it is and the push fails naming it.
    /// Files of the kb are written as new objects and made visible after the tables by a new
    /// commit record (or, by a task of a sharded merge, its staged record); a commit that
    /// another run's commit preceded is a conflict too.
    pub fn push(&self) -> Result<Pushed> {
        let local = files_below(self.path())?;
        // (path below the root, file, digest, length) of each file to write.
        let mut writes: Vec<(String, &Path, [u8; 32], u64)> = Vec::new();
        let mut digests = BTreeMap::new();
        for (rel, path) in &local {
            let (digest, length) = file_digest(path)?;
            if self.pulled.get(rel).is_none_or(|p| p.digest != digest) {
                writes.push((rel.clone(), path, digest, length));
            }
            digests.insert(rel.clone(), (digest, length));
        }
        let removes: Vec<String> = self.pulled.keys().filter(|rel| !local.contains_key(*rel)).cloned().collect();
        let kb_changed = writes.iter().any(|(rel, ..)| in_kb(rel)) || removes.iter().any(|rel| in_kb(rel));
        // A kb file removed is left out of the next record, not deleted: readers may be reading it.
        let removes: Vec<String> = removes.into_iter().filter(|rel| !in_kb(rel)).collect();
        let phase = |rel: &str| match table_of(rel) {
            Some(Table::Manifest) => 2,
            Some(Table::Failures) => 1,
            _ => 0,
        };
        let mut pushed = Pushed::default();
        block_on(async {
            for step in 0..3 {
                let step_writes: Vec<_> = writes.iter().filter(|(rel, ..)| phase(rel) == step).collect();
                futures::stream::iter(&step_writes)
                    .map(|(rel, path, digest, length)| self.write(rel, path, digest, *length))
                    .buffer_unordered(CONCURRENCY)
                    .try_collect::<Vec<()>>()
                    .await?;
                pushed.written += step_writes.len();
                pushed.bytes += step_writes.iter().map(|(.., length)| length).sum::<u64>();
                pushed.in_parts +=
                    step_writes.iter().filter(|(.., length)| *length > self.upload.multipart_above).count();
                if step == 0 {
                    self.record_kb(&digests, kb_changed, &mut pushed).await?;
                }
                let step_removes: Vec<&String> = removes.iter().filter(|rel| phase(rel) == step).collect();
                futures::stream::iter(&step_removes)
                    .map(|rel| self.remove(rel))
                    .buffer_unordered(CONCURRENCY)
                    .try_collect::<Vec<()>>()
                    .await?;
                pushed.removed += step_removes.len();
            }
            Ok::<_, Error>(())
        })??;
        Ok(pushed)
    }

    /// Makes the kb the copy now holds visible (`files`: every file's digest and length): a
    /// new commit record naming its objects, if that changes the kb, or, for a task of a sharded
    /// merge whose kb files changed (`kb_changed`), its staged record.
    async fn record_kb(
        &self,
        files: &BTreeMap<String, ([u8; 32], u64)>,
        kb_changed: bool,
        pushed: &mut Pushed,
    ) -> Result<()> {
        let remote = &self.remote;
        // The object of a file: the one it was pulled from if that is named by its content, a
        // new one otherwise.
        let object = |rel: &str, digest: &[u8; 32], length: u64| match self.pulled.get(rel) {
            Some(p) if &p.digest == digest && p.key != rel || in_kb(rel) && p.digest == *digest => {
                KbObject { key: p.key.clone(), sha256: hex::encode(digest), bytes: p.bytes }
            }
            _ => KbObject::new(rel, digest, length),
        };
        match self.writes_kb {
            KbWrites::Stage(_) if !kb_changed => {}
            KbWrites::Stage(shard) => {
                let mut staged: BTreeMap<String, Option<KbObject>> = files
                    .iter()
                    .filter(|(rel, _)| in_kb(rel))
                    .map(|(rel, (digest, length))| (rel.clone(), Some(object(rel, digest, *length))))
                    .collect();
                for rel in self.pulled.keys().filter(|rel| in_kb(rel) && !files.contains_key(*rel)) {
                    staged.insert(rel.clone(), None);
                }
                let rel = Staged::location(shard);
                let record = record_bytes(&Staged::new(shard, staged))?;
                remote
                    .store
                    .put(&remote.key(&rel), record)
                    .await
                    .map_err(Error::store("writing", remote.location(&rel)))?;
                pushed.staged = true;
            }
            KbWrites::Commit => {
                let before = self.kb.commit();
                let replaced = |rel: &str| table_of(rel).is_some_and(|t| self.committed.contains(&t));
                let mut objects: BTreeMap<String, KbObject> = before.map(|c| c.objects.clone()).unwrap_or_default();
                objects.retain(|rel, _| !replaced(rel));
                for (rel, (digest, length)) in files.iter().filter(|(rel, _)| replaced(rel)) {
                    objects.insert(rel.clone(), object(rel, digest, *length));
                }
                // Without a record, only a run that wrote the kb commits it (a reader of a kb
                // merged before commit records never does).
                if !kb_changed && before.is_none_or(|b| b.objects == objects) {
                    return Ok(());
                }
                // The kb's own files were written with the tables; the documents parts it was
                // built from are kept as objects of the kb from here.
                for (rel, object) in objects.iter().filter(|(rel, _)| !in_kb(rel) && replaced(rel)) {
                    if before.and_then(|b| b.objects.get(rel)).is_none_or(|o| o.key != object.key) {
                        self.write_object(object, &self.path().join(rel)).await?;
                        pushed.written += 1;
                        pushed.bytes += object.bytes;
                    }
                }
                let started = std::time::Instant::now();
                let uncommitted =
                    self.pulled.iter().filter(|(rel, _)| in_kb(rel)).map(|(_, p)| p.key.clone()).collect();
                let commit = Commit::next(before, uncommitted, objects);
                pushed.committed = Some(self.commit(&commit).await?);
                // What sharded merges staged is committed now.
                for (rel, e_tag) in &self.kb.staged {
                    let key = remote.key(rel);
                    if remote.store.head(&key).await.is_ok_and(|meta| &meta.e_tag == e_tag) {
                        let _ = remote.store.delete(&key).await;
                    }
                }
                pushed.collected = self.collect_garbage(&commit).await;
                pushed.committing = started.elapsed();
            }
        }
        Ok(())
    }

    /// Writes the commit record `commit` if the record is still the one pulled (created if
    /// there was none); returns the generation committed. Another run's commit since the pull
    /// is a conflict, unless it committed this very kb.
    async fn commit(&self, commit: &Commit) -> Result<u64> {
        let remote = &self.remote;
        let (key, location) = (remote.key(COMMIT_RECORD), remote.location(COMMIT_RECORD));
        let bytes = record_bytes(commit)?;
        let mode = match &self.kb.commit {
            None => PutMode::Create,
            Some((_, Some(e_tag))) => PutMode::Update(UpdateVersion { e_tag: Some(e_tag.clone()), version: None }),
            Some((_, None)) => PutMode::Overwrite,
        };
        let before = self.generation();
        let refused = match mode {
            // A store without ETags or conditions: checked just before.
            PutMode::Overwrite => self.current_commit().await?.map(|c| c.generation) != before,
            mode => match remote.store.put_opts(&key, bytes.clone(), PutOptions::from(mode)).await {
                Ok(_) => return Ok(commit.generation),
                Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => true,
                Err(object_store::Error::NotImplemented { .. }) => {
                    self.current_commit().await?.map(|c| c.generation) != before
                }
                Err(e) => return Err(Error::store("writing", location)(e)),
            },
        };
        if !refused {
            remote.store.put(&key, bytes).await.map_err(Error::store("writing", &location))?;
            return Ok(commit.generation);
        }
        match self.current_commit().await? {
            Some(current) if current.objects == commit.objects => Ok(current.generation),
            current => Err(Error::Store {
                op: "committing the kb",
                location,
                source: format!(
                    "another run committed kb generation {} while this one ran (this run's kb was not committed, \
                     and the committed one is whole; run this stage again to build on it)",
                    current.map_or(0, |c| c.generation)
                )
                .into(),
            }),
        }
    }

    /// The commit record as the store holds it now.
    async fn current_commit(&self) -> Result<Option<Commit>> {
        let key = self.remote.key(COMMIT_RECORD);
        match self.remote.read_record::<Commit>(COMMIT_RECORD, &key).await {
            Ok((commit, _)) => Ok(Some(commit)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Removes the kb objects that neither `commit` nor the record it replaced nor any staged
    /// record names, once older than the grace period before the commit; returns how many. A
    /// failure leaves them for a later commit.
    async fn collect_garbage(&self, commit: &Commit) -> usize {
        let remote = &self.remote;
        let Ok(record) = remote.store.head(&remote.key(COMMIT_RECORD)).await else { return 0 };
        let Some(cutoff) = chrono::Duration::from_std(self.grace).ok().map(|g| record.last_modified - g) else {
            return 0;
        };
        let Ok(objects) = remote.list().await else { return 0 };
        let mut keep: std::collections::HashSet<String> = commit.keeps().map(str::to_owned).collect();
        for (rel, meta) in objects.iter().filter(|(rel, _)| rel.starts_with(STAGED_PREFIX)) {
            match remote.read_record::<Staged>(rel, &meta.location).await {
                Ok((staged, _)) => keep.extend(staged.keeps().map(str::to_owned)),
                // What it names cannot be told: nothing is removed.
                Err(_) => return 0,
            }
        }
        let garbage: Vec<&ObjectMeta> = objects
            .iter()
            .filter(|(rel, meta)| {
                (in_kb(rel) || rel.starts_with(DOCUMENTS_PREFIX)) && !keep.contains(rel) && meta.last_modified < cutoff
            })
            .map(|(_, meta)| meta)
            .collect();
        futures::stream::iter(garbage)
            .map(|meta| remote.store.delete(&meta.location))
            .buffer_unordered(CONCURRENCY)
            .filter(|deleted| std::future::ready(deleted.is_ok()))
            .count()
            .await
    }

    /// Whether the object at `rel` is still what was pulled (or, when nothing was, absent or
    /// already holding the bytes of SHA-256 `digest`).
    async fn unchanged(&self, rel: &str, key: &Key, digest: Option<&[u8; 32]>) -> Result<bool> {
        let remote = &self.remote;
        let current = match remote.store.head(key).await {
            Ok(meta) => Some(meta),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => return Err(Error::store("checking", remote.location(rel))(e)),
        };
        let pulled = self.pulled.get(rel);
        Ok(match (pulled, current) {
            (None, None) => true,
            (Some(p), Some(c)) if p.e_tag.is_some() && p.e_tag == c.e_tag => true,
            // Created or changed meanwhile: fine only if it already holds these very bytes.
            (_, Some(_)) => match digest {
                Some(digest) => remote.stream(rel, key, |_| Ok(())).await.is_ok_and(|d| &d == digest),
                None => false,
            },
            (Some(_), None) => false,
        })
    }

    /// Writes one object from `path` (`length` bytes of SHA-256 `digest`). A response of the
    /// LLM cache that another run stored meanwhile is kept (the cache is keyed by the request:
    /// either answer serves).
    async fn write(&self, rel: &str, path: &Path, digest: &[u8; 32], length: u64) -> Result<()> {
        let remote = &self.remote;
        if in_kb(rel) {
            return self.write_object(&KbObject::new(rel, digest, length), path).await;
        }
        let key = remote.key(rel);
        if rel.starts_with(CACHE_PREFIX) && remote.store.head(&key).await.is_ok() {
            return Ok(());
        }
        if length <= self.upload.multipart_above {
            let bytes = PutPayload::from(std::fs::read(path).map_err(Error::io("reading the working copy", path))?);
            return self.put_conditionally(rel, &key, bytes, digest).await;
        }
        // A multipart upload cannot be made conditional through object_store: checked just before.
        if !self.unchanged(rel, &key, Some(digest)).await? {
            return Err(conflict(remote.location(rel)));
        }
        self.upload(rel, &key, path).await
    }

    /// Writes the file at `path` as `object`, a new object named by its content: nothing else is
    /// ever written under its name, so one already there is these bytes.
    async fn write_object(&self, object: &KbObject, path: &Path) -> Result<()> {
        let remote = &self.remote;
        let key = remote.key(&object.key);
        if remote.store.head(&key).await.is_ok() {
            return Ok(());
        }
        if object.bytes > self.upload.multipart_above {
            return self.upload(&object.key, &key, path).await;
        }
        let bytes = PutPayload::from(std::fs::read(path).map_err(Error::io("reading the working copy", path))?);
        match remote.store.put_opts(&key, bytes.clone(), PutOptions::from(PutMode::Create)).await {
            Ok(_) | Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => Ok(()),
            Err(object_store::Error::NotImplemented { .. }) => remote
                .store
                .put(&key, bytes)
                .await
                .map(drop)
                .map_err(Error::store("writing", remote.location(&object.key))),
            Err(e) => Err(Error::store("writing", remote.location(&object.key))(e)),
        }
    }

    /// Uploads the file at `path` to `key` (`rel` below the root) in parts.
    async fn upload(&self, rel: &str, key: &Key, path: &Path) -> Result<()> {
        let remote = &self.remote;
        let upload = remote.store.put_multipart(key).await.map_err(Error::store("writing", remote.location(rel)))?;
        let mut parts = object_store::WriteMultipart::new_with_chunk_size(upload, self.upload.part_bytes);
        match self.upload_parts(&mut parts, rel, path).await {
            Ok(()) => parts.finish().await.map(drop).map_err(Error::store("writing", remote.location(rel))),
            Err(e) => {
                // The upload's parts are discarded; the object keeps its old version.
                let _ = parts.abort().await;
                Err(e)
            }
        }
    }

    /// Writes `bytes` to `key` only if the store still holds what was pulled there: created only
    /// where nothing is (`If-None-Match: *`), replaced only where the pulled version still is
    /// (`If-Match` with its ETag), so that no other run's write can land between a check and
    /// this one. A refused write is fine when the object already holds these very bytes (two
    /// runs wrote the same), and a conflict otherwise. A store that takes no conditions
    /// (`AWS_CONDITIONAL_PUT=disabled`) is checked just before instead.
    async fn put_conditionally(&self, rel: &str, key: &Key, bytes: PutPayload, digest: &[u8; 32]) -> Result<()> {
        let remote = &self.remote;
        let mode = match self.pulled.get(rel) {
            None => PutMode::Create,
            Some(Pulled { e_tag: Some(e_tag), .. }) => {
                PutMode::Update(UpdateVersion { e_tag: Some(e_tag.clone()), version: None })
            }
            // Pulled from a store that gives no ETags: only a check before the write is possible.
            Some(Pulled { e_tag: None, .. }) => PutMode::Overwrite,
        };
        if matches!(mode, PutMode::Overwrite) && !self.unchanged(rel, key, Some(digest)).await? {
            return Err(conflict(remote.location(rel)));
        }
        match remote.store.put_opts(key, bytes.clone(), PutOptions::from(mode)).await {
            Ok(_) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => {
                match remote.stream(rel, key, |_| Ok(())).await {
                    Ok(current) if &current == digest => Ok(()),
                    _ => Err(conflict(remote.location(rel))),
                }
            }
            Err(object_store::Error::NotImplemented { .. }) => {
                if !self.unchanged(rel, key, Some(digest)).await? {
                    return Err(conflict(remote.location(rel)));
                }
                remote.store.put(key, bytes).await.map(drop).map_err(Error::store("writing", remote.location(rel)))
            }
            Err(e) => Err(Error::store("writing", remote.location(rel))(e)),
        }
    }

    /// Feeds the file at `path` to a multipart upload, a part at a time.
    async fn upload_parts(&self, parts: &mut object_store::WriteMultipart, rel: &str, path: &Path) -> Result<()> {
        use std::io::Read;
        let mut file = std::fs::File::open(path).map_err(Error::io("reading the working copy", path))?;
        let mut buf = vec![0u8; self.upload.part_bytes];
        loop {
            let n = file.read(&mut buf).map_err(Error::io("reading the working copy", path))?;
            if n == 0 {
                return Ok(());
            }
            parts
                .wait_for_capacity(PARTS_IN_FLIGHT)
                .await
                .map_err(Error::store("writing", self.remote.location(rel)))?;
            parts.write(&buf[..n]);
        }
    }

    async fn remove(&self, rel: &str) -> Result<()> {
        let remote = &self.remote;
        let key = remote.key(rel);
        if !self.unchanged(rel, &key, None).await? {
            return Err(conflict(remote.location(rel)));
        }
        match remote.store.delete(&key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(Error::store("removing", remote.location(rel))(e)),
        }
    }
}

/// A record of the kb as stored.
fn record_bytes<T: serde::Serialize>(record: &T) -> Result<PutPayload> {
    let mut bytes =
        serde_json::to_vec_pretty(record).map_err(|e| Error::Internal(format!("writing a kb record: {e}")))?;
    bytes.push(b'\n');
    Ok(PutPayload::from(bytes))
}

/// Whether `error` is an object store's "not found".
fn is_not_found(error: &Error) -> bool {
    matches!(error, Error::Store { source, .. }
        if matches!(source.downcast_ref::<object_store::Error>(), Some(object_store::Error::NotFound { .. })))
}

fn conflict(location: String) -> Error {
    Error::Store {
        op: "changed by another run while this one ran (left as it is; rerun this stage)",
        location,
        source: "conflicting write".into(),
    }
}

/// Every file below `root` by its `/`-separated path, hidden names (temporary files, locks)
/// excepted.
fn files_below(root: &Path) -> Result<BTreeMap<String, PathBuf>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(Error::io("listing the working copy", &dir))? {
            let entry = entry.map_err(Error::io("listing the working copy", &dir))?;
            let name = entry.file_name();
            if name.to_string_lossy().starts_with('.') {
                continue;
            }
            let path = entry.path();
            let kind = entry.file_type().map_err(Error::io("listing the working copy", &path))?;
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                let rel = path.strip_prefix(root).unwrap_or(&path);
                let rel: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
                files.insert(rel.join("/"), path);
            }
        }
    }
    Ok(files)
}

/// Runs `future` to completion on a runtime of its own (the transfers are I/O-bound; the
/// stages themselves are not async).
fn block_on<F: Future>(future: F) -> Result<F::Output> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::io("starting the transfer runtime", std::env::temp_dir()))?;
    Ok(runtime.block_on(future))
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;

    use super::*;

    fn remote(store: &Arc<InMemory>) -> RemoteIndex {
        let url = url::Url::parse("s3://bucket/some/prefix").unwrap();
        RemoteIndex::with_store(url, store.clone() as Arc<dyn ObjectStore>).unwrap()
    }

    fn put(store: &InMemory, key: &str, bytes: &str) {
        block_on(store.put(&Key::from(key), PutPayload::from(bytes.as_bytes().to_vec()))).unwrap().unwrap();
    }

    fn get_bytes(store: &InMemory, key: &str) -> Option<Vec<u8>> {
        block_on(async { store.get(&Key::from(key)).await.ok()?.bytes().await.ok() }).unwrap().map(|b| b.to_vec())
    }

    fn get(store: &InMemory, key: &str) -> Option<String> {
        get_bytes(store, key).map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// An error with its causes, as the binaries print it.
    fn chain(error: &Error) -> String {
        let mut text = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            text.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        text
    }

    #[test]
    fn locations_parse() {
        assert_eq!("idx".parse::<IndexLocation>(), Ok(IndexLocation::Local("idx".into())));
        let dir = std::env::temp_dir().join("idx");
        let file_url = url::Url::from_file_path(&dir).unwrap();
        assert_eq!(file_url.as_str().parse::<IndexLocation>(), Ok(IndexLocation::Local(dir)));
        assert!(matches!("s3://b/p".parse::<IndexLocation>(), Ok(IndexLocation::Remote(_))));
        assert!("s3:///p".parse::<IndexLocation>().unwrap_err().contains("s3://bucket/prefix"));
        assert!("gs://b/p".parse::<IndexLocation>().unwrap_err().contains("not supported"));
    }

    #[test]
    fn a_shard_pulls_its_buckets_and_pushes_only_what_changed() {
        let store = Arc::new(InMemory::new());
        for (key, text) in [
            ("some/prefix/index.json", "{}"),
            ("some/prefix/chunks/part-0000.parquet", "c0"),
            ("some/prefix/chunks/part-0001.parquet", "c1"),
            ("some/prefix/chunks/part-0002.parquet", "c2"),
            ("some/prefix/kb/entities/part-0000.parquet", "kb"),
            ("some/prefix/failures/part-chunk-0003.parquet", "f3"),
            ("some/prefix/llm_cache/ab/abcd.json", "cached"),
            ("other/prefix/index.json", "not ours"),
        ] {
            put(&store, key, text);
        }
        let remote = remote(&store);
        let copy = remote.pull(Selection::Shard(Shard { index: 0, count: 2 }), false).unwrap();
        let mut pulled: Vec<String> = files_below(copy.path()).unwrap().into_keys().collect();
        pulled.sort();
        assert_eq!(
            pulled,
            [
                "chunks/part-0000.parquet",
                "chunks/part-0002.parquet",
                "failures/part-chunk-0003.parquet",
                "index.json",
                "llm_cache/ab/abcd.json"
            ]
        );
        // Nothing changed: nothing is written.
        assert_eq!(copy.push().unwrap(), Pushed::default());
        std::fs::write(copy.path().join("chunks/part-0002.parquet"), "c2 new").unwrap();
        std::fs::remove_file(copy.path().join("chunks/part-0000.parquet")).unwrap();
        std::fs::create_dir_all(copy.path().join("manifest")).unwrap();
        std::fs::write(copy.path().join("manifest/part-run.parquet"), "run").unwrap();
        std::fs::write(copy.path().join("chunks/.part-0004.parquet.1-0.tmp"), "temp").unwrap();
        let pushed = copy.push().unwrap();
        assert_eq!((pushed.written, pushed.removed), (2, 1));
        assert_eq!(get(&store, "some/prefix/chunks/part-0002.parquet").as_deref(), Some("c2 new"));
        assert_eq!(get(&store, "some/prefix/chunks/part-0000.parquet"), None);
        assert_eq!(get(&store, "some/prefix/chunks/part-0001.parquet").as_deref(), Some("c1"));
        assert_eq!(get(&store, "some/prefix/manifest/part-run.parquet").as_deref(), Some("run"));
        assert_eq!(get(&store, "some/prefix/chunks/.part-0004.parquet.1-0.tmp"), None);

        let kb = remote.pull(Selection::Tables(&[Table::KbEntities]), false).unwrap();
        let pulled: Vec<String> = files_below(kb.path()).unwrap().into_keys().collect();
        assert_eq!(pulled, ["index.json", "kb/entities/part-0000.parquet"]);
    }

    #[test]
    fn a_large_object_is_uploaded_in_parts_and_pulled_back_whole() {
        let store = Arc::new(InMemory::new());
        put(&store, "some/prefix/index.json", "{}");
        let remote = remote(&store);
        let mut copy = remote.pull(Selection::Everything, false).unwrap();
        copy.upload = Upload { multipart_above: 10_000, part_bytes: 4_096 };
        // 25,000 bytes, none of them a repeat of the part before: six parts, the last one short.
        let large: Vec<u8> = (0..25_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::create_dir_all(copy.path().join("chunks")).unwrap();
        std::fs::write(copy.path().join("chunks/part-0000.parquet"), &large).unwrap();
        std::fs::write(copy.path().join("chunks/part-0001.parquet"), "small").unwrap();
        let pushed = copy.push().unwrap();
        assert_eq!((pushed.written, pushed.in_parts, pushed.bytes), (2, 1, 25_005));
        assert!(get_bytes(&store, "some/prefix/chunks/part-0000.parquet") == Some(large.clone()));
        // Pulled back, it streams into the same file and counts as unchanged.
        let again = remote.pull(Selection::Everything, false).unwrap();
        assert!(std::fs::read(again.path().join("chunks/part-0000.parquet")).unwrap() == large);
        assert_eq!(again.push().unwrap(), Pushed::default());
        // A large object another run replaced meanwhile is a conflict, and is left as it is.
        put(&store, "some/prefix/chunks/part-0000.parquet", "replaced");
        let mut again = again;
        again.upload = Upload { multipart_above: 10_000, part_bytes: 4_096 };
        std::fs::write(again.path().join("chunks/part-0000.parquet"), &large[..20_000]).unwrap();
        assert!(again.push().unwrap_err().to_string().contains("part-0000.parquet"));
        assert_eq!(get(&store, "some/prefix/chunks/part-0000.parquet").as_deref(), Some("replaced"));
    }

    /// The kb files a working copy holds, with their contents.
    fn kb_of(copy: &WorkingCopy) -> BTreeMap<String, String> {
        files_below(copy.path())
            .unwrap()
            .into_iter()
            .filter(|(rel, _)| in_kb(rel))
            .map(|(rel, path)| (rel, std::fs::read_to_string(path).unwrap()))
            .collect()
    }

    fn write_kb(copy: &WorkingCopy, files: &[(&str, Option<&str>)]) {
        for (rel, text) in files {
            let path = copy.path().join(rel);
            match text {
                Some(text) => {
                    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                    std::fs::write(path, text).unwrap();
                }
                None => std::fs::remove_file(path).unwrap(),
            }
        }
    }

    fn kb(files: &[(&str, &str)]) -> BTreeMap<String, String> {
        files.iter().map(|(rel, text)| (rel.to_string(), text.to_string())).collect()
    }

    const E0: &str = "kb/entities/part-0000.parquet";
    const E1: &str = "kb/entities/part-0001.parquet";
    const T: &str = "kb/thresholds/part.parquet";

    #[test]
    fn a_kb_becomes_visible_whole_through_its_commit_record() {
        let store = Arc::new(InMemory::new());
        put(&store, "some/prefix/index.json", "{}");
        // A kb written before commit records: read as it is.
        put(&store, &format!("some/prefix/{E0}"), "old");
        let remote = remote(&store);
        let reader = || remote.pull(Selection::Tables(&[Table::KbEntities, Table::KbThresholds]), false).unwrap();
        assert_eq!(kb_of(&reader()), kb(&[(E0, "old")]));

        let mut first = remote.pull(Selection::Everything, false).unwrap();
        first.grace = std::time::Duration::ZERO;
        write_kb(&first, &[(E0, Some("one")), (E1, Some("one b")), (T, Some("t1"))]);
        let pushed = first.push().unwrap();
        assert_eq!((pushed.written, pushed.committed, pushed.removed), (3, Some(1), 0));
        assert_eq!(kb_of(&reader()), kb(&[(E0, "one"), (E1, "one b"), (T, "t1")]));
        // The old file is kept one commit for readers still pulling it; no object was overwritten.
        assert_eq!(get(&store, &format!("some/prefix/{E0}")).as_deref(), Some("old"));

        // A merge's objects are not seen before its record is written.
        let mut second = remote.pull(Selection::Everything, false).unwrap();
        second.grace = std::time::Duration::ZERO;
        assert_eq!(second.generation(), Some(1));
        write_kb(&second, &[(E0, Some("two")), (E1, None), (T, Some("t2"))]);
        let object = KbObject::new(E0, &Sha256::digest(b"two").into(), 3);
        put(&store, &format!("some/prefix/{}", object.key), "two");
        assert_eq!(kb_of(&reader()), kb(&[(E0, "one"), (E1, "one b"), (T, "t1")]));
        let pushed = second.push().unwrap();
        assert_eq!((pushed.committed, pushed.collected), (Some(2), 1), "the pre-commit kb's file is removed");
        assert_eq!(kb_of(&reader()), kb(&[(E0, "two"), (T, "t2")]));
        assert_eq!(get(&store, &format!("some/prefix/{E0}")), None);

        // A third commit removes what only the first named.
        let mut third = remote.pull(Selection::Everything, false).unwrap();
        third.grace = std::time::Duration::ZERO;
        write_kb(&third, &[(T, Some("t3"))]);
        assert_eq!(third.push().unwrap().collected, 3);
        assert_eq!(kb_of(&reader()), kb(&[(E0, "two"), (T, "t3")]));
        // Nothing changed in the kb: no commit.
        assert_eq!(reader().push().unwrap(), Pushed::default());
    }

    #[test]
    fn readers_see_the_documents_the_committed_kb_was_built_from() {
        let store = Arc::new(InMemory::new());
        put(&store, "some/prefix/index.json", "{}");
        put(&store, "some/prefix/documents/part-0000.parquet", "d1");
        let remote = remote(&store);
        let documents = "documents/part-0000.parquet";
        let reader = || {
            let copy = remote.pull(Selection::Tables(&[Table::KbEntities, Table::Documents]), false).unwrap();
            let text = |rel: &str| std::fs::read_to_string(copy.path().join(rel)).unwrap();
            (text(E0), text(documents))
        };
        let merge = |text: &str| {
            let copy = remote.pull(Selection::Everything, false).unwrap();
            write_kb(&copy, &[(E0, Some(text))]);
            copy.push().unwrap()
        };
        let pushed = merge("e1");
        assert_eq!(
            (pushed.committed, pushed.written),
            (Some(1), 2),
            "the kb part and the documents part it was built from"
        );
        assert_eq!(reader(), ("e1".to_owned(), "d1".to_owned()));
        // An ingest rewrites the documents for the next merge: readers keep the kb's.
        let ingest = remote.pull(Selection::Shard(Shard::ALL), false).unwrap();
        std::fs::write(ingest.path().join(documents), "d2").unwrap();
        assert_eq!(ingest.push().unwrap().committed, None);
        assert_eq!(reader(), ("e1".to_owned(), "d1".to_owned()));
        let live = remote.pull(Selection::Shard(Shard::ALL), false).unwrap();
        assert_eq!(std::fs::read_to_string(live.path().join(documents)).unwrap(), "d2");
        assert_eq!(merge("e2").committed, Some(2));
        assert_eq!(reader(), ("e2".to_owned(), "d2".to_owned()));
        // A merge with nothing new commits nothing.
        assert_eq!(remote.pull(Selection::Everything, false).unwrap().push().unwrap(), Pushed::default());
    }

    #[test]
    fn of_two_merges_racing_one_commits_and_the_other_fails_naming_it() {
        let store = Arc::new(InMemory::new());
        put(&store, "some/prefix/index.json", "{}");
        let remote = remote(&store);
        for before in [None, Some("zero")] {
            if let Some(text) = before {
                let copy = remote.pull(Selection::Everything, false).unwrap();
                write_kb(&copy, &[(T, Some(text))]);
                copy.push().unwrap();
            }
            let (winner, loser, same) = (
                remote.pull(Selection::Everything, false).unwrap(),
                remote.pull(Selection::Everything, false).unwrap(),
                remote.pull(Selection::Everything, false).unwrap(),
            );
            write_kb(&winner, &[(E0, Some("winner")), (T, Some("tw"))]);
            write_kb(&loser, &[(E0, Some("loser")), (T, Some("tl"))]);
            write_kb(&same, &[(E0, Some("winner")), (T, Some("tw"))]);
            let generation = winner.push().unwrap().committed.unwrap();
            let err = chain(&loser.push().unwrap_err());
            assert!(
                err.contains(&format!("another run committed kb generation {generation} while this one ran")),
                "{err}"
            );
            assert!(err.contains("s3://bucket/some/prefix/kb/commit.json"), "{err}");
            // A run that built the very same kb does not fail.
            assert_eq!(same.push().unwrap().committed, Some(generation));
            let reader = remote.pull(Selection::Tables(&[Table::KbEntities, Table::KbThresholds]), false).unwrap();
            assert_eq!(kb_of(&reader), kb(&[(E0, "winner"), (T, "tw")]));
        }
    }

    #[test]
    fn a_sharded_merge_stages_its_buckets_and_the_whole_index_run_commits_them() {
        let store = Arc::new(InMemory::new());
        put(&store, "some/prefix/index.json", "{}");
        let remote = remote(&store);
        let first = remote.pull(Selection::Everything, false).unwrap();
        write_kb(&first, &[(E0, Some("e0")), (E1, Some("e1")), (T, Some("t1"))]);
        first.push().unwrap();
        let reader = || remote.pull(Selection::Tables(&[Table::KbEntities, Table::KbThresholds]), false).unwrap();

        let shards = [Shard { index: 0, count: 2 }, Shard { index: 1, count: 2 }];
        let tasks: Vec<WorkingCopy> =
            shards.iter().map(|&s| remote.pull(Selection::MergeShard(s), false).unwrap()).collect();
        assert_eq!(kb_of(&tasks[0]), kb(&[(E0, "e0")]));
        assert_eq!(kb_of(&tasks[1]), kb(&[(E1, "e1")]));
        write_kb(&tasks[0], &[(E0, Some("e0 new"))]);
        write_kb(&tasks[1], &[(E1, None)]);
        for task in &tasks {
            let pushed = task.push().unwrap();
            assert!(pushed.staged && pushed.committed.is_none(), "{pushed:?}");
        }
        assert!(get(&store, "some/prefix/kb/staged/0-of-2.json").is_some());
        // Readers see the committed kb until the whole-index run commits; a task run again, and
        // the whole-index run, see what was staged.
        assert_eq!(kb_of(&reader()), kb(&[(E0, "e0"), (E1, "e1"), (T, "t1")]));
        assert_eq!(kb_of(&remote.pull(Selection::MergeShard(shards[0]), false).unwrap()), kb(&[(E0, "e0 new")]));
        let whole = remote.pull(Selection::Everything, false).unwrap();
        assert_eq!(kb_of(&whole), kb(&[(E0, "e0 new"), (T, "t1")]));
        write_kb(&whole, &[(T, Some("t2"))]);
        assert_eq!(whole.push().unwrap().committed, Some(2));
        assert_eq!(kb_of(&reader()), kb(&[(E0, "e0 new"), (T, "t2")]));
        assert_eq!(get(&store, "some/prefix/kb/staged/0-of-2.json"), None);
        assert_eq!(get(&store, "some/prefix/kb/staged/1-of-2.json"), None);
    }

    #[test]
    fn a_push_never_overwrites_what_another_run_changed_meanwhile() {
        let store = Arc::new(InMemory::new());
        put(&store, "some/prefix/index.json", "{}");
        put(&store, "some/prefix/documents/part-0000.parquet", "v1");
        let remote = remote(&store);
        let first = remote.pull(Selection::Everything, false).unwrap();
        let second = remote.pull(Selection::Everything, false).unwrap();
        std::fs::write(first.path().join("documents/part-0000.parquet"), "first").unwrap();
        std::fs::write(second.path().join("documents/part-0000.parquet"), "second").unwrap();
        // Both create the same new object with the same bytes: no conflict.
        for copy in [&first, &second] {
            std::fs::create_dir_all(copy.path().join("llm_cache/aa")).unwrap();
            std::fs::write(copy.path().join("llm_cache/aa/aaaa.json"), "same").unwrap();
        }
        first.push().unwrap();
        let err = second.push().unwrap_err();
        assert!(err.to_string().contains("documents/part-0000.parquet: changed by another run"), "{err}");
        assert_eq!(get(&store, "some/prefix/documents/part-0000.parquet").as_deref(), Some("first"));
        assert_eq!(get(&store, "some/prefix/llm_cache/aa/aaaa.json").as_deref(), Some("same"));
    }

    /// A store in which another run writes `key` just before each write this run makes to it:
    /// what a check before the write cannot see.
    #[derive(Debug)]
    struct Racing {
        inner: Arc<InMemory>,
        key: Key,
    }

    impl fmt::Display for Racing {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "Racing({})", self.inner)
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for Racing {
        async fn put_opts(
            &self,
            location: &Key,
            payload: PutPayload,
            opts: PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            if *location == self.key {
                self.inner.put(location, PutPayload::from_static(b"the other run's")).await?;
            }
            self.inner.put_opts(location, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            location: &Key,
            opts: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &Key,
            options: object_store::GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            self.inner.get_opts(location, options).await
        }
        fn delete_stream(
            &self,
            locations: futures::stream::BoxStream<'static, object_store::Result<Key>>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<Key>> {
            self.inner.delete_stream(locations)
        }
        fn list(&self, prefix: Option<&Key>) -> futures::stream::BoxStream<'static, object_store::Result<ObjectMeta>> {
            self.inner.list(prefix)
        }
        async fn list_with_delimiter(&self, prefix: Option<&Key>) -> object_store::Result<object_store::ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }
        async fn copy_opts(
            &self,
            from: &Key,
            to: &Key,
            options: object_store::CopyOptions,
        ) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }

    #[test]
    fn another_runs_write_between_the_check_and_the_write_is_never_overwritten() {
        let inner = Arc::new(InMemory::new());
        put(&inner, "some/prefix/index.json", "{}");
        put(&inner, "some/prefix/documents/part-0000.parquet", "v1");
        for key in ["some/prefix/documents/part-0000.parquet", "some/prefix/documents/part-0001.parquet"] {
            let racing = Arc::new(Racing { inner: inner.clone(), key: Key::from(key) });
            let url = url::Url::parse("s3://bucket/some/prefix").unwrap();
            let remote = RemoteIndex::with_store(url, racing as Arc<dyn ObjectStore>).unwrap();
            let copy = remote.pull(Selection::Everything, false).unwrap();
            std::fs::write(copy.path().join(key.trim_start_matches("some/prefix/")), "this run's").unwrap();
            // Replacing what was pulled, and creating what was not: the other run's write stays.
            let err = copy.push().unwrap_err().to_string();
            assert!(err.contains("changed by another run"), "{key}: {err}");
            assert_eq!(get(&inner, key).as_deref(), Some("the other run's"), "{key}");
        }
    }

    #[test]
    fn a_missing_remote_index_is_named() {
        let store = Arc::new(InMemory::new());
        let err = remote(&store).pull(Selection::Shard(Shard::ALL), false).unwrap_err();
        assert!(err.to_string().contains("s3://bucket/some/prefix"), "{err}");
        assert!(matches!(err.index_problem(), Some(IndexProblem::NotAnIndex(_))));
        // Ingest creates it.
        let copy = remote(&store).pull(Selection::Shard(Shard::ALL), true).unwrap();
        assert_eq!(copy.pulled(), 0);
    }

    #[test]
    fn sql_reads_a_remote_index_in_place_and_names_a_damaged_object() {
        use crate::io::failures::{Failure, FailureKind, to_batch};
        use crate::io::sql::IndexSql;

        let dir = tempfile::tempdir().unwrap();
        let part = dir.path().join("part.parquet");
        let failure = |unit: &str| Failure {
            stage: "extract".into(),
            doc_id: Some("d1".into()),
            unit: unit.into(),
            kind: FailureKind::LlmError,
            message: "no answer".into(),
        };
        let batch = to_batch(&[failure("chunk 0"), failure("chunk 1")]).unwrap();
        crate::io::parquet::write_part(&part, Table::Failures, "", &[batch]).unwrap();
        let bytes = std::fs::read(&part).unwrap();
        let store = Arc::new(InMemory::new());
        put(&store, "some/prefix/index.json", "{}");
        block_on(store.put(&Key::from("some/prefix/failures/part-extract-0001.parquet"), PutPayload::from(bytes)))
            .unwrap()
            .unwrap();
        let runtime = crate::core::threads::runtime().unwrap();
        let count = runtime.block_on(async {
            let session = IndexSql::open_remote(&remote(&store), None).await?;
            let rows = session.run("SELECT count(*) AS n FROM failures; SELECT count(*) FROM kb.entities").await?;
            crate::io::sql::format_batches(&rows[0], crate::io::sql::OutputFormat::Csv, 0)
        });
        assert_eq!(count.unwrap().trim(), "n\n2");

        put(&store, "some/prefix/chunks/part-0001.parquet", "not parquet");
        let err = runtime.block_on(IndexSql::open_remote(&remote(&store), None)).unwrap_err();
        assert!(err.to_string().contains("s3://bucket/some/prefix/chunks/part-0001.parquet"), "{err}");
        let missing = runtime.block_on(IndexSql::open_remote(&remote(&Arc::new(InMemory::new())), None)).unwrap_err();
        assert!(matches!(missing.index_problem(), Some(IndexProblem::NotAnIndex(_))), "{missing}");
    }
}
