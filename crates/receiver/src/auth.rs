//! Who is asking, as extractors a handler names in its arguments (they run before its body
//! is read, so a stranger's body is never read):
//!
//! * [`SinkToken`]: `Authorization: Bearer <token>`, the senders' token (401 otherwise);
//! * [`ControlOffered`], [`SignedOffered`]: the route exists only with the `control`
//!   capability (and an rp id, for signed control); 404 otherwise;
//! * [`MachineToken`], [`AckAuth`]: a paired machine's token (signed control);
//! * [`Login`], [`MaybeLogin`], [`Csrf`], [`SameOrigin`]: the page's login (its cookie, or
//!   the login token as a bearer) and its CSRF rules (see `routes/page.rs`);
//! * [`page_host`]: the layer that refuses a page request for a `Host` this receiver is not.
//!
//! Secrets are compared in constant time (`subtle`).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum_extra::extract::CookieJar;
use sha2::{Digest, Sha256};

use crate::db::LoginKey;
use crate::error::ApiError;
use crate::state::AppState;

/// How long a login lasts.
pub(crate) const LOGIN_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// The cookie's name over https: the `__Host-` prefix makes browsers refuse it unless it is
/// `Secure`, `Path=/` and set by this very host.
const HTTPS_COOKIE: &str = "__Host-sessionpipe";

/// Constant-time equality (the length is not secret).
pub(crate) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    subtle::ConstantTimeEq::ct_eq(a, b).into()
}

pub(crate) fn sha256_hex(s: &str) -> String {
    Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Identifies the login token a login was made with, without storing it.
pub(crate) fn token_fp(login_token: &str) -> String {
    sha256_hex(&format!("sessionpipe login token|{login_token}"))[..32].to_owned()
}

/// 32 random bytes (the OS's CSPRNG), hex.
pub(crate) fn random_hex() -> String {
    let b: [u8; 32] = rand::random();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What a machine token is stored as.
pub(crate) fn token_hash(token: &str) -> String {
    Sha256::digest(format!("sessionpipe machine token|{token}").as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The bearer token sent, if any.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    header(headers, "authorization")
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim())
}

fn bearer_is(headers: &HeaderMap, token: &str) -> bool {
    bearer(headers).is_some_and(|t| same_secret(t.as_bytes(), token.as_bytes()))
}

/// The senders' token.
pub(crate) struct SinkToken;

impl SinkToken {
    /// 401 unless `headers` carry the senders' token.
    pub fn check(app: &AppState, headers: &HeaderMap) -> Result<SinkToken, ApiError> {
        if bearer_is(headers, &app.shared.opts.token) {
            Ok(SinkToken)
        } else {
            Err(ApiError::unauthorized())
        }
    }
}

impl FromRequestParts<AppState> for SinkToken {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        SinkToken::check(app, &parts.headers)
    }
}

/// The `control` capability is offered.
pub(crate) struct ControlOffered;

impl FromRequestParts<AppState> for ControlOffered {
    type Rejection = ApiError;
    async fn from_request_parts(_: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        if has_control(app) {
            Ok(ControlOffered)
        } else {
            Err(ApiError::not_found())
        }
    }
}

fn has_control(app: &AppState) -> bool {
    app.shared.opts.capabilities.iter().any(|c| c == "control")
}

/// Signed control is on: control offered and an rp id declared.
pub(crate) fn signed_on(app: &AppState) -> bool {
    has_control(app) && app.shared.opts.rp_id.is_some()
}

/// Signed control is offered.
pub(crate) struct SignedOffered;

impl FromRequestParts<AppState> for SignedOffered {
    type Rejection = ApiError;
    async fn from_request_parts(_: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        if signed_on(app) {
            Ok(SignedOffered)
        } else {
            Err(ApiError::not_found())
        }
    }
}

/// The machine whose token the request carries, if any.
pub(crate) async fn bearer_machine(
    app: &AppState,
    headers: &HeaderMap,
) -> Result<Option<String>, ApiError> {
    let Some(t) = bearer(headers) else {
        return Ok(None);
    };
    let hash = token_hash(t);
    Ok(app
        .shared
        .with_db(move |st| {
            let m = st.db.machine_by_token(&hash)?;
            // The page shows each machine's last contact (in the database, for every
            // receiver on it); a failed write costs only that.
            if let Some(m) = &m {
                let now = st.now_ms();
                if let Err(e) = st.db.machine_seen(m, now) {
                    tracing::warn!("machine {m}: its last contact not kept: {e}");
                }
            }
            Ok::<_, anyhow::Error>(m)
        })
        .await?)
}

/// A sender (DECISIONS 33): the shared sink token (`None`: an unpaired or unsigned sender),
/// or a paired machine's own token (`Some(machine)`); 401 otherwise, before any body is read.
pub(crate) struct Sender(pub Option<String>);

impl Sender {
    pub async fn check(app: &AppState, headers: &HeaderMap) -> Result<Sender, ApiError> {
        if bearer_is(headers, &app.shared.opts.token) {
            return Ok(Sender(None));
        }
        match bearer_machine(app, headers).await? {
            Some(m) => Ok(Sender(Some(m))),
            None => Err(ApiError::unauthorized()),
        }
    }
}

impl FromRequestParts<AppState> for Sender {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        Sender::check(app, &parts.headers).await
    }
}

/// A paired machine's token: the machine.
pub(crate) struct MachineToken(pub String);

impl FromRequestParts<AppState> for MachineToken {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        match bearer_machine(app, &parts.headers).await? {
            Some(m) => Ok(MachineToken(m)),
            None => Err(ApiError::unauthorized()),
        }
    }
}

/// Who may ack: the sink token acks unsigned messages (`None`); a machine's token acks that
/// machine's envelopes only (a leaked sink token cannot ack a signed command away).
pub(crate) struct AckAuth(pub Option<String>);

impl FromRequestParts<AppState> for AckAuth {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        if bearer_is(&parts.headers, &app.shared.opts.token) {
            return Ok(AckAuth(None));
        }
        match bearer_machine(app, &parts.headers).await? {
            Some(m) => Ok(AckAuth(Some(m))),
            None => Err(ApiError::unauthorized()),
        }
    }
}

/// Whether the browser talks https to us: built-in TLS, or a trusted proxy that says so.
pub(crate) fn is_https(app: &AppState, headers: &HeaderMap) -> bool {
    let o = &app.shared.opts;
    o.tls.is_some()
        || (o.trust_proxy
            && header(headers, "x-forwarded-proto")
                .is_some_and(|p| p.trim().eq_ignore_ascii_case("https")))
}

/// The login cookie's name: `__Host-sessionpipe` over https; over plain http per port and
/// per instance (its login token).
pub(crate) fn cookie_name(app: &AppState, headers: &HeaderMap) -> String {
    if is_https(app, headers) {
        return HTTPS_COOKIE.to_owned();
    }
    let fp = match &app.shared.opts.login_token {
        Some(l) => sha256_hex(&format!("sessionpipe cookie name|{l}"))[..8].to_owned(),
        None => "none".to_owned(),
    };
    format!("sessionpipe_{}_{fp}", app.shared.addr.port())
}

fn cookie_value(app: &AppState, headers: &HeaderMap) -> Option<String> {
    let jar = CookieJar::from_headers(headers);
    let v = jar
        .get(&cookie_name(app, headers))?
        .value()
        .trim()
        .to_owned();
    (v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit())).then_some(v)
}

/// The client's address: the socket's, or with `--trust-proxy` the last `X-Forwarded-For`
/// entry (the one the proxy added).
pub(crate) fn client_ip(app: &AppState, parts: &Parts) -> Option<IpAddr> {
    if app.shared.opts.trust_proxy {
        if let Some(ip) = header(&parts.headers, "x-forwarded-for")
            .and_then(|v| v.rsplit(',').next())
            .and_then(|v| v.trim().parse::<IpAddr>().ok())
        {
            return Some(ip);
        }
    }
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
}

/// The host the browser asked for: `Host`, or with `--trust-proxy` `X-Forwarded-Host`.
fn asked_host(app: &AppState, headers: &HeaderMap) -> Option<String> {
    let forwarded = if app.shared.opts.trust_proxy {
        header(headers, "x-forwarded-host").and_then(|v| v.split(',').next())
    } else {
        None
    };
    forwarded
        .or_else(|| header(headers, "host"))
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

/// The layer on every page route: 403 `host_not_allowed` for a `Host` that is not this
/// receiver's (no DNS rebinding).
pub(crate) async fn page_host(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let public_url = app.shared.opts.public_url.as_deref();
    let ok = asked_host(&app, req.headers()).is_some_and(|h| host_allowed(&h, public_url));
    if !ok {
        app.shared.limits.hit(
            "host",
            &format_args!(
                "page request for host {:?} refused (not this receiver's)",
                header(req.headers(), "host").unwrap_or("")
            ),
        );
        return ApiError::new(StatusCode::FORBIDDEN, "host_not_allowed").into_response();
    }
    if let Some(to) = passkey_home(&app, &req) {
        return (
            StatusCode::TEMPORARY_REDIRECT,
            [(axum::http::header::LOCATION, to)],
        )
            .into_response();
    }
    next.run(req).await
}

/// The HTML pages a person opens by address; only these move to a name (`passkey_home`):
/// the page's API, its static files and the protocol answer wherever they are asked.
const PAGE_DOCUMENTS: [&str; 3] = ["/", "/pair", "/login"];

/// Where a page a browser opened at an IP address (`http://127.0.0.1:PORT/`, `[::1]`) should be opened
/// instead, when passkeys matter here (an rp id is set): WebAuthn refuses IP addresses, so
/// there login works but nothing can be allowed. `--public-url` with the same path, else
/// `localhost` on the same port. `None`: serve it here.
fn passkey_home(app: &AppState, req: &Request) -> Option<String> {
    let o = &app.shared.opts;
    o.rp_id.as_ref()?;
    // A browser opening a page asks for HTML (every browser's navigation says `text/html`);
    // a script asking for the page at the address gets it where it asked.
    let browser = header(req.headers(), "accept").is_some_and(|a| a.contains("text/html"));
    if !browser
        || !matches!(
            *req.method(),
            axum::http::Method::GET | axum::http::Method::HEAD
        )
        || !PAGE_DOCUMENTS.contains(&req.uri().path())
    {
        return None;
    }
    let asked = asked_host(app, req.headers())?;
    let (host, port) = split_host(&asked);
    host.parse::<IpAddr>().ok()?;
    let path = req
        .uri()
        .path_and_query()
        .map_or("/", axum::http::uri::PathAndQuery::as_str);
    Some(match &o.public_url {
        Some(u) => format!("{}{path}", u.trim_end_matches('/')),
        None => {
            let scheme = if is_https(app, req.headers()) {
                "https"
            } else {
                "http"
            };
            // No port in `Host`: the scheme's own, so none in the name either.
            let port = port.map(|p| format!(":{p}")).unwrap_or_default();
            format!("{scheme}://localhost{port}{path}")
        }
    })
}

/// Whether a browser request comes from this origin: `Origin`, when sent, must be this host
/// (`http://` or `https://`), and `Sec-Fetch-Site`, when sent, same-origin (or none: typed).
fn same_origin(app: &AppState, headers: &HeaderMap) -> bool {
    if let Some(site) = header(headers, "sec-fetch-site") {
        if !matches!(site.trim(), "same-origin" | "none") {
            return false;
        }
    }
    match header(headers, "origin") {
        None => true,
        Some(origin) => {
            let Some(host) = asked_host(app, headers) else {
                return false;
            };
            let origin = origin.trim().to_ascii_lowercase();
            origin == format!("http://{host}") || origin == format!("https://{host}")
        }
    }
}

/// A request from this origin (the login form's post): 403 `csrf` otherwise.
pub(crate) struct SameOrigin;

impl FromRequestParts<AppState> for SameOrigin {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        if same_origin(app, &parts.headers) {
            Ok(SameOrigin)
        } else {
            Err(ApiError::csrf())
        }
    }
}

/// Who is logged in.
pub(crate) enum Who {
    /// The login cookie; carries the stored hash and the CSRF value that goes with it.
    Cookie { hash: String, csrf: String },
    /// `Authorization: Bearer <login token>`.
    Bearer,
}

/// The login, if any: a bearer given is judged alone (the sender's token never opens the
/// page); else the cookie, looked up in the database.
async fn who(app: &AppState, headers: &HeaderMap) -> Result<Option<Who>, ApiError> {
    let Some(login) = app.shared.opts.login_token.clone() else {
        return Ok(None);
    };
    if let Some(t) = bearer(headers) {
        return Ok(same_secret(t.as_bytes(), login.as_bytes()).then_some(Who::Bearer));
    }
    let Some(cookie) = cookie_value(app, headers) else {
        return Ok(None);
    };
    let hash = sha256_hex(&cookie);
    let fp = token_fp(&login);
    let found = app
        .shared
        .with_db(move |st| -> anyhow::Result<Option<Who>> {
            let since = st.now_ms() - LOGIN_TTL.as_millis() as i64;
            // Its CSRF secret, made by whichever receiver is asked first.
            let login = LoginKey {
                hash: &hash,
                token_fp: &fp,
                since_ms: since,
            };
            let Some(csrf) = st.db.login_csrf(login, &random_hex())? else {
                return Ok(None);
            };
            Ok(Some(Who::Cookie { hash, csrf }))
        })
        .await?;
    Ok(found)
}

/// Logged in (401 otherwise).
pub(crate) struct Login(pub Who);

impl FromRequestParts<AppState> for Login {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        who(app, &parts.headers)
            .await?
            .map(Login)
            .ok_or_else(ApiError::unauthorized)
    }
}

/// The login, if there is one.
pub(crate) struct MaybeLogin(pub Option<Who>);

impl FromRequestParts<AppState> for MaybeLogin {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        Ok(MaybeLogin(who(app, &parts.headers).await?))
    }
}

/// Logged in, and for the cookie a state change this origin asked for: `x-sessionpipe-csrf`
/// carries the login's CSRF value and the request is same-origin (403 `csrf` otherwise).
/// A bearer login has no cookie, so no CSRF exposure.
pub(crate) struct Csrf(pub Who);

impl FromRequestParts<AppState> for Csrf {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        let Login(who) = Login::from_request_parts(parts, app).await?;
        if let Who::Cookie { csrf, .. } = &who {
            let sent = header(&parts.headers, "x-sessionpipe-csrf")
                .unwrap_or("")
                .trim();
            if !(same_origin(app, &parts.headers) && same_secret(sent.as_bytes(), csrf.as_bytes()))
            {
                return Err(ApiError::csrf());
            }
        }
        Ok(Csrf(who))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn secrets_compare() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert_ne!(random_hex(), random_hex());
        assert_eq!(random_hex().len(), 64);
    }
}
