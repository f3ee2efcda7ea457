//! Parquet part files: atomic zstd-compressed writes with flexstruct metadata, checked reads,
//! and the column accessors every reader of a checked batch uses.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    Array, FixedSizeListArray, Float32Array, Float32Builder, ListArray, ListBuilder, RecordBatch, StringArray,
    StringBuilder,
};
use arrow::compute::{filter_record_batch, kernels::cmp::eq};
use arrow::datatypes::{DataType, Field};
use flexstruct_schemas::{
    Table, check_metadata, check_schema, check_schema_of_layout, check_table_name, col, meta, part_metadata,
};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use super::files::{write_atomic, write_file_atomic};
use super::index::Index;
use crate::core::{Error, IndexProblem, Result};

/// Writes one part file of `table`: rows in `batches` (checked against the table's schema),
/// zstd-compressed, with the table name, schema version and `fingerprint` in its metadata.
pub fn write_part(path: &Path, table: Table, fingerprint: &str, batches: &[RecordBatch]) -> Result<()> {
    let schema = batches.first().map_or_else(|| table.schema(), RecordBatch::schema);
    check_schema(table, &schema, &format!("rows being written to {}", path.display()))?;
    let metadata = part_metadata(table, fingerprint).into_iter().map(|(k, v)| KeyValue::new(k, v)).collect();
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).map_err(Error::parquet("compression level", path))?))
        .set_key_value_metadata(Some(metadata))
        .build();
    write_atomic(path, |file| {
        let mut writer = ArrowWriter::try_new(file, schema.clone(), Some(props))
            .map_err(Error::parquet("starting a Parquet file", path))?;
        for batch in batches {
            writer.write(batch).map_err(Error::parquet("writing rows", path))?;
        }
        let file = writer.into_inner().map_err(Error::parquet("finishing a Parquet file", path))?;
        file.sync_all().map_err(Error::io("syncing", path))
    })
}

fn open_checked(path: &Path, table: Table) -> Result<(ParquetRecordBatchReaderBuilder<File>, HashMap<String, String>)> {
    let file = File::open(path).map_err(Error::io("opening", path))?;
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(Error::parquet("reading the Parquet footer", path))?;
    let kv = check_footer(builder.metadata(), builder.schema(), table, &path.display().to_string())?;
    Ok((builder, kv))
}

fn key_values(metadata: &parquet::file::metadata::ParquetMetaData) -> HashMap<String, String> {
    metadata
        .file_metadata()
        .key_value_metadata()
        .into_iter()
        .flatten()
        .filter_map(|kv| Some((kv.key.clone(), kv.value.clone()?)))
        .collect()
}

/// Checks a part file's footer (its flexstruct metadata and Arrow schema) against `table`;
/// returns the key-value metadata. `location` names the file in errors.
pub fn check_footer(
    metadata: &parquet::file::metadata::ParquetMetaData,
    schema: &arrow::datatypes::SchemaRef,
    table: Table,
    location: &str,
) -> Result<HashMap<String, String>> {
    let kv = key_values(metadata);
    let version = check_metadata(table, &kv, location)?;
    check_schema_of_layout(table, schema, location, version)?;
    Ok(kv)
}

/// The fingerprint stored in a part file, or None if the file does not exist.
pub fn part_fingerprint(path: &Path, table: Table) -> Result<Option<String>> {
    if !path.exists() {
        return Ok(None);
    }
    let (_, kv) = open_checked(path, table)?;
    Ok(kv.get(meta::FINGERPRINT).cloned())
}

/// The fingerprint of a stage's own output part, or None when it must be recomputed: the file
/// does not exist, it was written with another version of the table's layout (a stage rewrites
/// its outputs of an older layout; only its inputs must be of the current one), or it cannot be
/// read as a part of the table at all (truncated or damaged: the stage rebuilds it rather than
/// stop; a damaged *input* is still an error naming the file).
pub fn output_fingerprint(path: &Path, table: Table) -> Result<Option<String>> {
    match part_fingerprint(path, table) {
        Err(Error::Schema(_) | Error::Parquet { .. }) => Ok(None),
        other => other,
    }
}

/// Checks a part file's metadata and schema without reading its rows.
pub fn check_part(path: &Path, table: Table) -> Result<()> {
    open_checked(path, table).map(|_| ())
}

/// The kb tables partitioned by bucket (every kb table but the global `kb/thresholds`).
pub const KB_BUCKET_TABLES: [Table; 9] = [
    Table::KbEntities,
    Table::KbHyperedges,
    Table::KbEdges,
    Table::KbChunks,
    Table::KbHyperedgeEntities,
    Table::KbClusters,
    Table::KbClusterMembers,
    Table::KbAliases,
    Table::KbDocStats,
];

/// The fingerprint of a kb as its parts are now: of every part of `tables` (kb tables built per
/// bucket), by file name and stored fingerprint. The merge stores it in the global parts it
/// writes last (`kb/thresholds`); a reader that computes another one is looking at a kb that a
/// merge has not finished.
pub fn kb_parts_fingerprint(index: &Index, tables: &[Table]) -> Result<String> {
    Ok(fingerprint_of_parts(&kb_part_fingerprints(index, tables)?))
}

/// Every part of `tables`: its table, file name and stored fingerprint (empty when none).
pub fn kb_part_fingerprints(index: &Index, tables: &[Table]) -> Result<Vec<(Table, String, String)>> {
    let mut parts = Vec::new();
    for &table in tables {
        for part in index.parts(table)? {
            let name = part.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            parts.push((table, name, part_fingerprint(&part, table)?.unwrap_or_default()));
        }
    }
    Ok(parts)
}

/// [`kb_parts_fingerprint`] of parts already listed by [`kb_part_fingerprints`].
pub fn fingerprint_of_parts(parts: &[(Table, String, String)]) -> String {
    let parts: Vec<String> = parts.iter().map(|(table, name, fp)| format!("{table}/{name}:{fp}")).collect();
    crate::core::ids::fingerprint(&parts.iter().map(String::as_str).collect::<Vec<_>>())
}

/// Checks that the kb is one merge's whole output. Each bucket's kb parts carry the fingerprint
/// of the inputs they were merged from, so the parts of one bucket must agree across the tables;
/// and `kb/thresholds`, which a merge writes last, carries the fingerprint of all the kb parts it
/// was derived from ([`kb_parts_fingerprint`]), so a merge killed midway (or still running, or
/// shards of which have run since) leaves a kb whose parts no longer add up to it. Returns that
/// fingerprint: the kb's identity, which what is derived from the kb (the path index) records.
pub fn one_merge_fingerprint(index: &Index) -> Result<String> {
    let parts = kb_part_fingerprints(index, &KB_BUCKET_TABLES)?;
    let mut by_bucket: BTreeMap<&str, HashMap<&str, Vec<&str>>> = Default::default();
    for (table, name, fingerprint) in &parts {
        by_bucket.entry(name).or_default().entry(fingerprint).or_default().push(table.dir());
    }
    for (part, by_fingerprint) in by_bucket {
        let tables: usize = by_fingerprint.values().map(Vec::len).sum();
        if by_fingerprint.len() > 1 || tables < KB_BUCKET_TABLES.len() {
            let mut groups: Vec<String> =
                by_fingerprint.into_values().map(|tables| format!("{} ({part})", tables.join(", "))).collect();
            if tables < KB_BUCKET_TABLES.len() {
                groups.push(format!("tables without {part}"));
            }
            groups.sort();
            return Err(Error::index(index.root(), IndexProblem::MixedKb { groups }));
        }
    }
    let thresholds = part_fingerprint(&index.kb_part(Table::KbThresholds), Table::KbThresholds)?;
    let whole = fingerprint_of_parts(&parts);
    if thresholds.as_ref() != Some(&whole) {
        let groups = vec!["kb/thresholds".to_owned(), "the kb parts it was not derived from".to_owned()];
        return Err(Error::index(index.root(), IndexProblem::MixedKb { groups }));
    }
    Ok(whole)
}

/// The fingerprint of what is derived from a whole kb (the path index): the kb's own fingerprint
/// ([`one_merge_fingerprint`]), a slash, and that of how it was built, so that a reader can
/// tell one derived from another kb from the kb alone.
pub fn derived_fingerprint(kb: &str, build: &str) -> String {
    format!("{kb}/{build}")
}

/// The kb fingerprint inside a [`derived_fingerprint`].
pub fn kb_of_derived(fingerprint: &str) -> &str {
    fingerprint.split_once('/').map_or("", |(kb, _)| kb)
}

/// Row count of a part file from its footer (0 if the file does not exist).
pub fn part_row_count(path: &Path) -> Result<u64> {
    if !path.exists() {
        return Ok(0);
    }
    let file = File::open(path).map_err(Error::io("opening", path))?;
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(Error::parquet("reading the Parquet footer", path))?;
    Ok(builder.metadata().file_metadata().num_rows().max(0) as u64)
}

/// Reads a whole part file after checking its metadata and schema.
pub fn read_part(path: &Path, table: Table) -> Result<Vec<RecordBatch>> {
    read_rows(path, table, None)
}

/// The rows of one part file, all columns or only `columns`.
fn read_rows(path: &Path, table: Table, columns: Option<&[&str]>) -> Result<Vec<RecordBatch>> {
    let (builder, _) = open_checked(path, table)?;
    decode(builder, columns, path)
}

/// Decodes the rows of an opened part file: all columns, or those of `columns` it has.
fn decode(
    mut builder: ParquetRecordBatchReaderBuilder<File>,
    columns: Option<&[&str]>,
    path: &Path,
) -> Result<Vec<RecordBatch>> {
    if let Some(columns) = columns {
        let present: Vec<&str> =
            columns.iter().copied().filter(|c| builder.schema().field_with_name(c).is_ok()).collect();
        let mask = parquet::arrow::ProjectionMask::columns(builder.parquet_schema(), present);
        builder = builder.with_projection(mask);
    }
    let reader = builder.build().map_err(Error::parquet("reading rows", path))?;
    reader.collect::<std::result::Result<Vec<_>, _>>().map_err(|e| Error::parquet("reading rows", path)(e.into()))
}

/// Reads a part of `table` written with its current layout or an earlier one, with the layout
/// version it was written with; `columns` (all when None) that the file lacks are left out. For
/// the one stage whose rows are not recomputed from anything, ingest: it carries an older
/// `documents` part forward and rewrites it in the current layout, where every other stage
/// recomputes an older output and refuses an older input. The table name is always checked, the
/// columns only for the current layout.
pub fn read_part_any_layout(path: &Path, table: Table, columns: Option<&[&str]>) -> Result<(u32, Vec<RecordBatch>)> {
    let file = File::open(path).map_err(Error::io("opening", path))?;
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(Error::parquet("reading the Parquet footer", path))?;
    let location = path.display().to_string();
    let kv = key_values(builder.metadata());
    let version = kv.get(meta::SCHEMA_VERSION).and_then(|v| v.parse::<u32>().ok());
    let version = match version {
        Some(v) if v < table.schema_version() => {
            check_table_name(table, &kv, &location)?;
            v
        }
        _ => {
            check_footer(builder.metadata(), builder.schema(), table, &location)?;
            table.schema_version()
        }
    };
    Ok((version, decode(builder, columns, path)?))
}

/// Reads every part of a table (an absent table reads as no rows).
pub fn read_table(index: &Index, table: Table) -> Result<Vec<RecordBatch>> {
    let mut batches = Vec::new();
    for part in index.parts(table)? {
        batches.extend(read_part(&part, table)?);
    }
    Ok(batches)
}

/// Reads only `columns` of every part of a table (Parquet decodes nothing else).
pub fn read_columns(index: &Index, table: Table, columns: &[&str]) -> Result<Vec<RecordBatch>> {
    let mut batches = Vec::new();
    for part in index.parts(table)? {
        batches.extend(read_part_columns(&part, table, columns)?);
    }
    Ok(batches)
}

/// Reads only `columns` of one part file, after checking its metadata and schema.
pub fn read_part_columns(path: &Path, table: Table, columns: &[&str]) -> Result<Vec<RecordBatch>> {
    read_rows(path, table, Some(columns))
}

/// Reads the rows of one document of a per-document table (one part file is opened).
pub fn read_doc(index: &Index, table: Table, doc_id: &str) -> Result<Vec<RecordBatch>> {
    let path = index.bucket_path(table, index.bucket_of(doc_id));
    if !path.exists() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for batch in read_part(&path, table)? {
        let ids = string_column(&batch, col::DOC_ID)?;
        let keep = eq(ids, &StringArray::new_scalar(doc_id))?;
        let rows = filter_record_batch(&batch, &keep)?;
        if rows.num_rows() > 0 {
            out.push(rows);
        }
    }
    Ok(out)
}

/// Writes serialisable rows as one Parquet file (zstd) with `schema`: fields the schema does
/// not name are left out, nested lists and structs are decoded by arrow's JSON decoder. For
/// output files outside an index (answers, evaluation results).
pub fn write_rows_parquet<T: serde::Serialize>(
    path: &Path,
    schema: arrow::datatypes::SchemaRef,
    rows: &[T],
) -> Result<()> {
    let mut decoder = arrow::json::ReaderBuilder::new(schema.clone()).build_decoder()?;
    decoder.serialize(rows)?;
    let batch = decoder.flush()?.unwrap_or_else(|| RecordBatch::new_empty(schema.clone()));
    let props = WriterProperties::builder().set_compression(Compression::ZSTD(ZstdLevel::default())).build();
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, schema, Some(props)).map_err(Error::parquet("writing", path))?;
    writer.write(&batch).map_err(Error::parquet("writing", path))?;
    writer.close().map_err(Error::parquet("writing", path))?;
    write_file_atomic(path, &bytes)
}

/// A Utf8 column of a batch that passed the schema check.
pub fn string_column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a StringArray> {
    typed(batch, name)
}

/// A column of a checked batch, downcast to its Arrow array type.
pub fn typed<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> Result<&'a T> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| Error::Internal(format!("column `{name}` has an unexpected type")))
}

/// A non-null `list<utf8>` column from lists of strings.
pub fn string_lists<'a>(lists: impl Iterator<Item = &'a [String]>) -> ListArray {
    let mut builder =
        ListBuilder::new(StringBuilder::new()).with_field(Arc::new(Field::new_list_field(DataType::Utf8, false)));
    for list in lists {
        for s in list {
            builder.values().append_value(s);
        }
        builder.append(true);
    }
    builder.finish()
}

/// A non-null `list<float32>` column from lists of floats (one list a row).
pub fn float_lists<'a>(lists: impl Iterator<Item = &'a [f32]>) -> ListArray {
    let mut builder =
        ListBuilder::new(Float32Builder::new()).with_field(Arc::new(Field::new_list_field(DataType::Float32, false)));
    for list in lists {
        builder.values().append_slice(list);
        builder.append(true);
    }
    builder.finish()
}

/// An embedding column: `values` as fixed-size lists of `width` floats, row after row.
pub fn vector_lists(values: Vec<f32>, width: usize) -> Result<FixedSizeListArray> {
    let width = i32::try_from(width).map_err(|_| Error::Internal(format!("vectors of {width} values")))?;
    let item = Arc::new(Field::new_list_field(DataType::Float32, false));
    Ok(FixedSizeListArray::try_new(item, width, Arc::new(Float32Array::from(values)), None)?)
}

/// The vector in row `row` of an embedding column.
pub fn vector_at(list: &FixedSizeListArray, row: usize) -> Result<Vec<f32>> {
    let values = list.value(row);
    let floats = values
        .as_any()
        .downcast_ref::<Float32Array>()
        .ok_or_else(|| Error::Internal("embedding values are not f32".into()))?;
    Ok(floats.values().to_vec())
}

/// Number of rows of a set of batches.
pub fn row_count(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

/// Whether a string array value is present (helper for nullable columns).
pub fn opt_str(array: &StringArray, row: usize) -> Option<&str> {
    array.is_valid(row).then(|| array.value(row))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, Int64Array};

    fn chunk_batch(doc_ids: &[&str]) -> RecordBatch {
        let n = doc_ids.len();
        RecordBatch::try_new(
            Table::Chunks.schema(),
            vec![
                Arc::new(StringArray::from(doc_ids.to_vec())),
                Arc::new(Int32Array::from_iter_values(0..n as i32)),
                Arc::new(StringArray::from(vec!["t"; n])),
                Arc::new(Int32Array::from(vec![1; n])),
                Arc::new(Int64Array::from(vec![0; n])),
                Arc::new(Int64Array::from(vec![1; n])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn write_read_roundtrip_with_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open_or_create(dir.path(), Some(1)).unwrap();
        let path = index.bucket_path(Table::Chunks, 0);
        write_part(&path, Table::Chunks, "fp1", &[chunk_batch(&["a", "b", "a"])]).unwrap();
        assert_eq!(part_fingerprint(&path, Table::Chunks).unwrap().as_deref(), Some("fp1"));
        assert_eq!(row_count(&read_table(&index, Table::Chunks).unwrap()), 3);
        assert_eq!(row_count(&read_doc(&index, Table::Chunks, "a").unwrap()), 2);
        assert_eq!(row_count(&read_doc(&index, Table::Chunks, "zzz").unwrap()), 0);
        // Only the part is in the folder: the temporary file was renamed into place.
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
        // Reading it as another table is refused with the file named.
        let err = read_part(&path, Table::Documents).unwrap_err();
        assert!(err.to_string().contains("part-0000.parquet"), "{err}");
    }

    #[test]
    fn wrong_rows_are_refused_and_leave_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("documents/part-0000.parquet");
        let err = write_part(&path, Table::Documents, "f", &[chunk_batch(&["a"])]).unwrap_err();
        assert!(err.to_string().contains("table documents"), "{err}");
        assert!(!path.exists());
    }

    #[test]
    fn hidden_and_temporary_files_are_not_parts() {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open_or_create(dir.path(), Some(1)).unwrap();
        let table_dir = index.table_dir(Table::Chunks);
        std::fs::create_dir_all(&table_dir).unwrap();
        std::fs::write(table_dir.join(".part-0000.parquet.1-0.tmp"), b"half").unwrap();
        std::fs::write(table_dir.join("notes.txt"), b"x").unwrap();
        assert!(index.parts(Table::Chunks).unwrap().is_empty());
    }
}
