//! Runs the real stage binaries on small corpora in temporary folders.

mod util;

mod ingest_chunk;
mod sql;
