//! Issue 2's must-show list: the real binaries, run as Claude Code runs them, against a real
//! receiver on loopback, with a real SQLite queue.
mod common;
use common::env::*;
use serde_json::json;
use std::time::Duration;

const ALLOW: &str = r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}"#;

#[test]
fn allow_reaches_the_waiting_hook() {
    let mut env = Env::new();
    env.start_sync();
    let hook = env.spawn_hook("sp-permission", &payload(CC_PERMISSION));
    let needed = env
        .wait_event("attention.needed", json!({"attention_id": CC_PERMISSION_ID}), Duration::from_secs(5))
        .expect("attention.needed reaches the receiver");
    assert_eq!(needed["data"]["kind"], "permission");
    assert_eq!(needed["data"]["tool"], "Bash");
    assert_eq!(needed["data"]["message"], "Bash echo hi > out.txt");
    // session.started comes first for the session.
    let started = env.events_of("session.started");
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["session"]["seq"], 0);
    assert_eq!(started[0]["session"]["id"], CC_SESSION);
    let msg = env.receiver.enqueue(
        &format!("claude-code:{CC_SESSION}"),
        json!({"kind": "permission.answer", "for": CC_PERMISSION_ID, "decision": "allow"}),
    );
    let out = finish(hook, Duration::from_secs(10));
    assert!(out.status.success());
    assert_eq!(stdout(&out).trim_end(), ALLOW);
    assert_eq!(stdout(&out), format!("{ALLOW}\n"));
    assert!(out.stderr.is_empty());
    let ack = env.receiver.wait_ack(msg["id"].as_str().unwrap(), Duration::from_secs(5)).expect("ack");
    assert_eq!(ack["outcome"], "delivered");
    let cleared = env
        .wait_event("attention.cleared", json!({"attention_id": CC_PERMISSION_ID}), Duration::from_secs(5))
        .expect("attention.cleared");
    assert_eq!(cleared["data"]["how"], "answered");
}
