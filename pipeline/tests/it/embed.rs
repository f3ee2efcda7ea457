//! all-MiniLM-L6-v2 in candle against reference vectors computed once by an independent numpy
//! implementation (`scripts/minilm_reference.py`), committed as a fixture.

use std::path::PathBuf;

use flexstruct_pipeline::models::{Embedder, MiniLm};

fn model_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/models/all-MiniLM-L6-v2");
    assert!(
        dir.join("model.safetensors").is_file(),
        "the MiniLM weights are missing: run `make model` (make test does)"
    );
    dir
}

#[derive(serde::Deserialize)]
struct Reference {
    sentences: Vec<String>,
    vectors: Vec<Vec<f64>>,
}

fn reference() -> Reference {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/minilm_reference.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The reference fixture and MiniLM's vectors of its sentences at `batch_size`.
fn embed_reference(batch_size: usize) -> (Reference, MiniLm, Vec<Vec<f32>>) {
    let reference = reference();
    let model = MiniLm::load(&model_dir(), batch_size).unwrap();
    let texts: Vec<&str> = reference.sentences.iter().map(String::as_str).collect();
    let vectors = model.embed(&texts).unwrap();
    (reference, model, vectors)
}

#[test]
fn minilm_matches_the_reference_within_1e_6() {
    // Batch size 4 mixes lengths (one input is longer than the 256-token limit) and padding.
    let (reference, _, vectors) = embed_reference(4);
    let mut worst = 0f64;
    for (got, want) in vectors.iter().zip(&reference.vectors) {
        assert_eq!(got.len(), 384);
        for (g, w) in got.iter().zip(want) {
            worst = worst.max((f64::from(*g) - w).abs());
        }
    }
    assert!(worst <= 1e-6, "max abs difference {worst}");
}

#[test]
fn batching_does_not_change_vectors() {
    let (reference, model, together) = embed_reference(32);
    for (text, v) in reference.sentences.iter().zip(&together) {
        let alone = model.embed(&[text]).unwrap();
        let diff = alone[0].iter().zip(v).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(diff < 1e-5, "{text}: {diff}");
    }
    // The library names the missing file; the binaries add how to fetch it.
    let missing = MiniLm::load(std::path::Path::new("/nonexistent/model"), 8).unwrap_err();
    assert!(matches!(missing, flexstruct_pipeline::Error::ModelMissing { .. }), "{missing}");
    assert!(missing.to_string().contains("model/config.json is missing"), "{missing}");
}
