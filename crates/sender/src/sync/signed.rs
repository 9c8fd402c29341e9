//! Signed control's one poll per machine (the reference's CONTROL.md §1 and HTTP.md §3).
//! Every command is verified here against the keys enrolled at this machine's terminal
//! (CONTROL.md §5) before it reaches the queue; its nonce is recorded in the transaction that
//! stores it; a refusal is acked `refused` with its code and never acted on.
use super::poll::{self, Next};
use super::{Shared, SinkCtx};
use crate::clock::{self, Millis};
use crate::store::trust::PairedMachine;
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
    while !shared.stopping() {
        if store.control_paused(&ctx.name).unwrap_or(false) {
            return;
        }
        let Some(wait) = poll::wait_s(shared, ctx) else {
            return;
        };
        let round = Instant::now();
        let Some(pause) = poll_once(shared, ctx, &mut store, wait).pause(&mut failures) else {
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

/// One envelope of the poll answer (control.json): the session it belongs to and what
/// ingest is to do with it. Verification is CONTROL.md §5 steps 1-4; step 5 (the nonce) is
/// the store's, in the transaction that keeps the message.
pub fn check(
    raw: &str,
    paired: &PairedMachine,
    keys: &[TrustedKey],
    session_cwd: &dyn Fn(&str) -> Option<Option<String>>,
    folders: &[std::path::PathBuf],
    now: Millis,
) -> (String, Checked) {
    // CONTROL.md §5 step 6: with an allowlist, only inside its folders.
    let allowed = |cwd: Option<&str>| {
        folders.is_empty()
            || cwd.is_some_and(|c| {
                folders
                    .iter()
                    .any(|f| std::path::Path::new(c).starts_with(f))
            })
    };
    let no_session = || NO_SESSION.to_string();
    // The id is read leniently first, so even an envelope refused below gets its one ack.
    let lenient: Value = serde_json::from_str(raw).unwrap_or_default();
    let id = match lenient.get("id").and_then(Value::as_str) {
        Some(id) if crate::wire::is_ulid(id) => id,
        _ => {
            return (
                no_session(),
                Checked::Unackable {
                    reason: "a signed message without a ULID id".into(),
                },
            )
        }
    };
    let (envelope, item) = match SignedCommand::from_envelope(raw) {
        Ok(e) => e,
        Err(r) => {
            return (
                no_session(),
                refused(id, "unverified", r.code.as_str(), r.why),
            )
        }
    };
    let times = (|| {
        let at = item.get("at")?.as_str()?;
        let exp = item.get("expires_at")?.as_str()?;
        Some((at, clock::parse_wire(at)?, exp, clock::parse_wire(exp)?))
    })();
    let Some((at, at_ms, expires_at, expires_at_ms)) = times else {
        return (
            no_session(),
            refused(
                id,
                "unverified",
                "malformed",
                "the envelope needs at and expires_at, RFC 3339 UTC with milliseconds".into(),
            ),
        );
    };
    let opts = VerifyOptions {
        machine: &paired.machine,
        rp_id: &paired.rp_id,
        trusted: keys,
        now,
        max_age_ms: signed::MACHINE_MAX_AGE_MS,
    };
    let v = match signed::verify_command(&envelope, &opts, None) {
        Ok(v) => v,
        Err(r) => {
            // Filed under the session it names, when it names one, so `sp queue` shows it there.
            let parsed = signed::parse_command(&envelope.cmd).ok();
            let session = parsed
                .as_ref()
                .map(|c| c.session.clone())
                .unwrap_or_else(no_session);
            let kind = parsed.map_or("unverified", |c| c.kind.as_str());
            return (session, refused(id, kind, r.code.as_str(), r.why));
        }
    };
    let c = v.cmd;
    let expired = control::deadline(at_ms, expires_at_ms, now) <= now;
    let with_nonce = |d: Decided| {
        Checked::Decided(Box::new(Decided {
            nonce: Some(c.nonce.clone()),
            ..d
        }))
    };
    let kind = match c.kind {
        CmdKind::Prompt => Kind::Prompt,
        CmdKind::PermissionAnswer => Kind::PermissionAnswer,
        CmdKind::Cancel => Kind::Cancel,
        CmdKind::Start if expired => {
            return (
                c.session.clone(),
                with_nonce(decided(
                    id,
                    "start",
                    Outcome::Expired,
                    "past expires_at on receipt".into(),
                )),
            )
        }
        CmdKind::Start if !allowed(c.cwd.as_deref()) => {
            return (
                c.session.clone(),
                refused(
                    id,
                    "start",
                    "folder",
                    "the folder is not on this machine's allowlist (control.folders)".into(),
                ),
            )
        }
        CmdKind::Start => {
            let d = decided(
                id,
                "start",
                Outcome::Unsupported,
                "a verified start: starting a session from the receiver is not built into this version".into(),
            );
            return (c.session.clone(), with_nonce(d));
        }
        CmdKind::KeyAdd => {
            let Some(key) = c.key.clone() else {
                // parse_command never lets a key.add through without its key.
                return (
                    c.session.clone(),
                    refused(
                        id,
                        "key.add",
                        "bad_fields",
                        "a key.add without a key".into(),
                    ),
                );
            };
            let d = if expired {
                decided(
                    id,
                    "key.add",
                    Outcome::Expired,
                    "past expires_at on receipt".into(),
                )
            } else {
                Decided {
                    add_key: Some((key.clone(), c.key_name.clone())),
                    ..decided(
                        id,
                        "key.add",
                        Outcome::Delivered,
                        format!("passkey {} enrolled, vouched for by {}", key.id, v.key),
                    )
                }
            };
            return (c.session.clone(), with_nonce(d));
        }
    };
    let Some(cwd) = session_cwd(&c.session) else {
        return (
            c.session.clone(),
            refused(
                id,
                kind.as_str(),
                "no_session",
                "no session of that name has run on this machine".into(),
            ),
        );
    };
    if !allowed(cwd.as_deref()) {
        return (
            c.session.clone(),
            refused(
                id,
                kind.as_str(),
                "folder",
                "the session's folder is not on this machine's allowlist (control.folders)".into(),
            ),
        );
    }
    // DECISIONS 25: for signed commands `mode` rides in the envelope, never in `cmd`.
    let mode = match kind {
        Kind::Prompt => match control::PromptMode::parse(item.get("mode")) {
            Ok(m) => m,
            Err(detail) => {
                return (
                    c.session.clone(),
                    Checked::Invalid {
                        id: id.to_string(),
                        kind: Some(kind.as_str().into()),
                        detail,
                    },
                )
            }
        },
        _ => control::PromptMode::Queue,
    };
    let m = ControlMessage {
        mode,
        id: id.to_string(),
        kind,
        for_attention: c.for_attention.clone(),
        decision: c.decision.as_deref().and_then(control::Decision::parse),
        text: c.text.clone(),
        note: c.note.clone(),
        at: at.to_string(),
        expires_at: expires_at.to_string(),
        at_ms,
        expires_at_ms,
        nonce: Some(c.nonce.clone()),
    };
    (c.session, Checked::Valid(m))
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
        let (session, checked) = {
            // A read error is not a verdict: the poll fails and the receiver redelivers.
            let failed = std::cell::RefCell::new(None);
            let cwd = |s: &str| match store.session_cwd(s) {
                Ok(c) => c,
                Err(e) => {
                    failed.replace(Some(e));
                    None
                }
            };
            let out = check(item.get(), paired, &keys, &cwd, &shared.folders, now);
            if let Some(e) = failed.into_inner() {
                return Err(e);
            }
            out
        };
        let harness = session.split(':').next().unwrap_or("").to_string();
        let route = |m: &ControlMessage| crate::harness::route(&harness, m.kind);
        results.extend(store.ingest(
            &ctx.name,
            &session,
            std::slice::from_ref(&checked),
            &route,
        )?);
    }
    let new = poll::log_results("signed", &ctx.name, &results);
    if new {
        shared.notify();
    }
    Ok(new)
}
