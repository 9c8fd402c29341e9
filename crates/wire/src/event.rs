//! Event envelopes (protocol §3.1) for the events this sender emits: DECISIONS 18's three,
//! and `turn.ended` (issue 14: the receiver tells the person an agent is done).
use serde_json::{json, Map, Value};

pub const SESSION_STARTED: &str = "session.started";
pub const ATTENTION_NEEDED: &str = "attention.needed";
pub const ATTENTION_CLEARED: &str = "attention.cleared";
pub const TURN_ENDED: &str = "turn.ended";

/// How an attention ended (DECISIONS 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    Answered,
    Timeout,
    Cancelled,
    Unknown,
}

impl How {
    pub fn as_str(self) -> &'static str {
        match self {
            How::Answered => "answered",
            How::Timeout => "timeout",
            How::Cancelled => "cancelled",
            How::Unknown => "unknown",
        }
    }
}

/// One stored event, as the outbox holds it; rendered per sink at send time.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub rowid: i64,
    pub event_id: String,
    pub kind: String,
    pub time: String,
    pub harness: String,
    pub harness_event: String,
    pub session_id: String,
    pub seq: i64,
    pub cwd: Option<String>,
    pub data: Value,
}

/// Renders the envelope for a sink at `tier`: tier-0 sinks get only the fields allowed at tier 0.
pub fn envelope(e: &StoredEvent, tier: u8, machine: Option<&str>) -> Value {
    let mut data = e.data.clone();
    if tier == 0 && e.kind == ATTENTION_NEEDED {
        if let Some(o) = data.as_object_mut() {
            o.retain(|k, _| k == "attention_id" || k == "kind");
        }
    }
    let mut session = Map::new();
    session.insert("id".into(), json!(e.session_id));
    session.insert("seq".into(), json!(e.seq));
    if let Some(m) = machine {
        session.insert("machine".into(), json!(crate::text::truncate(m, 80)));
    }
    if let Some(c) = &e.cwd {
        session.insert("cwd".into(), json!(crate::text::truncate(c, 1024)));
    }
    let mut harness = Map::new();
    harness.insert("name".into(), json!(e.harness));
    if !e.harness_event.is_empty() {
        harness.insert(
            "event".into(),
            json!(crate::text::truncate(&e.harness_event, 64)),
        );
    }
    json!({
        "protocol": 1,
        "id": e.event_id,
        "type": e.kind,
        "time": e.time,
        "tier": tier,
        "harness": harness,
        "session": session,
        "privacy": { "rulesets": ["secrets@1"], "pii": false },
        "data": data,
    })
}

pub fn session_started(source: &str) -> Value {
    let source = match source {
        "startup" | "resume" | "clear" | "compact" | "fork" => source,
        _ => "unknown",
    };
    json!({ "source": source })
}

pub fn attention_needed(attention_id: &str, tool: Option<&str>, message: Option<&str>) -> Value {
    let mut d = Map::new();
    d.insert("attention_id".into(), json!(attention_id));
    d.insert("kind".into(), json!("permission"));
    if let Some(t) = tool.filter(|t| is_tool_name(t)) {
        d.insert("tool".into(), json!(t));
    }
    if let Some(m) = message {
        d.insert(
            "message".into(),
            json!(crate::redact::redact_message(m, 200)),
        );
    }
    Value::Object(d)
}

pub fn attention_cleared(attention_id: &str, how: How) -> Value {
    json!({ "attention_id": attention_id, "how": how.as_str() })
}

/// Why a turn ended (protocol §3.2): `stop` (the agent finished) or `interrupt` (the
/// person stopped it). The protocol's `error` needs a failure hook we do not register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEnd {
    Stop,
    Interrupt,
}

impl TurnEnd {
    pub fn as_str(self) -> &'static str {
        match self {
            TurnEnd::Stop => "stop",
            TurnEnd::Interrupt => "interrupt",
        }
    }
}

pub fn turn_ended(reason: TurnEnd) -> Value {
    json!({ "reason": reason.as_str() })
}

/// `^[A-Za-z0-9_.:-]{1,120}$`
fn is_tool_name(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 120
        && t.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b':' | b'-'))
}
