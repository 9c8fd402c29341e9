//! Issue 6 §5, secrets and access: the token never appears in logs, the database, `sp`'s
//! output or error messages; a config others can read is refused; `http://` goes only to
//! loopback; the state folder and its files are created 0700 / 0600 whatever the umask; a
//! message never reaches a session other than the one it was polled for.
mod common;
use common::chaos::*;
use common::env::*;
use serde_json::json;
use spreceiver::{Fault, ReceiverOptions, Route};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

const TOKEN: &str = "sp-tok-Zq8Vb3Kx7Wm2Lp9Rt4Yc";

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn grep_bytes(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// Every file under `dir`, recursively.
fn files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(files(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

fn output_text(mut c: Command) -> String {
    let o = c.output().unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn the_token_never_leaks() {
    let env = Env::with(
        ReceiverOptions {
            token: TOKEN.into(),
            wait_max_s: 1,
            ..Default::default()
        },
        json!({"permission_wait_s": 2}),
    );
    make_live(&env, "secret-a");
    // A run through every path that writes text: faults of each kind, a 401 on each route
    // (the pauses write reasons), a delivered prompt, a permission that times out.
    for f in [
        Fault::Status(500),
        Fault::Reset,
        Fault::Truncated,
        Fault::InvalidJson,
    ] {
        env.receiver.push_fault(Route::Poll, f.clone());
        env.receiver.push_fault(Route::Ack, f.clone());
    }
    // Events back off 2 s, 10 s, 60 s…: two failures keep the test short.
    env.receiver.push_fault(Route::Events, Fault::Status(500));
    env.receiver.push_fault(Route::Events, Fault::Reset);
    let mut sync = SyncGuard::start(&env);
    let m = env.receiver.enqueue(
        &cc_key("secret-a"),
        json!({"kind": "prompt", "text": "hello", "expires_in_s": 600}),
    );
    assert!(wait_stored(
        &env,
        m["id"].as_str().unwrap(),
        Duration::from_secs(60)
    ));
    assert!(stop_now(&env, "secret-a").is_some());
    // The Stop ending the turn it started writes its final ack (DECISIONS 38).
    assert_eq!(stop_now(&env, "secret-a"), None);
    assert!(env
        .receiver
        .wait_ack(m["id"].as_str().unwrap(), Duration::from_secs(60))
        .is_some());
    let (p, _) = cc_permission("secret-a", "p", "ls");
    let _ = env.hook_json("sp-permission", &p);
    env.receiver.push_fault(Route::Events, Fault::Status(401));
    env.receiver.push_fault(Route::Poll, Fault::Status(401));
    make_live(&env, "secret-b");
    assert!(eventually(Duration::from_secs(20), || q1(
        &env,
        "SELECT count(*) FROM sinks WHERE control_paused IS NOT NULL AND events_paused IS NOT NULL"
    ) == 1));
    sync.stop();
    // sp's every read-only view.
    let mut texts = Vec::new();
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["queue"],
        &["queue", "--json"],
        &["doctor"],
        &["sink", "list"],
        &["sink", "list", "--json"],
        &["--help"],
    ] {
        let mut c = sp_cmd(&env);
        c.args(args);
        texts.push((format!("sp {}", args.join(" ")), output_text(c)));
    }
    let mut c = env.cmd("sp-sync");
    c.arg("--once");
    texts.push(("sp-sync --once".into(), output_text(c)));
    // Config errors next to the token.
    let cfg = |sink: serde_json::Value| json!({"sinks": [sink]});
    let url = env.receiver.url();
    let bad = [
        (
            "readable config",
            cfg(json!({"name": "phone", "url": url, "control": true, "token": TOKEN})),
            Some(0o644),
        ),
        (
            "unknown field",
            cfg(
                json!({"name": "phone", "url": url, "control": true, "token": TOKEN, "tokn": TOKEN}),
            ),
            None,
        ),
        (
            "bad url",
            cfg(
                json!({"name": "phone", "url": "http://example.com", "control": true, "token": TOKEN}),
            ),
            None,
        ),
        (
            "token and token_file",
            cfg(
                json!({"name": "phone", "url": url, "control": true, "token": TOKEN, "token_file": "/nonexistent"}),
            ),
            None,
        ),
        (
            "token of the wrong type",
            cfg(json!({"name": "phone", "url": url, "control": true, "token": [TOKEN]})),
            None,
        ),
        (
            "tier of the wrong type",
            cfg(
                json!({"name": "phone", "url": url, "control": true, "token": TOKEN, "tier": TOKEN}),
            ),
            None,
        ),
        (
            "token as a number",
            cfg(
                json!({"name": "phone", "url": url, "control": true, "token": 98765432123456789u64, "tier": 98765432123456789u64}),
            ),
            None,
        ),
    ];
    for (what, config, m) in bad {
        env.write_config(config);
        if let Some(m) = m {
            set_mode(&env.config, m);
        }
        let mut c = env.cmd("sp-sync");
        c.arg("--once");
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{what}: refused");
        texts.push((
            format!("sp-sync with {what}"),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        ));
        texts.push((
            format!("sp status with {what}"),
            output_text({
                let mut c = sp_cmd(&env);
                c.arg("status");
                c
            }),
        ));
    }
    // A JSON syntax error right inside the token string.
    std::fs::write(
        &env.config,
        format!("{{\"sinks\":[{{\"name\":\"phone\",\"url\":\"{url}\",\"token\":\"{TOKEN}\n\"}}]}}"),
    )
    .unwrap();
    set_mode(&env.config, 0o600);
    texts.push((
        "syntax error in the token".into(),
        output_text({
            let mut c = env.cmd("sp-sync");
            c.arg("--once");
            c
        }),
    ));
    for (what, t) in &texts {
        assert!(!t.contains(TOKEN), "{what} shows the token:\n{t}");
        assert!(
            !t.contains("98765432123456789"),
            "{what} shows a number given as the token:\n{t}"
        );
    }
    // The log and every file of the state folder (database, WAL, lock).
    let all = files(&env.state);
    assert!(all.iter().any(|p| p.ends_with("control.db")));
    for p in &all {
        let bytes = std::fs::read(p).unwrap();
        assert!(
            !grep_bytes(&bytes, TOKEN),
            "{} holds the token",
            p.display()
        );
    }
    // On the wire: only ever in the authorization header, never in a URL or body, and not
    // sent to discovery at all.
    for r in env.receiver.requests() {
        assert!(
            !r.url.contains(TOKEN) && !grep_bytes(&r.body, TOKEN),
            "{} {}",
            r.method,
            r.url
        );
        for (k, v) in &r.headers {
            if v.contains(TOKEN) {
                assert_eq!(k, "authorization");
                assert_ne!(
                    r.route,
                    Some(Route::WellKnown),
                    "discovery carries no token"
                );
            }
        }
    }
    figure(
        "secrets",
        "token_leak_checks",
        texts.len() + all.len() + env.receiver.requests().len(),
    );
}

#[test]
fn a_config_or_token_file_others_can_read_is_refused() {
    let env = Env::with(
        ReceiverOptions {
            token: TOKEN.into(),
            ..Default::default()
        },
        json!({"permission_wait_s": 30}),
    );
    let url = env.receiver.url();
    let with_token = json!({"sinks": [{"name": "phone", "url": url, "control": true, "token": TOKEN}], "control": {"permission_wait_s": 30}});
    for m in [0o644, 0o640, 0o604, 0o660, 0o606] {
        env.write_config(with_token.clone());
        set_mode(&env.config, m);
        let mut c = env.cmd("sp-sync");
        c.arg("--once");
        let o = c.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "mode {m:o} refused");
        assert!(
            err.contains("readable by others") && err.contains("chmod 600"),
            "says how to fix it: {err}"
        );
        // A hook does not trust it either: no sink, so no wait and nothing printed.
        let t0 = std::time::Instant::now();
        let (p, _) = cc_permission("perm-mode", &format!("{m}"), "ls");
        let out = env.hook_json("sp-permission", &p);
        assert!(out.status.success() && out.stdout.is_empty());
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "mode {m:o}: the hook did not wait on an untrusted config"
        );
    }
    // A token file others can read: the same.
    let tf = env.dir.path().join("token");
    std::fs::write(&tf, TOKEN).unwrap();
    set_mode(&tf, 0o644);
    env.write_config(
        json!({"sinks": [{"name": "phone", "url": url, "control": true, "token_file": tf}]}),
    );
    let mut c = env.cmd("sp-sync");
    c.arg("--once");
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("token file"));
    // 0600: accepted. A config without a token may be world-readable.
    set_mode(&tf, 0o600);
    let mut c = env.cmd("sp-sync");
    c.arg("--once");
    assert_eq!(c.output().unwrap().status.code(), Some(0));
    env.write_config(json!({"sinks": [{"name": "phone", "url": url, "control": false}]}));
    set_mode(&env.config, 0o644);
    let mut c = env.cmd("sp-sync");
    c.arg("--once");
    assert_eq!(c.output().unwrap().status.code(), Some(0));
}

#[test]
fn plain_http_goes_only_to_loopback() {
    let env = Env::new();
    let port = env.receiver.port();
    let refused = [
        "http://example.com".to_string(),
        "http://10.0.0.1:8080/x".into(),
        "http://192.168.1.1".into(),
        "http://127.0.0.1.evil.example/".into(),
        format!("http://127.0.0.1:{port}@example.com/"),
        "http://localhost@example.com/".into(),
        "http://[::1]@example.com/".into(),
        "http://0x7f000001/".into(),
        "ftp://127.0.0.1/".into(),
        "HTTP://example.com/".into(),
    ];
    for url in &refused {
        env.write_config(
            json!({"sinks": [{"name": "phone", "url": url, "control": true, "token": "t"}]}),
        );
        let mut c = env.cmd("sp-sync");
        c.arg("--once");
        let o = c.output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(2),
            "{url} refused: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    for url in [
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}/"),
        "https://example.com/x".into(),
    ] {
        assert!(spctl::config::check_url(&url).is_ok(), "{url}");
    }
    // A receiver's well-known cannot send the token elsewhere over plain http either.
    let wk = |ev: &str| {
        format!(
            r#"{{"protocol":[1],"max_tier":1,"capabilities":["events","control"],"endpoints":{{"events":"{ev}","control":"/c"}},"batch":{{"max_events":10,"max_bytes":2048}}}}"#
        )
    };
    assert!(
        spctl::sync::wellknown::parse("http://127.0.0.1:9", &wk("http://example.com/e")).is_err()
    );
    assert!(spctl::sync::wellknown::parse(
        "http://127.0.0.1:9",
        &wk("http://127.0.0.1:9@example.com/e")
    )
    .is_err());
    assert!(spctl::sync::wellknown::parse("http://127.0.0.1:9", &wk("/e")).is_ok());
    figure(
        "secrets",
        "non_loopback_http_urls_refused",
        refused.len() + 2,
    );
}

#[test]
fn state_folder_and_files_are_private_whatever_the_umask() {
    for umask in [0o000u32, 0o022, 0o077] {
        let env = Env::new();
        assert!(!env.state.exists());
        let run = |bin: &str, stdin: &serde_json::Value| {
            let mut c = env.cmd(bin);
            c.args(["--harness", "claude-code"]);
            unsafe {
                c.pre_exec(move || {
                    libc::umask(umask as libc::mode_t);
                    Ok(())
                });
            }
            run_with_stdin(c, stdin.to_string().as_bytes())
        };
        assert!(run("sp-event", &cc_start("modes")).status.success());
        let mut c = env.cmd("sp-sync");
        c.arg("--once");
        unsafe {
            c.pre_exec(move || {
                libc::umask(umask as libc::mode_t);
                Ok(())
            });
        }
        assert!(c.output().unwrap().status.success());
        assert_eq!(mode(&env.state), 0o700, "umask {umask:o}: state folder");
        for f in files(&env.state) {
            assert_eq!(mode(&f), 0o600, "umask {umask:o}: {}", f.display());
        }
        let names: Vec<String> = files(&env.state)
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.contains(&"control.db".to_string()) && names.contains(&"sp.log".to_string()),
            "{names:?}"
        );
    }
}

#[test]
fn a_message_never_reaches_another_session() {
    let env = Env::with(
        ReceiverOptions {
            wait_max_s: 2,
            ..Default::default()
        },
        json!({"permission_wait_s": 3}),
    );
    for s in ["iso-a", "iso-b"] {
        make_live(&env, s);
    }
    let mut sync = SyncGuard::start(&env);
    // A body that names the other session, and one message id redelivered under both.
    let a = env.receiver.enqueue(&cc_key("iso-a"), json!({"kind": "prompt", "text": "for a only", "session": "claude-code:iso-b", "expires_in_s": 600}));
    assert!(wait_stored(
        &env,
        a["id"].as_str().unwrap(),
        Duration::from_secs(20)
    ));
    env.receiver.enqueue_raw(&cc_key("iso-b"), a.clone());
    // An answer for b's attention sent on a's poll is no answer for b.
    let (pb, att_b) = cc_permission("iso-b", "iso", "ls");
    let hook_b = env.spawn_hook("sp-permission", &pb);
    assert!(eventually(Duration::from_secs(10), || q1(
        &env,
        "SELECT count(*) FROM attention WHERE state='open'"
    ) == 1));
    let wrong = env.receiver.enqueue(
        &cc_key("iso-a"),
        json!({"kind": "permission.answer", "for": att_b, "decision": "allow"}),
    );
    assert_eq!(
        env.receiver
            .wait_ack(wrong["id"].as_str().unwrap(), Duration::from_secs(20))
            .unwrap()["outcome"],
        "failed"
    );
    let out = finish(hook_b, Duration::from_secs(20));
    assert!(out.stdout.is_empty(), "b was never allowed");
    std::thread::sleep(Duration::from_secs(1));
    assert!(stop_now(&env, "iso-b").is_none(), "b never gets a's prompt");
    assert!(stop_now(&env, "iso-a").unwrap().contains("for a only"));
    assert!(stop_now(&env, "iso-b").is_none());
    // The Stop ending the turn a's prompt started writes its final ack (DECISIONS 38).
    assert!(stop_now(&env, "iso-a").is_none());
    assert_eq!(
        env.query::<String>(&format!(
            "SELECT session_key FROM messages WHERE id='{}'",
            a["id"].as_str().unwrap()
        )),
        vec![cc_key("iso-a")]
    );
    assert!(eventually(Duration::from_secs(20), || settled(&env)));
    sync.stop();
    check_final_state(&env);
}
