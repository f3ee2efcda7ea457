//! The chunk stage: `documents` → `chunks` by dynamic partitioning.

pub mod config;
mod partition;

use std::sync::Arc;

use arrow::array::{Int32Array, Int64Array, RecordBatch, StringArray};
use flexstruct_schemas::{Table, col};
use rayon::prelude::*;
use serde::Serialize;

pub use config::ChunkConfig;
pub use partition::{Chunk, ChunkParams, partition};

use super::Stage;
use super::driver::{BucketOutput, BucketStage, RunContext, run_buckets};
use crate::core::ids::value_fingerprint;
use crate::core::tokens::TokenCounter;
use crate::core::{Error, Result};
use crate::io::StageMetrics;
use crate::io::parquet::string_column;

/// Stage name.
pub const STAGE: &str = Stage::Chunk.name();
/// Bumped whenever the same document and config would chunk differently.
const VERSION: &str = "4";

/// The chunk stage's own figures of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ChunkDetails {
    /// ct_min in effect.
    pub ct_min: usize,
    /// ct_max in effect.
    pub ct_max: usize,
}

/// What a chunk run did.
pub type ChunkMetrics = StageMetrics<ChunkDetails>;

/// Runs the chunk stage over the context's shard.
pub fn run(ctx: &RunContext<'_>, config: &ChunkConfig) -> Result<ChunkMetrics> {
    let params = ChunkParams { ct_min: config.ct_min, ct_max: config.ct_max };
    let stage = BucketStage {
        name: STAGE,
        version: VERSION,
        config_fingerprint: value_fingerprint(config)?,
        inputs: vec![Table::Documents],
        outputs: vec![Table::Chunks],
    };
    let counter = TokenCounter::cl100k();
    let metrics = run_buckets(ctx, &stage, |_, inputs| chunk_bucket(&inputs[0], params, &counter))?;
    Ok(metrics.with_details(ChunkDetails { ct_min: params.ct_min, ct_max: params.ct_max }))
}

/// Chunks every document of a bucket (documents in parallel; rows keep doc_id order).
fn chunk_bucket(docs: &[RecordBatch], params: ChunkParams, counter: &TokenCounter) -> Result<BucketOutput> {
    let mut inputs: Vec<(&str, &str)> = Vec::new();
    for batch in docs {
        let ids = string_column(batch, col::DOC_ID)?;
        let texts = string_column(batch, col::TEXT)?;
        inputs.extend((0..batch.num_rows()).map(|i| (ids.value(i), texts.value(i))));
    }
    let per_doc: Vec<(&str, Vec<Chunk>)> =
        inputs.par_iter().map(|&(id, text)| (id, partition(text, params, counter))).collect();
    let texts: Vec<&str> = inputs.iter().map(|(_, t)| *t).collect();
    let batch = chunks_batch(&per_doc, &texts)?;
    Ok(BucketOutput { tables: vec![vec![batch]], ..BucketOutput::default() })
}

fn chunks_batch(per_doc: &[(&str, Vec<Chunk>)], texts: &[&str]) -> Result<RecordBatch> {
    let mut doc_ids = Vec::new();
    let mut idx = Vec::new();
    let mut chunk_texts = Vec::new();
    let mut n_tokens = Vec::new();
    let mut starts = Vec::new();
    let mut ends = Vec::new();
    for ((doc_id, chunks), text) in per_doc.iter().zip(texts) {
        for (i, c) in chunks.iter().enumerate() {
            doc_ids.push(*doc_id);
            idx.push(i32::try_from(i).map_err(|_| Error::Internal("chunk index overflow".into()))?);
            chunk_texts.push(&text[c.byte_start..c.byte_end]);
            n_tokens.push(c.n_tokens as i32);
            starts.push(c.char_start as i64);
            ends.push(c.char_end as i64);
        }
    }
    Ok(RecordBatch::try_new(
        Table::Chunks.schema(),
        vec![
            Arc::new(StringArray::from(doc_ids)),
            Arc::new(Int32Array::from(idx)),
            Arc::new(StringArray::from(chunk_texts)),
            Arc::new(Int32Array::from(n_tokens)),
            Arc::new(Int64Array::from(starts)),
            Arc::new(Int64Array::from(ends)),
        ],
    )?)
}
