//! Claude Code (2.1.x): hook stdin per harness-contracts §1, answers in its exact shapes.
use super::{describe_tool, minted_attention_id, HookInput, PASCAL_LIFECYCLE};
use crate::store::SessionRef;
use crate::wire::control::Decision;
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Deserialize)]
struct Input {
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    hook_event_name: Option<String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    prompt_id: Option<String>,
    #[serde(default)]
    tool_name: Option<String>,
    #[serde(default)]
    tool_input: Option<Value>,
    #[serde(default)]
    source: Option<String>,
    /// Present on subagent events: their Stop is a SubagentStop and their ids differ.
    #[serde(default)]
    agent_id: Option<String>,
}

pub fn parse(stdin: &[u8]) -> HookInput {
    let input: Input = match serde_json::from_slice(stdin) {
        Ok(i) => i,
        Err(e) => return HookInput::Skip(format!("stdin is not a Claude Code hook payload: {e}")),
    };
    let Some(session_id) = input.session_id.filter(|s| crate::wire::is_session_id(s)) else {
        return HookInput::Skip("payload has no valid session_id".into());
    };
    let Some(event) = input.hook_event_name else {
        return HookInput::Skip("payload has no hook_event_name".into());
    };
    let session = SessionRef {
        harness: "claude-code".into(),
        session_id,
        cwd: input.cwd,
        event: event.clone(),
    };
    // The attention id of the prompt this tool call would have raised, if computable.
    let attention = || match (&input.prompt_id, &input.tool_name, &input.tool_input) {
        (Some(p), Some(t), Some(i)) => Some(minted_attention_id(p, t, i)),
        _ => None,
    };
    match event.as_str() {
        "PermissionRequest" => {
            let (Some(tool), Some(tool_input)) = (&input.tool_name, &input.tool_input) else {
                return HookInput::Skip("PermissionRequest without tool_name/tool_input".into());
            };
            HookInput::Permission {
                attention_id: minted_attention_id(
                    input.prompt_id.as_deref().unwrap_or(""),
                    tool,
                    tool_input,
                ),
                message: Some(describe_tool(tool, tool_input)),
                tool: Some(tool.clone()),
                session,
            }
        }
        "Stop" if input.agent_id.is_none() => HookInput::Stop { session },
        "PostToolUse" | "PostToolUseFailure" => HookInput::TerminalAnswered {
            attention_id: attention(),
            session,
        },
        _ => PASCAL_LIFECYCLE.read(&event, session, input.source.as_deref()),
    }
}

pub fn render_permission(decision: Decision, message: &str) -> String {
    let decision = match decision {
        Decision::Allow => json!({ "behavior": "allow" }),
        Decision::Deny => json!({ "behavior": "deny", "message": message }),
    };
    json!({ "hookSpecificOutput": { "hookEventName": "PermissionRequest", "decision": decision } })
        .to_string()
}

pub fn render_block(reason: &str) -> String {
    json!({ "decision": "block", "reason": reason }).to_string()
}

/// Stops Claude from any hook: `continue:false`; `stopReason` is shown to the person only.
/// Before a tool, 2.1.332 still runs that tool after `continue:false` (seen with the real
/// CLI), so there the tool is denied as well.
pub fn render_cancel(event: &str, reason: &str) -> (String, &'static str) {
    if event == "PreToolUse" {
        return (
            json!({ "continue": false, "stopReason": reason,
                "hookSpecificOutput": { "hookEventName": "PreToolUse",
                    "permissionDecision": "deny", "permissionDecisionReason": reason } })
            .to_string(),
            "continue:false, tool denied",
        );
    }
    (
        json!({ "continue": false, "stopReason": reason }).to_string(),
        "continue:false",
    )
}

/// A PermissionRequest denied because the person stopped the session: `interrupt` stops
/// Claude after the denial, so it is not left at the dialog.
pub fn render_cancel_permission(message: &str) -> String {
    json!({ "hookSpecificOutput": { "hookEventName": "PermissionRequest",
        "decision": { "behavior": "deny", "message": message, "interrupt": true } } })
    .to_string()
}

/// The stdout that hands `text` to the model at this tool boundary, and what the ack says.
pub fn render_seam_prompt(event: &str, text: &str) -> Option<(String, &'static str)> {
    match event {
        "PostToolUse" | "PostToolUseFailure" => Some((
            json!({ "hookSpecificOutput": { "hookEventName": event, "additionalContext": text } })
                .to_string(),
            "additionalContext",
        )),
        "PreToolUse" => Some((
            json!({ "hookSpecificOutput": { "hookEventName": "PreToolUse",
                "permissionDecision": "deny", "permissionDecisionReason": text } })
            .to_string(),
            "deny",
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn shapes() {
        assert_eq!(
            render_block("x\"y"),
            r#"{"decision":"block","reason":"x\"y"}"#
        );
    }

    #[test]
    fn parses_events() {
        assert!(matches!(parse(b""), HookInput::Skip(_)));
        assert!(matches!(parse(b"[1]"), HookInput::Skip(_)));
        let HookInput::TerminalAnswered { attention_id: Some(a), .. } = parse(
            br#"{"session_id":"s1","hook_event_name":"PostToolUse","prompt_id":"5e6e20e7-82a4-4865-8967-b2c9adae76c4","tool_name":"Bash","tool_input":{"command":"echo hi > out.txt","description":"Write text to a file"},"tool_response":{}}"#,
        ) else {
            panic!()
        };
        assert_eq!(a, "perm-17af3749ab63d37e");
    }
}
