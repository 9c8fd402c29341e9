//! Push devices and the push log on PostgreSQL: push.rs's SQL through dialect.rs.
#![cfg_attr(not(test), allow(dead_code))]

use serde_json::{json, Value};

use super::dialect::postgres as q;
use super::fmt_ms;
use super::pg::PgStore;
use super::push::{
    device_id, quiet_hours, CLAIM, CLAIMED, DEVICES, DEVICE_KNOWN_COUNT, LOG, RECORD,
    REMOVE_DEVICE, SET_QUIET, SET_QUIET_HOURS, SUBSCRIBE, TRIM_LOG,
};
use super::store::PushStore;
use crate::push::{Device, QuietHours, Subscription, LOG_KEPT, SUBSCRIPTIONS_MAX};

impl PushStore for PgStore {
    fn push_subscribe(
        &self,
        sub: &Subscription,
        name: Option<&str>,
        now_ms: i64,
    ) -> anyhow::Result<Option<String>> {
        let id = device_id(&sub.endpoint);
        let mut c = self.pool.get()?;
        let mut tx = c.transaction()?;
        let r = tx.query_one(&q(DEVICE_KNOWN_COUNT), &[&id])?;
        let (known, count): (bool, i64) = (r.get(0), r.get(1));
        if !known && count >= SUBSCRIPTIONS_MAX {
            return Ok(None);
        }
        tx.execute(
            &q(SUBSCRIBE),
            &[&id, &sub.endpoint, &sub.p256dh, &sub.auth, &name, &now_ms],
        )?;
        tx.commit()?;
        Ok(Some(id))
    }

    fn push_devices(&self) -> anyhow::Result<Vec<Device>> {
        Ok(self
            .pool
            .get()?
            .query(&q(DEVICES), &[])?
            .iter()
            .map(|r| Device {
                id: r.get(0),
                name: r.get(1),
                quiet: r.get::<_, i64>(2) != 0,
                quiet_hours: quiet_hours(r.get(7), r.get(8), r.get(9)),
                created_ms: r.get(3),
                sub: Subscription {
                    endpoint: r.get(4),
                    p256dh: r.get(5),
                    auth: r.get(6),
                },
            })
            .collect())
    }

    fn push_remove(&self, id_or_endpoint: &str) -> anyhow::Result<bool> {
        Ok(self
            .pool
            .get()?
            .execute(&q(REMOVE_DEVICE), &[&id_or_endpoint])?
            > 0)
    }

    fn push_set_quiet(&self, id: &str, quiet: bool) -> anyhow::Result<bool> {
        Ok(self
            .pool
            .get()?
            .execute(&q(SET_QUIET), &[&id, &i64::from(quiet)])?
            > 0)
    }

    fn push_set_quiet_hours(&self, id: &str, hours: Option<&QuietHours>) -> anyhow::Result<bool> {
        let (from, to) = (
            hours.map(|h| i64::from(h.from)),
            hours.map(|h| i64::from(h.to)),
        );
        Ok(self.pool.get()?.execute(
            &q(SET_QUIET_HOURS),
            &[&id, &from, &to, &hours.map(|h| h.tz.as_str())],
        )? > 0)
    }

    fn push_record(
        &self,
        target: &str,
        what: &str,
        result: &str,
        now_ms: i64,
    ) -> anyhow::Result<()> {
        let mut c = self.pool.get()?;
        let mut tx = c.transaction()?;
        tx.execute(&q(RECORD), &[&now_ms, &target, &what, &result])?;
        tx.execute(&q(TRIM_LOG), &[&LOG_KEPT])?;
        tx.commit()?;
        Ok(())
    }

    fn push_log(&self, limit: i64) -> anyhow::Result<Vec<Value>> {
        Ok(self
            .pool
            .get()?
            .query(&q(LOG), &[&limit])?
            .iter()
            .map(|r| {
                json!({"at": fmt_ms(r.get(0)), "target": r.get::<_, String>(1),
                    "what": r.get::<_, String>(2), "result": r.get::<_, String>(3)})
            })
            .collect())
    }

    fn claim_push(&self, key: &str, now_ms: i64) -> anyhow::Result<bool> {
        Ok(self.pool.get()?.execute(&q(CLAIM), &[&key, &now_ms])? == 1)
    }

    fn push_claimed(&self, key: &str) -> anyhow::Result<bool> {
        Ok(self.pool.get()?.query_opt(&q(CLAIMED), &[&key])?.is_some())
    }
}
