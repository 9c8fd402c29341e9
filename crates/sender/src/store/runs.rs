//! Headless runs between turns (DECISIONS 38; `crate::runs` launches them): a row per run,
//! written before anything is spawned, so a crash at any point leaves a row the next
//! sp-sync finishes. A run that delivers a prompt holds it in state `delivering` (no hook
//! claims it, the sweep leaves it) until the run's end writes its one final ack.
use super::hooks::final_ack;
use super::Store;
use crate::clock::{format_ms, now_ms, Millis};
use anyhow::{bail, Result};
use rusqlite::{params, OptionalExtension, Row};

/// At most this many runs wait for a slot; a run asked for beyond it is refused.
pub const RUNS_WAITING_MAX: i64 = 32;

/// One run as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRow {
    pub id: String,
    pub message_id: Option<String>,
    pub session_key: Option<String>,
    pub harness: String,
    /// `resume`, `fork`, `start` or `continue`.
    pub kind: String,
    pub cwd: String,
    /// The program first, then its arguments.
    pub argv: Vec<String>,
    /// `waiting`, `running` or `done`.
    pub state: String,
    pub created_ms: Millis,
    pub started_ms: Option<Millis>,
    pub deadline_ms: Option<Millis>,
    pub sup_pid: Option<i64>,
    pub sup_start: Option<i64>,
    pub agent_pid: Option<i64>,
    pub exit: Option<String>,
    pub ended_ms: Option<Millis>,
    pub session: Option<String>,
    /// `ok` or `failed`, once done.
    pub outcome: Option<String>,
    pub detail: Option<String>,
    pub progress_seq: i64,
}

/// A run to record.
pub struct NewRun<'a> {
    pub id: &'a str,
    pub message_id: Option<&'a str>,
    pub session_key: Option<&'a str>,
    pub harness: &'a str,
    pub kind: &'a str,
    pub cwd: &'a str,
    pub argv: &'a [String],
}

const COLUMNS: &str = "id, message_id, session_key, harness, kind, cwd, argv, state, created_ms, \
    started_ms, deadline_ms, sup_pid, sup_start, agent_pid, exit, ended_ms, session, outcome, detail, progress_seq";

fn row(r: &Row) -> rusqlite::Result<RunRow> {
    let argv: String = r.get(6)?;
    Ok(RunRow {
        id: r.get(0)?,
        message_id: r.get(1)?,
        session_key: r.get(2)?,
        harness: r.get(3)?,
        kind: r.get(4)?,
        cwd: r.get(5)?,
        argv: serde_json::from_str(&argv).unwrap_or_default(),
        state: r.get(7)?,
        created_ms: r.get(8)?,
        started_ms: r.get(9)?,
        deadline_ms: r.get(10)?,
        sup_pid: r.get(11)?,
        sup_start: r.get(12)?,
        agent_pid: r.get(13)?,
        exit: r.get(14)?,
        ended_ms: r.get(15)?,
        session: r.get(16)?,
        outcome: r.get(17)?,
        detail: r.get(18)?,
        progress_seq: r.get(19)?,
    })
}

impl Store {
    /// Records a run (state `waiting`). A run that delivers a message takes it (state
    /// `delivering`, no hook claims it) in the same transaction; false when that message is
    /// no longer queued (a hook or another run took it first) and nothing was recorded.
    pub fn new_run(&mut self, r: &NewRun) -> Result<bool> {
        let now = now_ms();
        let tx = self.write_tx()?;
        let waiting: i64 =
            tx.query_row("SELECT count(*) FROM runs WHERE state='waiting'", [], |r| {
                r.get(0)
            })?;
        if waiting >= RUNS_WAITING_MAX {
            bail!("{waiting} runs are already waiting for a slot");
        }
        if let Some(m) = r.message_id {
            let took = tx
                .prepare_cached(
                    "UPDATE messages SET state='delivering', claimed_pid=NULL, claimed_ms=?2 \
                     WHERE id=?1 AND state='queued'",
                )?
                .execute(params![m, now])?;
            if took == 0 {
                return Ok(false);
            }
        }
        tx.prepare_cached(
            "INSERT INTO runs(id, message_id, session_key, harness, kind, cwd, argv, state, created_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'waiting', ?8)",
        )?
        .execute(params![
            r.id,
            r.message_id,
            r.session_key,
            r.harness,
            r.kind,
            r.cwd,
            serde_json::to_string(r.argv)?,
            now
        ])?;
        tx.commit()?;
        Ok(true)
    }

    /// Moves the oldest waiting runs to `running` while fewer than `max_running` run, each
    /// with its deadline; returns them, to be launched. A run of a session with another run
    /// of ours in flight waits for it (never two writers on one transcript).
    pub fn runs_to_launch(
        &mut self,
        max_running: usize,
        timeout_ms: Millis,
    ) -> Result<Vec<RunRow>> {
        let now = now_ms();
        let tx = self.write_tx()?;
        let running: i64 =
            tx.query_row("SELECT count(*) FROM runs WHERE state='running'", [], |r| {
                r.get(0)
            })?;
        let free = (max_running as i64 - running).max(0);
        let ids: Vec<String> = tx
            .prepare_cached(
                "SELECT id FROM runs w WHERE state='waiting' AND NOT EXISTS (SELECT 1 FROM runs r \
                   WHERE r.state='running' AND r.session_key IS NOT NULL AND r.session_key=w.session_key) \
                 ORDER BY created_ms, id LIMIT ?1",
            )?
            .query_map(params![free], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for id in ids {
            let r = tx
                .prepare_cached(&format!("SELECT {COLUMNS} FROM runs WHERE id=?1"))?
                .query_row(params![id], row)?;
            // Two waiting runs of one session: only the first goes now.
            if let Some(k) = &r.session_key {
                if !seen.insert(k.clone()) {
                    continue;
                }
            }
            tx.prepare_cached(
                "UPDATE runs SET state='running', started_ms=?2, deadline_ms=?3 WHERE id=?1",
            )?
            .execute(params![id, now, now + timeout_ms])?;
            out.push(RunRow {
                state: "running".into(),
                started_ms: Some(now),
                deadline_ms: Some(now + timeout_ms),
                ..r
            });
        }
        tx.commit()?;
        Ok(out)
    }

    /// The supervisor's claim: once per run, so its agent is spawned at most once.
    pub fn claim_run(&mut self, id: &str, pid: i64, start: i64) -> Result<Option<RunRow>> {
        let tx = self.write_tx()?;
        let n = tx
            .prepare_cached(
                "UPDATE runs SET sup_pid=?2, sup_start=?3 WHERE id=?1 AND state='running' AND sup_pid IS NULL",
            )?
            .execute(params![id, pid, start])?;
        let r = if n == 1 {
            Some(
                tx.prepare_cached(&format!("SELECT {COLUMNS} FROM runs WHERE id=?1"))?
                    .query_row(params![id], row)?,
            )
        } else {
            None
        };
        tx.commit()?;
        Ok(r)
    }

    pub fn run_agent_started(&mut self, id: &str, pid: i64) -> Result<()> {
        let tx = self.write_tx()?;
        tx.prepare_cached("UPDATE runs SET agent_pid=?2 WHERE id=?1")?
            .execute(params![id, pid])?;
        tx.commit()?;
        Ok(())
    }

    /// The supervisor's last word: how the agent ended.
    pub fn run_exited(&mut self, id: &str, exit: &str) -> Result<()> {
        let tx = self.write_tx()?;
        tx.prepare_cached("UPDATE runs SET exit=?2, ended_ms=?3 WHERE id=?1 AND exit IS NULL")?
            .execute(params![id, exit, now_ms()])?;
        tx.commit()?;
        Ok(())
    }

    /// Runs not done yet, oldest first.
    pub fn open_runs(&self) -> Result<Vec<RunRow>> {
        Ok(self
            .conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM runs WHERE state<>'done' ORDER BY created_ms, id"
            ))?
            .query_map([], row)?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// The newest `limit` runs, newest first (`sp runs`).
    pub fn recent_runs(&self, limit: usize) -> Result<Vec<RunRow>> {
        Ok(self
            .conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM runs ORDER BY created_ms DESC, id DESC LIMIT ?1"
            ))?
            .query_map(params![limit as i64], row)?
            .collect::<rusqlite::Result<_>>()?)
    }

    pub fn run(&self, id: &str) -> Result<Option<RunRow>> {
        Ok(self
            .conn
            .prepare_cached(&format!("SELECT {COLUMNS} FROM runs WHERE id=?1"))?
            .query_row(params![id], row)
            .optional()?)
    }

    /// The running run of ours on session `key`, if any.
    pub fn run_of_session(&self, key: &str) -> Result<Option<RunRow>> {
        Ok(self
            .conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM runs WHERE session_key=?1 AND state<>'done' ORDER BY created_ms LIMIT 1"
            ))?
            .query_row(params![key], row)
            .optional()?)
    }

    /// A `progress` ack for the run's message: the reply so far (already redacted and
    /// capped), its `seq` rising. Best effort: it replaces only a `taken` or `progress`.
    pub fn run_progress(&mut self, run: &str, reply: &str) -> Result<()> {
        let tx = self.write_tx()?;
        let m: Option<(Option<String>, i64)> = tx
            .prepare_cached("SELECT message_id, progress_seq + 1 FROM runs WHERE id=?1")?
            .query_row(params![run], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if let Some((Some(message), seq)) = m {
            tx.prepare_cached("UPDATE runs SET progress_seq=?2 WHERE id=?1")?
                .execute(params![run, seq])?;
            tx.prepare_cached(
                "UPDATE acks SET outcome='progress', reply=?2, seq=?3, at=?4, sent_at=NULL, attempts=0, \
                   next_try_ms=0, last_error=NULL, generation=generation+1 \
                 WHERE message_id=?1 AND outcome IN ('taken','progress')",
            )?
            .execute(params![message, reply, seq, format_ms(now_ms())])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Ends a run, and its message with its one final ack in the same transaction:
    /// `delivered` with `mode`, `session` and `reply` (already redacted and capped) when it
    /// went well, `failed` with `detail` otherwise.
    pub fn finish_run(&mut self, run: &str, end: &RunEnd) -> Result<()> {
        let now = now_ms();
        let at = format_ms(now);
        let tx = self.write_tx()?;
        let message: Option<Option<String>> = tx
            .prepare_cached("SELECT message_id FROM runs WHERE id=?1 AND state<>'done'")?
            .query_row(params![run], |r| r.get(0))
            .optional()?;
        let Some(message) = message else {
            return Ok(());
        };
        tx.prepare_cached(
            "UPDATE runs SET state='done', outcome=?2, detail=?3, session=coalesce(?4, session), \
               ended_ms=coalesce(ended_ms, ?5) WHERE id=?1",
        )?
        .execute(params![
            run,
            if end.ok { "ok" } else { "failed" },
            end.detail,
            end.session,
            now
        ])?;
        if let Some(m) = message {
            let outcome = if end.ok { "delivered" } else { "failed" };
            let changed = tx
                .prepare_cached(
                    "UPDATE messages SET state='done', outcome=?2, detail=?3, done_at=?4 WHERE id=?1 AND state<>'done'",
                )?
                .execute(params![m, outcome, end.detail, at])?;
            if changed == 1 {
                let (mode, reply) = if end.ok {
                    (Some(end.mode), end.reply.as_deref())
                } else {
                    (None, None)
                };
                final_ack(&tx, &m, &at, mode, reply)?;
                if end.ok {
                    tx.prepare_cached("UPDATE acks SET session=?2 WHERE message_id=?1")?
                        .execute(params![m, end.session])?;
                }
            }
        }
        tx.commit()?;
        Ok(())
    }
}

/// A queued prompt and what its session's hooks last said, for DECISIONS 38's delivery
/// decision (`crate::runs::decide`).
#[derive(Debug, Clone)]
pub struct WaitingPrompt {
    pub id: String,
    pub session_key: String,
    pub text: Option<String>,
    pub harness: String,
    pub session_id: String,
    /// As stored: `~` for the home folder.
    pub cwd: Option<String>,
    /// The harness process its hooks last ran under (pid, start time).
    pub process: Option<(i64, i64)>,
    pub turn_open: bool,
    /// A turn of the session ended (a `turn.ended` event is stored).
    pub had_turn: bool,
    pub ended: bool,
    pub received_ms: Millis,
    /// Driven through a server API (OpenCode): delivered there, not by a run.
    pub api: bool,
}

impl Store {
    /// Queued prompts, oldest first, with their sessions' state.
    pub fn waiting_prompts(&self, limit: usize) -> Result<Vec<WaitingPrompt>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT m.id, m.session_key, m.text, s.harness, s.session_id, s.cwd, s.harness_pid, \
                   s.harness_start, s.turn_open, s.ended_at IS NOT NULL, s.api_url IS NOT NULL, \
                   EXISTS(SELECT 1 FROM events e WHERE e.session_key = s.key AND e.type = 'turn.ended'), \
                   (julianday(m.received_at) - 2440587.5) * 86400000.0 \
                 FROM messages m JOIN sessions s ON s.key = m.session_key \
                 WHERE m.state='queued' AND m.kind='prompt' ORDER BY m.received_at, m.id LIMIT ?1",
            )?
            .query_map(params![limit as i64], |r| {
                let pid: Option<i64> = r.get(6)?;
                let start: Option<i64> = r.get(7)?;
                Ok(WaitingPrompt {
                    id: r.get(0)?,
                    session_key: r.get(1)?,
                    text: r.get(2)?,
                    harness: r.get(3)?,
                    session_id: r.get(4)?,
                    cwd: r.get(5)?,
                    process: pid.zip(start),
                    turn_open: r.get::<_, i64>(8)? != 0,
                    ended: r.get(9)?,
                    api: r.get(10)?,
                    had_turn: r.get(11)?,
                    received_ms: r.get::<_, f64>(12)? as Millis,
                })
            })?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// The newest fork a run of ours made of session `key`: later messages go to it.
    pub fn last_fork(&self, key: &str) -> Result<Option<String>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT session FROM runs WHERE session_key=?1 AND kind='fork' AND outcome='ok' \
                 AND session IS NOT NULL ORDER BY created_ms DESC LIMIT 1",
            )?
            .query_row(params![key], |r| r.get(0))
            .optional()?)
    }
}

/// How a run ended, for [`Store::finish_run`].
pub struct RunEnd {
    pub ok: bool,
    /// The ack's `mode`: `resume`, `fork` or `start`.
    pub mode: &'static str,
    pub session: Option<String>,
    pub reply: Option<String>,
    pub detail: Option<String>,
}
