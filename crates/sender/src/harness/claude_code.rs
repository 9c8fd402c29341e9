//! Claude Code (2.1.x): hook stdin per docs/harness-contracts.md#claude-code, answers in its exact shapes.
use super::{
    describe_tool, minted_attention_id, mode_of, named_attention_id, Call, HookInput, RichAnswer,
    PASCAL_LIFECYCLE,
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
    tool_use_id: Option<String>,
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
        // DECISIONS 39: a headless run asks at PreToolUse, the one event whose answer can
        // park it (`defer`); its PermissionRequest could only deny.
        "PreToolUse" => match (&input.tool_name, &input.tool_input) {
            (Some(tool), Some(tool_input))
                if asks_headless(tool, input.permission_mode.as_deref())
                    && headless().is_some_and(|allowed| !allowed.contains(tool)) =>
            {
                // Bound to the call (DECISIONS 32): the resumed run re-fires it with the same
                // `tool_use_id`, so it finds the answer given to the parked prompt.
                let attention_id = input
                    .tool_use_id
                    .as_deref()
                    .and_then(|id| named_attention_id(id, tool_input))
                    .unwrap_or_else(|| {
                        minted_attention_id(
                            input.prompt_id.as_deref().unwrap_or(""),
                            tool,
                            tool_input,
                        )
                    });
                HookInput::Permission {
                    attention_id,
                    message: Some(describe_tool(tool, tool_input)),
                    tool: Some(tool.clone()),
                    session,
                }
            }
            _ => PASCAL_LIFECYCLE.read(&event, session, input.source.as_deref()),
        },
        "Stop" if input.agent_id.is_none() => HookInput::Stop { session },
        "PostToolUse" | "PostToolUseFailure" => HookInput::TerminalAnswered {
            attention_id: attention(),
            session,
        },
        _ => PASCAL_LIFECYCLE.read(&event, session, input.source.as_deref()),
    }
}

/// Set to `1` to say the run is headless (DECISIONS 39), as a script driving `claude -p`
/// through a wrapper may need to.
pub const HEADLESS_ENV: &str = "SESSIONPIPE_HEADLESS";
/// Set (to the run's id) in every run the machine launches (`runs::RUN_ENV`): all headless.
const RUN_ENV: &str = "SESSIONPIPE_RUN";
/// How many processes up from the hook to look for `claude -p` (a hook runs under a shell).
const ANCESTORS: usize = 4;
/// What Claude Code sets in its hooks' environment: whether the session is attended, and its
/// own process id.
const ATTENDED_ENV: &str = "CLAUDE_CODE_SESSION_ATTENDED";
const PID_ENV: &str = "CLAUDE_PID";

/// Whether the Claude Code this hook runs under is headless (`-p`/`--print`), and if so the
/// tools its command line allows outright (`--allowedTools Bash`: bare names only; a pattern
/// such as `Bash(git:*)` allows less than the whole tool, so its calls are still asked). The
/// machine's runs say they are headless in `SESSIONPIPE_RUN` (or [`HEADLESS_ENV`]); a
/// person's own `claude -p` is found on its command line. Headless or not only decides where
/// the prompt is asked (and so whether it can park); the answer is checked the same way.
fn headless() -> Option<Vec<String>> {
    let said = std::env::var_os(HEADLESS_ENV).is_some_and(|v| v == "1")
        || std::env::var_os(RUN_ENV).is_some_and(|v| !v.is_empty());
    // Claude Code tells its hooks whether someone is at its terminal (`1` interactive, `0`
    // under -p, as probed with 2.1.332): an interactive session needs no look at /proc, which
    // every PreToolUse of a tool that is not read-only would otherwise pay.
    if !said && std::env::var_os(ATTENDED_ENV).is_some_and(|v| v == "1") {
        return None;
    }
    match claude_args() {
        Some(args) if said || args.iter().any(|a| a == "-p" || a == "--print") => {
            Some(allowed_tools(&args))
        }
        _ => said.then(Vec::new),
    }
}

/// The command line of the `claude` process a few levels above this hook (a hook runs under
/// a shell), if one is found.
fn claude_args() -> Option<Vec<String>> {
    // The process Claude Code names, when it is one of ours and `claude`: one read.
    let named = std::env::var(PID_ENV)
        .ok()
        .and_then(|p| p.parse::<i32>().ok())
        .filter(|p| *p > 1);
    if let Some(args) = named.and_then(claude_cmdline) {
        return Some(args);
    }
    // SAFETY: getppid has no preconditions.
    let mut pid = unsafe { libc::getppid() };
    for _ in 0..ANCESTORS {
        if pid <= 1 {
            return None;
        }
        if let Some(args) = claude_cmdline(pid) {
            return Some(args);
        }
        pid = parent_of(pid)?;
    }
    None
}

/// Process `pid`'s command line, if it is Claude Code's.
fn claude_cmdline(pid: i32) -> Option<Vec<String>> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let claude = args.iter().take(2).any(|a| {
        let base = a.rsplit(|b| *b == b'/').next().unwrap_or(a);
        base.starts_with(b"claude") || a.ends_with(b"claude-code/cli.js")
    });
    claude.then(|| {
        args.iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    })
}

/// The bare tool names `--allowedTools`/`--allowed-tools` list (space- or comma-separated,
/// in one argument or several, or after `=`).
fn allowed_tools(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut taking = false;
    for a in args {
        let value = if let Some(v) = a
            .strip_prefix("--allowedTools=")
            .or_else(|| a.strip_prefix("--allowed-tools="))
        {
            taking = false;
            v
        } else if a == "--allowedTools" || a == "--allowed-tools" {
            taking = true;
            continue;
        } else if taking && !a.starts_with('-') {
            a.as_str()
        } else {
            taking = false;
            continue;
        };
        out.extend(
            value
                .split([',', ' '])
                .filter(|t| !t.is_empty() && !t.contains('('))
                .map(str::to_string),
        );
    }
    out
}

/// The parent of `pid`, from `/proc/<pid>/stat` (the field after the command's `)`).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Tools Claude Code runs without asking in every mode but `bypassPermissions` never asks.
const READ_ONLY: &[&str] = &[
    "Read",
    "Glob",
    "Grep",
    "LS",
    "NotebookRead",
    "TodoWrite",
    "Task",
];
/// What `acceptEdits` runs without asking as well.
const EDITS: &[&str] = &["Edit", "MultiEdit", "Write", "NotebookEdit"];

/// Whether a headless run's call is asked about at PreToolUse. It errs on asking: a call the
/// person's own allow rules would have run is still asked (the hook cannot read those rules
/// as Claude Code does), never the other way round.
fn asks_headless(tool: &str, mode: Option<&str>) -> bool {
    match mode {
        Some("bypassPermissions") => false,
        Some("acceptEdits") => !READ_ONLY.contains(&tool) && !EDITS.contains(&tool),
        _ => !READ_ONLY.contains(&tool),
    }
}

/// DECISIONS 39: the answer that parks a headless run at PreToolUse: Claude Code ends the
/// `-p` run with `stop_reason: "tool_deferred"`, the tool not run; `claude -p --resume`
/// re-fires the same call's PreToolUse.
pub fn render_defer() -> String {
    json!({ "hookSpecificOutput": { "hookEventName": "PreToolUse", "permissionDecision": "defer" } })
        .to_string()
}

/// A PermissionRequest answer in PreToolUse's shape, for a prompt asked at PreToolUse: allow
/// with its `updatedInput`, deny with its message as the reason; a deny that interrupts also
/// stops Claude (`continue: false`).
pub fn at_pre_tool_use(out: &str) -> String {
    let Ok(v) = serde_json::from_str::<Value>(out) else {
        return out.to_string();
    };
    let d = &v["hookSpecificOutput"]["decision"];
    let mut h = json!({ "hookEventName": "PreToolUse" });
    let mut top = serde_json::Map::new();
    match d["behavior"].as_str() {
        Some("allow") => {
            h["permissionDecision"] = json!("allow");
            if let Some(i) = d.get("updatedInput") {
                h["updatedInput"] = i.clone();
            }
        }
        Some("deny") => {
            let reason = d["message"].as_str().unwrap_or_default();
            h["permissionDecision"] = json!("deny");
            h["permissionDecisionReason"] = json!(reason);
            if d["interrupt"] == json!(true) {
                top.insert("continue".into(), json!(false));
                top.insert("stopReason".into(), json!(reason));
            }
        }
        // Not a PermissionRequest decision: printed as it is.
        _ => return out.to_string(),
    }
    top.insert("hookSpecificOutput".into(), h);
    Value::Object(top).to_string()
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
    transcript_turn(path).1
}

/// DECISIONS 40: the turn's prompt and final text: `last_assistant_message` (else the
/// transcript's), and the person's prompt from the same one read of the transcript's tail.
pub fn turn_texts(stdin: &[u8]) -> (Option<String>, Option<String>) {
    #[derive(Deserialize)]
    struct Stop {
        transcript_path: Option<String>,
        last_assistant_message: Option<String>,
    }
    let Ok(s) = serde_json::from_slice::<Stop>(stdin) else {
        return (None, None);
    };
    let (user, text) = s
        .transcript_path
        .map(|p| transcript_turn(std::path::Path::new(&p)))
        .unwrap_or_default();
    let said = s.last_assistant_message.filter(|m| !m.trim().is_empty());
    (user, said.or(text))
}

/// The person's prompt that began the last turn of a Claude Code transcript and the turn's
/// last assistant text, from the tail as [`transcript_reply`] reads it.
fn transcript_turn(path: &std::path::Path) -> (Option<String>, Option<String>) {
    transcript_tail(path)
        .map(|t| turn_in_tail(&t))
        .unwrap_or_default()
}

fn transcript_tail(path: &std::path::Path) -> Option<String> {
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
    let mut text = String::from_utf8_lossy(&buf).into_owned();
    if start > 0 {
        // The first line was cut by the seek.
        text = text.split_once('\n').map(|(_, rest)| rest.to_string())?;
    }
    Some(text)
}

fn turn_in_tail(text: &str) -> (Option<String>, Option<String>) {
    let mut reply = None;
    for line in text.lines().rev() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let content = &v["message"]["content"];
        match v["type"].as_str() {
            // The person's prompt (tool results are user entries with a list): the turn began.
            Some("user") if content.is_string() => {
                return (content.as_str().map(str::to_string), reply)
            }
            Some("assistant") if reply.is_none() => {
                let texts: Vec<&str> = content
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|b| b["type"] == "text")
                    .filter_map(|b| b["text"].as_str())
                    .filter(|t| !t.trim().is_empty())
                    .collect();
                if !texts.is_empty() {
                    reply = Some(texts.join("\n"));
                }
            }
            _ => {}
        }
    }
    (None, reply)
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
        // DECISIONS 40: the prompt that began the turn, from the same read.
        assert_eq!(
            turn_texts(stdin.to_string().as_bytes()),
            (Some("hi".into()), Some("From the payload.".into()))
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

    /// DECISIONS 39: an answer to a prompt asked at PreToolUse in PreToolUse's own shape.
    #[test]
    fn permission_answers_in_pre_tool_use_shape() {
        let allow = render_permission(Decision::Allow, "");
        assert_eq!(
            at_pre_tool_use(&allow),
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}"#
        );
        let deny = render_cancel_permission("Stopped.");
        assert_eq!(
            at_pre_tool_use(&deny),
            r#"{"continue":false,"stopReason":"Stopped.","hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"Stopped."}}"#
        );
        let edited = json!({ "hookSpecificOutput": { "hookEventName": "PermissionRequest",
            "decision": { "behavior": "allow", "updatedInput": { "command": "ls" } } } })
        .to_string();
        assert_eq!(
            at_pre_tool_use(&edited),
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","updatedInput":{"command":"ls"}}}"#
        );
        assert!(asks_headless("Bash", Some("default")));
        assert!(!asks_headless("Read", Some("default")));
        assert!(asks_headless("Edit", None));
        assert!(!asks_headless("Edit", Some("acceptEdits")));
        assert!(!asks_headless("Bash", Some("bypassPermissions")));
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            allowed_tools(&args(&[
                "claude",
                "-p",
                "hi",
                "--allowedTools",
                "Bash",
                "Edit,Write",
                "--verbose"
            ])),
            ["Bash", "Edit", "Write"]
        );
        assert_eq!(
            allowed_tools(&args(&[
                "claude",
                "--allowed-tools=Bash(git:*) Read",
                "-p",
                "x"
            ])),
            ["Read"]
        );
    }
}
