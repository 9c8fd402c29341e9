//! Request bodies, judged from the head first: a body is read only after the route, its
//! token or cookie (the extractors before it) and its declared length have passed. It is
//! read up to its route's cap, within its budget for bodies in flight across all
//! connections (503 past it: the login form, anyone's, has a budget of its own so that
//! strangers' bodies cannot starve the paired person's), and a body left unread (the request was refused from its
//! head) is dropped briefly and its connection closed after the answer ([`guard_unread`]).

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{malformed, ApiError};
use crate::limits::{DISCARD_MAX, DISCARD_WITHIN, DRAIN_MAX, LOGIN_BODY_CAP, OTHER_BODY_CAP};
use crate::state::AppState;

/// A body read whole, with its share of the budget (held until the answer is made).
pub(crate) struct Read {
    pub bytes: Bytes,
    _share: OwnedSemaphorePermit,
}

impl Read {
    /// The body as JSON of type `T`: 400 `malformed body: …` when it is not, 400 `NUL
    /// character in FIELD` when a string or key in it holds one (no store keeps one).
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        // A NUL can only come as the escape `\u0000`; only then is the body looked through.
        if self.bytes.windows(6).any(|w| w == b"\\u0000") {
            let v: serde_json::Value = self.json_with_nul()?;
            if let Some(field) = crate::validate::nul_field(&v) {
                return Err(ApiError::bad_request(&format!("NUL character in {field}")));
            }
        }
        self.json_with_nul()
    }

    /// The body as JSON of type `T`, NUL characters and all: for event batches, whose
    /// events are each checked (`check_event`), so that one bad event does not refuse the
    /// batch.
    pub fn json_with_nul<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        serde_json::from_slice(&self.bytes).map_err(|e| malformed(&e))
    }
}

/// The `content-length` declared, if any (a malformed one counts as too large).
pub(crate) fn declared_len(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH).map(|v| {
        v.to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(u64::MAX)
    })
}

/// Reads a body of at most `cap` bytes: 413 `too_large` at once when the head declares more,
/// 503 `busy` when the budget for bodies in flight (the authenticated routes') has no room
/// for it, 413 when more arrives
/// than `cap` (the rest is drained, up to [`crate::limits::DRAIN_MAX`], so the answer reaches
/// a client that sends it all first). A body cut short (the client went or was too slow)
/// cuts the connection.
pub(crate) async fn read(
    app: &AppState,
    headers: &HeaderMap,
    body: Body,
    cap: usize,
    too_large: &str,
) -> Result<Read, ApiError> {
    read_within(app, &app.shared.bodies, headers, body, cap, too_large).await
}

/// [`read`] within the budget `budget`.
async fn read_within(
    app: &AppState,
    budget: &Arc<Semaphore>,
    headers: &HeaderMap,
    body: Body,
    cap: usize,
    too_large: &str,
) -> Result<Read, ApiError> {
    let shared = &app.shared;
    let declared = declared_len(headers);
    if declared.is_some_and(|n| n > cap as u64) {
        shared.limits.hit(
            "body_size",
            &format_args!("declared body over {cap} bytes: 413"),
        );
        return Err(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, too_large));
    }
    let want = declared.map_or(cap + 1, |n| (n as usize).min(cap + 1));
    let kib = u32::try_from(want / 1024 + 1).unwrap_or(u32::MAX);
    let Ok(share) = budget.clone().try_acquire_many_owned(kib) else {
        shared
            .limits
            .hit("body_budget", &"bodies in flight over the budget: 503");
        return Err(
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "busy").header(header::RETRY_AFTER, "1")
        );
    };
    let bytes = read_capped(body, cap).await.ok_or(ApiError::Cut)?;
    if bytes.len() > cap {
        shared
            .limits
            .hit("body_size", &format_args!("body over {cap} bytes: 413"));
        return Err(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, too_large));
    }
    Ok(Read {
        bytes,
        _share: share,
    })
}

/// Reads a body, keeping at most `cap + 1` bytes (to tell "too large"); past that the rest
/// is drained, up to [`DRAIN_MAX`]. `None` when the body failed.
pub(crate) async fn read_capped(mut body: Body, cap: usize) -> Option<Bytes> {
    let mut buf = Vec::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.ok()?;
        if let Ok(data) = frame.into_data() {
            seen = seen.saturating_add(data.len());
            let room = (cap + 1).saturating_sub(buf.len());
            buf.extend_from_slice(&data[..data.len().min(room)]);
            if seen > cap.saturating_add(DRAIN_MAX) {
                break;
            }
        }
    }
    Some(buf.into())
}

/// Reads a body of at most `cap` bytes as [`read`] does, its 413 saying
/// `body larger than {cap} bytes`.
pub(crate) async fn read_up_to(
    app: &AppState,
    headers: &HeaderMap,
    body: Body,
    cap: usize,
) -> Result<Read, ApiError> {
    read(
        app,
        headers,
        body,
        cap,
        &format!("body larger than {cap} bytes"),
    )
    .await
}

/// Reads `POST /login`'s body (anyone may send one): at most [`LOGIN_BODY_CAP`] bytes,
/// within the login form's own budget.
pub(crate) async fn read_login(
    app: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Read, ApiError> {
    let too_large = format!("body larger than {LOGIN_BODY_CAP} bytes");
    let budget = &app.shared.login_bodies;
    read_within(app, budget, headers, body, LOGIN_BODY_CAP, &too_large).await
}

/// Reads a body of at most [`OTHER_BODY_CAP`] bytes (every route but the login and the
/// event batches).
pub(crate) async fn read_other(
    app: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Read, ApiError> {
    read_up_to(app, headers, body, OTHER_BODY_CAP).await
}

/// Reads a body of at most [`OTHER_BODY_CAP`] bytes as JSON of type `T`.
pub(crate) async fn read_other_json<T: DeserializeOwned>(
    app: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    read_other(app, headers, body).await?.json()
}

/// The extractor (the last of a handler's: it takes the body) for a JSON body of at most
/// [`OTHER_BODY_CAP`] bytes, read as [`read_other`] reads it: the value, and the read whose
/// share of the budget is held until the answer is made.
pub(crate) struct OtherJson<T>(pub T, pub Read);

impl<T: DeserializeOwned + Send> FromRequest<AppState> for OtherJson<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, app: &AppState) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        let read = read_other(app, &parts.headers, body).await?;
        Ok(OtherJson(read.json()?, read))
    }
}

/// A request body that is taken from its slot only when first read: what is still in the
/// slot once the answer is made was never read.
struct Lazy {
    slot: Arc<Mutex<Option<Body>>>,
    taken: Option<Body>,
}

impl hyper::body::Body for Lazy {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        if self.taken.is_none() {
            let body = self.slot.lock().unwrap_or_else(|e| e.into_inner()).take();
            match body {
                Some(b) => self.taken = Some(b),
                None => return Poll::Ready(None),
            }
        }
        match self.taken.as_mut() {
            Some(b) => Pin::new(b).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }
}

/// The layer that notices a body left unread: it drops what has already arrived (at most
/// [`DISCARD_MAX`] bytes within [`DISCARD_WITHIN`], so closing the socket does not reset the
/// connection before the client has read the answer) and closes the connection after the
/// answer, the rest of the body never read.
pub(crate) async fn guard_unread(req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let sent = declared_len(&parts.headers).is_some_and(|n| n > 0)
        || parts.headers.contains_key(header::TRANSFER_ENCODING);
    let expects = parts.headers.contains_key(header::EXPECT);
    if !sent {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let slot = Arc::new(Mutex::new(Some(body)));
    let lazy = Body::new(Lazy {
        slot: slot.clone(),
        taken: None,
    });
    let mut resp = next.run(Request::from_parts(parts, lazy)).await;
    let unread = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(mut body) = unread {
        if resp.extensions().get::<crate::error::Cut>().is_some() {
            return resp;
        }
        if !expects {
            discard_briefly(&mut body).await;
        }
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

async fn discard_briefly(body: &mut Body) {
    let drain = async {
        let mut seen = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                seen += data.len();
                if seen > DISCARD_MAX {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout(DISCARD_WITHIN, drain).await;
}
