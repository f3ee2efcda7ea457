//! Integration tests of the pipeline library against real local services.
#![allow(clippy::unwrap_used)]

mod config_reference;
mod embed;
mod layers;
mod llm;
mod slt;
mod upgrade;
