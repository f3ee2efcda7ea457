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

    /// Fails unless `objects` (as [`RemoteIndex::list`] returns them) hold the index's settings.
    pub fn check_exists(&self, objects: &[(String, ObjectMeta)]) -> Result<()> {
        if objects.iter().any(|(rel, _)| rel == SETTINGS_FILE) {
            return Ok(());
        }
        let missing = std::io::Error::new(std::io::ErrorKind::NotFound, format!("no {SETTINGS_FILE}"));
        Err(Error::index(self.url.as_str(), IndexProblem::NotAnIndex(missing)))
    }

    /// The part files of `table` among `objects` (as [`RemoteIndex::list`] returns them).
    pub fn parts(objects: &[(String, ObjectMeta)], table: Table) -> Vec<&ObjectMeta> {
        objects
            .iter()
            .filter(|(rel, _)| table_of(rel) == Some(table) && rel.ends_with(".parquet"))
            .map(|(_, meta)| meta)
            .collect()
    }

    /// Pulls the objects `selection` names into a new working copy. Unless `create`, the
    /// index must exist (have its `index.json`).
    pub fn pull(&self, selection: Selection<'_>, create: bool) -> Result<WorkingCopy> {
        let dir = tempfile::Builder::new()
            .prefix("flexstruct-index-")
            .tempdir()
            .map_err(Error::io("creating a working copy", std::env::temp_dir()))?;
        let root = dir.path().to_owned();
        let pulled = block_on(async {
            let objects = self.list().await?;
            if !create {
                self.check_exists(&objects)?;
            }
            futures::stream::iter(objects.into_iter().filter(|(rel, _)| selection.wants(rel)))
                .map(|(rel, meta)| {
                    let root = &root;
                    async move {
                        let path = root.join(&rel);
                        if let Some(parent) = path.parent() {
                            std::fs::create_dir_all(parent).map_err(Error::io("creating a folder", parent))?;
                        }
                        let mut file =
                            std::fs::File::create(&path).map_err(Error::io("writing the working copy", &path))?;
                        let digest = self
                            .stream(&rel, &meta.location, |chunk| {
                                use std::io::Write;
                                file.write_all(chunk).map_err(Error::io("writing the working copy", &path))
                            })
                            .await?;
                        Ok::<_, Error>((rel, Pulled { digest, e_tag: meta.e_tag }))
                    }
                })
                .buffer_unordered(CONCURRENCY)
                .try_collect::<BTreeMap<_, _>>()
                .await
        })??;
        Ok(WorkingCopy { remote: self.clone(), dir, pulled, upload: UPLOAD })
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

    /// Writes every file that is new or changed since the pull as one whole object (a `PUT`, or a
    /// multipart upload for a large one, read from the file part by part), and removes
    /// the objects of pulled files that are gone: the tables first, then `failures`, then
    /// `manifest` (so that a run's record never precedes its rows). An object changed by another
    /// run since the pull is a conflict: it is left as it is and the push fails naming it.
    pub fn push(&self) -> Result<Pushed> {
        let local = files_below(self.path())?;
        // (path below the root, file, digest, length) of each file to write.
        let mut writes: Vec<(String, &Path, [u8; 32], u64)> = Vec::new();
        for (rel, path) in &local {
            let (digest, length) = file_digest(path)?;
            if self.pulled.get(rel).is_none_or(|p| p.digest != digest) {
                writes.push((rel.clone(), path, digest, length));
            }
        }
        let removes: Vec<String> = self.pulled.keys().filter(|rel| !local.contains_key(*rel)).cloned().collect();
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
        let upload = remote.store.put_multipart(&key).await.map_err(Error::store("writing", remote.location(rel)))?;
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

    fn get(store: &InMemory, key: &str) -> Option<String> {
        block_on(async { store.get(&Key::from(key)).await.ok()?.bytes().await.ok() })
            .unwrap()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
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
        let mut copy = remote.pull(Selection::Tables(&[Table::KbEntities]), false).unwrap();
        copy.upload = Upload { multipart_above: 10_000, part_bytes: 4_096 };
        // 25,000 bytes, none of them a repeat of the part before: six parts, the last one short.
        let large: Vec<u8> = (0..25_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::create_dir_all(copy.path().join("kb/entities")).unwrap();
        std::fs::write(copy.path().join("kb/entities/vectors.f32"), &large).unwrap();
        std::fs::write(copy.path().join("kb/entities/part-0000.parquet"), "small").unwrap();
        let pushed = copy.push().unwrap();
        assert_eq!((pushed.written, pushed.in_parts, pushed.bytes), (2, 1, 25_005));
        let stored = block_on(async {
            store.get(&Key::from("some/prefix/kb/entities/vectors.f32")).await.unwrap().bytes().await.unwrap()
        })
        .unwrap();
        assert_eq!(stored.as_ref(), large.as_slice());
        // Pulled back, it streams into the same file and counts as unchanged.
        let again = remote.pull(Selection::Tables(&[Table::KbEntities]), false).unwrap();
        assert_eq!(std::fs::read(again.path().join("kb/entities/vectors.f32")).unwrap(), large);
        assert_eq!(again.push().unwrap(), Pushed::default());
        // A large object another run replaced meanwhile is a conflict, and is left as it is.
        put(&store, "some/prefix/kb/entities/vectors.f32", "replaced");
        std::fs::write(again.path().join("kb/entities/vectors.f32"), &large[..20_000]).unwrap();
        assert!(again.push().unwrap_err().to_string().contains("vectors.f32"));
        assert_eq!(get(&store, "some/prefix/kb/entities/vectors.f32").as_deref(), Some("replaced"));
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
