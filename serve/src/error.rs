//! Errors as the service answers them: a status and a JSON body naming the field at fault,
//! `{"error": {"message", "type", "field"}}` (the shape of OpenAI's errors, which its clients
//! read), and JSON request bodies read so that a malformed one names its field.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flexstruct_pipeline::core::{Error, chain_message};
use serde::de::DeserializeOwned;

/// An error answered to a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What is wrong, for a person.
    pub message: String,
    /// The request field at fault (`question`, `toggles.entities`, `documents[2].text`).
    pub field: Option<String>,
    /// Seconds after which to try again (503).
    pub retry_after: Option<u64>,
}

/// The result of a handler.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into(), field: None, retry_after: None }
    }

    /// 400: the field `field` of the request is wrong.
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError { field: Some(field.into()), ..ApiError::new(StatusCode::BAD_REQUEST, message) }
    }

    /// 400 without a field.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404: what `field` names does not exist.
    pub fn not_found(field: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError { field: Some(field.into()), ..ApiError::new(StatusCode::NOT_FOUND, message) }
    }

    /// 404 for a path the service does not have.
    pub fn no_route() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "no such endpoint (the OpenAPI description is at /openapi.json)")
    }

    /// 409: the request cannot be done in the index's present state.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, message)
    }

    /// 401: no usable bearer token.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, message)
    }

    /// 403: the token may not do this.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, message)
    }

    /// 413: the body is larger than the server takes.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is larger than this server takes ({limit} bytes; --max-request-bytes)"),
        )
    }

    /// 503 with `Retry-After`.
    pub fn unavailable(message: impl Into<String>, retry_after: u64) -> ApiError {
        ApiError { retry_after: Some(retry_after), ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message) }
    }

    /// 500: the service's own fault; the cause goes to the log, not to the client.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// The error of a pipeline call made for a request, by who is at fault: the request's input
    /// or settings (400, naming the field or key), the index's state (409), an external service
    /// such as the LLM (502); anything else is the service's (500, logged, not shown: it may
    /// name files of the server).
    pub fn from_pipeline(error: &Error) -> ApiError {
        match error {
            Error::Config { key, problem } => ApiError::field(settings_field(key), problem.clone()),
            Error::Input { location, problem } => ApiError::bad_request(format!("{location}: {problem}")),
            Error::Index { problem, .. } => ApiError::conflict(problem.to_string()),
            Error::External { .. } => ApiError::new(StatusCode::BAD_GATEWAY, chain_message(error)),
            _ => {
                crate::log(&format!("internal error: {}", chain_message(error)));
                ApiError::internal("the server failed to answer (its log says why)")
            }
        }
    }

    fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            400 | 413 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            409 => "conflict_error",
            502 => "upstream_error",
            503 => "overloaded_error",
            _ => "server_error",
        }
    }
}

/// The request field of a `[query]` key (`query.n_eh` → `settings.n_eh`).
fn settings_field(key: &str) -> String {
    match key.strip_prefix("query.") {
        Some(rest) => format!("settings.{rest}"),
        None => key.to_owned(),
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{} ({field}): {}", self.status, self.message),
            None => write!(f, "{}: {}", self.status, self.message),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": { "message": self.message, "type": self.kind(), "field": self.field, "code": self.status.as_u16() }
        });
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// A JSON request body of type `T`. A body that is not JSON, or not of `T`'s shape, is a 400
/// naming the field (`toggles.entities: invalid type: string "yes", expected a boolean`); a body
/// over the size limit is a 413.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let json = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_none_or(|v| v.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json")));
        if !json {
            return Err(ApiError::bad_request("the request body must be JSON (Content-Type: application/json)"));
        }
        let limit = crate::server::body_limit(&request);
        let bytes = Bytes::from_request(request, state).await.map_err(|_| ApiError::too_large(limit))?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// A query string that does not parse (`?start=x`), as a 400 naming its parameter.
pub fn query_rejection(rejection: &axum::extract::rejection::QueryRejection) -> ApiError {
    let text = rejection.body_text();
    let detail = text.strip_prefix("Failed to deserialize query string: ").unwrap_or(&text);
    match detail.split_once(": ") {
        Some((field, why)) if !field.is_empty() && field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
            ApiError::field(field, format!("{why} (in the query string)"))
        }
        _ => ApiError::bad_request(format!("the query string: {detail}")),
    }
}

/// `bytes` as a `T`, or a 400 naming the field that is wrong.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> ApiResult<T> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let inner = e.inner();
        let path = e.path().to_string();
        // serde says which field is missing only in its message.
        let missing = inner
            .to_string()
            .strip_prefix("missing field `")
            .and_then(|m| m.split('`').next())
            .map(|m| if path == "." { m.to_owned() } else { format!("{path}.{m}") });
        let message = inner.to_string();
        let message = message.split(" at line ").next().unwrap_or(&message).to_owned();
        match (missing, path.as_str(), inner.classify()) {
            (Some(field), ..) => ApiError::field(field, message),
            (None, _, serde_json::error::Category::Syntax | serde_json::error::Category::Eof) => {
                ApiError::bad_request(format!("the request body is not valid JSON: {inner}"))
            }
            (None, ".", _) => ApiError::bad_request(format!("the request body: {message}")),
            (None, path, _) => ApiError::field(path, message),
        }
    })?;
    deserializer.end().map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Ask {
        question: String,
        toggles: Option<Toggles>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Toggles {
        entities: Option<bool>,
    }

    fn err(body: &str) -> ApiError {
        parse_json::<Ask>(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn a_malformed_body_names_its_field() {
        assert_eq!(err("{}").field.as_deref(), Some("question"));
        assert_eq!(err(r#"{"question": 3}"#).field.as_deref(), Some("question"));
        let e = err(r#"{"question": "q", "toggles": {"entities": "yes"}}"#);
        assert_eq!(e.field.as_deref(), Some("toggles.entities"));
        assert!(e.message.contains("expected a boolean"), "{e}");
        let e = err(r#"{"question": "q", "mode": "x"}"#);
        assert!(e.message.contains("unknown field `mode`"), "{e}");
        assert_eq!(e.field.as_deref(), Some("mode"));
        assert_eq!(err(r#"{"question": "q", "toggles": {}}x"#).field, None);
        assert!(err("{").message.contains("not valid JSON"));
        assert_eq!(err(r#"{"question": "q", "toggles": {"nope": 1}}"#).field.as_deref(), Some("toggles.nope"));
    }

    #[test]
    fn pipeline_errors_keep_their_fault() {
        let config = Error::config("query.n_eh", "must be at least 1");
        let e = ApiError::from_pipeline(&config);
        assert_eq!((e.status, e.field.as_deref()), (StatusCode::BAD_REQUEST, Some("settings.n_eh")));
        let internal = ApiError::from_pipeline(&Error::Internal("secret /srv/path".into()));
        assert_eq!(internal.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!internal.message.contains("/srv/path"));
    }
}
