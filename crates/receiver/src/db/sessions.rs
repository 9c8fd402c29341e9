//! What the page shows of sessions: the live ones, their open attentions and their latest
//! messages with each one's outcome. Written once for both stores (driver.rs): the SQL
//! reads rows, and the JSON the page sees is built here from them, for both alike.
//!
//! The JSON inside stored bodies (whether a page's answer for a prompt was delivered; an
//! ack's `code`) is read here too, not by the database: PostgreSQL 15 has no test for valid
//! JSON, and its JSON functions refuse a `\u0000` that SQLite's take, which would break
//! the page for everyone on one message. `answer_for` and `ack_code` read a body as
//! SQLite's `json_extract` does (tested below).

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use super::driver::{args, Conn, Row};
use super::fmt_ms;

/// Messages listed per session on the page.
const PAGE_MESSAGES: i64 = 20;
/// How long, and how many per session, the page is told of prompts that ended (so every
/// open page says how: DECISIONS 34).
pub(super) const CLEARED_FOR_MS: i64 = 10 * 60 * 1000;
const CLEARED_LISTED: i64 = 10;

// The page's SQL, one text for both stores. The `COLLATE BINARY`s are SQLite's default,
// spelled out so PostgreSQL sorts text the same way (dialect.rs).
const PAGE_SESSIONS: &str = "SELECT key, harness, session_id, first_at, last_at, \
    last_type, info, ended, machine_id FROM sessions s \
    WHERE last_ms > ?1 \
    OR EXISTS (SELECT 1 FROM attentions a WHERE a.session_key = s.key AND a.open = 1 \
        AND (a.parked_until_ms IS NULL OR a.parked_until_ms > ?2)) \
    ORDER BY last_ms DESC, key COLLATE BINARY";
/// DECISIONS 39: a parked prompt is shown until its `parked_until` (?2: now), not after,
/// even if its machine never says it ended.
const OPEN_ATTENTIONS: &str = "SELECT attention_id, kind, tool, message, needed_at, \
    input, input_partial, input_sha256, parked_until_ms FROM attentions \
    WHERE session_key = ?1 AND open = 1 AND (parked_until_ms IS NULL OR parked_until_ms > ?2) \
    ORDER BY needed_at COLLATE BINARY, attention_id COLLATE BINARY";
/// The prompts of a session that ended lately (whether a page's answer for each was
/// delivered comes from [`DELIVERED_ANSWERS`]).
const CLEARED: &str = "SELECT attention_id, tool, message, how, cleared_at FROM attentions \
    WHERE session_key = ?1 AND open = 0 AND cleared_at >= ?2 \
    ORDER BY cleared_at COLLATE BINARY DESC, attention_id COLLATE BINARY LIMIT ?3";
/// The bodies of a session's answers to prompts that were delivered: each names its prompt
/// in `for`, or in its signed command's `for` ([`answer_for`]).
const DELIVERED_ANSWERS: &str = "SELECT m.body FROM messages m JOIN acks k ON k.id = m.id \
    WHERE m.session = ?1 AND m.kind = 'permission.answer' AND k.outcome = 'delivered'";
/// Each message with the ack that says most (DECISIONS 38): its first final one, else its
/// newest `taken` or `progress`; its body gives the `code`, `mode` and `reply` shown.
const SESSION_MESSAGES: &str = "SELECT m.body, m.expires_ms, m.first_polled_at, a.outcome, \
    a.detail, a.body, a.received_at FROM messages m \
    LEFT JOIN acks a ON a.n = (SELECT n FROM acks WHERE acks.id = m.id \
    ORDER BY CASE WHEN outcome IN ('taken', 'progress') THEN -n ELSE n - 9000000000000000000 END \
    LIMIT 1) \
    WHERE m.session = ?1 ORDER BY m.n DESC LIMIT ?2";

/// DECISIONS 40: a session's latest turns (`turn.transcript`), newest first.
const TRANSCRIPTS: &str = "SELECT received_at, body FROM events \
    WHERE harness = ?1 AND session_id = ?2 AND type = 'turn.transcript' \
    ORDER BY seq DESC LIMIT ?3";
/// Turns listed per session on the page.
const PAGE_TURNS: i64 = 10;
/// DECISIONS 40: the newest tool event or turn end of a session: a `tool.started` there is
/// the tool running now.
const LAST_TOOL: &str = "SELECT type, body FROM events \
    WHERE harness = ?1 AND session_id = ?2 \
      AND type IN ('tool.started', 'tool.ended', 'turn.ended', 'session.started') \
    ORDER BY seq DESC LIMIT 1";

/// One turn as the page shows it: the person's prompt and the agent's final text, as the
/// machine sent them (already redacted, DECISIONS 37), and when it came.
fn turn_view(received_at: String, body: &str) -> Option<Value> {
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
fn current_tool(kind: &str, body: &str) -> Option<Value> {
    if kind != "tool.started" {
        return None;
    }
    let ev: Value = serde_json::from_str(body).ok()?;
    let d = ev.get("data")?;
    Some(json!({"tool": d.get("tool")?, "summary": d.get("summary")}))
}

/// One row of [`PAGE_SESSIONS`].
struct SessionRow {
    key: String,
    harness: String,
    sid: String,
    first_at: String,
    last_at: String,
    last_type: String,
    info: String,
    ended: bool,
    machine_id: Option<String>,
}

impl SessionRow {
    fn read(r: &Row) -> anyhow::Result<SessionRow> {
        Ok(SessionRow {
            key: r.text(0)?,
            harness: r.text(1)?,
            sid: r.text(2)?,
            first_at: r.text(3)?,
            last_at: r.text(4)?,
            last_type: r.text(5)?,
            info: r.text(6)?,
            ended: r.int(7)? != 0,
            machine_id: r.opt_text(8)?,
        })
    }
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
const ANSWERED_CALL: &str = "SELECT tool, message, input FROM attentions \
    WHERE session_key = ?1 AND attention_id = ?2";

/// Adds to each permission answer of `messages` the call it answered, as `call`:
/// `{tool, message, input}` (what the page showed), when its prompt is still stored.
fn name_calls(c: &mut dyn Conn, key: &str, messages: &mut [Value]) -> anyhow::Result<()> {
    for m in messages {
        if m.get("kind").and_then(Value::as_str) != Some("permission.answer") {
            continue;
        }
        let Some(id) = m.get("for").and_then(Value::as_str).map(str::to_owned) else {
            continue;
        };
        let id = c.text(&id);
        if let Some(r) = c.row(ANSWERED_CALL, args![key, &*id])? {
            let input = r
                .opt_text(2)?
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .unwrap_or(Value::Null);
            m["call"] = json!({"tool": r.opt_text(0)?, "message": r.opt_text(1)?, "input": input});
        }
    }
    Ok(())
}

/// One session as the page shows it, with its open attentions, the prompts that ended
/// lately and its latest messages.
fn session_view(
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
struct AttentionRow {
    attention_id: String,
    kind: Option<String>,
    tool: Option<String>,
    message: Option<String>,
    needed_at: Option<String>,
    /// The call's input as JSON text (DECISIONS 31).
    input: Option<String>,
    input_partial: bool,
    input_sha256: Option<String>,
    parked_until_ms: Option<i64>,
}

impl AttentionRow {
    fn read(r: &Row) -> anyhow::Result<AttentionRow> {
        Ok(AttentionRow {
            attention_id: r.text(0)?,
            kind: r.opt_text(1)?,
            tool: r.opt_text(2)?,
            message: r.opt_text(3)?,
            needed_at: r.opt_text(4)?,
            input: r.opt_text(5)?,
            input_partial: r.int(6)? != 0,
            input_sha256: r.opt_text(7)?,
            parked_until_ms: r.opt_int(8)?,
        })
    }
}

/// One open attention as the page shows it.
fn attention_view(a: AttentionRow) -> Value {
    let input = a
        .input
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .unwrap_or(Value::Null);
    json!({
        "parked_until": a.parked_until_ms.map(fmt_ms),
        "attention_id": a.attention_id,
        "kind": a.kind,
        "tool": a.tool,
        "message": a.message,
        "needed_at": a.needed_at,
        "input": input,
        "input_partial": a.input_partial,
        "input_sha256": a.input_sha256,
    })
}

/// One prompt that ended (a row of [`CLEARED`]).
struct ClearedRow {
    attention_id: String,
    tool: Option<String>,
    message: Option<String>,
    how: Option<String>,
    cleared_at: Option<String>,
}

impl ClearedRow {
    fn read(r: &Row) -> anyhow::Result<ClearedRow> {
        Ok(ClearedRow {
            attention_id: r.text(0)?,
            tool: r.opt_text(1)?,
            message: r.opt_text(2)?,
            how: r.opt_text(3)?,
            cleared_at: r.opt_text(4)?,
        })
    }
}

/// One prompt that ended: how, from what its `attention.cleared` said (`how`) and whether a
/// page's answer for it was delivered (`by_page`).
fn cleared_view(row: ClearedRow, by_page: bool) -> Value {
    let ClearedRow {
        attention_id,
        tool,
        message,
        how,
        cleared_at,
    } = row;
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

/// One message of a session with the ack it is shown with (a row of
/// [`SESSION_MESSAGES`]): its outcome, detail (else its body's `code`), when it came and
/// its body (for DECISIONS 38's `mode`, `session` and `reply`).
struct MessageRow {
    body: String,
    expires_ms: Option<i64>,
    polled_at: Option<String>,
    outcome: Option<String>,
    detail: Option<String>,
    ack: Option<String>,
    acked_at: Option<String>,
}

impl MessageRow {
    fn read(r: &Row) -> anyhow::Result<MessageRow> {
        let ack = r.opt_text(5)?;
        Ok(MessageRow {
            body: r.text(0)?,
            expires_ms: r.opt_int(1)?,
            polled_at: r.opt_text(2)?,
            outcome: r.opt_text(3)?,
            detail: r.opt_text(4)?.or_else(|| ack.as_deref().and_then(ack_code)),
            ack,
            acked_at: r.opt_text(6)?,
        })
    }
}

/// One message of a session with its outcome: its ack's (the first final one, else the
/// newest `taken` or `progress`), else expired, sent (a poll took it) or queued.
fn message_status_view(m: MessageRow, now_ms: i64) -> Value {
    let body = m.body.as_str();
    match m.outcome {
        Some(o) => message_view(body, &o, m.detail, m.acked_at, m.ack.as_deref()),
        None if m.expires_ms.is_some_and(|e| e <= now_ms) => message_view(
            body,
            "expired",
            Some(if m.polled_at.is_some() {
                "expired before the machine acknowledged it".into()
            } else {
                "expired before the machine picked it up".into()
            }),
            None,
            None,
        ),
        None if m.polled_at.is_some() => message_view(body, "sent", None, None, None),
        None => message_view(body, "queued", None, None, None),
    }
}

/// The prompt a queued message answers, read from its body: its `for`, else the `for` of
/// its command when that is JSON (a signed envelope's `cmd`).
fn answer_for(body: &str) -> Option<String> {
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

/// An ack's `code`, as `json_extract(body, '$.code')` reads it.
fn ack_code(body: &str) -> Option<String> {
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

/// Sessions the page shows: any with an event within `live_ms` (an ended one too, so a
/// message can resume it: DECISIONS 40) and any with an open attention, most recent first,
/// each with its open attentions, the prompts that ended lately, its latest messages (newest
/// first) and their outcomes, and its latest turns. Read in one snapshot (`Engine::snapshot`).
pub(super) fn page_sessions(
    c: &mut dyn Conn,
    now_ms: i64,
    live_ms: i64,
) -> anyhow::Result<Vec<Value>> {
    let rows = c.rows(PAGE_SESSIONS, args![now_ms - live_ms, now_ms])?;
    let since = fmt_ms(now_ms - CLEARED_FOR_MS);
    rows.iter()
        .map(|r| {
            let row = SessionRow::read(r)?;
            let key = row.key.as_str();
            let attentions = c
                .rows(OPEN_ATTENTIONS, args![key, now_ms])?
                .iter()
                .map(|r| AttentionRow::read(r).map(attention_view))
                .collect::<anyhow::Result<_>>()?;
            let cleared = cleared_attentions(c, key, &since)?;
            let mut messages = c
                .rows(SESSION_MESSAGES, args![key, PAGE_MESSAGES])?
                .iter()
                .map(|r| Ok(message_status_view(MessageRow::read(r)?, now_ms)))
                .collect::<anyhow::Result<Vec<_>>>()?;
            name_calls(c, key, &mut messages)?;
            let conversation = conversation(c, &row.harness, &row.sid)?;
            Ok(session_view(
                row,
                attentions,
                cleared,
                messages,
                conversation,
            ))
        })
        .collect()
}

/// The prompts of `key` that ended since `since`, newest first, each with `ended`: how,
/// from what its `attention.cleared` said (`how`) and what this receiver carried: `page`
/// (answered, and a page's answer for it was delivered), `terminal` (answered otherwise:
/// at the machine), `timeout`, `cancelled` (the session stopped or ended), or `unknown`.
fn cleared_attentions(c: &mut dyn Conn, key: &str, since: &str) -> anyhow::Result<Vec<Value>> {
    let ended = c
        .rows(CLEARED, args![key, since, CLEARED_LISTED])?
        .iter()
        .map(ClearedRow::read)
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Only an answered prompt asks whether the answer came from a page.
    let by_page: HashSet<String> = if ended.iter().any(|r| r.how.as_deref() == Some("answered")) {
        let answers = c.rows(DELIVERED_ANSWERS, args![key])?;
        answers
            .iter()
            .map(|r| Ok(answer_for(&r.text(0)?)))
            .filter_map(Result::transpose)
            .collect::<anyhow::Result<_>>()?
    } else {
        HashSet::new()
    };
    Ok(ended
        .into_iter()
        .map(|r| {
            let page = by_page.contains(&r.attention_id);
            cleared_view(r, page)
        })
        .collect())
}

/// DECISIONS 40: the session's latest turns and the tool it runs now.
fn conversation(
    c: &mut dyn Conn,
    harness: &str,
    sid: &str,
) -> anyhow::Result<(Vec<Value>, Option<Value>)> {
    let mut turns = Vec::new();
    for r in c.rows(TRANSCRIPTS, args![harness, sid, PAGE_TURNS])? {
        turns.extend(turn_view(r.text(0)?, &r.text(1)?));
    }
    let tool = match c.row(LAST_TOOL, args![harness, sid])? {
        Some(r) => current_tool(&r.text(0)?, &r.text(1)?),
        None => None,
    };
    Ok((turns, tool))
}

#[cfg(test)]
mod tests {
    use super::super::store::{EventStore, QueueStore};
    use super::super::{Db, Sqlite};
    use super::*;

    fn ev(seq: i64, ty: &str, data: Value) -> Value {
        json!({"protocol":1,"id":ulid::Ulid::new().to_string(),"type":ty,"time":"2026-01-01T00:00:00.000Z",
            "tier":1,"harness":{"name":"claude-code"},"session":{"id":"s","seq":seq},
            "privacy":{"rulesets":["secrets@1"],"pii":false},"data":data})
    }

    /// DECISIONS 40: a session reads as its turns, with its status and the tool it runs.
    #[test]
    fn a_session_shows_its_turns_its_status_and_its_current_tool() {
        let db = Sqlite::new(Db::open_memory().unwrap());
        let now = 1_800_000_000_000;
        let page = |db: &Sqlite| db.page_sessions(now, 3_600_000).unwrap()[0].clone();
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
        let sq = Sqlite::new(Db::open_memory().unwrap());
        let now = 1_800_000_000_000;
        let status = |sq: &Sqlite| sq.page_sessions(now, 3_600_000).unwrap()[0]["status"].clone();
        let evs = [
            ev(0, "session.started", json!({"source": "startup"})),
            ev(1, "turn.ended", json!({"reason": "stop"})),
            ev(2, "session.ended", json!({})),
        ];
        sq.insert_events(&evs.iter().collect::<Vec<_>>(), now, None)
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
        sq.insert_events(
            &[&ev(3, "session.started", json!({"source": "resume"}))],
            now,
            None,
        )
        .unwrap();
        sq.insert_acks(&[ack("progress")], now).unwrap();
        assert_eq!(status(&sq), "working");
        sq.insert_acks(&[ack("delivered")], now).unwrap();
        assert_eq!(status(&sq), "idle");
        sq.insert_events(&[&ev(4, "session.ended", json!({}))], now, None)
            .unwrap();
        assert_eq!(status(&sq), "ended");
    }

    /// `answer_for` and `ack_code` read a body as SQLite's JSON functions do (what the page
    /// asked SQLite before it was written once for both stores).
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
