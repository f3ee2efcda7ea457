//! The query stage (paper §3.2): questions → retrieved evidence → cited context → answer.
//!
//! An [`Engine`] loads the merged knowledge base once ([`kb`]) and answers batches of questions
//! under any retrieval strategy ([`retrieve`]) without re-reading it: the question embeddings and
//! query entities are computed once per batch ([`Engine::prepare`]) and reused by every mode and
//! toggle ([`Engine::answer`]), which is what the ablation and evaluation runs rely on.
//!
//! ```text
//! question ─embed─▶ vector ─┬─ entity retrieval (query entities → names → aliases)
//!          ─entities─▶      ├─ hyperedge retrieval (τ_EH, N_EH) ── cluster retrieval
//!                           ├─ edge retrieval (τ_E, N_E)
//!                           └─ peers: chunks | none | hypergraphrag
//!          ──▶ context (ranked, deduplicated, cited, token budget) ──▶ LLM answer | extractive answer
//! ```
//!
//! Two capabilities can be the rules or an LLM, each behind a trait: the question's entities
//! ([`entities::QueryEntities`]) and the answer ([`generate::Answerer`]); the engine is given
//! its backends ([`crate::compose::engine`] picks them from the configuration). The query
//! stage reads only the merged tables and `documents` (titles), never another stage's code.

pub mod config;
pub mod context;
pub mod entities;
pub mod generate;
pub mod kb;
pub mod lexical;
pub mod paths;
pub mod rerank;
pub mod scan;
pub mod strategy;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::io::BufRead;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;

pub use self::config::{Assembly, FusionWeights, Mode, Precision, QueryConfig, Thresholds, WindowIn};
use self::context::{Context, Evidence};
pub use self::entities::{LlmQueryEntities, QueryEntities, RulesQueryEntities, rules_query_entities};
pub use self::generate::{AnswerOptions, Answerer, ExtractiveAnswerer, LlmAnswerer};
use self::kb::{Kb, Span};
use self::paths::{PathIndex, QueryGraphs, RulesQueryGraphs, StructureMatch};
pub use self::rerank::{EndpointReranker, Reranker, Reranking};
use self::strategy::{EntityMatch, Modules, QueryInput, Retrieval, Retrieved};
use crate::core::backend::BackendId;
use crate::core::tokens::TokenCounter;
use crate::core::{Error, Result};
use crate::io::ann::AnnConfig;
use crate::io::calls::append_calls;
use crate::io::files::write_file_atomic;
use crate::io::parquet::write_rows_parquet;
use crate::io::{CallRecord, Index};
use crate::models::Embedder;
use crate::rules::question as reader;

/// Stage name (in `llm_calls`).
pub const STAGE: &str = "query";

/// One question.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Question {
    /// Identifier (kept in the answers).
    pub id: String,
    /// The question.
    pub question: String,
}

/// One answered question: what the answers file holds per line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Answer {
    /// Question id.
    pub id: String,
    /// The question.
    pub question: String,
    /// Retrieval strategy.
    pub mode: Mode,
    /// The strategy with its switched-off modules, e.g. `hybrid w/o ER+SSC`.
    pub variant: String,
    /// The answer (empty when there was nothing to answer from).
    pub answer: String,
    /// The direct answer alone — the name, number, date or short phrase asked for — when the
    /// generator gives it apart from its explanation (an LLM's `Answer:` line, without citation
    /// markers). EM and F1 score it, else `answer`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub short_answer: Option<String>,
    /// The evidence sentence a short answer comes from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub support: Option<String>,
    /// `llm`, `extractive`, `none` (no evidence and no LLM), or `failed` (the LLM could not
    /// answer; see `error`).
    pub generator: &'static str,
    /// cl100k tokens of the context given to the generator.
    pub context_tokens: usize,
    /// Milliseconds from question to assembled context (its share of the batch's question
    /// embedding included; no LLM time).
    pub retrieval_ms: f64,
    /// The part of `retrieval_ms` spent embedding the question (and, for HyperGraphRAG, its
    /// entities): the question's share of the batch.
    pub embed_ms: f64,
    /// Milliseconds spent producing the answer, from when its request could go out (not
    /// counting its wait behind the other questions of a batch).
    pub generation_ms: f64,
    /// The context's evidence, in context order.
    pub evidence: Vec<Evidence>,
    /// Source spans the answer rests on.
    pub citations: Vec<Span>,
    /// 1-based numbers of the evidence the answer cites.
    pub cited: Vec<usize>,
    /// Entities found in the question and how they matched (entity retrieval).
    pub query_entities: Vec<EntityMatch>,
    /// Evidence retrieved but left out by the token budget.
    pub trimmed: usize,
    /// Why the answer is missing, when the LLM failed for this question.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the retrieval had to say, e.g. a similarity threshold that no unit passed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// What re-ranking did (`reranked`, `too_few`, `failed`), when a re-ranker was asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rerank: Option<Reranking>,
    /// What structure matching gave (`--mode paths`): exact match or fallback, and the labels
    /// the matched subgraphs give the nodes the question asks for, best first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structure: Option<StructureMatch>,
}

/// The label of a strategy with its toggles: `hybrid`, `hybrid w/o ER+SSC`, `hybrid-paper` (the
/// paper's assembly), `chunks`, ….
pub fn variant(config: &QueryConfig) -> String {
    let full = Modules::of(&QueryConfig {
        entities: true,
        hyperedges: true,
        edges: true,
        clusters: true,
        bridges: true,
        lexical: true,
        n_b: config.n_b.max(1),
        ..config.clone()
    });
    let on = Modules::of(config);
    let off: Vec<&str> = [
        (full.hyperedges && !on.hyperedges, "HR"),
        (full.clusters && !on.clusters, "SSC"),
        (full.edges && !on.edges, "ER"),
        (full.entities && !on.entities, "EnR"),
        (full.bridges && !on.bridges, "BR"),
        (full.lexical && !on.lexical, "LR"),
    ]
    .into_iter()
    .chain([(config.fuses() && config.second_hop == 0, "2nd hop")])
    .filter_map(|(off, name)| off.then_some(name))
    .collect();
    let paper = config.assembly == Assembly::Paper && config.strategy().fusable();
    let name = if paper { format!("{}-paper", config.mode.name()) } else { config.mode.name().to_owned() };
    if off.is_empty() { name } else { format!("{name} w/o {}", off.join("+")) }
}

/// Reads a JSONL file of `{id, question}` (other fields are ignored; a missing id becomes the
/// line number). A bad line or an empty question is an error naming the file and line.
pub fn read_questions(path: &Path) -> Result<Vec<Question>> {
    Ok(read_question_records(path)?.into_iter().map(|(q, _)| q).collect())
}

/// The checked questions of a JSONL file, each with its whole JSON object (for readers that want
/// more fields, such as the evaluation's gold answers); the object's `id` is set to the
/// question's id as read (a number or the line number become text).
pub fn read_question_records(path: &Path) -> Result<Vec<(Question, serde_json::Value)>> {
    let file = std::fs::File::open(path).map_err(Error::io("opening the questions file", path))?;
    let mut out = Vec::new();
    let mut ids = HashSet::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(Error::io("reading the questions file", path))?;
        // A byte-order mark (what some editors on Windows write first) is not part of the JSON.
        let line = if n == 0 { line.strip_prefix('\u{feff}').unwrap_or(&line) } else { &line };
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{}:{}", path.display(), n + 1);
        let mut value: serde_json::Value =
            serde_json::from_str(line).map_err(|source| Error::InputJson { location: at(), source })?;
        let question = match value.get("question") {
            Some(serde_json::Value::String(q)) => q.clone(),
            Some(_) => return Err(Error::input(at(), "field `question` must be a string")),
            None => return Err(Error::input(at(), "field `question` is missing")),
        };
        let id = match value.get("id") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Number(x)) => x.to_string(),
            None => format!("{}", n + 1),
            Some(_) => return Err(Error::input(at(), "field `id` must be a string or a number")),
        };
        if question.trim().is_empty() {
            return Err(Error::input(at(), format!("question `{id}` is empty")));
        }
        if !ids.insert(id.clone()) {
            return Err(Error::input(at(), format!("question id `{id}` appears twice")));
        }
        value["id"] = serde_json::Value::String(id.clone());
        out.push((Question { id, question }, value));
    }
    Ok(out)
}

/// A batch of questions with what every strategy needs from them, computed once.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The questions.
    pub questions: Vec<Question>,
    /// Unit-length question embeddings.
    pub vectors: Vec<Vec<f32>>,
    /// Query entities of each question.
    pub entities: Vec<Vec<String>>,
    /// Embeddings of each question's entities (HyperGraphRAG).
    pub entity_vectors: Vec<Vec<Vec<f32>>>,
    /// Per-question share of the batch's question embedding, in milliseconds.
    pub embed_ms: f64,
    /// Per-question share of embedding the query entities, in milliseconds.
    pub entity_embed_ms: f64,
}

impl Prepared {
    /// What each question brings to retrieval.
    pub fn inputs(&self) -> Vec<QueryInput<'_>> {
        (0..self.questions.len())
            .map(|i| QueryInput {
                text: &self.questions[i].question,
                vector: &self.vectors[i],
                entities: &self.entities[i],
                entity_vectors: &self.entity_vectors[i],
            })
            .collect()
    }
}

/// One question's context and what retrieving it took.
#[derive(Debug, Clone)]
pub struct QuestionContext {
    /// The context.
    pub context: Context,
    /// The question's entities and how they matched.
    pub entities: Vec<EntityMatch>,
    /// Milliseconds of retrieval (the question's share of the batch's).
    pub retrieval_ms: f64,
    /// The part of them spent embedding.
    pub embed_ms: f64,
    /// What re-ranking did, when a re-ranker was asked.
    pub rerank: Option<Reranking>,
}

impl QuestionContext {
    /// The label of the strategy that gave this context under `config`: its [`variant`], and
    /// `+rerank` when the re-ranker did order its pieces (not when it failed or had nothing to
    /// order).
    pub fn label(&self, config: &QueryConfig) -> String {
        match self.rerank {
            Some(Reranking::Reranked) => format!("{} +rerank", variant(config)),
            _ => variant(config),
        }
    }
}

/// How the engine embeds questions and holds and searches the kb's vectors.
pub struct VectorSetup<'a> {
    /// The embedder of the questions, whose model the kb's vectors must be of.
    pub embedder: Box<dyn Embedder>,
    /// The precision the vectors are held at.
    pub precision: Precision,
    /// The approximate search of the tables that have one.
    pub ann: &'a AnnConfig,
}

impl std::fmt::Debug for VectorSetup<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorSetup")
            .field("model", &self.embedder.model())
            .field("precision", &self.precision)
            .field("ann", &self.ann)
            .finish()
    }
}

/// The knowledge base, the embedder and the two query-time backends, loaded once.
pub struct Engine {
    /// The knowledge base.
    pub kb: Kb,
    /// Seconds spent loading the knowledge base.
    pub load_seconds: f64,
    index: Index,
    embedder: Box<dyn Embedder>,
    query_entities: Box<dyn QueryEntities>,
    query_graphs: Box<dyn QueryGraphs>,
    answerer: Box<dyn Answerer>,
    reranker: Option<Box<dyn Reranker>>,
    counter: TokenCounter,
    /// The path index of `--mode paths`, read on first use.
    paths: Mutex<Option<Arc<PathIndex>>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("index", &self.index).field("model", &self.kb.model).finish_non_exhaustive()
    }
}

impl Engine {
    /// Loads the kb of `index`, whose vectors must be of `vectors`' embedder's model, with the
    /// given query-entities and answers backends.
    pub fn new(
        index: &Index,
        VectorSetup { embedder, precision, ann }: VectorSetup<'_>,
        query_entities: Box<dyn QueryEntities>,
        answerer: Box<dyn Answerer>,
    ) -> Result<Engine> {
        let started = Instant::now();
        let kb = Kb::load(index, embedder.model(), precision, ann)?;
        let load_seconds = started.elapsed().as_secs_f64();
        Ok(Engine {
            kb,
            load_seconds,
            index: index.clone(),
            embedder,
            query_entities,
            query_graphs: Box::new(RulesQueryGraphs),
            answerer,
            reranker: None,
            counter: TokenCounter::cl100k(),
            paths: Mutex::new(None),
        })
    }

    /// The engine with another query-graphs backend (ψ of `--mode paths`; the rules unless set).
    pub fn with_query_graphs(mut self, query_graphs: Box<dyn QueryGraphs>) -> Engine {
        self.query_graphs = query_graphs;
        self
    }

    /// The engine with a re-ranker of every strategy's first pieces (`[rerank]`), or none.
    pub fn with_reranker(mut self, reranker: Option<Box<dyn Reranker>>) -> Engine {
        self.reranker = reranker;
        self
    }

    /// What re-ranks the first `query.rerank_candidates` pieces, when a re-ranker is set.
    pub fn reranker(&self) -> Option<String> {
        self.reranker.as_ref().map(|r| r.service())
    }

    /// Whether `config`'s strategy is re-ranked: a re-ranker is set, `query.rerank_candidates` is
    /// not 0, and the strategy retrieves.
    pub fn reranks(&self, config: &QueryConfig) -> bool {
        self.reranker.is_some() && config.rerank_candidates > 0 && config.strategy().retrieves()
    }

    /// The path index of `--mode paths` (read from the index the first time).
    pub fn path_index(&self) -> Result<Arc<PathIndex>> {
        let mut slot = self.paths.lock().map_err(|_| Error::Internal("the path index lock is poisoned".into()))?;
        if let Some(index) = slot.as_ref() {
            return Ok(index.clone());
        }
        let index = Arc::new(PathIndex::load(&self.index, &self.kb)?);
        *slot = Some(index.clone());
        Ok(index)
    }

    /// The path index, when a question has used it.
    pub fn loaded_path_index(&self) -> Option<Arc<PathIndex>> {
        self.paths.lock().ok().and_then(|slot| slot.clone())
    }

    /// The index the kb was loaded from.
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// The embedder of the questions (the index's model).
    pub fn embedder(&self) -> &dyn Embedder {
        self.embedder.as_ref()
    }

    /// Whether answers come from an LLM (slow to come, and no work of this process's).
    pub fn answers_with_llm(&self) -> bool {
        self.answerer.identity().is_llm()
    }

    /// Who finds the questions' entities and who answers.
    pub fn backends(&self) -> (BackendId, BackendId) {
        (self.query_entities.identity(), self.answerer.identity())
    }

    /// Embeds the questions and finds their entities (with the query-entities backend), and
    /// embeds the entities too, for every strategy to use the batch. Questions are put in Unicode
    /// NFC first, as every text of the index is.
    pub fn prepare(&self, questions: Vec<Question>) -> Result<Prepared> {
        self.prepare_embedding(questions, true)
    }

    /// [`Engine::prepare`] for one strategy: the entities are embedded only when `mode` reads
    /// their vectors (HyperGraphRAG and SG-RAG's paths), which saves a second embedding call for
    /// the others — a server answering each batch with one strategy.
    pub fn prepare_for(&self, questions: Vec<Question>, mode: Mode) -> Result<Prepared> {
        self.prepare_embedding(questions, strategy::of(mode).embeds_entities())
    }

    fn prepare_embedding(&self, mut questions: Vec<Question>, entity_vectors: bool) -> Result<Prepared> {
        for q in &mut questions {
            q.question = crate::core::text::nfc(std::mem::take(&mut q.question));
        }
        if let Some(q) = questions.iter().find(|q| q.question.trim().is_empty()) {
            return Err(Error::input(format!("question `{}`", q.id), "the question is empty"));
        }
        let count = questions.len().max(1) as f64;
        let started = Instant::now();
        let texts: Vec<&str> = questions.iter().map(|q| q.question.as_str()).collect();
        let vectors = self.embedder.embed(&texts)?;
        let embed_ms = started.elapsed().as_secs_f64() * 1000.0 / count;
        let entities = self.query_entities.entities_all(&texts);
        let started = Instant::now();
        let flat: Vec<&str> =
            if entity_vectors { entities.iter().flatten().map(String::as_str).collect() } else { Vec::new() };
        let mut flat_vectors = self.embedder.embed(&flat)?.into_iter();
        let entity_vectors = match entity_vectors {
            true => entities.iter().map(|e| flat_vectors.by_ref().take(e.len()).collect()).collect(),
            false => vec![Vec::new(); entities.len()],
        };
        let entity_embed_ms = started.elapsed().as_secs_f64() * 1000.0 / count;
        Ok(Prepared { questions, vectors, entities, entity_vectors, embed_ms, entity_embed_ms })
    }

    /// Retrieval and context for every prepared question: the vector scans run once for the
    /// batch and the per-question lookups and context assembly on every core, so each question
    /// is charged an equal share of the batch's embedding, scans and lookups, and its own
    /// assembly time scaled to the assembly's wall time.
    pub fn contexts(&self, prepared: &Prepared, config: &QueryConfig) -> Result<Vec<QuestionContext>> {
        let count = prepared.questions.len().max(1) as f64;
        let started = Instant::now();
        let strategy = config.strategy();
        let thresholds = config.thresholds(&self.kb.model, &self.kb.derived_thresholds);
        // Plan the scans, scan once for the batch, retrieve each question.
        let retrievals = strategy.retrieve_prepared(self, prepared, config, thresholds)?;
        // The contexts the second hop read and left as they were, not assembled twice.
        let (retrievals, firsts) = if config.second_hop > 0 && config.fuses() {
            self.second_hop(prepared, config, thresholds, retrievals)?
        } else {
            let none = (0..retrievals.len()).map(|_| None).collect();
            (retrievals, none)
        };
        let (retrievals, firsts, reranked) = self.rerank(prepared, config, retrievals, firsts);
        let embed_ms = match (strategy.retrieves(), strategy.embeds_entities()) {
            (false, _) => 0.0,
            (true, true) => prepared.embed_ms + prepared.entity_embed_ms,
            (true, false) => prepared.embed_ms,
        };
        let shared_ms = started.elapsed().as_secs_f64() * 1000.0 / count + embed_ms;
        // Contexts are assembled on every core; each question is charged its own assembly time
        // scaled so that the batch's charges add up to the wall time of the whole assembly.
        let started = Instant::now();
        let assembled: Vec<(Context, Vec<EntityMatch>, f64, Option<Reranking>)> = retrievals
            .into_par_iter()
            .zip(firsts)
            .zip(reranked)
            .map(|((retrieval, first), rerank)| {
                let started = Instant::now();
                let mut context = first.unwrap_or_else(|| self.assemble(&retrieval.rows, config));
                context.notes = retrieval.notes;
                context.structure = retrieval.structure;
                (context, retrieval.entity_matches, started.elapsed().as_secs_f64() * 1000.0, rerank)
            })
            .collect();
        let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
        let own_ms: f64 = assembled.iter().map(|a| a.2).sum();
        let scale = if own_ms > 0.0 { (wall_ms / own_ms).min(1.0) } else { 1.0 };
        Ok(assembled
            .into_iter()
            .map(|(context, entities, ms, rerank)| QuestionContext {
                context,
                entities,
                retrieval_ms: ms * scale + shared_ms,
                embed_ms,
                rerank,
            })
            .collect())
    }

    /// Re-ranks the first `query.rerank_candidates` pieces of every question's retrieval with
    /// the re-ranker, when one is set ([`rerank`]); a question whose re-ranking failed keeps its
    /// order and a note saying why. A context the second hop read is assembled again when its
    /// pieces moved. Gives, per question, what re-ranking did (none when no re-ranker was asked).
    #[allow(clippy::type_complexity)]
    fn rerank(
        &self,
        prepared: &Prepared,
        config: &QueryConfig,
        mut retrievals: Vec<Retrieval>,
        mut firsts: Vec<Option<Context>>,
    ) -> (Vec<Retrieval>, Vec<Option<Context>>, Vec<Option<Reranking>>) {
        let Some(reranker) = self.reranker.as_ref().filter(|_| self.reranks(config)) else {
            let none = vec![None; retrievals.len()];
            return (retrievals, firsts, none);
        };
        // Per question: the rows of its first pieces and their texts.
        let picked: Vec<(Vec<usize>, Vec<String>)> = retrievals
            .par_iter()
            .map(|r| rerank::candidates(&self.kb, &r.rows, config.rerank_candidates).into_iter().unzip())
            .collect();
        let mut outcomes = vec![Some(Reranking::TooFew); retrievals.len()];
        let asked: Vec<usize> = (0..picked.len()).filter(|&i| !picked[i].0.is_empty()).collect();
        let asks: Vec<(&str, &[String])> =
            asked.iter().map(|&i| (prepared.questions[i].question.as_str(), picked[i].1.as_slice())).collect();
        for (i, scores) in asked.into_iter().zip(reranker.scores_all(&asks)) {
            match scores {
                Ok(scores) => {
                    rerank::reorder(&mut retrievals[i].rows, &picked[i].0, &scores);
                    firsts[i] = None;
                    outcomes[i] = Some(Reranking::Reranked);
                }
                Err(why) => {
                    retrievals[i].notes.push(format!("rerank: {why}; the strategy's own order is kept"));
                    outcomes[i] = Some(Reranking::Failed);
                }
            }
        }
        (retrievals, firsts, outcomes)
    }

    /// The context of `rows` under `config`'s cap and merging.
    fn assemble(&self, rows: &[Retrieved], config: &QueryConfig) -> Context {
        Context::assemble_with(&self.kb, rows, config.max_context_tokens, config.merges(), &self.counter)
    }

    /// The second retrieval of relation questions (`query.second_hop`): each question's first
    /// context is read by the extractive reader ([`generate::unanswered_bridges`]); for each
    /// entity it names that the context says too little about (the one a relation chain
    /// reaches, each undated director a comparison names), the question's own words about that
    /// entity ([`reader::second_query`]) are embedded and retrieved with the same strategy, and
    /// the best `second_hop` pieces of each join the question's retrieval ranked just after its
    /// first piece (a comparison's two retrievals taking turns), so that the cap keeps them and
    /// drops the first retrieval's last (joining after the second or the sixth gave the same
    /// answers on 2wiki's tune half at 1,100 tokens; after the first, a small cap keeps them too).
    /// Returns the retrievals, and per question the context it read when no second retrieval
    /// followed (that context is the question's).
    fn second_hop(
        &self,
        prepared: &Prepared,
        config: &QueryConfig,
        thresholds: Thresholds,
        mut retrievals: Vec<Retrieval>,
    ) -> Result<(Vec<Retrieval>, Vec<Option<Context>>)> {
        // Per question: the context read when it stays, or the entities to ask about and how.
        let (firsts, asks): (Vec<Option<Context>>, Vec<_>) = retrievals
            .par_iter()
            .enumerate()
            .map(|(i, r)| {
                let question = &prepared.questions[i].question;
                if !reader::may_bridge(question) {
                    return (None, Vec::new());
                }
                let context = self.assemble(&r.rows, config);
                let entities = generate::unanswered_bridges(question, &context);
                if entities.is_empty() {
                    return (Some(context), Vec::new());
                }
                let asks = entities
                    .into_iter()
                    .map(|entity| {
                        let text = reader::second_query(question, &entity);
                        (entity, text)
                    })
                    .collect();
                (None, asks)
            })
            .unzip();
        // (question, entity, what to ask about it)
        let asks: Vec<(usize, String, String)> = asks
            .into_iter()
            .enumerate()
            .flat_map(|(i, a): (usize, Vec<(String, String)>)| a.into_iter().map(move |(e, text)| (i, e, text)))
            .collect();
        if asks.is_empty() {
            return Ok((retrievals, firsts));
        }
        let texts: Vec<&str> = asks.iter().map(|a| a.2.as_str()).collect();
        let vectors = self.embedder.embed(&texts)?;
        let entities: Vec<Vec<String>> = asks.iter().map(|a| vec![a.1.clone()]).collect();
        let inputs: Vec<QueryInput<'_>> = (0..asks.len())
            .map(|k| QueryInput { text: texts[k], vector: &vectors[k], entities: &entities[k], entity_vectors: &[] })
            .collect();
        let more = strategy::retrieve_batch(&self.kb, config, thresholds, &inputs);
        for ((i, ..), found) in asks.iter().zip(more) {
            let rows = &mut retrievals[*i].rows;
            let Some(at) = rows.iter().filter(|r| r.tier == 0).map(|r| r.score).max_by(f32::total_cmp) else {
                continue;
            };
            let mut found = found.rows;
            found.sort_by(|a, b| a.tier.cmp(&b.tier).then(b.score.total_cmp(&a.score)));
            for (j, r) in found.into_iter().take(config.second_hop).enumerate() {
                rows.push(Retrieved { tier: 0, score: at * (1.0 - 1e-4 * (j + 1) as f32), ..r });
            }
        }
        Ok((retrievals, firsts))
    }

    /// Answers every prepared question under `config` (mode, toggles, breadths, budget).
    pub fn answer(&self, prepared: &Prepared, config: &QueryConfig) -> Result<Vec<Answer>> {
        let contexts = self.contexts(prepared, config)?;
        Ok(self.answer_contexts(prepared, config, contexts))
    }

    /// Answers every prepared question from its context ([`Engine::contexts`] under the same
    /// `config`): the retrieval and the generation apart, for a caller that does not want an
    /// LLM's answers to hold up the next retrieval.
    pub fn answer_contexts(
        &self,
        prepared: &Prepared,
        config: &QueryConfig,
        contexts: Vec<QuestionContext>,
    ) -> Vec<Answer> {
        let questions: Vec<&str> = prepared.questions.iter().map(|q| q.question.as_str()).collect();
        let context_refs: Vec<&Context> = contexts.iter().map(|c| &c.context).collect();
        let answered = self.answerer.answer_all(
            &questions,
            &context_refs,
            AnswerOptions { closed_book: !config.strategy().retrieves(), short: config.short_answers },
        );
        prepared
            .questions
            .iter()
            .zip(contexts)
            .zip(answered)
            .map(|((q, found), a)| (q, found.label(config), found, a))
            .map(|(q, label, QuestionContext { context, entities, retrieval_ms, embed_ms, rerank }, a)| Answer {
                id: q.id.clone(),
                question: q.question.clone(),
                mode: config.mode,
                variant: label,
                rerank,
                answer: a.generated.answer,
                short_answer: a.generated.short,
                support: a.generated.support,
                generator: a.generator,
                context_tokens: context.tokens,
                retrieval_ms,
                embed_ms,
                generation_ms: a.ms,
                cited: a.generated.cited.iter().map(|i| i + 1).collect(),
                citations: a.generated.citations,
                evidence: context.evidence,
                query_entities: entities,
                trimmed: context.trimmed,
                error: a.error,
                notes: context.notes,
                structure: context.structure,
            })
            .collect()
    }

    /// Appends the LLM calls of the query-time backends made so far (query entities, query
    /// graphs, answers) to the index's `llm_calls`, and returns them.
    pub fn record_calls(&self) -> Result<Vec<CallRecord>> {
        let mut calls = self.query_entities.take_calls();
        calls.extend(self.query_graphs.take_calls());
        calls.extend(self.answerer.take_calls());
        calls.extend(self.reranker.iter().flat_map(|r| r.take_calls()));
        append_calls(&self.index, STAGE, "all", &calls)?;
        Ok(calls)
    }
}

/// Writes answers as JSON lines.
pub fn write_jsonl(path: &Path, answers: &[Answer]) -> Result<()> {
    let mut out = String::new();
    for a in answers {
        out.push_str(&serde_json::to_string(a)?);
        out.push('\n');
    }
    write_file_atomic(path, out.as_bytes())
}

/// Writes answers as a Parquet table (schema [`flexstruct_schemas::answers_schema`]).
pub fn write_parquet(path: &Path, answers: &[Answer]) -> Result<()> {
    write_rows_parquet(path, flexstruct_schemas::answers_schema(), answers)
}
