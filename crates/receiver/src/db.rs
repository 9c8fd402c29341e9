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

use std::path::Path;

use anyhow::{bail, Context};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde_json::{json, Map, Value};

use super::validate::as_integer;

const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE events(
    n           INTEGER PRIMARY KEY,
    harness     TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    type        TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    received_ms INTEGER NOT NULL,
    received_at TEXT NOT NULL,
    body        TEXT NOT NULL,
    UNIQUE(harness, session_id, seq)
);
CREATE INDEX events_received ON events(received_ms);
CREATE TABLE sessions(
    key         TEXT PRIMARY KEY,
    harness     TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    first_at    TEXT NOT NULL,
    last_ms     INTEGER NOT NULL,
    last_at     TEXT NOT NULL,
    last_type   TEXT NOT NULL,
    last_seq    INTEGER NOT NULL,
    info        TEXT NOT NULL DEFAULT '{}',
    ended       INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE attentions(
    session_key  TEXT NOT NULL,
    attention_id TEXT NOT NULL,
    kind         TEXT,
    tool         TEXT,
    message      TEXT,
    open         INTEGER NOT NULL,
    how          TEXT,
    state_seq    INTEGER NOT NULL,
    needed_at    TEXT,
    cleared_at   TEXT,
    PRIMARY KEY(session_key, attention_id)
);
CREATE TABLE messages(
    n               INTEGER PRIMARY KEY,
    id              TEXT,
    session         TEXT NOT NULL,
    kind            TEXT,
    body            TEXT NOT NULL,
    expires_ms      INTEGER,
    enqueued_ms     INTEGER NOT NULL,
    enqueued_at     TEXT NOT NULL,
    first_polled_at TEXT
);
CREATE INDEX messages_session ON messages(session, n);
CREATE INDEX messages_id ON messages(id);
CREATE TABLE acks(
    n           INTEGER PRIMARY KEY,
    id          TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    at          TEXT NOT NULL,
    detail      TEXT,
    received_ms INTEGER NOT NULL,
    received_at TEXT NOT NULL,
    body        TEXT NOT NULL
);
CREATE INDEX acks_id ON acks(id, n);
CREATE TABLE logins(
    hash       TEXT PRIMARY KEY,
    token_fp   TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    last_ms    INTEGER NOT NULL
);
CREATE VIEW queue AS
    SELECT m.session, m.id, m.kind, m.enqueued_at, m.first_polled_at,
           json_extract(m.body, '$.expires_at') AS expires_at,
           a.outcome, a.detail, a.received_at AS acked_at
    FROM messages m
    LEFT JOIN acks a ON a.n = (SELECT min(n) FROM acks WHERE acks.id = m.id)
    ORDER BY m.n;
"#,
    r#"
ALTER TABLE messages ADD COLUMN machine TEXT;
CREATE INDEX messages_machine ON messages(machine, n);
CREATE TABLE machines(
    id         TEXT PRIMARY KEY,
    name       TEXT,
    token_hash TEXT,
    paired_ms  INTEGER NOT NULL
);
CREATE TABLE machine_keys(
    machine  TEXT NOT NULL,
    id       TEXT NOT NULL,
    alg      INTEGER NOT NULL,
    spki     TEXT NOT NULL,
    added_ms INTEGER NOT NULL,
    PRIMARY KEY(machine, id)
);
CREATE TABLE pairings(
    code         TEXT PRIMARY KEY,
    machine      TEXT NOT NULL,
    check_digits TEXT NOT NULL,
    name         TEXT,
    created_ms   INTEGER NOT NULL,
    expires_ms   INTEGER NOT NULL,
    key          TEXT,
    proof        TEXT,
    paired_ms    INTEGER,
    token_given  INTEGER NOT NULL DEFAULT 0
);
"#,
    // The person's word from the page: away (DECISIONS 27), passed to every machine.
    r#"
CREATE TABLE settings(
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    at_ms INTEGER NOT NULL
);
"#,
    // Telling the person (push.rs): the devices pushed to, and what each push did.
    r#"
CREATE TABLE push_devices(
    id         TEXT PRIMARY KEY,   -- sha256(endpoint), first 16 hex digits: what the page sees
    endpoint   TEXT NOT NULL UNIQUE,
    p256dh     TEXT NOT NULL,
    auth       TEXT NOT NULL,
    name       TEXT,
    quiet      INTEGER NOT NULL DEFAULT 0,
    created_ms INTEGER NOT NULL
);
CREATE TABLE push_log(
    n      INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms  INTEGER NOT NULL,
    target TEXT NOT NULL,
    what   TEXT NOT NULL,
    result TEXT NOT NULL
);
"#,
];

/// Session fields a page shows; merged so an empty or absent field never blanks an earlier one.
const SESSION_FIELDS: &[&str] = &["machine", "cwd", "repo", "branch", "model", "title", "url"];

/// Messages listed per session on the page.
const PAGE_MESSAGES: usize = 20;

/// One pairing (signed control).
pub(crate) struct Pairing {
    pub machine: String,
    pub check: String,
    pub name: Option<String>,
    pub expires_ms: i64,
    /// The key and proof the page's passkey produced (JSON), once approved.
    pub key: Option<String>,
    pub proof: Option<String>,
    pub token_given: bool,
}

pub(crate) struct Db {
    conn: Connection,
}

struct SessionRow {
    key: String,
    harness: String,
    sid: String,
    first_at: String,
    last_at: String,
    last_type: String,
    info: String,
    ended: bool,
}

fn fmt_ms(ms: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    super::validate::format_ms_timestamp(t)
}

/// One message as the page lists it.
fn message_view(
    body: &str,
    status: &str,
    detail: Option<String>,
    acked_at: Option<String>,
) -> Value {
    let mut m: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let mut v = Map::new();
    // A signed envelope: what it says is in its command string.
    if let Some(cmd) = m.get("cmd").and_then(Value::as_str) {
        if let Ok(Value::Object(mut c)) = serde_json::from_str::<Value>(cmd) {
            for k in ["id", "at", "expires_at", "mode"] {
                if let Some(x) = m.get(k) {
                    c.insert(k.into(), x.clone());
                }
            }
            m = Value::Object(c);
            v.insert("signed".into(), true.into());
        }
    }
    for k in [
        "id",
        "kind",
        "text",
        "mode",
        "for",
        "decision",
        "note",
        "at",
        "expires_at",
    ] {
        if let Some(x) = m.get(k) {
            v.insert(k.into(), x.clone());
        }
    }
    v.insert("status".into(), status.into());
    if let Some(d) = detail {
        v.insert("detail".into(), d.into());
    }
    if let Some(a) = acked_at {
        v.insert("acked_at".into(), a.into());
    }
    Value::Object(v)
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
            if !dir.as_os_str().is_empty() && !dir.is_dir() {
                let mut b = std::fs::DirBuilder::new();
                b.recursive(true);
                #[cfg(unix)]
                std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
                b.create(dir)
                    .with_context(|| format!("cannot create the folder {}", dir.display()))?;
            }
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

    fn migrate(&mut self) -> anyhow::Result<()> {
        let latest = MIGRATIONS.len() as i64;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let v: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if v > latest {
            bail!("it was written by a newer sp-receiver (schema {v}, this build knows {latest}); install the newer version");
        }
        for (i, m) in MIGRATIONS.iter().enumerate().skip(v as usize) {
            tx.execute_batch(m)
                .with_context(|| format!("migration {} failed", i + 1))?;
        }
        tx.pragma_update(None, "user_version", latest)?;
        tx.commit()?;
        Ok(())
    }

    // -----------------------------------------------------------------------------------
    // Events
    // -----------------------------------------------------------------------------------

    /// Stores valid events; for each, `true` if new, `false` if its (harness, session, seq)
    /// was already there. One transaction for the batch.
    pub fn insert_events(&mut self, events: &[&Value], now_ms: i64) -> rusqlite::Result<Vec<bool>> {
        let tx = self.conn.transaction()?;
        let mut out = Vec::with_capacity(events.len());
        let now_at = fmt_ms(now_ms);
        for ev in events {
            let harness = ev["harness"]["name"].as_str().unwrap_or_default();
            let sid = ev["session"]["id"].as_str().unwrap_or_default();
            let seq = as_integer(&ev["session"]["seq"]).unwrap_or_default();
            let ty = ev["type"].as_str().unwrap_or_default();
            let n = tx.execute(
                "INSERT OR IGNORE INTO events(harness, session_id, seq, type, event_id, received_ms, received_at, body)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![harness, sid, seq, ty, ev["id"].as_str().unwrap_or_default(), now_ms, now_at, ev.to_string()],
            )?;
            if n == 0 {
                out.push(false);
                continue;
            }
            out.push(true);
            let key = format!("{harness}:{sid}");
            note_session(&tx, &key, harness, sid, seq, ty, ev, now_ms, &now_at)?;
            if matches!(ty, "attention.needed" | "attention.cleared") {
                note_attention(&tx, &key, seq, ty, &ev["data"], &now_at)?;
            }
        }
        tx.commit()?;
        Ok(out)
    }

    /// Every accepted event, in arrival order.
    /// A read the health check makes: the database answers (schema there, file readable).
    pub fn ping(&self) -> rusqlite::Result<()> {
        self.conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))
    }

    pub fn events(&self) -> rusqlite::Result<Vec<Value>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT body FROM events ORDER BY n")?;
        let rows = st.query_map([], |r| r.get::<_, String>(0))?;
        rows.map(|r| r.map(|s| serde_json::from_str(&s).unwrap_or(Value::Null)))
            .collect()
    }

    // -----------------------------------------------------------------------------------
    // Messages and acks
    // -----------------------------------------------------------------------------------

    pub fn insert_message(
        &mut self,
        session: &str,
        value: &Value,
        expires_ms: Option<i64>,
        now_ms: i64,
    ) -> rusqlite::Result<()> {
        self.conn.execute(
            "INSERT INTO messages(id, session, kind, body, expires_ms, enqueued_ms, enqueued_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                value.get("id").and_then(Value::as_str),
                session,
                value.get("kind").and_then(Value::as_str),
                value.to_string(),
                expires_ms,
                now_ms,
                fmt_ms(now_ms)
            ],
        )?;
        Ok(())
    }

    /// Messages of `session` neither acked nor expired at `now_ms`, oldest first, with their
    /// row numbers.
    pub fn pending(&self, session: &str, now_ms: i64) -> rusqlite::Result<Vec<(i64, Value)>> {
        let mut st = self.conn.prepare_cached(
            "SELECT n, body FROM messages m
             WHERE session = ?1 AND machine IS NULL AND (expires_ms IS NULL OR expires_ms > ?2)
               AND (id IS NULL OR NOT EXISTS (SELECT 1 FROM acks a WHERE a.id = m.id))
             ORDER BY n",
        )?;
        let rows = st.query_map(params![session, now_ms], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })?;
        rows.map(|r| r.map(|(n, s)| (n, serde_json::from_str(&s).unwrap_or(Value::Null))))
            .collect()
    }

    /// Notes that a poll took these messages; returns how many were taken for the first time.
    pub fn mark_polled(&mut self, rows: &[i64], now_ms: i64) -> rusqlite::Result<usize> {
        let at = fmt_ms(now_ms);
        let mut changed = 0;
        let tx = self.conn.transaction()?;
        for n in rows {
            changed += tx.execute(
                "UPDATE messages SET first_polled_at = ?1 WHERE n = ?2 AND first_polled_at IS NULL",
                params![at, n],
            )?;
        }
        tx.commit()?;
        Ok(changed)
    }

    /// The earliest expiry after `now_ms` among messages not acked (when the page's view of
    /// a message changes by itself).
    pub fn next_expiry(&self, now_ms: i64) -> rusqlite::Result<Option<i64>> {
        self.conn.query_row(
            "SELECT min(expires_ms) FROM messages m WHERE expires_ms > ?1
               AND (id IS NULL OR NOT EXISTS (SELECT 1 FROM acks a WHERE a.id = m.id))",
            params![now_ms],
            |r| r.get(0),
        )
    }

    pub fn insert_acks(&mut self, acks: &[Value], now_ms: i64) -> rusqlite::Result<()> {
        let at = fmt_ms(now_ms);
        let tx = self.conn.transaction()?;
        for a in acks {
            tx.execute(
                "INSERT INTO acks(id, outcome, at, detail, received_ms, received_at, body)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    a.get("id").and_then(Value::as_str).unwrap_or_default(),
                    a.get("outcome").and_then(Value::as_str).unwrap_or_default(),
                    a.get("at").and_then(Value::as_str).unwrap_or_default(),
                    a.get("detail").and_then(Value::as_str),
                    now_ms,
                    at,
                    a.to_string()
                ],
            )?;
        }
        tx.commit()
    }

    /// Every valid ack entry received, duplicates included, in arrival order.
    pub fn acks(&self) -> rusqlite::Result<Vec<Value>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT body FROM acks ORDER BY n")?;
        let rows = st.query_map([], |r| r.get::<_, String>(0))?;
        rows.map(|r| r.map(|s| serde_json::from_str(&s).unwrap_or(Value::Null)))
            .collect()
    }

    /// The first ack entry for message `id`.
    pub fn first_ack(&self, id: &str) -> rusqlite::Result<Option<Value>> {
        self.conn
            .query_row(
                "SELECT body FROM acks WHERE id = ?1 ORDER BY n LIMIT 1",
                params![id],
                |r| r.get::<_, String>(0),
            )
            .optional()
            .map(|o| o.map(|s| serde_json::from_str(&s).unwrap_or(Value::Null)))
    }

    // -----------------------------------------------------------------------------------
    // The page
    // -----------------------------------------------------------------------------------

    /// Sessions the page shows: live ones (not ended, an event within `live_ms`) and any
    /// with an open attention, most recent first, each with its open attentions and its
    /// latest messages (newest first) and their outcomes.
    pub fn page_sessions(&self, now_ms: i64, live_ms: i64) -> rusqlite::Result<Vec<Value>> {
        let mut st = self.conn.prepare_cached(
            "SELECT key, harness, session_id, first_at, last_at, last_type, info, ended
             FROM sessions s
             WHERE (ended = 0 AND last_ms > ?1)
                OR EXISTS (SELECT 1 FROM attentions a WHERE a.session_key = s.key AND a.open = 1)
             ORDER BY last_ms DESC, key",
        )?;
        let rows: Vec<SessionRow> = st
            .query_map(params![now_ms - live_ms], |r| {
                Ok(SessionRow {
                    key: r.get(0)?,
                    harness: r.get(1)?,
                    sid: r.get(2)?,
                    first_at: r.get(3)?,
                    last_at: r.get(4)?,
                    last_type: r.get(5)?,
                    info: r.get(6)?,
                    ended: r.get::<_, i64>(7)? != 0,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        let mut out = Vec::with_capacity(rows.len());
        for SessionRow {
            key,
            harness,
            sid,
            first_at,
            last_at,
            last_type,
            info,
            ended,
        } in rows
        {
            let attentions = self.open_attentions(&key)?;
            let messages = self.session_messages(&key, now_ms)?;
            let state = if !attentions.is_empty() {
                "needs you"
            } else if ended {
                "ended"
            } else {
                match last_type.as_str() {
                    "turn.ended" => "idle",
                    "session.started" => "started",
                    _ => "active",
                }
            };
            let mut v = Map::new();
            v.insert("key".into(), key.into());
            v.insert("harness".into(), harness.into());
            v.insert("id".into(), sid.into());
            if let Ok(Value::Object(info)) = serde_json::from_str::<Value>(&info) {
                for (k, x) in info {
                    v.insert(k, x);
                }
            }
            v.insert("state".into(), state.into());
            v.insert("last_type".into(), last_type.into());
            v.insert("first_at".into(), first_at.into());
            v.insert("last_at".into(), last_at.into());
            v.insert("attentions".into(), Value::Array(attentions));
            v.insert("messages".into(), Value::Array(messages));
            out.push(Value::Object(v));
        }
        Ok(out)
    }

    fn open_attentions(&self, key: &str) -> rusqlite::Result<Vec<Value>> {
        let mut st = self.conn.prepare_cached(
            "SELECT attention_id, kind, tool, message, needed_at FROM attentions
             WHERE session_key = ?1 AND open = 1 ORDER BY needed_at, attention_id",
        )?;
        let rows = st.query_map(params![key], |r| {
            Ok(json!({
                "attention_id": r.get::<_, String>(0)?,
                "kind": r.get::<_, Option<String>>(1)?,
                "tool": r.get::<_, Option<String>>(2)?,
                "message": r.get::<_, Option<String>>(3)?,
                "needed_at": r.get::<_, Option<String>>(4)?,
            }))
        })?;
        rows.collect()
    }

    fn session_messages(&self, key: &str, now_ms: i64) -> rusqlite::Result<Vec<Value>> {
        let mut st = self.conn.prepare_cached(
            "SELECT m.body, m.expires_ms, m.first_polled_at, a.outcome,
                    COALESCE(a.detail, json_extract(a.body, '$.code')), a.received_at
             FROM messages m
             LEFT JOIN acks a ON a.n = (SELECT min(n) FROM acks WHERE acks.id = m.id)
             WHERE m.session = ?1 ORDER BY m.n DESC LIMIT ?2",
        )?;
        let rows = st.query_map(params![key, PAGE_MESSAGES as i64], |r| {
            let body: String = r.get(0)?;
            let expires: Option<i64> = r.get(1)?;
            let polled: Option<String> = r.get(2)?;
            let outcome: Option<String> = r.get(3)?;
            let detail: Option<String> = r.get(4)?;
            let acked_at: Option<String> = r.get(5)?;
            Ok(match outcome {
                Some(o) => message_view(&body, &o, detail, acked_at),
                None if expires.is_some_and(|e| e <= now_ms) => message_view(
                    &body,
                    "expired",
                    Some(if polled.is_some() {
                        "expired before the machine acknowledged it".into()
                    } else {
                        "expired before the machine picked it up".into()
                    }),
                    None,
                ),
                None if polled.is_some() => message_view(&body, "sent", None, None),
                None => message_view(&body, "queued", None, None),
            })
        })?;
        rows.collect()
    }

    // -----------------------------------------------------------------------------------
    // Signed control: machines, pairings, the per-machine queue
    // -----------------------------------------------------------------------------------

    /// Whether `id` is a paired machine.
    /// Whether the person said on the page that they are away (false until they do).
    pub fn away(&self) -> rusqlite::Result<bool> {
        Ok(self
            .conn
            .prepare_cached("SELECT value FROM settings WHERE name='away'")?
            .query_row([], |r| r.get::<_, String>(0))
            .optional()?
            .is_some_and(|v| v == "1"))
    }

    pub fn set_away(&self, away: bool, now_ms: i64) -> rusqlite::Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO settings(name, value, at_ms) VALUES ('away', ?1, ?2) \
                 ON CONFLICT(name) DO UPDATE SET value=excluded.value, at_ms=excluded.at_ms",
            )?
            .execute(params![if away { "1" } else { "0" }, now_ms])?;
        Ok(())
    }

    // ---------------------------------------------------------------------------------
    // Telling the person (push.rs)

    /// A setting's value (`vapid`, `ntfy_url`, `ntfy_token`, `away`).
    pub fn setting(&self, name: &str) -> rusqlite::Result<Option<String>> {
        self.conn
            .prepare_cached("SELECT value FROM settings WHERE name=?1")?
            .query_row([name], |r| r.get(0))
            .optional()
    }

    /// Sets a setting; `None` removes it.
    pub fn set_setting(
        &self,
        name: &str,
        value: Option<&str>,
        now_ms: i64,
    ) -> rusqlite::Result<()> {
        match value {
            Some(v) => self
                .conn
                .prepare_cached(
                    "INSERT INTO settings(name, value, at_ms) VALUES (?1, ?2, ?3) \
                     ON CONFLICT(name) DO UPDATE SET value=excluded.value, at_ms=excluded.at_ms",
                )?
                .execute(params![name, v, now_ms])?,
            None => self
                .conn
                .prepare_cached("DELETE FROM settings WHERE name=?1")?
                .execute([name])?,
        };
        Ok(())
    }

    /// Adds (or renews) a device; `Ok(None)` when [`push::SUBSCRIPTIONS_MAX`] are kept.
    pub fn push_subscribe(
        &self,
        sub: &crate::push::Subscription,
        name: Option<&str>,
        now_ms: i64,
    ) -> rusqlite::Result<Option<String>> {
        let id = {
            use sha2::{Digest, Sha256};
            let h = Sha256::digest(sub.endpoint.as_bytes());
            h.iter()
                .take(8)
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        let (known, count): (bool, i64) = self.conn.query_row(
            "SELECT EXISTS(SELECT 1 FROM push_devices WHERE id=?1), (SELECT count(*) FROM push_devices)",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        if !known && count >= crate::push::SUBSCRIPTIONS_MAX {
            return Ok(None);
        }
        self.conn.execute(
            "INSERT INTO push_devices(id, endpoint, p256dh, auth, name, created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
             ON CONFLICT(id) DO UPDATE SET p256dh=excluded.p256dh, auth=excluded.auth, name=coalesce(excluded.name, name)",
            params![id, sub.endpoint, sub.p256dh, sub.auth, name, now_ms],
        )?;
        Ok(Some(id))
    }

    /// Every device, oldest first.
    pub fn push_devices(&self) -> rusqlite::Result<Vec<crate::push::Device>> {
        let mut st = self.conn.prepare_cached(
            "SELECT id, name, quiet, created_ms, endpoint, p256dh, auth FROM push_devices ORDER BY created_ms",
        )?;
        let rows = st.query_map([], |r| {
            Ok(crate::push::Device {
                id: r.get(0)?,
                name: r.get(1)?,
                quiet: r.get::<_, i64>(2)? != 0,
                created_ms: r.get(3)?,
                sub: crate::push::Subscription {
                    endpoint: r.get(4)?,
                    p256dh: r.get(5)?,
                    auth: r.get(6)?,
                },
            })
        })?;
        rows.collect()
    }

    /// Removes a device by the page's id or by its endpoint; whether one was there.
    pub fn push_remove(&self, id_or_endpoint: &str) -> rusqlite::Result<bool> {
        Ok(self.conn.execute(
            "DELETE FROM push_devices WHERE id=?1 OR endpoint=?1",
            [id_or_endpoint],
        )? > 0)
    }

    pub fn push_set_quiet(&self, id: &str, quiet: bool) -> rusqlite::Result<bool> {
        Ok(self.conn.execute(
            "UPDATE push_devices SET quiet=?2 WHERE id=?1",
            params![id, quiet as i64],
        )? > 0)
    }

    /// Keeps one push attempt (the newest [`push::LOG_KEPT`]).
    pub fn push_record(
        &self,
        target: &str,
        what: &str,
        result: &str,
        now_ms: i64,
    ) -> rusqlite::Result<()> {
        self.conn.execute(
            "INSERT INTO push_log(at_ms, target, what, result) VALUES (?1, ?2, ?3, ?4)",
            params![now_ms, target, what, result],
        )?;
        self.conn.execute(
            "DELETE FROM push_log WHERE n <= (SELECT max(n) FROM push_log) - ?1",
            [crate::push::LOG_KEPT],
        )?;
        Ok(())
    }

    /// The newest push attempts first, at most `limit`.
    pub fn push_log(&self, limit: i64) -> rusqlite::Result<Vec<Value>> {
        let mut st = self.conn.prepare_cached(
            "SELECT at_ms, target, what, result FROM push_log ORDER BY n DESC LIMIT ?1",
        )?;
        let rows = st.query_map([limit], |r| {
            Ok(
                json!({"at": fmt_ms(r.get(0)?), "target": r.get::<_, String>(1)?,
                "what": r.get::<_, String>(2)?, "result": r.get::<_, String>(3)?}),
            )
        })?;
        rows.collect()
    }

    /// The session a queued message was for (for a failed ack's notification).
    pub fn message_session(&self, id: &str) -> rusqlite::Result<Option<String>> {
        self.conn
            .prepare_cached("SELECT session FROM messages WHERE id=?1")?
            .query_row([id], |r| r.get(0))
            .optional()
    }

    pub fn machine_known(&self, id: &str) -> rusqlite::Result<bool> {
        self.conn
            .query_row("SELECT 1 FROM machines WHERE id = ?1", params![id], |_| {
                Ok(())
            })
            .optional()
            .map(|o| o.is_some())
    }

    /// The machine whose token hashes to `hash`.
    pub fn machine_by_token(&self, hash: &str) -> rusqlite::Result<Option<String>> {
        self.conn
            .query_row(
                "SELECT id FROM machines WHERE token_hash = ?1",
                params![hash],
                |r| r.get(0),
            )
            .optional()
    }

    /// The most recently paired machine: `{machine, name}`.
    pub fn latest_machine(&self) -> rusqlite::Result<Option<Value>> {
        self.conn
            .query_row(
                "SELECT id, name FROM machines ORDER BY paired_ms DESC, rowid DESC LIMIT 1",
                [],
                |r| {
                    Ok(json!({"machine": r.get::<_, String>(0)?, "name": r.get::<_, Option<String>>(1)?}))
                },
            )
            .optional()
    }

    #[allow(clippy::too_many_arguments)]
    pub fn create_pairing(
        &mut self,
        code: &str,
        machine: &str,
        check: &str,
        name: Option<&str>,
        now_ms: i64,
        expires_ms: i64,
    ) -> rusqlite::Result<()> {
        self.conn.execute(
            "INSERT INTO pairings(code, machine, check_digits, name, created_ms, expires_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![code, machine, check, name, now_ms, expires_ms],
        )?;
        Ok(())
    }

    /// A pairing by its code.
    pub fn pairing(&self, code: &str) -> rusqlite::Result<Option<Pairing>> {
        self.conn
            .query_row(
                "SELECT machine, check_digits, name, expires_ms, key, proof, token_given
                 FROM pairings WHERE code = ?1",
                params![code],
                |r| {
                    Ok(Pairing {
                        machine: r.get(0)?,
                        check: r.get(1)?,
                        name: r.get(2)?,
                        expires_ms: r.get(3)?,
                        key: r.get(4)?,
                        proof: r.get(5)?,
                        token_given: r.get::<_, i64>(6)? != 0,
                    })
                },
            )
            .optional()
    }

    /// Records what the page's passkey produced for a pending, unexpired pairing, and makes
    /// the machine a paired one. Returns false when the pairing was no longer pending.
    pub fn approve_pairing(
        &mut self,
        code: &str,
        key: &Value,
        proof: &Value,
        now_ms: i64,
    ) -> rusqlite::Result<bool> {
        let tx = self.conn.transaction()?;
        let n = tx.execute(
            "UPDATE pairings SET key = ?2, proof = ?3, paired_ms = ?4
             WHERE code = ?1 AND key IS NULL AND expires_ms > ?4",
            params![code, key.to_string(), proof.to_string(), now_ms],
        )?;
        if n == 0 {
            return Ok(false);
        }
        let (machine, name): (String, Option<String>) = tx.query_row(
            "SELECT machine, name FROM pairings WHERE code = ?1",
            params![code],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        tx.execute(
            "INSERT INTO machines(id, name, paired_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT(id) DO UPDATE SET paired_ms = excluded.paired_ms,
                 name = COALESCE(excluded.name, machines.name)",
            params![machine, name, now_ms],
        )?;
        tx.execute(
            "INSERT OR REPLACE INTO machine_keys(machine, id, alg, spki, added_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                machine,
                key["id"].as_str().unwrap_or_default(),
                key["alg"].as_i64().unwrap_or_default(),
                key["spki"].as_str().unwrap_or_default(),
                now_ms
            ],
        )?;
        tx.commit()?;
        Ok(true)
    }

    /// Hands out the machine token of an approved pairing: `Some(())` when this is the
    /// machine's first token (its hash is stored now, the caller returns the token once);
    /// `None` when the machine already has one or this pairing already gave one.
    pub fn give_token(&mut self, code: &str, token_hash: &str) -> rusqlite::Result<bool> {
        let tx = self.conn.transaction()?;
        let n = tx.execute(
            "UPDATE pairings SET token_given = 1 WHERE code = ?1 AND token_given = 0 AND key IS NOT NULL",
            params![code],
        )?;
        if n == 0 {
            return Ok(false);
        }
        let n = tx.execute(
            "UPDATE machines SET token_hash = ?2
             WHERE id = (SELECT machine FROM pairings WHERE code = ?1) AND token_hash IS NULL",
            params![code, token_hash],
        )?;
        tx.commit()?;
        Ok(n == 1)
    }

    /// The keys the page's approvals carried for `machine`: `(id, alg, spki)`.
    pub fn machine_keys(&self, machine: &str) -> rusqlite::Result<Vec<(String, i64, String)>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT id, alg, spki FROM machine_keys WHERE machine = ?1")?;
        let rows = st.query_map(params![machine], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        rows.collect()
    }

    /// Forgets a machine: its token, keys, pairings and what is queued for it.
    pub fn remove_machine(&mut self, id: &str) -> rusqlite::Result<()> {
        let tx = self.conn.transaction()?;
        tx.execute("DELETE FROM machines WHERE id = ?1", params![id])?;
        tx.execute("DELETE FROM machine_keys WHERE machine = ?1", params![id])?;
        tx.execute("DELETE FROM pairings WHERE machine = ?1", params![id])?;
        tx.execute(
            "DELETE FROM messages WHERE machine = ?1
               AND NOT EXISTS (SELECT 1 FROM acks a WHERE a.id = messages.id)",
            params![id],
        )?;
        tx.commit()
    }

    /// Queues a signed envelope for `machine`; `session` and `kind` come from the command,
    /// for the page.
    pub fn insert_envelope(
        &mut self,
        machine: &str,
        session: &str,
        kind: &str,
        value: &Value,
        expires_ms: i64,
        now_ms: i64,
    ) -> rusqlite::Result<()> {
        self.conn.execute(
            "INSERT INTO messages(id, session, kind, body, expires_ms, enqueued_ms, enqueued_at, machine)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                value.get("id").and_then(Value::as_str),
                session,
                kind,
                value.to_string(),
                expires_ms,
                now_ms,
                fmt_ms(now_ms),
                machine
            ],
        )?;
        Ok(())
    }

    /// Envelopes for `machine` neither acked nor expired, oldest first, with row numbers.
    pub fn machine_pending(
        &self,
        machine: &str,
        now_ms: i64,
    ) -> rusqlite::Result<Vec<(i64, Value)>> {
        let mut st = self.conn.prepare_cached(
            "SELECT n, body FROM messages m
             WHERE machine = ?1 AND (expires_ms IS NULL OR expires_ms > ?2)
               AND (id IS NULL OR NOT EXISTS (SELECT 1 FROM acks a WHERE a.id = m.id))
             ORDER BY n",
        )?;
        let rows = st.query_map(params![machine, now_ms], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })?;
        rows.map(|r| r.map(|(n, s)| (n, serde_json::from_str(&s).unwrap_or(Value::Null))))
            .collect()
    }

    /// Which machine a queued message belongs to: `Some(None)` an unsigned message,
    /// `None` no such message.
    pub fn message_machine(&self, id: &str) -> rusqlite::Result<Option<Option<String>>> {
        self.conn
            .query_row(
                "SELECT machine FROM messages WHERE id = ?1 ORDER BY n LIMIT 1",
                params![id],
                |r| r.get(0),
            )
            .optional()
    }

    // -----------------------------------------------------------------------------------
    // Logins
    // -----------------------------------------------------------------------------------

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

    // -----------------------------------------------------------------------------------
    // Upkeep
    // -----------------------------------------------------------------------------------

    /// Forgets what is older than `keep_ms`: events and acks received before, sessions
    /// last seen before, messages enqueued before (and no longer pending), logins made
    /// before. Returns the number of rows removed.
    pub fn sweep(&mut self, now_ms: i64, keep_ms: i64) -> rusqlite::Result<usize> {
        let cutoff = now_ms - keep_ms;
        let tx = self.conn.transaction()?;
        let mut n = 0;
        n += tx.execute("DELETE FROM events WHERE received_ms < ?1", params![cutoff])?;
        n += tx.execute(
            "DELETE FROM attentions WHERE session_key IN (SELECT key FROM sessions WHERE last_ms < ?1)",
            params![cutoff],
        )?;
        n += tx.execute("DELETE FROM sessions WHERE last_ms < ?1", params![cutoff])?;
        n += tx.execute(
            "DELETE FROM messages WHERE enqueued_ms < ?1
               AND (expires_ms < ?2 OR id IS NULL OR EXISTS (SELECT 1 FROM acks a WHERE a.id = messages.id))",
            params![cutoff, now_ms],
        )?;
        n += tx.execute("DELETE FROM acks WHERE received_ms < ?1", params![cutoff])?;
        n += tx.execute("DELETE FROM logins WHERE created_ms < ?1", params![cutoff])?;
        n += tx.execute(
            "DELETE FROM pairings WHERE expires_ms < ?1",
            params![cutoff],
        )?;
        tx.commit()?;
        Ok(n)
    }
}

#[allow(clippy::too_many_arguments)]
fn note_session(
    tx: &rusqlite::Transaction<'_>,
    key: &str,
    harness: &str,
    sid: &str,
    seq: i64,
    ty: &str,
    ev: &Value,
    now_ms: i64,
    now_at: &str,
) -> rusqlite::Result<()> {
    let old: Option<(i64, String)> = tx
        .query_row(
            "SELECT last_seq, info FROM sessions WHERE key = ?1",
            params![key],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let mut info = old
        .as_ref()
        .and_then(|(_, i)| serde_json::from_str::<Map<String, Value>>(i).ok())
        .unwrap_or_default();
    for f in SESSION_FIELDS {
        if let Some(Value::String(s)) = ev["session"].get(*f) {
            if !s.is_empty() {
                info.insert((*f).into(), Value::String(s.clone()));
            }
        }
    }
    let info = Value::Object(info).to_string();
    let ended = i64::from(ty == "session.ended");
    match old {
        None => {
            tx.execute(
                "INSERT INTO sessions(key, harness, session_id, first_at, last_ms, last_at, last_type, last_seq, info, ended)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?4, ?6, ?7, ?8, ?9)",
                params![key, harness, sid, now_at, now_ms, ty, seq, info, ended],
            )?;
        }
        Some((last_seq, _)) if seq >= last_seq => {
            tx.execute(
                "UPDATE sessions SET last_ms = ?2, last_at = ?3, last_type = ?4, last_seq = ?5, info = ?6, ended = ?7
                 WHERE key = ?1",
                params![key, now_ms, now_at, ty, seq, info, ended],
            )?;
        }
        Some(_) => {
            // An older event arriving late: it still counts as activity and may fill fields.
            tx.execute(
                "UPDATE sessions SET last_ms = ?2, last_at = ?3, info = ?4 WHERE key = ?1",
                params![key, now_ms, now_at, info],
            )?;
        }
    }
    Ok(())
}

fn note_attention(
    tx: &rusqlite::Transaction<'_>,
    key: &str,
    seq: i64,
    ty: &str,
    data: &Value,
    now_at: &str,
) -> rusqlite::Result<()> {
    let Some(id) = data.get("attention_id").and_then(Value::as_str) else {
        return Ok(());
    };
    let state_seq: Option<i64> = tx
        .query_row(
            "SELECT state_seq FROM attentions WHERE session_key = ?1 AND attention_id = ?2",
            params![key, id],
            |r| r.get(0),
        )
        .optional()?;
    if state_seq.is_some_and(|s| s > seq) {
        return Ok(());
    }
    let s = |k: &str| data.get(k).and_then(Value::as_str).map(str::to_owned);
    if ty == "attention.needed" {
        tx.execute(
            "INSERT INTO attentions(session_key, attention_id, kind, tool, message, open, how, state_seq, needed_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 1, NULL, ?6, ?7)
             ON CONFLICT(session_key, attention_id) DO UPDATE SET
               kind = excluded.kind, tool = excluded.tool, message = excluded.message, open = 1,
               how = NULL, state_seq = excluded.state_seq, needed_at = excluded.needed_at, cleared_at = NULL",
            params![key, id, s("kind"), s("tool"), s("message"), seq, now_at],
        )?;
    } else {
        tx.execute(
            "INSERT INTO attentions(session_key, attention_id, open, how, state_seq, cleared_at)
             VALUES (?1, ?2, 0, ?3, ?4, ?5)
             ON CONFLICT(session_key, attention_id) DO UPDATE SET
               open = 0, how = excluded.how, state_seq = excluded.state_seq, cleared_at = excluded.cleared_at",
            params![key, id, s("how"), seq, now_at],
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(sid: &str, seq: i64, ty: &str, data: Value) -> Value {
        json!({"protocol":1,"id":ulid::Ulid::new().to_string(),"type":ty,"time":"2026-01-01T00:00:00.000Z",
            "tier":1,"harness":{"name":"claude-code"},"session":{"id":sid,"seq":seq,"cwd":"~/x"},
            "privacy":{"rulesets":["secrets@1"],"pii":false},"data":data})
    }

    #[test]
    fn attentions_follow_seq() {
        let mut db = Db::open_memory().unwrap();
        let now = 1_800_000_000_000;
        let a = ev("s", 0, "session.started", json!({"source":"startup"}));
        let b = ev(
            "s",
            1,
            "attention.needed",
            json!({"attention_id":"p1","kind":"permission","tool":"Bash","message":"ls"}),
        );
        assert_eq!(
            db.insert_events(&[&a, &b, &a], now).unwrap(),
            vec![true, true, false]
        );
        let s = db.page_sessions(now, 3_600_000).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0]["state"], "needs you");
        assert_eq!(s[0]["cwd"], "~/x");
        assert_eq!(s[0]["attentions"][0]["tool"], "Bash");
        // A cleared with an older seq than a newer needed does not close it.
        let c = ev(
            "s",
            2,
            "attention.cleared",
            json!({"attention_id":"p1","how":"answered"}),
        );
        db.insert_events(&[&c], now).unwrap();
        let s = db.page_sessions(now, 3_600_000).unwrap();
        assert_eq!(s[0]["attentions"], json!([]));
        assert_eq!(s[0]["state"], "active");
        // Not live after live_ms.
        assert!(db
            .page_sessions(now + 4_000_000, 3_600_000)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn pairings_expire_approve_once_and_give_one_token() {
        let mut db = Db::open_memory().unwrap();
        let key = json!({"id": "k1", "alg": -7, "spki": "AAAA"});
        let proof = json!({"cred": "k1", "ad": "a", "cd": "c", "sig": "s"});
        db.create_pairing("old", "m_a", "123456", None, 0, 1000)
            .unwrap();
        assert!(
            !db.approve_pairing("old", &key, &proof, 1000).unwrap(),
            "expired"
        );
        assert!(!db.machine_known("m_a").unwrap());
        db.create_pairing("c1", "m_a", "123456", Some("laptop"), 0, 10_000)
            .unwrap();
        assert!(!db.give_token("c1", "h1").unwrap(), "not approved yet");
        assert!(db.approve_pairing("c1", &key, &proof, 5).unwrap());
        assert!(!db.approve_pairing("c1", &key, &proof, 6).unwrap(), "once");
        assert!(db.machine_known("m_a").unwrap());
        assert!(db.give_token("c1", "h1").unwrap());
        assert!(!db.give_token("c1", "h2").unwrap(), "one answer only");
        assert_eq!(db.machine_by_token("h1").unwrap().as_deref(), Some("m_a"));
        // A second pairing of the same machine never replaces its token.
        db.create_pairing("c2", "m_a", "654321", None, 7, 10_000)
            .unwrap();
        assert!(db.approve_pairing("c2", &key, &proof, 8).unwrap());
        assert!(!db.give_token("c2", "h3").unwrap());
        assert_eq!(db.machine_by_token("h3").unwrap(), None);
        assert_eq!(db.latest_machine().unwrap().unwrap()["name"], "laptop");
        db.remove_machine("m_a").unwrap();
        assert_eq!(db.machine_by_token("h1").unwrap(), None);
        assert!(db.pairing("c1").unwrap().is_none());
    }

    #[test]
    fn messages_and_acks() {
        let mut db = Db::open_memory().unwrap();
        let now = 1_800_000_000_000;
        let m = json!({"id":"01K6ZZZZZZZZZZZZZZZZZZZZZZ","kind":"prompt","text":"hi"});
        db.insert_message("codex:s", &m, Some(now + 1000), now)
            .unwrap();
        let p = db.pending("codex:s", now).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(db.mark_polled(&[p[0].0], now).unwrap(), 1);
        assert_eq!(db.mark_polled(&[p[0].0], now).unwrap(), 0);
        assert!(db.pending("codex:s", now + 1000).unwrap().is_empty());
        assert_eq!(db.next_expiry(now).unwrap(), Some(now + 1000));
        db.insert_acks(
            &[json!({"id":"01K6ZZZZZZZZZZZZZZZZZZZZZZ","outcome":"delivered","at":"x"})],
            now,
        )
        .unwrap();
        assert!(db.pending("codex:s", now).unwrap().is_empty());
        assert_eq!(
            db.first_ack("01K6ZZZZZZZZZZZZZZZZZZZZZZ").unwrap().unwrap()["outcome"],
            "delivered"
        );
        assert_eq!(db.next_expiry(now).unwrap(), None);
        assert_eq!(db.sweep(now + 10_000, 1000).unwrap(), 2);
    }
}
