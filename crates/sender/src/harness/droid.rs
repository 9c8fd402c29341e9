//! Factory Droid: Claude-shaped hooks (docs/harness-contracts.md#droid). Droid documents no
//! PermissionRequest; its permission path is PreToolUse `permissionDecision`, which "bypasses
//! the permission system". Factory's reference shows camelCase fields (`sessionId`,
//! `hookEventName`); the real 0.225.2 sends snake_case (`session_id`, `hook_event_name`,
//! `tool_name`, `tool_input`); both are read. Its PreToolUse carries no `tool_use_id`, so a
//! prompt's id is minted from the tool and its input. Run for real in tests/real_agents.rs.
use super::{
    describe_tool, minted_attention_id, named_attention_id, payload, session_ref, Harness,
    HookInput, Text, PASCAL_LIFECYCLE,
};
use crate::wire::control::Decision;
use serde_json::{json, Value};

/// Tools Droid runs without asking in every autonomy level: a PreToolUse for them is only a
/// sign of life, never a prompt to hold for a remote answer.
const READ_ONLY: &[&str] = &["Read", "LS", "Grep", "Glob", "TodoWrite"];

/// The fields of a Droid hook payload we read, in both spellings it has used: the real
/// 0.225.2's snake_case first, then Factory's documented camelCase.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Payload {
    hook_event_name: Text,
    #[serde(rename = "hookEventName")]
    hook_event_name_camel: Text,
    session_id: Text,
    #[serde(rename = "sessionId")]
    session_id_camel: Text,
    cwd: Text,
    tool_name: Text,
    #[serde(rename = "toolName")]
    tool_name_camel: Text,
    tool_input: Option<Value>,
    #[serde(rename = "toolInput")]
    tool_input_camel: Option<Value>,
    tool_use_id: Text,
    #[serde(rename = "toolUseId")]
    tool_use_id_camel: Text,
    tool_call_id: Text,
    message_id: Text,
    #[serde(rename = "messageId")]
    message_id_camel: Text,
    /// Present on a subagent's events.
    agent_id: Option<Value>,
    #[serde(rename = "agentId")]
    agent_id_camel: Option<Value>,
    source: Text,
}

pub fn parse(stdin: &[u8]) -> HookInput {
    let p: Payload = match payload(stdin, "Droid") {
        Ok(p) => p,
        Err(e) => return HookInput::Skip(e),
    };
    let Some(event) = p.hook_event_name.get().or(p.hook_event_name_camel.get()) else {
        return HookInput::Skip("Droid payload has no hook_event_name".into());
    };
    let session = match session_ref(
        Harness::Droid,
        p.session_id.get().or(p.session_id_camel.get()),
        p.cwd.get(),
        event,
    ) {
        Ok(s) => s,
        Err(e) => return HookInput::Skip(e),
    };
    let tool = p.tool_name.get().or(p.tool_name_camel.get());
    let input = p
        .tool_input
        .as_ref()
        .or(p.tool_input_camel.as_ref())
        .cloned()
        .unwrap_or(Value::Null);
    // A call id bound to the input when Droid sends one (DECISIONS 32); else minted.
    let named = p
        .tool_use_id
        .get()
        .or(p.tool_use_id_camel.get())
        .or(p.tool_call_id.get())
        .and_then(|id| named_attention_id(id, &input));
    let message_id = p.message_id.get().or(p.message_id_camel.get());
    let attention = |tool: &str| match named.clone() {
        Some(id) => id,
        None => minted_attention_id(message_id.unwrap_or(""), tool, &input),
    };
    let subagent = p.agent_id.is_some() || p.agent_id_camel.is_some();
    match event {
        "PreToolUse" => match tool {
            Some(t) if !READ_ONLY.contains(&t) => HookInput::Permission {
                attention_id: attention(t),
                message: Some(describe_tool(t, &input)),
                tool: Some(t.to_string()),
                session,
            },
            Some(_) => HookInput::Alive { session },
            None => HookInput::Skip("Droid PreToolUse without tool_name".into()),
        },
        "Stop" if !subagent => HookInput::Stop { session },
        "PostToolUse" => HookInput::TerminalAnswered {
            attention_id: tool.map(attention),
            session,
        },
        _ => PASCAL_LIFECYCLE.read(event, session, p.source.get()),
    }
}

pub fn render_permission(decision: Decision, message: &str) -> String {
    let out = match decision {
        Decision::Allow => json!({ "hookEventName": "PreToolUse", "permissionDecision": "allow" }),
        Decision::Deny => json!({
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": message,
        }),
    };
    json!({ "hookSpecificOutput": out }).to_string()
}

pub fn render_block(reason: &str) -> String {
    json!({ "decision": "block", "reason": reason }).to_string()
}

/// Stops Droid from any hook: 0.225.2 reads `continue:false` first at PreToolUse and
/// PostToolUse (it throws its HookStopError and the run ends, `stopReason` shown to the
/// person) and at Stop (no continuation). Before a tool the tool is denied as well, so it
/// cannot run even if a later Droid went on.
pub fn render_cancel(event: &str, reason: &str) -> (String, &'static str) {
    // Claude Code's shapes, which 0.225.2 reads the same way.
    super::claude_code::render_cancel(event, reason)
}

/// The stdout that hands `text` to the model at a tool boundary: 0.225.2 adds a PostToolUse
/// `hookSpecificOutput.additionalContext` as a system message only the model reads, and turns
/// a PreToolUse deny into the tool's error result carrying `permissionDecisionReason`.
pub fn render_seam_prompt(event: &str, text: &str) -> Option<(String, &'static str)> {
    // Claude Code's shapes; Droid's row registers only PostToolUse and PreToolUse as seams.
    super::claude_code::render_seam_prompt(event, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_casings() {
        let camel = br#"{"sessionId":"d1","transcriptPath":"/t","cwd":"/w","permissionMode":"auto-low","hookEventName":"PreToolUse","tool_name":"Execute","tool_input":{"command":"git push"}}"#;
        let HookInput::Permission {
            attention_id,
            message,
            session,
            ..
        } = parse(camel)
        else {
            panic!()
        };
        assert_eq!(session.key(), "droid:d1");
        assert_eq!(message.as_deref(), Some("Execute git push"));
        assert_eq!(
            attention_id,
            minted_attention_id("", "Execute", &json!({"command":"git push"}))
        );
        let snake = br#"{"session_id":"d1","hook_event_name":"Stop","stop_hook_active":false}"#;
        assert!(matches!(parse(snake), HookInput::Stop { .. }));
        let read = br#"{"session_id":"d1","hook_event_name":"PreToolUse","tool_name":"Read","tool_input":{"file_path":"/a"}}"#;
        assert!(matches!(parse(read), HookInput::Alive { .. }));
        let with_id = br#"{"session_id":"d1","hook_event_name":"PreToolUse","tool_name":"Edit","tool_input":{},"tool_use_id":"toolu_1"}"#;
        assert!(
            matches!(parse(with_id), HookInput::Permission { attention_id, .. } if attention_id.starts_with("toolu_1-"))
        );
    }

    #[test]
    fn shapes() {
        assert_eq!(
            render_seam_prompt("PostToolUse", "go").unwrap().0,
            r#"{"hookSpecificOutput":{"hookEventName":"PostToolUse","additionalContext":"go"}}"#
        );
        assert_eq!(
            render_seam_prompt("PreToolUse", "no").unwrap().0,
            render_permission(Decision::Deny, "no")
        );
        assert_eq!(render_seam_prompt("Stop", "x"), None);
        assert_eq!(
            render_cancel("Stop", "bye").0,
            r#"{"continue":false,"stopReason":"bye"}"#
        );
        let (pre, _) = render_cancel("PreToolUse", "bye");
        let v: Value = serde_json::from_str(&pre).unwrap();
        assert_eq!(v["continue"], false);
        assert_eq!(v["hookSpecificOutput"]["permissionDecision"], "deny");
    }
}
