//! Runs the real stage binaries on small corpora in temporary folders.
#![allow(clippy::unwrap_used)]

mod util;

mod construct;
mod eval;
mod hardening;
mod ingest_chunk;
mod kb;
mod llm_extract;
mod paths;
mod query;
mod sql;
mod status;
