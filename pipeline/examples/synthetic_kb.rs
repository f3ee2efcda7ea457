//! A synthetic kb of a given size, for measuring the query stage far beyond the dev sets: copies
//! of a real index's merged kb (and its documents), each copy's ids renamed (`<id>~<copy>`) and
//! each of its vectors moved a random step away from the original (about cosine 0.9 to it) and
//! renormalised, so that the copies spread around the real vectors the way real neighbours do
//! instead of repeating them. Copies are made until there are at least HYPEREDGES hyperedges;
//! entities are copied only while there are fewer than ENTITIES of them (a copy without its
//! entities keeps its hyperedges, edges and chunks, and drops its incidence and aliases). Texts
//! are the originals'. Each part's rows are in merge order, as a merge writes them (a copy's
//! renamed ids sort among the originals'). The kb's parts carry fingerprints that add up the way
//! a merge's do, so `flexstruct-query` reads it like any merged kb, and the kb's vector files and
//! approximate indexes are written as a merge writes them. Run again on a complete OUT, it only
//! brings those up to date.
//!
//! `cargo run --release -p flexstruct-pipeline --example synthetic_kb -- SOURCE OUT HYPEREDGES [ENTITIES]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, FixedSizeListArray, Float32Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Float32Type};
use flexstruct_pipeline::config::Config;
use flexstruct_pipeline::io::Index;
use flexstruct_pipeline::io::ann::write_ann_files;
use flexstruct_pipeline::io::kb::{self, one_batch, write_vector_files};
use flexstruct_pipeline::io::parquet::{
    KB_BUCKET_TABLES, kb_parts_fingerprint, one_merge_fingerprint, part_fingerprint, part_row_count, read_part,
    write_part,
};
use flexstruct_schemas::{Table, col};
use rayon::prelude::*;

/// Columns holding ids, renamed in every copy but the first.
const IDS: [&str; 7] =
    [col::DOC_ID, col::ENTITY_ID, col::HYPEREDGE_ID, col::EDGE_ID, col::SOURCE_ID, col::TARGET_ID, col::CLUSTER_ID];

/// Standard deviation of the noise added to each coordinate of a unit vector of 384: a step of
/// length about 0.5, cosine about 0.9 to the original.
const NOISE: f32 = 0.5 / 19.6;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [source, out, hyperedges, rest @ ..] = &args[..] else {
        panic!("usage: synthetic_kb SOURCE OUT HYPEREDGES [ENTITIES]");
    };
    let source = Index::open(Path::new(source)).expect("source index");
    let want_hyperedges: u64 = hyperedges.parse().expect("HYPEREDGES");
    let want_entities: u64 = rest.first().map_or(u64::MAX, |e| e.parse().expect("ENTITIES"));
    let rows = |table| source.parts(table).unwrap().iter().map(|p| part_row_count(p).unwrap()).sum::<u64>();
    let (hyperedges, entities) = (rows(Table::KbHyperedges), rows(Table::KbEntities));
    let copies = want_hyperedges.div_ceil(hyperedges.max(1)) as usize;
    let entity_copies = (want_entities.div_ceil(entities.max(1)) as usize).min(copies);
    println!(
        "{copies} copies of {hyperedges} hyperedges, {entity_copies} of {entities} entities: {} hyperedges, {} entities",
        copies as u64 * hyperedges,
        entity_copies as u64 * entities
    );
    let out = Index::open_or_create(Path::new(out), Some(source.settings().buckets)).expect("output index");
    if out.kb_part(Table::KbThresholds).is_file() {
        println!("{} is complete: only its vector files are brought up to date", out.root().display());
        return write_vectors(&out);
    }
    let tables: Vec<Table> = KB_BUCKET_TABLES.into_iter().chain([Table::Documents]).collect();
    let jobs: Vec<(Table, std::path::PathBuf)> =
        tables.iter().flat_map(|&t| source.parts(t).unwrap().into_iter().map(move |p| (t, p))).collect();
    jobs.par_iter().for_each(|(table, part)| {
        let keep = match table {
            Table::KbEntities | Table::KbHyperedgeEntities | Table::KbAliases => entity_copies,
            _ => copies,
        };
        let batches = read_part(part, *table).expect("source part");
        let seed = fnv(&part.display().to_string());
        let copied: Vec<RecordBatch> =
            (0..keep).flat_map(|c| batches.iter().map(move |b| copy_batch(b, c, seed ^ c as u64))).collect();
        let copied = in_merge_order(*table, copied);
        let fingerprint = part_fingerprint(part, *table).expect("fingerprint").unwrap_or_default();
        let name = part.file_name().expect("part name");
        write_part(&out.table_dir(*table).join(name), *table, &format!("{fingerprint}x{copies}"), &copied)
            .expect("writing a part");
    });
    let thresholds = read_part(&source.kb_part(Table::KbThresholds), Table::KbThresholds).expect("thresholds");
    let whole = kb_parts_fingerprint(&out, &KB_BUCKET_TABLES).expect("kb fingerprint");
    write_part(&out.kb_part(Table::KbThresholds), Table::KbThresholds, &whole, &thresholds).expect("thresholds");
    write_vectors(&out);
    println!("written to {}", out.root().display());
}

/// Writes the kb's vector files and the approximate indexes of its large tables (`[ann]`, from
/// the configuration of the environment), as the merge does.
fn write_vectors(out: &Index) {
    let thresholds = read_part(&out.kb_part(Table::KbThresholds), Table::KbThresholds).expect("thresholds");
    let model = thresholds.iter().find_map(|b| {
        let models = b.column_by_name(col::MODEL)?.as_string::<i32>();
        (!models.is_empty()).then(|| models.value(0).to_owned())
    });
    let fingerprint = one_merge_fingerprint(out).expect("a whole kb");
    let model = model.expect("the kb's model");
    let written = write_vector_files(out, &model, &fingerprint).expect("vector files");
    println!("{written} vector files written");
    let started = std::time::Instant::now();
    let ann = Config::load(None).expect("configuration").ann;
    let built = write_ann_files(out, &model, &fingerprint, &ann).expect("approximate indexes");
    println!("approximate indexes of {built:?} built in {:.1} s", started.elapsed().as_secs_f64());
}

/// The rows of `batches` as one batch, sorted as a merge writes a part.
fn in_merge_order(table: Table, batches: Vec<RecordBatch>) -> Vec<RecordBatch> {
    let batch = one_batch(table, batches).expect("one batch");
    vec![kb::in_merge_order(table, batch).expect("sorted")]
}

/// Copy `copy` of a batch: ids renamed, vectors moved (copy 0 is the original).
fn copy_batch(batch: &RecordBatch, copy: usize, seed: u64) -> RecordBatch {
    if copy == 0 {
        return batch.clone();
    }
    let mut rng = fastrand::Rng::with_seed(seed);
    let schema = batch.schema();
    let columns = schema
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(field, column)| match field.name().as_str() {
            name if IDS.contains(&name) => {
                let ids = column.as_string::<i32>();
                Arc::new(ids.iter().map(|id| id.map(|id| format!("{id}~{copy}"))).collect::<StringArray>()) as ArrayRef
            }
            col::EMBEDDING => moved(column.as_fixed_size_list(), &mut rng),
            _ => column.clone(),
        })
        .collect();
    RecordBatch::try_new(schema, columns).expect("copied batch")
}

/// Every vector of `list` plus Gaussian noise, renormalised.
fn moved(list: &FixedSizeListArray, rng: &mut fastrand::Rng) -> ArrayRef {
    let DataType::FixedSizeList(inner, width) = list.data_type() else { unreachable!("a vector column") };
    let mut values = list.values().as_primitive::<Float32Type>().values().to_vec();
    for row in values.chunks_mut(*width as usize) {
        for x in row.iter_mut() {
            // Box–Muller: one standard normal from two uniforms.
            let (u, v) = (rng.f32().max(f32::MIN_POSITIVE), rng.f32());
            *x += NOISE * (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos();
        }
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        row.iter_mut().for_each(|x| *x /= norm);
    }
    let values = Arc::new(Float32Array::from(values));
    Arc::new(FixedSizeListArray::new(inner.clone(), *width, values, list.nulls().cloned()))
}

/// A seed from a name (FNV-1a).
fn fnv(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}
