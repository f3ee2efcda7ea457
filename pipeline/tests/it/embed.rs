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

/// ONNX Runtime's library where `make onnx` puts it (make test runs it).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn onnx_library() -> PathBuf {
    let library = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/models/onnxruntime/libonnxruntime.so");
    assert!(library.is_file(), "ONNX Runtime is missing: run `make onnx` (make test does)");
    library
}

#[test]
#[cfg(all(target_os = "linux", target_arch = "x86_64"))] // the pinned wheel `make onnx` fetches
fn onnx_runtime_matches_the_reference_and_candle() {
    let (reference, candle, from_candle) = embed_reference(4);
    let onnx = MiniLm::load_onnx(&model_dir(), 4, &onnx_library()).unwrap();
    let texts: Vec<&str> = reference.sentences.iter().map(String::as_str).collect();
    let vectors = onnx.embed(&texts).unwrap();
    assert_eq!(vectors.len(), texts.len());
    let (mut to_reference, mut to_candle) = (0f64, 0f32);
    for ((got, want), c) in vectors.iter().zip(&reference.vectors).zip(&from_candle) {
        assert_eq!(got.len(), 384);
        for ((g, w), c) in got.iter().zip(want).zip(c) {
            to_reference = to_reference.max((f64::from(*g) - w).abs());
            to_candle = to_candle.max((g - c).abs());
        }
    }
    assert!(to_reference <= 1e-6, "ONNX Runtime against the reference: max abs difference {to_reference}");
    assert!(to_candle <= 1e-6, "ONNX Runtime against candle: max abs difference {to_candle}");
    // The same model name either way: an index may be embedded by one and queried by the other.
    assert_eq!(onnx.model(), candle.model());
    assert_eq!((onnx.engine(), candle.engine()), ("onnx", "candle"));
    // One at a time (the single-batch path) gives the same vectors as batched.
    let alone = onnx.embed(&texts[..1]).unwrap();
    let diff = alone[0].iter().zip(&vectors[0]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(diff < 1e-5, "{diff}");
    assert!(onnx.embed(&[]).unwrap().is_empty());
}

#[test]
#[cfg(all(target_os = "linux", target_arch = "x86_64"))] // the pinned wheel `make onnx` fetches
fn onnx_files_that_are_missing_are_named() {
    let empty = tempfile::tempdir().unwrap();
    // A model folder without the graph (the weights' own files copied in).
    for name in ["config.json", "tokenizer.json", "sentence_bert_config.json"] {
        std::fs::copy(model_dir().join(name), empty.path().join(name)).unwrap();
    }
    let no_graph = MiniLm::load_onnx(empty.path(), 8, &onnx_library()).unwrap_err();
    assert!(matches!(no_graph, flexstruct_pipeline::Error::ModelMissing { .. }), "{no_graph}");
    assert!(no_graph.to_string().ends_with("model.onnx is missing"), "{no_graph}");
    let no_library = MiniLm::load_onnx(&model_dir(), 8, &empty.path().join("libonnxruntime.so")).unwrap_err();
    assert!(no_library.to_string().ends_with("libonnxruntime.so is missing"), "{no_library}");
}
