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
use crate::models::{embedder_for, query_embedder_for};
use crate::query::paths::{LlmQueryGraphs, QueryGraphs, RulesQueryGraphs};
use crate::query::{
    Answerer, EndpointReranker, Engine, ExtractiveAnswerer, LlmAnswerer, LlmQueryEntities, QueryEntities, Reranker,
    RulesQueryEntities, VectorSetup,
};
use crate::stages::extract::{self, Extractor, LlmExtractor, RulesExtractor};
use crate::stages::graph::{self, LlmRelations, RelationExtractor, RulesRelations};
use crate::stages::hypergraph::{self, LlmSummarizer, RulesSummarizer, Summarizer};
use crate::stages::ingest::{self, IngestOptions};
use crate::stages::{NoProgress, RunContext, Stage, chunk, cluster, embed, merge, paths};

/// The backend of every capability, as the configuration chooses them (`[backends]`), with the
/// one LLM runner they share (so that they share the endpoint's concurrency and rate limits).
#[derive(Debug, Clone)]
pub struct Backends {
    llm: Vec<Capability>,
    runner: Option<Arc<Runner>>,
    /// The judge's own endpoint (`[judge]`), when configured.
    judge: Option<Arc<Runner>>,
    /// The re-ranking endpoint (`[rerank]`), when configured.
    rerank: Option<Arc<Runner>>,
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
        let rerank =
            config.rerank.as_ref().map(|endpoint| Runner::connect(endpoint, index_root).map(Arc::new)).transpose()?;
        Ok(Backends { llm, runner, judge, rerank })
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

    /// Query graphs of `--mode paths`.
    pub fn query_graphs(&self) -> Box<dyn QueryGraphs> {
        match self.llm(Capability::QueryGraphs) {
            Some(runner) => Box::new(LlmQueryGraphs::new(runner)),
            None => Box::new(RulesQueryGraphs),
        }
    }

    /// The re-ranker of every strategy's first pieces, when `[rerank]` is configured.
    pub fn reranker(&self) -> Option<Box<dyn Reranker>> {
        self.rerank.clone().map(|runner| Box::new(EndpointReranker::new(runner)) as Box<dyn Reranker>)
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
    embed::run(ctx, embedder.as_ref(), config.embed.entity_summary_words)
}

/// Runs the cluster stage.
pub fn cluster(ctx: &RunContext<'_>, config: &Config) -> Result<cluster::ClusterMetrics> {
    cluster::run(ctx, &config.cluster)
}

/// Runs the merge stage, joining the vectors of the configured embedding model.
pub fn merge(ctx: &RunContext<'_>, config: &Config) -> Result<merge::MergeMetrics> {
    merge::run(ctx, &config.embed.model, &config.ann)
}

/// Builds the path index of `--mode paths` from the merged kb, embedding node labels with the
/// configured model.
pub fn paths(ctx: &RunContext<'_>, config: &Config) -> Result<paths::PathsMetrics> {
    let embedder = embedder_for(&config.embed, ctx.index.root())?;
    paths::run(ctx, &config.paths, embedder.as_ref())
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
        Stage::Paths => json(paths(ctx, config)),
    }
}

/// The query engine of `index` with the configured embedding model and query-time backends.
pub fn engine(index: &Index, config: &Config, backends: &Backends) -> Result<Engine> {
    let embedder = query_embedder_for(&config.embed, index.root())?;
    let vectors = VectorSetup { embedder, precision: config.query.vector_precision, ann: &config.ann };
    Ok(Engine::new(index, vectors, backends.query_entities(), backends.answerer())?
        .with_query_graphs(backends.query_graphs())
        .with_reranker(backends.reranker()))
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
    let ctx = RunContext { index: index.clone(), shard: Shard::ALL, progress: &NoProgress, survey: None };
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

/// One change of an index's documents, as a live update applies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Ingest a corpus file or folder: its documents are added, or replace those of their ids.
    Add(PathBuf),
    /// Remove these documents.
    Remove(Vec<String>),
}

/// Applies one change to `index`'s documents (ingest of a corpus, or [`ingest::remove`]) and
/// records the run. The later stages are brought up to date by [`update`], once for any number
/// of changes.
pub fn apply(index: &Index, config: &Config, change: &Change) -> Result<StageMetrics<serde_json::Value>> {
    let ctx = RunContext { index: index.clone(), shard: Shard::ALL, progress: &NoProgress, survey: None };
    let metrics = match change {
        Change::Add(corpus) => ingest(&ctx, config, &IngestOptions { corpus: corpus.clone(), prune: false })?,
        Change::Remove(ids) => ingest::remove(&ctx, ids)?,
    }
    .into_json()?;
    record_run(index, &metrics, config)?;
    Ok(metrics)
}

/// Runs every construction stage after ingest through the merge, each redoing only the buckets
/// whose documents changed, and records every run. Unlike [`rebuild`], units that fail are left
/// recorded (retried by the next run) and do not stop it; the runs returned carry them.
/// `on_stage` hears each stage before it runs. The path index, when the index has one, is then
/// out of date: [`refresh_paths`] rebuilds it.
pub fn update(
    index: &Index,
    config: &Config,
    on_stage: &mut dyn FnMut(Stage),
) -> Result<Vec<StageMetrics<serde_json::Value>>> {
    let ctx = RunContext { index: index.clone(), shard: Shard::ALL, progress: &NoProgress, survey: None };
    let mut runs = Vec::new();
    for &stage in Stage::Chunk.and_after() {
        on_stage(stage);
        let metrics = run_stage(stage, &ctx, config)?;
        record_run(index, &metrics, config)?;
        runs.push(metrics);
    }
    Ok(runs)
}

/// Rebuilds the path index of `--mode paths` from the current kb when the index has one (it is
/// built from the whole kb, so it takes as long after a small update as after a large one), and
/// records the run; `None` when the index has none.
pub fn refresh_paths(index: &Index, config: &Config) -> Result<Option<StageMetrics<serde_json::Value>>> {
    if !index.kb_part(flexstruct_schemas::Table::KbPaths).is_file() {
        return Ok(None);
    }
    let ctx = RunContext { index: index.clone(), shard: Shard::ALL, progress: &NoProgress, survey: None };
    let metrics = run_stage(Stage::Paths, &ctx, config)?;
    record_run(index, &metrics, config)?;
    Ok(Some(metrics))
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

/// Where an index stands, stage by stage: what `flexstruct-status` prints.
#[derive(Debug, Clone, Serialize)]
pub struct IndexStatus {
    /// Buckets of the index.
    pub buckets: u32,
    /// The shard surveyed (`0/1`: the whole index).
    pub shard: String,
    /// Buckets of the shard surveyed.
    pub buckets_surveyed: usize,
    /// Documents in the surveyed buckets.
    pub documents: u64,
    /// Surveyed buckets that hold documents.
    pub buckets_with_documents: usize,
    /// Each per-document stage after ingest, in order.
    pub stages: Vec<StageStatus>,
    /// What a merge would do (the whole index, whatever the shard).
    pub kb: merge::KbState,
    /// The failed units recorded in the surveyed buckets (and the ingest failures).
    pub failures: Vec<FailedUnit>,
    /// Damaged files, each with what repairs it: parts of the per-document tables that cannot be
    /// read (their buckets are marked to do), and the merged kb's vector files or approximate
    /// indexes whose bytes do not match their checksum (queries go around them, slower; the next
    /// merge rewrites them).
    pub damaged: Vec<String>,
}

impl IndexStatus {
    /// Whether every stage is up to date, nothing failed and the kb is current: the next
    /// `make index` would do nothing.
    pub fn complete(&self) -> bool {
        self.failures.is_empty()
            && self.damaged.is_empty()
            && self.kb == merge::KbState::UpToDate
            && self.stages.iter().all(|s| s.up_to_date == self.buckets_with_documents && s.orphaned == 0)
    }
}

/// The buckets of one stage by state ([`crate::stages::driver::BucketState`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct StageStatus {
    /// The stage.
    pub stage: String,
    /// Buckets the next run skips.
    pub up_to_date: usize,
    /// Buckets whose outputs come from other inputs or settings.
    pub stale: usize,
    /// Buckets with documents and no outputs yet.
    pub missing: usize,
    /// Buckets with failed units.
    pub failed: usize,
    /// Buckets with outputs of removed documents.
    pub orphaned: usize,
    /// The buckets that are not up to date (up to 8).
    pub to_do: Vec<u32>,
}

/// One row of the `failures` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedUnit {
    /// The stage that failed.
    pub stage: String,
    /// The document, when known.
    pub doc_id: Option<String>,
    /// The unit.
    pub unit: String,
    /// The failure kind.
    pub kind: String,
    /// What went wrong.
    pub message: String,
}

/// Surveys `index` under `config` for `shard`: for every per-document stage, which buckets its
/// next run would skip, redo, compute or retry (its fingerprints against what its inputs and
/// configuration make them now, exactly as a run decides), what a merge would do, and the failed
/// units. Reads footers and listings only; writes nothing.
pub fn status(index: &Index, config: &Config, shard: Shard) -> Result<IndexStatus> {
    use crate::io::parquet::{opt_str, part_row_count, read_table, string_column};
    use crate::stages::driver::{BucketState, Survey};
    use flexstruct_schemas::{Table, col};

    index.check_shard(shard)?;
    let survey = Survey::default();
    let ctx = RunContext { index: index.clone(), shard, progress: &NoProgress, survey: Some(&survey) };
    let mut documents = 0;
    let mut buckets_with_documents = 0;
    for bucket in index.shard_buckets(shard) {
        let path = index.bucket_path(Table::Documents, bucket);
        if path.is_file() {
            buckets_with_documents += 1;
            documents += ctx.unless_damaged(&path, || part_row_count(&path))?.unwrap_or(0);
        }
    }
    let mut stages = Vec::new();
    for &stage in &Stage::ALL[1..Stage::ALL.len() - 1] {
        run_stage(stage, &ctx, config)?;
        stages.push(StageStatus { stage: stage.name().to_owned(), ..StageStatus::default() });
    }
    for (stage, bucket, state) in survey.states()? {
        let Some(row) = stages.iter_mut().find(|s| s.stage == stage) else { continue };
        match state {
            BucketState::UpToDate => row.up_to_date += 1,
            BucketState::Stale => row.stale += 1,
            BucketState::Missing => row.missing += 1,
            BucketState::Failed => row.failed += 1,
            BucketState::Orphaned => row.orphaned += 1,
        }
        if state != BucketState::UpToDate && row.to_do.len() < 8 {
            row.to_do.push(bucket);
        }
    }
    let mut failures = Vec::new();
    for batch in read_table(index, Table::Failures)? {
        let column = |name| string_column(&batch, name);
        let (stage, doc, unit, kind, message) =
            (column(col::STAGE)?, column(col::DOC_ID)?, column(col::UNIT)?, column(col::KIND)?, column(col::MESSAGE)?);
        for i in 0..batch.num_rows() {
            let doc_id = opt_str(doc, i).map(str::to_owned);
            if doc_id.as_deref().is_some_and(|d| !shard.owns_doc(d)) {
                continue;
            }
            failures.push(FailedUnit {
                stage: stage.value(i).to_owned(),
                doc_id,
                unit: unit.value(i).to_owned(),
                kind: kind.value(i).to_owned(),
                message: message.value(i).to_owned(),
            });
        }
    }
    let mut damaged: Vec<String> = survey
        .damaged_parts()?
        .into_iter()
        .map(|(path, why)| {
            let repair = if path.parent().and_then(|p| p.file_name()).is_some_and(|d| d == Table::Documents.dir()) {
                "its documents cannot be read: move it aside and ingest the corpus again (`make index`); documents \
                 the corpus no longer holds are lost unless the file is restored"
            } else {
                "the stage that writes it redoes its bucket (`make index`)"
            };
            format!("{why}: {repair}")
        })
        .collect();
    // A kb that cannot be surveyed because of a damaged part is one a merge would refuse.
    let kb = match damaged.is_empty() {
        true => merge::survey(index, &config.embed.model)?,
        false => merge::KbState::Incomplete(vec!["the damaged parts listed below must be repaired first".to_owned()]),
    };
    let stage_rank = |name: &str| Stage::from_name(name).map_or(usize::MAX, |s| s as usize);
    failures
        .sort_by(|a, b| (stage_rank(&a.stage), &a.doc_id, &a.unit).cmp(&(stage_rank(&b.stage), &b.doc_id, &b.unit)));
    Ok(IndexStatus {
        buckets: index.settings().buckets,
        shard: shard.to_string(),
        buckets_surveyed: index.shard_buckets(shard).count(),
        documents,
        buckets_with_documents,
        stages,
        damaged: {
            if kb == merge::KbState::UpToDate {
                let fingerprint = crate::io::parquet::one_merge_fingerprint(index)?;
                let files = crate::io::ann::damaged_files(index, &config.embed.model, &fingerprint)?;
                damaged.extend(
                    files
                        .into_iter()
                        .map(|file| format!("{file}: queries go around it, slower; `make merge` rewrites it")),
                );
            }
            damaged
        },
        kb,
        failures,
    })
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
