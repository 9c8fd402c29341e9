//! Telling the person (`crate::push`): the devices pushed to, and what each push did.

use serde_json::{json, Value};

use super::driver::{args, Engine};
use super::fmt_ms;
use super::store::PushStore;
use crate::push::{Device, QuietHours, Subscription, LOG_KEPT, SUBSCRIPTIONS_MAX};

// The push devices' and log's SQL, one text for both stores (written once: driver.rs).
const DEVICE_KNOWN_COUNT: &str = "SELECT EXISTS(SELECT 1 FROM push_devices WHERE id=?1), \
    (SELECT count(*) FROM push_devices)";
const SUBSCRIBE: &str = "INSERT INTO push_devices(id, endpoint, p256dh, auth, name, created_ms) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(id) DO UPDATE SET p256dh=excluded.p256dh, \
    auth=excluded.auth, name=coalesce(excluded.name, push_devices.name)";
const DEVICES: &str =
    "SELECT id, name, quiet, created_ms, endpoint, p256dh, auth, quiet_from, quiet_to, quiet_tz \
    FROM push_devices ORDER BY created_ms";
const REMOVE_DEVICE: &str = "DELETE FROM push_devices WHERE id=?1 OR endpoint=?1";
const SET_QUIET: &str = "UPDATE push_devices SET quiet=?2 WHERE id=?1";
const SET_QUIET_HOURS: &str =
    "UPDATE push_devices SET quiet_from=?2, quiet_to=?3, quiet_tz=?4 WHERE id=?1";
const RECORD: &str = "INSERT INTO push_log(at_ms, target, what, result) VALUES (?1, ?2, ?3, ?4)";
const TRIM_LOG: &str = "DELETE FROM push_log WHERE n <= (SELECT max(n) FROM push_log) - ?1";
const LOG: &str = "SELECT at_ms, target, what, result FROM push_log ORDER BY n DESC LIMIT ?1";
/// One push per notice across receivers sharing the database: the receiver whose insert
/// took sends it.
const CLAIM: &str =
    "INSERT INTO push_claims(key, made_ms) VALUES (?1, ?2) ON CONFLICT(key) DO NOTHING";
const CLAIMED: &str = "SELECT 1 FROM push_claims WHERE key = ?1";

/// A device's id: the first 16 hex digits of sha256(endpoint).
fn device_id(endpoint: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(endpoint.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Quiet hours as stored: all three columns or none.
fn quiet_hours(
    from: Option<i64>,
    to: Option<i64>,
    tz: Option<String>,
) -> Option<crate::push::QuietHours> {
    match (from, to, tz) {
        (Some(from), Some(to), Some(tz)) => Some(crate::push::QuietHours {
            from: from.clamp(0, 1439) as u16,
            to: to.clamp(0, 1439) as u16,
            tz,
        }),
        _ => None,
    }
}

impl<E: Engine> PushStore for E {
    /// Adds (or renews) a device; `Ok(None)` when [`SUBSCRIPTIONS_MAX`] are kept.
    fn push_subscribe(
        &self,
        sub: &Subscription,
        name: Option<&str>,
        now_ms: i64,
    ) -> anyhow::Result<Option<String>> {
        let id = device_id(&sub.endpoint);
        self.tx(|c| {
            let r = c
                .row(DEVICE_KNOWN_COUNT, args![&*id])?
                .ok_or_else(|| anyhow::anyhow!("no count of devices"))?;
            let (known, count) = (r.int(0)? != 0, r.int(1)?);
            if !known && count >= SUBSCRIPTIONS_MAX {
                return Ok(None);
            }
            let (endpoint, key, auth) = (&*sub.endpoint, &*sub.p256dh, &*sub.auth);
            c.execute(SUBSCRIBE, args![&*id, endpoint, key, auth, name, now_ms])?;
            Ok(Some(id.clone()))
        })
    }

    /// Every device, oldest first.
    fn push_devices(&self) -> anyhow::Result<Vec<Device>> {
        self.conn(|c| {
            c.rows(DEVICES, args![])?
                .iter()
                .map(|r| {
                    Ok(Device {
                        id: r.text(0)?,
                        name: r.opt_text(1)?,
                        quiet: r.int(2)? != 0,
                        quiet_hours: quiet_hours(r.opt_int(7)?, r.opt_int(8)?, r.opt_text(9)?),
                        created_ms: r.int(3)?,
                        sub: Subscription {
                            endpoint: r.text(4)?,
                            p256dh: r.text(5)?,
                            auth: r.text(6)?,
                        },
                    })
                })
                .collect()
        })
    }

    /// Removes a device by the page's id or by its endpoint; whether one was there.
    fn push_remove(&self, id_or_endpoint: &str) -> anyhow::Result<bool> {
        self.conn(|c| Ok(c.execute(REMOVE_DEVICE, args![id_or_endpoint])? > 0))
    }

    fn push_set_quiet(&self, id: &str, quiet: bool) -> anyhow::Result<bool> {
        self.conn(|c| Ok(c.execute(SET_QUIET, args![id, i64::from(quiet)])? > 0))
    }

    /// Sets (or, with `None`, ends) a device's quiet hours; whether the device was there.
    fn push_set_quiet_hours(&self, id: &str, hours: Option<&QuietHours>) -> anyhow::Result<bool> {
        let (from, to) = (
            hours.map(|h| i64::from(h.from)),
            hours.map(|h| i64::from(h.to)),
        );
        let tz = hours.map(|h| h.tz.as_str());
        self.conn(|c| Ok(c.execute(SET_QUIET_HOURS, args![id, from, to, tz])? > 0))
    }

    /// Keeps one push attempt (the newest [`LOG_KEPT`]).
    fn push_record(
        &self,
        target: &str,
        what: &str,
        result: &str,
        now_ms: i64,
    ) -> anyhow::Result<()> {
        self.tx(|c| {
            c.execute(RECORD, args![now_ms, target, what, result])?;
            c.execute(TRIM_LOG, args![LOG_KEPT])?;
            Ok(())
        })
    }

    /// The newest push attempts first, at most `limit`.
    fn push_log(&self, limit: i64) -> anyhow::Result<Vec<Value>> {
        self.conn(|c| {
            c.rows(LOG, args![limit])?
                .iter()
                .map(|r| {
                    Ok(json!({"at": fmt_ms(r.int(0)?), "target": r.text(1)?,
                        "what": r.text(2)?, "result": r.text(3)?}))
                })
                .collect()
        })
    }

    /// Claims the push `key` names; true when this claim took (the caller sends it).
    fn claim_push(&self, key: &str, now_ms: i64) -> anyhow::Result<bool> {
        self.conn(|c| Ok(c.execute(CLAIM, args![key, now_ms])? == 1))
    }

    /// Whether the push `key` names was claimed.
    fn push_claimed(&self, key: &str) -> anyhow::Result<bool> {
        self.conn(|c| Ok(c.row(CLAIMED, args![key])?.is_some()))
    }
}
