//! The fixtures' Claude Code session (`CC_SESSION`) as the Stop and marker suites drive it:
//! made live, a message waited for until sp-sync stored it, its turn end seen at the receiver.
#![allow(dead_code)]
use super::env::{payload, until, Env, CC_STOP};
use serde_json::json;
use std::time::Duration;

/// Makes the session live (SessionStart through sp-event) so sp-sync polls for it.
pub fn make_live(env: &Env) {
    let mut start = payload(CC_STOP);
    start["hook_event_name"] = json!("SessionStart");
    start["source"] = json!("startup");
    let out = env.hook_json("sp-event", &start);
    assert!(out.status.success() && out.stdout.is_empty());
}

/// Waits up to `within` until sp-sync stored message `id`.
#[track_caller]
pub fn stored_within(env: &Env, id: &str, within: Duration) {
    assert!(
        until(within, || env.query::<i64>(&format!(
            "select count(*) from messages where id='{id}'"
        ))[0]
            == 1),
        "sp-sync stored {id}"
    );
}

/// Waits up to 20 s for the Stop's `turn.ended` (reason `stop`) at the receiver, and checks
/// it against the event schema.
#[track_caller]
pub fn turn_end_reaches_the_receiver(env: &Env) {
    let ended = env
        .wait_event(
            "turn.ended",
            json!({"reason": "stop"}),
            Duration::from_secs(20),
        )
        .expect("turn.ended reaches the receiver");
    super::schema::assert_valid("event.json", &ended);
    assert_eq!(ended["harness"]["event"], "Stop");
}
