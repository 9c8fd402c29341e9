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
//! * receivers sharing one database (migration 10, issue 29): `logins.csrf` (each login's
//!   CSRF secret), `machines.seen_ms` (each machine's last contact, written at most every
//!   [`SEEN_EVERY_MS`]), `login_attempts` (the login limits' buckets: when each is full
//!   again; full ones are deleted) and `push_claims` (each push, claimed by the one receiver
//!   that sends it).
//!
//! One module per area: `schema` (migrations), `events` (ingest), `sessions` (the page's
//! view), `queue` (messages and acks), `machines` (pairing and keys), `logins`, `settings`,
//! `push` (devices and the push log); opening the file and upkeep are here.
//!
//! PostgreSQL (issue 29): `dialect` (the same SQL in PostgreSQL's spelling), `pg` (pool and
//! migrations), `pg_tls` (TLS to the database: what the URL asks for, one connector for all),
//! `pg_wake` (`LISTEN`/`NOTIFY` between receivers), `store` (one trait per area, with the
//! tests both stores run; together `Store`), `driver` (the seam an area written once runs
//! on: `queue`, `settings`, `snoozes`, `push`, `logins`, `machines`, `events` and
//! `sessions`, and upkeep, here). The SQL of each area is one text for both where the engines
//! agree (the constants in each area's module; the writes are `ON CONFLICT` upserts both
//! speak).

mod dialect;
mod driver;
mod events;
mod logins;
mod machines;
mod pg;
#[cfg(test)]
pub(crate) mod pg_cluster;
mod pg_queue;
mod pg_tls;
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
use rusqlite::Connection;

use driver::args;

// The areas' rows and arguments, reachable as `db::X` (store.rs and the routes name them so:
// an area's module never needs store.rs's, tests/layers.rs).
pub(crate) use events::{SessionOwner, Stored};
pub(crate) use logins::LoginKey;
#[allow(unused_imports)]
pub(crate) use machines::{Approval, LatestMachine, Machine, NewPairing, Pairing};
pub(crate) use queue::Queued;
pub(crate) use snoozes::{Snooze, SNOOZES_MAX};
/// What `State` holds: either store, behind one interface.
pub(crate) use store::Store;

#[cfg(all(test, feature = "testing"))]
pub(crate) use driver::session_lock;
pub(crate) use pg_wake::{parse as parse_announcement, Announcer, Listener, Wakeup};

/// A machine's last contact is written at most this often (ms): the page shows it to the
/// second, and a busy poller does not write on every request.
pub(crate) const SEEN_EVERY_MS: i64 = 5_000;

/// What a sweep statement is given: the cutoff (`?1`), then the time now (`?2`), or only now.
#[derive(Clone, Copy)]
pub(super) enum SweepArgs {
    Cutoff,
    CutoffNow,
    Now,
}

/// What a sweep forgets, in order, one text for both stores.
pub(super) const SWEEP: [(&str, SweepArgs); 10] = [
    (
        "DELETE FROM events WHERE received_ms < ?1",
        SweepArgs::Cutoff,
    ),
    (
        "DELETE FROM attentions WHERE session_key IN \
        (SELECT key FROM sessions WHERE last_ms < ?1)",
        SweepArgs::Cutoff,
    ),
    ("DELETE FROM sessions WHERE last_ms < ?1", SweepArgs::Cutoff),
    (
        "DELETE FROM messages WHERE enqueued_ms < ?1 AND (expires_ms < ?2 OR id IS NULL \
        OR EXISTS (SELECT 1 FROM acks a WHERE a.id = messages.id))",
        SweepArgs::CutoffNow,
    ),
    ("DELETE FROM acks WHERE received_ms < ?1", SweepArgs::Cutoff),
    (
        "DELETE FROM logins WHERE created_ms < ?1",
        SweepArgs::Cutoff,
    ),
    (
        "DELETE FROM pairings WHERE expires_ms < ?1",
        SweepArgs::Cutoff,
    ),
    (
        "DELETE FROM push_claims WHERE made_ms < ?1",
        SweepArgs::Cutoff,
    ),
    // A start's files, once the start they came with has expired (DECISIONS 39).
    (
        "DELETE FROM start_files WHERE expires_ms < ?1",
        SweepArgs::Now,
    ),
    // A full bucket is no longer limiting anyone.
    (
        "DELETE FROM login_attempts WHERE full_ms <= ?1",
        SweepArgs::Now,
    ),
];

pub(crate) struct Db {
    conn: Connection,
}

impl<E: driver::Engine> store::Upkeep for E {
    fn ping(&self) -> anyhow::Result<()> {
        self.health()
    }

    /// Forgets what is older than `keep_ms`: events and acks received before, sessions
    /// last seen before, messages enqueued before (and no longer pending), logins made
    /// before, pushes claimed before; and login attempt buckets that are full again.
    /// Returns the number of rows removed. No session locks (`Conn::lock_sessions`): an
    /// event of a session idle past the cutoff, stored at the instant of a sweep, may meet
    /// it in a deadlock, which PostgreSQL ends by failing one of the two; either is safe to
    /// fail (the sender sends the batch again, the next sweep deletes what this one did
    /// not).
    fn sweep(&self, now_ms: i64, keep_ms: i64) -> anyhow::Result<usize> {
        let cutoff = now_ms - keep_ms;
        self.tx(|c| {
            let mut n = 0;
            for (sql, a) in SWEEP {
                n += match a {
                    SweepArgs::Cutoff => c.execute(sql, args![cutoff])?,
                    SweepArgs::CutoffNow => c.execute(sql, args![cutoff, now_ms])?,
                    SweepArgs::Now => c.execute(sql, args![now_ms])?,
                };
            }
            Ok(usize::try_from(n)?)
        })
    }

    fn events(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        self.conn(|c| bodies(c, events::EVENTS))
    }

    fn acks(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        self.conn(|c| bodies(c, queue::ACKS))
    }
}

/// The JSON bodies a query returns (what the test door reads).
fn bodies(c: &mut dyn driver::Conn, sql: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    c.rows(sql, args![])?
        .iter()
        .map(|r| Ok(serde_json::from_str(&r.text(0)?).unwrap_or(serde_json::Value::Null)))
        .collect()
}

/// The SQLite store as the receiver holds it: its one connection behind a lock of its own,
/// taken for one call at a time (never the receiver's state lock), so every call is `&self`
/// as on PostgreSQL, whose pool gives each call a connection.
pub(crate) struct Sqlite(std::sync::Mutex<Db>);

impl Sqlite {
    pub fn new(db: Db) -> Sqlite {
        Sqlite(std::sync::Mutex::new(db))
    }

    /// The connection, for one call (a panic in another call leaves plain rows behind).
    pub fn db(&self) -> std::sync::MutexGuard<'_, Db> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An opened store, and for a shared (PostgreSQL) one what the receivers sharing it wake
/// each other with.
pub(crate) struct Opened {
    pub store: Box<dyn store::Store>,
    pub shared: Option<SharedDb>,
}

/// A database other receivers may share: announce changes, listen for theirs.
pub(crate) struct SharedDb {
    pub announcer: Announcer,
    target: pg_tls::PgTarget,
}

impl SharedDb {
    /// Starts listening for the other receivers' announcements (a thread of its own,
    /// stopped when the returned value is dropped).
    pub fn listen(&self, on_wake: impl Fn(Wakeup) + Send + 'static) -> Listener {
        Listener::start(self.target.clone(), on_wake)
    }
}

/// Opens the database `--db` names: a SQLite file (made if missing) or a PostgreSQL
/// database (migrated; it must exist).
pub(crate) fn open(target: &crate::options::Database) -> anyhow::Result<Opened> {
    use crate::options::Database;
    match target {
        Database::File(p) => Ok(Opened {
            store: Box::new(Sqlite::new(Db::open_file(p)?)),
            shared: None,
        }),
        Database::Postgres(url) => pg_tls::PgTarget::parse(url)
            .and_then(open_postgres)
            .with_context(|| format!("database {target}")),
    }
}

fn open_postgres(mut target: pg_tls::PgTarget) -> anyhow::Result<Opened> {
    // The same limits for the pool and the listening connection.
    pg::with_limits(&mut target.config);
    let store = pg::PgStore::open_target(target.clone())?;
    let shared = SharedDb {
        announcer: Announcer {
            pool: store.pool.clone(),
            me: ulid::Ulid::new().to_string(),
        },
        target,
    };
    Ok(Opened {
        store: Box::new(store),
        shared: Some(shared),
    })
}

/// A fresh database of its own on the PostgreSQL cluster whose admin database `admin_url`
/// names (`SP_TEST_RECEIVER_PG`, so that the receiver's suite runs against PostgreSQL too):
/// its URL.
#[cfg(feature = "testing")]
pub(crate) fn new_test_postgres(admin_url: &str) -> anyhow::Result<String> {
    let target = pg_tls::PgTarget::parse(admin_url).context("SP_TEST_RECEIVER_PG")?;
    let name = format!(
        "sp_test_{}",
        ulid::Ulid::new().to_string().to_ascii_lowercase()
    );
    let mut admin = target.connect().map_err(|e| {
        anyhow::anyhow!(
            "SP_TEST_RECEIVER_PG: cannot connect: {}",
            target.explain(&e)
        )
    })?;
    admin.batch_execute(&format!("CREATE DATABASE {name}"))?;
    // The same URL with the database's name in its path.
    let (scheme, rest) = admin_url
        .split_once("://")
        .unwrap_or(("postgres", admin_url));
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, format!("?{q}")),
        None => (rest, String::new()),
    };
    let authority = rest.split_once('/').map_or(rest, |(a, _)| a);
    Ok(format!("{scheme}://{authority}/{name}{query}"))
}

/// A private in-memory SQLite database (the test receiver's default).
pub(crate) fn open_memory() -> anyhow::Result<Opened> {
    Ok(Opened {
        store: Box::new(Sqlite::new(Db::open_memory()?)),
        shared: None,
    })
}

/// Whether `url` is a PostgreSQL URL the client can use, saying what is wrong when not (its
/// `sslrootcert` file is read when the database is opened, where an error hides the
/// password: an argument's error shows the argument).
pub(crate) fn check_postgres_url(url: &str) -> anyhow::Result<()> {
    pg_tls::check_url(url)
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
}
