//! DECISIONS 39: the sessions verified `start`s launched here, so the machine's own caps
//! (`control.start_limit`: running at once, started in an hour) are counted from what it did,
//! whatever a receiver sends.
use super::Store;
use crate::clock::Millis;
use anyhow::Result;
use rusqlite::params;

const HOUR_MS: Millis = 3_600_000;
/// A start being checked and its files fetched has no message yet for this long at most
/// (its files' downloads are bounded well below it).
const HANDLING_MS: Millis = 30 * 60_000;

/// What [`Store::reserve_start`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Reserve {
    /// A slot is held for this start; the caller finishes or drops it.
    Reserved,
    /// This message or this nonce was seen before: ingest settles it (a redelivery or a replay).
    Seen,
    /// Over the cap: how many run and how many started in the last hour.
    Limited { running: u32, last_hour: u32 },
}

impl Store {
    /// Holds a slot for start `id` when the caps allow (at most `running` at once and
    /// `per_hour` in any hour), in one write transaction, so two starts cannot both take
    /// the last slot.
    pub fn reserve_start(
        &mut self,
        id: &str,
        nonce: &str,
        session: &str,
        (max_running, per_hour): (u32, u32),
        now: Millis,
    ) -> Result<Reserve> {
        let tx = self.write_tx()?;
        let seen: i64 = tx
            .prepare_cached(
                "SELECT (SELECT count(*) FROM messages WHERE id = ?1) \
                      + (SELECT count(*) FROM starts WHERE message_id = ?1 OR nonce = ?2)",
            )?
            .query_row(params![id, nonce], |r| r.get(0))?;
        if seen > 0 {
            return Ok(Reserve::Seen);
        }
        // Running: its message is not done yet (its run's end settles it), or it is being
        // handled right now (no message yet, for at most HANDLING_MS: one a crash left
        // mid-start counts no longer).
        let (running, last_hour): (u32, u32) = tx
            .prepare_cached(
                "SELECT coalesce(sum(s.ended_ms IS NULL AND \
                        (m.state <> 'done' OR (m.id IS NULL AND s.at_ms > ?2))), 0), \
                        coalesce(sum(s.at_ms > ?1), 0) \
                 FROM starts s LEFT JOIN messages m ON m.id = s.message_id",
            )?
            .query_row(params![now - HOUR_MS, now - HANDLING_MS], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
        if running >= max_running || last_hour >= per_hour {
            return Ok(Reserve::Limited { running, last_hour });
        }
        tx.prepare_cached(
            "INSERT INTO starts(message_id, nonce, session_key, at_ms) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![id, nonce, session, now])?;
        // Starts older than a day count for nothing.
        tx.prepare_cached("DELETE FROM starts WHERE at_ms < ?1 AND ended_ms IS NOT NULL")?
            .execute(params![now - 24 * HOUR_MS])?;
        tx.commit()?;
        Ok(Reserve::Reserved)
    }

    /// The message the started session is given (its text and the attached files' paths).
    pub fn set_start_text(&mut self, id: &str, text: &str) -> Result<()> {
        self.conn
            .prepare_cached("UPDATE starts SET text = ?2 WHERE message_id = ?1")?
            .execute(params![id, text])?;
        Ok(())
    }

    /// A queued start whose run could not be asked for: its message ends `failed` with
    /// `detail`, its final ack replacing the `taken`, and it stops counting as running.
    pub fn fail_start(&mut self, id: &str, detail: &str, now: Millis) -> Result<()> {
        let tx = self.write_tx()?;
        super::hooks::finish_with_code(&tx, id, "failed", None, Some(detail), now)?;
        tx.prepare_cached(
            "UPDATE starts SET ended_ms = ?2 WHERE message_id = ?1 AND ended_ms IS NULL",
        )?
        .execute(params![id, now])?;
        tx.commit()?;
        Ok(())
    }

    /// Nothing started (its files failed): the slot is given back.
    pub fn drop_start(&mut self, id: &str) -> Result<()> {
        self.conn
            .prepare_cached("DELETE FROM starts WHERE message_id = ?1")?
            .execute(params![id])?;
        Ok(())
    }
}
