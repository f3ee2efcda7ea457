//! The merged kb as stored: the order one merge of the whole index writes its rows in, each
//! table read in that order with its vectors as one contiguous buffer, and the **vector files**
//! the merge writes beside the Parquet parts (`kb/<table>/vectors.f32`), so that a reader does
//! not decode millions of vectors from Parquet.
//!
//! Parquet stores an embedding as a list, with a level per float, and decoding that is most of a
//! large kb's load (about 240 MB/s a core). A vector file holds the same floats as raw
//! little-endian `f32`, rows in merge order, after a one-line JSON header that names the table,
//! the model, the shape and the fingerprint of the kb they were taken from
//! ([`super::parquet::one_merge_fingerprint`]): a reader uses a file only when all of them
//! match the kb it is reading (and its length adds up), and otherwise decodes the Parquet parts,
//! which stay the truth — a kb merged before vector files existed, or one whose file was removed
//! or is stale, reads exactly as before, only slower. SQL sees none of this: it lists `.parquet`
//! files only.
//!
//! A reader may hold the vectors at half precision ([`Precision::F16`]): read from a vector
//! file, each block is narrowed as it is read, so the `f32` vectors are never all in memory.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use arrow::array::{Array, AsArray, FixedSizeListArray, RecordBatch, UInt32Array};
use arrow::datatypes::Float32Type;
use flexstruct_schemas::{Table, col};
use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

use super::Index;
use super::files::write_atomic;
use super::parquet::{read_part_columns, string_column, typed};
use crate::core::{Error, IndexProblem, Result};

/// The kb tables with an embedding column.
pub const VECTOR_TABLES: [Table; 4] = [Table::KbEntities, Table::KbHyperedges, Table::KbEdges, Table::KbChunks];

/// First line of a vector file.
const MAGIC: &str = "flexstruct vectors 1";

/// The vector file of a kb table.
pub fn vector_file(index: &Index, table: Table) -> PathBuf {
    index.table_dir(table).join("vectors.f32")
}

/// The second line of a vector file: what its floats are.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VectorHeader {
    /// Table (`kb/entities`).
    pub table: String,
    /// Embedding model of every vector.
    pub model: String,
    /// Fingerprint of the kb the vectors were read from.
    pub kb: String,
    /// Rows, in merge order.
    pub rows: u64,
    /// Floats per row.
    pub dim: u64,
    /// CRC-32 of the floats: a file whose body does not match is damaged, not data (a file
    /// without one is of an older format, and rewritten by the next merge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc32: Option<u32>,
}

/// How a reader holds the kb's vectors in memory.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// As stored (exact).
    #[default]
    F32,
    /// Half precision: half the memory; a unit vector's cosines move by about 1e-3 at most.
    F16,
}

/// A table's vectors, row-major.
#[derive(Debug, Clone, PartialEq)]
pub enum Floats {
    /// At full precision.
    F32(Vec<f32>),
    /// At half precision.
    F16(Vec<f16>),
}

impl From<Vec<f32>> for Floats {
    fn from(values: Vec<f32>) -> Floats {
        Floats::F32(values)
    }
}

/// One kb table as read: its rows in merge order and, for a table with an embedding column,
/// that column as one row-major buffer (empty otherwise).
#[derive(Debug)]
pub struct KbTable {
    /// The columns read, rows in merge order.
    pub batch: RecordBatch,
    /// Floats per vector (0: no vectors).
    pub dim: usize,
    /// rows × dim floats.
    pub vectors: Floats,
    /// What the read found wrong and went around: a damaged vector file, whose vectors were
    /// decoded from the Parquet parts instead.
    pub note: Option<String>,
}

/// The sort keys of the kb's rows in the order one merge of the whole index writes them (by
/// document, then position), whatever buckets they were read from; none for a table left as
/// read. Ties between equally scored rows are broken by this order, so answers do not depend
/// on the bucket count.
pub fn merge_keys(table: Table) -> &'static [&'static str] {
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

/// The row numbers of `batch` in merge order ([`merge_keys`]); `firsts` are the first rows of
/// the parts it was read from, one after the other.
///
/// A merge writes each part in merge order, and each document's rows to one part; then the merge
/// order of the whole table is its documents' runs of rows, sorted by document — found with one
/// pass over the rows and a sort of the (far fewer) documents, instead of sorting every row by
/// its string keys (seconds at millions of rows). Parts that are not so (unsorted, or a document
/// in two parts) are sorted row by row, which gives the same order.
fn merge_order(table: Table, batch: &RecordBatch, firsts: &[usize]) -> Result<UInt32Array> {
    let columns = merge_keys(table)
        .iter()
        .map(|k| {
            let column = batch
                .column_by_name(k)
                .ok_or_else(|| Error::Internal(format!("kb table {table} has no column {k}")))?;
            Ok(arrow::compute::SortColumn { values: column.clone(), options: None })
        })
        .collect::<Result<Vec<_>>>()?;
    if let Some(order) = document_runs(&columns, batch.num_rows(), firsts)? {
        return Ok(order);
    }
    Ok(arrow::compute::lexsort_to_indices(&columns, None)?)
}

/// Merge order from the runs of rows of one first key — the document, for every table but the
/// aliases — ([`merge_order`]), when each part is sorted by `keys` and no first key is in two
/// parts; None otherwise.
fn document_runs(keys: &[arrow::compute::SortColumn], rows: usize, firsts: &[usize]) -> Result<Option<UInt32Array>> {
    let Some(docs) = keys.first().and_then(|k| k.values.as_string_opt::<i32>()) else {
        return Ok(None);
    };
    if docs.null_count() > 0 {
        return Ok(None);
    }
    let compare = arrow::compute::LexicographicalComparator::try_new(keys)?;
    // (first row, rows) of each run of one document within a part.
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (part, &first) in firsts.iter().enumerate() {
        let end = firsts.get(part + 1).copied().unwrap_or(rows);
        for row in first..end {
            if row > first && compare.compare(row - 1, row).is_gt() {
                return Ok(None);
            }
            match runs.last_mut() {
                Some((start, len)) if row > first && docs.value(*start) == docs.value(row) => *len += 1,
                _ => runs.push((row, 1)),
            }
        }
    }
    runs.sort_unstable_by(|a, b| docs.value(a.0).cmp(docs.value(b.0)));
    if runs.windows(2).any(|w| docs.value(w[0].0) == docs.value(w[1].0)) {
        return Ok(None);
    }
    let order: Vec<u32> = runs.iter().flat_map(|&(start, len)| start as u32..(start + len) as u32).collect();
    Ok(Some(UInt32Array::from(order)))
}

/// The rows of `batch` (one table's, read from one part or several concatenated) sorted into
/// merge order; a table without merge keys is left as it is.
pub fn in_merge_order(table: Table, batch: RecordBatch) -> Result<RecordBatch> {
    if merge_keys(table).is_empty() {
        return Ok(batch);
    }
    let order = merge_order(table, &batch, &[0])?;
    Ok(arrow::compute::take_record_batch(&batch, &order)?)
}

/// The batches of one table as one (an empty one of the table's schema when there are none).
pub fn one_batch(table: Table, batches: Vec<RecordBatch>) -> Result<RecordBatch> {
    match batches.first() {
        None => Ok(RecordBatch::new_empty(table.schema())),
        Some(first) => Ok(arrow::compute::concat_batches(&first.schema(), &batches)?),
    }
}

/// The vectors of a table being copied to their places ([`decode_vectors`]).
struct Placed {
    /// rows × dim, allocated at the first vectors seen.
    values: Vec<f32>,
    dim: usize,
    /// Vectors seen, null or not.
    seen: usize,
    /// Rows without a vector or a model.
    missing: usize,
}

impl Placed {
    /// Copies the vectors of `list` to rows `places[0]`, `places[1]`, … of `rows`; a null vector
    /// counts as missing unless its row was already counted (`has_model` false).
    fn copy(
        &mut self,
        list: &FixedSizeListArray,
        places: &[usize],
        rows: usize,
        has_model: impl Fn(usize) -> bool,
    ) -> std::result::Result<(), String> {
        let width = list.value_length() as usize;
        if self.values.is_empty() {
            (self.dim, self.values) = (width, vec![0f32; rows * width]);
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

/// Reads `columns` of a kb table, rows in merge order, and — when the table has an embedding
/// column — every row's vector, which must be of `model`, held at `precision`. `kb` is the kb's
/// fingerprint: a vector file of that kb is read instead of the Parquet vectors (None: always
/// decode Parquet, then narrow the vectors if asked to). The vectors are never held twice: the
/// other columns are read and put in merge order first, then each part's embedding column is
/// decoded on its own and its rows copied straight to their places in the one buffer (parts in
/// parallel), so a kb of millions of vectors loads in little more memory than it then takes.
pub fn read_kb_table(
    index: &Index,
    table: Table,
    columns: &[&str],
    (model, precision): (&str, Precision),
    kb: Option<&str>,
) -> Result<KbTable> {
    let schema = table.schema();
    let with_vectors = schema.column_with_name(col::EMBEDDING).is_some();
    let mut wanted: Vec<&str> = columns.iter().copied().filter(|&c| c != col::EMBEDDING).collect();
    for key in merge_keys(table).iter().chain(if with_vectors { &[col::MODEL][..] } else { &[] }) {
        if !wanted.contains(key) {
            wanted.push(key);
        }
    }
    // Parts are decoded in parallel; each part's rows are numbered on from the previous part's.
    let parts = index.parts(table)?;
    let read: Vec<Vec<RecordBatch>> =
        parts.par_iter().map(|part| read_part_columns(part, table, &wanted)).collect::<Result<_>>()?;
    let firsts: Vec<usize> = read
        .iter()
        .scan(0, |row, batches| {
            let first = *row;
            *row += batches.iter().map(RecordBatch::num_rows).sum::<usize>();
            Some(first)
        })
        .collect();
    let read: Vec<RecordBatch> = read.into_iter().flatten().collect();
    let Some(first) = read.first() else {
        return Ok(KbTable {
            batch: RecordBatch::new_empty(schema),
            dim: 0,
            vectors: Floats::F32(Vec::new()),
            note: None,
        });
    };
    let batch = arrow::compute::concat_batches(&first.schema(), &read)?;
    drop(read);
    let order = merge_order(table, &batch, &firsts)?;
    let batch = arrow::compute::take_record_batch(&batch, &order)?;
    if !with_vectors {
        return Ok(KbTable { batch, dim: 0, vectors: Floats::F32(Vec::new()), note: None });
    }
    let models = string_column(&batch, col::MODEL)?;
    if let Some(other) = models.iter().flatten().find(|m| *m != model) {
        let problem = IndexProblem::ModelMismatch {
            table: table.to_string(),
            found: other.to_owned(),
            configured: model.to_owned(),
        };
        return Err(Error::index(index.root(), problem));
    }
    let mut note = None;
    if let Some(kb) = kb
        && models.null_count() == 0
    {
        match read_vector_file(index, table, (model, precision), kb, batch.num_rows())? {
            VectorRead::Read(dim, vectors) => return Ok(KbTable { batch, dim, vectors, note }),
            VectorRead::NotCurrent => {}
            VectorRead::Damaged(problem) => {
                note = Some(format!(
                    "{problem}: its vectors were decoded from the Parquet parts instead (slower); the next merge \
                     (make index, or flexstruct-merge) rewrites it"
                ));
            }
        }
    }
    let (dim, vectors) = decode_vectors(index, table, model, (&parts, &firsts), &order, |i| models.is_valid(i))?;
    let vectors = match precision {
        Precision::F32 => Floats::F32(vectors),
        Precision::F16 => Floats::F16(vectors.par_chunks(BLOCK_FLOATS).flat_map_iter(narrow).collect()),
    };
    Ok(KbTable { batch, dim, vectors, note })
}

/// The Parquet vectors of `parts` (with each part's first row as read), copied to the places
/// `order` gives them ([`Placed`]); an error names the rows without a vector of `model`.
fn decode_vectors(
    index: &Index,
    table: Table,
    model: &str,
    (parts, firsts): (&[PathBuf], &[usize]),
    order: &UInt32Array,
    has_model: impl Fn(usize) -> bool + Sync,
) -> Result<(usize, Vec<f32>)> {
    let rows = order.len();
    // Where each row, numbered as read, goes.
    let mut place = vec![0usize; rows];
    for (rank, &row) in order.values().iter().enumerate() {
        place[row as usize] = rank;
    }
    let without_model = (0..rows).filter(|&i| !has_model(i)).count();
    let placed = std::sync::Mutex::new(Placed { values: Vec::new(), dim: 0, seen: 0, missing: without_model });
    parts.par_iter().zip(firsts).try_for_each(|(part, &first)| {
        let vectors = read_part_columns(part, table, &[col::EMBEDDING])?;
        let mut placed = placed.lock().map_err(|_| Error::Internal("a vector copy panicked".into()))?;
        let mut row = first;
        for vectors in &vectors {
            let list = typed::<FixedSizeListArray>(vectors, col::EMBEDDING)?;
            placed
                .copy(list, &place[row.min(rows)..], rows, &has_model)
                .map_err(|problem| Error::Internal(format!("{table}: {problem} ({})", part.display())))?;
            row += list.len();
        }
        Ok::<_, Error>(())
    })?;
    let Placed { values, dim, seen, missing } =
        placed.into_inner().map_err(|_| Error::Internal("a vector copy panicked".into()))?;
    if seen != rows {
        return Err(Error::Internal(format!("{table}: {seen} vectors for {rows} rows: it changed while it was read")));
    }
    if missing > 0 {
        let problem = IndexProblem::MissingVectors { table: table.to_string(), missing, rows, model: model.to_owned() };
        return Err(Error::index(index.root(), problem));
    }
    Ok((dim, values))
}

/// Floats per read when a vector file is read (4 MiB), each block read and converted on its own.
const BLOCK_FLOATS: usize = 1 << 20;

/// A vector file as found: its header, where its floats start and its length in bytes.
#[derive(Debug)]
struct Found {
    header: VectorHeader,
    start: u64,
    length: u64,
}

impl Found {
    /// Whether the file holds `table`'s vectors of `model` taken from kb `kb`, every one of them
    /// whole (a file cut short is not current: the merge rewrites it, a reader decodes Parquet).
    fn current(&self, table: Table, model: &str, kb: &str) -> bool {
        let Found { header, start, length } = self;
        header.crc32.is_some()
            && header.table == table.dir()
            && header.model == model
            && header.kb == kb
            && (header.dim > 0 || header.rows == 0)
            && header.rows.checked_mul(header.dim).and_then(|floats| floats.checked_mul(4))
                == length.checked_sub(*start)
    }
}

/// The header of a vector file and where its floats start (None: not a vector file).
fn read_header(path: &Path) -> Result<Option<Found>> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("opening the vector file", path)(e)),
    };
    let length = file.metadata().map_err(Error::io("reading the vector file", path))?.len();
    let mut head = vec![0u8; 4096.min(length as usize)];
    file.read_exact(&mut head).map_err(Error::io("reading the vector file", path))?;
    let mut lines = head.splitn(3, |&b| b == b'\n');
    let (Some(magic), Some(json), Some(_)) = (lines.next(), lines.next(), lines.next()) else {
        return Ok(None);
    };
    if magic != MAGIC.as_bytes() {
        return Ok(None);
    }
    let Ok(header) = serde_json::from_slice::<VectorHeader>(json) else {
        return Ok(None);
    };
    Ok(Some(Found { header, start: (magic.len() + json.len() + 2) as u64, length }))
}

/// `values` at half precision.
fn narrow(values: &[f32]) -> Vec<f16> {
    let mut out = vec![f16::ZERO; values.len()];
    out.convert_from_f32_slice(values);
    out
}

/// What reading a vector file gave.
enum VectorRead {
    /// Its width and vectors.
    Read(usize, Floats),
    /// There is none of this kb, model and shape (not an error: the Parquet parts are read).
    NotCurrent,
    /// It is of this kb, but its floats are not the ones it was written with: what is wrong.
    Damaged(String),
}

/// The damage of a vector file whose floats sum to `found` instead of its header's checksum.
fn damaged(path: &Path, found: u32) -> String {
    format!("{} is damaged (its floats' CRC-32 is {found:08x}, not the one it was written with)", path.display())
}

/// The vectors of `table`'s vector file at `precision`, when it holds `rows` vectors of `model`
/// taken from kb `kb` and its floats are whole. Blocks are read, checked and converted in
/// parallel.
fn read_vector_file(
    index: &Index,
    table: Table,
    (model, precision): (&str, Precision),
    kb: &str,
    rows: usize,
) -> Result<VectorRead> {
    let path = vector_file(index, table);
    let Some(found) = read_header(&path)?.filter(|f| f.current(table, model, kb) && f.header.rows == rows as u64)
    else {
        return Ok(VectorRead::NotCurrent);
    };
    let (dim, start) = (found.header.dim as usize, found.start);
    let floats = rows * dim;
    let file = File::open(&path).map_err(Error::io("opening the vector file", &path))?;
    // Block `block`'s floats, as many as `into` holds, and the sum of their bytes.
    let read = |block: usize, into: &mut [f32]| {
        let mut bytes = vec![0u8; 4 * into.len()];
        let at = start + 4 * (block * BLOCK_FLOATS) as u64;
        file.read_exact_at(&mut bytes, at).map_err(Error::io("reading the vector file", &path))?;
        let mut sum = crc32fast::Hasher::new();
        sum.update(&bytes);
        flexstruct_scan::le::read_f32_le(&bytes, into);
        Ok::<_, Error>(sum)
    };
    let (vectors, sums): (Floats, Vec<crc32fast::Hasher>) = match precision {
        Precision::F32 => {
            let mut values = vec![0f32; floats];
            let sums = values
                .par_chunks_mut(BLOCK_FLOATS)
                .enumerate()
                .map(|(block, values)| read(block, values))
                .collect::<Result<_>>()?;
            (Floats::F32(values), sums)
        }
        Precision::F16 => {
            let mut values = vec![f16::ZERO; floats];
            let sums = values
                .par_chunks_mut(BLOCK_FLOATS)
                .enumerate()
                .map(|(block, values)| {
                    let mut wide = vec![0f32; values.len()];
                    let sum = read(block, &mut wide)?;
                    values.convert_from_f32_slice(&wide);
                    Ok::<_, Error>(sum)
                })
                .collect::<Result<_>>()?;
            (Floats::F16(values), sums)
        }
    };
    let sum = combined(sums);
    if Some(sum) != found.header.crc32 {
        return Ok(VectorRead::Damaged(damaged(&path, sum)));
    }
    Ok(VectorRead::Read(dim, vectors))
}

/// The CRC-32 of blocks summed apart, in order.
fn combined(sums: Vec<crc32fast::Hasher>) -> u32 {
    let mut total = crc32fast::Hasher::new();
    for sum in &sums {
        total.combine(sum);
    }
    total.finalize()
}

/// The CRC-32 of the floats of the vector file at `path` whose floats start at `start`
/// (streamed; the whole file is never in memory).
fn body_crc(path: &Path, start: u64) -> Result<u32> {
    let mut file = File::open(path).map_err(Error::io("opening the vector file", path))?;
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(start))
        .map_err(Error::io("reading the vector file", path))?;
    let mut sum = crc32fast::Hasher::new();
    let mut block = vec![0u8; 4 * BLOCK_FLOATS];
    loop {
        let n = file.read(&mut block).map_err(Error::io("reading the vector file", path))?;
        if n == 0 {
            return Ok(sum.finalize());
        }
        sum.update(&block[..n]);
    }
}

/// What is wrong with `table`'s vector file, when it is of kb `kb` and `model` but its floats
/// are not the ones it was written with (None: whole, absent, or of another kb, which the next
/// merge replaces anyway). Reads the whole file: what `flexstruct-status` asks.
pub fn damaged_vector_file(index: &Index, table: Table, model: &str, kb: &str) -> Result<Option<String>> {
    let path = vector_file(index, table);
    let Some(found) = read_header(&path)?.filter(|f| f.current(table, model, kb)) else { return Ok(None) };
    let sum = body_crc(&path, found.start)?;
    Ok((Some(sum) != found.header.crc32).then(|| damaged(&path, sum)))
}

/// The rows of `table`'s vector file, when it is current for `model` and kb `kb` (its header
/// alone is read).
pub(super) fn current_vector_rows(index: &Index, table: Table, model: &str, kb: &str) -> Result<Option<usize>> {
    let found = read_header(&vector_file(index, table))?.filter(|f| f.current(table, model, kb));
    Ok(found.map(|f| f.header.rows as usize))
}

/// The width and full-precision vectors of `table`'s current vector file of `rows` rows (None
/// when it is not current): what the approximate index ([`super::ann`]) is built from.
pub(super) fn current_vectors(
    index: &Index,
    table: Table,
    (model, kb): (&str, &str),
    rows: usize,
) -> Result<Option<(usize, Vec<f32>)>> {
    Ok(match read_vector_file(index, table, (model, Precision::F32), kb, rows)? {
        VectorRead::Read(dim, Floats::F32(values)) => Some((dim, values)),
        _ => None,
    })
}

/// Writes the vector file of every kb table with vectors ([`VECTOR_TABLES`]) that has none of kb
/// `kb` yet (the merge's global step, first, under its exclusive kb lock); returns how many it wrote.
pub fn write_vector_files(index: &Index, model: &str, kb: &str) -> Result<usize> {
    let mut written = 0;
    for table in VECTOR_TABLES {
        let path = vector_file(index, table);
        // A current file is kept when its floats are whole; a damaged one is written again.
        if read_header(&path)?.is_some_and(|found| found.current(table, model, kb))
            && damaged_vector_file(index, table, model, kb)?.is_none()
        {
            continue;
        }
        let read = read_kb_table(index, table, &[], (model, Precision::F32), None)?;
        let Floats::F32(vectors) = &read.vectors else {
            return Err(Error::Internal(format!("{table}: vectors read at half precision")));
        };
        let crc32 = combined(
            vectors
                .par_chunks(BLOCK_FLOATS)
                .map(|block| {
                    let mut bytes = Vec::with_capacity(4 * block.len());
                    flexstruct_scan::le::extend_f32_le(&mut bytes, block);
                    let mut sum = crc32fast::Hasher::new();
                    sum.update(&bytes);
                    sum
                })
                .collect(),
        );
        let header = VectorHeader {
            table: table.dir().to_owned(),
            model: model.to_owned(),
            kb: kb.to_owned(),
            rows: read.batch.num_rows() as u64,
            dim: read.dim as u64,
            crc32: Some(crc32),
        };
        write_atomic(&path, |file| {
            let mut out = BufWriter::with_capacity(1 << 20, file);
            let json = serde_json::to_string(&header).map_err(|e| Error::Internal(e.to_string()))?;
            writeln!(out, "{MAGIC}\n{json}").map_err(Error::io("writing the vector file", &path))?;
            let mut bytes = Vec::with_capacity(4 * BLOCK_FLOATS);
            for block in vectors.chunks(BLOCK_FLOATS) {
                bytes.clear();
                flexstruct_scan::le::extend_f32_le(&mut bytes, block);
                out.write_all(&bytes).map_err(Error::io("writing the vector file", &path))?;
            }
            let file = out.into_inner().map_err(|e| Error::io("writing the vector file", &path)(e.into_error()))?;
            file.sync_all().map_err(Error::io("syncing the vector file", &path))
        })?;
        written += 1;
    }
    Ok(written)
}

#[cfg(test)]
pub(super) mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Float32Array, Int32Array, StringArray, new_null_array};
    use arrow::datatypes::{DataType, Field};

    use super::*;
    use crate::io::parquet::write_part;

    /// The values at full precision (widened when held at half).
    fn widened(floats: &Floats) -> Vec<f32> {
        match floats {
            Floats::F32(values) => values.clone(),
            Floats::F16(values) => values.to_f32_vec(),
        }
    }

    /// A row: document, position, model, vector (or none).
    pub(in crate::io) type Row<'a> = (&'a str, i32, &'a str, Option<[f32; 2]>);

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

    pub(in crate::io) fn index_of(parts: &[Vec<Row<'_>>]) -> (tempfile::TempDir, Index) {
        let tmp = tempfile::tempdir().unwrap();
        let index = Index::open_or_create(tmp.path(), Some(4)).unwrap();
        for (bucket, rows) in parts.iter().enumerate() {
            let path = index.bucket_path(Table::KbHyperedges, bucket as u32);
            write_part(&path, Table::KbHyperedges, "f", &[part(rows)]).unwrap();
        }
        (tmp, index)
    }

    fn read(index: &Index, kb: Option<&str>) -> KbTable {
        read_kb_table(index, Table::KbHyperedges, &[col::HYPEREDGE_ID], ("m", Precision::F32), kb).unwrap()
    }

    #[test]
    fn vectors_are_placed_with_their_rows_in_merge_order() {
        let (_tmp, index) = index_of(&[
            vec![("b", 1, "m", Some([1.0, 1.0])), ("a", 2, "m", Some([2.0, 2.0]))],
            vec![("b", 0, "m", Some([3.0, 3.0])), ("a", 0, "m", Some([4.0, 4.0]))],
        ]);
        let loaded = read(&index, None);
        let ids: Vec<&str> = string_column(&loaded.batch, col::HYPEREDGE_ID).unwrap().iter().flatten().collect();
        assert_eq!(ids, ["h-a-0", "h-a-2", "h-b-0", "h-b-1"]);
        assert_eq!(loaded.vectors, Floats::F32(vec![4.0, 4.0, 2.0, 2.0, 3.0, 3.0, 1.0, 1.0]));
        assert_eq!(loaded.dim, 2);
    }

    /// `merge_order` of hyperedge rows (document, position) read from parts of the given
    /// lengths, and whether the documents' runs gave it.
    fn order_of(rows: &[(&str, i32)], parts: &[usize]) -> (Vec<u32>, bool) {
        let rows: Vec<Row<'_>> = rows.iter().map(|&(doc, at)| (doc, at, "m", None)).collect();
        let batch = part(&rows);
        let firsts: Vec<usize> = parts.iter().scan(0, |row, len| Some(std::mem::replace(row, *row + len))).collect();
        let keys: Vec<arrow::compute::SortColumn> = merge_keys(Table::KbHyperedges)
            .iter()
            .map(|k| arrow::compute::SortColumn { values: batch.column_by_name(k).unwrap().clone(), options: None })
            .collect();
        let by_runs = document_runs(&keys, batch.num_rows(), &firsts).unwrap().is_some();
        let order = merge_order(Table::KbHyperedges, &batch, &firsts).unwrap();
        let sorted = arrow::compute::lexsort_to_indices(&keys, None).unwrap();
        assert_eq!(order, sorted, "the same order as sorting every row");
        (order.values().to_vec(), by_runs)
    }

    #[test]
    fn merge_order_comes_from_document_runs_when_the_parts_allow_it() {
        // Two sorted parts, documents disjoint: runs sorted by document.
        let rows = [("b", 0), ("b", 3), ("d", 1), ("a", 0), ("c", 2), ("c", 5)];
        assert_eq!(order_of(&rows, &[3, 3]), (vec![3, 0, 1, 4, 5, 2], true));
        // Empty parts are no parts.
        assert_eq!(order_of(&rows, &[0, 3, 0, 3]), (vec![3, 0, 1, 4, 5, 2], true));
        // A document in two parts, or a part out of order: every row sorted.
        let split = [("a", 1), ("b", 0), ("a", 0), ("c", 0)];
        assert_eq!(order_of(&split, &[2, 2]), (vec![2, 0, 1, 3], false));
        let unsorted = [("a", 2), ("a", 1), ("b", 0)];
        assert_eq!(order_of(&unsorted, &[3]), (vec![1, 0, 2], false));
        // One part of one document is already in order.
        assert_eq!(order_of(&[("a", 0), ("a", 4)], &[2]), (vec![0, 1], true));
    }

    proptest::proptest! {
        /// Whatever the parts, the order is that of sorting every row; parts as a merge writes
        /// them (each document in one part, each part sorted) are ordered by their runs.
        #[test]
        fn merge_order_is_the_sorted_order(
            keys in proptest::collection::btree_set((0u8..6, 0i32..8), 0..40),
            buckets in 1usize..5,
            reversed in proptest::bool::ANY,
        ) {
            let docs = ["a", "b", "c", "d", "e", "f"];
            let mut parts: Vec<Vec<(&str, i32)>> = vec![Vec::new(); buckets];
            for &(doc, at) in &keys {
                parts[doc as usize % buckets].push((docs[doc as usize], at));
            }
            if reversed {
                for part in &mut parts {
                    part.reverse();
                }
            }
            let rows: Vec<(&str, i32)> = parts.concat();
            let (_, by_runs) = order_of(&rows, &parts.iter().map(Vec::len).collect::<Vec<_>>());
            // Keys are distinct, so a reversed part of two rows or more is out of order.
            proptest::prop_assert_eq!(by_runs, !reversed || parts.iter().all(|p| p.len() < 2));
        }
    }

    #[test]
    fn rows_without_a_vector_of_the_model_are_refused() {
        let (_tmp, index) = index_of(&[vec![("a", 0, "m", Some([1.0, 0.0])), ("a", 1, "m", None)]]);
        let missing = read_kb_table(&index, Table::KbHyperedges, &[], ("m", Precision::F32), None)
            .err()
            .unwrap()
            .index_problem()
            .unwrap()
            .to_string();
        assert!(missing.contains("1 of 2 rows of kb/hyperedges have no vector of embedding model `m`"), "{missing}");
        let (_tmp, index) =
            index_of(&[vec![("a", 0, "m", Some([1.0, 0.0]))], vec![("b", 0, "other", Some([0.0, 1.0]))]]);
        let other = read_kb_table(&index, Table::KbHyperedges, &[], ("m", Precision::F32), None)
            .err()
            .unwrap()
            .index_problem()
            .unwrap()
            .to_string();
        assert!(other.contains("built with embedding model `other` (kb/hyperedges)"), "{other}");
    }

    #[test]
    fn a_current_vector_file_is_read_and_any_other_is_ignored() {
        let (_tmp, index) = index_of(&[
            vec![("b", 1, "m", Some([1.0, 1.0])), ("a", 2, "m", Some([2.0, 2.0]))],
            vec![("b", 0, "m", Some([3.0, 3.0])), ("a", 0, "m", Some([4.0, 4.0]))],
        ]);
        let from_parquet = [4.0, 4.0, 2.0, 2.0, 3.0, 3.0, 1.0, 1.0];
        // Only kb/hyperedges has rows here; the other tables get files of no rows.
        assert_eq!(write_vector_files(&index, "m", "kb-1").unwrap(), 4);
        assert_eq!(write_vector_files(&index, "m", "kb-1").unwrap(), 0, "current files are kept");
        let path = vector_file(&index, Table::KbHyperedges);
        let Found { header, start, length } = read_header(&path).unwrap().unwrap();
        assert_eq!((header.rows, header.dim, header.kb.as_str(), length), (4, 2, "kb-1", start + 32));
        assert_eq!(read(&index, Some("kb-1")).vectors, Floats::F32(from_parquet.to_vec()));

        // Damaged floats (NaN) under a current header are not data: the Parquet vectors are
        // read, with a note naming the file; the merge writes it again.
        let whole = std::fs::read(&path).unwrap();
        let mut bytes = whole.clone();
        let end = bytes.len();
        bytes[end - 4..].copy_from_slice(&f32::NAN.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let damaged = read(&index, Some("kb-1"));
        assert_eq!(damaged.vectors, Floats::F32(from_parquet.to_vec()));
        let note = damaged.note.unwrap();
        assert!(note.contains("vectors.f32 is damaged") && note.contains("rewrites it"), "{note}");
        let found = damaged_vector_file(&index, Table::KbHyperedges, "m", "kb-1").unwrap().unwrap();
        assert!(found.contains("vectors.f32 is damaged"), "{found}");
        assert_eq!(write_vector_files(&index, "m", "kb-1").unwrap(), 1, "the damaged file is written again");
        assert_eq!(std::fs::read(&path).unwrap(), whole);
        assert!(read(&index, Some("kb-1")).note.is_none());
        assert!(damaged_vector_file(&index, Table::KbHyperedges, "m", "kb-1").unwrap().is_none());

        // The reader takes the file's floats (the last one patched here, its checksum with it),
        // not Parquet's ...
        bytes[end - 4..].copy_from_slice(&9.5f32.to_le_bytes());
        let mut sum = crc32fast::Hasher::new();
        sum.update(&bytes[start as usize..]);
        let resummed = VectorHeader { crc32: Some(sum.finalize()), ..header.clone() };
        let json = serde_json::to_string(&resummed).unwrap();
        let bytes = [format!("{MAGIC}\n{json}\n").as_bytes(), &bytes[start as usize..]].concat();
        let end = bytes.len();
        std::fs::write(&path, &bytes).unwrap();
        let patched = read(&index, Some("kb-1"));
        assert_eq!(widened(&patched.vectors)[7], 9.5);
        // At half precision, from the file as from Parquet.
        let half = |kb| {
            let table = Table::KbHyperedges;
            read_kb_table(&index, table, &[], ("m", Precision::F16), kb).unwrap().vectors
        };
        assert!(matches!(half(Some("kb-1")), Floats::F16(_)));
        assert_eq!(widened(&half(Some("kb-1"))), [4.0, 4.0, 2.0, 2.0, 3.0, 3.0, 1.0, 9.5]);
        assert_eq!(widened(&half(None)), from_parquet);
        assert_eq!(string_column(&patched.batch, col::HYPEREDGE_ID).unwrap().value(3), "h-b-1");
        // ... unless it is of another kb, truncated, or not asked for.
        assert_eq!(read(&index, Some("kb-2")).vectors, Floats::F32(from_parquet.to_vec()));
        assert_eq!(read(&index, None).vectors, Floats::F32(from_parquet.to_vec()));
        std::fs::write(&path, &bytes[..end - 4]).unwrap();
        assert_eq!(read(&index, Some("kb-1")).vectors, Floats::F32(from_parquet.to_vec()));
        // The merge rewrites a file cut short, though its header is current.
        assert_eq!(write_vector_files(&index, "m", "kb-1").unwrap(), 1);
        assert_eq!(read(&index, Some("kb-1")).vectors, Floats::F32(from_parquet.to_vec()));
        assert_eq!(std::fs::read(&path).unwrap().len() as u64, length);
        // A new kb rewrites it.
        assert_eq!(write_vector_files(&index, "m", "kb-2").unwrap(), 4);
        assert_eq!(read(&index, Some("kb-2")).vectors, Floats::F32(from_parquet.to_vec()));
        assert_eq!(std::fs::read(&path).unwrap().len() as u64, length);
    }
}
