//! The page: where a person answers from a phone. Plain HTML, CSS and a little JavaScript
//! (`page/*`, embedded by `assets.rs`), served by the receiver itself; no build step. Every
//! route here sits under two layers: the `Host` check ([`crate::auth::page_host`]) and the
//! security headers (tower-http's `SetResponseHeaderLayer`); login and CSRF are extractors
//! (`auth.rs`). Bodies are typed (serde, unknown fields refused); a page message's own rules
//! are checked by [`page_message`], which names the rule broken.
//!
//! | route | auth | answers |
//! |---|---|---|
//! | `GET /` | login | 200 the page; 401 with the login form |
//! | `GET /login` | none | 200 the login form |
//! | `GET /`, `/pair`, `/login` by a browser at an IP address | none | 307 to `localhost` (same port and path) or the `--public-url`, where passkeys work ([`crate::auth::page_host`]) |
//! | `POST /login` | the login token | 303 to `/` with the login cookie; 401 with the form again; 429 past the login limits; 413 over 16 KiB |
//! | `POST /logout` | login + CSRF | 204, the cookie cleared and the login forgotten |
//! | `GET /assets/{app.css,app.js,login.js,icon…}`, `/manifest.webmanifest`, `/sw.js` | none | the static files (nothing secret) |
//! | `GET /page/api/state?since=V&wait=S` | login | 200 sessions, open prompts (and `cleared`: those ended lately, and how), messages and outcomes, the prompts put off (`snoozed`); held up to S (≤ 25) seconds until the state's version differs from V (or a prompt put off comes back) |
//! | `POST /page/api/enqueue` | login + CSRF | 200 the queued message; 400 naming what is wrong |
//! | `POST /page/api/away` | login + CSRF | `{"away": bool}`: the Away switch; 200 `{"away"}` |
//! | `GET /page/api/push`, `POST /page/api/push` `{"op": "subscribe" \| "remove" \| "quiet" \| "quiet_hours" \| "ntfy", …}` | login (+ CSRF to post) | telling the person (`push/`): the devices, ntfy and the push log; 400 naming what is wrong |
//! | `GET /pair?code=` | login | the page, opened on its pairing view (signed control) |
//! | `/page/api/pairing`, `/page/api/signed` | login (+ CSRF to post) | signed control: see `signed.rs` |
//! | `POST /page/api/snooze` | login + CSRF | "Not now": see `snooze.rs` |
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
//! kept with the login in the database so every receiver on it knows it (nothing derives it
//! from the cookie, and it opens nothing without the cookie), and a custom header
//! cannot be sent cross-site without a CORS preflight, which is never granted. Such requests
//! are refused (403 `csrf`) when their `Origin` is not this host or `Sec-Fetch-Site` says
//! cross-site. `POST /login` checks the same. Every page route answers only a `Host` this
//! receiver is (`--public-url`'s, or localhost / an IP address; 403
//! `host_not_allowed` otherwise), so a DNS-rebound name cannot reach it. Login attempts are
//! limited per client (5 a minute) and overall (30 a minute), counted in the database so
//! receivers sharing one count them together, answering 429 with
//! `retry-after`; a wrong login token also costs half a second. Every answer carries
//! `cache-control: no-store`; HTML adds a strict Content-Security-Policy (scripts from this
//! origin only, no framing), `x-frame-options: DENY`, `x-content-type-options: nosniff` and
//! `referrer-policy: same-origin` (not `no-referrer`, which makes browsers send `Origin: null`
//! on form posts). Tokens are compared in constant time. The service worker (`page/sw.js`)
//! keeps only the static shell (never an API answer, never a post) in its own cache, for
//! when the receiver cannot be reached.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tower_http::set_header::SetResponseHeaderLayer;

use crate::auth::{
    client_ip, cookie_name, is_https, page_host, random_hex, same_secret, sha256_hex, token_fp,
    Csrf, Login, MaybeLogin, SameOrigin, Who, LOGIN_TTL,
};
use crate::body;
use crate::error::{clip, json_reply, ApiError, Reply};
use crate::longpoll;
use crate::state::{AppState, Ctx as St};
use crate::validate::{format_ms_timestamp, prompt_mode, str_field};
use spwire::split_session_key;

use super::assets::{INDEX_HTML, LOGIN_HTML};
use super::{assets, enqueued, signed, snooze, wait_s, Q};

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

/// The page's routes (its static files and signed control's page routes included), under
/// the `Host` check and the security headers.
pub(crate) fn router(app: &AppState) -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/pair", get(index))
        .route("/login", get(login_form).post(login))
        .route("/logout", post(logout))
        .route("/page/api/state", get(state))
        .route("/page/api/enqueue", post(enqueue))
        .route("/page/api/away", post(away))
        .route("/page/api/push", get(push_state).post(push_set))
        .merge(signed::page_router())
        .merge(snooze::page_router())
        .merge(assets::router())
        .route_layer(middleware::from_fn_with_state(app.clone(), page_host))
        // Every page answer: `nosniff` and `referrer-policy: same-origin` (not `no-referrer`,
        // which makes browsers send `Origin: null` on form posts); HTML adds the
        // Content-Security-Policy and `x-frame-options: DENY`.
        .layer(SetResponseHeaderLayer::overriding(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::CONTENT_SECURITY_POLICY,
            on_html(CSP),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_FRAME_OPTIONS,
            on_html("DENY"),
        ))
}

/// Whether an answer is an HTML page.
fn is_html(r: &Response) -> bool {
    r.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/html"))
}

/// Only on HTML: `value`.
fn on_html(value: &'static str) -> impl Fn(&Response) -> Option<HeaderValue> + Clone {
    move |r: &Response| is_html(r).then(|| HeaderValue::from_static(value))
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn html(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response()
}

fn login_page(status: StatusCode, error: Option<&str>) -> Response {
    let err = error
        .map(|e| format!("<p class=\"error\" role=\"alert\">{}</p>", html_escape(e)))
        .unwrap_or_default();
    html(status, LOGIN_HTML.replace("<!--error-->", &err))
}

/// `GET /` and `GET /pair?code=`: the page, or the login form (401).
async fn index(MaybeLogin(who): MaybeLogin) -> Response {
    match who {
        Some(_) => html(StatusCode::OK, INDEX_HTML.to_owned()),
        None => login_page(StatusCode::UNAUTHORIZED, None),
    }
}

/// `GET /login`.
async fn login_form() -> Response {
    login_page(StatusCode::OK, None)
}

/// `POST /login`'s form (or JSON) fields.
#[derive(Deserialize, Default)]
struct LoginForm {
    #[serde(default)]
    token: String,
    next: Option<String>,
}

impl LoginForm {
    /// A form body (`token=…&next=…`), or JSON when the content type says so; fields trimmed.
    fn parse(headers: &HeaderMap, bytes: &[u8]) -> LoginForm {
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.to_ascii_lowercase().starts_with("application/json"));
        let form: LoginForm = if json {
            serde_json::from_slice(bytes).unwrap_or_default()
        } else {
            serde_urlencoded::from_bytes(bytes).unwrap_or_default()
        };
        LoginForm {
            token: form.token.trim().to_owned(),
            next: form.next.map(|n| n.trim().to_owned()),
        }
    }
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

/// `POST /login` (anyone's, so its body is capped small): rate-limited per client and
/// overall; a wrong token costs [`LOGIN_FAIL_DELAY`]; the right one gets the login cookie.
async fn login(
    State(app): State<AppState>,
    _: SameOrigin,
    jar: CookieJar,
    req: Request,
) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    let client = client_ip(&app, &parts).unwrap_or(IpAddr::from([0, 0, 0, 0]));
    let read = body::read_login(&app, &parts.headers, body).await?;
    let allowed = app
        .shared
        .with_db(move |st| {
            let now = st.now_ms();
            st.db.take_login_attempt(&client.to_string(), now)
        })
        .await
        .map_err(|e| ApiError::db(&e))?;
    if let Err(wait) = allowed {
        app.shared.limits.hit(
            "login",
            &format_args!("login attempt from {client} over the limit: 429"),
        );
        let why = format!("Too many login attempts; try again in {wait} seconds.");
        let mut r = login_page(StatusCode::TOO_MANY_REQUESTS, Some(&why));
        r.headers_mut().insert(header::RETRY_AFTER, wait.into());
        return Ok(r);
    }
    let form = LoginForm::parse(&parts.headers, &read.bytes);
    let login = app.shared.opts.login_token.clone();
    let Some(login) = login.filter(|l| same_secret(form.token.as_bytes(), l.as_bytes())) else {
        tokio::time::sleep(LOGIN_FAIL_DELAY).await;
        let why = if form.token.is_empty() {
            "Enter the login token."
        } else {
            "That is not the login token."
        };
        return Ok(login_page(StatusCode::UNAUTHORIZED, Some(why)));
    };
    let cookie = random_hex();
    let (hash, fp) = (sha256_hex(&cookie), token_fp(&login));
    app.shared
        .with_db(move |st| {
            let now = st.now_ms();
            st.db.give_back_login_attempt(&client.to_string(), now)?;
            st.db.add_login(&hash, &fp, now)
        })
        .await?;
    let set = Cookie::build((cookie_name(&app, &parts.headers), cookie))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .max_age(time::Duration::seconds(LOGIN_TTL.as_secs() as i64))
        .secure(is_https(&app, &parts.headers));
    let next = next_after_login(form.next.as_deref());
    let answer = (
        StatusCode::SEE_OTHER,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::LOCATION, next.as_str()),
        ],
        "logged in\n",
    );
    Ok((jar.add(set), answer).into_response())
}

/// `POST /logout`: the login forgotten, its cookie cleared.
async fn logout(
    State(app): State<AppState>,
    Csrf(who): Csrf,
    jar: CookieJar,
    headers: HeaderMap,
) -> Reply {
    if let Who::Cookie { hash, .. } = who {
        app.shared
            .with_db(move |st| st.db.remove_login(&hash))
            .await?;
    }
    let clear = Cookie::build((cookie_name(&app, &headers), ""))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .max_age(time::Duration::ZERO)
        .secure(is_https(&app, &headers));
    Ok((jar.add(clear), StatusCode::NO_CONTENT).into_response())
}

/// `GET /page/api/state`'s query.
#[derive(Deserialize)]
struct StateQuery {
    since: Option<String>,
    wait: Option<String>,
}

/// `GET /page/api/state?since=V&wait=S`: held (asynchronously) until the version differs
/// from V, a message expires, or S seconds pass.
async fn state(State(app): State<AppState>, Login(who): Login, Q(q): Q<StateQuery>) -> Reply {
    let since = match q.since {
        None => None,
        Some(v) => Some(
            v.trim()
                .parse::<u64>()
                .map_err(|_| ApiError::bad_request("malformed since"))?,
        ),
    };
    let wait = wait_s(q.wait.as_deref(), 0.0, STATE_WAIT_MAX_S)?;
    let started = Instant::now();
    let mut deadline = started + Duration::from_secs_f64(wait);
    let csrf = match who {
        Who::Cookie { csrf, .. } => Some(csrf),
        Who::Bearer => None,
    };
    // One trip to the blocking pool for the usual request (a first load, or a version the
    // page has not seen): the next expiry and, when it is to be answered now, the state.
    let generation = app.generation;
    let now_csrf = csrf.clone();
    let first = app
        .shared
        .with_db(move |st| {
            if st.mem().cut_since(generation) {
                return Err(());
            }
            // A message's view changes by itself when it expires unacknowledged: answer then too.
            let next = st
                .db
                .next_expiry(st.now_ms())
                .ok()
                .flatten()
                // A prompt put off with "Not now" comes back when its time is up.
                .into_iter()
                .chain(st.db.next_snooze_end(st.now_ms()).ok().flatten())
                .min()
                .map(|n| n - st.now_ms());
            let now = (since != Some(st.mem().version) || wait <= 0.0)
                .then(|| state_body(st, now_csrf.as_deref()));
            Ok((next, now))
        })
        .await;
    let answer = match first {
        Err(()) => None,
        Ok((_, Some(body))) => Some(body),
        Ok((next, None)) => {
            if let Some(in_ms) = next {
                let until = Duration::from_millis(in_ms.max(0) as u64 + 50);
                deadline = deadline.min(started + until);
            }
            longpoll::hold(&app, deadline, None, None, move |st, last| {
                if since == Some(st.mem().version) && !last {
                    return None;
                }
                Some(state_body(st, csrf.as_deref()))
            })
            .await
        }
    };
    match answer {
        Some(body) => Ok(json_reply(StatusCode::OK, body?)),
        None => Err(ApiError::Cut),
    }
}

fn state_body(st: &mut St, csrf: Option<&str>) -> Result<Value, ApiError> {
    // The version before what it covers: a change made meanwhile is then newer than the
    // version the page holds, so its next ask is answered at once.
    let version = st.mem().version;
    let now_ms = st.now_ms();
    let sessions = st.db.page_sessions(now_ms, LIVE.as_millis() as i64)?;
    let mut body = Map::new();
    body.insert("version".into(), version.into());
    body.insert("away".into(), st.db.away().unwrap_or(false).into());
    body.insert("now".into(), format_ms_timestamp(st.now()).into());
    body.insert(
        "permission_expiry_s".into(),
        st.opts.permission_expiry_s.into(),
    );
    body.insert("prompt_expiry_s".into(), st.opts.prompt_expiry_s.into());
    if let Some(csrf) = csrf {
        body.insert("csrf".into(), csrf.into());
    }
    if let Some(signing) = signed::page_signing(st) {
        body.insert("signing".into(), signing);
    }
    body.insert("sessions".into(), Value::Array(sessions));
    // Prompts put off with "Not now" (snooze.rs): every page hides them until then.
    body.insert("snoozed".into(), Value::Array(st.db.snoozes(now_ms)?));
    Ok(Value::Object(body))
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
            "kind"
                | "text"
                | "for"
                | "decision"
                | "note"
                | "expires_in_s"
                | "mode"
                | "scope"
                | "input"
                | "interrupt"
                | "answers"
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
            if let Some(mode) = prompt_mode(str_field(m, "mode")?)? {
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
            rule_30_fields(m, d == "allow", &mut out)?;
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
    if kind != "permission.answer" {
        for k in ["for", "decision", "scope", "input", "interrupt", "answers"] {
            if m.contains_key(k) {
                return Err(format!("{k} is for permission.answer only"));
            }
        }
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

/// DECISIONS 30's optional fields of a page's `permission.answer`, checked by the machine's
/// own rules (spwire), so the page cannot queue what every machine would refuse; they go on
/// the queued message's top level (the unsigned mode).
fn rule_30_fields(
    m: &Map<String, Value>,
    allow: bool,
    out: &mut Map<String, Value>,
) -> Result<(), String> {
    match m.get("scope") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if spwire::control::Scope::parse(s).is_some() => {
            out.insert("scope".into(), s.as_str().into());
        }
        Some(_) => return Err("invalid: scope must be once or session (DECISIONS 30)".into()),
    }
    let rich = spwire::answer::check_rich(m, Some(allow))?;
    if let Some(i) = rich.input {
        out.insert("input".into(), Value::Object(i));
    }
    if rich.interrupt {
        out.insert("interrupt".into(), Value::Bool(true));
    }
    if let Some(a) = rich.answers {
        out.insert("answers".into(), Value::Object(a));
    }
    Ok(())
}

/// `POST /page/api/away`'s body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AwayReq {
    away: bool,
}

/// `POST /page/api/away` `{"away": true|false}`: the person's Away switch. Every machine
/// hears it in its next poll answer (`sessionpipe-away`); polls held now answer at once.
async fn away(State(app): State<AppState>, _: Csrf, headers: HeaderMap, body: Body) -> Reply {
    let AwayReq { away } = body::read_other_json(&app, &headers, body).await?;
    super::set_away(&app, away).await?;
    Ok(json_reply(StatusCode::OK, json!({ "away": away })))
}

/// `GET /page/api/push`: the VAPID key a device subscribes with, the devices (never their
/// endpoints), ntfy (never its token) and the newest push attempts.
async fn push_state(State(app): State<AppState>, _: Login) -> Reply {
    let out =
        app.shared
            .with_db(|st| -> Result<Value, ApiError> {
                let vapid = crate::state::vapid_of(st)?.public();
                let devices: Vec<Value> =
                    st.db
                        .push_devices()?
                        .into_iter()
                        .map(|d| {
                            let hours = d.quiet_hours.as_ref().map(
                                |q| json!({"from": q.from_hhmm(), "to": q.to_hhmm(), "tz": q.tz}),
                            );
                            json!({"id": d.id, "name": d.name, "quiet": d.quiet,
                        "quiet_hours": hours, "since_ms": d.created_ms,
                        "service": crate::push::short_endpoint(&d.sub.endpoint)})
                        })
                        .collect();
                let ntfy = st.db.setting("ntfy_url").ok().flatten();
                let has_token = st.db.setting("ntfy_token").ok().flatten().is_some();
                let content = st.db.setting("ntfy_content").ok().flatten().is_some();
                let log = st.db.push_log(50).unwrap_or_default();
                Ok(json!({"vapid": vapid, "devices": devices,
                "ntfy": ntfy.map(|u| json!({"url": u, "token": has_token, "content": content})),
                "log": log}))
            })
            .await?;
    Ok(json_reply(StatusCode::OK, out))
}

/// A push subscription as the browser's `PushSubscription.toJSON()` gives it (its other keys,
/// such as `expirationTime`, are not kept).
#[derive(Deserialize)]
struct SubscriptionIn {
    endpoint: String,
    keys: SubscriptionKeys,
}

#[derive(Deserialize)]
struct SubscriptionKeys {
    p256dh: String,
    auth: String,
}

/// `POST /page/api/push`'s operations.
#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
enum PushOp {
    /// A device subscribes (`name` is shown on the page; cut off past 80 characters).
    Subscribe {
        subscription: SubscriptionIn,
        name: Option<String>,
    },
    /// A device is forgotten.
    Remove { id: String },
    /// A device stays quiet (or not).
    Quiet { id: String, quiet: bool },
    /// A device's quiet hours, `HH:MM` to `HH:MM` in its IANA time zone `tz`; without
    /// `from` and `to` they end.
    #[serde(rename = "quiet_hours")]
    QuietHours {
        id: String,
        from: Option<String>,
        to: Option<String>,
        tz: Option<String>,
    },
    /// ntfy: an empty url turns it off; `content` sends what the agent asks (clear text).
    Ntfy {
        #[serde(default)]
        url: String,
        token: Option<String>,
        content: Option<bool>,
    },
}

/// `POST /page/api/push` `{"op": …}`: `subscribe` `{subscription: {endpoint, keys:
/// {p256dh, auth}}, name?}`, `remove` `{id}`, `quiet` `{id, quiet}`, `quiet_hours` `{id,
/// from?, to?, tz?}` (`HH:MM` in the device's IANA zone; neither ends them), `ntfy` `{url,
/// token?, content?}` (an empty url turns ntfy off).
async fn push_set(State(app): State<AppState>, _: Csrf, headers: HeaderMap, body: Body) -> Reply {
    let op: PushOp = body::read_other_json(&app, &headers, body).await?;
    let private = app.shared.opts.allow_private_push;
    let done = app
        .shared
        .with_db(move |st| -> Result<Value, ApiError> {
            let done = push_op(st, op, private)?;
            st.bump();
            Ok(done)
        })
        .await?;
    Ok(json_reply(StatusCode::OK, done))
}

fn push_op(st: &mut St, op: PushOp, private: bool) -> Result<Value, ApiError> {
    let now = st.now_ms();
    Ok(match op {
        PushOp::Subscribe { subscription, name } => {
            let s = subscription;
            let sub = crate::push::Subscription::parse(
                &s.endpoint,
                &s.keys.p256dh,
                &s.keys.auth,
                private,
            )
            .map_err(|why| ApiError::bad_request(&format!("subscription: {why}")))?;
            let name = name.filter(|n| n.chars().count() <= 80);
            match st.db.push_subscribe(&sub, name.as_deref(), now)? {
                Some(id) => json!({ "id": id }),
                None => {
                    return Err(ApiError::bad_request(&format!(
                        "this receiver pushes to at most {} devices; remove one first",
                        crate::push::SUBSCRIPTIONS_MAX
                    )))
                }
            }
        }
        PushOp::Remove { id } => match st.db.push_remove(&id)? {
            true => json!({}),
            false => return Err(ApiError::new(StatusCode::NOT_FOUND, "no such device")),
        },
        PushOp::Quiet { id, quiet } => match st.db.push_set_quiet(&id, quiet)? {
            true => json!({ "quiet": quiet }),
            false => return Err(ApiError::new(StatusCode::NOT_FOUND, "no such device")),
        },
        PushOp::QuietHours { id, from, to, tz } => {
            let hours = match (from.as_deref(), to.as_deref()) {
                (None | Some(""), None | Some("")) => None,
                (Some(f), Some(t)) => Some(
                    crate::push::QuietHours::parse(f, t, tz.as_deref().unwrap_or(""))
                        .map_err(|why| ApiError::bad_request(&why))?,
                ),
                _ => {
                    return Err(ApiError::bad_request(
                        "quiet hours: give both from and to (HH:MM), or neither to end them",
                    ))
                }
            };
            if !st.db.push_set_quiet_hours(&id, hours.as_ref())? {
                return Err(ApiError::new(StatusCode::NOT_FOUND, "no such device"));
            }
            json!({"quiet_hours": hours.map(|q| json!({"from": q.from_hhmm(), "to": q.to_hhmm(), "tz": q.tz}))})
        }
        PushOp::Ntfy {
            url,
            token,
            content,
        } => {
            let url = url.trim();
            if url.chars().count() > 500 {
                return Err(ApiError::bad_request(
                    "ntfy url must be at most 500 characters",
                ));
            }
            if !url.is_empty() {
                crate::push::check_url(url, private)
                    .map_err(|why| ApiError::bad_request(&format!("ntfy url {why}")))?;
            }
            let url = (!url.is_empty()).then_some(url);
            let token =
                token.filter(|t| !t.is_empty() && t.chars().count() <= 200 && url.is_some());
            // What the agent asks goes to ntfy (clear text) only when the person asks.
            let content = content.unwrap_or(false) && url.is_some();
            st.db.set_setting("ntfy_url", url, now)?;
            st.db.set_setting("ntfy_token", token.as_deref(), now)?;
            st.db
                .set_setting("ntfy_content", content.then_some("1"), now)?;
            json!({ "ntfy": url.is_some() })
        }
    })
}

/// `POST /page/api/enqueue`'s body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnqueueReq {
    session: String,
    /// `{kind, text?, mode?, for?, decision?, scope?, input?, interrupt?, answers?, note?,
    /// expires_in_s?}`, checked by
    /// [`page_message`] (which names the rule broken).
    message: Map<String, Value>,
}

/// `POST /page/api/enqueue` `{"session": "<harness>:<id>", "message": {kind, text?, mode?,
/// for?, decision?, note?, expires_in_s?}}`.
async fn enqueue(State(app): State<AppState>, _: Csrf, headers: HeaderMap, body: Body) -> Reply {
    let req: EnqueueReq = body::read_other_json(&app, &headers, body).await?;
    if split_session_key(&req.session).is_none() {
        return Err(ApiError::bad_request(
            "malformed session: want <harness>:<id>",
        ));
    }
    let o = &app.shared.opts;
    let (partial, default_ms) =
        page_message(&req.message, o.permission_expiry_s, o.prompt_expiry_s)
            .map_err(|reason| ApiError::bad_request(&reason))?;
    let result = app
        .shared
        .with_db(move |st| st.enqueue(&req.session, &partial, default_ms))
        .await;
    enqueued(result)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for rich in [
            json!({"kind":"permission.answer","for":"p","decision":"allow","scope":"session"}),
            json!({"kind":"permission.answer","for":"p","decision":"allow","input":{"command":"ls"}}),
            json!({"kind":"permission.answer","for":"p","decision":"deny","interrupt":true,"note":"stop"}),
            json!({"kind":"permission.answer","for":"p","decision":"allow","answers":{"Which?":"A"}}),
        ] {
            let (p, _) = page_message(&m(rich.clone()), 120, 3600).unwrap();
            assert_eq!(Value::Object(p), rich, "kept on the queued message");
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
            json!({"kind":"permission.answer","for":"x","decision":"allow","scope":"forever"}),
            json!({"kind":"permission.answer","for":"x","decision":"allow","input":"ls"}),
            json!({"kind":"permission.answer","for":"x","decision":"allow","interrupt":true}),
            json!({"kind":"permission.answer","for":"x","decision":"deny","input":{}}),
            json!({"kind":"permission.answer","for":"x","decision":"allow","answers":{"q":1}}),
            json!({"kind":"prompt","text":"x","scope":"session"}),
        ] {
            assert!(page_message(&m(bad.clone()), 120, 3600).is_err(), "{bad}");
        }
    }
}
