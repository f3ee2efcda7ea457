//! The extract stage: `chunks` → `items` by truncated sliding-window extraction (paper §3.1).
//!
//! For chunk i the extractor sees the window prefix (chunks s(i) … i−1) as context and returns
//! items found in chunk i only: a statement, its verbatim reference span and its entities.
//! Each reference span is then located in the document; offsets are recorded only when the
//! span is found (exactly, or up to case and whitespace), never guessed.

pub mod entities;
pub mod llm;
mod locate;
pub mod rules;
mod window;

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Int32Array, Int64Array, RecordBatch, StringArray};
use flexstruct_schemas::{Table, col};
use rayon::prelude::*;
use serde::Serialize;

pub use locate::{Locator, Match};
pub use window::Window;

use crate::llm::runner::Runner;
use crate::error::{Error, Result};
pub use crate::failures::UnitError;
use crate::failures::{Failure, FailureKind};
use crate::io::{string_column, string_lists, typed};
use crate::stage::{BucketOutput, BucketStage, RunContext, StageMetrics, config_fingerprint, run_buckets};
use crate::text::{ByteOffsets, CharOffsets};

/// Stage name.
pub const STAGE: &str = "extract";
/// Bumped whenever the same chunks and config would extract differently.
const VERSION: &str = "2";

/// What an extractor is asked: the window prefix (oldest first) and the target chunk.
#[derive(Debug, Clone, Copy)]
pub struct ItemRequest<'a> {
    /// Document the chunk belongs to.
    pub doc_id: &'a str,
    /// Texts of the preceding chunks in the window.
    pub window: &'a [&'a str],
    /// Text of the chunk to extract from.
    pub target: &'a str,
}

/// An item as an extractor returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtractedItem {
    /// The relational statement.
    pub text: String,
    /// The supporting span, verbatim from the target chunk.
    pub ref_text: String,
    /// Entity names as they appear in the text.
    pub entities: Vec<String>,
    /// Byte range of `ref_text` in the target chunk, when the extractor knows it.
    pub span: Option<Range<usize>>,
}

/// Turns a chunk (with its window) into items. Implementations: the rules extractor; the LLM
/// extractor shares this trait.
pub trait Extractor: Sync {
    /// Label stored in `items.extractor`.
    fn name(&self) -> String;
    /// Items of `request.target`.
    fn extract(&self, request: &ItemRequest<'_>) -> Result<Vec<ExtractedItem>, UnitError>;
    /// Items of many requests, in order; backends that wait on the network run them
    /// concurrently.
    fn extract_all(&self, requests: &[ItemRequest<'_>]) -> Vec<Result<Vec<ExtractedItem>, UnitError>> {
        requests.iter().map(|r| self.extract(r)).collect()
    }
}

/// Per-run figures of the extract stage.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct ExtractCounts {
    /// Chunks extracted.
    pub chunks: u64,
    /// Items produced.
    pub items: u64,
    /// Items whose span was found verbatim.
    pub located_exact: u64,
    /// Items whose span was found up to case and whitespace.
    pub located_normalised: u64,
    /// Items whose span was not found (null offsets).
    pub unlocated: u64,
}

impl ExtractCounts {
    fn add(&mut self, o: &ExtractCounts) {
        self.chunks += o.chunks;
        self.items += o.items;
        self.located_exact += o.located_exact;
        self.located_normalised += o.located_normalised;
        self.unlocated += o.unlocated;
    }
}

/// Runs the extract stage with the configured backend.
pub fn run(ctx: &RunContext<'_>) -> Result<StageMetrics> {
    match Runner::for_config(&ctx.config, ctx.index.root())? {
        Some(runner) => run_with(ctx, &llm::LlmExtractor::new(&runner), Some(&runner)),
        None => run_with(ctx, &rules::RulesExtractor, None),
    }
}

/// Runs the extract stage with a given extractor; `runner` is the LLM runner whose calls go to
/// `llm_calls`, if the extractor uses one.
pub fn run_with(ctx: &RunContext<'_>, extractor: &dyn Extractor, runner: Option<&Runner>) -> Result<StageMetrics> {
    let config = ctx.config.extract.clone();
    let window = Window::from(&config);
    let stage = BucketStage {
        name: STAGE,
        version: VERSION,
        config_fingerprint: config_fingerprint(&(&config, extractor.name()))?,
        inputs: vec![Table::Chunks, Table::Documents],
        outputs: vec![Table::Items],
    };
    let totals = std::sync::Mutex::new(ExtractCounts::default());
    let mut metrics = run_buckets(ctx, &stage, |_, inputs| {
        let (mut output, counts, doc_ids) = extract_bucket(&inputs[1], &inputs[0], window, extractor)?;
        totals.lock().map_err(|_| Error::Internal("counter lock poisoned".into()))?.add(&counts);
        if let Some(runner) = runner {
            output.llm_calls = runner.drain_calls(&doc_ids);
        }
        Ok(output)
    })?;
    let totals = totals.into_inner().map_err(|_| Error::Internal("counter lock poisoned".into()))?;
    metrics.details.insert("extractor".into(), extractor.name().into());
    metrics.details.insert("window".into(), format!("{window:?}").into());
    if let serde_json::Value::Object(map) = serde_json::to_value(totals)? {
        metrics.details.extend(map);
    }
    Ok(metrics)
}

/// One document's chunks, in order.
struct DocChunks<'a> {
    doc_id: &'a str,
    text: &'a str,
    /// (chunk_idx, char_start, text)
    chunks: Vec<(i32, i64, &'a str)>,
}

/// A finished item row.
struct ItemRow {
    chunk_idx: i32,
    item: ExtractedItem,
    ref_chars: Option<(i64, i64)>,
}

fn extract_bucket(
    documents: &[RecordBatch],
    chunks: &[RecordBatch],
    window: Window,
    extractor: &dyn Extractor,
) -> Result<(BucketOutput, ExtractCounts, Vec<String>)> {
    let mut docs: Vec<DocChunks<'_>> = Vec::new();
    for batch in documents {
        let ids = string_column(batch, col::DOC_ID)?;
        let texts = string_column(batch, col::TEXT)?;
        docs.extend((0..batch.num_rows()).map(|i| DocChunks { doc_id: ids.value(i), text: texts.value(i), chunks: Vec::new() }));
    }
    docs.sort_by(|a, b| a.doc_id.cmp(b.doc_id));
    for batch in chunks {
        let ids = string_column(batch, col::DOC_ID)?;
        let texts = string_column(batch, col::TEXT)?;
        let idx = typed::<Int32Array>(batch, col::CHUNK_IDX)?;
        let starts = typed::<Int64Array>(batch, col::CHAR_START)?;
        for i in 0..batch.num_rows() {
            // Chunks of a document that is no longer in `documents` are ignored; chunk reruns
            // remove them.
            if let Ok(d) = docs.binary_search_by(|d| d.doc_id.cmp(ids.value(i))) {
                docs[d].chunks.push((idx.value(i), starts.value(i), texts.value(i)));
            }
        }
    }
    // Every chunk of the bucket is one request, so that a network backend can run them all
    // concurrently; each sees the chunks of its window as context.
    let mut texts: Vec<Vec<&str>> = Vec::with_capacity(docs.len());
    for doc in &mut docs {
        doc.chunks.sort_by_key(|c| c.0);
        texts.push(doc.chunks.iter().map(|c| c.2).collect());
    }
    let mut requests = Vec::new();
    for (doc, doc_texts) in docs.iter().zip(&texts) {
        for position in 0..doc_texts.len() {
            let prefix = window.prefix(position + 1);
            requests.push(ItemRequest {
                doc_id: doc.doc_id,
                window: &doc_texts[prefix.start - 1..prefix.end - 1],
                target: doc_texts[position],
            });
        }
    }
    let mut answers = extractor.extract_all(&requests).into_iter();
    let mut per_doc = Vec::with_capacity(docs.len());
    for doc in &docs {
        per_doc.push((doc, answers.by_ref().take(doc.chunks.len()).collect::<Vec<_>>()));
    }
    let results: Vec<(Vec<ItemRow>, Vec<Failure>, ExtractCounts)> =
        per_doc.into_par_iter().map(|(doc, answers)| locate_document(doc, answers)).collect();

    let mut counts = ExtractCounts::default();
    let mut failures = Vec::new();
    let mut rows: Vec<(&str, Vec<ItemRow>)> = Vec::new();
    for (doc, (items, doc_failures, doc_counts)) in docs.iter().zip(results) {
        counts.add(&doc_counts);
        failures.extend(doc_failures);
        rows.push((doc.doc_id, items));
    }
    let batch = items_batch(&rows, &extractor.name())?;
    let doc_ids = docs.iter().map(|d| d.doc_id.to_owned()).collect();
    Ok((BucketOutput { tables: vec![vec![batch]], failures, ..BucketOutput::default() }, counts, doc_ids))
}

/// Locates the spans of one document's extracted items and numbers them in extraction order.
fn locate_document(
    doc: &DocChunks<'_>,
    answers: Vec<Result<Vec<ExtractedItem>, UnitError>>,
) -> (Vec<ItemRow>, Vec<Failure>, ExtractCounts) {
    let locator = Locator::new(doc.text);
    let mut offsets = CharOffsets::new(doc.text);
    let mut chunk_bytes = ByteOffsets::new(doc.text);
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let mut counts = ExtractCounts::default();
    let fail = |chunk_idx: i32, kind: FailureKind, message: String| Failure {
        stage: STAGE.to_owned(),
        doc_id: Some(doc.doc_id.to_owned()),
        unit: format!("chunk {chunk_idx}"),
        kind,
        message: format!("{} chunk {chunk_idx}: {message}", doc.doc_id),
    };
    for (&(chunk_idx, char_start, text), answer) in doc.chunks.iter().zip(answers) {
        let Some(chunk_byte) = usize::try_from(char_start).ok().and_then(|c| chunk_bytes.at(c)) else {
            let message = format!("char_start {char_start} is outside the document; rerun chunk");
            failures.push(fail(chunk_idx, FailureKind::InvalidField, message));
            continue;
        };
        counts.chunks += 1;
        let items = match answer {
            Ok(items) => items,
            Err(e) => {
                failures.push(fail(chunk_idx, e.kind, e.message));
                continue;
            }
        };
        for item in items {
            let found = match &item.span {
                // The extractor knows where the span is; check it rather than trust it.
                Some(span) if text.get(span.clone()) == Some(item.ref_text.as_str()) => {
                    Some((chunk_byte + span.start..chunk_byte + span.end, Match::Exact))
                }
                _ => locator.find(&item.ref_text, chunk_byte),
            };
            let ref_chars = found.map(|(bytes, how)| {
                match how {
                    Match::Exact => counts.located_exact += 1,
                    Match::Normalised => counts.located_normalised += 1,
                }
                (offsets.at(bytes.start) as i64, offsets.at(bytes.end) as i64)
            });
            if ref_chars.is_none() {
                counts.unlocated += 1;
            }
            counts.items += 1;
            rows.push(ItemRow { chunk_idx, item, ref_chars });
        }
    }
    (rows, failures, counts)
}

fn items_batch(rows: &[(&str, Vec<ItemRow>)], extractor: &str) -> Result<RecordBatch> {
    let n: usize = rows.iter().map(|(_, r)| r.len()).sum();
    let mut doc_ids = Vec::with_capacity(n);
    let mut item_idx = Vec::with_capacity(n);
    let mut chunk_idx = Vec::with_capacity(n);
    let mut texts = Vec::with_capacity(n);
    let mut refs = Vec::with_capacity(n);
    let mut starts = Vec::with_capacity(n);
    let mut ends = Vec::with_capacity(n);
    for (doc_id, items) in rows {
        for (k, row) in items.iter().enumerate() {
            doc_ids.push(*doc_id);
            item_idx.push(i32::try_from(k).map_err(|_| Error::Internal("item index overflow".into()))?);
            chunk_idx.push(row.chunk_idx);
            texts.push(row.item.text.as_str());
            refs.push(row.item.ref_text.as_str());
            starts.push(row.ref_chars.map(|r| r.0));
            ends.push(row.ref_chars.map(|r| r.1));
        }
    }
    Ok(RecordBatch::try_new(
        Table::Items.schema(),
        vec![
            Arc::new(StringArray::from(doc_ids)),
            Arc::new(Int32Array::from(item_idx)),
            Arc::new(Int32Array::from(chunk_idx)),
            Arc::new(StringArray::from(texts)),
            Arc::new(StringArray::from(refs)),
            Arc::new(Int64Array::from(starts)),
            Arc::new(Int64Array::from(ends)),
            Arc::new(string_lists(rows.iter().flat_map(|(_, items)| items.iter().map(|r| r.item.entities.as_slice())))),
            Arc::new(StringArray::from(vec![extractor; n])),
        ],
    )?)
}
