//! The flexstruct pipeline: every stage's logic, reusable and testable without the binaries.
//!
//! ```text
//!  corpus ──ingest──▶ documents ──chunk──▶ chunks ──extract──▶ items ──hypergraph──▶ hyperedges,
//!                                                                                  entities
//!        ──graph──▶ edges ──embed──▶ embeddings ──cluster──▶ clusters ──merge──▶ kb/* ──query──▶ answers
//! ```
//!
//! The crate is layered; a module imports only the layers below it (a test holds the rule):
//!
//! ```text
//!  compose · config · eval            the composition root, the whole configuration, evaluation
//!  stages/{ingest … merge} · query    one folder per stage; the query stage over kb/
//!  llm · models · rules               LLM client and prompts, embedding models, rules heuristics
//!  io                                 index folder, Parquet parts, log tables, SQL
//!  core                               errors, ids, text, names, units, tokens, model ids, backends
//! ```
//!
//! Every table is a folder of Parquet part files in an index folder ([`io::index`]);
//! per-document stages work bucket by bucket ([`stages::driver`]) so that reruns skip what is
//! up to date and shards never write the same file. Capabilities that can be the rules or an LLM
//! are traits with both backends; [`compose`] picks them from the configuration.
//!
//! ```
//! use flexstruct_pipeline::core::tokens::TokenCounter;
//! use flexstruct_pipeline::stages::chunk;
//! let params = chunk::ChunkParams { ct_min: 3, ct_max: 8 };
//! let text = "First paragraph, rather short.\n\nSecond paragraph, also short.";
//! let chunks = chunk::partition(text, params, &TokenCounter::cl100k());
//! assert_eq!(chunks.len(), 2);
//! assert_eq!(&text[chunks[1].byte_start..chunks[1].byte_end], "Second paragraph, also short.");
//! ```
#![warn(missing_docs)]

pub mod compose;
pub mod config;
pub mod core;
pub mod eval;
pub mod io;
pub mod llm;
pub mod models;
pub mod query;
pub mod rules;
pub mod stages;

/// Settings of the property-based fuzzing of the parsers users feed (the `fuzz_*` tests beside
/// each parser): 64 cases each in `make test`, `PROPTEST_CASES` of them in `make fuzz`. A failing
/// case is kept by proptest in `proptest-regressions/` beside the test and replayed first.
#[cfg(test)]
pub(crate) fn fuzz_config() -> proptest::test_runner::Config {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    proptest::test_runner::Config { cases, ..proptest::test_runner::Config::default() }
}

pub use crate::core::{Error, Result};
