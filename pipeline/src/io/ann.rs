//! The approximate index of a large kb table (`kb/<table>/vectors.ivf`): an inverted file
//! ([`flexstruct_scan::Ivf`]) the merge builds from the table's vector file once the table has
//! `[ann] min_rows` rows, and the query stage searches instead of scanning every row. Like a
//! vector file it names the table, the model and the kb it was built from, and a reader uses it
//! only when all of them match and its length adds up; otherwise the table is scanned exactly,
//! which stays the truth (and the default below the threshold).
//!
//! ```toml
//! [ann]
//! min_rows = 250000   # tables this large get an approximate index; 0: never
//! lists = 0           # lists per index (0: √rows)
//! probes = 96         # lists scored per question
//! ```

use std::path::PathBuf;

use flexstruct_scan::{Ivf, default_lists};
use flexstruct_schemas::Table;
use serde::{Deserialize, Serialize};

use super::Index;
use super::files::write_file_atomic;
use super::kb::{VECTOR_TABLES, current_vector_rows, current_vectors, damaged_vector_file};
use crate::core::{Error, Result};

/// First line of an approximate index file.
const MAGIC: &str = "flexstruct ivf 1";

/// The `[ann]` section: which kb tables are searched through an approximate index, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AnnConfig {
    /// A kb table of at least this many rows gets an approximate index at merge, and the query
    /// stage searches it through that index; smaller tables are scanned exactly. 0: never.
    pub min_rows: usize,
    /// Lists of a table's index (0: √rows). Read by the merge.
    pub lists: usize,
    /// Lists whose rows are scored per question (more: higher recall, slower). Read by queries.
    pub probes: usize,
}

impl Default for AnnConfig {
    fn default() -> Self {
        AnnConfig { min_rows: 250_000, lists: 0, probes: 96 }
    }
}

impl AnnConfig {
    /// Checks values that parse but make no sense.
    pub fn validate(&self) -> Result<()> {
        if self.probes == 0 {
            return Err(Error::config("ann.probes", "must be at least 1"));
        }
        Ok(())
    }

    /// Whether a table of `rows` rows is searched through an approximate index.
    pub fn applies(&self, rows: usize) -> bool {
        self.min_rows > 0 && rows >= self.min_rows
    }

    /// The lists of the index of a table of `rows` rows.
    pub fn lists_for(&self, rows: usize) -> usize {
        if self.lists == 0 { default_lists(rows) } else { self.lists.min(rows.max(1)) }
    }
}

/// The approximate index file of a kb table.
pub fn ann_file(index: &Index, table: Table) -> PathBuf {
    index.table_dir(table).join("vectors.ivf")
}

/// The second line of an index file: what it indexes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct AnnHeader {
    table: String,
    model: String,
    kb: String,
    rows: u64,
    dim: u64,
    lists: u64,
    /// CRC-32 of the bytes after the header (none: an older file, rebuilt by the next merge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    crc32: Option<u32>,
}

/// What reading an approximate index gave.
#[derive(Debug)]
pub enum AnnRead {
    /// The index.
    Read(Ivf),
    /// There is none of this kb, model and size (the table is scanned exactly).
    NotCurrent,
    /// It is of this kb, but its bytes are not the ones it was written with: what is wrong.
    Damaged(String),
}

/// CRC-32 of `bytes`.
fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// The header of `table`'s index file and the bytes after it (None: no index file of this
/// format, or one cut short).
fn read_file(index: &Index, table: Table) -> Result<Option<(AnnHeader, Vec<u8>)>> {
    let path = ann_file(index, table);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("reading the approximate index", &path)(e)),
    };
    let mut lines = bytes.splitn(3, |&b| b == b'\n');
    let (Some(magic), Some(json), Some(body)) = (lines.next(), lines.next(), lines.next()) else {
        return Ok(None);
    };
    if magic != MAGIC.as_bytes() {
        return Ok(None);
    }
    let Ok(header) = serde_json::from_slice::<AnnHeader>(json) else { return Ok(None) };
    // Checked: the sizes come from a file, which may be damaged.
    let words = header
        .lists
        .checked_mul(header.dim)
        .and_then(|w| w.checked_add(header.lists))
        .and_then(|w| w.checked_add(header.rows))
        .and_then(|w| w.checked_add(1))
        .and_then(|w| w.checked_mul(4));
    Ok((words == Some(body.len() as u64)).then(|| (header, body.to_vec())))
}

/// Whether `header` is of `table`'s `rows` vectors of `model` in kb `kb`, with a checksum.
fn is_current(header: &AnnHeader, table: Table, model: &str, kb: &str, rows: usize) -> bool {
    header.crc32.is_some()
        && header.table == table.dir()
        && header.model == model
        && header.kb == kb
        && header.rows == rows as u64
}

/// `table`'s approximate index, when its file is current: built from `rows` vectors of
/// `model` of kb `kb`, and whole (its checksum matches). A whole file that does not hold
/// together is an error naming it.
pub fn read_ann(index: &Index, table: Table, model: &str, kb: &str, rows: usize) -> Result<AnnRead> {
    let Some((header, body)) = read_file(index, table)? else { return Ok(AnnRead::NotCurrent) };
    if !is_current(&header, table, model, kb, rows) {
        return Ok(AnnRead::NotCurrent);
    }
    if let Some(problem) = damage(index, table, &header, &body) {
        return Ok(AnnRead::Damaged(problem));
    }
    let (lists, dim) = (header.lists as usize, header.dim as usize);
    let mut centroids = vec![0f32; lists * dim];
    let (centroid_bytes, rest) = body.split_at(4 * centroids.len());
    flexstruct_scan::le::read_f32_le(centroid_bytes, &mut centroids);
    let (offset_bytes, member_bytes) = rest.split_at(4 * (lists + 1));
    let (offsets, members) = (flexstruct_scan::le::u32s_le(offset_bytes), flexstruct_scan::le::u32s_le(member_bytes));
    Ivf::from_parts(dim, rows, centroids, offsets, members).map(AnnRead::Read).map_err(|problem| {
        Error::Internal(format!("{}: not a usable approximate index: {problem}", ann_file(index, table).display()))
    })
}

/// What is wrong with an index file whose body does not match its header's checksum.
fn damage(index: &Index, table: Table, header: &AnnHeader, body: &[u8]) -> Option<String> {
    let sum = crc32(body);
    (Some(sum) != header.crc32).then(|| {
        format!(
            "{} is damaged (its CRC-32 is {sum:08x}, not the one it was written with)",
            ann_file(index, table).display()
        )
    })
}

/// What is wrong with `table`'s approximate index, when it is of `rows` vectors of `model` in
/// kb `kb` but damaged (None: whole, absent, or of another kb, which the next merge replaces).
pub fn damaged_ann_file(index: &Index, table: Table, model: &str, kb: &str, rows: usize) -> Result<Option<String>> {
    Ok(match read_file(index, table)? {
        Some((header, body)) if is_current(&header, table, model, kb, rows) => damage(index, table, &header, &body),
        _ => None,
    })
}

/// What is damaged among the vector files and approximate indexes of kb `kb` with `model`'s
/// vectors (files of another kb are not looked at: the next merge replaces them anyway). Reads
/// every such file whole.
pub fn damaged_files(index: &Index, model: &str, kb: &str) -> Result<Vec<String>> {
    let mut damaged = Vec::new();
    for table in VECTOR_TABLES {
        damaged.extend(damaged_vector_file(index, table, model, kb)?);
        if let Some(rows) = current_vector_rows(index, table, model, kb)? {
            damaged.extend(damaged_ann_file(index, table, model, kb, rows)?);
        }
    }
    Ok(damaged)
}

/// Builds and writes the approximate index of every kb table with vectors that `config` says
/// needs one and that has no current one of kb `kb` (the merge's global step, after the vector
/// files); returns the tables it wrote.
pub fn write_ann_files(index: &Index, model: &str, kb: &str, config: &AnnConfig) -> Result<Vec<Table>> {
    let mut written = Vec::new();
    for table in VECTOR_TABLES {
        let path = ann_file(index, table);
        let Some(rows) = current_vector_rows(index, table, model, kb)?.filter(|&rows| config.applies(rows)) else {
            continue;
        };
        let lists = config.lists_for(rows);
        let found = read_file(index, table)?;
        if found.is_some_and(|(h, body)| {
            is_current(&h, table, model, kb, rows)
                && h.lists == lists as u64
                && damage(index, table, &h, &body).is_none()
        }) {
            continue;
        }
        let Some((dim, values)) = current_vectors(index, table, (model, kb), rows)? else { continue };
        let ivf = Ivf::build(&values, dim, lists);
        let header = AnnHeader {
            table: table.dir().to_owned(),
            model: model.to_owned(),
            kb: kb.to_owned(),
            rows: rows as u64,
            dim: dim as u64,
            lists: ivf.lists() as u64,
            crc32: None,
        };
        let mut body = Vec::new();
        flexstruct_scan::le::extend_f32_le(&mut body, ivf.centroids());
        flexstruct_scan::le::extend_u32_le(&mut body, ivf.offsets());
        flexstruct_scan::le::extend_u32_le(&mut body, ivf.members());
        let header = AnnHeader { crc32: Some(crc32(&body)), ..header };
        let json = serde_json::to_string(&header).map_err(|e| Error::Internal(e.to_string()))?;
        let mut bytes = format!("{MAGIC}\n{json}\n").into_bytes();
        bytes.append(&mut body);
        write_file_atomic(&path, &bytes)?;
        written.push(table);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::io::kb::tests::{Row, index_of};
    use crate::io::kb::write_vector_files;

    #[test]
    fn built_for_large_tables_read_when_current() {
        let rows: Vec<Row<'_>> = (0..40)
            .map(|i| {
                let angle = i as f32 * 0.15;
                ("a", i, "m", Some([angle.cos(), angle.sin()]))
            })
            .collect();
        let (_tmp, index) = index_of(&[rows]);
        write_vector_files(&index, "m", "kb-1").unwrap();
        let table = Table::KbHyperedges;
        let off = AnnConfig { min_rows: 0, ..AnnConfig::default() };
        assert!(write_ann_files(&index, "m", "kb-1", &off).unwrap().is_empty(), "0: never");
        let large = AnnConfig { min_rows: 41, ..AnnConfig::default() };
        assert!(write_ann_files(&index, "m", "kb-1", &large).unwrap().is_empty(), "40 rows are below 41");
        let config = AnnConfig { min_rows: 40, lists: 4, probes: 1 };
        assert_eq!(write_ann_files(&index, "m", "kb-1", &config).unwrap(), [table]);
        assert!(write_ann_files(&index, "m", "kb-1", &config).unwrap().is_empty(), "a current index is kept");
        let read = |kb: &str, rows: usize, model: &str| read_ann(&index, table, model, kb, rows).unwrap();
        let AnnRead::Read(ivf) = read("kb-1", 40, "m") else { panic!("not read") };
        assert_eq!((ivf.lists(), ivf.rows(), ivf.dim()), (4, 40, 2));
        // Of another kb, model or size, it is not read.
        assert!(matches!(read("kb-2", 40, "m"), AnnRead::NotCurrent));
        assert!(matches!(read("kb-1", 40, "other"), AnnRead::NotCurrent));
        assert!(matches!(read("kb-1", 39, "m"), AnnRead::NotCurrent));
        // Another list count rebuilds it.
        let more = AnnConfig { lists: 5, ..config };
        assert_eq!(write_ann_files(&index, "m", "kb-1", &more).unwrap(), [table]);
        assert!(matches!(read("kb-1", 40, "m"), AnnRead::Read(ivf) if ivf.lists() == 5));
        // Cut short: not read, and rebuilt.
        let path = ann_file(&index, table);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 4]).unwrap();
        assert!(matches!(read("kb-1", 40, "m"), AnnRead::NotCurrent));
        assert_eq!(write_ann_files(&index, "m", "kb-1", &more).unwrap(), [table]);
        // Whole in length but damaged (a centroid's float made NaN, a row listed twice): not
        // used, named, and rebuilt by the merge.
        let whole = std::fs::read(&path).unwrap();
        let body_at = whole.splitn(3, |&b| b == b'\n').take(2).map(|line| line.len() + 1).sum::<usize>();
        let twice = whole[whole.len() - 160..whole.len() - 156].to_vec();
        for (at, with) in [(whole.len() - 4, twice), (body_at, f32::NAN.to_le_bytes().to_vec())] {
            let mut bytes = whole.clone();
            bytes[at..at + 4].copy_from_slice(&with);
            std::fs::write(&path, &bytes).unwrap();
            let AnnRead::Damaged(problem) = read("kb-1", 40, "m") else { panic!("damage not seen") };
            assert!(problem.contains("vectors.ivf is damaged"), "{problem}");
            assert_eq!(damaged_ann_file(&index, table, "m", "kb-1", 40).unwrap(), Some(problem));
            assert_eq!(write_ann_files(&index, "m", "kb-1", &more).unwrap(), [table]);
            assert_eq!(std::fs::read(&path).unwrap(), whole);
            assert_eq!(damaged_ann_file(&index, table, "m", "kb-1", 40).unwrap(), None);
        }
        // A header whose sizes overflow when multiplied: not read, never a panic.
        let mut lines = whole.splitn(3, |&b| b == b'\n');
        let (magic, json) = (lines.next().unwrap(), lines.next().unwrap());
        let mut header: AnnHeader = serde_json::from_slice(json).unwrap();
        (header.lists, header.dim) = (u64::MAX / 2, 3);
        let mut damaged = [magic, b"\n", serde_json::to_string(&header).unwrap().as_bytes(), b"\n"].concat();
        damaged.extend_from_slice(lines.next().unwrap());
        std::fs::write(&path, &damaged).unwrap();
        assert!(matches!(read("kb-1", 40, "m"), AnnRead::NotCurrent));
        assert!(AnnConfig { probes: 0, ..config }.validate().is_err());
    }
}
