//! `sp pair`, `sp control keys` and `sp control off` (DECISIONS 22, docs/protocol.md#control-2) against a
//! pairing receiver on loopback: a key is enrolled only when its proof verifies here, so a
//! receiver, or a squatter on its port, that hands over another key enrolls nothing.
mod common;
use common::env::*;
use common::page::run_ok;
use common::signing::*;
use common::standin::{serve, Request};
use serde_json::{json, Value};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SINK_TOKEN: &str = "sink-token-0123456789";
const MACHINE_TOKEN: &str = "machine-token-abcdefghijklmnop";
const MACHINE: &str = "m_pairtestmachine000001";
const CODE: &str = "7KQ2-X9MV";

#[derive(Clone, Copy, PartialEq)]
enum Answer {
    /// The key with its own proof over this machine and code.
    Good,
    /// One key handed over with another key's proof.
    KeySwap,
    /// A proof made for another pairing code.
    OtherCode,
    /// A proof made for another machine.
    OtherMachine,
    Expired,
}

#[derive(Default)]
struct Seen {
    requests: Vec<(String, String, Option<String>, String)>,
}

struct PairingReceiver {
    url: String,
    seen: Arc<Mutex<Seen>>,
    _thread: std::thread::JoinHandle<()>,
}

fn start(answer: Answer, passkey: Passkey, other: Passkey) -> PairingReceiver {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let seen2 = seen.clone();
    let (port, thread) = serve(move |port| {
        let mut status_polls = 0;
        move |rq: &Request| {
            let request = (
                rq.method.clone(),
                rq.url.clone(),
                rq.auth.clone(),
                rq.body.clone(),
            );
            seen2.lock().unwrap().requests.push(request);
            let bearer = |t: &str| rq.bearer(t);
            let (status, reply): (u16, Value) = match (rq.method.as_str(), rq.url.as_str()) {
                ("GET", "/.well-known/sessionpipe") => (
                    200,
                    json!({
                        "protocol": [1], "max_tier": 1, "capabilities": ["events", "control"],
                        "endpoints": {"events": "/e", "control": "/c"},
                        "control": {"wait_max_s": 5, "signing": {"rp_id": "localhost", "algs": [-7, -257]}}
                    }),
                ),
                ("POST", "/c/pair") if bearer(SINK_TOKEN) => (
                    201,
                    json!({
                        "machine": MACHINE, "code": CODE, "url": format!("http://localhost:{port}/pair/{CODE}"),
                        "check": "428193", "expires_at": "2099-01-01T00:00:00.000Z"
                    }),
                ),
                ("GET", p) if p == format!("/c/pair?code={CODE}") && bearer(SINK_TOKEN) => {
                    status_polls += 1;
                    if status_polls < 2 {
                        (200, json!({"status": "pending"}))
                    } else if answer == Answer::Expired {
                        (200, json!({"status": "expired"}))
                    } else {
                        let (machine, code, prover) = match answer {
                            Answer::OtherCode => (MACHINE, "0000-0000", &passkey),
                            Answer::OtherMachine => ("m_someothermachine000001", CODE, &passkey),
                            Answer::KeySwap => (MACHINE, CODE, &other),
                            _ => (MACHINE, CODE, &passkey),
                        };
                        let challenge =
                            sha256(format!("sessionpipe.pair:{machine}:{code}").as_bytes());
                        let mut proof = prover.assert(&challenge, &Ceremony::get("localhost"));
                        proof["cred"] = json!(passkey.id);
                        (
                            200,
                            json!({"status": "paired", "key": passkey.trusted(), "proof": proof,
                                     "token": MACHINE_TOKEN, "account": "me@example"}),
                        )
                    }
                }
                ("POST", "/c/off") if bearer(MACHINE_TOKEN) => (204, json!({})),
                _ => (401, json!({"reason": "unauthorized"})),
            };
            (status, reply.to_string())
        }
    });
    let url = format!("http://127.0.0.1:{port}");
    PairingReceiver {
        url,
        seen,
        _thread: thread,
    }
}

fn env_with(receiver: &PairingReceiver) -> Env {
    let env = Env::new();
    env.write_config(json!({
        "sinks": [{"name": "pairhost", "url": receiver.url, "tier": 0, "token": SINK_TOKEN}]
    }));
    env
}

fn keys_in_db(env: &Env) -> Vec<String> {
    if !env.db_path().exists() {
        return vec![];
    }
    env.query::<String>("SELECT id FROM control_keys")
}

fn pair(env: &Env) -> std::process::Output {
    let mut c = env.cmd("sp");
    c.args([
        "pair",
        "pairhost",
        "--name",
        "test-laptop",
        "--timeout",
        "30",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    finish(c.spawn().unwrap(), Duration::from_secs(60))
}

#[test]
fn a_verified_proof_enrolls_the_key_and_keeps_the_machine_token() {
    let pk = Passkey::es256(31);
    let r = start(Answer::Good, Passkey::es256(31), Passkey::es256(32));
    let env = env_with(&r);
    let out = pair(&env);
    let so = stdout(&out);
    assert!(
        out.status.success(),
        "stdout {so}\nstderr {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(so.contains("check digits: 428 193"), "{so}");
    assert!(so.contains("http://localhost:"), "{so}");
    assert!(so.contains(&format!("Enrolled passkey {}", pk.id)), "{so}");
    assert!(so.contains("Approved by: me@example"), "{so}");
    assert_eq!(keys_in_db(&env), vec![pk.id.clone()]);
    assert_eq!(
        env.query::<String>("SELECT token FROM control_machines WHERE sink='pairhost'"),
        vec![MACHINE_TOKEN.to_string()]
    );
    assert_eq!(
        env.query::<String>("SELECT machine FROM control_machines"),
        vec![MACHINE.to_string()]
    );
    // The pairing request went with the sink's token and named this machine's harnesses.
    let seen = r.seen.lock().unwrap();
    let (_, _, auth, body) = seen
        .requests
        .iter()
        .find(|(m, p, _, _)| m == "POST" && p == "/c/pair")
        .unwrap();
    assert_eq!(
        auth.as_deref(),
        Some(format!("Bearer {SINK_TOKEN}").as_str())
    );
    let body: Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["name"], "test-laptop");
    assert!(body["harnesses"]
        .as_array()
        .unwrap()
        .contains(&json!("claude-code")));
    drop(seen);

    let listed = env
        .cmd("sp")
        .args(["control", "keys", "--json"])
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed[0]["id"], json!(pk.id));
    assert_eq!(listed[0]["added_via"], "pair");
    assert_eq!(listed[0]["name"], "me@example");

    // Off: the receiver is told with the machine's token, and everything is gone here.
    let off = run_ok(env.cmd("sp").args(["control", "off", "pairhost"]));
    assert!(off.contains("the receiver removed it too"), "{off}");
    assert!(keys_in_db(&env).is_empty());
    assert!(env
        .query::<String>("SELECT machine FROM control_machines")
        .is_empty());
    let seen = r.seen.lock().unwrap();
    assert!(seen.requests.iter().any(|(m, p, a, _)| m == "POST"
        && p == "/c/off"
        && a.as_deref() == Some(&format!("Bearer {MACHINE_TOKEN}") as &str)));
}

fn refused(answer: Answer, expect_in_stderr: &str) {
    let r = start(answer, Passkey::es256(41), Passkey::es256(42));
    let env = env_with(&r);
    let out = pair(&env);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout {}\nstderr {err}",
        stdout(&out)
    );
    assert!(err.contains(expect_in_stderr), "{err}");
    assert!(err.contains("nothing was enrolled"), "{err}");
    assert!(keys_in_db(&env).is_empty(), "a key was enrolled");
    assert!(!stdout(&out).contains("Enrolled"));
}

#[test]
fn a_receiver_that_swaps_in_another_key_enrolls_nothing() {
    refused(Answer::KeySwap, "without a valid proof");
}

#[test]
fn a_proof_for_another_code_enrolls_nothing() {
    refused(Answer::OtherCode, "without a valid proof");
}

#[test]
fn a_proof_for_another_machine_enrolls_nothing() {
    refused(Answer::OtherMachine, "without a valid proof");
}

#[test]
fn an_expired_pairing_enrolls_nothing() {
    refused(Answer::Expired, "expired before it was approved");
}

#[test]
fn removing_a_key_that_is_not_there_says_so() {
    let r = start(Answer::Good, Passkey::es256(51), Passkey::es256(52));
    let env = env_with(&r);
    assert!(pair(&env).status.success());
    let gone = env
        .cmd("sp")
        .args(["control", "keys", "remove", "nope-nope-nope-nope"])
        .output()
        .unwrap();
    assert_eq!(gone.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&gone.stderr).contains("no enrolled key"));
    let id = Passkey::es256(51).id;
    let rm = env
        .cmd("sp")
        .args(["control", "keys", "remove", &id])
        .output()
        .unwrap();
    assert!(rm.status.success());
    assert!(keys_in_db(&env).is_empty());
}
