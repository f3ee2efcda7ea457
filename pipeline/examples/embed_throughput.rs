//! MiniLM sentences per second on generated ~30-word sentences (the reference workload of the
//! design notes), or on the questions of a `questions.jsonl` file. Prints the first (cold) call
//! apart from the median of three warm runs. Threads follow RAYON_NUM_THREADS.
//!
//! `cargo run -p flexstruct-pipeline --example embed_throughput -- [SENTENCES] [BATCH] [QUESTIONS.jsonl]`
//!
//! For `make bench-embed` (`scripts/bench-embed.sh`), which runs PyTorch on the same texts:
//! - `embed_throughput generate N` prints the N generated sentences as JSON lines (`{"text": …}`);
//! - `embed_throughput time TEXTS.jsonl [BATCH [VECTORS.f32]]` embeds the first tenth (at least
//!   64) of the file's texts to warm up, then all of them timed, and prints `{"texts": n, "seconds": s}`; given a path, it writes
//!   the vectors there as little-endian f32, row after row.
//!
//! The model is the one the stages would run: the `[embed]` section with its
//! `FLEXSTRUCT_EMBED__*` variables (`FLEXSTRUCT_EMBED__RUNTIME=onnx`: ONNX Runtime, `make onnx`
//! first), at this run's batch size.
#![allow(clippy::unwrap_used)]

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::Instant;

use flexstruct_pipeline::config::Config;
use flexstruct_pipeline::models::{Embedder, embedder_for};

/// The configured embedder (`[embed]` and its environment variables) with `batch` texts a batch.
fn load(batch: usize) -> Box<dyn Embedder> {
    let mut embed = Config::load(None).expect("config").embed;
    embed.batch_size = batch;
    embedder_for(&embed, std::path::Path::new(".")).unwrap()
}

/// The design notes' workload: N sentences of 30 words drawn in a fixed pattern.
fn generated(n: usize) -> Vec<String> {
    let words = [
        "river",
        "authority",
        "measured",
        "the",
        "flow",
        "at",
        "gauge",
        "every",
        "summer",
        "and",
        "published",
        "readings",
        "for",
        "towns",
        "farms",
        "drought",
        "fund",
        "paid",
        "growers",
        "compact",
        "signed",
        "in",
        "May",
    ];
    (0..n)
        .map(|i| (0..30).map(|k| words[(i * 7 + k * 13 + k * k) % words.len()]).collect::<Vec<_>>().join(" ") + ".")
        .collect()
}

/// The `field` of every JSON line of a file.
fn read_field(path: &str, field: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()[field].as_str().unwrap().to_string())
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("generate") => {
            let n = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2000);
            for s in generated(n) {
                println!("{}", serde_json::json!({ "text": s }));
            }
        }
        Some("time") => {
            let texts = read_field(&args[1], "text");
            let batch = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(64);
            let model = load(batch);
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            model.embed(&refs[..refs.len().min(64.max(refs.len() / 10))]).unwrap();
            let started = Instant::now();
            let vectors = model.embed(&refs).unwrap();
            let seconds = started.elapsed().as_secs_f64();
            if let Some(path) = args.get(3) {
                let bytes: Vec<u8> = vectors.iter().flatten().flat_map(|v| v.to_le_bytes()).collect();
                std::fs::write(path, bytes).unwrap();
            }
            println!("{}", serde_json::json!({ "texts": texts.len(), "seconds": seconds }));
        }
        _ => throughput(&args),
    }
}

fn throughput(args: &[String]) {
    let n: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let batch: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(32);
    let sentences: Vec<String> = match args.get(2) {
        Some(path) => read_field(path, "question").into_iter().take(n).collect(),
        None => generated(n),
    };
    let n = sentences.len();
    let texts: Vec<&str> = sentences.iter().map(String::as_str).collect();
    let model = load(batch);
    let started = Instant::now();
    model.embed(&texts).unwrap();
    let cold = started.elapsed().as_secs_f64();
    let mut runs = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        model.embed(&texts).unwrap();
        runs.push(started.elapsed().as_secs_f64());
    }
    runs.sort_by(|a, b| a.total_cmp(b));
    println!(
        "{n} texts, batch {batch}, threads {}: median {:.0} texts/s ({:.2} ms each); first call {:.2} ms each",
        rayon::current_num_threads(),
        n as f64 / runs[1],
        runs[1] * 1000.0 / n as f64,
        cold * 1000.0 / n as f64
    );
}
