//! The browser the page tests drive: Debian's chromium through playwright-core, by way of
//! `crates/sender/tests/browser/driver.mjs` (one JSON command a line on stdin, one answer a line on stdout).
use crate::wait::wait_timeout;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// The driver and its playwright-core (`npm ci` there), beside the sender's tests.
pub const BROWSER_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sender/tests/browser");

pub fn missing_browser_deps() -> Option<String> {
    let how = "scripts/test.sh installs them (apt-get install chromium as root, npm ci in crates/sender/tests/browser), or run scripts/test-deps.sh";
    if !Path::new("/usr/bin/chromium").exists() {
        return Some(format!("/usr/bin/chromium is missing; {how}"));
    }
    match Command::new("node")
        .arg("-p")
        .arg("process.versions.node.split('.')[0]")
        .output()
    {
        Ok(o) if o.status.success() => {
            let major: u32 = String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse()
                .unwrap_or(0);
            if major < 20 {
                return Some(format!(
                    "Node.js {major} is too old (20 or later needed); {how}"
                ));
            }
        }
        _ => return Some(format!("node is not on PATH; {how}")),
    }
    if !Path::new(BROWSER_DIR)
        .join("node_modules/playwright-core/package.json")
        .exists()
    {
        return Some(format!(
            "crates/sender/tests/browser/node_modules/playwright-core is missing; {how}"
        ));
    }
    None
}

/// `target/tmp/` (what cargo names `CARGO_TARGET_TMPDIR` for a test): the running test
/// binary is `target/<profile>/deps/<test>-<hash>`.
fn target_tmp() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let target = exe
        .ancestors()
        .nth(3)
        .expect("a test binary under target/<profile>/deps");
    let dir = target.join("tmp");
    std::fs::create_dir_all(&dir).expect("target/tmp");
    dir
}

/// Takes the screenshot that illustrates the docs as `docs/<name>` and returns its PNG bytes.
/// It goes to the test's own temp folder under target/, so a test run changes no tracked
/// file (checked here); with `SP_UPDATE_DOCS_IMAGES=1`, over the docs image itself (the one
/// way to refresh it).
pub fn docs_screenshot(b: &mut Browser, name: &str) -> Vec<u8> {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs")
        .join(name);
    let update = std::env::var("SP_UPDATE_DOCS_IMAGES").is_ok_and(|v| v == "1");
    let shot = if update {
        docs.clone()
    } else {
        target_tmp().join(name)
    };
    let before = std::fs::read(&docs).ok();
    std::fs::create_dir_all(shot.parent().unwrap()).unwrap();
    b.call(json!({"op": "screenshot", "path": shot}));
    if !update {
        let after = std::fs::read(&docs).ok();
        assert!(after == before, "the test rewrote {}", docs.display());
    }
    std::fs::read(&shot).unwrap()
}

/// The driver process (`tests/browser/driver.mjs`).
pub struct Browser {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Browser {
    pub fn launch() -> Browser {
        Browser::launch_with(json!({}))
    }

    /// [`Browser::launch`] with more launch options (`{"ignore_https_errors": true}`).
    pub fn launch_with(options: Value) -> Browser {
        if let Some(why) = missing_browser_deps() {
            panic!("the browser test cannot run: {why}");
        }
        let mut child = Command::new("node")
            .arg(Path::new(BROWSER_DIR).join("driver.mjs"))
            .current_dir(BROWSER_DIR)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting node (see scripts/test-deps.sh)");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut b = Browser {
            child,
            stdin,
            stdout,
        };
        let mut launch = json!({"op": "launch", "width": 390, "height": 844, "scale": 2});
        if let (Some(l), Some(o)) = (launch.as_object_mut(), options.as_object()) {
            l.extend(o.clone());
        }
        let v = b.call(launch);
        eprintln!("chromium {}", v["version"]);
        b
    }

    pub fn try_call(&mut self, cmd: Value) -> Result<Value, Value> {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{cmd}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let v: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("driver said {line:?}: {e}"));
        if v["ok"] == true {
            Ok(v)
        } else {
            Err(v)
        }
    }

    pub fn call(&mut self, cmd: Value) -> Value {
        let shown = cmd.to_string();
        self.try_call(cmd).unwrap_or_else(|e| {
            panic!(
                "browser: {shown} failed: {}\n--- page text ---\n{}",
                e["error"],
                e["page"].as_str().unwrap_or("")
            )
        })
    }

    pub fn wait(&mut self, selector: &str) {
        self.call(json!({"op": "wait", "selector": selector, "timeout": 30000}));
    }
    pub fn gone(&mut self, selector: &str) {
        self.call(
            json!({"op": "wait", "selector": selector, "state": "detached", "timeout": 30000}),
        );
    }
    pub fn text(&mut self, selector: &str) -> String {
        self.call(json!({"op": "text", "selector": selector}))["text"]
            .as_str()
            .unwrap()
            .to_owned()
    }
    pub fn click(&mut self, selector: &str) {
        self.call(json!({"op": "click", "selector": selector}));
    }
    pub fn attr(&mut self, selector: &str, name: &str) -> String {
        self.call(json!({"op": "attr", "selector": selector, "name": name}))["value"]
            .as_str()
            .unwrap()
            .to_owned()
    }
    /// Types `text` into the session card's message box and presses its `button` (`queue`,
    /// `steer`, `interrupt`).
    pub fn send_text(&mut self, card: &str, text: &str, button: &str) {
        let field = format!("{card} textarea.prompt-text");
        self.call(json!({"op": "fill", "selector": field, "value": text}));
        self.click(&format!("{card} button.{button}"));
    }
    /// Waits until the message shown at `selector` has `status`; its message id.
    pub fn message_id(&mut self, selector: &str, status: &str) -> String {
        self.wait(&format!("{selector}[data-status=\"{status}\"]"));
        self.attr(selector, "data-message")
    }
    /// The id of a prompt once the machine has it: polled (`sent`), or already acked
    /// `taken` (DECISIONS 38), which may come before the page shows `sent`.
    pub fn prompt_id_taken(&mut self, selector: &str) -> String {
        self.wait(&format!(
            "{selector}:is([data-status=\"sent\"], [data-status=\"taken\"])"
        ));
        self.attr(selector, "data-message")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if wait_timeout(&mut self.child, Duration::from_secs(15)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
