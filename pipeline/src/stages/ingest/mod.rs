//! The ingest stage: a corpus (folder, JSON, JSON lines, Parquet) → the `documents` table.
//!
//! Documents are upserted by doc_id: new ones are added, changed ones replaced, and the others
//! kept, so corpora can be added to an index piece by piece. A `.txt`/`.md` file is one document
//! whose id comes from its text, so an edited file arrives under a new id: the version the same
//! file of the same corpus gave before is then removed (the new one was read, so the old one is
//! known to be gone from that file). `--prune` makes the shard's documents exactly the corpus
//! given (and is refused when any input failed, since a document that could not be read this
//! time must not be deleted). A bucket whose rows would not change is not rewritten, so an
//! unchanged rerun leaves every file as it was.

pub mod config;
mod read;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use flexstruct_schemas::{Table, col};
use serde::Serialize;

pub use config::IngestConfig;
pub use read::{RawDoc, ReadOutcome, read_corpus};

use super::{RunContext, Stage};
use crate::core::ids::{fingerprint, sha256_hex};
use crate::core::text::nfc;
use crate::core::{Error, Result};
use crate::io::StageMetrics;
use crate::io::failures::{self, Failure, FailureKind};
use crate::io::files::remove_file;
use crate::io::lock::{self, LockName};
use crate::io::parquet::{opt_str, read_part_any_layout, string_column, write_part};

/// Stage name.
pub const STAGE: &str = Stage::Ingest.name();

/// The ingest stage's own figures of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IngestDetails {
    /// Files looked at.
    pub files: u64,
    /// Documents removed because the file they were read from now holds another text (counted
    /// in `units_removed` as well).
    pub replaced: u64,
    /// Why `--prune` did not remove anything, when it was asked for and refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prune: Option<String>,
}

/// What an ingest run did.
pub type IngestMetrics = StageMetrics<IngestDetails>;

/// What to ingest.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// A corpus file or folder.
    pub corpus: PathBuf,
    /// Remove documents of the shard that are not in this corpus.
    pub prune: bool,
}

/// A row of the `documents` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// Stable id: as given, else `doc-` + the first 16 hex digits of the text's SHA-256.
    pub doc_id: String,
    /// Title, if any.
    pub title: Option<String>,
    /// Full text.
    pub text: String,
    /// Where it was read from, inside its corpus.
    pub source: String,
    /// Hex SHA-256 of the text.
    pub sha256: String,
    /// The corpus it was last ingested from, as an absolute path (None for a document ingested
    /// before the column existed).
    pub corpus: Option<String>,
}

impl Document {
    /// The document of a raw input, its text and title in Unicode NFC (so that `Zu\u{308}rich`
    /// and `Zürich` are one string for every later stage and for questions).
    fn from_raw(raw: RawDoc, corpus: &str) -> Document {
        let text = nfc(raw.text);
        let sha256 = sha256_hex(text.as_bytes());
        let doc_id = raw.doc_id.unwrap_or_else(|| format!("doc-{}", &sha256[..16]));
        let corpus = Some(corpus.to_owned());
        Document { doc_id, title: raw.title.map(nfc), text, source: raw.source, sha256, corpus }
    }
}

/// A stored document but for its text (which its hash stands for): what tells whether a bucket's
/// part must be rewritten.
#[derive(Debug, PartialEq, Eq)]
struct Stored {
    sha256: String,
    title: Option<String>,
    source: String,
    corpus: Option<String>,
}

impl Stored {
    fn of(d: &Document) -> Stored {
        Stored { sha256: d.sha256.clone(), title: d.title.clone(), source: d.source.clone(), corpus: d.corpus.clone() }
    }
}

/// How a corpus is named in the `corpus` column and in the scope of its failures.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CorpusName {
    /// Its canonical path (absolute, with `.`, `..` and symlinks resolved), so that one folder
    /// is one corpus however it is reached; a path that cannot be resolved is named by its
    /// lexically absolute form.
    name: String,
    /// The lexically absolute path, when it differs: every corpus was named so before, and the
    /// documents and failures recorded under that name are this corpus's too.
    earlier: Option<String>,
}

impl CorpusName {
    fn of(corpus: &Path) -> CorpusName {
        let lexical = std::path::absolute(corpus).unwrap_or_else(|_| corpus.to_owned()).to_string_lossy().into_owned();
        match std::fs::canonicalize(corpus) {
            Ok(real) => {
                let name = real.to_string_lossy().into_owned();
                let earlier = (name != lexical).then_some(lexical);
                CorpusName { name, earlier }
            }
            Err(_) => CorpusName { name: lexical, earlier: None },
        }
    }

    /// Whether a document's recorded corpus is this one.
    fn is(&self, recorded: Option<&str>) -> bool {
        recorded.is_some_and(|r| r == self.name || self.earlier.as_deref() == Some(r))
    }

    /// The scope key of this corpus's failures under `name` (12 hex digits of its SHA-256).
    fn key(name: &str) -> String {
        sha256_hex(name.as_bytes())[..12].to_owned()
    }
}

/// Which documents already in the index the corpus being ingested supersedes: those that a file
/// of this corpus gave before and that the file, read again whole, no longer gives.
struct Supersedes {
    corpus: CorpusName,
    /// Sources of the whole-file documents read (and kept: not duplicates) this run.
    files: HashSet<String>,
    /// Every doc_id this run brings, in any shard.
    incoming: HashSet<String>,
}

impl Supersedes {
    /// `whole_files`: the sources of the whole-file documents read, before duplicates were
    /// dropped; `docs`: the documents kept.
    fn new(corpus: CorpusName, whole_files: &HashSet<String>, docs: &[Document]) -> Supersedes {
        Supersedes {
            corpus,
            files: docs.iter().filter(|d| whole_files.contains(&d.source)).map(|d| d.source.clone()).collect(),
            incoming: docs.iter().map(|d| d.doc_id.clone()).collect(),
        }
    }

    fn row(&self, doc_id: &str, source: &str, corpus: Option<&str>) -> bool {
        self.corpus.is(corpus) && self.files.contains(source) && !self.incoming.contains(doc_id)
    }
}

/// Runs the ingest stage.
pub fn run(ctx: &RunContext<'_>, config: &IngestConfig, options: &IngestOptions) -> Result<IngestMetrics> {
    let started = Instant::now();
    let index = &ctx.index;
    index.check_shard(ctx.shard)?;
    let outcome = read_corpus(&options.corpus, config.max_document_bytes)?;
    let read_units = (outcome.docs.len() + outcome.failures.len()) as u64;
    let corpus = CorpusName::of(&options.corpus);
    if options.prune && read_units == 0 {
        return Err(Error::Input {
            location: options.corpus.display().to_string(),
            problem: "the corpus holds no documents: --prune would remove every document of the index, so it is \
                      refused (to empty an index, remove its folder)"
                .into(),
        });
    }
    let whole_files: HashSet<String> = outcome.docs.iter().filter(|d| d.whole_file).map(|d| d.source.clone()).collect();
    let (docs, mut failures) = assign_ids(outcome.docs, &corpus.name);
    failures.splice(0..0, outcome.failures);
    let supersedes = Supersedes::new(corpus, &whole_files, &docs);

    let mut by_bucket: BTreeMap<u32, Vec<Document>> = BTreeMap::new();
    for doc in docs.into_iter().filter(|d| ctx.shard.owns_doc(&d.doc_id)) {
        by_bucket.entry(index.bucket_of(&doc.doc_id)).or_default().push(doc);
    }
    ctx.progress.start(by_bucket.values().map(|d| d.len() as u64).sum());

    let mut metrics = IngestMetrics {
        stage: STAGE.to_owned(),
        shard: ctx.shard.to_string(),
        inputs: vec![options.corpus.display().to_string()],
        rows_in: read_units,
        ..IngestMetrics::default()
    };
    let prune = options.prune && failures.is_empty();
    if options.prune && !prune {
        metrics.details.prune = Some(format!(
            "skipped: {} input unit(s) failed, so documents absent from this run may be among them",
            failures.len()
        ));
    }

    for bucket in index.shard_buckets(ctx.shard) {
        let incoming = by_bucket.remove(&bucket).unwrap_or_default();
        let path = index.bucket_path(Table::Documents, bucket);
        if !path.exists() && incoming.is_empty() {
            continue;
        }
        // Read, merge and rewrite the bucket under its lock, so that a concurrent ingest's
        // documents are read back rather than overwritten.
        let _lock = lock::exclusive(index, LockName::DocumentsBucket(bucket))?;
        if incoming.is_empty() && !prune {
            // Only the ids, sources and corpora, to learn whether the bucket holds a superseded
            // document or is of an older layout.
            let (rows, current) = bucket_keys(&path, &supersedes)?;
            if current {
                metrics.rows_out += rows;
                continue;
            }
        }
        let n_incoming = incoming.len() as u64;
        let (version, existing) = read_documents_any_layout(&path)?;
        let before: HashMap<String, Stored> = existing.iter().map(|d| (d.doc_id.clone(), Stored::of(d))).collect();
        let mut changed = version < Table::Documents.schema_version();
        let mut rows: BTreeMap<String, Document> = BTreeMap::new();
        if !prune {
            for d in existing {
                if supersedes.row(&d.doc_id, &d.source, d.corpus.as_deref()) {
                    metrics.details.replaced += 1;
                } else {
                    rows.insert(d.doc_id.clone(), d);
                }
            }
        }
        for doc in incoming {
            let was = before.get(&doc.doc_id);
            if was.is_some_and(|b| b.sha256 == doc.sha256) {
                metrics.units_skipped += 1;
            } else {
                metrics.units_done += 1;
            }
            changed |= was != Some(&Stored::of(&doc));
            rows.insert(doc.doc_id.clone(), doc);
        }
        let removed = before.keys().filter(|id| !rows.contains_key(*id)).count() as u64;
        metrics.units_removed += removed;
        metrics.rows_out += rows.len() as u64;
        let docs: Vec<Document> = rows.into_values().collect();
        if docs.is_empty() {
            remove_file(&path)?;
        } else if changed || removed > 0 {
            write_part(&path, Table::Documents, &documents_fingerprint(&docs), &[documents_batch(&docs)?])?;
        }
        ctx.progress.advance(n_incoming);
    }

    // Each input failure is recorded by one shard only: the one owning its document, or shard 0
    // for an input that never became a document.
    failures.retain(|f| f.doc_id.as_deref().map_or(ctx.shard.index == 0, |d| ctx.shard.owns_doc(d)));
    record_failures(ctx, &supersedes.corpus, prune, &failures)?;
    metrics.units_failed = failures.len() as u64;
    metrics.details.files = outcome.files;
    metrics.failures = failures;
    metrics.seconds = started.elapsed().as_secs_f64();
    Ok(metrics)
}

/// The documents a run over `corpus` would ingest, with their ids, and the failures it would
/// record (unreadable or empty inputs, repeated ids), without writing anything: what a caller
/// that stages a corpus for ingest reports per input before and after the run.
pub fn documents_of(corpus: &Path, config: &IngestConfig) -> Result<(Vec<Document>, Vec<Failure>)> {
    let outcome = read_corpus(corpus, config.max_document_bytes)?;
    let (docs, mut failures) = assign_ids(outcome.docs, &CorpusName::of(corpus).name);
    failures.splice(0..0, outcome.failures);
    Ok((docs, failures))
}

/// Removes the documents `doc_ids` from the index: each bucket that holds one is read and
/// rewritten without it under the bucket's lock (removed whole when it empties), as a prune
/// would. Ids the index does not hold are counted as skipped. The later stages drop what they
/// derived from a removed document the next time they run.
pub fn remove(ctx: &RunContext<'_>, doc_ids: &[String]) -> Result<IngestMetrics> {
    let started = Instant::now();
    let index = &ctx.index;
    index.check_shard(ctx.shard)?;
    let mut by_bucket: BTreeMap<u32, HashSet<&str>> = BTreeMap::new();
    for id in doc_ids.iter().filter(|d| ctx.shard.owns_doc(d)) {
        by_bucket.entry(index.bucket_of(id)).or_default().insert(id.as_str());
    }
    let asked: u64 = by_bucket.values().map(|ids| ids.len() as u64).sum();
    let mut metrics = IngestMetrics {
        stage: STAGE.to_owned(),
        shard: ctx.shard.to_string(),
        inputs: vec![format!("removal of {asked} document(s)")],
        rows_in: asked,
        ..IngestMetrics::default()
    };
    ctx.progress.start(asked);
    for (bucket, ids) in by_bucket {
        let path = index.bucket_path(Table::Documents, bucket);
        let _lock = lock::exclusive(index, LockName::DocumentsBucket(bucket))?;
        let (_, existing) = read_documents_any_layout(&path)?;
        let before = existing.len();
        let kept: Vec<Document> = existing.into_iter().filter(|d| !ids.contains(d.doc_id.as_str())).collect();
        let removed = (before - kept.len()) as u64;
        metrics.units_removed += removed;
        metrics.units_skipped += ids.len() as u64 - removed;
        metrics.rows_out += kept.len() as u64;
        if kept.is_empty() {
            remove_file(&path)?;
        } else if removed > 0 {
            write_part(&path, Table::Documents, &documents_fingerprint(&kept), &[documents_batch(&kept)?])?;
        }
        ctx.progress.advance(ids.len() as u64);
    }
    metrics.seconds = started.elapsed().as_secs_f64();
    Ok(metrics)
}

/// Records the failures of reading `corpus` (replacing those of its previous run, kept apart from
/// other corpora's: failures of an input stay until that input is read without one or pruned).
/// A prune drops the failures of every other corpus of the shard: their inputs are gone.
fn record_failures(ctx: &RunContext<'_>, corpus: &CorpusName, prune: bool, failures: &[Failure]) -> Result<()> {
    let tag = ctx.shard.tag();
    let scope = format!("{}-{tag}", CorpusName::key(&corpus.name));
    let earlier = corpus.earlier.as_deref().map(|name| format!("{}-{tag}", CorpusName::key(name)));
    for other in failures::scopes(&ctx.index, STAGE)? {
        // `tag` alone: the single part of the shard written before failures were kept per corpus;
        // `earlier`: this corpus's, recorded under the name corpora had before.
        let stale = other == tag
            || earlier.as_ref() == Some(&other)
            || (prune && other != scope && other.ends_with(&format!("-{tag}")));
        if stale {
            failures::replace(&ctx.index, STAGE, &other, &[])?;
        }
    }
    failures::replace(&ctx.index, STAGE, &scope, failures)
}

/// Gives every document its id and turns repeated ids into failures (the first one wins).
fn assign_ids(raw: Vec<RawDoc>, corpus: &str) -> (Vec<Document>, Vec<Failure>) {
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut docs = Vec::new();
    let mut failures = Vec::new();
    for raw in raw {
        let given = raw.doc_id.is_some();
        let doc = Document::from_raw(raw, corpus);
        if let Some(first) = seen.get(&doc.doc_id) {
            let what = if given { "doc_id" } else { "text (same content-derived doc_id)" };
            failures.push(Failure {
                stage: STAGE.to_owned(),
                doc_id: Some(doc.doc_id.clone()),
                unit: doc.source.clone(),
                kind: FailureKind::DuplicateId,
                message: format!("{}: duplicate {what} `{}`, first seen at {first}", doc.source, doc.doc_id),
            });
            continue;
        }
        seen.insert(doc.doc_id.clone(), doc.source.clone());
        docs.push(doc);
    }
    (docs, failures)
}

/// Reads the documents of one part file, of the current layout or an earlier one (whose rows
/// have no corpus), with the layout version it was written with (the current one for a part
/// that does not exist).
pub fn read_documents_any_layout(path: &Path) -> Result<(u32, Vec<Document>)> {
    if !path.exists() {
        return Ok((Table::Documents.schema_version(), Vec::new()));
    }
    let (version, batches) = read_part_any_layout(path, Table::Documents, None)?;
    let mut docs = Vec::new();
    for batch in batches {
        let ids = string_column(&batch, col::DOC_ID)?;
        let titles = string_column(&batch, col::TITLE)?;
        let texts = string_column(&batch, col::TEXT)?;
        let sources = string_column(&batch, col::SOURCE)?;
        let shas = string_column(&batch, col::SHA256)?;
        let corpora = corpus_column(&batch)?;
        for i in 0..batch.num_rows() {
            docs.push(Document {
                doc_id: ids.value(i).to_owned(),
                title: opt_str(titles, i).map(str::to_owned),
                text: texts.value(i).to_owned(),
                source: sources.value(i).to_owned(),
                sha256: shas.value(i).to_owned(),
                corpus: corpora.and_then(|c| opt_str(c, i)).map(str::to_owned),
            });
        }
    }
    Ok((version, docs))
}

/// The `corpus` column of a batch of documents, absent from parts of the first layout.
fn corpus_column(batch: &RecordBatch) -> Result<Option<&StringArray>> {
    match batch.schema().column_with_name(col::CORPUS) {
        Some(_) => Ok(Some(string_column(batch, col::CORPUS)?)),
        None => Ok(None),
    }
}

/// How many documents a part holds, and whether it can stay as it is: of the current layout,
/// with no document that `supersedes` removes. Reads three columns, not the texts.
fn bucket_keys(path: &Path, supersedes: &Supersedes) -> Result<(u64, bool)> {
    let (version, batches) =
        read_part_any_layout(path, Table::Documents, Some(&[col::DOC_ID, col::SOURCE, col::CORPUS]))?;
    let mut current = version == Table::Documents.schema_version();
    let mut rows = 0;
    for batch in &batches {
        let ids = string_column(batch, col::DOC_ID)?;
        let sources = string_column(batch, col::SOURCE)?;
        let corpora = corpus_column(batch)?;
        rows += batch.num_rows() as u64;
        current &= !(0..batch.num_rows())
            .any(|i| supersedes.row(ids.value(i), sources.value(i), corpora.and_then(|c| opt_str(c, i))));
    }
    Ok((rows, current))
}

/// The fingerprint of a documents part: of what later stages read (the corpus a document came
/// from is not among it, so that recording it changes nothing downstream).
fn documents_fingerprint(docs: &[Document]) -> String {
    let mut parts = vec![STAGE.to_owned()];
    for d in docs {
        parts.extend([d.doc_id.clone(), d.sha256.clone(), d.title.clone().unwrap_or_default(), d.source.clone()]);
    }
    fingerprint(&parts.iter().map(String::as_str).collect::<Vec<_>>())
}

fn documents_batch(docs: &[Document]) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(
        Table::Documents.schema(),
        vec![
            Arc::new(docs.iter().map(|d| Some(d.doc_id.as_str())).collect::<StringArray>()),
            Arc::new(docs.iter().map(|d| d.title.as_deref()).collect::<StringArray>()),
            Arc::new(docs.iter().map(|d| Some(d.text.as_str())).collect::<StringArray>()),
            Arc::new(docs.iter().map(|d| Some(d.source.as_str())).collect::<StringArray>()),
            Arc::new(docs.iter().map(|d| Some(d.sha256.as_str())).collect::<StringArray>()),
            Arc::new(Int64Array::from_iter_values(docs.iter().map(|d| d.text.chars().count() as i64))),
            Arc::new(docs.iter().map(|d| d.corpus.as_deref()).collect::<StringArray>()),
        ],
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(id: Option<&str>, text: &str, source: &str) -> RawDoc {
        RawDoc { doc_id: id.map(Into::into), title: None, text: text.into(), source: source.into(), whole_file: false }
    }

    #[test]
    fn ids_are_kept_or_derived_and_duplicates_fail() {
        let (docs, failures) = assign_ids(
            vec![
                raw(Some("x"), "one", "f:1"),
                raw(None, "two", "f:2"),
                raw(Some("x"), "three", "f:3"),
                raw(None, "two", "g.txt"),
            ],
            "/c",
        );
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].doc_id, "x");
        assert_eq!(docs[1].doc_id, format!("doc-{}", &sha256_hex(b"two")[..16]));
        assert_eq!(failures.len(), 2);
        assert_eq!(failures[0].message, "f:3: duplicate doc_id `x`, first seen at f:1");
        assert!(failures[1].message.starts_with("g.txt: duplicate text"));
    }

    #[test]
    fn removal_rewrites_only_the_buckets_of_the_removed_documents() {
        use crate::io::{Index, Shard};
        use crate::stages::NoProgress;
        let tmp = tempfile::tempdir().unwrap();
        let corpus = tmp.path().join("corpus.jsonl");
        let lines: Vec<String> =
            (0..12).map(|i| format!("{{\"doc_id\": \"d{i}\", \"text\": \"Text {i}.\"}}")).collect();
        std::fs::write(&corpus, lines.join("\n")).unwrap();
        let index = Index::open_or_create(&tmp.path().join("index"), Some(8)).unwrap();
        let ctx = RunContext { index: index.clone(), shard: Shard::ALL, progress: &NoProgress, survey: None };
        run(&ctx, &IngestConfig::default(), &IngestOptions { corpus: corpus.clone(), prune: false }).unwrap();
        let (docs, failures) = documents_of(&corpus, &IngestConfig::default()).unwrap();
        assert_eq!((docs.len(), failures.len()), (12, 0));
        let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
        let before: Vec<_> = (0..8).map(|b| modified(&index.bucket_path(Table::Documents, b))).collect();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let removed = remove(&ctx, &["d3".into(), "d7".into(), "absent".into()]).unwrap();
        assert_eq!((removed.units_removed, removed.units_skipped), (2, 1));
        let mut left = Vec::new();
        for b in 0..8 {
            let path = index.bucket_path(Table::Documents, b);
            let (_, docs) = read_documents_any_layout(&path).unwrap();
            left.extend(docs.into_iter().map(|d| d.doc_id));
            let touched = ["d3", "d7", "absent"].iter().any(|d| index.bucket_of(d) == b);
            if !touched {
                assert_eq!(modified(&path), before[b as usize], "bucket {b} was rewritten");
            }
        }
        left.sort();
        let mut expected: Vec<String> = (0..12).filter(|i| *i != 3 && *i != 7).map(|i| format!("d{i}")).collect();
        expected.sort();
        assert_eq!(left, expected);
    }

    #[test]
    fn a_corpus_is_named_by_its_real_path_and_still_answers_to_its_earlier_name() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().canonicalize().unwrap().join("corpus");
        std::fs::create_dir_all(real.join("sub")).unwrap();
        let plain = CorpusName::of(&real);
        assert_eq!(plain, CorpusName { name: real.to_string_lossy().into_owned(), earlier: None });
        // Through `..`: the same name, and the lexical form it had before is still this corpus.
        let around = real.join("sub").join("..");
        let named = CorpusName::of(&around);
        assert_eq!(named.name, plain.name);
        let earlier = around.to_string_lossy().into_owned();
        assert_eq!(named.earlier.as_deref(), Some(earlier.as_str()));
        assert!(named.is(Some(&plain.name)) && named.is(Some(&earlier)));
        assert!(!named.is(Some("/elsewhere")) && !named.is(None));
        // Through a symlink: the same name too.
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(CorpusName::of(&link).name, plain.name);
        // A path that does not resolve keeps its lexical name.
        let missing = real.join("gone.jsonl");
        assert_eq!(
            CorpusName::of(&missing),
            CorpusName { name: missing.to_string_lossy().into_owned(), earlier: None }
        );
    }
}
