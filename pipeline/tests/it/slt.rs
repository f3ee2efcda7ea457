//! SQL behaviour in sqllogictest files, one per SQL-visible feature: the merge SQL and the SQL
//! guard (`pipeline/tests/slt/*.slt`) against a tiny index built in process, and each kb table
//! and the run logs (`pipeline/tests/slt/sample/*.slt`) against the sample corpus
//! (`data/sample/corpus`); both built with the rules backend and hashing vectors, and merged.
//!
//! The expected outputs were generated, then reviewed: after a deliberate change, regenerate them
//! with `FLEXSTRUCT_SLT_COMPLETE=1 cargo test -p flexstruct-pipeline --test it slt` and review
//! the diff before committing it.

use std::path::{Path, PathBuf};

use arrow::array::{Array, RecordBatch};
use arrow::datatypes::DataType;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use flexstruct_pipeline::compose;
use flexstruct_pipeline::config::Config;
use flexstruct_pipeline::io::Index;
use flexstruct_pipeline::io::sql::IndexSql;
use flexstruct_pipeline::stages::ingest::IngestOptions;
use flexstruct_pipeline::stages::merge::register_functions;
use flexstruct_pipeline::stages::{NoProgress, RunContext, Stage};
use sqllogictest::{DBOutput, DefaultColumnType};

/// Two short documents written for this test: an abbreviation, a surname alias, dates.
const CORPUS: &str = r#"{"doc_id": "kestrel", "title": "Kestrel Valley", "text": "The Kestrel Valley Water Authority (KVWA) manages the river. Rafael Ortiz chairs the KVWA. Ortiz signed the drought compact in 2009. The KVWA publishes flow readings every week. The KVWA built a weir at Hollin Bridge."}
{"doc_id": "harbour", "title": "Port Ellery", "text": "Port Ellery Harbour opened in 1887.\n\nThe harbour master, Ana Lind, keeps the tide tables. Lind moved the pilot station in 1990."}
"#;

/// The configuration the fixture index is built with.
pub fn fixture_config() -> Config {
    let mut config = Config::default();
    config.index.buckets = Some(4);
    config.embed.model = "hashing-16".into();
    // Small clusters, so that two short documents have some.
    config.cluster.min_cluster_size = 2;
    config.cluster.min_samples = 1;
    config
}

/// Builds and merges the fixture index in `dir`.
pub fn fixture(dir: &Path) -> Index {
    let corpus = dir.join("corpus.jsonl");
    std::fs::write(&corpus, CORPUS).unwrap();
    let config = fixture_config();
    let index = Index::open_or_create(&dir.join("index"), config.index.buckets).unwrap();
    let ctx = RunContext {
        index: index.clone(),
        shard: flexstruct_pipeline::io::Shard::ALL,
        progress: &NoProgress,
        survey: None,
    };
    compose::ingest(&ctx, &config, &IngestOptions { corpus, prune: false }).unwrap();
    compose::rebuild(&index, &config, Stage::Chunk).unwrap();
    index
}

/// Builds and merges the sample corpus in `dir`, every run recorded as the binaries record them.
pub fn sample_fixture(dir: &Path) -> Index {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/sample/corpus");
    let mut config = Config::default();
    config.index.buckets = Some(8);
    config.embed.model = "hashing-16".into();
    let index = Index::open_or_create(&dir.join("sample"), config.index.buckets).unwrap();
    let ctx = RunContext {
        index: index.clone(),
        shard: flexstruct_pipeline::io::Shard::ALL,
        progress: &NoProgress,
        survey: None,
    };
    let ingested = compose::ingest(&ctx, &config, &IngestOptions { corpus, prune: false }).unwrap();
    flexstruct_pipeline::io::record_run(&index, &ingested, &config).unwrap();
    compose::rebuild(&index, &config, Stage::Chunk).unwrap();
    index
}

/// The index as a sqllogictest database: every statement goes through the read-only guard of
/// `flexstruct-sql`, with the merge's functions registered.
struct IndexDb {
    runtime: tokio::runtime::Runtime,
    sql: IndexSql,
}

fn cells(batches: &[RecordBatch]) -> (Vec<DefaultColumnType>, Vec<Vec<String>>) {
    let Some(first) = batches.first() else { return (Vec::new(), Vec::new()) };
    let types = first
        .schema()
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            t if t.is_integer() => DefaultColumnType::Integer,
            DataType::Float16 | DataType::Float32 | DataType::Float64 => DefaultColumnType::FloatingPoint,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DefaultColumnType::Text,
            _ => DefaultColumnType::Any,
        })
        .collect();
    let mut rows = Vec::new();
    for batch in batches {
        let formatters: Vec<ArrayFormatter<'_>> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &FormatOptions::default()).unwrap())
            .collect();
        for i in 0..batch.num_rows() {
            rows.push(
                batch
                    .columns()
                    .iter()
                    .zip(&formatters)
                    .map(|(c, f)| {
                        let value = if c.is_null(i) { "NULL".to_owned() } else { f.value(i).to_string() };
                        if value.is_empty() { "(empty)".to_owned() } else { value }
                    })
                    .collect(),
            );
        }
    }
    (types, rows)
}

/// An error with its whole cause chain in its message, so that `statement error <regex>` can
/// match DataFusion's reason too.
#[derive(Debug)]
struct SltError(String);

impl std::fmt::Display for SltError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SltError {}

impl From<flexstruct_pipeline::Error> for SltError {
    fn from(e: flexstruct_pipeline::Error) -> Self {
        SltError(flexstruct_pipeline::core::chain_message(&e))
    }
}

impl sqllogictest::DB for IndexDb {
    type Error = SltError;
    type ColumnType = DefaultColumnType;

    fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, Self::Error> {
        let mut results = self.runtime.block_on(self.sql.run(sql))?;
        let batches = results.pop().unwrap_or_default();
        let (types, rows) = cells(&batches);
        if types.is_empty() { Ok(DBOutput::StatementComplete(0)) } else { Ok(DBOutput::Rows { types, rows }) }
    }
}

fn slt_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    files
}

/// Runs (or, with `FLEXSTRUCT_SLT_COMPLETE` set, rewrites the expected output of) every file.
fn run_files(files: Vec<PathBuf>, index: &Index) {
    let complete = std::env::var_os("FLEXSTRUCT_SLT_COMPLETE").is_some();
    for file in files {
        let index = index.clone();
        let mut runner = sqllogictest::Runner::new(move || {
            let index = index.clone();
            async move {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                let sql = runtime.block_on(IndexSql::open(&index)).map_err(SltError::from)?;
                register_functions(&sql);
                Ok(IndexDb { runtime, sql })
            }
        });
        if complete {
            let update = runner.update_test_file(
                &file,
                " ",
                sqllogictest::default_validator,
                sqllogictest::default_normalizer,
                sqllogictest::default_column_validator,
            );
            futures::executor::block_on(update).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        } else {
            runner.run_file(&file).unwrap_or_else(|e| panic!("{}", e.display(false)));
        }
    }
}

fn slt_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slt")
}

#[test]
fn slt_files_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let files = slt_files(&slt_dir());
    assert!(files.len() >= 2, "{files:?}");
    run_files(files, &fixture(tmp.path()));
}

#[test]
fn slt_files_of_the_sample_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let files = slt_files(&slt_dir().join("sample"));
    assert!(files.len() >= 7, "{files:?}");
    run_files(files, &sample_fixture(tmp.path()));
}
