//! The service over real HTTP on loopback ports: every endpoint and its errors, updates while
//! questions are answered, tokens and limits, a bounded load, and a server killed mid-update.
#![allow(clippy::unwrap_used)]

mod util;

mod api;
mod binary;
mod documents;
mod load;
