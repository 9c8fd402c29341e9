//! What sp-sync does to the store: ingest polled messages, keep the ack and event outboxes,
//! remember per-sink state, and sweep what time has decided.
use super::hooks::{clear, end_turn_waits, finish, finish_with_code, taken_ack, BATCH_PART};
use super::{pid_alive, Store};
use crate::clock::{format_ms, now_ms, Millis};
use crate::wire::control::{
    deadline, AckStatus, Checked, ControlMessage, Decided, Decision, DeliveryMode, Kind, Outcome,
    Scope,
};
use crate::wire::event::{How, StoredEvent};
use anyhow::Result;
use rusqlite::{params, OptionalExtension};

/// What happened to one polled message.
#[derive(Debug, Clone, PartialEq)]
pub enum Ingested {
    /// Stored for a hook to deliver.
    Queued { id: String, kind: Kind },
    /// Decided at once; its ack is in the outbox.
    Final {
        id: String,
        outcome: Outcome,
        detail: Option<String>,
    },
    /// Seen before: not acted on again; its stored ack (if final) will be resent.
    Duplicate { id: String },
    /// No usable id: nothing can be acked.
    Dropped { reason: String },
}

#[derive(Debug, Clone)]
pub struct AckRow {
    pub message_id: String,
    /// A send confirms only the generation it carried; a resend asked meanwhile still goes.
    pub generation: i64,
    pub outcome: AckStatus,
    pub code: Option<String>,
    pub detail: Option<String>,
    pub at: String,
    pub attempts: i64,
    pub mode: Option<DeliveryMode>,
    pub session: Option<String>,
    pub reply: Option<String>,
    pub seq: Option<u64>,
}

#[derive(Debug, Clone, Default)]
pub struct SinkState {
    pub name: String,
    pub event_cursor: i64,
    pub control_paused: Option<String>,
    pub events_paused: Option<String>,
    pub paused_config: Option<String>,
    pub tier_cap: Option<u8>,
    pub last_poll_ok_at: Option<String>,
    pub last_events_ok_at: Option<String>,
    pub last_error: Option<String>,
    pub last_error_at: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SweepReport {
    pub expired: usize,
    pub orphaned: usize,
    pub attentions_unknown: usize,
    pub pruned: usize,
}

/// Ack retry schedule (DECISIONS 2, 3): 1, 2, 5, 10, 30, 60 s, then every 60 s.
pub fn retry_delay_ms(attempts: i64) -> Millis {
    const S: [Millis; 6] = [1, 2, 5, 10, 30, 60];
    S[(attempts.max(1) as usize - 1).min(S.len() - 1)] * 1000
}

fn outcome_of(s: &str) -> AckStatus {
    AckStatus::parse(s).unwrap_or(AckStatus::Final(Outcome::Failed))
}

/// DECISIONS 38: a prompt delivered in place whose turn has not ended within this long is
/// acked `delivered` without a reply.
pub const TURN_WAIT_MAX_MS: Millis = 30 * 60_000;

/// A `delivering` row older than this was left by a hook that died between claim and confirm.
const CLAIM_STALE_MS: Millis = 30_000;
/// How long final messages are kept to recognise redeliveries, and sent events kept at all.
const KEEP_MS: Millis = 7 * 24 * 3_600_000;
/// Pruning reads whole tables (nothing indexes old history) inside the sweep's write
/// transaction, so it runs on the first sweep of a process and then at most this often; run
/// every 2 s it held the write lock long enough to put a 260 ms p99 on permission answers with
/// 1,000,000 rows kept (BENCHMARKS.md). History is kept 7 days: pruning it minutes later is
/// the same.
const PRUNE_EVERY_MS: Millis = 10 * 60_000;
static NEXT_PRUNE_MS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// DECISIONS 24: a session holds at most this many undelivered messages; a new one past it
/// is acked `failed` with detail `queue full` (stored without its text).
pub const MAX_UNDELIVERED_PER_SESSION: i64 = 1_000;
pub const QUEUE_FULL: &str = "queue full";

impl Store {
    /// Stores every message of one poll answer in one transaction (DECISIONS 2, 6, 7, 8, 12).
    /// `route` gives a final outcome for kinds this session's harness has no path for.
    pub fn ingest(
        &mut self,
        sink: &str,
        session_key: &str,
        messages: &[Checked],
        route: &dyn Fn(&ControlMessage) -> Option<(Outcome, String)>,
    ) -> Result<Vec<Ingested>> {
        Ok(self
            .ingest_capped(sink, session_key, messages, route, usize::MAX)?
            .0)
    }

    /// `ingest`, taking at most `max_taken` messages that need a write (new ones, and final
    /// ones whose ack goes again); messages we hold and have not finished cost nothing and do
    /// not count (DECISIONS 24). Also returns how many were left for the receiver to
    /// redeliver.
    pub fn ingest_capped(
        &mut self,
        sink: &str,
        session_key: &str,
        messages: &[Checked],
        route: &dyn Fn(&ControlMessage) -> Option<(Outcome, String)>,
        max_taken: usize,
    ) -> Result<(Vec<Ingested>, usize)> {
        let now = now_ms();
        let received_at = format_ms(now);
        // A prompt waiting for its Stop is redelivered on every poll: when every message is
        // one we hold and have not finished, there is nothing to write, so the write lock
        // (which every hook contends for) is not taken at all.
        if let Some(out) = self.all_pending_duplicates(messages)? {
            return Ok((out, 0));
        }
        // Whatever it stores may be work for the session's hooks ([`super::quiet`]).
        let tx = self.write_tx_unmarking(session_key)?;
        let mut undelivered: i64 = tx
            .prepare_cached(
                "SELECT count(*) FROM messages WHERE session_key=?1 AND state <> 'done'",
            )?
            .query_row(params![session_key], |r| r.get(0))?;
        let mut taken = 0usize;
        let mut left = 0usize;
        let mut out = Vec::with_capacity(messages.len().min(max_taken));
        for m in messages {
            if taken >= max_taken {
                // Not looked at: the receiver redelivers what it has not had acked.
                left += 1;
                continue;
            }
            let id = match m.ack_id() {
                Ok(id) => id,
                Err(reason) => {
                    taken += 1;
                    out.push(Ingested::Dropped {
                        reason: reason.to_string(),
                    });
                    continue;
                }
            };
            if let Some(done) = redelivered(&tx, id, sink, &received_at)? {
                taken += usize::from(done);
                out.push(Ingested::Duplicate { id: id.to_string() });
                continue;
            }
            taken += 1;
            let new = NewMessage {
                tx: &tx,
                id,
                session_key,
                sink,
                received_at: &received_at,
                now,
            };
            let ingested = new.store(m, route, undelivered)?;
            if matches!(ingested, Ingested::Queued { .. }) {
                undelivered += 1;
            }
            out.push(ingested);
        }
        tx.commit()?;
        Ok((out, left))
    }

    /// `Some` (each message `Duplicate` or `Dropped`) when a poll answer holds nothing new and
    /// nothing final: read-only.
    fn all_pending_duplicates(&self, messages: &[Checked]) -> Result<Option<Vec<Ingested>>> {
        let mut out = Vec::with_capacity(messages.len());
        let mut st = self
            .conn
            .prepare_cached("SELECT state FROM messages WHERE id=?1")?;
        for m in messages {
            let id = match m.ack_id() {
                Ok(id) => id,
                Err(reason) => {
                    out.push(Ingested::Dropped {
                        reason: reason.to_string(),
                    });
                    continue;
                }
            };
            let state: Option<String> = st.query_row(params![id], |r| r.get(0)).optional()?;
            match state.as_deref() {
                Some("queued") | Some("delivering") => {
                    out.push(Ingested::Duplicate { id: id.to_string() })
                }
                _ => return Ok(None),
            }
        }
        Ok(Some(out))
    }

    /// Final outcome decided outside a hook (an input API answered): mark done and queue the
    /// ack; a delivery says its mode `api` (DECISIONS 38).
    pub fn finish_message(&mut self, id: &str, outcome: Outcome, detail: &str) -> Result<()> {
        let now = now_ms();
        let tx = self.write_tx()?;
        finish(&tx, id, outcome.as_str(), Some(detail), now)?;
        if outcome == Outcome::Delivered {
            tx.prepare_cached("UPDATE acks SET mode='api' WHERE message_id=?1 AND mode IS NULL")?
                .execute(params![id])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// The interim acks (`taken`, `progress`) among `ids`, whose send a receiver refused
    /// (one that predates them answers 400): counted sent, as they are best effort and the
    /// final ack supersedes them; the rest of the batch goes again without them. Returns
    /// how many.
    pub fn drop_interim_acks(&mut self, sink: &str, ids: &[(String, i64)]) -> Result<usize> {
        let at = format_ms(now_ms());
        let tx = self.write_tx()?;
        let mut n = 0;
        for (id, generation) in ids {
            n += tx
                .prepare_cached(
                    "UPDATE acks SET sent_at=?3, last_error='refused by the receiver' \
                     WHERE message_id=?1 AND sink=?2 AND generation=?4 AND outcome IN ('taken','progress')",
                )?
                .execute(params![id, sink, at, generation])?;
        }
        tx.commit()?;
        Ok(n)
    }

    pub fn pending_acks(&self, sink: &str, now: Millis, limit: usize) -> Result<Vec<AckRow>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT message_id, outcome, detail, at, attempts, generation, code, mode, session, reply, seq FROM acks \
                 WHERE sink=?1 AND sent_at IS NULL AND next_try_ms <= ?2 ORDER BY at, message_id LIMIT ?3",
            )?
            .query_map(params![sink, now, limit as i64], |r| {
                Ok(AckRow {
                    message_id: r.get(0)?,
                    outcome: outcome_of(&r.get::<_, String>(1)?),
                    detail: r.get(2)?,
                    at: r.get(3)?,
                    attempts: r.get(4)?,
                    generation: r.get(5)?,
                    code: r.get(6)?,
                    mode: r
                        .get::<_, Option<String>>(7)?
                        .as_deref()
                        .and_then(DeliveryMode::parse),
                    session: r.get(8)?,
                    reply: r.get(9)?,
                    seq: r.get::<_, Option<i64>>(10)?.map(|n| n.max(0) as u64),
                })
            })?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// Soonest time an unsent ack of this sink may be tried, if any is waiting.
    pub fn next_ack_due(&self, sink: &str) -> Result<Option<Millis>> {
        Ok(self
            .conn
            .prepare_cached("SELECT min(next_try_ms) FROM acks WHERE sink=?1 AND sent_at IS NULL")?
            .query_row(params![sink], |r| r.get(0))?)
    }

    pub fn acks_sent(&mut self, sink: &str, sent: &[(String, i64)]) -> Result<()> {
        let at = format_ms(now_ms());
        let tx = self.write_tx()?;
        for (id, generation) in sent {
            tx.prepare_cached(
                "UPDATE acks SET sent_at=?3, attempts=attempts+1, last_error=NULL \
                 WHERE message_id=?1 AND sink=?2 AND generation=?4",
            )?
            .execute(params![id, sink, at, generation])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// A failed send: retry each ack on the schedule, or at `retry_at` when the receiver said so.
    /// Returns how long until the soonest of them goes again (ms).
    pub fn acks_failed(
        &mut self,
        sink: &str,
        ids: &[String],
        error: &str,
        retry_at: Option<Millis>,
    ) -> Result<Millis> {
        let now = now_ms();
        let mut soonest: Option<Millis> = None;
        let tx = self.write_tx()?;
        for id in ids {
            let attempts: i64 = tx.query_row(
                "UPDATE acks SET attempts=attempts+1, last_error=?3 WHERE message_id=?1 AND sink=?2 RETURNING attempts",
                params![id, sink, error],
                |r| r.get(0),
            )?;
            let next = retry_at.unwrap_or(now + retry_delay_ms(attempts));
            soonest = Some(soonest.map_or(next, |s| s.min(next)));
            tx.execute(
                "UPDATE acks SET next_try_ms=?3 WHERE message_id=?1 AND sink=?2",
                params![id, sink, next],
            )?;
        }
        tx.commit()?;
        Ok(soonest.map_or(0, |s| (s - now).max(0)))
    }

    /// Creates the sink's row on first sight. Its event cursor starts just before the oldest
    /// event of a session still live, so each live session begins with `session.started`.
    pub fn ensure_sink(&mut self, name: &str, live_since_ms: Millis) -> Result<SinkState> {
        if let Some(s) = self.sink_state(name)? {
            return Ok(s);
        }
        let tx = self.write_tx()?;
        let cursor: i64 = tx.query_row(
            "SELECT coalesce((SELECT min(e.rowid) - 1 FROM events e JOIN sessions s ON s.key = e.session_key \
                              WHERE s.ended_at IS NULL AND s.last_event_ms >= ?1), \
                             (SELECT max(rowid) FROM events), 0)",
            params![live_since_ms],
            |r| r.get(0),
        )?;
        tx.execute(
            "INSERT OR IGNORE INTO sinks(name, event_cursor) VALUES (?1, ?2)",
            params![name, cursor],
        )?;
        tx.commit()?;
        Ok(self.sink_state(name)?.unwrap_or_default())
    }

    pub fn sink_state(&self, name: &str) -> Result<Option<SinkState>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT name, event_cursor, control_paused, events_paused, paused_config, tier_cap, \
                   last_poll_ok_at, last_events_ok_at, last_error, last_error_at FROM sinks WHERE name=?1",
            )?
            .query_row(params![name], |r| {
                Ok(SinkState {
                    name: r.get(0)?,
                    event_cursor: r.get(1)?,
                    control_paused: r.get(2)?,
                    events_paused: r.get(3)?,
                    paused_config: r.get(4)?,
                    tier_cap: r.get::<_, Option<i64>>(5)?.map(|t| t.clamp(0, 3) as u8),
                    last_poll_ok_at: r.get(6)?,
                    last_events_ok_at: r.get(7)?,
                    last_error: r.get(8)?,
                    last_error_at: r.get(9)?,
                })
            })
            .optional()?)
    }

    /// A pause (401/403) holds until the sink's config changes (DECISIONS 2); `fingerprint`
    /// identifies the config it was decided under. A changed config lifts it.
    pub fn lift_pauses_if_config_changed(&mut self, name: &str, fingerprint: &str) -> Result<bool> {
        let n = self.conn.execute(
            "UPDATE sinks SET control_paused=NULL, events_paused=NULL, tier_cap=NULL, paused_config=NULL \
             WHERE name=?1 AND paused_config IS NOT NULL AND paused_config<>?2",
            params![name, fingerprint],
        )?;
        Ok(n > 0)
    }

    pub fn pause_control(&mut self, name: &str, reason: &str, fingerprint: &str) -> Result<()> {
        self.conn.execute(
            "UPDATE sinks SET control_paused=?2, paused_config=?3, last_error=?2, last_error_at=?4 WHERE name=?1",
            params![name, reason, fingerprint, format_ms(now_ms())],
        )?;
        Ok(())
    }

    pub fn pause_events(&mut self, name: &str, reason: &str, fingerprint: &str) -> Result<()> {
        self.conn.execute(
            "UPDATE sinks SET events_paused=?2, paused_config=?3, last_error=?2, last_error_at=?4 WHERE name=?1",
            params![name, reason, fingerprint, format_ms(now_ms())],
        )?;
        Ok(())
    }

    pub fn set_tier_cap(&mut self, name: &str, tier: u8, fingerprint: &str) -> Result<()> {
        self.conn.execute(
            "UPDATE sinks SET tier_cap=?2, paused_config=?3 WHERE name=?1",
            params![name, tier, fingerprint],
        )?;
        Ok(())
    }

    pub fn note_poll_ok(&mut self, name: &str) -> Result<()> {
        self.conn.execute(
            "UPDATE sinks SET last_poll_ok_at=?2 WHERE name=?1",
            params![name, format_ms(now_ms())],
        )?;
        Ok(())
    }

    pub fn note_error(&mut self, name: &str, error: &str) -> Result<()> {
        self.conn.execute(
            "UPDATE sinks SET last_error=?2, last_error_at=?3 WHERE name=?1",
            params![
                name,
                spwire::text::truncate(error, 500),
                format_ms(now_ms())
            ],
        )?;
        Ok(())
    }

    pub fn cached_wellknown(&self, name: &str, max_age_ms: Millis) -> Result<Option<String>> {
        Ok(self
            .conn
            .prepare_cached("SELECT wellknown FROM sinks WHERE name=?1 AND wellknown_ms >= ?2")?
            .query_row(params![name, now_ms() - max_age_ms], |r| r.get(0))
            .optional()?
            .flatten())
    }

    pub fn cache_wellknown(&mut self, name: &str, body: &str) -> Result<()> {
        self.conn.execute(
            "UPDATE sinks SET wellknown=?2, wellknown_ms=?3 WHERE name=?1",
            params![name, body, now_ms()],
        )?;
        Ok(())
    }

    pub fn forget_wellknown(&mut self, name: &str) -> Result<()> {
        self.conn.execute(
            "UPDATE sinks SET wellknown=NULL, wellknown_ms=NULL WHERE name=?1",
            params![name],
        )?;
        Ok(())
    }

    /// Events past the sink's cursor, oldest first.
    pub fn events_after(&self, cursor: i64, limit: usize) -> Result<Vec<StoredEvent>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT rowid, event_id, type, time, harness, harness_event, session_id, seq, cwd, data, \
                   (SELECT permission_mode FROM sessions s WHERE s.key = events.session_key) \
                 FROM events WHERE rowid > ?1 ORDER BY rowid LIMIT ?2",
            )?
            .query_map(params![cursor, limit as i64], |r| {
                let data: String = r.get(9)?;
                Ok(StoredEvent {
                    rowid: r.get(0)?,
                    event_id: r.get(1)?,
                    kind: r.get(2)?,
                    time: r.get(3)?,
                    harness: r.get(4)?,
                    harness_event: r.get(5)?,
                    session_id: r.get(6)?,
                    seq: r.get(7)?,
                    cwd: r.get(8)?,
                    permission_mode: r.get(10)?,
                    data: serde_json::from_str(&data).unwrap_or(serde_json::Value::Null),
                })
            })?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// Moves the cursor only forward (DECISIONS 18, protocol §2.2: only on 202 or a final drop).
    pub fn advance_cursor(&mut self, name: &str, rowid: i64, ok: bool) -> Result<()> {
        self.conn.execute(
            "UPDATE sinks SET event_cursor=max(event_cursor, ?2), \
               last_events_ok_at=CASE WHEN ?3 THEN ?4 ELSE last_events_ok_at END WHERE name=?1",
            params![name, rowid, ok, format_ms(now_ms())],
        )?;
        Ok(())
    }

    /// DECISIONS 39: parked prompts with an answer queued and nothing to take it: no hook
    /// waits on the prompt, no run of ours is open on its session, and none was launched for
    /// this park already (each park resumes its run at most once; a resumed run that parks
    /// the prompt again may be resumed again), and its folder known (a run starts there).
    /// Oldest first, at most `limit`.
    pub fn parked_answered(&self, limit: usize) -> Result<Vec<ParkedAnswered>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT a.session_key, a.attention_id, s.harness, s.session_id, s.cwd FROM attention a \
                   JOIN sessions s ON s.key = a.session_key \
                 WHERE a.state='open' AND a.parked_ms IS NOT NULL AND a.hook_pid IS NULL \
                   AND s.cwd IS NOT NULL \
                   AND EXISTS(SELECT 1 FROM messages m WHERE m.session_key=a.session_key \
                              AND m.kind='permission.answer' AND m.attention_id=a.attention_id \
                              AND m.state='queued') \
                   AND NOT EXISTS(SELECT 1 FROM runs r WHERE r.session_key=a.session_key \
                                  AND (r.state<>'done' OR r.created_ms >= a.parked_ms)) \
                 ORDER BY a.parked_ms LIMIT ?1",
            )?
            .query_map(params![limit as i64], |r| {
                Ok(ParkedAnswered {
                    session_key: r.get(0)?,
                    attention_id: r.get(1)?,
                    harness: r.get(2)?,
                    session_id: r.get(3)?,
                    cwd: r.get(4)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// Sessions to poll: not ended, and an event within `live_ms` (DECISIONS 5); and a
    /// session whose headless run parked a prompt (DECISIONS 39), whose answer is awaited.
    pub fn live_sessions(&self, live_ms: Millis) -> Result<Vec<(String, String)>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT key, harness FROM sessions WHERE (ended_at IS NULL AND last_event_ms >= ?1) \
                   OR key IN (SELECT session_key FROM attention WHERE state='open' AND parked_ms IS NOT NULL) \
                 ORDER BY key",
            )?
            .query_map(params![now_ms() - live_ms], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// Sessions to poll for control messages: [`Store::live_sessions`], plus the ended ones
    /// of `resumable` harnesses within the same window (DECISIONS 38: a prompt to an ended
    /// session resumes it).
    pub fn polled_sessions(
        &self,
        live_ms: Millis,
        resumable: &[&str],
    ) -> Result<Vec<(String, String)>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT key, harness FROM sessions WHERE last_event_ms >= ?1 \
                 AND (ended_at IS NULL OR harness IN (SELECT value FROM json_each(?2))) ORDER BY key",
            )?
            .query_map(
                params![now_ms() - live_ms, serde_json::to_string(resumable)?],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// How long since the last hook report, in ms; `None` while there is still work: an open
    /// attention, an undecided message, an unsent ack, events some sink has not taken, or a
    /// spooled turn end.
    pub fn idle_for(&self) -> Result<Option<Millis>> {
        if super::spool::pending(&self.spool_dir) {
            return Ok(None);
        }
        let busy: bool = self.conn.query_row(
            "SELECT EXISTS(SELECT 1 FROM attention WHERE state='open') \
                 OR EXISTS(SELECT 1 FROM messages WHERE state<>'done') \
                 OR EXISTS(SELECT 1 FROM acks WHERE sent_at IS NULL) \
                 OR EXISTS(SELECT 1 FROM turn_waits) \
                 OR EXISTS(SELECT 1 FROM runs WHERE state<>'done') \
                 OR EXISTS(SELECT 1 FROM events e JOIN sinks s ON e.rowid > s.event_cursor \
                           WHERE s.events_paused IS NULL)",
            [],
            |r| r.get(0),
        )?;
        if busy {
            return Ok(None);
        }
        let last: Option<Millis> =
            self.conn
                .query_row("SELECT max(last_event_ms) FROM sessions", [], |r| r.get(0))?;
        Ok(Some(now_ms() - last.unwrap_or(0)))
    }

    /// Decides what time has decided: expired messages, claims of dead hooks (DECISIONS 21),
    /// attentions nobody waits for (DECISIONS 13 `unknown`); prunes old history.
    pub fn sweep(&mut self) -> Result<SweepReport> {
        let now = now_ms();
        let tx = self.write_tx()?;
        let mut report = SweepReport {
            expired: expire_queued(&tx, now)?,
            ..SweepReport::default()
        };
        end_stale_turns(&tx, now)?;
        report.orphaned = fail_orphaned_claims(&tx, now)?;
        report.attentions_unknown = clear_unwatched_attentions(&tx, now)?;
        use std::sync::atomic::Ordering::Relaxed;
        if NEXT_PRUNE_MS.load(Relaxed) <= now {
            NEXT_PRUNE_MS.store(now + PRUNE_EVERY_MS, Relaxed);
            report.pruned = prune(&tx, now)?;
        }
        tx.commit()?;
        Ok(report)
    }
}

/// Queued messages past their deadline: acked `expired`. Returns how many.
fn expire_queued(tx: &rusqlite::Transaction, now: Millis) -> Result<usize> {
    let expired: Vec<String> = tx
        .prepare_cached("SELECT id FROM messages WHERE state='queued' AND deadline_ms <= ?1")?
        .query_map(params![now], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for id in &expired {
        finish(
            tx,
            id,
            "expired",
            Some("past expires_at before it could be delivered"),
            now,
        )?;
    }
    Ok(expired.len())
}

/// DECISIONS 38: a turn that never ended (no Stop within 30 min): delivered, no reply.
fn end_stale_turns(tx: &rusqlite::Transaction, now: Millis) -> Result<()> {
    let stale_turns: Vec<String> = tx
        .prepare_cached("SELECT DISTINCT session_key FROM turn_waits WHERE since_ms <= ?1")?
        .query_map(params![now - TURN_WAIT_MAX_MS], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for key in &stale_turns {
        end_turn_waits(tx, key, None, now)?;
    }
    Ok(())
}

/// Claims of hooks that died (or held them too long) before confirming delivery: acked
/// `failed` (DECISIONS 21). Returns how many.
fn fail_orphaned_claims(tx: &rusqlite::Transaction, now: Millis) -> Result<usize> {
    let mut orphaned = 0;
    let claimed: Vec<(String, Option<i64>, Option<i64>)> = tx
        .prepare_cached(
            "SELECT id, claimed_pid, claimed_ms FROM messages m WHERE state='delivering' \
             AND NOT EXISTS (SELECT 1 FROM runs WHERE message_id=m.id)",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (id, pid, at) in claimed {
        let dead = !pid.is_some_and(pid_alive) || at.is_none_or(|t| now - t > CLAIM_STALE_MS);
        if dead {
            finish(
                tx,
                &id,
                "failed",
                Some("the hook ended before confirming delivery"),
                now,
            )?;
            orphaned += 1;
        }
    }
    Ok(orphaned)
}

/// Open attentions nobody waits for any more: cleared `unknown` (DECISIONS 13), and answers
/// still queued for them expired. Returns how many.
fn clear_unwatched_attentions(tx: &rusqlite::Transaction, now: Millis) -> Result<usize> {
    let mut cleared = 0;
    let stale: Vec<(String, String, Option<i64>)> = tx
        .prepare_cached(
            "SELECT session_key, attention_id, hook_pid FROM attention WHERE state='open' AND wait_until_ms + 60000 < ?1",
        )?
        .query_map(params![now], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (key, attention_id, pid) in stale {
        if pid.is_some_and(pid_alive) {
            continue;
        }
        if clear(tx, &key, &attention_id, How::Unknown, "", now)? {
            cleared += 1;
        }
    }
    Ok(cleared)
}

/// Deletes history older than KEEP_MS that no sink still needs. Returns the messages and
/// events removed.
fn prune(tx: &rusqlite::Transaction, now: Millis) -> Result<usize> {
    let mut pruned = 0;
    let old = format_ms(now - KEEP_MS);
    pruned += tx.execute(
        "DELETE FROM messages WHERE state='done' AND done_at < ?1 \
         AND NOT EXISTS (SELECT 1 FROM acks WHERE message_id=messages.id AND sent_at IS NULL)",
        params![old],
    )?;
    tx.execute(
        "DELETE FROM acks WHERE sent_at IS NOT NULL AND sent_at < ?1 \
         AND NOT EXISTS (SELECT 1 FROM messages WHERE id=acks.message_id)",
        params![old],
    )?;
    pruned += tx.execute(
        "DELETE FROM events WHERE time < ?1 AND rowid <= coalesce((SELECT min(event_cursor) FROM sinks), rowid)",
        params![old],
    )?;
    Ok(pruned)
}

/// `Some` when we hold message `id` already: `Some(true)` when it is done, and its ack (the
/// same outcome again) is queued once more to whichever sink redelivered it.
fn redelivered(
    tx: &rusqlite::Transaction,
    id: &str,
    sink: &str,
    received_at: &str,
) -> Result<Option<bool>> {
    let state: Option<String> = tx
        .prepare_cached("SELECT state FROM messages WHERE id=?1")?
        .query_row(params![id], |r| r.get(0))
        .optional()?;
    let Some(state) = state else {
        return Ok(None);
    };
    let done = state == "done";
    let waiting: bool = tx
        .prepare_cached("SELECT EXISTS(SELECT 1 FROM turn_waits WHERE message_id=?1)")?
        .query_row(params![id], |r| r.get(0))?;
    if waiting {
        // Its final ack waits for the turn's end: the `taken` goes again.
        taken_ack(tx, id, sink, received_at)?;
        tx.prepare_cached(
            "UPDATE acks SET sent_at=NULL, next_try_ms=0, generation=generation+1 \
             WHERE message_id=?1 AND sink=?2 AND outcome='taken'",
        )?
        .execute(params![id, sink])?;
    } else if done {
        tx.prepare_cached(
            "INSERT INTO acks(message_id, sink, outcome, code, detail, at) \
             SELECT id, ?2, outcome, code, detail, ?3 FROM messages WHERE id=?1 \
             ON CONFLICT(message_id, sink) DO UPDATE SET sent_at=NULL, next_try_ms=0, generation=generation+1",
        )?
        .execute(params![id, sink, received_at])?;
    }
    Ok(Some(done))
}

/// One message we have not seen before, stored inside ingest's transaction.
struct NewMessage<'a> {
    tx: &'a rusqlite::Transaction<'a>,
    id: &'a str,
    session_key: &'a str,
    sink: &'a str,
    received_at: &'a str,
    now: Millis,
}

impl NewMessage<'_> {
    /// Stores the message and decides it, or queues it for a hook. `undelivered` is how many
    /// of the session's messages are not done yet.
    fn store(
        &self,
        m: &Checked,
        route: &dyn Fn(&ControlMessage) -> Option<(Outcome, String)>,
        undelivered: i64,
    ) -> Result<Ingested> {
        match m {
            Checked::Invalid { kind, detail, .. } => {
                self.insert(kind.as_deref().unwrap_or("invalid"), None, None)?;
                self.decided(Outcome::Failed, detail.clone())
            }
            Checked::UnknownKind { kind, .. } => {
                self.insert(kind, None, None)?;
                self.decided(Outcome::Unsupported, format!("unknown kind {kind:?}"))
            }
            Checked::Decided(d) => self.store_decided(d),
            Checked::Valid(v) if undelivered >= MAX_UNDELIVERED_PER_SESSION => {
                self.insert(v.kind.as_str(), None, None)?;
                self.decided(Outcome::Failed, QUEUE_FULL.into())
            }
            Checked::Valid(v) => self.store_valid(v, route),
            Checked::Unackable { .. } => unreachable!(),
        }
    }

    /// A message decided before it reached the store (a signed command's refusal, a start,
    /// a key.add).
    fn store_decided(&self, d: &Decided) -> Result<Ingested> {
        self.insert(&d.kind, None, None)?;
        if let Some(n) = &d.nonce {
            if !self.fresh_nonce(n)? {
                return self.replayed();
            }
        }
        if let Some((key, name)) = &d.add_key {
            super::trust::enroll_vouched_key(
                self.tx,
                self.sink,
                key,
                name.as_deref(),
                self.received_at,
            )?;
        }
        match &d.code {
            // A start's file that failed keeps `failed` with its code (DECISIONS 39).
            Some(code) if d.outcome == Outcome::Failed => {
                self.coded(Outcome::Failed, code, d.detail.clone())
            }
            Some(code) => self.refused(code, d.detail.clone()),
            None => self.decided(d.outcome, d.detail.clone()),
        }
    }

    /// A valid message: stored whole, then expired, routed, checked against its attention
    /// or queued.
    fn store_valid(
        &self,
        v: &ControlMessage,
        route: &dyn Fn(&ControlMessage) -> Option<(Outcome, String)>,
    ) -> Result<Ingested> {
        let dl = deadline(v.at_ms, v.expires_at_ms, self.now);
        self.insert(v.kind.as_str(), Some(v), Some(dl))?;
        if let Some(n) = &v.nonce {
            if !self.fresh_nonce(n)? {
                return self.replayed();
            }
        }
        if dl <= self.now {
            self.decided(Outcome::Expired, "past expires_at on receipt".into())
        } else if let Some((outcome, detail)) = route(v) {
            self.decided(outcome, detail)
        } else if v.kind == Kind::PermissionAnswer && !v.batch.is_empty() {
            self.batch_answer(v, dl)
        } else if v.kind == Kind::PermissionAnswer {
            self.permission_answer(v)
        } else {
            if matches!(v.kind, Kind::Prompt | Kind::Start) {
                // DECISIONS 38: a prompt waits for its session's turn boundary (or its API's
                // idle), a start for its run: `taken` at once, so the receiver stops
                // redelivering it.
                taken_ack(self.tx, self.id, self.sink, self.received_at)?;
            }
            Ok(self.queued(v))
        }
    }

    /// A permission answer is queued only while its attention is open.
    fn permission_answer(&self, v: &ControlMessage) -> Result<Ingested> {
        let row: Option<(String, bool)> = self
            .tx
            .prepare_cached(
                "SELECT state, shown_partial FROM attention WHERE session_key=?1 AND attention_id=?2",
            )?
            .query_row(params![self.session_key, v.for_attention], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        let (state, partial) = row.map_or((None, false), |(s, p)| (Some(s), p));
        match state.as_deref() {
            // DECISIONS 37: a call shown with parts hidden is never allowed for the session.
            Some("open")
                if partial && v.scope == Scope::Session && v.decision == Some(Decision::Allow) =>
            {
                self.decided(
                    Outcome::Unsupported,
                    "scope: the person was shown this call with parts hidden (a secret masked or the input cut), so it is never allowed for the session (DECISIONS 37); nothing ran, the prompt stays open for a one-time answer".into(),
                )
            }
            Some("open") => Ok(self.queued(v)),
            Some(_) => self.decided(
                Outcome::Expired,
                "the attention was already cleared (the hook's window closed or the terminal answered)".into(),
            ),
            None if v.nonce.is_some() => self.refused(
                "no_attention",
                "no such permission prompt is open on that session".into(),
            ),
            None => self.decided(Outcome::Failed, "unknown attention".into()),
        }
    }

    /// DECISIONS 36: a batch answer, whole in this one transaction. Each of its attentions
    /// still open on the session gets the answer as a part (`<batch id>.<n>`), claimed and
    /// delivered by that prompt's hook like any answer but never acked on its own; the
    /// batch itself is final now, its one ack counting the answered and the no longer open.
    /// A crash before the commit leaves nothing (the receiver redelivers); after it, a
    /// redelivery finds the batch done and only resends its ack.
    fn batch_answer(&self, v: &ControlMessage, dl: Millis) -> Result<Ingested> {
        let (mut answered, mut gone) = (0usize, 0usize);
        for (n, attention) in v.batch.iter().enumerate() {
            let state: Option<String> = self
                .tx
                .prepare_cached(
                    "SELECT state FROM attention WHERE session_key=?1 AND attention_id=?2",
                )?
                .query_row(params![self.session_key, attention], |r| r.get(0))
                .optional()?;
            if state.as_deref() != Some("open") {
                gone += 1;
                continue;
            }
            let part = format!("{}{BATCH_PART}{n}", self.id);
            self.insert_as(&part, Some(attention), v.kind.as_str(), Some(v), Some(dl))?;
            answered += 1;
        }
        let outcome = if answered > 0 {
            Outcome::Delivered
        } else {
            Outcome::Expired
        };
        self.decided(
            outcome,
            format!(
                "batch of {}: {answered} answered, {gone} no longer open",
                v.batch.len()
            ),
        )
    }

    fn queued(&self, v: &ControlMessage) -> Ingested {
        Ingested::Queued {
            id: self.id.to_string(),
            kind: v.kind,
        }
    }

    fn insert(&self, kind: &str, v: Option<&ControlMessage>, dl: Option<Millis>) -> Result<()> {
        let attention = v.and_then(|v| v.for_attention.as_deref());
        self.insert_as(self.id, attention, kind, v, dl)
    }

    /// [`Self::insert`] under another id and attention (a batch's part).
    fn insert_as(
        &self,
        id: &str,
        attention: Option<&str>,
        kind: &str,
        v: Option<&ControlMessage>,
        dl: Option<Millis>,
    ) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO messages(id, session_key, sink, kind, attention_id, decision, text, note, at, expires_at, \
                   received_at, deadline_ms, deadline_at, mode, scope, rich, day_key_only, state) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, 'queued')",
            )?
            .execute(params![
                id,
                self.session_key,
                self.sink,
                kind,
                attention,
                v.and_then(|v| v.decision.map(|d| d.as_str())),
                v.and_then(|v| v.text.as_deref()),
                v.and_then(|v| v.note.as_deref()),
                v.map(|v| v.at.as_str()),
                v.map(|v| v.expires_at.as_str()),
                self.received_at,
                dl,
                dl.map(format_ms),
                v.map_or("queue", |v| v.mode.as_str()),
                v.filter(|v| v.kind == Kind::PermissionAnswer)
                    .map(|v| v.scope.as_str()),
                v.and_then(|v| v.rich.to_json()),
                v.filter(|v| v.day_key_only).map(|_| 1),
            ])?;
        Ok(())
    }

    fn decided(&self, outcome: Outcome, detail: String) -> Result<Ingested> {
        finish(self.tx, self.id, outcome.as_str(), Some(&detail), self.now)?;
        // Decided at receipt, never acted on: its text and note are not kept
        // (DECISIONS 24: a flood of such messages must not fill the disk).
        self.tx
            .prepare_cached("UPDATE messages SET text=NULL, note=NULL WHERE id=?1")?
            .execute(params![self.id])?;
        Ok(Ingested::Final {
            id: self.id.to_string(),
            outcome,
            detail: Some(detail),
        })
    }

    fn refused(&self, code: &str, detail: String) -> Result<Ingested> {
        self.coded(Outcome::Refused, code, detail)
    }

    fn coded(&self, outcome: Outcome, code: &str, detail: String) -> Result<Ingested> {
        finish_with_code(
            self.tx,
            self.id,
            outcome.as_str(),
            Some(code),
            Some(&detail),
            self.now,
        )?;
        Ok(Ingested::Final {
            id: self.id.to_string(),
            outcome,
            detail: Some(format!("{code}: {detail}")),
        })
    }

    fn replayed(&self) -> Result<Ingested> {
        self.refused("replay", "this command was already used once".into())
    }

    /// docs/protocol.md#control-5 step 5: the nonce is recorded in this transaction, before anything can
    /// act on the message; false when it was seen in the last 25 h.
    fn fresh_nonce(&self, nonce: &str) -> Result<bool> {
        super::trust::fresh_nonce(self.tx, nonce, self.now)
    }
}

/// A parked prompt whose answer waits for its run to be resumed ([`Store::parked_answered`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkedAnswered {
    pub session_key: String,
    pub attention_id: String,
    pub harness: String,
    pub session_id: String,
    pub cwd: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn schedule() {
        let s: Vec<Millis> = (1..=8).map(retry_delay_ms).collect();
        assert_eq!(s, vec![1000, 2000, 5000, 10000, 30000, 60000, 60000, 60000]);
    }
}
