//! DECISIONS 39 on the page, against the real `sp-receiver` and `sp-sync` in headless
//! Chromium: a headless Claude Code run's prompt nobody answers in the hook's window is
//! parked; the page marks it "Parked" with until when it can be answered, an Allow given
//! after the window reaches the resumed run's hook once, and a prompt of an agent that
//! cannot park says it gives up when its wait ends.
//!
//! Needs chromium, Node.js and playwright-core (`scripts/test-deps.sh`); without them it
//! fails, never passes silently.
mod common;

use common::browser::{missing_browser_deps, Browser};
use common::env::*;
use common::http::post;
use common::receiver::{Machine, SpReceiver, LOGIN, TOKEN};
use serde_json::{json, Value};
use std::time::Duration;

/// A headless run's PreToolUse, as `claude -p` fires it, answered by our permission hook.
fn headless_pre_tool_use(machine: &Machine, stdin: &Value) -> std::process::Output {
    let mut c = machine.cmd("sp-permission");
    c.args(["--harness", "claude-code"])
        .env("SESSIONPIPE_HEADLESS", "1");
    run_with_stdin(c, stdin.to_string().as_bytes())
}

/// Fails unless the hook printed exactly PreToolUse's `decision`.
fn assert_decision(out: &std::process::Output, decision: &str) {
    let want = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "permissionDecision": decision}});
    assert_eq!(
        stdout(out),
        format!("{want}\n"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The outcomes (NULL: not yet final) of the answers to the parked call the machine's
/// sp-sync stored from the receiver.
fn stored_answers(machine: &Machine) -> Vec<Option<String>> {
    let Ok(db) = rusqlite::Connection::open(machine.state.join("control.db")) else {
        return Vec::new();
    };
    let _ = db.busy_timeout(Duration::from_secs(5));
    let Ok(mut st) = db.prepare(
        "select outcome from messages where kind = 'permission.answer' \
         and attention_id like 'toolu_01ParkedOnPage-%'",
    ) else {
        return Vec::new();
    };
    st.query_map([], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .unwrap_or_default()
}

/// A Codex session's prompt, as a machine sends it (Codex cannot park).
fn codex_prompt(receiver: &SpReceiver) {
    let ev = json!({"protocol": 1, "id": "01K7PARKEDPAGECDEX00000001", "type": "attention.needed",
        "time": spctl::clock::format_ms(spctl::clock::now_ms()), "tier": 1,
        "harness": {"name": "codex", "event": "PermissionRequest"},
        "session": {"id": "codex-waits", "seq": 1, "cwd": "~/src/app", "machine": "laptop"},
        "privacy": {"rulesets": ["secrets@1"], "pii": false},
        "data": {"attention_id": "codex-p1", "kind": "permission", "tool": "Bash",
                 "message": "Bash cargo test"}});
    let r = post(
        &format!("{}/api/sessionpipe/v1/events", receiver.url),
        &[("authorization", &format!("Bearer {TOKEN}"))],
        "application/json",
        &json!({"events": [ev]}).to_string(),
    );
    assert_eq!(r.status, 202, "{}", r.text);
}

#[test]
fn a_parked_prompt_is_marked_and_answerable_after_its_window_and_a_non_parking_one_says_it_gives_up(
) {
    if let Some(why) = missing_browser_deps() {
        panic!("the browser test cannot run: {why}");
    }
    let dir = tempfile::tempdir().unwrap();
    let receiver = SpReceiver::start(&dir.path().join("receiver"), &[]);
    // A one-second window, so the run parks at once.
    let machine = Machine::syncing_with(
        dir.path(),
        &receiver,
        json!({"control": {"permission_wait_s": 1}}),
    );

    let mut start = payload(CC_STOP);
    start["hook_event_name"] = json!("SessionStart");
    start["source"] = json!("startup");
    assert!(machine.hook("sp-event", &start).status.success());
    let mut pre = payload(CC_PERMISSION);
    pre["hook_event_name"] = json!("PreToolUse");
    pre["tool_use_id"] = json!("toolu_01ParkedOnPage");
    pre.as_object_mut()
        .unwrap()
        .remove("permission_suggestions");
    // Nobody answers in the window: the run is parked and ends.
    let out = headless_pre_tool_use(&machine, &pre);
    assert_decision(&out, "defer");
    codex_prompt(&receiver);

    let key = format!("claude-code:{CC_SESSION}");
    let card = format!("article[data-session=\"{key}\"]");
    let parked = "[data-attention^=\"toolu_01ParkedOnPage-\"]";
    let codex = "[data-attention=\"codex-p1\"]";
    let mut b = Browser::launch();
    b.call(json!({"op": "goto", "url": format!("{}/", receiver.url)}));
    b.call(json!({"op": "fill", "selector": "#token", "value": LOGIN}));
    b.click("#login-form button[type=submit]");
    // Marked once sp-sync has announced it parked.
    b.wait(&format!("{parked} .att-parked:not([hidden])"));
    assert_eq!(b.text(&format!("{parked} .att-parked")), "Parked");
    let wait = b.text(&format!("{parked} .att-wait"));
    assert!(
        wait.starts_with("The agent stopped to wait for you. Answer any time until ")
            && wait.ends_with("; your answer resumes the run."),
        "{wait}"
    );
    assert!(
        !wait.contains("toolu_") && !wait.contains(CC_SESSION),
        "no ids: {wait}"
    );
    assert_eq!(b.text(&format!("{card} .state")), "parked");
    b.wait(codex);
    assert_eq!(
        b.attr(&format!("{codex} .att-parked"), "hidden"),
        "",
        "a Codex prompt is not marked parked"
    );
    assert_eq!(
        b.text(&format!("{codex} .att-wait")),
        "Answer while the agent waits: it gives up waiting for this answer when its wait ends (this agent cannot park a prompt)."
    );

    // Answered after the window: sp-sync takes the answer for the parked prompt, and the
    // resumed run's hook (fired here as `claude -p --resume` fires it) prints it once.
    b.click(&format!("{parked} button.allow"));
    assert!(
        until(Duration::from_secs(15), || stored_answers(&machine).len()
            == 1),
        "sp-sync stored the answer: {}",
        machine.log()
    );
    let out = headless_pre_tool_use(&machine, &pre);
    assert_decision(&out, "allow");
    assert_eq!(stored_answers(&machine), [Some("delivered".to_owned())]);
    b.gone(parked);
    let out = headless_pre_tool_use(&machine, &pre);
    assert!(!stdout(&out).contains("allow"), "once: {}", stdout(&out));
}
