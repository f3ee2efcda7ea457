//! An index written by an earlier version of the table layouts is brought up to date by
//! rerunning its stages: each stage rewrites its own outputs of an older layout instead of
//! refusing them, and only inputs must be current.

use std::path::Path;

use arrow::array::RecordBatch;
use flexstruct_pipeline::compose;
use flexstruct_pipeline::config::Config;
use flexstruct_pipeline::io::parquet::{part_fingerprint, read_part};
use flexstruct_pipeline::stages::Stage;
use flexstruct_schemas::{Table, meta};
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

/// Rewrites a part file as if an earlier layout version had written it.
fn age(path: &Path, table: Table) {
    let batches: Vec<RecordBatch> = read_part(path, table).unwrap();
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
    let mut config = Config::default();
    config.index.buckets = Some(4);
    config.embed.model = "hashing-16".into();
    config.cluster.min_cluster_size = 2;
    config.cluster.min_samples = 1;
    let kb = index.parts(Table::KbEntities).unwrap()[0].clone();
    let entities = index.parts(Table::Entities).unwrap();
    age(&kb, Table::KbEntities);
    for part in &entities {
        age(part, Table::Entities);
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
