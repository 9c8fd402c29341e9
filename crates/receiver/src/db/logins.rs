//! Page logins: the SHA-256 of each cookie (never the cookie), tied to the login token in use,
//! with the login's CSRF secret (random; it opens nothing without the cookie); and the login
//! attempts allowed per client and overall (limits.rs), counted here so that receivers
//! sharing one database count them together.

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use super::Db;
use crate::limits::{take_login_attempt, LOGIN_ALL, LOGIN_OVERALL, LOGIN_PER_CLIENT};

// The logins' SQL, one text for both stores (pg_small.rs runs it on PostgreSQL).
pub(super) const ADD_LOGIN: &str = "INSERT INTO logins(hash, token_fp, created_ms, last_ms) \
    VALUES (?1, ?2, ?3, ?3) ON CONFLICT(hash) DO UPDATE SET token_fp = excluded.token_fp, \
    created_ms = excluded.created_ms, last_ms = excluded.last_ms, csrf = NULL";
pub(super) const LOGIN_VALID: &str =
    "SELECT 1 FROM logins WHERE hash = ?1 AND token_fp = ?2 AND created_ms > ?3";
pub(super) const REMOVE_LOGIN: &str = "DELETE FROM logins WHERE hash = ?1";
/// A valid login's CSRF secret (NULL until first asked for).
pub(super) const LOGIN_CSRF: &str =
    "SELECT csrf FROM logins WHERE hash = ?1 AND token_fp = ?2 AND created_ms > ?3";
/// The first receiver to ask sets it; any other then reads that one.
pub(super) const SET_CSRF: &str = "UPDATE logins SET csrf = ?2 WHERE hash = ?1 AND csrf IS NULL";
/// Full buckets are forgotten (none stored is a full one), so the table holds only the
/// clients that tried within the last minute.
pub(super) const SWEEP_ATTEMPTS: &str = "DELETE FROM login_attempts WHERE full_ms <= ?1";
pub(super) const ATTEMPT_FULL: &str = "SELECT full_ms FROM login_attempts WHERE key = ?1";
pub(super) const SET_ATTEMPT: &str = "INSERT INTO login_attempts(key, full_ms) VALUES (?1, ?2) \
    ON CONFLICT(key) DO UPDATE SET full_ms = excluded.full_ms";
/// A success gives its attempt back: the bucket is full `?2` ms sooner (never before now).
pub(super) const GIVE_BACK: &str = "UPDATE login_attempts \
    SET full_ms = CASE WHEN full_ms - ?2 > ?3 THEN full_ms - ?2 ELSE ?3 END WHERE key = ?1";

/// The buckets a success gives its attempt back to, and how much sooner each is full (ms).
pub(super) fn give_backs(client: &str) -> [(&str, i64); 2] {
    [
        (client, LOGIN_PER_CLIENT.token_ms()),
        (LOGIN_ALL, LOGIN_OVERALL.token_ms()),
    ]
}

impl Db {
    pub fn add_login(&mut self, hash: &str, token_fp: &str, now_ms: i64) -> rusqlite::Result<()> {
        self.conn
            .execute(ADD_LOGIN, params![hash, token_fp, now_ms])?;
        Ok(())
    }

    /// Whether a login with this cookie hash exists for the current login token and was
    /// made after `since_ms`.
    pub fn login_valid(&self, hash: &str, token_fp: &str, since_ms: i64) -> rusqlite::Result<bool> {
        self.conn
            .query_row(LOGIN_VALID, params![hash, token_fp, since_ms], |_| Ok(()))
            .optional()
            .map(|o| o.is_some())
    }

    pub fn remove_login(&mut self, hash: &str) -> rusqlite::Result<()> {
        self.conn.execute(REMOVE_LOGIN, params![hash])?;
        Ok(())
    }

    /// A valid login's CSRF secret: the one stored, or `fresh` when it has none yet (a
    /// login made before secrets were stored, or never asked for one). `None`: no such
    /// login.
    pub fn login_csrf(
        &mut self,
        hash: &str,
        token_fp: &str,
        since_ms: i64,
        fresh: &str,
    ) -> rusqlite::Result<Option<String>> {
        let read = |db: &Db| -> rusqlite::Result<Option<Option<String>>> {
            db.conn
                .query_row(LOGIN_CSRF, params![hash, token_fp, since_ms], |r| r.get(0))
                .optional()
        };
        match read(self)? {
            None => Ok(None),
            Some(Some(csrf)) => Ok(Some(csrf)),
            Some(None) => {
                self.conn.execute(SET_CSRF, params![hash, fresh])?;
                Ok(read(self)?.flatten())
            }
        }
    }

    /// Takes a login attempt from `client`'s bucket and the overall one; `Err(s)`: none is
    /// allowed for `s` seconds (and none is taken).
    pub fn take_login_attempt(
        &mut self,
        client: &str,
        now_ms: i64,
    ) -> rusqlite::Result<Result<(), u64>> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute(SWEEP_ATTEMPTS, params![now_ms])?;
        let full = |key: &str| -> rusqlite::Result<Option<i64>> {
            tx.query_row(ATTEMPT_FULL, params![key], |r| r.get(0))
                .optional()
        };
        let taken = take_login_attempt(full(client)?, full(LOGIN_ALL)?, now_ms);
        if let Ok((mine, overall)) = taken {
            tx.execute(SET_ATTEMPT, params![client, mine])?;
            tx.execute(SET_ATTEMPT, params![LOGIN_ALL, overall])?;
        }
        tx.commit()?;
        Ok(taken.map(|_| ()))
    }

    /// A login that succeeded gives its attempt back (only guesses count).
    pub fn give_back_login_attempt(&mut self, client: &str, now_ms: i64) -> rusqlite::Result<()> {
        for (key, ms) in give_backs(client) {
            self.conn.execute(GIVE_BACK, params![key, ms, now_ms])?;
        }
        Ok(())
    }
}
