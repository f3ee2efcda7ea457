//! The `[query]` section: the retrieval strategy, its module toggles and breadths, thresholds
//! and the context budget.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

pub use crate::core::models::Thresholds;
use crate::core::models::calibrated_thresholds;
use crate::core::units::Unit;
use crate::core::{Error, Result};
pub use crate::io::kb::Precision;

/// Declares [`Mode`] from the table of strategies: each row a variant, the name of flags, config
/// and outputs, whether evaluation compares it by default, and its help.
macro_rules! modes {
    ($($variant:ident $name:literal $compared:literal $help:literal,)+) => {
        /// Retrieval strategy of the query stage: the three FlexStructRAG modes and the peers.
        /// What each one does is its file under [`super::strategy`].
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default, schemars::JsonSchema,
            clap::ValueEnum,
        )]
        pub enum Mode {
            #[default]
            $(#[doc = $help] #[serde(rename = $name)] #[value(name = $name)] $variant,)+
        }

        impl Mode {
            /// Every mode, in the order reports list them.
            pub const ALL: &[Mode] = &[$(Mode::$variant),+];

            /// The name used in flags, config and outputs.
            pub fn name(self) -> &'static str {
                match self { $(Mode::$variant => $name,)+ }
            }

            /// What the strategy does, in a line.
            pub fn help(self) -> &'static str {
                match self { $(Mode::$variant => $help,)+ }
            }

            /// Whether `flexstruct-eval run` compares it unless told which modes to run.
            pub fn compared_by_default(self) -> bool {
                match self { $(Mode::$variant => $compared,)+ }
            }
        }
    };
}

// The table of strategies: a new strategy is a row here and its file under `strategy/` (whose
// `of` the compiler then asks for a line). The first row is the default.
modes! {
    Hybrid "hybrid" true "Entity + hyperedge + edge + cluster retrieval (the paper's default), fused with bridge and lexical retrieval.",
    Hypergraph "hypergraph" true "Entity + hyperedge + cluster retrieval (with bridges and lexical, fused).",
    Graph "graph" true "Entity + edge retrieval over the binary graph.",
    Chunks "chunks" true "Standard RAG: the top chunks by cosine.",
    ChunksMaxsim "chunks-maxsim" true "Chunks ranked by their best sentence (a strong simple baseline).",
    SentenceWindow "sentence-window" true "The top hyperedges, each with its neighbours in its document (a strong simple baseline).",
    Hypergraphrag "hypergraphrag" true "HyperGraphRAG: entity and hyperedge retrieval, bidirectional expansion, chunk fusion.",
    Paths "paths" false "SG-RAG: the question as a graph matched against the kb's through the path index (needs `make paths`).",
    None "none" true "No retrieval: the model answers from its own knowledge.",
}

impl std::str::FromStr for Mode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Mode> {
        Mode::ALL.iter().copied().find(|m| m.name() == s.trim()).ok_or_else(|| {
            let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
            Error::config("query.mode", format!("unknown query mode `{s}` (one of {})", names.join(", ")))
        })
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How hybrid and hypergraph turn what their modules retrieve into a context (graph always as
/// the paper).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default, schemars::JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Assembly {
    /// The paper's: each module's units in the context as they are (entity summaries, whole
    /// clusters, hyperedges, edges), each module cut at its own breadth, ranked by cosine.
    Paper,
    /// Ours: every module (and the lexical signal) ranks hyperedges, the rankings are fused
    /// (weighted reciprocal rank), and each hyperedge in fused order comes with its
    /// neighbours (`query.window_k` a side), as one passage per stretch of a document.
    #[default]
    Fused,
}

/// Where the fused assembly takes a retrieved hyperedge's neighbours from.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default, schemars::JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum WindowIn {
    /// Its neighbours in reading order in its document.
    #[default]
    Document,
    /// Its fellow members of its SSC cluster, in reading order (with cluster retrieval on; a
    /// hyperedge in no cluster, and every hyperedge without SSC, takes document neighbours).
    Cluster,
}

/// The weight of each module's ranking in the fused assembly: a hyperedge at rank r (from 1) of
/// a module's ranking adds weight / (`rrf_k` + r) to its fused score. 0 leaves a module's
/// ranking out (its toggle still switches it off).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FusionWeights {
    /// Entity retrieval: the hyperedges of the matched entities and of the documents titled
    /// with their names, by cosine.
    pub entities: f32,
    /// Hyperedge retrieval: hyperedges by cosine.
    pub hyperedges: f32,
    /// Lexical retrieval: hyperedges by BM25 (2: better than 1 on the tune halves of the two
    /// long-document sets, CHANGELOG.md, measurement history).
    pub lexical: f32,
    /// Bridge retrieval.
    pub bridges: f32,
    /// Edge retrieval: the hyperedges behind the edges, by the edges' cosine (0: measured to
    /// cost recall on every dev set, CHANGELOG.md, measurement history).
    pub edges: f32,
}

impl Default for FusionWeights {
    fn default() -> Self {
        FusionWeights { entities: 1.0, hyperedges: 1.0, lexical: 2.0, bridges: 1.0, edges: 0.0 }
    }
}

impl Assembly {
    /// The name used in config and flags.
    pub fn name(self) -> &'static str {
        match self {
            Assembly::Paper => "paper",
            Assembly::Fused => "fused",
        }
    }
}

impl std::str::FromStr for Assembly {
    type Err = Error;
    fn from_str(s: &str) -> Result<Assembly> {
        [Assembly::Paper, Assembly::Fused]
            .into_iter()
            .find(|a| a.name() == s.trim())
            .ok_or_else(|| Error::config("query.assembly", format!("unknown assembly `{s}` (paper or fused)")))
    }
}

/// The `[query]` section. Thresholds left unset take the calibrated value of the embedding
/// model (see [`QueryConfig::thresholds`]). Who finds the question's entities and who answers
/// are `backends.query_entities` and `backends.answers`. Every key is also a flag of the
/// binaries that query (flattened into their arguments; `--no-<toggle>` for a module toggle),
/// which sets it over the file and the environment (see `flexstruct_stages::query_overrides`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema, clap::Args)]
#[serde(deny_unknown_fields, default)]
#[command(next_help_heading = "Query settings (each sets the [query] key of its name)")]
pub struct QueryConfig {
    /// Retrieval strategy.
    #[arg(long, value_enum, default_value_t = QueryConfig::default().mode)]
    pub mode: Mode,
    /// How hybrid and hypergraph assemble their context (graph always as the paper).
    #[arg(long, value_enum, default_value_t = QueryConfig::default().assembly)]
    pub assembly: Assembly,
    /// Module toggles (the paper's ablations): entity retrieval (EnR).
    #[arg(long = "no-entities", action = clap::ArgAction::SetFalse, help = "Switch off entity retrieval (EnR)")]
    pub entities: bool,
    /// Hyperedge retrieval (HR); when off, hyperedges are still scanned to pick clusters.
    #[arg(long = "no-hyperedges", action = clap::ArgAction::SetFalse, help = "Switch off hyperedge retrieval (HR)")]
    pub hyperedges: bool,
    /// Edge retrieval (ER).
    #[arg(long = "no-edges", action = clap::ArgAction::SetFalse, help = "Switch off edge retrieval (ER)")]
    pub edges: bool,
    /// Bridge retrieval (BR, ours, beyond the paper): the facts one hop past the question's
    /// entities and hyperedges, for questions whose answer is about an entity they do not name.
    #[arg(long = "no-bridges", action = clap::ArgAction::SetFalse, help = "Switch off bridge retrieval (BR)")]
    pub bridges: bool,
    /// Cluster retrieval (SSC).
    #[arg(long = "no-clusters", action = clap::ArgAction::SetFalse, help = "Switch off cluster retrieval (SSC)")]
    pub clusters: bool,
    /// Lexical retrieval (LR, ours, fused assembly only): hyperedges ranked by BM25 with the
    /// question beside their cosine.
    #[arg(long = "no-lexical", action = clap::ArgAction::SetFalse, help = "Switch off lexical retrieval (LR)")]
    pub lexical: bool,
    /// The constant k of reciprocal-rank fusion: a hyperedge at rank r (from 1) of a module's
    /// ranking scores weight / (k + r) there; its fused score is the sum over modules.
    #[arg(long, default_value_t = QueryConfig::default().rrf_k)]
    pub rrf_k: f32,
    /// The weight of each module's ranking in the fused assembly.
    #[arg(skip)]
    pub weights: FusionWeights,
    /// The factor on the entity and bridge weights for a question that follows a relation (`the
    /// director of film X`, `X's mother-in-law`): its answer is a fact about an entity the
    /// question does not name, which those two modules reach and similarity does not.
    #[arg(long, default_value_t = QueryConfig::default().hop_boost)]
    pub hop_boost: f32,
    /// Where the fused assembly takes each hyperedge's `window_k` neighbours from.
    #[arg(long, value_enum, default_value_t = QueryConfig::default().window_in)]
    pub window_in: WindowIn,
    /// N_B: most bridge hyperedges retrieved.
    #[arg(long, default_value_t = QueryConfig::default().n_b)]
    pub n_b: usize,
    /// N_EH: most hyperedges retrieved.
    #[arg(long, default_value_t = QueryConfig::default().n_eh)]
    pub n_eh: usize,
    /// N_E: most edges retrieved.
    #[arg(long, default_value_t = QueryConfig::default().n_e)]
    pub n_e: usize,
    /// τ_EH: least cosine of a retrieved hyperedge (unset: the model's calibrated value).
    #[arg(long)]
    pub tau_eh: Option<f32>,
    /// τ_E: least cosine of a retrieved edge (unset: the model's calibrated value).
    #[arg(long)]
    pub tau_e: Option<f32>,
    /// Chunks retrieved by the `chunks` strategy and fused by `hypergraphrag` (k_C).
    #[arg(long, default_value_t = QueryConfig::default().chunk_k)]
    pub chunk_k: usize,
    /// Least cosine of a retrieved chunk (τ_C; unset: the model's calibrated value).
    #[arg(long)]
    pub tau_chunk: Option<f32>,
    /// HyperGraphRAG's k_V: entities retrieved by embedding similarity.
    #[arg(long, default_value_t = QueryConfig::default().hgr_k_v)]
    pub hgr_k_v: usize,
    /// HyperGraphRAG's k_H: hyperedges retrieved by embedding similarity.
    #[arg(long, default_value_t = QueryConfig::default().hgr_k_h)]
    pub hgr_k_h: usize,
    /// Most context tokens (cl100k); the lowest-ranked evidence is dropped first. 0: no limit.
    #[arg(long, env = "FLEXSTRUCT_MAX_CONTEXT_TOKENS", default_value_t = QueryConfig::default().max_context_tokens)]
    pub max_context_tokens: usize,
    /// Fill the cap: with `max_context_tokens` set, every strategy keeps taking evidence in rank
    /// order until the cap is full or its candidates run out — its breadths (N_EH, N_E, N_B,
    /// `chunk_k`) become the first of [`FILL_POOL`] candidates — so that strategies compared at
    /// one cap use it equally. Off: the breadths stop retrieval, and the cap only trims.
    #[arg(long)]
    pub fill: bool,
    /// Neighbours on each side of a hyperedge in the sentence-window baseline and in the fused
    /// assembly (k).
    #[arg(long, default_value_t = QueryConfig::default().window_k)]
    pub window_k: usize,
    /// Hyperedge retrieval gives each hyperedge with its ±`widen` neighbours in its document, as
    /// one passage (0: the hyperedge alone, as in the paper).
    #[arg(long, default_value_t = QueryConfig::default().widen)]
    pub widen: usize,
    /// A second retrieval for a relation question (hybrid and hypergraph, fused assembly): when
    /// the extractive reader's chain through the context reaches an entity whose sentences do
    /// not say what the question asks of it (or the next hop), this many of the best pieces
    /// retrieved about that entity join the context after its first piece; a comparison of role
    /// holders ("the director who was born first, A or B?") does the same for each holder the
    /// context names without the date compared (0: off).
    #[arg(long, default_value_t = QueryConfig::default().second_hop)]
    pub second_hop: usize,
    /// Say each thing once: verbatim evidence of one document that overlaps or touches merges
    /// into one passage, and derived text already in the context is left out
    /// ([`super::context::Context::assemble_with`]).
    #[arg(long)]
    pub merge: bool,
    /// The extractive answerer answers a factoid question (who, when, where, how many, which of
    /// two, same or not) with the span that answers it and gives the sentence as its support;
    /// off, the answer is the best sentence.
    #[arg(long = "no-short-answers", action = clap::ArgAction::SetFalse, help = "Answer with the best sentence, not a factoid's span")]
    pub short_answers: bool,
    /// How the kb's vectors are held once loaded: `f32` (exact) or `f16` (half the memory, for
    /// kbs of millions of facts; cosines move by about 1e-3 at most). Read when the kb is loaded.
    #[arg(long, value_enum, default_value_t = QueryConfig::default().vector_precision)]
    pub vector_precision: Precision,
    /// With a re-ranking endpoint configured (`[rerank]`): the first this many distinct pieces of
    /// every strategy's ranking are scored by it against the question and put in its order,
    /// before the rest and before the cap is applied (0: no re-ranking).
    #[arg(long, default_value_t = QueryConfig::default().rerank_candidates)]
    pub rerank_candidates: usize,
}

/// Most pieces re-ranked per question (one request carries them all).
pub const MAX_RERANK_CANDIDATES: usize = 1000;

/// Candidates per retrieval module when a strategy fills its cap.
pub const FILL_POOL: usize = 200;

/// The breadths a strategy retrieves with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Breadths {
    /// Hyperedges (N_EH; the seeds of sentence windows).
    pub hyperedges: usize,
    /// Edges (N_E).
    pub edges: usize,
    /// Bridge hyperedges (N_B).
    pub bridges: usize,
    /// Chunks (`chunk_k`).
    pub chunks: usize,
}

impl Default for QueryConfig {
    fn default() -> Self {
        QueryConfig {
            mode: Mode::Hybrid,
            assembly: Assembly::Fused,
            entities: true,
            lexical: true,
            rrf_k: 60.0,
            weights: FusionWeights::default(),
            hop_boost: 4.0,
            window_in: WindowIn::Document,
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
            fill: false,
            window_k: 2,
            merge: false,
            widen: 0,
            second_hop: 4,
            short_answers: true,
            vector_precision: Precision::F32,
            rerank_candidates: 40,
        }
    }
}

/// The smallest context cap: one piece's citation header (its number, title and source) with a
/// sentence of text.
pub const MIN_CONTEXT_TOKENS: usize = 64;

impl QueryConfig {
    /// The thresholds in effect: configured values win, then those the merge derived from the
    /// kb's own vectors (`derived`, by unit), then the model's calibrated ones
    /// ([`calibrated_thresholds`], for a kb merged before thresholds were derived).
    pub fn thresholds(&self, model: &str, derived: &HashMap<Unit, f32>) -> Thresholds {
        let calibrated = calibrated_thresholds(model);
        let pick = |configured: Option<f32>, unit: Unit, fallback: f32| {
            configured.or_else(|| derived.get(&unit).copied()).unwrap_or(fallback)
        };
        Thresholds {
            hyperedge: pick(self.tau_eh, Unit::Hyperedge, calibrated.hyperedge),
            edge: pick(self.tau_e, Unit::Edge, calibrated.edge),
            chunk: pick(self.tau_chunk, Unit::Chunk, calibrated.chunk),
        }
    }

    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        let w = &self.weights;
        for (name, value) in [
            ("rrf_k", self.rrf_k),
            ("hop_boost", self.hop_boost),
            ("weights.entities", w.entities),
            ("weights.hyperedges", w.hyperedges),
            ("weights.lexical", w.lexical),
            ("weights.bridges", w.bridges),
            ("weights.edges", w.edges),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(Error::config(format!("query.{name}"), "must be a number of at least 0"));
            }
        }
        if (1..MIN_CONTEXT_TOKENS).contains(&self.max_context_tokens) {
            return Err(Error::config(
                "query.max_context_tokens (--max-context-tokens)",
                format!(
                    "{} is too small: 0 (no cap) or at least {MIN_CONTEXT_TOKENS} tokens, below which not even one piece \
                     of evidence with its citation fits",
                    self.max_context_tokens
                ),
            ));
        }
        if self.rerank_candidates > MAX_RERANK_CANDIDATES {
            return Err(Error::config(
                "query.rerank_candidates",
                format!(
                    "{} is more than one request should carry: at most {MAX_RERANK_CANDIDATES}",
                    self.rerank_candidates
                ),
            ));
        }
        for (name, tau) in [("tau_eh", self.tau_eh), ("tau_e", self.tau_e), ("tau_chunk", self.tau_chunk)] {
            if tau.is_some_and(|t| !(-1.0..=1.0).contains(&t)) {
                return Err(Error::config(format!("query.{name}"), "must be a cosine between -1 and 1"));
            }
        }
        Ok(())
    }
}
