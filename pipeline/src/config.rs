//! Pipeline configuration: the shape of the pipeline (thresholds, models), as opposed to runtime
//! knobs (index folder, shard, verbosity), which are command-line flags.
//!
//! Sources, later ones winning: built-in defaults (the paper's values), a TOML file
//! (`--config FILE`), and environment variables `FLEXSTRUCT_<SECTION>__<KEY>`, e.g.
//! `FLEXSTRUCT_CHUNK__CT_MAX=800`. Variables without a double underscore (`FLEXSTRUCT_INDEX`,
//! `FLEXSTRUCT_QUIET`, …) are the twins of command-line flags and are not read here.
//!
//! ```toml
//! [index]
//! buckets = 64        # fixed when the index is created
//!
//! [chunk]
//! ct_min = 500
//! ct_max = 600
//! ```

use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Prefix of configuration environment variables.
pub const ENV_PREFIX: &str = "FLEXSTRUCT_";

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Settings of the index folder.
    pub index: IndexConfig,
    /// The ingest stage.
    pub ingest: IngestConfig,
    /// The chunk stage.
    pub chunk: ChunkConfig,
    /// The extract stage.
    pub extract: ExtractConfig,
    /// The hypergraph stage.
    pub hypergraph: HypergraphConfig,
    /// The graph stage.
    pub graph: GraphConfig,
    /// The embed stage.
    pub embed: EmbedConfig,
    /// The cluster stage (SSC).
    pub cluster: ClusterConfig,
    /// The query stage (retrieval, context, generation).
    pub query: QueryConfig,
    /// The LLM endpoint; absent means no LLM is configured (the rules backend runs).
    pub llm: Option<LlmConfig>,
}

/// Retrieval strategy of the query stage: the three FlexStructRAG modes and the peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Entity + hyperedge + edge + cluster retrieval (the paper's default).
    #[default]
    Hybrid,
    /// Entity + hyperedge + cluster retrieval.
    Hypergraph,
    /// Entity + edge retrieval.
    Graph,
    /// Standard RAG: the top chunks by cosine.
    Chunks,
    /// No retrieval (the model answers from its own knowledge).
    None,
    /// HyperGraphRAG: entity and hyperedge retrieval, bidirectional expansion, chunk fusion.
    Hypergraphrag,
}

impl Mode {
    /// Every mode, in the order reports list them.
    pub const ALL: [Mode; 6] = [Mode::Hybrid, Mode::Hypergraph, Mode::Graph, Mode::Chunks, Mode::None, Mode::Hypergraphrag];

    /// The name used in flags, config and outputs.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Hybrid => "hybrid",
            Mode::Hypergraph => "hypergraph",
            Mode::Graph => "graph",
            Mode::Chunks => "chunks",
            Mode::None => "none",
            Mode::Hypergraphrag => "hypergraphrag",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == s.trim()).ok_or_else(|| {
            let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
            Error::Config(format!("unknown query mode `{s}` (one of {})", names.join(", ")))
        })
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The query stage. Thresholds left unset take the calibrated value of the embedding model
/// (see [`QueryConfig::thresholds`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueryConfig {
    /// Retrieval strategy.
    pub mode: Mode,
    /// Module toggles (the paper's ablations): entity retrieval (EnR).
    pub entities: bool,
    /// Hyperedge retrieval (HR); when off, hyperedges are still scanned to pick clusters.
    pub hyperedges: bool,
    /// Edge retrieval (ER).
    pub edges: bool,
    /// Bridge retrieval (BR, ours, beyond the paper): the facts one hop past the question's
    /// entities and hyperedges, for questions whose answer is about an entity they do not name.
    pub bridges: bool,
    /// Cluster retrieval (SSC).
    pub clusters: bool,
    /// N_B: most bridge hyperedges retrieved.
    pub n_b: usize,
    /// N_EH: most hyperedges retrieved.
    pub n_eh: usize,
    /// N_E: most edges retrieved.
    pub n_e: usize,
    /// τ_EH: least cosine of a retrieved hyperedge (unset: the model's calibrated value).
    pub tau_eh: Option<f32>,
    /// τ_E: least cosine of a retrieved edge (unset: the model's calibrated value).
    pub tau_e: Option<f32>,
    /// Chunks retrieved by the `chunks` strategy and fused by `hypergraphrag` (k_C).
    pub chunk_k: usize,
    /// Least cosine of a retrieved chunk (τ_C; unset: the model's calibrated value).
    pub tau_chunk: Option<f32>,
    /// HyperGraphRAG's k_V: entities retrieved by embedding similarity.
    pub hgr_k_v: usize,
    /// HyperGraphRAG's k_H: hyperedges retrieved by embedding similarity.
    pub hgr_k_h: usize,
    /// Most context tokens (cl100k); the lowest-ranked evidence is dropped first. 0: no limit.
    pub max_context_tokens: usize,
}

impl Default for QueryConfig {
    fn default() -> Self {
        QueryConfig {
            mode: Mode::Hybrid,
            entities: true,
            hyperedges: true,
            edges: true,
            bridges: true,
            clusters: true,
            n_b: 5,
            n_eh: 7,
            n_e: 3,
            tau_eh: None,
            tau_e: None,
            chunk_k: 5,
            tau_chunk: None,
            hgr_k_v: 60,
            hgr_k_h: 60,
            max_context_tokens: 12_000,
        }
    }
}

/// Similarity thresholds in effect for one embedding model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Thresholds {
    /// τ_EH.
    pub hyperedge: f32,
    /// τ_E.
    pub edge: f32,
    /// τ_C.
    pub chunk: f32,
}

impl QueryConfig {
    /// The thresholds for `model`: configured values win; otherwise the calibrated ones
    /// (all-MiniLM-L6-v2: see ARCHITECTURE.md, "Calibrating the thresholds"), the paper's 0.9
    /// (and HyperGraphRAG's 0.5 for chunks) for any other model, and no threshold for the
    /// hashing test embedder.
    pub fn thresholds(&self, model: &str) -> Thresholds {
        let calibrated = if model == crate::embed::MINILM {
            Thresholds { hyperedge: MINILM_TAU_EH, edge: MINILM_TAU_E, chunk: MINILM_TAU_CHUNK }
        } else if model.starts_with("hashing-") {
            Thresholds { hyperedge: f32::MIN, edge: f32::MIN, chunk: f32::MIN }
        } else {
            Thresholds { hyperedge: 0.9, edge: 0.9, chunk: 0.5 }
        };
        Thresholds {
            hyperedge: self.tau_eh.unwrap_or(calibrated.hyperedge),
            edge: self.tau_e.unwrap_or(calibrated.edge),
            chunk: self.tau_chunk.unwrap_or(calibrated.chunk),
        }
    }
}

/// Calibrated τ_EH for all-MiniLM-L6-v2: the 99th percentile of question–hyperedge cosines over
/// the ultradomain-mix dev questions (`examples/calibrate.rs`; ARCHITECTURE.md).
pub const MINILM_TAU_EH: f32 = 0.28;
/// Calibrated τ_E for all-MiniLM-L6-v2 (same procedure, question–edge cosines).
pub const MINILM_TAU_E: f32 = 0.28;
/// Calibrated τ_C for all-MiniLM-L6-v2 (same procedure, question–chunk cosines).
pub const MINILM_TAU_CHUNK: f32 = 0.30;

/// The cluster stage (structure-aware semantic clustering).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// α: weight of positional distance |k_i − k_j| against cosine distance.
    pub alpha: f32,
    /// HDBSCAN minimum cluster size.
    pub min_cluster_size: usize,
    /// HDBSCAN min_samples (neighbourhood size of core distances).
    pub min_samples: usize,
    /// Most hyperedges clustered at once; longer documents go in overlapping windows (the
    /// distance matrix is max_window² floats: 3,000 → 36 MB per concurrent document).
    pub max_window: usize,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig { alpha: 0.1, min_cluster_size: 3, min_samples: 2, max_window: 3000 }
    }
}

impl ClusterConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        if !(self.alpha.is_finite() && self.alpha >= 0.0) {
            return Err(Error::Config(format!("cluster.alpha must be a finite number >= 0, not {}", self.alpha)));
        }
        if self.min_cluster_size < 2 || self.max_window < 4 {
            return Err(Error::Config("cluster.min_cluster_size must be at least 2 and cluster.max_window at least 4".into()));
        }
        Ok(())
    }
}

/// The embed stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EmbedConfig {
    /// `all-MiniLM-L6-v2` (in process, the default) or `hashing-<dim>` (tests only).
    pub model: String,
    /// Folder of the MiniLM files (`make model` fills it).
    pub model_dir: std::path::PathBuf,
    /// Texts per forward pass (or per request to an endpoint).
    pub batch_size: usize,
    /// An OpenAI-compatible endpoint (`…/v1`) serving `model` on `/embeddings`; empty: the
    /// model runs in process.
    pub base_url: String,
    /// Environment variable holding the endpoint's API key (empty: none).
    pub api_key_env: String,
    /// Most embedding requests in flight.
    pub max_concurrency: usize,
}

impl Default for EmbedConfig {
    fn default() -> Self {
        EmbedConfig {
            model: "all-MiniLM-L6-v2".into(),
            model_dir: "data/models/all-MiniLM-L6-v2".into(),
            batch_size: 64,
            base_url: String::new(),
            api_key_env: "OPENAI_API_KEY".into(),
            max_concurrency: 4,
        }
    }
}

/// An OpenAI-compatible chat endpoint (OpenAI, DashScope, vLLM, Ollama, llama.cpp server, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LlmConfig {
    /// Base URL up to and including `/v1`, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Model name sent with every request.
    pub model: String,
    /// Name of the environment variable that holds the API key (the key itself is never in
    /// the configuration, the cache, the tables, the logs or error messages). Empty: no key.
    pub api_key_env: String,
    /// Sampling temperature.
    pub temperature: f32,
    /// Most completion tokens per request.
    pub max_tokens: u32,
    /// Seconds before a request is abandoned (and retried).
    pub timeout_secs: u64,
    /// Most requests in flight at once.
    pub max_concurrency: usize,
    /// Retries after a 429, a 5xx, a timeout or a connection error.
    pub max_retries: u32,
    /// First backoff delay in milliseconds (doubled per retry, with jitter, unless the server
    /// sends `Retry-After`).
    pub backoff_initial_ms: u64,
    /// Longest backoff delay in milliseconds.
    pub backoff_max_ms: u64,
    /// Requests per minute (0: unlimited).
    pub requests_per_minute: u32,
    /// Prompt + completion tokens per minute (0: unlimited).
    pub tokens_per_minute: u32,
    /// Prices in currency units per million prompt / completion tokens, for the cost counters
    /// (0: not shown).
    pub price_prompt_per_mtok: f64,
    /// See `price_prompt_per_mtok`.
    pub price_completion_per_mtok: f64,
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            base_url: String::new(),
            model: String::new(),
            api_key_env: "OPENAI_API_KEY".into(),
            temperature: 0.0,
            max_tokens: 2048,
            timeout_secs: 120,
            max_concurrency: 8,
            max_retries: 6,
            backoff_initial_ms: 500,
            backoff_max_ms: 60_000,
            requests_per_minute: 0,
            tokens_per_minute: 0,
            price_prompt_per_mtok: 0.0,
            price_completion_per_mtok: 0.0,
        }
    }
}

/// Settings of the index folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct IndexConfig {
    /// Document buckets per per-document table, fixed when the index is created (default
    /// [`DEFAULT_BUCKETS`]); an existing index keeps its own. A shard count given with
    /// `--shard K/N` must divide it: pick a power of two at least as large as the largest number
    /// of parallel jobs you will run.
    pub buckets: Option<u32>,
}

/// Buckets of a new index when the configuration does not say.
pub const DEFAULT_BUCKETS: u32 = 64;



/// The ingest stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IngestConfig {
    /// Documents longer than this (bytes of UTF-8) are refused with a failure row.
    pub max_document_bytes: u64,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig { max_document_bytes: 256 * 1024 * 1024 }
    }
}

/// The chunk stage (dynamic partitioning, paper §3.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChunkConfig {
    /// Chunks below this many tokens merge with a neighbour.
    pub ct_min: usize,
    /// Paragraphs are packed into a chunk until the next would exceed this many tokens.
    pub ct_max: usize,
    /// Tokenizer that defines a token; only `cl100k_base` is supported.
    pub tokenizer: String,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        ChunkConfig { ct_min: 500, ct_max: 600, tokenizer: "cl100k_base".into() }
    }
}

/// Extraction backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The LLM when `[llm]` is configured, else the rules extractor.
    Auto,
    /// The offline, deterministic rules extractor.
    Rules,
    /// The configured LLM (an error when `[llm]` is absent).
    Llm,
}

/// The extract stage (truncated sliding-window extraction, paper §3.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExtractConfig {
    /// Which extractor turns chunks into items.
    pub backend: Backend,
    /// `false` extracts every chunk without its preceding chunks (the paper's "w/o SW").
    pub window: bool,
    /// Maximum window size g_max, the target chunk included.
    pub g_max: usize,
    /// Overlap g_overlap between consecutive windows.
    pub g_overlap: usize,
}

impl Default for ExtractConfig {
    fn default() -> Self {
        ExtractConfig { backend: Backend::Auto, window: true, g_max: 3, g_overlap: 2 }
    }
}

/// The hypergraph stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HypergraphConfig {
    /// τ_s: entities with a larger hyperdegree get a condensed summary (by the LLM when one is
    /// configured; the rules backend keeps their first τ_s hyperedge texts), the others the
    /// concatenation of all their hyperedge texts.
    pub tau_s: usize,
}

impl Default for HypergraphConfig {
    fn default() -> Self {
        HypergraphConfig { tau_s: 9 }
    }
}

/// The graph stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GraphConfig {
    /// τ_e: entities with a larger hyperdegree are anchors whose pairwise relations are extracted.
    pub tau_e: usize,
    /// Rules backend: longest connecting phrase (in words) between two entities that makes an edge.
    pub max_connector_words: usize,
}

impl Default for GraphConfig {
    fn default() -> Self {
        GraphConfig { tau_e: 3, max_connector_words: 12 }
    }
}

impl Config {
    /// Whether extraction, summaries and relations use the LLM.
    pub fn uses_llm(&self) -> bool {
        match self.extract.backend {
            Backend::Rules => false,
            Backend::Llm => true,
            Backend::Auto => self.llm.is_some(),
        }
    }

    /// Loads defaults, then `file` (if given), then `FLEXSTRUCT_<SECTION>__<KEY>` variables.
    pub fn load(file: Option<&Path>) -> Result<Config> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(file) = file {
            if !file.is_file() {
                return Err(Error::Config(format!("config file {} does not exist", file.display())));
            }
            figment = figment.merge(Toml::file_exact(file));
        }
        figment = figment.merge(Env::prefixed(ENV_PREFIX).filter(|k| k.as_str().contains("__")).split("__"));
        let config: Config = figment.extract().map_err(|e| Error::ConfigLoad(Box::new(e)))?;
        config.validate()?;
        Ok(config)
    }

    /// Checks values that parse but make no sense.
    pub fn validate(&self) -> Result<()> {
        if self.index.buckets == Some(0) {
            return Err(Error::Config("index.buckets must be at least 1".into()));
        }
        let c = &self.chunk;
        if c.ct_max == 0 {
            return Err(Error::Config("chunk.ct_max must be at least 1".into()));
        }
        if c.ct_min > c.ct_max {
            return Err(Error::Config(format!(
                "chunk.ct_min ({}) must not exceed chunk.ct_max ({})",
                c.ct_min, c.ct_max
            )));
        }
        if c.tokenizer != "cl100k_base" {
            return Err(Error::Config(format!(
                "chunk.tokenizer `{}` is not supported (supported: cl100k_base)",
                c.tokenizer
            )));
        }
        let e = &self.extract;
        if e.g_max == 0 || e.g_overlap >= e.g_max {
            return Err(Error::Config(format!(
                "extract.g_overlap ({}) must be smaller than extract.g_max ({}), and g_max at least 1",
                e.g_overlap, e.g_max
            )));
        }
        self.cluster.validate()?;
        let q = &self.query;
        for (name, tau) in [("tau_eh", q.tau_eh), ("tau_e", q.tau_e), ("tau_chunk", q.tau_chunk)] {
            if tau.is_some_and(|t| !(-1.0..=1.0).contains(&t)) {
                return Err(Error::Config(format!("query.{name} must be a cosine between -1 and 1")));
            }
        }
        if let Some(llm) = &self.llm {
            if llm.base_url.trim().is_empty() || llm.model.trim().is_empty() {
                return Err(Error::Config("llm.base_url and llm.model must both be set when [llm] is given".into()));
            }
            if !(llm.base_url.starts_with("http://") || llm.base_url.starts_with("https://")) {
                return Err(Error::Config(format!("llm.base_url `{}` must start with http:// or https://", llm.base_url)));
            }
            if llm.max_concurrency == 0 || llm.timeout_secs == 0 {
                return Err(Error::Config("llm.max_concurrency and llm.timeout_secs must be at least 1".into()));
            }
        } else if self.extract.backend == Backend::Llm {
            return Err(Error::Config(
                "extract.backend = \"llm\" needs an [llm] section (base_url, model, api_key_env)".into(),
            ));
        }
        if self.ingest.max_document_bytes == 0 || self.ingest.max_document_bytes > i32::MAX as u64 {
            return Err(Error::Config(
                "ingest.max_document_bytes must be between 1 and 2147483647".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::result_large_err)] // figment's test jail returns figment::Error
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_papers() {
        let c = Config::default();
        assert_eq!((c.chunk.ct_min, c.chunk.ct_max), (500, 600));
        c.validate().unwrap();
    }

    #[test]
    fn file_and_env_override_defaults() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("f.toml", "[chunk]\nct_min = 100\nct_max = 200\n")?;
            jail.set_env("FLEXSTRUCT_CHUNK__CT_MAX", "300");
            jail.set_env("FLEXSTRUCT_INDEX", "not/a/config/key");
            let c = Config::load(Some(Path::new("f.toml"))).expect("load");
            assert_eq!((c.chunk.ct_min, c.chunk.ct_max), (100, 300));
            Ok(())
        });
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("typo.toml", "[chunk]\nct_maxx = 1\n")?;
            let err = Config::load(Some(Path::new("typo.toml"))).unwrap_err();
            let chain = format!("{:#}", anyhow_like(&err));
            assert!(chain.contains("ct_maxx"), "{chain}");
            jail.create_file("bad.toml", "[chunk]\nct_min = 700\n")?;
            let err = Config::load(Some(Path::new("bad.toml"))).unwrap_err();
            assert!(err.to_string().contains("ct_min (700)"), "{err}");
            let err = Config::load(Some(Path::new("missing.toml"))).unwrap_err();
            assert!(err.to_string().contains("missing.toml"), "{err}");
            Ok(())
        });
    }

    fn anyhow_like(err: &Error) -> String {
        let mut s = err.to_string();
        let mut source = std::error::Error::source(err);
        while let Some(e) = source {
            s.push_str(": ");
            s.push_str(&e.to_string());
            source = e.source();
        }
        s
    }
}
