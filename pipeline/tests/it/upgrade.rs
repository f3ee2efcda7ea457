//! An index written by an earlier version of the table layouts is brought up to date by
//! rerunning its stages: each stage rewrites its own outputs of an older layout instead of
//! refusing them, and only inputs must be current. Ingest, whose `documents` are not recomputed
//! from anything, carries them forward into the current layout.

use std::path::Path;

use arrow::array::RecordBatch;
use flexstruct_pipeline::compose;
use flexstruct_pipeline::io::parquet::{part_fingerprint, read_part};
use flexstruct_pipeline::stages::ingest::IngestOptions;
use flexstruct_pipeline::stages::{NoProgress, RunContext, Stage};
use flexstruct_schemas::{Table, col, meta};
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

/// Rewrites a part file as if an earlier layout version had written it, without the columns
/// `added` that the current layout added.
fn age(path: &Path, table: Table, added: &[&str]) {
    let batches: Vec<RecordBatch> = read_part(path, table)
        .unwrap()
        .into_iter()
        .map(|b| {
            let keep: Vec<usize> =
                (0..b.num_columns()).filter(|&i| !added.contains(&b.schema().field(i).name().as_str())).collect();
            b.project(&keep).unwrap()
        })
        .collect();
    let metadata = vec![
        KeyValue::new(meta::TABLE.to_owned(), table.dir().to_owned()),
        KeyValue::new(meta::SCHEMA_VERSION.to_owned(), (table.schema_version() - 1).to_string()),
        KeyValue::new(meta::FINGERPRINT.to_owned(), "old".to_owned()),
    ];
    let props = WriterProperties::builder().set_key_value_metadata(Some(metadata)).build();
    let schema = batches[0].schema();
    let mut writer = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), schema, Some(props)).unwrap();
    for b in &batches {
        writer.write(b).unwrap();
    }
    writer.close().unwrap();
}

#[test]
fn outputs_of_an_older_layout_are_rewritten_by_their_stage() {
    let tmp = tempfile::tempdir().unwrap();
    let index = crate::slt::fixture(tmp.path());
    let config = crate::slt::fixture_config();
    let kb = index.parts(Table::KbEntities).unwrap()[0].clone();
    let entities = index.parts(Table::Entities).unwrap();
    age(&kb, Table::KbEntities, &[]);
    for part in &entities {
        age(part, Table::Entities, &[]);
    }
    // An aged input is refused by the stage that reads it, naming the table …
    let err = compose::rebuild(&index, &config, Stage::Graph).unwrap_err();
    assert!(err.to_string().contains("table entities") && err.to_string().contains("schema version 1"), "{err}");
    // … and rewritten by the stage that writes it, after which everything downstream reruns.
    compose::rebuild(&index, &config, Stage::Hypergraph).unwrap();
    for part in entities.iter().chain([&kb]) {
        let table = if part == &kb { Table::KbEntities } else { Table::Entities };
        assert_ne!(part_fingerprint(part, table).unwrap().as_deref(), Some("old"), "{}", part.display());
    }
}

#[test]
fn documents_of_the_first_layout_are_carried_forward_by_ingest() {
    let tmp = tempfile::tempdir().unwrap();
    let index = crate::slt::fixture(tmp.path());
    let config = crate::slt::fixture_config();
    let parts = index.parts(Table::Documents).unwrap();
    let fingerprints: Vec<_> = parts.iter().map(|p| part_fingerprint(p, Table::Documents).unwrap()).collect();
    let chunks = index.parts(Table::Chunks).unwrap();
    let chunk_fingerprints: Vec<_> = chunks.iter().map(|p| part_fingerprint(p, Table::Chunks).unwrap()).collect();
    for part in &parts {
        age(part, Table::Documents, &[col::CORPUS]);
    }
    let err = compose::rebuild(&index, &config, Stage::Chunk).unwrap_err();
    assert!(err.to_string().contains("table documents") && err.to_string().contains("schema version 1"), "{err}");
    assert!(err.to_string().contains("make index"), "{err}");

    // Ingesting another corpus, that adds one document to one bucket, rewrites every older part
    // in the current layout, its rows kept (with no corpus: it was not recorded) and its
    // fingerprint too, so that nothing downstream is redone.
    let corpus = tmp.path().join("more.jsonl");
    std::fs::write(&corpus, r#"{"doc_id": "added", "text": "Mira Sand keeps bees."}"#).unwrap();
    let ctx = RunContext {
        index: index.clone(),
        shard: flexstruct_pipeline::io::Shard::ALL,
        progress: &NoProgress,
        survey: None,
    };
    compose::ingest(&ctx, &config, &IngestOptions { corpus: corpus.clone(), prune: false }).unwrap();
    let added = index.bucket_path(Table::Documents, index.bucket_of("added"));
    for (part, before) in parts.iter().zip(&fingerprints) {
        let rows = read_part(part, Table::Documents).unwrap();
        let corpora = rows[0].column_by_name(col::CORPUS).unwrap();
        let ids = flexstruct_pipeline::io::parquet::string_column(&rows[0], col::DOC_ID).unwrap();
        for i in 0..rows[0].num_rows() {
            assert_eq!(corpora.is_null(i), ids.value(i) != "added", "{}", part.display());
        }
        if part != &added {
            assert_eq!(&part_fingerprint(part, Table::Documents).unwrap(), before, "{}", part.display());
        }
    }
    compose::rebuild(&index, &config, Stage::Chunk).unwrap();
    let added_chunks = index.bucket_path(Table::Chunks, index.bucket_of("added"));
    for (part, before) in chunks.iter().zip(&chunk_fingerprints).filter(|(p, _)| **p != added_chunks) {
        assert_eq!(&part_fingerprint(part, Table::Chunks).unwrap(), before, "{}", part.display());
    }
    assert!(read_part(&added_chunks, Table::Chunks).unwrap().iter().map(RecordBatch::num_rows).sum::<usize>() > 0);
}
