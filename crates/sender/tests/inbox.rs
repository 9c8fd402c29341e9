//! Issue 26's inbox, batch answers and "Not now", against the real `sp-receiver` binary on
//! loopback, real hooks and sp-sync in temp HOMEs, and headless Chromium (with a CDP virtual
//! authenticator for the signed mode), as receiver_page.rs and receiver_signed.rs run them:
//!
//! 1. five identical Claude Code permission prompts (five sessions) show as one group,
//!    "5 × echo batch > out.txt"; its one Allow sends five commands, each a passkey touch
//!    over itself (DECISIONS 36): the authenticator's sign count goes up by five; each hook
//!    prints allow and each command is acked `delivered`;
//! 2. the inbox lists prompts oldest first with machine and folder, the title counts them,
//!    "Not now" hides one on a second open page at once and it comes back after the window
//!    (`--not-now-s`, so the test waits seconds, not 15 minutes), and Deny all on a mixed
//!    selection (Allow all is refused there) denies exactly those;
//! 3. in process (`not_now_s`): no push for a prompt put off, while it is put off, and pushes
//!    again once the time is up (a loopback ntfy server observes what is sent).
//!
//! Needs chromium, Node.js and playwright-core (`scripts/test-deps.sh`); without them the
//! browser tests fail, never pass silently.
mod common;

use common::browser::{missing_browser_deps, Browser};
use common::env::*;
use common::fixtures::cc_attention_id;
use common::page::{login, pair};
use common::receiver::{Machine, SpReceiver, LOGIN, TOKEN};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

const ALLOW: &str = r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}"#;

/// A Claude Code PermissionRequest for `command` in session `session`, prompt `n`.
fn ask(session: &str, n: u32, cwd: &str, command: &str) -> Value {
    let mut p = payload(CC_PERMISSION);
    p["session_id"] = json!(session);
    p["prompt_id"] = json!(format!("c27f8a10-4e6d-4b93-8f25-{n:0>12}"));
    p["cwd"] = json!(cwd);
    p["tool_input"]["command"] = json!(command);
    p
}

fn eval(b: &mut Browser, script: &str) -> Value {
    b.call(json!({"op": "eval", "script": script}))["value"].clone()
}

fn title(b: &mut Browser) -> String {
    eval(b, "document.title").as_str().unwrap().to_owned()
}

/// Waits until the page's title is `want` (it follows the state the page long-polls).
fn wait_title(b: &mut Browser, want: &str) {
    let mut seen = String::new();
    let ok = until(Duration::from_secs(20), || {
        seen = title(b);
        seen == want
    });
    assert!(ok, "title {seen:?}, want {want:?}");
}

fn sign_count(b: &mut Browser) -> i64 {
    let creds = b.call(json!({"op": "credentials"}))["credentials"].clone();
    let creds = creds.as_array().unwrap();
    assert_eq!(creds.len(), 1, "{creds:?}");
    creds[0]["signCount"].as_i64().unwrap()
}

fn db(dir: &Path) -> rusqlite::Connection {
    common::receiver::open_db(&dir.join("receiver.db"))
}

/// sp-receiver in `rdir`, a machine whose sink there is signed (with `control`), and a
/// browser with a virtual authenticator paired to it; the page's address is localhost
/// (WebAuthn rp ids cannot be IP addresses).
fn paired_page(rdir: &Path, control: Value) -> (SpReceiver, String, Env, Browser) {
    let receiver = SpReceiver::start(rdir, &[]);
    let (_, page) = common::page::localhost(&receiver.url);
    let env = Env::new();
    env.write_config(json!({
        "sinks": [{"name": "phone", "url": receiver.url, "tier": 1, "control": "signed", "token": TOKEN}],
        "control": control
    }));
    let mut b = Browser::launch();
    b.call(json!({"op": "webauthn"}));
    pair(&env, &mut b, &page);
    (receiver, page, env, b)
}

#[test]
fn five_identical_prompts_of_one_session_are_allowed_as_one_batch_with_one_touch() {
    if let Some(why) = missing_browser_deps() {
        panic!("the browser test cannot run: {why}");
    }
    let dir = tempfile::tempdir().unwrap();
    let rdir = dir.path().join("receiver");
    let (_receiver, page, mut env, mut b) = paired_page(&rdir, json!({"permission_wait_s": 120}));
    // The pairing's own proof was one assertion: the count counts.
    let before = sign_count(&mut b);
    assert!(before >= 1, "{before}");

    // One session asks the same thing five times at once (parallel tool calls), each hook
    // as Claude Code runs it.
    env.start_sync();
    let command = "echo batch > out.txt";
    let asks: Vec<Value> = (0..5)
        .map(|i| {
            ask(
                "5b0e8c1d-2f3a-4b5c-8d6e-000000000000",
                i,
                "/home/dev/src/app0",
                command,
            )
        })
        .collect();
    let hooks: Vec<Child> = asks
        .iter()
        .map(|p| env.spawn_hook("sp-permission", p))
        .collect();
    b.call(json!({"op": "goto", "url": format!("{page}/")}));
    b.wait("#signed");
    let group = "#inbox-list > .inbox-group[data-count=\"5\"]";
    b.call(json!({"op": "wait", "selector": group, "timeout": 60000}));
    let head = b.text(&format!("{group} .group-head"));
    assert!(head.contains("5 ×") && head.contains(command), "{head}");
    let places = b.text(&format!("{group} .group-where"));
    assert!(places.contains("/home/dev/src/app0"), "{places}");
    wait_title(&mut b, "(5) sessionpipe");
    // Each is there, once, under the group (and nowhere else).
    for p in &asks {
        let id = cc_attention_id(p);
        let n = b.call(json!({"op": "count", "selector": format!("[data-attention=\"{id}\"]")}));
        assert_eq!(n["count"], 1, "{id}");
        let n = b.call(json!({"op": "count", "selector": format!("{group} .members [data-attention=\"{id}\"]")}));
        assert_eq!(n["count"], 1, "{id} in the group");
    }

    let started = Instant::now();
    b.click(&format!("{group} button.allow-all"));
    for (hook, p) in hooks.into_iter().zip(&asks) {
        let out = finish(hook, Duration::from_secs(90));
        assert!(out.status.success());
        assert_eq!(
            stdout(&out).trim_end(),
            ALLOW,
            "{}: log {}",
            p["session_id"],
            env.log()
        );
    }
    eprintln!(
        "Allow all 5 → the fifth hook's stdout: {} ms",
        started.elapsed().as_millis()
    );
    // DECISIONS 36: the five allows are one batch command, one touch over exactly it.
    assert_eq!(
        sign_count(&mut b),
        before + 1,
        "one assertion for the batch of five allows"
    );
    // One signed command naming the five prompts, acked delivered with all five answered.
    let rows: Vec<(String, String)> = {
        let c = db(&rdir);
        let mut st = c
            .prepare("SELECT id, body FROM messages WHERE machine IS NOT NULL ORDER BY n")
            .unwrap();
        let rows = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        rows
    };
    assert_eq!(rows.len(), 1, "{rows:?}");
    let (id, body) = &rows[0];
    let envelope: Value = serde_json::from_str(body).unwrap();
    let cmd: Value = serde_json::from_str(envelope["cmd"].as_str().unwrap()).unwrap();
    assert_eq!(cmd["decision"], "allow", "{cmd}");
    assert!(envelope["confirm"]["sig"].is_string(), "{envelope}");
    assert!(envelope.get("grant").is_none(), "{envelope}");
    let ack = common::receiver::first_ack(&rdir.join("receiver.db"), id);
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    assert!(
        ack["detail"]
            .as_str()
            .is_some_and(|d| d.contains("5 answered")),
        "{ack}"
    );
    let mut answered: Vec<String> = cmd["for"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_owned())
        .collect();
    answered.sort();
    let mut want: Vec<String> = asks.iter().map(cc_attention_id).collect();
    want.sort();
    assert_eq!(answered, want, "the batch names each prompt once");
    b.call(json!({"op": "wait", "selector": "#inbox", "state": "hidden", "timeout": 30000}));
    wait_title(&mut b, "sessionpipe");
}

/// DECISIONS 36: the page learns each session's permission mode from its events; a message
/// to a session in `bypassPermissions` (it runs tools without asking) is signed with a touch
/// over it, one to a session in `default` rides the day key; the machine queues both.
#[test]
fn a_message_to_a_bypass_session_asks_for_a_touch_and_one_to_a_default_session_does_not() {
    if let Some(why) = missing_browser_deps() {
        panic!("the browser test cannot run: {why}");
    }
    const BYPASS: &str = "5b0e8c1d-2f3a-4b5c-8d6e-0000000000b1";
    const ASKS: &str = "5b0e8c1d-2f3a-4b5c-8d6e-0000000000a1";
    let dir = tempfile::tempdir().unwrap();
    let rdir = dir.path().join("receiver");
    let (_receiver, page, mut env, mut b) = paired_page(&rdir, json!({}));
    env.start_sync();
    // Each session's turn ends, its Stop run as Claude Code runs it, in its mode.
    for (session, mode) in [(BYPASS, "bypassPermissions"), (ASKS, "default")] {
        let p = json!({
            "session_id": session, "hook_event_name": "Stop", "cwd": "/home/dev/src/app",
            "transcript_path": "/tmp/t.jsonl", "permission_mode": mode, "stop_hook_active": false
        });
        let out = finish(env.spawn_hook("sp-stop", &p), Duration::from_secs(20));
        assert!(out.status.success());
    }
    // The receiver hears both modes with the sessions' events.
    let heard = || {
        let c = db(&rdir);
        let mut st = c
            .prepare("SELECT info FROM sessions WHERE info LIKE '%permission_mode%'")
            .unwrap();
        st.query_map([], |r| r.get::<_, String>(0)).unwrap().count()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while heard() < 2 {
        assert!(
            Instant::now() < deadline,
            "the receiver never heard both modes"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    b.call(json!({"op": "goto", "url": format!("{page}/")}));
    b.wait("#signed");
    let send = |b: &mut Browser, session: &str, text: &str| {
        let card = format!("article[data-session=\"claude-code:{session}\"]");
        b.wait(&card);
        b.call(json!({"op": "fill", "selector": format!("{card} .prompt-text"), "value": text}));
        b.click(&format!("{card} button.queue"));
        b.call(json!({"op": "wait_text", "selector": format!("{card} .messages"), "text": text, "timeout": 30000}));
    };
    send(&mut b, ASKS, "update the changelog");
    let before = sign_count(&mut b);
    send(&mut b, BYPASS, "run the deploy");
    assert_eq!(
        sign_count(&mut b),
        before + 1,
        "one touch for the bypass session's message"
    );

    // At the receiver: the bypass message carries a confirm, the other a day key's signature.
    let bodies: Vec<Value> = {
        let c = db(&rdir);
        let mut st = c
            .prepare("SELECT body FROM messages WHERE machine IS NOT NULL ORDER BY n")
            .unwrap();
        let rows = st
            .query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .map(|r| serde_json::from_str(&r.unwrap()).unwrap())
            .collect();
        rows
    };
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    assert!(
        bodies[0]["csig"].is_string() && bodies[0].get("confirm").is_none(),
        "{}",
        bodies[0]
    );
    assert!(
        bodies[1]["confirm"]["sig"].is_string() && bodies[1].get("csig").is_none(),
        "{}",
        bodies[1]
    );
    // The machine queued both for their sessions' next Stop (neither refused).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let states = env.query::<String>(
            "SELECT state FROM messages WHERE kind = 'prompt' ORDER BY session_key",
        );
        if states == vec!["queued".to_string(), "queued".to_string()] {
            break;
        }
        assert!(Instant::now() < deadline, "{states:?}; log {}", env.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The inbox's prompts as the page lists them: `[{for, where, text}]`, top to bottom.
fn listed(b: &mut Browser) -> Vec<Value> {
    eval(
        b,
        "[...document.querySelectorAll('#inbox-list > .inbox-item')].map((e) => ({for: e.dataset.for, where: e.querySelector('.where').textContent, text: e.querySelector('.att-msg').textContent}))",
    )
    .as_array()
    .unwrap()
    .clone()
}

#[test]
fn the_inbox_lists_oldest_first_counts_in_the_title_puts_off_and_denies_a_mixed_selection() {
    if let Some(why) = missing_browser_deps() {
        panic!("the browser test cannot run: {why}");
    }
    const WINDOW_S: u64 = 8;
    let dir = tempfile::tempdir().unwrap();
    let receiver = SpReceiver::start(
        &dir.path().join("receiver"),
        &["--not-now-s", &WINDOW_S.to_string()],
    );
    let mut machine = Machine::new(
        dir.path(),
        &receiver.url,
        &dir.path().join("receiver/token"),
    );
    // The machine's name, as its config gives it (DECISIONS 19), is what the inbox shows.
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&machine.config).unwrap()).unwrap();
    config["machine"] = json!("laptop");
    std::fs::write(&machine.config, config.to_string()).unwrap();
    machine.start_sync();
    let mut a = Browser::launch();
    login(&mut a, &format!("{}/", receiver.url));
    let mut second = Browser::launch();
    login(&mut second, &format!("{}/", receiver.url));

    // Three prompts in three sessions, asked one after another.
    let home = machine.home.display().to_string();
    let asks: Vec<Value> = ["echo one", "echo two", "echo three"]
        .iter()
        .enumerate()
        .map(|(i, c)| {
            ask(
                &format!("3f2a9c1e-0000-4000-8000-00000000000{i}"),
                10 + i as u32,
                &format!("{home}/src/p{i}"),
                c,
            )
        })
        .collect();
    let mut hooks = Vec::new();
    for (i, p) in asks.iter().enumerate() {
        hooks.push(Some(machine.spawn_hook("sp-permission", p)));
        a.wait(&format!("[data-attention=\"{}\"]", cc_attention_id(p)));
        assert_eq!(listed(&mut a).len(), i + 1);
    }
    let ids: Vec<String> = asks.iter().map(cc_attention_id).collect();
    let shown = listed(&mut a);
    for (i, row) in shown.iter().enumerate() {
        assert_eq!(row["for"], ids[i].as_str(), "oldest first: {shown:?}");
        let w = row["where"].as_str().unwrap();
        assert!(
            w.starts_with("laptop · ") && w.ends_with(&format!("src/p{i}")),
            "machine · folder: {w}"
        );
        assert!(
            row["text"]
                .as_str()
                .unwrap()
                .contains(["echo one", "echo two", "echo three"][i]),
            "{row}"
        );
    }
    wait_title(&mut a, "(3) sessionpipe");
    wait_title(&mut second, "(3) sessionpipe");
    // Different commands: no group.
    assert_eq!(
        a.call(json!({"op": "count", "selector": "#inbox-list .inbox-group"}))["count"],
        0
    );

    // Not now on the second prompt: gone from the other page at once, back after the window;
    // the terminal keeps waiting all along.
    let two = format!("[data-attention=\"{}\"]", ids[1]);
    second.wait(&two);
    let put_off = Instant::now();
    a.click(&format!(
        ".inbox-item[data-for=\"{}\"] button.not-now",
        ids[1]
    ));
    second.gone(&two);
    let hidden_in = put_off.elapsed();
    eprintln!(
        "Not now → gone from the second page: {} ms",
        hidden_in.as_millis()
    );
    assert!(hidden_in < Duration::from_secs(WINDOW_S), "{hidden_in:?}");
    wait_title(&mut second, "(2) sessionpipe");
    a.gone(&two);
    assert!(a.text("#inbox-later").contains("1 prompt put off"));
    assert!(
        hooks[1].as_mut().unwrap().try_wait().unwrap().is_none(),
        "the hook still waits"
    );
    second.call(json!({"op": "wait", "selector": two, "timeout": 30000}));
    let back_in = put_off.elapsed();
    eprintln!(
        "Not now for {WINDOW_S} s → back on the second page after {} ms",
        back_in.as_millis()
    );
    assert!(
        back_in >= Duration::from_millis(WINDOW_S * 1000 - 1000),
        "back too soon: {back_in:?}"
    );
    wait_title(&mut second, "(3) sessionpipe");
    a.wait(&two);
    let order: Vec<Value> = listed(&mut a).iter().map(|r| r["for"].clone()).collect();
    assert_eq!(
        order,
        json!(ids).as_array().unwrap().clone(),
        "back in its place"
    );
    // Not now undone: Show again brings it back on both pages at once, long before its time.
    let put_off = Instant::now();
    a.click(&format!(
        ".inbox-item[data-for=\"{}\"] button.not-now",
        ids[1]
    ));
    second.gone(&two);
    a.wait("#inbox-later:not([hidden]) #show-again");
    a.click("#show-again");
    second.wait(&two);
    a.wait(&two);
    assert!(
        put_off.elapsed() < Duration::from_secs(WINDOW_S),
        "{:?}",
        put_off.elapsed()
    );

    // Deny all on a mixed selection (the first and the third): Allow all is not offered.
    a.call(json!({"op": "wait", "selector": "#inbox-batch", "state": "hidden"}));
    for i in [0, 2] {
        a.click(&format!(
            ".inbox-item[data-for=\"{}\"] input.select",
            ids[i]
        ));
    }
    a.wait("#inbox-batch");
    assert_eq!(a.text("#batch-count"), "2 selected");
    let allow_all = eval(&mut a, "document.querySelector('#batch-allow').disabled");
    assert_eq!(allow_all, json!(true), "Allow all needs identical prompts");
    a.click("#batch-deny");
    for i in [0, 2] {
        let out = finish(hooks[i].take().unwrap(), Duration::from_secs(60));
        assert!(out.status.success());
        let v: Value = serde_json::from_str(stdout(&out).trim_end())
            .unwrap_or_else(|e| panic!("{e}: {} log: {}", stdout(&out), machine.log()));
        assert_eq!(
            v["hookSpecificOutput"]["decision"]["behavior"], "deny",
            "{v}"
        );
    }
    for i in [0, 2] {
        let answer = format!(
            "li.msg[data-kind=\"permission.answer\"][data-for=\"{}\"][data-status=\"delivered\"]",
            ids[i]
        );
        a.wait(&answer);
        assert!(a.text(&answer).starts_with("Deny"));
    }
    // The one not selected still waits, and is answered on its own.
    assert!(hooks[1].as_mut().unwrap().try_wait().unwrap().is_none());
    wait_title(&mut a, "(1) sessionpipe");
    a.click(&format!("{two} button.allow"));
    let out = finish(hooks[1].take().unwrap(), Duration::from_secs(60));
    assert_eq!(stdout(&out).trim_end(), ALLOW, "log: {}", machine.log());
    a.wait(&format!(
        "li.msg[data-kind=\"permission.answer\"][data-for=\"{}\"][data-status=\"delivered\"]",
        ids[1]
    ));
    wait_title(&mut a, "sessionpipe");
    wait_title(&mut second, "sessionpipe");
}

/// "Not now" and the pushes (in process, so the window is the `not_now_s` option).
mod pushes {
    use serde_json::{json, Value};
    use spreceiver::{Receiver, ReceiverOptions};
    use std::sync::mpsc;
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    const LOGIN: &str = "page-login-token-for-the-inbox-test";

    use super::common::http::agent;

    fn page(r: &Receiver, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let url = format!("{}{path}", r.url());
        let auth = format!("Bearer {LOGIN}");
        let mut resp = match body {
            Some(b) => agent()
                .post(&url)
                .header("authorization", &auth)
                .header("content-type", "application/json")
                .send(b.to_string())
                .unwrap(),
            None => {
                assert_eq!(method, "GET");
                agent()
                    .get(&url)
                    .header("authorization", &auth)
                    .call()
                    .unwrap()
            }
        };
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    fn now_wire() -> String {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let t = time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000).unwrap();
        let fmt = time::macros::format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
        );
        t.format(&fmt).unwrap()
    }

    fn needed(r: &Receiver, seq: u64, id: &str, ty: &str) {
        let ev = json!({"protocol":1,"id":ulid::Ulid::new().to_string(),"type":ty,
            "time":now_wire(),"tier":1,"harness":{"name":"codex","event":"PermissionRequest"},
            "session":{"id":"inbox-s1","seq":seq,"cwd":"~/src/app","machine":"laptop"},
            "privacy":{"rulesets":["secrets@1"],"pii":false},
            "data":{"attention_id":id,"kind":"permission","tool":"Bash","message":"Bash git push","how":"answered"}});
        let resp = agent()
            .post(&format!("{}/api/sessionpipe/v1/events", r.url()))
            .header("authorization", &format!("Bearer {}", r.token()))
            .header("content-type", "application/json")
            .send(json!({"events": [ev]}).to_string())
            .unwrap();
        assert_eq!(resp.status().as_u16(), 202);
    }

    /// A loopback ntfy server: each request's `Click` header (the prompt's link) to the test.
    fn ntfy() -> (String, mpsc::Receiver<String>) {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let url = format!("http://{}/topic", server.server_addr().to_ip().unwrap());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for rq in server.incoming_requests() {
                let click = rq
                    .headers()
                    .iter()
                    .find(|h| h.field.equiv("Click"))
                    .map(|h| h.value.as_str().to_owned())
                    .unwrap_or_default();
                let _ = tx.send(click);
                let _ = rq.respond(tiny_http::Response::empty(200));
            }
        });
        (url, rx)
    }

    fn push_log_says(r: &Receiver, what: &str, result: &str) -> bool {
        let (_, p) = page(r, "GET", "/page/api/push", None);
        p["log"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["what"] == what && l["result"].as_str().unwrap_or_default().contains(result))
    }

    /// Issue 37: "Not now" can be undone. "Show again" brings the prompts put off back on
    /// every page at once, long before their time is up.
    #[test]
    fn show_again_brings_a_prompt_put_off_back_at_once() {
        let r = Receiver::start(ReceiverOptions {
            login_token: Some(LOGIN.into()),
            not_now_s: 900,
            ..ReceiverOptions::default()
        })
        .unwrap();
        needed(&r, 0, "perm-1", "attention.needed");
        let prompts = json!([{"session": "codex:inbox-s1", "for": "perm-1"}]);
        let (s, v) = page(
            &r,
            "POST",
            "/page/api/snooze",
            Some(json!({"prompts": prompts})),
        );
        assert_eq!((s, &v["snoozed"]), (200, &json!(["perm-1"])), "{v}");
        let (_, state) = page(&r, "GET", "/page/api/state", None);
        assert_eq!(state["snoozed"][0]["for"], "perm-1", "{state}");

        let (s, v) = page(
            &r,
            "POST",
            "/page/api/snooze",
            Some(json!({"prompts": prompts, "undo": true})),
        );
        assert_eq!(s, 200, "{v}");
        assert_eq!(v, json!({"shown": ["perm-1"], "gone": []}));
        let (_, state) = page(&r, "GET", "/page/api/state", None);
        assert_eq!(state["snoozed"], json!([]), "{state}");
        // A prompt no longer open has nothing to bring back.
        let gone = json!([{"session": "codex:inbox-s1", "for": "perm-nope"}]);
        let (_, v) = page(
            &r,
            "POST",
            "/page/api/snooze",
            Some(json!({"prompts": gone, "undo": true})),
        );
        assert_eq!(v, json!({"shown": [], "gone": ["perm-nope"]}));
    }

    #[test]
    fn a_prompt_put_off_is_not_pushed_until_its_time_is_up() {
        let window = Duration::from_secs(3);
        let r = Receiver::start(ReceiverOptions {
            login_token: Some(LOGIN.into()),
            allow_private_push: true,
            not_now_s: window.as_secs(),
            ..ReceiverOptions::default()
        })
        .unwrap();
        let (url, got) = ntfy();
        assert_eq!(
            page(
                &r,
                "POST",
                "/page/api/push",
                Some(json!({"op": "ntfy", "url": url}))
            )
            .0,
            200
        );
        assert_eq!(
            page(&r, "POST", "/page/api/away", Some(json!({"away": true}))).0,
            200
        );
        let next = |want: &str| {
            let click = got
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("no push for {want}"));
            assert!(
                click.ends_with(&format!("#attention={}", want.replace('-', "%2D"))),
                "{click} for {want}"
            );
        };

        needed(&r, 0, "perm-1", "attention.needed");
        next("perm-1");
        // Put off: only an open prompt, and at most 200 a request.
        let snooze = |id: &str| {
            page(
                &r,
                "POST",
                "/page/api/snooze",
                Some(json!({"prompts": [{"session": "codex:inbox-s1", "for": id}]})),
            )
        };
        let (s, v) = snooze("perm-nope");
        assert_eq!((s, &v["gone"]), (200, &json!(["perm-nope"])), "{v}");
        let many: Vec<Value> = (0..201)
            .map(|i| json!({"session": "codex:inbox-s1", "for": format!("p{i}")}))
            .collect();
        assert_eq!(
            page(
                &r,
                "POST",
                "/page/api/snooze",
                Some(json!({"prompts": many}))
            )
            .0,
            400
        );
        assert_eq!(
            page(
                &r,
                "POST",
                "/page/api/snooze",
                Some(json!({"prompts": [{"session": "nocolon", "for": "x"}]}))
            )
            .0,
            400
        );
        let put_off = Instant::now();
        let (s, v) = snooze("perm-1");
        assert_eq!((s, &v["snoozed"]), (200, &json!(["perm-1"])), "{v}");
        let (_, state) = page(&r, "GET", "/page/api/state", None);
        assert_eq!(state["snoozed"][0]["for"], "perm-1", "{state}");
        assert_eq!(state["snoozed"][0]["session"], "codex:inbox-s1");

        // Asked again while put off: no push. Another prompt is pushed; the worker takes
        // notices in order, so once that one arrives the first was passed over.
        needed(&r, 1, "perm-1", "attention.needed");
        needed(&r, 2, "perm-2", "attention.needed");
        next("perm-2");
        assert!(put_off.elapsed() < window, "the check ran past the window");
        assert!(push_log_says(
            &r,
            "attention.needed perm-1",
            "put off with Not now"
        ));

        // Once the time is up it is news again.
        // A held state request answers when the time is up (a push logged may answer it
        // sooner: ask again until the prompt is no longer put off).
        let (_, mut state) = page(&r, "GET", "/page/api/state", None);
        let limit = Instant::now() + Duration::from_secs(20);
        while state["snoozed"] != json!([]) && Instant::now() < limit {
            let path = format!("/page/api/state?since={}&wait=10", state["version"]);
            state = page(&r, "GET", &path, None).1;
        }
        assert_eq!(state["snoozed"], json!([]), "{state}");
        assert!(
            put_off.elapsed() >= window - Duration::from_millis(100),
            "{:?}",
            put_off.elapsed()
        );
        needed(&r, 3, "perm-1", "attention.needed");
        next("perm-1");

        // Cleared, the put-off is gone with it: asked again later, it is pushed at once.
        snooze("perm-2");
        needed(&r, 4, "perm-2", "attention.cleared");
        needed(&r, 5, "perm-2", "attention.needed");
        next("perm-2");
        assert!(got.try_recv().is_err(), "nothing else was pushed");
    }
}

/// "Not now" is a page post like the others: the login, the CSRF header and this origin.
#[test]
fn not_now_needs_the_login_the_csrf_header_and_this_origin() {
    let dir = tempfile::tempdir().unwrap();
    let r = SpReceiver::start(dir.path(), &[]);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let post = |headers: &[(&str, &str)], body: &Value| -> (u16, Value) {
        let mut q = agent
            .post(&format!("{}/page/api/snooze", r.url))
            .header("content-type", "application/json");
        for (k, v) in headers {
            q = q.header(*k, *v);
        }
        let mut resp = q.send(body.to_string()).unwrap();
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    };
    // A page login: the cookie, and the CSRF secret the state answer gives.
    let mut resp = agent
        .post(&format!("{}/login", r.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .send(format!("token={LOGIN}"))
        .unwrap();
    assert_eq!(resp.status().as_u16(), 303);
    let cookie = resp.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let _ = resp.body_mut().read_to_string();
    let state =
        common::http::get(&format!("{}/page/api/state", r.url), &[("cookie", &cookie)]).json();
    let csrf = state["csrf"].as_str().unwrap().to_owned();
    assert_eq!(state["snoozed"], json!([]));

    let body = json!({"prompts": [{"session": "claude-code:s1", "for": "perm-1"}]});
    let sender = format!("Bearer {TOKEN}");
    let mut cases = vec![
        (vec![], 401),
        (vec![("authorization", sender.as_str())], 401),
    ];
    cases.extend(
        common::csrf::refused(&cookie, &csrf)
            .into_iter()
            .map(|h| (h, 403)),
    );
    cases.push((common::csrf::taken(&cookie, &csrf), 200));
    for (headers, want) in cases {
        let (status, v) = post(&headers, &body);
        assert_eq!(status, want, "{headers:?}: {v}");
        if want == 200 {
            // No such open prompt: nothing is put off, and it says so.
            assert_eq!(v["gone"], json!(["perm-1"]), "{v}");
            assert_eq!(v["snoozed"], json!([]), "{v}");
        }
    }
    let ok = [
        ("cookie", cookie.as_str()),
        ("x-sessionpipe-csrf", csrf.as_str()),
    ];
    for (bad, word) in [
        (json!({"prompts": []}), "1 to 200"),
        (
            json!({"prompts": [{"session": "s1", "for": "p"}]}),
            "session",
        ),
        (
            json!({"prompts": [{"session": "codex:s", "for": ""}]}),
            "for must be",
        ),
        (
            json!({"prompts": [{"session": "codex:s", "for": "p", "until": 1}]}),
            "until",
        ),
    ] {
        let (status, v) = post(&ok, &bad);
        assert_eq!(status, 400, "{bad}: {v}");
        assert!(
            v["reason"].as_str().unwrap_or_default().contains(word),
            "{bad}: {v}"
        );
    }
}
