//! The driver seam: what an area's queries ask of an engine, so that each area is written
//! once (`impl<E: Engine> SettingStore for E`) rather than once per engine. A query is one
//! SQL text in SQLite's spelling (PostgreSQL's made by dialect.rs), its arguments
//! ([`Arg`]) and its rows read by column ([`Row`]). The engines differ only where they
//! must: a change is announced to the other receivers sharing a PostgreSQL database
//! ([`Conn::announce`], `NOTIFY`), which no receiver shares with a SQLite file; a session's
//! events are stored by one receiver at a time ([`Conn::lock_sessions`]), which SQLite's one
//! writer gives by itself; the page reads one snapshot ([`Engine::snapshot`]); and
//! PostgreSQL's text holds no NUL ([`Conn::text`]).
//!
//! Areas not yet moved here keep one implementation per engine (store.rs says which).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::{anyhow, bail};
use r2d2_postgres::postgres::types::{ToSql, Type};
use r2d2_postgres::postgres::{GenericClient, Statement};

use super::dialect;
use super::pg::PgStore;
use super::Sqlite;

/// A query's argument.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Arg<'a> {
    Int(i64),
    Text(&'a str),
    Null,
}

impl From<i64> for Arg<'_> {
    fn from(v: i64) -> Self {
        Arg::Int(v)
    }
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(v: &'a str) -> Self {
        Arg::Text(v)
    }
}

impl<'a, T: Into<Arg<'a>>> From<Option<T>> for Arg<'a> {
    fn from(v: Option<T>) -> Self {
        v.map_or(Arg::Null, Into::into)
    }
}

/// The arguments of a query, each converted: `args![name, now_ms]`.
macro_rules! args {
    ($($a:expr),* $(,)?) => { &[$($crate::db::driver::Arg::from($a)),*] };
}
pub(crate) use args;

/// One column's value as either engine gives it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Cell {
    Null,
    Int(i64),
    Text(String),
}

/// One row of a result.
#[derive(Debug)]
pub(crate) struct Row(Vec<Cell>);

impl Row {
    fn cell(&self, i: usize) -> anyhow::Result<&Cell> {
        self.0.get(i).ok_or_else(|| anyhow!("no column {i}"))
    }

    /// Column `i` as text (NULL refused).
    pub fn text(&self, i: usize) -> anyhow::Result<String> {
        self.opt_text(i)?
            .ok_or_else(|| anyhow!("column {i} is NULL"))
    }

    /// Column `i` as text or NULL.
    pub fn opt_text(&self, i: usize) -> anyhow::Result<Option<String>> {
        match self.cell(i)? {
            Cell::Null => Ok(None),
            Cell::Text(s) => Ok(Some(s.clone())),
            Cell::Int(_) => bail!("column {i} is an integer, not text"),
        }
    }

    /// Column `i` as an integer (NULL refused).
    pub fn int(&self, i: usize) -> anyhow::Result<i64> {
        self.opt_int(i)?
            .ok_or_else(|| anyhow!("column {i} is NULL"))
    }

    /// Column `i` as an integer or NULL.
    pub fn opt_int(&self, i: usize) -> anyhow::Result<Option<i64>> {
        match self.cell(i)? {
            Cell::Null => Ok(None),
            Cell::Int(v) => Ok(Some(*v)),
            Cell::Text(_) => bail!("column {i} is text, not an integer"),
        }
    }
}

/// A connection, or a transaction on one.
pub(crate) trait Conn {
    /// Runs a statement; the rows it changed.
    fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> anyhow::Result<u64>;
    /// Runs a query; its rows.
    fn rows(&mut self, sql: &str, args: &[Arg<'_>]) -> anyhow::Result<Vec<Row>>;
    /// Tells the other receivers sharing the database that `what` changed, when the
    /// transaction commits (PostgreSQL's `NOTIFY`); nothing on SQLite.
    fn announce(&mut self, what: &str) -> anyhow::Result<()>;

    /// Text as this engine keeps it: PostgreSQL's `text` holds no NUL, which SQLite's does
    /// (an attention's fields come as the machine sent them), so there a NUL is U+FFFD,
    /// stored and asked for alike.
    fn text<'s>(&self, s: &'s str) -> std::borrow::Cow<'s, str>;
    /// Holds `table` against other writers (not readers) until the transaction ends, so a
    /// check and the write it allows are one step for receivers sharing the database
    /// (SQLite: its first write does, one writer at a time).
    fn lock_writes(&mut self, table: &str) -> anyhow::Result<()>;
    /// Holds these sessions (their keys) against other receivers storing their events until
    /// the transaction ends: a session's fields are merged from what was stored before, its
    /// owner checked before its events, an attention follows seq; reads, then writes
    /// (SQLite: its one writer already serialises them).
    fn lock_sessions(&mut self, keys: &[&str]) -> anyhow::Result<()>;
    /// What orders a table's rows as they were first inserted, to break a tie: SQLite's
    /// `rowid`; PostgreSQL keeps no such order for a table without an identity column, so
    /// there the table's key `key` (stable, if not the arrival order).
    fn insertion_order<'k>(&self, key: &'k str) -> &'k str;

    /// The first row of a query, if any.
    fn row(&mut self, sql: &str, args: &[Arg<'_>]) -> anyhow::Result<Option<Row>> {
        Ok(self.rows(sql, args)?.into_iter().next())
    }
}

/// An engine: a connection for one call, or a transaction committed when the call succeeds.
pub(crate) trait Engine: Send + Sync {
    /// A read the health check makes: the database answers, its schema in place.
    fn health(&self) -> anyhow::Result<()>;
    fn conn<T>(&self, f: impl FnOnce(&mut dyn Conn) -> anyhow::Result<T>) -> anyhow::Result<T>;
    fn tx<T>(&self, f: impl FnOnce(&mut dyn Conn) -> anyhow::Result<T>) -> anyhow::Result<T>;
    /// Reads that see one state of the database, whatever other receivers write meanwhile
    /// (the page: a session, its prompts and its messages as of one instant).
    fn snapshot<T>(&self, f: impl FnOnce(&mut dyn Conn) -> anyhow::Result<T>) -> anyhow::Result<T>;
}

// SQLite ---------------------------------------------------------------------------------

struct SqliteConn<'a>(&'a rusqlite::Connection);

impl rusqlite::ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value, ValueRef};
        Ok(match self {
            Arg::Int(v) => ToSqlOutput::Owned(Value::Integer(*v)),
            Arg::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Arg::Null => ToSqlOutput::Owned(Value::Null),
        })
    }
}

impl Conn for SqliteConn<'_> {
    fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> anyhow::Result<u64> {
        let n = self
            .0
            .prepare_cached(sql)?
            .execute(rusqlite::params_from_iter(args))?;
        Ok(n as u64)
    }

    fn rows(&mut self, sql: &str, args: &[Arg<'_>]) -> anyhow::Result<Vec<Row>> {
        use rusqlite::types::ValueRef;
        let mut stmt = self.0.prepare_cached(sql)?;
        let width = stmt.column_count();
        let mut rows = stmt.query(rusqlite::params_from_iter(args))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            let mut cells = Vec::with_capacity(width);
            for i in 0..width {
                cells.push(match r.get_ref(i)? {
                    ValueRef::Null => Cell::Null,
                    ValueRef::Integer(v) => Cell::Int(v),
                    ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Real(_) | ValueRef::Blob(_) => bail!("column {i}: not read here"),
                });
            }
            out.push(Row(cells));
        }
        Ok(out)
    }

    fn announce(&mut self, _what: &str) -> anyhow::Result<()> {
        Ok(())
    }

    fn text<'s>(&self, s: &'s str) -> std::borrow::Cow<'s, str> {
        s.into()
    }

    fn lock_writes(&mut self, _table: &str) -> anyhow::Result<()> {
        Ok(())
    }

    fn lock_sessions(&mut self, _keys: &[&str]) -> anyhow::Result<()> {
        Ok(())
    }

    fn insertion_order<'k>(&self, _key: &'k str) -> &'k str {
        "rowid"
    }
}

impl super::Db {
    /// A transaction on this connection, committed when `f` succeeds (what [`Sqlite`]'s
    /// [`Engine::tx`] runs).
    pub(crate) fn tx<T>(
        &mut self,
        f: impl FnOnce(&mut dyn Conn) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let tx = self.conn.transaction()?;
        let out = f(&mut SqliteConn(&tx))?;
        tx.commit()?;
        Ok(out)
    }
}

impl Engine for Sqlite {
    fn health(&self) -> anyhow::Result<()> {
        Ok(self.db().ping()?)
    }

    fn conn<T>(&self, f: impl FnOnce(&mut dyn Conn) -> anyhow::Result<T>) -> anyhow::Result<T> {
        let db = self.db();
        f(&mut SqliteConn(&db.conn))
    }

    fn tx<T>(&self, f: impl FnOnce(&mut dyn Conn) -> anyhow::Result<T>) -> anyhow::Result<T> {
        self.db().tx(f)
    }

    fn snapshot<T>(&self, f: impl FnOnce(&mut dyn Conn) -> anyhow::Result<T>) -> anyhow::Result<T> {
        // The one connection, held for the whole call: no write comes in between.
        self.conn(f)
    }
}

// PostgreSQL -----------------------------------------------------------------------------

struct PgConn<'a, C: GenericClient> {
    client: &'a mut C,
    /// The statements this call ran, each prepared at its second run (the page runs each
    /// of its queries once per session): what runs once is one round trip ([`typed`]),
    /// what runs again is planned once.
    seen: HashMap<Arc<str>, Option<Statement>>,
}

impl<'a, C: GenericClient> PgConn<'a, C> {
    fn new(client: &'a mut C) -> Self {
        PgConn {
            client,
            seen: HashMap::new(),
        }
    }

    /// `sql` in PostgreSQL's spelling, and its statement if this is not its first run.
    fn statement(&mut self, sql: &str) -> anyhow::Result<(Arc<str>, Option<Statement>)> {
        let q = pg_sql(sql);
        match self.seen.get_mut(&q) {
            None => {
                self.seen.insert(q.clone(), None);
                Ok((q, None))
            }
            Some(Some(st)) => Ok((q, Some(st.clone()))),
            Some(slot) => {
                let st = self.client.prepare(&q)?;
                *slot = Some(st.clone());
                Ok((q, Some(st)))
            }
        }
    }
}

/// `sql` in PostgreSQL's spelling (dialect.rs), rewritten once per text: the queries are a
/// fixed set of constants (bounded all the same).
fn pg_sql(sql: &str) -> Arc<str> {
    const KEPT: usize = 1024;
    static CACHE: OnceLock<Mutex<HashMap<Box<str>, Arc<str>>>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(q) = cache.get(sql) {
        return q.clone();
    }
    let q: Arc<str> = dialect::postgres(sql).into();
    if cache.len() < KEPT {
        cache.insert(sql.into(), q.clone());
    }
    q
}

/// The first number of the two-number advisory locks taken per session ("sp" in ASCII);
/// the second is from the session's key.
const SESSION_LOCK: i32 = 0x7370;

/// The second number of `key`'s lock (two keys sharing one only wait for each other).
fn lock_of(key: &str) -> i32 {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(key.as_bytes());
    i32::from_be_bytes([h[0], h[1], h[2], h[3]])
}

/// The two numbers of `key`'s ingest lock (what a test holds to freeze an ingest).
#[cfg(all(test, feature = "testing"))]
pub(crate) fn session_lock(key: &str) -> (i32, i32) {
    (SESSION_LOCK, lock_of(key))
}

/// A NULL argument, its type left for PostgreSQL to infer from where it stands.
const NULL: Option<&str> = None;

/// The arguments with their types, so that a statement is one round trip (parsed, bound
/// and run at once: nothing prepared first and closed after). An integer is sent as
/// `bigint` (every integer column is one: dialect.rs), text as `text`, and a NULL as
/// `unknown`, whose type PostgreSQL infers as it would for a prepared statement.
fn typed<'a>(args: &'a [Arg<'a>]) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    args.iter()
        .map(|a| -> (&(dyn ToSql + Sync), Type) {
            match a {
                Arg::Int(v) => (v, Type::INT8),
                Arg::Text(s) => (s, Type::TEXT),
                Arg::Null => (&NULL, Type::UNKNOWN),
            }
        })
        .collect()
}

/// The arguments as a prepared statement's parameters want them (a NULL of each one's
/// type; an integer compared with a 32-bit expression as one, checked).
fn bind<'a>(
    types: &[Type],
    args: &'a [Arg<'a>],
) -> anyhow::Result<Vec<Box<dyn ToSql + Sync + 'a>>> {
    if types.len() != args.len() {
        bail!("{} arguments for {} parameters", args.len(), types.len());
    }
    types
        .iter()
        .zip(args)
        .map(|(t, a)| -> anyhow::Result<Box<dyn ToSql + Sync + 'a>> {
            Ok(match (a, t) {
                (Arg::Int(v), &Type::INT4) => Box::new(i32::try_from(*v)?),
                (Arg::Int(v), _) => Box::new(*v),
                (Arg::Text(s), _) => Box::new(*s),
                (Arg::Null, &Type::INT8) => Box::new(None::<i64>),
                (Arg::Null, &Type::INT4) => Box::new(None::<i32>),
                (Arg::Null, _) => Box::new(None::<&str>),
            })
        })
        .collect()
}

impl<C: GenericClient> Conn for PgConn<'_, C> {
    fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> anyhow::Result<u64> {
        Ok(match self.statement(sql)? {
            (q, None) => self.client.execute_typed(&q, &typed(args))?,
            (_, Some(st)) => {
                let bound = bind(st.params(), args)?;
                let refs: Vec<&(dyn ToSql + Sync)> = bound.iter().map(|b| &**b as _).collect();
                self.client.execute(&st, &refs)?
            }
        })
    }

    fn rows(&mut self, sql: &str, args: &[Arg<'_>]) -> anyhow::Result<Vec<Row>> {
        let rows = match self.statement(sql)? {
            (q, None) => self.client.query_typed(&q, &typed(args))?,
            (_, Some(st)) => {
                let bound = bind(st.params(), args)?;
                let refs: Vec<&(dyn ToSql + Sync)> = bound.iter().map(|b| &**b as _).collect();
                self.client.query(&st, &refs)?
            }
        };
        rows.iter()
            .map(|r| {
                let cells = r.columns().iter().enumerate().map(|(i, c)| {
                    let cell = match *c.type_() {
                        Type::INT8 => r.try_get::<_, Option<i64>>(i)?.map(Cell::Int),
                        Type::INT4 => r.try_get::<_, Option<i32>>(i)?.map(|v| Cell::Int(v.into())),
                        Type::BOOL => r
                            .try_get::<_, Option<bool>>(i)?
                            .map(|v| Cell::Int(v.into())),
                        Type::TEXT | Type::VARCHAR => {
                            r.try_get::<_, Option<String>>(i)?.map(Cell::Text)
                        }
                        ref t => bail!("column {i}: type {t} not read here"),
                    };
                    Ok(cell.unwrap_or(Cell::Null))
                });
                Ok(Row(cells.collect::<anyhow::Result<_>>()?))
            })
            .collect()
    }

    fn announce(&mut self, what: &str) -> anyhow::Result<()> {
        Ok(super::pg_wake::announce(self.client, what)?)
    }

    fn text<'s>(&self, s: &'s str) -> std::borrow::Cow<'s, str> {
        if s.contains('\0') {
            s.replace('\0', "\u{fffd}").into()
        } else {
            s.into()
        }
    }

    fn lock_writes(&mut self, table: &str) -> anyhow::Result<()> {
        // Conflicts with itself and with writers, not with readers.
        self.client
            .batch_execute(&format!("LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE"))?;
        Ok(())
    }

    fn lock_sessions(&mut self, keys: &[&str]) -> anyhow::Result<()> {
        // In ascending order, so two batches never wait on each other in a cycle (one
        // statement: `unnest` yields the array in its order).
        let mut locks: Vec<i32> = keys.iter().map(|k| lock_of(k)).collect();
        locks.sort_unstable();
        locks.dedup();
        self.client.execute_typed(
            "SELECT pg_advisory_xact_lock($1, k) FROM unnest($2) AS k",
            &[(&SESSION_LOCK, Type::INT4), (&locks, Type::INT4_ARRAY)],
        )?;
        Ok(())
    }

    fn insertion_order<'k>(&self, key: &'k str) -> &'k str {
        key
    }
}

impl Engine for PgStore {
    fn health(&self) -> anyhow::Result<()> {
        self.ping()
    }

    fn conn<T>(&self, f: impl FnOnce(&mut dyn Conn) -> anyhow::Result<T>) -> anyhow::Result<T> {
        let mut c = self.pool.get()?;
        f(&mut PgConn::new(&mut *c))
    }

    fn tx<T>(&self, f: impl FnOnce(&mut dyn Conn) -> anyhow::Result<T>) -> anyhow::Result<T> {
        let mut c = self.pool.get()?;
        let mut tx = c.transaction()?;
        let out = f(&mut PgConn::new(&mut tx))?;
        tx.commit()?;
        Ok(out)
    }

    fn snapshot<T>(&self, f: impl FnOnce(&mut dyn Conn) -> anyhow::Result<T>) -> anyhow::Result<T> {
        let mut c = self.pool.get()?;
        let mut tx = c
            .build_transaction()
            .isolation_level(r2d2_postgres::postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()?;
        let out = f(&mut PgConn::new(&mut tx))?;
        tx.commit()?;
        Ok(out)
    }
}
