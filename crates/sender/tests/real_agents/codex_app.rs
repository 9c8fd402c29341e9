//! Issue 19: Codex 0.171 under `sp codex`, its app-server on our Unix socket, sp-sync as a
//! second client. The first client stands in for the terminal UI (a scripted client speaking
//! the same protocol as `codex --remote`); the model is the scripted stand-in, offline.
use super::between_turns::{one_final_ack, sigkill_sync, start_second_sync, sync_pid};
use super::*;
use spctl::codex_server::Client;

const CALL: Duration = Duration::from_secs(15);

fn state_dir(s: &Scene) -> PathBuf {
    s.home.join(".local/state/sessionpipe")
}

fn socket(s: &Scene) -> PathBuf {
    state_dir(s).join("codex/app-server.sock")
}

/// `sp codex --version` as a person runs `sp codex`: it starts the app-server on our socket,
/// then execs `codex --remote unix://… --version` (which prints and ends).
fn sp_codex(s: &Scene, args: &[&str]) -> std::process::Output {
    let mut c = Command::new(s.bin.join("sp"));
    s.base_env(&mut c);
    c.env("CODEX_HOME", codex_home(s))
        .env("STANDIN_API_KEY", "e2e-dummy")
        .env("SP_CODEX", cli_path("codex"))
        .arg("codex")
        .args(args)
        .stdin(Stdio::null());
    c.output().expect("running sp codex")
}

fn mode_of(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Only this user can reach the socket: our folder 0700, Codex's socket 0600 in its own 0700
/// folder; and another local user (`nobody`) cannot connect.
fn assert_socket_private(s: &Scene) {
    let sock = socket(s);
    assert_eq!(mode_of(sock.parent().unwrap()), 0o700, "our codex folder");
    assert_eq!(mode_of(&state_dir(s)), 0o700, "the state folder");
    let real = std::fs::canonicalize(&sock).unwrap();
    assert_eq!(mode_of(&real), 0o600, "the socket {}", real.display());
    assert_eq!(mode_of(real.parent().unwrap()), 0o700, "{}", real.display());
    // The system's python3: a per-user one (pyenv under /root) is out of nobody's reach.
    let python = Path::new("/usr/bin/python3");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 && which("setpriv").is_some() && python.exists() {
        for path in [&sock, &real] {
            let out = Command::new("setpriv")
                .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
                .arg(python)
                .arg("-c")
                .arg(
                    // Through the folder, relative: the full path is longer than sun_path.
                    "import os,socket,sys\ns=socket.socket(socket.AF_UNIX)\n\
                     try:\n  os.chdir(os.path.dirname(sys.argv[1]))\n  \
                     s.connect(os.path.basename(sys.argv[1])); print('CONNECTED')\n\
                     except OSError as e: print('REFUSED', e)",
                )
                .arg(path)
                .output()
                .expect("setpriv");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                text.starts_with("REFUSED") && text.contains("Permission denied"),
                "nobody must not reach {}: {text} {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// The terminal stand-in: connects, trusts our hooks as the person does once in Codex's
/// /hooks review, starts a thread.
struct Terminal {
    c: Client,
    thread: String,
}

impl Terminal {
    fn open(s: &Scene) -> Terminal {
        let mut c = Client::connect(&socket(s), "terminal-standin").expect("terminal connects");
        let hooks = c
            .request("hooks/list", json!({"cwds": [s.work]}), CALL)
            .unwrap()
            .expect("hooks/list");
        let mut state = serde_json::Map::new();
        for h in hooks["data"][0]["hooks"].as_array().expect("hooks") {
            state.insert(
                h["key"].as_str().unwrap().to_string(),
                json!({"trusted_hash": h["currentHash"]}),
            );
        }
        assert!(!state.is_empty(), "our hooks are registered: {hooks}");
        c.request(
            "config/batchWrite",
            json!({"edits": [{"keyPath": "hooks.state", "value": state, "mergeStrategy": "upsert"}],
                   "reloadUserConfig": true}),
            CALL,
        )
        .unwrap()
        .expect("trusting the hooks");
        let t = c
            .request("thread/start", json!({"cwd": s.work}), CALL)
            .unwrap()
            .expect("thread/start");
        let thread = t["thread"]["id"].as_str().unwrap().to_string();
        Terminal { c, thread }
    }

    fn key(&self) -> String {
        format!("codex:{}", self.thread)
    }

    fn turn(&mut self, text: &str) -> String {
        let r = self
            .c
            .request(
                "turn/start",
                json!({"threadId": self.thread, "input": [{"type": "text", "text": text}]}),
                CALL,
            )
            .unwrap()
            .expect("turn/start");
        r["turn"]["id"].as_str().unwrap().to_string()
    }

    /// The next notification `method` of this thread matching `pred`.
    fn wait(&mut self, method: &str, limit: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if let Some(m) = self.c.next_message(Duration::from_millis(200)).unwrap() {
                if m["method"] == method
                    && m["params"]["threadId"] == self.thread.as_str()
                    && pred(&m)
                {
                    return m["params"].clone();
                }
            }
        }
        panic!("no {method} for thread {} within {limit:?}", self.thread)
    }

    fn completed(&mut self, turn: &str) -> Value {
        self.wait("turn/completed", Duration::from_secs(60), |m| {
            m["params"]["turn"]["id"] == turn
        })["turn"]
            .clone()
    }
}

/// Whether sp-sync says it follows this thread (its attached.json, what `sp doctor` reads).
fn attached(s: &Scene, thread: &str) -> bool {
    std::fs::read_to_string(state_dir(s).join("codex/attached.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .is_some_and(|v| {
            v["connected"] == true
                && v["threads"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|x| x == thread))
        })
}

/// Starts a slow turn (`SP-SLOW`) and waits until it reached the model; its turn id. `what`
/// says which in a failure.
fn slow_turn(s: &Scene, t: &mut Terminal, what: &str) -> String {
    let slow = t.turn("Take your time. SP-SLOW");
    assert!(
        until(Duration::from_secs(30), || s
            .agent_requests()
            .iter()
            .any(|r| turn_of(r) == slow)),
        "{what}"
    );
    slow
}

/// The detail of message `m`'s ack, which must say `delivered`.
fn delivered_detail(s: &Scene, m: &Value) -> String {
    let ack = s.ack(m, Duration::from_secs(30));
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    ack["detail"].as_str().unwrap_or_default().to_string()
}

/// The attention id of the next permission prompt announced other than those in `seen`.
fn next_permission(s: &Scene, seen: &[&str]) -> String {
    let needed = s.wait_event(
        "attention.needed",
        |e| {
            e["data"]["kind"] == "permission"
                && seen.iter().all(|a| e["data"]["attention_id"] != *a)
        },
        Duration::from_secs(60),
    );
    needed["data"]["attention_id"].as_str().unwrap().to_string()
}

fn turn_of(request: &Value) -> String {
    request["headers"]["x-codex-turn-metadata"]
        .as_str()
        .and_then(|h| serde_json::from_str::<Value>(h).ok())
        .and_then(|m| m["turn_id"].as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Starts everything and the terminal's first turn; returns once sp-sync follows the thread.
fn start(s: &Scene) -> (Terminal, String) {
    start_with(s, "")
}

/// [`start`] with `extra` appended to Codex's config.toml first.
fn start_with(s: &Scene, extra: &str) -> (Terminal, String) {
    codex_setup(s, 60);
    if !extra.is_empty() {
        use std::io::Write;
        std::fs::OpenOptions::new()
            .append(true)
            .open(codex_home(s).join("config.toml"))
            .and_then(|mut f| f.write_all(extra.as_bytes()))
            .expect("appending to config.toml");
    }
    let out = sp_codex(s, &["--version"]);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("0.171.0"),
        "sp codex --version: {} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_socket_private(s);
    let mut t = Terminal::open(s);
    let first = t.turn("Hello.");
    let done = t.completed(&first);
    assert_eq!(done["status"], "completed", "{done}");
    // The hooks made the session live; sp-sync (started by them) follows the thread.
    assert!(
        until(Duration::from_secs(30), || attached(s, &t.thread)),
        "sp-sync follows thread {}",
        t.thread
    );
    // A second `sp codex` reuses the same app-server.
    let again = sp_codex(s, &["--version"]);
    assert!(again.status.success());
    let doctor = {
        let mut c = Command::new(s.bin.join("sp"));
        s.base_env(&mut c);
        c.arg("doctor").output().unwrap()
    };
    let text = String::from_utf8_lossy(&doctor.stdout).to_string();
    assert!(
        text.contains("codex: sp-sync follows 1 thread"),
        "sp doctor says the session is attached:\n{text}"
    );
    let key = t.key();
    (t, key)
}

#[test]
fn codex_app_server_prompt_steer_and_cancel_reach_the_running_thread() {
    scenario(
        "codex_app::codex_app_server_prompt_steer_and_cancel_reach_the_running_thread",
        &["codex"],
        |s| {
            let (mut t, key) = start(s);

            // 1. Idle: a remote prompt starts a turn; `taken`, then one final ack at the turn's
            // end (DECISIONS 38 `api`) with the model's answer.
            let m = s.enqueue(
                &key,
                json!({"kind": "prompt", "text": "From the phone. SP-ECHO:DAMSON"}),
            );
            let ack = one_final_ack(s, &m, Duration::from_secs(30));
            assert_eq!(ack["outcome"], "delivered", "{ack}");
            assert_eq!(ack["mode"], "api", "{ack}");
            assert_eq!(ack["reply"], "SP-SAW:DAMSON", "{ack}");
            let detail = ack["detail"].as_str().unwrap();
            assert!(
                detail.starts_with("codex app-server turn/start (turn "),
                "{detail}"
            );
            let turn = detail
                .trim_end_matches(')')
                .rsplit(' ')
                .next()
                .unwrap()
                .to_string();
            let done = t.completed(&turn);
            assert!(
                all_text(&done).contains("SP-SAW:DAMSON"),
                "the turn answered it: {done}"
            );

            // 2. Busy: a steer lands in the running turn, and the model reads it in that turn;
            // its final ack comes at that turn's end, with the turn's answer.
            let slow = slow_turn(s, &mut t, "the slow turn reached the model");
            let m = s.enqueue(
                &key,
                json!({"kind": "prompt", "text": "Also say it. SP-ECHO:QUINCE", "mode": "steer"}),
            );
            let done = t.completed(&slow);
            let ended = Instant::now();
            assert_eq!(done["status"], "completed", "{done}");
            let ack = one_final_ack(s, &m, Duration::from_secs(30));
            s.say(&format!(
                "the steer's final ack reached the receiver {:?} after the terminal saw its turn end",
                ended.elapsed()
            ));
            assert_eq!(ack["outcome"], "delivered", "{ack}");
            assert_eq!(ack["mode"], "api", "{ack}");
            assert_eq!(
                ack["detail"],
                json!(format!("codex app-server turn/steer (turn {slow})")),
                "{ack}"
            );
            let reply = ack["reply"].as_str().unwrap_or_default();
            assert!(
                reply.ends_with("SP-SAW:QUINCE") && all_text(&done).contains(reply),
                "the reply is the turn's answer: {ack} {done}"
            );
            let steered: Vec<Value> = s
                .agent_requests()
                .into_iter()
                .filter(|r| all_text(&r["body"]["input"]).contains("SP-ECHO:QUINCE"))
                .collect();
            assert!(!steered.is_empty(), "the steer reached the model");
            assert!(
                steered.iter().all(|r| turn_of(r) == slow),
                "within the same turn {slow}"
            );
            assert!(all_text(&done).contains("SP-SAW:QUINCE"), "{done}");

            // 3. Busy: a cancel stops the running turn; nothing runs after it.
            let slow = t.turn("Take your time again. SP-SLOW");
            assert!(
                until(Duration::from_secs(30), || s
                    .agent_requests()
                    .iter()
                    .any(|r| turn_of(r) == slow && r["answer"][2] == json!(true))),
                "the slow turn is streaming"
            );
            let n = s
                .agent_requests()
                .into_iter()
                .find(|r| turn_of(r) == slow)
                .unwrap()["n"]
                .clone();
            let started = Instant::now();
            let m = s.enqueue(&key, json!({"kind": "cancel"}));
            let ack = s.ack(&m, Duration::from_secs(30));
            assert_eq!(ack["outcome"], "delivered", "{ack}");
            assert_eq!(
                ack["detail"],
                json!(format!(
                    "codex app-server turn/interrupt: turn {slow} ended interrupted"
                )),
            );
            let done = t.completed(&slow);
            assert_eq!(done["status"], "interrupted", "{done}");
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "well before the 60 s answer"
            );
            let before = s.model_requests().len();
            std::thread::sleep(Duration::from_secs(2));
            let after: Vec<Value> = s.model_requests().into_iter().skip(before).collect();
            assert!(
                after.iter().all(|r| r["method"].is_null()),
                "no model request (so no tool) after the interrupt: {after:?}"
            );
            s.assert_stream_cut(&n, "Codex");

            // 4. Idle again: a cancel has nothing to stop.
            let m = s.enqueue(&key, json!({"kind": "cancel"}));
            let ack = s.ack(&m, Duration::from_secs(30));
            assert_eq!(ack["outcome"], "expired", "{ack}");
        },
    );
}

/// The `progress` acks message `m` got so far, in order.
fn progress_acks(s: &Scene, m: &Value) -> Vec<Value> {
    s.receiver
        .acks()
        .into_iter()
        .filter(|a| a["id"] == m["id"] && a["outcome"] == "progress")
        .collect()
}

/// The app-server turn message `m` waits for (sp-sync keeps it with the wait).
fn waited_turn(s: &Scene, m: &Value) -> Option<String> {
    s.db()
        .query_row(
            "SELECT api_turn FROM turn_waits WHERE message_id = ?1",
            [m["id"].as_str().unwrap()],
            |r| r.get(0),
        )
        .ok()
}

/// Issue 38 / DECISIONS 38 `api` under `sp codex`: a prompt from the phone is acked `taken`,
/// then `progress` with the answer so far as the model streams it, then once `delivered`,
/// mode `api`, with the turn's answer as `reply`. A turn that ends while no sp-sync runs
/// (SIGKILLed mid-turn) is read back by the next sp-sync: still exactly one final ack, with
/// the reply.
#[test]
fn codex_app_server_prompt_reply_streams_and_outlives_an_sp_sync_restart() {
    scenario(
        "codex_app::codex_app_server_prompt_reply_streams_and_outlives_an_sp_sync_restart",
        &["codex"],
        |s| {
            let (mut t, key) = start(s);

            // 1. A slow answer (a chunk a second for 4 s): progress acks, seq rising, each the
            // answer so far; then the one final ack with the whole answer.
            let m = s.enqueue(
                &key,
                json!({"kind": "prompt", "text": "Answer slowly. SP-SLOW:4"}),
            );
            assert!(
                until(Duration::from_secs(30), || progress_acks(s, &m).len() >= 2),
                "two progress acks: {:?}",
                s.receiver.acks()
            );
            assert!(
                s.receiver
                    .wait_ack(m["id"].as_str().unwrap(), Duration::ZERO)
                    .is_none(),
                "no final ack while the turn runs"
            );
            let ack = one_final_ack(s, &m, Duration::from_secs(30));
            assert_eq!(ack["outcome"], "delivered", "{ack}");
            assert_eq!(ack["mode"], "api", "{ack}");
            let reply = ack["reply"].as_str().unwrap_or_default();
            assert!(
                reply.starts_with("SP-SLOW reply. ..."),
                "the model's whole answer: {ack}"
            );
            let p = progress_acks(s, &m);
            let seqs: Vec<u64> = p.iter().map(|a| a["seq"].as_u64().unwrap()).collect();
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "seq rises: {seqs:?}");
            let texts: Vec<&str> = p.iter().map(|a| a["reply"].as_str().unwrap()).collect();
            assert!(
                texts.windows(2).all(|w| w[1].len() > w[0].len())
                    && texts.iter().all(|x| reply.starts_with(x)),
                "the reply grows into the final one: {texts:?} then {reply:?}"
            );

            // 2. sp-sync is SIGKILLed while the turn runs; the turn ends with no sp-sync
            // about; the next one finds the turn's end and acks it once, with the reply.
            let go = s.dir.join("go");
            let m = s.enqueue(
                &key,
                json!({"kind": "prompt", "text": format!("Wait for it. SP-HOLD:{} SP-ECHO:LATE", go.display())}),
            );
            let mut turn = None;
            assert!(
                until(Duration::from_secs(30), || {
                    turn = waited_turn(s, &m);
                    turn.is_some()
                }),
                "the prompt went into a turn"
            );
            let turn = turn.unwrap();
            let held = go.display().to_string();
            assert!(
                until(Duration::from_secs(30), || s
                    .model_requests()
                    .iter()
                    .any(|r| r["note"] == "holding" && r["path"] == held.as_str())),
                "the turn reached the model, which holds its answer"
            );
            let pid = sigkill_sync(s, &format!("mid-turn {turn}"));
            std::fs::write(&go, "").unwrap();
            let done = t.completed(&turn);
            assert_eq!(done["status"], "completed", "{done}");
            assert!(
                s.receiver
                    .wait_ack(m["id"].as_str().unwrap(), Duration::ZERO)
                    .is_none(),
                "no final ack without an sp-sync"
            );
            start_second_sync(s);
            let ack = one_final_ack(s, &m, Duration::from_secs(30));
            assert_eq!(ack["outcome"], "delivered", "{ack}");
            assert_eq!(ack["mode"], "api", "{ack}");
            assert_eq!(ack["reply"], "SP-SAW:LATE", "{ack}");
            assert_ne!(sync_pid(s), pid, "a second sp-sync finished it");
        },
    );
}

/// The pids of this scenario's Codex app-server (`codex app-server --listen …`: the npm
/// wrapper and the program it runs).
fn app_server_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|d| d.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let args: Vec<&[u8]> = c.split(|b| *b == 0).collect();
                args.contains(&&b"app-server"[..]) && args.contains(&&b"--listen"[..])
            })
        })
        .collect()
}

/// The app-server dies mid-turn (so the connection drops and nothing can tell how the turn
/// ended): the prompt that went into it still gets exactly one final ack, `delivered`, mode
/// `api`, without a reply, once no app-server has followed its turn for 15 s.
#[test]
fn codex_app_server_gone_mid_turn_acks_its_prompt_once_without_a_reply() {
    scenario(
        "codex_app::codex_app_server_gone_mid_turn_acks_its_prompt_once_without_a_reply",
        &["codex"],
        |s| {
            let (_t, key) = start(s);
            let never = s.dir.join("never");
            let m = s.enqueue(
                &key,
                json!({"kind": "prompt", "text": format!("Wait. SP-HOLD:{} SP-ECHO:GONE", never.display())}),
            );
            let held = never.display().to_string();
            assert!(
                until(Duration::from_secs(30), || s
                    .model_requests()
                    .iter()
                    .any(|r| r["note"] == "holding" && r["path"] == held.as_str())),
                "the turn reached the model, which holds its answer"
            );
            assert!(
                waited_turn(s, &m).is_some(),
                "the prompt waits for its turn"
            );
            let pids = app_server_pids();
            assert!(!pids.is_empty(), "the app-server runs");
            let killed = Instant::now();
            for pid in &pids {
                // SAFETY: a signal to a process of this scenario's own pid namespace.
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
            let ack = one_final_ack(s, &m, Duration::from_secs(45));
            s.say(&format!(
                "final ack {:?} after the app-server died",
                killed.elapsed()
            ));
            assert_eq!(ack["outcome"], "delivered", "{ack}");
            assert_eq!(ack["mode"], "api", "{ack}");
            assert_eq!(ack.get("reply"), None, "{ack}");
            assert!(waited_turn(s, &m).is_none(), "nothing waits any more");
        },
    );
}

/// Benchmark (BENCHMARKS.md): receiver enqueue → sp-sync's `turn/interrupt` sent, from the
/// enqueue's wall clock to the log line sp-sync writes as it sends the request.
#[test]
fn codex_app_server_cancel_latency() {
    scenario(
        "codex_app::codex_app_server_cancel_latency",
        &["codex"],
        |s| {
            let (mut t, key) = start(s);
            let rounds: usize = std::env::var("SP_BENCH_ROUNDS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(20);
            let mut enqueued = Vec::new();
            let mut polls_after_ack = 0;
            for i in 0..rounds {
                let slow = slow_turn(
                    s,
                    &mut t,
                    &format!("round {i}: the slow turn reached the model"),
                );
                // As when a person taps seconds later: sp-sync's next long poll is held (a
                // session is polled at most every 250 ms, DECISIONS 24).
                assert!(
                    until(Duration::from_secs(10), || s.receiver.polls()
                        > polls_after_ack),
                    "round {i}: sp-sync polls again"
                );
                let at = spctl::clock::now_ms();
                let m = s.enqueue(&key, json!({"kind": "cancel"}));
                let ack = s.ack(&m, Duration::from_secs(30));
                polls_after_ack = s.receiver.polls();
                assert_eq!(ack["outcome"], "delivered", "round {i}: {ack}");
                assert_eq!(t.completed(&slow)["status"], "interrupted");
                enqueued.push((m["id"].as_str().unwrap().to_string(), at));
            }
            let log = std::fs::read_to_string(state_dir(s).join("sp.log")).unwrap();
            let mut ms: Vec<i64> = enqueued
                .iter()
                .map(|(id, at)| {
                    let line = log
                        .lines()
                        .find(|l| l.contains(&format!("turn/interrupt sent for cancel {id}")))
                        .unwrap_or_else(|| panic!("no log line for {id}"));
                    let ts = line.split(' ').next().unwrap();
                    spctl::clock::parse_wire(ts).unwrap() - at
                })
                .collect();
            ms.sort();
            let pct = |p: f64| ms[((ms.len() as f64 - 1.0) * p).round() as usize];
            // What following an idle thread costs: sp-sync's CPU over 5 s with nothing to do
            // (this namespace's /proc shows only this scenario's processes).
            let cpu_ms = || -> i64 {
                let mut total = 0;
                for e in std::fs::read_dir("/proc").unwrap().flatten() {
                    let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
                    if comm.trim() == "sp-sync" {
                        let stat =
                            std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
                        let f: Vec<&str> = stat
                            .rsplit(')')
                            .next()
                            .unwrap_or("")
                            .split_whitespace()
                            .collect();
                        // utime, stime: fields 14 and 15, in clock ticks (100 a second here).
                        total += f.get(11).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0)
                            + f.get(12).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
                    }
                }
                total * 10
            };
            let before = cpu_ms();
            std::thread::sleep(Duration::from_secs(5));
            println!(
                "BENCH codex follower idle: sp-sync used {} ms CPU in 5 s",
                cpu_ms() - before
            );
            println!(
            "BENCH codex cancel: enqueue -> turn/interrupt sent, n={} p50={} ms p99={} ms max={} ms",
            ms.len(),
            pct(0.5),
            pct(0.99),
            ms[ms.len() - 1]
        );
        },
    );
}

#[test]
fn codex_app_server_permission_remote_answer_and_terminal_first() {
    scenario(
        "codex_app::codex_app_server_permission_remote_answer_and_terminal_first",
        &["codex"],
        |s| {
            let (mut t, key) = start(s);

            // The phone answers first: the hook returned at once, the approval request went to
            // both clients, ours carries the allow.
            let turn =
                t.turn("Write the marker. SP-ESCALATE SP-RUN:echo allowed-by-phone > marker.txt");
            let (k, attention, needed) = wait_permission(s, "codex");
            assert_eq!(k, key);
            assert!(
                all_text(&needed).contains("echo allowed-by-phone > marker.txt"),
                "{needed}"
            );
            let req = t.wait("item/commandExecution/requestApproval", CALL, |_| true);
            assert_eq!(req["turnId"], turn.as_str());
            let m = s.enqueue(
                &key,
                json!({"kind": "permission.answer", "for": attention, "decision": "allow"}),
            );
            let ack = s.ack(&m, Duration::from_secs(30));
            assert_eq!(ack["outcome"], "delivered", "{ack}");
            assert_eq!(
                ack["detail"],
                "codex app-server item/commandExecution/requestApproval: accept"
            );
            assert_eq!(cleared(s, &attention)["data"]["how"], "answered");
            let done = t.completed(&turn);
            assert_eq!(done["status"], "completed", "{done}");
            assert_eq!(s.marker().as_deref(), Some("allowed-by-phone\n"));

            // The terminal answers first: its decline wins, the late phone answer expires.
            let turn = t.turn("Once more. SP-ESCALATE SP-RUN:echo should-not-run > marker.txt");
            let second = next_permission(s, &[&attention]);
            let req = approval_request(&mut t);
            t.c.respond(&req, json!({"decision": "decline"})).unwrap();
            assert_eq!(cleared(s, &second)["data"]["how"], "answered");
            let m = s.enqueue(
                &key,
                json!({"kind": "permission.answer", "for": second, "decision": "allow"}),
            );
            let ack = s.ack(&m, Duration::from_secs(30));
            assert_eq!(ack["outcome"], "expired", "{ack}");
            let done = t.completed(&turn);
            assert_eq!(done["status"], "completed", "{done}");
            assert_eq!(
                s.marker().as_deref(),
                Some("allowed-by-phone\n"),
                "the declined command never ran"
            );

            // The phone denies with a note: declined, and the model reads the note in that turn.
            let turn = t.turn("And again. SP-ESCALATE SP-RUN:echo denied-by-phone > marker.txt");
            let third = next_permission(s, &[&attention, &second]);
            approval_request(&mut t);
            let note = "Not on main, please (note SP-NOTE-4711).";
            let m = s.enqueue(
                &key,
                json!({"kind": "permission.answer", "for": third, "decision": "deny", "note": note}),
            );
            let ack = s.ack(&m, Duration::from_secs(30));
            assert_eq!(ack["outcome"], "delivered", "{ack}");
            assert_eq!(
                ack["detail"],
                "codex app-server item/commandExecution/requestApproval: decline; the note followed as turn/steer"
            );
            let done = t.completed(&turn);
            assert_eq!(done["status"], "completed", "{done}");
            assert_eq!(s.marker().as_deref(), Some("allowed-by-phone\n"));
            assert!(
                s.agent_requests()
                    .iter()
                    .any(|r| turn_of(r) == turn && all_text(&r["body"]["input"]).contains(note)),
                "the model read the note within the turn"
            );
        },
    );
}

/// The id of the terminal's next approval request.
fn approval_request(t: &mut Terminal) -> Value {
    let end = Instant::now() + CALL;
    while Instant::now() < end {
        if let Some(m) = t.c.next_message(Duration::from_millis(200)).unwrap() {
            if m["method"] == "item/commandExecution/requestApproval" && m.get("id").is_some() {
                return m["id"].clone();
            }
        }
    }
    panic!("no approval request reached the terminal");
}

/// The real terminal UI: `sp codex PROMPT` in tmux, as a person runs it (hooks trusted once
/// beforehand, as `/hooks` does). A cancel from the phone stops its slow turn, then a prompt
/// from the phone starts the next one, and the terminal shows both.
#[test]
fn codex_app_server_real_tui_cancel_then_prompt() {
    scenario(
        "codex_app::codex_app_server_real_tui_cancel_then_prompt",
        &["codex"],
        |s| {
            codex_setup(s, 60);
            let out = sp_codex(s, &["--version"]);
            assert!(out.status.success(), "{out:?}");
            drop(Terminal::open(s)); // trusts the hooks; its empty thread is never used
            let sp = s.bin.join("sp");
            let argv = [&*sp.to_string_lossy(), "codex", "Take your time. SP-SLOW"];
            let codex_home = codex_home(s);
            let codex = cli_path("codex");
            let env = [
                ("CODEX_HOME", &*codex_home.to_string_lossy()),
                ("STANDIN_API_KEY", "e2e-dummy"),
                ("SP_CODEX", &*codex.to_string_lossy()),
            ];
            let tui = tui_start(s, "codex", &env, &argv);
            // The TUI's thread: its hooks report it, sp-sync follows it, the model streams.
            let started = s.wait_event(
                "session.started",
                |e| e["harness"]["name"] == "codex",
                Duration::from_secs(60),
            );
            let key = session_key_of(&started);
            let thread = key.strip_prefix("codex:").unwrap().to_string();
            assert!(
                until(Duration::from_secs(30), || attached(s, &thread)),
                "sp-sync follows the TUI's thread {thread}"
            );
            assert!(
                s.slow_answer_streams(Duration::from_secs(30)),
                "the slow turn is streaming"
            );
            tui.wait_screen("Take your time. SP-SLOW", Duration::from_secs(10));

            let m = s.enqueue(&key, json!({"kind": "cancel"}));
            let detail = delivered_detail(s, &m);
            assert!(detail.ends_with("ended interrupted"), "{detail}");
            let screen = tui.wait_screen("Conversation interrupted", Duration::from_secs(15));
            s.say(&format!("the terminal after the cancel:\n{screen}"));

            let m = s.enqueue(
                &key,
                json!({"kind": "prompt", "text": "From the phone. SP-ECHO:FIG"}),
            );
            let detail = delivered_detail(s, &m);
            assert!(
                detail.starts_with("codex app-server turn/start"),
                "{detail}"
            );
            let screen = tui.wait_screen("SP-SAW:FIG", Duration::from_secs(30));
            s.say(&format!("the terminal after the prompt:\n{screen}"));
        },
    );
}

/// The permission prompts announced so far.
fn permissions_announced(s: &Scene) -> usize {
    s.receiver
        .events()
        .iter()
        .filter(|e| e["type"] == "attention.needed" && e["data"]["kind"] == "permission")
        .count()
}

/// The lines of a file in the work folder.
fn work_lines(s: &Scene, name: &str) -> Vec<String> {
    std::fs::read_to_string(s.work.join(name))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Issue 27 / DECISIONS 30 on Codex 0.171's app-server: the session says what it honours;
/// "allow for this session" answers `acceptForSession` and keeps our grant, so the same command
/// in the next turn is not asked again and runs; a field Codex cannot honour (`input`) is acked
/// `unsupported`, nothing runs and the prompt stays open; deny & stop answers `cancel`: the
/// tool does not run, the turn ends interrupted and the model is not called again.
#[test]
fn codex_app_server_session_allow_and_deny_and_stop() {
    scenario(
        "codex_app::codex_app_server_session_allow_and_deny_and_stop",
        &["codex"],
        |s| {
            let (mut t, key) = start(s);
            let started = s.wait_event(
                "session.started",
                |e| e["session"]["id"] == t.thread.as_str(),
                CALL,
            );
            assert_eq!(
                started["data"]["control"]["answer"],
                json!(["scope", "interrupt", "answers"]),
                "a session under sp codex honours the app-server's fields: {started}"
            );

            // Allow for this session.
            let run = "Append a line. SP-ESCALATE SP-RUN:echo granted >> granted.txt";
            let turn = t.turn(run);
            let (k, attention, _) = wait_permission(s, "codex");
            assert_eq!(k, key);
            approval_request(&mut t);
            let m = s.enqueue(
                &key,
                json!({"kind": "permission.answer", "for": attention, "decision": "allow",
                       "scope": "session"}),
            );
            let detail = delivered_detail(s, &m);
            assert!(
                detail.starts_with(
                    "codex app-server item/commandExecution/requestApproval: acceptForSession"
                ) && detail.contains("for the session"),
                "{detail}"
            );
            assert_eq!(t.completed(&turn)["status"], "completed");
            assert_eq!(work_lines(s, "granted.txt"), ["granted"]);
            let grants = {
                let mut c = Command::new(s.bin.join("sp"));
                s.base_env(&mut c);
                c.args(["grants", "--json"]).output().unwrap()
            };
            let grants: Value = serde_json::from_slice(&grants.stdout).expect("sp grants --json");
            assert!(
                grants
                    .as_array()
                    .is_some_and(|g| g.iter().any(|g| g["session"] == key.as_str()
                        && all_text(g).contains("echo granted >> granted.txt"))),
                "our grant is kept: {grants}"
            );
            let asked = permissions_announced(s);
            // The same command in the next turn: not asked again, and it runs.
            let turn = t.turn(run);
            assert_eq!(t.completed(&turn)["status"], "completed");
            assert_eq!(work_lines(s, "granted.txt"), ["granted", "granted"]);
            assert_eq!(
                permissions_announced(s),
                asked,
                "the granted call was asked again"
            );

            // An edited command: Codex cannot take one. Unsupported, nothing ran, still open.
            let turn =
                t.turn("Write the marker. SP-ESCALATE SP-RUN:echo should-not-run > marker.txt");
            let stop_attention = next_permission(s, &[&attention]);
            approval_request(&mut t);
            let m = s.enqueue(
                &key,
                json!({"kind": "permission.answer", "for": stop_attention, "decision": "allow",
                       "input": {"command": "echo edited > marker.txt"}}),
            );
            let ack = s.ack(&m, CALL);
            assert_eq!(ack["outcome"], "unsupported", "{ack}");
            assert!(
                ack["detail"].as_str().unwrap().starts_with("input:"),
                "{ack}"
            );
            let state: String = s
                .db()
                .query_row(
                    "select state from attention where attention_id = ?1",
                    [&stop_attention],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(state, "open", "the prompt stays open");
            assert_eq!(s.marker(), None, "nothing ran");

            // Deny & stop.
            let m = s.enqueue(
                &key,
                json!({"kind": "permission.answer", "for": stop_attention, "decision": "deny",
                       "interrupt": true, "note": "Stop; run the tests first."}),
            );
            let detail = delivered_detail(s, &m);
            assert!(
                detail
                    .starts_with("codex app-server item/commandExecution/requestApproval: cancel"),
                "{detail}"
            );
            let done = t.completed(&turn);
            assert_eq!(done["status"], "interrupted", "{done}");
            assert_eq!(s.marker(), None, "the denied command never ran");
            let calls = s
                .agent_requests()
                .iter()
                .filter(|r| turn_of(r) == turn)
                .count();
            assert_eq!(calls, 1, "the model was not called again in that turn");
        },
    );
}

/// Issue 27 / DECISIONS 30: the model's question (`request_user_input`, offered by Codex 0.171
/// with the feature `default_mode_request_user_input`) reaches sp-sync as the app-server's
/// `item/tool/requestUserInput`; no hook fires, so sp-sync announces it with the questions and
/// options as `data.input`. An allow without answers is acked `failed` and the question stays
/// open; an allow with a label answers it, and the model reads that label in the tool result.
#[test]
fn codex_app_server_question_answered_from_the_receiver() {
    scenario(
        "codex_app::codex_app_server_question_answered_from_the_receiver",
        &["codex"],
        |s| {
            let (mut t, key) =
                start_with(s, "\n[features]\ndefault_mode_request_user_input = true\n");
            let started = s.wait_event(
                "session.started",
                |e| e["session"]["id"] == t.thread.as_str(),
                CALL,
            );
            assert!(
                started["data"]["control"]["answer"]
                    .as_array()
                    .is_some_and(|a| a.contains(&json!("answers"))),
                "{started}"
            );

            let turn = t.turn("Ask me. SP-QUESTION:Which colour?|Red|Blue");
            let needed = s.wait_event(
                "attention.needed",
                |e| e["data"]["tool"] == "request_user_input",
                Duration::from_secs(60),
            );
            let attention = needed["data"]["attention_id"].as_str().unwrap().to_string();
            assert_eq!(needed["session"]["id"], t.thread.as_str(), "{needed}");
            let q = &needed["data"]["input"]["questions"][0];
            assert_eq!(q["question"], "Which colour?", "{needed}");
            let labels: Vec<&str> = q["options"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["label"].as_str().unwrap())
                .collect();
            assert_eq!(labels, ["Red", "Blue"], "{needed}");

            // An allow without answers: failed, the question still open.
            let m = s.enqueue(
                &key,
                json!({"kind": "permission.answer", "for": attention, "decision": "allow"}),
            );
            let ack = s.ack(&m, CALL);
            assert_ack(&ack, "failed", "a question needs answers");
            let state: String = s
                .db()
                .query_row(
                    "select state from attention where attention_id = ?1",
                    [&attention],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(state, "open", "the question stays open");

            // The person picks a label.
            let m = s.enqueue(
                &key,
                json!({"kind": "permission.answer", "for": attention, "decision": "allow",
                       "answers": {"Which colour?": "Blue"}}),
            );
            let detail = delivered_detail(s, &m);
            assert_eq!(
                detail, "codex app-server item/tool/requestUserInput: answered",
                "{detail}"
            );
            let done = t.completed(&turn);
            assert_eq!(done["status"], "completed", "{done}");
            let outputs: Vec<String> = s
                .agent_requests()
                .iter()
                .filter(|r| turn_of(r) == turn)
                .flat_map(|r| {
                    r["body"]["input"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|i| i["type"] == "function_call_output")
                        .map(|i| all_text(&i["output"]))
                })
                .collect();
            assert!(
                outputs.iter().any(|o| o.contains(r#""answers":["Blue"]"#)),
                "the model read the chosen label: {outputs:?}"
            );
            let cleared = s.wait_event(
                "attention.cleared",
                |e| e["data"]["attention_id"] == attention.as_str(),
                CALL,
            );
            assert_eq!(cleared["data"]["how"], "answered", "{cleared}");

            // The next turn asks again (the script asks on every turn); a deny answers no
            // answers, and the model goes on.
            let turn = t.turn("Again.");
            let again = s.wait_event(
                "attention.needed",
                |e| {
                    e["data"]["tool"] == "request_user_input"
                        && e["data"]["attention_id"] != attention.as_str()
                },
                Duration::from_secs(60),
            );
            let m = s.enqueue(
                &key,
                json!({"kind": "permission.answer", "for": again["data"]["attention_id"],
                       "decision": "deny"}),
            );
            let detail = delivered_detail(s, &m);
            assert_eq!(
                detail, "codex app-server item/tool/requestUserInput: no answers (declined)",
                "{detail}"
            );
            let done = t.completed(&turn);
            assert_eq!(done["status"], "completed", "{done}");
            assert!(
                s.agent_requests()
                    .iter()
                    .filter(|r| turn_of(r) == turn)
                    .any(|r| all_text(&r["body"]["input"]).contains(r#"{"answers":{}}"#)),
                "the model read no answers"
            );
        },
    );
}
