//! Signed control, the receiver's side (DECISIONS 22; the reference's CONTROL.md §2, §3.3 and
//! HTTP.md §3). The receiver carries; it never signs and never adds a key on its own.
//!
//! | route | auth | answers |
//! |---|---|---|
//! | `POST {control}/pair` | sink token | 201 `{machine, code, url, check, expires_at}` |
//! | `GET {control}/pair?code=` | sink token | 200 `{status: pending}` / `{status: paired, key, proof, token?}` / `{status: expired}`; 404 unknown code |
//! | `GET {control}?machine=&wait=` | that machine's token | 200 `{messages: [envelope…]}` (redelivered until acked), 204 when the wait runs out |
//! | `POST {control}/off` | a machine's token | 200 `{}`: the machine, its keys and its queue are forgotten |
//! | `GET /page/api/pairing?code=` | login | the pairing as the page shows it (machine, name, check digits, status) |
//! | `POST /page/api/pairing` | login + CSRF | `{code, key, proof}` from the page's passkey; 200 once the proof verifies |
//! | `POST /page/api/signed` | login + CSRF | `{cmd, csig, grant}` signed on the page; 200 the queued envelope; 400 with the verifier's `code` when the early check (CONTROL.md §5, against the keys this receiver carried) refuses it |
//!
//! The machine token is made when the machine's first pairing is first reported `paired`,
//! handed over in that one answer, and stored only as its SHA-256. Sessions reach the page
//! through the sink token, which names no machine: this receiver has one sink token, and the
//! page signs for the most recently paired machine (one machine per sink token; a command for
//! another machine would be refused `wrong_machine` there, never run).

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::http::{parse_json, query_param, Answer, Exchange, Reply};
use super::validate::format_ms_timestamp;
use spwire::signed::{self as wire, Assertion, TrustedKey};
use spwire::split_session_key;

/// How long a pairing code is good for.
const PAIR_TTL: Duration = Duration::from_secs(10 * 60);
/// The longest an envelope is carried (CONTROL.md §3.3).
const ENVELOPE_MAX: Duration = Duration::from_secs(24 * 3600);
/// The most a command string may be (CONTROL.md §3.1).
const CMD_MAX: usize = 48_000;
/// The receiver's early check passes commands signed at most this long ago (CONTROL.md §5).
const EARLY_MAX_AGE_MS: i64 = 10 * 60 * 1000;
/// A machine poll looks at the database at least this often, so a row written by another
/// process (an administrator's, or a test's) is served without waiting out the poll.
const RECHECK: Duration = Duration::from_secs(1);

fn random_bytes(n: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut b = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

fn random_b64url(n_bytes: usize, len: usize) -> std::io::Result<String> {
    let mut s = wire::b64url(&random_bytes(n_bytes)?);
    s.truncate(len);
    Ok(s)
}

pub(crate) fn token_hash(token: &str) -> String {
    Sha256::digest(format!("sessionpipe machine token|{token}").as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn urandom_failed(e: &std::io::Error) -> Reply {
    eprintln!("sp-receiver: cannot read /dev/urandom: {e}");
    Reply::error(500, "internal_error")
}

pub(crate) fn sink_authorized(ex: &Exchange<'_>) -> Result<(), Reply> {
    let (token, signed) = {
        let st = ex.shared.lock();
        (st.opts.token.clone(), st.signed())
    };
    if !signed {
        return Err(Reply::error(404, "not_found"));
    }
    if !ex.authorized(&token) {
        return Err(Reply::error(401, "unauthorized"));
    }
    Ok(())
}

/// The machine whose token the request carries.
pub(crate) fn bearer_machine(ex: &Exchange<'_>) -> Result<Option<String>, Reply> {
    let Some(t) = ex.bearer() else {
        return Ok(None);
    };
    ex.shared
        .lock()
        .db
        .machine_by_token(&token_hash(t))
        .map_err(|e| Reply::db_failed(&e))
}

/// `POST {control}/pair`.
pub(crate) fn pair_start(ex: &Exchange<'_>) -> Reply {
    if let Err(r) = sink_authorized(ex) {
        return r;
    }
    let body = if ex.body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        match parse_json(&ex.body) {
            Ok(v) if v.is_object() => v,
            Ok(_) => return Reply::error(400, "malformed body: want an object"),
            Err(r) => return r,
        }
    };
    let name: Option<String> = body
        .get("name")
        .and_then(Value::as_str)
        .map(|n| n.chars().take(80).collect());
    let asked = body.get("machine").and_then(Value::as_str);
    let (code, check, fresh_id) = match (|| -> std::io::Result<_> {
        let code = random_b64url(16, 22)?;
        let r = random_bytes(4)?;
        let check = format!(
            "{:06}",
            u32::from_le_bytes([r[0], r[1], r[2], r[3]]) % 1_000_000
        );
        Ok((code, check, format!("m_{}", random_b64url(17, 22)?)))
    })() {
        Ok(v) => v,
        Err(e) => return urandom_failed(&e),
    };
    let mut st = ex.shared.lock();
    let machine = match asked {
        Some(m) => match st.db.machine_known(m) {
            Ok(true) => m.to_owned(),
            Ok(false) => fresh_id,
            Err(e) => return Reply::db_failed(&e),
        },
        None => fresh_id,
    };
    let now = st.now_ms();
    let expires = now + PAIR_TTL.as_millis() as i64;
    if let Err(e) = st
        .db
        .create_pairing(&code, &machine, &check, name.as_deref(), now, expires)
    {
        return Reply::db_failed(&e);
    }
    let url = format!("{}/pair?code={code}", st.page_base(ex.shared.addr.port()));
    let expires_at = ms_to_wire(expires);
    Reply::json(
        201,
        json!({"machine": machine, "code": code, "url": url, "check": check, "expires_at": expires_at}),
    )
}

fn ms_to_wire(ms: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format_ms_timestamp(t)
}

/// `GET {control}/pair?code=`.
pub(crate) fn pair_status(ex: &Exchange<'_>) -> Reply {
    if let Err(r) = sink_authorized(ex) {
        return r;
    }
    let Some(Ok(code)) = query_param(&ex.query, "code") else {
        return Reply::error(400, "missing code");
    };
    let mut st = ex.shared.lock();
    let p = match st.db.pairing(&code) {
        Ok(Some(p)) => p,
        Ok(None) => return Reply::error(404, "not_found"),
        Err(e) => return Reply::db_failed(&e),
    };
    let (Some(key), Some(proof)) = (&p.key, &p.proof) else {
        return if p.expires_ms <= st.now_ms() {
            Reply::json(200, json!({"status": "expired"}))
        } else {
            Reply::json(200, json!({"status": "pending"}))
        };
    };
    let key: Value = serde_json::from_str(key).unwrap_or(Value::Null);
    let proof: Value = serde_json::from_str(proof).unwrap_or(Value::Null);
    let mut out = json!({"status": "paired", "key": key, "proof": proof});
    if !p.token_given {
        let token = match random_b64url(32, 43) {
            Ok(t) => t,
            Err(e) => return urandom_failed(&e),
        };
        match st.db.give_token(&code, &token_hash(&token)) {
            Ok(true) => out["token"] = token.into(),
            Ok(false) => {}
            Err(e) => return Reply::db_failed(&e),
        }
    }
    Reply::json(200, out)
}

/// `GET {control}?machine=&wait=`: the one poll per machine. `wait` is already clamped.
pub(crate) fn machine_poll(ex: &Exchange<'_>, machine: &str, wait: f64) -> Answer {
    if !ex.shared.lock().signed() {
        return Reply::error(404, "not_found").into();
    }
    match bearer_machine(ex) {
        Err(r) => return r.into(),
        Ok(Some(m)) if m == machine => {}
        Ok(_) => return Reply::error(401, "unauthorized").into(),
    }
    let deadline = Instant::now() + Duration::from_secs_f64(wait);
    let machine = machine.to_owned();
    let who = format!("machine:{machine}");
    super::http::hold_poll(deadline, Some(RECHECK), who, move |st| {
        st.db.machine_pending(&machine, st.now_ms())
    })
}

/// `POST {control}/off`'s head: signed control offered, and a machine's token; the machine.
pub(crate) fn off_head(ex: &Exchange<'_>) -> Result<String, Reply> {
    if !ex.shared.lock().signed() {
        return Err(Reply::error(404, "not_found"));
    }
    match bearer_machine(ex)? {
        Some(m) => Ok(m),
        None => Err(Reply::error(401, "unauthorized")),
    }
}

/// `POST {control}/off`.
pub(crate) fn off(ex: &Exchange<'_>) -> Reply {
    let machine = match off_head(ex) {
        Err(r) => return r,
        Ok(m) => m,
    };
    let mut st = ex.shared.lock();
    if let Err(e) = st.db.remove_machine(&machine) {
        return Reply::db_failed(&e);
    }
    st.bump();
    drop(st);
    ex.shared.notify();
    Reply::json(200, json!({}))
}

/// What the page's state answer says about signing: `{rp_id, machine?, name?}`.
pub(crate) fn page_signing(st: &super::state::State) -> Option<Value> {
    if !st.signed() {
        return None;
    }
    let mut v = json!({"rp_id": st.opts.rp_id});
    if let Ok(Some(m)) = st.db.latest_machine() {
        v["machine"] = m["machine"].clone();
        v["name"] = m["name"].clone();
    }
    Some(v)
}

/// `GET /page/api/pairing?code=`.
pub(crate) fn page_pairing(ex: &Exchange<'_>) -> Reply {
    let st = ex.shared.lock();
    if !st.signed() {
        return Reply::error(404, "not_found");
    }
    let Some(Ok(code)) = query_param(&ex.query, "code") else {
        return Reply::error(400, "missing code");
    };
    let p = match st.db.pairing(&code) {
        Ok(Some(p)) => p,
        Ok(None) => return Reply::error(404, "not_found"),
        Err(e) => return Reply::db_failed(&e),
    };
    let status = if p.key.is_some() {
        "paired"
    } else if p.expires_ms <= st.now_ms() {
        "expired"
    } else {
        "pending"
    };
    Reply::json(
        200,
        json!({"code": code, "machine": p.machine, "name": p.name, "check": p.check,
               "status": status, "expires_at": ms_to_wire(p.expires_ms), "rp_id": st.opts.rp_id}),
    )
}

/// `POST /page/api/pairing` `{code, key: {id, alg, spki}, proof: {cred, ad, cd, sig}}`.
/// The receiver checks the proof as the machine will (a courtesy: the machine checks again)
/// and keeps exactly what the page sent.
pub(crate) fn page_approve(ex: &Exchange<'_>) -> Reply {
    let body = match parse_json(&ex.body) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Some(code) = body.get("code").and_then(Value::as_str) else {
        return Reply::error(400, "code is required");
    };
    let key: TrustedKey = match serde_json::from_value(body["key"].clone()) {
        Ok(k) => k,
        Err(_) => return Reply::error(400, "key must be {id, alg, spki}"),
    };
    let proof: Assertion = match serde_json::from_value(body["proof"].clone()) {
        Ok(p) => p,
        Err(_) => return Reply::error(400, "proof must be {cred, ad, cd, sig}"),
    };
    let mut st = ex.shared.lock();
    let Some(rp_id) = st.opts.rp_id.clone().filter(|_| st.signed()) else {
        return Reply::error(404, "not_found");
    };
    let p = match st.db.pairing(code) {
        Ok(Some(p)) => p,
        Ok(None) => return Reply::error(404, "not_found"),
        Err(e) => return Reply::db_failed(&e),
    };
    if let Err(why) = wire::verify_enrollment(&p.machine, code, &key, &proof, &rp_id) {
        return Reply::error(400, &format!("the passkey's proof does not verify: {why}"));
    }
    let key_v = json!({"id": key.id, "alg": key.alg, "spki": key.spki});
    let proof_v = json!({"cred": proof.cred, "ad": proof.ad, "cd": proof.cd, "sig": proof.sig});
    let now = st.now_ms();
    match st.db.approve_pairing(code, &key_v, &proof_v, now) {
        Ok(true) => {}
        Ok(false) => return Reply::error(409, "the pairing is no longer pending"),
        Err(e) => return Reply::db_failed(&e),
    }
    st.bump();
    drop(st);
    ex.shared.notify();
    Reply::json(200, json!({"status": "paired", "machine": p.machine}))
}

fn shape_ok(v: &Value, keys: &[&str]) -> bool {
    keys.iter().all(|k| {
        v.get(*k)
            .and_then(Value::as_str)
            .is_some_and(|s| s.len() <= 16_000)
    })
}

/// `POST /page/api/signed` `{cmd, csig, grant}` (or `{cmd, confirm}`), and a prompt's `mode`:
/// a command the page signed, queued for the machine it names as an envelope `{id, cmd, csig,
/// grant, mode?, at, expires_at}` with `cmd` byte for byte.
pub(crate) fn page_signed(ex: &Exchange<'_>) -> Reply {
    let body = match parse_json(&ex.body) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Some(cmd) = body.get("cmd").and_then(Value::as_str) else {
        return Reply::error(400, "cmd must be a string");
    };
    if cmd.len() > CMD_MAX {
        return Reply::error(400, "cmd is longer than 48000 characters");
    }
    let parsed: Value = match serde_json::from_str(cmd) {
        Ok(v @ Value::Object(_)) => v,
        _ => return Reply::error(400, "cmd is not a JSON object"),
    };
    if parsed["t"] != "sessionpipe.control" {
        return Reply::error(400, "cmd is not a sessionpipe.control command");
    }
    let machine = parsed["machine"].as_str().unwrap_or_default();
    let session = parsed["session"].as_str().unwrap_or_default();
    let kind = parsed["kind"].as_str().unwrap_or_default();
    if !matches!(kind, "prompt" | "permission.answer" | "cancel") {
        return Reply::error(400, "kind must be prompt, permission.answer or cancel");
    }
    if split_session_key(session).is_none() {
        return Reply::error(400, "malformed session: want <harness>:<id>");
    }
    let mut env = serde_json::Map::new();
    // DECISIONS 25: a prompt's timing rides in the envelope, beside `cmd`.
    let mode = match body.as_object().map(super::page::prompt_mode) {
        Some(Ok(m)) => m,
        Some(Err(e)) => return Reply::error(400, &e),
        None => None,
    };
    if let Some(mode) = mode {
        if kind != "prompt" {
            return Reply::error(400, "mode is for prompts only");
        }
        env.insert("mode".into(), mode.into());
    }
    match (body.get("csig"), body.get("grant"), body.get("confirm")) {
        (Some(Value::String(csig)), Some(grant), None)
            if csig.len() <= 200 && shape_ok(grant, &["str", "cred", "ad", "cd", "sig"]) =>
        {
            env.insert("csig".into(), csig.clone().into());
            env.insert("grant".into(), grant.clone());
        }
        (None, None, Some(confirm)) if shape_ok(confirm, &["cred", "ad", "cd", "sig"]) => {
            env.insert("confirm".into(), confirm.clone());
        }
        _ => return Reply::error(400, "want csig and grant, or confirm"),
    }
    let mut st = ex.shared.lock();
    match st.db.machine_known(machine) {
        Ok(true) => {}
        Ok(false) => return Reply::error(400, "cmd names no machine paired here"),
        Err(e) => return Reply::db_failed(&e),
    }
    // The early word (CONTROL.md §5, a courtesy: the machine checks again, and is the gate):
    // the reference verifier against the keys this receiver carried for the machine, so a
    // command the machine would refuse is refused here, where the person sees why.
    let trusted: Vec<TrustedKey> = match st.db.machine_keys(machine) {
        Ok(k) => k
            .into_iter()
            .map(|(id, alg, spki)| TrustedKey { id, alg, spki })
            .collect(),
        Err(e) => return Reply::db_failed(&e),
    };
    let signed: wire::SignedCommand = match serde_json::from_value(body.clone()) {
        Ok(s) => s,
        Err(_) => return Reply::error(400, "malformed: want {cmd, csig, grant} or {cmd, confirm}"),
    };
    let rp_id = st.opts.rp_id.clone().unwrap_or_default();
    let opts = wire::VerifyOptions {
        machine,
        rp_id: &rp_id,
        trusted: &trusted,
        now: st.now_ms(),
        max_age_ms: EARLY_MAX_AGE_MS,
    };
    if let Err(r) = wire::verify_command(&signed, &opts, None) {
        return Reply::json(
            400,
            json!({"reason": format!("refused: {}: {}", r.code.as_str(), r.why), "code": r.code.as_str()}),
        );
    }
    let life_s = if kind == "prompt" {
        st.opts.prompt_expiry_s
    } else {
        st.opts.permission_expiry_s
    };
    let life = Duration::from_secs(life_s).min(ENVELOPE_MAX);
    let now = st.now_ms();
    let expires = now + life.as_millis() as i64;
    let mut out = serde_json::Map::new();
    out.insert("id".into(), ulid::Ulid::new().to_string().into());
    out.insert("cmd".into(), cmd.into());
    out.extend(env);
    out.insert("at".into(), ms_to_wire(now).into());
    out.insert("expires_at".into(), ms_to_wire(expires).into());
    let value = Value::Object(out);
    if let Err(e) = st
        .db
        .insert_envelope(machine, session, kind, &value, expires, now)
    {
        return Reply::db_failed(&e);
    }
    st.bump();
    drop(st);
    ex.shared.notify();
    Reply::json(200, value)
}
