//! Issue 29 (DECISIONS 35): two real sp-receivers on one real PostgreSQL serve one page and
//! one queue. Each test starts a throwaway cluster (`scripts/pg-cluster.sh`: Debian's server,
//! `initdb` in a temp folder, a unix socket there and no TCP, as `nobody` under root) and two
//! `sp-receiver --db postgres://…` processes, A and B, on one database of it, with one sink
//! token and one login token:
//!
//! 1. events sent to A show on B's page, with a login made on A; a page B answered is held
//!    when asked again through A (one version for both), and answered when an event comes
//!    through B;
//! 2. a prompt queued on B reaches a poll held on A: the median from just before the enqueue
//!    request to A's poll answer is under 250 ms over 20 rounds;
//! 3. acks sent to A show on B as delivered, and all of it is in PostgreSQL;
//! 4. behind a real Caddy running docs/deployment.md's Caddyfile for two receivers, a real
//!    machine (sp-sync and the hooks in a temp HOME) gets prompts through both and holds its
//!    next poll on one of them (Caddy's own log says which); that one is frozen (SIGSTOP, so
//!    it cannot answer) while three prompts are queued through the other, then SIGKILLed.
//!    The machine's next poll, through Caddy to the other, gets every message not yet acked:
//!    each is delivered by a Stop hook once and acked once, nothing lost.
//!
//! Without PostgreSQL both show as ignored (scripts/has_postgres.rs), and fail when `CI` is
//! set; without caddy the fourth fails when `CI` is set and otherwise says it skipped
//! (tests/common/needs.rs).
mod common;

use common::caddy::{free_port, needs_caddy, CaddyProcess};
use common::chaos::{cc_start, cc_stop, stop_reason};
use common::env::*;
use common::http::{agent, get, post, Resp};
use common::receiver::{Machine, SpReceiver, LOGIN, TOKEN};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const DEPLOYMENT: &str = include_str!("../../../docs/deployment.md");
const PG_CLUSTER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/pg-cluster.sh");
/// What the deployment guide's Caddyfile names; the test swaps in its own.
const PUBLIC_SITE: &str = "receiver.example.com {";
const UPSTREAMS: &str = "10.0.0.11:8787 10.0.0.12:8787";
const CONTROL: &str = "/api/sessionpipe/v1/control";

// ---------------------------------------------------------------------------------------
// A throwaway PostgreSQL (scripts/pg-cluster.sh)
// ---------------------------------------------------------------------------------------

struct Pg {
    dir: PathBuf,
    /// The admin database's URL, as the script printed it.
    admin: String,
}

impl Pg {
    /// A running cluster. The tests that start one are ignored without PostgreSQL
    /// (scripts/has_postgres.rs sets `has_postgres`); here a missing server fails the test.
    fn start() -> Pg {
        let dir = tempfile::Builder::new()
            .prefix("sp-pg-")
            .tempdir()
            .unwrap()
            .keep();
        let out = Command::new("bash")
            .arg(PG_CLUSTER)
            .arg("start")
            .arg(&dir)
            .output()
            .unwrap();
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        assert!(
            out.status.success(),
            "scripts/pg-cluster.sh start ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let admin = stdout(&out).trim().to_owned();
        assert!(admin.starts_with("postgres://"), "{admin}");
        Pg { dir, admin }
    }

    /// Runs `sql` on the database at `url`; what it printed (unaligned, tuples only).
    fn psql(&self, url: &str, sql: &str) -> String {
        // Debian's `psql` (postgresql-client-common, which the server's package needs) runs
        // the newest client installed.
        let out = Command::new("psql")
            .arg(url)
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout(&out)
    }

    /// A new, empty database `name`; its URL.
    fn database(&self, name: &str) -> String {
        self.psql(&self.admin, &format!("CREATE DATABASE {name}"));
        let url = self.admin.replacen("/postgres?", &format!("/{name}?"), 1);
        assert_ne!(url, self.admin);
        url
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(PG_CLUSTER)
            .arg("stop")
            .arg(&self.dir)
            .output();
    }
}

/// Receivers A and B on one fresh database of `pg`, in `dir/a` and `dir/b`.
fn two_receivers(pg: &Pg, dir: &Path, extra: &[&str]) -> (SpReceiver, SpReceiver, String) {
    let db = pg.database("two");
    let a = SpReceiver::start_on(&dir.join("a"), db.as_ref(), extra);
    let b = SpReceiver::start_on(&dir.join("b"), db.as_ref(), extra);
    (a, b, db)
}

// ---------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------

fn bearer(t: &str) -> String {
    format!("Bearer {t}")
}

fn now_wire() -> String {
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    time::OffsetDateTime::now_utc().format(&fmt).unwrap()
}

/// A prompt for `session` queued through `r`'s page (the login token as a bearer, as a
/// script would); its message id.
fn enqueue_prompt(r: &SpReceiver, session: &str, text: &str) -> String {
    let body = json!({"session": session, "message": {"kind": "prompt", "text": text}});
    let resp = post(
        &format!("{}/page/api/enqueue", r.url),
        &[("authorization", &bearer(LOGIN))],
        "application/json",
        &body.to_string(),
    );
    assert_eq!(resp.status, 200, "enqueue on {}: {}", r.url, resp.text);
    resp.json()["id"].as_str().unwrap().to_owned()
}

/// A session's long poll on `r`, held up to `wait` s, with the sink token.
fn poll(r: &SpReceiver, session: &str, wait: u64) -> Resp {
    get(
        &format!("{}{CONTROL}?session={session}&wait={wait}", r.url),
        &[("authorization", &bearer(TOKEN))],
    )
}

fn ack(r: &SpReceiver, id: &str) {
    ack_as(r, id, "delivered");
}

fn ack_as(r: &SpReceiver, id: &str, outcome: &str) {
    let body = json!({"acks": [{"id": id, "outcome": outcome, "at": now_wire()}]});
    let resp = post(
        &format!("{}{CONTROL}/ack", r.url),
        &[("authorization", &bearer(TOKEN))],
        "application/json",
        &body.to_string(),
    );
    assert_eq!(resp.status, 202, "ack on {}: {}", r.url, resp.text);
}

/// The page's versions on `rs` once they agree (each takes the others' number a moment after
/// a change), or as they are after 5 s.
fn one_version(rs: &[&SpReceiver]) -> Vec<Option<u64>> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let versions: Vec<Option<u64>> = rs
            .iter()
            .map(|r| page_state(r)["version"].as_u64())
            .collect();
        let one = versions[0].is_some() && versions.iter().all(|v| *v == versions[0]);
        if one || Instant::now() > deadline {
            return versions;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The page's state on `r`, asked as a script would (the login token as a bearer).
fn page_state(r: &SpReceiver) -> Value {
    let resp = get(
        &format!("{}/page/api/state", r.url),
        &[("authorization", &bearer(LOGIN))],
    );
    assert_eq!(resp.status, 200, "{}", resp.text);
    resp.json()
}

/// The status the page shows for message `id`, if it shows it.
fn message_status(state: &Value, id: &str) -> Option<String> {
    state["sessions"]
        .as_array()?
        .iter()
        .flat_map(|s| s["messages"].as_array().cloned().unwrap_or_default())
        .find(|m| m["id"] == id)
        .and_then(|m| m["status"].as_str().map(str::to_owned))
}

/// The receiver's CPU time so far (utime + stime, in clock ticks).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)
}

/// Waits until process `pid` has used no CPU for `quiet` (it has taken up every request
/// sent to it so far), at most 10 s.
fn settle(pid: u32, quiet: Duration) {
    let limit = Instant::now() + Duration::from_secs(10);
    let mut last = cpu_ticks(pid);
    let mut since = Instant::now();
    while Instant::now() < limit {
        std::thread::sleep(Duration::from_millis(20));
        let now = cpu_ticks(pid);
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            return;
        }
    }
}

/// 20 rounds: a poll of `session` held on A, a prompt queued through B; the time from just
/// before the enqueue request to A's poll answer, which must hold exactly that prompt. Each is
/// acked on A. Prints the percentiles (`what` says which case) and asserts a median under
/// 250 ms; returns the prompts' ids.
fn queued_on_b_answered_on_a(
    a: &SpReceiver,
    b: &SpReceiver,
    session: &'static str,
    what: &str,
) -> Vec<String> {
    let mut ms = Vec::new();
    let mut ids = Vec::new();
    for round in 0..20 {
        let a_url = a.url.clone();
        let held = std::thread::spawn(move || {
            let r = get(
                &format!("{a_url}{CONTROL}?session={session}&wait=25"),
                &[("authorization", &bearer(TOKEN))],
            );
            (Instant::now(), r)
        });
        // A has taken the poll up and holds it (it answers nothing until told).
        settle(a.pid().unwrap(), Duration::from_millis(150));
        assert!(!held.is_finished(), "round {round}{what}: A held the poll");
        let queued = Instant::now();
        let id = enqueue_prompt(b, session, &format!("round {round}"));
        let (answered, r) = held.join().unwrap();
        assert_eq!(r.status, 200, "round {round}{what}: {}", r.text);
        let got: Vec<String> = r.json()["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["id"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(
            got,
            std::slice::from_ref(&id),
            "round {round}{what}: A's poll answered B's prompt alone"
        );
        ms.push(answered.duration_since(queued).as_secs_f64() * 1000.0);
        ack(a, &id);
        ids.push(id);
    }
    let mut sorted = ms.clone();
    sorted.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&sorted, 0.5), percentile(&sorted, 0.99));
    eprintln!(
        "queued on B -> answered on A{what} over {} rounds: p50 {p50:.1} ms, p99 {p99:.1} ms, max {:.1} ms",
        sorted.len(),
        sorted[sorted.len() - 1]
    );
    assert!(
        p50 < 250.0,
        "queued on B -> answered on A{what}: median {p50:.1} ms (all: {ms:?})"
    );
    ids
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// A Claude Code session's event, as a sender posts it.
fn event(kind: &str, session: &str, seq: u64) -> Value {
    json!({
        "protocol": 1, "id": ulid::Ulid::new().to_string(), "type": kind, "time": now_wire(),
        "tier": 1, "harness": {"name": "claude-code", "event": "SessionStart"},
        "session": {"id": session, "seq": seq, "cwd": "~/src/two"},
        "privacy": {"rulesets": ["secrets@1"], "pii": false}, "data": {}
    })
}

// ---------------------------------------------------------------------------------------
// 1–3: events, prompts and acks cross between the two
// ---------------------------------------------------------------------------------------

#[test]
#[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
fn events_prompts_and_acks_cross_between_two_receivers() {
    let pg = Pg::start();
    let dir = tempfile::tempdir().unwrap();
    let (a, b, db) = two_receivers(&pg, dir.path(), &["--trust-proxy"]);
    let session = "claude-code:two-s1";

    // 1. A login made on A opens B's page (behind a TLS proxy both name the cookie
    // `__Host-sessionpipe`; the proxy's word is trusted with --trust-proxy), and events sent
    // to A show there.
    let https = ("x-forwarded-proto", "https");
    let login = post(
        &format!("{}/login", a.url),
        &[https],
        "application/x-www-form-urlencoded",
        &format!("token={LOGIN}"),
    );
    assert_eq!(login.status, 303, "login on A: {}", login.text);
    let cookie = login
        .header("set-cookie")
        .expect("a login cookie")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    assert!(cookie.starts_with("__Host-sessionpipe="), "{cookie}");
    let sent = post(
        &format!("{}/api/sessionpipe/v1/events", a.url),
        &[
            ("authorization", &bearer(TOKEN)),
            ("sessionpipe-protocol", "1"),
        ],
        "application/json",
        &json!({"events": [event("session.started", "two-s1", 1)]}).to_string(),
    );
    assert_eq!(sent.status, 202, "events to A: {}", sent.text);
    let state_on_b = || {
        let r = get(
            &format!("{}/page/api/state", b.url),
            &[("cookie", &cookie), https],
        );
        assert_eq!(r.status, 200, "B's page with A's login: {}", r.text);
        r.json()
    };
    let state = state_on_b();
    let shown = state["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["key"] == session && s["cwd"] == "~/src/two");
    assert!(shown, "the event sent to A is on B's page: {state}");

    // One page version on both: a page that B answered, asked again through A (a proxy
    // spreads its requests), is held there until something changes, and then answered with
    // the change, made through B.
    // (Each takes the other's number a moment after a change: wait until they agree.)
    let versions = one_version(&[&a, &b]);
    let v = versions[0].expect("the page's version");
    assert_eq!(
        versions,
        [Some(v), Some(v)],
        "A and B give the page one version"
    );
    let (a_url, held_cookie) = (a.url.clone(), cookie.clone());
    let held = std::thread::spawn(move || {
        get(
            &format!("{a_url}/page/api/state?since={v}&wait=20"),
            &[("cookie", &held_cookie), ("x-forwarded-proto", "https")],
        )
    });
    settle(a.pid().unwrap(), Duration::from_millis(150));
    assert!(
        !held.is_finished(),
        "A answered at once a page whose version B gave: their versions differ"
    );
    let sent = post(
        &format!("{}/api/sessionpipe/v1/events", b.url),
        &[
            ("authorization", &bearer(TOKEN)),
            ("sessionpipe-protocol", "1"),
        ],
        "application/json",
        &json!({"events": [event("session.started", "two-s2", 1)]}).to_string(),
    );
    assert_eq!(sent.status, 202, "events to B: {}", sent.text);
    let r = held.join().unwrap();
    assert_eq!(r.status, 200, "A's held page: {}", r.text);
    let state = r.json();
    assert_ne!(state["version"].as_u64(), Some(v), "{state}");
    assert!(
        state["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["key"] == "claude-code:two-s2"),
        "the event sent to B is on A's held page: {state}"
    );

    // 2. A prompt queued on B reaches a poll held on A; 3. its ack, sent to A, shows on B.
    let ids = queued_on_b_answered_on_a(&a, &b, session, "");

    let state = state_on_b();
    for id in &ids {
        assert_eq!(
            message_status(&state, id).as_deref(),
            Some("delivered"),
            "the ack sent to A shows on B: {state}"
        );
    }
    // A's next poll has nothing: every message acked.
    assert_eq!(poll(&a, session, 0).status, 204);
    // DECISIONS 38: with two prompts taken (waiting for the session's Stop, their final ack to
    // come), A holds the session's poll as with none, and the next prompt comes as fast.
    let waiting = [
        enqueue_prompt(&b, session, "waits for the Stop 1"),
        enqueue_prompt(&b, session, "waits for the Stop 2"),
    ];
    let r = poll(&a, session, 0);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json()["messages"].as_array().map(Vec::len),
        Some(2),
        "{}",
        r.text
    );
    for id in &waiting {
        ack_as(&a, id, "taken");
    }
    queued_on_b_answered_on_a(&a, &b, session, ", two prompts taken and waiting");
    for id in &waiting {
        ack(&a, id);
    }
    // All acked: nothing left for A to serve.
    assert_eq!(poll(&a, session, 0).status, 204);
    // The page's version is one number for all of them, a receiver started later included
    // (a restart must not send pages back to an older number, or the two would disagree).
    let c = SpReceiver::start_on(&dir.path().join("c"), db.as_ref(), &["--trust-proxy"]);
    // (C's start may itself change something, announced to A and B a moment later.)
    let versions = one_version(&[&a, &b, &c]);
    assert!(
        versions[0].is_some() && versions.iter().all(|v| *v == versions[0]),
        "A, B and a receiver started later give the page one version: {versions:?}"
    );
    // All of it is in PostgreSQL, and neither receiver made a SQLite file.
    let counts = pg.psql(
        &db,
        "SELECT (SELECT count(*) FROM messages) || ' ' || (SELECT count(*) FROM acks) \
         || ' ' || (SELECT count(*) FROM events)",
    );
    // 42 prompts (20, the 2 that waited, 20 more); their 42 final acks and the 2 `taken`.
    assert_eq!(counts.trim(), "42 44 2");
    for r in [&a, &b] {
        let files: Vec<String> = std::fs::read_dir(&r.dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            files
                .iter()
                .all(|f| !f.contains(".db") && !f.starts_with("postgres")),
            "{}: {files:?}",
            r.dir.display()
        );
    }
}

// ---------------------------------------------------------------------------------------
// 4. One receiver killed while it holds a machine's poll, behind Caddy
// ---------------------------------------------------------------------------------------

/// The Caddyfile in docs/deployment.md's "Two receivers behind one name".
fn guide_caddyfile() -> String {
    let section = DEPLOYMENT
        .split("## Two receivers behind one name")
        .nth(1)
        .expect("docs/deployment.md has a \"Two receivers behind one name\" section");
    let block = section
        .split("```caddyfile\n")
        .nth(1)
        .expect("that section has a ```caddyfile block");
    block.split("```").next().unwrap().to_owned()
}

/// `caddy run` with the guide's Caddyfile, serving `http://127.0.0.1:PORT` (plain HTTP on
/// loopback: the machine's client trusts only the public CAs) in front of both receivers,
/// with its debug log, which says which receiver each request went to.
struct Caddy {
    process: CaddyProcess,
    url: String,
}

impl Caddy {
    fn start(dir: &Path, upstreams: [&str; 2]) -> Caddy {
        let guide = guide_caddyfile();
        assert!(
            guide.contains(PUBLIC_SITE) && guide.contains(UPSTREAMS),
            "the guide's Caddyfile names {PUBLIC_SITE:?} and {UPSTREAMS}:\n{guide}"
        );
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let site = guide
            .replace(PUBLIC_SITE, &format!("{url} {{\n\tbind 127.0.0.1"))
            .replace(UPSTREAMS, &upstreams.join(" "));
        let caddyfile =
            format!("{{\n\tadmin off\n\tdebug\n\tauto_https off\n\thttp_port {port}\n}}\n\n{site}");
        let mut caddy = Caddy {
            process: CaddyProcess::start(dir, &caddyfile),
            url,
        };
        let well_known = format!("{}/.well-known/sessionpipe", caddy.url);
        caddy.process.wait_up(|| {
            agent()
                .get(&well_known)
                .call()
                .is_ok_and(|r| r.status() == 200)
        });
        caddy
    }

    fn lines(&self) -> Vec<String> {
        self.process.lines()
    }

    fn log(&self) -> String {
        self.process.log()
    }

    /// The requests sent to each upstream and not answered yet, from the debug log: each
    /// `selected upstream` (its `dial`) less each `upstream roundtrip` (its `upstream`).
    fn in_flight(&self) -> HashMap<String, i64> {
        let mut n: HashMap<String, i64> = HashMap::new();
        for line in self.lines() {
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            match v["msg"].as_str() {
                Some("selected upstream") => {
                    *n.entry(v["dial"].as_str().unwrap_or("").to_owned())
                        .or_default() += 1
                }
                Some("upstream roundtrip") => {
                    *n.entry(v["upstream"].as_str().unwrap_or("").to_owned())
                        .or_default() -= 1
                }
                _ => {}
            }
        }
        n.retain(|_, v| *v != 0);
        n
    }

    /// How many requests Caddy has sent to an upstream so far.
    fn requests_sent(&self) -> usize {
        self.lines()
            .iter()
            .filter(|l| l.contains("\"msg\":\"selected upstream\""))
            .count()
    }

    /// The control polls answered by `upstream` in the log's lines from `from` on.
    fn polls_answered_by(&self, upstream: &str, from: usize) -> usize {
        self.lines()
            .iter()
            .skip(from)
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| {
                v["msg"] == "upstream roundtrip"
                    && v["upstream"] == upstream
                    && v["request"]["uri"]
                        .as_str()
                        .is_some_and(|u| u.starts_with(&format!("{CONTROL}?session=")))
            })
            .count()
    }
}

/// The Stop hooks' reasons until one lets the turn end: what the machine delivered.
fn deliver_all(machine: &Machine, session: &str) -> Vec<String> {
    let mut reasons = Vec::new();
    for _ in 0..20 {
        let out = machine.hook("sp-stop", &cc_stop(session));
        assert_eq!(out.status.code(), Some(0), "sp-stop");
        match stop_reason(&String::from_utf8_lossy(&out.stdout)) {
            Some(r) => reasons.push(r),
            None => return reasons,
        }
    }
    panic!("the Stop hook kept blocking: {reasons:?}");
}

#[test]
#[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
fn killing_the_receiver_that_holds_a_poll_loses_nothing() {
    if !needs_caddy() {
        return;
    }
    let pg = Pg::start();
    let dir = tempfile::tempdir().unwrap();
    let (a, b, db) = two_receivers(&pg, dir.path(), &[]);
    let caddy = Caddy::start(&dir.path().join("caddy"), [a.addr(), b.addr()]);
    let session = "two-kill-1";
    let key = format!("claude-code:{session}");

    // A machine whose sink is the one name, Caddy; its session live, so sp-sync polls.
    let mut machine = Machine::new(dir.path(), &caddy.url, &dir.path().join("a/token"));
    machine.start_sync();
    let out = machine.hook("sp-event", &cc_start(session));
    assert!(
        out.status.success() && out.stdout.is_empty(),
        "SessionStart"
    );

    // Three prompts reach it through either receiver, are delivered by Stop hooks and acked.
    let mut texts: Vec<String> = (1..=3).map(|i| format!("before the kill {i}")).collect();
    let mut ids: Vec<String> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| enqueue_prompt([&a, &b][i % 2], &key, t))
        .collect();
    for id in &ids {
        machine.assert_stored(id);
    }
    let mut reasons = deliver_all(&machine, session);
    let acked = until(Duration::from_secs(30), || {
        acks(&pg, &db).len() == ids.len()
    });
    assert!(acked, "acked: {:?}\n{}", acks(&pg, &db), machine.log());

    // Nothing is pending now, so its next poll is held: one request in flight through
    // Caddy and no new one for half a second; Caddy's log says on which receiver.
    let mut holder = String::new();
    let mut seen = (0, Instant::now());
    let held = until(Duration::from_secs(30), || {
        let n = caddy.in_flight();
        let sent = caddy.requests_sent();
        if sent != seen.0 {
            seen = (sent, Instant::now());
        }
        holder = n.keys().next().cloned().unwrap_or_default();
        n.len() == 1 && n[&holder] == 1 && seen.1.elapsed() > Duration::from_millis(500)
    });
    assert!(held, "one poll held through caddy: {:?}", caddy.in_flight());
    let (mut victim, survivor) = if holder == a.addr() { (a, b) } else { (b, a) };
    assert_eq!(holder, victim.addr(), "{}", caddy.log());

    // The holder freezes (so it cannot answer what comes next), three prompts are queued
    // through the other, and the holder is SIGKILLed with the poll still held.
    let pid = victim.pid().unwrap() as i32;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let more: Vec<String> = (1..=3).map(|i| format!("after the kill {i}")).collect();
    for t in &more {
        ids.push(enqueue_prompt(&survivor, &key, t));
    }
    texts.extend(more);
    let log_at_kill = caddy.lines().len();
    victim.kill();
    let killed = Instant::now();

    // The machine's next poll, through Caddy to the survivor, gets every message not yet
    // acked; each is delivered once.
    for id in &ids {
        machine.assert_stored(id);
    }
    eprintln!(
        "SIGKILL of the poll's holder -> the prompts queued meanwhile stored on the machine: {} ms",
        killed.elapsed().as_millis()
    );
    assert!(
        caddy.polls_answered_by(survivor.addr(), log_at_kill) >= 1,
        "the machine's next poll went through caddy to the survivor:\n{}",
        caddy.log()
    );
    reasons.extend(deliver_all(&machine, session));
    for t in &texts {
        let times = reasons.iter().filter(|r| r.contains(t.as_str())).count();
        assert_eq!(times, 1, "{t:?} delivered once: {reasons:?}");
    }
    // Each acked once, delivered, in PostgreSQL, and shown so on the survivor's page.
    let acked = until(Duration::from_secs(30), || {
        acks(&pg, &db).len() == ids.len()
    });
    assert!(
        acked,
        "every message acked: {:?}\n{}",
        acks(&pg, &db),
        machine.log()
    );
    let mut want: Vec<String> = ids.iter().map(|id| format!("{id} 1 delivered")).collect();
    want.sort();
    assert_eq!(
        acks(&pg, &db),
        want,
        "{}\n{}\n{}",
        pg.psql(&db, "SELECT n, id, body FROM acks ORDER BY n"),
        machine.log(),
        caddy.log()
    );
    let state = page_state(&survivor);
    for id in &ids {
        assert_eq!(
            message_status(&state, id).as_deref(),
            Some("delivered"),
            "{state}"
        );
    }
    assert_eq!(
        pg.psql(&db, "SELECT count(*) FROM messages").trim(),
        ids.len().to_string()
    );
}

/// Each acked message in the database: `ID ACKS OUTCOME`, by id, where ACKS counts the
/// different final acks it got. The same ack may arrive more than once (a poll that redelivers a
/// message whose ack is still on its way is answered with that ack again): that is one ack.
fn acks(pg: &Pg, db: &str) -> Vec<String> {
    pg.psql(
        db,
        // The final acks: a prompt is `taken` first (DECISIONS 38).
        "SELECT id || ' ' || count(DISTINCT body) || ' ' || min(outcome) FROM acks \
         WHERE outcome NOT IN ('taken', 'progress') GROUP BY id ORDER BY id",
    )
    .lines()
    .map(str::to_owned)
    .collect()
}
