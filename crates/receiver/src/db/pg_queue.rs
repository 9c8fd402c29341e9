//! The control queue on PostgreSQL: queue.rs's SQL through dialect.rs; each change
//! announced to every receiver in its own transaction (pg_wake.rs), named by the poll key
//! it wakes (the session, or `machine:<id>`).
#![cfg_attr(not(test), allow(dead_code))]

use r2d2_postgres::postgres::GenericClient;
use serde_json::Value;

use super::dialect::postgres as q;
use super::fmt_ms;
use super::pg::PgStore;
use super::pg_events::pg_text;
use super::pg_wake::announce;
use super::queue::{
    FIRST_ACK, GET_FILE, INSERT_ACK, INSERT_ENVELOPE, INSERT_MESSAGE, MACHINE_PENDING, MARK_POLLED,
    MESSAGE_MACHINE, MESSAGE_SESSION, NEXT_EXPIRY, PENDING, PUT_FILE,
};
use super::store::QueueStore;

fn rows_of(
    c: &mut impl GenericClient,
    sql: &str,
    key: &str,
    now_ms: i64,
) -> anyhow::Result<Vec<(i64, Value)>> {
    Ok(c.query(&q(sql), &[&key, &now_ms])?
        .iter()
        .map(|r| {
            let body: String = r.get(1);
            (r.get(0), serde_json::from_str(&body).unwrap_or(Value::Null))
        })
        .collect())
}

impl QueueStore for PgStore {
    fn insert_message(
        &mut self,
        session: &str,
        value: &Value,
        expires_ms: Option<i64>,
        now_ms: i64,
    ) -> anyhow::Result<()> {
        let mut c = self.pool.get()?;
        let mut tx = c.transaction()?;
        tx.execute(
            &q(INSERT_MESSAGE),
            &[
                &value.get("id").and_then(Value::as_str),
                &session,
                &value.get("kind").and_then(Value::as_str),
                &value.to_string(),
                &expires_ms,
                &now_ms,
                &fmt_ms(now_ms),
            ],
        )?;
        announce(&mut tx, session)?;
        tx.commit()?;
        Ok(())
    }

    fn insert_envelope(
        &mut self,
        machine: &str,
        session: &str,
        kind: &str,
        value: &Value,
        expires_ms: i64,
        now_ms: i64,
    ) -> anyhow::Result<()> {
        let mut c = self.pool.get()?;
        let mut tx = c.transaction()?;
        tx.execute(
            &q(INSERT_ENVELOPE),
            &[
                &value.get("id").and_then(Value::as_str),
                &session,
                &kind,
                &value.to_string(),
                &expires_ms,
                &now_ms,
                &fmt_ms(now_ms),
                &machine,
            ],
        )?;
        announce(&mut tx, &format!("machine:{machine}"))?;
        tx.commit()?;
        Ok(())
    }

    fn pending(&mut self, session: &str, now_ms: i64) -> anyhow::Result<Vec<(i64, Value)>> {
        rows_of(&mut *self.pool.get()?, PENDING, session, now_ms)
    }

    fn machine_pending(&mut self, machine: &str, now_ms: i64) -> anyhow::Result<Vec<(i64, Value)>> {
        rows_of(&mut *self.pool.get()?, MACHINE_PENDING, machine, now_ms)
    }

    fn mark_polled(&mut self, rows: &[i64], now_ms: i64) -> anyhow::Result<usize> {
        let at = fmt_ms(now_ms);
        let mut c = self.pool.get()?;
        let mut tx = c.transaction()?;
        let sql = q(MARK_POLLED);
        let mut changed = 0;
        for n in rows {
            changed += tx.execute(&sql, &[&at, n])?;
        }
        tx.commit()?;
        Ok(usize::try_from(changed)?)
    }

    fn next_expiry(&mut self, now_ms: i64) -> anyhow::Result<Option<i64>> {
        Ok(self
            .pool
            .get()?
            .query_one(&q(NEXT_EXPIRY), &[&now_ms])?
            .get(0))
    }

    fn insert_acks(&mut self, acks: &[Value], now_ms: i64) -> anyhow::Result<()> {
        let at = fmt_ms(now_ms);
        // PostgreSQL's text holds no NUL, which an ack's fields may carry (validate.rs lets a
        // detail have one): stored as pg_events.rs stores such names.
        let str_of =
            |a: &Value, k: &str| pg_text(a.get(k).and_then(Value::as_str).map(str::to_string));
        let mut c = self.pool.get()?;
        let mut tx = c.transaction()?;
        let sql = q(INSERT_ACK);
        for a in acks {
            tx.execute(
                &sql,
                &[
                    &str_of(a, "id").unwrap_or_default(),
                    &str_of(a, "outcome").unwrap_or_default(),
                    &str_of(a, "at").unwrap_or_default(),
                    &str_of(a, "detail"),
                    &now_ms,
                    &at,
                    &a.to_string(),
                ],
            )?;
        }
        announce(&mut tx, "acks")?;
        tx.commit()?;
        Ok(())
    }

    fn first_ack(&mut self, id: &str) -> anyhow::Result<Option<Value>> {
        Ok(self
            .pool
            .get()?
            .query_opt(&q(FIRST_ACK), &[&id])?
            .map(|r| serde_json::from_str(r.get::<_, &str>(0)).unwrap_or(Value::Null)))
    }

    fn message_session(&mut self, id: &str) -> anyhow::Result<Option<String>> {
        // SQLite's query_row takes the first row of several; so does this.
        Ok(self
            .pool
            .get()?
            .query(&q(MESSAGE_SESSION), &[&id])?
            .first()
            .map(|r| r.get(0)))
    }

    fn message_machine(&mut self, id: &str) -> anyhow::Result<Option<Option<String>>> {
        Ok(self
            .pool
            .get()?
            .query_opt(&q(MESSAGE_MACHINE), &[&id])?
            .map(|r| r.get(0)))
    }

    fn put_file(
        &mut self,
        machine: &str,
        sha256: &str,
        body_b64: &str,
        expires_ms: i64,
    ) -> anyhow::Result<()> {
        self.pool
            .get()?
            .execute(&q(PUT_FILE), &[&machine, &sha256, &body_b64, &expires_ms])?;
        Ok(())
    }

    fn file(&mut self, machine: &str, sha256: &str, now_ms: i64) -> anyhow::Result<Option<String>> {
        Ok(self
            .pool
            .get()?
            .query_opt(&q(GET_FILE), &[&machine, &sha256, &now_ms])?
            .map(|r| r.get(0)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use serde_json::json;

    use super::super::pg_cluster::Cluster;
    use super::super::pg_wake::{Listener, Wakeup};
    use super::*;

    /// Two receivers' stores on one database: a message queued through B wakes A's
    /// listener with its poll key, and A then reads it; timed from B's call to A's read.
    #[test]
    fn queued_through_one_store_wakes_and_is_read_through_another() {
        let Some(pg) = Cluster::start() else {
            return;
        };
        let mut a = PgStore::open(&pg.url()).unwrap();
        let mut b = PgStore::open(&pg.url()).unwrap();
        let (tx, rx) = mpsc::channel();
        let _l = Listener::start(pg.url().parse().unwrap(), move |w| {
            let _ = tx.send(w);
        });
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            Wakeup::Connected
        );
        let now = 1_800_000_000_000;
        let mut took: Vec<Duration> = (0..200)
            .map(|i| {
                let session = format!("codex:s{i}");
                let t0 = Instant::now();
                b.insert_message(&session, &json!({"id": format!("m{i}")}), None, now)
                    .unwrap();
                loop {
                    match rx.recv_timeout(Duration::from_secs(10)).unwrap() {
                        Wakeup::Notified(k) if k == session => break,
                        _ => {}
                    }
                }
                let p = a.pending(&session, now).unwrap();
                assert_eq!(p.len(), 1);
                assert_eq!(p[0].1["id"], format!("m{i}"));
                t0.elapsed()
            })
            .collect();
        took.sort();
        let (p50, p99) = (took[100], took[197]);
        eprintln!("pg: queued through B to read through A, p50 {p50:?}, p99 {p99:?} (200)");
        assert!(p50 < Duration::from_millis(50), "p50 {p50:?}");

        // Acks through A are B's to read, and a signed envelope wakes its machine's key.
        a.insert_acks(
            &[json!({"id": "m0", "outcome": "delivered", "at": "x"})],
            now,
        )
        .unwrap();
        assert_eq!(b.first_ack("m0").unwrap().unwrap()["outcome"], "delivered");
        b.insert_envelope(
            "m1",
            "codex:s0",
            "prompt",
            &json!({"id": "E"}),
            now + 9,
            now,
        )
        .unwrap();
        while rx.recv_timeout(Duration::from_secs(10)).unwrap()
            != Wakeup::Notified("machine:m1".into())
        {}
        assert_eq!(a.machine_pending("m1", now).unwrap().len(), 1);
    }
}
