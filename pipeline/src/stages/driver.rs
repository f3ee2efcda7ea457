//! What every stage shares: the run context, progress reporting, and the driver of per-document
//! stages that work bucket by bucket.
//!
//! A per-document stage reads bucket b of its input table and writes bucket b of each output
//! table. Every output part stores a fingerprint of (stage, stage version, stage config, input
//! part fingerprint); a rerun skips a bucket whose outputs all carry the expected fingerprint and
//! that recorded no failure, so an unchanged rerun does no work and changes no file, a changed
//! document reruns its bucket only, and failed units are retried.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use arrow::array::RecordBatch;
use flexstruct_schemas::Table;
use rayon::prelude::*;
use serde::Serialize;

use crate::core::ids::fingerprint;
use crate::core::{Error, Result};
use crate::io::calls::append_calls;
use crate::io::failures::{self, Failure, FailureKind};
use crate::io::files::remove_file;
use crate::io::parquet::{
    output_fingerprint, part_fingerprint, part_row_count, read_part, row_count, string_column, write_part,
};
use crate::io::{CallRecord, Index, Shard, StageMetrics};

/// Receives progress of a stage (the binaries draw a progress bar; the library never prints).
pub trait Progress: Sync {
    /// The stage has `total` units of work (documents) in front of it.
    fn start(&self, total: u64);
    /// `n` more units are done.
    fn advance(&self, n: u64);
    /// LLM tokens spent by requests that were not answered from the cache.
    fn tokens(&self, _prompt: u64, _completion: u64) {}
}

/// Progress that goes nowhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _total: u64) {}
    fn advance(&self, _n: u64) {}
}

/// Everything a stage run needs besides its own configuration section and backends.
pub struct RunContext<'a> {
    /// The index folder.
    pub index: Index,
    /// Which documents this run owns.
    pub shard: Shard,
    /// Where progress goes.
    pub progress: &'a dyn Progress,
    /// When set, the run only surveys: each bucket's state is recorded here, nothing is
    /// processed, written or removed.
    pub survey: Option<&'a Survey>,
}

/// The state of one bucket of a per-document stage: what its next run would do with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BucketState {
    /// Every output was computed from exactly the current inputs and configuration, and no unit
    /// failed: the next run skips it.
    UpToDate,
    /// Outputs exist but from other inputs, configuration or stage version: the next run redoes it.
    Stale,
    /// The bucket has documents but no outputs yet.
    Missing,
    /// Units failed in the last run (rows of `failures`): the next run retries it.
    Failed,
    /// Outputs of documents that are gone: the next run removes them.
    Orphaned,
}

/// Bucket states recorded by a surveying run ([`RunContext::survey`]), and the parts it could
/// not read.
#[derive(Debug, Default)]
pub struct Survey {
    states: std::sync::Mutex<Vec<(&'static str, u32, BucketState)>>,
    damaged: std::sync::Mutex<Vec<(PathBuf, String)>>,
}

impl Survey {
    /// Records a part that cannot be read as a part of its table (truncated, damaged, or of
    /// another layout), with why.
    pub fn damaged(&self, path: &Path, why: String) -> Result<()> {
        self.damaged.lock().map_err(|_| Error::Internal("survey lock poisoned".into()))?.push((path.to_owned(), why));
        Ok(())
    }

    /// The parts recorded as damaged, each once, sorted.
    pub fn damaged_parts(&self) -> Result<Vec<(PathBuf, String)>> {
        let mut parts = self.damaged.lock().map_err(|_| Error::Internal("survey lock poisoned".into()))?.clone();
        parts.sort();
        parts.dedup_by(|a, b| a.0 == b.0);
        Ok(parts)
    }

    fn record(&self, stage: &'static str, bucket: u32, state: BucketState) -> Result<()> {
        self.states.lock().map_err(|_| Error::Internal("survey lock poisoned".into()))?.push((stage, bucket, state));
        Ok(())
    }

    /// The recorded (stage, bucket, state), sorted.
    pub fn states(&self) -> Result<Vec<(&'static str, u32, BucketState)>> {
        let mut states = self.states.lock().map_err(|_| Error::Internal("survey lock poisoned".into()))?.clone();
        states.sort();
        Ok(states)
    }
}

impl RunContext<'_> {
    /// What `read` gives from the part at `path`; when surveying, a part that cannot be read
    /// (a Parquet or layout error) is recorded as damaged and gives None instead of an error, so
    /// that a survey says what a run would stop at.
    pub fn unless_damaged<T>(&self, path: &Path, read: impl FnOnce() -> Result<T>) -> Result<Option<T>> {
        match (read(), self.survey) {
            (Err(e @ (Error::Parquet { .. } | Error::Schema(_))), Some(survey)) => {
                survey.damaged(path, crate::core::error::chain_message(&e))?;
                Ok(None)
            }
            (result, _) => result.map(Some),
        }
    }
}

impl std::fmt::Debug for RunContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunContext")
            .field("index", &self.index)
            .field("shard", &self.shard)
            .field("survey", &self.survey.is_some())
            .finish_non_exhaustive()
    }
}

/// What processing one bucket produced.
#[derive(Debug, Default)]
pub struct BucketOutput {
    /// Rows per output table (in the stage's output order).
    pub tables: Vec<Vec<RecordBatch>>,
    /// Units that failed.
    pub failures: Vec<Failure>,
    /// LLM calls made for the bucket (appended to `llm_calls`).
    pub llm_calls: Vec<CallRecord>,
}

/// Declaration of a per-document stage for [`run_buckets`].
#[derive(Debug, Clone)]
pub struct BucketStage {
    /// Stage name (manifest, failures).
    pub name: &'static str,
    /// Bump when the stage's output for the same input and config changes.
    pub version: &'static str,
    /// Fingerprint of what the stage's output depends on besides its inputs: its configuration
    /// section and the identity of its backend ([`crate::core::ids::value_fingerprint`]).
    pub config_fingerprint: String,
    /// Input tables (one part per bucket each). The rows of the first are the stage's units;
    /// a bucket without a part of the first table has no work and its outputs are removed.
    pub inputs: Vec<Table>,
    /// Output tables, in the order of [`BucketOutput::tables`].
    pub outputs: Vec<Table>,
}

enum BucketResult {
    Skipped {
        units: u64,
        rows_out: u64,
    },
    Done {
        units: u64,
        rows_out: u64,
        failures: Vec<Failure>,
    },
    /// The whole bucket failed (an endpoint down): its outputs are left as they were and its
    /// documents are failure rows, retried by the next run.
    Failed {
        units: u64,
        failures: Vec<Failure>,
    },
    Removed,
    Empty,
}

/// Runs a per-document stage over the buckets of the context's shard, in parallel.
/// `process` gets the bucket number and the rows of that bucket of each input table (in the
/// declared order) and returns the rows of each output table.
pub fn run_buckets<F>(ctx: &RunContext<'_>, stage: &BucketStage, process: F) -> Result<StageMetrics>
where
    F: Fn(u32, &[Vec<RecordBatch>]) -> Result<BucketOutput> + Sync,
{
    let started = Instant::now();
    ctx.index.check_shard(ctx.shard)?;
    let buckets: Vec<u32> = ctx.index.shard_buckets(ctx.shard).collect();
    let mut total_units = 0;
    for &bucket in &buckets {
        let path = ctx.index.bucket_path(stage.inputs[0], bucket);
        total_units += ctx.unless_damaged(&path, || part_row_count(&path))?.unwrap_or(0);
    }
    ctx.progress.start(total_units);
    let failed_units = AtomicU64::new(0);

    let results: Vec<BucketResult> = buckets
        .par_iter()
        .map(|&bucket| {
            let result = run_bucket(ctx, stage, bucket, &process)?;
            match &result {
                BucketResult::Skipped { units, .. }
                | BucketResult::Done { units, .. }
                | BucketResult::Failed { units, .. } => ctx.progress.advance(*units),
                BucketResult::Removed | BucketResult::Empty => {}
            }
            match &result {
                BucketResult::Done { failures, .. } => {
                    failed_units.fetch_add(failures.len() as u64, Ordering::Relaxed);
                }
                BucketResult::Failed { units, .. } => {
                    failed_units.fetch_add(*units, Ordering::Relaxed);
                }
                _ => {}
            }
            Ok(result)
        })
        .collect::<Result<_>>()?;

    let mut metrics = StageMetrics {
        stage: stage.name.to_owned(),
        shard: ctx.shard.to_string(),
        inputs: stage.inputs.iter().map(|t| t.dir().to_owned()).collect(),
        rows_in: total_units,
        units_failed: failed_units.into_inner(),
        ..StageMetrics::default()
    };
    for result in results {
        match result {
            BucketResult::Skipped { units, rows_out } => {
                metrics.units_skipped += units;
                metrics.rows_out += rows_out;
            }
            BucketResult::Done { units, rows_out, failures } => {
                // Done means succeeded: `done + up to date + failed` adds up to the units in.
                metrics.units_done += units.saturating_sub(failures.len() as u64);
                metrics.rows_out += rows_out;
                metrics.failures.extend(failures);
            }
            BucketResult::Failed { failures, .. } => metrics.failures.extend(failures),
            BucketResult::Removed => metrics.units_removed += 1,
            BucketResult::Empty => {}
        }
    }
    metrics.seconds = started.elapsed().as_secs_f64();
    Ok(metrics)
}

fn run_bucket<F>(ctx: &RunContext<'_>, stage: &BucketStage, bucket: u32, process: &F) -> Result<BucketResult>
where
    F: Fn(u32, &[Vec<RecordBatch>]) -> Result<BucketOutput>,
{
    let index = &ctx.index;
    let inputs: Vec<PathBuf> = stage.inputs.iter().map(|&t| index.bucket_path(t, bucket)).collect();
    let outputs: Vec<PathBuf> = stage.outputs.iter().map(|&t| index.bucket_path(t, bucket)).collect();
    let scope = format!("{bucket:04}");
    // A survey marks a bucket with an input it cannot read to do: a run stops there, naming it.
    let to_do = |survey: Option<&Survey>| match survey {
        Some(survey) => survey.record(stage.name, bucket, BucketState::Stale).map(|()| BucketResult::Empty),
        None => Err(Error::Internal("a damaged part outside a survey".into())),
    };
    let Some(primary) = ctx.unless_damaged(&inputs[0], || part_fingerprint(&inputs[0], stage.inputs[0]))? else {
        return to_do(ctx.survey);
    };
    let Some(primary_fp) = primary else {
        if let Some(survey) = ctx.survey {
            if outputs.iter().any(|p| p.exists()) {
                survey.record(stage.name, bucket, BucketState::Orphaned)?;
            }
            return Ok(BucketResult::Empty);
        }
        // The documents of this bucket are gone: so are their outputs.
        let mut removed = false;
        for path in &outputs {
            removed |= path.exists();
            remove_file(path)?;
        }
        failures::replace(index, stage.name, &scope, &[])?;
        return Ok(if removed { BucketResult::Removed } else { BucketResult::Empty });
    };
    let mut parts = vec![stage.name.to_owned(), stage.version.to_owned(), stage.config_fingerprint.clone(), primary_fp];
    for (path, &table) in inputs.iter().zip(&stage.inputs).skip(1) {
        let Some(part) = ctx.unless_damaged(path, || part_fingerprint(path, table))? else {
            return to_do(ctx.survey);
        };
        parts.push(part.unwrap_or_default());
    }
    let expected = fingerprint(&parts.iter().map(String::as_str).collect::<Vec<_>>());
    let Some(units) = ctx.unless_damaged(&inputs[0], || part_row_count(&inputs[0]))? else {
        return to_do(ctx.survey);
    };

    // Up to date: no failure to retry and every output computed from exactly this input (an
    // output of an older table layout is recomputed).
    let mut up_to_date = !failures::any(index, stage.name, &scope);
    for (path, &table) in outputs.iter().zip(&stage.outputs) {
        up_to_date = up_to_date && output_fingerprint(path, table)?.as_deref() == Some(expected.as_str());
    }
    if let Some(survey) = ctx.survey {
        let state = if failures::any(index, stage.name, &scope) {
            BucketState::Failed
        } else if up_to_date {
            BucketState::UpToDate
        } else if outputs.iter().all(|p| !p.exists()) {
            BucketState::Missing
        } else {
            BucketState::Stale
        };
        survey.record(stage.name, bucket, state)?;
        return Ok(BucketResult::Skipped { units, rows_out: 0 });
    }
    if up_to_date {
        let rows_out = outputs.first().map_or(Ok(0), |p| part_row_count(p))?;
        return Ok(BucketResult::Skipped { units, rows_out });
    }

    let mut rows = Vec::with_capacity(inputs.len());
    for (path, &table) in inputs.iter().zip(&stage.inputs) {
        rows.push(if path.exists() { read_part(path, table)? } else { Vec::new() });
    }
    let output = match process(bucket, &rows) {
        Ok(output) => output,
        Err(e) if e.is_service_failure() => {
            // The other buckets go on; this one is recorded, document by document, and retried.
            let failures = bucket_failures(stage.name, stage.inputs[0], &rows[0], &e)?;
            failures::replace(index, stage.name, &scope, &failures)?;
            return Ok(BucketResult::Failed { units, failures });
        }
        Err(e) => return Err(e),
    };
    if output.tables.len() != stage.outputs.len() {
        return Err(Error::Internal(format!(
            "stage {} returned {} tables, declared {}",
            stage.name,
            output.tables.len(),
            stage.outputs.len()
        )));
    }
    // Outputs with failed units are not what the inputs give: they carry a fingerprint of their
    // own, so that once a rerun completes them, the stages after see a changed input and redo
    // the bucket (with the complete outputs' fingerprint, they skipped it and kept what was
    // built without the failed units).
    let written = incomplete_fingerprint(&expected, &output.failures);
    for ((path, &table), batches) in outputs.iter().zip(&stage.outputs).zip(&output.tables) {
        write_part(path, table, &written, batches)?;
    }
    let rows_out = output.tables.first().map_or(0, |b| row_count(b) as u64);
    failures::replace(index, stage.name, &scope, &output.failures)?;
    if !output.llm_calls.is_empty() {
        let fresh = output.llm_calls.iter().filter(|c| !c.cached);
        let (prompt, completion) = fresh.fold((0, 0), |(p, c), r| (p + r.prompt_tokens, c + r.completion_tokens));
        ctx.progress.tokens(prompt, completion);
        append_calls(index, stage.name, &scope, &output.llm_calls)?;
    }
    Ok(BucketResult::Done { units, rows_out, failures: output.failures })
}

/// The fingerprint of outputs computed from inputs of fingerprint `expected` with the units
/// `failures` failed: `expected` itself when none did.
fn incomplete_fingerprint(expected: &str, failures: &[Failure]) -> String {
    if failures.is_empty() {
        return expected.to_owned();
    }
    let mut parts = vec![expected, "incomplete"];
    parts.extend(failures.iter().map(|f| f.unit.as_str()));
    fingerprint(&parts)
}

/// One failure per document of a bucket whose processing failed as a whole.
fn bucket_failures(stage: &str, table: Table, rows: &[RecordBatch], error: &Error) -> Result<Vec<Failure>> {
    let mut docs = std::collections::BTreeSet::new();
    for batch in rows {
        docs.extend(string_column(batch, flexstruct_schemas::col::DOC_ID)?.iter().flatten().map(str::to_owned));
    }
    let message = crate::core::error::chain_message(error);
    Ok(docs
        .into_iter()
        .map(|doc_id| Failure {
            stage: stage.to_owned(),
            unit: format!("{table} of {doc_id}"),
            message: format!("{doc_id}: {message}"),
            doc_id: Some(doc_id),
            kind: FailureKind::LlmError,
        })
        .collect())
}
