//! Readers of corpus inputs: folders of .txt/.md, JSON arrays, JSON lines, Parquet files.
//! Every unusable unit becomes a [`Failure`] naming its file and line (or element, or row);
//! the readable ones still go through.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow::array::{Array, RecordBatch, StringArray};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::Value;
use serde_json::value::RawValue;

use super::STAGE;
use crate::core::{Error, Result};
use crate::io::{Failure, FailureKind};

/// A document as read, before ids are assigned and duplicates removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawDoc {
    /// Id given in the input, if any.
    pub doc_id: Option<String>,
    /// Title given in the input (or derived from a Markdown heading or the file name).
    pub title: Option<String>,
    /// Full text.
    pub text: String,
    /// Where it came from: `file`, `file:line`, `file#element (line N)`, `file row N`.
    pub source: String,
    /// Whether the document is a whole file (a `.txt` or `.md`), so that `source` names it: a
    /// later version of the same file replaces it.
    pub whole_file: bool,
}

/// What reading a corpus produced.
#[derive(Debug, Default)]
pub struct ReadOutcome {
    /// Documents read, in input order.
    pub docs: Vec<RawDoc>,
    /// Units that could not be read.
    pub failures: Vec<Failure>,
    /// Files looked at.
    pub files: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Text { markdown: bool },
    Json,
    JsonLines,
    Parquet,
}

fn format_of(path: &Path) -> Option<Format> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "txt" | "text" => Format::Text { markdown: false },
        "md" | "markdown" => Format::Text { markdown: true },
        "json" => Format::Json,
        "jsonl" | "ndjson" => Format::JsonLines,
        "parquet" => Format::Parquet,
        _ => return None,
    })
}

fn fail(unit: impl Into<String>, kind: FailureKind, message: impl Into<String>) -> Failure {
    Failure { stage: STAGE.to_owned(), doc_id: None, unit: unit.into(), kind, message: message.into() }
}

/// Reads a corpus file or folder. Only a missing corpus path is an error; everything else
/// ends as documents or failures.
pub fn read_corpus(path: &Path, max_bytes: u64) -> Result<ReadOutcome> {
    let meta = std::fs::metadata(path).map_err(Error::io("cannot be read", path))?;
    let mut out = ReadOutcome::default();
    if meta.is_dir() {
        let mut files = Vec::new();
        let mut seen = std::collections::HashSet::new();
        if let Ok(real) = std::fs::canonicalize(path) {
            seen.insert(real);
        }
        walk(path, path, &mut seen, &mut files, &mut out.failures);
        for (file, rel) in files {
            read_file(&file, &rel, max_bytes, &mut out);
        }
    } else {
        let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        read_file(path, &name, max_bytes, &mut out);
    }
    Ok(out)
}

/// Files under `dir` (recursively, sorted, hidden entries skipped) with their path relative to
/// `root`, using `/` on every platform. Links are followed, but a folder already walked (by its
/// real path: a link back to an ancestor, or a second link to the same folder) is walked once;
/// a link that loops is recorded once as a failure naming the real path.
fn walk(
    root: &Path,
    dir: &Path,
    seen: &mut std::collections::HashSet<PathBuf>,
    files: &mut Vec<(PathBuf, String)>,
    failures: &mut Vec<Failure>,
) {
    let rel = |p: &Path| {
        p.strip_prefix(root)
            .unwrap_or(p)
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/")
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            failures.push(fail(
                rel(dir),
                FailureKind::Unreadable,
                format!("{}: cannot list folder: {e}", dir.display()),
            ));
            return;
        }
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    // Real entries before links, each in name order: a folder reached both ways is read under its
    // own name and the link is the one reported.
    paths.sort_by_key(|p| (p.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()), p.clone()));
    for path in paths {
        let hidden = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('.'));
        if hidden {
            continue;
        }
        if path.is_dir() {
            match std::fs::canonicalize(&path) {
                Ok(real) if !seen.insert(real.clone()) => failures.push(fail(
                    rel(&path),
                    FailureKind::SymlinkLoop,
                    format!("{}: links to {}, a folder already read: skipped", rel(&path), real.display()),
                )),
                _ => walk(root, &path, seen, files, failures),
            }
        } else {
            let r = rel(&path);
            files.push((path, r));
        }
    }
}

fn read_file(path: &Path, unit: &str, max_bytes: u64, out: &mut ReadOutcome) {
    out.files += 1;
    let Some(format) = format_of(path) else {
        out.failures.push(fail(
            unit,
            FailureKind::UnsupportedFile,
            format!("{unit}: unsupported file type (expected .txt, .md, .json, .jsonl or .parquet)"),
        ));
        return;
    };
    if format == Format::Parquet {
        read_parquet(path, unit, max_bytes, out);
        return;
    }
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) => {
            out.failures.push(fail(unit, FailureKind::Unreadable, format!("{unit}: cannot be read: {e}")));
            return;
        }
    };
    match format {
        Format::Text { markdown } => match text_document(&bytes, unit, max_bytes) {
            Ok(text) => {
                let title = markdown
                    .then(|| markdown_title(&text))
                    .flatten()
                    .or_else(|| Path::new(unit).file_stem().map(|s| s.to_string_lossy().into_owned()));
                out.docs.push(RawDoc { doc_id: None, title, text, source: unit.to_owned(), whole_file: true });
            }
            Err(f) => out.failures.push(f),
        },
        Format::JsonLines => read_json_lines(&bytes, unit, max_bytes, out),
        Format::Json => read_json_array(&bytes, unit, max_bytes, out),
        Format::Parquet => {}
    }
}

/// 1-based line of a byte offset.
fn line_of(bytes: &[u8], offset: usize) -> usize {
    bytes[..offset.min(bytes.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// Validates a whole text file: size, binary content, UTF-8, emptiness.
fn text_document(bytes: &[u8], unit: &str, max_bytes: u64) -> Result<String, Failure> {
    if bytes.len() as u64 > max_bytes {
        return Err(fail(
            unit,
            FailureKind::TooLarge,
            format!("{unit}: {} bytes, more than the limit of {max_bytes}", bytes.len()),
        ));
    }
    if let Some(pos) = bytes.iter().position(|&b| b == 0) {
        return Err(fail(
            unit,
            FailureKind::Binary,
            format!("{unit}: binary file (NUL byte at line {}, byte {pos})", line_of(bytes, pos)),
        ));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let pos = e.valid_up_to();
        fail(
            unit,
            FailureKind::InvalidUtf8,
            format!("{unit}: invalid UTF-8 at line {}, byte {pos}", line_of(bytes, pos)),
        )
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Err(fail(unit, FailureKind::Empty, format!("{unit}: empty document (no text)")));
    }
    Ok(text.to_owned())
}

/// The first `# heading` of a Markdown document.
fn markdown_title(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("# ").map(|t| t.trim().to_owned()))
        .filter(|t| !t.is_empty())
}

fn read_json_lines(bytes: &[u8], file: &str, max_bytes: u64, out: &mut ReadOutcome) {
    let mut start = 0;
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let line_no = i + 1;
        let offset = start;
        start += line.len() + 1;
        let unit = format!("{file}:{line_no}");
        let Ok(line) = std::str::from_utf8(line) else {
            let bad = std::str::from_utf8(line).err().map_or(0, |e| e.valid_up_to());
            out.failures.push(fail(
                &unit,
                FailureKind::InvalidUtf8,
                format!("{unit}: invalid UTF-8 at byte {}", offset + bad),
            ));
            continue;
        };
        let line = line.trim_start_matches('\u{feff}');
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(value) => push_json_doc(value, &unit, max_bytes, out),
            Err(e) => out.failures.push(fail(
                &unit,
                FailureKind::MalformedJson,
                format!("{unit}: malformed JSON at column {}: {e}", e.column()),
            )),
        }
    }
}

fn read_json_array(bytes: &[u8], file: &str, max_bytes: u64, out: &mut ReadOutcome) {
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text.trim_start_matches('\u{feff}'),
        Err(e) => {
            let pos = e.valid_up_to();
            out.failures.push(fail(
                file,
                FailureKind::InvalidUtf8,
                format!("{file}: invalid UTF-8 at line {}, byte {pos}", line_of(bytes, pos)),
            ));
            return;
        }
    };
    let elements: Vec<&RawValue> = match serde_json::from_str::<Vec<&RawValue>>(text) {
        Ok(elements) => elements,
        Err(_) if serde_json::from_str::<serde_json::Map<String, Value>>(text).is_ok() => {
            // A single object is a corpus of one document.
            match serde_json::from_str::<Value>(text) {
                Ok(value) => push_json_doc(value, file, max_bytes, out),
                Err(e) => out.failures.push(fail(file, FailureKind::MalformedJson, format!("{file}: {e}"))),
            }
            return;
        }
        Err(e) => {
            out.failures.push(fail(
                file,
                FailureKind::MalformedJson,
                format!("{file}: malformed JSON at line {}, column {}: {e} (expected an array of {{doc_id?, title?, text}} objects)", e.line(), e.column()),
            ));
            return;
        }
    };
    for (i, raw) in elements.into_iter().enumerate() {
        let offset = raw.get().as_ptr() as usize - text.as_ptr() as usize;
        let unit = format!("{file}#{i} (line {})", line_of(text.as_bytes(), offset));
        match serde_json::from_str::<Value>(raw.get()) {
            Ok(value) => push_json_doc(value, &unit, max_bytes, out),
            Err(e) => out.failures.push(fail(&unit, FailureKind::MalformedJson, format!("{unit}: {e}"))),
        }
    }
}

/// Turns one JSON value into a document, or a failure naming the field.
fn push_json_doc(value: Value, unit: &str, max_bytes: u64, out: &mut ReadOutcome) {
    let Value::Object(mut obj) = value else {
        out.failures.push(fail(
            unit,
            FailureKind::InvalidField,
            format!("{unit}: expected a JSON object {{doc_id?, title?, text}}"),
        ));
        return;
    };
    let doc_id = match obj.remove("doc_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(other) => {
            out.failures.push(fail(
                unit,
                FailureKind::InvalidField,
                format!("{unit}: field `doc_id` must be a non-empty string or a number, found {other}"),
            ));
            return;
        }
    };
    let title = match obj.remove("title") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(other) => {
            out.failures.push(fail(
                unit,
                FailureKind::InvalidField,
                format!("{unit}: field `title` must be a string, found {other}"),
            ));
            return;
        }
    };
    let text = match obj.remove("text") {
        Some(Value::String(s)) => s,
        None | Some(Value::Null) => {
            out.failures.push(Failure {
                doc_id,
                ..fail(unit, FailureKind::MissingText, format!("{unit}: field `text` is missing"))
            });
            return;
        }
        Some(other) => {
            let kind = type_name(&other);
            out.failures.push(Failure {
                doc_id,
                ..fail(unit, FailureKind::InvalidField, format!("{unit}: field `text` must be a string, found {kind}"))
            });
            return;
        }
    };
    push_text_doc(RawDoc { doc_id, title, text, source: unit.to_owned(), whole_file: false }, max_bytes, out);
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Checks text fields from structured inputs (size, emptiness, NUL characters).
fn push_text_doc(doc: RawDoc, max_bytes: u64, out: &mut ReadOutcome) {
    let unit = doc.source.clone();
    let failure = if doc.text.len() as u64 > max_bytes {
        Some((
            FailureKind::TooLarge,
            format!("{unit}: text is {} bytes, more than the limit of {max_bytes}", doc.text.len()),
        ))
    } else if doc.text.trim().is_empty() {
        Some((FailureKind::Empty, format!("{unit}: field `text` is empty")))
    } else if doc.text.contains('\0') {
        Some((FailureKind::Binary, format!("{unit}: field `text` contains NUL characters (binary data)")))
    } else {
        None
    };
    match failure {
        Some((kind, message)) => out.failures.push(Failure { doc_id: doc.doc_id, ..fail(unit, kind, message) }),
        None => out.docs.push(doc),
    }
}

fn read_parquet(path: &Path, file: &str, max_bytes: u64, out: &mut ReadOutcome) {
    let batches = File::open(path)
        .map_err(|e| e.to_string())
        .and_then(|f| ParquetRecordBatchReaderBuilder::try_new(f).map_err(|e| e.to_string()))
        .and_then(|b| b.build().map_err(|e| e.to_string()))
        .and_then(|r| r.collect::<std::result::Result<Vec<_>, _>>().map_err(|e| e.to_string()));
    let batches = match batches {
        Ok(batches) => batches,
        Err(e) => {
            out.failures.push(fail(file, FailureKind::Unreadable, format!("{file}: not a readable Parquet file: {e}")));
            return;
        }
    };
    let mut row = 0;
    for batch in &batches {
        let columns = (|| -> std::result::Result<_, String> {
            Ok((
                string_col(batch, "text", file)?.ok_or_else(|| format!("{file}: has no `text` column"))?,
                string_col(batch, "doc_id", file)?,
                string_col(batch, "title", file)?,
            ))
        })();
        let (texts, ids, titles) = match columns {
            Ok(c) => c,
            Err(message) => {
                out.failures.push(fail(file, FailureKind::InvalidField, message));
                return;
            }
        };
        for i in 0..batch.num_rows() {
            row += 1;
            let unit = format!("{file} row {row}");
            let doc_id = ids.as_ref().and_then(|a| a.is_valid(i).then(|| a.value(i).to_owned()));
            if !texts.is_valid(i) {
                out.failures.push(Failure {
                    doc_id,
                    ..fail(&unit, FailureKind::MissingText, format!("{unit}: `text` is null"))
                });
                continue;
            }
            let title = titles.as_ref().and_then(|a| a.is_valid(i).then(|| a.value(i).to_owned()));
            let text = texts.value(i).to_owned();
            push_text_doc(RawDoc { doc_id, title, text, source: unit, whole_file: false }, max_bytes, out);
        }
    }
}

/// A column as Utf8 (strings of any width, integers for ids), None if absent.
fn string_col(batch: &RecordBatch, name: &str, file: &str) -> std::result::Result<Option<StringArray>, String> {
    let Some(array) = batch.column_by_name(name) else { return Ok(None) };
    let castable = matches!(
        array.data_type(),
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt32
            | DataType::UInt64
    );
    if !castable
        || (name == "text" && !matches!(array.data_type(), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View))
    {
        return Err(format!("{file}: column `{name}` has type {}, expected a string column", array.data_type()));
    }
    let cast = cast(array, &DataType::Utf8).map_err(|e| format!("{file}: column `{name}`: {e}"))?;
    Ok(cast.as_any().downcast_ref::<StringArray>().cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_bytes(name: &str, bytes: &[u8]) -> ReadOutcome {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        read_corpus(&path, 1 << 20).unwrap()
    }

    fn only_failure(out: &ReadOutcome) -> &Failure {
        assert_eq!(out.failures.len(), 1, "{:?}", out.failures);
        &out.failures[0]
    }

    #[test]
    fn jsonl_bad_lines_are_named_and_good_ones_kept() {
        let data = b"{\"doc_id\": \"a\", \"title\": \"A\", \"text\": \"alpha\"}\n\
            {\"text\": \"beta\"\n\
            \n\
            {\"doc_id\": \"c\", \"text\": \"\"}\n\
            {\"doc_id\": \"d\", \"text\": \"caf\xff\"}\n\
            {\"doc_id\": 7, \"text\": 3}\n\
            {\"doc_id\": 8, \"text\": \"eight\", \"extra\": 1}\n";
        let out = read_bytes("c.jsonl", data);
        let units: Vec<_> = out.failures.iter().map(|f| (f.unit.as_str(), f.kind)).collect();
        assert_eq!(
            units,
            [
                ("c.jsonl:2", FailureKind::MalformedJson),
                ("c.jsonl:4", FailureKind::Empty),
                ("c.jsonl:5", FailureKind::InvalidUtf8),
                ("c.jsonl:6", FailureKind::InvalidField),
            ]
        );
        assert!(out.failures[3].message.contains("`text` must be a string, found a number"));
        let ids: Vec<_> = out.docs.iter().map(|d| d.doc_id.clone()).collect();
        assert_eq!(ids, [Some("a".into()), Some("8".into())]);
        assert_eq!(out.docs[1].source, "c.jsonl:7");
    }

    #[test]
    fn json_array_elements_carry_their_line() {
        let out = read_bytes("c.json", b"[\n {\"text\": \"one\"},\n {\"title\": \"no text\"}\n]");
        assert_eq!(out.docs.len(), 1);
        let f = only_failure(&out);
        assert_eq!(f.unit, "c.json#1 (line 3)");
        assert_eq!(f.kind, FailureKind::MissingText);
        let out = read_bytes("bad.json", b"[{\"text\": \"one\"},\n {\"text\" \"two\"}]");
        let f = only_failure(&out);
        assert_eq!(f.kind, FailureKind::MalformedJson);
        assert!(f.message.contains("line 2"), "{}", f.message);
    }

    #[test]
    fn text_files_invalid_utf8_binary_and_empty() {
        let f = only_failure(&read_bytes("a.txt", b"line one\nline \xc3\x28 two")).clone();
        assert_eq!(f.kind, FailureKind::InvalidUtf8);
        assert_eq!(f.message, "a.txt: invalid UTF-8 at line 2, byte 14");
        assert_eq!(only_failure(&read_bytes("b.txt", b"PK\x03\x04\x00\x00")).kind, FailureKind::Binary);
        assert_eq!(only_failure(&read_bytes("c.md", b" \n\t\n")).kind, FailureKind::Empty);
        assert_eq!(only_failure(&read_bytes("d.pdf", b"%PDF")).kind, FailureKind::UnsupportedFile);
        let out = read_bytes("e.md", "\u{feff}Intro\n\n# The Title\n\nBody".as_bytes());
        assert_eq!(out.docs[0].title.as_deref(), Some("The Title"));
        assert!(out.docs[0].text.starts_with("Intro"));
    }

    #[test]
    fn missing_corpus_is_an_error() {
        let err = read_corpus(Path::new("/nonexistent/corpus.jsonl"), 10).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/corpus.jsonl"), "{err}");
    }

    #[test]
    fn parquet_rows_are_read_with_ids_titles_and_row_numbers() {
        use arrow::array::Int64Array;
        use arrow::datatypes::{Field, Schema};
        use std::sync::Arc;
        let schema = Arc::new(Schema::new(vec![
            Field::new("doc_id", DataType::Int64, true),
            Field::new("title", DataType::Utf8, true),
            Field::new("text", DataType::LargeUtf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![Some(10), None, Some(12)])),
                Arc::new(StringArray::from(vec![Some("Ten"), None, None])),
                Arc::new(arrow::array::LargeStringArray::from(vec![Some("ten text"), Some("no id"), None])),
            ],
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.parquet");
        let mut writer = parquet::arrow::ArrowWriter::try_new(File::create(&path).unwrap(), schema, None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let out = read_corpus(&path, 1 << 20).unwrap();
        assert_eq!(out.docs.len(), 2);
        assert_eq!(out.docs[0].doc_id.as_deref(), Some("10"));
        assert_eq!(out.docs[0].title.as_deref(), Some("Ten"));
        assert_eq!(out.docs[1].doc_id, None);
        assert_eq!(out.docs[1].source, "c.parquet row 2");
        let f = only_failure(&out);
        assert_eq!(
            (f.unit.as_str(), f.kind, f.doc_id.as_deref()),
            ("c.parquet row 3", FailureKind::MissingText, Some("12"))
        );

        // A Parquet file without a text column, and a file that is not Parquet at all.
        let out = read_bytes("x.parquet", b"PAR1 not really");
        assert_eq!(only_failure(&out).kind, FailureKind::Unreadable);
    }

    #[cfg(unix)]
    #[test]
    fn unreadable_files_in_a_folder_are_failures() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ok.txt"), "fine").unwrap();
        std::os::unix::fs::symlink(dir.path().join("missing-target.txt"), dir.path().join("gone.txt")).unwrap();
        let out = read_corpus(dir.path(), 1 << 20).unwrap();
        assert_eq!(out.docs.len(), 1);
        let f = only_failure(&out);
        assert_eq!((f.unit.as_str(), f.kind), ("gone.txt", FailureKind::Unreadable));
        assert!(f.message.starts_with("gone.txt: cannot be read:"), "{}", f.message);
    }

    #[test]
    fn oversized_documents_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.txt");
        std::fs::write(&path, "x".repeat(100)).unwrap();
        let out = read_corpus(&path, 10).unwrap();
        assert_eq!(only_failure(&out).kind, FailureKind::TooLarge);
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        /// Every document has text, and every unit names the file it came from.
        fn well_formed(out: &ReadOutcome, file: &str) -> std::result::Result<(), TestCaseError> {
            for d in &out.docs {
                prop_assert!(!d.text.trim().is_empty(), "{d:?}");
                prop_assert!(d.source.starts_with(file), "{d:?}");
            }
            for f in &out.failures {
                prop_assert!(f.unit.starts_with(file) && f.message.starts_with(file), "{f:?}");
            }
            Ok(())
        }

        fn json_value() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::from),
                any::<i64>().prop_map(Value::from),
                any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
                any::<String>().prop_map(Value::from),
            ];
            leaf.prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                    prop::collection::btree_map(
                        prop_oneof![
                            Just("text".to_owned()),
                            Just("doc_id".to_owned()),
                            Just("title".to_owned()),
                            "[a-z]{1,5}"
                        ],
                        inner,
                        0..4
                    )
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        /// A corpus record: mostly the expected shape, with any strings, or any JSON value.
        fn record() -> impl Strategy<Value = Value> {
            prop_oneof![
                3 => (any::<String>(), proptest::option::of("\\PC{0,10}"), proptest::option::of(any::<String>()))
                    .prop_map(|(text, id, title)| serde_json::json!({"text": text, "doc_id": id, "title": title})),
                1 => json_value(),
            ]
        }

        /// A line of a JSON-lines file: a record, or any bytes (never a newline).
        fn line() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                3 => record().prop_map(|v| v.to_string().into_bytes()),
                1 => prop::collection::vec(any::<u8>(), 0..40)
                    .prop_map(|b| b.into_iter().filter(|&c| c != b'\n').collect()),
            ]
        }

        proptest! {
            #![proptest_config(crate::fuzz_config())]

            #[test]
            fn fuzz_every_jsonl_line_is_a_document_or_a_failure(lines in prop::collection::vec(line(), 0..16)) {
                let out = read_bytes("c.jsonl", &lines.join(&b'\n'));
                let blank = |l: &Vec<u8>| std::str::from_utf8(l).is_ok_and(|s| s.trim_start_matches('\u{feff}').trim().is_empty());
                let expected = lines.iter().filter(|l| !blank(l)).count();
                prop_assert_eq!(out.docs.len() + out.failures.len(), expected);
                well_formed(&out, "c.jsonl")?;
            }

            #[test]
            fn fuzz_every_json_element_is_a_document_or_a_failure(records in prop::collection::vec(record(), 0..10)) {
                let out = read_bytes("c.json", Value::from(records.clone()).to_string().as_bytes());
                prop_assert_eq!(out.docs.len() + out.failures.len(), records.len());
                well_formed(&out, "c.json")?;
            }

            #[test]
            fn fuzz_any_bytes_in_any_format_are_read_or_refused(bytes in prop::collection::vec(any::<u8>(), 0..400), ext in prop_oneof![Just("json"), Just("jsonl"), Just("md"), Just("txt"), Just("parquet")]) {
                let file = format!("c.{ext}");
                let out = read_bytes(&file, &bytes);
                well_formed(&out, &file)?;
                if matches!(ext, "md" | "txt") {
                    prop_assert_eq!(out.docs.len() + out.failures.len(), 1);
                }
            }

            #[test]
            fn fuzz_every_parquet_row_is_a_document_or_a_failure(
                rows in prop::collection::vec((proptest::option::of(any::<String>()), proptest::option::of("\\PC{0,8}"), proptest::option::of(any::<String>())), 0..12),
                ids_as_numbers in any::<bool>(),
            ) {
                use std::sync::Arc;
                use arrow::array::{ArrayRef, Int64Array};
                let texts: ArrayRef = Arc::new(rows.iter().map(|r| r.0.clone()).collect::<StringArray>());
                let ids: ArrayRef = if ids_as_numbers {
                    Arc::new((0..rows.len() as i64).map(Some).collect::<Int64Array>())
                } else {
                    Arc::new(rows.iter().map(|r| r.1.clone()).collect::<StringArray>())
                };
                let titles: ArrayRef = Arc::new(rows.iter().map(|r| r.2.clone()).collect::<StringArray>());
                let batch = RecordBatch::try_from_iter([("text", texts), ("doc_id", ids), ("title", titles)]).unwrap();
                let mut bytes = Vec::new();
                let mut writer = parquet::arrow::ArrowWriter::try_new(&mut bytes, batch.schema(), None).unwrap();
                writer.write(&batch).unwrap();
                writer.close().unwrap();
                let out = read_bytes("c.parquet", &bytes);
                prop_assert_eq!(out.docs.len() + out.failures.len(), rows.len());
                well_formed(&out, "c.parquet")?;
            }
        }
    }
}
