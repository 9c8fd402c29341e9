//! Telling the person (`crate::push`): the devices pushed to, and what each push did.

use rusqlite::{params, OptionalExtension};
use serde_json::{json, Value};

use super::{fmt_ms, Db};

// The push devices' and log's SQL, one text for both stores (pg_push.rs runs it on
// PostgreSQL).
pub(super) const DEVICE_KNOWN_COUNT: &str =
    "SELECT EXISTS(SELECT 1 FROM push_devices WHERE id=?1), \
    (SELECT count(*) FROM push_devices)";
pub(super) const SUBSCRIBE: &str =
    "INSERT INTO push_devices(id, endpoint, p256dh, auth, name, created_ms) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(id) DO UPDATE SET p256dh=excluded.p256dh, \
    auth=excluded.auth, name=coalesce(excluded.name, push_devices.name)";
pub(super) const DEVICES: &str =
    "SELECT id, name, quiet, created_ms, endpoint, p256dh, auth, quiet_from, quiet_to, quiet_tz \
    FROM push_devices ORDER BY created_ms";
pub(super) const REMOVE_DEVICE: &str = "DELETE FROM push_devices WHERE id=?1 OR endpoint=?1";
pub(super) const SET_QUIET: &str = "UPDATE push_devices SET quiet=?2 WHERE id=?1";
pub(super) const SET_QUIET_HOURS: &str =
    "UPDATE push_devices SET quiet_from=?2, quiet_to=?3, quiet_tz=?4 WHERE id=?1";
pub(super) const RECORD: &str =
    "INSERT INTO push_log(at_ms, target, what, result) VALUES (?1, ?2, ?3, ?4)";
pub(super) const TRIM_LOG: &str =
    "DELETE FROM push_log WHERE n <= (SELECT max(n) FROM push_log) - ?1";
pub(super) const LOG: &str =
    "SELECT at_ms, target, what, result FROM push_log ORDER BY n DESC LIMIT ?1";
/// One push per notice across receivers sharing the database: the receiver whose insert
/// took sends it.
pub(super) const CLAIM: &str =
    "INSERT INTO push_claims(key, made_ms) VALUES (?1, ?2) ON CONFLICT(key) DO NOTHING";
pub(super) const CLAIMED: &str = "SELECT 1 FROM push_claims WHERE key = ?1";

/// A device's id: the first 16 hex digits of sha256(endpoint).
pub(super) fn device_id(endpoint: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(endpoint.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Quiet hours as stored: all three columns or none.
pub(super) fn quiet_hours(
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

impl Db {
    /// Adds (or renews) a device; `Ok(None)` when [`crate::push::SUBSCRIPTIONS_MAX`] are kept.
    pub fn push_subscribe(
        &self,
        sub: &crate::push::Subscription,
        name: Option<&str>,
        now_ms: i64,
    ) -> rusqlite::Result<Option<String>> {
        let id = device_id(&sub.endpoint);
        let (known, count): (bool, i64) = self
            .conn
            .query_row(DEVICE_KNOWN_COUNT, [&id], |r| Ok((r.get(0)?, r.get(1)?)))?;
        if !known && count >= crate::push::SUBSCRIPTIONS_MAX {
            return Ok(None);
        }
        self.conn.execute(
            SUBSCRIBE,
            params![id, sub.endpoint, sub.p256dh, sub.auth, name, now_ms],
        )?;
        Ok(Some(id))
    }

    /// Every device, oldest first.
    pub fn push_devices(&self) -> rusqlite::Result<Vec<crate::push::Device>> {
        let mut st = self.conn.prepare_cached(DEVICES)?;
        let rows = st.query_map([], |r| {
            Ok(crate::push::Device {
                id: r.get(0)?,
                name: r.get(1)?,
                quiet: r.get::<_, i64>(2)? != 0,
                quiet_hours: quiet_hours(r.get(7)?, r.get(8)?, r.get(9)?),
                created_ms: r.get(3)?,
                sub: crate::push::Subscription {
                    endpoint: r.get(4)?,
                    p256dh: r.get(5)?,
                    auth: r.get(6)?,
                },
            })
        })?;
        rows.collect()
    }

    /// Removes a device by the page's id or by its endpoint; whether one was there.
    pub fn push_remove(&self, id_or_endpoint: &str) -> rusqlite::Result<bool> {
        Ok(self.conn.execute(REMOVE_DEVICE, [id_or_endpoint])? > 0)
    }

    pub fn push_set_quiet(&self, id: &str, quiet: bool) -> rusqlite::Result<bool> {
        Ok(self.conn.execute(SET_QUIET, params![id, quiet as i64])? > 0)
    }

    /// Sets (or, with `None`, ends) a device's quiet hours; whether the device was there.
    pub fn push_set_quiet_hours(
        &self,
        id: &str,
        hours: Option<&crate::push::QuietHours>,
    ) -> rusqlite::Result<bool> {
        Ok(self.conn.execute(
            SET_QUIET_HOURS,
            params![
                id,
                hours.map(|h| h.from),
                hours.map(|h| h.to),
                hours.map(|h| h.tz.as_str())
            ],
        )? > 0)
    }

    /// Keeps one push attempt (the newest [`crate::push::LOG_KEPT`]).
    pub fn push_record(
        &self,
        target: &str,
        what: &str,
        result: &str,
        now_ms: i64,
    ) -> rusqlite::Result<()> {
        self.conn
            .execute(RECORD, params![now_ms, target, what, result])?;
        self.conn.execute(TRIM_LOG, [crate::push::LOG_KEPT])?;
        Ok(())
    }

    /// Claims the push `key` names; true when this claim took (the caller sends it).
    pub fn claim_push(&mut self, key: &str, now_ms: i64) -> rusqlite::Result<bool> {
        Ok(self.conn.execute(CLAIM, params![key, now_ms])? == 1)
    }

    /// Whether the push `key` names was claimed.
    pub fn push_claimed(&mut self, key: &str) -> rusqlite::Result<bool> {
        self.conn
            .query_row(CLAIMED, [key], |_| Ok(()))
            .optional()
            .map(|o| o.is_some())
    }

    /// The newest push attempts first, at most `limit`.
    pub fn push_log(&self, limit: i64) -> rusqlite::Result<Vec<Value>> {
        let mut st = self.conn.prepare_cached(LOG)?;
        let rows = st.query_map([limit], |r| {
            Ok(
                json!({"at": fmt_ms(r.get(0)?), "target": r.get::<_, String>(1)?,
                "what": r.get::<_, String>(2)?, "result": r.get::<_, String>(3)?}),
            )
        })?;
        rows.collect()
    }
}
