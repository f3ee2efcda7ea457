//! `hypergraph`: entity, hyperedge and cluster retrieval over the hypergraph (no binary edges),
//! with bridge and lexical retrieval in the fused assembly ([`super::modules`]).

use super::Modules;
use super::modules::ModuleMode;

/// Every module but edge retrieval.
pub(super) const HYPERGRAPH: ModuleMode =
    ModuleMode { modules: Modules { edges: false, ..super::hybrid::HYBRID.modules }, fusable: true };
