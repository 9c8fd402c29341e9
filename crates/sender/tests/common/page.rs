//! The receiver's page as the browser suites drive it: its localhost address, its login, and
//! `sp pair` approved on it; and a command run to its end that must succeed.
#![allow(dead_code)]
use super::browser::Browser;
use super::env::Env;
use super::pairing::SpPair;
use super::receiver::LOGIN;
use serde_json::{json, Value};
use std::process::Command;

/// The page of the receiver at `url` (`http://127.0.0.1:PORT`) as `http://localhost:PORT`:
/// WebAuthn rp ids cannot be IP addresses. Returns (port, page).
pub fn localhost(url: &str) -> (u16, String) {
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    (port, format!("http://localhost:{port}"))
}

/// Opens `url` logged out and logs in with the login token; waits until the page is live.
pub fn login(b: &mut Browser, url: &str) {
    open_and_log_in(b, url);
    b.wait("#conn[data-state=\"live\"]");
}

/// Opens `url` logged out and submits the login token on the form it shows; returns what
/// the first load was answered.
pub fn open_and_log_in(b: &mut Browser, url: &str) -> Value {
    let first = b.call(json!({"op": "goto", "url": url}));
    b.call(json!({"op": "fill", "selector": "#token", "value": LOGIN}));
    b.click("#login-form button[type=submit]");
    first
}

/// Starts `cmd` (an `sp pair …`) and checks the link it printed is `page`'s pairing view.
pub fn start_pair(cmd: Command, page: &str) -> SpPair {
    let started = super::pairing::start(cmd);
    let link = &started.link;
    assert!(link.starts_with(&format!("{page}/pair?code=")), "{link}");
    started
}

/// `sp pair phone` on `env`'s machine, approved on `page` with a passkey the page makes.
pub fn pair(env: &Env, b: &mut Browser, page: &str) {
    let mut cmd = env.cmd("sp");
    cmd.args(["pair", "phone", "--timeout", "120"]);
    let SpPair {
        child: pair,
        link,
        printed,
        ..
    } = start_pair(cmd, page);
    login(b, &link);
    b.wait("#pair-check[data-check]");
    super::pairing::approve(b, pair, &printed);
}

/// Runs `cmd` to its end, asserts it succeeded (printing its stderr when not) and returns
/// what it printed.
#[track_caller]
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    super::env::assert_succeeded(&out);
    super::env::stdout(&out)
}
