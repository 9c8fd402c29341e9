//! PermissionRequest (DECISIONS 9-13): record the attention, announce it, wait for a matching
//! answer, print it in the harness's shape. Allow is printed only for a claimed, valid,
//! unexpired answer naming exactly this attention and session; every other path prints nothing
//! here, and `hook::main`'s guard answers "ask" for a harness that reads silence as allow.
use crate::clock::now_ms;
use crate::config::Config;
use crate::harness::{describe_tool, Call, Harness, RichAnswer};
use crate::store::{Answer, Grant, NewGrant, SessionRef, Store, API_ATTENTION_OPEN};
use crate::wire::control::{Decision, Rich, Scope};
use crate::wire::event::How;
use anyhow::Result;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often it checks that an sp-sync is running, starting one if not.
const SYNC_CHECK_EVERY: Duration = Duration::from_secs(1);

/// DECISIONS 27: a harness that shows its own approval only after our hook returns (Codex,
/// Cursor, Droid, Copilot CLI) gets no wait and no remote prompt while the person is at the
/// desk: the terminal asks at once, and the receiver is not shown a prompt it cannot answer.
fn at_the_desk(config: &Config, store: &Store, harness: Harness) -> bool {
    if !harness.answers_permission() || harness.waits_at_desk() || config.control.away {
        return false;
    }
    let away = store.away(now_ms()).ok().flatten();
    if away.as_ref().is_some_and(|a| a.0) {
        return false;
    }
    crate::logging::info(&format!(
        "{}: the person is at the desk ({}); not waiting",
        harness.name(),
        away.map_or("nobody said otherwise".into(), |a| format!(
            "{} said so at {}",
            a.1, a.2
        ))
    ));
    true
}

/// How long to wait: the harness's configured wait, or 0 when no sink could answer or the
/// harness has no answer a hook could print (Gemini CLI, Kiro, OpenCode).
fn wait_for(config: &Config, store: &Store, harness: Harness) -> Duration {
    if !harness.answers_permission() {
        return Duration::ZERO;
    }
    let mut any = false;
    for s in config.control_sinks() {
        if !store.control_paused(&s.name).unwrap_or(true) {
            any = true;
        }
    }
    if any {
        Duration::from_secs(config.permission_wait_s(harness))
    } else {
        Duration::ZERO
    }
}

/// The prompt a permission hook is about.
pub struct Prompt<'a> {
    pub attention_id: &'a str,
    pub tool: Option<&'a str>,
    pub message: Option<&'a str>,
    /// The call itself, where the adapter reads it (DECISIONS 30).
    pub call: Option<&'a Call>,
}

/// DECISIONS 30: a live grant of this session for exactly this tool and input answers the
/// prompt at once, and no attention is announced for it. Never while a stop of the session
/// waits or holds (that prompt is denied on the usual path). Returns whether it answered.
pub fn from_grant(
    harness: Harness,
    store: &mut Store,
    session: &SessionRef,
    call: &Call,
) -> Result<bool> {
    if !harness.keeps_grants() {
        return Ok(false);
    }
    let key = session.key();
    let Some(grant) = usable_grant(store, session, call)? else {
        return Ok(false);
    };
    let rich = match grant
        .answer
        .as_deref()
        .map(serde_json::from_str::<serde_json::Value>)
    {
        // The grant replays the person's input as it was printed the first time.
        Some(Ok(serde_json::Value::Object(o))) => Rich {
            input: Some(o),
            ..Rich::default()
        },
        _ => Rich::default(),
    };
    let message = format!(
        "Denied by the person through sessionpipe for this session (grant {}).",
        grant.id
    );
    let answer = RichAnswer {
        decision: grant.decision,
        message: &message,
        rich: &rich,
        session_rule: false,
    };
    let out = match harness.render_rich_permission(&answer, call) {
        Ok(out) => out,
        Err(why) => {
            crate::logging::warn(&format!("{key}: grant {} not used: {why}", grant.id));
            return Ok(false);
        }
    };
    store.grant_used(grant.id, session)?;
    super::print_answer(&harness.answer_at_event(&session.event, out))?;
    log_grant_used(&key, call, &grant, "no attention announced");
    Ok(true)
}

/// The live grant of this session for exactly this call, unless a stop of the session waits
/// or holds (then the prompt takes the usual path, which denies it).
fn usable_grant(store: &Store, session: &SessionRef, call: &Call) -> Result<Option<Grant>> {
    let key = session.key();
    let folder = store.grant_folder(session);
    let Some(grant) = store.find_grant(&key, folder.as_deref(), &call.tool, &call.input)? else {
        return Ok(None);
    };
    if store.cancel_queued(&key)? || store.stopped(&key)? {
        crate::logging::info(&format!(
            "{key}: grant {} not used: the session was stopped",
            grant.id
        ));
        return Ok(None);
    }
    Ok(Some(grant))
}

fn log_grant_used(key: &str, call: &Call, grant: &Grant, how: &str) {
    crate::logging::info(&format!(
        "{key}: {} {} from grant {} (by {}), {how}",
        call.tool,
        grant.decision.as_str(),
        grant.id,
        grant.who
    ));
}

/// [`from_grant`] for a harness answered through its server API (OpenCode): the grant's
/// answer is left in the store for sp-sync, which sends it to the prompt's request through
/// that API (no hook links an HTTP client), and no attention is announced; if the server does
/// not take it, sp-sync announces the prompt as usual. False (the usual path: announce and
/// ask) when no grant matches, the session was stopped, or its server is unknown.
pub fn from_grant_by_api(
    store: &mut Store,
    session: &SessionRef,
    prompt: &Prompt,
    call: &Call,
) -> Result<bool> {
    let request = prompt.attention_id;
    let key = session.key();
    let Some(grant) = usable_grant(store, session, call)? else {
        return Ok(false);
    };
    if store.api_session(&key)?.is_none() {
        return Ok(false);
    }
    store.api_grant_reply_queue(
        session,
        (request, grant.id, grant.decision),
        (prompt.tool, prompt.message, Some(&call.input)),
    )?;
    crate::sync_lock::ensure_running();
    log_grant_used(
        &key,
        call,
        &grant,
        "handed to sp-sync for the server API, no attention announced",
    );
    Ok(true)
}

pub fn run(
    harness: Harness,
    config: &Config,
    store: &mut Store,
    session: &SessionRef,
    prompt: Prompt,
) -> Result<()> {
    let Prompt {
        attention_id,
        tool,
        message,
        call,
    } = prompt;
    if at_the_desk(config, store, harness) {
        return Ok(());
    }
    let stop = stop_on_signals()?;
    // Issue 19: a Codex thread sp-sync follows on `sp codex`'s app-server gets its approval
    // there (the terminal's dialog and ours race; the first answer wins), so the hook does
    // not hold the terminal back.
    let by_api = harness.answered_by_api()
        || (harness == Harness::Codex && crate::codex_server::followed(&session.session_id));
    let wait = if by_api {
        Duration::ZERO
    } else {
        wait_for(config, store, harness)
    };
    let open_for = if by_api { API_ATTENTION_OPEN } else { wait };
    store.open_attention_shown(
        session,
        (attention_id, tool, message, call.map(|c| &c.input)),
        now_ms() + open_for.as_millis() as i64,
        std::process::id(),
    )?;
    if config.broken {
        // Nothing waits for this prompt and no receiver can answer it now: it goes out (once
        // the config is fixed) already cleared, never as one the page offers.
        store.close_attention(session, attention_id, How::Timeout)?;
        crate::logging::warn(&format!(
            "{} {attention_id}: the config does not load, so no receiver can answer; the prompt is left to the terminal and cleared",
            session.key()
        ));
        return Ok(());
    }
    if !config.sinks.is_empty() {
        crate::sync_lock::ensure_running();
    }
    if wait.is_zero() {
        return Ok(());
    }
    wait_for_answer(harness, store, session, (attention_id, call), wait, &stop)
}

/// Waits up to `wait` for the person's answer to this attention, printing it when one is
/// claimed; a signal, a cancel, the attention cleared elsewhere or the harness gone ends the
/// wait without one.
fn wait_for_answer(
    harness: Harness,
    store: &mut Store,
    session: &SessionRef,
    (attention_id, call): (&str, Option<&Call>),
    wait: Duration,
    stop: &AtomicBool,
) -> Result<()> {
    let pid = std::process::id();
    let key = session.key();
    // Droid asks at PreToolUse, itself a seam that stops it (Deliver): a cancel answers there.
    let cancel_denies = matches!(
        harness.cancel_seam(&session.event),
        crate::harness::CancelSeam::DenyPermission | crate::harness::CancelSeam::Deliver
    );
    // Wakes the loop when the database is written (an answer stored), else on a tick.
    let waker = super::wake::Waker::new(&crate::paths::database_file());
    let started = Instant::now();
    let mut last_sync_check = Instant::now();
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    loop {
        if stop.load(Ordering::Relaxed) {
            // Claude Code sends SIGTERM when the person answers "No" or Esc in its own dialog.
            store.close_attention(session, attention_id, How::Answered)?;
            crate::logging::info(&format!(
                "{key} {attention_id}: signalled while waiting; cleared answered"
            ));
            return Ok(());
        }
        // DECISIONS 26: the person stopped the session: deny, so the agent is not left at
        // the dialog, and stop it with the denial.
        if cancel_denies
            && store.cancel_queued(&key)?
            && deny_for_cancel(harness, store, session, attention_id)?
        {
            return Ok(());
        }
        let (open, answer_queued) = store.attention_poll(&key, attention_id)?;
        if !open {
            crate::logging::info(&format!(
                "{key} {attention_id}: cleared elsewhere; stop waiting"
            ));
            return Ok(());
        }
        if answer_queued {
            if let Some(answer) = store.claim_answer(&key, attention_id, pid)? {
                if deliver_answer(harness, store, session, (attention_id, call), &answer)? {
                    return Ok(());
                }
                // Acked `failed`; the prompt stays open for another answer.
                continue;
            }
        }
        if started.elapsed() >= wait {
            if let Some(park) = harness.render_park(&session.event) {
                return park_prompt(store, session, attention_id, &park);
            }
            store.close_attention(session, attention_id, How::Timeout)?;
            crate::logging::info(&format!(
                "{key} {attention_id}: no answer within {}s",
                wait.as_secs()
            ));
            return Ok(());
        }
        // SAFETY: getppid has no preconditions.
        if unsafe { libc::getppid() } != parent {
            store.close_attention(session, attention_id, How::Cancelled)?;
            crate::logging::info(&format!(
                "{key} {attention_id}: the harness went away while waiting"
            ));
            return Ok(());
        }
        if last_sync_check.elapsed() >= SYNC_CHECK_EVERY {
            crate::sync_lock::ensure_running();
            last_sync_check = Instant::now();
        }
        waker.wait(waker.tick().min(wait.saturating_sub(started.elapsed())));
    }
}

/// How long a parked prompt stays answerable (DECISIONS 39).
pub const PARKED_FOR: Duration = Duration::from_secs(24 * 3600);

/// DECISIONS 39: no answer in the window and the run can park: the prompt stays open (and
/// answerable) for [`PARKED_FOR`], and the run is told to end waiting for it. Answered or
/// cleared in the meantime (the park found nothing open): nothing is printed.
fn park_prompt(
    store: &mut Store,
    session: &SessionRef,
    attention_id: &str,
    park: &str,
) -> Result<()> {
    let until = now_ms() + PARKED_FOR.as_millis() as i64;
    if store.park_attention(session, attention_id, until)? {
        super::print_answer(park)?;
        crate::logging::info(&format!(
            "{} {attention_id}: no answer in the window; parked until {}",
            session.key(),
            crate::clock::format_ms(until)
        ));
    }
    Ok(())
}

/// Set on SIGTERM, SIGINT or SIGHUP.
fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    Ok(stop)
}

/// Prints a claimed answer in the harness's shape, then confirms it delivered, and keeps a
/// grant for `scope: "session"`. False when the answer cannot be carried out for this call
/// (DECISIONS 30): it is acked `failed` naming the rule and nothing is printed.
fn deliver_answer(
    harness: Harness,
    store: &mut Store,
    session: &SessionRef,
    (attention_id, call): (&str, Option<&Call>),
    answer: &Answer,
) -> Result<bool> {
    let text = match answer.decision {
        Decision::Allow => String::new(),
        Decision::Deny => answer
            .note
            .clone()
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| {
                format!(
                    "Denied by the person through sessionpipe (sink {:?}).",
                    answer.sink
                )
            }),
    };
    let session_rule = answer.scope == Scope::Session;
    let out = match (harness.keeps_grants(), call) {
        (true, Some(call)) => {
            let rich = RichAnswer {
                decision: answer.decision,
                message: &text,
                rich: &answer.rich,
                session_rule,
            };
            if let Some(why) = harness.unsupported_for_call(&rich, call) {
                store.finish_claimed(&answer.id, "unsupported", &why)?;
                crate::logging::info(&format!(
                    "{} {attention_id}: answer {} unsupported: {why}",
                    session.key(),
                    answer.id
                ));
                return Ok(false);
            }
            harness.render_rich_permission(&rich, call)
        }
        // Only a harness that names its call gets these fields (the rest are acked
        // `unsupported` on arrival); never carry part of an answer.
        _ if session_rule || !answer.rich.is_empty() => {
            Err("the call's input is unknown here, so this answer cannot be carried out (DECISIONS 30); nothing ran".into())
        }
        _ => Ok(harness.render_permission(answer.decision, &text)),
    };
    let out = match out {
        Ok(out) => out,
        Err(why) => {
            store.fail_claimed(&answer.id, &why)?;
            crate::logging::info(&format!(
                "{} {attention_id}: answer {} failed: {why}",
                session.key(),
                answer.id
            ));
            return Ok(false);
        }
    };
    super::print_answer(&harness.answer_at_event(&session.event, out.clone()))?;
    let mut detail = format!("{} {} hook", harness.name(), session.event);
    let fields = answer.rich.fields();
    if !fields.is_empty() {
        detail.push_str(&format!(" ({})", fields.join(", ")));
    }
    match (session_rule, call) {
        (true, Some(call)) => {
            let printed = serde_json::from_str::<serde_json::Value>(&out)
                .ok()
                .and_then(|v| {
                    v["hookSpecificOutput"]["decision"]
                        .get("updatedInput")
                        .cloned()
                });
            let folder = store.grant_folder(session);
            let grant = NewGrant {
                session_key: &session.key(),
                folder: folder.as_deref(),
                tool: &call.tool,
                input: &call.input,
                summary: &describe_tool(&call.tool, &call.input),
                decision: answer.decision,
                answer: printed.map(|v| v.to_string()),
                who: &answer.sink,
                message_id: &answer.id,
                until_ms: None,
            };
            store.confirm_answer_with_grant(session, attention_id, answer, &detail, &grant)?;
        }
        _ => store.confirm_answer(session, attention_id, answer, &detail)?,
    }
    crate::logging::info(&format!(
        "{} {attention_id}: {} delivered ({})",
        session.key(),
        answer.decision.as_str(),
        answer.id
    ));
    Ok(true)
}

/// A queued `cancel` answers a waiting permission prompt: deny (with the stop's reason, and
/// the harness's interrupt where it has one), then the cancel is delivered and the prompt
/// cleared `answered`. False when another hook took the cancel first.
fn deny_for_cancel(
    harness: Harness,
    store: &mut Store,
    session: &SessionRef,
    attention_id: &str,
) -> Result<bool> {
    if !harness.permission_deny_stops() {
        // The denial alone does not stop this harness: the cancel stays queued for its next
        // seam (a tool boundary or the turn's end), which stops it.
        let reason = "Stopped by the person through sessionpipe; the agent stops at its next step.";
        super::print_answer(
            &harness.answer_at_event(&session.event, harness.render_cancel_permission(reason)),
        )?;
        store.close_attention(session, attention_id, How::Answered)?;
        crate::logging::info(&format!(
            "{} {attention_id}: denied for a cancel, which stays queued for the next seam",
            session.key()
        ));
        return Ok(true);
    }
    let Some(claim) = store.take_cancels(session, std::process::id())? else {
        return Ok(false);
    };
    // A seam that stops the agent itself (Droid's PreToolUse) names its own answer.
    let how = match harness.cancel_seam(&session.event) {
        crate::harness::CancelSeam::Deliver => harness
            .render_cancel(&session.event, "")
            .map_or("deny", |(_, how)| how),
        _ => "deny, interrupt",
    };
    super::print_answer(&harness.answer_at_event(
        &session.event,
        harness.render_cancel_permission(&claim.reason()),
    ))?;
    store.confirm_delivered(
        &claim.ids,
        &format!("{} {} hook ({how})", harness.name(), session.event),
    )?;
    store.close_attention(session, attention_id, How::Answered)?;
    crate::logging::info(&format!(
        "{} {attention_id}: denied and stopped by a cancel",
        session.key()
    ));
    Ok(true)
}
