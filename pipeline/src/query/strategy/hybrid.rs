//! `hybrid`: entity, hyperedge, edge and cluster retrieval (the paper's default mode), with
//! bridge and lexical retrieval in the fused assembly ([`super::modules`]).

use super::{Modules, QueryInput, Retrieval, ScanPlan, Scanned, Strategy, modules};
use crate::query::config::{QueryConfig, Thresholds};
use crate::query::kb::Kb;

/// Every module.
#[derive(Debug)]
pub(super) struct Hybrid;

impl Strategy for Hybrid {
    fn modules(&self) -> Modules {
        Modules { entities: true, hyperedges: true, edges: true, clusters: true, bridges: true, lexical: true }
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
