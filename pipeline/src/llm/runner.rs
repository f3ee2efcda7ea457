//! Running many LLM requests of a bucket concurrently from the (synchronous, rayon-driven)
//! stages: a client plus its own async runtime.

use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::client::{CallContext, CallRecord, LlmClient, Message};
use super::prompts::ask_json;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::failures::UnitError;

/// A client and the runtime its requests run on.
#[derive(Debug)]
pub struct Runner {
    client: Arc<LlmClient>,
    runtime: tokio::runtime::Runtime,
}

impl Runner {
    /// A runner over `client`.
    pub fn new(client: Arc<LlmClient>) -> Result<Runner> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Error::Internal(format!("cannot start the async runtime: {e}")))?;
        Ok(Runner { client, runtime })
    }

    /// The runner a stage should use: Some when the configuration selects the LLM.
    pub fn for_config(config: &Config, index_root: &std::path::Path) -> Result<Option<Runner>> {
        match (&config.llm, config.uses_llm()) {
            (Some(llm), true) => Ok(Some(Runner::new(Arc::new(LlmClient::new(llm, index_root)?))?)),
            _ => Ok(None),
        }
    }

    /// The client.
    pub fn client(&self) -> &LlmClient {
        &self.client
    }

    /// Asks every request for JSON of shape `T`, all at once (the client bounds concurrency),
    /// and returns the answers in order.
    pub fn ask_all<T: DeserializeOwned>(&self, asks: Vec<(CallContext, Vec<Message>)>) -> Vec<Result<T, UnitError>> {
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
}
