//! Issue 39 with the real Claude Code 2.1.332, offline: a signed `start` (a touch, rule 36)
//! from the real receiver begins a new session in the allowed folder (DECISIONS 39); its
//! permission prompt reaches the receiver, a signed Allow runs the tool, and the start's final
//! ack carries the new session and the model's answer. The pairing and the touches are made
//! here with a software passkey (tests/common/signing.rs); the page's own form and touch are
//! tests/receiver_signed.rs's browser test.
use super::*;
use common::signing::{command, nonce, sha256, Ceremony, Passkey};
use spreceiver::ReceiverOptions;

const LOGIN: &str = "e2e-login-token-for-the-start-scenario";

/// POST `path` on the receiver as a script logged in with the login token.
fn page_post(s: &Scene, path: &str, body: &Value) -> (u16, Value) {
    let mut r = ureq::post(&format!("{}{path}", s.receiver.url()))
        .config()
        .http_status_as_error(false)
        .build()
        .header("authorization", &format!("Bearer {LOGIN}"))
        .header("content-type", "application/json")
        .send(body.to_string())
        .unwrap();
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// `cmd` signed by a touch of `passkey` (a confirm) and carried by the receiver; its id.
fn touched(s: &Scene, passkey: &Passkey, cmd: &str) -> String {
    let confirm = passkey.assert(&sha256(cmd.as_bytes()), &Ceremony::get("localhost"));
    let (status, env) = page_post(
        s,
        "/page/api/signed",
        &json!({"cmd": cmd, "confirm": confirm}),
    );
    assert_eq!(status, 200, "{env}");
    env["id"].as_str().unwrap().to_string()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The real receiver with signed control (rp id localhost) and a login token, our hooks
/// installed by `setup`, our sink signed and `control.folders` the scene's work folder.
fn signed_receiver(s: &mut Scene, setup: fn(&Scene, u64)) {
    let opts = ReceiverOptions {
        rp_id: Some("localhost".into()),
        login_token: Some(LOGIN.into()),
        ..ReceiverOptions::default()
    };
    s.world.receiver = spreceiver::Receiver::start(opts).expect("receiver");
    setup(s, 60);
    s.set_config("/sinks/0/control", json!("signed"));
    let path = s.home.join(".config/sessionpipe/config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["control"]["folders"] = json!([s.work]);
    std::fs::write(&path, config.to_string()).unwrap();
}

/// `sp pair phone` started: it prints the link and waits for the approval.
fn sp_pair(s: &Scene) -> common::pairing::SpPair {
    let mut pair = Command::new(s.bin.join("sp"));
    s.base_env(&mut pair);
    pair.args(["pair", "phone", "--timeout", "60"]);
    common::pairing::start(pair)
}

/// `sp pair` ends well once approved: the passkey enrolled.
fn pairing_ends(child: Child, printed: &std::sync::Mutex<String>) {
    let out = common::env::finish(child, Duration::from_secs(30));
    let printed = printed.lock().unwrap().clone();
    assert!(
        out.status.success() && printed.contains("Enrolled passkey"),
        "{printed}"
    );
}

/// [`signed_receiver`], and the machine paired with a software passkey approving over the pairing's code, as the page
/// does. Returns the machine's id and the passkey.
fn paired(s: &mut Scene, setup: fn(&Scene, u64)) -> (String, Passkey) {
    signed_receiver(s, setup);
    // Pairing: `sp pair` waits; the passkey approves over its code (as the page does).
    let passkey = Passkey::es256(39);
    let common::pairing::SpPair {
        child,
        link,
        printed,
        ..
    } = sp_pair(s);
    let code = link.rsplit("code=").next().unwrap().to_string();
    let (status, p) = {
        let mut r = ureq::get(&format!(
            "{}/page/api/pairing?code={code}",
            s.receiver.url()
        ))
        .header("authorization", &format!("Bearer {LOGIN}"))
        .call()
        .unwrap();
        (
            r.status().as_u16(),
            serde_json::from_str::<Value>(&r.body_mut().read_to_string().unwrap()).unwrap(),
        )
    };
    assert_eq!(status, 200, "{p}");
    let machine = p["machine"].as_str().unwrap().to_string();
    let proof = passkey.assert(
        &sha256(format!("sessionpipe.pair:{machine}:{code}").as_bytes()),
        &Ceremony::get("localhost"),
    );
    let (status, body) = page_post(
        s,
        "/page/api/pairing",
        &json!({"code": code, "key": passkey.trusted(), "proof": proof}),
    );
    assert_eq!(status, 200, "{body}");
    pairing_ends(child, &printed);
    (machine, passkey)
}

/// sp-sync as cron would run it, with `vars` for the runs it launches.
fn spawn_sync(s: &mut Scene, vars: &[(&str, &std::ffi::OsStr)]) {
    let mut sync = Command::new(s.bin.join("sp-sync"));
    s.base_env(&mut sync);
    sync.envs(vars.iter().copied());
    let sync = spawn_logged(s, sync, "sp-sync");
    s.extra.push(sync);
}

/// sp-sync with what the Claude Code runs it launches need: the model stand-in, offline.
pub(super) fn claude_sync(s: &mut Scene) {
    let model = s.model_url.clone();
    let claude = cli_path("claude");
    spawn_sync(
        s,
        &[
            ("ANTHROPIC_BASE_URL", model.as_ref()),
            ("ANTHROPIC_API_KEY", "sk-ant-e2e-dummy".as_ref()),
            ("DISABLE_TELEMETRY", "1".as_ref()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".as_ref()),
            ("DISABLE_AUTOUPDATER", "1".as_ref()),
            ("DISABLE_ERROR_REPORTING", "1".as_ref()),
            ("SP_CLAUDE", claude.as_os_str()),
        ],
    );
}

#[test]
fn claude_code_started_from_the_receiver_asks_there_and_answers() {
    scenario(
        "start::claude_code_started_from_the_receiver_asks_there_and_answers",
        &["claude"],
        |s| {
            let (machine, passkey) = paired(s, claude_setup);
            // sp-sync as cron would run it, with the model stand-in for what it launches.
            claude_sync(s);

            // A folder outside control.folders is refused `folder`; nothing starts.
            let sid = "8a1f3c2e-4b5d-4e6f-8a7b-9c0d1e2f3a4b";
            let outside = s.dir.join("elsewhere");
            std::fs::create_dir_all(&outside).unwrap();
            let cmd = command(
                &machine,
                "start",
                &format!("claude-code:{sid}"),
                &[("text", json!("hello")), ("cwd", json!(outside))],
                &nonce(),
                now_ms(),
            );
            let id = touched(s, &passkey, &cmd);
            let ack = s.ack(&json!({"id": id}), Duration::from_secs(30));
            assert_eq!(
                (&ack["outcome"], &ack["code"]),
                (&json!("refused"), &json!("folder")),
                "{ack}"
            );

            // The start in the allowed folder: a new Claude Code session, its id ours.
            let started = Instant::now();
            let sid = "3c9e1b7a-2d4f-4a6b-8c0d-1e2f3a4b5c6d";
            let key = format!("claude-code:{sid}");
            let cmd = command(
                &machine,
                "start",
                &key,
                &[
                    (
                        "text",
                        json!("Write the marker. SP-RUN:echo started-from-phone > marker.txt"),
                    ),
                    ("cwd", json!(s.work)),
                ],
                &nonce(),
                now_ms(),
            );
            let start_id = touched(s, &passkey, &cmd);
            let (asked, attention, needed) = wait_permission(s, "claude-code");
            assert_eq!(asked, key, "the prompt is the started session's");
            assert_eq!(needed["data"]["tool"], "Bash");
            assert!(s.marker().is_none(), "nothing ran before the answer");
            let allow = command(
                &machine,
                "permission.answer",
                &key,
                &[("for", json!(attention)), ("decision", json!("allow"))],
                &nonce(),
                now_ms(),
            );
            let allow_id = touched(s, &passkey, &allow);
            let ack = s.ack(&json!({"id": allow_id}), Duration::from_secs(60));
            assert_eq!(ack["outcome"], "delivered", "{ack}");
            let ack = s.ack(&json!({"id": start_id}), Duration::from_secs(90));
            s.say(&format!(
                "start's final ack after {:?}: {ack}",
                started.elapsed()
            ));
            assert_eq!(ack["outcome"], "delivered", "{ack}");
            assert_eq!(ack["mode"], "start", "{ack}");
            assert_eq!(ack["session"], json!(sid), "{ack}");
            assert_eq!(ack["reply"], "SP-FINAL: tool result seen.", "{ack}");
            assert_eq!(s.marker().as_deref(), Some("started-from-phone\n"));
        },
    );
}

/// Codex `exec` started from the receiver (its headless run, DECISIONS 39): the final ack is
/// delivered mode start with the thread Codex reported and the model's answer.
#[test]
fn codex_exec_started_from_the_receiver_answers() {
    scenario(
        "start::codex_exec_started_from_the_receiver_answers",
        &["codex"],
        |s| {
            let (machine, passkey) = paired(s, codex_setup);
            git_init_work(s);
            let home = codex_home(s);
            let codex = cli_path("codex");
            spawn_sync(
                s,
                &[
                    ("CODEX_HOME", home.as_os_str()),
                    ("STANDIN_API_KEY", "e2e-dummy".as_ref()),
                    ("SP_CODEX", codex.as_os_str()),
                ],
            );
            let started = Instant::now();
            let cmd = command(
                &machine,
                "start",
                "claude-code:5d2c8e4a-7b1f-4c3d-9e6a-0f1b2c3d4e5f",
                &[
                    ("text", json!("Say it back. SP-ECHO:KIWI")),
                    ("cwd", json!(s.work)),
                    ("harness", json!("codex")),
                ],
                &nonce(),
                now_ms(),
            );
            let id = touched(s, &passkey, &cmd);
            let ack = s.ack(&json!({"id": id}), Duration::from_secs(90));
            s.say(&format!(
                "start's final ack after {:?}: {ack}",
                started.elapsed()
            ));
            assert_eq!(ack["outcome"], "delivered", "{ack}");
            assert_eq!(ack["mode"], "start", "{ack}");
            assert_eq!(ack["reply"], "SP-SAW:KIWI", "{ack}");
            assert!(
                ack["session"].as_str().is_some_and(|t| !t.is_empty()),
                "{ack}"
            );
        },
    );
}

/// Issue 39's "must show", whole, in Chromium with a virtual passkey: the page pairs the
/// machine; **New session** → **Message** → **Start** (a touch) starts real Claude Code in the
/// allowed folder; its permission prompt reaches the page's inbox; **Allow** (a touch) runs
/// the tool; the agent's answer shows under the start in the new session's conversation.
#[test]
fn claude_code_started_from_the_page_asks_in_the_inbox_and_answers_there() {
    scenario(
        "start::claude_code_started_from_the_page_asks_in_the_inbox_and_answers_there",
        &["claude"],
        |s| {
            use common::browser::Browser;
            signed_receiver(s, claude_setup);
            let started = Instant::now();
            // The page pairs the machine with a passkey it creates.
            let common::pairing::SpPair {
                child,
                link,
                printed,
                ..
            } = sp_pair(s);
            let mut b = Browser::launch();
            b.call(json!({"op": "webauthn"}));
            b.call(json!({"op": "goto", "url": link}));
            b.call(json!({"op": "fill", "selector": "#token", "value": LOGIN}));
            b.click("#login-form button[type=submit]");
            b.wait("#pair-check[data-check]");
            b.click("#pair-approve");
            b.wait("#pair-status[data-state=\"paired\"]");
            pairing_ends(child, &printed);
            claude_sync(s);
            let page = link.split("/pair").next().unwrap().to_string();
            b.call(json!({"op": "goto", "url": format!("{page}/")}));
            let form = "#starts .start-machine";
            b.click(&format!("{form} >> role=button[name=\"New session\"]"));
            b.call(json!({"op": "fill",
                "selector": format!("{form} >> role=textbox[name=\"Message\"]"),
                "value": "Write the marker. SP-RUN:echo started-from-phone > marker.txt"}));
            b.click(&format!("{form} >> role=button[name=\"Start\"]"));
            // Its prompt, in the inbox of the page; Allow is a touch.
            let (key, attention, needed) = wait_permission(s, "claude-code");
            assert_eq!(needed["data"]["tool"], "Bash");
            assert!(s.marker().is_none(), "nothing ran before the answer");
            let att = format!("#inbox [data-session=\"{key}\"] [data-attention=\"{attention}\"]");
            b.wait(&att);
            b.click(&format!("{att} button.allow"));
            // The agent's answer, under the start in the new session's conversation.
            let start = format!(
                "article[data-session=\"{key}\"] li.msg[data-kind=\"start\"][data-status=\"delivered\"] div.reply"
            );
            b.wait(&start);
            assert_eq!(b.text(&start), "SP-FINAL: tool result seen.");
            assert_eq!(s.marker().as_deref(), Some("started-from-phone\n"));
            s.say(&format!(
                "page start to answer shown: {:?}",
                started.elapsed()
            ));
        },
    );
}
