//! Rules or LLM: the capabilities that either the offline rules or a configured LLM can provide,
//! the one explicit choice per capability (the `[backends]` section), and the identity of a
//! backend that goes into the fingerprint and the metrics of everything it produces.
//!
//! ```toml
//! [backends]
//! all = "auto"         # the switch that sets every capability: auto | rules | llm
//! summaries = "rules"  # a capability set on its own wins over `all`
//! ```
//!
//! `auto` is the LLM when an `[llm]` section is configured, else the rules.

use serde::{Deserialize, Serialize};

use super::error::{Error, Result};

/// What can be done by the rules or by an LLM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    /// Items (statement, span, entities) of a chunk: the extract stage.
    Extract,
    /// Summaries of entities above τ_s: the hypergraph stage.
    Summaries,
    /// Pairwise relations around anchor entities: the graph stage.
    Relations,
    /// The entities a question names: the query stage.
    QueryEntities,
    /// The question as a graph of entities, unknowns and relations (ψ of `--mode paths`).
    QueryGraphs,
    /// Answers from a context: the query stage.
    Answers,
    /// The GE judge: the evaluation.
    Judge,
}

impl Capability {
    /// Every capability, in pipeline order.
    pub const ALL: [Capability; 7] = [
        Capability::Extract,
        Capability::Summaries,
        Capability::Relations,
        Capability::QueryEntities,
        Capability::QueryGraphs,
        Capability::Answers,
        Capability::Judge,
    ];

    /// Its key in the `[backends]` section.
    pub fn key(self) -> &'static str {
        match self {
            Capability::Extract => "extract",
            Capability::Summaries => "summaries",
            Capability::Relations => "relations",
            Capability::QueryEntities => "query_entities",
            Capability::QueryGraphs => "query_graphs",
            Capability::Answers => "answers",
            Capability::Judge => "judge",
        }
    }
}

/// The choice for one capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// The LLM when `[llm]` is configured, else the rules.
    #[default]
    Auto,
    /// The offline, deterministic rules.
    Rules,
    /// The configured LLM (an error when `[llm]` is absent).
    Llm,
}

/// The `[backends]` section: one choice per capability, `all` for the ones not set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BackendsConfig {
    /// The choice of every capability that is not set on its own.
    pub all: BackendChoice,
    /// Item extraction.
    pub extract: Option<BackendChoice>,
    /// Entity summaries above τ_s.
    pub summaries: Option<BackendChoice>,
    /// Pairwise relations.
    pub relations: Option<BackendChoice>,
    /// Query entities.
    pub query_entities: Option<BackendChoice>,
    /// Query graphs of `--mode paths`.
    pub query_graphs: Option<BackendChoice>,
    /// Answers.
    pub answers: Option<BackendChoice>,
    /// The GE judge (`rules`: GE is not measured; it is never estimated without an LLM).
    pub judge: Option<BackendChoice>,
}

impl BackendsConfig {
    /// The capability's own choice, when it is set.
    fn own(&self, capability: Capability) -> Option<BackendChoice> {
        match capability {
            Capability::Extract => self.extract,
            Capability::Summaries => self.summaries,
            Capability::Relations => self.relations,
            Capability::QueryEntities => self.query_entities,
            Capability::QueryGraphs => self.query_graphs,
            Capability::Answers => self.answers,
            Capability::Judge => self.judge,
        }
    }

    /// The choice in effect for `capability`.
    pub fn choice(&self, capability: Capability) -> BackendChoice {
        self.own(capability).unwrap_or(self.all)
    }

    /// Whether `capability` runs on the LLM, given whether one is configured; `llm` without an
    /// LLM is an error naming the key that asks for it.
    pub fn uses_llm(&self, capability: Capability, llm_configured: bool) -> Result<bool> {
        match self.choice(capability) {
            BackendChoice::Rules => Ok(false),
            BackendChoice::Auto => Ok(llm_configured),
            BackendChoice::Llm if llm_configured => Ok(true),
            BackendChoice::Llm => {
                let key = if self.own(capability).is_some() { capability.key() } else { "all" };
                Err(Error::config(
                    format!("backends.{key}"),
                    "is \"llm\" but no [llm] section (base_url, model, api_key_env) is configured",
                ))
            }
        }
    }
}

/// Version of the rules backends' output; bumped whenever a rule changes what it produces for
/// the same input (the stage versions bump with it).
pub const RULES_VERSION: &str = "1";

/// Who produced something: what goes into the fingerprint of every table a backend writes (so
/// that switching backend, model, endpoint or prompt reruns exactly what it affects), into the
/// stage's metrics, and — as [`BackendId::label`] — into a column of the rows it wrote.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "backend", rename_all = "lowercase")]
pub enum BackendId {
    /// The offline rules.
    Rules {
        /// [`RULES_VERSION`].
        version: &'static str,
    },
    /// An LLM behind an OpenAI-compatible endpoint.
    Llm {
        /// Model name.
        model: String,
        /// Endpoint.
        base_url: String,
        /// Hash of the prompt's instructions: changes whenever our prompt does.
        prompt_version: String,
        /// Sampling temperature.
        temperature: f32,
        /// Most completion tokens per request.
        max_tokens: u32,
        /// `llm.extra_body` (left out when empty, so that identities from before it hold).
        #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
        extra_body: serde_json::Map<String, serde_json::Value>,
    },
}

impl BackendId {
    /// The rules backend.
    pub const RULES: BackendId = BackendId::Rules { version: RULES_VERSION };

    /// The label stored in tables: `rules`, or `llm:<model>`.
    pub fn label(&self) -> String {
        match self {
            BackendId::Rules { .. } => RULES_LABEL.to_owned(),
            BackendId::Llm { model, .. } => format!("llm:{model}"),
        }
    }

    /// Whether this is an LLM.
    pub fn is_llm(&self) -> bool {
        matches!(self, BackendId::Llm { .. })
    }
}

/// Label of rows the rules wrote.
pub const RULES_LABEL: &str = "rules";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capability_set_on_its_own_wins_over_all() {
        let config = BackendsConfig {
            all: BackendChoice::Llm,
            summaries: Some(BackendChoice::Rules),
            ..BackendsConfig::default()
        };
        assert!(config.uses_llm(Capability::Extract, true).unwrap());
        assert!(!config.uses_llm(Capability::Summaries, true).unwrap());
        let err = config.uses_llm(Capability::Extract, false).unwrap_err();
        assert!(err.to_string().contains("backends.all"), "{err}");
        let config = BackendsConfig { judge: Some(BackendChoice::Llm), ..BackendsConfig::default() };
        assert!(config.uses_llm(Capability::Judge, false).unwrap_err().to_string().contains("backends.judge"));
        // auto follows the presence of [llm].
        let auto = BackendsConfig::default();
        assert!(Capability::ALL.iter().all(|&c| auto.uses_llm(c, true).unwrap() && !auto.uses_llm(c, false).unwrap()));
    }

    #[test]
    fn identities_label_and_serialise() {
        assert_eq!(BackendId::RULES.label(), "rules");
        let mut llm = BackendId::Llm {
            model: "m".into(),
            base_url: "u".into(),
            prompt_version: "p".into(),
            temperature: 0.0,
            max_tokens: 9,
            extra_body: serde_json::Map::new(),
        };
        assert_eq!(llm.label(), "llm:m");
        // No `extra_body` in the identity unless one is set: identities from before it hold.
        let identity = serde_json::json!({"backend": "llm", "model": "m", "base_url": "u", "prompt_version": "p",
            "temperature": 0.0, "max_tokens": 9});
        assert_eq!(serde_json::to_value(&llm).unwrap(), identity);
        let BackendId::Llm { extra_body, .. } = &mut llm else { unreachable!() };
        extra_body.insert("top_k".into(), 5.into());
        assert_eq!(serde_json::to_value(&llm).unwrap()["extra_body"], serde_json::json!({"top_k": 5}));
        assert_eq!(
            serde_json::to_value(&BackendId::RULES).unwrap(),
            serde_json::json!({"backend": "rules", "version": "1"})
        );
    }
}
