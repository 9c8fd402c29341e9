//! `sp` against a real queue: the test receiver, sp-sync and the hooks build it, and
//! `sp status`, `sp queue`, `sp doctor` and `sp sink` read and manage it.
mod common;
use common::env::*;
use serde_json::{json, Value};
use spreceiver::ReceiverOptions;
use std::process::{Command, Output};
use std::time::Duration;

const OTHER_SESSION: &str = "0f3a9c1e-2222-4bbb-8ccc-000000000001";

fn sp_cmd(env: &Env, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sp"));
    c.args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &env.home)
        .env("SESSIONPIPE_CONFIG", &env.config)
        .env("SESSIONPIPE_STATE_DIR", &env.state)
        .env("SP_CRONTAB", env.home.join("no-crontab"))
        .current_dir(&env.home);
    c
}

fn sp(env: &Env, args: &[&str]) -> Output {
    let out = sp_cmd(env, args).output().unwrap();
    eprintln!(
        "--- sp {args:?} → {:?}\n{}{}",
        out.status.code(),
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn sp_json(env: &Env, args: &[&str]) -> Value {
    let out = sp(env, args);
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).expect("sp prints JSON")
}

fn session_start(env: &Env, session: &str) {
    let out = env.hook_json(
        "sp-event",
        &json!({"session_id": session, "transcript_path": "/dev/null", "cwd": env.home, "hook_event_name": "SessionStart", "source": "startup"}),
    );
    assert!(out.status.success());
}

#[test]
fn status_and_queue_reflect_a_real_queue() {
    let env = Env::new();
    let key = format!("claude-code:{CC_SESSION}");
    session_start(&env, CC_SESSION);
    let p1 = env.receiver.enqueue(
        &key,
        json!({"kind": "prompt", "text": "please also run the tests"}),
    );
    let p2 = env.receiver.enqueue(
        &key,
        json!({"kind": "prompt", "text": "and update the changelog"}),
    );
    let stray = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": "perm-0000000000000000", "decision": "allow"}),
    );
    let out = env.sync_once();
    assert!(out.status.success());

    let s = sp_json(&env, &["status", "--json"]);
    let sink = &s["sinks"][0];
    assert_eq!(sink["name"], "phone");
    assert_eq!(sink["paused"], false);
    assert_eq!(sink["contacted"], true);
    assert!(sink["last_poll_ok_at"].is_string(), "{s}");
    assert!(sink["last_events_ok_at"].is_string(), "{s}");
    assert_eq!(sink["events_pending"], 0, "session.started went out");
    assert_eq!(sink["acks_pending"], 0, "the stray answer's ack went out");
    assert_eq!(s["live_sessions"].as_array().unwrap().len(), 1);
    assert_eq!(s["live_sessions"][0]["key"], key);
    assert_eq!(s["queued"], json!({"prompt": 2}));
    assert_eq!(s["open_attentions"], json!([]));

    let q = sp_json(&env, &["queue", "--json"]);
    let msgs = q["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3);
    let by_id = |id: &Value| msgs.iter().find(|m| &m["id"] == id).unwrap().clone();
    let m1 = by_id(&p1["id"]);
    assert_eq!(
        (m1["kind"].as_str(), m1["state"].as_str(), &m1["outcome"]),
        (Some("prompt"), Some("queued"), &Value::Null)
    );
    assert_eq!(m1["session"], key);
    assert_eq!(m1["text"], "please also run the tests");
    assert!(m1["received_at"].is_string() && m1["expires_at"].is_string());
    let m3 = by_id(&stray["id"]);
    assert_eq!(
        (m3["state"].as_str(), m3["outcome"].as_str()),
        (Some("done"), Some("failed"))
    );
    assert_eq!(m3["detail"], "unknown attention");
    assert!(m3["ack_sent_at"].is_string());
    // Filters: by state, by outcome, by the session id alone or its full key.
    assert_eq!(
        sp_json(&env, &["queue", "--json", "--state", "queued"])["messages"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        sp_json(
            &env,
            &["queue", "--json", "--state", "failed", "--session", &key]
        )["messages"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        sp_json(&env, &["queue", "--json", "--session", CC_SESSION])["messages"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        sp_json(&env, &["queue", "--json", "--session", "nobody"])["messages"],
        json!([])
    );
    let text = stdout(&sp(&env, &["queue"]));
    assert!(
        text.contains("please also run the tests") && text.contains("done/failed"),
        "{text}"
    );

    // The Stop hook delivers both prompts, the next one ends their turn; their final acks
    // wait for sp-sync.
    let out = env.hook_json("sp-stop", &payload(CC_STOP));
    assert!(stdout(&out).contains("please also run the tests"));
    let mut again = payload(CC_STOP);
    again["stop_hook_active"] = json!(true);
    assert!(env.hook_json("sp-stop", &again).stdout.is_empty());
    let q = sp_json(&env, &["queue", "--json", "--state", "delivered"]);
    let delivered = q["messages"].as_array().unwrap();
    assert_eq!(delivered.len(), 2);
    assert!(delivered
        .iter()
        .all(|m| m["ack_sent_at"].is_null() && m["done_at"].is_string()));
    let s = sp_json(&env, &["status", "--json"]);
    assert_eq!(s["queued"], json!({}));
    assert_eq!(s["sinks"][0]["acks_pending"], 2);
    assert!(s["sinks"][0]["acks_oldest_age_s"].is_number());
    assert_eq!(s["acks_pending"], 2);
    assert!(env.sync_once().status.success());
    assert_eq!(
        sp_json(&env, &["status", "--json"])["sinks"][0]["acks_pending"],
        0
    );
    assert!(env
        .receiver
        .wait_ack(p2["id"].as_str().unwrap(), Duration::from_secs(5))
        .is_some());

    // A waiting permission hook is an open attention, and its attention.needed waits to be sent.
    let mut perm = payload(CC_PERMISSION);
    perm["session_id"] = json!(OTHER_SESSION);
    let mut hook = env.spawn_hook("sp-permission", &perm);
    let open = until(Duration::from_secs(10), || {
        sp_json(&env, &["status", "--json"])["open_attentions"]
            .as_array()
            .is_some_and(|a| a.len() == 1)
    });
    let s = sp_json(&env, &["status", "--json"]);
    let _ = hook.kill();
    let _ = hook.wait();
    assert!(open, "{s}");
    let a = &s["open_attentions"][0];
    assert_eq!(a["attention_id"], CC_PERMISSION_ID);
    assert_eq!(a["session"], format!("claude-code:{OTHER_SESSION}"));
    assert_eq!(a["tool"], "Bash");
    assert!(
        s["sinks"][0]["events_pending"].as_i64().unwrap() >= 2,
        "session.started + attention.needed: {s}"
    );
    assert!(s["events_oldest_age_s"].is_number());
    assert_eq!(s["live_sessions"].as_array().unwrap().len(), 2);
    let text = stdout(&sp(&env, &["status"]));
    assert!(
        text.contains("open permission prompts: 1") && text.contains(CC_PERMISSION_ID),
        "{text}"
    );
}

#[test]
fn status_before_anything_ran() {
    let env = Env::new();
    let s = sp_json(&env, &["status", "--json"]);
    assert_eq!(s["database_exists"], false);
    assert_eq!(s["sinks"][0]["contacted"], false);
    assert_eq!(s["queued"], json!({}));
    assert!(
        !env.db_path().exists(),
        "status does not create the database"
    );
    assert_eq!(sp_json(&env, &["queue", "--json"]), json!({"messages": []}));
}

#[test]
fn doctor_fails_on_a_world_readable_config() {
    let env = Env::new();
    set_mode(&env.config, 0o644);
    let out = sp(&env, &["doctor"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.contains("[FAIL] config"), "{text}");
    assert!(text.contains("readable by others (mode 644)"), "{text}");
    assert!(
        text.contains(&format!("fix: chmod 600 {}", env.config.display())),
        "{text}"
    );
}

#[test]
fn doctor_fails_on_a_sink_whose_well_known_lacks_control() {
    let env = events_only();
    let out = sp(&env, &["doctor"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains("[FAIL] sink phone: control is on in the config, but the receiver's well-known lacks control"),
        "{text}"
    );
    assert!(text.contains("capabilities: events"), "{text}");
    assert!(
        text.contains("fix: turn control on at the receiver"),
        "{text}"
    );
}

#[test]
fn doctor_passes_a_healthy_setup_and_measures_hook_latency() {
    let env = Env::new();
    session_start(&env, CC_SESSION);
    let out = sp(&env, &["doctor"]);
    let text = stdout(&out);
    assert!(text.contains("[ok]   sink phone: receiver answers (protocol 1, max tier 1, capabilities: events, control)"), "{text}");
    assert!(text.contains("passes the integrity check"), "{text}");
    assert!(text.contains("hook latency: median"), "{text}");
    assert!(text.contains("over 20 runs"), "{text}");
    // Only warnings (no crontab, no harness) remain: exit 0.
    assert!(!text.contains("[FAIL]"), "{text}");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn doctor_finds_hooks_pointing_at_missing_binaries() {
    let env = Env::new();
    let claude = env.home.join(".claude");
    std::fs::create_dir_all(&claude).unwrap();
    std::fs::write(
        claude.join("settings.json"),
        r#"{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"/gone/bin/sp-stop","args":["--harness","claude-code"],"timeout":10}]}]}}"#,
    )
    .unwrap();
    let out = sp(&env, &["doctor"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.contains("claude-code: hooks in ~/.claude/settings.json point at missing binaries: /gone/bin/sp-stop"), "{text}");
}

/// `sp sink add <url> --token-file <tf>` and `extra`.
fn sink_add(env: &Env, url: &str, tf: &std::path::Path, extra: &[&str]) -> Output {
    let args = ["sink", "add", url, "--token-file", tf.to_str().unwrap()];
    sp(env, &[&args[..], extra].concat())
}

/// A receiver that offers events only, no control.
fn events_only() -> Env {
    Env::with(
        ReceiverOptions {
            capabilities: vec!["events".into()],
            ..Default::default()
        },
        json!({}),
    )
}

fn token_file(env: &Env, mode: u32) -> std::path::PathBuf {
    let f = env.home.join("phone.token");
    std::fs::write(&f, format!("{}\n", env.receiver.token())).unwrap();
    set_mode(&f, mode);
    f
}

#[test]
fn sink_add_checks_the_well_known_and_writes_a_private_config() {
    let env = Env::new();
    std::fs::remove_file(&env.config).unwrap();
    let tf = token_file(&env, 0o600);
    let url = env.receiver.url();
    let out = sink_add(&env, &url, &tf, &["--control", "--tier", "1"]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(text.contains("capabilities: events, control"), "{text}");
    assert!(text.contains("Added sink \"localhost\""), "{text}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&env.config).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let c: Value = serde_json::from_str(&std::fs::read_to_string(&env.config).unwrap()).unwrap();
    assert_eq!(
        c["sinks"],
        json!([{"name": "localhost", "url": url, "tier": 1, "control": true, "token_file": tf.canonicalize().unwrap()}])
    );
    // The same URL again is refused; another name is derived for another URL.
    assert_eq!(sink_add(&env, &url, &tf, &[]).status.code(), Some(1));
    let out = sink_add(&env, &format!("{url}/other"), &tf, &["--no-check"]);
    assert!(out.status.success());
    let list = sp_json(&env, &["sink", "list", "--json"]);
    let names: Vec<&str> = list["sinks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["localhost", "localhost-2"]);
    // The config it writes is one sp-sync runs with.
    session_start(&env, CC_SESSION);
    assert!(env.sync_once().status.success());
    assert!(sp_json(&env, &["status", "--json"])["sinks"][0]["last_poll_ok_at"].is_string());
    assert!(sp(&env, &["sink", "remove", "localhost-2"])
        .status
        .success());
    assert_eq!(
        sp_json(&env, &["sink", "list", "--json"])["sinks"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let out = sp(&env, &["sink", "remove", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the sinks are: localhost"));
}

#[test]
fn sink_add_refuses_control_the_receiver_does_not_offer() {
    let env = events_only();
    std::fs::remove_file(&env.config).unwrap();
    let tf = token_file(&env, 0o600);
    let out = sink_add(&env, &env.receiver.url(), &tf, &["--control"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("does not offer control") && err.contains("capabilities: events"),
        "{err}"
    );
    assert!(!env.config.exists(), "nothing saved");
    // Without --control it is added for events.
    assert!(sink_add(&env, &env.receiver.url(), &tf, &[])
        .status
        .success());
}

/// `--signed` is refused for a receiver that does not declare control.signing (the test
/// receiver speaks only the unsigned mode), and nothing is saved.
#[test]
fn sink_add_signed_needs_a_receiver_that_signs() {
    let env = Env::new();
    std::fs::remove_file(&env.config).unwrap();
    let tf = token_file(&env, 0o600);
    let out = sink_add(&env, &env.receiver.url(), &tf, &["--signed"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not speak signed control"), "{err}");
    assert!(!env.config.exists(), "nothing saved");
}

#[test]
fn sink_add_refuses_a_readable_token_file_and_bad_urls() {
    let env = Env::new();
    let tf = token_file(&env, 0o644);
    let out = sink_add(&env, &env.receiver.url(), &tf, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains(&format!("fix with: chmod 600 {}", tf.display())));
    set_mode(&tf, 0o600);
    let out = sink_add(&env, "http://example.com/x", &tf, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("use https://"));
    let out = sp(&env, &["sink", "add", &env.receiver.url()]);
    assert_eq!(out.status.code(), Some(2), "usage error");
}

#[test]
fn every_binary_has_help_and_version() {
    let env = Env::new();
    for name in ["sp", "sp-sync", "sp-permission", "sp-stop", "sp-event"] {
        let bin = if name == "sp" {
            env!("CARGO_BIN_EXE_sp").into()
        } else {
            bin(name)
        };
        let out = Command::new(&bin).arg("--help").output().unwrap();
        assert!(out.status.success(), "{name} --help");
        let text = stdout(&out);
        for needle in [
            "SESSIONPIPE_CONFIG",
            "SESSIONPIPE_STATE_DIR",
            "control.db",
            "sp.log",
        ] {
            assert!(text.contains(needle), "{name} --help lacks {needle}");
        }
        let out = Command::new(&bin).arg("--version").output().unwrap();
        assert_eq!(
            stdout(&out),
            format!("{name} {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
    let out = sp(&env, &["bogus"]);
    assert_eq!(out.status.code(), Some(2));
}

/// The harness tables in docs/harnesses.md are what `sp hooks table` renders from the
/// capability table (src/harness/caps.rs), byte for byte between the markers. Regenerate with:
/// SP_BLESS=1 cargo test -p sessionpipe-control --test sp_cli docs_harness_table
#[test]
fn docs_harness_table_is_the_rendered_one() {
    use spctl::harness::caps::{README_BEGIN, README_END};
    let env = Env::new();
    let out = sp(&env, &["hooks", "table"]);
    assert!(out.status.success());
    let rendered = stdout(&out);
    assert!(rendered.starts_with(README_BEGIN) && rendered.ends_with(&format!("{README_END}\n")));
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/harnesses.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let begin = doc
        .find(README_BEGIN)
        .expect("docs/harnesses.md has the begin marker");
    let end = doc[begin..]
        .find(README_END)
        .expect("docs/harnesses.md has the end marker")
        + begin
        + README_END.len()
        + 1;
    if std::env::var_os("SP_BLESS").is_some() {
        std::fs::write(&path, format!("{}{rendered}{}", &doc[..begin], &doc[end..])).unwrap();
        return;
    }
    assert_eq!(
        &doc[begin..end],
        rendered,
        "docs/harnesses.md's harness table differs from `sp hooks table`"
    );
}

/// The rows of the first markdown table after `heading` in `text`, header and rule dropped.
fn table_rows(text: &str, heading: &str) -> Vec<Vec<String>> {
    let at = text
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?}"));
    text[at..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

/// The README's short harness table says "yes" exactly where the generated table (checked
/// against the capability table above) says `delivered`, for every harness, in its order.
#[test]
fn readme_short_harness_table_follows_the_generated_one() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let doc = std::fs::read_to_string(root.join("docs/harnesses.md")).unwrap();
    let short = table_rows(&readme, "## Harnesses");
    let full = table_rows(&doc, spctl::harness::caps::README_BEGIN);
    let names = |rows: &[Vec<String>]| rows.iter().map(|r| r[0].clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&short),
        names(&full),
        "the README lists every harness, in order"
    );
    for (s, f) in short.iter().zip(&full) {
        // README columns: allow/deny, prompt, stop; generated: permission.answer, prompt, cancel.
        for (col, fcol) in [(1, 2), (2, 3), (3, 4)] {
            let delivered = f[fcol].starts_with("delivered");
            assert!(
                delivered || f[fcol].starts_with("unsupported"),
                "{}: {:?}",
                f[0],
                f[fcol]
            );
            assert_eq!(
                s[col],
                if delivered { "yes" } else { "no" },
                "README's {} row, column {col}, against {:?}",
                s[0],
                f[fcol]
            );
        }
    }
}
