//! `GET /metrics`: Prometheus text. Requests by route, method and status, errors, a latency
//! histogram per route, and per index the rows of its kb, its generation, its questions waiting
//! and its jobs by state (those read when the metrics are asked for).

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::served::Served;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: String,
    method: String,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IndexLabels {
    index: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TableLabels {
    index: String,
    table: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartLabels {
    index: String,
    part: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    index: String,
    state: String,
}

/// The service's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    requests: Family<RequestLabels, Counter>,
    errors: Family<RouteLabels, Counter>,
    latency: Family<RouteLabels, Histogram, fn() -> Histogram>,
    kb_rows: Family<TableLabels, Gauge>,
    memory: Family<PartLabels, Gauge>,
    generation: Family<IndexLabels, Gauge>,
    waiting: Family<IndexLabels, Gauge>,
    jobs: Family<JobLabels, Gauge>,
}

fn latency_histogram() -> Histogram {
    // 0.5 ms to about 33 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 17))
}

impl Default for Metrics {
    fn default() -> Metrics {
        let metrics = Metrics {
            registry: Mutex::new(Registry::with_prefix("flexstruct")),
            requests: Family::default(),
            errors: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            kb_rows: Family::default(),
            memory: Family::default(),
            generation: Family::default(),
            waiting: Family::default(),
            jobs: Family::default(),
        };
        if let Ok(mut registry) = metrics.registry.lock() {
            registry.register("requests", "HTTP requests answered", metrics.requests.clone());
            registry.register(
                "request_errors",
                "HTTP requests answered with a 4xx or 5xx status",
                metrics.errors.clone(),
            );
            registry.register(
                "request_duration_seconds",
                "Time from a request to its response's head",
                metrics.latency.clone(),
            );
            registry.register("kb_rows", "Rows of each table of a served index's kb", metrics.kb_rows.clone());
            registry.register(
                "index_memory_bytes",
                "Heap bytes a served index's current generation keeps, by part (capacities, as counted by the index)",
                metrics.memory.clone(),
            );
            registry.register(
                "kb_generation",
                "The kb generation a served index answers from",
                metrics.generation.clone(),
            );
            registry.register("questions_waiting", "Questions queued for an index's workers", metrics.waiting.clone());
            registry.register("jobs", "Update jobs of a served index by state", metrics.jobs.clone());
        }
        metrics
    }
}

impl Metrics {
    /// Counts one answered request.
    pub fn observe(&self, route: &str, method: &str, status: u16, seconds: f64) {
        let route = route.to_owned();
        self.requests.get_or_create(&RequestLabels { route: route.clone(), method: method.to_owned(), status }).inc();
        if status >= 400 {
            self.errors.get_or_create(&RouteLabels { route: route.clone() }).inc();
        }
        self.latency.get_or_create(&RouteLabels { route }).observe(seconds);
    }

    /// The metrics as Prometheus text, the indexes' gauges read now.
    pub fn render(&self, indexes: &BTreeMap<String, std::sync::Arc<Served>>) -> String {
        for (name, served) in indexes {
            let generation = served.generation();
            let index = IndexLabels { index: name.clone() };
            self.generation.get_or_create(&index).set(generation.number as i64);
            self.waiting.get_or_create(&index).set(served.batcher().waiting() as i64);
            for (table, rows) in generation.sizes() {
                let labels = TableLabels { index: name.clone(), table: table.to_owned() };
                self.kb_rows.get_or_create(&labels).set(rows as i64);
            }
            for (part, bytes) in generation.memory() {
                let labels = PartLabels { index: name.clone(), part: part.to_owned() };
                self.memory.get_or_create(&labels).set(bytes as i64);
            }
            for (state, count) in served.jobs.counts() {
                let labels = JobLabels { index: name.clone(), state: state.to_owned() };
                self.jobs.get_or_create(&labels).set(count as i64);
            }
        }
        let mut out = String::new();
        if let Ok(registry) = self.registry.lock()
            && let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry)
        {
            crate::log(&format!("encoding the metrics: {e}"));
        }
        out
    }
}
