//! Issue 3: every harness of the contract, through the real binaries, against a real receiver
//! on loopback (and, for OpenCode, a local stand-in for its server API).
//!
//! - `every_registered_event_of_every_harness`: each event `Harness::hook_events` registers,
//!   with a realistic payload, into the binary it is registered to: exact stdout, exit 0, and
//!   what reached the receiver.
//! - `permission_allow_deny_and_no_answer`: allow, deny with note, and no answer each print
//!   that harness's exact shape (Codex's validated against its 0.171 output schema, read from
//!   the pinned Codex CLI in e2e/node_modules: tests/common/needs.rs when it is missing).
//! - `prompt_blocks_only_when_queued`: every harness that takes a prompt at turn end.
//! - `opencode_*`: prompt, cancel and permission reply through the server API, and failures.
//! - `every_kind_for_every_harness`: docs/harnesses.md's table, one row per kind × harness.
//! - `silent_permission_paths_answer_each_harness_own_way`: bad config, no sink, a paused sink
//!   print each harness's "silence" answer (Cursor's `ask`, nothing elsewhere).
mod common;
use common::env::*;
use serde_json::{json, Value};
use spctl::harness::{minted_attention_id, Harness};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Payloads: our fixtures in tests/fixtures/hook-payloads (Claude Code, Codex Stop), otherwise
// built from the cited documentation (docs/harness-contracts.md and the sources it names).

const CODEX_STOP: &str = "codex/stop.json";
const CODEX_SESSION: &str = "0196f2a4-7c1e-7d35-b8a0-5e2c94f1d6b7";
const CODEX_TURN: &str = "0196f2a4-7d02-7a91-9c3e-1f8b6d40e2a5";

/// The session id each harness's payloads below use.
fn session_of(h: &str) -> &'static str {
    match h {
        "claude-code" => CC_SESSION,
        "codex" => CODEX_SESSION,
        "cursor" => "b7c2a9e4-3f1d-4e8a-9c6b-2d5f8a1e7c30",
        "copilot-cli" => "4d3c2b1a-0f9e-4d8c-b7a6-5e4f3a2b1c0d",
        "kiro" => "kiro-0f3a9b2c",
        "droid" => "5b2f7c60-9287-31f9-f0aa-9f6501a0e5c5",
        "gemini-cli" => "8f14e45f-ceea-467a-9e3b-8f8b4ad2c9d1",
        "opencode" => "ses_3a1f9c2be0ffe1MZq3kX7bYw2d",
        other => panic!("no session for {other}"),
    }
}

fn key(h: &str) -> String {
    format!("{h}:{}", session_of(h))
}

const CWD: &str = "/tmp/sp-harness-ws";

fn codex_base(event: &str) -> Value {
    json!({"session_id": CODEX_SESSION, "turn_id": CODEX_TURN, "transcript_path": null, "cwd": CWD,
           "hook_event_name": event, "model": "gpt-5.1-codex", "permission_mode": "default"})
}

fn merge(mut base: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().unwrap() {
        base[k] = v.clone();
    }
    base
}

/// A realistic payload of `event` for harness `h`.
fn event_payload(h: &str, event: &str) -> Value {
    let sid = session_of(h);
    match (h, event) {
        ("claude-code", "PermissionRequest") => payload(CC_PERMISSION),
        ("claude-code", "Stop") => payload(CC_STOP),
        ("claude-code", e) => {
            let mut p = payload(CC_STOP);
            p["hook_event_name"] = json!(e);
            match e {
                "SessionStart" => p["source"] = json!("startup"),
                "SessionEnd" => p["reason"] = json!("prompt_input_exit"),
                "UserPromptSubmit" => p["prompt"] = json!("run the tests"),
                _ => {
                    p["tool_name"] = json!("Bash");
                    p["tool_input"] = json!({"command": "ls"});
                    p["tool_use_id"] = json!("toolu_01");
                    p["tool_response"] = json!({});
                }
            }
            p
        }
        ("codex", "Stop") => payload(CODEX_STOP),
        ("codex", "PermissionRequest") => merge(
            codex_base(event),
            json!({"tool_name": "Bash", "tool_input": {"command": "git push origin main", "description": "Push the release branch"}}),
        ),
        ("codex", "SessionStart") => {
            json!({"session_id": CODEX_SESSION, "transcript_path": null, "cwd": CWD,
            "hook_event_name": "SessionStart", "model": "gpt-5.1-codex", "permission_mode": "default", "source": "startup"})
        }
        ("codex", "SessionEnd") => {
            json!({"session_id": CODEX_SESSION, "transcript_path": null, "cwd": CWD,
            "hook_event_name": "SessionEnd", "reason": "other"})
        }
        ("codex", "UserPromptSubmit") => {
            merge(codex_base(event), json!({"prompt": "run the tests"}))
        }
        ("codex", "PreToolUse") => merge(
            codex_base(event),
            json!({"tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "exec-6f1c"}),
        ),
        ("codex", "PostToolUse") => merge(
            codex_base(event),
            json!({"tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_response": "a\nb", "tool_use_id": "exec-6f1c"}),
        ),
        ("cursor", e) => {
            let base = json!({"hook_event_name": e, "conversation_id": sid, "generation_id": "gen-71c2",
                              "model": "claude-4.5-sonnet", "cursor_version": "3.1.2", "workspace_roots": [CWD],
                              "user_email": "me@example.com"});
            let extra = match e {
                "beforeShellExecution" => json!({"command": "npm publish", "cwd": CWD}),
                "afterShellExecution" => {
                    json!({"command": "npm publish", "output": "ok", "cwd": CWD})
                }
                "beforeMCPExecution" => {
                    json!({"tool_name": "linear_create_issue", "tool_input": "{\"title\":\"Bug\"}", "command": "npx linear-mcp"})
                }
                "afterMCPExecution" => {
                    json!({"tool_name": "linear_create_issue", "tool_input": "{\"title\":\"Bug\"}", "result_json": "{}"})
                }
                "stop" => json!({"status": "completed", "loop_count": 0}),
                "beforeSubmitPrompt" => json!({"prompt": "run the tests", "attachments": []}),
                _ => json!({}),
            };
            merge(base, extra)
        }
        ("copilot-cli", e) => {
            let base = json!({"sessionId": sid, "timestamp": 1760000000123u64, "cwd": CWD});
            let extra = match e {
                // 1.0.102 names this event (`hookName`); its preToolUse has the same fields.
                "permissionRequest" => {
                    json!({"hookName": "permissionRequest", "toolName": "bash", "toolArgs": "{\"command\":\"rm -rf dist\",\"description\":\"Clean build directory\"}"})
                }
                "agentStop" => {
                    json!({"transcriptPath": "/home/me/.copilot/session-state/t.jsonl", "stopReason": "end_turn"})
                }
                "sessionStart" => json!({"source": "new", "initialPrompt": "fix the build"}),
                "sessionEnd" => json!({"reason": "user_exit"}),
                "userPromptSubmitted" => json!({"prompt": "run the tests"}),
                // As 1.0.102 sends it: no event name, `toolArgs` an object.
                "preToolUse" => json!({"toolName": "bash", "toolArgs": {"command": "ls"}}),
                "postToolUse" => {
                    json!({"toolName": "bash", "toolArgs": {"command": "ls"}, "toolResult": {"resultType": "success", "textResultForLlm": "a"}})
                }
                "postToolUseFailure" => {
                    json!({"toolName": "bash", "toolArgs": {"command": "false"}, "error": "exit 1"})
                }
                other => panic!("no copilot payload for {other}"),
            };
            merge(base, extra)
        }
        ("kiro", e) => {
            let mut p = json!({"hook_event_name": e, "session_id": sid, "cwd": CWD});
            if e == "PostToolUse" {
                p["tool_name"] = json!("shell");
                p["tool_input"] = json!({"command": "ls"});
                p["tool_response"] = json!({"success": true});
            }
            if e == "UserPromptSubmit" {
                p["prompt"] = json!("run the tests");
            }
            p
        }
        ("droid", e) => {
            // Factory's reference: camelCase common fields, snake_case tool fields.
            let base = json!({"sessionId": sid, "transcriptPath": "/home/me/.factory/sessions/t.jsonl", "cwd": CWD,
                              "permissionMode": "auto-low", "hookEventName": e});
            let extra = match e {
                "PreToolUse" => {
                    json!({"tool_name": "Execute", "tool_input": {"command": "git push --force", "riskLevel": "high"}})
                }
                "PostToolUse" => {
                    json!({"tool_name": "Execute", "tool_input": {"command": "ls"}, "tool_response": {"output": "a"}})
                }
                "Stop" => json!({"stopHookActive": false}),
                "SessionStart" => json!({"source": "startup"}),
                "SessionEnd" => json!({"reason": "exit"}),
                "UserPromptSubmit" => json!({"prompt": "run the tests"}),
                other => panic!("no droid payload for {other}"),
            };
            merge(base, extra)
        }
        ("gemini-cli", e) => {
            let base = json!({"session_id": sid, "transcript_path": "/home/me/.gemini/tmp/chats/t.json", "cwd": CWD,
                              "hook_event_name": e, "timestamp": "2026-10-02T09:14:07.512Z"});
            let extra = match e {
                "Notification" => {
                    json!({"notification_type": "ToolPermission", "message": "Allow shell command: rm -rf build?",
                                         "details": {"type": "exec", "title": "Confirm Shell Command", "command": "rm -rf build", "rootCommand": "rm"}})
                }
                "AfterAgent" => {
                    json!({"prompt": "fix it", "prompt_response": "Done.", "stop_hook_active": false})
                }
                "SessionStart" => json!({"source": "startup"}),
                "SessionEnd" => json!({"reason": "exit"}),
                "BeforeAgent" => json!({"prompt": "run the tests"}),
                "BeforeTool" => {
                    json!({"tool_name": "run_shell_command", "tool_input": {"command": "ls", "description": "List files"}})
                }
                "AfterTool" => {
                    json!({"tool_name": "run_shell_command", "tool_input": {"command": "ls"}, "tool_response": {"llmContent": "a"}})
                }
                other => panic!("no gemini payload for {other}"),
            };
            merge(base, extra)
        }
        ("opencode", e) => opencode_event(e, json!({}), "http://127.0.0.1:9"),
        (h, e) => panic!("no payload for {h} {e}"),
    }
}

/// What our OpenCode plugin sends for bus event `e` (see hooks/opencode/sessionpipe.js).
fn opencode_event(e: &str, props: Value, server: &str) -> Value {
    let sid = session_of("opencode");
    let props = match e {
        "session.created" | "session.deleted" => {
            json!({"info": {"id": sid, "directory": CWD, "title": "New session"}})
        }
        "session.status" => merge(json!({"sessionID": sid, "status": {"type": "busy"}}), props),
        "permission.asked" => merge(
            json!({"id": "per_9c1d2e3f4a5b", "sessionID": sid, "permission": "bash", "patterns": ["git push origin main"],
                   "metadata": {}, "always": ["git push *"], "tool": {"messageID": "msg_1", "callID": "call_1"}}),
            props,
        ),
        "permission.replied" => merge(
            json!({"sessionID": sid, "requestID": "per_9c1d2e3f4a5b", "reply": "once"}),
            props,
        ),
        _ => merge(json!({"sessionID": sid}), props),
    };
    json!({"hook_event_name": e, "session_id": sid, "cwd": CWD, "server_url": format!("{server}/"), "properties": props})
}

// ---------------------------------------------------------------------------------------------
// Expected answers, byte for byte.

fn allow_shape(h: &str) -> &'static str {
    match h {
        "claude-code" | "codex" => {
            r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}"#
        }
        "cursor" => r#"{"permission":"allow"}"#,
        "copilot-cli" => r#"{"behavior":"allow"}"#,
        "droid" => {
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}"#
        }
        other => panic!("{other} cannot answer"),
    }
}

fn deny_shape(h: &str, note: &str) -> String {
    let n = serde_json::to_string(note).unwrap();
    match h {
        "claude-code" | "codex" => format!(
            r#"{{"hookSpecificOutput":{{"hookEventName":"PermissionRequest","decision":{{"behavior":"deny","message":{n}}}}}}}"#
        ),
        "cursor" => format!(r#"{{"permission":"deny","user_message":{n},"agent_message":{n}}}"#),
        "copilot-cli" => format!(r#"{{"behavior":"deny","message":{n}}}"#),
        "droid" => format!(
            r#"{{"hookSpecificOutput":{{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":{n}}}}}"#
        ),
        other => panic!("{other} cannot answer"),
    }
}

/// What a permission hook prints when no answer came.
fn no_answer_shape(h: &str) -> &'static str {
    match h {
        "cursor" => "{\"permission\":\"ask\"}\n",
        _ => "",
    }
}

fn block_shape(h: &str, reason: &str) -> String {
    let r = serde_json::to_string(reason).unwrap();
    match h {
        "cursor" => format!(r#"{{"followup_message":{r}}}"#),
        _ => format!(r#"{{"decision":"block","reason":{r}}}"#),
    }
}

/// (event, attention_id) of the harness's permission prompt.
fn permission_event(h: &str) -> (&'static str, String) {
    match h {
        "claude-code" => ("PermissionRequest", CC_PERMISSION_ID.into()),
        "codex" => (
            "PermissionRequest",
            minted_attention_id(
                CODEX_TURN,
                "Bash",
                &json!({"command": "git push origin main", "description": "Push the release branch"}),
            ),
        ),
        "cursor" => (
            "beforeShellExecution",
            minted_attention_id("gen-71c2", "Shell", &json!({"command": "npm publish"})),
        ),
        "copilot-cli" => (
            "permissionRequest",
            minted_attention_id(
                "1760000000123",
                "bash",
                &json!({"command": "rm -rf dist", "description": "Clean build directory"}),
            ),
        ),
        "droid" => (
            "PreToolUse",
            minted_attention_id(
                "",
                "Execute",
                &json!({"command": "git push --force", "riskLevel": "high"}),
            ),
        ),
        other => panic!("{other} has no waiting permission hook"),
    }
}

fn stop_event(h: &str) -> &'static str {
    match h {
        "claude-code" | "codex" | "droid" => "Stop",
        "cursor" => "stop",
        "copilot-cli" => "agentStop",
        "gemini-cli" => "AfterAgent",
        other => panic!("{other} has no blocking turn end"),
    }
}

fn start_event(h: &str) -> &'static str {
    match h {
        "cursor" | "copilot-cli" => "sessionStart",
        "opencode" => "session.created",
        _ => "SessionStart",
    }
}

const ANSWERING: &[&str] = &["claude-code", "codex", "cursor", "copilot-cli", "droid"];
const BLOCKING: &[&str] = &[
    "claude-code",
    "codex",
    "cursor",
    "copilot-cli",
    "droid",
    "gemini-cli",
];

// ---------------------------------------------------------------------------------------------
// Codex's own schemas (draft-07, additionalProperties:false everywhere).

/// The pinned Codex CLI's version: the schemas below are its own.
const CODEX_VERSION: &str = "0.171.0";

/// The native binary of the pinned Codex CLI that scripts/e2e-deps.sh installs into
/// e2e/node_modules (`@openai/codex-<platform>`), if it is there.
fn pinned_codex_binary() -> Option<std::path::PathBuf> {
    let scope =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../e2e/node_modules/@openai");
    let mut found = None;
    for pkg in std::fs::read_dir(&scope).ok()?.flatten() {
        if !pkg.file_name().to_string_lossy().starts_with("codex-") {
            continue;
        }
        for triple in std::fs::read_dir(pkg.path().join("vendor"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let bin = triple.path().join("bin/codex");
            if bin.is_file() {
                let meta: Value = serde_json::from_slice(
                    &std::fs::read(pkg.path().join("package.json")).unwrap(),
                )
                .unwrap();
                let version = meta["version"].as_str().unwrap_or_default();
                assert!(
                    version.starts_with(&format!("{CODEX_VERSION}-")),
                    "{} is Codex {version}, not the pinned {CODEX_VERSION}: run scripts/e2e-deps.sh",
                    pkg.path().display()
                );
                found = Some(bin);
            }
        }
    }
    found
}

/// Codex's hook schemas (`permission-request.command.output`, …), read from the pinned Codex
/// binary itself: it carries each one as a JSON text (draft-07, titled with its name), which
/// is what Codex validates a hook's input and output against. Nothing of them is kept in
/// this repository. None, after tests/common/needs.rs's rule, when Codex is not installed.
fn codex_schemas() -> Option<&'static std::collections::BTreeMap<String, Value>> {
    static SCHEMAS: std::sync::OnceLock<Option<std::collections::BTreeMap<String, Value>>> =
        std::sync::OnceLock::new();
    let schemas = SCHEMAS.get_or_init(|| {
        let bin = pinned_codex_binary()?;
        let bytes = std::fs::read(&bin).unwrap();
        let mut all = std::collections::BTreeMap::new();
        let start = b"{\n  \"$schema\": \"http://json-schema.org/draft-07/schema#\"";
        for at in memchr::memmem::find_iter(&bytes, start) {
            let mut one = serde_json::Deserializer::from_slice(&bytes[at..]).into_iter::<Value>();
            let Some(Ok(schema)) = one.next() else {
                continue;
            };
            if let Some(title) = schema["title"].as_str() {
                if title.ends_with(".command.input") || title.ends_with(".command.output") {
                    all.insert(title.to_string(), schema);
                }
            }
        }
        // The events we register, both ways (SessionEnd has no output schema).
        for name in [
            "permission-request",
            "pre-tool-use",
            "post-tool-use",
            "stop",
        ] {
            for way in ["input", "output"] {
                assert!(
                    all.contains_key(&format!("{name}.command.{way}")),
                    "no {name}.command.{way} schema in {} (found {:?})",
                    bin.display(),
                    all.keys()
                );
            }
        }
        Some(all)
    });
    let tool = format!(
        "the pinned Codex CLI {CODEX_VERSION} in e2e/node_modules, whose hook schemas this checks (scripts/e2e-deps.sh)"
    );
    if common::needs::needs(&tool, schemas.is_some()) {
        schemas.as_ref()
    } else {
        None
    }
}

/// One of Codex's own hook schemas; None when Codex is not installed (see `codex_schemas`).
fn codex_schema(name: &str) -> Option<Value> {
    let all = codex_schemas()?;
    Some(
        all.get(name)
            .unwrap_or_else(|| panic!("no {name} in the Codex schemas"))
            .clone(),
    )
}

/// Codex schema errors of `v`; None when Codex's schemas are not here.
fn codex_errors(name: &str, v: &Value) -> Option<Vec<String>> {
    let schema = codex_schema(name)?;
    let validator = jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{name}: {e}"));
    Some(
        validator
            .iter_errors(v)
            .map(|e| format!("{}: {e}", e.instance_path))
            .collect(),
    )
}

fn assert_codex_valid(name: &str, v: &Value) {
    let Some(errs) = codex_errors(name, v) else {
        return;
    };
    assert!(
        errs.is_empty(),
        "not valid under Codex {name}: {errs:?}\n{v}"
    );
}

/// Codex's schema name for a hook event, e.g. `PermissionRequest` → `permission-request`.
fn codex_schema_name(event: &str) -> String {
    let mut out = String::new();
    for (i, c) in event.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Helpers.

/// An Env with sp-sync running and the person away for good (`control.away: "always"`), so
/// every answering harness's permission hook waits for the remote answer these tests send.
fn env_with(mut control: Value) -> Env {
    control["away"] = json!("always");
    let mut env = Env::with(Default::default(), control);
    env.start_sync();
    env
}

/// The Stop that ends the turn a block started (the harness's loop guard set).
fn stop_again(h: &str, stop: &Value) -> Value {
    let mut again = stop.clone();
    for k in ["stop_hook_active", "stopHookActive"] {
        if again.get(k).is_some() {
            again[k] = json!(true);
        }
    }
    if h == "cursor" {
        again["loop_count"] = json!(1);
    }
    again
}

fn ack_of(env: &Env, id: &str) -> Value {
    env.receiver
        .wait_ack(id, Duration::from_secs(45))
        .unwrap_or_else(|| panic!("no ack for {id}\n{}", env.log()))
}

/// Like `finish`, but a hook that hangs fails the test with the log of what happened.
fn finish_hook(env: &Env, mut hook: std::process::Child, d: Duration) -> std::process::Output {
    if wait_timeout(&mut hook, d).is_none() {
        let _ = hook.kill();
        panic!("hook did not finish within {d:?}\n{}", env.log());
    }
    hook.wait_with_output().unwrap()
}

fn run_ok(env: &Env, h: &str, bin: &str, p: &Value) -> String {
    let out = env.hook_as(h, bin, p.to_string().as_bytes());
    assert!(out.status.success(), "{h} {bin} exit {:?}", out.status);
    assert!(
        out.stderr.is_empty(),
        "{h} {bin} wrote stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout(&out)
}

/// Ends the harness's session through its own end event (Kiro has none).
fn end_session(env: &Env, h: &str, server: &str) {
    let p = match h {
        "kiro" => return,
        "opencode" => opencode_event("session.deleted", json!({}), server),
        "cursor" | "copilot-cli" => event_payload(h, "sessionEnd"),
        _ => event_payload(h, "SessionEnd"),
    };
    assert_eq!(run_ok(env, h, "sp-event", &p), "", "{h} end prints nothing");
}

/// Makes the harness's session live, so sp-sync polls for it.
fn make_live(env: &Env, h: &str) {
    let p = event_payload(h, start_event(h));
    assert_eq!(
        run_ok(env, h, "sp-event", &p),
        "",
        "{h} start prints nothing"
    );
    assert!(
        until(Duration::from_secs(5), || env.query::<i64>(&format!(
            "select count(*) from sessions where key='{}' and ended_at is null",
            key(h)
        ))[0]
            == 1),
        "{h} session is live"
    );
}

fn stored(env: &Env, id: &str) {
    assert!(
        until(Duration::from_secs(45), || env.query::<i64>(&format!(
            "select count(*) from messages where id='{id}'"
        ))[0]
            == 1),
        "sp-sync stored {id}\n{}",
        env.log()
    );
}

/// Waits until the newest event about `attention` is its attention.needed. Tests ask the same
/// prompt again (one attention id) after its earlier round was cleared, so an older
/// attention.needed must not count: an answer enqueued before the new hook asked is rightly
/// acked `expired` and never reaches it.
/// Waits for an event matching `pred` among those the receiver took after the first `since`
/// (a count taken before the action that causes it), so that an earlier round's event about
/// the same attention never stands in for this one. Returns its position and the event.
fn wait_after(
    env: &Env,
    since: usize,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Option<(usize, Value)> {
    let deadline = Instant::now() + timeout;
    loop {
        let found = env
            .receiver
            .events()
            .into_iter()
            .enumerate()
            .skip(since)
            .find(|(_, e)| pred(e));
        if found.is_some() || Instant::now() >= deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The attention.needed the hook started after `since` sent (the same attention id comes back
/// each round, and the previous round's cleared may still be on its way).
fn wait_needed(env: &Env, h: &str, attention: &str, since: usize) -> (usize, Value) {
    wait_after(env, since, Duration::from_secs(45), |e| {
        e["type"] == "attention.needed"
            && e["harness"]["name"] == h
            && e["data"]["attention_id"] == attention
    })
    .unwrap_or_else(|| {
        panic!(
            "{h}: attention.needed {attention} reached the receiver\n{}",
            env.log()
        )
    })
}

fn one_reason(text: &str) -> String {
    format!("Message from the person, sent through sessionpipe (sink \"phone\"):\n\n{text}")
}

// ---------------------------------------------------------------------------------------------
// 1. Every registered event of every harness.

#[test]
fn every_registered_event_of_every_harness() {
    // Short waits: a permission hook that gets no answer ends after 1 s.
    let env = env_with(json!({"permission_wait_s": 1}));
    for h in Harness::ALL {
        let name = h.name();
        let mut events: Vec<(&str, &str)> = h.hook_events().to_vec();
        // The session's start first and its end last; the rest in table order.
        events.sort_by_key(|(e, _)| {
            if *e == start_event(name) {
                0
            } else if e.to_lowercase().contains("end") || *e == "session.deleted" {
                2
            } else {
                1
            }
        });
        for (event, bin) in &events {
            let p = event_payload(name, event);
            if name == "codex" {
                assert_codex_valid(&format!("{}.command.input", codex_schema_name(event)), &p);
            }
            let started = Instant::now();
            let out = run_ok(&env, name, bin, &p);
            let (expect, attention) = match (*bin, name) {
                ("sp-permission", "gemini-cli") => ("", None),
                // Asks only in a headless run (DECISIONS 39); here a sign of life.
                ("sp-permission", "claude-code") if *event == "PreToolUse" => ("", None),
                ("sp-permission", "cursor") if *event == "beforeMCPExecution" => (
                    no_answer_shape(name),
                    Some(minted_attention_id(
                        "gen-71c2",
                        "linear_create_issue",
                        &json!({"title": "Bug"}),
                    )),
                ),
                ("sp-permission", _) => (no_answer_shape(name), Some(permission_event(name).1)),
                _ => ("", None),
            };
            assert_eq!(out, expect, "{name} {event}: stdout");
            if name == "codex" && !out.is_empty() {
                let v: Value = serde_json::from_str(out.trim()).unwrap();
                assert_codex_valid(&format!("{}.command.output", codex_schema_name(event)), &v);
            }
            if let Some(a) = attention {
                // It waited for an answer, announced the prompt, and cleared it on timeout.
                assert!(
                    started.elapsed() >= Duration::from_millis(900),
                    "{name} {event} waited"
                );
                // The hook has ended (cleared already): any attention.needed of it counts.
                let needed = env
                    .receiver
                    .wait_event(Duration::from_secs(45), |e| {
                        e["type"] == "attention.needed"
                            && e["harness"]["name"] == name
                            && e["data"]["attention_id"] == a.as_str()
                    })
                    .expect("attention.needed");
                assert_eq!(needed["harness"]["event"], *event);
                let cleared = env
                    .receiver
                    .wait_event(Duration::from_secs(45), |e| {
                        e["type"] == "attention.cleared" && e["data"]["attention_id"] == a.as_str()
                    })
                    .expect("attention.cleared");
                assert_eq!(cleared["data"]["how"], "timeout", "{name}");
            }
            if name == "gemini-cli" && *event == "Notification" {
                // No answer channel: announced, never waited for (a wait that ran out logs
                // "no answer within"; timing it would fail on a loaded machine, this cannot).
                let log = env.log();
                assert!(
                    log.lines()
                        .any(|l| l.contains("claude-code:") && l.contains("no answer within")),
                    "the log names a wait that ran out (Claude Code's, earlier)\n{log}"
                );
                assert!(
                    !log.lines()
                        .any(|l| l.contains("gemini-cli:") && l.contains("no answer within")),
                    "gemini Notification did not wait\n{log}"
                );
                let needed = env
                    .receiver
                    .wait_event(Duration::from_secs(45), |e| {
                        e["type"] == "attention.needed" && e["harness"]["name"] == name
                    })
                    .expect("gemini attention.needed");
                assert_eq!(needed["data"]["tool"], "rm");
                // What would run, from `details` (Gemini's own message names no command).
                assert_eq!(
                    needed["data"]["message"],
                    "Confirm Shell Command: rm -rf build"
                );
            }
            if name == "opencode" && *event == "permission.asked" {
                let (_, needed) = wait_needed(&env, name, "per_9c1d2e3f4a5b", 0);
                assert_eq!(needed["data"]["tool"], "bash");
                assert_eq!(needed["data"]["message"], "bash git push origin main");
            }
        }
        // Exactly one session.started, from the first event, with the harness's name and id.
        let started = env
            .receiver
            .wait_event(Duration::from_secs(45), |e| {
                e["type"] == "session.started" && e["harness"]["name"] == name
            })
            .unwrap_or_else(|| panic!("{name}: session.started\n{}", env.log()));
        assert_eq!(started["session"]["id"], session_of(name));
        assert_eq!(started["harness"]["event"], start_event(name));
        assert_eq!(started["session"]["seq"], 0);
        // The last event ended the session (Kiro has no end event: its Stop keeps it live).
        let ended: Vec<Option<String>> = env.query(&format!(
            "select ended_at from sessions where key='{}'",
            key(name)
        ));
        assert_eq!(ended.len(), 1, "{name} has one session row");
        assert_eq!(
            ended[0].is_some(),
            name != "kiro",
            "{name} ended: {ended:?}"
        );
    }
    std::thread::sleep(Duration::from_millis(300));
    for h in Harness::ALL {
        let n = env
            .receiver
            .events()
            .iter()
            .filter(|e| e["type"] == "session.started" && e["harness"]["name"] == h.name())
            .count();
        assert_eq!(n, 1, "{}: one session.started", h.name());
    }
}

#[test]
fn broken_input_never_breaks_any_host() {
    let env = Env::new();
    for h in Harness::ALL {
        for (event, bin) in h.hook_events() {
            for stdin in [
                &b""[..],
                b"not json",
                b"[1,2]",
                b"{\"hook_event_name\":\"Stop\"}",
                &[0xff, 0xfe, 0x00],
            ] {
                let out = env.hook_as(h.name(), bin, stdin);
                assert!(out.status.success(), "{} {event}", h.name());
                // Cursor reads a permission hook's silence as "run": it gets its own "ask".
                let expect = match (h.name(), *bin) {
                    ("cursor", "sp-permission") => "{\"permission\":\"ask\"}\n",
                    _ => "",
                };
                assert_eq!(stdout(&out), expect, "{} {event}", h.name());
                assert!(out.stderr.is_empty(), "{} {event}", h.name());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Permission: allow, deny with note, no answer.

#[test]
fn permission_allow_deny_and_no_answer() {
    let env = env_with(json!({"permission_wait_s": 60}));
    for h in ANSWERING {
        make_live(&env, h);
        let (event, attention) = permission_event(h);
        let p = event_payload(h, event);
        for (decision, note) in [
            ("allow", None),
            ("deny", Some("Not on main, please.")),
            ("deny", None),
        ] {
            let since = env.receiver.events().len();
            let hook = env.spawn_hook_as(h, "sp-permission", &p);
            let (needed_at, _) = wait_needed(&env, h, &attention, since);
            let mut m =
                json!({"kind": "permission.answer", "for": attention, "decision": decision});
            if let Some(n) = note {
                m["note"] = json!(n);
            }
            let msg = env.receiver.enqueue(&key(h), m);
            let out = finish_hook(&env, hook, Duration::from_secs(70));
            assert!(out.status.success() && out.stderr.is_empty());
            let expect = match (decision, note) {
                ("allow", _) => allow_shape(h).to_string(),
                (_, Some(n)) => deny_shape(h, n),
                _ => deny_shape(
                    h,
                    "Denied by the person through sessionpipe (sink \"phone\").",
                ),
            };
            assert_eq!(
                stdout(&out),
                format!("{expect}\n"),
                "{h} {decision} {note:?}\n{}",
                env.log()
            );
            if *h == "codex" {
                let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
                assert_codex_valid("permission-request.command.output", &v);
            }
            let ack = ack_of(&env, msg["id"].as_str().unwrap());
            assert_eq!(ack["outcome"], "delivered", "{h}");
            assert_eq!(ack["detail"], format!("{h} {event} hook"));
            // This round's cleared: one of an earlier round must not pass for it.
            let cleared = wait_after(&env, needed_at + 1, Duration::from_secs(45), |e| {
                e["type"] == "attention.cleared" && e["data"]["attention_id"] == attention.as_str()
            })
            .unwrap_or_else(|| panic!("{h}: attention.cleared\n{}", env.log()))
            .1;
            assert_eq!(cleared["data"]["how"], "answered", "{h}");
        }
        end_session(&env, h, "");
    }
    // Nothing but an answer for exactly this attention and session allows: an answer for
    // another attention is `failed` and the hook keeps waiting, then falls back.
    let short = env_with(json!({"permission_wait_s": 2}));
    for h in ANSWERING {
        make_live(&short, h);
        let (event, attention) = permission_event(h);
        let since = short.receiver.events().len();
        let hook = short.spawn_hook_as(h, "sp-permission", &event_payload(h, event));
        wait_needed(&short, h, &attention, since);
        let wrong = short.receiver.enqueue(&key(h), json!({"kind": "permission.answer", "for": "perm-0000000000000000", "decision": "allow"}));
        let out = finish_hook(&short, hook, Duration::from_secs(10));
        assert_eq!(stdout(&out), no_answer_shape(h), "{h}: no answer");
        let ack = ack_of(&short, wrong["id"].as_str().unwrap());
        assert_eq!(ack["outcome"], "failed");
        assert_eq!(ack["detail"], "unknown attention");
        end_session(&short, h, "");
    }
}

/// The reference keeps its own copy of Codex's hook schemas: the same as the pinned binary's.
#[test]
fn peer_codex_schemas_are_the_pinned_clis() {
    let Some(dir) = common::fixtures::peer_or_skip("its copy of Codex's hook schemas") else {
        return;
    };
    let Some(ours) = codex_schemas() else {
        return;
    };
    let theirs = common::schema::load_json(&dir.join("schemas/codex-hooks.0.171.0.json"));
    let theirs = theirs.as_object().expect("a map of schemas");
    assert_eq!(
        theirs.keys().collect::<std::collections::BTreeSet<_>>(),
        ours.keys().collect::<std::collections::BTreeSet<_>>()
    );
    for (name, schema) in theirs {
        assert_eq!(schema, &ours[name], "{name}");
    }
}

#[test]
fn codex_outputs_are_exactly_its_schema() {
    // Every answer we print for Codex validates; the Claude superset it must never get does not.
    if codex_schemas().is_none() {
        return;
    }
    // And every payload we feed our hooks as Codex is valid Codex input.
    for h in Harness::ALL.iter().filter(|h| h.name() == "codex") {
        for (event, _) in h.hook_events() {
            assert_codex_valid(
                &format!("{}.command.input", codex_schema_name(event)),
                &event_payload("codex", event),
            );
        }
    }
    assert_codex_valid(
        "permission-request.command.output",
        &serde_json::from_str(allow_shape("codex")).unwrap(),
    );
    assert_codex_valid(
        "permission-request.command.output",
        &serde_json::from_str(&deny_shape("codex", "Not on main")).unwrap(),
    );
    assert_codex_valid(
        "stop.command.output",
        &serde_json::from_str(&block_shape("codex", "go on")).unwrap(),
    );
    let superset = json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
        "decision": {"behavior": "allow", "updatedPermissions": []}}, "extra": 1});
    assert!(
        !codex_errors("permission-request.command.output", &superset)
            .unwrap()
            .is_empty()
    );
    let stop_extra = json!({"decision": "block", "reason": "x", "hookSpecificOutput": {"hookEventName": "Stop"}});
    assert!(!codex_errors("stop.command.output", &stop_extra)
        .unwrap()
        .is_empty());
}

// ---------------------------------------------------------------------------------------------
// 3. Prompts at turn end: a block only when a message is queued.

#[test]
fn prompt_blocks_only_when_queued() {
    let env = env_with(json!({}));
    for h in BLOCKING {
        make_live(&env, h);
        let stop = event_payload(h, stop_event(h));
        let bin = "sp-stop";
        // Nothing queued: nothing printed, the turn ends.
        assert_eq!(run_ok(&env, h, bin, &stop), "", "{h}: nothing queued");
        let m = env.receiver.enqueue(
            &key(h),
            json!({"kind": "prompt", "text": "please also update the changelog"}),
        );
        let id = m["id"].as_str().unwrap().to_string();
        stored(&env, &id);
        let out = run_ok(&env, h, bin, &stop);
        assert_eq!(
            out,
            format!(
                "{}\n",
                block_shape(h, &one_reason("please also update the changelog"))
            ),
            "{h}"
        );
        if *h == "codex" {
            assert_codex_valid(
                "stop.command.output",
                &serde_json::from_str(out.trim()).unwrap(),
            );
        }
        // The turn the block started ends again with nothing queued: no block, so no loop,
        // whatever the harness's own guard (Copilot has none).
        let again = stop_again(h, &stop);
        assert_eq!(run_ok(&env, h, bin, &again), "", "{h}: no loop");
        // The final ack: at once, or (a harness that reports the turn's text) at the end
        // of the turn the prompt started, with that text (DECISIONS 38).
        let ack = ack_of(&env, &id);
        assert_eq!(ack["outcome"], "delivered");
        assert_eq!(ack["mode"], "turn");
        assert_eq!(ack["detail"], format!("{h} {} hook", stop_event(h)));
        if ["claude-code", "codex"].contains(h) {
            assert_eq!(ack["reply"], again["last_assistant_message"], "{h}");
        } else {
            assert!(ack.get("reply").is_none(), "{h}: {ack}");
        }
        end_session(&env, h, "");
    }
    // Cursor: a stop after the person aborted the turn keeps the prompt for the next turn end.
    make_live(&env, "cursor");
    let m = env
        .receiver
        .enqueue(&key("cursor"), json!({"kind": "prompt", "text": "later"}));
    let id = m["id"].as_str().unwrap().to_string();
    stored(&env, &id);
    let mut aborted = event_payload("cursor", "stop");
    aborted["status"] = json!("aborted");
    assert_eq!(run_ok(&env, "cursor", "sp-stop", &aborted), "");
    assert_eq!(
        env.query::<String>(&format!("select state from messages where id='{id}'")),
        vec!["queued"]
    );
    assert_eq!(
        run_ok(&env, "cursor", "sp-stop", &event_payload("cursor", "stop")),
        format!("{}\n", block_shape("cursor", &one_reason("later")))
    );
}

// ---------------------------------------------------------------------------------------------
// 4. OpenCode through a local stand-in for its server API.

#[derive(Clone, Debug)]
struct Seen {
    method: String,
    url: String,
    body: String,
    auth: Option<String>,
}

/// A stand-in for `opencode serve`: records every request and answers as OpenCode does
/// (204 for prompt_async, `true` for abort and permission reply), or with `fail` when set.
struct OpenCode {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    fail: Arc<Mutex<Option<(u16, String)>>>,
}

impl OpenCode {
    fn start() -> OpenCode {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let url = format!(
            "http://127.0.0.1:{}",
            server.server_addr().to_ip().unwrap().port()
        );
        let seen = Arc::new(Mutex::new(Vec::new()));
        let fail: Arc<Mutex<Option<(u16, String)>>> = Arc::new(Mutex::new(None));
        let (s, f) = (Arc::clone(&seen), Arc::clone(&fail));
        std::thread::spawn(move || {
            for mut req in server.incoming_requests() {
                let mut body = String::new();
                let _ = req.as_reader().read_to_string(&mut body);
                let auth = req
                    .headers()
                    .iter()
                    .find(|h| h.field.equiv("authorization"))
                    .map(|h| h.value.to_string());
                s.lock().unwrap().push(Seen {
                    method: req.method().to_string(),
                    url: req.url().to_string(),
                    body,
                    auth,
                });
                let json =
                    tiny_http::Header::from_bytes("content-type", "application/json").unwrap();
                let resp = match f.lock().unwrap().clone() {
                    Some((status, text)) => tiny_http::Response::from_string(text)
                        .with_status_code(status)
                        .with_header(json),
                    None if req.url().contains("/prompt_async") => {
                        tiny_http::Response::from_string("").with_status_code(204)
                    }
                    // The session's messages, as OpenCode 1.x lists them: the last turn's
                    // answer is the assistant's text after the last user message.
                    None if req.url().contains("/message") => {
                        tiny_http::Response::from_string(OPENCODE_MESSAGES).with_header(json)
                    }
                    None => tiny_http::Response::from_string("true").with_header(json),
                };
                let _ = req.respond(resp);
            }
        });
        OpenCode { url, seen, fail }
    }

    fn wait_request(&self, path: &str) -> Seen {
        let end = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(s) = self
                .seen
                .lock()
                .unwrap()
                .iter()
                .find(|s| s.url.contains(path))
            {
                return s.clone();
            }
            assert!(
                Instant::now() < end,
                "no request to {path}; saw {:?}",
                self.seen.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn count(&self, path: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.url.contains(path))
            .count()
    }
}

/// What the stand-in answers to `GET /session/:id/message`.
const OPENCODE_MESSAGES: &str = r#"[
 {"info": {"role": "user"}, "parts": [{"type": "text", "text": "earlier"}]},
 {"info": {"role": "assistant"}, "parts": [{"type": "text", "text": "Not this."}]},
 {"info": {"role": "user"}, "parts": [{"type": "text", "text": "the prompt"}]},
 {"info": {"role": "assistant"}, "parts": [{"type": "reasoning", "text": "thinking"},
   {"type": "tool", "tool": "edit"}, {"type": "text", "text": "Changelog updated."}]},
 {"info": {"role": "assistant"}, "parts": [{"type": "text",
   "text": "Token ghp_R8x2Kq7Vb3Zm9Lp4Wt6Yc1Nd5Hf0Js2Ag8Ek kept out."}]}
]"#;

fn opencode_live(env: &Env, server: &OpenCode) {
    let out = run_ok(
        env,
        "opencode",
        "sp-event",
        &opencode_event("session.created", json!({}), &server.url),
    );
    assert_eq!(out, "");
}

const DIR_QUERY: &str = "?directory=%2Ftmp%2Fsp-harness-ws";

#[test]
fn opencode_prompt_cancel_and_permission_reply_through_its_api() {
    let env = env_with(json!({}));
    let oc = OpenCode::start();
    opencode_live(&env, &oc);
    let sid = session_of("opencode");
    // Prompt: the session is idle (just created), so it goes at once.
    let m = env.receiver.enqueue(
        &key("opencode"),
        json!({"kind": "prompt", "text": "please also update the changelog"}),
    );
    let req = oc.wait_request("/prompt_async");
    assert_eq!(req.method, "POST");
    assert_eq!(req.url, format!("/session/{sid}/prompt_async{DIR_QUERY}"));
    let body: Value = serde_json::from_str(&req.body).unwrap();
    assert_eq!(
        body,
        json!({"parts": [{"type": "text", "text": one_reason("please also update the changelog")}]})
    );
    assert!(req.auth.is_none());
    // It is busy now: the next prompt waits for idle.
    let m2 = env.receiver.enqueue(
        &key("opencode"),
        json!({"kind": "prompt", "text": "and the docs"}),
    );
    stored(&env, m2["id"].as_str().unwrap());
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(oc.count("/prompt_async"), 1, "no prompt while busy");
    // DECISIONS 38: the first is `taken`; its final ack waits for its turn's end (the idle).
    let acks = env.acks_for(m["id"].as_str().unwrap());
    assert!(
        !acks.is_empty() && acks.iter().all(|a| a["outcome"] == "taken"),
        "{acks:#?}"
    );
    let idle = opencode_event("session.idle", json!({}), &oc.url);
    assert_eq!(run_ok(&env, "opencode", "sp-event", &idle), "");
    let ack = ack_of(&env, m["id"].as_str().unwrap());
    assert_eq!(ack["outcome"], "delivered", "{}", env.log());
    assert_eq!(ack["detail"], "opencode POST /session/:id/prompt_async");
    assert_eq!(ack["mode"], "api");
    // Its reply: the assistant's text after the last user message, redacted.
    let reply = ack["reply"].as_str().unwrap();
    assert!(
        reply.starts_with("Changelog updated.\n\nToken ")
            && reply.ends_with(" kept out.")
            && !reply.contains("ghp_"),
        "{reply:?}"
    );
    let msgs = oc.wait_request("/message");
    assert_eq!(
        (msgs.method.as_str(), msgs.url),
        ("GET", format!("/session/{sid}/message{DIR_QUERY}&limit=20"))
    );
    // The second went in at that idle; its turn ends at the next one (after the abort).
    let end = Instant::now() + Duration::from_secs(15);
    while oc.count("/prompt_async") < 2 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(oc.count("/prompt_async"), 2);
    let acks = env.acks_for(m2["id"].as_str().unwrap());
    assert!(acks.iter().all(|a| a["outcome"] == "taken"), "{acks:#?}");
    // Cancel: POST /session/:id/abort.
    let c = env
        .receiver
        .enqueue(&key("opencode"), json!({"kind": "cancel"}));
    let ack = ack_of(&env, c["id"].as_str().unwrap());
    assert_eq!(ack["outcome"], "delivered");
    assert_eq!(ack["detail"], "opencode POST /session/:id/abort");
    let req = oc.wait_request("/abort");
    assert_eq!(req.url, format!("/session/{sid}/abort{DIR_QUERY}"));
    // The idle that follows an abort ends the turn `interrupt`; the idle before it, with a
    // prompt queued (delivered at once), ended none.
    let turn_ends = || {
        env.query::<String>(
            "select json_extract(data, '$.reason') from events where type='turn.ended' order by rowid",
        )
    };
    assert!(turn_ends().is_empty());
    let idle = opencode_event("session.idle", json!({}), &oc.url);
    assert_eq!(run_ok(&env, "opencode", "sp-event", &idle), "");
    assert_eq!(turn_ends(), ["interrupt"]);
    let ack = ack_of(&env, m2["id"].as_str().unwrap());
    assert_eq!(
        (&ack["outcome"], &ack["mode"]),
        (&json!("delivered"), &json!("api"))
    );
    // Permission: the plugin reports permission.asked; an allow replies `once`.
    let asked = opencode_event("permission.asked", json!({}), &oc.url);
    assert_eq!(run_ok(&env, "opencode", "sp-event", &asked), "");
    wait_needed(&env, "opencode", "per_9c1d2e3f4a5b", 0);
    let a = env.receiver.enqueue(
        &key("opencode"),
        json!({"kind": "permission.answer", "for": "per_9c1d2e3f4a5b", "decision": "allow"}),
    );
    let ack = ack_of(&env, a["id"].as_str().unwrap());
    assert_eq!(ack["outcome"], "delivered");
    assert_eq!(ack["detail"], "opencode POST /permission/:id/reply");
    let req = oc.wait_request("/permission/per_9c1d2e3f4a5b/reply");
    assert_eq!(
        serde_json::from_str::<Value>(&req.body).unwrap(),
        json!({"reply": "once"})
    );
    let cleared = env
        .receiver
        .wait_event(Duration::from_secs(45), |e| {
            e["type"] == "attention.cleared" && e["data"]["attention_id"] == "per_9c1d2e3f4a5b"
        })
        .unwrap();
    assert_eq!(cleared["data"]["how"], "answered");
    // OpenCode then says it was replied: no second cleared event.
    let replied = opencode_event("permission.replied", json!({}), &oc.url);
    assert_eq!(run_ok(&env, "opencode", "sp-event", &replied), "");
    // A deny with a note replies `reject` with the note; never `always`.
    let asked = opencode_event("permission.asked", json!({"id": "per_2"}), &oc.url);
    assert_eq!(run_ok(&env, "opencode", "sp-event", &asked), "");
    wait_needed(&env, "opencode", "per_2", 0);
    let d = env.receiver.enqueue(
        &key("opencode"),
        json!({"kind": "permission.answer", "for": "per_2", "decision": "deny", "note": "Not on main, please."}),
    );
    assert_eq!(
        ack_of(&env, d["id"].as_str().unwrap())["outcome"],
        "delivered"
    );
    let req = oc.wait_request("/permission/per_2/reply");
    assert_eq!(
        serde_json::from_str::<Value>(&req.body).unwrap(),
        json!({"reply": "reject", "message": "Not on main, please."})
    );
    assert!(oc
        .seen
        .lock()
        .unwrap()
        .iter()
        .all(|s| !s.body.contains("always")));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        env.events_of("attention.cleared")
            .iter()
            .filter(|e| e["data"]["attention_id"] == "per_9c1d2e3f4a5b")
            .count(),
        1
    );
}

#[test]
fn opencode_failing_api_acks_failed_with_the_detail() {
    let env = env_with(json!({}));
    let oc = OpenCode::start();
    opencode_live(&env, &oc);
    // Past the server's warm-up on the machine's clock, not by waiting it out.
    env.advance_clock(Duration::from_secs(3));
    *oc.fail.lock().unwrap() = Some((
        500,
        r#"{"name":"UnknownError","data":{"message":"session is locked"}}"#.into(),
    ));
    let p = env
        .receiver
        .enqueue(&key("opencode"), json!({"kind": "prompt", "text": "hello"}));
    let ack = ack_of(&env, p["id"].as_str().unwrap());
    assert_eq!(ack["outcome"], "failed");
    let detail = ack["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("OpenCode answered 500 to POST /session/"),
        "{detail}"
    );
    assert!(detail.contains("session is locked"), "{detail}");
    let c = env
        .receiver
        .enqueue(&key("opencode"), json!({"kind": "cancel"}));
    let ack = ack_of(&env, c["id"].as_str().unwrap());
    assert_eq!(ack["outcome"], "failed");
    assert!(ack["detail"]
        .as_str()
        .unwrap()
        .contains("session is locked"));
    // abort answering `false` is not a success either.
    *oc.fail.lock().unwrap() = Some((200, "false".into()));
    let c = env
        .receiver
        .enqueue(&key("opencode"), json!({"kind": "cancel"}));
    let ack = ack_of(&env, c["id"].as_str().unwrap());
    assert_eq!(ack["outcome"], "failed");
    assert_eq!(
        ack["detail"],
        format!(
            "OpenCode answered false to POST /session/{}/abort",
            session_of("opencode")
        )
    );
    // A failed permission reply leaves the prompt open in OpenCode: ack failed, not cleared.
    *oc.fail.lock().unwrap() = Some((404, r#"{"name":"NotFoundError"}"#.into()));
    assert_eq!(
        run_ok(
            &env,
            "opencode",
            "sp-event",
            &opencode_event("permission.asked", json!({}), &oc.url)
        ),
        ""
    );
    wait_needed(&env, "opencode", "per_9c1d2e3f4a5b", 0);
    let a = env.receiver.enqueue(
        &key("opencode"),
        json!({"kind": "permission.answer", "for": "per_9c1d2e3f4a5b", "decision": "allow"}),
    );
    let ack = ack_of(&env, a["id"].as_str().unwrap());
    assert_eq!(ack["outcome"], "failed");
    assert!(ack["detail"].as_str().unwrap().contains("404"));
    assert_eq!(
        env.query::<String>("select state from attention where attention_id='per_9c1d2e3f4a5b'"),
        vec!["open"]
    );
    // A server that is gone (nothing listens on port 9): the transport error is the detail.
    let moved = opencode_event(
        "session.status",
        json!({"status": {"type": "idle"}}),
        "http://127.0.0.1:9",
    );
    assert_eq!(run_ok(&env, "opencode", "sp-event", &moved), "");
    std::thread::sleep(Duration::from_millis(2600)); // the new URL's warm-up
    let c = env
        .receiver
        .enqueue(&key("opencode"), json!({"kind": "cancel"}));
    let ack = ack_of(&env, c["id"].as_str().unwrap());
    assert_eq!(ack["outcome"], "failed");
    assert!(
        ack["detail"]
            .as_str()
            .unwrap()
            .starts_with("OpenCode at http://127.0.0.1:9:"),
        "{ack}"
    );
}

/// DECISIONS 30 on OpenCode: a prompt a session grant matches is answered through the server
/// API without announcing it. The hook hands the reply to sp-sync through the store (no hook
/// links an HTTP client); when the server does not take it, the prompt is announced as usual.
#[test]
fn opencode_grant_answers_through_sp_sync_and_asks_when_the_server_refuses() {
    let env = env_with(json!({}));
    let oc = OpenCode::start();
    opencode_live(&env, &oc);
    let asked = opencode_event("permission.asked", json!({}), &oc.url);
    assert_eq!(run_ok(&env, "opencode", "sp-event", &asked), "");
    wait_needed(&env, "opencode", "per_9c1d2e3f4a5b", 0);
    let a = env.receiver.enqueue(
        &key("opencode"),
        json!({"kind": "permission.answer", "for": "per_9c1d2e3f4a5b", "decision": "allow", "scope": "session"}),
    );
    assert_eq!(
        ack_of(&env, a["id"].as_str().unwrap())["outcome"],
        "delivered"
    );
    oc.wait_request("/permission/per_9c1d2e3f4a5b/reply");
    assert_eq!(env.query::<i64>("select count(*) from grants"), [1]);
    // The same call asked again: sp-sync replies `once` from the grant; nothing is announced.
    let again = opencode_event("permission.asked", json!({"id": "per_3"}), &oc.url);
    assert_eq!(run_ok(&env, "opencode", "sp-event", &again), "");
    let req = oc.wait_request("/permission/per_3/reply");
    assert_eq!(
        serde_json::from_str::<Value>(&req.body).unwrap(),
        json!({"reply": "once"})
    );
    assert!(
        until(Duration::from_secs(15), || env
            .query::<i64>("select used from grants")
            == [1]),
        "the grant counts its use\n{}",
        env.log()
    );
    assert_eq!(
        env.query::<i64>("select count(*) from api_grant_replies"),
        [0]
    );
    // The server refuses the next one: the person is asked as usual.
    *oc.fail.lock().unwrap() = Some((500, r#"{"name":"UnknownError"}"#.into()));
    let third = opencode_event("permission.asked", json!({"id": "per_4"}), &oc.url);
    assert_eq!(run_ok(&env, "opencode", "sp-event", &third), "");
    wait_needed(&env, "opencode", "per_4", 0);
    oc.wait_request("/permission/per_4/reply");
    assert_eq!(env.query::<i64>("select used from grants"), [1]);
    let announced = env.query::<String>(
        "select json_extract(data, '$.attention_id') from events where type='attention.needed' order by rowid",
    );
    assert_eq!(
        announced,
        ["per_9c1d2e3f4a5b", "per_4"],
        "per_3 was never announced"
    );
    assert!(env.log().contains("asking as usual"), "{}", env.log());
}

#[test]
fn opencode_plugin_reports_to_sp_event() {
    // The checked-in plugin (hooks/opencode/), run by node, forwards bus events to the real
    // sp-event. Its `const SP_EVENT = …;` is pointed at the binary under test.
    let node = which("node");
    if !common::needs::needs(
        "node to run the OpenCode plugin (scripts/test-deps.sh installs it)",
        node.is_ok(),
    ) {
        return;
    }
    let node = node.unwrap();
    let env = Env::new();
    let plugin = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../hooks/opencode/sessionpipe.js"
    ))
    .unwrap();
    let at = plugin
        .find("const SP_EVENT = ")
        .expect("the plugin names its sp-event");
    let end = at + plugin[at..].find('\n').unwrap();
    let sp_event = serde_json::to_string(&bin("sp-event").to_string_lossy()).unwrap();
    let plugin = format!(
        "{}const SP_EVENT = {sp_event};{}",
        &plugin[..at],
        &plugin[end..]
    );
    let dir = env.dir.path().join("plugin");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("sessionpipe.mjs"), plugin).unwrap();
    let sid = session_of("opencode");
    let script = format!(
        r#"
const plugins = Object.values(await import("./sessionpipe.mjs")).filter((f) => typeof f === "function")
if (plugins.length !== 1) throw new Error("the plugin module exports " + plugins.length + " functions")
const hooks = await plugins[0]({{ directory: "{CWD}", worktree: "{CWD}", serverUrl: new URL("http://127.0.0.1:4096") }})
const events = [
  {{ type: "session.created", properties: {{ info: {{ id: "{sid}", directory: "{CWD}" }} }} }},
  {{ type: "session.status", properties: {{ sessionID: "{sid}", status: {{ type: "busy" }} }} }},
  {{ type: "message.part.updated", properties: {{ part: {{ sessionID: "{sid}" }} }} }},
  {{ type: "permission.asked", properties: {{ id: "per_1", sessionID: "{sid}", permission: "edit", patterns: ["src/main.rs"], metadata: {{}}, always: [] }} }},
  {{ type: "session.idle", properties: {{ sessionID: "{sid}" }} }},
]
for (const event of events) await hooks.event({{ event }})
"#
    );
    std::fs::write(dir.join("run.mjs"), script).unwrap();
    // node gets the same environment our hooks get from a harness (HOME, config, state dir).
    let hook_env = env.cmd("sp-event");
    let mut cmd = std::process::Command::new(node);
    cmd.env_clear();
    for (k, v) in hook_env.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    cmd.current_dir(&dir).arg("run.mjs");
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "node: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Reports may still drain after node's last await; wait for the store to show them all.
    assert!(
        until(Duration::from_secs(10), || env.query::<Option<i64>>(
            &format!("select api_idle from sessions where key='opencode:{sid}'")
        ) == vec![Some(1)]),
        "reports arrived\n{}",
        env.log()
    );
    assert_eq!(
        env.query::<String>(&format!(
            "select api_url from sessions where key='opencode:{sid}'"
        )),
        vec!["http://127.0.0.1:4096"]
    );
    assert_eq!(
        env.query::<String>("select state from attention where attention_id='per_1'"),
        vec!["open"]
    );
    let msg: Vec<String> = env.query("select message from attention where attention_id='per_1'");
    assert_eq!(msg, vec!["edit src/main.rs"]);
}

fn which(name: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .ok_or(())
}

// ---------------------------------------------------------------------------------------------
// 5. Every kind × harness has a defined outcome (docs/harnesses.md's table).

#[test]
fn every_kind_for_every_harness() {
    let env = env_with(json!({"permission_wait_s": 60}));
    let oc = OpenCode::start();
    let mut table = Vec::new();
    // One harness's session live at a time, so few polls are held open at once.
    for h in Harness::ALL {
        let name = h.name();
        if name == "opencode" {
            opencode_live(&env, &oc);
        } else {
            make_live(&env, name);
        }
        // permission.answer
        let (outcome, detail) = if ANSWERING.contains(&name) {
            let (event, attention) = permission_event(name);
            let since = env.receiver.events().len();
            let hook = env.spawn_hook_as(name, "sp-permission", &event_payload(name, event));
            wait_needed(&env, name, &attention, since);
            let m = env.receiver.enqueue(
                &key(name),
                json!({"kind": "permission.answer", "for": attention, "decision": "allow"}),
            );
            let out = finish_hook(&env, hook, Duration::from_secs(70));
            assert_eq!(stdout(&out), format!("{}\n", allow_shape(name)));
            let a = ack_of(&env, m["id"].as_str().unwrap());
            (a["outcome"].clone(), a["detail"].clone())
        } else if name == "opencode" {
            let since = env.receiver.events().len();
            run_ok(
                &env,
                name,
                "sp-event",
                &opencode_event("permission.asked", json!({}), &oc.url),
            );
            wait_needed(&env, name, "per_9c1d2e3f4a5b", since);
            let m = env.receiver.enqueue(&key(name), json!({"kind": "permission.answer", "for": "per_9c1d2e3f4a5b", "decision": "allow"}));
            let a = ack_of(&env, m["id"].as_str().unwrap());
            (a["outcome"].clone(), a["detail"].clone())
        } else {
            if name == "gemini-cli" {
                run_ok(
                    &env,
                    name,
                    "sp-permission",
                    &event_payload(name, "Notification"),
                );
            }
            let m = env.receiver.enqueue(&key(name), json!({"kind": "permission.answer", "for": "perm-0123456789abcdef", "decision": "allow"}));
            let a = ack_of(&env, m["id"].as_str().unwrap());
            (a["outcome"].clone(), a["detail"].clone())
        };
        table.push((name, "permission.answer", outcome, detail));
        // prompt
        let m = env.receiver.enqueue(
            &key(name),
            json!({"kind": "prompt", "text": "next, the changelog"}),
        );
        let id = m["id"].as_str().unwrap().to_string();
        if BLOCKING.contains(&name) {
            stored(&env, &id);
            let out = run_ok(
                &env,
                name,
                "sp-stop",
                &event_payload(name, stop_event(name)),
            );
            assert_eq!(
                out,
                format!(
                    "{}\n",
                    block_shape(name, &one_reason("next, the changelog"))
                )
            );
            let again = stop_again(name, &event_payload(name, stop_event(name)));
            assert_eq!(run_ok(&env, name, "sp-stop", &again), "", "{name}");
        }
        if name == "opencode" {
            // Its final ack comes at the end of the turn it started (DECISIONS 38).
            oc.wait_request("/prompt_async");
            let idle = opencode_event("session.idle", json!({}), &oc.url);
            assert_eq!(run_ok(&env, name, "sp-event", &idle), "");
        }
        let a = ack_of(&env, &id);
        table.push((name, "prompt", a["outcome"].clone(), a["detail"].clone()));
        // cancel: Claude Code, Codex, Droid and Gemini CLI take it at their next tool
        // boundary, Copilot CLI at its next permission request, the rest at once.
        let m = env.receiver.enqueue(&key(name), json!({"kind": "cancel"}));
        if ["claude-code", "codex", "droid", "gemini-cli"].contains(&name) {
            stored(&env, m["id"].as_str().unwrap());
            let after = if name == "gemini-cli" {
                "AfterTool"
            } else {
                "PostToolUse"
            };
            let out = run_ok(&env, name, "sp-event", &event_payload(name, after));
            assert!(out.starts_with(r#"{"continue":false,"#), "{out}");
            if name == "codex" {
                let v: Value = serde_json::from_str(out.trim()).unwrap();
                assert_codex_valid("post-tool-use.command.output", &v);
            }
        }
        if name == "copilot-cli" {
            // Its stop is a permission deny with interrupt (1.0.102 ignores continue:false).
            stored(&env, m["id"].as_str().unwrap());
            let (event, _) = permission_event(name);
            let out = run_ok(&env, name, "sp-permission", &event_payload(name, event));
            let v: Value = serde_json::from_str(out.trim()).unwrap();
            assert_eq!(
                (&v["behavior"], &v["interrupt"]),
                (&json!("deny"), &json!(true))
            );
        }
        let a = ack_of(&env, m["id"].as_str().unwrap());
        table.push((name, "cancel", a["outcome"].clone(), a["detail"].clone()));
        end_session(&env, name, &oc.url);
    }
    let expect: &[(&str, &str, &str, &str)] = &[
        (
            "claude-code",
            "permission.answer",
            "delivered",
            "claude-code PermissionRequest hook",
        ),
        (
            "claude-code",
            "prompt",
            "delivered",
            "claude-code Stop hook",
        ),
        (
            "claude-code",
            "cancel",
            "delivered",
            "claude-code PostToolUse hook (continue:false)",
        ),
        (
            "codex",
            "permission.answer",
            "delivered",
            "codex PermissionRequest hook",
        ),
        ("codex", "prompt", "delivered", "codex Stop hook"),
        (
            "codex",
            "cancel",
            "delivered",
            "codex PostToolUse hook (continue:false; the turn's later tools are denied)",
        ),
        (
            "cursor",
            "permission.answer",
            "delivered",
            "cursor beforeShellExecution hook",
        ),
        ("cursor", "prompt", "delivered", "cursor stop hook"),
        ("cursor", "cancel", "unsupported", "cursor has no API"),
        (
            "copilot-cli",
            "permission.answer",
            "delivered",
            "copilot-cli permissionRequest hook",
        ),
        (
            "copilot-cli",
            "prompt",
            "delivered",
            "copilot-cli agentStop hook",
        ),
        (
            "copilot-cli",
            "cancel",
            "delivered",
            "copilot-cli permissionRequest hook (deny, interrupt)",
        ),
        (
            "kiro",
            "permission.answer",
            "unsupported",
            "kiro documents no hook answer",
        ),
        (
            "kiro",
            "prompt",
            "unsupported",
            "kiro's Stop hook cannot block",
        ),
        ("kiro", "cancel", "unsupported", "kiro has no API"),
        (
            "droid",
            "permission.answer",
            "delivered",
            "droid PreToolUse hook",
        ),
        ("droid", "prompt", "delivered", "droid Stop hook"),
        (
            "droid",
            "cancel",
            "delivered",
            "droid PostToolUse hook (continue:false)",
        ),
        (
            "gemini-cli",
            "permission.answer",
            "unsupported",
            "gemini-cli has no permission answer channel",
        ),
        (
            "gemini-cli",
            "prompt",
            "delivered",
            "gemini-cli AfterAgent hook",
        ),
        (
            "gemini-cli",
            "cancel",
            "delivered",
            "gemini-cli AfterTool hook (continue:false)",
        ),
        (
            "opencode",
            "permission.answer",
            "delivered",
            "opencode POST /permission/:id/reply",
        ),
        (
            "opencode",
            "prompt",
            "delivered",
            "opencode POST /session/:id/prompt_async",
        ),
        (
            "opencode",
            "cancel",
            "delivered",
            "opencode POST /session/:id/abort",
        ),
    ];
    assert_eq!(table.len(), expect.len());
    for ((h, k, outcome, detail), (eh, ek, eo, ed)) in table.iter().zip(expect) {
        assert_eq!((*h, *k), (*eh, *ek));
        assert_eq!(outcome, eo, "{h} {k}: {detail}");
        assert!(
            detail.as_str().unwrap_or("").starts_with(ed),
            "{h} {k}: {detail} should start with {ed}"
        );
    }
    assert_eq!(oc.count("/prompt_async"), 1);
    assert_eq!(oc.count("/abort"), 1);
    assert_eq!(oc.count("/reply"), 1);
}

// The registration table names real binaries and nothing is registered twice.
#[test]
fn hook_events_table_is_well_formed() {
    for h in Harness::ALL {
        let events = h.hook_events();
        assert!(!events.is_empty(), "{}", h.name());
        let mut names: Vec<&str> = events.iter().map(|(e, _)| *e).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), events.len(), "{}: an event twice", h.name());
        for (e, b) in events {
            assert!(
                ["sp-permission", "sp-stop", "sp-event"].contains(b),
                "{} {e} -> {b}",
                h.name()
            );
        }
        assert_eq!(Harness::parse(h.name()), Some(*h));
    }
}

// ---------------------------------------------------------------------------------------------
// At the desk, nobody waits for us (DECISIONS 27).

/// Runs `sp away WHAT` in the Env and checks it succeeded.
fn sp_away(env: &Env, what: &str) {
    let out = env.cmd("sp").args(["away", what]).output().unwrap();
    assert!(
        out.status.success(),
        "sp away {what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn at_the_desk_only_claude_code_waits_and_away_every_answering_harness_does() {
    let mut env = Env::with(Default::default(), json!({"permission_wait_s": 60}));
    env.start_sync();
    for h in ANSWERING.iter().filter(|h| **h != "claude-code") {
        make_live(&env, h);
        let (event, attention) = permission_event(h);
        let p = event_payload(h, event);
        // At the desk: the hook returns without waiting out its 60 s, with the harness's own
        // no-answer shape (Cursor: ask), so the harness shows its approval at once.
        let out = finish(
            env.spawn_hook_as(h, "sp-permission", &p),
            Duration::from_secs(20),
        );
        assert!(out.status.success());
        assert_eq!(stdout(&out), no_answer_shape(h), "{h} at the desk");
        assert!(
            env.log()
                .contains(&format!("{h}: the person is at the desk")),
            "{h}: {}",
            env.log()
        );

        // Nor is the receiver shown a prompt nobody waits for.
        assert!(
            env.events_of("attention.needed")
                .iter()
                .all(|e| e["data"]["attention_id"] != json!(attention)),
            "{h}"
        );
        // Away: the same prompt waits, and the remote allow is printed.
        sp_away(&env, "on");
        let since = env.receiver.events().len();
        let hook = env.spawn_hook_as(h, "sp-permission", &p);
        wait_needed(&env, h, &attention, since);
        env.receiver.enqueue(
            &key(h),
            json!({"kind": "permission.answer", "for": attention, "decision": "allow"}),
        );
        let out = finish(hook, Duration::from_secs(45));
        assert_eq!(stdout(&out), format!("{}\n", allow_shape(h)), "{h} away");
        sp_away(&env, "off");
    }
    let status = env.cmd("sp").args(["away", "status"]).output().unwrap();
    assert!(
        stdout(&status).starts_with("at the desk (set on this machine"),
        "{}",
        stdout(&status)
    );
}

/// Issue 17: OpenCode does not wait between events, so the plugin's sp-event runs may finish
/// out of order. A busy report that lands after a newer idle one must not leave the session
/// marked busy (a queued prompt would then never be delivered); the plugin's `seq` orders them.
#[test]
fn opencode_reports_that_land_out_of_order_keep_the_newest_state() {
    let env = Env::new();
    let sid = session_of("opencode");
    let report = |event: &str, status: Option<&str>, seq: i64| {
        let mut props = json!({"sessionID": sid});
        if let Some(s) = status {
            props["status"] = json!({"type": s});
        }
        let p = json!({"seq": seq, "hook_event_name": event, "session_id": sid, "cwd": CWD,
                       "server_url": "http://127.0.0.1:4096", "properties": props});
        assert_eq!(run_ok(&env, "opencode", "sp-event", &p), "");
    };
    let idle = || {
        env.query::<Option<i64>>(&format!(
            "select api_idle from sessions where key='opencode:{sid}'"
        ))
    };
    report("session.status", Some("busy"), 1_000_001);
    assert_eq!(idle(), vec![Some(0)]);
    // The turn ends: idle (seq 3) lands before the busy of seq 2 that was sent earlier.
    report("session.idle", None, 1_000_003);
    report("session.status", Some("busy"), 1_000_002);
    assert_eq!(
        idle(),
        vec![Some(1)],
        "a late busy report overwrote a newer idle one"
    );
    let turn_ends = || {
        env.query::<String>(
            "select json_extract(data, '$.reason') from events where type='turn.ended'",
        )
    };
    assert_eq!(turn_ends(), ["stop"], "the idle is the turn's end");
    // An idle report that lands after a newer busy one is no turn's end.
    report("session.status", Some("busy"), 1_000_006);
    report("session.idle", None, 1_000_005);
    assert_eq!(idle(), vec![Some(0)]);
    assert_eq!(turn_ends(), ["stop"]);
    // A newer busy report still counts.
    report("session.status", Some("busy"), 1_000_007);
    assert_eq!(idle(), vec![Some(0)]);
    // Reports without a seq (an older plugin) apply as they come.
    report("session.idle", None, 0);
    assert_eq!(idle(), vec![Some(1)]);
}

/// DECISIONS 25 and 26 on Codex 0.171, every output checked against its own schema: a steer
/// beside the next tool result, an interrupt in place of the next tool, a cancel at the turn's
/// end, and a waiting permission denied for a cancel that then stops it at the next seam.
#[test]
fn codex_steer_interrupt_and_cancel_land_at_its_seams() {
    let env = env_with(json!({"permission_wait_s": 60}));
    make_live(&env, "codex");
    let queue = |m: Value| {
        let id = env.receiver.enqueue(&key("codex"), m)["id"]
            .as_str()
            .unwrap()
            .to_string();
        stored(&env, &id);
        id
    };
    let hook = |event: &str, schema: &str| -> Value {
        let out = run_ok(
            &env,
            "codex",
            if event == "Stop" {
                "sp-stop"
            } else {
                "sp-event"
            },
            &event_payload("codex", event),
        );
        let v: Value =
            serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{event}: {e}: {out:?}"));
        assert_codex_valid(&format!("{schema}.command.output"), &v);
        v
    };
    let steer = queue(json!({"kind": "prompt", "text": "use staging", "mode": "steer"}));
    let v = hook("PostToolUse", "post-tool-use");
    assert_eq!(
        v["hookSpecificOutput"]["additionalContext"],
        one_reason("use staging")
    );
    let interrupt = queue(json!({"kind": "prompt", "text": "not that file", "mode": "interrupt"}));
    let v = hook("PreToolUse", "pre-tool-use");
    assert_eq!(v["hookSpecificOutput"]["permissionDecision"], "deny");
    assert_eq!(
        v["hookSpecificOutput"]["permissionDecisionReason"],
        one_reason("not that file")
    );
    // Their final acks wait for the turn's end (the Stop below, DECISIONS 38).
    assert!(env.receiver.wait_ack(&steer, Duration::ZERO).is_none());

    // A cancel while Codex waits on our permission hook: denied there, stopped at the Stop.
    let (event, attention) = permission_event("codex");
    let since = env.receiver.events().len();
    let waiting = env.spawn_hook_as("codex", "sp-permission", &event_payload("codex", event));
    wait_needed(&env, "codex", &attention, since);
    let cancel = env
        .receiver
        .enqueue(&key("codex"), json!({"kind": "cancel"}))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = finish(waiting, Duration::from_secs(30));
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_codex_valid("permission-request.command.output", &v);
    assert_eq!(v["hookSpecificOutput"]["decision"]["behavior"], "deny");
    assert_eq!(
        env.query::<String>(&format!("select state from messages where id='{cancel}'")),
        vec!["queued"],
        "the denial alone does not stop Codex: the cancel waits for its next seam"
    );
    let v = hook("Stop", "stop");
    assert_eq!(v["continue"], false);
    assert_eq!(
        ack_of(&env, &cancel)["detail"],
        "codex Stop hook (continue:false)"
    );
    // That Stop ended the turn the steer and the interrupt landed in.
    let ack = ack_of(&env, &steer);
    assert_eq!(
        (&ack["detail"], &ack["mode"], &ack["reply"]),
        (
            &json!("codex PostToolUse hook (additionalContext)"),
            &json!("turn"),
            &event_payload("codex", "Stop")["last_assistant_message"]
        )
    );
    assert_eq!(
        ack_of(&env, &interrupt)["detail"],
        "codex PreToolUse hook (deny)"
    );

    // A cancel before a tool: that tool is denied, and so is every later tool of the turn
    // (the real 0.171 goes on after continue:false), until the person's next prompt.
    let cancel = queue(json!({"kind": "cancel"}));
    let v = hook("PreToolUse", "pre-tool-use");
    assert_eq!(v["hookSpecificOutput"]["permissionDecision"], "deny");
    assert_eq!(
        ack_of(&env, &cancel)["detail"],
        "codex PreToolUse hook (tool denied; the turn's later tools are denied too)"
    );
    for _ in 0..2 {
        let v = hook("PreToolUse", "pre-tool-use");
        assert_eq!(v["hookSpecificOutput"]["permissionDecision"], "deny");
        assert!(
            v["hookSpecificOutput"]["permissionDecisionReason"]
                .as_str()
                .unwrap()
                .contains("stopped this session"),
            "{v}"
        );
    }
    let out = run_ok(
        &env,
        "codex",
        "sp-event",
        &event_payload("codex", "UserPromptSubmit"),
    );
    assert_eq!(out.trim(), "", "the next prompt is the person's own");
    let out = run_ok(
        &env,
        "codex",
        "sp-event",
        &event_payload("codex", "PreToolUse"),
    );
    assert_eq!(out.trim(), "", "a new turn's tools run again");
}

/// DECISIONS 25 and 26 on Gemini CLI 0.61.0, in the shapes its bundled code reads (src/harness/
/// gemini_cli.rs): a steer waits past BeforeTool and lands as AfterTool `additionalContext`, an
/// interrupt is a BeforeTool deny with the text as reason, a cancel is `continue:false` before
/// a tool (later tools of the turn denied until the person's next prompt) or at AfterAgent,
/// where it beats a queued prompt, which then waits for the next turn's end.
#[test]
fn gemini_cli_steer_interrupt_and_cancel_land_at_its_seams() {
    let h = "gemini-cli";
    let env = env_with(json!({}));
    make_live(&env, h);
    let queue = |m: Value| {
        let id = env.receiver.enqueue(&key(h), m)["id"]
            .as_str()
            .unwrap()
            .to_string();
        stored(&env, &id);
        id
    };
    let state =
        |id: &str| env.query::<String>(&format!("select state from messages where id='{id}'"));
    let hook = |event: &str| -> Option<Value> {
        let bin = if event == "AfterAgent" {
            "sp-stop"
        } else {
            "sp-event"
        };
        let out = run_ok(&env, h, bin, &event_payload(h, event));
        (!out.is_empty()).then(|| {
            serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{event}: {e}: {out:?}"))
        })
    };

    let steer = queue(json!({"kind": "prompt", "text": "use staging", "mode": "steer"}));
    assert_eq!(
        hook("BeforeTool"),
        None,
        "a steer does not take the tool's place"
    );
    assert_eq!(state(&steer), vec!["queued"]);
    let v = hook("AfterTool").expect("the steer at AfterTool");
    assert_eq!(
        v,
        json!({"hookSpecificOutput": {"hookEventName": "AfterTool", "additionalContext": one_reason("use staging")}})
    );
    assert_eq!(
        ack_of(&env, &steer)["detail"],
        "gemini-cli AfterTool hook (additionalContext)"
    );

    let interrupt = queue(json!({"kind": "prompt", "text": "not that file", "mode": "interrupt"}));
    let v = hook("BeforeTool").expect("the interrupt at BeforeTool");
    assert_eq!(
        v,
        json!({"decision": "deny", "reason": one_reason("not that file")})
    );
    assert_eq!(
        ack_of(&env, &interrupt)["detail"],
        "gemini-cli BeforeTool hook (deny)"
    );

    // A cancel before a tool stops the agent there; a tool of the same turn that still asks
    // (a parallel call) is denied, until the person's next prompt.
    let cancel = queue(json!({"kind": "cancel", "note": "wrong branch"}));
    let v = hook("BeforeTool").expect("the cancel at BeforeTool");
    assert_eq!(v["continue"], false);
    assert!(
        v["stopReason"].as_str().unwrap().contains("wrong branch"),
        "{v}"
    );
    assert_eq!(
        ack_of(&env, &cancel)["detail"],
        "gemini-cli BeforeTool hook (continue:false; the tool did not run)"
    );
    let v = hook("BeforeTool").expect("a later tool of the stopped turn");
    assert_eq!(v["decision"], "deny");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("stopped this session"),
        "{v}"
    );
    assert_eq!(
        hook("BeforeAgent"),
        None,
        "the next prompt is the person's own"
    );
    assert_eq!(hook("BeforeTool"), None, "a new turn's tools run again");
    assert_eq!(hook("AfterTool"), None);

    // At the turn's end a cancel beats a queued prompt, which waits for the next turn's end.
    let prompt = queue(json!({"kind": "prompt", "text": "next, the changelog"}));
    let cancel = queue(json!({"kind": "cancel"}));
    let v = hook("AfterAgent").expect("the cancel at AfterAgent");
    assert_eq!(v["continue"], false);
    assert_eq!(
        ack_of(&env, &cancel)["detail"],
        "gemini-cli AfterAgent hook (continue:false)"
    );
    assert_eq!(state(&prompt), vec!["queued"]);
    let v = hook("AfterAgent").expect("the prompt at the next AfterAgent");
    assert_eq!(
        v,
        json!({"decision": "block", "reason": one_reason("next, the changelog")})
    );
    assert_eq!(
        ack_of(&env, &prompt)["detail"],
        "gemini-cli AfterAgent hook"
    );

    // A cancel queued between turns expires at the person's next prompt.
    let cancel = queue(json!({"kind": "cancel"}));
    assert_eq!(hook("BeforeAgent"), None);
    assert_eq!(ack_of(&env, &cancel)["outcome"], "expired");
    assert_eq!(hook("BeforeTool"), None);
}

/// DECISIONS 25 and 26 on Droid and Copilot CLI, in the shapes their real versions honour
/// (tests/real_agents.rs runs them): a steer beside the next tool result, an interrupt in
/// place of the next tool, a stop at the next seam that can stop each.
#[test]
fn droid_and_copilot_steer_interrupt_and_cancel_land_at_their_seams() {
    let env = env_with(json!({"permission_wait_s": 60}));
    let queue = |name: &str, m: Value| {
        let id = env.receiver.enqueue(&key(name), m)["id"]
            .as_str()
            .unwrap()
            .to_string();
        stored(&env, &id);
        id
    };
    let hook = |name: &str, bin: &str, event: &str| -> Value {
        let out = run_ok(&env, name, bin, &event_payload(name, event));
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{name} {event}: {e}: {out:?}"))
    };
    let detail = |id: &str| ack_of(&env, id)["detail"].clone();

    make_live(&env, "droid");
    let steer = queue(
        "droid",
        json!({"kind": "prompt", "text": "use staging", "mode": "steer"}),
    );
    let v = hook("droid", "sp-event", "PostToolUse");
    assert_eq!(
        v["hookSpecificOutput"]["additionalContext"],
        one_reason("use staging")
    );
    assert_eq!(detail(&steer), "droid PostToolUse hook (additionalContext)");
    let interrupt = queue(
        "droid",
        json!({"kind": "prompt", "text": "not that", "mode": "interrupt"}),
    );
    // Droid's PreToolUse is its permission hook: the interrupt answers before any wait.
    let v = hook("droid", "sp-permission", "PreToolUse");
    assert_eq!(v["hookSpecificOutput"]["permissionDecision"], "deny");
    assert_eq!(
        v["hookSpecificOutput"]["permissionDecisionReason"],
        one_reason("not that")
    );
    assert_eq!(detail(&interrupt), "droid PreToolUse hook (deny)");
    let cancel = queue("droid", json!({"kind": "cancel"}));
    let v = hook("droid", "sp-permission", "PreToolUse");
    assert_eq!(
        (
            &v["continue"],
            &v["hookSpecificOutput"]["permissionDecision"]
        ),
        (&json!(false), &json!("deny"))
    );
    assert_eq!(
        detail(&cancel),
        "droid PreToolUse hook (continue:false, tool denied)"
    );
    // Were Droid to go on, its next tool of the turn is stopped too.
    let v = hook("droid", "sp-permission", "PreToolUse");
    assert_eq!(v["continue"], false);
    end_session(&env, "droid", "");

    make_live(&env, "copilot-cli");
    let steer = queue(
        "copilot-cli",
        json!({"kind": "prompt", "text": "use staging", "mode": "steer"}),
    );
    let v = hook("copilot-cli", "sp-event", "postToolUse");
    assert_eq!(v, json!({"additionalContext": one_reason("use staging")}));
    assert_eq!(
        detail(&steer),
        "copilot-cli postToolUse hook (additionalContext)"
    );
    let interrupt = queue(
        "copilot-cli",
        json!({"kind": "prompt", "text": "not that", "mode": "interrupt"}),
    );
    let v = hook("copilot-cli", "sp-event", "preToolUse");
    assert_eq!(
        v,
        json!({"permissionDecision": "deny", "permissionDecisionReason": one_reason("not that")})
    );
    assert_eq!(detail(&interrupt), "copilot-cli preToolUse hook (deny)");
    // No stop at its tool hooks (1.0.102 ignores continue:false there): the turn's end takes it.
    let cancel = queue("copilot-cli", json!({"kind": "cancel"}));
    let out = run_ok(
        &env,
        "copilot-cli",
        "sp-event",
        &event_payload("copilot-cli", "postToolUse"),
    );
    assert_eq!(out, "", "postToolUse cannot stop Copilot");
    assert_eq!(hook("copilot-cli", "sp-stop", "agentStop"), json!({}));
    assert_eq!(
        detail(&cancel),
        "copilot-cli agentStop hook (no block: the turn ends)"
    );
}

/// Issue 17: on each silent path of a permission hook (bad config, no sink, a paused sink)
/// every harness with one gets exactly its row's "silence" answer (src/harness/caps.rs): the
/// harness's own "ask the person" where its silence means "run" (Cursor), nothing where
/// silence already leaves the decision to the person (its dialog, its approval, its rules).
/// Each run is the real binary on a real permission payload of that harness, and each path is
/// checked to be the one meant (the log's config error; the prompt recorded, so the payload was
/// read as a permission and no answer could come).
#[test]
fn silent_permission_paths_answer_each_harness_own_way() {
    for caps in spctl::harness::caps::CAPS {
        let h = caps.name;
        let events: Vec<&str> = caps
            .hooks
            .iter()
            .filter(|(_, bin)| *bin == spctl::harness::SP_PERMISSION)
            // Claude Code's PreToolUse asks only in a headless run (DECISIONS 39); this one
            // is not, so it is no prompt here.
            .filter(|(e, _)| (h, *e) != ("claude-code", "PreToolUse"))
            .map(|(e, _)| *e)
            .collect();
        if events.is_empty() {
            continue; // Kiro, OpenCode: no permission hook is registered.
        }
        // What each harness does with an empty answer, from its contract
        // (docs/harness-contracts.md), written out here so a wrong row fails.
        let want = match h {
            // Cursor runs the command on silence (failClosed is off by default): ask instead.
            "cursor" => "{\"permission\":\"ask\"}\n",
            // Its dialog (`-p`: deny) / its approval / falls through to its rules and prompt /
            // its normal permission flow / `Notification` only announces.
            "claude-code" | "codex" | "copilot-cli" | "droid" | "gemini-cli" => "",
            other => panic!("{other}: say what its silence means"),
        };
        assert_eq!(
            caps.silence.ask.map_or(String::new(), |a| format!("{a}\n")),
            want,
            "{h}: the table's silence row"
        );
        for event in events.iter().copied() {
            let payload = event_payload(h, event).to_string();
            let run = |env: &Env, why: &str| {
                let out = env.hook_as(h, "sp-permission", payload.as_bytes());
                assert_eq!(out.status.code(), Some(0), "{h} {event} {why}: exit");
                assert_eq!(
                    stdout(&out),
                    want,
                    "{h} {event} {why}: stdout\n{}",
                    env.log()
                );
                assert!(out.stderr.is_empty(), "{h} {why}: stderr");
            };
            let recorded = |env: &Env, why: &str| {
                assert_eq!(
                    env.query::<i64>(&format!(
                        "select count(*) from attention where session_key='{}'",
                        key(h)
                    ))[0],
                    1,
                    "{h} {why}: the prompt was recorded\n{}",
                    env.log()
                );
            };

            let env = Env::new();
            std::fs::write(&env.config, "{ not json").unwrap();
            run(&env, "bad config");
            assert!(env.log().contains("config"), "{h}: {}", env.log());

            // Away for good, so the hook would wait if anything could answer.
            let env = Env::with(Default::default(), json!({"away": "always"}));
            env.write_config(json!({"sinks": [], "control": {"away": "always"}}));
            run(&env, "no sink");
            recorded(&env, "no sink");

            let env = Env::with(
                Default::default(),
                json!({"away": "always", "permission_wait_s": 60}),
            );
            let config = std::fs::read(&env.config).unwrap();
            env.write_config(json!({"sinks": []}));
            env.hook_as(
                h,
                "sp-event",
                event_payload(h, start_event(h)).to_string().as_bytes(),
            );
            std::fs::write(&env.config, config).unwrap();
            env.db()
                .execute("INSERT INTO sinks(name, control_paused) VALUES ('phone', 'HTTP 401') ON CONFLICT(name) DO UPDATE SET control_paused='HTTP 401'", [])
                .unwrap();
            let started = Instant::now();
            run(&env, "paused sink");
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{h}: a paused sink cannot answer, so the hook does not wait"
            );
            recorded(&env, "paused sink");
        }
    }
}
