//! The knowledge structures of a served index's kb: entities found by name or alias, an entity
//! with its hyperedges, edges, clusters and neighbours, and a hyperedge with its entities, its
//! source span and its clusters — what the explorer draws.

// utoipa's generated parameter code names the IntoParams types with their full paths.
#![allow(unused_qualifications)]

use std::collections::HashMap;

use arrow::array::Array;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use flexstruct_pipeline::core::names::normalize;
use flexstruct_pipeline::query::kb::Kb;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Access;
use crate::error::{ApiError, ApiResult};
use crate::generation::Generation;
use crate::server::AppState;

/// Most items of one list in an answer (an entity of a thousand hyperedges gives the first 200
/// and says how many there are).
const MAX_LIST: usize = 200;

/// An entity in a list.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EntityRef {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its document.
    pub doc_id: String,
    /// Hyperedges it is in.
    pub hyperdegree: usize,
}

fn entity_ref(kb: &Kb, row: u32) -> EntityRef {
    let r = row as usize;
    EntityRef {
        id: kb.entities.id.value(r).to_owned(),
        name: kb.entities.name.value(r).to_owned(),
        doc_id: kb.entities.doc_id.value(r).to_owned(),
        hyperdegree: kb.entity_hyperedges[r].len(),
    }
}

/// A hyperedge in a list.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HyperedgeRef {
    /// Its id.
    pub id: String,
    /// Its document.
    pub doc_id: String,
    /// Its relational text.
    pub text: String,
    /// Its source span's first code point, when located.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<i64>,
    /// One past its last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<i64>,
    /// Its entities.
    pub entities: Vec<EntityRef>,
}

fn hyperedge_ref(kb: &Kb, row: u32) -> HyperedgeRef {
    let r = row as usize;
    let span = kb.hyperedges.span(r);
    HyperedgeRef {
        id: kb.hyperedges.id.value(r).to_owned(),
        doc_id: kb.hyperedges.doc_id.value(r).to_owned(),
        text: kb.hyperedges.text.value(r).to_owned(),
        start: span.as_ref().map(|s| s.start),
        end: span.as_ref().map(|s| s.end),
        entities: kb.hyperedge_entities[r].iter().map(|&e| entity_ref(kb, e)).collect(),
    }
}

/// An edge (a binary relation).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EdgeRef {
    /// Its id.
    pub id: String,
    /// Its document.
    pub doc_id: String,
    /// The relation's text.
    pub text: String,
    /// Its source entity, when in the kb.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<EntityRef>,
    /// Its target entity, when in the kb.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<EntityRef>,
    /// The hyperedge it was read from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hyperedge: Option<String>,
}

fn edge_ref(kb: &Kb, row: u32) -> EdgeRef {
    let r = row as usize;
    let [source, target] = kb.edges.ends[r];
    EdgeRef {
        id: kb.edges.id.value(r).to_owned(),
        doc_id: kb.edges.doc_id.value(r).to_owned(),
        text: kb.edges.text.value(r).to_owned(),
        source: source.map(|e| entity_ref(kb, e)),
        target: target.map(|e| entity_ref(kb, e)),
        hyperedge: kb.edges.hyperedge[r].map(|h| kb.hyperedges.id.value(h as usize).to_owned()),
    }
}

/// A cluster of hyperedges (structure-aware, SSC).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClusterRef {
    /// Its id.
    pub id: String,
    /// Its document.
    pub doc_id: String,
    /// Its members.
    pub hyperedges: Vec<String>,
    /// Its text (the members' spans).
    pub text: String,
}

fn cluster_ref(kb: &Kb, row: u32) -> ClusterRef {
    let r = row as usize;
    ClusterRef {
        id: kb.clusters.id.value(r).to_owned(),
        doc_id: kb.clusters.doc_id.value(r).to_owned(),
        hyperedges: kb.clusters.members[r].iter().map(|&h| kb.hyperedges.id.value(h as usize).to_owned()).collect(),
        text: kb.clusters.text.value(r).to_owned(),
    }
}

/// What to search for.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct EntitySearch {
    /// A name or alias, or a part of one.
    pub q: String,
    /// Most entities given (20 unless given, at most 200).
    pub limit: Option<usize>,
}

/// An entity found.
#[derive(Debug, Serialize, ToSchema)]
pub struct EntityHit {
    /// The entity.
    #[serde(flatten)]
    pub entity: EntityRef,
    /// Its document's title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// How it matched: `name`, `alias`, or `part` (of a name).
    pub via: &'static str,
}

fn generation_of(
    server: &crate::server::Server,
    headers: &HeaderMap,
    index: &str,
) -> ApiResult<std::sync::Arc<Generation>> {
    Ok(server.index(headers, Some(index), Access::Read)?.generation())
}

/// Entities by name or alias: those whose normalised name is the query's, then those with it
/// as an alias, then those whose name contains it; each group by hyperdegree.
#[utoipa::path(get, path = "/v1/indexes/{index}/entities", params(("index" = String, Path, description = "The index"), EntitySearch),
    responses((status = 200, body = Vec<EntityHit>), (status = 400, description = "`q` is missing or empty")))]
pub async fn entities(
    State(server): AppState,
    headers: HeaderMap,
    Path(index): Path<String>,
    query: Result<Query<EntitySearch>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Vec<EntityHit>>> {
    let generation = generation_of(&server, &headers, &index)?;
    let Query(search) = query.map_err(|e| crate::error::query_rejection(&e))?;
    let key = normalize(&search.q);
    if key.is_empty() {
        return Err(ApiError::field("q", "give a name, an alias or a part of one"));
    }
    let limit = search.limit.unwrap_or(20).clamp(1, MAX_LIST);
    let kb = &generation.engine.kb;
    let mut found: Vec<(u32, &'static str)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut take = |rows: Vec<u32>, via: &'static str, found: &mut Vec<(u32, &'static str)>| {
        let mut rows: Vec<u32> = rows.into_iter().filter(|r| seen.insert(*r)).collect();
        rows.sort_by_key(|&r| (std::cmp::Reverse(kb.entity_hyperedges[r as usize].len()), r));
        found.extend(rows.into_iter().map(|r| (r, via)));
    };
    take(kb.by_name.get(&key).cloned().unwrap_or_default(), "name", &mut found);
    take(kb.by_alias.get(&key).cloned().unwrap_or_default(), "alias", &mut found);
    if found.len() < limit {
        let parts =
            (0..kb.entities.norm_name.len() as u32).filter(|&r| kb.entities.norm_name.value(r as usize).contains(&key));
        take(parts.collect(), "part", &mut found);
    }
    Ok(Json(
        found
            .into_iter()
            .take(limit)
            .map(|(row, via)| {
                let entity = entity_ref(kb, row);
                EntityHit { title: generation.title(&entity.doc_id).map(str::to_owned), entity, via }
            })
            .collect(),
    ))
}

/// An entity and what it is part of.
#[derive(Debug, Serialize, ToSchema)]
pub struct EntityDetail {
    /// The entity.
    #[serde(flatten)]
    pub entity: EntityRef,
    /// Its document's title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Its summary.
    pub summary: String,
    /// Its aliases.
    pub aliases: Vec<String>,
    /// Its hyperedges (the first 200), in reading order.
    pub hyperedges: Vec<HyperedgeRef>,
    /// The edges it is an end of (the first 200).
    pub edges: Vec<EdgeRef>,
    /// The clusters its hyperedges are in.
    pub clusters: Vec<ClusterRef>,
    /// The entities it shares hyperedges with, most shared first (the first 200), each with the
    /// number shared.
    pub neighbours: Vec<Neighbour>,
    /// The entities of the same name in other documents.
    pub same_name: Vec<EntityRef>,
    /// The kb generation it was read from.
    pub generation: u64,
}

/// An entity beside another.
#[derive(Debug, Serialize, ToSchema)]
pub struct Neighbour {
    /// The entity.
    #[serde(flatten)]
    pub entity: EntityRef,
    /// Hyperedges the two share.
    pub shared: usize,
}

/// An entity with its hyperedges, edges, clusters and neighbours.
#[utoipa::path(get, path = "/v1/indexes/{index}/entities/{id}",
    params(("index" = String, Path, description = "The index"), ("id" = String, Path, description = "The entity")),
    responses((status = 200, body = EntityDetail), (status = 404, description = "No such entity")))]
pub async fn entity(
    State(server): AppState,
    headers: HeaderMap,
    Path((index, id)): Path<(String, String)>,
) -> ApiResult<Json<EntityDetail>> {
    let generation = generation_of(&server, &headers, &index)?;
    let lookups = generation.lookups();
    let &row = lookups
        .entity
        .get(&id)
        .ok_or_else(|| ApiError::not_found("id", format!("no entity `{id}` in index `{index}`")))?;
    let kb = &generation.engine.kb;
    let r = row as usize;
    let hyperedges = &kb.entity_hyperedges[r];
    let mut shared: HashMap<u32, usize> = HashMap::new();
    let mut clusters: Vec<u32> = Vec::new();
    for &h in hyperedges {
        for &e in kb.hyperedge_entities[h as usize].iter().filter(|&&e| e != row) {
            *shared.entry(e).or_default() += 1;
        }
        for &c in &kb.hyperedge_clusters[h as usize] {
            if !clusters.contains(&c) {
                clusters.push(c);
            }
        }
    }
    let mut neighbours: Vec<(u32, usize)> = shared.into_iter().collect();
    neighbours.sort_by(|a, b| {
        b.1.cmp(&a.1).then(kb.entities.name.value(a.0 as usize).cmp(kb.entities.name.value(b.0 as usize)))
    });
    let name = kb.entities.norm_name.value(r);
    let same_name = kb.by_name.get(name).into_iter().flatten().filter(|&&e| e != row).take(MAX_LIST);
    let entity = entity_ref(kb, row);
    Ok(Json(EntityDetail {
        title: generation.title(&entity.doc_id).map(str::to_owned),
        summary: kb.entities.summary.value(r).to_owned(),
        aliases: lookups.aliases[r].clone(),
        hyperedges: hyperedges.iter().take(MAX_LIST).map(|&h| hyperedge_ref(kb, h)).collect(),
        edges: lookups.edges[r].iter().take(MAX_LIST).map(|&e| edge_ref(kb, e)).collect(),
        clusters: clusters.into_iter().take(MAX_LIST).map(|c| cluster_ref(kb, c)).collect(),
        neighbours: neighbours
            .into_iter()
            .take(MAX_LIST)
            .map(|(e, shared)| Neighbour { entity: entity_ref(kb, e), shared })
            .collect(),
        same_name: same_name.map(|&e| entity_ref(kb, e)).collect(),
        generation: generation.number,
        entity,
    }))
}

/// A hyperedge: an n-ary fact with its source span.
#[derive(Debug, Serialize, ToSchema)]
pub struct HyperedgeDetail {
    /// The hyperedge.
    #[serde(flatten)]
    pub hyperedge: HyperedgeRef,
    /// Its document's title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The verbatim source text of its span.
    pub ref_text: String,
    /// Its place among its document's hyperedges.
    pub item_idx: i32,
    /// Its clusters.
    pub clusters: Vec<ClusterRef>,
    /// The edges read from it.
    pub edges: Vec<EdgeRef>,
    /// The kb generation it was read from.
    pub generation: u64,
}

/// A hyperedge with its entities, span, clusters and edges.
#[utoipa::path(get, path = "/v1/indexes/{index}/hyperedges/{id}",
    params(("index" = String, Path, description = "The index"), ("id" = String, Path, description = "The hyperedge")),
    responses((status = 200, body = HyperedgeDetail), (status = 404, description = "No such hyperedge")))]
pub async fn hyperedge(
    State(server): AppState,
    headers: HeaderMap,
    Path((index, id)): Path<(String, String)>,
) -> ApiResult<Json<HyperedgeDetail>> {
    let generation = generation_of(&server, &headers, &index)?;
    let &row = generation
        .lookups()
        .hyperedge
        .get(&id)
        .ok_or_else(|| ApiError::not_found("id", format!("no hyperedge `{id}` in index `{index}`")))?;
    let kb = &generation.engine.kb;
    let r = row as usize;
    let edges = (0..kb.edges.hyperedge.len() as u32).filter(|&e| kb.edges.hyperedge[e as usize] == Some(row));
    let hyperedge = hyperedge_ref(kb, row);
    Ok(Json(HyperedgeDetail {
        title: generation.title(&hyperedge.doc_id).map(str::to_owned),
        ref_text: kb.hyperedges.ref_text.value(r).to_owned(),
        item_idx: kb.hyperedges.item_idx.value(r),
        clusters: kb.hyperedge_clusters[r].iter().map(|&c| cluster_ref(kb, c)).collect(),
        edges: edges.take(MAX_LIST).map(|e| edge_ref(kb, e)).collect(),
        generation: generation.number,
        hyperedge,
    }))
}
