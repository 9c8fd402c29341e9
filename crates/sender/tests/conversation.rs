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
    write_turn(
        &t,
        "deploy it with API_TOKEN=hunter22 please",
        "Deployed; the site is up.",
    );
    assert!(env.hook_json("sp-event", &session_start()).status.success());
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

/// A Claude Code transcript at `path` holding one turn: the person's prompt and the answer.
fn write_turn(path: &std::path::Path, prompt: &str, answer: &str) {
    let lines = [
        json!({"type": "user", "message": {"content": prompt}}),
        json!({"type": "assistant", "message": {"content": [{"type": "text", "text": answer}]}}),
    ];
    let body: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(path, body.join("\n") + "\n").unwrap();
}

/// The fixture session's SessionStart.
fn session_start() -> Value {
    let mut start = payload(CC_STOP);
    start["hook_event_name"] = json!("SessionStart");
    start["source"] = json!("startup");
    start
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

/// DECISIONS 40 on the page, in headless Chromium: a session reads as a conversation (the
/// turn's prompt and answer, as its tier-2 sink got them), its status follows it (idle,
/// waiting for you, working, idle), the message box of an idle session says "Send" and that
/// it resumes the session, and the answer to that message grows on the page as its
/// `progress` acks come. The test sends those acks over the protocol, as the machine's run
/// that resumes a session sends them (DECISIONS 38): the page is what is under test here.
#[test]
fn the_page_shows_the_conversation_its_status_and_a_reply_as_it_grows() {
    use common::browser::{missing_browser_deps, Browser};
    use common::http::post;
    use common::receiver::{Machine, SpReceiver, LOGIN, TOKEN};
    if let Some(why) = missing_browser_deps() {
        panic!("the browser test cannot run: {why}");
    }
    let dir = tempfile::tempdir().unwrap();
    let receiver = SpReceiver::start(&dir.path().join("receiver"), &[]);
    let mut machine = Machine::new(
        dir.path(),
        &receiver.url,
        &dir.path().join("receiver/token"),
    );
    let sink = json!({"sinks": [{"name": "phone", "url": receiver.url, "tier": 2, "control": true,
        "token_file": dir.path().join("receiver/token")}]});
    std::fs::write(&machine.config, sink.to_string()).unwrap();
    machine.start_sync();
    let key = format!("claude-code:{CC_SESSION}");
    let card = format!("article[data-session=\"{key}\"]");
    let state = format!("{card} .state");

    let mut b = Browser::launch();
    b.call(json!({"op": "goto", "url": format!("{}/", receiver.url)}));
    b.call(json!({"op": "fill", "selector": "#token", "value": LOGIN}));
    b.click("#login-form button[type=submit]");
    b.wait("#conn[data-state=\"live\"]");

    // One turn ran at the terminal: the page shows what the person asked and what the agent
    // answered (the secret in the prompt masked), and the session idle.
    let cwd = machine.home.join("src/api");
    let t = machine.home.join("transcript.jsonl");
    write_turn(
        &t,
        "run the tests with API_TOKEN=hunter22",
        "All 42 tests pass.",
    );
    let mut start = session_start();
    start["cwd"] = json!(cwd);
    assert!(machine.hook("sp-event", &start).status.success());
    let mut stop = payload(CC_STOP);
    stop["cwd"] = json!(cwd);
    stop["transcript_path"] = json!(t);
    stop.as_object_mut()
        .unwrap()
        .remove("last_assistant_message");
    let out = machine.hook("sp-stop", &stop);
    assert!(out.status.success() && out.stdout.is_empty());
    let turn = format!("{card} li.turn");
    b.wait(&turn);
    assert_eq!(
        b.text(&format!("{turn} .said")),
        "run the tests with API_TOKEN=[REDACTED 8 chars]"
    );
    assert_eq!(b.text(&format!("{turn} .reply")), "All 42 tests pass.");
    b.wait(&format!("{state}[data-state=\"idle\"]"));
    assert_eq!(b.text(&state), "idle");
    let meta = b.text(&format!("{card} .meta"));
    assert!(!meta.contains(&CC_SESSION[..8]), "no internal id: {meta}");

    // A permission prompt: waiting for you; answered, the agent works on.
    let mut ask = payload(CC_PERMISSION);
    ask["cwd"] = json!(cwd);
    let hook = machine.spawn_hook("sp-permission", &ask);
    b.wait(&format!("{state}[data-state=\"waiting\"]"));
    assert_eq!(b.text(&state), "waiting for you");
    let attention = format!("[data-attention=\"{CC_PERMISSION_ID}\"]");
    b.wait(&attention);
    b.click(&format!("{attention} button.allow"));
    let out = finish(hook, Duration::from_secs(30));
    assert!(stdout(&out).contains("allow"), "{}", stdout(&out));
    b.wait(&format!("{state}[data-state=\"working\"]"));
    assert_eq!(b.text(&state), "working");
    // The decision reads as the call and what was decided, never the prompt's id.
    let answer = format!("{card} li.msg[data-kind=\"permission.answer\"]");
    b.wait(&format!("{answer}[data-status=\"delivered\"]"));
    let line = b.text(&answer);
    assert!(line.contains("Allow Bash: echo hi > out.txt"), "{line}");
    assert!(!line.contains(CC_PERMISSION_ID), "{line}");

    // The turn ends: idle again, and the message box says what Send does now.
    let mut stop2 = payload(CC_STOP);
    stop2["cwd"] = json!(cwd);
    assert!(machine.hook("sp-stop", &stop2).status.success());
    b.wait(&format!("{state}[data-state=\"idle\"]"));
    assert_eq!(b.text(&format!("{card} button.queue")), "Send");
    let text = "now add a test for the parser";
    b.send_text(&card, text, "queue");
    b.call(
        json!({"op": "wait_text", "selector": format!("{card} .form-status"),
        "text": "Sent: the machine resumes the session with it.", "timeout": 30000}),
    );
    let prompt = format!("{card} li.msg[data-kind=\"prompt\"]");
    let id = b.prompt_id_taken(&prompt);
    machine.assert_stored(&id);

    // The answer grows on the page as the progress acks come, then the final one.
    let ack = |outcome: &str, reply: &str, seq: Option<u64>| {
        let mut a = json!({"id": id, "outcome": outcome, "at": now(), "reply": reply});
        match seq {
            Some(s) => a["seq"] = json!(s),
            None => {
                a["mode"] = json!("resume");
            }
        }
        let r = post(
            &format!("{}/api/sessionpipe/v1/control/ack", receiver.url),
            &[
                ("authorization", &format!("Bearer {TOKEN}")),
                ("sessionpipe-protocol", "1"),
            ],
            "application/json",
            &json!({"acks": [a]}).to_string(),
        );
        assert!(r.status / 100 == 2, "{} {}", r.status, r.text);
    };
    let reply = format!("{prompt}[data-message=\"{id}\"] div.reply");
    ack("progress", "Adding a test", Some(1));
    b.call(
        json!({"op": "wait_text", "selector": reply, "text": "Adding a test", "timeout": 30000}),
    );
    assert_eq!(
        b.text(&format!("{prompt}[data-message=\"{id}\"] .outcome")),
        "answering…"
    );
    ack("progress", "Adding a test for the parser: written", Some(2));
    b.call(json!({"op": "wait_text", "selector": reply, "text": "for the parser: written", "timeout": 30000}));
    ack(
        "delivered",
        "Added tests/parser.rs; all 43 tests pass.",
        None,
    );
    let done = format!("{prompt}[data-message=\"{id}\"][data-status=\"delivered\"]");
    b.wait(&format!("{done} div.reply[data-mode=\"resume\"]"));
    assert_eq!(
        b.text(&format!("{done} div.reply")),
        "Added tests/parser.rs; all 43 tests pass."
    );

    // The session ends: the page keeps it, says so, and its Send still goes (a resume).
    let mut end = payload(CC_STOP);
    end["hook_event_name"] = json!("SessionEnd");
    end["reason"] = json!("exit");
    end["cwd"] = json!(cwd);
    assert!(machine.hook("sp-event", &end).status.success());
    b.wait(&format!("{state}[data-state=\"ended\"]"));
    assert_eq!(b.text(&state), "ended");
    assert_eq!(b.text(&format!("{card} button.queue")), "Send");
    b.send_text(&card, "one more: the changelog", "queue");
    b.call(
        json!({"op": "wait_text", "selector": format!("{card} .form-status"),
        "text": "Sent: the machine resumes the session with it.", "timeout": 30000}),
    );
}

/// Now as the protocol writes it: UTC, milliseconds, `Z`.
fn now() -> String {
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    time::OffsetDateTime::now_utc().format(&fmt).unwrap()
}

/// DECISIONS 40: `sp status` and `sp queue` say what each session is doing in the page's
/// words: idle after its start, waiting for you while a prompt is open, working once it is
/// settled, idle at the turn's end, ended after SessionEnd.
#[test]
fn sp_status_and_sp_queue_say_what_each_session_is_doing() {
    let env = Env::with(opts(1), json!({"permission_wait_s": 2}));
    let key = format!("claude-code:{CC_SESSION}");
    let status = |env: &Env| -> String {
        let out = env.cmd("sp").args(["status", "--json"]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let text = env.cmd("sp").arg("status").output().unwrap();
        let text = String::from_utf8_lossy(&text.stdout).into_owned();
        match v["live_sessions"].as_array().unwrap().first() {
            Some(s) => {
                let word = s["status"].as_str().unwrap().to_string();
                assert!(text.contains(&format!("  {word}, last event ")), "{text}");
                word
            }
            None => "not live".into(),
        }
    };
    assert!(env.hook_json("sp-event", &session_start()).status.success());
    assert_eq!(status(&env), "idle");
    let hook = env.spawn_hook("sp-permission", &payload(CC_PERMISSION));
    assert!(until(Duration::from_secs(10), || env.query::<i64>(
        "select count(*) from attention where state='open'"
    ) == [1]));
    assert_eq!(status(&env), "waiting for you");
    // Nobody answers: the hook gives up, the prompt is cleared, the turn goes on.
    let out = finish(hook, Duration::from_secs(20));
    assert!(out.status.success() && out.stdout.is_empty());
    assert_eq!(status(&env), "working");
    assert!(env.hook_json("sp-stop", &payload(CC_STOP)).status.success());
    assert!(env.sync_once().status.success());
    assert_eq!(status(&env), "idle");
    // `sp queue` names each message's session with the same word.
    env.receiver
        .enqueue(&key, json!({"kind": "prompt", "text": "and the docs"}));
    assert!(env.sync_once().status.success());
    let queue = env.cmd("sp").arg("queue").output().unwrap();
    let queue = String::from_utf8_lossy(&queue.stdout).into_owned();
    assert!(queue.contains(&format!("{key} (idle)")), "{queue}");
    let mut end = payload(CC_STOP);
    end["hook_event_name"] = json!("SessionEnd");
    end["reason"] = json!("exit");
    assert!(env.hook_json("sp-event", &end).status.success());
    assert_eq!(status(&env), "not live");
    let queue = env.cmd("sp").args(["queue", "--json"]).output().unwrap();
    let v: Value = serde_json::from_slice(&queue.stdout).unwrap();
    assert_eq!(v["messages"][0]["session_status"], "ended");
}

/// DECISIONS 40: `tool.started` and `tool.ended` (tier 1) from Claude Code's PreToolUse and
/// PostToolUse / PostToolUseFailure, with the tool and a one-line redacted summary, in the
/// order they happened; behind a quiet marker they are spooled, not written to the database.
#[test]
fn tool_events_reach_a_tier_1_sink_in_order_spooled_behind_the_quiet_marker() {
    let env = Env::with(opts(1), json!({}));
    assert!(env.hook_json("sp-event", &session_start()).status.success());
    let call = |event: &str, command: &str| {
        let mut p = payload(CC_STOP);
        p["hook_event_name"] = json!(event);
        p["tool_name"] = json!("Bash");
        p["tool_input"] = json!({"command": command, "description": "run it"});
        p["tool_use_id"] = json!("toolu_01");
        if event != "PreToolUse" {
            p["tool_response"] = json!({});
        }
        let out = env.hook_json("sp-event", &p);
        assert!(out.status.success() && out.stdout.is_empty() && out.stderr.is_empty());
    };
    // Spooled events: a turn end is a file, tool events are lines of the session's log.
    let spooled = || match std::fs::read_dir(env.state.join("spool")) {
        Ok(d) => d
            .map(|e| {
                let path = e.unwrap().path();
                match path.extension().and_then(|x| x.to_str()) {
                    Some("tools" | "drain") => {
                        std::fs::read_to_string(&path).unwrap().lines().count()
                    }
                    _ => 1,
                }
            })
            .sum(),
        Err(_) => 0,
    };
    let files = || std::fs::read_dir(env.state.join("spool")).map_or(0, |d| d.count());
    // The first call stores its event and, nothing being pending, makes the quiet marker;
    // the next ones spool theirs without opening the database.
    call("PreToolUse", "cargo test\n  --quiet");
    assert_eq!(spooled(), 0);
    call("PostToolUse", "cargo test\n  --quiet");
    let curl = "curl -H 'Authorization: Bearer abc123' https://x";
    call("PreToolUse", curl);
    call("PostToolUseFailure", curl);
    assert_eq!(spooled(), 3, "log: {}", env.log());
    assert_eq!(
        files(),
        1,
        "one log for the session's tool events, not a file each"
    );
    assert_eq!(env.log().matches("the database not opened").count(), 3);
    assert!(env.sync_once().status.success());
    assert!(until(Duration::from_secs(10), || env
        .receiver
        .events()
        .iter()
        .filter(|e| e["type"] == "tool.ended")
        .count()
        == 2));
    let mut got: Vec<Value> = env
        .receiver
        .events()
        .into_iter()
        .filter(|e| e["type"].as_str().unwrap().starts_with("tool."))
        .collect();
    got.sort_by_key(|e| e["session"]["seq"].as_i64());
    for e in &got {
        common::schema::assert_valid("event.json", e);
    }
    let seen: Vec<(Value, Value)> = got
        .iter()
        .map(|e| (e["type"].clone(), e["data"].clone()))
        .collect();
    let shown = "curl -H 'Authorization: Bearer [REDACTED 6 chars]' https://x";
    assert_eq!(
        seen,
        [
            (
                json!("tool.started"),
                json!({"tool": "Bash", "summary": "cargo test --quiet"})
            ),
            (
                json!("tool.ended"),
                json!({"tool": "Bash", "summary": "cargo test --quiet", "ok": true})
            ),
            (
                json!("tool.started"),
                json!({"tool": "Bash", "summary": shown})
            ),
            (
                json!("tool.ended"),
                json!({"tool": "Bash", "summary": shown, "ok": false})
            ),
        ]
    );
    assert_eq!(spooled(), 0);
    // A tier-0 sink: no tool event is recorded at all.
    env.write_config(json!({"sinks": [
        {"name": "phone", "url": env.receiver.url(), "tier": 0, "control": true, "token": env.receiver.token()},
    ]}));
    call("PreToolUse", "ls");
    assert_eq!(spooled(), 0);
    assert_eq!(
        env.query::<i64>("select count(*) from events where type like 'tool.%'"),
        [4]
    );
}
