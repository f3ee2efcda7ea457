//! flexstruct as a service: indexes kept loaded, asked over HTTP by any client (JSON endpoints,
//! and OpenAI's chat API), their documents added and deleted while they answer, and a web
//! explorer of answers, sources and the graph. The binary `flexstruct-serve` starts it.
//!
//! ```text
//! request ─▶ guard (in-flight limit, timeout, metrics, log) ─▶ handler ─▶ index (Served)
//!   questions ─▶ Batcher: workers answer queued questions in batches from the current Generation
//!   documents ─▶ Jobs ─▶ the index's writer: ingest / remove, the stages, the merge,
//!                        the next Generation loaded and swapped in
//! ```
#![warn(missing_docs)]

pub mod api;
pub mod auth;
pub mod batch;
pub mod documents;
pub mod error;
pub mod explorer;
pub mod generation;
pub mod graph;
pub mod jobs;
pub mod metrics;
pub mod served;
pub mod server;
pub mod system;

pub use server::{Limits, Server, router};

/// Writes one line to the server's log (stderr); a closed stderr is ignored.
pub fn log(line: &str) {
    use std::io::Write as _;
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ");
    let _ = writeln!(std::io::stderr(), "{now} {line}");
}

/// Now, in RFC 3339 (UTC, milliseconds).
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
