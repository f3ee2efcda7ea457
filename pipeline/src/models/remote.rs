//! An OpenAI-compatible `/v1/embeddings` endpoint as an [`Embedder`], through the LLM client.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{EmbedConfig, Embedder, normalise};
use crate::core::{Error, Result};
use crate::io::CallRecord;
use crate::llm::{CallContext, LlmClient, LlmConfig, Runner};

/// An OpenAI-compatible `/v1/embeddings` endpoint, through the LLM client (cache, concurrency,
/// retries, rate limits, call records).
#[derive(Debug)]
pub struct RemoteEmbedder {
    runner: Runner,
    dim: usize,
    batch_size: usize,
    /// When the run's requests must have ended (`embed.deadline_secs`), if ever.
    deadline: Option<(Instant, u64)>,
}

impl RemoteEmbedder {
    /// A client for `config.model` at `config.base_url`; one request (cached afterwards) finds
    /// the dimension.
    pub fn connect(config: &EmbedConfig, index_root: &Path) -> Result<RemoteEmbedder> {
        let llm = LlmConfig {
            base_url: config.base_url.clone(),
            model: config.model.clone(),
            api_key_env: config.api_key_env.clone(),
            max_concurrency: config.max_concurrency.max(1),
            timeout_secs: config.timeout_secs,
            max_retries: config.max_retries,
            backoff_initial_ms: config.backoff_initial_ms,
            backoff_max_ms: config.backoff_max_ms,
            max_response_bytes: config.max_response_bytes,
            ..LlmConfig::default()
        };
        let runner = Runner::new(Arc::new(LlmClient::new(&llm, index_root)?))?;
        let deadline = (config.deadline_secs > 0)
            .then(|| (Instant::now() + Duration::from_secs(config.deadline_secs), config.deadline_secs));
        let mut embedder = RemoteEmbedder { runner, dim: 0, batch_size: config.batch_size.max(1), deadline };
        let probe = embedder.embed(&["dimension probe"])?;
        embedder.dim = probe.first().map_or(0, Vec::len);
        if embedder.dim == 0 {
            return Err(Error::External {
                service: embedder.runner.client().service(),
                what: "the dimension probe".into(),
                source: "an empty vector came back".into(),
            });
        }
        Ok(embedder)
    }
}

impl Embedder for RemoteEmbedder {
    fn model(&self) -> &str {
        self.runner.client().model()
    }

    fn engine(&self) -> &'static str {
        "endpoint"
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let client = self.runner.client();
        let context = CallContext { stage: "embed".into(), doc_id: None, purpose: "embeddings".into() };
        let batches: Vec<&[&str]> = texts.chunks(self.batch_size).collect();
        let requests = futures::future::join_all(batches.iter().map(|b| client.embeddings(&context, b)));
        let answers = match self.deadline {
            None => self.runner.block_on(requests),
            Some((at, secs)) => {
                let past = || Error::External {
                    service: client.service(),
                    what: "embeddings".into(),
                    source: format!("the run's deadline of {secs} s (embed.deadline_secs) has passed").into(),
                };
                let left = at.checked_duration_since(Instant::now()).ok_or_else(past)?;
                // The timer is made inside the runtime that drives it.
                self.runner.block_on(async { tokio::time::timeout(left, requests).await }).map_err(|_| past())?
            }
        };
        let mut out = Vec::with_capacity(texts.len());
        for answer in answers {
            let mut vectors = answer.map_err(|e| Error::External {
                service: client.service(),
                what: "embeddings".into(),
                source: Box::new(e),
            })?;
            for v in &mut vectors {
                normalise(v);
            }
            out.extend(vectors);
        }
        Ok(out)
    }

    fn take_calls(&self) -> Vec<CallRecord> {
        self.runner.drain_all_calls()
    }
}
