//! The merge stage: DataFusion SQL unions the per-document tables into the global collections
//! of `kb/` (paper §3.2), joins in the vectors of the configured embedding model, builds the
//! alias table and per-document statistics.
//!
//! Merge reads only per-document tables and rewrites `kb/` whole, so adding or removing a
//! document (rebuilding its rows) and merging again gives exactly the kb a full rebuild gives.
//! It is skipped when no input part changed since the last merge.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, ListBuilder, RecordBatch, StringArray, StringBuilder};
use arrow::datatypes::{DataType, Field};
use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
use flexstruct_schemas::{Table, col};
use serde_json::json;

use crate::embed::unit;
use crate::error::{Error, Result};
use crate::extract::entities::{abbreviation_aliases, normalize};
use crate::io::{part_fingerprint, remove_part, write_part};
use crate::sql::IndexSql;
use crate::stage::{RunContext, StageMetrics, fingerprint};

/// Stage name.
pub const STAGE: &str = "merge";
const VERSION: &str = "1";

/// Inputs of the merge: every per-document table (embeddings included).
fn inputs() -> impl Iterator<Item = Table> {
    Table::ALL.into_iter().filter(|t| t.is_per_document())
}

/// The SQL of every kb table. `{model}` is the embedding model whose vectors are joined.
pub fn kb_queries(model: &str) -> Vec<(Table, String)> {
    use col::*;
    let model = model.replace('\'', "''");
    let vector = |unit: &str, id: &str| {
        format!(
            "LEFT JOIN (SELECT {ID}, {MODEL}, {EMBEDDING} FROM embeddings WHERE {UNIT} = '{unit}' AND {MODEL} = '{model}') v \
             ON v.{ID} = {id}"
        )
    };
    vec![
        (
            Table::KbEntities,
            format!(
                "SELECT e.{ENTITY_ID}, e.{DOC_ID}, e.{NAME}, e.{NORM_NAME}, e.{SUMMARY}, e.{HYPERDEGREE}, e.{ALIASES}, \
                 v.{MODEL}, v.{EMBEDDING} FROM entities e {} ORDER BY e.{DOC_ID}, e.{ENTITY_ID}",
                vector(unit::ENTITY, &format!("e.{ENTITY_ID}"))
            ),
        ),
        (
            Table::KbHyperedges,
            format!(
                "SELECT h.{HYPEREDGE_ID}, h.{DOC_ID}, h.{ITEM_IDX}, h.{TEXT}, h.{REF_TEXT}, h.{REF_START}, h.{REF_END}, \
                 v.{MODEL}, v.{EMBEDDING} FROM hyperedges h {} ORDER BY h.{DOC_ID}, h.{ITEM_IDX}",
                vector(unit::HYPEREDGE, &format!("h.{HYPEREDGE_ID}"))
            ),
        ),
        (
            Table::KbEdges,
            format!(
                "SELECT g.{EDGE_ID}, g.{DOC_ID}, g.{SOURCE_ID}, g.{TARGET_ID}, g.{TEXT}, g.{HYPEREDGE_ID}, \
                 v.{MODEL}, v.{EMBEDDING} FROM edges g {} ORDER BY g.{DOC_ID}, g.{EDGE_ID}",
                vector(unit::EDGE, &format!("g.{EDGE_ID}"))
            ),
        ),
        (
            Table::KbChunks,
            format!(
                "SELECT c.{DOC_ID}, c.{CHUNK_IDX}, c.{TEXT}, c.{N_TOKENS}, c.{CHAR_START}, c.{CHAR_END}, \
                 v.{MODEL}, v.{EMBEDDING} FROM chunks c {} ORDER BY c.{DOC_ID}, c.{CHUNK_IDX}",
                vector(unit::CHUNK, &format!("concat(c.{DOC_ID}, '#', CAST(c.{CHUNK_IDX} AS VARCHAR))"))
            ),
        ),
        (
            Table::KbHyperedgeEntities,
            format!("SELECT {HYPEREDGE_ID}, {ENTITY_ID}, {DOC_ID} FROM hyperedge_entities ORDER BY {DOC_ID}, {HYPEREDGE_ID}, {ENTITY_ID}"),
        ),
        (Table::KbClusters, format!("SELECT {CLUSTER_ID}, {DOC_ID}, {TEXT} FROM clusters ORDER BY {DOC_ID}, {CLUSTER_ID}")),
        (
            Table::KbClusterMembers,
            format!(
                "SELECT {CLUSTER_ID}, {DOC_ID}, {HYPEREDGE_ID}, {PROBABILITY} FROM cluster_members \
                 ORDER BY {DOC_ID}, {CLUSTER_ID}, {HYPEREDGE_ID}"
            ),
        ),
        (
            // Every normalised form that names an entity: its name, its aliases, and the
            // abbreviations its summary defines for it.
            Table::KbAliases,
            format!(
                "SELECT DISTINCT {ALIAS}, {ENTITY_ID}, {DOC_ID}, {ORIGIN} FROM ( \
                   SELECT {NORM_NAME} AS {ALIAS}, {ENTITY_ID}, {DOC_ID}, 'name' AS {ORIGIN} FROM entities \
                   UNION ALL \
                   SELECT normalize_name(a) AS {ALIAS}, {ENTITY_ID}, {DOC_ID}, 'alias' AS {ORIGIN} \
                     FROM (SELECT unnest({ALIASES}) AS a, {ENTITY_ID}, {DOC_ID} FROM entities) \
                   UNION ALL \
                   SELECT unnest(summary_aliases({NORM_NAME}, {SUMMARY})) AS {ALIAS}, {ENTITY_ID}, {DOC_ID}, 'summary' AS {ORIGIN} \
                     FROM entities \
                 ) WHERE {ALIAS} <> '' ORDER BY {ALIAS}, {DOC_ID}, {ENTITY_ID}, {ORIGIN}"
            ),
        ),
        (
            Table::KbDocStats,
            format!(
                "SELECT d.{DOC_ID}, \
                   coalesce(c.n, 0) AS {N_CHUNKS}, coalesce(i.n, 0) AS {N_ITEMS}, coalesce(h.n, 0) AS {N_HYPEREDGES}, \
                   coalesce(e.n, 0) AS {N_ENTITIES}, coalesce(g.n, 0) AS {N_EDGES}, coalesce(k.n, 0) AS {N_CLUSTERS} \
                 FROM documents d \
                 LEFT JOIN (SELECT {DOC_ID}, count(*) AS n FROM chunks GROUP BY {DOC_ID}) c ON c.{DOC_ID} = d.{DOC_ID} \
                 LEFT JOIN (SELECT {DOC_ID}, count(*) AS n FROM items GROUP BY {DOC_ID}) i ON i.{DOC_ID} = d.{DOC_ID} \
                 LEFT JOIN (SELECT {DOC_ID}, count(*) AS n FROM hyperedges GROUP BY {DOC_ID}) h ON h.{DOC_ID} = d.{DOC_ID} \
                 LEFT JOIN (SELECT {DOC_ID}, count(*) AS n FROM entities GROUP BY {DOC_ID}) e ON e.{DOC_ID} = d.{DOC_ID} \
                 LEFT JOIN (SELECT {DOC_ID}, count(*) AS n FROM edges GROUP BY {DOC_ID}) g ON g.{DOC_ID} = d.{DOC_ID} \
                 LEFT JOIN (SELECT {DOC_ID}, count(*) AS n FROM clusters GROUP BY {DOC_ID}) k ON k.{DOC_ID} = d.{DOC_ID} \
                 ORDER BY d.{DOC_ID}"
            ),
        ),
    ]
}

/// Registers `normalize_name(text)` and `summary_aliases(norm_name, summary)` (the
/// abbreviations a summary defines for the entity it describes).
fn register_functions(sql: &IndexSql) {
    let normalize_name = create_udf(
        "normalize_name",
        vec![DataType::Utf8],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let input = arrays[0].as_any().downcast_ref::<StringArray>().ok_or_else(|| {
                datafusion::error::DataFusionError::Internal("normalize_name expects text".into())
            })?;
            let out: StringArray = input.iter().map(|v| v.map(normalize)).collect();
            Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
        }),
    );
    let summary_aliases = create_udf(
        "summary_aliases",
        vec![DataType::Utf8, DataType::Utf8],
        DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let bad = || datafusion::error::DataFusionError::Internal("summary_aliases expects text".into());
            let names = arrays[0].as_any().downcast_ref::<StringArray>().ok_or_else(bad)?;
            let summaries = arrays[1].as_any().downcast_ref::<StringArray>().ok_or_else(bad)?;
            let mut builder = ListBuilder::new(StringBuilder::new());
            for i in 0..names.len() {
                if names.is_valid(i) && summaries.is_valid(i) {
                    for (short, long) in abbreviation_aliases(summaries.value(i)) {
                        if long == names.value(i) {
                            builder.values().append_value(short);
                        }
                    }
                }
                builder.append(true);
            }
            Ok(ColumnarValue::Array(Arc::new(builder.finish()) as ArrayRef))
        }),
    );
    sql.context().register_udf(normalize_name);
    sql.context().register_udf(summary_aliases);
}

/// Runs the merge stage (the whole index; merge does not shard).
pub fn run(ctx: &RunContext<'_>) -> Result<StageMetrics> {
    let started = std::time::Instant::now();
    if ctx.shard != crate::index::Shard::ALL {
        return Err(Error::Config(format!(
            "--shard {}: merge reads every document and runs once for the whole index, after all shards of the other stages",
            ctx.shard
        )));
    }
    let index = &ctx.index;
    let model = ctx.config.embed.model.clone();
    let mut parts = vec![STAGE.to_owned(), VERSION.to_owned(), model.clone()];
    let mut rows_in = 0u64;
    for table in inputs() {
        for part in index.parts(table)? {
            // Paths relative to the index, so that a moved or copied index stays up to date.
            let name = part.strip_prefix(index.root()).unwrap_or(&part);
            parts.push(format!("{}:{}", name.display(), part_fingerprint(&part, table)?.unwrap_or_default()));
            rows_in += crate::io::part_row_count(&part)?;
        }
    }
    let expected = fingerprint(&parts.iter().map(String::as_str).collect::<Vec<_>>());
    let queries = kb_queries(&model);
    let mut metrics = StageMetrics {
        stage: STAGE.to_owned(),
        shard: ctx.shard.to_string(),
        inputs: inputs().map(|t| t.dir().to_owned()).collect(),
        rows_in,
        ..StageMetrics::default()
    };
    ctx.progress.start(queries.len() as u64);
    let up_to_date = queries
        .iter()
        .map(|(t, _)| part_fingerprint(&kb_part(index, *t), *t))
        .collect::<Result<Vec<_>>>()?
        .iter()
        .all(|fp| fp.as_deref() == Some(expected.as_str()));
    if up_to_date {
        metrics.units_skipped = queries.len() as u64;
        ctx.progress.advance(queries.len() as u64);
        for (t, _) in &queries {
            metrics.rows_out += crate::io::part_row_count(&kb_part(index, *t))?;
        }
        metrics.seconds = started.elapsed().as_secs_f64();
        return Ok(metrics);
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::Internal(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async {
        let sql = IndexSql::open(index).await?;
        register_functions(&sql);
        for (table, query) in &queries {
            let batches = sql.context().sql(query).await?.collect().await?;
            let batches = conform(*table, batches)?;
            metrics.rows_out += crate::io::row_count(&batches) as u64;
            let path = kb_part(index, *table);
            if batches.is_empty() {
                write_part(&path, *table, &expected, &[RecordBatch::new_empty(table.schema())])?;
            } else {
                write_part(&path, *table, &expected, &batches)?;
            }
            metrics.units_done += 1;
            ctx.progress.advance(1);
        }
        // Global counts and the hyperdegree distribution, for the run record.
        let stats = sql
            .context()
            .sql(&format!(
                "SELECT CASE WHEN {h} = 1 THEN '1' WHEN {h} <= 3 THEN '2-3' WHEN {h} <= 9 THEN '4-9' \
                 WHEN {h} <= 30 THEN '10-30' ELSE '31+' END AS bin, count(*) AS n FROM entities GROUP BY 1 ORDER BY 1",
                h = col::HYPERDEGREE
            ))
            .await?
            .collect()
            .await?;
        let mut histogram = serde_json::Map::new();
        for batch in &stats {
            let bins = crate::io::string_column(batch, "bin")?;
            let counts = crate::io::typed::<arrow::array::Int64Array>(batch, "n")?;
            for i in 0..batch.num_rows() {
                histogram.insert(bins.value(i).to_owned(), json!(counts.value(i)));
            }
        }
        metrics.details.insert("hyperdegree_histogram".into(), serde_json::Value::Object(histogram));
        Ok::<(), Error>(())
    })?;
    // Parts of earlier layouts (none yet) would be removed here; kb tables have one part each.
    for (table, _) in &queries {
        for part in index.parts(*table)? {
            if part != kb_part(index, *table) {
                remove_part(&part)?;
            }
        }
    }
    metrics.details.insert("model".into(), model.into());
    metrics.seconds = started.elapsed().as_secs_f64();
    Ok(metrics)
}

fn kb_part(index: &crate::index::Index, table: Table) -> std::path::PathBuf {
    index.table_dir(table).join("part-0000.parquet")
}

/// Gives query results the exact field names and nullability of the kb table (DataFusion
/// marks computed columns nullable and may name them after the expression).
fn conform(table: Table, batches: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
    let template = table.schema();
    batches
        .into_iter()
        .map(|batch| {
            let fields: Vec<Field> = template
                .fields()
                .iter()
                .zip(batch.schema().fields())
                .map(|(want, got)| Field::new(want.name(), got.data_type().clone(), want.is_nullable() || got.is_nullable() && want.is_nullable()))
                .collect();
            for (f, column) in fields.iter().zip(batch.columns()) {
                if !f.is_nullable() && column.null_count() > 0 {
                    return Err(Error::Internal(format!("kb table {table}: column `{}` has nulls", f.name())));
                }
            }
            Ok(RecordBatch::try_new(Arc::new(arrow::datatypes::Schema::new(fields)), batch.columns().to_vec())?)
        })
        .collect()
}
