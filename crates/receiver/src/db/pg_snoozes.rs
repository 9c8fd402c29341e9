//! "Not now" on PostgreSQL: snoozes.rs's SQL through dialect.rs. A snooze is one transaction
//! that holds the table against other snoozes (not against readers), so the cap holds when
//! two receivers put prompts off at once; each is announced (pg_wake.rs), since every page
//! hides what is put off.
#![cfg_attr(not(test), allow(dead_code))]

use serde_json::{json, Value};

use super::dialect::postgres as q;
use super::fmt_ms;
use super::pg::PgStore;
use super::pg_events::pg_text;
use super::pg_wake::announce;
use super::snoozes::{
    COUNT, DROP_ENDED, NEXT_END, OPEN_ATTENTION, SNOOZED, SNOOZED_ANY_TIME, SNOOZES, UPSERT,
};
use super::store::SnoozeStore;
use super::{Snooze, SNOOZES_MAX};

/// A prompt's session and id as pg_events.rs stored them.
fn names(session: &str, attention_id: &str) -> (String, String) {
    let text = |s: &str| pg_text(Some(s.into())).unwrap_or_default();
    (text(session), text(attention_id))
}

impl SnoozeStore for PgStore {
    fn snooze(
        &self,
        session: &str,
        attention_id: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> anyhow::Result<Snooze> {
        let (session, attention_id) = names(session, attention_id);
        let mut c = self.pool.get()?;
        let mut tx = c.transaction()?;
        // Conflicts with itself and with writers (an event's unsnooze waits), not readers.
        tx.batch_execute("LOCK TABLE snoozes IN SHARE ROW EXCLUSIVE MODE")?;
        tx.execute(&q(DROP_ENDED), &[&now_ms])?;
        if tx
            .query_opt(&q(OPEN_ATTENTION), &[&session, &attention_id])?
            .is_none()
        {
            return Ok(Snooze::NotOpen);
        }
        let live: i64 = tx.query_one(&q(COUNT), &[])?.get(0);
        let again = tx
            .query_opt(&q(SNOOZED_ANY_TIME), &[&session, &attention_id])?
            .is_some();
        if live >= SNOOZES_MAX && !again {
            return Ok(Snooze::Full);
        }
        tx.execute(&q(UPSERT), &[&session, &attention_id, &until_ms, &now_ms])?;
        announce(&mut tx, "snoozes")?;
        tx.commit()?;
        Ok(Snooze::Until(until_ms))
    }

    fn snoozes(&self, now_ms: i64) -> anyhow::Result<Vec<Value>> {
        Ok(self
            .pool
            .get()?
            .query(&q(SNOOZES), &[&now_ms])?
            .iter()
            .map(|r| {
                json!({
                    "session": r.get::<_, String>(0),
                    "for": r.get::<_, String>(1),
                    "until": fmt_ms(r.get(2)),
                })
            })
            .collect())
    }

    fn snoozed(&self, session: &str, attention_id: &str, now_ms: i64) -> anyhow::Result<bool> {
        let (session, attention_id) = names(session, attention_id);
        Ok(self
            .pool
            .get()?
            .query_opt(&q(SNOOZED), &[&session, &attention_id, &now_ms])?
            .is_some())
    }

    fn next_snooze_end(&self, now_ms: i64) -> anyhow::Result<Option<i64>> {
        Ok(self.pool.get()?.query_one(&q(NEXT_END), &[&now_ms])?.get(0))
    }
}
