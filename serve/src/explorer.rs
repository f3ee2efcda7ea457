//! The web explorer: one page and its script and style, compiled into the binary (no library,
//! nothing fetched at run time). It asks questions, shows the answer beside the cited source
//! text, lists and uploads documents, and draws an entity's neighbourhood; everything it shows
//! comes from the same JSON endpoints any client uses.

use axum::extract::Path;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

const PAGE: &str = include_str!("../assets/index.html");

/// The page's files: name, content type, content.
const ASSETS: [(&str, &str, &str); 2] = [
    ("app.js", "text/javascript; charset=utf-8", include_str!("../assets/app.js")),
    ("app.css", "text/css; charset=utf-8", include_str!("../assets/app.css")),
];

/// What the page may load and run: its own files and the service's endpoints, nothing else.
const POLICY: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
                      connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

fn with_headers(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `GET /`: the explorer.
pub async fn page() -> Response {
    with_headers("text/html; charset=utf-8", PAGE)
}

/// `GET /assets/{file}`: its script and style.
pub async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, ..)| *name == file) {
        Some((_, content_type, body)) => with_headers(content_type, body),
        None => ApiError::not_found("file", format!("no asset `{file}`")).into_response(),
    }
}
