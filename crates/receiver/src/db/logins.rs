//! Page logins: the SHA-256 of each cookie (never the cookie), tied to the login token in use.

use rusqlite::{params, OptionalExtension};

use super::Db;

impl Db {
    pub fn add_login(&mut self, hash: &str, token_fp: &str, now_ms: i64) -> rusqlite::Result<()> {
        self.conn.execute(
            "INSERT OR REPLACE INTO logins(hash, token_fp, created_ms, last_ms) VALUES (?1, ?2, ?3, ?3)",
            params![hash, token_fp, now_ms],
        )?;
        Ok(())
    }

    /// Whether a login with this cookie hash exists for the current login token and was
    /// made after `since_ms`.
    pub fn login_valid(&self, hash: &str, token_fp: &str, since_ms: i64) -> rusqlite::Result<bool> {
        self.conn
            .query_row(
                "SELECT 1 FROM logins WHERE hash = ?1 AND token_fp = ?2 AND created_ms > ?3",
                params![hash, token_fp, since_ms],
                |_| Ok(()),
            )
            .optional()
            .map(|o| o.is_some())
    }

    pub fn remove_login(&mut self, hash: &str) -> rusqlite::Result<()> {
        self.conn
            .execute("DELETE FROM logins WHERE hash = ?1", params![hash])?;
        Ok(())
    }
}
