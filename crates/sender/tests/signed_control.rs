//! Signed control's verifier (DECISIONS 22) through the real `sp control verify`: our own
//! conformance cases, written from the spec with our own keys, and every reference vector in
//! the reference's `signed-control/vectors` (in `../shared/peer-data` or `$SP_PEER_DATA`) as a
//! `peer_*` cross-check when they are there (required with SP_REQUIRE_PEER_DATA=1, as in CI).
mod common;
use common::signing::vectors::*;
use common::signing::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `sp` with HOME, config and state in a temp dir of the test's, never the user's.
fn sp() -> Command {
    static HOME: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let home = HOME.get_or_init(|| tempfile::tempdir().unwrap()).path();
    let mut c = Command::new(env!("CARGO_BIN_EXE_sp"));
    c.env("HOME", home)
        .env("SESSIONPIPE_CONFIG", home.join("config.json"))
        .env("SESSIONPIPE_STATE_DIR", home.join("state"));
    c
}

/// Runs `sp control verify` on one vector file; returns the verdict and the exit code.
fn sp_verify(path: &Path) -> (Value, i32) {
    let out = sp()
        .args(["control", "verify"])
        .arg(path)
        .output()
        .expect("run sp");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "{}: stdout is not one JSON verdict ({e}): {stdout:?}; stderr {:?}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (v, out.status.code().unwrap_or(-1))
}

/// Checks every field of `expect` against the verdict, and the exit code against `ok`.
fn check_vector(path: &Path, expect: &Value) -> Result<(), String> {
    let (got, code) = sp_verify(path);
    for (k, want) in expect.as_object().expect("expect is an object") {
        if got.get(k) != Some(want) {
            return Err(format!(
                "{}: expected {expect}, got {got}",
                path.file_name().unwrap().to_string_lossy()
            ));
        }
    }
    let want_code = if expect["ok"] == json!(true) { 0 } else { 1 };
    if code != want_code {
        return Err(format!(
            "{}: exit {code}, expected {want_code}",
            path.display()
        ));
    }
    Ok(())
}

struct Case {
    name: &'static str,
    input: Value,
    expect: Value,
}

fn ok(kind: &str, via: &str) -> Value {
    json!({"ok": true, "via": via, "kind": kind})
}

fn no(code: &str) -> Value {
    json!({"ok": false, "code": code})
}

fn input(signed: Value, trusted: &[&Passkey]) -> Value {
    json!({
        "signed": signed,
        "machine": MACHINE,
        "rp_id": RP,
        "trusted": trusted.iter().map(|p| p.trusted()).collect::<Vec<_>>(),
        "now": NOW,
    })
}

fn prompt(text: &str) -> String {
    command(
        MACHINE,
        "prompt",
        SESSION,
        &[("text", json!(text))],
        &nonce(),
        IAT,
    )
}

fn file(name: &str, size: u64) -> Value {
    json!({"name": name, "type": "image/png", "size": size, "sha256": b64(&sha256(name.as_bytes()))})
}

fn start_with(files: Value) -> String {
    command(
        MACHINE,
        "start",
        SESSION,
        &[
            ("text", json!("look")),
            ("cwd", json!("/work/p")),
            ("files", files),
        ],
        &nonce(),
        IAT,
    )
}

fn cases() -> Vec<Case> {
    let pk = Passkey::es256(1);
    let other = Passkey::es256(2);
    let rsa = Passkey::rs256();
    let get = Ceremony::get(RP);
    let day = DayKey::new(10, &pk, IAT - HOUR, IAT + 11 * HOUR, RP, &get);
    let confirm = |p: &Passkey, cmd: &str, c: &Ceremony| json!({"cmd": cmd, "confirm": p.assert(&sha256(cmd.as_bytes()), c)});
    let bent = |f: &dyn Fn(&mut Ceremony)| {
        let mut c = get.clone();
        f(&mut c);
        DayKey::new(11, &pk, IAT - HOUR, IAT + 11 * HOUR, RP, &c).sign(&prompt("hi"))
    };
    let mut v = vec![];
    let mut add = |name: &'static str, input: Value, expect: Value| {
        v.push(Case {
            name,
            input,
            expect,
        })
    };

    // Valid, by each path and kind.
    add(
        "grant-prompt",
        input(day.sign(&prompt("Ship it")), &[&pk]),
        ok("prompt", "grant"),
    );
    let c = prompt("Ship it");
    add(
        "confirm-prompt",
        input(confirm(&pk, &c, &get), &[&pk]),
        ok("prompt", "confirm"),
    );
    add(
        "rs256-confirm",
        input(confirm(&rsa, &c, &get), &[&rsa]),
        ok("prompt", "confirm"),
    );
    let rday = DayKey::new(12, &rsa, IAT - HOUR, IAT + HOUR, RP, &get);
    add(
        "rs256-grant",
        input(rday.sign(&c), &[&pk, &rsa]),
        ok("prompt", "grant"),
    );
    let weak = Passkey::rs256_weak();
    add(
        "rs256-1024-bit-key",
        input(confirm(&weak, &c, &get), &[&weak]),
        no("bad_assertion"),
    );
    let answer = command(
        MACHINE,
        "permission.answer",
        SESSION,
        &[
            ("for", json!("perm-abc")),
            ("decision", json!("allow")),
            ("note", json!("ok")),
        ],
        &nonce(),
        IAT,
    );
    add(
        "permission-answer",
        input(day.sign(&answer), &[&pk]),
        ok("permission.answer", "grant"),
    );
    let cancel = command(MACHINE, "cancel", "codex:019a-thread", &[], &nonce(), IAT);
    add(
        "cancel-codex",
        input(day.sign(&cancel), &[&pk]),
        ok("cancel", "grant"),
    );
    let start = command(
        MACHINE,
        "start",
        SESSION,
        &[("text", json!("Fix it")), ("cwd", json!("/home/me/p"))],
        &nonce(),
        IAT,
    );
    add(
        "start",
        input(day.sign(&start), &[&pk]),
        ok("start", "grant"),
    );
    let key_add = command(
        MACHINE,
        "key.add",
        "sessionpipe:keys",
        &[("key", other.trusted()), ("name", json!("phone"))],
        &nonce(),
        IAT,
    );
    add(
        "key-add",
        input(confirm(&pk, &key_add, &get), &[&pk]),
        ok("key.add", "confirm"),
    );
    let local = Ceremony::get("localhost");
    let lday = DayKey::new(13, &pk, IAT - HOUR, IAT + HOUR, "localhost", &local);
    let mut li = input(lday.sign(&c), &[&pk]);
    li["rp_id"] = json!("localhost");
    add("localhost-http-origin", li, ok("prompt", "grant"));
    let mut both = day.sign(&c);
    both["grant"]["cred"] = json!(other.id);
    both["confirm"] = pk.assert(&sha256(c.as_bytes()), &get);
    add(
        "confirm-beside-bad-grant",
        input(both, &[&pk]),
        ok("prompt", "confirm"),
    );
    add(
        "text-20000",
        input(day.sign(&prompt(&"x".repeat(20_000))), &[&pk]),
        ok("prompt", "grant"),
    );

    // Time.
    let at = |iat: i64| {
        command(
            MACHINE,
            "prompt",
            SESSION,
            &[("text", json!("t"))],
            &nonce(),
            iat,
        )
    };
    let long = DayKey::new(14, &pk, NOW - 24 * HOUR, NOW + 5 * 60_000, RP, &get);
    add(
        "signed-24h-1s-ago",
        input(long.sign(&at(NOW - 24 * HOUR - 1000)), &[&pk]),
        no("too_old"),
    );
    let mut early = input(day.sign(&at(NOW - 11 * 60_000)), &[&pk]);
    early["max_age_ms"] = json!(600_000);
    add("receiver-10-minute-window", early, no("too_old"));
    let fday = DayKey::new(15, &pk, NOW, NOW + HOUR, RP, &get);
    add(
        "six-minutes-ahead",
        input(fday.sign(&at(NOW + 6 * 60_000)), &[&pk]),
        no("future"),
    );
    add(
        "before-grant-by-6-min",
        input(day.sign(&at(IAT - HOUR - 6 * 60_000)), &[&pk]),
        no("outside_grant"),
    );
    add(
        "before-grant-by-4-min",
        input(day.sign(&at(IAT - HOUR - 4 * 60_000)), &[&pk]),
        ok("prompt", "grant"),
    );
    add(
        "after-grant",
        input(day.sign(&at(IAT + 12 * HOUR)), &[&pk]),
        no("outside_grant"),
    );
    let mut replay = input(day.sign(&c), &[&pk]);
    let n = serde_json::from_str::<Value>(&c).unwrap()["nonce"].clone();
    replay["seen_nonces"] = json!([n]);
    add("replayed-nonce", replay, no("replay"));

    // Whose command, whose key.
    let elsewhere = command(
        "m_someothermachine000001",
        "prompt",
        SESSION,
        &[("text", json!("t"))],
        &nonce(),
        IAT,
    );
    add(
        "other-machine",
        input(day.sign(&elsewhere), &[&pk]),
        no("wrong_machine"),
    );
    let mut tampered = day.sign(&c);
    tampered["cmd"] = json!(c.replace("Ship it", "Ship it now"));
    add("tampered-text", input(tampered, &[&pk]), no("bad_csig"));
    let mut other_day = day.sign(&c);
    other_day["csig"] = json!(DayKey::new(16, &pk, IAT, IAT + HOUR, RP, &get).csig(&c));
    add(
        "csig-by-other-day-key",
        input(other_day, &[&pk]),
        no("bad_csig"),
    );
    let mut der = day.sign(&c);
    let raw = URL_SAFE.decode(der["csig"].as_str().unwrap()).unwrap();
    der["csig"] = json!(b64(p256::ecdsa::Signature::from_slice(&raw)
        .unwrap()
        .to_der()
        .as_bytes()));
    add("csig-in-der", input(der, &[&pk]), no("bad_csig"));
    add(
        "csig-without-grant",
        input(json!({"cmd": c, "csig": day.csig(&c)}), &[&pk]),
        no("unsigned"),
    );
    add("unsigned", input(json!({"cmd": c}), &[&pk]), no("unsigned"));
    add(
        "grant-by-unenrolled-passkey",
        input(day.sign(&c), &[&other]),
        no("untrusted_key"),
    );
    add(
        "confirm-by-unenrolled-passkey",
        input(confirm(&other, &c, &get), &[&pk]),
        no("untrusted_key"),
    );

    // The grant and the assertion.
    let wrong_rp = DayKey::new(17, &pk, IAT - HOUR, IAT + HOUR, "other.test", &get);
    add(
        "grant-names-other-rp",
        input(wrong_rp.sign(&c), &[&pk]),
        no("bad_grant"),
    );
    let two_days = DayKey::new(18, &pk, IAT - HOUR, IAT + 48 * HOUR, RP, &get);
    add(
        "grant-longer-than-a-day",
        input(two_days.sign(&c), &[&pk]),
        no("bad_grant"),
    );
    let spki = b64(
        p256::pkcs8::EncodePublicKey::to_public_key_der(&p256::PublicKey::from(
            day.key.verifying_key(),
        ))
        .unwrap()
        .as_bytes(),
    );
    let old = DayKey::with_str(
        day.key.clone(),
        &pk,
        &DayKey::grant_str(&spki, IAT - HOUR, IAT + HOUR, RP)
            .replace("sessionpipe.grant", "spacesheep.grant"),
        &get,
    );
    add(
        "grant-other-type",
        input(old.sign(&c), &[&pk]),
        no("bad_grant"),
    );
    add(
        "no-user-verification",
        input(bent(&|c| c.flags = 0x01), &[&pk]),
        no("bad_assertion"),
    );
    add(
        "no-user-presence",
        input(bent(&|c| c.flags = 0x04), &[&pk]),
        no("bad_assertion"),
    );
    add(
        "used-on-another-site",
        input(bent(&|c| c.origin = "https://evil.test".into()), &[&pk]),
        no("bad_assertion"),
    );
    add(
        "look-alike-suffix-origin",
        input(
            bent(&|c| c.origin = "https://evilcontrol.test".into()),
            &[&pk],
        ),
        no("bad_assertion"),
    );
    add(
        "subdomain-origin",
        input(
            bent(&|c| c.origin = "https://app.control.test".into()),
            &[&pk],
        ),
        ok("prompt", "grant"),
    );
    add(
        "http-origin-not-localhost",
        input(bent(&|c| c.origin = "http://control.test".into()), &[&pk]),
        no("bad_assertion"),
    );
    add(
        "rp-hash-of-other-site",
        input(bent(&|c| c.ad_rp = "other.test".into()), &[&pk]),
        no("bad_assertion"),
    );
    add(
        "cross-origin-frame",
        input(bent(&|c| c.cross_origin = true), &[&pk]),
        no("bad_assertion"),
    );
    add(
        "registration-ceremony",
        input(bent(&|c| c.kind = "webauthn.create".into()), &[&pk]),
        no("bad_assertion"),
    );
    let mut long_der = day.sign(&c);
    let mut sig = URL_SAFE
        .decode(long_der["grant"]["sig"].as_str().unwrap())
        .unwrap();
    sig[1] += 1;
    long_der["grant"]["sig"] = json!(b64(&sig));
    add(
        "assertion-der-length-off",
        input(long_der, &[&pk]),
        no("bad_assertion"),
    );
    let mut over_other = confirm(&pk, &prompt("other"), &get);
    over_other["cmd"] = json!(c);
    add(
        "confirm-over-other-command",
        input(over_other, &[&pk]),
        no("bad_assertion"),
    );

    // The command's own shape.
    let with_nonce = |n: &str| command(MACHINE, "prompt", SESSION, &[("text", json!("t"))], n, IAT);
    add(
        "nonce-21",
        input(day.sign(&with_nonce(&"a".repeat(21))), &[&pk]),
        no("bad_nonce"),
    );
    add(
        "nonce-22",
        input(day.sign(&with_nonce(&"a".repeat(22))), &[&pk]),
        ok("prompt", "grant"),
    );
    add(
        "nonce-65",
        input(day.sign(&with_nonce(&"a".repeat(65))), &[&pk]),
        no("bad_nonce"),
    );
    add(
        "nonce-plus-sign",
        input(
            day.sign(&with_nonce(&format!("{}+", "a".repeat(22)))),
            &[&pk],
        ),
        no("bad_nonce"),
    );
    add(
        "text-20001",
        input(day.sign(&prompt(&"x".repeat(20_001))), &[&pk]),
        no("bad_fields"),
    );
    add(
        "text-whitespace",
        input(day.sign(&prompt(" \n\t ")), &[&pk]),
        no("bad_fields"),
    );
    let s = |session: &str| {
        command(
            MACHINE,
            "prompt",
            session,
            &[("text", json!("t"))],
            &nonce(),
            IAT,
        )
    };
    add(
        "claude-session-not-uuid",
        input(day.sign(&s("claude-code:abc")), &[&pk]),
        no("bad_session"),
    );
    add(
        "session-without-harness",
        input(day.sign(&s("3f2b8c1e")), &[&pk]),
        no("bad_session"),
    );
    add(
        "prompt-to-key-store",
        input(day.sign(&s("sessionpipe:keys")), &[&pk]),
        ok("prompt", "grant"),
    );
    let k = |kind: &str, fields: &[(&str, Value)]| {
        command(MACHINE, kind, SESSION, fields, &nonce(), IAT)
    };
    add(
        "unknown-kind",
        input(day.sign(&k("shell", &[])), &[&pk]),
        no("unknown_kind"),
    );
    add(
        "not-a-command",
        input(
            day.sign(&c.replace("sessionpipe.control", "spacesheep.control")),
            &[&pk],
        ),
        no("not_a_command"),
    );
    add(
        "answer-without-for",
        input(
            day.sign(&k("permission.answer", &[("decision", json!("allow"))])),
            &[&pk],
        ),
        no("bad_fields"),
    );
    add(
        "answer-maybe",
        input(
            day.sign(&k(
                "permission.answer",
                &[("for", json!("p")), ("decision", json!("maybe"))],
            )),
            &[&pk],
        ),
        no("bad_fields"),
    );
    add(
        "prompt-with-decision",
        input(
            day.sign(&k(
                "prompt",
                &[("text", json!("t")), ("decision", json!("allow"))],
            )),
            &[&pk],
        ),
        no("bad_fields"),
    );
    add(
        "prompt-with-unknown-field",
        input(
            day.sign(&k(
                "prompt",
                &[("text", json!("t")), ("mode", json!("steer"))],
            )),
            &[&pk],
        ),
        no("bad_fields"),
    );
    add(
        "start-relative-cwd",
        input(
            day.sign(&k("start", &[("text", json!("t")), ("cwd", json!("p"))])),
            &[&pk],
        ),
        no("bad_fields"),
    );
    let codex_start = command(
        MACHINE,
        "start",
        "codex:019a",
        &[("text", json!("t")), ("cwd", json!("/p"))],
        &nonce(),
        IAT,
    );
    add(
        "start-codex",
        input(day.sign(&codex_start), &[&pk]),
        no("bad_fields"),
    );
    add(
        "cancel-with-text",
        input(day.sign(&k("cancel", &[("text", json!("t"))])), &[&pk]),
        no("bad_fields"),
    );
    let ka = |session: &str, fields: &[(&str, Value)]| {
        command(MACHINE, "key.add", session, fields, &nonce(), IAT)
    };
    add(
        "key-add-no-key",
        input(day.sign(&ka("sessionpipe:keys", &[])), &[&pk]),
        no("bad_fields"),
    );
    add(
        "key-add-coding-session",
        input(day.sign(&ka(SESSION, &[("key", other.trusted())])), &[&pk]),
        no("bad_session"),
    );
    let mut bad_alg = other.trusted();
    bad_alg["alg"] = json!(-8);
    add(
        "key-add-eddsa",
        input(
            day.sign(&ka("sessionpipe:keys", &[("key", bad_alg)])),
            &[&pk],
        ),
        no("bad_fields"),
    );
    let mut junk = other.trusted();
    junk["spki"] = json!("AAAAAAAAAAAAAAAAAAAAAAAAAAAA");
    add(
        "key-add-unusable-spki",
        input(day.sign(&ka("sessionpipe:keys", &[("key", junk)])), &[&pk]),
        no("bad_fields"),
    );
    add(
        "prompt-with-key",
        input(
            day.sign(&k(
                "prompt",
                &[("text", json!("t")), ("key", other.trusted())],
            )),
            &[&pk],
        ),
        no("bad_fields"),
    );
    add(
        "iat-fraction",
        input(
            day.sign(&c.replace(&format!("\"iat\":{IAT}"), &format!("\"iat\":{IAT}.5"))),
            &[&pk],
        ),
        no("malformed"),
    );
    add(
        "iat-as-string",
        input(
            day.sign(&c.replace(&format!("\"iat\":{IAT}"), &format!("\"iat\":\"{IAT}\""))),
            &[&pk],
        ),
        no("malformed"),
    );
    let too_long = k(
        "prompt",
        &[
            ("text", json!("x".repeat(20_000))),
            ("pad", json!("p".repeat(28_000))),
        ],
    );
    assert!(too_long.len() > 48_000);
    add(
        "command-over-48000",
        input(day.sign(&too_long), &[&pk]),
        no("malformed"),
    );
    add(
        "not-json",
        input(day.sign("{\"v\":1,"), &[&pk]),
        no("malformed"),
    );
    add(
        "duplicate-key",
        input(
            day.sign(&c.replace(
                "\"kind\":\"prompt\"",
                "\"kind\":\"cancel\",\"kind\":\"prompt\"",
            )),
            &[&pk],
        ),
        no("malformed"),
    );

    // A start's files.
    add(
        "start-two-files",
        input(
            day.sign(&start_with(json!([file("a.png", 10), file("b.pdf", 20)]))),
            &[&pk],
        ),
        ok("start", "grant"),
    );
    let big = 26_214_400u64;
    let long_name = |c: char| format!("{}.png", c.to_string().repeat(196));
    add(
        "files-at-limits",
        input(
            day.sign(&start_with(json!([
                file(&long_name('a'), big),
                file(&long_name('b'), big)
            ]))),
            &[&pk],
        ),
        ok("start", "grant"),
    );
    let ten: Vec<Value> = (0..10).map(|i| file(&format!("p{i}.png"), 1)).collect();
    add(
        "ten-files",
        input(day.sign(&start_with(json!(ten))), &[&pk]),
        ok("start", "grant"),
    );
    let eleven: Vec<Value> = (0..11).map(|i| file(&format!("p{i}.png"), 1)).collect();
    add(
        "eleven-files",
        input(day.sign(&start_with(json!(eleven))), &[&pk]),
        no("bad_fields"),
    );
    add(
        "files-on-prompt",
        input(
            day.sign(&k(
                "prompt",
                &[("text", json!("t")), ("files", json!([file("a.png", 1)]))],
            )),
            &[&pk],
        ),
        no("bad_fields"),
    );
    add(
        "files-empty",
        input(day.sign(&start_with(json!([]))), &[&pk]),
        no("bad_fields"),
    );
    add(
        "files-null",
        input(day.sign(&start_with(json!(null))), &[&pk]),
        no("bad_fields"),
    );
    add(
        "files-object",
        input(day.sign(&start_with(file("a.png", 1))), &[&pk]),
        no("bad_fields"),
    );
    for (name, bad) in [
        ("file-slash", "a/b.png"),
        ("file-backslash", "a\\b.png"),
        ("file-dotdot", ".."),
        ("file-dotfile", ".env"),
        ("file-newline", "a\nb"),
        ("file-empty-name", ""),
    ] {
        add(
            name,
            input(day.sign(&start_with(json!([file(bad, 1)]))), &[&pk]),
            no("bad_fields"),
        );
    }
    add(
        "file-name-201",
        input(
            day.sign(&start_with(json!([file(
                &format!("{}.png", "a".repeat(197)),
                1
            )]))),
            &[&pk],
        ),
        no("bad_fields"),
    );
    let mut no_sub = file("a.png", 1);
    no_sub["type"] = json!("image");
    add(
        "file-type-no-subtype",
        input(day.sign(&start_with(json!([no_sub]))), &[&pk]),
        no("bad_fields"),
    );
    add(
        "file-size-zero",
        input(day.sign(&start_with(json!([file("a.png", 0)]))), &[&pk]),
        no("bad_fields"),
    );
    add(
        "file-over-25-mib",
        input(
            day.sign(&start_with(json!([file("a.png", big + 1)]))),
            &[&pk],
        ),
        no("bad_fields"),
    );
    let mut padded = file("a.png", 1);
    padded["sha256"] = json!(format!("{}=", padded["sha256"].as_str().unwrap()));
    add(
        "file-sha256-padded",
        input(day.sign(&start_with(json!([padded]))), &[&pk]),
        no("bad_fields"),
    );
    let mut hex = file("a.png", 1);
    hex["sha256"] = json!("ab".repeat(32));
    add(
        "file-sha256-hex",
        input(day.sign(&start_with(json!([hex]))), &[&pk]),
        no("bad_fields"),
    );
    let three: Vec<Value> = (0..3)
        .map(|i| file(&format!("p{i}.png"), 20 * 1024 * 1024))
        .collect();
    add(
        "files-over-50-mib",
        input(day.sign(&start_with(json!(three))), &[&pk]),
        no("bad_fields"),
    );
    add(
        "files-same-name-but-case",
        input(
            day.sign(&start_with(json!([file("A.png", 1), file("a.PNG", 1)]))),
            &[&pk],
        ),
        no("bad_fields"),
    );
    add(
        "files-same-name-nfc",
        input(
            day.sign(&start_with(json!([
                file("caf\u{e9}.txt", 1),
                file("cafe\u{301}.txt", 1)
            ]))),
            &[&pk],
        ),
        no("bad_fields"),
    );

    // Enrollment proofs (docs/protocol.md#control-2).
    let enroll = |key: &Passkey, prover: &Passkey, machine: &str, code: &str| {
        let challenge = sha256(format!("sessionpipe.pair:{machine}:{code}").as_bytes());
        json!({"machine": MACHINE, "code": "4F7K-2QXD", "key": key.trusted(), "proof": prover.assert(&challenge, &get), "rp_id": RP})
    };
    add(
        "enroll",
        enroll(&pk, &pk, MACHINE, "4F7K-2QXD"),
        json!({"ok": true}),
    );
    add(
        "enroll-rs256",
        enroll(&rsa, &rsa, MACHINE, "4F7K-2QXD"),
        json!({"ok": true}),
    );
    add(
        "enroll-other-code",
        enroll(&pk, &pk, MACHINE, "9999-9999"),
        json!({"ok": false}),
    );
    add(
        "enroll-other-machine",
        enroll(&pk, &pk, "m_someothermachine000001", "4F7K-2QXD"),
        json!({"ok": false}),
    );
    let mut swapped = enroll(&pk, &other, MACHINE, "4F7K-2QXD");
    swapped["proof"]["cred"] = json!(pk.id);
    add("enroll-key-swap", swapped, json!({"ok": false}));
    v
}

use base64::engine::general_purpose::URL_SAFE_NO_PAD as URL_SAFE;
use base64::Engine as _;

#[test]
fn our_conformance_cases_come_out_as_the_spec_says() {
    let dir = tempfile::tempdir().unwrap();
    let cases = cases();
    let mut failures = vec![];
    for c in &cases {
        let path = dir.path().join(format!("{}.json", c.name));
        let file = json!({"name": c.name, "input": c.input, "expect": c.expect});
        std::fs::write(&path, serde_json::to_vec_pretty(&file).unwrap()).unwrap();
        if let Err(e) = check_vector(&path, &c.expect) {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    assert!(cases.len() > 90, "only {} cases", cases.len());
}

fn reference_vectors() -> Option<PathBuf> {
    let dir = common::fixtures::peer_or_skip("the reference's signed-control vectors")?
        .join("signed-control/vectors");
    assert!(dir.is_dir(), "{} is missing", dir.display());
    Some(dir)
}

#[test]
fn peer_every_reference_vector_comes_out_as_it_expects() {
    let Some(dir) = reference_vectors() else {
        return;
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut failures = vec![];
    for f in &files {
        let v: Value = serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap();
        if let Err(e) = check_vector(f, &v["expect"]) {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} vectors failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
    assert!(
        files.len() >= 81,
        "only {} vectors in {}",
        files.len(),
        dir.display()
    );
}

#[test]
fn unreadable_input_is_an_error_not_a_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.json");
    std::fs::write(&p, "not json").unwrap();
    let out = sp().args(["control", "verify"]).arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not JSON"));
    let out = sp().args(["control", "verify"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
