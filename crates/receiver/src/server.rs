//! The sockets: an accept loop on tokio, one hyper HTTP/1 connection task per client, and an
//! axum router in front of the handlers (`http.rs`). Everything here is a limit:
//!
//! * open connections are capped (a semaphore, sized under `RLIMIT_NOFILE`); over the cap a
//!   new connection is closed at once;
//! * an accept error (EMFILE, ENFILE, ENOMEM...) is logged and retried after a pause, never
//!   the end of the server;
//! * the request head: at most [`MAX_HEAD`] bytes and [`MAX_HEADERS`] headers (hyper answers
//!   431 and closes), read within [`HEADER_READ_TIMEOUT`] (slowloris). hyper starts that timer
//!   whenever it waits for a head, so an idle keep-alive connection is closed after it too;
//! * the body: judged from the head first (`http::admit`: route, token or cookie, declared
//!   length), so a stranger's or an over-cap body is answered (401, 413) unread; then at most
//!   the route's cap (`batch.max_bytes` for events) within the budget for bodies in flight
//!   (503 past it), read within [`BODY_TIMEOUT`]; the whole request within the longest hold
//!   plus [`REQUEST_SLACK`].
//!
//! Every limit hit is logged (tracing, to stderr), at most once per [`LOG_EVERY`] per kind with
//! a count, so an attack cannot flood the journal.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
#[cfg(feature = "testing")]
use std::{future::Future, pin::Pin, task::Poll};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, Request, Response, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower::ServiceExt;
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};

use super::http::{self, Outcome, Reply};
use super::state::Shared;

/// Largest request head (request line and headers).
pub(crate) const MAX_HEAD: usize = 16 * 1024;
/// Most headers in one request.
pub(crate) const MAX_HEADERS: usize = 64;
/// A request head must arrive within this; also the idle keep-alive limit.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A request body must arrive within this.
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// A request may take its longest hold plus this.
const REQUEST_SLACK: Duration = Duration::from_secs(60);
/// The pause after an accept error that is about the process (EMFILE...), not the client.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// Descriptors kept for everything but client connections (database, logs, a new accept).
const FD_RESERVE: u64 = 64;
/// Past the cap, a body is still read (and dropped) up to this many bytes so the 413 reaches
/// a client that sends it all before reading.
const DRAIN_MAX: usize = 8 << 20;
/// A body refused from its head: at most this much of it is read (and dropped) ...
const DISCARD_MAX: usize = 64 << 10;
/// ... within this, before the answer.
const DISCARD_WITHIN: Duration = Duration::from_millis(200);
/// How often one kind of limit is logged.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// Logs one line per kind per [`LOG_EVERY`], with how many happened since the last line.
#[derive(Default)]
pub(crate) struct LimitLog {
    kinds: Mutex<HashMap<&'static str, (Instant, u64)>>,
}

impl LimitLog {
    pub fn hit(&self, kind: &'static str, detail: &dyn std::fmt::Display) {
        let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let entry = kinds.entry(kind).or_insert((now - LOG_EVERY, 0));
        entry.1 += 1;
        if now.duration_since(entry.0) >= LOG_EVERY {
            tracing::warn!(kind, count = entry.1, "limit: {detail}");
            *entry = (now, 0);
        }
    }
}

/// The most connections served at once: `wanted`, but never more than the descriptors left.
pub(crate) fn connection_cap(wanted: usize) -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        1024
    };
    let by_fds = soft.saturating_sub(FD_RESERVE).max(16);
    wanted.min(usize::try_from(by_fds).unwrap_or(usize::MAX))
}

/// The extension a handler's response carries to have its connection closed unanswered.
#[derive(Clone, Copy)]
struct Cut;

/// The client's socket address, put on each request.
#[derive(Clone, Copy)]
struct Peer(SocketAddr);

#[derive(Debug)]
struct CutError;
impl std::fmt::Display for CutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection cut")
    }
}
impl std::error::Error for CutError {}

#[derive(Clone)]
struct App {
    shared: Arc<Shared>,
    generation: u64,
}

/// One "up" period of the server.
pub(crate) struct Serving {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: std::sync::mpsc::Receiver<()>,
}

impl Serving {
    /// Stops accepting, closes every connection (held ones too), and returns when all are
    /// closed (or after 5 s).
    pub fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = self.done.recv_timeout(Duration::from_secs(5));
    }
}

/// The TLS acceptor for `--tls-cert`/`--tls-key` (rustls with ring; TLS 1.2 and 1.3).
pub(crate) fn tls_acceptor(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    use anyhow::Context;
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| anyhow::anyhow!("reading the certificate {}: {e}", cert.display()))?;
    if certs.is_empty() {
        anyhow::bail!("{} holds no PEM certificate", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| anyhow::anyhow!("reading the private key {}: {e}", key.display()))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("the certificate and key do not make a TLS identity")?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Starts serving `listener` on `rt` under `generation` (HTTPS when `tls` is given).
pub(crate) fn serve(
    rt: &tokio::runtime::Runtime,
    shared: Arc<Shared>,
    listener: std::net::TcpListener,
    generation: u64,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> anyhow::Result<Serving> {
    listener.set_nonblocking(true)?;
    let listener = {
        let _guard = rt.enter();
        TcpListener::from_std(listener)?
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    rt.spawn(async move {
        accept_loop(listener, shared, generation, tls, stop_rx).await;
        let _ = done_tx.send(());
    });
    Ok(Serving {
        stop: Some(stop_tx),
        done: done_rx,
    })
}

fn router(app: App) -> Router {
    let hold_max = {
        let st = app.shared.lock();
        Duration::from_secs(st.opts.wait_max_s.max(25))
    };
    Router::new()
        .fallback(any_request)
        .with_state(app)
        .layer(RequestBodyTimeoutLayer::new(BODY_TIMEOUT))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            hold_max + REQUEST_SLACK,
        ))
}

/// Whether an accept error is about this process or machine (pause before retrying) rather
/// than about the one connection that failed.
fn accept_error_is_ours(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    generation: u64,
    tls: Option<tokio_rustls::TlsAcceptor>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let cap = connection_cap(shared.lock().opts.max_connections);
    let slots = Arc::new(Semaphore::new(cap));
    let app = router(App {
        shared: shared.clone(),
        generation,
    });
    let mut conns = JoinSet::new();
    loop {
        while conns.try_join_next().is_some() {}
        let accepted = tokio::select! {
            _ = &mut stop => break,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((stream, peer)) => {
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    shared.limits.hit(
                        "connections",
                        &format_args!("{cap} connections open: closing a new one from {peer}"),
                    );
                    drop(stream);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let (app, shared, tls) = (app.clone(), shared.clone(), tls.clone());
                conns.spawn(async move {
                    match tls {
                        None => serve_connection(stream, peer, app, &shared).await,
                        Some(tls) => {
                            // The handshake has the head's deadline (slowloris over TLS).
                            match tokio::time::timeout(HEADER_READ_TIMEOUT, tls.accept(stream))
                                .await
                            {
                                Ok(Ok(s)) => serve_connection(s, peer, app, &shared).await,
                                Ok(Err(e)) => tracing::debug!("TLS handshake from {peer}: {e}"),
                                Err(_) => shared.limits.hit(
                                    "tls_timeout",
                                    &format_args!(
                                        "no TLS handshake within {HEADER_READ_TIMEOUT:?} from {peer}: closed"
                                    ),
                                ),
                            }
                        }
                    }
                    drop(permit);
                });
            }
            Err(e) if accept_error_is_ours(&e) => {
                shared.limits.hit(
                    "accept",
                    &format_args!("accept failed ({e}); retrying in {ACCEPT_PAUSE:?}"),
                );
                tokio::select! {
                    _ = &mut stop => break,
                    _ = tokio::time::sleep(ACCEPT_PAUSE) => {}
                }
            }
            Err(e) => tracing::debug!("accept: {e}"),
        }
    }
    // Refuse new connections, then cut every open one (held requests included).
    drop(listener);
    conns.shutdown().await;
}

async fn serve_connection<S>(stream: S, peer: SocketAddr, app: Router, shared: &Shared)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(Peer(peer));
        let app = app.clone();
        async move {
            let resp = match app.oneshot(req.map(Body::new)).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            if resp.extensions().get::<Cut>().is_some() {
                return Err(CutError);
            }
            Ok(resp)
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        .max_headers(MAX_HEADERS);
    if let Err(e) = builder.serve_connection(TokioIo::new(stream), svc).await {
        if e.is_parse_too_large() {
            shared.limits.hit(
                "head_size",
                &format_args!("request head over {MAX_HEAD} bytes from {peer}: 431, closed"),
            );
        } else if e.is_timeout() {
            shared.limits.hit(
                "head_timeout",
                &format_args!("no request head within {HEADER_READ_TIMEOUT:?} from {peer}: closed"),
            );
        } else if e.is_parse() {
            shared
                .limits
                .hit("malformed", &format_args!("bad request from {peer}: {e}"));
        } else {
            tracing::debug!("connection from {peer}: {e}");
        }
    }
}

/// Every request: decide from its head whether to read the body (and how much: the route's
/// cap, within the budget for bodies in flight), read it, hand it to `http::handle`, write
/// what it says. A request refused from its head never has its body read.
async fn any_request(State(app): State<App>, req: Request<Body>) -> Response<Body> {
    let peer = req.extensions().get::<Peer>().map(|p| p.0);
    let (parts, mut body) = req.into_parts();
    let url = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned());
    let (path, query) = url.split_once('?').unwrap_or((url.as_str(), ""));
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let head = http::Head {
        method: parts.method.as_str().to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        headers,
        peer,
    };
    let declared = head.declared_len();
    let (head, admission) = http::admit(&app.shared, head).await;
    // The body's share of the budget, held until the answer is made.
    let mut _held = None;
    let mut refused = None;
    let mut buf = Vec::new();
    match admission {
        http::Admission::NoBody => {}
        http::Admission::Refuse(r) => {
            if r.status == 413 {
                app.shared.limits.hit(
                    "body_size",
                    &format_args!("{}: declared body too large from {peer:?}: 413", head.path),
                );
            }
            refused = Some(r);
        }
        http::Admission::Body(cap) => {
            let want = declared.map_or(cap + 1, |n| (n as usize).min(cap + 1));
            let kib = u32::try_from(want / 1024 + 1).unwrap_or(u32::MAX);
            match app.shared.bodies.clone().try_acquire_many_owned(kib) {
                Err(_) => {
                    app.shared.limits.hit(
                        "body_budget",
                        &format_args!("{}: bodies in flight over the budget: 503", head.path),
                    );
                    refused = Some(http::Reply::error(503, "busy").header("retry-after", "1"));
                }
                Ok(permit) => {
                    _held = Some(permit);
                    match read_capped(&mut body, cap).await {
                        Some(b) => buf = b,
                        // The client went away (or was too slow) mid-body: nothing to answer.
                        None => return cut(),
                    }
                    if buf.len() > cap {
                        app.shared.limits.hit(
                            "body_size",
                            &format_args!("{}: body over {cap} bytes from {peer:?}", head.path),
                        );
                    }
                }
            }
        }
    }
    let unread = refused.is_some() && (declared.is_some_and(|n| n > 0) || chunked(&parts.headers));
    if unread && !parts.headers.contains_key(header::EXPECT) {
        // Costs nothing kept: lets a small honest body arrive, so closing the socket does not
        // reset the connection before the client has read the answer.
        discard_briefly(&mut body).await;
    }

    let outcome = http::handle(
        app.shared.clone(),
        app.generation,
        head,
        url.clone(),
        buf,
        refused,
    )
    .await;
    let mut resp = match outcome {
        Outcome::Reply(r) => to_response(r),
        Outcome::Cut => return cut(),
        #[cfg(feature = "testing")]
        Outcome::Truncated(r, declared) => return truncated(r, declared),
    };
    if unread {
        // The rest of the body is never read: the connection ends with this answer.
        resp.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    resp
}

fn chunked(headers: &axum::http::HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
}

/// Reads a body, keeping at most `cap + 1` bytes (to tell "too large"); past that the rest is
/// drained, up to [`DRAIN_MAX`], so the 413 reaches a client that sends it all before
/// reading. `None` when the body failed (the client went away or was too slow).
async fn read_capped(body: &mut Body, cap: usize) -> Option<Vec<u8>> {
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
    Some(buf)
}

/// Reads and drops what a refused request's body has sent: at most [`DISCARD_MAX`] bytes
/// within [`DISCARD_WITHIN`].
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

fn cut() -> Response<Body> {
    let mut r = Response::new(Body::empty());
    r.extensions_mut().insert(Cut);
    r
}

pub(crate) fn to_response(r: Reply) -> Response<Body> {
    let no_body = matches!(r.status, 100..=199 | 204 | 304);
    let mut b = Response::builder().status(r.status);
    if !no_body && r.body.is_some() {
        b = b.header(header::CONTENT_TYPE, r.content_type);
    }
    for (k, v) in &r.headers {
        b = b.header(*k, v.as_str());
    }
    b = b.header(header::CACHE_CONTROL, "no-store");
    let body = match r.body {
        Some(bytes) if !no_body => Body::from(bytes),
        _ => Body::empty(),
    };
    b.body(body).unwrap_or_else(|e| {
        tracing::error!("building a response: {e}");
        let mut r = Response::new(Body::from(r#"{"reason":"internal_error"}"#));
        *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        r
    })
}

/// `Fault::Truncated`: the head says `declared` bytes, the body sends fewer, then fails, and
/// hyper closes the connection.
#[cfg(feature = "testing")]
fn truncated(r: Reply, declared: usize) -> Response<Body> {
    let data = axum::body::Bytes::from(r.body.clone().unwrap_or_default());
    let mut resp = to_response(Reply { body: None, ..r });
    resp.headers_mut()
        .insert(header::CONTENT_LENGTH, declared.into());
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    let pause = Box::pin(tokio::time::sleep(Duration::from_millis(100)));
    *resp.body_mut() = Body::new(CutShort(Some(data), pause));
    resp
}

/// A body that yields its bytes, waits a moment (so hyper flushes the head and those bytes),
/// then fails, which makes hyper close the connection.
#[cfg(feature = "testing")]
struct CutShort(Option<axum::body::Bytes>, Pin<Box<tokio::time::Sleep>>);

#[cfg(feature = "testing")]
impl hyper::body::Body for CutShort {
    type Data = axum::body::Bytes;
    type Error = CutError;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<axum::body::Bytes>, CutError>>> {
        if let Some(b) = self.0.take() {
            return Poll::Ready(Some(Ok(hyper::body::Frame::data(b))));
        }
        match self.1.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => Poll::Ready(Some(Err(CutError))),
        }
    }
}
