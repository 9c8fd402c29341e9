//! Ordered migrations; `PRAGMA user_version` is the number applied. Never edit a released
//! entry: append a new one.
pub const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE sessions (
    key           TEXT PRIMARY KEY,          -- "<harness>:<id>" (DECISIONS 4)
    harness       TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    cwd           TEXT,
    started_at    TEXT NOT NULL,
    last_event_at TEXT NOT NULL,
    last_event_ms INTEGER NOT NULL,
    ended_at      TEXT,                      -- set by SessionEnd; a later event revives it
    next_seq      INTEGER NOT NULL DEFAULT 0 -- session.seq of the next event
);
CREATE INDEX sessions_live ON sessions(last_event_ms) WHERE ended_at IS NULL;

-- Every control message ever received, keyed by its id (DECISIONS 8).
CREATE TABLE messages (
    id            TEXT PRIMARY KEY,
    session_key   TEXT NOT NULL,
    sink          TEXT NOT NULL,
    kind          TEXT NOT NULL,
    attention_id  TEXT,                      -- "for" of a permission.answer
    decision      TEXT,
    text          TEXT,
    note          TEXT,
    at            TEXT,
    expires_at    TEXT,
    received_at   TEXT NOT NULL,
    deadline_ms   INTEGER,                   -- DECISIONS 7, local clock
    deadline_at   TEXT,
    state         TEXT NOT NULL CHECK (state IN ('queued','delivering','done')),
    outcome       TEXT CHECK (outcome IN ('delivered','expired','unsupported','failed')),
    detail        TEXT,
    claimed_pid   INTEGER,
    claimed_ms    INTEGER,
    done_at       TEXT,
    CHECK ((state = 'done') = (outcome IS NOT NULL))
);
-- Partial: only the few undecided messages are indexed, so hook look-ups stay flat as history grows.
CREATE INDEX messages_pending ON messages(session_key, kind, attention_id) WHERE state <> 'done';
CREATE INDEX messages_received ON messages(received_at);

-- The ack outbox: written before sending, resent until a 2xx (DECISIONS 3).
CREATE TABLE acks (
    message_id    TEXT NOT NULL,
    sink          TEXT NOT NULL,
    outcome       TEXT NOT NULL CHECK (outcome IN ('delivered','expired','unsupported','failed')),
    detail        TEXT,
    at            TEXT NOT NULL,
    sent_at       TEXT,                      -- NULL until the receiver answered 2xx
    attempts      INTEGER NOT NULL DEFAULT 0,
    next_try_ms   INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT,
    generation    INTEGER NOT NULL DEFAULT 0, -- bumped when a redelivery asks for a resend
    PRIMARY KEY (message_id, sink)
);
CREATE INDEX acks_unsent ON acks(sink, next_try_ms) WHERE sent_at IS NULL;

-- Permission prompts (attention.needed of kind permission) and how each ended.
CREATE TABLE attention (
    session_key   TEXT NOT NULL,
    attention_id  TEXT NOT NULL,
    tool          TEXT,
    message       TEXT,
    opened_at     TEXT NOT NULL,
    wait_until_ms INTEGER NOT NULL,          -- when the waiting hook gives up
    hook_pid      INTEGER,
    state         TEXT NOT NULL CHECK (state IN ('open','cleared')),
    how           TEXT CHECK (how IN ('answered','timeout','cancelled','unknown')),
    cleared_at    TEXT,
    PRIMARY KEY (session_key, attention_id)
);
CREATE INDEX attention_open ON attention(session_key) WHERE state = 'open';

-- Events for POST {events}, in commit order; each sink keeps a cursor into it.
CREATE TABLE events (
    rowid         INTEGER PRIMARY KEY,
    event_id      TEXT NOT NULL UNIQUE,
    session_key   TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    type          TEXT NOT NULL,
    time          TEXT NOT NULL,
    harness       TEXT NOT NULL,
    harness_event TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    cwd           TEXT,
    data          TEXT NOT NULL,
    UNIQUE (session_key, seq)
);

-- Per-sink delivery state kept by sp-sync.
CREATE TABLE sinks (
    name            TEXT PRIMARY KEY,
    event_cursor    INTEGER NOT NULL DEFAULT 0,  -- last events.rowid the sink took
    control_paused  TEXT,                        -- why control polling is paused (401/403)
    events_paused   TEXT,                        -- why event delivery is paused (401)
    paused_config   TEXT,                        -- fingerprint of the sink config when paused
    tier_cap        INTEGER,                     -- learned from a 403 tier_above_max
    last_poll_ok_at TEXT,
    last_events_ok_at TEXT,
    last_error      TEXT,
    last_error_at   TEXT,
    wellknown       TEXT,                        -- cached document (24 h)
    wellknown_ms    INTEGER
);

CREATE VIEW queue AS
    SELECT id, session_key AS session, sink, kind, state, outcome, detail, attention_id AS "for",
           decision, substr(text, 1, 80) AS text, note, at, expires_at, deadline_at, received_at, done_at
    FROM messages ORDER BY received_at, id;

CREATE VIEW pending_acks AS
    SELECT message_id, sink, outcome, detail, at, attempts, last_error FROM acks WHERE sent_at IS NULL;

CREATE VIEW outbox AS
    SELECT s.name AS sink, e.rowid, e.type, e.session_key, e.seq, e.time, e.data
    FROM events e JOIN sinks s ON e.rowid > s.event_cursor
    ORDER BY s.name, e.rowid;

CREATE VIEW live_sessions AS
    SELECT key, harness, session_id, cwd, started_at, last_event_at FROM sessions WHERE ended_at IS NULL;
"#,
    // 2: sessions of harnesses driven through a server API (OpenCode), as its plugin reports them.
    r#"
ALTER TABLE sessions ADD COLUMN api_url       TEXT;    -- the server the session runs under
ALTER TABLE sessions ADD COLUMN api_directory TEXT;    -- its instance directory (?directory=)
ALTER TABLE sessions ADD COLUMN api_idle      INTEGER; -- 1 idle, 0 busy, NULL not yet reported
ALTER TABLE sessions ADD COLUMN api_since_ms  INTEGER; -- when this api_url was first reported
"#,
    // 3: the hooks' and sp-sync's look-ups of undecided messages ask for state='queued' (or
    // 'delivering'). SQLite uses a partial index only for a query that repeats its WHERE term,
    // so migration 1's messages_pending (state <> 'done') served none of them and each scanned
    // every message kept: a Stop hook took 76 ms with 1,000,000 rows of history, not 3
    // (BENCHMARKS.md). These match the queries as written; messages_pending stays for
    // `sp status`, whose queries say state <> 'done'.
    r#"
CREATE INDEX messages_queued ON messages(session_key, kind, attention_id) WHERE state = 'queued';
CREATE INDEX messages_delivering ON messages(claimed_ms) WHERE state = 'delivering';
"#,
    // 4: signed control (DECISIONS 22): this machine's id and token per paired sink, the
    // passkeys enrolled at this machine's terminal, and the nonces seen in the last 25 h.
    r#"
CREATE TABLE control_machines (
    sink          TEXT PRIMARY KEY,
    machine       TEXT NOT NULL,               -- m_…, the receiver's id for this machine
    token         TEXT NOT NULL,               -- the machine's bearer: polls, acks, hellos only
    rp_id         TEXT NOT NULL,               -- the WebAuthn rp id the keys are enrolled for
    paired_at     TEXT NOT NULL
);
CREATE TABLE control_keys (
    sink          TEXT NOT NULL,
    id            TEXT NOT NULL,               -- the passkey's credential id
    alg           INTEGER NOT NULL CHECK (alg IN (-7, -257)),
    spki          TEXT NOT NULL,
    name          TEXT,
    added_at      TEXT NOT NULL,
    added_via     TEXT NOT NULL CHECK (added_via IN ('pair', 'key.add')),
    PRIMARY KEY (sink, id)
);
CREATE TABLE control_nonces (
    nonce         TEXT PRIMARY KEY,
    seen_ms       INTEGER NOT NULL
);
CREATE INDEX control_nonces_seen ON control_nonces(seen_ms);
"#,
    // 5: signed control's final outcome `refused` with its `code` (docs/protocol.md#control-5
    // and the acks of docs/protocol.md#seed). SQLite cannot change a CHECK in place, so messages and acks are rebuilt
    // with every row kept, and the views and indexes over them made again.
    r#"
DROP VIEW queue;
DROP VIEW pending_acks;
CREATE TABLE messages_v5 (
    id            TEXT PRIMARY KEY,
    session_key   TEXT NOT NULL,
    sink          TEXT NOT NULL,
    kind          TEXT NOT NULL,
    attention_id  TEXT,
    decision      TEXT,
    text          TEXT,
    note          TEXT,
    at            TEXT,
    expires_at    TEXT,
    received_at   TEXT NOT NULL,
    deadline_ms   INTEGER,
    deadline_at   TEXT,
    state         TEXT NOT NULL CHECK (state IN ('queued','delivering','done')),
    outcome       TEXT CHECK (outcome IN ('delivered','expired','unsupported','failed','refused')),
    detail        TEXT,
    claimed_pid   INTEGER,
    claimed_ms    INTEGER,
    done_at       TEXT,
    code          TEXT,                      -- a refusal's code (docs/protocol.md#control-5)
    CHECK ((state = 'done') = (outcome IS NOT NULL))
);
INSERT INTO messages_v5 (id, session_key, sink, kind, attention_id, decision, text, note, at, expires_at,
    received_at, deadline_ms, deadline_at, state, outcome, detail, claimed_pid, claimed_ms, done_at)
  SELECT id, session_key, sink, kind, attention_id, decision, text, note, at, expires_at,
    received_at, deadline_ms, deadline_at, state, outcome, detail, claimed_pid, claimed_ms, done_at FROM messages;
DROP TABLE messages;
ALTER TABLE messages_v5 RENAME TO messages;
CREATE INDEX messages_pending ON messages(session_key, kind, attention_id) WHERE state <> 'done';
CREATE INDEX messages_received ON messages(received_at);
CREATE INDEX messages_queued ON messages(session_key, kind, attention_id) WHERE state = 'queued';
CREATE INDEX messages_delivering ON messages(claimed_ms) WHERE state = 'delivering';

CREATE TABLE acks_v5 (
    message_id    TEXT NOT NULL,
    sink          TEXT NOT NULL,
    outcome       TEXT NOT NULL CHECK (outcome IN ('delivered','expired','unsupported','failed','refused')),
    detail        TEXT,
    at            TEXT NOT NULL,
    sent_at       TEXT,
    attempts      INTEGER NOT NULL DEFAULT 0,
    next_try_ms   INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT,
    generation    INTEGER NOT NULL DEFAULT 0,
    code          TEXT,
    PRIMARY KEY (message_id, sink)
);
INSERT INTO acks_v5 (message_id, sink, outcome, detail, at, sent_at, attempts, next_try_ms, last_error, generation)
  SELECT message_id, sink, outcome, detail, at, sent_at, attempts, next_try_ms, last_error, generation FROM acks;
DROP TABLE acks;
ALTER TABLE acks_v5 RENAME TO acks;
CREATE INDEX acks_unsent ON acks(sink, next_try_ms) WHERE sent_at IS NULL;

CREATE VIEW queue AS
    SELECT id, session_key AS session, sink, kind, state, outcome, code, detail, attention_id AS "for",
           decision, substr(text, 1, 80) AS text, note, at, expires_at, deadline_at, received_at, done_at
    FROM messages ORDER BY received_at, id;
CREATE VIEW pending_acks AS
    SELECT message_id, sink, outcome, code, detail, at, attempts, last_error FROM acks WHERE sent_at IS NULL;
"#,
    // 6: whether the person is away from the machine (DECISIONS 27), as `sp away` set it and
    // as each receiver last said it in a poll answer; the newest word wins.
    r#"
CREATE TABLE away (
    source        TEXT PRIMARY KEY,          -- 'local' (sp away) or 'sink:<name>'
    away          INTEGER NOT NULL CHECK (away IN (0, 1)),
    at_ms         INTEGER NOT NULL,
    at            TEXT NOT NULL
);
"#,
    // 7: the order of an API plugin's reports (OpenCode): its sp-event runs may finish out of
    // order, so a busy report must never overwrite a later idle one (issue 17).
    r#"
ALTER TABLE sessions ADD COLUMN api_seq INTEGER;
"#,
    // 8: a prompt's timing (DECISIONS 25): at the turn's end, at the next tool boundary, or
    // in place of the pending tool.
    r#"
ALTER TABLE messages ADD COLUMN mode TEXT NOT NULL DEFAULT 'queue' CHECK (mode IN ('queue','steer','interrupt'));
"#,
    // 9: a session stopped at a tool seam (DECISIONS 26): until its turn ends, every further
    // tool is denied (Codex 0.171 goes on after `continue:false`).
    r#"
ALTER TABLE sessions ADD COLUMN stopped_ms INTEGER;
"#,
    // 10: a permission answer's reach (DECISIONS 30 `scope`): NULL is `once`.
    r#"
ALTER TABLE messages ADD COLUMN scope TEXT CHECK (scope IN ('once','session'));
"#,
    // 11: DECISIONS 30 on hook harnesses: a permission answer's `input`, `interrupt` and
    // `answers` (as JSON, NULL when none), and the grants the machine keeps for a session.
    r#"
ALTER TABLE messages ADD COLUMN rich TEXT;
CREATE TABLE grants (
    id            INTEGER PRIMARY KEY,
    session_key   TEXT NOT NULL,
    tool          TEXT NOT NULL,
    matcher       TEXT NOT NULL,             -- sha256 of the exact input's canonical JSON
    summary       TEXT NOT NULL,             -- the input as the person saw it, shortened
    decision      TEXT NOT NULL CHECK (decision IN ('allow','deny')),
    answer        TEXT,                      -- the answer's `input`/`answers` (JSON), replayed
    who           TEXT NOT NULL,             -- the sink the answer came through
    message_id    TEXT NOT NULL,             -- the answer that made it
    created_ms    INTEGER NOT NULL,
    created_at    TEXT NOT NULL,
    until_ms      INTEGER NOT NULL,          -- at most 24 h after created_ms
    until_at      TEXT NOT NULL,
    ended_at      TEXT,                      -- revoked, or the session ended
    ended_how     TEXT CHECK (ended_how IN ('revoked','session_ended')),
    used          INTEGER NOT NULL DEFAULT 0 -- prompts it answered after the first
);
CREATE INDEX grants_live ON grants(session_key, tool, matcher) WHERE ended_at IS NULL;
CREATE VIEW live_grants AS
    SELECT id, session_key AS session, tool, summary, decision, who, created_at, until_at, used
    FROM grants WHERE ended_at IS NULL
      AND until_ms > CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER);
"#,
    // 12: a prompt of an API-driven session (OpenCode) that a grant answers (DECISIONS 30): the
    // hook leaves the reply here and sp-sync sends it, so no hook links an HTTP client. The
    // prompt as the hook read it is kept, to be announced as usual if the server refuses.
    r#"
CREATE TABLE api_grant_replies (
    session_key   TEXT NOT NULL,
    request_id    TEXT NOT NULL,             -- the server's permission request (attention id)
    grant_id      INTEGER NOT NULL,
    decision      TEXT NOT NULL CHECK (decision IN ('allow','deny')),
    hook_event    TEXT NOT NULL,
    cwd           TEXT,
    tool          TEXT,
    message       TEXT,
    input         TEXT,                      -- the call's input (JSON)
    hook_pid      INTEGER NOT NULL,
    created_ms    INTEGER NOT NULL,
    PRIMARY KEY (session_key, request_id)
);
"#,
    // 13: acks before the final one and what the final one says (DECISIONS 38): an ack row
    // holds the newest ack of its message for its sink, `taken` (or `progress`) until the
    // final outcome replaces it, with the delivery's `mode`, `session` and `reply`. The
    // CHECK changes, so acks is rebuilt with every row kept. `turn_waits`: prompts a Stop
    // delivered, whose final ack waits for the end of the turn they started.
    r#"
DROP VIEW pending_acks;
CREATE TABLE acks_v13 (
    message_id    TEXT NOT NULL,
    sink          TEXT NOT NULL,
    outcome       TEXT NOT NULL CHECK (outcome IN ('taken','progress','delivered','expired','unsupported','failed','refused')),
    detail        TEXT,
    at            TEXT NOT NULL,
    sent_at       TEXT,
    attempts      INTEGER NOT NULL DEFAULT 0,
    next_try_ms   INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT,
    generation    INTEGER NOT NULL DEFAULT 0,
    code          TEXT,
    mode          TEXT,                      -- api, turn, resume, fork, waiter, start
    session       TEXT,                      -- a fork's or a started session's id
    reply         TEXT,                      -- the agent's answer, redacted, <= 20,000 chars
    seq           INTEGER,                   -- progress only
    PRIMARY KEY (message_id, sink)
);
INSERT INTO acks_v13 (message_id, sink, outcome, detail, at, sent_at, attempts, next_try_ms, last_error, generation, code)
  SELECT message_id, sink, outcome, detail, at, sent_at, attempts, next_try_ms, last_error, generation, code FROM acks;
DROP TABLE acks;
ALTER TABLE acks_v13 RENAME TO acks;
CREATE INDEX acks_unsent ON acks(sink, next_try_ms) WHERE sent_at IS NULL;
CREATE VIEW pending_acks AS
    SELECT message_id, sink, outcome, code, detail, at, attempts, last_error FROM acks WHERE sent_at IS NULL;

CREATE TABLE turn_waits (
    message_id    TEXT PRIMARY KEY,
    session_key   TEXT NOT NULL,
    since_ms      INTEGER NOT NULL           -- when the Stop delivered it
);
CREATE INDEX turn_waits_session ON turn_waits(session_key);
"#,
    // 14: DECISIONS 37: whether the person was shown the prompt's call with parts hidden
    // (a secret masked, or cut): such a prompt is never allowed for the session.
    r#"
ALTER TABLE attention ADD COLUMN shown_partial INTEGER NOT NULL DEFAULT 0;
"#,
    // 15: the permission mode the session's hooks last reported (DECISIONS 36: a prompt to
    // a session that runs tools without asking needs a touch); NULL when never reported.
    // And which signed prompts came without a touch.
    r#"
ALTER TABLE sessions ADD COLUMN permission_mode TEXT;
-- 1: a signed prompt that came on the day key alone; refused at delivery if the session
-- has since switched to a mode that runs tools without asking.
ALTER TABLE messages ADD COLUMN day_key_only INTEGER;
"#,
    // 16: headless runs sp-sync launches between turns (DECISIONS 38 `resume`, `fork`,
    // `start`; `crate::runs`), recorded before anything is spawned. `waiting` beyond the
    // concurrency bound; `running` from its launch (its supervisor claims the row, once);
    // `done` when its exit is read and its message's final ack written.
    r#"
CREATE TABLE runs (
    id            TEXT PRIMARY KEY,          -- ULID; names its logs under runs/
    message_id    TEXT,                      -- the prompt it delivers (NULL: none)
    session_key   TEXT,                      -- the session it resumes or forks
    harness       TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('resume','fork','start','continue')),
    cwd           TEXT NOT NULL,
    argv          TEXT NOT NULL,             -- JSON array, the program first
    state         TEXT NOT NULL CHECK (state IN ('waiting','running','done')),
    created_ms    INTEGER NOT NULL,
    started_ms    INTEGER,
    deadline_ms   INTEGER,                   -- its group is killed then
    sup_pid       INTEGER,                   -- the supervisor, with its /proc start time
    sup_start     INTEGER,
    agent_pid     INTEGER,                   -- the agent, leader of its own process group
    exit          TEXT,                      -- how the agent ended, as the supervisor saw it
    ended_ms      INTEGER,
    session       TEXT,                      -- the session id the run reported
    outcome       TEXT CHECK (outcome IN ('ok','failed')),
    detail        TEXT,
    progress_seq  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX runs_open ON runs(state) WHERE state <> 'done';
CREATE INDEX runs_message ON runs(message_id) WHERE message_id IS NOT NULL;
-- Liveness from the harness's process, not from recent events: the process its hooks
-- last ran under (pid and /proc start time, so a reused pid never counts), and whether a
-- turn is open (its prompt event came, its Stop not yet).
ALTER TABLE sessions ADD COLUMN harness_pid   INTEGER;
ALTER TABLE sessions ADD COLUMN harness_start INTEGER;
ALTER TABLE sessions ADD COLUMN turn_open     INTEGER NOT NULL DEFAULT 0;
"#,
    // 17: DECISIONS 39: when a headless run's prompt was parked (the run ended waiting for
    // it); NULL for a prompt a hook still waits on. A parked prompt outlives its turn and
    // its session's end, up to `wait_until_ms`.
    r#"
ALTER TABLE attention ADD COLUMN parked_ms INTEGER;
"#,
    // 18: DECISIONS 39: the sessions verified starts launched, counted for control.start_limit.
    r#"
CREATE TABLE starts (
    message_id    TEXT PRIMARY KEY,
    nonce         TEXT NOT NULL UNIQUE,
    session_key   TEXT NOT NULL,
    at_ms         INTEGER NOT NULL,
    ended_ms      INTEGER,                   -- NULL while it runs
    text          TEXT                       -- what the model is told, files' paths included
);
"#,
    // 19: DECISIONS 38 `api` for `sp codex`: the Codex app-server turn a prompt sp-sync put in
    // waits for (its end acks it); NULL for a prompt a Stop delivered (the next Stop acks it).
    r#"
ALTER TABLE turn_waits ADD COLUMN api_turn TEXT;
"#,
];
