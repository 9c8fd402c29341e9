//! Page logins: the SHA-256 of each cookie (never the cookie), tied to the login token in use.

use rusqlite::{params, OptionalExtension};

use super::Db;

// The logins' SQL, one text for both stores (pg_small.rs runs it on PostgreSQL).
pub(super) const ADD_LOGIN: &str = "INSERT INTO logins(hash, token_fp, created_ms, last_ms) \
    VALUES (?1, ?2, ?3, ?3) ON CONFLICT(hash) DO UPDATE SET token_fp = excluded.token_fp, \
    created_ms = excluded.created_ms, last_ms = excluded.last_ms";
pub(super) const LOGIN_VALID: &str =
    "SELECT 1 FROM logins WHERE hash = ?1 AND token_fp = ?2 AND created_ms > ?3";
pub(super) const REMOVE_LOGIN: &str = "DELETE FROM logins WHERE hash = ?1";

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
}
