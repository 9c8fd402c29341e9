//! An agent's `elicitation/create` as a question for the phone (docs/decisions.md rule 41).
//! A form becomes an attention of tool [`QUESTION`] whose input lists its fields as questions
//! (shaped like Claude Code's AskUserQuestion, so the page shows their options and a box for
//! free text); the person's `answers` (rule 30: keyed by the question's text or the field's
//! key, a label or a list of labels, or free text) become the elicitation's `accept` content.
//! A URL-mode elicitation is shown as the link for the person to open; the machine never
//! follows it.
use agent_client_protocol_schema::v1 as schema;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

/// The tool an ACP question is announced as.
pub const QUESTION: &str = "question";
/// The tool a URL-mode elicitation is announced as.
pub const LINK: &str = "open_link";
/// At most this many fields in a form, and options in a field; a bigger one is not announced.
pub const MAX_FIELDS: usize = 32;
pub const MAX_OPTIONS: usize = 64;

#[derive(Debug, Clone, PartialEq)]
pub enum FieldType {
    /// One of `options` (`(const, label)`), or several when `multi`.
    Choice {
        options: Vec<(String, String)>,
        multi: bool,
    },
    Text,
    Number {
        integer: bool,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub key: String,
    /// The question as the person reads it.
    pub question: String,
    pub header: Option<String>,
    pub required: bool,
    pub ty: FieldType,
    /// Descriptions of the options, as shown.
    pub option_notes: Vec<Option<String>>,
    /// The free-text field that goes with this choice (claude-agent-acp's `KEY_custom`,
    /// "Other"), which takes an answer that is none of the labels.
    pub other: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Form(Vec<Field>),
    Url { url: String },
}

/// What an `elicitation/create` asks.
#[derive(Debug, Clone, PartialEq)]
pub struct Elicit {
    /// The session, when the elicitation names it; else the request it belongs to.
    pub session_id: Option<String>,
    pub request_id: Option<Value>,
    pub tool_call_id: Option<String>,
    pub message: String,
    pub kind: Kind,
}

/// Reads an `elicitation/create`'s params; Err says why it is not announced.
pub fn read(params: &RawValue) -> Result<Elicit, String> {
    let r: schema::CreateElicitationRequest =
        serde_json::from_str(params.get()).map_err(|e| format!("not ACP's schema: {e}"))?;
    let (scope, kind) = match r.mode {
        schema::ElicitationMode::Form(f) => (
            f.scope,
            Kind::Form(fields(&f.requested_schema, &r.message)?),
        ),
        schema::ElicitationMode::Url(u) => (u.scope, Kind::Url { url: u.url }),
        _ => return Err("a mode sp-acp does not know".into()),
    };
    let (session_id, tool_call_id, request_id) = match scope {
        schema::ElicitationScope::Session(s) => (
            Some(s.session_id.0.to_string()),
            s.tool_call_id.map(|t| t.0.to_string()),
            None,
        ),
        schema::ElicitationScope::Request(q) => (
            None,
            None,
            Some(serde_json::to_value(q.request_id).unwrap_or(Value::Null)),
        ),
        _ => return Err("a scope sp-acp does not know".into()),
    };
    Ok(Elicit {
        session_id,
        request_id,
        tool_call_id,
        message: r.message,
        kind,
    })
}

fn fields(s: &schema::ElicitationSchema, message: &str) -> Result<Vec<Field>, String> {
    use schema::ElicitationPropertySchema as P;
    if s.properties.len() > MAX_FIELDS {
        return Err(format!("{} fields, over {MAX_FIELDS}", s.properties.len()));
    }
    let required = s.required.clone().unwrap_or_default();
    let choices = s
        .properties
        .values()
        .filter(|p| {
            matches!(p, P::String(x) if x.one_of.is_some() || x.enum_values.is_some())
                || matches!(p, P::Array(_))
        })
        .count();
    let mut out = Vec::new();
    for (key, p) in &s.properties {
        let (title, description, ty) = match p {
            P::String(x) => (
                x.title.clone(),
                x.description.clone(),
                string_options(x).map(|o| (o, false)),
            ),
            P::Array(x) => (
                x.title.clone(),
                x.description.clone(),
                Some((array_options(key, x)?, true)),
            ),
            P::Boolean(x) => (
                x.title.clone(),
                x.description.clone(),
                Some((
                    vec![
                        ("true".into(), "Yes".into(), None),
                        ("false".into(), "No".into(), None),
                    ],
                    false,
                )),
            ),
            P::Number(x) => {
                push_text(
                    &mut out,
                    key,
                    &x.title,
                    &x.description,
                    FieldType::Number { integer: false },
                    &required,
                );
                continue;
            }
            P::Integer(x) => {
                push_text(
                    &mut out,
                    key,
                    &x.title,
                    &x.description,
                    FieldType::Number { integer: true },
                    &required,
                );
                continue;
            }
            _ => return Err(format!("field {key:?}: a type sp-acp does not know")),
        };
        let Some((options, multi)) = ty else {
            push_text(
                &mut out,
                key,
                &title,
                &description,
                FieldType::Text,
                &required,
            );
            continue;
        };
        if options.is_empty() || options.len() > MAX_OPTIONS {
            return Err(format!("field {key:?}: {} options", options.len()));
        }
        // A lone choice reads as the form's message (claude-agent-acp puts the question
        // there and only the header on the field).
        let question = description
            .clone()
            .or_else(|| (choices == 1).then(|| message.to_string()))
            .or_else(|| title.clone())
            .unwrap_or_else(|| key.clone());
        out.push(Field {
            key: key.clone(),
            question,
            header: title,
            required: required.contains(key),
            option_notes: options.iter().map(|o| o.2.clone()).collect(),
            ty: FieldType::Choice {
                options: options.into_iter().map(|(c, t, _)| (c, t)).collect(),
                multi,
            },
            other: None,
        });
    }
    fold_other_fields(&mut out);
    Ok(out)
}

/// An option: the value sent back, its title, its description.
type Opt = (String, String, Option<String>);

/// A string field's choices (`oneOf` with titles, else a plain `enum`), if it has any.
fn string_options(x: &schema::StringPropertySchema) -> Option<Vec<Opt>> {
    let titled = x.one_of.as_ref().map(|o| {
        o.iter()
            .map(|e| (e.value.clone(), e.title.clone(), e.description.clone()))
            .collect()
    });
    titled.or_else(|| {
        x.enum_values
            .as_ref()
            .map(|v| v.iter().map(|e| (e.clone(), e.clone(), None)).collect())
    })
}

/// A multi-select field's choices.
fn array_options(key: &str, x: &schema::MultiSelectPropertySchema) -> Result<Vec<Opt>, String> {
    Ok(match &x.items {
        schema::MultiSelectItems::Titled(t) => t
            .options
            .iter()
            .map(|e| (e.value.clone(), e.title.clone(), e.description.clone()))
            .collect(),
        schema::MultiSelectItems::String(v) => v
            .values
            .iter()
            .map(|e| (e.clone(), e.clone(), None))
            .collect(),
        _ => return Err(format!("field {key:?}: items sp-acp does not know")),
    })
}

/// A free-text field named for a choice (`KEY_custom`, or `KEY_…` titled "Other") is that
/// choice's own free answer, not a question of its own: folded into the choice.
fn fold_other_fields(out: &mut Vec<Field>) {
    let keys: Vec<String> = out
        .iter()
        .filter(|f| matches!(f.ty, FieldType::Choice { .. }))
        .map(|f| f.key.clone())
        .collect();
    for k in keys {
        let other = out.iter().position(|f| {
            f.ty == FieldType::Text
                && (f.key == format!("{k}_custom")
                    || (f.key.starts_with(&format!("{k}_"))
                        && f.header
                            .as_deref()
                            .is_some_and(|t| t.eq_ignore_ascii_case("other"))))
        });
        if let Some(i) = other {
            let o = out.remove(i);
            if let Some(f) = out.iter_mut().find(|f| f.key == k) {
                f.other = Some(o.key);
            }
        }
    }
}

fn push_text(
    out: &mut Vec<Field>,
    key: &str,
    title: &Option<String>,
    description: &Option<String>,
    ty: FieldType,
    required: &[String],
) {
    out.push(Field {
        key: key.to_string(),
        question: description
            .clone()
            .or_else(|| title.clone())
            .unwrap_or_else(|| key.to_string()),
        header: title.clone(),
        required: required.iter().any(|r| r == key),
        ty,
        option_notes: Vec::new(),
        other: None,
    });
}

/// The attention's tool, message and input (rule 31: the person sees what they answer).
pub fn shown(e: &Elicit) -> (&'static str, String, Value) {
    match &e.kind {
        Kind::Url { url } => (
            LINK,
            format!("{} (open {url})", e.message),
            json!({"url": url, "message": e.message}),
        ),
        Kind::Form(fields) => {
            let questions: Vec<Value> = fields
                .iter()
                .map(|f| match &f.ty {
                    FieldType::Choice { options, multi } => json!({
                        "id": f.key, "question": f.question, "header": f.header,
                        "options": options.iter().zip(&f.option_notes)
                            .map(|((_, label), note)| json!({"label": label, "description": note}))
                            .collect::<Vec<_>>(),
                        "multiSelect": multi,
                    }),
                    _ => json!({"id": f.key, "question": f.question, "header": f.header,
                                "options": [], "freeText": true, "required": f.required}),
                })
                .collect();
            (QUESTION, e.message.clone(), json!({"questions": questions}))
        }
    }
}

/// The `accept` content for the person's `answers`; Err names what does not fit (then
/// nothing is answered and the question stays open).
pub fn content(
    fields: &[Field],
    answers: &Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    let still_open = "; nothing was answered, the question is still open";
    let mut out = Map::new();
    let mut used = 0;
    for f in fields {
        let Some(a) = answers.get(&f.question).or_else(|| answers.get(&f.key)) else {
            if f.required || matches!(f.ty, FieldType::Choice { .. }) {
                return Err(format!(
                    "answers: no answer for the question {:?}{still_open}",
                    f.question
                ));
            }
            continue;
        };
        used += 1;
        let given: Vec<&str> = match a {
            Value::String(s) => vec![s.as_str()],
            Value::Array(v) if !v.is_empty() && v.iter().all(Value::is_string) => {
                v.iter().filter_map(Value::as_str).collect()
            }
            _ => {
                return Err(format!(
                "answers: the answer to {:?} is not a label, a list of labels or text{still_open}",
                f.question
            ))
            }
        };
        match &f.ty {
            FieldType::Choice { options, multi } => {
                if !multi && given.len() > 1 {
                    return Err(format!(
                        "answers: {:?} takes one answer, not {}{still_open}",
                        f.question,
                        given.len()
                    ));
                }
                let mut picked = Vec::new();
                let mut free = Vec::new();
                for g in given {
                    match options.iter().find(|(_, label)| label == g) {
                        Some((c, _)) => picked.push(c.clone()),
                        None => free.push(g),
                    }
                }
                if !free.is_empty() {
                    let Some(other) = &f.other else {
                        return Err(format!(
                            "answers: {:?} is none of the options of {:?}, which takes no free text{still_open}",
                            free[0], f.question
                        ));
                    };
                    out.insert(other.clone(), Value::String(free.join(", ")));
                }
                let value = match (multi, picked.as_slice()) {
                    (true, _) => json!(picked),
                    (false, [c]) if (c == "true" || c == "false") && is_bool(options) => {
                        json!(c == "true")
                    }
                    (false, [c]) => json!(c),
                    (false, _) => continue,
                };
                out.insert(f.key.clone(), value);
            }
            FieldType::Text if given.len() == 1 => {
                out.insert(f.key.clone(), json!(given[0]));
            }
            FieldType::Number { integer } if given.len() == 1 => {
                let n = given[0].trim();
                let v = if *integer {
                    n.parse::<i64>().ok().map(Value::from)
                } else {
                    n.parse::<f64>()
                        .ok()
                        .filter(|x| x.is_finite())
                        .map(Value::from)
                };
                let Some(v) = v else {
                    return Err(format!(
                        "answers: {n:?} is not a number, as {:?} needs{still_open}",
                        f.question
                    ));
                };
                out.insert(f.key.clone(), v);
            }
            _ => {
                return Err(format!(
                    "answers: {:?} takes one answer{still_open}",
                    f.question
                ))
            }
        }
    }
    if used != answers.len() {
        return Err(format!(
            "answers: an answer names no question asked{still_open}"
        ));
    }
    Ok(out)
}

fn is_bool(options: &[(String, String)]) -> bool {
    options.len() == 2 && options[0].0 == "true" && options[1].0 == "false"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(v: Value) -> Box<RawValue> {
        RawValue::from_string(v.to_string()).unwrap()
    }

    /// As claude-agent-acp 0.101.0 sends an AskUserQuestion of one question
    /// (`askUserQuestionsToCreateRequest`).
    fn claude_one_question() -> Value {
        json!({"mode": "form", "sessionId": "s1", "toolCallId": "toolu_1",
               "message": "Which fruit should I use?",
               "requestedSchema": {"type": "object", "properties": {
                   "question_0": {"type": "string", "title": "Fruit", "oneOf": [
                       {"const": "Apple", "title": "Apple", "description": "crisp"},
                       {"const": "Mango", "title": "Mango"}]},
                   "question_0_custom": {"type": "string", "title": "Other",
                       "description": "Type your own answer, or add a note to the option you chose above (optional)."}}}})
    }

    #[test]
    fn claude_agent_acps_question_is_shown_with_its_options_and_answered_by_label() {
        let e = read(&raw(claude_one_question())).unwrap();
        assert_eq!(e.session_id.as_deref(), Some("s1"));
        assert_eq!(e.tool_call_id.as_deref(), Some("toolu_1"));
        let Kind::Form(fields) = &e.kind else {
            panic!()
        };
        assert_eq!(fields.len(), 1, "the Other box belongs to its question");
        assert_eq!(fields[0].other.as_deref(), Some("question_0_custom"));
        let (tool, message, input) = shown(&e);
        assert_eq!(
            (tool, message.as_str()),
            (QUESTION, "Which fruit should I use?")
        );
        assert_eq!(
            input["questions"][0]["question"],
            "Which fruit should I use?"
        );
        assert_eq!(input["questions"][0]["header"], "Fruit");
        assert_eq!(
            input["questions"][0]["options"][0],
            json!({"label": "Apple", "description": "crisp"})
        );
        let a = |v: Value| content(fields, v.as_object().unwrap());
        assert_eq!(
            a(json!({"Which fruit should I use?": "Mango"})).unwrap(),
            *json!({"question_0": "Mango"}).as_object().unwrap()
        );
        assert_eq!(
            a(json!({"question_0": "Kiwi"})).unwrap(),
            *json!({"question_0_custom": "Kiwi"}).as_object().unwrap()
        );
        assert!(a(json!({}))
            .unwrap_err()
            .contains("no answer for the question"));
        assert!(a(json!({"question_0": ["Apple", "Mango"]}))
            .unwrap_err()
            .contains("takes one answer"));
        assert!(a(json!({"question_0": "Apple", "nope": "x"}))
            .unwrap_err()
            .contains("names no question"));
    }

    #[test]
    fn several_questions_multi_select_booleans_and_numbers() {
        let e = read(&raw(json!({"mode": "form", "sessionId": "s1", "message": "Please answer the following questions.",
            "requestedSchema": {"type": "object", "required": ["n"], "properties": {
                "a": {"type": "array", "description": "Which toppings?", "items": {"anyOf": [
                    {"const": "ch", "title": "Cheese"}, {"const": "ol", "title": "Olives"}]}},
                "b": {"type": "boolean", "description": "Hot?"},
                "n": {"type": "integer", "title": "How many?"},
                "t": {"type": "string", "title": "Note"}}}}))).unwrap();
        let Kind::Form(fields) = &e.kind else {
            panic!()
        };
        let a = |v: Value| content(fields, v.as_object().unwrap());
        assert_eq!(
            a(json!({"Which toppings?": ["Cheese", "Olives"], "Hot?": "No", "How many?": "3"}))
                .unwrap(),
            *json!({"a": ["ch", "ol"], "b": false, "n": 3})
                .as_object()
                .unwrap()
        );
        assert!(
            a(json!({"Which toppings?": ["Ham"], "Hot?": "No", "How many?": "3"}))
                .unwrap_err()
                .contains("takes no free text")
        );
        assert!(
            a(json!({"Which toppings?": ["Cheese"], "Hot?": "Yes", "How many?": "three"}))
                .unwrap_err()
                .contains("not a number")
        );
        assert!(a(json!({"Which toppings?": ["Cheese"], "Hot?": "Yes"}))
            .unwrap_err()
            .contains("How many?"));
    }

    #[test]
    fn a_url_elicitation_is_a_link_to_open_and_odd_ones_are_not_announced() {
        let e = read(&raw(
            json!({"mode": "url", "sessionId": "s1", "elicitationId": "e1",
            "url": "https://example.com/auth", "message": "Sign in to the MCP server"}),
        ))
        .unwrap();
        let (tool, message, input) = shown(&e);
        assert_eq!(tool, LINK);
        assert!(message.contains("https://example.com/auth"), "{message}");
        assert_eq!(input["url"], "https://example.com/auth");
        assert!(read(&raw(json!({"mode": "form", "message": "x"}))).is_err());
        let many: Map<String, Value> = (0..=MAX_FIELDS)
            .map(|i| (format!("f{i}"), json!({"type": "string"})))
            .collect();
        let e = read(&raw(
            json!({"mode": "form", "sessionId": "s1", "message": "x",
            "requestedSchema": {"type": "object", "properties": many}}),
        ));
        assert!(e.unwrap_err().contains("fields, over"));
    }
}
