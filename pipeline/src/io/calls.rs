//! The `llm_calls` table: one row per HTTP attempt and per cache hit of an LLM or embedding
//! endpoint, appended by every stage that calls one (the paper's Table 3 is one query over it).

use std::sync::Arc;

use arrow::array::{BooleanArray, Int64Array, RecordBatch, StringArray};
use flexstruct_schemas::Table;

use super::index::Index;
use super::manifest::run_tag;
use super::parquet::write_part;
use crate::core::Result;

/// A row of `llm_calls`.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRecord {
    /// Stage.
    pub stage: String,
    /// Document.
    pub doc_id: Option<String>,
    /// Purpose.
    pub purpose: String,
    /// Model.
    pub model: String,
    /// SHA-256 of (model, prompt, sampling parameters): the same for the first call and every
    /// cache hit of a request, so costs can be counted once per request.
    pub request_id: String,
    /// Prompt tokens (of the original call for a cache hit).
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Whether the counts are cl100k estimates (no `usage` in the answer).
    pub tokens_estimated: bool,
    /// Milliseconds this attempt took (0 for a cache hit).
    pub latency_ms: u64,
    /// Answered from the cache.
    pub cached: bool,
    /// `ok`, `http_<status>`, `timeout`, `connection`, `bad_response` (a body that could not be read,
    /// retried), `refused` (a readable answer that does not answer the request, e.g. a re-ranker
    /// that left a document unscored: not retried, not cached), `length` (cut at `max_tokens`),
    /// `format_refused_json_schema` / `format_refused_json_object` (the server refused that
    /// `response_format`: the request was sent again with the next form down, which the client
    /// keeps to for the rest of the run).
    pub status: String,
    /// The `response_format` type the request carried (`json_schema`, `json_object`; None: no
    /// form, or a request that asks for no JSON). Null in parts written before the column.
    pub response_format: Option<String>,
}

/// Calls as a batch of the `llm_calls` table.
pub fn calls_batch(calls: &[CallRecord]) -> Result<RecordBatch> {
    let strings = |f: fn(&CallRecord) -> Option<&str>| Arc::new(calls.iter().map(f).collect::<StringArray>()) as _;
    let ints =
        |f: fn(&CallRecord) -> u64| Arc::new(calls.iter().map(|c| Some(f(c) as i64)).collect::<Int64Array>()) as _;
    let bools = |f: fn(&CallRecord) -> bool| Arc::new(calls.iter().map(|c| Some(f(c))).collect::<BooleanArray>()) as _;
    Ok(RecordBatch::try_new(
        Table::LlmCalls.schema(),
        vec![
            strings(|c| Some(&c.stage)),
            strings(|c| c.doc_id.as_deref()),
            strings(|c| Some(&c.purpose)),
            strings(|c| Some(&c.model)),
            strings(|c| Some(&c.request_id)),
            ints(|c| c.prompt_tokens),
            ints(|c| c.completion_tokens),
            bools(|c| c.tokens_estimated),
            ints(|c| c.latency_ms),
            bools(|c| c.cached),
            strings(|c| Some(&c.status)),
            strings(|c| c.response_format.as_deref()),
        ],
    )?)
}

/// Appends call records to `llm_calls`. The calls are a log: each run of a stage writes its
/// own part (`scope` tells parts of one run apart, e.g. a bucket), numbered within the process so
/// that a process that appends more than once for one scope (a server running one stage for
/// every update, flushing its queries' calls now and then) never replaces its earlier part.
pub fn append_calls(index: &Index, stage: &str, scope: &str, calls: &[CallRecord]) -> Result<()> {
    static APPENDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    if calls.is_empty() {
        return Ok(());
    }
    let n = APPENDED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = index.table_dir(Table::LlmCalls).join(format!("part-{stage}-{scope}-{}-{n}.parquet", run_tag()));
    write_part(&path, Table::LlmCalls, "", &[calls_batch(calls)?])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_appends_twice_for_one_scope_keeps_both_parts() {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open_or_create(dir.path(), Some(4)).unwrap();
        let call = |purpose: &str| CallRecord {
            stage: "query".into(),
            doc_id: None,
            purpose: purpose.into(),
            model: "m".into(),
            request_id: "r".into(),
            prompt_tokens: 1,
            completion_tokens: 1,
            tokens_estimated: false,
            latency_ms: 1,
            cached: false,
            status: "ok".into(),
            response_format: None,
        };
        append_calls(&index, "query", "all", &[call("answer")]).unwrap();
        append_calls(&index, "query", "all", &[call("answer"), call("query_entities")]).unwrap();
        let rows: usize =
            crate::io::parquet::read_table(&index, Table::LlmCalls).unwrap().iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows, 3);
    }

    #[test]
    fn parts_written_before_the_response_format_column_are_read_with_it_null() {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open_or_create(dir.path(), Some(4)).unwrap();
        let mut call = CallRecord {
            stage: "extract".into(),
            doc_id: Some("d".into()),
            purpose: "items".into(),
            model: "m".into(),
            request_id: "r".into(),
            prompt_tokens: 10,
            completion_tokens: 5,
            tokens_estimated: false,
            latency_ms: 1,
            cached: false,
            status: "ok".into(),
            response_format: Some("json_object".into()),
        };
        append_calls(&index, "extract", "new", std::slice::from_ref(&call)).unwrap();
        // A part of layout 1, as written before the column existed.
        call.response_format = None;
        let batch = calls_batch(&[call]).unwrap();
        let old = batch.project(&(0..batch.num_columns() - 1).collect::<Vec<_>>()).unwrap();
        let metadata = vec![
            parquet::file::metadata::KeyValue::new(flexstruct_schemas::meta::TABLE.to_owned(), "llm_calls".to_owned()),
            parquet::file::metadata::KeyValue::new(flexstruct_schemas::meta::SCHEMA_VERSION.to_owned(), "1".to_owned()),
        ];
        let props =
            parquet::file::properties::WriterProperties::builder().set_key_value_metadata(Some(metadata)).build();
        let path = index.table_dir(Table::LlmCalls).join("part-old.parquet");
        let mut writer =
            parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), old.schema(), Some(props))
                .unwrap();
        writer.write(&old).unwrap();
        writer.close().unwrap();

        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let rows = runtime.block_on(async {
            let session = crate::io::sql::IndexSql::open(&index).await.unwrap();
            let query =
                "SELECT coalesce(response_format, 'null') AS f, count(*) AS n FROM llm_calls GROUP BY 1 ORDER BY 1";
            let batches = session.run(query).await.unwrap().concat();
            crate::io::sql::format_batches(&batches, crate::io::sql::OutputFormat::Csv, 0).unwrap()
        });
        assert_eq!(rows, "f,n\njson_object,1\nnull,1\n");
        // Other layouts of the log are still refused by name.
        assert!(Table::LlmCalls.columns_added_since(0).is_none());
    }
}
