//! Our prompts, and asking for JSON with one repair round. Every prompt puts the instructions
//! first and the variable text last, so that consecutive requests share the longest possible
//! prefix (servers with prefix caching reuse it).
//!
//! Each prompt has a version ([`Prompt::version`]): a hash of its instructions and framing,
//! rendered with placeholder text. It is part of the identity of the backend that uses it, so
//! editing a prompt reruns exactly the stages whose outputs it writes.

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::client::{CallContext, LlmClient, LlmError, Message};
use super::parse::parse_json;
use crate::core::ids::sha256_hex;
use crate::io::{FailureKind, UnitError};

/// Instructions for item extraction; [`items_instructions`] adds the worked example.
const ITEMS_INSTRUCTIONS: &str = "\
You turn a passage of a document into knowledge items for a retrieval index.

An item is one self-contained statement of fact from the TARGET passage: who or what did what, \
with which quantities, places, dates and conditions. A statement may involve any number of \
entities (people, organisations, places, works, events, concepts, quantities, dates). Resolve \
pronouns and vague references using the CONTEXT, but extract facts only from the TARGET.

For every item give:
- \"statement\": the fact in one clear sentence, with names written out in full;
- \"span\": the exact words of the TARGET that support it, copied character for character \
(one sentence or a few consecutive ones; do not paraphrase, shorten or fix it);
- \"entities\": the entities the statement involves, with names written out in full.

Cover every fact of the TARGET, one item per fact. Never write an item that is empty or that \
the TARGET does not state. Answer with JSON only: an object whose \"items\" list holds the items.";

/// A worked example of the item prompt: a context, a target and its items.
#[derive(Debug, Clone, Copy)]
pub struct ItemsExample {
    /// The preceding passage.
    pub context: &'static str,
    /// The passage to extract from.
    pub target: &'static str,
    /// Its items.
    pub items: &'static [ExampleItem],
}

/// An item of a worked example.
#[derive(Debug, Clone, Copy)]
pub struct ExampleItem {
    /// The statement.
    pub statement: &'static str,
    /// Its span in the target.
    pub span: &'static str,
    /// Its entities.
    pub entities: &'static [&'static str],
}

/// The worked example of the item prompt, in our own words. A weak model may copy it; the
/// extract stage drops and counts items that repeat one of its statements, or that hold one of
/// its names or numbers absent from the text shown to the model.
pub const ITEMS_EXAMPLE: ItemsExample = ItemsExample {
    context: "The Varden Bridge crosses the river Sola at Mirth. It was designed by the engineer Ilse Brandt.",
    target: "Building began in 1931 and cost 2.4 million crowns. Brandt later taught at the technical college \
             in Oslo until 1958.",
    items: &[
        ExampleItem {
            statement: "Building of the Varden Bridge began in 1931 and cost 2.4 million crowns.",
            span: "Building began in 1931 and cost 2.4 million crowns.",
            entities: &["Varden Bridge", "1931", "2.4 million crowns"],
        },
        ExampleItem {
            statement: "Ilse Brandt taught at the technical college in Oslo until 1958.",
            span: "Brandt later taught at the technical college in Oslo until 1958.",
            entities: &["Ilse Brandt", "technical college", "Oslo", "1958"],
        },
    ],
};

/// The item instructions with their worked example (as the system message, so that the prompt
/// stays one system and one user message and the example is part of the shared prefix).
fn items_instructions() -> String {
    let ItemsExample { context, target, items } = ITEMS_EXAMPLE;
    let items: Vec<serde_json::Value> = items
        .iter()
        .map(|i| serde_json::json!({"statement": i.statement, "span": i.span, "entities": i.entities}))
        .collect();
    let answer = serde_json::json!({ "items": items });
    format!(
        "{ITEMS_INSTRUCTIONS}\n\nExample. With the CONTEXT \"{context}\" and the TARGET \"{target}\", the answer is:\n{answer}"
    )
}

/// Instructions for entity summaries.
const SUMMARY_INSTRUCTIONS: &str = "\
You write the summary of one entity for a retrieval index, from facts taken from one document. \
Keep every name, number and date that matters; drop repetition; do not add anything that the \
facts do not say. At most 120 words. Answer with JSON only: an object whose \"summary\" holds the \
summary.";

/// Instructions for pairwise relations.
const RELATIONS_INSTRUCTIONS: &str = "\
You extract explicit binary relations for a knowledge graph. You get an ANCHOR entity, numbered \
FACTS about it (each with its source text), and the OTHER entities that appear in those facts. \
List every relation between the anchor and another entity that a fact states explicitly; do not \
infer relations the text does not state. For every relation give the \"source\" and \"target\" \
entity names exactly as listed, a short \"relation\" sentence naming both, and the number of the \
\"fact\" that supports it. Answer with JSON only: an object whose \"relations\" list holds them. \
Example: with the ANCHOR Ilse Brandt, the fact 1 \"Ilse Brandt designed the Varden Bridge.\" and the \
OTHER ENTITIES Varden Bridge; Oslo, the answer is {\"relations\": [{\"source\": \"Ilse Brandt\", \
\"target\": \"Varden Bridge\", \"relation\": \"Ilse Brandt designed the Varden Bridge\", \"fact\": 1}]}";

/// Instructions for query entities.
const QUERY_ENTITIES_INSTRUCTIONS: &str = "\
List the entities a question asks about or mentions: people, organisations, places, works, \
events, concepts, quantities, dates, written as in the question. Answer with JSON only. Example: \
\"When did the designer of the Varden Bridge move to Oslo?\" gives {\"entities\": [\"Varden Bridge\", \
\"Oslo\"]}";

/// Instructions for the graph of a question (ψ of structure-guided retrieval).
const QUERY_GRAPH_INSTRUCTIONS: &str = "\
You turn a factual question into a small graph for exact matching against a knowledge graph. \
Nodes are the things the question involves: each named entity as written in the question \
(\"name\"), and each thing it does not name but needs — the answer, and any intermediate thing \
on the way to it — as a node with \"name\": null. Mark the node the question asks for with \
\"answer\": true. Edges join two nodes by their position in the node list (from 0) with a short \
\"relation\" in plain words. Example: \"Where was the director of film X born?\" gives nodes \
[{\"name\": \"X\"}, {\"name\": null}, {\"name\": null, \"answer\": true}] and edges \
[{\"from\": 0, \"to\": 1, \"relation\": \"director\"}, {\"from\": 1, \"to\": 2, \
\"relation\": \"place of birth\"}]. Use at most 8 nodes. Answer with JSON only: an object with the \"nodes\" and \"edges\" lists.";

/// Instructions for answering from numbered evidence.
const ANSWER_INSTRUCTIONS: &str = "\
You answer a question from numbered EVIDENCE taken from a document collection. Rely on the \
evidence only. Write the first line as `Answer: ` followed by the direct answer alone: just the \
name, number, date, yes or no, or short phrase the question asks for, with no citation and no \
full sentence (for an open question, one short sentence). If the evidence does not contain the \
answer, write `Answer: unknown` and say why in one sentence. Then, from the next line, add what \
the question needs beyond that in a few sentences, putting the numbers of the evidence that \
supports each statement in square brackets after it, like [2] or [1][4].";

/// Instructions for answering without retrieval (the no-retrieval peer).
const CLOSED_BOOK_INSTRUCTIONS: &str = "\
Answer the question from your own knowledge. Write the first line as `Answer: ` followed by the \
direct answer alone: just the name, number, date, yes or no, or short phrase the question asks \
for (for an open question, one short sentence). Then, from the next line, add what the question \
needs beyond that in a few sentences.";

/// Instructions of the GE judge.
const JUDGE_INSTRUCTIONS: &str = "\
You grade an ANSWER to a QUESTION, with the REFERENCE answer as the standard of what is true and \
complete. Give an integer from 0 (worst) to 10 (best) for each of: comprehensiveness (covers \
what the question asks), knowledgeability (shows command of the subject), correctness (agrees \
with the reference), relevance (stays on the question), diversity (brings in the different \
aspects that matter), logical_coherence (hangs together), factuality (states nothing false). \
An empty answer scores 0 everywhere. Answer with JSON only: {\"comprehensiveness\": 0, \
\"knowledgeability\": 0, \"correctness\": 0, \"relevance\": 0, \"diversity\": 0, \
\"logical_coherence\": 0, \"factuality\": 0}";

/// The repair request after an unparseable answer.
fn repair_request(error: &str) -> String {
    format!(
        "Your answer could not be read as the requested JSON ({error}). Answer again with only \
         the JSON, complete and valid, and nothing else."
    )
}

/// Messages of an item-extraction request: instructions, then the window, then the target.
pub fn items_messages(window: &[&str], target: &str) -> Vec<Message> {
    let mut user = String::new();
    if !window.is_empty() {
        user.push_str("CONTEXT (preceding passages, for reference only):\n<<<\n");
        user.push_str(&window.join("\n\n"));
        user.push_str("\n>>>\n\n");
    }
    user.push_str("TARGET:\n<<<\n");
    user.push_str(target);
    user.push_str("\n>>>");
    vec![Message::system(items_instructions()), Message::user(user)]
}

/// Messages of an entity-summary request.
pub fn summary_messages(entity: &str, facts: &[&str]) -> Vec<Message> {
    let facts: Vec<String> = facts.iter().map(|f| format!("- {f}")).collect();
    vec![
        Message::system(SUMMARY_INSTRUCTIONS),
        Message::user(format!("ENTITY: {entity}\nFACTS:\n{}", facts.join("\n"))),
    ]
}

/// Messages of a relations request: facts are (statement, source span) pairs, numbered from 1.
pub fn relations_messages(anchor: &str, facts: &[(&str, &str)], others: &[&str]) -> Vec<Message> {
    let mut user = format!("ANCHOR: {anchor}\nFACTS:\n");
    for (i, (statement, span)) in facts.iter().enumerate() {
        user.push_str(&format!("{}. {statement}\n   source: \"{span}\"\n", i + 1));
    }
    user.push_str(&format!("OTHER ENTITIES: {}", others.join("; ")));
    vec![Message::system(RELATIONS_INSTRUCTIONS), Message::user(user)]
}

/// Messages of a query-entities request.
pub fn query_entities_messages(question: &str) -> Vec<Message> {
    vec![Message::system(QUERY_ENTITIES_INSTRUCTIONS), Message::user(format!("QUESTION: {question}"))]
}

/// Messages of a query-graph request: the question and the entities found in it.
pub fn query_graph_messages(question: &str, entities: &[&str]) -> Vec<Message> {
    vec![
        Message::system(QUERY_GRAPH_INSTRUCTIONS),
        Message::user(format!("QUESTION: {question}\nENTITIES FOUND IN IT: {}", entities.join("; "))),
    ]
}

/// Messages of an answer request: instructions, the question, then the evidence (none for
/// the no-retrieval peer).
pub fn answer_messages(question: &str, evidence: Option<&str>) -> Vec<Message> {
    match evidence {
        Some(evidence) => vec![
            Message::system(ANSWER_INSTRUCTIONS),
            Message::user(format!("QUESTION: {question}\n\nEVIDENCE:\n{evidence}")),
        ],
        None => vec![Message::system(CLOSED_BOOK_INSTRUCTIONS), Message::user(format!("QUESTION: {question}"))],
    }
}

/// Messages of a GE grading request.
pub fn judge_messages(question: &str, references: &[String], answer: &str) -> Vec<Message> {
    let user = format!("QUESTION: {question}\n\nREFERENCE: {}\n\nANSWER: {answer}", references.join(" | "));
    vec![Message::system(JUDGE_INSTRUCTIONS), Message::user(user)]
}

/// Our prompts, by what they ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prompt {
    /// Items of a chunk.
    Items,
    /// An entity summary.
    Summary,
    /// Relations around an anchor.
    Relations,
    /// The entities of a question.
    QueryEntities,
    /// The graph of a question.
    QueryGraph,
    /// An answer (from evidence, and without retrieval).
    Answer,
    /// GE grades.
    Judge,
}

impl Prompt {
    /// The prompt's version: 12 hex digits of the SHA-256 of its messages rendered with
    /// placeholder text, so any change of wording or framing gives a new version.
    pub fn version(self) -> String {
        let messages: Vec<Message> = match self {
            Prompt::Items => items_messages(&["{window}"], "{target}"),
            Prompt::Summary => summary_messages("{entity}", &["{fact}"]),
            Prompt::Relations => relations_messages("{anchor}", &[("{statement}", "{span}")], &["{other}"]),
            Prompt::QueryEntities => query_entities_messages("{question}"),
            Prompt::QueryGraph => query_graph_messages("{question}", &["{entity}"]),
            Prompt::Answer => {
                let mut m = answer_messages("{question}", Some("{evidence}"));
                m.extend(answer_messages("{question}", None));
                m
            }
            Prompt::Judge => judge_messages("{question}", &["{reference}".to_owned()], "{answer}"),
        };
        let mut text = String::new();
        for m in &messages {
            text.push_str(&m.role);
            text.push('\u{0}');
            text.push_str(&m.content);
            text.push('\u{0}');
        }
        text.push_str(&repair_request("{error}"));
        // How answers are read belongs to the prompt's identity too: since reading version 2 an
        // answer cut off is asked again (with more room, then in halves), never salvaged.
        text.push_str(ANSWER_READING);
        sha256_hex(text.as_bytes())[..12].to_owned()
    }
}

/// Answer shape of item extraction.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ItemsAnswer {
    /// Items.
    pub items: Vec<ItemAnswer>,
}

/// One item.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ItemAnswer {
    /// Statement.
    pub statement: String,
    /// Verbatim span.
    #[serde(default)]
    pub span: String,
    /// Entity names.
    #[serde(default)]
    pub entities: Vec<String>,
}

/// Answer shape of a summary.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct SummaryAnswer {
    /// The summary.
    pub summary: String,
}

/// Answer shape of relations.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct RelationsAnswer {
    /// Relations.
    pub relations: Vec<RelationAnswer>,
}

/// One relation.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct RelationAnswer {
    /// Source entity name.
    pub source: String,
    /// Target entity name.
    pub target: String,
    /// Relation sentence.
    pub relation: String,
    /// Supporting fact number (1-based).
    #[serde(default)]
    pub fact: Option<usize>,
}

/// Answer shape of query entities.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct QueryEntitiesAnswer {
    /// Entity names.
    pub entities: Vec<String>,
}

/// Answer shape of a query graph.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct QueryGraphAnswer {
    /// Nodes, in order (edges name them by position).
    pub nodes: Vec<QueryGraphNode>,
    /// Edges.
    #[serde(default)]
    pub edges: Vec<QueryGraphEdge>,
}

/// A node of a query graph answer.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct QueryGraphNode {
    /// The entity as written in the question; null (or empty) for an unknown.
    #[serde(default)]
    pub name: Option<String>,
    /// Whether the question asks for it.
    #[serde(default)]
    pub answer: bool,
}

/// An edge of a query graph answer.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct QueryGraphEdge {
    /// One end, by position.
    pub from: usize,
    /// The other end, by position.
    pub to: usize,
    /// The relation in plain words.
    #[serde(default)]
    pub relation: String,
}

/// The whole answer to `messages` ([`LlmClient::chat_whole`]): cut even with twice the room, it
/// is a [`FailureKind::Truncated`] failure of the unit.
async fn chat_whole(
    client: &LlmClient,
    context: &CallContext,
    messages: &[Message],
    schema: (&str, &serde_json::Value),
) -> Result<String, UnitError> {
    client.chat_whole(context, messages, Some(schema)).await.map_err(|e| {
        let kind = if matches!(e, LlmError::Cut { .. }) { FailureKind::Truncated } else { FailureKind::LlmError };
        UnitError { kind, message: e.to_string() }
    })
}

/// The JSON Schema of answers of shape `T`, and a name for it (`items_answer`). Every property
/// is required in it, those the parser would default too: a server that decodes to the schema
/// then has the model write every field (a span it may leave empty, but never leave out).
fn answer_schema<T: JsonSchema>() -> (String, serde_json::Value) {
    let mut schema = schemars::schema_for!(T).to_value();
    require_every_property(&mut schema);
    let name: String = T::schema_name()
        .chars()
        .flat_map(|c| if c.is_ascii_uppercase() { vec!['_', c.to_ascii_lowercase()] } else { vec![c] })
        .collect();
    (name.trim_start_matches('_').to_owned(), schema)
}

/// Marks every property of every object in `schema` (definitions included) as required.
fn require_every_property(schema: &mut serde_json::Value) {
    match schema {
        serde_json::Value::Object(object) => {
            if let Some(serde_json::Value::Object(properties)) = object.get("properties") {
                let names: Vec<serde_json::Value> = properties.keys().cloned().map(serde_json::Value::from).collect();
                object.insert("required".into(), names.into());
            }
            object.values_mut().for_each(require_every_property);
        }
        serde_json::Value::Array(values) => values.iter_mut().for_each(require_every_property),
        _ => {}
    }
}

/// The version of how answers are read ([`ask_json`], [`super::parse`]), part of every prompt's
/// version so that a change of it reruns what the LLM built.
const ANSWER_READING: &str = "reading 2: cut answers asked again";

/// Asks for JSON of shape `T`, with its JSON Schema as the request's `response_format` (see
/// [`LlmClient::chat_whole`]); an unreadable answer gets one repair round (the answer and the
/// parse error go back to the model) before giving up.
pub async fn ask_json<T: DeserializeOwned + JsonSchema>(
    client: &LlmClient,
    context: &CallContext,
    messages: Vec<Message>,
) -> Result<T, UnitError> {
    let (name, schema) = answer_schema::<T>();
    let schema = (name.as_str(), &schema);
    let answer = chat_whole(client, context, &messages, schema).await?;
    let error = match parse_json::<T>(&answer) {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    let mut repair = messages.clone();
    repair.push(Message::assistant(answer));
    repair.push(Message::user(repair_request(&error)));
    let repair_context = CallContext { purpose: format!("{}_repair", context.purpose), ..context.clone() };
    let answer = chat_whole(client, &repair_context, &repair, schema).await?;
    parse_json::<T>(&answer).map_err(|e| {
        // Unusable answers must not be served from the cache when the unit is retried.
        client.forget(&repair);
        client.forget(&messages);
        UnitError { kind: FailureKind::Unparseable, message: format!("unreadable answer after a repair request: {e}") }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_come_first_and_the_target_last() {
        let m = items_messages(&["first chunk", "second chunk"], "the target");
        assert_eq!(m[0].role, "system");
        let user = &m[1].content;
        let (w1, w2, t) =
            (user.find("first chunk").unwrap(), user.find("second chunk").unwrap(), user.find("the target").unwrap());
        assert!(w1 < w2 && w2 < t);
        assert!(!items_messages(&[], "x")[1].content.contains("CONTEXT"));
        // Consecutive windows share the instructions and the leading window text.
        let a = items_messages(&["c1", "c2"], "c3");
        let b = items_messages(&["c1", "c2", "c3"], "c4");
        assert_eq!(a[0], b[0]);
        assert!(b[1].content.starts_with("CONTEXT (preceding passages, for reference only):\n<<<\nc1\n\nc2"));
    }

    #[test]
    fn prompt_versions_differ_and_are_stable() {
        let all = [
            Prompt::Items,
            Prompt::Summary,
            Prompt::Relations,
            Prompt::QueryEntities,
            Prompt::QueryGraph,
            Prompt::Answer,
            Prompt::Judge,
        ];
        let versions: std::collections::HashSet<String> = all.iter().map(|p| p.version()).collect();
        assert_eq!(versions.len(), all.len());
        assert_eq!(Prompt::Items.version(), Prompt::Items.version());
        assert_eq!(Prompt::Items.version().len(), 12);
    }

    #[test]
    fn the_item_example_is_verbatim_and_no_prompt_shows_a_placeholder_to_copy() {
        for item in ITEMS_EXAMPLE.items {
            assert!(ITEMS_EXAMPLE.target.contains(item.span), "{}", item.span);
        }
        let system = &items_messages(&[], "x")[0].content;
        assert!(system.contains(ITEMS_EXAMPLE.items[1].statement));
        let answer: ItemsAnswer = parse_json(system.rsplit("the answer is:\n").next().unwrap()).unwrap();
        assert_eq!(answer.items.len(), ITEMS_EXAMPLE.items.len());
        let prompts = [
            items_messages(&["w"], "t"),
            summary_messages("e", &["f"]),
            relations_messages("a", &[("s", "p")], &["o"]),
            query_entities_messages("q"),
            query_graph_messages("q", &["e"]),
            judge_messages("q", &["r".to_owned()], "a"),
        ];
        for messages in prompts {
            assert!(messages.iter().all(|m| !m.content.contains("\"...\"")), "{}", messages[0].content);
        }
    }

    #[test]
    fn the_schemas_require_every_field_the_parser_would_default() {
        let (name, schema) = answer_schema::<ItemsAnswer>();
        assert_eq!(name, "items_answer");
        let item = &schema["$defs"]["ItemAnswer"];
        assert_eq!(item["required"], serde_json::json!(["entities", "span", "statement"]));
        let (_, graph) = answer_schema::<QueryGraphAnswer>();
        assert_eq!(graph["required"], serde_json::json!(["edges", "nodes"]));
        assert_eq!(graph["$defs"]["QueryGraphNode"]["required"], serde_json::json!(["answer", "name"]));
    }

    #[test]
    fn relation_facts_are_numbered_from_one() {
        let m = relations_messages("Ortiz", &[("Ortiz chaired talks.", "Ortiz chaired")], &["talks"]);
        assert!(m[1].content.contains("1. Ortiz chaired talks.\n   source: \"Ortiz chaired\""));
    }
}
