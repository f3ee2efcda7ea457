//! The construction stages, one folder each, in pipeline order, and the driver they share.
//!
//! ```text
//!  corpus ──ingest──▶ documents ──chunk──▶ chunks ──extract──▶ items ──hypergraph──▶ hyperedges,
//!                                                                                  entities
//!        ──graph──▶ edges ──embed──▶ embeddings ──cluster──▶ clusters ──merge──▶ kb/*
//! ```
//!
//! Every stage folder has the same shape: `mod.rs` with the stage's name and version, its
//! `run` function and its metrics (the typed details of its manifest row), `config.rs` with
//! its section of the configuration (embed and merge have none of their own: the embedding model,
//! `[embed]`, is theirs), and a file per backend where the stage can run on the rules or an LLM
//! (`rules.rs`, `llm.rs`, behind a trait in `mod.rs`). To add a stage, copy the folder of one
//! of the same kind (`chunk` for a rules-only per-document stage, `graph` for one with a
//! backend), add it to [`Stage`] and give it a `compose` function and a binary. A stage reads its input
//! tables and writes its outputs through [`crate::io`]; it never calls another stage — stages
//! meet only through their tables. Per-document stages run bucket by bucket through
//! [`driver::run_buckets`]; [`crate::compose`] picks the backends and runs them in order.

pub mod chunk;
pub mod cluster;
pub mod driver;
pub mod embed;
pub mod extract;
pub mod graph;
pub mod hypergraph;
pub mod ingest;
pub mod merge;
pub mod paths;

pub use driver::{NoProgress, Progress, RunContext};

/// The construction stages, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    /// corpus → documents.
    Ingest,
    /// documents → chunks.
    Chunk,
    /// chunks → items.
    Extract,
    /// items → hyperedges, hyperedge_entities, entities.
    Hypergraph,
    /// entities, hyperedges → edges.
    Graph,
    /// every retrievable unit → embeddings.
    Embed,
    /// hyperedges, embeddings → clusters, cluster_members.
    Cluster,
    /// every per-document table → kb/*.
    Merge,
    /// kb entities and edges → the path index of `--mode paths` (kb/path_*): optional, run on
    /// its own after a merge, never by `make index`.
    Paths,
}

impl Stage {
    /// Every stage, in order.
    pub const ALL: [Stage; 8] = [
        Stage::Ingest,
        Stage::Chunk,
        Stage::Extract,
        Stage::Hypergraph,
        Stage::Graph,
        Stage::Embed,
        Stage::Cluster,
        Stage::Merge,
    ];

    /// The stage's name (manifest, failures, binaries, `llm_calls`).
    pub const fn name(self) -> &'static str {
        match self {
            Stage::Ingest => "ingest",
            Stage::Chunk => "chunk",
            Stage::Extract => "extract",
            Stage::Hypergraph => "hypergraph",
            Stage::Graph => "graph",
            Stage::Embed => "embed",
            Stage::Cluster => "cluster",
            Stage::Merge => "merge",
            Stage::Paths => "paths",
        }
    }

    /// The stages built only on request, after the merge (not in [`Stage::ALL`]).
    pub const OPTIONAL: [Stage; 1] = [Stage::Paths];

    /// The stage named `name`.
    pub fn from_name(name: &str) -> Option<Stage> {
        Stage::ALL.into_iter().chain(Stage::OPTIONAL).find(|s| s.name() == name)
    }

    /// This stage and every later one of [`Stage::ALL`], in order (an optional stage: none).
    pub fn and_after(self) -> &'static [Stage] {
        let i = Stage::ALL.iter().position(|&s| s == self).unwrap_or(Stage::ALL.len());
        &Stage::ALL[i..]
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
