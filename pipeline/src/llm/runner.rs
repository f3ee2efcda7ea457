//! Running many LLM requests concurrently from the (synchronous, rayon-driven) stages: a client
//! plus its own async runtime. One runner is shared by every LLM backend of a process, so that
//! they share the endpoint's concurrency and rate limits.

use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::client::{CallContext, LlmClient, Message};
use super::config::LlmConfig;
use super::prompts::ask_json;
use crate::core::backend::BackendId;
use crate::core::{Result, threads};
use crate::io::{CallRecord, UnitError};

/// A client and the runtime its requests run on.
#[derive(Debug)]
pub struct Runner {
    client: Arc<LlmClient>,
    runtime: tokio::runtime::Runtime,
}

impl Runner {
    /// A runner over `client`, its runtime sized like every pool of the process.
    pub fn new(client: Arc<LlmClient>) -> Result<Runner> {
        Ok(Runner { client, runtime: threads::runtime()? })
    }

    /// A runner for the endpoint of `config`, caching in the index at `index_root`.
    pub fn connect(config: &LlmConfig, index_root: &std::path::Path) -> Result<Runner> {
        Runner::new(Arc::new(LlmClient::new(config, index_root)?))
    }

    /// The client.
    pub fn client(&self) -> &LlmClient {
        &self.client
    }

    /// The identity of a backend that asks this endpoint with a prompt of version
    /// `prompt_version` (see [`super::prompts`]).
    pub fn identity(&self, prompt_version: String) -> BackendId {
        let config = self.client.config();
        BackendId::Llm {
            model: config.model.clone(),
            base_url: config.base_url.clone(),
            prompt_version,
            temperature: config.temperature,
            max_tokens: config.max_tokens,
            extra_body: config.extra_body.clone(),
        }
    }

    /// Asks every request for JSON of shape `T`, all at once (the client bounds concurrency),
    /// and returns the answers in order.
    pub fn ask_all<T: DeserializeOwned + schemars::JsonSchema>(
        &self,
        asks: Vec<(CallContext, Vec<Message>)>,
    ) -> Vec<Result<T, UnitError>> {
        let client = &self.client;
        self.runtime.block_on(futures::future::join_all(
            asks.into_iter().map(|(context, messages)| async move { ask_json::<T>(client, &context, messages).await }),
        ))
    }

    /// Runs a future on the runner's runtime.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// Takes the recorded calls of the given documents (sorted doc ids).
    pub fn drain_calls(&self, sorted_doc_ids: &[String]) -> Vec<CallRecord> {
        self.client.drain_calls(|d| d.is_some_and(|d| sorted_doc_ids.binary_search_by(|x| x.as_str().cmp(d)).is_ok()))
    }

    /// Takes every recorded call.
    pub fn drain_all_calls(&self) -> Vec<CallRecord> {
        self.client.drain_calls(|_| true)
    }
}
