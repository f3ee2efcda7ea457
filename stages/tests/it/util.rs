//! Helpers: run a stage binary, read tables back, fingerprint an index's data files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Result of running a binary.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn from(output: Output) -> Run {
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

pub fn bin(name: &str) -> PathBuf {
    match name {
        "ingest" => env!("CARGO_BIN_EXE_flexstruct-ingest").into(),
        "chunk" => env!("CARGO_BIN_EXE_flexstruct-chunk").into(),
        "sql" => env!("CARGO_BIN_EXE_flexstruct-sql").into(),
        "extract" => env!("CARGO_BIN_EXE_flexstruct-extract").into(),
        "hypergraph" => env!("CARGO_BIN_EXE_flexstruct-hypergraph").into(),
        "graph" => env!("CARGO_BIN_EXE_flexstruct-graph").into(),
        "embed" => env!("CARGO_BIN_EXE_flexstruct-embed").into(),
        "cluster" => env!("CARGO_BIN_EXE_flexstruct-cluster").into(),
        "merge" => env!("CARGO_BIN_EXE_flexstruct-merge").into(),
        "paths" => env!("CARGO_BIN_EXE_flexstruct-paths").into(),
        "query" => env!("CARGO_BIN_EXE_flexstruct-query").into(),
        "eval" => env!("CARGO_BIN_EXE_flexstruct-eval").into(),
        "status" => env!("CARGO_BIN_EXE_flexstruct-status").into(),
        "index" => env!("CARGO_BIN_EXE_flexstruct-index").into(),
        // Test tooling, a binary of the testkit crate (built beside these by `cargo test --workspace`).
        "standin-llm" => {
            let path = Path::new(env!("CARGO_BIN_EXE_flexstruct-query")).with_file_name("flexstruct-standin-llm");
            assert!(path.exists(), "{} is not built: cargo build -p flexstruct-testkit --bins", path.display());
            path
        }
        other => panic!("no binary {other}"),
    }
}

/// Runs a stage binary with a clean FLEXSTRUCT_* environment.
pub fn run(name: &str, args: &[&str]) -> Run {
    run_env(name, args, &[])
}

pub fn run_env(name: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(bin(name));
    cmd.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("FLEXSTRUCT_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    Run::from(cmd.output().expect("binary runs"))
}

/// Runs `ingest` then `chunk` (with an optional config file) and returns both runs.
pub fn ingest_chunk(index: &Path, corpus: &Path, config: Option<&Path>) -> (Run, Run) {
    let index = index.to_str().unwrap();
    let mut common = vec!["--index", index, "--quiet"];
    if let Some(config) = config {
        common.extend(["--config", config.to_str().unwrap()]);
    }
    let mut args = common.clone();
    args.extend(["--corpus", corpus.to_str().unwrap()]);
    (run("ingest", &args), run("chunk", &common))
}

/// Runs a query and parses its JSON output.
pub fn query(index: &Path, sql: &str) -> Vec<serde_json::Value> {
    let out = run("sql", &["--index", index.to_str().unwrap(), "--format", "json", sql]);
    assert_eq!(out.code, 0, "query failed: {}", out.stderr);
    serde_json::from_str(&out.stdout).expect("JSON output")
}

/// One scalar from a query.
pub fn scalar(index: &Path, sql: &str) -> serde_json::Value {
    let rows = query(index, sql);
    let row = rows.first().and_then(|r| r.as_object()).expect("one row");
    row.values().next().cloned().expect("one column")
}

/// Content hash of every data part file (the manifest, a log of runs, and the empty lock files
/// are left out).
pub fn data_files(index: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    collect(index, index, &mut out);
    out
}

fn collect(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        if rel.starts_with("manifest") || rel.starts_with(".locks") {
            continue;
        }
        if path.is_dir() {
            collect(root, &path, out);
        } else {
            let bytes = std::fs::read(&path).unwrap();
            out.insert(rel, format!("{:x}", md5ish(&bytes)));
        }
    }
}

/// A cheap content hash (FNV-1a); enough to see whether a file changed.
fn md5ish(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// Writes `files` (relative path → bytes) under `dir`.
pub fn write_files(dir: &Path, files: &[(&str, &[u8])]) {
    for (name, bytes) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
}

/// A small config file with low thresholds so that short fixtures make several chunks.
pub fn small_chunks_config(dir: &Path) -> PathBuf {
    let path = dir.join("small.toml");
    std::fs::write(&path, "[index]\nbuckets = 4\n\n[chunk]\nct_min = 20\nct_max = 40\n").unwrap();
    path
}
