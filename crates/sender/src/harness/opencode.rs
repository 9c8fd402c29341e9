//! OpenCode (1.18): no shell hooks. Our plugin (`hooks/opencode/sessionpipe.js`) runs
//! `sp-event --harness opencode` with one JSON object per bus event it forwards:
//!
//! ```json
//! {"hook_event_name":"permission.asked","session_id":"ses_…","cwd":"/project",
//!  "server_url":"http://127.0.0.1:4096/","properties":{…the event's own properties…}}
//! ```
//!
//! Every event also says where the session's server is, and whether the session is idle, so
//! sp-sync can deliver prompts, cancels and permission replies through OpenCode's server API
//! (src/sync/api.rs). Nothing is ever printed: the plugin ignores our stdout.
use super::{payload, session_ref, ApiReport, Call, Harness, HookInput, Obj, Text};
use serde_json::Value;

/// What our plugin sends with each bus event.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Payload {
    hook_event_name: Text,
    /// The bus event's own name, where the plugin passed it through.
    #[serde(rename = "type")]
    kind: Text,
    session_id: Text,
    cwd: Text,
    directory: Text,
    server_url: Text,
    seq: Option<Value>,
    properties: Obj<Props>,
}

impl Payload {
    fn event(&self) -> Option<&str> {
        self.hook_event_name.get().or(self.kind.get())
    }
}

/// The bus event's properties we read.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Props {
    #[serde(rename = "sessionID")]
    session_id: Text,
    info: Obj<Info>,
    status: Obj<Status>,
    /// permission.asked: the request's id.
    id: Text,
    #[serde(rename = "requestID")]
    request_id: Text,
    #[serde(rename = "permissionID")]
    permission_id: Text,
    permission: Text,
    #[serde(rename = "type")]
    kind: Text,
    patterns: Option<Value>,
    title: Text,
}

/// `session.created`'s and `session.updated`'s session.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Info {
    id: Text,
}

/// `session.status`'s status.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Status {
    #[serde(rename = "type")]
    kind: Text,
}

pub fn parse(stdin: &[u8]) -> HookInput {
    let p: Payload = match payload(stdin, "OpenCode plugin") {
        Ok(p) => p,
        Err(e) => return HookInput::Skip(e),
    };
    let Some(event) = p.event() else {
        return HookInput::Skip("OpenCode plugin payload has no hook_event_name".into());
    };
    let props = &p.properties.0;
    let id = p
        .session_id
        .get()
        .or(props.session_id.get())
        .or(props.info.0.id.get());
    let cwd = p.cwd.get().or(p.directory.get());
    let session = match session_ref(Harness::OpenCode, id, cwd, event) {
        Ok(s) => s,
        Err(e) => return HookInput::Skip(e),
    };
    let mut report = ApiReport {
        base_url: p
            .server_url
            .get()
            .map(|u| u.trim_end_matches('/').to_string()),
        directory: cwd.map(str::to_string),
        idle: None,
        seq: p.seq.as_ref().and_then(Value::as_i64).filter(|n| *n > 0),
    };
    let then = match event {
        "session.created" => {
            report.idle = Some(true);
            HookInput::SessionStart {
                source: "startup".into(),
                session,
            }
        }
        "session.status" => {
            report.idle = props.status.0.kind.get().map(|t| t == "idle");
            HookInput::Alive { session }
        }
        "session.idle" => {
            report.idle = Some(true);
            HookInput::TurnOver { session }
        }
        "permission.asked" => {
            let Some(request) = props.id.get().filter(|r| crate::wire::is_session_id(r)) else {
                return HookInput::Skip(
                    "OpenCode permission.asked without a usable request id".into(),
                );
            };
            let (permission, message) = asked(props);
            HookInput::Permission {
                attention_id: request.to_string(),
                tool: Some(permission.to_string()),
                message: Some(message),
                session,
            }
        }
        // Answered, by us through the API or by the person in the TUI.
        "permission.replied" => HookInput::TerminalAnswered {
            attention_id: props
                .request_id
                .get()
                .or(props.permission_id.get())
                .map(str::to_string),
            session,
        },
        "session.deleted" => HookInput::SessionEnd { session },
        _ => HookInput::Alive { session },
    };
    HookInput::Api {
        report,
        then: Box::new(then),
    }
}

/// A `permission.asked`'s permission and what the person is shown of it (its patterns, else
/// its title).
fn asked(props: &Props) -> (&str, String) {
    let permission = props
        .permission
        .get()
        .or(props.kind.get())
        .unwrap_or("permission");
    let patterns: Vec<&str> = props
        .patterns
        .as_ref()
        .and_then(Value::as_array)
        .map(|p| p.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let message = if patterns.is_empty() {
        props
            .title
            .get()
            .map(|t| format!("{permission} {t}"))
            .unwrap_or_else(|| permission.to_string())
    } else {
        format!("{permission} {}", patterns.join(" "))
    };
    (permission, message)
}

/// A permission prompt's call as a grant for the session matches it (DECISIONS 30): the
/// permission and exactly what the person was shown of it ([`grant_call`]).
pub fn call(stdin: &[u8]) -> Option<Call> {
    let p: Payload = payload(stdin, "OpenCode plugin").ok()?;
    if p.event()? != "permission.asked" {
        return None;
    }
    let (permission, message) = asked(&p.properties.0);
    Some(grant_call(permission, &message))
}

/// The call a grant keeps for a prompt of `tool` shown as `message` (the attention's).
pub fn grant_call(tool: &str, message: &str) -> Call {
    Call {
        tool: tool.to_string(),
        input: serde_json::json!({ "shown": message }),
        suggestions: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(i: HookInput) -> (ApiReport, HookInput) {
        match i {
            HookInput::Api { report, then } => (report, *then),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn events() {
        let (r, then) = api(parse(
            br#"{"hook_event_name":"permission.asked","session_id":"ses_1","cwd":"/p","server_url":"http://127.0.0.1:4096/","properties":{"id":"per_1","sessionID":"ses_1","permission":"bash","patterns":["rm -rf build"],"metadata":{},"always":["rm *"]}}"#,
        ));
        assert_eq!(r.base_url.as_deref(), Some("http://127.0.0.1:4096"));
        assert_eq!(r.directory.as_deref(), Some("/p"));
        let HookInput::Permission {
            attention_id,
            tool,
            message,
            session,
        } = then
        else {
            panic!()
        };
        assert_eq!(
            (attention_id.as_str(), tool.as_deref()),
            ("per_1", Some("bash"))
        );
        assert_eq!(message.as_deref(), Some("bash rm -rf build"));
        assert_eq!(session.key(), "opencode:ses_1");
        let (r, then) = api(parse(
            br#"{"hook_event_name":"session.status","server_url":"http://127.0.0.1:4096","properties":{"sessionID":"ses_1","status":{"type":"busy"}}}"#,
        ));
        assert_eq!(r.idle, Some(false));
        assert!(matches!(then, HookInput::Alive { .. }));
        let (r, then) = api(parse(
            br#"{"hook_event_name":"session.idle","properties":{"sessionID":"ses_1"}}"#,
        ));
        assert_eq!(r.idle, Some(true));
        assert!(matches!(then, HookInput::TurnOver { .. }));
        let (_, then) = api(parse(
            br#"{"hook_event_name":"session.created","properties":{"info":{"id":"ses_2","directory":"/p"}}}"#,
        ));
        assert!(
            matches!(then, HookInput::SessionStart { session, .. } if session.session_id == "ses_2")
        );
        let (_, then) = api(parse(
            br#"{"hook_event_name":"permission.replied","properties":{"sessionID":"ses_1","requestID":"per_1","reply":"once"}}"#,
        ));
        assert!(
            matches!(then, HookInput::TerminalAnswered { attention_id: Some(a), .. } if a == "per_1")
        );
        assert!(matches!(
            parse(br#"{"hook_event_name":"session.idle"}"#),
            HookInput::Skip(_)
        ));
        assert!(matches!(
            parse(br#"{"hook_event_name":"permission.asked","session_id":"s","properties":{"id":"a b"}}"#),
            HookInput::Skip(_)
        ));
    }
}
