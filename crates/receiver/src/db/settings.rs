//! Named settings: the person's word from the page (away, DECISIONS 27) and push setup.

use rusqlite::{params, OptionalExtension};

use super::Db;

// The settings' SQL, one text for both stores (pg_small.rs runs it on PostgreSQL).
pub(super) const AWAY: &str = "SELECT value FROM settings WHERE name='away'";
pub(super) const SET_AWAY: &str =
    "INSERT INTO settings(name, value, at_ms) VALUES ('away', ?1, ?2) \
    ON CONFLICT(name) DO UPDATE SET value=excluded.value, at_ms=excluded.at_ms";
pub(super) const SETTING: &str = "SELECT value FROM settings WHERE name=?1";
pub(super) const SET_SETTING: &str =
    "INSERT INTO settings(name, value, at_ms) VALUES (?1, ?2, ?3) \
    ON CONFLICT(name) DO UPDATE SET value=excluded.value, at_ms=excluded.at_ms";
pub(super) const REMOVE_SETTING: &str = "DELETE FROM settings WHERE name=?1";
pub(super) const FIRST_SETTING: &str =
    "INSERT INTO settings(name, value, at_ms) VALUES (?1, ?2, ?3) \
    ON CONFLICT(name) DO NOTHING";

impl Db {
    /// Whether the person said on the page that they are away (false until they do).
    pub fn away(&self) -> rusqlite::Result<bool> {
        Ok(self
            .conn
            .prepare_cached(AWAY)?
            .query_row([], |r| r.get::<_, String>(0))
            .optional()?
            .is_some_and(|v| v == "1"))
    }

    pub fn set_away(&self, away: bool, now_ms: i64) -> rusqlite::Result<()> {
        self.conn
            .prepare_cached(SET_AWAY)?
            .execute(params![if away { "1" } else { "0" }, now_ms])?;
        Ok(())
    }

    /// A setting's value (`vapid`, `ntfy_url`, `ntfy_token`, `away`).
    pub fn setting(&self, name: &str) -> rusqlite::Result<Option<String>> {
        self.conn
            .prepare_cached(SETTING)?
            .query_row([name], |r| r.get(0))
            .optional()
    }

    /// The setting's value, set to `value` first if it has none: the first of several
    /// receivers to set it wins, and every one gets the winner's value.
    pub fn first_setting(&self, name: &str, value: &str, now_ms: i64) -> rusqlite::Result<String> {
        self.conn
            .prepare_cached(FIRST_SETTING)?
            .execute(params![name, value, now_ms])?;
        self.conn
            .prepare_cached(SETTING)?
            .query_row([name], |r| r.get(0))
    }

    /// Sets a setting; `None` removes it.
    pub fn set_setting(
        &self,
        name: &str,
        value: Option<&str>,
        now_ms: i64,
    ) -> rusqlite::Result<()> {
        match value {
            Some(v) => self
                .conn
                .prepare_cached(SET_SETTING)?
                .execute(params![name, v, now_ms])?,
            None => self.conn.prepare_cached(REMOVE_SETTING)?.execute([name])?,
        };
        Ok(())
    }
}
