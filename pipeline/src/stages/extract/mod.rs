//! The extract stage: `chunks` → `items` by truncated sliding-window extraction (paper §3.1).
//!
//! For chunk i the extractor sees the window prefix (chunks s(i) … i−1) as context and returns
//! items found in chunk i only: a statement, its verbatim reference span and its entities.
//! Each reference span is then located in the document; offsets are recorded only when the
//! span is found (exactly, or up to case and whitespace), never guessed.

pub mod config;
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

pub use config::ExtractConfig;
pub use llm::LlmExtractor;
pub use locate::{Locator, Match};
pub use rules::RulesExtractor;
pub use window::Window;

use super::Stage;
use super::driver::{BucketOutput, BucketStage, RunContext, run_buckets};
use crate::core::backend::BackendId;
use crate::core::ids::value_fingerprint;
use crate::core::text::{ByteOffsets, CharOffsets, is_blank};
use crate::core::{Error, Result};
use crate::io::parquet::{string_column, string_lists, typed};
use crate::io::{CallRecord, Failure, FailureKind, StageMetrics, UnitError};
use crate::llm::prompts::ItemsExample;

/// Stage name.
pub const STAGE: &str = Stage::Extract.name();
/// Bumped whenever the same chunks and config would extract differently.
const VERSION: &str = "5";

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

/// The item-extraction capability: turns a chunk (with its window) into items. Backends:
/// [`RulesExtractor`] (offline) and [`LlmExtractor`].
pub trait Extractor: Sync {
    /// Who extracts: part of the fingerprint of `items`, and its label is `items.extractor`.
    fn identity(&self) -> BackendId;
    /// Items of many requests, in order; backends that wait on the network run them
    /// concurrently.
    fn extract_all(&self, requests: &[ItemRequest<'_>]) -> Vec<Result<Vec<ExtractedItem>, UnitError>>;
    /// The calls made for the documents `sorted_doc_ids` since the last time (for `llm_calls`).
    fn take_calls(&self, _sorted_doc_ids: &[String]) -> Vec<CallRecord> {
        Vec::new()
    }
    /// The worked example the backend shows its model, if any: an item that repeats it was
    /// copied from the prompt, not found in the chunk.
    fn worked_example(&self) -> Option<ItemsExample> {
        None
    }
}

/// Counts of extracted items and how their spans were located.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
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
    /// Items left out because their statement has no letter or digit (empty, or a placeholder
    /// such as "...").
    pub dropped_empty: u64,
    /// Items left out because their statement is one of the prompt's examples.
    pub dropped_example: u64,
    /// Entity names left out of items because they have no letter or digit.
    pub dropped_entities: u64,
    /// Chunks whose answer left no item (none written, or every one left out).
    pub chunks_without_items: u64,
}

impl ExtractCounts {
    fn add(&mut self, o: &ExtractCounts) {
        self.chunks += o.chunks;
        self.items += o.items;
        self.located_exact += o.located_exact;
        self.located_normalised += o.located_normalised;
        self.unlocated += o.unlocated;
        self.dropped_empty += o.dropped_empty;
        self.dropped_example += o.dropped_example;
        self.dropped_entities += o.dropped_entities;
        self.chunks_without_items += o.chunks_without_items;
    }
}

/// The extract stage's own figures of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExtractDetails {
    /// Who extracted.
    pub extractor: BackendId,
    /// The window in effect.
    pub window: String,
    /// Items and their spans.
    #[serde(flatten)]
    pub counts: ExtractCounts,
}

/// What an extract run did.
pub type ExtractMetrics = StageMetrics<ExtractDetails>;

/// Runs the extract stage with `extractor` over the context's shard.
pub fn run(ctx: &RunContext<'_>, config: &ExtractConfig, extractor: &dyn Extractor) -> Result<ExtractMetrics> {
    let window = Window::from(config);
    let identity = extractor.identity();
    let stage = BucketStage {
        name: STAGE,
        version: VERSION,
        config_fingerprint: value_fingerprint(&(config, &identity))?,
        inputs: vec![Table::Chunks, Table::Documents],
        outputs: vec![Table::Items],
    };
    let label = identity.label();
    let totals = std::sync::Mutex::new(ExtractCounts::default());
    let metrics = run_buckets(ctx, &stage, |_, inputs| {
        let (mut output, counts, doc_ids) = extract_bucket(&inputs[1], &inputs[0], window, extractor, &label)?;
        totals.lock().map_err(|_| Error::Internal("counter lock poisoned".into()))?.add(&counts);
        output.llm_calls = extractor.take_calls(&doc_ids);
        Ok(output)
    })?;
    let counts = totals.into_inner().map_err(|_| Error::Internal("counter lock poisoned".into()))?;
    Ok(metrics.with_details(ExtractDetails { extractor: identity, window: format!("{window:?}"), counts }))
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
    label: &str,
) -> Result<(BucketOutput, ExtractCounts, Vec<String>)> {
    let mut docs: Vec<DocChunks<'_>> = Vec::new();
    for batch in documents {
        let ids = string_column(batch, col::DOC_ID)?;
        let texts = string_column(batch, col::TEXT)?;
        docs.extend((0..batch.num_rows()).map(|i| DocChunks {
            doc_id: ids.value(i),
            text: texts.value(i),
            chunks: Vec::new(),
        }));
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
    let example = extractor.worked_example().map(|e| ExampleMarks::new(&e));
    let results: Vec<(Vec<ItemRow>, Vec<Failure>, ExtractCounts)> =
        per_doc.into_par_iter().map(|(doc, answers)| locate_document(doc, answers, window, example.as_ref())).collect();

    let mut counts = ExtractCounts::default();
    let mut failures = Vec::new();
    let mut rows: Vec<(&str, Vec<ItemRow>)> = Vec::new();
    for (doc, (items, doc_failures, doc_counts)) in docs.iter().zip(results) {
        counts.add(&doc_counts);
        failures.extend(doc_failures);
        rows.push((doc.doc_id, items));
    }
    let batch = items_batch(&rows, label)?;
    let doc_ids = docs.iter().map(|d| d.doc_id.to_owned()).collect();
    Ok((BucketOutput { tables: vec![vec![batch]], failures, ..BucketOutput::default() }, counts, doc_ids))
}

/// A statement's words, lowercase, without punctuation: a model's copy of an example that
/// drops its final period or changes its case has the example's key.
fn words_key(text: &str) -> String {
    text.to_lowercase().split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).collect::<Vec<_>>().join(" ")
}

/// A whitespace-separated token without the punctuation around it (`2.4` stays whole).
fn bare(token: &str) -> &str {
    token.trim_matches(|c: char| !c.is_alphanumeric())
}

/// The words of a text as written, split at whitespace, each [`bare`].
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split_whitespace().map(bare).filter(|w| !w.is_empty())
}

/// What gives away an item copied from the prompt's worked example. A weak model copies more
/// than the example's statements: its context or target as a statement, the example's span
/// beside the chunk's names, a statement about the example's bridge reworded. Any of these
/// carries a name or number of the example that the text the model was shown lacks.
#[derive(Debug)]
struct ExampleMarks {
    /// The [`words_key`]s of the example's statements.
    statements: Vec<String>,
    /// The example's names and numbers, as written: its words with a digit, and its
    /// capitalised words other than a sentence's first (entity names count whole).
    names: Vec<String>,
}

impl ExampleMarks {
    fn new(example: &ItemsExample) -> Self {
        let mut texts = vec![example.context, example.target];
        texts.extend(example.items.iter().flat_map(|i| [i.statement, i.span]));
        let mut names = Vec::new();
        for text in texts {
            let mut sentence_start = true;
            for raw in text.split_whitespace() {
                let word = bare(raw);
                let capitalised = word.starts_with(char::is_uppercase) && !sentence_start;
                if !word.is_empty() && (capitalised || word.contains(|c: char| c.is_ascii_digit())) {
                    names.push(word.to_owned());
                }
                sentence_start = raw.ends_with(['.', '!', '?']);
            }
        }
        let entities = example.items.iter().flat_map(|i| i.entities.iter().copied());
        names.extend(
            entities
                .flat_map(words)
                .filter(|w| w.starts_with(char::is_uppercase) || w.contains(|c: char| c.is_ascii_digit()))
                .map(str::to_owned),
        );
        names.sort_unstable();
        names.dedup();
        let statements = example.items.iter().map(|i| words_key(i.statement)).collect();
        Self { statements, names }
    }

    /// Whether `item` repeats the example: its statement is one of the example's (up to case
    /// and punctuation), or its statement or span has a name or number of the example that is
    /// nowhere in `shown`, the text the model was given.
    fn copied(&self, item: &ExtractedItem, shown: &str) -> bool {
        if self.statements.contains(&words_key(&item.text)) {
            return true;
        }
        let foreign =
            |word: &str| self.names.iter().any(|n| n == word) && !words(shown).any(|s| s.eq_ignore_ascii_case(word));
        words(&item.text).chain(words(&item.ref_text)).any(foreign)
    }
}

/// The items of an answer worth keeping: those whose statement says something and does not
/// repeat the prompt's `example` (`shown` is the text the model was given), without blank
/// entity names; what is left out is counted.
fn screen(
    items: Vec<ExtractedItem>,
    example: Option<&ExampleMarks>,
    shown: &str,
    counts: &mut ExtractCounts,
) -> Vec<ExtractedItem> {
    let mut kept = Vec::with_capacity(items.len());
    for mut item in items {
        if is_blank(&item.text) {
            counts.dropped_empty += 1;
        } else if example.is_some_and(|e| e.copied(&item, shown)) {
            counts.dropped_example += 1;
        } else {
            let before = item.entities.len();
            item.entities.retain(|e| !is_blank(e));
            counts.dropped_entities += (before - item.entities.len()) as u64;
            kept.push(item);
        }
    }
    kept
}

/// Locates the spans of one document's extracted items (in the target chunk, else the window
/// the extractor saw, else the document) and numbers them in extraction order. A located item's
/// `ref_text` becomes the document's own text at its offsets, so that the two always agree.
/// Items that say nothing or copy the prompt's `example` are left out first (and counted).
fn locate_document(
    doc: &DocChunks<'_>,
    answers: Vec<Result<Vec<ExtractedItem>, UnitError>>,
    window: Window,
    example: Option<&ExampleMarks>,
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
    let chunk_start_bytes: Vec<Option<usize>> =
        doc.chunks.iter().map(|c| usize::try_from(c.1).ok().and_then(|c| chunk_bytes.at(c))).collect();
    for (position, (&(chunk_idx, _, text), answer)) in doc.chunks.iter().zip(answers).enumerate() {
        let Some(chunk_byte) = chunk_start_bytes[position] else {
            let char_start = doc.chunks[position].1;
            let message =
                format!("char_start {char_start} lies outside the document (the chunks are older than the documents)");
            failures.push(fail(chunk_idx, FailureKind::InvalidField, message));
            continue;
        };
        counts.chunks += 1;
        let chunk = chunk_byte..chunk_byte + text.len();
        let first = window.prefix(position + 1).start.saturating_sub(1);
        let seen = chunk_start_bytes[first..position].iter().flatten().next().copied().unwrap_or(chunk_byte);
        let items = match answer {
            Ok(items) => screen(items, example, &doc.text[seen..chunk.end], &mut counts),
            Err(e) => {
                failures.push(fail(chunk_idx, e.kind, e.message));
                continue;
            }
        };
        if items.is_empty() {
            counts.chunks_without_items += 1;
        }
        let scopes = [chunk.clone(), seen..chunk.end, 0..doc.text.len()];
        for mut item in items {
            let found = match &item.span {
                // The extractor knows where the span is; check it rather than trust it.
                Some(span) if text.get(span.clone()) == Some(item.ref_text.as_str()) => {
                    Some((chunk_byte + span.start..chunk_byte + span.end, Match::Exact))
                }
                _ => locator.find(&item.ref_text, &scopes),
            };
            let ref_chars = found.map(|(bytes, how)| {
                match how {
                    Match::Exact => counts.located_exact += 1,
                    Match::Normalised => counts.located_normalised += 1,
                }
                item.ref_text = doc.text[bytes.clone()].to_owned();
                (offsets.at(bytes.start) as i64, offsets.at(bytes.end) as i64)
            });
            if ref_chars.is_none() {
                counts.unlocated += 1;
            }
            counts.items += 1;
            rows.push(ItemRow { chunk_idx, item, ref_chars });
        }
    }
    // Items are numbered in extraction order, the located ones first: an item whose span is in
    // no text (a model's invention) never shifts the numbers, and so the ids, of the others.
    rows.sort_by_key(|r| r.ref_chars.is_none());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::prompts::ITEMS_EXAMPLE;

    fn item(text: &str, ref_text: &str) -> ExtractedItem {
        ExtractedItem { text: text.into(), ref_text: ref_text.into(), entities: Vec::new(), span: None }
    }

    #[test]
    fn the_examples_names_and_numbers_mark_it_and_its_first_words_do_not() {
        let marks = ExampleMarks::new(&ITEMS_EXAMPLE);
        for name in ["Varden", "Bridge", "Sola", "Mirth", "Ilse", "Brandt", "Oslo", "1931", "2.4", "1958"] {
            assert!(marks.names.iter().any(|n| n == name), "{name}: {:?}", marks.names);
        }
        for word in ["The", "It", "Building", "crowns", "technical"] {
            assert!(!marks.names.iter().any(|n| n == word), "{word}: {:?}", marks.names);
        }
    }

    #[test]
    fn copies_of_any_part_of_the_example_are_left_out_and_the_chunks_own_facts_kept() {
        let marks = ExampleMarks::new(&ITEMS_EXAMPLE);
        let shown = "The ferry to Oslo left Kiel at nine. It carried 212 passengers in 1998.";
        // What a 270M model wrote under the schema: the example's context and target as
        // statements, its first statement reworded, its span beside the chunk's own names.
        let copies = [
            item(ITEMS_EXAMPLE.context, "Q_K-1"),
            item(ITEMS_EXAMPLE.target, "Q_K-2"),
            item("building of the Varden Bridge begins in 1931 and costs 2.4 million crowns.", "Building began."),
            item("The ferry to Oslo left Kiel.", ITEMS_EXAMPLE.items[0].span),
            item(&ITEMS_EXAMPLE.items[1].statement.to_lowercase(), ""),
        ];
        for copy in &copies {
            assert!(marks.copied(copy, shown), "{copy:?}");
        }
        // A name the example shares with the text shown (Oslo) is the chunk's own; one the
        // text lacks in any case gives a statement away even when the rest is the model's own.
        let own = [
            item("The ferry to Oslo left Kiel at nine.", "The ferry to Oslo left Kiel at nine."),
            item("The Ferry carried 212 passengers in 1998.", "It carried 212 passengers in 1998."),
        ];
        for own in &own {
            assert!(!marks.copied(own, shown), "{own:?}");
        }
        assert!(marks.copied(&item("The Bridge of the ferry was new.", "nowhere"), shown));

        let mut counts = ExtractCounts::default();
        let items = copies.into_iter().chain(own).chain([item("...", "...")]).collect();
        let kept = screen(items, Some(&marks), shown, &mut counts);
        assert_eq!(kept.len(), 2);
        assert_eq!((counts.dropped_example, counts.dropped_empty), (5, 1));
        // Without an example (the rules extractor) nothing is taken for a copy.
        let mut counts = ExtractCounts::default();
        assert_eq!(screen(vec![item(ITEMS_EXAMPLE.context, "")], None, shown, &mut counts).len(), 1);
    }
}
