//! The driver seam: what an area's queries ask of an engine, so that each area is written
//! once (`impl<E: Engine> SettingStore for E`) rather than once per engine. A query is one
//! SQL text in SQLite's spelling (PostgreSQL's made by dialect.rs), its arguments
//! ([`Arg`]) and its rows read by column ([`Row`]). The engines differ only where they
//! must: a change is announced to the other receivers sharing a PostgreSQL database
//! ([`Conn::announce`], `NOTIFY`), which no receiver shares with a SQLite file.
//!
//! Areas not yet moved here keep one implementation per engine (store.rs says which).

use anyhow::{anyhow, bail};
use r2d2_postgres::postgres::types::{ToSql, Type};
use r2d2_postgres::postgres::{Error as PgError, GenericClient, Statement};

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
}

// PostgreSQL -----------------------------------------------------------------------------

struct PgConn<'a, C: GenericClient>(&'a mut C);

/// The arguments as the statement's parameters want them (a NULL of each one's type; an
/// integer compared with a 32-bit expression as one, checked).
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

impl<C: GenericClient> PgConn<'_, C> {
    fn run<T>(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
        f: impl FnOnce(&mut C, &Statement, &[&(dyn ToSql + Sync)]) -> Result<T, PgError>,
    ) -> anyhow::Result<T> {
        let stmt = self.0.prepare(&dialect::postgres(sql))?;
        let bound = bind(stmt.params(), args)?;
        let refs: Vec<&(dyn ToSql + Sync)> = bound.iter().map(|b| &**b as _).collect();
        Ok(f(self.0, &stmt, &refs)?)
    }
}

impl<C: GenericClient> Conn for PgConn<'_, C> {
    fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> anyhow::Result<u64> {
        self.run(sql, args, |c, st, a| c.execute(st, a))
    }

    fn rows(&mut self, sql: &str, args: &[Arg<'_>]) -> anyhow::Result<Vec<Row>> {
        let rows = self.run(sql, args, |c, st, a| c.query(st, a))?;
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
        Ok(super::pg_wake::announce(self.0, what)?)
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
        self.0
            .batch_execute(&format!("LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE"))?;
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
        f(&mut PgConn(&mut *c))
    }

    fn tx<T>(&self, f: impl FnOnce(&mut dyn Conn) -> anyhow::Result<T>) -> anyhow::Result<T> {
        let mut c = self.pool.get()?;
        let mut tx = c.transaction()?;
        let out = f(&mut PgConn(&mut tx))?;
        tx.commit()?;
        Ok(out)
    }
}
