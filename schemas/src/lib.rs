//! Every flexstruct table as code: column names, one Arrow schema per table, the schema version
//! written into Parquet metadata, and the check that a file or batch matches.
//!
//! SQL strings and Rust code both take column names from [`col`], so a rename happens in one place.
//!
//! ```
//! use flexstruct_schemas::{col, Table};
//! let schema = Table::Chunks.schema();
//! assert!(schema.field_with_name(col::CHAR_START).is_ok());
//! assert_eq!(Table::KbEntities.dir(), "kb/entities");
//! ```
#![warn(missing_docs)]

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock};

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

/// Version of a table layout that has not changed since the first one. Each table has its own
/// version ([`Table::schema_version`]), bumped whenever one of its columns is added, removed or
/// retyped, so that a layout change of one table leaves the files of the others readable: a
/// stage rewrites its own outputs of an older version, and refuses older inputs with an error
/// that names the table.
pub const SCHEMA_VERSION: u32 = 1;

/// Parquet key-value metadata keys written into every part file.
pub mod meta {
    /// The table a part file belongs to.
    pub const TABLE: &str = "flexstruct.table";
    /// [`crate::Table::schema_version`] at write time.
    pub const SCHEMA_VERSION: &str = "flexstruct.schema_version";
    /// Fingerprint of everything the part was computed from (inputs, stage version, config).
    pub const FINGERPRINT: &str = "flexstruct.fingerprint";
}

/// Column names. One constant per name; the same name means the same thing in every table.
#[allow(missing_docs)]
pub mod col {
    pub const DOC_ID: &str = "doc_id";
    pub const TITLE: &str = "title";
    pub const TEXT: &str = "text";
    pub const SOURCE: &str = "source";
    pub const CORPUS: &str = "corpus";
    pub const SHA256: &str = "sha256";
    pub const N_CHARS: &str = "n_chars";

    pub const CHUNK_IDX: &str = "chunk_idx";
    pub const N_TOKENS: &str = "n_tokens";
    pub const CHAR_START: &str = "char_start";
    pub const CHAR_END: &str = "char_end";

    pub const ITEM_IDX: &str = "item_idx";
    pub const REF_TEXT: &str = "ref_text";
    pub const REF_START: &str = "ref_start";
    pub const REF_END: &str = "ref_end";
    pub const ENTITIES: &str = "entities";
    pub const EXTRACTOR: &str = "extractor";
    pub const BACKEND: &str = "backend";

    pub const HYPEREDGE_ID: &str = "hyperedge_id";
    pub const ENTITY_ID: &str = "entity_id";
    pub const NAME: &str = "name";
    pub const NORM_NAME: &str = "norm_name";
    pub const SUMMARY: &str = "summary";
    pub const HYPERDEGREE: &str = "hyperdegree";
    pub const ALIASES: &str = "aliases";

    pub const EDGE_ID: &str = "edge_id";
    pub const SOURCE_ID: &str = "source_id";
    pub const TARGET_ID: &str = "target_id";

    pub const CLUSTER_ID: &str = "cluster_id";
    pub const PROBABILITY: &str = "probability";

    /// A node of the path index: one entity name across documents (`kb/path_nodes`).
    pub const NODE_ID: &str = "node_id";
    pub const LABEL: &str = "label";
    pub const DEGREE: &str = "degree";
    pub const ENTITY_IDS: &str = "entity_ids";
    /// A node's dominant embedding (its 1-hop star's structure).
    pub const DOMINANT: &str = "dominant";
    /// The path index's dominant-embedding encoder, one parameter a row (`kb/path_encoder`).
    pub const PARAM: &str = "param";
    pub const N_ROWS: &str = "n_rows";
    pub const N_COLS: &str = "n_cols";
    pub const WEIGHTS: &str = "weights";
    pub const PATH_ID: &str = "path_id";
    /// Edges of a path.
    pub const LENGTH: &str = "length";
    pub const POSITION: &str = "position";

    pub const UNIT: &str = "unit";
    /// A similarity threshold derived from a kb (`kb/thresholds`).
    pub const TAU: &str = "tau";
    /// The percentile of unit-to-unit cosines a derived threshold is.
    pub const PERCENTILE: &str = "percentile";
    /// Unit pairs a derived threshold was measured on.
    pub const PAIRS: &str = "pairs";
    pub const ID: &str = "id";
    pub const MODEL: &str = "model";
    pub const EMBEDDING: &str = "embedding";
    pub const INPUT_SHA256: &str = "input_sha256";

    pub const ALIAS: &str = "alias";
    pub const ORIGIN: &str = "origin";

    pub const N_CHUNKS: &str = "n_chunks";
    pub const N_ITEMS: &str = "n_items";
    pub const N_HYPEREDGES: &str = "n_hyperedges";
    pub const N_ENTITIES: &str = "n_entities";
    pub const N_EDGES: &str = "n_edges";
    pub const N_CLUSTERS: &str = "n_clusters";

    pub const STAGE: &str = "stage";
    pub const PURPOSE: &str = "purpose";
    pub const REQUEST_ID: &str = "request_id";
    pub const PROMPT_TOKENS: &str = "prompt_tokens";
    pub const COMPLETION_TOKENS: &str = "completion_tokens";
    pub const TOKENS_ESTIMATED: &str = "tokens_estimated";
    pub const LATENCY_MS: &str = "latency_ms";
    pub const CACHED: &str = "cached";
    pub const STATUS: &str = "status";
    pub const RESPONSE_FORMAT: &str = "response_format";

    pub const KIND: &str = "kind";
    pub const MESSAGE: &str = "message";

    pub const RUN_ID: &str = "run_id";
    pub const SHARD: &str = "shard";
    pub const STARTED_AT: &str = "started_at";
    pub const SECONDS: &str = "seconds";
    pub const INPUTS: &str = "inputs";
    pub const CONFIG: &str = "config";
    pub const ROWS_IN: &str = "rows_in";
    pub const ROWS_OUT: &str = "rows_out";
    pub const UNITS_DONE: &str = "units_done";
    pub const UNITS_SKIPPED: &str = "units_skipped";
    pub const UNITS_FAILED: &str = "units_failed";
}

/// Dimension used in the static embeddings schemas. Vectors of any dimension pass the schema
/// check (the model name is stored beside them); this is only the width of the template.
pub const TEMPLATE_EMBEDDING_DIM: i32 = 384;

/// Every table of an index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Table {
    Documents,
    Chunks,
    Items,
    Hyperedges,
    HyperedgeEntities,
    Entities,
    Edges,
    Clusters,
    ClusterMembers,
    Embeddings,
    LlmCalls,
    Failures,
    Manifest,
    KbEntities,
    KbHyperedges,
    KbHyperedgeEntities,
    KbEdges,
    KbClusters,
    KbClusterMembers,
    KbChunks,
    KbAliases,
    KbDocStats,
    KbThresholds,
    KbPathNodes,
    KbPaths,
    KbPathMembers,
    KbPathEncoder,
}

impl Table {
    /// All tables, in pipeline order.
    pub const ALL: [Table; 27] = [
        Table::Documents,
        Table::Chunks,
        Table::Items,
        Table::Hyperedges,
        Table::HyperedgeEntities,
        Table::Entities,
        Table::Edges,
        Table::Clusters,
        Table::ClusterMembers,
        Table::Embeddings,
        Table::LlmCalls,
        Table::Failures,
        Table::Manifest,
        Table::KbEntities,
        Table::KbHyperedges,
        Table::KbHyperedgeEntities,
        Table::KbEdges,
        Table::KbClusters,
        Table::KbClusterMembers,
        Table::KbChunks,
        Table::KbAliases,
        Table::KbDocStats,
        Table::KbThresholds,
        Table::KbPathNodes,
        Table::KbPaths,
        Table::KbPathMembers,
        Table::KbPathEncoder,
    ];

    /// Folder of the table relative to the index root (`kb/…` for the merged tables).
    pub fn dir(self) -> &'static str {
        match self {
            Table::Documents => "documents",
            Table::Chunks => "chunks",
            Table::Items => "items",
            Table::Hyperedges => "hyperedges",
            Table::HyperedgeEntities => "hyperedge_entities",
            Table::Entities => "entities",
            Table::Edges => "edges",
            Table::Clusters => "clusters",
            Table::ClusterMembers => "cluster_members",
            Table::Embeddings => "embeddings",
            Table::LlmCalls => "llm_calls",
            Table::Failures => "failures",
            Table::Manifest => "manifest",
            Table::KbEntities => "kb/entities",
            Table::KbHyperedges => "kb/hyperedges",
            Table::KbHyperedgeEntities => "kb/hyperedge_entities",
            Table::KbEdges => "kb/edges",
            Table::KbClusters => "kb/clusters",
            Table::KbClusterMembers => "kb/cluster_members",
            Table::KbChunks => "kb/chunks",
            Table::KbAliases => "kb/aliases",
            Table::KbDocStats => "kb/doc_stats",
            Table::KbThresholds => "kb/thresholds",
            Table::KbPathNodes => "kb/path_nodes",
            Table::KbPaths => "kb/paths",
            Table::KbPathMembers => "kb/path_members",
            Table::KbPathEncoder => "kb/path_encoder",
        }
    }

    /// Name used in SQL: `chunks`, `kb.entities`, …
    pub fn sql_name(self) -> String {
        self.dir().replace('/', ".")
    }

    /// The table whose folder is `dir` (as returned by [`Table::dir`]).
    pub fn from_dir(dir: &str) -> Option<Table> {
        Table::ALL.into_iter().find(|t| t.dir() == dir)
    }

    /// Whether part files hold the rows of one document bucket each (the per-document stages).
    pub fn is_per_document(self) -> bool {
        !matches!(self, Table::LlmCalls | Table::Failures | Table::Manifest) && !self.is_kb()
    }

    /// Whether the table is one of the merged `kb/` collections.
    pub fn is_kb(self) -> bool {
        self.dir().starts_with("kb/")
    }

    /// Whether the table is a kb table about the whole kb, in one part, not per bucket: the
    /// thresholds the merge derives and the path index derived from the merged kb.
    pub fn is_whole_kb(self) -> bool {
        matches!(
            self,
            Table::KbThresholds | Table::KbPathNodes | Table::KbPaths | Table::KbPathMembers | Table::KbPathEncoder
        )
    }

    /// Version of the table's layout, written into every part file and checked on read.
    /// Version 2 of hyperedges, entities, edges and their kb tables added the `backend` column;
    /// version 2 of documents the `corpus` column; version 2 of `llm_calls` the
    /// `response_format` column.
    pub fn schema_version(self) -> u32 {
        match self {
            Table::LlmCalls => 2,
            Table::Documents
            | Table::Hyperedges
            | Table::Entities
            | Table::Edges
            | Table::KbHyperedges
            | Table::KbEntities
            | Table::KbEdges => 2,
            _ => SCHEMA_VERSION,
        }
    }

    /// The columns a part written with layout `version` may lack: a log table (`llm_calls`)
    /// only ever grows by nullable columns, and its older parts are read with them null (a log
    /// is never recomputed, so refusing them would lose it). None: that layout is not read.
    pub fn columns_added_since(self, version: u32) -> Option<&'static [&'static str]> {
        match (self, version) {
            _ if version == self.schema_version() => Some(&[]),
            (Table::LlmCalls, 1) => Some(&[col::RESPONSE_FORMAT]),
            _ => None,
        }
    }

    /// The table's Arrow schema, built once.
    pub fn schema(self) -> SchemaRef {
        SCHEMAS[&self].clone()
    }

    /// The table's schema with its vector columns (`embedding`, `dominant`) of the given widths,
    /// for writing rows whose vectors are not of the template's width.
    pub fn schema_with_widths(self, widths: &[(&str, usize)]) -> SchemaRef {
        let schema = self.schema();
        let fields = schema.fields().iter().map(|f| match widths.iter().find(|(name, _)| name == f.name()) {
            Some(&(_, width)) => Field::new(f.name(), embedding_type(width as i32), f.is_nullable()),
            None => f.as_ref().clone(),
        });
        Arc::new(Schema::new(fields.collect::<Vec<_>>()))
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.dir())
    }
}

fn utf8(name: &str) -> Field {
    Field::new(name, DataType::Utf8, false)
}
fn utf8_null(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true)
}
fn i32_(name: &str) -> Field {
    Field::new(name, DataType::Int32, false)
}
fn i64_(name: &str) -> Field {
    Field::new(name, DataType::Int64, false)
}
fn i64_null(name: &str) -> Field {
    Field::new(name, DataType::Int64, true)
}
fn utf8_list(name: &str) -> Field {
    Field::new(name, DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, false))), false)
}

/// Arrow type of an embedding column of dimension `dim`.
pub fn embedding_type(dim: i32) -> DataType {
    DataType::FixedSizeList(Arc::new(Field::new_list_field(DataType::Float32, false)), dim)
}

fn embedding(nullable: bool) -> Field {
    Field::new(col::EMBEDDING, embedding_type(TEMPLATE_EMBEDDING_DIM), nullable)
}

fn fields(table: Table) -> Vec<Field> {
    use col::*;
    let chunk_fields =
        || vec![utf8(DOC_ID), i32_(CHUNK_IDX), utf8(TEXT), i32_(N_TOKENS), i64_(CHAR_START), i64_(CHAR_END)];
    let hyperedge_fields = || {
        vec![
            utf8(HYPEREDGE_ID),
            utf8(DOC_ID),
            i32_(ITEM_IDX),
            utf8(TEXT),
            utf8(REF_TEXT),
            i64_null(REF_START),
            i64_null(REF_END),
            utf8(BACKEND),
        ]
    };
    let entity_fields = || {
        vec![
            utf8(ENTITY_ID),
            utf8(DOC_ID),
            utf8(NAME),
            utf8(NORM_NAME),
            utf8(SUMMARY),
            i32_(HYPERDEGREE),
            utf8_list(ALIASES),
            utf8(BACKEND),
        ]
    };
    let edge_fields = || {
        vec![
            utf8(EDGE_ID),
            utf8(DOC_ID),
            utf8(SOURCE_ID),
            utf8(TARGET_ID),
            utf8(TEXT),
            utf8_null(HYPEREDGE_ID),
            utf8(BACKEND),
        ]
    };
    let cluster_fields = || vec![utf8(CLUSTER_ID), utf8(DOC_ID), utf8(TEXT)];
    let member_fields =
        || vec![utf8(CLUSTER_ID), utf8(DOC_ID), utf8(HYPEREDGE_ID), Field::new(PROBABILITY, DataType::Float32, false)];
    let incidence_fields = || vec![utf8(HYPEREDGE_ID), utf8(ENTITY_ID), utf8(DOC_ID)];
    let with_embedding = |mut f: Vec<Field>| {
        f.push(utf8_null(MODEL));
        f.push(embedding(true));
        f
    };
    match table {
        Table::Documents => {
            vec![
                utf8(DOC_ID),
                utf8_null(TITLE),
                utf8(TEXT),
                utf8(SOURCE),
                utf8(SHA256),
                i64_(N_CHARS),
                utf8_null(CORPUS),
            ]
        }
        Table::Chunks => chunk_fields(),
        Table::Items => vec![
            utf8(DOC_ID),
            i32_(ITEM_IDX),
            i32_(CHUNK_IDX),
            utf8(TEXT),
            utf8(REF_TEXT),
            i64_null(REF_START),
            i64_null(REF_END),
            utf8_list(ENTITIES),
            utf8(EXTRACTOR),
        ],
        Table::Hyperedges => hyperedge_fields(),
        Table::HyperedgeEntities => incidence_fields(),
        Table::Entities => entity_fields(),
        Table::Edges => edge_fields(),
        Table::Clusters => cluster_fields(),
        Table::ClusterMembers => member_fields(),
        Table::Embeddings => {
            vec![utf8(UNIT), utf8(ID), utf8(DOC_ID), utf8(MODEL), utf8(INPUT_SHA256), embedding(false)]
        }
        Table::LlmCalls => vec![
            utf8(STAGE),
            utf8_null(DOC_ID),
            utf8(PURPOSE),
            utf8(MODEL),
            utf8(REQUEST_ID),
            i64_(PROMPT_TOKENS),
            i64_(COMPLETION_TOKENS),
            Field::new(TOKENS_ESTIMATED, DataType::Boolean, false),
            i64_(LATENCY_MS),
            Field::new(CACHED, DataType::Boolean, false),
            utf8(STATUS),
            utf8_null(RESPONSE_FORMAT),
        ],
        Table::Failures => vec![utf8(STAGE), utf8_null(DOC_ID), utf8(UNIT), utf8(KIND), utf8(MESSAGE)],
        Table::Manifest => vec![
            utf8(RUN_ID),
            utf8(STAGE),
            utf8(SHARD),
            utf8(STARTED_AT),
            Field::new(SECONDS, DataType::Float64, false),
            utf8(INPUTS),
            utf8(CONFIG),
            i64_(ROWS_IN),
            i64_(ROWS_OUT),
            i64_(UNITS_DONE),
            i64_(UNITS_SKIPPED),
            i64_(UNITS_FAILED),
            utf8(STATUS),
        ],
        Table::KbEntities => with_embedding(entity_fields()),
        Table::KbHyperedges => with_embedding(hyperedge_fields()),
        Table::KbHyperedgeEntities => incidence_fields(),
        Table::KbEdges => with_embedding(edge_fields()),
        Table::KbClusters => cluster_fields(),
        Table::KbClusterMembers => member_fields(),
        Table::KbChunks => with_embedding(chunk_fields()),
        Table::KbAliases => vec![utf8(ALIAS), utf8(ENTITY_ID), utf8(DOC_ID), utf8(ORIGIN)],
        Table::KbDocStats => vec![
            utf8(DOC_ID),
            i64_(N_CHUNKS),
            i64_(N_ITEMS),
            i64_(N_HYPEREDGES),
            i64_(N_ENTITIES),
            i64_(N_EDGES),
            i64_(N_CLUSTERS),
        ],
        Table::KbThresholds => vec![
            utf8(UNIT),
            utf8(MODEL),
            Field::new(TAU, DataType::Float64, false),
            Field::new(PERCENTILE, DataType::Float64, false),
            i64_(PAIRS),
        ],
        Table::KbPathNodes => vec![
            utf8(NODE_ID),
            utf8(LABEL),
            utf8(NORM_NAME),
            i32_(DEGREE),
            utf8_list(ENTITY_IDS),
            utf8(MODEL),
            embedding(false),
            Field::new(DOMINANT, embedding_type(TEMPLATE_EMBEDDING_DIM), false),
        ],
        Table::KbPaths => vec![utf8(PATH_ID), i32_(LENGTH), utf8(SOURCE_ID), utf8(TARGET_ID)],
        Table::KbPathMembers => vec![utf8(PATH_ID), i32_(POSITION), utf8(NODE_ID), utf8_null(EDGE_ID)],
        Table::KbPathEncoder => vec![
            utf8(KIND),
            utf8(PARAM),
            i32_(N_ROWS),
            i32_(N_COLS),
            Field::new(WEIGHTS, DataType::List(Arc::new(Field::new_list_field(DataType::Float32, false))), false),
        ],
    }
}

/// Schema of an answers file written by the query stage (one row per question; not an index
/// table). Evidence and citations are nested lists of structs.
pub fn answers_schema() -> SchemaRef {
    use col::*;
    static ANSWERS: LazyLock<SchemaRef> = LazyLock::new(|| {
        let f64_ = |name: &str| Field::new(name, DataType::Float64, false);
        let list_of = |name: &str, fields: Vec<Field>| {
            Field::new(
                name,
                DataType::List(Arc::new(Field::new_list_field(DataType::Struct(fields.into()), false))),
                false,
            )
        };
        let evidence = vec![
            utf8(UNIT),
            utf8(ID),
            utf8(DOC_ID),
            i64_null("start"),
            i64_null("end"),
            utf8(TEXT),
            Field::new("score", DataType::Float32, false),
            i64_("tokens"),
        ];
        let citation = vec![utf8(DOC_ID), i64_("start"), i64_("end")];
        Arc::new(Schema::new(vec![
            utf8(ID),
            utf8("question"),
            utf8("mode"),
            utf8("variant"),
            utf8("answer"),
            Field::new("short_answer", DataType::Utf8, true),
            Field::new("support", DataType::Utf8, true),
            utf8("generator"),
            i64_("context_tokens"),
            f64_("retrieval_ms"),
            f64_("embed_ms"),
            f64_("generation_ms"),
            list_of("evidence", evidence),
            list_of("citations", citation),
            Field::new("cited", DataType::List(Arc::new(Field::new_list_field(DataType::Int64, false))), false),
            i64_("trimmed"),
            Field::new("notes", DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, false))), true),
            Field::new("rerank", DataType::Utf8, true),
        ]))
    });
    ANSWERS.clone()
}

/// Schema of an evaluation's `results.parquet` (one row per variant and question; not an index
/// table). Measures that do not apply to a question are null.
pub fn eval_results_schema() -> SchemaRef {
    static RESULTS: LazyLock<SchemaRef> = LazyLock::new(|| {
        let f64_ = |name: &str| Field::new(name, DataType::Float64, false);
        let f64_null = |name: &str| Field::new(name, DataType::Float64, true);
        Arc::new(Schema::new(vec![
            utf8("variant"),
            utf8("mode"),
            utf8(col::ID),
            utf8("type"),
            utf8("question"),
            utf8("answer"),
            Field::new("short_answer", DataType::Utf8, true),
            utf8_list("gold"),
            f64_("em"),
            f64_("f1"),
            f64_null("ge"),
            f64_null("answer_recall"),
            f64_null("answer_token_recall"),
            f64_null("evidence_recall"),
            f64_null("doc_recall"),
            f64_null("doc_recall_at_2"),
            f64_null("doc_recall_at_5"),
            f64_null("subgraph_exact"),
            f64_null("subgraph_hit_at_1"),
            f64_null("subgraph_recall"),
            f64_null("subgraph_f1"),
            i64_("context_tokens"),
            i64_("context_cap"),
            f64_("retrieval_ms"),
            f64_("embed_ms"),
            f64_("generation_ms"),
            Field::new("rerank", DataType::Utf8, true),
            Field::new("notes", DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, false))), true),
        ]))
    });
    RESULTS.clone()
}

static SCHEMAS: LazyLock<HashMap<Table, SchemaRef>> =
    LazyLock::new(|| Table::ALL.into_iter().map(|t| (t, Arc::new(Schema::new(fields(t))))).collect());

/// A table, file or batch that does not have the shape this build expects.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// A column the table needs is absent.
    #[error("table {table}, {location}: column `{column}` is missing (expected type {expected})")]
    MissingColumn {
        /// Table being checked.
        table: Table,
        /// File path, or a description of the in-memory batch.
        location: String,
        /// Missing column.
        column: String,
        /// Type the column should have.
        expected: DataType,
    },
    /// A column has another type than the schema says.
    #[error("table {table}, {location}: column `{column}` has type {found}, expected {expected}")]
    TypeMismatch {
        /// Table being checked.
        table: Table,
        /// File path, or a description of the in-memory batch.
        location: String,
        /// Offending column.
        column: String,
        /// Type the column should have.
        expected: DataType,
        /// Type found.
        found: DataType,
    },
    /// A column may hold nulls but the schema says it never does.
    #[error("table {table}, {location}: column `{column}` is nullable, expected non-null")]
    Nullability {
        /// Table being checked.
        table: Table,
        /// File path, or a description of the in-memory batch.
        location: String,
        /// Offending column.
        column: String,
    },
    /// A column the schema does not know.
    #[error("table {table}, {location}: unexpected column `{column}` of type {found}")]
    ExtraColumn {
        /// Table being checked.
        table: Table,
        /// File path, or a description of the in-memory batch.
        location: String,
        /// Unknown column.
        column: String,
        /// Its type.
        found: DataType,
    },
    /// Written by another version of the table layout.
    #[error(
        "table {table}, {location}: written with schema version {found}, this build reads version {expected} \
         (rerun the stage that writes it; `make index` reruns them all)"
    )]
    Version {
        /// Table being checked.
        table: Table,
        /// File path.
        location: String,
        /// Version in the file (`none` when the key is absent).
        found: String,
        /// Version this build reads.
        expected: u32,
    },
    /// A part file that claims to belong to another table.
    #[error("{location}: holds table `{found}`, expected `{expected}`")]
    WrongTable {
        /// File path.
        location: String,
        /// Table name found in the metadata.
        found: String,
        /// Table expected.
        expected: Table,
    },
}

/// Whether `found` can be read as `expected`. List item field names and item nullability are not
/// part of a table's contract; an embedding's width is a property of its model, not of the table.
fn type_matches(expected: &DataType, found: &DataType) -> bool {
    match (expected, found) {
        (DataType::List(e), DataType::List(f)) | (DataType::LargeList(e), DataType::LargeList(f)) => {
            type_matches(e.data_type(), f.data_type())
        }
        (DataType::FixedSizeList(e, _), DataType::FixedSizeList(f, _)) => type_matches(e.data_type(), f.data_type()),
        _ => expected == found,
    }
}

/// Checks that `found` has exactly the columns of `table`, with matching types; `location` (a file
/// path, or a description of an in-memory batch) goes into the error.
pub fn check_schema(table: Table, found: &Schema, location: &str) -> Result<(), SchemaError> {
    check_schema_of_layout(table, found, location, table.schema_version())
}

/// [`check_schema`] for a part written with layout `version`, which may lack the columns added
/// since ([`Table::columns_added_since`]).
pub fn check_schema_of_layout(table: Table, found: &Schema, location: &str, version: u32) -> Result<(), SchemaError> {
    let expected = table.schema();
    let added = table.columns_added_since(version).unwrap_or_default();
    for want in expected.fields() {
        let Ok(got) = found.field_with_name(want.name()) else {
            if added.contains(&want.name().as_str()) {
                continue;
            }
            return Err(SchemaError::MissingColumn {
                table,
                location: location.to_owned(),
                column: want.name().clone(),
                expected: want.data_type().clone(),
            });
        };
        if !type_matches(want.data_type(), got.data_type()) {
            return Err(SchemaError::TypeMismatch {
                table,
                location: location.to_owned(),
                column: want.name().clone(),
                expected: want.data_type().clone(),
                found: got.data_type().clone(),
            });
        }
        if got.is_nullable() && !want.is_nullable() {
            return Err(SchemaError::Nullability { table, location: location.to_owned(), column: want.name().clone() });
        }
    }
    if let Some(extra) = found.fields().iter().find(|f| expected.field_with_name(f.name()).is_err()) {
        return Err(SchemaError::ExtraColumn {
            table,
            location: location.to_owned(),
            column: extra.name().clone(),
            found: extra.data_type().clone(),
        });
    }
    Ok(())
}

/// Checks the flexstruct key-value metadata of a Parquet file (table name and schema version: the
/// current one, or an older one the table still reads); returns the version.
pub fn check_metadata(table: Table, metadata: &HashMap<String, String>, location: &str) -> Result<u32, SchemaError> {
    check_table_name(table, metadata, location)?;
    let version = metadata.get(meta::SCHEMA_VERSION).and_then(|v| v.parse::<u32>().ok());
    match (version, metadata.get(meta::SCHEMA_VERSION)) {
        (Some(v), _) if table.columns_added_since(v).is_some() => Ok(v),
        (_, found) => Err(SchemaError::Version {
            table,
            location: location.to_owned(),
            found: found.cloned().unwrap_or_else(|| "none".to_owned()),
            expected: table.schema_version(),
        }),
    }
}

/// Checks that the flexstruct key-value metadata of a Parquet file names `table`.
pub fn check_table_name(table: Table, metadata: &HashMap<String, String>, location: &str) -> Result<(), SchemaError> {
    match metadata.get(meta::TABLE) {
        Some(found) if found == table.dir() => Ok(()),
        found => Err(SchemaError::WrongTable {
            location: location.to_owned(),
            found: found.cloned().unwrap_or_else(|| "none".to_owned()),
            expected: table,
        }),
    }
}

/// Key-value metadata to write into a part file of `table`.
pub fn part_metadata(table: Table, fingerprint: &str) -> Vec<(String, String)> {
    vec![
        (meta::TABLE.to_owned(), table.dir().to_owned()),
        (meta::SCHEMA_VERSION.to_owned(), table.schema_version().to_string()),
        (meta::FINGERPRINT.to_owned(), fingerprint.to_owned()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_has_a_unique_dir_and_a_doc_id_where_per_document() {
        let mut dirs: Vec<_> = Table::ALL.iter().map(|t| t.dir()).collect();
        dirs.sort_unstable();
        dirs.dedup();
        assert_eq!(dirs.len(), Table::ALL.len());
        for t in Table::ALL {
            assert_eq!(Table::from_dir(t.dir()), Some(t));
            // Every table of rows about documents has their id; kb/thresholds and the path index
            // are about the whole kb.
            assert!(!t.is_whole_kb() || t.is_kb());
            if t.is_per_document() || t.is_kb() && !t.is_whole_kb() {
                assert!(t.schema().field_with_name(col::DOC_ID).is_ok(), "{t} lacks doc_id");
            }
        }
    }

    #[test]
    fn own_schema_passes_the_check() {
        for t in Table::ALL {
            check_schema(t, &t.schema(), "self").unwrap();
        }
    }

    #[test]
    fn mismatch_names_table_location_column_and_types() {
        let mut f = fields(Table::Chunks);
        f[3] = Field::new(col::N_TOKENS, DataType::Utf8, false);
        let err = check_schema(Table::Chunks, &Schema::new(f), "chunks/part-0001.parquet").unwrap_err();
        assert_eq!(
            err.to_string(),
            "table chunks, chunks/part-0001.parquet: column `n_tokens` has type Utf8, expected Int32"
        );
    }

    #[test]
    fn missing_extra_and_nullable_columns_are_reported() {
        let mut f = fields(Table::Documents);
        f.remove(4);
        let err = check_schema(Table::Documents, &Schema::new(f), "x").unwrap_err();
        assert!(matches!(err, SchemaError::MissingColumn { ref column, .. } if column == col::SHA256));

        let mut f = fields(Table::Documents);
        f.push(Field::new("surprise", DataType::Int8, true));
        let err = check_schema(Table::Documents, &Schema::new(f), "x").unwrap_err();
        assert!(err.to_string().contains("unexpected column `surprise`"));

        let mut f = fields(Table::Documents);
        f[0] = Field::new(col::DOC_ID, DataType::Utf8, true);
        let err = check_schema(Table::Documents, &Schema::new(f), "x").unwrap_err();
        assert!(matches!(err, SchemaError::Nullability { .. }));
    }

    #[test]
    fn embeddings_of_any_width_pass() {
        let mut f = fields(Table::Embeddings);
        f[5] = Field::new(col::EMBEDDING, embedding_type(1536), false);
        check_schema(Table::Embeddings, &Schema::new(f.clone()), "x").unwrap();
        f[5] = Field::new(
            col::EMBEDDING,
            DataType::FixedSizeList(Arc::new(Field::new_list_field(DataType::Float64, false)), 8),
            false,
        );
        assert!(check_schema(Table::Embeddings, &Schema::new(f), "x").is_err());
    }

    #[test]
    fn metadata_version_and_table_are_checked() {
        let ok: HashMap<_, _> = part_metadata(Table::Chunks, "f").into_iter().collect();
        check_metadata(Table::Chunks, &ok, "p").unwrap();
        let err = check_metadata(Table::Documents, &ok, "p").unwrap_err();
        assert!(matches!(err, SchemaError::WrongTable { .. }));
        let mut old = ok.clone();
        old.insert(meta::SCHEMA_VERSION.to_owned(), "0".to_owned());
        let err = check_metadata(Table::Chunks, &old, "p").unwrap_err();
        assert!(err.to_string().contains("schema version 0"), "{err}");
    }
}
