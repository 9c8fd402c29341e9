//! Logins on PostgreSQL: logins.rs's SQL through dialect.rs. Login attempts are taken under an advisory lock, so two receivers never take the same one.
#![cfg_attr(not(test), allow(dead_code))]

use r2d2_postgres::postgres::Client;

use super::dialect::postgres as q;
use super::logins::{
    give_backs, ADD_LOGIN, ATTEMPT_FULL, GIVE_BACK, LOGIN_CSRF, LOGIN_VALID, REMOVE_LOGIN,
    SET_ATTEMPT, SET_CSRF, SWEEP_ATTEMPTS,
};
use super::pg::PgStore;
use super::store::LoginStore;
use crate::limits::{take_login_attempt, LOGIN_ALL};

/// The advisory lock login attempts are taken under (any fixed number; "sp-login" in ASCII).
const ATTEMPTS_LOCK: i64 = 0x7370_2d6c_6f67_696e;

impl LoginStore for PgStore {
    fn add_login(&self, hash: &str, token_fp: &str, now_ms: i64) -> anyhow::Result<()> {
        self.pool
            .get()?
            .execute(&q(ADD_LOGIN), &[&hash, &token_fp, &now_ms])?;
        Ok(())
    }

    fn login_valid(&self, hash: &str, token_fp: &str, since_ms: i64) -> anyhow::Result<bool> {
        Ok(self
            .pool
            .get()?
            .query_opt(&q(LOGIN_VALID), &[&hash, &token_fp, &since_ms])?
            .is_some())
    }

    fn remove_login(&self, hash: &str) -> anyhow::Result<()> {
        self.pool.get()?.execute(&q(REMOVE_LOGIN), &[&hash])?;
        Ok(())
    }

    fn login_csrf(
        &self,
        hash: &str,
        token_fp: &str,
        since_ms: i64,
        fresh: &str,
    ) -> anyhow::Result<Option<String>> {
        let mut c = self.pool.get()?;
        let read = |c: &mut Client| -> anyhow::Result<Option<Option<String>>> {
            Ok(c.query_opt(&q(LOGIN_CSRF), &[&hash, &token_fp, &since_ms])?
                .map(|r| r.get(0)))
        };
        match read(&mut c)? {
            None => Ok(None),
            Some(Some(csrf)) => Ok(Some(csrf)),
            Some(None) => {
                c.execute(&q(SET_CSRF), &[&hash, &fresh])?;
                Ok(read(&mut c)?.flatten())
            }
        }
    }

    fn take_login_attempt(&self, client: &str, now_ms: i64) -> anyhow::Result<Result<(), u64>> {
        let mut c = self.pool.get()?;
        let mut tx = c.transaction()?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&ATTEMPTS_LOCK])?;
        tx.execute(&q(SWEEP_ATTEMPTS), &[&now_ms])?;
        let mut full = |key: &str| -> anyhow::Result<Option<i64>> {
            Ok(tx.query_opt(&q(ATTEMPT_FULL), &[&key])?.map(|r| r.get(0)))
        };
        let (mine, overall) = (full(client)?, full(LOGIN_ALL)?);
        let taken = take_login_attempt(mine, overall, now_ms);
        if let Ok((mine, overall)) = taken {
            tx.execute(&q(SET_ATTEMPT), &[&client, &mine])?;
            tx.execute(&q(SET_ATTEMPT), &[&LOGIN_ALL, &overall])?;
        }
        tx.commit()?;
        Ok(taken.map(|_| ()))
    }

    fn give_back_login_attempt(&self, client: &str, now_ms: i64) -> anyhow::Result<()> {
        let mut c = self.pool.get()?;
        for (key, ms) in give_backs(client) {
            c.execute(&q(GIVE_BACK), &[&key, &ms, &now_ms])?;
        }
        Ok(())
    }
}
