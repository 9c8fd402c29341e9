//! GitHub Copilot CLI (1.0.x): hook stdin per docs/harness-contracts.md#copilot-cli and `github/docs`
//! `cli-hooks-reference.md`. Registered under the camelCase names, whose payloads are
//! camelCase and carry no event name; the event is then told by the fields each documented
//! payload has. PascalCase registrations (snake_case fields with `hook_event_name`) parse too.
//! Answers are flat: `{"behavior":…}` for permissionRequest, `{"decision":"block",…}` for
//! agentStop. Copilot has no stop loop guard, so a block happens only with a queued message.
//! Recorded on 1.0.102 (tests/real_agents.rs runs it offline): permissionRequest carries
//! `hookName`, `toolName` and an object `toolInput`; agentStop carries `stop_hook_active`.
use super::{
    describe_tool, minted_attention_id, named_attention_id, payload, session_ref, tool_args,
    Harness, HookInput, Lifecycle, Text,
};
use crate::wire::control::Decision;
use serde_json::{json, Value};

/// The fields of a Copilot CLI hook payload we read: camelCase (its own registrations) and
/// snake_case (PascalCase registrations). Fields read only for being there (a non-null value)
/// tell an unnamed payload's event.
#[derive(serde::Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Payload {
    #[serde(rename = "hook_event_name")]
    hook_event_name: Text,
    #[serde(rename = "hookEventName")]
    hook_event_name_camel: Text,
    hook_name: Text,
    session_id: Text,
    #[serde(rename = "session_id")]
    session_id_snake: Text,
    cwd: Text,
    tool_name: Option<Value>,
    #[serde(rename = "tool_name")]
    tool_name_snake: Option<Value>,
    tool_args: Option<Value>,
    #[serde(rename = "tool_input")]
    tool_input_snake: Option<Value>,
    tool_input: Option<Value>,
    tool_call_id: Text,
    #[serde(rename = "tool_call_id")]
    tool_call_id_snake: Text,
    tool_use_id: Text,
    #[serde(rename = "tool_use_id")]
    tool_use_id_snake: Text,
    timestamp: Option<Value>,
    source: Option<Value>,
    // Only their presence is read.
    agent_name: Option<Value>,
    #[serde(rename = "agent_name")]
    agent_name_snake: Option<Value>,
    #[serde(rename = "notification_type")]
    notification_type: Option<Value>,
    error_context: Option<Value>,
    trigger: Option<Value>,
    tool_result: Option<Value>,
    #[serde(rename = "tool_result")]
    tool_result_snake: Option<Value>,
    error: Option<Value>,
    permission_suggestions: Option<Value>,
    stop_reason: Option<Value>,
    #[serde(rename = "stop_reason")]
    stop_reason_snake: Option<Value>,
    prompt: Option<Value>,
    reason: Option<Value>,
}

/// The first of `values` that is a string.
fn first_str<'a>(values: &[&'a Option<Value>]) -> Option<&'a str> {
    values
        .iter()
        .find_map(|v| v.as_ref().and_then(Value::as_str))
}

/// The event a payload belongs to: its own name when it has one, else by its fields.
fn event_of(p: &Payload) -> &'static str {
    let name = p
        .hook_event_name
        .get()
        .or(p.hook_event_name_camel.get())
        .or(p.hook_name.get());
    if let Some(name) = name {
        return match name {
            "permissionRequest" | "PermissionRequest" => "permissionRequest",
            "preToolUse" | "PreToolUse" => "preToolUse",
            "agentStop" | "Stop" => "agentStop",
            "sessionStart" | "SessionStart" => "sessionStart",
            "sessionEnd" | "SessionEnd" => "sessionEnd",
            "userPromptSubmitted" | "UserPromptSubmit" => "userPromptSubmitted",
            "postToolUse" | "PostToolUse" => "postToolUse",
            "postToolUseFailure" | "PostToolUseFailure" => "postToolUseFailure",
            _ => "other",
        };
    }
    let has = |fields: &[&Option<Value>]| fields.iter().any(|f| f.is_some());
    if has(&[
        &p.agent_name,
        &p.agent_name_snake,
        &p.notification_type,
        &p.error_context,
        &p.trigger,
    ]) {
        "other"
    } else if has(&[&p.tool_name, &p.tool_name_snake]) {
        if has(&[&p.tool_result, &p.tool_result_snake]) {
            "postToolUse"
        } else if has(&[&p.error]) {
            "postToolUseFailure"
        } else if has(&[&p.permission_suggestions, &p.tool_input]) || !has(&[&p.tool_args]) {
            // 1.0.102's permissionRequest names itself (`hookName`) and carries `toolInput`
            // and `permissionSuggestions`; its preToolUse carries `toolArgs` and no name.
            "permissionRequest"
        } else {
            "preToolUse"
        }
    } else if has(&[&p.stop_reason, &p.stop_reason_snake]) {
        "agentStop"
    } else if has(&[&p.source]) {
        "sessionStart"
    } else if has(&[&p.prompt]) {
        "userPromptSubmitted"
    } else if has(&[&p.reason]) {
        "sessionEnd"
    } else {
        "other"
    }
}

const LIFECYCLE: Lifecycle = Lifecycle {
    start: "sessionStart",
    end: "sessionEnd",
    prompt: "userPromptSubmitted",
    default_source: "unknown",
};

pub fn parse(stdin: &[u8]) -> HookInput {
    let p: Payload = match payload(stdin, "Copilot CLI") {
        Ok(p) => p,
        Err(e) => return HookInput::Skip(e),
    };
    let event = event_of(&p);
    let session = match session_ref(
        Harness::CopilotCli,
        p.session_id.get().or(p.session_id_snake.get()),
        p.cwd.get(),
        event,
    ) {
        Ok(s) => s,
        Err(e) => return HookInput::Skip(e),
    };
    let tool = first_str(&[&p.tool_name, &p.tool_name_snake]);
    let args = [&p.tool_args, &p.tool_input_snake, &p.tool_input]
        .into_iter()
        .find_map(Option::as_ref)
        .map_or(Value::Null, tool_args);
    let call_id = p
        .tool_call_id
        .get()
        .or(p.tool_call_id_snake.get())
        .or(p.tool_use_id.get())
        .or(p.tool_use_id_snake.get());
    match event {
        "permissionRequest" => {
            let Some(tool) = tool else {
                return HookInput::Skip("Copilot permissionRequest without toolName".into());
            };
            // Its tool-call id bound to the input when sent (DECISIONS 32); else minted with
            // the request's timestamp, which is unique per request (Copilot has no turn id to
            // scope the hash with).
            let attention_id = match call_id.and_then(|id| named_attention_id(id, &args)) {
                Some(id) => id,
                None => {
                    let at = p
                        .timestamp
                        .as_ref()
                        .map(|t| t.to_string())
                        .unwrap_or_default();
                    minted_attention_id(&at, tool, &args)
                }
            };
            HookInput::Permission {
                attention_id,
                message: Some(describe_tool(tool, &args)),
                tool: Some(tool.to_string()),
                session,
            }
        }
        // A tool boundary only: its permission is asked at permissionRequest.
        "preToolUse" => HookInput::Alive { session },
        "agentStop" => HookInput::Stop { session },
        // Copilot prompts only after the hook returned, so nothing of ours is open unless the
        // call id names it.
        "postToolUse" | "postToolUseFailure" => match call_id {
            Some(id) => HookInput::TerminalAnswered {
                attention_id: named_attention_id(id, &args),
                session,
            },
            None => HookInput::Alive { session },
        },
        _ => LIFECYCLE.read(event, session, first_str(&[&p.source])),
    }
}

pub fn render_permission(decision: Decision, message: &str) -> String {
    match decision {
        Decision::Allow => json!({ "behavior": "allow" }).to_string(),
        Decision::Deny => json!({ "behavior": "deny", "message": message }).to_string(),
    }
}

pub fn render_block(reason: &str) -> String {
    json!({ "decision": "block", "reason": reason }).to_string()
}

/// The stdout that hands `text` to the model at a tool boundary. Seen with the real 1.0.102:
/// postToolUse `additionalContext` is appended to the tool's result ("Additional guidance from
/// postToolUse hooks"); a preToolUse deny makes the result "Denied by preToolUse hook: <reason>"
/// and the turn goes on. postToolUseFailure takes `additionalContext` as well (its SDK types).
pub fn render_seam_prompt(event: &str, text: &str) -> Option<(String, &'static str)> {
    match event {
        "postToolUse" | "postToolUseFailure" => Some((
            json!({ "additionalContext": text }).to_string(),
            "additionalContext",
        )),
        "preToolUse" => Some((
            json!({ "permissionDecision": "deny", "permissionDecisionReason": text }).to_string(),
            "deny",
        )),
        _ => None,
    }
}

/// How a stop reaches Copilot, where it can. 1.0.102 ends the run on a permissionRequest deny
/// with `interrupt:true` (no further tool, the model not asked again); it ignores
/// `continue:false` at preToolUse and postToolUse, and a preToolUse deny, even with
/// `interrupt`, lets the turn go on. At agentStop the turn is ending: no block ends it.
pub fn render_cancel(event: &str, reason: &str) -> Option<(String, &'static str)> {
    match event {
        "permissionRequest" => Some((render_cancel_permission(reason), "deny, interrupt")),
        "agentStop" => Some(("{}".to_string(), "no block: the turn ends")),
        _ => None,
    }
}

pub fn render_cancel_permission(message: &str) -> String {
    json!({ "behavior": "deny", "message": message, "interrupt": true }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camel_case_events_by_their_fields() {
        let perm = br#"{"hookName":"permissionRequest","sessionId":"s1","timestamp":1760000000000,"cwd":"/w","toolName":"bash","toolArgs":"{\"command\":\"rm -rf dist\",\"description\":\"Clean\"}"}"#;
        let HookInput::Permission {
            attention_id,
            tool,
            message,
            session,
        } = parse(perm)
        else {
            panic!()
        };
        assert_eq!(session.key(), "copilot-cli:s1");
        assert_eq!(tool.as_deref(), Some("bash"));
        assert_eq!(message.as_deref(), Some("bash rm -rf dist"));
        assert_eq!(
            attention_id,
            minted_attention_id(
                "1760000000000",
                "bash",
                &json!({"command":"rm -rf dist","description":"Clean"})
            )
        );
        let stop = br#"{"sessionId":"s1","timestamp":1,"cwd":"/w","transcriptPath":"/t","stopReason":"end_turn"}"#;
        assert!(matches!(parse(stop), HookInput::Stop { .. }));
        let sub = br#"{"sessionId":"s1","timestamp":1,"cwd":"/w","transcriptPath":"/t","agentName":"x","stopReason":"end_turn"}"#;
        assert!(matches!(parse(sub), HookInput::Alive { .. }));
        assert!(matches!(
            parse(br#"{"sessionId":"s1","timestamp":1,"cwd":"/w","source":"new"}"#),
            HookInput::SessionStart { .. }
        ));
        assert!(matches!(
            parse(br#"{"sessionId":"s1","timestamp":1,"cwd":"/w","reason":"user_exit"}"#),
            HookInput::SessionEnd { .. }
        ));
        assert!(matches!(
            parse(br#"{"sessionId":"s1","timestamp":1,"cwd":"/w","prompt":"hi"}"#),
            HookInput::TerminalAnswered {
                attention_id: None,
                ..
            }
        ));
        assert!(matches!(
            parse(br#"{"sessionId":"s1","timestamp":1,"cwd":"/w","toolName":"bash","toolArgs":{},"toolResult":{"resultType":"success"}}"#),
            HookInput::Alive { .. }
        ));
        let with_id = br#"{"hookName":"permissionRequest","sessionId":"s1","toolName":"bash","toolArgs":{},"toolCallId":"call_1"}"#;
        assert!(
            matches!(parse(with_id), HookInput::Permission { attention_id, .. } if attention_id.starts_with("call_1-"))
        );
        assert!(matches!(
            parse(br#"{"timestamp":1,"stopReason":"end_turn"}"#),
            HookInput::Skip(_)
        ));
    }

    /// As Copilot CLI 1.0.102 sent them in a real offline run (session id shortened).
    #[test]
    fn recorded_1_0_102_payloads() {
        let perm = br#"{"hookName":"permissionRequest","sessionId":"797a1dbf-1504","timestamp":1796326000414,"cwd":"/w","toolName":"bash","toolInput":{"command":"echo hi > /w/marker.txt"},"permissionSuggestions":[]}"#;
        let HookInput::Permission { message, tool, .. } = parse(perm) else {
            panic!()
        };
        assert_eq!(tool.as_deref(), Some("bash"));
        assert_eq!(message.as_deref(), Some("bash echo hi > /w/marker.txt"));
        let pre = br#"{"sessionId":"797a1dbf-1504","timestamp":1796338138674,"cwd":"/w","toolName":"bash","toolArgs":{"command":"echo step-1 >> steps.txt","description":"Write"}}"#;
        let HookInput::Alive { session } = parse(pre) else {
            panic!()
        };
        assert_eq!(session.event, "preToolUse");
        let stop = br#"{"sessionId":"797a1dbf-1504","timestamp":1796326000472,"cwd":"/w","transcriptPath":"/h/events.jsonl","stopReason":"end_turn","stop_hook_active":false}"#;
        assert!(matches!(parse(stop), HookInput::Stop { .. }));
    }

    #[test]
    fn pascal_case_payloads() {
        let stop = br#"{"hook_event_name":"Stop","session_id":"s1","timestamp":"2026-01-01T00:00:00Z","cwd":"/w","transcript_path":"/t","stop_reason":"end_turn"}"#;
        assert!(matches!(parse(stop), HookInput::Stop { .. }));
    }

    #[test]
    fn shapes() {
        assert_eq!(render_block("r"), r#"{"decision":"block","reason":"r"}"#);
        assert_eq!(
            render_seam_prompt("postToolUse", "go").unwrap().0,
            r#"{"additionalContext":"go"}"#
        );
        assert_eq!(
            render_seam_prompt("preToolUse", "no").unwrap().0,
            r#"{"permissionDecision":"deny","permissionDecisionReason":"no"}"#
        );
        assert_eq!(
            render_cancel("permissionRequest", "bye").unwrap().0,
            r#"{"behavior":"deny","message":"bye","interrupt":true}"#
        );
        assert_eq!(render_cancel("postToolUse", "bye"), None);
    }
}
