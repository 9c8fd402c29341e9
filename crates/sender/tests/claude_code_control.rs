//! Issue 2's must-show list: the real binaries, run as Claude Code runs them, against a real
//! receiver on loopback, with a real SQLite queue.
mod common;
use common::cc_session::{make_live, turn_end_reaches_the_receiver};
use common::env::*;
use serde_json::json;
use std::time::Duration;

const ALLOW: &str = r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}"#;

#[test]
fn allow_reaches_the_waiting_hook() {
    let mut env = Env::new();
    env.start_sync();
    let hook = env.spawn_hook("sp-permission", &payload(CC_PERMISSION));
    let needed = wait_needed(&env, CC_PERMISSION_ID);
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
    let ack = env
        .receiver
        .wait_ack(msg["id"].as_str().unwrap(), Duration::from_secs(20))
        .expect("ack");
    assert_eq!(ack["outcome"], "delivered");
    assert_eq!(cleared_how(&env, CC_PERMISSION_ID), "answered");
}

fn session_key() -> String {
    format!("claude-code:{CC_SESSION}")
}

/// An Env whose permission wait is short, with sp-sync running.
fn env_with_wait(wait_s: u64) -> Env {
    let mut env = Env::with(Default::default(), json!({"permission_wait_s": wait_s}));
    env.start_sync();
    env
}

/// The attention.needed event of attention `id`, once it reached the receiver.
fn wait_needed(env: &Env, id: &str) -> serde_json::Value {
    env.wait_event(
        "attention.needed",
        json!({"attention_id": id}),
        Duration::from_secs(15),
    )
    .unwrap_or_else(|| panic!("attention.needed of {id} reaches the receiver"))
}

/// How attention `id` was cleared, once attention.cleared reached the receiver.
fn cleared_how(env: &Env, id: &str) -> serde_json::Value {
    let cleared = env.wait_event(
        "attention.cleared",
        json!({"attention_id": id}),
        Duration::from_secs(20),
    );
    cleared.unwrap_or_else(|| panic!("attention.cleared of {id}"))["data"]["how"].clone()
}

/// Fails unless message `msg` is acked `outcome` with `detail`.
fn assert_acked(env: &Env, msg: &serde_json::Value, outcome: &str, detail: &str) {
    let ack = ack_of(env, msg["id"].as_str().unwrap());
    let got = (ack["outcome"].as_str(), ack["detail"].as_str());
    assert_eq!(got, (Some(outcome), Some(detail)), "{ack}");
}

/// A live session with sp-sync running and these prompts stored; their ids.
fn live_with_prompts(texts: &[&str], expires_in_s: u64) -> (Env, Vec<String>) {
    let mut env = Env::new();
    env.start_sync();
    make_live(&env);
    let ids = queue_prompts(&env, texts, expires_in_s);
    (env, ids)
}

fn ack_of(env: &Env, id: &str) -> serde_json::Value {
    env.receiver
        .wait_ack(id, Duration::from_secs(20))
        .unwrap_or_else(|| panic!("no ack for {id}"))
}

#[test]
fn deny_carries_the_note() {
    let mut env = Env::new();
    env.start_sync();
    let hook = env.spawn_hook("sp-permission", &payload(CC_PERMISSION));
    wait_needed(&env, CC_PERMISSION_ID);
    let msg = env.receiver.enqueue(
        &session_key(),
        json!({"kind": "permission.answer", "for": CC_PERMISSION_ID, "decision": "deny", "note": "Not on main, please."}),
    );
    let out = finish(hook, Duration::from_secs(10));
    assert!(out.status.success());
    assert_eq!(
        stdout(&out),
        "{\"hookSpecificOutput\":{\"hookEventName\":\"PermissionRequest\",\"decision\":{\"behavior\":\"deny\",\"message\":\"Not on main, please.\"}}}\n"
    );
    let value: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    common::schema::assert_valid("claude-code-permission-request-output.json", &value);
    assert_eq!(
        ack_of(&env, msg["id"].as_str().unwrap())["outcome"],
        "delivered"
    );
    assert_eq!(cleared_how(&env, CC_PERMISSION_ID), "answered");
}

#[test]
fn no_answer_in_time_prints_nothing_and_a_late_answer_expires() {
    let env = env_with_wait(1);
    let started = std::time::Instant::now();
    let out = env.hook_json("sp-permission", &payload(CC_PERMISSION));
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "the hook waited"
    );
    assert!(out.status.success());
    assert!(out.stdout.is_empty(), "prints nothing: {}", stdout(&out));
    assert!(out.stderr.is_empty());
    assert_eq!(cleared_how(&env, CC_PERMISSION_ID), "timeout");
    let late = env.receiver.enqueue(
        &session_key(),
        json!({"kind": "permission.answer", "for": CC_PERMISSION_ID, "decision": "allow"}),
    );
    let ack = ack_of(&env, late["id"].as_str().unwrap());
    assert_eq!(ack["outcome"], "expired");
    // Exactly one cleared event for the attention.
    assert_eq!(env.events_of("attention.cleared").len(), 1);
}

#[test]
fn answers_for_another_session_or_attention_are_never_delivered() {
    let env = env_with_wait(3);
    // Another live session of the same harness, polled too.
    let mut other = payload(CC_STOP);
    other["session_id"] = json!("other-session");
    other["hook_event_name"] = json!("SessionStart");
    other["source"] = json!("startup");
    assert!(env.hook_json("sp-event", &other).status.success());
    let hook = env.spawn_hook("sp-permission", &payload(CC_PERMISSION));
    wait_needed(&env, CC_PERMISSION_ID);
    // Right attention, wrong session.
    let wrong_session = env.receiver.enqueue(
        "claude-code:other-session",
        json!({"kind": "permission.answer", "for": CC_PERMISSION_ID, "decision": "allow"}),
    );
    // Right session, another attention.
    let wrong_attention = env.receiver.enqueue(
        &session_key(),
        json!({"kind": "permission.answer", "for": "perm-0000000000000000", "decision": "allow"}),
    );
    let a = ack_of(&env, wrong_session["id"].as_str().unwrap());
    assert_eq!(a["outcome"], "failed");
    assert_eq!(a["detail"], "unknown attention");
    let b = ack_of(&env, wrong_attention["id"].as_str().unwrap());
    assert_eq!(b["outcome"], "failed");
    let out = finish(hook, Duration::from_secs(10));
    assert!(out.status.success());
    assert!(out.stdout.is_empty(), "never allow: {}", stdout(&out));
    assert_eq!(cleared_how(&env, CC_PERMISSION_ID), "timeout");
}

#[test]
fn terminal_answering_first_stops_the_wait() {
    let env = env_with_wait(60);
    let hook = env.spawn_hook("sp-permission", &payload(CC_PERMISSION));
    wait_needed(&env, CC_PERMISSION_ID);
    // The person said "Yes" in Claude Code's own dialog: the tool ran.
    let mut post = payload(CC_PERMISSION);
    post["hook_event_name"] = json!("PostToolUse");
    post["tool_response"] = json!({"stdout": "", "stderr": "", "interrupted": false});
    post["tool_use_id"] = json!("toolu_01");
    let started = std::time::Instant::now();
    let ev = env.hook_json("sp-event", &post);
    assert!(ev.status.success() && ev.stdout.is_empty());
    let out = finish(hook, Duration::from_secs(15));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the hook stopped waiting long before its 60 s: {:?}",
        started.elapsed()
    );
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    assert_eq!(cleared_how(&env, CC_PERMISSION_ID), "answered");
    // A remote answer after that is expired, not delivered.
    let late = env.receiver.enqueue(
        &session_key(),
        json!({"kind": "permission.answer", "for": CC_PERMISSION_ID, "decision": "allow"}),
    );
    assert_eq!(
        ack_of(&env, late["id"].as_str().unwrap())["outcome"],
        "expired"
    );
}

#[test]
fn sigterm_while_waiting_clears_answered() {
    let env = env_with_wait(60);
    let hook = env.spawn_hook("sp-permission", &payload(CC_PERMISSION_OTHER));
    let id = CC_PERMISSION_OTHER_ID;
    wait_needed(&env, id);
    unsafe { libc::kill(hook.id() as i32, libc::SIGTERM) };
    let out = finish(hook, Duration::from_secs(5));
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
    assert_eq!(cleared_how(&env, id), "answered");
}

/// Enqueues prompts and waits until sp-sync has stored them all.
fn queue_prompts(env: &Env, texts: &[&str], expires_in_s: u64) -> Vec<String> {
    let ids: Vec<String> = texts
        .iter()
        .map(|t| {
            let m = env.receiver.enqueue(
                &session_key(),
                json!({"kind": "prompt", "text": t, "expires_in_s": expires_in_s}),
            );
            std::thread::sleep(Duration::from_millis(5));
            m["id"].as_str().unwrap().to_string()
        })
        .collect();
    for id in &ids {
        stored(env, id);
    }
    ids
}

/// Waits until sp-sync stored the message.
fn stored(env: &Env, id: &str) {
    common::cc_session::stored_within(env, id, Duration::from_secs(10));
}

/// Queues one message for the session and waits until sp-sync stored it.
fn queue(env: &Env, message: serde_json::Value) -> String {
    let id = env.receiver.enqueue(&session_key(), message)["id"]
        .as_str()
        .unwrap()
        .to_string();
    stored(env, &id);
    id
}

/// The reasons of the `turn.ended` events stored so far, oldest first.
fn turn_ends(env: &Env) -> Vec<String> {
    env.query::<String>(
        "select json_extract(data, '$.reason') from events where type='turn.ended' order by rowid",
    )
}

#[test]
fn with_no_sink_a_stop_records_no_turn_end() {
    let env = Env::new();
    env.write_config(json!({"sinks": []}));
    make_live(&env);
    let out = env.hook_json("sp-stop", &payload(CC_STOP));
    assert!(out.status.success() && out.stdout.is_empty());
    assert!(turn_ends(&env).is_empty());
    // The same Stop with a sink records it: the check above is not vacuous.
    let with_sink = Env::new();
    make_live(&with_sink);
    with_sink.hook_json("sp-stop", &payload(CC_STOP));
    assert_eq!(turn_ends(&with_sink), ["stop"]);
}

#[test]
fn prompts_are_delivered_at_stop_oldest_first() {
    let mut env = Env::new();
    env.start_sync();
    make_live(&env);
    // Nothing queued: Stop prints nothing, and the turn is over: the agent waits for the
    // person, so `turn.ended` goes to the receiver (issue 14 pushes it).
    let out = env.hook_json("sp-stop", &payload(CC_STOP));
    assert!(out.status.success() && out.stdout.is_empty());
    assert_eq!(turn_ends(&env), ["stop"]);
    turn_end_reaches_the_receiver(&env);
    // One prompt.
    let one = queue_prompts(&env, &["please also update the changelog"], 60);
    let out = env.hook_json("sp-stop", &payload(CC_STOP));
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    common::schema::assert_valid("claude-code-stop-output.json", &v);
    assert_eq!(v["decision"], "block");
    let reason = v["reason"].as_str().unwrap();
    assert_eq!(
        reason,
        "Message from the person, sent through sessionpipe (sink \"phone\"):\n\nplease also update the changelog"
    );
    // A Stop that delivers goes on with the prompt: its turn has not ended, so neither has
    // the prompt's wait for its final ack (DECISIONS 38 `turn` mode).
    assert_eq!(turn_ends(&env), ["stop"]);
    assert_eq!(
        env.query::<String>(&format!(
            "select outcome from acks where message_id='{}'",
            one[0]
        )),
        vec!["taken"]
    );
    // The next Stop (stop_hook_active) finds nothing: no loop, and now the turn is over;
    // the prompt's final ack carries what the agent answered in that turn.
    let mut again = payload(CC_STOP);
    again["stop_hook_active"] = json!(true);
    again["last_assistant_message"] = json!("Changelog updated.");
    let out = env.hook_json("sp-stop", &again);
    assert!(out.status.success() && out.stdout.is_empty());
    assert_eq!(turn_ends(&env), ["stop", "stop"]);
    let ack = ack_of(&env, &one[0]);
    assert_eq!(
        (&ack["outcome"], &ack["mode"], &ack["reply"], &ack["detail"]),
        (
            &json!("delivered"),
            &json!("turn"),
            &json!("Changelog updated."),
            &json!("claude-code Stop hook")
        ),
        "{ack}"
    );
    // Two prompts: one block, both texts, oldest first.
    let two = queue_prompts(&env, &["first thing", "second thing"], 60);
    let out = env.hook_json("sp-stop", &payload(CC_STOP));
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    let reason = v["reason"].as_str().unwrap();
    assert!(reason.starts_with(
        "2 messages from the person, sent through sessionpipe (sink \"phone\"), oldest first:\n"
    ));
    let (a, b) = (
        reason.find("first thing").unwrap(),
        reason.find("second thing").unwrap(),
    );
    assert!(a < b);
    let mut again = payload(CC_STOP);
    again["stop_hook_active"] = json!(true);
    again["last_assistant_message"] = json!("Both done.");
    assert!(env.hook_json("sp-stop", &again).stdout.is_empty());
    for id in &two {
        let ack = ack_of(&env, id);
        assert_eq!(
            (&ack["outcome"], &ack["reply"]),
            (&json!("delivered"), &json!("Both done."))
        );
    }
    // Each stored delivered, and every final ack sent for it says delivered (a redelivery
    // is acked again with the same outcome, never another), after its one `taken`.
    for id in one.iter().chain(&two) {
        let acks = env.acks_for(id);
        let finals: Vec<_> = acks.iter().filter(|a| a["outcome"] != "taken").collect();
        assert_eq!(acks[0]["outcome"], "taken", "{id}: {acks:?}");
        assert!(
            !finals.is_empty() && finals.iter().all(|a| a["outcome"] == "delivered"),
            "{id}: {acks:?}"
        );
        assert_eq!(
            env.query::<String>(&format!("select outcome from messages where id='{id}'")),
            vec!["delivered"]
        );
    }
}

#[test]
fn an_expired_prompt_is_not_delivered() {
    let (env, ids) = live_with_prompts(&["too late"], 1);
    // Stored (live_with_prompts waits for that), then past its expiry on the machine's clock.
    env.advance_clock(Duration::from_secs(5));
    let out = env.hook_json("sp-stop", &payload(CC_STOP));
    assert!(out.status.success());
    assert!(out.stdout.is_empty(), "{}", stdout(&out));
    assert_eq!(ack_of(&env, &ids[0])["outcome"], "expired");
}

/// Queues a cancel for the session and waits until sp-sync stored it.
fn queue_cancel(env: &Env, note: Option<&str>) -> String {
    let mut m = json!({"kind": "cancel"});
    if let Some(n) = note {
        m["note"] = json!(n);
    }
    queue(env, m)
}

fn post_tool_use() -> serde_json::Value {
    let mut p = payload(CC_STOP);
    p["hook_event_name"] = json!("PostToolUse");
    p["tool_name"] = json!("Bash");
    p["tool_input"] = json!({"command": "sleep 30"});
    p["tool_response"] = json!({});
    p
}

/// DECISIONS 26: a cancel stops Claude Code at its next seam with `continue:false`; at the
/// turn's end it beats queued prompts (they wait for the next turn); the person's own next
/// prompt means the turn it was meant for is over.
#[test]
fn cancel_stops_claude_code_at_the_next_seam() {
    let mut env = Env::new();
    env.start_sync();
    make_live(&env);
    let stop_json =
        |reason: &str| format!("{}\n", json!({"continue": false, "stopReason": reason}));

    // A tool boundary.
    let id = queue_cancel(&env, Some("Wrong branch."));
    let out = env.hook_json("sp-event", &post_tool_use());
    assert!(out.status.success());
    assert_eq!(
        stdout(&out),
        stop_json("Stopped by the person through sessionpipe (sink \"phone\"). Wrong branch.")
    );
    let ack = ack_of(&env, &id);
    assert_eq!(ack["outcome"], "delivered");
    assert_eq!(
        ack["detail"],
        "claude-code PostToolUse hook (continue:false)"
    );
    // Delivered once: the next tool boundary prints nothing.
    let again = env.hook_json("sp-event", &post_tool_use());
    assert!(again.stdout.is_empty());
    // The stopped turn's end is an interrupt, not a finished turn.
    let out = env.hook_json("sp-stop", &payload(CC_STOP));
    assert!(out.stdout.is_empty());
    assert_eq!(turn_ends(&env), ["interrupt"]);

    // The turn's end, with a prompt queued too: the stop wins, the prompt waits.
    let prompt = queue_prompts(&env, &["after the stop"], 60);
    let id = queue_cancel(&env, None);
    let out = env.hook_json("sp-stop", &payload(CC_STOP));
    assert_eq!(
        stdout(&out),
        stop_json("Stopped by the person through sessionpipe (sink \"phone\").")
    );
    assert_eq!(
        ack_of(&env, &id)["detail"],
        "claude-code Stop hook (continue:false)"
    );
    assert_eq!(turn_ends(&env), ["interrupt", "interrupt"]);
    assert_eq!(
        env.query::<String>(&format!(
            "select state from messages where id='{}'",
            prompt[0]
        )),
        vec!["queued"]
    );
    let out = env.hook_json("sp-stop", &payload(CC_STOP));
    assert!(stdout(&out).contains("after the stop"), "{}", stdout(&out));

    // Sent after the turn ended: the person's next prompt comes first, the cancel expires.
    let id = queue_cancel(&env, None);
    let mut submit = payload(CC_STOP);
    submit["hook_event_name"] = json!("UserPromptSubmit");
    submit["prompt"] = json!("carry on");
    let out = env.hook_json("sp-event", &submit);
    assert!(
        out.stdout.is_empty(),
        "the person's prompt was blocked: {}",
        stdout(&out)
    );
    let ack = ack_of(&env, &id);
    assert_eq!(ack["outcome"], "expired");
}

/// DECISIONS 26: an open permission prompt of a session that is stopped is denied first, with
/// Claude Code's interrupt, so the agent is not left at the dialog.
#[test]
fn cancel_denies_a_waiting_permission_and_stops_claude_code() {
    let env = env_with_wait(60);
    let hook = env.spawn_hook("sp-permission", &payload(CC_PERMISSION));
    wait_needed(&env, CC_PERMISSION_ID);
    let m = env.receiver.enqueue(
        &session_key(),
        json!({"kind": "cancel", "note": "Stop everything."}),
    );
    let out = finish(hook, Duration::from_secs(20));
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["hookSpecificOutput"]["decision"]["behavior"], "deny");
    assert_eq!(v["hookSpecificOutput"]["decision"]["interrupt"], true);
    assert_eq!(
        v["hookSpecificOutput"]["decision"]["message"],
        "Stopped by the person through sessionpipe (sink \"phone\"). Stop everything."
    );
    assert_acked(
        &env,
        &m,
        "delivered",
        "claude-code PermissionRequest hook (deny, interrupt)",
    );
}

#[test]
fn invalid_messages_are_acked_failed_naming_the_rule() {
    let mut env = Env::new();
    env.start_sync();
    make_live(&env);
    let at = "2026-12-02T10:00:00.000Z";
    let far = "2099-01-01T00:00:00.000Z";
    let cases = [
        (
            json!({"kind": "prompt", "at": at, "expires_at": far}),
            "text is required",
        ),
        (
            json!({"kind": "prompt", "text": "x".repeat(20_001), "at": at, "expires_at": far}),
            "text must be at most 20000",
        ),
        (
            json!({"kind": "prompt", "text": "hi", "note": "n".repeat(2_001), "at": at, "expires_at": far}),
            "note must be at most 2000",
        ),
        (
            json!({"kind": "permission.answer", "decision": "allow", "at": at, "expires_at": far}),
            "for is required",
        ),
        (
            json!({"kind": "permission.answer", "for": "a".repeat(129), "decision": "allow", "at": at, "expires_at": far}),
            "for must be 1 to 128",
        ),
        (
            json!({"kind": "permission.answer", "for": CC_PERMISSION_ID, "decision": "maybe", "at": at, "expires_at": far}),
            "decision must be allow or deny",
        ),
        (
            json!({"kind": "permission.answer", "for": CC_PERMISSION_ID, "at": at, "expires_at": far}),
            "decision is required",
        ),
        (
            json!({"kind": "prompt", "text": "hi", "at": "2026-12-02T10:00:00Z", "expires_at": far}),
            "at must be RFC 3339",
        ),
        (
            json!({"kind": "prompt", "text": "hi", "at": at, "expires_at": "2099-01-01T00:00:00.000+00:00"}),
            "expires_at must be RFC 3339",
        ),
        (
            json!({"kind": "prompt", "text": "hi", "expires_at": far}),
            "at is required",
        ),
        (
            json!({"kind": 7, "at": at, "expires_at": far}),
            "kind must be a string",
        ),
    ];
    let mut ids = Vec::new();
    for (i, (mut m, rule)) in cases.into_iter().enumerate() {
        let id = format!("01KBZZZZZZZZZZZZZZZZZZZZ{:02}", i);
        m["id"] = json!(id);
        env.receiver.enqueue_raw(&session_key(), m);
        ids.push((id, rule));
    }
    let unknown = "01KBZZZZZZZZZZZZZZZZZZZZ99";
    env.receiver.enqueue_raw(
        &session_key(),
        json!({"id": unknown, "kind": "start", "text": "go", "at": at, "expires_at": far}),
    );
    for (id, rule) in &ids {
        let ack = ack_of(&env, id);
        assert_eq!(ack["outcome"], "failed", "{id}");
        let detail = ack["detail"].as_str().unwrap();
        assert!(
            detail.contains(rule),
            "{id}: detail {detail:?} should name {rule:?}"
        );
    }
    let ack = ack_of(&env, unknown);
    assert_eq!(ack["outcome"], "unsupported");
    // None is acted on: a Stop delivers nothing, and nothing is left queued.
    let out = env.hook_json("sp-stop", &payload(CC_STOP));
    assert!(out.stdout.is_empty());
    assert_eq!(
        env.query::<i64>("select count(*) from messages where state <> 'done'"),
        vec![0]
    );
    // Every ack body we sent is valid for the protocol.
    for r in env
        .receiver
        .requests()
        .iter()
        .filter(|r| r.route == Some(spreceiver::Route::Ack))
    {
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        common::schema::assert_valid("ack-body.json", &body);
    }
}

#[test]
fn a_redelivered_message_is_acted_on_once_and_acked_again() {
    let mut env = Env::new();
    env.start_sync();
    make_live(&env);
    // The receiver is slow to take the prompt's first ack (its `taken`), so it redelivers
    // the prompt meanwhile: its `taken` goes again (the final waits for the turn's end). The
    // fault is in place before the prompt is queued, so the first ack cannot slip past it.
    env.receiver.push_fault(
        spreceiver::Route::Ack,
        spreceiver::Fault::Delay(Duration::from_secs(2)),
    );
    let ids = queue_prompts(&env, &["only once"], 60);
    let out = env.hook_json("sp-stop", &payload(CC_STOP));
    assert!(stdout(&out).contains("only once"));
    assert!(
        until(Duration::from_secs(15), || env
            .acks_for(&ids[0])
            .iter()
            .filter(|a| a["outcome"] == "taken")
            .count()
            >= 2),
        "acked again"
    );
    let out = env.hook_json("sp-stop", &payload(CC_STOP));
    assert!(out.stdout.is_empty(), "delivered once only");
    assert_eq!(ack_of(&env, &ids[0])["outcome"], "delivered");
    for a in env.acks_for(&ids[0]) {
        assert!(
            a["outcome"] == "delivered" || a["outcome"] == "taken",
            "{a}"
        );
    }
    assert_eq!(env.query::<i64>("select count(*) from messages"), vec![1]);
}

#[test]
fn receiver_down_then_back_loses_nothing() {
    let mut env = Env::new();
    env.start_sync();
    make_live(&env);
    env.wait_event("session.started", json!({}), Duration::from_secs(20))
        .unwrap();
    let ids = queue_prompts(&env, &["while you were away"], 120);
    env.receiver.set_down(true);
    let out = env.hook_json("sp-stop", &payload(CC_STOP));
    assert!(stdout(&out).contains("while you were away"));
    // The turn it started ends too, while the receiver is still down.
    let mut again = payload(CC_STOP);
    again["stop_hook_active"] = json!(true);
    assert!(env.hook_json("sp-stop", &again).stdout.is_empty());
    // A second session starts while the receiver is down.
    let mut other = payload(CC_STOP);
    other["session_id"] = json!("second-session");
    other["hook_event_name"] = json!("SessionStart");
    other["source"] = json!("startup");
    assert!(env.hook_json("sp-event", &other).status.success());
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        env.query::<i64>("select count(*) from pending_acks"),
        vec![1]
    );
    env.receiver.set_down(false);
    assert_eq!(ack_of(&env, &ids[0])["outcome"], "delivered");
    let second = env.receiver.wait_event(Duration::from_secs(30), |e| {
        e["session"]["id"] == "second-session"
    });
    assert!(second.is_some(), "events queued while down arrive");
    assert!(until(Duration::from_secs(20), || env
        .query::<i64>("select count(*) from pending_acks")[0]
        == 0));
    // One outcome for the message (a poll that redelivered it while the ack was on its way is
    // acked again, with the same outcome), and every event once.
    let acks = env.acks_for(&ids[0]);
    let finals: Vec<_> = acks.iter().filter(|a| a["outcome"] != "taken").collect();
    assert!(
        !finals.is_empty() && finals.iter().all(|a| a["outcome"] == "delivered"),
        "{acks:?}"
    );
    let mut seen = std::collections::HashSet::new();
    for e in env.receiver.events() {
        assert!(
            seen.insert((e["session"]["id"].to_string(), e["session"]["seq"].as_i64())),
            "duplicate {e}"
        );
        common::schema::assert_valid("event.json", &e);
    }
}

#[test]
fn bad_input_and_broken_state_never_break_the_host() {
    let env = Env::new();
    for stdin in [
        &b""[..],
        b"not json",
        b"{\"hook_event_name\":\"Stop\"}",
        b"\xff\xfe\x00",
        b"[]",
    ] {
        for bin in ["sp-permission", "sp-stop", "sp-event"] {
            let out = env.hook(bin, stdin);
            assert_eq!(out.status.code(), Some(0), "{bin}");
            assert!(out.stdout.is_empty(), "{bin}");
        }
    }
    assert!(env.log().contains("skipped"), "logged why: {}", env.log());
    // A state folder that cannot be created: a file stands where the folder should be.
    let blocker = env.dir.path().join("blocker");
    std::fs::write(&blocker, "x").unwrap();
    let mut c = env.cmd("sp-stop");
    c.args(["--harness", "claude-code"])
        .env("SESSIONPIPE_STATE_DIR", blocker.join("state"));
    let out = run_with_stdin(c, payload(CC_STOP).to_string().as_bytes());
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot create state folder"),
        "logged why"
    );
    // A locked database: another process holds the write lock past the hook's busy timeout.
    make_live(&env);
    let db = env.db();
    db.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let started = std::time::Instant::now();
    let mut stop = payload(CC_STOP);
    stop["session_id"] = json!("locked-session");
    let out = env.hook_json("sp-stop", &stop);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
    assert!(started.elapsed() < Duration::from_secs(10));
    db.execute_batch("ROLLBACK").unwrap();
    assert!(env.log().contains("database is locked"), "{}", env.log());
}

#[test]
fn forty_concurrent_stops_deliver_one_prompt_once() {
    let (env, ids) = live_with_prompts(&["exactly once"], 60);
    let stdin = payload(CC_STOP);
    let children: Vec<_> = (0..40).map(|_| env.spawn_hook("sp-stop", &stdin)).collect();
    let outs: Vec<_> = children
        .into_iter()
        .map(|c| finish(c, Duration::from_secs(30)))
        .collect();
    assert!(outs.iter().all(|o| o.status.code() == Some(0)));
    let blocks = outs
        .iter()
        .filter(|o| stdout(o).contains("exactly once"))
        .count();
    assert_eq!(blocks, 1);
    assert_eq!(outs.iter().filter(|o| !o.stdout.is_empty()).count(), 1);
    assert_eq!(ack_of(&env, &ids[0])["outcome"], "delivered");
}

/// Queues a prompt with a `mode` and waits until sp-sync stored it.
fn queue_mode(env: &Env, text: &str, mode: &str) -> String {
    queue(env, json!({"kind": "prompt", "text": text, "mode": mode}))
}

fn tool_event(event: &str) -> serde_json::Value {
    let mut p = post_tool_use();
    p["hook_event_name"] = json!(event);
    p
}

/// DECISIONS 25 on Claude Code: `steer` lands beside the next tool result (PostToolUse
/// additionalContext), `interrupt` in place of the next tool (PreToolUse deny, the text as
/// its reason; one that came while a tool ran too, never as context after it), `queue` waits for the turn's end; an unknown mode is refused naming the rule.
#[test]
fn steer_and_interrupt_land_at_the_next_tool_boundary() {
    let mut env = Env::new();
    env.start_sync();
    make_live(&env);
    let framed = |t: &str| {
        format!("Message from the person, sent through sessionpipe (sink \"phone\"):\n\n{t}")
    };
    let queued = queue_mode(&env, "for the end", "queue");
    let steer = queue_mode(&env, "use the staging database", "steer");
    // Before a tool: only an interrupt goes here, so this one runs.
    assert!(env
        .hook_json("sp-event", &tool_event("PreToolUse"))
        .stdout
        .is_empty());
    // After it: the steer, as context beside the result.
    let out = env.hook_json("sp-event", &tool_event("PostToolUse"));
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(
        v,
        json!({"hookSpecificOutput": {"hookEventName": "PostToolUse",
               "additionalContext": framed("use the staging database")}})
    );
    // Its final ack waits for the turn's end (below).

    // An interrupt that comes while a tool runs is no context after it: the tool's end
    // leaves it for the next tool, which it keeps from running (DECISIONS 25).
    let interrupt = queue_mode(&env, "stop, that deletes prod", "interrupt");
    assert!(env
        .hook_json("sp-event", &tool_event("PostToolUse"))
        .stdout
        .is_empty());
    assert_eq!(
        env.query::<String>(&format!(
            "select state from messages where id='{interrupt}'"
        )),
        vec!["queued"]
    );
    let out = env.hook_json("sp-event", &tool_event("PreToolUse"));
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(
        v,
        json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
               "permissionDecisionReason": framed("stop, that deletes prod")}})
    );

    // The queued prompt waited for the turn's end all along.
    assert_eq!(
        env.query::<String>(&format!("select state from messages where id='{queued}'")),
        vec!["queued"]
    );
    let out = env.hook_json("sp-stop", &payload(CC_STOP));
    assert!(stdout(&out).contains("for the end"));
    // That Stop ended the turn the steer and the interrupt landed in: their final acks,
    // with its text.
    let ack = ack_of(&env, &steer);
    assert_eq!(
        (&ack["outcome"], &ack["detail"], &ack["mode"]),
        (
            &json!("delivered"),
            &json!("claude-code PostToolUse hook (additionalContext)"),
            &json!("turn")
        )
    );
    assert_eq!(
        ack["reply"],
        "I wrote hi into out.txt; the file now holds one line."
    );
    assert_eq!(
        ack_of(&env, &interrupt)["detail"],
        "claude-code PreToolUse hook (deny)"
    );

    let bad = env.receiver.enqueue(
        &session_key(),
        json!({"kind": "prompt", "text": "x", "mode": "now"}),
    );
    assert_acked(
        &env,
        &bad,
        "failed",
        "invalid: mode must be queue, steer or interrupt",
    );
}

/// Cross-check with the reference's recorded Claude Code payloads: our hook announces the
/// recorded prompt under the attention_id the reference computes, takes the answer, and the
/// recorded Stop delivers a queued prompt.
#[test]
fn peer_recorded_payloads_get_the_reference_attention_id() {
    let (Some(permission), Some(stop)) =
        (peer_payload(PEER_CC_PERMISSION), peer_payload(PEER_CC_STOP))
    else {
        return;
    };
    let env = env_with_wait(30);
    let hook = env.spawn_hook("sp-permission", &permission);
    let needed = wait_needed(&env, PEER_CC_PERMISSION_ID);
    assert_eq!(needed["session"]["id"], PEER_CC_SESSION);
    assert_eq!(needed["data"]["tool"], "Bash");
    let key = format!("claude-code:{PEER_CC_SESSION}");
    env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": PEER_CC_PERMISSION_ID, "decision": "allow"}),
    );
    let out = finish(hook, Duration::from_secs(20));
    assert_eq!(stdout(&out), format!("{ALLOW}\n"));
    let m = env.receiver.enqueue(
        &key,
        json!({"kind": "prompt", "text": "and the changelog", "expires_in_s": 60}),
    );
    let id = m["id"].as_str().unwrap().to_string();
    stored(&env, &id);
    let out = env.hook_json("sp-stop", &stop);
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["decision"], "block");
    assert!(v["reason"].as_str().unwrap().ends_with("and the changelog"));
}

/// DECISIONS 30: a hook harness's `session.started` lists in `data.control` what its row of
/// the harness table honours, so the page offers only those answers.
#[test]
fn session_started_lists_the_answer_fields_the_harness_honours() {
    let mut env = Env::new();
    env.start_sync();
    let mut start = payload(CC_STOP);
    start["hook_event_name"] = json!("SessionStart");
    start["source"] = json!("startup");
    assert!(env.hook_json("sp-event", &start).status.success());
    let codex = json!({"session_id": "codex-session-1", "transcript_path": null, "cwd": "/tmp",
        "hook_event_name": "SessionStart", "model": "gpt-5.1-codex",
        "permission_mode": "default", "source": "startup"});
    let out = env.hook_as("codex", "sp-event", codex.to_string().as_bytes());
    assert!(out.status.success());
    let started = |id: &str| {
        env.receiver
            .wait_event(Duration::from_secs(20), |e| {
                e["type"] == "session.started" && e["session"]["id"] == id
            })
            .expect("session.started")
    };
    let cc = started(CC_SESSION);
    assert_eq!(
        cc["data"]["control"]["answer"],
        json!(["scope", "input", "interrupt", "answers"])
    );
    assert_eq!(cc["data"]["control"]["prompt"]["steer"], "tool_boundary");
    assert_eq!(cc["data"]["control"]["cancel"], "tool_boundary");
    assert_eq!(cc["data"]["source"], "startup");
    // Codex's plain hook keeps our grant only (under `sp codex` more: real_agents codex_app).
    let cx = started("codex-session-1");
    assert_eq!(cx["data"]["control"]["answer"], json!(["scope"]));
    common::schema::assert_valid("event.json", &cc);
    common::schema::assert_valid("event.json", &cx);
}

/// A session first seen at another event than its SessionStart (an OpenCode plugin report, a
/// session resumed after its record was swept) still tells the page what it honours: the
/// implicit `session.started` carries the harness's `data.control` too.
#[test]
fn a_session_first_seen_after_its_start_still_lists_the_answer_fields() {
    let mut env = Env::new();
    env.start_sync();
    let id = "7c7c7c7c-0000-4000-8000-00000000007c";
    let post_tool = json!({"session_id": id, "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp",
        "hook_event_name": "PostToolUse", "tool_name": "Bash",
        "tool_input": {"command": "true"}, "tool_response": {"stdout": ""}});
    assert!(env.hook_json("sp-event", &post_tool).status.success());
    let started = env
        .receiver
        .wait_event(Duration::from_secs(20), |e| {
            e["type"] == "session.started" && e["session"]["id"] == id
        })
        .expect("session.started");
    assert_eq!(started["data"]["source"], "unknown");
    assert_eq!(
        started["data"]["control"]["answer"],
        json!(["scope", "input", "interrupt", "answers"])
    );
    common::schema::assert_valid("event.json", &started);
}

/// The index in the receiver's request log of the ack request that carried `outcome` for
/// message `id`, once it arrived.
fn ack_request_index(env: &Env, id: &str, outcome: &str) -> usize {
    let mut found = None;
    assert!(
        until(Duration::from_secs(20), || {
            found = env.receiver.requests().iter().position(|r| {
                r.route == Some(spreceiver::Route::Ack)
                    && r.status == Some(202)
                    && serde_json::from_slice::<serde_json::Value>(&r.body).is_ok_and(|b| {
                        b["acks"].as_array().is_some_and(|a| {
                            a.iter().any(|a| a["id"] == id && a["outcome"] == outcome)
                        })
                    })
            });
            found.is_some()
        }),
        "{outcome} ack of {id} reaches the receiver"
    );
    found.unwrap()
}

/// DECISIONS 38 `turn` mode, with the real hooks and sp-sync: a prompt queued during a run
/// is acked `taken` at once (before any Stop), so the receiver stops serving it and holds
/// the session's poll; the Stop that ends the turn the prompt started sends the final
/// `delivered` with mode `turn` and that turn's text, here read from the transcript's tail
/// (a Claude Code whose Stop payload leaves `last_assistant_message` out).
#[test]
fn a_prompt_queued_mid_run_is_taken_at_once_and_acked_with_the_reply_of_its_turn() {
    let mut env = Env::new();
    env.start_sync();
    make_live(&env);
    let key = session_key();
    let p1 = env
        .receiver
        .enqueue(&key, json!({"kind": "prompt", "text": "now run the tests"}));
    let p1 = p1["id"].as_str().unwrap().to_string();
    let taken_at = ack_request_index(&env, &p1, "taken");
    // No Stop has run: the prompt waits for one, its final ack with it.
    assert_eq!(
        env.query::<String>(&format!("select state from messages where id='{p1}'")),
        vec!["queued"]
    );
    assert!(env.receiver.wait_ack(&p1, Duration::ZERO).is_none());
    // The receiver no longer serves it: the session's next poll is held, not answered.
    let is_poll = |r: &spreceiver::RequestRecord| r.route == Some(spreceiver::Route::Poll);
    assert!(
        until(Duration::from_secs(20), || env.receiver.requests()
            [taken_at..]
            .iter()
            .any(|r| is_poll(r) && r.status.is_none())),
        "a poll is held after the taken"
    );
    // A second prompt wakes that held poll: from the taken on, one poll answered 200 (the
    // one that carried the second prompt), where a re-sent first prompt would have made a
    // loop of them.
    let p2 = env
        .receiver
        .enqueue(&key, json!({"kind": "prompt", "text": "and the linter"}));
    let p2 = p2["id"].as_str().unwrap().to_string();
    let p2_taken = ack_request_index(&env, &p2, "taken");
    let log = env.receiver.requests();
    let answered: Vec<Option<u16>> = log[taken_at..p2_taken]
        .iter()
        .filter(|r| is_poll(r))
        .map(|r| r.status)
        .collect();
    assert_eq!(answered, [Some(200)], "polls between the two taken acks");
    stored(&env, &p2);

    // The Stop delivers both; the turn goes on with them.
    let out = env.hook_json("sp-stop", &payload(CC_STOP));
    let reason = stdout(&out);
    assert!(reason.contains("now run the tests") && reason.contains("and the linter"));
    // The transcript of that turn: long (its tail alone is read), the person's message,
    // then the agent's answer in two text blocks after a tool call.
    let dir = tempfile::tempdir().unwrap();
    let transcript = dir.path().join(format!("{CC_SESSION}.jsonl"));
    let mut lines = Vec::new();
    for i in 0..400 {
        let filler = json!({"type": "assistant", "message": {"role": "assistant",
            "content": [{"type": "text", "text": format!("old answer {i} {}", "x".repeat(1000))}]}});
        lines.push(filler.to_string());
    }
    lines.push(
        json!({"type": "user", "message": {"role": "user", "content": "run the tests"}})
            .to_string(),
    );
    lines.push(
        json!({"type": "assistant", "message": {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "cargo test"}}]}})
        .to_string(),
    );
    lines.push(
        json!({"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}})
        .to_string(),
    );
    lines.push(
        json!({"type": "assistant", "message": {"role": "assistant", "content": [
        {"type": "text", "text": "All 12 tests pass."},
        {"type": "text", "text": "The linter is clean; token=abc123secret"}]}})
        .to_string(),
    );
    std::fs::write(&transcript, lines.join("\n") + "\n").unwrap();
    assert!(std::fs::metadata(&transcript).unwrap().len() > 256 * 1024);
    let mut end = payload(CC_STOP);
    end["stop_hook_active"] = json!(true);
    end.as_object_mut()
        .unwrap()
        .remove("last_assistant_message");
    end["transcript_path"] = json!(transcript.to_str().unwrap());
    let out = env.hook_json("sp-stop", &end);
    assert!(out.status.success() && out.stdout.is_empty() && out.stderr.is_empty());
    for id in [&p1, &p2] {
        let ack = ack_of(&env, id);
        assert_eq!(
            (&ack["outcome"], &ack["mode"]),
            (&json!("delivered"), &json!("turn")),
            "{ack}"
        );
        let reply = ack["reply"].as_str().unwrap();
        assert!(
            reply.starts_with("All 12 tests pass.\nThe linter is clean; "),
            "{reply}"
        );
        assert!(!reply.contains("abc123secret"), "redacted: {reply}");
        // Exactly one final ack, after one taken.
        let outcomes: Vec<_> = env
            .acks_for(id)
            .iter()
            .map(|a| a["outcome"].clone())
            .collect();
        assert_eq!(outcomes, [json!("taken"), json!("delivered")]);
    }
    assert_eq!(env.query::<i64>("select count(*) from turn_waits"), vec![0]);
}

/// A headless Claude Code run's PreToolUse, as `claude -p` (or a run the machine launched)
/// fires it, answered by our permission hook.
fn headless_pre_tool_use(env: &Env, stdin: &serde_json::Value) -> std::process::Output {
    let mut c = env.cmd("sp-permission");
    c.args(["--harness", "claude-code"])
        .env("SESSIONPIPE_HEADLESS", "1");
    run_with_stdin(c, stdin.to_string().as_bytes())
}

/// A stand-in `claude -p` process (a shell named `claude`, its command line holding `-p`),
/// for the hook to find through `CLAUDE_PID` as Claude Code sets it.
fn fake_claude_print(dir: &std::path::Path) -> std::process::Child {
    let claude = dir.join("claude");
    std::os::unix::fs::symlink("/bin/sh", &claude).unwrap();
    std::process::Command::new(&claude)
        .args(["-c", "sleep 60; true", "-p"])
        .spawn()
        .unwrap()
}

/// Claude Code tells its hooks whether the session is attended and its own pid: a
/// PreToolUse under a `claude -p` found through `CLAUDE_PID` asks (and parks when nobody
/// answers), and one in an attended session asks nothing, whatever its command line says.
#[test]
fn pre_tool_use_reads_whether_claude_code_is_attended_from_its_environment() {
    let env = env_with_wait(1);
    make_live(&env);
    let dir = tempfile::tempdir().unwrap();
    let mut claude = fake_claude_print(dir.path());
    let mut pre = payload(CC_PERMISSION);
    pre["hook_event_name"] = json!("PreToolUse");
    pre["tool_use_id"] = json!("toolu_01Attended");
    let run = |attended: &str| {
        let mut c = env.cmd("sp-permission");
        c.args(["--harness", "claude-code"])
            .env("CLAUDE_PID", claude.id().to_string())
            .env("CLAUDE_CODE_SESSION_ATTENDED", attended);
        run_with_stdin(c, pre.to_string().as_bytes())
    };
    let out = run("1");
    assert!(out.status.success());
    assert_eq!(stdout(&out), "", "attended: nothing asked at PreToolUse");
    assert_eq!(env.query::<i64>("select count(*) from attention"), vec![0]);
    let out = run("0");
    assert!(out.status.success());
    assert_eq!(
        stdout(&out),
        "{\"hookSpecificOutput\":{\"hookEventName\":\"PreToolUse\",\"permissionDecision\":\"defer\"}}\n",
        "headless (found through CLAUDE_PID): asked, then parked"
    );
    assert_eq!(
        env.query::<i64>("select count(*) from attention where parked_ms is not null"),
        vec![1]
    );
    let _ = claude.kill();
    let _ = claude.wait();
}

/// DECISIONS 39: a headless run's prompt nobody answers in the window parks the run
/// (`defer`); it stays open past the run's Stop and SessionEnd; an answer an hour later (the
/// machine's clock moved, not slept) is printed once, in PreToolUse's shape, when the resumed
/// run re-fires the same call; a second resume of the same call is not allowed again.
#[test]
fn a_headless_prompt_nobody_answers_parks_and_an_answer_an_hour_later_resumes_it_once() {
    let env = env_with_wait(1);
    make_live(&env);
    let mut pre = payload(CC_PERMISSION);
    pre["hook_event_name"] = json!("PreToolUse");
    pre["tool_use_id"] = json!("toolu_01ParkedCall");
    pre.as_object_mut()
        .unwrap()
        .remove("permission_suggestions");
    let out = headless_pre_tool_use(&env, &pre);
    assert!(out.status.success());
    assert_eq!(
        stdout(&out),
        "{\"hookSpecificOutput\":{\"hookEventName\":\"PreToolUse\",\"permissionDecision\":\"defer\"}}\n"
    );
    let ids = env.query::<String>("select attention_id from attention where parked_ms is not null");
    assert_eq!(ids.len(), 1, "one parked prompt");
    let id = ids[0].clone();
    assert!(id.starts_with("toolu_01ParkedCall-"), "{id}");
    let parked = env
        .wait_event(
            "attention.needed",
            json!({"attention_id": id}),
            Duration::from_secs(15),
        )
        .unwrap();
    // Both announcements reached the receiver; the last says until when it is parked.
    assert!(until(Duration::from_secs(15), || env
        .events_of("attention.needed")
        .iter()
        .any(
            |e| e["data"]["attention_id"] == id.as_str() && e["data"]["parked_until"].is_string()
        )));
    assert_eq!(parked["data"]["tool"], "Bash");
    // The run ended: its Stop and SessionEnd leave the parked prompt open.
    let out = env.hook_json("sp-stop", &payload(CC_STOP));
    assert!(
        out.status.success() && out.stdout.is_empty(),
        "{}",
        stdout(&out)
    );
    let mut end = payload(CC_STOP);
    end["hook_event_name"] = json!("SessionEnd");
    assert!(env.hook_json("sp-event", &end).status.success());
    assert_eq!(
        env.query::<String>(&format!(
            "select state from attention where attention_id='{id}'"
        )),
        vec!["open"]
    );

    // An hour later on the machine's clock (and on the answer's).
    env.advance_clock(Duration::from_secs(3600));
    // This test process reads the real clock: the machine's is an hour ahead.
    let now = spctl::clock::now_ms() + 3_600_000;
    let answer = "01KBPARKED0000000000000001";
    env.receiver.enqueue_raw(
        &session_key(),
        json!({"id": answer, "kind": "permission.answer", "for": id, "decision": "allow",
               "at": spctl::clock::format_ms(now),
               "expires_at": spctl::clock::format_ms(now + 120_000)}),
    );
    assert!(
        until(Duration::from_secs(15), || env.query::<String>(&format!(
            "select state from messages where id='{answer}'"
        )) == vec!["queued"]),
        "sp-sync stored the answer for the parked prompt: {}",
        env.log()
    );
    // sp-sync asks the runner for one run resuming the session with no text, and only one
    // however many passes see the answer waiting.
    let continue_runs = || {
        env.query::<String>(
            "select argv from runs where kind='continue' and session_key='claude-code:9c41e7d2-58b3-4f0a-a6e1-3d72c08b5f94'",
        )
    };
    assert!(
        until(Duration::from_secs(15), || !continue_runs().is_empty()),
        "a run resumes the parked session: {}",
        env.log()
    );
    let argv: Vec<String> = serde_json::from_str(&continue_runs()[0]).unwrap();
    assert_eq!(argv[1..4], ["-p", "--resume", CC_SESSION]);
    assert!(
        !argv
            .iter()
            .any(|a| a.contains("skip") || a.contains("bypass")),
        "{argv:?}"
    );
    // Let sp-sync's runner pass over it a few times more (it looks every second at most).
    assert!(!until(Duration::from_secs(3), || continue_runs().len() > 1));
    // The resumed run re-fires the same call: the answer, once, in PreToolUse's shape.
    let out = headless_pre_tool_use(&env, &pre);
    assert_eq!(
        stdout(&out),
        "{\"hookSpecificOutput\":{\"hookEventName\":\"PreToolUse\",\"permissionDecision\":\"allow\"}}\n"
    );
    let ack = ack_of(&env, answer);
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    // A second resume of the same call (launched twice) is not allowed by that answer again.
    let out = headless_pre_tool_use(&env, &pre);
    assert!(!stdout(&out).contains("allow"), "{}", stdout(&out));
    // One final outcome (a resent ack repeats it; the receiver lists duplicates).
    let mut finals: Vec<String> = env
        .acks_for(answer)
        .iter()
        .filter(|a| a["outcome"] != "taken")
        .map(|a| a["outcome"].as_str().unwrap_or_default().to_string())
        .collect();
    finals.dedup();
    assert_eq!(finals, ["delivered"]);
}
