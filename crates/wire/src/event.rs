//! Event envelopes (protocol §3.1) for the events this sender emits: DECISIONS 18's three,
//! and `turn.ended` (issue 14: the receiver tells the person an agent is done); DECISIONS 40's
//! `turn.transcript` (tier 2) and `tool.started` / `tool.ended` (tier 1).
use serde_json::{json, Map, Value};

pub const SESSION_STARTED: &str = "session.started";
pub const ATTENTION_NEEDED: &str = "attention.needed";
pub const ATTENTION_CLEARED: &str = "attention.cleared";
pub const TURN_ENDED: &str = "turn.ended";
/// The session's permission mode changed and nothing else happened (issue 40): the page
/// learns it from this event's `session.permission_mode` without waiting for the next event.
pub const SESSION_MODE: &str = "session.mode";
/// The harness said the session ended (its SessionEnd): the page shows it ended (DECISIONS 40).
pub const SESSION_ENDED: &str = "session.ended";
pub const TURN_TRANSCRIPT: &str = "turn.transcript";
pub const TOOL_STARTED: &str = "tool.started";
pub const TOOL_ENDED: &str = "tool.ended";

/// DECISIONS 40: the most characters of a turn's prompt, and of its final text, a
/// `turn.transcript` carries.
pub const TRANSCRIPT_MAX: usize = 20_000;
/// DECISIONS 40: a tool event's one-line summary, at most this many characters.
pub const TOOL_SUMMARY_MAX: usize = 200;

/// The lowest sink tier an event of `kind` is sent at (DECISIONS 40): a sink below it never
/// gets it.
pub fn min_tier(kind: &str) -> u8 {
    match kind {
        TURN_TRANSCRIPT => 2,
        TOOL_STARTED | TOOL_ENDED => 1,
        _ => 0,
    }
}

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
    /// The session's permission mode as its hooks last reported it, read at send time, so the
    /// page knows when a message needs a touch (DECISIONS 36).
    pub permission_mode: Option<String>,
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
    if let Some(m) = &e.permission_mode {
        session.insert(
            "permission_mode".into(),
            json!(crate::text::truncate(m, 40)),
        );
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

/// The data of a [`SESSION_MODE`] event: the mode it was emitted for (the envelope's
/// `session.permission_mode`, read at send time, may already be a later one).
pub fn session_mode(mode: &str) -> Value {
    json!({ "permission_mode": crate::text::truncate(mode, 40) })
}

pub fn attention_needed(attention_id: &str, tool: Option<&str>, message: Option<&str>) -> Value {
    attention_needed_masked(attention_id, tool, message).0
}

/// [`attention_needed`], and whether its message was masked.
fn attention_needed_masked(
    attention_id: &str,
    tool: Option<&str>,
    message: Option<&str>,
) -> (Value, bool) {
    let mut masked = false;
    let mut d = Map::new();
    d.insert("attention_id".into(), json!(attention_id));
    d.insert("kind".into(), json!("permission"));
    if let Some(t) = tool.filter(|t| is_tool_name(t)) {
        d.insert("tool".into(), json!(t));
    }
    if let Some(m) = message {
        let (shown, m) = crate::redact::redact_message(m, 200);
        masked = m;
        d.insert("message".into(), json!(shown));
    }
    (Value::Object(d), masked)
}

/// DECISIONS 31: the most characters of a call's input an `attention.needed` carries.
pub const SHOWN_INPUT_MAX: usize = 4000;

/// DECISIONS 31 and 37: the call's input as the person is shown it (tier >= 1): redacted
/// ([`crate::redact::redact_value`]), the whole at most [`SHOWN_INPUT_MAX`] characters of JSON
/// (long strings cut to fit). The flag says whether anything was masked or cut, so the page
/// marks it "parts hidden" and never sends back, groups or grants an input it did not see
/// whole. `None` when no object fits.
pub fn shown_input(input: &Value) -> Option<(Value, bool)> {
    fn walk(v: &Value, cap: usize, changed: &mut bool, depth: usize) -> Value {
        match v {
            Value::String(s) => {
                let cut = crate::text::truncate(s, cap);
                if cut.len() != s.len() {
                    *changed = true;
                }
                Value::String(cut)
            }
            Value::Array(a) if depth < 8 => Value::Array(
                a.iter()
                    .take(100)
                    .map(|x| walk(x, cap, changed, depth + 1))
                    .collect(),
            ),
            Value::Object(o) if depth < 8 => Value::Object(
                o.iter()
                    .take(100)
                    .map(|(k, x)| (k.clone(), walk(x, cap, changed, depth + 1)))
                    .collect(),
            ),
            Value::Array(_) | Value::Object(_) => {
                *changed = true;
                Value::Null
            }
            other => other.clone(),
        }
    }
    if !input.is_object() {
        return None;
    }
    let (red, masked) = crate::redact::redact_value(input);
    for cap in [SHOWN_INPUT_MAX, 1500, 600, 200, 60] {
        let mut changed = masked;
        let shown = walk(&red, cap, &mut changed, 0);
        let len = shown.to_string().chars().count();
        if len <= SHOWN_INPUT_MAX {
            let whole = count_nodes(input) == count_nodes(&shown);
            return Some((shown, changed || !whole));
        }
    }
    None
}

/// sha256 over the exact input as JSON (its key order kept), lower-case hex: what the page
/// groups identical prompts by (DECISIONS 37), never by what it shows.
pub fn input_sha256(input: &Value) -> String {
    use sha2::{Digest, Sha256};
    crate::hex::encode(Sha256::digest(
        serde_json::to_vec(input).unwrap_or_default(),
    ))
}

fn count_nodes(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(count_nodes).sum::<usize>(),
        Value::Object(o) => 1 + o.values().map(count_nodes).sum::<usize>(),
        _ => 1,
    }
}

/// `attention.needed` with the call's input as shown ([`shown_input`]; DECISIONS 31).
pub fn attention_needed_shown(
    attention_id: &str,
    tool: Option<&str>,
    message: Option<&str>,
    input: Option<&Value>,
) -> Value {
    let (mut d, message_masked) = attention_needed_masked(attention_id, tool, message);
    let Some(o) = d.as_object_mut() else {
        return d;
    };
    let shown = input.and_then(|whole| Some((whole, shown_input(whole)?)));
    if shown.is_none() && message_masked {
        // No input to show: the message is all the person sees, and it has parts hidden.
        o.insert("input_partial".into(), json!(true));
    }
    if let Some((whole, (shown, partial))) = shown {
        o.insert("input".into(), shown);
        if partial {
            o.insert("input_partial".into(), json!(true));
        } else {
            // Only for an input shown whole: the hash then tells the receiver nothing the
            // shown input does not, where a hash of a masked input could be guessed at
            // offline (a short password inside a command the page shows around it).
            o.insert("input_sha256".into(), json!(input_sha256(whole)));
        }
    }
    d
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

/// DECISIONS 40: a turn's prompt (`user`) and final text (`assistant`), each redacted
/// (DECISIONS 37) as a whole, then cut to [`TRANSCRIPT_MAX`] characters; `None` when the turn
/// has neither.
pub fn turn_transcript(user: Option<&str>, assistant: Option<&str>) -> Option<Value> {
    let mut d = Map::new();
    for (key, text) in [("user", user), ("assistant", assistant)] {
        if let Some(t) = text.filter(|t| !t.trim().is_empty()) {
            let (red, masked) = crate::redact::redact(t);
            let shown = crate::text::truncate(&red, TRANSCRIPT_MAX);
            if masked || shown.len() != red.len() {
                d.insert(format!("{key}_partial"), json!(true));
            }
            d.insert(key.into(), json!(shown));
        }
    }
    (!d.is_empty()).then_some(Value::Object(d))
}

/// DECISIONS 40: `tool.started` / `tool.ended` (`ok` when the tool said whether it worked):
/// the tool's name and a one-line redacted summary of its call.
pub fn tool_event(tool: &str, summary: Option<&str>, ok: Option<bool>) -> Option<Value> {
    if !is_tool_name(tool) {
        return None;
    }
    let mut d = Map::new();
    d.insert("tool".into(), json!(tool));
    if let Some(s) = summary {
        // Redacted whole first (a secret over lines goes whole), then folded to one line.
        let red = crate::redact::redact(s).0;
        let line = red.split_whitespace().collect::<Vec<_>>().join(" ");
        if !line.is_empty() {
            d.insert(
                "summary".into(),
                json!(crate::text::truncate(&line, TOOL_SUMMARY_MAX)),
            );
        }
    }
    if let Some(ok) = ok {
        d.insert("ok".into(), json!(ok));
    }
    Some(Value::Object(d))
}

/// `^[A-Za-z0-9_.:-]{1,120}$`
fn is_tool_name(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 120
        && t.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b':' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shown_input_is_redacted_capped_and_says_so() {
        let edit = json!({"file_path": "/w/a.rs", "old_string": "a\nb", "new_string": "a\nc"});
        assert_eq!(shown_input(&edit), Some((edit.clone(), false)));
        let secret =
            json!({"command": "curl -H 'Authorization: Bearer abc123'\necho API_TOKEN=xyz"});
        let (shown, partial) = shown_input(&secret).unwrap();
        assert!(partial);
        assert_eq!(
            shown["command"],
            "curl -H 'Authorization: Bearer [REDACTED 6 chars]'\necho API_TOKEN=[REDACTED 3 chars]"
        );
        let long = json!({"file_path": "/w/b", "content": "x".repeat(10_000)});
        let (shown, partial) = shown_input(&long).unwrap();
        assert!(partial && shown.to_string().chars().count() <= SHOWN_INPUT_MAX);
        assert_eq!(shown["file_path"], "/w/b");
        assert_eq!(shown_input(&json!("ls")), None);
        let d = attention_needed_shown("p1", Some("Edit"), Some("Edit /w/a.rs"), Some(&edit));
        assert_eq!(d["input"], edit);
        assert!(d.get("input_partial").is_none());
        assert_eq!(d["input_sha256"], input_sha256(&edit));
        let d = attention_needed_shown("p2", Some("Bash"), None, Some(&secret));
        assert_eq!(d["input_partial"], true);
        assert!(d.get("input_sha256").is_none());
    }

    #[test]
    fn a_transcript_is_redacted_whole_then_capped_and_tools_are_one_line() {
        let d =
            turn_transcript(Some("deploy with API_TOKEN=xyz"), Some(&"a".repeat(30_000))).unwrap();
        assert_eq!(d["user"], "deploy with API_TOKEN=[REDACTED 3 chars]");
        assert_eq!(d["user_partial"], true);
        assert_eq!(
            d["assistant"].as_str().unwrap().chars().count(),
            TRANSCRIPT_MAX
        );
        assert_eq!(d["assistant_partial"], true);
        let d = turn_transcript(Some("hi"), None).unwrap();
        assert_eq!(d, json!({"user": "hi"}));
        assert_eq!(turn_transcript(Some("  "), None), None);
        let t = tool_event("Bash", Some("ls -la\n  /tmp"), Some(true)).unwrap();
        assert_eq!(
            t,
            json!({"tool": "Bash", "summary": "ls -la /tmp", "ok": true})
        );
        assert_eq!(tool_event("bad tool", None, None), None);
        assert_eq!(
            (
                min_tier(TURN_TRANSCRIPT),
                min_tier(TOOL_ENDED),
                min_tier(TURN_ENDED)
            ),
            (2, 1, 0)
        );
    }
}
