//! A server of the sample index on a free loopback port, and a client.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use flexstruct_pipeline::compose::{self, Change};
use flexstruct_pipeline::config::Config;
use flexstruct_pipeline::io::{Index, IndexLocation};
use flexstruct_serve::auth::Tokens;
use flexstruct_serve::served::{Served, Workers};
use flexstruct_serve::{Limits, Server, router};
use serde_json::Value;

/// The configuration of every test index: hashing vectors keep the tests fast.
pub fn config() -> Config {
    let mut config = Config::default();
    config.embed.model = "hashing-64".into();
    config
}

pub fn sample_corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/sample/corpus")
}

/// Builds an index of `corpus` at `path` with the stage code the service runs (on a thread of
/// its own: the stages start runtimes of their own, which a test's runtime must not be around).
pub fn build(path: &Path, corpus: &Path) {
    let (path, corpus) = (path.to_owned(), corpus.to_owned());
    std::thread::spawn(move || {
        let index = Index::open_or_create(&path, None).unwrap();
        compose::apply(&index, &config(), &Change::Add(corpus)).unwrap();
        compose::update(&index, &config(), &mut |_| {}).unwrap();
    })
    .join()
    .unwrap();
}

/// The sample index, built once; tests that change an index take a copy.
pub fn sample_index() -> &'static Path {
    static INDEX: OnceLock<PathBuf> = OnceLock::new();
    INDEX.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let index = dir.join("sample");
        build(&index, &sample_corpus());
        index
    })
}

/// A copy of the sample index of its own (hard links: stages replace files, never write into them).
pub fn sample_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sample");
    compose::copy_index(sample_index(), &path).unwrap();
    (dir, path)
}

/// A running server; it stops when dropped.
pub struct TestServer {
    pub base: String,
    pub server: Arc<Server>,
    pub client: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        for served in self.server.indexes.values() {
            served.stop();
        }
    }
}

pub struct Options {
    pub tokens: Tokens,
    pub limits: Limits,
    pub workers: Workers,
    pub config: Config,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            tokens: Tokens::default(),
            limits: Limits::default(),
            workers: Workers { threads: 2, max_batch: 16 },
            config: config(),
        }
    }
}

/// Serves `indexes` (name, folder) on a free loopback port.
pub async fn serve(indexes: &[(&str, &Path)], options: Options) -> TestServer {
    let specs: Vec<(String, PathBuf)> = indexes.iter().map(|(n, p)| (n.to_string(), p.to_path_buf())).collect();
    let (workers, config) = (options.workers, options.config);
    let opened = tokio::task::spawn_blocking(move || {
        let mut map = BTreeMap::new();
        for (name, path) in specs {
            map.insert(name.clone(), Served::open(&name, &IndexLocation::Local(path), &config, workers).unwrap());
        }
        map
    })
    .await
    .unwrap();
    let server = Arc::new(Server::new(opened, options.tokens, options.limits, false));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let app = router(server.clone());
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    let client = reqwest::Client::builder().timeout(Duration::from_secs(120)).build().unwrap();
    TestServer { base, server, client, stop: Some(stop) }
}

impl TestServer {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.client.get(self.url(path)).send().await.unwrap();
        status_json(response).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self.client.post(self.url(path)).json(&body).send().await.unwrap();
        status_json(response).await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        let response = self.client.delete(self.url(path)).send().await.unwrap();
        status_json(response).await
    }

    /// Waits for job `id` of `index` to end (at most a minute) and returns it.
    pub async fn wait_job(&self, index: &str, id: &str) -> Value {
        for _ in 0..600 {
            let (status, job) = self.get(&format!("/v1/indexes/{index}/jobs/{id}")).await;
            assert_eq!(status, 200, "{job}");
            if job["state"] == "done" || job["state"] == "failed" {
                return job;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("job {id} did not end in a minute");
    }
}

pub async fn status_json(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}"));
    (status, value)
}

/// The error of a response: its status, field and message.
pub fn error(value: &Value) -> (&str, &str) {
    (value["error"]["field"].as_str().unwrap_or(""), value["error"]["message"].as_str().unwrap_or(""))
}
