//! The `manifest` table: one row per stage run, with what the run did ([`StageMetrics`]) and the
//! configuration it ran with. One part file per run, so concurrent shard jobs never write the
//! same file.

use std::sync::Arc;

use arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};
use flexstruct_schemas::Table;
use serde::Serialize;

use super::failures::Failure;
use super::index::Index;
use super::parquet::write_part;
use crate::core::Result;

/// What a stage run did: the counts every stage has, and `details` of the stage's own (a typed
/// struct per stage, serialised into the manifest's `inputs` column beside the inputs).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct StageMetrics<D = NoDetails> {
    /// Stage name.
    pub stage: String,
    /// Shard, as K/N.
    pub shard: String,
    /// Inputs read (tables or paths).
    pub inputs: Vec<String>,
    /// Input rows the stage is responsible for (e.g. documents of the shard).
    pub rows_in: u64,
    /// Output rows of the shard after the run (written or kept).
    pub rows_out: u64,
    /// Units (documents) processed in this run.
    pub units_done: u64,
    /// Units skipped because their outputs were up to date.
    pub units_skipped: u64,
    /// Units that ended as rows in `failures`.
    pub units_failed: u64,
    /// Units whose input disappeared and whose outputs were removed.
    pub units_removed: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// The stage's own figures.
    pub details: D,
    /// The failures of this run, for the binaries to report (not repeated in the manifest).
    #[serde(skip)]
    pub failures: Vec<Failure>,
}

/// The details of a stage that has none of its own.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct NoDetails {}

impl<D> StageMetrics<D> {
    /// The same counts with other details.
    pub fn with_details<E>(self, details: E) -> StageMetrics<E> {
        StageMetrics {
            stage: self.stage,
            shard: self.shard,
            inputs: self.inputs,
            rows_in: self.rows_in,
            rows_out: self.rows_out,
            units_done: self.units_done,
            units_skipped: self.units_skipped,
            units_failed: self.units_failed,
            units_removed: self.units_removed,
            seconds: self.seconds,
            details,
            failures: self.failures,
        }
    }
}

impl<D: Serialize> StageMetrics<D> {
    /// The same metrics with the details as JSON, so that runs of different stages can be kept
    /// together (a sibling index's rebuild).
    pub fn into_json(self) -> Result<StageMetrics<serde_json::Value>> {
        let details = serde_json::to_value(&self.details)?;
        Ok(self.with_details(details))
    }
}

/// A tag unique to this process's run (time and process id), for append-only parts.
pub fn run_tag() -> &'static str {
    static TAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAG.get_or_init(|| format!("{}-{}", chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ"), std::process::id()))
}

/// Appends a run record to the index's `manifest` table. `config` is the whole configuration
/// the run was made with (serialised as JSON into the row).
pub fn record_run<D: Serialize>(index: &Index, metrics: &StageMetrics<D>, config: &impl Serialize) -> Result<()> {
    let started_at = chrono::Utc::now() - chrono::Duration::milliseconds((metrics.seconds * 1000.0) as i64);
    let run_id = format!(
        "{}-{}-{}-{}",
        started_at.format("%Y%m%dT%H%M%S%.3fZ"),
        metrics.stage,
        metrics.shard.replace('/', "of"),
        std::process::id()
    );
    let status = if metrics.units_failed > 0 { "partial" } else { "ok" };
    let inputs = serde_json::json!({ "inputs": metrics.inputs, "details": metrics.details, "units_removed": metrics.units_removed });
    let str_col = |v: &str| Arc::new(StringArray::from(vec![v])) as _;
    let int_col = |v: u64| Arc::new(Int64Array::from(vec![v as i64])) as _;
    let batch = RecordBatch::try_new(
        Table::Manifest.schema(),
        vec![
            str_col(&run_id),
            str_col(&metrics.stage),
            str_col(&metrics.shard),
            str_col(&started_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
            Arc::new(Float64Array::from(vec![metrics.seconds])),
            str_col(&inputs.to_string()),
            str_col(&serde_json::to_string(config)?),
            int_col(metrics.rows_in),
            int_col(metrics.rows_out),
            int_col(metrics.units_done),
            int_col(metrics.units_skipped),
            int_col(metrics.units_failed),
            str_col(status),
        ],
    )?;
    let path = index.table_dir(Table::Manifest).join(format!("part-{run_id}.parquet"));
    write_part(&path, Table::Manifest, &run_id, &[batch])
}
