//! The test receiver (`spreceiver`) over real loopback HTTP, driven by a ureq 3 client:
//! the seed-era delivery fixtures (09, 10, 11) through an interpreter of their steps, then the
//! receiver's own behaviours (auth, long poll, redelivery, dedup, faults, going down).

use std::collections::HashSet;
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::path::Path;

use serde_json::{json, Value};
use spreceiver::{Fault, Receiver, ReceiverOptions, Route};

use sessionpipe_testkit::fixtures;
use sessionpipe_testkit::wait::wait_until;
const TOKEN: &str = "sink-token-for-tests";

// ---------------------------------------------------------------------------------------
// Client helpers
// ---------------------------------------------------------------------------------------

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into()
}

#[derive(Debug)]
struct Resp {
    status: u16,
    retry_after: Option<String>,
    text: String,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.text))
    }
}

fn finish(mut r: ureq::http::Response<ureq::Body>) -> Resp {
    let status = r.status().as_u16();
    let retry_after = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = r.body_mut().read_to_string().expect("reading the body");
    Resp {
        status,
        retry_after,
        text,
    }
}

fn try_get(a: &ureq::Agent, url: &str, token: Option<&str>) -> Result<Resp, ureq::Error> {
    let mut req = a.get(url);
    if let Some(t) = token {
        req = req.header("authorization", &format!("Bearer {t}"));
    }
    req.call().map(finish)
}

fn try_post(
    a: &ureq::Agent,
    url: &str,
    token: Option<&str>,
    body: &Value,
) -> Result<Resp, ureq::Error> {
    let mut req = a
        .post(url)
        .header("sessionpipe-protocol", "1")
        .content_type("application/json");
    if let Some(t) = token {
        req = req.header("authorization", &format!("Bearer {t}"));
    }
    req.send(body.to_string()).map(finish)
}

fn get(a: &ureq::Agent, url: &str, token: Option<&str>) -> Resp {
    try_get(a, url, token).unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

fn post(a: &ureq::Agent, url: &str, token: Option<&str>, body: &Value) -> Resp {
    try_post(a, url, token, body).unwrap_or_else(|e| panic!("POST {url}: {e}"))
}

fn start() -> Receiver {
    start_with(|_| {})
}

fn start_with(f: impl FnOnce(&mut ReceiverOptions)) -> Receiver {
    let mut o = ReceiverOptions {
        token: TOKEN.to_owned(),
        test_door: true,
        ..ReceiverOptions::default()
    };
    f(&mut o);
    Receiver::start(o).expect("starting the receiver")
}

fn poll_url(r: &Receiver, session: &str, wait: u64) -> String {
    format!(
        "{}/api/sessionpipe/v1/control?session={session}&wait={wait}",
        r.url()
    )
}

fn events_url(r: &Receiver) -> String {
    format!("{}/api/sessionpipe/v1/events", r.url())
}

fn ack_url(r: &Receiver) -> String {
    format!("{}/api/sessionpipe/v1/control/ack", r.url())
}

fn now_ms() -> String {
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    time::OffsetDateTime::now_utc().format(&fmt).unwrap()
}

fn ack_body(ids: &[&str], outcome: &str) -> Value {
    let acks: Vec<Value> = ids
        .iter()
        .map(|id| json!({"id": id, "outcome": outcome, "at": now_ms()}))
        .collect();
    json!({ "acks": acks })
}

/// Acks `ids` with `outcome` (sink token).
fn ack(a: &ureq::Agent, r: &Receiver, ids: &[&str], outcome: &str) -> Resp {
    post(a, &ack_url(r), Some(TOKEN), &ack_body(ids, outcome))
}

static RUN: AtomicU64 = AtomicU64::new(0);

/// A string unique to this test process and call, usable inside a session id.
fn run_id() -> String {
    format!(
        "{}-{}-{}",
        std::process::id(),
        RUN.fetch_add(1, Ordering::SeqCst),
        ulid::Ulid::new().to_string().to_lowercase()
    )
}

/// The protocol schemas these tests check the receiver's answers with: ours (`schemas/`, and
/// `tests/fixtures/schemas/` for the ones we never write ourselves) and, when the reference's
/// fixtures are here, the reference's copy of the same schema too.
struct Schema {
    name: &'static str,
    own: jsonschema::Validator,
    peer: Option<jsonschema::Validator>,
}

/// Ours assert `format` (a date that does not exist is refused); the reference's are read as
/// they always were here (draft default).
fn compile(path: &Path, formats: bool) -> jsonschema::Validator {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).unwrap();
    let built = if formats {
        jsonschema::draft202012::options()
            .should_validate_formats(true)
            .build(&v)
    } else {
        jsonschema::validator_for(&v)
    };
    built.unwrap_or_else(|e| panic!("compiling {}: {e}", path.display()))
}

/// `name` is one of well-known, batch-response, error, control, control-poll, event.
fn schema(name: &'static str) -> Schema {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let (own, peer_prefix) = match name {
        "well-known" => (fixtures::own("schemas/well-known.json"), "well-known."),
        "batch-response" => (
            fixtures::own("schemas/batch-response.json"),
            "batch-response.",
        ),
        "error" => (fixtures::own("schemas/error.json"), "error."),
        "control" => (root.join("schemas/control-message.json"), "control.e918475"),
        "control-poll" => (
            root.join("schemas/control-poll.json"),
            "control-poll.9138259",
        ),
        "event" => (fixtures::own("schemas/event.json"), "event.e918475"),
        other => panic!("no schema {other}"),
    };
    let peer = fixtures::peer_dir().map(|dir| {
        let path = std::fs::read_dir(dir.join("schemas"))
            .expect("peer schemas dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(peer_prefix))
            })
            .unwrap_or_else(|| panic!("no peer schema {peer_prefix}*"));
        compile(&path, false)
    });
    Schema {
        name,
        own: compile(&own, true),
        peer,
    }
}

impl Schema {
    fn is_valid(&self, instance: &Value) -> bool {
        let own = self.own.is_valid(instance);
        if let Some(p) = &self.peer {
            assert_eq!(
                p.is_valid(instance),
                own,
                "{}: our schema and the reference's disagree on {instance}",
                self.name
            );
        }
        own
    }
}

fn assert_valid(v: &Schema, instance: &Value) {
    let errors: Vec<String> = v.own.iter_errors(instance).map(|e| e.to_string()).collect();
    assert!(
        errors.is_empty(),
        "{instance} is invalid ({}): {errors:?}",
        v.name
    );
    if let Some(p) = &v.peer {
        let errors: Vec<String> = p.iter_errors(instance).map(|e| e.to_string()).collect();
        assert!(
            errors.is_empty(),
            "{instance} is invalid under the reference's {}: {errors:?}",
            v.name
        );
    }
}

fn event(session: &str, seq: u64, tier: u8) -> Value {
    json!({
        "protocol": 1,
        "id": ulid::Ulid::new().to_string(),
        "type": "attention.needed",
        "time": now_ms(),
        "tier": tier,
        "harness": {"name": "claude-code", "version": "2.1.290", "event": "PermissionRequest"},
        "session": {"id": session, "seq": seq, "cwd": "~/src/x"},
        "privacy": {"rulesets": ["secrets@1"], "pii": false},
        "data": {"attention_id": format!("perm-{seq}"), "kind": "permission"}
    })
}

// ---------------------------------------------------------------------------------------
// Delivery fixture interpreter
// ---------------------------------------------------------------------------------------

/// Resolves an endpoint from the well-known (relative to the origin, or absolute).
fn endpoint(base: &str, ep: &str) -> String {
    if ep.starts_with("http://") || ep.starts_with("https://") {
        ep.to_owned()
    } else {
        format!("{base}{ep}")
    }
}

fn run_fixture(path: &Path) {
    let file = path.display().to_string();
    let raw =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading fixture {file}: {e}"));
    let run = run_id();
    let raw = raw
        .replace("{run12}", &run.chars().take(12).collect::<String>())
        .replace("{run}", &run);
    let fx: Value = serde_json::from_str(&raw).expect("fixture JSON");
    let name = fx["name"].as_str().unwrap_or(&file).to_owned();

    let r = start();
    let a = agent(Duration::from_secs(30));
    let base = r.url();
    let wk = get(&a, &format!("{base}/.well-known/sessionpipe"), None);
    assert_eq!(wk.status, 200, "{name}: well-known");
    let wk = wk.json();
    if let Some(cap) = fx["capability"].as_str() {
        assert!(
            fixtures::offers(&wk, cap),
            "{name}: receiver lacks capability {cap}"
        );
    }
    let control = endpoint(&base, wk["endpoints"]["control"].as_str().expect("control"));

    let mut last_ids: Vec<String> = Vec::new();
    let steps = fx["steps"].as_array().expect("steps");
    for (i, step) in steps.iter().enumerate() {
        let obj = step.as_object().expect("step object");
        let verbs: Vec<&String> = obj.keys().filter(|k| *k != "expect").collect();
        assert_eq!(verbs.len(), 1, "{name} step {i}: one verb per step: {step}");
        let verb = verbs[0].as_str();
        let arg = &obj[verb];
        let resp: Option<Resp> = match verb {
            "enqueue" => {
                // The receiver's own test door.
                let body = json!({"session": arg["session"], "message": arg["message"]});
                let resp = post(&a, &format!("{base}/test/enqueue"), None, &body);
                assert_eq!(resp.status, 200, "{name} step {i}: enqueue: {}", resp.text);
                Some(resp)
            }
            "poll" => {
                let session = arg["session"].as_str().expect("poll.session");
                let mut url = format!("{control}?session={session}");
                if let Some(w) = arg.get("wait") {
                    url.push_str(&format!("&wait={w}"));
                }
                let token = match arg.get("auth") {
                    None | Some(Value::Bool(true)) => Some(TOKEN.to_owned()),
                    Some(Value::Bool(false)) | Some(Value::Null) => None,
                    Some(Value::String(t)) => Some(t.clone()),
                    Some(other) => panic!("{name} step {i}: unknown auth {other}"),
                };
                let resp = get(&a, &url, token.as_deref());
                if resp.status == 200 {
                    last_ids = resp.json()["messages"]
                        .as_array()
                        .expect("messages")
                        .iter()
                        .map(|m| m["id"].as_str().expect("message id").to_owned())
                        .collect();
                }
                Some(resp)
            }
            "ack" => {
                assert!(
                    !last_ids.is_empty(),
                    "{name} step {i}: ack with no message from a previous poll"
                );
                let outcome = arg["outcome"].as_str().expect("ack.outcome");
                let acks: Vec<Value> = last_ids
                    .iter()
                    .map(|id| {
                        let mut e = json!({"id": id, "outcome": outcome, "at": now_ms()});
                        for k in ["detail", "mode", "session", "reply", "seq"] {
                            if let Some(v) = arg.get(k) {
                                e[k] = v.clone();
                            }
                        }
                        e
                    })
                    .collect();
                Some(post(
                    &a,
                    &format!("{control}/ack"),
                    Some(TOKEN),
                    &json!({ "acks": acks }),
                ))
            }
            "wait_s" => {
                let s = arg.as_f64().expect("wait_s seconds");
                std::thread::sleep(Duration::from_secs_f64(s));
                None
            }
            other => panic!("{name} step {i}: unsupported verb {other}"),
        };
        if let Some(expect) = obj.get("expect") {
            let resp = resp.unwrap_or_else(|| panic!("{name} step {i}: expect without a request"));
            let step = format!("{name} step {i} ({verb})");
            fixtures::check_expect(&step, expect, resp.status, &resp.text);
        }
    }
    r.stop();
}

/// One test a delivery fixture: `name: "file"`, run from our own fixtures (`own`) or, as a
/// cross-check, the reference's seed-era ones (`peer`: 09, 10, 11; skipped without them).
macro_rules! fixture_tests {
    ($where:ident { $($(#[$doc:meta])* $name:ident: $file:literal,)* }) => {$(
        $(#[$doc])*
        #[test]
        fn $name() {
            fixture_tests!(@run $where $file);
        }
    )*};
    (@run own $file:literal) => {
        run_fixture(&fixtures::own(concat!("delivery/", $file)))
    };
    (@run peer $file:literal) => {
        if let Some(dir) = fixtures::peer_or_skip($file) {
            run_fixture(&dir.join("delivery").join($file));
        }
    };
}

fixture_tests!(own {
    fixture_control_prompt: "control-prompt.json",
    fixture_control_expired: "control-expired.json",
    /// DECISIONS 38: `taken` stops redelivery, `progress` and the final ack's `mode`/`reply`.
    fixture_control_taken: "control-taken.json",
    fixture_control_double_ack: "control-double-ack.json",
});

fixture_tests!(peer {
    peer_fixture_09_control: "09-control.9138259c54ffd58dec54344b02c62ffb8494ad8e.json",
    peer_fixture_10_control_expired:
        "10-control-expired.e918475f4a7284f20cc7b4877aa20e59ce10a343.json",
    peer_fixture_11_control_double_ack:
        "11-control-double-ack.e918475f4a7284f20cc7b4877aa20e59ce10a343.json",
});

#[test]
fn subset_matcher_follows_the_conformance_rules() {
    let actual = json!({"messages": [{"id": "X", "kind": "prompt", "text": "hi"}], "extra": 1});
    assert!(
        fixtures::subset_match(&json!({"messages": [{"kind": "prompt"}]}), &actual, "b").is_ok()
    );
    assert!(fixtures::subset_match(&json!({"messages": [{"id": "*"}]}), &actual, "b").is_ok());
    assert!(fixtures::subset_match(&json!({"messages": []}), &actual, "b").is_err());
    assert!(
        fixtures::subset_match(&json!({"messages": [{"kind": "cancel"}]}), &actual, "b").is_err()
    );
    assert!(fixtures::subset_match(&json!({"missing": "*"}), &actual, "b").is_err());
}

// ---------------------------------------------------------------------------------------
// Discovery
// ---------------------------------------------------------------------------------------

#[test]
fn well_known_validates_with_and_without_control() {
    let v = schema("well-known");
    let r = start_with(|o| o.wait_max_s = 7);
    let a = agent(Duration::from_secs(5));
    let wk = get(&a, &format!("{}/.well-known/sessionpipe", r.url()), None);
    assert_eq!(wk.status, 200);
    let wk = wk.json();
    assert_valid(&v, &wk);
    assert_eq!(wk["protocol"], json!([1]));
    assert_eq!(wk["max_tier"], 1);
    assert_eq!(wk["capabilities"], json!(["events", "control"]));
    assert_eq!(wk["auth"], json!(["bearer"]));
    assert_eq!(wk["endpoints"]["events"], "/api/sessionpipe/v1/events");
    assert_eq!(wk["endpoints"]["control"], "/api/sessionpipe/v1/control");
    assert_eq!(wk["batch"], json!({"max_events": 50, "max_bytes": 262144}));
    assert_eq!(wk["control"], json!({"wait_max_s": 7}));

    let r2 = start_with(|o| o.capabilities = vec!["events".into()]);
    let wk2 = get(&a, &format!("{}/.well-known/sessionpipe", r2.url()), None).json();
    assert_valid(&v, &wk2);
    assert!(wk2["endpoints"].get("control").is_none(), "{wk2}");
    assert!(wk2.get("control").is_none(), "{wk2}");
    // Without the capability the control routes do not exist.
    let p = get(&a, &poll_url(&r2, "codex:s1", 0), Some(TOKEN));
    assert_eq!(p.status, 404);
    assert_eq!(p.json(), json!({"reason": "not_found"}));
    assert_eq!(r2.polls(), 1);
}

#[test]
fn unknown_paths_are_404() {
    let r = start();
    let a = agent(Duration::from_secs(5));
    let resp = get(&a, &format!("{}/nope", r.url()), Some(TOKEN));
    assert_eq!(resp.status, 404);
    assert_eq!(resp.json(), json!({"reason": "not_found"}));
}

// ---------------------------------------------------------------------------------------
// Auth
// ---------------------------------------------------------------------------------------

#[test]
fn authed_routes_answer_401_without_the_token() {
    let r = start();
    let a = agent(Duration::from_secs(5));
    let s = format!("codex:{}", run_id());
    let msg = r.enqueue(&s, json!({"kind": "prompt", "text": "hi"}));
    let id = msg["id"].as_str().unwrap();
    for token in [None, Some("wrong-token")] {
        let e = post(
            &a,
            &events_url(&r),
            token,
            &json!({"events": [event("s", 0, 0)]}),
        );
        assert_eq!(e.status, 401, "events with {token:?}");
        assert_eq!(e.json(), json!({"reason": "unauthorized"}));
        let p = get(&a, &poll_url(&r, &s, 0), token);
        assert_eq!(p.status, 401, "poll with {token:?}");
        assert_eq!(p.json(), json!({"reason": "unauthorized"}));
        let k = post(&a, &ack_url(&r), token, &ack_body(&[id], "delivered"));
        assert_eq!(k.status, 401, "ack with {token:?}");
        assert_eq!(k.json(), json!({"reason": "unauthorized"}));
    }
    // Nothing got through.
    assert!(r.events().is_empty());
    assert!(r.acks().is_empty());
    assert_eq!(r.pending(&s).len(), 1);
    assert_eq!(r.event_posts(), 2);
    assert_eq!(r.polls(), 2);
    // The well-known needs no token; the right token works.
    assert_eq!(
        get(&a, &format!("{}/.well-known/sessionpipe", r.url()), None).status,
        200
    );
    assert_eq!(get(&a, &poll_url(&r, &s, 0), Some(TOKEN)).status, 200);
}

// ---------------------------------------------------------------------------------------
// Control: long poll, redelivery, acks
// ---------------------------------------------------------------------------------------

#[test]
/// The enqueue wakes the held poll: it is answered with the message, where a poll left to its
/// wait would have ended in a 204 (and the client's own timeout, 5 s, is shorter than that
/// wait). How fast is measured in BENCHMARKS.md ("enqueue → a held long poll answered").
fn a_held_long_poll_answers_on_an_enqueue() {
    let r = start();
    let s = format!("claude-code:{}", run_id());
    let url = poll_url(&r, &s, 10);
    let poller = std::thread::spawn(move || get(&agent(Duration::from_secs(5)), &url, Some(TOKEN)));
    // Held: it looked at the empty queue and waits for a change.
    wait_until("the poll is held", Duration::from_secs(5), || {
        r.held_polls() == 1
    });
    let msg = r.enqueue(
        &s,
        json!({"kind": "prompt", "text": "ping", "expires_in_s": 30}),
    );
    let resp = poller.join().unwrap();
    assert_eq!(r.held_polls(), 0, "the answered poll is no longer held");
    assert_eq!(resp.status, 200);
    let body = resp.json();
    assert_valid(&schema("control-poll"), &body);
    assert_eq!(body["messages"], json!([msg]));
    assert_eq!(r.poll_sessions(), vec![s]);
}

#[test]
fn long_poll_answers_204_when_the_wait_runs_out() {
    let r = start_with(|o| o.wait_max_s = 1);
    // A client that gives up after 5 s: a poll held for its 30 s would fail here.
    let a = agent(Duration::from_secs(5));
    let s = format!("codex:{}", run_id());
    // wait=1: held its second, then answered 204.
    let t = Instant::now();
    let resp = get(&a, &poll_url(&r, &s, 1), Some(TOKEN));
    let held = t.elapsed();
    assert_eq!(resp.status, 204);
    assert_eq!(resp.text, "");
    assert!(held >= Duration::from_millis(950), "held {held:?}");
    // wait above wait_max_s is clamped to it (answered, not left to the client's timeout).
    let resp = get(&a, &poll_url(&r, &s, 30), Some(TOKEN));
    assert_eq!(resp.status, 204);
    // wait=0 is never held (a hold here lasts the 1 s of wait_max_s); no wait defaults to
    // wait_max_s.
    let t = Instant::now();
    assert_eq!(get(&a, &poll_url(&r, &s, 0), Some(TOKEN)).status, 204);
    assert!(t.elapsed() < Duration::from_millis(950), "wait=0 was held");
    let t = Instant::now();
    let url = format!("{}/api/sessionpipe/v1/control?session={s}", r.url());
    assert_eq!(get(&a, &url, Some(TOKEN)).status, 204);
    assert!(t.elapsed() >= Duration::from_millis(950));
    assert_eq!(r.polls(), 4);
}

#[test]
fn messages_are_redelivered_until_acked() {
    let r = start();
    let a = agent(Duration::from_secs(10));
    let s = format!("codex:{}", run_id());
    let other = format!("codex:{}", run_id());
    let m1 = r.enqueue(
        &s,
        json!({"kind": "permission.answer", "for": "att-1", "decision": "deny", "note": "no"}),
    );
    let m2 = r.enqueue(&s, json!({"kind": "cancel"}));
    let id1 = m1["id"].as_str().unwrap().to_owned();
    let id2 = m2["id"].as_str().unwrap().to_owned();
    let control_schema = schema("control");
    assert_valid(&control_schema, &m1);
    assert_valid(&control_schema, &m2);
    assert_eq!(
        m1.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["id", "kind", "for", "decision", "note", "at", "expires_at"]
    );

    for _ in 0..3 {
        let resp = get(&a, &poll_url(&r, &s, 1), Some(TOKEN));
        assert_eq!(resp.status, 200);
        assert_eq!(resp.json()["messages"], json!([m1, m2]), "oldest first");
    }
    // Another session sees none of them.
    assert_eq!(get(&a, &poll_url(&r, &other, 0), Some(TOKEN)).status, 204);

    let acked = ack(&a, &r, &[&id1], "delivered");
    assert_eq!(acked.status, 202);
    assert_eq!(acked.json(), json!({}));
    let resp = get(&a, &poll_url(&r, &s, 1), Some(TOKEN));
    assert_eq!(resp.json()["messages"], json!([m2]));

    let mut failed = ack_body(&[&id2], "failed");
    failed["acks"][0]["detail"] = json!("no path");
    assert_eq!(post(&a, &ack_url(&r), Some(TOKEN), &failed).status, 202);
    assert_eq!(get(&a, &poll_url(&r, &s, 0), Some(TOKEN)).status, 204);

    let got = r
        .wait_ack(&id2, Duration::from_secs(1))
        .expect("ack for m2");
    assert_eq!(got["outcome"], "failed");
    assert_eq!(got["detail"], "no path");
    assert_eq!(r.acks().len(), 2);
    assert!(r
        .wait_ack("01K6ZZZZZZZZZZZZZZZZZZZZZZ", Duration::from_millis(50))
        .is_none());
    assert_eq!(r.poll_sessions().len(), 6);
}

#[test]
fn raw_messages_follow_their_id_and_expiry() {
    let r = start();
    let a = agent(Duration::from_secs(10));
    let s = format!("codex:{}", run_id());
    let no_id = json!({"kind": "prompt", "text": "no id"});
    let bad_id = json!({"id": "not-a-ulid", "kind": "bogus", "at": "x", "expires_at": "y"});
    let past = json!({"id": ulid::Ulid::new().to_string(), "kind": "prompt",
        "at": "2020-01-01T00:00:00.000Z", "expires_at": "2020-01-01T00:01:00.000Z"});
    r.enqueue_raw(&s, no_id.clone());
    r.enqueue_raw(&s, bad_id.clone());
    r.enqueue_raw(&s, past);
    let resp = get(&a, &poll_url(&r, &s, 0), Some(TOKEN));
    assert_eq!(resp.json()["messages"], json!([no_id, bad_id]));
    // A schema-invalid id cannot be acked through the route (400) ...
    let bad = ack(&a, &r, &["not-a-ulid"], "failed");
    assert_eq!(bad.status, 400);
    assert!(bad.json()["reason"].as_str().unwrap().contains("ULID"));
    // ... so both keep coming.
    let resp = get(&a, &poll_url(&r, &s, 0), Some(TOKEN));
    assert_eq!(resp.json()["messages"].as_array().unwrap().len(), 2);
}

#[test]
fn acks_are_validated() {
    let r = start();
    let a = agent(Duration::from_secs(5));
    let id = ulid::Ulid::new().to_string();
    let cases = [
        (json!({}), "acks"),
        (json!({"acks": []}), "empty"),
        (
            json!({"acks": [{"id": "01k6", "outcome": "delivered", "at": now_ms()}]}),
            "ULID",
        ),
        (
            json!({"acks": [{"id": id, "outcome": "refused", "at": now_ms()}]}),
            "outcome",
        ),
        (
            json!({"acks": [{"id": id, "outcome": "expired", "at": "2026-01-01T00:00:00Z"}]}),
            "at",
        ),
        (json!({"acks": [{"id": id, "outcome": "expired"}]}), "at"),
        (
            json!({"acks": [{"id": id, "outcome": "failed", "at": now_ms(), "detail": "x".repeat(501)}]}),
            "detail",
        ),
    ];
    for (body, word) in cases {
        let resp = post(&a, &ack_url(&r), Some(TOKEN), &body);
        assert_eq!(resp.status, 400, "{body}");
        let reason = resp.json()["reason"].as_str().unwrap().to_owned();
        assert!(reason.contains(word), "{body}: reason {reason:?}");
        assert_valid(&schema("error"), &resp.json());
    }
    let resp = try_post(&a, &ack_url(&r), Some(TOKEN), &json!(null)).unwrap();
    assert_eq!(resp.status, 400);
    assert!(r.acks().is_empty());
    // Several entries at once, a detail of exactly 500, a duplicate: all fine.
    let mut ok = ack_body(&[&id, &id], "unsupported");
    ok["acks"][1]["detail"] = json!("é".repeat(500));
    assert_eq!(post(&a, &ack_url(&r), Some(TOKEN), &ok).status, 202);
    assert_eq!(r.acks().len(), 2);
}

#[test]
fn poll_sessions_are_checked_and_recorded() {
    let r = start();
    let a = agent(Duration::from_secs(5));
    let base = format!("{}/api/sessionpipe/v1/control", r.url());
    for q in [
        "",
        "?wait=0",
        "?session=codex&wait=0",
        "?session=Codex:abc&wait=0",
        "?session=codex:&wait=0",
        "?session=codex:a%20b&wait=0",
        "?session=codex:abc&wait=soon",
    ] {
        let resp = get(&a, &format!("{base}{q}"), Some(TOKEN));
        assert_eq!(resp.status, 400, "{q}");
    }
    // Percent-encoded colons decode; ids may themselves contain colons.
    let s = "opencode:ses:01:x";
    let m = r.enqueue(s, json!({"kind": "prompt", "text": "t"}));
    let resp = get(
        &a,
        &format!("{base}?session=opencode%3Ases%3A01%3Ax&wait=0"),
        Some(TOKEN),
    );
    assert_eq!(resp.status, 200);
    assert_eq!(resp.json()["messages"][0]["id"], m["id"]);
    assert_eq!(r.polls(), 8);
    assert_eq!(
        r.poll_sessions(),
        vec![
            "codex",
            "Codex:abc",
            "codex:",
            "codex:a b",
            "codex:abc",
            "opencode:ses:01:x"
        ]
    );
}

#[test]
fn clock_offset_skews_minted_times_but_not_delivery() {
    let r = start_with(|o| o.clock_offset_ms = -3_600_000);
    let a = agent(Duration::from_secs(5));
    let s = format!("codex:{}", run_id());
    let m = r.enqueue(
        &s,
        json!({"kind": "prompt", "text": "t", "expires_in_s": 5}),
    );
    let fmt = time::format_description::well_known::Rfc3339;
    let at = time::OffsetDateTime::parse(m["at"].as_str().unwrap(), &fmt).unwrap();
    let exp = time::OffsetDateTime::parse(m["expires_at"].as_str().unwrap(), &fmt).unwrap();
    let skew = time::OffsetDateTime::now_utc() - at;
    assert!(
        (skew.whole_seconds() - 3600).abs() <= 2,
        "at {at} is not an hour behind: {skew}"
    );
    assert_eq!((exp - at).whole_milliseconds(), 5000);
    assert_eq!(get(&a, &poll_url(&r, &s, 0), Some(TOKEN)).status, 200);
}

#[test]
fn test_door_enqueues_and_lists() {
    let r = start();
    let a = agent(Duration::from_secs(5));
    let s = format!("codex:{}", run_id());
    let resp = post(
        &a,
        &format!("{}/test/enqueue", r.url()),
        None,
        &json!({"session": s, "message": {"kind": "prompt", "text": "door", "expires_in_s": 60}}),
    );
    assert_eq!(resp.status, 200);
    let m = resp.json();
    assert_valid(&schema("control"), &m);
    assert_eq!(r.pending(&s), vec![m.clone()]);
    let bad = post(
        &a,
        &format!("{}/test/enqueue", r.url()),
        None,
        &json!({"session": "nope", "message": {"kind": "prompt"}}),
    );
    assert_eq!(bad.status, 400);

    let id = m["id"].as_str().unwrap();
    ack(&a, &r, &[id], "delivered");
    post(
        &a,
        &events_url(&r),
        Some(TOKEN),
        &json!({"events": [event("door", 0, 0)]}),
    );
    let acks = get(&a, &format!("{}/test/acks", r.url()), None).json();
    assert_eq!(acks, Value::Array(r.acks()));
    assert_eq!(acks.as_array().unwrap().len(), 1);
    let events = get(&a, &format!("{}/test/events", r.url()), None).json();
    assert_eq!(events, Value::Array(r.events()));
    assert_eq!(events.as_array().unwrap().len(), 1);
}

// ---------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------

#[test]
fn events_are_deduplicated_on_harness_session_seq() {
    let r = start();
    let a = agent(Duration::from_secs(5));
    let response_schema = schema("batch-response");
    let batch = json!({"events": [event("s-1", 0, 0), event("s-1", 1, 1), event("s-2", 0, 0)]});
    let resp = post(&a, &events_url(&r), Some(TOKEN), &batch);
    assert_eq!(resp.status, 202);
    assert_valid(&response_schema, &resp.json());
    assert_eq!(
        resp.json(),
        json!({"accepted": 3, "duplicates": 0, "rejected": [], "max_tier": 1})
    );
    // A retry of the same batch, and a new event id with an old (harness, session, seq).
    let resp = post(&a, &events_url(&r), Some(TOKEN), &batch);
    assert_eq!(
        resp.json(),
        json!({"accepted": 0, "duplicates": 3, "rejected": [], "max_tier": 1})
    );
    let mut codex = event("s-1", 1, 0);
    codex["harness"]["name"] = json!("codex");
    let resp = post(
        &a,
        &events_url(&r),
        Some(TOKEN),
        &json!({"events": [event("s-1", 1, 0), codex.clone()]}),
    );
    assert_eq!(
        resp.json(),
        json!({"accepted": 1, "duplicates": 1, "rejected": [], "max_tier": 1})
    );
    let evs = r.events();
    assert_eq!(evs.len(), 4);
    assert_eq!(evs[..3], batch["events"].as_array().unwrap()[..]);
    assert_eq!(evs[3], codex);
    assert_eq!(r.event_posts(), 3);
    let got = r
        .wait_event(Duration::from_secs(1), |e| e["harness"]["name"] == "codex")
        .unwrap();
    assert_eq!(got, codex);
    assert!(r
        .wait_event(Duration::from_millis(50), |e| e["session"]["id"] == "zzz")
        .is_none());
    // The protocol header was recorded.
    assert!(r
        .requests()
        .iter()
        .filter(|q| q.route == Some(Route::Events))
        .all(|q| q.header("sessionpipe-protocol") == Some("1")));
}

#[test]
fn wait_event_wakes_on_arrival() {
    let r = start();
    let url = events_url(&r);
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let a = agent(Duration::from_secs(5));
        post(
            &a,
            &url,
            Some(TOKEN),
            &json!({"events": [event("late", 7, 0)]}),
        )
    });
    let got = r.wait_event(Duration::from_secs(5), |e| e["session"]["seq"] == 7);
    assert_eq!(got.unwrap()["session"]["id"], "late");
    assert_eq!(t.join().unwrap().status, 202);
}

#[test]
fn events_errors() {
    let r = start_with(|o| {
        o.max_bytes = 4096;
        o.max_events = 2;
    });
    let a = agent(Duration::from_secs(5));
    let url = events_url(&r);
    let err = schema("error");

    let tier = post(
        &a,
        &url,
        Some(TOKEN),
        &json!({"events": [event("t", 0, 0), event("t", 1, 2)]}),
    );
    assert_eq!(tier.status, 403);
    assert_eq!(
        tier.json(),
        json!({"reason": "tier_above_max", "max_tier": 1})
    );
    assert_valid(&err, &tier.json());

    for body in [
        json!({"events": []}),
        json!({"events": [event("t", 0, 0), event("t", 1, 0), event("t", 2, 0)]}),
        json!({"nope": 1}),
        json!([1]),
    ] {
        let resp = post(&a, &url, Some(TOKEN), &body);
        assert_eq!(resp.status, 400, "{body}");
        assert_valid(&err, &resp.json());
    }
    let resp = a
        .post(&url)
        .header("authorization", &format!("Bearer {TOKEN}"))
        .send("{\"events\": [")
        .map(finish)
        .unwrap();
    assert_eq!(resp.status, 400);

    let mut big = event("t", 0, 0);
    big["data"]["pad"] = json!("x".repeat(5000));
    let resp = post(&a, &url, Some(TOKEN), &json!({"events": [big]}));
    assert_eq!(resp.status, 413);
    assert_valid(&err, &resp.json());

    let resp = a
        .post(&url)
        .header("authorization", &format!("Bearer {TOKEN}"))
        .header("sessionpipe-protocol", "2")
        .send(json!({"events": [event("t", 0, 0)]}).to_string())
        .map(finish)
        .unwrap();
    assert_eq!(resp.status, 400);
    assert_eq!(
        resp.json(),
        json!({"reason": "unsupported_protocol", "supported": [1]})
    );

    // No protocol header: recorded, accepted.
    let resp = a
        .post(&url)
        .header("authorization", &format!("Bearer {TOKEN}"))
        .send(json!({"events": [event("t", 0, 0)]}).to_string())
        .map(finish)
        .unwrap();
    assert_eq!(resp.status, 202);
    let last = r.requests().pop().unwrap();
    assert_eq!(last.header("sessionpipe-protocol"), None);
    assert_eq!(last.status, Some(202));

    // A schema-invalid event is rejected by id, the rest accepted.
    let mut bad = event("t", 1, 0);
    bad["session"]["seq"] = json!(-1);
    let bad_id = bad["id"].clone();
    let resp = post(
        &a,
        &url,
        Some(TOKEN),
        &json!({"events": [bad, event("t", 2, 0)]}),
    );
    assert_eq!(resp.status, 202);
    let body = resp.json();
    assert_valid(&schema("batch-response"), &body);
    assert_eq!(body["accepted"], 1);
    assert_eq!(body["rejected"][0]["id"], bad_id);
    assert_eq!(r.rejected().len(), 1);
    assert_eq!(r.events().len(), 2);
    assert_eq!(r.event_posts(), 10);
}

#[test]
fn the_receivers_event_check_agrees_with_the_schema() {
    let v = schema("event");
    let good = event("x", 3, 1);
    assert_valid(&v, &good);
    let mutations: Vec<(&str, Value)> = vec![
        ("/tier", json!(-1)),
        ("/tier", json!(1.5)),
        ("/protocol", json!(2)),
        ("/type", json!("Attention")),
        ("/time", json!("2026-02-30T00:00:00.000Z")),
        ("/harness/name", json!("Claude")),
        ("/session/id", json!("")),
        ("/session/seq", json!("1")),
        ("/session/title_source", json!("other")),
        ("/session/parent_id", json!(null)),
        ("/session/machine", json!("m".repeat(81))),
        ("/privacy/pii", json!("no")),
        ("/privacy/rulesets", json!(["Secrets@1"])),
        ("/data", json!([])),
    ];
    let r = start_with(|o| o.max_tier = 3);
    let a = agent(Duration::from_secs(5));
    for (i, (ptr, val)) in mutations.into_iter().enumerate() {
        let mut ev = event("x", i as u64, 0);
        let (parent, key) = ptr.rsplit_once('/').unwrap();
        let target = if parent.is_empty() {
            &mut ev
        } else {
            ev.pointer_mut(parent).expect("parent exists")
        };
        target[key] = val.clone();
        let schema_ok = v.is_valid(&ev);
        let resp = post(&a, &events_url(&r), Some(TOKEN), &json!({"events": [ev]}));
        assert_eq!(resp.status, 202, "{ptr}={val}");
        let accepted = resp.json()["accepted"] == 1;
        assert_eq!(accepted, schema_ok, "{ptr}={val}: receiver vs schema");
    }
}

// ---------------------------------------------------------------------------------------
// Faults
// ---------------------------------------------------------------------------------------

#[test]
fn fault_status_is_answered_once_then_normal_service() {
    let r = start();
    let a = agent(Duration::from_secs(5));
    r.push_fault(Route::Events, Fault::Status(503));
    r.push_fault(Route::Events, Fault::Status(500));
    let batch = json!({"events": [event("f", 0, 0)]});
    let first = post(&a, &events_url(&r), Some(TOKEN), &batch);
    assert_eq!(first.status, 503);
    assert_eq!(first.json(), json!({"reason": "unavailable"}));
    let second = post(&a, &events_url(&r), Some(TOKEN), &batch);
    assert_eq!(second.status, 500, "faults are FIFO");
    assert!(r.events().is_empty(), "a faulted request is not processed");
    let third = post(&a, &events_url(&r), Some(TOKEN), &batch);
    assert_eq!(third.status, 202);
    assert_eq!(r.events().len(), 1);
    assert_eq!(r.event_posts(), 3);
    let statuses: Vec<Option<u16>> = r.requests().iter().map(|q| q.status).collect();
    assert_eq!(statuses, [Some(503), Some(500), Some(202)]);
}

#[test]
fn fault_too_many_requests_sends_retry_after() {
    let r = start();
    let a = agent(Duration::from_secs(5));
    let s = format!("codex:{}", run_id());
    r.push_fault(Route::Poll, Fault::TooManyRequests { retry_after_s: 7 });
    let resp = get(&a, &poll_url(&r, &s, 0), Some(TOKEN));
    assert_eq!(resp.status, 429);
    assert_eq!(resp.retry_after.as_deref(), Some("7"));
    assert_eq!(resp.json(), json!({"reason": "too_many_requests"}));
    assert_eq!(get(&a, &poll_url(&r, &s, 0), Some(TOKEN)).status, 204);
    assert_eq!(r.polls(), 2);
}

#[test]
fn fault_reset_is_a_connection_error() {
    let r = start();
    let a = agent(Duration::from_secs(5));
    let wk = format!("{}/.well-known/sessionpipe", r.url());
    // Warm the pool: the reset also hits a kept-alive connection.
    assert_eq!(get(&a, &wk, None).status, 200);
    r.push_fault(Route::WellKnown, Fault::Reset);
    let err = try_get(&a, &wk, None).expect_err("a reset must not produce a response");
    // A cut connection, not the client's timeout.
    assert!(
        matches!(
            err,
            ureq::Error::Io(_) | ureq::Error::Protocol(_) | ureq::Error::ConnectionFailed
        ),
        "unexpected error kind: {err:?}"
    );
    // Served again afterwards, on a fresh connection.
    assert_eq!(get(&a, &wk, None).status, 200);
    assert_eq!(r.requests()[1].status, None);
}

#[test]
fn fault_truncated_gives_a_short_body() {
    let r = start();
    let a = agent(Duration::from_secs(5));
    let s = format!("codex:{}", run_id());
    r.push_fault(Route::Poll, Fault::Truncated);
    let mut resp = a
        .get(poll_url(&r, &s, 0))
        .header("authorization", &format!("Bearer {TOKEN}"))
        .call()
        .expect("the head arrives");
    assert_eq!(resp.status().as_u16(), 200);
    let declared: usize = resp
        .headers()
        .get("content-length")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    match resp.body_mut().read_to_string() {
        Err(_) => {}
        Ok(body) => assert!(
            body.len() < declared,
            "body of {} bytes for content-length {declared}",
            body.len()
        ),
    }
    assert_eq!(get(&a, &poll_url(&r, &s, 0), Some(TOKEN)).status, 204);
}

#[test]
fn fault_invalid_json_fails_to_parse() {
    let r = start();
    let a = agent(Duration::from_secs(5));
    let id = ulid::Ulid::new().to_string();
    r.push_fault(Route::Ack, Fault::InvalidJson);
    let resp = ack(&a, &r, &[&id], "delivered");
    assert_eq!(resp.status, 200);
    assert_eq!(resp.text, "{not json");
    assert!(serde_json::from_str::<Value>(&resp.text).is_err());
    assert!(r.acks().is_empty(), "a faulted ack is not recorded");
    assert_eq!(ack(&a, &r, &[&id], "delivered").status, 202);
    assert_eq!(r.acks().len(), 1);
}

#[test]
fn fault_delay_then_normal_answer() {
    let r = start();
    let a = agent(Duration::from_secs(5));
    r.push_fault(Route::WellKnown, Fault::Delay(Duration::from_millis(400)));
    let t = Instant::now();
    let resp = get(&a, &format!("{}/.well-known/sessionpipe", r.url()), None);
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(resp.status, 200);
    assert_eq!(resp.json()["protocol"], json!([1]));
}

#[test]
fn fault_hang_times_the_client_out_without_blocking_others() {
    let r = start();
    let s = format!("codex:{}", run_id());
    r.push_fault(Route::Poll, Fault::Hang);
    let url = poll_url(&r, &s, 0);
    let hung = std::thread::spawn(move || {
        let a = agent(Duration::from_secs(1));
        let t = Instant::now();
        (try_get(&a, &url, Some(TOKEN)), t.elapsed())
    });
    // Other requests are served meanwhile (once the hung one has taken the fault).
    wait_until(
        "the hung poll took its fault",
        Duration::from_secs(5),
        || r.pending_faults(Route::Poll) == 0,
    );
    let a = agent(Duration::from_secs(5));
    assert_eq!(get(&a, &poll_url(&r, &s, 0), Some(TOKEN)).status, 204);
    let (res, took) = hung.join().unwrap();
    let err = res.expect_err("a hung request must not be answered");
    assert!(matches!(err, ureq::Error::Timeout(_)), "{err:?}");
    assert!(took >= Duration::from_millis(950), "{took:?}");
    r.stop();
}

// ---------------------------------------------------------------------------------------
// Going down and coming back
// ---------------------------------------------------------------------------------------

#[test]
fn set_down_refuses_connections_and_set_up_keeps_state() {
    let r = start();
    let a = agent(Duration::from_secs(5));
    let s = format!("claude-code:{}", run_id());
    let url = r.url();
    let port = r.port();
    assert_eq!(
        post(
            &a,
            &events_url(&r),
            Some(TOKEN),
            &json!({"events": [event("d", 0, 0)]})
        )
        .status,
        202
    );
    // A long poll held while the receiver goes down is cut, unanswered.
    let held_url = poll_url(&r, &s, 20);
    let held = std::thread::spawn(move || {
        try_get(&agent(Duration::from_secs(10)), &held_url, Some(TOKEN))
    });
    wait_until("the long poll is held", Duration::from_secs(5), || {
        r.held_polls() == 1
    });

    r.set_down(true);
    assert!(r.is_down());
    let refused = TcpStream::connect(("127.0.0.1", port)).expect_err("port must refuse");
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    // The pooled keep-alive connection is gone too.
    let err = try_get(&a, &format!("{url}/.well-known/sessionpipe"), None)
        .expect_err("down receiver must not answer");
    assert!(
        matches!(
            err,
            ureq::Error::Io(_) | ureq::Error::ConnectionFailed | ureq::Error::Protocol(_)
        ),
        "{err:?}"
    );
    // Cut by going down: an error, and not the client's own timeout.
    let err = held
        .join()
        .unwrap()
        .expect_err("the held poll got an answer");
    assert!(!matches!(err, ureq::Error::Timeout(_)), "{err:?}");
    assert_eq!(r.held_polls(), 0, "nothing is held while down");

    // State changes while down are kept.
    let m = r.enqueue(&s, json!({"kind": "prompt", "text": "while down"}));
    r.set_down(false);
    assert!(!r.is_down());
    assert_eq!(r.url(), url);
    let resp = get(&a, &poll_url(&r, &s, 0), Some(TOKEN));
    assert_eq!(resp.status, 200);
    assert_eq!(resp.json()["messages"], json!([m]));
    assert_eq!(r.events().len(), 1);
    assert_eq!(
        post(
            &a,
            &events_url(&r),
            Some(TOKEN),
            &json!({"events": [r.events()[0].clone()]})
        )
        .json()["duplicates"],
        1
    );

    // And again, repeatedly, on the same port.
    for _ in 0..3 {
        r.set_down(true);
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
        r.set_down(false);
        assert_eq!(
            get(&a, &format!("{url}/.well-known/sessionpipe"), None).status,
            200
        );
    }
    let ids: HashSet<String> = r.requests().iter().map(|q| q.url.clone()).collect();
    assert!(ids.len() >= 3);
    r.stop();
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn stop_cuts_a_hung_connection() {
    let r = start();
    r.push_fault(Route::WellKnown, Fault::Hang);
    let url = format!("{}/.well-known/sessionpipe", r.url());
    let client = std::thread::spawn(move || try_get(&agent(Duration::from_secs(10)), &url, None));
    // The request must reach the hung handler, or the stop below proves nothing.
    wait_until(
        "the request took the hang fault",
        Duration::from_secs(5),
        || r.pending_faults(Route::WellKnown) == 0,
    );
    let hung = |r: &Receiver| {
        r.requests()
            .into_iter()
            .filter(|q| q.fault == Some(Fault::Hang))
            .collect::<Vec<_>>()
    };
    // It is there, unanswered, and its client still waits.
    let before = hung(&r);
    assert_eq!(before.len(), 1, "{:?}", r.requests());
    assert_eq!(before[0].status, None);
    assert!(!client.is_finished(), "the hung request was answered");
    let clone = r.clone();
    clone.stop();
    // Cut by the stop: an error, and not the client's own timeout.
    let err = client
        .join()
        .unwrap()
        .expect_err("the hung request got an answer");
    assert!(!matches!(err, ureq::Error::Timeout(_)), "{err:?}");
    // The original handle sees the stopped receiver.
    r.set_down(false);
    assert!(r.is_down());
}
