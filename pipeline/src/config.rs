//! Pipeline configuration: the shape of the pipeline (thresholds, models, backends), as opposed
//! to runtime knobs (index folder, shard, threads, verbosity), which are command-line flags.
//! Every section is defined beside the code it configures (`stages/<stage>/config.rs`,
//! `query/config.rs`, `llm/config.rs`, `models/`, `io/index.rs`, `io/ann.rs`, `core/backend.rs`); this module
//! puts them together, loads and checks them.
//!
//! Sources, later ones winning: built-in defaults (the paper's values), a TOML file
//! (`--config FILE`), and environment variables `FLEXSTRUCT_<SECTION>__<KEY>`, e.g.
//! `FLEXSTRUCT_CHUNK__CT_MAX=800`. Variables without a double underscore (`FLEXSTRUCT_INDEX`,
//! `FLEXSTRUCT_QUIET`, …) are the twins of command-line flags and are not read here; any other
//! `FLEXSTRUCT_` variable is refused ([`FLAG_VARIABLES`]), since it would otherwise be ignored.
//!
//! ```toml
//! [index]
//! buckets = 64        # fixed when the index is created
//!
//! [chunk]
//! ct_min = 500
//! ct_max = 600
//!
//! [backends]
//! all = "auto"        # rules | llm | auto (the LLM when [llm] is set)
//! ```

use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

pub use crate::core::backend::{BackendChoice, BackendsConfig, Capability};
use crate::core::{Error, Result};
pub use crate::io::ann::AnnConfig;
pub use crate::io::index::{DEFAULT_BUCKETS, IndexConfig};
pub use crate::llm::LlmConfig;
pub use crate::models::EmbedConfig;
pub use crate::query::{Assembly, FusionWeights, Mode, QueryConfig, Thresholds, WindowIn};
pub use crate::stages::chunk::ChunkConfig;
pub use crate::stages::cluster::ClusterConfig;
pub use crate::stages::extract::ExtractConfig;
pub use crate::stages::graph::GraphConfig;
pub use crate::stages::hypergraph::HypergraphConfig;
pub use crate::stages::ingest::IngestConfig;
pub use crate::stages::paths::PathsConfig;

/// Prefix of configuration environment variables.
pub const ENV_PREFIX: &str = "FLEXSTRUCT_";

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, schemars::JsonSchema)]
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
    /// The embedding model (the embed stage and the query's questions).
    pub embed: EmbedConfig,
    /// The cluster stage (SSC).
    pub cluster: ClusterConfig,
    /// The path index of `--mode paths` (SG-RAG).
    pub paths: PathsConfig,
    /// The query stage (retrieval, context, generation).
    pub query: QueryConfig,
    /// Approximate indexes of large kb tables (built by the merge, searched by queries).
    pub ann: AnnConfig,
    /// Which capabilities run on the rules and which on the LLM.
    pub backends: BackendsConfig,
    /// The LLM endpoint; absent means no LLM is configured (every `auto` backend is the rules).
    pub llm: Option<LlmConfig>,
    /// The GE judge's own endpoint (same keys as `[llm]`), so that answers are not graded by the
    /// model that wrote them; absent: the judge is the `[llm]` endpoint (the report says which).
    pub judge: Option<LlmConfig>,
    /// A re-ranking endpoint (same keys as `[llm]`; `POST …/rerank`), which scores the first
    /// `query.rerank_candidates` pieces of every strategy's ranking against the question and puts
    /// them in its order; absent: no re-ranking.
    pub rerank: Option<LlmConfig>,
}

impl Config {
    /// Whether `capability` runs on the LLM (for the judge: on `[judge]`, else `[llm]`).
    pub fn uses_llm(&self, capability: Capability) -> Result<bool> {
        let configured = self.llm.is_some() || (capability == Capability::Judge && self.judge.is_some());
        self.backends.uses_llm(capability, configured)
    }

    /// Loads defaults, then `file` (if given), then `FLEXSTRUCT_<SECTION>__<KEY>` variables.
    pub fn load(file: Option<&Path>) -> Result<Config> {
        Config::load_with(file, serde_json::Value::Null)
    }

    /// [`Config::load`], then `overrides` on top: a JSON object of sections and keys (a binary's
    /// flags, each the key of its name), checked like the file's.
    pub fn load_with(file: Option<&Path>, overrides: serde_json::Value) -> Result<Config> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(file) = file {
            if !file.is_file() {
                return Err(Error::config("--config", format!("config file {} does not exist", file.display())));
            }
            figment = figment.merge(Toml::file_exact(file));
        }
        figment = figment.merge(Env::prefixed(ENV_PREFIX).filter(|k| k.as_str().contains("__")).split("__"));
        if overrides.as_object().is_some_and(|o| !o.is_empty()) {
            figment = figment.merge(Serialized::defaults(overrides));
        }
        let config: Config = figment.extract().map_err(|e| Error::ConfigLoad(Box::new(e)))?;
        config.validate()?;
        let secrets = [
            config.embed.api_key_env.as_str(),
            config.llm.as_ref().map_or("", |l| l.api_key_env.as_str()),
            config.judge.as_ref().map_or("", |l| l.api_key_env.as_str()),
            config.rerank.as_ref().map_or("", |l| l.api_key_env.as_str()),
        ];
        check_env_names(std::env::vars().map(|(k, _)| k).filter(|k| !secrets.contains(&k.as_str())))?;
        Ok(config)
    }

    /// Checks values that parse but make no sense.
    pub fn validate(&self) -> Result<()> {
        self.index.validate()?;
        self.ingest.validate()?;
        self.chunk.validate()?;
        self.extract.validate()?;
        self.hypergraph.validate()?;
        self.embed.validate()?;
        self.cluster.validate()?;
        self.paths.validate()?;
        self.query.validate()?;
        self.ann.validate()?;
        if let Some(llm) = &self.llm {
            llm.validate()?;
        }
        if let Some(judge) = &self.judge {
            judge.validate_as("judge")?;
        }
        if let Some(rerank) = &self.rerank {
            rerank.validate_as("rerank")?;
        }
        for capability in Capability::ALL {
            self.uses_llm(capability)?;
        }
        Ok(())
    }
}

/// The `FLEXSTRUCT_*` variables that are twins of command-line flags (not configuration).
pub const FLAG_VARIABLES: &[&str] = &[
    "INDEX",
    "CONFIG",
    "SHARD",
    "QUIET",
    "THREADS",
    "CORPUS",
    "SPLIT",
    "MAX_CONTEXT_TOKENS",
    "SQL_MEMORY_MB",
    "SQL_TIMEOUT",
    // flexstruct-serve's flags and its bearer tokens.
    "SERVE_LISTEN",
    "SERVE_MAX_REQUEST_BYTES",
    "SERVE_REQUEST_TIMEOUT_SECS",
    "SERVE_MAX_IN_FLIGHT",
    "SERVE_WORKERS",
    "SERVE_MAX_BATCH",
    "SERVE_READ_TOKENS",
    "SERVE_WRITE_TOKENS",
    // The switch of the sqllogictest runner that rewrites expected output (a test tool).
    "SLT_COMPLETE",
];

/// Refuses a `FLEXSTRUCT_` variable that is neither a flag's twin nor a `SECTION__KEY` override
/// (e.g. `FLEXSTRUCT_CHUNK_CT_MAX`, one underscore short), which would otherwise be ignored. The
/// variables the configuration names as holding API keys are not checked.
fn check_env_names(names: impl Iterator<Item = String>) -> Result<()> {
    for name in names {
        let Some(rest) = name.strip_prefix(ENV_PREFIX) else { continue };
        if rest.contains("__") || FLAG_VARIABLES.contains(&rest) {
            continue;
        }
        let hint = match rest.split_once('_') {
            Some((section, key)) => format!(" (a configuration override is {ENV_PREFIX}{section}__{key})"),
            None => String::new(),
        };
        return Err(Error::config(
            name.clone(),
            format!("unknown variable{hint}; flag variables are {ENV_PREFIX}{}", FLAG_VARIABLES.join(", ")),
        ));
    }
    Ok(())
}

/// The reference of every configuration key (the page `docs/configuration-reference.md`,
/// checked by a test against this function): per section, each key with its type, its default
/// and its documentation, all read from the configuration's JSON Schema (the structs and their
/// doc comments).
pub fn reference() -> String {
    let schema = serde_json::to_value(schemars::schema_for!(Config)).unwrap_or_default();
    let defs = schema.get("$defs").cloned().unwrap_or_default();
    let mut out = String::from(
        "# Configuration reference\n\n\
         Every key of the configuration, generated from the code (`flexstruct_pipeline::config::reference`; a \
         test keeps this page equal to it). A key is set in the TOML file given with `--config`, under its \
         `[section]`, or by the environment variable `FLEXSTRUCT_<SECTION>__<KEY>` (a nested key joins its \
         parts with `__` too: `FLEXSTRUCT_QUERY__WEIGHTS__LEXICAL=1.5`); the environment wins over the file, \
         and a binary's flags win over both. How to use them: [configuration.md](configuration.md).\n",
    );
    let sections = schema.get("properties").and_then(|p| p.as_object()).cloned().unwrap_or_default();
    for (name, section) in &sections {
        render_section(&mut out, name, section, &defs);
    }
    out
}

/// The definition a property refers to, directly or as the one non-null choice of an option.
fn referenced<'a>(property: &serde_json::Value, defs: &'a serde_json::Value) -> Option<&'a serde_json::Value> {
    let reference = property.get("$ref").or_else(|| {
        let choices = property.get("anyOf")?.as_array()?;
        choices.iter().find_map(|c| c.get("$ref"))
    })?;
    defs.get(reference.as_str()?.strip_prefix("#/$defs/")?)
}

/// A section (or a table nested in one): its keys, then its nested tables.
fn render_section(out: &mut String, path: &str, property: &serde_json::Value, defs: &serde_json::Value) {
    let Some(def) = referenced(property, defs) else { return };
    let optional = property.get("anyOf").is_some();
    out.push_str(&format!("\n## [{path}]\n\n"));
    let about = text(property.get("description").or_else(|| def.get("description")));
    if !about.is_empty() {
        out.push_str(&format!("{about}\n\n"));
    }
    if optional {
        out.push_str("The section is optional: without it, what it configures is off.\n\n");
    }
    let keys = def.get("properties").and_then(|p| p.as_object()).cloned().unwrap_or_default();
    let required: Vec<&str> =
        def.get("required").and_then(|r| r.as_array()).into_iter().flatten().filter_map(|r| r.as_str()).collect();
    let mut nested = Vec::new();
    out.push_str("| key | type | default | what it sets |\n|---|---|---|---|\n");
    for (key, field) in &keys {
        if let Some(inner) = referenced(field, defs).filter(|d| d.get("properties").is_some()) {
            let _ = inner;
            nested.push((format!("{path}.{key}"), field.clone()));
            continue;
        }
        let default = match field.get("default") {
            Some(serde_json::Value::Null) | None if required.contains(&key.as_str()) => "required".to_owned(),
            Some(serde_json::Value::Null) | None => "unset".to_owned(),
            Some(value) => format!("`{}`", shortest(value)),
        };
        let env = format!("`FLEXSTRUCT_{}__{}`", path.replace('.', "__").to_uppercase(), key.to_uppercase());
        let about = text(field.get("description"));
        out.push_str(&format!("| `{key}` | {} | {default} | {about} ({env}) |\n", kind(field, defs)));
    }
    for (path, field) in nested {
        render_section(out, &path, &field, defs);
    }
}

/// A default as TOML would read it back: floats at the `f32` precision they are held at.
fn shortest(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Number(n) if !(n.is_i64() || n.is_u64()) => {
            n.as_f64().map_or_else(|| n.to_string(), |x| format!("{}", x as f32))
        }
        serde_json::Value::Array(items) => {
            format!("[{}]", items.iter().map(shortest).collect::<Vec<_>>().join(", "))
        }
        other => other.to_string(),
    }
}

/// What values a key takes, in words.
fn kind(field: &serde_json::Value, defs: &serde_json::Value) -> String {
    if let Some(def) = referenced(field, defs) {
        let choices = def.get("oneOf").or_else(|| def.get("enum")).and_then(|c| c.as_array());
        if let Some(choices) = choices {
            let names: Vec<String> = choices
                .iter()
                .filter_map(|c| c.get("const").or_else(|| c.get("enum").and_then(|e| e.get(0))).or(Some(c)))
                .filter_map(|c| c.as_str().map(|s| format!("`{s}`")))
                .collect();
            return format!("one of {}", names.join(", "));
        }
        return def.get("type").and_then(|t| t.as_str()).unwrap_or("table").to_owned();
    }
    let types: Vec<&str> = match field.get("type") {
        Some(serde_json::Value::String(t)) => vec![t.as_str()],
        Some(serde_json::Value::Array(ts)) => ts.iter().filter_map(|t| t.as_str()).collect(),
        _ => Vec::new(),
    };
    let mut words: Vec<String> = types
        .iter()
        .filter(|t| **t != "null")
        .map(|t| match *t {
            "array" => {
                let item = field.get("items").map(|i| kind(i, defs)).unwrap_or_else(|| "value".to_owned());
                format!("list of {item}")
            }
            "object" => "table".to_owned(),
            other => other.to_owned(),
        })
        .collect();
    if types.contains(&"null") {
        words.push("unset".to_owned());
    }
    if words.is_empty() { "value".to_owned() } else { words.join(" or ") }
}

/// A doc comment on one line of a table: no line breaks, no `|`, and code links as code.
fn text(description: Option<&serde_json::Value>) -> String {
    let text = description.and_then(|d| d.as_str()).unwrap_or_default();
    text.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|").replace("[`", "`").replace("`]", "`")
}

#[cfg(test)]
#[allow(clippy::result_large_err)] // figment's test jail returns figment::Error
mod tests {
    use super::*;
    use crate::core::chain_message;

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
            let chain = chain_message(&err);
            assert!(chain.contains("ct_maxx"), "{chain}");
            jail.create_file("bad.toml", "[chunk]\nct_min = 700\n")?;
            let err = Config::load(Some(Path::new("bad.toml"))).unwrap_err();
            assert!(err.to_string().contains("ct_min (700)"), "{err}");
            let err = Config::load(Some(Path::new("missing.toml"))).unwrap_err();
            assert!(err.to_string().contains("missing.toml"), "{err}");
            // Each endpoint section is named in its own errors.
            jail.create_file("rerank.toml", "[rerank]\nbase_url = \"http://127.0.0.1:9/v1\"\n")?;
            let err = Config::load(Some(Path::new("rerank.toml"))).unwrap_err();
            assert!(err.to_string().contains("rerank.base_url and rerank.model must both be set"), "{err}");
            jail.create_file("judge.toml", "[judge]\nbase_url = \"127.0.0.1:9\"\nmodel = \"m\"\n")?;
            let err = Config::load(Some(Path::new("judge.toml"))).unwrap_err();
            assert!(err.to_string().contains("judge.base_url"), "{err}");
            jail.create_file("many.toml", "[query]\nrerank_candidates = 5000\n")?;
            let err = Config::load(Some(Path::new("many.toml"))).unwrap_err();
            assert!(err.to_string().contains("query.rerank_candidates"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn extra_body_comes_from_a_table_or_the_environment() {
        figment::Jail::expect_with(|jail| {
            let endpoint = "[llm]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n";
            jail.create_file(
                "t.toml",
                &format!("{endpoint}extra_body = {{ chat_template_kwargs = {{ enable_thinking = false }} }}\n"),
            )?;
            let c = Config::load(Some(Path::new("t.toml"))).expect("load");
            let llm = c.llm.expect("[llm]");
            assert_eq!(
                serde_json::Value::from(llm.extra_body),
                serde_json::json!({"chat_template_kwargs": {"enable_thinking": false}})
            );
            jail.set_env("FLEXSTRUCT_LLM__EXTRA_BODY", "{repeat_penalty=1.1, top_k=20}");
            // The environment's fields join the file's, as every nested key does.
            let llm = Config::load(Some(Path::new("t.toml"))).expect("load").llm.expect("[llm]");
            let all = serde_json::json!({"chat_template_kwargs": {"enable_thinking": false}, "repeat_penalty": 1.1, "top_k": 20});
            assert_eq!(serde_json::Value::from(llm.extra_body), all);
            jail.set_env("FLEXSTRUCT_LLM__EXTRA_BODY", "{messages=[]}");
            let err = Config::load(Some(Path::new("t.toml"))).unwrap_err();
            assert!(err.to_string().contains("llm.extra_body.messages"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn backends_are_chosen_per_capability_and_checked() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("FLEXSTRUCT_BACKENDS__ALL", "llm");
            let err = Config::load(None).unwrap_err();
            assert!(err.to_string().contains("backends.all"), "{err}");
            jail.set_env("FLEXSTRUCT_LLM__BASE_URL", "http://127.0.0.1:9/v1");
            jail.set_env("FLEXSTRUCT_LLM__MODEL", "m");
            jail.set_env("FLEXSTRUCT_BACKENDS__SUMMARIES", "rules");
            let c = Config::load(None).expect("load");
            assert!(c.uses_llm(Capability::Extract).unwrap() && !c.uses_llm(Capability::Summaries).unwrap());
            jail.set_env("FLEXSTRUCT_BACKENDS__ALL", "sometimes");
            assert!(chain_message(&Config::load(None).unwrap_err()).contains("sometimes"));
            Ok(())
        });
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        /// A TOML value of any type.
        fn value() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<i64>().prop_map(|v| v.to_string()),
                any::<f64>().prop_map(|v| if v.is_finite() { format!("{v:?}") } else { "nan".into() }),
                any::<bool>().prop_map(|v| v.to_string()),
                any::<String>().prop_map(|v| toml_string(&v)),
                Just("[1, \"a\"]".to_owned()),
                Just("{ x = 1 }".to_owned()),
                Just("-0".to_owned()),
                Just("1e999".to_owned()),
            ]
        }

        fn toml_string(s: &str) -> String {
            serde_json::to_string(s).unwrap_or_default()
        }

        /// Sections and keys this configuration has, beside unknown ones.
        fn section() -> impl Strategy<Value = String> {
            let sections = [
                "index",
                "ingest",
                "chunk",
                "extract",
                "hypergraph",
                "graph",
                "embed",
                "cluster",
                "query",
                "backends",
                "llm",
                "query.weights",
                "nope",
            ];
            let keys = [
                "buckets",
                "ct_min",
                "ct_max",
                "tau_s",
                "tau_e",
                "model",
                "batch_size",
                "alpha",
                "min_cluster_size",
                "max_window",
                "max_context_tokens",
                "mode",
                "rrf_k",
                "lexical",
                "all",
                "base_url",
                "max_tokens",
                "unknown",
            ];
            (
                prop::sample::select(sections.to_vec()),
                prop::collection::vec((prop::sample::select(keys.to_vec()), value()), 0..5),
            )
                .prop_map(|(section, pairs)| {
                    let body: String = pairs.into_iter().map(|(k, v)| format!("{k} = {v}\n")).collect();
                    format!("[{section}]\n{body}")
                })
        }

        proptest! {
            #![proptest_config(crate::fuzz_config())]

            #[test]
            fn fuzz_config_files_load_or_say_what_is_wrong(
                sections in prop::collection::vec(section(), 0..4),
                junk in prop_oneof![4 => Just(String::new()), 1 => any::<String>()],
            ) {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("c.toml");
                std::fs::write(&path, format!("{}{junk}", sections.concat())).unwrap();
                match Config::load(Some(&path)) {
                    Ok(config) => prop_assert!(config.validate().is_ok()),
                    Err(e) => prop_assert!(!chain_message(&e).is_empty()),
                }
            }
        }
    }
}
