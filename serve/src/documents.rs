//! Documents of a served index: added (a JSON body of corpus records, or uploaded `.txt`, `.md`,
//! `.jsonl` files) and deleted as jobs that the index's writer applies, listed with their
//! status, and read back whole or as a span. Nothing a client sends names a file of the server:
//! indexes, documents and jobs are looked up by name in memory, and an uploaded file is written
//! under a name made of its own name's safe characters, inside the job's folder.

// utoipa's generated parameter code names the IntoParams types with their full paths.
#![allow(unused_qualifications)]

use std::collections::HashSet;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::auth::Access;
use crate::error::{ApiError, ApiResult, parse_json};
use crate::jobs::{DocStatus, Job, JobDocument, JobKind};
use crate::served::{Served, body_file};
use crate::server::{AppState, body_limit};

/// Most documents listed per page.
const MAX_PAGE: usize = 1000;

/// Documents to add, as corpus records.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddDocuments {
    /// The documents: `{"doc_id"?, "title"?, "text"}` each. A document without an id gets one
    /// from its text; one with the id of a document of the index replaces it.
    #[schema(value_type = Vec<Object>)]
    pub documents: Vec<serde_json::Map<String, Value>>,
}

/// What `POST …/documents` and `DELETE …/documents/{doc_id}` answer (202): the job.
#[derive(Debug, Serialize, ToSchema)]
pub struct Accepted {
    /// The job's id.
    pub id: String,
    /// Where to follow it.
    pub status_url: String,
    /// The job as it stands.
    pub job: Job,
}

fn accepted(served: &Served, job: Job) -> Response {
    let status_url = format!("/v1/indexes/{}/jobs/{}", served.name, job.id);
    let mut response =
        (StatusCode::ACCEPTED, Json(Accepted { id: job.id.clone(), status_url: status_url.clone(), job }))
            .into_response();
    if let Ok(location) = status_url.parse() {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

fn writable(served: &Served) -> ApiResult<()> {
    if served.writable() {
        Ok(())
    } else {
        Err(ApiError::conflict(format!(
            "index `{}` is on object storage and served read-only: update it with the stage binaries",
            served.name
        )))
    }
}

/// Adds documents: a JSON body `{"documents": [{"doc_id"?, "title"?, "text"}]}`, or a multipart
/// upload of `.txt`, `.md` and `.jsonl` files (`.json` and `.parquet` too, as ingest reads
/// them). Answers 202 with the job; each document ends `processed` or `failed` with the reason
/// (an empty or unreadable one fails alone). A file uploaded again under its name replaces the
/// document its earlier version gave.
#[utoipa::path(post, path = "/v1/indexes/{index}/documents", request_body(content = AddDocuments,
        description = "JSON corpus records, or multipart/form-data files"),
    params(("index" = String, Path, description = "The index")),
    responses((status = 202, body = Accepted),
              (status = 400, description = "The body is malformed; the error names the field"),
              (status = 409, description = "The index is read-only"),
              (status = 413, description = "The body is over the size limit")))]
pub async fn upload(State(server): AppState, Path(index): Path<String>, request: Request) -> ApiResult<Response> {
    let served = server.index(request.headers(), Some(&index), Access::Write)?.clone();
    writable(&served)?;
    let content_type = request.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let mut job = Job::new(&served.name, JobKind::Add, Vec::new());
    let dir = served.jobs.files(&job.id);
    let written = if content_type.starts_with("multipart/form-data") {
        let limit = body_limit(&request);
        let multipart =
            Multipart::from_request(request, &()).await.map_err(|e| ApiError::bad_request(e.body_text()))?;
        stage_files(multipart, &dir, limit).await
    } else {
        let limit = body_limit(&request);
        let bytes = Bytes::from_request(request, &()).await.map_err(|_| ApiError::too_large(limit))?;
        let add: AddDocuments = parse_json(&bytes)?;
        job.body = true;
        stage_records(&add, &dir, &job.id)
    };
    match written {
        Ok(documents) => job.documents = documents,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
    }
    Ok(accepted(&served, served.jobs.submit(job)))
}

fn write(path: &std::path::Path, bytes: &[u8]) -> ApiResult<()> {
    std::fs::create_dir_all(path.parent().unwrap_or(path)).and_then(|()| std::fs::write(path, bytes)).map_err(|e| {
        crate::log(&format!("{}: cannot be written: {e}", path.display()));
        ApiError::internal("the upload could not be stored (the server's log says why)")
    })
}

/// Writes the records of a JSON body as the job's `<job>.jsonl`.
fn stage_records(add: &AddDocuments, dir: &std::path::Path, job: &str) -> ApiResult<Vec<JobDocument>> {
    if add.documents.is_empty() {
        return Err(ApiError::field("documents", "no documents: give at least one {\"text\": …}"));
    }
    let mut lines = String::new();
    let mut documents = Vec::new();
    for (i, record) in add.documents.iter().enumerate() {
        lines.push_str(&serde_json::to_string(record).map_err(|e| ApiError::internal(e.to_string()))?);
        lines.push('\n');
        let doc_id = match record.get("doc_id") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        documents.push(JobDocument::pending(format!("documents[{i}]"), doc_id));
    }
    write(&dir.join(body_file(job)), lines.as_bytes())?;
    Ok(documents)
}

/// Writes the files of a multipart upload into the job's folder, each under a safe form of its
/// own name.
async fn stage_files(mut multipart: Multipart, dir: &std::path::Path, limit: usize) -> ApiResult<Vec<JobDocument>> {
    let mut names = HashSet::new();
    let mut documents = Vec::new();
    std::fs::create_dir_all(dir).map_err(|e| ApiError::internal(format!("the upload could not be stored: {e}")))?;
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => return Err(ApiError::too_large(limit)),
            Err(e) => return Err(ApiError::bad_request(format!("the multipart body: {}", e.body_text()))),
        };
        let part = field.name().unwrap_or("").to_owned();
        let Some(given) = field.file_name().map(str::to_owned) else {
            return Err(ApiError::field(
                part,
                "a part without a file name: upload files (e.g. curl -F file=@notes.md)",
            ));
        };
        let name = safe_name(&given);
        let bytes = match field.bytes().await {
            Ok(bytes) => bytes,
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => return Err(ApiError::too_large(limit)),
            Err(e) => return Err(ApiError::bad_request(format!("the file `{given}`: {}", e.body_text()))),
        };
        if !names.insert(name.clone()) {
            return Err(ApiError::field(part, format!("two files are named `{name}`")));
        }
        write(&dir.join(&name), &bytes)?;
        documents.push(JobDocument::pending(name, None));
    }
    if documents.is_empty() {
        return Err(ApiError::bad_request("the upload holds no files"));
    }
    Ok(documents)
}

/// A file name made safe: the last component of what the client gave, letters, digits, `-`,
/// `_`, `.` and spaces kept and the rest as `_`, no leading dot, at most 120 characters.
pub fn safe_name(given: &str) -> String {
    let base = given.rsplit(['/', '\\']).next().unwrap_or("");
    let cleaned: String =
        base.chars().map(|c| if c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | ' ') { c } else { '_' }).collect();
    let trimmed = cleaned.trim().trim_start_matches('.');
    let mut name: String = trimmed.chars().rev().take(120).collect::<Vec<_>>().into_iter().rev().collect();
    if name.is_empty() || name.chars().all(|c| c == '.' || c == '_') {
        name = format!("upload{name}");
    }
    name
}

/// Deletes a document. Answers 202 with the job; the document is served until the job's kb
/// generation replaces the current one.
#[utoipa::path(delete, path = "/v1/indexes/{index}/documents/{doc_id}",
    params(("index" = String, Path, description = "The index"), ("doc_id" = String, Path, description = "The document")),
    responses((status = 202, body = Accepted), (status = 404, description = "No such document"),
              (status = 409, description = "The index is read-only")))]
pub async fn delete(
    State(server): AppState,
    headers: HeaderMap,
    Path((index, doc_id)): Path<(String, String)>,
) -> ApiResult<Response> {
    let served = server.index(&headers, Some(&index), Access::Write)?;
    writable(served)?;
    let known = served.generation().document(&doc_id).is_some() || served.jobs.open_job_of(&doc_id, None).is_some();
    if !known {
        return Err(ApiError::not_found("doc_id", format!("index `{index}` has no document `{doc_id}`")));
    }
    let job = Job::new(&served.name, JobKind::Delete, vec![JobDocument::pending(doc_id.clone(), Some(doc_id))]);
    Ok(accepted(served, served.jobs.submit(job)))
}

/// Which documents to list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Documents to skip.
    #[serde(default)]
    pub offset: usize,
    /// Documents to give (at most 1,000; 100 unless given).
    pub limit: Option<usize>,
    /// Only documents of this status (`processed`, `pending`, `processing`, `failed`).
    pub status: Option<String>,
}

/// A document in a list.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DocumentEntry {
    /// Its id (unknown for an input that failed before it had one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub doc_id: Option<String>,
    /// Its title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Where it came from.
    pub source: String,
    /// Its length in code points (a served document).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n_chars: Option<usize>,
    /// `processed` (served), `pending`, `processing`, or `failed`.
    #[schema(value_type = String)]
    pub status: DocStatus,
    /// The stage it is in or failed in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The job adding or deleting it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

/// A page of documents.
#[derive(Debug, Serialize, ToSchema)]
pub struct DocumentPage {
    /// Documents in the whole list.
    pub total: usize,
    /// The first listed.
    pub offset: usize,
    /// Most listed.
    pub limit: usize,
    /// The kb generation of the served documents.
    pub generation: u64,
    /// The page.
    pub documents: Vec<DocumentEntry>,
}

/// Lists the documents: those of jobs not yet served (pending, processing, failed; newest job
/// first), then the served ones by id; a served document that a job is deleting shows that job.
#[utoipa::path(get, path = "/v1/indexes/{index}/documents", params(("index" = String, Path, description = "The index"), ListQuery),
    responses((status = 200, body = DocumentPage), (status = 400, description = "A parameter is wrong")))]
pub async fn list(
    State(server): AppState,
    headers: HeaderMap,
    Path(index): Path<String>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<DocumentPage>> {
    let served = server.index(&headers, Some(&index), Access::Read)?;
    let Query(query) = query.map_err(|e| crate::error::query_rejection(&e))?;
    let limit = query.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::field("limit", format!("must be 1 to {MAX_PAGE}")));
    }
    let wanted =
        match query.status.as_deref() {
            None => None,
            Some(s) => Some(serde_json::from_value::<DocStatus>(Value::String(s.to_owned())).map_err(|_| {
                ApiError::field("status", format!("`{s}`: one of processed, pending, processing, failed"))
            })?),
        };
    let generation = served.generation();
    let jobs = served.jobs.all();
    let mut entries: Vec<DocumentEntry> = Vec::new();
    let mut touched: std::collections::HashMap<&str, (&Job, &JobDocument)> = std::collections::HashMap::new();
    for job in &jobs {
        for d in &job.documents {
            let served_already = d.doc_id.as_deref().is_some_and(|id| generation.document(id).is_some());
            let open = !job.finished();
            if let Some(id) = d.doc_id.as_deref().filter(|_| open) {
                touched.entry(id).or_insert((job, d));
            }
            let show = match d.status {
                DocStatus::Pending | DocStatus::Processing => open && !served_already,
                DocStatus::Failed => !served_already,
                DocStatus::Processed => false,
            };
            if show {
                entries.push(DocumentEntry {
                    doc_id: d.doc_id.clone(),
                    title: d.title.clone(),
                    source: d.source.clone(),
                    n_chars: None,
                    status: d.status,
                    stage: d.stage.clone(),
                    message: d.message.clone(),
                    job: Some(job.id.clone()),
                });
            }
        }
    }
    for doc in &generation.documents {
        let job = touched.get(doc.doc_id.as_str());
        entries.push(DocumentEntry {
            doc_id: Some(doc.doc_id.clone()),
            title: doc.title.clone(),
            source: doc.source.clone(),
            n_chars: Some(doc.n_chars),
            status: job.map_or(DocStatus::Processed, |(_, d)| d.status),
            stage: job.and_then(|(_, d)| d.stage.clone()),
            message: None,
            job: job.map(|(j, _)| j.id.clone()),
        });
    }
    if let Some(wanted) = wanted {
        entries.retain(|e| e.status == wanted);
    }
    let total = entries.len();
    let documents = entries.into_iter().skip(query.offset).take(limit).collect();
    Ok(Json(DocumentPage { total, offset: query.offset, limit, generation: generation.number, documents }))
}

/// Which part of a document to read.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct SpanQuery {
    /// First code point (with `end`: only that span).
    pub start: Option<usize>,
    /// One past the last code point.
    pub end: Option<usize>,
}

/// A served document, or a span of it.
#[derive(Debug, Serialize, ToSchema)]
pub struct DocumentText {
    /// Its id.
    pub doc_id: String,
    /// Its title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Where it came from.
    pub source: String,
    /// Its length in code points.
    pub n_chars: usize,
    /// The kb generation it was read from.
    pub generation: u64,
    /// The span's first code point (0 for the whole text).
    pub start: usize,
    /// One past its last.
    pub end: usize,
    /// The text of the span (the whole document without one).
    pub text: String,
}

/// A served document's text, or with `start` and `end` the code points of one span (citations
/// give their spans in code points).
#[utoipa::path(get, path = "/v1/indexes/{index}/documents/{doc_id}",
    params(("index" = String, Path, description = "The index"), ("doc_id" = String, Path, description = "The document"), SpanQuery),
    responses((status = 200, body = DocumentText), (status = 400, description = "The span is wrong"),
              (status = 404, description = "No such document (or not served yet)")))]
pub async fn read(
    State(server): AppState,
    headers: HeaderMap,
    Path((index, doc_id)): Path<(String, String)>,
    query: Result<Query<SpanQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<DocumentText>> {
    let served = server.index(&headers, Some(&index), Access::Read)?;
    let Query(span) = query.map_err(|e| crate::error::query_rejection(&e))?;
    let generation = served.generation();
    let Some(doc) = generation.document(&doc_id) else {
        let message = match served.jobs.open_job_of(&doc_id, Some(JobKind::Add)) {
            Some(job) => format!("document `{doc_id}` is not served yet: job {job} adds it"),
            None => format!("index `{index}` has no document `{doc_id}`"),
        };
        return Err(ApiError::not_found("doc_id", message));
    };
    let (start, end) = match (span.start, span.end) {
        (None, None) => (0, doc.n_chars),
        (Some(start), Some(end)) if start <= end && end <= doc.n_chars => (start, end),
        (Some(_), Some(_)) => {
            return Err(ApiError::field(
                "end",
                format!("the span must lie in the document: start ≤ end ≤ {} (its length in code points)", doc.n_chars),
            ));
        }
        (Some(_), None) => return Err(ApiError::field("end", "give `end` with `start`")),
        (None, Some(_)) => return Err(ApiError::field("start", "give `start` with `end`")),
    };
    Ok(Json(DocumentText {
        doc_id: doc.doc_id.clone(),
        title: doc.title.clone(),
        source: doc.source.clone(),
        n_chars: doc.n_chars,
        generation: generation.number,
        start,
        end,
        text: if start == 0 && end == doc.n_chars { doc.text.clone() } else { doc.span(start, end) },
    }))
}

/// The index's jobs, newest first.
#[utoipa::path(get, path = "/v1/indexes/{index}/jobs", params(("index" = String, Path, description = "The index")),
    responses((status = 200, body = Vec<Job>)))]
pub async fn jobs(State(server): AppState, headers: HeaderMap, Path(index): Path<String>) -> ApiResult<Json<Vec<Job>>> {
    let served = server.index(&headers, Some(&index), Access::Read)?;
    Ok(Json(served.jobs.all().into_iter().take(MAX_PAGE).collect()))
}

/// One job: per document pending, processing (with its stage), processed, or failed (with the
/// message); when done, the kb generation that serves it.
#[utoipa::path(get, path = "/v1/indexes/{index}/jobs/{id}",
    params(("index" = String, Path, description = "The index"), ("id" = String, Path, description = "The job")),
    responses((status = 200, body = Job), (status = 404, description = "No such job")))]
pub async fn job(
    State(server): AppState,
    headers: HeaderMap,
    Path((index, id)): Path<(String, String)>,
) -> ApiResult<Json<Job>> {
    let served = server.index(&headers, Some(&index), Access::Read)?;
    served
        .jobs
        .get(&id)
        .map(Json)
        .ok_or_else(|| ApiError::not_found("id", format!("index `{index}` has no job `{id}`")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uploaded_names_cannot_leave_the_job_folder() {
        assert_eq!(safe_name("notes.md"), "notes.md");
        assert_eq!(safe_name("../../etc/passwd"), "passwd");
        assert_eq!(safe_name("..\\..\\x.txt"), "x.txt");
        assert_eq!(safe_name(".hidden.md"), "hidden.md");
        assert_eq!(safe_name(".."), "upload");
        assert_eq!(safe_name(""), "upload");
        assert_eq!(safe_name("a\0b;rm -rf.md"), "a_b_rm -rf.md");
        assert_eq!(safe_name("Zürich notes.md"), "Zürich notes.md");
        assert!(safe_name(&"x".repeat(500)).chars().count() <= 120);
        for name in ["a/../../b", "/", "\\", "....", "./."] {
            let safe = safe_name(name);
            assert!(!safe.contains('/') && !safe.contains('\\') && !safe.starts_with('.'), "{name} -> {safe}");
        }
    }
}
