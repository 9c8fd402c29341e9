//! DECISIONS 40: the conversation a sink gets. The real sp-stop and sp-event hooks, run as
//! Claude Code runs them in a temp HOME, and sp-sync against real receivers on loopback: a
//! tier-2 sink gets each turn's prompt and final text (redacted), a tier-1 sink never does
//! and still gets what follows it.
mod common;
use common::env::*;
use serde_json::{json, Value};
use spreceiver::{Receiver, ReceiverOptions};
use std::time::Duration;

fn opts(max_tier: u8) -> ReceiverOptions {
    ReceiverOptions {
        max_tier,
        ..Default::default()
    }
}

/// A Claude Code session whose transcript holds one turn: the person's prompt (with a
/// secret in it) and the model's answer; returns the Stop payload for it.
fn one_turn(env: &Env, last_assistant_message: Option<&str>) -> Value {
    let t = env.dir.path().join("transcript.jsonl");
    let lines = [
        json!({"type": "user", "message": {"content": "deploy it with API_TOKEN=hunter22 please"}}),
        json!({"type": "assistant", "message": {"content": [{"type": "text", "text": "Deployed; the site is up."}]}}),
    ];
    let body: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(&t, body.join("\n") + "\n").unwrap();
    let mut start = payload(CC_STOP);
    start["hook_event_name"] = json!("SessionStart");
    start["source"] = json!("startup");
    assert!(env.hook_json("sp-event", &start).status.success());
    let mut stop = payload(CC_STOP);
    stop["transcript_path"] = json!(t);
    match last_assistant_message {
        Some(m) => stop["last_assistant_message"] = json!(m),
        None => {
            stop.as_object_mut()
                .unwrap()
                .remove("last_assistant_message");
        }
    }
    stop
}

fn types(events: &[Value]) -> Vec<String> {
    let mut es: Vec<&Value> = events.iter().collect();
    es.sort_by_key(|e| e["session"]["seq"].as_i64());
    es.iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_tier_2_sink_gets_each_turns_prompt_and_answer_redacted_and_a_tier_1_sink_does_not() {
    let env = Env::with(opts(1), json!({}));
    let desk = Receiver::start(opts(2)).unwrap();
    env.write_config(json!({"sinks": [
        {"name": "phone", "url": env.receiver.url(), "tier": 1, "control": true, "token": env.receiver.token()},
        {"name": "desk", "url": desk.url(), "tier": 2, "control": false, "token": desk.token()},
    ]}));
    let stop = one_turn(&env, None);
    let out = env.hook_json("sp-stop", &stop);
    assert!(out.status.success() && out.stdout.is_empty() && out.stderr.is_empty());
    assert!(env.sync_once().status.success());
    assert!(until(Duration::from_secs(10), || desk
        .events()
        .iter()
        .any(|e| e["type"] == "turn.ended")));
    assert_eq!(
        types(&desk.events()),
        ["session.started", "turn.transcript", "turn.ended"]
    );
    let t = desk
        .events()
        .into_iter()
        .find(|e| e["type"] == "turn.transcript")
        .unwrap();
    common::schema::assert_valid("event.json", &t);
    assert_eq!(t["tier"], 2);
    assert_eq!(
        t["data"],
        json!({
            "user": "deploy it with API_TOKEN=[REDACTED 8 chars] please",
            "user_partial": true,
            "assistant": "Deployed; the site is up.",
        })
    );
    // The tier-1 sink got the turn's end, after the transcript it was never sent.
    assert!(until(Duration::from_secs(10), || env
        .receiver
        .events()
        .iter()
        .any(|e| e["type"] == "turn.ended")));
    assert_eq!(
        types(&env.receiver.events()),
        ["session.started", "turn.ended"]
    );
}

#[test]
fn the_answer_the_stop_reports_wins_and_tier_1_alone_reads_no_transcript() {
    let env = Env::with(opts(2), json!({}));
    env.write_config(json!({"sinks": [
        {"name": "phone", "url": env.receiver.url(), "tier": 2, "control": true, "token": env.receiver.token()},
    ]}));
    let stop = one_turn(&env, Some("From the payload."));
    assert!(env.hook_json("sp-stop", &stop).status.success());
    assert!(env.sync_once().status.success());
    let t = env
        .wait_event("turn.transcript", json!({}), Duration::from_secs(10))
        .expect("turn.transcript");
    assert_eq!(t["data"]["assistant"], "From the payload.");
    assert_eq!(
        t["data"]["user"],
        "deploy it with API_TOKEN=[REDACTED 8 chars] please"
    );
    // At tier 1 the Stop records no transcript at all.
    env.write_config(json!({"sinks": [
        {"name": "phone", "url": env.receiver.url(), "tier": 1, "control": true, "token": env.receiver.token()},
    ]}));
    assert!(env.hook_json("sp-stop", &stop).status.success());
    assert_eq!(
        env.query::<i64>("select count(*) from events where type='turn.transcript'"),
        [1]
    );
    assert_eq!(
        env.query::<i64>("select count(*) from events where type='turn.ended'"),
        [2]
    );
}
