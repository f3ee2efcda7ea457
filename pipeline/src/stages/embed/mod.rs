//! The embed stage: a vector for every retrievable unit (paper §3.2) → `embeddings`.
//!
//! Hyperedges and edges are embedded as their text followed by the names of their entities, so
//! that content and structural role are encoded together; entities as name and summary; chunks
//! as their text (for the chunk baseline). Each vector records its model and the SHA-256 of the
//! exact input text, so a rerun embeds only texts its bucket had no vector of for the current
//! model: a unit whose id moved (an edit earlier in its document renumbers the hyperedges after
//! it) keeps the vector of its unchanged text. The stage is configured by the index's embedding
//! model, the `[embed]` section ([`crate::models::EmbedConfig`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::{FixedSizeListArray, Int32Array, RecordBatch, StringArray};
use flexstruct_schemas::{Table, col};
use serde::Serialize;

use super::Stage;
use super::driver::{BucketOutput, BucketStage, RunContext, run_buckets};
use crate::core::ids::{chunk_id, sha256_hex, value_fingerprint};
use crate::core::units::Unit;
use crate::core::{Error, Result};
use crate::io::parquet::{read_part, string_column, typed, vector_at, vector_lists};
use crate::io::{Index, StageMetrics};
use crate::models::Embedder;

/// Stage name.
pub const STAGE: &str = Stage::Embed.name();
const VERSION: &str = "1";

/// The embed stage's own figures of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EmbedDetails {
    /// The embedding model.
    pub model: String,
    /// What computed the vectors ([`Embedder::engine`]: with MiniLM, `embed.runtime` settled).
    pub engine: String,
    /// Units embedded in this run.
    pub embedded: u64,
    /// Units whose vector was reused (same model, same input text in the bucket's previous run).
    pub reused: u64,
    /// Of the units embedded, those whose text another unit of their bucket has word for word
    /// (given that unit's vector: each distinct text is embedded once).
    pub identical: u64,
}

/// What an embed run did.
pub type EmbedMetrics = StageMetrics<EmbedDetails>;

/// Runs the embed stage with `embedder` over the context's shard, each entity's summary cut to
/// its first `summary_words` words (0: whole).
pub fn run(ctx: &RunContext<'_>, embedder: &dyn Embedder, summary_words: usize) -> Result<EmbedMetrics> {
    // The cut joins the configuration only when set, so indexes built before it stay current.
    let config_fingerprint = match summary_words {
        0 => value_fingerprint(&(embedder.model(), embedder.dim()))?,
        words => value_fingerprint(&(embedder.model(), embedder.dim(), words))?,
    };
    let stage = BucketStage {
        name: STAGE,
        version: VERSION,
        config_fingerprint,
        inputs: vec![Table::Hyperedges, Table::HyperedgeEntities, Table::Entities, Table::Edges, Table::Chunks],
        outputs: vec![Table::Embeddings],
    };
    let (embedded, reused, identical) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let index = &ctx.index;
    let metrics = run_buckets(ctx, &stage, |bucket, inputs| {
        let units = units(inputs, summary_words)?;
        let previous = previous_vectors(index, bucket, embedder.model())?;
        let (batch, counts) = embed_units(&units, &previous, embedder)?;
        embedded.fetch_add(counts.embedded, Ordering::Relaxed);
        reused.fetch_add(counts.reused, Ordering::Relaxed);
        identical.fetch_add(counts.identical, Ordering::Relaxed);
        Ok(BucketOutput { tables: vec![vec![batch]], llm_calls: embedder.take_calls(), ..BucketOutput::default() })
    })?;
    let details = EmbedDetails {
        model: embedder.model().to_owned(),
        engine: embedder.engine().to_owned(),
        embedded: embedded.into_inner(),
        reused: reused.into_inner(),
        identical: identical.into_inner(),
    };
    Ok(metrics.with_details(details))
}

/// A unit to embed.
#[derive(Debug, Clone, PartialEq)]
pub struct UnitText {
    /// Its kind.
    pub unit: Unit,
    /// Unit id.
    pub id: String,
    /// Document.
    pub doc_id: String,
    /// The exact text given to the model.
    pub text: String,
}

/// The texts of every unit of a bucket, in a stable order; entity summaries cut to their first
/// `summary_words` words (0: whole).
fn units(inputs: &[Vec<RecordBatch>], summary_words: usize) -> Result<Vec<UnitText>> {
    let [hyperedges, incidence, entities, edges, chunks] = inputs else {
        return Err(Error::Internal("embed expects five input tables".into()));
    };
    let mut names: HashMap<String, String> = HashMap::new();
    let mut out = Vec::new();
    for batch in entities {
        let (doc, id, name, summary) = (
            string_column(batch, col::DOC_ID)?,
            string_column(batch, col::ENTITY_ID)?,
            string_column(batch, col::NAME)?,
            string_column(batch, col::SUMMARY)?,
        );
        for i in 0..batch.num_rows() {
            names.insert(id.value(i).to_owned(), name.value(i).to_owned());
            out.push(UnitText {
                unit: Unit::Entity,
                id: id.value(i).to_owned(),
                doc_id: doc.value(i).to_owned(),
                text: format!("{}: {}", name.value(i), first_words(summary.value(i), summary_words)),
            });
        }
    }
    let mut members: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for batch in incidence {
        let (h, e) = (string_column(batch, col::HYPEREDGE_ID)?, string_column(batch, col::ENTITY_ID)?);
        for i in 0..batch.num_rows() {
            if let Some(n) = names.get(e.value(i)) {
                members.entry(h.value(i).to_owned()).or_default().push(n.clone());
            }
        }
    }
    for batch in hyperedges {
        let (doc, id, text) = (
            string_column(batch, col::DOC_ID)?,
            string_column(batch, col::HYPEREDGE_ID)?,
            string_column(batch, col::TEXT)?,
        );
        for i in 0..batch.num_rows() {
            out.push(UnitText {
                unit: Unit::Hyperedge,
                id: id.value(i).to_owned(),
                doc_id: doc.value(i).to_owned(),
                text: with_entities(text.value(i), members.get(id.value(i))),
            });
        }
    }
    for batch in edges {
        let (doc, id, text) =
            (string_column(batch, col::DOC_ID)?, string_column(batch, col::EDGE_ID)?, string_column(batch, col::TEXT)?);
        let (source, target) = (string_column(batch, col::SOURCE_ID)?, string_column(batch, col::TARGET_ID)?);
        for i in 0..batch.num_rows() {
            let ends: Vec<String> =
                [source.value(i), target.value(i)].iter().filter_map(|e| names.get(*e).cloned()).collect();
            out.push(UnitText {
                unit: Unit::Edge,
                id: id.value(i).to_owned(),
                doc_id: doc.value(i).to_owned(),
                text: with_entities(text.value(i), Some(&ends)),
            });
        }
    }
    for batch in chunks {
        let (doc, idx, text) = (
            string_column(batch, col::DOC_ID)?,
            typed::<Int32Array>(batch, col::CHUNK_IDX)?,
            string_column(batch, col::TEXT)?,
        );
        for i in 0..batch.num_rows() {
            out.push(UnitText {
                unit: Unit::Chunk,
                id: chunk_id(doc.value(i), idx.value(i)),
                doc_id: doc.value(i).to_owned(),
                text: text.value(i).to_owned(),
            });
        }
    }
    Ok(out)
}

/// `text` up to the end of its `words`-th word, as written (all of it when it has no more words,
/// or `words` is 0).
fn first_words(text: &str, words: usize) -> &str {
    if words == 0 {
        return text;
    }
    let mut seen = 0;
    let mut in_word = false;
    for (at, c) in text.char_indices() {
        if c.is_whitespace() {
            if in_word {
                seen += 1;
                if seen == words {
                    return &text[..at];
                }
            }
            in_word = false;
        } else {
            in_word = true;
        }
    }
    text
}

/// Relational text followed by the names of its entities (paper §3.2).
fn with_entities(text: &str, names: Option<&Vec<String>>) -> String {
    match names {
        Some(n) if !n.is_empty() => format!("{text}\nEntities: {}", n.join("; ")),
        _ => text.to_owned(),
    }
}

/// Vectors of a bucket's previous embeddings part for `model`, by input hash: a vector is a
/// function of the model and the exact text given to it, whatever unit or id the text had.
fn previous_vectors(index: &Index, bucket: u32, model: &str) -> Result<HashMap<String, Vec<f32>>> {
    let path = index.bucket_path(Table::Embeddings, bucket);
    let mut out = HashMap::new();
    if !path.exists() {
        return Ok(out);
    }
    for batch in read_part(&path, Table::Embeddings)? {
        let (m, sha) = (string_column(&batch, col::MODEL)?, string_column(&batch, col::INPUT_SHA256)?);
        let vectors = typed::<FixedSizeListArray>(&batch, col::EMBEDDING)?;
        for i in 0..batch.num_rows() {
            if m.value(i) != model {
                continue;
            }
            if !out.contains_key(sha.value(i)) {
                out.insert(sha.value(i).to_owned(), vector_at(vectors, i)?);
            }
        }
    }
    Ok(out)
}

/// What [`embed_units`] did with a bucket's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts {
    embedded: u64,
    reused: u64,
    identical: u64,
}

/// Embeds the units that have no vector yet, each distinct text once; returns the batch and
/// its counts.
fn embed_units(
    units: &[UnitText],
    previous: &HashMap<String, Vec<f32>>,
    embedder: &dyn Embedder,
) -> Result<(RecordBatch, Counts)> {
    let hashes: Vec<String> = units.iter().map(|u| sha256_hex(u.text.as_bytes())).collect();
    let mut vectors: Vec<Option<Vec<f32>>> = hashes.iter().map(|h| previous.get(h).cloned()).collect();
    let missing: Vec<usize> = (0..units.len()).filter(|&i| vectors[i].is_none()).collect();
    // Identical texts (a sentence that is both a hyperedge and an edge without entity names, one
    // name with the same summary, …) are embedded once.
    let mut text_of_hash: HashMap<&str, usize> = HashMap::new();
    let mut texts: Vec<&str> = Vec::new();
    let slots: Vec<usize> = missing
        .iter()
        .map(|&i| {
            *text_of_hash.entry(hashes[i].as_str()).or_insert_with(|| {
                texts.push(units[i].text.as_str());
                texts.len() - 1
            })
        })
        .collect();
    let fresh = if texts.is_empty() { Vec::new() } else { embedder.embed(&texts)? };
    if fresh.len() != texts.len() {
        return Err(Error::Internal(format!("embedder returned {} vectors for {} texts", fresh.len(), texts.len())));
    }
    for (&i, &slot) in missing.iter().zip(&slots) {
        vectors[i] = Some(fresh[slot].clone());
    }
    let dim = embedder.dim();
    let mut flat = Vec::with_capacity(units.len() * dim);
    for v in &vectors {
        let v = v.as_ref().ok_or_else(|| Error::Internal("a unit has no vector".into()))?;
        if v.len() != dim {
            return Err(Error::Internal(format!("embedder returned {} values, expected {dim}", v.len())));
        }
        flat.extend_from_slice(v);
    }
    let list = vector_lists(flat, dim)?;
    let batch = RecordBatch::try_new(
        Table::Embeddings.schema_with_widths(&[(col::EMBEDDING, dim)]),
        vec![
            Arc::new(units.iter().map(|u| Some(u.unit.name())).collect::<StringArray>()),
            Arc::new(units.iter().map(|u| Some(u.id.as_str())).collect::<StringArray>()),
            Arc::new(units.iter().map(|u| Some(u.doc_id.as_str())).collect::<StringArray>()),
            Arc::new(StringArray::from(vec![embedder.model(); units.len()])),
            Arc::new(hashes.iter().map(|h| Some(h.as_str())).collect::<StringArray>()),
            Arc::new(list),
        ],
    )?;
    let counts = Counts {
        embedded: missing.len() as u64,
        reused: (units.len() - missing.len()) as u64,
        identical: (missing.len() - texts.len()) as u64,
    };
    Ok((batch, counts))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::models::HashingEmbedder;

    /// The hashing embedder, remembering the texts it was given.
    struct Counting(HashingEmbedder, Mutex<Vec<String>>);

    impl Embedder for Counting {
        fn model(&self) -> &str {
            self.0.model()
        }
        fn engine(&self) -> &'static str {
            self.0.engine()
        }
        fn dim(&self) -> usize {
            self.0.dim()
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
            self.1.lock().unwrap().extend(texts.iter().map(|t| t.to_string()));
            self.0.embed(texts)
        }
    }

    fn unit(unit: Unit, id: &str, text: &str) -> UnitText {
        UnitText { unit, id: id.into(), doc_id: "d".into(), text: text.into() }
    }

    #[test]
    fn summaries_are_cut_after_a_word_as_written() {
        let summary = "The mill  closed in 1911.\nIt burned later. ";
        assert_eq!(first_words(summary, 0), summary);
        assert_eq!(first_words(summary, 2), "The mill");
        assert_eq!(first_words(summary, 5), "The mill  closed in 1911.");
        assert_eq!(first_words(summary, 8), "The mill  closed in 1911.\nIt burned later.");
        assert_eq!(first_words(summary, 9), summary);
        assert_eq!(first_words("  Ünïcode  wörds ", 1), "  Ünïcode");
        assert_eq!(first_words("", 3), "");
    }

    #[test]
    fn identical_texts_are_embedded_once_and_vectors_of_unchanged_texts_reused() {
        let embedder = Counting(HashingEmbedder::new(16), Mutex::default());
        let units = [
            unit(Unit::Hyperedge, "h1", "The mill closed in 1911."),
            unit(Unit::Edge, "e1", "The mill closed in 1911."),
            unit(Unit::Chunk, "c1", "The mill closed in 1911. It burned later."),
            unit(Unit::Hyperedge, "h2", "The mill closed in 1911."),
        ];
        let (batch, counts) = embed_units(&units, &HashMap::new(), &embedder).unwrap();
        assert_eq!(counts, Counts { embedded: 4, reused: 0, identical: 2 });
        assert_eq!(embedder.1.lock().unwrap().len(), 2);
        let vectors = typed::<FixedSizeListArray>(&batch, col::EMBEDDING).unwrap();
        let rows: Vec<Vec<f32>> = (0..4).map(|i| vector_at(vectors, i).unwrap()).collect();
        assert_eq!(rows[0], rows[1]);
        assert_eq!(rows[0], rows[3]);
        assert_eq!(rows[0], embedder.0.embed(&[units[0].text.as_str()]).unwrap()[0]);
        assert_ne!(rows[0], rows[2]);

        // Every unit whose text had a vector keeps it; only the new text is embedded.
        let hashes: Vec<String> = units.iter().map(|u| sha256_hex(u.text.as_bytes())).collect();
        let previous: HashMap<String, Vec<f32>> = [(hashes[0].clone(), rows[0].clone())].into();
        embedder.1.lock().unwrap().clear();
        let (_, counts) = embed_units(&units, &previous, &embedder).unwrap();
        assert_eq!(counts, Counts { embedded: 1, reused: 3, identical: 0 });
        assert_eq!(*embedder.1.lock().unwrap(), [units[2].text.clone()]);
    }

    #[test]
    fn a_rerun_keeps_the_vectors_of_texts_whose_ids_moved() {
        // An edit at the top of a document renumbers every hyperedge after it: their ids change,
        // their texts do not, and only the edited text is embedded again.
        let embedder = Counting(HashingEmbedder::new(16), Mutex::default());
        let before = [
            unit(Unit::Hyperedge, "he-0", "The mill opened in 1850."),
            unit(Unit::Hyperedge, "he-1", "The mill closed in 1911."),
        ];
        let (batch, _) = embed_units(&before, &HashMap::new(), &embedder).unwrap();
        let vectors = typed::<FixedSizeListArray>(&batch, col::EMBEDDING).unwrap();
        let previous: HashMap<String, Vec<f32>> =
            (0..2).map(|i| (sha256_hex(before[i].text.as_bytes()), vector_at(vectors, i).unwrap())).collect();
        let after = [
            unit(Unit::Hyperedge, "he-0", "The mill opened in 1851."),
            unit(Unit::Hyperedge, "he-1", "Its owner was Ada Rusk."),
            unit(Unit::Hyperedge, "he-2", "The mill closed in 1911."),
        ];
        embedder.1.lock().unwrap().clear();
        let (batch, counts) = embed_units(&after, &previous, &embedder).unwrap();
        assert_eq!(counts, Counts { embedded: 2, reused: 1, identical: 0 });
        assert_eq!(*embedder.1.lock().unwrap(), [after[0].text.clone(), after[1].text.clone()]);
        let vectors = typed::<FixedSizeListArray>(&batch, col::EMBEDDING).unwrap();
        assert_eq!(vector_at(vectors, 2).unwrap(), previous[&sha256_hex(after[2].text.as_bytes())]);
    }
}
