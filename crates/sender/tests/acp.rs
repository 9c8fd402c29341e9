//! Issue 16: sp-acp, the ACP stdio proxy, between a scripted editor (this test) and a
//! scripted ACP agent (a small Python program below), with a real receiver, sp-sync and
//! SQLite store. The agent logs every line it reads, so the tests see exactly what reached it.
mod common;
use common::acks::assert_ack;
use common::env::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// A scripted ACP agent. It logs each raw line it reads to $AGENT_LOG and answers:
/// `initialize`, `session/new`, `session/prompt` (text "ask": asks permission and reports the
/// outcome; "codexopts" / "twoyes": the same with codex-acp 2.6.0's options / two allow_once
/// options; "question": asks an `elicitation/create` form as claude-agent-acp does and reports
/// the answer; "withdraw": asks one, withdraws it with `$/cancel_request`, ends at `test/finish`; "again": asks for one call, the same call under a new id, then that id with
/// another input; "wait": runs until `session/cancel`; otherwise echoes), `test/raw` (writes the
/// given raw lines to stdout as they are), `test/exit` (writes to stderr, exits 7). With
/// AGENT_STEERING it offers `_session/steering`, answered while "wait" runs by the text: "late"
/// ends the turn and answers `promptRequired`, "boom" an error, "nope" `failed`, "newturn"
/// `startedNewTurn`, anything else `injected`. AGENT_NAME replaces its `agentInfo.name` (empty:
/// no `agentInfo`); AGENT_SESSIONS the prefix of its session ids; AGENT_MODE the mode its
/// sessions open in (`modes.currentModeId`; prompt "modeswitch" moves to `read-only` itself).
/// A prompt with "refuse" is answered with an error.
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
init = {"protocolVersion": 1, "agentCapabilities": caps,
        "agentInfo": {"name": os.environ.get("AGENT_NAME", "scripted-agent"), "version": "1.0"}}
if os.environ.get("AGENT_NAME") == "":
    del init["agentInfo"]
if os.environ.get("AGENT_STEERING"):
    init["_meta"] = {"steering": {"supported": True}}
def steering_text(m):
    return "".join(p.get("text", "") for p in m["params"]["prompt"])
n = 0
while True:
    m = read()
    meth, mid = m.get("method"), m.get("id")
    if meth == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": init})
    elif meth == "session/new":
        n += 1
        res = {"sessionId": os.environ.get("AGENT_SESSIONS", "sess-") + str(n)}
        if os.environ.get("AGENT_MODE"):
            res["modes"] = {"currentModeId": os.environ["AGENT_MODE"], "availableModes": [
                {"id": m, "name": m} for m in ["default", "plan", "auto", "read-only"]]}
        send({"jsonrpc": "2.0", "id": mid, "result": res})
    elif meth == "session/set_mode":
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
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
        elif "link" in text:
            # A URL-mode elicitation (an MCP server's sign-in, say).
            rid = 300 + n
            send({"jsonrpc": "2.0", "id": rid, "method": "elicitation/create", "params": {
                "mode": "url", "sessionId": sid, "elicitationId": "el-%s" % mid,
                "url": "https://auth.example.com/sign-in?x=%s" % mid, "message": "Sign in to the tracker"}})
            r = wait_response(rid)
            update(sid, "elicitation " + json.dumps(r.get("result"), sort_keys=True))
            send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
        elif "question" in text or "withdraw" in text:
            # As claude-agent-acp 0.101.0 asks an AskUserQuestion of an editor with form elicitation.
            rid = 500 + n
            send({"jsonrpc": "2.0", "id": rid, "method": "elicitation/create", "params": {
                "mode": "form", "sessionId": sid, "toolCallId": "toolu_q%s" % mid,
                "message": "Which fruit should I use?",
                "requestedSchema": {"type": "object", "properties": {
                    "question_0": {"type": "string", "title": "Fruit", "oneOf": [
                        {"const": "Apple", "title": "Apple"}, {"const": "Mango", "title": "Mango", "description": "sweet"}]},
                    "question_0_custom": {"type": "string", "title": "Other", "description": "Type your own answer"}}}}})
            if "withdraw" in text:
                # The tool call went away (its turn moved on): the agent withdraws the question.
                send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": rid}})
                update(sid, "withdrawn")
                while read().get("method") != "test/finish":
                    pass
            else:
                r = wait_response(rid)
                update(sid, "elicitation " + json.dumps(r.get("result"), sort_keys=True))
            send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
        elif "codexopts" in text or "twoyes" in text:
            # codex-acp 2.6.0's options for a command; "twoyes": two allow_once nobody can tell apart.
            opts = [{"optionId": "allow_once", "name": "Yes, proceed", "kind": "allow_once"},
                    {"optionId": "allow_for_session", "name": "Yes, and don't ask again for this command in this session", "kind": "allow_always"},
                    {"optionId": "decline", "name": "No, continue without running it", "kind": "reject_once"},
                    {"optionId": "cancel", "name": "No, and tell Codex what to do differently", "kind": "reject_once"}]
            if "twoyes" in text:
                opts[1] = {"optionId": "yes-b", "name": "Sure", "kind": "allow_once"}
            rid = 400 + n
            send({"jsonrpc": "2.0", "id": rid, "method": "session/request_permission", "params": {
                "sessionId": sid,
                "toolCall": {"toolCallId": "call_p%s" % mid, "title": "bash", "kind": "execute",
                             "rawInput": {"command": "echo hi > out.txt"}},
                "options": opts}})
            r = wait_response(rid)
            update(sid, "permission " + json.dumps(r.get("result", {}).get("outcome")))
            send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
        elif "modeswitch" in text:
            # The agent changes its own mode (as claude-agent-acp does on ExitPlanMode).
            send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid,
                  "update": {"sessionUpdate": "current_mode_update", "currentModeId": "read-only"}}})
            update(sid, "switched")
            send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
        elif "stopme" in text:
            # Deny & stop: after its answer the turn goes on until session/cancel comes.
            send({"jsonrpc": "2.0", "id": 600 + n, "method": "session/request_permission", "params": {
                "sessionId": sid,
                "toolCall": {"toolCallId": "call_stop", "title": "bash", "kind": "execute",
                             "rawInput": {"command": "rm -rf build"}},
                "options": [{"optionId": "yes-once", "name": "Once", "kind": "allow_once"},
                            {"optionId": "no-once", "name": "No", "kind": "reject_once"}]}})
            r = wait_response(600 + n)
            update(sid, "permission " + json.dumps(r.get("result", {}).get("outcome")))
            while read().get("method") != "session/cancel":
                pass
            update(sid, "cancelled after the answer")
            send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "cancelled"}})
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
        elif "again" in text:
            # One call, the same call again under a new id, then that id with another input.
            calls = [("call_g1", "echo same > same.txt"), ("call_g2", "echo same > same.txt"),
                     ("call_g2", "echo other > other.txt")]
            for i, (cid, cmd) in enumerate(calls):
                rid = 700 + 10 * n + i
                send({"jsonrpc": "2.0", "id": rid, "method": "session/request_permission", "params": {
                    "sessionId": sid,
                    "toolCall": {"toolCallId": cid, "title": "bash", "kind": "execute",
                                 "rawInput": {"command": cmd}},
                    "options": [{"optionId": "yes-always", "name": "Always", "kind": "allow_always"},
                                {"optionId": "yes-once", "name": "Once", "kind": "allow_once"},
                                {"optionId": "no-once", "name": "No", "kind": "reject_once"}]}})
                r = wait_response(rid)
                update(sid, "permission %d %s" % (i, json.dumps(r.get("result", {}).get("outcome"))))
            send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
        elif "refuse" in text:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32603, "message": "no model configured"}})
        elif "wait" in text:
            update(sid, "working")
            ended = False
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
                if c.get("method") == "_session/steering":
                    st, cid = steering_text(c), c["id"]
                    if "late" in st:
                        # The turn ended just before the steer arrived.
                        send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
                        send({"jsonrpc": "2.0", "id": cid, "result": {"outcome": "promptRequired", "reason": "noRunningTurn"}})
                        ended = True
                        break
                    elif "boom" in st:
                        send({"jsonrpc": "2.0", "id": cid, "error": {"code": -32603, "message": "steering refused: boom"}})
                    elif "nope" in st:
                        send({"jsonrpc": "2.0", "id": cid, "result": {"outcome": "failed", "reason": "the turn is compacting"}})
                    elif "newturn" in st:
                        send({"jsonrpc": "2.0", "id": cid, "result": {"outcome": "startedNewTurn"}})
                        update(sid, "new turn: " + st)
                    else:
                        send({"jsonrpc": "2.0", "id": cid, "result": {"outcome": "injected"}})
                        update(sid, "steered: " + st)
            if not ended:
                send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "cancelled"}})
        else:
            update(sid, "echo: " + text)
            send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
    elif meth == "_session/steering":
        send({"jsonrpc": "2.0", "id": mid, "result": {"outcome": "promptRequired", "reason": "noRunningTurn"}})
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
/// `inject_mode`; its final ack waits for the turn's end (the caller ends it, `p`), then says
/// `delivered` how, with mode `api` and the turn's text as its reply (DECISIONS 38).
#[allow(clippy::too_many_arguments)]
fn assert_injected(
    env: &Env,
    ed: &mut Editor,
    (sid, p): (&str, u64),
    key: &str,
    text: &str,
    mode: &str,
    inject_mode: &str,
) {
    let msg = enqueue_prompt(env, key, text, mode);
    let (said, _) = ed.said_starting(Duration::from_secs(30), "injected");
    let said = said["params"]["update"]["content"]["text"]
        .as_str()
        .unwrap()
        .to_string();
    let prefix = format!("injected {inject_mode}: ");
    assert!(said.starts_with(&prefix) && said.ends_with(text), "{said}");
    not_final_yet(env, msg.id());
    ed.stop(sid);
    let (r, _) = ed.response(p);
    assert_eq!(r["result"]["stopReason"], "cancelled");
    let ack = delivered_api(env, msg.id());
    let how = format!("session/inject mode {inject_mode}");
    assert!(ack["detail"].as_str().unwrap().contains(&how), "{ack}");
    assert_eq!(ack["reply"], format!("working{said}"), "{ack}");
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

/// DECISIONS 38: the acks the receiver got for `id`, in order: one `taken`, any `progress`
/// (each the reply so far, `seq` rising), then every final one; returns the final ack after
/// checking it is `delivered` with mode `api` and each resend the same.
fn delivered_api(env: &Env, id: &str) -> Value {
    let last = ack_of(env, id);
    let acks = env.acks_for(id);
    assert_eq!(acks[0]["outcome"], "taken", "{acks:#?}");
    let progress: Vec<&Value> = acks.iter().filter(|a| a["outcome"] == "progress").collect();
    for w in progress.windows(2) {
        assert!(w[0]["seq"].as_u64() < w[1]["seq"].as_u64(), "{acks:#?}");
    }
    let finals: Vec<&Value> = acks
        .iter()
        .filter(|a| a["outcome"] != "taken" && a["outcome"] != "progress")
        .collect();
    assert!(
        finals.iter().all(|a| a["outcome"] == "delivered"
            && a["mode"] == "api"
            && a["reply"] == last["reply"]),
        "{acks:#?}"
    );
    let first_final = acks.iter().position(|a| a == finals[0]).unwrap();
    assert!(
        acks[..first_final]
            .iter()
            .all(|a| a["outcome"] == "taken" || a["outcome"] == "progress"),
        "{acks:#?}"
    );
    last
}

/// Only a `taken` (and any `progress`) reached the receiver for `id` so far: no final ack.
fn not_final_yet(env: &Env, id: &str) {
    assert!(until(Duration::from_secs(20), || env
        .acks_for(id)
        .iter()
        .any(|a| a["outcome"] == "taken")));
    let acks = env.acks_for(id);
    assert!(
        acks.iter()
            .all(|a| a["outcome"] == "taken" || a["outcome"] == "progress"),
        "{acks:#?}"
    );
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
    assert_eq!(
        withdrawn_then_said(&seen, &req, "permission"),
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
    let token = "ghp_R8x2Kq7Vb3Zm9Lp4Wt6Yc1Nd5Hf0Js2Ag8Ek";
    let msg = env.receiver.enqueue(
        &key,
        json!({"kind": "prompt", "text": format!("hello from the phone {token} thanks")}),
    );
    // The editor is shown the prompt as the user's message, then the agent's answer.
    let shown = ed.update_text(Duration::from_secs(30), "user_message_chunk");
    assert!(shown.ends_with(" thanks"), "{shown}");
    let echo = ed.update_text(Duration::from_secs(20), "agent_message_chunk");
    assert!(echo.contains("hello from the phone"), "{echo}");
    // DECISIONS 38: `taken`, then `delivered` with mode `api` once the turn ended, its reply
    // the agent's text of that turn, redacted (rule 37).
    let ack = delivered_api(&env, msg.id());
    let reply = ack["reply"].as_str().unwrap();
    let (before, after) = echo.split_once(token).unwrap();
    assert!(
        reply.starts_with(before) && reply.ends_with(after) && !reply.contains("ghp_"),
        "{reply:?} for {echo:?}"
    );
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
    let text = "prefer the smaller fix";
    assert_injected(&env, &mut ed, (&sid, p), &key, text, "steer", "steer");
}

/// DECISIONS 38: while the turn a prompt went into runs, `progress` acks carry the agent's text
/// so far (`seq` from 1); the final ack, at the turn's end, the whole text.
#[test]
fn progress_acks_carry_the_turns_text_so_far_until_it_ends() {
    let (env, mut ed, sid, key) = polled_session(&[("AGENT_INJECT", "1")]);
    let p = ed.working(&sid);
    let msg = enqueue_prompt(&env, &key, "tell me more", "steer");
    let (said, _) = ed.said_starting(Duration::from_secs(30), "injected");
    let so_far = format!(
        "working{}",
        said["params"]["update"]["content"]["text"]
            .as_str()
            .unwrap()
    );
    let progress = |env: &Env| {
        env.acks_for(msg.id())
            .into_iter()
            .find(|a| a["outcome"] == "progress" && a["reply"] == so_far.as_str())
    };
    assert!(
        until(Duration::from_secs(10), || progress(&env).is_some()),
        "{:#?}",
        env.acks_for(msg.id())
    );
    assert_eq!(progress(&env).unwrap()["seq"], 1);
    not_final_yet(&env, msg.id());
    ed.stop(&sid);
    ed.response(p);
    assert_eq!(delivered_api(&env, msg.id())["reply"], so_far.as_str());
}

/// A prompt the agent refuses (an error answer to sp-acp's `session/prompt`) is acked `failed`
/// with the agent's error after its `taken`, never `delivered`.
#[test]
fn a_prompt_the_agent_refuses_is_acked_failed() {
    let (env, _ed, _sid, key) = polled_session(&[]);
    let msg = enqueue_prompt(&env, &key, "refuse this", "queue");
    let ack = ack_of(&env, msg.id());
    assert_ack(&ack, "failed", "no model configured");
    let acks = env.acks_for(msg.id());
    assert_eq!(acks[0]["outcome"], "taken", "{acks:#?}");
    assert!(
        acks[1..].iter().all(|a| a["outcome"] == "failed"),
        "{acks:#?}"
    );
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
    // It names the adapters editors install today, not the old @zed-industries ones.
    assert!(
        text.contains("@agentclientprotocol/claude-agent-acp")
            && text.contains("@agentclientprotocol/codex-acp")
            && !text.contains("zed-industries"),
        "{text}"
    );
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

/// Among the frames `seen`, the editor was sent `$/cancel_request` for `req` before the agent
/// said something starting with `prefix`; what it said.
fn withdrawn_then_said(seen: &[Value], req: &Value, prefix: &str) -> String {
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
                .is_some_and(|t| t.starts_with(prefix))
        })
        .expect("the agent said what it got");
    assert!(
        cancel < said,
        "the editor heard of it before the agent acted"
    );
    seen[said]["params"]["update"]["content"]["text"]
        .as_str()
        .unwrap()
        .to_string()
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

/// DECISIONS 30 `interrupt` (deny & stop): the request is answered `reject_once`, then
/// sp-acp sends `session/cancel`, so the turn ends `cancelled`; one ack, `delivered`.
#[test]
fn a_deny_with_interrupt_rejects_then_cancels_the_turn() {
    let (env, mut ed, sid, key) = polled_session(&[]);
    let p = ed.prompt(&sid, "stopme");
    ed.until(Duration::from_secs(20), |v| {
        v["method"] == "session/request_permission"
    });
    let attention = call_attention("call_stop", &json!({"command": "rm -rf build"}));
    wait_needed(&env, &attention);
    let msg = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": attention, "decision": "deny",
               "interrupt": true, "note": "stop, do the tests first"}),
    );
    let (r, seen) = ed.response(p);
    assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
    assert_eq!(
        outcome_said(&seen).as_deref(),
        Some(r#"permission {"outcome": "selected", "optionId": "no-once"}"#)
    );
    assert!(
        seen.iter()
            .any(|v| v["params"]["update"]["content"]["text"] == "cancelled after the answer"),
        "the agent read session/cancel after the reject: {seen:#?}"
    );
    let ack = ack_of(&env, msg.id());
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    let detail = ack["detail"].as_str().unwrap();
    assert!(
        detail.contains("reject_once") && detail.contains("then session/cancel"),
        "{ack}"
    );
    assert_eq!(cleared_how(&env, &attention), "answered");
    let log = ed.agent_log();
    let (reject, cancel) = (
        log.find("no-once").expect("the reject reached the agent"),
        log.find("session/cancel")
            .expect("session/cancel reached the agent"),
    );
    assert!(reject < cancel, "reject first, then session/cancel:\n{log}");
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
    let ack = delivered_api(&env, &id);
    assert_eq!(ack["reply"], echo["params"]["update"]["content"]["text"]);
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
    let how = "interrupt_immediate";
    assert_injected(&env, &mut ed, (&sid, p), &key, text, "interrupt", how);
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
/// `session/prompt`, which the agent takes into that turn; acked `delivered` when that turn ends.
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
    // It joined the editor's turn: its final ack waits for that turn's end.
    not_final_yet(&env, msg.id());
    let cancel = env.receiver.enqueue(&key, json!({"kind": "cancel"}));
    let (r, before) = ed.response(p);
    assert_eq!(r["result"]["stopReason"], "cancelled");
    assert!(
        before.iter().all(|v| v.get("result").is_none()),
        "a response the editor did not ask for: {before:#?}"
    );
    assert_eq!(ack_of(&env, cancel.id())["outcome"], "delivered");
    let ack = delivered_api(&env, msg.id());
    assert!(
        ack["detail"].as_str().unwrap().contains("promptQueueing"),
        "{ack}"
    );
    let queued = said["params"]["update"]["content"]["text"]
        .as_str()
        .unwrap();
    assert_eq!(ack["reply"], format!("working{queued}"), "{ack}");
}

/// Issue 30: `session.started` names the agent for people and lists when each control word
/// takes effect in this session, from what the agent advertised; it passes our schema and
/// the protocol's.
#[test]
fn a_session_is_named_for_its_agent_and_says_what_it_honours() {
    let env = env_with_sync();
    let mut plain = Editor::start(&env, &[]);
    let first = plain.init_and_new();
    let mut steering = Editor::start(
        &env,
        &[
            ("AGENT_STEERING", "1"),
            ("AGENT_NAME", "gemini-cli"),
            ("AGENT_SESSIONS", "gem-"),
        ],
    );
    let second = steering.init_and_new();
    let mut unnamed = Editor::start(&env, &[("AGENT_NAME", ""), ("AGENT_SESSIONS", "anon-")]);
    let third = unnamed.init_and_new();
    let started = |sid: &str| {
        env.receiver
            .wait_event(Duration::from_secs(30), |e| {
                e["type"] == "session.started" && e["session"]["id"] == sid
            })
            .unwrap_or_else(|| panic!("no session.started for {sid}\n{}", env.log()))
    };
    let a = started(&first);
    assert_eq!(a["harness"]["name"], "acp");
    assert_eq!(a["data"]["agent"], "scripted-agent");
    assert_eq!(
        a["data"]["control"],
        json!({"prompt": {"queue": "turn_end", "steer": "turn_end", "interrupt": "turn_end"},
               "cancel": "now", "answer": ["scope", "interrupt", "answers"]})
    );
    let b = started(&second);
    assert_eq!(b["harness"]["name"], "acp");
    assert_eq!(b["data"]["agent"], "Gemini CLI");
    assert_eq!(b["data"]["control"]["prompt"]["steer"], "tool_boundary");
    assert_eq!(b["data"]["control"]["prompt"]["interrupt"], "tool_boundary");
    // No agentInfo: the command sp-acp launched (python3 -u …/agent.py) names it.
    let c = started(&third);
    assert_eq!(c["data"]["agent"], "agent");
    for e in [&a, &b, &c] {
        common::schema::assert_valid("event.json", e);
        if let Some(dir) = common::fixtures::peer_dir() {
            let data = common::schema::load_json(
                &dir.join("schemas/event-data.9138259c54ffd58dec54344b02c62ffb8494ad8e.json"),
            );
            let mut sub = data["properties"]["session.started"].clone();
            sub["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
            let v = common::schema::compile(&sub).unwrap();
            assert!(v.is_valid(&e["data"]), "{}", e["data"]);
            common::schema::assert_valid(
                dir.join("schemas/event.e918475f4a7284f20cc7b4877aa20e59ce10a343.json")
                    .to_str()
                    .unwrap(),
                e,
            );
        }
    }
}

/// Issue 30: `_session/steering` where the agent offers it; each of its answers decides the
/// ack, and `promptRequired` (the turn ended meanwhile) sends the text as a new prompt.
#[test]
fn steer_goes_as_session_steering_and_each_answer_decides_the_ack() {
    let env = env_with_sync();
    let mut ed = Editor::start(&env, &[("AGENT_STEERING", "1")]);
    let sid = ed.init_and_new();
    let key = format!("acp:{sid}");
    wait_polled(&env, &key);
    let p = ed.prompt(&sid, "wait");
    ed.until(Duration::from_secs(20), |v| {
        v["params"]["update"]["content"]["text"] == "working"
    });
    let said = |ed: &Editor, prefix: &'static str| {
        let (v, _) = ed.until(Duration::from_secs(30), |v| {
            v["params"]["update"]["content"]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with(prefix))
        });
        v["params"]["update"]["content"]["text"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let send = |text: &str, mode: &str| {
        let m = env
            .receiver
            .enqueue(&key, json!({"kind": "prompt", "text": text, "mode": mode}));
        ack_of(&env, m["id"].as_str().unwrap())
    };
    // injected: delivered when the turn it joined ends (below).
    let steered = env.receiver.enqueue(
        &key,
        json!({"kind": "prompt", "text": "prefer the smaller fix", "mode": "steer"}),
    );
    let steered_said = said(&ed, "steered: ");
    assert!(steered_said.ends_with("prefer the smaller fix"));
    not_final_yet(&env, steered.id());
    // An interrupt goes the same way; startedNewTurn: delivered.
    let ack = send("newturn please", "interrupt");
    assert_ack(&ack, "delivered", "started a new turn");
    assert!(said(&ed, "new turn: ").ends_with("newturn please"));
    assert_eq!((&ack["mode"], ack.get("reply")), (&json!("api"), None));
    // An error and a `failed` outcome: failed, with the agent's reason.
    let ack = send("boom", "steer");
    assert_ack(&ack, "failed", "steering refused: boom");
    let ack = send("nope", "steer");
    assert_ack(&ack, "failed", "the turn is compacting");
    // promptRequired: the turn had ended; the text goes as a prompt of its own.
    let late = env.receiver.enqueue(
        &key,
        json!({"kind": "prompt", "text": "late news", "mode": "steer"}),
    );
    let (r, _) = ed.response(p);
    assert_eq!(r["result"]["stopReason"], "end_turn");
    assert!(said(&ed, "echo: ").ends_with("late news"));
    let ack = delivered_api(&env, late["id"].as_str().unwrap());
    assert!(
        ack["detail"].as_str().unwrap().contains("promptRequired"),
        "{ack}"
    );
    assert!(
        ack["reply"].as_str().unwrap().starts_with("echo: "),
        "{ack}"
    );
    // The steer's turn ended with the text the agent said in it.
    let ack = delivered_api(&env, steered.id());
    assert!(
        ack["detail"].as_str().unwrap().contains("injected"),
        "{ack}"
    );
    let reply = ack["reply"].as_str().unwrap();
    assert!(
        reply.starts_with(&format!("working{steered_said}new turn: ")),
        "{reply:?}"
    );
    let log = ed.agent_log();
    assert_eq!(log.matches(r#""method":"_session/steering""#).count(), 5);
    assert_eq!(
        log.matches("late news").count(),
        2,
        "steered once, prompted once"
    );
}

/// Issue 30 / DECISIONS 30: "allow for the session". sp-acp keeps the grant (the scripted
/// agent's `allow_always` is not known to be for the session alone, so it is never picked) and
/// answers the same call again at once, unannounced; another input under the same id is a new
/// prompt; an answer field sp-acp cannot honour is acked `unsupported` and nothing runs.
#[test]
fn allow_for_the_session_answers_the_same_call_again_and_nothing_more() {
    let env = env_with_sync();
    let mut ed = Editor::start(&env, &[]);
    let sid = ed.init_and_new();
    let key = format!("acp:{sid}");
    wait_polled(&env, &key);
    let same = json!({"command": "echo same > same.txt"});
    let first = call_attention("call_g1", &same);
    let again = call_attention("call_g2", &same);
    let other = call_attention("call_g2", &json!({"command": "echo other > other.txt"}));
    let p = ed.prompt(&sid, "again");
    env.wait_event(
        "attention.needed",
        json!({"attention_id": first}),
        Duration::from_secs(30),
    )
    .unwrap_or_else(|| panic!("no attention.needed for {first}\n{}", env.log()));
    let allow = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": first, "decision": "allow", "scope": "session"}),
    );
    let said = |ed: &Editor, i: u32| {
        let prefix = format!("permission {i} ");
        let (v, seen) = ed.until(Duration::from_secs(30), move |v| {
            v["params"]["update"]["content"]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with(&prefix))
        });
        (
            v["params"]["update"]["content"]["text"]
                .as_str()
                .unwrap()
                .to_string(),
            seen,
        )
    };
    let (t, _) = said(&ed, 0);
    assert_eq!(
        t,
        r#"permission 0 {"outcome": "selected", "optionId": "yes-once"}"#
    );
    let ack = ack_of(&env, allow["id"].as_str().unwrap());
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    assert!(
        ack["detail"].as_str().unwrap().contains("for the session"),
        "{ack}"
    );
    // The same tool with the same input, under a new id: answered from the grant at once;
    // the editor never sees the request.
    let (t, seen) = said(&ed, 1);
    assert_eq!(
        t,
        r#"permission 1 {"outcome": "selected", "optionId": "yes-once"}"#
    );
    assert!(
        !seen
            .iter()
            .any(|v| v["method"] == "session/request_permission"
                && v["params"]["toolCall"]["rawInput"] == same),
        "the granted request reached the editor: {seen:#?}"
    );
    // The same id with another input: a new prompt of its own.
    let (req3, _) = ed.until(Duration::from_secs(20), |v| {
        v["method"] == "session/request_permission"
    });
    assert_eq!(req3["params"]["toolCall"]["toolCallId"], "call_g2");
    env.wait_event(
        "attention.needed",
        json!({"attention_id": other}),
        Duration::from_secs(30),
    )
    .unwrap_or_else(|| panic!("no attention.needed for {other}\n{}", env.log()));
    assert!(
        env.events_of("attention.needed")
            .iter()
            .all(|e| e["data"]["attention_id"] != again.as_str()),
        "the granted call was announced"
    );
    // An edited input cannot be honoured over ACP: unsupported, naming the field; nothing
    // reached the agent and the prompt stays open.
    let edit = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": other, "decision": "allow",
               "input": {"command": "echo edited"}}),
    );
    let ack = ack_of(&env, edit["id"].as_str().unwrap());
    assert_eq!(ack["outcome"], "unsupported", "{ack}");
    assert!(
        ack["detail"].as_str().unwrap().starts_with("input"),
        "{ack}"
    );
    let rid3 = req3["id"].as_u64().unwrap();
    assert!(
        !ed.agent_log().contains(&format!("\"id\":{rid3},")),
        "the request was answered"
    );
    assert_eq!(
        env.query::<String>(&format!(
            "select state from attention where attention_id='{other}'"
        )),
        ["open"]
    );
    // A plain deny still answers it.
    let deny = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": other, "decision": "deny"}),
    );
    let (t, _) = said(&ed, 2);
    assert_eq!(
        t,
        r#"permission 2 {"outcome": "selected", "optionId": "no-once"}"#
    );
    assert_eq!(
        ack_of(&env, deny["id"].as_str().unwrap())["outcome"],
        "delivered"
    );
    let (r, _) = ed.response(p);
    assert_eq!(r["result"]["stopReason"], "end_turn");
    assert!(
        !ed.agent_log().contains("yes-always"),
        "an always option was chosen"
    );
}

/// Issue 30, on the page: in headless chromium against sp-receiver, an ACP session's card is
/// named for its agent and says when steer, interrupt and stop take effect there; issue 40:
/// it shows the agent's mode, and a URL the agent asks the person to open is a link.
#[test]
fn the_page_names_an_acp_session_for_its_agent_shows_what_it_honours_its_mode_and_a_link_to_open() {
    use common::browser::{missing_browser_deps, Browser};
    use common::receiver::{Machine, SpReceiver, LOGIN};
    // Fail (never skip) when the browser cannot run, naming the script that installs it.
    if let Some(why) = missing_browser_deps() {
        panic!("the browser test cannot run: {why}");
    }
    let dir = tempfile::tempdir().unwrap();
    let receiver = SpReceiver::start(&dir.path().join("receiver"), &[]);
    let machine = Machine::syncing_to(dir.path(), &receiver);
    let agent = write_agent(dir.path());
    // sp-acp in the machine's environment (HOME, config, state), as the editor starts it.
    let base = machine.cmd("sp-sync");
    let mut proxy = Command::new(sp_acp());
    proxy.env_clear().current_dir(&machine.home);
    for (k, v) in base.get_envs() {
        if let Some(v) = v {
            proxy.env(k, v);
        }
    }
    let mut proxy = proxy
        .env("AGENT_LOG", dir.path().join("agent.log"))
        .env("AGENT_MODE", "auto")
        .env("AGENT_NAME", "gemini-cli")
        .env("AGENT_STEERING", "1")
        .args(["--", "python3", "-u"])
        .arg(&agent)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut to = proxy.stdin.take().unwrap();
    let mut from = BufReader::new(proxy.stdout.take().unwrap());
    for (id, method, params) in [
        (1, "initialize", json!({"protocolVersion": 1})),
        (2, "session/new", json!({"cwd": "/tmp", "mcpServers": []})),
    ] {
        writeln!(
            to,
            "{}",
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        )
        .unwrap();
        let mut line = String::new();
        from.read_line(&mut line).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], id, "{line}");
    }
    let card = "article[data-session=\"acp:sess-1\"]";
    let mut b = Browser::launch();
    b.call(json!({"op": "goto", "url": format!("{}/", receiver.url)}));
    b.call(json!({"op": "fill", "selector": "#token", "value": LOGIN}));
    b.click("#login-form button[type=submit]");
    b.wait(card);
    let meta = b.text(&format!("{card} .meta"));
    assert!(meta.starts_with("Gemini CLI (ACP) · "), "{meta}");
    // The session opened in the agent's auto mode: the card says why no prompt comes.
    assert!(
        meta.contains("mode auto (runs tools without asking)"),
        "{meta}"
    );
    assert_eq!(
        b.text(&format!("{card} .control")),
        "Send now reaches it once the current tool is done; Interrupt reaches it once the current tool is done; Stop reaches it at once."
    );
    // Rule 41: a URL the agent asks the person to open is a link on the page.
    writeln!(
        to,
        "{}",
        json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
               "params": {"sessionId": "sess-1", "prompt": [{"type": "text", "text": "link"}]}})
    )
    .unwrap();
    // In the inbox, where every open prompt is; never offered for the session.
    let link = "#inbox-list a.att-link[href]".to_string();
    b.wait(&link);
    assert_eq!(
        b.attr(&link, "href"),
        "https://auth.example.com/sign-in?x=3"
    );
    assert_eq!(b.attr(&link, "rel"), "noopener noreferrer");
    assert!(b.text("#inbox-list").contains("Sign in to the tracker"));
    let offered = b.call(json!({"op": "eval", "script": "[...document.querySelectorAll('#inbox-list .allow-session')].every((e) => e.hidden)"}));
    assert_eq!(offered["value"], json!(true), "{offered}");
    drop(to);
    let _ = wait_timeout(&mut proxy, Duration::from_secs(20));
}

/// The scripted agent's question (prompt "question"), once announced: (its request from the
/// editor's side, the attention.needed event).
fn question(env: &Env, ed: &mut Editor, sid: &str, text: &str) -> (u64, Value, Value) {
    let p = ed.prompt(sid, text);
    let (req, _) = ed.until(Duration::from_secs(20), |v| {
        v["method"] == "elicitation/create"
    });
    let call = format!("toolu_q{p}-");
    let needed = env
        .receiver
        .wait_event(Duration::from_secs(30), |e| {
            e["type"] == "attention.needed"
                && e["data"]["tool"] == "question"
                && e["data"]["attention_id"]
                    .as_str()
                    .is_some_and(|a| a.starts_with(&call))
        })
        .unwrap_or_else(|| panic!("no question announced\n{}", env.log()));
    (p, req, needed)
}

/// Rule 41: a form elicitation is a question on the phone; its answer (a label) is the
/// elicitation's accept content, the editor's copy is withdrawn and its late answer swallowed.
#[test]
fn a_question_is_answered_from_the_phone_and_the_editors_copy_withdrawn() {
    let (env, mut ed, sid, key) = polled_session(&[]);
    let (p, req, needed) = question(&env, &mut ed, &sid, "question");
    let q = &needed["data"]["input"]["questions"][0];
    assert_eq!(q["question"], "Which fruit should I use?", "{needed}");
    assert_eq!(q["options"][1]["label"], "Mango");
    assert_eq!(needed["data"]["message"], "Which fruit should I use?");
    let attention = needed["data"]["attention_id"].as_str().unwrap().to_string();
    assert!(
        attention.starts_with(&format!("toolu_q{p}-")),
        "{attention}"
    );
    // An allow without answers is refused, and the question stays open.
    let bare = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": attention, "decision": "allow"}),
    );
    let ack = ack_of(&env, bare.id());
    assert_ack(&ack, "failed", "a question needs answers");
    let msg = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": attention, "decision": "allow",
               "answers": {"Which fruit should I use?": "Mango"}}),
    );
    let (_, seen) = ed.response(p);
    assert_eq!(
        withdrawn_then_said(&seen, &req, "elicitation "),
        r#"elicitation {"action": "accept", "content": {"question_0": "Mango"}}"#
    );
    // The editor answers late: the agent never sees it.
    ed.send(&json!({"jsonrpc": "2.0", "id": req["id"], "result": {"action": "decline"}}));
    let ack = ack_of(&env, msg.id());
    assert_ack(&ack, "delivered", "elicitation/create (accept)");
    let after = ed.prompt(&sid, "after");
    ed.response(after);
    assert!(
        !ed.agent_log().contains("decline"),
        "the editor's late answer reached the agent"
    );
    assert_eq!(cleared_how(&env, &attention), "answered");
}

/// Free text that is none of the labels goes to the question's "Other" field; a deny
/// declines the form.
#[test]
fn a_questions_free_answer_fills_its_other_field_and_a_deny_declines() {
    let (env, mut ed, sid, key) = polled_session(&[]);
    let (p, _, needed) = question(&env, &mut ed, &sid, "question");
    let attention = needed["data"]["attention_id"].as_str().unwrap().to_string();
    env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": attention, "decision": "allow",
               "answers": {"question_0": "Kiwi"}}),
    );
    let (_, seen) = ed.response(p);
    assert!(
        seen.iter().any(|v| v["params"]["update"]["content"]["text"]
            == r#"elicitation {"action": "accept", "content": {"question_0_custom": "Kiwi"}}"#),
        "{seen:#?}"
    );
    let (p, _, needed) = question(&env, &mut ed, &sid, "question");
    let second = needed["data"]["attention_id"].as_str().unwrap().to_string();
    let msg = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": second, "decision": "deny"}),
    );
    let (_, seen) = ed.response(p);
    assert!(
        seen.iter()
            .any(|v| v["params"]["update"]["content"]["text"]
                == r#"elicitation {"action": "decline"}"#),
        "{seen:#?}"
    );
    assert_eq!(ack_of(&env, msg.id())["outcome"], "delivered");
}

/// The agent withdrawing its question (`$/cancel_request`) clears the phone's prompt while
/// the turn still runs.
#[test]
fn the_agent_withdrawing_a_question_clears_the_phones_prompt() {
    let (env, mut ed, sid, _) = polled_session(&[]);
    let (p, _, needed) = question(&env, &mut ed, &sid, "withdraw");
    let attention = needed["data"]["attention_id"].as_str().unwrap().to_string();
    ed.said_starting(Duration::from_secs(20), "withdrawn");
    assert_eq!(cleared_how(&env, &attention), "cancelled");
    ed.send(&json!({"jsonrpc": "2.0", "method": "test/finish"}));
    ed.response(p);
}

/// Rule 41 with codex-acp 2.6.0's options: a deny takes "decline" (the turn goes on), a deny
/// and stop takes "cancel"; two allow_once nobody can tell apart are acked unsupported.
#[test]
fn options_are_chosen_by_meaning_and_lookalikes_are_refused() {
    let (env, mut ed, sid, key) = polled_session(&[]);
    let p = ed.prompt(&sid, "codexopts");
    let call_p = |p: u64| {
        call_attention(
            &format!("call_p{p}"),
            &json!({"command": "echo hi > out.txt"}),
        )
    };
    wait_needed(&env, &call_p(p));
    let msg = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": call_p(p), "decision": "deny"}),
    );
    let (_, seen) = ed.response(p);
    assert_eq!(
        outcome_said(&seen).as_deref(),
        Some(r#"permission {"outcome": "selected", "optionId": "decline"}"#)
    );
    assert_eq!(ack_of(&env, msg.id())["outcome"], "delivered");

    let p = ed.prompt(&sid, "twoyes");
    let call_2 = call_p(p);
    wait_needed(&env, &call_2);
    let msg = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": call_2, "decision": "allow"}),
    );
    let ack = ack_of(&env, msg.id());
    assert_eq!(ack["outcome"], "unsupported", "{ack}");
    let detail = ack["detail"].as_str().unwrap();
    assert!(
        detail.contains("cannot tell apart") && detail.contains("yes-b"),
        "{ack}"
    );
    // Nothing ran; the prompt is still open and a deny and stop takes codex's "cancel".
    let msg = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": call_2, "decision": "deny", "interrupt": true}),
    );
    let (said, _) = ed.said_starting(Duration::from_secs(30), "permission ");
    assert_eq!(
        said["params"]["update"]["content"]["text"],
        r#"permission {"outcome": "selected", "optionId": "cancel"}"#
    );
    ed.response(p);
    let ack = ack_of(&env, msg.id());
    assert_ack(&ack, "delivered", "that option ends the turn");
}

/// The session's mode on the page (issue 40): `modes.currentModeId` at `session/new`, the
/// editor's `session/set_mode` and the agent's own `current_mode_update` are kept on the
/// session and ride its events as `permission_mode` (an id made a word: `read-only` →
/// `readonly`).
#[test]
fn the_sessions_mode_rides_its_events() {
    let (env, mut ed, sid, _) = live_session(&[("AGENT_MODE", "auto")]);
    let mode_of = |kind: &str, pred: &dyn Fn(&Value) -> bool| {
        env.receiver
            .wait_event(Duration::from_secs(30), |e| e["type"] == kind && pred(e))
            .unwrap_or_else(|| panic!("no {kind}\n{}", env.log()))["session"]["permission_mode"]
            .clone()
    };
    assert_eq!(mode_of("session.started", &|_| true), "auto");
    let id = ed.request(
        "session/set_mode",
        json!({"sessionId": sid, "modeId": "default"}),
    );
    ed.response(id);
    let (p, _) = ask(&env, &mut ed, &sid);
    assert_eq!(
        mode_of("attention.needed", &|e| e["data"]["attention_id"]
            == call_1().as_str()),
        "default"
    );
    ed.send(&json!({"jsonrpc": "2.0", "id": 901, "result": {"outcome": {"outcome": "cancelled"}}}));
    ed.response(p);
    let p = ed.prompt(&sid, "modeswitch");
    ed.response(p);
    let ended = || {
        env.events_of("turn.ended")
            .iter()
            .any(|e| e["session"]["permission_mode"] == "readonly")
    };
    assert!(
        until(Duration::from_secs(30), ended),
        "{:#?}",
        env.events_of("turn.ended")
    );
}

/// Issue 40: a change of mode alone reaches the receiver at once, as a `session.mode` event
/// carrying the new `permission_mode` (the editor's `session/set_mode`, the agent's own
/// `current_mode_update`); setting the mode it already has sends nothing.
#[test]
fn a_mode_change_alone_reaches_the_receiver() {
    let (env, mut ed, sid, _) = live_session(&[("AGENT_MODE", "auto")]);
    let mode_event = |mode: &str| {
        env.receiver
            .wait_event(Duration::from_secs(30), |e| {
                e["type"] == "session.mode" && e["session"]["permission_mode"] == mode
            })
            .unwrap_or_else(|| panic!("no session.mode {mode}\n{}", env.log()))
    };
    let set_mode = |ed: &mut Editor, mode: &str| {
        let id = ed.request(
            "session/set_mode",
            json!({"sessionId": sid, "modeId": mode}),
        );
        ed.response(id);
    };
    set_mode(&mut ed, "default");
    // Nothing else happened in the session: the mode arrives on its own.
    let e = mode_event("default");
    assert_eq!(e["data"], json!({"permission_mode": "default"}));
    assert_eq!(e["harness"]["name"], "acp");
    assert_eq!(e["session"]["id"], sid.as_str());
    set_mode(&mut ed, "default");
    let p = ed.prompt(&sid, "modeswitch");
    ed.response(p);
    mode_event("readonly");
    assert!(
        until(Duration::from_secs(30), || !env
            .events_of("turn.ended")
            .is_empty()),
        "{}",
        env.log()
    );
    // The repeated `default`, sent before the prompt whose turn has ended, emitted nothing.
    let modes: Vec<Value> = env
        .events_of("session.mode")
        .iter()
        .map(|e| e["data"]["permission_mode"].clone())
        .collect();
    assert_eq!(modes, [json!("default"), json!("readonly")]);
}

/// Rule 41: the editor answering a question first wins; the phone's later answer is acked
/// expired and never reaches the agent.
#[test]
fn the_editor_answering_a_question_first_wins() {
    let (env, mut ed, sid, key) = polled_session(&[]);
    let (p, req, needed) = question(&env, &mut ed, &sid, "question");
    let attention = needed["data"]["attention_id"].as_str().unwrap().to_string();
    ed.send(&json!({"jsonrpc": "2.0", "id": req["id"],
        "result": {"action": "accept", "content": {"question_0": "Apple"}}}));
    let (_, seen) = ed.response(p);
    assert!(
        seen.iter().any(|v| v["params"]["update"]["content"]["text"]
            == r#"elicitation {"action": "accept", "content": {"question_0": "Apple"}}"#),
        "{seen:#?}"
    );
    assert_eq!(cleared_how(&env, &attention), "answered");
    let late = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": attention, "decision": "allow",
               "answers": {"question_0": "Mango"}}),
    );
    assert_eq!(ack_of(&env, late.id())["outcome"], "expired");
    assert!(!ed.agent_log().contains("Mango"));
}

/// Rule 41: a URL-mode elicitation is shown as a link for the person to open (sp-acp never
/// fetches it); the phone's allow accepts it.
#[test]
fn a_url_elicitation_is_a_link_the_phone_accepts() {
    let (env, mut ed, sid, key) = polled_session(&[]);
    let p = ed.prompt(&sid, "link");
    let url = format!("https://auth.example.com/sign-in?x={p}");
    let needed = env
        .wait_event(
            "attention.needed",
            json!({"tool": "open_link"}),
            Duration::from_secs(30),
        )
        .unwrap_or_else(|| panic!("no link announced\n{}", env.log()));
    assert_eq!(needed["data"]["input"]["url"], url.as_str(), "{needed}");
    assert!(
        needed["data"]["message"].as_str().unwrap().contains(&url),
        "{needed}"
    );
    let attention = needed["data"]["attention_id"].as_str().unwrap();
    let msg = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": attention, "decision": "allow"}),
    );
    let (_, seen) = ed.response(p);
    assert!(
        seen.iter().any(|v| v["params"]["update"]["content"]["text"]
            == r#"elicitation {"action": "accept", "content": {}}"#),
        "{seen:#?}"
    );
    assert_eq!(ack_of(&env, msg.id())["outcome"], "delivered");
}
