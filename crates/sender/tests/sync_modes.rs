//! sp-sync's run modes, its single-instance rule, hooks starting it, and pauses that hold
//! until the config changes (DECISIONS 2).
mod common;
use common::env::*;
use serde_json::json;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn session_start(env: &Env, id: &str) {
    let out = env.hook_json(
        "sp-event",
        &json!({"session_id": id, "hook_event_name": "SessionStart", "source": "startup", "cwd": "/tmp"}),
    );
    assert!(out.status.success() && out.stdout.is_empty());
}

#[test]
fn once_polls_without_waiting_and_sends_everything() {
    let env = Env::new();
    session_start(&env, "s-once");
    // An answer for a prompt never asked: decided at once (failed), so one pass acks it.
    let cancel = env.receiver.enqueue(
        "claude-code:s-once",
        json!({"kind": "permission.answer", "for": "perm-never-asked", "decision": "deny"}),
    );
    let started = Instant::now();
    let out = env.sync_once();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(10), "no long wait");
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
    // One pass: the session.started event and the ack went out.
    assert_eq!(env.events_of("session.started").len(), 1);
    let acks = env.acks_for(cancel["id"].as_str().unwrap());
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0]["outcome"], "failed");
    assert_eq!(acks[0]["detail"], "unknown attention");
    let polls: Vec<String> = env
        .receiver
        .requests()
        .iter()
        .filter(|r| r.route == Some(spreceiver::Route::Poll))
        .map(|r| r.url.clone())
        .collect();
    assert_eq!(polls.len(), 1);
    assert!(
        polls[0].contains("session=claude-code:s-once") && polls[0].contains("wait=0"),
        "{polls:?}"
    );
}

#[test]
fn a_second_sp_sync_exits_at_once() {
    let mut env = Env::new();
    env.start_sync();
    // The daemon logs its start once it holds the lock.
    assert!(
        until(Duration::from_secs(10), || env
            .log()
            .contains("start (Daemon")),
        "{}",
        env.log()
    );
    let started = Instant::now();
    let mut c = env.cmd("sp-sync");
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let out = c.output().unwrap();
    assert!(out.status.success());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "exits at once: {:?}",
        started.elapsed()
    );
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
}

#[test]
fn bounded_run_exits_by_itself() {
    let env = Env::new();
    session_start(&env, "s-bounded");
    let started = Instant::now();
    let mut c = env.cmd("sp-sync");
    c.args(["--for", "3"]);
    let out = run_with_stdin(c, b"");
    assert!(out.status.success());
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(8),
        "took {took:?}"
    );
    // Its polls never held past the deadline.
    for r in env
        .receiver
        .requests()
        .iter()
        .filter(|r| r.route == Some(spreceiver::Route::Poll))
    {
        let wait: u64 = r.url.rsplit("wait=").next().unwrap().parse().unwrap();
        assert!(wait <= 2, "{}", r.url);
    }
}

#[test]
fn bad_config_is_refused_with_how_to_fix_it() {
    let env = Env::new();
    let cases = [
        (
            json!({"sinks": [{"name": "x", "url": "http://example.com", "tier": 0}]}),
            "use https://",
        ),
        (
            json!({"sinks": [{"name": "x", "url": "https://a.example", "tier": 0, "control": true}]}),
            "add \"token\"",
        ),
        (
            json!({"sinks": [{"name": "x", "url": "https://a.example", "tier": 9}]}),
            "tiers are 0 to 3",
        ),
        (json!({"sinks": [], "extra": 1}), "not valid"),
    ];
    for (config, hint) in cases {
        env.write_config(config);
        let out = run_with_stdin(env.cmd("sp-sync"), b"");
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(hint), "{err}");
    }
    // A token others can read is refused, naming the fix.
    env.write_config(json!({"sinks": [{"name": "x", "url": "https://a.example", "tier": 0, "token": "secret-token-value"}]}));
    set_mode(&env.config, 0o644);
    let out = run_with_stdin(env.cmd("sp-sync"), b"");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("chmod 600"), "{err}");
    assert!(!err.contains("secret-token-value"));
}

#[test]
fn a_hook_starts_sp_sync_and_the_prompt_reaches_the_receiver_within_a_second() {
    let env = Env::with(Default::default(), json!({"permission_wait_s": 3}));
    let mut c = env.cmd("sp-permission");
    c.env_remove("SESSIONPIPE_NO_SPAWN")
        .args(["--harness", "claude-code"]);
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = c.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(payload(CC_PERMISSION).to_string().as_bytes())
        .unwrap();
    let ev = env.wait_event(
        "attention.needed",
        json!({"attention_id": CC_PERMISSION_ID}),
        Duration::from_secs(5),
    );
    assert!(ev.is_some());
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "took {took:?}");
    let out = finish(child, Duration::from_secs(10));
    assert!(out.status.success() && out.stdout.is_empty());
    // The started sp-sync is a bounded run; stop it so it does not outlive the test.
    let log = env.log();
    let pid: i32 = log
        .split("started sp-sync (pid ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the hook logged the sp-sync it started: {log}"));
    unsafe { libc::kill(pid, libc::SIGTERM) };
}

#[test]
fn unauthorized_pauses_control_until_the_config_changes() {
    let mut env = Env::new();
    let url = env.receiver.url();
    env.write_config(json!({"sinks": [{"name": "phone", "url": url, "tier": 1, "control": true, "token": "wrong-token"}]}));
    session_start(&env, "s-paused");
    env.start_sync();
    assert!(until(Duration::from_secs(10), || {
        env.query::<Option<String>>("select control_paused from sinks where name='phone'")
            .first()
            .cloned()
            .flatten()
            .is_some()
    }));
    let reason: Vec<String> = env.query("select control_paused from sinks");
    assert!(reason[0].contains("401"), "{reason:?}");
    // No retry loop while paused.
    let polls = env.receiver.polls();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(env.receiver.polls(), polls, "no polls while paused");
    assert!(
        !env.log().contains("wrong-token"),
        "the token never reaches the log"
    );
    // The person fixes the token: the pause lifts and a message decided at once gets its ack.
    let m = env.receiver.enqueue(
        "claude-code:s-paused",
        json!({"kind": "permission.answer", "for": "perm-never-asked", "decision": "deny"}),
    );
    std::thread::sleep(Duration::from_millis(1100)); // a new mtime second
    env.write_config(json!({"sinks": [{"name": "phone", "url": url, "tier": 1, "control": true, "token": env.receiver.token()}]}));
    let ack = env
        .receiver
        .wait_ack(m["id"].as_str().unwrap(), Duration::from_secs(20));
    assert_eq!(ack.expect("ack after the fix")["outcome"], "failed");
    assert_eq!(
        env.query::<Option<String>>("select control_paused from sinks"),
        vec![None]
    );
}

/// DECISIONS 28: the sp-sync a hook starts (`--while-live`) stays up while sessions keep
/// reporting, however long that is, and stops by itself once they have been quiet for its
/// idle time with nothing left to send. (A session's report time is written at most once a
/// minute, so the real idle time, 30 min, is far above that; here SessionStart, which always
/// writes, stands for a turn's hooks, so a 4 s idle time can be tested.)
#[test]
fn while_live_stays_up_while_sessions_report_and_stops_when_they_are_quiet() {
    let env = Env::new();
    session_start(&env, "s-live");
    let mut sync = env
        .cmd("sp-sync")
        .args(["--while-live", "4"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Ten seconds of a turn whose hooks report every second: more than twice the idle time.
    let turn = Instant::now();
    while turn.elapsed() < Duration::from_secs(10) {
        let out = env.hook_json(
            "sp-event",
            &json!({"session_id": "s-live", "hook_event_name": "SessionStart", "source": "resume", "cwd": "/tmp"}),
        );
        assert!(out.status.success());
        assert!(
            sync.try_wait().unwrap().is_none(),
            "sp-sync stopped while hooks were reporting: {}",
            env.log()
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let status = wait_timeout(&mut sync, Duration::from_secs(30))
        .expect("sp-sync --while-live did not stop once the hooks were quiet");
    assert!(status.success());
    assert!(
        env.log().contains("no hook has reported for"),
        "{}",
        env.log()
    );
}

#[test]
fn a_hook_starts_sp_sync_in_while_live_mode() {
    let env = Env::new();
    let mut c = env.cmd("sp-event");
    c.env_remove("SESSIONPIPE_NO_SPAWN")
        .args(["--harness", "claude-code"]);
    let out = run_with_stdin(
        c,
        json!({"session_id": "s-spawn", "hook_event_name": "SessionStart", "source": "startup", "cwd": "/tmp"})
            .to_string()
            .as_bytes(),
    );
    assert!(out.status.success());
    assert!(
        until(Duration::from_secs(10), || env
            .log()
            .contains("start (WhileLive(")),
        "{}",
        env.log()
    );
    // Stop the detached sp-sync this test started.
    let pids: Vec<i32> = env
        .log()
        .lines()
        .filter(|l| l.contains("start (WhileLive("))
        .filter_map(|l| l.split("sp-sync[").nth(1)?.split(']').next()?.parse().ok())
        .collect();
    for pid in pids {
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
}

/// Issue 37: the config breaks while sp-sync runs. sp-sync waits for the fix instead of
/// stopping, and once it is fixed sends what the hooks stored meanwhile without another
/// hook; a permission prompt a hook saw meanwhile (when no receiver could answer it and
/// nothing waited for it) reaches the receiver already cleared, never as one to answer.
#[test]
fn a_broken_config_is_waited_out_and_its_prompts_arrive_cleared() {
    let env = Env::new();
    let good = std::fs::read_to_string(&env.config).unwrap();
    session_start(&env, "s-before");
    // The mode the hooks start it in.
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut sync = Killed(
        env.cmd("sp-sync")
            .arg("--while-live")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(
        env.receiver
            .wait_event(Duration::from_secs(10), |e| e["session"]["id"]
                == "s-before")
            .is_some(),
        "sp-sync runs: {}",
        env.log()
    );
    std::thread::sleep(Duration::from_millis(1100)); // a new mtime second
    std::fs::write(&env.config, "{\"sinks\": [ {\"name\": \"phone\",").unwrap();
    assert!(
        until(Duration::from_secs(10), || env
            .log()
            .contains("waiting for the config to be fixed")),
        "{}",
        env.log()
    );
    // A prompt and a new session while the config is broken: the hooks store them.
    let perm = env.hook(
        "sp-permission",
        &serde_json::to_vec(&payload(CC_PERMISSION)).unwrap(),
    );
    assert!(perm.status.success() && perm.stdout.is_empty());
    session_start(&env, "s-while-broken");
    std::thread::sleep(Duration::from_millis(1100));
    assert!(
        sync.0.try_wait().unwrap().is_none(),
        "sp-sync still runs: {}",
        env.log()
    );
    std::fs::write(&env.config, good).unwrap();
    assert!(
        env.receiver
            .wait_event(Duration::from_secs(15), |e| e["session"]["id"]
                == "s-while-broken")
            .is_some(),
        "sent after the fix with no hook: {}",
        env.log()
    );
    let cleared = env.receiver.wait_event(Duration::from_secs(10), |e| {
        e["type"] == "attention.cleared" && e["data"]["attention_id"] == CC_PERMISSION_ID
    });
    assert_eq!(
        cleared.expect("the prompt arrives cleared")["data"]["how"],
        "timeout"
    );
}
