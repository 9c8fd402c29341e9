//! Signed control's one poll per machine (docs/protocol.md#control-1 and docs/protocol.md#http-3).
//! Every command is verified here against the keys enrolled at this machine's terminal
//! (docs/protocol.md#control-5) before it reaches the queue; its nonce is recorded in the transaction that
//! stores it; a refusal is acked `refused` with its code and never acted on.
use super::poll::{self, Next};
use super::start::Handled;
use super::{Shared, SinkCtx};
use crate::clock::{self, Millis};
use crate::store::trust::PairedMachine;
use crate::store::Ingested;
use crate::store::Store;
use crate::wire::control::{self, Checked, ControlMessage, Decided, Kind, Outcome};
use crate::wire::signed::{self, CmdKind, SignedCommand, TrustedKey, VerifyOptions};
use serde_json::Value;
use std::time::{Duration, Instant};

/// The key of the one machine poll in the supervisor's table of polls.
pub const POLL_KEY: &str = "sessionpipe:machine";
/// DECISIONS 24: at most this many messages are taken from one poll; the receiver
/// redelivers the rest.
const PER_POLL_MAX: usize = 100;
/// DECISIONS 24: at least this long between two polls, whatever the receiver answers.
const POLL_FLOOR: Duration = Duration::from_millis(250);
/// Where a command that names no usable session is filed.
const NO_SESSION: &str = "sessionpipe:unverified";
/// DECISIONS 36: the refusal code of a command that needed a touch and came with the day key
/// alone.
pub const CONFIRM_NEEDED: &str = "confirm_needed";

fn poll_url(ctx: &SinkCtx, machine: &str, wait: u64) -> Option<String> {
    let found = ctx.found();
    let base = found.control_url.as_deref()?;
    let sep = if base.contains('?') { '&' } else { '?' };
    Some(format!("{base}{sep}machine={machine}&wait={wait}"))
}

pub fn poll_once(shared: &Shared, ctx: &SinkCtx, store: &mut Store, wait: u64) -> Next {
    let Some(m) = &ctx.signed else {
        return Next::Stop;
    };
    let Some(url) = poll_url(ctx, &m.machine, wait) else {
        return Next::Stop;
    };
    poll::exchange(shared, ctx, store, &url, POLL_KEY, wait, |store, body| {
        ingest(shared, ctx, m, store, body)
    })
}

/// Polls until the sink pauses or sp-sync stops.
pub fn poll_loop(shared: &Shared, ctx: &SinkCtx) {
    let mut store = match shared.open_store() {
        Ok(s) => s,
        Err(e) => {
            crate::logging::error(&format!("machine poll {}: {e:#}", ctx.name));
            return;
        }
    };
    let mut failures = 0u32;
    if !store.control_paused(&ctx.name).unwrap_or(false) {
        super::start::hello(shared, ctx);
    }
    while !shared.stopping() {
        if store.control_paused(&ctx.name).unwrap_or(false) {
            return;
        }
        let Some(wait) = poll::wait_s(shared, ctx) else {
            return;
        };
        let round = Instant::now();
        let what = format!("poll {} {POLL_KEY}", ctx.name);
        let next = poll_once(shared, ctx, &mut store, wait);
        let Some(pause) = next.pause(&mut failures, &what) else {
            return;
        };
        shared.sleep(pause.max(POLL_FLOOR.saturating_sub(round.elapsed())));
    }
}

fn decided(id: &str, kind: &str, outcome: Outcome, detail: String) -> Decided {
    Decided {
        id: id.to_string(),
        kind: kind.to_string(),
        outcome,
        code: None,
        detail,
        nonce: None,
        add_key: None,
    }
}

fn refused(id: &str, kind: &str, code: &str, detail: String) -> Checked {
    Checked::Decided(Box::new(Decided {
        code: Some(code.to_string()),
        ..decided(id, kind, Outcome::Refused, detail)
    }))
}

/// What [`check`] reaches for one envelope: the session it is filed under, and what ingest
/// is to do with it. A step that settles the envelope early returns it as its `Err`.
type Verdict = (String, Checked);
/// An envelope settled by a step (boxed: a `Checked` is large).
type Settled = Box<Verdict>;
/// A session's folder: None when it never ran here, `Some(None)` when it reported none.
type SessionCwd<'a> = &'a dyn Fn(&str) -> Option<Option<String>>;
/// A session's last reported permission mode (DECISIONS 36).
type SessionMode<'a> = &'a dyn Fn(&str) -> Option<String>;

/// One envelope of the poll answer (control.json): the session it belongs to and what
/// ingest is to do with it. Verification is docs/protocol.md#control-5 steps 1-4; step 5 (the nonce) is
/// the store's, in the transaction that keeps the message; step 6 is the folder allowlist.
pub fn check(
    raw: &str,
    paired: &PairedMachine,
    keys: &[TrustedKey],
    // The session's folder (None: never ran here) and its last reported permission mode.
    (session_cwd, session_mode): (SessionCwd, SessionMode),
    folders: &[std::path::PathBuf],
    allow_with_day_key: bool,
    now: Millis,
) -> (String, Checked, Option<super::start::Order>) {
    let steps = || -> Result<(String, Checked, Option<super::start::Order>), Settled> {
        // The id is read leniently first, so even an envelope refused below gets its one ack.
        let lenient: Value = serde_json::from_str(raw).unwrap_or_default();
        let id = envelope_id(&lenient)?;
        let (envelope, fields) = envelope_command(raw, id)?;
        let item = Value::Object(fields);
        let times = envelope_times(&item, id)?;
        let v = verify(&envelope, paired, keys, now, id)?;
        nothing_beside_cmd(&item, id, &v.cmd)?;
        if !allow_with_day_key {
            let runs_unasked = v.cmd.kind == CmdKind::Prompt
                && crate::store::runs_unasked(session_mode(&v.cmd.session).as_deref());
            touched(id, &envelope, &v, runs_unasked, (paired, keys), now)?;
        }
        let expired = control::deadline(times.at_ms, times.expires_at_ms, now) <= now;
        if v.cmd.kind == CmdKind::Start && !expired {
            // DECISIONS 39: the folder and the harness here; the caps, the files and the
            // launch in ingest, which holds the store and the receiver.
            let c = &v.cmd;
            let settle = |d: Decided| {
                let d = Decided {
                    nonce: Some(c.nonce.clone()),
                    ..d
                };
                Box::new((c.session.clone(), Checked::Decided(Box::new(d))))
            };
            let message = ControlMessage {
                mode: control::PromptMode::Queue,
                scope: control::Scope::default(),
                rich: Box::default(),
                id: id.to_string(),
                kind: Kind::Start,
                for_attention: None,
                batch: Vec::new(),
                day_key_only: false,
                decision: None,
                text: c.text.clone(),
                note: None,
                at: times.at.to_string(),
                expires_at: times.expires_at.to_string(),
                at_ms: times.at_ms,
                expires_at_ms: times.expires_at_ms,
                nonce: Some(c.nonce.clone()),
            };
            let order = super::start::gate(id, c, folders, message).map_err(|d| settle(*d))?;
            // Stored as it is only when ingest finds the start was taken before (a
            // redelivery after sp-sync stopped mid-start): it is never begun twice.
            let taken = decided(
                id,
                "start",
                Outcome::Failed,
                "this start was taken before sp-sync stopped; it is not begun again".into(),
            );
            return Ok((c.session.clone(), settle(taken).1, Some(order)));
        }
        let kind = control_kind(id, &v, expired)?;
        // A prompt without a touch, so its delivery can refuse it if the session has switched
        // to running tools unasked by then (DECISIONS 36).
        let day_key_only = v.cmd.kind == CmdKind::Prompt
            && v.via != signed::Via::Confirm
            && !signed::confirmed(&envelope, &verify_options(paired, keys, now));
        let c = v.cmd;
        session_allowed(id, &c.session, kind, session_cwd, folders)?;
        let mode = prompt_mode(&item, id, kind, &c.session)?;
        let m = ControlMessage {
            mode,
            scope: c
                .scope
                .as_deref()
                .and_then(control::Scope::parse)
                .unwrap_or_default(),
            rich: Box::new(c.rich.clone()),
            id: id.to_string(),
            kind,
            for_attention: c.for_attention.clone(),
            batch: c.batch.clone(),
            day_key_only,
            decision: c.decision.as_deref().and_then(control::Decision::parse),
            text: c.text.clone(),
            note: c.note.clone(),
            at: times.at.to_string(),
            expires_at: times.expires_at.to_string(),
            at_ms: times.at_ms,
            expires_at_ms: times.expires_at_ms,
            nonce: Some(c.nonce.clone()),
        };
        Ok((c.session, Checked::Valid(m), None))
    };
    match steps() {
        Ok(v) => v,
        Err(v) => (v.0, v.1, None),
    }
}

/// docs/protocol.md#control-5 step 6: with an allowlist, only inside its folders.
fn allowed(folders: &[std::path::PathBuf], cwd: Option<&str>) -> bool {
    folders.is_empty()
        || cwd.is_some_and(|c| {
            folders
                .iter()
                .any(|f| std::path::Path::new(c).starts_with(f))
        })
}

/// The envelope's id: without a ULID there is nothing to ack.
fn envelope_id(item: &Value) -> Result<&str, Settled> {
    match item.get("id").and_then(Value::as_str) {
        Some(id) if crate::wire::is_ulid(id) => Ok(id),
        _ => Err(Box::new((
            NO_SESSION.to_string(),
            Checked::Unackable {
                reason: "a signed message without a ULID id".into(),
            },
        ))),
    }
}

/// The envelope's `at` and `expires_at`, as sent and as milliseconds.
struct Times<'a> {
    at: &'a str,
    at_ms: Millis,
    expires_at: &'a str,
    expires_at_ms: Millis,
}

fn envelope_times<'a>(item: &'a Value, id: &str) -> Result<Times<'a>, Settled> {
    let times = (|| {
        let at = item.get("at")?.as_str()?;
        let expires_at = item.get("expires_at")?.as_str()?;
        Some(Times {
            at,
            at_ms: clock::parse_wire(at)?,
            expires_at,
            expires_at_ms: clock::parse_wire(expires_at)?,
        })
    })();
    times.ok_or_else(|| {
        Box::new((
            NO_SESSION.to_string(),
            refused(
                id,
                "unverified",
                "malformed",
                "the envelope needs at and expires_at, RFC 3339 UTC with milliseconds".into(),
            ),
        ))
    })
}

/// The envelope read strictly: a duplicate key anywhere makes it malformed, so nothing outside
/// the signature can stand in for what was signed.
fn envelope_command(
    raw: &str,
    id: &str,
) -> Result<(SignedCommand, serde_json::Map<String, Value>), Settled> {
    SignedCommand::from_envelope(raw).map_err(|r| {
        Box::new((
            NO_SESSION.to_string(),
            refused(id, "unverified", r.code.as_str(), r.why),
        ))
    })
}

/// A command's own fields ride inside the signed `cmd` (DECISIONS 30: they change what
/// runs); one beside it was added where no signature covers it, so the envelope is refused
/// rather than acted on without it (a reader that took it would run what nobody signed).
fn nothing_beside_cmd(item: &Value, id: &str, c: &signed::Command) -> Result<(), Settled> {
    const SIGNED_ONLY: [&str; 8] = [
        "for",
        "decision",
        "scope",
        "input",
        "interrupt",
        "answers",
        "note",
        "text",
    ];
    match SIGNED_ONLY.iter().find(|k| item.get(**k).is_some()) {
        None => Ok(()),
        Some(k) => Err(Box::new((
            c.session.clone(),
            refused(
                id,
                c.kind.as_str(),
                "bad_fields",
                format!(
                    "`{k}` beside cmd: a command's fields are signed, inside cmd (DECISIONS 30)"
                ),
            ),
        ))),
    }
}

/// What this machine verifies a command against: its id, the receiver's rp id, the keys
/// enrolled here.
fn verify_options<'a>(
    paired: &'a PairedMachine,
    keys: &'a [TrustedKey],
    now: Millis,
) -> VerifyOptions<'a> {
    VerifyOptions {
        machine: &paired.machine,
        rp_id: &paired.rp_id,
        trusted: keys,
        now,
        max_age_ms: signed::MACHINE_MAX_AGE_MS,
    }
}

/// docs/protocol.md#control-5 steps 1-4: the command, its machine, its freshness and its signature.
fn verify(
    envelope: &SignedCommand,
    paired: &PairedMachine,
    keys: &[TrustedKey],
    now: Millis,
    id: &str,
) -> Result<signed::Verified, Settled> {
    signed::verify_command(envelope, &verify_options(paired, keys, now), None).map_err(|r| {
        // Filed under the session it names, when it names one, so `sp queue` shows it there.
        let parsed = signed::parse_command(&envelope.cmd).ok();
        let session = parsed
            .as_ref()
            .map_or_else(|| NO_SESSION.to_string(), |c| c.session.clone());
        let kind = parsed.map_or("unverified", |c| c.kind.as_str());
        Box::new((session, refused(id, kind, r.code.as_str(), r.why)))
    })
}

/// DECISIONS 36, the machine's policy after verification: a command that can make code run
/// without a further question acts only with a confirm over exactly its bytes, never on the
/// day key alone, because any script the receiver serves the page can sign with the day key.
/// Refused `confirm_needed` otherwise, its nonce recorded; the prompt stays open.
fn touched(
    id: &str,
    envelope: &SignedCommand,
    v: &signed::Verified,
    runs_unasked: bool,
    (paired, keys): (&PairedMachine, &[TrustedKey]),
    now: Millis,
) -> Result<(), Settled> {
    // `runs_unasked`: the session's last reported permission mode runs tools without asking
    // (the hooks keep it on the session), so a prompt to it needs a touch too.
    if !signed::needs_confirm(&v.cmd, runs_unasked) || v.via == signed::Via::Confirm {
        return Ok(());
    }
    if signed::confirmed(envelope, &verify_options(paired, keys, now)) {
        return Ok(());
    }
    let c = &v.cmd;
    let what = match c.kind {
        CmdKind::Start => "a start",
        CmdKind::Prompt => "a message to a session that runs tools without asking",
        _ => "an allow",
    };
    Err(Box::new((
        c.session.clone(),
        Checked::Decided(Box::new(Decided {
            code: Some(CONFIRM_NEEDED.to_string()),
            nonce: Some(c.nonce.clone()),
            ..decided(
                id,
                c.kind.as_str(),
                Outcome::Refused,
                format!(
                    "{what} needs your passkey's touch over this exact command (a confirm); \
                     the page's day key alone cannot allow (DECISIONS 36; \
                     control.allow_with_day_key restores the old behaviour)"
                ),
            )
        })),
    )))
}

/// The control kind a verified command becomes; `start` and `key.add` are settled here.
fn control_kind(id: &str, v: &signed::Verified, expired: bool) -> Result<Kind, Settled> {
    let c = &v.cmd;
    let with_nonce = |d: Decided| {
        let d = Decided {
            nonce: Some(c.nonce.clone()),
            ..d
        };
        Err(Box::new((c.session.clone(), Checked::Decided(Box::new(d)))))
    };
    match c.kind {
        CmdKind::Prompt => Ok(Kind::Prompt),
        CmdKind::PermissionAnswer => Ok(Kind::PermissionAnswer),
        CmdKind::Cancel => Ok(Kind::Cancel),
        // An unexpired start is settled before (`check`, then `start::handle`).
        CmdKind::Start => with_nonce(decided(
            id,
            "start",
            Outcome::Expired,
            "past expires_at on receipt".into(),
        )),
        CmdKind::KeyAdd => {
            let Some(key) = c.key.clone() else {
                // parse_command never lets a key.add through without its key.
                return Err(Box::new((
                    c.session.clone(),
                    refused(
                        id,
                        "key.add",
                        "bad_fields",
                        "a key.add without a key".into(),
                    ),
                )));
            };
            if expired {
                return with_nonce(decided(
                    id,
                    "key.add",
                    Outcome::Expired,
                    "past expires_at on receipt".into(),
                ));
            }
            with_nonce(Decided {
                add_key: Some((key.clone(), c.key_name.clone())),
                ..decided(
                    id,
                    "key.add",
                    Outcome::Delivered,
                    format!("passkey {} enrolled, vouched for by {}", key.id, v.key),
                )
            })
        }
    }
}

/// The session has run on this machine, in an allowed folder.
fn session_allowed(
    id: &str,
    session: &str,
    kind: Kind,
    session_cwd: &dyn Fn(&str) -> Option<Option<String>>,
    folders: &[std::path::PathBuf],
) -> Result<(), Settled> {
    let refuse = |code: &str, detail: &str| {
        Err(Box::new((
            session.to_string(),
            refused(id, kind.as_str(), code, detail.into()),
        )))
    };
    let Some(cwd) = session_cwd(session) else {
        return refuse(
            "no_session",
            "no session of that name has run on this machine",
        );
    };
    if !allowed(folders, cwd.as_deref()) {
        return refuse(
            "folder",
            "the session's folder is not on this machine's allowlist (control.folders)",
        );
    }
    Ok(())
}

/// DECISIONS 25: for signed commands `mode` rides in the envelope, never in `cmd`.
fn prompt_mode(
    item: &Value,
    id: &str,
    kind: Kind,
    session: &str,
) -> Result<control::PromptMode, Settled> {
    if !matches!(kind, Kind::Prompt) {
        return Ok(control::PromptMode::Queue);
    }
    control::PromptMode::parse(item.get("mode")).map_err(|detail| {
        Box::new((
            session.to_string(),
            Checked::Invalid {
                id: id.to_string(),
                kind: Some(kind.as_str().into()),
                detail,
            },
        ))
    })
}

/// Stores a poll answer. Returns whether anything new arrived.
fn ingest(
    shared: &Shared,
    ctx: &SinkCtx,
    paired: &PairedMachine,
    store: &mut Store,
    body: &str,
) -> anyhow::Result<bool> {
    // Each envelope is kept as it came, for `check` to read with duplicate keys refused.
    #[derive(serde::Deserialize)]
    struct Answer<'a> {
        #[serde(borrow)]
        messages: Option<Vec<&'a serde_json::value::RawValue>>,
    }
    let answer: Answer =
        serde_json::from_str(body).map_err(|e| anyhow::anyhow!("poll answer is not JSON: {e}"))?;
    let Some(items) = answer.messages else {
        anyhow::bail!("poll answer has no messages array");
    };
    if items.len() > PER_POLL_MAX {
        crate::logging::warn(&format!(
            "machine poll {}: {} messages in one answer; taking the first {PER_POLL_MAX}",
            ctx.name,
            items.len()
        ));
    }
    // Read once per poll, so a key removed with `sp control keys remove` stops counting at once.
    let keys: Vec<TrustedKey> = store
        .enrolled_keys(Some(&ctx.name))?
        .into_iter()
        .map(|k| k.key)
        .collect();
    let now = clock::now_ms();
    let mut results = Vec::new();
    for item in items.iter().take(PER_POLL_MAX) {
        let (session, mut checked, start) = {
            // A read error is not a verdict: the poll fails and the receiver redelivers.
            let failed = std::cell::RefCell::new(None);
            let cwd = |s: &str| match store.session_cwd(s) {
                Ok(c) => c,
                Err(e) => {
                    failed.replace(Some(e));
                    None
                }
            };
            let mode = |s: &str| match store.session_mode(s) {
                Ok(m) => m,
                Err(e) => {
                    failed.replace(Some(e));
                    None
                }
            };
            let out = check(
                item.get(),
                paired,
                &keys,
                (&cwd, &mode),
                &shared.folders,
                shared.allow_with_day_key,
                now,
            );
            if let Some(e) = failed.into_inner() {
                return Err(e);
            }
            out
        };
        let mut launch = None;
        if let Some(order) = &start {
            match super::start::handle(shared, ctx, store, order, now)? {
                Handled::Seen => {}
                Handled::Settled(d) => checked = Checked::Decided(d),
                Handled::Launch(m) => {
                    launch = m.text.clone();
                    checked = Checked::Valid(*m);
                }
            }
        }
        let harness = session.split(':').next().unwrap_or("").to_string();
        // A start is queued for the runner, never routed to a session's hooks.
        let route = |m: &ControlMessage| {
            (m.kind != Kind::Start)
                .then(|| crate::harness::route_message(&harness, &session, m))
                .flatten()
        };
        let ingested = store.ingest(&ctx.name, &session, std::slice::from_ref(&checked), &route)?;
        if let (Some(order), Some(text)) = (&start, launch) {
            if ingested
                .iter()
                .any(|i| matches!(i, Ingested::Queued { id, .. } if *id == order.id))
            {
                super::start::launch(store, order, &text)?;
            }
        }
        results.extend(ingested);
    }
    let new = poll::log_results("signed", &ctx.name, &results);
    if new {
        shared.notify();
    }
    Ok(new)
}
