//! The receiver's storage: one SQLite database, a file for `sp-receiver` (mode 0600, WAL) and
//! a private in-memory one for the test receiver. Both run the same SQL, so the tests of the
//! protocol logic exercise what the binary runs.
//!
//! Tables (read plainly in `sqlite3 receiver.db`):
//!
//! * `events`: every accepted event, in arrival order (`n`); `UNIQUE(harness, session_id, seq)`
//!   is the protocol's dedup key.
//! * `sessions`, `attentions`: what the page shows, kept up to date as events arrive (a
//!   session's fields merged with COALESCE semantics; an attention is open while the later,
//!   by `seq`, of its `attention.needed` / `attention.cleared` is the `needed`).
//! * `messages`: the control queue, in enqueue order (`n`), with the message exactly as it is
//!   served (`body`), its parsed expiry and when a poll first took it.
//! * `acks`: every valid ack entry received, duplicates included.
//! * `logins`: page logins (the SHA-256 of each cookie, never the cookie).
//! * view `queue`: each message with its first ack.
//! * signed control (migration 2): `messages.machine` (set for a signed envelope, which is
//!   served only to that machine's poll; `session` then names the command's session, for the
//!   page), `machines` (paired machines, with the SHA-256 of each machine token, never the
//!   token), `machine_keys` (what each approval carried), `pairings` (codes, their check
//!   digits, and the key and proof the page's passkey produced).
//!
//! * `snoozes` (migration 5): prompts put off with "Not now" (issue 26), until when.
//!
//! One module per area: `schema` (migrations), `events` (ingest), `sessions` (the page's
//! view), `queue` (messages and acks), `machines` (pairing and keys), `logins`, `settings`,
//! `push` (devices and the push log); opening the file and upkeep are here.
//!
//! PostgreSQL (issue 29): `dialect` (the same SQL in PostgreSQL's spelling), `pg` (pool and
//! migrations), `pg_wake` (`LISTEN`/`NOTIFY` between receivers), `store` (one trait per area,
//! implemented by both stores, with the tests both run; together `Store`, which both are) and
//! its PostgreSQL side in `pg_queue`, `pg_small` (logins, settings), `pg_pairing`, `pg_push`,
//! `pg_events` (ingest and the page's view), `pg_snoozes` and `pg_upkeep` (ping, sweep, what
//! the test door reads). The SQL of each area is one text for both where the engines agree
//! (the constants in each area's module; the writes are `ON CONFLICT` upserts both speak).

mod dialect;
mod events;
mod logins;
mod machines;
mod pg;
#[cfg(test)]
mod pg_cluster;
mod pg_events;
mod pg_pairing;
mod pg_push;
mod pg_queue;
mod pg_small;
mod pg_snoozes;
mod pg_upkeep;
mod pg_wake;
mod push;
mod queue;
mod schema;
mod sessions;
mod settings;
mod snoozes;
mod store;

use std::path::Path;

use anyhow::{bail, Context};
use rusqlite::{params, Connection};

// Reachable as `db::Pairing`, as before the split (what `Db::pairing` returns).
pub(crate) use events::Stored;
#[allow(unused_imports)]
pub(crate) use machines::Pairing;
pub(crate) use snoozes::{Snooze, SNOOZES_MAX};

/// What a sweep forgets, in order, one text for both stores (pg_events.rs): each statement
/// takes the cutoff (`?1`) and, when marked, the time now (`?2`).
pub(super) const SWEEP: [(&str, bool); 7] = [
    ("DELETE FROM events WHERE received_ms < ?1", false),
    (
        "DELETE FROM attentions WHERE session_key IN \
        (SELECT key FROM sessions WHERE last_ms < ?1)",
        false,
    ),
    ("DELETE FROM sessions WHERE last_ms < ?1", false),
    (
        "DELETE FROM messages WHERE enqueued_ms < ?1 AND (expires_ms < ?2 OR id IS NULL \
        OR EXISTS (SELECT 1 FROM acks a WHERE a.id = messages.id))",
        true,
    ),
    ("DELETE FROM acks WHERE received_ms < ?1", false),
    ("DELETE FROM logins WHERE created_ms < ?1", false),
    ("DELETE FROM pairings WHERE expires_ms < ?1", false),
];

pub(crate) struct Db {
    conn: Connection,
}

fn fmt_ms(ms: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    crate::validate::format_ms_timestamp(t)
}

impl Db {
    /// A private database that lives as long as this value (the test receiver).
    pub fn open_memory() -> anyhow::Result<Db> {
        let conn = Connection::open_in_memory().context("opening an in-memory database")?;
        let mut db = Db { conn };
        db.migrate()?;
        Ok(db)
    }

    /// Opens (creating if needed) the database file: folder 0700, file 0600, WAL,
    /// `synchronous=NORMAL`; a database written by a newer version is refused.
    pub fn open_file(path: &Path) -> anyhow::Result<Db> {
        if let Some(dir) = path.parent() {
            spwire::files::create_missing_dir(dir)
                .with_context(|| format!("cannot create the folder {}", dir.display()))?;
        }
        // DECISIONS 24: created without following a symlink, never opened through one, at
        // most 0600 (tightened and logged when looser); its -wal/-shm likewise.
        for t in spwire::files::prepare_sqlite_file(path).context("cannot create the database")? {
            eprintln!("sp-receiver: {}", t.0);
        }
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
                | rusqlite::OpenFlags::SQLITE_OPEN_CREATE
                | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX
                | rusqlite::OpenFlags::SQLITE_OPEN_URI
                | rusqlite::OpenFlags::SQLITE_OPEN_NOFOLLOW,
        )
        .with_context(|| format!("cannot open the database {}", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            bail!(
                "cannot switch {} to WAL (journal_mode is {mode})",
                path.display()
            );
        }
        conn.execute_batch("PRAGMA synchronous=NORMAL;")?;
        let mut db = Db { conn };
        db.migrate()
            .with_context(|| format!("database {}", path.display()))?;
        Ok(db)
    }

    /// A read the health check makes: the database answers (schema there, file readable).
    pub fn ping(&self) -> rusqlite::Result<()> {
        self.conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))
    }

    /// Forgets what is older than `keep_ms`: events and acks received before, sessions
    /// last seen before, messages enqueued before (and no longer pending), logins made
    /// before. Returns the number of rows removed.
    pub fn sweep(&mut self, now_ms: i64, keep_ms: i64) -> rusqlite::Result<usize> {
        let cutoff = now_ms - keep_ms;
        let tx = self.conn.transaction()?;
        let mut n = 0;
        for (sql, with_now) in SWEEP {
            n += if with_now {
                tx.execute(sql, params![cutoff, now_ms])?
            } else {
                tx.execute(sql, params![cutoff])?
            };
        }
        tx.commit()?;
        Ok(n)
    }
}
