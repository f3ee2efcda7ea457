//! all-MiniLM-L6-v2 in process: the tokenizer, our BERT encoder (`bert.rs`) or ONNX Runtime,
//! mean pooling and L2 normalisation exactly as sentence-transformers runs them, batched by
//! length on every core.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use candle_core::{DType, Device, Tensor};
use tokenizers::{Tokenizer, TruncationParams};

use super::bert::{BertConfig, BertEncoder};
use super::{Embedder, candle_error};
use crate::core::models::{MINILM, MINILM_DIM};
use crate::core::{Error, Result, threads};

/// The file `make onnx` writes into the model folder: the encoder, mean pooling and L2
/// normalisation as one ONNX graph (`scripts/minilm_onnx.py`), fp32.
pub const ONNX_GRAPH: &str = "model.onnx";

/// all-MiniLM-L6-v2 exactly as sentence-transformers runs it: inputs truncated at 256 tokens,
/// padded to the longest input of each batch, mean pooling over the attention mask, L2
/// normalisation.
pub struct MiniLm {
    encoder: Encoder,
    tokenizer: Tokenizer,
    batch_size: usize,
    /// One single-threaded pool per core: several batches run side by side, each on one core.
    lanes: Vec<rayon::ThreadPool>,
}

/// What computes the vectors of a batch.
enum Encoder {
    /// Our BERT encoder over candle; pooling in [`MiniLm::embed_batch`].
    Candle(BertEncoder, Device),
    /// ONNX Runtime on [`ONNX_GRAPH`], which pools and normalises itself. One session per lane,
    /// each on one thread, as the candle encoder runs.
    Onnx(Vec<Mutex<ort::session::Session>>),
}

impl std::fmt::Debug for MiniLm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let runtime = match self.encoder {
            Encoder::Candle(..) => "candle",
            Encoder::Onnx(_) => "onnx",
        };
        f.debug_struct("MiniLm")
            .field("runtime", &runtime)
            .field("batch_size", &self.batch_size)
            .finish_non_exhaustive()
    }
}

/// The files of the model folder the candle encoder reads, checked before anything loads.
const MODEL_FILES: [&str; 4] = ["config.json", "model.safetensors", "tokenizer.json", "sentence_bert_config.json"];

/// ONNX Runtime's environment: one per process (the crate allows no second one), made by the
/// first ONNX model loaded, from that load's library.
static ONNX_ENVIRONMENT: Mutex<Option<ort::environment::Environment>> = Mutex::new(None);

impl MiniLm {
    /// Loads the model from a folder with `config.json`, `model.safetensors`, `tokenizer.json`
    /// and `sentence_bert_config.json` (what `make model` unpacks), for our candle encoder.
    pub fn load(dir: &Path, batch_size: usize) -> Result<MiniLm> {
        require(&MODEL_FILES.map(|f| dir.join(f)))?;
        let config: BertConfig = serde_json::from_slice(&read(dir, "config.json")?)?;
        let device = Device::Cpu;
        let weights = candle_core::safetensors::load(dir.join("model.safetensors"), &device)
            .map_err(candle_error("loading model.safetensors"))?;
        let model = BertEncoder::new(&config, weights, &dir.join("model.safetensors").display().to_string())?;
        let tokenizer = tokenizer(dir, model.max_len())?;
        Ok(MiniLm {
            encoder: Encoder::Candle(model, device),
            tokenizer,
            batch_size: batch_size.max(1),
            lanes: lanes()?,
        })
    }

    /// The same model run by ONNX Runtime: the folder's tokenizer and [`ONNX_GRAPH`], and the
    /// runtime's shared `library` (both from `make onnx`).
    pub fn load_onnx(dir: &Path, batch_size: usize, library: &Path) -> Result<MiniLm> {
        let graph = dir.join(ONNX_GRAPH);
        require(&[
            dir.join("config.json"),
            dir.join("tokenizer.json"),
            dir.join("sentence_bert_config.json"),
            graph.clone(),
            library.to_path_buf(),
        ])?;
        let onnx = |what: String| move |e: ort::Error| Error::Model { model: MINILM.into(), what, source: Box::new(e) };
        let environment = {
            let mut slot =
                ONNX_ENVIRONMENT.lock().map_err(|_| Error::Internal("ONNX Runtime's environment lock".into()))?;
            match &*slot {
                Some(environment) => environment.clone(),
                None => {
                    let environment = ort::init_from(library)
                        .map_err(|e| Error::Model {
                            model: MINILM.into(),
                            what: format!("loading ONNX Runtime from {}", library.display()),
                            source: Box::new(e),
                        })?
                        .with_name("flexstruct")
                        .build()
                        .map_err(onnx("starting ONNX Runtime".into()))?;
                    slot.insert(environment).clone()
                }
            }
        };
        let lanes = lanes()?;
        let session = || -> std::result::Result<ort::session::Session, ort::Error> {
            ort::session::Session::builder(&environment)?
                .with_intra_threads(1)?
                .with_inter_threads(1)?
                .commit_from_file(&graph)
        };
        let sessions = (0..lanes.len())
            .map(|_| session().map(Mutex::new).map_err(onnx(format!("loading {}", graph.display()))))
            .collect::<Result<Vec<_>>>()?;
        let config: serde_json::Value = serde_json::from_slice(&read(dir, "config.json")?)?;
        let positions = config["max_position_embeddings"].as_u64().unwrap_or(512) as usize;
        let tokenizer = tokenizer(dir, positions)?;
        Ok(MiniLm { encoder: Encoder::Onnx(sessions), tokenizer, batch_size: batch_size.max(1), lanes })
    }

    /// Embeds one batch of token-id sequences on lane `lane`.
    fn embed_batch(&self, ids: &[&[u32]], lane: usize) -> Result<Vec<Vec<f32>>> {
        let longest = ids.iter().map(|i| i.len()).max().unwrap_or(0).max(1);
        let mut input = Vec::with_capacity(ids.len() * longest);
        let mut mask = Vec::with_capacity(ids.len() * longest);
        for seq in ids {
            input.extend(seq.iter().copied());
            input.extend(std::iter::repeat_n(0u32, longest - seq.len()));
            mask.extend(std::iter::repeat_n(1u32, seq.len()));
            mask.extend(std::iter::repeat_n(0u32, longest - seq.len()));
        }
        let shape = (ids.len(), longest);
        let (model, device) = match &self.encoder {
            Encoder::Candle(model, device) => (model, device),
            Encoder::Onnx(sessions) => return run_onnx(&sessions[lane % sessions.len()], input, mask, shape),
        };
        let err = candle_error("running MiniLM");
        let input = Tensor::from_vec(input, shape, device).map_err(&err)?;
        let mask = Tensor::from_vec(mask, shape, device).map_err(&err)?;
        let hidden = model.forward(&input, &mask).map_err(&err)?;
        // Mean over real tokens, then L2 normalisation.
        let mask = mask.to_dtype(DType::F32).map_err(&err)?.unsqueeze(2).map_err(&err)?;
        let summed = hidden.broadcast_mul(&mask).map_err(&err)?.sum(1).map_err(&err)?;
        let counts = mask.sum(1).map_err(&err)?.clamp(1e-9, f64::MAX).map_err(&err)?;
        let mean = summed.broadcast_div(&counts).map_err(&err)?;
        let norm = mean
            .sqr()
            .map_err(&err)?
            .sum_keepdim(1)
            .map_err(&err)?
            .sqrt()
            .map_err(&err)?
            .clamp(1e-12, f64::MAX)
            .map_err(&err)?;
        mean.broadcast_div(&norm).map_err(&err)?.to_vec2::<f32>().map_err(&err)
    }
}

/// One batch through an ONNX Runtime session: ids and mask as int64 `batch × length`, the
/// graph's `sentence_embedding` (`batch × 384`, pooled and normalised) back.
fn run_onnx(
    session: &Mutex<ort::session::Session>,
    ids: Vec<u32>,
    mask: Vec<u32>,
    (batch, len): (usize, usize),
) -> Result<Vec<Vec<f32>>> {
    let err = |e: ort::Error| Error::Model {
        model: MINILM.into(),
        what: "running MiniLM in ONNX Runtime".into(),
        source: Box::new(e),
    };
    let tensor =
        |v: Vec<u32>| ort::value::Tensor::from_array(([batch, len], v.into_iter().map(i64::from).collect::<Vec<_>>()));
    let (ids, mask) = (tensor(ids).map_err(err)?, tensor(mask).map_err(err)?);
    let mut session = session.lock().map_err(|_| Error::Internal("an ONNX Runtime session's lock".into()))?;
    let outputs = session.run(ort::inputs!["input_ids" => ids, "attention_mask" => mask]).map_err(err)?;
    let (shape, values) = outputs["sentence_embedding"].try_extract_tensor::<f32>().map_err(err)?;
    if shape.len() != 2 || shape[0] as usize != batch || shape[1] as usize != MINILM_DIM {
        return Err(Error::Internal(format!("{ONNX_GRAPH} returned a {shape:?} output for {batch} inputs")));
    }
    Ok(values.chunks(MINILM_DIM).map(<[f32]>::to_vec).collect())
}

/// Fails with [`Error::ModelMissing`] on the first of `files` that is not there.
fn require(files: &[PathBuf]) -> Result<()> {
    match files.iter().find(|f| !f.is_file()) {
        Some(missing) => Err(Error::ModelMissing { model: MINILM.into(), path: missing.clone() }),
        None => Ok(()),
    }
}

fn read(dir: &Path, name: &str) -> Result<Vec<u8>> {
    std::fs::read(dir.join(name)).map_err(Error::io("reading the embedding model", dir.join(name)))
}

/// The folder's tokenizer, truncating at sentence-transformers' `max_seq_length` (at most
/// `positions`) and padding nothing (batches pad themselves).
fn tokenizer(dir: &Path, positions: usize) -> Result<Tokenizer> {
    let st_config: serde_json::Value = serde_json::from_slice(&read(dir, "sentence_bert_config.json")?)?;
    let max_len = st_config["max_seq_length"].as_u64().unwrap_or(256) as usize;
    let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json")).map_err(|e| Error::Model {
        model: MINILM.into(),
        what: format!("reading {}", dir.join("tokenizer.json").display()),
        source: e,
    })?;
    // The shipped tokenizer pads and truncates at 128; sentence-transformers truncates at
    // max_seq_length and pads per batch (`MiniLm::embed_batch`).
    tokenizer.with_padding(None);
    tokenizer
        .with_truncation(Some(TruncationParams { max_length: max_len.min(positions), ..TruncationParams::default() }))
        .map_err(|e| Error::Model {
            model: MINILM.into(),
            what: "setting the tokenizer's truncation".into(),
            source: e,
        })?;
    Ok(tokenizer)
}

/// One single-threaded pool per core.
fn lanes() -> Result<Vec<rayon::ThreadPool>> {
    (0..threads::count())
        .map(|_| rayon::ThreadPoolBuilder::new().num_threads(1).build())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Runtime { what: "the embedding threads", source: Box::new(e) })
}

impl Embedder for MiniLm {
    fn model(&self) -> &str {
        MINILM
    }

    fn engine(&self) -> &'static str {
        match self.encoder {
            Encoder::Candle(..) => "candle",
            Encoder::Onnx(_) => "onnx",
        }
    }

    fn dim(&self) -> usize {
        MINILM_DIM
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let encodings = self.tokenizer.encode_batch(texts.to_vec(), true).map_err(|e| Error::Model {
            model: MINILM.into(),
            what: "tokenizing".into(),
            source: e,
        })?;
        // Batch by length so that little padding is computed.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(encodings[i].get_ids().len()));
        // Few texts (a batch of questions): at least four batches per core, so that the cores
        // finish together and each batch pads to a length close to its own (ultradomain-mix's
        // 67 questions: 7.2 ms each against 10.2 ms with one batch per core; CHANGELOG.md, measurement history),
        // but never fewer than MIN_BATCH texts in a batch.
        let batch_size = self.batch_size.min(texts.len().div_ceil(4 * self.lanes.len().max(1)).max(MIN_BATCH));
        let batches = length_batches(&order, |i| encodings[i].get_ids().len(), batch_size);
        let run = |batch: &[usize], lane: usize| {
            let ids: Vec<&[u32]> = batch.iter().map(|&i| encodings[i].get_ids()).collect();
            self.embed_batch(&ids, lane)
        };
        let vectors: Vec<Vec<Vec<f32>>> = if batches.len() < 2 || self.lanes.len() < 2 {
            // One batch: candle spreads each operation over every core (ONNX Runtime's session
            // runs it on one).
            batches.iter().map(|b| run(b, 0)).collect::<Result<_>>()?
        } else {
            // Several batches: one per core at a time, each single-threaded, which avoids
            // candle's per-operation thread barriers (CHANGELOG.md, measurement history). Its pool for large
            // element-wise operations still runs unless CANDLE_NUM_THREADS=1 (the Makefile
            // sets it): beside these workers it is one busy thread too many.
            let next = std::sync::atomic::AtomicUsize::new(0);
            let done: Vec<Vec<BatchResult>> = std::thread::scope(|scope| {
                let workers: Vec<_> = self
                    .lanes
                    .iter()
                    .enumerate()
                    .map(|(number, lane)| {
                        let (next, batches, run) = (&next, &batches, &run);
                        scope.spawn(move || {
                            lane.install(|| {
                                let mut mine = Vec::new();
                                loop {
                                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                    let Some(batch) = batches.get(i) else { break mine };
                                    mine.push((i, run(batch, number)));
                                }
                            })
                        })
                    })
                    .collect();
                workers.into_iter().map(|w| w.join().unwrap_or_default()).collect()
            });
            let mut slots: Vec<Option<Vec<Vec<f32>>>> = vec![None; batches.len()];
            for (i, result) in done.into_iter().flatten() {
                slots[i] = Some(result?);
            }
            slots
                .into_iter()
                .map(|v| v.ok_or_else(|| Error::Internal("an embedding worker stopped early".into())))
                .collect::<Result<_>>()?
        };
        let mut out = vec![Vec::new(); texts.len()];
        for (batch, batch_vectors) in batches.iter().zip(vectors) {
            for (&i, v) in batch.iter().zip(batch_vectors) {
                out[i] = v;
            }
        }
        Ok(out)
    }
}

/// Fewest texts per batch when a few texts are cut into batches: single texts run far below
/// the model's speed (60 against 97 sentences/s at batches of 8; CHANGELOG.md, measurement history).
const MIN_BATCH: usize = 4;

/// A batch's number and its vectors.
type BatchResult = (usize, Result<Vec<Vec<f32>>>);

/// Largest attention-score tensor of one batch (batch × 12 heads × length² × 4 bytes). Long
/// inputs get smaller batches: with fixed batches of 64, 256-token inputs allocate 200 MB per
/// layer, which costs page faults on every allocation and runs out of cache. Measured on the
/// sample corpus's 707 units (CHANGELOG.md, measurement history): no cap 49 s; 24 MB 24.8 s; 8 MB 20.5 s; 4 MB, 2 MB,
/// 1 MB 18.0–18.4 s. At 4 MB, ~30-token sentences still fill batches of 64.
const MAX_ATTENTION_BYTES: usize = 4 << 20;

/// Consecutive runs of `order` (sorted by decreasing length) of at most `batch_size` items whose
/// attention scores fit [`MAX_ATTENTION_BYTES`] (always at least one item).
fn length_batches(order: &[usize], len: impl Fn(usize) -> usize, batch_size: usize) -> Vec<&[usize]> {
    let mut batches = Vec::new();
    let mut start = 0;
    while start < order.len() {
        let longest = len(order[start]).max(1);
        let fit = (MAX_ATTENTION_BYTES / (12 * 4 * longest * longest)).clamp(1, batch_size.max(1));
        let end = (start + fit).min(order.len());
        batches.push(&order[start..end]);
        start = end;
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_inputs_get_smaller_batches() {
        let lengths = [256, 256, 250, 200, 100, 33, 33, 33, 10, 1];
        let order: Vec<usize> = (0..lengths.len()).collect();
        let batches = length_batches(&order, |i| lengths[i], 64);
        assert_eq!(batches.concat(), order);
        for b in &batches {
            let longest = lengths[b[0]];
            assert!(b.len() == 1 || b.len() * 12 * 4 * longest * longest <= MAX_ATTENTION_BYTES, "{b:?}");
        }
        // 256 tokens: one input at a time; short inputs fill a whole batch.
        assert_eq!(length_batches(&[0; 20], |_| 256, 64).first().map(|b| b.len()), Some(1));
        assert_eq!(length_batches(&[0; 30], |_| 64, 64).first().map(|b| b.len()), Some(21));
        assert_eq!(length_batches(&[0; 100], |_| 33, 64).first().map(|b| b.len()), Some(64));
        assert!(length_batches(&[], |_| 1, 64).is_empty());
    }
}
