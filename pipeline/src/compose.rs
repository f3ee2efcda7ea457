//! The composition root: where the configuration becomes running code. It picks the backend of
//! every capability (rules or LLM, [`Backends`]), runs each construction stage with its section
//! of the configuration and its backend, runs the stages from a given one on (a sibling index,
//! [`rebuild`]), and opens the query [`Engine`]. Stages never choose their own backends and never
//! call each other; this is the one place that knows them all.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::config::{Capability, Config};
use crate::core::{Error, Result};
use crate::io::{Index, Shard, StageMetrics, record_run};
use crate::llm::Runner;
use crate::models::embedder_for;
use crate::query::{
    Answerer, Engine, ExtractiveAnswerer, LlmAnswerer, LlmQueryEntities, QueryEntities, RulesQueryEntities,
};
use crate::stages::extract::{self, Extractor, LlmExtractor, RulesExtractor};
use crate::stages::graph::{self, LlmRelations, RelationExtractor, RulesRelations};
use crate::stages::hypergraph::{self, LlmSummarizer, RulesSummarizer, Summarizer};
use crate::stages::ingest::{self, IngestOptions};
use crate::stages::{NoProgress, RunContext, Stage, chunk, cluster, embed, merge};

/// The backend of every capability, as the configuration chooses them (`[backends]`), with the
/// one LLM runner they share (so that they share the endpoint's concurrency and rate limits).
#[derive(Debug, Clone)]
pub struct Backends {
    llm: Vec<Capability>,
    runner: Option<Arc<Runner>>,
    /// The judge's own endpoint (`[judge]`), when configured.
    judge: Option<Arc<Runner>>,
}

impl Backends {
    /// The backends of `config`; the LLM's response cache is kept in the index at `index_root`.
    pub fn new(config: &Config, index_root: &Path) -> Result<Backends> {
        let mut llm = Vec::new();
        for capability in Capability::ALL {
            if config.uses_llm(capability)? {
                llm.push(capability);
            }
        }
        let others = llm.iter().any(|&c| c != Capability::Judge || config.judge.is_none());
        let runner = match (&config.llm, others) {
            (Some(endpoint), true) => Some(Arc::new(Runner::connect(endpoint, index_root)?)),
            _ => None,
        };
        let judge = match (&config.judge, llm.contains(&Capability::Judge)) {
            (Some(endpoint), true) => Some(Arc::new(Runner::connect(endpoint, index_root)?)),
            _ => None,
        };
        Ok(Backends { llm, runner, judge })
    }

    /// The runner, when `capability` runs on the LLM (the judge on its own endpoint when
    /// `[judge]` is configured).
    pub fn llm(&self, capability: Capability) -> Option<Arc<Runner>> {
        if !self.llm.contains(&capability) {
            return None;
        }
        match (capability, &self.judge) {
            (Capability::Judge, Some(judge)) => Some(judge.clone()),
            _ => self.runner.clone(),
        }
    }

    /// Item extraction.
    pub fn extractor(&self) -> Box<dyn Extractor> {
        match self.llm(Capability::Extract) {
            Some(runner) => Box::new(LlmExtractor::new(runner)),
            None => Box::new(RulesExtractor),
        }
    }

    /// Entity summaries above τ_s.
    pub fn summarizer(&self) -> Box<dyn Summarizer> {
        match self.llm(Capability::Summaries) {
            Some(runner) => Box::new(LlmSummarizer::new(runner)),
            None => Box::new(RulesSummarizer),
        }
    }

    /// Pairwise relations.
    pub fn relations(&self) -> Box<dyn RelationExtractor> {
        match self.llm(Capability::Relations) {
            Some(runner) => Box::new(LlmRelations::new(runner)),
            None => Box::new(RulesRelations),
        }
    }

    /// Query entities.
    pub fn query_entities(&self) -> Box<dyn QueryEntities> {
        match self.llm(Capability::QueryEntities) {
            Some(runner) => Box::new(LlmQueryEntities::new(runner)),
            None => Box::new(RulesQueryEntities),
        }
    }

    /// Answers.
    pub fn answerer(&self) -> Box<dyn Answerer> {
        match self.llm(Capability::Answers) {
            Some(runner) => Box::new(LlmAnswerer::new(runner)),
            None => Box::new(ExtractiveAnswerer),
        }
    }
}

/// Runs the ingest stage.
pub fn ingest(ctx: &RunContext<'_>, config: &Config, options: &IngestOptions) -> Result<ingest::IngestMetrics> {
    ingest::run(ctx, &config.ingest, options)
}

/// Runs the chunk stage.
pub fn chunk(ctx: &RunContext<'_>, config: &Config) -> Result<chunk::ChunkMetrics> {
    chunk::run(ctx, &config.chunk)
}

/// Runs the extract stage with the configured extraction backend.
pub fn extract(ctx: &RunContext<'_>, config: &Config) -> Result<extract::ExtractMetrics> {
    let backends = Backends::new(config, ctx.index.root())?;
    extract::run(ctx, &config.extract, backends.extractor().as_ref())
}

/// Runs the hypergraph stage with the configured summaries backend.
pub fn hypergraph(ctx: &RunContext<'_>, config: &Config) -> Result<hypergraph::HypergraphMetrics> {
    let backends = Backends::new(config, ctx.index.root())?;
    hypergraph::run(ctx, &config.hypergraph, backends.summarizer().as_ref())
}

/// Runs the graph stage with the configured relations backend.
pub fn graph(ctx: &RunContext<'_>, config: &Config) -> Result<graph::GraphMetrics> {
    let backends = Backends::new(config, ctx.index.root())?;
    graph::run(ctx, &config.graph, backends.relations().as_ref())
}

/// Runs the embed stage with the configured embedding model.
pub fn embed(ctx: &RunContext<'_>, config: &Config) -> Result<embed::EmbedMetrics> {
    let embedder = embedder_for(&config.embed, ctx.index.root())?;
    embed::run(ctx, embedder.as_ref())
}

/// Runs the cluster stage.
pub fn cluster(ctx: &RunContext<'_>, config: &Config) -> Result<cluster::ClusterMetrics> {
    cluster::run(ctx, &config.cluster)
}

/// Runs the merge stage, joining the vectors of the configured embedding model.
pub fn merge(ctx: &RunContext<'_>, config: &Config) -> Result<merge::MergeMetrics> {
    merge::run(ctx, &config.embed.model)
}

/// Runs one stage that reads only index tables (every stage but ingest, whose input is a
/// corpus), with its details as JSON so that runs of different stages can be listed together.
pub fn run_stage(stage: Stage, ctx: &RunContext<'_>, config: &Config) -> Result<StageMetrics<serde_json::Value>> {
    fn json<D: Serialize>(metrics: Result<StageMetrics<D>>) -> Result<StageMetrics<serde_json::Value>> {
        metrics?.into_json()
    }
    match stage {
        Stage::Ingest => Err(Error::Internal("the ingest stage needs a corpus; run it with compose::ingest".into())),
        Stage::Chunk => json(chunk(ctx, config)),
        Stage::Extract => json(extract(ctx, config)),
        Stage::Hypergraph => json(hypergraph(ctx, config)),
        Stage::Graph => json(graph(ctx, config)),
        Stage::Embed => json(embed(ctx, config)),
        Stage::Cluster => json(cluster(ctx, config)),
        Stage::Merge => json(merge(ctx, config)),
    }
}

/// The query engine of `index` with the configured embedding model and query-time backends.
pub fn engine(index: &Index, config: &Config, backends: &Backends) -> Result<Engine> {
    let embedder = embedder_for(&config.embed, index.root())?;
    Engine::new(index, embedder, backends.query_entities(), backends.answerer())
}

/// The query engine of `index` under `config`, with its own backends.
pub fn open_engine(index: &Index, config: &Config) -> Result<Engine> {
    engine(index, config, &Backends::new(config, index.root())?)
}

/// Brings `index` up to date under `config` by running the construction stages from `first` on
/// (each skips what its fingerprints say is current, and embed reuses every vector whose input
/// text did not change), recording each run. A stage that leaves failed units stops the rebuild
/// with an error. Returns the stage runs.
pub fn rebuild(index: &Index, config: &Config, first: Stage) -> Result<Vec<StageMetrics<serde_json::Value>>> {
    if first == Stage::Ingest {
        return Err(Error::Internal("a rebuild starts after ingest: the corpus is the index's documents".into()));
    }
    let ctx = RunContext { index: index.clone(), shard: Shard::ALL, progress: &NoProgress };
    let mut runs = Vec::new();
    for &stage in first.and_after() {
        let metrics = run_stage(stage, &ctx, config)?;
        record_run(index, &metrics, config)?;
        if metrics.units_failed > 0 {
            return Err(Error::StageFailed {
                stage: metrics.stage,
                path: index.root().to_owned(),
                units: metrics.units_failed,
            });
        }
        runs.push(metrics);
    }
    Ok(runs)
}

/// Where the sibling index `name` of `base` lives: `<base>.variants/<name>`.
pub fn sibling_path(base: &Index, name: &str) -> PathBuf {
    let root = base.root();
    let file = root.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_else(|| "index".into());
    root.with_file_name(format!("{file}.variants")).join(name)
}

/// Makes `to` a copy of the index at `from` (hard links where possible: every stage replaces
/// files by renaming, never writes into them, so linked files are never changed in place).
pub fn copy_index(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).map_err(Error::io("creating the sibling index", to))?;
    for entry in std::fs::read_dir(from).map_err(Error::io("listing the index", from))? {
        let path = entry.map_err(Error::io("listing the index", from))?.path();
        let target = to.join(path.file_name().unwrap_or_default());
        if path.is_dir() {
            copy_index(&path, &target)?;
        } else if !target.exists() && std::fs::hard_link(&path, &target).is_err() {
            std::fs::copy(&path, &target).map_err(Error::io("copying into the sibling index", &target))?;
        }
    }
    Ok(())
}

/// A sibling index: a copy of `base` (hard links) named `name`, rebuilt under `config` from
/// stage `first` on, for settings that change construction (w/o SW, τ_s, τ_e). Sibling indexes
/// are kept, so building one again costs only what changed.
#[derive(Debug)]
pub struct Sibling {
    /// The sibling index.
    pub index: Index,
    /// The stage runs of its rebuild.
    pub runs: Vec<StageMetrics<serde_json::Value>>,
    /// Seconds the rebuild took.
    pub seconds: f64,
}

/// Builds (or brings up to date) the sibling `name` of `base` under `config` from stage `first`.
pub fn build_sibling(base: &Index, name: &str, config: &Config, first: Stage) -> Result<Sibling> {
    let path = sibling_path(base, name);
    copy_index(base.root(), &path)?;
    let index = Index::open(&path)?;
    let started = std::time::Instant::now();
    let runs = rebuild(&index, config, first)?;
    Ok(Sibling { index, runs, seconds: started.elapsed().as_secs_f64() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sibling_indexes_share_files_without_sharing_changes() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::create_dir_all(a.join("t")).unwrap();
        std::fs::write(a.join("t/part-0000.parquet"), b"one").unwrap();
        let b = dir.path().join("b");
        copy_index(&a, &b).unwrap();
        assert_eq!(std::fs::read(b.join("t/part-0000.parquet")).unwrap(), b"one");
        // A stage replaces a file by renaming a new one over it: the original stays.
        crate::io::files::write_file_atomic(&b.join("t/part-0000.parquet"), b"two").unwrap();
        assert_eq!(std::fs::read(a.join("t/part-0000.parquet")).unwrap(), b"one");
    }

    #[test]
    fn backends_follow_the_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let rules = Backends::new(&Config::default(), dir.path()).unwrap();
        assert_eq!(rules.extractor().identity().label(), "rules");
        assert!(rules.llm(Capability::Answers).is_none());
        let config = Config {
            llm: Some(crate::llm::LlmConfig {
                base_url: "http://127.0.0.1:9/v1".into(),
                model: "m".into(),
                ..Default::default()
            }),
            backends: crate::config::BackendsConfig {
                summaries: Some(crate::config::BackendChoice::Rules),
                ..Default::default()
            },
            ..Config::default()
        };
        let mixed = Backends::new(&config, dir.path()).unwrap();
        assert_eq!(mixed.extractor().identity().label(), "llm:m");
        assert_eq!(mixed.summarizer().identity().label(), "rules");
        assert_eq!(mixed.answerer().identity().label(), "llm:m");
        // Identities of one capability differ between backends, so do their fingerprints.
        assert_ne!(mixed.extractor().identity(), rules.extractor().identity());
    }
}
