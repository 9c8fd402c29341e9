//! The one place that knows SQL. One SQLite file (`control.db`, DECISIONS 20) shared by any
//! number of short-lived hooks and one sp-sync. Tables and views read plainly in `sqlite3`.
//! Beside it, two small folders let most hook calls skip SQLite: `quiet/` (a marker per live
//! session with nothing pending, [`quiet`]) and `spool/` (turn ends a Stop recorded without
//! the database, [`spool`]).
mod api;
pub(crate) mod away;
mod grants;
mod hooks;
pub mod quiet;
mod runs;
mod schema;
pub mod spool;
pub mod starts;
pub(crate) mod status;
mod sync;
pub(crate) mod trust;

pub use api::{ApiGrantReply, ApiMessage, ApiSession, API_ATTENTION_OPEN};
pub use grants::{matcher as grant_matcher, Grant, GrantRow, NewGrant, GRANT_MAX_MS};
pub use hooks::{
    runs_unasked, set_harness_process, set_started_extra, Answer, CancelClaim, PromptClaim,
    SeamState, SessionRef, BLOCK_MAX_CHARS,
};
pub use runs::{NewRun, RunEnd, RunRow, WaitingPrompt, RUNS_WAITING_MAX};
pub use sync::{AckRow, Ingested, ParkedAnswered, SinkState, SweepReport};

use anyhow::{bail, Context, Result};
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use std::path::Path;
use std::time::Duration;

pub use rusqlite;

pub struct Store {
    pub(crate) conn: Connection,
    /// Where the quiet markers of this database's sessions live ([`quiet`]).
    pub(crate) quiet_dir: std::path::PathBuf,
    /// Where Stop hooks spool their turn ends ([`spool`]).
    pub(crate) spool_dir: std::path::PathBuf,
}

/// Opens (creating if needed) the database: folder 0700, file 0600, WAL, `synchronous=NORMAL`,
/// `busy_timeout`, foreign keys, and ordered migrations checked with `PRAGMA user_version`.
/// A database written by a newer version is refused rather than guessed at.
pub fn open(path: &Path, busy_timeout: Duration) -> Result<Store> {
    // DECISIONS 24: the folder private (or refused), the database and its -wal/-shm never
    // a symlink, and at most 0600 (tightened when looser).
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let verb = if dir.exists() { "use" } else { "create" };
        let t = crate::files::private_dir(dir)
            .with_context(|| format!("cannot {verb} state folder {}", dir.display()))?;
        if let Some(t) = t {
            crate::logging::info(&t.0);
        }
    }
    // Never opened here once it exists (see `files::check_existing`: closing a descriptor
    // would drop this process's SQLite locks on it).
    for t in crate::files::prepare_sqlite_file(path).context("cannot use the database")? {
        crate::logging::info(&t.0);
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW,
    )
    .with_context(|| format!("cannot open database {}", path.display()))?;
    set_busy_wait(&conn, busy_timeout)?;
    conn.execute_batch("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")?;
    let mut store = Store {
        conn,
        quiet_dir: quiet::dir_of(path),
        spool_dir: spool::dir_of(path),
    };
    // Several processes may meet a new file at once; switching it to WAL takes a lock that
    // SQLite does not wait for, so a busy answer there is retried within the busy timeout.
    let give_up = std::time::Instant::now() + busy_timeout;
    loop {
        match store.migrate() {
            Ok(()) => return Ok(store),
            Err(e) if is_busy(&e) && std::time::Instant::now() < give_up => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e.context(format!("database {}", path.display()))),
        }
    }
}

/// SQLite settings for a process that opens one connection and exits (a hook): call it
/// first thing in `main`, while the process has one thread and before any connection
/// (`sqlite3_config` works only before SQLite initialises; later it returns SQLITE_MISUSE
/// and changes nothing). Memory statistics off: with them on, every allocation SQLite makes
/// takes a global mutex to count it, and one schema load makes thousands (about a sixth of
/// a PostToolUse hook's instructions, BENCHMARKS.md). Nothing in a hook reads them.
pub fn tune_for_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: a plain configuration call, made once, before SQLite is initialised in
        // this process (the caller's contract above); it takes an int.
        let off: std::os::raw::c_int = 0;
        unsafe {
            rusqlite::ffi::sqlite3_config(rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS, off);
        }
    });
}

/// The longest wait for the write lock asked of any connection of this process.
static BUSY_TIMEOUT_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Waits for a lock another process holds, up to `timeout`. SQLite's own busy handler sleeps
/// up to 100 ms between tries, so under a crowd of hooks a process that has waited long
/// loses the lock to each newcomer and can run out its timeout (the race suite saw
/// `database is locked` with 200 hooks and sp-sync at once); short jittered sleeps keep the
/// waiters' chances even.
fn set_busy_wait(conn: &Connection, timeout: Duration) -> rusqlite::Result<()> {
    BUSY_TIMEOUT_MS.fetch_max(
        timeout.as_millis() as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    conn.busy_handler(Some(busy_wait))
}

fn busy_wait(n: i32) -> bool {
    use std::cell::Cell;
    use std::time::Instant;
    thread_local!(static SINCE: Cell<Option<Instant>> = const { Cell::new(None) });
    let now = Instant::now();
    let since = SINCE.with(|s| {
        if n == 0 || s.get().is_none() {
            s.set(Some(now));
        }
        s.get().unwrap_or(now)
    });
    let timeout = Duration::from_millis(BUSY_TIMEOUT_MS.load(std::sync::atomic::Ordering::Relaxed));
    if now.duration_since(since) >= timeout {
        return false;
    }
    // 1 to 8 ms: a cheap per-call jitter from the clock keeps waiters from moving in step.
    let jitter = (now.duration_since(since).subsec_nanos() ^ std::process::id()) % 4;
    let base = (1 + n as u64 / 4).min(4);
    std::thread::sleep(Duration::from_millis(base + jitter as u64));
    true
}

fn is_busy(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<rusqlite::Error>(),
            Some(rusqlite::Error::SqliteFailure(f, _))
                if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        )
    })
}

impl Store {
    fn user_version(&self) -> Result<i64> {
        Ok(self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))?)
    }

    fn migrate(&mut self) -> Result<()> {
        let latest = schema::MIGRATIONS.len() as i64;
        let v = self.user_version()?;
        if v > latest {
            bail!("it was written by a newer version of sessionpipe-control (schema {v}, this build knows {latest}); install the newer version");
        }
        if v == latest {
            return Ok(());
        }
        // journal_mode cannot change inside a transaction; it persists in the file.
        let mode: String = self
            .conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            bail!("cannot switch the database to WAL (journal_mode is {mode})");
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Another process may have migrated while we waited for the write lock.
        let v: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if v > latest {
            bail!("it was written by a newer version of sessionpipe-control (schema {v}); install the newer version");
        }
        for (i, m) in schema::MIGRATIONS.iter().enumerate().skip(v as usize) {
            tx.execute_batch(m)
                .with_context(|| format!("migration {} failed", i + 1))?;
        }
        tx.pragma_update(None, "user_version", latest)?;
        tx.commit()?;
        Ok(())
    }

    pub fn schema_version(&self) -> Result<i64> {
        self.user_version()
    }

    /// `PRAGMA integrity_check` result ("ok" when healthy).
    pub fn integrity_check(&self) -> Result<String> {
        Ok(self
            .conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))?)
    }

    pub(crate) fn write_tx(&mut self) -> Result<rusqlite::Transaction<'_>> {
        Ok(self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?)
    }

    /// A write transaction that may give the hooks of session `key` work: it removes the
    /// session's quiet marker first, under the write lock and before anything it commits
    /// ([`quiet`]'s invariant). A marker that cannot be removed fails the transaction.
    pub(crate) fn write_tx_unmarking(&mut self, key: &str) -> Result<rusqlite::Transaction<'_>> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        quiet::unmark(&self.quiet_dir, key)?;
        Ok(tx)
    }

    /// Direct access for read-only inspection (tests, `sp status`).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

/// Whether a process with this pid exists (signal 0 probes without sending anything).
pub fn pid_alive(pid: i64) -> bool {
    if pid <= 0 || pid > i32::MAX as i64 {
        return false;
    }
    // SAFETY: kill with signal 0 performs only the existence and permission check.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}
