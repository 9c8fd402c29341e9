//! DECISIONS 39: the sessions verified `start`s launched here, so the machine's own caps
//! (`control.start_limit`: running at once, started in an hour) are counted from what it did,
//! whatever a receiver sends.
use super::Store;
use crate::clock::Millis;
use crate::config::StartLimit;
use anyhow::Result;
use rusqlite::params;

const HOUR_MS: Millis = 3_600_000;

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
    /// Holds a slot for start `id` when the caps allow, in one write transaction, so two
    /// starts in one poll cannot both take the last slot.
    pub fn reserve_start(
        &mut self,
        id: &str,
        nonce: &str,
        session: &str,
        limit: StartLimit,
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
        let (running, last_hour): (u32, u32) = tx
            .prepare_cached(
                "SELECT coalesce(sum(ended_ms IS NULL), 0), coalesce(sum(at_ms > ?1), 0) FROM starts",
            )?
            .query_row(params![now - HOUR_MS], |r| Ok((r.get(0)?, r.get(1)?)))?;
        if running >= limit.running || last_hour >= limit.per_hour {
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

    /// The start's run ended (or never began): it stops counting as running; it still
    /// counts in its hour.
    pub fn end_start(&mut self, id: &str, now: Millis) -> Result<()> {
        self.conn
            .prepare_cached(
                "UPDATE starts SET ended_ms = ?2 WHERE message_id = ?1 AND ended_ms IS NULL",
            )?
            .execute(params![id, now])?;
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
