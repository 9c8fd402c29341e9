//! Helpers for the reliability suite (tests/reliability_*.rs): Claude Code payloads for any
//! session, a seeded random source, process kills and CPU accounting, the end-of-run checks
//! every scenario shares, and `FIGURE` lines the long-run script collects for RELIABILITY.md.
#![allow(dead_code)]
use super::env::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// SplitMix64: small, seedable, good enough to pick kill times and workloads.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() as f64 / u64::MAX as f64) < p
    }
    pub fn millis(&mut self, max_ms: u64) -> Duration {
        Duration::from_millis(self.below(max_ms + 1))
    }
}

/// The seed for this process: `SP_SEED` if set, else the clock. Printed so a failure can be
/// replayed with `SP_SEED=<n>`.
pub fn seed() -> u64 {
    let s = std::env::var("SP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("SP_SEED={s}");
    s
}

/// A whole number from the environment (sizes of the long runs), or `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One line the long-run script greps: `FIGURE <scenario> <name>=<value>`.
pub fn figure(scenario: &str, name: &str, value: impl std::fmt::Display) {
    println!("FIGURE {scenario} {name}={value}");
}

pub fn cc_key(session: &str) -> String {
    format!("claude-code:{session}")
}

/// A Claude Code hook payload of `event` for `session`.
pub fn cc(session: &str, event: &str) -> Value {
    json!({
        "session_id": session,
        "transcript_path": format!("/tmp/{session}.jsonl"),
        "cwd": "/tmp/work",
        "permission_mode": "default",
        "hook_event_name": event,
    })
}

pub fn cc_start(session: &str) -> Value {
    let mut v = cc(session, "SessionStart");
    v["source"] = json!("startup");
    v
}

pub fn cc_stop(session: &str) -> Value {
    let mut v = cc(session, "Stop");
    v["stop_hook_active"] = json!(false);
    v
}

/// A PermissionRequest payload and the attention id the hook will mint for it.
pub fn cc_permission(session: &str, prompt_id: &str, command: &str) -> (Value, String) {
    let mut v = cc(session, "PermissionRequest");
    v["prompt_id"] = json!(prompt_id);
    v["tool_name"] = json!("Bash");
    v["tool_input"] = json!({"command": command, "description": "test"});
    let id = spctl::harness::minted_attention_id(prompt_id, "Bash", &v["tool_input"]);
    (v, id)
}

/// Claude Code's exact allow / deny answers.
pub const CC_ALLOW: &str = r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}"#;

/// What a permission hook printed: Some("allow" | "deny") or None for nothing; panics on
/// anything else (a hook must print a whole answer or nothing).
pub fn permission_printed(stdout: &str) -> Option<String> {
    let t = stdout.trim();
    if t.is_empty() {
        return None;
    }
    let v: Value = serde_json::from_str(t)
        .unwrap_or_else(|e| panic!("permission hook printed non-JSON {t:?}: {e}"));
    let b = v["hookSpecificOutput"]["decision"]["behavior"]
        .as_str()
        .unwrap_or_else(|| panic!("unexpected shape {t}"));
    Some(b.to_string())
}

/// The `reason` of a Stop block, or None when the hook printed nothing.
pub fn stop_reason(stdout: &str) -> Option<String> {
    let t = stdout.trim();
    if t.is_empty() {
        return None;
    }
    let v: Value =
        serde_json::from_str(t).unwrap_or_else(|e| panic!("stop hook printed non-JSON {t:?}: {e}"));
    assert_eq!(v["decision"], "block", "{t}");
    Some(v["reason"].as_str().expect("reason").to_string())
}

/// Spawns one of our binaries with stdin written and closed, stdout and stderr piped.
pub fn spawn_with(env: &Env, bin: &str, harness: &str, stdin: &[u8]) -> Child {
    let mut c = env.cmd(bin);
    c.args(["--harness", harness])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn hook");
    use std::io::Write;
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child
}

/// `sp-sync --daemon`, output discarded.
pub fn spawn_sync(env: &Env) -> Child {
    let mut c = env.cmd("sp-sync");
    c.arg("--daemon")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c.spawn().expect("spawn sp-sync")
}

pub fn sigkill(c: &mut Child) {
    let _ = c.kill();
    let _ = c.wait();
}

pub fn sigterm_and_wait(c: &mut Child, patience: Duration) -> Option<std::process::ExitStatus> {
    unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
    let s = wait_timeout(c, patience);
    if s.is_none() {
        let _ = c.kill();
        let _ = c.wait();
    }
    s
}

/// CPU time (user + system) a live process has used, in milliseconds.
pub fn cpu_ms(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the ")" that closes the command name; utime and stime are 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(ticks * 1000 / hz)
}

/// Peak resident set size of a live process, in KiB (`VmHWM`).
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// `PRAGMA integrity_check` through the crate's own opener.
pub fn integrity(env: &Env) -> String {
    let store = spctl::store::open(&env.db_path(), Duration::from_secs(10)).expect("open db");
    store.integrity_check().expect("integrity_check")
}

/// Runs `f` until it returns true or `d` passes (the one "poll until", crates/testkit).
#[allow(unused_imports)]
pub use sessionpipe_testkit::wait::until as eventually;

/// Every stored message (id → (state, outcome, session, kind)).
pub fn db_messages(env: &Env) -> BTreeMap<String, (String, Option<String>, String, String)> {
    let db = db(env);
    let mut st = db
        .prepare("SELECT id, state, outcome, session_key, kind FROM messages")
        .unwrap();
    st.query_map([], |r| {
        Ok((r.get(0)?, (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
    })
    .unwrap()
    .map(|r| r.unwrap())
    .collect()
}

/// Acks at the receiver grouped by id.
pub fn acks_by_id(env: &Env) -> HashMap<String, Vec<Value>> {
    let mut m: HashMap<String, Vec<Value>> = HashMap::new();
    for a in env.receiver.acks() {
        m.entry(a["id"].as_str().unwrap_or_default().to_string())
            .or_default()
            .push(a);
    }
    m
}

/// True when every stored message is final and its ack reached the receiver, and every
/// stored event is past the sink's cursor.
pub fn settled(env: &Env) -> bool {
    let db = db(env);
    let undecided: i64 = db
        .query_row(
            "SELECT count(*) FROM messages WHERE state <> 'done'",
            [],
            |r| r.get(0),
        )
        .unwrap_or(1);
    // A delivered prompt whose turn has not ended has no final ack yet (DECISIONS 38).
    let unsent: i64 = db
        .query_row(
            "SELECT (SELECT count(*) FROM acks WHERE sent_at IS NULL) + (SELECT count(*) FROM turn_waits)",
            [],
            |r| r.get(0),
        )
        .unwrap_or(1);
    let events_left: i64 = db
        .query_row(
            "SELECT (SELECT coalesce(max(rowid),0) FROM events) - coalesce((SELECT min(event_cursor) FROM sinks), 0)",
            [],
            |r| r.get(0),
        )
        .unwrap_or(1);
    undecided == 0 && unsent == 0 && events_left <= 0
}

/// The invariants every scenario ends with:
/// * the database passes `PRAGMA integrity_check`;
/// * every stored message is final, and its final ack reached the receiver; every ack for
///   an id carries the same outcome; no ack names a message we never stored;
/// * every stored event reached the receiver, once per (session, seq), with no gap in seq;
/// * per attention, at most one `attention.cleared` per `attention.needed`.
///
/// Returns the number of acks per outcome.
pub fn check_final_state(env: &Env) -> BTreeMap<String, usize> {
    assert_eq!(integrity(env), "ok", "integrity_check");
    let msgs = db_messages(env);
    let acks = acks_by_id(env);
    let mut outcomes = BTreeMap::new();
    for (id, (state, outcome, _, _)) in &msgs {
        assert_eq!(state, "done", "message {id} is final");
        let outcome = outcome.as_ref().unwrap();
        // A `taken` (DECISIONS 38) may come before the final ack; it is no outcome.
        let got: Vec<&Value> = acks
            .get(id)
            .unwrap_or_else(|| panic!("no ack for {id} ({outcome})"))
            .iter()
            .filter(|a| a["outcome"] != "taken" && a["outcome"] != "progress")
            .collect();
        assert!(!got.is_empty(), "no final ack for {id} ({outcome})");
        for a in got {
            assert_eq!(
                a["outcome"].as_str(),
                Some(outcome.as_str()),
                "ack of {id} agrees with the store: {a}"
            );
        }
        *outcomes.entry(outcome.clone()).or_insert(0) += 1;
    }
    for id in acks.keys() {
        assert!(
            msgs.contains_key(id),
            "ack for a message never stored: {id}"
        );
    }
    // Events: the receiver holds exactly the stored ones.
    let db = db(env);
    let mut st = db
        .prepare("SELECT session_id, seq, type, data FROM events ORDER BY rowid")
        .unwrap();
    let stored: Vec<(String, i64, String, String)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    let mut at_receiver: HashMap<(String, i64), Value> = HashMap::new();
    for e in env.receiver.events() {
        let k = (
            e["session"]["id"].as_str().unwrap().to_string(),
            e["session"]["seq"].as_i64().unwrap(),
        );
        assert!(
            at_receiver.insert(k.clone(), e).is_none(),
            "event accepted twice: {k:?}"
        );
    }
    assert!(
        env.receiver.rejected().is_empty(),
        "receiver rejected events: {:?}",
        env.receiver.rejected()
    );
    let mut per_session: HashMap<String, Vec<i64>> = HashMap::new();
    for (sid, seq, kind, _) in &stored {
        let e = at_receiver
            .get(&(sid.clone(), *seq))
            .unwrap_or_else(|| panic!("event {sid}#{seq} ({kind}) never reached the receiver"));
        assert_eq!(e["type"].as_str(), Some(kind.as_str()));
        per_session.entry(sid.clone()).or_default().push(*seq);
    }
    assert_eq!(
        at_receiver.len(),
        stored.len(),
        "the receiver holds only stored events"
    );
    for (sid, mut seqs) in per_session {
        seqs.sort();
        let want: Vec<i64> = (0..seqs.len() as i64).collect();
        assert_eq!(seqs, want, "seq of {sid} has no gap and starts at 0");
    }
    let mut needed: HashMap<String, i64> = HashMap::new();
    let mut cleared: HashMap<String, i64> = HashMap::new();
    for (sid, _, kind, data) in &stored {
        let d: Value = serde_json::from_str(data).unwrap();
        let a = format!("{sid}/{}", d["attention_id"].as_str().unwrap_or(""));
        match kind.as_str() {
            "attention.needed" => *needed.entry(a).or_default() += 1,
            "attention.cleared" => *cleared.entry(a).or_default() += 1,
            _ => {}
        }
    }
    for (a, n) in &cleared {
        assert!(
            needed.get(a).copied().unwrap_or(0) >= *n,
            "{a}: more cleared than needed"
        );
    }
    outcomes
}

/// Runs a clean `sp-sync --daemon` until `done` holds (or `patience` passes), calling
/// `between` each round (e.g. to run Stops that deliver what is left); then stops it with
/// SIGTERM. Returns whether `done` held.
pub fn finish_cleanly(
    env: &Env,
    patience: Duration,
    mut between: impl FnMut(),
    done: impl Fn() -> bool,
) -> bool {
    let mut sync = spawn_sync(env);
    let end = Instant::now() + patience;
    let mut ok = false;
    while Instant::now() < end {
        between();
        if done() {
            ok = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    sigterm_and_wait(&mut sync, Duration::from_secs(30));
    ok
}

/// A command in the test's environment with extra environment variables.
pub fn with_env(mut c: Command, vars: &[(&str, &str)]) -> Command {
    for (k, v) in vars {
        c.env(k, v);
    }
    c
}

/// Watches the receiver's request log from a thread and stamps each request with the time it
/// was first seen (the log itself has no times). Good to ±5 ms.
pub struct Watch {
    stamps: std::sync::Arc<Mutex<Vec<(Instant, spreceiver::RequestRecord)>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

use std::sync::Mutex;

impl Watch {
    pub fn start(receiver: &spreceiver::Receiver) -> Watch {
        let stamps = std::sync::Arc::new(Mutex::new(
            Vec::<(Instant, spreceiver::RequestRecord)>::new(),
        ));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (r, s, st) = (receiver.clone(), stamps.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            while !st.load(std::sync::atomic::Ordering::Relaxed) {
                let reqs = r.requests();
                let now = Instant::now();
                let mut g = s.lock().unwrap();
                // The receiver logs a request as it arrives and fills in its route and fault
                // once its route takes it: keep each request's first-seen time and its latest
                // record, or one seen in between stays without a route.
                for (i, rq) in reqs.into_iter().enumerate() {
                    match g.get_mut(i) {
                        Some(slot) => slot.1 = rq,
                        None => g.push((now, rq)),
                    }
                }
                drop(g);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Watch {
            stamps,
            stop,
            handle: Some(handle),
        }
    }

    /// Requests to `route` seen so far, with their times.
    pub fn of(&self, route: spreceiver::Route) -> Vec<(Instant, spreceiver::RequestRecord)> {
        self.stamps
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, r)| r.route == Some(route))
            .cloned()
            .collect()
    }

    pub fn count(&self, route: spreceiver::Route) -> usize {
        self.of(route).len()
    }

    /// Waits until at least `n` requests to `route` were seen.
    pub fn wait_count(&self, route: spreceiver::Route, n: usize, d: Duration) -> bool {
        eventually(d, || self.count(route) >= n)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// An sp-sync child that is SIGKILLed when dropped (a failing test leaves nothing behind).
pub struct SyncGuard(pub Option<Child>);

impl SyncGuard {
    pub fn start(env: &Env) -> SyncGuard {
        SyncGuard(Some(spawn_sync(env)))
    }
    pub fn pid(&self) -> u32 {
        self.0.as_ref().map(|c| c.id()).unwrap_or(0)
    }
    /// SIGTERM and wait (a graceful stop).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.0.take() {
            sigterm_and_wait(&mut c, Duration::from_secs(40));
        }
    }
    pub fn restart(&mut self, env: &Env) {
        self.stop();
        self.0 = Some(spawn_sync(env));
    }
}

impl Drop for SyncGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            sigkill(&mut c);
        }
    }
}

/// Makes a Claude Code session live (SessionStart through sp-event).
pub fn make_live(env: &Env, session: &str) {
    let out = env.hook_json("sp-event", &cc_start(session));
    assert!(
        out.status.success() && out.stdout.is_empty(),
        "SessionStart"
    );
}

/// Runs a Stop for `session`; returns the reason of its block, if any.
pub fn stop_now(env: &Env, session: &str) -> Option<String> {
    let out = env.hook_json("sp-stop", &cc_stop(session));
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stderr.is_empty());
    stop_reason(&String::from_utf8_lossy(&out.stdout))
}

/// Waits until sp-sync stored message `id`.
pub fn wait_stored(env: &Env, id: &str, d: Duration) -> bool {
    eventually(d, || {
        db(env)
            .query_row("SELECT count(*) FROM messages WHERE id=?1", [id], |r| {
                r.get::<_, i64>(0)
            })
            .unwrap_or(0)
            == 1
    })
}

/// The test's connection to the database; never creates the file (a test must not be the
/// one that makes it, or its mode would be the test's, not the binaries').
/// Session keys with a queued message or an open attention: the ones a Stop has work for.
pub fn sessions_with_work(env: &Env) -> Vec<String> {
    let db = db(env);
    let mut st = db
        .prepare(
            "SELECT session_key FROM messages WHERE state='queued' \
             UNION SELECT session_key FROM attention WHERE state='open' \
             UNION SELECT session_key FROM turn_waits",
        )
        .unwrap();
    st.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

pub fn db(env: &Env) -> rusqlite::Connection {
    use rusqlite::OpenFlags;
    let c = rusqlite::Connection::open_with_flags(
        env.db_path(),
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .expect("the database exists");
    c.busy_timeout(Duration::from_secs(10)).unwrap();
    c
}

pub fn q1(env: &Env, sql: &str) -> i64 {
    db(env).query_row(sql, [], |r| r.get(0)).unwrap()
}

/// `sp` (status, queue, doctor) in the test's environment.
pub fn sp_cmd(env: &Env) -> Command {
    let mut c = env.cmd("sp");
    c.env_remove("SESSIONPIPE_LOG")
        .env("SP_CRONTAB", "/nonexistent/crontab");
    c
}
