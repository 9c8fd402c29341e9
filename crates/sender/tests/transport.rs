//! DECISIONS 24, transport: each attack of the transport review against the real binaries.
//! Proxy variables, redirects, a well-known naming another origin, floods (per poll, per
//! session, per Stop block), polls that come too fast, and hostile local files.
//!
//! Where the real test receiver cannot play the attacker (a redirect, a chosen well-known, a
//! poll answered at once), a small scripted server below does, on loopback, answering each
//! request from a closure and recording when each came.
mod common;

use common::chaos::*;
use common::env::*;
use serde_json::{json, Value};
use spreceiver::{Database, Fault, ReceiverOptions, Route};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One request a scripted server saw.
#[derive(Clone, Debug)]
struct Seen {
    at: Instant,
    method: String,
    url: String,
    status: u16,
}

/// What a scripted server answers: status, headers, body.
type Answer = (u16, Vec<(&'static str, String)>, String);

/// A loopback HTTP server that answers every request from `answer` and records it.
struct Scripted {
    addr: std::net::SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Scripted {
    fn start(
        ip: &str,
        answer: impl Fn(&str, &str, usize) -> Answer + Send + Sync + 'static,
    ) -> Scripted {
        let server = tiny_http::Server::http(format!("{ip}:0")).expect("scripted server");
        let addr = server.server_addr().to_ip().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (seen.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                let Ok(Some(mut rq)) = server.recv_timeout(Duration::from_millis(50)) else {
                    continue;
                };
                let mut body = String::new();
                let _ = std::io::Read::read_to_string(rq.as_reader(), &mut body);
                let (method, url) = (rq.method().to_string(), rq.url().to_string());
                let n = s
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|x: &&Seen| x.method == method && path(&x.url) == path(&url))
                    .count();
                let (status, headers, text) = answer(&method, &url, n);
                s.lock().unwrap().push(Seen {
                    at: Instant::now(),
                    method,
                    url,
                    status,
                });
                let mut resp = tiny_http::Response::from_string(text).with_status_code(status);
                resp.add_header(
                    tiny_http::Header::from_bytes("content-type", "application/json").unwrap(),
                );
                for (k, v) in headers {
                    resp.add_header(tiny_http::Header::from_bytes(k, v.as_bytes()).unwrap());
                }
                let _ = rq.respond(resp);
            }
        });
        Scripted {
            addr,
            seen,
            stop,
            handle: Some(handle),
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Requests whose path (without the query) is `p`.
    fn to(&self, method: &str, p: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.method == method && path(&s.url) == p)
            .collect()
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn path(url: &str) -> &str {
    url.split('?').next().unwrap_or(url)
}

const WELL_KNOWN: &str = "/.well-known/sessionpipe";

/// A well-known document with these endpoints and control.
fn well_known(events: &str, control: &str) -> String {
    json!({
        "protocol": [1], "max_tier": 1, "capabilities": ["events", "control"],
        "auth": ["bearer"], "endpoints": {"events": events, "control": control},
        "batch": {"max_events": 50, "max_bytes": 262144}, "control": {"wait_max_s": 1},
    })
    .to_string()
}

fn ok(body: String) -> Answer {
    (200, vec![], body)
}

/// A TCP listener that only counts the connections it is offered (a proxy we own).
struct Counter {
    port: u16,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Counter {
    fn start() -> Counter {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, st) = (accepted.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !st.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((c, _)) => {
                        a.fetch_add(1, Ordering::SeqCst);
                        held.push(c);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Counter {
            port,
            accepted,
            stop,
            handle: Some(handle),
        }
    }
    fn count(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A config whose one sink ("phone", control on) is at `url`.
fn point_at(env: &Env, url: &str, control: Value) {
    env.write_config(json!({
        "sinks": [{"name": "phone", "url": url, "tier": 1, "control": true, "token": "tok-transport"}],
        "control": control,
    }));
}

fn sync_once_with(env: &Env, vars: &[(&str, &str)]) -> std::process::Output {
    let mut c = env.cmd("sp-sync");
    c.arg("--once");
    for (k, v) in vars {
        c.env(k, v);
    }
    run_with_stdin(c, b"")
}

fn last_error(env: &Env) -> String {
    env.query::<Option<String>>("SELECT last_error FROM sinks WHERE name='phone'")
        .into_iter()
        .flatten()
        .next()
        .unwrap_or_default()
}

fn status_text(env: &Env) -> String {
    let out = sp_cmd(env).arg("status").output().unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

// ---------------------------------------------------------------------------------------
// Proxy variables

#[test]
fn proxy_variables_are_not_used_for_a_loopback_sink_and_the_poll_still_works() {
    let env = Env::with(
        ReceiverOptions {
            wait_max_s: 1,
            ..Default::default()
        },
        json!({}),
    );
    let proxy = Counter::start();
    let p = format!("http://127.0.0.1:{}", proxy.port);
    let vars: Vec<(&str, &str)> = [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ]
    .iter()
    .map(|k| (*k, p.as_str()))
    .collect();
    make_live(&env, "proxy-a");
    let m = env.receiver.enqueue(
        &cc_key("proxy-a"),
        json!({"kind": "prompt", "text": "through no proxy", "expires_in_s": 600}),
    );
    let id = m["id"].as_str().unwrap();
    // --once: discovery, one poll, the events and the ack outboxes, all with the variables set.
    let out = sync_once_with(&env, &vars);
    assert_eq!(out.status.code(), Some(0), "{}", env.log());
    assert!(
        wait_stored(&env, id, Duration::from_secs(5)),
        "the poll brought the prompt"
    );
    assert!(
        env.wait_event("session.started", json!({}), Duration::from_secs(5))
            .is_some(),
        "events went out"
    );
    assert_eq!(
        stop_now(&env, "proxy-a")
            .as_deref()
            .map(|r| r.contains("through no proxy")),
        Some(true)
    );
    // The Stop ending the turn it started writes its final ack (DECISIONS 38).
    assert_eq!(stop_now(&env, "proxy-a"), None);
    let out = sync_once_with(&env, &vars);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        env.receiver.wait_ack(id, Duration::from_secs(5)).is_some(),
        "the ack went out"
    );
    assert_eq!(proxy.count(), 0, "the proxy was offered a connection");
}

// ---------------------------------------------------------------------------------------
// Redirects

#[test]
fn a_redirect_is_never_followed_for_poll_events_or_ack_and_nothing_from_its_target_is_acted_on() {
    let env = Env::new();
    make_live(&env, "redir-a");
    let (perm, attention) = cc_permission("redir-a", "prompt-redir", "rm -rf ~/important");
    // The target of every redirect: answers an allow for the waiting prompt to anyone.
    let target = Scripted::start("127.0.0.1", {
        let attention = attention.clone();
        move |_, _, _| {
            ok(json!({"messages": [{
                "id": ulid::Ulid::new().to_string(), "kind": "permission.answer",
                "for": attention, "decision": "allow",
                "at": spctl::clock::now_rfc3339(),
                "expires_at": spctl::clock::format_ms(spctl::clock::now_ms() + 60_000),
            }]})
            .to_string())
        }
    });
    let elsewhere = target.url();
    // The sink: a plain well-known; its first poll brings a message that will need an ack
    // (an unknown attention), then every request but the well-known is redirected.
    let first_id = ulid::Ulid::new().to_string();
    let sink = Scripted::start("127.0.0.1", {
        let first_id = first_id.clone();
        move |method, url, n| {
            if path(url) == WELL_KNOWN {
                return ok(well_known("/events", "/control"));
            }
            if method == "GET" && n == 0 {
                return ok(json!({"messages": [{
                    "id": first_id, "kind": "permission.answer", "for": "perm-unknown",
                    "decision": "deny", "at": spctl::clock::now_rfc3339(),
                    "expires_at": spctl::clock::format_ms(spctl::clock::now_ms() + 60_000),
                }]})
                .to_string());
            }
            (
                302,
                vec![("location", format!("{elsewhere}{url}"))],
                String::new(),
            )
        }
    });
    point_at(&env, &sink.url(), json!({"permission_wait_s": 4}));
    let hook = env.spawn_hook("sp-permission", &perm);
    // The hook recorded its attention before sp-sync runs, so an allow would find it open.
    wait_until(
        "the hook recorded its attention",
        Duration::from_secs(10),
        || env.query::<i64>("SELECT count(*) FROM attention WHERE state='open'") == vec![1],
    );
    for _ in 0..2 {
        assert_eq!(env.sync_once().status.code(), Some(0));
    }
    let out = finish(hook, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        permission_printed(&stdout(&out)),
        None,
        "no answer came from the sink itself"
    );

    assert!(
        target.seen().is_empty(),
        "requested at the redirect's target: {:?}",
        target.seen()
    );
    for (method, p) in [
        ("GET", "/control"),
        ("POST", "/events"),
        ("POST", "/control/ack"),
    ] {
        let got = sink.to(method, p);
        assert!(
            got.iter().any(|s| s.status == 302),
            "{method} {p} was answered 302 at least once: {got:?}"
        );
    }
    let stored: Vec<String> = env.query("SELECT id FROM messages");
    assert_eq!(
        stored,
        vec![first_id.clone()],
        "only the sink's own message was stored"
    );
    assert_eq!(
        env.query::<i64>(&format!(
            "SELECT count(*) FROM acks WHERE message_id='{first_id}' AND sent_at IS NULL"
        )),
        vec![1],
        "the ack was not taken by a redirect; it waits in the outbox"
    );
    let err = last_error(&env);
    assert!(err.contains("redirect"), "sink error: {err}");
    assert!(
        status_text(&env).contains("redirect"),
        "{}",
        status_text(&env)
    );
}

#[test]
fn a_redirected_well_known_is_an_error_and_its_target_is_not_asked() {
    let env = Env::new();
    let target = Scripted::start("127.0.0.1", |_, _, _| ok(well_known("/events", "/control")));
    let elsewhere = target.url();
    let sink = Scripted::start("127.0.0.1", move |_, url, _| {
        (
            302,
            vec![("location", format!("{elsewhere}{url}"))],
            String::new(),
        )
    });
    point_at(&env, &sink.url(), json!({}));
    make_live(&env, "redir-wk");
    assert_eq!(env.sync_once().status.code(), Some(0));
    assert_eq!(sink.to("GET", WELL_KNOWN).len(), 1, "{:?}", sink.seen());
    assert!(target.seen().is_empty(), "{:?}", target.seen());
    assert!(
        last_error(&env).contains("redirect"),
        "{}",
        last_error(&env)
    );
}

// ---------------------------------------------------------------------------------------
// Well-known origin

#[test]
fn a_well_known_naming_another_origin_is_refused_and_nothing_is_polled_there() {
    let env = Env::new();
    // Another loopback origin (127.0.0.2: same machine, another server).
    let other = Scripted::start("127.0.0.2", |_, _, _| {
        ok(json!({"messages": []}).to_string())
    });
    let other_url = other.url();
    let sink = Scripted::start("127.0.0.1", move |_, url, _| {
        if path(url) == WELL_KNOWN {
            ok(well_known(
                &format!("{other_url}/events"),
                &format!("{other_url}/control"),
            ))
        } else {
            ok(json!({"messages": []}).to_string())
        }
    });
    point_at(&env, &sink.url(), json!({}));
    make_live(&env, "origin-a");
    assert_eq!(env.sync_once().status.code(), Some(0));
    assert_eq!(sink.to("GET", WELL_KNOWN).len(), 1);
    assert!(other.seen().is_empty(), "{:?}", other.seen());
    let err = last_error(&env);
    assert!(
        err.contains("refused") && err.contains("outside the sink's own origin"),
        "{err}"
    );
    assert_eq!(
        env.query::<Option<String>>("SELECT wellknown FROM sinks WHERE name='phone'"),
        vec![None],
        "a refused well-known is not cached"
    );
    // Only the sink's own origin was ever asked, for the well-known and nothing else.
    assert!(sink.seen().iter().all(|s| path(&s.url) == WELL_KNOWN));
}

#[test]
fn a_cached_well_known_is_dropped_after_a_failure_and_read_again() {
    let env = Env::with(
        ReceiverOptions {
            wait_max_s: 1,
            ..Default::default()
        },
        json!({}),
    );
    make_live(&env, "cache-a");
    let cached = || env.query::<Option<String>>("SELECT wellknown FROM sinks WHERE name='phone'");
    let reads = || {
        env.receiver
            .requests()
            .iter()
            .filter(|r| r.route == Some(Route::WellKnown))
            .count()
    };
    assert_eq!(env.sync_once().status.code(), Some(0));
    assert!(
        cached()[0].is_some(),
        "the well-known is cached after a good run"
    );
    assert_eq!(reads(), 1);
    // A good run uses the cache: no second read.
    assert_eq!(env.sync_once().status.code(), Some(0));
    assert_eq!(reads(), 1);
    // One failed poll drops it, and the next run reads it again.
    env.receiver.push_fault(Route::Poll, Fault::Status(500));
    assert_eq!(env.sync_once().status.code(), Some(0));
    assert_eq!(cached(), vec![None], "dropped after the failed poll");
    assert_eq!(env.sync_once().status.code(), Some(0));
    assert_eq!(reads(), 2, "read again after the failure");
    assert!(cached()[0].is_some());

    // sp-sync --daemon reads it again while it runs, after a failure of the sink.
    let mut sync = SyncGuard::start(&env);
    wait_until("the daemon polls", Duration::from_secs(20), || {
        env.receiver.polls() >= 4
    });
    let before = reads();
    env.receiver.push_fault(Route::Poll, Fault::Reset);
    wait_until(
        "the daemon read the well-known again after a failed poll",
        Duration::from_secs(20),
        || reads() > before,
    );
    sync.stop();
}

// ---------------------------------------------------------------------------------------
// Floods

#[test]
fn at_most_100_messages_are_taken_per_poll_and_past_1000_undelivered_a_session_acks_queue_full() {
    let env = Env::new();
    make_live(&env, "flood-a");
    let key = cc_key("flood-a");
    let mut ids = Vec::new();
    for i in 0..1_150 {
        let m = env.receiver.enqueue(
            &key,
            json!({"kind": "prompt", "text": format!("flood {i}"), "expires_in_s": 3600}),
        );
        ids.push(m["id"].as_str().unwrap().to_string());
    }
    let count = || q1(&env, "SELECT count(*) FROM messages");
    // Each --once run is one poll per live session; the receiver offers all 1,150 each time.
    for run in 1..=10 {
        assert_eq!(env.sync_once().status.code(), Some(0));
        assert_eq!(count(), 100 * run, "after poll {run}");
    }
    assert_eq!(
        q1(&env, "SELECT count(*) FROM messages WHERE state='queued'"),
        1_000
    );
    assert!(env.log().contains("took 100 new ones"), "the cap is logged");
    for _ in 0..2 {
        assert_eq!(env.sync_once().status.code(), Some(0));
    }
    assert_eq!(count(), 1_150);
    assert_eq!(
        q1(&env, "SELECT count(*) FROM messages WHERE state='queued'"),
        1_000,
        "the first 1,000 stay queued"
    );
    let full: Vec<String> = env.query(
        "SELECT id FROM messages WHERE state='done' AND outcome='failed' AND detail='queue full' ORDER BY id",
    );
    let mut want = ids[1_000..].to_vec();
    want.sort();
    assert_eq!(full, want, "the 150 past the cap are failed 'queue full'");
    assert_eq!(
        q1(
            &env,
            "SELECT count(*) FROM messages WHERE detail='queue full' AND text IS NOT NULL"
        ),
        0,
        "their text is not kept"
    );
    // Their acks were stored before sending, and reached the receiver.
    for id in &want {
        let acks = env.acks_for(id);
        assert!(
            acks.iter()
                .any(|a| a["outcome"] == "failed" && a["detail"] == "queue full"),
            "{id}: {acks:?}"
        );
    }
}

#[test]
fn a_message_decided_at_receipt_keeps_neither_its_text_nor_its_note() {
    let env = Env::new();
    make_live(&env, "final-a");
    let key = cc_key("final-a");
    let note = "n".repeat(2_000);
    let m = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": "perm-nobody-asked", "decision": "deny",
               "note": note, "expires_in_s": 60}),
    );
    let id = m["id"].as_str().unwrap();
    assert_eq!(env.sync_once().status.code(), Some(0));
    assert_eq!(
        env.query::<String>(&format!(
            "SELECT outcome || '/' || detail FROM messages WHERE id='{id}'"
        )),
        vec!["failed/unknown attention".to_string()]
    );
    assert_eq!(
        q1(
            &env,
            "SELECT count(*) FROM messages WHERE note IS NOT NULL OR text IS NOT NULL"
        ),
        0
    );
}

#[test]
fn a_stop_block_carries_at_most_100000_characters_and_the_rest_comes_at_the_next_stop() {
    let env = Env::new();
    make_live(&env, "block-a");
    let key = cc_key("block-a");
    // 8 prompts of 19,000 characters: 152,000 in all, more than one block holds.
    let texts: Vec<String> = (0..8)
        .map(|i| {
            format!(
                "<{i}>{}",
                char::from(b'a' + i as u8).to_string().repeat(18_997)
            )
        })
        .collect();
    for t in &texts {
        env.receiver.enqueue(
            &key,
            json!({"kind": "prompt", "text": t, "expires_in_s": 3600}),
        );
        // "Oldest first" is by `at`, in milliseconds; two prompts queued in the same
        // millisecond are ordered by their (random) ULIDs, so give each its own millisecond.
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(env.sync_once().status.code(), Some(0));
    assert_eq!(
        q1(&env, "SELECT count(*) FROM messages WHERE state='queued'"),
        8
    );
    let first = stop_now(&env, "block-a").expect("the first Stop blocks");
    assert!(
        first.chars().count() <= 100_000,
        "first block has {} characters",
        first.chars().count()
    );
    let in_first: Vec<usize> = (0..8).filter(|i| first.contains(&texts[*i])).collect();
    assert_eq!(
        in_first,
        vec![0, 1, 2, 3, 4],
        "oldest first, whole, as many as fit"
    );
    assert_eq!(
        q1(&env, "SELECT count(*) FROM messages WHERE state='queued'"),
        3
    );
    let second = stop_now(&env, "block-a").expect("the next Stop delivers the rest");
    assert!(second.chars().count() <= 100_000);
    let in_second: Vec<usize> = (0..8).filter(|i| second.contains(&texts[*i])).collect();
    assert_eq!(in_second, vec![5, 6, 7]);
    assert_eq!(
        stop_now(&env, "block-a"),
        None,
        "nothing left, nothing printed"
    );
    assert_eq!(
        q1(
            &env,
            "SELECT count(*) FROM messages WHERE outcome='delivered'"
        ),
        8
    );
}

// ---------------------------------------------------------------------------------------
// Poll gap

/// Runs sp-sync --daemon against a sink answering every poll with `answer`, with two live
/// sessions, until `n` polls of the first session arrived; returns that session's poll times
/// and the sink's last error as sp-sync recorded it.
fn poll_times(answer: Answer, n: usize) -> (Vec<Instant>, String) {
    let env = Env::new();
    let sink = Scripted::start("127.0.0.1", move |method, url, _| {
        if path(url) == WELL_KNOWN {
            ok(well_known("/events", "/control"))
        } else if method == "POST" {
            ok(json!({"accepted": 0}).to_string())
        } else {
            answer.clone()
        }
    });
    point_at(&env, &sink.url(), json!({}));
    make_live(&env, "gap-a");
    make_live(&env, "gap-b");
    let of_a = |s: &Seen| s.method == "GET" && s.url.contains("session=claude-code:gap-a");
    let mut sync = SyncGuard::start(&env);
    let enough = until(Duration::from_secs(30), || {
        sink.seen().iter().filter(|s| of_a(s)).count() >= n
    });
    sync.stop();
    assert!(enough, "{n} polls came: {}", env.log());
    let times: Vec<Instant> = sink
        .seen()
        .iter()
        .filter(|s| of_a(s))
        .map(|s| s.at)
        .take(n)
        .collect();
    let b = sink
        .seen()
        .iter()
        .filter(|s| s.method == "GET" && s.url.contains("session=claude-code:gap-b"))
        .count();
    assert!(b > 0, "the other session is polled too");
    (times, last_error(&env))
}

/// Over the window from the first to the last of these polls, at most one per 250 ms (+2
/// for the edges and the receiver's clock).
fn assert_gap(what: &str, times: &[Instant]) {
    let w = times.last().unwrap().duration_since(times[0]);
    let bound = (w.as_millis() / 250) as usize + 2;
    assert!(
        times.len() <= bound,
        "{what}: {} polls of one session in {w:?} (at most {bound} allowed)",
        times.len()
    );
}

#[test]
fn a_sink_answering_204_at_once_gets_at_most_one_poll_per_250ms_per_session() {
    let (times, _) = poll_times((204, vec![], String::new()), 12);
    assert_gap("204 at once", &times);
}

#[test]
fn a_sink_answering_429_retry_after_0_gets_at_most_one_poll_per_250ms_per_session() {
    let (times, recorded) = poll_times((429, vec![("retry-after", "0".into())], String::new()), 12);
    // sp-sync read the receiver's retry-after (0 s), and the floor still spaced the polls.
    assert_eq!(recorded, "control poll answered 429; retry in 0s");
    assert_gap("retry-after: 0", &times);
}

// ---------------------------------------------------------------------------------------
// Local files

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_state_folder_at_0777_and_a_control_db_at_0666_are_tightened_and_that_is_logged() {
    let env = Env::new();
    std::fs::create_dir_all(&env.state).unwrap();
    set_mode(&env.state, 0o777);
    let db = env.db_path();
    std::fs::write(&db, b"").unwrap();
    set_mode(&db, 0o666);
    make_live(&env, "files-a");
    assert_eq!(mode(&env.state), 0o700);
    assert_eq!(mode(&db), 0o600);
    let log = env.log();
    assert!(
        log.contains(&format!(
            "tightened {} from mode 777 to 700",
            env.state.display()
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!("tightened {} from mode 666 to 600", db.display())),
        "{log}"
    );
    // Once: a second hook finds nothing to tighten.
    make_live(&env, "files-b");
    assert_eq!(
        env.log().matches("tightened").count(),
        log.matches("tightened").count()
    );
}

#[test]
fn a_symlinked_log_lock_or_database_is_never_written_through() {
    let env = Env::new();
    std::fs::create_dir_all(&env.state).unwrap();
    set_mode(&env.state, 0o700);
    let outside = env.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let victims: Vec<_> = ["log", "lock"]
        .iter()
        .map(|n| {
            let p = outside.join(n);
            std::fs::write(&p, b"untouched\n").unwrap();
            set_mode(&p, 0o644);
            p
        })
        .collect();
    std::os::unix::fs::symlink(&victims[0], env.state.join("sp.log")).unwrap();
    std::os::unix::fs::symlink(&victims[1], env.state.join("sp-sync.lock")).unwrap();
    // A hook logs (and probes the lock) on every run; sp-sync takes the lock.
    let out = env.hook_json("sp-event", &cc_start("links-a"));
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
    let out = env.hook_json("sp-stop", &cc_stop("links-a"));
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
    let sync = env.sync_once();
    assert_ne!(
        sync.status.code(),
        Some(0),
        "sp-sync refuses a symlinked lock"
    );
    let why = String::from_utf8_lossy(&sync.stderr).to_string();
    assert!(why.contains("symbolic link"), "says why: {why}");
    for v in &victims {
        assert_eq!(
            std::fs::read_to_string(v).unwrap(),
            "untouched\n",
            "{}",
            v.display()
        );
        assert_eq!(mode(v), 0o644);
    }

    // A symlinked control.db: the hook exits 0, prints nothing, writes nothing through it.
    let env = Env::new();
    std::fs::create_dir_all(&env.state).unwrap();
    let victim = env.dir.path().join("victim.db");
    std::fs::write(&victim, b"untouched\n").unwrap();
    std::os::unix::fs::symlink(&victim, env.db_path()).unwrap();
    let out = env.hook_json("sp-event", &cc_start("links-b"));
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
    assert!(env.log().contains("symbolic link"), "{}", env.log());
}

#[test]
fn sp_receivers_database_is_never_opened_through_a_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"untouched\n").unwrap();
    let link = dir.path().join("receiver.db");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let r = spreceiver::Receiver::start(ReceiverOptions {
        db: Some(Database::File(link.clone())),
        ..Default::default()
    });
    let e = match r {
        Ok(_) => panic!("sp-receiver opened a database through a symlink"),
        Err(e) => format!("{e:#}"),
    };
    assert!(e.contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
}
