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
    describe_tool, minted_attention_id, named_attention_id, payload, session_ref, tool_args,
    Harness, HookInput, Lifecycle, Text,
};
use crate::wire::control::Decision;
use serde_json::{json, Value};

/// The fields of a Cursor hook payload we read (hooks.json v1, snake_case).
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Payload {
    hook_event_name: Text,
    conversation_id: Text,
    session_id: Text,
    cwd: Text,
    workspace_roots: Option<Value>,
    generation_id: Text,
    tool_use_id: Text,
    /// beforeShellExecution / afterShellExecution.
    command: Text,
    /// beforeMCPExecution / afterMCPExecution.
    tool_name: Text,
    tool_input: Option<Value>,
    /// stop: `completed`, `aborted` or `error`.
    status: Text,
    source: Text,
}

/// (tool, input) a before/after execution event is about: the shell command, or the MCP call.
fn call(p: &Payload, event: &str) -> Option<(String, Value)> {
    if event.ends_with("ShellExecution") {
        let command = p.command.get()?;
        return Some(("Shell".into(), json!({ "command": command })));
    }
    let tool = p.tool_name.get()?;
    let input = p.tool_input.as_ref().map_or(Value::Null, tool_args);
    Some((tool.to_string(), input))
}

const LIFECYCLE: Lifecycle = Lifecycle {
    start: "sessionStart",
    end: "sessionEnd",
    prompt: "beforeSubmitPrompt",
    default_source: "startup",
};

pub fn parse(stdin: &[u8]) -> HookInput {
    let p: Payload = match payload(stdin, "Cursor") {
        Ok(p) => p,
        Err(e) => return HookInput::Skip(e),
    };
    let Some(event) = p.hook_event_name.get() else {
        return HookInput::Skip("Cursor payload has no hook_event_name".into());
    };
    let cwd = p.cwd.get().or_else(|| {
        p.workspace_roots
            .as_ref()
            .and_then(|r| r.as_array())
            .and_then(|r| r.first())
            .and_then(|r| r.as_str())
    });
    let session = match session_ref(
        Harness::Cursor,
        p.conversation_id.get().or(p.session_id.get()),
        cwd,
        event,
    ) {
        Ok(s) => s,
        Err(e) => return HookInput::Skip(e),
    };
    // A tool-use id bound to the input when Cursor sends one (DECISIONS 32); otherwise minted
    // from the generation and the call, so the same prompt always gets the same id (DECISIONS 9).
    let attention = |tool: &str, input: &Value| match p
        .tool_use_id
        .get()
        .and_then(|id| named_attention_id(id, input))
    {
        Some(id) => id,
        None => minted_attention_id(p.generation_id.get().unwrap_or(""), tool, input),
    };
    match event {
        "beforeShellExecution" | "beforeMCPExecution" => {
            let Some((tool, input)) = call(&p, event) else {
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
            attention_id: call(&p, event).map(|(t, i)| attention(&t, &i)),
            session,
        },
        // Only a turn that completed takes a follow-up: after the person stopped it
        // (`aborted`) or it failed (`error`), a queued prompt waits for the next turn end.
        "stop" => match p.status.get() {
            None | Some("completed") => HookInput::Stop { session },
            Some(_) => HookInput::Alive { session },
        },
        _ => LIFECYCLE.read(event, session, p.source.get()),
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
