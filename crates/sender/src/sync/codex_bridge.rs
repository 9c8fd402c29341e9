//! sp-sync as a second client of Codex's app-server (issue 19, DECISIONS 15 and 25): for a
//! Codex session started with `sp codex` (its thread is loaded in the app-server on our
//! socket), prompts and cancels go in at once instead of waiting for a hook seam.
//!
//! | kind | thread idle | turn running |
//! |---|---|---|
//! | prompt (`queue`) | `turn/start` | stays queued: the Stop hook, or `turn/start` once the turn ends |
//! | prompt (`steer`, `interrupt`) | `turn/start` | `turn/steer` with the running turn's id |
//!
//! A prompt is acked `taken` when claimed, `progress` with the agent's text so far (from the
//! app-server's `item/agentMessage/delta`, at most every 500 ms), and once `delivered`, mode
//! `api`, when the turn it started or steered completes, with that turn's agent text as
//! `reply` (DECISIONS 38; redacted and capped, DECISIONS 37); interrupted it is `delivered`
//! with the text so far, failed it is `failed` with the app-server's error. The turn is kept
//! with the wait in the store, so an sp-sync restart or a new connection reads the turn's end
//! back from `thread/turns/list`; a wait whose thread nobody follows within
//! [`ORPHAN_GRACE`] (the app-server is gone) is acked `delivered` without a reply.
//!
//! | cancel | acked `expired` (nothing to stop) | `turn/interrupt`; `delivered` when the turn ends interrupted |
//! | permission.answer | (no request can be open) | the answer to the app-server's approval request, if the terminal has not answered first |
//! | permission.answer with `answers` | (no request can be open) | the answer to `item/tool/requestUserInput` (the model's question, which no hook sees: we announce it) |
//!
//! The session key's id is Codex's thread id (hooks' `session_id` is the thread id). Only
//! threads the app-server already has loaded are followed: `thread/resume` of anything else
//! would load a thread another Codex process may be running. Failures are acked `failed` with
//! the app-server's error. Claims go through the same store calls as OpenCode's API delivery,
//! so a hook seam and this path never both act on one message.
use super::Shared;
use crate::codex_server::{self, Client, RpcError};
use crate::store::{ApiMessage, NewGrant, SessionRef, Store};
use crate::wire::control::{Decision, Outcome, Scope};
use crate::wire::event::How;
use anyhow::Result;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

const HARNESS: &str = "codex";
const CLIENT_NAME: &str = "sessionpipe";
/// Every request's answer comes within this, or the connection is dropped and made again.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one read of the socket waits before the queue is looked at again.
const READ_SLICE: Duration = Duration::from_millis(5);
/// Live sessions and loaded threads are compared this often (and on every store change).
const REFRESH_EVERY: Duration = Duration::from_millis(500);
/// A live Codex session whose thread is not on our app-server is looked for again after this.
const NOT_LOADED_RETRY: Duration = Duration::from_secs(2);
/// A turn/interrupt whose turn has not ended after this is acked `failed`.
/// (Under the sweep's 30 s for a claim left `delivering`, so this detail is the one sent.)
const INTERRUPT_WAIT: Duration = Duration::from_secs(20);
const REPORT_EVERY: Duration = Duration::from_secs(2);
/// At most this many threads followed at once.
const MAX_THREADS: usize = 256;
/// Messages handled per read round, so the queue is looked at between floods.
const MAX_MESSAGES_PER_ROUND: usize = 500;
/// `progress` acks at most this often per turn (DECISIONS 38).
const PROGRESS_EVERY: Duration = Duration::from_millis(500);
/// At most this many turns waited for at once (one running turn per followed thread).
const MAX_AWAITED: usize = MAX_THREADS;
/// At most this many bytes of a turn's streamed text are kept (a reply is cut to 20,000
/// characters after redaction).
const TEXT_MAX: usize = 128 << 10;
/// A prompt waiting for an app-server turn that no connection follows for this long (the
/// app-server or its thread is gone) is acked `delivered` without a reply.
const ORPHAN_GRACE: Duration = Duration::from_secs(15);
/// How many of a thread's newest turns are looked through for a turn that ended unseen.
const TURNS_LOOKED_BACK: u32 = 20;
/// How many of such a turn's last items its reply is read from.
const ITEMS_LOOKED_BACK: u32 = 50;

/// A turn prompts of ours went into: their final ack waits for its end.
struct Awaited {
    key: String,
    thread: String,
    /// The agent's text so far, from the deltas (at most [`TEXT_MAX`] bytes).
    text: String,
    /// The agent message the last delta belonged to.
    item: String,
    /// How long `text` was at the last `progress`, and when that was.
    sent_len: usize,
    sent_at: Instant,
}

impl Awaited {
    fn new(key: &str, thread: &str) -> Awaited {
        Awaited {
            key: key.to_string(),
            thread: thread.to_string(),
            text: String::new(),
            item: String::new(),
            sent_len: 0,
            sent_at: Instant::now(),
        }
    }

    fn push(&mut self, item: &str, delta: &str) {
        let mut delta = delta.to_string();
        if item != self.item {
            if !self.text.is_empty() {
                delta.insert_str(0, "\n\n");
            }
            self.item = item.to_string();
        }
        let room = TEXT_MAX.saturating_sub(self.text.len());
        self.text
            .push_str(spwire::text::truncate_bytes(&delta, room));
    }
}

/// The agent's text of a finished turn (`turn/completed`, `thread/turns/list`): its agent
/// messages, in order, a blank line between them.
fn turn_text(turn: &Value) -> Option<String> {
    let text: Vec<&str> = turn["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "agentMessage")
        .filter_map(|i| i["text"].as_str())
        .filter(|t| !t.is_empty())
        .collect();
    (!text.is_empty()).then(|| text.join("\n\n"))
}

/// Turn `turn` (the app-server's) of session `key` ended: the prompts that went into it get
/// their one final ack. Completed or interrupted: `delivered`, mode `api`, with the turn's
/// text (or, when the app-server gave none, what streamed) as `reply`; failed: `failed` with
/// its error.
fn end_turn(store: &mut Store, key: &str, turn: &Value, streamed: &str) -> Result<()> {
    let id = turn["id"].as_str().unwrap_or("");
    let status = turn["status"].as_str().unwrap_or("unknown");
    if status == "failed" {
        let why = turn["error"]["message"]
            .as_str()
            .unwrap_or("no error given");
        let detail =
            spwire::text::truncate(&format!("codex app-server: turn {id} failed: {why}"), 500);
        let ids: Vec<String> = store
            .api_turn_waits(HARNESS)?
            .into_iter()
            .filter(|(k, t, _)| k == key && t == id)
            .map(|(_, _, m)| m)
            .collect();
        store.fail_turn_waits(&ids, &detail)?;
        crate::logging::info(&format!(
            "{key}: the turn of {} prompt(s) failed: {detail}",
            ids.len()
        ));
        return Ok(());
    }
    let text = turn_text(turn).or_else(|| (!streamed.is_empty()).then(|| streamed.to_string()));
    let reply = text.map(|t| crate::wire::control::ack_reply(&t));
    let n = store.api_turn_ended(key, id, reply.as_deref())?;
    crate::logging::info(&format!(
        "{key}: turn {id} of {n} prompt(s) ended {status} ({})",
        if reply.is_some() {
            "with its reply"
        } else {
            "no reply found"
        }
    ));
    Ok(())
}

/// Prompts waiting for an app-server turn nobody follows (the keys and since when): after
/// [`ORPHAN_GRACE`] each is acked `delivered`, mode `api`, without a reply. `followed`: the
/// turns a connection follows now.
fn end_orphans(
    store: &mut Store,
    orphans: &mut HashMap<(String, String), Instant>,
    followed: &HashMap<String, Awaited>,
) -> Result<()> {
    let waits = store.api_turn_waits(HARNESS)?;
    let now = Instant::now();
    let unfollowed: HashSet<(String, String)> = waits
        .into_iter()
        .filter(|(_, turn, _)| !followed.contains_key(turn))
        .map(|(key, turn, _)| (key, turn))
        .collect();
    orphans.retain(|k, _| unfollowed.contains(k));
    for k in unfollowed {
        let since = *orphans.entry(k.clone()).or_insert(now);
        if now.duration_since(since) >= ORPHAN_GRACE {
            let (key, turn) = k;
            let n = store.api_turn_ended(&key, &turn, None)?;
            crate::logging::warn(&format!(
                "{key}: turn {turn} was followed on no Codex app-server for {}s: {n} prompt(s) delivered without a reply",
                ORPHAN_GRACE.as_secs()
            ));
            orphans.remove(&(key, turn));
        }
    }
    Ok(())
}

struct Thread {
    key: String,
    active_turn: Option<String>,
}

/// An approval request of the app-server, matched to the attention its hook opened.
struct Approval {
    thread: String,
    key: String,
    request_id: Value,
    method: String,
    turn: String,
    /// The command a `commandExecution` approval is about (what a grant matches).
    command: Option<String>,
    /// A question's `questions` (`item/tool/requestUserInput`): what the answers are keyed by.
    questions: Option<Value>,
}

impl Approval {
    /// App-server request `m` of `thread` (session `key`), its `method`, nothing more known.
    fn of(m: &Value, thread: &str, key: String, method: String) -> Approval {
        Approval {
            thread: thread.to_string(),
            key,
            request_id: m["id"].clone(),
            method,
            turn: m["params"]["turnId"].as_str().unwrap_or("").to_string(),
            command: None,
            questions: None,
        }
    }
}

/// The model's question (Codex's `request_user_input` tool, experimental in 0.171).
const QUESTION: &str = "item/tool/requestUserInput";
/// The tool name the attention shows for it.
const QUESTION_TOOL: &str = "request_user_input";
/// How long a question waits for the person: the app-server does not time it out, so this
/// bounds the attention (sp-sync's sweep clears it after this once sp-sync is gone).
const QUESTION_WAIT: Duration = Duration::from_secs(3600);
/// At most this many questions (Codex asks one to three) and options each.
const MAX_QUESTIONS: usize = 10;
const MAX_OPTIONS: usize = 20;

/// The approval requests we can answer with allow/deny (`accept` / `decline`).
const APPROVALS: &[&str] = &[
    "item/commandExecution/requestApproval",
    "item/fileChange/requestApproval",
];

fn session_ref(thread: &str, event: &str) -> SessionRef {
    SessionRef {
        harness: HARNESS.into(),
        session_id: thread.into(),
        cwd: None,
        event: event.into(),
        permission_mode: None,
    }
}

struct PendingCancel {
    ids: Vec<String>,
    thread: String,
    turn: String,
    sent: Instant,
}

/// The follower thread: connects whenever the socket is there, follows until the connection
/// ends, and says in `attached.json` what it follows.
pub(crate) fn follow_loop(shared: &Shared) {
    let mut store = match shared.open_store() {
        Ok(s) => s,
        Err(e) => {
            crate::logging::error(&format!("codex app-server: {e:#}"));
            return;
        }
    };
    let socket = codex_server::socket_path();
    let mut failures = 0u32;
    let mut last_error = String::new();
    let mut orphans = HashMap::new();
    while !shared.stopping() {
        // Not connected: no turn is followed.
        if let Err(e) = end_orphans(&mut store, &mut orphans, &HashMap::new()) {
            crate::logging::warn(&format!("codex app-server: {e:#}"));
        }
        if std::fs::symlink_metadata(&socket).is_err() {
            report(false, &[]);
            shared.sleep(Duration::from_secs(1));
            continue;
        }
        match Client::connect(&socket, CLIENT_NAME) {
            Ok(client) => {
                failures = 0;
                last_error.clear();
                crate::logging::info(&format!(
                    "codex app-server: connected to {}",
                    socket.display()
                ));
                let mut f = Follower {
                    client,
                    threads: HashMap::new(),
                    retry: HashMap::new(),
                    pending: Vec::new(),
                    approvals: HashMap::new(),
                    awaited: HashMap::new(),
                    pid: std::process::id(),
                };
                if let Err(e) = f.run(shared, &mut store, &mut orphans) {
                    crate::logging::warn(&format!("codex app-server: {e:#}"));
                }
                f.fail_pending(
                    &mut store,
                    "the connection to the Codex app-server ended before the turn did",
                );
                f.close_questions(&mut store);
            }
            Err(e) => {
                failures += 1;
                let e = format!("{e:#}");
                if e != last_error {
                    crate::logging::info(&format!("codex app-server: not attached: {e}"));
                    last_error = e;
                }
            }
        }
        report(false, &[]);
        shared.sleep(Duration::from_secs(u64::from(failures.clamp(1, 10))));
    }
}

/// Writes what `sp doctor` shows: whether we are connected and which threads we follow.
fn report(connected: bool, threads: &[String]) {
    let body = json!({
        "pid": std::process::id(),
        "at_ms": crate::clock::now_ms(),
        "connected": connected,
        "threads": threads,
    });
    let path = codex_server::attached_file();
    if path.parent().is_none_or(|d| !d.exists()) {
        return;
    }
    let tmp = path.with_extension("json.tmp");
    let _ = std::fs::remove_file(&tmp);
    let written = crate::files::open_private(&tmp, false).and_then(|(mut f, _)| {
        use std::io::Write;
        f.write_all(body.to_string().as_bytes())
    });
    if written.is_ok() {
        let _ = std::fs::rename(&tmp, &path);
    }
}

/// The counter sp-sync's threads bump when there may be new work (a message stored).
fn work_seen(shared: &Shared) -> u64 {
    *shared.wake.0.lock().unwrap_or_else(|e| e.into_inner())
}

struct Follower {
    client: Client,
    /// Followed threads by thread id.
    threads: HashMap<String, Thread>,
    /// Threads whose resume failed: not before this again.
    retry: HashMap<String, Instant>,
    pending: Vec<PendingCancel>,
    /// Open approval requests by attention id.
    approvals: HashMap<String, Approval>,
    /// Turns our prompts went into, by turn id.
    awaited: HashMap<String, Awaited>,
    pid: u32,
}

impl Follower {
    fn run(
        &mut self,
        shared: &Shared,
        store: &mut Store,
        orphans: &mut HashMap<(String, String), Instant>,
    ) -> Result<()> {
        let mut seen = u64::MAX;
        let mut last_refresh = Instant::now() - REFRESH_EVERY;
        let mut last_report = Instant::now() - REPORT_EVERY;
        while !shared.stopping() {
            let mut n = 0;
            while let Some(m) = self.client.next_message(READ_SLICE)? {
                self.on_message(store, &m)?;
                n += 1;
                if n >= MAX_MESSAGES_PER_ROUND {
                    break;
                }
            }
            let now_seen = work_seen(shared);
            if now_seen != seen || last_refresh.elapsed() >= REFRESH_EVERY {
                seen = now_seen;
                if last_refresh.elapsed() >= REFRESH_EVERY {
                    last_refresh = Instant::now();
                    self.attach(shared, store)?;
                    end_orphans(store, orphans, &self.awaited)?;
                }
                self.deliver(store)?;
            }
            self.expire_pending(store)?;
            self.progress(store)?;
            if last_report.elapsed() >= REPORT_EVERY {
                last_report = Instant::now();
                let mut ids: Vec<String> = self.threads.keys().cloned().collect();
                ids.sort();
                report(true, &ids);
            }
        }
        Ok(())
    }

    /// Follows every live Codex session whose thread the app-server has loaded.
    fn attach(&mut self, shared: &Shared, store: &mut Store) -> Result<()> {
        let live: Vec<String> = store
            .live_sessions(shared.live_ms)?
            .into_iter()
            .filter(|(_, h)| h == HARNESS)
            .map(|(k, _)| k)
            .collect();
        let now = Instant::now();
        let wanted: Vec<(String, String)> = live
            .iter()
            .filter_map(|k| {
                let id = k.strip_prefix("codex:")?;
                let due = self.retry.get(id).is_none_or(|t| now >= *t);
                (due && !self.threads.contains_key(id)).then(|| (k.clone(), id.to_string()))
            })
            .collect();
        // Forget threads whose session ended or went quiet.
        let live_ids: HashSet<&str> = live
            .iter()
            .filter_map(|k| k.strip_prefix("codex:"))
            .collect();
        self.threads.retain(|id, _| live_ids.contains(id.as_str()));
        if wanted.is_empty() {
            return Ok(());
        }
        let loaded =
            match self
                .client
                .request("thread/loaded/list", json!({"limit": 1000}), CALL_TIMEOUT)?
            {
                Ok(v) => v["data"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(str::to_string))
                            .collect::<HashSet<String>>()
                    })
                    .unwrap_or_default(),
                Err(e) => {
                    crate::logging::warn(&format!("codex app-server: thread/loaded/list: {e}"));
                    return Ok(());
                }
            };
        self.retry.retain(|id, _| live_ids.contains(id.as_str()));
        for (key, id) in wanted {
            if !loaded.contains(&id) {
                // A Codex not started with `sp codex` (or not yet loaded): look again later.
                self.retry.insert(id, now + NOT_LOADED_RETRY);
                continue;
            }
            if self.threads.len() >= MAX_THREADS {
                crate::logging::warn(
                    "codex app-server: following the most threads allowed; not more",
                );
                break;
            }
            match self.resume(&id)? {
                Ok(active_turn) => {
                    crate::logging::info(&format!(
                        "{key}: following its thread on the Codex app-server ({})",
                        active_turn
                            .as_deref()
                            .map_or("idle".to_string(), |t| format!("turn {t} running"))
                    ));
                    self.retry.remove(&id);
                    self.recover(store, &key, &id, active_turn.as_deref())?;
                    self.threads.insert(id, Thread { key, active_turn });
                }
                Err(e) => {
                    // A thread whose first turn has not been written yet cannot be resumed.
                    crate::logging::debug(&format!("{key}: thread/resume: {e}"));
                    self.retry.insert(id, now + Duration::from_secs(1));
                }
            }
        }
        Ok(())
    }

    /// Subscribes to a loaded thread; its running turn, if any.
    fn resume(&mut self, id: &str) -> Result<std::result::Result<Option<String>, RpcError>> {
        let r = self.client.request(
            "thread/resume",
            json!({"threadId": id, "excludeTurns": true}),
            CALL_TIMEOUT,
        )?;
        let thread = match r {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        if thread["thread"]["status"]["type"] != "active" {
            return Ok(Ok(None));
        }
        let turns = self.client.request(
            "thread/turns/list",
            json!({"threadId": id, "limit": 3, "itemsView": "notLoaded"}),
            CALL_TIMEOUT,
        )?;
        Ok(turns.map(|v| {
            v["data"].as_array().and_then(|a| {
                a.iter()
                    .find(|t| t["status"] == "inProgress")
                    .and_then(|t| t["id"].as_str().map(str::to_string))
            })
        }))
    }

    fn on_message(&mut self, store: &mut Store, m: &Value) -> Result<()> {
        let method = m["method"].as_str().unwrap_or("");
        let thread = m["params"]["threadId"].as_str().unwrap_or("");
        let turn = m["params"]["turn"]["id"].as_str();
        match method {
            "turn/started" => {
                if let (Some(t), Some(turn)) = (self.threads.get_mut(thread), turn) {
                    t.active_turn = Some(turn.to_string());
                }
            }
            "item/agentMessage/delta" => {
                let p = &m["params"];
                if let Some(a) = p["turnId"].as_str().and_then(|t| self.awaited.get_mut(t)) {
                    a.push(
                        p["itemId"].as_str().unwrap_or(""),
                        p["delta"].as_str().unwrap_or(""),
                    );
                }
            }
            "turn/completed" => self.turn_completed(store, thread, m)?,
            "thread/closed" => {
                self.threads.remove(thread);
                // Its turns end unseen: their prompts are left to the orphan rule.
                self.awaited.retain(|_, a| a.thread != thread);
                let questions: Vec<String> = self
                    .approvals
                    .iter()
                    .filter(|(_, a)| a.thread == thread && a.method == QUESTION)
                    .map(|(k, _)| k.clone())
                    .collect();
                for attention in questions {
                    store.close_attention(
                        &session_ref(thread, "thread/closed"),
                        &attention,
                        How::Cancelled,
                    )?;
                }
                self.approvals.retain(|_, a| a.thread != thread);
            }
            "serverRequest/resolved" => {
                // Resolved while still ours to answer: the terminal answered first.
                let id = &m["params"]["requestId"];
                let found = self
                    .approvals
                    .iter()
                    .find(|(_, a)| a.thread == thread && &a.request_id == id)
                    .map(|(k, _)| k.clone());
                if let Some(attention) = found {
                    self.approvals.remove(&attention);
                    let s = session_ref(thread, "serverRequest/resolved");
                    if store.close_attention(&s, &attention, How::Answered)? {
                        crate::logging::info(&format!(
                            "{}: {attention} answered in the terminal first",
                            s.key()
                        ));
                    }
                }
            }
            m_method if APPROVALS.contains(&m_method) && m.get("id").is_some() => {
                self.on_approval(store, m, thread)?;
            }
            QUESTION if m.get("id").is_some() => self.on_question(store, m, thread)?,
            _ => {}
        }
        Ok(())
    }

    /// A turn ended: the prompts that went into it get their final ack, and the cancels that
    /// waited for it theirs.
    fn turn_completed(&mut self, store: &mut Store, thread: &str, m: &Value) -> Result<()> {
        let Some(turn) = m["params"]["turn"]["id"].as_str() else {
            return Ok(());
        };
        if let Some(a) = self.awaited.remove(turn) {
            end_turn(store, &a.key, &m["params"]["turn"], &a.text)?;
        }
        if let Some(t) = self.threads.get_mut(thread) {
            if t.active_turn.as_deref() == Some(turn) {
                t.active_turn = None;
            }
        }
        let status = m["params"]["turn"]["status"].as_str().unwrap_or("unknown");
        let (done, rest): (Vec<PendingCancel>, Vec<PendingCancel>) = self
            .pending
            .drain(..)
            .partition(|p| p.thread == thread && p.turn == turn);
        self.pending = rest;
        for p in done {
            let (outcome, detail) = if status == "interrupted" {
                (
                    Outcome::Delivered,
                    format!("codex app-server turn/interrupt: turn {turn} ended interrupted"),
                )
            } else {
                (
                    Outcome::Expired,
                    format!("turn {turn} ended ({status}) before the interrupt took effect"),
                )
            };
            store.api_finish(&p.ids, outcome, &detail)?;
            crate::logging::info(&format!(
                "codex:{thread}: {} cancel(s) {}: {detail}",
                p.ids.len(),
                outcome.as_str()
            ));
        }
        Ok(())
    }

    /// The app-server asks every client to approve; ours is matched to the attention the
    /// PermissionRequest hook opened just before (the newest open one not yet matched).
    fn on_approval(&mut self, store: &mut Store, m: &Value, thread: &str) -> Result<()> {
        let Some(key) = self.threads.get(thread).map(|t| t.key.clone()) else {
            return Ok(());
        };
        let open: Vec<(String, Option<String>)> = store
            .api_open_attentions(&key)?
            .into_iter()
            .filter(|(a, _)| !self.approvals.contains_key(a))
            .collect();
        // The one whose message shows this command (parallel calls), else the newest.
        let command = m["params"]["commandActions"][0]["command"]
            .as_str()
            .unwrap_or("");
        let shows = |msg: &Option<String>| {
            !command.is_empty() && msg.as_deref().is_some_and(|t| t.contains(command))
        };
        let pick = open
            .iter()
            .find(|(_, msg)| shows(msg))
            .or(open.first())
            .map(|(a, _)| a.clone());
        let Some(attention) = pick else {
            crate::logging::debug(&format!(
                "{key}: approval request {} has no open attention (at the desk?); the terminal answers it",
                m["id"]
            ));
            return Ok(());
        };
        crate::logging::info(&format!(
            "{key}: approval request {} is attention {attention}",
            m["id"]
        ));
        let method = m["method"].as_str().unwrap_or("").to_string();
        let a = Approval {
            command: m["params"]["command"].as_str().map(str::to_string),
            ..Approval::of(m, thread, key, method)
        };
        self.open_request(store, attention, a)
    }

    /// Keeps request `a` as attention `attention`'s; an answer may be queued already.
    fn open_request(&mut self, store: &mut Store, attention: String, a: Approval) -> Result<()> {
        self.approvals.insert(attention, a);
        self.deliver(store)
    }

    /// The model asks the person (`request_user_input`): no hook fires, so we open the
    /// attention ourselves, with the questions and their options as its input (rule 31,
    /// shaped like Claude Code's AskUserQuestion so the page shows them as choices).
    fn on_question(&mut self, store: &mut Store, m: &Value, thread: &str) -> Result<()> {
        let Some(key) = self.threads.get(thread).map(|t| t.key.clone()) else {
            return Ok(());
        };
        let p = &m["params"];
        let questions: Vec<Value> = p["questions"]
            .as_array()
            .map(|a| a.iter().take(MAX_QUESTIONS).cloned().collect())
            .unwrap_or_default();
        let shown: Vec<Value> = questions
            .iter()
            .map(|q| {
                let options: Vec<Value> = q["options"]
                    .as_array()
                    .map(|o| {
                        o.iter()
                            .take(MAX_OPTIONS)
                            .map(|o| json!({"label": o["label"], "description": o["description"]}))
                            .collect()
                    })
                    .unwrap_or_default();
                json!({"question": q["question"], "header": q["header"], "id": q["id"],
                       "options": options, "multiSelect": false})
            })
            .collect();
        let input = json!({ "questions": shown });
        let call_id = p["itemId"].as_str().unwrap_or("");
        let attention = crate::harness::minted_attention_id(call_id, QUESTION_TOOL, &input);
        let message = questions
            .iter()
            .filter_map(|q| q["question"].as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let s = session_ref(thread, QUESTION);
        let until = crate::clock::now_ms() + QUESTION_WAIT.as_millis() as i64;
        store.open_attention_shown(
            &s,
            (
                &attention,
                Some(QUESTION_TOOL),
                Some(&message),
                Some(&input),
            ),
            until,
            self.pid,
        )?;
        crate::logging::info(&format!(
            "{key}: question {} (request {}) is attention {attention}",
            call_id, m["id"]
        ));
        let a = Approval {
            questions: Some(Value::Array(questions)),
            ..Approval::of(m, thread, key, QUESTION.to_string())
        };
        self.open_request(store, attention, a)
    }

    /// The app-server's answer to a question, from the person's `answers` (DECISIONS 30:
    /// keyed by the question's text, or its id; a label or, multi-select, an array of them).
    /// `Err` names the rule when they do not answer every question.
    fn question_answers(
        questions: &Value,
        answers: Option<&serde_json::Map<String, Value>>,
    ) -> std::result::Result<Value, String> {
        let Some(answers) = answers else {
            return Err("a question needs answers (DECISIONS 30); nothing was answered, the question is still open".into());
        };
        let qs = questions.as_array().map(Vec::as_slice).unwrap_or_default();
        let mut out = serde_json::Map::new();
        let mut used = 0;
        for q in qs {
            let id = q["id"].as_str().unwrap_or("");
            let text = q["question"].as_str().unwrap_or("");
            let Some(a) = answers.get(text).or_else(|| answers.get(id)) else {
                return Err(format!("answers: no answer for the question {text:?}; nothing was answered, the question is still open"));
            };
            used += 1;
            let labels: Vec<Value> = match a {
                Value::String(l) => vec![Value::String(l.clone())],
                Value::Array(ls) if !ls.is_empty() && ls.iter().all(Value::is_string) => ls.clone(),
                _ => return Err(format!("answers: the answer to {text:?} is not a label or a list of labels; nothing was answered, the question is still open")),
            };
            out.insert(id.to_string(), json!({ "answers": labels }));
        }
        if used != answers.len() {
            return Err("answers: an answer names no question asked; nothing was answered, the question is still open".into());
        }
        Ok(json!({ "answers": out }))
    }

    /// The person's answer to a question: allow with `answers` answers it; a deny answers
    /// nothing (Codex's model then goes on with its own judgment), with `interrupt` it also
    /// ends the turn.
    fn answer_question(
        &mut self,
        store: &mut Store,
        attention: &str,
        claimed: crate::store::Answer,
    ) -> Result<()> {
        let a = self
            .approvals
            .get(attention)
            .expect("looked up by the caller");
        let s = session_ref(&a.thread, "permission.answer");
        let result = match claimed.decision {
            _ if claimed.scope == Scope::Session => Err(
                "scope: a question is answered once, not for the session (DECISIONS 30); nothing was answered, the question is still open".to_string(),
            ),
            Decision::Allow => Self::question_answers(
                a.questions.as_ref().unwrap_or(&Value::Null),
                claimed.rich.answers.as_ref(),
            ),
            Decision::Deny if claimed.rich.answers.is_some() => Err(
                "answers: only an allow carries answers (DECISIONS 30); nothing was answered, the question is still open".to_string(),
            ),
            Decision::Deny => Ok(json!({ "answers": {} })),
        };
        let result = match result {
            Ok(r) => r,
            Err(why) => {
                store.fail_claimed(&claimed.id, &why)?;
                crate::logging::info(&format!(
                    "{}: {attention}: answer {} failed: {why}",
                    a.key, claimed.id
                ));
                return Ok(());
            }
        };
        let a = self.approvals.remove(attention).expect("looked up above");
        if let Err(e) = self.client.respond(&a.request_id, result) {
            let detail = format!("codex app-server {QUESTION}: {e:#}");
            store.api_finish(std::slice::from_ref(&claimed.id), Outcome::Failed, &detail)?;
            return Err(e);
        }
        let mut detail = match claimed.decision {
            Decision::Allow => format!("codex app-server {QUESTION}: answered"),
            Decision::Deny => format!("codex app-server {QUESTION}: no answers (declined)"),
        };
        let lead = if claimed.decision == Decision::Deny && claimed.rich.interrupt {
            // Deny & stop: the turn ends too.
            store.mark_stopped(&a.key)?;
            match self.client.request(
                "turn/interrupt",
                json!({"threadId": a.thread, "turnId": a.turn}),
                CALL_TIMEOUT,
            ) {
                Ok(Ok(_)) => detail.push_str("; the turn was interrupted"),
                Ok(Err(e)) => detail.push_str(&format!("; turn/interrupt failed: {e}")),
                Err(e) => {
                    detail.push_str("; turn/interrupt could not be sent: the connection ended");
                    store.confirm_answer(&s, attention, &claimed, &detail)?;
                    return Err(e);
                }
            }
            None
        } else {
            Some("The person declined to answer through sessionpipe")
        };
        self.confirm_with_note(store, (&s, attention, &claimed), &a, lead, detail)
    }

    /// Confirms the person's answer with `detail`; first, with `lead`, a deny's note follows
    /// into the same turn as a `turn/steer` (`lead: note`; Codex's decline carries no
    /// message), the detail saying how that went. Err only when the connection ended (the
    /// answer is confirmed with that detail first).
    fn confirm_with_note(
        &mut self,
        store: &mut Store,
        (s, attention, claimed): (&SessionRef, &str, &crate::store::Answer),
        a: &Approval,
        lead: Option<&str>,
        mut detail: String,
    ) -> Result<()> {
        let note = claimed
            .note
            .as_deref()
            .filter(|n| claimed.decision == Decision::Deny && !n.trim().is_empty());
        if let (Some(lead), Some(note)) = (lead, note) {
            let steer = self.client.request(
                "turn/steer",
                json!({"threadId": a.thread, "expectedTurnId": a.turn,
                       "input": [{"type": "text", "text": format!("{lead}: {note}")}]}),
                CALL_TIMEOUT,
            );
            match steer {
                Ok(Ok(_)) => detail.push_str("; the note followed as turn/steer"),
                Ok(Err(e)) => detail.push_str(&format!("; the note could not follow: {e}")),
                Err(e) => {
                    detail.push_str("; the note could not follow: the connection ended");
                    store.confirm_answer(s, attention, claimed, &detail)?;
                    return Err(e);
                }
            }
        }
        store.confirm_answer(s, attention, claimed, &detail)?;
        crate::logging::info(&format!("{}: {attention}: {detail}", a.key));
        Ok(())
    }

    /// Questions we opened end with the connection: nobody else will answer them here.
    fn close_questions(&mut self, store: &mut Store) {
        for (attention, a) in self.approvals.drain() {
            if a.method != QUESTION {
                continue;
            }
            let s = session_ref(&a.thread, "connection ended");
            if let Err(e) = store.close_attention(&s, &attention, How::Unknown) {
                crate::logging::warn(&format!("codex app-server: {e:#}"));
            }
        }
    }

    fn answer(&mut self, store: &mut Store, m: &ApiMessage) -> Result<()> {
        let Some(attention) = m.attention_id.as_deref() else {
            return Ok(());
        };
        let Some(a) = self.approvals.get(attention) else {
            // No request yet (or the terminal took it): the hook's attention rules apply.
            return Ok(());
        };
        // The call as its hook showed it (the approval's own `command` is Codex's shell wrapper,
        // `/bin/bash -lc '…'`, which the hook's next prompt does not carry).
        let shown = store.api_attention_call(&a.key, attention)?;
        let Some(claimed) = store.claim_answer(&a.key, attention, self.pid)? else {
            return Ok(());
        };
        if a.method == QUESTION {
            return self.answer_question(store, attention, claimed);
        }
        if claimed.rich.answers.is_some() {
            let why = format!("answers: this call is {}, not a question (DECISIONS 30); nothing ran, the prompt is still open", a.method);
            store.fail_claimed(&claimed.id, &why)?;
            crate::logging::info(&format!(
                "{}: {attention}: answer {} failed: {why}",
                a.key, claimed.id
            ));
            return Ok(());
        }
        // DECISIONS 30: `scope: "session"` is Codex's own session approval (plus our grant),
        // a deny with `interrupt` is `cancel`, which denies and ends the turn.
        let session_wide = claimed.scope == Scope::Session;
        let decision = match claimed.decision {
            Decision::Allow if session_wide => "acceptForSession",
            Decision::Allow => "accept",
            Decision::Deny if claimed.rich.interrupt => "cancel",
            Decision::Deny => "decline",
        };
        let a = self.approvals.remove(attention).expect("looked up above");
        if let Err(e) = self
            .client
            .respond(&a.request_id, json!({"decision": decision}))
        {
            let detail = format!("codex app-server {}: {e:#}", a.method);
            store.api_finish(std::slice::from_ref(&claimed.id), Outcome::Failed, &detail)?;
            return Err(e);
        }
        let mut detail = format!("codex app-server {}: {decision}", a.method);
        let s = session_ref(&a.thread, "permission.answer");
        if decision == "cancel" {
            // So the turn's end reads as the person's stop. `cancel` carries no message: the
            // turn ends before the model could read a note.
            store.mark_stopped(&a.key)?;
            detail.push_str(" (the turn ends; the tool did not run)");
            store.confirm_answer(&s, attention, &claimed, &detail)?;
            crate::logging::info(&format!("{}: {attention}: {detail}", a.key));
            return Ok(());
        }
        if session_wide {
            // Our grant as well: the hook answers the same command of this session from it
            // should Codex ask again (another app-server, a resumed thread).
            let call = shown.and_then(|(tool, message)| {
                crate::harness::codex::shown_call(tool.as_deref()?, message.as_deref()?)
            });
            // Only for the command this approval is about.
            let call = call.filter(|c| {
                a.command.as_deref().is_some_and(|cmd| {
                    c.input["command"]
                        .as_str()
                        .is_some_and(|shown| cmd.contains(shown))
                })
            });
            if let Some(call) = call {
                let folder = store.grant_folder(&s);
                let grant = NewGrant {
                    session_key: &a.key,
                    folder: folder.as_deref(),
                    tool: &call.tool,
                    input: &call.input,
                    summary: &crate::harness::describe_tool(&call.tool, &call.input),
                    decision: claimed.decision,
                    answer: None,
                    who: &claimed.sink,
                    message_id: &claimed.id,
                    until_ms: None,
                };
                store.confirm_answer_with_grant(&s, attention, &claimed, &detail, &grant)?;
                crate::logging::info(&format!("{}: {attention}: {detail}; grant kept", a.key));
                return Ok(());
            }
            detail.push_str(" (Codex's own approval for the session; no grant of ours: the prompt did not show this command whole)");
        }
        // Codex's decline carries no message: the note follows into the same turn as a steer,
        // so the model reads it as it would the hook's deny reason.
        let lead = Some("The person denied that through sessionpipe");
        self.confirm_with_note(store, (&s, attention, &claimed), &a, lead, detail)
    }

    fn deliver(&mut self, store: &mut Store) -> Result<()> {
        if self.threads.is_empty() {
            return Ok(());
        }
        let mut prompted = HashSet::new();
        for m in store.api_queued(HARNESS)? {
            let id = m.session.session_id.clone();
            if !self.threads.contains_key(&id) {
                continue;
            }
            match m.kind.as_str() {
                "cancel" => self.cancel(store, &m)?,
                "prompt" if prompted.insert(id.clone()) => self.prompt(store, &id)?,
                "permission.answer" => self.answer(store, &m)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn cancel(&mut self, store: &mut Store, m: &ApiMessage) -> Result<()> {
        let thread = m.session.session_id.clone();
        let Some(turn) = self
            .threads
            .get(&thread)
            .and_then(|t| t.active_turn.clone())
        else {
            // Nothing runs: a cancel never waits for a later turn (it would stop the wrong one).
            if store.api_claim(&m.id, self.pid)? {
                store.api_finish(
                    std::slice::from_ref(&m.id),
                    Outcome::Expired,
                    "no turn was running on the Codex app-server",
                )?;
            }
            return Ok(());
        };
        if !store.api_claim(&m.id, self.pid)? {
            return Ok(());
        }
        if let Some(p) = self
            .pending
            .iter_mut()
            .find(|p| p.thread == thread && p.turn == turn)
        {
            p.ids.push(m.id.clone());
            return Ok(());
        }
        // Logged as it goes out (the benchmark reads this line's time).
        crate::logging::info(&format!(
            "{}: turn/interrupt sent for cancel {} (turn {turn})",
            m.session.key, m.id
        ));
        let r = self.call(
            store,
            std::slice::from_ref(&m.id),
            "turn/interrupt",
            json!({"threadId": thread, "turnId": turn}),
        )?;
        match r {
            Ok(_) => self.pending.push(PendingCancel {
                ids: vec![m.id.clone()],
                thread,
                turn,
                sent: Instant::now(),
            }),
            Err(e) => {
                let detail = format!("codex app-server turn/interrupt: {e}");
                store.api_finish(std::slice::from_ref(&m.id), Outcome::Failed, &detail)?;
            }
        }
        Ok(())
    }

    fn prompt(&mut self, store: &mut Store, thread: &str) -> Result<()> {
        let Some(t) = self.threads.get(thread) else {
            return Ok(());
        };
        let key = t.key.clone();
        let running = t.active_turn.clone();
        // Into a running turn only what may steer it; `queue` waits for the turn's end.
        let claims = match &running {
            None => store.api_take_prompts(&key, self.pid)?,
            Some(_) => store.api_take_prompts_ranked(&key, self.pid, 1)?,
        };
        if claims.is_empty() {
            return Ok(());
        }
        let ids: Vec<String> = claims.iter().map(|c| c.id.clone()).collect();
        let text = crate::harness::compose_reason(&claims);
        let input = json!([{"type": "text", "text": text}]);
        let (method, params) = match &running {
            None => ("turn/start", json!({"threadId": thread, "input": input})),
            Some(turn) => (
                "turn/steer",
                json!({"threadId": thread, "expectedTurnId": turn, "input": input}),
            ),
        };
        let r = self.call(store, &ids, method, params)?;
        let turn = match r {
            Ok(v) => v["turn"]["id"]
                .as_str()
                .or(v["turnId"].as_str())
                .or(running.as_deref())
                .map(str::to_string),
            Err(e) => {
                let detail = format!("codex app-server {method}: {e}");
                store.api_finish(&ids, Outcome::Failed, &detail)?;
                crate::logging::info(&format!("{key}: {} prompt(s) failed: {detail}", ids.len()));
                return Ok(());
            }
        };
        let Some(turn) = turn else {
            // No turn to wait for: delivered now, without a reply.
            let detail = format!("codex app-server {method} (no turn id in its answer)");
            store.delivered_as(&ids, &detail, "api")?;
            crate::logging::warn(&format!("{key}: {} prompt(s): {detail}", ids.len()));
            return Ok(());
        };
        if running.is_none() {
            if let Some(t) = self.threads.get_mut(thread) {
                t.active_turn = Some(turn.clone());
            }
        }
        // DECISIONS 38: the final ack waits for this turn's end (a steer joins the running
        // turn, so it waits for that one's), `taken` until then.
        let detail = format!("codex app-server {method} (turn {turn})");
        store.deliver_for_api_turn(&key, &ids, &detail, &turn)?;
        if !self.awaited.contains_key(&turn) && self.awaited.len() < MAX_AWAITED {
            self.awaited
                .insert(turn.clone(), Awaited::new(&key, thread));
        }
        crate::logging::info(&format!(
            "{key}: {} prompt(s) went in, waiting for its end: {detail}",
            ids.len()
        ));
        Ok(())
    }

    /// The prompts of thread `id` that wait for a turn no connection of ours followed (an
    /// sp-sync restart, a new connection): the running turn is followed from now on; one that
    /// ended meanwhile is read back from `thread/turns/list` and acked as it ended.
    fn recover(
        &mut self,
        store: &mut Store,
        key: &str,
        id: &str,
        active: Option<&str>,
    ) -> Result<()> {
        let mut turns: Vec<String> = store
            .api_turn_waits(HARNESS)?
            .into_iter()
            .filter(|(k, t, _)| k == key && !self.awaited.contains_key(t))
            .map(|(_, t, _)| t)
            .collect();
        turns.sort();
        turns.dedup();
        if turns.is_empty() {
            return Ok(());
        }
        // The turns without their items (small), then the items of each that ended: a
        // thread's whole turns can outgrow the biggest message we read.
        let listed = self.client.request(
            "thread/turns/list",
            json!({"threadId": id, "limit": TURNS_LOOKED_BACK, "itemsView": "notLoaded"}),
            CALL_TIMEOUT,
        )?;
        let listed = match listed {
            Ok(v) => v["data"].as_array().cloned().unwrap_or_default(),
            Err(e) => {
                // Left to the orphan rule: acked without a reply unless a later look finds it.
                crate::logging::warn(&format!("{key}: thread/turns/list: {e}"));
                return Ok(());
            }
        };
        for turn in turns {
            let found = listed.iter().find(|t| t["id"] == turn.as_str());
            let running =
                active == Some(turn.as_str()) || found.is_some_and(|t| t["status"] == "inProgress");
            if running {
                if self.awaited.len() < MAX_AWAITED {
                    crate::logging::info(&format!("{key}: following turn {turn} again"));
                    self.awaited.insert(turn, Awaited::new(key, id));
                }
                continue;
            }
            match found {
                Some(t) => {
                    let mut t = t.clone();
                    t["items"] = self.turn_items(key, id, &turn)?;
                    end_turn(store, key, &t, "")?
                }
                None => {
                    let n = store.api_turn_ended(key, &turn, None)?;
                    crate::logging::warn(&format!(
                        "{key}: turn {turn} is not among the thread's newest: {n} prompt(s) delivered without a reply"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The newest [`ITEMS_LOOKED_BACK`] items of turn `turn` of thread `id`, in order (none when
    /// the app-server does not say).
    fn turn_items(&mut self, key: &str, id: &str, turn: &str) -> Result<Value> {
        let r = self.client.request(
            "thread/items/list",
            json!({"threadId": id, "turnId": turn, "sortDirection": "desc",
                   "limit": ITEMS_LOOKED_BACK}),
            CALL_TIMEOUT,
        )?;
        let mut items: Vec<Value> = match r {
            Ok(v) => v["data"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["turnId"] == turn)
                .map(|e| e["item"].clone())
                .collect(),
            Err(e) => {
                crate::logging::warn(&format!("{key}: thread/items/list: {e}"));
                Vec::new()
            }
        };
        items.reverse();
        Ok(Value::Array(items))
    }

    /// DECISIONS 38 `progress`: the text so far of each turn waited for, when it grew, at most
    /// every [`PROGRESS_EVERY`].
    fn progress(&mut self, store: &mut Store) -> Result<()> {
        for a in self.awaited.values_mut() {
            if a.text.len() == a.sent_len || a.sent_at.elapsed() < PROGRESS_EVERY {
                continue;
            }
            a.sent_len = a.text.len();
            a.sent_at = Instant::now();
            store.turn_progress(&a.key, &crate::wire::control::ack_reply(&a.text))?;
        }
        Ok(())
    }

    /// A request for claimed messages: a broken connection fails them before it is passed on,
    /// so nothing claimed is left without an outcome.
    fn call(
        &mut self,
        store: &mut Store,
        ids: &[String],
        method: &str,
        params: Value,
    ) -> Result<std::result::Result<Value, RpcError>> {
        match self.client.request(method, params, CALL_TIMEOUT) {
            Ok(r) => Ok(r),
            Err(e) => {
                let detail =
                    spwire::text::truncate(&format!("codex app-server {method}: {e:#}"), 500);
                store.api_finish(ids, Outcome::Failed, &detail)?;
                Err(e)
            }
        }
    }

    fn expire_pending(&mut self, store: &mut Store) -> Result<()> {
        let (late, rest): (Vec<PendingCancel>, Vec<PendingCancel>) = self
            .pending
            .drain(..)
            .partition(|p| p.sent.elapsed() >= INTERRUPT_WAIT);
        self.pending = rest;
        for p in late {
            store.api_finish(
                &p.ids,
                Outcome::Failed,
                &format!(
                    "codex app-server: turn {} did not end within {}s of turn/interrupt",
                    p.turn,
                    INTERRUPT_WAIT.as_secs()
                ),
            )?;
        }
        Ok(())
    }

    fn fail_pending(&mut self, store: &mut Store, why: &str) {
        for p in self.pending.drain(..) {
            if let Err(e) = store.api_finish(&p.ids, Outcome::Failed, why) {
                crate::logging::warn(&format!("codex app-server: {e:#}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn questions() -> Value {
        json!([{"id": "pick", "question": "Which colour?", "options": [{"label": "Red"}, {"label": "Blue"}]},
               {"id": "size", "question": "Which size?", "options": [{"label": "S"}, {"label": "L"}]}])
    }

    fn answers(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_turns_reply_is_its_agent_messages() {
        let turn = json!({"id": "u1", "status": "completed", "items": [
            {"type": "userMessage", "id": "a", "content": [{"type": "text", "text": "q"}]},
            {"type": "agentMessage", "id": "b", "text": "one"},
            {"type": "commandExecution", "id": "c", "command": "ls"},
            {"type": "agentMessage", "id": "d", "text": "two"}]});
        assert_eq!(turn_text(&turn).as_deref(), Some("one\n\ntwo"));
        assert_eq!(turn_text(&json!({"id": "u1", "items": []})), None);
        assert_eq!(turn_text(&json!({"id": "u1"})), None);
    }

    #[test]
    fn streamed_text_keeps_messages_apart_and_stays_within_its_cap() {
        let mut a = Awaited::new("codex:t", "t");
        a.push("b", "on");
        a.push("b", "e");
        a.push("d", "two");
        assert_eq!(a.text, "one\n\ntwo");
        let big = "é".repeat(TEXT_MAX);
        a.push("d", &big);
        a.push("e", &big);
        assert!(
            a.text.len() <= TEXT_MAX && a.text.len() > TEXT_MAX - 2,
            "{}",
            a.text.len()
        );
        assert!(a.text.starts_with("one\n\ntwoé"));
    }

    /// A store with prompts `ids` of session codex:t1 waiting for app-server turn u1.
    fn waiting(ids: &[&str]) -> (tempfile::TempDir, Store) {
        let d = tempfile::tempdir().unwrap();
        let mut s =
            crate::store::open(&d.path().join("c.db"), std::time::Duration::from_secs(1)).unwrap();
        s.record_event(&session_ref("t1", "SessionStart"), Some("startup"))
            .unwrap();
        let ids: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
        for id in &ids {
            s.conn
                .execute(
                    "INSERT INTO messages(id, session_key, sink, kind, text, received_at, deadline_ms, state, mode) \
                     VALUES (?1, 'codex:t1', 'phone', 'prompt', 'hi', '2026-01-01T00:00:00.000Z', ?2, 'queued', 'steer')",
                    rusqlite::params![id, crate::clock::now_ms() + 600_000],
                )
                .unwrap();
        }
        s.deliver_for_api_turn(
            "codex:t1",
            &ids,
            "codex app-server turn/start (turn u1)",
            "u1",
        )
        .unwrap();
        (d, s)
    }

    fn final_ack(s: &Store, id: &str) -> (String, Option<String>, Option<String>, Option<String>) {
        s.conn
            .query_row(
                "SELECT outcome, mode, reply, detail FROM acks WHERE message_id=?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap()
    }

    /// A failed turn: its prompts `failed` with the app-server's error; an interrupted one
    /// without agent messages: `delivered`, mode `api`, with what streamed (redacted).
    #[test]
    fn a_failed_turn_fails_its_prompts_and_an_interrupted_one_keeps_what_streamed() {
        let (_d, mut s) = waiting(&["m1", "m2"]);
        let turn = json!({"id": "u1", "status": "failed", "items": [],
                          "error": {"message": "the model is overloaded"}});
        end_turn(&mut s, "codex:t1", &turn, "").unwrap();
        for id in ["m1", "m2"] {
            let (outcome, mode, reply, detail) = final_ack(&s, id);
            assert_eq!((outcome.as_str(), mode, reply), ("failed", None, None));
            assert_eq!(
                detail.as_deref(),
                Some("codex app-server: turn u1 failed: the model is overloaded")
            );
        }

        let (_d, mut s) = waiting(&["m3"]);
        let turn = json!({"id": "u1", "status": "interrupted", "items": []});
        let streamed = "so far, with token=ghp_abcdefghijklmnopqrstuvwxyz0123456789";
        end_turn(&mut s, "codex:t1", &turn, streamed).unwrap();
        let (outcome, mode, reply, _) = final_ack(&s, "m3");
        assert_eq!(
            (outcome.as_str(), mode.as_deref()),
            ("delivered", Some("api"))
        );
        let reply = reply.unwrap();
        assert!(
            reply.starts_with("so far") && !reply.contains("ghp_abc"),
            "{reply}"
        );
    }

    #[test]
    fn answers_keyed_by_text_or_id_become_codex_answers() {
        let a = answers(json!({"Which colour?": "Blue", "size": ["S", "L"]}));
        assert_eq!(
            Follower::question_answers(&questions(), Some(&a)).unwrap(),
            json!({"answers": {"pick": {"answers": ["Blue"]}, "size": {"answers": ["S", "L"]}}})
        );
    }

    #[test]
    fn answers_that_do_not_answer_every_question_fail() {
        let q = questions();
        let no = Follower::question_answers(&q, None).unwrap_err();
        assert!(no.contains("a question needs answers"), "{no}");
        let part = answers(json!({"Which colour?": "Blue"}));
        let e = Follower::question_answers(&q, Some(&part)).unwrap_err();
        assert!(e.contains("Which size?"), "{e}");
        let extra = answers(json!({"Which colour?": "Blue", "size": "S", "other": "x"}));
        let e = Follower::question_answers(&q, Some(&extra)).unwrap_err();
        assert!(e.contains("names no question"), "{e}");
        let bad = answers(json!({"Which colour?": 3, "size": "S"}));
        let e = Follower::question_answers(&q, Some(&bad)).unwrap_err();
        assert!(e.contains("not a label"), "{e}");
    }
}
