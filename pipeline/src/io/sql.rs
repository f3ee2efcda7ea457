//! Read-only SQL over an index: every table is registered in DataFusion under its name
//! (`documents`, `chunks`, …, and `kb.entities`, `kb.hyperedges`, … for the merged tables).
//!
//! Statements that would create, write or configure anything (DDL, DML, `COPY`, `SET`) are
//! refused, and no function that reads arbitrary files is registered, so a query can read the
//! index and nothing else.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::catalog::MemorySchemaProvider;
use datafusion::datasource::MemTable;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::execution::context::{SQLOptions, SessionConfig, SessionContext};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::sql::parser::DFParser;
use flexstruct_schemas::Table;

use super::index::Index;
use super::lock::{self, Lock, LockName};
use super::parquet::{check_footer, check_part};
use super::remote::RemoteIndex;
use crate::core::{Error, Result, threads};

/// Output formats of query results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// An aligned text table for people; long values are cut at the width limit.
    Table,
    /// CSV with a header line.
    Csv,
    /// One JSON array of row objects.
    Json,
    /// One JSON object per line.
    JsonLines,
}

impl std::str::FromStr for OutputFormat {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "table" => Ok(OutputFormat::Table),
            "csv" => Ok(OutputFormat::Csv),
            "json" => Ok(OutputFormat::Json),
            "jsonl" | "ndjson" => Ok(OutputFormat::JsonLines),
            _ => Err(format!("unknown format `{s}` (expected table, csv, json or jsonl)")),
        }
    }
}

/// Bounds on what one session of people's queries may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqlLimits {
    /// Memory of query execution (DataFusion's memory pool: joins, sorts, aggregations, recursive
    /// queries) and, separately, of the collected result, in bytes.
    pub memory_bytes: usize,
    /// Wall-clock time of each statement.
    pub timeout: std::time::Duration,
}

/// A DataFusion session with the tables of one index registered.
pub struct IndexSql {
    ctx: SessionContext,
    limits: Option<SqlLimits>,
    /// Held while the session may read `kb/` tables, so that a merge does not rewrite them
    /// underneath.
    _kb_lock: Option<Lock>,
}

impl std::fmt::Debug for IndexSql {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexSql").finish_non_exhaustive()
    }
}

impl IndexSql {
    /// Registers every table of `index`. Tables that do not exist yet are registered empty (with
    /// their schema), so queries over a partly built index return no rows rather than failing.
    /// Every part file is checked against its schema first; a mismatch names table, file and column.
    pub async fn open(index: &Index) -> Result<IndexSql> {
        IndexSql::open_limited(index, None).await
    }

    /// [`IndexSql::open`] with people's queries bounded by `limits`: a statement that needs more
    /// memory or time fails with an error saying which limit it hit.
    pub async fn open_limited(index: &Index, limits: Option<SqlLimits>) -> Result<IndexSql> {
        IndexSql::session(index, &Table::ALL, limits, true).await
    }

    /// Registers only `tables` of `index` (checked the same way), without the kb lock: what the
    /// merge reads, which holds that lock exclusively itself.
    pub async fn open_tables(index: &Index, tables: &[Table]) -> Result<IndexSql> {
        IndexSql::session(index, tables, None, false).await
    }

    async fn session(index: &Index, tables: &[Table], limits: Option<SqlLimits>, lock_kb: bool) -> Result<IndexSql> {
        let ctx = new_context(limits)?;
        let kb_lock =
            if lock_kb && tables.iter().any(|t| t.is_kb()) { Some(lock::shared(index, LockName::Kb)?) } else { None };
        for &table in tables {
            let parts = index.parts(table)?;
            for part in &parts {
                check_part(part, table)?;
            }
            let listing = match parts.first() {
                None => None,
                // Vector columns have the width of their model: take the schema from a part file.
                Some(first) if has_vectors(table) => {
                    Some((vec![folder_url(&index.table_dir(table))?], file_schema(first)?))
                }
                Some(_) => Some((vec![folder_url(&index.table_dir(table))?], table.schema())),
            };
            register(&ctx, table, listing)?;
        }
        Ok(IndexSql { ctx, limits, _kb_lock: kb_lock })
    }

    /// Registers bucket `bucket` of each of `tables` (per-document tables), read into memory:
    /// what the merge of one bucket reads.
    pub async fn open_bucket(index: &Index, tables: &[Table], bucket: u32) -> Result<IndexSql> {
        let ctx = new_context(None)?;
        for &table in tables {
            let path = index.bucket_path(table, bucket);
            // The file's schema, not the first batch's: a part without rows has none, and its
            // vector column must keep its model's width.
            let (batches, schema) = if path.is_file() {
                (super::parquet::read_part(&path, table)?, file_schema(&path)?)
            } else {
                (Vec::new(), table.schema())
            };
            let rows = MemTable::try_new(schema, vec![batches])?;
            ctx.register_table(table.sql_name().as_str(), Arc::new(rows))?;
        }
        Ok(IndexSql { ctx, limits: None, _kb_lock: None })
    }

    /// [`IndexSql::open_limited`] over an index on object storage, read in place: every part's
    /// footer is checked where it lies, and DataFusion reads the objects through the same store.
    /// The kb is the one its commit record names (no lock is needed: a merge writing meanwhile
    /// writes objects of its own and commits them after).
    pub async fn open_remote(remote: &RemoteIndex, limits: Option<SqlLimits>) -> Result<IndexSql> {
        let ctx = new_context(limits)?;
        let store_url = url::Url::parse(&remote.store_url())
            .map_err(|e| Error::Internal(format!("{} is not a URL: {e}", remote.store_url())))?;
        ctx.register_object_store(&store_url, remote.store().clone());
        let files = remote.files().await?;
        remote.check_exists(&files)?;
        for table in Table::ALL {
            let mut urls = Vec::new();
            let mut schema = None;
            for meta in RemoteIndex::parts(&files, table) {
                let location = format!("{}/{}", remote.store_url(), meta.location);
                let footer = remote.footer(meta).await?;
                check_footer(footer.metadata(), footer.schema(), table, &location)?;
                schema.get_or_insert_with(|| footer.schema().clone());
                urls.push(ListingTableUrl::parse(&location)?);
            }
            let listing = schema.map(|schema| (urls, if has_vectors(table) { schema } else { table.schema() }));
            register(&ctx, table, listing)?;
        }
        Ok(IndexSql { ctx, limits, _kb_lock: None })
    }

    /// The DataFusion session (for the pipeline's own queries, which are not read-only
    /// checked; people's queries go through [`IndexSql::run`]).
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// Runs every statement of `sql` (separated by `;`) and returns each one's rows.
    pub async fn run(&self, sql: &str) -> Result<Vec<Vec<RecordBatch>>> {
        let statements = DFParser::parse_sql(sql).map_err(|e| Error::Sql {
            statement: Some(abbreviate(sql, 60)),
            problem: "SQL syntax error".into(),
            source: Some(Box::new(e)),
        })?;
        if statements.is_empty() {
            return Err(Error::Sql { statement: None, problem: "no SQL statement given".into(), source: None });
        }
        let read_only = SQLOptions::new().with_allow_ddl(false).with_allow_dml(false).with_allow_statements(false);
        let mut results = Vec::new();
        for statement in statements {
            let text = statement.to_string();
            let plan = self.ctx.state().statement_to_plan(statement).await?;
            if let Err(e) = read_only.verify_plan(&plan) {
                let statement = abbreviate(&text, 60);
                return Err(Error::Sql {
                    problem: format!(
                        "refused `{statement}`: the index is queried read-only (SELECT, WITH, SHOW, DESCRIBE and EXPLAIN \
                         only; nothing may be created, written or changed)"
                    ),
                    statement: Some(statement),
                    source: Some(Box::new(e)),
                });
            }
            let frame = self.ctx.execute_logical_plan(plan).await?;
            let schema = Arc::new(frame.schema().as_arrow().clone());
            let mut batches = match self.limits {
                None => frame.collect().await?,
                Some(limits) => {
                    let collect = collect_bounded(frame, limits.memory_bytes, &text);
                    tokio::time::timeout(limits.timeout, collect).await.map_err(|_| Error::Sql {
                        problem: format!(
                            "`{}` ran longer than the time limit of {} s (--timeout): narrow it (WHERE, LIMIT) or \
                             raise the limit",
                            abbreviate(&text, 60),
                            limits.timeout.as_secs_f64()
                        ),
                        statement: Some(abbreviate(&text, 60)),
                        source: None,
                    })??
                }
            };
            // No rows still has columns: formats print the header.
            if batches.is_empty() {
                batches.push(RecordBatch::new_empty(schema));
            }
            results.push(batches);
        }
        Ok(results)
    }
}

/// A statement's rows, failing once they hold more than `max_bytes` (the memory pool bounds the
/// execution; this bounds what is kept for printing).
async fn collect_bounded(
    frame: datafusion::dataframe::DataFrame,
    max_bytes: usize,
    text: &str,
) -> Result<Vec<RecordBatch>> {
    use futures::StreamExt;
    let mut stream = frame.execute_stream().await?;
    let (mut batches, mut bytes) = (Vec::new(), 0usize);
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        bytes += batch.get_array_memory_size();
        if bytes > max_bytes {
            return Err(Error::Sql {
                problem: format!(
                    "the result of `{}` is larger than the memory limit of {} MiB (--memory-limit): add a LIMIT or \
                     aggregate",
                    abbreviate(text, 60),
                    max_bytes >> 20
                ),
                statement: Some(abbreviate(text, 60)),
                source: None,
            });
        }
        batches.push(batch);
    }
    Ok(batches)
}

/// A session with the `kb` schema, bounded by `limits`.
fn new_context(limits: Option<SqlLimits>) -> Result<SessionContext> {
    let config = SessionConfig::new().with_information_schema(true).with_target_partitions(threads::count());
    let mut runtime = RuntimeEnvBuilder::new();
    if let Some(limits) = limits {
        runtime = runtime.with_memory_limit(limits.memory_bytes, 1.0);
    }
    let ctx = SessionContext::new_with_config_rt(config, runtime.build_arc()?);
    let catalog =
        ctx.catalog("datafusion").ok_or_else(|| Error::Internal("DataFusion has no default catalog".into()))?;
    catalog.register_schema("kb", Arc::new(MemorySchemaProvider::new()))?;
    Ok(ctx)
}

/// Whether the table has a vector column (whose width is its model's, so its schema comes from
/// a part file).
fn has_vectors(table: Table) -> bool {
    table.schema().field_with_name(flexstruct_schemas::col::EMBEDDING).is_ok()
}

/// Registers `table` under its name: its part files at the URL with the schema, or, when it has
/// none yet, an empty table of its schema (so that queries over a partly built index return no
/// rows rather than failing).
fn register(
    ctx: &SessionContext,
    table: Table,
    listing: Option<(Vec<ListingTableUrl>, arrow::datatypes::SchemaRef)>,
) -> Result<()> {
    let name = table.sql_name();
    match listing {
        None => {
            let empty = MemTable::try_new(table.schema(), vec![vec![]])?;
            ctx.register_table(name.as_str(), Arc::new(empty))?;
        }
        Some((urls, schema)) => {
            let options = ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
            let config =
                ListingTableConfig::new_with_multi_paths(urls).with_listing_options(options).with_schema(schema);
            ctx.register_table(name.as_str(), Arc::new(ListingTable::try_new(config)?))?;
        }
    }
    Ok(())
}

/// The `file://` URL of a local folder, taken literally: `[`, `*` and `?` in its path are
/// characters of a name, never a glob pattern.
fn folder_url(dir: &std::path::Path) -> Result<ListingTableUrl> {
    let absolute = std::path::absolute(dir).map_err(Error::io("resolving the table folder", dir))?;
    let url = url::Url::from_directory_path(&absolute)
        .map_err(|()| Error::Internal(format!("{} cannot be written as a file URL", absolute.display())))?;
    Ok(ListingTableUrl::try_new(url, None)?)
}

/// The Arrow schema stored in a Parquet file.
fn file_schema(path: &std::path::Path) -> Result<arrow::datatypes::SchemaRef> {
    let file = std::fs::File::open(path).map_err(Error::io("opening", path))?;
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(Error::parquet("reading the Parquet footer", path))?;
    Ok(builder.schema().clone())
}

fn abbreviate(s: &str, max: usize) -> String {
    let one_line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        format!("{}…", one_line.chars().take(max).collect::<String>())
    }
}

/// Renders query results. `max_width` (code points) cuts long values in the table format
/// (0 = no limit); newlines in values are shown as `⏎` there.
pub fn format_batches(batches: &[RecordBatch], format: OutputFormat, max_width: usize) -> Result<String> {
    match format {
        OutputFormat::Table => {
            let shown = batches.iter().map(|b| displayable(b, Some(max_width))).collect::<Result<Vec<_>>>()?;
            Ok(format!("{}\n", arrow::util::pretty::pretty_format_batches(&shown)?))
        }
        OutputFormat::Csv => {
            let flat = batches.iter().map(|b| displayable(b, None)).collect::<Result<Vec<_>>>()?;
            let mut out = Vec::new();
            {
                let mut writer = arrow::csv::WriterBuilder::new().with_header(true).build(&mut out);
                for batch in &flat {
                    writer.write(batch)?;
                }
            }
            String::from_utf8(out).map_err(|e| Error::Internal(format!("CSV output is not UTF-8: {e}")))
        }
        OutputFormat::Json => {
            let mut out = json::<arrow::json::writer::JsonArray>(batches)?;
            if out.is_empty() {
                out.push_str("[]");
            }
            out.push('\n');
            Ok(out)
        }
        OutputFormat::JsonLines => json::<arrow::json::writer::LineDelimited>(batches),
    }
}

/// Batches as JSON in layout `F` (array or lines), nulls written out.
fn json<F: arrow::json::writer::JsonFormat>(batches: &[RecordBatch]) -> Result<String> {
    let mut writer = arrow::json::WriterBuilder::new().with_explicit_nulls(true).build::<_, F>(Vec::new());
    writer.write_batches(&batches.iter().collect::<Vec<_>>())?;
    writer.finish()?;
    String::from_utf8(writer.into_inner()).map_err(|e| Error::Internal(format!("JSON output is not UTF-8: {e}")))
}

/// Turns nested columns (lists, vectors, structs) into their display strings, which CSV and the
/// text table need; with `max_width`, also cuts long strings and makes newlines visible.
fn displayable(batch: &RecordBatch, max_width: Option<usize>) -> Result<RecordBatch> {
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        let nested = field.data_type().is_nested();
        let is_text = matches!(field.data_type(), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
        if !(nested || is_text && max_width.is_some()) {
            fields.push(field.as_ref().clone());
            columns.push(column.clone());
            continue;
        }
        let formatter = ArrayFormatter::try_new(column.as_ref(), &FormatOptions::default())?;
        let values: StringArray = (0..column.len())
            .map(|i| {
                column.is_valid(i).then(|| {
                    let s = formatter.value(i).to_string();
                    match max_width {
                        Some(w) => cut(&s.replace('\n', "⏎"), w),
                        None => s,
                    }
                })
            })
            .collect();
        fields.push(Field::new(field.name(), DataType::Utf8, true));
        columns.push(Arc::new(values));
    }
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?)
}

fn cut(s: &str, width: usize) -> String {
    if width == 0 || s.chars().count() <= width {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(width.saturating_sub(1)).collect::<String>())
    }
}
