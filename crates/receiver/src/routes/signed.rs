//! Signed control, the receiver's side (DECISIONS 22; docs/protocol.md#control-2, #control-3.3 and
//! docs/protocol.md#http-3). The receiver carries; it never signs and never adds a key on its own.
//!
//! | route | auth | answers |
//! |---|---|---|
//! | `POST {control}/pair` | sink token | 201 `{machine, code, url, check, expires_at}` |
//! | `GET {control}/pair?code=` | sink token | 200 `{status: pending}` / `{status: paired, key, proof, token?}` / `{status: expired}`; 404 unknown code |
//! | `GET {control}?machine=&wait=` | that machine's token | 200 `{messages: [envelope…]}` (redelivered until acked), 204 when the wait runs out |
//! | `POST {control}/off` | a machine's token | 200 `{}`: the machine, its keys and its queue are forgotten |
//! | `GET /page/api/pairing?code=` | login | the pairing as the page shows it (machine, name, check digits, status) |
//! | `POST /page/api/pairing` | login + CSRF | `{code, key, proof}` from the page's passkey; 200 once the proof verifies |
//! | `POST /page/api/signed` | login + CSRF | `{cmd, csig, grant}` signed on the page; 200 the queued envelope; 400 with the verifier's `code` when the early check (docs/protocol.md#control-5, against the keys this receiver carried) refuses it |
//! | `POST /page/api/files?machine=` | login + CSRF | a start's file, the body its bytes (at most 8 MiB): kept in the database for that machine until the start it comes with has expired; 200 `{sha256, size}` (base64url SHA-256, as a start's `files` name it); 404 no such machine |
//! | `GET {control}/files/{sha256}` | that machine's token | 200 the file's bytes, only to the machine it was uploaded for; 404 otherwise or once expired |
//! | `GET /page/api/signed/ack?id=` | login | 200 `{id, ack}`: the final ack of a command queued from a page (`null` until it comes; what a start's form shows, its session having no events yet); 404 unknown id |
//!
//! Every route answers 404 without signed control (the `control` capability and an rp id).
//! | `POST /page/api/machines/remove` | login + CSRF | `{machine}`: that machine's token, keys and queue are forgotten; 404 unknown |
//!
//! The machine token is made when the machine's first pairing is first reported `paired`,
//! handed over in that one answer, and stored only as its SHA-256. A paired machine sends
//! everything with it, events too (DECISIONS 33): each session belongs to the machine whose
//! token its events came with, and the page signs each command for its session's machine (a
//! command for another machine would be refused `wrong_machine` there, never run). The shared
//! sink token still serves unpaired senders; their sessions belong to no machine.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::auth::{token_hash, Csrf, Login, MachineToken, SignedOffered, SinkToken};
use crate::body::{self, OtherJson};
use crate::db::{Approval, NewPairing};
use crate::error::{json_reply, ApiError, Reply};
use crate::longpoll;
use crate::options::{HELLO_PATH, OFF_PATH, PAIR_PATH};
use crate::state::{AppState, Ctx as St};
use crate::validate::{format_ms_timestamp, prompt_mode};
use spwire::signed::{self as wire, Assertion, TrustedKey};
use spwire::split_session_key;

use super::Q;

/// How long a pairing code is good for.
const PAIR_TTL: Duration = Duration::from_secs(10 * 60);
/// The longest an envelope is carried (docs/protocol.md#control-3.3).
const ENVELOPE_MAX: Duration = Duration::from_secs(24 * 3600);
/// The most a command string may be (docs/protocol.md#control-3.1).
const CMD_MAX: usize = 48_000;
/// The receiver's early check passes commands signed at most this long ago (docs/protocol.md#control-5).
const EARLY_MAX_AGE_MS: i64 = 10 * 60 * 1000;
/// A machine poll looks at the database at least this often, so a row written by another
/// process (an administrator's, or a test's) is served without waiting out the poll.
const RECHECK: Duration = Duration::from_secs(1);

/// The machines' routes (pairing and leaving; their poll is `protocol.rs`'s `GET {control}`).
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route(PAIR_PATH, post(pair_start).get(pair_status))
        .route(OFF_PATH, post(off))
        .route(HELLO_PATH, post(hello))
        .route(FILES_ROUTE, get(machine_file))
}

/// The page's routes for signed control (under the page's layers, `page.rs`).
pub(crate) fn page_router() -> Router<AppState> {
    Router::new()
        .route("/page/api/pairing", get(page_pairing).post(page_approve))
        .route("/page/api/signed", post(page_signed))
        .route("/page/api/signed/ack", get(page_signed_ack))
        .route("/page/api/files", post(page_file))
        .route("/page/api/machines/remove", post(page_remove_machine))
}

fn random_bytes(n: usize) -> Result<Vec<u8>, ApiError> {
    use std::io::Read;
    let mut b = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| {
            tracing::error!("cannot read /dev/urandom: {e}");
            ApiError::internal()
        })?;
    Ok(b)
}

fn random_b64url(n_bytes: usize, len: usize) -> Result<String, ApiError> {
    let mut s = wire::b64url(&random_bytes(n_bytes)?);
    s.truncate(len);
    Ok(s)
}

fn ms_to_wire(ms: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format_ms_timestamp(t)
}

/// `POST {control}/pair`'s body (may be empty).
#[derive(Deserialize, Default)]
struct PairStart {
    /// The machine's name, shown on the page (cut to 80 characters).
    name: Option<String>,
    /// A machine already paired here pairing again (a new key), or one removed here whose
    /// sessions are still bound to it (it takes them back).
    machine: Option<String>,
}

/// `POST {control}/pair`.
async fn pair_start(
    State(app): State<AppState>,
    _: SignedOffered,
    _: SinkToken,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    let read = body::read_other(&app, &headers, body).await?;
    let asked: PairStart = if read.bytes.iter().all(u8::is_ascii_whitespace) {
        PairStart::default()
    } else {
        read.json()?
    };
    let name = asked.name.map(|n| n.chars().take(80).collect::<String>());
    let code = random_b64url(16, 22)?;
    let r = random_bytes(4)?;
    let check = format!(
        "{:06}",
        u32::from_le_bytes([r[0], r[1], r[2], r[3]]) % 1_000_000
    );
    let fresh_id = format!("m_{}", random_b64url(17, 22)?);
    let port = app.shared.addr.port();
    let out = app
        .shared
        .with_db(move |st| -> Result<Value, ApiError> {
            let machine = match asked.machine {
                Some(m) if st.db.machine_known(&m)? || st.db.machine_has_sessions(&m)? => m,
                _ => fresh_id,
            };
            let now = st.now_ms();
            let expires = now + PAIR_TTL.as_millis() as i64;
            let pairing = NewPairing {
                code: &code,
                machine: &machine,
                check: &check,
                name: name.as_deref(),
                expires_ms: expires,
            };
            st.db.create_pairing(&pairing, now)?;
            let url = format!("{}/pair?code={code}", st.page_base(port));
            Ok(
                json!({"machine": machine, "code": code, "url": url, "check": check,
                      "expires_at": ms_to_wire(expires)}),
            )
        })
        .await?;
    Ok(json_reply(StatusCode::CREATED, out))
}

/// A pairing's code, from the query's `code`: 400 `missing code` without one.
struct PairingCode(String);

impl<S: Send + Sync> FromRequestParts<S> for PairingCode {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        #[derive(Deserialize)]
        struct CodeQuery {
            code: Option<String>,
        }
        let Q(q) = Q::<CodeQuery>::from_request_parts(parts, state).await?;
        q.code
            .map(PairingCode)
            .ok_or_else(|| ApiError::bad_request("missing code"))
    }
}

/// A pairing not (yet) approved: `expired` once past `expires_ms`, else `pending`.
fn unpaired_status(expires_ms: i64, now_ms: i64) -> &'static str {
    if expires_ms <= now_ms {
        "expired"
    } else {
        "pending"
    }
}

/// `GET {control}/pair?code=`.
async fn pair_status(
    State(app): State<AppState>,
    _: SignedOffered,
    _: SinkToken,
    PairingCode(code): PairingCode,
) -> Reply {
    let token = random_b64url(32, 43)?;
    let out = app
        .shared
        .with_db(move |st| -> Result<Value, ApiError> {
            let p = st.db.pairing(&code)?.ok_or_else(ApiError::not_found)?;
            let (Some(key), Some(proof)) = (&p.key, &p.proof) else {
                let status = unpaired_status(p.expires_ms, st.now_ms());
                return Ok(json!({ "status": status }));
            };
            let key: Value = serde_json::from_str(key).unwrap_or(Value::Null);
            let proof: Value = serde_json::from_str(proof).unwrap_or(Value::Null);
            let mut out = json!({"status": "paired", "key": key, "proof": proof});
            if !p.token_given && st.db.give_token(&code, &token_hash(&token))? {
                out["token"] = token.into();
            }
            Ok(out)
        })
        .await?;
    Ok(json_reply(StatusCode::OK, out))
}

/// `GET {control}?machine=&wait=`: the one poll per machine. `wait` is already clamped.
/// `token_of` is the machine the request's bearer token names, if any.
pub(crate) async fn machine_poll(
    app: &AppState,
    token_of: Option<String>,
    machine: String,
    wait: f64,
) -> Reply {
    if !crate::auth::signed_on(app) {
        return Err(ApiError::not_found());
    }
    if token_of.as_deref() != Some(machine.as_str()) {
        return Err(ApiError::unauthorized());
    }
    let deadline = Instant::now() + Duration::from_secs_f64(wait);
    let who = format!("machine:{machine}");
    longpoll::poll(app, deadline, Some(RECHECK), who, move |st| {
        st.db.machine_pending(&machine, st.now_ms())
    })
    .await
}

/// `POST {control}/hello`'s body: what the machine can start (DECISIONS 39). Informational:
/// the machine checks every start itself.
#[derive(Deserialize)]
struct Hello {
    #[serde(default)]
    harnesses: Vec<String>,
    #[serde(default)]
    folders: Vec<String>,
    #[serde(default)]
    files: bool,
}

/// `POST {control}/hello` (the machine's token): kept per machine, in memory until the next
/// hello, for the page's New session form.
async fn hello(
    State(app): State<AppState>,
    _: SignedOffered,
    MachineToken(machine): MachineToken,
    OtherJson(h, _read): OtherJson<Hello>,
) -> Reply {
    let name_ok = |s: &String| {
        (1..=40).contains(&s.len())
            && s.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if h.harnesses.len() > 20 || !h.harnesses.iter().all(name_ok) {
        return Err(ApiError::bad_request("harnesses: at most 20 harness names"));
    }
    if h.folders.len() > 50
        || !h
            .folders
            .iter()
            .all(|f| f.starts_with('/') && f.len() <= 1024 && !f.contains('\0'))
    {
        return Err(ApiError::bad_request(
            "folders: at most 50 absolute paths of at most 1024 bytes",
        ));
    }
    let can = json!({"harnesses": h.harnesses, "folders": h.folders, "files": h.files});
    app.shared
        .with_db(move |st| {
            st.mem().can_start.insert(machine, can);
            st.bump();
            Ok::<_, ApiError>(())
        })
        .await?;
    Ok(json_reply(StatusCode::OK, json!({})))
}

/// `POST {control}/off`: reads no body, only its token matters.
async fn off(
    State(app): State<AppState>,
    _: SignedOffered,
    MachineToken(machine): MachineToken,
) -> Reply {
    app.shared
        .with_db(move |st| {
            st.db.remove_machine(&machine)?;
            st.bump();
            Ok::<_, ApiError>(())
        })
        .await?;
    Ok(json_reply(StatusCode::OK, json!({})))
}

/// The machine a session's signed commands are for (DECISIONS 33): the one place the
/// receiver decides it, from the paired machine whose token the session's events came with;
/// `None` without signed control, for a session the shared sink token sent, or one whose
/// machine was removed. Returns the machine's id and the name it paired with.
pub(crate) fn session_machine(st: &mut St, session: &str) -> Option<(String, Option<String>)> {
    if !st.signed() {
        return None;
    }
    let id = st.db.session_machine(session).ok().flatten().flatten()?;
    let name = st
        .db
        .machines()
        .ok()?
        .into_iter()
        .find(|m| m.machine == id)
        .and_then(|m| m.name);
    Some((id, name))
}

/// What the service worker needs to answer `session`'s prompt from its notification with a
/// signed command (`page/sw.js`): the session's machine and the rp id of the day key.
pub(crate) fn push_answer(st: &mut St, session: &str) -> Option<crate::push::Answer> {
    Some(crate::push::Answer {
        machine: session_machine(st, session)?.0,
        rp_id: st.opts.rp_id.clone()?,
    })
}

/// What the page's state answer says about signing: `{rp_id, machine?, name?, machines}`.
/// `machines` lists every paired machine (DECISIONS 33) with its keys, its last contact and
/// the Away word it last heard; the page signs each command for its session's `machine_id`.
/// `machine` and `name` (the most recent pairing) stay for an older page.
pub(crate) fn page_signing(st: &mut St) -> Option<Value> {
    if !st.signed() {
        return None;
    }
    let mut v = json!({"rp_id": st.opts.rp_id});
    if let Ok(Some(m)) = st.db.latest_machine() {
        v["machine"] = m.machine.into();
        v["name"] = m.name.into();
    }
    let mut machines = Vec::new();
    for row in st.db.machines().unwrap_or_default() {
        let (id, paired) = (row.machine.clone(), row.paired_ms);
        let seen = row.seen_ms.unwrap_or(paired).max(paired);
        let mut m = json!(row);
        m["paired_at"] = ms_to_wire(paired).into();
        m["last_at"] = ms_to_wire(seen).into();
        if let Some(away) = st.mem().away_told.get(&format!("machine:{id}")).copied() {
            m["away"] = away.into();
        }
        // DECISIONS 39: what its last hello said it can start.
        if let Some(can) = st.mem().can_start.get(&id).cloned() {
            m["can_start"] = can;
        }
        machines.push(m);
    }
    v["machines"] = Value::Array(machines);
    Some(v)
}

/// `POST /page/api/machines/remove`'s body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RemoveMachine {
    machine: String,
}

/// `POST /page/api/machines/remove` `{machine}` (login + CSRF): "Remove machine" on the page
/// ends that machine's token and keys and drops what is queued for it; no other machine's
/// (DECISIONS 33). 404 when no such machine is paired.
async fn page_remove_machine(
    State(app): State<AppState>,
    _: Csrf,
    _: SignedOffered,
    OtherJson(RemoveMachine { machine }, _read): OtherJson<RemoveMachine>,
) -> Reply {
    app.shared
        .with_db(move |st| {
            if !st.db.remove_machine(&machine)? {
                return Err(ApiError::not_found());
            }
            st.mem().away_told.remove(&format!("machine:{machine}"));
            st.touch(format!("machine:{machine}"));
            st.bump();
            tracing::info!("machine {machine} removed from the page");
            Ok::<_, ApiError>(())
        })
        .await?;
    Ok(json_reply(StatusCode::OK, json!({})))
}

/// `GET /page/api/pairing?code=`.
async fn page_pairing(
    State(app): State<AppState>,
    _: Login,
    _: SignedOffered,
    PairingCode(code): PairingCode,
) -> Reply {
    let out = app
        .shared
        .with_db(move |st| -> Result<Value, ApiError> {
            let p = st.db.pairing(&code)?.ok_or_else(ApiError::not_found)?;
            let status = if p.key.is_some() {
                "paired"
            } else {
                unpaired_status(p.expires_ms, st.now_ms())
            };
            Ok(
                json!({"code": code, "machine": p.machine, "name": p.name, "check": p.check,
                   "status": status, "expires_at": ms_to_wire(p.expires_ms), "rp_id": st.opts.rp_id}),
            )
        })
        .await?;
    Ok(json_reply(StatusCode::OK, out))
}

/// `POST /page/api/pairing`'s body: what the page's passkey made.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Approve {
    code: String,
    key: TrustedKey,
    proof: Assertion,
}

/// `POST /page/api/pairing` `{code, key: {id, alg, spki}, proof: {cred, ad, cd, sig}}`.
/// The receiver checks the proof as the machine will (a courtesy: the machine checks again)
/// and keeps exactly what the page sent.
async fn page_approve(
    State(app): State<AppState>,
    _: Csrf,
    OtherJson(Approve { code, key, proof }, _read): OtherJson<Approve>,
) -> Reply {
    let Some(rp_id) = app
        .shared
        .opts
        .rp_id
        .clone()
        .filter(|_| crate::auth::signed_on(&app))
    else {
        return Err(ApiError::not_found());
    };
    let machine = app
        .shared
        .with_db(move |st| -> Result<String, ApiError> {
            let p = st.db.pairing(&code)?.ok_or_else(ApiError::not_found)?;
            if let Err(why) = wire::verify_enrollment(&p.machine, &code, &key, &proof, &rp_id) {
                return Err(ApiError::bad_request(&format!(
                    "the passkey's proof does not verify: {why}"
                )));
            }
            let proof_v =
                json!({"cred": proof.cred, "ad": proof.ad, "cd": proof.cd, "sig": proof.sig});
            let approval = Approval {
                key: &key,
                proof: &proof_v,
            };
            let now = st.now_ms();
            if !st.db.approve_pairing(&code, &approval, now)? {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "the pairing is no longer pending",
                ));
            }
            st.bump();
            Ok(p.machine)
        })
        .await?;
    Ok(json_reply(
        StatusCode::OK,
        json!({"status": "paired", "machine": machine}),
    ))
}

/// `POST /page/api/signed`'s body: a command the page signed, with its day grant (or a
/// passkey's confirmation), and a prompt's `mode` beside it (DECISIONS 25).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignedReq {
    cmd: String,
    csig: Option<String>,
    grant: Option<Value>,
    confirm: Option<Value>,
    mode: Option<String>,
}

/// What a signed command says it is, read before it is carried.
struct Cmd {
    machine: String,
    session: String,
    kind: String,
}

fn shape_ok(v: &Value, keys: &[&str]) -> bool {
    keys.iter().all(|k| {
        v.get(*k)
            .and_then(Value::as_str)
            .is_some_and(|s| s.len() <= 16_000)
    })
}

/// Checks a signed command's shape; returns what it names and the envelope's fields beside
/// `cmd` (`csig` and `grant`, or `confirm`; `mode`).
fn check_signed(req: &SignedReq) -> Result<(Cmd, Map<String, Value>), ApiError> {
    if req.cmd.len() > CMD_MAX {
        return Err(ApiError::bad_request("cmd is longer than 48000 characters"));
    }
    let parsed: Value = match serde_json::from_str(&req.cmd) {
        Ok(v @ Value::Object(_)) => v,
        _ => return Err(ApiError::bad_request("cmd is not a JSON object")),
    };
    if parsed["t"] != "sessionpipe.control" {
        return Err(ApiError::bad_request(
            "cmd is not a sessionpipe.control command",
        ));
    }
    let text = |k: &str| parsed[k].as_str().unwrap_or_default().to_owned();
    let cmd = Cmd {
        machine: text("machine"),
        session: text("session"),
        kind: text("kind"),
    };
    if !matches!(
        cmd.kind.as_str(),
        "prompt" | "permission.answer" | "cancel" | "start"
    ) {
        return Err(ApiError::bad_request(
            "kind must be prompt, permission.answer, cancel or start",
        ));
    }
    // DECISIONS 36: a start runs an agent; the machine refuses it on the day key alone.
    if cmd.kind == "start" && req.confirm.is_none() {
        return Err(ApiError::bad_request(
            "a start needs your passkey's touch over it (a confirm)",
        ));
    }
    if split_session_key(&cmd.session).is_none() {
        return Err(ApiError::bad_request(
            "malformed session: want <harness>:<id>",
        ));
    }
    let mut env = Map::new();
    if let Some(mode) = prompt_mode(req.mode.as_deref()).map_err(|e| ApiError::bad_request(&e))? {
        if cmd.kind != "prompt" {
            return Err(ApiError::bad_request("mode is for prompts only"));
        }
        env.insert("mode".into(), mode.into());
    }
    match (&req.csig, &req.grant, &req.confirm) {
        (Some(csig), Some(grant), None)
            if csig.len() <= 200 && shape_ok(grant, &["str", "cred", "ad", "cd", "sig"]) =>
        {
            env.insert("csig".into(), csig.clone().into());
            env.insert("grant".into(), grant.clone());
        }
        (None, None, Some(confirm)) if shape_ok(confirm, &["cred", "ad", "cd", "sig"]) => {
            env.insert("confirm".into(), confirm.clone());
        }
        _ => return Err(ApiError::bad_request("want csig and grant, or confirm")),
    }
    Ok((cmd, env))
}

/// `POST /page/api/signed` `{cmd, csig, grant}` (or `{cmd, confirm}`), and a prompt's `mode`:
/// a command the page signed, queued for the machine it names as an envelope `{id, cmd, csig,
/// grant, mode?, at, expires_at}` with `cmd` byte for byte.
async fn page_signed(
    State(app): State<AppState>,
    Csrf(who): Csrf,
    OtherJson(req, _read): OtherJson<SignedReq>,
) -> Reply {
    let (cmd, env) = check_signed(&req)?;
    let login = match &who {
        crate::auth::Who::Cookie { hash, .. } => hash.clone(),
        crate::auth::Who::Bearer => "bearer".to_string(),
    };
    let mut signed = json!({"cmd": req.cmd});
    for k in ["csig", "grant", "confirm"] {
        if let Some(v) = env.get(k) {
            signed[k] = v.clone();
        }
    }
    let signed: wire::SignedCommand = serde_json::from_value(signed).map_err(|_| {
        ApiError::bad_request("malformed: want {cmd, csig, grant} or {cmd, confirm}")
    })?;
    let value = app
        .shared
        .with_db(move |st| {
            if cmd.kind == "start" {
                start_allowed(st, &login)?;
            }
            carry_signed(st, &req.cmd, &cmd, env, &signed)
        })
        .await?;
    Ok(json_reply(StatusCode::OK, value))
}

/// Where a machine fetches a start's file (DECISIONS 39).
const FILES_ROUTE: &str = "/api/sessionpipe/v1/control/files/{sha256}";
/// The largest file the page may upload for a start (this receiver's policy; the protocol
/// allows more, and the machine checks each file's signed size and hash).
pub(crate) const FILE_CAP: usize = 8 << 20;
/// The most start files one login uploads in any hour (with [`FILE_CAP`], this receiver's
/// bound on what its database keeps for starts: 20 starts of 10 files, and some retries).
pub(crate) const UPLOADS_PER_LOGIN_HOUR: usize = 100;

/// `POST /page/api/files?machine=`'s query.
#[derive(Deserialize)]
struct FileQuery {
    machine: String,
}

/// `POST /page/api/files?machine=`: keeps a start's file for that machine, in the database
/// (every receiver on it serves it), until the start it is for could have expired: the
/// page's time to sign it, then the envelope's life.
async fn page_file(
    State(app): State<AppState>,
    Csrf(who): Csrf,
    _: SignedOffered,
    Q(q): Q<FileQuery>,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    let read = body::read_up_to(&app, &headers, body, FILE_CAP).await?;
    if read.bytes.is_empty() {
        return Err(ApiError::bad_request("a file is at least one byte"));
    }
    use base64::Engine as _;
    use sha2::Digest as _;
    let sha = wire::b64url(&sha2::Sha256::digest(&read.bytes));
    let size = read.bytes.len();
    let data = base64::engine::general_purpose::STANDARD.encode(&read.bytes);
    drop(read);
    let login = match &who {
        crate::auth::Who::Cookie { hash, .. } => hash.clone(),
        crate::auth::Who::Bearer => "bearer".to_string(),
    };
    let out = app
        .shared
        .with_db(move |st| -> Result<Value, ApiError> {
            if !st.db.machine_known(&q.machine)? {
                return Err(ApiError::not_found());
            }
            upload_allowed(st, &login)?;
            let life = Duration::from_secs(st.opts.permission_expiry_s).min(ENVELOPE_MAX);
            let expires = st.now_ms() + EARLY_MAX_AGE_MS + life.as_millis() as i64;
            st.db.put_file(&q.machine, &sha, &data, expires)?;
            Ok(json!({"sha256": sha, "size": size}))
        })
        .await?;
    Ok(json_reply(StatusCode::OK, out))
}

/// Counts a file uploaded by `login`, or refuses it `429` past [`UPLOADS_PER_LOGIN_HOUR`]
/// in the last hour.
fn upload_allowed(st: &mut St, login: &str) -> Result<(), ApiError> {
    let now = st.now_ms();
    let mut mem = st.mem();
    within_hourly(
        &mut mem.uploads,
        login,
        now,
        UPLOADS_PER_LOGIN_HOUR,
        "files",
    )
}

/// Counts one more of `what` for `login` in `recent` (times in ms), or refuses it `429` when
/// `cap` were counted in the hour before `now`. Logins with nothing in the hour are forgotten.
fn within_hourly(
    recent: &mut std::collections::HashMap<String, std::collections::VecDeque<i64>>,
    login: &str,
    now: i64,
    cap: usize,
    what: &str,
) -> Result<(), ApiError> {
    let mine = recent.entry(login.to_string()).or_default();
    while mine.front().is_some_and(|t| now - t >= 3_600_000) {
        mine.pop_front();
    }
    if mine.len() >= cap {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            &format!("too many {what}: at most {cap} an hour from one login here; try again later"),
        ));
    }
    mine.push_back(now);
    recent.retain(|_, v| !v.is_empty());
    Ok(())
}

/// `GET {control}/files/{sha256}`: a start's file, to the machine it was uploaded for only.
async fn machine_file(
    State(app): State<AppState>,
    _: SignedOffered,
    MachineToken(machine): MachineToken,
    axum::extract::Path(sha): axum::extract::Path<String>,
) -> Result<axum::response::Response, ApiError> {
    if sha.len() != 43 {
        return Err(ApiError::not_found());
    }
    let data = app
        .shared
        .with_db(move |st| -> Result<Option<String>, ApiError> {
            let now = st.now_ms();
            Ok(st.db.file(&machine, &sha, now)?)
        })
        .await?
        .ok_or_else(ApiError::not_found)?;
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|_| ApiError::internal())?;
    axum::response::Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/octet-stream")
        .body(Body::from(bytes))
        .map_err(|_| ApiError::internal())
}

/// `GET /page/api/signed/ack?id=`'s query.
#[derive(Deserialize)]
struct AckQuery {
    id: String,
}

/// `GET /page/api/signed/ack?id=`: a queued command's final ack, from the database every
/// receiver on it shares. A start's form waits on it: its session shows no events until
/// the agent's hooks send them, and a refusal (folder, start_limit, file) comes only here.
async fn page_signed_ack(
    State(app): State<AppState>,
    _: Login,
    _: SignedOffered,
    Q(q): Q<AckQuery>,
) -> Reply {
    if q.id.is_empty() || q.id.len() > 64 || !q.id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(ApiError::bad_request("id is a queued message's id"));
    }
    let out = app
        .shared
        .with_db(move |st| -> Result<Value, ApiError> {
            if st.db.message_session(&q.id)?.is_none() {
                return Err(ApiError::not_found());
            }
            let ack = st.db.first_ack(&q.id)?.unwrap_or(Value::Null);
            Ok(json!({"id": q.id, "ack": ack}))
        })
        .await?;
    Ok(json_reply(StatusCode::OK, out))
}

/// DECISIONS 39: the most starts one login queues in any hour (the receiver's policy, before
/// it queues; each machine's own `control.start_limit` is the gate).
pub(crate) const STARTS_PER_LOGIN_HOUR: usize = 20;

/// Counts a start for `login`, or refuses it `429` past [`STARTS_PER_LOGIN_HOUR`].
fn start_allowed(st: &mut St, login: &str) -> Result<(), ApiError> {
    let now = st.now_ms();
    let mut mem = st.mem();
    within_hourly(&mut mem.starts, login, now, STARTS_PER_LOGIN_HOUR, "starts")
}

/// The receiver's early word on a signed command (docs/protocol.md#control-5, a courtesy: the machine
/// checks again, and is the gate): the reference verifier against the keys this receiver
/// carried for the machine, so a command the machine would refuse is refused here, where the
/// person sees why. Then the envelope is queued for the machine.
fn carry_signed(
    st: &mut St,
    cmd_text: &str,
    cmd: &Cmd,
    env: Map<String, Value>,
    signed: &wire::SignedCommand,
) -> Result<Value, ApiError> {
    if !st.db.machine_known(&cmd.machine)? {
        return Err(ApiError::bad_request("cmd names no machine paired here"));
    }
    let trusted = st.db.machine_keys(&cmd.machine)?;
    let rp_id = st.opts.rp_id.clone().unwrap_or_default();
    let opts = wire::VerifyOptions {
        machine: &cmd.machine,
        rp_id: &rp_id,
        trusted: &trusted,
        now: st.now_ms(),
        max_age_ms: EARLY_MAX_AGE_MS,
    };
    if let Err(r) = wire::verify_command(signed, &opts, None) {
        return Err(
            ApiError::bad_request(&format!("refused: {}: {}", r.code.as_str(), r.why))
                .with("code", r.code.as_str().into()),
        );
    }
    let life_s = if cmd.kind == "prompt" {
        st.opts.prompt_expiry_s
    } else {
        st.opts.permission_expiry_s
    };
    let life = Duration::from_secs(life_s).min(ENVELOPE_MAX);
    let now = st.now_ms();
    let expires = now + life.as_millis() as i64;
    let mut out = Map::new();
    out.insert("id".into(), ulid::Ulid::new().to_string().into());
    out.insert("cmd".into(), cmd_text.into());
    out.extend(env);
    out.insert("at".into(), ms_to_wire(now).into());
    out.insert("expires_at".into(), ms_to_wire(expires).into());
    let value = Value::Object(out);
    st.db
        .insert_envelope(&cmd.machine, &cmd.session, &cmd.kind, &value, expires, now)?;
    st.touch(format!("machine:{}", cmd.machine));
    st.bump();
    Ok(value)
}
