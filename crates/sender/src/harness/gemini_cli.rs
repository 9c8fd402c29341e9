//! Gemini CLI (0.61): hook stdin per docs/harness-contracts.md#gemini-cli. Gemini has no permission answer
//! channel: a Notification of type ToolPermission announces `attention.needed` and the hook
//! returns at once (permission.answer is acked `unsupported`). Prompts go through AfterAgent's
//! `{"decision":"block","reason":…}`, which Gemini sends as a new request. Gemini reads stderr
//! when stdout is empty, and our hooks never write either unless answering.
//!
//! The tool-boundary seams (DECISIONS 25, 26), as the bundled 0.61.0 code reads hook output
//! (`executeToolWithHooks`, `evaluateBeforeToolHook`, `DefaultHookOutput`):
//! - AfterTool `hookSpecificOutput.additionalContext` is appended to the tool's result as
//!   `<hook_context>…</hook_context>` (`<` and `>` escaped): `steer`.
//! - A BeforeTool `decision:"deny"` keeps the tool from running; the model gets
//!   `Tool execution blocked: <reason>` as its result: `interrupt`.
//! - `continue:false` at either ends the agent (`Agent execution stopped: <stopReason>`; before
//!   a tool, that tool does not run), and at AfterAgent it ends the turn without continuing.
use super::{field, minted_attention_id, object, session_ref, text, Harness, HookInput, Lifecycle};
use serde_json::{json, Value};

/// A new prompt is `BeforeAgent`.
const GEMINI_LIFECYCLE: Lifecycle = Lifecycle {
    start: "SessionStart",
    end: "SessionEnd",
    prompt: "BeforeAgent",
    default_source: "unknown",
};

pub fn parse(stdin: &[u8]) -> HookInput {
    let v = match object(stdin, "Gemini CLI") {
        Ok(v) => v,
        Err(e) => return HookInput::Skip(e),
    };
    let Some(event) = text(&v, &["hook_event_name"]) else {
        return HookInput::Skip("Gemini CLI payload has no hook_event_name".into());
    };
    let session = match session_ref(
        Harness::GeminiCli,
        text(&v, &["session_id"]),
        text(&v, &["cwd"]),
        event,
    ) {
        Ok(s) => s,
        Err(e) => return HookInput::Skip(e),
    };
    match event {
        "Notification" if text(&v, &["notification_type"]) == Some("ToolPermission") => {
            let details = field(&v, &["details"]).cloned().unwrap_or(Value::Null);
            let tool = text(
                &details,
                &["toolName", "tool_name", "rootCommand", "name", "type"],
            )
            .unwrap_or("tool");
            // 0.61's `message` names no command ("Tool Confirm Shell Command requires
            // execution", recorded); `details` has it, so the person sees what would run.
            let message = match (text(&details, &["title"]), text(&details, &["command"])) {
                (Some(t), Some(c)) => Some(format!("{t}: {c}")),
                (None, Some(c)) => Some(c.to_string()),
                _ => text(&v, &["message"])
                    .or_else(|| text(&details, &["title"]))
                    .map(str::to_string),
            };
            HookInput::Permission {
                // No tool-call id is sent: minted from the notification's time and details.
                attention_id: minted_attention_id(
                    text(&v, &["timestamp"]).unwrap_or(""),
                    tool,
                    &details,
                ),
                tool: Some(tool.to_string()),
                message,
                session,
            }
        }
        "AfterAgent" => HookInput::Stop { session },
        // The terminal answered its own dialog: the tool ran (or, below, a new prompt came).
        "AfterTool" => HookInput::TerminalAnswered {
            attention_id: None,
            session,
        },
        _ => GEMINI_LIFECYCLE.read(event, session, text(&v, &["source"])),
    }
}

pub fn render_block(reason: &str) -> String {
    json!({ "decision": "block", "reason": reason }).to_string()
}

/// The stdout that hands `text` to the model at this tool boundary, and what the ack says.
pub fn render_seam_prompt(event: &str, text: &str) -> Option<(String, &'static str)> {
    match event {
        "AfterTool" => Some((
            json!({ "hookSpecificOutput": { "hookEventName": "AfterTool", "additionalContext": text } })
                .to_string(),
            "additionalContext",
        )),
        "BeforeTool" => Some((
            json!({ "decision": "deny", "reason": text }).to_string(),
            "deny",
        )),
        _ => None,
    }
}

/// Stops the agent at any of its seams; `stopReason` is what Gemini shows the person.
pub fn render_cancel(event: &str, reason: &str) -> (String, &'static str) {
    let how = if event == "BeforeTool" {
        "continue:false; the tool did not run"
    } else {
        "continue:false"
    };
    (
        json!({ "continue": false, "stopReason": reason }).to_string(),
        how,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn events() {
        let n = br#"{"session_id":"g1","cwd":"/w","hook_event_name":"Notification","timestamp":"2026-01-01T00:00:00.000Z","notification_type":"ToolPermission","message":"Allow shell: rm -rf build?","details":{"type":"exec","title":"Confirm Shell Command","command":"rm -rf build","rootCommand":"rm"}}"#;
        let HookInput::Permission {
            tool,
            message,
            attention_id,
            ..
        } = parse(n)
        else {
            panic!()
        };
        assert_eq!(tool.as_deref(), Some("rm"));
        assert_eq!(
            message.as_deref(),
            Some("Confirm Shell Command: rm -rf build")
        );
        assert!(attention_id.starts_with("perm-"));
        // As 0.61.0 sent it in a real interactive run (tests/real_agents.rs).
        let recorded = br#"{"session_id":"a539e26b-e9f8-4ba5-ae6f-c6bde00aa539","transcript_path":"/h/.gemini/tmp/work/chats/session-a539e26b.jsonl","cwd":"/w","hook_event_name":"Notification","timestamp":"2026-12-03T19:31:40.388Z","notification_type":"ToolPermission","message":"Tool Confirm Shell Command requires execution","details":{"type":"exec","title":"Confirm Shell Command","command":"echo hi > /w/marker.txt","rootCommand":"echo, redirection (>)"}}"#;
        let HookInput::Permission { message, .. } = parse(recorded) else {
            panic!()
        };
        assert_eq!(
            message.as_deref(),
            Some("Confirm Shell Command: echo hi > /w/marker.txt")
        );
        assert!(matches!(
            parse(br#"{"session_id":"g1","hook_event_name":"Notification","notification_type":"Other"}"#),
            HookInput::Alive { .. }
        ));
        assert!(matches!(
            parse(br#"{"session_id":"g1","hook_event_name":"AfterAgent","stop_hook_active":true}"#),
            HookInput::Stop { .. }
        ));
        assert_eq!(render_block("r"), r#"{"decision":"block","reason":"r"}"#);
        assert!(matches!(
            parse(br#"{"session_id":"g1","hook_event_name":"BeforeTool","tool_name":"run_shell_command","tool_input":{"command":"ls"}}"#),
            HookInput::Alive { .. }
        ));
        assert!(matches!(
            parse(br#"{"session_id":"g1","hook_event_name":"AfterTool","tool_name":"run_shell_command","tool_input":{"command":"ls"},"tool_response":{}}"#),
            HookInput::TerminalAnswered { .. }
        ));
    }
}
