//! The server: its indexes, tokens, limits and metrics, the router of every endpoint, and the
//! middleware every request goes through (a limit on requests in flight that answers 503 with
//! `Retry-After` when full, a time limit, the body size limit, metrics and one log line).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::HeaderMap;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::sync::Semaphore;

use crate::auth::{Access, Tokens};
use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;
use crate::served::Served;
use crate::{api, documents, explorer, graph, system};

/// What the server lets one request take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest request body, in bytes.
    pub max_request_bytes: usize,
    /// Longest time to a response's head.
    pub request_timeout: Duration,
    /// Most requests in flight; more are answered 503 with `Retry-After`.
    pub max_in_flight: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_request_bytes: 32 << 20, request_timeout: Duration::from_secs(300), max_in_flight: 64 }
    }
}

/// The shared state of every request.
#[derive(Debug)]
pub struct Server {
    /// The served indexes by name.
    pub indexes: BTreeMap<String, Arc<Served>>,
    /// The bearer tokens.
    pub tokens: Tokens,
    /// The limits.
    pub limits: Limits,
    /// The metrics.
    pub metrics: Metrics,
    /// When the server started.
    pub started: Instant,
    /// Whether each request is logged.
    pub log_requests: bool,
    in_flight: Arc<Semaphore>,
}

/// The state handlers get.
pub type AppState = State<Arc<Server>>;

impl Server {
    /// A server of `indexes`.
    pub fn new(indexes: BTreeMap<String, Arc<Served>>, tokens: Tokens, limits: Limits, log_requests: bool) -> Server {
        Server {
            indexes,
            tokens,
            in_flight: Arc::new(Semaphore::new(limits.max_in_flight.max(1))),
            limits,
            metrics: Metrics::default(),
            started: Instant::now(),
            log_requests,
        }
    }

    /// The index a request names, after checking that its token may do `access` there. A
    /// request that names none gets the only index, when there is one.
    pub fn index(&self, headers: &HeaderMap, name: Option<&str>, access: Access) -> ApiResult<&Arc<Served>> {
        let served = match name {
            Some(name) => self.indexes.get(name).ok_or_else(|| {
                ApiError::not_found("index", format!("no index `{name}` is served here (these are: {})", self.names()))
            })?,
            None if self.indexes.len() == 1 => self.indexes.values().next().ok_or_else(ApiError::no_route)?,
            None => {
                return Err(ApiError::field("index", format!("name the index: this server serves {}", self.names())));
            }
        };
        self.tokens.check(authorization(headers), Some(&served.name), access)?;
        Ok(served)
    }

    /// Checks that the request's token may read something (for what spans every index).
    pub fn any(&self, headers: &HeaderMap) -> ApiResult<()> {
        self.tokens.check(authorization(headers), None, Access::Read)
    }

    fn names(&self) -> String {
        self.indexes.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
    }
}

/// The `Authorization` header.
pub fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok())
}

/// The body size limit of the request, as the middleware recorded it.
#[derive(Debug, Clone, Copy)]
struct BodyLimit(usize);

/// The body size limit a request is under.
pub fn body_limit(request: &Request) -> usize {
    request.extensions().get::<BodyLimit>().map_or(Limits::default().max_request_bytes, |l| l.0)
}

/// Every endpoint.
pub fn router(server: Arc<Server>) -> Router {
    let limit = server.limits.max_request_bytes;
    Router::new()
        .route("/", get(explorer::page))
        .route("/assets/{file}", get(explorer::asset))
        .route("/healthz", get(system::healthz))
        .route("/metrics", get(system::metrics))
        .route("/openapi.json", get(system::openapi))
        .route("/v1/models", get(api::models))
        .route("/v1/chat/completions", post(api::chat))
        .route("/v1/query", post(api::query))
        .route("/v1/retrieve", post(api::retrieve))
        .route("/v1/indexes", get(system::indexes))
        .route("/v1/indexes/{index}/documents", post(documents::upload).get(documents::list))
        .route("/v1/indexes/{index}/documents/{doc_id}", get(documents::read).delete(documents::delete))
        .route("/v1/indexes/{index}/jobs", get(documents::jobs))
        .route("/v1/indexes/{index}/jobs/{id}", get(documents::job))
        .route("/v1/indexes/{index}/entities", get(graph::entities))
        .route("/v1/indexes/{index}/entities/{id}", get(graph::entity))
        .route("/v1/indexes/{index}/hyperedges/{id}", get(graph::hyperedge))
        .fallback(|| async { ApiError::no_route() })
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(server.clone(), guard))
        .with_state(server)
}

/// The limits, the metrics and the log line of every request.
async fn guard(State(server): AppState, mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", |p| p.as_str()).to_owned();
    let method = request.method().to_string();
    let path = request.uri().path().to_owned();
    request.extensions_mut().insert(BodyLimit(server.limits.max_request_bytes));
    let response = match server.in_flight.clone().try_acquire_owned() {
        Err(_) => ApiError::unavailable(
            format!(
                "the server has {} requests in flight, its limit (--max-in-flight); try again shortly",
                server.limits.max_in_flight
            ),
            1,
        )
        .into_response(),
        Ok(_permit) => match tokio::time::timeout(server.limits.request_timeout, next.run(request)).await {
            Ok(response) => response,
            Err(_) => ApiError::unavailable(
                format!(
                    "the request took longer than {} s, this server's limit (--request-timeout-secs)",
                    server.limits.request_timeout.as_secs()
                ),
                5,
            )
            .into_response(),
        },
    };
    let seconds = started.elapsed().as_secs_f64();
    let status = response.status().as_u16();
    server.metrics.observe(&route, &method, status, seconds);
    if server.log_requests {
        crate::log(&format!("{method} {path} {status} {:.1} ms", seconds * 1000.0));
    }
    response
}
