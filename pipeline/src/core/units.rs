//! The kinds of retrievable units: what `embeddings.unit` holds and what evidence in a context
//! is made of.

use serde::Serialize;

/// Kind of a retrievable unit. The order (entity, hyperedge, edge, cluster, chunk, passage)
/// breaks ties between equally scored evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// An entity (name + summary).
    Entity,
    /// An n-ary fact.
    Hyperedge,
    /// A binary relation.
    Edge,
    /// An SSC cluster (not embedded itself: found through its hyperedges).
    Cluster,
    /// A chunk (id `doc_id#chunk_idx`).
    Chunk,
    /// A passage: consecutive hyperedges of one document given as one piece of evidence (the
    /// sentence-window peer; not embedded itself).
    Passage,
}

impl Unit {
    /// Every kind, in tie-breaking order.
    pub const ALL: [Unit; 6] = [Unit::Entity, Unit::Hyperedge, Unit::Edge, Unit::Cluster, Unit::Chunk, Unit::Passage];

    /// Name in tables (`embeddings.unit`) and outputs.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Entity => "entity",
            Unit::Hyperedge => "hyperedge",
            Unit::Edge => "edge",
            Unit::Cluster => "cluster",
            Unit::Chunk => "chunk",
            Unit::Passage => "passage",
        }
    }

    /// The kind named `name`.
    pub fn from_name(name: &str) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.name() == name)
    }
}

impl std::fmt::Display for Unit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_serialise_as_written() {
        for u in Unit::ALL {
            assert_eq!(Unit::from_name(u.name()), Some(u));
            assert_eq!(serde_json::to_value(u).unwrap(), u.name());
        }
        assert!(Unit::Entity < Unit::Chunk);
    }
}
