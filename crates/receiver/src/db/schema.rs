//! The schema: ordered migrations, checked against `PRAGMA user_version`.

use anyhow::{bail, Context};
use rusqlite::TransactionBehavior;

use super::Db;

pub(super) const MIGRATIONS: &[&str] = &[
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
    // "Not now" (issue 26): an open prompt put off, hidden on every page and not pushed
    // until `until_ms`; the row goes when the prompt clears.
    r#"
CREATE TABLE snoozes(
    session_key  TEXT NOT NULL,
    attention_id TEXT NOT NULL,
    until_ms     INTEGER NOT NULL,
    made_ms      INTEGER NOT NULL,
    PRIMARY KEY(session_key, attention_id)
);
CREATE INDEX snoozes_until ON snoozes(until_ms);
"#,
    // Quiet hours per device (issue 26): minutes after the device's local midnight, in the
    // IANA time zone its page gave; all three or none.
    r#"
ALTER TABLE push_devices ADD COLUMN quiet_from INTEGER;
ALTER TABLE push_devices ADD COLUMN quiet_to INTEGER;
ALTER TABLE push_devices ADD COLUMN quiet_tz TEXT;
"#,
    // The prompts that ended lately, which the page says how (DECISIONS 34).
    r#"
CREATE INDEX attentions_cleared ON attentions(session_key, cleared_at) WHERE open = 0;
"#,
    // One inbox (DECISIONS 33): the paired machine whose token each session's events came
    // with (NULL: the shared sink token, an unpaired sender).
    r#"
ALTER TABLE sessions ADD COLUMN machine_id TEXT;
CREATE INDEX sessions_machine ON sessions(machine_id);
"#,
    // DECISIONS 31: the call a prompt is about, as the machine showed it (the page shows it
    // and sends an edit of it back whole).
    r#"
ALTER TABLE attentions ADD COLUMN input TEXT;
ALTER TABLE attentions ADD COLUMN input_partial INTEGER NOT NULL DEFAULT 0;
"#,
    // Receivers sharing one database (issue 29) see what one of them alone once kept in
    // memory: each login's CSRF secret, each machine's last contact (written at most every
    // few seconds), the login attempts (a bucket per client and one overall: when each is
    // full again; a full one is deleted), and each push claimed by the one receiver that
    // sends it.
    r#"
ALTER TABLE logins ADD COLUMN csrf TEXT;
ALTER TABLE machines ADD COLUMN seen_ms INTEGER;
CREATE TABLE login_attempts(
    key     TEXT PRIMARY KEY,   -- the client's address, or '*' for every client
    full_ms INTEGER NOT NULL
);
CREATE TABLE push_claims(
    key     TEXT PRIMARY KEY,
    made_ms INTEGER NOT NULL
);
CREATE INDEX push_claims_made ON push_claims(made_ms);
"#,
    // DECISIONS 37: the machine's sha256 of a prompt's exact input (sent only for an input
    // shown whole): the page groups identical prompts by it, never by what it shows.
    r#"
ALTER TABLE attentions ADD COLUMN input_sha256 TEXT;
"#,
    // DECISIONS 39: a start's attached files, as the page uploaded them (base64, the same in
    // both databases), for the one machine they were uploaded for, until the start expires.
    r#"
CREATE TABLE start_files(
    machine    TEXT NOT NULL,
    sha256     TEXT NOT NULL,
    body       TEXT NOT NULL,
    expires_ms INTEGER NOT NULL,
    PRIMARY KEY(machine, sha256)
);
CREATE INDEX start_files_expires ON start_files(expires_ms);
"#,
    // DECISIONS 39: until when a parked prompt (a headless run that ended waiting for it)
    // stays answerable; NULL for one whose agent still waits.
    r#"
ALTER TABLE attentions ADD COLUMN parked_until_ms INTEGER;
"#,
];

impl Db {
    pub(super) fn migrate(&mut self) -> anyhow::Result<()> {
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
}
