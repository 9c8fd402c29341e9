//! Issue 6 §4, hostile input. Three layers:
//! * the fuzz properties (`fuzz/props.rs`, shared with the cargo-fuzz targets) replayed over
//!   the stored corpus `fuzz/corpus/<target>/` and run under proptest;
//! * each named kind of hostile hook stdin (oversized, deep JSON, invalid UTF-8, NUL bytes,
//!   huge numbers, duplicate keys, wrong types) through the real hook binaries: exit 0, print
//!   nothing, bounded memory;
//! * hostile control messages through the real receiver and sp-sync, and the allow property
//!   end to end: a waiting sp-permission prints allow only for a matching, valid, unexpired
//!   answer.
mod common;
#[path = "../../../fuzz/props.rs"]
mod props;

use common::chaos::*;
use common::env::*;
use proptest::prelude::*;
use serde_json::{json, Value};
use spreceiver::ReceiverOptions;
use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A fuzz target's property: panics when the input breaks it.
type Property = fn(&[u8]);

const TARGETS: &[(&str, Property)] = &[
    ("hook_stdin", props::hook_stdin),
    ("render", props::render),
    ("control_message", props::control_message),
    ("permission_flow", props::permission_flow),
    ("url", props::url),
    ("signed_command", props::signed_command),
];

/// Every input the fuzzer kept (and every crash it ever found, fixed since) still holds.
#[test]
fn the_fuzz_corpus_still_holds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut total = 0;
    for (name, f) in TARGETS {
        let mut n = 0;
        for dir in [
            root.join("corpus").join(name),
            root.join("regressions").join(name),
        ] {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in rd.flatten() {
                let data = std::fs::read(e.path()).unwrap();
                let r = std::panic::catch_unwind(|| f(&data));
                assert!(r.is_ok(), "{name}: {} fails", e.path().display());
                n += 1;
            }
        }
        figure("hostile", &format!("corpus_{name}"), n);
        total += n;
    }
    assert!(total > 0, "a corpus is stored under fuzz/corpus");
}

/// JSON values with the keys hook payloads and control messages use, nested, of every type.
fn arb_json() -> impl Strategy<Value = Value> {
    let keys = prop::sample::select(vec![
        "session_id",
        "sessionId",
        "hook_event_name",
        "hookEventName",
        "tool_name",
        "toolName",
        "tool_input",
        "toolArgs",
        "prompt_id",
        "turn_id",
        "tool_use_id",
        "cwd",
        "source",
        "agent_id",
        "id",
        "kind",
        "for",
        "decision",
        "text",
        "note",
        "at",
        "expires_at",
        "messages",
        "notification_type",
        "event",
        "properties",
        "sessionID",
        "type",
        "status",
        "conversation_id",
        "command",
        "x",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        prop::sample::select(vec![
            "PermissionRequest",
            "Stop",
            "SessionStart",
            "SessionEnd",
            "PostToolUse",
            "UserPromptSubmit",
            "Notification",
            "ToolPermission",
            "permission.answer",
            "prompt",
            "cancel",
            "allow",
            "deny",
            "Bash",
            "s1",
            "01K6ABCDEFGHJKMNPQRSTVWXYZ",
            "2026-09-28T02:10:00.000Z",
            "2099-01-01T00:00:00.000Z",
            "beforeShellExecution",
            "permissionRequest",
            "agentStop",
            "PreToolUse",
            "session.idle",
            "",
        ])
        .prop_map(|s| json!(s)),
        "\\PC{0,40}".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((keys.clone(), inner), 0..8).prop_map(|kv| Value::Object(
                kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
            )),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: env_usize("SP_PROPTEST_CASES", 512) as u32, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn prop_hook_stdin_bytes(data in prop::collection::vec(any::<u8>(), 0..512)) {
        props::hook_stdin(&data);
    }

    #[test]
    fn prop_hook_stdin_json(v in arb_json()) {
        props::hook_stdin(v.to_string().as_bytes());
    }

    #[test]
    fn prop_render_never_changes_shape(s in "\\PC{0,200}|.*\"behavior\":\"allow\".*|[\\x00-\\x1f\"\\\\]{0,20}") {
        props::render(s.as_bytes());
    }

    #[test]
    fn prop_signed_command(v in arb_json(), s in "\\PC{0,200}") {
        props::signed_command(v.to_string().as_bytes());
        props::signed_command(s.as_bytes());
        let cmd = json!({"v": 1, "t": "sessionpipe.control", "machine": "m_testmachine0000000001", "kind": "prompt",
            "session": "codex:a", "text": s, "nonce": "AAAAAAAAAAAAAAAAAAAAAA", "iat": 1});
        props::signed_command(cmd.to_string().as_bytes());
        props::signed_command(json!({"cmd": cmd.to_string(), "csig": "AAAA", "grant": v}).to_string().as_bytes());
    }

    #[test]
    fn prop_control_message(v in arb_json()) {
        props::control_message(v.to_string().as_bytes());
        props::control_message(json!({"messages": [v]}).to_string().as_bytes());
    }

    #[test]
    fn prop_url(host in prop::sample::select(vec!["127.0.0.1", "localhost", "[::1]", "example.com", "10.0.0.1", "127.0.0.1.evil.com", "evil.com", "0x7f.1", "[::ffff:127.0.0.1]", "LOCALHOST"]),
                user in prop::option::of(prop::sample::select(vec!["127.0.0.1", "127.0.0.1:80", "a:b", "[::1]", "localhost"])),
                port in prop::option::of(0u32..70000),
                tail in prop::sample::select(vec!["", "/", "/x?y=1", "#@127.0.0.1", "?@localhost", "/@127.0.0.1"]),
                scheme in prop::sample::select(vec!["http://", "https://", "HTTP://", "ftp://", ""])) {
        let mut url = scheme.to_string();
        if let Some(u) = user { url.push_str(u); url.push('@'); }
        url.push_str(host);
        if let Some(p) = port { url.push_str(&format!(":{p}")); }
        url.push_str(tail);
        props::url(url.as_bytes());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: env_usize("SP_PROPTEST_CASES", 400) as u32, failure_persistence: None, ..ProptestConfig::default() })]

    /// DECISIONS 10/11 over the store: allow only for a matching, valid, unexpired answer.
    #[test]
    fn prop_permission_flow(data in prop::collection::vec(any::<u8>(), 0..160)) {
        props::permission_flow(&data);
    }
}

// ---------------------------------------------------------------------------------------
// Hostile hook stdin through the real binaries.

/// Address space a hook may use in these runs: a hook that buffered its stdin instead of
/// capping it would fail to allocate (and not exit 0) with the 256 MiB inputs below.
const HOOK_AS_LIMIT: u64 = 192 << 20;

/// Runs a hook with `stdin` followed by `pad` spaces (streamed, never held in memory here),
/// its address space capped at `HOOK_AS_LIMIT`, sampling its peak RSS (`VmHWM`) as it runs.
/// Returns (exit code, stdout, stderr, peak RSS KiB seen).
fn run_measured(
    env: &Env,
    bin: &str,
    stdin: Vec<u8>,
    pad: usize,
) -> (Option<i32>, String, String, u64) {
    use std::os::unix::process::CommandExt;
    let mut c = env.cmd(bin);
    c.args(["--harness", "claude-code"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: HOOK_AS_LIMIT,
                rlim_max: HOOK_AS_LIMIT,
            };
            libc::setrlimit(libc::RLIMIT_AS, &lim);
            Ok(())
        });
    }
    let mut child = c.spawn().unwrap();
    let pid = child.id();
    let mut pipe = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        if pipe.write_all(&stdin).is_err() {
            return;
        }
        let chunk = vec![b' '; 1 << 16];
        let mut left = pad;
        while left > 0 {
            let n = left.min(chunk.len());
            if pipe.write_all(&chunk[..n]).is_err() {
                return;
            }
            left -= n;
        }
    });
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(k) = peak_rss_kib(pid) {
                    peak = peak.max(k);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            peak
        })
    };
    let o = child.wait_with_output().unwrap();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = writer.join();
    let peak = sampler.join().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        peak,
    )
}

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

#[test]
fn hostile_hook_stdin_never_breaks_the_host() {
    let env = Env::with(Default::default(), json!({"permission_wait_s": 1}));
    make_live(&env, "hostile");
    let base = cc_permission("hostile", "p1", "ls").0;
    let with = |k: &str, raw: &str| -> Vec<u8> {
        // `base` with one field's JSON text replaced verbatim.
        let mut m = base.as_object().unwrap().clone();
        m.remove(k);
        let body = Value::Object(m).to_string();
        format!("{{\"{k}\":{raw},{}", &body[1..]).into_bytes()
    };
    let big = spctl::hook::STDIN_CAP as usize;
    let mut pad = base.to_string().into_bytes();
    pad.pop();
    pad.extend_from_slice(b",\"pad\":\"");
    pad.extend(std::iter::repeat_n(b'a', big));
    pad.extend_from_slice(b"\"}");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("oversized: 1 MiB + a valid payload's worth", pad),
        (
            "oversized: a payload, then 256 MiB of spaces",
            cc_stop("hostile").to_string().into_bytes(),
        ),
        (
            "deep JSON: 100 000 nested arrays",
            nested(100_000).into_bytes(),
        ),
        (
            "deep JSON inside tool_input",
            with("tool_input", &format!("{{\"command\":{}}}", nested(50_000))),
        ),
        (
            "deep JSON, 127 levels inside tool_input",
            with(
                "tool_input",
                &format!("{{\"command\":\"x\",\"d\":{}}}", nested(120)),
            ),
        ),
        (
            "invalid UTF-8 in a string",
            [b"{\"session_id\":\"a\xff\xfeb\",\"hook_event_name\":\"Stop\"}".as_ref()].concat(),
        ),
        (
            "invalid UTF-8 in the command",
            with("tool_input", "{\"command\":\"\u{0}\"}")
                .into_iter()
                .map(|b| if b == 0 { 0xff } else { b })
                .collect(),
        ),
        (
            "raw NUL bytes",
            b"{\"session_id\":\"a\0b\",\"hook_event_name\":\"Stop\"}\0\0".to_vec(),
        ),
        (
            "NUL escape in the session id",
            with("session_id", "\"hostile\\u0000x\""),
        ),
        (
            "NUL escape in the command",
            with("tool_input", "{\"command\":\"rm\\u0000 -rf /\"}"),
        ),
        ("huge number as session id", with("session_id", "1e999999")),
        (
            "huge integer in tool_input",
            with(
                "tool_input",
                "{\"command\":123456789012345678901234567890123456789}",
            ),
        ),
        (
            "huge exponent elsewhere",
            with("permission_mode", "-1e-999999"),
        ),
        (
            "duplicate session_id",
            with("session_id", "\"hostile\",\"session_id\":\"other\""),
        ),
        (
            "duplicate hook_event_name",
            with(
                "hook_event_name",
                "\"Stop\",\"hook_event_name\":\"PermissionRequest\"",
            ),
        ),
        ("session_id of the wrong type", with("session_id", "5")),
        (
            "hook_event_name of the wrong type",
            with("hook_event_name", "[\"Stop\"]"),
        ),
        (
            "tool_input of the wrong type",
            with("tool_input", "\"rm -rf /\""),
        ),
        (
            "tool_name of the wrong type",
            with("tool_name", "{\"a\":1}"),
        ),
        (
            "session id that is a path",
            with("session_id", "\"../../etc/passwd\""),
        ),
        (
            "session id of 10 000 characters",
            with("session_id", &format!("\"{}\"", "a".repeat(10_000))),
        ),
        (
            "a top-level array",
            b"[{\"session_id\":\"hostile\",\"hook_event_name\":\"Stop\"}]".to_vec(),
        ),
        (
            "two documents",
            [
                cc_stop("hostile").to_string(),
                cc_stop("hostile").to_string(),
            ]
            .concat()
            .into_bytes(),
        ),
        ("truncated", base.to_string().as_bytes()[..40].to_vec()),
    ];
    let mut max_rss = 0;
    let mut runs = 0;
    for (what, stdin) in &cases {
        let pad = if what.contains("256 MiB") {
            256 << 20
        } else {
            0
        };
        for bin in ["sp-permission", "sp-stop", "sp-event"] {
            let t0 = Instant::now();
            let (code, out, err, rss) = run_measured(&env, bin, stdin.clone(), pad);
            runs += 1;
            assert_eq!(code, Some(0), "{bin} / {what}: exit 0 ({err})");
            assert!(err.is_empty(), "{bin} / {what}: stderr {err}");
            // A payload that still parses as a permission prompt may wait its second and
            // then print nothing: nobody answered.
            assert!(out.is_empty(), "{bin} / {what}: printed {out}");
            assert!(
                t0.elapsed() < Duration::from_secs(15),
                "{bin} / {what}: no hang"
            );
            assert!(rss < 64 * 1024, "{bin} / {what}: peak RSS {rss} KiB");
            max_rss = max_rss.max(rss);
        }
    }
    let log = env.log();
    assert!(
        log.contains("larger than"),
        "the oversized stdin is refused and logged"
    );
    assert!(!log.contains("panic"), "no panic:\n{log}");
    assert_eq!(integrity(&env), "ok");
    figure("hostile", "hook_stdin_cases", cases.len());
    figure("hostile", "hook_runs", runs);
    figure("hostile", "hook_peak_rss_kib_max", max_rss);
}

/// Hostile control messages from the receiver, through sp-sync: each gets the ack its rule
/// says, nothing is acted on wrongly, and a message nobody can parse stalls only its own
/// session's poll, at the back-off rate, with bounded memory.
#[test]
fn hostile_control_messages_are_acked_or_dropped_never_acted_on() {
    let env = Env::with(
        ReceiverOptions {
            wait_max_s: 2,
            ..Default::default()
        },
        json!({}),
    );
    let s = "hostile-msgs";
    make_live(&env, s);
    make_live(&env, "hostile-stuck");
    let mut sync = SyncGuard::start(&env);
    let at = spctl::clock::now_rfc3339();
    let far = "2099-01-01T00:00:00.000Z";
    let mut n = 0;
    let mut id = || {
        n += 1;
        format!("01KHZZZZZZZZZZZZZZZZZZZZ{n:02}")
    };
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!({"kind": "prompt", "text": "x".repeat(20_001), "at": at, "expires_at": far}),
            "failed",
            "text must be at most",
        ),
        (
            json!({"kind": "prompt", "text": "é".repeat(5_000_000), "at": at, "expires_at": far}),
            "failed",
            "text must be at most",
        ),
        (
            json!({"kind": "prompt", "text": "hi", "note": "n".repeat(100_000), "at": at, "expires_at": far}),
            "failed",
            "note must be at most",
        ),
        (
            json!({"kind": "prompt", "text": 1e308, "at": at, "expires_at": far}),
            "failed",
            "text must be a string",
        ),
        (
            json!({"kind": "prompt", "text": "hi", "at": 1e308, "expires_at": far}),
            "failed",
            "at must be a string",
        ),
        (
            json!({"kind": "prompt", "text": "hi", "at": at, "expires_at": "275760-09-13T00:00:00.000Z"}),
            "failed",
            "expires_at must be RFC 3339",
        ),
        (
            json!({"kind": "permission.answer", "for": 5, "decision": "allow", "at": at, "expires_at": far}),
            "failed",
            "for must be a string",
        ),
        (
            json!({"kind": "permission.answer", "for": "perm-x", "decision": true, "at": at, "expires_at": far}),
            "failed",
            "decision must be a string",
        ),
        (
            json!({"kind": "permission.answer", "for": "perm-x", "decision": "allow", "at": at, "expires_at": far}),
            "failed",
            "unknown attention",
        ),
        (
            json!({"kind": "prompt", "text": ["hi"], "at": at, "expires_at": far}),
            "failed",
            "text must be a string",
        ),
        (
            json!({"kind": null, "at": at, "expires_at": far}),
            "failed",
            "kind must be a string",
        ),
        (
            json!({"kind": {"deep": [[[[[[1]]]]]]}, "at": at, "expires_at": far}),
            "failed",
            "kind must be a string",
        ),
        (
            json!({"kind": "x".repeat(100_000), "at": at, "expires_at": far}),
            "unsupported",
            "unknown kind",
        ),
        (
            json!({"kind": "prompt", "text": "NUL \u{0} inside, and \"quotes\" and \\u0000", "at": at, "expires_at": far, "session": "claude-code:someone-else"}),
            "delivered",
            "",
        ),
    ];
    let mut ids = Vec::new();
    for (mut m, outcome, detail) in cases {
        let i = id();
        m["id"] = json!(i);
        env.receiver.enqueue_raw(&cc_key(s), m);
        ids.push((i, outcome, detail));
    }
    // No usable id: nothing can be acked; dropped and logged (the receiver keeps resending).
    env.receiver.enqueue_raw(&cc_key(s), json!({"id": 123456789012345678901234567890u128 as f64, "kind": "prompt", "text": "x", "at": at, "expires_at": far}));
    env.receiver
        .enqueue_raw(&cc_key(s), json!(["not", "an", "object"]));
    // Nesting past the JSON parser's limit makes the whole poll answer unreadable: that
    // session's poll backs off; other sessions carry on.
    let deep: Value = serde_json::from_str(&nested(126)).unwrap();
    let mut wrap = deep;
    for _ in 0..10 {
        wrap = json!([wrap]);
    }
    env.receiver.enqueue_raw("claude-code:hostile-stuck", json!({"id": id(), "kind": "prompt", "text": "x", "at": at, "expires_at": far, "extra": wrap}));
    let prompt_id = ids.last().unwrap().0.clone();
    assert!(wait_stored(&env, &prompt_id, Duration::from_secs(30)));
    let reason = stop_now(&env, s).expect("the one valid prompt is delivered");
    assert!(
        reason.contains("NUL \u{0} inside, and \"quotes\" and \\u0000"),
        "text arrives exactly: {reason:?}"
    );
    // The Stop ending the turn it started writes its final ack (DECISIONS 38).
    assert_eq!(stop_now(&env, s), None);
    for (i, outcome, detail) in &ids {
        let ack = env
            .receiver
            .wait_ack(i, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("ack for {i}"));
        assert_eq!(ack["outcome"], *outcome, "{i}: {ack}");
        assert!(
            ack["detail"].as_str().unwrap_or("").contains(detail),
            "{i}: {ack}"
        );
        assert!(ack["detail"].as_str().unwrap_or("").chars().count() <= 500);
    }
    // The prompt reached only its own session's Stop, whatever its body said.
    assert!(stop_now(&env, "someone-else").is_none());
    let log = env.log();
    assert!(
        log.contains("cannot be acked"),
        "dropped messages are logged"
    );
    assert!(
        log.contains("hostile-stuck"),
        "the stuck session's poll error is logged"
    );
    // No spin, bounded memory.
    let share = {
        let a = cpu_ms(sync.pid()).unwrap();
        std::thread::sleep(Duration::from_secs(5));
        (cpu_ms(sync.pid()).unwrap() - a) as f64 / 5000.0
    };
    let rss = peak_rss_kib(sync.pid()).unwrap();
    assert!(share < 0.25, "sp-sync CPU {:.0}% of a core", share * 100.0);
    assert!(rss < 256 * 1024, "sp-sync peak RSS {rss} KiB");
    sync.stop();
    assert_eq!(integrity(&env), "ok");
    figure("hostile", "control_message_cases", ids.len() + 3);
    figure(
        "hostile",
        "sp_sync_cpu_with_hostile_messages",
        format!("{:.1}%", share * 100.0),
    );
    figure("hostile", "sp_sync_peak_rss_kib_with_10MB_message", rss);
}

/// The allow property end to end, on random cases: each a waiting sp-permission and a few
/// random answers (matching or not in attention and session, allow or deny or garbage,
/// valid or not, expired or not). A printed decision must be one some legitimate answer
/// carried; allow is never printed otherwise.
#[test]
fn allow_is_printed_only_for_a_matching_valid_unexpired_answer() {
    let cases = env_usize("SP_ALLOW_CASES", 48);
    let mut rng = common::chaos::Rng::new(seed());
    let env = Env::with(
        ReceiverOptions {
            wait_max_s: 2,
            ..Default::default()
        },
        json!({"permission_wait_s": 2}),
    );
    make_live(&env, "allow-other");
    let _sync = SyncGuard::start(&env);
    let mut printed = [0usize; 3];
    let mut allow_legit = 0;
    for batch in 0..cases.div_ceil(4) {
        let mut running = Vec::new();
        for k in 0..4 {
            let c = batch * 4 + k;
            if c >= cases {
                break;
            }
            let session = format!("allow-{c}");
            let (payload, attention) =
                cc_permission(&session, &format!("allow-prompt-{c}"), "deploy");
            let hook = env.spawn_hook("sp-permission", &payload);
            running.push((c, session, attention, hook));
        }
        assert!(eventually(Duration::from_secs(10), || {
            running.iter().all(|(_, s, a, _)| {
                db(&env)
                    .query_row(
                        "SELECT count(*) FROM attention WHERE session_key=?1 AND attention_id=?2",
                        [cc_key(s), a.clone()],
                        |r| r.get::<_, i64>(0),
                    )
                    .unwrap_or(0)
                    == 1
            })
        }));
        let mut legit: Vec<Vec<String>> = vec![Vec::new(); running.len()];
        for (slot, (_, session, attention, _)) in running.iter().enumerate() {
            for _ in 0..1 + rng.below(3) {
                let decision = ["allow", "deny", "allow", "Allow", "yes"][rng.below(5) as usize];
                let (target, for_) = match rng.below(6) {
                    0 => ("allow-other".to_string(), attention.clone()),
                    1 => (session.clone(), format!("{attention}x")),
                    2 => (session.clone(), "perm-0000000000000000".to_string()),
                    _ => (session.clone(), attention.clone()),
                };
                let expired = rng.chance(0.2);
                let mut m = json!({"kind": "permission.answer", "for": for_, "decision": decision});
                if expired {
                    // Zero lifetime (expires_at = at, a minute ahead on the receiver's clock):
                    // the receiver still sends it, and its deadline is its receipt.
                    let t = spctl::clock::format_ms(spctl::clock::now_ms() + 60_000);
                    m["at"] = json!(t);
                    m["expires_at"] = json!(t);
                }
                env.receiver.enqueue(&cc_key(&target), m.clone());
                if &target == session
                    && for_ == *attention
                    && !expired
                    && (decision == "allow" || decision == "deny")
                {
                    legit[slot].push(decision.to_string());
                }
            }
        }
        for (slot, (c, _, _, hook)) in running.into_iter().enumerate() {
            let out = finish(hook, Duration::from_secs(20));
            assert_eq!(out.status.code(), Some(0));
            let p = permission_printed(&String::from_utf8_lossy(&out.stdout));
            match p.as_deref() {
                None => printed[0] += 1,
                Some(d) => {
                    assert!(
                        legit[slot].iter().any(|l| l == d),
                        "case {c}: printed {d} but the legitimate answers were {:?}",
                        legit[slot]
                    );
                    if d == "allow" {
                        printed[1] += 1;
                        allow_legit += 1;
                    } else {
                        printed[2] += 1;
                    }
                }
            }
        }
    }
    figure("hostile", "allow_property_cases", cases);
    figure("hostile", "allow_property_printed_nothing", printed[0]);
    figure(
        "hostile",
        "allow_property_printed_allow_all_legitimate",
        allow_legit,
    );
    figure("hostile", "allow_property_printed_deny", printed[2]);
}
