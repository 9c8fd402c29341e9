//! The controller: the one thread of sp-acp that touches the store. It records what the
//! forwarders saw (sessions, permission requests, turn ends) with the hooks' store functions,
//! and acts on the messages sp-sync stored for this proxy's sessions:
//!
//! - `permission.answer` → the agent gets its `allow_once` / `reject_once` option (an
//!   `always` one only for `scope: "session"` where it is for the session alone: Gemini CLI's)
//!   if the editor has not answered yet; the editor is sent `$/cancel_request` for that
//!   request and its late response is swallowed. With `scope: "session"` sp-acp keeps the
//!   grant and answers the same call (same tool, same input) again itself.
//! - `cancel` → `session/cancel` while a prompt runs (pending permissions are answered
//!   `cancelled`, as ACP requires of whoever cancels); acked `delivered` when the prompt ends
//!   `cancelled`, `expired` when it ends otherwise first or no turn was running.
//! - `prompt` → `session/prompt` from the proxy when the session is idle; while a turn runs,
//!   `steer` / `interrupt` go as Harn's `session/inject` when the agent offers it (or, where
//!   it offers instead a `session/prompt` with `delivery: "steer"`, as Harn 0.10 does, both go
//!   that way: Harn 0.10 reads `session/remind` only after the running turn), or as a plain
//!   `session/prompt` where the agent queues prompts into the running turn (claude-agent-acp's
//!   `promptQueueing`; its outcome known when the agent answers it), or as
//!   `_session/steering` where the agent advertises that extension (its answer decides the
//!   ack), and everything else waits for the turn to end.
//!   A prompt that went in is acked `delivered` (mode `api`) only when the turn it went into
//!   ends, its reply that turn's agent text, with `progress` acks meanwhile (DECISIONS 38).
use super::wire::{self, PermissionOptionKind, StopReason};
use super::{Ev, Own, Shared};
use crate::clock::now_ms;
use crate::store::{Answer, PromptClaim, SessionRef, Store};
use crate::wire::control::{Decision, Outcome, Scope};
use crate::wire::event::{How, TurnEnd};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How often the store is looked at for messages when no frame woke the controller.
const TICK: Duration = Duration::from_millis(50);
/// How often an unusable store is tried again.
const REOPEN_EVERY: Duration = Duration::from_secs(5);
/// How often sp-sync is checked for (DECISIONS 28) and sessions kept live (DECISIONS 5).
const KEEPALIVE_EVERY: Duration = Duration::from_secs(5);
/// A `session/cancel` whose prompt has not ended by then is acked `failed`.
const CANCEL_WAIT: Duration = Duration::from_secs(25);
/// An ACP permission request stays open this long in the store unless answered or ended.
const PERMISSION_OPEN: Duration = Duration::from_secs(3600);
const BUSY_TIMEOUT: Duration = Duration::from_secs(3);

/// The ack's `mode` for a prompt sp-acp puts into a session: through the agent's own API.
const API: &str = "api";
/// DECISIONS 38: `progress` acks at most this often.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// The last `progress` of a turn: when, and how long the text was.
struct Progress {
    last: Instant,
    len: usize,
}

/// A `session/cancel` sent, waiting for its prompt to end.
struct PendingCancel {
    ids: Vec<String>,
    sent: Instant,
}

struct Controller<'a> {
    shared: &'a Shared,
    store: Option<Store>,
    last_open_try: Option<Instant>,
    start_sync: bool,
    /// Sessions recorded in the store: session id → cwd.
    live: HashMap<String, Option<String>>,
    /// The mode each session last reported (`modes.currentModeId`, `current_mode_update`).
    modes: HashMap<String, String>,
    cancels: HashMap<String, PendingCancel>,
    /// Sessions whose turn the phone's prompts wait for, and their last `progress`.
    waiting: HashMap<String, Progress>,
    last_keepalive: Instant,
    pid: u32,
}

pub(super) fn run(shared: &Shared, rx: Receiver<Ev>) {
    let config = crate::config::Config::load().unwrap_or_else(|e| {
        crate::logging::warn(&format!(
            "sp-acp: {e:#}; acting as if no sink were configured"
        ));
        crate::config::Config::default()
    });
    let mut c = Controller {
        shared,
        store: None,
        last_open_try: None,
        start_sync: !config.sinks.is_empty(),
        live: HashMap::new(),
        modes: HashMap::new(),
        cancels: HashMap::new(),
        waiting: HashMap::new(),
        last_keepalive: Instant::now(),
        pid: std::process::id(),
    };
    loop {
        let mut closed = false;
        match rx.recv_timeout(TICK) {
            Ok(Ev::Closed) | Err(RecvTimeoutError::Disconnected) => closed = true,
            Ok(ev) => c.event(ev),
            Err(RecvTimeoutError::Timeout) => {}
        }
        while let Ok(ev) = rx.try_recv() {
            match ev {
                Ev::Closed => closed = true,
                ev => c.event(ev),
            }
        }
        if closed {
            break;
        }
        c.pass();
    }
    c.finish();
}

/// What an answer wants, as the ack names it. DECISIONS 30 `scope: "session"`: the agent's
/// own allow_always only where it is for this session alone (Gemini CLI's); everywhere else
/// (OpenCode's `always` persists beyond the session) the once option, and sp-acp keeps the
/// grant. A deny with `interrupt` wants a reject that ends the turn (rule 41).
fn option_wanted(
    st: &super::State,
    p: &super::Perm,
    answer: &Answer,
) -> (&'static str, super::options::Want) {
    use super::options::Want;
    let always = answer.scope == Scope::Session
        && answer.decision == Decision::Allow
        && super::agent::always_is_for_the_session(
            super::agent::display_name(st.agent_name.as_deref(), &st.command).as_deref(),
        )
        && p.options
            .iter()
            .any(|o| o.kind == PermissionOptionKind::AllowAlways);
    match answer.decision {
        Decision::Allow if always => (
            "allow_always (the agent's own, for this session)",
            Want::AllowForSession,
        ),
        Decision::Allow => ("allow_once", Want::AllowOnce),
        Decision::Deny if answer.rich.interrupt => ("reject_once (and stop)", Want::RejectAndStop),
        Decision::Deny => ("reject_once", Want::RejectOnce),
    }
}

fn session_ref(sid: &str, cwd: Option<&str>, event: &str, mode: Option<&str>) -> SessionRef {
    SessionRef {
        harness: super::HARNESS.to_string(),
        session_id: sid.to_string(),
        cwd: cwd.map(str::to_string),
        event: event.to_string(),
        permission_mode: mode.and_then(mode_word),
    }
}

/// An ACP mode id as the session's `permission_mode` (a word of letters and digits, as the
/// event schema takes it): `read-only` → `readonly`. The page shows it, and a mode other than
/// `default` and `plan` counts as running tools unasked (DECISIONS 36), so a message to such a
/// session needs a touch.
fn mode_word(mode: &str) -> Option<String> {
    let w: String = mode.chars().filter(char::is_ascii_alphanumeric).collect();
    (!w.is_empty() && w.len() <= 40).then_some(w)
}

/// Takes the session's pending permission requests out of the state, with their keys.
fn remove_perms(st: &mut super::State, sid: &str) -> Vec<(String, super::Perm)> {
    let keys: Vec<String> = st
        .perms
        .iter()
        .filter(|(_, p)| p.sid == sid)
        .map(|(k, _)| k.clone())
        .collect();
    keys.into_iter()
        .filter_map(|k| st.perms.remove(&k).map(|p| (k, p)))
        .collect()
}

/// The ways the agent offers to put a message into a running turn.
#[derive(Clone, Copy)]
struct Offers {
    /// Harn's `session/inject`.
    inject: bool,
    /// A `session/prompt` with `delivery: "steer"`.
    steer: bool,
    /// claude-agent-acp's `promptQueueing`: a plain `session/prompt` joins the running turn.
    queueing: bool,
}

/// How a prompt of `mode` goes into the running turn, or None: it waits for the turn's end.
/// Harn's `session/inject` when offered; else a steering `session/prompt`, for an interrupt
/// too (Harn 0.10 has no way to put a message in a running turn sooner: its `session/remind`
/// is read only after that turn); else, where the agent queues a prompt into the running turn
/// (claude-agent-acp's promptQueueing), a plain `session/prompt`, an interrupt as a steer
/// (rule 25).
fn into_turn(offers: Offers, mode: &str) -> Option<&'static str> {
    Some(match (offers.inject, mode) {
        (true, "steer") => "session/inject mode steer",
        (true, _) => "session/inject mode interrupt_immediate",
        (false, _) if offers.steer => "session/prompt delivery steer",
        (false, "steer") if offers.queueing => {
            "session/prompt (promptQueueing: it joins the running turn at its next tool boundary)"
        }
        (false, _) if offers.queueing => {
            "session/prompt (promptQueueing: an interrupt goes as a steer, joining the running turn at its next tool boundary)"
        }
        _ => return None,
    })
}

impl Controller<'_> {
    /// The store, opened on first use and again after it failed; None while unusable.
    fn store(&mut self) -> Option<&mut Store> {
        if self.store.is_none()
            && self
                .last_open_try
                .is_none_or(|t| t.elapsed() >= REOPEN_EVERY)
        {
            self.last_open_try = Some(Instant::now());
            match crate::store::open(&crate::paths::database_file(), BUSY_TIMEOUT) {
                Ok(s) => self.store = Some(s),
                Err(e) => crate::logging::error(&format!(
                    "sp-acp: the store is unusable ({e:#}); frames still pass through"
                )),
            }
        }
        self.store.as_mut()
    }

    /// Runs one store action; a failure is logged and the session goes on.
    fn with_store<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut Store) -> anyhow::Result<T>,
    ) -> Option<T> {
        let store = self.store()?;
        match f(store) {
            Ok(v) => Some(v),
            Err(e) => {
                crate::logging::error(&format!("sp-acp: {what}: {e:#}"));
                None
            }
        }
    }

    fn sref(&self, sid: &str, event: &str) -> SessionRef {
        session_ref(
            sid,
            self.live.get(sid).and_then(|c| c.as_deref()),
            event,
            self.modes.get(sid).map(String::as_str),
        )
    }

    fn ensure_sync(&self) {
        if self.start_sync {
            crate::sync_lock::ensure_running();
        }
    }

    fn event(&mut self, ev: Ev) {
        match ev {
            Ev::Session {
                sid,
                cwd,
                source,
                mode,
            } => {
                if !crate::wire::is_session_id(&sid) {
                    crate::logging::warn(&format!("sp-acp: session id {sid:?} is not usable"));
                    return;
                }
                if let Some(m) = mode {
                    self.modes.insert(sid.clone(), m);
                }
                let s = session_ref(
                    &sid,
                    cwd.as_deref(),
                    "session/new",
                    self.modes.get(&sid).map(String::as_str),
                );
                let extra = {
                    let st = self.shared.lock();
                    super::agent::started_data(
                        super::agent::display_name(st.agent_name.as_deref(), &st.command),
                        st.offers(),
                    )
                };
                if self
                    .with_store("recording the session", |st| {
                        st.record_session(&s, source, &extra)
                    })
                    .is_some()
                {
                    crate::logging::info(&format!("sp-acp: {} live ({source})", s.key()));
                }
                self.live.insert(sid, cwd);
                self.ensure_sync();
            }
            Ev::Permission {
                sid,
                attention,
                tool,
                message,
                input,
            } => {
                if !crate::wire::is_session_id(&sid) {
                    return;
                }
                self.live.entry(sid.clone()).or_insert(None);
                let s = self.sref(&sid, "session/request_permission");
                let until = now_ms() + PERMISSION_OPEN.as_millis() as i64;
                let pid = self.pid;
                self.with_store("recording a permission request", |st| {
                    st.open_attention_shown(
                        &s,
                        (
                            &attention,
                            tool.as_deref(),
                            message.as_deref(),
                            input.as_ref(),
                        ),
                        until,
                        pid,
                    )
                });
                self.ensure_sync();
            }
            Ev::Mode { sid, mode } => self.mode_changed(sid, mode),
            Ev::Withdrawn { sid, attention } => {
                let s = self.sref(&sid, "$/cancel_request");
                self.with_store("clearing a withdrawn request", |st| {
                    st.close_attention(&s, &attention, How::Cancelled)
                });
            }
            Ev::EditorAnswered { sid, attention } => {
                let s = self.sref(&sid, "session/request_permission");
                // Clearing it acks any remote answer still queued for it `expired`.
                self.with_store("clearing an answered permission", |st| {
                    st.close_attention(&s, &attention, How::Answered)
                });
            }
            Ev::TurnEnded { sid, stop, text } => self.turn_ended(&sid, stop, &text),
            Ev::OwnDone {
                own,
                result,
                running,
            } => self.own_done(own, result, running),
            Ev::ToAgent { frame } => {
                if let Err(e) = super::frame::write_frame(&self.shared.to_agent, frame.as_bytes()) {
                    crate::logging::warn(&format!("sp-acp: cannot write to the agent: {e}"));
                }
            }
            Ev::Closed => {}
        }
    }

    fn mode_changed(&mut self, sid: String, mode: String) {
        if !self.live.contains_key(&sid) || self.modes.len() >= super::TRACK_MAX {
            return;
        }
        crate::logging::info(&format!("sp-acp: acp:{sid} is in mode {mode:?}"));
        self.modes.insert(sid.clone(), mode);
        // Kept on the session, and told to the receiver now (a `session.mode` event):
        // a person should not wait for the next turn to learn why no prompt comes.
        let s = self.sref(&sid, "session/set_mode");
        self.with_store("noting the session's mode", |st| st.record_mode(&s));
        self.ensure_sync();
    }

    fn turn_ended(&mut self, sid: &str, stop: Option<StopReason>, text: &str) {
        if self.busy(sid) {
            return;
        }
        // The phone's prompts of this turn: delivered, with the turn's text (DECISIONS 38).
        self.waiting.remove(sid);
        let key = self.sref(sid, "session/prompt").key();
        let reply = (!text.is_empty()).then(|| crate::wire::control::ack_reply(text));
        self.with_store("acking the turn's prompts", |st| {
            st.turn_ended_as(&key, API, reply.as_deref())
        });
        // Permission requests of a finished turn will not be answered any more.
        let stale = remove_perms(&mut self.shared.lock(), sid);
        let s = self.sref(sid, "session/prompt");
        for (_, p) in stale {
            self.with_store("clearing a permission of an ended turn", |st| {
                st.close_attention(&s, &p.attention, How::Cancelled)
            });
        }
        if let Some(c) = self.cancels.remove(sid) {
            if stop == Some(StopReason::Cancelled) {
                self.with_store("confirming a cancel", |st| {
                    st.confirm_delivered(&c.ids, "acp session/cancel (the prompt ended cancelled)")
                });
            } else {
                let stop = stop.map_or("without a stopReason".into(), wire::stop_word);
                let detail = format!("the turn ended {stop} before session/cancel took effect");
                self.finish_all("expiring a cancel", &c.ids, Outcome::Expired, &detail);
            }
        }
        if self.live.contains_key(sid) {
            let reason = if stop == Some(StopReason::Cancelled) {
                TurnEnd::Interrupt
            } else {
                TurnEnd::Stop
            };
            self.with_store("noting the turn's end", |st| st.turn_over(&s, reason));
        }
    }

    /// `running`: a turn of the session was running when the answer came.
    fn own_done(&mut self, own: Own, result: Result<Value, String>, running: bool) {
        match own {
            Own::Steering { sid, ids, text } => {
                self.steering_done(&sid, ids, &text, result, running)
            }
            Own::Prompt { sid, ids } => match result {
                Ok(r) => crate::logging::info(&format!(
                    "sp-acp: acp:{sid}: the remote prompt's turn ended {}",
                    r.get("stopReason").unwrap_or(&Value::Null)
                )),
                Err(e) => {
                    crate::logging::warn(&format!(
                        "sp-acp: acp:{sid}: the remote prompt failed: {e}"
                    ));
                    let detail = format!("the agent refused session/prompt: {e}");
                    self.with_store("failing a prompt", |st| st.fail_turn_waits(&ids, &detail));
                    self.turn_ended(&sid, None, "");
                }
            },
            Own::Inject {
                sid,
                ids,
                how,
                queued,
            } => {
                if queued && result.is_err() {
                    // A queued prompt the agent refused ends nothing it started; the session
                    // may be idle now.
                    self.turn_ended(&sid, None, "");
                }
                let accepted = result
                    .as_ref()
                    .ok()
                    .and_then(|r| r.get("status"))
                    .and_then(Value::as_str)
                    .is_none_or(|s| s == "accepted");
                match result {
                    Ok(_) if accepted => {
                        let detail = format!("acp {how} (accepted)");
                        self.delivered_in_turn(&sid, &ids, &detail, running);
                    }
                    other => {
                        let detail = match other {
                            Ok(r) => format!("{how} answered {r}"),
                            Err(e) => format!("{how} failed: {e}"),
                        };
                        crate::logging::warn(&format!("sp-acp: acp:{sid}: {detail}"));
                        self.with_store("failing an inject", |st| {
                            for id in &ids {
                                st.finish_message(id, Outcome::Failed, &detail)?;
                            }
                            Ok(())
                        });
                    }
                }
            }
        }
    }

    /// One look at the store for every session of this proxy.
    fn pass(&mut self) {
        if self.store().is_none() {
            return;
        }
        let keepalive = self.last_keepalive.elapsed() >= KEEPALIVE_EVERY;
        if keepalive {
            self.last_keepalive = Instant::now();
            self.ensure_sync();
        }
        let sids: Vec<String> = self.live.keys().cloned().collect();
        for sid in sids {
            if keepalive {
                let s = self.sref(&sid, "keepalive");
                self.with_store("keeping the session live", |st| st.record_event(&s, None));
            }
            self.answers(&sid);
            self.cancel(&sid);
            self.prompts(&sid);
        }
        self.progress();
        // A cancel whose prompt never ended.
        let overdue: Vec<String> = self
            .cancels
            .iter()
            .filter(|(_, c)| c.sent.elapsed() >= CANCEL_WAIT)
            .map(|(k, _)| k.clone())
            .collect();
        for sid in overdue {
            if let Some(c) = self.cancels.remove(&sid) {
                let detail = format!(
                    "session/cancel was sent but the prompt had not ended {}s later",
                    CANCEL_WAIT.as_secs()
                );
                self.with_store("failing a cancel", |st| {
                    for id in &c.ids {
                        st.finish_message(id, Outcome::Failed, &detail)?;
                    }
                    Ok(())
                });
            }
        }
    }

    /// Remote answers to this session's open permission requests.
    fn answers(&mut self, sid: &str) {
        let perms: Vec<super::Perm> = self
            .shared
            .lock()
            .perms
            .values()
            .filter(|p| p.sid == sid)
            .cloned()
            .collect();
        let s = self.sref(sid, "session/request_permission");
        let key = s.key();
        for p in perms {
            let Some((_, queued)) = self.with_store("looking for answers", |st| {
                st.attention_poll(&key, &p.attention)
            }) else {
                return;
            };
            if queued {
                self.answer(sid, &s, &p);
            }
        }
    }

    /// Claims the answer queued for `p` and gives the agent the option it chose, unless the
    /// editor answered first; the answer is acked once either way.
    fn answer(&mut self, sid: &str, s: &SessionRef, p: &super::Perm) {
        let key = s.key();
        // Held while claiming and answering: the editor's answer either came before (the
        // request is gone and nothing is claimed) or is swallowed after.
        let shared = self.shared;
        let mut st = shared.lock();
        let req_key = super::id_key(&p.id);
        if !st.perms.contains_key(&req_key) {
            return;
        }
        let pid = self.pid;
        let Some(Some(answer)) = self.with_store("claiming an answer", |db| {
            db.claim_answer(&key, &p.attention, pid)
        }) else {
            return;
        };
        if let Some(e) = p.elicit.clone() {
            return self.answer_elicitation(st, sid, s, p, &e, &answer);
        }
        if answer.rich.answers.is_some() {
            drop(st);
            let detail = "answers: this is a permission prompt, not a question (DECISIONS 30); nothing ran, the prompt stays open";
            self.finish_answer(&answer, Outcome::Unsupported, detail, "refusing an answer");
            return;
        }
        let for_session = answer.scope == Scope::Session;
        let (want, kind) = option_wanted(&st, p, &answer);
        let grants_held = st.grants.get(sid).map_or(0, |g| g.len());
        if for_session
            && grants_held >= super::GRANTS_MAX
            && !st.grants.get(sid).is_some_and(|g| g.contains_key(&p.grant))
        {
            drop(st);
            let detail = format!(
                "scope: this session already holds {grants_held} grants, the most sp-acp keeps; nothing ran, the prompt stays open"
            );
            self.finish_answer(&answer, Outcome::Unsupported, &detail, "refusing an answer");
            return;
        }
        let (option, stops) = match super::options::choose(&p.options, kind) {
            Ok((o, stops)) => (o.id.clone(), stops),
            Err(why) => {
                drop(st);
                crate::logging::warn(&format!("sp-acp: {key} {}: {why}", p.attention));
                self.finish_answer(&answer, Outcome::Unsupported, &why, "refusing an answer");
                return;
            }
        };
        if let Err(e) = self.select_option(p, &option) {
            drop(st);
            let detail = format!("cannot write to the agent: {e}");
            self.finish_answer(&answer, Outcome::Failed, &detail, "failing an answer");
            return;
        }
        st.perms.remove(&req_key);
        st.swallow_later(req_key);
        if for_session {
            st.grants
                .entry(sid.to_string())
                .or_default()
                .insert(p.grant.clone(), answer.decision);
        }
        drop(st);
        let mut detail = format!("acp session/request_permission ({want} option {option:?})");
        // DECISIONS 30 `interrupt`: deny and stop, so after the reject the turn is cancelled.
        if answer.decision == Decision::Deny && answer.rich.interrupt {
            if stops {
                detail.push_str("; that option ends the turn");
            }
            match self.stop_turn(sid, s) {
                Ok(()) => detail.push_str("; then session/cancel: the turn ends"),
                Err(e) => detail.push_str(&format!(
                    "; session/cancel could not be written ({e}): the turn goes on"
                )),
            }
        }
        if for_session {
            detail.push_str(&format!(
                "; for the session: sp-acp answers the same tool with the same input {} until the session ends",
                answer.decision.as_str()
            ));
        }
        self.with_store("confirming an answer", |db| {
            db.confirm_answer(s, &p.attention, &answer, &detail)
        });
        crate::logging::info(&format!(
            "sp-acp: {key} {}: {} delivered ({})",
            p.attention,
            answer.decision.as_str(),
            answer.id
        ));
    }

    /// The person's answer to an elicitation (rule 41): an allow's `answers` become the
    /// form's `accept` content (a link's allow accepts it, with no content), a deny declines
    /// it (with `interrupt`, the turn then ends). An answer that does not fit is acked
    /// `failed` naming why, and the question stays open.
    fn answer_elicitation(
        &mut self,
        mut st: std::sync::MutexGuard<'_, super::State>,
        sid: &str,
        s: &SessionRef,
        p: &super::Perm,
        e: &super::elicit::Elicit,
        answer: &Answer,
    ) {
        use super::elicit::Kind;
        let still_open = "; nothing was answered, the question is still open";
        let result = match (answer.decision, &e.kind) {
            _ if answer.scope == Scope::Session => Err((
                Outcome::Unsupported,
                format!("scope: a question is answered once, not for the session (DECISIONS 30){still_open}"),
            )),
            _ if answer.rich.input.is_some() => Err((
                Outcome::Unsupported,
                format!("input: a question has no call input to replace{still_open}"),
            )),
            (Decision::Allow, Kind::Form(fields)) => match &answer.rich.answers {
                None => Err((
                    Outcome::Failed,
                    format!("a question needs answers (DECISIONS 30){still_open}"),
                )),
                Some(a) => super::elicit::content(fields, a)
                    .map(|c| (wire::elicitation_accept(&p.id, c), "accept"))
                    .map_err(|why| (Outcome::Failed, why)),
            },
            (Decision::Allow, Kind::Url { .. }) if answer.rich.answers.is_some() => Err((
                Outcome::Failed,
                format!("answers: a link has no questions{still_open}"),
            )),
            (Decision::Allow, Kind::Url { .. }) => {
                Ok((wire::elicitation_accept(&p.id, serde_json::Map::new()), "accept"))
            }
            (Decision::Deny, _) if answer.rich.answers.is_some() => Err((
                Outcome::Failed,
                format!("answers: only an allow carries answers (DECISIONS 30){still_open}"),
            )),
            (Decision::Deny, _) => Ok((wire::elicitation_decline(&p.id), "decline")),
        };
        let (frame, action) = match result {
            Ok(r) => r,
            Err((outcome, why)) => {
                drop(st);
                crate::logging::warn(&format!("sp-acp: {} {}: {why}", s.key(), p.attention));
                self.finish_answer(answer, outcome, &why, "refusing an answer");
                return;
            }
        };
        // The editor's copy is withdrawn first; its late answer is swallowed.
        let note = wire::cancel_request(&p.id);
        if let Err(e) = super::frame::write_frame(&self.shared.to_editor, note.as_bytes()) {
            crate::logging::warn(&format!("sp-acp: cannot tell the editor: {e}"));
        }
        if let Err(e) = super::frame::write_frame(&self.shared.to_agent, frame.as_bytes()) {
            drop(st);
            let detail = format!("cannot write to the agent: {e}");
            self.finish_answer(answer, Outcome::Failed, &detail, "failing an answer");
            return;
        }
        let req_key = super::id_key(&p.id);
        st.perms.remove(&req_key);
        st.swallow_later(req_key);
        drop(st);
        let mut detail = format!("acp elicitation/create ({action})");
        if answer.decision == Decision::Deny && answer.rich.interrupt {
            match self.stop_turn(sid, s) {
                Ok(()) => detail.push_str("; then session/cancel: the turn ends"),
                Err(e) => detail.push_str(&format!(
                    "; session/cancel could not be written ({e}): the turn goes on"
                )),
            }
        }
        self.with_store("confirming an answer", |db| {
            db.confirm_answer(s, &p.attention, answer, &detail)
        });
        crate::logging::info(&format!(
            "sp-acp: {} {}: {detail} ({})",
            s.key(),
            p.attention,
            answer.id
        ));
    }

    /// Ends the session's running turn for a deny with `interrupt`: its other pending
    /// permission requests are answered `cancelled` (as ACP asks of a client that cancels),
    /// then `session/cancel`.
    fn stop_turn(&mut self, sid: &str, s: &SessionRef) -> std::io::Result<()> {
        self.cancel_perms(sid, s);
        let frame = wire::session_cancel(sid);
        super::frame::write_frame(&self.shared.to_agent, frame.as_bytes())?;
        crate::logging::info(&format!(
            "sp-acp: {}: session/cancel sent after a deny with interrupt",
            s.key()
        ));
        Ok(())
    }

    /// Answers the session's pending permission requests `cancelled` (the editor told first,
    /// as for a remote answer: see `answers`) and clears their attentions.
    fn cancel_perms(&mut self, sid: &str, s: &SessionRef) {
        let pending: Vec<super::Perm> = {
            let mut st = self.shared.lock();
            remove_perms(&mut st, sid)
                .into_iter()
                .map(|(k, p)| {
                    let note = wire::cancel_request(&p.id);
                    let _ = super::frame::write_frame(&self.shared.to_editor, note.as_bytes());
                    let reply = wire::permission_cancelled(&p.id);
                    let _ = super::frame::write_frame(&self.shared.to_agent, reply.as_bytes());
                    st.swallow_later(k);
                    p
                })
                .collect()
        };
        for p in &pending {
            self.with_store("clearing a cancelled permission", |st| {
                st.close_attention(s, &p.attention, How::Cancelled)
            });
        }
    }

    /// Tells the agent the option chosen for its request `p`, after asking the editor, which
    /// still shows the request, to drop it (ACP `$/cancel_request`; whatever it answers to
    /// that id is swallowed). Only the agent's write can fail the answer.
    fn select_option(&self, p: &super::Perm, option: &str) -> std::io::Result<()> {
        let note = wire::cancel_request(&p.id);
        if let Err(e) = super::frame::write_frame(&self.shared.to_editor, note.as_bytes()) {
            crate::logging::warn(&format!("sp-acp: cannot tell the editor: {e}"));
        }
        let reply = wire::permission_selected(&p.id, option);
        super::frame::write_frame(&self.shared.to_agent, reply.as_bytes())
    }

    /// Acks an answer that was not acted on with `outcome` and `detail`.
    fn finish_answer(&mut self, answer: &Answer, outcome: Outcome, detail: &str, what: &str) {
        self.with_store(what, |db| db.finish_message(&answer.id, outcome, detail));
    }

    fn busy(&self, sid: &str) -> bool {
        self.shared
            .lock()
            .sessions
            .get(sid)
            .is_some_and(|s| s.prompts > 0)
    }

    fn cancel(&mut self, sid: &str) {
        let s = self.sref(sid, "session/cancel");
        let key = s.key();
        let Some(true) = self.with_store("looking for cancels", |st| st.cancel_queued(&key)) else {
            return;
        };
        if self.cancels.contains_key(sid) {
            return; // one already on its way; later ones wait for the next turn
        }
        if !self.busy(sid) {
            self.with_store("expiring cancels", |st| {
                st.expire_cancels(
                    &s,
                    "no turn was running when it arrived; there was nothing to stop",
                )
            });
            return;
        }
        let pid = self.pid;
        let Some(Some(claim)) = self.with_store("claiming cancels", |st| st.take_cancels(&s, pid))
        else {
            return;
        };
        // Whoever cancels answers the session's pending permission requests `cancelled`.
        self.cancel_perms(sid, &s);
        let frame = wire::session_cancel(sid);
        match super::frame::write_frame(&self.shared.to_agent, frame.as_bytes()) {
            Ok(()) => {
                crate::logging::info(&format!(
                    "sp-acp: {key}: session/cancel sent ({} cancel(s))",
                    claim.ids.len()
                ));
                self.cancels.insert(
                    sid.to_string(),
                    PendingCancel {
                        ids: claim.ids,
                        sent: Instant::now(),
                    },
                );
            }
            Err(e) => {
                let detail = format!("cannot write session/cancel to the agent: {e}");
                self.finish_all("failing a cancel", &claim.ids, Outcome::Failed, &detail);
            }
        }
    }

    fn prompts(&mut self, sid: &str) {
        if self.busy(sid) {
            self.prompts_into_turn(sid);
        } else {
            self.prompt_when_idle(sid);
        }
    }

    /// `interrupt` first, then `steer`: each goes into the running turn the way the agent
    /// offers (see [`into_turn`]); with no way, it waits for the turn's end.
    fn prompts_into_turn(&mut self, sid: &str) {
        let s = self.sref(sid, "session/prompt");
        let pid = self.pid;
        let (offers, steering) = {
            let st = self.shared.lock();
            let offers = Offers {
                inject: st.inject,
                steer: st.delivery_steer,
                queueing: st.prompt_queueing,
            };
            (offers, st.steering)
        };
        // `_session/steering` where the agent offers it and no Harn `session/inject`.
        if !offers.inject && steering {
            self.steer(sid);
            return;
        }
        for (rank, mode) in [(2, "interrupt_immediate"), (1, "steer")] {
            let Some(how) = into_turn(offers, mode) else {
                continue;
            };
            let Some(claims) =
                self.with_store("claiming prompts", |st| st.take_seam_prompts(&s, pid, rank))
            else {
                return;
            };
            if !claims.is_empty() {
                self.send_into_turn(sid, offers, mode, how, &claims);
            }
        }
    }

    /// Sends `claims` into the running turn as `how` says; a plain queued `session/prompt`
    /// counts as a prompt of the session's and is shown in the editor's thread.
    fn send_into_turn(
        &mut self,
        sid: &str,
        offers: Offers,
        mode: &str,
        how: &'static str,
        claims: &[PromptClaim],
    ) {
        let queued = !offers.inject && !offers.steer;
        let text = crate::harness::compose_reason(claims);
        let ids: Vec<String> = claims.iter().map(|c| c.id.clone()).collect();
        let id = {
            let mut st = self.shared.lock();
            if queued {
                st.sessions.entry(sid.to_string()).or_default().prompts += 1;
            }
            st.own_id(Own::Inject {
                sid: sid.to_string(),
                ids: ids.clone(),
                how,
                queued,
            })
        };
        let frame = if queued {
            // As for a prompt while idle: the editor did not send it, so it is shown.
            let shown = wire::user_message(sid, &text);
            let _ = super::frame::write_frame(&self.shared.to_editor, shown.as_bytes());
            wire::session_prompt(&id, sid, &text)
        } else if offers.steer && !offers.inject {
            wire::session_prompt_steer(&id, sid, &text)
        } else {
            wire::session_inject(&id, sid, mode, &text)
        };
        if let Err(e) = super::frame::write_frame(&self.shared.to_agent, frame.as_bytes()) {
            let detail = format!("cannot write {how} to the agent: {e}");
            self.unsent(&id, sid, queued, &ids, &detail);
        }
    }

    /// Claims prompts with `take`: their ids and the one text they go as, or None when none
    /// was claimed (or the store failed).
    fn claim_prompts(
        &mut self,
        take: impl FnOnce(&mut Store) -> anyhow::Result<Vec<PromptClaim>>,
    ) -> Option<(Vec<String>, String)> {
        let claims = self.with_store("claiming prompts", take)?;
        if claims.is_empty() {
            return None;
        }
        let text = crate::harness::compose_reason(&claims);
        Some((claims.into_iter().map(|c| c.id).collect(), text))
    }

    /// The session is idle: its queued prompts go as one `session/prompt` of the proxy's.
    fn prompt_when_idle(&mut self, sid: &str) {
        let s = self.sref(sid, "session/prompt");
        let pid = self.pid;
        let Some((ids, text)) = self.claim_prompts(|st| st.take_prompts(&s, pid, None)) else {
            return;
        };
        self.send_prompt(sid, ids, &text, "acp session/prompt (sent by sp-acp)");
    }

    /// Sends claimed prompts as a `session/prompt` of the proxy's own; `detail` is the ack's.
    fn send_prompt(&mut self, sid: &str, ids: Vec<String>, text: &str, detail: &str) {
        let s = self.sref(sid, "session/prompt");
        let id = {
            let mut st = self.shared.lock();
            st.sessions.entry(sid.to_string()).or_default().prompts += 1;
            st.own_id(Own::Prompt {
                sid: sid.to_string(),
                ids: ids.clone(),
            })
        };
        // The editor did not send this prompt: show it in its thread as the user's message.
        let shown = wire::user_message(sid, text);
        let _ = super::frame::write_frame(&self.shared.to_editor, shown.as_bytes());
        let frame = wire::session_prompt(&id, sid, text);
        match super::frame::write_frame(&self.shared.to_agent, frame.as_bytes()) {
            Ok(()) => {
                self.delivered_in_turn(sid, &ids, detail, true);
                crate::logging::info(&format!(
                    "sp-acp: {}: {} prompt(s) sent as {id}",
                    s.key(),
                    ids.len()
                ));
            }
            Err(e) => {
                let detail = format!("cannot write session/prompt to the agent: {e}");
                self.unsent(&id, sid, true, &ids, &detail);
            }
        }
    }

    /// `steer` and `interrupt` while a turn runs, as `_session/steering` (an interrupt as a
    /// steer, rule 25), asking for `promptRequired` should the turn have ended meanwhile; the
    /// agent's answer decides the ack ([`Controller::steering_done`]).
    fn steer(&mut self, sid: &str) {
        let s = self.sref(sid, "_session/steering");
        let pid = self.pid;
        let Some((ids, text)) = self.claim_prompts(|st| st.take_seam_prompts(&s, pid, 1)) else {
            return;
        };
        let id = self.shared.lock().own_id(Own::Steering {
            sid: sid.to_string(),
            ids: ids.clone(),
            text: text.clone(),
        });
        let frame = wire::session_steering(&id, sid, &text);
        if let Err(e) = super::frame::write_frame(&self.shared.to_agent, frame.as_bytes()) {
            self.shared.lock().own.remove(&super::id_key(&id));
            let detail = format!("cannot write _session/steering to the agent: {e}");
            self.fail(&ids, &detail);
        }
    }

    /// The agent's answer to a `_session/steering`: `injected` (the text joined the running
    /// turn) and `startedNewTurn` (it started a turn with it) are delivered; `promptRequired`
    /// (no turn was running any more) sends the text as a `session/prompt`; an error, a
    /// `failed` outcome or any other answer fails it, and it is never sent twice.
    fn steering_done(
        &mut self,
        sid: &str,
        ids: Vec<String>,
        text: &str,
        result: Result<Value, String>,
        running: bool,
    ) {
        let outcome = result
            .as_ref()
            .ok()
            .and_then(|r| r.get("outcome"))
            .and_then(Value::as_str);
        let reason = result
            .as_ref()
            .ok()
            .and_then(|r| r.get("reason"))
            .map(|r| r.as_str().map_or_else(|| r.to_string(), str::to_string));
        match (outcome, &result) {
            (Some("injected"), _) => {
                self.delivered_in_turn(
                    sid,
                    &ids,
                    "acp _session/steering (injected into the running turn)",
                    running,
                );
            }
            // A turn the agent started itself has no `session/prompt` of ours or the editor's:
            // its end is not seen, and no `turn.ended` is sent for it.
            (Some("startedNewTurn"), _) => {
                self.delivered_now(
                    &ids,
                    "acp _session/steering (the agent started a new turn with it)",
                );
            }
            (Some("promptRequired"), _) => self.send_prompt(
                sid,
                ids,
                text,
                "acp session/prompt (_session/steering answered promptRequired: no turn was running)",
            ),
            (_, Err(e)) => self.fail(&ids, &format!("_session/steering failed: {e}")),
            (Some("failed"), _) => self.fail(
                &ids,
                &format!(
                    "_session/steering failed: {}",
                    reason.as_deref().unwrap_or("the agent gave no reason")
                ),
            ),
            (_, Ok(r)) => self.fail(
                &ids,
                &format!("_session/steering answered {r}, which sp-acp does not know; not sent again"),
            ),
        }
    }

    /// Prompts that went into a turn: `delivered` once that turn ends, the final ack then
    /// carrying mode `api` and the turn's text as `reply` ([`Controller::turn_ended`]); their
    /// `taken` is stored already (at ingest). `ends_later`: the turn's end is still to come
    /// (its `TurnEnded` follows); otherwise they are acked at once, without a reply.
    fn delivered_in_turn(&mut self, sid: &str, ids: &[String], detail: &str, ends_later: bool) {
        if !ends_later {
            self.delivered_now(ids, detail);
            return;
        }
        let key = self.sref(sid, "session/prompt").key();
        if self
            .with_store("confirming prompts", |st| {
                st.deliver_for_turn(&key, ids, detail, true)
            })
            .is_some()
        {
            self.waiting.entry(sid.to_string()).or_insert(Progress {
                last: Instant::now(),
                len: 0,
            });
        }
    }

    /// Prompts delivered where sp-acp sees no end of the turn they joined: acked `delivered`
    /// with mode `api` at once, without a reply.
    fn delivered_now(&mut self, ids: &[String], detail: &str) {
        self.with_store("confirming prompts", |st| st.delivered_as(ids, detail, API));
    }

    /// DECISIONS 38 `progress`: the text so far of each turn the phone's prompts wait for, at
    /// most every [`PROGRESS_EVERY`], when it grew. Best effort.
    fn progress(&mut self) {
        let due: Vec<String> = self
            .waiting
            .iter()
            .filter(|(_, p)| p.last.elapsed() >= PROGRESS_EVERY)
            .map(|(k, _)| k.clone())
            .collect();
        for sid in due {
            let text = {
                let st = self.shared.lock();
                match st.sessions.get(&sid) {
                    Some(s) if s.text.len() != self.waiting.get(&sid).map_or(0, |p| p.len) => {
                        s.text.clone()
                    }
                    _ => continue,
                }
            };
            if let Some(p) = self.waiting.get_mut(&sid) {
                p.last = Instant::now();
                p.len = text.len();
            }
            let key = self.sref(&sid, "session/update").key();
            let reply = crate::wire::control::ack_reply(&text);
            self.with_store("sending progress", |st| st.turn_progress(&key, &reply));
        }
    }

    fn fail(&mut self, ids: &[String], detail: &str) {
        crate::logging::warn(&format!(
            "sp-acp: {} message(s) failed: {detail}",
            ids.len()
        ));
        self.finish_all("failing messages", ids, Outcome::Failed, detail);
    }

    /// A request of ours that could not be written: it is forgotten (with the prompt it
    /// started, if `started`) and its messages fail.
    fn unsent(&mut self, id: &Value, sid: &str, started: bool, ids: &[String], detail: &str) {
        {
            let mut st = self.shared.lock();
            st.own.remove(&super::id_key(id));
            if started {
                super::end_prompt(&mut st, sid);
            }
        }
        self.finish_all("failing prompts", ids, Outcome::Failed, detail);
    }

    /// Ends every message of `ids` with `outcome`; a store failure is logged.
    fn finish_all(&mut self, what: &str, ids: &[String], outcome: Outcome, detail: &str) {
        self.with_store(what, |st| {
            for id in ids {
                st.finish_message(id, outcome, detail)?;
            }
            Ok(())
        });
    }

    /// The agent is gone: open cancels fail, every session of this proxy ends.
    fn finish(&mut self) {
        let cancels: Vec<PendingCancel> = self.cancels.drain().map(|(_, c)| c).collect();
        for c in cancels {
            let detail = "the agent exited before the prompt ended";
            self.finish_all("failing a cancel", &c.ids, Outcome::Failed, detail);
        }
        let sids: Vec<String> = self.live.keys().cloned().collect();
        for sid in sids {
            let s = self.sref(&sid, "exit");
            // A turn still waited for will not end now: its prompts are delivered, no reply.
            self.with_store("acking the turn's prompts", |st| {
                st.turn_ended_as(&s.key(), API, None)
            });
            self.with_store("ending the session", |st| st.end_session(&s));
        }
    }
}
