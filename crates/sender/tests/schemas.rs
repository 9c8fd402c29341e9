//! The JSON Schemas in `schemas/`: they compile, accept what the protocol and docs/decisions.md
//! allow, refuse what they forbid, and pass our delivery fixtures (`tests/fixtures/`). Where
//! the reference's fixtures are here (`../shared/peer-data`, or `$SP_PEER_DATA`), they also
//! agree with the protocol's own (seed-era) schemas and delivery fixtures where the two
//! overlap; `peer_*` tests are only that cross-check.
//!
//! Decision on `kind`: control-message.json accepts any string as `kind`. DECISIONS 6 lists
//! "kind one of the three" among the checks but also says "Unknown kind -> ack
//! `unsupported`"; with the schema run first ("before anything else"), a schema failure
//! means `failed`, so an unknown kind must pass the schema for the code to ack it
//! `unsupported`. The per-kind requirements (for/decision, text) apply to the three
//! known kinds; id, at and expires_at are required whatever the kind. A missing or
//! non-string `kind` is a schema failure (`failed`).

// Only the schema helper: `mod common;` would also compile the other helpers in
// tests/common/ into this binary, which these tests do not need.
#[path = "common/schema.rs"]
mod schema;
use sessionpipe_testkit::fixtures;

use schema::{assert_invalid, assert_valid, compile, errors, is_valid, load_json, schema_dir};

/// The reference's schema `file` as a path for assert_valid, or None when its fixtures are
/// not here.
fn peer(file: &str) -> Option<String> {
    fixtures::peer_dir().map(|d| d.join("schemas").join(file).to_string_lossy().into_owned())
}
use serde_json::{json, Map, Value};
use std::path::PathBuf;

const PEER_CONTROL: &str = "control.e918475f4a7284f20cc7b4877aa20e59ce10a343.json";
const PEER_POLL: &str = "control-poll.9138259c54ffd58dec54344b02c62ffb8494ad8e.json";
const PEER_ACK: &str = "control-ack.9138259c54ffd58dec54344b02c62ffb8494ad8e.json";
const PEER_ACK_NEWEST: &str = "control-ack.2cd44752271b424c211c718389e6178239f62426.json";
const PEER_EVENT: &str = "event.e918475f4a7284f20cc7b4877aa20e59ce10a343.json";
const PEER_EVENT_DATA: &str = "event-data.9138259c54ffd58dec54344b02c62ffb8494ad8e.json";
const PEER_BATCH: &str = "batch.e918475f4a7284f20cc7b4877aa20e59ce10a343.json";

const OURS: [&str; 8] = [
    "control-message.json",
    "control-poll.json",
    "config.json",
    "ack-body.json",
    "event.json",
    "events-batch.json",
    "claude-code-permission-request-output.json",
    "claude-code-stop-output.json",
];

const ID: &str = "01K6H3Z7Q8X9Y0ABCDEFGHJKMN";
const ID2: &str = "01K6H3Z7Q8X9Y0ABCDEFGHJKMP";
const AT: &str = "2026-09-28T02:10:00.000Z";
const EXPIRES: &str = "2026-09-28T02:12:00.000Z";

// ---------------------------------------------------------------------------- helpers

fn set(mut v: Value, key: &str, val: Value) -> Value {
    v.as_object_mut().expect("object").insert(key.into(), val);
    v
}

fn unset(mut v: Value, key: &str) -> Value {
    v.as_object_mut().expect("object").remove(key);
    v
}

/// `v` with the value at JSON pointer `ptr` (its parent must exist) replaced.
fn set_at(mut v: Value, ptr: &str, val: Value) -> Value {
    let (parent, key) = ptr.rsplit_once('/').expect("pointer");
    v.pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("no object at {parent}"))
        .insert(key.into(), val);
    v
}

fn unset_at(mut v: Value, ptr: &str) -> Value {
    let (parent, key) = ptr.rsplit_once('/').expect("pointer");
    v.pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("no object at {parent}"))
        .remove(key);
    v
}

/// Wire timestamp `secs` seconds after 2026-09-28T00:00:00.000Z (same day).
fn ts(secs: u64) -> String {
    assert!(secs < 86_400);
    format!(
        "2026-09-28T{:02}:{:02}:{:02}.000Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

fn answer(decision: &str) -> Value {
    json!({"id": ID, "kind": "permission.answer", "for": "perm-5f1c0e9a2b7d4c31",
           "decision": decision, "at": AT, "expires_at": EXPIRES})
}

fn prompt(text: &str) -> Value {
    json!({"id": ID, "kind": "prompt", "text": text, "at": AT, "expires_at": EXPIRES})
}

fn cancel() -> Value {
    json!({"id": ID, "kind": "cancel", "at": AT, "expires_at": EXPIRES})
}

fn ack(outcome: &str) -> Value {
    json!({"id": ID, "outcome": outcome, "at": AT})
}

fn envelope(kind: &str, tier: u64, data: Value) -> Value {
    let rulesets = if tier == 0 {
        json!([])
    } else {
        json!(["secrets@1"])
    };
    json!({
        "protocol": 1, "id": ID, "type": kind, "time": AT, "tier": tier,
        "harness": {"name": "claude-code", "version": "2.1.290", "event": "PermissionRequest"},
        "session": {"id": "ed6c7665-7a41-4c1e-9a39-2b1d0c5e8f10", "seq": 412,
                    "cwd": "~/src/app", "machine": "laptop", "model": "claude-opus-4"},
        "privacy": {"rulesets": rulesets, "pii": false},
        "data": data
    })
}

fn started() -> Value {
    envelope("session.started", 0, json!({"source": "startup"}))
}

fn needed(tier: u64) -> Value {
    let data = if tier == 0 {
        json!({"attention_id": "perm-5f1c0e9a2b7d4c31", "kind": "permission"})
    } else {
        json!({"attention_id": "perm-5f1c0e9a2b7d4c31", "kind": "permission",
               "tool": "Bash", "message": "echo hi > out.txt"})
    };
    envelope("attention.needed", tier, data)
}

fn cleared(how: &str) -> Value {
    envelope(
        "attention.cleared",
        0,
        json!({"attention_id": "perm-5f1c0e9a2b7d4c31", "how": how}),
    )
}

fn allow_output() -> Value {
    json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                                  "decision": {"behavior": "allow"}}})
}

fn deny_output(message: Option<&str>) -> Value {
    let mut decision = json!({"behavior": "deny"});
    if let Some(m) = message {
        decision = set(decision, "message", json!(m));
    }
    json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}})
}

fn sink() -> Value {
    json!({"name": "home", "url": "https://pipe.example.com", "tier": 1, "control": true,
           "token": "tok_123"})
}

fn config_with_sink(s: Value) -> Value {
    json!({"sinks": [s]})
}

/// The document minus the keys that only make sense at a document's root.
fn body_of(doc: &Value) -> Value {
    let mut d = doc.clone();
    for k in ["$schema", "$id", "$defs"] {
        d.as_object_mut().unwrap().remove(k);
    }
    d
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "$ref" || k == "$dynamicRef" {
                    out.push(x.as_str().unwrap_or("<non-string>").to_string());
                }
                collect_refs(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, out)),
        _ => {}
    }
}

// ---------------------------------------------------------------------------- (a) the files

#[test]
fn every_schema_file_is_a_self_contained_2020_12_schema() {
    let mut found: Vec<String> = std::fs::read_dir(schema_dir())
        .expect("schemas/ exists")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    found.sort();
    for name in OURS {
        assert!(found.iter().any(|f| f == name), "schemas/{name} is missing");
    }
    let mut ids = Vec::new();
    for name in &found {
        let doc = load_json(&schema_dir().join(name));
        if let Err(e) = compile(&doc) {
            panic!("schemas/{name}: {e}");
        }
        assert_eq!(
            doc["$schema"], "https://json-schema.org/draft/2020-12/schema",
            "schemas/{name}: $schema"
        );
        assert_eq!(
            doc["$id"],
            format!("https://sessionpipe.local/schemas/{name}"),
            "schemas/{name}: $id"
        );
        assert!(
            doc["description"].as_str().is_some_and(|d| !d.is_empty()),
            "schemas/{name}: description"
        );
        let mut refs = Vec::new();
        collect_refs(&doc, &mut refs);
        for r in refs {
            assert!(
                r.starts_with("#/$defs/"),
                "schemas/{name}: non-local $ref {r}"
            );
            let target = doc.pointer(&r[1..]);
            assert!(target.is_some(), "schemas/{name}: dangling $ref {r}");
        }
        ids.push(doc["$id"].as_str().unwrap_or_default().to_string());
        // A schema's own examples satisfy it.
        for (i, ex) in doc["examples"].as_array().into_iter().flatten().enumerate() {
            let errs = errors(name, ex);
            assert!(errs.is_empty(), "schemas/{name}: examples[{i}]: {errs:?}");
        }
    }
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "duplicate $id");
}

#[test]
fn inlined_copies_match_their_standalone_schemas() {
    let msg = load_json(&schema_dir().join("control-message.json"));
    let poll = load_json(&schema_dir().join("control-poll.json"));
    assert_eq!(poll["$defs"]["message"], body_of(&msg));
    for (k, v) in msg["$defs"].as_object().unwrap() {
        assert_eq!(&poll["$defs"][k], v, "control-poll $defs/{k}");
    }

    let event = load_json(&schema_dir().join("event.json"));
    let batch = load_json(&schema_dir().join("events-batch.json"));
    assert_eq!(batch["$defs"]["event"], body_of(&event));
    for (k, v) in event["$defs"].as_object().unwrap() {
        assert_eq!(&batch["$defs"][k], v, "events-batch $defs/{k}");
    }

    // Every timestamp and ULID definition is the same text everywhere.
    let ack = load_json(&schema_dir().join("ack-body.json"));
    for doc in [&poll, &event, &batch, &ack] {
        assert_eq!(doc["$defs"]["timestamp"], msg["$defs"]["timestamp"]);
        assert_eq!(doc["$defs"]["ulid"], msg["$defs"]["ulid"]);
    }
}

#[test]
fn peer_the_timestamp_pattern_is_the_protocols_with_ascii_digits() {
    let Some(peer_control) = peer(PEER_CONTROL) else {
        return;
    };
    let ours = load_json(&schema_dir().join("control-message.json"))["$defs"]["timestamp"]
        ["pattern"]
        .as_str()
        .unwrap()
        .to_string();
    let peer = load_json(std::path::Path::new(&peer_control))["properties"]["at"]["pattern"]
        .as_str()
        .unwrap()
        .replace("\\d", "[0-9]");
    assert_eq!(ours, peer);
}

#[test]
fn the_timestamp_pattern_alone_refuses_non_ascii_digits() {
    // With format assertion off (the 2020-12 default), only the pattern guards `at`.
    // jsonschema reads the seed's `\d` with ECMA-262 (ASCII) meaning; ours spells [0-9] so
    // that code reusing the pattern with the Unicode-aware `regex` crate gets the same.
    let ours = load_json(&schema_dir().join("control-message.json"))["$defs"]["timestamp"]
        ["pattern"]
        .clone();
    let seed = peer(PEER_CONTROL)
        .map(|p| load_json(std::path::Path::new(&p))["properties"]["at"]["pattern"].clone());
    let odd = json!("2026-09-28T02:10:0\u{663}.000Z");
    for pattern in std::iter::once(ours).chain(seed) {
        let v =
            jsonschema::draft202012::new(&json!({"type": "string", "pattern": pattern})).unwrap();
        assert!(v.is_valid(&json!(AT)));
        assert!(!v.is_valid(&odd));
    }
}

#[test]
fn assert_valid_lists_every_error() {
    let bad = json!({"id": "x", "kind": "prompt", "at": "now", "expires_at": AT});
    let errs = errors("control-message.json", &bad);
    assert!(errs.len() >= 3, "{errs:?}");
    let panic = std::panic::catch_unwind(|| assert_valid("control-message.json", &bad))
        .expect_err("assert_valid must panic");
    let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    for e in &errs {
        assert!(text.contains(e.as_str()), "{e} missing from: {text}");
    }
    for where_ in ["/id", "/at", "text"] {
        assert!(text.contains(where_), "{where_} missing from: {text}");
    }
}

// ---------------------------------------------------------------------------- (b) control messages

#[test]
fn control_messages_of_each_kind_pass() {
    for m in [
        answer("allow"),
        answer("deny"),
        set(answer("deny"), "note", json!("Not on main, please.")),
        set(answer("allow"), "for", json!("x".repeat(128))),
        set(answer("deny"), "note", json!("n".repeat(2000))),
        prompt("please also update the changelog"),
        prompt(""),
        prompt(&"t".repeat(20_000)),
        // maxLength counts code points, not bytes (DECISIONS 6 says characters).
        prompt(&"é".repeat(20_000)),
        prompt(&"😀".repeat(20_000)),
        cancel(),
        set(cancel(), "note", json!("stop please")),
        // Additional properties are allowed.
        set(cancel(), "session", json!("claude-code:abc")),
        // Calendar edge cases the pattern gets right.
        set(cancel(), "at", json!("2024-02-29T23:59:59.999Z")),
        set(cancel(), "at", json!("2000-02-29T00:00:00.000Z")),
    ] {
        assert_valid("control-message.json", &m);
        if let Some(p) = peer(PEER_CONTROL) {
            assert_valid(&p, &m);
        }
    }
}

#[test]
fn an_unknown_kind_is_schema_valid_so_it_can_be_acked_unsupported() {
    let m = set(cancel(), "kind", json!("start"));
    assert_valid("control-message.json", &m);
    // …but it still needs what an ack and the expiry rule need.
    for k in ["id", "at", "expires_at"] {
        assert_invalid("control-message.json", &unset(m.clone(), k));
    }
    // A missing or non-string kind is malformed (acked `failed`).
    assert_invalid("control-message.json", &unset(cancel(), "kind"));
    assert_invalid("control-message.json", &set(cancel(), "kind", json!(3)));
    assert_invalid("control-message.json", &set(cancel(), "kind", Value::Null));
    // The protocol's schema would refuse it; that is the point of our choice.
    if let Some(p) = peer(PEER_CONTROL) {
        assert!(!is_valid(&p, &m));
    }
}

#[test]
fn each_decisions_6_violation_fails() {
    let peer = peer(PEER_CONTROL);
    // (what, instance, does the protocol's seed schema also refuse it?)
    let cases: Vec<(&str, Value, bool)> = vec![
        (
            "id lower case",
            set(cancel(), "id", json!(ID.to_lowercase())),
            true,
        ),
        ("id 25 chars", set(cancel(), "id", json!(&ID[..25])), true),
        (
            "id 27 chars",
            set(cancel(), "id", json!(format!("{ID}0"))),
            true,
        ),
        (
            "id with I",
            set(cancel(), "id", json!("01K6H3Z7Q8X9Y0ABCDEFGHIKMN")),
            true,
        ),
        (
            "id with U",
            set(cancel(), "id", json!("01K6H3Z7Q8X9Y0ABCDEFGHUKMN")),
            true,
        ),
        (
            "id a UUID",
            set(
                cancel(),
                "id",
                json!("8c132906-0b1f-4c2a-9f0e-0a1b2c3d4e5f"),
            ),
            true,
        ),
        ("id a number", set(cancel(), "id", json!(1)), true),
        ("id missing", unset(cancel(), "id"), true),
        (
            "at without ms",
            set(cancel(), "at", json!("2026-09-28T02:10:00Z")),
            true,
        ),
        (
            "at with offset",
            set(cancel(), "at", json!("2026-09-28T02:10:00.000+00:00")),
            true,
        ),
        (
            "at with +02:00",
            set(cancel(), "at", json!("2026-09-28T04:10:00.000+02:00")),
            true,
        ),
        (
            "at with 6 digits",
            set(cancel(), "at", json!("2026-09-28T02:10:00.000000Z")),
            true,
        ),
        (
            "at with 1 digit",
            set(cancel(), "at", json!("2026-09-28T02:10:00.0Z")),
            true,
        ),
        (
            "at lower-case z",
            set(cancel(), "at", json!("2026-09-28T02:10:00.000z")),
            true,
        ),
        (
            "at with space",
            set(cancel(), "at", json!("2026-09-28 02:10:00.000Z")),
            true,
        ),
        (
            "at Feb 30",
            set(cancel(), "at", json!("2026-02-30T02:10:00.000Z")),
            true,
        ),
        (
            "at Feb 29 non-leap",
            set(cancel(), "at", json!("2025-02-29T02:10:00.000Z")),
            true,
        ),
        (
            "at Feb 29 1900",
            set(cancel(), "at", json!("1900-02-29T02:10:00.000Z")),
            true,
        ),
        (
            "at Apr 31",
            set(cancel(), "at", json!("2026-04-31T02:10:00.000Z")),
            true,
        ),
        (
            "at 24:00",
            set(cancel(), "at", json!("2026-09-28T24:00:00.000Z")),
            true,
        ),
        (
            "at leap second",
            set(cancel(), "at", json!("2026-12-31T23:59:60.000Z")),
            true,
        ),
        (
            "at epoch number",
            set(cancel(), "at", json!(1_790_000_000_000u64)),
            true,
        ),
        (
            "at non-ASCII digit",
            // Refused by format "date-time" too, which this helper asserts.
            set(cancel(), "at", json!("2026-09-28T02:10:0\u{663}.000Z")),
            true,
        ),
        ("at missing", unset(cancel(), "at"), true),
        (
            "expires_at without ms",
            set(cancel(), "expires_at", json!("2026-09-28T02:12:00Z")),
            true,
        ),
        (
            "expires_at with offset",
            set(
                cancel(),
                "expires_at",
                json!("2026-09-28T02:12:00.000-05:00"),
            ),
            true,
        ),
        ("expires_at missing", unset(cancel(), "expires_at"), true),
        ("text 20001 chars", prompt(&"t".repeat(20_001)), true),
        ("text 20001 code points", prompt(&"😀".repeat(20_001)), true),
        (
            "text not a string",
            set(prompt("x"), "text", json!(["x"])),
            true,
        ),
        ("prompt without text", unset(prompt("x"), "text"), false),
        (
            "note 2001",
            set(answer("deny"), "note", json!("n".repeat(2001))),
            true,
        ),
        (
            "note on a prompt 2001",
            set(prompt("x"), "note", json!("n".repeat(2001))),
            true,
        ),
        (
            "permission.answer without for",
            unset(answer("allow"), "for"),
            false,
        ),
        (
            "permission.answer without decision",
            unset(answer("allow"), "decision"),
            false,
        ),
        (
            "permission.answer without both",
            unset(unset(answer("allow"), "for"), "decision"),
            false,
        ),
        ("decision maybe", answer("maybe"), true),
        ("decision Allow", answer("Allow"), true),
        (
            "decision true",
            set(answer("allow"), "decision", json!(true)),
            true,
        ),
        ("for empty", set(answer("allow"), "for", json!("")), false),
        (
            "for 129",
            set(answer("allow"), "for", json!("x".repeat(129))),
            true,
        ),
        ("not an object", json!([cancel()]), true),
    ];
    for (what, m, peer_refuses) in cases {
        assert!(
            !is_valid("control-message.json", &m),
            "{what}: should fail control-message.json: {m}"
        );
        let Some(peer) = &peer else { continue };
        assert_eq!(
            !is_valid(peer, &m),
            peer_refuses,
            "{what}: expected the seed schema to {} it",
            if peer_refuses { "refuse" } else { "accept" }
        );
    }
}

#[test]
fn control_poll_bodies() {
    let body = json!({"messages": [answer("allow"), prompt("hi"), cancel(),
                                   set(cancel(), "kind", json!("start"))]});
    assert_valid("control-poll.json", &body);
    assert_valid("control-poll.json", &json!({"messages": []}));
    assert_valid(
        "control-poll.json",
        &json!({"messages": [cancel()], "more": true}),
    );
    if let Some(p) = peer(PEER_POLL) {
        assert_valid(
            &p,
            &json!({"messages": [answer("allow"), prompt("hi"), cancel()]}),
        );
    }

    assert_invalid("control-poll.json", &json!({}));
    assert_invalid("control-poll.json", &json!({"messages": cancel()}));
    assert_invalid("control-poll.json", &json!([cancel()]));
    // One bad message makes the body invalid; code checks messages one by one.
    for bad in [
        answer("maybe"),
        unset(answer("allow"), "for"),
        prompt(&"t".repeat(20_001)),
        set(cancel(), "at", json!("2026-09-28T02:10:00Z")),
    ] {
        assert_invalid("control-poll.json", &json!({"messages": [cancel(), bad]}));
    }
}

/// Our delivery fixtures: the messages they queue, once the receiver adds id/at/expires_at,
/// and the acks they send, satisfy our schemas (and the reference's, when here).
#[test]
fn delivery_fixtures_agree() {
    delivery_fixtures_agree_in(&fixtures::own("delivery"));
}

/// The reference's seed-era delivery fixtures (enqueue with `session` + `message`), the same
/// way.
#[test]
fn peer_seed_era_delivery_fixtures_agree() {
    if let Some(dir) = fixtures::peer_or_skip("the seed-era delivery fixtures") {
        delivery_fixtures_agree_in(&dir.join("delivery"));
    }
}

fn delivery_fixtures_agree_in(dir: &std::path::Path) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("delivery fixtures")
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut seen = Vec::new();
    let (mut messages, mut acks) = (0, 0);
    for path in files {
        let fixture = load_json(&path);
        let steps = fixture["steps"].as_array().expect("steps");
        let seed_era = steps.iter().any(|s| {
            s["enqueue"].get("session").is_some() && s["enqueue"].get("message").is_some()
        });
        if !seed_era {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let start = 2 * 3600 + 10 * 60;
        let mut last: Option<Value> = None;
        for (i, step) in steps.iter().enumerate() {
            if let Some(m) = step["enqueue"].get("message") {
                let mut msg: Map<String, Value> = m.as_object().unwrap().clone();
                let ttl = msg
                    .remove("expires_in_s")
                    .and_then(|v| v.as_u64())
                    .expect("ttl");
                msg.insert("id".into(), json!(ID));
                msg.insert("at".into(), json!(ts(start)));
                msg.insert("expires_at".into(), json!(ts(start + ttl)));
                let msg = Value::Object(msg);
                let ctx = format!("{name} step {i}");
                assert!(
                    is_valid("control-message.json", &msg),
                    "{ctx}: {:?}",
                    errors("control-message.json", &msg)
                );
                if let Some(p) = peer(PEER_CONTROL) {
                    assert_valid(&p, &msg);
                }
                let poll = json!({"messages": [msg]});
                assert_valid("control-poll.json", &poll);
                if let Some(p) = peer(PEER_POLL) {
                    assert_valid(&p, &poll);
                }
                last = Some(msg);
                messages += 1;
            }
            if let Some(body) = step["expect"].get("body") {
                // What the fixture expects back is a subset of what was queued.
                let queued = last.as_ref().expect("a poll body follows an enqueue");
                for expected in body["messages"].as_array().expect("messages") {
                    for (k, v) in expected.as_object().unwrap() {
                        if v == "*" {
                            continue; // the conformance wildcard
                        }
                        assert_eq!(&queued[k], v, "{name} step {i}: {k}");
                    }
                }
            }
            if let Some(a) = step.get("ack") {
                let mut item = json!({"id": ID, "outcome": a["outcome"], "at": ts(start + 1)});
                for k in ["detail", "mode", "session", "reply", "seq"] {
                    if let Some(v) = a.get(k) {
                        item = set(item, k, v.clone());
                    }
                }
                let body = json!({"acks": [item]});
                assert_valid("ack-body.json", &body);
                // The reference's first schema predates DECISIONS 38's acks.
                let newer = ["taken", "progress"].contains(&a["outcome"].as_str().unwrap_or(""))
                    || a.get("mode").is_some();
                let old = if newer { None } else { peer(PEER_ACK) };
                for p in [old, peer(PEER_ACK_NEWEST)].into_iter().flatten() {
                    assert_valid(&p, &body);
                }
                acks += 1;
            }
        }
        seen.push(name);
    }
    assert!(
        seen.len() >= 3,
        "expected the three seed-era fixtures, saw {seen:?}"
    );
    assert!(
        messages >= 3 && acks >= 3,
        "{messages} messages, {acks} acks"
    );
}

// ---------------------------------------------------------------------------- config

#[test]
fn config_files_that_pass() {
    let full = json!({
        "machine": "laptop",
        "sinks": [
            {"name": "home", "url": "https://pipe.example.com/", "tier": 1, "control": true,
             "token_file": "/home/me/.config/sessionpipe/home.token",
             "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
            {"name": "dev_2", "url": "http://127.0.0.1:8787/api", "tier": 0, "control": false},
            {"name": "v6", "url": "http://[::1]:9/", "tier": 3, "token": "t"},
            {"name": "lo", "url": "http://localhost", "tier": 2},
            {"name": "lo8", "url": "http://127.8.9.10:1234?x=1", "tier": 2},
            {"name": "signed", "url": "https://r.example", "tier": 0, "control": "signed", "token": "t"}
        ],
        "control": {"permission_wait_s": 60, "wait_max_s": 25, "live_hours": 0.5, "away": "always",
                    "folders": ["/home/me/src"], "allow_with_day_key": true,
                    "start_limit": {"running": 2, "per_hour": 10},
                    "harness": {"codex": {"permission_wait_s": 20},
                                "claude-code": {"permission_wait_s": 0},
                                "gemini-cli": {}}}
    });
    assert_valid("config.json", &full);
    assert_valid("config.json", &json!({"sinks": []}));
    assert_valid("config.json", &config_with_sink(sink()));
    assert_valid("config.json", &json!({"sinks": [], "control": {}}));
    assert_valid(
        "config.json",
        &json!({"sinks": [], "machine": "m".repeat(80)}),
    );
    assert_valid(
        "config.json",
        &json!({"sinks": [], "control": {"permission_wait_s": 3600, "wait_max_s": 1}}),
    );
    assert_valid(
        "config.json",
        &config_with_sink(set(sink(), "name", json!(format!("a{}", "b".repeat(39))))),
    );
}

#[test]
fn config_files_that_fail() {
    let cases: Vec<(&str, Value)> = vec![
        ("no sinks", json!({})),
        ("unknown top-level key", json!({"sinks": [], "harness": {}})),
        (
            "allow_with_day_key not a boolean",
            json!({"sinks": [], "control": {"allow_with_day_key": "yes"}}),
        ),
        (
            "machine 81",
            json!({"sinks": [], "machine": "m".repeat(81)}),
        ),
        (
            "name upper case",
            config_with_sink(set(sink(), "name", json!("Home"))),
        ),
        (
            "name empty",
            config_with_sink(set(sink(), "name", json!(""))),
        ),
        (
            "name 41",
            config_with_sink(set(sink(), "name", json!("a".repeat(41)))),
        ),
        (
            "name leading dash",
            config_with_sink(set(sink(), "name", json!("-home"))),
        ),
        (
            "name with dot",
            config_with_sink(set(sink(), "name", json!("home.x"))),
        ),
        ("no name", config_with_sink(unset(sink(), "name"))),
        ("no url", config_with_sink(unset(sink(), "url"))),
        ("no tier", config_with_sink(unset(sink(), "tier"))),
        (
            "http remote",
            config_with_sink(set(sink(), "url", json!("http://pipe.example.com"))),
        ),
        (
            "http LAN",
            config_with_sink(set(sink(), "url", json!("http://10.0.0.1:8080"))),
        ),
        (
            "http loopback lookalike",
            config_with_sink(set(sink(), "url", json!("http://127.0.0.1.evil.com/"))),
        ),
        (
            "http localhost lookalike",
            config_with_sink(set(sink(), "url", json!("http://localhost.evil.com/"))),
        ),
        (
            "http 127 out of range",
            config_with_sink(set(sink(), "url", json!("http://127.0.0.256/"))),
        ),
        (
            "https no host",
            config_with_sink(set(sink(), "url", json!("https://"))),
        ),
        (
            "ftp",
            config_with_sink(set(sink(), "url", json!("ftp://pipe.example.com"))),
        ),
        (
            "file:",
            config_with_sink(set(sink(), "url", json!("file:/tmp/events.jsonl"))),
        ),
        (
            "upper-case scheme",
            config_with_sink(set(sink(), "url", json!("HTTPS://pipe.example.com"))),
        ),
        (
            "space in url",
            config_with_sink(set(sink(), "url", json!("https://pipe.example.com/a b"))),
        ),
        ("tier 4", config_with_sink(set(sink(), "tier", json!(4)))),
        ("tier -1", config_with_sink(set(sink(), "tier", json!(-1)))),
        (
            "tier 1.5",
            config_with_sink(set(sink(), "tier", json!(1.5))),
        ),
        (
            "tier string",
            config_with_sink(set(sink(), "tier", json!("1"))),
        ),
        (
            "control string",
            config_with_sink(set(sink(), "control", json!("yes"))),
        ),
        (
            "secret without whsec_",
            config_with_sink(set(sink(), "secret", json!("abc"))),
        ),
        (
            "token and token_file",
            config_with_sink(set(sink(), "token_file", json!("/t"))),
        ),
        (
            "control without a token",
            config_with_sink(unset(sink(), "token")),
        ),
        (
            "unknown sink key",
            config_with_sink(set(sink(), "pausd", json!(true))),
        ),
        (
            "permission_wait_s 3601",
            json!({"sinks": [], "control": {"permission_wait_s": 3601}}),
        ),
        (
            "permission_wait_s -1",
            json!({"sinks": [], "control": {"permission_wait_s": -1}}),
        ),
        (
            "permission_wait_s 1.5",
            json!({"sinks": [], "control": {"permission_wait_s": 1.5}}),
        ),
        (
            "wait_max_s 0",
            json!({"sinks": [], "control": {"wait_max_s": 0}}),
        ),
        (
            "wait_max_s 61",
            json!({"sinks": [], "control": {"wait_max_s": 61}}),
        ),
        (
            "live_hours 0",
            json!({"sinks": [], "control": {"live_hours": 0}}),
        ),
        (
            "live_hours -1",
            json!({"sinks": [], "control": {"live_hours": -1}}),
        ),
        (
            "unknown control key",
            json!({"sinks": [], "control": {"permision_wait_s": 10}}),
        ),
        (
            "bad harness name",
            json!({"sinks": [], "control": {"harness": {"Codex": {}}}}),
        ),
        (
            "harness wait 3601",
            json!({"sinks": [], "control": {"harness": {"codex": {"permission_wait_s": 3601}}}}),
        ),
        (
            "unknown harness key",
            json!({"sinks": [], "control": {"harness": {"codex": {"wait_max_s": 5}}}}),
        ),
        (
            "control neither a boolean nor signed",
            config_with_sink(set(sink(), "control", json!("unsigned"))),
        ),
        (
            "signed control without a token",
            json!({"sinks": [{"name": "s", "url": "https://r.example", "tier": 0, "control": "signed"}]}),
        ),
        (
            "away other than always",
            json!({"sinks": [], "control": {"away": "never"}}),
        ),
    ];
    for (what, c) in cases {
        assert!(
            !is_valid("config.json", &c),
            "{what}: should fail config.json: {c}"
        );
    }
}

// ---------------------------------------------------------------------------- acks

#[test]
fn ack_bodies() {
    let peers: Vec<String> = [peer(PEER_ACK), peer(PEER_ACK_NEWEST)]
        .into_iter()
        .flatten()
        .collect();
    let good = vec![
        json!({"acks": [ack("delivered")]}),
        json!({"acks": [set(ack("delivered"), "detail", json!("claude-code Stop"))]}),
        json!({"acks": [ack("expired"), set(ack("unsupported"), "id", json!(ID2))]}),
        json!({"acks": [set(ack("failed"), "detail", json!("d".repeat(500)))]}),
        json!({"acks": vec![ack("failed"); 100]}),
    ];
    for b in &good {
        assert_valid("ack-body.json", b);
        for p in &peers {
            assert_valid(p, b);
        }
    }
    // DECISIONS 38: `taken`, `progress` and a final ack's `mode`, `session` and `reply`, as
    // the reference's newest control-ack.json has them (its first one predates them).
    let with_reply = set(
        set(ack("delivered"), "mode", json!("turn")),
        "reply",
        json!("r".repeat(20_000)),
    );
    let newer = vec![
        json!({"acks": [ack("taken")]}),
        json!({"acks": [set(set(ack("progress"), "seq", json!(3)), "reply", json!("so far"))]}),
        json!({"acks": [with_reply]}),
        json!({"acks": [set(set(ack("delivered"), "mode", json!("fork")), "session", json!("claude-code:abc"))]}),
        json!({"acks": [set(ack("refused"), "code", json!("replay"))]}),
    ];
    for b in &newer {
        assert_valid("ack-body.json", b);
        if let Some(p) = peer(PEER_ACK_NEWEST) {
            assert_valid(&p, b);
        }
    }
    let bad: Vec<(&str, Value)> = vec![
        ("no acks", json!({"acks": []})),
        ("101 acks", json!({"acks": vec![ack("failed"); 101]})),
        ("missing acks", json!({})),
        (
            "extra top-level",
            json!({"acks": [ack("delivered")], "x": 1}),
        ),
        (
            "extra item field",
            json!({"acks": [set(ack("delivered"), "via", json!("turn"))]}),
        ),
        ("outcome maybe", json!({"acks": [ack("maybe")]})),
        (
            "mode not ours",
            json!({"acks": [set(ack("delivered"), "mode", json!("telepathy"))]}),
        ),
        (
            "reply 20001",
            json!({"acks": [set(ack("delivered"), "reply", json!("r".repeat(20_001)))]}),
        ),
        (
            "seq negative",
            json!({"acks": [set(ack("progress"), "seq", json!(-1))]}),
        ),
        (
            "detail 501",
            json!({"acks": [set(ack("failed"), "detail", json!("d".repeat(501)))]}),
        ),
        (
            "bad id",
            json!({"acks": [set(ack("failed"), "id", json!("perm-1"))]}),
        ),
        (
            "at without ms",
            json!({"acks": [set(ack("failed"), "at", json!("2026-09-28T02:10:00Z"))]}),
        ),
        ("no at", json!({"acks": [unset(ack("failed"), "at")]})),
        (
            "no outcome",
            json!({"acks": [unset(ack("failed"), "outcome")]}),
        ),
        ("no id", json!({"acks": [unset(ack("failed"), "id")]})),
    ];
    for (what, b) in bad {
        assert!(
            !is_valid("ack-body.json", &b),
            "{what}: should fail ack-body.json: {b}"
        );
    }
}

// ---------------------------------------------------------------------------- events

fn assert_event_agrees_with_peer(e: &Value) {
    assert_valid("event.json", e);
    let (Some(peer_event), Some(peer_event_data)) = (peer(PEER_EVENT), peer(PEER_EVENT_DATA))
    else {
        return;
    };
    assert_valid(&peer_event, e);
    // The data against event-data.json's shape for that type.
    let peer_data = load_json(std::path::Path::new(&peer_event_data));
    let kind = e["type"].as_str().unwrap();
    let mut sub = peer_data["properties"][kind].clone();
    assert!(sub.is_object(), "peer event-data has no {kind}");
    sub = set(
        sub,
        "$schema",
        json!("https://json-schema.org/draft/2020-12/schema"),
    );
    let v = compile(&sub).unwrap();
    assert!(
        v.is_valid(&e["data"]),
        "{kind} data not valid under peer event-data: {}",
        e["data"]
    );
}

#[test]
fn events_we_emit_pass_ours_and_the_protocols() {
    let mut all = vec![started(), needed(0), needed(1), needed(3)];
    // DECISIONS 31: the call's input as shown, at tier >= 1.
    let shown = set_at(
        needed(1),
        "/data/input",
        json!({"file_path": "/w/a.rs", "old_string": "a", "new_string": "b"}),
    );
    all.push(set_at(shown.clone(), "/data/input_partial", json!(true)));
    all.push(shown);
    for src in ["startup", "resume", "clear", "compact", "fork", "unknown"] {
        all.push(set_at(started(), "/data/source", json!(src)));
    }
    for kind in ["permission", "question", "elicitation", "idle", "error"] {
        all.push(set_at(needed(0), "/data/kind", json!(kind)));
    }
    for how in ["answered", "cancelled", "timeout", "unknown"] {
        all.push(cleared(how));
    }
    for reason in [
        spctl::wire::event::TurnEnd::Stop,
        spctl::wire::event::TurnEnd::Interrupt,
    ] {
        all.push(envelope(
            "turn.ended",
            0,
            spctl::wire::event::turn_ended(reason),
        ));
    }
    all.push(unset_at(needed(1), "/data/tool"));
    all.push(unset_at(needed(1), "/data/message"));
    all.push(set_at(
        needed(1),
        "/data/tool",
        json!("mcp__github.create_issue:v2"),
    ));
    all.push(set_at(needed(1), "/data/message", json!("m".repeat(200))));
    all.push(set_at(
        needed(0),
        "/data/attention_id",
        json!("a".repeat(128)),
    ));
    all.push(set_at(
        started(),
        "/session",
        json!({"id": "a:b.c-d_e", "seq": 0}),
    ));
    all.push(set_at(started(), "/harness", json!({"name": "codex"})));
    all.push(set_at(
        started(),
        "/privacy/rulesets",
        json!(["secrets@1", "paths-2@12"]),
    ));
    all.push(set_at(started(), "/privacy/pii", json!(true)));
    all.push(set_at(
        started(),
        "/session/seq",
        json!(9_007_199_254_740_991u64),
    ));
    for e in &all {
        assert_event_agrees_with_peer(e);
    }
    // Batches: ours and the protocol's.
    let batch = json!({"events": all.iter().take(50).cloned().collect::<Vec<_>>()});
    assert_valid("events-batch.json", &batch);
    if let Some(p) = peer(PEER_BATCH) {
        assert_valid(&p, &batch);
    }
    let fifty = json!({"events": vec![started(); 50]});
    assert_valid("events-batch.json", &fifty);
    if let Some(p) = peer(PEER_BATCH) {
        assert_valid(&p, &fifty);
    }
}

#[test]
fn events_we_must_not_emit_fail() {
    let cases: Vec<(&str, Value)> = vec![
        ("other type", envelope("turn.started", 0, json!({}))),
        (
            "turn.ended without a reason",
            envelope("turn.ended", 0, json!({})),
        ),
        (
            "turn.ended error (no failure hook is registered)",
            envelope("turn.ended", 0, json!({"reason": "error"})),
        ),
        (
            "turn.ended with a member we do not send",
            envelope("turn.ended", 0, json!({"reason": "stop", "ms": 5})),
        ),
        ("native", envelope("native", 0, json!({}))),
        ("protocol 2", set(started(), "protocol", json!(2))),
        ("protocol \"1\"", set(started(), "protocol", json!("1"))),
        ("extra envelope member", set(started(), "extra", json!(1))),
        ("missing data", unset(started(), "data")),
        ("missing privacy", unset(started(), "privacy")),
        ("missing time", unset(started(), "time")),
        (
            "time without ms",
            set(started(), "time", json!("2026-09-28T02:10:00Z")),
        ),
        (
            "time with offset",
            set(started(), "time", json!("2026-09-28T02:10:00.000+00:00")),
        ),
        ("bad id", set(started(), "id", json!("not-a-ulid"))),
        ("tier 4", set(started(), "tier", json!(4))),
        (
            "harness name upper",
            set_at(started(), "/harness/name", json!("Claude")),
        ),
        (
            "harness name 41",
            set_at(started(), "/harness/name", json!("a".repeat(41))),
        ),
        (
            "harness version 65",
            set_at(started(), "/harness/version", json!("v".repeat(65))),
        ),
        ("harness extra", set_at(started(), "/harness/pid", json!(1))),
        (
            "session id with slash",
            set_at(started(), "/session/id", json!("a/b")),
        ),
        (
            "session id empty",
            set_at(started(), "/session/id", json!("")),
        ),
        (
            "session id 129",
            set_at(started(), "/session/id", json!("a".repeat(129))),
        ),
        ("seq negative", set_at(started(), "/session/seq", json!(-1))),
        ("seq float", set_at(started(), "/session/seq", json!(1.5))),
        ("no seq", unset_at(started(), "/session/seq")),
        (
            "cwd 1025",
            set_at(started(), "/session/cwd", json!("c".repeat(1025))),
        ),
        (
            "machine 81",
            set_at(started(), "/session/machine", json!("m".repeat(81))),
        ),
        (
            "model 129",
            set_at(started(), "/session/model", json!("m".repeat(129))),
        ),
        (
            "session extra",
            set_at(started(), "/session/title", json!("t")),
        ),
        (
            "ruleset bad",
            set_at(started(), "/privacy/rulesets", json!(["secrets"])),
        ),
        ("pii missing", unset_at(started(), "/privacy/pii")),
        (
            "tier 1 without secrets@1",
            set_at(needed(1), "/privacy/rulesets", json!([])),
        ),
        (
            "source bad",
            set_at(started(), "/data/source", json!("boot")),
        ),
        ("source missing", set(started(), "data", json!({}))),
        ("started data extra", set_at(started(), "/data/x", json!(1))),
        (
            "needed kind bad",
            set_at(needed(0), "/data/kind", json!("permission_prompt")),
        ),
        ("needed no kind", unset_at(needed(0), "/data/kind")),
        (
            "needed no attention_id",
            unset_at(needed(0), "/data/attention_id"),
        ),
        (
            "attention_id 129",
            set_at(needed(0), "/data/attention_id", json!("a".repeat(129))),
        ),
        (
            "attention_id empty",
            set_at(needed(0), "/data/attention_id", json!("")),
        ),
        (
            "message 201",
            set_at(needed(1), "/data/message", json!("m".repeat(201))),
        ),
        (
            "tool with space",
            set_at(needed(1), "/data/tool", json!("Bash tool")),
        ),
        (
            "tool 121",
            set_at(needed(1), "/data/tool", json!("t".repeat(121))),
        ),
        (
            "tool at tier 0",
            set_at(needed(0), "/data/tool", json!("Bash")),
        ),
        (
            "message at tier 0",
            set_at(needed(0), "/data/message", json!("hi")),
        ),
        (
            "needed data extra",
            set_at(needed(1), "/data/command", json!("ls")),
        ),
        (
            "input at tier 0",
            set_at(needed(0), "/data/input", json!({"command": "ls"})),
        ),
        (
            "input not an object",
            set_at(needed(1), "/data/input", json!("ls")),
        ),
        ("how bad", cleared("denied")),
        ("cleared no how", unset_at(cleared("answered"), "/data/how")),
        (
            "cleared no attention_id",
            unset_at(cleared("answered"), "/data/attention_id"),
        ),
        (
            "cleared data extra",
            set_at(cleared("answered"), "/data/kind", json!("permission")),
        ),
        (
            "data of another type",
            set(
                started(),
                "data",
                json!({"attention_id": "a", "how": "answered"}),
            ),
        ),
    ];
    for (what, e) in cases {
        assert!(
            !is_valid("event.json", &e),
            "{what}: should fail event.json: {e}"
        );
        let batch = json!({"events": [started(), e]});
        assert!(
            !is_valid("events-batch.json", &batch),
            "{what}: should fail events-batch.json"
        );
    }
    assert_invalid("events-batch.json", &json!({"events": []}));
    assert_invalid("events-batch.json", &json!({"events": vec![started(); 51]}));
    assert_invalid("events-batch.json", &json!({}));
    assert_invalid("events-batch.json", &json!({"events": [started()], "x": 1}));
}

// ---------------------------------------------------------------------------- Claude Code outputs

#[test]
fn claude_code_permission_request_output() {
    let f = "claude-code-permission-request-output.json";
    assert_valid(f, &allow_output());
    assert_valid(f, &deny_output(None));
    assert_valid(f, &deny_output(Some("Not on main, please.")));
    assert_valid(f, &deny_output(Some("")));
    // DECISIONS 30: an edit, a session rule Claude Code offered, deny & stop.
    assert_valid(
        f,
        &set_at(
            allow_output(),
            "/hookSpecificOutput/decision/updatedInput",
            json!({"command": "ls"}),
        ),
    );
    assert_valid(
        f,
        &set_at(
            allow_output(),
            "/hookSpecificOutput/decision/updatedPermissions",
            json!([{"type": "addDirectories", "directories": ["/w"], "destination": "session"}]),
        ),
    );
    assert_valid(
        f,
        &set_at(
            deny_output(Some("stop")),
            "/hookSpecificOutput/decision/interrupt",
            json!(true),
        ),
    );

    let cases: Vec<(&str, Value)> = vec![
        ("empty object", json!({})),
        (
            "top-level extra",
            set(allow_output(), "continue", json!(true)),
        ),
        (
            "top-level systemMessage",
            set(deny_output(None), "systemMessage", json!("x")),
        ),
        (
            "hookSpecificOutput extra",
            set_at(
                allow_output(),
                "/hookSpecificOutput/additionalContext",
                json!("x"),
            ),
        ),
        (
            "other event name",
            set_at(
                allow_output(),
                "/hookSpecificOutput/hookEventName",
                json!("PreToolUse"),
            ),
        ),
        (
            "no event name",
            unset_at(allow_output(), "/hookSpecificOutput/hookEventName"),
        ),
        (
            "no decision",
            unset_at(allow_output(), "/hookSpecificOutput/decision"),
        ),
        (
            "behavior ask",
            set_at(
                allow_output(),
                "/hookSpecificOutput/decision/behavior",
                json!("ask"),
            ),
        ),
        (
            "no behavior",
            set_at(allow_output(), "/hookSpecificOutput/decision", json!({})),
        ),
        (
            "allow with message",
            set_at(
                allow_output(),
                "/hookSpecificOutput/decision/message",
                json!("ok"),
            ),
        ),
        (
            "allow with updatedInput not an object",
            set_at(
                allow_output(),
                "/hookSpecificOutput/decision/updatedInput",
                json!("ls"),
            ),
        ),
        (
            "allow with no updatedPermissions",
            set_at(
                allow_output(),
                "/hookSpecificOutput/decision/updatedPermissions",
                json!([]),
            ),
        ),
        (
            "allow with a rule kept beyond the session",
            set_at(
                allow_output(),
                "/hookSpecificOutput/decision/updatedPermissions",
                json!([{"type": "addRules", "destination": "localSettings"}]),
            ),
        ),
        (
            "deny with interrupt false",
            set_at(
                deny_output(Some("no")),
                "/hookSpecificOutput/decision/interrupt",
                json!(false),
            ),
        ),
        (
            "allow with interrupt",
            set_at(
                allow_output(),
                "/hookSpecificOutput/decision/interrupt",
                json!(true),
            ),
        ),
        (
            "deny with updatedInput",
            set_at(
                deny_output(None),
                "/hookSpecificOutput/decision/updatedInput",
                json!({"command": "ls"}),
            ),
        ),
        (
            "deny message not a string",
            set_at(
                deny_output(None),
                "/hookSpecificOutput/decision/message",
                json!(1),
            ),
        ),
        (
            "decision as a string",
            set_at(
                allow_output(),
                "/hookSpecificOutput/decision",
                json!("allow"),
            ),
        ),
        (
            "PreToolUse shape",
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}),
        ),
    ];
    for (what, o) in cases {
        assert!(!is_valid(f, &o), "{what}: should fail {f}: {o}");
    }
}

#[test]
fn claude_code_stop_output() {
    let f = "claude-code-stop-output.json";
    assert_valid(
        f,
        &json!({"decision": "block", "reason": "Message from you through sink \"home\":\nplease also update the changelog"}),
    );
    assert_valid(f, &json!({"decision": "block", "reason": "x"}));
    let cases: Vec<(&str, Value)> = vec![
        ("empty reason", json!({"decision": "block", "reason": ""})),
        ("no reason", json!({"decision": "block"})),
        ("no decision", json!({"reason": "x"})),
        ("approve", json!({"decision": "approve", "reason": "x"})),
        (
            "extra field",
            json!({"decision": "block", "reason": "x", "continue": true}),
        ),
        (
            "hookSpecificOutput",
            json!({"decision": "block", "reason": "x", "hookSpecificOutput": {"hookEventName": "Stop"}}),
        ),
        (
            "reason not a string",
            json!({"decision": "block", "reason": ["x"]}),
        ),
        ("empty object", json!({})),
    ];
    for (what, o) in cases {
        assert!(!is_valid(f, &o), "{what}: should fail {f}: {o}");
    }
}
