//! The flexstruct pipeline: every stage's logic, reusable and testable without the binaries.
//!
//! ```text
//!  corpus ──ingest──▶ documents ──chunk──▶ chunks ──extract──▶ items ──hypergraph──▶ hyperedges,
//!                                                                                  entities
//!        ──graph──▶ edges ──embed──▶ embeddings ──cluster──▶ clusters ──merge──▶ kb/* ──query──▶ answers
//! ```
//!
//! Every table is a folder of Parquet part files in an index folder ([`index`]); per-document
//! stages work bucket by bucket ([`stage`]) so that reruns skip what is up to date and shards
//! never write the same file. Stages present so far: [`ingest`], [`chunk`], [`extract`],
//! [`hypergraph`], [`graph`], [`embed`], [`cluster`], [`merge`], [`query`]; [`sql`] queries an index
//! read-only.
//!
//! ```
//! use flexstruct_pipeline::{chunk, tokens::TokenCounter};
//! let params = chunk::ChunkParams { ct_min: 3, ct_max: 8 };
//! let text = "First paragraph, rather short.\n\nSecond paragraph, also short.";
//! let chunks = chunk::partition(text, params, &TokenCounter::cl100k());
//! assert_eq!(chunks.len(), 2);
//! assert_eq!(&text[chunks[1].byte_start..chunks[1].byte_end], "Second paragraph, also short.");
//! ```
#![warn(missing_docs)]

pub mod chunk;
pub mod cluster;
pub mod config;
pub mod embed;
pub mod error;
pub mod eval;
pub mod extract;
pub mod failures;
pub mod graph;
pub mod hypergraph;
pub mod index;
pub mod ingest;
pub mod io;
pub mod llm;
pub mod merge;
pub mod query;
pub mod sql;
pub mod stage;
pub mod text;
pub mod tokens;

pub use error::{Error, Result};
