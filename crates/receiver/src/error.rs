//! The one error type every handler and extractor answers with: a status and an
//! `error.json` body (`{"reason": …}`, sometimes with more keys), plus headers; or [`Cut`],
//! the connection closed without an answer.

use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

/// Longest `reason` sent (a client's text may be quoted in it).
const REASON_MAX: usize = 200;

/// The marker a response carries to have its connection closed unanswered (`server.rs`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cut;

impl IntoResponse for Cut {
    fn into_response(self) -> Response {
        let mut r = Response::new(axum::body::Body::empty());
        r.extensions_mut().insert(Cut);
        r
    }
}

/// A refusal: `status` with `{"reason": …}` (and any extra keys), or a cut connection.
#[derive(Debug)]
pub(crate) enum ApiError {
    Answer {
        status: StatusCode,
        body: Map<String, Value>,
        headers: Vec<(HeaderName, HeaderValue)>,
    },
    Cut,
}

pub(crate) fn clip(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

impl ApiError {
    /// `status` with `{"reason": reason}` (clipped).
    pub fn new(status: StatusCode, reason: &str) -> ApiError {
        let mut body = Map::new();
        body.insert("reason".into(), clip(reason, REASON_MAX).into());
        ApiError::Answer {
            status,
            body,
            headers: Vec::new(),
        }
    }
    pub fn bad_request(reason: &str) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, reason)
    }
    pub fn unauthorized() -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized")
    }
    pub fn not_found() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found")
    }
    pub fn csrf() -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "csrf")
    }
    /// 500 for a database failure, which is logged (the reason stays generic).
    pub fn db(e: &dyn std::fmt::Display) -> ApiError {
        tracing::error!("database error: {e}");
        ApiError::internal()
    }
    pub fn internal() -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error")
    }
    /// Adds a key beside `reason`.
    pub fn with(mut self, key: &str, value: Value) -> ApiError {
        if let ApiError::Answer { body, .. } = &mut self {
            body.insert(key.into(), value);
        }
        self
    }
    /// Adds a header.
    pub fn header(mut self, name: HeaderName, value: &str) -> ApiError {
        if let (ApiError::Answer { headers, .. }, Ok(v)) = (&mut self, HeaderValue::from_str(value))
        {
            headers.push((name, v));
        }
        self
    }
}

/// Whatever the store failed with (either store's error, with its context).
impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> ApiError {
        ApiError::db(&format_args!("{e:#}"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let ApiError::Answer {
            status,
            body,
            headers,
        } = self
        else {
            return Cut.into_response();
        };
        let mut r = if matches!(status.as_u16(), 100..=199 | 204 | 304) {
            Response::new(axum::body::Body::empty())
        } else {
            let mut r = Response::new(axum::body::Body::from(Value::Object(body).to_string()));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        };
        *r.status_mut() = status;
        for (k, v) in headers {
            r.headers_mut().append(k, v);
        }
        r
    }
}

/// `status` with a JSON body.
pub(crate) fn json_reply(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

/// A handler's result.
pub(crate) type Reply = Result<Response, ApiError>;

/// The error a malformed JSON body gets.
pub(crate) fn malformed(e: &dyn std::fmt::Display) -> ApiError {
    ApiError::bad_request(&format!("malformed body: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_carry_a_reason_and_more() {
        let r = ApiError::new(StatusCode::FORBIDDEN, "tier_above_max")
            .with("max_tier", json!(1))
            .into_response();
        assert_eq!(r.status(), 403);
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
        assert!(ApiError::new(StatusCode::NO_CONTENT, "x")
            .into_response()
            .headers()
            .get(header::CONTENT_TYPE)
            .is_none());
        assert_eq!(clip(&"é".repeat(300), 200).chars().count(), 200);
    }
}
