//! The page: where a person answers from a phone. Plain HTML, CSS and a little JavaScript
//! (`page/*`, embedded with `include_str!`), served by the receiver itself; no build step.
//!
//! | route | auth | answers |
//! |---|---|---|
//! | `GET /` | login | 200 the page; 401 with the login form |
//! | `GET /login` | none | 200 the login form |
//! | `POST /login` | the login token | 303 to `/` with the login cookie; 401 with the form again |
//! | `POST /logout` | login + CSRF | 204, the cookie cleared and the login forgotten |
//! | `GET /assets/{app.css,app.js,login.js}` | none | the static files (nothing secret) |
//! | `GET /page/api/state?since=V&wait=S` | login | 200 sessions, open prompts, messages and outcomes; held up to S (≤ 25) seconds until the state's version differs from V |
//! | `POST /page/api/enqueue` | login + CSRF | 200 the queued message; 400 naming what is wrong |
//! | `POST /page/api/away` | login + CSRF | `{"away": bool}`: the Away switch; 200 `{"away"}` |
//! | `GET /pair?code=` | login | the page, opened on its pairing view (signed control) |
//! | `/page/api/pairing`, `/page/api/signed` | login (+ CSRF to post) | signed control: see `signed.rs` |
//!
//! **Security.** The login token is separate from the sender's bearer token (the two must
//! differ; the bearer token never opens the page). A successful `POST /login` sets a random
//! 256-bit cookie `sessionpipe_<port>` (`HttpOnly; SameSite=Strict; Path=/`, `Secure` behind a
//! proxy that says `x-forwarded-proto: https`), kept 30 days; the database stores only its
//! SHA-256, tied to the login token (changing the token logs everyone out). "Login" in the
//! table means that cookie, or `Authorization: Bearer <login token>` for scripts (no cookie, so
//! no CSRF exposure). Every state-changing request made with the cookie must carry
//! `x-sessionpipe-csrf` with the value the state answer gives (derived from the cookie, so a
//! cross-site page cannot know it, and a custom header cannot be sent cross-site without a
//! CORS preflight, which is never granted), and is refused (403 `csrf`) when its `Origin` is
//! not this host or `Sec-Fetch-Site` says cross-site. `POST /login` checks the same. Every
//! answer carries `cache-control: no-store`; HTML adds a strict Content-Security-Policy
//! (scripts from this origin only, no framing), `x-frame-options: DENY`,
//! `x-content-type-options: nosniff` and `referrer-policy: same-origin` (not `no-referrer`, which makes
//! browsers send `Origin: null` on form posts). A wrong login token
//! costs half a second. Tokens are compared in constant time.

use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::http::{clip, parse_json, percent_decode, query_param, Exchange, Reply};
use super::state::Refused;
use super::validate::parse_session_key;

const INDEX_HTML: &str = include_str!("page/index.html");
const LOGIN_HTML: &str = include_str!("page/login.html");
const APP_CSS: &str = include_str!("page/app.css");
const APP_JS: &str = include_str!("page/app.js");
const LOGIN_JS: &str = include_str!("page/login.js");
const MANIFEST: &str = include_str!("page/manifest.webmanifest");
const SERVICE_WORKER: &str = include_str!("page/sw.js");
const ICON_SVG: &str = include_str!("page/icon.svg");

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
        _ => return None,
    };
    Some(route.ok_or(allowed))
}

/// Constant-time equality (the length is not secret).
pub(crate) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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

fn csrf_for(cookie: &str) -> String {
    sha256_hex(&format!("sessionpipe csrf|{cookie}"))
}

/// 32 bytes from the kernel's CSPRNG, hex.
fn random_hex() -> std::io::Result<String> {
    use std::io::Read;
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
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

fn cookie_name(ex: &Exchange<'_>) -> String {
    format!("sessionpipe_{}", ex.shared.addr.port())
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

fn who(ex: &Exchange<'_>) -> Result<Option<Who>, Reply> {
    let st = ex.shared.lock();
    let Some(login) = st.opts.login_token.as_deref() else {
        return Ok(None);
    };
    if let Some(t) = ex.bearer() {
        // A bearer given is judged alone: the sender's token never opens the page.
        return Ok(same_secret(t.as_bytes(), login.as_bytes()).then_some(Who::Bearer));
    }
    let Some(cookie) = cookie_value(ex) else {
        return Ok(None);
    };
    let hash = sha256_hex(&cookie);
    let since = st.now_ms() - LOGIN_TTL.as_millis() as i64;
    match st.db.login_valid(&hash, &token_fp(login), since) {
        Ok(true) => Ok(Some(Who::Cookie {
            hash,
            csrf: csrf_for(&cookie),
        })),
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
            let Some(host) = ex.header("host") else {
                return false;
            };
            let origin = origin.trim();
            origin == format!("http://{}", host.trim())
                || origin == format!("https://{}", host.trim())
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

/// Handles a page route. `None` only when the receiver went down while a state request was
/// held (its connection is cut, nothing is answered).
pub(crate) fn handle(ex: &Exchange<'_>, route: PageRoute) -> Option<Reply> {
    let reply = match route {
        PageRoute::Asset(a) => {
            let (ty, body) = match a {
                Asset::Css => ("text/css; charset=utf-8", APP_CSS),
                Asset::Js => ("text/javascript; charset=utf-8", APP_JS),
                Asset::LoginJs => ("text/javascript; charset=utf-8", LOGIN_JS),
                Asset::Manifest => ("application/manifest+json", MANIFEST),
                Asset::ServiceWorker => ("text/javascript; charset=utf-8", SERVICE_WORKER),
                Asset::Icon => ("image/svg+xml", ICON_SVG),
            };
            Reply::typed(200, ty, body.as_bytes().to_vec())
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
            Ok(Some(w)) => return state(ex, &w).map(with_page_headers),
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
    Some(with_page_headers(reply))
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
    let cookie = match random_hex() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sp-receiver: cannot read /dev/urandom: {e}");
            return Reply::error(500, "internal_error");
        }
    };
    {
        let mut st = ex.shared.lock();
        let now = st.now_ms();
        if let Err(e) = st
            .db
            .add_login(&sha256_hex(&cookie), &token_fp(&login), now)
        {
            return Reply::db_failed(&e);
        }
    }
    let secure = ex
        .header("x-forwarded-proto")
        .is_some_and(|p| p.trim().eq_ignore_ascii_case("https"));
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
        if let Err(e) = ex.shared.lock().db.remove_login(hash) {
            return Reply::db_failed(&e);
        }
    }
    Reply::no_content().header(
        "set-cookie",
        format!(
            "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0",
            cookie_name(ex)
        ),
    )
}

/// `GET /page/api/state?since=V&wait=S`.
fn state(ex: &Exchange<'_>, who: &Who) -> Option<Reply> {
    let since = match query_param(&ex.query, "since") {
        None => None,
        Some(Ok(v)) => match v.trim().parse::<u64>() {
            Ok(v) => Some(v),
            Err(_) => return Some(Reply::error(400, "malformed since")),
        },
        Some(Err(())) => return Some(Reply::error(400, "malformed since")),
    };
    let wait = match query_param(&ex.query, "wait") {
        None => 0.0,
        Some(Ok(w)) => match w.trim().parse::<f64>() {
            Ok(w) if w.is_finite() => w.clamp(0.0, STATE_WAIT_MAX_S),
            _ => return Some(Reply::error(400, "malformed wait")),
        },
        Some(Err(())) => return Some(Reply::error(400, "malformed wait")),
    };
    let started = Instant::now();
    let mut deadline = started + Duration::from_secs_f64(wait);
    let mut st = ex.shared.lock();
    // A message's view changes by itself when it expires unacknowledged: answer then too.
    if let Ok(Some(next)) = st.db.next_expiry(st.now_ms()) {
        let until = Duration::from_millis((next - st.now_ms()).max(0) as u64 + 50);
        deadline = deadline.min(started + until);
    }
    loop {
        if st.generation != ex.generation || st.stopped {
            return None;
        }
        let now = Instant::now();
        if since != Some(st.version) || now >= deadline {
            break;
        }
        st = ex
            .shared
            .changed
            .wait_timeout(st, deadline - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    let now_ms = st.now_ms();
    let sessions = match st.db.page_sessions(now_ms, LIVE.as_millis() as i64) {
        Ok(s) => s,
        Err(e) => return Some(Reply::db_failed(&e)),
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
    if let Who::Cookie { csrf, .. } = who {
        body.insert("csrf".into(), csrf.clone().into());
    }
    if let Some(signing) = super::signed::page_signing(&st) {
        body.insert("signing".into(), signing);
    }
    body.insert("sessions".into(), Value::Array(sessions));
    Some(Reply::json(200, Value::Object(body)))
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
    ex.shared.changed.notify_all();
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
    let log = st.db.push_log(50).unwrap_or_default();
    Reply::json(
        200,
        serde_json::json!({"vapid": vapid, "devices": devices,
            "ntfy": ntfy.map(|u| serde_json::json!({"url": u, "token": has_token})),
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
            if !url.is_empty() && !crate::push::allowed_url(url) {
                return Reply::error(400, "ntfy url must be https (http only to loopback)");
            }
            let url = (!url.is_empty()).then_some(url);
            let token = text(&body["token"], 200).filter(|t| !t.is_empty() && url.is_some());
            let r = st
                .db
                .set_setting("ntfy_url", url, now)
                .and_then(|_| st.db.set_setting("ntfy_token", token.as_deref(), now));
            if let Err(e) = r {
                return Reply::db_failed(&e);
            }
            serde_json::json!({"ntfy": url.is_some()})
        }
        _ => return Reply::error(400, "op must be subscribe, remove, quiet or ntfy"),
    };
    st.bump();
    drop(st);
    ex.shared.changed.notify_all();
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
    if parse_session_key(session).is_none() {
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
    use serde_json::json;

    #[test]
    fn routes() {
        assert_eq!(classify("GET", "/"), Some(Ok(PageRoute::Index)));
        assert_eq!(classify("POST", "/"), Some(Err("GET")));
        assert_eq!(classify("POST", "/login"), Some(Ok(PageRoute::Login)));
        assert_eq!(classify("GET", "/page/api/enqueue"), Some(Err("POST")));
        assert_eq!(classify("GET", "/nope"), None);
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
    fn secrets_compare() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert_ne!(csrf_for("a"), csrf_for("b"));
        assert_eq!(random_hex().unwrap().len(), 64);
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
