//! The merged knowledge base in memory: every `kb/` table read once (in parallel), its vectors
//! as one contiguous buffer per table, and the lookups retrieval needs (names, aliases,
//! incidence, cluster membership) as row numbers.

use std::collections::HashMap;

use arrow::array::{Array, AsArray, FixedSizeListArray, Int32Array, Int64Array, RecordBatch, StringArray, UInt32Array};
use arrow::datatypes::Float32Type;
use flexstruct_schemas::{Table, col};
use rayon::prelude::*;

use super::lexical::Lexical;
use super::scan::Vectors;
use crate::core::names::normalize;
use crate::core::units::Unit;
use crate::core::{Error, IndexProblem, Result};
use crate::io::Index;
use crate::io::lock::{self, LockName};
use crate::io::parquet::{one_merge_fingerprint, read_columns, read_part_columns, read_table, string_column, typed};

/// A code-point span of a document (end-exclusive).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Span {
    /// Document.
    pub doc_id: String,
    /// First code point.
    pub start: i64,
    /// One past the last code point.
    pub end: i64,
}

/// `kb/entities`.
#[derive(Debug, Clone)]
pub struct Entities {
    /// Entity ids.
    pub id: StringArray,
    /// Documents.
    pub doc_id: StringArray,
    /// Names.
    pub name: StringArray,
    /// Normalised names (the keys of [`Kb::by_name`]).
    pub norm_name: StringArray,
    /// Summaries.
    pub summary: StringArray,
    /// Vectors of name + summary.
    pub vectors: Vectors,
}

/// `kb/hyperedges`.
#[derive(Debug, Clone)]
pub struct Hyperedges {
    /// Hyperedge ids.
    pub id: StringArray,
    /// Documents.
    pub doc_id: StringArray,
    /// Extraction order within the document.
    pub item_idx: Int32Array,
    /// Relational text.
    pub text: StringArray,
    /// Verbatim source span text.
    pub ref_text: StringArray,
    /// Span start (null when the span was not located).
    pub ref_start: Int64Array,
    /// Span end.
    pub ref_end: Int64Array,
    /// Vectors of text + entity names.
    pub vectors: Vectors,
}

impl Hyperedges {
    /// Sorts hyperedge rows by document, then by their order in it.
    fn sort_in_reading_order(&self, rows: &mut [u32]) {
        rows.sort_by_key(|&h| (self.doc_id.value(h as usize), self.item_idx.value(h as usize)));
    }

    /// The located source span of a row.
    pub fn span(&self, row: usize) -> Option<Span> {
        (self.ref_start.is_valid(row) && self.ref_end.is_valid(row)).then(|| Span {
            doc_id: self.doc_id.value(row).to_owned(),
            start: self.ref_start.value(row),
            end: self.ref_end.value(row),
        })
    }
}

/// `kb/edges`.
#[derive(Debug, Clone)]
pub struct Edges {
    /// Edge ids.
    pub id: StringArray,
    /// Documents.
    pub doc_id: StringArray,
    /// Relation text.
    pub text: StringArray,
    /// Row of the hyperedge that supports the edge.
    pub hyperedge: Vec<Option<u32>>,
    /// Entity rows of the source and the target (None: not in the kb).
    pub ends: Vec<[Option<u32>; 2]>,
    /// Vectors of text + the two entity names.
    pub vectors: Vectors,
}

/// `kb/chunks`.
#[derive(Debug, Clone)]
pub struct Chunks {
    /// Documents.
    pub doc_id: StringArray,
    /// Chunk number within the document.
    pub chunk_idx: Int32Array,
    /// Text.
    pub text: StringArray,
    /// Span start in the document.
    pub char_start: Int64Array,
    /// Span end.
    pub char_end: Int64Array,
    /// Vectors of the text.
    pub vectors: Vectors,
}

/// `kb/clusters` with their members.
#[derive(Debug, Clone)]
pub struct Clusters {
    /// Cluster ids.
    pub id: StringArray,
    /// Documents.
    pub doc_id: StringArray,
    /// Concatenated member spans.
    pub text: StringArray,
    /// Hyperedge rows of each cluster, in extraction order.
    pub members: Vec<Vec<u32>>,
}

/// The whole knowledge base, ready for retrieval.
#[derive(Debug, Clone)]
pub struct Kb {
    /// Embedding model of every vector.
    pub model: String,
    /// Entities.
    pub entities: Entities,
    /// Hyperedges.
    pub hyperedges: Hyperedges,
    /// Edges.
    pub edges: Edges,
    /// Chunks.
    pub chunks: Chunks,
    /// Clusters.
    pub clusters: Clusters,
    /// Normalised name → entity rows.
    pub by_name: HashMap<String, Vec<u32>>,
    /// Alias (from aliases and summaries, not names) → entity rows.
    pub by_alias: HashMap<String, Vec<u32>>,
    /// Normalised document title → the hyperedge rows of the document(s) with that title, in
    /// reading order (an entity's own article, where documents are about one entity each).
    pub by_title: HashMap<String, Vec<u32>>,
    /// Entity row → incident hyperedge rows (extraction order).
    pub entity_hyperedges: Vec<Vec<u32>>,
    /// Hyperedge row → incident entity rows.
    pub hyperedge_entities: Vec<Vec<u32>>,
    /// Hyperedge row → cluster rows.
    pub hyperedge_clusters: Vec<Vec<u32>>,
    /// Hyperedge row → the chunk row its span lies in (None: no located span).
    pub hyperedge_chunk: Vec<Option<u32>>,
    /// Chunk row → whether a located hyperedge lies in it.
    pub chunk_has_hyperedges: Vec<bool>,
    /// BM25 over the hyperedges (row for row): each one's text and the names of its entities.
    pub lexical: Lexical,
    /// The similarity thresholds the merge derived from the kb's own vectors (`kb/thresholds`),
    /// by unit; empty for a kb merged before they existed.
    pub derived_thresholds: HashMap<Unit, f32>,
    /// The kb's identity: the fingerprint of all its parts (what the path index records).
    pub fingerprint: String,
}

/// The chunk each hyperedge's span starts in (chunks tile their document, so it is the chunk of
/// the same document whose range holds `ref_start`), and for each chunk whether one does.
pub(super) fn chunk_links(hyperedges: &Hyperedges, chunks: &Chunks) -> (Vec<Option<u32>>, Vec<bool>) {
    let hyperedge_chunk = hyperedge_chunks(hyperedges, chunks);
    let mut chunk_has_hyperedges = vec![false; chunks.doc_id.len()];
    for &c in hyperedge_chunk.iter().flatten() {
        chunk_has_hyperedges[c as usize] = true;
    }
    (hyperedge_chunk, chunk_has_hyperedges)
}

fn hyperedge_chunks(hyperedges: &Hyperedges, chunks: &Chunks) -> Vec<Option<u32>> {
    let mut by_doc: HashMap<&str, Vec<(i64, i64, u32)>> = HashMap::new();
    for row in 0..chunks.doc_id.len() {
        let range = (chunks.char_start.value(row), chunks.char_end.value(row), row as u32);
        by_doc.entry(chunks.doc_id.value(row)).or_default().push(range);
    }
    for ranges in by_doc.values_mut() {
        ranges.sort_unstable();
    }
    (0..hyperedges.id.len())
        .map(|h| {
            let span = hyperedges.span(h)?;
            let ranges = by_doc.get(span.doc_id.as_str())?;
            let i = ranges.partition_point(|r| r.0 <= span.start).checked_sub(1)?;
            (span.start < ranges[i].1).then_some(ranges[i].2)
        })
        .collect()
}

/// The lexical index of the hyperedges: each one's text with the names of its entities (as its
/// vector embeds them).
pub(super) fn lexical_index(hyperedges: &Hyperedges, incidence: &[Vec<u32>], entities: &Entities) -> Lexical {
    let texts: Vec<String> = (0..hyperedges.id.len())
        .into_par_iter()
        .map(|h| {
            let mut text = hyperedges.text.value(h).to_owned();
            for &e in &incidence[h] {
                text.push(' ');
                text.push_str(entities.name.value(e as usize));
            }
            text
        })
        .collect();
    Lexical::build(texts.par_iter().map(String::as_str))
}

/// The kb tables the query stage reads.
const TABLES: [Table; 8] = [
    Table::KbEntities,
    Table::KbHyperedges,
    Table::KbEdges,
    Table::KbChunks,
    Table::KbClusters,
    Table::KbClusterMembers,
    Table::KbHyperedgeEntities,
    Table::KbAliases,
];

/// The hyperedges of each titled document, by normalised title.
fn titled_hyperedges(index: &Index, hyperedges: &Hyperedges) -> Result<HashMap<String, Vec<u32>>> {
    let mut title_of: HashMap<String, String> = HashMap::new();
    for batch in read_columns(index, Table::Documents, &[col::DOC_ID, col::TITLE])? {
        let (doc, title) = (string_column(&batch, col::DOC_ID)?, string_column(&batch, col::TITLE)?);
        for i in (0..batch.num_rows()).filter(|&i| title.is_valid(i)) {
            let key = normalize(title.value(i));
            if !key.is_empty() {
                title_of.insert(doc.value(i).to_owned(), key);
            }
        }
    }
    let mut by_title: HashMap<String, Vec<u32>> = HashMap::new();
    for (row, doc) in hyperedges.doc_id.iter().enumerate() {
        if let Some(title) = doc.and_then(|d| title_of.get(d)) {
            by_title.entry(title.clone()).or_default().push(row as u32);
        }
    }
    for rows in by_title.values_mut() {
        hyperedges.sort_in_reading_order(rows);
    }
    Ok(by_title)
}

/// The thresholds `kb/thresholds` holds for `model` (none for a kb merged before it existed).
fn read_thresholds(index: &Index, model: &str) -> Result<HashMap<Unit, f32>> {
    let path = index.kb_part(Table::KbThresholds);
    if !path.is_file() {
        return Ok(HashMap::new());
    }
    let mut out = HashMap::new();
    for batch in crate::io::parquet::read_part(&path, Table::KbThresholds)? {
        let (units, models) = (string_column(&batch, col::UNIT)?, string_column(&batch, col::MODEL)?);
        let taus = typed::<arrow::array::Float64Array>(&batch, col::TAU)?;
        for i in (0..batch.num_rows()).filter(|&i| models.value(i) == model) {
            if let Some(unit) = Unit::from_name(units.value(i)) {
                out.insert(unit, taus.value(i) as f32);
            }
        }
    }
    Ok(out)
}

/// The kb's rows in the order one merge of the whole index writes them (by document, then
/// position), whatever buckets they were read from: ties between equally scored rows are broken
/// by this order, so answers do not depend on the bucket count.
fn in_merge_order(table: Table, batch: RecordBatch) -> Result<RecordBatch> {
    if merge_keys(table).is_empty() {
        return Ok(batch);
    }
    let order = merge_order(table, &batch)?;
    Ok(arrow::compute::take_record_batch(&batch, &order)?)
}

/// The sort keys of [`in_merge_order`] (none for a table it leaves as read).
fn merge_keys(table: Table) -> &'static [&'static str] {
    match table {
        Table::KbEntities => &[col::DOC_ID, col::ENTITY_ID],
        Table::KbHyperedges => &[col::DOC_ID, col::ITEM_IDX],
        Table::KbEdges => &[col::DOC_ID, col::EDGE_ID],
        Table::KbChunks => &[col::DOC_ID, col::CHUNK_IDX],
        Table::KbHyperedgeEntities => &[col::DOC_ID, col::HYPEREDGE_ID, col::ENTITY_ID],
        Table::KbClusters => &[col::DOC_ID, col::CLUSTER_ID],
        Table::KbClusterMembers => &[col::DOC_ID, col::CLUSTER_ID, col::HYPEREDGE_ID],
        Table::KbAliases => &[col::ALIAS, col::DOC_ID, col::ENTITY_ID, col::ORIGIN],
        _ => &[],
    }
}

/// The row numbers of `batch` in merge order ([`in_merge_order`]).
fn merge_order(table: Table, batch: &RecordBatch) -> Result<UInt32Array> {
    let columns = merge_keys(table)
        .iter()
        .map(|k| {
            let column = batch
                .column_by_name(k)
                .ok_or_else(|| Error::Internal(format!("kb table {table} has no column {k}")))?;
            Ok(arrow::compute::SortColumn { values: column.clone(), options: None })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(arrow::compute::lexsort_to_indices(&columns, None)?)
}

pub(super) fn one_batch(table: Table, batches: Vec<RecordBatch>) -> Result<RecordBatch> {
    match batches.first() {
        None => Ok(RecordBatch::new_empty(table.schema())),
        Some(first) => Ok(arrow::compute::concat_batches(&first.schema(), &batches)?),
    }
}

/// One kb table as the query stage holds it: its rows in merge order and, for a table with an
/// embedding column, that column as one contiguous buffer ([`Vectors`]; empty otherwise).
struct Loaded {
    batch: RecordBatch,
    vectors: Vectors,
}

/// The vectors of a table being copied to their places ([`load_table`]).
struct Placed {
    /// rows × dim, allocated at the first vectors seen.
    values: Vec<f32>,
    rows: usize,
    dim: usize,
    /// Vectors seen, null or not.
    seen: usize,
    /// Rows without a vector or a model.
    missing: usize,
}

impl Placed {
    /// Copies the vectors of `list` to rows `places[0]`, `places[1]`, …; a null vector counts as
    /// missing unless its row was already counted (`has_model` false).
    fn copy(
        &mut self,
        list: &FixedSizeListArray,
        places: &[usize],
        has_model: impl Fn(usize) -> bool,
    ) -> std::result::Result<(), String> {
        let width = list.value_length() as usize;
        if self.values.is_empty() {
            (self.dim, self.values) = (width, vec![0f32; self.rows * width]);
        } else if width != self.dim {
            return Err(format!("vectors of {} and of {width} dimensions", self.dim));
        }
        if list.len() > places.len() {
            return Err("more vectors than rows: the table changed while it was read".into());
        }
        self.seen += list.len();
        let floats = list.values().as_primitive::<Float32Type>().values();
        for (i, &at) in places.iter().take(list.len()).enumerate() {
            if list.is_null(i) {
                self.missing += usize::from(has_model(at));
            } else {
                let from = list.value_offset(i) as usize;
                self.values[at * width..(at + 1) * width].copy_from_slice(&floats[from..from + width]);
            }
        }
        Ok(())
    }
}

/// Reads one kb table ([`Loaded`]). The vectors, most of a kb's bytes, are never held twice: the
/// other columns are read and put in merge order first, then each part's embedding column is
/// decoded on its own and its rows copied straight to their places in the one buffer — so a kb
/// of millions of vectors loads in little more memory than it then takes. Every row must have a
/// vector of `model`.
fn load_table(index: &Index, table: Table, model: &str) -> Result<Loaded> {
    let schema = table.schema();
    if schema.column_with_name(col::EMBEDDING).is_none() {
        let batch = in_merge_order(table, one_batch(table, read_table(index, table)?)?)?;
        return Ok(Loaded { batch, vectors: Vectors::default() });
    }
    let others: Vec<&str> =
        schema.fields().iter().map(|f| f.name().as_str()).filter(|&name| name != col::EMBEDDING).collect();
    // Parts are decoded in parallel; each part's rows are numbered on from the previous part's.
    let parts = index.parts(table)?;
    let read: Vec<Vec<RecordBatch>> =
        parts.par_iter().map(|part| read_part_columns(part, table, &others)).collect::<Result<_>>()?;
    let firsts: Vec<usize> = read
        .iter()
        .scan(0, |row, batches| {
            let first = *row;
            *row += batches.iter().map(RecordBatch::num_rows).sum::<usize>();
            Some(first)
        })
        .collect();
    let read: Vec<RecordBatch> = read.into_iter().flatten().collect();
    let batch = match read.first() {
        None => return Ok(Loaded { batch: RecordBatch::new_empty(schema), vectors: Vectors::default() }),
        Some(first) => arrow::compute::concat_batches(&first.schema(), &read)?,
    };
    drop(read);
    let order = merge_order(table, &batch)?;
    let batch = arrow::compute::take_record_batch(&batch, &order)?;
    let models = string_column(&batch, col::MODEL)?;
    if let Some(other) = models.iter().flatten().find(|m| *m != model) {
        let problem = IndexProblem::ModelMismatch {
            table: table.to_string(),
            found: other.to_owned(),
            configured: model.to_owned(),
        };
        return Err(Error::index(index.root(), problem));
    }
    // Where each row, numbered as read, goes.
    let mut place = vec![0usize; batch.num_rows()];
    for (rank, &row) in order.values().iter().enumerate() {
        place[row as usize] = rank;
    }
    let placed = std::sync::Mutex::new(Placed {
        values: Vec::new(),
        rows: place.len(),
        dim: 0,
        seen: 0,
        missing: models.null_count(),
    });
    parts.par_iter().zip(&firsts).try_for_each(|(part, &first)| {
        let vectors = read_part_columns(part, table, &[col::EMBEDDING])?;
        let mut placed = placed.lock().map_err(|_| Error::Internal("a vector copy panicked".into()))?;
        let mut row = first;
        for vectors in &vectors {
            let list = typed::<FixedSizeListArray>(vectors, col::EMBEDDING)?;
            placed
                .copy(list, &place[row.min(place.len())..], |i| models.is_valid(i))
                .map_err(|problem| Error::Internal(format!("{table}: {problem} ({})", part.display())))?;
            row += list.len();
        }
        Ok::<_, Error>(())
    })?;
    let Placed { values, dim, seen, missing, .. } =
        placed.into_inner().map_err(|_| Error::Internal("a vector copy panicked".into()))?;
    if seen != place.len() {
        return Err(Error::Internal(format!(
            "{table}: {seen} vectors for {} rows: it changed while it was read",
            place.len()
        )));
    }
    if missing > 0 {
        let problem = IndexProblem::MissingVectors {
            table: table.to_string(),
            missing,
            rows: batch.num_rows(),
            model: model.to_owned(),
        };
        return Err(Error::index(index.root(), problem));
    }
    Ok(Loaded { batch, vectors: Vectors::new(dim, values.into()) })
}

/// Row of every id of a string column.
fn rows_by_id(ids: &StringArray) -> HashMap<&str, u32> {
    ids.iter().enumerate().filter_map(|(i, id)| id.map(|id| (id, i as u32))).collect()
}

impl Kb {
    /// Reads the kb of `index`, whose vectors must all be of embedding model `model`.
    pub fn load(index: &Index, model: &str) -> Result<Kb> {
        // Shared with other readers; a merge writing the kb holds it exclusively.
        let _lock = lock::shared(index, LockName::Kb)?;
        let mut missing = Vec::new();
        for table in TABLES.into_iter().chain([Table::KbThresholds]) {
            if index.parts(table)?.is_empty() {
                missing.push(table);
            }
        }
        if missing.len() == TABLES.len() + 1 {
            return Err(Error::index(index.root(), IndexProblem::NoKb));
        }
        if !missing.is_empty() {
            let missing = missing.iter().map(|t| t.dir().to_owned()).collect();
            return Err(Error::index(index.root(), IndexProblem::IncompleteKb { missing }));
        }
        let fingerprint = one_merge_fingerprint(index)?;
        let derived_thresholds = read_thresholds(index, model)?;
        let loaded: Vec<Loaded> = TABLES.par_iter().map(|t| load_table(index, *t, model)).collect::<Result<_>>()?;
        let (batches, vectors): (Vec<RecordBatch>, Vec<Vectors>) =
            loaded.into_iter().map(|t| (t.batch, t.vectors)).unzip();
        let (
            [entities, hyperedges, edges, chunks, clusters, members, incidence, aliases],
            [entity_vectors, hyperedge_vectors, edge_vectors, chunk_vectors, ..],
        ) = (&batches[..], &vectors[..])
        else {
            return Err(Error::Internal("kb tables were not all read".into()));
        };
        let entities = Entities {
            id: string_column(entities, col::ENTITY_ID)?.clone(),
            doc_id: string_column(entities, col::DOC_ID)?.clone(),
            name: string_column(entities, col::NAME)?.clone(),
            norm_name: string_column(entities, col::NORM_NAME)?.clone(),
            summary: string_column(entities, col::SUMMARY)?.clone(),
            vectors: entity_vectors.clone(),
        };
        let hyperedges = Hyperedges {
            id: string_column(hyperedges, col::HYPEREDGE_ID)?.clone(),
            doc_id: string_column(hyperedges, col::DOC_ID)?.clone(),
            item_idx: typed::<Int32Array>(hyperedges, col::ITEM_IDX)?.clone(),
            text: string_column(hyperedges, col::TEXT)?.clone(),
            ref_text: string_column(hyperedges, col::REF_TEXT)?.clone(),
            ref_start: typed::<Int64Array>(hyperedges, col::REF_START)?.clone(),
            ref_end: typed::<Int64Array>(hyperedges, col::REF_END)?.clone(),
            vectors: hyperedge_vectors.clone(),
        };
        let entity_row = rows_by_id(&entities.id);
        let hyperedge_row = rows_by_id(&hyperedges.id);

        let edge_hyperedges = string_column(edges, col::HYPEREDGE_ID)?;
        let edges = Edges {
            id: string_column(edges, col::EDGE_ID)?.clone(),
            doc_id: string_column(edges, col::DOC_ID)?.clone(),
            text: string_column(edges, col::TEXT)?.clone(),
            hyperedge: edge_hyperedges.iter().map(|h| h.and_then(|h| hyperedge_row.get(h).copied())).collect(),
            ends: {
                let (source, target) = (string_column(edges, col::SOURCE_ID)?, string_column(edges, col::TARGET_ID)?);
                (0..edges.num_rows())
                    .map(|i| [entity_row.get(source.value(i)).copied(), entity_row.get(target.value(i)).copied()])
                    .collect()
            },
            vectors: edge_vectors.clone(),
        };
        let chunks = Chunks {
            doc_id: string_column(chunks, col::DOC_ID)?.clone(),
            chunk_idx: typed::<Int32Array>(chunks, col::CHUNK_IDX)?.clone(),
            text: string_column(chunks, col::TEXT)?.clone(),
            char_start: typed::<Int64Array>(chunks, col::CHAR_START)?.clone(),
            char_end: typed::<Int64Array>(chunks, col::CHAR_END)?.clone(),
            vectors: chunk_vectors.clone(),
        };

        let cluster_ids = string_column(clusters, col::CLUSTER_ID)?;
        let cluster_row = rows_by_id(cluster_ids);
        let mut cluster_members = vec![Vec::new(); clusters.num_rows()];
        let mut hyperedge_clusters = vec![Vec::new(); hyperedges.id.len()];
        let (member_cluster, member_hyperedge) =
            (string_column(members, col::CLUSTER_ID)?, string_column(members, col::HYPEREDGE_ID)?);
        for i in 0..members.num_rows() {
            if let (Some(&c), Some(&h)) =
                (cluster_row.get(member_cluster.value(i)), hyperedge_row.get(member_hyperedge.value(i)))
            {
                cluster_members[c as usize].push(h);
                hyperedge_clusters[h as usize].push(c);
            }
        }
        for m in &mut cluster_members {
            m.sort_by_key(|&h| hyperedges.item_idx.value(h as usize));
        }
        let clusters = Clusters {
            id: cluster_ids.clone(),
            doc_id: string_column(clusters, col::DOC_ID)?.clone(),
            text: string_column(clusters, col::TEXT)?.clone(),
            members: cluster_members,
        };

        let mut entity_hyperedges = vec![Vec::new(); entities.id.len()];
        let mut hyperedge_entities = vec![Vec::new(); hyperedges.id.len()];
        let (inc_h, inc_e) = (string_column(incidence, col::HYPEREDGE_ID)?, string_column(incidence, col::ENTITY_ID)?);
        for i in 0..incidence.num_rows() {
            if let (Some(&h), Some(&e)) = (hyperedge_row.get(inc_h.value(i)), entity_row.get(inc_e.value(i))) {
                entity_hyperedges[e as usize].push(h);
                hyperedge_entities[h as usize].push(e);
            }
        }
        for list in &mut entity_hyperedges {
            hyperedges.sort_in_reading_order(list);
        }

        let mut by_name: HashMap<String, Vec<u32>> = HashMap::new();
        for (i, name) in entities.norm_name.iter().enumerate() {
            by_name.entry(name.unwrap_or_default().to_owned()).or_default().push(i as u32);
        }
        let mut by_alias: HashMap<String, Vec<u32>> = HashMap::new();
        let (alias, alias_entity, origin) = (
            string_column(aliases, col::ALIAS)?,
            string_column(aliases, col::ENTITY_ID)?,
            string_column(aliases, col::ORIGIN)?,
        );
        for i in 0..aliases.num_rows() {
            if origin.value(i) != "name"
                && let Some(&e) = entity_row.get(alias_entity.value(i))
            {
                let rows = by_alias.entry(alias.value(i).to_owned()).or_default();
                if !rows.contains(&e) {
                    rows.push(e);
                }
            }
        }
        let by_title = titled_hyperedges(index, &hyperedges)?;
        let (hyperedge_chunk, chunk_has_hyperedges) = chunk_links(&hyperedges, &chunks);
        let lexical = lexical_index(&hyperedges, &hyperedge_entities, &entities);
        Ok(Kb {
            model: model.to_owned(),
            entities,
            hyperedges,
            edges,
            chunks,
            clusters,
            by_name,
            by_alias,
            by_title,
            entity_hyperedges,
            hyperedge_entities,
            hyperedge_clusters,
            hyperedge_chunk,
            chunk_has_hyperedges,
            lexical,
            derived_thresholds,
            fingerprint,
        })
    }

    /// Rows of each kind, for reports.
    pub fn sizes(&self) -> [(&'static str, usize); 5] {
        [
            ("entities", self.entities.id.len()),
            ("hyperedges", self.hyperedges.id.len()),
            ("edges", self.edges.id.len()),
            ("clusters", self.clusters.id.len()),
            ("chunks", self.chunks.doc_id.len()),
        ]
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Float32Array, new_null_array};
    use arrow::datatypes::{DataType, Field};

    use super::*;
    use crate::io::parquet::write_part;

    /// A row: document, position, model, vector (or none).
    type Row<'a> = (&'a str, i32, &'a str, Option<[f32; 2]>);

    /// A `kb/hyperedges` part of `rows`, the other columns null.
    fn part(rows: &[Row<'_>]) -> RecordBatch {
        let schema = Table::KbHyperedges.schema();
        let inner = Arc::new(Field::new("item", DataType::Float32, false));
        let columns = schema
            .fields()
            .iter()
            .map(|field| -> ArrayRef {
                let strings =
                    |f: &dyn Fn(usize) -> String| Arc::new(StringArray::from_iter_values((0..rows.len()).map(f)));
                match field.name().as_str() {
                    col::HYPEREDGE_ID => strings(&|i| format!("h-{}-{}", rows[i].0, rows[i].1)),
                    col::DOC_ID => strings(&|i| rows[i].0.to_owned()),
                    col::MODEL => strings(&|i| rows[i].2.to_owned()),
                    col::TEXT | col::REF_TEXT | col::BACKEND => strings(&|_| String::new()),
                    col::ITEM_IDX => Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.1))),
                    col::EMBEDDING => {
                        let values: Vec<f32> = rows.iter().flat_map(|r| r.3.unwrap_or_default()).collect();
                        let nulls = rows.iter().map(|r| r.3.is_some()).collect::<Vec<_>>();
                        let values = Arc::new(Float32Array::from(values));
                        Arc::new(FixedSizeListArray::new(inner.clone(), 2, values, Some(nulls.into())))
                    }
                    _ => new_null_array(field.data_type(), rows.len()),
                }
            })
            .collect();
        let schema = Arc::new(arrow::datatypes::Schema::new(
            schema
                .fields()
                .iter()
                .map(|f| match f.name().as_str() {
                    col::EMBEDDING => Field::new(col::EMBEDDING, DataType::FixedSizeList(inner.clone(), 2), true),
                    _ => f.as_ref().clone(),
                })
                .collect::<Vec<_>>(),
        ));
        RecordBatch::try_new(schema, columns).unwrap()
    }

    fn index_of(parts: &[Vec<Row<'_>>]) -> (tempfile::TempDir, Index) {
        let tmp = tempfile::tempdir().unwrap();
        let index = Index::open_or_create(tmp.path(), Some(4)).unwrap();
        for (bucket, rows) in parts.iter().enumerate() {
            let path = index.bucket_path(Table::KbHyperedges, bucket as u32);
            write_part(&path, Table::KbHyperedges, "f", &[part(rows)]).unwrap();
        }
        (tmp, index)
    }

    #[test]
    fn vectors_are_placed_with_their_rows_in_merge_order() {
        let (_tmp, index) = index_of(&[
            vec![("b", 1, "m", Some([1.0, 1.0])), ("a", 2, "m", Some([2.0, 2.0]))],
            vec![("b", 0, "m", Some([3.0, 3.0])), ("a", 0, "m", Some([4.0, 4.0]))],
        ]);
        let loaded = load_table(&index, Table::KbHyperedges, "m").unwrap();
        let ids: Vec<&str> = string_column(&loaded.batch, col::HYPEREDGE_ID).unwrap().iter().flatten().collect();
        assert_eq!(ids, ["h-a-0", "h-a-2", "h-b-0", "h-b-1"]);
        assert_eq!(loaded.vectors.values(), [4.0, 4.0, 2.0, 2.0, 3.0, 3.0, 1.0, 1.0]);
        assert_eq!(loaded.vectors.dim(), 2);
    }

    #[test]
    fn rows_without_a_vector_of_the_model_are_refused() {
        let (_tmp, index) = index_of(&[vec![("a", 0, "m", Some([1.0, 0.0])), ("a", 1, "m", None)]]);
        let missing = load_table(&index, Table::KbHyperedges, "m").err().unwrap().index_problem().unwrap().to_string();
        assert!(missing.contains("1 of 2 rows of kb/hyperedges have no vector of embedding model `m`"), "{missing}");
        let (_tmp, index) =
            index_of(&[vec![("a", 0, "m", Some([1.0, 0.0]))], vec![("b", 0, "other", Some([0.0, 1.0]))]]);
        let other = load_table(&index, Table::KbHyperedges, "m").err().unwrap().index_problem().unwrap().to_string();
        assert!(other.contains("built with embedding model `other` (kb/hyperedges)"), "{other}");
    }
}
