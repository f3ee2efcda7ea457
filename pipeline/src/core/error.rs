//! The pipeline's error type, split by who is at fault: the configuration, the input, the index
//! on disk, an external service or model, or this program. Every variant names what it is
//! about (key, file, table, column, model, service) and keeps its cause, so `{:#}` prints the
//! whole chain. Errors describe the problem; the binaries add what to do about it.

use std::path::PathBuf;

/// Result alias of the pipeline.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A cause of any type (candle, tokenizers, the LLM client), kept as the error's source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Everything a pipeline call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value that parses but makes no sense (or a combination of values).
    #[error("invalid configuration: {key}: {problem}")]
    Config {
        /// The key (`chunk.ct_max`), or the flag (`--shard`), at fault.
        key: String,
        /// What is wrong with it.
        problem: String,
    },

    /// The configuration could not be loaded or parsed.
    #[error("invalid configuration")]
    ConfigLoad(#[source] Box<figment::Error>),

    /// The input given by the user (corpus path, questions file, question) is unusable as a whole.
    #[error("{location}: {problem}")]
    Input {
        /// What is at fault: a path, `file:line`, or `question <id>`.
        location: String,
        /// What is wrong with it.
        problem: String,
    },

    /// A line of an input file is not valid JSON.
    #[error("{location}: not a JSON object")]
    InputJson {
        /// `file:line`.
        location: String,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },

    /// A file or folder could not be read or written.
    #[error("{path}: {op}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },

    /// An object of an index on object storage could not be listed, read, written or removed.
    #[error("{location}: {op}")]
    Store {
        /// What was being done.
        op: &'static str,
        /// The object or prefix (`s3://bucket/prefix/chunks/part-0003.parquet`).
        location: String,
        /// The cause.
        #[source]
        source: BoxError,
    },

    /// A Parquet file could not be read or written.
    #[error("{path}: {op}")]
    Parquet {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: parquet::errors::ParquetError,
    },

    /// A table on disk does not have the expected shape.
    #[error(transparent)]
    Schema(#[from] flexstruct_schemas::SchemaError),

    /// The index folder is not usable as it is (no kb, vectors of another model, …).
    #[error("index {path}")]
    Index {
        /// Index root.
        path: PathBuf,
        /// What is wrong.
        #[source]
        problem: IndexProblem,
    },

    /// An embedding model could not be loaded or run.
    #[error("embedding model {model}: {what}")]
    Model {
        /// Model name.
        model: String,
        /// What was being done (`loading model.safetensors`, `running the encoder`, …).
        what: String,
        /// The cause.
        #[source]
        source: BoxError,
    },

    /// A file of an in-process model is not where the configuration says.
    #[error("embedding model {model}: {} is missing", .path.display())]
    ModelMissing {
        /// Model name.
        model: String,
        /// The missing file.
        path: PathBuf,
    },

    /// An external service (LLM or embedding endpoint) failed for good.
    #[error("{service}: {what}")]
    External {
        /// The service: the endpoint's model and base URL.
        service: String,
        /// What was being asked.
        what: String,
        /// The cause.
        #[source]
        source: BoxError,
    },

    /// A chart could not be drawn into its file.
    #[error("{}: drawing a chart", .path.display())]
    Chart {
        /// The SVG file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: BoxError,
    },

    /// A SQL statement was refused or could not be parsed.
    #[error("{problem}")]
    Sql {
        /// The statement (abbreviated), when one is at fault.
        statement: Option<String>,
        /// What is wrong with it.
        problem: String,
        /// The cause, when DataFusion gave one.
        #[source]
        source: Option<Box<datafusion::error::DataFusionError>>,
    },

    /// DataFusion failed while planning or running a query.
    #[error("query failed")]
    DataFusion(#[from] Box<datafusion::error::DataFusionError>),

    /// A stage run inside another command (a sibling index rebuild) left failed units.
    #[error("stage {stage} of index {path}: {units} unit(s) failed (they are rows of its failures table)")]
    StageFailed {
        /// Stage name.
        stage: String,
        /// Index root.
        path: PathBuf,
        /// Units that failed.
        units: u64,
    },

    /// A thread pool or async runtime could not be started.
    #[error("cannot start {what}")]
    Runtime {
        /// Which pool or runtime.
        what: &'static str,
        /// The cause.
        #[source]
        source: BoxError,
    },

    /// A state this program should never reach: a bug, not a problem with the input.
    #[error("internal error: {0}")]
    Internal(String),

    /// An Arrow compute or build step failed: a bug in this program, not in the input.
    #[error("internal error while building Arrow data")]
    Arrow(#[from] arrow::error::ArrowError),

    /// JSON (de)serialisation of our own records failed.
    #[error("internal JSON error")]
    Json(#[from] serde_json::Error),
}

impl Error {
    /// Whether an external service (an LLM or embedding endpoint) failed for good: a failure of
    /// the units that needed it, not of the run.
    pub fn is_service_failure(&self) -> bool {
        matches!(self, Error::External { .. })
    }

    /// Whether DataFusion ran out of the memory its pool allows (a query over its limit).
    pub fn is_resources_exhausted(&self) -> bool {
        matches!(self, Error::DataFusion(e) if matches!(e.find_root(), datafusion::error::DataFusionError::ResourcesExhausted(_)))
    }
}

/// Why an index folder cannot be used as it is.
#[derive(Debug, thiserror::Error)]
pub enum IndexProblem {
    /// No settings file: the folder was never made an index.
    #[error("is not an index folder (no index.json)")]
    NotAnIndex(#[source] std::io::Error),
    /// The settings file cannot be read.
    #[error("index.json is damaged")]
    Damaged(#[source] serde_json::Error),
    /// The configuration asks for another bucket count than the index was created with.
    #[error(
        "was created with {created} buckets but the configuration asks for {asked}; the bucket count of an index cannot change"
    )]
    BucketsFixed {
        /// Buckets of the index.
        created: u32,
        /// Buckets the configuration asks for.
        asked: u32,
    },
    /// No merged knowledge base.
    #[error("has no merged knowledge base (kb/)")]
    NoKb,
    /// Some kb tables are missing.
    #[error("the knowledge base is incomplete ({} missing)", .missing.join(", "))]
    IncompleteKb {
        /// The missing tables.
        missing: Vec<String>,
    },
    /// Per-document stages have not all finished on the same documents.
    #[error("its stages have not all finished: {}", .problems.join("; "))]
    StagesIncomplete {
        /// What is missing or left over, per table.
        problems: Vec<String>,
    },
    /// The kb parts were not all written by one merge (a merge was interrupted, is running, or
    /// only some shards of a sharded merge have run since the last whole one).
    #[error(
        "the knowledge base mixes the output of different merges ({}): a merge was interrupted or has not finished",
        .groups.iter().map(|g| format!("[{g}]")).collect::<Vec<_>>().join(" vs ")
    )]
    MixedKb {
        /// The kb tables, grouped by the merge that wrote them.
        groups: Vec<String>,
    },
    /// Rows of a kb table have no vector of the configured model.
    #[error("{missing} of {rows} rows of {table} have no vector of embedding model `{model}`")]
    MissingVectors {
        /// The kb table.
        table: String,
        /// Rows without a vector.
        missing: usize,
        /// Rows of the table.
        rows: usize,
        /// The configured model.
        model: String,
    },
    /// The kb was embedded with another model than the configuration names.
    #[error("the kb was built with embedding model `{found}` ({table}), the configuration asks for `{configured}`")]
    ModelMismatch {
        /// The kb table.
        table: String,
        /// Model of its vectors.
        found: String,
        /// Model of the configuration (`embed.model`).
        configured: String,
    },
    /// `--mode paths` needs the path index, which is not there or is not the current kb's.
    #[error("{}", if *.stale {
        "its path index (kb/path_*) was built from another kb or with another embedding model than the current one"
    } else {
        "has no path index (kb/path_nodes, kb/paths, kb/path_members)"
    })]
    NoPathIndex {
        /// Whether a path index exists but is out of date.
        stale: bool,
    },
}

impl Error {
    /// Wraps an I/O error with the operation and path.
    pub fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { op, path, source }
    }

    /// Wraps an object store error with the operation and the object's URL.
    pub fn store<E: std::error::Error + Send + Sync + 'static>(
        op: &'static str,
        location: impl std::fmt::Display,
    ) -> impl FnOnce(E) -> Error {
        let location = location.to_string();
        move |source| Error::Store { op, location, source: Box::new(source) }
    }

    /// Wraps a Parquet error with the operation and path.
    pub fn parquet(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(parquet::errors::ParquetError) -> Error {
        let path = path.into();
        move |source| Error::Parquet { op, path, source }
    }

    /// A configuration error about `key`.
    pub fn config(key: impl Into<String>, problem: impl Into<String>) -> Error {
        Error::Config { key: key.into(), problem: problem.into() }
    }

    /// An input error at `location`.
    pub fn input(location: impl Into<String>, problem: impl Into<String>) -> Error {
        Error::Input { location: location.into(), problem: problem.into() }
    }

    /// An index problem at `path`.
    pub fn index(path: impl Into<PathBuf>, problem: IndexProblem) -> Error {
        Error::Index { path: path.into(), problem }
    }

    /// The index problem, when this is one.
    pub fn index_problem(&self) -> Option<&IndexProblem> {
        match self {
            Error::Index { problem, .. } => Some(problem),
            _ => None,
        }
    }
}

/// The message of an error followed by its causes, `: `-separated (what anyhow's `{:#}` prints),
/// for the binaries' error line, messages that go into tables (a failure row) and tests. A cause
/// whose text the message already holds is left out: DataFusion's errors repeat their cause in
/// their own text, which printed every schema error three times.
pub fn chain_message(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

impl From<datafusion::error::DataFusionError> for Error {
    fn from(e: datafusion::error::DataFusionError) -> Self {
        Error::DataFusion(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_the_message_already_holds_is_said_once() {
        let inner = datafusion::error::DataFusionError::Plan("table 'x' not found".into());
        let outer = datafusion::error::DataFusionError::Context("planning".into(), Box::new(inner));
        let e = Error::from(outer);
        let message = chain_message(&e);
        assert_eq!(message.matches("table 'x' not found").count(), 1, "{message}");
        assert!(message.starts_with("query failed: "), "{message}");
    }

    #[test]
    fn causes_are_kept_and_context_is_named() {
        let e = Error::index(
            "idx",
            IndexProblem::ModelMismatch { table: "kb/entities".into(), found: "a".into(), configured: "b".into() },
        );
        assert_eq!(
            chain_message(&e),
            "index idx: the kb was built with embedding model `a` (kb/entities), the configuration asks for `b`"
        );
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = Error::io("opening", "f.parquet")(io);
        assert_eq!(chain_message(&e), "f.parquet: opening: gone");
        assert_eq!(
            Error::config("chunk.ct_max", "must be at least 1").to_string(),
            "invalid configuration: chunk.ct_max: must be at least 1"
        );
    }
}
