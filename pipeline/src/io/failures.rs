//! The `failures` table: every unit that did not complete, so that nothing is lost silently and
//! a rerun knows what to retry.

use std::sync::Arc;

use arrow::array::{RecordBatch, StringArray};
use flexstruct_schemas::Table;
use serde::Serialize;

use super::files::remove_file;
use super::index::Index;
use super::parquet::write_part;
use crate::core::Result;

/// What went wrong with a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum FailureKind {
    Unreadable,
    InvalidUtf8,
    Binary,
    Empty,
    TooLarge,
    MalformedJson,
    MissingText,
    InvalidField,
    DuplicateId,
    UnsupportedFile,
    SymlinkLoop,
    LlmError,
    Truncated,
    Unparseable,
}

impl FailureKind {
    /// The value stored in the `kind` column.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Unreadable => "unreadable",
            FailureKind::InvalidUtf8 => "invalid_utf8",
            FailureKind::Binary => "binary",
            FailureKind::Empty => "empty",
            FailureKind::TooLarge => "too_large",
            FailureKind::MalformedJson => "malformed_json",
            FailureKind::MissingText => "missing_text",
            FailureKind::InvalidField => "invalid_field",
            FailureKind::DuplicateId => "duplicate_id",
            FailureKind::UnsupportedFile => "unsupported_file",
            FailureKind::SymlinkLoop => "symlink_loop",
            FailureKind::LlmError => "llm_error",
            FailureKind::Truncated => "truncated",
            FailureKind::Unparseable => "unparseable",
        }
    }
}

/// Why one unit (a chunk, an entity, an anchor) could not be processed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitError {
    /// Failure kind for the `failures` table.
    pub kind: FailureKind,
    /// Message for a person.
    pub message: String,
}

/// One unit that did not complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// Stage that failed.
    pub stage: String,
    /// Document concerned, when known.
    pub doc_id: Option<String>,
    /// The unit: `file:line`, `file#element`, `chunk 3`, …
    pub unit: String,
    /// What went wrong.
    pub kind: FailureKind,
    /// A message for a person, naming the file, row or field.
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.unit, self.message)
    }
}

/// The failures as a batch of the `failures` table.
pub fn to_batch(failures: &[Failure]) -> Result<RecordBatch> {
    let strings = |f: fn(&Failure) -> Option<&str>| Arc::new(failures.iter().map(f).collect::<StringArray>()) as _;
    Ok(RecordBatch::try_new(
        Table::Failures.schema(),
        vec![
            strings(|f| Some(&f.stage)),
            strings(|f| f.doc_id.as_deref()),
            strings(|f| Some(&f.unit)),
            strings(|f| Some(f.kind.as_str())),
            strings(|f| Some(&f.message)),
        ],
    )?)
}

/// Replaces the failures recorded by `stage` for `scope` (a bucket or a shard) with `failures`;
/// no failures removes the part.
pub fn replace(index: &Index, stage: &str, scope: &str, failures: &[Failure]) -> Result<()> {
    let path = part_path(index, stage, scope);
    if failures.is_empty() {
        return remove_file(&path);
    }
    write_part(&path, Table::Failures, "", &[to_batch(failures)?])
}

/// Whether `stage` recorded failures for `scope`.
pub fn any(index: &Index, stage: &str, scope: &str) -> bool {
    part_path(index, stage, scope).exists()
}

/// The scopes `stage` recorded failures for.
pub fn scopes(index: &Index, stage: &str) -> Result<Vec<String>> {
    let prefix = format!("part-{stage}-");
    Ok(index
        .parts(Table::Failures)?
        .iter()
        .filter_map(|p| p.file_name()?.to_str()?.strip_prefix(&prefix)?.strip_suffix(".parquet").map(str::to_owned))
        .collect())
}

fn part_path(index: &Index, stage: &str, scope: &str) -> std::path::PathBuf {
    index.table_dir(Table::Failures).join(format!("part-{stage}-{scope}.parquet"))
}
