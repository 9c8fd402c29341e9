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
    // The page's address it names is one where passkeys work: localhost, not the IP address.
    let port = env.receiver.url().rsplit(':').next().unwrap().to_owned();
    assert!(
        text.contains(&format!(
            "[ok]   sink phone: sp-receiver healthy; its page: http://localhost:{port}/"
        )),
        "{text}"
    );
    assert!(!text.contains("127.0.0.1"), "{text}");
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
    // The table names the page of each sink on this machine at localhost, where passkeys work.
    let port = url.rsplit(':').next().unwrap();
    let text = stdout(&sp(&env, &["sink", "list"]));
    assert!(
        text.contains(&format!("The page of localhost: http://localhost:{port}/ ")),
        "{text}"
    );
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

/// A typo gets clap's "did you mean" (its `suggestions` feature), still as a usage error.
#[test]
fn a_mistyped_command_suggests_the_right_one() {
    let env = Env::new();
    let out = sp(&env, &["staus"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("similar subcommand") && err.contains("'status'"),
        "{err}"
    );
    let out = sp(&env, &["sink", "lsit"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("'list'"));
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

/// Every control of the page: the text of each button, label and summary in index.html and
/// every quoted string app.js may put on one (e.g. `btn.textContent = 'Remove machine'`).
fn page_controls() -> Vec<String> {
    let page = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../receiver/src/page");
    let html = std::fs::read_to_string(page.join("index.html")).unwrap();
    let js = std::fs::read_to_string(page.join("app.js")).unwrap();
    let mut out = Vec::new();
    for tag in ["button", "label", "summary"] {
        for part in html.split(&format!("<{tag}")).skip(1) {
            let Some(body) = part.split_once('>').map(|(_, b)| b) else {
                continue;
            };
            let Some((inner, _)) = body.split_once(&format!("</{tag}>")) else {
                continue;
            };
            // Drop nested tags (a label's input), keep the words.
            let mut text = String::new();
            let mut in_tag = false;
            for c in inner.chars() {
                match c {
                    '<' => in_tag = true,
                    '>' => in_tag = false,
                    c if !in_tag => text.push(c),
                    _ => {}
                }
            }
            out.push(words(&text.replace("&amp;", "&")));
        }
    }
    // The script's string literals, line by line, so that an apostrophe in a comment cannot
    // put every later line out of step.
    for line in js.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for quote in ['\'', '"', '`'] {
            out.extend(line.split(quote).skip(1).step_by(2).map(words));
        }
    }
    out
}

fn words(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The bold names a doc tells the reader to tap, press, click or find on the page ("tap
/// **X**", "the page's **X**", "under **X**", "a **X** button", "**X** switch").
fn named_controls(doc: &str) -> Vec<String> {
    let flat = words(doc);
    let parts: Vec<&str> = flat.split("**").collect();
    let mut out = Vec::new();
    for i in (1..parts.len()).step_by(2) {
        let before = parts[i - 1].to_lowercase();
        let after = parts.get(i + 1).copied().unwrap_or("");
        let is_control = ["tap ", "press ", "click ", "page's ", "under "]
            .iter()
            .any(|w| before.ends_with(w))
            || after.starts_with(" button")
            || after.starts_with(" switch");
        if is_control {
            out.push(parts[i].to_string());
        }
    }
    out
}

/// The `sp …` commands a doc names in backticks, as their leading words (subcommand and,
/// where it has them, its subcommand): `sp sink add URL` gives ["sink", "add"].
fn named_sp_commands(doc: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for span in doc.split('`').skip(1).step_by(2) {
        let mut w = span.split_whitespace();
        if w.next() != Some("sp") {
            continue;
        }
        let cmd: Vec<String> = w
            .take(2)
            .take_while(|x| x.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
            .filter(|x| !x.starts_with('-'))
            .map(String::from)
            .collect();
        if !cmd.is_empty() {
            out.push(cmd);
        }
    }
    out
}

/// What the docs tell a newcomer to tap is on the page, and what they tell them to run is
/// one of `sp`'s commands; docs/install.md counts the binaries install.sh copies.
#[test]
fn docs_name_only_controls_the_page_has_and_commands_sp_has() {
    let env = Env::new();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut docs = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            docs.push(p);
        }
    }
    let controls = page_controls();
    let mut missing = Vec::new();
    let mut checked = 0;
    for path in &docs {
        let doc = std::fs::read_to_string(path).unwrap();
        for name in named_controls(&doc) {
            checked += 1;
            if !controls.contains(&name) {
                missing.push(format!(
                    "{}: **{name}** is no control of the page",
                    path.display()
                ));
            }
        }
        for cmd in named_sp_commands(&doc) {
            checked += 1;
            let top = sp_cmd(&env, &["help", cmd[0].as_str()]).output().unwrap();
            if !top.status.success() {
                missing.push(format!("{}: `sp {}` is no command", path.display(), cmd[0]));
                continue;
            }
            if stdout(&top).contains("\nCommands:") && cmd.len() == 2 {
                let sub = sp_cmd(&env, &["help", cmd[0].as_str(), cmd[1].as_str()])
                    .output()
                    .unwrap();
                if !sub.status.success() {
                    missing.push(format!(
                        "{}: `sp {}` is no command",
                        path.display(),
                        cmd.join(" ")
                    ));
                }
            }
        }
    }
    assert!(
        checked > 20,
        "the docs name controls and commands: {checked}"
    );
    assert!(missing.is_empty(), "{}", missing.join("\n"));

    let install = std::fs::read_to_string(root.join("install.sh")).unwrap();
    let list = install
        .lines()
        .find_map(|l| l.strip_prefix("binaries=\""))
        .expect("install.sh lists its binaries");
    let n = list.trim_end_matches('"').split_whitespace().count();
    let word = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
    ][n];
    let guide = std::fs::read_to_string(root.join("docs/install.md")).unwrap();
    assert!(
        guide.contains(&format!("copies {word} binaries")),
        "docs/install.md says install.sh copies {word} binaries"
    );
}

/// Every binary's `--help` (and each of `sp`'s commands') names its variables and files and
/// cites no note outside the repository: a `.md` it names is in it.
#[test]
fn help_texts_list_their_files_and_cite_only_the_repository() {
    let env = Env::new();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut texts = Vec::new();
    for name in [
        "sp",
        "sp-sync",
        "sp-permission",
        "sp-stop",
        "sp-event",
        "sp-acp",
        "sp-receiver",
    ] {
        let path = if name == "sp-acp" {
            env!("CARGO_BIN_EXE_sp-acp").into()
        } else {
            bin(name)
        };
        let out = Command::new(path).arg("--help").output().unwrap();
        assert!(out.status.success(), "{name} --help");
        texts.push((name.to_string(), stdout(&out)));
    }
    let acp = &texts[5].1;
    for needle in [
        "SESSIONPIPE_CONFIG",
        "SESSIONPIPE_STATE_DIR",
        "SESSIONPIPE_LOG",
        "control.db",
        "sp.log",
    ] {
        assert!(acp.contains(needle), "sp-acp --help lacks {needle}");
    }
    let sp_help = texts[0].1.clone();
    let mut subs: Vec<Vec<String>> = Vec::new();
    let commands = |help: &str| -> Vec<String> {
        help.split("\nCommands:\n")
            .nth(1)
            .unwrap_or("")
            .lines()
            .take_while(|l| !l.is_empty())
            .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
            .filter_map(|l| l.split_whitespace().next().map(String::from))
            .filter(|c| c != "help")
            .collect()
    };
    for c in commands(&sp_help) {
        let out = sp_cmd(&env, &["help", c.as_str()]).output().unwrap();
        let text = stdout(&out);
        for s in commands(&text) {
            subs.push(vec![c.clone(), s]);
        }
        subs.push(vec![c]);
    }
    for args in &subs {
        let mut a: Vec<&str> = vec!["help"];
        a.extend(args.iter().map(String::as_str));
        let out = sp_cmd(&env, &a).output().unwrap();
        texts.push((format!("sp {}", args.join(" ")), stdout(&out)));
    }
    assert!(texts.len() > 20, "{} help texts", texts.len());
    let mut bad = Vec::new();
    for (name, text) in &texts {
        // Spelled in pieces so that tests/doc_refs.rs does not read this list as citations.
        let notes = [
            concat!("DECI", "SIONS"),
            concat!("CONTROL", ".md"),
            concat!("HTTP", ".md"),
            "SPEC",
            "§",
        ];
        for note in notes {
            if text.contains(note) {
                bad.push(format!("{name} --help cites {note}"));
            }
        }
        for word in text.split(|c: char| c.is_whitespace() || "(),`'\"".contains(c)) {
            if let Some(stem) = word.strip_suffix(".md") {
                let file = format!("{stem}.md");
                if !root.join(&file).exists() && !root.join("docs").join(&file).exists() {
                    bad.push(format!("{name} --help cites {file}, not in the repository"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

const LOGIN: &str = "page-login-token-for-the-away-test";

/// The page's view of the person's Away switch (`GET /page/api/state`).
fn page_away(env: &Env) -> bool {
    let r = common::http::get(
        &format!("{}/page/api/state", env.receiver.url()),
        &[("authorization", &format!("Bearer {LOGIN}"))],
    );
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()["away"].as_bool().expect("state has away")
}

/// One away state: `sp away on` turns the page's Away switch on, the page's switch is what
/// `sp away status` and `sp status` then say (after sp-sync's next poll), in plain words.
#[test]
fn sp_away_and_the_pages_switch_are_one_state_and_status_shows_it() {
    let env = Env::with(
        ReceiverOptions {
            login_token: Some(LOGIN.into()),
            ..ReceiverOptions::default()
        },
        json!({}),
    );
    session_start(&env, CC_SESSION);
    assert!(!page_away(&env));
    let out = sp(&env, &["away", "on"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("The page's Away switch on phone is now on."));
    assert!(page_away(&env), "sp away on sets the page's switch");
    let s = sp_json(&env, &["status", "--json"]);
    assert_eq!(s["away"]["away"], true, "{s}");
    assert_eq!(s["away"]["set_by"], "this machine", "{s}");
    let text = stdout(&sp(&env, &["status"]));
    assert!(
        text.contains("you:      away (set on this machine with `sp away` at "),
        "{text}"
    );
    let said = stdout(&sp(&env, &["away", "status"]));
    assert!(said.starts_with("away (set on this machine"), "{said}");
    assert!(!said.contains("local"), "{said}");

    // The page's switch, heard in sp-sync's next poll, is the word both read.
    let r = common::http::post(
        &format!("{}/page/api/away", env.receiver.url()),
        &[("authorization", &format!("Bearer {LOGIN}"))],
        "application/json",
        r#"{"away": false}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(env.sync_once().status.success());
    let said = stdout(&sp(&env, &["away", "status"]));
    assert!(
        said.starts_with("at the desk (set from the page's Away switch, receiver phone, at "),
        "{said}"
    );
    let s = sp_json(&env, &["status", "--json"]);
    assert_eq!(s["away"]["away"], false, "{s}");
    assert_eq!(s["away"]["set_by"], "the page", "{s}");
    assert_eq!(s["away"]["sink"], "phone", "{s}");
}

/// Prompts are named by the machine: with no `machine` in the config, the events carry the
/// host name (the name `sp pair` shows), never nothing (the page's "unnamed machine").
#[test]
fn events_name_the_machine_by_its_host_name() {
    let env = Env::new();
    session_start(&env, CC_SESSION);
    assert!(env.sync_once().status.success());
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let events = env.receiver.events();
    assert!(!events.is_empty());
    for e in &events {
        let m = e["session"]["machine"].as_str().unwrap_or("");
        assert!(!m.is_empty(), "an event without its machine: {e}");
        if !host.is_empty() {
            assert_eq!(m, host, "{e}");
        }
    }
    // A name in the config wins.
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(&env.config).unwrap()).unwrap();
    cfg["machine"] = json!("studio-laptop");
    env.write_config(cfg);
    session_start(&env, OTHER_SESSION);
    assert!(env.sync_once().status.success());
    let named = env
        .receiver
        .events()
        .into_iter()
        .find(|e| e["session"]["id"] == OTHER_SESSION)
        .expect("the second session's event");
    assert_eq!(named["session"]["machine"], "studio-laptop");
}

/// Hooks registered wrong (`--harnes`, `claud-code`) and stdin that is no hook payload: the
/// hooks, run as the harness runs them at the default log level, log why; `sp doctor` reads
/// the log, fails, and names each one with its fix.
#[test]
fn doctor_reports_hooks_registered_wrong_from_the_log() {
    let env = Env::new();
    let claude = env.home.join(".claude");
    std::fs::create_dir_all(&claude).unwrap();
    let perm = bin("sp-permission");
    let stop = bin("sp-stop");
    let wrong = [
        format!("{} --harnes claude-code", perm.display()),
        format!("{} --harness claud-code", stop.display()),
    ];
    std::fs::write(
        claude.join("settings.json"),
        json!({"hooks": {
            "PermissionRequest": [{"matcher": "*", "hooks": [{"type": "command", "command": wrong[0]}]}],
            "Stop": [{"hooks": [{"type": "command", "command": wrong[1]}]}],
        }})
        .to_string(),
    )
    .unwrap();
    let run_as_harness = |command: &str, stdin: &[u8]| {
        let mut c = Command::new("sh");
        c.args(["-c", command])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &env.home)
            .env("SESSIONPIPE_CONFIG", &env.config)
            .env("SESSIONPIPE_STATE_DIR", &env.state)
            .env("SESSIONPIPE_NO_SPAWN", "1")
            .current_dir(&env.home);
        let out = run_with_stdin(c, stdin);
        assert_eq!(out.status.code(), Some(0), "a hook never breaks its host");
        assert!(out.stdout.is_empty(), "and prints nothing");
    };
    run_as_harness(
        &wrong[0],
        &serde_json::to_vec(&payload(CC_PERMISSION)).unwrap(),
    );
    run_as_harness(&wrong[1], &serde_json::to_vec(&payload(CC_STOP)).unwrap());
    // Not a hook payload at all, to a hook registered right: a trace at the default level.
    run_as_harness(
        &format!("{} --harness claude-code", bin("sp-event").display()),
        b"hello from a person trying it",
    );
    let log = env.log();
    assert!(
        log.contains("WARN sp-event[") && log.contains("not a hook payload"),
        "{log}"
    );

    let out = sp(&env, &["doctor"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    for needle in [
        "[FAIL] sp-permission logged 1 time(s) in the last day",
        "unknown argument \"--harnes\"",
        "[FAIL] sp-stop logged 1 time(s) in the last day",
        "unknown harness \"claud-code\"",
        "run `sp setup install` to register the hooks again",
        "[warn] sp-event logged 1 time(s) in the last day",
        "not a hook payload of claude-code",
    ] {
        assert!(text.contains(needle), "doctor lacks {needle:?}:\n{text}");
    }
}

/// A config with a value of the wrong type says which key and what it takes, in words, and
/// the shape it shows names `token_file` (what `sp sink add` writes); the value stays out.
#[test]
fn a_wrong_type_in_the_config_names_the_key_and_what_it_takes() {
    let env = Env::new();
    let text = format!(
        "{{\n  \"sinks\": [\n    {{\n      \"name\": \"phone\",\n      \"url\": \"{}\",\n      \"tier\": \"secret-ish\",\n      \"control\": true,\n      \"token_file\": \"/nope\"\n    }}\n  ]\n}}\n",
        env.receiver.url()
    );
    std::fs::write(&env.config, text).unwrap();
    let out = sp(&env, &["status"]);
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"tier\" should be a whole number from 0 to 255 (line 6 column"),
        "{err}"
    );
    assert!(
        err.contains("\"token_file\"}]"),
        "the shape names token_file: {err}"
    );
    assert!(!err.contains("secret-ish"), "{err}");
    assert!(!err.contains("expected u8"), "{err}");
}

/// This machine's receiver is down: doctor says how to start it again (install.sh's
/// command, or its systemd user service where there is one).
#[test]
fn doctor_says_how_to_start_the_local_receiver_again() {
    let env = Env::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    env.write_config(json!({"sinks": [{"name": "local", "url": format!("http://127.0.0.1:{port}"), "tier": 1, "control": true, "token": "t-for-a-receiver-that-is-down"}]}));
    let out = sp(&env, &["doctor"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_sp")).with_file_name("sp-receiver");
    assert!(
        text.contains(&format!(
            "if it is this machine's sp-receiver, start it again: nohup {} >>",
            bin.display()
        )),
        "{text}"
    );
    let unit = env.home.join(".config/systemd/user/sp-receiver.service");
    std::fs::create_dir_all(unit.parent().unwrap()).unwrap();
    std::fs::write(&unit, "[Service]\n").unwrap();
    let text = stdout(&sp(&env, &["doctor"]));
    assert!(
        text.contains("start it again: systemctl --user start sp-receiver"),
        "{text}"
    );
}

/// A signed sink added again (a reinstall, after uninstall removed it) where this machine
/// still holds a passkey for it: no claim that pairing is needed.
#[test]
fn sink_add_again_with_a_passkey_enrolled_says_no_pairing_is_needed() {
    let env = Env::with(
        ReceiverOptions {
            rp_id: Some("localhost".into()),
            ..ReceiverOptions::default()
        },
        json!({}),
    );
    session_start(&env, CC_SESSION);
    std::fs::remove_file(&env.config).unwrap();
    let tf = token_file(&env, 0o600);
    let url = env.receiver.url();
    let out = sink_add(&env, &url, &tf, &["--signed", "--name", "local"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("Nothing it carries runs until you pair: sp pair local"));
    env.db()
        .execute(
            "INSERT INTO control_keys(sink, id, alg, spki, name, added_at, added_via) \
             VALUES ('local', 'cred-1', -7, 'spki', 'phone', '2026-01-01T00:00:00.000Z', 'pair')",
            [],
        )
        .unwrap();
    assert!(sp(&env, &["sink", "remove", "local"]).status.success());
    let out = sink_add(&env, &url, &tf, &["--signed", "--name", "local"]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(
        text.contains("This machine is already paired with local (1 passkey(s)"),
        "{text}"
    );
    assert!(!text.contains("until you pair"), "{text}");
}

/// DECISIONS 39: a start runs a harness from sp-sync's PATH, and cron gives sp-sync its own
/// bare one; `sp doctor` says when a harness found in this shell is not found there, and
/// how to fix it, and says ok once the crontab's PATH has it.
#[test]
fn doctor_checks_a_harness_to_start_is_on_sp_syncs_path_as_cron_runs_it() {
    let env = Env::new();
    env.write_config(json!({
        "sinks": [{"name": "phone", "url": env.receiver.url(), "tier": 1, "control": "signed", "token": env.receiver.token()}],
        "control": {"folders": ["/tmp"]},
    }));
    let bin = env.dir.path().join("agents");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("claude"), "#!/bin/sh\nexit 0\n").unwrap();
    set_mode(&bin.join("claude"), 0o755);
    let crontab_file = env.dir.path().join("crontab.txt");
    let crontab = env.dir.path().join("fake-crontab");
    std::fs::write(
        &crontab,
        format!(
            "#!/bin/sh\n[ \"$1\" = -l ] && cat '{}'\n",
            crontab_file.display()
        ),
    )
    .unwrap();
    set_mode(&crontab, 0o755);
    let line = "* * * * * /opt/sp/sp-sync >/dev/null 2>&1 # sessionpipe: sp-sync every minute";
    let doctor = || {
        let mut c = sp_cmd(&env, &["doctor"]);
        c.env("SP_CRONTAB", &crontab)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()));
        stdout(&c.output().unwrap())
    };
    std::fs::write(&crontab_file, format!("{line}\n")).unwrap();
    let text = doctor();
    let claude = bin.join("claude");
    assert!(
        text.contains(&format!(
            "[warn] claude-code is at {} but not on sp-sync's PATH as cron runs it (/usr/bin:/bin)",
            claude.display()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("add a line PATH={}:/usr/bin:/bin", bin.display())),
        "{text}"
    );
    std::fs::write(
        &crontab_file,
        format!("PATH={}:/usr/bin:/bin\n{line}\n", bin.display()),
    )
    .unwrap();
    let text = doctor();
    assert!(
        text.contains(&format!(
            "[ok]   sp-sync can start claude-code ({}) as cron runs it",
            claude.display()
        )),
        "{text}"
    );
}
