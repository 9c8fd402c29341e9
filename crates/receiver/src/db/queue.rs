//! The control queue and its acks: unsigned messages per session, signed envelopes per
//! machine, each served until its first ack or its expiry.

use serde_json::Value;

use super::driver::{args, Conn, Engine};
use super::fmt_ms;
use super::store::QueueStore;

// The queue's SQL, one text for both stores.
pub(super) const INSERT_MESSAGE: &str =
    "INSERT INTO messages(id, session, kind, body, expires_ms, enqueued_ms, enqueued_at) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
/// A message is served until its final ack; a `taken` (or `progress`) holds it back for
/// 35 minutes, the longest turn plus slack (DECISIONS 38), so a prompt waiting for its
/// session's turn is not served on every poll.
pub(super) const PENDING: &str = "SELECT n, body FROM messages m \
    WHERE session = ?1 AND machine IS NULL \
    AND (expires_ms IS NULL OR expires_ms > ?2) \
    AND (id IS NULL OR NOT EXISTS (SELECT 1 FROM acks a \
    WHERE a.id = m.id AND (a.outcome NOT IN ('taken', 'progress') OR a.received_ms > ?2 - 2100000))) \
    ORDER BY n";
pub(super) const MARK_POLLED: &str = "UPDATE messages SET first_polled_at = ?1 \
    WHERE n = ?2 AND first_polled_at IS NULL";
pub(super) const NEXT_EXPIRY: &str = "SELECT min(expires_ms) FROM messages m \
    WHERE expires_ms > ?1 \
    AND (id IS NULL OR NOT EXISTS (SELECT 1 FROM acks a \
    WHERE a.id = m.id))";
pub(super) const INSERT_ACK: &str =
    "INSERT INTO acks(id, outcome, at, detail, received_ms, received_at, body) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
pub(super) const ACKS: &str = "SELECT body FROM acks ORDER BY n";
/// The first final ack of a message (a `taken` or `progress` is not one).
pub(super) const FIRST_ACK: &str = "SELECT body FROM acks WHERE id = ?1 \
    AND outcome NOT IN ('taken', 'progress') ORDER BY n LIMIT 1";
/// A start's file (DECISIONS 39): kept once per machine and hash, its expiry the later one.
pub(super) const PUT_FILE: &str = "INSERT INTO start_files(machine, sha256, body, expires_ms) \
    VALUES (?1, ?2, ?3, ?4) ON CONFLICT(machine, sha256) DO UPDATE SET \
    expires_ms = CASE WHEN excluded.expires_ms > start_files.expires_ms \
    THEN excluded.expires_ms ELSE start_files.expires_ms END";
pub(super) const GET_FILE: &str =
    "SELECT body FROM start_files WHERE machine = ?1 AND sha256 = ?2 AND expires_ms >= ?3";
pub(super) const MESSAGE_SESSION: &str = "SELECT session FROM messages WHERE id=?1";
pub(super) const INSERT_ENVELOPE: &str =
    "INSERT INTO messages(id, session, kind, body, expires_ms, enqueued_ms, enqueued_at, machine) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
pub(super) const MACHINE_PENDING: &str = "SELECT n, body FROM messages m \
    WHERE machine = ?1 \
    AND (expires_ms IS NULL OR expires_ms > ?2) \
    AND (id IS NULL OR NOT EXISTS (SELECT 1 FROM acks a \
    WHERE a.id = m.id AND (a.outcome NOT IN ('taken', 'progress') OR a.received_ms > ?2 - 2100000))) \
    ORDER BY n";
pub(super) const MESSAGE_MACHINE: &str =
    "SELECT machine FROM messages WHERE id = ?1 ORDER BY n LIMIT 1";

/// A queued message as a poll serves it: its row number (what [`QueueStore::mark_polled`]
/// takes) and its body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Queued {
    pub n: i64,
    pub body: Value,
}

fn queued(c: &mut dyn Conn, sql: &str, key: &str, now_ms: i64) -> anyhow::Result<Vec<Queued>> {
    c.rows(sql, args![key, now_ms])?
        .iter()
        .map(|r| {
            Ok(Queued {
                n: r.int(0)?,
                body: serde_json::from_str(&r.text(1)?).unwrap_or(Value::Null),
            })
        })
        .collect()
}

fn json_of(text: Option<String>) -> Option<Value> {
    text.map(|s| serde_json::from_str(&s).unwrap_or(Value::Null))
}

/// Each change is announced to the other receivers sharing the database, named by the poll
/// key it wakes (the session, or `machine:<id>`).
impl<E: Engine> QueueStore for E {
    fn insert_message(
        &self,
        session: &str,
        value: &Value,
        expires_ms: Option<i64>,
        now_ms: i64,
    ) -> anyhow::Result<()> {
        let id = value.get("id").and_then(Value::as_str);
        let kind = value.get("kind").and_then(Value::as_str);
        let (body, at) = (value.to_string(), fmt_ms(now_ms));
        self.tx(|c| {
            let a = args![id, session, kind, &*body, expires_ms, now_ms, &*at];
            c.execute(INSERT_MESSAGE, a)?;
            c.announce(session)
        })
    }

    /// Keeps a start's file (base64) for `machine` until `expires_ms` (the later expiry when
    /// kept twice).
    fn put_file(
        &self,
        machine: &str,
        sha256: &str,
        body_b64: &str,
        expires_ms: i64,
    ) -> anyhow::Result<()> {
        self.conn(|c| {
            c.execute(PUT_FILE, args![machine, sha256, body_b64, expires_ms])?;
            Ok(())
        })
    }

    /// A start's file (base64) kept for `machine`, unless gone or expired.
    fn file(&self, machine: &str, sha256: &str, now_ms: i64) -> anyhow::Result<Option<String>> {
        self.conn(|c| {
            c.row(GET_FILE, args![machine, sha256, now_ms])?
                .map(|r| r.text(0))
                .transpose()
        })
    }

    /// Queues a signed envelope for `machine`; `session` and `kind` come from the command,
    /// for the page.
    fn insert_envelope(
        &self,
        machine: &str,
        session: &str,
        kind: &str,
        value: &Value,
        expires_ms: i64,
        now_ms: i64,
    ) -> anyhow::Result<()> {
        let id = value.get("id").and_then(Value::as_str);
        let (body, at) = (value.to_string(), fmt_ms(now_ms));
        self.tx(|c| {
            let a = args![id, session, kind, &*body, expires_ms, now_ms, &*at, machine];
            c.execute(INSERT_ENVELOPE, a)?;
            c.announce(&format!("machine:{machine}"))
        })
    }

    /// Messages of `session` neither acked nor expired at `now_ms`, oldest first.
    fn pending(&self, session: &str, now_ms: i64) -> anyhow::Result<Vec<Queued>> {
        self.conn(|c| queued(c, PENDING, session, now_ms))
    }

    /// Envelopes for `machine` neither acked nor expired, oldest first.
    fn machine_pending(&self, machine: &str, now_ms: i64) -> anyhow::Result<Vec<Queued>> {
        self.conn(|c| queued(c, MACHINE_PENDING, machine, now_ms))
    }

    /// Notes that a poll took these messages; returns how many were taken for the first time.
    fn mark_polled(&self, rows: &[i64], now_ms: i64) -> anyhow::Result<usize> {
        let at = fmt_ms(now_ms);
        self.tx(|c| {
            let mut changed = 0;
            for n in rows {
                changed += c.execute(MARK_POLLED, args![&*at, *n])?;
            }
            Ok(usize::try_from(changed)?)
        })
    }

    /// The earliest expiry after `now_ms` among messages not acked (when the page's view of
    /// a message changes by itself).
    fn next_expiry(&self, now_ms: i64) -> anyhow::Result<Option<i64>> {
        self.conn(|c| {
            Ok(c.row(NEXT_EXPIRY, args![now_ms])?
                .map(|r| r.opt_int(0))
                .transpose()?
                .flatten())
        })
    }

    fn insert_acks(&self, acks: &[Value], now_ms: i64) -> anyhow::Result<()> {
        let at = fmt_ms(now_ms);
        self.tx(|c| {
            for a in acks {
                // An ack's fields may carry a NUL (validate.rs lets a detail have one).
                let field = |k: &str| a.get(k).and_then(Value::as_str).map(|s| c.text(s));
                let (id, outcome) = (field("id"), field("outcome"));
                let (when, detail) = (field("at"), field("detail"));
                let body = a.to_string();
                let args = args![
                    id.as_deref().unwrap_or_default(),
                    outcome.as_deref().unwrap_or_default(),
                    when.as_deref().unwrap_or_default(),
                    detail.as_deref(),
                    now_ms,
                    &*at,
                    &*body,
                ];
                c.execute(INSERT_ACK, args)?;
            }
            c.announce("acks")
        })
    }

    /// The first final ack entry for message `id`.
    fn first_ack(&self, id: &str) -> anyhow::Result<Option<Value>> {
        self.conn(|c| {
            Ok(json_of(
                c.row(FIRST_ACK, args![id])?
                    .map(|r| r.text(0))
                    .transpose()?,
            ))
        })
    }

    /// The session a queued message was for (for a failed ack's notification); of several,
    /// the first.
    fn message_session(&self, id: &str) -> anyhow::Result<Option<String>> {
        self.conn(|c| {
            c.row(MESSAGE_SESSION, args![id])?
                .map(|r| r.text(0))
                .transpose()
        })
    }

    /// Which machine a queued message belongs to: `Some(None)` an unsigned message,
    /// `None` no such message.
    fn message_machine(&self, id: &str) -> anyhow::Result<Option<Option<String>>> {
        self.conn(|c| {
            c.row(MESSAGE_MACHINE, args![id])?
                .map(|r| r.opt_text(0))
                .transpose()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_and_acks() {
        let db = super::super::Sqlite::new(super::super::Db::open_memory().unwrap());
        let now = 1_800_000_000_000;
        let m = json!({"id":"01K6ZZZZZZZZZZZZZZZZZZZZZZ","kind":"prompt","text":"hi"});
        db.insert_message("codex:s", &m, Some(now + 1000), now)
            .unwrap();
        let p = db.pending("codex:s", now).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(db.mark_polled(&[p[0].n], now).unwrap(), 1);
        assert_eq!(db.mark_polled(&[p[0].n], now).unwrap(), 0);
        assert!(db.pending("codex:s", now + 1000).unwrap().is_empty());
        assert_eq!(db.next_expiry(now).unwrap(), Some(now + 1000));
        db.insert_acks(
            &[json!({"id":"01K6ZZZZZZZZZZZZZZZZZZZZZZ","outcome":"delivered","at":"x"})],
            now,
        )
        .unwrap();
        assert!(db.pending("codex:s", now).unwrap().is_empty());
        assert_eq!(
            db.first_ack("01K6ZZZZZZZZZZZZZZZZZZZZZZ").unwrap().unwrap()["outcome"],
            "delivered"
        );
        assert_eq!(db.next_expiry(now).unwrap(), None);
        assert_eq!(
            super::super::store::Upkeep::sweep(&db, now + 10_000, 1000).unwrap(),
            2
        );
    }
}
