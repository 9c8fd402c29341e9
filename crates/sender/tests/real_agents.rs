//! Issue 8: proof against the real agents. Claude Code, Codex, OpenCode, Gemini CLI and Copilot
//! CLI (issue 17), at the versions pinned in e2e/package-lock.json (installed by
//! scripts/e2e-deps.sh), run for real, offline, against a scripted model stand-in
//! (e2e/model.py) and our test receiver, with our hooks registered by install.sh into a temp
//! HOME pointing at the release binaries.
//!
//! Each scenario runs in its own network namespace that has only loopback (and its own pid
//! namespace, so nothing it started outlives it): the test re-runs itself for that one
//! scenario under `unshare`, where the stand-in, the receiver, sp-sync and the CLI all live.
//! Scenarios run one at a time. Nothing is skipped: a missing CLI, binary or tool fails the
//! scenario with what to run.
//!
//! Run: `e2e/run.sh` (deps, release build, this suite, a `N passed, M failed` line), or
//! `scripts/test.sh --test real_agents` (the same, through the README's test command).
//! `SP_E2E_KEEP=1` keeps every scenario's folder (otherwise only a failed one's is kept).
mod common;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Issue 19: Codex through its app-server (`sp codex`).
#[path = "real_agents/codex_app.rs"]
mod codex_app;

/// Issue 27: Claude Code's answers beyond yes or no, and an interrupt while a tool runs.
#[path = "real_agents/claude_answers.rs"]
mod claude_answers;

/// Issue 38: between turns, a headless resume or fork delivers the prompt.
#[path = "real_agents/between_turns.rs"]
mod between_turns;

/// Issue 39: a session started from the receiver.
#[path = "real_agents/start.rs"]
mod start;

use common::acks::assert_ack;
use common::e2e::{self, World, INSIDE, ROOT};
use common::env::{until, wait_timeout};
/// One scenario may take this long in all before it is killed.
// The fifty OpenCode runs take about 100-160 s on 2 busy cores; a hang is caught after this.
const SCENARIO_LIMIT: Duration = Duration::from_secs(420);
/// How long a CLI run may take (its model answers at once).
const CLI_LIMIT: Duration = Duration::from_secs(120);
const DEPS: &str = "scripts/e2e-deps.sh";

/// Scenarios never overlap: the machine is small and each starts a whole agent.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

// ------------------------------------------------------------------------------------------
// Running a scenario in its own namespace

fn cli_path(name: &str) -> PathBuf {
    if name == "droid" {
        // Its Linux binary package, pinned directly, links no `.bin/droid`.
        return Path::new(ROOT).join("e2e/node_modules/@factory/cli-linux-x64/bin/droid");
    }
    Path::new(ROOT).join("e2e/node_modules/.bin").join(name)
}

/// Where the release binaries are: $SP_E2E_BIN_DIR, else target/release (or
/// $CARGO_TARGET_DIR/release).
fn release_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SP_E2E_BIN_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(ROOT).join("target"));
    let target = if target.is_absolute() {
        target
    } else {
        Path::new(ROOT).join(target)
    };
    target.join("release")
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(program))
            .find(|f| f.is_file())
    })
}

/// Everything a scenario needs from the machine, or a failure saying what to run.
fn preflight(clis: &[&str]) {
    for c in clis {
        let p = cli_path(c);
        assert!(
            p.exists(),
            "{c} is not installed at {}: run {DEPS} (it installs the pinned CLIs into e2e/node_modules)",
            p.display()
        );
    }
    for b in ["sp", "sp-sync", "sp-permission", "sp-stop", "sp-event"] {
        let p = release_dir().join(b);
        assert!(
            p.exists(),
            "{} is missing: build the release binaries first (cargo build --release --locked --bins; e2e/run.sh does)",
            p.display()
        );
    }
    // Never the proof of an older build: the binaries must be newer than every source file.
    let built = std::fs::metadata(release_dir().join("sp-permission"))
        .and_then(|m| m.modified())
        .unwrap();
    let newest = ["crates/sender/src", "crates/wire/src"]
        .iter()
        .filter_map(|d| common::env::newest_source(&Path::new(ROOT).join(d)))
        .max();
    if let Some(newer) = newest.filter(|(t, _)| *t > built) {
        panic!(
            "{} is newer than the release binaries in {}: rebuild them (cargo build --release --locked --bins; e2e/run.sh does)",
            newer.1.display(),
            release_dir().display()
        );
    }
    for t in ["unshare", "ip", "python3", "node", "tmux"] {
        assert!(
            which(t).is_some(),
            "{t} is not on PATH: run {DEPS} (as root)"
        );
    }
    // Claude Code 2.1.332 asks for Node.js 22; scripts/test.sh puts a pinned one from
    // .deps/ first on PATH when the system's is older.
    let major = Command::new("node")
        .args(["-p", "process.versions.node.split('.')[0]"])
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<u32>()
                .ok()
        })
        .unwrap_or(0);
    assert!(
        major >= 22,
        "node on PATH is Node.js {major}; the pinned CLIs need 22 or later: run scripts/test.sh \
         (it installs Node.js 22 into .deps/ and puts .deps/bin first on PATH), or add .deps/bin to PATH"
    );
    e2e::assert_root();
}

/// Runs one scenario: here, re-runs this test binary for `name` alone inside a fresh network
/// and pid namespace with only loopback up; inside, runs `body`.
fn scenario(name: &str, clis: &[&str], body: impl FnOnce(&mut Scene)) {
    if e2e::inside(name) {
        let mut scene = Scene::new(name);
        body(&mut scene);
        scene.passed = true;
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    preflight(clis);
    e2e::run_in_namespace(name, SCENARIO_LIMIT, &[]);
}

// ------------------------------------------------------------------------------------------
// One scenario's world, inside its namespace

struct Scene {
    world: World,
    name: String,
    bin: PathBuf,
    extra: Vec<Child>,
    passed: bool,
}

/// The folders, receiver and model stand-in are the world's.
impl std::ops::Deref for Scene {
    type Target = World;
    fn deref(&self) -> &World {
        &self.world
    }
}

impl std::ops::DerefMut for Scene {
    fn deref_mut(&mut self) -> &mut World {
        &mut self.world
    }
}

impl Scene {
    fn new(name: &str) -> Scene {
        let world = World::new(name);
        Scene {
            name: name.into(),
            bin: world.home.join(".local/bin"),
            world,
            extra: Vec::new(),
            passed: false,
        }
    }

    fn say(&self, what: &str) {
        println!("[{}] {what}", self.name);
    }

    /// Our config: one sink, the receiver, with control; the permission wait for `harness`.
    fn write_config(&self, harness: &str, permission_wait_s: u64) {
        let path = self.home.join(".config/sessionpipe/config.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let config = json!({
            "sinks": [{"name": "phone", "url": self.receiver.url(), "tier": 1, "control": true, "token": self.receiver.token()}],
            // Away for good: these scenarios answer from the receiver (DECISIONS 27).
            "control": {"away": "always", "harness": {harness: {"permission_wait_s": permission_wait_s}}},
        });
        std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    /// Sets one value of our config (a JSON pointer whose parent exists).
    fn set_config(&self, pointer: &str, value: Value) {
        let path = self.home.join(".config/sessionpipe/config.json");
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        *config
            .pointer_mut(pointer)
            .unwrap_or_else(|| panic!("no {pointer} in the config")) = value;
        std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    }

    /// The environment every program here gets: nothing of ours leaks in from outside.
    /// Whether the receiver has no event of type `kind`.
    fn never_got(&self, kind: &str) -> bool {
        !self.receiver.events().iter().any(|e| e["type"] == kind)
    }

    /// The pinned CLI `name` as a command in this scene's environment.
    fn cli(&self, name: &str) -> Command {
        let mut c = Command::new(cli_path(name));
        self.base_env(&mut c);
        c
    }

    fn base_env(&self, c: &mut Command) {
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into())
        );
        c.env_clear()
            .env("PATH", path)
            .env("HOME", &self.home)
            .env("USER", "root")
            .env("LANG", "C.UTF-8")
            .env("SHELL", "/bin/bash")
            .env("TERM", "dumb")
            .env("SESSIONPIPE_LOG", "debug")
            // The machine's test clock (src/clock.rs): real until a scenario writes the file.
            .env(spctl::clock::TEST_CLOCK_ENV, self.home.join("test-clock"))
            .current_dir(&self.work);
    }

    /// `./install.sh` exactly as a person runs it, but with the release build already made:
    /// binaries into ~/.local/bin, hooks into every harness folder that exists in HOME.
    fn install(&self, extra_env: &[(&str, &Path)]) -> String {
        let mut c = Command::new(Path::new(ROOT).join("install.sh"));
        self.base_env(&mut c);
        c.arg("--no-cron")
            .env("SP_SKIP_BUILD", "1")
            .env("SP_BUILD_DIR", release_dir())
            // Belt and braces: never the machine's real crontab.
            .env("SP_CRONTAB", self.dir.join("no-crontab"));
        for (k, v) in extra_env {
            c.env(k, v);
        }
        let out = c.output().expect("running install.sh");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(self.dir.join("install.out"), &text).unwrap();
        assert!(out.status.success(), "install.sh failed:\n{text}");
        for b in ["sp-permission", "sp-stop", "sp-event", "sp-sync"] {
            let installed = std::fs::read(self.bin.join(b)).unwrap();
            let built = std::fs::read(release_dir().join(b)).unwrap();
            assert!(
                installed == built,
                "~/.local/bin/{b} is not the release binary"
            );
        }
        text
    }

    fn db(&self) -> rusqlite::Connection {
        let c = rusqlite::Connection::open(self.home.join(".local/state/sessionpipe/control.db"))
            .unwrap();
        c.busy_timeout(Duration::from_secs(5)).unwrap();
        c
    }

    /// Whether sp-sync has stored this message in the local queue.
    fn stored(&self, id: &str) -> bool {
        let path = self.home.join(".local/state/sessionpipe/control.db");
        path.exists()
            && self
                .db()
                .query_row("select count(*) from messages where id = ?1", [id], |r| {
                    r.get::<_, i64>(0)
                })
                .unwrap_or(0)
                == 1
    }

    fn wait_event(&self, kind: &str, pred: impl Fn(&Value) -> bool, limit: Duration) -> Value {
        self.receiver
            .wait_event(limit, |e| e["type"] == kind && pred(e))
            .unwrap_or_else(|| {
                panic!(
                    "no {kind} event reached the receiver within {limit:?}; events: {:#?}",
                    self.receiver.events()
                )
            })
    }

    fn ack(&self, msg: &Value, limit: Duration) -> Value {
        let id = msg["id"].as_str().unwrap();
        self.receiver.wait_ack(id, limit).unwrap_or_else(|| {
            panic!(
                "no ack for {id} within {limit:?}; acks: {:?}",
                self.receiver.acks()
            )
        })
    }

    fn enqueue(&self, session_key: &str, m: Value) -> Value {
        self.say(&format!("enqueue for {session_key}: {m}"));
        self.receiver.enqueue(session_key, m)
    }

    /// Every request the model stand-in logged, in order.
    fn model_requests(&self) -> Vec<Value> {
        e2e::model_requests(&self.model_log)
    }

    /// Whether a slow answer (`SP-SLOW`) starts streaming to the agent within `limit`.
    fn slow_answer_streams(&self, limit: Duration) -> bool {
        until(limit, || {
            self.agent_requests()
                .iter()
                .any(|r| r["answer"][2] == json!(true))
        })
    }

    /// Fails unless `who` closed model stream `n` (within 10 s) before it was sent whole.
    fn assert_stream_cut(&self, n: &Value, who: &str) {
        let closed = |r: &Value| r["note"] == "client closed the stream" && &r["n"] == n;
        assert!(
            until(Duration::from_secs(10), || self
                .model_requests()
                .iter()
                .any(closed)),
            "{who} closed the slow model stream"
        );
        assert!(
            !self
                .model_requests()
                .iter()
                .any(|r| r["note"] == "stream sent" && &r["n"] == n),
            "the slow answer never completed"
        );
    }

    /// The agent's own turns: requests that offer tools (not titles, not Codex's reviewer).
    fn agent_requests(&self) -> Vec<Value> {
        self.model_requests()
            .into_iter()
            .filter(|r| r["body"]["tools"].as_array().is_some_and(|t| !t.is_empty()))
            .filter(|r| {
                !r["answer"][1]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("SP-GUARDIAN")
            })
            .collect()
    }

    /// The lines of the stand-in's steps file (SP-STEPS), in order.
    fn steps(&self) -> Vec<String> {
        std::fs::read_to_string(self.work.join("steps.txt"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn marker(&self) -> Option<String> {
        std::fs::read_to_string(self.work.join("marker.txt")).ok()
    }

    fn cleanup_children(&mut self) {
        for c in self
            .extra
            .iter_mut()
            .chain(std::iter::once(&mut self.world.model))
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Ends every other process of this scenario's pid namespace (sp-sync, the agent and what
/// they started), so nothing writes into the folder while it is removed. Only inside the
/// namespace, where /proc is the namespace's own and pid 1 is our `sh`.
fn end_the_rest_of_the_namespace() {
    if std::env::var_os(INSIDE).is_none() {
        return;
    }
    let init = std::fs::read("/proc/1/cmdline").unwrap_or_default();
    if !init.starts_with(b"sh\0") {
        return;
    }
    let me = std::process::id() as i32;
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) {
            if pid != 1 && pid != me {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        self.cleanup_children();
        end_the_rest_of_the_namespace();
        let keep = std::env::var_os("SP_E2E_KEEP").is_some_and(|v| !v.is_empty());
        if self.passed && !keep {
            // Killed processes may still be closing files for a moment.
            for _ in 0..20 {
                if std::fs::remove_dir_all(&self.dir).is_ok() || !self.dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        } else {
            println!(
                "[{}] kept for inspection: {}",
                self.name,
                self.dir.display()
            );
            // The log of our binaries says what the hooks and sp-sync did.
            if let Ok(log) =
                std::fs::read_to_string(self.home.join(".local/state/sessionpipe/sp.log"))
            {
                let tail: Vec<&str> = log.lines().rev().take(60).collect();
                println!("[{}] sp.log (last lines):", self.name);
                for l in tail.iter().rev() {
                    println!("    {l}");
                }
            }
        }
    }
}

/// Every string inside a JSON value, joined: what a request "contains".
fn all_text(v: &Value) -> String {
    let mut out = String::new();
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => {
                out.push_str(s);
                out.push('\n');
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(o) => o.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    walk(v, &mut out);
    out
}

/// A CLI run to completion with a limit, its stdout and stderr kept in the scenario folder.
struct Run {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
}

fn spawn_logged(scene: &Scene, mut c: Command, label: &str) -> Child {
    let out = std::fs::File::create(scene.dir.join(format!("{label}.stdout"))).unwrap();
    let err = std::fs::File::create(scene.dir.join(format!("{label}.stderr"))).unwrap();
    c.stdin(Stdio::null()).stdout(out).stderr(err);
    c.spawn()
        .unwrap_or_else(|e| panic!("cannot start {label}: {e}"))
}

fn finish_logged(scene: &Scene, mut child: Child, label: &str, limit: Duration) -> Run {
    let status = wait_timeout(&mut child, limit);
    let read = |ext: &str| {
        std::fs::read_to_string(scene.dir.join(format!("{label}.{ext}"))).unwrap_or_default()
    };
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "{label} did not finish within {limit:?}\nstdout:\n{}\nstderr:\n{}",
            read("stdout"),
            read("stderr")
        );
    };
    Run {
        status,
        stdout: read("stdout"),
        stderr: read("stderr"),
    }
}

/// `finish_logged` within the CLI limit, for a run that must succeed.
fn finish_ok(scene: &Scene, child: Child, label: &str) -> Run {
    let run = finish_logged(scene, child, label, CLI_LIMIT);
    assert!(
        run.status.success(),
        "{label} exited {}: {}",
        run.status,
        run.stderr
    );
    run
}

// ------------------------------------------------------------------------------------------
// Claude Code

/// Makes the CLI's folder `dir` (how install.sh tells it is installed), runs install.sh and
/// checks it set up `harness`; returns the JSON it wrote at `written` (both under HOME).
fn install_for(scene: &Scene, dir: &str, harness: &str, written: &str) -> Value {
    std::fs::create_dir_all(scene.home.join(dir)).unwrap();
    let out = scene.install(&[]);
    assert!(out.contains(harness), "{out}");
    let text = std::fs::read_to_string(scene.home.join(written))
        .unwrap_or_else(|e| panic!("install.sh wrote ~/{written}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn claude_setup(scene: &Scene, permission_wait_s: u64) {
    scene.write_config("claude-code", permission_wait_s);
    // The harness's folder is how install.sh tells Claude Code is installed.
    let settings = install_for(scene, ".claude", "claude-code", ".claude/settings.json");
    let perm = &settings["hooks"]["PermissionRequest"][0]["hooks"][0];
    assert_eq!(
        perm["command"],
        json!(scene.bin.join("sp-permission").to_string_lossy()),
        "{settings:#}"
    );
    assert_eq!(perm["timeout"], json!(permission_wait_s + 10));
    assert_eq!(
        settings["hooks"]["Stop"][0]["hooks"][0]["command"],
        json!(scene.bin.join("sp-stop").to_string_lossy())
    );
}

fn claude(scene: &Scene, prompt: &str) -> Child {
    claude_with(scene, prompt, &[])
}

fn claude_with(scene: &Scene, prompt: &str, extra: &[&str]) -> Child {
    let mut c = scene.cli("claude");
    c.env("ANTHROPIC_BASE_URL", &scene.model_url)
        .env("ANTHROPIC_API_KEY", "sk-ant-e2e-dummy")
        .env("DISABLE_TELEMETRY", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        // The runs sp-sync launches between turns (DECISIONS 38) find this CLI through it.
        .env("SP_CLAUDE", cli_path("claude"))
        .args(["-p", prompt, "--output-format", "stream-json", "--verbose"])
        .args(extra);
    scene.say(&format!("claude -p {prompt:?} {extra:?}"));
    spawn_logged(scene, c, "claude")
}

/// The `result` line of Claude Code's stream-json output.
fn claude_result(run: &Run) -> Value {
    run.stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .rfind(|v| v["type"] == "result")
        .unwrap_or_else(|| {
            panic!(
                "claude printed no result line\nstdout:\n{}\nstderr:\n{}",
                run.stdout, run.stderr
            )
        })
}

/// Claude Code's interactive UI, in a tmux session of its own inside the namespace.
struct Tui {
    sock: PathBuf,
}

impl Tui {
    fn tmux(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.sock);
        c
    }

    /// What the terminal shows now.
    fn screen(&self) -> String {
        let out = self
            .tmux()
            .args(["capture-pane", "-p", "-t", "cc"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn wait_screen(&self, what: &str, limit: Duration) -> String {
        let mut last = String::new();
        if until(limit, || {
            last = self.screen();
            last.contains(what)
        }) {
            return last;
        }
        panic!("the terminal never showed {what:?} within {limit:?}; it shows:\n{last}");
    }

    fn keys(&self, keys: &[&str]) {
        let st = self
            .tmux()
            .args(["send-keys", "-t", "cc"])
            .args(keys)
            .status()
            .expect("tmux send-keys");
        assert!(st.success());
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        let _ = self.tmux().arg("kill-server").status();
    }
}

/// Starts `argv` (a CLI and its arguments) interactive in tmux, as a person runs it: in the
/// scene's work folder, our binaries first on PATH, with only a terminal's environment and
/// `env`. The launcher script is kept in the scene's folder as `<name>-tui.sh`.
fn tui_start(scene: &Scene, name: &str, env: &[(&str, &str)], argv: &[&str]) -> Tui {
    let q = |v: &str| format!("'{}'", v.replace('\'', r"'\''"));
    let path = format!(
        "{}:{}",
        scene.bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let home = scene.home.to_string_lossy();
    let terminal = [
        ("PATH", path.as_str()),
        ("HOME", &*home),
        ("USER", "root"),
        ("LANG", "C.UTF-8"),
        ("TERM", "xterm-256color"),
        ("SESSIONPIPE_LOG", "debug"),
    ];
    let mut script = format!(
        "#!/bin/sh\ncd {}\nexec env -i",
        q(&scene.work.to_string_lossy())
    );
    for (k, v) in terminal.iter().chain(env) {
        script.push(' ');
        script.push_str(&q(&format!("{k}={v}")));
    }
    for a in argv {
        script.push(' ');
        script.push_str(&q(a));
    }
    script.push('\n');
    let launcher = scene.dir.join(format!("{name}-tui.sh"));
    std::fs::write(&launcher, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    let tui = Tui {
        sock: scene.dir.join("tmux.sock"),
    };
    let st = tui
        .tmux()
        .args(["new-session", "-d", "-s", "cc", "-x", "160", "-y", "50"])
        .arg(&launcher)
        .status()
        .expect("tmux new-session");
    assert!(st.success(), "tmux started");
    tui
}

const TUI_KEY: &str = "sk-ant-e2e-dummy-key-0123456789abcdef";

/// `claude --permission-mode default PROMPT` in its interactive UI, as a person runs it: the
/// onboarding done, the folder trusted and the key approved in a pre-seeded ~/.claude.json.
fn claude_tui(scene: &Scene, prompt: &str) -> Tui {
    claude_tui_in(scene, prompt, "default")
}

/// [`claude_tui`] in another permission mode (`plan`: issue 27's plans).
fn claude_tui_in(scene: &Scene, prompt: &str, mode: &str) -> Tui {
    let work = scene.work.to_string_lossy().to_string();
    let seeded = json!({
        "hasCompletedOnboarding": true,
        "lastOnboardingVersion": "2.1.332",
        "numStartups": 5,
        "theme": "dark",
        "customApiKeyResponses": {"approved": [&TUI_KEY[TUI_KEY.len() - 20..]], "rejected": []},
        "projects": {work.clone(): {"hasTrustDialogAccepted": true, "hasCompletedProjectOnboarding": true, "allowedTools": []}},
    });
    std::fs::write(
        scene.home.join(".claude.json"),
        serde_json::to_string_pretty(&seeded).unwrap(),
    )
    .unwrap();
    let claude = cli_path("claude");
    let argv = [
        &*claude.to_string_lossy(),
        "--permission-mode",
        mode,
        prompt,
    ];
    let env = [
        ("SHELL", "/bin/bash"),
        ("ANTHROPIC_BASE_URL", scene.model_url.as_str()),
        ("ANTHROPIC_API_KEY", TUI_KEY),
        // The runs sp-sync launches between turns (DECISIONS 38) find this CLI through it.
        ("SP_CLAUDE", &*claude.to_string_lossy()),
        ("DISABLE_TELEMETRY", "1"),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ("DISABLE_AUTOUPDATER", "1"),
        ("DISABLE_ERROR_REPORTING", "1"),
    ];
    let tui = tui_start(scene, "claude", &env, &argv);
    scene.say(&format!("claude (interactive, tmux) {prompt:?}"));
    tui
}

const DIALOG: &str = "Do you want to proceed?";

fn session_key_of(e: &Value) -> String {
    format!(
        "{}:{}",
        e["harness"]["name"].as_str().unwrap(),
        e["session"]["id"].as_str().unwrap()
    )
}

/// Waits for the permission prompt to reach the receiver; (session key, attention id).
fn wait_permission(scene: &Scene, harness: &str) -> (String, String, Value) {
    let needed = scene.wait_event(
        "attention.needed",
        |e| e["harness"]["name"] == harness && e["data"]["kind"] == "permission",
        Duration::from_secs(60),
    );
    scene.say(&format!("attention.needed: {}", needed["data"]));
    (
        session_key_of(&needed),
        needed["data"]["attention_id"].as_str().unwrap().to_string(),
        needed,
    )
}

fn cleared(scene: &Scene, attention_id: &str) -> Value {
    scene.wait_event(
        "attention.cleared",
        |e| e["data"]["attention_id"] == attention_id,
        Duration::from_secs(30),
    )
}

/// The last message of `role` in an agent request's conversation (Chat Completions style).
fn last_message(req: &Value, role: &str) -> Option<Value> {
    req["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == role)
        .cloned()
}

/// The tool result the agent sent back to the model after its one tool call, as text.
fn tool_result_text(scene: &Scene) -> String {
    let reqs = scene.agent_requests();
    assert!(
        reqs.len() >= 2,
        "the agent sent the tool's result back to the model: {} agent requests",
        reqs.len()
    );
    let last = reqs.last().unwrap();
    all_text(&last["body"]["messages"]) + &all_text(&last["body"]["input"])
}

/// Sends the person's answer (`answer` holds its decision and note) for the waiting prompt,
/// lets the CLI finish, and checks the receiver's side: the CLI succeeded, the answer was
/// acked `delivered` and the prompt cleared as `answered`.
fn answer_and_finish(
    s: &Scene,
    harness: &str,
    child: Child,
    key: &str,
    attention: &str,
    answer: Value,
) -> Run {
    let mut m = json!({"kind": "permission.answer", "for": attention});
    m.as_object_mut()
        .unwrap()
        .extend(answer.as_object().unwrap().clone());
    let m = s.enqueue(key, m);
    let run = finish_ok(s, child, cli_label(harness));
    assert_eq!(s.ack(&m, Duration::from_secs(30))["outcome"], "delivered");
    assert_eq!(cleared(s, attention)["data"]["how"], "answered");
    run
}

/// A prompt that has the model ask for one shell call, writing `word` into marker.txt.
fn write_marker(word: &str) -> String {
    format!("Write the marker. SP-RUN:echo {word} > marker.txt")
}

/// The person allows the waiting prompt from the phone ([`answer_and_finish`]): the call ran
/// (the marker holds what it wrote).
fn allowed_by_phone(s: &Scene, harness: &str, child: Child, key: &str, attention: &str) -> Run {
    let run = answer_and_finish(
        s,
        harness,
        child,
        key,
        attention,
        json!({"decision": "allow"}),
    );
    assert_eq!(s.marker().as_deref(), Some("allowed-by-phone\n"));
    run
}

/// The person denies the waiting prompt from the phone with a note ([`answer_and_finish`]):
/// the call never ran, and the model saw the note in what it got back for the call (`seen`).
fn denied_by_phone(
    s: &Scene,
    harness: &str,
    (child, key, attention): (Child, &str, &str),
    seen: fn(&Scene) -> String,
) -> Run {
    let note = "Not on main, please (note SP-NOTE-4711).";
    let answer = json!({"decision": "deny", "note": note});
    let run = answer_and_finish(s, harness, child, key, attention, answer);
    assert_eq!(s.marker(), None, "the denied call never ran");
    let seen = seen(s);
    assert!(
        seen.contains(note),
        "the model saw the note; it saw:\n{seen}"
    );
    run
}

/// The person allows the waiting prompt while the CLI keeps running: the answer is delivered
/// and the tool runs (the marker holds its line).
fn allow_then_the_tool_runs(s: &Scene, key: &str, attention: &str) {
    let m = s.enqueue(
        key,
        json!({"kind": "permission.answer", "for": attention, "decision": "allow"}),
    );
    assert_eq!(s.ack(&m, Duration::from_secs(30))["outcome"], "delivered");
    assert!(
        until(Duration::from_secs(30), || s.marker().as_deref()
            == Some("allowed-by-phone\n")),
        "the tool ran: marker {:?}",
        s.marker()
    );
}

/// A remote deny with a note: the CLI started (`start`) on a call that writes the marker, the
/// person denies it with a note ([`denied_by_phone`]). Returns the CLI's run.
fn remote_deny_keeps_the_tool_from_running(
    s: &Scene,
    harness: &str,
    start: fn(&Scene, &str) -> Child,
) -> Run {
    let child = start(s, &write_marker("should-not-run"));
    let (key, attention, _) = wait_permission(s, harness);
    denied_by_phone(s, harness, (child, &key, &attention), tool_result_text)
}

/// [`prompt_queued_during_first_answer`], and the delivered prompt reached the model in its
/// second request and not in its first (`field` of a request's body is its conversation);
/// returns the run and the second request's conversation as text.
fn delivered_prompt_reached_the_model(
    s: &Scene,
    harness: &str,
    spawn: impl FnOnce(&Scene, &str) -> Child,
    field: &str,
) -> (Run, String) {
    let (run, reqs) = prompt_queued_during_first_answer(s, harness, spawn);
    let second = all_text(&reqs[1]["body"][field]);
    assert!(
        second.contains("Please also say the word. SP-ECHO:MARMALADE"),
        "the delivered prompt reached the model:\n{second}"
    );
    assert!(!all_text(&reqs[0]["body"][field]).contains("MARMALADE"));
    (run, second)
}

/// The CLI (`who`) printed the model's answer to the delivered prompt.
#[track_caller]
fn assert_printed_the_answer(run: &Run, who: &str) {
    assert!(
        run.stdout.contains("SP-SAW:MARMALADE"),
        "{who}'s answer: {}",
        run.stdout
    );
}

/// The name a CLI's output files are kept under (`spawn_logged`): its command's name.
fn cli_label(harness: &str) -> &str {
    match harness {
        "claude-code" => "claude",
        h => h,
    }
}

/// Our answer decided: Codex's own automatic reviewer was never asked.
fn assert_no_automatic_review(s: &Scene) {
    assert!(
        s.model_requests().iter().all(|r| !r["answer"][1]
            .as_str()
            .unwrap_or("")
            .starts_with("SP-GUARDIAN")),
        "no automatic review"
    );
}

#[test]
fn claude_code_remote_allow_runs_the_tool() {
    scenario("claude_code_remote_allow_runs_the_tool", &["claude"], |s| {
        claude_setup(s, 60);
        let child = claude(s, &write_marker("allowed-by-phone"));
        let (key, attention, needed) = wait_permission(s, "claude-code");
        assert_eq!(needed["data"]["tool"], "Bash");
        assert!(needed["data"]["message"]
            .as_str()
            .unwrap()
            .contains("echo allowed-by-phone > marker.txt"));
        assert!(s.marker().is_none(), "nothing ran before the answer");
        let run = allowed_by_phone(s, "claude-code", child, &key, &attention);
        // DECISIONS 40 (tier 1): the tool's start and end, with its command as the summary.
        let names_it = |e: &Value| {
            e["data"]["tool"] == "Bash"
                && e["data"]["summary"]
                    .as_str()
                    .is_some_and(|t| t.contains("echo allowed-by-phone > marker.txt"))
        };
        let limit = Duration::from_secs(20);
        let started = s.wait_event("tool.started", names_it, limit);
        let ended = s.wait_event(
            "tool.ended",
            |e| names_it(e) && e["data"]["ok"] == true,
            limit,
        );
        assert!(
            started["session"]["seq"].as_i64() < ended["session"]["seq"].as_i64(),
            "{started} {ended}"
        );
        // Claude Code and the model: no denial, the tool result went back, the turn ended.
        let result = claude_result(&run);
        assert_eq!(result["permission_denials"], json!([]), "{result}");
        assert_eq!(result["result"], "SP-FINAL: tool result seen.");
        let reqs = s.agent_requests();
        assert_eq!(reqs.len(), 2, "one tool call, one final answer");
        let last_user = last_message(&reqs[1], "user").unwrap();
        let tr = last_user["content"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["type"] == "tool_result")
            .expect("a tool_result")
            .clone();
        assert_ne!(tr["is_error"], json!(true), "the tool succeeded: {tr}");
    });
}

#[test]
fn claude_code_remote_deny_keeps_the_tool_from_running() {
    scenario(
        "claude_code_remote_deny_keeps_the_tool_from_running",
        &["claude"],
        |s| {
            claude_setup(s, 60);
            let run = remote_deny_keeps_the_tool_from_running(s, "claude-code", claude);
            let result = claude_result(&run);
            assert_eq!(
                result["permission_denials"].as_array().map(Vec::len),
                Some(1),
                "{result}"
            );
        },
    );
}

/// DECISIONS 39, the Must-show: real `claude -p` with a prompt nobody answers is parked (our
/// PreToolUse answers `defer`) and the process ends, the tool not run; an allow from the
/// receiver an hour later (the machine's clock moved, not slept) makes sp-sync resume the
/// session (`claude -p --resume ID`, no text) through its runner; the re-fired call takes the
/// allow and the tool runs exactly once (the command appends a line to the marker).
#[test]
fn claude_code_no_answer_parks_and_an_allow_an_hour_later_resumes_it_once() {
    scenario(
        "claude_code_no_answer_parks_and_an_allow_an_hour_later_resumes_it_once",
        &["claude"],
        |s| {
            claude_setup(s, 3);
            let started = Instant::now();
            let child = claude(
                s,
                "Write the marker. SP-RUN:echo parked-then-allowed >> marker.txt",
            );
            let (key, attention, _) = wait_permission(s, "claude-code");
            let run = finish_ok(s, child, "claude");
            assert!(
                started.elapsed() >= Duration::from_secs(3),
                "the hook waited its 3 s"
            );
            let result = claude_result(&run);
            assert_eq!(result["stop_reason"], "tool_deferred", "{result}");
            assert_eq!(s.marker(), None, "nothing ran while parked");
            let parked = s.wait_event(
                "attention.needed",
                |e| {
                    e["data"]["attention_id"] == attention.as_str()
                        && e["data"]["parked_until"].is_string()
                },
                Duration::from_secs(30),
            );
            s.say(&format!("parked: {}", parked["data"]));

            // An hour later on the machine's clock; the answer is stamped on that clock too.
            std::fs::write(s.home.join("test-clock"), "3600000\n").unwrap();
            let now = spctl::clock::now_ms() + 3_600_000;
            let id = "01KBPARKED00000000000000E2";
            let m = json!({"id": id, "kind": "permission.answer", "for": attention, "decision": "allow",
                "at": spctl::clock::format_ms(now), "expires_at": spctl::clock::format_ms(now + 120_000)});
            s.say(&format!("enqueue for {key}: {m}"));
            s.receiver.enqueue_raw(&key, m.clone());
            let ack = s.ack(&m, Duration::from_secs(60));
            assert_eq!(ack["outcome"], "delivered", "{ack}");
            assert_eq!(cleared(s, &attention)["data"]["how"], "answered");
            // The resumed run ends (the runner records it done); the tool ran once.
            let db = s.home.join(".local/state/sessionpipe/control.db");
            let runs = || -> Vec<String> {
                let Ok(c) = rusqlite::Connection::open(&db) else {
                    return Vec::new();
                };
                let Ok(mut q) = c.prepare("select state from runs where kind='continue'") else {
                    return Vec::new();
                };
                q.query_map([], |r| r.get(0))
                    .map(|rows| rows.flatten().collect())
                    .unwrap_or_default()
            };
            assert!(
                until(Duration::from_secs(90), || runs()
                    == vec!["done".to_string()]),
                "one resume run, ended: {:?}",
                runs()
            );
            assert_eq!(s.marker().as_deref(), Some("parked-then-allowed\n"));
            let reqs = s.agent_requests();
            assert_eq!(
                reqs.len(),
                2,
                "one tool call, then the answer after its result"
            );
            // One final outcome (a resent ack repeats it; the receiver lists duplicates).
            let mut finals: Vec<String> = s
                .receiver
                .acks()
                .iter()
                .filter(|a| a["id"] == id && a["outcome"] != "taken")
                .map(|a| a["outcome"].as_str().unwrap_or_default().to_string())
                .collect();
            finals.dedup();
            assert_eq!(finals, ["delivered"], "one final ack");
        },
    );
}

/// The prompt-at-Stop case for any CLI: `spawn` starts it on a first prompt whose answer the
/// stand-in holds until `go` exists, so a prompt is queued and stored before the turn ends.
/// Asserts the CLI succeeded, the ack, and that the model got exactly two requests (its first
/// answer, then one for the delivered prompt: no loop); returns the CLI run and the requests.
fn prompt_queued_during_first_answer(
    s: &Scene,
    harness: &str,
    spawn: impl FnOnce(&Scene, &str) -> Child,
) -> (Run, Vec<Value>) {
    let go = s.dir.join("go");
    let child = spawn(s, &format!("Say hello. SP-HOLD:{}", go.display()));
    let started = s.wait_event(
        "session.started",
        |e| e["harness"]["name"] == harness,
        Duration::from_secs(60),
    );
    let key = session_key_of(&started);
    let m = s.enqueue(&key, json!({"kind": "prompt", "text": "Please also say the word. SP-ECHO:MARMALADE", "expires_in_s": 300}));
    let id = m["id"].as_str().unwrap().to_string();
    assert!(
        until(Duration::from_secs(30), || s.stored(&id)),
        "sp-sync stored the prompt"
    );
    std::fs::write(&go, "").unwrap();
    let run = finish_ok(s, child, cli_label(harness));
    let ack = s.ack(&m, Duration::from_secs(30));
    assert_eq!(ack["outcome"], "delivered");
    let h = spctl::harness::Harness::parse(harness).unwrap();
    assert_eq!(ack["detail"], format!("{harness} {} hook", h.stop_event()));
    // DECISIONS 38: delivered in place, its final ack carries the answer of the turn it
    // started, where the harness's Stop reports it.
    assert_eq!(ack["mode"], "turn", "{ack}");
    if h.reports_turn_text() {
        assert_eq!(ack["reply"], "SP-SAW:MARMALADE", "{ack}");
    }
    let reqs = s.agent_requests();
    assert_eq!(
        reqs.len(),
        2,
        "one answer, one answer to the delivered prompt, no loop"
    );
    (run, reqs)
}

#[test]
fn claude_code_prompt_is_delivered_at_stop() {
    scenario(
        "claude_code_prompt_is_delivered_at_stop",
        &["claude"],
        |s| {
            claude_setup(s, 60);
            let (run, reqs) = prompt_queued_during_first_answer(s, "claude-code", claude);
            // The second request ends with the Stop hook's reason.
            let second = all_text(&reqs[1]["body"]["messages"]);
            assert!(
                second.contains("Message from the person, sent through sessionpipe (sink \"phone\"):\n\nPlease also say the word. SP-ECHO:MARMALADE"),
                "the delivered prompt reached the model:\n{second}"
            );
            assert!(
                !all_text(&reqs[0]["body"]["messages"]).contains("MARMALADE"),
                "not before the Stop"
            );
            assert_eq!(claude_result(&run)["result"], "SP-SAW:MARMALADE");
        },
    );
}

#[test]
fn claude_code_interactive_dialog_stays_and_a_remote_allow_wins() {
    scenario(
        "claude_code_interactive_dialog_stays_and_a_remote_allow_wins",
        &["claude"],
        |s| {
            claude_setup(s, 60);
            let tui = claude_tui(s, &write_marker("allowed-by-phone"));
            let (key, attention, _) = wait_permission(s, "claude-code");
            // While our hook waits, Claude Code's own dialog is up: the two race.
            let screen = tui.wait_screen(DIALOG, Duration::from_secs(30));
            assert!(
                screen.contains("echo allowed-by-phone > marker.txt"),
                "{screen}"
            );
            assert_eq!(s.marker(), None);
            allow_then_the_tool_runs(s, &key, &attention);
            let screen = tui.wait_screen("SP-FINAL: tool result seen.", Duration::from_secs(30));
            assert!(!screen.contains(DIALOG), "the dialog went away:\n{screen}");
            assert_eq!(cleared(s, &attention)["data"]["how"], "answered");
            assert_eq!(s.agent_requests().len(), 2);
        },
    );
}

#[test]
fn claude_code_interactive_terminal_answer_first_ends_the_wait() {
    scenario(
        "claude_code_interactive_terminal_answer_first_ends_the_wait",
        &["claude"],
        |s| {
            claude_setup(s, 60);
            let tui = claude_tui(s, &write_marker("allowed-at-the-terminal"));
            let (key, attention, _) = wait_permission(s, "claude-code");
            tui.wait_screen(DIALOG, Duration::from_secs(30));
            let answered = Instant::now();
            // The person picks "1. Yes" in the terminal.
            tui.keys(&["Enter"]);
            assert!(
                until(Duration::from_secs(30), || s.marker().as_deref()
                    == Some("allowed-at-the-terminal\n")),
                "the tool ran: marker {:?}",
                s.marker()
            );
            tui.wait_screen("SP-FINAL: tool result seen.", Duration::from_secs(30));
            // Our hook stopped waiting at once (not after its 60 s) and said so.
            let c = cleared(s, &attention);
            assert_eq!(c["data"]["how"], "answered");
            assert!(
                answered.elapsed() < Duration::from_secs(30),
                "cleared long before the 60 s wait ran out"
            );
            let late = s.enqueue(
                &key,
                json!({"kind": "permission.answer", "for": attention, "decision": "deny"}),
            );
            assert_eq!(s.ack(&late, Duration::from_secs(30))["outcome"], "expired");
            let n = s
                .receiver
                .events()
                .iter()
                .filter(|e| e["type"] == "attention.cleared")
                .count();
            assert_eq!(n, 1, "one attention.cleared");
        },
    );
}

// ------------------------------------------------------------------------------------------
// Steer, interrupt and cancel at the hook seams (DECISIONS 25, 26), Claude Code and Codex

/// A turn of three slow tool calls (the stand-in's SP-STEPS): after each call the stand-in
/// holds its next answer until the test creates `gate/go-k`. Returns the session key and the
/// running CLI once the first call has run, so the test can put something in between.
fn steps_turn(
    s: &Scene,
    harness: &str,
    spawn: impl FnOnce(&Scene, &str) -> Child,
) -> (String, Child) {
    let gate = s.dir.join("gate");
    std::fs::create_dir_all(&gate).unwrap();
    let child = spawn(
        s,
        &format!("Run the steps. SP-STEPS:3 SP-GATE:{}", gate.display()),
    );
    let started = s.wait_event(
        "session.started",
        |e| e["harness"]["name"] == harness,
        Duration::from_secs(60),
    );
    // The stand-in holds its answer after call 1 only once the agent asked again, so every
    // hook of call 1 (its PostToolUse too) has run: the next seam is call 2's.
    let go1 = gate.join("go-1").to_string_lossy().to_string();
    assert!(
        holding(s, &go1),
        "the agent asked the model again after call 1: steps {:?}",
        s.steps()
    );
    assert_eq!(s.steps(), ["step-1"]);
    (session_key_of(&started), child)
}

/// Whether the stand-in holds an answer until `go` exists, within 60 s.
fn holding(s: &Scene, go: &str) -> bool {
    until(Duration::from_secs(60), || {
        s.model_requests()
            .iter()
            .any(|r| r["note"] == "holding" && r["path"] == go)
    })
}

/// Lets the stand-in answer after call `k`.
fn open_gate(s: &Scene, k: u32) {
    std::fs::write(s.dir.join(format!("gate/go-{k}")), "").unwrap();
}

/// Queues `m` and waits until sp-sync has stored it on the machine.
fn queue_stored(s: &Scene, key: &str, m: Value) -> Value {
    let m = s.enqueue(key, m);
    let id = m["id"].as_str().unwrap().to_string();
    assert!(
        until(Duration::from_secs(30), || s.stored(&id)),
        "sp-sync stored {id}"
    );
    m
}

/// Index of the first agent request whose conversation holds `word`.
fn first_request_with(s: &Scene, word: &str) -> Option<usize> {
    s.agent_requests().iter().position(|r| {
        let body = &r["body"];
        [&body["messages"], &body["input"], &body["contents"]]
            .iter()
            .any(|v| all_text(v).contains(word))
    })
}

/// The harness's hook event that takes prompts of `rank` (caps.rs `prompt_seams`: 1 after a
/// tool, 2 before one), as its ack details name it.
fn seam_event(harness: &str, rank: i64) -> &'static str {
    spctl::harness::Harness::parse(harness)
        .unwrap()
        .caps()
        .prompt_seams
        .iter()
        .find(|(_, r)| *r == rank)
        .map(|(e, _)| *e)
        .unwrap_or_else(|| panic!("{harness} has no seam of rank {rank}"))
}

/// Sends a prompt with `mode` once the turn's first call has run, lets the turn finish, and
/// checks it was acked delivered by the hook at `seam`.
fn prompt_through_a_turn(
    s: &Scene,
    harness: &str,
    spawn: impl FnOnce(&Scene, &str) -> Child,
    mode: &str,
    text: &str,
    seam: &str,
) {
    let (key, child) = steps_turn(s, harness, spawn);
    let m = queue_stored(
        s,
        &key,
        json!({"kind": "prompt", "mode": mode, "text": text, "expires_in_s": 300}),
    );
    for k in 1..=3 {
        open_gate(s, k);
    }
    finish_ok(s, child, cli_label(harness));
    let ack = s.ack(&m, Duration::from_secs(30));
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    // Case aside: Copilot CLI spells the same seams camelCase (postToolUse).
    assert!(
        ack["detail"]
            .as_str()
            .unwrap_or("")
            .to_lowercase()
            .contains(&seam.to_lowercase()),
        "the ack names the seam: {ack}"
    );
}

/// Steer: the message reaches the model within the same turn, after the next tool call and
/// before the turn's last one; every step still runs.
fn steer_lands_in_the_same_turn(s: &Scene, harness: &str, spawn: fn(&Scene, &str) -> Child) {
    prompt_through_a_turn(
        s,
        harness,
        spawn,
        "steer",
        "Also name the fruit. SP-STEER:TANGERINE",
        seam_event(harness, 1),
    );
    assert_eq!(s.steps(), ["step-1", "step-2", "step-3"]);
    let reqs = s.agent_requests();
    let at = first_request_with(s, "SP-STEER:TANGERINE").expect("the steer reached the model");
    assert!(
        reqs[at..].iter().any(|r| r["answer"][0] == "tool"),
        "the steer reached the model before the turn's last tool call (request {at} of {})",
        reqs.len()
    );
    assert_eq!(reqs.len(), 4, "one turn: three calls and the final answer");
}

/// Interrupt: the pending tool never runs, the model reads the message next, the turn goes on.
fn interrupt_keeps_the_pending_tool_from_running(
    s: &Scene,
    harness: &str,
    spawn: fn(&Scene, &str) -> Child,
) {
    prompt_through_a_turn(
        s,
        harness,
        spawn,
        "interrupt",
        "Not that one. SP-INTERRUPT:LIMESTONE",
        seam_event(harness, 2),
    );
    assert_eq!(
        s.steps(),
        ["step-1", "step-3"],
        "call 2 was kept from running"
    );
    let at = first_request_with(s, "SP-INTERRUPT:LIMESTONE").expect("the model read the message");
    assert_eq!(at, 2, "the model read it right after the interrupted call");
}

/// Cancel: the agent stops at the next tool boundary, no further tool runs, the process ends.
fn cancel_stops_at_the_next_tool_boundary(
    s: &Scene,
    harness: &str,
    spawn: fn(&Scene, &str) -> Child,
) {
    let (key, child) = steps_turn(s, harness, spawn);
    let m = queue_stored(s, &key, json!({"kind": "cancel"}));
    open_gate(s, 1);
    // Ends without the other gates: a run that went on would wait for go-2 (up to the
    // stand-in's hold) and then run step 3.
    let run = finish_logged(s, child, cli_label(harness), Duration::from_secs(60));
    let ack = s.ack(&m, Duration::from_secs(30));
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    assert_eq!(s.steps(), ["step-1"], "no further tool ran; {}", run.stderr);
    assert!(
        ack["detail"]
            .as_str()
            .unwrap_or("")
            .contains(seam_event(harness, 2)),
        "stopped before call 2: {ack}"
    );
    if matches!(harness, "claude-code" | "gemini-cli" | "droid") {
        assert_eq!(s.agent_requests().len(), 2, "the model was not asked again");
    }
}

/// The shared scenarios a CLI runs as they are, one test a row (`test name: scenario(how the
/// CLI is started)`), after the CLI's setup; `cli` is the program the preflight looks for.
macro_rules! shared_scenarios {
    ($cli:literal, $harness:literal, $setup:expr; $($name:ident: $check:ident($start:ident)),* $(,)?) => {$(
        #[test]
        fn $name() {
            scenario(stringify!($name), &[$cli], |s| {
                ($setup)(&*s);
                $check(s, $harness, $start);
            });
        }
    )*};
}

shared_scenarios!("claude", "claude-code", |s: &Scene| claude_setup(s, 60);
    claude_code_steer_lands_in_the_same_turn: steer_lands_in_the_same_turn(claude_steps),
    claude_code_interrupt_keeps_the_pending_tool_from_running: interrupt_keeps_the_pending_tool_from_running(claude_steps),
    claude_code_cancel_stops_at_the_next_tool_boundary: cancel_stops_at_the_next_tool_boundary(claude_steps),
);

shared_scenarios!("codex", "codex", |s: &Scene| codex_setup(s, 60);
    codex_steer_lands_in_the_same_turn: steer_lands_in_the_same_turn(codex_steps),
    codex_interrupt_keeps_the_pending_tool_from_running: interrupt_keeps_the_pending_tool_from_running(codex_steps),
    codex_cancel_stops_at_the_next_tool_boundary: cancel_stops_at_the_next_tool_boundary(codex_steps),
);

shared_scenarios!("copilot", "copilot-cli", copilot_setup;
    copilot_cli_steer_lands_in_the_same_turn: steer_lands_in_the_same_turn(copilot_steps),
    copilot_cli_interrupt_keeps_the_pending_tool_from_running: interrupt_keeps_the_pending_tool_from_running(copilot_steps),
    copilot_cli_remote_deny_keeps_the_tool_from_running: remote_deny_keeps_the_tool_from_running(copilot),
);

shared_scenarios!("droid", "droid", droid_setup;
    droid_steer_lands_in_the_same_turn: steer_lands_in_the_same_turn(droid_steps),
    droid_interrupt_keeps_the_pending_tool_from_running: interrupt_keeps_the_pending_tool_from_running(droid_steps),
    droid_cancel_stops_at_the_next_tool_boundary: cancel_stops_at_the_next_tool_boundary(droid_steps),
    droid_remote_deny_keeps_the_tool_from_running: remote_deny_keeps_the_tool_from_running(droid),
);

/// Claude Code allowed to run Bash without asking, so only our seams stand in the turn's way.
fn claude_steps(scene: &Scene, prompt: &str) -> Child {
    claude_with(scene, prompt, &["--allowedTools", "Bash"])
}

/// `codex exec` that may write in its folder (the steps file) without asking.
fn codex_steps(scene: &Scene, prompt: &str) -> Child {
    codex_with(scene, prompt, false, &["--sandbox", "workspace-write"])
}

// ------------------------------------------------------------------------------------------
// Codex

/// Makes the scene's work folder a git repository: `codex exec` and `codex exec resume` run
/// only in one when no trust-skipping flag is given.
fn git_init_work(s: &Scene) {
    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&s.work)
        .status()
        .unwrap();
    assert!(git.success());
}

fn codex_home(scene: &Scene) -> PathBuf {
    scene.home.join(".codex")
}

fn codex_setup(scene: &Scene, permission_wait_s: u64) {
    scene.write_config("codex", permission_wait_s);
    let ch = codex_home(scene);
    e2e::write_codex_config(&ch, &scene.model_url);
    let out = scene.install(&[("CODEX_HOME", &ch)]);
    assert!(out.contains("codex"), "{out}");
    let hooks: Value = serde_json::from_str(
        &std::fs::read_to_string(ch.join("hooks.json")).expect("install.sh wrote hooks.json"),
    )
    .unwrap();
    let cmd = hooks["hooks"]["PermissionRequest"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        cmd.starts_with(
            &scene
                .bin
                .join("sp-permission")
                .to_string_lossy()
                .to_string()
        ),
        "{cmd}"
    );
    assert_eq!(
        hooks["hooks"]["PermissionRequest"][0]["hooks"][0]["timeout"],
        json!(permission_wait_s + 10)
    );
}

/// `codex exec`; with `approve` it runs with `--approve-for-me`, the only way it asks for
/// approval (and so fires PermissionRequest) when the model asks to leave the sandbox.
fn codex(scene: &Scene, prompt: &str, approve: bool) -> Child {
    codex_with(scene, prompt, approve, &[])
}

/// `codex exec` asked for a command that needs escalation, writing `word` into marker.txt.
fn codex_escalated(scene: &Scene, word: &str) -> Child {
    let prompt = format!("Write the marker. SP-ESCALATE SP-RUN:echo {word} > marker.txt");
    codex(scene, &prompt, true)
}

fn codex_with(scene: &Scene, prompt: &str, approve: bool, extra: &[&str]) -> Child {
    let mut c = scene.cli("codex");
    c.env("CODEX_HOME", codex_home(scene))
        .env("STANDIN_API_KEY", "e2e-dummy")
        // The runs sp-sync launches between turns (DECISIONS 38) find this CLI through it.
        .env("SP_CODEX", cli_path("codex"));
    c.args([
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-hook-trust",
    ]);
    if approve {
        c.arg("--approve-for-me");
    }
    c.args(extra).arg(prompt);
    scene.say(&format!("codex exec {prompt:?} {extra:?}"));
    spawn_logged(scene, c, "codex")
}

/// The output item the model got back for its tool call.
fn codex_tool_output(scene: &Scene) -> String {
    let reqs = scene.agent_requests();
    let last = reqs.last().expect("agent requests");
    last["body"]["input"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|i| i["type"] == "function_call_output")
        .map(|i| all_text(&i["output"]))
        .unwrap_or_else(|| panic!("no function_call_output in the last request: {last}"))
}

#[test]
fn codex_remote_allow_runs_the_escalated_command() {
    scenario(
        "codex_remote_allow_runs_the_escalated_command",
        &["codex"],
        |s| {
            codex_setup(s, 60);
            let child = codex_escalated(s, "allowed-by-phone");
            let (key, attention, needed) = wait_permission(s, "codex");
            e2e::assert_message_has(&needed, "echo allowed-by-phone > marker.txt");
            allowed_by_phone(s, "codex", child, &key, &attention);
            let out = codex_tool_output(s);
            assert!(
                out.contains("Process exited with code 0"),
                "the command ran: {out}"
            );
            assert_no_automatic_review(s);
            assert_eq!(s.agent_requests().len(), 2);
            // DECISIONS 40 (tier 1): Codex's hooks report the call's start and end too.
            let names_it = |e: &Value| {
                e["session"]["id"] == key.split_once(':').unwrap().1
                    && e["data"]["summary"]
                        .as_str()
                        .is_some_and(|t| t.contains("echo allowed-by-phone > marker.txt"))
            };
            let limit = Duration::from_secs(20);
            s.wait_event("tool.started", names_it, limit);
            s.wait_event("tool.ended", names_it, limit);
        },
    );
}

#[test]
fn codex_remote_deny_keeps_the_command_from_running() {
    scenario(
        "codex_remote_deny_keeps_the_command_from_running",
        &["codex"],
        |s| {
            codex_setup(s, 60);
            let child = codex_escalated(s, "should-not-run");
            let (key, attention, _) = wait_permission(s, "codex");
            denied_by_phone(s, "codex", (child, &key, &attention), codex_tool_output);
            assert_no_automatic_review(s);
        },
    );
}

#[test]
fn codex_at_the_desk_shows_its_own_approval_without_our_delay() {
    scenario(
        "codex_at_the_desk_shows_its_own_approval_without_our_delay",
        &["codex"],
        |s| {
            // DECISIONS 27: the person is at the desk (the default: nobody said away), so our
            // permission hook returns at once and Codex goes on to its own approval, here its
            // automatic reviewer (exec --approve-for-me), which the stand-in answers.
            codex_setup(s, 60);
            s.set_config("/control/away", json!(false));
            let child = codex_escalated(s, "at-the-desk");
            finish_logged(s, child, "codex", Duration::from_secs(60));
            let reqs = s.model_requests();
            let call = reqs
                .iter()
                .find(|r| r["answer"][0] == "tool")
                .expect("the model asked to run the command");
            let review = reqs
                .iter()
                .find(|r| {
                    r["answer"][1]
                        .as_str()
                        .unwrap_or("")
                        .starts_with("SP-GUARDIAN")
                })
                .expect("Codex asked its own reviewer: our hook gave no answer");
            let waited = review["t"].as_f64().unwrap() - call["t"].as_f64().unwrap();
            assert!(
                waited < 5.0,
                "Codex's own approval came {waited:.2} s after the call (our wait is 60 s)"
            );
            assert!(
                s.never_got("attention.needed"),
                "no prompt the phone cannot answer"
            );
            let log = std::fs::read_to_string(s.home.join(".local/state/sessionpipe/sp.log"))
                .unwrap_or_default();
            assert!(
                log.contains("the person is at the desk"),
                "our PermissionRequest hook ran and stood aside:\n{log}"
            );
        },
    );
}

#[test]
fn codex_prompt_is_delivered_at_stop() {
    scenario("codex_prompt_is_delivered_at_stop", &["codex"], |s| {
        codex_setup(s, 60);
        let start = |s: &Scene, prompt: &str| codex(s, prompt, false);
        let (run, second) = delivered_prompt_reached_the_model(s, "codex", start, "input");
        assert!(
            second.contains("<hook_prompt"),
            "as Codex's hook prompt:\n{second}"
        );
        assert_printed_the_answer(&run, "codex");
    });
}

// ------------------------------------------------------------------------------------------
// Gemini CLI (issue 17): 0.61.0 talks to the stand-in's Gemini API through
// GOOGLE_GEMINI_BASE_URL. It has no permission answer channel (its ToolPermission notification
// only announces), so what a real run can prove is that it obeys our AfterAgent answer.

fn gemini_setup(scene: &Scene) {
    scene.write_config("gemini-cli", 60);
    let dir = scene.home.join(".gemini");
    std::fs::create_dir_all(&dir).unwrap();
    let settings = json!({
        "hooksConfig": {"enabled": true},
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false},
        "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
        "security": {"auth": {"selectedType": "gemini-api-key"}}
    });
    std::fs::write(
        dir.join("settings.json"),
        serde_json::to_string_pretty(&settings).unwrap(),
    )
    .unwrap();
    let out = scene.install(&[]);
    assert!(out.contains("gemini-cli"), "{out}");
    let merged: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("settings.json")).expect("install.sh kept settings.json"),
    )
    .unwrap();
    assert_eq!(
        merged["privacy"]["usageStatisticsEnabled"], false,
        "ours merged, theirs kept"
    );
    let after = merged["hooks"]["AfterAgent"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        after.starts_with(&*scene.bin.join("sp-stop").to_string_lossy()),
        "{merged}"
    );
}

/// `gemini -p` with a fixed model (its automatic model choice would ask the stand-in for a
/// routing verdict first).
fn gemini(scene: &Scene, prompt: &str) -> Child {
    gemini_with(scene, prompt, &[])
}

fn gemini_with(scene: &Scene, prompt: &str, extra: &[&str]) -> Child {
    let mut c = scene.cli("gemini");
    c.env("GEMINI_API_KEY", "e2e-dummy")
        .env("GOOGLE_GEMINI_BASE_URL", &scene.model_url)
        .env("GEMINI_CLI_TRUST_WORKSPACE", "true")
        .args(["-m", "gemini-2.5-flash"])
        .args(extra)
        .args(["-p", prompt]);
    scene.say(&format!("gemini {extra:?} -p {prompt:?}"));
    spawn_logged(scene, c, "gemini-cli")
}

/// `gemini -p` that runs its shell tool without asking (in `-p` a call that would ask is
/// refused), so only our seams stand in the turn's way.
fn gemini_steps(scene: &Scene, prompt: &str) -> Child {
    gemini_with(scene, prompt, &["--approval-mode", "yolo"])
}

/// Gemini CLI interactive in tmux (its ToolPermission notification fires only there), under
/// the session name the [`Tui`] helpers use.
fn gemini_tui(scene: &Scene, prompt: &str) -> Tui {
    gemini_tui_with(scene, prompt, &[])
}

fn gemini_tui_with(scene: &Scene, prompt: &str, extra: &[&str]) -> Tui {
    let gemini = cli_path("gemini").to_string_lossy().into_owned();
    let mut argv = vec![gemini.as_str(), "-m", "gemini-2.5-flash"];
    argv.extend(extra);
    argv.extend(["-i", prompt]);
    let env = [
        ("SHELL", "/bin/bash"),
        ("GEMINI_API_KEY", "e2e-dummy"),
        ("GOOGLE_GEMINI_BASE_URL", scene.model_url.as_str()),
        ("GEMINI_CLI_TRUST_WORKSPACE", "true"),
    ];
    let tui = tui_start(scene, "gemini", &env, &argv);
    scene.say(&format!("gemini (interactive, tmux) {prompt:?}"));
    tui
}

/// The row's promise on the real CLI: Gemini's permission prompt is announced (its
/// ToolPermission notification runs our sp-permission), a remote answer is acked
/// `unsupported` and runs nothing, and the person's own answer in the terminal does.
#[test]
fn gemini_cli_permission_is_announced_and_only_the_terminal_answers() {
    scenario(
        "gemini_cli_permission_is_announced_and_only_the_terminal_answers",
        &["gemini"],
        |s| {
            gemini_setup(s);
            let tui = gemini_tui(s, &write_marker("from-the-terminal"));
            let (key, attention, needed) = wait_permission(s, "gemini-cli");
            e2e::assert_message_has(
                &needed,
                "Confirm Shell Command: echo from-the-terminal > marker.txt",
            );
            let m = s.enqueue(
                &key,
                json!({"kind": "permission.answer", "for": attention, "decision": "allow"}),
            );
            let ack = s.ack(&m, Duration::from_secs(30));
            assert_eq!(ack["outcome"], "unsupported");
            assert!(
                ack["detail"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("no permission answer channel"),
                "{ack}"
            );
            tui.wait_screen("Allow once", Duration::from_secs(30));
            assert_eq!(s.marker(), None, "the remote allow ran nothing");
            tui.keys(&["Enter"]);
            // The shell creates marker.txt before it writes the line: wait for the line.
            assert!(
                until(Duration::from_secs(30), || s.marker().as_deref()
                    == Some("from-the-terminal\n")),
                "the terminal's answer ran it: marker {:?}; the screen:\n{}",
                s.marker(),
                tui.screen()
            );
        },
    );
}

#[test]
fn gemini_cli_prompt_is_delivered_at_after_agent() {
    scenario(
        "gemini_cli_prompt_is_delivered_at_after_agent",
        &["gemini"],
        |s| {
            gemini_setup(s);
            let (run, _) = delivered_prompt_reached_the_model(s, "gemini-cli", gemini, "contents");
            assert_printed_the_answer(&run, "gemini");
        },
    );
}

/// 0.61.0 appends our AfterTool `additionalContext` to the tool result it sends the model.
#[test]
fn gemini_cli_steer_lands_in_the_same_turn() {
    scenario(
        "gemini_cli_steer_lands_in_the_same_turn",
        &["gemini"],
        |s| {
            gemini_setup(s);
            steer_lands_in_the_same_turn(s, "gemini-cli", gemini_steps);
            let at = first_request_with(s, "SP-STEER:TANGERINE").unwrap();
            let result = all_text(&s.agent_requests()[at]["body"]["contents"]);
            assert!(
                result.contains("<hook_context>Message from the person"),
                "the steer rode on the tool's result: {result}"
            );
        },
    );
}

/// 0.61.0 does not run a tool our BeforeTool denies and gives the model the reason instead.
#[test]
fn gemini_cli_interrupt_keeps_the_pending_tool_from_running() {
    scenario(
        "gemini_cli_interrupt_keeps_the_pending_tool_from_running",
        &["gemini"],
        |s| {
            gemini_setup(s);
            interrupt_keeps_the_pending_tool_from_running(s, "gemini-cli", gemini_steps);
            let blocked = s.agent_requests()[2]["body"]["contents"].clone();
            assert!(
                all_text(&blocked).contains("Tool execution blocked: Message from the person"),
                "the reason stood in for the tool's result: {blocked}"
            );
        },
    );
}

/// 0.61.0 ends the agent on BeforeTool `continue:false` without running that tool.
#[test]
fn gemini_cli_cancel_stops_at_the_next_tool_boundary() {
    scenario(
        "gemini_cli_cancel_stops_at_the_next_tool_boundary",
        &["gemini"],
        |s| {
            gemini_setup(s);
            cancel_stops_at_the_next_tool_boundary(s, "gemini-cli", gemini_steps);
            let stderr = std::fs::read_to_string(s.dir.join("gemini-cli.stderr")).unwrap();
            assert!(
                stderr.contains(
                    "Agent execution stopped by hook: Stopped by the person through sessionpipe"
                ),
                "gemini said why it stopped: {stderr}"
            );
        },
    );
}

/// The same seams in Gemini's interactive UI, as a person runs it: a steer lands after the
/// next call, then a cancel stops the agent before the call after that, and Gemini stays up,
/// idle, saying why it stopped.
#[test]
fn gemini_cli_interactive_steer_then_cancel_at_its_tool_seams() {
    scenario(
        "gemini_cli_interactive_steer_then_cancel_at_its_tool_seams",
        &["gemini"],
        |s| {
            gemini_setup(s);
            let gate = s.dir.join("gate");
            std::fs::create_dir_all(&gate).unwrap();
            let tui = gemini_tui_with(
                s,
                &format!("Run the steps. SP-STEPS:3 SP-GATE:{}", gate.display()),
                &["--approval-mode", "yolo"],
            );
            let started = s.wait_event(
                "session.started",
                |e| e["harness"]["name"] == "gemini-cli",
                Duration::from_secs(60),
            );
            let key = session_key_of(&started);
            let holding = |k: u32| {
                let go = gate.join(format!("go-{k}")).to_string_lossy().to_string();
                assert!(
                    holding(s, &go),
                    "the agent asked the model again after call {k}; the screen:\n{}",
                    tui.screen()
                );
            };
            holding(1);
            let steer = queue_stored(
                s,
                &key,
                json!({"kind": "prompt", "mode": "steer", "text": "Also name the fruit. SP-STEER:TANGERINE", "expires_in_s": 300}),
            );
            open_gate(s, 1);
            holding(2);
            let ack = s.ack(&steer, Duration::from_secs(30));
            assert_eq!(ack["outcome"], "delivered", "{ack}");
            assert_eq!(
                ack["detail"],
                "gemini-cli AfterTool hook (additionalContext)"
            );
            let cancel = queue_stored(s, &key, json!({"kind": "cancel"}));
            open_gate(s, 2);
            tui.wait_screen("Agent execution stopped", Duration::from_secs(60));
            let ack = s.ack(&cancel, Duration::from_secs(30));
            assert_eq!(ack["outcome"], "delivered", "{ack}");
            assert_eq!(
                ack["detail"],
                "gemini-cli BeforeTool hook (continue:false; the tool did not run)"
            );
            assert_eq!(s.steps(), ["step-1", "step-2"], "call 3 did not run");
            assert_eq!(s.agent_requests().len(), 3, "the model was not asked again");
            // (The stand-in logs a request once it answered it, so only now.)
            assert_eq!(
                first_request_with(s, "SP-STEER:TANGERINE"),
                Some(2),
                "the steer rode on call 2's result"
            );
        },
    );
}

// ------------------------------------------------------------------------------------------
// Copilot CLI (issue 17): 1.0.102 runs offline with its own model provider (BYOK:
// COPILOT_PROVIDER_BASE_URL, the stand-in's Chat Completions) and COPILOT_OFFLINE, without
// GitHub sign-in. Its permissionRequest hook fires before its rules and prompt, so in `-p`
// our answer decides (without the hook, `-p` does not run the command at all: checked by hand
// on 1.0.102).

fn copilot_setup(scene: &Scene) {
    scene.write_config("copilot-cli", 60);
    let hooks = install_for(
        scene,
        ".copilot",
        "copilot-cli",
        ".copilot/hooks/sessionpipe.json",
    );
    let perm = &hooks["hooks"]["permissionRequest"][0];
    assert!(
        perm["bash"]
            .as_str()
            .unwrap_or_default()
            .starts_with(&*scene.bin.join("sp-permission").to_string_lossy()),
        "{hooks}"
    );
    assert_eq!(perm["timeoutSec"], 70);
}

fn copilot(scene: &Scene, prompt: &str) -> Child {
    copilot_with(scene, prompt, &[])
}

fn copilot_with(scene: &Scene, prompt: &str, extra: &[&str]) -> Child {
    let mut c = scene.cli("copilot");
    c.env("COPILOT_OFFLINE", "true")
        .env(
            "COPILOT_PROVIDER_BASE_URL",
            format!("{}/v1", scene.model_url),
        )
        .env("COPILOT_PROVIDER_API_KEY", "e2e-dummy")
        .env("COPILOT_MODEL", "standin")
        .args(["-p", prompt])
        .args(extra);
    scene.say(&format!("copilot -p {prompt:?}"));
    spawn_logged(scene, c, "copilot-cli")
}

#[test]
fn copilot_cli_remote_allow_runs_the_tool() {
    scenario(
        "copilot_cli_remote_allow_runs_the_tool",
        &["copilot"],
        |s| {
            copilot_setup(s);
            let child = copilot(s, &write_marker("allowed-by-phone"));
            let (key, attention, needed) = wait_permission(s, "copilot-cli");
            assert_eq!(needed["data"]["tool"], "bash");
            e2e::assert_message_has(&needed, "echo allowed-by-phone > marker.txt");
            allowed_by_phone(s, "copilot-cli", child, &key, &attention);
            assert_eq!(
                s.agent_requests().len(),
                2,
                "the tool's result went back to the model once"
            );
        },
    );
}

#[test]
fn copilot_cli_prompt_is_delivered_at_agent_stop() {
    scenario(
        "copilot_cli_prompt_is_delivered_at_agent_stop",
        &["copilot"],
        |s| {
            copilot_setup(s);
            let (run, _) =
                delivered_prompt_reached_the_model(s, "copilot-cli", copilot, "messages");
            assert_printed_the_answer(&run, "copilot");
        },
    );
}

/// `copilot -p` at the desk (nobody said away) allowed every tool: our permissionRequest hook
/// returns at once, so only our seams stand in the steps turn's way.
fn copilot_steps(scene: &Scene, prompt: &str) -> Child {
    scene.set_config("/control/away", Value::Null);
    copilot_with(scene, prompt, &["--allow-all-tools"])
}

/// Copilot's stop: its next permissionRequest is denied with `interrupt`, which ends the run
/// before that tool (1.0.102 ignores `continue:false` at its tool hooks).
#[test]
fn copilot_cli_cancel_stops_at_the_next_permission_request() {
    scenario(
        "copilot_cli_cancel_stops_at_the_next_permission_request",
        &["copilot"],
        |s| {
            copilot_setup(s);
            let (key, child) = steps_turn(s, "copilot-cli", copilot_steps);
            let m = queue_stored(s, &key, json!({"kind": "cancel"}));
            open_gate(s, 1);
            // Ends without the other gates: a run that went on would wait for go-2.
            let run = finish_logged(s, child, "copilot-cli", Duration::from_secs(60));
            let ack = s.ack(&m, Duration::from_secs(30));
            assert_eq!(ack["outcome"], "delivered", "{ack}");
            assert_eq!(
                ack["detail"], "copilot-cli permissionRequest hook (deny, interrupt)",
                "{ack}"
            );
            assert_eq!(s.steps(), ["step-1"], "no further tool ran; {}", run.stderr);
            assert_eq!(s.agent_requests().len(), 2, "the model was not asked again");
        },
    );
}

/// DECISIONS 26: a stop while Copilot's permissionRequest waits on the phone answers that
/// wait: the tool is denied and never runs, the run ends, the prompt is cleared answered.
#[test]
fn copilot_cli_cancel_answers_a_waiting_permission_and_stops() {
    scenario(
        "copilot_cli_cancel_answers_a_waiting_permission_and_stops",
        &["copilot"],
        |s| {
            copilot_setup(s);
            cancel_answers_a_waiting_permission(
                s,
                "copilot-cli",
                copilot,
                "copilot-cli permissionRequest hook (deny, interrupt)",
            );
        },
    );
}

/// A cancel sent while `harness`'s permission hook waits on the phone: the answer to that
/// wait stops the agent (`detail` names the seam), the tool never runs, the model is not
/// asked again, and the prompt is cleared `answered`.
fn cancel_answers_a_waiting_permission(
    s: &Scene,
    harness: &str,
    start: fn(&Scene, &str) -> Child,
    detail: &str,
) {
    let child = start(
        s,
        "Write the marker. SP-RUN:echo should-not-run > marker.txt",
    );
    let (key, attention, _) = wait_permission(s, harness);
    let m = s.enqueue(&key, json!({"kind": "cancel"}));
    let run = finish_logged(s, child, harness, Duration::from_secs(60));
    let ack = s.ack(&m, Duration::from_secs(30));
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    assert_eq!(ack["detail"], detail, "{ack}");
    assert_eq!(cleared(s, &attention)["data"]["how"], "answered");
    assert_eq!(s.marker(), None, "the tool never ran; {}", run.stderr);
    assert_eq!(
        s.agent_requests().len(),
        1,
        "the run ended: the model was not asked again"
    );
}

// ------------------------------------------------------------------------------------------
// Droid (Factory's CLI 0.225.2, offline: a custom model at the stand-in, FACTORY_AIRGAP_ENABLED)

fn droid_setup(scene: &Scene) {
    scene.write_config("droid", 60);
    let factory = scene.home.join(".factory");
    std::fs::create_dir_all(&factory).unwrap();
    std::fs::write(
        factory.join("settings.json"),
        json!({"customModels": [{"model": "stand-in", "displayName": "Stand-in",
            "baseUrl": format!("{}/v1", scene.model_url), "apiKey": "e2e-dummy",
            "provider": "generic-chat-completion-api", "maxOutputTokens": 4096}]})
        .to_string(),
    )
    .unwrap();
    let out = scene.install(&[]);
    assert!(out.contains("droid"), "{out}");
    // The events at the top level: Droid ignores a {"hooks": …} wrapper in hooks.json.
    let hooks: Value = serde_json::from_str(
        &std::fs::read_to_string(factory.join("hooks.json")).expect("install.sh wrote hooks.json"),
    )
    .unwrap();
    assert!(hooks.get("hooks").is_none(), "{hooks}");
    assert!(
        hooks["PreToolUse"][0]["hooks"][0]["command"]
            .as_str()
            .unwrap_or_default()
            .starts_with(&*scene.bin.join("sp-permission").to_string_lossy()),
        "{hooks}"
    );
}

fn droid(scene: &Scene, prompt: &str) -> Child {
    let mut c = scene.cli("droid");
    c.env("FACTORY_AIRGAP_ENABLED", "1").args([
        "exec",
        "-m",
        "custom:stand-in",
        "--auto",
        "low",
        prompt,
    ]);
    scene.say(&format!("droid exec {prompt:?}"));
    spawn_logged(scene, c, "droid")
}

/// A call the model rates high risk, which `droid exec --auto low` runs only when a hook
/// allows it: the remote allow is what makes it run.
#[test]
fn droid_remote_allow_runs_a_high_risk_tool() {
    scenario(
        "droid_remote_allow_runs_a_high_risk_tool",
        &["droid"],
        |s| {
            droid_setup(s);
            let child = droid(
                s,
                "Write the marker. SP-RISK:high SP-RUN:echo allowed-by-phone > marker.txt",
            );
            let (key, attention, needed) = wait_permission(s, "droid");
            e2e::assert_message_has(&needed, "echo allowed-by-phone > marker.txt");
            allowed_by_phone(s, "droid", child, &key, &attention);
        },
    );
}

#[test]
fn droid_prompt_is_delivered_at_stop() {
    scenario("droid_prompt_is_delivered_at_stop", &["droid"], |s| {
        droid_setup(s);
        delivered_prompt_reached_the_model(s, "droid", droid, "messages");
    });
}

/// DECISIONS 26: a stop while Droid's PreToolUse waits on the phone answers that wait: the
/// tool is denied and never runs, the run ends, the prompt is cleared answered.
#[test]
fn droid_cancel_answers_a_waiting_tool_and_stops() {
    scenario(
        "droid_cancel_answers_a_waiting_tool_and_stops",
        &["droid"],
        |s| {
            droid_setup(s);
            cancel_answers_a_waiting_permission(
                s,
                "droid",
                droid,
                "droid PreToolUse hook (continue:false, tool denied)",
            );
        },
    );
}

/// `droid exec` at the desk (nobody said away): its PreToolUse, our permission hook, returns
/// at once, so only our seams stand in the steps turn's way (its calls are rated low risk).
fn droid_steps(scene: &Scene, prompt: &str) -> Child {
    scene.set_config("/control/away", Value::Null);
    droid(scene, prompt)
}

// ------------------------------------------------------------------------------------------
// OpenCode

struct OpenCode {
    url: String,
    agent: ureq::Agent,
    /// When `opencode serve` was started.
    spawned: Instant,
}

impl OpenCode {
    fn get(&self, path: &str) -> Result<Value, String> {
        let mut r = self
            .agent
            .get(&format!("{}{path}", self.url))
            .call()
            .map_err(|e| e.to_string())?;
        let text = r.body_mut().read_to_string().map_err(|e| e.to_string())?;
        serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))
    }
    fn post(&self, path: &str, body: Value) -> Result<Value, String> {
        let mut r = self
            .agent
            .post(&format!("{}{path}", self.url))
            .header("content-type", "application/json")
            .send(body.to_string())
            .map_err(|e| e.to_string())?;
        let text = r.body_mut().read_to_string().map_err(|e| e.to_string())?;
        Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// Sends `text` to session `id` (query `q`) as a prompt, not waiting for its turn.
    fn prompt(&self, id: &str, q: &str, text: &str) {
        self.post(
            &format!("/session/{id}/prompt_async{q}"),
            json!({"parts": [{"type": "text", "text": text}]}),
        )
        .expect("prompt_async");
    }

    /// Waits up to 30 s until session `id` is idle; `what` names the turn that should end.
    #[track_caller]
    fn wait_idle(&self, q: &str, id: &str, what: &str) {
        assert!(
            until(Duration::from_secs(30), || opencode_status(self, q, id)
                == "idle"),
            "{what}"
        );
    }

    /// Waits up to 30 s until session `id`'s messages hold `text`; `what` says why it should.
    #[track_caller]
    fn wait_text(&self, q: &str, id: &str, text: &str, what: &str) {
        assert!(
            until(Duration::from_secs(30), || opencode_texts(self, q, id)
                .contains(text)),
            "{what}"
        );
    }
}

/// An OpenCode scenario: `opencode serve` started and one session made (reported by our
/// plugin), then `body` with the server, the session's id and its directory query.
fn opencode_scenario(name: &str, body: impl FnOnce(&mut Scene, &OpenCode, String, String)) {
    scenario(name, &["opencode"], |s| {
        let oc = opencode_start(s);
        let (id, q) = opencode_session(s, &oc);
        body(s, &oc, id, q);
    });
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Registers the plugin with install.sh, starts `opencode serve`, waits until it answers.
fn opencode_start(scene: &mut Scene) -> OpenCode {
    scene.write_config("opencode", 60);
    let cfg_dir = scene.home.join(".config/opencode");
    std::fs::create_dir_all(&cfg_dir).unwrap();
    let config = e2e::opencode_config(&scene.model_url);
    std::fs::write(
        cfg_dir.join("opencode.json"),
        serde_json::to_string_pretty(&config).unwrap(),
    )
    .unwrap();
    // Nothing else is set up in the config folder: install.sh leaves it so that OpenCode
    // does not try to install @opencode-ai/plugin at start (src/setup: opencode_stub).
    let out = scene.install(&[]);
    assert!(out.contains("opencode"), "{out}");
    let plugin = std::fs::read_to_string(cfg_dir.join("plugins/sessionpipe.js"))
        .expect("install.sh wrote the plugin");
    assert!(
        plugin.contains(&*scene.bin.join("sp-event").to_string_lossy()),
        "{plugin}"
    );
    let port = free_port();
    let mut c = scene.cli("opencode");
    for v in e2e::OPENCODE_OFFLINE {
        c.env(v, "1");
    }
    c.args([
        "serve",
        "--hostname",
        "127.0.0.1",
        "--port",
        &port.to_string(),
        "--print-logs",
        "--log-level",
        "INFO",
    ]);
    let spawned = Instant::now();
    let child = spawn_logged(scene, c, "opencode");
    scene.extra.push(child);
    let oc = OpenCode {
        spawned,
        url: format!("http://127.0.0.1:{port}"),
        agent: ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(2)))
            .http_status_as_error(true)
            .build()
            .into(),
    };
    // A request in the first moments after the port opens can hang: probe with a short
    // timeout until the server answers.
    assert!(
        until(Duration::from_secs(60), || oc
            .get("/session/status")
            .is_ok()),
        "opencode serve answered"
    );
    scene.say(&format!("opencode serve ready on {}", oc.url));
    oc
}

fn opencode_session(scene: &Scene, oc: &OpenCode) -> (String, String) {
    let dir = scene.work.to_string_lossy().to_string();
    let q = format!("?directory={}", percent(&dir));
    let session = oc
        .post(&format!("/session{q}"), json!({}))
        .expect("POST /session");
    let id = session["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{session}"))
        .to_string();
    // The plugin reported the session: it is live at the receiver.
    scene.wait_event(
        "session.started",
        |e| e["session"]["id"] == id.as_str(),
        Duration::from_secs(60),
    );
    (id, q)
}

fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The session's status as the server says it: "idle" when it is not in the status map.
fn opencode_status(oc: &OpenCode, q: &str, id: &str) -> String {
    oc.get(&format!("/session/status{q}"))
        .ok()
        .and_then(|v| v[id]["type"].as_str().map(str::to_string))
        .unwrap_or_else(|| "idle".into())
}

fn opencode_texts(oc: &OpenCode, q: &str, id: &str) -> String {
    oc.get(&format!("/session/{id}/message{q}"))
        .map(|v| all_text(&v))
        .unwrap_or_default()
}

/// Issue 17: with our plugin in its config folder, OpenCode 1.18.33 would first try to install
/// `@opencode-ai/plugin` there and hold its first request until npm gave up (about 70 s
/// offline). After install.sh, the first session is created and reported by our plugin within
/// a few seconds of `opencode serve` starting, and OpenCode never tried an install.
#[test]
fn opencode_starts_at_once_offline_with_our_plugin() {
    opencode_scenario(
        "opencode_starts_at_once_offline_with_our_plugin",
        |s, oc, id, _| {
            let took = oc.spawned.elapsed();
            s.say(&format!(
                "session {id} created and reported {took:?} after the start"
            ));
            assert!(
                took < Duration::from_secs(20),
                "the first session took {took:?}: OpenCode waited for an install"
            );
            let cfg = s.home.join(".config/opencode");
            let modules: Vec<_> = std::fs::read_dir(cfg.join("node_modules"))
                .expect("install.sh made node_modules/")
                .collect();
            assert!(
                modules.is_empty(),
                "OpenCode installed nothing: {modules:?}"
            );
            let log = std::fs::read_to_string(s.dir.join("opencode.stderr")).unwrap_or_default()
                + &std::fs::read_to_string(s.dir.join("opencode.stdout")).unwrap_or_default();
            assert!(
                !log.contains("dependency install failed"),
                "OpenCode tried an install:\n{log}"
            );
        },
    );
}

#[test]
fn opencode_prompt_through_its_api_reaches_the_model() {
    opencode_scenario(
        "opencode_prompt_through_its_api_reaches_the_model",
        |s, oc, id, q| {
            let m = s.enqueue(&format!("opencode:{id}"), json!({"kind": "prompt", "text": "Please say the word. SP-ECHO:MARMALADE", "expires_in_s": 300}));
            let ack = s.ack(&m, Duration::from_secs(60));
            assert_eq!(ack["outcome"], "delivered", "{ack}");
            assert!(
                until(Duration::from_secs(60), || opencode_texts(oc, &q, &id)
                    .contains("SP-SAW:MARMALADE")),
                "the model's answer to the delivered prompt is in the session: {}",
                opencode_texts(oc, &q, &id)
            );
            let reqs = s.agent_requests();
            assert!(
                reqs.iter().any(|r| all_text(&r["body"]["messages"])
                    .contains("Please say the word. SP-ECHO:MARMALADE")),
                "the model got the prompt"
            );
        },
    );
}

/// Issue 17: OpenCode's busy and idle reports race (one sp-event a report), so a prompt
/// queued while a turn runs could be left waiting for an idle that was overwritten. Fifty
/// times: a turn is held busy at the model, a prompt is queued and stored, the turn ends,
/// and the prompt is delivered once, after it, and reaches the model.
#[test]
fn opencode_fifty_prompts_queued_while_busy_are_each_delivered_once_idle() {
    scenario(
        "opencode_fifty_prompts_queued_while_busy_are_each_delivered_once_idle",
        &["opencode"],
        |s| {
            let oc = opencode_start(s);
            for k in 0..50 {
                let (id, q) = opencode_session(s, &oc);
                let gate = s.dir.join(format!("go-{k}"));
                oc.prompt(&id, &q, &format!("Say hello. SP-HOLD:{}", gate.display()));
                assert!(
                    until(Duration::from_secs(60), || opencode_status(&oc, &q, &id)
                        == "busy"),
                    "run {k}: the turn is running"
                );
                let word = format!("SP-ECHO:QUEUED{k}");
                let m = s.enqueue(
                    &format!("opencode:{id}"),
                    json!({"kind": "prompt", "text": format!("Please say it. {word}"), "expires_in_s": 300}),
                );
                let mid = m["id"].as_str().unwrap().to_string();
                assert!(
                    until(Duration::from_secs(30), || s.stored(&mid)),
                    "run {k}: sp-sync stored the prompt"
                );
                let asked = |s: &Scene| {
                    s.agent_requests()
                        .iter()
                        .filter(|r| all_text(&r["body"]["messages"]).contains(&word))
                        .count()
                };
                assert_eq!(asked(s), 0, "run {k}: not delivered while the turn runs");
                std::fs::write(&gate, "").unwrap();
                let ack = s.ack(&m, Duration::from_secs(60));
                assert_eq!(ack["outcome"], "delivered", "run {k}: {ack}");
                let saw = format!("SP-SAW:QUEUED{k}");
                assert!(
                    until(Duration::from_secs(60), || opencode_texts(&oc, &q, &id)
                        .contains(&saw)),
                    "run {k}: the delivered prompt reached the model"
                );
                assert_eq!(asked(s), 1, "run {k}: delivered exactly once");
            }
        },
    );
}

#[test]
fn opencode_cancel_stops_a_slow_turn() {
    opencode_scenario("opencode_cancel_stops_a_slow_turn", |s, oc, id, q| {
        oc.prompt(&id, &q, "Take your time. SP-SLOW");
        // The slow answer has started streaming.
        assert!(
            s.slow_answer_streams(Duration::from_secs(60)),
            "the slow turn reached the model"
        );
        let slow = s
            .agent_requests()
            .into_iter()
            .find(|r| r["answer"][2] == json!(true))
            .unwrap()["n"]
            .clone();
        assert_eq!(opencode_status(oc, &q, &id), "busy");
        let started = Instant::now();
        let m = s.enqueue(&format!("opencode:{id}"), json!({"kind": "cancel"}));
        let ack = s.ack(&m, Duration::from_secs(30));
        assert_eq!(ack["outcome"], "delivered", "{ack}");
        assert!(
            until(Duration::from_secs(15), || opencode_status(oc, &q, &id)
                == "idle"),
            "the turn stopped"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "well before the 60 s slow answer ended"
        );
        // The stand-in saw that very stream closed by OpenCode, long before its 60 s end.
        s.assert_stream_cut(&slow, "OpenCode");
        let messages = oc
            .get(&format!("/session/{id}/message{q}"))
            .expect("the session's messages");
        let last = messages
            .as_array()
            .and_then(|m| m.last())
            .cloned()
            .unwrap_or_default();
        assert_eq!(last["info"]["role"], "assistant");
        assert_eq!(
            last["info"]["error"]["name"], "MessageAbortedError",
            "the turn ended aborted: {}",
            last["info"]
        );
    });
}

#[test]
fn opencode_permission_reply_takes_effect() {
    opencode_scenario("opencode_permission_reply_takes_effect", |s, oc, id, q| {
        oc.prompt(
            &id,
            &q,
            "Write the marker. SP-RUN:echo allowed-by-phone > marker.txt",
        );
        let (key, attention, needed) = wait_permission(s, "opencode");
        assert_eq!(key, format!("opencode:{id}"));
        e2e::assert_message_has(&needed, "echo allowed-by-phone > marker.txt");
        assert_eq!(s.marker(), None, "nothing ran before the answer");
        allow_then_the_tool_runs(s, &key, &attention);
        assert_eq!(cleared(s, &attention)["data"]["how"], "answered");
        oc.wait_text(
            &q,
            &id,
            "SP-FINAL: tool result seen.",
            "the model got the tool's result and answered",
        );
        let reqs = s.agent_requests();
        assert!(reqs.last().is_some_and(|r| r["body"]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "tool")));
    });
}

#[test]
fn opencode_permission_reject_keeps_the_tool_from_running() {
    opencode_scenario(
        "opencode_permission_reject_keeps_the_tool_from_running",
        |s, oc, id, q| {
            oc.prompt(
                &id,
                &q,
                "Write the marker. SP-RUN:echo should-not-run > marker.txt",
            );
            let (key, attention, _) = wait_permission(s, "opencode");
            let note = "Not on main, please (note SP-NOTE-4711).";
            let m = s.enqueue(&key, json!({"kind": "permission.answer", "for": attention, "decision": "deny", "note": note}));
            assert_eq!(s.ack(&m, Duration::from_secs(30))["outcome"], "delivered");
            assert_eq!(cleared(s, &attention)["data"]["how"], "answered");
            oc.wait_idle(&q, &id, "the turn ended");
            assert_eq!(s.marker(), None, "the rejected tool never ran");
            // The note reached the model as the rejected call's tool result.
            oc.wait_text(
                &q,
                &id,
                "SP-FINAL: tool result seen.",
                "the model answered after the rejection",
            );
            let reqs = s.agent_requests();
            assert_eq!(
                reqs.len(),
                2,
                "the tool call, then the answer to its rejection"
            );
            let tool = last_message(&reqs[1], "tool").expect("a tool message");
            assert!(
                all_text(&tool["content"]).contains(note),
                "the model saw the note: {tool}"
            );
        },
    );
}

/// Issue 27 / DECISIONS 30 on OpenCode 1.18.33: "allow for this session" is replied `once` and
/// kept as our grant, so the same call in the next turn is answered from it by sp-event (no
/// prompt announced) and runs; deny & stop is the reject, then the session's abort: the tool
/// does not run and the model is not called again.
#[test]
fn opencode_session_grant_and_deny_and_stop() {
    opencode_scenario(
        "opencode_session_grant_and_deny_and_stop",
        |s, oc, id, q| {
            let started = s.wait_event(
                "session.started",
                |e| e["session"]["id"] == id.as_str(),
                Duration::from_secs(30),
            );
            assert_eq!(
                started["data"]["control"]["answer"],
                json!(["scope", "interrupt"]),
                "{started}"
            );
            let run = "Append a line. SP-RUN:echo granted >> granted.txt";
            let lines = || {
                std::fs::read_to_string(s.work.join("granted.txt"))
                    .unwrap_or_default()
                    .lines()
                    .count()
            };
            let asked = || {
                s.receiver
                    .events()
                    .iter()
                    .filter(|e| e["type"] == "attention.needed")
                    .count()
            };
            oc.prompt(&id, &q, run);
            let (key, attention, _) = wait_permission(s, "opencode");
            let m = s.enqueue(
                &key,
                json!({"kind": "permission.answer", "for": attention, "decision": "allow",
                       "scope": "session"}),
            );
            let ack = s.ack(&m, Duration::from_secs(30));
            assert_eq!(ack["outcome"], "delivered", "{ack}");
            assert!(
                ack["detail"].as_str().unwrap().contains("for the session"),
                "{ack}"
            );
            assert!(
                until(Duration::from_secs(30), || lines() == 1),
                "the tool ran once"
            );
            oc.wait_idle(&q, &id, "the first turn ended");
            let before = asked();
            // The same call again: answered from the grant, nobody asked.
            oc.prompt(&id, &q, run);
            assert!(
                until(Duration::from_secs(60), || lines() == 2),
                "the granted call ran again without a prompt: {} line(s)",
                lines()
            );
            oc.wait_idle(&q, &id, "the second turn ended");
            assert_eq!(asked(), before, "the granted call was announced");
            let used: i64 = s
                .db()
                .query_row(
                    "select used from grants where session_key = ?1",
                    [&key],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(used, 1, "the grant answered one prompt");

            // Deny & stop.
            let n = s.agent_requests().len();
            oc.prompt(
                &id,
                &q,
                "Write the marker. SP-RUN:echo should-not-run > marker.txt",
            );
            let needed = s.wait_event(
                "attention.needed",
                |e| {
                    e["data"]["attention_id"] != attention.as_str()
                        && all_text(e).contains("should-not-run")
                },
                Duration::from_secs(60),
            );
            let stop = needed["data"]["attention_id"].as_str().unwrap().to_string();
            let m = s.enqueue(
                &key,
                json!({"kind": "permission.answer", "for": stop, "decision": "deny",
                       "interrupt": true, "note": "Stop; run the tests first."}),
            );
            let ack = s.ack(&m, Duration::from_secs(30));
            assert_ack(&ack, "delivered", "abort: the turn ends");
            oc.wait_idle(&q, &id, "the turn ended");
            let ended = s.wait_event(
                "turn.ended",
                |e| e["session"]["id"] == id.as_str() && e["data"]["reason"] == "interrupt",
                Duration::from_secs(30),
            );
            assert_eq!(ended["data"]["reason"], "interrupt");
            assert_eq!(s.marker(), None, "the denied tool never ran");
            assert_eq!(
                s.agent_requests().len(),
                n + 1,
                "the model was called for the tool call only, not again after the stop"
            );
        },
    );
}

/// DECISIONS 40 with the real Claude Code: a `-p` run's turn reaches a tier-2 sink as one
/// `turn.transcript`, the person's prompt and the model's final text; the tier-1 sink beside
/// it never gets it.
#[test]
fn claude_code_turn_transcript_reaches_a_tier_2_sink() {
    scenario(
        "claude_code_turn_transcript_reaches_a_tier_2_sink",
        &["claude"],
        |s| {
            claude_setup(s, 60);
            let desk = spreceiver::Receiver::start(spreceiver::ReceiverOptions {
                max_tier: 2,
                ..Default::default()
            })
            .expect("receiver");
            let path = s.home.join(".config/sessionpipe/config.json");
            let mut config: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            config["sinks"].as_array_mut().unwrap().push(
            json!({"name": "desk", "url": desk.url(), "tier": 2, "control": false, "token": desk.token()}),
        );
            std::fs::write(&path, config.to_string()).unwrap();
            let run = finish_ok(s, claude(s, "Remember this. SP-ECHO:PAPAYA"), "claude");
            assert_eq!(claude_result(&run)["result"], "SP-SAW:PAPAYA");
            let t = desk
                .wait_event(Duration::from_secs(30), |e| e["type"] == "turn.transcript")
                .unwrap_or_else(|| panic!("no turn.transcript at the desk: {:#?}", desk.events()));
            assert_eq!(t["tier"], 2);
            assert_eq!(t["data"]["user"], "Remember this. SP-ECHO:PAPAYA", "{t}");
            assert_eq!(t["data"]["assistant"], "SP-SAW:PAPAYA", "{t}");
            s.wait_event("turn.ended", |_| true, Duration::from_secs(30));
            assert!(
                s.never_got("turn.transcript"),
                "the tier-1 sink never gets a transcript"
            );
        },
    );
}
