//! Logins and settings on PostgreSQL: logins.rs's and settings.rs's SQL through dialect.rs.
//! A setting changed through one receiver is announced (pg_wake.rs), since polls carry it.
#![cfg_attr(not(test), allow(dead_code))]

use super::dialect::postgres as q;
use super::logins::{ADD_LOGIN, LOGIN_VALID, REMOVE_LOGIN};
use super::pg::PgStore;
use super::pg_wake::announce;
use super::settings::{AWAY, FIRST_SETTING, REMOVE_SETTING, SETTING, SET_AWAY, SET_SETTING};
use super::store::{LoginStore, SettingStore};

impl LoginStore for PgStore {
    fn add_login(&mut self, hash: &str, token_fp: &str, now_ms: i64) -> anyhow::Result<()> {
        self.pool
            .get()?
            .execute(&q(ADD_LOGIN), &[&hash, &token_fp, &now_ms])?;
        Ok(())
    }

    fn login_valid(&mut self, hash: &str, token_fp: &str, since_ms: i64) -> anyhow::Result<bool> {
        Ok(self
            .pool
            .get()?
            .query_opt(&q(LOGIN_VALID), &[&hash, &token_fp, &since_ms])?
            .is_some())
    }

    fn remove_login(&mut self, hash: &str) -> anyhow::Result<()> {
        self.pool.get()?.execute(&q(REMOVE_LOGIN), &[&hash])?;
        Ok(())
    }
}

impl SettingStore for PgStore {
    fn away(&mut self) -> anyhow::Result<bool> {
        Ok(self
            .pool
            .get()?
            .query_opt(&q(AWAY), &[])?
            .is_some_and(|r| r.get::<_, &str>(0) == "1"))
    }

    fn set_away(&mut self, away: bool, now_ms: i64) -> anyhow::Result<()> {
        let mut c = self.pool.get()?;
        let mut tx = c.transaction()?;
        tx.execute(&q(SET_AWAY), &[&if away { "1" } else { "0" }, &now_ms])?;
        announce(&mut tx, "settings")?;
        tx.commit()?;
        Ok(())
    }

    fn setting(&mut self, name: &str) -> anyhow::Result<Option<String>> {
        Ok(self
            .pool
            .get()?
            .query_opt(&q(SETTING), &[&name])?
            .map(|r| r.get(0)))
    }

    fn first_setting(&mut self, name: &str, value: &str, now_ms: i64) -> anyhow::Result<String> {
        let mut c = self.pool.get()?;
        c.execute(&q(FIRST_SETTING), &[&name, &value, &now_ms])?;
        Ok(c.query_one(&q(SETTING), &[&name])?.get(0))
    }

    fn set_setting(&mut self, name: &str, value: Option<&str>, now_ms: i64) -> anyhow::Result<()> {
        let mut c = self.pool.get()?;
        let mut tx = c.transaction()?;
        match value {
            Some(v) => tx.execute(&q(SET_SETTING), &[&name, &v, &now_ms])?,
            None => tx.execute(&q(REMOVE_SETTING), &[&name])?,
        };
        announce(&mut tx, "settings")?;
        tx.commit()?;
        Ok(())
    }
}
