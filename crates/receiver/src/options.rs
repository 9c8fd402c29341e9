//! What a receiver is set up with ([`ReceiverOptions`], fixed for its life and shared behind
//! an `Arc`), the protocol's paths, and the test-only vocabulary of fault injection and the
//! request log. The bottom layer: it imports no other module of the crate.

use std::path::PathBuf;

use serde_json::{Map, Value};
#[cfg(feature = "testing")]
use std::time::Duration;

/// Discovery path.
pub const WELL_KNOWN_PATH: &str = "/.well-known/sessionpipe";
/// `endpoints.events` as advertised.
pub const EVENTS_PATH: &str = "/api/sessionpipe/v1/events";
/// `endpoints.control` as advertised (the long poll).
pub const CONTROL_PATH: &str = "/api/sessionpipe/v1/control";
/// `{control}/ack`.
pub const ACK_PATH: &str = "/api/sessionpipe/v1/control/ack";
/// `{control}/pair` (signed control: pairing).
pub const PAIR_PATH: &str = "/api/sessionpipe/v1/control/pair";
/// `{control}/off` (signed control: a machine leaves).
pub const OFF_PATH: &str = "/api/sessionpipe/v1/control/off";
/// `{control}/hello` (signed control: what a machine can start, DECISIONS 39).
pub const HELLO_PATH: &str = "/api/sessionpipe/v1/control/hello";
/// `sp away on|off` sets the page's Away switch here (our receiver's own route).
pub const AWAY_PATH: &str = "/api/sessionpipe/v1/control/away";

/// Where a receiver keeps what it remembers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    /// A SQLite file (WAL, 0600), this receiver's alone.
    File(PathBuf),
    /// A PostgreSQL database (`postgres://…`), which other receivers may share (issue 29).
    Postgres(String),
}

impl std::fmt::Display for Database {
    /// The path, or the URL with any password hidden (it goes to logs and the terminal).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Database::File(p) => write!(f, "{}", p.display()),
            Database::Postgres(url) => f.write_str(&hide_password(url)),
        }
    }
}

/// `url` with the password of its user part and of a `password=` parameter replaced by `***`.
fn hide_password(url: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (url, None),
    };
    let mut out = match head.split_once("://") {
        Some((scheme, rest)) => {
            let (auth, host) = match rest.rsplit_once('@') {
                Some((a, h)) => (Some(a), h),
                None => (None, rest),
            };
            match auth {
                Some(a) => match a.split_once(':') {
                    Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
                    None => format!("{scheme}://{a}@{host}"),
                },
                None => format!("{scheme}://{host}"),
            }
        }
        None => head.to_owned(),
    };
    if let Some(q) = query {
        let params: Vec<String> = q
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => p.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

/// How a [`Receiver`](crate::Receiver) is set up.
#[derive(Debug, Clone)]
pub struct ReceiverOptions {
    /// Bearer token the sender must present on events, control and ack.
    pub token: String,
    /// Advertised `control.wait_max_s`; also the cap on a poll's `wait`.
    pub wait_max_s: u64,
    /// Advertised capabilities. Without `"control"` the control routes answer 404 and the
    /// well-known has no `endpoints.control` or `control` object.
    pub capabilities: Vec<String>,
    /// Advertised `max_tier`; events above it get 403 `tier_above_max`.
    pub max_tier: u8,
    /// `batch.max_events`.
    pub max_events: usize,
    /// `batch.max_bytes`.
    pub max_bytes: usize,
    /// Receiver clock skew in ms: applied to the `at`/`expires_at` it mints and to its own
    /// expiry checks.
    pub clock_offset_ms: i64,
    /// The page's login token (separate from `token`). `None`: the page and its actions
    /// answer 401 to everyone.
    pub login_token: Option<String>,
    /// How long a `permission.answer` (and a `cancel`) queued from the page stays valid (s).
    pub permission_expiry_s: u64,
    /// How long a `prompt` queued from the page stays valid (s).
    pub prompt_expiry_s: u64,
    /// The test door (`/test/*`). Off by default; only built with the `testing` feature.
    pub test_door: bool,
    /// The in-memory request log ([`Receiver::requests`](crate::Receiver::requests), [`Receiver::poll_sessions`](crate::Receiver::poll_sessions)); only
    /// built with the `testing` feature. `sp-receiver` turns it off.
    pub request_log: bool,
    /// The most connections open at once (further ones are closed at once); never more than
    /// the open-file limit allows.
    pub max_connections: usize,
    /// The database; `None` keeps everything in a private in-memory SQLite database.
    pub db: Option<Database>,
    /// Signed control (DECISIONS 22): the WebAuthn rp id declared as
    /// `control.signing.rp_id`. `None`: no `control.signing` in the well-known, and the
    /// pairing and machine routes answer 404 (the unsigned mode alone, as before).
    pub rp_id: Option<String>,
    /// Where people open the page (`https://host` behind a proxy); pairing links start with
    /// it. `None`: `http://localhost:PORT` (WebAuthn rp ids cannot be IP addresses). The page
    /// answers only requests whose `Host` is this URL's, or localhost / an IP address (no DNS
    /// rebinding).
    pub public_url: Option<String>,
    /// Trust `X-Forwarded-Proto`, `X-Forwarded-Host` and `X-Forwarded-For` (a TLS proxy in
    /// front). Off: they are ignored.
    pub trust_proxy: bool,
    /// Serve HTTPS with this PEM certificate chain and private key.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// `--allow-private-push`: Web Push endpoints and ntfy URLs may be private, loopback or
    /// link-local addresses, and http there. Off: https to a public address only.
    pub allow_private_push: bool,
    /// The most request-body bytes held at once across all connections; a request whose
    /// body would go past it is answered 503 (with `retry-after`) before it is read.
    pub body_budget: usize,
    /// How long the page's "Not now" puts a prompt off (issue 26): hidden on every page and
    /// never pushed meanwhile (s).
    pub not_now_s: u64,
}

impl Default for ReceiverOptions {
    fn default() -> Self {
        ReceiverOptions {
            // No token anyone could know: each set of options draws its own (tests read it
            // back with `Receiver::token`); `sp-receiver` always sets the one from its file.
            token: random_token(),
            wait_max_s: 25,
            capabilities: vec!["events".to_owned(), "control".to_owned()],
            max_tier: 1,
            max_events: 50,
            max_bytes: 262_144,
            clock_offset_ms: 0,
            login_token: None,
            permission_expiry_s: 120,
            prompt_expiry_s: 3600,
            test_door: false,
            request_log: true,
            max_connections: 8192,
            db: None,
            rp_id: None,
            public_url: None,
            trust_proxy: false,
            tls: None,
            allow_private_push: false,
            body_budget: DEFAULT_BODY_BUDGET,
            not_now_s: NOT_NOW_S,
        }
    }
}

impl ReceiverOptions {
    /// The `/.well-known/sessionpipe` document for these options.
    pub(crate) fn well_known(&self) -> Value {
        let o = self;
        let control = o.capabilities.iter().any(|c| c == "control");
        let mut endpoints = Map::new();
        endpoints.insert("events".into(), EVENTS_PATH.into());
        if control {
            endpoints.insert("control".into(), CONTROL_PATH.into());
        }
        let mut doc = Map::new();
        doc.insert("protocol".into(), serde_json::json!([1]));
        doc.insert("max_tier".into(), o.max_tier.into());
        doc.insert("capabilities".into(), o.capabilities.clone().into());
        doc.insert("auth".into(), serde_json::json!(["bearer"]));
        doc.insert("endpoints".into(), Value::Object(endpoints));
        doc.insert(
            "batch".into(),
            serde_json::json!({"max_events": o.max_events, "max_bytes": o.max_bytes}),
        );
        if control {
            let mut c = serde_json::json!({"wait_max_s": o.wait_max_s});
            if let Some(rp) = &o.rp_id {
                c["signing"] = serde_json::json!({"rp_id": rp, "algs": [-7, -257]});
            }
            doc.insert("control".into(), c);
        }
        Value::Object(doc)
    }
}

fn random_token() -> String {
    let b: [u8; 16] = rand::random();
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("tok-{hex}")
}

/// [`ReceiverOptions::not_now_s`]'s default: 15 minutes.
pub const NOT_NOW_S: u64 = 15 * 60;

/// [`ReceiverOptions::body_budget`]'s default: room for 64 full default event batches.
pub const DEFAULT_BODY_BUDGET: usize = 16 << 20;

/// A route that faults can be injected into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// `GET /.well-known/sessionpipe`
    WellKnown,
    /// `POST {events}`
    Events,
    /// `GET {control}?session=…` (the long poll)
    Poll,
    /// `POST {control}/ack`
    Ack,
}

/// A misbehaviour for the next request to a route (see [`Receiver::push_fault`](crate::Receiver::push_fault)).
#[cfg(feature = "testing")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer this status with a small JSON body `{"reason":"…"}` (no body for 1xx/204/304).
    Status(u16),
    /// 429 with a `retry-after: <s>` header.
    TooManyRequests { retry_after_s: u64 },
    /// Close the connection without answering (the client reads EOF before any response).
    Reset,
    /// 200 with a `content-length` 64 bytes larger than the body sent, then close.
    Truncated,
    /// 200 with the body `{not json`.
    InvalidJson,
    /// Handle normally after this delay.
    Delay(Duration),
    /// Never answer; the connection is held until `set_down(true)` or `stop()`.
    Hang,
}

/// One request as the receiver saw it (any route, any status).
#[cfg(feature = "testing")]
#[derive(Debug, Clone)]
pub struct RequestRecord {
    pub method: String,
    /// Path and query as sent.
    pub url: String,
    /// The protocol route, if it was one (method and path both match).
    pub route: Option<Route>,
    /// Header names lower-cased, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body read (for events, at most `max_bytes + 1` bytes).
    pub body: Vec<u8>,
    /// Status answered; `None` while in flight, or for `Reset`/`Hang`/a cut connection.
    pub status: Option<u16>,
    /// The fault this request consumed.
    pub fault: Option<Fault>,
}

#[cfg(feature = "testing")]
impl RequestRecord {
    /// First value of a header (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_postgres_url_is_shown_without_its_password() {
        for (url, shown) in [
            ("postgres://sp:pw@db:5432/x", "postgres://sp:***@db:5432/x"),
            (
                "postgres://sp@/x?host=/run/postgresql",
                "postgres://sp@/x?host=/run/postgresql",
            ),
            (
                "postgresql://db/x?user=sp&password=pw&sslmode=disable",
                "postgresql://db/x?user=sp&password=***&sslmode=disable",
            ),
            ("postgres://a:b:c@h/x", "postgres://a:***@h/x"),
        ] {
            assert_eq!(Database::Postgres(url.into()).to_string(), shown);
        }
        assert_eq!(Database::File("/d/r.db".into()).to_string(), "/d/r.db");
    }
}
