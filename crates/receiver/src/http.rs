//! Request handling: routing, auth, the four protocol routes, and (test builds only) the test
//! door and fault injection. `server.rs` owns the sockets; this file turns one read request
//! into an [`Outcome`]. How the faults look on the wire:
//!
//! * `Reset`: the connection is closed and nothing is written, so the client reads EOF where
//!   the status line should be.
//! * `Truncated`: a 200 head with `content-length` 64 bytes larger than the body written, then
//!   the connection is closed.
//! * `Hang`: nothing is written; the connection stays open until `set_down(true)`/`stop()`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[cfg(feature = "testing")]
use serde_json::Map;
use serde_json::{json, Value};

use super::page::{self, PageRoute};
use super::signed;
use super::state::{Refused, Shared, State};
use super::validate::{as_integer, check_ack_body, check_event};
#[cfg(feature = "testing")]
use super::{Fault, RequestRecord};
use super::{Route, ACK_PATH, CONTROL_PATH, EVENTS_PATH, OFF_PATH, PAIR_PATH, WELL_KNOWN_PATH};
use spwire::{is_ulid, split_session_key};

/// Largest body read on routes other than events (whose cap is `batch.max_bytes`).
const OTHER_BODY_CAP: usize = 1 << 20;

/// Largest `POST /login` body: a login token and where to go next, nothing more (anyone may
/// send one, so a stranger's body stays small).
const LOGIN_BODY_CAP: usize = 16 << 10;

/// What a request's head (route, token or cookie, declared length) allows, decided before a
/// byte of its body is read.
pub(crate) enum Admission {
    /// Read a body of at most this many bytes (one more is read to tell "too large").
    Body(usize),
    /// The route never reads a body: leave it unread.
    NoBody,
    /// Answer this without reading the body (401, 404, 413...).
    Refuse(Reply),
}

/// The head of a request, as [`admit`] judges it.
pub(crate) struct Head {
    pub method: String,
    pub path: String,
    pub query: String,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub peer: Option<SocketAddr>,
}

impl Head {
    /// The `content-length` declared, if any (a malformed one counts as too large).
    pub fn declared_len(&self) -> Option<u64> {
        self.headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .map(|(_, v)| v.trim().parse().unwrap_or(u64::MAX))
    }
}

/// Decides from the head alone whether to read the body, and how much of it. Checks that
/// need the database (a machine's token, a login cookie) run off the async workers.
pub(crate) async fn admit(shared: &Arc<Shared>, head: Head) -> (Head, Admission) {
    let target = classify(&head.method, &head.path, test_door(shared));
    let needs_db = matches!(
        target,
        Target::Route(Route::Ack) | Target::Off | Target::Page(_)
    ) && head.method == "POST";
    if !needs_db {
        let admission = admit_target(shared, &head, target);
        return (head, admission);
    }
    let shared2 = shared.clone();
    let joined = tokio::task::spawn_blocking(move || {
        let admission = admit_target(&shared2, &head, target);
        (head, admission)
    })
    .await;
    match joined {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("request admission failed: {e}");
            let head = Head {
                method: String::new(),
                path: String::new(),
                query: String::new(),
                headers: Vec::new(),
                peer: None,
            };
            (head, Admission::Refuse(Reply::error(500, "internal_error")))
        }
    }
}

fn admit_target(shared: &Shared, head: &Head, target: Target) -> Admission {
    let ex = Exchange {
        shared,
        headers: head.headers.clone(),
        body: Vec::new(),
        query: head.query.clone(),
        peer: head.peer,
    };
    let refused = match target {
        Target::Route(Route::Events) => events_head(&ex, head.declared_len()),
        Target::Route(Route::Ack) => ack_head(&ex).map(|_| OTHER_BODY_CAP),
        Target::PairStart => signed::sink_authorized(&ex).map(|()| OTHER_BODY_CAP),
        // `off` reads no body: only its token matters.
        Target::Off => {
            return match signed::off_head(&ex) {
                Ok(_) => Admission::NoBody,
                Err(r) => Admission::Refuse(r),
            }
        }
        #[cfg(feature = "testing")]
        Target::TestEnqueue => Ok(OTHER_BODY_CAP),
        Target::Page(route) => match page::admit(&ex, route) {
            Ok(None) => return Admission::NoBody,
            Ok(Some(login)) => Ok(if login {
                LOGIN_BODY_CAP
            } else {
                OTHER_BODY_CAP
            }),
            Err(r) => Err(r),
        },
        // Every other route reads nothing but its head and query.
        _ => return Admission::NoBody,
    };
    match refused {
        Err(r) => Admission::Refuse(r),
        Ok(cap) => match head.declared_len() {
            Some(n) if n > cap as u64 => {
                Admission::Refuse(Reply::error(413, &format!("body larger than {cap} bytes")))
            }
            _ => Admission::Body(cap),
        },
    }
}

/// `POST {events}`'s head: the sink token, the protocol version, the declared size.
fn events_head(ex: &Exchange<'_>, declared: Option<u64>) -> Result<usize, Reply> {
    let (token, max_bytes) = {
        let st = ex.shared.lock();
        (st.opts.token.clone(), st.opts.max_bytes)
    };
    if !ex.authorized(&token) {
        return Err(Reply::error(401, "unauthorized"));
    }
    if let Some(v) = ex.header("sessionpipe-protocol") {
        if v.trim() != "1" {
            return Err(Reply::json(
                400,
                json!({"reason": "unsupported_protocol", "supported": [1]}),
            ));
        }
    }
    if declared.is_some_and(|n| n > max_bytes as u64) {
        return Err(Reply::error(413, "batch larger than batch.max_bytes"));
    }
    Ok(max_bytes)
}

/// `POST {control}/ack`'s head: control offered, and the sink token or a machine's token.
/// `Ok(Some(machine))` for a machine's token.
fn ack_head(ex: &Exchange<'_>) -> Result<Option<String>, Reply> {
    let (token, control) = {
        let st = ex.shared.lock();
        (st.opts.token.clone(), st.has_control())
    };
    if !control {
        return Err(Reply::error(404, "not_found"));
    }
    // The sink token acks unsigned messages; a machine's token acks that machine's
    // envelopes only (a leaked sink token cannot ack a signed command away).
    if ex.authorized(&token) {
        return Ok(None);
    }
    match signed::bearer_machine(ex)? {
        Some(m) => Ok(Some(m)),
        None => Err(Reply::error(401, "unauthorized")),
    }
}

/// What a request is aimed at.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Target {
    Route(Route),
    #[cfg(feature = "testing")]
    TestEnqueue,
    #[cfg(feature = "testing")]
    TestEvents,
    #[cfg(feature = "testing")]
    TestAcks,
    /// Signed control: `POST {control}/pair`, `GET {control}/pair?code=`, `POST {control}/off`.
    PairStart,
    PairStatus,
    Off,
    Healthz,
    Page(PageRoute),
    /// A known path with the wrong method; carries the allowed method(s).
    WrongMethod(&'static str),
    NotFound,
}

#[cfg_attr(not(feature = "testing"), allow(unused_variables))]
fn classify(method: &str, path: &str, test_door: bool) -> Target {
    if let Some(p) = page::classify(method, path) {
        return match p {
            Ok(route) => Target::Page(route),
            Err(allow) => Target::WrongMethod(allow),
        };
    }
    match (path, method) {
        (PAIR_PATH, "POST") => return Target::PairStart,
        (PAIR_PATH, "GET") => return Target::PairStatus,
        (PAIR_PATH, _) => return Target::WrongMethod("GET, POST"),
        (OFF_PATH, "POST") => return Target::Off,
        (OFF_PATH, _) => return Target::WrongMethod("POST"),
        ("/healthz", "GET") => return Target::Healthz,
        ("/healthz", _) => return Target::WrongMethod("GET"),
        _ => {}
    }
    let (want, target) = match path {
        WELL_KNOWN_PATH => ("GET", Target::Route(Route::WellKnown)),
        EVENTS_PATH => ("POST", Target::Route(Route::Events)),
        CONTROL_PATH => ("GET", Target::Route(Route::Poll)),
        ACK_PATH => ("POST", Target::Route(Route::Ack)),
        #[cfg(feature = "testing")]
        "/test/enqueue" if test_door => ("POST", Target::TestEnqueue),
        #[cfg(feature = "testing")]
        "/test/events" if test_door => ("GET", Target::TestEvents),
        #[cfg(feature = "testing")]
        "/test/acks" if test_door => ("GET", Target::TestAcks),
        _ => return Target::NotFound,
    };
    if method == want {
        target
    } else {
        Target::WrongMethod(want)
    }
}

/// A response to write.
pub(crate) struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Option<Vec<u8>>,
    /// `content-type` of the body.
    pub content_type: &'static str,
}

impl Reply {
    pub fn json(status: u16, body: Value) -> Reply {
        Reply::typed(status, "application/json", body.to_string().into_bytes())
    }
    pub fn typed(status: u16, content_type: &'static str, body: Vec<u8>) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Some(body),
            content_type,
        }
    }
    pub fn error(status: u16, reason: &str) -> Reply {
        Reply::json(status, json!({ "reason": clip(reason, 200) }))
    }
    pub fn no_content() -> Reply {
        Reply {
            status: 204,
            headers: Vec::new(),
            body: None,
            content_type: "application/json",
        }
    }
    /// 500 for a database failure, which is logged to stderr (the reason stays generic).
    pub fn db_failed(e: &dyn std::fmt::Display) -> Reply {
        tracing::error!("database error: {e}");
        Reply::error(500, "internal_error")
    }
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Reply {
        self.headers.push((name, value.into()));
        self
    }
}

pub(crate) fn clip(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// The `reason` an injected `Fault::Status` carries.
#[cfg(feature = "testing")]
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

/// Decodes one `application/x-www-form-urlencoded` component.
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = b.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The first value of `key` in a query string; `Some(Err)` when it does not decode.
pub(crate) fn query_param(query: &str, key: &str) -> Option<Result<String, ()>> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(k).as_deref() == Some(key)).then(|| percent_decode(v).ok_or(()))
    })
}

/// One request in flight.
pub(crate) struct Exchange<'a> {
    pub shared: &'a Shared,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub query: String,
    /// The client's address as the socket says (not `X-Forwarded-For`).
    pub peer: Option<SocketAddr>,
}

impl Exchange<'_> {
    /// First value of a header (name lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The bearer token sent, if any.
    pub fn bearer(&self) -> Option<&str> {
        self.header("authorization")
            .and_then(|v| v.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim())
    }

    pub fn authorized(&self, token: &str) -> bool {
        self.bearer()
            .is_some_and(|t| page::same_secret(t.as_bytes(), token.as_bytes()))
    }
}

/// What a handler answers: a reply now, or a hold (a long poll) the server waits out
/// asynchronously, so held requests cost no thread.
pub(crate) enum Answer {
    Now(Reply),
    Hold(Hold),
}

/// A held request: `check` runs on every change of the state (and every `recheck`); it
/// answers `Some` when the reply is ready, and must answer `Some` when `last` (the deadline
/// has passed).
pub(crate) struct Hold {
    pub deadline: Instant,
    pub recheck: Option<Duration>,
    #[allow(clippy::type_complexity)]
    pub check: Box<dyn FnMut(&mut State, bool) -> Option<Reply> + Send>,
}

impl From<Reply> for Answer {
    fn from(r: Reply) -> Answer {
        Answer::Now(r)
    }
}

/// How a request ends on the wire.
pub(crate) enum Outcome {
    Reply(Reply),
    /// Close the connection without answering (also: the receiver went down meanwhile).
    Cut,
    /// `Fault::Truncated`: this head and partial body, then the connection is closed.
    #[cfg(feature = "testing")]
    Truncated(Reply, usize),
}

/// Handles one request. `generation` is the serving generation it was accepted under;
/// `url` is the path and query as sent, `body` what was read (at most the route's cap + 1
/// byte), `refused` the answer [`admit`] gave from the head, if it refused.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    generation: u64,
    head: Head,
    url: String,
    body: Vec<u8>,
    refused: Option<Reply>,
) -> Outcome {
    let Head {
        method,
        headers,
        peer,
        ..
    } = head;
    let (path, query) = url.split_once('?').unwrap_or((url.as_str(), ""));
    let target = classify(&method, path, test_door(&shared));
    let route = match target {
        Target::Route(r) => Some(r),
        _ => None,
    };
    #[cfg_attr(not(feature = "testing"), allow(unused_variables))]
    let (log_index, fault) = {
        let mut st = shared.lock();
        match route {
            Some(Route::Events) => st.event_posts += 1,
            Some(Route::Poll) => st.polls += 1,
            _ => {}
        }
        record(&mut st, route, &method, &url, query, &headers, &body)
    };
    let query = query.to_owned();

    #[cfg(feature = "testing")]
    match fault {
        Some(Fault::Delay(d)) => {
            tokio::time::sleep(d).await;
            if !same_generation(&shared, generation) {
                return Outcome::Cut;
            }
        }
        Some(Fault::Status(code)) => {
            let mut r = Reply::error(code, fault_reason(code));
            if matches!(code, 100..=199 | 204 | 304) {
                r.body = None;
            }
            set_status(&shared, log_index, Some(r.status));
            return Outcome::Reply(r);
        }
        Some(Fault::TooManyRequests { retry_after_s }) => {
            let mut r = Reply::error(429, "too_many_requests");
            r.headers.push(("retry-after", retry_after_s.to_string()));
            set_status(&shared, log_index, Some(429));
            return Outcome::Reply(r);
        }
        Some(Fault::InvalidJson) => {
            set_status(&shared, log_index, Some(200));
            return Outcome::Reply(Reply::typed(200, "application/json", b"{not json".to_vec()));
        }
        Some(Fault::Reset) => return Outcome::Cut,
        Some(Fault::Truncated) => {
            let partial = Reply::typed(
                200,
                "application/json",
                br#"{"messages":[{"id":"01K6"#.to_vec(),
            );
            let declared = partial.body.as_ref().map_or(0, Vec::len) + 64;
            set_status(&shared, log_index, Some(200));
            return Outcome::Truncated(partial, declared);
        }
        Some(Fault::Hang) => {
            // Held until the receiver goes down or stops, then cut.
            wait_generation_end(&shared, generation).await;
            return Outcome::Cut;
        }
        None => {}
    }

    // Refused from its head (its body left unread): counted and logged above, answered here.
    if let Some(r) = refused {
        return if same_generation(&shared, generation) {
            set_status(&shared, log_index, Some(r.status));
            Outcome::Reply(r)
        } else {
            Outcome::Cut
        };
    }

    let answer = {
        let shared = shared.clone();
        // Handlers touch SQLite (and a wrong login sleeps): off the async workers.
        tokio::task::spawn_blocking(move || {
            let ex = Exchange {
                shared: &shared,
                headers,
                body,
                query,
                peer,
            };
            dispatch(&ex, target)
        })
        .await
    };
    let reply = match answer {
        Ok(Answer::Now(r)) => Some(r),
        Ok(Answer::Hold(h)) => run_hold(&shared, generation, h).await,
        Err(e) => {
            tracing::error!("request handler failed: {e}");
            Some(Reply::error(500, "internal_error"))
        }
    };
    match reply {
        Some(r) if same_generation(&shared, generation) => {
            set_status(&shared, log_index, Some(r.status));
            Outcome::Reply(r)
        }
        // The receiver went down while this request was in flight: it goes unanswered.
        _ => Outcome::Cut,
    }
}

fn test_door(shared: &Shared) -> bool {
    cfg!(feature = "testing") && shared.lock().opts.test_door
}

fn same_generation(shared: &Shared, generation: u64) -> bool {
    let st = shared.lock();
    st.generation == generation && !st.stopped
}

/// Resolves once the receiver has gone down or stopped since `generation`.
#[cfg(feature = "testing")]
async fn wait_generation_end(shared: &Shared, generation: u64) {
    let mut rx = shared.watch.subscribe();
    loop {
        rx.borrow_and_update();
        if !same_generation(shared, generation) {
            return;
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// Waits out a hold: `None` when the receiver went down or stopped meanwhile.
async fn run_hold(shared: &Shared, generation: u64, mut hold: Hold) -> Option<Reply> {
    let mut rx = shared.watch.subscribe();
    loop {
        rx.borrow_and_update();
        let now = Instant::now();
        let last = now >= hold.deadline;
        {
            let mut st = shared.lock();
            if st.generation != generation || st.stopped {
                return None;
            }
            let version = st.version;
            if let Some(r) = (hold.check)(&mut st, last) {
                let changed = st.version != version;
                drop(st);
                if changed {
                    shared.notify();
                }
                return Some(r);
            }
        }
        if last {
            return Some(Reply::no_content());
        }
        let until = hold
            .recheck
            .map_or(hold.deadline, |r| hold.deadline.min(now + r));
        tokio::select! {
            _ = rx.changed() => {}
            _ = tokio::time::sleep_until(until.into()) => {}
        }
    }
}

/// Counts the request in the test log and takes its fault (test builds only).
#[cfg(feature = "testing")]
fn record(
    st: &mut State,
    route: Option<Route>,
    method: &str,
    url: &str,
    query: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> (Option<usize>, Option<Fault>) {
    if route == Some(Route::Poll) && st.opts.request_log {
        if let Some(Ok(s)) = query_param(query, "session") {
            st.poll_sessions.push(s);
        }
    }
    let fault = route.and_then(|r| st.take_fault(r));
    let log_index = st.opts.request_log.then(|| {
        st.requests.push(RequestRecord {
            method: method.to_owned(),
            url: url.to_owned(),
            route,
            headers: headers.to_vec(),
            body: body.to_vec(),
            status: None,
            fault: fault.clone(),
        });
        st.requests.len() - 1
    });
    (log_index, fault)
}

#[cfg(not(feature = "testing"))]
fn record(
    _st: &mut State,
    _route: Option<Route>,
    _method: &str,
    _url: &str,
    _query: &str,
    _headers: &[(String, String)],
    _body: &[u8],
) -> (Option<usize>, Option<()>) {
    (None, None)
}

fn set_status(shared: &Shared, log_index: Option<usize>, status: Option<u16>) {
    #[cfg(feature = "testing")]
    if let Some(i) = log_index {
        if let Some(r) = shared.lock().requests.get_mut(i) {
            r.status = status;
        }
    }
    #[cfg(not(feature = "testing"))]
    let _ = (shared, log_index, status);
}

fn dispatch(ex: &Exchange<'_>, target: Target) -> Answer {
    Answer::Now(match target {
        Target::Route(Route::WellKnown) => Reply::json(200, ex.shared.lock().well_known()),
        Target::Route(Route::Events) => events(ex),
        Target::Route(Route::Poll) => return poll(ex),
        Target::Route(Route::Ack) => ack(ex),
        #[cfg(feature = "testing")]
        Target::TestEnqueue => test_enqueue(ex),
        Target::PairStart => signed::pair_start(ex),
        Target::PairStatus => signed::pair_status(ex),
        Target::Off => signed::off(ex),
        Target::Healthz => match ex.shared.lock().db.ping() {
            Ok(()) => Reply::json(200, json!({"status": "ok"})),
            Err(e) => {
                tracing::error!("healthz: the database does not answer: {e}");
                Reply::error(503, "database_unavailable")
            }
        },
        #[cfg(feature = "testing")]
        Target::TestEvents => match ex.shared.lock().db.events() {
            Ok(v) => Reply::json(200, Value::Array(v)),
            Err(e) => Reply::db_failed(&e),
        },
        #[cfg(feature = "testing")]
        Target::TestAcks => match ex.shared.lock().db.acks() {
            Ok(v) => Reply::json(200, Value::Array(v)),
            Err(e) => Reply::db_failed(&e),
        },
        Target::Page(route) => return page::handle(ex, route),
        Target::WrongMethod(allow) => {
            let mut r = Reply::error(405, "method_not_allowed");
            r.headers.push(("allow", allow.to_owned()));
            r
        }
        Target::NotFound => Reply::error(404, "not_found"),
    })
}

pub(crate) fn parse_json(body: &[u8]) -> Result<Value, Reply> {
    serde_json::from_slice(body).map_err(|e| Reply::error(400, &format!("malformed body: {e}")))
}

/// `POST {events}`.
fn events(ex: &Exchange<'_>) -> Reply {
    let max_bytes = match events_head(ex, None) {
        Ok(cap) => cap,
        Err(r) => return r,
    };
    let (max_events, max_tier) = {
        let st = ex.shared.lock();
        (st.opts.max_events, st.opts.max_tier)
    };
    if ex.body.len() > max_bytes {
        return Reply::error(413, "batch larger than batch.max_bytes");
    }
    let body = match parse_json(&ex.body) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Some(list) = body.get("events").and_then(Value::as_array) else {
        return Reply::error(400, "malformed body: events must be an array");
    };
    if list.is_empty() {
        return Reply::error(400, "empty batch");
    }
    if list.len() > max_events {
        return Reply::error(400, "more events than batch.max_events");
    }
    for (i, ev) in list.iter().enumerate() {
        if !ev.get("id").and_then(Value::as_str).is_some_and(is_ulid) {
            return Reply::error(400, &format!("malformed body: events[{i}].id not a ULID"));
        }
    }
    if list.iter().any(|ev| {
        ev.get("tier")
            .and_then(as_integer)
            .is_some_and(|t| t > i64::from(max_tier))
    }) {
        return Reply::json(
            403,
            json!({"reason": "tier_above_max", "max_tier": max_tier}),
        );
    }

    let mut st = ex.shared.lock();
    let mut rejected = Vec::new();
    let mut valid = Vec::with_capacity(list.len());
    for ev in list {
        let id = ev["id"].as_str().unwrap_or_default();
        if let Err(reason) = check_event(ev) {
            let entry = json!({"id": id, "reason": clip(&reason, 200)});
            st.push_rejected(json!({"id": id, "reason": clip(&reason, 200), "event": ev}));
            rejected.push(entry);
            continue;
        }
        valid.push(ev);
    }
    let now = st.now_ms();
    let fresh = match st.db.insert_events(&valid, now) {
        Ok(f) => f,
        Err(e) => return Reply::db_failed(&e),
    };
    let accepted = fresh.iter().filter(|f| **f).count() as u64;
    let duplicates = fresh.len() as u64 - accepted;
    if accepted > 0 {
        st.bump();
    }
    // Tell the person (push.rs) of each new prompt and of its end; a duplicate never.
    for (ev, _) in valid.iter().zip(&fresh).filter(|(_, f)| **f) {
        if let Some(n) = crate::push::Notice::from_event(ev) {
            st.notify(n);
        }
    }
    drop(st);
    ex.shared.notify();
    Reply::json(
        202,
        json!({"accepted": accepted, "duplicates": duplicates, "rejected": rejected, "max_tier": max_tier}),
    )
}

/// `GET {control}?session=<harness>:<id>&wait=<s>`: the long poll.
fn poll(ex: &Exchange<'_>) -> Answer {
    let (token, wait_max_s, control) = {
        let st = ex.shared.lock();
        (st.opts.token.clone(), st.opts.wait_max_s, st.has_control())
    };
    if !control {
        return Answer::Now(Reply::error(404, "not_found"));
    }
    // Signed control: the one poll per machine, with that machine's token.
    if let Some(machine) = query_param(&ex.query, "machine") {
        let Ok(machine) = machine else {
            return Answer::Now(Reply::error(400, "malformed machine"));
        };
        let wait = match query_param(&ex.query, "wait") {
            None => wait_max_s as f64,
            Some(Ok(w)) => match w.trim().parse::<f64>() {
                Ok(w) if w.is_finite() => w.clamp(0.0, wait_max_s as f64),
                _ => return Answer::Now(Reply::error(400, "malformed wait")),
            },
            Some(Err(())) => return Answer::Now(Reply::error(400, "malformed wait")),
        };
        return signed::machine_poll(ex, &machine, wait);
    }
    if !ex.authorized(&token) {
        return Answer::Now(Reply::error(401, "unauthorized"));
    }
    let session = match query_param(&ex.query, "session") {
        None => return Answer::Now(Reply::error(400, "missing session")),
        Some(Err(())) => return Answer::Now(Reply::error(400, "malformed session")),
        Some(Ok(s)) => s,
    };
    if split_session_key(&session).is_none() {
        return Answer::Now(Reply::error(400, "malformed session: want <harness>:<id>"));
    }
    let wait = match query_param(&ex.query, "wait") {
        None => wait_max_s as f64,
        Some(Ok(w)) => match w.trim().parse::<f64>() {
            Ok(w) if w.is_finite() => w.clamp(0.0, wait_max_s as f64),
            _ => return Answer::Now(Reply::error(400, "malformed wait")),
        },
        Some(Err(())) => return Answer::Now(Reply::error(400, "malformed wait")),
    };
    let deadline = Instant::now() + Duration::from_secs_f64(wait);
    let who = session.clone();
    hold_poll(deadline, None, who, move |st| st.pending_rows(&session))
}

/// Holds a long poll until `pending` finds messages (served, and marked polled for the
/// page) or `deadline` passes (204). The hold wakes on every change of the state, and at
/// least every `recheck` when rows may come from another process.
pub(super) fn hold_poll(
    deadline: Instant,
    recheck: Option<Duration>,
    who: String,
    mut pending: impl FnMut(&State) -> rusqlite::Result<Vec<(i64, Value)>> + Send + 'static,
) -> Answer {
    // DECISIONS 27: every poll answer carries the person's Away switch, and a poller that
    // was told another word is answered at once (so is every poll held when the switch
    // changes), so a machine hears a change within a poll's round trip.
    Answer::Hold(Hold {
        deadline,
        recheck,
        check: Box::new(move |st, last| {
            let away = st.db.away().unwrap_or(false);
            // Told another word before (a poller that never polled hears it at its answer).
            let stale = st.away_told.get(&who).is_some_and(|t| *t != away);
            let rows = match pending(st) {
                Ok(r) => r,
                Err(e) => return Some(Reply::db_failed(&e)),
            };
            if rows.is_empty() {
                if !last && !stale {
                    return None;
                }
                return Some(tell_away(st, &who, away, Reply::no_content()));
            }
            let ns: Vec<i64> = rows.iter().map(|(n, _)| *n).collect();
            let now = st.now_ms();
            // Only the page looks at this; a failure here must not cost the sender its poll.
            if st.db.mark_polled(&ns, now).unwrap_or(0) > 0 {
                st.bump();
            }
            let messages: Vec<Value> = rows.into_iter().map(|(_, v)| v).collect();
            let reply = Reply::json(200, json!({ "messages": messages }));
            Some(tell_away(st, &who, away, reply))
        }),
    })
}

/// Adds the Away word to a poll answer and remembers that `who` heard it.
fn tell_away(st: &mut State, who: &str, away: bool, reply: Reply) -> Reply {
    if st.away_told.len() >= AWAY_TOLD_MAX && !st.away_told.contains_key(who) {
        st.away_told.clear();
    }
    st.away_told.insert(who.to_owned(), away);
    reply.header("sessionpipe-away", if away { "1" } else { "0" })
}

/// Pollers whose last Away word is remembered; past this the memory starts over (a poller
/// then hears the word once more).
const AWAY_TOLD_MAX: usize = 10_000;

/// `POST {control}/ack`.
fn ack(ex: &Exchange<'_>) -> Reply {
    let machine = match ack_head(ex) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let body = match parse_json(&ex.body) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let acks = match check_ack_body(&body) {
        Ok(a) => a,
        Err(reason) => return Reply::error(400, &reason),
    };
    let mut st = ex.shared.lock();
    let mut acks = acks;
    let mut owners = Vec::with_capacity(acks.len());
    for a in &acks {
        match st.db.message_machine(a["id"].as_str().unwrap_or_default()) {
            Ok(o) => owners.push(o),
            Err(e) => return Reply::db_failed(&e),
        }
    }
    let mut owners = owners.into_iter();
    acks.retain(|_| match owners.next().flatten() {
        // Unknown ids and unsigned messages: the sink token's, as before.
        None | Some(None) => machine.is_none(),
        Some(Some(m)) => machine.as_deref() == Some(m.as_str()),
    });
    let now = st.now_ms();
    if let Err(e) = st.db.insert_acks(&acks, now) {
        return Reply::db_failed(&e);
    }
    // A message the person sent that failed or was refused: they hear of it (push.rs).
    for a in &acks {
        let id = a["id"].as_str().unwrap_or_default();
        if let Ok(Some(session)) = st.db.message_session(id) {
            if let Some(n) = crate::push::Notice::from_ack(&session, a) {
                st.notify(n);
            }
        }
    }
    st.bump();
    drop(st);
    ex.shared.notify();
    Reply::json(202, json!({}))
}

#[cfg(feature = "testing")]
/// `POST /test/enqueue` `{"session": "<harness>:<id>", "message": {partial}}`.
fn test_enqueue(ex: &Exchange<'_>) -> Reply {
    let body = match parse_json(&ex.body) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Some(session) = body.get("session").and_then(Value::as_str) else {
        return Reply::error(400, "missing session");
    };
    if split_session_key(session).is_none() {
        return Reply::error(400, "malformed session: want <harness>:<id>");
    }
    let empty = Map::new();
    let partial = match body.get("message") {
        None => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => return Reply::error(400, "message must be an object"),
    };
    let result = ex.shared.lock().enqueue(session, partial, 60_000);
    enqueued(ex, result)
}

/// The answer to an enqueue (the test door's or the page's); waiters are woken first.
pub(crate) fn enqueued(ex: &Exchange<'_>, result: Result<Value, Refused>) -> Reply {
    match result {
        Ok(msg) => {
            ex.shared.notify();
            Reply::json(200, msg)
        }
        Err(Refused::Bad(reason)) => Reply::error(400, &reason),
        Err(Refused::Db(e)) => Reply::db_failed(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parsing() {
        let q = "session=codex%3Aab%3Acd&wait=3&x";
        assert_eq!(query_param(q, "session"), Some(Ok("codex:ab:cd".into())));
        assert_eq!(query_param(q, "wait"), Some(Ok("3".into())));
        assert_eq!(query_param(q, "x"), Some(Ok(String::new())));
        assert_eq!(query_param(q, "y"), None);
        assert_eq!(query_param("session=%zz", "session"), Some(Err(())));
    }
}
