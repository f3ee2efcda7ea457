//! `graph`: entity and edge retrieval over the binary graph, assembled as the paper
//! ([`super::modules`]).

use super::{Modules, QueryInput, Retrieval, ScanPlan, Scanned, Strategy, modules};
use crate::query::config::{QueryConfig, Thresholds};
use crate::query::kb::Kb;

/// Entity and edge retrieval.
#[derive(Debug)]
pub(super) struct Graph;

impl Strategy for Graph {
    fn modules(&self) -> Modules {
        Modules { entities: true, edges: true, ..Modules::NONE }
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
