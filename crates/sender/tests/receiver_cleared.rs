//! Answered elsewhere, cleared everywhere (DECISIONS 34), and answered from the notification
//! (issue 26), through the real `sp-receiver` on loopback, real senders in temp HOMEs and
//! headless Chromium:
//!
//! 1. A Claude Code prompt waits on a machine; two tabs show it, and the push the receiver
//!    sends for it is shown by the page's service worker. The prompt is answered in the
//!    terminal (the tool ran: a PostToolUse): both tabs drop it and say it was answered in
//!    the terminal, and the clearing push reaches every subscribed device and closes the
//!    notification, each within a second of the terminal's answer (measured here).
//! 2. With signed control: a push's Allow opens the prompt on the page, which asks for the
//!    passkey's touch over that allow (DECISIONS 36), and the waiting hook prints allow; a
//!    push's Deny is answered in the service worker with the page's own day key; with the
//!    day grant expired, Deny opens the prompt on the page and sends nothing.
//!
//! Pushes: the receiver (`--allow-private-push`) pushes to a fake push service on loopback
//! for two devices whose keys this test holds; the test decrypts what arrives (RFC 8291) and
//! delivers device A's payload, as it is, to the browser's worker by CDP
//! (`ServiceWorker.deliverPushMessage`): Chromium here has no push service of its own.
//!
//! Headless Chromium has no way to press a notification's button, and a `notificationclick`
//! only the browser can make (an event a script dispatches is untrusted: its `waitUntil`
//! throws). So the test dispatches a `NotificationEvent('notificationclick', {notification,
//! action})` in the worker (Playwright's `Worker.evaluate`) for the notification the worker
//! itself showed: the worker's own listener runs, with the action, and its work starts
//! before `waitUntil` throws; nothing of the worker is replaced or called directly.
//!
//! Needs chromium, Node.js and playwright-core (`scripts/test-deps.sh`); fails without them.
mod common;

use common::browser::{missing_browser_deps, Browser};
use common::env::*;
use common::http;
use common::receiver::{first_ack, open_db, LOGIN, TOKEN};
use serde_json::{json, Value};
use sessionpipe_testkit::push::{Device, FakeService, Got};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const ALLOW: &str = r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}"#;
/// What DECISIONS 34 asks: every open page and every notification, within a second.
const WITHIN: Duration = Duration::from_secs(1);

/// One browser at a time: the measured test shares two cores with nothing of its own.
static ONE_BROWSER: Mutex<()> = Mutex::new(());

/// This test's browser: it must be there (the test fails saying what is missing), and no
/// other test of this file runs one meanwhile.
fn one_browser() -> std::sync::MutexGuard<'static, ()> {
    if let Some(why) = missing_browser_deps() {
        panic!("the browser test cannot run: {why}");
    }
    ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner())
}

/// `sp-receiver` in a temp folder (kept while the first value lives), the person away, and
/// two devices (of seeds `a`, `b`) subscribed at a push service on loopback.
fn pushing_to_two_devices(
    a: u8,
    b: u8,
) -> (tempfile::TempDir, SpReceiver, PushService, Device, Device) {
    let dir = tempfile::tempdir().unwrap();
    let receiver = SpReceiver::start(&dir.path().join("receiver"));
    let service = PushService::start();
    let (dev_a, dev_b) = (Device::new(a), Device::new(b));
    receiver.push_to(&service, &dev_a, &dev_b);
    (dir, receiver, service, dev_a, dev_b)
}

/// A push service on loopback (answering 201), and the requests taken off its channel but
/// not asked for yet.
struct PushService {
    service: FakeService,
    kept: Vec<Got>,
}

impl PushService {
    fn start() -> PushService {
        PushService {
            service: FakeService::start(),
            kept: Vec::new(),
        }
    }

    /// The next payload pushed to `device` (at `path`) whose tag or clear is `tag`.
    fn next(&mut self, device: &Device, path: &str, tag: &str) -> Value {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(i) = self.kept.iter().position(|g| {
                g.path == path && {
                    let p = device.decrypt(&g.body);
                    p["tag"] == tag || p["clear"] == tag
                }
            }) {
                return device.decrypt(&self.kept.remove(i).body);
            }
            let left = end.saturating_duration_since(Instant::now());
            let got = self
                .service
                .got
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no push {tag} to {path} within 30 s"));
            self.kept.push(got);
        }
    }
}

/// `sp-receiver` (pushing to loopback) with its files in `dir`, and this test's ways in.
struct SpReceiver {
    running: common::receiver::SpReceiver,
    /// `http://localhost:PORT`: the page's origin (rp id `localhost`).
    page: String,
    db: PathBuf,
}

impl SpReceiver {
    fn start(dir: &Path) -> SpReceiver {
        let running = common::receiver::SpReceiver::start(dir, &["--allow-private-push"]);
        let port: u16 = running.url.rsplit(':').next().unwrap().parse().unwrap();
        SpReceiver {
            running,
            page: format!("http://localhost:{port}"),
            db: dir.join("receiver.db"),
        }
    }

    fn db(&self) -> rusqlite::Connection {
        open_db(&self.db)
    }

    /// A page API call (GET without a body) with the login token as a bearer (no cookie,
    /// so no CSRF): its status and answer.
    fn call(&self, path: &str, body: Option<Value>) -> (u16, Value) {
        http::page_call(&self.running.url, LOGIN, path, body.as_ref())
    }

    /// A page API post that must succeed; its answer.
    fn api(&self, path: &str, body: Value) -> Value {
        let (status, v) = self.call(path, Some(body));
        assert_eq!(status, 200, "{path}: {v}");
        v
    }

    /// Events posted as a sender does (the shared sink token).
    fn post_events(&self, events: &[Value]) {
        let mut r = ureq::post(format!("{}/api/sessionpipe/v1/events", self.running.url))
            .header("authorization", &format!("Bearer {TOKEN}"))
            .header("sessionpipe-protocol", "1")
            .header("content-type", "application/json")
            .send(json!({ "events": events }).to_string())
            .unwrap();
        assert_eq!(
            r.status().as_u16(),
            202,
            "{:?}",
            r.body_mut().read_to_string()
        );
    }

    /// The person is away, and devices A and B get pushes at `service`.
    fn push_to(&self, service: &PushService, a: &Device, b: &Device) {
        self.api("/page/api/away", json!({"away": true}));
        for (d, path) in [(a, "/push/a"), (b, "/push/b")] {
            let sub = d.subscription(&format!("{}{path}", service.service.url));
            self.api(
                "/page/api/push",
                json!({"op": "subscribe", "subscription": sub}),
            );
        }
    }

    /// The messages the receiver holds whose body names `attention`.
    fn messages_for(&self, attention: &str) -> Vec<(String, String)> {
        let db = self.db();
        let mut st = db
            .prepare("SELECT id, body FROM messages WHERE instr(body, ?1) > 0 ORDER BY n")
            .unwrap();
        st.query_map([attention], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// The first ack the receiver recorded for message `id` (waiting for it).
    fn ack(&self, id: &str) -> Value {
        first_ack(&self.db, id)
    }
}

fn permission_request(session: &str, command: &str) -> Value {
    json!({
        "session_id": session, "hook_event_name": "PermissionRequest", "cwd": "/tmp",
        "transcript_path": "/tmp/t.jsonl", "permission_mode": "default",
        "tool_name": "Bash", "tool_input": {"command": command, "description": "a test command"}
    })
}

/// The open attentions on the machine, oldest first.
fn open_attentions(env: &Env) -> Vec<String> {
    // The store may not be made yet, or be mid-creation: nothing open then.
    if !env.db_path().exists() {
        return Vec::new();
    }
    let db = env.db();
    let Ok(mut st) = db.prepare("SELECT attention_id FROM attention WHERE state='open'") else {
        return Vec::new();
    };
    st.query_map([], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .unwrap_or_default()
}

/// The attention a newly started hook opened (one not in `before`).
fn new_attention(env: &Env, before: &[String]) -> String {
    let mut id = None;
    assert!(
        until(Duration::from_secs(20), || {
            id = open_attentions(env)
                .into_iter()
                .find(|a| !before.contains(a));
            id.is_some()
        }),
        "the hook opened no attention: {}",
        env.log()
    );
    id.unwrap()
}

/// The notifications the page's worker shows with `tag`.
fn notifications(b: &mut Browser, tag: &str) -> Vec<Value> {
    let all = b.call(json!({"op": "notifications"}))["notifications"].clone();
    all.as_array()
        .unwrap()
        .iter()
        .filter(|n| n["tag"] == tag)
        .cloned()
        .collect()
}

/// Delivers `payload` to the worker at `origin` until it shows its notification: headless
/// Chromium can lose the first notification a fresh profile shows from a push (the worker's
/// showNotification resolves, yet nothing is there for seconds); the same push again shows
/// (the tag makes it replace, never add). Returns the notification.
fn show(b: &mut Browser, origin: &str, payload: &Value) -> Value {
    let tag = payload["tag"].as_str().unwrap().to_owned();
    for _ in 0..3 {
        b.call(json!({"op": "push", "origin": origin, "data": payload.to_string()}));
        for _ in 0..40 {
            if let Some(n) = notifications(b, &tag).into_iter().next() {
                return n;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("the worker never showed {tag}");
}

/// Logs the current tab in and waits until it is live and its worker controls it.
fn log_in(b: &mut Browser, page: &str) {
    b.call(json!({"op": "goto", "url": format!("{page}/")}));
    b.call(json!({"op": "fill", "selector": "#token", "value": LOGIN}));
    b.click("#login-form button[type=submit]");
    b.wait("#conn[data-state=\"live\"]");
    b.call(json!({"op": "worker_activated", "timeout": 30000}));
}

/// Waits (at most 5 s) until `selector` is in `state` on the current tab.
fn wait_state(b: &mut Browser, selector: &str, state: &str) {
    b.call(json!({"op": "wait", "selector": selector, "state": state, "timeout": 5000}));
}

#[test]
fn a_prompt_answered_in_the_terminal_leaves_every_page_and_every_device_within_a_second() {
    let _one = one_browser();
    let (_dir, receiver, mut service, dev_a, dev_b) = pushing_to_two_devices(21, 22);

    // A machine (unsigned control) whose Claude Code asks to run a command.
    let session = "0c5a3e4f-1b2c-4d5e-8f90-a1b2c3d4e5f6";
    let mut env = Env::new();
    env.write_config(json!({
        "sinks": [{"name": "phone", "url": receiver.running.url, "tier": 1, "control": true, "token": TOKEN}],
        "machine": "build-box",
        "control": {"permission_wait_s": 90}
    }));
    env.start_sync();
    let ask = permission_request(session, "cargo publish --dry-run");
    let hook = env.spawn_hook("sp-permission", &ask);
    let att = new_attention(&env, &[]);
    let tag = format!("attention:{att}");

    // Each device hears of it, with the machine and the command; unsigned, the actions
    // open the page (there is nothing the worker could sign).
    let needed = service.next(&dev_a, "/push/a", &tag);
    assert_eq!(service.next(&dev_b, "/push/b", &tag)["tag"], json!(tag));
    let title = needed["title"].as_str().unwrap();
    assert_eq!(title, "claude-code on build-box wants to run Bash");
    assert_eq!(needed["body"], "cargo publish --dry-run");
    assert!(needed.get("answer").is_none(), "{needed}");

    // Two tabs show the prompt; device A (this browser) shows its notification.
    let mut b = Browser::launch();
    b.call(json!({"op": "grant", "origin": receiver.page, "permissions": ["notifications"]}));
    log_in(&mut b, &receiver.page);
    let prompt = format!("[data-attention=\"{att}\"]");
    b.wait(&prompt);
    b.call(json!({"op": "new_page"}));
    b.call(json!({"op": "goto", "url": format!("{}/", receiver.page)}));
    b.wait("#conn[data-state=\"live\"]");
    b.wait(&prompt);
    let shown = show(&mut b, &receiver.page, &needed);
    assert_eq!(shown["title"], json!(title));
    assert_eq!(shown["actions"], json!(["allow", "deny"]));

    // The person says "Yes" in the terminal: the tool runs, Claude Code's PostToolUse.
    let mut post = ask.clone();
    post["hook_event_name"] = json!("PostToolUse");
    post["tool_response"] = json!({"stdout": "", "stderr": "", "interrupted": false});
    post["tool_use_id"] = json!("toolu_01");
    let answered = Instant::now();
    let answered_ms = unix_ms();
    let ev = env.hook_json("sp-event", &post);
    assert!(ev.status.success() && ev.stdout.is_empty());
    let hook_done = answered.elapsed();

    // Both tabs drop it and say how it ended.
    let ended = format!("[data-cleared=\"{att}\"][data-ended=\"terminal\"]");
    let mut pages = Vec::new();
    for tab in [1, 0] {
        b.call(json!({"op": "use_page", "index": tab}));
        wait_state(&mut b, &prompt, "detached");
        wait_state(&mut b, &ended, "visible");
        pages.push(answered.elapsed());
        let said = b.text(&ended);
        assert!(said.contains("answered in the terminal"), "{said}");
        assert!(said.contains("cargo publish --dry-run"), "{said}");
    }
    // Every device is told to withdraw it; device A's worker closes the notification.
    let clear_a = service.next(&dev_a, "/push/a", &tag);
    let clear_b = service.next(&dev_b, "/push/b", &tag);
    assert_eq!(clear_a, json!({"clear": tag}));
    assert_eq!(clear_b, json!({"clear": tag}));
    let pushed = answered.elapsed();
    b.call(json!({"op": "push", "origin": receiver.page, "data": clear_a.to_string()}));
    assert!(
        until(Duration::from_secs(5), || notifications(&mut b, &tag)
            .is_empty()),
        "the notification was not withdrawn"
    );
    let closed = answered.elapsed();
    // When the cleared event reached the receiver (its own record), for the breakdown.
    let arrived_ms: i64 = receiver
        .db()
        .query_row(
            "SELECT received_ms FROM events WHERE type = 'attention.cleared'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    eprintln!(
        "terminal answer -> sp-event done: {hook_done:?}; attention.cleared at the receiver: {} ms; prompt gone from tab 2: {:?}, tab 1: {:?}; clearing push at both devices: {pushed:?}; notification closed: {closed:?}",
        arrived_ms - answered_ms,
        pages[0], pages[1]
    );
    for (what, took) in [
        ("the second tab", pages[0]),
        ("the first tab", pages[1]),
        ("the notification", closed),
    ] {
        assert!(
            took < WITHIN,
            "{what} took {took:?} after the terminal's answer"
        );
    }
    // The hook stopped waiting, and printed nothing (the terminal answered).
    let out = finish(hook, Duration::from_secs(15));
    assert!(out.status.success());
    assert!(out.stdout.is_empty(), "{}", stdout(&out));

    // Unsigned control: a notification's Allow never answers; it opens the prompt (in
    // one of the two tabs: the worker picks one).
    show(&mut b, &receiver.page, &needed);
    press(&mut b, &tag, "allow");
    let opened = format!("#attention={}&do=allow", url_encoded(&att));
    let mut urls = Vec::new();
    assert!(
        until(Duration::from_secs(10), || {
            urls = [0, 1]
                .map(|tab| {
                    b.call(json!({"op": "use_page", "index": tab}));
                    b.call(json!({"op": "url"}))["url"].clone()
                })
                .to_vec();
            urls.iter()
                .any(|u| u.as_str().is_some_and(|u| u.ends_with(&opened)))
        }),
        "no tab opened at the prompt: {urls:?}"
    );
    assert_eq!(receiver.messages_for(&att), Vec::<(String, String)>::new());

    // Quiet hours set on the page are kept in this browser's own time zone.
    b.call(json!({"op": "use_page", "index": 0}));
    b.call(json!({"op": "goto", "url": format!("{}/", receiver.page)}));
    b.click("#notify summary");
    let row = "#devices li:first-child";
    b.wait(&format!("{row} .quiet-from"));
    b.call(json!({"op": "fill", "selector": format!("{row} .quiet-from"), "value": "22:00"}));
    b.call(json!({"op": "fill", "selector": format!("{row} .quiet-to"), "value": "07:00"}));
    b.click(&format!("{row} .quiet-save"));
    b.call(json!({"op": "wait_text", "selector": format!("{row} .quiet-status"), "text": "saved"}));
    let zone = b
        .call(json!({"op": "eval", "script": "Intl.DateTimeFormat().resolvedOptions().timeZone"}))
        ["value"]
        .clone();
    let devices = receiver.call("/page/api/push", None).1["devices"].clone();
    assert_eq!(
        devices[0]["quiet_hours"],
        json!({"from": "22:00", "to": "07:00", "tz": zone}),
        "{devices}"
    );
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn now_wire() -> String {
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    time::OffsetDateTime::now_utc().format(&fmt).unwrap()
}

fn event(kind: &str, seq: u64, data: Value) -> Value {
    json!({
        "protocol": 1, "id": ulid::Ulid::new().to_string(), "type": kind, "time": now_wire(),
        "tier": 1, "harness": {"name": "claude-code", "event": "PermissionRequest"},
        "session": {"id": "quiet-session-1", "seq": seq, "cwd": "~/src/api"},
        "privacy": {"rulesets": ["secrets@1"], "pii": false}, "data": data
    })
}

/// `HH:MM`, `shift` minutes from now in a zone `offset_h` hours ahead of UTC.
fn hhmm(offset_h: i64, shift: i64) -> String {
    let t = time::OffsetDateTime::now_utc();
    let m =
        (i64::from(t.hour()) * 60 + i64::from(t.minute()) + offset_h * 60 + shift).rem_euclid(1440);
    format!("{:02}:{:02}", m / 60, m % 60)
}

#[test]
fn quiet_hours_are_per_device_in_its_own_zone_and_a_withdrawal_reaches_every_device() {
    let (_dir, receiver, mut service, dev_a, dev_b) = pushing_to_two_devices(41, 42);
    let devices = receiver.call("/page/api/push", None).1["devices"].clone();
    let id = |i: usize| devices[i]["id"].as_str().unwrap().to_owned();
    let (a, b) = (id(0), id(1));
    // Tokyo is UTC+9 all year. A's window is around now in UTC, so not now in Tokyo; B's
    // is around now in Tokyo.
    let for_a = json!({"op": "quiet_hours", "id": a, "from": hhmm(0, -60), "to": hhmm(0, 60), "tz": "Asia/Tokyo"});
    let for_b = json!({"op": "quiet_hours", "id": b, "from": hhmm(9, -60), "to": hhmm(9, 60), "tz": "Asia/Tokyo"});
    receiver.api("/page/api/push", for_a);
    let set = receiver.api("/page/api/push", for_b);
    assert_eq!(
        set["quiet_hours"],
        json!({"from": hhmm(9, -60), "to": hhmm(9, 60), "tz": "Asia/Tokyo"})
    );
    let shown = receiver.call("/page/api/push", None).1["devices"].clone();
    assert_eq!(shown[1]["quiet_hours"]["tz"], "Asia/Tokyo", "{shown}");
    // Bad windows are refused, naming the rule.
    for (bad, why) in [
        (
            json!({"from": "22:00", "to": "07:00", "tz": "Mars/Base"}),
            "IANA time zone",
        ),
        (
            json!({"from": "25:00", "to": "07:00", "tz": "UTC"}),
            "from must be a time HH:MM",
        ),
        (
            json!({"from": "22:00", "to": "22:00", "tz": "UTC"}),
            "must differ",
        ),
        (
            json!({"from": "22:00", "tz": "UTC"}),
            "give both from and to",
        ),
    ] {
        let mut op = bad.clone();
        op["op"] = json!("quiet_hours");
        op["id"] = json!(a);
        let (s, v) = receiver.call("/page/api/push", Some(op));
        assert_eq!(s, 400, "{bad}: {v}");
        assert!(
            v["reason"].as_str().unwrap_or("").contains(why),
            "{bad}: {v}"
        );
    }
    let (s, _) = receiver.call(
        "/page/api/push",
        Some(json!({"op": "quiet_hours", "id": "0000000000000000", "from": "", "to": ""})),
    );
    assert_eq!(s, 404);

    // A prompt reaches A only; its withdrawal reaches both. The worker sends in order, so
    // a push of the prompt to B would have come before B's withdrawal.
    receiver.post_events(&[
        event("session.started", 0, json!({"source": "startup"})),
        event("attention.needed", 1, json!({"attention_id": "perm-q1", "kind": "permission", "tool": "Bash", "message": "Bash make deploy"})),
    ]);
    let tag = "attention:perm-q1";
    assert_eq!(service.next(&dev_a, "/push/a", tag)["body"], "make deploy");
    // Back at the desk before it ends: the prompt was pushed, so its withdrawal still goes.
    receiver.api("/page/api/away", json!({"away": false}));
    receiver.post_events(&[event(
        "attention.cleared",
        2,
        json!({"attention_id": "perm-q1", "how": "timeout"}),
    )]);
    assert_eq!(service.next(&dev_b, "/push/b", tag), json!({"clear": tag}));
    assert_eq!(service.next(&dev_a, "/push/a", tag), json!({"clear": tag}));
    assert!(
        service.kept.iter().all(|g| g.path != "/push/b"),
        "B heard of the prompt in its quiet hours"
    );
    // The page's state says how it ended.
    let state = receiver.call("/page/api/state", None).1;
    let cleared = &state["sessions"][0]["cleared"][0];
    assert_eq!(
        (&cleared["attention_id"], &cleared["ended"]),
        (&json!("perm-q1"), &json!("timeout"))
    );
    // Quiet hours end: B hears again (away again).
    receiver.api("/page/api/away", json!({"away": true}));
    receiver.api(
        "/page/api/push",
        json!({"op": "quiet_hours", "id": b, "from": "", "to": ""}),
    );
    receiver.post_events(&[event(
        "attention.needed",
        3,
        json!({"attention_id": "perm-q2", "kind": "permission", "tool": "Bash", "message": "Bash ls"}),
    )]);
    assert_eq!(
        service.next(&dev_b, "/push/b", "attention:perm-q2")["body"],
        "ls"
    );
}

/// `sp pair phone` on the machine and Approve on the page (a passkey of the virtual
/// authenticator); the machine's id at the receiver.
fn pair(env: &Env, b: &mut Browser, receiver: &SpReceiver) -> String {
    let common::pairing::SpPair {
        child: pair,
        link,
        printed,
        ..
    } = common::pairing::pair_phone(env.cmd("sp"));
    b.call(json!({"op": "goto", "url": link}));
    b.wait("#pair-check[data-check]");
    common::pairing::approve(b, pair, &printed);
    receiver
        .db()
        .query_row("SELECT id FROM machines", [], |r| r.get(0))
        .unwrap()
}

/// As the receiver puts an id into a link (every byte but letters and digits as `%XX`).
fn url_encoded(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The page opened (or was brought to) prompt `att`, with `action` to bring forward.
fn assert_opened_at(b: &mut Browser, att: &str, action: &str) {
    let opened = format!("#attention={}&do={action}", url_encoded(att));
    assert!(
        until(Duration::from_secs(10), || b.call(json!({"op": "url"}))
            ["url"]
            .as_str()
            .is_some_and(|u| u.ends_with(&opened))),
        "the page did not open at the prompt: {}",
        b.call(json!({"op": "url"}))["url"]
    );
}

/// Dispatches a `notificationclick` for the worker's own notification `tag`, with `action`.
fn press(b: &mut Browser, tag: &str, action: &str) {
    let script = format!(
        "(async () => {{
            const [n] = await self.registration.getNotifications({{ tag: {tag} }});
            if (!n) throw new Error('no notification ' + {tag});
            self.dispatchEvent(new NotificationEvent('notificationclick', {{ notification: n, action: {action} }}));
            return true;
        }})()",
        tag = json!(tag),
        action = json!(action)
    );
    b.call(json!({"op": "sw_eval", "script": script}));
}

/// DECISIONS 36: a worker cannot touch the passkey, so a notification's Allow opens the page,
/// which asks for the touch over that exact allow; Deny still signs with the day key there.
#[test]
fn a_notifications_allow_opens_the_page_for_a_touch_its_deny_is_signed_in_the_worker_and_without_a_current_grant_it_opens_the_page(
) {
    let _one = one_browser();
    let (_dir, receiver, mut service, dev_a, _dev_b) = pushing_to_two_devices(31, 32);
    let mut env = Env::new();
    env.write_config(json!({
        "sinks": [{"name": "phone", "url": receiver.running.url, "tier": 1, "control": "signed", "token": TOKEN}],
        "control": {"permission_wait_s": 90}
    }));
    let mut b = Browser::launch();
    b.call(json!({"op": "webauthn"}));
    b.call(json!({"op": "grant", "origin": receiver.page, "permissions": ["notifications"]}));
    log_in(&mut b, &receiver.page);
    let machine = pair(&env, &mut b, &receiver);
    env.start_sync();
    let session = "9e8d7c6b-5a49-4382-9170-6f5e4d3c2b1a";
    let key = format!("claude-code:{session}");

    // 1. A first prompt denied on the page: its day key and grant (one passkey touch).
    let hook = env.spawn_hook("sp-permission", &permission_request(session, "echo one"));
    let one = new_attention(&env, &[]);
    b.call(json!({"op": "goto", "url": format!("{}/", receiver.page)}));
    b.wait("#signed");
    b.click(&format!("[data-attention=\"{one}\"] button.deny"));
    let out = finish(hook, Duration::from_secs(60));
    assert!(stdout(&out).contains("\"deny\""), "log: {}", env.log());

    // 2. The next prompt's push carries what to sign; Allow on the notification sends
    // nothing from the worker: it opens the prompt on the page, where the person touches
    // the passkey over that allow, and the hook prints allow.
    let hook = env.spawn_hook("sp-permission", &permission_request(session, "echo two"));
    let two = new_attention(&env, std::slice::from_ref(&one));
    let tag = format!("attention:{two}");
    let pushed = service.next(&dev_a, "/push/a", &tag);
    assert_eq!(
        pushed["answer"],
        json!({"session": key, "attention_id": two, "machine": machine, "rp": "localhost"})
    );
    assert_eq!(
        pushed["actions"][0],
        json!({"action": "allow", "title": "Allow…"})
    );
    assert_eq!(pushed["body"], "echo two");
    show(&mut b, &receiver.page, &pushed);
    press(&mut b, &tag, "allow");
    assert_opened_at(&mut b, &two, "allow");
    assert_eq!(
        receiver.messages_for(&two),
        Vec::<(String, String)>::new(),
        "the worker sent an allow"
    );
    b.click(&format!("[data-attention=\"{two}\"] button.allow"));
    let out = finish(hook, Duration::from_secs(60));
    assert_eq!(stdout(&out).trim_end(), ALLOW, "log: {}", env.log());
    let sent = receiver.messages_for(&two);
    assert_eq!(sent.len(), 1, "one answer: {sent:?}");
    let envelope: Value = serde_json::from_str(&sent[0].1).unwrap();
    assert!(envelope["confirm"]["sig"].is_string(), "{envelope}");
    assert_eq!(receiver.ack(&sent[0].0)["outcome"], "delivered");

    // 3. Deny on a notification is signed in the worker with the day key.
    let hook = env.spawn_hook("sp-permission", &permission_request(session, "echo deny"));
    let denied = new_attention(&env, &[one.clone(), two.clone()]);
    let tag = format!("attention:{denied}");
    let pushed = service.next(&dev_a, "/push/a", &tag);
    show(&mut b, &receiver.page, &pushed);
    press(&mut b, &tag, "deny");
    let out = finish(hook, Duration::from_secs(60));
    assert!(stdout(&out).contains("\"deny\""), "log: {}", env.log());
    let sent = receiver.messages_for(&denied);
    assert_eq!(sent.len(), 1, "one answer: {sent:?}");
    let envelope: Value = serde_json::from_str(&sent[0].1).unwrap();
    let cmd: Value = serde_json::from_str(envelope["cmd"].as_str().unwrap()).unwrap();
    assert_eq!(
        (
            &cmd["machine"],
            &cmd["session"],
            &cmd["for"],
            &cmd["decision"]
        ),
        (&json!(machine), &json!(key), &json!(denied), &json!("deny"))
    );
    assert!(envelope["csig"].is_string() && envelope["grant"]["str"].is_string());
    assert_eq!(receiver.ack(&sent[0].0)["outcome"], "delivered");
    assert!(
        until(Duration::from_secs(5), || notifications(&mut b, &tag)
            .is_empty()),
        "the answered notification is closed"
    );

    // 4. The page's day grant has run out (as the page keeps it): Deny on the notification
    // opens the prompt on the page and sends nothing.
    let expired = b.call(json!({"op": "eval", "script": "new Promise((ok, no) => {
        const r = indexedDB.open('sessionpipe', 1);
        r.onerror = () => no(r.error);
        r.onsuccess = () => {
            const store = r.result.transaction('kv', 'readwrite').objectStore('kv');
            const q = store.get('day.localhost');
            q.onsuccess = () => {
                const day = q.result;
                if (!day) return no(new Error('no day key'));
                day.exp = Date.now() - 1000;
                store.put(day, 'day.localhost').onsuccess = () => ok(true);
            };
        };
    })"}));
    assert_eq!(expired["value"], true);
    let hook = env.spawn_hook("sp-permission", &permission_request(session, "echo three"));
    let three = new_attention(&env, &[one.clone(), two.clone(), denied.clone()]);
    let tag = format!("attention:{three}");
    let pushed = service.next(&dev_a, "/push/a", &tag);
    show(&mut b, &receiver.page, &pushed);
    press(&mut b, &tag, "deny");
    assert_opened_at(&mut b, &three, "deny");
    b.wait(&format!("[data-attention=\"{three}\"].focused"));
    assert_eq!(
        receiver.messages_for(&three),
        Vec::<(String, String)>::new(),
        "nothing was sent for the prompt"
    );
    assert_eq!(
        env.query::<String>(&format!(
            "SELECT state FROM attention WHERE attention_id = '{three}'"
        )),
        vec!["open".to_string()]
    );
    // The page itself asks for a new grant (the passkey again) and answers.
    b.click(&format!("[data-attention=\"{three}\"] button.deny"));
    let out = finish(hook, Duration::from_secs(60));
    let printed = stdout(&out);
    assert!(
        printed.contains("\"deny\"") && !printed.contains("\"allow\""),
        "{printed}"
    );
}
