//! Named settings: the person's word from the page (away, DECISIONS 27) and push setup;
//! written once for both stores (driver.rs).

use super::driver::{args, Engine};
use super::store::SettingStore;

// The settings' SQL, one text for both stores.
const AWAY: &str = "SELECT value FROM settings WHERE name='away'";
const SET_AWAY: &str = "INSERT INTO settings(name, value, at_ms) VALUES ('away', ?1, ?2) \
    ON CONFLICT(name) DO UPDATE SET value=excluded.value, at_ms=excluded.at_ms";
const SETTING: &str = "SELECT value FROM settings WHERE name=?1";
const SET_SETTING: &str = "INSERT INTO settings(name, value, at_ms) VALUES (?1, ?2, ?3) \
    ON CONFLICT(name) DO UPDATE SET value=excluded.value, at_ms=excluded.at_ms";
const REMOVE_SETTING: &str = "DELETE FROM settings WHERE name=?1";
const FIRST_SETTING: &str = "INSERT INTO settings(name, value, at_ms) VALUES (?1, ?2, ?3) \
    ON CONFLICT(name) DO NOTHING";

impl<E: Engine> SettingStore for E {
    /// Whether the person said on the page that they are away (false until they do).
    fn away(&self) -> anyhow::Result<bool> {
        self.conn(|c| {
            Ok(c.row(AWAY, args![])?
                .is_some_and(|r| r.text(0).is_ok_and(|v| v == "1")))
        })
    }

    fn set_away(&self, away: bool, now_ms: i64) -> anyhow::Result<()> {
        self.tx(|c| {
            c.execute(SET_AWAY, args![if away { "1" } else { "0" }, now_ms])?;
            // Polls carry the word: the other receivers answer theirs.
            c.announce("settings")
        })
    }

    /// A setting's value (`vapid`, `ntfy_url`, `ntfy_token`, `away`).
    fn setting(&self, name: &str) -> anyhow::Result<Option<String>> {
        self.conn(|c| c.row(SETTING, args![name])?.map(|r| r.text(0)).transpose())
    }

    /// The setting's value, set to `value` first if it has none: the first of several
    /// receivers to set it wins, and every one gets the winner's value.
    fn first_setting(&self, name: &str, value: &str, now_ms: i64) -> anyhow::Result<String> {
        self.conn(|c| {
            c.execute(FIRST_SETTING, args![name, value, now_ms])?;
            c.row(SETTING, args![name])?
                .ok_or_else(|| anyhow::anyhow!("setting {name} gone"))?
                .text(0)
        })
    }

    /// Sets a setting; `None` removes it.
    fn set_setting(&self, name: &str, value: Option<&str>, now_ms: i64) -> anyhow::Result<()> {
        self.tx(|c| {
            match value {
                Some(v) => c.execute(SET_SETTING, args![name, v, now_ms])?,
                None => c.execute(REMOVE_SETTING, args![name])?,
            };
            c.announce("settings")
        })
    }
}
