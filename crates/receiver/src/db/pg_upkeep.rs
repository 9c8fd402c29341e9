//! Upkeep on PostgreSQL: the health check's read, a sweep (mod.rs's statements through
//! dialect.rs, in one transaction) and what the test door reads.
//!
//! A sweep takes no session locks (pg_events.rs): an event for a session idle past the
//! cutoff, stored at the instant of a sweep, may meet it in a deadlock, which PostgreSQL ends
//! by failing one of the two; either is safe to fail (the sender sends the batch again, the
//! next sweep deletes what this one did not).
#![cfg_attr(not(test), allow(dead_code))]

use serde_json::Value;

use super::dialect::postgres as q;
use super::events::EVENTS;
use super::pg::PgStore;
use super::pg_events::bodies;
use super::queue::ACKS;
use super::store::Upkeep;
use super::{SweepArgs, SWEEP};

impl Upkeep for PgStore {
    fn ping(&self) -> anyhow::Result<()> {
        PgStore::ping(self)
    }

    fn sweep(&self, now_ms: i64, keep_ms: i64) -> anyhow::Result<usize> {
        let cutoff = now_ms - keep_ms;
        let mut c = self.pool.get()?;
        let mut tx = c.transaction()?;
        let mut n = 0;
        for (sql, args) in SWEEP {
            n += match args {
                SweepArgs::Cutoff => tx.execute(&q(sql), &[&cutoff])?,
                SweepArgs::CutoffNow => tx.execute(&q(sql), &[&cutoff, &now_ms])?,
                SweepArgs::Now => tx.execute(&q(sql), &[&now_ms])?,
            };
        }
        tx.commit()?;
        Ok(usize::try_from(n)?)
    }

    fn events(&self) -> anyhow::Result<Vec<Value>> {
        bodies(&mut *self.pool.get()?, EVENTS)
    }

    fn acks(&self) -> anyhow::Result<Vec<Value>> {
        bodies(&mut *self.pool.get()?, ACKS)
    }
}
