//! `flexstruct-serve`: serves indexes over HTTP (JSON endpoints, OpenAI's chat API, a web
//! explorer), loaded once and updated live.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;
use flexstruct_pipeline::config::Config;
use flexstruct_pipeline::core::threads;
use flexstruct_pipeline::io::IndexLocation;
use flexstruct_serve::auth::Tokens;
use flexstruct_serve::served::{Served, Workers};
use flexstruct_serve::{Limits, Server, log, router};

/// The allocator of every flexstruct binary (see flexstruct-stages).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Serves indexes over HTTP: questions (`/v1/query`, `/v1/retrieve`, OpenAI's
/// `/v1/chat/completions`), documents added and deleted while it answers, the graph, and a web
/// explorer at `/`.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "Examples:\n  flexstruct-serve --index data/indexes/sample\n  \
                  flexstruct-serve --index docs=data/indexes/docs --index wiki=s3://bucket/wiki --listen 127.0.0.1:9000\n\
                  Tokens come from the environment: FLEXSTRUCT_SERVE_READ_TOKENS and FLEXSTRUCT_SERVE_WRITE_TOKENS, \
                  comma-separated, each TOKEN (every index) or TOKEN@INDEX (one index). See docs/serving.md."
)]
struct Args {
    /// An index to serve, as `name=PATH` or `PATH` (named by its folder); a folder, or
    /// `s3://bucket/prefix` (served read-only). Repeatable.
    #[arg(long = "index", required = true, value_name = "[NAME=]DIR|s3://BUCKET/PREFIX")]
    indexes: Vec<String>,
    /// Pipeline configuration (TOML) of every index; `FLEXSTRUCT_<SECTION>__<KEY>` variables
    /// override it.
    #[arg(long, env = "FLEXSTRUCT_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, env = "FLEXSTRUCT_SERVE_LISTEN", default_value = "127.0.0.1:8080", value_name = "ADDR:PORT")]
    listen: SocketAddr,
    /// Listen beyond loopback without bearer tokens (anyone who reaches the port may read and
    /// change every index).
    #[arg(long)]
    allow_open: bool,
    /// Largest request body in bytes (uploads included).
    #[arg(long, env = "FLEXSTRUCT_SERVE_MAX_REQUEST_BYTES", default_value_t = 32 << 20, value_name = "BYTES")]
    max_request_bytes: usize,
    /// Longest time to a response, in seconds.
    #[arg(long, env = "FLEXSTRUCT_SERVE_REQUEST_TIMEOUT_SECS", default_value_t = 300, value_name = "SECS")]
    request_timeout_secs: u64,
    /// Most requests in flight; more are answered 503 with Retry-After.
    #[arg(long, env = "FLEXSTRUCT_SERVE_MAX_IN_FLIGHT", default_value_t = 64, value_name = "N")]
    max_in_flight: usize,
    /// Threads taking batches of questions per index. One is enough: a batch's embedding and
    /// scans already use every core, and an LLM's answers are waited for apart (on ultradomain-mix
    /// one gave more questions a second than two or four; BENCHMARKS.md, "The service").
    #[arg(long, env = "FLEXSTRUCT_SERVE_WORKERS", default_value_t = 1, value_name = "N")]
    workers: usize,
    /// Most questions answered together as one batch.
    #[arg(long, env = "FLEXSTRUCT_SERVE_MAX_BATCH", default_value_t = 32, value_name = "N")]
    max_batch: usize,
    /// No line per request in the log.
    #[arg(long, short, env = "FLEXSTRUCT_QUIET")]
    quiet: bool,
    /// Threads for parallel work (0 or unset: every core, or RAYON_NUM_THREADS).
    #[arg(long, env = "FLEXSTRUCT_THREADS", value_name = "N")]
    threads: Option<usize>,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log(&format!("error: {e:#}"));
            ExitCode::from(2)
        }
    }
}

/// `name=location` or `location`, named by its last path component.
fn parse_index(spec: &str) -> anyhow::Result<(String, IndexLocation)> {
    let (name, location) = match spec.split_once('=') {
        Some((name, location)) if !name.contains('/') && !name.contains(':') => (Some(name.trim()), location),
        _ => (None, spec),
    };
    let location: IndexLocation = location.parse().map_err(|e: String| anyhow::anyhow!("--index {spec}: {e}"))?;
    let name = match name {
        Some(name) => name.to_owned(),
        None => {
            let text = location.to_string();
            let trimmed = text.trim_end_matches('/');
            trimmed.rsplit('/').next().unwrap_or(trimmed).to_owned()
        }
    };
    let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !valid {
        bail!(
            "--index {spec}: the name `{name}` may hold only letters, digits, `-`, `_` and `.` (give one: NAME=PATH)"
        );
    }
    Ok((name, location))
}

fn run(args: Args) -> anyhow::Result<()> {
    let sized = threads::init(args.threads)?;
    if let Some(note) = &sized.note {
        log(&format!("note: {note}"));
    }
    let cores = sized.threads;
    let config = Config::load(args.config.as_deref())?;
    config.validate()?;
    let mut specs = Vec::new();
    for spec in &args.indexes {
        let (name, location) = parse_index(spec)?;
        if specs.iter().any(|(n, _)| n == &name) {
            bail!("--index {spec}: two indexes are named `{name}` (name them: NAME=PATH)");
        }
        specs.push((name, location));
    }
    let names: Vec<&str> = specs.iter().map(|(n, _)| n.as_str()).collect();
    let tokens = Tokens::from_env(&names, |k| std::env::var(k).ok());
    if !tokens.enabled() && !args.listen.ip().is_loopback() && !args.allow_open {
        bail!(
            "--listen {}: beyond loopback without bearer tokens anyone could read and change every index; \
             set FLEXSTRUCT_SERVE_READ_TOKENS / FLEXSTRUCT_SERVE_WRITE_TOKENS, or pass --allow-open",
            args.listen
        );
    }
    let most = cores.max(1) * 4;
    if args.workers > most {
        log(&format!("--workers {}: more than four a core do not help; using {most}", args.workers));
    }
    let workers = Workers { threads: args.workers.clamp(1, most), max_batch: args.max_batch.clamp(1, 1024) };
    let started = std::time::Instant::now();
    let mut indexes = BTreeMap::new();
    for (name, location) in specs {
        let served = Served::open(&name, &location, &config, workers)?;
        let generation = served.generation();
        log(&format!(
            "index {name} ({location}): kb loaded in {:.2} s, {} documents{}",
            generation.load_seconds,
            generation.documents.len(),
            if served.writable() { "" } else { ", read-only" }
        ));
        indexes.insert(name, served);
    }
    let limits = Limits {
        max_request_bytes: args.max_request_bytes,
        request_timeout: Duration::from_secs(args.request_timeout_secs.max(1)),
        max_in_flight: args.max_in_flight.max(1),
    };
    let server = Arc::new(Server::new(indexes, tokens, limits, !args.quiet));
    let runtime = threads::runtime()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("listening on {}", args.listen))?;
        let address = listener.local_addr()?;
        log(&format!(
            "serving {} index(es) on http://{address}/ (ready in {:.2} s; tokens {})",
            server.indexes.len(),
            started.elapsed().as_secs_f64(),
            if server.tokens.enabled() { "required" } else { "not required" }
        ));
        let flush = server.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(60)).await;
                let indexes = flush.clone();
                let _ =
                    tokio::task::spawn_blocking(move || indexes.indexes.values().for_each(|s| s.record_calls())).await;
            }
        });
        let app = router(server.clone());
        axum::serve(listener, app).with_graceful_shutdown(shutdown()).await.context("serving")?;
        log("stopping: waiting for the update in progress, if any");
        for served in server.indexes.values() {
            served.stop();
            served.record_calls();
        }
        anyhow::Ok(())
    })
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {}
        _ = terminate => {}
    }
}
