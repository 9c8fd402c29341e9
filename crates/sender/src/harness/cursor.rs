//! Cursor (hooks.json v1): hook stdin per docs/harness-contracts.md#cursor. The session is the
//! `conversation_id`. Permission prompts come as `beforeShellExecution` and
//! `beforeMCPExecution`, answered `{"permission":"allow"|"deny"|"ask"}`; the turn end is
//! `stop`, answered `{"followup_message":…}`, which Cursor submits as the next user message.
//!
//! Not run here: Cursor's CLI (`cursor-agent`) comes only from cursor.com's own installer,
//! which this machine cannot reach (it reaches npm, crates.io, PyPI and Debian only; the npm
//! package named `cursor-agent` is an unrelated project). What this adapter reads and writes
//! is from Cursor's documentation (docs/harness-contracts.md#cursor).
use super::{
    describe_tool, field, minted_attention_id, named_attention_id, object, session_ref, text,
    tool_args, Harness, HookInput, Lifecycle,
};
use crate::wire::control::Decision;
use serde_json::{json, Value};

/// (tool, input) a before/after execution event is about: the shell command, or the MCP call.
fn call(v: &Value, event: &str) -> Option<(String, Value)> {
    if event.ends_with("ShellExecution") {
        let command = text(v, &["command"])?;
        return Some(("Shell".into(), json!({ "command": command })));
    }
    let tool = text(v, &["tool_name"])?;
    let input = field(v, &["tool_input"])
        .map(tool_args)
        .unwrap_or(Value::Null);
    Some((tool.to_string(), input))
}

const LIFECYCLE: Lifecycle = Lifecycle {
    start: "sessionStart",
    end: "sessionEnd",
    prompt: "beforeSubmitPrompt",
    default_source: "startup",
};

pub fn parse(stdin: &[u8]) -> HookInput {
    let v = match object(stdin, "Cursor") {
        Ok(v) => v,
        Err(e) => return HookInput::Skip(e),
    };
    let Some(event) = text(&v, &["hook_event_name"]) else {
        return HookInput::Skip("Cursor payload has no hook_event_name".into());
    };
    let cwd = text(&v, &["cwd"]).or_else(|| {
        field(&v, &["workspace_roots"])
            .and_then(|r| r.as_array())
            .and_then(|r| r.first())
            .and_then(|r| r.as_str())
    });
    let session = match session_ref(
        Harness::Cursor,
        text(&v, &["conversation_id", "session_id"]),
        cwd,
        event,
    ) {
        Ok(s) => s,
        Err(e) => return HookInput::Skip(e),
    };
    // A tool-use id bound to the input when Cursor sends one (DECISIONS 32); otherwise minted
    // from the generation and the call, so the same prompt always gets the same id (DECISIONS 9).
    let attention = |tool: &str, input: &Value| match text(&v, &["tool_use_id"])
        .and_then(|id| named_attention_id(id, input))
    {
        Some(id) => id,
        None => minted_attention_id(text(&v, &["generation_id"]).unwrap_or(""), tool, input),
    };
    match event {
        "beforeShellExecution" | "beforeMCPExecution" => {
            let Some((tool, input)) = call(&v, event) else {
                return HookInput::Skip(format!(
                    "Cursor {event} without the command or tool it is about"
                ));
            };
            HookInput::Permission {
                attention_id: attention(&tool, &input),
                message: Some(describe_tool(&tool, &input)),
                tool: Some(tool),
                session,
            }
        }
        "afterShellExecution" | "afterMCPExecution" => HookInput::TerminalAnswered {
            attention_id: call(&v, event).map(|(t, i)| attention(&t, &i)),
            session,
        },
        // Only a turn that completed takes a follow-up: after the person stopped it
        // (`aborted`) or it failed (`error`), a queued prompt waits for the next turn end.
        "stop" => match text(&v, &["status"]) {
            None | Some("completed") => HookInput::Stop { session },
            Some(_) => HookInput::Alive { session },
        },
        _ => LIFECYCLE.read(event, session, text(&v, &["source"])),
    }
}

pub fn render_permission(decision: Decision, message: &str) -> String {
    match decision {
        Decision::Allow => json!({ "permission": "allow" }).to_string(),
        Decision::Deny => {
            json!({ "permission": "deny", "user_message": message, "agent_message": message })
                .to_string()
        }
    }
}

/// No remote answer came: Cursor's own approval prompt decides.
#[cfg(test)]
pub fn render_ask() -> String {
    json!({ "permission": "ask" }).to_string()
}

pub fn render_block(reason: &str) -> String {
    json!({ "followup_message": reason }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        assert_eq!(render_ask(), r#"{"permission":"ask"}"#);
        assert_eq!(render_block("go on"), r#"{"followup_message":"go on"}"#);
    }

    #[test]
    fn events() {
        let shell = br#"{"hook_event_name":"beforeShellExecution","conversation_id":"c1","generation_id":"g1","command":"npm test","cwd":"/w","workspace_roots":["/w"]}"#;
        let HookInput::Permission {
            attention_id,
            tool,
            message,
            session,
        } = parse(shell)
        else {
            panic!()
        };
        assert_eq!(
            attention_id,
            minted_attention_id("g1", "Shell", &json!({"command":"npm test"}))
        );
        assert_eq!(
            (tool.as_deref(), message.as_deref()),
            (Some("Shell"), Some("Shell npm test"))
        );
        assert_eq!(session.key(), "cursor:c1");
        let after = br#"{"hook_event_name":"afterShellExecution","conversation_id":"c1","generation_id":"g1","command":"npm test","output":"ok"}"#;
        assert!(
            matches!(parse(after), HookInput::TerminalAnswered { attention_id: Some(a), .. } if a == attention_id)
        );
        let mcp = br#"{"hook_event_name":"beforeMCPExecution","conversation_id":"c1","generation_id":"g1","tool_name":"query","tool_input":"{\"sql\":\"select 1\"}"}"#;
        let HookInput::Permission { attention_id, .. } = parse(mcp) else {
            panic!()
        };
        assert_eq!(
            attention_id,
            minted_attention_id("g1", "query", &json!({"sql":"select 1"}))
        );
        assert!(matches!(
            parse(br#"{"hook_event_name":"stop","conversation_id":"c1","status":"completed","loop_count":0}"#),
            HookInput::Stop { .. }
        ));
        assert!(matches!(
            parse(br#"{"hook_event_name":"stop","conversation_id":"c1","status":"aborted"}"#),
            HookInput::Alive { .. }
        ));
        assert!(matches!(
            parse(br#"{"hook_event_name":"stop"}"#),
            HookInput::Skip(_)
        ));
        assert!(matches!(
            parse(br#"{"hook_event_name":"beforeShellExecution","conversation_id":"c1"}"#),
            HookInput::Skip(_)
        ));
    }
}
