//! The SQL of the merge: one SELECT per kb table over the per-document tables (column names
//! from `schemas/`), and the two functions it calls, written in Rust.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, ListBuilder, StringArray, StringBuilder};
use arrow::datatypes::{DataType, Field};
use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
use flexstruct_schemas::{Table, col};

use crate::core::names::normalize;
use crate::core::units::Unit;
use crate::io::sql::IndexSql;
use crate::rules::abbreviation_aliases;

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
                "SELECT e.{ENTITY_ID}, e.{DOC_ID}, e.{NAME}, e.{NORM_NAME}, e.{SUMMARY}, e.{HYPERDEGREE}, e.{ALIASES}, e.{BACKEND}, \
                 v.{MODEL}, v.{EMBEDDING} FROM entities e {} ORDER BY e.{DOC_ID}, e.{ENTITY_ID}",
                vector(Unit::Entity.name(), &format!("e.{ENTITY_ID}"))
            ),
        ),
        (
            Table::KbHyperedges,
            format!(
                "SELECT h.{HYPEREDGE_ID}, h.{DOC_ID}, h.{ITEM_IDX}, h.{TEXT}, h.{REF_TEXT}, h.{REF_START}, h.{REF_END}, h.{BACKEND}, \
                 v.{MODEL}, v.{EMBEDDING} FROM hyperedges h {} ORDER BY h.{DOC_ID}, h.{ITEM_IDX}",
                vector(Unit::Hyperedge.name(), &format!("h.{HYPEREDGE_ID}"))
            ),
        ),
        (
            Table::KbEdges,
            format!(
                "SELECT g.{EDGE_ID}, g.{DOC_ID}, g.{SOURCE_ID}, g.{TARGET_ID}, g.{TEXT}, g.{HYPEREDGE_ID}, g.{BACKEND}, \
                 v.{MODEL}, v.{EMBEDDING} FROM edges g {} ORDER BY g.{DOC_ID}, g.{EDGE_ID}",
                vector(Unit::Edge.name(), &format!("g.{EDGE_ID}"))
            ),
        ),
        (
            Table::KbChunks,
            format!(
                "SELECT c.{DOC_ID}, c.{CHUNK_IDX}, c.{TEXT}, c.{N_TOKENS}, c.{CHAR_START}, c.{CHAR_END}, \
                 v.{MODEL}, v.{EMBEDDING} FROM chunks c {} ORDER BY c.{DOC_ID}, c.{CHUNK_IDX}",
                vector(Unit::Chunk.name(), &format!("concat(c.{DOC_ID}, '#', CAST(c.{CHUNK_IDX} AS VARCHAR))"))
            ),
        ),
        (
            Table::KbHyperedgeEntities,
            format!(
                "SELECT {HYPEREDGE_ID}, {ENTITY_ID}, {DOC_ID} FROM hyperedge_entities ORDER BY {DOC_ID}, {HYPEREDGE_ID}, {ENTITY_ID}"
            ),
        ),
        (
            Table::KbClusters,
            format!("SELECT {CLUSTER_ID}, {DOC_ID}, {TEXT} FROM clusters ORDER BY {DOC_ID}, {CLUSTER_ID}"),
        ),
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
                 LEFT JOIN (SELECT {DOC_ID}, count(*) AS n FROM items WHERE {REF_START} IS NOT NULL GROUP BY {DOC_ID}) i \
                   ON i.{DOC_ID} = d.{DOC_ID} \
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
pub fn register_functions(sql: &IndexSql) {
    let normalize_name = create_udf(
        "normalize_name",
        vec![DataType::Utf8],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let input = arrays[0]
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| datafusion::error::DataFusionError::Internal("normalize_name expects text".into()))?;
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
