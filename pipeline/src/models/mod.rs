//! Embedding models: the [`Embedder`] trait, all-MiniLM-L6-v2 in process ([`minilm`], our own
//! BERT encoder over candle in `bert.rs`, or ONNX Runtime), an OpenAI-compatible `/v1/embeddings` endpoint
//! ([`remote`]), and feature hashing for fast tests ([`hashing`]). Which one runs is the
//! `[embed]` section ([`EmbedConfig`], [`embedder_for`]).

mod bert;
pub mod gat;
pub mod hashing;
pub mod minilm;
pub mod remote;

use std::sync::{Arc, Mutex, Weak};

use serde::{Deserialize, Serialize};

pub use hashing::HashingEmbedder;
pub use minilm::MiniLm;
pub use remote::RemoteEmbedder;

use crate::core::models::{HASHING_PREFIX, MAX_HASHING_DIM, MINILM};
use crate::core::{Error, Result};
use crate::io::CallRecord;

/// Turns texts into L2-normalised vectors.
pub trait Embedder: Send + Sync {
    /// Model name stored with every vector.
    fn model(&self) -> &str;
    /// What computes the vectors (`candle` or `onnx` for MiniLM in process, `endpoint`,
    /// `hashing`), reported by the embed stage; vectors do not depend on it beyond rounding.
    fn engine(&self) -> &'static str;
    /// Vector dimension.
    fn dim(&self) -> usize;
    /// One vector per text, in order.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>>;
    /// Calls made to a remote service since the last time (for `llm_calls`).
    fn take_calls(&self) -> Vec<CallRecord> {
        Vec::new()
    }
}

/// The `[embed]` section: the embedding model of the index (the embed stage writes its vectors;
/// the query stage embeds questions with it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EmbedConfig {
    /// `all-MiniLM-L6-v2` (in process, the default) or `hashing-<dim>` (tests only; `dim` from 1
    /// to 4,096).
    pub model: String,
    /// Folder of the MiniLM files (`make model` fills it).
    pub model_dir: std::path::PathBuf,
    /// What runs MiniLM in process: `auto` (the default: ONNX Runtime when `make onnx` has put
    /// its library and MiniLM's graph in place, candle otherwise), `candle` (our BERT encoder) or
    /// `onnx` (ONNX Runtime on the graph `make onnx` writes into `model_dir` from the same
    /// weights, an error when its files are missing). Vectors agree to 10⁻⁶ and either gives the
    /// same model name, so indexes and questions may mix them.
    pub runtime: Runtime,
    /// ONNX Runtime's shared library, loaded when `runtime` is `onnx`, or `auto` and it is here
    /// (`make onnx` fetches it from the onnxruntime wheel on PyPI). One library per process: the
    /// first one loaded stays.
    pub onnx_library: std::path::PathBuf,
    /// Texts per forward pass (or per request to an endpoint).
    pub batch_size: usize,
    /// An OpenAI-compatible endpoint (`…/v1`) serving `model` on `/embeddings`; empty: the
    /// model runs in process.
    pub base_url: String,
    /// Environment variable holding the endpoint's API key (empty: none).
    pub api_key_env: String,
    /// Most embedding requests in flight.
    pub max_concurrency: usize,
    /// Seconds an endpoint's answer to one request may take (as `llm.timeout_secs`).
    pub timeout_secs: u64,
    /// Retries of a request after a 429, a 5xx, a timeout or a connection error (as
    /// `llm.max_retries`).
    pub max_retries: u32,
    /// First backoff delay in milliseconds, doubled per retry (as `llm.backoff_initial_ms`).
    pub backoff_initial_ms: u64,
    /// Longest backoff delay in milliseconds (as `llm.backoff_max_ms`).
    pub backoff_max_ms: u64,
    /// Largest answer body read from the endpoint, in bytes (as `llm.max_response_bytes`).
    pub max_response_bytes: u64,
    /// Seconds all the endpoint's requests of one run may take together (0: no limit): past it,
    /// what is not embedded fails, is recorded, and is retried by the next run.
    pub deadline_secs: u64,
    /// Most words of an entity's summary embedded with its name (0: all of it, up to the model's
    /// input limit). Entity texts are most of the tokens to embed; the summary a context shows is
    /// never cut. Changing it re-embeds entities only. 40 by default: on the three dev sets it
    /// moved none of our strategies' recall figures and took 15–17 % of the tokens to embed
    /// (CHANGELOG.md, measurement history: "Fewer tokens").
    pub entity_summary_words: usize,
}

impl Default for EmbedConfig {
    fn default() -> Self {
        EmbedConfig {
            model: "all-MiniLM-L6-v2".into(),
            model_dir: "data/models/all-MiniLM-L6-v2".into(),
            runtime: Runtime::Auto,
            onnx_library: "data/models/onnxruntime/libonnxruntime.so".into(),
            batch_size: 64,
            base_url: String::new(),
            api_key_env: "OPENAI_API_KEY".into(),
            max_concurrency: 4,
            timeout_secs: 60,
            max_retries: 6,
            backoff_initial_ms: 500,
            backoff_max_ms: 60_000,
            max_response_bytes: crate::llm::config::DEFAULT_MAX_RESPONSE_BYTES,
            deadline_secs: 0,
            entity_summary_words: 40,
        }
    }
}

impl EmbedConfig {
    /// Checks the values: a `hashing-<dim>` model names a dimension from 1 to
    /// [`MAX_HASHING_DIM`], and batches and concurrency are at least 1.
    pub fn validate(&self) -> Result<()> {
        if let Some(dim) = self.model.strip_prefix(HASHING_PREFIX) {
            match dim.parse::<usize>() {
                Ok(d) if (1..=MAX_HASHING_DIM).contains(&d) => {}
                _ => {
                    return Err(Error::config(
                        "embed.model",
                        format!(
                            "`{}`: expected hashing-<dim> with a dimension from 1 to {MAX_HASHING_DIM} (a wider \
                             vector only fills memory)",
                            self.model
                        ),
                    ));
                }
            }
        }
        if self.batch_size == 0 {
            return Err(Error::config("embed.batch_size", "must be at least 1"));
        }
        if self.max_concurrency == 0 {
            return Err(Error::config("embed.max_concurrency", "must be at least 1"));
        }
        if self.timeout_secs == 0 {
            return Err(Error::config("embed.timeout_secs", "must be at least 1"));
        }
        if self.max_response_bytes < 1024 {
            return Err(Error::config("embed.max_response_bytes", "must be at least 1024"));
        }
        Ok(())
    }

    /// The engine `runtime` names, `auto` settled: ONNX Runtime when both its library and
    /// MiniLM's graph are files, candle otherwise.
    pub fn resolved_runtime(&self) -> Runtime {
        match self.runtime {
            Runtime::Auto if self.onnx_library.is_file() && self.model_dir.join(minilm::ONNX_GRAPH).is_file() => {
                Runtime::Onnx
            }
            Runtime::Auto => Runtime::Candle,
            named => named,
        }
    }
}

/// The engine that runs MiniLM in process (`embed.runtime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// ONNX Runtime when its library and MiniLM's graph are both present, candle otherwise.
    Auto,
    /// Our BERT encoder over candle (`bert.rs`).
    Candle,
    /// ONNX Runtime, loaded at run time from `embed.onnx_library`.
    Onnx,
}

/// Turns a candle error into ours, saying what was being done.
fn candle_error(what: &str) -> impl Fn(candle_core::Error) -> Error + '_ {
    move |e| Error::Model { model: MINILM.into(), what: what.into(), source: Box::new(e) }
}

/// The embedder the configuration names (`index_root` holds the cache of a remote endpoint).
pub fn embedder_for(config: &EmbedConfig, index_root: &std::path::Path) -> Result<Box<dyn Embedder>> {
    if !config.base_url.is_empty() {
        return Ok(Box::new(RemoteEmbedder::connect(config, index_root)?));
    }
    if let Some(dim) = config.model.strip_prefix(HASHING_PREFIX) {
        let dim = dim
            .parse()
            .map_err(|_| Error::config("embed.model", format!("`{}`: expected hashing-<dim>", config.model)))?;
        return Ok(Box::new(HashingEmbedder::new(dim)));
    }
    if config.model == MINILM {
        return Ok(Box::new(minilm(config)?));
    }
    Err(Error::config(
        "embed.model",
        format!(
            "`{}` is not supported in process (all-MiniLM-L6-v2 or hashing-<dim>; others through embed.base_url)",
            config.model
        ),
    ))
}

fn minilm(config: &EmbedConfig) -> Result<MiniLm> {
    match config.resolved_runtime() {
        Runtime::Onnx => MiniLm::load_onnx(&config.model_dir, config.batch_size, &config.onnx_library),
        Runtime::Candle | Runtime::Auto => MiniLm::load(&config.model_dir, config.batch_size),
    }
}

/// What tells two in-process MiniLM models apart: folder, runtime, its library, batch size.
type MiniLmKey = (std::path::PathBuf, Runtime, std::path::PathBuf, usize);

/// The in-process MiniLM models query engines use, while one does.
static SHARED_MINILM: Mutex<Vec<(MiniLmKey, Weak<MiniLm>)>> = Mutex::new(Vec::new());

/// The embedder of a query engine: as [`embedder_for`], except that an in-process MiniLM is
/// loaded once per process and shared by every engine that uses it at the same time — the
/// indexes of one server and the generations of one index during an update — instead of a copy
/// each (its weights and runtime sessions: about 220 MB and two threads per copy, measured).
/// Their questions then take turns on the same cores, which they share anyway. The stages keep
/// a model of their own, so that an update's embedding never holds up a question.
pub fn query_embedder_for(config: &EmbedConfig, index_root: &std::path::Path) -> Result<Box<dyn Embedder>> {
    if config.model != MINILM || !config.base_url.is_empty() {
        return embedder_for(config, index_root);
    }
    let key = (config.model_dir.clone(), config.resolved_runtime(), config.onnx_library.clone(), config.batch_size);
    // Held while a model loads, so that engines opened together load it once.
    let mut shared = SHARED_MINILM.lock().map_err(|_| Error::Internal("the shared models' lock is poisoned".into()))?;
    shared.retain(|(_, model)| model.strong_count() > 0);
    if let Some(model) = shared.iter().find(|(k, _)| *k == key).and_then(|(_, model)| model.upgrade()) {
        return Ok(Box::new(model));
    }
    let model = Arc::new(minilm(config)?);
    shared.push((key, Arc::downgrade(&model)));
    Ok(Box::new(model))
}

impl<T: Embedder + ?Sized> Embedder for Arc<T> {
    fn model(&self) -> &str {
        (**self).model()
    }

    fn engine(&self) -> &'static str {
        (**self).engine()
    }

    fn dim(&self) -> usize {
        (**self).dim()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        (**self).embed(texts)
    }

    fn take_calls(&self) -> Vec<CallRecord> {
        (**self).take_calls()
    }
}

/// Scales `v` to unit length (a zero vector stays zero).
pub fn normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_engines_share_one_in_process_model_while_one_uses_it() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/models/all-MiniLM-L6-v2");
        assert!(dir.join("model.safetensors").is_file(), "the MiniLM weights are missing: run `make model`");
        // A batch size no other test uses: the models are shared by the whole test process.
        let config = EmbedConfig { model_dir: dir, runtime: Runtime::Candle, batch_size: 7, ..EmbedConfig::default() };
        let users = |config: &EmbedConfig| -> Vec<usize> {
            let shared = SHARED_MINILM.lock().unwrap();
            shared
                .iter()
                .filter(|(key, model)| {
                    key.0 == config.model_dir && key.3 == config.batch_size && model.strong_count() > 0
                })
                .map(|(_, model)| model.strong_count())
                .collect()
        };
        let root = std::path::Path::new(".");
        let (a, b) = (query_embedder_for(&config, root).unwrap(), query_embedder_for(&config, root).unwrap());
        assert_eq!(users(&config), [2], "two engines, one model");
        let other = EmbedConfig { batch_size: 9, ..config.clone() };
        let c = query_embedder_for(&other, root).unwrap();
        assert_eq!((users(&config), users(&other)), (vec![2], vec![1]), "another batch size is another model");
        assert_eq!(a.embed(&["Kestrel Valley"]).unwrap(), c.embed(&["Kestrel Valley"]).unwrap());
        drop((a, b, c));
        assert!(users(&config).is_empty() && users(&other).is_empty(), "freed with its last engine");
        // The stages' embedder is a model of its own.
        let stage = embedder_for(&config, root).unwrap();
        assert!(users(&config).is_empty());
        assert_eq!(stage.model(), MINILM);
    }

    #[test]
    fn auto_runs_onnx_only_when_both_of_its_files_are_there() {
        let dir = tempfile::tempdir().unwrap();
        let config = EmbedConfig {
            model_dir: dir.path().join("model"),
            onnx_library: dir.path().join("libonnxruntime.so"),
            ..EmbedConfig::default()
        };
        assert_eq!(config.runtime, Runtime::Auto);
        std::fs::create_dir(&config.model_dir).unwrap();
        assert_eq!(config.resolved_runtime(), Runtime::Candle);
        std::fs::write(&config.onnx_library, b"").unwrap();
        assert_eq!(config.resolved_runtime(), Runtime::Candle, "the graph is still missing");
        std::fs::write(config.model_dir.join(minilm::ONNX_GRAPH), b"").unwrap();
        assert_eq!(config.resolved_runtime(), Runtime::Onnx);
        // A runtime named outright is taken as it is.
        let candle = EmbedConfig { runtime: Runtime::Candle, ..config.clone() };
        assert_eq!(candle.resolved_runtime(), Runtime::Candle);
        std::fs::remove_file(&config.onnx_library).unwrap();
        assert_eq!(config.resolved_runtime(), Runtime::Candle);
        let onnx = EmbedConfig { runtime: Runtime::Onnx, ..config };
        assert_eq!(onnx.resolved_runtime(), Runtime::Onnx, "named: its missing file is an error at load");
    }
}
