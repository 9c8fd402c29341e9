//! A sessionpipe receiver over HTTP (axum on hyper and tokio): the test receiver the sender's tests drive,
//! and, with a database file and a login token, the real `sp-receiver` and its page.
//!
//! It speaks the seed-era protocol (`docs/protocol.md#seed` and `docs/protocol.md#http`):
//! discovery, `POST {events}` with dedup, the
//! per-session control long poll and acks. Everything it keeps is in one SQLite database
//! (`db/`): a file for `sp-receiver`, a private in-memory one for tests, same SQL. Tests of the
//! sender drive it through this API (and fault injection); the delivery fixtures drive it
//! through its own test door (tests) or the page's enqueue action (`sp-receiver`). The page
//! (`routes/page.rs`) lets a person answer from a phone: see there for its routes and security.
//!
//! | route | auth | answers |
//! |---|---|---|
//! | `GET /.well-known/sessionpipe` | none | 200 well-known document |
//! | `POST /api/sessionpipe/v1/events` | Bearer | 202 `{accepted,duplicates,rejected,max_tier}`; 400 malformed/empty/over `max_events` or `sessionpipe-protocol` other than 1; 401; 403 `tier_above_max`; 413 over `max_bytes` |
//! | `GET /api/sessionpipe/v1/control?session=&wait=` | Bearer | 200 `{messages}` (at once, or as soon as one is enqueued), 204 when the wait runs out; 400; 401; 404 without the `control` capability |
//! | `POST /api/sessionpipe/v1/control/ack` | Bearer | 202 `{}`; 400 with the violated rule; 401; 404 without `control` |
//! | `POST /api/sessionpipe/v1/control/pair`, `GET …/control/pair?code=` | Bearer | signed control's pairing (only with `rp_id`; `routes/signed.rs`) |
//! | `GET /api/sessionpipe/v1/control?machine=&wait=`, `POST …/control/off` | machine token | signed control's per-machine queue and leaving (only with `rp_id`) |
//! | `GET /healthz` | none | 200 `{"status":"ok"}` when the server and its database answer; 503 otherwise |
//! | `POST /test/enqueue`, `GET /test/events`, `GET /test/acks` | none | the test door (only built with the `testing` feature, and on with `test_door`) |
//! | `/`, `/login`, `/logout`, `/assets/*`, `/page/api/*` | login | the page (`routes/page.rs`) |
//! | anything else | | 404 `{"reason":"not_found"}` (405 with `allow` for a known path with the wrong method) |
//!
//! One axum route per endpoint (`routes/`), put together under the layers every request
//! passes (`app.rs`); requests run as tokio tasks (`server.rs`, with its limits); a held long
//! poll is an async wait that costs no thread (`longpoll.rs`), and only the database calls
//! block (off the async workers, and outside the state's lock: `state.rs`; `/healthz`
//! answers 503 within half a second when the database does not). Errors carry `error.json` bodies (`{"reason"}`,
//! `error.rs`). Who may ask is decided by extractors (`auth.rs`) before a body is read
//! (`body.rs`).
//!
//! The modules form layers, each importing only those below it: `options`, `validate`,
//! `limits`, `push`, `db`, `state`, `error`, `auth`, `body`, `longpoll`, `routes`, `app`,
//! `server`, `cli`.
//!
//! Fault injection ([`Fault`], [`Receiver::push_fault`]), the request log and the test door
//! exist only with the cargo feature `testing` (the sender's tests turn it on); a release
//! build of `sp-receiver` has none of them.
// No function over 100 lines (clippy.toml sets the threshold): long ones are split where
// they read as steps. Tests and benchmarks, which read as one scenario each, are exempt.
#![warn(clippy::too_many_lines)]

mod app;
mod auth;
mod body;
pub mod cli;
mod db;
mod error;
mod limits;
mod longpoll;
mod options;
pub mod push;
mod routes;
mod server;
mod state;
mod validate;

pub use options::{
    Database, ReceiverOptions, Route, ACK_PATH, CONTROL_PATH, DEFAULT_BODY_BUDGET, EVENTS_PATH,
    OFF_PATH, PAIR_PATH, WELL_KNOWN_PATH,
};
#[cfg(feature = "testing")]
pub use options::{Fault, RequestRecord};

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;

use state::{Shared, State};

struct Control {
    shared: Arc<Shared>,
    serving: Mutex<Option<server::Serving>>,
    /// The runtime the server runs on (its own worker threads).
    rt: Option<tokio::runtime::Runtime>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    /// On a shared (PostgreSQL) database: the thread that hears the other receivers.
    _listener: Option<db::Listener>,
}

/// Handle to a running test receiver. Clones share the same receiver.
#[derive(Clone)]
pub struct Receiver {
    inner: Arc<Control>,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("url", &self.url())
            .finish()
    }
}

fn bind_listener(addr: SocketAddr, patience: Duration) -> anyhow::Result<TcpListener> {
    let deadline = Instant::now() + patience;
    loop {
        match TcpListener::bind(addr) {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                let port = addr.port();
                return Err(e).with_context(|| {
                    format!(
                        "binding {addr}: the address is taken, most likely by an sp-receiver already running (check: curl -s http://127.0.0.1:{port}/healthz, or ss -ltnp 'sport = :{port}'); stop that one, or give this one another --listen"
                    )
                });
            }
            Err(e) => return Err(e).with_context(|| format!("binding {addr}")),
        }
    }
}

impl Control {
    fn rt(&self) -> &tokio::runtime::Runtime {
        self.rt
            .as_ref()
            .expect("the runtime lives as long as the receiver")
    }

    /// Starts serving on `listener` under the current generation.
    fn serve(&self, listener: TcpListener) -> anyhow::Result<server::Serving> {
        let generation = self.shared.lock().generation;
        server::serve(
            self.rt(),
            self.shared.clone(),
            listener,
            generation,
            self.tls.clone(),
        )
    }

    /// Takes the receiver off the network: refuses new connections, cuts open ones, and
    /// makes held requests give up unanswered. State is kept.
    fn go_down(&self, serving: &mut Option<server::Serving>) {
        let Some(s) = serving.take() else { return };
        {
            let mut st = self.shared.lock();
            st.generation += 1;
            st.touched.push(state::ALL.to_owned());
        }
        self.shared.notify();
        // Returns once the listener is closed and every connection task has been dropped
        // (which closes its socket).
        s.stop();
        self.shared.notify();
    }

    fn shutdown(&self) {
        let mut serving = self.serving.lock().unwrap_or_else(|e| e.into_inner());
        self.shared.lock().stopped = true;
        self.go_down(&mut serving);
        self.shared.notify();
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        self.shutdown();
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

/// With `SP_TEST_RECEIVER_PG` set (a PostgreSQL cluster's admin URL; scripts/test.sh sets it
/// for its second pass), a fresh database on that cluster for a test's receiver (or two
/// receivers sharing it); `None` without it. Every test receiver started without a database
/// gets one of these then, so the receiver's suite runs against PostgreSQL too.
#[cfg(feature = "testing")]
pub fn test_database() -> anyhow::Result<Option<Database>> {
    match std::env::var("SP_TEST_RECEIVER_PG") {
        Ok(admin) if !admin.is_empty() => {
            Ok(Some(Database::Postgres(db::new_test_postgres(&admin)?)))
        }
        _ => Ok(None),
    }
}

impl Receiver {
    /// Binds `127.0.0.1:0` and starts serving.
    pub fn start(opts: ReceiverOptions) -> anyhow::Result<Receiver> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), opts)
    }

    /// Binds `addr` (port 0: any free port) and starts serving. Opens (or creates) the
    /// database first when `opts.db_path` is set.
    pub fn start_on(addr: SocketAddr, opts: ReceiverOptions) -> anyhow::Result<Receiver> {
        let opened = match &opts.db {
            Some(target) => db::open(target)?,
            None => {
                #[cfg(feature = "testing")]
                let target = test_database()?;
                #[cfg(not(feature = "testing"))]
                let target: Option<Database> = None;
                match target {
                    Some(target) => db::open(&target)?,
                    None => db::open_memory()?,
                }
            }
        };
        let tls = match &opts.tls {
            Some((cert, key)) => Some(server::tls_acceptor(cert, key)?),
            None => None,
        };
        let listener = bind_listener(addr, Duration::ZERO)?;
        let addr = listener.local_addr()?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(64)
            .thread_name("sp-receiver")
            .enable_all()
            .build()
            .context("starting the tokio runtime")?;
        let shared = Arc::new(Shared::new(opts, opened.store, addr));
        let hears = opened.shared.map(|s| {
            let me = s.announcer.me().to_owned();
            {
                let mut st = shared.lock();
                st.shared_db = true;
                // Exactly the shared number (the pages of the other receivers hold it).
                st.version = s.announcer.latest().unwrap_or(st.version);
            }
            let weak = Arc::downgrade(&shared);
            let hears = s.listen(move |w| {
                let Some(shared) = weak.upgrade() else { return };
                match w {
                    db::Wakeup::Notified(payload) => {
                        let a = db::parse_announcement(&payload);
                        if a.from.as_deref() != Some(me.as_str()) {
                            shared.remote_change(a.version, a.keys);
                        }
                    }
                    // Listening again: what was announced meanwhile is lost; the shared
                    // version says where the page is, and every poll looks again.
                    db::Wakeup::Connected => {
                        let latest = shared.announcer.get().and_then(|a| a.latest());
                        shared.remote_change(latest, vec![state::ALL.to_owned()])
                    }
                    // Not listening: every poll looks again on the floor.
                    db::Wakeup::Floor => shared.remote_change(None, vec![state::ALL.to_owned()]),
                }
            });
            let _ = shared.announcer.set(s.announcer);
            hears
        });
        let allow_private_push = shared.opts.allow_private_push;
        let pusher = push::Pusher::start(
            Arc::new(state::PushView(Arc::downgrade(&shared))),
            allow_private_push,
        );
        shared.lock().pusher = Some(pusher);
        let control = Control {
            shared,
            serving: Mutex::new(None),
            rt: Some(rt),
            tls,
            _listener: hears,
        };
        let serving = control.serve(listener)?;
        *control.serving.lock().unwrap_or_else(|e| e.into_inner()) = Some(serving);
        Ok(Receiver {
            inner: Arc::new(control),
        })
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// `http://127.0.0.1:PORT` (no trailing slash): the address it listens on (a wildcard
    /// address is shown as loopback, which reaches it too).
    pub fn url(&self) -> String {
        let mut addr = self.shared().addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(if addr.is_ipv4() {
                std::net::Ipv4Addr::LOCALHOST.into()
            } else {
                std::net::Ipv6Addr::LOCALHOST.into()
            });
        }
        format!("http://{addr}")
    }

    /// The address it is bound to.
    pub fn addr(&self) -> SocketAddr {
        self.shared().addr
    }

    /// Forgets what is older than `keep`: see `db.rs`. Returns the rows removed.
    pub fn sweep(&self, keep: Duration) -> anyhow::Result<usize> {
        self.shared().run(|c| {
            let now = c.now_ms();
            let n = c.db.sweep(now, keep.as_millis() as i64)?;
            if n > 0 {
                c.bump();
            }
            Ok(n)
        })
    }

    /// The port, fixed for the receiver's life.
    pub fn port(&self) -> u16 {
        self.shared().addr.port()
    }

    /// The bearer token it expects.
    pub fn token(&self) -> String {
        self.shared().opts.token.clone()
    }

    /// The well-known document it currently serves.
    pub fn well_known(&self) -> Value {
        self.shared().opts.well_known()
    }

    /// Enqueues a message for session `"<harness>:<id>"` from a partial one, like the
    /// delivery fixtures' enqueue step: `{kind, text?, for?, decision?, note?,
    /// expires_in_s? (default 60)}`. Mints `id` (ULID), `at` and `expires_at` (receiver clock,
    /// `YYYY-MM-DDTHH:MM:SS.mmmZ`); an `id`, `at` or `expires_at` string already in the
    /// partial is kept as given instead. Other keys are copied in order. Returns the stored
    /// message.
    ///
    /// # Panics
    /// If `message` is not a JSON object or `expires_in_s` is not a number.
    pub fn enqueue(&self, session: &str, message: Value) -> Value {
        let Value::Object(partial) = message else {
            panic!("Receiver::enqueue wants a JSON object (use enqueue_raw for anything else)");
        };
        self.shared()
            .run(|c| c.enqueue(session, &partial, 60_000))
            .unwrap_or_else(|e| panic!("Receiver::enqueue: {e:?}"))
    }

    /// Enqueues exactly this JSON value. It is redelivered until an ack names its `"id"` (if
    /// it has a string id; forever otherwise), unless it has a parseable `expires_at` in the
    /// past (receiver clock).
    pub fn enqueue_raw(&self, session: &str, message: Value) {
        self.shared()
            .run(|c| c.enqueue_raw(session, message))
            .unwrap_or_else(|e| panic!("Receiver::enqueue_raw: {e}"));
    }

    /// Messages a poll of `session` would get now (not acked, not expired), oldest first.
    pub fn pending(&self, session: &str) -> Vec<Value> {
        self.shared()
            .run(|c| c.pending(session))
            .unwrap_or_else(|e| panic!("receiver database: {e}"))
    }

    /// Every event accepted (duplicates and rejected ones excluded), in arrival order.
    pub fn events(&self) -> Vec<Value> {
        self.shared()
            .db
            .events()
            .unwrap_or_else(|e| panic!("receiver database: {e}"))
    }

    /// Events answered in `rejected` (schema violations): `{"id","reason","event"}` each.
    pub fn rejected(&self) -> Vec<Value> {
        self.shared().lock().rejected.clone()
    }

    /// Number of `POST {events}` requests seen (any status, faults included).
    pub fn event_posts(&self) -> usize {
        self.shared().event_posts.load(Ordering::Relaxed)
    }

    /// Every valid ack entry received, duplicates included, in arrival order.
    pub fn acks(&self) -> Vec<Value> {
        self.shared()
            .db
            .acks()
            .unwrap_or_else(|e| panic!("receiver database: {e}"))
    }

    /// Number of control poll requests seen (any status, faults included).
    pub fn polls(&self) -> usize {
        self.shared().polls.load(Ordering::Relaxed)
    }

    /// Control polls held now (each looked, found nothing, and waits for a change): the
    /// state a test waits on before it wakes one.
    pub fn held_polls(&self) -> usize {
        self.shared().held.load(Ordering::Relaxed)
    }

    #[cfg(feature = "testing")]
    /// The `session` query value of each poll that had one (decoded), in order.
    pub fn poll_sessions(&self) -> Vec<String> {
        self.shared().lock().poll_sessions.clone()
    }

    #[cfg(feature = "testing")]
    /// Every request received (all routes), in arrival order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared().lock().requests.clone()
    }

    /// Blocks until an accepted event satisfies `pred` (events already there count), or
    /// `timeout` passes. Returns the first such event.
    pub fn wait_event(&self, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Option<Value> {
        self.wait_for(timeout, |_, db| {
            let events = db.events().unwrap_or_default();
            events.into_iter().find(|e| pred(e))
        })
    }

    /// Blocks until a final ack entry for message `id` has arrived (or had already), or
    /// `timeout` passes. Returns the first such entry (a `taken` or `progress` is not one).
    pub fn wait_ack(&self, id: &str, timeout: Duration) -> Option<Value> {
        self.wait_for(timeout, |_, db| db.first_ack(id).ok().flatten())
    }

    /// Blocks until `find` finds something in the state (checked now and after each change),
    /// or `timeout` passes.
    fn wait_for<T>(
        &self,
        timeout: Duration,
        mut find: impl FnMut(&mut State, &dyn db::Store) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + timeout;
        let shared = self.shared();
        let mut st = shared.lock();
        loop {
            if let Some(found) = find(&mut st, &*shared.db) {
                return Some(found);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            st = shared
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    #[cfg(feature = "testing")]
    /// Queues a fault for the next request to `route` (FIFO per route). The request is still
    /// counted (`event_posts`, `polls`, `poll_sessions`, `requests`).
    pub fn push_fault(&self, route: Route, fault: Fault) {
        self.shared()
            .lock()
            .faults
            .entry(route)
            .or_default()
            .push_back(fault);
    }

    #[cfg(feature = "testing")]
    /// How many faults are still queued for `route`.
    pub fn pending_faults(&self, route: Route) -> usize {
        self.shared()
            .lock()
            .faults
            .get(&route)
            .map_or(0, |q| q.len())
    }

    #[cfg(feature = "testing")]
    /// Drops every queued fault: the receiver is healthy from the next request on.
    pub fn clear_faults(&self) {
        self.shared().lock().faults.clear();
    }

    /// `true`: takes the receiver off the network. When this returns, new connections are
    /// refused and every open one (idle keep-alive, held long poll, hung request) has been
    /// cut without an answer. `false`: listens again on the same port. State (queue, events,
    /// acks, counters, pending faults) is kept either way. No-op after `stop()`.
    ///
    /// # Panics
    /// If the port cannot be bound again within 5 s (another process took it).
    pub fn set_down(&self, down: bool) {
        let mut serving = self.inner.serving.lock().unwrap_or_else(|e| e.into_inner());
        if down {
            self.inner.go_down(&mut serving);
        } else if serving.is_none() && !self.shared().lock().stopped {
            let listener = bind_listener(self.shared().addr, Duration::from_secs(5))
                .expect("rebinding the receiver's port");
            *serving = Some(self.inner.serve(listener).expect("restarting the receiver"));
        }
    }

    /// Whether the receiver is currently off the network.
    pub fn is_down(&self) -> bool {
        self.inner
            .serving
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// Stops the receiver for every clone: cuts all connections and closes the port.
    pub fn stop(self) {
        self.inner.shutdown();
    }
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;
    use crate::db::pg_cluster::Cluster;
    use crate::options::{CONTROL_PATH, EVENTS_PATH};

    fn version(r: &Receiver) -> u64 {
        r.shared().lock().version
    }

    /// Waits (on the state's condvar, at most 5 s) until `r`'s page version is `want`.
    fn reaches(r: &Receiver, want: u64) -> bool {
        r.wait_for(Duration::from_secs(5), |st, _| {
            (st.version == want).then_some(())
        })
        .is_some()
    }

    /// A request over loopback with a `timeout` on every read and write: the status (0 when
    /// nothing came back in time) and how long it took.
    fn http(
        r: &Receiver,
        method: &str,
        path: &str,
        body: &str,
        timeout: Duration,
    ) -> (u16, Duration) {
        use std::io::{Read, Write};
        let t0 = std::time::Instant::now();
        let Ok(mut c) = std::net::TcpStream::connect_timeout(&r.addr(), timeout) else {
            return (0, t0.elapsed());
        };
        c.set_read_timeout(Some(timeout)).unwrap();
        c.set_write_timeout(Some(timeout)).unwrap();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            r.token(),
            body.len()
        );
        if c.write_all(req.as_bytes()).is_err() {
            return (0, t0.elapsed());
        }
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        let status = String::from_utf8_lossy(&out)
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (status, t0.elapsed())
    }

    fn on_postgres(pg: &Cluster) -> Receiver {
        Receiver::start(ReceiverOptions {
            token: "sink-token".into(),
            wait_max_s: 3,
            db: Some(Database::Postgres(pg.url())),
            ..Default::default()
        })
        .expect("a receiver on PostgreSQL")
    }

    fn note_event(sid: &str) -> String {
        serde_json::json!({"events": [{"protocol": 1, "id": ulid::Ulid::new().to_string(),
            "type": "session.started", "time": "2027-01-15T08:00:00.000Z", "tier": 1,
            "harness": {"name": "codex"}, "session": {"id": sid, "seq": 1},
            "privacy": {"rulesets": ["secrets@1"], "pii": false}, "data": {}}]})
        .to_string()
    }

    /// The database is called outside the receiver's state lock: while another connection
    /// holds a session's ingest lock (a peer frozen mid-ingest), an event of that session
    /// waits, and meanwhile `/healthz`, a poll of another session and the test API answer
    /// at once.
    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn a_peer_frozen_mid_ingest_stalls_only_its_session() {
        let pg = Cluster::start();
        let r = on_postgres(&pg);
        let mut peer =
            r2d2_postgres::postgres::Client::connect(&pg.url(), r2d2_postgres::postgres::NoTls)
                .expect("the peer's connection");
        let mut tx = peer.transaction().unwrap();
        let (a, b) = crate::db::session_lock("codex:frozen");
        tx.execute("SELECT pg_advisory_xact_lock($1, $2)", &[&a, &b])
            .unwrap();
        std::thread::scope(|s| {
            let stuck = s.spawn(|| {
                let body = note_event("frozen");
                http(&r, "POST", EVENTS_PATH, &body, Duration::from_secs(60))
            });
            // The ingest is under way once PostgreSQL shows it waiting on the lock.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while pg
                .psql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
                != "1\n"
            {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the ingest never waited on the lock"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            let (status, took) = http(&r, "GET", "/healthz", "", Duration::from_secs(5));
            eprintln!("healthz while a peer holds the ingest lock: {status} in {took:?}");
            assert_eq!(status, 200);
            assert!(took < Duration::from_secs(1), "healthz took {took:?}");
            let (status, took) = http(
                &r,
                "POST",
                EVENTS_PATH,
                &note_event("other"),
                Duration::from_secs(5),
            );
            eprintln!("another session's event meanwhile: {status} in {took:?}");
            assert_eq!(status, 202);
            assert!(
                took < Duration::from_secs(1),
                "another session's event took {took:?}"
            );
            r.enqueue(
                "codex:other",
                serde_json::json!({"kind": "note", "text": "hi"}),
            );
            let (status, took) = http(
                &r,
                "GET",
                &format!("{CONTROL_PATH}?session=codex:other&wait=2"),
                "",
                Duration::from_secs(5),
            );
            eprintln!("a poll meanwhile: {status} in {took:?}");
            assert_eq!(status, 200);
            assert!(took < Duration::from_secs(1), "the poll took {took:?}");
            tx.commit().unwrap();
            let (status, _) = stuck.join().unwrap();
            assert_eq!(
                status, 202,
                "the frozen session's event is stored once the lock goes"
            );
        });
        assert_eq!(r.events().len(), 2);
    }

    /// With its database gone, a receiver still answers: `/healthz` says 503 within a
    /// second, and held polls end (with an error) instead of hanging the others.
    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn with_the_database_gone_healthz_and_polls_still_answer() {
        let pg = Cluster::start();
        let r = on_postgres(&pg);
        assert_eq!(
            http(&r, "GET", "/healthz", "", Duration::from_secs(5)).0,
            200
        );
        std::thread::scope(|s| {
            let polls: Vec<_> = (0..12)
                .map(|i| {
                    let r = &r;
                    s.spawn(move || {
                        let path = format!("{CONTROL_PATH}?session=codex:held{i}&wait=3");
                        http(r, "GET", &path, "", Duration::from_secs(60))
                    })
                })
                .collect();
            // Every poll is held before the database goes.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while r.polls() < 12 {
                assert!(std::time::Instant::now() < deadline, "the polls never came");
                std::thread::sleep(Duration::from_millis(20));
            }
            std::thread::sleep(Duration::from_millis(200));
            pg.stop();
            for _ in 0..3 {
                let (status, took) = http(&r, "GET", "/healthz", "", Duration::from_secs(30));
                eprintln!("healthz with the database gone: {status} in {took:?}");
                assert_eq!(status, 503);
                assert!(took < Duration::from_secs(1), "healthz took {took:?}");
            }
            for p in polls {
                let (status, took) = p.join().unwrap();
                eprintln!("a held poll with the database gone: {status} in {took:?}");
                assert_ne!(status, 0, "a held poll got no answer");
                assert!(took < Duration::from_secs(20), "a held poll took {took:?}");
            }
        });
    }

    /// Two receivers on one PostgreSQL give the page one version: a change through either
    /// moves both to the same number, so a page that a proxy sends to each in turn is held
    /// (its number current on both), never answered at once in a loop.
    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn receivers_on_one_database_agree_on_the_page_version() {
        let pg = Cluster::start();
        let on_pg = || {
            Receiver::start(ReceiverOptions {
                token: "sink-token".into(),
                db: Some(Database::Postgres(pg.url())),
                ..Default::default()
            })
            .expect("a receiver on PostgreSQL")
        };
        let (a, b) = (on_pg(), on_pg());
        let mut last = version(&a).max(version(&b));
        for (i, (from, to)) in [(&a, &b), (&b, &a), (&a, &b), (&a, &b)].iter().enumerate() {
            from.enqueue(
                "codex:s",
                serde_json::json!({"kind": "note", "text": i.to_string()}),
            );
            let v = version(from);
            assert!(v > last, "round {i}: the version moved ({last} -> {v})");
            assert!(
                reaches(to, v),
                "round {i}: the other receiver stayed at {}, not {v}",
                version(to)
            );
            last = v;
        }
        // Missed announcements (the listening connection cut): after it is back, each
        // receiver reads the shared version again.
        b.shared().lock().version = 1;
        pg.psql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE application_name = 'sp-receiver wake'",
        );
        assert!(
            reaches(&b, last),
            "b caught up after reconnecting: {}",
            version(&b)
        );
        assert_eq!(version(&a), last);
    }
}
