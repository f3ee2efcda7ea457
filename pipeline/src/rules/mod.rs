//! The offline heuristics the rules backends share: entity mentions in text, person names and
//! abbreviation aliases ([`mentions`](mod@mentions)). The rules backends themselves (items, summaries,
//! relations, query entities, extractive answers) are in the folders of the stages that use
//! them; this layer, like [`crate::llm`] for the LLM backends, is what they are built on. It
//! imports only the bottom layer.

pub mod countries;
pub mod mentions;

pub use mentions::{Mention, MentionKind, abbreviation_aliases, is_acronym, looks_like_person, mentions};
