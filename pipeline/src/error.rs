//! The pipeline's error type, split by who is at fault: the input, the configuration, the index
//! on disk, or this program.

use std::path::PathBuf;

/// Result alias of the pipeline.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a pipeline call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration (file, environment or flags) is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// The configuration could not be loaded or parsed.
    #[error("invalid configuration")]
    ConfigLoad(#[source] Box<figment::Error>),

    /// The input given by the user (corpus path, question, query) is unusable as a whole.
    #[error("{0}")]
    Input(String),

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

    /// The index folder is not usable (missing table, wrong settings).
    #[error("index {path}: {message}")]
    Index {
        /// Index root.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },

    /// An external service (LLM or embedding endpoint) failed for good.
    #[error("external service failed: {0}")]
    External(String),

    /// A SQL statement was refused or failed.
    #[error("{0}")]
    Sql(String),

    /// DataFusion failed while planning or running a query.
    #[error("query failed")]
    DataFusion(#[from] Box<datafusion::error::DataFusionError>),

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
    /// Wraps an I/O error with the operation and path.
    pub fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { op, path, source }
    }

    /// Wraps a Parquet error with the operation and path.
    pub fn parquet(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(parquet::errors::ParquetError) -> Error {
        let path = path.into();
        move |source| Error::Parquet { op, path, source }
    }
}

impl From<datafusion::error::DataFusionError> for Error {
    fn from(e: datafusion::error::DataFusionError) -> Self {
        Error::DataFusion(Box::new(e))
    }
}
