//! A temp HOME with a config pointing at a real test receiver on loopback, and ways to run
//! the real binaries in it the way a harness does.
#![allow(dead_code)]
use serde_json::{json, Value};
use spreceiver::{Receiver, ReceiverOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

// Written once in crates/testkit; here under the names the suites use.
#[allow(unused_imports)]
pub use sessionpipe_testkit::receiver::{newest_source, set_mode};
#[allow(unused_imports)]
pub use sessionpipe_testkit::wait::{until, wait_for, wait_timeout, wait_until};

pub fn bin(name: &str) -> PathBuf {
    match name {
        "sp-sync" => env!("CARGO_BIN_EXE_sp-sync").into(),
        "sp-permission" => env!("CARGO_BIN_EXE_sp-permission").into(),
        "sp-stop" => env!("CARGO_BIN_EXE_sp-stop").into(),
        "sp-event" => env!("CARGO_BIN_EXE_sp-event").into(),
        "sp" => env!("CARGO_BIN_EXE_sp").into(),
        // The receiver is its own crate (crates/receiver); cargo puts its binary beside
        // ours. `cargo test` builds it for that crate's own tests; scripts/test.sh builds
        // every binary first.
        // The receiver is its own crate (crates/receiver); cargo puts its binary beside
        // ours (scripts/test.sh builds every binary first).
        "sp-receiver" => sessionpipe_testkit::receiver::sp_receiver_bin(),
        other => panic!("no binary {other}"),
    }
}

/// The hook's stdin in one of our own payload fixtures (`tests/fixtures/hook-payloads/`).
pub fn payload(rel: &str) -> Value {
    let path = super::fixtures::own(&format!("hook-payloads/{rel}"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let fixture: Value = serde_json::from_str(&text).unwrap();
    fixture["stdin"].clone()
}

/// The recorded stdin of one of the reference's hook payloads (`<peer-data>/hook-payloads/`),
/// or None when they are absent (see [`super::fixtures::peer_or_skip`]).
pub fn peer_payload(rel: &str) -> Option<Value> {
    let dir = super::fixtures::peer_or_skip(rel)?;
    let text =
        std::fs::read_to_string(dir.join("hook-payloads").join(rel)).expect("peer-data payload");
    let fixture: Value = serde_json::from_str(&text).unwrap();
    Some(serde_json::from_str(fixture["input"]["stdin"].as_str().unwrap()).unwrap())
}

/// Our Claude Code PermissionRequest (Bash `echo hi > out.txt`).
pub const CC_PERMISSION: &str = "claude-code/permission-request.json";
/// The same session and prompt, another command.
pub const CC_PERMISSION_OTHER: &str = "claude-code/permission-request-other.json";
pub const CC_STOP: &str = "claude-code/stop.json";
/// The attention_id DECISIONS 9 mints for CC_PERMISSION (and for CC_PERMISSION_OTHER).
pub const CC_PERMISSION_ID: &str = "perm-9633ea781128eacb";
pub const CC_PERMISSION_OTHER_ID: &str = "perm-d9074870bb15aa3c";
pub const CC_SESSION: &str = "9c41e7d2-58b3-4f0a-a6e1-3d72c08b5f94";

/// The reference's recorded Claude Code payloads, and the attention_id the reference computes
/// for the first.
pub const PEER_CC_PERMISSION: &str =
    "claude-code/permission-request-bash-2.fa49c802f73f9c80fc85099cab8b49ae8771bb54.json";
pub const PEER_CC_STOP: &str = "claude-code/stop-2.fa49c802f73f9c80fc85099cab8b49ae8771bb54.json";
pub const PEER_CC_PERMISSION_ID: &str = "perm-17af3749ab63d37e";
pub const PEER_CC_SESSION: &str = "ed6c7665-589f-40c7-b7b4-e38ee662b7bc";

pub struct Env {
    pub dir: tempfile::TempDir,
    pub home: PathBuf,
    pub state: PathBuf,
    pub config: PathBuf,
    pub receiver: Receiver,
    sync: Option<Child>,
    waiting: Vec<Child>,
}

impl Env {
    /// A receiver with control and a config whose one sink ("phone") has control on.
    pub fn new() -> Env {
        Self::with(ReceiverOptions::default(), json!({}))
    }

    pub fn with(opts: ReceiverOptions, control: Value) -> Env {
        let receiver = Receiver::start(opts).expect("receiver");
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let state = home.join(".local/state/sessionpipe");
        let config = home.join(".config/sessionpipe/config.json");
        let env = Env {
            dir,
            home,
            state,
            config,
            receiver,
            sync: None,
            waiting: Vec::new(),
        };
        env.write_config(json!({
            "sinks": [{"name": "phone", "url": env.receiver.url(), "tier": 1, "control": true, "token": env.receiver.token()}],
            "control": control,
        }));
        env
    }

    pub fn write_config(&self, config: Value) {
        std::fs::create_dir_all(self.config.parent().unwrap()).unwrap();
        std::fs::write(&self.config, serde_json::to_string_pretty(&config).unwrap()).unwrap();
        set_mode(&self.config, 0o600);
    }

    /// A command for one of our binaries with HOME, config and state pointed into the temp dir.
    pub fn cmd(&self, name: &str) -> Command {
        bin_cmd(name, &self.home, &self.config, &self.state)
    }

    /// Runs a hook to completion with this stdin, as a harness does.
    pub fn hook(&self, name: &str, stdin: &[u8]) -> Output {
        let mut c = self.cmd(name);
        c.args(["--harness", "claude-code"]);
        run_with_stdin(c, stdin)
    }

    /// Runs a hook of `harness` (`--harness <harness>`) to completion with this stdin.
    pub fn hook_as(&self, harness: &str, name: &str, stdin: &[u8]) -> Output {
        let mut c = self.cmd(name);
        c.args(["--harness", harness]);
        run_with_stdin(c, stdin)
    }

    /// Starts a hook of `harness` that will wait; stdin is written and closed.
    pub fn spawn_hook_as(&self, harness: &str, name: &str, stdin: &Value) -> Child {
        let mut c = self.cmd(name);
        c.args(["--harness", harness]);
        spawn_with_stdin(c, stdin.to_string().as_bytes())
    }

    pub fn hook_json(&self, name: &str, stdin: &Value) -> Output {
        self.hook(name, stdin.to_string().as_bytes())
    }

    /// Starts a hook that will wait (PermissionRequest); stdin is written and closed.
    pub fn spawn_hook(&self, name: &str, stdin: &Value) -> Child {
        self.spawn_hook_as("claude-code", name, stdin)
    }

    /// sp-sync --daemon in the background, killed when the Env drops.
    pub fn start_sync(&mut self) {
        self.sync = Some(spawn_daemon(self.cmd("sp-sync")));
    }

    /// `start_sync` with these variables set for sp-sync (and so for the runs it launches).
    pub fn start_sync_with(&mut self, vars: &[(&str, &str)]) {
        let mut c = self.cmd("sp-sync");
        c.envs(vars.iter().copied());
        self.sync = Some(spawn_daemon(c));
    }

    pub fn stop_sync(&mut self) {
        if let Some(mut c) = self.sync.take() {
            // SIGTERM: a graceful stop with a last pass over the outboxes.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = wait_timeout(&mut c, Duration::from_secs(20));
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn sync_once(&self) -> Output {
        let mut c = self.cmd("sp-sync");
        c.arg("--once");
        run_with_stdin(c, b"")
    }

    /// Moves the machine's clock (every binary this Env runs) `by` further forward than it
    /// was: the offset in the test clock's file (src/clock.rs), replaced whole.
    pub fn advance_clock(&self, by: Duration) {
        let file = self.home.join("test-clock");
        let was: i64 = std::fs::read_to_string(&file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        let tmp = self.home.join("test-clock.new");
        std::fs::write(&tmp, format!("{}\n", was + by.as_millis() as i64)).unwrap();
        std::fs::rename(&tmp, &file).unwrap();
    }

    pub fn db_path(&self) -> PathBuf {
        self.state.join("control.db")
    }

    pub fn db(&self) -> rusqlite::Connection {
        let c = rusqlite::Connection::open(self.db_path()).unwrap();
        c.busy_timeout(Duration::from_secs(5)).unwrap();
        c
    }

    pub fn query<T: rusqlite::types::FromSql>(&self, sql: &str) -> Vec<T> {
        let db = self.db();
        let mut st = db.prepare(sql).unwrap();
        st.query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.state.join("sp.log")).unwrap_or_default()
    }

    /// Waits for an event of `type` (and matching `data` fields) at the receiver.
    pub fn wait_event(&self, kind: &str, data: Value, timeout: Duration) -> Option<Value> {
        self.receiver.wait_event(timeout, |e| {
            e["type"] == kind
                && data
                    .as_object()
                    .unwrap()
                    .iter()
                    .all(|(k, v)| &e["data"][k] == v)
        })
    }

    /// Every event of this type at the receiver.
    pub fn events_of(&self, kind: &str) -> Vec<Value> {
        self.receiver
            .events()
            .into_iter()
            .filter(|e| e["type"] == kind)
            .collect()
    }

    pub fn acks_for(&self, id: &str) -> Vec<Value> {
        self.receiver
            .acks()
            .into_iter()
            .filter(|a| a["id"] == id)
            .collect()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.stop_sync();
        for mut c in self.waiting.drain(..) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A command for one of our binaries with HOME, config and state pointed into a temp HOME.
pub fn bin_cmd(name: &str, home: &Path, config: &Path, state: &Path) -> Command {
    let mut c = Command::new(bin(name));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("SESSIONPIPE_CONFIG", config)
        .env("SESSIONPIPE_STATE_DIR", state)
        .env("SESSIONPIPE_LOG", "debug")
        .env("SESSIONPIPE_NO_SPAWN", "1")
        // The test clock's file; absent until a test moves the clock (Env::advance_clock).
        .env(spctl::clock::TEST_CLOCK_ENV, home.join("test-clock"))
        .current_dir(home);
    c
}

/// Starts `c` as a hook that will wait (a permission request); stdin is written and closed.
pub fn spawn_with_stdin(mut c: Command, stdin: &[u8]) -> Child {
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child
}

/// `c --daemon` in the background, its output discarded (sp-sync).
pub fn spawn_daemon(mut c: Command) -> Child {
    c.arg("--daemon")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c.spawn().unwrap()
}

pub fn run_with_stdin(mut c: Command, stdin: &[u8]) -> Output {
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(&data);
    });
    let out = child.wait_with_output().unwrap();
    let _ = writer.join();
    out
}

/// Collects a finished child's output, failing the test if it did not finish in time.
pub fn finish(mut c: Child, d: Duration) -> Output {
    let status = wait_timeout(&mut c, d);
    if status.is_none() {
        let _ = c.kill();
        panic!("hook did not finish within {d:?}");
    }
    c.wait_with_output().unwrap()
}

/// Asserts the command exited 0, showing its stderr when it did not.
#[track_caller]
pub fn assert_succeeded(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
