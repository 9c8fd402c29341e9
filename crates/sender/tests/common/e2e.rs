//! What the real-agent suites (tests/real_agents.rs, tests/acp_agents.rs) share: the re-run of
//! one scenario inside its own network and pid namespace, and a scene's folders, receiver and
//! model stand-in (e2e/model.py) with the agents' configs pointing at it.
#![allow(dead_code)]
use serde_json::{json, Value};
use spreceiver::{Receiver, ReceiverOptions};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What OpenCode must not do offline: update, fetch models, load its default plugins,
/// download language servers, share.
pub const OPENCODE_OFFLINE: [&str; 5] = [
    "OPENCODE_DISABLE_AUTOUPDATE",
    "OPENCODE_DISABLE_MODELS_FETCH",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS",
    "OPENCODE_DISABLE_LSP_DOWNLOAD",
    "OPENCODE_DISABLE_SHARE",
];

/// The repository's root (this crate is crates/sender).
pub const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
/// The variable that tells a re-run test binary it is inside its scenario's namespace.
pub const INSIDE: &str = "SP_E2E_SCENARIO";

/// Whether this run is scenario `name` inside its namespace.
pub fn inside(name: &str) -> bool {
    std::env::var(INSIDE).as_deref() == Ok(name)
}

/// Re-runs this test binary for `name` alone (with `test_args`) inside a fresh network and
/// pid namespace with only loopback up, killed after `limit`; fails unless it ran one test
/// and that passed.
pub fn run_in_namespace(name: &str, limit: Duration, test_args: &[&str]) {
    let exe = std::env::current_exe().unwrap();
    let started = Instant::now();
    let mut cmd = Command::new("unshare");
    // If this test process dies, unshare dies with it, and --kill-child takes the namespace.
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = cmd
        .args([
            "--net",
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
            "--",
            "sh",
            "-c",
        ])
        // sh stays pid 1 (the test is not its last command), so it reaps orphans.
        .arg(r#"ip link set lo up || exit 97; "$@"; exit $?"#)
        .arg("sh")
        .arg(&exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .args(test_args)
        .env(INSIDE, name)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting unshare");
    let out = drain(child.stdout.take().unwrap());
    let err = drain(child.stderr.take().unwrap());
    let status = super::env::wait_timeout(&mut child, limit);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    print!("{out}");
    eprint!("{err}");
    let secs = started.elapsed().as_secs_f32();
    match status {
        None => panic!("scenario {name} did not finish within {limit:?}"),
        Some(s) if s.code() == Some(97) => {
            panic!("scenario {name}: could not bring up lo in the new namespace")
        }
        Some(s) => assert!(
            s.success(),
            "scenario {name} failed after {secs:.1} s ({s}); its output is above"
        ),
    }
    // libtest inside says "1 passed"; anything else means the filter ran no test.
    assert!(
        out.contains("test result: ok. 1 passed"),
        "scenario {name} ran no test inside its namespace"
    );
    println!("scenario {name}: passed in {secs:.1} s");
}

/// Fails unless this runs as root, which the scenarios' network namespaces need.
pub fn assert_root() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the real-agent scenarios need root for their network namespace (CI runs as root)"
    );
}

pub fn drain<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// A scenario's world: its folder (kept after a failure), HOME and work folder in it, a test
/// receiver, and the model stand-in.
pub struct World {
    pub dir: PathBuf,
    pub home: PathBuf,
    pub work: PathBuf,
    pub receiver: Receiver,
    pub model: Child,
    pub model_url: String,
    pub model_log: PathBuf,
}

impl World {
    pub fn new(name: &str) -> World {
        let dir = tempfile::Builder::new()
            .prefix(&format!("sp-e2e-{name}-"))
            .tempdir()
            .unwrap()
            .keep();
        let home = dir.join("home");
        let work = dir.join("work");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        let model_log = dir.join("model.jsonl");
        let mut model = Command::new("python3")
            .arg(Path::new(ROOT).join("e2e/model.py"))
            .args(["--port", "0", "--slow-s", "60", "--log"])
            .arg(&model_log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("model.stderr")).unwrap())
            .spawn()
            .expect("starting e2e/model.py");
        let mut line = String::new();
        BufReader::new(model.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line
            .strip_prefix("PORT ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("the model stand-in did not start: {line:?}"));
        let receiver = Receiver::start(ReceiverOptions::default()).expect("receiver");
        println!("[{name}] folder {}", dir.display());
        World {
            dir,
            home,
            work,
            receiver,
            model,
            model_url: format!("http://127.0.0.1:{port}"),
            model_log,
        }
    }
}

/// Fails unless attention.needed event `needed` shows `text` in its message.
pub fn assert_message_has(needed: &Value, text: &str) {
    let message = needed["data"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(text), "{needed}");
}

/// Every request the model stand-in logged in `log`, in order.
pub fn model_requests(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Codex's config.toml in `codex_home`: the stand-in at `model_url` over the Responses API,
/// asking before leaving the read-only sandbox.
pub fn write_codex_config(codex_home: &Path, model_url: &str) {
    std::fs::create_dir_all(codex_home).unwrap();
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            r#"model = "gpt-standin"
model_provider = "standin"
approval_policy = "on-request"
sandbox_mode = "read-only"
check_for_update_on_startup = false

[model_providers.standin]
name = "sessionpipe model stand-in"
base_url = "{model_url}/v1"
wire_api = "responses"
env_key = "STANDIN_API_KEY"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[feedback]
enabled = false
"#
        ),
    )
    .unwrap();
}

/// OpenCode's opencode.json: the stand-in at `model_url` as its model, bash and edit asking.
pub fn opencode_config(model_url: &str) -> Value {
    json!({
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": false,
        "share": "disabled",
        "model": "standin/standin",
        "small_model": "standin/standin",
        "provider": {"standin": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "sessionpipe model stand-in",
            "options": {"baseURL": format!("{model_url}/v1"), "apiKey": "e2e-dummy"},
            "models": {"standin": {"name": "Stand-in", "tool_call": true}}
        }},
        // `ask` must be set at the top and for the build agent, or bash just runs.
        "permission": {"bash": "ask", "edit": "ask"},
        "agent": {"build": {"permission": {"bash": "ask", "edit": "ask"}}}
    })
}
