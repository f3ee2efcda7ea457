//! `hypergraph`: entity, hyperedge and cluster retrieval over the hypergraph (no binary edges),
//! with bridge and lexical retrieval in the fused assembly ([`super::modules`]).

use super::{Modules, QueryInput, Retrieval, ScanPlan, Scanned, Strategy, modules};
use crate::query::config::{QueryConfig, Thresholds};
use crate::query::kb::Kb;

/// Every module but edge retrieval.
#[derive(Debug)]
pub(super) struct Hypergraph;

impl Strategy for Hypergraph {
    fn modules(&self) -> Modules {
        Modules { entities: true, hyperedges: true, edges: false, clusters: true, bridges: true, lexical: true }
    }

    fn fusable(&self) -> bool {
        true
    }

    fn plan(&self, config: &QueryConfig, thresholds: Thresholds) -> ScanPlan {
        modules::plan(config, thresholds)
    }

    fn retrieve(
        &self,
        kb: &Kb,
        config: &QueryConfig,
        thresholds: Thresholds,
        query: QueryInput<'_>,
        scanned: Scanned,
    ) -> Retrieval {
        modules::retrieve(kb, config, thresholds, query, scanned)
    }
}
