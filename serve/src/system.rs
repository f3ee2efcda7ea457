//! The server itself: health, metrics, the OpenAPI description and the list of indexes.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;
use flexstruct_pipeline::config::Mode;
use serde::Serialize;
use utoipa::{OpenApi, ToSchema};

use crate::error::ApiResult;
use crate::server::{AppState, authorization};

/// An index as `GET /v1/indexes` and `/healthz` list it.
#[derive(Debug, Serialize, ToSchema)]
pub struct IndexInfo {
    /// Its name.
    pub name: String,
    /// The kb generation answering (1 at start, one more per update).
    pub generation: u64,
    /// When that generation was loaded.
    pub loaded_at: String,
    /// Seconds its load took.
    pub load_seconds: f64,
    /// Rows of its kb tables and its documents.
    pub rows: std::collections::BTreeMap<String, usize>,
    /// The embedding model of its vectors.
    pub model: String,
    /// Whether documents can be added and deleted.
    pub writable: bool,
    /// The strategy a question gets unless it names one.
    pub default_mode: String,
    /// Every strategy.
    pub modes: Vec<String>,
    /// Questions waiting for a worker.
    pub waiting: usize,
    /// Jobs by state.
    pub jobs: std::collections::BTreeMap<String, usize>,
}

fn index_info(served: &crate::served::Served) -> IndexInfo {
    let generation = served.generation();
    IndexInfo {
        name: served.name.clone(),
        generation: generation.number,
        loaded_at: generation.loaded_at.clone(),
        load_seconds: generation.load_seconds,
        rows: generation.sizes().into_iter().map(|(t, n)| (t.to_owned(), n)).collect(),
        model: generation.engine.kb.model.clone(),
        writable: served.writable(),
        default_mode: served.config().query.mode.name().to_owned(),
        modes: Mode::ALL.iter().map(|m| m.name().to_owned()).collect(),
        waiting: served.batcher().waiting(),
        jobs: served.jobs.counts().into_iter().map(|(s, n)| (s.to_owned(), n)).collect(),
    }
}

/// The served indexes the token may read.
#[utoipa::path(get, path = "/v1/indexes", responses((status = 200, body = Vec<IndexInfo>)))]
pub async fn indexes(State(server): AppState, headers: HeaderMap) -> ApiResult<Json<Vec<IndexInfo>>> {
    server.any(&headers)?;
    let allowed = server.indexes.values().filter(|s| server.tokens.allows(authorization(&headers), &s.name));
    Ok(Json(allowed.map(|s| index_info(s)).collect()))
}

/// Whether the server answers, and since when (no token needed; names no index).
#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "`{\"status\": \"ok\", …}`", body = Object)))]
pub async fn healthz(State(server): AppState) -> impl IntoResponse {
    let generations: Vec<u64> = server.indexes.values().map(|s| s.generation().number).collect();
    Json(serde_json::json!({
        "status": "ok",
        "uptime_seconds": server.started.elapsed().as_secs_f64(),
        "indexes": server.indexes.len(),
        "generations": generations,
    }))
}

/// Prometheus text: requests, errors, latency, kb rows, generations, waiting questions, jobs.
#[utoipa::path(get, path = "/metrics", responses((status = 200, description = "Prometheus text format", body = String)))]
pub async fn metrics(State(server): AppState, headers: HeaderMap) -> ApiResult<impl IntoResponse> {
    server.any(&headers)?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], server.metrics.render(&server.indexes)))
}

/// The OpenAPI description of every endpoint, with the names of the indexes this server serves
/// as the values an `index` may take.
#[utoipa::path(get, path = "/openapi.json", responses((status = 200, description = "This description", body = Object)))]
pub async fn openapi(State(server): AppState) -> impl IntoResponse {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    let names: Vec<serde_json::Value> = server.indexes.keys().map(|n| serde_json::Value::String(n.clone())).collect();
    // (`get_mut`, not indexing: indexing a missing key of a mutable value inserts a null.)
    let operations = doc.get_mut("paths").and_then(|p| p.as_object_mut()).into_iter().flat_map(|p| p.values_mut());
    for operation in operations.filter_map(serde_json::Value::as_object_mut).flat_map(|item| item.values_mut()) {
        let parameters = operation.get_mut("parameters").and_then(|p| p.as_array_mut()).into_iter().flatten();
        for parameter in parameters.filter(|p| p["name"] == "index" && p["in"] == "path") {
            parameter["schema"]["enum"] = serde_json::Value::Array(names.clone());
        }
    }
    let index = doc.pointer_mut("/components/schemas/QueryRequest/properties/index");
    if let Some(index) = index.and_then(|i| i.as_object_mut()) {
        index.insert("enum".into(), serde_json::Value::Array(names));
    }
    Json(doc)
}

/// The OpenAPI description, generated from the handlers and their types.
#[derive(Debug, OpenApi)]
#[openapi(
    info(title = "flexstruct", description = "Retrieval over a knowledge hypergraph, a graph and clusters of facts, \
        each tied to its source span: questions, documents, the graph, the server."),
    paths(
        crate::api::query, crate::api::retrieve, crate::api::chat, crate::api::models,
        crate::documents::upload, crate::documents::list, crate::documents::read, crate::documents::delete,
        crate::documents::jobs, crate::documents::job,
        crate::graph::entities, crate::graph::entity, crate::graph::hyperedge,
        indexes, healthz, metrics, openapi,
    ),
    modifiers(&Bearer),
    security(("bearer" = [])),
)]
pub struct ApiDoc;

/// Bearer tokens in the description.
#[derive(Debug)]
struct Bearer;

impl utoipa::Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}
