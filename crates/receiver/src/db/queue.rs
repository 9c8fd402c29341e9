//! The control queue and its acks: unsigned messages per session, signed envelopes per
//! machine, each served until its first ack or its expiry.

use rusqlite::{params, OptionalExtension};
use serde_json::Value;

use super::{fmt_ms, Db};

// The queue's SQL, one text for both stores (pg_queue.rs runs it on PostgreSQL).
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

impl Db {
    pub fn insert_message(
        &mut self,
        session: &str,
        value: &Value,
        expires_ms: Option<i64>,
        now_ms: i64,
    ) -> rusqlite::Result<()> {
        self.conn.execute(
            INSERT_MESSAGE,
            params![
                value.get("id").and_then(Value::as_str),
                session,
                value.get("kind").and_then(Value::as_str),
                value.to_string(),
                expires_ms,
                now_ms,
                fmt_ms(now_ms)
            ],
        )?;
        Ok(())
    }

    /// Messages of `session` neither acked nor expired at `now_ms`, oldest first, with their
    /// row numbers.
    pub fn pending(&self, session: &str, now_ms: i64) -> rusqlite::Result<Vec<(i64, Value)>> {
        let mut st = self.conn.prepare_cached(PENDING)?;
        let rows = st.query_map(params![session, now_ms], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })?;
        rows.map(|r| r.map(|(n, s)| (n, serde_json::from_str(&s).unwrap_or(Value::Null))))
            .collect()
    }

    /// Notes that a poll took these messages; returns how many were taken for the first time.
    pub fn mark_polled(&mut self, rows: &[i64], now_ms: i64) -> rusqlite::Result<usize> {
        let at = fmt_ms(now_ms);
        let mut changed = 0;
        let tx = self.conn.transaction()?;
        for n in rows {
            changed += tx.execute(MARK_POLLED, params![at, n])?;
        }
        tx.commit()?;
        Ok(changed)
    }

    /// The earliest expiry after `now_ms` among messages not acked (when the page's view of
    /// a message changes by itself).
    pub fn next_expiry(&self, now_ms: i64) -> rusqlite::Result<Option<i64>> {
        self.conn
            .query_row(NEXT_EXPIRY, params![now_ms], |r| r.get(0))
    }

    pub fn insert_acks(&mut self, acks: &[Value], now_ms: i64) -> rusqlite::Result<()> {
        let at = fmt_ms(now_ms);
        let tx = self.conn.transaction()?;
        for a in acks {
            tx.execute(
                INSERT_ACK,
                params![
                    a.get("id").and_then(Value::as_str).unwrap_or_default(),
                    a.get("outcome").and_then(Value::as_str).unwrap_or_default(),
                    a.get("at").and_then(Value::as_str).unwrap_or_default(),
                    a.get("detail").and_then(Value::as_str),
                    now_ms,
                    at,
                    a.to_string()
                ],
            )?;
        }
        tx.commit()
    }

    /// Every valid ack entry received, duplicates included, in arrival order.
    pub fn acks(&self) -> rusqlite::Result<Vec<Value>> {
        let mut st = self.conn.prepare_cached(ACKS)?;
        let rows = st.query_map([], |r| r.get::<_, String>(0))?;
        rows.map(|r| r.map(|s| serde_json::from_str(&s).unwrap_or(Value::Null)))
            .collect()
    }

    /// The first final ack entry for message `id`.
    pub fn first_ack(&self, id: &str) -> rusqlite::Result<Option<Value>> {
        self.conn
            .query_row(FIRST_ACK, params![id], |r| r.get::<_, String>(0))
            .optional()
            .map(|o| o.map(|s| serde_json::from_str(&s).unwrap_or(Value::Null)))
    }

    /// The session a queued message was for (for a failed ack's notification).
    pub fn message_session(&self, id: &str) -> rusqlite::Result<Option<String>> {
        self.conn
            .prepare_cached(MESSAGE_SESSION)?
            .query_row([id], |r| r.get(0))
            .optional()
    }

    /// Keeps a start's file (base64) for `machine` until `expires_ms`.
    pub fn put_file(
        &mut self,
        machine: &str,
        sha256: &str,
        body_b64: &str,
        expires_ms: i64,
    ) -> rusqlite::Result<()> {
        self.conn
            .prepare_cached(PUT_FILE)?
            .execute(params![machine, sha256, body_b64, expires_ms])?;
        Ok(())
    }

    /// A start's file (base64) kept for `machine`, unless gone or expired.
    pub fn file(
        &self,
        machine: &str,
        sha256: &str,
        now_ms: i64,
    ) -> rusqlite::Result<Option<String>> {
        self.conn
            .prepare_cached(GET_FILE)?
            .query_row(params![machine, sha256, now_ms], |r| r.get(0))
            .optional()
    }

    /// Queues a signed envelope for `machine`; `session` and `kind` come from the command,
    /// for the page.
    pub fn insert_envelope(
        &mut self,
        machine: &str,
        session: &str,
        kind: &str,
        value: &Value,
        expires_ms: i64,
        now_ms: i64,
    ) -> rusqlite::Result<()> {
        self.conn.execute(
            INSERT_ENVELOPE,
            params![
                value.get("id").and_then(Value::as_str),
                session,
                kind,
                value.to_string(),
                expires_ms,
                now_ms,
                fmt_ms(now_ms),
                machine
            ],
        )?;
        Ok(())
    }

    /// Envelopes for `machine` neither acked nor expired, oldest first, with row numbers.
    pub fn machine_pending(
        &self,
        machine: &str,
        now_ms: i64,
    ) -> rusqlite::Result<Vec<(i64, Value)>> {
        let mut st = self.conn.prepare_cached(MACHINE_PENDING)?;
        let rows = st.query_map(params![machine, now_ms], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })?;
        rows.map(|r| r.map(|(n, s)| (n, serde_json::from_str(&s).unwrap_or(Value::Null))))
            .collect()
    }

    /// Which machine a queued message belongs to: `Some(None)` an unsigned message,
    /// `None` no such message.
    pub fn message_machine(&self, id: &str) -> rusqlite::Result<Option<Option<String>>> {
        self.conn
            .query_row(MESSAGE_MACHINE, params![id], |r| r.get(0))
            .optional()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_and_acks() {
        let mut db = Db::open_memory().unwrap();
        let now = 1_800_000_000_000;
        let m = json!({"id":"01K6ZZZZZZZZZZZZZZZZZZZZZZ","kind":"prompt","text":"hi"});
        db.insert_message("codex:s", &m, Some(now + 1000), now)
            .unwrap();
        let p = db.pending("codex:s", now).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(db.mark_polled(&[p[0].0], now).unwrap(), 1);
        assert_eq!(db.mark_polled(&[p[0].0], now).unwrap(), 0);
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
        assert_eq!(db.sweep(now + 10_000, 1000).unwrap(), 2);
    }
}
