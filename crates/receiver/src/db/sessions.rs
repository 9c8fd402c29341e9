//! What the page shows of sessions: the live ones, their open attentions and their latest
//! messages with each one's outcome.

use rusqlite::{params, OptionalExtension};
use serde_json::{json, Map, Value};

use super::{fmt_ms, Db};

/// Messages listed per session on the page.
pub(super) const PAGE_MESSAGES: usize = 20;
/// How long, and how many per session, the page is told of prompts that ended (so every
/// open page says how: DECISIONS 34).
pub(super) const CLEARED_FOR_MS: i64 = 10 * 60 * 1000;
pub(super) const CLEARED_LISTED: i64 = 10;

// The page's SQL, shared by both stores where they can (pg_events.rs): the JSON the rows
// become is built here, by the same functions for both. The `COLLATE BINARY`s are SQLite's
// default, spelled out so PostgreSQL sorts text the same way (dialect.rs).
pub(super) const PAGE_SESSIONS: &str = "SELECT key, harness, session_id, first_at, last_at, \
    last_type, info, ended, machine_id FROM sessions s \
    WHERE last_ms > ?1 \
    OR EXISTS (SELECT 1 FROM attentions a WHERE a.session_key = s.key AND a.open = 1 \
        AND (a.parked_until_ms IS NULL OR a.parked_until_ms > ?2)) \
    ORDER BY last_ms DESC, key COLLATE BINARY";
/// DECISIONS 39: a parked prompt is shown until its `parked_until` (?2: now), not after,
/// even if its machine never says it ended.
pub(super) const OPEN_ATTENTIONS: &str = "SELECT attention_id, kind, tool, message, needed_at, \
    input, input_partial, input_sha256, parked_until_ms FROM attentions \
    WHERE session_key = ?1 AND open = 1 AND (parked_until_ms IS NULL OR parked_until_ms > ?2) \
    ORDER BY needed_at COLLATE BINARY, attention_id COLLATE BINARY";
/// The prompts of a session that ended lately, with whether a page's answer for each was
/// delivered: the answer names its prompt in `for`, or in its signed command's `for`.
const CLEARED_ATTENTIONS: &str = "SELECT a.attention_id, a.tool, a.message, a.how, a.cleared_at,
        EXISTS (SELECT 1 FROM messages m JOIN acks k ON k.id = m.id
                WHERE m.session = a.session_key AND m.kind = 'permission.answer'
                  AND k.outcome = 'delivered'
                  AND a.attention_id = coalesce(
                        json_extract(m.body, '$.for'),
                        CASE WHEN json_valid(json_extract(m.body, '$.cmd'))
                             THEN json_extract(json_extract(m.body, '$.cmd'), '$.for') END))
    FROM attentions a
    WHERE a.session_key = ?1 AND a.open = 0 AND a.cleared_at >= ?2
    ORDER BY a.cleared_at COLLATE BINARY DESC, a.attention_id COLLATE BINARY LIMIT ?3";
/// Each message with the ack that says most (DECISIONS 38): its first final one, else its
/// newest `taken` or `progress`.
const SESSION_MESSAGES: &str = "SELECT m.body, m.expires_ms, m.first_polled_at, a.outcome,
        COALESCE(a.detail, json_extract(a.body, '$.code')), a.received_at, a.body
    FROM messages m
    LEFT JOIN acks a ON a.n = (SELECT n FROM acks WHERE acks.id = m.id
        ORDER BY CASE WHEN outcome IN ('taken', 'progress') THEN -n ELSE n - 9000000000000000000 END
        LIMIT 1)
    WHERE m.session = ?1 ORDER BY m.n DESC LIMIT ?2";

/// DECISIONS 40: a session's latest turns (`turn.transcript`), newest first.
pub(super) const TRANSCRIPTS: &str = "SELECT received_at, body FROM events \
    WHERE harness = ?1 AND session_id = ?2 AND type = 'turn.transcript' \
    ORDER BY seq DESC LIMIT ?3";
/// Turns listed per session on the page.
pub(super) const PAGE_TURNS: i64 = 10;
/// DECISIONS 40: the newest tool event or turn end of a session: a `tool.started` there is
/// the tool running now.
pub(super) const LAST_TOOL: &str = "SELECT type, body FROM events \
    WHERE harness = ?1 AND session_id = ?2 \
      AND type IN ('tool.started', 'tool.ended', 'turn.ended', 'session.started') \
    ORDER BY seq DESC LIMIT 1";

/// One turn as the page shows it: the person's prompt and the agent's final text, as the
/// machine sent them (already redacted, DECISIONS 37), and when it came.
pub(super) fn turn_view(received_at: String, body: &str) -> Option<Value> {
    let ev: Value = serde_json::from_str(body).ok()?;
    let d = ev.get("data")?.as_object()?;
    let mut v = Map::new();
    v.insert("at".into(), received_at.into());
    for k in ["user", "assistant", "user_partial", "assistant_partial"] {
        if let Some(x) = d.get(k) {
            v.insert(k.into(), x.clone());
        }
    }
    Some(Value::Object(v))
}

/// The tool running now, from [`LAST_TOOL`]'s row: `{tool, summary}` when it is a
/// `tool.started`.
pub(super) fn current_tool(kind: &str, body: &str) -> Option<Value> {
    if kind != "tool.started" {
        return None;
    }
    let ev: Value = serde_json::from_str(body).ok()?;
    let d = ev.get("data")?;
    Some(json!({"tool": d.get("tool")?, "summary": d.get("summary")}))
}

/// One row of [`PAGE_SESSIONS`].
pub(super) struct SessionRow {
    pub key: String,
    pub harness: String,
    pub sid: String,
    pub first_at: String,
    pub last_at: String,
    pub last_type: String,
    pub info: String,
    pub ended: bool,
    pub machine_id: Option<String>,
}

/// One message as the page lists it.
fn message_view(
    body: &str,
    status: &str,
    detail: Option<String>,
    acked_at: Option<String>,
    ack: Option<&str>,
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
    // How it was delivered and what the agent answered (DECISIONS 38), as the ack said.
    if let Some(Value::Object(a)) = ack.and_then(|a| serde_json::from_str(a).ok()) {
        for k in ["mode", "session", "reply", "seq"] {
            if let Some(x) = a.get(k).filter(|x| !x.is_null()) {
                v.insert(format!("ack_{k}"), x.clone());
            }
        }
    }
    Value::Object(v)
}

/// The call a page's answer was for (its prompt's tool, text and input), kept with the
/// prompt after it ends, so the history names it after a reload.
pub(super) const ANSWERED_CALL: &str = "SELECT tool, message, input FROM attentions \
    WHERE session_key = ?1 AND attention_id = ?2";

/// A row of [`ANSWERED_CALL`].
pub(super) type CallRow = (Option<String>, Option<String>, Option<String>);

/// Adds to each permission answer of `messages` the call it answered, as `call`:
/// `{tool, message, input}` (what the page showed), when `lookup` finds its prompt.
pub(super) fn name_calls<E>(
    messages: &mut [Value],
    mut lookup: impl FnMut(&str) -> Result<Option<CallRow>, E>,
) -> Result<(), E> {
    for m in messages {
        if m.get("kind").and_then(Value::as_str) != Some("permission.answer") {
            continue;
        }
        let Some(id) = m.get("for").and_then(Value::as_str).map(str::to_owned) else {
            continue;
        };
        if let Some((tool, message, input)) = lookup(&id)? {
            let input = input
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .unwrap_or(Value::Null);
            m["call"] = json!({"tool": tool, "message": message, "input": input});
        }
    }
    Ok(())
}

/// One session as the page shows it, with its open attentions, the prompts that ended
/// lately and its latest messages.
pub(super) fn session_view(
    row: SessionRow,
    attentions: Vec<Value>,
    cleared: Vec<Value>,
    messages: Vec<Value>,
    (turns, tool): (Vec<Value>, Option<Value>),
) -> Value {
    let SessionRow {
        key,
        harness,
        sid,
        first_at,
        last_at,
        last_type,
        info,
        ended,
        machine_id,
    } = row;
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
    // DECISIONS 40: what the session is doing, in the page's words. A prompt open on a
    // session no process holds any more (a headless run that ended asking) is parked.
    // A message the machine took and has not finally acked is being worked on (a resumed
    // run's turn begins with no event of its own: Claude Code sends none).
    let answering = messages
        .iter()
        .any(|m| matches!(m["status"].as_str(), Some("taken" | "progress")));
    // DECISIONS 39: so is one the machine said it parked.
    let parked = attentions.iter().any(|a| a["parked_until"].is_string());
    let status = match (attentions.is_empty(), ended, last_type.as_str()) {
        (false, false, _) if !parked => "waiting",
        (false, false, _) => "parked",
        (false, true, _) => "parked",
        (true, _, _) if answering => "working",
        (true, true, _) => "ended",
        (true, false, "turn.ended" | "session.started") => "idle",
        (true, false, _) => "working",
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
    // The paired machine its events came from (DECISIONS 33): the page signs for it.
    if let Some(m) = machine_id {
        v.insert("machine_id".into(), m.into());
    }
    v.insert("state".into(), state.into());
    v.insert("status".into(), status.into());
    if status == "working" || status == "waiting" {
        if let Some(t) = tool {
            v.insert("tool".into(), t);
        }
    }
    v.insert("turns".into(), Value::Array(turns));
    v.insert("last_type".into(), last_type.into());
    v.insert("first_at".into(), first_at.into());
    v.insert("last_at".into(), last_at.into());
    v.insert("attentions".into(), Value::Array(attentions));
    v.insert("cleared".into(), Value::Array(cleared));
    v.insert("messages".into(), Value::Array(messages));
    Value::Object(v)
}

/// One open attention (a row of [`OPEN_ATTENTIONS`]).
pub(super) fn attention_view(
    attention_id: String,
    kind: Option<String>,
    tool: Option<String>,
    message: Option<String>,
    needed_at: Option<String>,
    (input, input_partial, input_sha256): (Option<String>, bool, Option<String>),
    parked_until_ms: Option<i64>,
) -> Value {
    let input = input
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .unwrap_or(Value::Null);
    json!({
        "parked_until": parked_until_ms.map(fmt_ms),
        "attention_id": attention_id,
        "kind": kind,
        "tool": tool,
        "message": message,
        "needed_at": needed_at,
        "input": input,
        "input_partial": input_partial,
        "input_sha256": input_sha256,
    })
}

/// One prompt that ended: how, from what its `attention.cleared` said (`how`) and whether a
/// page's answer for it was delivered (`by_page`).
pub(super) fn cleared_view(
    attention_id: String,
    tool: Option<String>,
    message: Option<String>,
    how: Option<String>,
    cleared_at: Option<String>,
    by_page: bool,
) -> Value {
    let ended = match how.as_deref() {
        Some("answered") if by_page => "page",
        Some("answered") => "terminal",
        Some("timeout") => "timeout",
        Some("cancelled") => "cancelled",
        _ => "unknown",
    };
    json!({
        "attention_id": attention_id,
        "tool": tool,
        "message": message,
        "how": how,
        "ended": ended,
        "cleared_at": cleared_at,
    })
}

/// The ack a message is shown with: its outcome, detail (or code), when it came and its
/// body (for DECISIONS 38's `mode`, `session` and `reply`).
pub(super) struct ShownAck<'a> {
    pub outcome: Option<String>,
    pub detail: Option<String>,
    pub at: Option<String>,
    pub body: Option<&'a str>,
}

/// One message of a session with its outcome: its ack's (the first final one, else the
/// newest `taken` or `progress`), else expired, sent (a poll took it) or queued.
pub(super) fn message_status_view(
    body: &str,
    expires_ms: Option<i64>,
    polled_at: Option<String>,
    ack: ShownAck,
    now_ms: i64,
) -> Value {
    match ack.outcome {
        Some(o) => message_view(body, &o, ack.detail, ack.at, ack.body),
        None if expires_ms.is_some_and(|e| e <= now_ms) => message_view(
            body,
            "expired",
            Some(if polled_at.is_some() {
                "expired before the machine acknowledged it".into()
            } else {
                "expired before the machine picked it up".into()
            }),
            None,
            None,
        ),
        None if polled_at.is_some() => message_view(body, "sent", None, None, None),
        None => message_view(body, "queued", None, None, None),
    }
}

/// The prompt a queued message answers, as [`CLEARED_ATTENTIONS`] reads it from the body:
/// its `for`, else the `for` of its command when that is JSON (a signed envelope's `cmd`).
/// For a store without SQLite's JSON functions.
pub(super) fn answer_for(body: &str) -> Option<String> {
    let m: Value = serde_json::from_str(body).ok()?;
    if let Some(f) = m.get("for").and_then(sql_text) {
        return Some(f);
    }
    let cmd = match m.get("cmd")? {
        Value::String(s) => serde_json::from_str::<Value>(s).ok()?,
        other => other.clone(),
    };
    cmd.get("for").and_then(sql_text)
}

/// An ack's `code`, as `json_extract(body, '$.code')` reads it (for the same stores).
pub(super) fn ack_code(body: &str) -> Option<String> {
    serde_json::from_str::<Value>(body)
        .ok()?
        .get("code")
        .and_then(sql_text)
}

/// A JSON value as SQLite's `json_extract` gives it, compared as text: null is NULL, a
/// string its text, true and false 1 and 0, anything else its JSON.
fn sql_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(u8::from(*b).to_string()),
        other => Some(other.to_string()),
    }
}

impl Db {
    /// Sessions the page shows: any with an event within `live_ms` (an ended one too, so a
    /// message can resume it: DECISIONS 40) and any
    /// with an open attention, most recent first, each with its open attentions and its
    /// latest messages (newest first) and their outcomes.
    pub fn page_sessions(&self, now_ms: i64, live_ms: i64) -> rusqlite::Result<Vec<Value>> {
        let mut st = self.conn.prepare_cached(PAGE_SESSIONS)?;
        let rows: Vec<SessionRow> = st
            .query_map(params![now_ms - live_ms, now_ms], |r| {
                Ok(SessionRow {
                    key: r.get(0)?,
                    harness: r.get(1)?,
                    sid: r.get(2)?,
                    first_at: r.get(3)?,
                    last_at: r.get(4)?,
                    last_type: r.get(5)?,
                    info: r.get(6)?,
                    ended: r.get::<_, i64>(7)? != 0,
                    machine_id: r.get(8)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let attentions = self.open_attentions(&row.key, now_ms)?;
            let cleared = self.cleared_attentions(&row.key, now_ms)?;
            let mut messages = self.session_messages(&row.key, now_ms)?;
            let mut call = self.conn.prepare_cached(ANSWERED_CALL)?;
            name_calls(&mut messages, |id| {
                call.query_row(params![row.key, id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()
            })?;
            let conversation = self.conversation(&row.harness, &row.sid)?;
            out.push(session_view(
                row,
                attentions,
                cleared,
                messages,
                conversation,
            ));
        }
        Ok(out)
    }

    /// DECISIONS 40: the session's latest turns and the tool it runs now.
    fn conversation(
        &self,
        harness: &str,
        sid: &str,
    ) -> rusqlite::Result<(Vec<Value>, Option<Value>)> {
        let mut st = self.conn.prepare_cached(TRANSCRIPTS)?;
        let turns = st
            .query_map(params![harness, sid, PAGE_TURNS], |r| {
                Ok(turn_view(r.get(0)?, &r.get::<_, String>(1)?))
            })?
            .filter_map(|t| t.transpose())
            .collect::<rusqlite::Result<_>>()?;
        let tool = self
            .conn
            .prepare_cached(LAST_TOOL)?
            .query_row(params![harness, sid], |r| {
                Ok(current_tool(
                    &r.get::<_, String>(0)?,
                    &r.get::<_, String>(1)?,
                ))
            })
            .optional()?
            .flatten();
        Ok((turns, tool))
    }

    fn open_attentions(&self, key: &str, now_ms: i64) -> rusqlite::Result<Vec<Value>> {
        let mut st = self.conn.prepare_cached(OPEN_ATTENTIONS)?;
        let rows = st.query_map(params![key, now_ms], |r| {
            Ok(attention_view(
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                (r.get(5)?, r.get(6)?, r.get(7)?),
                r.get(8)?,
            ))
        })?;
        rows.collect()
    }

    /// The prompts of `key` that ended in the last [`CLEARED_FOR_MS`], newest first, each
    /// with `ended`: how, from what its `attention.cleared` said (`how`) and what this
    /// receiver carried: `page` (answered, and a page's answer for it was delivered),
    /// `terminal` (answered otherwise: at the machine), `timeout`, `cancelled` (the session
    /// stopped or ended), or `unknown`.
    fn cleared_attentions(&self, key: &str, now_ms: i64) -> rusqlite::Result<Vec<Value>> {
        let mut st = self.conn.prepare_cached(CLEARED_ATTENTIONS)?;
        let since = super::fmt_ms(now_ms - CLEARED_FOR_MS);
        let rows = st.query_map(params![key, since, CLEARED_LISTED], |r| {
            Ok(cleared_view(
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?;
        rows.collect()
    }

    fn session_messages(&self, key: &str, now_ms: i64) -> rusqlite::Result<Vec<Value>> {
        let mut st = self.conn.prepare_cached(SESSION_MESSAGES)?;
        let rows = st.query_map(params![key, PAGE_MESSAGES as i64], |r| {
            let body: String = r.get(0)?;
            let ack: Option<String> = r.get(6)?;
            Ok(message_status_view(
                &body,
                r.get(1)?,
                r.get(2)?,
                ShownAck {
                    outcome: r.get(3)?,
                    detail: r.get(4)?,
                    at: r.get(5)?,
                    body: ack.as_deref(),
                },
                now_ms,
            ))
        })?;
        rows.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::store::QueueStore;
    use super::*;

    fn ev(seq: i64, ty: &str, data: Value) -> Value {
        json!({"protocol":1,"id":ulid::Ulid::new().to_string(),"type":ty,"time":"2026-01-01T00:00:00.000Z",
            "tier":1,"harness":{"name":"claude-code"},"session":{"id":"s","seq":seq},
            "privacy":{"rulesets":["secrets@1"],"pii":false},"data":data})
    }

    #[test]
    fn a_prompt_that_ended_says_how_from_its_event_and_the_answers_delivered() {
        let sq = super::super::Sqlite::new(Db::open_memory().unwrap());
        let now = 1_800_000_000_000;
        let needed = |seq, id: &str| {
            ev(
                seq,
                "attention.needed",
                json!({"attention_id": id, "tool": "Bash", "message": "Bash ls"}),
            )
        };
        let cleared = |seq, id: &str, how: &str| {
            ev(
                seq,
                "attention.cleared",
                json!({"attention_id": id, "how": how}),
            )
        };
        let evs = [
            needed(1, "p-page"),
            needed(2, "p-term"),
            needed(3, "p-late"),
            needed(4, "p-open"),
        ];
        sq.db()
            .insert_events(&evs.iter().collect::<Vec<_>>(), now, None)
            .unwrap();
        // A signed answer from a page for p-page, delivered; an unsigned one for p-term that
        // the machine refused (the terminal answered it).
        let cmd = json!({"v":1,"t":"sessionpipe.control","machine":"m","kind":"permission.answer",
            "session":"claude-code:s","for":"p-page","decision":"allow"})
        .to_string();
        sq.insert_message(
            "claude-code:s",
            &json!({"id": "m1", "kind": "permission.answer", "cmd": cmd}),
            None,
            now,
        )
        .unwrap();
        sq.insert_message(
            "claude-code:s",
            &json!({"id": "m2", "kind": "permission.answer", "for": "p-term", "decision": "deny"}),
            None,
            now,
        )
        .unwrap();
        sq.insert_acks(
            &[
                json!({"id": "m1", "outcome": "delivered", "at": "2026-01-01T00:00:00.000Z"}),
                json!({"id": "m2", "outcome": "expired", "at": "2026-01-01T00:00:00.000Z"}),
            ],
            now,
        )
        .unwrap();
        let evs = [
            cleared(5, "p-page", "answered"),
            cleared(6, "p-term", "answered"),
        ];
        sq.db()
            .insert_events(&evs.iter().collect::<Vec<_>>(), now, None)
            .unwrap();
        // Ended long ago: no longer listed.
        sq.db()
            .insert_events(
                &[&cleared(7, "p-late", "timeout")],
                now - CLEARED_FOR_MS - 1,
                None,
            )
            .unwrap();
        let s = &sq.db().page_sessions(now, 3_600_000).unwrap()[0];
        let ended: Vec<(&str, &str)> = s["cleared"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["attention_id"].as_str().unwrap(),
                    c["ended"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(ended.len(), 2, "{ended:?}");
        assert!(ended.contains(&("p-page", "page")), "{ended:?}");
        assert!(ended.contains(&("p-term", "terminal")), "{ended:?}");
        assert_eq!(s["attentions"][0]["attention_id"], "p-open");
    }

    /// DECISIONS 40: a session reads as its turns, with its status and the tool it runs.
    #[test]
    fn a_session_shows_its_turns_its_status_and_its_current_tool() {
        let mut db = Db::open_memory().unwrap();
        let now = 1_800_000_000_000;
        let page = |db: &Db| db.page_sessions(now, 3_600_000).unwrap()[0].clone();
        let mut transcript = ev(
            1,
            "turn.transcript",
            json!({"user": "fix the build", "assistant": "Fixed: a missing import."}),
        );
        transcript["tier"] = json!(2);
        let evs = [
            ev(0, "session.started", json!({"source": "startup"})),
            transcript,
            ev(2, "turn.ended", json!({"reason": "stop"})),
        ];
        db.insert_events(&evs.iter().collect::<Vec<_>>(), now, None)
            .unwrap();
        let s = page(&db);
        assert_eq!(s["status"], "idle");
        assert_eq!(s["turns"][0]["user"], "fix the build");
        assert_eq!(s["turns"][0]["assistant"], "Fixed: a missing import.");
        assert!(s.get("tool").is_none());
        let started = ev(
            3,
            "tool.started",
            json!({"tool": "Bash", "summary": "cargo build"}),
        );
        db.insert_events(&[&started], now, None).unwrap();
        let s = page(&db);
        assert_eq!(s["status"], "working");
        assert_eq!(s["tool"], json!({"tool": "Bash", "summary": "cargo build"}));
        let needed = ev(
            4,
            "attention.needed",
            json!({"attention_id": "p1", "tool": "Bash"}),
        );
        db.insert_events(&[&needed], now, None).unwrap();
        assert_eq!(page(&db)["status"], "waiting");
        let ended = ev(5, "tool.ended", json!({"tool": "Bash", "ok": true}));
        let cleared = ev(
            6,
            "attention.cleared",
            json!({"attention_id": "p1", "how": "answered"}),
        );
        db.insert_events(&[&cleared, &ended], now, None).unwrap();
        let s = page(&db);
        assert_eq!(s["status"], "working");
        assert!(s.get("tool").is_none(), "the tool ended");
        // Ended, it stays listed (a message can resume it), and says so.
        let ended = ev(7, "session.ended", json!({}));
        db.insert_events(&[&ended], now, None).unwrap();
        let s = page(&db);
        assert_eq!(s["status"], "ended");
        assert_eq!(s["turns"][0]["user"], "fix the build");
    }

    /// DECISIONS 38 and 40: a session the machine resumes for a message shows working from
    /// the message's `taken` until its final ack, though no event said a turn began (a
    /// resumed Claude Code run sends only session.started before its turn ends).
    #[test]
    fn a_session_answering_a_taken_message_is_working_until_its_final_ack() {
        let sq = super::super::Sqlite::new(Db::open_memory().unwrap());
        let now = 1_800_000_000_000;
        let status = |sq: &super::super::Sqlite| {
            sq.db().page_sessions(now, 3_600_000).unwrap()[0]["status"].clone()
        };
        let evs = [
            ev(0, "session.started", json!({"source": "startup"})),
            ev(1, "turn.ended", json!({"reason": "stop"})),
            ev(2, "session.ended", json!({})),
        ];
        sq.db()
            .insert_events(&evs.iter().collect::<Vec<_>>(), now, None)
            .unwrap();
        sq.insert_message(
            "claude-code:s",
            &json!({"id": "m1", "kind": "prompt", "text": "and now the tests"}),
            None,
            now,
        )
        .unwrap();
        assert_eq!(status(&sq), "ended", "queued, not yet taken");
        let ack = |outcome: &str| json!({"id": "m1", "outcome": outcome, "at": "2026-01-01T00:00:00.000Z", "seq": 1});
        sq.insert_acks(&[ack("taken")], now).unwrap();
        assert_eq!(status(&sq), "working");
        // The resumed run's own session.started would read idle: the message says working.
        sq.db()
            .insert_events(
                &[&ev(3, "session.started", json!({"source": "resume"}))],
                now,
                None,
            )
            .unwrap();
        sq.insert_acks(&[ack("progress")], now).unwrap();
        assert_eq!(status(&sq), "working");
        sq.insert_acks(&[ack("delivered")], now).unwrap();
        assert_eq!(status(&sq), "idle");
        sq.db()
            .insert_events(&[&ev(4, "session.ended", json!({}))], now, None)
            .unwrap();
        assert_eq!(status(&sq), "ended");
    }

    /// `answer_for` and `ack_code` read a body as SQLite's JSON functions in
    /// `CLEARED_ATTENTIONS` and `SESSION_MESSAGES` do (PostgreSQL's page uses them).
    #[test]
    fn answer_for_and_ack_code_read_as_sqlite_does() {
        let db = Db::open_memory().unwrap();
        let sqlite = |sql: &str, body: &str| -> Option<String> {
            let v: rusqlite::types::Value = db.conn.query_row(sql, [body], |r| r.get(0)).unwrap();
            match v {
                rusqlite::types::Value::Null => None,
                rusqlite::types::Value::Integer(i) => Some(i.to_string()),
                rusqlite::types::Value::Text(t) => Some(t),
                other => panic!("{other:?}"),
            }
        };
        let cmd = |c: &str| json!({"cmd": c}).to_string();
        let bodies = [
            json!({"for": "p1", "cmd": "{\"for\": \"p2\"}"}).to_string(),
            json!({"for": null, "cmd": "{\"for\": \"p2\"}"}).to_string(),
            cmd("{\"for\": \"p\\u0000\"}"),
            cmd("not json"),
            cmd("{\"for\": 7}"),
            cmd("[1]"),
            cmd("5"),
            json!({"cmd": {"for": "p3"}}).to_string(),
            json!({"cmd": 5}).to_string(),
            json!({"for": 12}).to_string(),
            json!({"for": true}).to_string(),
            json!({"for": {"a": [1, "x"]}}).to_string(),
            json!({"text": "a\u{0}b"}).to_string(),
            json!({}).to_string(),
        ];
        let for_sql = "SELECT coalesce(json_extract(?1, '$.for'),
            CASE WHEN json_valid(json_extract(?1, '$.cmd'))
                 THEN json_extract(json_extract(?1, '$.cmd'), '$.for') END)";
        for b in &bodies {
            assert_eq!(answer_for(b), sqlite(for_sql, b), "{b}");
        }
        for b in [
            json!({"code": "stale_key"}).to_string(),
            json!({"code": null, "detail": "x\u{0}"}).to_string(),
            json!({"outcome": "delivered"}).to_string(),
        ] {
            assert_eq!(
                ack_code(&b),
                sqlite("SELECT json_extract(?1, '$.code')", &b),
                "{b}"
            );
        }
    }
}
