//! The PostgreSQL store (issue 29, DECISIONS 35), as far as it goes: a pool of connections
//! and the migrations of schema.rs in PostgreSQL's dialect (dialect.rs), one receiver
//! migrating while any other starting at the same time waits.
//!
//! The client: the synchronous `postgres` (the same maintainers' wrapper over tokio-postgres)
//! with an r2d2 pool. The store's functions are synchronous and run on tokio's blocking pool
//! (`St::with_db`), as SQLite's do, so one interface serves both stores and the SQLite path
//! is left exactly as it is; the wake between receivers (`LISTEN`) is to use tokio-postgres
//! itself on a connection of its own.
//!
//! Every query of the store runs here now (store.rs: `PgStore` is a `Store`); `--db
//! postgres://` is accepted once the receiver's state holds either store (cli.rs).
#![cfg_attr(not(test), allow(dead_code))]

use std::time::Duration;

use anyhow::{bail, Context};
use r2d2_postgres::r2d2;

use super::dialect;
use super::pg_tls::{PgPool, PgTarget};
use super::schema::MIGRATIONS;

/// Connections one receiver holds at most.
const POOL_MAX: u32 = 8;
/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a call waits for a pooled connection (a free one, or a new one) before it
/// fails: short, so that with the database gone each call (a held poll's look among them)
/// fails in seconds rather than piling up behind the others.
const POOL_WAIT: Duration = Duration::from_secs(3);
/// How long one statement may run (a query waiting on a lock included): a call holds a
/// connection of the pool and one of the receiver's database slots meanwhile.
const STATEMENT_TIMEOUT: &str = "-c statement_timeout=30s";

/// Every connection's limits, unless the URL sets its own: a connect timeout and a
/// statement timeout (every connection a receiver makes, its listener's too).
pub(crate) fn with_limits(config: &mut r2d2_postgres::postgres::Config) {
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_options().is_none() {
        config.options(STATEMENT_TIMEOUT);
    }
}

/// The advisory lock the migrations are made under (any fixed number; "sp-recv" in ASCII).
const MIGRATE_LOCK: i64 = 0x0073_702d_7265_6376;

pub(crate) struct PgStore {
    pub(super) pool: PgPool,
}

impl PgStore {
    /// Connects to `url` (`postgres://user:password@host:port/db`) and brings the schema up
    /// to date; a database written by a newer version is refused, as for SQLite.
    pub fn open(url: &str) -> anyhow::Result<PgStore> {
        let target: PgTarget = url.parse().context("--db")?;
        Self::open_target(target)
    }

    /// [`PgStore::open`] with the URL already read.
    pub fn open_target(mut target: PgTarget) -> anyhow::Result<PgStore> {
        with_limits(&mut target.config);
        target.config.application_name("sp-receiver");
        // One connection first, so that a refusal (TLS above all) is reported at once and as
        // itself rather than after the pool's retries as a time-out.
        target.connect().map_err(|e| {
            anyhow::anyhow!(
                "cannot connect to the PostgreSQL database: {}",
                target.explain(&e)
            )
        })?;
        let pool = r2d2::Pool::builder()
            .max_size(POOL_MAX)
            .min_idle(Some(1))
            .connection_timeout(POOL_WAIT)
            .build(target.manager())
            .context("cannot connect to the PostgreSQL database")?;
        let store = PgStore { pool };
        store.migrate()?;
        Ok(store)
    }

    fn migrate(&self) -> anyhow::Result<()> {
        let latest = MIGRATIONS.len() as i64;
        let mut conn = self.pool.get()?;
        let mut tx = conn.transaction()?;
        // Two receivers starting at once: one migrates, the other waits here and then
        // finds the schema up to date (the lock goes with the transaction).
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK])?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS schema_version(v BIGINT NOT NULL)")?;
        let v: i64 = tx
            .query_opt("SELECT max(v) FROM schema_version", &[])?
            .and_then(|r| r.get::<_, Option<i64>>(0))
            .unwrap_or(0);
        if v > latest {
            bail!("it was written by a newer sp-receiver (schema {v}, this build knows {latest}); install the newer version");
        }
        for (i, m) in MIGRATIONS.iter().enumerate().skip(v as usize) {
            tx.batch_execute(&dialect::postgres(m))
                .with_context(|| format!("migration {} failed", i + 1))?;
        }
        // The page's version shared by every receiver (pg_wake.rs): PostgreSQL's alone.
        tx.batch_execute("CREATE SEQUENCE IF NOT EXISTS sp_page_version")?;
        tx.execute("DELETE FROM schema_version", &[])?;
        tx.execute("INSERT INTO schema_version(v) VALUES ($1)", &[&latest])?;
        tx.commit()?;
        Ok(())
    }

    /// A read the health check makes: the database answers with the schema in place.
    pub fn ping(&self) -> anyhow::Result<()> {
        self.pool
            .get()?
            .query_one("SELECT v FROM schema_version", &[])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::pg_cluster::Cluster;
    use super::*;

    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn migrates_once_and_opening_again_changes_nothing() {
        let pg = Cluster::start();
        let a = PgStore::open(&pg.url()).expect("first open");
        a.ping().expect("ping");
        // No statement may hold a connection and a database slot for ever.
        let limit: String = a
            .pool
            .get()
            .unwrap()
            .query_one("SHOW statement_timeout", &[])
            .unwrap()
            .get(0);
        assert_eq!(limit, "30s");
        pg.psql("INSERT INTO settings(name, value, at_ms) VALUES ('away', 'true', 1)");
        let b = PgStore::open(&pg.url()).expect("second open");
        b.ping().expect("ping");
        assert_eq!(
            pg.psql("SELECT v FROM schema_version"),
            format!("{}\n", MIGRATIONS.len())
        );
        assert_eq!(pg.psql("SELECT value FROM settings"), "true\n");
    }

    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn receivers_starting_at_once_migrate_once() {
        let pg = Cluster::start();
        let url = pg.url();
        let opened: Vec<anyhow::Result<PgStore>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4).map(|_| s.spawn(|| PgStore::open(&url))).collect();
            hs.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        for o in opened {
            o.expect("every receiver opens");
        }
        assert_eq!(pg.psql("SELECT count(*) FROM schema_version"), "1\n");
    }

    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn a_newer_schema_is_refused_saying_so() {
        let pg = Cluster::start();
        drop(PgStore::open(&pg.url()).expect("open"));
        pg.psql("UPDATE schema_version SET v = v + 1");
        let e = PgStore::open(&pg.url()).err().expect("refused");
        assert!(format!("{e:#}").contains("newer sp-receiver"), "{e:#}");
    }

    #[test]
    fn a_database_that_is_not_there_fails_with_the_reason() {
        let e = PgStore::open("postgres://sp@%2Fnonexistent-sp-socket/postgres?connect_timeout=2")
            .err()
            .expect("refused");
        assert!(format!("{e:#}").contains("cannot connect"), "{e:#}");
        let e = PgStore::open("postgres://[bad").err().expect("refused");
        assert!(format!("{e:#}").contains("not a PostgreSQL URL"), "{e:#}");
    }
}
