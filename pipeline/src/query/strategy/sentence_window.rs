//! `sentence-window`: a strong simple baseline, the top hyperedges each widened to its
//! neighbours in its document.

use super::{Ask, Retrieval, Scan, ScanPlan, Scanned, Strategy, tiered, widen};
use crate::core::units::Unit;
use crate::query::config::{QueryConfig, Thresholds};
use crate::query::kb::Kb;

/// Sentence windows.
#[derive(Debug)]
pub(super) struct SentenceWindow;

impl Strategy for SentenceWindow {
    fn always_merges(&self) -> bool {
        true
    }

    fn plan(&self, config: &QueryConfig, _thresholds: Thresholds) -> ScanPlan {
        ScanPlan { hyperedges: Some(Scan::top(config.breadths().hyperedges)), ..ScanPlan::default() }
    }

    fn retrieve(&self, ask: Ask<'_>, scanned: Scanned) -> Retrieval {
        sentence_windows(ask.kb, ask.config, scanned)
    }
}

/// Sentence windows: each of the top hyperedges widened to its ±`window_k` neighbours in
/// extraction order within its document, as passages ranked by their seed. Windows that overlap
/// or touch become one passage when the context is assembled (this mode always merges,
/// [`super::context`]), so a window only costs the sentences it adds.
fn sentence_windows(kb: &Kb, config: &QueryConfig, scanned: Scanned) -> Retrieval {
    let rows =
        tiered(Unit::Hyperedge, scanned.hyperedges, config.n_eh).map(|r| widen(kb, r, config.window_k)).collect();
    Retrieval { rows, ..Retrieval::default() }
}
