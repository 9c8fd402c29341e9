//! Request handling: routing, auth, the four protocol routes, the test door, and fault
//! injection.
//!
//! Responses are written as raw HTTP/1.1 bytes through `Request::into_writer()` rather than
//! `Request::respond()`: the status line, headers and body go out in one write, so a held long
//! poll reaches the client in one segment (no Nagle/delayed-ACK stall between headers and body,
//! and tiny_http sets no TCP_NODELAY), and the faults can put exactly the bytes they need on the
//! wire. Taking the writer also disarms tiny_http's `Drop for Request`, which would otherwise
//! answer 500 to any request that is dropped unanswered. How the faults look on the wire:
//!
//! * `Reset`: the server side of that connection is `shutdown(2)` (see `net.rs`) and nothing is
//!   written, so the client reads EOF where the status line should be.
//! * `Truncated`: a 200 head with `content-length` 64 bytes larger than the body written, then
//!   the server's write side is shut down (FIN after the partial body).
//! * `Hang`: the writer is parked in `State::hung` and never written; the connection stays open
//!   until `set_down(true)`/`stop()` cut it.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tiny_http::{Method, Request};

use super::net;
use super::page::{self, PageRoute};
use super::signed;
use super::state::{Refused, Shared};
use super::validate::{as_integer, check_ack_body, check_event, is_ulid, parse_session_key};
use super::{
    Fault, RequestRecord, Route, ACK_PATH, CONTROL_PATH, EVENTS_PATH, OFF_PATH, PAIR_PATH,
    WELL_KNOWN_PATH,
};

/// Largest body read on routes other than events (whose cap is `batch.max_bytes`).
const OTHER_BODY_CAP: usize = 4 << 20;

/// What a request is aimed at.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Target {
    Route(Route),
    TestEnqueue,
    TestEvents,
    TestAcks,
    /// Signed control: `POST {control}/pair`, `GET {control}/pair?code=`, `POST {control}/off`.
    PairStart,
    PairStatus,
    Off,
    Page(PageRoute),
    /// A known path with the wrong method; carries the allowed method(s).
    WrongMethod(&'static str),
    NotFound,
}

fn classify(method: &Method, path: &str, test_door: bool) -> Target {
    if let Some(p) = page::classify(method.as_str(), path) {
        return match p {
            Ok(route) => Target::Page(route),
            Err(allow) => Target::WrongMethod(allow),
        };
    }
    match (path, method.as_str()) {
        (PAIR_PATH, "POST") => return Target::PairStart,
        (PAIR_PATH, "GET") => return Target::PairStatus,
        (PAIR_PATH, _) => return Target::WrongMethod("GET, POST"),
        (OFF_PATH, "POST") => return Target::Off,
        (OFF_PATH, _) => return Target::WrongMethod("POST"),
        _ => {}
    }
    let (want, target) = match path {
        WELL_KNOWN_PATH => ("GET", Target::Route(Route::WellKnown)),
        EVENTS_PATH => ("POST", Target::Route(Route::Events)),
        CONTROL_PATH => ("GET", Target::Route(Route::Poll)),
        ACK_PATH => ("POST", Target::Route(Route::Ack)),
        "/test/enqueue" if test_door => ("POST", Target::TestEnqueue),
        "/test/events" if test_door => ("GET", Target::TestEvents),
        "/test/acks" if test_door => ("GET", Target::TestAcks),
        _ => return Target::NotFound,
    };
    if method.as_str() == want {
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
        eprintln!("sp-receiver: database error: {e}");
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

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        202 => "Accepted",
        204 => "No Content",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
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

/// Serialises a whole response (head and body) so it can go out in one write.
fn encode(reply: &Reply, close: bool, declared_len: Option<usize>) -> Vec<u8> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\n",
        reply.status,
        reason_phrase(reply.status)
    );
    let no_body = matches!(reply.status, 100..=199 | 204 | 304);
    if !no_body {
        let body_len = reply.body.as_ref().map_or(0, Vec::len);
        if reply.body.is_some() {
            head.push_str(&format!("content-type: {}\r\n", reply.content_type));
        }
        head.push_str(&format!(
            "content-length: {}\r\n",
            declared_len.unwrap_or(body_len)
        ));
    }
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("cache-control: no-store\r\n");
    if close {
        head.push_str("connection: close\r\n");
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    if !no_body {
        if let Some(b) = &reply.body {
            out.extend_from_slice(b);
        }
    }
    out
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
    pub generation: u64,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub query: String,
    peer: Option<SocketAddr>,
    /// Index in the request log (test door only).
    log_index: Option<usize>,
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

    fn set_status(&self, status: Option<u16>) {
        let Some(i) = self.log_index else { return };
        if let Some(r) = self.shared.lock().requests.get_mut(i) {
            r.status = status;
        }
    }

    /// Cuts this request's connection at the socket (see `net.rs`).
    fn cut(&self, how: Shutdown) {
        if let Some(peer) = self.peer {
            net::shutdown_connections(self.shared.addr, Some(peer), how);
        }
    }
}

/// Handles one request on its own thread. `generation` is the serving generation the
/// request was accepted under.
pub(crate) fn handle(shared: &Shared, mut rq: Request, generation: u64) {
    let url = rq.url().to_owned();
    let (path, query) = url.split_once('?').unwrap_or((url.as_str(), ""));
    let test_door = shared.lock().opts.test_door;
    let target = classify(rq.method(), path, test_door);
    let headers: Vec<(String, String)> = rq
        .headers()
        .iter()
        .map(|h| {
            (
                h.field.as_str().as_str().to_ascii_lowercase(),
                h.value.as_str().to_owned(),
            )
        })
        .collect();
    let close = headers
        .iter()
        .any(|(k, v)| k == "connection" && v.to_ascii_lowercase().contains("close"));
    let peer = rq.remote_addr().copied();
    let method = rq.method().as_str().to_owned();

    // Read the whole body first (at most the route's cap + 1 byte, to detect "too large"):
    // a connection is never cut with unread request bytes pending, which would turn the
    // FIN into an RST and could discard a partial response the client has not read yet.
    let cap = match target {
        Target::Route(Route::Events) => shared.lock().opts.max_bytes,
        _ => OTHER_BODY_CAP,
    };
    let mut body = Vec::new();
    if rq
        .as_reader()
        .take(cap as u64 + 1)
        .read_to_end(&mut body)
        .is_err()
    {
        // The client went away mid-body; nothing to answer.
        drop(rq.into_writer());
        return;
    }
    // Drops the body reader too (tiny_http discards any unread rest of the body).
    let mut writer = rq.into_writer();

    let route = match target {
        Target::Route(r) => Some(r),
        _ => None,
    };
    let (log_index, fault) = {
        let mut st = shared.lock();
        match route {
            Some(Route::Events) => st.event_posts += 1,
            Some(Route::Poll) => {
                st.polls += 1;
                if st.opts.test_door {
                    if let Some(Ok(s)) = query_param(query, "session") {
                        st.poll_sessions.push(s);
                    }
                }
            }
            _ => {}
        }
        let fault = route.and_then(|r| st.take_fault(r));
        let log_index = st.opts.test_door.then(|| {
            st.requests.push(RequestRecord {
                method,
                url: url.clone(),
                route,
                headers: headers.clone(),
                body: body.clone(),
                status: None,
                fault: fault.clone(),
            });
            st.requests.len() - 1
        });
        (log_index, fault)
    };
    let ex = Exchange {
        shared,
        generation,
        headers,
        body,
        query: query.to_owned(),
        peer,
        log_index,
    };

    let reply = match fault {
        Some(Fault::Delay(d)) => {
            std::thread::sleep(d);
            None
        }
        Some(Fault::Status(code)) => {
            let mut r = Reply::error(code, fault_reason(code));
            if matches!(code, 100..=199 | 204 | 304) {
                r.body = None;
            }
            Some(r)
        }
        Some(Fault::TooManyRequests { retry_after_s }) => {
            let mut r = Reply::error(429, "too_many_requests");
            r.headers.push(("retry-after", retry_after_s.to_string()));
            Some(r)
        }
        Some(Fault::InvalidJson) => {
            Some(Reply::typed(200, "application/json", b"{not json".to_vec()))
        }
        Some(Fault::Reset) => {
            ex.cut(Shutdown::Both);
            drop(writer);
            return;
        }
        Some(Fault::Truncated) => {
            let partial = Reply::typed(
                200,
                "application/json",
                br#"{"messages":[{"id":"01K6"#.to_vec(),
            );
            let declared = partial.body.as_ref().map_or(0, Vec::len) + 64;
            let bytes = encode(&partial, true, Some(declared));
            let _ = writer.write_all(&bytes).and_then(|_| writer.flush());
            ex.set_status(Some(200));
            ex.cut(Shutdown::Write);
            drop(writer);
            return;
        }
        Some(Fault::Hang) => {
            let mut st = shared.lock();
            if st.generation == generation && !st.stopped {
                st.hung.push(writer);
            }
            // else: the connection has been cut already; let the writer go.
            return;
        }
        None => None,
    };

    let reply = match reply {
        Some(r) => Some(r),
        None => dispatch(&ex, target),
    };
    match reply {
        Some(reply) => {
            ex.set_status(Some(reply.status));
            let bytes = encode(&reply, close, None);
            // Write errors mean the client left; there is nobody to tell.
            let _ = writer.write_all(&bytes).and_then(|_| writer.flush());
        }
        // The receiver went down while this request was held: its connection was cut, and
        // it goes away unanswered.
        None => drop(writer),
    }
}

fn dispatch(ex: &Exchange<'_>, target: Target) -> Option<Reply> {
    Some(match target {
        Target::Route(Route::WellKnown) => Reply::json(200, ex.shared.lock().well_known()),
        Target::Route(Route::Events) => events(ex),
        Target::Route(Route::Poll) => return poll(ex),
        Target::Route(Route::Ack) => ack(ex),
        Target::TestEnqueue => test_enqueue(ex),
        Target::PairStart => signed::pair_start(ex),
        Target::PairStatus => signed::pair_status(ex),
        Target::Off => signed::off(ex),
        Target::TestEvents => match ex.shared.lock().db.events() {
            Ok(v) => Reply::json(200, Value::Array(v)),
            Err(e) => Reply::db_failed(&e),
        },
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
    let (token, max_bytes, max_events, max_tier) = {
        let st = ex.shared.lock();
        (
            st.opts.token.clone(),
            st.opts.max_bytes,
            st.opts.max_events,
            st.opts.max_tier,
        )
    };
    if !ex.authorized(&token) {
        return Reply::error(401, "unauthorized");
    }
    if let Some(v) = ex.header("sessionpipe-protocol") {
        if v.trim() != "1" {
            return Reply::json(
                400,
                json!({"reason": "unsupported_protocol", "supported": [1]}),
            );
        }
    }
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
    ex.shared.changed.notify_all();
    Reply::json(
        202,
        json!({"accepted": accepted, "duplicates": duplicates, "rejected": rejected, "max_tier": max_tier}),
    )
}

/// `GET {control}?session=<harness>:<id>&wait=<s>`: the long poll.
fn poll(ex: &Exchange<'_>) -> Option<Reply> {
    let (token, wait_max_s, control) = {
        let st = ex.shared.lock();
        (st.opts.token.clone(), st.opts.wait_max_s, st.has_control())
    };
    if !control {
        return Some(Reply::error(404, "not_found"));
    }
    // Signed control: the one poll per machine, with that machine's token.
    if let Some(machine) = query_param(&ex.query, "machine") {
        let Ok(machine) = machine else {
            return Some(Reply::error(400, "malformed machine"));
        };
        let wait = match query_param(&ex.query, "wait") {
            None => wait_max_s as f64,
            Some(Ok(w)) => match w.trim().parse::<f64>() {
                Ok(w) if w.is_finite() => w.clamp(0.0, wait_max_s as f64),
                _ => return Some(Reply::error(400, "malformed wait")),
            },
            Some(Err(())) => return Some(Reply::error(400, "malformed wait")),
        };
        return signed::machine_poll(ex, &machine, wait);
    }
    if !ex.authorized(&token) {
        return Some(Reply::error(401, "unauthorized"));
    }
    let session = match query_param(&ex.query, "session") {
        None => return Some(Reply::error(400, "missing session")),
        Some(Err(())) => return Some(Reply::error(400, "malformed session")),
        Some(Ok(s)) => s,
    };
    if parse_session_key(&session).is_none() {
        return Some(Reply::error(400, "malformed session: want <harness>:<id>"));
    }
    let wait = match query_param(&ex.query, "wait") {
        None => wait_max_s as f64,
        Some(Ok(w)) => match w.trim().parse::<f64>() {
            Ok(w) if w.is_finite() => w.clamp(0.0, wait_max_s as f64),
            _ => return Some(Reply::error(400, "malformed wait")),
        },
        Some(Err(())) => return Some(Reply::error(400, "malformed wait")),
    };
    let deadline = Instant::now() + Duration::from_secs_f64(wait);
    hold_poll(ex, deadline, None, |st| st.pending_rows(&session))
}

/// Holds a long poll until `pending` finds messages (served, and marked polled for the
/// page) or `deadline` passes (204). The hold wakes on every change of the state, and at
/// least every `recheck` when rows may come from another process. `None` when the server
/// stopped or restarted meanwhile.
pub(super) fn hold_poll(
    ex: &Exchange<'_>,
    deadline: Instant,
    recheck: Option<Duration>,
    mut pending: impl FnMut(&super::state::State) -> rusqlite::Result<Vec<(i64, Value)>>,
) -> Option<Reply> {
    let mut st = ex.shared.lock();
    // DECISIONS 27: every poll answer carries the person's Away switch; a change answers
    // the polls held now, so a machine hears it at once.
    let away_then = st.db.away().unwrap_or(false);
    let with_away =
        |r: Reply, away: bool| r.header("sessionpipe-away", if away { "1" } else { "0" });
    loop {
        if st.generation != ex.generation || st.stopped {
            return None;
        }
        let away = st.db.away().unwrap_or(false);
        if away != away_then {
            return Some(with_away(Reply::no_content(), away));
        }
        let rows = match pending(&st) {
            Ok(r) => r,
            Err(e) => return Some(Reply::db_failed(&e)),
        };
        if !rows.is_empty() {
            let ns: Vec<i64> = rows.iter().map(|(n, _)| *n).collect();
            let now = st.now_ms();
            // Only the page looks at this; a failure here must not cost the sender its poll.
            if st.db.mark_polled(&ns, now).unwrap_or(0) > 0 {
                st.bump();
                ex.shared.changed.notify_all();
            }
            let messages: Vec<Value> = rows.into_iter().map(|(_, v)| v).collect();
            return Some(with_away(
                Reply::json(200, json!({ "messages": messages })),
                away,
            ));
        }
        let now = Instant::now();
        if now >= deadline {
            return Some(with_away(Reply::no_content(), away));
        }
        let left = deadline - now;
        st = ex
            .shared
            .changed
            .wait_timeout(st, recheck.map_or(left, |r| left.min(r)))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// `POST {control}/ack`.
fn ack(ex: &Exchange<'_>) -> Reply {
    let (token, control) = {
        let st = ex.shared.lock();
        (st.opts.token.clone(), st.has_control())
    };
    if !control {
        return Reply::error(404, "not_found");
    }
    // The sink token acks unsigned messages; a machine's token acks that machine's
    // envelopes only (a leaked sink token cannot ack a signed command away).
    let machine = if ex.authorized(&token) {
        None
    } else {
        match signed::bearer_machine(ex) {
            Err(r) => return r,
            Ok(Some(m)) => Some(m),
            Ok(None) => return Reply::error(401, "unauthorized"),
        }
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
    ex.shared.changed.notify_all();
    Reply::json(202, json!({}))
}

/// `POST /test/enqueue` `{"session": "<harness>:<id>", "message": {partial}}`.
fn test_enqueue(ex: &Exchange<'_>) -> Reply {
    let body = match parse_json(&ex.body) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Some(session) = body.get("session").and_then(Value::as_str) else {
        return Reply::error(400, "missing session");
    };
    if parse_session_key(session).is_none() {
        return Reply::error(400, "malformed session: want <harness>:<id>");
    }
    let empty = Map::new();
    let partial = match body.get("message") {
        None => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => return Reply::error(400, "message must be an object"),
    };
    let result = ex.shared.lock().enqueue(session, partial, 60_000);
    match result {
        Ok(msg) => {
            ex.shared.changed.notify_all();
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

    #[test]
    fn encoding() {
        let r = Reply::json(202, json!({}));
        let s = String::from_utf8(encode(&r, false, None)).unwrap();
        assert!(s.starts_with("HTTP/1.1 202 Accepted\r\n"));
        assert!(s.contains("content-length: 2\r\n"));
        assert!(s.ends_with("\r\n\r\n{}"));
        let s = String::from_utf8(encode(&Reply::no_content(), true, None)).unwrap();
        assert!(!s.contains("content-length"));
        assert!(s.contains("connection: close\r\n"));
    }
}
