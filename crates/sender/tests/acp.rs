//! Issue 16: sp-acp, the ACP stdio proxy, between a scripted editor (this test) and a
//! scripted ACP agent (a small Python program below), with a real receiver, sp-sync and
//! SQLite store. The agent logs every line it reads, so the tests see exactly what reached it.
mod common;
use common::env::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// A scripted ACP agent. It logs each raw line it reads to $AGENT_LOG and answers:
/// `initialize`, `session/new`, `session/prompt` (text "ask": asks permission and reports the
/// outcome; "wait": runs until `session/cancel`; otherwise echoes), `test/raw` (writes the
/// given raw lines to stdout as they are), `test/exit` (writes to stderr, exits 7).
const AGENT: &str = r#"
import json, os, sys
log = open(os.environ["AGENT_LOG"], "ab", buffering=0)
out = sys.stdout.buffer
pending = []
def send(obj):
    out.write((json.dumps(obj) + "\n").encode()); out.flush()
def read():
    if pending:
        return pending.pop(0)
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            sys.exit(0)
        log.write(line)
        try:
            return json.loads(line)
        except Exception:
            continue
def wait_response(rid):
    held = []
    while True:
        m = read()
        if m.get("id") == rid and "method" not in m:
            pending[:0] = held
            return m
        held.append(m)
def text_of(m):
    return "".join(p.get("text", "") for p in m["params"]["prompt"])
def update(sid, text):
    send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid,
          "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}})
caps = {"loadSession": True}
if os.environ.get("AGENT_INJECT"):
    caps["_meta"] = {"harn": {"sessionInject": ["steer", "queue", "interrupt_immediate"]}}
if os.environ.get("AGENT_QUEUEING"):
    caps["_meta"] = {"claudeCode": {"promptQueueing": True}}
n = 0
while True:
    m = read()
    meth, mid = m.get("method"), m.get("id")
    if meth == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": 1,
              "agentCapabilities": caps, "agentInfo": {"name": "scripted-agent", "version": "1.0"}}})
    elif meth == "session/new":
        n += 1
        send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": "sess-%d" % n}})
    elif meth == "session/prompt":
        sid, text = m["params"]["sessionId"], text_of(m)
        if "ask" in text:
            send({"jsonrpc": "2.0", "id": 900 + n, "method": "session/request_permission", "params": {
                "sessionId": sid,
                "toolCall": {"toolCallId": "call_%d" % n, "title": "bash", "kind": "execute",
                             "rawInput": {"command": "echo hi > out.txt"}},
                "options": [{"optionId": "yes-always", "name": "Always", "kind": "allow_always"},
                            {"optionId": "yes-once", "name": "Once", "kind": "allow_once"},
                            {"optionId": "no-once", "name": "No", "kind": "reject_once"},
                            {"optionId": "no-always", "name": "Never", "kind": "reject_always"}]}})
            r = wait_response(900 + n)
            outcome = r.get("result", {}).get("outcome")
            update(sid, "permission " + json.dumps(outcome))
            stop = "cancelled" if outcome == {"outcome": "cancelled"} else "end_turn"
            send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": stop}})
        elif "twice" in text:
            # Two requests under one toolCallId, the second with another command.
            for i, cmd in enumerate(["echo one > one.txt", "rm -rf important"]):
                rid = 800 + 10 * n + i
                send({"jsonrpc": "2.0", "id": rid, "method": "session/request_permission", "params": {
                    "sessionId": sid,
                    "toolCall": {"toolCallId": "call_dup", "title": "bash", "kind": "execute",
                                 "rawInput": {"command": cmd}},
                    "options": [{"optionId": "yes-once", "name": "Once", "kind": "allow_once"},
                                {"optionId": "no-once", "name": "No", "kind": "reject_once"}]}})
                r = wait_response(rid)
                update(sid, "permission %d %s" % (i, json.dumps(r.get("result", {}).get("outcome"))))
            send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
        elif "wait" in text:
            update(sid, "working")
            while True:
                c = read()
                if c.get("method") == "session/cancel":
                    break
                if c.get("method") == "session/prompt":
                    # As claude-agent-acp's promptQueueing: the running turn takes it in.
                    update(sid, "queued: " + text_of(c))
                    send({"jsonrpc": "2.0", "id": c["id"], "result": {"stopReason": "end_turn"}})
                if c.get("method") == "session/inject":
                    send({"jsonrpc": "2.0", "id": c["id"], "result": {"messageId": "msg-1", "status": "accepted"}})
                    update(sid, "injected " + c["params"]["mode"] + ": " + c["params"]["content"][0]["text"])
            send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "cancelled"}})
        else:
            update(sid, "echo: " + text)
            send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
    elif meth == "session/load":
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    elif meth == "test/raw":
        for line in m["params"]["lines"]:
            out.write(line.encode() + b"\n")
        n_big = m["params"].get("big", 0)
        if n_big:
            out.write(b'{"jsonrpc":"2.0","method":"test/big","params":{"pad":"' + b"x" * n_big + b'"}}\n')
        out.flush()
    elif meth == "test/exit":
        sys.stderr.write("agent says bye\n"); sys.stderr.flush()
        sys.exit(7)
"#;

/// The proxy with the scripted agent behind it; this test plays the editor.
struct Editor {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Vec<u8>>,
    agent_log: PathBuf,
    next: u64,
}

fn sp_acp() -> PathBuf {
    env!("CARGO_BIN_EXE_sp-acp").into()
}

fn write_agent(dir: &Path) -> PathBuf {
    let p = dir.join("agent.py");
    std::fs::write(&p, AGENT).unwrap();
    p
}

impl Editor {
    fn start(env: &Env, agent_env: &[(&str, &str)]) -> Editor {
        Self::start_with(env, agent_env, &[])
    }

    /// With `proxy_env` set on sp-acp after the usual environment (e.g. a broken state dir).
    fn start_with(env: &Env, agent_env: &[(&str, &str)], proxy_env: &[(&str, &Path)]) -> Editor {
        let agent = write_agent(env.dir.path());
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let agent_log = env.dir.path().join(format!("agent-{n}.log"));
        // The environment the hooks get (HOME, config, state, no spawning of sp-sync).
        let base = env.cmd("sp-sync");
        let mut cmd = Command::new(sp_acp());
        cmd.env_clear().current_dir(&env.home);
        for (k, v) in base.get_envs() {
            if let Some(v) = v {
                cmd.env(k, v);
            }
        }
        cmd.env("AGENT_LOG", &agent_log)
            .args(["--", "python3", "-u"])
            .arg(&agent)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in agent_env {
            cmd.env(k, v);
        }
        for (k, v) in proxy_env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("sp-acp starts");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = Vec::new();
                match r.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if tx.send(line).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Editor {
            child,
            stdin,
            lines: rx,
            agent_log,
            next: 0,
        }
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        let w = self.stdin.as_mut().unwrap();
        w.write_all(bytes).unwrap();
        w.flush().unwrap();
    }

    fn send(&mut self, v: &Value) {
        self.send_raw(format!("{v}\n").as_bytes());
    }

    /// Sends a request; returns its id.
    fn request(&mut self, method: &str, params: Value) -> u64 {
        self.next += 1;
        let id = self.next;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The next frame from the agent (through the proxy), raw.
    fn next_raw(&self, timeout: Duration) -> Vec<u8> {
        self.lines
            .recv_timeout(timeout)
            .expect("a frame from the proxy in time")
    }

    /// Reads frames until one matches; returns it and every frame read on the way.
    fn until(&self, timeout: Duration, pred: impl Fn(&Value) -> bool) -> (Value, Vec<Value>) {
        let end = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let raw = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no matching frame; saw {seen:#?}"));
            let v: Value = serde_json::from_slice(&raw).unwrap();
            if pred(&v) {
                return (v, seen);
            }
            seen.push(v);
        }
    }

    fn response(&self, id: u64) -> (Value, Vec<Value>) {
        self.until(Duration::from_secs(20), |v| {
            v["id"] == id && v.get("method").is_none()
        })
    }

    fn init_and_new(&mut self) -> String {
        let id = self.request(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        );
        self.response(id);
        let id = self.request("session/new", json!({"cwd": "/tmp", "mcpServers": []}));
        let (r, _) = self.response(id);
        r["result"]["sessionId"].as_str().unwrap().to_string()
    }

    fn prompt(&mut self, sid: &str, text: &str) -> u64 {
        self.request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]}),
        )
    }

    /// Starts a turn that runs until it is stopped (prompt "wait"); its request id.
    fn working(&mut self, sid: &str) -> u64 {
        let p = self.prompt(sid, "wait");
        self.until(Duration::from_secs(20), |v| {
            v["params"]["update"]["content"]["text"] == "working"
        });
        p
    }

    /// Reads frames until the agent says something starting with `prefix`.
    fn said_starting(&self, timeout: Duration, prefix: &str) -> (Value, Vec<Value>) {
        self.until(timeout, |v| {
            v["params"]["update"]["content"]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with(prefix))
        })
    }

    /// The text of the next session update of kind `update` (`user_message_chunk`, …).
    fn update_text(&self, timeout: Duration, update: &str) -> String {
        let (v, _) = self.until(timeout, |v| {
            v["params"]["update"]["sessionUpdate"] == update
        });
        v["params"]["update"]["content"]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The editor stops the session's turn (`session/cancel`).
    fn stop(&mut self, sid: &str) {
        self.send(
            &json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}),
        );
    }

    fn agent_log(&self) -> String {
        std::fs::read_to_string(&self.agent_log).unwrap_or_default()
    }

    /// Closes the editor's side and waits for the proxy to exit.
    fn close(mut self) -> std::process::Output {
        drop(self.stdin.take());
        let status = wait_timeout(&mut self.child, Duration::from_secs(20)).expect("sp-acp exits");
        let mut stderr = Vec::new();
        if let Some(mut e) = self.child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_end(&mut stderr);
        }
        std::process::Output {
            status,
            stdout: Vec::new(),
            stderr,
        }
    }
}

impl Drop for Editor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The attention id of a call the agent named (DECISIONS 32): its `toolCallId`, `-`, and 8
/// hex digits of sha256 over its `rawInput` as JSON.
fn call_attention(tool_call_id: &str, raw_input: &Value) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(raw_input.to_string().as_bytes());
    let hex: String = d[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("{tool_call_id}-{hex}")
}

/// The scripted agent's first call of a session (prompt "ask").
fn call_1() -> String {
    call_attention("call_1", &json!({"command": "echo hi > out.txt"}))
}

/// A message the receiver queued: its id.
trait MessageId {
    fn id(&self) -> &str;
}

impl MessageId for Value {
    fn id(&self) -> &str {
        self["id"].as_str().expect("a message with an id")
    }
}

/// sp-sync running, an editor on sp-acp with the scripted agent (run with `agent_env`), and
/// a new session that sp-sync polls: (env, editor, session id, session key).
fn polled_session(agent_env: &[(&str, &str)]) -> (Env, Editor, String, String) {
    let (env, ed, sid, key) = live_session(agent_env);
    wait_polled(&env, &key);
    (env, ed, sid, key)
}

/// As [`polled_session`], without waiting for sp-sync's first poll.
fn live_session(agent_env: &[(&str, &str)]) -> (Env, Editor, String, String) {
    let env = env_with_sync();
    let mut ed = Editor::start(&env, agent_env);
    let sid = ed.init_and_new();
    let key = format!("acp:{sid}");
    (env, ed, sid, key)
}

/// The attention.needed event of `attention`, once it reached the receiver.
fn wait_needed(env: &Env, attention: &str) -> Value {
    env.wait_event(
        "attention.needed",
        json!({"attention_id": attention}),
        Duration::from_secs(30),
    )
    .unwrap_or_else(|| panic!("no attention.needed for {attention}\n{}", env.log()))
}

/// How `attention` was cleared, once attention.cleared reached the receiver.
fn cleared_how(env: &Env, attention: &str) -> Value {
    let cleared = env.wait_event(
        "attention.cleared",
        json!({"attention_id": attention}),
        Duration::from_secs(20),
    );
    cleared.unwrap_or_else(|| panic!("no attention.cleared for {attention}"))["data"]["how"].clone()
}

/// Whether the store says session `sid` ended.
fn session_ended(env: &Env, sid: &str) -> bool {
    let ended: Vec<Option<String>> = env.query(&format!(
        "select ended_at from sessions where key='acp:{sid}'"
    ));
    ended[0].is_some()
}

/// A `mode` prompt while a turn runs reaches the agent as `session/inject` in
/// `inject_mode`, and is acked delivered saying so.
fn assert_injected(env: &Env, ed: &Editor, key: &str, text: &str, mode: &str, inject_mode: &str) {
    let msg = enqueue_prompt(env, key, text, mode);
    let (said, _) = ed.said_starting(Duration::from_secs(30), "injected");
    let said = said["params"]["update"]["content"]["text"]
        .as_str()
        .unwrap();
    let prefix = format!("injected {inject_mode}: ");
    assert!(said.starts_with(&prefix) && said.ends_with(text), "{said}");
    let ack = ack_of(env, msg.id());
    assert_eq!(ack["outcome"], "delivered");
    let how = format!("session/inject mode {inject_mode}");
    assert!(ack["detail"].as_str().unwrap().contains(&how), "{ack}");
}

/// Queues a prompt of `mode` for the session `key`; the message.
fn enqueue_prompt(env: &Env, key: &str, text: &str, mode: &str) -> Value {
    env.receiver
        .enqueue(key, json!({"kind": "prompt", "text": text, "mode": mode}))
}

fn env_with_sync() -> Env {
    let mut env = Env::new();
    env.start_sync();
    env
}

fn ack_of(env: &Env, id: &str) -> Value {
    env.receiver
        .wait_ack(id, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("no ack for {id}\n{}", env.log()))
}

/// Waits until sp-sync polls the session, so a message enqueued now is taken.
fn wait_polled(env: &Env, key: &str) {
    assert!(
        until(Duration::from_secs(20), || env
            .receiver
            .poll_sessions()
            .iter()
            .any(|s| s == key)),
        "sp-sync never polled {key}\n{}",
        env.log()
    );
}

#[test]
fn frames_pass_byte_for_byte_both_ways_including_one_over_the_cap() {
    let env = Env::new();
    let mut ed = Editor::start(&env, &[]);
    // Editor → agent: odd spacing, escapes, key order and a frame over the 8 MiB cap.
    let odd = b"{ \"jsonrpc\" : \"2.0\",\"method\":\"test/noop\" ,\"params\":{\"z\":1,\"a\":\"\\u00e9\\n\",\"n\":1.50}}\n".to_vec();
    let mut big = b"{\"jsonrpc\":\"2.0\",\"method\":\"test/noop\",\"params\":{\"pad\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'y', 9 << 20));
    big.extend_from_slice(b"\"}}\n");
    ed.send_raw(&odd);
    ed.send_raw(&big);
    ed.send_raw(&odd);
    // Agent → editor: raw lines written as they are, then a frame over the cap.
    let lines = [
        r#"{"jsonrpc":"2.0","method":"session/update","params":{ "b":2, "a" :"\u00e9"}}"#,
        r#"{"jsonrpc":"2.0","method":"test/x","params":[1, 2.50 ,{}]}"#,
    ];
    ed.request("test/raw", json!({"lines": lines, "big": 9 << 20}));
    for l in lines {
        assert_eq!(
            ed.next_raw(Duration::from_secs(20)),
            format!("{l}\n").into_bytes()
        );
    }
    let got = ed.next_raw(Duration::from_secs(20));
    let mut want = b"{\"jsonrpc\":\"2.0\",\"method\":\"test/big\",\"params\":{\"pad\":\"".to_vec();
    want.extend(std::iter::repeat_n(b'x', 9 << 20));
    want.extend_from_slice(b"\"}}\n");
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the big frame arrived changed");
    // The agent read exactly the editor's bytes, in order.
    assert!(until(Duration::from_secs(20), || {
        let log = std::fs::read(&ed.agent_log).unwrap_or_default();
        log.len() >= odd.len() * 2 + big.len()
    }));
    let log = std::fs::read(&ed.agent_log).unwrap();
    let mut want_in = odd.clone();
    want_in.extend_from_slice(&big);
    want_in.extend_from_slice(&odd);
    assert!(
        log.starts_with(&want_in),
        "the agent did not read the editor's exact bytes"
    );
    assert!(env
        .log()
        .contains("over the 8388608 byte cap; forwarded unparsed"));
}

#[test]
fn the_agents_exit_code_and_stderr_pass_through() {
    let env = Env::new();
    let mut ed = Editor::start(&env, &[]);
    ed.request("test/exit", json!({}));
    let out = ed.close();
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "agent says bye\n");
}

#[test]
fn a_session_becomes_live_and_reaches_the_receiver() {
    let (env, ed, sid, _) = live_session(&[]);
    let started = env
        .receiver
        .wait_event(Duration::from_secs(30), |e| e["type"] == "session.started")
        .unwrap_or_else(|| panic!("no session.started\n{}", env.log()));
    assert_eq!(started["session"]["id"], sid);
    assert_eq!(started["harness"]["name"], "acp");
    assert_eq!(started["session"]["seq"], 0);
    // When the agent exits, the session ends.
    let out = ed.close();
    assert!(out.status.success());
    assert!(
        session_ended(&env, &sid),
        "the session did not end with the agent"
    );
}

#[test]
fn a_remote_allow_answers_allow_once_and_the_editors_late_answer_is_swallowed() {
    let (env, mut ed, sid, key) = live_session(&[]);
    let (p, req) = ask(&env, &mut ed, &sid);
    let needed = wait_needed(&env, &call_1());
    assert_eq!(needed["data"]["tool"], "bash");
    assert_eq!(needed["data"]["message"], "bash echo hi > out.txt");
    wait_polled(&env, &key);
    let msg = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": call_1(), "decision": "allow"}),
    );
    // The editor is told to drop its request, then the agent reports the option it got.
    let (_, seen) = ed.response(p);
    let cancel = seen
        .iter()
        .position(|v| v["method"] == "$/cancel_request")
        .expect("the editor was sent $/cancel_request");
    assert_eq!(seen[cancel]["params"]["requestId"], req["id"]);
    let said = seen
        .iter()
        .position(|v| {
            v["params"]["update"]["content"]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("permission"))
        })
        .expect("the agent said which option it got");
    assert!(
        cancel < said,
        "the editor heard of it before the agent acted"
    );
    assert_eq!(
        seen[said]["params"]["update"]["content"]["text"],
        r#"permission {"outcome": "selected", "optionId": "yes-once"}"#
    );
    // The editor answers late: the agent must never see it.
    ed.send(&json!({"jsonrpc": "2.0", "id": req["id"],
        "result": {"outcome": {"outcome": "selected", "optionId": "no-always"}}}));
    let ack = ack_of(&env, msg.id());
    assert_eq!(ack["outcome"], "delivered");
    let done = ed.prompt(&sid, "after");
    ed.response(done);
    assert!(
        !ed.agent_log().contains("no-always"),
        "the late editor answer reached the agent"
    );
    assert_eq!(cleared_how(&env, &call_1()), "answered");
}

#[test]
fn the_editor_answering_first_wins_and_the_remote_answer_is_acked_expired() {
    let (env, mut ed, sid, key) = live_session(&[]);
    let (p, req) = ask(&env, &mut ed, &sid);
    ed.send(&json!({"jsonrpc": "2.0", "id": req["id"],
        "result": {"outcome": {"outcome": "selected", "optionId": "no-once"}}}));
    let (said, _) = ed.until(Duration::from_secs(20), |v| v["method"] == "session/update");
    assert_eq!(
        said["params"]["update"]["content"]["text"],
        r#"permission {"outcome": "selected", "optionId": "no-once"}"#
    );
    ed.response(p);
    env.wait_event(
        "attention.cleared",
        json!({"attention_id": call_1(), "how": "answered"}),
        Duration::from_secs(20),
    )
    .unwrap_or_else(|| panic!("no attention.cleared\n{}", env.log()));
    wait_polled(&env, &key);
    let msg = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": call_1(), "decision": "allow"}),
    );
    assert_eq!(ack_of(&env, msg.id())["outcome"], "expired");
    assert!(!ed.agent_log().contains("yes-once"));
}

#[test]
fn a_remote_cancel_sends_session_cancel_and_is_delivered_when_the_prompt_ends_cancelled() {
    let (env, mut ed, sid, key) = polled_session(&[]);
    let p = ed.working(&sid);
    let msg = env.receiver.enqueue(&key, json!({"kind": "cancel"}));
    let (r, _) = ed.response(p);
    assert_eq!(r["result"]["stopReason"], "cancelled");
    let ack = ack_of(&env, msg.id());
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    assert!(ack["detail"].as_str().unwrap().contains("ended cancelled"));
    assert!(ed.agent_log().contains(r#""method":"session/cancel""#));
    // The stopped turn is over: `turn.ended` says the person stopped it.
    let ended = env
        .receiver
        .wait_event(Duration::from_secs(30), |e| e["type"] == "turn.ended")
        .expect("turn.ended reaches the receiver");
    assert_eq!(ended["data"], json!({"reason": "interrupt"}));
    assert_eq!(ended["session"]["id"], sid.as_str());
}

#[test]
fn a_remote_cancel_while_idle_is_acked_expired() {
    let (env, ed, _sid, key) = polled_session(&[]);
    let msg = env.receiver.enqueue(&key, json!({"kind": "cancel"}));
    assert_eq!(ack_of(&env, msg.id())["outcome"], "expired");
    assert!(!ed.agent_log().contains("session/cancel"));
}

#[test]
fn a_remote_prompt_while_idle_starts_a_turn_and_its_response_is_not_forwarded() {
    let (env, mut ed, sid, key) = polled_session(&[]);
    let msg = env.receiver.enqueue(
        &key,
        json!({"kind": "prompt", "text": "hello from the phone"}),
    );
    // The editor is shown the prompt as the user's message, then the agent's answer.
    let shown = ed.update_text(Duration::from_secs(30), "user_message_chunk");
    assert!(shown.ends_with("hello from the phone"), "{shown}");
    let echo = ed.update_text(Duration::from_secs(20), "agent_message_chunk");
    assert!(echo.contains("hello from the phone"), "{echo}");
    let ack = ack_of(&env, msg.id());
    assert_eq!(ack["outcome"], "delivered");
    // The next editor request's response is the next thing the editor gets: the proxy's own
    // prompt response (id sp-acp-1) never reached it.
    let p = ed.prompt(&sid, "mine");
    let (_, before) = ed.response(p);
    assert!(
        before.iter().all(|v| v.get("result").is_none()),
        "a response the editor did not ask for: {before:#?}"
    );
}

#[test]
fn steer_goes_as_session_inject_when_the_agent_offers_it() {
    let (env, mut ed, sid, key) = polled_session(&[("AGENT_INJECT", "1")]);
    let p = ed.working(&sid);
    assert_injected(&env, &ed, &key, "prefer the smaller fix", "steer", "steer");
    // A stop ends the turn.
    ed.stop(&sid);
    let (r, _) = ed.response(p);
    assert_eq!(r["result"]["stopReason"], "cancelled");
}

#[test]
fn sp_hooks_print_acp_prints_the_zed_agent_servers_entry() {
    let env = Env::new();
    let out = env
        .cmd("sp")
        .args(["hooks", "print", "acp", "--bin-dir", "/opt/sp/bin"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let json: String = text
        .lines()
        .filter(|l| !l.starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let v: Value = serde_json::from_str(&json).expect("JSON after the comment lines");
    let entry = &v["agent_servers"]["OpenCode (sessionpipe)"];
    assert_eq!(entry["command"], "/opt/sp/bin/sp-acp");
    assert_eq!(entry["args"], json!(["--", "opencode", "acp"]));
}

#[test]
fn an_unusable_store_is_logged_and_every_frame_still_passes() {
    let env = Env::new();
    // The state folder is a file: the store cannot be opened, and neither can the log.
    let broken = env.dir.path().join("not-a-folder");
    std::fs::write(&broken, "x").unwrap();
    let mut ed = Editor::start_with(&env, &[], &[("SESSIONPIPE_STATE_DIR", &broken)]);
    let sid = ed.init_and_new();
    let p = ed.prompt(&sid, "ask");
    let (req, _) = ed.until(Duration::from_secs(20), |v| {
        v["method"] == "session/request_permission"
    });
    ed.send(&json!({"jsonrpc": "2.0", "id": req["id"],
        "result": {"outcome": {"outcome": "selected", "optionId": "yes-once"}}}));
    let (r, seen) = ed.response(p);
    assert_eq!(r["result"]["stopReason"], "end_turn");
    assert!(seen.iter().any(|v| v["params"]["update"]["content"]["text"]
        == r#"permission {"outcome": "selected", "optionId": "yes-once"}"#));
    let out = ed.close();
    assert!(out.status.success());
    // With no log file, the reason goes to stderr, which the editor keeps as the agent's.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the store is unusable"), "{err}");
}

/// Starts a prompt that asks permission; returns the prompt's id and the permission request.
fn ask(env: &Env, ed: &mut Editor, sid: &str) -> (u64, Value) {
    let p = ed.prompt(sid, "ask");
    let (req, _) = ed.until(Duration::from_secs(20), |v| {
        v["method"] == "session/request_permission"
    });
    wait_needed(env, &call_1());
    (p, req)
}

fn outcome_said(seen: &[Value]) -> Option<String> {
    seen.iter().find_map(|v| {
        v["params"]["update"]["content"]["text"]
            .as_str()
            .filter(|t| t.starts_with("permission "))
            .map(str::to_string)
    })
}

#[test]
fn a_remote_deny_answers_reject_once() {
    let (env, mut ed, sid, key) = polled_session(&[]);
    let (p, _) = ask(&env, &mut ed, &sid);
    let msg = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": call_1(), "decision": "deny", "note": "not now"}),
    );
    let (_, seen) = ed.response(p);
    assert_eq!(
        outcome_said(&seen).as_deref(),
        Some(r#"permission {"outcome": "selected", "optionId": "no-once"}"#)
    );
    assert_eq!(ack_of(&env, msg.id())["outcome"], "delivered");
}

#[test]
fn a_remote_cancel_answers_a_pending_permission_cancelled_and_ends_the_turn() {
    let (env, mut ed, sid, key) = polled_session(&[]);
    let (p, req) = ask(&env, &mut ed, &sid);
    let msg = env.receiver.enqueue(&key, json!({"kind": "cancel"}));
    let (r, seen) = ed.response(p);
    assert_eq!(r["result"]["stopReason"], "cancelled");
    assert_eq!(
        outcome_said(&seen).as_deref(),
        Some(r#"permission {"outcome": "cancelled"}"#)
    );
    assert!(seen
        .iter()
        .any(|v| v["method"] == "$/cancel_request" && v["params"]["requestId"] == req["id"]));
    let ack = ack_of(&env, msg.id());
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    assert_eq!(cleared_how(&env, &call_1()), "cancelled");
}

#[test]
fn a_prompt_while_a_turn_runs_waits_for_its_end_without_session_inject() {
    let (env, mut ed, sid, key) = polled_session(&[]);
    let p = ed.working(&sid);
    let msg = enqueue_prompt(&env, &key, "after this turn", "steer");
    let id = msg["id"].as_str().unwrap().to_string();
    // Stored, and still queued while the turn runs (the agent offers no session/inject).
    assert!(until(Duration::from_secs(20), || env
        .query::<String>(&format!("select state from messages where id='{id}'"))
        .first()
        .is_some_and(|s| s == "queued")));
    assert!(!ed.agent_log().contains("after this turn"));
    ed.stop(&sid);
    let (r, _) = ed.response(p);
    assert_eq!(r["result"]["stopReason"], "cancelled");
    // Then it starts the next turn.
    let (echo, _) = ed.until(Duration::from_secs(30), |v| {
        v["params"]["update"]["content"]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("echo: ") && t.ends_with("after this turn"))
    });
    assert_eq!(echo["params"]["sessionId"], sid.as_str());
    assert_eq!(ack_of(&env, &id)["outcome"], "delivered");
    // The cancelled turn went straight on to the queued prompt, so it did not end waiting
    // for the person; the prompt's own turn did.
    let ended = env
        .receiver
        .wait_event(Duration::from_secs(30), |e| e["type"] == "turn.ended")
        .expect("turn.ended reaches the receiver");
    assert_eq!(ended["data"], json!({"reason": "stop"}));
    assert_eq!(
        env.query::<String>(
            "select json_extract(data, '$.reason') from events where type='turn.ended'"
        ),
        ["stop"]
    );
}

#[test]
fn sigterm_to_sp_acp_reaches_the_agent_and_ends_the_session() {
    let env = Env::new();
    let mut ed = Editor::start(&env, &[]);
    let sid = ed.init_and_new();
    assert!(until(Duration::from_secs(20), || env
        .query::<String>(&format!("select key from sessions where key='acp:{sid}'"))
        .len()
        == 1));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(ed.child.id() as i32, libc::SIGTERM) };
    let status = wait_timeout(&mut ed.child, Duration::from_secs(20)).expect("sp-acp exits");
    // The agent (Python) died of the SIGTERM it was passed: 128 + 15.
    assert_eq!(status.code(), Some(143));
    assert!(
        session_ended(&env, &sid),
        "the session ended with the agent"
    );
}

#[test]
fn a_loaded_session_becomes_live_as_resumed() {
    let env = env_with_sync();
    let mut ed = Editor::start(&env, &[]);
    let id = ed.request("initialize", json!({"protocolVersion": 1}));
    ed.response(id);
    let id = ed.request(
        "session/load",
        json!({"sessionId": "old-1", "cwd": "/tmp", "mcpServers": []}),
    );
    ed.response(id);
    let started = env
        .receiver
        .wait_event(Duration::from_secs(30), |e| {
            e["type"] == "session.started" && e["session"]["id"] == "old-1"
        })
        .unwrap_or_else(|| panic!("no session.started\n{}", env.log()));
    assert_eq!(started["data"]["source"], "resume");
    assert_eq!(started["harness"]["name"], "acp");
}

#[test]
fn interrupt_goes_as_session_inject_interrupt_immediate() {
    let (env, mut ed, sid, key) = polled_session(&[("AGENT_INJECT", "1")]);
    let p = ed.working(&sid);
    let text = "stop and read this";
    assert_injected(&env, &ed, &key, text, "interrupt", "interrupt_immediate");
    ed.stop(&sid);
    ed.response(p);
}

/// Issue 28 / DECISIONS 32: an approval is bound to the call's input, not to its id alone.
#[test]
fn sp_acp_asks_again_when_a_requests_input_changes_under_the_same_id() {
    let (env, mut ed, sid, key) = polled_session(&[]);
    let first = call_attention("call_dup", &json!({"command": "echo one > one.txt"}));
    let second = call_attention("call_dup", &json!({"command": "rm -rf important"}));
    assert_ne!(first, second);
    let p = ed.prompt(&sid, "twice");
    let needed = wait_needed(&env, &first);
    assert_eq!(needed["data"]["message"], "bash echo one > one.txt");
    let allow = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": first, "decision": "allow"}),
    );
    let (said, _) = ed.said_starting(Duration::from_secs(20), "permission 0");
    assert_eq!(
        said["params"]["update"]["content"]["text"],
        r#"permission 0 {"outcome": "selected", "optionId": "yes-once"}"#
    );
    assert_eq!(ack_of(&env, allow.id())["outcome"], "delivered");
    // The same toolCallId with another command: a new prompt, announced with its own id.
    let (req2, _) = ed.until(Duration::from_secs(20), |v| {
        v["method"] == "session/request_permission"
    });
    assert_eq!(req2["params"]["toolCall"]["toolCallId"], "call_dup");
    let needed = wait_needed(&env, &second);
    assert_eq!(needed["data"]["message"], "bash rm -rf important");
    // Another allow for what the person saw first does not answer it.
    let stale = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": first, "decision": "allow"}),
    );
    let ack = ack_of(&env, stale.id());
    assert_ne!(ack["outcome"], "delivered", "{ack}");
    let rid2 = req2["id"].as_u64().unwrap();
    assert!(
        !ed.agent_log().contains(&format!("\"id\":{rid2},")),
        "the second request was answered by the first one's approval"
    );
    // Its own answer does.
    let deny = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": second, "decision": "deny"}),
    );
    let (_, seen) = ed.response(p);
    assert!(
        seen.iter().any(|v| v["params"]["update"]["content"]["text"]
            == r#"permission 1 {"outcome": "selected", "optionId": "no-once"}"#),
        "{seen:#?}"
    );
    assert_eq!(ack_of(&env, deny.id())["outcome"], "delivered");
}

/// claude-agent-acp's way (`promptQueueing`): a steer while a turn runs goes as a plain
/// `session/prompt`, which the agent takes into that turn; acked when the agent answers it.
#[test]
fn steer_goes_as_a_queued_session_prompt_where_the_agent_queues_prompts() {
    let (env, mut ed, sid, key) = polled_session(&[("AGENT_QUEUEING", "1")]);
    let p = ed.working(&sid);
    let msg = enqueue_prompt(&env, &key, "prefer the smaller fix", "steer");
    let (said, seen) = ed.said_starting(Duration::from_secs(30), "queued: ");
    assert!(said["params"]["update"]["content"]["text"]
        .as_str()
        .unwrap()
        .ends_with("prefer the smaller fix"));
    // The editor was shown the message, and never gets the response to sp-acp's prompt.
    assert!(seen
        .iter()
        .any(|v| v["params"]["update"]["sessionUpdate"] == "user_message_chunk"));
    let ack = ack_of(&env, msg.id());
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    assert!(
        ack["detail"].as_str().unwrap().contains("promptQueueing"),
        "{ack}"
    );
    let cancel = env.receiver.enqueue(&key, json!({"kind": "cancel"}));
    let (r, before) = ed.response(p);
    assert_eq!(r["result"]["stopReason"], "cancelled");
    assert!(
        before.iter().all(|v| v.get("result").is_none()),
        "a response the editor did not ask for: {before:#?}"
    );
    assert_eq!(ack_of(&env, cancel.id())["outcome"], "delivered");
}
