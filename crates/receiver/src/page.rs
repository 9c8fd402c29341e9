//! The page: where a person answers from a phone. Plain HTML, CSS and a little JavaScript
//! (`page/*`, embedded with `include_str!`), served by the receiver itself; no build step.
//!
//! | route | auth | answers |
//! |---|---|---|
//! | `GET /` | login | 200 the page; 401 with the login form |
//! | `GET /login` | none | 200 the login form |
//! | `POST /login` | the login token | 303 to `/` with the login cookie; 401 with the form again |
//! | `POST /logout` | login + CSRF | 204, the cookie cleared and the login forgotten |
//! | `GET /assets/{app.css,app.js,login.js,icon…}`, `/manifest.webmanifest`, `/sw.js` | none | the static files (nothing secret) |
//! | `GET /page/api/state?since=V&wait=S` | login | 200 sessions, open prompts, messages and outcomes; held up to S (≤ 25) seconds until the state's version differs from V |
//! | `POST /page/api/enqueue` | login + CSRF | 200 the queued message; 400 naming what is wrong |
//! | `POST /page/api/away` | login + CSRF | `{"away": bool}`: the Away switch; 200 `{"away"}` |
//! | `GET /pair?code=` | login | the page, opened on its pairing view (signed control) |
//! | `/page/api/pairing`, `/page/api/signed` | login (+ CSRF to post) | signed control: see `signed.rs` |
//!
//! **Security.** The login token is separate from the sender's bearer token (the two must
//! differ; the bearer token never opens the page). A successful `POST /login` sets a random
//! 256-bit cookie (`HttpOnly; SameSite=Strict; Path=/`): over https (built-in TLS, or a proxy
//! trusted with `--trust-proxy` that says `x-forwarded-proto: https`) it is `__Host-sessionpipe`
//! with `Secure`; over plain http its name carries the port and a fingerprint of this
//! instance's login token (`sessionpipe_<port>_<8 hex>`), so two receivers on one host keep
//! their logins apart. It is kept 30 days; the database stores only its SHA-256, tied to the
//! login token (changing the token logs everyone out). "Login" in the table means that
//! cookie, or `Authorization: Bearer <login token>` for scripts (no cookie, so no CSRF
//! exposure). Every state-changing request made with the cookie must carry
//! `x-sessionpipe-csrf` with the value the state answer gives: a random secret per login,
//! kept only in the server's memory (nothing derives it from the cookie), and a custom header
//! cannot be sent cross-site without a CORS preflight, which is never granted. Such requests
//! are refused (403 `csrf`) when their `Origin` is not this host or `Sec-Fetch-Site` says
//! cross-site. `POST /login` checks the same. Every page route answers only a `Host` this
//! receiver is (`--public-url`'s, or localhost / an IP address; 403
//! `host_not_allowed` otherwise), so a DNS-rebound name cannot reach it. Login attempts are
//! limited per client (5 a minute) and overall (30 a minute), answering 429 with
//! `retry-after`; a wrong login token also costs half a second. Every answer carries
//! `cache-control: no-store`; HTML adds a strict Content-Security-Policy (scripts from this
//! origin only, no framing), `x-frame-options: DENY`, `x-content-type-options: nosniff` and
//! `referrer-policy: same-origin` (not `no-referrer`, which makes browsers send `Origin: null`
//! on form posts). Tokens are compared in constant time. The service worker (`page/sw.js`)
//! keeps only the static shell (never an API answer, never a post) in its own cache, for
//! when the receiver cannot be reached.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::http::{clip, parse_json, percent_decode, query_param, Answer, Exchange, Hold, Reply};
use spwire::split_session_key;

const INDEX_HTML: &str = include_str!("page/index.html");
const LOGIN_HTML: &str = include_str!("page/login.html");
const APP_CSS: &str = include_str!("page/app.css");
const APP_JS: &str = include_str!("page/app.js");
const LOGIN_JS: &str = include_str!("page/login.js");
const MANIFEST: &str = include_str!("page/manifest.webmanifest");
const SERVICE_WORKER: &str = include_str!("page/sw.js");
const ICON_SVG: &str = include_str!("page/icon.svg");
// Made from icon.svg by scripts/icons.mjs (Android and iOS want PNGs to install the page).
const ICON_192: &[u8] = include_bytes!("page/icon-192.png");
const ICON_512: &[u8] = include_bytes!("page/icon-512.png");
const ICON_MASKABLE_512: &[u8] = include_bytes!("page/icon-maskable-512.png");
const APPLE_TOUCH_ICON: &[u8] = include_bytes!("page/apple-touch-icon.png");

/// The service worker with its shell cache named after a hash of the files it keeps
/// (sw.js's `%SHELL_VERSION%`): a receiver with other files installs a new worker, which
/// drops the old cache.
fn service_worker() -> &'static str {
    static SW: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SW.get_or_init(|| {
        let mut h = Sha256::new();
        for part in [
            INDEX_HTML.as_bytes(),
            LOGIN_HTML.as_bytes(),
            APP_CSS.as_bytes(),
            APP_JS.as_bytes(),
            LOGIN_JS.as_bytes(),
            MANIFEST.as_bytes(),
            ICON_SVG.as_bytes(),
            ICON_192,
            ICON_512,
            ICON_MASKABLE_512,
            APPLE_TOUCH_ICON,
        ] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        let version: String = h.finalize()[..6]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        SERVICE_WORKER.replace("%SHELL_VERSION%", &version)
    })
}

/// How long a login lasts.
pub(crate) const LOGIN_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// A session is shown while its last event is this recent (and it has not ended).
const LIVE: Duration = Duration::from_secs(24 * 3600);
/// Longest hold of a state request.
const STATE_WAIT_MAX_S: f64 = 25.0;
/// Longest expiry a page client may ask for.
const EXPIRY_MAX_S: f64 = 7.0 * 24.0 * 3600.0;
/// What a wrong login token costs.
const LOGIN_FAIL_DELAY: Duration = Duration::from_millis(500);

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; manifest-src 'self'; worker-src 'self'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";

/// A page route (method and path both match).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum PageRoute {
    Index,
    LoginForm,
    Login,
    Logout,
    Asset(Asset),
    State,
    Enqueue,
    /// Signed control: the pairing as the page shows it, its approval, a signed command.
    Pairing,
    Approve,
    Signed,
    /// The person's Away switch (DECISIONS 27).
    Away,
    /// Telling the person (push.rs): the devices, ntfy and the push log; and changes to them.
    Push,
    PushSet,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Asset {
    Css,
    Js,
    LoginJs,
    /// The installable page: its manifest, service worker and icon.
    Manifest,
    ServiceWorker,
    Icon,
    Icon192,
    Icon512,
    IconMaskable512,
    AppleTouchIcon,
}

/// `Some(Ok)` for a page route, `Some(Err(allowed methods))` for a page path with the wrong
/// method, `None` for anything else.
pub(crate) fn classify(method: &str, path: &str) -> Option<Result<PageRoute, &'static str>> {
    let (allowed, route) = match (path, method) {
        ("/", "GET") | ("/pair", "GET") => return Some(Ok(PageRoute::Index)),
        ("/pair", _) => ("GET", None),
        ("/page/api/pairing", "GET") => return Some(Ok(PageRoute::Pairing)),
        ("/page/api/pairing", "POST") => return Some(Ok(PageRoute::Approve)),
        ("/page/api/pairing", _) => ("GET, POST", None),
        ("/page/api/signed", m) => ("POST", (m == "POST").then_some(PageRoute::Signed)),
        ("/", _) => ("GET", None),
        ("/login", "GET") => return Some(Ok(PageRoute::LoginForm)),
        ("/login", "POST") => return Some(Ok(PageRoute::Login)),
        ("/login", _) => ("GET, POST", None),
        ("/logout", "POST") => return Some(Ok(PageRoute::Logout)),
        ("/logout", _) => ("POST", None),
        ("/assets/app.css", m) => ("GET", (m == "GET").then_some(PageRoute::Asset(Asset::Css))),
        ("/assets/app.js", m) => ("GET", (m == "GET").then_some(PageRoute::Asset(Asset::Js))),
        ("/assets/login.js", m) => (
            "GET",
            (m == "GET").then_some(PageRoute::Asset(Asset::LoginJs)),
        ),
        ("/page/api/state", m) => ("GET", (m == "GET").then_some(PageRoute::State)),
        ("/page/api/enqueue", m) => ("POST", (m == "POST").then_some(PageRoute::Enqueue)),
        ("/page/api/away", m) => ("POST", (m == "POST").then_some(PageRoute::Away)),
        ("/page/api/push", "GET") => return Some(Ok(PageRoute::Push)),
        ("/page/api/push", "POST") => return Some(Ok(PageRoute::PushSet)),
        ("/page/api/push", _) => ("GET, POST", None),
        ("/manifest.webmanifest", m) => (
            "GET",
            (m == "GET").then_some(PageRoute::Asset(Asset::Manifest)),
        ),
        ("/sw.js", m) => (
            "GET",
            (m == "GET").then_some(PageRoute::Asset(Asset::ServiceWorker)),
        ),
        ("/assets/icon.svg", m) => ("GET", (m == "GET").then_some(PageRoute::Asset(Asset::Icon))),
        ("/assets/icon-192.png", m) => (
            "GET",
            (m == "GET").then_some(PageRoute::Asset(Asset::Icon192)),
        ),
        ("/assets/icon-512.png", m) => (
            "GET",
            (m == "GET").then_some(PageRoute::Asset(Asset::Icon512)),
        ),
        ("/assets/icon-maskable-512.png", m) => (
            "GET",
            (m == "GET").then_some(PageRoute::Asset(Asset::IconMaskable512)),
        ),
        ("/assets/apple-touch-icon.png", m) => (
            "GET",
            (m == "GET").then_some(PageRoute::Asset(Asset::AppleTouchIcon)),
        ),
        _ => return None,
    };
    Some(route.ok_or(allowed))
}

/// Constant-time equality (the length is not secret).
pub(crate) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    subtle::ConstantTimeEq::ct_eq(a, b).into()
}

fn sha256_hex(s: &str) -> String {
    Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Identifies the login token a login was made with, without storing it.
fn token_fp(login_token: &str) -> String {
    sha256_hex(&format!("sessionpipe login token|{login_token}"))[..32].to_owned()
}

/// 32 random bytes (the OS's CSPRNG), hex.
fn random_hex() -> String {
    let b: [u8; 32] = rand::random();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// CSRF secrets kept at most (past this the oldest logins get a new one on their next state
/// request, which the page picks up).
const CSRF_KEPT: usize = 4096;

/// Login attempts: per client and overall, token buckets.
const LOGIN_PER_CLIENT: Bucket = Bucket::new(5.0, 60.0);
const LOGIN_OVERALL: Bucket = Bucket::new(30.0, 60.0);
/// Clients tracked at most (past this, those back at full allowance are forgotten).
const CLIENTS_KEPT: usize = 10_000;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Bucket {
    cap: f64,
    /// Seconds to refill from empty.
    per_s: f64,
    tokens: f64,
    at: Option<Instant>,
}

impl Bucket {
    const fn new(cap: f64, refill_s: f64) -> Bucket {
        Bucket {
            cap,
            per_s: cap / refill_s,
            tokens: cap,
            at: None,
        }
    }
    fn refill(&mut self, now: Instant) {
        if let Some(at) = self.at {
            let gained = now.saturating_duration_since(at).as_secs_f64() * self.per_s;
            self.tokens = (self.tokens + gained).min(self.cap);
        }
        self.at = Some(now);
    }
    /// Seconds until one attempt is allowed (0: now).
    fn wait_s(&self) -> u64 {
        if self.tokens >= 1.0 {
            0
        } else {
            ((1.0 - self.tokens) / self.per_s).ceil().max(1.0) as u64
        }
    }
}

/// The login rate limit: an attempt takes one from its client's bucket and the overall one;
/// a successful login gives them back (only guesses count).
#[derive(Debug)]
pub(crate) struct LoginLimits {
    overall: Bucket,
    clients: HashMap<IpAddr, Bucket>,
}

impl Default for LoginLimits {
    fn default() -> Self {
        LoginLimits {
            overall: LOGIN_OVERALL,
            clients: HashMap::new(),
        }
    }
}

impl LoginLimits {
    /// Takes an attempt, or says in how many seconds one is allowed.
    fn take(&mut self, client: IpAddr, now: Instant) -> Result<(), u64> {
        if self.clients.len() >= CLIENTS_KEPT {
            self.clients.retain(|_, b| {
                b.refill(now);
                b.tokens < b.cap
            });
        }
        let mine = self.clients.entry(client).or_insert(LOGIN_PER_CLIENT);
        mine.refill(now);
        self.overall.refill(now);
        let wait = mine.wait_s().max(self.overall.wait_s());
        if wait > 0 {
            return Err(wait);
        }
        mine.tokens -= 1.0;
        self.overall.tokens -= 1.0;
        Ok(())
    }

    fn give_back(&mut self, client: IpAddr) {
        if let Some(b) = self.clients.get_mut(&client) {
            b.tokens = (b.tokens + 1.0).min(b.cap);
        }
        self.overall.tokens = (self.overall.tokens + 1.0).min(self.overall.cap);
    }
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn html(status: u16, body: String) -> Reply {
    Reply::typed(status, "text/html; charset=utf-8", body.into_bytes())
}

fn login_page(status: u16, error: Option<&str>) -> Reply {
    let err = error
        .map(|e| format!("<p class=\"error\" role=\"alert\">{}</p>", html_escape(e)))
        .unwrap_or_default();
    html(status, LOGIN_HTML.replace("<!--error-->", &err))
}

/// Who is asking.
enum Who {
    /// The login cookie; carries the CSRF value that goes with it and the stored hash.
    Cookie { hash: String, csrf: String },
    /// `Authorization: Bearer <login token>`.
    Bearer,
}

/// The cookie's name over https: the `__Host-` prefix makes browsers refuse it unless it is
/// `Secure`, `Path=/` and set by this very host.
const HTTPS_COOKIE: &str = "__Host-sessionpipe";

/// Whether the browser talks https to us: built-in TLS, or a trusted proxy that says so.
fn is_https(ex: &Exchange<'_>) -> bool {
    let (tls, trust) = {
        let st = ex.shared.lock();
        (st.opts.tls.is_some(), st.opts.trust_proxy)
    };
    tls || (trust
        && ex
            .header("x-forwarded-proto")
            .is_some_and(|p| p.trim().eq_ignore_ascii_case("https")))
}

/// The login cookie's name over plain http: per port and per instance (its login token).
fn http_cookie_name(ex: &Exchange<'_>) -> String {
    let fp = match &ex.shared.lock().opts.login_token {
        Some(l) => sha256_hex(&format!("sessionpipe cookie name|{l}"))[..8].to_owned(),
        None => "none".to_owned(),
    };
    format!("sessionpipe_{}_{fp}", ex.shared.addr.port())
}

fn cookie_name(ex: &Exchange<'_>) -> String {
    if is_https(ex) {
        HTTPS_COOKIE.to_owned()
    } else {
        http_cookie_name(ex)
    }
}

fn cookie_value(ex: &Exchange<'_>) -> Option<String> {
    let name = cookie_name(ex);
    ex.headers
        .iter()
        .filter(|(k, _)| k == "cookie")
        .flat_map(|(_, v)| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim().to_owned())
        .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The client's address: the socket's, or with `--trust-proxy` the last `X-Forwarded-For`
/// entry (the one the proxy added).
fn client_ip(ex: &Exchange<'_>) -> Option<IpAddr> {
    let trust = ex.shared.lock().opts.trust_proxy;
    if trust {
        if let Some(ip) = ex
            .header("x-forwarded-for")
            .and_then(|v| v.rsplit(',').next())
            .and_then(|v| v.trim().parse::<IpAddr>().ok())
        {
            return Some(ip);
        }
    }
    ex.peer.map(|p| p.ip())
}

/// The host the browser asked for: `Host`, or with `--trust-proxy` `X-Forwarded-Host`.
fn asked_host(ex: &Exchange<'_>) -> Option<String> {
    let trust = ex.shared.lock().opts.trust_proxy;
    let forwarded = if trust {
        ex.header("x-forwarded-host")
            .and_then(|v| v.split(',').next())
    } else {
        None
    };
    forwarded
        .or_else(|| ex.header("host"))
        .map(|h| h.trim().to_ascii_lowercase())
}

/// Splits `host[:port]` (`[v6]:port` too).
fn split_host(authority: &str) -> (&str, Option<u16>) {
    if let Some(rest) = authority.strip_prefix('[') {
        if let Some((h, after)) = rest.split_once(']') {
            return (h, after.strip_prefix(':').and_then(|p| p.parse().ok()));
        }
    }
    match authority.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h, p.parse().ok()),
        _ => (authority, None),
    }
}

/// Whether `host` (a `Host` header value, lower-case) names this receiver: the authority of
/// `--public-url`, or localhost / an IP address literal. A name anyone else controls (DNS
/// rebinding) is none of these.
pub(crate) fn host_allowed(host: &str, public_url: Option<&str>) -> bool {
    if let Some(u) = public_url {
        let rest = u.split_once("://").map_or(u, |(_, r)| r);
        let authority = rest
            .split(['/', '?', '#'])
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        let https = u.to_ascii_lowercase().starts_with("https://");
        let (ph, pp) = split_host(&authority);
        let default = if https { 443 } else { 80 };
        let (h, p) = split_host(host);
        if h == ph && p.unwrap_or(default) == pp.unwrap_or(default) {
            return true;
        }
    }
    // localhost and address literals cannot be rebound to this machine by someone else's DNS;
    // any port (a TLS proxy on this machine forwards its own `Host`).
    let (h, _) = split_host(host);
    h == "localhost" || h.parse::<IpAddr>().is_ok()
}

fn host_ok(ex: &Exchange<'_>) -> bool {
    let public_url = ex.shared.lock().opts.public_url.clone();
    asked_host(ex).is_some_and(|h| host_allowed(&h, public_url.as_deref()))
}

fn who(ex: &Exchange<'_>) -> Result<Option<Who>, Reply> {
    // Before taking the lock: the cookie's name depends on the options (it locks too).
    let cookie = cookie_value(ex);
    let mut st = ex.shared.lock();
    let Some(login) = st.opts.login_token.clone() else {
        return Ok(None);
    };
    let login = login.as_str();
    if let Some(t) = ex.bearer() {
        // A bearer given is judged alone: the sender's token never opens the page.
        return Ok(same_secret(t.as_bytes(), login.as_bytes()).then_some(Who::Bearer));
    }
    let Some(cookie) = cookie else {
        return Ok(None);
    };
    let hash = sha256_hex(&cookie);
    let since = st.now_ms() - LOGIN_TTL.as_millis() as i64;
    match st.db.login_valid(&hash, &token_fp(login), since) {
        Ok(true) => {
            if st.csrf.len() >= CSRF_KEPT && !st.csrf.contains_key(&hash) {
                st.csrf.clear();
            }
            let csrf = st
                .csrf
                .entry(hash.clone())
                .or_insert_with(random_hex)
                .clone();
            Ok(Some(Who::Cookie { hash, csrf }))
        }
        Ok(false) => Ok(None),
        Err(e) => Err(Reply::db_failed(&e)),
    }
}

/// Whether a browser request comes from this origin: `Origin`, when sent, must be this host
/// (`http://` or `https://`), and `Sec-Fetch-Site`, when sent, same-origin (or none: typed).
fn same_origin(ex: &Exchange<'_>) -> bool {
    if let Some(site) = ex.header("sec-fetch-site") {
        if !matches!(site.trim(), "same-origin" | "none") {
            return false;
        }
    }
    match ex.header("origin") {
        None => true,
        Some(origin) => {
            let Some(host) = asked_host(ex) else {
                return false;
            };
            let origin = origin.trim().to_ascii_lowercase();
            origin == format!("http://{host}") || origin == format!("https://{host}")
        }
    }
}

fn unauthorized() -> Reply {
    Reply::error(401, "unauthorized")
}

fn with_page_headers(mut r: Reply) -> Reply {
    if r.content_type.starts_with("text/html") {
        r = r
            .header("content-security-policy", CSP)
            .header("x-frame-options", "DENY");
    }
    r.header("x-content-type-options", "nosniff")
        .header("referrer-policy", "same-origin")
}

/// What a page route's head allows before its body is read: `Ok(None)` when the route reads
/// no body, `Ok(Some(true))` for the login form's post (anyone may send it: a small body),
/// `Ok(Some(false))` for a logged-in action whose login and CSRF value hold; `Err` with
/// the answer the handler would give otherwise. The handler checks all of it again.
pub(crate) fn admit(ex: &Exchange<'_>, route: PageRoute) -> Result<Option<bool>, Reply> {
    let reads_body = match route {
        PageRoute::Login => Some(true),
        PageRoute::Enqueue
        | PageRoute::Approve
        | PageRoute::Signed
        | PageRoute::Away
        | PageRoute::PushSet => Some(false),
        PageRoute::Logout => None,
        _ => return Ok(None),
    };
    if !host_ok(ex) {
        ex.shared.limits.hit(
            "host",
            &format_args!(
                "page request for host {:?} refused (not this receiver's)",
                ex.header("host").unwrap_or("")
            ),
        );
        return Err(with_page_headers(Reply::error(403, "host_not_allowed")));
    }
    if reads_body == Some(true) {
        if !same_origin(ex) {
            return Err(with_page_headers(Reply::error(403, "csrf")));
        }
        return Ok(reads_body);
    }
    match who(ex) {
        Err(r) => Err(with_page_headers(r)),
        Ok(None) => Err(with_page_headers(unauthorized())),
        Ok(Some(w)) => match check_csrf(ex, &w) {
            Err(r) => Err(with_page_headers(r)),
            Ok(()) => Ok(reads_body),
        },
    }
}

/// Handles a page route.
pub(crate) fn handle(ex: &Exchange<'_>, route: PageRoute) -> Answer {
    if !host_ok(ex) {
        ex.shared.limits.hit(
            "host",
            &format_args!(
                "page request for host {:?} refused (not this receiver's)",
                ex.header("host").unwrap_or("")
            ),
        );
        return with_page_headers(Reply::error(403, "host_not_allowed")).into();
    }
    let reply = match route {
        PageRoute::Asset(a) => {
            let (ty, body): (_, &[u8]) = match a {
                Asset::Css => ("text/css; charset=utf-8", APP_CSS.as_bytes()),
                Asset::Js => ("text/javascript; charset=utf-8", APP_JS.as_bytes()),
                Asset::LoginJs => ("text/javascript; charset=utf-8", LOGIN_JS.as_bytes()),
                Asset::Manifest => ("application/manifest+json", MANIFEST.as_bytes()),
                Asset::ServiceWorker => (
                    "text/javascript; charset=utf-8",
                    service_worker().as_bytes(),
                ),
                Asset::Icon => ("image/svg+xml", ICON_SVG.as_bytes()),
                Asset::Icon192 => ("image/png", ICON_192),
                Asset::Icon512 => ("image/png", ICON_512),
                Asset::IconMaskable512 => ("image/png", ICON_MASKABLE_512),
                Asset::AppleTouchIcon => ("image/png", APPLE_TOUCH_ICON),
            };
            Reply::typed(200, ty, body.to_vec())
        }
        PageRoute::LoginForm => login_page(200, None),
        PageRoute::Login => login(ex),
        PageRoute::Index => match who(ex) {
            Err(r) => r,
            Ok(Some(_)) => html(200, INDEX_HTML.to_owned()),
            Ok(None) => login_page(401, None),
        },
        PageRoute::Logout => match who(ex) {
            Err(r) => r,
            Ok(None) => unauthorized(),
            Ok(Some(w)) => match check_csrf(ex, &w) {
                Err(r) => r,
                Ok(()) => logout(ex, w),
            },
        },
        PageRoute::State => match who(ex) {
            Err(r) => r,
            Ok(None) => unauthorized(),
            Ok(Some(w)) => return state(ex, &w),
        },
        PageRoute::Push => match who(ex) {
            Err(r) => r,
            Ok(None) => unauthorized(),
            Ok(Some(_)) => push_state(ex),
        },
        PageRoute::Enqueue
        | PageRoute::Approve
        | PageRoute::Signed
        | PageRoute::Away
        | PageRoute::PushSet => match who(ex) {
            Err(r) => r,
            Ok(None) => unauthorized(),
            Ok(Some(w)) => match check_csrf(ex, &w) {
                Err(r) => r,
                Ok(()) => match route {
                    PageRoute::Approve => super::signed::page_approve(ex),
                    PageRoute::Signed => super::signed::page_signed(ex),
                    PageRoute::Away => away(ex),
                    PageRoute::PushSet => push_set(ex),
                    _ => enqueue(ex),
                },
            },
        },
        PageRoute::Pairing => match who(ex) {
            Err(r) => r,
            Ok(None) => unauthorized(),
            Ok(Some(_)) => super::signed::page_pairing(ex),
        },
    };
    Answer::Now(with_page_headers(reply))
}

fn check_csrf(ex: &Exchange<'_>, who: &Who) -> Result<(), Reply> {
    match who {
        Who::Bearer => Ok(()),
        Who::Cookie { csrf, .. } => {
            let sent = ex.header("x-sessionpipe-csrf").unwrap_or("").trim();
            if same_origin(ex) && same_secret(sent.as_bytes(), csrf.as_bytes()) {
                Ok(())
            } else {
                Err(Reply::error(403, "csrf"))
            }
        }
    }
}

/// The login token from a form (`token=…`) or JSON (`{"token":…}`) body.
fn submitted_token(ex: &Exchange<'_>) -> Option<String> {
    submitted(ex, "token")
}

/// A field of a form or JSON body, trimmed.
fn submitted(ex: &Exchange<'_>, field: &str) -> Option<String> {
    let ty = ex.header("content-type").unwrap_or("").to_ascii_lowercase();
    if ty.starts_with("application/json") {
        let v: Value = serde_json::from_slice(&ex.body).ok()?;
        return v.get(field)?.as_str().map(|t| t.trim().to_owned());
    }
    let body = std::str::from_utf8(&ex.body).ok()?;
    body.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (percent_decode(k).as_deref() == Some(field))
            .then(|| percent_decode(v).map(|t| t.trim().to_owned()))
            .flatten()
    })
}

/// Where a login goes next: `/`, or the pairing view it was opened at (nothing else, so a
/// login can never be turned into a redirect elsewhere).
fn next_after_login(next: Option<&str>) -> String {
    match next.and_then(|n| n.strip_prefix("/pair?code=")) {
        Some(code)
            if (1..=64).contains(&code.len())
                && code
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
        {
            format!("/pair?code={code}")
        }
        _ => "/".to_owned(),
    }
}

fn login(ex: &Exchange<'_>) -> Reply {
    if !same_origin(ex) {
        return Reply::error(403, "csrf");
    }
    let client = client_ip(ex).unwrap_or(IpAddr::from([0, 0, 0, 0]));
    let allowed = ex.shared.lock().login_limits.take(client, Instant::now());
    if let Err(wait) = allowed {
        ex.shared.limits.hit(
            "login",
            &format_args!("login attempt from {client} over the limit: 429"),
        );
        return login_page(
            429,
            Some(&format!(
                "Too many login attempts; try again in {wait} seconds."
            )),
        )
        .header("retry-after", wait.to_string());
    }
    let login = ex.shared.lock().opts.login_token.clone();
    let given = submitted_token(ex).unwrap_or_default();
    let Some(login) = login.filter(|l| same_secret(given.as_bytes(), l.as_bytes())) else {
        std::thread::sleep(LOGIN_FAIL_DELAY);
        let why = if given.is_empty() {
            "Enter the login token."
        } else {
            "That is not the login token."
        };
        return login_page(401, Some(why));
    };
    let cookie = random_hex();
    {
        let mut st = ex.shared.lock();
        st.login_limits.give_back(client);
        let now = st.now_ms();
        if let Err(e) = st
            .db
            .add_login(&sha256_hex(&cookie), &token_fp(&login), now)
        {
            return Reply::db_failed(&e);
        }
    }
    let secure = is_https(ex);
    let set = format!(
        "{}={cookie}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        cookie_name(ex),
        LOGIN_TTL.as_secs(),
        if secure { "; Secure" } else { "" }
    );
    let next = next_after_login(submitted(ex, "next").as_deref());
    Reply::typed(303, "text/plain; charset=utf-8", b"logged in\n".to_vec())
        .header("location", next)
        .header("set-cookie", set)
}

fn logout(ex: &Exchange<'_>, who: Who) -> Reply {
    if let Who::Cookie { hash, .. } = &who {
        let mut st = ex.shared.lock();
        st.csrf.remove(hash);
        if let Err(e) = st.db.remove_login(hash) {
            return Reply::db_failed(&e);
        }
    }
    Reply::no_content().header(
        "set-cookie",
        format!(
            "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
            cookie_name(ex),
            if is_https(ex) { "; Secure" } else { "" }
        ),
    )
}

/// `GET /page/api/state?since=V&wait=S`: held (asynchronously) until the version differs
/// from V, a message expires, or S seconds pass.
fn state(ex: &Exchange<'_>, who: &Who) -> Answer {
    let since = match query_param(&ex.query, "since") {
        None => None,
        Some(Ok(v)) => match v.trim().parse::<u64>() {
            Ok(v) => Some(v),
            Err(_) => return with_page_headers(Reply::error(400, "malformed since")).into(),
        },
        Some(Err(())) => return with_page_headers(Reply::error(400, "malformed since")).into(),
    };
    let wait = match query_param(&ex.query, "wait") {
        None => 0.0,
        Some(Ok(w)) => match w.trim().parse::<f64>() {
            Ok(w) if w.is_finite() => w.clamp(0.0, STATE_WAIT_MAX_S),
            _ => return with_page_headers(Reply::error(400, "malformed wait")).into(),
        },
        Some(Err(())) => return with_page_headers(Reply::error(400, "malformed wait")).into(),
    };
    let started = Instant::now();
    let mut deadline = started + Duration::from_secs_f64(wait);
    {
        let st = ex.shared.lock();
        // A message's view changes by itself when it expires unacknowledged: answer then too.
        if let Ok(Some(next)) = st.db.next_expiry(st.now_ms()) {
            let until = Duration::from_millis((next - st.now_ms()).max(0) as u64 + 50);
            deadline = deadline.min(started + until);
        }
    }
    let csrf = match who {
        Who::Cookie { csrf, .. } => Some(csrf.clone()),
        Who::Bearer => None,
    };
    Answer::Hold(Hold {
        deadline,
        recheck: None,
        check: Box::new(move |st, last| {
            if since == Some(st.version) && !last {
                return None;
            }
            Some(with_page_headers(state_body(st, csrf.as_deref())))
        }),
    })
}

fn state_body(st: &super::state::State, csrf: Option<&str>) -> Reply {
    let now_ms = st.now_ms();
    let sessions = match st.db.page_sessions(now_ms, LIVE.as_millis() as i64) {
        Ok(s) => s,
        Err(e) => return Reply::db_failed(&e),
    };
    let mut body = Map::new();
    body.insert("version".into(), st.version.into());
    body.insert("away".into(), st.db.away().unwrap_or(false).into());
    body.insert(
        "now".into(),
        super::validate::format_ms_timestamp(st.now()).into(),
    );
    body.insert(
        "permission_expiry_s".into(),
        st.opts.permission_expiry_s.into(),
    );
    body.insert("prompt_expiry_s".into(), st.opts.prompt_expiry_s.into());
    if let Some(csrf) = csrf {
        body.insert("csrf".into(), csrf.into());
    }
    if let Some(signing) = super::signed::page_signing(st) {
        body.insert("signing".into(), signing);
    }
    body.insert("sessions".into(), Value::Array(sessions));
    Reply::json(200, Value::Object(body))
}

fn str_field<'a>(m: &'a Map<String, Value>, k: &str) -> Result<Option<&'a str>, String> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("{k} must be a string")),
    }
}

/// A prompt's `mode` (DECISIONS 25): `queue` (the default, left out), `steer` or `interrupt`.
pub(crate) fn prompt_mode(m: &Map<String, Value>) -> Result<Option<&str>, String> {
    match str_field(m, "mode")? {
        None | Some("queue") => Ok(None),
        Some(mode @ ("steer" | "interrupt")) => Ok(Some(mode)),
        Some(_) => Err("mode must be queue, steer or interrupt".into()),
    }
}

/// Checks a message a page client wants queued and builds the partial `State::enqueue`
/// completes. Returns it with its default expiry in ms.
fn page_message(
    m: &Map<String, Value>,
    perm_s: u64,
    prompt_s: u64,
) -> Result<(Map<String, Value>, i64), String> {
    for k in m.keys() {
        if !matches!(
            k.as_str(),
            "kind" | "text" | "for" | "decision" | "note" | "expires_in_s" | "mode"
        ) {
            return Err(format!("unknown field {}", clip(k, 40)));
        }
    }
    let kind = str_field(m, "kind")?.ok_or("kind is required")?;
    let mut out = Map::new();
    out.insert("kind".into(), kind.into());
    let default_s = match kind {
        "prompt" => {
            let text = str_field(m, "text")?.unwrap_or("");
            if text.trim().is_empty() {
                return Err("text is required for a prompt".into());
            }
            if text.chars().count() > 20_000 {
                return Err("text must be at most 20000 characters".into());
            }
            out.insert("text".into(), text.into());
            if let Some(mode) = prompt_mode(m)? {
                out.insert("mode".into(), mode.into());
            }
            prompt_s
        }
        "permission.answer" => {
            let f = str_field(m, "for")?.unwrap_or("");
            if f.is_empty() || f.chars().count() > 128 {
                return Err("for must be 1 to 128 characters (the attention_id)".into());
            }
            let d = str_field(m, "decision")?.unwrap_or("");
            if !matches!(d, "allow" | "deny") {
                return Err("decision must be allow or deny".into());
            }
            out.insert("for".into(), f.into());
            out.insert("decision".into(), d.into());
            perm_s
        }
        "cancel" => perm_s,
        _ => return Err("kind must be prompt, permission.answer or cancel".into()),
    };
    if kind != "prompt" && m.get("text").is_some_and(|t| !t.is_null()) {
        return Err("text is for prompts only".into());
    }
    if kind != "prompt" && m.get("mode").is_some_and(|t| !t.is_null()) {
        return Err("mode is for prompts only".into());
    }
    if kind != "permission.answer" && (m.contains_key("for") || m.contains_key("decision")) {
        return Err("for and decision are for permission.answer only".into());
    }
    if let Some(note) = str_field(m, "note")? {
        if note.chars().count() > 2000 {
            return Err("note must be at most 2000 characters".into());
        }
        if !note.trim().is_empty() {
            out.insert("note".into(), note.into());
        }
    }
    if let Some(v) = m.get("expires_in_s").filter(|v| !v.is_null()) {
        let s = v.as_f64().ok_or("expires_in_s must be a number")?;
        if !(s > 0.0 && s <= EXPIRY_MAX_S) {
            return Err(format!(
                "expires_in_s must be above 0 and at most {EXPIRY_MAX_S}"
            ));
        }
        out.insert("expires_in_s".into(), v.clone());
    }
    Ok((out, default_s as i64 * 1000))
}

/// `POST /page/api/away` `{"away": true|false}`: the person's Away switch. Every machine
/// hears it in its next poll answer (`sessionpipe-away`); polls held now answer at once.
fn away(ex: &Exchange<'_>) -> Reply {
    let body = match parse_json(&ex.body) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Some(away) = body.get("away").and_then(Value::as_bool) else {
        return Reply::error(400, "away must be true or false");
    };
    let mut st = ex.shared.lock();
    let now = st.now_ms();
    if let Err(e) = st.db.set_away(away, now) {
        return Reply::db_failed(&e);
    }
    st.bump();
    drop(st);
    ex.shared.notify();
    Reply::json(200, serde_json::json!({ "away": away }))
}

/// `GET /page/api/push`: the VAPID key a device subscribes with, the devices (never their
/// endpoints), ntfy (never its token) and the newest push attempts.
fn push_state(ex: &Exchange<'_>) -> Reply {
    let st = ex.shared.lock();
    let vapid = match super::state::vapid_of(&st) {
        Ok(v) => v.public(),
        Err(e) => return Reply::db_failed(&e),
    };
    let devices: Vec<Value> = match st.db.push_devices() {
        Ok(d) => d
            .into_iter()
            .map(|d| {
                serde_json::json!({"id": d.id, "name": d.name, "quiet": d.quiet,
                    "since_ms": d.created_ms,
                    "service": crate::push::short_endpoint(&d.sub.endpoint)})
            })
            .collect(),
        Err(e) => return Reply::db_failed(&e),
    };
    let ntfy = st.db.setting("ntfy_url").ok().flatten();
    let has_token = st.db.setting("ntfy_token").ok().flatten().is_some();
    let content = st.db.setting("ntfy_content").ok().flatten().is_some();
    let log = st.db.push_log(50).unwrap_or_default();
    Reply::json(
        200,
        serde_json::json!({"vapid": vapid, "devices": devices,
            "ntfy": ntfy.map(|u| serde_json::json!({"url": u, "token": has_token, "content": content})),
            "log": log}),
    )
}

/// `POST /page/api/push` `{"op": …}`: `subscribe` `{subscription: {endpoint, keys:
/// {p256dh, auth}}, name?}`, `remove` `{id}`, `quiet` `{id, quiet}`, `ntfy` `{url, token?}`
/// (an empty url turns ntfy off).
fn push_set(ex: &Exchange<'_>) -> Reply {
    let body = match parse_json(&ex.body) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let text = |v: &Value, max: usize| -> Option<String> {
        v.as_str()
            .filter(|s| s.chars().count() <= max)
            .map(str::to_owned)
    };
    let mut st = ex.shared.lock();
    let now = st.now_ms();
    let done = match body["op"].as_str().unwrap_or_default() {
        "subscribe" => {
            let sub = &body["subscription"];
            let parsed = crate::push::Subscription::parse(
                sub["endpoint"].as_str().unwrap_or_default(),
                sub["keys"]["p256dh"].as_str().unwrap_or_default(),
                sub["keys"]["auth"].as_str().unwrap_or_default(),
                st.opts.allow_private_push,
            );
            let sub = match parsed {
                Ok(s) => s,
                Err(why) => return Reply::error(400, &format!("subscription: {why}")),
            };
            let name = text(&body["name"], 80);
            match st.db.push_subscribe(&sub, name.as_deref(), now) {
                Ok(Some(id)) => serde_json::json!({"id": id}),
                Ok(None) => {
                    return Reply::error(
                        400,
                        &format!(
                            "this receiver pushes to at most {} devices; remove one first",
                            crate::push::SUBSCRIPTIONS_MAX
                        ),
                    )
                }
                Err(e) => return Reply::db_failed(&e),
            }
        }
        "remove" => match st.db.push_remove(body["id"].as_str().unwrap_or_default()) {
            Ok(true) => serde_json::json!({}),
            Ok(false) => return Reply::error(404, "no such device"),
            Err(e) => return Reply::db_failed(&e),
        },
        "quiet" => {
            let Some(quiet) = body["quiet"].as_bool() else {
                return Reply::error(400, "quiet must be true or false");
            };
            match st
                .db
                .push_set_quiet(body["id"].as_str().unwrap_or_default(), quiet)
            {
                Ok(true) => serde_json::json!({"quiet": quiet}),
                Ok(false) => return Reply::error(404, "no such device"),
                Err(e) => return Reply::db_failed(&e),
            }
        }
        "ntfy" => {
            let url = text(&body["url"], 500).unwrap_or_default();
            let url = url.trim();
            if !url.is_empty() {
                if let Err(why) = crate::push::check_url(url, st.opts.allow_private_push) {
                    return Reply::error(400, &format!("ntfy url {why}"));
                }
            }
            let url = (!url.is_empty()).then_some(url);
            let token = text(&body["token"], 200).filter(|t| !t.is_empty() && url.is_some());
            // What the agent asks goes to ntfy (clear text) only when the person asks.
            let content = match &body["content"] {
                Value::Null => false,
                Value::Bool(b) => *b && url.is_some(),
                _ => return Reply::error(400, "content must be true or false"),
            };
            let r = st
                .db
                .set_setting("ntfy_url", url, now)
                .and_then(|_| st.db.set_setting("ntfy_token", token.as_deref(), now))
                .and_then(|_| {
                    st.db
                        .set_setting("ntfy_content", content.then_some("1"), now)
                });
            if let Err(e) = r {
                return Reply::db_failed(&e);
            }
            serde_json::json!({"ntfy": url.is_some()})
        }
        _ => return Reply::error(400, "op must be subscribe, remove, quiet or ntfy"),
    };
    st.bump();
    drop(st);
    ex.shared.notify();
    Reply::json(200, done)
}

/// `POST /page/api/enqueue` `{"session": "<harness>:<id>", "message": {kind, text?, mode?,
/// for?, decision?, note?, expires_in_s?}}`.
fn enqueue(ex: &Exchange<'_>) -> Reply {
    let body = match parse_json(&ex.body) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Some(session) = body.get("session").and_then(Value::as_str) else {
        return Reply::error(400, "session is required");
    };
    if split_session_key(session).is_none() {
        return Reply::error(400, "malformed session: want <harness>:<id>");
    }
    let Some(m) = body.get("message").and_then(Value::as_object) else {
        return Reply::error(400, "message must be an object");
    };
    let mut st = ex.shared.lock();
    let (partial, default_ms) =
        match page_message(m, st.opts.permission_expiry_s, st.opts.prompt_expiry_s) {
            Ok(p) => p,
            Err(reason) => return Reply::error(400, &reason),
        };
    let result = st.enqueue(session, &partial, default_ms);
    drop(st);
    super::http::enqueued(ex, result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn routes() {
        assert_eq!(classify("GET", "/"), Some(Ok(PageRoute::Index)));
        assert_eq!(classify("POST", "/"), Some(Err("GET")));
        assert_eq!(classify("POST", "/login"), Some(Ok(PageRoute::Login)));
        assert_eq!(classify("GET", "/page/api/enqueue"), Some(Err("POST")));
        assert_eq!(classify("GET", "/nope"), None);
        assert_eq!(
            classify("GET", "/assets/icon-maskable-512.png"),
            Some(Ok(PageRoute::Asset(Asset::IconMaskable512)))
        );
    }

    #[test]
    fn the_worker_names_its_cache_after_the_shell() {
        let sw = service_worker();
        assert!(!sw.contains("%SHELL_VERSION%"));
        let name = sw.split("'sessionpipe-shell-").nth(1).unwrap();
        assert!(name.starts_with(|c: char| c.is_ascii_hexdigit()), "{name}");
        assert_eq!(name.find('\''), Some(12), "{name}");
    }

    #[test]
    fn login_goes_back_to_a_pairing_only() {
        assert_eq!(next_after_login(None), "/");
        assert_eq!(
            next_after_login(Some("/pair?code=AbC-_9")),
            "/pair?code=AbC-_9"
        );
        for bad in [
            "//evil.example",
            "https://evil.example/",
            "/pair?code=",
            "/pair?code=a&b=c",
            "/pair?code=a/../x",
        ] {
            assert_eq!(next_after_login(Some(bad)), "/", "{bad}");
        }
    }

    #[test]
    fn hosts() {
        let p = Some("https://pipe.example.org");
        assert!(host_allowed("pipe.example.org", p));
        assert!(host_allowed("pipe.example.org:443", p));
        assert!(!host_allowed("pipe.example.org:8443", p));
        assert!(!host_allowed("evil.example", p));
        assert!(host_allowed("127.0.0.1:8787", None));
        assert!(host_allowed("localhost:8787", None));
        assert!(host_allowed("[::1]:8787", None));
        // A local proxy on another port forwards its own Host.
        assert!(host_allowed("localhost:8443", None));
        // A rebound name with the right port is still refused.
        assert!(!host_allowed("rebind.evil.example:8787", None));
        assert!(!host_allowed("localhost.evil.example", None));
    }

    #[test]
    fn login_attempts_are_limited_per_client_and_overall() {
        let mut l = LoginLimits::default();
        let t = Instant::now();
        let a = IpAddr::from([10, 0, 0, 1]);
        for _ in 0..5 {
            assert_eq!(l.take(a, t), Ok(()));
        }
        let wait = l.take(a, t).unwrap_err();
        assert!((1..=12).contains(&wait), "{wait}");
        // A success gives its attempt back.
        l.give_back(a);
        assert_eq!(l.take(a, t), Ok(()));
        // Overall: 30 a minute, whoever asks.
        let mut l = LoginLimits::default();
        for i in 0..30u8 {
            assert_eq!(l.take(IpAddr::from([10, 1, 0, i]), t), Ok(()));
        }
        assert!(l.take(IpAddr::from([10, 2, 0, 1]), t).is_err());
        assert_eq!(
            l.take(IpAddr::from([10, 2, 0, 1]), t + Duration::from_secs(2)),
            Ok(())
        );
    }

    #[test]
    fn secrets_compare() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert_ne!(random_hex(), random_hex());
        assert_eq!(random_hex().len(), 64);
    }

    #[test]
    fn page_messages_are_checked() {
        let m = |v: Value| v.as_object().unwrap().clone();
        let (p, d) = page_message(
            &m(json!({"kind":"permission.answer","for":"perm-1","decision":"allow","note":""})),
            120,
            3600,
        )
        .unwrap();
        assert_eq!(
            Value::Object(p),
            json!({"kind":"permission.answer","for":"perm-1","decision":"allow"})
        );
        assert_eq!(d, 120_000);
        for (mode, kept) in [
            ("queue", None),
            ("steer", Some("steer")),
            ("interrupt", Some("interrupt")),
        ] {
            let (p, _) = page_message(
                &m(json!({"kind":"prompt","text":"x","mode":mode})),
                120,
                3600,
            )
            .unwrap();
            assert_eq!(p.get("mode").and_then(Value::as_str), kept, "{mode}");
        }
        let (_, d) = page_message(&m(json!({"kind":"prompt","text":"hi"})), 120, 3600).unwrap();
        assert_eq!(d, 3_600_000);
        for bad in [
            json!({"kind":"prompt"}),
            json!({"kind":"prompt","text":"  "}),
            json!({"kind":"permission.answer","for":"x","decision":"maybe"}),
            json!({"kind":"permission.answer","decision":"allow"}),
            json!({"kind":"cancel","text":"x"}),
            json!({"kind":"cancel","mode":"steer"}),
            json!({"kind":"prompt","text":"x","mode":"now"}),
            json!({"kind":"start"}),
            json!({"kind":"prompt","text":"x","id":"01K6ZZZZZZZZZZZZZZZZZZZZZZ"}),
            json!({"kind":"prompt","text":"x","expires_in_s":0}),
            json!({"kind":"prompt","text":"x","note":"n".repeat(2001)}),
        ] {
            assert!(page_message(&m(bad.clone()), 120, 3600).is_err(), "{bad}");
        }
    }
}
