//! The offline heuristics the rules backends share: entity mentions in text, person names and
//! abbreviation aliases ([`mentions`](mod@mentions)), countries and demonyms ([`countries`]), and the
//! reader of English questions ([`question`]: what is asked, choices, relation chains, typed spans)
//! that the extractive answerer and the second retrieval use. The rules backends themselves (items, summaries,
//! relations, query entities, extractive answers) are in the folders of the stages that use
//! them; this layer, like [`crate::llm`] for the LLM backends, is what they are built on. It
//! imports only the bottom layer.

pub mod countries;
pub mod mentions;
pub mod question;

pub use mentions::{Mention, MentionKind, abbreviation_aliases, is_acronym, looks_like_person, mentions};
