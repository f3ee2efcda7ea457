//! The merge stage: DataFusion SQL unions the per-document tables into the global collections
//! of `kb/` (paper §3.2), joins in the vectors of the configured embedding model, builds the
//! alias table and per-document statistics.
//!
//! `kb/` is partitioned by the same buckets as the per-document tables: bucket b of every kb table
//! is built from bucket b of the per-document tables alone, so adding or removing a document
//! rewrites only its bucket's kb parts (and the global thresholds), a bucket whose inputs did not
//! change is skipped, and `--shard K/N` builds the kb parts of its buckets as an independent job.
//! The run over the whole index (also the final step after sharded runs) derives the global
//! thresholds from every bucket's vectors and writes them last, with the fingerprint of all kb
//! parts, so that a reader can tell a whole kb from one a merge is still writing; then the kb's
//! vector files ([`crate::io::kb`]), which spare a reader decoding the vectors from Parquet.

pub mod sql;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, AsArray, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field};
use flexstruct_schemas::{Table, col};
use rayon::prelude::*;
use serde::Serialize;

pub use sql::{kb_queries, register_functions};

use super::Stage;
use super::driver::RunContext;
use crate::core::ids::fingerprint;
use crate::core::models::{DERIVED_PERCENTILE, ThresholdSample};
use crate::core::units::Unit;
use crate::core::{Error, IndexProblem, Result, threads};
use crate::io::ann::{AnnConfig, write_ann_files};
use crate::io::files::remove_file;
use crate::io::kb::{Floats, Precision, read_kb_table, write_vector_files};
use crate::io::lock::{self, LockName};
use crate::io::parquet::{
    KB_BUCKET_TABLES, kb_parts_fingerprint, output_fingerprint, part_fingerprint, part_row_count, row_count,
    string_column, typed, write_part,
};
use crate::io::sql::IndexSql;
use crate::io::{Index, Shard, StageMetrics};

/// Stage name.
pub const STAGE: &str = Stage::Merge.name();
const VERSION: &str = "4";

/// The merge stage's own figures of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MergeDetails {
    /// The embedding model whose vectors were joined.
    pub model: String,
    /// Entities per hyperdegree range (`1`, `2-3`, `4-9`, `10-30`, `31+`), when merged.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub hyperdegree_histogram: BTreeMap<String, i64>,
    /// The similarity thresholds derived from the kb's vectors, by unit (`kb/thresholds`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub thresholds: BTreeMap<String, f32>,
    /// The tables whose approximate index this run built (`[ann]`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub approximate_indexes: Vec<String>,
    /// Seconds spent building them.
    #[serde(skip_serializing_if = "is_zero")]
    pub approximate_seconds: f64,
}

fn is_zero(value: &f64) -> bool {
    *value == 0.0
}

/// What a merge run did.
pub type MergeMetrics = StageMetrics<MergeDetails>;

/// Inputs of the merge: every per-document table (embeddings included).
fn inputs() -> impl Iterator<Item = Table> {
    Table::ALL.into_iter().filter(|t| t.is_per_document())
}

/// Runs the merge stage over the context's shard, joining the vectors of embedding model
/// `model`. Every bucket's kb parts are built from that bucket's per-document parts alone (a
/// bucket whose kb parts carry the fingerprint of its current inputs is skipped); the whole
/// index's run (`Shard::ALL`, also the final step after sharded runs) then derives what is
/// global — the thresholds, from every bucket's vectors — and writes it last.
pub fn run(ctx: &RunContext<'_>, model: &str, ann: &AnnConfig) -> Result<MergeMetrics> {
    let started = std::time::Instant::now();
    let index = &ctx.index;
    index.check_shard(ctx.shard)?;
    check_complete(index, ctx.shard)?;
    let whole = ctx.shard == Shard::ALL;
    // Readers of the kb (queries, SQL) wait until every table is written, and this waits for
    // them. Shards of a sharded merge do not lock one another out: they write disjoint buckets,
    // and a reader between them is refused by the kb's fingerprints.
    let _lock = if whole { Some(lock::exclusive(index, LockName::Kb)?) } else { None };
    let queries = kb_queries(model);
    let mut metrics = MergeMetrics {
        stage: STAGE.to_owned(),
        shard: ctx.shard.to_string(),
        inputs: inputs().map(|t| t.dir().to_owned()).collect(),
        details: MergeDetails { model: model.to_owned(), ..MergeDetails::default() },
        ..MergeMetrics::default()
    };
    let buckets: Vec<u32> = index.shard_buckets(ctx.shard).collect();
    ctx.progress.start(buckets.len() as u64 + u64::from(whole));
    let runtime = threads::runtime()?;
    // Buckets in parallel: each one's queries run on one partition, so one at a time would leave
    // the other cores idle.
    let merged: Vec<MergeMetrics> = buckets
        .par_iter()
        .map(|&bucket| {
            let mut one = MergeMetrics::default();
            merge_bucket(index, model, bucket, &queries, &runtime, &mut one)?;
            ctx.progress.advance(1);
            Ok(one)
        })
        .collect::<Result<_>>()?;
    for one in merged {
        metrics.rows_in += one.rows_in;
        metrics.rows_out += one.rows_out;
        metrics.units_done += one.units_done;
        metrics.units_skipped += one.units_skipped;
        metrics.units_removed += one.units_removed;
    }
    if whole {
        merge_global(index, (model, ann), &runtime, &mut metrics)?;
        ctx.progress.advance(1);
    }
    metrics.seconds = started.elapsed().as_secs_f64();
    Ok(metrics)
}

/// Builds (or skips, or removes) the kb parts of one bucket.
fn merge_bucket(
    index: &Index,
    model: &str,
    bucket: u32,
    queries: &[(Table, String)],
    runtime: &tokio::runtime::Runtime,
    metrics: &mut MergeMetrics,
) -> Result<()> {
    if !index.bucket_path(Table::Documents, bucket).is_file() {
        let mut removed = false;
        for (table, _) in queries {
            let path = index.bucket_path(*table, bucket);
            removed |= path.exists();
            remove_file(&path)?;
        }
        metrics.units_removed += u64::from(removed);
        return Ok(());
    }
    let (expected, rows_in) = bucket_fingerprint(index, model, bucket)?;
    metrics.rows_in += rows_in;
    if bucket_state(index, bucket, &expected)? == BucketKb::UpToDate {
        metrics.units_skipped += 1;
        for (t, _) in queries {
            metrics.rows_out += part_row_count(&index.bucket_path(*t, bucket))?;
        }
        return Ok(());
    }
    runtime.block_on(async {
        let tables: Vec<Table> = inputs().collect();
        let sql = IndexSql::open_bucket(index, &tables, bucket).await?;
        register_functions(&sql);
        check_vectors(&sql, index, model).await?;
        for (table, query) in queries {
            let frame = sql.context().sql(query).await?;
            // No rows still has the query's columns: a vector column keeps its model's width.
            let schema = Arc::new(frame.schema().as_arrow().clone());
            let mut batches = frame.collect().await?;
            if batches.is_empty() {
                batches.push(RecordBatch::new_empty(schema));
            }
            let batches = conform(*table, batches)?;
            metrics.rows_out += row_count(&batches) as u64;
            write_part(&index.bucket_path(*table, bucket), *table, &expected, &batches)?;
        }
        Ok::<(), Error>(())
    })?;
    metrics.units_done += 1;
    Ok(())
}

/// Derives the global parts from every bucket's kb parts: the vector files of that kb
/// ([`crate::io::kb`]; also for a kb merged before they existed), the approximate indexes of its
/// large tables ([`crate::io::ann`]), and last the thresholds (with the fingerprint of all kb
/// parts, which a reader checks: a kb whose thresholds are current has all the rest) and the
/// run's statistics.
fn merge_global(
    index: &Index,
    (model, ann): (&str, &AnnConfig),
    runtime: &tokio::runtime::Runtime,
    metrics: &mut MergeMetrics,
) -> Result<()> {
    let expected = kb_parts_fingerprint(index, &KB_BUCKET_TABLES)?;
    // The vector files first: the approximate indexes are built from them, and the thresholds'
    // sample reads its vectors from them.
    write_vector_files(index, model, &expected)?;
    let started = std::time::Instant::now();
    let built = write_ann_files(index, model, &expected, ann)?;
    if !built.is_empty() {
        metrics.details.approximate_indexes = built.iter().map(|t| t.dir().to_owned()).collect();
        metrics.details.approximate_seconds = started.elapsed().as_secs_f64();
    }
    let path = index.kb_part(Table::KbThresholds);
    if output_fingerprint(&path, Table::KbThresholds)?.as_deref() == Some(expected.as_str()) {
        metrics.units_skipped += 1;
    } else {
        merge_thresholds(index, model, runtime, metrics, &expected)?;
        metrics.units_done += 1;
    }
    Ok(())
}

/// Writes `kb/thresholds` (with the kb's fingerprint `expected`) and the run's statistics.
fn merge_thresholds(
    index: &Index,
    model: &str,
    runtime: &tokio::runtime::Runtime,
    metrics: &mut MergeMetrics,
    expected: &str,
) -> Result<()> {
    let path = index.kb_part(Table::KbThresholds);
    let mut thresholds: Vec<(Unit, f32, usize)> = threshold_samples(index, model, Some(expected))?
        .into_iter()
        .filter_map(|(unit, sample)| sample.threshold().map(|(tau, pairs)| (unit, tau, pairs)))
        .collect();
    // A chunk holds several sentences, so a question is no closer to a chunk than to its best
    // fact: the chunks' threshold is never above the hyperedges' (chunks of one author or genre
    // are alike, which raised theirs well above it on the novels, starving the chunk baselines
    // of a full context).
    let hyperedge_tau = thresholds.iter().find(|t| t.0 == Unit::Hyperedge).map(|t| t.1);
    for t in thresholds.iter_mut().filter(|t| t.0 == Unit::Chunk) {
        t.1 = hyperedge_tau.map_or(t.1, |h| t.1.min(h));
    }
    metrics.details.thresholds = thresholds.iter().map(|t| (t.0.name().to_owned(), t.1)).collect();
    runtime.block_on(async {
        let sql = IndexSql::open_tables(index, &[Table::Entities]).await?;
        // The hyperdegree distribution, for the run record.
        let stats = sql
            .context()
            .sql(&format!(
                "SELECT CASE WHEN {h} = 1 THEN '1' WHEN {h} <= 3 THEN '2-3' WHEN {h} <= 9 THEN '4-9' \
                 WHEN {h} <= 30 THEN '10-30' ELSE '31+' END AS bin, count(*) AS n FROM entities GROUP BY 1 ORDER BY 1",
                h = col::HYPERDEGREE
            ))
            .await?
            .collect()
            .await?;
        for batch in &stats {
            let bins = string_column(batch, "bin")?;
            let counts = typed::<Int64Array>(batch, "n")?;
            for i in 0..batch.num_rows() {
                metrics.details.hyperdegree_histogram.insert(bins.value(i).to_owned(), counts.value(i));
            }
        }
        Ok::<(), Error>(())
    })?;
    write_part(&path, Table::KbThresholds, expected, &[thresholds_batch(model, &thresholds)?])
}

/// The fingerprint of one bucket's kb parts merged from its current per-document parts with
/// `model`'s vectors, and the rows of those parts.
fn bucket_fingerprint(index: &Index, model: &str, bucket: u32) -> Result<(String, u64)> {
    let mut parts = vec![STAGE.to_owned(), VERSION.to_owned(), model.to_owned()];
    let mut rows_in = 0u64;
    for table in inputs() {
        let part = index.bucket_path(table, bucket);
        parts.push(format!("{table}:{}", part_fingerprint(&part, table)?.unwrap_or_default()));
        rows_in += part_row_count(&part)?;
    }
    Ok((fingerprint(&parts.iter().map(String::as_str).collect::<Vec<_>>()), rows_in))
}

/// The state of the kb, as `flexstruct-status` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "problems")]
pub enum KbState {
    /// Merged from exactly the current per-document tables: a merge would do nothing.
    UpToDate,
    /// A merge would rebuild part of it: what differs, bucket by bucket (parts merged from other
    /// tables, parts missing, the global parts), up to [`MAX_REASONS`].
    Stale(Vec<String>),
    /// Not merged yet.
    Missing,
    /// A merge would be refused: per-document stages have not finished (the problems say where).
    Incomplete(Vec<String>),
}

/// Most reasons a stale kb lists.
pub const MAX_REASONS: usize = 8;

/// One bucket's kb parts against what a merge would write now.
#[derive(Debug, Clone, PartialEq, Eq)]
enum BucketKb {
    /// Every part is of the current per-document parts.
    UpToDate,
    /// No part: never merged.
    Missing,
    /// Some parts are absent (`missing`), or merged from other tables (`other`).
    Stale { missing: Vec<Table>, other: Vec<Table> },
}

fn bucket_state(index: &Index, bucket: u32, expected: &str) -> Result<BucketKb> {
    let mut missing = Vec::new();
    let mut other = Vec::new();
    for table in KB_BUCKET_TABLES {
        match output_fingerprint(&index.bucket_path(table, bucket), table)? {
            // Absent, or unreadable (a merge writes it again either way).
            None => missing.push(table),
            Some(fp) if fp != expected => other.push(table),
            Some(_) => {}
        }
    }
    Ok(if missing.is_empty() && other.is_empty() {
        BucketKb::UpToDate
    } else if missing.len() == KB_BUCKET_TABLES.len() {
        BucketKb::Missing
    } else {
        BucketKb::Stale { missing, other }
    })
}

/// What a merge of the whole index with `model`'s vectors would do with the kb now (nothing is
/// written).
pub fn survey(index: &Index, model: &str) -> Result<KbState> {
    match check_complete(index, Shard::ALL) {
        Err(Error::Index { problem: IndexProblem::StagesIncomplete { problems }, .. }) => {
            return Ok(KbState::Incomplete(problems));
        }
        other => other?,
    }
    let mut states = Vec::new();
    for bucket in (0..index.settings().buckets).filter(|&b| index.bucket_path(Table::Documents, b).is_file()) {
        let (expected, _) = bucket_fingerprint(index, model, bucket)?;
        states.push((bucket, bucket_state(index, bucket, &expected)?));
    }
    let thresholds = output_fingerprint(&index.kb_part(Table::KbThresholds), Table::KbThresholds)?;
    if states.iter().all(|(_, s)| *s == BucketKb::Missing) && thresholds.is_none() {
        return Ok(KbState::Missing);
    }
    let names = |tables: &[Table]| tables.iter().map(|t| t.dir()).collect::<Vec<_>>().join(", ");
    let mut reasons: Vec<String> = states
        .iter()
        .filter_map(|(bucket, state)| match state {
            BucketKb::UpToDate => None,
            BucketKb::Missing => Some(format!("bucket {bucket:04}: not merged yet (documents added since)")),
            BucketKb::Stale { missing, other } => {
                let mut why = Vec::new();
                if !missing.is_empty() {
                    why.push(format!("no readable part of {} (deleted, damaged or never written)", names(missing)));
                }
                if !other.is_empty() {
                    why.push(format!("{} merged from other tables (documents or stages changed since)", names(other)));
                }
                Some(format!("bucket {bucket:04}: {}", why.join("; ")))
            }
        })
        .collect();
    if reasons.is_empty() {
        match thresholds {
            None => reasons.push(format!("{}: missing", Table::KbThresholds.dir())),
            Some(fp) if fp != kb_parts_fingerprint(index, &KB_BUCKET_TABLES)? => {
                reasons.push(format!("{}: of another merge than the kb's parts", Table::KbThresholds.dir()))
            }
            Some(_) => return Ok(KbState::UpToDate),
        }
    }
    if reasons.len() > MAX_REASONS {
        let more = reasons.len() - MAX_REASONS;
        reasons.truncate(MAX_REASONS);
        reasons.push(format!("… and {more} more buckets"));
    }
    Ok(KbState::Stale(reasons))
}

/// Checks that every per-document stage has finished on every bucket: a bucket with documents
/// has a part of every per-document table, and a bucket without documents has none (the stages
/// remove a bucket's rows when its documents are pruned). A merge of an index with a stage killed
/// midway, or not rerun after documents were added or removed, would build a kb that silently
/// lacks or keeps documents.
fn check_complete(index: &Index, shard: Shard) -> Result<()> {
    let with_documents: Vec<(u32, bool)> =
        index.shard_buckets(shard).map(|b| (b, index.bucket_path(Table::Documents, b).is_file())).collect();
    let mut problems = Vec::new();
    for table in inputs().filter(|&t| t != Table::Documents) {
        let (mut missing, mut stale) = (Vec::new(), Vec::new());
        for &(bucket, has_documents) in &with_documents {
            match (has_documents, index.bucket_path(table, bucket).is_file()) {
                (true, false) => missing.push(bucket),
                (false, true) => stale.push(bucket),
                _ => {}
            }
        }
        let list = |buckets: &[u32]| {
            let shown: Vec<String> = buckets.iter().take(5).map(|b| format!("{b:04}")).collect();
            let more = if buckets.len() > 5 { ", …" } else { "" };
            format!("{} bucket(s): {}{more}", buckets.len(), shown.join(", "))
        };
        if !missing.is_empty() {
            problems.push(format!("{table} lacks the rows of documents in {}", list(&missing)));
        }
        if !stale.is_empty() {
            problems.push(format!("{table} keeps rows of removed documents in {}", list(&stale)));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(Error::index(index.root(), IndexProblem::StagesIncomplete { problems }))
}

/// Checks that the units to merge have vectors of `model` (the embed stage ran with it).
async fn check_vectors(sql: &IndexSql, index: &Index, model: &str) -> Result<()> {
    let query = format!(
        "SELECT (SELECT count(*) FROM hyperedges) AS units, \
                (SELECT count(*) FROM embeddings WHERE {} = '{}') AS vectors",
        col::MODEL,
        model.replace('\'', "''")
    );
    let batches = sql.context().sql(&query).await?.collect().await?;
    let count = |name| -> Result<i64> {
        Ok(batches.first().map(|b| typed::<Int64Array>(b, name).map(|a| a.value(0))).transpose()?.unwrap_or(0))
    };
    let (units, vectors) = (count("units")?, count("vectors")?);
    if units > 0 && vectors == 0 {
        let problem = IndexProblem::MissingVectors {
            table: Table::Hyperedges.to_string(),
            missing: units as usize,
            rows: units as usize,
            model: model.to_owned(),
        };
        return Err(Error::index(index.root(), problem));
    }
    Ok(())
}

/// The samples the hyperedges', edges' and chunks' thresholds are derived from, read from the
/// kb of `model`'s vectors: the vectors come from the vector files of kb `kb` when they are
/// current (the merge writes them first), and are decoded from Parquet otherwise. Each unit is
/// offered under its document and id; a sample keeps the units of lowest keys, whatever the order
/// of the rows, and holds only their vectors.
pub fn threshold_samples(index: &Index, model: &str, kb: Option<&str>) -> Result<Vec<(Unit, ThresholdSample)>> {
    let mut samples = Vec::new();
    for (unit, table, id) in [
        (Unit::Hyperedge, Table::KbHyperedges, col::HYPEREDGE_ID),
        (Unit::Edge, Table::KbEdges, col::EDGE_ID),
        (Unit::Chunk, Table::KbChunks, col::CHUNK_IDX),
    ] {
        let read = read_kb_table(index, table, &[col::DOC_ID, id], (model, Precision::F32), kb)?;
        let Floats::F32(vectors) = &read.vectors else {
            return Err(Error::Internal(format!("{table}: vectors read at half precision")));
        };
        let docs = string_column(&read.batch, col::DOC_ID)?;
        // Chunk positions are numbers: every id is read as text.
        let ids = read.batch.column_by_name(id).ok_or_else(|| Error::Internal(format!("{table}: no `{id}` read")))?;
        let ids = arrow::compute::cast(ids, &DataType::Utf8)?;
        let ids = ids.as_string::<i32>();
        let mut sample = ThresholdSample::default();
        let mut key = String::new();
        for (row, vector) in vectors.chunks_exact(read.dim.max(1)).enumerate().take(read.batch.num_rows()) {
            key.clear();
            key.push_str(docs.value(row));
            key.push('#');
            key.push_str(ids.value(row));
            sample.offer(&key, vector);
        }
        samples.push((unit, sample));
    }
    Ok(samples)
}

fn thresholds_batch(model: &str, thresholds: &[(Unit, f32, usize)]) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(
        Table::KbThresholds.schema(),
        vec![
            Arc::new(thresholds.iter().map(|t| Some(t.0.name())).collect::<StringArray>()),
            Arc::new(StringArray::from(vec![model; thresholds.len()])),
            Arc::new(thresholds.iter().map(|t| f64::from(t.1)).collect::<Float64Array>()),
            Arc::new(Float64Array::from(vec![DERIVED_PERCENTILE; thresholds.len()])),
            Arc::new(thresholds.iter().map(|t| t.2 as i64).collect::<Int64Array>()),
        ],
    )?)
}

/// Gives query results the exact field names and nullability of the kb table (DataFusion
/// marks computed columns nullable and may name them after the expression).
fn conform(table: Table, batches: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
    let template = table.schema();
    batches
        .into_iter()
        .map(|batch| {
            let fields: Vec<Field> = template
                .fields()
                .iter()
                .zip(batch.schema().fields())
                .map(|(want, got)| {
                    Field::new(
                        want.name(),
                        got.data_type().clone(),
                        want.is_nullable() || got.is_nullable() && want.is_nullable(),
                    )
                })
                .collect();
            for (f, column) in fields.iter().zip(batch.columns()) {
                if !f.is_nullable() && column.null_count() > 0 {
                    return Err(Error::Internal(format!("kb table {table}: column `{}` has nulls", f.name())));
                }
            }
            Ok(RecordBatch::try_new(Arc::new(arrow::datatypes::Schema::new(fields)), batch.columns().to_vec())?)
        })
        .collect()
}
