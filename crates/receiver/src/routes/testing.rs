//! Test builds only (the cargo feature `testing`): the test door (`/test/*`, on with
//! `test_door`), the request log ([`log`], every request, on with `request_log`) and fault
//! injection ([`inject`], on the protocol routes). How the faults look on the wire:
//!
//! * `Reset`: the connection is closed and nothing is written, so the client reads EOF where
//!   the status line should be.
//! * `Truncated`: a 200 head with `content-length` 64 bytes larger than the body written, then
//!   the connection is closed.
//! * `Hang`: nothing is written; the connection stays open until `set_down(true)`/`stop()`.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use http_body_util::BodyExt;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::future::Future;

use crate::body::{self, OtherJson};
use crate::error::{json_reply, ApiError, Cut, Reply};
use crate::limits::OTHER_BODY_CAP;
use crate::options::{Fault, RequestRecord, Route};
use crate::state::AppState;
use spwire::split_session_key;

use super::enqueued;

/// The test door's routes.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/test/enqueue", post(test_enqueue))
        .route("/test/events", get(test_events))
        .route("/test/acks", get(test_acks))
}

/// `POST /test/enqueue`'s body.
#[derive(Deserialize)]
struct TestEnqueue {
    session: String,
    /// A partial message, as `Receiver::enqueue` takes it.
    #[serde(default)]
    message: Map<String, Value>,
}

/// `POST /test/enqueue` `{"session": "<harness>:<id>", "message": {partial}}`.
async fn test_enqueue(
    State(app): State<AppState>,
    OtherJson(req, _read): OtherJson<TestEnqueue>,
) -> Reply {
    if split_session_key(&req.session).is_none() {
        return Err(ApiError::bad_request(
            "malformed session: want <harness>:<id>",
        ));
    }
    let result = app
        .shared
        .with_db(move |st| st.enqueue(&req.session, &req.message, 60_000))
        .await;
    enqueued(result)
}

/// `GET /test/events`: every event accepted.
async fn test_events(State(app): State<AppState>) -> Reply {
    let v = app.shared.with_db(|st| st.db.events()).await?;
    Ok(json_reply(StatusCode::OK, Value::Array(v)))
}

/// `GET /test/acks`: every ack entry received.
async fn test_acks(State(app): State<AppState>) -> Reply {
    let v = app.shared.with_db(|st| st.db.acks()).await?;
    Ok(json_reply(StatusCode::OK, Value::Array(v)))
}

/// Where a request's entry is in the request log.
#[derive(Clone, Copy)]
struct LogIndex(usize);

/// The request log: every request, in arrival order, with the body as read and the status
/// answered (none for a cut connection).
pub(crate) async fn log(State(app): State<AppState>, req: Request, next: Next) -> Response {
    if !app.shared.opts.request_log {
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    let url = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned());
    let headers = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let index = {
        let mut st = app.shared.lock();
        st.requests.push(RequestRecord {
            method: parts.method.as_str().to_owned(),
            url,
            route: None,
            headers,
            body: Vec::new(),
            status: None,
            fault: None,
        });
        st.requests.len() - 1
    };
    parts.extensions.insert(LogIndex(index));
    let copy = Arc::new(Mutex::new(Vec::new()));
    let cap = app.shared.opts.max_bytes.max(OTHER_BODY_CAP) + 1;
    // The body as it is read, copied (up to `cap`) for the log.
    let tee = Body::new(body.map_frame({
        let copy = copy.clone();
        move |frame| {
            if let Some(data) = frame.data_ref() {
                let mut copy = copy.lock().unwrap_or_else(|e| e.into_inner());
                let room = cap.saturating_sub(copy.len());
                copy.extend_from_slice(&data[..data.len().min(room)]);
            }
            frame
        }
    }));
    let resp = next.run(Request::from_parts(parts, tee)).await;
    let status = resp
        .extensions()
        .get::<Cut>()
        .is_none()
        .then(|| resp.status().as_u16());
    let body = std::mem::take(&mut *copy.lock().unwrap_or_else(|e| e.into_inner()));
    if let Some(r) = app.shared.lock().requests.get_mut(index) {
        r.body = body;
        r.status = status;
    }
    resp
}

/// The `reason` an injected `Fault::Status` carries.
fn fault_reason(status: u16) -> &'static str {
    match status {
        400 => "malformed",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        408 => "timeout",
        413 => "too_large",
        429 => "too_many_requests",
        500 => "internal_error",
        502 => "bad_gateway",
        503 => "unavailable",
        504 => "gateway_timeout",
        _ => "injected_fault",
    }
}

/// A request to a protocol route: logs its route (and a poll's session), takes the fault
/// queued for it, and answers as the fault says (or as the route does).
pub(crate) async fn inject(app: &AppState, route: Route, req: Request, next: Next) -> Response {
    let index = req.extensions().get::<LogIndex>().map(|i| i.0);
    let fault = {
        let mut st = app.shared.lock();
        if route == Route::Poll && app.shared.opts.request_log {
            #[derive(Deserialize)]
            struct Session {
                session: Option<String>,
            }
            let query = req.uri().query().unwrap_or("");
            if let Ok(Session { session: Some(s) }) = serde_urlencoded::from_str(query) {
                st.poll_sessions.push(s);
            }
        }
        let fault = st.take_fault(route);
        if let Some(r) = index.and_then(|i| st.requests.get_mut(i)) {
            r.route = Some(route);
            r.fault = fault.clone();
        }
        fault
    };
    let Some(fault) = fault else {
        return next.run(req).await;
    };
    if !matches!(fault, Fault::Delay(_) | Fault::Hang | Fault::Reset) {
        // As before the faults were injected after it: the body is read (and logged).
        let (parts, body) = req.into_parts();
        let _ = body::read_capped(body, OTHER_BODY_CAP).await;
        return answer(app, fault, Request::from_parts(parts, Body::empty()), next).await;
    }
    answer(app, fault, req, next).await
}

async fn answer(app: &AppState, fault: Fault, req: Request, next: Next) -> Response {
    match fault {
        Fault::Delay(d) => {
            tokio::time::sleep(d).await;
            if !app.shared.same_generation(app.generation) {
                return Cut.into_response();
            }
            next.run(req).await
        }
        Fault::Status(code) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            ApiError::new(status, fault_reason(code)).into_response()
        }
        Fault::TooManyRequests { retry_after_s } => {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_requests")
                .header(header::RETRY_AFTER, &retry_after_s.to_string())
                .into_response()
        }
        Fault::InvalidJson => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            "{not json",
        )
            .into_response(),
        Fault::Reset => Cut.into_response(),
        Fault::Truncated => truncated(),
        Fault::Hang => {
            // Held until the receiver goes down or stops, then cut.
            wait_generation_end(app).await;
            Cut.into_response()
        }
    }
}

/// Resolves once the receiver has gone down or stopped since the request's generation.
async fn wait_generation_end(app: &AppState) {
    let mut rx = app.shared.watch.subscribe();
    loop {
        rx.borrow_and_update();
        if !app.shared.same_generation(app.generation) {
            return;
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// `Fault::Truncated`: the head says 64 bytes more than the body sends, which then fails,
/// and hyper closes the connection.
fn truncated() -> Response {
    let data = Bytes::from_static(br#"{"messages":[{"id":"01K6"#);
    let declared = data.len() + 64;
    let pause = Box::pin(tokio::time::sleep(Duration::from_millis(100)));
    let mut resp = Response::new(Body::new(CutShort(Some(data), pause)));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_LENGTH, declared.into());
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// A body that yields its bytes, waits a moment (so hyper flushes the head and those bytes),
/// then fails, which makes hyper close the connection.
struct CutShort(Option<Bytes>, Pin<Box<tokio::time::Sleep>>);

#[derive(Debug)]
struct CutShortError;

impl std::fmt::Display for CutShortError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("body cut short")
    }
}

impl std::error::Error for CutShortError {}

impl hyper::body::Body for CutShort {
    type Data = Bytes;
    type Error = CutShortError;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, CutShortError>>> {
        if let Some(b) = self.0.take() {
            return Poll::Ready(Some(Ok(hyper::body::Frame::data(b))));
        }
        match self.1.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => Poll::Ready(Some(Err(CutShortError))),
        }
    }
}
