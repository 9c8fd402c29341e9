//! Claude Code (2.1.x): hook stdin per docs/harness-contracts.md#claude-code, answers in its exact shapes.
use super::{
    describe_tool, minted_attention_id, mode_of, Call, HookInput, RichAnswer, PASCAL_LIFECYCLE,
};
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
    #[serde(default)]
    permission_mode: Option<String>,
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
        permission_mode: mode_of(input.permission_mode.as_deref()),
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

/// The tool a question comes through (DECISIONS 30 `answers`).
pub const QUESTION_TOOL: &str = "AskUserQuestion";

#[derive(Deserialize)]
struct CallInput {
    tool_name: String,
    tool_input: Value,
    #[serde(default)]
    permission_suggestions: Option<Vec<Value>>,
}

/// A PermissionRequest's call: the tool, its exact input and the offered session rules.
pub fn call(stdin: &[u8]) -> Option<Call> {
    let c: CallInput = serde_json::from_slice(stdin).ok()?;
    Some(Call {
        tool: c.tool_name,
        input: c.tool_input,
        suggestions: c.permission_suggestions.unwrap_or_default(),
    })
}

/// How much of a transcript's end a Stop reads for the turn's reply: the hook stays fast
/// whatever the session's length.
pub const TRANSCRIPT_TAIL: u64 = 256 * 1024;

/// The turn's final text (DECISIONS 38): `last_assistant_message`, else the last assistant
/// text in the tail of the transcript at `transcript_path`.
pub fn turn_reply(stdin: &[u8]) -> Option<String> {
    if let Some(m) = super::last_assistant_message(stdin) {
        return Some(m);
    }
    #[derive(Deserialize)]
    struct Stop {
        transcript_path: Option<String>,
    }
    let s: Stop = serde_json::from_slice(stdin).ok()?;
    transcript_reply(std::path::Path::new(&s.transcript_path?))
}

/// The last assistant text of a Claude Code transcript (JSONL: one entry a line, an
/// assistant entry's `message.content` a list of blocks), from its last
/// [`TRANSCRIPT_TAIL`] bytes, not reaching back past the person's prompt. Only a regular
/// `.jsonl` file is read (the path comes from hook stdin), without blocking.
pub fn transcript_reply(path: &std::path::Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    if !path.is_absolute() || path.extension()? != "jsonl" {
        return None;
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
        .ok()?;
    let meta = f.metadata().ok()?;
    if !meta.is_file() {
        return None;
    }
    let start = meta.len().saturating_sub(TRANSCRIPT_TAIL);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut buf = Vec::new();
    f.take(TRANSCRIPT_TAIL).read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    let mut lines: Vec<&str> = text.lines().collect();
    if start > 0 && !lines.is_empty() {
        // The first line was cut by the seek.
        lines.remove(0);
    }
    for line in lines.iter().rev() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let content = &v["message"]["content"];
        match v["type"].as_str() {
            // The person's prompt (tool results are user entries with a list): the turn began.
            Some("user") if content.is_string() => return None,
            Some("assistant") => {
                let texts: Vec<&str> = content
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|b| b["type"] == "text")
                    .filter_map(|b| b["text"].as_str())
                    .filter(|t| !t.trim().is_empty())
                    .collect();
                if !texts.is_empty() {
                    return Some(texts.join("\n"));
                }
            }
            _ => {}
        }
    }
    None
}

/// The tool a plan comes through (DECISIONS 31): approve is an allow, keep planning a deny
/// whose message the model reads.
pub const PLAN_TOOL: &str = "ExitPlanMode";

/// What 2.1.332 cannot take for this call (DECISIONS 30): a question or a plan is answered
/// once, so no session rule; a plan is approved as the model wrote it, never edited (its
/// card admits only the input it showed).
pub fn unsupported_for_call(a: &RichAnswer, call: &Call) -> Option<String> {
    let once = matches!(call.tool.as_str(), QUESTION_TOOL | PLAN_TOOL);
    if a.session_rule && once {
        return Some(format!(
            "scope: {} is answered once, never for the session; nothing ran, the prompt is still open",
            call.tool
        ));
    }
    if call.tool == PLAN_TOOL && a.decision == Decision::Allow && a.rich.input.is_some() {
        return Some(
            "input: Claude Code approves a plan as written, not an edited one; approve it or keep planning with a note; nothing ran, the prompt is still open"
                .into(),
        );
    }
    None
}

/// An answer with DECISIONS 30's fields, as docs/harness-contracts.md#claude-code-permission and #measured found 2.1.332 takes
/// it: `updatedInput` replaces the whole input (the person's `input`, never merged with the
/// model's; for a question the original input with `questions` kept plus `answers`),
/// `interrupt: true` on a deny ends the turn. `scope: "session"` hands Claude Code no rule of
/// its own (its offered `permission_suggestions` match more than the call the person saw,
/// and the page does not show them): the machine's grant is the session's. `Err` names the
/// rule when this call cannot take the answer.
pub fn render_rich_permission(a: &RichAnswer, call: &Call) -> Result<String, String> {
    let question = call.tool == QUESTION_TOOL;
    let decision = match a.decision {
        Decision::Deny => {
            let mut d = json!({ "behavior": "deny", "message": a.message });
            if a.rich.interrupt {
                d["interrupt"] = json!(true);
            }
            d
        }
        Decision::Allow => {
            if a.rich.answers.is_some() && !question {
                return Err(format!(
                    "answers: this call is {}, not a question (DECISIONS 30); nothing ran",
                    call.tool
                ));
            }
            let mut d = json!({ "behavior": "allow" });
            let updated = match (&a.rich.answers, &a.rich.input) {
                (Some(answers), input) => {
                    let base = match input {
                        Some(i) => Value::Object(i.clone()),
                        None => call.input.clone(),
                    };
                    let Value::Object(mut o) = base else {
                        return Err(
                            "answers: the question's input is not an object; nothing ran".into(),
                        );
                    };
                    if !o.contains_key("questions") {
                        if let Some(q) = call.input.get("questions") {
                            o.insert("questions".into(), q.clone());
                        }
                    }
                    // 2.1.332's AskUserQuestion input types `answers` as question text ->
                    // string, a multi-select's labels comma-separated (sdk-tools.d.ts).
                    let answers = answers
                        .iter()
                        .map(|(q, a)| {
                            let a = match a {
                                Value::Array(labels) => Value::String(
                                    labels
                                        .iter()
                                        .filter_map(Value::as_str)
                                        .collect::<Vec<_>>()
                                        .join(", "),
                                ),
                                other => other.clone(),
                            };
                            (q.clone(), a)
                        })
                        .collect();
                    o.insert("answers".into(), Value::Object(answers));
                    Some(Value::Object(o))
                }
                (None, _) if question => {
                    return Err("a question needs answers (DECISIONS 30); nothing ran".into())
                }
                // Approve: the plan's card takes the input it showed, plan and all.
                (None, None) if call.tool == PLAN_TOOL => Some(call.input.clone()),
                (None, Some(input)) => Some(Value::Object(input.clone())),
                (None, None) => None,
            };
            if let Some(u) = updated {
                d["updatedInput"] = u;
            }
            // No `updatedPermissions`: Claude Code's offered session rules (a folder, a
            // command prefix) match more than the one call the person saw, and the page never
            // showed them; the machine's own grant answers the identical call again.
            d
        }
    };
    Ok(
        json!({ "hookSpecificOutput": { "hookEventName": "PermissionRequest", "decision": decision } })
            .to_string(),
    )
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

/// One line of `claude -p --output-format stream-json --verbose` (2.1.332): `system/init`
/// names the session, each `assistant` message's text blocks add to the answer, `result`
/// ends the turn (`is_error` or an `error_*` subtype: a failure).
pub fn run_line(out: &mut super::RunOutput, line: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(line) else {
        return;
    };
    if let Some(id) = v.get("session_id").and_then(Value::as_str) {
        out.session = Some(id.to_string());
    }
    match v.get("type").and_then(Value::as_str) {
        Some("stream_event") => {
            let e = v.get("event");
            match e.and_then(|e| e.get("type")).and_then(Value::as_str) {
                Some("message_start") => out.partial.clear(),
                Some("content_block_delta") => {
                    if let Some(t) = e
                        .and_then(|e| e.pointer("/delta/text"))
                        .and_then(Value::as_str)
                    {
                        out.partial.push_str(t);
                    }
                }
                _ => {}
            }
        }
        Some("assistant") => {
            let blocks = v.pointer("/message/content").and_then(Value::as_array);
            for b in blocks.into_iter().flatten() {
                if b.get("type").and_then(Value::as_str) == Some("text") {
                    out.add_text(b.get("text").and_then(Value::as_str).unwrap_or(""));
                }
            }
        }
        Some("result") => {
            let failed = v.get("is_error").and_then(Value::as_bool) == Some(true)
                || v.get("subtype")
                    .and_then(Value::as_str)
                    .is_some_and(|s| s.starts_with("error"));
            let text = v.get("result").and_then(Value::as_str);
            if failed {
                // 2.1.332 names the cause in `errors` ("No conversation found with …").
                let first_error = v.pointer("/errors/0").and_then(Value::as_str);
                out.error = Some(
                    first_error
                        .or(text)
                        .or(v.get("subtype").and_then(Value::as_str))
                        .unwrap_or("the run failed")
                        .to_string(),
                );
            } else {
                out.result = Some(text.map_or_else(|| out.text.clone(), str::to_string));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {

    /// DECISIONS 38: the turn's text from the transcript's tail, and only from a regular
    /// `.jsonl` file given by an absolute path; a FIFO is refused without blocking the hook.
    #[test]
    fn transcript_reply_reads_only_a_regular_jsonl_tail() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("s.jsonl");
        let lines = [
            json!({"type": "user", "message": {"content": "hi"}}),
            json!({"type": "assistant", "message": {"content": [{"type": "text", "text": "Hello."}]}}),
        ];
        let body: Vec<String> = lines.iter().map(Value::to_string).collect();
        std::fs::write(&t, body.join("\n")).unwrap();
        assert_eq!(transcript_reply(&t).as_deref(), Some("Hello."));
        let stdin = json!({"transcript_path": t}).to_string();
        assert_eq!(turn_reply(stdin.as_bytes()).as_deref(), Some("Hello."));
        // last_assistant_message wins when there is one.
        let stdin = json!({"transcript_path": t, "last_assistant_message": "From the payload."});
        assert_eq!(
            turn_reply(stdin.to_string().as_bytes()).as_deref(),
            Some("From the payload.")
        );
        // Only the person's prompt since: no text of this turn.
        std::fs::write(&t, format!("{}\n{}", body[1], body[0])).unwrap();
        assert_eq!(transcript_reply(&t), None);
        let other = dir.path().join("s.txt");
        std::fs::write(&other, &body[1]).unwrap();
        assert_eq!(transcript_reply(&other), None, "not .jsonl");
        assert_eq!(
            transcript_reply(std::path::Path::new("s.jsonl")),
            None,
            "relative"
        );
        let fifo = dir.path().join("f.jsonl");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(transcript_reply(&fifo), None, "a FIFO, unread");
    }

    use super::*;
    #[test]
    fn shapes() {
        assert_eq!(
            render_block("x\"y"),
            r#"{"decision":"block","reason":"x\"y"}"#
        );
    }

    #[test]
    fn rich_shapes() {
        use crate::wire::control::Rich;
        let call = |tool: &str, input: Value, suggestions: Vec<Value>| Call {
            tool: tool.into(),
            input,
            suggestions,
        };
        let obj = |v: Value| v.as_object().unwrap().clone();
        let bash = call(
            "Bash",
            json!({"command": "rm -rf x", "description": "d"}),
            vec![
                json!({"type": "addDirectories", "directories": ["/w"], "destination": "session"}),
                json!({"type": "addRules", "rules": [], "behavior": "allow", "destination": "localSettings"}),
            ],
        );
        let edit = Rich {
            input: Some(obj(json!({"command": "rm -ri x"}))),
            ..Rich::default()
        };
        let a = RichAnswer {
            decision: Decision::Allow,
            message: "",
            rich: &edit,
            session_rule: true,
        };
        let out: Value = serde_json::from_str(&render_rich_permission(&a, &bash).unwrap()).unwrap();
        let d = &out["hookSpecificOutput"]["decision"];
        assert_eq!(d["updatedInput"], json!({"command": "rm -ri x"}));
        // The offered session rule is not handed over: the page never showed it.
        assert!(d.get("updatedPermissions").is_none(), "{d}");
        let stop = Rich {
            interrupt: true,
            ..Rich::default()
        };
        let a = RichAnswer {
            decision: Decision::Deny,
            message: "no",
            rich: &stop,
            session_rule: false,
        };
        assert_eq!(
            render_rich_permission(&a, &bash).unwrap(),
            r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"deny","message":"no","interrupt":true}}}"#
        );
        let q = call(
            QUESTION_TOOL,
            json!({"questions": [{"question": "Which?", "options": [{"label": "A"}]}]}),
            vec![],
        );
        let answers = Rich {
            answers: Some(obj(json!({"Which?": "A", "Which ones?": ["B", "C"]}))),
            ..Rich::default()
        };
        let a = RichAnswer {
            decision: Decision::Allow,
            message: "",
            rich: &answers,
            session_rule: false,
        };
        let out: Value = serde_json::from_str(&render_rich_permission(&a, &q).unwrap()).unwrap();
        let u = &out["hookSpecificOutput"]["decision"]["updatedInput"];
        assert_eq!(u["questions"], q.input["questions"]);
        assert_eq!(u["answers"], json!({"Which?": "A", "Which ones?": "B, C"}));
        assert!(render_rich_permission(&a, &bash)
            .unwrap_err()
            .starts_with("answers:"));
        let bare = Rich::default();
        let a = RichAnswer {
            decision: Decision::Allow,
            message: "",
            rich: &bare,
            session_rule: false,
        };
        assert!(render_rich_permission(&a, &q)
            .unwrap_err()
            .contains("a question needs answers"));
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
