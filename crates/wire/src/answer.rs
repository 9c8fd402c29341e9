//! DECISIONS 30's answer fields beyond yes or no, shared by the unsigned message
//! ([`crate::control`]) and the signed command ([`crate::signed`]).
use serde_json::Value;

/// One of DECISIONS 30's `input` or `answers` is refused above this many bytes of JSON.
pub const RICH_MAX: usize = 100_000;

/// DECISIONS 30's answer fields beyond yes or no, each already checked against its shape:
/// `input` (an object, allow only), `interrupt` (deny only), `answers` (`{question: label}` or
/// `{question: [labels]}`, allow only). Unsigned they sit at the message's top level; signed,
/// inside `cmd`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rich {
    pub input: Option<serde_json::Map<String, Value>>,
    pub interrupt: bool,
    pub answers: Option<serde_json::Map<String, Value>>,
}

impl Rich {
    /// The fields present, by their wire names (for `unsupported` naming each).
    pub fn fields(&self) -> Vec<&'static str> {
        let mut f = Vec::new();
        if self.input.is_some() {
            f.push("input");
        }
        if self.interrupt {
            f.push("interrupt");
        }
        if self.answers.is_some() {
            f.push("answers");
        }
        f
    }

    pub fn is_empty(&self) -> bool {
        self.fields().is_empty()
    }

    /// As stored in control.db (`None` when empty).
    pub fn to_json(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mut o = serde_json::Map::new();
        if let Some(i) = &self.input {
            o.insert("input".into(), Value::Object(i.clone()));
        }
        if self.interrupt {
            o.insert("interrupt".into(), Value::Bool(true));
        }
        if let Some(a) = &self.answers {
            o.insert("answers".into(), Value::Object(a.clone()));
        }
        Some(Value::Object(o).to_string())
    }

    /// Reads what [`Rich::to_json`] stored; anything else is empty.
    pub fn from_json(s: Option<&str>) -> Rich {
        let Some(Value::Object(o)) = s.and_then(|s| serde_json::from_str(s).ok()) else {
            return Rich::default();
        };
        check_rich(&o, None).unwrap_or_default()
    }
}

/// Checks DECISIONS 30's `input`, `interrupt` and `answers` of one permission answer against
/// their shapes and the decision they may go with (`allow`: true for allow, false for deny,
/// `None`: not checked). The error names the field and the rule.
pub fn check_rich(
    obj: &serde_json::Map<String, Value>,
    allow: Option<bool>,
) -> Result<Rich, String> {
    let present = |k: &str| obj.get(k).filter(|v| !v.is_null());
    let mut rich = Rich::default();
    if let Some(v) = present("input") {
        let Value::Object(o) = v else {
            return Err(
                "invalid: input must be an object, the tool's whole input (DECISIONS 30)".into(),
            );
        };
        if v.to_string().len() > RICH_MAX {
            return Err(format!(
                "invalid: input must be at most {RICH_MAX} bytes of JSON (DECISIONS 30)"
            ));
        }
        if allow == Some(false) {
            return Err("invalid: input goes with allow only (DECISIONS 30)".into());
        }
        rich.input = Some(o.clone());
    }
    if let Some(v) = present("interrupt") {
        match v {
            Value::Bool(true) => {
                if allow == Some(true) {
                    return Err("invalid: interrupt goes with deny only (DECISIONS 30)".into());
                }
                rich.interrupt = true;
            }
            Value::Bool(false) => {}
            _ => return Err("invalid: interrupt must be true or absent (DECISIONS 30)".into()),
        }
    }
    if let Some(v) = present("answers") {
        let shape = "invalid: answers must map each question to a label, or to an array of labels for a multi-select (DECISIONS 30)";
        let Value::Object(o) = v else {
            return Err(shape.into());
        };
        let label = |l: &Value| l.as_str().is_some_and(|s| !s.is_empty());
        let ok = !o.is_empty()
            && o.iter().all(|(q, a)| {
                !q.is_empty()
                    && match a {
                        Value::String(_) => label(a),
                        Value::Array(ls) => !ls.is_empty() && ls.iter().all(label),
                        _ => false,
                    }
            });
        if !ok {
            return Err(shape.into());
        }
        if v.to_string().len() > RICH_MAX {
            return Err(format!(
                "invalid: answers must be at most {RICH_MAX} bytes of JSON (DECISIONS 30)"
            ));
        }
        if allow == Some(false) {
            return Err("invalid: answers go with allow only (DECISIONS 30)".into());
        }
        rich.answers = Some(o.clone());
    }
    Ok(rich)
}
