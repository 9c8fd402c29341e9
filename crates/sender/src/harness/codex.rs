//! OpenAI Codex CLI (0.171): hook stdin per docs/harness-contracts.md#codex. Codex output schemas are
//! `additionalProperties:false`, so every answer here is exactly its documented shape and
//! nothing more (a stray field makes the hook count as failed).
use super::{
    describe_tool, field, minted_attention_id, named_attention_id, object, session_ref, text, Call,
    Harness, HookInput, RichAnswer, PASCAL_LIFECYCLE,
};
use crate::store::SessionRef;
use crate::wire::control::Decision;
use serde_json::{json, Value};

pub fn parse(stdin: &[u8]) -> HookInput {
    let v = match object(stdin, "Codex") {
        Ok(v) => v,
        Err(e) => return HookInput::Skip(e),
    };
    let Some(event) = text(&v, &["hook_event_name"]) else {
        return HookInput::Skip("Codex payload has no hook_event_name".into());
    };
    let session = match session_ref(
        Harness::Codex,
        text(&v, &["session_id"]),
        text(&v, &["cwd"]),
        event,
    ) {
        Ok(s) => SessionRef {
            permission_mode: super::mode_of(text(&v, &["permission_mode"])),
            ..s
        },
        Err(e) => return HookInput::Skip(e),
    };
    let tool = text(&v, &["tool_name"]);
    let input = field(&v, &["tool_input"]);
    // DECISIONS 9 and 32: Codex's own tool-use id bound to the input when it sends one;
    // 0.171's PermissionRequest has none, so the id is minted from the turn, the tool and its
    // input (stable per prompt).
    let named = text(&v, &["tool_use_id"])
        .filter(|_| event == "PermissionRequest")
        .and_then(|id| named_attention_id(id, input.unwrap_or(&Value::Null)));
    let attention = || match named {
        Some(id) => Some(id),
        None => match (tool, input) {
            (Some(t), Some(i)) => Some(minted_attention_id(
                text(&v, &["turn_id"]).unwrap_or(""),
                t,
                i,
            )),
            _ => None,
        },
    };
    match event {
        "PermissionRequest" => {
            let (Some(t), Some(i)) = (tool, input) else {
                return HookInput::Skip(
                    "Codex PermissionRequest without tool_name/tool_input".into(),
                );
            };
            HookInput::Permission {
                attention_id: attention().unwrap_or_default(),
                tool: Some(t.to_string()),
                message: Some(describe_tool(t, i)),
                session,
            }
        }
        // A subagent's Stop carries agent_id; only the main turn end delivers prompts.
        "Stop" if field(&v, &["agent_id"]).is_none() => HookInput::Stop { session },
        "PostToolUse" => HookInput::TerminalAnswered {
            attention_id: attention(),
            session,
        },
        _ => PASCAL_LIFECYCLE.read(event, session, text(&v, &["source"])),
    }
}

/// `permission-request.command.output` is Claude Code's answer exactly: `decision` holds
/// `behavior` and, on deny, `message`; `updatedInput`, `updatedPermissions` and
/// `interrupt:true` make Codex fail the hook.
pub fn render_permission(decision: Decision, message: &str) -> String {
    super::claude_code::render_permission(decision, message)
}

/// Seen with the real 0.171.0 (`codex exec`): after a PostToolUse `continue:false` it prints
/// "PostToolUse Stopped" and then asks the model again and runs the next tool. So a stop is
/// delivered as a denial of every further tool of the turn (the hook runtime keeps the
/// session stopped until the turn ends), and the model is told why (caps.rs: its seams).
/// Before a tool, a deny with the reason (`pre-tool-use` takes nothing else); after a tool
/// and at the turn's end `{"continue":false,"stopReason":…}` (`post-tool-use`, `stop`).
pub fn render_cancel(event: &str, reason: &str) -> (String, &'static str) {
    if event == "PreToolUse" {
        let (out, _) = super::claude_code::render_seam_prompt(event, reason)
            .expect("PreToolUse is a prompt seam");
        return (out, "tool denied; the turn's later tools are denied too");
    }
    let how = if event == "PostToolUse" {
        "continue:false; the turn's later tools are denied"
    } else {
        "continue:false"
    };
    (
        json!({ "continue": false, "stopReason": reason }).to_string(),
        how,
    )
}

/// A PermissionRequest's call as a grant matches it (DECISIONS 30): the tool and the command
/// that runs. `tool_input.description` is the model's justification, not the call, so it is
/// left out; the app-server path keeps its grant from the prompt's attention ([`shown_call`]),
/// so a grant kept there matches the hook's next prompt too.
pub fn call(stdin: &[u8]) -> Option<Call> {
    let v: Value = serde_json::from_slice(stdin).ok()?;
    if v.get("hook_event_name")?.as_str()? != "PermissionRequest" {
        return None;
    }
    let tool = v.get("tool_name")?.as_str()?;
    let input = v.get("tool_input")?;
    let input = match input.get("command").and_then(Value::as_str) {
        Some(command) => json!({ "command": command }),
        None => input.clone(),
    };
    Some(Call {
        tool: tool.to_string(),
        input,
        suggestions: Vec::new(),
    })
}

/// The call a prompt's attention showed (`tool` and its message, `describe_tool`'s
/// "<tool> <command>"), as [`call`] reads the hook's: what the app-server path keeps a grant
/// for. None when the message is not that shape.
pub fn shown_call(tool: &str, message: &str) -> Option<Call> {
    let command = message.strip_prefix(tool)?.strip_prefix(' ')?;
    Some(Call {
        tool: tool.to_string(),
        input: json!({ "command": command }),
        suggestions: Vec::new(),
    })
}

/// Codex's hook answer takes only `behavior` and a deny's `message` (its 0.171 schema marks
/// `updatedInput`, `updatedPermissions` and `interrupt` reserved and fails the hook on them),
/// so `scope: "session"` is kept as our grant alone and any other field is refused.
pub fn render_rich_permission(a: &RichAnswer) -> Result<String, String> {
    if let Some(f) = a.rich.fields().first() {
        return Err(format!(
            "{f}: codex's permission hook has no such field (DECISIONS 30); nothing ran"
        ));
    }
    Ok(render_permission(a.decision, a.message))
}

/// `stop.command.output`: a block with a non-empty reason; no hookSpecificOutput on Stop.
pub fn render_block(reason: &str) -> String {
    json!({ "decision": "block", "reason": reason }).to_string()
}

/// One line of `codex exec --json` (0.171.0): `thread.started` names the thread, each
/// completed `agent_message` item adds to the answer, `turn.completed` ends the turn well,
/// `turn.failed` and `error` report a failure.
pub fn run_line(out: &mut super::RunOutput, line: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(line) else {
        return;
    };
    match v.get("type").and_then(Value::as_str) {
        Some("thread.started") => {
            out.session = v
                .get("thread_id")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        Some("item.completed") => {
            let item = v.get("item");
            let kind = item.and_then(|i| i.get("type")).and_then(Value::as_str);
            if matches!(kind, Some("agent_message" | "assistant_message")) {
                out.add_text(
                    item.and_then(|i| i.get("text"))
                        .and_then(Value::as_str)
                        .unwrap_or(""),
                );
            }
        }
        Some("turn.completed") => out.result = Some(out.text.clone()),
        Some("turn.failed") => {
            out.error = Some(
                v.pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("the turn failed")
                    .to_string(),
            );
        }
        Some("error") => {
            out.error = Some(
                v.get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("error")
                    .to_string(),
            );
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DECISIONS 30: a grant matches the tool and the command, not the model's justification;
    /// the app-server path reads the same call back from the prompt it showed.
    #[test]
    fn a_grant_matches_the_command_as_the_hook_and_the_attention_show_it() {
        let p = br#"{"session_id":"s1","turn_id":"t1","cwd":"/w","hook_event_name":"PermissionRequest","tool_name":"Bash","tool_input":{"command":"cargo test","description":"Run the tests"}}"#;
        let c = call(p).expect("a PermissionRequest names its call");
        assert_eq!(c.tool, "Bash");
        assert_eq!(c.input, json!({"command": "cargo test"}));
        let shown = shown_call("Bash", &describe_tool(&c.tool, &c.input)).unwrap();
        assert_eq!((shown.tool, shown.input), (c.tool, c.input));
        assert!(shown_call("Bash", "Write x").is_none());
        let stop = br#"{"session_id":"s1","turn_id":"t1","cwd":"/w","hook_event_name":"Stop"}"#;
        assert!(call(stop).is_none());
    }

    /// DECISIONS 36: the session keeps the mode Codex reports, a short word only.
    #[test]
    fn the_permission_mode_rides_the_session() {
        let mode = |m: &str| {
            let p = format!(
                r#"{{"session_id":"s1","turn_id":"t1","cwd":"/w","hook_event_name":"Stop","permission_mode":{m}}}"#
            );
            match parse(p.as_bytes()) {
                HookInput::Skip(why) => panic!("{why}"),
                other => other.session().and_then(|s| s.permission_mode.clone()),
            }
        };
        assert_eq!(
            mode(r#""bypassPermissions""#).as_deref(),
            Some("bypassPermissions")
        );
        assert_eq!(mode(r#""by pass""#), None);
        assert_eq!(mode("null"), None);
    }

    #[test]
    fn permission_ids() {
        let p = br#"{"session_id":"s1","turn_id":"t1","transcript_path":null,"cwd":"/w","hook_event_name":"PermissionRequest","model":"m","permission_mode":"default","tool_name":"Bash","tool_input":{"command":"rm -rf build","description":"clean"}}"#;
        let HookInput::Permission {
            attention_id,
            tool,
            message,
            ..
        } = parse(p)
        else {
            panic!()
        };
        assert_eq!(
            attention_id,
            minted_attention_id(
                "t1",
                "Bash",
                &json!({"command":"rm -rf build","description":"clean"})
            )
        );
        assert_eq!(tool.as_deref(), Some("Bash"));
        assert_eq!(message.as_deref(), Some("Bash rm -rf build"));
        // Its PostToolUse names the same attention.
        let post = br#"{"session_id":"s1","turn_id":"t1","transcript_path":null,"cwd":"/w","hook_event_name":"PostToolUse","model":"m","permission_mode":"default","tool_name":"Bash","tool_input":{"command":"rm -rf build","description":"clean"},"tool_response":"","tool_use_id":"exec-1"}"#;
        let HookInput::TerminalAnswered {
            attention_id: Some(a),
            ..
        } = parse(post)
        else {
            panic!()
        };
        assert_eq!(a, attention_id);
        // A tool_use_id on the request wins, bound to the input (DECISIONS 9, 32).
        let with_id = br#"{"session_id":"s1","turn_id":"t1","cwd":"/w","hook_event_name":"PermissionRequest","tool_name":"Bash","tool_input":{"command":"ls"},"tool_use_id":"call_9"}"#;
        let HookInput::Permission { attention_id, .. } = parse(with_id) else {
            panic!()
        };
        assert_eq!(
            Some(attention_id),
            named_attention_id("call_9", &json!({"command":"ls"}))
        );
    }

    #[test]
    fn events() {
        assert!(matches!(parse(b"{"), HookInput::Skip(_)));
        assert!(matches!(
            parse(br#"{"session_id":"s","hook_event_name":"PermissionRequest"}"#),
            HookInput::Skip(_)
        ));
    }
}
