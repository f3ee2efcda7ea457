//! The merged knowledge base in memory: every `kb/` table read once (in parallel), its vectors
//! as one contiguous buffer per table, and the lookups retrieval needs (names, aliases,
//! incidence, cluster membership) as row numbers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, Int32Array, Int64Array, RecordBatch, StringArray};
use flexstruct_schemas::{Table, col};
use rayon::prelude::*;

use super::config::Precision;
use super::lexical::Lexical;
use super::scan::Vectors;
use crate::core::heap::{HeapSize, arrow_size};
use crate::core::models::{calibrated_thresholds, usable_threshold};
use crate::core::names::normalize;
use crate::core::units::Unit;
use crate::core::{Error, IndexProblem, Result};
use crate::io::Index;
use crate::io::ann::{AnnConfig, AnnRead, read_ann};
use crate::io::kb::read_kb_table;
use crate::io::lock::{self, LockName};
use crate::io::parquet::{one_merge_fingerprint, read_columns, string_column, typed};

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
    /// Sorts hyperedge rows by document, then by their order in it: row order, as the kb is
    /// read in merge order (by document, then extraction order).
    fn sort_in_reading_order(rows: &mut [u32]) {
        rows.sort_unstable();
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
    /// Where its load's time went.
    pub load_times: LoadTimes,
    /// How each table of at least `[ann] min_rows` rows is searched (`kb/entities: approximate
    /// …`, or exact and why); empty when every table is scanned exactly.
    pub searches: Vec<String>,
    /// What the load found damaged and went around (a vector file whose floats do not match
    /// their checksum: read from Parquet; a damaged approximate index: scanned exactly).
    pub notes: Vec<String>,
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

/// The kb tables the query stage reads, with the columns it keeps of each (Parquet decodes
/// nothing else: the entities' alias lists alone, unused here, took seconds at millions of rows).
const TABLES: [(Table, &[&str]); 8] = [
    (Table::KbEntities, &[col::ENTITY_ID, col::DOC_ID, col::NAME, col::NORM_NAME, col::SUMMARY]),
    (
        Table::KbHyperedges,
        &[col::HYPEREDGE_ID, col::DOC_ID, col::ITEM_IDX, col::TEXT, col::REF_TEXT, col::REF_START, col::REF_END],
    ),
    (Table::KbEdges, &[col::EDGE_ID, col::DOC_ID, col::TEXT, col::HYPEREDGE_ID, col::SOURCE_ID, col::TARGET_ID]),
    (Table::KbChunks, &[col::DOC_ID, col::CHUNK_IDX, col::TEXT, col::CHAR_START, col::CHAR_END]),
    (Table::KbClusters, &[col::CLUSTER_ID, col::DOC_ID, col::TEXT]),
    (Table::KbClusterMembers, &[col::CLUSTER_ID, col::HYPEREDGE_ID]),
    (Table::KbHyperedgeEntities, &[col::HYPEREDGE_ID, col::ENTITY_ID]),
    (Table::KbAliases, &[col::ALIAS, col::ENTITY_ID, col::ORIGIN]),
];

/// Where a kb load's time went, in seconds: the tables read (in parallel), the lookups built
/// from them, the lexical index.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct LoadTimes {
    /// Reading the tables and their vectors.
    pub tables: f64,
    /// Row lookups: ids, names, aliases, titles, incidence, membership, chunks.
    pub lookups: f64,
    /// The BM25 index.
    pub lexical: f64,
}

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
        Hyperedges::sort_in_reading_order(rows);
    }
    Ok(by_title)
}

/// The thresholds `kb/thresholds` holds for `model` (none for a kb merged before it existed), each
/// as a query uses it: one derived from too few pairs no higher than the model's default
/// ([`usable_threshold`]).
fn read_thresholds(index: &Index, model: &str) -> Result<HashMap<Unit, f32>> {
    let path = index.kb_part(Table::KbThresholds);
    if !path.is_file() {
        return Ok(HashMap::new());
    }
    let mut out = HashMap::new();
    for batch in crate::io::parquet::read_part(&path, Table::KbThresholds)? {
        let (units, models) = (string_column(&batch, col::UNIT)?, string_column(&batch, col::MODEL)?);
        let taus = typed::<arrow::array::Float64Array>(&batch, col::TAU)?;
        let pairs = typed::<Int64Array>(&batch, col::PAIRS)?;
        let defaults = calibrated_thresholds(model);
        for i in (0..batch.num_rows()).filter(|&i| models.value(i) == model) {
            let Some(unit) = Unit::from_name(units.value(i)) else { continue };
            let default = match unit {
                Unit::Edge => defaults.edge,
                Unit::Chunk => defaults.chunk,
                _ => defaults.hyperedge,
            };
            let pairs = usize::try_from(pairs.value(i)).unwrap_or(0);
            out.insert(unit, usable_threshold(taus.value(i) as f32, pairs, default));
        }
    }
    Ok(out)
}

/// Reads `columns` of one kb table, rows in merge order, with its vectors as [`Vectors`] (from
/// the kb's vector file when it is current, see [`crate::io::kb`]).
fn load_table(
    index: &Index,
    (table, columns): (Table, &[&str]),
    vectors: (&str, Precision),
    kb: &str,
) -> Result<(RecordBatch, Vectors, Option<String>)> {
    let read = read_kb_table(index, table, columns, vectors, Some(kb))?;
    Ok((read.batch, Vectors::new(read.dim, read.vectors), read.note))
}

/// Row by id: built and probed millions of times at a load, with a fast hasher (ids come from
/// the kb, not from a client that could choose colliding keys).
type IdRows<'a> = foldhash::HashMap<&'a str, u32>;

/// Row of every id of a string column.
fn rows_by_id(ids: &StringArray) -> IdRows<'_> {
    let mut rows = IdRows::with_capacity_and_hasher(ids.len(), foldhash::fast::RandomState::default());
    rows.extend(ids.iter().enumerate().filter_map(|(i, id)| id.map(|id| (id, i as u32))));
    rows
}

/// Entity rows and hyperedge rows by id.
type RowsById<'a, 'b> = (&'a IdRows<'b>, &'a IdRows<'b>);

/// `kb/edges` with the rows of their hyperedges and ends.
fn edges_of(edges: &RecordBatch, vectors: &Vectors, (entity_row, hyperedge_row): RowsById<'_, '_>) -> Result<Edges> {
    let (source, target) = (string_column(edges, col::SOURCE_ID)?, string_column(edges, col::TARGET_ID)?);
    Ok(Edges {
        id: string_column(edges, col::EDGE_ID)?.clone(),
        doc_id: string_column(edges, col::DOC_ID)?.clone(),
        text: string_column(edges, col::TEXT)?.clone(),
        hyperedge: string_column(edges, col::HYPEREDGE_ID)?
            .iter()
            .map(|h| h.and_then(|h| hyperedge_row.get(h).copied()))
            .collect(),
        ends: (0..edges.num_rows())
            .map(|i| [entity_row.get(source.value(i)).copied(), entity_row.get(target.value(i)).copied()])
            .collect(),
        vectors: vectors.clone(),
    })
}

/// Entity row → incident hyperedge rows (in reading order), and hyperedge row → entity rows.
fn incidence_of(
    incidence: &RecordBatch,
    hyperedges: &Hyperedges,
    entities: usize,
    (entity_row, hyperedge_row): RowsById<'_, '_>,
) -> Result<[Vec<Vec<u32>>; 2]> {
    let mut entity_hyperedges = vec![Vec::new(); entities];
    let mut hyperedge_entities = vec![Vec::new(); hyperedges.id.len()];
    let (inc_h, inc_e) = (string_column(incidence, col::HYPEREDGE_ID)?, string_column(incidence, col::ENTITY_ID)?);
    // Rows are in merge order, a hyperedge's entities one after the other: its row is looked up once.
    let mut last: Option<(&str, Option<u32>)> = None;
    for i in 0..incidence.num_rows() {
        let id = inc_h.value(i);
        let h = match last {
            Some((previous, h)) if previous == id => h,
            _ => last.insert((id, hyperedge_row.get(id).copied())).1,
        };
        if let (Some(h), Some(&e)) = (h, entity_row.get(inc_e.value(i))) {
            entity_hyperedges[e as usize].push(h);
            hyperedge_entities[h as usize].push(e);
        }
    }
    for list in &mut entity_hyperedges {
        Hyperedges::sort_in_reading_order(list);
    }
    Ok([entity_hyperedges, hyperedge_entities])
}

/// `kb/clusters` with their members, and hyperedge row → cluster rows.
fn clusters_of(
    clusters: &RecordBatch,
    members: &RecordBatch,
    hyperedges: &Hyperedges,
    hyperedge_row: &IdRows<'_>,
) -> Result<(Clusters, Vec<Vec<u32>>)> {
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
    Ok((clusters, hyperedge_clusters))
}

/// Normalised name → entity rows.
fn names_of(entities: &Entities) -> HashMap<String, Vec<u32>> {
    let mut by_name: HashMap<String, Vec<u32>> = HashMap::new();
    for (i, name) in entities.norm_name.iter().enumerate() {
        by_name.entry(name.unwrap_or_default().to_owned()).or_default().push(i as u32);
    }
    by_name
}

/// Alias (from aliases and summaries, not names) → entity rows.
fn aliases_of(aliases: &RecordBatch, entity_row: &IdRows<'_>) -> Result<HashMap<String, Vec<u32>>> {
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
    Ok(by_alias)
}

impl Kb {
    /// Reads the kb of `index`, whose vectors must all be of embedding model `model`, holds them
    /// at `precision`, and searches each table `ann` applies to through its approximate index.
    pub fn load(index: &Index, model: &str, precision: Precision, ann: &AnnConfig) -> Result<Kb> {
        // Shared with other readers; a merge writing the kb holds it exclusively.
        let _lock = lock::shared(index, LockName::Kb)?;
        let mut missing = Vec::new();
        for table in TABLES.iter().map(|t| t.0).chain([Table::KbThresholds]) {
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
        let started = Instant::now();
        let loaded: Vec<(RecordBatch, Vectors, Option<String>)> = TABLES
            .par_iter()
            .map(|&t| load_table(index, t, (model, precision), &fingerprint))
            .collect::<Result<_>>()?;
        let mut load_times = LoadTimes { tables: started.elapsed().as_secs_f64(), ..LoadTimes::default() };
        let started = Instant::now();
        let mut notes = Vec::new();
        let (batches, mut vectors): (Vec<RecordBatch>, Vec<Vectors>) = loaded
            .into_iter()
            .map(|(batch, vectors, note)| {
                notes.extend(note);
                (batch, vectors)
            })
            .unzip();
        let mut searches = Vec::new();
        for (&(table, _), vectors) in TABLES.iter().zip(&mut vectors) {
            if !ann.applies(vectors.len()) {
                continue;
            }
            match read_ann(index, table, model, &fingerprint, vectors.len())? {
                AnnRead::Read(ivf) => {
                    let (lists, probes) = (ivf.lists(), ann.probes);
                    searches.push(format!("{table}: approximate ({lists} lists, {probes} probed)"));
                    *vectors = std::mem::take(vectors).with_ann(Arc::new(ivf), probes);
                }
                AnnRead::NotCurrent => {
                    searches.push(format!("{table}: exact (no current approximate index: flexstruct-merge builds it)"))
                }
                AnnRead::Damaged(problem) => {
                    searches.push(format!("{table}: exact (its approximate index is damaged)"));
                    notes.push(format!("{problem}: the table is scanned exactly instead; the next merge rebuilds it"));
                }
            }
        }
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
        let (entity_row, hyperedge_row) = rayon::join(|| rows_by_id(&entities.id), || rows_by_id(&hyperedges.id));
        let chunks = Chunks {
            doc_id: string_column(chunks, col::DOC_ID)?.clone(),
            chunk_idx: typed::<Int32Array>(chunks, col::CHUNK_IDX)?.clone(),
            text: string_column(chunks, col::TEXT)?.clone(),
            char_start: typed::<Int64Array>(chunks, col::CHAR_START)?.clone(),
            char_end: typed::<Int64Array>(chunks, col::CHAR_END)?.clone(),
            vectors: chunk_vectors.clone(),
        };
        // The lookups do not depend on one another: two halves of about equal work at once.
        let rows = (&entity_row, &hyperedge_row);
        let (left, right) = rayon::join(
            || -> Result<_> {
                let edges = edges_of(edges, edge_vectors, rows)?;
                let incidence = incidence_of(incidence, &hyperedges, entities.id.len(), rows)?;
                Ok((edges, incidence, chunk_links(&hyperedges, &chunks)))
            },
            || -> Result<_> {
                let clusters = clusters_of(clusters, members, &hyperedges, &hyperedge_row)?;
                let by_alias = aliases_of(aliases, &entity_row)?;
                Ok((clusters, names_of(&entities), by_alias, titled_hyperedges(index, &hyperedges)?))
            },
        );
        let (edges, [entity_hyperedges, hyperedge_entities], (hyperedge_chunk, chunk_has_hyperedges)) = left?;
        let ((clusters, hyperedge_clusters), by_name, by_alias, by_title) = right?;
        load_times.lookups = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let lexical = lexical_index(&hyperedges, &hyperedge_entities, &entities);
        load_times.lexical = started.elapsed().as_secs_f64();
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
            load_times,
            searches,
            notes,
        })
    }

    /// Bytes the kb keeps on the heap, by part: `vectors` (the floats of every table),
    /// `approximate indexes`, `texts` (names, summaries, relational and source texts, chunks,
    /// clusters), `ids and positions` (ids, documents, spans and row links as loaded),
    /// `lookups` (names, aliases, titles, incidence, membership) and `lexical` (BM25).
    pub fn memory(&self) -> [(&'static str, usize); 6] {
        let (e, h, x, c, k) = (&self.entities, &self.hyperedges, &self.edges, &self.chunks, &self.clusters);
        let (mut vectors, mut ann) = (0, 0);
        for v in [&e.vectors, &h.vectors, &x.vectors, &c.vectors] {
            let (floats, index) = v.heap_sizes();
            vectors += floats;
            ann += index;
        }
        let arrays = |arrays: &[&dyn Array]| arrays.iter().map(|a| arrow_size(*a)).sum::<usize>();
        let texts = arrays(&[&e.name, &e.norm_name, &e.summary, &h.text, &h.ref_text, &x.text, &c.text, &k.text]);
        let ids = arrays(&[&e.id, &e.doc_id, &h.id, &h.doc_id, &x.id, &x.doc_id, &c.doc_id, &k.id, &k.doc_id])
            + arrays(&[&h.item_idx, &h.ref_start, &h.ref_end, &c.chunk_idx, &c.char_start, &c.char_end])
            + x.hyperedge.heap_size()
            + x.ends.heap_size();
        let lookups = self.by_name.heap_size()
            + self.by_alias.heap_size()
            + self.by_title.heap_size()
            + self.entity_hyperedges.heap_size()
            + self.hyperedge_entities.heap_size()
            + self.hyperedge_clusters.heap_size()
            + self.hyperedge_chunk.heap_size()
            + self.chunk_has_hyperedges.heap_size()
            + k.members.heap_size();
        [
            ("vectors", vectors),
            ("approximate indexes", ann),
            ("texts", texts),
            ("ids and positions", ids),
            ("lookups", lookups),
            ("lexical", self.lexical.heap_size()),
        ]
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
