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
use super::{minted_attention_id, payload, session_ref, Harness, HookInput, Lifecycle, Text};
use serde_json::{json, Value};

/// A new prompt is `BeforeAgent`.
const GEMINI_LIFECYCLE: Lifecycle = Lifecycle {
    start: "SessionStart",
    end: "SessionEnd",
    prompt: "BeforeAgent",
    default_source: "unknown",
};

/// The fields of a Gemini CLI hook payload we read (0.61, snake_case).
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Payload {
    hook_event_name: Text,
    /// Notification: `ToolPermission` is a prompt.
    notification_type: Text,
    session_id: Text,
    cwd: Text,
    /// Notification: what the prompt is about, kept whole for the attention id.
    details: Option<Value>,
    message: Text,
    timestamp: Text,
    source: Text,
}

/// What we read of a ToolPermission's `details`: the tool under each name 0.61 uses, and what
/// would run.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Details {
    #[serde(rename = "toolName")]
    tool_name_camel: Text,
    tool_name: Text,
    #[serde(rename = "rootCommand")]
    root_command: Text,
    name: Text,
    #[serde(rename = "type")]
    kind: Text,
    title: Text,
    command: Text,
}

pub fn parse(stdin: &[u8]) -> HookInput {
    let p: Payload = match payload(stdin, "Gemini CLI") {
        Ok(p) => p,
        Err(e) => return HookInput::Skip(e),
    };
    let Some(event) = p.hook_event_name.get() else {
        return HookInput::Skip("Gemini CLI payload has no hook_event_name".into());
    };
    let session = match session_ref(Harness::GeminiCli, p.session_id.get(), p.cwd.get(), event) {
        Ok(s) => s,
        Err(e) => return HookInput::Skip(e),
    };
    match event {
        "Notification" if p.notification_type.get() == Some("ToolPermission") => {
            let details = p.details.clone().unwrap_or(Value::Null);
            // Only an object has fields (an array would fill them by position).
            let d: Details = match &details {
                Value::Object(_) => serde_json::from_value(details.clone()).unwrap_or_default(),
                _ => Details::default(),
            };
            let tool = d
                .tool_name_camel
                .get()
                .or(d.tool_name.get())
                .or(d.root_command.get())
                .or(d.name.get())
                .or(d.kind.get())
                .unwrap_or("tool");
            // 0.61's `message` names no command ("Tool Confirm Shell Command requires
            // execution", recorded); `details` has it, so the person sees what would run.
            let message = match (d.title.get(), d.command.get()) {
                (Some(t), Some(c)) => Some(format!("{t}: {c}")),
                (None, Some(c)) => Some(c.to_string()),
                _ => p.message.get().or(d.title.get()).map(str::to_string),
            };
            HookInput::Permission {
                // No tool-call id is sent: minted from the notification's time and details.
                attention_id: minted_attention_id(p.timestamp.get().unwrap_or(""), tool, &details),
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
        _ => GEMINI_LIFECYCLE.read(event, session, p.source.get()),
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
