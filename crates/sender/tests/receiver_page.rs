//! Issue 5's must-show list, against the real `sp-receiver` binary over HTTP:
//!
//! 1. a browser test in headless Chromium (Debian's `/usr/bin/chromium`, driven by
//!    playwright-core through `tests/browser/driver.mjs`): a Claude Code PermissionRequest hook
//!    waits, the prompt appears on the page, Allow makes the hook print allow, the page shows
//!    `delivered` and the prompt is gone; a prompt queued on the page is delivered at Stop; the
//!    Stop button on a Claude Code session shows `unsupported`;
//! 2. that test takes a phone-width screenshot with an open prompt (under target/; with
//!    `SP_UPDATE_DOCS_IMAGES=1` it refreshes `docs/receiver-phone.png`);
//! 3. the page and its actions answer 401 without the login token, and with the sender's
//!    bearer token alone (plus the cookie and CSRF rules);
//! 4. the seed-era delivery fixtures pass against the binary.
//!
//! Plus: the command line, and state kept across a restart.
//!
//! The browser test needs chromium, Node.js and playwright-core: `scripts/test-deps.sh`
//! installs them. Without them it fails (it never passes silently).
mod common;

use common::browser::{missing_browser_deps, Browser};
use common::env::*;
use common::fixtures::cc_attention_id;
use common::http::{get, post, Resp};
use common::receiver::{write_secret, Machine, SpReceiver, LOGIN, TOKEN};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const ALLOW: &str = r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}"#;

// ---------------------------------------------------------------------------------------
// HTTP helpers
// ---------------------------------------------------------------------------------------

fn post_json(url: &str, headers: &[(&str, &str)], body: &Value) -> Resp {
    post(url, headers, "application/json", &body.to_string())
}

/// The sender's poll for `session`'s messages, not waiting, with this `authorization`.
fn poll_now(r: &SpReceiver, session: &str, authorization: &str) -> Resp {
    let url = format!(
        "{}/api/sessionpipe/v1/control?session={session}&wait=0",
        r.url
    );
    get(&url, &[("authorization", authorization)])
}

fn bearer(t: &str) -> String {
    format!("Bearer {t}")
}

fn now_ms() -> String {
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    time::OffsetDateTime::now_utc().format(&fmt).unwrap()
}

// ---------------------------------------------------------------------------------------
// 4. The delivery fixtures against the binary
// ---------------------------------------------------------------------------------------

/// Runs one fixture. The fixtures' `enqueue` step goes through the page's enqueue action,
/// authenticated with the login token, as a script would; the rest is the sender's side.
/// What hook `name` printed for `input`, as JSON.
fn hook_answer(machine: &Machine, name: &str, input: &Value) -> Value {
    let out = machine.hook(name, input);
    serde_json::from_str(stdout(&out).trim()).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)))
}

/// A fresh sp-receiver with its files in `dir`, after it passed the fixtures at `paths`.
fn run_fixtures(dir: &Path, paths: impl IntoIterator<Item = PathBuf>) -> SpReceiver {
    let r = SpReceiver::start(dir, &[]);
    for p in paths {
        run_fixture(&r, &p);
    }
    r
}

fn run_fixture(r: &SpReceiver, path: &Path) {
    let file = path.display().to_string();
    let raw = std::fs::read_to_string(path).unwrap();
    let run = format!(
        "{}-{}",
        std::process::id(),
        ulid::Ulid::new().to_string().to_lowercase()
    );
    let raw = raw.replace("{run12}", &run[..12]).replace("{run}", &run);
    let fx: Value = serde_json::from_str(&raw).unwrap();
    let name = fx["name"].as_str().unwrap_or(&file).to_owned();
    let wk = get(&format!("{}/.well-known/sessionpipe", r.url), &[]);
    assert_eq!(wk.status, 200, "{name}: well-known");
    let wk = wk.json();
    let cap = fx["capability"].as_str().unwrap();
    assert!(common::fixtures::offers(&wk, cap), "{name}: lacks {cap}");
    let control = format!("{}{}", r.url, wk["endpoints"]["control"].as_str().unwrap());
    let auth = bearer(TOKEN);
    let login = bearer(LOGIN);
    let mut last_ids: Vec<String> = Vec::new();
    for (i, step) in fx["steps"].as_array().unwrap().iter().enumerate() {
        let obj = step.as_object().unwrap();
        let verb = obj.keys().find(|k| *k != "expect").unwrap().as_str();
        let arg = &obj[verb];
        let resp = match verb {
            "enqueue" => {
                let body = json!({"session": arg["session"], "message": arg["message"]});
                let resp = post_json(
                    &format!("{}/page/api/enqueue", r.url),
                    &[("authorization", &login)],
                    &body,
                );
                assert_eq!(resp.status, 200, "{name} step {i}: enqueue: {}", resp.text);
                Some(resp)
            }
            "poll" => {
                let mut url = format!("{control}?session={}", arg["session"].as_str().unwrap());
                if let Some(w) = arg.get("wait") {
                    url.push_str(&format!("&wait={w}"));
                }
                let resp = get(&url, &[("authorization", &auth)]);
                if resp.status == 200 {
                    last_ids = resp.json()["messages"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|m| m["id"].as_str().unwrap().to_owned())
                        .collect();
                }
                Some(resp)
            }
            "ack" => {
                assert!(
                    !last_ids.is_empty(),
                    "{name} step {i}: ack before any message"
                );
                let acks: Vec<Value> = last_ids
                    .iter()
                    .map(|id| {
                        let mut e = json!({"id": id, "outcome": arg["outcome"], "at": now_ms()});
                        if let Some(d) = arg.get("detail") {
                            e["detail"] = d.clone();
                        }
                        e
                    })
                    .collect();
                Some(post_json(
                    &format!("{control}/ack"),
                    &[("authorization", &auth)],
                    &json!({ "acks": acks }),
                ))
            }
            "wait_s" => {
                std::thread::sleep(Duration::from_secs_f64(arg.as_f64().unwrap()));
                None
            }
            other => panic!("{name} step {i}: unsupported verb {other}"),
        };
        if let Some(expect) = obj.get("expect") {
            let resp = resp.unwrap();
            let step = format!("{name} step {i} ({verb})");
            common::fixtures::check_expect(&step, expect, resp.status, &resp.text);
        }
    }
}

/// The reference's seed-era delivery fixtures against the binary, as a cross-check.
#[test]
fn peer_delivery_fixtures_pass_against_sp_receiver() {
    let Some(peer) = common::fixtures::peer_or_skip("the delivery fixtures 09-11") else {
        return;
    };
    let files = [
        "09-control.9138259c54ffd58dec54344b02c62ffb8494ad8e.json",
        "10-control-expired.e918475f4a7284f20cc7b4877aa20e59ce10a343.json",
        "11-control-double-ack.e918475f4a7284f20cc7b4877aa20e59ce10a343.json",
    ];
    let dir = tempfile::tempdir().unwrap();
    run_fixtures(dir.path(), files.map(|f| peer.join("delivery").join(f)));
}

#[test]
fn delivery_fixtures_pass_against_sp_receiver() {
    let files = [
        "control-prompt.json",
        "control-expired.json",
        "control-double-ack.json",
        "control-taken.json",
    ];
    let dir = tempfile::tempdir().unwrap();
    let r = run_fixtures(
        dir.path(),
        files.map(|f| common::fixtures::own(&format!("delivery/{f}"))),
    );
    // The binary has no test door.
    let door = post_json(
        &format!("{}/test/enqueue", r.url),
        &[],
        &json!({"session": "codex:x", "message": {"kind": "cancel"}}),
    );
    assert_eq!(door.status, 404);
    assert_eq!(get(&format!("{}/test/events", r.url), &[]).status, 404);
}

// ---------------------------------------------------------------------------------------
// 3. Login token, cookie and CSRF
// ---------------------------------------------------------------------------------------

/// Logs in with the form; returns the `Cookie` header value and the CSRF value.
fn login(r: &SpReceiver) -> (String, String) {
    let resp = post(
        &format!("{}/login", r.url),
        &[],
        "application/x-www-form-urlencoded",
        &format!("token={LOGIN}"),
    );
    assert_eq!(resp.status, 303, "{}", resp.text);
    assert_eq!(resp.header("location"), Some("/"));
    let set = resp.header("set-cookie").expect("a cookie").to_owned();
    let attrs: Vec<&str> = set.split(';').map(str::trim).collect();
    assert!(attrs.contains(&"HttpOnly"), "{set}");
    assert!(attrs.contains(&"SameSite=Strict"), "{set}");
    assert!(attrs.contains(&"Path=/"), "{set}");
    let cookie = attrs[0].to_owned();
    assert!(!cookie.contains(LOGIN), "the cookie is not the token");
    let state = get(&format!("{}/page/api/state", r.url), &[("cookie", &cookie)]);
    assert_eq!(state.status, 200);
    let csrf = state.json()["csrf"].as_str().unwrap().to_owned();
    (cookie, csrf)
}

#[test]
fn page_and_actions_need_the_login_token() {
    let dir = tempfile::tempdir().unwrap();
    let r = SpReceiver::start(dir.path(), &[]);
    let enqueue_url = format!("{}/page/api/enqueue", r.url);
    let body = json!({"session": "claude-code:s1", "message": {"kind": "prompt", "text": "hi"}});
    let sender = bearer(TOKEN);
    let wrong_cookie = format!(
        "sessionpipe_{}={}",
        r.url.rsplit(':').next().unwrap(),
        "ab".repeat(32)
    );
    // Without the login token, and with the sender's bearer token alone: 401 everywhere.
    let no_login: [&[(&str, &str)]; 3] = [
        &[],
        &[("authorization", &sender)],
        &[("cookie", &wrong_cookie)],
    ];
    for headers in no_login {
        let page = get(&format!("{}/", r.url), headers);
        assert_eq!(page.status, 401, "page with {headers:?}");
        assert!(
            page.text.contains("Login token"),
            "the 401 page is the login form"
        );
        assert!(!page.text.contains("session-tpl"), "and not the page");
        assert_eq!(
            get(&format!("{}/page/api/state", r.url), headers).status,
            401,
            "state with {headers:?}"
        );
        let e = post_json(&enqueue_url, headers, &body);
        assert_eq!(e.status, 401, "enqueue with {headers:?}");
        assert_eq!(e.json(), json!({"reason": "unauthorized"}));
        assert_eq!(
            post_json(&format!("{}/logout", r.url), headers, &json!({})).status,
            401
        );
    }
    // The sender's token as a login token is refused too, after a delay.
    let t = Instant::now();
    let bad = post(
        &format!("{}/login", r.url),
        &[],
        "application/x-www-form-urlencoded",
        &format!("token={TOKEN}"),
    );
    assert_eq!(bad.status, 401);
    assert!(bad.header("set-cookie").is_none());
    assert!(bad.text.contains("not the login token"));
    assert!(t.elapsed() >= Duration::from_millis(400));
    // Nothing was queued by any of that.
    let poll = poll_now(&r, "claude-code:s1", &sender);
    assert_eq!(poll.status, 204);

    // The login token as a bearer works (scripts), no CSRF needed: no cookie is involved.
    let ok = post_json(&enqueue_url, &[("authorization", &bearer(LOGIN))], &body);
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert_eq!(ok.json()["expires_at"].as_str().unwrap().len(), 24);

    // The cookie opens the page; actions with it also need the CSRF header and this origin.
    let (cookie, csrf) = login(&r);
    let page = get(&format!("{}/", r.url), &[("cookie", &cookie)]);
    assert_eq!(page.status, 200);
    assert!(page.text.contains("session-tpl"));
    let csp = page.header("content-security-policy").unwrap();
    assert!(
        csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    let host = r.url.trim_start_matches("http://").to_owned();
    let own_origin = r.url.clone();
    let mut cases: Vec<(Vec<(&str, &str)>, u16)> = common::csrf::refused(&cookie, &csrf)
        .into_iter()
        .map(|h| (h, 403))
        .collect();
    let mut own = common::csrf::taken(&cookie, &csrf);
    own.extend([("origin", own_origin.as_str()), ("host", host.as_str())]);
    cases.push((own, 200));
    cases.push((common::csrf::taken(&cookie, &csrf), 200));
    for (headers, want) in cases {
        let resp = post_json(&enqueue_url, &headers, &body);
        assert_eq!(resp.status, want, "{headers:?}: {}", resp.text);
        if want == 403 {
            assert_eq!(resp.json(), json!({"reason": "csrf"}));
        }
    }
    // A cross-site login attempt is refused before the token is even looked at.
    let x = post(
        &format!("{}/login", r.url),
        &[("origin", "http://evil.example")],
        "application/x-www-form-urlencoded",
        &format!("token={LOGIN}"),
    );
    assert_eq!(x.status, 403);
    // Bad messages name the rule.
    let auth = [("authorization", bearer(LOGIN))];
    let auth: Vec<(&str, &str)> = auth.iter().map(|(k, v)| (*k, v.as_str())).collect();
    for (m, word) in [
        (
            json!({"session": "nope", "message": {"kind": "cancel"}}),
            "session",
        ),
        (
            json!({"session": "codex:s", "message": {"kind": "prompt"}}),
            "text",
        ),
        (
            json!({"session": "codex:s", "message": {"kind": "permission.answer", "for": "p", "decision": "maybe"}}),
            "decision",
        ),
        (
            json!({"session": "codex:s", "message": {"kind": "start"}}),
            "kind",
        ),
        (
            json!({"session": "codex:s", "message": {"kind": "cancel", "id": "01K6ZZZZZZZZZZZZZZZZZZZZZZ"}}),
            "unknown field id",
        ),
    ] {
        let resp = post_json(&enqueue_url, &auth, &m);
        assert_eq!(resp.status, 400, "{m}");
        assert!(
            resp.json()["reason"].as_str().unwrap().contains(word),
            "{m}: {}",
            resp.text
        );
    }
    // Logging out forgets the login.
    let out = post_json(
        &format!("{}/logout", r.url),
        &[("cookie", &cookie), ("x-sessionpipe-csrf", &csrf)],
        &json!({}),
    );
    assert_eq!(out.status, 204);
    assert_eq!(
        get(&format!("{}/page/api/state", r.url), &[("cookie", &cookie)]).status,
        401
    );
    // The protocol routes still take only the bearer token.
    let login_as_sender = poll_now(&r, "codex:s", &bearer(LOGIN));
    assert_eq!(login_as_sender.status, 401);
}

/// Two receivers on one database behind one name (issue 29; here one SQLite file, behind
/// a proxy that says https): a login made through one holds on the other with the same CSRF
/// value, logging out through one ends it on both, and the login limits count attempts made
/// through either.
#[test]
fn a_login_and_its_limits_hold_across_two_receivers_on_one_database() {
    let dir = tempfile::tempdir().unwrap();
    let a = SpReceiver::start(dir.path(), &["--trust-proxy"]);
    let b = SpReceiver::start(dir.path(), &["--trust-proxy"]);
    let https = ("x-forwarded-proto", "https");
    let try_login = |r: &SpReceiver, token: &str| {
        post(
            &format!("{}/login", r.url),
            &[https],
            "application/x-www-form-urlencoded",
            &format!("token={token}"),
        )
    };
    let resp = try_login(&a, LOGIN);
    assert_eq!(resp.status, 303, "{}", resp.text);
    let set = resp.header("set-cookie").expect("a cookie");
    let cookie = set.split(';').next().unwrap().to_owned();
    assert!(cookie.starts_with("__Host-sessionpipe="), "{set}");
    let csrf_of = |r: &SpReceiver| {
        let state = get(
            &format!("{}/page/api/state", r.url),
            &[https, ("cookie", &cookie)],
        );
        assert_eq!(state.status, 200, "{}", state.text);
        state.json()["csrf"].as_str().unwrap().to_owned()
    };
    let csrf = csrf_of(&b);
    assert_eq!(
        csrf_of(&a),
        csrf,
        "one CSRF value, whichever receiver answers"
    );
    let body = json!({"session": "claude-code:s1", "message": {"kind": "prompt", "text": "hi"}});
    for (r, want) in [(&a, 200), (&b, 200)] {
        let headers = [https, ("cookie", &cookie), ("x-sessionpipe-csrf", &csrf)];
        let resp = post_json(&format!("{}/page/api/enqueue", r.url), &headers, &body);
        assert_eq!(resp.status, want, "{}: {}", r.url, resp.text);
    }
    let out = post_json(
        &format!("{}/logout", b.url),
        &[https, ("cookie", &cookie), ("x-sessionpipe-csrf", &csrf)],
        &json!({}),
    );
    assert_eq!(out.status, 204);
    let state = get(
        &format!("{}/page/api/state", a.url),
        &[https, ("cookie", &cookie)],
    );
    assert_eq!(state.status, 401, "logged out through B, so on A too");

    // Five guesses a minute per client, through either: four on A, the fifth on B, and the
    // sixth, on A, is refused.
    for r in [&a, &a, &a, &a, &b] {
        assert_eq!(try_login(r, "not-the-token").status, 401);
    }
    let refused = try_login(&a, LOGIN);
    assert_eq!(refused.status, 429, "{}", refused.text);
    let wait: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=12).contains(&wait), "{wait}");
}

// ---------------------------------------------------------------------------------------
// Command line and persistence
// ---------------------------------------------------------------------------------------

fn sp_receiver(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(bin("sp-receiver"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn command_line() {
    let dir = tempfile::tempdir().unwrap();
    let help = sp_receiver(dir.path(), &["--help"]);
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();
    common::receiver_help::assert_help_names_all(&help);
    let v = sp_receiver(dir.path(), &["--version"]);
    assert_eq!(
        String::from_utf8(v.stdout).unwrap(),
        format!("sp-receiver {}\n", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(sp_receiver(dir.path(), &["--bogus"]).status.code(), Some(2));

    // --init makes both tokens (0600, different) and the database under HOME's defaults.
    let init = sp_receiver(dir.path(), &["--init"]);
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let conf = dir.path().join(".config/sessionpipe");
    let t1 = std::fs::read_to_string(conf.join("receiver-token")).unwrap();
    let t2 = std::fs::read_to_string(conf.join("receiver-login-token")).unwrap();
    assert_ne!(t1, t2);
    assert_eq!(t1.trim().len(), 64);
    let db = dir.path().join(".local/state/sessionpipe/receiver.db");
    use std::os::unix::fs::PermissionsExt;
    for f in [
        conf.join("receiver-token"),
        conf.join("receiver-login-token"),
        db.clone(),
    ] {
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o600,
            "{}",
            f.display()
        );
    }
    // Again: the same tokens.
    assert!(sp_receiver(dir.path(), &["--init"]).status.success());
    assert_eq!(
        std::fs::read_to_string(conf.join("receiver-token")).unwrap(),
        t1
    );
    let url = sp_receiver(dir.path(), &["--login-url"]);
    assert_eq!(
        String::from_utf8(url.stdout).unwrap(),
        format!("http://localhost:8787/#login={}\n", t2.trim())
    );

    // Setup problems exit 2 and say how to fix them.
    set_mode(&conf.join("receiver-login-token"), 0o644);
    let open = sp_receiver(dir.path(), &["--init"]);
    assert_eq!(open.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&open.stderr).contains("chmod 600"));
    set_mode(&conf.join("receiver-login-token"), 0o600);
    let same = dir.path().join("same");
    write_secret(&same, "the-same-token-for-both-0123");
    let s = same.to_str().unwrap();
    let both = sp_receiver(
        dir.path(),
        &["--init", "--token-file", s, "--login-token-file", s],
    );
    assert_eq!(both.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&both.stderr).contains("must differ"));
    let missing = sp_receiver(
        dir.path(),
        &["--init", "--token-file", "/nonexistent/token"],
    );
    assert_eq!(missing.status.code(), Some(2));
    let short = dir.path().join("short");
    write_secret(&short, "abc");
    assert_eq!(
        sp_receiver(
            dir.path(),
            &["--init", "--token-file", short.to_str().unwrap()]
        )
        .status
        .code(),
        Some(2)
    );
}

#[test]
fn state_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = SpReceiver::start(dir.path(), &["--prompt-expiry-s", "600"]);
    let sender = bearer(TOKEN);
    let ev = json!({"protocol":1,"id":ulid::Ulid::new().to_string(),"type":"session.started","time":now_ms(),"tier":0,
        "harness":{"name":"codex"},"session":{"id":"s1","seq":0,"cwd":"~/src/app"},"privacy":{"rulesets":[],"pii":false},
        "data":{"source":"startup"}});
    let resp = post_json(
        &format!("{}/api/sessionpipe/v1/events", r.url),
        &[("authorization", &sender)],
        &json!({"events":[ev]}),
    );
    assert_eq!(
        resp.json(),
        json!({"accepted":1,"duplicates":0,"rejected":[],"max_tier":3})
    );
    let m = post_json(
        &format!("{}/page/api/enqueue", r.url),
        &[("authorization", &bearer(LOGIN))],
        &json!({"session":"codex:s1","message":{"kind":"prompt","text":"after the restart"}}),
    )
    .json();
    let at = time::OffsetDateTime::parse(
        m["at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let exp = time::OffsetDateTime::parse(
        m["expires_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    assert_eq!((exp - at).whole_seconds(), 600, "--prompt-expiry-s");
    assert_eq!(r.stop(), Some(0), "SIGTERM stops it cleanly: {}", r.log());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(dir.path().join("receiver.db"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );

    let r = SpReceiver::start(dir.path(), &[]);
    let poll = poll_now(&r, "codex:s1", &sender);
    assert_eq!(poll.status, 200);
    assert_eq!(poll.json()["messages"], json!([m]));
    // The event is remembered: a resend is a duplicate, and the page still shows the session.
    let resp = post_json(
        &format!("{}/api/sessionpipe/v1/events", r.url),
        &[("authorization", &sender)],
        &json!({"events":[ev]}),
    );
    assert_eq!(resp.json()["duplicates"], 1);
    let state = get(
        &format!("{}/page/api/state", r.url),
        &[("authorization", &bearer(LOGIN))],
    )
    .json();
    assert_eq!(state["sessions"][0]["key"], "codex:s1");
    assert_eq!(state["sessions"][0]["cwd"], "~/src/app");
    assert_eq!(state["sessions"][0]["messages"][0]["status"], "sent");
    // The database reads plainly.
    let db = rusqlite::Connection::open(dir.path().join("receiver.db")).unwrap();
    let kind: String = db
        .query_row("select kind from queue", [], |r| r.get(0))
        .unwrap();
    assert_eq!(kind, "prompt");
}

// ---------------------------------------------------------------------------------------
// 1 and 2. The browser test
// ---------------------------------------------------------------------------------------

/// A browser test's temp folder, sp-receiver in it and a machine syncing to it. Fails (never
/// skips) when the browser cannot run, naming the script that installs it.
fn page_test() -> (tempfile::TempDir, SpReceiver, Machine) {
    if let Some(why) = missing_browser_deps() {
        panic!("the browser test cannot run: {why}");
    }
    let dir = tempfile::tempdir().unwrap();
    let receiver = SpReceiver::start(&dir.path().join("receiver"), &[]);
    let machine = Machine::syncing_to(dir.path(), &receiver);
    (dir, receiver, machine)
}

/// The fixtures' Claude Code session started in folder `cwd` (SessionStart through sp-event).
fn session_started(machine: &Machine, cwd: &str) {
    let mut start = payload(CC_STOP);
    start["hook_event_name"] = json!("SessionStart");
    start["source"] = json!("startup");
    start["cwd"] = json!(cwd);
    assert!(machine.hook("sp-event", &start).status.success());
}

/// The fixtures' Claude Code PermissionRequest, asked in folder `cwd`.
fn ask_in(cwd: &str) -> Value {
    let mut ask = payload(CC_PERMISSION);
    ask["cwd"] = json!(cwd);
    ask
}

#[test]
fn a_person_answers_from_the_page_in_headless_chromium() {
    let (_dir, receiver, machine) = page_test();
    let key = format!("claude-code:{CC_SESSION}");
    let card = format!("article[data-session=\"{key}\"]");
    let attention = format!("[data-attention=\"{CC_PERMISSION_ID}\"]");

    let mut b = Browser::launch();
    // The page wants the login token: the login form, answered 401.
    let first = b.call(json!({"op": "goto", "url": format!("{}/", receiver.url)}));
    assert_eq!(first["status"], 401);
    // Opened at 127.0.0.1, it is at localhost now: where a passkey can be made and used.
    let port = receiver.url.rsplit(':').next().unwrap();
    assert_eq!(
        b.call(json!({"op": "url"}))["url"],
        json!(format!("http://localhost:{port}/"))
    );
    b.call(json!({"op": "fill", "selector": "#token", "value": LOGIN}));
    b.click("#login-form button[type=submit]");
    b.wait("#conn[data-state=\"live\"]");
    let cookies = b.call(json!({"op": "cookies"}))["cookies"].clone();
    let c = &cookies.as_array().unwrap()[0];
    assert_eq!(c["httpOnly"], true);
    assert_eq!(c["sameSite"], "Strict");

    // Another session, so the phone shows more than one.
    let mut other = payload(CC_STOP);
    other["session_id"] = json!("3f2a9c1e-other-session");
    other["hook_event_name"] = json!("SessionStart");
    other["source"] = json!("startup");
    other["cwd"] = json!(format!("{}/src/website", machine.home.display()));
    assert!(machine.hook("sp-event", &other).status.success());

    // 1. A Claude Code PermissionRequest hook waits; the prompt appears on the page.
    // The fixture's cwd is another machine's; put the session in this HOME.
    let ask = ask_in(&format!("{}/src/api", machine.home.display()));
    let hook = machine.spawn_hook("sp-permission", &ask);
    b.wait(&attention);
    let shown = b.text(&attention);
    assert!(shown.contains("Bash"), "{shown}");
    assert!(shown.contains("echo hi > out.txt"), "{shown}");
    assert_eq!(b.text(&format!("{card} .state")), "waiting for you");
    b.wait("article[data-session=\"claude-code:3f2a9c1e-other-session\"]");

    // 2. The phone-width screenshot with the open prompt.
    let png = common::browser::docs_screenshot(&mut b, "receiver-phone.png");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    assert_eq!(width, 780, "390 CSS px at 2x");

    // Allow: the hook prints allow; the page shows delivered and the prompt is gone.
    b.click(&format!("{attention} button.allow"));
    let out = finish(hook, Duration::from_secs(30));
    assert!(out.status.success());
    assert_eq!(stdout(&out), format!("{ALLOW}\n"), "log: {}", machine.log());
    b.gone(&attention);
    let answer = format!("{card} li.msg[data-kind=\"permission.answer\"]");
    b.wait(&format!("{answer}[data-status=\"delivered\"]"));
    let line = b.text(&answer);
    assert!(
        line.contains("Allow Bash") && line.contains("delivered"),
        "{line}"
    );
    assert_ne!(b.text(&format!("{card} .state")), "waiting for you");
    // Issue 37: after a reload the history still names the call and its outcome (the
    // receiver keeps the prompt's tool and command with it), not the prompt's id.
    b.call(json!({"op": "goto", "url": format!("{}/", receiver.url)}));
    b.wait(&format!("{answer}[data-status=\"delivered\"]"));
    let line = b.text(&answer);
    assert!(
        line.contains("Allow Bash: echo hi > out.txt") && line.contains("delivered"),
        "{line}"
    );
    assert!(!line.contains(CC_PERMISSION_ID), "{line}");

    // A prompt nobody answers stays on the page as timed out, after a reload too.
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&machine.config).unwrap()).unwrap();
    config["control"] = json!({"permission_wait_s": 3});
    std::fs::write(&machine.config, config.to_string()).unwrap();
    let mut late = ask.clone();
    late["tool_input"]["command"] = json!("echo nobody > late.txt");
    let hook = machine.spawn_hook("sp-permission", &late);
    // Put off with Not now while the hook waits: once the hook gives up, the page says so
    // (not "waiting for you", nothing left put off) without waiting for Not now's time.
    let item = "#inbox-list .inbox-item";
    b.wait(item);
    assert!(b.text(item).contains("echo nobody > late.txt"));
    b.click(&format!("{item} button.not-now"));
    b.wait("#inbox-later:not([hidden])");
    let out = finish(hook, Duration::from_secs(30));
    assert!(out.status.success());
    assert_eq!(stdout(&out), "", "log: {}", machine.log());
    let timed_out = format!("{card} .cleared li[data-ended=\"timeout\"]");
    b.wait(&timed_out);
    b.call(json!({"op": "wait", "selector": "#inbox-later", "state": "hidden"}));
    assert_ne!(b.text(&format!("{card} .state")), "waiting for you");
    b.call(json!({"op": "goto", "url": format!("{}/", receiver.url)}));
    b.wait(&timed_out);
    let line = b.text(&timed_out);
    assert!(
        line.contains("echo nobody > late.txt") && line.contains("timed out: nobody answered"),
        "{line}"
    );

    // A prompt queued on the page is delivered at the next Stop.
    let text = "please also update the changelog";
    b.send_text(&card, text, "queue");
    let prompt = format!("{card} li.msg[data-kind=\"prompt\"]");
    let id = b.prompt_id_taken(&prompt);
    machine.assert_stored(&id);
    let v = hook_answer(&machine, "sp-stop", &payload(CC_STOP));
    assert_eq!(v["decision"], "block");
    assert!(v["reason"].as_str().unwrap().ends_with(text), "{v}");
    b.wait(&format!("{prompt}[data-status=\"taken\"]"));
    assert!(b.text(&prompt).contains(text));
    // Prompts whose turn is still running, with the seam each landed at.
    let mut in_turn = vec![(id, "claude-code Stop hook")];

    // "Send now" (steer) lands at the next tool boundary as context beside the tool's result;
    // "Interrupt" in place of the next tool call (DECISIONS 25); the page names each seam.
    for (button, mode, event, seam) in [
        (
            "steer",
            "steer",
            "PostToolUse",
            "claude-code PostToolUse hook (additionalContext)",
        ),
        (
            "interrupt",
            "interrupt",
            "PreToolUse",
            "claude-code PreToolUse hook (deny)",
        ),
    ] {
        let text = format!("use the staging database ({mode})");
        b.send_text(&card, &text, button);
        let msg = format!("{card} li.msg[data-kind=\"prompt\"]:has(span.what[title=\"{text}\"])");
        let id = b.prompt_id_taken(&msg);
        assert!(b.text(&msg).contains(&text), "{}", b.text(&msg));
        machine.assert_stored(&id);
        let mut input = payload(CC_STOP);
        input["hook_event_name"] = json!(event);
        input["tool_name"] = json!("Bash");
        input["tool_input"] = json!({"command": "ls"});
        input["tool_use_id"] = json!("toolu_01");
        if event == "PostToolUse" {
            input["tool_response"] = json!({});
        }
        let v = hook_answer(&machine, "sp-event", &input);
        let handed = if event == "PostToolUse" {
            &v["hookSpecificOutput"]["additionalContext"]
        } else {
            assert_eq!(v["hookSpecificOutput"]["permissionDecision"], "deny");
            &v["hookSpecificOutput"]["permissionDecisionReason"]
        };
        assert!(handed.as_str().unwrap().ends_with(&text), "{v}");
        // Taken: its final ack waits for the end of the turn it landed in (DECISIONS 38).
        b.wait(&format!(
            "{card} li.msg[data-message=\"{id}\"][data-status=\"taken\"]"
        ));
        in_turn.push((id, seam));
    }

    // Stop on a Claude Code session: it stops at the next hook seam (DECISIONS 26), here the
    // turn's end, with continue:false, and the page shows which seam delivered it.
    b.click(&format!("{card} button.stop"));
    let cancel = format!("{card} li.msg[data-kind=\"cancel\"]");
    let id = b.message_id(&cancel, "sent");
    machine.assert_stored(&id);
    let v = hook_answer(&machine, "sp-stop", &payload(CC_STOP));
    assert_eq!(v["continue"], false);
    b.wait(&format!("{cancel}[data-status=\"delivered\"]"));
    // That Stop ended the turn the steer and the interrupt landed in: each is delivered,
    // and the page shows the turn's text under it, as text.
    let said = payload(CC_STOP)["last_assistant_message"].clone();
    for (id, seam) in &in_turn {
        let done = format!("{card} li.msg[data-message=\"{id}\"][data-status=\"delivered\"]");
        b.wait(&format!("{done} div.reply[data-mode=\"turn\"]"));
        assert!(b.text(&done).contains(seam), "{}", b.text(&done));
        assert_eq!(
            json!(b.text(&format!("{done} div.reply"))),
            said,
            "the reply under the message"
        );
    }
    assert!(
        b.text(&cancel).contains("claude-code Stop hook"),
        "the detail names the seam"
    );
    // A session of another machine: the page groups sessions under each machine's name.
    let started = json!({
        "protocol": 1,
        "id": ulid::Ulid::new().to_string(),
        "type": "session.started",
        "time": now_ms(),
        "tier": 1,
        "harness": {"name": "codex", "version": "0.171.0", "event": "SessionStart"},
        "session": {"id": "build-box-session-1", "seq": 0, "cwd": "~/src/ci", "machine": "build-box"},
        "privacy": {"rulesets": ["secrets@1"], "pii": false},
        "data": {"source": "startup"}
    });
    let resp = post(
        &format!("{}/api/sessionpipe/v1/events", receiver.url),
        &[
            ("authorization", &bearer(TOKEN)),
            ("sessionpipe-protocol", "1"),
        ],
        "application/json",
        &json!({"events": [started]}).to_string(),
    );
    assert_eq!(resp.status, 202, "{}", resp.text);
    b.wait("#sessions h2.machine[data-machine=\"build-box\"] + article[data-session=\"codex:build-box-session-1\"]");
    let headings = b.call(json!({"op": "count", "selector": "#sessions h2.machine"}));
    assert_eq!(headings["count"], 2, "one heading per machine: {headings}");

    // The Away switch: the machine hears it in its next poll answer (the held one answers
    // at once), and `sp away status` says who said it.
    let away_status = || {
        let out = machine.cmd("sp").args(["away", "status"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(
        away_status().starts_with("at the desk"),
        "{}",
        away_status()
    );
    for (expect, word) in [
        (
            true,
            "away (set from the page's Away switch, receiver phone",
        ),
        (
            false,
            "at the desk (set from the page's Away switch, receiver phone",
        ),
    ] {
        b.click("#away");
        b.wait(&format!(
            "#away{}",
            if expect { ":checked" } else { ":not(:checked)" }
        ));
        assert!(
            until(Duration::from_secs(10), || away_status().starts_with(word)),
            "sp away status: {}",
            away_status()
        );
    }

    assert!(receiver.log().contains("listening on"));
    // For a look after the fact (not part of the docs).
    let after = concat!(env!("CARGO_TARGET_TMPDIR"), "/receiver-page-after.png");
    b.call(json!({"op": "screenshot", "path": after, "fullPage": true}));
}

/// DECISIONS 30 on the page: each open prompt offers only the answers its session's
/// `session.started` lists in `data.control.answer`. A Claude Code session (all four) gets
/// "Allow for this session" and "Deny & stop"; "Allow for this session" reaches the waiting
/// hook as an allow and a grant, so the next identical call is answered without a prompt. A
/// Codex session (none) gets Allow once and Deny only.
#[test]
fn the_page_offers_only_the_answers_the_harness_honours() {
    let (_dir, receiver, machine) = page_test();
    let cwd = format!("{}/src/api", machine.home.display());
    let attention = format!("[data-attention=\"{CC_PERMISSION_ID}\"]");

    // The Claude Code session starts: its session.started carries the harness table's answers.
    session_started(&machine, &cwd);
    // A session with an open prompt whose harness lists no answer fields (`answer: []`, as a
    // harness that honours only yes or no would send).
    let sender = bearer(TOKEN);
    let codex_started = json!({"protocol":1,"id":ulid::Ulid::new().to_string(),"type":"session.started",
        "time":now_ms(),"tier":1,"harness":{"name":"codex","event":"SessionStart"},
        "session":{"id":"codex-s1","seq":0,"cwd":"~/src/app"},"privacy":{"rulesets":["secrets@1"],"pii":false},
        "data":{"source":"startup","control":{"prompt":{"queue":"turn_end","steer":"tool_boundary",
            "interrupt":"tool_boundary"},"cancel":"tool_boundary","answer":[]}}});
    let codex_needed = json!({"protocol":1,"id":ulid::Ulid::new().to_string(),"type":"attention.needed",
        "time":now_ms(),"tier":1,"harness":{"name":"codex","event":"PermissionRequest"},
        "session":{"id":"codex-s1","seq":1,"cwd":"~/src/app"},"privacy":{"rulesets":["secrets@1"],"pii":false},
        "data":{"attention_id":"perm-codex-1","kind":"permission","tool":"Bash","message":"Bash git push"}});
    for ev in [&codex_started, &codex_needed] {
        common::schema::assert_valid("event.json", ev);
    }
    let resp = post_json(
        &format!("{}/api/sessionpipe/v1/events", receiver.url),
        &[("authorization", &sender)],
        &json!({"events":[codex_started, codex_needed]}),
    );
    assert_eq!(resp.json()["accepted"], 2, "{}", resp.json());

    let mut b = Browser::launch();
    common::page::open_and_log_in(&mut b, &format!("{}/", receiver.url));
    b.wait("#conn[data-state=\"live\"]");

    let ask = ask_in(&cwd);
    let hook = machine.spawn_hook("sp-permission", &ask);
    b.wait(&attention);
    for shown in ["allow", "allow-session", "deny", "deny-stop", "edit-allow"] {
        b.wait(&format!("{attention} button.{shown}"));
    }
    assert_eq!(
        b.text(&format!("{attention} button.allow-session")),
        "Allow for this session"
    );
    assert_eq!(
        b.text(&format!("{attention} button.deny-stop")),
        "Deny & stop"
    );
    let prefilled = b.call(json!({"op": "eval", "script": format!(
        "document.querySelector('{attention} .edit-cmd').value")}))["value"]
        .clone();
    assert_eq!(prefilled, "echo hi > out.txt");

    let codex = "[data-attention=\"perm-codex-1\"]";
    b.wait(&format!("{codex} button.allow"));
    b.wait(&format!("{codex} button.deny"));
    for hidden in ["allow-session", "deny-stop", "edit-allow"] {
        b.call(json!({"op": "wait", "selector": format!("{codex} button.{hidden}"), "state": "hidden"}));
    }

    // Allow for this session: the hook allows, and the machine keeps a grant.
    b.click(&format!("{attention} button.allow-session"));
    let out = finish(hook, Duration::from_secs(30));
    assert!(out.status.success());
    let v: Value = serde_json::from_str(stdout(&out).trim_end())
        .unwrap_or_else(|e| panic!("{e}: {} log: {}", stdout(&out), machine.log()));
    assert_eq!(
        v["hookSpecificOutput"]["decision"]["behavior"], "allow",
        "{v}"
    );
    let answer =
        format!("li.msg[data-kind=\"permission.answer\"][data-for=\"{CC_PERMISSION_ID}\"]");
    b.wait(&format!("{answer}[data-status=\"delivered\"]"));
    assert!(
        b.text(&answer).contains("for the session"),
        "{}",
        b.text(&answer)
    );
    // The next identical call is answered from the grant at once, with no prompt.
    let again = machine.hook("sp-permission", &ask);
    assert!(again.status.success());
    let v: Value = serde_json::from_str(stdout(&again).trim_end()).unwrap();
    assert_eq!(
        v["hookSpecificOutput"]["decision"]["behavior"], "allow",
        "{v}"
    );
    let grants = machine
        .cmd("sp")
        .args(["grants", "--json"])
        .output()
        .unwrap();
    let grants: Value = serde_json::from_slice(&grants.stdout).unwrap();
    assert_eq!(grants.as_array().map(Vec::len), Some(1), "{grants}");
}

/// The decision a waiting permission hook printed.
fn printed_decision(machine: &Machine, hook: std::process::Child) -> Value {
    let out = finish(hook, Duration::from_secs(30));
    assert!(out.status.success());
    let v: Value = serde_json::from_str(stdout(&out).trim_end())
        .unwrap_or_else(|e| panic!("{e}: {:?} log: {}", stdout(&out), machine.log()));
    v["hookSpecificOutput"]["decision"].clone()
}

/// DECISIONS 31 on the page: the person sees what they answer and an edit goes back whole.
/// A command's Edit & allow keeps the call's other fields; a file edit shows as a diff and
/// its new text can be rewritten; a plan shows as text with Approve and Keep planning; a
/// question's options are buttons, a multi-select's checkboxes, and a typed answer counts.
#[test]
fn the_page_shows_the_call_and_sends_an_edit_back_whole() {
    let (_dir, receiver, machine) = page_test();
    let mut start = payload(CC_STOP);
    start["hook_event_name"] = json!("SessionStart");
    start["source"] = json!("startup");
    assert!(machine.hook("sp-event", &start).status.success());
    let mut b = Browser::launch();
    common::page::open_and_log_in(&mut b, &format!("{}/", receiver.url));
    b.wait("#conn[data-state=\"live\"]");
    let ask = |n: u32, tool: &str, input: Value| {
        let mut p = payload(CC_PERMISSION);
        p["prompt_id"] = json!(format!("d31f8a10-4e6d-4b93-8f25-{n:0>12}"));
        p["tool_name"] = json!(tool);
        p["tool_input"] = input;
        p
    };

    // A command: Edit & allow sends the whole input with the command changed.
    let cmd = ask(
        1,
        "Bash",
        json!({"command": "rm -rf build", "description": "Clean the build", "timeout": 60000}),
    );
    let card = format!("[data-attention=\"{}\"]", cc_attention_id(&cmd));
    let hook = machine.spawn_hook("sp-permission", &cmd);
    b.wait(&format!("{card} button.edit-allow"));
    b.call(json!({"op": "fill", "selector": format!("{card} .edit-cmd"), "value": "rm -ri build"}));
    b.click(&format!("{card} button.edit-allow"));
    let d = printed_decision(&machine, hook);
    assert_eq!(
        d["updatedInput"],
        json!({"command": "rm -ri build", "description": "Clean the build", "timeout": 60000})
    );

    // A file edit: a diff, and the new text rewritten before it is allowed.
    let edit_input = json!({"file_path": "/w/src/lib.rs", "old_string": "fn a() {}\nlet b = 2;",
        "new_string": "fn a() {}\nlet b = 3;", "replace_all": false});
    let edit = ask(2, "Edit", edit_input.clone());
    let card = format!("[data-attention=\"{}\"]", cc_attention_id(&edit));
    let hook = machine.spawn_hook("sp-permission", &edit);
    b.wait(&format!("{card} .diff"));
    let diff = b.text(&format!("{card} .diff"));
    assert!(
        diff.contains("/w/src/lib.rs")
            && diff.contains("  fn a() {}")
            && diff.contains("- let b = 2;")
            && diff.contains("+ let b = 3;"),
        "{diff}"
    );
    b.call(json!({"op": "wait", "selector": format!("{card} .edit"), "state": "hidden"}));
    b.call(json!({"op": "fill", "selector": format!("{card} .edit-text"), "value": "fn a() {}\nlet b = 4;"}));
    b.click(&format!("{card} button.edit-allow"));
    let d = printed_decision(&machine, hook);
    let mut want = edit_input;
    want["new_string"] = json!("fn a() {}\nlet b = 4;");
    assert_eq!(d["updatedInput"], want);

    // A plan: its text, Approve and Keep planning (a deny with the note).
    let plan = ask(
        3,
        "ExitPlanMode",
        json!({"plan": "1. Read the code\n2. Fix the bug", "planFilePath": "/w/p.md"}),
    );
    let card = format!("[data-attention=\"{}\"]", cc_attention_id(&plan));
    let hook = machine.spawn_hook("sp-permission", &plan);
    b.wait(&format!("{card} .plan"));
    assert_eq!(
        b.text(&format!("{card} .plan")),
        "1. Read the code\n2. Fix the bug"
    );
    assert_eq!(b.text(&format!("{card} button.allow")), "Approve");
    assert_eq!(b.text(&format!("{card} button.deny")), "Keep planning");
    for hidden in ["allow-session", "edit-allow"] {
        b.call(
            json!({"op": "wait", "selector": format!("{card} button.{hidden}"), "state": "hidden"}),
        );
    }
    b.call(
        json!({"op": "fill", "selector": format!("{card} .note"), "value": "Cover the tests too."}),
    );
    b.click(&format!("{card} button.deny"));
    let d = printed_decision(&machine, hook);
    assert_eq!(
        d,
        json!({"behavior": "deny", "message": "Cover the tests too."})
    );

    // A question: options as buttons, a multi-select's as checkboxes, a typed answer.
    let q = ask(
        4,
        "AskUserQuestion",
        json!({"questions": [
            {"question": "Which color?", "header": "Color", "multiSelect": false,
             "options": [{"label": "Red", "description": "warm"}, {"label": "Blue", "description": "cool"}]},
            {"question": "Which sizes?", "header": "Sizes", "multiSelect": true,
             "options": [{"label": "S", "description": "small"}, {"label": "M", "description": "medium"}, {"label": "L", "description": "large"}]}]}),
    );
    let card = format!("[data-attention=\"{}\"]", cc_attention_id(&q));
    let hook = machine.spawn_hook("sp-permission", &q);
    b.wait(&format!("{card} .options button.option"));
    assert_eq!(
        b.call(json!({"op": "count", "selector": format!("{card} .options input[type=checkbox]")}))
            ["count"],
        3
    );
    b.call(json!({"op": "wait", "selector": format!("{card} button.allow"), "state": "hidden"}));
    b.call(json!({"op": "fill", "selector": format!("{card} .options fieldset:nth-of-type(1) .free"), "value": "Green"}));
    b.click(&format!("{card} .options input[value=\"S\"]"));
    b.click(&format!("{card} .options input[value=\"L\"]"));
    b.click(&format!("{card} button.send-answers"));
    let d = printed_decision(&machine, hook);
    assert_eq!(d["updatedInput"]["questions"], q["tool_input"]["questions"]);
    assert_eq!(
        d["updatedInput"]["answers"],
        json!({"Which color?": "Green", "Which sizes?": "S, L"})
    );
}

/// Issue 37, in headless Chromium at 390 px: a Claude Code prompt names its tool once and
/// shows the command without it, with the agent's own description of the call beside it; the
/// card says in words when Send now, Interrupt and Stop reach the agent; "Log out" stays on
/// one line.
#[test]
fn the_page_says_the_call_and_its_controls_in_plain_words() {
    let (_dir, receiver, machine) = page_test();
    let key = format!("claude-code:{CC_SESSION}");
    let card = format!("article[data-session=\"{key}\"]");
    let attention = format!("[data-attention=\"{CC_PERMISSION_ID}\"]");
    session_started(&machine, &format!("{}/src/api", machine.home.display()));
    let ask = ask_in(&format!("{}/src/api", machine.home.display()));
    let hook = machine.spawn_hook("sp-permission", &ask);

    let mut b = Browser::launch();
    common::page::open_and_log_in(&mut b, &format!("{}/", receiver.url));
    b.wait(&attention);
    assert_eq!(b.text(&format!("{attention} .att-tool")), "Bash");
    assert_eq!(
        b.text(&format!("{attention} .att-msg")),
        "echo hi > out.txt"
    );
    assert_eq!(
        b.text(&format!("{attention} .att-desc")),
        "The agent says: Write hi into out.txt"
    );
    let control = b.text(&format!("{card} .control"));
    assert!(
        control.starts_with("Send now reaches it ") && control.contains("Stop reaches it "),
        "{control}"
    );
    assert!(
        !control.contains("steer") && !control.contains("·"),
        "{control}"
    );
    let lines = b.call(json!({"op": "eval", "script":
        "(() => { const r = document.createRange(); r.selectNodeContents(document.querySelector('#logout')); return r.getClientRects().length; })()"}));
    assert_eq!(lines["value"], 1, "\"Log out\" on one line at 390 px");

    b.click(&format!("{attention} button.deny"));
    let out = finish(hook, Duration::from_secs(30));
    assert!(out.status.success());
}
