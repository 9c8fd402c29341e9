//! The quiet marker (store/quiet.rs): hooks with nothing pending skip the database, and no
//! writer can leave a marker saying "quiet" while a prompt, a cancel, an open attention or
//! a stop mark waits. The real binaries, run as Claude Code runs them, against a real
//! receiver and sp-sync, in a temp HOME.
mod common;
use common::cc_session::{make_live, turn_end_reaches_the_receiver};
use common::chaos::{sigkill, spawn_sync, stop_reason};
use common::env::*;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

const FAST: &str = "quiet marker current";

fn key() -> String {
    format!("claude-code:{CC_SESSION}")
}

fn markers(env: &Env) -> Vec<PathBuf> {
    match std::fs::read_dir(env.state.join("quiet")) {
        Ok(d) => d.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    }
}

/// How many hook runs so far took the fast path (the log says so at debug level).
fn fast_runs(env: &Env) -> usize {
    env.log().matches(FAST).count()
}

fn event(name: &str) -> Value {
    let mut p = payload(CC_STOP);
    p["hook_event_name"] = json!(name);
    if name.ends_with("ToolUse") {
        p["tool_name"] = json!("Bash");
        p["tool_input"] = json!({"command": "true"});
        p["tool_response"] = json!({});
    }
    p
}

/// Runs sp-event with this Claude Code event; returns what it printed.
fn hook(env: &Env, name: &str) -> String {
    let out = env.hook_json("sp-event", &event(name));
    assert!(out.status.success() && out.stderr.is_empty());
    stdout(&out)
}

fn stop(env: &Env) -> Option<String> {
    let out = env.hook_json("sp-stop", &payload(CC_STOP));
    assert!(out.status.success() && out.stderr.is_empty());
    stop_reason(&stdout(&out))
}

/// A PostToolUse with nothing pending leaves the marker; the next one takes the fast path.
fn settle(env: &Env) {
    assert_eq!(hook(env, "PostToolUse"), "");
    assert_eq!(markers(env).len(), 1, "a quiet PostToolUse made the marker");
    let before = fast_runs(env);
    assert_eq!(hook(env, "PostToolUse"), "");
    assert_eq!(
        fast_runs(env),
        before + 1,
        "the next one skipped the database"
    );
}

fn stored(env: &Env, id: &str) {
    common::cc_session::stored_within(env, id, Duration::from_secs(15));
}

fn enqueue(env: &Env, message: Value) -> String {
    env.receiver.enqueue(&key(), message)["id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn state_of(env: &Env, id: &str) -> String {
    env.query::<String>(&format!(
        "select coalesce(outcome, state) from messages where id='{id}'"
    ))[0]
        .clone()
}

fn synced_env() -> Env {
    let mut env = Env::new();
    env.start_sync();
    make_live(&env);
    env
}

/// A synced, settled session (the marker made, the fast path taken) and then message `m`
/// queued and stored; returns the message's id.
fn settled_then_queued(m: Value) -> (Env, String) {
    let env = synced_env();
    settle(&env);
    let id = enqueue(&env, m);
    stored(&env, &id);
    (env, id)
}

/// Opens a Bash permission prompt `attention_id` of the session in the store, as its hook
/// does (open for ten minutes); returns the store.
fn open_bash_prompt(env: &Env, attention_id: &str) -> spctl::store::Store {
    let session = spctl::store::SessionRef {
        harness: "claude-code".into(),
        session_id: CC_SESSION.into(),
        cwd: None,
        event: "PermissionRequest".into(),
        permission_mode: None,
    };
    let mut store = spctl::store::open(&env.db_path(), Duration::from_secs(5)).unwrap();
    let far = spctl::clock::now_ms() + 600_000;
    store
        .open_attention(&session, attention_id, Some("Bash"), None, far, 1)
        .unwrap();
    store
}

#[test]
fn a_prompt_queued_while_the_marker_exists_is_delivered_by_the_next_stop() {
    let (env, id) = settled_then_queued(json!({"kind": "prompt", "text": "and the changelog"}));
    assert!(
        markers(&env).is_empty(),
        "storing the prompt removed the marker"
    );
    // A tool seam leaves a `queue` prompt for the turn's end, and makes no marker while it
    // waits.
    let fast = fast_runs(&env);
    for _ in 0..3 {
        assert_eq!(hook(&env, "PostToolUse"), "");
    }
    assert!(markers(&env).is_empty());
    assert_eq!(fast_runs(&env), fast);
    let reason = stop(&env).expect("the Stop blocks with the prompt");
    assert!(reason.ends_with("and the changelog"), "{reason}");
    assert_eq!(state_of(&env, &id), "delivered");
    // Its turn runs: no marker, so the Stop that ends it reads the turn's text for the
    // prompt's final ack (DECISIONS 38).
    assert_eq!(hook(&env, "PostToolUse"), "");
    assert!(markers(&env).is_empty());
    assert_eq!(stop(&env), None);
    assert_eq!(
        env.query::<String>(&format!("select outcome from acks where message_id='{id}'")),
        vec!["delivered"]
    );
    // Its turn ended: quiet again, and the marker comes back.
    settle(&env);
}

#[test]
fn a_steer_prompt_queued_while_the_marker_exists_lands_at_the_next_tool() {
    let env = synced_env();
    settle(&env);
    let id = enqueue(
        &env,
        json!({"kind": "prompt", "text": "use staging", "mode": "steer"}),
    );
    stored(&env, &id);
    let out = hook(&env, "PostToolUse");
    assert!(out.contains("use staging"), "{out}");
    assert_eq!(state_of(&env, &id), "delivered");
}

#[test]
fn a_cancel_and_its_stop_mark_are_never_hidden_by_the_marker() {
    let (env, id) = settled_then_queued(json!({"kind": "cancel", "note": "Wrong branch."}));
    assert!(markers(&env).is_empty());
    let out = hook(&env, "PostToolUse");
    assert!(out.contains("\"continue\":false"), "{out}");
    assert_eq!(state_of(&env, &id), "delivered");
    // The stop mark now stands until the turn's end: no marker while it does, so the Stop
    // reads it and ends the turn as interrupted.
    let fast = fast_runs(&env);
    for _ in 0..3 {
        assert_eq!(hook(&env, "PostToolUse"), "");
    }
    assert!(markers(&env).is_empty());
    assert_eq!(fast_runs(&env), fast);
    assert_eq!(stop(&env), None);
    assert_eq!(
        env.query::<String>(
            "select json_extract(data, '$.reason') from events where type='turn.ended'"
        ),
        ["interrupt"]
    );
    settle(&env);
}

#[test]
fn an_open_attention_removes_the_marker_and_the_terminal_answer_clears_it() {
    let mut env = Env::with(Default::default(), json!({"permission_wait_s": 60}));
    env.start_sync();
    make_live(&env);
    settle(&env);
    let waiting = env.spawn_hook("sp-permission", &payload(CC_PERMISSION));
    env.wait_event(
        "attention.needed",
        json!({"attention_id": CC_PERMISSION_ID}),
        Duration::from_secs(15),
    )
    .expect("attention.needed");
    assert!(markers(&env).is_empty(), "opening the attention removed it");
    // The person answered in the terminal: the tool ran, PostToolUse clears the attention.
    let mut post = payload(CC_PERMISSION);
    post["hook_event_name"] = json!("PostToolUse");
    post["tool_response"] = json!({"stdout": "", "stderr": "", "interrupted": false});
    post["tool_use_id"] = json!("toolu_01");
    let fast = fast_runs(&env);
    let out = env.hook_json("sp-event", &post);
    assert!(out.status.success() && out.stdout.is_empty());
    assert_eq!(fast_runs(&env), fast, "the full path ran");
    let out = finish(waiting, Duration::from_secs(15));
    assert!(out.status.success() && out.stdout.is_empty());
    assert_eq!(
        env.query::<String>(&format!(
            "select how from attention where attention_id='{CC_PERMISSION_ID}'"
        )),
        ["answered"]
    );
    settle(&env);
}

/// With no sink a Stop has nothing to tell: it too skips the database behind a marker. The
/// writers of the library (the store API sp-sync and the hooks use) remove it: an attention
/// opened, a stop mark set, the session ended.
#[test]
fn with_no_sink_the_stop_skips_the_database_until_a_writer_gives_it_work() {
    let env = Env::new();
    env.write_config(json!({"sinks": []}));
    make_live(&env);
    assert_eq!(stop(&env), None);
    assert_eq!(markers(&env).len(), 1, "a quiet Stop made the marker");
    let fast = fast_runs(&env);
    assert_eq!(stop(&env), None);
    assert_eq!(fast_runs(&env), fast + 1);

    let mut store = open_bash_prompt(&env, "perm-x");
    assert!(markers(&env).is_empty());
    // The Stop ends the turn: the open attention is cancelled.
    assert_eq!(stop(&env), None);
    assert_eq!(
        env.query::<String>("select how from attention where attention_id='perm-x'"),
        ["cancelled"]
    );
    assert_eq!(fast_runs(&env), fast + 1);

    assert_eq!(stop(&env), None);
    assert_eq!(markers(&env).len(), 1);
    store.mark_stopped(&key()).unwrap();
    assert!(markers(&env).is_empty());
    assert_eq!(stop(&env), None);
    assert_eq!(
        env.query::<Option<i64>>(&format!(
            "select stopped_ms from sessions where key='{}'",
            key()
        )),
        [None],
        "the Stop read and cleared the stop mark"
    );

    assert_eq!(stop(&env), None);
    assert_eq!(markers(&env).len(), 1);
    let mut end = payload(CC_STOP);
    end["hook_event_name"] = json!("SessionEnd");
    assert!(env.hook_json("sp-event", &end).status.success());
    assert!(markers(&env).is_empty(), "an ended session has no marker");
    // An ended session is made live again by its next event, through the database.
    let fast = fast_runs(&env);
    assert_eq!(hook(&env, "PostToolUse"), "");
    assert_eq!(fast_runs(&env), fast);
    assert_eq!(
        env.query::<Option<String>>(&format!(
            "select ended_at from sessions where key='{}'",
            key()
        )),
        [None]
    );
}

/// A marker counts for a minute after the session was touched (the same minute the store
/// writes `last_event_ms` by), and only in a private state folder of this user.
#[test]
fn an_old_marker_or_a_loose_state_folder_sends_the_hook_to_the_database() {
    let mut env = synced_env();
    settle(&env);
    let marker = markers(&env).pop().unwrap();
    let old = std::time::SystemTime::now() - Duration::from_secs(61);
    let f = std::fs::File::options().write(true).open(&marker).unwrap();
    f.set_modified(old).unwrap();
    drop(f);
    let before: i64 = env.query(&format!(
        "select last_event_ms from sessions where key='{}'",
        key()
    ))[0];
    let fast = fast_runs(&env);
    assert_eq!(hook(&env, "PostToolUse"), "");
    assert_eq!(fast_runs(&env), fast, "an old marker is not trusted");
    let after: i64 = env.query(&format!(
        "select last_event_ms from sessions where key='{}'",
        key()
    ))[0];
    assert!(after > before, "the session was touched: it stays live");
    let made = std::fs::metadata(&marker).unwrap().modified().unwrap();
    assert!(made > old, "and the marker made anew");
    assert_eq!(hook(&env, "PostToolUse"), "");
    assert_eq!(fast_runs(&env), fast + 1);

    // sp-sync keeps the state folder private too (its store opens tighten it): stopped first,
    // or it could tighten the folder between the loosening and the hook's look.
    env.stop_sync();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&env.state, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(hook(&env, "PostToolUse"), "");
    assert_eq!(
        fast_runs(&env),
        fast + 1,
        "a loose state folder is not trusted"
    );
    let mode = std::fs::metadata(&env.state).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "the full path tightened it");
}

/// Settling hooks race sp-sync storing prompts: many PostToolUse hooks at once (each may try
/// to make the marker) while a `steer` prompt arrives. Whichever order the write lock gives,
/// the prompt is delivered exactly once, by one of them or by the next hook after it was
/// stored, and no marker stands while it is queued. Then sp-sync is killed right after a
/// prompt is stored (a writer's crash after its COMMIT): the Stop still delivers it.
#[test]
fn settling_hooks_racing_sp_sync_never_hide_a_prompt() {
    let env = Env::new();
    let mut sync = spawn_sync(&env);
    make_live(&env);
    for round in 0..8 {
        let hooks: Vec<_> = (0..4)
            .map(|_| env.spawn_hook("sp-event", &event("PostToolUse")))
            .collect();
        let text = format!("steer {round}");
        let id = enqueue(
            &env,
            json!({"kind": "prompt", "text": text, "mode": "steer"}),
        );
        stored(&env, &id);
        let mut delivered = 0;
        for h in hooks {
            let out = finish(h, Duration::from_secs(20));
            assert!(out.status.success());
            let s = stdout(&out);
            if !s.is_empty() {
                assert!(s.contains(&text), "{s}");
                delivered += 1;
            }
        }
        if state_of(&env, &id) == "queued" {
            assert_eq!(delivered, 0);
            assert!(
                markers(&env).is_empty(),
                "round {round}: a marker beside a queued prompt"
            );
            assert!(hook(&env, "PostToolUse").contains(&text));
            delivered += 1;
        }
        assert_eq!(delivered, 1, "round {round}");
        assert_eq!(state_of(&env, &id), "delivered");
    }
    // The turn the prompts landed in ends: until then its final acks wait, so no marker.
    assert!(markers(&env).is_empty());
    assert_eq!(stop(&env), None);
    settle(&env);
    let id = enqueue(&env, json!({"kind": "prompt", "text": "after the crash"}));
    stored(&env, &id);
    sigkill(&mut sync);
    assert!(markers(&env).is_empty());
    let reason = stop(&env).expect("delivered");
    assert!(reason.ends_with("after the crash"), "{reason}");
}

fn spool(env: &Env) -> Vec<PathBuf> {
    match std::fs::read_dir(env.state.join("spool")) {
        Ok(d) => d
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The session's stored events, by seq.
fn stored_events(env: &Env) -> Vec<String> {
    env.query::<String>(&format!(
        "select type from events where session_key='{}' order by seq",
        key()
    ))
}

/// A Stop with a sink beside a current marker spools its `turn.ended` instead of opening
/// the database. The session's next event takes it in first, so the order of the session's
/// events holds; sp-sync sends it; a file found again after its event was stored (a crash
/// between the commit and the removal) is removed, never stored twice.
#[test]
fn a_stop_beside_a_marker_spools_its_turn_end_and_the_order_holds() {
    let env = Env::new();
    // A tier-0 sink: no tool events (DECISIONS 40; their spooling is tests/conversation.rs's)
    // beside the turn end this is about.
    env.write_config(
        json!({"sinks": [{"name": "phone", "url": env.receiver.url(), "tier": 0,
        "control": true, "token": env.receiver.token()}]}),
    );
    make_live(&env);
    settle(&env);
    let fast = fast_runs(&env);
    assert_eq!(stop(&env), None);
    assert_eq!(fast_runs(&env), fast + 1, "the Stop skipped the database");
    let files = spool(&env);
    assert_eq!(files.len(), 1);
    assert_eq!(stored_events(&env), ["session.started"]);
    let kept = std::fs::read(&files[0]).unwrap();

    // The next turn's permission prompt: its event comes after the spooled turn end.
    open_bash_prompt(&env, "perm-y");
    assert_eq!(
        stored_events(&env),
        ["session.started", "turn.ended", "attention.needed"]
    );
    // sp-sync sends them in that order and clears the spool.
    assert!(env.sync_once().status.success());
    let sent: Vec<(String, i64)> = env
        .receiver
        .events()
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_string(),
                e["session"]["seq"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        sent,
        [
            ("session.started".to_string(), 0),
            ("turn.ended".to_string(), 1),
            ("attention.needed".to_string(), 2)
        ]
    );
    assert!(spool(&env).is_empty());
    // The same file back (as if the removal had not happened): removed, not stored again.
    std::fs::write(&files[0], &kept).unwrap();
    assert!(env.sync_once().status.success());
    assert!(spool(&env).is_empty());
    assert_eq!(
        env.query::<i64>("select count(*) from events where type='turn.ended'"),
        [1]
    );
}

/// Beside a running sp-sync a spooled turn end reaches the receiver by itself.
#[test]
fn sp_sync_takes_in_a_spooled_turn_end_and_sends_it() {
    let env = synced_env();
    settle(&env);
    let fast = fast_runs(&env);
    assert_eq!(stop(&env), None);
    assert_eq!(fast_runs(&env), fast + 1);
    turn_end_reaches_the_receiver(&env);
    assert!(until(Duration::from_secs(10), || spool(&env).is_empty()));
    // A prompt queued after that is delivered by the next Stop as ever.
    let id = enqueue(&env, json!({"kind": "prompt", "text": "one more"}));
    stored(&env, &id);
    assert!(stop(&env).expect("block").ends_with("one more"));
}
