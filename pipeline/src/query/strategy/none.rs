//! `none`: no retrieval; the model answers from what it knows (closed book).

use super::Strategy;

/// Nothing retrieved.
#[derive(Debug)]
pub(super) struct None;

impl Strategy for None {
    fn retrieves(&self) -> bool {
        false
    }
}
