//! Telling the person (issue 14): the receiver pushes to a fake push service and a fake ntfy
//! server on loopback, and this test checks what a browser and ntfy would get.
//!
//! The test subscribes the way a browser does (its own P-256 key and 16-byte auth secret,
//! through the page's API), decrypts what arrives (aes128gcm, RFC 8291) and checks the VAPID
//! token (RFC 8292): its ES256 signature under the key the page was given, its audience and
//! its expiry. A device the push service no longer knows (410) is dropped; at the desk
//! (DECISIONS 27) nothing is pushed.
//!
//! The fake services are on loopback, so these receivers run with `allow_private_push`
//! (`sp-receiver --allow-private-push`); without it such targets are refused, as the tests
//! of that say.
use sessionpipe_testkit::http::{self, agent};
use sessionpipe_testkit::push::{Device, FakeService};
use sessionpipe_testkit::{browser, wait::wait_until};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Value};
use spreceiver::{Receiver, ReceiverOptions};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const LOGIN: &str = "page-login-token-for-the-push-test";

fn page(r: &Receiver, path: &str, body: Option<Value>) -> (u16, Value) {
    http::page_call(&r.url(), LOGIN, path, body.as_ref())
}

fn post_event(r: &Receiver, ev: Value) {
    let mut resp = agent()
        .post(format!("{}/api/sessionpipe/v1/events", r.url()))
        .header("authorization", &format!("Bearer {}", r.token()))
        .header("sessionpipe-protocol", "1")
        .header("content-type", "application/json")
        .send(json!({ "events": [ev] }).to_string())
        .unwrap();
    let status = resp.status().as_u16();
    assert_eq!(
        status,
        202,
        "{}",
        resp.body_mut().read_to_string().unwrap_or_default()
    );
}

fn now_wire() -> String {
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    time::OffsetDateTime::now_utc().format(&fmt).unwrap()
}

fn attention(kind: &str, seq: u64, id: &str) -> Value {
    let data = if kind == "attention.needed" {
        json!({"attention_id": id, "kind": "permission", "tool": "Bash", "message": "rm -rf build"})
    } else {
        json!({"attention_id": id, "how": "answered"})
    };
    json!({
        "protocol": 1, "id": ulid::Ulid::new().to_string(), "type": kind, "time": now_wire(),
        "tier": 1, "harness": {"name": "claude-code", "event": "PermissionRequest"},
        "session": {"id": "push-session-1", "seq": seq, "cwd": "~/src/api"},
        "privacy": {"rulesets": ["secrets@1"], "pii": false}, "data": data
    })
}

fn start() -> Receiver {
    start_with(true)
}

fn start_with(allow_private_push: bool) -> Receiver {
    let r = Receiver::start(ReceiverOptions {
        login_token: Some(LOGIN.into()),
        allow_private_push,
        ..ReceiverOptions::default()
    })
    .unwrap();
    post_event(
        &r,
        json!({
            "protocol": 1, "id": ulid::Ulid::new().to_string(), "type": "session.started",
            "time": now_wire(), "tier": 1, "harness": {"name": "claude-code", "event": "SessionStart"},
            "session": {"id": "push-session-1", "seq": 0, "cwd": "~/src/api"},
            "privacy": {"rulesets": ["secrets@1"], "pii": false}, "data": {"source": "startup"}
        }),
    );
    r
}

/// The page's push settings change `op`; its status and answer.
fn push_settings(r: &Receiver, op: Value) -> (u16, Value) {
    page(r, "/page/api/push", Some(op))
}

/// The push settings as the page reads them, checked to hold nothing of `secret`.
fn push_state_without(r: &Receiver, secret: &str) -> Value {
    let state = push_state(r);
    let text = state.to_string();
    assert!(!text.contains(secret), "the page sees {secret}: {text}");
    state
}

/// A push settings change the receiver takes; its answer.
fn set_push(r: &Receiver, op: Value) -> Value {
    let (s, v) = push_settings(r, op);
    assert_eq!(s, 200, "{v}");
    v
}

/// The push settings as the page reads them.
fn push_state(r: &Receiver) -> Value {
    page(r, "/page/api/push", None).1
}

/// The person is away when attention `id` is needed: it is pushed.
fn away_then_needed(r: &Receiver, id: &str) {
    set_away(r, true);
    post_event(r, attention("attention.needed", 1, id));
}

fn set_away(r: &Receiver, away: bool) {
    assert_eq!(
        page(r, "/page/api/away", Some(json!({"away": away}))).0,
        200
    );
}

/// Subscribes `device` at `endpoint` the way the page does; the receiver's answer.
fn subscribe(r: &Receiver, device: &Device, endpoint: &str) -> Value {
    set_push(
        r,
        json!({"op": "subscribe", "subscription": device.subscription(endpoint)}),
    )
}

/// The push log as the page sees it, newest first.
fn push_log(r: &Receiver) -> Vec<Value> {
    push_state(r)["log"].as_array().cloned().unwrap_or_default()
}

/// Checks `Authorization: vapid t=JWT, k=KEY` (RFC 8292): `k` is the key the page gave the
/// browser, the token is ES256-signed by it, for this push service, not yet expired and
/// good for at most 24 hours.
fn check_vapid(header: &str, page_key: &str, service: &str) {
    let rest = header.strip_prefix("vapid ").expect("vapid scheme");
    let mut t = "";
    let mut k = "";
    for part in rest.split(',') {
        let part = part.trim();
        if let Some(v) = part.strip_prefix("t=") {
            t = v;
        } else if let Some(v) = part.strip_prefix("k=") {
            k = v;
        }
    }
    assert_eq!(k, page_key, "k is the key the page subscribed with");
    let key =
        p256::ecdsa::VerifyingKey::from_sec1_bytes(&URL_SAFE_NO_PAD.decode(k).unwrap()).unwrap();
    let (signed, sig) = t.rsplit_once('.').unwrap();
    let sig = p256::ecdsa::Signature::from_slice(&URL_SAFE_NO_PAD.decode(sig).unwrap()).unwrap();
    use p256::ecdsa::signature::Verifier;
    key.verify(signed.as_bytes(), &sig)
        .expect("the VAPID token is signed by the receiver's key");
    let (head, claims) = signed.split_once('.').unwrap();
    let head: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(head).unwrap()).unwrap();
    assert_eq!(head["alg"], "ES256");
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).unwrap()).unwrap();
    // web-push-native names the service by scheme and host (real push services use the
    // default port; the fake one's port is left out).
    let host = service.rsplit_once(':').unwrap().0;
    assert_eq!(claims["aud"], host, "{claims}");
    assert!(claims["sub"]
        .as_str()
        .is_some_and(|s| s.starts_with("mailto:") || s.starts_with("https://")));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let exp = claims["exp"].as_i64().unwrap();
    assert!(exp > now && exp <= now + 24 * 3600, "exp {exp}, now {now}");
}

#[test]
fn a_prompt_is_pushed_encrypted_and_signed_and_withdrawn_when_it_clears() {
    let r = start();
    let service = FakeService::start();
    let device = Device::new(7);
    let endpoint = format!("{}/push/device-one", service.url);
    set_push(
        &r,
        json!({"op": "subscribe", "subscription": device.subscription(&endpoint), "name": "phone"}),
    );
    // The page never sees a device's endpoint.
    let state = push_state_without(&r, "device-one");
    let page_key = state["vapid"].as_str().unwrap().to_owned();
    assert_eq!(state["devices"][0]["name"], "phone");
    away_then_needed(&r, "perm-1");
    let got = service.next();
    assert_eq!(got.path, "/push/device-one");
    assert_eq!(got.headers["content-encoding"], "aes128gcm");
    assert_eq!(got.headers["ttl"], "600");
    check_vapid(&got.headers["authorization"], &page_key, &service.url);
    let shown = device.decrypt(&got.body);
    assert_eq!(shown["title"], "claude-code wants to run Bash");
    assert_eq!(shown["body"], "rm -rf build");
    assert_eq!(shown["tag"], "attention:perm-1");
    assert!(shown["url"]
        .as_str()
        .unwrap()
        .ends_with("/#attention=perm%2D1"));

    post_event(&r, attention("attention.cleared", 2, "perm-1"));
    let cleared = device.decrypt(&service.next().body);
    assert_eq!(cleared, json!({"clear": "attention:perm-1"}));

    // The push service forgot the device: it is dropped, and the page says so.
    service.statuses.lock().unwrap().push(410);
    post_event(&r, attention("attention.needed", 3, "perm-2"));
    service.next();
    wait_until(
        "the device the service no longer knows is removed",
        Duration::from_secs(10),
        || push_state(&r)["devices"] == json!([]),
    );
    assert!(push_log(&r)[0]["result"]
        .as_str()
        .unwrap()
        .contains("removed"));
}

#[test]
fn a_prompt_put_off_with_not_now_has_its_notification_withdrawn_on_every_device() {
    let r = start();
    let service = FakeService::start();
    let (phone, tablet) = (Device::new(8), Device::new(9));
    for (d, path) in [(&phone, "phone"), (&tablet, "tablet")] {
        let endpoint = format!("{}/push/{path}", service.url);
        set_push(
            &r,
            json!({"op": "subscribe", "subscription": d.subscription(&endpoint), "name": path}),
        );
    }
    away_then_needed(&r, "perm-5");
    let mut shown = [service.next(), service.next()];
    shown.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(phone.decrypt(&shown[0].body)["tag"], "attention:perm-5");
    assert_eq!(tablet.decrypt(&shown[1].body)["tag"], "attention:perm-5");

    let (status, v) = page(
        &r,
        "/page/api/snooze",
        Some(json!({"prompts": [{"session": "claude-code:push-session-1", "for": "perm-5"}]})),
    );
    assert_eq!((status, &v["snoozed"]), (200, &json!(["perm-5"])), "{v}");
    // Not answered, but no longer on any device: each gets the withdrawal for its tag.
    let mut withdrawn = [service.next(), service.next()];
    withdrawn.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(withdrawn[0].path, "/push/phone");
    assert_eq!(withdrawn[1].path, "/push/tablet");
    assert_eq!(
        phone.decrypt(&withdrawn[0].body),
        json!({"clear": "attention:perm-5"})
    );
    assert_eq!(
        tablet.decrypt(&withdrawn[1].body),
        json!({"clear": "attention:perm-5"})
    );
}

fn turn_ended(seq: u64, reason: &str) -> Value {
    let mut ev = attention("attention.cleared", seq, "unused");
    ev["type"] = json!("turn.ended");
    ev["harness"]["event"] = json!("Stop");
    ev["data"] = json!({ "reason": reason });
    ev
}

#[test]
fn a_finished_turn_is_pushed_and_one_the_person_stopped_is_not() {
    let r = start();
    let service = FakeService::start();
    let device = Device::new(8);
    subscribe(&r, &device, &format!("{}/push/d3", service.url));
    set_away(&r, true);
    // The push worker takes events in order: were the stopped turn pushed, it would be the
    // first request the service sees.
    post_event(&r, turn_ended(1, "interrupt"));
    post_event(&r, turn_ended(2, "stop"));
    let shown = device.decrypt(&service.next().body);
    assert_eq!(shown["title"], "claude-code is done");
    assert_eq!(
        shown["body"],
        "Its turn ended in ~/src/api; it waits for you."
    );
    assert_eq!(shown["tag"], "turn:claude-code:push-session-1");
    assert_eq!(shown["actions"], json!([]));
    let log = push_log(&r);
    let turns: Vec<&Value> = log
        .iter()
        .filter(|l| l["what"].as_str().unwrap_or("").starts_with("turn.ended"))
        .collect();
    assert_eq!(turns.len(), 1, "one push for two turn ends: {log:?}");
}

/// Two receivers on one database (issue 29; one SQLite file, or in the PostgreSQL pass one
/// PostgreSQL database): a prompt sent to both
/// (a sender trying the other) is pushed once, and its end, reported to the other receiver
/// once the person is back at the desk, still withdraws it, since the push is kept in the
/// database, not in the memory of the receiver that sent it.
#[test]
fn two_receivers_on_one_database_push_a_prompt_once_and_either_withdraws_it() {
    let dir = tempfile::tempdir().unwrap();
    // The suite's PostgreSQL pass shares a PostgreSQL database instead (scripts/test.sh).
    let shared = spreceiver::test_database()
        .unwrap()
        .unwrap_or_else(|| spreceiver::Database::File(dir.path().join("receiver.db")));
    let on_the_file = || {
        Receiver::start(ReceiverOptions {
            login_token: Some(LOGIN.into()),
            allow_private_push: true,
            db: Some(shared.clone()),
            ..ReceiverOptions::default()
        })
        .unwrap()
    };
    let (a, b) = (on_the_file(), on_the_file());
    let service = FakeService::start();
    let device = Device::new(11);
    subscribe(&a, &device, &format!("{}/push/shared", service.url));
    set_away(&b, true);
    let sent = |r: &Receiver| {
        push_log(r)
            .iter()
            .filter(|l| l["result"].as_str().unwrap_or("").starts_with("delivered"))
            .count()
    };
    let needed = attention("attention.needed", 1, "perm-9");
    post_event(&a, needed.clone());
    let shown = device.decrypt(&service.next().body);
    assert_eq!(shown["tag"], "attention:perm-9");
    // One SQLite file stands in for the shared database here, and SQLite's deferred
    // transactions give up at once when another connection wrote between their read and
    // their write: the test writes through one receiver at a time (PostgreSQL has no such
    // limit).
    wait_until("b logs one push sent", Duration::from_secs(10), || {
        sent(&b) == 1
    });
    post_event(&b, needed);

    set_away(&a, false);
    post_event(&b, attention("attention.cleared", 2, "perm-9"));
    let cleared = device.decrypt(&service.next().body);
    assert_eq!(cleared, json!({"clear": "attention:perm-9"}));
    // Both logs are one: one push each, nothing more.
    wait_until(
        "each receiver logs two pushes sent",
        Duration::from_secs(10),
        || sent(&a) == 2 && sent(&b) == 2,
    );
    assert!(service.got.try_recv().is_err(), "nothing else arrived");
}

#[test]
fn at_the_desk_or_quiet_nothing_is_pushed_and_a_failing_service_is_tried_again() {
    let r = start();
    let service = FakeService::start();
    let device = Device::new(9);
    let v = subscribe(&r, &device, &format!("{}/push/d2", service.url));
    let id = v["id"].as_str().unwrap().to_owned();

    // At the desk: recorded, not pushed.
    post_event(&r, attention("attention.needed", 1, "perm-1"));
    wait_until(
        "the push log says at the desk",
        Duration::from_secs(10),
        || {
            push_log(&r)
                .iter()
                .any(|l| l["result"].as_str().unwrap_or("").contains("at the desk"))
        },
    );
    // Quiet device, away: nothing goes to it.
    set_away(&r, true);
    assert_eq!(
        push_settings(&r, json!({"op": "quiet", "id": id, "quiet": true})).0,
        200
    );
    post_event(&r, attention("attention.needed", 2, "perm-2"));
    wait_until(
        "the push log says every device is quiet",
        Duration::from_secs(10),
        || {
            push_log(&r).iter().any(|l| {
                l["what"] == "attention.needed perm-2"
                    && l["result"] == "not sent: every device is quiet"
            })
        },
    );
    // Loud again: a 503 is tried again (after its backoff) and then delivered.
    assert_eq!(
        push_settings(&r, json!({"op": "quiet", "id": id, "quiet": false})).0,
        200
    );
    service.statuses.lock().unwrap().push(503);
    post_event(&r, attention("attention.needed", 3, "perm-3"));
    let first = service.next();
    assert_eq!(device.decrypt(&first.body)["tag"], "attention:perm-3");
    let again = service.next();
    assert_eq!(
        device.decrypt(&again.body)["tag"],
        "attention:perm-3",
        "the quiet time's prompt was never pushed; the failed one was tried again"
    );
    assert!(
        service.got.try_recv().is_err(),
        "nothing else arrived (perm-1 at the desk, perm-2 while quiet)"
    );
    // What the receiver scheduled for it: the first back-off, 2 s.
    let log = push_log(&r);
    assert!(
        log.iter().any(|l| l["result"]
            .as_str()
            .is_some_and(|t| t.starts_with("failed: ") && t.ends_with("; trying again in 2 s"))),
        "{log:?}"
    );
    // A subscription the page sends wrong is refused with the rule.
    let (s, v) = push_settings(
        &r,
        json!({"op": "subscribe", "subscription": {"endpoint": "http://push.example/x", "keys": {"p256dh": "AAAA", "auth": "AAAA"}}}),
    );
    assert_eq!(
        (s, v["reason"].as_str()),
        (400, Some("subscription: endpoint must be an https URL"))
    );
}

#[test]
fn ntfy_gets_the_topic_the_token_a_title_and_an_action_that_opens_the_page() {
    let r = start();
    let ntfy = FakeService::start();
    let topic = format!("{}/sp-alerts", ntfy.url);
    set_push(
        &r,
        json!({"op": "ntfy", "url": topic, "token": "tk_secret", "content": true}),
    );
    // The token never goes back to the page.
    let state = push_state_without(&r, "tk_secret");
    assert_eq!(
        state["ntfy"],
        json!({"url": topic, "token": true, "content": true})
    );
    away_then_needed(&r, "perm-9");
    let got = ntfy.next();
    assert_eq!(got.path, "/sp-alerts");
    assert_eq!(got.headers["authorization"], "Bearer tk_secret");
    assert_eq!(got.headers["title"], "claude-code wants to run Bash");
    assert_eq!(got.headers["priority"], "high");
    let click = &got.headers["click"];
    assert!(click.ends_with("/#attention=perm%2D9"), "{click}");
    assert_eq!(
        got.headers["actions"],
        format!("view, Open the prompt, {click}, clear=true")
    );
    assert_eq!(String::from_utf8(got.body).unwrap(), "rm -rf build");
    // ntfy cannot withdraw a message: a clearing is not sent there.
    post_event(&r, attention("attention.cleared", 2, "perm-9"));
    post_event(&r, attention("attention.needed", 3, "perm-10"));
    let next = ntfy.next();
    assert!(next.headers["click"].ends_with("perm%2D10"));
}

/// A port that counts the connections made to it (and answers none).
struct Counter {
    port: u16,
    connections: Arc<std::sync::atomic::AtomicUsize>,
}

impl Counter {
    fn start() -> Counter {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c = connections.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(s);
            }
        });
        Counter { port, connections }
    }

    fn count(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[test]
fn without_allow_private_push_private_targets_are_refused_and_the_push_log_says_why() {
    let r = start_with(false);
    let ntfy = FakeService::start();
    let port = ntfy.url.rsplit(':').next().unwrap().to_owned();
    // The page refuses what it can judge from the URL: http, loopback, private, link-local,
    // unique local and shared addresses, localhost.
    for url in [
        format!("{}/topic", ntfy.url),
        format!("https://127.0.0.1:{port}/topic"),
        format!("https://localhost:{port}/topic"),
        "https://[::1]/topic".to_owned(),
        "https://10.1.2.3/topic".to_owned(),
        "https://192.168.1.10/topic".to_owned(),
        "https://169.254.169.254/topic".to_owned(),
        "https://[fd00::1]/topic".to_owned(),
        "https://100.64.0.1/topic".to_owned(),
        "http://ntfy.example/topic".to_owned(),
    ] {
        let (s, v) = push_settings(&r, json!({"op": "ntfy", "url": url}));
        let why = v["reason"].as_str().unwrap_or_default();
        assert_eq!(s, 400, "{url}: {v}");
        assert!(
            why.starts_with("ntfy url must be an https URL")
                && why.contains("--allow-private-push"),
            "{url}: {why}"
        );
    }
    let device = Device::new(11);
    let (s, v) = push_settings(
        &r,
        json!({"op": "subscribe", "subscription": device.subscription(&format!("{}/push/d", ntfy.url))}),
    );
    assert_eq!(s, 400, "{v}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("--allow-private-push"),
        "{v}"
    );
    // A name the page cannot judge is judged on the addresses it resolves to, where the
    // push connects: `127.1` is 127.0.0.1 to the resolver. Nothing connects, the push log
    // says refused and why (never a status code), and it is not tried again.
    let counter = Counter::start();
    let sneaky = format!("https://127.1:{}/topic", counter.port);
    set_push(&r, json!({"op": "ntfy", "url": sneaky}));
    away_then_needed(&r, "perm-1");
    let target = format!("ntfy {sneaky}");
    wait_until(
        &format!("the push to {target} is logged"),
        Duration::from_secs(10),
        || push_log(&r).iter().any(|l| l["target"] == target.as_str()),
    );
    let log = push_log(&r);
    let mine: Vec<&Value> = log
        .iter()
        .filter(|l| l["target"] == target.as_str())
        .collect();
    assert_eq!(mine.len(), 1, "one attempt, no retry: {log:?}");
    let result = mine[0]["result"].as_str().unwrap();
    assert_eq!(
        result,
        "refused: 127.1 resolves to 127.0.0.1, a loopback address (sp-receiver --allow-private-push allows it)"
    );
    assert_eq!(
        counter.count(),
        0,
        "nothing connected to the refused target"
    );
    assert!(
        ntfy.got.try_recv().is_err(),
        "nothing reached the loopback service"
    );
}

#[test]
fn with_allow_private_push_a_loopback_ntfy_over_http_is_used() {
    let r = start_with(true);
    let ntfy = FakeService::start();
    let topic = format!("{}/local", ntfy.url);
    set_push(&r, json!({"op": "ntfy", "url": topic}));
    away_then_needed(&r, "perm-1");
    assert_eq!(ntfy.next().path, "/local");
    wait_until(
        "the push log says delivered (201)",
        Duration::from_secs(10),
        || {
            push_log(&r)
                .iter()
                .any(|l| l["result"] == "delivered (201)")
        },
    );
}

#[test]
fn ntfy_hears_only_who_needs_the_person_unless_they_ask_for_the_content() {
    let r = start();
    let ntfy = FakeService::start();
    let topic = format!("{}/quiet-topic", ntfy.url);
    set_push(&r, json!({"op": "ntfy", "url": topic}));
    assert_eq!(push_state(&r)["ntfy"]["content"], false);
    set_away(&r, true);
    let mut ev = attention("attention.needed", 1, "perm-1");
    ev["session"]["machine"] = json!("laptop");
    post_event(&r, ev);
    let got = ntfy.next();
    assert_eq!(got.headers["title"], "claude-code needs you on laptop");
    let body = String::from_utf8(got.body).unwrap();
    let all = format!("{:?} {body}", got.headers);
    for leak in ["rm -rf", "build", "Bash", "~/src/api"] {
        assert!(!all.contains(leak), "ntfy got {leak:?}: {all}");
    }
    assert!(got.headers["click"].ends_with("/#attention=perm%2D1"));
    // A finished turn: no folder either.
    post_event(&r, turn_ended(2, "stop"));
    let got = ntfy.next();
    assert_eq!(got.headers["title"], "claude-code is done");
    let body = String::from_utf8(got.body).unwrap();
    assert!(!body.contains("~/src/api"), "{body}");
}

#[test]
fn in_chromium_the_page_installs_its_worker_and_a_push_shows_a_notification_that_opens_the_prompt()
{
    if let Some(why) = browser::missing_browser_deps() {
        panic!("the browser test cannot run: {why}");
    }
    let r = start();
    post_event(&r, attention("attention.needed", 1, "perm-7"));
    // The installable page: a manifest and an icon anyone may fetch.
    let mut m = agent()
        .get(format!("{}/manifest.webmanifest", r.url()))
        .call()
        .unwrap();
    assert_eq!(m.status().as_u16(), 200);
    assert_eq!(
        m.headers().get("content-type").unwrap(),
        "application/manifest+json"
    );
    let manifest: Value = serde_json::from_str(&m.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(manifest["display"], "standalone");
    let icon = manifest["icons"][0]["src"].as_str().unwrap();
    assert_eq!(
        agent()
            .get(format!("{}{icon}", r.url()))
            .call()
            .unwrap()
            .status()
            .as_u16(),
        200
    );

    let mut b = browser::Browser::launch();
    b.call(json!({"op": "grant", "origin": r.url(), "permissions": ["notifications"]}));
    b.call(json!({"op": "goto", "url": format!("{}/", r.url())}));
    b.call(json!({"op": "fill", "selector": "#token", "value": LOGIN}));
    b.click("#login-form button[type=submit]");
    b.wait("#conn[data-state=\"live\"]");
    b.wait("[data-attention=\"perm-7\"]");
    // What the receiver would push for that prompt, delivered to the worker by CDP.
    let ev = attention("attention.needed", 1, "perm-7");
    let payload = spreceiver::push::Notice::from_event(&ev)
        .unwrap()
        .payload(&r.url());
    // Headless Chromium loses the first notification a fresh profile shows from a push
    // about two runs in three: the worker's showNotification resolves, yet its own
    // getNotifications right after finds nothing, for seconds. The same push delivered
    // again shows (the tag makes it replace, never add). So a delivery is tried up to
    // three times; our worker must show it on one of them.
    let mut shown = Value::Null;
    'deliveries: for _ in 0..3 {
        b.call(json!({"op": "push", "origin": r.url(), "data": payload.to_string()}));
        for _ in 0..40 {
            shown = b.call(json!({"op": "notifications"}))["notifications"].clone();
            if shown.as_array().is_some_and(|a| !a.is_empty()) {
                break 'deliveries;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert_eq!(
        shown.as_array().map(Vec::len),
        Some(1),
        "one notification: {shown}"
    );
    let n = &shown[0];
    assert_eq!(n["title"], "claude-code wants to run Bash", "{shown}");
    assert_eq!(n["body"], "rm -rf build");
    assert_eq!(n["tag"], "attention:perm-7");
    assert_eq!(n["actions"], json!(["allow", "deny"]));
    // Tapping it opens its link: the page brings that prompt forward.
    let link = n["data"]["url"].as_str().unwrap().to_owned();
    b.call(json!({"op": "goto", "url": link}));
    b.wait("[data-attention=\"perm-7\"].focused");
    // The clearing push withdraws it.
    let clear = spreceiver::push::Notice::from_event(&attention("attention.cleared", 2, "perm-7"))
        .unwrap()
        .payload(&r.url());
    b.call(json!({"op": "push", "origin": r.url(), "data": clear.to_string()}));
    let mut left = shown;
    for _ in 0..100 {
        left = b.call(json!({"op": "notifications"}))["notifications"].clone();
        if left == json!([]) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(left, json!([]), "the notification was withdrawn");
}

/// Width and height from a PNG's IHDR chunk (the first one, right after the signature).
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert!(
        bytes.len() > 24 && bytes.starts_with(b"\x89PNG\r\n\x1a\n") && &bytes[12..16] == b"IHDR",
        "not a PNG"
    );
    let be = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
    (be(16), be(20))
}

/// GETs a path anyone may fetch: its content type and body.
fn fetch(r: &Receiver, path: &str) -> (String, Vec<u8>) {
    let mut resp = agent().get(format!("{}{path}", r.url())).call().unwrap();
    assert_eq!(resp.status().as_u16(), 200, "{path}");
    let ty = resp.headers()["content-type"].to_str().unwrap().to_owned();
    (ty, resp.body_mut().read_to_vec().unwrap())
}

#[test]
fn every_manifest_icon_is_served_with_its_declared_type_and_each_png_has_its_declared_size() {
    let r = start();
    let (_, m) = fetch(&r, "/manifest.webmanifest");
    let manifest: Value = serde_json::from_slice(&m).unwrap();
    let icons = manifest["icons"].as_array().unwrap();
    let mut pngs = Vec::new();
    for icon in icons {
        let src = icon["src"].as_str().unwrap();
        let (ty, body) = fetch(&r, src);
        assert_eq!(ty, icon["type"].as_str().unwrap(), "{src}");
        if ty == "image/png" {
            let (w, h) = png_size(&body);
            assert_eq!(format!("{w}x{h}"), icon["sizes"], "{src}");
            pngs.push((w, icon["purpose"].as_str().unwrap_or("any").to_owned()));
        } else {
            assert!(body.starts_with(b"<svg"), "{src}");
        }
    }
    // What Android needs to install the page: 192 and 512 PNGs, and one it may mask.
    for want in [(192, "any"), (512, "any"), (512, "maskable")] {
        assert!(
            pngs.iter().any(|(w, p)| *w == want.0 && p == want.1),
            "no {want:?} PNG in {icons:?}"
        );
    }
    // What iOS puts on the Home Screen: the apple-touch-icon both pages link, a PNG.
    let index = page_html(&r, "/");
    let (_, login) = fetch(&r, "/login");
    let link =
        r#"<link rel="apple-touch-icon" href="/assets/apple-touch-icon.png" sizes="180x180">"#;
    assert!(index.contains(link), "the page links its apple-touch-icon");
    assert!(String::from_utf8(login).unwrap().contains(link));
    let (ty, body) = fetch(&r, "/assets/apple-touch-icon.png");
    assert_eq!((ty.as_str(), png_size(&body)), ("image/png", (180, 180)));
}

/// The page's HTML as a logged-in client gets it.
fn page_html(r: &Receiver, path: &str) -> String {
    let mut resp = agent()
        .get(format!("{}{path}", r.url()))
        .header("authorization", &format!("Bearer {LOGIN}"))
        .call()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    resp.body_mut().read_to_string().unwrap()
}

#[test]
fn in_chromium_the_shell_loads_from_the_worker_cache_while_the_receiver_is_down_and_says_offline() {
    if let Some(why) = browser::missing_browser_deps() {
        panic!("the browser test cannot run: {why}");
    }
    let r = start();
    post_event(&r, attention("attention.needed", 1, "perm-5"));
    let mut b = browser::Browser::launch();
    b.call(json!({"op": "goto", "url": format!("{}/", r.url())}));
    // A cache an older worker left: the new one drops it when it activates.
    b.call(json!({"op": "eval", "script":
        "caches.open('sessionpipe-shell-0ld').then((c) => c.put('/assets/app.js', new Response('old'))).then(() => true)"}));
    b.call(json!({"op": "fill", "selector": "#token", "value": LOGIN}));
    b.click("#login-form button[type=submit]");
    b.wait("#conn[data-state=\"live\"]");
    b.wait("[data-attention=\"perm-5\"]");
    b.call(json!({"op": "worker_activated", "timeout": 30000}));

    let stored = b.call(json!({"op": "caches"}))["caches"].clone();
    let names: Vec<&String> = stored.as_object().unwrap().keys().collect();
    assert_eq!(
        names.len(),
        1,
        "one shell cache, the old one dropped: {stored}"
    );
    assert!(names[0].starts_with("sessionpipe-shell-"), "{stored}");
    let kept: Vec<&str> = stored[names[0]]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    for shell in [
        "/",
        "/login",
        "/assets/app.js",
        "/assets/app.css",
        "/assets/login.js",
        "/manifest.webmanifest",
        "/assets/icon-192.png",
    ] {
        assert!(kept.contains(&shell), "{shell} is kept: {kept:?}");
    }

    // The receiver goes away: a reload still shows the page, and it says it is offline.
    r.set_down(true);
    b.call(json!({"op": "goto", "url": format!("{}/", r.url())}));
    b.wait("header.bar h1");
    b.wait("#conn[data-state=\"offline\"]");
    b.wait("#offline");
    assert_eq!(b.text("#conn"), "offline");
    assert!(b.text("#offline").contains("cannot be reached"));
    // Back: the same page goes live again by itself and shows the prompt.
    r.set_down(false);
    b.wait("#conn[data-state=\"live\"]");
    b.call(json!({"op": "wait", "selector": "#offline", "state": "hidden"}));
    b.wait("[data-attention=\"perm-5\"]");

    // This device loses its network: the same.
    b.call(json!({"op": "offline", "offline": true}));
    b.call(json!({"op": "goto", "url": format!("{}/", r.url())}));
    b.wait("#conn[data-state=\"offline\"]");
    b.wait("#offline");
    b.call(json!({"op": "offline", "offline": false}));
    b.wait("#conn[data-state=\"live\"]");

    // Nothing the API answered was ever stored: only the shell.
    let after = b.call(json!({"op": "caches"}))["caches"].clone();
    for (name, paths) in after.as_object().unwrap() {
        for p in paths.as_array().unwrap() {
            let p = p.as_str().unwrap();
            assert!(
                !p.starts_with("/page/api/") && !p.starts_with("/api/"),
                "{name} keeps {p}"
            );
        }
    }
    assert_eq!(after.as_object().unwrap().len(), 1, "{after}");
}
