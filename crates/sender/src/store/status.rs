//! Read-only views for `sp status`, `sp queue` and `sp doctor`. Nothing here writes.
use super::Store;
use crate::clock::{format_ms, now_ms, Millis};
use anyhow::Result;
use rusqlite::{params, OptionalExtension};
use serde::Serialize;

/// What sp-sync recorded about one sink, plus its undelivered outbox.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SinkStatus {
    pub name: String,
    pub control_paused: Option<String>,
    pub events_paused: Option<String>,
    pub tier_cap: Option<i64>,
    pub last_poll_ok_at: Option<String>,
    pub last_events_ok_at: Option<String>,
    pub last_error: Option<String>,
    pub last_error_at: Option<String>,
    /// Events past this sink's cursor: not yet accepted by the receiver.
    pub events_pending: i64,
    pub events_oldest_at: Option<String>,
    /// Acks written but not yet answered 2xx.
    pub acks_pending: i64,
    pub acks_oldest_at: Option<String>,
    pub acks_last_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LiveSession {
    pub key: String,
    pub harness: String,
    pub session_id: String,
    pub cwd: Option<String>,
    pub started_at: String,
    pub last_event_at: String,
    /// DECISIONS 40: what it is doing, in the page's words ([`Store::session_status`]).
    pub status: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct OpenAttention {
    pub session: String,
    pub attention_id: String,
    pub tool: Option<String>,
    pub message: Option<String>,
    pub opened_at: String,
    /// When the waiting hook gives up.
    pub wait_until: String,
    pub hook_pid: Option<i64>,
}

/// Messages not yet final, by kind and state.
#[derive(Debug, Clone, Serialize)]
pub struct KindCount {
    pub kind: String,
    pub state: String,
    pub count: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct QueueRow {
    pub id: String,
    pub session: String,
    pub sink: String,
    pub kind: String,
    pub state: String,
    pub outcome: Option<String>,
    pub detail: Option<String>,
    #[serde(rename = "for")]
    pub for_attention: Option<String>,
    pub decision: Option<String>,
    /// The first 80 characters of a prompt.
    pub text: Option<String>,
    pub note: Option<String>,
    pub at: Option<String>,
    pub expires_at: Option<String>,
    pub deadline_at: Option<String>,
    pub received_at: String,
    pub done_at: Option<String>,
    /// When the ack reached the receiver; None while it waits (or before there is one).
    pub ack_sent_at: Option<String>,
    /// DECISIONS 40: what its session is doing now ([`Store::session_status`]).
    pub session_status: String,
}

/// DECISIONS 40: a session's status in the page's words: a prompt open on a session no
/// process holds any more is parked; otherwise the last event it sent says whether a turn
/// runs (a turn's end, or only its start, leaves it idle).
pub fn status_word(known: bool, ended: bool, open: bool, last_type: Option<&str>) -> &'static str {
    match (known, open, ended) {
        (false, _, _) => "unknown",
        (_, true, false) => "waiting for you",
        (_, true, true) => "parked",
        (_, false, true) => "ended",
        _ => match last_type {
            None | Some("turn.ended" | "session.started" | "turn.transcript") => "idle",
            Some(_) => "working",
        },
    }
}

/// Filters for `sp queue`.
#[derive(Debug, Clone, Default)]
pub struct QueueFilter {
    /// `<harness>:<id>`, or the id alone.
    pub session: Option<String>,
    /// `queued`, `delivering`, `done`, or an outcome (`delivered`, `expired`, …).
    pub state: Option<String>,
    /// The newest this many (all when None).
    pub limit: Option<usize>,
}

impl Store {
    /// Every sink sp-sync has seen, with its undelivered events and acks.
    pub fn sink_statuses(&self) -> Result<Vec<SinkStatus>> {
        let mut out: Vec<SinkStatus> = self
            .conn
            .prepare(
                "SELECT name, control_paused, events_paused, tier_cap, last_poll_ok_at, last_events_ok_at, \
                   last_error, last_error_at, \
                   (SELECT count(*) FROM events e WHERE e.rowid > s.event_cursor), \
                   (SELECT min(time) FROM events e WHERE e.rowid > s.event_cursor) \
                 FROM sinks s ORDER BY name",
            )?
            .query_map([], |r| {
                Ok(SinkStatus {
                    name: r.get(0)?,
                    control_paused: r.get(1)?,
                    events_paused: r.get(2)?,
                    tier_cap: r.get(3)?,
                    last_poll_ok_at: r.get(4)?,
                    last_events_ok_at: r.get(5)?,
                    last_error: r.get(6)?,
                    last_error_at: r.get(7)?,
                    events_pending: r.get(8)?,
                    events_oldest_at: r.get(9)?,
                    ..Default::default()
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        for s in &mut out {
            let (n, oldest, err) = self.unsent_acks(&s.name)?;
            s.acks_pending = n;
            s.acks_oldest_at = oldest;
            s.acks_last_error = err;
        }
        Ok(out)
    }

    /// Unsent acks of a sink: how many, the oldest `at`, the latest send error.
    pub fn unsent_acks(&self, sink: &str) -> Result<(i64, Option<String>, Option<String>)> {
        Ok(self.conn.query_row(
            "SELECT count(*), min(at), (SELECT last_error FROM acks WHERE sink=?1 AND sent_at IS NULL \
               AND last_error IS NOT NULL ORDER BY at DESC LIMIT 1) \
             FROM acks WHERE sink=?1 AND sent_at IS NULL",
            params![sink],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?)
    }

    /// Events not yet taken by a sink that sp-sync has never contacted: all of them count.
    pub fn event_count(&self) -> Result<(i64, Option<String>)> {
        Ok(self
            .conn
            .query_row("SELECT count(*), min(time) FROM events", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?)
    }

    /// Sessions polled now: not ended, an event within `live_ms`.
    pub fn live_session_rows(&self, live_ms: Millis) -> Result<Vec<LiveSession>> {
        self.conn
            .prepare(
                "SELECT key, harness, session_id, cwd, started_at, last_event_at FROM sessions \
                 WHERE ended_at IS NULL AND last_event_ms >= ?1 ORDER BY last_event_ms DESC",
            )?
            .query_map(params![now_ms() - live_ms], |r| {
                Ok(LiveSession {
                    key: r.get(0)?,
                    harness: r.get(1)?,
                    session_id: r.get(2)?,
                    cwd: r.get(3)?,
                    started_at: r.get(4)?,
                    last_event_at: r.get(5)?,
                    status: String::new(),
                })
            })?
            .collect::<rusqlite::Result<Vec<LiveSession>>>()?
            .into_iter()
            .map(|mut l| {
                l.status = self.session_status(&l.key)?;
                Ok(l)
            })
            .collect()
    }

    /// DECISIONS 40: what session `key` is doing ([`status_word`]), as `sp status` and
    /// `sp queue` say it and the page shows it.
    pub fn session_status(&self, key: &str) -> Result<String> {
        let row: Option<(bool, bool, Option<String>, bool)> = self
            .conn
            .prepare_cached(
                "SELECT s.ended_at IS NOT NULL, \
                   EXISTS (SELECT 1 FROM attention a WHERE a.session_key = s.key AND a.state = 'open'), \
                   (SELECT e.type FROM events e WHERE e.session_key = s.key ORDER BY e.seq DESC LIMIT 1), \
                   s.turn_open <> 0 \
                 FROM sessions s WHERE s.key = ?1",
            )?
            .query_row(params![key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .optional()?;
        Ok(match row {
            // A turn the hooks saw open (DECISIONS 38's turn_open) is working, whatever came last.
            Some((false, false, _, true)) => "working",
            Some((ended, open, last, _)) => status_word(true, ended, open, last.as_deref()),
            None => status_word(false, false, false, None),
        }
        .to_string())
    }

    pub fn open_attention_rows(&self) -> Result<Vec<OpenAttention>> {
        Ok(self
            .conn
            .prepare(
                "SELECT session_key, attention_id, tool, message, opened_at, wait_until_ms, hook_pid \
                 FROM attention WHERE state='open' ORDER BY opened_at",
            )?
            .query_map([], |r| {
                Ok(OpenAttention {
                    session: r.get(0)?,
                    attention_id: r.get(1)?,
                    tool: r.get(2)?,
                    message: r.get(3)?,
                    opened_at: r.get(4)?,
                    wait_until: format_ms(r.get(5)?),
                    hook_pid: r.get(6)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// Messages not yet final, counted by kind and state.
    pub fn pending_message_counts(&self) -> Result<Vec<KindCount>> {
        Ok(self
            .conn
            .prepare("SELECT kind, state, count(*) FROM messages WHERE state<>'done' GROUP BY kind, state ORDER BY kind, state")?
            .query_map([], |r| Ok(KindCount { kind: r.get(0)?, state: r.get(1)?, count: r.get(2)? }))?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// The oldest `received_at` of a message not yet final.
    pub fn oldest_pending_message(&self) -> Result<Option<String>> {
        Ok(self
            .conn
            .query_row(
                "SELECT min(received_at) FROM messages WHERE state<>'done'",
                [],
                |r| r.get(0),
            )
            .optional()?
            .flatten())
    }

    /// The messages, oldest first (the newest `limit` of those matching).
    pub fn queue_rows(&self, f: &QueueFilter) -> Result<Vec<QueueRow>> {
        let outcomes = ["delivered", "expired", "unsupported", "failed"];
        let (state, outcome) = match f.state.as_deref() {
            Some(s) if outcomes.contains(&s) => (None, Some(s)),
            Some(s) => (Some(s), None),
            None => (None, None),
        };
        let limit = f.limit.map(|l| l as i64).unwrap_or(-1);
        let mut rows: Vec<QueueRow> = self
            .conn
            .prepare(
                "SELECT m.id, m.session_key, m.sink, m.kind, m.state, m.outcome, m.detail, m.attention_id, m.decision, \
                   substr(m.text, 1, 80), m.note, m.at, m.expires_at, m.deadline_at, m.received_at, m.done_at, \
                   (SELECT a.sent_at FROM acks a WHERE a.message_id = m.id AND a.sink = m.sink \
                    AND a.outcome NOT IN ('taken', 'progress')) \
                 FROM messages m \
                 WHERE (?1 IS NULL OR m.session_key = ?1 OR substr(m.session_key, instr(m.session_key, ':') + 1) = ?1) \
                   AND (?2 IS NULL OR m.state = ?2) AND (?3 IS NULL OR m.outcome = ?3) \
                 ORDER BY m.received_at DESC, m.id DESC LIMIT ?4",
            )?
            .query_map(params![f.session, state, outcome, limit], |r| {
                Ok(QueueRow {
                    id: r.get(0)?,
                    session: r.get(1)?,
                    sink: r.get(2)?,
                    kind: r.get(3)?,
                    state: r.get(4)?,
                    outcome: r.get(5)?,
                    detail: r.get(6)?,
                    for_attention: r.get(7)?,
                    decision: r.get(8)?,
                    text: r.get(9)?,
                    note: r.get(10)?,
                    at: r.get(11)?,
                    expires_at: r.get(12)?,
                    deadline_at: r.get(13)?,
                    received_at: r.get(14)?,
                    done_at: r.get(15)?,
                    ack_sent_at: r.get(16)?,
                    session_status: String::new(),
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        let mut known = std::collections::HashMap::new();
        for row in &mut rows {
            if !known.contains_key(&row.session) {
                known.insert(row.session.clone(), self.session_status(&row.session)?);
            }
            row.session_status = known[&row.session].clone();
        }
        rows.reverse();
        Ok(rows)
    }
}
