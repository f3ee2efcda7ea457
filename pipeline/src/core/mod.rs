//! The bottom layer: what every other module shares and nothing here depends on — errors, ids
//! and hashing, text normalisation, unit kinds, token counting, embedding model identities, the
//! rules-or-LLM choice, thread counts. It imports no other module of this crate (a test checks
//! it, with the rest of the dependency rule: ARCHITECTURE.md).

pub mod backend;
pub mod dominance;
pub mod error;
pub mod heap;
pub mod ids;
pub mod models;
pub mod names;
pub mod text;
pub mod threads;
pub mod tokens;
pub mod units;
pub mod words;

pub use error::{BoxError, Error, IndexProblem, Result, chain_message};
