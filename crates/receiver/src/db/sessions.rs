//! What the page shows of sessions: the live ones, their open attentions and their latest
//! messages with each one's outcome.

use rusqlite::params;
use serde_json::{json, Map, Value};

use super::Db;

/// Messages listed per session on the page.
const PAGE_MESSAGES: usize = 20;

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
            "SELECT attention_id, kind, tool, message, needed_at, input, input_partial FROM attentions
             WHERE session_key = ?1 AND open = 1 ORDER BY needed_at, attention_id",
        )?;
        let rows = st.query_map(params![key], |r| {
            let input = r
                .get::<_, Option<String>>(5)?
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .unwrap_or(Value::Null);
            Ok(json!({
                "attention_id": r.get::<_, String>(0)?,
                "kind": r.get::<_, Option<String>>(1)?,
                "tool": r.get::<_, Option<String>>(2)?,
                "message": r.get::<_, Option<String>>(3)?,
                "needed_at": r.get::<_, Option<String>>(4)?,
                "input": input,
                "input_partial": r.get::<_, bool>(6)?,
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
}
