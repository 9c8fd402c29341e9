//! Signed control end to end (DECISIONS 22, docs/protocol.md#control-5): `sp pair`, then
//! sp-sync's one poll per machine against a receiver on loopback, and a Claude Code
//! PermissionRequest hook that prints allow only for a command signed by the enrolled
//! passkey's day key. A replayed, edited, other-machine or wrong-key command is acked
//! `refused` with its code and never acted on; so is anything the receiver makes up.
mod common;
use common::env::*;
use common::signing::*;
use common::standin::{serve, Request};
use serde_json::{json, Value};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SINK_TOKEN: &str = "sink-token-0123456789";
const MACHINE_TOKEN: &str = "machine-token-abcdefghijklmnop";
const MACHINE: &str = "m_signedsynctest0000001";
const CODE: &str = "P4IR-C0DE";
const SESSION: &str = "0f3c2a1b-4d5e-4f60-8a7b-9c0d1e2f3a4b";
const ALLOW: &str = r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}"#;

#[derive(Default)]
struct State {
    queue: Vec<Value>,
    /// Envelopes as exact text (id, text): what a `Value` cannot hold, such as a duplicate key.
    raw: Vec<(String, String)>,
    acks: Vec<Value>,
    polls: Vec<(String, Option<String>)>,
    /// A start's attached files (DECISIONS 39), served at `/c/files/{sha256}`.
    files: std::collections::HashMap<String, Vec<u8>>,
    /// What the machine said it can start (`POST /c/hello`).
    hellos: Vec<Value>,
}

/// A receiver that speaks signed control: pairing, events, the machine poll and acks.
struct SignedReceiver {
    url: String,
    state: Arc<Mutex<State>>,
}

impl SignedReceiver {
    fn start(passkey: Passkey) -> SignedReceiver {
        let state = Arc::new(Mutex::new(State::default()));
        let st = state.clone();
        let (port, _) = serve(move |port| {
            move |rq: &Request| {
                let (body, auth) = (&rq.body, &rq.auth);
                let bearer = |t: &str| rq.bearer(t);
                let url = &rq.url;
                let (path, query) = url.split_once('?').unwrap_or((url, ""));
                let (status, reply): (u16, Value) = match (rq.method.as_str(), path) {
                    ("GET", "/.well-known/sessionpipe") => (
                        200,
                        json!({
                            "protocol": [1], "max_tier": 1, "capabilities": ["events", "control"],
                            "endpoints": {"events": "/e", "control": "/c"},
                            "control": {"wait_max_s": 2, "signing": {"rp_id": "localhost", "algs": [-7]}}
                        }),
                    ),
                    ("POST", "/e") if bearer(SINK_TOKEN) => {
                        let n = serde_json::from_str::<Value>(body)
                            .ok()
                            .and_then(|v| v["events"].as_array().map(|a| a.len()))
                            .unwrap_or(0);
                        (
                            202,
                            json!({"accepted": n, "duplicates": 0, "rejected": [], "max_tier": 1}),
                        )
                    }
                    ("POST", "/c/pair") if bearer(SINK_TOKEN) => (
                        201,
                        json!({
                            "machine": MACHINE, "code": CODE, "url": format!("http://localhost:{port}/pair"),
                            "check": "123456", "expires_at": "2099-01-01T00:00:00.000Z"
                        }),
                    ),
                    ("GET", "/c/pair") if bearer(SINK_TOKEN) => {
                        let challenge =
                            sha256(format!("sessionpipe.pair:{MACHINE}:{CODE}").as_bytes());
                        (
                            200,
                            json!({"status": "paired", "key": passkey.trusted(),
                                     "proof": passkey.assert(&challenge, &Ceremony::get("localhost")),
                                     "token": MACHINE_TOKEN}),
                        )
                    }
                    ("GET", "/c") => {
                        let mut s = st.lock().unwrap();
                        s.polls.push((query.to_string(), auth.clone()));
                        if !bearer(MACHINE_TOKEN) {
                            (401, json!({"reason": "unauthorized"}))
                        } else if s.queue.is_empty() && s.raw.is_empty() {
                            (204, json!({}))
                        } else {
                            (200, json!({"messages": s.queue.clone()}))
                        }
                    }
                    ("GET", p) if p.starts_with("/c/files/") && bearer(MACHINE_TOKEN) => {
                        let s = st.lock().unwrap();
                        match s.files.get(&p["/c/files/".len()..]) {
                            // The bytes as text: these tests' files are UTF-8.
                            Some(b) => {
                                return (200, String::from_utf8(b.clone()).unwrap());
                            }
                            None => (404, json!({"reason": "no such file"})),
                        }
                    }
                    ("POST", "/c/hello") if bearer(MACHINE_TOKEN) => {
                        let v: Value = serde_json::from_str(body).unwrap_or_default();
                        st.lock().unwrap().hellos.push(v);
                        (204, json!({}))
                    }
                    ("POST", "/c/ack") if bearer(MACHINE_TOKEN) => {
                        let mut s = st.lock().unwrap();
                        let v: Value = serde_json::from_str(body).unwrap_or_default();
                        for a in v["acks"].as_array().cloned().unwrap_or_default() {
                            s.queue.retain(|m| m["id"] != a["id"]);
                            s.raw.retain(|(id, _)| a["id"] != id.as_str());
                            s.acks.push(a);
                        }
                        (202, json!({}))
                    }
                    _ => (401, json!({"reason": "unauthorized"})),
                };
                let raw: Vec<String> = st.lock().unwrap().raw.iter().map(|r| r.1.clone()).collect();
                let text = if path == "/c" && status == 200 && !raw.is_empty() {
                    let mut all: Vec<String> = reply["messages"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(Value::to_string)
                        .collect();
                    all.extend(raw);
                    format!(r#"{{"messages":[{}]}}"#, all.join(","))
                } else {
                    reply.to_string()
                };
                (status, text)
            }
        });
        SignedReceiver {
            url: format!("http://127.0.0.1:{port}"),
            state,
        }
    }

    /// Queues one envelope as the receiver carries it; returns its id.
    fn enqueue(&self, signed: Value) -> String {
        self.enqueue_all(vec![signed]).remove(0)
    }

    /// Queues these envelopes at once (so one poll takes them all); returns their ids.
    fn enqueue_all(&self, signed: Vec<Value>) -> Vec<String> {
        let now = now_ms();
        let mut st = self.state.lock().unwrap();
        signed
            .into_iter()
            .map(|mut env| {
                let id = ulid::Ulid::new().to_string();
                env["id"] = json!(id);
                env["at"] = json!(wire_time(now));
                env["expires_at"] = json!(wire_time(now + 600_000));
                st.queue.push(env);
                id
            })
            .collect()
    }

    /// Queues one envelope with a key written twice: `key: first` before the envelope's own
    /// fields (which carry the key too); returns its id.
    fn enqueue_with_duplicate(&self, signed: Value, key: &str, first: Value) -> String {
        let id = ulid::Ulid::new().to_string();
        let mut env = signed;
        env["id"] = json!(id);
        env["at"] = json!(wire_time(now_ms()));
        env["expires_at"] = json!(wire_time(now_ms() + 600_000));
        assert!(env.get(key).is_some(), "the envelope has no {key}");
        let text = format!("{{{}:{first},{}", json!(key), &env.to_string()[1..]);
        self.state.lock().unwrap().raw.push((id.clone(), text));
        id
    }

    fn ack(&self, id: &str, timeout: Duration) -> Option<Value> {
        let mut found = None;
        until(timeout, || {
            found = self
                .state
                .lock()
                .unwrap()
                .acks
                .iter()
                // The final ack: a prompt is `taken` first (DECISIONS 38).
                .find(|a| {
                    a["id"] == id && !matches!(a["outcome"].as_str(), Some("taken" | "progress"))
                })
                .cloned();
            found.is_some()
        });
        found
    }
}

fn wire_time(ms: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000).unwrap();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        t.month() as u8,
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn permission_request(command: &str) -> Value {
    json!({
        "session_id": SESSION, "hook_event_name": "PermissionRequest", "cwd": "/tmp",
        "transcript_path": "/tmp/t.jsonl", "permission_mode": "default",
        "tool_name": "Bash", "tool_input": {"command": command, "description": "write a file"}
    })
}

fn open_attention(env: &Env) -> String {
    let mut id = None;
    assert!(
        until(Duration::from_secs(15), || {
            id = env
                .db_path()
                .exists()
                .then(|| {
                    env.query::<String>("SELECT attention_id FROM attention WHERE state='open'")
                })
                .and_then(|v| v.into_iter().next());
            id.is_some()
        }),
        "the hook opened no attention"
    );
    id.unwrap()
}

struct Device {
    day: DayKey,
    /// The passkey, for a confirm: a touch over one exact command (DECISIONS 36).
    passkey: Passkey,
}

impl Device {
    fn new(passkey: &Passkey) -> Device {
        let now = now_ms();
        Device {
            passkey: match &passkey.secret {
                Secret::Es256(k) => Passkey {
                    id: passkey.id.clone(),
                    alg: passkey.alg,
                    secret: Secret::Es256(k.clone()),
                },
                Secret::Rs256(_) => unreachable!("these tests use ES256 passkeys"),
            },
            day: DayKey::new(
                77,
                passkey,
                now - 60_000,
                now + 3_600_000,
                "localhost",
                &Ceremony::get("localhost"),
            ),
        }
    }
    fn answer(&self, machine: &str, attention: &str, decision: &str) -> (String, Value) {
        let cmd = command(
            machine,
            "permission.answer",
            &format!("claude-code:{SESSION}"),
            &[("for", json!(attention)), ("decision", json!(decision))],
            &nonce(),
            now_ms(),
        );
        let signed = self.day.sign(&cmd);
        (cmd, signed)
    }

    /// `{cmd, confirm}`: the passkey's user-verified assertion over sha256(cmd).
    fn confirm(&self, cmd: &str) -> Value {
        self.touch(cmd, &Ceremony::get("localhost"))
    }

    fn touch(&self, cmd: &str, c: &Ceremony) -> Value {
        json!({"cmd": cmd, "confirm": self.passkey.assert(&sha256(cmd.as_bytes()), c)})
    }

    /// An answer signed with a touch over exactly it.
    fn touched(&self, machine: &str, attention: &str, decision: &str) -> Value {
        self.confirm(&self.answer(machine, attention, decision).0)
    }
}

fn paired_env(r: &SignedReceiver, wait_s: u64) -> Env {
    paired_env_with(r, json!({"permission_wait_s": wait_s}))
}

fn paired_env_with(r: &SignedReceiver, control: Value) -> Env {
    let env = Env::new();
    env.write_config(json!({
        "sinks": [{"name": "phone", "url": r.url, "tier": 1, "control": "signed", "token": SINK_TOKEN}],
        "control": control
    }));
    let mut c = env.cmd("sp");
    c.args(["pair", "phone", "--timeout", "30"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = finish(c.spawn().unwrap(), Duration::from_secs(60));
    assert!(
        out.status.success(),
        "sp pair: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    env
}

#[test]
fn a_signed_allow_reaches_the_hook_and_forged_ones_are_refused() {
    let passkey = Passkey::es256(61);
    let r = SignedReceiver::start(Passkey::es256(61));
    let mut env = paired_env(&r, 60);
    env.start_sync();
    let device = Device::new(&passkey);

    let hook = env.spawn_hook("sp-permission", &permission_request("echo hi > out.txt"));
    let attention = open_attention(&env);

    // Forgeries first, while the prompt is open: none may be acted on.
    let (cmd, good) = device.answer(MACHINE, &attention, "allow");
    let mut edited = good.clone();
    edited["cmd"] = json!(cmd.replace("\"allow\"", "\"deny\""));
    let other_machine = device
        .answer("m_someothermachine000001", &attention, "allow")
        .1;
    let stranger = Device::new(&Passkey::es256(62))
        .answer(MACHINE, &attention, "allow")
        .1;
    let unsigned = json!({"cmd": device.answer(MACHINE, &attention, "allow").0});
    let forged: Vec<(String, &str)> = vec![
        (r.enqueue(edited), "bad_csig"),
        (r.enqueue(other_machine), "wrong_machine"),
        (r.enqueue(stranger), "untrusted_key"),
        (r.enqueue(unsigned), "unsigned"),
    ];
    for (id, code) in &forged {
        let ack = r
            .ack(id, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("no ack for the {code} forgery"));
        assert_eq!(ack["outcome"], "refused", "{ack}");
        assert_eq!(ack["code"], *code, "{ack}");
    }
    assert_eq!(
        env.query::<String>("SELECT state FROM attention"),
        vec!["open".to_string()],
        "a forgery settled the prompt"
    );

    // The real one: a touch over exactly this command (DECISIONS 36).
    let good = device.confirm(&cmd);
    let id = r.enqueue(good.clone());
    let out = finish(hook, Duration::from_secs(20));
    assert!(out.status.success());
    assert_eq!(stdout(&out).trim_end(), ALLOW);
    let ack = r
        .ack(&id, Duration::from_secs(20))
        .expect("ack for the signed allow");
    assert_eq!(ack["outcome"], "delivered", "{ack}");

    // The same signed command again, under a new id: a replay.
    let again = r.enqueue(good);
    let ack = r
        .ack(&again, Duration::from_secs(20))
        .expect("ack for the replay");
    assert_eq!(ack["outcome"], "refused");
    assert_eq!(ack["code"], "replay");

    // One poll per machine, with the machine's own token, never the sink token.
    let polls = r.state.lock().unwrap().polls.clone();
    assert!(!polls.is_empty());
    assert!(
        polls
            .iter()
            .all(|(q, a)| q.starts_with(&format!("machine={MACHINE}&wait="))
                && a.as_deref() == Some(&format!("Bearer {MACHINE_TOKEN}") as &str)),
        "{polls:?}"
    );
    let stored: Vec<String> =
        env.query("SELECT code FROM messages WHERE outcome='refused' ORDER BY received_at");
    assert_eq!(stored.len(), 5, "{stored:?}");
}

/// Issue 28: serde_json keeps the last of two `cmd`s. The second one here is a good signed
/// allow; with a duplicate anywhere the envelope is malformed and nothing is acted on.
#[test]
fn an_envelope_with_a_duplicate_key_is_refused_malformed() {
    let passkey = Passkey::es256(63);
    let r = SignedReceiver::start(Passkey::es256(63));
    let mut env = paired_env(&r, 60);
    env.start_sync();
    let device = Device::new(&passkey);
    let hook = env.spawn_hook("sp-permission", &permission_request("echo hi > out.txt"));
    let attention = open_attention(&env);

    let (deny, _) = device.answer(MACHINE, &attention, "deny");
    let good = device.touched(MACHINE, &attention, "allow");
    let id = r.enqueue_with_duplicate(good.clone(), "cmd", json!(deny));
    let ack = r
        .ack(&id, Duration::from_secs(20))
        .expect("ack for the envelope with two cmds");
    assert_eq!(ack["outcome"], "refused", "{ack}");
    assert_eq!(ack["code"], "malformed", "{ack}");
    assert!(
        ack["detail"]
            .as_str()
            .unwrap()
            .contains(r#"duplicate key "cmd""#),
        "{ack}"
    );
    assert_eq!(
        env.query::<String>("SELECT state FROM attention"),
        vec!["open".to_string()],
        "the malformed envelope settled the prompt"
    );

    // Its signed command, carried once, is still good: its nonce was never spent.
    let id = r.enqueue(good);
    let out = finish(hook, Duration::from_secs(20));
    assert_eq!(stdout(&out).trim_end(), ALLOW);
    let ack = r
        .ack(&id, Duration::from_secs(20))
        .expect("ack for the allow");
    assert_eq!(ack["outcome"], "delivered", "{ack}");
}

#[test]
fn an_allow_for_no_open_prompt_is_refused_and_a_removed_key_stops_counting() {
    let passkey = Passkey::es256(63);
    let r = SignedReceiver::start(Passkey::es256(63));
    let mut env = paired_env(&r, 3);
    env.start_sync();
    let device = Device::new(&passkey);

    // The session is known (its hook ran), but no prompt of that id is open.
    let hook = env.spawn_hook("sp-permission", &permission_request("echo one"));
    let attention = open_attention(&env);
    let id = r.enqueue(device.touched(MACHINE, "perm-0000000000000000", "allow"));
    refused(&r, &id, "no_attention");

    // With the key removed, even a well-signed answer for the open prompt is refused.
    let rm = env
        .cmd("sp")
        .args(["control", "keys", "remove", &passkey.id])
        .output()
        .unwrap();
    assert!(rm.status.success());
    let id = r.enqueue(device.touched(MACHINE, &attention, "allow"));
    refused(&r, &id, "untrusted_key");
    printed_nothing(hook);
}

/// docs/protocol.md#control-5 step 6: with `control.folders`, a signed allow for a session whose own folder
/// (as its hooks reported it, never as the command says) is outside them is refused `folder`.
#[test]
fn a_session_outside_the_folder_allowlist_is_refused() {
    let passkey = Passkey::es256(65);
    let r = SignedReceiver::start(Passkey::es256(65));
    let mut env = paired_env_with(
        &r,
        json!({"permission_wait_s": 3, "folders": ["/srv/allowed"]}),
    );
    env.start_sync();
    let device = Device::new(&passkey);
    // The hook reports cwd /tmp.
    let hook = env.spawn_hook("sp-permission", &permission_request("echo outside"));
    let attention = open_attention(&env);
    let id = r.enqueue(device.touched(MACHINE, &attention, "allow"));
    refused(&r, &id, "folder");
    let out = finish(hook, Duration::from_secs(20));
    assert!(out.stdout.is_empty(), "the hook printed {:?}", stdout(&out));
}

/// docs/protocol.md#control-2: a device the machine trusts vouches for a new one with a signed `key.add`;
/// the key is enrolled (acked delivered) and then signs like the first; a replay of the
/// `key.add` is refused.
#[test]
fn a_trusted_device_vouches_for_a_new_passkey_with_key_add() {
    let first = Passkey::es256(67);
    let phone = Passkey::es256(68);
    let r = SignedReceiver::start(Passkey::es256(67));
    let mut env = paired_env(&r, 60);
    env.start_sync();
    let cmd = command(
        MACHINE,
        "key.add",
        "sessionpipe:keys",
        &[("key", phone.trusted()), ("name", json!("phone"))],
        &nonce(),
        now_ms(),
    );
    let signed = Device::new(&first).day.sign(&cmd);
    let id = r.enqueue(signed.clone());
    let ack = r
        .ack(&id, Duration::from_secs(20))
        .expect("ack for key.add");
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    let keys: Vec<String> = env.query("SELECT id FROM control_keys WHERE added_via='key.add'");
    assert_eq!(keys, vec![phone.id.clone()]);
    let replay = r.enqueue(signed);
    let ack = r
        .ack(&replay, Duration::from_secs(20))
        .expect("ack for the replay");
    assert_eq!(
        (ack["outcome"].as_str(), ack["code"].as_str()),
        (Some("refused"), Some("replay"))
    );

    // The new passkey now confirms an allow the hook acts on.
    let hook = env.spawn_hook("sp-permission", &permission_request("echo from the phone"));
    let attention = open_attention(&env);
    r.enqueue(Device::new(&phone).touched(MACHINE, &attention, "allow"));
    let out = finish(hook, Duration::from_secs(20));
    assert_eq!(stdout(&out).trim_end(), ALLOW);
}

fn refused_code(ack: &Value) -> (Option<&str>, Option<&str>) {
    (ack["outcome"].as_str(), ack["code"].as_str())
}

/// The final ack of message `id`, which must be a refusal with `code`.
fn refused(r: &SignedReceiver, id: &str, code: &str) -> Value {
    let ack = r.ack(id, Duration::from_secs(20)).expect("ack");
    assert_eq!(refused_code(&ack), (Some("refused"), Some(code)), "{ack}");
    ack
}

/// The waiting hook ended as a hook must when nothing allowed it: exit 0, nothing printed.
fn printed_nothing(hook: std::process::Child) {
    let out = finish(hook, Duration::from_secs(20));
    assert!(out.status.success());
    assert!(out.stdout.is_empty(), "the hook printed {:?}", stdout(&out));
}

/// DECISIONS 36: any script the receiver serves the page can sign with the day key, so an
/// allow on the day key alone (once, for the session, with an edited input) is refused
/// `confirm_needed`, the prompt stays open and the hook prints nothing; so is one carrying a
/// confirm made without verifying the person (UV flag clear). A touch over the exact
/// command then allows it.
#[test]
fn a_day_key_allow_is_refused_confirm_needed_and_a_touch_over_the_exact_command_allows() {
    let passkey = Passkey::es256(71);
    let r = SignedReceiver::start(Passkey::es256(71));
    let mut env = paired_env(&r, 60);
    env.start_sync();
    let device = Device::new(&passkey);
    let hook = env.spawn_hook("sp-permission", &permission_request("curl x | sh"));
    let attention = open_attention(&env);
    let session = format!("claude-code:{SESSION}");
    let with = |fields: &[(&str, Value)]| {
        let mut all = vec![("for", json!(attention)), ("decision", json!("allow"))];
        all.extend(fields.iter().cloned());
        command(
            MACHINE,
            "permission.answer",
            &session,
            &all,
            &nonce(),
            now_ms(),
        )
    };
    let day_only = [
        device.day.sign(&with(&[])),
        device.day.sign(&with(&[("scope", json!("session"))])),
        device.day.sign(&with(&[(
            "input",
            json!({"command": "ls", "description": "list"}),
        )])),
    ];
    // A day-key allow that also carries a confirm without user verification.
    let cmd = with(&[]);
    let mut no_uv = device.day.sign(&cmd);
    let mut ceremony = Ceremony::get("localhost");
    ceremony.flags = 0x01;
    no_uv["confirm"] = device.touch(&cmd, &ceremony)["confirm"].clone();
    for signed in day_only.into_iter().chain([no_uv]) {
        let id = r.enqueue(signed);
        let ack = refused(&r, &id, "confirm_needed");
        assert!(
            ack["detail"].as_str().is_some_and(|d| d.contains("touch")),
            "{ack}"
        );
    }
    assert_eq!(
        env.query::<String>("SELECT state FROM attention"),
        vec!["open".to_string()],
        "a day-key allow settled the prompt"
    );
    assert!(
        hook_still_running(&env),
        "the hook ended on a refused allow"
    );

    let id = r.enqueue(device.touched(MACHINE, &attention, "allow"));
    let out = finish(hook, Duration::from_secs(20));
    assert_eq!(stdout(&out).trim_end(), ALLOW);
    let ack = r.ack(&id, Duration::from_secs(20)).expect("ack");
    assert_eq!(ack["outcome"], "delivered", "{ack}");
}

/// The hook's pid is still alive (it is waiting for an answer).
fn hook_still_running(env: &Env) -> bool {
    env.query::<i64>("SELECT hook_pid FROM attention WHERE state='open'")
        .first()
        .is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
}

/// DECISIONS 36: when the day key alone allows, the hook's window closes with nothing
/// printed (the harness asks at the terminal).
#[test]
fn a_day_key_only_allow_leaves_the_hook_printing_nothing() {
    let passkey = Passkey::es256(72);
    let r = SignedReceiver::start(Passkey::es256(72));
    let mut env = paired_env(&r, 4);
    env.start_sync();
    let device = Device::new(&passkey);
    let hook = env.spawn_hook("sp-permission", &permission_request("rm -rf build"));
    let attention = open_attention(&env);
    let id = r.enqueue(device.answer(MACHINE, &attention, "allow").1);
    refused(&r, &id, "confirm_needed");
    printed_nothing(hook);
}

/// DECISIONS 36: a deny cannot run code, so it still rides the day key.
#[test]
fn a_day_key_deny_still_denies() {
    let passkey = Passkey::es256(73);
    let r = SignedReceiver::start(Passkey::es256(73));
    let mut env = paired_env(&r, 60);
    env.start_sync();
    let device = Device::new(&passkey);
    let hook = env.spawn_hook("sp-permission", &permission_request("rm -rf /"));
    let attention = open_attention(&env);
    let id = r.enqueue(device.answer(MACHINE, &attention, "deny").1);
    let out = finish(hook, Duration::from_secs(20));
    let printed: Value = serde_json::from_str(stdout(&out).trim_end()).expect("JSON");
    assert_eq!(
        printed["hookSpecificOutput"]["decision"]["behavior"], "deny",
        "{printed}"
    );
    let ack = r.ack(&id, Duration::from_secs(20)).expect("ack");
    assert_eq!(ack["outcome"], "delivered", "{ack}");
}

/// DECISIONS 36's opt-out: with `control.allow_with_day_key: true` the day key alone allows.
#[test]
fn allow_with_day_key_true_lets_the_day_key_allow_again() {
    let passkey = Passkey::es256(74);
    let r = SignedReceiver::start(Passkey::es256(74));
    let mut env = paired_env_with(
        &r,
        json!({"permission_wait_s": 60, "allow_with_day_key": true}),
    );
    env.start_sync();
    let device = Device::new(&passkey);
    let hook = env.spawn_hook("sp-permission", &permission_request("echo old way"));
    let attention = open_attention(&env);
    let id = r.enqueue(device.answer(MACHINE, &attention, "allow").1);
    let out = finish(hook, Duration::from_secs(20));
    assert_eq!(stdout(&out).trim_end(), ALLOW);
    let ack = r.ack(&id, Duration::from_secs(20)).expect("ack");
    assert_eq!(ack["outcome"], "delivered", "{ack}");
}

/// DECISIONS 36: a start needs a touch too (a day-key start is refused `confirm_needed`; a
/// touched one passes the policy and meets the folder gate: no control.folders, no starts,
/// DECISIONS 39); a message to a
/// session that asks first still rides the day key and is queued for it.
#[test]
fn a_day_key_start_is_refused_confirm_needed_and_a_day_key_message_still_goes() {
    let passkey = Passkey::es256(75);
    let r = SignedReceiver::start(Passkey::es256(75));
    let mut env = paired_env(&r, 3);
    env.start_sync();
    let device = Device::new(&passkey);
    let start = |n: &str| {
        command(
            MACHINE,
            "start",
            "claude-code:7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
            &[("text", json!("fix the tests")), ("cwd", json!("/tmp"))],
            n,
            now_ms(),
        )
    };
    let id = r.enqueue(device.day.sign(&start(&nonce())));
    refused(&r, &id, "confirm_needed");
    let id = r.enqueue(device.confirm(&start(&nonce())));
    refused(&r, &id, "folder");

    // The session is known once its hook ran; a message to it rides the day key.
    let hook = env.spawn_hook("sp-permission", &permission_request("echo known"));
    open_attention(&env);
    let prompt = command(
        MACHINE,
        "prompt",
        &format!("claude-code:{SESSION}"),
        &[("text", json!("also update the changelog"))],
        &nonce(),
        now_ms(),
    );
    let id = r.enqueue(device.day.sign(&prompt));
    assert!(
        until(Duration::from_secs(20), || env.query::<String>(&format!(
            "SELECT state FROM messages WHERE id = '{id}'"
        )) == vec!["queued".to_string()]),
        "the message was not queued: {:?}",
        env.query::<String>(&format!(
            "SELECT coalesce(code, outcome, state) FROM messages WHERE id = '{id}'"
        ))
    );
    finish(hook, Duration::from_secs(20));
}

/// A paired machine whose sp-sync runs, with a device holding the passkey of `seed`.
fn running(seed: u8, wait_s: u64) -> (SignedReceiver, Env, Device) {
    let passkey = Passkey::es256(seed);
    let r = SignedReceiver::start(Passkey::es256(seed));
    let mut env = paired_env(&r, wait_s);
    env.start_sync();
    (r, env, Device::new(&passkey))
}

/// A batch answer (DECISIONS 36): `for` an array of attention ids of one session.
fn batch(machine: &str, ids: &[String], decision: &str) -> String {
    command(
        machine,
        "permission.answer",
        &format!("claude-code:{SESSION}"),
        &[("for", json!(ids)), ("decision", json!(decision))],
        &nonce(),
        now_ms(),
    )
}

/// Waits until `n` prompts are open and returns their ids.
fn open_attentions(env: &Env, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    assert!(
        until(Duration::from_secs(15), || {
            ids = if env.db_path().exists() {
                env.query::<String>(
                    "SELECT attention_id FROM attention WHERE state='open' ORDER BY attention_id",
                )
            } else {
                Vec::new()
            };
            ids.len() == n
        }),
        "{} prompts open, not {n}",
        ids.len()
    );
    ids
}

/// DECISIONS 36: one touch over one batch command answers every open prompt it names (each
/// real hook prints allow), a prompt answered before is counted "no longer open", and the
/// batch gets one final ack saying so (its parts none of their own).
#[test]
fn a_batch_with_one_touch_answers_every_open_prompt_and_counts_the_closed_one() {
    let (r, env, device) = running(81, 60);
    let hooks: Vec<_> = (0..4)
        .map(|i| env.spawn_hook("sp-permission", &permission_request(&format!("echo {i}"))))
        .collect();
    let ids = open_attentions(&env, 4);
    // One is answered on its own first (a deny rides the day key): no longer open.
    let (deny, _) = device.answer(MACHINE, &ids[3], "deny");
    let denied = r.enqueue(device.day.sign(&deny));
    r.ack(&denied, Duration::from_secs(20))
        .expect("the deny's ack");
    let open = open_attentions(&env, 3);
    assert!(!open.contains(&ids[3]));

    let id = r.enqueue(device.confirm(&batch(MACHINE, &ids, "allow")));
    let ack = r
        .ack(&id, Duration::from_secs(20))
        .expect("the batch's ack");
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    let detail = ack["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("3 answered") && detail.contains("1 no longer open"),
        "{ack}"
    );
    let (mut allowed, mut denied_out) = (0, 0);
    for hook in hooks {
        let out = finish(hook, Duration::from_secs(20));
        assert!(out.status.success());
        match stdout(&out).trim_end() {
            ALLOW => allowed += 1,
            s if s.contains("\"deny\"") => denied_out += 1,
            s => panic!("a hook printed {s:?}; log {}", env.log()),
        }
    }
    assert_eq!((allowed, denied_out), (3, 1));
    // One ack for the batch, none for its parts.
    let acks = env.query::<String>("SELECT message_id FROM acks ORDER BY message_id");
    assert_eq!(acks.len(), 2, "{acks:?}");
    assert!(acks.contains(&id) && acks.contains(&denied), "{acks:?}");
}

/// DECISIONS 36: a batch allow on the day key alone is refused `confirm_needed` and answers
/// nothing; a batch deny rides the day key.
#[test]
fn a_day_key_batch_allow_is_refused_confirm_needed_and_a_day_key_batch_deny_denies() {
    let (r, env, device) = running(82, 60);
    let hooks: Vec<_> = (0..2)
        .map(|i| env.spawn_hook("sp-permission", &permission_request(&format!("rm -rf {i}"))))
        .collect();
    let ids = open_attentions(&env, 2);
    let id = r.enqueue(device.day.sign(&batch(MACHINE, &ids, "allow")));
    refused(&r, &id, "confirm_needed");
    assert_eq!(
        open_attentions(&env, 2),
        ids,
        "a day-key batch settled a prompt"
    );

    let id = r.enqueue(device.day.sign(&batch(MACHINE, &ids, "deny")));
    for hook in hooks {
        let out = finish(hook, Duration::from_secs(20));
        assert!(stdout(&out).contains("\"deny\""), "{}", stdout(&out));
    }
    let ack = r.ack(&id, Duration::from_secs(20)).expect("ack");
    assert_eq!(ack["outcome"], "delivered", "{ack}");
}

/// A batch names 1 to 50 distinct ids: 51, or one twice, is refused `bad_fields` with a
/// detail naming the rule, and the prompt stays open.
#[test]
fn a_batch_of_more_than_50_ids_or_a_repeated_id_is_refused_naming_the_rule() {
    let (r, env, device) = running(83, 60);
    let hook = env.spawn_hook("sp-permission", &permission_request("echo many"));
    let attention = open_attention(&env);
    let mut many: Vec<String> = (0..50).map(|i| format!("perm-{i:016}")).collect();
    many.push(attention.clone());
    let twice = vec![attention.clone(), attention.clone()];
    for ids in [many, twice] {
        let id = r.enqueue(device.confirm(&batch(MACHINE, &ids, "allow")));
        let ack = refused(&r, &id, "bad_fields");
        assert!(
            ack["detail"]
                .as_str()
                .is_some_and(|d| d.contains("1 to 50 distinct") && d.contains("DECISIONS 36")),
            "{ack}"
        );
    }
    assert_eq!(open_attentions(&env, 1), vec![attention.clone()]);
    r.enqueue(device.answer(MACHINE, &attention, "deny").1);
    let out = finish(hook, Duration::from_secs(20));
    assert!(stdout(&out).contains("\"deny\""), "{}", stdout(&out));
}

/// A Claude Code Stop of `session` in `mode`, run as the harness runs it; its stdout.
fn stop_in_mode(env: &Env, session: &str, mode: &str) -> String {
    let p = json!({
        "session_id": session, "hook_event_name": "Stop", "cwd": "/tmp",
        "transcript_path": "/tmp/t.jsonl", "permission_mode": mode, "stop_hook_active": false
    });
    let out = finish(env.spawn_hook("sp-stop", &p), Duration::from_secs(20));
    assert!(out.status.success(), "{}", env.log());
    stdout(&out)
}

/// DECISIONS 36: the hooks keep the session's permission mode; a message on the day key
/// alone to a session in `bypassPermissions` (it runs tools without asking) is refused
/// `confirm_needed`, while one to a session in `default` is delivered at its Stop; a touch
/// over the message lets it reach the bypass session too.
#[test]
fn a_day_key_prompt_to_a_bypass_session_is_refused_and_one_to_a_default_session_is_delivered() {
    const BYPASS: &str = "7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
    let (r, env, device) = running(84, 60);
    assert_eq!(stop_in_mode(&env, BYPASS, "bypassPermissions"), "");
    assert_eq!(stop_in_mode(&env, SESSION, "default"), "");
    let prompt = |session: &str, text: &str| {
        command(
            MACHINE,
            "prompt",
            &format!("claude-code:{session}"),
            &[("text", json!(text))],
            &nonce(),
            now_ms(),
        )
    };

    let id = r.enqueue(device.day.sign(&prompt(BYPASS, "run the deploy")));
    let ack = refused(&r, &id, "confirm_needed");
    assert!(
        ack["detail"]
            .as_str()
            .is_some_and(|d| d.contains("runs tools without asking")),
        "{ack}"
    );
    assert_eq!(stop_in_mode(&env, BYPASS, "bypassPermissions"), "");

    let id = r.enqueue(device.day.sign(&prompt(SESSION, "update the changelog")));
    let queued = || {
        env.query::<String>(&format!("SELECT state FROM messages WHERE id = '{id}'"))
            == vec!["queued".to_string()]
    };
    assert!(until(Duration::from_secs(20), queued), "{}", env.log());
    let out = stop_in_mode(&env, SESSION, "default");
    assert!(out.contains("update the changelog"), "{out}");
    // The Stop ending the turn the message started writes its final ack (DECISIONS 38).
    assert_eq!(stop_in_mode(&env, SESSION, "default"), "");
    let ack = r.ack(&id, Duration::from_secs(20)).expect("ack");
    assert_eq!(ack["outcome"], "delivered", "{ack}");

    // With a touch over it, the message reaches the bypass session.
    let id = r.enqueue(device.confirm(&prompt(BYPASS, "run the tests")));
    let queued = || {
        env.query::<String>(&format!("SELECT state FROM messages WHERE id = '{id}'"))
            == vec!["queued".to_string()]
    };
    assert!(until(Duration::from_secs(20), queued), "{}", env.log());
    let out = stop_in_mode(&env, BYPASS, "bypassPermissions");
    assert!(out.contains("run the tests"), "{out}");
    assert_eq!(
        env.query::<String>(&format!(
            "SELECT permission_mode FROM sessions WHERE key = 'claude-code:{BYPASS}'"
        )),
        vec!["bypassPermissions".to_string()]
    );
}

/// DECISIONS 36: a day-key message queued while its session asked first is refused
/// `confirm_needed` at delivery when the session has switched to `bypassPermissions` by its
/// Stop (the hook's own payload says so); the Stop delivers nothing.
#[test]
fn a_day_key_prompt_queued_before_a_switch_to_bypass_is_refused_at_delivery() {
    let (r, env, device) = running(85, 60);
    assert_eq!(stop_in_mode(&env, SESSION, "default"), "");
    let prompt = command(
        MACHINE,
        "prompt",
        &format!("claude-code:{SESSION}"),
        &[("text", json!("deploy to production"))],
        &nonce(),
        now_ms(),
    );
    let id = r.enqueue(device.day.sign(&prompt));
    let queued = || {
        env.query::<String>(&format!("SELECT state FROM messages WHERE id = '{id}'"))
            == vec!["queued".to_string()]
    };
    assert!(until(Duration::from_secs(20), queued), "{}", env.log());
    assert_eq!(stop_in_mode(&env, SESSION, "bypassPermissions"), "");
    refused(&r, &id, "confirm_needed");
}

/// A machine that may start sessions in one folder of its own (DECISIONS 39), with
/// `control` beside `folders`; returns the folder too.
/// The folders go when the returned `TempDir` drops.
fn starting(
    seed: u8,
    control: Value,
) -> (
    SignedReceiver,
    Env,
    Device,
    std::path::PathBuf,
    tempfile::TempDir,
) {
    let passkey = Passkey::es256(seed);
    let r = SignedReceiver::start(Passkey::es256(seed));
    let work = tempfile::tempdir().unwrap();
    let allowed = work.path().join("allowed");
    std::fs::create_dir_all(&allowed).unwrap();
    std::fs::create_dir_all(work.path().join("other")).unwrap();
    let mut c = control;
    c["folders"] = json!([allowed]);
    c["permission_wait_s"] = json!(3);
    let mut env = paired_env_with(&r, c);
    // The runs these starts launch: a program that answers nothing and exits 1, so each
    // run ends at once, `failed`, after showing what the agent was given (runs.argv).
    env.start_sync_with(&[("SP_CLAUDE", "/bin/false"), ("SP_CODEX", "/bin/false")]);
    (r, env, Device::new(&passkey), allowed, work)
}

/// A touched `start` of a new session of `harness` in `cwd`, with `extra` fields; returns
/// it signed and the session id it names.
fn start_cmd(
    device: &Device,
    harness: &str,
    cwd: &std::path::Path,
    extra: &[(&str, Value)],
) -> (Value, String) {
    let sid = uuid_like();
    let mut fields = vec![("text", json!("fix the tests")), ("cwd", json!(cwd))];
    fields.extend(extra.iter().cloned());
    // The session is always Claude Code's form (the verifier's rule); `harness` picks another.
    if harness != "claude-code" {
        fields.push(("harness", json!(harness)));
    }
    let cmd = command(
        MACHINE,
        "start",
        &format!("claude-code:{sid}"),
        &fields,
        &nonce(),
        now_ms(),
    );
    (device.confirm(&cmd), sid)
}

/// A start's `files` naming one text file as `signed`, the receiver serving `served` for it.
fn attach(r: &SignedReceiver, name: &str, signed: &[u8], served: &[u8]) -> Value {
    let hash = b64(&sha256(signed));
    let mut st = r.state.lock().unwrap();
    st.files.insert(hash.clone(), served.to_vec());
    json!([{"name": name, "type": "text/plain", "size": signed.len(), "sha256": hash}])
}

fn uuid_like() -> String {
    let u = ulid::Ulid::new().0.to_be_bytes();
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-4{}-8{}-{}",
        &h[..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// DECISIONS 39: a start's `cwd` must be inside `control.folders`, canonicalised (so `..`
/// cannot climb out); a harness without a proven headless run is not started, saying why.
#[test]
fn a_start_outside_control_folders_is_refused_folder() {
    let (r, _env, device, allowed, _work) = starting(80, json!({}));
    for cwd in [
        allowed.join("../other"),
        allowed.parent().unwrap().join("other"),
    ] {
        let (signed, _) = start_cmd(&device, "claude-code", &cwd, &[]);
        let ack = refused(&r, &r.enqueue(signed), "folder");
        assert!(
            ack["detail"].as_str().unwrap().contains("control.folders"),
            "{ack}"
        );
    }
    let (signed, _) = start_cmd(&device, "gemini-cli", &allowed, &[]);
    let ack = r
        .ack(&r.enqueue(signed), Duration::from_secs(20))
        .expect("ack");
    assert_eq!(ack["outcome"], "unsupported", "{ack}");
    assert!(
        ack["detail"]
            .as_str()
            .unwrap()
            .contains("only claude-code and codex"),
        "{ack}"
    );
}

/// DECISIONS 39: at most `per_hour` starts in any hour; the eleventh is refused
/// `start_limit`. Each of the ten is run (and ends `failed`: its program answers nothing).
#[test]
fn the_eleventh_start_in_an_hour_is_refused_start_limit() {
    let (r, env, device, allowed, _work) =
        starting(81, json!({"start_limit": {"running": 10, "per_hour": 10}}));
    let ten: Vec<Value> = (0..10)
        .map(|_| start_cmd(&device, "claude-code", &allowed, &[]).0)
        .collect();
    for id in r.enqueue_all(ten) {
        let ack = r.ack(&id, Duration::from_secs(30)).expect("ack");
        assert_eq!(ack["outcome"], "failed", "{ack}");
        assert!(
            ack["detail"].as_str().unwrap().contains("the start run"),
            "{ack}"
        );
    }
    let (signed, _) = start_cmd(&device, "claude-code", &allowed, &[]);
    let ack = refused(&r, &r.enqueue(signed), "start_limit");
    assert!(
        ack["detail"]
            .as_str()
            .unwrap()
            .contains("10 started in the last hour"),
        "{ack}"
    );
    assert_eq!(
        env.query::<i64>("SELECT count(*) FROM runs WHERE kind = 'start'"),
        vec![10]
    );
}

/// DECISIONS 39: at most `running` starts run at once (default 2): three in one poll, the
/// third is refused `start_limit` while the first two are still queued for their runs.
#[test]
fn a_third_start_while_two_run_is_refused_start_limit() {
    let (r, _env, device, allowed, _work) = starting(84, json!({}));
    let three: Vec<Value> = (0..3)
        .map(|_| start_cmd(&device, "claude-code", &allowed, &[]).0)
        .collect();
    let ids = r.enqueue_all(three);
    let ack = refused(&r, &ids[2], "start_limit");
    assert!(
        ack["detail"]
            .as_str()
            .unwrap()
            .contains("2 running (at most 2)"),
        "{ack}"
    );
    for id in &ids[..2] {
        let ack = r.ack(id, Duration::from_secs(30)).expect("ack");
        assert_eq!(ack["outcome"], "failed", "{ack}");
    }
}

/// DECISIONS 39: an attached file is fetched, checked and written under
/// `<cwd>/.sessionpipe/files/<session id>/` at 0600, the folder ignoring itself, and the
/// run is started in the folder with the message naming the file's path; a start naming
/// `codex` runs `codex exec`.
#[test]
fn a_start_with_a_file_writes_it_0600_under_sessionpipe_files_and_tells_the_model_its_path() {
    use std::os::unix::fs::PermissionsExt;
    let (r, env, device, allowed, _work) = starting(82, json!({}));
    let bytes = b"line one\nline two\n".to_vec();
    let file = attach(&r, "notes.txt", &bytes, &bytes);
    let (signed, sid) = start_cmd(&device, "claude-code", &allowed, &[("files", file)]);
    let id = r.enqueue(signed);
    let ack = r.ack(&id, Duration::from_secs(30)).expect("ack");
    assert_eq!(ack["outcome"], "failed", "{ack}");
    assert!(
        ack["detail"].as_str().unwrap().contains("the start run"),
        "{ack}"
    );
    let written = allowed.join(format!(".sessionpipe/files/{sid}/notes.txt"));
    assert_eq!(std::fs::read(&written).unwrap(), bytes);
    let mode = std::fs::metadata(&written).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{mode:o}");
    assert_eq!(
        std::fs::read_to_string(allowed.join(".sessionpipe/.gitignore")).unwrap(),
        "*\n"
    );
    let told = format!(
        "fix the tests\n\nAttached files (saved in this folder):\n- .sessionpipe/files/{sid}/notes.txt (text/plain, 1 KB)"
    );
    let run = |id: &str| {
        env.query::<String>(&format!(
            "SELECT json_array(harness, cwd, argv) FROM runs WHERE kind = 'start' AND message_id = '{id}'"
        ))
        .into_iter()
        .map(|j| serde_json::from_str::<Value>(&j).unwrap())
        .next()
        .expect("a start run")
    };
    let row = run(&id);
    assert_eq!(row[0], "claude-code", "{row}");
    assert_eq!(row[1], json!(allowed.canonicalize().unwrap()), "{row}");
    let argv: Vec<String> = serde_json::from_str(row[2].as_str().unwrap()).unwrap();
    assert_eq!(argv.first().map(String::as_str), Some("/bin/false"));
    assert_eq!(argv.last(), Some(&told), "{argv:?}");
    // The new session is the one the command named.
    assert!(
        argv.windows(2).any(|w| w == ["--session-id", sid.as_str()]),
        "{argv:?}"
    );
    assert!(!argv
        .iter()
        .any(|a| a.contains("dangerously") || a.contains("bypass")));

    let (signed, _) = start_cmd(&device, "codex", &allowed, &[]);
    let id = r.enqueue(signed);
    r.ack(&id, Duration::from_secs(30)).expect("ack");
    let row = run(&id);
    assert_eq!(row[0], "codex", "{row}");
    let argv: Vec<String> = serde_json::from_str(row[2].as_str().unwrap()).unwrap();
    assert_eq!(argv[..3], ["/bin/false", "exec", "--json"], "{argv:?}");
}

/// DECISIONS 39: a file whose bytes do not match the signed sha256 starts nothing: acked
/// `failed` code `file` naming it, nothing kept, its slot given back.
#[test]
fn a_file_whose_bytes_do_not_match_its_hash_starts_nothing() {
    let (r, env, device, allowed, _work) = starting(83, json!({}));
    // The receiver swaps the bytes (same length).
    let file = attach(&r, "notes.txt", b"the real notes\n", b"the fake notes\n");
    let (signed, sid) = start_cmd(&device, "claude-code", &allowed, &[("files", file)]);
    let id = r.enqueue(signed);
    let ack = r.ack(&id, Duration::from_secs(20)).expect("ack");
    assert_eq!(
        (&ack["outcome"], &ack["code"]),
        (&json!("failed"), &json!("file")),
        "{ack}"
    );
    let detail = ack["detail"].as_str().unwrap();
    assert!(
        detail.contains("\"notes.txt\"") && detail.contains("sha256"),
        "{ack}"
    );
    assert!(!allowed.join(format!(".sessionpipe/files/{sid}")).exists());
    assert_eq!(env.query::<i64>("SELECT count(*) FROM starts"), vec![0]);
}

/// DECISIONS 39: sp-sync tells its receiver what this machine can start: the harnesses whose
/// program is on its PATH (here `claude` only), the allowed folders, and that it takes files.
#[test]
fn the_machine_tells_its_receiver_what_it_can_start() {
    use std::os::unix::fs::PermissionsExt;
    let r = SignedReceiver::start(Passkey::es256(85));
    let bin = tempfile::tempdir().unwrap();
    let claude = bin.path().join("claude");
    std::fs::write(&claude, "#!/bin/sh\nexit 1\n").unwrap();
    std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut env = paired_env_with(&r, json!({"folders": ["/srv/work", "/home/me/src"]}));
    let path = format!("{}:/usr/bin:/bin", bin.path().display());
    env.start_sync_with(&[("PATH", &path)]);
    let mut hello = None;
    assert!(
        until(Duration::from_secs(20), || {
            hello = r.state.lock().unwrap().hellos.first().cloned();
            hello.is_some()
        }),
        "no hello reached the receiver"
    );
    let hello = hello.unwrap();
    assert_eq!(hello["harnesses"], json!(["claude-code"]), "{hello}");
    assert_eq!(
        hello["folders"],
        json!(["/srv/work", "/home/me/src"]),
        "{hello}"
    );
    assert_eq!(hello["files"], json!(true), "{hello}");
}
