//! Re-ranking (ours, optional): a model that reads the question together with each piece of
//! evidence — a cross-encoder behind a re-ranking endpoint (`[rerank]`) — scores the first
//! `query.rerank_candidates` distinct pieces of a strategy's ranking, and those pieces go first,
//! in its order, before the rest of the ranking and before the token cap is applied.
//!
//! Every strategy is re-ranked alike (so that comparisons stay fair), after the second hop and
//! on the texts the context would give (a fused or sentence-window hyperedge with its
//! neighbours, a chunk, a cluster). A question whose re-ranking fails keeps its strategy's own
//! order, and its answer says why (`notes`).

use std::sync::Arc;

use super::STAGE;
use super::context::leading_pieces;
use super::kb::Kb;
use super::strategy::Retrieved;
use crate::io::CallRecord;
use crate::llm::{CallContext, Runner};

/// What re-ranking did to one question's evidence (absent where no re-ranker was asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reranking {
    /// The re-ranker ordered the first pieces.
    Reranked,
    /// Fewer than two pieces: nothing to order, the re-ranker was not asked.
    TooFew,
    /// The re-ranking failed (a note says why): the strategy's own order stands.
    Failed,
}

/// Scores pieces of evidence against a question.
pub trait Reranker: Send + Sync {
    /// What scores: the model and where it runs (for reports).
    fn service(&self) -> String;

    /// For each (question, pieces): one score per piece, in order, higher = more relevant; or
    /// why there are none.
    fn scores_all(&self, asks: &[(&str, &[String])]) -> Vec<Result<Vec<f32>, String>>;

    /// The endpoint calls made since the last take (for `llm_calls`).
    fn take_calls(&self) -> Vec<CallRecord>;
}

/// A re-ranking endpoint (`POST …/rerank`), with the LLM client's cache, retries, rate limits
/// and call records.
#[derive(Debug)]
pub struct EndpointReranker {
    runner: Arc<Runner>,
}

impl EndpointReranker {
    /// A re-ranker on `runner`'s endpoint.
    pub fn new(runner: Arc<Runner>) -> EndpointReranker {
        EndpointReranker { runner }
    }
}

impl Reranker for EndpointReranker {
    fn service(&self) -> String {
        self.runner.client().service()
    }

    fn scores_all(&self, asks: &[(&str, &[String])]) -> Vec<Result<Vec<f32>, String>> {
        let client = self.runner.client();
        let context = CallContext { stage: STAGE.to_owned(), doc_id: None, purpose: "rerank".to_owned() };
        let context = &context;
        self.runner.block_on(futures::future::join_all(asks.iter().map(|(question, pieces)| async move {
            let documents: Vec<&str> = pieces.iter().map(String::as_str).collect();
            client.rerank(context, question, &documents).await.map_err(|e| e.to_string())
        })))
    }

    fn take_calls(&self) -> Vec<CallRecord> {
        self.runner.drain_all_calls()
    }
}

/// The pieces of `rows` a re-ranker reads: the first `n` distinct ones in context order, as
/// (index into `rows`, text). Fewer than two leave nothing to order (empty).
pub fn candidates(kb: &Kb, rows: &[Retrieved], n: usize) -> Vec<(usize, String)> {
    let pieces = leading_pieces(kb, rows, n);
    if pieces.len() < 2 { Vec::new() } else { pieces }
}

/// Puts the `picked` rows (indexes into `rows`) first, in the order of their `scores` (the
/// higher first; ties keep their order): each becomes tier 0 with its score, and every other
/// row goes one tier down, so that the context takes them after, in their own order.
pub fn reorder(rows: &mut [Retrieved], picked: &[usize], scores: &[f32]) {
    let mut is_picked = vec![false; rows.len()];
    for &i in picked {
        is_picked[i] = true;
    }
    for (r, picked) in rows.iter_mut().zip(is_picked) {
        if !picked {
            r.tier = r.tier.saturating_add(1);
        }
    }
    // Ties keep the strategy's order: each score is nudged below the one before it.
    let mut order: Vec<usize> = (0..picked.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    let mut last = f32::INFINITY;
    for k in order {
        let score = if scores[k] < last { scores[k] } else { last.next_down() };
        last = score;
        let r = &mut rows[picked[k]];
        r.tier = 0;
        r.score = score;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::strategy::Unit;

    fn row(row: u32, score: f32, tier: u8) -> Retrieved {
        Retrieved { unit: Unit::Hyperedge, row, score, len: 1, tier, focus: None }
    }

    #[test]
    fn picked_rows_go_first_in_score_order_and_ties_keep_their_order() {
        let mut rows = vec![row(0, 0.9, 0), row(1, 0.8, 0), row(2, 0.7, 0), row(3, 0.6, 1), row(4, 0.5, 0)];
        reorder(&mut rows, &[0, 1, 2, 4], &[0.1, 0.5, 0.5, 2.0]);
        let mut order: Vec<&Retrieved> = rows.iter().collect();
        order.sort_by(|a, b| a.tier.cmp(&b.tier).then(b.score.total_cmp(&a.score)));
        assert_eq!(order.iter().map(|r| r.row).collect::<Vec<_>>(), vec![4, 1, 2, 0, 3]);
        assert_eq!((rows[3].tier, rows[4].score), (2, 2.0));
        assert!(rows[2].score < rows[1].score && rows[2].score > 0.49);
    }
}
