//! Issue 13, "reach it from your phone": the real `sp-receiver` behind a real Caddy that
//! terminates TLS, as docs/deployment.md's "Reach it from your phone" (which the README points
//! to) tells people to run it.
//!
//! Caddy (Debian's `caddy`; `scripts/test-deps.sh` installs it) runs that section's own
//! Caddyfile, its site name swapped for `https://localhost:PORT`
//! with `tls internal` and `bind 127.0.0.1` (loopback only, its own CA, no admin endpoint,
//! nothing installed into the system's trust store, its files in a temp dir). Headless
//! Chromium opens the `sp-receiver --login-url` link over HTTPS through Caddy, logs in, and
//! allows a permission a real `sp-permission` hook is waiting on; the hook prints the allow
//! and the receiver records the ack. The machine's sp-sync talks to the receiver directly on loopback, as a
//! sender on the same host would.
//!
//! Without `caddy` on PATH it fails when `CI` is set and otherwise says it skipped
//! (tests/common/needs.rs); without the browser it fails, as tests/receiver_page.rs does.
mod common;

use common::browser::{missing_browser_deps, Browser};
use common::caddy::{free_port, needs_caddy, CaddyProcess};
use common::env::*;
use common::receiver::{Machine, SpReceiver, LOGIN};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

const DEPLOYMENT: &str = include_str!("../../../docs/deployment.md");
const ALLOW: &str = r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}"#;
/// What the guide's Caddyfile names; the test swaps in its own.
const PUBLIC_SITE: &str = "receiver.example.com {";
const PUBLIC_UPSTREAM: &str = "127.0.0.1:8787";

/// The Caddyfile in the "Reach it from your phone" section of `doc`.
fn caddyfile_in(doc: &str, name: &str) -> String {
    let section = doc
        .split("## Reach it from your phone")
        .nth(1)
        .unwrap_or_else(|| panic!("{name} has a \"Reach it from your phone\" section"));
    let block = section
        .split("```caddyfile\n")
        .nth(1)
        .unwrap_or_else(|| panic!("{name}'s section has a ```caddyfile block"));
    // In docs/deployment.md the block sits in a list item: drop the item's indent.
    let lines: Vec<&str> = block
        .split("```")
        .next()
        .unwrap()
        .lines()
        .map(|l| l.strip_prefix("   ").unwrap_or(l))
        .collect();
    format!("{}\n", lines.join("\n").trim_end())
}

/// The Caddyfile people are told to run: docs/deployment.md's (the README points there).
fn guide_caddyfile() -> String {
    caddyfile_in(DEPLOYMENT, "docs/deployment.md")
}

/// `caddy run` as a child, serving `https://localhost:PORT` on 127.0.0.1 in front of
/// `upstream`.
struct Caddy {
    process: CaddyProcess,
    /// `https://localhost:PORT`.
    url: String,
    /// The root of Caddy's own CA (`tls internal`), which signs the site's certificate.
    root_ca: PathBuf,
}

impl Caddy {
    fn start(dir: &Path, port: u16, upstream: &str) -> Caddy {
        let guide = guide_caddyfile();
        assert!(
            guide.contains(PUBLIC_SITE) && guide.contains(PUBLIC_UPSTREAM),
            "the guide's Caddyfile names {PUBLIC_SITE:?} and {PUBLIC_UPSTREAM}:\n{guide}"
        );
        let url = format!("https://localhost:{port}");
        let site = guide
            .replace(
                PUBLIC_SITE,
                &format!("{url} {{\n\tbind 127.0.0.1\n\ttls internal"),
            )
            .replace(PUBLIC_UPSTREAM, upstream);
        // admin off: no admin endpoint; skip_install_trust: never touch the system's trust
        // store; an unused http_port, so nothing tries port 80.
        let caddyfile = format!(
            "{{\n\tadmin off\n\tskip_install_trust\n\tauto_https disable_redirects\n\thttp_port {}\n}}\n\n{site}",
            free_port()
        );
        let mut caddy = Caddy {
            process: CaddyProcess::start(dir, &caddyfile),
            url,
            root_ca: dir.join("data/caddy/pki/authorities/local/root.crt"),
        };
        // Up when its CA exists and the well-known answers through it over verified TLS.
        let well_known = format!("{}/.well-known/sessionpipe", caddy.url);
        let root_ca = caddy.root_ca.clone();
        caddy.process.wait_up(|| {
            root_ca.exists()
                && Caddy::agent_trusting(&root_ca)
                    .get(&well_known)
                    .call()
                    .is_ok_and(|r| r.status() == 200)
        });
        caddy
    }

    /// A client that trusts Caddy's CA and nothing else.
    fn agent(&self) -> ureq::Agent {
        Caddy::agent_trusting(&self.root_ca)
    }

    fn agent_trusting(root_ca: &Path) -> ureq::Agent {
        let pem = std::fs::read(root_ca).unwrap();
        let ca = ureq::tls::Certificate::from_pem(&pem).unwrap();
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::new_with_certs(&[ca]))
            .build();
        ureq::Agent::config_builder()
            .tls_config(tls)
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .into()
    }

    fn get_json(&self, path: &str, bearer: &str) -> Value {
        let mut r = self
            .agent()
            .get(format!("{}{path}", self.url))
            .header("authorization", format!("Bearer {bearer}"))
            .call()
            .unwrap_or_else(|e| panic!("GET {path} through caddy: {e}\n{}", self.log()));
        assert_eq!(r.status(), 200, "GET {path} through caddy");
        serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap()
    }

    fn log(&self) -> String {
        self.process.log()
    }
}

/// The guide's Caddyfile has the names the test swaps (checked without caddy, on every
/// machine).
#[test]
fn the_guides_caddyfile_names_what_the_test_swaps() {
    let file = guide_caddyfile();
    assert!(
        file.contains(PUBLIC_SITE) && file.contains(&format!("reverse_proxy {PUBLIC_UPSTREAM}")),
        "{file}"
    );
}

#[test]
fn caddy_terminates_tls_and_a_phone_answers_a_permission_through_it() {
    if !needs_caddy() {
        return;
    }
    if let Some(why) = missing_browser_deps() {
        panic!("the browser test cannot run: {why}");
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let public = format!("https://localhost:{port}");
    let receiver = SpReceiver::start(
        &dir.path().join("receiver"),
        &["--public-url", &public, "--trust-proxy"],
    );
    let caddy = Caddy::start(&dir.path().join("caddy"), port, receiver.addr());
    assert_eq!(caddy.url, public);

    // The link the person opens on the phone, as `sp-receiver --login-url` prints it.
    let out = SpReceiver::command(&dir.path().join("receiver"))
        .args(["--login-url", "--public-url", &public])
        .output()
        .unwrap();
    assert_succeeded(&out);
    let link = stdout(&out).trim().to_owned();
    assert!(link.starts_with(&format!("{public}/#login=")), "{link}");

    let machine = Machine::syncing_to(dir.path(), &receiver);
    let mut ask = payload(CC_PERMISSION);
    ask["cwd"] = json!(format!("{}/src/api", machine.home.display()));
    let hook = machine.spawn_hook("sp-permission", &ask);

    // Caddy's CA is not the browser's: it is told to accept it (the client above verifies
    // the chain against that CA for real).
    let mut b = Browser::launch_with(json!({"ignore_https_errors": true}));
    b.call(json!({"op": "goto", "url": link}));
    b.wait("#conn[data-state=\"live\"]");
    let url = b.call(json!({"op": "url"}))["url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(url, format!("{public}/"), "the token left the address bar");
    // Caddy said X-Forwarded-Proto: https (trusted with --trust-proxy), so the login cookie
    // is Secure and __Host- scoped.
    let cookies = b.call(json!({"op": "cookies"}))["cookies"].clone();
    let c = &cookies.as_array().unwrap()[0];
    assert_eq!(c["domain"], "localhost");
    assert_eq!(c["secure"], true, "{c}");
    assert_eq!(c["httpOnly"], true);

    let attention = format!("[data-attention=\"{CC_PERMISSION_ID}\"]");
    b.wait(&attention);
    assert!(b.text(&attention).contains("echo hi > out.txt"));
    b.click(&format!("{attention} button.allow"));
    let out = finish(hook, Duration::from_secs(30));
    assert!(out.status.success());
    assert_eq!(stdout(&out), format!("{ALLOW}\n"), "log: {}", machine.log());
    let card = format!("article[data-session=\"claude-code:{CC_SESSION}\"]");
    let answer = format!("{card} li.msg[data-kind=\"permission.answer\"]");
    let id = b.message_id(&answer, "delivered");

    // The receiver recorded the machine's ack: in its state, read through Caddy, and in
    // its database file.
    let state = caddy.get_json("/page/api/state", LOGIN);
    let shown: Vec<&Value> = state["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["messages"].as_array().unwrap())
        .filter(|m| m["id"] == id.as_str())
        .collect();
    assert_eq!(shown.len(), 1, "{state}");
    assert_eq!(shown[0]["kind"], "permission.answer");
    assert_eq!(shown[0]["status"], "delivered", "{state}");
    let db = rusqlite::Connection::open(receiver.dir.join("receiver.db")).unwrap();
    let _ = db.busy_timeout(Duration::from_secs(5));
    let outcome: String = db
        .query_row("select outcome from acks where id = ?1", [&id], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(outcome, "delivered");
}
