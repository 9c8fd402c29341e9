//! A database with history: `rows` rows of what months of use leave behind (ended sessions,
//! their events, done messages, sent acks, cleared attentions), written directly with SQL,
//! plus the live session the hooks under test belong to, with a history of its own.
use std::path::Path;
use std::time::Instant;

/// How the rows split over the tables.
#[derive(Debug, Clone, Copy)]
pub struct Mix {
    pub sessions: i64,
    pub events: i64,
    pub messages: i64,
    pub acks: i64,
    pub attention: i64,
}

impl Mix {
    /// 2% sessions, 32% events, 30% messages, 29% acks, 7% attentions.
    pub fn of(rows: i64) -> Mix {
        let sessions = (rows / 50).max(1);
        let events = sessions * 16;
        let messages = sessions * 15;
        let acks = rows * 29 / 100;
        let attention = rows - sessions - events - messages - acks;
        Mix {
            sessions,
            events,
            messages,
            acks,
            attention: attention.max(0),
        }
    }
}

/// The live session's own history: done messages (with sent acks) and events.
pub const LIVE_HISTORY: i64 = 2_000;

/// Creates the schema with the real `store::open` (so every migration of this build applies)
/// unless the file exists, then fills it. Returns the seconds it took.
#[allow(non_snake_case, clippy::format_in_format_args)]
pub fn fill(db: &Path, rows: i64, live_key: &str, live_id: &str, cwd: &str) -> f64 {
    let started = Instant::now();
    // A database a baseline build made is filled as it is, at that build's schema.
    if !db.exists() {
        let store = spctl::store::open(db, std::time::Duration::from_secs(10))
            .expect("creating the database");
        drop(store);
    }
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .unwrap();
    let m = Mix::of(rows);
    let now = spctl::clock::now_ms();
    // History spreads over the last six days (inside the seven days sweep keeps).
    let base = now - 6 * 24 * 3_600_000;
    let span = 6 * 24 * 3_600_000 - 3_600_000;
    let ts = |expr: &str| format!("strftime('%Y-%m-%dT%H:%M:%fZ', ({expr}) / 1000.0, 'unixepoch')");
    let S = m.sessions;
    let sql = format!(
        r#"
BEGIN;
CREATE TEMP TABLE n(i INTEGER PRIMARY KEY);
WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < {max} - 1)
INSERT INTO n SELECT i FROM c;

-- Ended sessions, one every span/S ms, each about 40 minutes long.
INSERT INTO sessions(key, harness, session_id, cwd, started_at, last_event_at, last_event_ms, ended_at, next_seq)
SELECT 'claude-code:' || printf('%08x-0000-4000-8000-%012d', (i * 2654435761) % 4294967296, i),
       'claude-code', printf('%08x-0000-4000-8000-%012d', (i * 2654435761) % 4294967296, i),
       '~/src/project-' || (i % 40),
       {started}, {last}, {base} + i * {step} + 2400000, {last}, 16
FROM n WHERE i < {S};

-- Their events: 16 each, seq 0..15.
INSERT INTO events(event_id, session_key, seq, type, time, harness, harness_event, session_id, cwd, data)
SELECT printf('01HZ%022d', i), 'claude-code:' || printf('%08x-0000-4000-8000-%012d', ((i / 16) * 2654435761) % 4294967296, i / 16),
       i % 16,
       CASE WHEN i % 16 = 0 THEN 'session.started' WHEN i % 16 = 15 THEN 'session.ended'
            WHEN i % 4 = 1 THEN 'attention.needed' WHEN i % 4 = 2 THEN 'attention.cleared' ELSE 'turn.ended' END,
       {evtime}, 'claude-code',
       CASE WHEN i % 16 = 0 THEN 'SessionStart' WHEN i % 16 = 15 THEN 'SessionEnd'
            WHEN i % 4 = 1 THEN 'PermissionRequest' WHEN i % 4 = 2 THEN 'PostToolUse' ELSE 'Stop' END,
       printf('%08x-0000-4000-8000-%012d', ((i / 16) * 2654435761) % 4294967296, i / 16),
       '~/src/project-' || ((i / 16) % 40),
       CASE WHEN i % 16 = 0 THEN '{{"source":"startup"}}'
            WHEN i % 4 = 1 THEN '{{"attention_id":"perm-' || printf('%016x', i) || '","kind":"permission","tool":"Bash","message":"Bash cargo test --release -p spctl"}}'
            WHEN i % 4 = 2 THEN '{{"attention_id":"perm-' || printf('%016x', i - 1) || '","how":"answered"}}'
            ELSE '{{"turn_id":"' || printf('%08x-5e6e-4000-8000-%012d', i, i) || '","reason":"stop"}}' END
FROM n WHERE i < {E};

-- Done messages: two prompts to every permission answer, delivered or expired.
INSERT INTO messages(id, session_key, sink, kind, attention_id, decision, text, note, at, expires_at, received_at,
                     deadline_ms, deadline_at, state, outcome, detail, claimed_pid, claimed_ms, done_at)
SELECT printf('01HY%022d', i), 'claude-code:' || printf('%08x-0000-4000-8000-%012d', ((i / 15) * 2654435761) % 4294967296, i / 15),
       'phone',
       CASE WHEN i % 3 = 2 THEN 'permission.answer' ELSE 'prompt' END,
       CASE WHEN i % 3 = 2 THEN 'perm-' || printf('%016x', i) END,
       CASE WHEN i % 3 = 2 THEN CASE WHEN i % 7 = 0 THEN 'deny' ELSE 'allow' END END,
       CASE WHEN i % 3 = 2 THEN NULL ELSE 'Please also run the integration tests and fix whatever fails, then summarise. #' || i END,
       NULL, {msgtime}, {msgexp}, {msgtime}, {msgms} + 3600000, {msgexp}, 'done',
       CASE WHEN i % 11 = 0 THEN 'expired' ELSE 'delivered' END,
       CASE WHEN i % 11 = 0 THEN 'past expires_at before a turn boundary' ELSE 'claude-code Stop hook' END,
       4242, {msgms} + 900, {msgdone}
FROM n WHERE i < {M};

-- Their acks, sent.
INSERT INTO acks(message_id, sink, outcome, detail, at, sent_at, attempts, next_try_ms, generation)
SELECT printf('01HY%022d', i), 'phone', CASE WHEN i % 11 = 0 THEN 'expired' ELSE 'delivered' END,
       'claude-code Stop hook', {msgdone}, {msgdone}, 1, 0, 0
FROM n WHERE i < {A};

-- Cleared attentions.
INSERT INTO attention(session_key, attention_id, tool, message, opened_at, wait_until_ms, hook_pid, state, how, cleared_at)
SELECT 'claude-code:' || printf('%08x-0000-4000-8000-%012d', ((i % {S}) * 2654435761) % 4294967296, i % {S}),
       'perm-' || printf('%016x', i), 'Bash', 'Bash cargo test --release -p spctl',
       {attime}, {atms} + 120000, 4242, 'cleared',
       CASE WHEN i % 5 = 0 THEN 'timeout' ELSE 'answered' END, {attime}
FROM n WHERE i < {T};

-- The live session under test, with a history of its own.
INSERT INTO sessions(key, harness, session_id, cwd, started_at, last_event_at, last_event_ms, ended_at, next_seq)
VALUES ('{live_key}', 'claude-code', '{live_id}', '{cwd}', {livestart}, {livenow}, {now}, NULL, {H});
INSERT INTO events(event_id, session_key, seq, type, time, harness, harness_event, session_id, cwd, data)
SELECT printf('01HL%022d', i), '{live_key}', i, CASE WHEN i = 0 THEN 'session.started' ELSE 'turn.ended' END,
       {livestart}, 'claude-code', CASE WHEN i = 0 THEN 'SessionStart' ELSE 'Stop' END, '{live_id}', '{cwd}',
       CASE WHEN i = 0 THEN '{{"source":"startup"}}' ELSE '{{"turn_id":"t' || i || '","reason":"stop"}}' END
FROM n WHERE i < {H};
INSERT INTO messages(id, session_key, sink, kind, text, at, expires_at, received_at, deadline_ms, deadline_at,
                     state, outcome, detail, claimed_pid, claimed_ms, done_at)
SELECT printf('01HL%022d', i), '{live_key}', 'phone', 'prompt', 'Earlier prompt #' || i,
       {livestart}, {livestart}, {livestart}, {now}, {livestart}, 'done', 'delivered', 'claude-code Stop hook', 4242, {now}, {livestart}
FROM n WHERE i < {H};
INSERT INTO acks(message_id, sink, outcome, detail, at, sent_at, attempts)
SELECT printf('01HL%022d', i), 'phone', 'delivered', 'claude-code Stop hook', {livestart}, {livestart}, 1 FROM n WHERE i < {H};
INSERT OR IGNORE INTO sinks(name, event_cursor) VALUES ('phone', (SELECT max(rowid) FROM events));
DROP TABLE n;
COMMIT;
"#,
        max = [
            m.sessions,
            m.events,
            m.messages,
            m.acks,
            m.attention,
            LIVE_HISTORY
        ]
        .into_iter()
        .max()
        .unwrap(),
        base = base,
        step = span / S,
        started = ts(&format!("{base} + i * {}", span / S)),
        last = ts(&format!("{base} + i * {} + 2400000", span / S)),
        evtime = ts(&format!(
            "{base} + (i / 16) * {} + (i % 16) * 150000",
            span / S
        )),
        msgms = format!("({base} + (i / 15) * {} + (i % 15) * 160000)", span / S),
        msgtime = ts(&format!(
            "{base} + (i / 15) * {} + (i % 15) * 160000",
            span / S
        )),
        msgexp = ts(&format!(
            "{base} + (i / 15) * {} + (i % 15) * 160000 + 3600000",
            span / S
        )),
        msgdone = ts(&format!(
            "{base} + (i / 15) * {} + (i % 15) * 160000 + 900",
            span / S
        )),
        attime = ts(&format!("{base} + (i % {S}) * {} + 60000", span / S)),
        atms = format!("({base} + (i % {S}) * {} + 60000)", span / S),
        livestart = ts(&format!("{now} - 3600000")),
        livenow = ts(&format!("{now}")),
        now = now,
        S = S,
        E = m.events,
        M = m.messages,
        A = m.acks,
        T = m.attention,
        H = LIVE_HISTORY,
    );
    conn.execute_batch(&sql).expect("filling the database");
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .unwrap();
    started.elapsed().as_secs_f64()
}

/// Rows in the four history tables and attentions, as counted in the file.
pub fn count(db: &Path) -> i64 {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row(
        "SELECT (SELECT count(*) FROM sessions) + (SELECT count(*) FROM events) + (SELECT count(*) FROM messages) \
           + (SELECT count(*) FROM acks) + (SELECT count(*) FROM attention)",
        [],
        |r| r.get(0),
    )
    .unwrap()
}
