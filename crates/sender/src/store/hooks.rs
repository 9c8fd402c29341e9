//! What the hooks do to the store: make sessions live, open and clear attentions, take
//! answers and prompts. Every write is one `BEGIN IMMEDIATE` transaction, so concurrent hooks
//! serialise on SQLite's write lock and a queued prompt is claimed by exactly one Stop hook.
use super::spool::emit;
use super::Store;
use crate::clock::{format_ms, now_ms, Millis};
use crate::wire::control::Decision;
use crate::wire::event::{self, How, TurnEnd};
use anyhow::Result;
use rusqlite::{params, OptionalExtension, Transaction};

/// Below this age a session's `last_event_ms` is fresh enough: skip the write.
const TOUCH_EVERY_MS: Millis = super::quiet::MARKER_FOR_MS;

/// The session a hook event belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRef {
    pub harness: String,
    pub session_id: String,
    pub cwd: Option<String>,
    /// The harness's event name, e.g. `PermissionRequest`.
    pub event: String,
    /// The session's permission mode as this payload reports it (Claude Code and Codex
    /// `permission_mode`); None when it names none. Kept on the session: a prompt to one that
    /// runs tools without asking needs a touch (DECISIONS 36).
    pub permission_mode: Option<String>,
}

impl SessionRef {
    pub fn key(&self) -> String {
        format!("{}:{}", self.harness, self.session_id)
    }
}

/// A permission answer claimed by the waiting hook (state `delivering`).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub id: String,
    pub sink: String,
    pub decision: Decision,
    pub note: Option<String>,
    /// DECISIONS 30: `Session` only where the harness keeps a grant.
    pub scope: crate::wire::control::Scope,
    /// DECISIONS 30: `input`, `interrupt`, `answers`, where the harness honours them.
    pub rich: crate::wire::control::Rich,
}

/// A prompt claimed by a Stop hook (state `delivering`).
#[derive(Debug, Clone, PartialEq)]
pub struct PromptClaim {
    pub id: String,
    pub sink: String,
    pub text: String,
    pub at: String,
}

/// The `cancel`s of a session claimed at a hook seam (state `delivering`).
#[derive(Debug, Clone, PartialEq)]
pub struct CancelClaim {
    pub ids: Vec<String>,
    pub sink: String,
    pub note: Option<String>,
}

impl CancelClaim {
    /// What the agent and the person are told.
    pub fn reason(&self) -> String {
        let base = format!(
            "Stopped by the person through sessionpipe (sink {:?}).",
            self.sink
        );
        match &self.note {
            Some(n) => format!("{base} {n}"),
            None => base,
        }
    }
}

/// What a hook at a seam needs to know of its session, read at once ([`Store::seam_state`]).
/// Most hook calls find nothing to do here and stop: this read is then all they cost the
/// database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SeamState {
    /// Known and not ended: the session needs no `session.started`.
    pub live: bool,
    /// Live (no `ended_at`) and touched less than a minute ago: `record_event` writes nothing.
    pub fresh: bool,
    /// Stopped at a tool seam within the last `STOPPED_FOR_MS` ([`Store::stopped`]).
    pub stopped: bool,
    /// A stop mark of any age is set, so [`Store::clear_stopped`] has something to clear.
    pub stop_mark: bool,
    /// A permission prompt of the session is open.
    pub open_attention: bool,
    /// A `cancel` is queued for the session.
    pub cancel_queued: bool,
    /// The highest rank (`queue` 0, `steer` 1, `interrupt` 2) of its queued prompts.
    pub prompt_rank: Option<i64>,
    /// Prompts delivered in place wait for the end of the turn they started (DECISIONS 38).
    pub in_flight: bool,
}

impl SeamState {
    /// Whether a hook that only shows the session alive (and takes what its seam of rank
    /// `seam` takes) has nothing to do: no write, no claim, no answer. Conservative: any
    /// doubt sends the hook down the full path, which reads everything again.
    pub fn quiet(&self, seam: Option<i64>) -> bool {
        self.fresh
            && !self.stop_mark
            && !self.open_attention
            && !self.cancel_queued
            && match (self.prompt_rank, seam) {
                (None, _) | (_, None) => true,
                (Some(r), Some(min)) => r < min,
            }
    }

    /// Nothing is pending for any hook of this live session (fresh or not): what a quiet
    /// marker stands for ([`Store::settle_quiet`]).
    pub fn idle(&self) -> bool {
        self.live
            && !self.stop_mark
            && !self.open_attention
            && !self.cancel_queued
            && self.prompt_rank.is_none()
            && !self.in_flight
    }
}

/// [`Store::seam_state`]'s three look-ups, on a transaction the caller holds.
pub(super) fn seam_state_in(
    conn: &rusqlite::Connection,
    key: &str,
    now: Millis,
) -> Result<SeamState> {
    let session: Option<(bool, Millis, Option<Millis>)> = conn
        .prepare_cached(
            "SELECT ended_at IS NULL, last_event_ms, stopped_ms FROM sessions WHERE key=?1",
        )?
        .query_row(params![key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let mut state = SeamState::default();
    if let Some((live, last, stop_mark)) = session {
        state.live = live;
        state.fresh = live && now - last < TOUCH_EVERY_MS;
        state.stopped = stop_mark.is_some_and(|t| now - t < STOPPED_FOR_MS);
        state.stop_mark = stop_mark.is_some();
    }
    {
        let mut queued = conn.prepare_cached(
            "SELECT kind, mode FROM messages WHERE session_key=?1 AND state='queued'",
        )?;
        let mut rows = queued.query(params![key])?;
        while let Some(r) = rows.next()? {
            let kind: String = r.get(0)?;
            match kind.as_str() {
                "cancel" => state.cancel_queued = true,
                "prompt" => {
                    let mode: String = r.get(1)?;
                    let rank = match mode.as_str() {
                        "interrupt" => 2,
                        "steer" => 1,
                        _ => 0,
                    };
                    state.prompt_rank = state.prompt_rank.max(Some(rank));
                }
                _ => {}
            }
        }
    }
    state.open_attention = conn
        .prepare_cached("SELECT 1 FROM attention WHERE session_key=?1 AND state='open' LIMIT 1")?
        .query_row(params![key], |_| Ok(()))
        .optional()?
        .is_some();
    state.in_flight = conn
        .prepare_cached("SELECT 1 FROM turn_waits WHERE session_key=?1 LIMIT 1")?
        .query_row(params![key], |_| Ok(()))
        .optional()?
        .is_some();
    Ok(state)
}

/// A queued message as the hooks read it: id, sink, decision or text, note or at, deadline.
type QueuedRow = (String, String, Option<String>, Option<String>, Option<i64>);

/// Marks a message final and writes its ack in the same transaction (DECISIONS 3).
/// How long a stop at a tool seam keeps denying tools when the turn's end never shows.
const STOPPED_FOR_MS: i64 = 30 * 60 * 1000;

pub(crate) fn finish(
    tx: &Transaction,
    id: &str,
    outcome: &str,
    detail: Option<&str>,
    now: Millis,
) -> Result<()> {
    finish_with_code(tx, id, outcome, None, detail, now)
}

/// Claims queued message `id` for process `pid` (state `delivering`).
fn claim_queued(tx: &Transaction, id: &str, pid: u32, now: Millis) -> Result<()> {
    tx.execute(
        "UPDATE messages SET state='delivering', claimed_pid=?2, claimed_ms=?3 WHERE id=?1 AND state='queued'",
        params![id, pid, now],
    )?;
    Ok(())
}

/// Acks message `id` `expired` (with `why`) when its `deadline` has passed or it has none;
/// returns whether it did.
fn expire_past(
    tx: &Transaction,
    id: &str,
    deadline: Option<Millis>,
    now: Millis,
    why: &str,
) -> Result<bool> {
    let past = deadline.is_none_or(|d| d <= now);
    if past {
        finish(tx, id, "expired", Some(why), now)?;
    }
    Ok(past)
}

/// What joins a batch answer's id and its part's index (`<batch id>.<n>`, DECISIONS 36); a
/// message id (a ULID) never holds it.
pub(crate) const BATCH_PART: char = '.';

/// [`finish`] with a refusal's code (signed control).
pub(crate) fn finish_with_code(
    tx: &Transaction,
    id: &str,
    outcome: &str,
    code: Option<&str>,
    detail: Option<&str>,
    now: Millis,
) -> Result<()> {
    let at = format_ms(now);
    // Cached: sp-sync decides thousands of messages on one connection (a backlog's ingest).
    let changed = tx
        .prepare_cached(
            "UPDATE messages SET state='done', outcome=?2, detail=?3, done_at=?4, code=?5 WHERE id=?1 AND state<>'done'",
        )?
        .execute(params![id, outcome, detail, at, code])?;
    // A batch's part is never acked on its own: its batch was acked whole (DECISIONS 36).
    if changed == 1 && !id.contains(BATCH_PART) {
        final_ack(tx, id, &at, None, None)?;
    }
    Ok(())
}

/// Writes the final ack of message `id` (already done) from its stored outcome, with the
/// delivery's `mode` and the agent's `reply` (DECISIONS 38). It replaces a `taken` or
/// `progress` not yet sent or sent (a new generation, so it goes), never a final one: each
/// message gets exactly one final ack.
pub(crate) fn final_ack(
    tx: &Transaction,
    id: &str,
    at: &str,
    mode: Option<&str>,
    reply: Option<&str>,
) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO acks(message_id, sink, outcome, code, detail, at, mode, reply) \
         SELECT id, sink, outcome, code, detail, ?2, ?3, ?4 FROM messages WHERE id=?1 AND outcome IS NOT NULL \
         ON CONFLICT(message_id, sink) DO UPDATE SET outcome=excluded.outcome, code=excluded.code, \
           detail=excluded.detail, at=excluded.at, mode=excluded.mode, session=NULL, reply=excluded.reply, \
           seq=NULL, sent_at=NULL, attempts=0, next_try_ms=0, last_error=NULL, generation=acks.generation+1 \
         WHERE acks.outcome IN ('taken','progress')",
    )?
    .execute(params![id, at, mode, reply])?;
    Ok(())
}

/// Stores a `taken` ack for message `id` (DECISIONS 38): the machine holds it and a final
/// ack follows, so the receiver stops redelivering it. Nothing when an ack is there already.
pub(crate) fn taken_ack(tx: &Transaction, id: &str, sink: &str, at: &str) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO acks(message_id, sink, outcome, at) VALUES (?1, ?2, 'taken', ?3) \
         ON CONFLICT(message_id, sink) DO NOTHING",
    )?
    .execute(params![id, sink, at])?;
    Ok(())
}

/// Ends the turn waits of session `key` (DECISIONS 38 `turn` mode): each prompt's final ack,
/// `delivered` with mode `turn` and `reply` (already redacted and capped), replaces its
/// `taken`. Returns how many ended.
pub(crate) fn end_turn_waits(
    tx: &Transaction,
    key: &str,
    reply: Option<&str>,
    now: Millis,
) -> Result<usize> {
    end_turn_waits_as(tx, key, "turn", reply, now)
}

/// [`end_turn_waits`] with the ack's `mode` (sp-acp's prompts go through the agent's API).
fn end_turn_waits_as(
    tx: &Transaction,
    key: &str,
    mode: &str,
    reply: Option<&str>,
    now: Millis,
) -> Result<usize> {
    end_waits(tx, key, Waits::All, mode, reply, now)
}

/// Which of a session's turn waits end.
#[derive(Clone, Copy)]
pub(crate) enum Waits<'a> {
    /// Every one (the session ended, or its turn never did).
    All,
    /// Those a Stop delivered (a Stop under `sp codex` leaves the app-server's to sp-sync).
    Stop,
    /// Those of this Codex app-server turn.
    ApiTurn(&'a str),
}

/// Ends the turn waits of session `key` that `which` names: each final ack `delivered` with
/// `mode` (`api` for an app-server turn's) and `reply`. Returns how many.
pub(crate) fn end_waits(
    tx: &Transaction,
    key: &str,
    which: Waits,
    mode: &str,
    reply: Option<&str>,
    now: Millis,
) -> Result<usize> {
    let turn = match which {
        Waits::ApiTurn(t) => Some(t),
        Waits::All | Waits::Stop => None,
    };
    let rows: Vec<(String, Option<String>)> = tx
        .prepare_cached(
            "SELECT message_id, api_turn FROM turn_waits WHERE session_key=?1 \
               AND (?2 = 0 OR (?2 = 1 AND api_turn IS NULL) OR (?2 = 2 AND api_turn = ?3)) \
             ORDER BY since_ms, message_id",
        )?
        .query_map(params![key, which.code(), turn], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let at = format_ms(now);
    for (id, api_turn) in &rows {
        let mode = if api_turn.is_some() { "api" } else { mode };
        final_ack(tx, id, &at, Some(mode), reply)?;
        tx.prepare_cached("DELETE FROM turn_waits WHERE message_id=?1")?
            .execute(params![id])?;
    }
    Ok(rows.len())
}

impl Waits<'_> {
    fn code(self) -> i64 {
        match self {
            Waits::All => 0,
            Waits::Stop => 1,
            Waits::ApiTurn(_) => 2,
        }
    }
}

/// Whether a session whose hooks last reported `mode` runs tools without asking the person
/// (DECISIONS 36): only `default`, `plan` and `dontAsk` (which denies what is not allowed
/// ahead) ask or refuse first; `bypassPermissions`, `auto`, `acceptEdits` (its edits can
/// plant code) and any word we do not know count as running unasked. None: never reported
/// (most harnesses say nothing), counted as asking first.
pub fn runs_unasked(mode: Option<&str>) -> bool {
    mode.is_some_and(|m| !matches!(m, "default" | "plan" | "dontAsk"))
}

/// How soon a prompt wants in: `queue` 0, `steer` 1, `interrupt` 2 (DECISIONS 25).
const MODE_RANK: &str = "CASE mode WHEN 'interrupt' THEN 2 WHEN 'steer' THEN 1 ELSE 0 END";

/// Claims the session's queued prompts of at least `min_rank`, oldest first, within one
/// block's budget (state `delivering`); expired ones are acked `expired`.
pub(super) fn claim_prompts(
    tx: &Transaction,
    key: &str,
    pid: u32,
    now: Millis,
    min_rank: i64,
) -> Result<Vec<PromptClaim>> {
    claim_prompts_between(tx, key, pid, now, (min_rank, i64::MAX))
}

/// As [`claim_prompts`], for the modes ranked from `min` to `max` only.
fn claim_prompts_between(
    tx: &Transaction,
    key: &str,
    pid: u32,
    now: Millis,
    (min_rank, max_rank): (i64, i64),
) -> Result<Vec<PromptClaim>> {
    let rows: Vec<(QueuedRow, bool)> = tx
        .prepare_cached(&format!(
            "SELECT id, sink, text, at, deadline_ms, day_key_only IS 1 FROM messages \
             WHERE session_key=?1 AND kind='prompt' AND state='queued' \
             AND {MODE_RANK} BETWEEN ?2 AND ?3 ORDER BY at, id"
        ))?
        .query_map(params![key, min_rank, max_rank], |r| {
            Ok((
                (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?),
                r.get(5)?,
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    // The mode as this very hook reported it (its touch wrote it in this transaction).
    let unasked = rows.iter().any(|r| r.1) && {
        let mode: Option<String> = tx
            .prepare_cached("SELECT permission_mode FROM sessions WHERE key=?1")?
            .query_row(params![key], |r| r.get(0))
            .optional()?
            .flatten();
        runs_unasked(mode.as_deref())
    };
    let mut claims = Vec::new();
    let mut block = BlockBudget::default();
    for ((id, sink, text, at, deadline), day_key_only) in rows {
        if day_key_only && unasked {
            // DECISIONS 36: queued on the day key while the session asked first; it has
            // since switched to running tools unasked, so this message needs a touch.
            finish_with_code(
                tx,
                &id,
                "refused",
                Some("confirm_needed"),
                Some("the session now runs tools without asking: a message to it needs your passkey's touch over it (DECISIONS 36)"),
                now,
            )?;
            continue;
        }
        if expire_past(
            tx,
            &id,
            deadline,
            now,
            "past expires_at before a turn boundary",
        )? {
            continue;
        }
        let Some(text) = text else {
            finish(tx, &id, "failed", Some("stored prompt has no text"), now)?;
            continue;
        };
        if !block.take(&sink, &text) {
            break;
        }
        claim_queued(tx, &id, pid, now)?;
        claims.push(PromptClaim {
            id,
            sink,
            text,
            at: at.unwrap_or_default(),
        });
    }
    Ok(claims)
}

/// Makes the session live; its first event (or the first after a SessionEnd) emits
/// `session.started` before anything else (DECISIONS 18).
/// What this process's implicit `session.started` says beside its source (a session whose first
/// event is not its SessionStart: an OpenCode plugin report, a resumed session): a hook process
/// sets it once for its harness, so the page still learns what the session honours
/// (`data.control`, DECISIONS 30). Made only when such an event is written.
type StartedExtra = Box<dyn Fn() -> serde_json::Map<String, serde_json::Value> + Send + Sync>;
static STARTED_EXTRA: std::sync::OnceLock<StartedExtra> = std::sync::OnceLock::new();

/// Sets what this process's implicit `session.started` events carry ([`STARTED_EXTRA`]);
/// the first call wins.
pub fn set_started_extra(
    extra: impl Fn() -> serde_json::Map<String, serde_json::Value> + Send + Sync + 'static,
) {
    let _ = STARTED_EXTRA.set(Box::new(extra));
}

/// The harness process this hook runs under (pid, /proc start time), recorded with the
/// session at each write of it.
static HARNESS_PROCESS: std::sync::OnceLock<(i64, i64)> = std::sync::OnceLock::new();

/// Sets this hook process's harness process ([`HARNESS_PROCESS`]); the first call wins.
pub fn set_harness_process(pid: i64, start: i64) {
    let _ = HARNESS_PROCESS.set((pid, start));
}

fn touch(tx: &Transaction, s: &SessionRef, source: Option<&str>, now: Millis) -> Result<String> {
    touch_with(tx, s, source, None, now)
}

/// [`touch`], with `extra` merged into the data of the `session.started` it may emit (sp-acp:
/// the agent's name and the control the session honours); `source` always stays ours.
fn touch_with(
    tx: &Transaction,
    s: &SessionRef,
    source: Option<&str>,
    extra: Option<&serde_json::Map<String, serde_json::Value>>,
    now: Millis,
) -> Result<String> {
    let key = s.key();
    let at = format_ms(now);
    let cwd = s.cwd.as_deref().map(crate::paths::tilde);
    let existing: Option<Option<String>> = tx
        .prepare_cached("SELECT ended_at FROM sessions WHERE key=?1")?
        .query_row(params![key], |r| r.get(0))
        .optional()?;
    let started = match existing {
        None => {
            tx.execute(
                "INSERT INTO sessions(key, harness, session_id, cwd, started_at, last_event_at, last_event_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6)",
                params![key, s.harness, s.session_id, cwd, at, now],
            )?;
            true
        }
        Some(ref ended) => {
            tx.prepare_cached(
                "UPDATE sessions SET last_event_at=?2, last_event_ms=?3, ended_at=NULL, cwd=coalesce(?4, cwd) WHERE key=?1",
            )?
            .execute(params![key, at, now, cwd])?;
            ended.is_some()
        }
    };
    // In the same write as the session's own: no extra transaction on the hook's path.
    if let Some(mode) = s.permission_mode.as_deref() {
        tx.prepare_cached(
            "UPDATE sessions SET permission_mode=?2 WHERE key=?1 AND permission_mode IS NOT ?2",
        )?
        .execute(params![key, mode])?;
    }
    if let Some((pid, start)) = HARNESS_PROCESS.get() {
        tx.prepare_cached(
            "UPDATE sessions SET harness_pid=?2, harness_start=?3 \
             WHERE key=?1 AND (harness_pid IS NOT ?2 OR harness_start IS NOT ?3)",
        )?
        .execute(params![key, pid, start])?;
    }
    if started {
        let source = source.unwrap_or(if existing.is_some() {
            "resume"
        } else {
            "unknown"
        });
        let mut data = event::session_started(source);
        let implicit = match extra {
            None => STARTED_EXTRA.get().map(|f| f()),
            Some(_) => None,
        };
        if let (Some(extra), Some(d)) = (extra.or(implicit.as_ref()), data.as_object_mut()) {
            for (k, v) in extra {
                d.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        emit(tx, &key, event::SESSION_STARTED, &s.event, &data, now)?;
    }
    Ok(key)
}

/// Clears one attention if open: one `attention.cleared` per attention, and any answer
/// still queued for it can no longer be delivered (DECISIONS 12, 13).
pub(crate) fn clear(
    tx: &Transaction,
    key: &str,
    attention_id: &str,
    how: How,
    harness_event: &str,
    now: Millis,
) -> Result<bool> {
    let changed = tx.execute(
        "UPDATE attention SET state='cleared', how=?3, cleared_at=?4 \
         WHERE session_key=?1 AND attention_id=?2 AND state='open'",
        params![key, attention_id, how.as_str(), format_ms(now)],
    )?;
    if changed == 0 {
        return Ok(false);
    }
    emit(
        tx,
        key,
        event::ATTENTION_CLEARED,
        harness_event,
        &event::attention_cleared(attention_id, how),
        now,
    )?;
    let queued: Vec<String> = tx
        .prepare_cached(
            "SELECT id FROM messages WHERE session_key=?1 AND kind='permission.answer' AND attention_id=?2 AND state='queued'",
        )?
        .query_map(params![key, attention_id], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for id in queued {
        finish(
            tx,
            &id,
            "expired",
            Some("the attention was already cleared"),
            now,
        )?;
    }
    Ok(true)
}

/// The turn or the session is over: the session is touched and its open attentions end
/// `cancelled`.
fn touch_and_cancel_attentions(tx: &Transaction, s: &SessionRef, now: Millis) -> Result<()> {
    let key = touch(tx, s, None, now)?;
    for a in open_attentions(tx, &key)? {
        clear(tx, &key, &a, How::Cancelled, &s.event, now)?;
    }
    Ok(())
}

fn emit_turn_ended(tx: &Transaction, s: &SessionRef, reason: TurnEnd, now: Millis) -> Result<()> {
    let data = event::turn_ended(reason);
    tx.prepare_cached("UPDATE sessions SET turn_open=0 WHERE key=?1 AND turn_open<>0")?
        .execute(params![s.key()])?;
    emit(tx, &s.key(), event::TURN_ENDED, &s.event, &data, now)
}

/// The session's open attentions a hook waits on; parked ones (DECISIONS 39) outlive the turn
/// and the session, so a Stop or a SessionEnd leaves them open.
fn open_attentions(tx: &Transaction, key: &str) -> Result<Vec<String>> {
    Ok(tx
        .prepare_cached(
            "SELECT attention_id FROM attention WHERE session_key=?1 AND state='open' AND parked_ms IS NULL",
        )?
        .query_map(params![key], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?)
}

impl Store {
    /// When nothing is pending for the live session `key` (no queued prompt or cancel, no
    /// open attention, no stop mark), touches it and (re)makes its quiet marker, in one
    /// write transaction that read all of that itself. Returns whether it did; false leaves
    /// the session to the full path.
    pub fn settle_quiet(&mut self, key: &str) -> Result<bool> {
        let now = now_ms();
        let dir = self.quiet_dir.clone();
        let tx = self.write_tx()?;
        let st = seam_state_in(&tx, key, now)?;
        if !st.idle() {
            return Ok(false);
        }
        let touched = tx
            .prepare_cached(
                "UPDATE sessions SET last_event_at=?2, last_event_ms=?3 WHERE key=?1 AND ended_at IS NULL",
            )?
            .execute(params![key, crate::clock::format_ms(now), now])?;
        if touched != 1 {
            return Ok(false);
        }
        if let Err(e) = super::quiet::mark(&dir, key, now) {
            // Not fatal: without a marker the full path runs. A half-made one goes.
            let _ = super::quiet::unmark(&dir, key);
            crate::logging::warn(&format!("cannot make the quiet marker of {key}: {e:#}"));
        }
        if let Err(e) = tx.commit() {
            let _ = super::quiet::unmark(&dir, key);
            return Err(e.into());
        }
        Ok(true)
    }

    /// A hook event that only shows the session is alive (SessionStart, UserPromptSubmit, …).
    /// Read-only when the session is already live and fresh, so the common case takes no write lock.
    pub fn record_event(&mut self, s: &SessionRef, source: Option<&str>) -> Result<()> {
        let now = now_ms();
        let fresh: Option<bool> = self
            .conn
            .prepare_cached(
                "SELECT ended_at IS NULL AND ?2 - last_event_ms < ?3 FROM sessions WHERE key=?1",
            )?
            .query_row(params![s.key(), now, TOUCH_EVERY_MS], |r| r.get(0))
            .optional()?;
        if fresh == Some(true) && source.is_none() {
            return Ok(());
        }
        let tx = self.write_tx()?;
        touch(&tx, s, source, now)?;
        tx.commit()?;
        Ok(())
    }

    /// sp-acp's mode change (`session/set_mode`, `current_mode_update`): keeps `s`'s
    /// `permission_mode` on the session and, when it differs from the one kept, emits a
    /// `session.mode` event so the receiver hears it now rather than with the session's next
    /// event. Returns whether it emitted one.
    pub fn record_mode(&mut self, s: &SessionRef) -> Result<bool> {
        let Some(mode) = s.permission_mode.as_deref() else {
            return Ok(false);
        };
        let now = now_ms();
        let tx = self.write_tx()?;
        let before: Option<String> = tx
            .prepare_cached("SELECT permission_mode FROM sessions WHERE key=?1")?
            .query_row(params![s.key()], |r| r.get(0))
            .optional()?
            .flatten();
        let key = touch(&tx, s, None, now)?;
        let changed = before.as_deref() != Some(mode);
        if changed {
            emit(
                &tx,
                &key,
                event::SESSION_MODE,
                &s.event,
                &event::session_mode(mode),
                now,
            )?;
        }
        tx.commit()?;
        Ok(changed)
    }

    /// sp-acp's `session/new` and `session/load`: as [`Store::record_event`] with a source, and
    /// `extra` merged into the data of the `session.started` this emits, if it emits one.
    pub fn record_session(
        &mut self,
        s: &SessionRef,
        source: &str,
        extra: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<()> {
        let tx = self.write_tx()?;
        touch_with(&tx, s, Some(source), Some(extra), now_ms())?;
        tx.commit()?;
        Ok(())
    }

    /// The session as a hook at a seam sees it ([`SeamState`]), in one read transaction of
    /// three plain look-ups. Plain on purpose: compiling a statement is most of what a read
    /// costs a process that runs once, and a look-up by key or by index prefix compiles in a
    /// fraction of what an `EXISTS` subquery or an `IN` list does (BENCHMARKS.md); the
    /// queued messages' kinds and modes are sorted out here instead.
    pub fn seam_state(&self, key: &str) -> Result<SeamState> {
        let tx = self.conn.unchecked_transaction()?;
        let state = seam_state_in(&tx, key, now_ms())?;
        tx.commit()?;
        Ok(state)
    }

    /// The terminal resolved a prompt (a tool ran, a new prompt came): clear it `answered`.
    /// With `attention_id` only that attention; without, every open one of the session.
    /// The person's prompt started a turn (the harness's turn event): the session, its
    /// harness process and its open turn recorded in one write.
    pub fn turn_started(&mut self, s: &SessionRef) -> Result<()> {
        let tx = self.write_tx()?;
        touch(&tx, s, None, now_ms())?;
        tx.prepare_cached("UPDATE sessions SET turn_open=1 WHERE key=?1 AND turn_open<>1")?
            .execute(params![s.key()])?;
        tx.commit()?;
        Ok(())
    }

    pub fn terminal_answered(
        &mut self,
        s: &SessionRef,
        attention_id: Option<&str>,
    ) -> Result<usize> {
        let key = s.key();
        let any_open: bool = self
            .conn
            .prepare_cached(
                "SELECT EXISTS(SELECT 1 FROM attention WHERE session_key=?1 AND state='open')",
            )?
            .query_row(params![key], |r| r.get(0))?;
        if !any_open {
            self.record_event(s, None)?;
            return Ok(0);
        }
        let now = now_ms();
        let tx = self.write_tx()?;
        touch(&tx, s, None, now)?;
        let ids = match attention_id {
            Some(a) => vec![a.to_string()],
            None => open_attentions(&tx, &key)?,
        };
        let mut n = 0;
        for a in ids {
            n += clear(&tx, &key, &a, How::Answered, &s.event, now)? as usize;
        }
        tx.commit()?;
        Ok(n)
    }

    /// SessionEnd: open attentions end `cancelled`; the session stops being polled.
    pub fn end_session(&mut self, s: &SessionRef) -> Result<()> {
        let now = now_ms();
        let tx = self.write_tx_unmarking(&s.key())?;
        touch_and_cancel_attentions(&tx, s, now)?;
        let key = s.key();
        // A turn still waited for will not end now: its prompts are delivered, no reply.
        end_turn_waits(&tx, &key, None, now)?;
        // DECISIONS 40: the page says the session ended (a later event revives it there).
        emit(
            &tx,
            &key,
            event::SESSION_ENDED,
            &s.event,
            &serde_json::json!({}),
            now,
        )?;
        tx.execute(
            "UPDATE sessions SET ended_at=?2 WHERE key=?1",
            params![key, format_ms(now)],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Records a permission prompt and emits `attention.needed`, in one transaction, so the
    /// attention exists before any receiver can answer it.
    pub fn open_attention(
        &mut self,
        s: &SessionRef,
        attention_id: &str,
        tool: Option<&str>,
        message: Option<&str>,
        wait_until_ms: Millis,
        pid: u32,
    ) -> Result<()> {
        self.open_attention_shown(s, (attention_id, tool, message, None), wait_until_ms, pid)
    }

    /// [`Store::open_attention`] whose event carries the call's input as shown
    /// (DECISIONS 31: the person sees what they answer).
    pub fn open_attention_shown(
        &mut self,
        s: &SessionRef,
        (attention_id, tool, message, input): (
            &str,
            Option<&str>,
            Option<&str>,
            Option<&serde_json::Value>,
        ),
        wait_until_ms: Millis,
        pid: u32,
    ) -> Result<()> {
        let now = now_ms();
        let tx = self.write_tx_unmarking(&s.key())?;
        let key = touch(&tx, s, None, now)?;
        let data = event::attention_needed_shown(attention_id, tool, message, input);
        let redacted = data
            .get("message")
            .and_then(|m| m.as_str())
            .map(str::to_string);
        let partial = data.get("input_partial") == Some(&serde_json::Value::Bool(true));
        let was_open: Option<String> = tx
            .query_row(
                "SELECT state FROM attention WHERE session_key=?1 AND attention_id=?2",
                params![key, attention_id],
                |r| r.get(0),
            )
            .optional()?;
        tx.execute(
            "INSERT INTO attention(session_key, attention_id, tool, message, opened_at, wait_until_ms, hook_pid, state, shown_partial) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'open', ?8) \
             ON CONFLICT(session_key, attention_id) DO UPDATE SET \
               tool=excluded.tool, message=excluded.message, wait_until_ms=excluded.wait_until_ms, \
               shown_partial=excluded.shown_partial, \
               hook_pid=excluded.hook_pid, state='open', how=NULL, cleared_at=NULL, \
               opened_at=CASE WHEN attention.state='open' THEN attention.opened_at ELSE excluded.opened_at END",
            params![key, attention_id, tool, redacted, format_ms(now), wait_until_ms, pid, partial],
        )?;
        // The same prompt asked again while open (a retried hook) does not announce twice.
        if was_open.as_deref() != Some("open") {
            emit(&tx, &key, event::ATTENTION_NEEDED, &s.event, &data, now)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// One cheap read for the waiting hook: (attention still open?, an answer queued?).
    pub fn attention_poll(&self, key: &str, attention_id: &str) -> Result<(bool, bool)> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT \
                   EXISTS(SELECT 1 FROM attention WHERE session_key=?1 AND attention_id=?2 AND state='open'), \
                   EXISTS(SELECT 1 FROM messages WHERE session_key=?1 AND kind='permission.answer' \
                          AND attention_id=?2 AND state='queued')",
            )?
            .query_row(params![key, attention_id], |r| Ok((r.get(0)?, r.get(1)?)))?)
    }

    /// Claims the oldest valid answer for this attention of this session. Answers past their
    /// deadline are acked `expired` on the way. Returns None when the attention is no longer
    /// open or no valid answer is queued.
    pub fn claim_answer(
        &mut self,
        key: &str,
        attention_id: &str,
        pid: u32,
    ) -> Result<Option<Answer>> {
        let now = now_ms();
        let tx = self.write_tx()?;
        let open: bool = tx.query_row(
            "SELECT EXISTS(SELECT 1 FROM attention WHERE session_key=?1 AND attention_id=?2 AND state='open')",
            params![key, attention_id],
            |r| r.get(0),
        )?;
        if !open {
            tx.commit()?;
            return Ok(None);
        }
        let rows: Vec<(QueuedRow, Option<String>, Option<String>)> = tx
            .prepare_cached(
                "SELECT id, sink, decision, note, deadline_ms, scope, rich FROM messages \
                 WHERE session_key=?1 AND kind='permission.answer' AND attention_id=?2 AND state='queued' \
                 ORDER BY at, id",
            )?
            .query_map(params![key, attention_id], |r| {
                Ok((
                    (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?),
                    r.get(5)?,
                    r.get(6)?,
                ))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let mut claimed = None;
        for ((id, sink, decision, note, deadline), scope, rich) in rows {
            if expire_past(
                &tx,
                &id,
                deadline,
                now,
                "past expires_at before the hook could deliver it",
            )? {
                continue;
            }
            // Never treat anything but an explicit, stored allow/deny as a decision.
            let Some(decision) = decision.as_deref().and_then(Decision::parse) else {
                finish(
                    &tx,
                    &id,
                    "failed",
                    Some("stored answer has no valid decision"),
                    now,
                )?;
                continue;
            };
            claim_queued(&tx, &id, pid, now)?;
            claimed = Some(Answer {
                id,
                sink,
                decision,
                note,
                scope: scope
                    .as_deref()
                    .and_then(crate::wire::control::Scope::parse)
                    .unwrap_or_default(),
                rich: crate::wire::control::Rich::from_json(rich.as_deref()),
            });
            break;
        }
        tx.commit()?;
        Ok(claimed)
    }

    /// After the answer is written and flushed: ack `delivered`, clear the attention `answered`.
    pub fn confirm_answer(
        &mut self,
        s: &SessionRef,
        attention_id: &str,
        answer: &Answer,
        detail: &str,
    ) -> Result<()> {
        let now = now_ms();
        let tx = self.write_tx()?;
        finish(&tx, &answer.id, "delivered", Some(detail), now)?;
        clear(&tx, &s.key(), attention_id, How::Answered, &s.event, now)?;
        tx.commit()?;
        Ok(())
    }

    /// DECISIONS 39: a headless run ends waiting for this prompt: it stays open, unwaited,
    /// until `until_ms`, and receivers are told again, now with `parked_until`. False when it
    /// was no longer open (answered or cleared meanwhile).
    pub fn park_attention(
        &mut self,
        s: &SessionRef,
        attention_id: &str,
        until_ms: Millis,
    ) -> Result<bool> {
        let now = now_ms();
        let key = s.key();
        let tx = self.write_tx()?;
        let changed = tx.execute(
            "UPDATE attention SET parked_ms=?3, wait_until_ms=?4, hook_pid=NULL \
             WHERE session_key=?1 AND attention_id=?2 AND state='open'",
            params![key, attention_id, now, until_ms],
        )?;
        if changed == 1 {
            // The prompt as first announced (the call shown), from the event that said so.
            let shown: Option<String> = tx
                .query_row(
                    "SELECT data FROM events WHERE session_key=?1 AND type=?2 \
                       AND json_extract(data, '$.attention_id')=?3 ORDER BY rowid DESC LIMIT 1",
                    params![key, event::ATTENTION_NEEDED, attention_id],
                    |r| r.get(0),
                )
                .optional()?;
            let mut data = shown
                .and_then(|d| serde_json::from_str::<serde_json::Value>(&d).ok())
                .filter(serde_json::Value::is_object)
                .unwrap_or_else(|| event::attention_needed_shown(attention_id, None, None, None));
            data["parked_until"] = serde_json::Value::String(format_ms(until_ms));
            emit(&tx, &key, event::ATTENTION_NEEDED, &s.event, &data, now)?;
        }
        tx.commit()?;
        Ok(changed == 1)
    }

    /// The waiting hook stops (timeout, SIGTERM, host gone): clear `how` if still open.
    pub fn close_attention(
        &mut self,
        s: &SessionRef,
        attention_id: &str,
        how: How,
    ) -> Result<bool> {
        let now = now_ms();
        let tx = self.write_tx()?;
        let changed = clear(&tx, &s.key(), attention_id, how, &s.event, now)?;
        tx.commit()?;
        Ok(changed)
    }

    /// Stop: the turn ended, so open attentions end `cancelled`; the unexpired prompts queued
    /// for this session are claimed, oldest `at` first, as many as fit one block of
    /// `BLOCK_MAX_CHARS` (the rest wait for the next Stop); expired ones are acked `expired`.
    /// With `ends`, a Stop that claims nothing (so the agent now waits for the person) also
    /// emits `turn.ended`, in the same transaction; a Stop that delivers prompts goes on.
    pub fn take_prompts(
        &mut self,
        s: &SessionRef,
        pid: u32,
        ends: Option<TurnEnd>,
    ) -> Result<Vec<PromptClaim>> {
        let now = now_ms();
        let key = s.key();
        if ends.is_none() {
            // Read first: with no event to write, most calls find nothing and need no lock.
            let (fresh, work): (Option<bool>, bool) = self
                .conn
                .prepare_cached(
                    "SELECT (SELECT ended_at IS NULL AND ?2 - last_event_ms < ?3 FROM sessions WHERE key=?1), \
                       EXISTS(SELECT 1 FROM messages WHERE session_key=?1 AND kind='prompt' AND state='queued') \
                       OR EXISTS(SELECT 1 FROM attention WHERE session_key=?1 AND state='open')",
                )?
                .query_row(params![key, now, TOUCH_EVERY_MS], |r| Ok((r.get(0)?, r.get(1)?)))?;
            if fresh == Some(true) && !work {
                return Ok(Vec::new());
            }
        }
        let tx = self.write_tx()?;
        touch_and_cancel_attentions(&tx, s, now)?;
        let claims = claim_prompts(&tx, &key, pid, now, 0)?;
        if let (true, Some(reason)) = (claims.is_empty(), ends) {
            emit_turn_ended(&tx, s, reason, now)?;
        }
        tx.commit()?;
        Ok(claims)
    }

    /// A turn of an agent we drive ended (sp-acp): `turn.ended`, unless a prompt is queued,
    /// which starts the next turn at once. Returns whether it was emitted.
    pub fn turn_over(&mut self, s: &SessionRef, reason: TurnEnd) -> Result<bool> {
        let queued: bool = self
            .conn
            .prepare_cached(
                "SELECT EXISTS(SELECT 1 FROM messages WHERE session_key=?1 AND kind='prompt' AND state='queued')",
            )?
            .query_row(params![s.key()], |r| r.get(0))?;
        if queued {
            self.record_event(s, None)?;
            return Ok(false);
        }
        // Its open attentions are left as they are: the agent's own reports settle them
        // (OpenCode's reports may arrive out of order; sp-acp closes a turn's own first).
        let now = now_ms();
        let tx = self.write_tx()?;
        touch(&tx, s, None, now)?;
        emit_turn_ended(&tx, s, reason, now)?;
        tx.commit()?;
        Ok(true)
    }

    /// DECISIONS 40: a `turn.transcript` or `tool.started` / `tool.ended` of the session, in
    /// order with its other events (each sink gets it at its tier or not at all).
    pub fn record_conversation(
        &mut self,
        s: &SessionRef,
        kind: &str,
        data: &serde_json::Value,
    ) -> Result<()> {
        let now = now_ms();
        let tx = self.write_tx()?;
        touch(&tx, s, None, now)?;
        emit(&tx, &s.key(), kind, &s.event, data, now)?;
        tx.commit()?;
        Ok(())
    }

    /// The turn ended without a Stop that could deliver (the agent was stopped at its
    /// Stop): open attentions end `cancelled` and `turn.ended` is emitted.
    pub fn end_turn(&mut self, s: &SessionRef, reason: TurnEnd) -> Result<()> {
        let now = now_ms();
        let tx = self.write_tx()?;
        touch_and_cancel_attentions(&tx, s, now)?;
        emit_turn_ended(&tx, s, reason, now)?;
        tx.commit()?;
        Ok(())
    }

    /// DECISIONS 25: at a tool boundary, the prompts sent for it: `steer` and `interrupt`
    /// (`min_rank` 1), or before a tool runs only `interrupt` (`min_rank` 2). Oldest first,
    /// within the block budget; `queue` prompts wait for the turn's end.
    pub fn take_seam_prompts(
        &mut self,
        s: &SessionRef,
        pid: u32,
        min_rank: i64,
    ) -> Result<Vec<PromptClaim>> {
        self.take_seam_prompts_between(s, pid, (min_rank, i64::MAX))
    }

    /// As [`Store::take_seam_prompts`], for the modes ranked `min..=max` only: after a tool,
    /// an `interrupt` is left for the seam before the next one, which keeps it from running
    /// (DECISIONS 25).
    pub fn take_seam_prompts_between(
        &mut self,
        s: &SessionRef,
        pid: u32,
        (min_rank, max_rank): (i64, i64),
    ) -> Result<Vec<PromptClaim>> {
        let key = s.key();
        let any: bool = self
            .conn
            .prepare_cached(&format!(
                "SELECT EXISTS(SELECT 1 FROM messages WHERE session_key=?1 AND kind='prompt' \
                 AND state='queued' AND {MODE_RANK} BETWEEN ?2 AND ?3)"
            ))?
            .query_row(params![key, min_rank, max_rank], |r| r.get(0))?;
        if !any {
            return Ok(Vec::new());
        }
        let now = now_ms();
        let tx = self.write_tx()?;
        let claims = claim_prompts_between(&tx, &key, pid, now, (min_rank, max_rank))?;
        tx.commit()?;
        Ok(claims)
    }

    /// Whether a `cancel` waits for this session: one cheap read, no lock.
    pub fn cancel_queued(&self, key: &str) -> Result<bool> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT EXISTS(SELECT 1 FROM messages WHERE session_key=?1 AND kind='cancel' AND state='queued')",
            )?
            .query_row(params![key], |r| r.get(0))?)
    }

    /// Claims every unexpired queued `cancel` of the session (state `delivering`); expired
    /// ones are acked `expired`. `None` when none is left to deliver.
    pub fn take_cancels(&mut self, s: &SessionRef, pid: u32) -> Result<Option<CancelClaim>> {
        let now = now_ms();
        let key = s.key();
        let tx = self.write_tx()?;
        let rows: Vec<(String, String, Option<String>, Option<i64>)> = tx
            .prepare_cached(
                "SELECT id, sink, note, deadline_ms FROM messages \
                 WHERE session_key=?1 AND kind='cancel' AND state='queued' ORDER BY at, id",
            )?
            .query_map(params![key], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let mut claim: Option<CancelClaim> = None;
        for (id, sink, note, deadline) in rows {
            if expire_past(
                &tx,
                &id,
                deadline,
                now,
                "past expires_at before a hook seam",
            )? {
                continue;
            }
            claim_queued(&tx, &id, pid, now)?;
            let c = claim.get_or_insert_with(|| CancelClaim {
                ids: Vec::new(),
                sink: sink.clone(),
                note: None,
            });
            c.ids.push(id);
            if c.note.is_none() {
                c.note = note.filter(|n| !n.trim().is_empty());
            }
        }
        tx.commit()?;
        Ok(claim)
    }

    /// The turn a queued `cancel` was meant for is over: acked `expired` with `why`.
    pub fn expire_cancels(&mut self, s: &SessionRef, why: &str) -> Result<usize> {
        let key = s.key();
        if !self.cancel_queued(&key)? {
            return Ok(0);
        }
        let now = now_ms();
        let tx = self.write_tx()?;
        let ids: Vec<String> = tx
            .prepare_cached(
                "SELECT id FROM messages WHERE session_key=?1 AND kind='cancel' AND state='queued'",
            )?
            .query_map(params![key], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        for id in &ids {
            finish(&tx, id, "expired", Some(why), now)?;
        }
        tx.commit()?;
        Ok(ids.len())
    }

    /// The session was stopped at a tool seam: its later tools of this turn are denied.
    pub fn mark_stopped(&mut self, key: &str) -> Result<()> {
        let tx = self.write_tx_unmarking(key)?;
        tx.prepare_cached("UPDATE sessions SET stopped_ms=?2 WHERE key=?1")?
            .execute(params![key, now_ms()])?;
        tx.commit()?;
        Ok(())
    }

    /// Whether the session was stopped in this turn. A mark older than `STOPPED_FOR_MS` is
    /// ignored, so a turn that never reported its end cannot block tools for good.
    pub fn stopped(&self, key: &str) -> Result<bool> {
        let since: Option<i64> = self
            .conn
            .prepare_cached("SELECT stopped_ms FROM sessions WHERE key=?1")?
            .query_row(params![key], |r| r.get(0))
            .optional()?
            .flatten();
        Ok(since.is_some_and(|t| now_ms() - t < STOPPED_FOR_MS))
    }

    /// The turn ended (or a new one began): the stop is over.
    pub fn clear_stopped(&mut self, key: &str) -> Result<()> {
        self.conn
            .prepare_cached(
                "UPDATE sessions SET stopped_ms=NULL WHERE key=?1 AND stopped_ms IS NOT NULL",
            )?
            .execute(params![key])?;
        Ok(())
    }

    /// After the block answer is written and flushed.
    pub fn confirm_delivered(&mut self, ids: &[String], detail: &str) -> Result<()> {
        let now = now_ms();
        let tx = self.write_tx()?;
        for id in ids {
            finish(&tx, id, "delivered", Some(detail), now)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Prompts a hook delivered in place, after the answer is written and flushed: done, and
    /// each waits for the end of the turn it started (the session's next Stop) for its final
    /// ack, which then carries the turn's reply (DECISIONS 38 `turn` mode). Its `taken` is
    /// already stored (at ingest; stored here too for a message kept from before).
    /// With `wait` false (a harness that does not report the turn's text, so there is no
    /// reply to wait for), each is acked `delivered` with mode `turn` at once.
    pub fn deliver_for_turn(
        &mut self,
        key: &str,
        ids: &[String],
        detail: &str,
        wait: bool,
    ) -> Result<()> {
        let now = now_ms();
        if !wait {
            let tx = self.write_tx()?;
            for id in ids {
                finish(&tx, id, "delivered", Some(detail), now)?;
                tx.prepare_cached(
                    "UPDATE acks SET mode='turn' WHERE message_id=?1 AND outcome='delivered' AND mode IS NULL",
                )?
                .execute(params![id])?;
            }
            tx.commit()?;
            return Ok(());
        }
        self.wait_for_turn(key, ids, detail, None)
    }

    /// [`Store::deliver_for_turn`] for prompts that went into Codex app-server turn `turn`:
    /// their final ack waits for that turn's end ([`Store::api_turn_ended`]), not a Stop.
    pub fn deliver_for_api_turn(
        &mut self,
        key: &str,
        ids: &[String],
        detail: &str,
        turn: &str,
    ) -> Result<()> {
        self.wait_for_turn(key, ids, detail, Some(turn))
    }

    fn wait_for_turn(
        &mut self,
        key: &str,
        ids: &[String],
        detail: &str,
        api_turn: Option<&str>,
    ) -> Result<()> {
        let now = now_ms();
        let at = format_ms(now);
        // A session with a turn waited for is never quiet ([`SeamState::idle`]).
        let tx = self.write_tx_unmarking(key)?;
        for id in ids {
            let changed = tx
                .prepare_cached(
                    "UPDATE messages SET state='done', outcome='delivered', detail=?2, done_at=?3 \
                     WHERE id=?1 AND state<>'done' RETURNING sink",
                )?
                .query_row(params![id, detail, at], |r| r.get::<_, String>(0))
                .optional()?;
            let Some(sink) = changed else { continue };
            taken_ack(&tx, id, &sink, &at)?;
            tx.prepare_cached(
                "INSERT OR IGNORE INTO turn_waits(message_id, session_key, since_ms, api_turn) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![id, key, now, api_turn])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// The session's turn ended (its Stop): the prompts that waited for it get their final
    /// ack with `reply` ([`end_turn_waits`]); those sp-sync put into a Codex app-server turn
    /// wait for that turn's end as sp-sync sees it ([`Store::api_turn_ended`]). Returns how many.
    pub fn turn_ended_with(&mut self, key: &str, reply: Option<&str>) -> Result<usize> {
        let tx = self.write_tx()?;
        let n = end_waits(&tx, key, Waits::Stop, "turn", reply, now_ms())?;
        tx.commit()?;
        Ok(n)
    }

    /// Prompts delivered where no end of their turn will be seen: acked `delivered` with
    /// `mode` at once, without a reply.
    pub fn delivered_as(&mut self, ids: &[String], detail: &str, mode: &str) -> Result<()> {
        let now = now_ms();
        let tx = self.write_tx()?;
        for id in ids {
            finish(&tx, id, "delivered", Some(detail), now)?;
            tx.prepare_cached(
                "UPDATE acks SET mode=?2 WHERE message_id=?1 AND outcome='delivered' AND mode IS NULL",
            )?
            .execute(params![id, mode])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// [`Store::turn_ended_with`] with the ack's `mode` (`api` for sp-acp's prompts).
    pub fn turn_ended_as(&mut self, key: &str, mode: &str, reply: Option<&str>) -> Result<usize> {
        let tx = self.write_tx()?;
        let n = end_turn_waits_as(&tx, key, mode, reply, now_ms())?;
        tx.commit()?;
        Ok(n)
    }

    /// A `progress` ack for each prompt waiting for session `key`'s turn: the reply so far
    /// (already redacted and capped), its `seq` rising. It replaces only a `taken` or
    /// `progress`, never a final ack.
    pub fn turn_progress(&mut self, key: &str, reply: &str) -> Result<usize> {
        let tx = self.write_tx()?;
        let n = tx
            .prepare_cached(
                "UPDATE acks SET outcome='progress', reply=?2, seq=coalesce(seq, 0) + 1, at=?3, \
                   sent_at=NULL, attempts=0, next_try_ms=0, last_error=NULL, generation=generation+1 \
                 WHERE outcome IN ('taken','progress') \
                   AND message_id IN (SELECT message_id FROM turn_waits WHERE session_key=?1)",
            )?
            .execute(params![key, reply, format_ms(now_ms())])?;
        tx.commit()?;
        Ok(n)
    }

    /// Prompts that waited for a turn that failed (the agent refused the prompt): each ends
    /// `failed` with `detail`, its final ack replacing its `taken`.
    pub fn fail_turn_waits(&mut self, ids: &[String], detail: &str) -> Result<()> {
        let at = format_ms(now_ms());
        let tx = self.write_tx()?;
        for id in ids {
            let waited = tx
                .prepare_cached("DELETE FROM turn_waits WHERE message_id=?1")?
                .execute(params![id])?;
            if waited == 1 {
                tx.prepare_cached(
                    "UPDATE messages SET outcome='failed', detail=?2, done_at=?3 WHERE id=?1",
                )?
                .execute(params![id, detail, at])?;
                final_ack(&tx, id, &at, None, None)?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Whether any sink has control on and is not paused; the permission hook waits only then.
    pub fn control_paused(&self, sink: &str) -> Result<bool> {
        Ok(self
            .conn
            .prepare_cached("SELECT control_paused IS NOT NULL FROM sinks WHERE name=?1")?
            .query_row(params![sink], |r| r.get(0))
            .optional()?
            .unwrap_or(false))
    }
}

/// DECISIONS 24: one block (the text `compose_reason` makes of the prompts a Stop delivers)
/// carries at most this many characters; prompts past it wait for the next Stop. A prompt is
/// never split or dropped: one alone always fits, as validation caps `text` at 20,000.
pub const BLOCK_MAX_CHARS: usize = 100_000;

/// Counts what `compose_reason` will write for the prompts taken so far: its first line (at
/// most `HEADER` characters besides the sink names), each sink name once as `"name", `, the
/// texts, and the separator between two texts.
#[derive(Default)]
pub(crate) struct BlockBudget {
    used: usize,
    taken: usize,
    sinks: Vec<String>,
}

impl BlockBudget {
    const HEADER: usize = 128;
    const SEPARATOR: usize = "\n\n---\n\n".len();

    /// Whether one more prompt fits; if so it is counted. The first always fits.
    pub(crate) fn take(&mut self, sink: &str, text: &str) -> bool {
        let mut cost = text.chars().count();
        if self.taken == 0 {
            cost += Self::HEADER;
        } else {
            cost += Self::SEPARATOR;
        }
        let new_sink = !self.sinks.iter().any(|s| s == sink);
        if new_sink {
            cost += format!("{sink:?}").chars().count() + 2;
        }
        if self.taken > 0 && self.used + cost > BLOCK_MAX_CHARS {
            return false;
        }
        if new_sink {
            self.sinks.push(sink.to_string());
        }
        self.used += cost;
        self.taken += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(s: &Store, id: &str, key: &str, kind: &str, mode: &str) {
        s.conn
            .execute(
                "INSERT INTO messages(id, session_key, sink, kind, text, received_at, deadline_ms, state, mode) \
                 VALUES (?1, ?2, 'phone', ?3, 'hi', '2026-01-01T00:00:00.000Z', ?4, 'queued', ?5)",
                params![id, key, kind, now_ms() + 600_000, mode],
            )
            .unwrap();
    }

    /// Each thing the full path would act on makes the one read say "not quiet", and the
    /// state matches what the separate look-ups it replaces say.
    #[test]
    fn seam_state_sees_all_the_full_path_acts_on() {
        let d = tempfile::tempdir().unwrap();
        let mut s =
            crate::store::open(&d.path().join("c.db"), std::time::Duration::from_secs(1)).unwrap();
        let session = SessionRef {
            harness: "claude-code".into(),
            session_id: "s1".into(),
            cwd: None,
            event: "PostToolUse".into(),
            permission_mode: None,
        };
        let key = session.key();
        // Unknown session: not fresh, so the full path (which makes it live) runs.
        assert!(!s.seam_state(&key).unwrap().quiet(Some(1)));
        s.record_event(&session, Some("startup")).unwrap();
        let st = s.seam_state(&key).unwrap();
        assert!(st.fresh && st.quiet(Some(1)) && st.quiet(None));

        // A `queue` prompt waits for the turn's end: quiet at a tool seam, not at the Stop.
        queue(&s, "m1", &key, "prompt", "queue");
        let st = s.seam_state(&key).unwrap();
        assert_eq!(st.prompt_rank, Some(0));
        assert!(st.quiet(Some(1)) && !st.quiet(Some(0)));
        // A `steer` one is for this seam, not for the one before a tool (rank 2).
        queue(&s, "m2", &key, "prompt", "steer");
        let st = s.seam_state(&key).unwrap();
        assert_eq!(st.prompt_rank, Some(1));
        assert!(!st.quiet(Some(1)) && st.quiet(Some(2)));
        assert_eq!(s.take_seam_prompts(&session, 1, 1).unwrap().len(), 1);
        assert_eq!(s.seam_state(&key).unwrap().prompt_rank, Some(0));

        // A cancel.
        queue(&s, "m3", &key, "cancel", "queue");
        let st = s.seam_state(&key).unwrap();
        assert!(st.cancel_queued && !st.quiet(None));
        assert!(s.cancel_queued(&key).unwrap());
        s.expire_cancels(&session, "test").unwrap();
        assert!(!s.seam_state(&key).unwrap().cancel_queued);

        // A stop mark, and an open attention.
        s.mark_stopped(&key).unwrap();
        let st = s.seam_state(&key).unwrap();
        assert!(st.stopped && st.stop_mark && !st.quiet(None));
        assert_eq!(st.stopped, s.stopped(&key).unwrap());
        s.clear_stopped(&key).unwrap();
        s.open_attention(&session, "perm-1", Some("Bash"), None, now_ms() + 60_000, 1)
            .unwrap();
        let st = s.seam_state(&key).unwrap();
        assert!(!st.stopped && !st.stop_mark && st.open_attention && !st.quiet(None));
        s.terminal_answered(&session, None).unwrap();
        assert!(s.seam_state(&key).unwrap().quiet(Some(1)));

        // Another session's queue is not this one's.
        queue(&s, "m4", "claude-code:other", "cancel", "queue");
        assert!(s.seam_state(&key).unwrap().quiet(Some(1)));
        // An ended session is not fresh.
        s.end_session(&session).unwrap();
        assert!(!s.seam_state(&key).unwrap().fresh);
    }
}
