//! `hybrid`: entity, hyperedge, edge and cluster retrieval (the paper's default mode), with
//! bridge and lexical retrieval in the fused assembly ([`super::modules`]).

use super::Modules;
use super::modules::ModuleMode;

/// Every module.
pub(super) const HYBRID: ModuleMode = ModuleMode {
    modules: Modules { entities: true, hyperedges: true, edges: true, clusters: true, bridges: true, lexical: true },
    fusable: true,
};
