//! The properties the fuzz targets check, shared with the stable test suite
//! (`crates/sender/tests/reliability_hostile.rs` includes this file and replays `fuzz/corpus/*` through it,
//! and runs the same properties under proptest). Each function takes raw bytes and panics
//! when a property fails; returning means the input held.
//!
//! Depends only on `spctl` and `serde_json`.
#![allow(dead_code)]

use serde_json::{json, Value};
use spctl::harness::{Harness, HookInput};
use spctl::store::{Answer, SessionRef, Store};
use spctl::wire::control::{self, Checked, Decision, Kind};
use std::sync::{Mutex, OnceLock};

/// Hook stdin: every adapter parses any bytes without panicking, deterministically; what it
/// takes for a session is a valid session of its own harness; a permission prompt always
/// names an attention, and Claude Code's is DECISIONS 9's hash of the payload.
pub fn hook_stdin(data: &[u8]) {
    if data.len() as u64 > spctl::hook::STDIN_CAP {
        return; // refused unread by the hook runtime
    }
    for &h in Harness::ALL {
        let a = h.parse_input(data);
        let b = h.parse_input(data);
        assert_eq!(a, b, "{}: parsing is deterministic", h.name());
        check_input(h, &a, data);
    }
}

fn check_input(h: Harness, input: &HookInput, data: &[u8]) {
    if let Some(s) = input.session() {
        assert_eq!(s.harness, h.name());
        assert!(
            spctl::wire::is_session_id(&s.session_id),
            "{}: session id {:?}",
            h.name(),
            s.session_id
        );
        assert!(spctl::wire::split_session_key(&s.key()).is_some());
    }
    match input {
        HookInput::Permission { attention_id, .. } if h == Harness::ClaudeCode => {
            // The adapter reads only its fields, so a payload whose other fields a full JSON
            // parse would refuse (e.g. a lone surrogate escape) can still be a prompt.
            let Ok(v) = serde_json::from_slice::<Value>(data) else {
                return;
            };
            let want = spctl::harness::minted_attention_id(
                v["prompt_id"].as_str().unwrap_or(""),
                v["tool_name"].as_str().expect("tool_name"),
                &v["tool_input"],
            );
            assert_eq!(attention_id, &want, "DECISIONS 9 id");
        }
        HookInput::Api { then, .. } => check_input(h, then, data),
        _ => {}
    }
}

/// Replaces every string leaf equal to `from` by `to`.
fn substitute(v: &Value, from: &str, to: &str) -> Value {
    match v {
        Value::String(s) if s == from => Value::String(to.to_string()),
        Value::Array(a) => Value::Array(a.iter().map(|x| substitute(x, from, to)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), substitute(x, from, to)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Answers: a deny (or a Stop block) with any text is one JSON document whose shape does not
/// depend on the text: text that looks like `"behavior":"allow"` stays inside its string.
pub fn render(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let text = text.as_ref();
    let marker = "\u{1}MARKER\u{1}";
    if text == marker {
        return;
    }
    for &h in Harness::ALL {
        for (what, out, reference) in [
            (
                "deny",
                h.render_permission(Decision::Deny, text),
                h.render_permission(Decision::Deny, marker),
            ),
            ("block", h.render_block(text), h.render_block(marker)),
        ] {
            if reference.is_empty() {
                assert!(
                    out.is_empty(),
                    "{} {what}: no answer channel, no output",
                    h.name()
                );
                continue;
            }
            assert!(!out.contains('\n'), "{} {what}: one line", h.name());
            let got: Value = serde_json::from_str(&out)
                .unwrap_or_else(|e| panic!("{} {what}: not JSON: {e}", h.name()));
            let want: Value = serde_json::from_str(&reference).unwrap();
            // The reference with the text where the marker was: exactly what must be printed.
            assert_eq!(
                got,
                substitute(&want, marker, text),
                "{} {what}: the text changed the shape",
                h.name()
            );
        }
        let allow = h.render_permission(Decision::Allow, text);
        assert_eq!(
            allow,
            h.render_permission(Decision::Allow, ""),
            "{}: allow carries no text",
            h.name()
        );
    }
}

/// Control messages: whatever the receiver sends, `check` never panics, and it calls a
/// message valid only when every DECISIONS 6 rule holds; a decision is allow only when the
/// message says exactly `"decision":"allow"`. Deadlines never pass `expires_at` nor receipt
/// + lifetime (DECISIONS 7).
pub fn control_message(data: &[u8]) {
    let Ok(body) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let items: Vec<Value> = match body.get("messages").and_then(Value::as_array) {
        Some(a) => a.clone(),
        None => vec![body],
    };
    for v in &items {
        check_one(v);
    }
}

fn check_one(v: &Value) {
    let c = control::check(v);
    assert_eq!(c, control::check(v), "deterministic");
    match &c {
        Checked::Valid(m) => {
            assert!(spctl::wire::is_ulid(&m.id));
            assert_eq!(v["id"].as_str(), Some(m.id.as_str()));
            assert_eq!(v["kind"].as_str(), Some(m.kind.as_str()));
            assert_eq!(v["at"].as_str(), Some(m.at.as_str()));
            assert_eq!(v["expires_at"].as_str(), Some(m.expires_at.as_str()));
            assert_eq!(spctl::clock::parse_wire(&m.at), Some(m.at_ms));
            assert_eq!(
                spctl::clock::parse_wire(&m.expires_at),
                Some(m.expires_at_ms)
            );
            assert!(m.expires_at_ms >= m.at_ms);
            if let Some(n) = &m.note {
                assert!(n.chars().count() <= control::NOTE_MAX);
                assert_eq!(v["note"].as_str(), Some(n.as_str()));
            }
            match m.kind {
                Kind::PermissionAnswer => {
                    let f = m.for_attention.as_deref().expect("for");
                    assert!(!f.is_empty() && f.chars().count() <= control::FOR_MAX);
                    assert_eq!(v["for"].as_str(), Some(f));
                    let d = v["decision"].as_str().expect("decision is a string");
                    assert_eq!(m.decision.map(Decision::as_str), Some(d));
                    assert!(d == "allow" || d == "deny");
                }
                Kind::Prompt => {
                    let t = m.text.as_deref().expect("text");
                    assert!(t.chars().count() <= control::TEXT_MAX && !t.trim().is_empty());
                    assert!(m.decision.is_none() && m.for_attention.is_none());
                }
                Kind::Cancel => assert!(m.decision.is_none() && m.text.is_none()),
                // Unsigned control never reads a start (DECISIONS 39: signed mode only).
                Kind::Start => panic!("unsigned control read a start: {v}"),
            }
            for now in [m.at_ms, m.expires_at_ms, 0, i64::MAX / 4, -(i64::MAX / 4)] {
                let d = control::deadline(m.at_ms, m.expires_at_ms, now);
                assert!(d <= m.expires_at_ms);
                assert!(d <= now.saturating_add(m.expires_at_ms - m.at_ms));
            }
        }
        Checked::Invalid { id, detail, .. } => {
            assert!(spctl::wire::is_ulid(id));
            assert!(detail.starts_with("invalid: "), "{detail}");
            assert!(detail.chars().count() <= control::DETAIL_MAX);
        }
        Checked::UnknownKind { id, kind } => {
            assert!(spctl::wire::is_ulid(id));
            assert!(!matches!(
                kind.as_str(),
                "permission.answer" | "prompt" | "cancel"
            ));
        }
        Checked::Decided(d) => panic!("the unsigned check decided {d:?}: only signed control does"),
        Checked::Unackable { .. } => {
            assert!(
                !v["id"].as_str().is_some_and(spctl::wire::is_ulid),
                "an id that is a ULID is acked"
            );
        }
    }
    if v["decision"].as_str() != Some("allow") {
        assert!(
            !matches!(&c, Checked::Valid(m) if m.decision == Some(Decision::Allow)),
            "allow from {v}"
        );
    }
}

/// The URL rule: `http://` only to loopback, judged the way an HTTP client reads the URL
/// (RFC 3986: the scheme in any case, userinfo up to the last '@', the port after the last
/// ':' outside brackets).
pub fn url(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if spctl::config::check_url(s).is_err() {
        return;
    }
    let scheme_is = |scheme: &str| {
        s.get(..scheme.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(scheme))
    };
    if scheme_is("http://") {
        let rest = &s["http://".len()..];
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..end];
        let hostport = authority
            .rsplit_once('@')
            .map(|(_, h)| h)
            .unwrap_or(authority);
        let host = if let Some(b) = hostport.strip_prefix('[') {
            b.split(']').next().unwrap_or("")
        } else {
            hostport
                .rsplit_once(':')
                .map(|(h, _)| h)
                .unwrap_or(hostport)
        };
        // IPv6 `::1`, or an IPv4 loopback written as IPv6 (`::ffff:127.0.0.1` reaches 127.0.0.1).
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::Ipv4Addr>()
                .is_ok_and(|ip| ip.is_loopback())
            || host.parse::<std::net::Ipv6Addr>().is_ok_and(|ip| {
                ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
            });
        assert!(
            loopback,
            "{s:?} accepted but its host {host:?} is not loopback"
        );
    } else {
        assert!(scheme_is("https://"), "{s:?} accepted");
    }
}

// ---------------------------------------------------------------------------------------
// The permission flow: the store as sp-sync and the waiting hook drive it.

struct Flow {
    store: Store,
    n: u64,
    _dir: std::path::PathBuf,
}

fn flow() -> &'static Mutex<Flow> {
    static F: OnceLock<Mutex<Flow>> = OnceLock::new();
    F.get_or_init(|| {
        // Folders of earlier runs whose process is gone.
        if let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let pid = name
                    .strip_prefix("spctl-props-")
                    .and_then(|r| r.split('-').next()?.parse::<i64>().ok());
                if pid.is_some_and(|p| !spctl::store::pid_alive(p)) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let dir = std::env::temp_dir().join(format!(
            "spctl-props-{}-{}",
            std::process::id(),
            spctl::wire::new_ulid()
        ));
        let store = spctl::store::open(&dir.join("control.db"), std::time::Duration::from_secs(10))
            .expect("store");
        Mutex::new(Flow {
            store,
            n: 0,
            _dir: dir,
        })
    })
}

/// Reads choices from the input bytes (zeros when they run out).
struct Bytes<'a>(&'a [u8], usize);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let b = self.0.get(self.1).copied().unwrap_or(0);
        self.1 += 1;
        b
    }
    fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.u8() as usize % xs.len()].clone()
    }
    fn done(&self) -> bool {
        self.1 >= self.0.len()
    }
}

/// What the oracle knows about one generated message.
struct Gen {
    id: Option<String>,
    session: usize,
    value: Value,
}

/// Generates a permission prompt and a stream of hostile control messages from `data`,
/// stores them exactly as sp-sync does (one poll answer each), then claims as the waiting
/// hook does. Property (DECISIONS 10, 11): the hook gets an answer iff a valid, unexpired
/// `permission.answer` naming exactly this attention reached this session first under its
/// id; it gets the oldest such, with the decision the receiver sent; allow is never the
/// result otherwise; and nothing is claimed twice.
pub fn permission_flow(data: &[u8]) {
    let mut f = flow().lock().unwrap_or_else(|e| e.into_inner());
    f.n += 1;
    let n = f.n;
    let own = SessionRef {
        harness: "claude-code".into(),
        session_id: format!("pf-{n}"),
        cwd: None,
        event: "PermissionRequest".into(),
        permission_mode: None,
    };
    let other = SessionRef {
        session_id: format!("pf-{n}-other"),
        ..own.clone()
    };
    let attention = format!("perm-{n:016x}");
    let sibling = format!("perm-{:016x}", n + (1 << 40));
    let now = spctl::clock::now_ms();
    let pid = std::process::id();
    let store = &mut f.store;
    for (session, id) in [(&own, &attention), (&own, &sibling), (&other, &attention)] {
        store
            .open_attention(session, id, Some("Bash"), Some("ls"), now + 60_000, pid)
            .unwrap();
    }

    let mut b = Bytes(data, 0);
    let mut gens: Vec<Gen> = Vec::new();
    let fmt = spctl::clock::format_ms;
    while !b.done() && gens.len() < 24 {
        let id = match b.u8() % 8 {
            0 => None,
            1 => Some(json!("not-a-ulid")),
            2 if !gens.is_empty() => {
                let i = b.u8() as usize % gens.len();
                gens[i].id.clone().map(Value::String)
            }
            3 => Some(json!(12345)),
            _ => Some(Value::String(spctl::wire::new_ulid())),
        };
        let kind = b.pick(&[
            json!("permission.answer"),
            json!("permission.answer"),
            json!("permission.answer"),
            json!("prompt"),
            json!("cancel"),
            json!("Permission.Answer"),
            json!(1),
            Value::Null,
        ]);
        let for_ = b.pick(&[
            json!(attention.clone()),
            json!(attention.clone()),
            json!(sibling.clone()),
            json!(attention.to_uppercase()),
            json!(format!("{attention} ")),
            json!(""),
            json!([attention.clone()]),
            Value::Null,
            json!("x".repeat(129)),
        ]);
        let decision = b.pick(&[
            json!("allow"),
            json!("deny"),
            json!("allow"),
            json!("ALLOW"),
            json!("allow "),
            json!(true),
            json!(["allow"]),
            json!({"allow": true}),
            Value::Null,
            json!("yes"),
        ]);
        let (at, exp) = b.pick(&[
            (Some(fmt(now - 1000)), Some(fmt(now + 600_000))),
            (Some(fmt(now - 1000)), Some(fmt(now + 600_000))),
            (Some(fmt(now - 600_000)), Some(fmt(now - 300_000))), // expired
            (Some(fmt(now + 300_000)), Some(fmt(now + 360_000))), // receiver 5 min ahead
            (Some(fmt(now - 300_000)), Some(fmt(now - 240_000))), // receiver 5 min behind
            (Some(fmt(now)), Some(fmt(now - 1))),                 // expires before at
            (
                Some("2026-13-01T00:00:00.000Z".into()),
                Some(fmt(now + 600_000)),
            ),
            (Some(fmt(now - 1000)), Some("tomorrow".into())),
            (None, Some(fmt(now + 600_000))),
            (Some(fmt(now - 1000)), Some(fmt(i64::MAX / 2))),
        ]);
        let mut m = serde_json::Map::new();
        if let Some(id) = &id {
            m.insert("id".into(), id.clone());
        }
        if !kind.is_null() {
            m.insert("kind".into(), kind);
        }
        if !for_.is_null() {
            m.insert("for".into(), for_);
        }
        if !decision.is_null() {
            m.insert("decision".into(), decision);
        }
        if let Some(a) = at {
            m.insert("at".into(), json!(a));
        }
        if let Some(e) = exp {
            m.insert("expires_at".into(), json!(e));
        }
        match b.u8() % 6 {
            0 => {
                m.insert("note".into(), json!("n".repeat(2001)));
            }
            1 => {
                m.insert("note".into(), json!("\u{0}nul and \"allow\""));
            }
            2 => {
                m.insert("session".into(), json!(format!("claude-code:pf-{n}")));
            }
            3 => {
                m.insert("text".into(), json!("hi"));
            }
            _ => {}
        }
        let value = if b.u8() % 16 == 0 {
            json!(["not", "an", "object"])
        } else {
            Value::Object(m)
        };
        let session = (b.u8() % 4 == 0) as usize; // 0: own, 1: other
        gens.push(Gen {
            id: value["id"].as_str().map(str::to_string),
            session,
            value,
        });
    }
    // Store each as sp-sync would: check, then ingest under the session it was polled for.
    let route = |m: &control::ControlMessage| spctl::harness::route("claude-code", m.kind);
    let mut first_session: std::collections::HashMap<String, usize> = Default::default();
    for g in &gens {
        let key = if g.session == 0 {
            own.key()
        } else {
            other.key()
        };
        let checked = control::check(&g.value);
        store.ingest("phone", &key, &[checked], &route).unwrap();
        if let Some(id) = &g.id {
            first_session.entry(id.clone()).or_insert(g.session);
        }
    }
    // The oracle: legitimate answers, in the order the hook must take them.
    let claim_now = spctl::clock::now_ms();
    let mut legit: Vec<(String, String, Decision)> = Vec::new(); // (at, id, decision)
    let mut seen = std::collections::HashSet::new();
    for g in &gens {
        let Some(id) = &g.id else { continue };
        if !seen.insert(id.clone()) {
            continue; // a redelivered id is acted on at most once: the first one counts
        }
        if first_session.get(id) != Some(&0) || g.session != 0 {
            continue;
        }
        let Checked::Valid(m) = control::check(&g.value) else {
            continue;
        };
        if m.kind != Kind::PermissionAnswer
            || m.for_attention.as_deref() != Some(attention.as_str())
        {
            continue;
        }
        if control::deadline(m.at_ms, m.expires_at_ms, now) <= claim_now + 5_000 {
            continue; // expired (generated expiries are minutes away from now, never borderline)
        }
        legit.push((m.at.clone(), m.id.clone(), m.decision.unwrap()));
    }
    legit.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    // The waiting hook: look, claim, confirm.
    let (open, queued) = store.attention_poll(&own.key(), &attention).unwrap();
    assert!(open);
    let claimed: Option<Answer> = if queued {
        store.claim_answer(&own.key(), &attention, pid).unwrap()
    } else {
        None
    };
    match (&claimed, legit.first()) {
        (None, None) => {}
        (Some(a), Some((_, id, d))) => {
            assert_eq!(&a.id, id, "the oldest legitimate answer is taken");
            assert_eq!(a.decision, *d, "with the decision the receiver sent");
            store
                .confirm_answer(&own, &attention, a, "claude-code PermissionRequest hook")
                .unwrap();
        }
        (Some(a), None) => panic!(
            "answer {a:?} claimed but none was legitimate: {:#?}",
            gens.iter().map(|g| &g.value).collect::<Vec<_>>()
        ),
        (None, Some(l)) => panic!("legitimate answer {l:?} not claimed"),
    }
    // Never twice: the attention is now cleared (or still open with nothing else to give,
    // since only one claim per prompt happens).
    if claimed.is_some() {
        assert_eq!(
            store.claim_answer(&own.key(), &attention, pid).unwrap(),
            None,
            "claimed twice"
        );
    }
    // The sibling attention and the other session's same-named attention were never answered
    // through this prompt.
    let other_claim = store.claim_answer(&other.key(), &attention, pid).unwrap();
    if let Some(a) = &other_claim {
        assert_ne!(
            Some(&a.id),
            claimed.as_ref().map(|c| &c.id),
            "one answer, two sessions"
        );
    }
}

/// A signed command (DECISIONS 22): any bytes, as the command string and as a whole
/// envelope, are read without panicking and deterministically; whatever parses keeps the
/// spec's limits; nothing verifies without a signature by an enrolled key (none of the
/// inputs can hold one, since the key below signs nothing here).
pub fn signed_command(data: &[u8]) {
    use spctl::wire::signed::{self, SignedCommand, TrustedKey, VerifyOptions};
    let text = String::from_utf8_lossy(data);
    let parsed = signed::parse_command(&text);
    assert_eq!(parsed, signed::parse_command(&text), "deterministic");
    if let Ok(c) = &parsed {
        assert!(text.encode_utf16().count() <= signed::CMD_MAX);
        assert!((22..=64).contains(&c.nonce.len()));
        assert!(c.iat > 0);
        match c.kind {
            signed::CmdKind::KeyAdd => assert_eq!(c.session, signed::KEYS_SESSION),
            _ => assert!(signed::session_ok(&c.session), "{}", c.session),
        }
        if let Some(t) = &c.text {
            assert!(t.encode_utf16().count() <= signed::TEXT_MAX && !t.trim().is_empty());
        }
        assert!(c.files.len() <= signed::FILES_MAX);
    }
    // A real ES256 key (P-256 generator point), enrolled, that signed none of these inputs.
    let trusted = [TrustedKey {
        id: "AAAAAAAAAAAAAAAAAAAAAA".into(),
        alg: -7,
        spki: "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEaxfR8uEsQkf4vOblY6RA8ncDfYEt6zOg9KE5RdiYwpZP40Li_hp_m47n60p8D54WK84zV2sxXs7LtkBoN79R9Q".into(),
    }];
    let opts = VerifyOptions {
        machine: "m_testmachine0000000001",
        rp_id: "localhost",
        trusted: &trusted,
        now: 1_800_000_000_000,
        max_age_ms: signed::MACHINE_MAX_AGE_MS,
    };
    let as_cmd = SignedCommand {
        cmd: text.to_string(),
        ..Default::default()
    };
    assert!(signed::verify_command(&as_cmd, &opts, None).is_err());
    if let Ok(envelope) = serde_json::from_slice::<SignedCommand>(data) {
        assert!(
            signed::verify_command(&envelope, &opts, None).is_err(),
            "an input verified without a signature"
        );
    }
}
