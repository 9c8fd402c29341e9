//! Issue 16, against real ACP agents: `opencode acp` (OpenCode 1.18.33) and `codex-acp`
//! (the ACP adapter of Codex, 2.6.0, over our Codex), from e2e/node_modules, offline on the model stand-in
//! e2e/model.py, behind sp-acp, driven by a scripted ACP client (this test), with a real receiver and the sp-sync that sp-acp starts itself
//! (DECISIONS 28). Set up as tests/real_agents.rs does: the scenario re-runs this test
//! binary inside its own network namespace with only loopback, and its own pid namespace.
//! Nothing is skipped: a missing CLI or tool fails with what to run.
//!
//! Run: `cargo test --test acp_agents` as root, after scripts/e2e-deps.sh.
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver as Rx};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::e2e::{self, inside, World, ROOT};
use common::env::until;
use common::needs;

const SCENARIO_LIMIT: Duration = Duration::from_secs(240);

fn cli(name: &str) -> PathBuf {
    Path::new(ROOT).join("e2e/node_modules/.bin").join(name)
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Re-runs this test binary for `name` alone inside a fresh network and pid namespace with
/// only loopback up; inside, runs `body`.
fn scenario(name: &str, agent: &str, body: fn(&Scene)) {
    if !inside(name) {
        assert!(
            cli(agent).exists(),
            "{} is missing: run scripts/e2e-deps.sh (it installs the pinned CLIs into e2e/node_modules)",
            cli(agent).display()
        );
    }
    isolated(name, body);
}

/// `scenario` for an agent found elsewhere than e2e/node_modules (checked by the caller).
fn isolated(name: &str, body: fn(&Scene)) {
    if inside(name) {
        let scene = Scene::new(name);
        body(&scene);
        return;
    }
    for t in ["unshare", "ip", "python3"] {
        assert!(
            which(t),
            "{t} is not on PATH: run scripts/e2e-deps.sh (as root)"
        );
    }
    e2e::assert_root();
    // --include-ignored: the Harn scenario is #[ignore]d, and runs here only when asked for.
    e2e::run_in_namespace(name, SCENARIO_LIMIT, &["--include-ignored"]);
}

struct Scene(World);

impl std::ops::Deref for Scene {
    type Target = World;
    fn deref(&self) -> &World {
        &self.0
    }
}

impl std::ops::DerefMut for Scene {
    fn deref_mut(&mut self) -> &mut World {
        &mut self.0
    }
}

impl Scene {
    fn new(name: &str) -> Scene {
        Scene(World::new(name))
    }

    /// Our config: one sink with control, away for good.
    fn configure(&self) {
        let path = self.home.join(".config/sessionpipe/config.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let config = json!({
            "sinks": [{"name": "phone", "url": self.receiver.url(), "tier": 1, "control": true, "token": self.receiver.token()}],
            "control": {"away": "always"},
        });
        std::fs::write(&path, config.to_string()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    /// OpenCode's config (the stand-in as its model, bash and edit asking), as
    /// tests/real_agents.rs writes it; no plugin.
    fn configure_opencode(&self) {
        let oc = self.home.join(".config/opencode");
        std::fs::create_dir_all(oc.join("node_modules")).unwrap();
        let config = e2e::opencode_config(&self.model_url);
        std::fs::write(oc.join("opencode.json"), config.to_string()).unwrap();
        // Offline, OpenCode's background install of @opencode-ai/plugin would stall its first
        // request; a folder that looks installed skips it (see tests/real_agents.rs).
        let deps = json!({"@opencode-ai/plugin": "1.18.33"});
        std::fs::write(
            oc.join("package.json"),
            json!({"dependencies": deps}).to_string(),
        )
        .unwrap();
        std::fs::write(
            oc.join("package-lock.json"),
            json!({"name": "opencode", "lockfileVersion": 3, "requires": true, "packages": {"": {"dependencies": deps}}}).to_string(),
        )
        .unwrap();
    }

    /// Codex's config (the stand-in over the Responses API, asking before leaving the
    /// read-only sandbox), as tests/real_agents.rs writes it.
    fn configure_codex(&self) -> PathBuf {
        let ch = self.home.join(".codex");
        e2e::write_codex_config(&ch, &self.model_url);
        ch
    }

    fn model_requests(&self) -> Vec<Value> {
        e2e::model_requests(&self.model_log)
    }

    fn ack(&self, msg: &Value) -> Value {
        let id = msg["id"].as_str().unwrap();
        self.receiver
            .wait_ack(id, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("no ack for {id}\n{}", self.log()))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.home.join(".local/state/sessionpipe/sp.log"))
            .unwrap_or_default()
    }

    fn event(&self, kind: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.receiver
            .wait_event(Duration::from_secs(60), |e| e["type"] == kind && pred(e))
            .unwrap_or_else(|| {
                panic!(
                    "no {kind}; events {:#?}\n{}",
                    self.receiver.events(),
                    self.log()
                )
            })
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = self.model.kill();
        let _ = self.model.wait();
        // A failed scenario's folder is kept for inspection (its sp.log, agent.stderr,
        // editor.jsonl, model.jsonl); SP_E2E_KEEP=1 keeps every one.
        let keep = std::env::var_os("SP_E2E_KEEP").is_some_and(|v| !v.is_empty());
        if std::thread::panicking() || keep {
            println!("[scene] kept for inspection: {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The scripted ACP client: sp-acp's stdin and the frames it writes.
struct Client {
    child: Child,
    stdin: Arc<Mutex<ChildStdin>>,
    frames: Rx<Value>,
    next: u64,
}

impl Client {
    fn start(s: &Scene, agent: &[&str], env: &[(&str, &Path)]) -> Client {
        Client::start_at(s, &cli(agent[0]), &agent[1..], env, false)
    }

    /// sp-acp in front of `program ARGS`. With `answers_host`, the client answers the agent's
    /// own requests other than `session/request_permission` as Harn's host (the editor) does:
    /// Harn asks `host/capabilities` at each turn, and has the host run the processes its
    /// tools start (`host/call` `process.exec`, sent only once the call is allowed). The
    /// client runs that argv in the session's folder; anything else is "method not found".
    fn start_at(
        s: &Scene,
        program: &Path,
        args: &[&str],
        env: &[(&str, &Path)],
        answers_host: bool,
    ) -> Client {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sp-acp"));
        c.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &s.home)
            .env("LANG", "C.UTF-8")
            .env("SESSIONPIPE_LOG", "debug")
            .current_dir(&s.work);
        for v in e2e::OPENCODE_OFFLINE {
            c.env(v, "1");
        }
        for (k, v) in env {
            c.env(k, v);
        }
        c.arg("--")
            .arg(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(s.dir.join("agent.stderr")).unwrap());
        let mut child = c.spawn().expect("sp-acp starts");
        let stdin = Arc::new(Mutex::new(child.stdin.take().unwrap()));
        let stdout = child.stdout.take().unwrap();
        let log = s.dir.join("editor.jsonl");
        let (tx, rx) = channel();
        let answer_to = stdin.clone();
        let work = s.work.clone();
        std::thread::spawn(move || {
            let mut f = std::fs::File::create(log).unwrap();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let _ = writeln!(f, "{line}");
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    let method = v["method"].as_str().unwrap_or("");
                    if answers_host
                        && v.get("id").is_some()
                        && !method.is_empty()
                        && method != "session/request_permission"
                    {
                        let argv: Vec<&str> = v["params"]["args"]["argv"]
                            .as_array()
                            .map(|a| a.iter().filter_map(Value::as_str).collect())
                            .unwrap_or_default();
                        let answer = if method == "host/capabilities" {
                            json!({"jsonrpc": "2.0", "id": v["id"], "result": {}})
                        } else if method == "host/call"
                            && v["params"]["name"] == "process.exec"
                            && !argv.is_empty()
                        {
                            let out = Command::new(argv[0])
                                .args(&argv[1..])
                                .current_dir(&work)
                                .stdin(Stdio::null())
                                .output()
                                .expect("running the process Harn asked for");
                            json!({"jsonrpc": "2.0", "id": v["id"], "result": {
                                "exit_code": out.status.code().unwrap_or(-1),
                                "stdout": String::from_utf8_lossy(&out.stdout),
                                "stderr": String::from_utf8_lossy(&out.stderr),
                            }})
                        } else {
                            json!({"jsonrpc": "2.0", "id": v["id"], "error": {"code": -32601, "message": format!("Method not found: {method}")}})
                        };
                        let mut w = answer_to.lock().unwrap();
                        let _ = writeln!(w, "{answer}");
                        let _ = w.flush();
                    }
                    if tx.send(v).is_err() {
                        return;
                    }
                }
            }
        });
        Client {
            child,
            stdin,
            frames: rx,
            next: 0,
        }
    }

    fn send(&mut self, v: &Value) {
        let mut w = self.stdin.lock().unwrap();
        writeln!(w, "{v}").unwrap();
        w.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> u64 {
        self.next += 1;
        let id = self.next;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// Reads frames until one matches; returns it and the frames read on the way.
    fn until(&self, limit: Duration, pred: impl Fn(&Value) -> bool) -> (Value, Vec<Value>) {
        let end = Instant::now() + limit;
        let mut seen = Vec::new();
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let Ok(v) = self.frames.recv_timeout(left) else {
                panic!(
                    "no matching frame within {limit:?}; saw {:#?}",
                    seen.iter().rev().take(5).collect::<Vec<_>>()
                );
            };
            if pred(&v) {
                return (v, seen);
            }
            seen.push(v);
        }
    }

    fn response(&self, id: u64) -> (Value, Vec<Value>) {
        self.until(Duration::from_secs(90), |v| {
            v["id"] == id && v.get("method").is_none()
        })
    }

    fn prompt(&mut self, sid: &str, text: &str) -> u64 {
        self.request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]}),
        )
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The attention id sp-acp gives a `session/request_permission` (DECISIONS 32): the
/// `toolCallId`, `-`, and 8 hex digits of sha256 over the `rawInput` as JSON (the title, as a
/// JSON string, where there is no `rawInput`).
/// Sends a prompt whose tool asks permission; the prompt's id, the permission request, its
/// attention id and the attention.needed event that announced it.
fn ask(s: &Scene, ed: &mut Client, sid: &str, prompt: &str) -> (u64, Value, String, Value) {
    let p = ed.prompt(sid, prompt);
    let (req, _) = ed.until(Duration::from_secs(90), |v| {
        v["method"] == "session/request_permission"
    });
    let attention = call_attention(&req);
    let needed = s.event("attention.needed", |e| {
        e["data"]["attention_id"] == attention.as_str()
    });
    (p, req, attention, needed)
}

/// A file the agent wrote in its work folder, if it did.
fn work_file(s: &Scene, name: &str) -> Option<String> {
    std::fs::read_to_string(s.work.join(name)).ok()
}

/// Turn `p` ends normally, its tool having written `text` into `file`.
fn ends_having_written(s: &Scene, ed: &Client, p: u64, file: &str, text: &str) {
    let (done, _) = ed.response(p);
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let wrote = work_file(s, file);
    assert_eq!(wrote.as_deref(), Some(text), "the tool wrote {file}");
}

/// The lines of a file in the work folder (none if it is not there).
fn work_lines(s: &Scene, name: &str) -> Vec<String> {
    let text = work_file(s, name).unwrap_or_default();
    text.lines().map(str::to_string).collect()
}

/// A remote allow lets the marker be written; then a remote deny keeps a tool from running.
/// A remote allow runs the tool, the session is named `agent` and says its steer lands at
/// `steer`, then a remote deny keeps the next tool from running.
fn allow_then_deny(s: &Scene, ed: Client, agent: &str, steer: &str, how: &Agent) -> Client {
    let run = "Write the marker. SP-RUN:echo allowed-by-phone > marker.txt";
    let (mut ed, _) = drive(s, ed, run, how);
    named_and_honours(s, agent, steer);
    remote_deny_keeps_the_tool_from_running(s, &mut ed, how.mode);
    ed
}

/// The editor picks session mode `mode` (claude-agent-acp 0.101 opens a session in `auto`,
/// where its model decides permissions and no prompt is asked).
fn set_mode(ed: &mut Client, sid: &str, mode: &str) {
    let id = ed.request(
        "session/set_mode",
        json!({"sessionId": sid, "modeId": mode}),
    );
    let (set, _) = ed.response(id);
    assert!(set.get("error").is_none(), "{set}");
}

fn call_attention(req: &Value) -> String {
    use sha2::{Digest, Sha256};
    let call = &req["params"]["toolCall"];
    let input = match &call["rawInput"] {
        Value::Null => call["title"].clone(),
        v => v.clone(),
    };
    let d = Sha256::digest(input.to_string().as_bytes());
    let hex: String = d[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{hex}", call["toolCallId"].as_str().unwrap())
}

fn chunk_text(v: &Value) -> String {
    v["params"]["update"]["content"]["text"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// What differs between agents in `drive`: how the test sees their model.
struct Agent {
    /// A session mode the editor picks after `session/new`.
    mode: Option<&'static str>,
    /// The editor's `clientCapabilities` at `initialize`.
    client: fn() -> Value,
    /// Whether the model was sent `text`.
    saw: fn(&Scene, &str) -> bool,
    /// Whether the slow turn (`SP-SLOW`) is under way at the model.
    slow_started: fn(&Scene) -> bool,
}

/// The agents that call e2e/model.py, which logs every request it gets.
const STAND_IN: Agent = Agent {
    mode: None,
    client: || json!({"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false}),
    saw: |s, text| {
        s.model_requests()
            .iter()
            .any(|r| r["body"].to_string().contains(text))
    },
    slow_started: |s| {
        s.model_requests()
            .iter()
            .any(|r| r["answer"][2] == json!(true))
    },
};

/// The four checks, the same for every agent: the session reaches the receiver; a remote allow
/// lets the tool run (`run` is the prompt that asks for it); a remote prompt while idle starts
/// a turn that reaches the model; a remote cancel ends a running prompt `cancelled`. Returns
/// the editor and the session, idle, for checks of one agent's own.
fn drive(s: &Scene, mut ed: Client, run: &str, agent: &Agent) -> (Client, String) {
    let id = ed.request(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": (agent.client)()}),
    );
    let (init, _) = ed.response(id);
    assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
    let id = ed.request(
        "session/new",
        json!({"cwd": s.work.to_string_lossy(), "mcpServers": []}),
    );
    let (new, _) = ed.response(id);
    let sid = new["result"]["sessionId"].as_str().unwrap().to_string();
    let key = format!("acp:{sid}");
    if let Some(mode) = agent.mode {
        set_mode(&mut ed, &sid, mode);
    }

    // 1. The session shows up at the receiver (sp-acp started sp-sync itself).
    let started = s.event("session.started", |e| e["session"]["id"] == sid.as_str());
    assert_eq!(started["harness"]["name"], "acp");

    // 2. A remote allow lets the tool run.
    let (p, req, attention, needed) = ask(s, &mut ed, &sid, run);
    e2e::assert_message_has(&needed, "echo allowed-by-phone > marker.txt");
    assert!(
        !s.work.join("marker.txt").exists(),
        "nothing ran before the answer"
    );
    let m = s.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": attention, "decision": "allow"}),
    );
    assert_eq!(s.ack(&m)["outcome"], "delivered");
    let (cancel, _) = ed.until(Duration::from_secs(30), |v| {
        v["method"] == "$/cancel_request"
    });
    assert_eq!(cancel["params"]["requestId"], req["id"]);
    ends_having_written(s, &ed, p, "marker.txt", "allowed-by-phone\n");
    // The editor's late answer (a rejection) is swallowed: OpenCode never sees it.
    ed.send(&json!({"jsonrpc": "2.0", "id": req["id"], "result": {"outcome": {"outcome": "selected", "optionId": "reject"}}}));

    // 3. A remote prompt while idle starts a turn that reaches the model.
    let m = s.receiver.enqueue(
        &key,
        json!({"kind": "prompt", "text": "Please say the word. SP-ECHO:MARMALADE", "expires_in_s": 300}),
    );
    assert_eq!(s.ack(&m)["outcome"], "delivered");
    let (said, _) = ed.until(Duration::from_secs(90), |v| {
        v["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
            && chunk_text(v).contains("SP-SAW:MARMALADE")
    });
    assert_eq!(said["params"]["sessionId"], sid.as_str());
    assert!(
        until(Duration::from_secs(60), || (agent.saw)(
            s,
            "Please say the word. SP-ECHO:MARMALADE"
        )),
        "the model got the prompt"
    );

    // 4. A remote cancel ends the running prompt `cancelled`. First the remote
    // prompt's turn ends (its response goes to sp-acp, which logs it).
    assert!(
        until(Duration::from_secs(60), || s
            .log()
            .contains("the remote prompt's turn ended")),
        "the remote prompt's turn ended\n{}",
        s.log()
    );
    let slow = ed.prompt(&sid, "Take your time. SP-SLOW");
    assert!(
        until(Duration::from_secs(60), || (agent.slow_started)(s)),
        "the slow turn reached the model"
    );
    let started = Instant::now();
    let m = s.receiver.enqueue(&key, json!({"kind": "cancel"}));
    let (end, _) = ed.response(slow);
    assert_eq!(end["result"]["stopReason"], "cancelled", "{end}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "well before the 60 s slow answer"
    );
    let ack = s.ack(&m);
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    (ed, sid)
}

#[test]
fn opencode_acp_through_sp_acp_session_remote_allow_idle_prompt_and_cancel() {
    scenario(
        "opencode_acp_through_sp_acp_session_remote_allow_idle_prompt_and_cancel",
        "opencode",
        |s| {
            s.configure();
            s.configure_opencode();
            let ed = Client::start(s, &["opencode", "acp"], &[]);
            drive(
                s,
                ed,
                "Write the marker. SP-RUN:echo allowed-by-phone > marker.txt",
                &STAND_IN,
            );
        },
    );
}

#[test]
fn codex_acp_through_sp_acp_session_remote_allow_idle_prompt_and_cancel() {
    scenario(
        "codex_acp_through_sp_acp_session_remote_allow_idle_prompt_and_cancel",
        "codex-acp",
        |s| {
            s.configure();
            let ch = s.configure_codex();
            let ed = Client::start(
                s,
                &["codex-acp"],
                &[
                    ("CODEX_HOME", &ch),
                    ("STANDIN_API_KEY", Path::new("e2e-dummy")),
                    // codex-acp 2.6 runs the Codex it brings unless told ours.
                    ("CODEX_PATH", &cli("codex")),
                ],
            );
            // Codex asks only when the command would leave its read-only sandbox.
            let (mut ed, _) = drive(
                s,
                ed,
                "Write the marker. SP-ESCALATE SP-RUN:echo allowed-by-phone > marker.txt",
                &CODEX_READ_ONLY,
            );
            // A remote deny by meaning (rule 41): for this command Codex offers no "decline",
            // only "cancel", which also ends the turn, so a plain deny is refused and the
            // prompt stays open; a deny and stop takes "cancel". The command never runs.
            let sid = new_session(s, &mut ed);
            let key = format!("acp:{sid}");
            set_mode(&mut ed, &sid, "read-only");
            let (p, req, attention, _) = ask(
                s,
                &mut ed,
                &sid,
                "Write the other marker. SP-ESCALATE SP-RUN:echo denied-by-phone > denied.txt",
            );
            let ids: Vec<&str> = req["params"]["options"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|o| o["optionId"].as_str())
                .collect();
            assert_eq!(
                ids,
                ["allow_once", "accept_execpolicy_amendment", "cancel"],
                "{req}"
            );
            let deny = json!({"kind": "permission.answer", "for": attention, "decision": "deny"});
            acked(s, &key, &deny, "unsupported", "also ends the turn");
            let stop = json!({"kind": "permission.answer", "for": attention, "decision": "deny", "interrupt": true});
            acked(s, &key, &stop, "delivered", "option \"cancel\"");
            let (done, _) = ed.response(p);
            assert!(done.get("result").is_some(), "{done}");
            assert!(
                !s.work.join("denied.txt").exists(),
                "the denied command did not run"
            );
            acked_once(s, 5);
        },
    );
}

/// Issue 40: codex-acp 2.6 advertises `_session/steering` (`_meta.steering.supported` on its
/// `initialize` result), and the session says a steer lands at the next tool boundary. A remote
/// steer while a turn runs is injected into that turn (its receipt says so) and reaches the
/// model before the turn ends; a `queue` prompt sent meanwhile waits for the turn's end and
/// then goes as a prompt of sp-acp's own, its receipt saying that.
#[test]
fn codex_acp_steer_joins_the_running_turn_and_a_queued_prompt_waits_for_its_end() {
    scenario(
        "codex_acp_steer_joins_the_running_turn_and_a_queued_prompt_waits_for_its_end",
        "codex-acp",
        |s| {
            s.configure();
            let ch = s.configure_codex();
            let mut ed = Client::start(
                s,
                &["codex-acp"],
                &[
                    ("CODEX_HOME", &ch),
                    ("STANDIN_API_KEY", Path::new("e2e-dummy")),
                    ("CODEX_PATH", &cli("codex")),
                ],
            );
            let id = ed.request(
                "initialize",
                json!({"protocolVersion": 1, "clientCapabilities": (STAND_IN.client)()}),
            );
            let (init, _) = ed.response(id);
            assert_eq!(
                init["result"]["_meta"]["steering"]["supported"], true,
                "{init}"
            );
            let sid = new_session(s, &mut ed);
            let key = format!("acp:{sid}");
            named_and_honours(s, "Codex", "tool_boundary");
            // A turn held at the model until the test lets it answer.
            let go = s.dir.join("go");
            let p = ed.prompt(
                &sid,
                &format!("Say the word. SP-ECHO:FIRST SP-HOLD:{}", go.display()),
            );
            let holding = || {
                std::fs::read_to_string(&s.model_log)
                    .unwrap_or_default()
                    .contains(r#""note": "holding""#)
            };
            assert!(
                until(Duration::from_secs(60), holding),
                "the turn reached the model"
            );
            let steer = steered_into_the_turn(s, &key, "Also say the word. SP-ECHO:TANGERINE");
            // The queued prompt's own turn is held too: were it put into the running turn,
            // that turn would never end.
            let (queued, go2) = queue_held(s, &key, "go2");
            std::fs::write(&go, "").unwrap();
            let (done, _) = ed.response(p);
            assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
            steer_acked(s, &steer);
            let reqs = s.model_requests();
            assert!(
                reqs.iter().any(|r| r["answer"].is_array()
                    && r["body"].to_string().contains("SP-ECHO:TANGERINE")),
                "the steer reached the model before its turn ended"
            );
            queued_after_the_turn(s, &ed, &reqs, &queued, &go2);
            acked_once(s, 2);
        },
    );
}

/// A remote steer of `text` while a turn of session `key` runs: the adapter's answer to
/// `_session/steering` decides the ack, before the turn goes on.
fn steered_into_the_turn(s: &Scene, key: &str, text: &str) -> Value {
    let m = s.receiver.enqueue(
        key,
        json!({"kind": "prompt", "text": text, "mode": "steer", "expires_in_s": 300}),
    );
    // Injected: it waits for the end of the turn it joined, whose text is its reply (rule 38).
    let id = m["id"].as_str().unwrap().to_string();
    let db = s.home.join(".local/state/sessionpipe/control.db");
    assert!(
        until(Duration::from_secs(60), || {
            rusqlite::Connection::open(&db)
                .and_then(|c| {
                    c.query_row(
                        "SELECT count(*) FROM turn_waits WHERE message_id=?1",
                        [&id],
                        |r| r.get::<_, i64>(0),
                    )
                })
                .unwrap_or(0)
                == 1
        }),
        "the steer was injected into the running turn\n{}",
        s.log()
    );
    m
}

/// The steer's one final ack, once the turn it joined ended: delivered into that turn, mode
/// `api`, its reply the turn's text.
fn steer_acked(s: &Scene, m: &Value) {
    let ack = s.ack(m);
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    assert_eq!(
        ack["detail"], "acp _session/steering (injected into the running turn)",
        "{ack}"
    );
    assert_eq!(ack["mode"], "api", "{ack}");
}

/// Queues a `queue` prompt for session `key` while a turn runs, and waits until it is on the
/// machine. Its own turn is held at the model until the file `gate` (in the scene's folder)
/// exists: were it put into the running turn, that turn would never end. The message and gate.
fn queue_held(s: &Scene, key: &str, gate: &str) -> (Value, PathBuf) {
    let go = s.dir.join(gate);
    let queued = s.receiver.enqueue(
        key,
        json!({"kind": "prompt", "text": format!("Then this. SP-ECHO:QUINCE SP-HOLD:{}", go.display()), "mode": "queue", "expires_in_s": 300}),
    );
    assert!(
        until(Duration::from_secs(60), || s.log().contains(&format!(
            "queued prompt {}",
            queued["id"].as_str().unwrap()
        ))),
        "the queued prompt reached the machine\n{}",
        s.log()
    );
    (queued, go)
}

/// The running turn has ended and `reqs` are the model's requests so far: none carried the
/// [`queue_held`] prompt; let through, it runs as a turn of its own, acked as sp-acp's prompt.
fn queued_after_the_turn(s: &Scene, ed: &Client, reqs: &[Value], queued: &Value, go: &Path) {
    assert!(
        !reqs
            .iter()
            .any(|r| r["body"].to_string().contains("SP-ECHO:QUINCE")),
        "the queued prompt was not in the running turn"
    );
    std::fs::write(go, "").unwrap();
    ed.until(Duration::from_secs(90), |v| {
        v["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
            && chunk_text(v).contains("SP-SAW:QUINCE")
    });
    let ack = s.ack(queued);
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    assert_eq!(
        ack["detail"], "acp session/prompt (sent by sp-acp)",
        "{ack}"
    );
}

/// Queues `msg` for session `key`; its final ack, which must be `outcome` with a detail
/// that says `detail`.
fn acked(s: &Scene, key: &str, msg: &Value, outcome: &str, detail: &str) -> Value {
    let m = s.receiver.enqueue(key, msg.clone());
    let ack = s.ack(&m);
    assert_eq!(ack["outcome"], outcome, "{ack}");
    assert!(ack["detail"].as_str().unwrap().contains(detail), "{ack}");
    ack
}

/// codex-acp 2.6 opens a session in "Auto review" (`agent`), where Codex's reviewer model
/// decides escalations and nobody is asked; "Read-only" asks.
const CODEX_READ_ONLY: Agent = Agent {
    mode: Some("read-only"),
    ..STAND_IN
};

/// Harn's lines in harn-model.jsonl: one a turn, Harn's own record of every model call the
/// turn made (e2e/harn-agent.harn writes it when the turn's loop returns).
fn harn_turns(s: &Scene) -> Vec<String> {
    work_lines(s, "harn-model.jsonl")
}

fn harn_ticks(s: &Scene) -> usize {
    std::fs::read_to_string(s.work.join("harn-ticks.txt"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// Harn on its own `mock` provider, whose answers e2e/harn-agent.harn queues per prompt.
/// Harn starts a session in mode `ask`, whose effect ceiling refuses every side effect
/// without asking; `code` lets tools run, and the pipeline's approval policy makes `run` ask.
const HARN: Agent = Agent {
    mode: Some("code"),
    saw: |s, text| harn_turns(s).iter().any(|t| t.contains(text)),
    slow_started: |s| harn_ticks(s) > 0,
    ..STAND_IN
};

/// The agent's binary, from SP_HARN_BIN (scripts/harn-acp.sh builds harn-cli and sets it).
fn harn_bin() -> Option<PathBuf> {
    std::env::var_os("SP_HARN_BIN")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Issue 16 against Harn 0.10.185 (`harn serve acp --transport stdio`, mock provider): the
/// four checks of `drive`, then the editor's own answer winning, then a remote steer and a
/// remote interrupt into a running turn. Not in CI: harn-cli's debug build takes ~30 min on
/// two cores. Run scripts/harn-acp.sh.
#[test]
#[ignore = "needs SP_HARN_BIN (a harn-cli 0.10.185 binary): run scripts/harn-acp.sh"]
fn harn_through_sp_acp_session_remote_allow_idle_prompt_cancel_editor_first_steer_interrupt() {
    let bin = harn_bin();
    let tool =
        "SP_HARN_BIN, a harn-cli 0.10.185 binary (scripts/harn-acp.sh builds one and runs this)";
    if !needs::needs(tool, bin.is_some()) {
        return;
    }
    let bin = bin.unwrap();
    assert!(bin.is_file(), "SP_HARN_BIN={} is not a file", bin.display());
    isolated(
        "harn_through_sp_acp_session_remote_allow_idle_prompt_cancel_editor_first_steer_interrupt",
        |s| {
            s.configure();
            let bin = harn_bin().unwrap();
            // A copy in the scene's folder: Harn keeps its state (`.harn/`) beside the
            // pipeline, which must not be the source tree.
            let pipeline = s.dir.join("harn-agent.harn");
            std::fs::copy(Path::new(ROOT).join("e2e/harn-agent.harn"), &pipeline).unwrap();
            let started = Instant::now();
            let ed = Client::start_at(
                s,
                &bin,
                &[
                    "serve",
                    "acp",
                    "--transport",
                    "stdio",
                    // Harn refuses a runnable session whose environment policy nobody stated.
                    "--session-environment",
                    "isolated",
                    pipeline.to_str().unwrap(),
                ],
                &[
                    ("HARN_LLM_PROVIDER", Path::new("mock")),
                    ("HARN_DISABLE_CODE_INDEX_WARM", Path::new("1")),
                ],
                true,
            );
            let (mut ed, sid) = drive(
                s,
                ed,
                "Write the marker. SP-RUN:echo allowed-by-phone > marker.txt",
                &HARN,
            );
            println!("[harn] drive's four checks: {:?}", started.elapsed());
            let key = format!("acp:{sid}");

            // 5. The editor's own answer wins when it comes first: the remote one is acked
            // expired and never reaches Harn.
            let t = Instant::now();
            let (p, req, attention, _) = ask(
                s,
                &mut ed,
                &sid,
                "Write the other marker. SP-RUN:echo allowed-at-desk > desk.txt",
            );
            ed.send(&json!({"jsonrpc": "2.0", "id": req["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}}));
            ends_having_written(s, &ed, p, "desk.txt", "allowed-at-desk\n");
            let m = s.receiver.enqueue(
                &key,
                json!({"kind": "permission.answer", "for": attention, "decision": "deny"}),
            );
            assert_eq!(s.ack(&m)["outcome"], "expired");
            println!("[harn] editor first: {:?}", t.elapsed());

            // 6. A remote steer joins the running turn: the model is sent it within that turn.
            // 7. A remote interrupt too.
            for (mode, text) in [
                ("steer", "Prefer the smaller fix. SP-STEERED"),
                ("interrupt", "Stop and read this. SP-INTERRUPTED"),
            ] {
                let t = Instant::now();
                let before = harn_ticks(s);
                let marker = format!("SP-TICKS:8 turn-{mode}");
                let p = ed.prompt(&sid, &format!("Tick a while. {marker}"));
                assert!(
                    until(Duration::from_secs(60), || harn_ticks(s) > before),
                    "the {mode} turn runs its tools"
                );
                let m = s.receiver.enqueue(
                    &key,
                    json!({"kind": "prompt", "text": text, "mode": mode, "expires_in_s": 300}),
                );
                let ack = s.ack(&m);
                // How far the 8-tick turn had got when Harn answered.
                let ticks_at_ack = harn_ticks(s) - before;
                assert_eq!(ack["outcome"], "delivered", "{mode}: {ack}");
                let (done, _) = ed.response(p);
                assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
                let reached = until(Duration::from_secs(10), || {
                    harn_turns(s)
                        .iter()
                        .any(|t| t.contains(&marker) && t.contains(text))
                });
                println!(
                    "[harn] {mode}: {:?} ({}, answered after {ticks_at_ack} of 8 ticks); reached the model within the turn: {reached}",
                    t.elapsed(),
                    ack["detail"]
                );
                assert!(
                    reached,
                    "the {mode} reached the model within the running turn"
                );
                // Harn 0.10.185 has no `session/inject`, and reads `session/remind` (mode
                // `interrupt_immediate`) only after the running turn: sp-acp sends an interrupt
                // as a steer too.
                assert!(
                    ack["detail"]
                        .as_str()
                        .unwrap()
                        .contains("session/prompt delivery steer"),
                    "{ack}"
                );
            }
            println!("[harn] all: {:?}", started.elapsed());
        },
    );
}

// The editors' agents (issue 30): what Zed, JetBrains or Neovim launch for Claude Code
// (claude-agent-acp 0.101.0), Gemini CLI (`gemini --acp`, 0.61.0) and Copilot CLI
// (`copilot --acp`, 1.0.102), each through sp-acp on the stand-in.

/// A remote deny keeps the tool from running; returns the message. In a session of its own:
/// after the cancel that ends `drive`, the cancelled turn's `SP-SLOW` text can still be in
/// the conversation's last input, which the stand-in would answer slowly.
fn remote_deny_keeps_the_tool_from_running(
    s: &Scene,
    ed: &mut Client,
    mode: Option<&str>,
) -> Value {
    let sid = new_session(s, ed);
    if let Some(mode) = mode {
        set_mode(ed, &sid, mode);
    }
    let key = format!("acp:{sid}");
    let (p, _, attention, _) = ask(
        s,
        ed,
        &sid,
        "Write the other marker. SP-RUN:echo denied-by-phone > denied.txt",
    );
    let m = s.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": attention, "decision": "deny"}),
    );
    assert_eq!(s.ack(&m)["outcome"], "delivered");
    let (done, _) = ed.response(p);
    assert!(done.get("result").is_some(), "{done}");
    assert!(
        !s.work.join("denied.txt").exists(),
        "the denied tool did not run"
    );
    m
}

/// Every message the receiver queued got one final ack: `n` messages, and each one's final
/// ack entries (a resend repeats the same ack) agree; a `taken` or `progress` before it is
/// not a final ack.
fn acked_once(s: &Scene, n: usize) {
    let acks = s.receiver.acks();
    let mut by_id: std::collections::BTreeMap<String, Vec<Value>> = Default::default();
    for a in acks
        .into_iter()
        .filter(|a| !matches!(a["outcome"].as_str(), Some("taken" | "progress")))
    {
        by_id
            .entry(a["id"].as_str().unwrap_or_default().to_string())
            .or_default()
            .push(a);
    }
    assert_eq!(by_id.len(), n, "{by_id:#?}");
    for (id, entries) in &by_id {
        assert!(
            entries
                .iter()
                .all(|e| e["outcome"] == entries[0]["outcome"]
                    && e["detail"] == entries[0]["detail"]),
            "{id} was acked more than one way: {entries:#?}"
        );
    }
}

fn configure_gemini(s: &Scene) {
    let dir = s.home.join(".gemini");
    std::fs::create_dir_all(&dir).unwrap();
    let settings = json!({
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false},
        "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
        "security": {"auth": {"selectedType": "gemini-api-key"}}
    });
    std::fs::write(dir.join("settings.json"), settings.to_string()).unwrap();
}

#[test]
fn gemini_acp_through_sp_acp_allow_deny_idle_prompt_cancel() {
    scenario(
        "gemini_acp_through_sp_acp_allow_deny_idle_prompt_cancel",
        "gemini",
        |s| {
            s.configure();
            configure_gemini(s);
            let url = s.model_url.clone();
            let ed = Client::start(
                s,
                &["gemini", "--acp", "-m", "gemini-2.5-flash"],
                &[
                    ("GEMINI_API_KEY", Path::new("e2e-dummy")),
                    ("GOOGLE_GEMINI_BASE_URL", Path::new(&url)),
                    ("GEMINI_CLI_TRUST_WORKSPACE", Path::new("true")),
                ],
            );
            let mut ed = allow_then_deny(s, ed, "Gemini CLI", "turn_end", &STAND_IN);
            allow_for_the_session(s, &mut ed, true);
            acked_once(s, 5);
        },
    );
}

#[test]
fn copilot_acp_through_sp_acp_allow_deny_idle_prompt_cancel() {
    scenario(
        "copilot_acp_through_sp_acp_allow_deny_idle_prompt_cancel",
        "copilot",
        |s| {
            s.configure();
            std::fs::create_dir_all(s.home.join(".copilot")).unwrap();
            let base = format!("{}/v1", s.model_url);
            // BYOK: Copilot CLI's own provider on the stand-in, no GitHub sign-in.
            let ed = Client::start(
                s,
                &["copilot", "--acp"],
                &[
                    ("COPILOT_OFFLINE", Path::new("true")),
                    ("COPILOT_PROVIDER_BASE_URL", Path::new(&base)),
                    ("COPILOT_PROVIDER_API_KEY", Path::new("e2e-dummy")),
                    ("COPILOT_MODEL", Path::new("standin")),
                ],
            );
            let mut ed = allow_then_deny(s, ed, "Copilot CLI", "turn_end", &STAND_IN);
            allow_for_the_session(s, &mut ed, false);
            acked_once(s, 5);
        },
    );
}

/// The agent's own turns at the stand-in (not the holds it logs, nor side requests).
fn turns(s: &Scene) -> Vec<Value> {
    s.model_requests()
        .into_iter()
        .filter(|r| r["path"].as_str().is_some_and(|p| p.starts_with("/v1/")))
        .filter(|r| !r["body"]["tools"].is_null())
        .collect()
}

/// Another session on the same agent, live at the receiver.
fn new_session(s: &Scene, ed: &mut Client) -> String {
    let id = ed.request(
        "session/new",
        json!({"cwd": s.work.to_string_lossy(), "mcpServers": []}),
    );
    let (new, _) = ed.response(id);
    let sid = new["result"]["sessionId"].as_str().unwrap().to_string();
    s.event("session.started", |e| e["session"]["id"] == sid.as_str());
    sid
}

fn steps(s: &Scene) -> Vec<String> {
    work_lines(s, "steps.txt")
}

#[test]
fn claude_agent_acp_through_sp_acp_allow_deny_idle_prompt_cancel_steer_queue() {
    scenario(
        "claude_agent_acp_through_sp_acp_allow_deny_idle_prompt_cancel_steer_queue",
        "claude-agent-acp",
        |s| {
            s.configure();
            let url = s.model_url.clone();
            let ed = Client::start(
                s,
                &["claude-agent-acp"],
                &[
                    ("ANTHROPIC_BASE_URL", Path::new(&url)),
                    ("ANTHROPIC_API_KEY", Path::new("sk-ant-e2e-dummy")),
                    ("DISABLE_TELEMETRY", Path::new("1")),
                    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", Path::new("1")),
                    ("DISABLE_AUTOUPDATER", Path::new("1")),
                    ("DISABLE_ERROR_REPORTING", Path::new("1")),
                    // The scenario runs as root, where Claude Code refuses the
                    // --allow-dangerously-skip-permissions the adapter always passes unless
                    // told it is sandboxed (it is: its own network and pid namespace).
                    ("IS_SANDBOX", Path::new("1")),
                    // Our pinned Claude Code, not the one the adapter's SDK brings.
                    ("CLAUDE_CODE_EXECUTABLE", &cli("claude")),
                ],
            );
            let mut ed = allow_then_deny(s, ed, "Claude Code", "tool_boundary", &CLAUDE_MANUAL);
            question_answered_from_the_phone(s, &mut ed);

            // A remote steer while a turn runs goes as `_session/steering` (the adapter offers
            // it), which folds it into the running turn at its next tool boundary. In a
            // session of its own (the stand-in counts a turn's steps over the whole
            // conversation), whose steps run unasked, so only the steer is in play.
            let sid = new_session(s, &mut ed);
            let key = format!("acp:{sid}");
            set_mode(&mut ed, &sid, "bypassPermissions");
            // The mode change alone reaches the receiver (issue 40), before any turn.
            let mode = s.event("session.mode", |e| e["session"]["id"] == sid.as_str());
            assert_eq!(
                mode["session"]["permission_mode"], "bypassPermissions",
                "{mode}"
            );
            assert!(
                s.receiver
                    .events()
                    .iter()
                    .filter(|e| e["session"]["id"] == sid.as_str())
                    .all(|e| matches!(
                        e["type"].as_str(),
                        Some("session.started" | "session.mode")
                    )),
                "nothing else of the session yet"
            );
            let gate = s.dir.join("gate");
            std::fs::create_dir_all(&gate).unwrap();
            let before = turns(s).len();
            let p = ed.prompt(
                &sid,
                &format!("Run the steps. SP-STEPS:3 SP-GATE:{}", gate.display()),
            );
            assert!(
                until(Duration::from_secs(60), || steps(s) == ["step-1"]),
                "step 1 ran"
            );
            let steer = steered_into_the_turn(s, &key, "Also name the fruit. SP-STEER:TANGERINE");
            let (queued, go) = queue_held(s, &key, "go-queued");
            for k in 1..=3 {
                std::fs::write(gate.join(format!("go-{k}")), "").unwrap();
                if k < 3 {
                    let want = k + 1;
                    assert!(
                        until(Duration::from_secs(60), || steps(s).len() == want),
                        "step {want} ran"
                    );
                }
            }
            let (done, _) = ed.response(p);
            assert!(done.get("result").is_some(), "{done}");
            steer_acked(s, &steer);
            assert_eq!(steps(s), ["step-1", "step-2", "step-3"]);
            let reqs = turns(s)[before..].to_vec();
            let at = reqs
                .iter()
                .position(|r| r["body"].to_string().contains("SP-STEER:TANGERINE"))
                .expect("the steer reached the model");
            assert!(
                reqs[at..].iter().any(|r| r["answer"][0] == "tool"),
                "the steer reached the model before the turn's last tool call (request {at} of {})",
                reqs.len()
            );
            queued_after_the_turn(s, &ed, &reqs, &queued, &go);
            acked_once(s, 7);
        },
    );
}

/// claude-agent-acp 0.101 in Manual (`default`), for an editor that takes form elicitation,
/// as current editors do.
const CLAUDE_MANUAL: Agent = Agent {
    mode: Some("default"),
    client: || {
        json!({"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false,
               "elicitation": {"form": {}}})
    },
    ..STAND_IN
};

/// Rule 41: the model's AskUserQuestion reaches the editor as `elicitation/create`, which the
/// editor holds unanswered; the phone's answer wins, the editor's copy is withdrawn, and the
/// model's tool result carries the phone's label.
fn question_answered_from_the_phone(s: &Scene, ed: &mut Client) {
    let sid = new_session(s, ed);
    let key = format!("acp:{sid}");
    set_mode(ed, &sid, "default");
    let p = ed.prompt(&sid, "Ask me. SP-ASK:Which fruit?|Apple|Mango");
    let (req, _) = ed.until(Duration::from_secs(90), |v| {
        v["method"] == "elicitation/create"
    });
    let needed = s.event("attention.needed", |e| {
        e["data"]["tool"] == "question" && e["session"]["id"] == sid.as_str()
    });
    assert_eq!(
        needed["data"]["input"]["questions"][0]["question"], "Which fruit?",
        "{needed}"
    );
    let attention = needed["data"]["attention_id"].as_str().unwrap();
    let m = s.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": attention, "decision": "allow",
               "answers": {"Which fruit?": "Mango"}}),
    );
    let ack = s.ack(&m);
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    let (cancel, _) = ed.until(Duration::from_secs(30), |v| {
        v["method"] == "$/cancel_request"
    });
    assert_eq!(cancel["params"]["requestId"], req["id"]);
    let (done, _) = ed.response(p);
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let results: Vec<String> = s
        .model_requests()
        .iter()
        .flat_map(|r| {
            r["body"]["messages"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["type"] == "tool_result")
        .map(|c| c["content"].to_string())
        .collect();
    assert!(
        results
            .iter()
            .any(|r| r.contains("Which fruit?") && r.contains("Mango")),
        "the model's tool result carries the phone's answer: {results:#?}"
    );
    assert_eq!(
        s.event("attention.cleared", |e| e["data"]["attention_id"]
            == attention)["data"]["how"],
        "answered"
    );
}

/// Issue 30: the session is named for its agent (from its `initialize`), the harness stays
/// `acp`, and `data.control` says when a steer takes effect there.
fn named_and_honours(s: &Scene, agent: &str, steer: &str) {
    let started = s.event("session.started", |_| true);
    assert_eq!(started["harness"]["name"], "acp");
    assert_eq!(started["data"]["agent"], agent, "{started}");
    assert_eq!(
        started["data"]["control"]["prompt"]["steer"], steer,
        "{started}"
    );
}

/// DECISIONS 30 "allow for the session": the same command again in that session runs without
/// a second remote answer and the editor is never asked. `agents_own`: the agent's
/// `allow_always` is for the session alone (Gemini CLI's), so sp-acp picks it; otherwise sp-acp
/// answers `allow_once` and keeps the grant itself.
fn allow_for_the_session(s: &Scene, ed: &mut Client, agents_own: bool) {
    let sid = new_session(s, ed);
    let key = format!("acp:{sid}");
    let run = "Append a line. SP-RUN:echo granted >> granted.txt";
    let p = ed.prompt(&sid, run);
    let (req, _) = ed.until(Duration::from_secs(90), |v| {
        v["method"] == "session/request_permission"
    });
    let attention = call_attention(&req);
    s.event("attention.needed", |e| {
        e["data"]["attention_id"] == attention.as_str()
    });
    let m = s.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": attention, "decision": "allow", "scope": "session"}),
    );
    let ack = s.ack(&m);
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    let detail = ack["detail"].as_str().unwrap();
    assert_eq!(detail.contains("allow_always"), agents_own, "{ack}");
    assert!(detail.contains("for the session"), "{ack}");
    let (done, _) = ed.response(p);
    assert!(done.get("result").is_some(), "{done}");
    let lines = || {
        std::fs::read_to_string(s.work.join("granted.txt"))
            .unwrap_or_default()
            .lines()
            .count()
    };
    assert_eq!(lines(), 1, "the allowed command ran once");
    let needed = |s: &Scene| {
        s.receiver
            .events()
            .iter()
            .filter(|e| e["type"] == "attention.needed" && e["session"]["id"] == sid.as_str())
            .count()
    };
    let before = needed(s);
    let p = ed.prompt(&sid, run);
    let (done, seen) = ed.response(p);
    assert!(done.get("result").is_some(), "{done}");
    assert!(
        !seen
            .iter()
            .any(|v| v["method"] == "session/request_permission"),
        "the editor was asked again: {seen:#?}"
    );
    assert_eq!(lines(), 2, "the same command ran again");
    assert_eq!(needed(s), before, "a second attention was announced");
    let from_grant = s.log().contains("from the grant for the session");
    if !agents_own {
        assert!(
            from_grant,
            "sp-acp's grant answered the second request\n{}",
            s.log()
        );
    }
    eprintln!(
        "allow for the session: the second identical call was {}",
        if from_grant {
            "answered from sp-acp's grant"
        } else {
            "not asked: the agent's own session rule covered it"
        }
    );
}
