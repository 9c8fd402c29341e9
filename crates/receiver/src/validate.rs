//! Hand-written checks for the seed-era schemas (`schemas/v1/*.json` @ e918475 / 9138259):
//! millisecond UTC timestamps, the event envelope
//! (`event.json`) and control acks (`control-ack.json`). Lengths are counted in Unicode code
//! points, as JSON Schema's `maxLength` does.

use serde_json::Value;
use spwire::control::{AckStatus, DeliveryMode, ACK_SESSION_MAX, REPLY_MAX};
use spwire::{is_harness_name, is_session_id, is_ulid};
use time::macros::format_description;
use time::OffsetDateTime;

/// Exactly `YYYY-MM-DDTHH:MM:SS.mmmZ`, calendar-checked (the schemas' date-time regex).
pub fn is_ms_timestamp(s: &str) -> bool {
    parse_ms_timestamp(s).is_some()
}

/// Parses the strict `YYYY-MM-DDTHH:MM:SS.mmmZ` form; `None` for anything else.
pub fn parse_ms_timestamp(s: &str) -> Option<OffsetDateTime> {
    let b = s.as_bytes();
    if b.len() != 24 {
        return None;
    }
    let shape_ok = b.iter().enumerate().all(|(i, &c)| match i {
        4 | 7 => c == b'-',
        10 => c == b'T',
        13 | 16 => c == b':',
        19 => c == b'.',
        23 => c == b'Z',
        _ => c.is_ascii_digit(),
    });
    if !shape_ok {
        return None;
    }
    // The schema's regex allows seconds 00-59 only (no leap second) and hours 00-23;
    // `time` checks the calendar (month lengths, leap years) and those ranges.
    let fmt =
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    time::PrimitiveDateTime::parse(s, &fmt)
        .ok()
        .map(|p| p.assume_utc())
}

/// Formats as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC, exactly 3 fractional digits).
pub fn format_ms_timestamp(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    let fmt =
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    t.format(&fmt)
        .expect("formatting a UTC timestamp cannot fail")
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// JSON Schema `integer` (a number with no fractional part) within `lo..=hi`.
fn integer_in(v: &Value, lo: i64, hi: i64) -> Option<i64> {
    let n = if let Some(i) = v.as_i64() {
        i
    } else if let Some(u) = v.as_u64() {
        i64::try_from(u).ok()?
    } else {
        let f = v.as_f64()?;
        if f.fract() != 0.0 || !f.is_finite() || f.abs() > 9_007_199_254_740_991.0 {
            return None;
        }
        f as i64
    };
    (lo..=hi).contains(&n).then_some(n)
}

/// JSON Schema `integer` (fractional part zero), any sign; used for the tier comparison.
pub fn as_integer(v: &Value) -> Option<i64> {
    integer_in(v, i64::MIN, i64::MAX)
}

/// `^(?:native|[a-z][a-z0-9]*(?:\.[a-z][a-z0-9_]*)+)$`
fn is_event_type(s: &str) -> bool {
    if s == "native" {
        return true;
    }
    let mut parts = s.split('.');
    let first = parts.next().unwrap_or("");
    let first_ok = first
        .as_bytes()
        .first()
        .is_some_and(|c| c.is_ascii_lowercase())
        && first
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let mut rest = 0;
    let rest_ok = parts.all(|p| {
        rest += 1;
        p.as_bytes().first().is_some_and(|c| c.is_ascii_lowercase())
            && p.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
    });
    first_ok && rest > 0 && rest_ok
}

/// `^[a-z][a-z0-9-]*@\d+$`
fn is_ruleset(s: &str) -> bool {
    let Some((name, ver)) = s.split_once('@') else {
        return false;
    };
    name.as_bytes()
        .first()
        .is_some_and(|c| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !ver.is_empty()
        && ver.bytes().all(|c| c.is_ascii_digit())
}

fn opt_str_max(obj: &serde_json::Map<String, Value>, key: &str, max: usize) -> Result<(), String> {
    match obj.get(key) {
        None => Ok(()),
        Some(Value::String(s)) if chars(s) <= max => Ok(()),
        Some(Value::String(_)) => Err(format!("{key} longer than {max}")),
        Some(_) => Err(format!("{key} not a string")),
    }
}

/// Where the first NUL character in `v` is (in a string or a key): `name`,
/// `events[0].session.cwd`, `data` (a key of `data`); `None` when there is none. Neither
/// store keeps one (PostgreSQL's text refuses it), so a request carrying one is refused
/// naming this field rather than failing in the database.
pub fn nul_field(v: &Value) -> Option<String> {
    fn walk(v: &Value, path: &mut String) -> bool {
        match v {
            Value::String(s) => s.contains('\0'),
            Value::Array(a) => a.iter().enumerate().any(|(i, x)| {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                let found = walk(x, path);
                if !found {
                    path.truncate(len);
                }
                found
            }),
            Value::Object(o) => {
                if o.keys().any(|k| k.contains('\0')) {
                    return true;
                }
                o.iter().any(|(k, x)| {
                    let len = path.len();
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(k);
                    let found = walk(x, path);
                    if !found {
                        path.truncate(len);
                    }
                    found
                })
            }
            _ => false,
        }
    }
    let mut path = String::new();
    walk(v, &mut path).then(|| {
        if path.is_empty() {
            "the body".to_owned()
        } else {
            path
        }
    })
}

/// Checks one event against `event.json` @ e918475 (formats other than the date-time
/// pattern are not asserted, as JSON Schema 2020-12 treats `format` as an annotation).
/// Returns the reason (≤ 200 chars) on failure.
pub fn check_event(ev: &Value) -> Result<(), String> {
    let obj = ev.as_object().ok_or("event not an object")?;
    if let Some(field) = nul_field(ev) {
        return Err(format!("NUL character in {field}"));
    }
    for key in [
        "protocol", "id", "type", "time", "tier", "harness", "session", "privacy", "data",
    ] {
        if !obj.contains_key(key) {
            return Err(format!("missing {key}"));
        }
    }
    if obj["protocol"].as_f64() != Some(1.0) {
        return Err("protocol must be 1".into());
    }
    if !obj["id"].as_str().is_some_and(is_ulid) {
        return Err("id not a ULID".into());
    }
    if !obj["type"].as_str().is_some_and(is_event_type) {
        return Err("bad type".into());
    }
    if !obj["time"].as_str().is_some_and(is_ms_timestamp) {
        return Err("time not a millisecond UTC timestamp".into());
    }
    if integer_in(&obj["tier"], 0, 3).is_none() {
        return Err("tier not an integer 0-3".into());
    }

    let harness = obj["harness"].as_object().ok_or("harness not an object")?;
    match harness.get("name") {
        Some(Value::String(n)) if is_harness_name(n) => {}
        Some(_) => return Err("bad harness.name".into()),
        None => return Err("missing harness.name".into()),
    }
    opt_str_max(harness, "version", 64).map_err(|e| format!("harness.{e}"))?;
    opt_str_max(harness, "event", 64).map_err(|e| format!("harness.{e}"))?;

    let session = obj["session"].as_object().ok_or("session not an object")?;
    match session.get("id") {
        Some(Value::String(s)) if is_session_id(s) => {}
        Some(_) => return Err("bad session.id".into()),
        None => return Err("missing session.id".into()),
    }
    match session.get("seq") {
        Some(v) if integer_in(v, 0, 9_007_199_254_740_991).is_some() => {}
        Some(_) => return Err("bad session.seq".into()),
        None => return Err("missing session.seq".into()),
    }
    for (key, max) in [
        ("machine", 80),
        ("cwd", 1024),
        ("repo", 512),
        ("branch", 256),
        ("model", 128),
        ("title", 200),
        ("url", 1024),
        ("account_id", 128),
        // Our extension (DECISIONS 36): the session's last reported permission mode.
        ("permission_mode", 40),
    ] {
        opt_str_max(session, key, max).map_err(|e| format!("session.{e}"))?;
    }
    match session.get("title_source") {
        None => {}
        Some(Value::String(s)) if matches!(s.as_str(), "custom" | "harness" | "first-ask") => {}
        Some(_) => return Err("bad session.title_source".into()),
    }
    match session.get("parent_id") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if is_session_id(s) => {}
        Some(_) => return Err("bad session.parent_id".into()),
    }

    let privacy = obj["privacy"].as_object().ok_or("privacy not an object")?;
    match privacy.get("rulesets") {
        Some(Value::Array(a)) if a.iter().all(|r| r.as_str().is_some_and(is_ruleset)) => {}
        Some(_) => return Err("bad privacy.rulesets".into()),
        None => return Err("missing privacy.rulesets".into()),
    }
    match privacy.get("pii") {
        Some(Value::Bool(_)) => {}
        Some(_) => return Err("privacy.pii not a boolean".into()),
        None => return Err("missing privacy.pii".into()),
    }

    if !obj["data"].is_object() {
        return Err("data not an object".into());
    }
    check_conversation_data(obj)
}

/// DECISIONS 40: `turn.transcript` (tier 2) and `tool.started` / `tool.ended` (tier 1) carry
/// what the page shows as the conversation; each field is refused out of shape or size.
fn check_conversation_data(obj: &serde_json::Map<String, Value>) -> Result<(), String> {
    use spwire::event::{min_tier, TOOL_ENDED, TOOL_STARTED, TOOL_SUMMARY_MAX, TURN_TRANSCRIPT};
    let kind = obj["type"].as_str().unwrap_or("");
    let data = obj["data"].as_object().ok_or("data not an object")?;
    let need = min_tier(kind);
    if integer_in(&obj["tier"], i64::from(need), 3).is_none() {
        return Err(format!("{kind} is sent only at tier {need} or above"));
    }
    let text = |key: &str, max: usize| match data.get(key) {
        None => Ok(false),
        Some(Value::String(s)) if chars(s) <= max => Ok(true),
        Some(_) => Err(format!(
            "data.{key} not a string of at most {max} characters"
        )),
    };
    let flag = |key: &str| match data.get(key) {
        None | Some(Value::Bool(true)) => Ok(()),
        Some(_) => Err(format!("data.{key} not true")),
    };
    match kind {
        TURN_TRANSCRIPT => {
            let max = spwire::event::TRANSCRIPT_MAX;
            if !(text("user", max)? | text("assistant", max)?) {
                return Err("turn.transcript needs data.user or data.assistant".into());
            }
            flag("user_partial")?;
            flag("assistant_partial")?;
            only_keys(
                data,
                &["user", "assistant", "user_partial", "assistant_partial"],
            )
        }
        TOOL_STARTED | TOOL_ENDED => {
            match data.get("tool") {
                Some(Value::String(t)) if is_tool_name(t) => {}
                _ => return Err(format!("{kind} needs data.tool, a tool name")),
            }
            text("summary", TOOL_SUMMARY_MAX)?;
            if data
                .get("summary")
                .and_then(Value::as_str)
                .is_some_and(|s| s.contains(['\n', '\r']))
            {
                return Err("data.summary is one line".into());
            }
            if data.get("ok").is_some_and(|v| !v.is_boolean()) {
                return Err("data.ok not a boolean".into());
            }
            only_keys(data, &["tool", "summary", "ok"])
        }
        _ => Ok(()),
    }
}

fn only_keys(data: &serde_json::Map<String, Value>, keys: &[&str]) -> Result<(), String> {
    match data.keys().find(|k| !keys.contains(&k.as_str())) {
        Some(k) => Err(format!(
            "data.{} not expected",
            spwire::text::truncate(k, 40)
        )),
        None => Ok(()),
    }
}

/// `^[A-Za-z0-9_.:-]{1,120}$`
fn is_tool_name(t: &str) -> bool {
    (1..=120).contains(&t.len())
        && t.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b':' | b'-'))
}

/// Checks a whole `control-ack.json` @ 9138259 body; returns the entries on success, or a
/// reason naming the first violation.
pub fn check_ack_body(body: &Value) -> Result<Vec<Value>, String> {
    let acks = body
        .as_object()
        .and_then(|o| o.get("acks"))
        .ok_or("body must be an object with acks")?
        .as_array()
        .ok_or("acks must be an array")?;
    if acks.is_empty() {
        return Err("acks is empty".into());
    }
    for (i, ack) in acks.iter().enumerate() {
        let obj = ack
            .as_object()
            .ok_or_else(|| format!("acks[{i}] not an object"))?;
        if !obj.get("id").and_then(Value::as_str).is_some_and(is_ulid) {
            return Err(format!("acks[{i}].id not a ULID"));
        }
        let outcome = obj.get("outcome").and_then(Value::as_str);
        if outcome.and_then(AckStatus::parse).is_none() {
            return Err(format!(
                "acks[{i}].outcome not one of taken|progress|delivered|expired|unsupported|failed|refused"
            ));
        }
        check_ack_delivery(obj, i)?;
        // Signed control: a refusal names its code (docs/protocol.md#control-5); any code is short.
        match obj.get("code") {
            None if outcome == Some("refused") => {
                return Err(format!("acks[{i}].outcome refused needs a code"))
            }
            None => {}
            Some(Value::String(c))
                if (1..=64).contains(&c.len())
                    && c.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') => {}
            Some(_) => return Err(format!("acks[{i}].code not a short snake_case word")),
        }
        if !obj
            .get("at")
            .and_then(Value::as_str)
            .is_some_and(is_ms_timestamp)
        {
            return Err(format!("acks[{i}].at not a millisecond UTC timestamp"));
        }
        match obj.get("detail") {
            None => {}
            Some(Value::String(d)) if chars(d) <= 500 => {}
            Some(Value::String(_)) => return Err(format!("acks[{i}].detail longer than 500")),
            Some(_) => return Err(format!("acks[{i}].detail not a string")),
        }
    }
    Ok(acks.clone())
}

/// An ack's optional `mode`, `session`, `reply` and `seq` (DECISIONS 38); an ack from a
/// sender that predates them has none, and reads as before.
fn check_ack_delivery(obj: &serde_json::Map<String, Value>, i: usize) -> Result<(), String> {
    match obj.get("mode") {
        None => {}
        Some(Value::String(m)) if DeliveryMode::parse(m).is_some() => {}
        Some(_) => {
            return Err(format!(
                "acks[{i}].mode not one of api|turn|resume|fork|waiter|start"
            ))
        }
    }
    match obj.get("session") {
        None => {}
        Some(Value::String(s)) if (1..=ACK_SESSION_MAX).contains(&chars(s)) => {}
        Some(_) => {
            return Err(format!(
                "acks[{i}].session not a string of 1 to {ACK_SESSION_MAX} characters"
            ))
        }
    }
    match obj.get("reply") {
        None => {}
        Some(Value::String(r)) if chars(r) <= REPLY_MAX => {}
        Some(Value::String(_)) => return Err(format!("acks[{i}].reply longer than {REPLY_MAX}")),
        Some(_) => return Err(format!("acks[{i}].reply not a string")),
    }
    match obj.get("seq") {
        None => {}
        Some(v) if v.as_u64().is_some() => {}
        Some(_) => return Err(format!("acks[{i}].seq not a non-negative integer")),
    }
    Ok(())
}

/// A string field of an object: `None` when absent or null; an error naming it otherwise.
pub fn str_field<'a>(
    m: &'a serde_json::Map<String, Value>,
    k: &str,
) -> Result<Option<&'a str>, String> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("{k} must be a string")),
    }
}

/// A prompt's `mode` (DECISIONS 25): `queue` (the default, left out), `steer` or `interrupt`.
pub fn prompt_mode(mode: Option<&str>) -> Result<Option<&str>, String> {
    match mode {
        None | Some("queue") => Ok(None),
        Some(mode @ ("steer" | "interrupt")) => Ok(Some(mode)),
        Some(_) => Err("mode must be queue, steer or interrupt".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ulids() {
        assert!(is_ulid("01K6ZZZZZZZZZZZZZZZZZZZZZZ"));
        assert!(is_ulid(&ulid::Ulid::new().to_string()));
        assert!(!is_ulid("01K6ZZZZZZZZZZZZZZZZZZZZZ"));
        assert!(!is_ulid("01K6ZZZZZZZZZZZZZZZZZZZZZI"));
        assert!(!is_ulid("01k6zzzzzzzzzzzzzzzzzzzzzz"));
        // One rule with the sender: a first character above 7 overflows 128 bits.
        assert!(!is_ulid("8ZZZZZZZZZZZZZZZZZZZZZZZZZ"));
        let ev = json!({"id": "8ZZZZZZZZZZZZZZZZZZZZZZZZZ"});
        assert!(check_event(&ev).is_err());
    }

    #[test]
    fn timestamps() {
        assert!(is_ms_timestamp("2026-09-28T02:10:00.000Z"));
        assert!(is_ms_timestamp("2024-02-29T23:59:59.999Z"));
        assert!(!is_ms_timestamp("2025-02-29T00:00:00.000Z"));
        assert!(!is_ms_timestamp("2026-09-28T02:10:00Z"));
        assert!(!is_ms_timestamp("2026-09-28T02:10:00.0000Z"));
        assert!(!is_ms_timestamp("2026-09-28T02:10:00.000+00:00"));
        assert!(!is_ms_timestamp("2026-09-28T24:10:00.000Z"));
        assert!(!is_ms_timestamp("2026-09-28T23:10:60.000Z"));
        let t = parse_ms_timestamp("2026-09-28T02:10:00.123Z").unwrap();
        assert_eq!(format_ms_timestamp(t), "2026-09-28T02:10:00.123Z");
    }

    #[test]
    fn sessions() {
        use spwire::split_session_key as parse_session_key;
        assert_eq!(parse_session_key("codex:a:b:c"), Some(("codex", "a:b:c")));
        assert!(parse_session_key("claude-code:8c132906-aa").is_some());
        assert!(parse_session_key("Claude:x").is_none());
        assert!(parse_session_key("codex:").is_none());
        assert!(parse_session_key("codex").is_none());
        assert!(parse_session_key("codex:a b").is_none());
        assert!(parse_session_key(&format!("codex:{}", "a".repeat(129))).is_none());
        assert!(parse_session_key(&format!("{}:x", "a".repeat(41))).is_none());
    }

    #[test]
    fn event_types() {
        assert!(is_event_type("native"));
        assert!(is_event_type("attention.needed"));
        assert!(is_event_type("a1.b_c.d"));
        assert!(!is_event_type("attention"));
        assert!(!is_event_type("attention."));
        assert!(!is_event_type("Attention.needed"));
        assert!(!is_event_type("a.1b"));
    }

    #[test]
    fn events() {
        let ok = json!({"protocol":1,"id":"01K6ZZZZZZZZZZZZZZZZZZZZZZ","type":"session.started",
            "time":"2026-09-28T01:03:11.204Z","tier":0,"harness":{"name":"claude-code"},
            "session":{"id":"abc","seq":0},"privacy":{"rulesets":[],"pii":false},"data":{}});
        assert_eq!(check_event(&ok), Ok(()));
        let mut bad = ok.clone();
        bad["session"]["seq"] = json!(-1);
        assert!(check_event(&bad).is_err());
        let mut bad = ok.clone();
        bad["privacy"]["rulesets"] = json!(["secrets"]);
        assert!(check_event(&bad).is_err());
        let mut bad = ok;
        bad.as_object_mut().unwrap().remove("data");
        assert_eq!(check_event(&bad), Err("missing data".into()));
    }

    /// DECISIONS 40's events: their tier floor and their data's shape.
    #[test]
    fn conversation_events() {
        let ev = |kind: &str, tier: u8, data: Value| {
            json!({"protocol":1,"id":"01K6ZZZZZZZZZZZZZZZZZZZZZZ","type":kind,
                "time":"2026-09-28T01:03:11.204Z","tier":tier,"harness":{"name":"claude-code"},
                "session":{"id":"abc","seq":3},"privacy":{"rulesets":["secrets@1"],"pii":false},"data":data})
        };
        let t = json!({"user":"fix it","assistant":"done"});
        assert_eq!(check_event(&ev("turn.transcript", 2, t.clone())), Ok(()));
        assert_eq!(
            check_event(&ev("turn.transcript", 1, t)),
            Err("turn.transcript is sent only at tier 2 or above".into())
        );
        assert!(check_event(&ev("turn.transcript", 2, json!({}))).is_err());
        assert!(check_event(&ev(
            "turn.transcript",
            2,
            json!({"user": "x".repeat(20_001)})
        ))
        .is_err());
        assert!(check_event(&ev("turn.transcript", 2, json!({"user": "x", "extra": 1}))).is_err());
        let tool = json!({"tool":"Bash","summary":"ls -la","ok":true});
        assert_eq!(check_event(&ev("tool.ended", 1, tool.clone())), Ok(()));
        assert!(check_event(&ev("tool.started", 0, tool)).is_err());
        assert!(check_event(&ev(
            "tool.started",
            1,
            json!({"tool":"Bash","summary":"a\nb"})
        ))
        .is_err());
        assert!(check_event(&ev("tool.started", 1, json!({"tool":"no spaces"}))).is_err());
    }

    #[test]
    fn acks() {
        let ok = json!({"acks":[{"id":"01K6ZZZZZZZZZZZZZZZZZZZZZZ","outcome":"failed",
            "at":"2026-09-28T01:03:11.204Z","detail":"x"}]});
        assert_eq!(check_ack_body(&ok).unwrap().len(), 1);
        assert!(check_ack_body(&json!({"acks":[]})).is_err());
        let mut bad = ok.clone();
        bad["acks"][0]["outcome"] = json!("refused");
        assert!(check_ack_body(&bad).is_err());
        bad["acks"][0]["code"] = json!("replay");
        assert!(check_ack_body(&bad).is_ok());
        bad["acks"][0]["code"] = json!("Not A Code");
        assert!(check_ack_body(&bad).is_err());
        let mut bad = ok;
        bad["acks"][0]["detail"] = json!("é".repeat(501));
        assert!(check_ack_body(&bad).is_err());
    }

    /// DECISIONS 38's acks read; each field out of shape is refused naming it.
    #[test]
    fn acks_taken_progress_and_replies() {
        let base = json!({"id":"01K6ZZZZZZZZZZZZZZZZZZZZZZ","outcome":"delivered",
            "at":"2026-09-28T01:03:11.204Z"});
        let with = |k: &str, v: Value| {
            let mut a = base.clone();
            a[k] = v;
            json!({ "acks": [a] })
        };
        for good in [
            with("outcome", json!("taken")),
            with("outcome", json!("progress")),
            with("mode", json!("turn")),
            with("mode", json!("resume")),
            with("session", json!("claude-code:0196f2a4")),
            with("reply", json!("é".repeat(20_000))),
            with("seq", json!(7)),
        ] {
            assert!(check_ack_body(&good).is_ok(), "{good}");
        }
        for (bad, names) in [
            (with("outcome", json!("maybe")), "outcome"),
            (with("mode", json!("telepathy")), "mode"),
            (with("mode", json!(1)), "mode"),
            (with("session", json!("")), "session"),
            (with("reply", json!("é".repeat(20_001))), "reply"),
            (with("reply", json!(["x"])), "reply"),
            (with("seq", json!(-1)), "seq"),
            (with("seq", json!("1")), "seq"),
        ] {
            let e = check_ack_body(&bad).unwrap_err();
            assert!(e.contains(names), "{e}");
        }
    }
}
