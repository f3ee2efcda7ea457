//! The I/O layer: the index folder and its buckets ([`index`]), atomic file writes ([`files`]), locks between processes ([`lock`]),
//! Parquet part files ([`parquet`]), the merged kb's row order and vector files ([`kb`]) and its approximate indexes ([`ann`]), indexes on object storage ([`remote`]) and their kb's commit record ([`commit`]), the log tables every stage appends to ([`failures`], [`manifest`], [`calls`]),
//! and read-only SQL over an index ([`sql`]). It imports only the bottom layer ([`crate::core`]).

pub mod ann;
pub mod calls;
pub mod commit;
pub mod failures;
pub mod files;
pub mod index;
pub mod kb;
pub mod lock;
pub mod manifest;
pub mod parquet;
pub mod remote;
pub mod sql;

pub use calls::CallRecord;
pub use failures::{Failure, FailureKind, UnitError};
pub use index::{Index, IndexConfig, Shard};
pub use manifest::{NoDetails, StageMetrics, record_run};
pub use remote::{IndexLocation, LocalIndex, RemoteIndex, Selection, WorkingCopy};
