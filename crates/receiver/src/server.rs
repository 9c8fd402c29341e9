//! The sockets: an accept loop on tokio, one hyper HTTP/1 connection task per client, and the
//! axum router (`app.rs`) in front of the handlers. Everything here is a limit:
//!
//! * open connections are capped (a semaphore, sized under `RLIMIT_NOFILE`); over the cap a
//!   new connection is closed at once;
//! * an accept error (EMFILE, ENFILE, ENOMEM...) is logged and retried after a pause, never
//!   the end of the server;
//! * the request head: at most [`MAX_HEAD`] bytes and [`MAX_HEADERS`] headers (hyper answers
//!   431 and closes), read within [`HEADER_READ_TIMEOUT`] (slowloris). hyper starts that timer
//!   whenever it waits for a head, so an idle keep-alive connection is closed after it too;
//! * the body: judged from the head first (the route's extractors: token or cookie, then the
//!   declared length, `body.rs`), so a stranger's or an over-cap body is answered (401, 413)
//!   unread; then at most the route's cap (`batch.max_bytes` for events) within the budget
//!   for bodies in flight (503 past it; `POST /login`, anyone's, has its own small one, so
//!   strangers cannot starve the paired person's routes), read within [`crate::limits::BODY_TIMEOUT`]; the
//!   whole request within the longest hold plus [`crate::limits::REQUEST_SLACK`] (`app.rs`).
//!
//! Every limit hit is logged (tracing, to stderr), at most once per
//! [`crate::limits::LOG_EVERY`] per kind with a count, so an attack cannot flood the journal.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower::ServiceExt;

use crate::error::Cut;
use crate::limits::{connection_cap, ACCEPT_PAUSE, HEADER_READ_TIMEOUT, MAX_HEAD, MAX_HEADERS};
use crate::state::{AppState, Shared};

/// Why a connection is closed unanswered (a response marked [`Cut`]).
#[derive(Debug)]
struct CutError;
impl std::fmt::Display for CutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection cut")
    }
}
impl std::error::Error for CutError {}

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
    let cap = connection_cap(shared.opts.max_connections);
    let slots = Arc::new(Semaphore::new(cap));
    let app = crate::app::router(AppState {
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
        req.extensions_mut().insert(ConnectInfo(peer));
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
