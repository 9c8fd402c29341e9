//! Events as they arrive: stored once per (harness, session, seq), and the sessions and
//! attentions the page shows kept up to date from them.

use serde_json::{Map, Value};

use super::driver::{args, Conn, Engine, Row};
use super::fmt_ms;
use super::machines::{SESSION_MACHINE, SESSION_OWNER};
use super::snoozes::UNSNOOZE;
use super::store::EventStore;
use crate::validate::as_integer;
use spwire::clock::parse_wire;

// The ingest's SQL, one text for both stores (written once: driver.rs). The writes are
// upserts, so two receivers storing the first events of one session at once
// cannot collide on its key.
/// A session with no paired machine so far is claimed by the machine that sent this.
const CLAIM_SESSION: &str = "UPDATE sessions SET machine_id = ?2 WHERE key = ?1";
/// Stored once per (harness, session, seq), the protocol's dedup key: a duplicate changes
/// no row.
const INSERT_EVENT: &str = "INSERT INTO events(harness, session_id, seq, type, \
    event_id, received_ms, received_at, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
    ON CONFLICT(harness, session_id, seq) DO NOTHING";
const SESSION_INFO: &str = "SELECT info FROM sessions WHERE key = ?1";
/// A session's row: made by its first event; a later event (by seq) sets its state, an
/// older one arriving late still counts as activity and may fill fields (`info`, merged).
/// A `session.mode` event only fills fields (its `permission_mode`): a mode changed between
/// turns leaves an idle session idle.
const UPSERT_SESSION: &str = "INSERT INTO sessions(key, harness, session_id, \
    first_at, last_ms, last_at, last_type, last_seq, info, ended, machine_id) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?4, ?6, ?7, ?8, ?9, ?10) \
    ON CONFLICT(key) DO UPDATE SET last_ms = excluded.last_ms, last_at = excluded.last_at, \
    info = excluded.info, \
    last_type = CASE WHEN excluded.last_seq >= sessions.last_seq \
        AND excluded.last_type <> 'session.mode' \
        THEN excluded.last_type ELSE sessions.last_type END, \
    ended = CASE WHEN excluded.last_seq >= sessions.last_seq \
        AND excluded.last_type <> 'session.mode' \
        THEN excluded.ended ELSE sessions.ended END, \
    last_seq = CASE WHEN excluded.last_seq >= sessions.last_seq \
        AND excluded.last_type <> 'session.mode' \
        THEN excluded.last_seq ELSE sessions.last_seq END";
/// An attention follows the later, by seq, of its needed and cleared: an older one arriving
/// late changes no row.
const ATTENTION_NEEDED: &str = "INSERT INTO attentions(session_key, attention_id, \
    kind, tool, message, open, how, state_seq, needed_at, input, input_partial, input_sha256, \
    parked_until_ms) \
    VALUES (?1, ?2, ?3, ?4, ?5, 1, NULL, ?6, ?7, ?8, ?9, ?10, ?11) \
    ON CONFLICT(session_key, attention_id) DO UPDATE SET \
    kind = excluded.kind, tool = excluded.tool, message = excluded.message, \
    needed_at = CASE WHEN attentions.open = 1 AND excluded.parked_until_ms IS NOT NULL \
        THEN attentions.needed_at ELSE excluded.needed_at END, open = 1, \
    how = NULL, state_seq = excluded.state_seq, \
    cleared_at = NULL, input = excluded.input, input_partial = excluded.input_partial, \
    input_sha256 = excluded.input_sha256, parked_until_ms = excluded.parked_until_ms \
    WHERE attentions.state_seq <= excluded.state_seq";
const ATTENTION_CLEARED: &str = "INSERT INTO attentions(session_key, attention_id, \
    open, how, state_seq, cleared_at) VALUES (?1, ?2, 0, ?3, ?4, ?5) \
    ON CONFLICT(session_key, attention_id) DO UPDATE SET \
    open = 0, how = excluded.how, state_seq = excluded.state_seq, \
    cleared_at = excluded.cleared_at \
    WHERE attentions.state_seq <= excluded.state_seq";
pub(super) const EVENTS: &str = "SELECT body FROM events ORDER BY n";

/// Session fields a page shows; merged so an empty or absent field never blanks an earlier one.
const SESSION_FIELDS: &[&str] = &[
    "machine",
    "cwd",
    "repo",
    "branch",
    "model",
    "title",
    "url",
    // The mode the session's hooks last reported: the page asks for a touch for a message
    // to a session that runs tools without asking (DECISIONS 36); the machine decides.
    "permission_mode",
];

/// What became of one event of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stored {
    New,
    /// Its (harness, session, seq) was already there.
    Duplicate,
    /// Its session belongs to another machine than the token it came with (DECISIONS 33).
    Foreign,
}

/// What the store reads of one event (already validated).
struct EventKey<'a> {
    pub harness: &'a str,
    pub sid: &'a str,
    pub seq: i64,
    pub ty: &'a str,
    /// `harness:session`, the session's key.
    pub key: String,
}

impl<'a> EventKey<'a> {
    fn of(ev: &'a Value) -> EventKey<'a> {
        let harness = ev["harness"]["name"].as_str().unwrap_or_default();
        let sid = ev["session"]["id"].as_str().unwrap_or_default();
        EventKey {
            harness,
            sid,
            seq: as_integer(&ev["session"]["seq"]).unwrap_or_default(),
            ty: ev["type"].as_str().unwrap_or_default(),
            key: format!("{harness}:{sid}"),
        }
    }
}

/// Whether an event sent with `machine`'s token may touch a session owned by `owner` (its
/// paired machine, if any), and whether that token claims it now.
enum Owner {
    Foreign,
    Claim,
    Keep,
}

/// `owner`: the machine the session is bound to and whether it is still paired.
fn owner_check(owner: Option<(&str, bool)>, machine: Option<&str>) -> Owner {
    match (owner, machine) {
        (Some((o, _)), Some(m)) if m == o => Owner::Keep,
        // A removed machine's session: the shared token (the machine, unpaired, sends with
        // it) still may; no other machine's token takes it over.
        (Some((_, false)), None) => Owner::Keep,
        (Some(_), _) => Owner::Foreign,
        // No machine's so far (not there yet, or sent with the shared token): the machine
        // that sent it claims it.
        (None, Some(_)) => Owner::Claim,
        (None, None) => Owner::Keep,
    }
}

/// What one attention event writes: `needed` (kind, tool, message, input, input_partial)
/// or `cleared` (how).
enum AttentionWrite {
    Needed {
        id: String,
        kind: Option<String>,
        tool: Option<String>,
        message: Option<String>,
        input: Option<String>,
        partial: i64,
        /// The exact input's sha256 (64 lower-case hex digits), for grouping.
        sha256: Option<String>,
        /// DECISIONS 39: parked (its run ended waiting for it), answerable until then.
        parked_until_ms: Option<i64>,
    },
    Cleared {
        id: String,
        how: Option<String>,
    },
}

/// The attention write of an `attention.needed` / `attention.cleared` with an id.
fn attention_write(ty: &str, data: &Value) -> Option<AttentionWrite> {
    if !matches!(ty, "attention.needed" | "attention.cleared") {
        return None;
    }
    let id = data.get("attention_id").and_then(Value::as_str)?.to_owned();
    let s = |k: &str| data.get(k).and_then(Value::as_str).map(str::to_owned);
    Some(if ty == "attention.needed" {
        // DECISIONS 31: the call's input, an object of bounded size, kept for the page.
        let input = data
            .get("input")
            .filter(|v| v.is_object())
            .map(Value::to_string)
            .filter(|t| t.len() <= INPUT_MAX_BYTES);
        AttentionWrite::Needed {
            id,
            kind: s("kind"),
            tool: s("tool"),
            message: s("message"),
            input,
            partial: i64::from(data.get("input_partial") == Some(&Value::Bool(true))),
            sha256: s("input_sha256").filter(|h| {
                h.len() == 64 && h.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
            }),
            parked_until_ms: data
                .get("parked_until")
                .and_then(Value::as_str)
                .and_then(parse_wire),
        }
    } else {
        AttentionWrite::Cleared { id, how: s("how") }
    })
}

/// The session's fields after `ev`, merged into what was stored (`old`, its `info`): an
/// empty or absent field never blanks an earlier one.
fn merged_info(old: Option<&str>, ev: &Value, ty: &str) -> String {
    let mut info = old
        .and_then(|i| serde_json::from_str::<Map<String, Value>>(i).ok())
        .unwrap_or_default();
    for f in SESSION_FIELDS {
        if let Some(Value::String(s)) = ev["session"].get(*f) {
            if !s.is_empty() {
                info.insert((*f).into(), Value::String(s.clone()));
            }
        }
    }
    if ty == "session.started" {
        note_started(&mut info, &ev["data"]);
    }
    Value::Object(info).to_string()
}

/// The machine a session is bound to (a removed one's too) and whether that machine is
/// still paired here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionOwner {
    /// `None`: no machine's token sent for it so far.
    pub machine: Option<String>,
    pub paired: bool,
}

impl SessionOwner {
    fn read(r: &Row) -> anyhow::Result<SessionOwner> {
        Ok(SessionOwner {
            machine: r.opt_text(0)?,
            paired: r.opt_int(1)?.is_some_and(|p| p != 0),
        })
    }
}

/// The session `key` is bound to, if there is such a session.
fn owner_of(c: &mut dyn Conn, key: &str) -> anyhow::Result<Option<SessionOwner>> {
    c.row(SESSION_OWNER, args![key])?
        .map(|r| SessionOwner::read(&r))
        .transpose()
}

impl<E: Engine> EventStore for E {
    /// Stores valid events sent with `machine`'s token (`None`: the shared sink token), one
    /// transaction for the batch. A session belongs to the paired machine whose token its
    /// first event came with (or the first one after, while it has none); no other token
    /// touches it afterwards. The sessions the batch names are held first (receivers
    /// sharing a database store a session's events one at a time: `Conn::lock_sessions`).
    fn insert_events(
        &self,
        events: &[&Value],
        now_ms: i64,
        machine: Option<&str>,
    ) -> anyhow::Result<Vec<Stored>> {
        let keys: Vec<EventKey> = events.iter().map(|ev| EventKey::of(ev)).collect();
        let now = (now_ms, fmt_ms(now_ms));
        self.tx(|c| {
            c.lock_sessions(&keys.iter().map(|e| e.key.as_str()).collect::<Vec<_>>())?;
            let mut out = Vec::with_capacity(events.len());
            for (ev, e) in events.iter().zip(&keys) {
                out.push(store_event(c, ev, e, &now, machine)?);
            }
            if out.contains(&Stored::New) {
                c.announce("events")?;
            }
            Ok(out)
        })
    }

    fn page_sessions(&self, now_ms: i64, live_ms: i64) -> anyhow::Result<Vec<Value>> {
        self.snapshot(|c| super::sessions::page_sessions(c, now_ms, live_ms))
    }

    /// The paired machine a session belongs to: `None` no such session, `Some(None)` one the
    /// shared sink token sent, or whose machine was removed (DECISIONS 33).
    fn session_machine(&self, key: &str) -> anyhow::Result<Option<Option<String>>> {
        self.conn(|c| {
            let key = c.text(key);
            c.row(SESSION_MACHINE, args![&*key])?
                .map(|r| r.opt_text(0))
                .transpose()
        })
    }

    /// The machine session `key` is bound to and whether it is still paired here: `None` no
    /// such session.
    fn session_owner(&self, key: &str) -> anyhow::Result<Option<SessionOwner>> {
        self.conn(|c| {
            let key = c.text(key);
            owner_of(c, &key)
        })
    }
}

/// Stores one event of a batch: refused when its session is another machine's, kept once
/// by its (harness, session, seq), and its session and attention brought up to date.
fn store_event(
    c: &mut dyn Conn,
    ev: &Value,
    e: &EventKey,
    (now_ms, now_at): &(i64, String),
    machine: Option<&str>,
) -> anyhow::Result<Stored> {
    let owner = owner_of(c, &e.key)?;
    let bound = owner
        .as_ref()
        .and_then(|o| Some((o.machine.as_deref()?, o.paired)));
    match owner_check(bound, machine) {
        Owner::Foreign => return Ok(Stored::Foreign),
        Owner::Claim => {
            c.execute(CLAIM_SESSION, args![e.key.as_str(), machine])?;
        }
        Owner::Keep => {}
    }
    let body = ev.to_string();
    let id = ev["id"].as_str().unwrap_or_default();
    let at = now_at.as_str();
    let n = c.execute(
        INSERT_EVENT,
        args![
            e.harness,
            e.sid,
            e.seq,
            e.ty,
            id,
            *now_ms,
            at,
            body.as_str()
        ],
    )?;
    if n == 0 {
        return Ok(Stored::Duplicate);
    }
    let old = c
        .row(SESSION_INFO, args![e.key.as_str()])?
        .map(|r| r.text(0))
        .transpose()?;
    let info = merged_info(old.as_deref(), ev, e.ty);
    c.execute(
        UPSERT_SESSION,
        args![
            e.key.as_str(),
            e.harness,
            e.sid,
            at,
            *now_ms,
            e.ty,
            e.seq,
            info.as_str(),
            i64::from(e.ty == "session.ended"),
            machine
        ],
    )?;
    if let Some(w) = attention_write(e.ty, &ev["data"]) {
        write_attention(c, e, at, w)?;
    }
    Ok(Stored::New)
}

/// An attention's fields as the engine keeps text (`Conn::text`).
fn kept<'s>(c: &dyn Conn, s: &'s Option<String>) -> Option<std::borrow::Cow<'s, str>> {
    s.as_deref().map(|t| c.text(t))
}

fn write_attention(
    c: &mut dyn Conn,
    e: &EventKey,
    at: &str,
    w: AttentionWrite,
) -> anyhow::Result<()> {
    let key = e.key.as_str();
    match w {
        AttentionWrite::Needed {
            id,
            kind,
            tool,
            message,
            input,
            partial,
            sha256,
            parked_until_ms,
        } => {
            let id = c.text(&id);
            let (kind, tool, message) = (kept(c, &kind), kept(c, &tool), kept(c, &message));
            c.execute(
                ATTENTION_NEEDED,
                args![
                    key,
                    &*id,
                    kind.as_deref(),
                    tool.as_deref(),
                    message.as_deref(),
                    e.seq,
                    at,
                    input.as_deref(),
                    partial,
                    sha256.as_deref(),
                    parked_until_ms
                ],
            )?;
        }
        AttentionWrite::Cleared { id, how } => {
            let (id, how) = (c.text(&id), kept(c, &how));
            let n = c.execute(
                ATTENTION_CLEARED,
                args![key, &*id, how.as_deref(), e.seq, at],
            )?;
            // A cleared prompt is no longer put off: asked again, it is news again.
            if n > 0 {
                c.execute(UNSNOOZE, args![key, &*id])?;
            }
        }
    }
    Ok(())
}

/// Longest agent name kept (the sender's own cap).
const AGENT_MAX: usize = 40;
const WHEN: &[&str] = &["now", "tool_boundary", "turn_end", "no"];
const ANSWER_FIELDS: &[&str] = &["scope", "input", "interrupt", "answers"];

/// What a `session.started` says of the session for the page: the agent's name (sp-acp) and
/// when each control word takes effect there (`data.control`, DECISIONS 30). The sender is
/// not trusted with the page: the name loses control characters and is clipped, and only
/// known words of `control` are kept.
fn note_started(info: &mut Map<String, Value>, data: &Value) {
    if let Some(name) = data.get("agent").and_then(Value::as_str) {
        let clean: String = name
            .chars()
            .filter(|c| !c.is_control() && !matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}'))
            .take(AGENT_MAX)
            .collect();
        if !clean.trim().is_empty() {
            info.insert("agent".into(), Value::String(clean.trim().to_string()));
        }
    }
    let Some(c) = data.get("control").and_then(Value::as_object) else {
        return;
    };
    let when = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .filter(|w| WHEN.contains(w))
            .map(|w| Value::String(w.into()))
    };
    let mut out = Map::new();
    if let Some(p) = c.get("prompt").and_then(Value::as_object) {
        let mut modes = Map::new();
        for m in ["queue", "steer", "interrupt"] {
            if let Some(w) = when(p.get(m)) {
                modes.insert(m.into(), w);
            }
        }
        out.insert("prompt".into(), Value::Object(modes));
    }
    if let Some(w) = when(c.get("cancel")) {
        out.insert("cancel".into(), w);
    }
    if let Some(a) = c.get("answer").and_then(Value::as_array) {
        let fields: Vec<Value> = ANSWER_FIELDS
            .iter()
            .filter(|f| a.iter().any(|x| x.as_str() == Some(**f)))
            .map(|f| Value::String((*f).into()))
            .collect();
        out.insert("answer".into(), Value::Array(fields));
    }
    info.insert("control".into(), Value::Object(out));
}

/// The most bytes of a prompt's input kept (the sender sends at most 4,000 characters).
const INPUT_MAX_BYTES: usize = 32 * 1024;

#[cfg(test)]
mod tests {
    use super::super::store::PairingStore;
    use super::super::{Db, Sqlite};
    use super::*;
    use serde_json::json;

    fn ev(sid: &str, seq: i64, ty: &str, data: Value) -> Value {
        json!({"protocol":1,"id":ulid::Ulid::new().to_string(),"type":ty,"time":"2026-01-01T00:00:00.000Z",
            "tier":1,"harness":{"name":"claude-code"},"session":{"id":sid,"seq":seq,"cwd":"~/x"},
            "privacy":{"rulesets":["secrets@1"],"pii":false},"data":data})
    }

    /// Issue 40: a mode changed between turns shows on the card at once and leaves an idle
    /// session idle.
    #[test]
    fn a_session_mode_event_sets_the_mode_and_keeps_the_state() {
        let db = Sqlite::new(Db::open_memory().unwrap());
        let now = 1_800_000_000_000;
        let a = ev("m", 0, "session.started", json!({"source": "startup"}));
        let b = ev("m", 1, "turn.ended", json!({"reason": "stop"}));
        let mut c = ev(
            "m",
            2,
            "session.mode",
            json!({"permission_mode": "default"}),
        );
        c["session"]["permission_mode"] = json!("default");
        db.insert_events(&[&a, &b, &c], now, None).unwrap();
        let s = db.page_sessions(now, 3_600_000).unwrap();
        assert_eq!(s[0]["permission_mode"], "default");
        assert_eq!(s[0]["state"], "idle");
        assert_eq!(s[0]["last_type"], "turn.ended");
    }

    #[test]
    fn session_started_keeps_the_agent_and_its_control_cleaned() {
        let db = Sqlite::new(Db::open_memory().unwrap());
        let now = 1_800_000_000_000;
        let mut a = ev(
            "s",
            0,
            "session.started",
            json!({"source": "startup", "agent": "Evil\u{1b}[2J\u{202e}Agent".to_string() + &"x".repeat(100),
                   "control": {"prompt": {"queue": "turn_end", "steer": "tool_boundary", "interrupt": "<b>"},
                               "cancel": "now", "answer": ["scope", "rm -rf"], "extra": 1}}),
        );
        a["harness"]["name"] = json!("acp");
        let b = ev("s", 1, "turn.ended", json!({"reason": "stop"}));
        let mut b = b;
        b["harness"]["name"] = json!("acp");
        db.insert_events(&[&a, &b], now, None).unwrap();
        let s = db.page_sessions(now, 3_600_000).unwrap();
        let agent = s[0]["agent"].as_str().unwrap();
        assert!(
            agent.starts_with("Evil[2JAgent") && agent.chars().count() == AGENT_MAX,
            "{agent}"
        );
        assert_eq!(
            s[0]["control"],
            json!({"prompt": {"queue": "turn_end", "steer": "tool_boundary"}, "cancel": "now", "answer": ["scope"]})
        );
    }

    #[test]
    fn attentions_follow_seq() {
        let db = Sqlite::new(Db::open_memory().unwrap());
        let now = 1_800_000_000_000;
        let a = ev("s", 0, "session.started", json!({"source":"startup"}));
        let b = ev(
            "s",
            1,
            "attention.needed",
            json!({"attention_id":"p1","kind":"permission","tool":"Bash","message":"ls",
                   "input":{"command":"ls","description":"list"},"input_partial":true}),
        );
        assert_eq!(
            db.insert_events(&[&a, &b, &a], now, None).unwrap(),
            vec![Stored::New, Stored::New, Stored::Duplicate]
        );
        let s = db.page_sessions(now, 3_600_000).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0]["state"], "needs you");
        assert_eq!(s[0]["cwd"], "~/x");
        assert_eq!(s[0]["attentions"][0]["tool"], "Bash");
        // DECISIONS 31: the input the machine showed goes to the page as it came.
        assert_eq!(
            s[0]["attentions"][0]["input"],
            json!({"command":"ls","description":"list"})
        );
        assert_eq!(s[0]["attentions"][0]["input_partial"], true);
        // A cleared with an older seq than a newer needed does not close it.
        let c = ev(
            "s",
            2,
            "attention.cleared",
            json!({"attention_id":"p1","how":"answered"}),
        );
        db.insert_events(&[&c], now, None).unwrap();
        let s = db.page_sessions(now, 3_600_000).unwrap();
        assert_eq!(s[0]["attentions"], json!([]));
        assert_eq!(s[0]["state"], "active");
        // Not live after live_ms.
        assert!(db
            .page_sessions(now + 4_000_000, 3_600_000)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_session_keeps_the_machine_its_events_came_from() {
        let db = Sqlite::new(Db::open_memory().unwrap());
        let now = 1_800_000_000_000;
        for m in ["m_a", "m_b"] {
            db.db()
                .conn
                .execute("INSERT INTO machines(id, paired_ms) VALUES (?1, 0)", [m])
                .unwrap();
        }
        let a0 = ev("a", 0, "session.started", json!({"source":"startup"}));
        let b0 = ev("b", 0, "session.started", json!({"source":"startup"}));
        let u0 = ev("u", 0, "session.started", json!({"source":"startup"}));
        assert_eq!(
            db.insert_events(&[&a0], now, Some("m_a")).unwrap(),
            vec![Stored::New]
        );
        assert_eq!(
            db.insert_events(&[&b0], now, Some("m_b")).unwrap(),
            vec![Stored::New]
        );
        assert_eq!(
            db.insert_events(&[&u0], now, None).unwrap(),
            vec![Stored::New]
        );
        // Machine A's token, and the shared token, cannot touch B's session.
        let b1 = ev(
            "b",
            1,
            "attention.needed",
            json!({"attention_id":"p1","kind":"permission","tool":"Bash"}),
        );
        assert_eq!(
            db.insert_events(&[&b1], now, Some("m_a")).unwrap(),
            vec![Stored::Foreign]
        );
        assert_eq!(
            db.insert_events(&[&b1], now, None).unwrap(),
            vec![Stored::Foreign]
        );
        // Nor a duplicate of B's own event (it is not theirs to confirm).
        assert_eq!(
            db.insert_events(&[&b0], now, Some("m_a")).unwrap(),
            vec![Stored::Foreign]
        );
        // An unowned session is claimed by the first paired machine that sends for it, then kept.
        let u1 = ev("u", 1, "turn.ended", json!({"reason":"stop"}));
        assert_eq!(
            db.insert_events(&[&u1], now, Some("m_a")).unwrap(),
            vec![Stored::New]
        );
        let u2 = ev("u", 2, "turn.ended", json!({"reason":"stop"}));
        assert_eq!(
            db.insert_events(&[&u2], now, None).unwrap(),
            vec![Stored::Foreign]
        );
        assert_eq!(
            db.insert_events(&[&b1], now, Some("m_b")).unwrap(),
            vec![Stored::New]
        );
        let s = db.page_sessions(now, 3_600_000).unwrap();
        let owner = |sid: &str| s.iter().find(|x| x["id"] == sid).unwrap()["machine_id"].clone();
        assert_eq!(owner("a"), "m_a");
        assert_eq!(owner("b"), "m_b");
        assert_eq!(owner("u"), "m_a");
        let b = s.iter().find(|x| x["id"] == "b").unwrap();
        assert_eq!(b["attentions"][0]["attention_id"], "p1");
        // Once B is removed its sessions are guarded no longer; the shared token sends again.
        assert!(db.remove_machine("m_b").unwrap());
        assert_eq!(db.session_machine("claude-code:b").unwrap(), Some(None));
        let b2 = ev("b", 2, "turn.ended", json!({"reason":"stop"}));
        assert_eq!(
            db.insert_events(&[&b2], now, None).unwrap(),
            vec![Stored::New]
        );
        assert_eq!(
            db.session_machine("claude-code:a").unwrap(),
            Some(Some("m_a".into()))
        );
    }
}
