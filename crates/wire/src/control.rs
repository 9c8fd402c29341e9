//! Control messages as the receiver sends them, checked per DECISIONS 6 and 7.
use crate::clock::{self, Millis};
use crate::text::truncate;
use serde_json::Value;

pub const TEXT_MAX: usize = 20_000;
pub const NOTE_MAX: usize = 2_000;
pub const FOR_MAX: usize = 128;
pub const DETAIL_MAX: usize = 500;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    PermissionAnswer,
    Prompt,
    Cancel,
    /// A signed `start` that passed the machine's gate (DECISIONS 39): a new session, run by
    /// sp-sync's runner. Never read from unsigned control.
    Start,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::PermissionAnswer => "permission.answer",
            Kind::Prompt => "prompt",
            Kind::Cancel => "cancel",
            Kind::Start => "start",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
        }
    }
    pub fn parse(s: &str) -> Option<Decision> {
        match s {
            "allow" => Some(Decision::Allow),
            "deny" => Some(Decision::Deny),
            _ => None,
        }
    }
}

/// When a prompt reaches the session (DECISIONS 25): at the turn's end (`queue`, the
/// default), at the next tool boundary (`steer`), or in place of the pending tool
/// (`interrupt`). Our extension: v1 receivers omit it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PromptMode {
    #[default]
    Queue,
    Steer,
    Interrupt,
}

impl PromptMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PromptMode::Queue => "queue",
            PromptMode::Steer => "steer",
            PromptMode::Interrupt => "interrupt",
        }
    }

    /// `mode` of a message (absent: `queue`); any other value is refused naming the rule.
    pub fn parse(v: Option<&Value>) -> Result<PromptMode, String> {
        match v {
            None | Some(Value::Null) => Ok(PromptMode::Queue),
            Some(Value::String(s)) if s == "queue" => Ok(PromptMode::Queue),
            Some(Value::String(s)) if s == "steer" => Ok(PromptMode::Steer),
            Some(Value::String(s)) if s == "interrupt" => Ok(PromptMode::Interrupt),
            Some(_) => Err("invalid: mode must be queue, steer or interrupt".into()),
        }
    }
}

/// How far a permission answer reaches (DECISIONS 30 `scope`, our extension): this call
/// (`once`, the default) or, from the machine's own grant, every later call of the session
/// with the same tool and input (`session`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Scope {
    #[default]
    Once,
    Session,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Once => "once",
            Scope::Session => "session",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "once" => Some(Scope::Once),
            "session" => Some(Scope::Session),
            _ => None,
        }
    }
}

pub use crate::answer::{Rich, RICH_MAX};

/// Final outcomes of a control message (the ack's `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    Expired,
    Unsupported,
    Failed,
    /// Signed control: verification or the machine's policy said no (`code` says which).
    Refused,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::Expired => "expired",
            Outcome::Unsupported => "unsupported",
            Outcome::Failed => "failed",
            Outcome::Refused => "refused",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ControlMessage {
    pub id: String,
    pub kind: Kind,
    pub for_attention: Option<String>,
    /// A signed batch answer's attention ids, all of this message's session (DECISIONS 36);
    /// empty otherwise (then `for_attention` names the one attention).
    pub batch: Vec<String>,
    pub decision: Option<Decision>,
    pub text: Option<String>,
    pub note: Option<String>,
    pub at: String,
    pub expires_at: String,
    pub at_ms: Millis,
    pub expires_at_ms: Millis,
    /// A prompt's timing (DECISIONS 25); `Queue` for every other kind.
    pub mode: PromptMode,
    /// A permission answer's reach (DECISIONS 30); `Once` for every other kind.
    pub scope: Scope,
    /// A permission answer's `input`, `interrupt` and `answers` (DECISIONS 30); empty for
    /// every other kind. Boxed: most messages carry none.
    pub rich: Box<Rich>,
    /// A signed prompt that came on the day key alone, with no touch over it (DECISIONS 36):
    /// refused at delivery if its session has since switched to running tools unasked.
    pub day_key_only: bool,
    /// A signed command's nonce (docs/protocol.md#control-5 step 5): recorded in the same
    /// transaction that stores the message, and a seen one refuses it `replay`.
    pub nonce: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Checked {
    Valid(ControlMessage),
    /// Ack `failed` with this detail; never acted on.
    Invalid {
        id: String,
        kind: Option<String>,
        detail: String,
    },
    /// Ack `unsupported`.
    UnknownKind {
        id: String,
        kind: String,
    },
    /// No usable id, so nothing can be acked: logged and dropped.
    Unackable {
        reason: String,
    },
    /// Signed control: decided on arrival (refused, a `start` not delivered here, a verified
    /// `key.add` carried out), stored and acked with this outcome.
    Decided(Box<Decided>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    pub id: String,
    pub kind: String,
    pub outcome: Outcome,
    pub code: Option<String>,
    pub detail: String,
    /// Recorded with the decision when the command verified (so a replay is refused).
    pub nonce: Option<String>,
    /// A verified `key.add`: the key and its name, enrolled in the same transaction.
    pub add_key: Option<(crate::signed::TrustedKey, Option<String>)>,
}

impl Checked {
    /// The id to ack it under; `Err` with the reason when it has none.
    pub fn ack_id(&self) -> Result<&str, &str> {
        match self {
            Checked::Valid(v) => Ok(&v.id),
            Checked::Invalid { id, .. } | Checked::UnknownKind { id, .. } => Ok(id),
            Checked::Decided(d) => Ok(&d.id),
            Checked::Unackable { reason } => Err(reason),
        }
    }
}

fn str_field<'a>(
    obj: &'a serde_json::Map<String, Value>,
    key: &str,
) -> Result<Option<&'a str>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("invalid: {key} must be a string")),
    }
}

/// Checks one element of a poll's `messages` array.
pub fn check(value: &Value) -> Checked {
    let Some(obj) = value.as_object() else {
        return Checked::Unackable {
            reason: "message is not a JSON object".into(),
        };
    };
    let id = match obj.get("id") {
        Some(Value::String(s)) if crate::is_ulid(s) => s.clone(),
        Some(Value::String(s)) => {
            return Checked::Unackable {
                reason: format!("id {:?} is not a ULID", truncate(s, 40)),
            }
        }
        _ => {
            return Checked::Unackable {
                reason: "message has no string id".into(),
            }
        }
    };
    let kind_raw = match obj.get("kind") {
        Some(Value::String(k)) => k.clone(),
        Some(_) => return invalid(id, None, "invalid: kind must be a string"),
        None => return invalid(id, None, "invalid: kind is required"),
    };
    let kind = match kind_raw.as_str() {
        "permission.answer" => Kind::PermissionAnswer,
        "prompt" => Kind::Prompt,
        "cancel" => Kind::Cancel,
        _ => {
            return Checked::UnknownKind {
                id,
                kind: truncate(&kind_raw, 64),
            }
        }
    };
    let mode = match kind {
        Kind::Prompt => match PromptMode::parse(obj.get("mode")) {
            Ok(m) => m,
            Err(detail) => return invalid(id, Some(kind_raw), &detail),
        },
        _ => PromptMode::Queue,
    };
    let scope = match (kind, obj.get("scope")) {
        (Kind::PermissionAnswer, Some(Value::String(s))) => match Scope::parse(s) {
            Some(s) => s,
            None => return invalid(id, Some(kind_raw), "invalid: scope must be once or session"),
        },
        (Kind::PermissionAnswer, Some(v)) if !v.is_null() => {
            return invalid(id, Some(kind_raw), "invalid: scope must be once or session")
        }
        _ => Scope::Once,
    };
    match check_fields(obj, kind) {
        Ok((at, at_ms, expires_at, expires_at_ms, for_attention, decision, text, note)) => {
            let rich = match kind {
                Kind::PermissionAnswer => {
                    match crate::answer::check_rich(obj, decision.map(|d| d == Decision::Allow)) {
                        Ok(r) => Box::new(r),
                        Err(detail) => return invalid(id, Some(kind_raw), &detail),
                    }
                }
                _ => Box::default(),
            };
            Checked::Valid(ControlMessage {
                mode,
                scope,
                rich,
                id,
                kind,
                for_attention,
                batch: Vec::new(),
                day_key_only: false,
                decision,
                text,
                note,
                at,
                expires_at,
                at_ms,
                expires_at_ms,
                nonce: None,
            })
        }
        Err(detail) => invalid(id, Some(kind_raw), &detail),
    }
}

type Fields = (
    String,
    Millis,
    String,
    Millis,
    Option<String>,
    Option<Decision>,
    Option<String>,
    Option<String>,
);

fn check_fields(obj: &serde_json::Map<String, Value>, kind: Kind) -> Result<Fields, String> {
    let time = |key: &str| -> Result<(String, Millis), String> {
        let s = str_field(obj, key)?.ok_or_else(|| format!("invalid: {key} is required"))?;
        let ms = clock::parse_wire(s).ok_or_else(|| {
            format!(
                "invalid: {key} must be RFC 3339 UTC with milliseconds (YYYY-MM-DDTHH:MM:SS.mmmZ)"
            )
        })?;
        Ok((s.to_string(), ms))
    };
    let (at, at_ms) = time("at")?;
    let (expires_at, expires_at_ms) = time("expires_at")?;
    if expires_at_ms < at_ms {
        return Err("invalid: expires_at must not be before at".into());
    }
    let note = str_field(obj, "note")?.map(str::to_string);
    if let Some(n) = &note {
        if n.chars().count() > NOTE_MAX {
            return Err(format!(
                "invalid: note must be at most {NOTE_MAX} characters"
            ));
        }
    }
    let mut for_attention = None;
    let mut decision = None;
    let mut text = None;
    match kind {
        Kind::PermissionAnswer => {
            if obj.get("for").is_some_and(Value::is_array) {
                return Err(
                    "invalid: a `for` array (a batch answer) is signed control only (DECISIONS 36)"
                        .into(),
                );
            }
            let f =
                str_field(obj, "for")?.ok_or("invalid: for is required on permission.answer")?;
            if f.is_empty() || f.chars().count() > FOR_MAX {
                return Err(format!("invalid: for must be 1 to {FOR_MAX} characters"));
            }
            for_attention = Some(f.to_string());
            let d = str_field(obj, "decision")?
                .ok_or("invalid: decision is required on permission.answer")?;
            decision = Some(Decision::parse(d).ok_or("invalid: decision must be allow or deny")?);
        }
        Kind::Prompt => {
            let t = str_field(obj, "text")?.ok_or("invalid: text is required on prompt")?;
            if t.chars().count() > TEXT_MAX {
                return Err(format!(
                    "invalid: text must be at most {TEXT_MAX} characters"
                ));
            }
            if t.trim().is_empty() {
                return Err("invalid: text must not be empty".into());
            }
            text = Some(t.to_string());
        }
        Kind::Cancel | Kind::Start => {}
    }
    Ok((
        at,
        at_ms,
        expires_at,
        expires_at_ms,
        for_attention,
        decision,
        text,
        note,
    ))
}

fn invalid(id: String, kind: Option<String>, detail: &str) -> Checked {
    Checked::Invalid {
        id,
        kind,
        detail: detail.to_string(),
    }
}

/// DECISIONS 7: the earlier of `expires_at` on the local clock and receipt + (expires_at − at),
/// so a skewed receiver clock never lets a message act later than the receiver meant.
pub fn deadline(at_ms: Millis, expires_at_ms: Millis, received_ms: Millis) -> Millis {
    let lifetime = expires_at_ms.saturating_sub(at_ms).max(0);
    expires_at_ms.min(received_ms.saturating_add(lifetime))
}

/// What one ack says (DECISIONS 38): a final [`Outcome`], or, before it, `taken` (the
/// machine holds the message and is delivering it) or `progress` (the reply so far).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckStatus {
    Taken,
    Progress,
    Final(Outcome),
}

impl AckStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AckStatus::Taken => "taken",
            AckStatus::Progress => "progress",
            AckStatus::Final(o) => o.as_str(),
        }
    }

    /// Reads an ack's `outcome`; `None` for a word no version of the protocol has.
    pub fn parse(s: &str) -> Option<AckStatus> {
        Some(match s {
            "taken" => AckStatus::Taken,
            "progress" => AckStatus::Progress,
            "delivered" => AckStatus::Final(Outcome::Delivered),
            "expired" => AckStatus::Final(Outcome::Expired),
            "unsupported" => AckStatus::Final(Outcome::Unsupported),
            "failed" => AckStatus::Final(Outcome::Failed),
            "refused" => AckStatus::Final(Outcome::Refused),
            _ => return None,
        })
    }

    pub fn is_final(self) -> bool {
        matches!(self, AckStatus::Final(_))
    }
}

/// How a delivered message reached the session (DECISIONS 38, the ack's `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryMode {
    Api,
    Turn,
    Resume,
    Fork,
    Waiter,
    Start,
}

impl DeliveryMode {
    pub const ALL: [DeliveryMode; 6] = [
        DeliveryMode::Api,
        DeliveryMode::Turn,
        DeliveryMode::Resume,
        DeliveryMode::Fork,
        DeliveryMode::Waiter,
        DeliveryMode::Start,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryMode::Api => "api",
            DeliveryMode::Turn => "turn",
            DeliveryMode::Resume => "resume",
            DeliveryMode::Fork => "fork",
            DeliveryMode::Waiter => "waiter",
            DeliveryMode::Start => "start",
        }
    }

    pub fn parse(s: &str) -> Option<DeliveryMode> {
        Self::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

/// An ack's `reply` holds at most this many characters (DECISIONS 38).
pub const REPLY_MAX: usize = 20_000;
/// An ack's `session` (a fork's or a started session's id) holds at most this many.
pub const ACK_SESSION_MAX: usize = 256;

/// The agent's answer as an ack carries it: redacted (rule 37) and cut to [`REPLY_MAX`]
/// characters. Line breaks are kept: a reply is read as text. The whole text is redacted
/// before it is cut, so a PEM block over several lines goes whole and no secret is half shown.
pub fn ack_reply(text: &str) -> String {
    truncate(&crate::redact::redact(text).0, REPLY_MAX)
}

/// One entry of `POST {control}/ack`.
pub struct AckOut {
    pub id: String,
    pub outcome: AckStatus,
    pub at: String,
    /// A refusal's code (signed control).
    pub code: Option<String>,
    pub detail: Option<String>,
    /// A delivered message: how it went (DECISIONS 38).
    pub mode: Option<DeliveryMode>,
    /// A fork's or a started session's id.
    pub session: Option<String>,
    /// The agent's answer ([`ack_reply`]); on `progress`, the answer so far.
    pub reply: Option<String>,
    /// `progress` only: rising per message.
    pub seq: Option<u64>,
}

/// Body of `POST {control}/ack`.
pub fn ack_body(acks: &[AckOut]) -> Value {
    let items: Vec<Value> = acks
        .iter()
        .map(|a| {
            let mut o = serde_json::Map::new();
            o.insert("id".into(), Value::String(a.id.clone()));
            o.insert("outcome".into(), Value::String(a.outcome.as_str().into()));
            o.insert("at".into(), Value::String(a.at.clone()));
            if let Some(c) = &a.code {
                o.insert("code".into(), Value::String(c.clone()));
            }
            if let Some(d) = &a.detail {
                o.insert("detail".into(), Value::String(truncate(d, DETAIL_MAX)));
            }
            if let Some(m) = a.mode {
                o.insert("mode".into(), Value::String(m.as_str().into()));
            }
            if let Some(s) = &a.session {
                o.insert(
                    "session".into(),
                    Value::String(truncate(s, ACK_SESSION_MAX)),
                );
            }
            if let Some(r) = &a.reply {
                o.insert("reply".into(), Value::String(truncate(r, REPLY_MAX)));
            }
            if let Some(n) = a.seq {
                o.insert("seq".into(), Value::from(n));
            }
            Value::Object(o)
        })
        .collect();
    serde_json::json!({ "acks": items })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base(kind: &str) -> Value {
        json!({"id":"01K6ABCDEFGHJKMNPQRSTVWXYZ","kind":kind,"at":"2026-09-28T02:10:00.000Z","expires_at":"2026-09-28T02:12:00.000Z"})
    }

    fn detail(v: &Value) -> String {
        match check(v) {
            Checked::Invalid { detail, .. } => detail,
            other => panic!("expected invalid, got {other:?}"),
        }
    }

    #[test]
    fn valid_kinds() {
        let mut p = base("permission.answer");
        p["for"] = json!("perm-1");
        p["decision"] = json!("deny");
        p["note"] = json!("no");
        let Checked::Valid(m) = check(&p) else {
            panic!()
        };
        assert_eq!(m.decision, Some(Decision::Deny));
        assert_eq!(m.note.as_deref(), Some("no"));
        let mut t = base("prompt");
        t["text"] = json!("hi");
        assert!(matches!(check(&t), Checked::Valid(_)));
        assert!(matches!(check(&base("cancel")), Checked::Valid(_)));
        assert!(matches!(check(&base("start")), Checked::UnknownKind { .. }));
    }

    /// DECISIONS 36: a batch answer (`for` an array) is signed control only; unsigned, it is
    /// invalid with a detail naming the rule.
    #[test]
    fn an_unsigned_batch_answer_is_invalid_naming_the_rule() {
        let mut p = base("permission.answer");
        p["for"] = json!(["perm-1", "perm-2"]);
        p["decision"] = json!("allow");
        let d = detail(&p);
        assert!(
            d.contains("signed control only") && d.contains("DECISIONS 36"),
            "{d}"
        );
    }

    /// DECISIONS 30: `scope` is read on a permission answer only, and the fields not carried
    /// are listed so the answer can be acked `unsupported` naming them.
    #[test]
    fn rule_30_fields() {
        let mut p = base("permission.answer");
        p["for"] = json!("perm-1");
        p["decision"] = json!("allow");
        let Checked::Valid(m) = check(&p) else {
            panic!()
        };
        assert_eq!((m.scope, m.rich.is_empty()), (Scope::Once, true));
        p["scope"] = json!("session");
        p["answers"] = json!({"Which?": "A", "Which ones?": ["B", "C"]});
        p["input"] = json!({"command": "ls"});
        let Checked::Valid(m) = check(&p) else {
            panic!()
        };
        assert_eq!(m.scope, Scope::Session);
        assert_eq!(m.rich.fields(), ["input", "answers"]);
        assert_eq!(Rich::from_json(m.rich.to_json().as_deref()), *m.rich);
        // Each misuse is invalid, naming the field and the rule.
        for (field, value, decision, says) in [
            ("input", json!("ls"), "allow", "input must be an object"),
            (
                "input",
                json!({"command": "ls"}),
                "deny",
                "input goes with allow only",
            ),
            (
                "interrupt",
                json!(true),
                "allow",
                "interrupt goes with deny only",
            ),
            ("interrupt", json!("yes"), "deny", "interrupt must be true"),
            (
                "answers",
                json!({"Which?": 1}),
                "allow",
                "answers must map each question",
            ),
            (
                "answers",
                json!({}),
                "allow",
                "answers must map each question",
            ),
            (
                "answers",
                json!({"Which?": []}),
                "allow",
                "answers must map each question",
            ),
            (
                "answers",
                json!(["A"]),
                "allow",
                "answers must map each question",
            ),
            (
                "answers",
                json!({"Which?": "A"}),
                "deny",
                "answers go with allow only",
            ),
        ] {
            let mut q = base("permission.answer");
            q["for"] = json!("perm-1");
            q["decision"] = json!(decision);
            q[field] = value;
            let d = detail(&q);
            assert!(d.contains(says) && d.contains("DECISIONS 30"), "{d}");
        }
        let mut q = base("permission.answer");
        q["for"] = json!("perm-1");
        q["decision"] = json!("deny");
        q["interrupt"] = json!(true);
        let Checked::Valid(m) = check(&q) else {
            panic!()
        };
        assert_eq!(m.rich.fields(), ["interrupt"]);
        p.as_object_mut().unwrap().remove("answers");
        p.as_object_mut().unwrap().remove("input");
        p["scope"] = json!("forever");
        assert!(detail(&p).contains("scope must be once or session"));
        p["scope"] = json!(true);
        assert!(detail(&p).contains("scope must be once or session"));
        let mut t = base("prompt");
        t["text"] = json!("hi");
        t["scope"] = json!("session");
        let Checked::Valid(m) = check(&t) else {
            panic!()
        };
        assert_eq!(m.scope, Scope::Once);
    }

    #[test]
    fn each_rule_named() {
        let mut v = base("prompt");
        assert!(detail(&v).contains("text is required"));
        v["text"] = json!("x".repeat(20_001));
        assert!(detail(&v).contains("text must be at most 20000"));
        v["text"] = json!("é".repeat(20_000));
        assert!(matches!(check(&v), Checked::Valid(_)));
        v["note"] = json!("n".repeat(2_001));
        assert!(detail(&v).contains("note"));
        let mut v = base("permission.answer");
        v["decision"] = json!("allow");
        assert!(detail(&v).contains("for is required"));
        v["for"] = json!("a".repeat(129));
        assert!(detail(&v).contains("for must be"));
        v["for"] = json!("a");
        v["decision"] = json!("maybe");
        assert!(detail(&v).contains("decision must be allow or deny"));
        let mut v = base("cancel");
        v["at"] = json!("2026-09-28T02:10:00Z");
        assert!(detail(&v).contains("at must be RFC 3339"));
        let mut v = base("cancel");
        v["expires_at"] = json!("2026-09-28T02:00:00.000Z");
        assert!(detail(&v).contains("expires_at must not be before at"));
        assert!(matches!(
            check(&json!({"kind":"cancel"})),
            Checked::Unackable { .. }
        ));
        assert!(matches!(
            check(&json!({"id":"nope"})),
            Checked::Unackable { .. }
        ));
        assert!(matches!(check(&json!([1])), Checked::Unackable { .. }));
    }

    #[test]
    fn deadline_takes_the_earlier() {
        // Receiver clock 5 min ahead: expires_at read locally is far away; lifetime wins.
        assert_eq!(deadline(1_000_000, 1_120_000, 700_000), 820_000);
        // Receiver clock behind: expires_at already past locally wins.
        assert_eq!(deadline(1_000_000, 1_120_000, 1_300_000), 1_120_000);
    }
}
