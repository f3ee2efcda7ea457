//! One generation of a served index: the query engine over one merged kb and the texts of the
//! documents that kb was built from, loaded together and never changed. A request takes the
//! current generation once and answers wholly from it; an update loads the next one beside it
//! and swaps it in, so no request ever sees a mix of two kbs, and every citation it gives can be
//! read back from the documents of the generation that gave it.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Instant;

use arrow::array::{Array, StringArray};
use flexstruct_pipeline::compose;
use flexstruct_pipeline::config::Config;
use flexstruct_pipeline::core::Result;
use flexstruct_pipeline::core::heap::HeapSize;
use flexstruct_pipeline::io::Index;
use flexstruct_pipeline::io::parquet::{opt_str, read_table, string_column};
use flexstruct_pipeline::query::Engine;
use flexstruct_schemas::{Table, col};

/// A document as a generation holds it.
#[derive(Debug, Clone)]
pub struct Document {
    /// Its id.
    pub doc_id: String,
    /// Its title, when it has one.
    pub title: Option<String>,
    /// Where it was read from, inside its corpus.
    pub source: String,
    /// Its text (Unicode NFC, as ingest stored it; spans count its code points).
    pub text: String,
    /// Code points of the text.
    pub n_chars: usize,
}

impl Document {
    /// The code points `start..end` of the text (clamped to it).
    pub fn span(&self, start: usize, end: usize) -> String {
        self.text.chars().skip(start).take(end.saturating_sub(start)).collect()
    }
}

/// The lookups the graph endpoints need, built on first use.
#[derive(Debug, Default)]
pub struct Lookups {
    /// Entity id → row.
    pub entity: HashMap<String, u32>,
    /// Hyperedge id → row.
    pub hyperedge: HashMap<String, u32>,
    /// Entity row → its aliases.
    pub aliases: Vec<Vec<String>>,
    /// Entity row → the rows of the edges it is an end of.
    pub edges: Vec<Vec<u32>>,
}

/// A kb loaded for queries with its documents.
#[derive(Debug)]
pub struct Generation {
    /// 1 for the kb the server started with, one more for each update.
    pub number: u64,
    /// The query engine over the kb.
    pub engine: Engine,
    /// The documents, sorted by id.
    pub documents: Vec<Document>,
    by_id: HashMap<String, usize>,
    /// When it was loaded (RFC 3339).
    pub loaded_at: String,
    /// Seconds its load took (kb, embedder and documents).
    pub load_seconds: f64,
    lookups: OnceLock<Lookups>,
    memory_counted: MemoryCounted,
}

/// The counts of [`Generation::memory`], each taken once: what they count never changes once
/// it is there (the kb and the documents from the load, the graph lookups and the path index
/// once built), and every scrape of `/metrics` asks for them — counting a kb of millions of rows
/// walks millions of lists.
#[derive(Debug, Default)]
struct MemoryCounted {
    /// The kb's parts and the documents.
    fixed: OnceLock<Vec<(&'static str, usize)>>,
    /// The graph lookups.
    lookups: OnceLock<usize>,
    /// The path index.
    paths: OnceLock<usize>,
}

impl Generation {
    /// Loads the kb of `index` and its documents as generation `number`.
    pub fn load(index: &Index, config: &Config, number: u64) -> Result<Generation> {
        let started = Instant::now();
        let engine = compose::open_engine(index, config)?;
        for note in &engine.kb.notes {
            crate::log(&format!("index {}: {note}", index.root().display()));
        }
        let mut documents = Vec::new();
        for batch in read_table(index, Table::Documents)? {
            let ids = string_column(&batch, col::DOC_ID)?;
            let titles = string_column(&batch, col::TITLE)?;
            let texts = string_column(&batch, col::TEXT)?;
            let sources = string_column(&batch, col::SOURCE)?;
            for i in 0..batch.num_rows() {
                let text = texts.value(i).to_owned();
                documents.push(Document {
                    doc_id: ids.value(i).to_owned(),
                    title: opt_str(titles, i).map(str::to_owned),
                    source: sources.value(i).to_owned(),
                    n_chars: text.chars().count(),
                    text,
                });
            }
        }
        documents.sort_by(|a, b| a.doc_id.cmp(&b.doc_id));
        let by_id = documents.iter().enumerate().map(|(i, d)| (d.doc_id.clone(), i)).collect();
        Ok(Generation {
            number,
            engine,
            documents,
            by_id,
            loaded_at: crate::now(),
            load_seconds: started.elapsed().as_secs_f64(),
            lookups: OnceLock::new(),
            memory_counted: MemoryCounted::default(),
        })
    }

    /// The document `doc_id`.
    pub fn document(&self, doc_id: &str) -> Option<&Document> {
        self.by_id.get(doc_id).map(|&i| &self.documents[i])
    }

    /// The title of `doc_id`, when it has one.
    pub fn title(&self, doc_id: &str) -> Option<&str> {
        self.document(doc_id).and_then(|d| d.title.as_deref())
    }

    /// Rows of each kb table, by name.
    pub fn sizes(&self) -> Vec<(&'static str, usize)> {
        let mut sizes = self.engine.kb.sizes().to_vec();
        sizes.push(("documents", self.documents.len()));
        sizes
    }

    /// Bytes this generation keeps on the heap, by part: the kb's ([`Kb::memory`]), then
    /// `documents` (their texts, ids, titles and sources), `graph lookups` (once a graph endpoint
    /// has built them) and `path index` (once a question of `--mode paths` has read it). The
    /// embedding model (its weights and runtime) is not counted: the indexes share it.
    ///
    /// [`Kb::memory`]: flexstruct_pipeline::query::Kb::memory
    pub fn memory(&self) -> Vec<(&'static str, usize)> {
        let counted = &self.memory_counted;
        let mut parts = counted
            .fixed
            .get_or_init(|| {
                let mut parts = self.engine.kb.memory().to_vec();
                let documents = self.documents.capacity() * size_of::<Document>()
                    + self
                        .documents
                        .iter()
                        .map(|d| d.doc_id.heap_size() + d.title.heap_size() + d.source.heap_size() + d.text.heap_size())
                        .sum::<usize>()
                    + self.by_id.heap_size();
                parts.push(("documents", documents));
                parts
            })
            .clone();
        let lookups = self.lookups.get().map_or(0, |l| {
            *counted.lookups.get_or_init(|| {
                l.entity.heap_size() + l.hyperedge.heap_size() + l.aliases.heap_size() + l.edges.heap_size()
            })
        });
        parts.push(("graph lookups", lookups));
        let paths = self.engine.loaded_path_index().map_or(0, |p| *counted.paths.get_or_init(|| p.heap_size()));
        parts.push(("path index", paths));
        parts
    }

    /// The graph lookups.
    pub fn lookups(&self) -> &Lookups {
        self.lookups.get_or_init(|| {
            let kb = &self.engine.kb;
            let ids = |a: &StringArray| -> HashMap<String, u32> {
                (0..a.len()).map(|r| (a.value(r).to_owned(), r as u32)).collect()
            };
            let mut aliases = vec![Vec::new(); kb.entities.id.len()];
            for (alias, rows) in &kb.by_alias {
                for &r in rows {
                    aliases[r as usize].push(alias.clone());
                }
            }
            aliases.iter_mut().for_each(|a| a.sort());
            let mut edges = vec![Vec::new(); kb.entities.id.len()];
            for (e, ends) in kb.edges.ends.iter().enumerate() {
                for end in ends.iter().flatten() {
                    if !edges[*end as usize].contains(&(e as u32)) {
                        edges[*end as usize].push(e as u32);
                    }
                }
            }
            Lookups { entity: ids(&kb.entities.id), hyperedge: ids(&kb.hyperedges.id), aliases, edges }
        })
    }
}
