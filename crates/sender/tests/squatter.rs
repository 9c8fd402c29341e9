//! Another local user binds the local receiver's loopback port (issue 12's first attack):
//! nothing we send may reach it. `sp pair` refuses before its request, so no key can be
//! enrolled through it, and sp-sync sends it no poll, ack or event, so it never sees the
//! sink's token. Needs root to run the squatter as another user (`setpriv`, as CI runs):
//! elsewhere it fails when `CI` is set and says `skipped:` otherwise (tests/common/needs.rs).
mod common;
use common::env::*;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const NOBODY: u32 = 65534;

const SQUATTER: &str = r#"
import http.server, sys
port, log = int(sys.argv[1]), sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def handle_one_request(self):
        super().handle_one_request()
    def answer(self):
        with open(log, "a") as f:
            f.write(f"{self.command} {self.path} auth={self.headers.get('authorization')}\n")
        body = b'{"protocol":[1],"max_tier":1,"capabilities":["events","control"],"endpoints":{"events":"/e","control":"/c"},"control":{"wait_max_s":5,"signing":{"rp_id":"localhost"}}}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = answer
    do_POST = answer
    def log_message(self, *a):
        pass
open(log, "a").close()
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"#;

struct Squatter {
    child: Child,
    log: std::path::PathBuf,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Squatter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn squatter() -> Option<Squatter> {
    // SAFETY: geteuid has no preconditions.
    if !common::needs::needs(
        "root (to run the squatter as another user)",
        unsafe { libc::geteuid() } == 0,
    ) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let script = dir.path().join("squatter.py");
    std::fs::write(&script, SQUATTER).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let log = dir.path().join("requests.log");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("setpriv")
        .args([
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
            // Debian's, not a per-user install another user cannot reach.
            "/usr/bin/python3",
        ])
        .arg(&script)
        .arg(port.to_string())
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("setpriv and python3 run the squatter");
    let listening = until(Duration::from_secs(15), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() && log.exists()
    });
    assert!(listening, "the squatter never listened on {port}");
    Some(Squatter {
        child,
        log,
        port,
        _dir: dir,
    })
}

fn requests(s: &Squatter) -> String {
    std::fs::read_to_string(&s.log).unwrap_or_default()
}

#[test]
fn a_squatter_on_the_receivers_port_gets_no_pairing_request_and_no_token() {
    let Some(sq) = squatter() else { return };
    let env = Env::new();
    let url = format!("http://127.0.0.1:{}", sq.port);
    env.write_config(json!({"sinks": [{"name": "local", "url": url, "tier": 1, "control": "signed", "token": "sink-token-of-the-person"}]}));

    let out = env
        .cmd("sp")
        .args(["pair", "local", "--timeout", "10"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "sp pair: {err}");
    assert!(
        err.contains(&format!("belongs to uid {NOBODY}, not to you")),
        "{err}"
    );
    assert!(!stdout(&out).contains("check digits"));
    if env.db_path().exists() {
        assert!(env
            .query::<String>("SELECT id FROM control_keys")
            .is_empty());
    }

    // The seed's unsigned mode against the same squatter: no poll, no event, no token.
    env.write_config(json!({"sinks": [{"name": "local", "url": url, "tier": 1, "control": true, "token": "sink-token-of-the-person"}]}));
    let started = env.hook_json("sp-event", &json!({"session_id": "s-sq", "hook_event_name": "SessionStart", "source": "startup", "cwd": "/tmp"}));
    assert!(started.status.success());
    let once = env.sync_once();
    assert!(once.status.success());
    assert!(
        env.log().contains(&format!("belongs to uid {NOBODY}")),
        "{}",
        env.log()
    );
    assert_eq!(requests(&sq), "", "the squatter was sent something");
}
