//! `graph`: entity and edge retrieval over the binary graph, always assembled as the paper
//! ([`super::modules`]).

use super::Modules;
use super::modules::ModuleMode;

/// Entity and edge retrieval.
pub(super) const GRAPH: ModuleMode =
    ModuleMode { modules: Modules { entities: true, edges: true, ..Modules::NONE }, fusable: false };
