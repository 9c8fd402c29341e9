//! One inbox (DECISIONS 33): one receiver, many machines, one phone.
//!
//! In headless Chromium with a CDP virtual authenticator, through the real binaries: two
//! machines (each its own HOME, state folder and sp-sync) pair from their own terminals with
//! one `sp-receiver` and one page's passkey; a Claude Code PermissionRequest waits on each;
//! Allow on each from the one page is signed for the machine of its session, so each hook
//! prints allow and no ack says refused. "Remove machine" on the page ends one machine's token
//! (refused 401 from then on) while the other is still answered; `sp pair --off` on the other
//! ends its own.
//!
//! And, in process over HTTP (`mod http`): each session belongs to the machine whose token its
//! events came with; another machine's token, or the shared one, cannot touch it; the shared
//! token still serves unpaired senders; removing one machine leaves the others working.
//!
//! Needs chromium, Node.js and playwright-core: `scripts/test-deps.sh` installs them. Without
//! them the test fails (it never passes silently).
mod common;

use common::browser::{missing_browser_deps, Browser};
use common::env::*;
use common::page::run_ok;
use common::receiver::{SpReceiver, LOGIN, TOKEN};
use serde_json::{json, Value};
use std::time::Duration;

const ALLOW: &str = r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}"#;
const EVENTS: &str = "/api/sessionpipe/v1/events";
const CONTROL: &str = "/api/sessionpipe/v1/control";

use common::http::agent;

/// The status of `POST {events}` with an empty batch and `token`: 400 once the token is let
/// in (an empty batch is refused after it), 401 when it is not.
fn events_status(url: &str, token: &str) -> u16 {
    agent()
        .post(&format!("{url}{EVENTS}"))
        .header("authorization", &format!("Bearer {token}"))
        .header("content-type", "application/json")
        .send(r#"{"events":[]}"#)
        .unwrap()
        .status()
        .as_u16()
}

fn poll_status(url: &str, machine: &str, token: &str) -> u16 {
    agent()
        .get(&format!("{url}{CONTROL}?machine={machine}&wait=0"))
        .header("authorization", &format!("Bearer {token}"))
        .call()
        .unwrap()
        .status()
        .as_u16()
}

fn permission_request(session: &str, command: &str) -> Value {
    json!({
        "session_id": session, "hook_event_name": "PermissionRequest", "cwd": "/tmp",
        "transcript_path": "/tmp/t.jsonl", "permission_mode": "default",
        "tool_name": "Bash", "tool_input": {"command": command, "description": "one inbox"}
    })
}

/// One machine: its own HOME and state folder, its sink the one receiver, signed.
struct Machine {
    env: Env,
    name: &'static str,
    session: &'static str,
    id: String,
    token: String,
}

impl Machine {
    fn new(receiver: &SpReceiver, name: &'static str, session: &'static str) -> Machine {
        let env = Env::new();
        env.write_config(json!({
            "machine": name,
            "sinks": [{"name": "phone", "url": receiver.url, "tier": 1, "control": "signed", "token": TOKEN}],
            "control": {"permission_wait_s": 90}
        }));
        Machine {
            env,
            name,
            session,
            id: String::new(),
            token: String::new(),
        }
    }

    fn key(&self) -> String {
        format!("claude-code:{}", self.session)
    }

    /// `sp pair phone` from this machine's terminal, approved on the page `b` has open
    /// (logged in already unless `log_in`).
    fn pair(&mut self, b: &mut Browser, page: &str, log_in: bool) {
        let mut cmd = self.env.cmd("sp");
        cmd.args(["pair", "phone", "--name", self.name, "--timeout", "120"]);
        let common::pairing::SpPair {
            child: pair,
            link,
            digits,
            printed,
        } = common::page::start_pair(cmd, page);
        if log_in {
            let first = common::page::open_and_log_in(b, &link);
            assert_eq!(first["status"], 401);
        } else {
            b.call(json!({"op": "goto", "url": link}));
        }
        b.wait("#conn[data-state=\"live\"]");
        b.wait("#pair-check[data-check]");
        let shown = b.call(json!({"op": "attr", "selector": "#pair-check", "name": "data-check"}))
            ["value"]
            .clone();
        assert_eq!(
            shown,
            json!(digits),
            "the page shows {}'s digits",
            self.name
        );
        b.click("#pair-approve");
        b.wait("#pair-status[data-state=\"paired\"]");
        let done = finish(pair, Duration::from_secs(30));
        assert!(
            done.status.success(),
            "sp pair on {}: {}{}",
            self.name,
            printed.lock().unwrap(),
            String::from_utf8_lossy(&done.stderr)
        );
        let paired = self
            .env
            .db()
            .query_row(
                "SELECT machine, token FROM control_machines WHERE sink = 'phone'",
                [],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)),
            )
            .unwrap();
        (self.id, self.token) = paired;
    }

    /// A PermissionRequest hook waiting on this machine, and its attention id (one other
    /// than `not`).
    fn prompt(&self, command: &str, not: Option<&str>) -> (std::process::Child, String) {
        let hook = self
            .env
            .spawn_hook("sp-permission", &permission_request(self.session, command));
        let mut id = None;
        assert!(
            until(Duration::from_secs(20), || {
                id = self
                    .env
                    .db_path()
                    .exists()
                    .then(|| {
                        self.env.query::<String>(
                            "SELECT attention_id FROM attention WHERE state='open'",
                        )
                    })
                    .and_then(|v| v.into_iter().find(|a| Some(a.as_str()) != not));
                id.is_some()
            }),
            "the hook on {} opened no attention",
            self.name
        );
        (hook, id.unwrap())
    }

    /// Allow on the page for attention `att` of this machine's session; the hook prints allow.
    fn allow_from_page(&self, b: &mut Browser, hook: std::process::Child, att: &str) {
        let attention = format!(
            ".inbox-item[data-session=\"{}\"] [data-attention=\"{att}\"]",
            self.key()
        );
        b.wait(&attention);
        b.click(&format!("{attention} button.allow"));
        let out = finish(hook, Duration::from_secs(60));
        assert!(out.status.success());
        assert_eq!(
            stdout(&out).trim_end(),
            ALLOW,
            "{}'s hook; log: {}",
            self.name,
            self.env.log()
        );
    }
}

/// Acks of any message, duplicates included, that say refused.
fn refused_acks(receiver: &SpReceiver) -> Vec<String> {
    let db = receiver_db(receiver);
    let mut st = db
        .prepare("SELECT body FROM acks WHERE outcome = 'refused'")
        .unwrap();
    st.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

fn receiver_db(receiver: &SpReceiver) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(receiver.dir.join("receiver.db")).unwrap();
    c.busy_timeout(Duration::from_secs(5)).unwrap();
    c
}

/// The first ack the receiver recorded for each signed message: (machine, outcome, body).
fn signed_acks(receiver: &SpReceiver) -> Vec<(String, String, String)> {
    let db = receiver_db(receiver);
    let mut st = db
        .prepare(
            "SELECT m.machine, a.outcome, a.body FROM messages m
             JOIN acks a ON a.n = (SELECT min(n) FROM acks WHERE acks.id = m.id)
             WHERE m.machine IS NOT NULL ORDER BY a.n",
        )
        .unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

/// The laptop and the server, each paired on `receiver`'s page (the laptop first, logging
/// the page in) in one browser with a virtual authenticator: (page, laptop, server, browser).
fn laptop_and_server(receiver: &SpReceiver) -> (String, Machine, Machine, Browser) {
    let (_, page) = common::page::localhost(&receiver.url);
    let mut laptop = Machine::new(receiver, "laptop", "1a1a1a1a-0000-4000-8000-00000000000a");
    let mut server = Machine::new(receiver, "server", "2b2b2b2b-0000-4000-8000-00000000000b");
    let mut b = Browser::launch();
    b.call(json!({"op": "webauthn"}));
    laptop.pair(&mut b, &page, true);
    server.pair(&mut b, &page, false);
    (page, laptop, server, b)
}

#[test]
fn two_machines_one_phone_each_prompt_answered_on_its_own_machine() {
    if let Some(why) = missing_browser_deps() {
        panic!("the browser test cannot run: {why}");
    }
    let dir = tempfile::tempdir().unwrap();
    let receiver = SpReceiver::start(&dir.path().join("receiver"), &[]);
    let (page, mut laptop, mut server, mut b) = laptop_and_server(&receiver);

    assert_ne!(laptop.id, server.id);
    assert_ne!(laptop.token, server.token);
    assert_eq!(
        b.call(json!({"op": "credentials"}))["credentials"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "one phone, one passkey"
    );

    // A prompt waits on each machine; the page shows both, under each machine's heading.
    laptop.env.start_sync();
    server.env.start_sync();
    let (laptop_hook, laptop_att) = laptop.prompt("echo laptop > l.txt", None);
    let (server_hook, server_att) = server.prompt("echo server > s.txt", None);
    b.call(json!({"op": "goto", "url": format!("{page}/")}));
    b.wait("#signed");
    for (m, att) in [(&laptop, &laptop_att), (&server, &server_att)] {
        let heading = format!("#sessions h2.machine[data-machine-id=\"{}\"]", m.id);
        // The session's card under its machine's heading; its prompt in the inbox, named
        // with its machine.
        b.wait(&format!(
            "{heading} + article[data-session=\"{}\"]",
            m.key()
        ));
        let item = format!(".inbox-item[data-session=\"{}\"]", m.key());
        b.wait(&format!("{item} [data-attention=\"{att}\"]"));
        let listed = b.text(&item);
        assert!(listed.contains(m.name), "{listed}");
        let shown = b.text(&heading);
        assert!(shown.contains(m.name), "{shown}");
        assert!(shown.contains("last contact"), "{shown}");
        assert!(shown.contains("key "), "{shown}");
        // The receiver put each session with the machine whose token its events came with.
        let owner: String = receiver_db(&receiver)
            .query_row(
                "SELECT machine_id FROM sessions WHERE key = ?1",
                [m.key()],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(owner, m.id);
    }

    // Allow on each from the one page: each is signed for its own machine and runs there.
    laptop.allow_from_page(&mut b, laptop_hook, &laptop_att);
    server.allow_from_page(&mut b, server_hook, &server_att);
    let mut acks = Vec::new();
    assert!(
        until(Duration::from_secs(20), || {
            acks = signed_acks(&receiver);
            acks.len() >= 2
        }),
        "{acks:?}"
    );
    for (machine, outcome, body) in &acks {
        assert_eq!(outcome, "delivered", "{machine}: {body}");
    }
    let mut machines: Vec<&str> = acks.iter().map(|a| a.0.as_str()).collect();
    machines.sort();
    let mut want = vec![laptop.id.as_str(), server.id.as_str()];
    want.sort();
    assert_eq!(machines, want, "one command signed for each machine");
    assert_eq!(refused_acks(&receiver), Vec::<String>::new());

    // "Remove machine" on the page, for the server: a first click arms, a second removes.
    let remove = format!(
        "#sessions h2.machine[data-machine-id=\"{}\"] button.remove-machine",
        server.id
    );
    b.click(&remove);
    b.wait(&format!("{remove}[data-armed=\"1\"]"));
    b.click(&remove);
    assert!(
        until(Duration::from_secs(10), || receiver_db(&receiver)
            .query_row("SELECT count(*) FROM machines", [], |r| r.get::<_, i64>(0))
            .unwrap()
            == 1),
        "the server is still paired"
    );
    // The server's token is refused from then on; the laptop's still lets it in.
    assert_eq!(events_status(&receiver.url, &server.token), 401);
    assert_eq!(poll_status(&receiver.url, &server.id, &server.token), 401);
    assert_eq!(events_status(&receiver.url, &laptop.token), 400);
    // The server's sp-sync hears it and says what to do.
    assert!(
        until(Duration::from_secs(40), || server
            .env
            .log()
            .contains("no longer knows this machine's token")),
        "server log: {}",
        server.env.log()
    );
    // The laptop is still answered.
    let (hook, att) = laptop.prompt("echo again > l2.txt", Some(&laptop_att));
    laptop.allow_from_page(&mut b, hook, &att);
    assert!(signed_acks(&receiver)
        .iter()
        .all(|(_, outcome, _)| outcome == "delivered"));
    assert_eq!(refused_acks(&receiver), Vec::<String>::new());

    // `sp pair --off phone` on the laptop ends its own token, on both ends.
    laptop.env.stop_sync();
    let off = run_ok(laptop.env.cmd("sp").args(["pair", "--off", "phone"]));
    assert!(off.contains("the receiver removed it too"), "{off}");
    assert_eq!(events_status(&receiver.url, &laptop.token), 401);
    assert_eq!(
        events_status(&receiver.url, TOKEN),
        400,
        "the shared token still serves"
    );
}

/// `sp pair phone` run the way a person runs it, approved over the page's route with a test
/// passkey (`seed`); its output.
fn sp_pair_approved(env: &Env, r: &spreceiver::Receiver, seed: u8) -> std::process::Output {
    use common::signing::*;
    let mut cmd = env.cmd("sp");
    cmd.args(["pair", "phone", "--name", "laptop", "--timeout", "60"]);
    let p = common::pairing::start(cmd);
    let code = p.link.split("code=").nth(1).unwrap().to_owned();
    let u = r.url();
    let (s, status) = http_call(
        "GET",
        &format!("{u}{CONTROL}/pair?code={code}"),
        TOKEN,
        None,
    );
    assert_eq!((s, &status["status"]), (200, &json!("pending")), "{status}");
    // The machine the pairing is for, as the page learns it.
    let (_, pairing) = http_call(
        "GET",
        &format!("{u}/page/api/pairing?code={code}"),
        LOGIN,
        None,
    );
    let machine = pairing["machine"].as_str().unwrap_or_default().to_owned();
    let passkey = Passkey::es256(seed);
    let challenge = sha256(format!("sessionpipe.pair:{machine}:{code}").as_bytes());
    let proof = passkey.assert(&challenge, &Ceremony::get("localhost"));
    let (s, v) = http_call(
        "POST",
        &format!("{u}/page/api/pairing"),
        LOGIN,
        Some(&json!({"code": code, "key": passkey.trusted(), "proof": proof})),
    );
    assert_eq!(s, 200, "{v} (pairing {pairing})");
    let out = finish(p.child, Duration::from_secs(30));
    eprintln!(
        "sp pair: {}{}",
        p.printed.lock().unwrap(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn http_call(method: &str, url: &str, bearer: &str, body: Option<&Value>) -> (u16, Value) {
    let auth = format!("Bearer {bearer}");
    let mut r = if method == "GET" {
        agent()
            .get(url)
            .header("authorization", &auth)
            .call()
            .unwrap()
    } else {
        agent()
            .post(url)
            .header("authorization", &auth)
            .header("content-type", "application/json")
            .send(body.map(Value::to_string).unwrap_or_default())
            .unwrap()
    };
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The machine id and token `env` holds for sink `phone`.
fn paired_here(env: &Env) -> Option<(String, String)> {
    env.db()
        .query_row(
            "SELECT machine, token FROM control_machines WHERE sink = 'phone'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .ok()
}

/// After the page's "Remove machine", and after `sp pair --off`, `sp pair` pairs again (it
/// used to refuse: the receiver answered for a new machine id) and the new token is let in.
#[test]
fn sp_pair_works_again_after_a_removal_on_the_page_or_with_pair_off() {
    let r = spreceiver::Receiver::start(spreceiver::ReceiverOptions {
        token: TOKEN.into(),
        login_token: Some(LOGIN.into()),
        rp_id: Some("localhost".into()),
        ..Default::default()
    })
    .unwrap();
    let env = Env::new();
    env.write_config(json!({
        "machine": "laptop",
        "sinks": [{"name": "phone", "url": r.url(), "tier": 1, "control": "signed", "token": TOKEN}],
    }));
    let out = sp_pair_approved(&env, &r, 51);
    assert!(out.status.success(), "the first pairing");
    let (first, first_token) = paired_here(&env).expect("paired");
    // Removed on the page: the machine pairs again.
    let (s, v) = http_call(
        "POST",
        &format!("{}/page/api/machines/remove", r.url()),
        LOGIN,
        Some(&json!({"machine": first})),
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(events_status(&r.url(), &first_token), 401);
    let out = sp_pair_approved(&env, &r, 52);
    assert!(out.status.success(), "pairing again after Remove machine");
    let (second, second_token) = paired_here(&env).expect("paired again");
    assert_eq!(poll_status(&r.url(), &second, &second_token), 204);
    assert_eq!(events_status(&r.url(), &second_token), 400);
    // Ended from the machine: it pairs again too.
    let out = env
        .cmd("sp")
        .args(["pair", "--off", "phone"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(paired_here(&env), None);
    let out = sp_pair_approved(&env, &r, 53);
    assert!(out.status.success(), "pairing again after sp pair --off");
    let (third, third_token) = paired_here(&env).expect("paired a third time");
    assert_eq!(poll_status(&r.url(), &third, &third_token), 204);
    let keys: Vec<String> = env
        .db()
        .prepare("SELECT id FROM control_keys WHERE sink = 'phone'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(keys.len(), 1, "only the last pairing's key: {keys:?}");
}

// ---------------------------------------------------------------------------------------
// In process over HTTP: who each session belongs to, and who may touch it.
// ---------------------------------------------------------------------------------------

mod http {
    use super::common::signing::*;
    use serde_json::{json, Value};
    use spreceiver::{Receiver, ReceiverOptions};

    const SINK: &str = "test-token";
    const LOGIN: &str = "page-login-token-9876543210abcdef";
    const CONTROL: &str = "/api/sessionpipe/v1/control";
    const EVENTS: &str = "/api/sessionpipe/v1/events";

    fn call(method: &str, url: &str, bearer: Option<&str>, body: Option<&Value>) -> (u16, Value) {
        let agent = super::agent();
        let auth = bearer.map(|b| format!("Bearer {b}"));
        let mut r = if method == "GET" {
            let mut q = agent.get(url);
            if let Some(a) = &auth {
                q = q.header("authorization", a);
            }
            q.call().unwrap()
        } else {
            let mut q = agent.post(url).header("content-type", "application/json");
            if let Some(a) = &auth {
                q = q.header("authorization", a);
            }
            q.send(body.map(Value::to_string).unwrap_or_default())
                .unwrap()
        };
        let status = r.status().as_u16();
        let text = r.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Pairs a machine through the routes with a test passkey: (machine, its token).
    fn pair(r: &Receiver, passkey: &Passkey, name: &str) -> (String, String) {
        pair_as(r, passkey, json!({"name": name}))
    }

    /// Pairs with the pairing request `asked` (`name`, and `machine` for one pairing again).
    fn pair_as(r: &Receiver, passkey: &Passkey, asked: Value) -> (String, String) {
        let u = r.url();
        let (s, started) = call(
            "POST",
            &format!("{u}{CONTROL}/pair"),
            Some(SINK),
            Some(&asked),
        );
        assert_eq!(s, 201, "{started}");
        let m = started["machine"].as_str().unwrap().to_owned();
        let code = started["code"].as_str().unwrap().to_owned();
        let challenge = sha256(format!("sessionpipe.pair:{m}:{code}").as_bytes());
        let proof = passkey.assert(&challenge, &Ceremony::get("localhost"));
        let (s, v) = call(
            "POST",
            &format!("{u}/page/api/pairing"),
            Some(LOGIN),
            Some(&json!({"code": code, "key": passkey.trusted(), "proof": proof})),
        );
        assert_eq!(s, 200, "{v}");
        let (s, paired) = call(
            "GET",
            &format!("{u}{CONTROL}/pair?code={code}"),
            Some(SINK),
            None,
        );
        assert_eq!(s, 200);
        (m, paired["token"].as_str().unwrap().to_owned())
    }

    fn event(sid: &str, seq: i64, ty: &str, data: Value) -> Value {
        json!({"protocol":1,"id":ulid::Ulid::new().to_string(),"type":ty,
            "time":"2026-01-01T00:00:00.000Z","tier":1,"harness":{"name":"claude-code"},
            "session":{"id":sid,"seq":seq,"cwd":"~/x"},
            "privacy":{"rulesets":["secrets@1"],"pii":false},"data":data})
    }

    /// Posts one event with `token`: (status, the answer).
    fn send(r: &Receiver, token: &str, ev: &Value) -> (u16, Value) {
        call(
            "POST",
            &format!("{}{EVENTS}", r.url()),
            Some(token),
            Some(&json!({"events": [ev]})),
        )
    }

    fn accepted(answer: &(u16, Value)) -> bool {
        answer.0 == 202 && answer.1["accepted"] == 1
    }

    fn rejected_because(answer: &(u16, Value)) -> String {
        assert_eq!(answer.0, 202, "{}", answer.1);
        assert_eq!(answer.1["accepted"], 0, "{}", answer.1);
        answer.1["rejected"][0]["reason"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    fn page_state(r: &Receiver) -> Value {
        call(
            "GET",
            &format!("{}/page/api/state?wait=0", r.url()),
            Some(LOGIN),
            None,
        )
        .1
    }

    /// A receiver speaking signed control (rp id `localhost`), in process.
    fn signed_receiver() -> Receiver {
        Receiver::start(ReceiverOptions {
            token: SINK.into(),
            login_token: Some(LOGIN.into()),
            rp_id: Some("localhost".into()),
            wait_max_s: 2,
            ..ReceiverOptions::default()
        })
        .unwrap()
    }

    #[test]
    fn each_session_is_its_machines_and_no_other_token_touches_it() {
        let r = signed_receiver();
        let u = r.url();
        let (a, a_token) = pair(&r, &Passkey::es256(31), "laptop");
        let (b, b_token) = pair(&r, &Passkey::es256(32), "server");
        assert_ne!(a_token, b_token);

        // Each machine's events, with its own token, make its sessions.
        let started = json!({"source": "startup"});
        assert!(accepted(&send(
            &r,
            &a_token,
            &event("sa", 0, "session.started", started.clone())
        )));
        assert!(accepted(&send(
            &r,
            &b_token,
            &event("sb", 0, "session.started", started.clone())
        )));
        // An unpaired sender, with the shared token, as before.
        assert!(accepted(&send(
            &r,
            SINK,
            &event("su", 0, "session.started", started.clone())
        )));

        // A's token cannot touch B's session, nor can the shared token; B's can.
        let needed = |seq| {
            event(
                "sb",
                seq,
                "attention.needed",
                json!({"attention_id": "p1", "kind": "permission", "tool": "Bash", "message": "rm -rf /"}),
            )
        };
        let why = rejected_because(&send(&r, &a_token, &needed(1)));
        assert!(why.contains("another machine"), "{why}");
        let why = rejected_because(&send(&r, SINK, &needed(1)));
        assert!(why.contains("paired machine"), "{why}");
        assert!(page_state(&r)["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["attentions"] == json!([])));
        assert!(accepted(&send(&r, &b_token, &needed(1))));
        // The shared token keeps serving its own session.
        assert!(accepted(&send(
            &r,
            SINK,
            &event("su", 1, "turn.ended", json!({"reason": "stop"}))
        )));

        // The page knows each session's machine, and every machine.
        let state = page_state(&r);
        let owner = |sid: &str| {
            state["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["id"] == sid)
                .unwrap()
                .get("machine_id")
                .cloned()
        };
        assert_eq!(owner("sa"), Some(json!(a)));
        assert_eq!(owner("sb"), Some(json!(b)));
        assert_eq!(owner("su"), None);
        let machines = state["signing"]["machines"].as_array().unwrap();
        let ids: Vec<&str> = machines
            .iter()
            .map(|m| m["machine"].as_str().unwrap())
            .collect();
        assert_eq!(ids, vec![a.as_str(), b.as_str()]);
        assert_eq!(machines[1]["name"], "server");
        assert_eq!(machines[1]["keys"].as_array().unwrap().len(), 1);
        assert!(machines[1]["last_at"].is_string());

        // A session's poll: its machine's token, or for an unpaired session the shared one.
        let poll = |session: &str, token: &str| {
            call(
                "GET",
                &format!("{u}{CONTROL}?session=claude-code:{session}&wait=0"),
                Some(token),
                None,
            )
            .0
        };
        assert_eq!(poll("sb", &a_token), 403);
        assert_eq!(poll("sb", SINK), 403);
        assert_eq!(poll("sb", &b_token), 204);
        assert_eq!(poll("su", SINK), 204);
        assert_eq!(poll("su", "not-a-token"), 401);

        // Removing B (the page, login + CSRF) ends B's token only.
        let remove = format!("{u}/page/api/machines/remove");
        assert_eq!(
            call("POST", &remove, None, Some(&json!({"machine": b}))).0,
            401
        );
        assert_eq!(
            call(
                "POST",
                &remove,
                Some(LOGIN),
                Some(&json!({"machine": "m_nobody"}))
            )
            .0,
            404
        );
        let (s, v) = call("POST", &remove, Some(LOGIN), Some(&json!({"machine": b})));
        assert_eq!(s, 200, "{v}");
        assert_eq!(
            send(
                &r,
                &b_token,
                &event("sb", 2, "turn.ended", json!({"reason": "stop"}))
            )
            .0,
            401
        );
        assert_eq!(
            call(
                "GET",
                &format!("{u}{CONTROL}?machine={b}&wait=0"),
                Some(&b_token),
                None
            )
            .0,
            401
        );
        assert!(accepted(&send(
            &r,
            &a_token,
            &event("sa", 1, "turn.ended", json!({"reason": "stop"}))
        )));
        assert_eq!(
            call(
                "GET",
                &format!("{u}{CONTROL}?machine={a}&wait=0"),
                Some(&a_token),
                None
            )
            .0,
            204
        );
        let state = page_state(&r);
        let ids: Vec<&str> = state["signing"]["machines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["machine"].as_str().unwrap())
            .collect();
        assert_eq!(ids, vec![a.as_str()]);
        // B's sessions are guarded no longer: the shared token sends for them again (B, once
        // it runs `sp pair --off`, sends with it).
        assert!(accepted(&send(
            &r,
            SINK,
            &event("sb", 2, "turn.ended", json!({"reason": "stop"}))
        )));
        // A's stays A's.
        let why = rejected_because(&send(
            &r,
            SINK,
            &event("sa", 2, "turn.ended", json!({"reason": "stop"})),
        ));
        assert!(why.contains("paired machine"), "{why}");
    }

    /// After the page removes machine B, another paired machine's token cannot take B's
    /// sessions over (it used to claim them with its next event); B, pairing again with its
    /// id, gets that id back and its sessions with it, its prompts for them accepted.
    #[test]
    fn a_removed_machines_sessions_stay_its_own_and_pairing_again_takes_them_back() {
        let r = signed_receiver();
        let u = r.url();
        let (_, a_token) = pair(&r, &Passkey::es256(41), "laptop");
        let (b, b_token) = pair(&r, &Passkey::es256(42), "server");
        let started = json!({"source": "startup"});
        assert!(accepted(&send(
            &r,
            &b_token,
            &event("sb", 0, "session.started", started)
        )));
        let (s, v) = call(
            "POST",
            &format!("{u}/page/api/machines/remove"),
            Some(LOGIN),
            Some(&json!({"machine": b})),
        );
        assert_eq!(s, 200, "{v}");
        let needed = |seq| {
            event(
                "sb",
                seq,
                "attention.needed",
                json!({"attention_id": "p1", "kind": "permission", "tool": "Bash", "message": "ls"}),
            )
        };
        // A's token neither sends for B's session nor polls it.
        let why = rejected_because(&send(&r, &a_token, &needed(1)));
        assert!(why.contains("another machine"), "{why}");
        let poll = |token: &str| {
            call(
                "GET",
                &format!("{u}{CONTROL}?session=claude-code:sb&wait=0"),
                Some(token),
                None,
            )
            .0
        };
        assert_eq!(poll(&a_token), 403);
        assert_eq!(poll(SINK), 204, "B, unpaired, polls with the shared token");
        // B pairs again, naming its id: it gets it back, and its session with it.
        let (again, b_token2) = pair_as(
            &r,
            &Passkey::es256(43),
            json!({"name": "server", "machine": b}),
        );
        assert_eq!(again, b);
        assert_ne!(b_token2, b_token);
        assert!(accepted(&send(&r, &b_token2, &needed(1))));
        assert_eq!(poll(&b_token2), 204);
        assert_eq!(poll(&a_token), 403);
        let why = rejected_because(&send(&r, &a_token, &needed(2)));
        assert!(why.contains("another machine"), "{why}");
        let attentions = page_state(&r)["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == "sb")
            .map(|s| s["attentions"].as_array().unwrap().len());
        assert_eq!(attentions, Some(1), "B's prompt is on the page");
    }
}

/// BENCHMARKS.md, "page Allow → hook stdout with two machines and 50 live sessions": run
/// with a release build (`cargo build --release --bins`, then `cargo test --release --test
/// one_inbox -- --ignored --nocapture`). Each round a PermissionRequest waits on one machine
/// (taking turns), the page shows it, and the time is from the click on Allow (the page signs
/// with its day key, posts, the receiver queues, that machine's sp-sync verifies and answers
/// the hook) to the hook's stdout closing with allow printed.
#[test]
#[ignore = "a benchmark: run it on a release build with --ignored"]
fn bench_page_allow_to_hook_two_machines_fifty_sessions() {
    use std::io::Read;
    use std::time::Instant;
    if let Some(why) = missing_browser_deps() {
        panic!("the benchmark cannot run: {why}");
    }
    let rounds: usize = std::env::var("SP_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(100);
    let dir = tempfile::tempdir().unwrap();
    let receiver = SpReceiver::start(&dir.path().join("receiver"), &[]);
    let (page, mut laptop, mut server, mut b) = laptop_and_server(&receiver);
    laptop.env.start_sync();
    server.env.start_sync();
    // 50 live sessions: each machine's prompt session and 24 more each, all started through
    // the machine's own hooks and sp-sync.
    for (m, tag) in [(&laptop, "a"), (&server, "b")] {
        for i in 0..24 {
            let start = json!({"session_id": format!("{tag}{i:07}-0000-4000-8000-000000000000"),
                "hook_event_name": "SessionStart", "cwd": "/tmp", "transcript_path": "/tmp/t.jsonl",
                "source": "startup"});
            assert!(m.env.hook_json("sp-event", &start).status.success());
        }
    }
    b.call(json!({"op": "goto", "url": format!("{page}/")}));
    let mut times = Vec::with_capacity(rounds);
    let (mut page_part, mut machine_part) = (Vec::new(), Vec::new());
    let mut open: [Option<String>; 2] = [None, None];
    for round in 0..rounds + 2 {
        let (m, last) = if round % 2 == 0 {
            (&laptop, &mut open[0])
        } else {
            (&server, &mut open[1])
        };
        let (mut hook, att) = m.prompt(&format!("echo {round} > r{round}.txt"), last.as_deref());
        *last = Some(att.clone());
        let attention = format!(
            ".inbox-item[data-session=\"{}\"] [data-attention=\"{att}\"] button.allow",
            m.key()
        );
        b.wait(&attention);
        let mut out = hook.stdout.take().unwrap();
        let wall = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
                * 1000.0
        };
        let (t0, w0) = (Instant::now(), wall());
        b.click(&attention);
        let mut printed = String::new();
        out.read_to_string(&mut printed).unwrap();
        let took = t0.elapsed();
        let w1 = wall();
        let _ = hook.wait();
        assert_eq!(printed.trim_end(), ALLOW, "round {round}: {}", m.env.log());
        // Where the time went: the page's part (click, sign, post) ends when the receiver
        // queued the envelope; the machine's part (poll answered, verify, hook) follows.
        let queued: i64 = receiver_db(&receiver)
            .query_row(
                "SELECT enqueued_ms FROM messages WHERE machine = ?1 ORDER BY n DESC LIMIT 1",
                [&m.id],
                |r| r.get(0),
            )
            .unwrap();
        // The first round on each machine makes the page's day key (a passkey touch).
        if round >= 2 {
            times.push(took.as_secs_f64() * 1000.0);
            page_part.push(queued as f64 - w0);
            machine_part.push(w1 - queued as f64);
        }
    }
    let live = receiver_db(&receiver)
        .query_row("SELECT count(*) FROM sessions WHERE ended = 0", [], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap();
    assert_eq!(live, 50);
    assert_eq!(refused_acks(&receiver), Vec::<String>::new());
    let pct = |v: &mut Vec<f64>, p: f64| {
        v.sort_by(f64::total_cmp);
        v[((p / 100.0) * v.len() as f64).ceil() as usize - 1]
    };
    println!(
        "page Allow -> hook stdout, two machines, {live} live sessions, {} rounds: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        times.len(),
        pct(&mut times, 50.0),
        pct(&mut times, 99.0),
        pct(&mut times, 100.0)
    );
    println!(
        "  click -> envelope queued: p50 {:.1} ms, p99 {:.1} ms; queued -> hook stdout: p50 {:.1} ms, p99 {:.1} ms",
        pct(&mut page_part, 50.0),
        pct(&mut page_part, 99.0),
        pct(&mut machine_part, 50.0),
        pct(&mut machine_part, 99.0)
    );
}
