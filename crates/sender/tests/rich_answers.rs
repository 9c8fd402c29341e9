//! DECISIONS 30 on Claude Code (issue 27): answers beyond yes or no, with the real hooks and
//! sp-sync in a temp HOME against a real receiver on loopback. A session grant asks the
//! person once for exactly one tool and input of one session; an edited command, deny & stop
//! and a question's answers reach stdout in Claude Code 2.1.332's shapes; every misuse is
//! acked once, naming the rule, and the prompt stays open.
mod common;
use common::acks::assert_ack;
use common::env::*;
use common::fixtures::cc_attention_id;
use serde_json::{json, Value};
use std::process::Child;
use std::time::Duration;

const ALLOW: &str = r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}"#;

fn key(session: &str) -> String {
    format!("claude-code:{session}")
}

/// CC_PERMISSION with another prompt (`prompt_id`), and optionally another session or command.
fn call(prompt: &str, session: Option<&str>, command: Option<&str>) -> Value {
    let mut p = payload(CC_PERMISSION);
    p["prompt_id"] = json!(format!("c27f8a10-4e6d-4b93-8f25-{prompt:0>12}"));
    if let Some(s) = session {
        p["session_id"] = json!(s);
    }
    if let Some(c) = command {
        p["tool_input"]["command"] = json!(c);
    }
    p
}

fn question(prompt: &str) -> Value {
    let mut p = call(prompt, None, None);
    p["tool_name"] = json!("AskUserQuestion");
    p["tool_input"] = json!({"questions": [
        {"question": "Which color?", "header": "Color", "multiSelect": false,
         "options": [{"label": "Red", "description": "warm"}, {"label": "Blue", "description": "cool"}]},
        {"question": "Which sizes?", "header": "Sizes", "multiSelect": true,
         "options": [{"label": "S", "description": "small"}, {"label": "L", "description": "large"}]}
    ]});
    p.as_object_mut().unwrap().remove("permission_suggestions");
    p
}

fn env() -> Env {
    let mut env = Env::with(Default::default(), json!({"permission_wait_s": 20}));
    env.start_sync();
    env
}

fn wait_needed(env: &Env, id: &str) -> Value {
    env.wait_event(
        "attention.needed",
        json!({"attention_id": id}),
        Duration::from_secs(15),
    )
    .unwrap_or_else(|| panic!("attention.needed for {id} reaches the receiver"))
}

fn ack_of(env: &Env, id: &str) -> Value {
    env.receiver
        .wait_ack(id, Duration::from_secs(20))
        .unwrap_or_else(|| panic!("no ack for {id}"))
}

/// Sends an answer for the prompt `p` and returns its id.
fn answer(env: &Env, p: &Value, fields: Value) -> String {
    let mut m = json!({"kind": "permission.answer", "for": cc_attention_id(p)});
    m.as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    let sent = env
        .receiver
        .enqueue(&key(p["session_id"].as_str().unwrap()), m);
    sent["id"].as_str().unwrap().to_string()
}

/// The hook's decision object, from its one line of stdout.
fn decision(hook: Child) -> Value {
    let out = finish(hook, Duration::from_secs(25));
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(
        text.ends_with('\n') && text.lines().count() == 1,
        "{text:?}"
    );
    let v: Value = serde_json::from_str(text.trim_end()).unwrap();
    // Every answer is exactly the shape our schema (and Claude Code 2.1.332's) takes.
    common::schema::assert_valid("claude-code-permission-request-output.json", &v);
    v["hookSpecificOutput"]["decision"].clone()
}

fn attentions(env: &Env, session: &str) -> i64 {
    env.query::<i64>(&format!(
        "select count(*) from attention where session_key='{}'",
        key(session)
    ))[0]
}

/// Asks `p` and answers it with `fields`; returns the decision printed.
fn ask_and_answer(env: &Env, p: &Value, fields: Value) -> (Value, String) {
    let hook = env.spawn_hook("sp-permission", p);
    wait_needed(env, &cc_attention_id(p));
    let id = answer(env, p, fields);
    let d = decision(hook);
    let ack = ack_of(env, &id);
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    (d, id)
}

/// Asks the first call of [`CC_SESSION`] and allows it for the session (a grant is kept).
fn allow_first_call_for_the_session(env: &Env) -> (Value, String) {
    let first = call("1", None, None);
    ask_and_answer(
        env,
        &first,
        json!({"decision": "allow", "scope": "session"}),
    )
}

/// One final outcome for each message: stored once, and every ack the receiver took for it
/// (a redelivery is acked again, DECISIONS 8) says that outcome.
fn each_acked_once(env: &Env, ids: &[impl AsRef<str>]) {
    for id in ids {
        acked_once(env, id.as_ref());
    }
}

fn acked_once(env: &Env, id: &str) {
    let stored = env.query::<String>(&format!(
        "select outcome from messages where id='{id}' and state='done'"
    ));
    assert_eq!(stored.len(), 1, "{id}: {stored:?}");
    let acks = env.acks_for(id);
    assert!(
        !acks.is_empty() && acks.iter().all(|a| a["outcome"] == stored[0].as_str()),
        "{id}: {acks:?}"
    );
}

fn grants(env: &Env) -> Vec<Value> {
    let out = run_with_stdin(
        {
            let mut c = env.cmd("sp");
            c.args(["grants", "--json"]);
            c
        },
        b"",
    );
    assert_succeeded(&out);
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_session_grant_asks_once_for_exactly_that_call_of_that_session() {
    let env = env();
    let (d, first_id) = allow_first_call_for_the_session(&env);
    // Claude Code's offered session rule (a whole folder) is not handed over: the page never
    // showed it, and the grant answers the identical call again.
    assert_eq!(d, json!({"behavior": "allow"}));
    assert_eq!(attentions(&env, CC_SESSION), 1);
    let ack = ack_of(&env, &first_id);
    assert!(
        ack["detail"].as_str().unwrap().contains("for the session"),
        "{ack}"
    );

    // The same command in the next prompt: allowed at once, without asking.
    let second = call("2", None, None);
    let started = std::time::Instant::now();
    let out = env.hook_json("sp-permission", &second);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(stdout(&out), format!("{ALLOW}\n"));
    assert_eq!(
        attentions(&env, CC_SESSION),
        1,
        "the granted call was announced"
    );
    assert!(env.log().contains("from grant"), "{}", env.log());

    // Another command is asked again.
    let other = call("3", None, Some("rm -rf out.txt"));
    let (d, _) = ask_and_answer(&env, &other, json!({"decision": "deny"}));
    assert_eq!(d["behavior"], "deny");

    // The same command in another session is asked again.
    let elsewhere = call("4", Some("0d6e4c1a-7b2f-4e8a-9c3d-5f1a2b3c4d5e"), None);
    let (d, _) = ask_and_answer(&env, &elsewhere, json!({"decision": "deny"}));
    assert_eq!(d["behavior"], "deny");

    // `sp grants` lists the one grant; the sqlite3 view shows it too.
    let g = grants(&env);
    assert_eq!(g.len(), 1, "{g:?}");
    assert_eq!(g[0]["session"], key(CC_SESSION));
    assert_eq!(g[0]["tool"], "Bash");
    assert_eq!(g[0]["decision"], "allow");
    assert_eq!(g[0]["who"], "phone");
    assert_eq!(g[0]["used"], 1);
    assert!(g[0]["summary"]
        .as_str()
        .unwrap()
        .contains("echo hi > out.txt"));
    assert_eq!(env.query::<i64>("select count(*) from live_grants"), [1]);
    let text = env.cmd("sp").arg("grants").output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("Grant 1: allow `Bash echo hi > out.txt`"),
        "{text}"
    );
    assert!(
        text.contains("; set from phone's page, used once"),
        "{text}"
    );
    assert!(!text.contains("time(s)"), "{text}");

    // Revoked: the next identical call is asked again.
    let id = g[0]["id"].as_i64().unwrap().to_string();
    let out = env
        .cmd("sp")
        .args(["grants", "revoke", &id])
        .output()
        .unwrap();
    assert_succeeded(&out);
    assert!(grants(&env).is_empty());
    let again = env
        .cmd("sp")
        .args(["grants", "revoke", &id])
        .output()
        .unwrap();
    assert!(!again.status.success(), "a revoked grant is gone");
    let fifth = call("5", None, None);
    let (d, allow) = ask_and_answer(&env, &fifth, json!({"decision": "allow"}));
    assert_eq!(d, json!({"behavior": "allow"}));

    // Each answer acked exactly once.
    each_acked_once(&env, &[&first_id, &allow]);
}

/// A session grant is bound to the folder its prompt ran in: the same command of the same
/// session in another folder is asked again (it used to be allowed from the grant), and in
/// the grant's folder it is still answered from it.
#[test]
fn a_session_grant_does_not_match_the_same_command_in_another_folder() {
    let env = env();
    let (d, _) = allow_first_call_for_the_session(&env);
    assert_eq!(d["behavior"], "allow");
    let mut moved = call("2", None, None);
    assert_ne!(moved["cwd"], "/tmp/elsewhere");
    moved["cwd"] = json!("/tmp/elsewhere");
    let (d, _) = ask_and_answer(&env, &moved, json!({"decision": "deny"}));
    assert_eq!(d["behavior"], "deny", "asked again, and denied");
    assert_eq!(attentions(&env, CC_SESSION), 2);
    let same = call("3", None, None);
    let out = env.hook_json("sp-permission", &same);
    assert_eq!(stdout(&out), format!("{ALLOW}\n"));
    assert_eq!(grants(&env)[0]["used"], 1);
}

#[test]
fn grants_end_with_their_session() {
    let env = env();
    allow_first_call_for_the_session(&env);
    assert_eq!(grants(&env).len(), 1);
    let end = json!({"session_id": CC_SESSION, "hook_event_name": "SessionEnd",
        "cwd": "/home/dev/src/notes", "reason": "exit"});
    let out = env.hook_json("sp-event", &end);
    assert!(out.status.success() && out.stdout.is_empty());
    assert!(grants(&env).is_empty());
    assert_eq!(
        env.query::<String>("select ended_how from grants"),
        ["session_ended"]
    );
    // A resumed session asks again.
    let second = call("2", None, None);
    let (d, _) = ask_and_answer(&env, &second, json!({"decision": "deny"}));
    assert_eq!(d["behavior"], "deny");
}

#[test]
fn a_stopped_session_is_not_answered_from_its_grant() {
    let env = env();
    allow_first_call_for_the_session(&env);
    let stop = env.receiver.enqueue(
        &key(CC_SESSION),
        json!({"kind": "cancel", "note": "enough"}),
    );
    let stop = stop["id"].as_str().unwrap().to_string();
    assert!(
        until(Duration::from_secs(15), || {
            env.query::<String>(&format!("select state from messages where id='{stop}'"))
                == ["queued"]
        }),
        "the cancel is stored"
    );
    let second = call("2", None, None);
    let d = decision(env.spawn_hook("sp-permission", &second));
    assert_eq!(d["behavior"], "deny", "{d}");
    assert_eq!(d["interrupt"], true, "{d}");
    assert_eq!(ack_of(&env, &stop)["outcome"], "delivered");
    assert_eq!(grants(&env)[0]["used"], 0);
}

#[test]
fn an_edited_command_runs_as_the_person_wrote_it() {
    let env = env();
    let (d, id) = ask_and_answer(
        &env,
        &call("1", None, None),
        json!({"decision": "allow", "input": {"command": "echo hello > out.txt"}}),
    );
    // The person's input, whole: never merged with the model's (no description).
    assert_eq!(
        d,
        json!({"behavior": "allow", "updatedInput": {"command": "echo hello > out.txt"}})
    );
    let ack = ack_of(&env, &id);
    assert!(ack["detail"].as_str().unwrap().contains("input"), "{ack}");
    acked_once(&env, &id);

    // Edited for the session: the model's same call later runs as the person wrote it.
    let again = call("2", None, Some("echo bye > out.txt"));
    let (d, _) = ask_and_answer(
        &env,
        &again,
        json!({"decision": "allow", "scope": "session", "input": {"command": "echo ciao > out.txt"}}),
    );
    assert_eq!(d["updatedInput"], json!({"command": "echo ciao > out.txt"}));
    let out = env.hook_json(
        "sp-permission",
        &call("3", None, Some("echo bye > out.txt")),
    );
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(
        v["hookSpecificOutput"]["decision"],
        json!({"behavior": "allow", "updatedInput": {"command": "echo ciao > out.txt"}})
    );
}

#[test]
fn deny_and_stop_interrupts() {
    let env = env();
    let (d, _) = ask_and_answer(
        &env,
        &call("1", None, None),
        json!({"decision": "deny", "interrupt": true, "note": "Stop: wrong folder."}),
    );
    assert_eq!(
        d,
        json!({"behavior": "deny", "message": "Stop: wrong folder.", "interrupt": true})
    );
}

#[test]
fn a_question_is_answered_with_its_questions_kept() {
    let env = env();
    let q = question("1");
    let hook = env.spawn_hook("sp-permission", &q);
    wait_needed(&env, &cc_attention_id(&q));
    // Allowed without answers: failed, naming the rule; the question stays open.
    let bare = answer(&env, &q, json!({"decision": "allow"}));
    let ack = ack_of(&env, &bare);
    assert_ack(&ack, "failed", "a question needs answers");
    assert_eq!(
        env.query::<String>(&format!(
            "select state from attention where attention_id='{}'",
            cc_attention_id(&q)
        )),
        ["open"]
    );
    let answers = json!({"Which color?": "Blue", "Which sizes?": ["S", "L"]});
    let good = answer(&env, &q, json!({"decision": "allow", "answers": answers}));
    let d = decision(hook);
    assert_eq!(d["behavior"], "allow");
    assert_eq!(d["updatedInput"]["questions"], q["tool_input"]["questions"]);
    // A multi-select's labels comma-separated, as 2.1.332's AskUserQuestion input types them.
    assert_eq!(
        d["updatedInput"]["answers"],
        json!({"Which color?": "Blue", "Which sizes?": "S, L"})
    );
    assert_eq!(ack_of(&env, &good)["outcome"], "delivered");
    each_acked_once(&env, &[&bare, &good]);
}

/// `p` as another tool with another input.
fn as_tool(prompt: &str, tool: &str, input: Value) -> Value {
    let mut p = call(prompt, None, None);
    p["tool_name"] = json!(tool);
    p["tool_input"] = input;
    p.as_object_mut().unwrap().remove("permission_suggestions");
    p
}

/// DECISIONS 31: the prompt the receiver gets carries the call as the person is to see it:
/// a file edit's path and old and new text, a question's questions and options, a command
/// with its secrets redacted and marked partial (so the page offers no edit of it).
#[test]
fn the_person_sees_the_call_they_answer() {
    let env = env();
    let edit = as_tool(
        "1",
        "Edit",
        json!({"file_path": "/w/src/main.rs", "old_string": "let a = 1;\nlet b = 2;",
               "new_string": "let a = 1;\nlet b = 3;", "replace_all": false}),
    );
    let q = question("2");
    let secret = call(
        "3",
        None,
        Some("curl -H 'Authorization: Bearer abc123' x.example"),
    );
    let hooks: Vec<Child> = [&edit, &q, &secret]
        .iter()
        .map(|p| env.spawn_hook("sp-permission", p))
        .collect();
    let e = wait_needed(&env, &cc_attention_id(&edit));
    assert_eq!(e["data"]["tool"], "Edit");
    assert_eq!(e["data"]["input"], edit["tool_input"]);
    assert!(e["data"].get("input_partial").is_none(), "{e}");
    let e = wait_needed(&env, &cc_attention_id(&q));
    assert_eq!(
        e["data"]["input"]["questions"],
        q["tool_input"]["questions"]
    );
    let e = wait_needed(&env, &cc_attention_id(&secret));
    assert_eq!(
        e["data"]["input"]["command"],
        "curl -H 'Authorization: Bearer [REDACTED 6 chars]' x.example"
    );
    assert_eq!(e["data"]["input_partial"], true);
    for e in env.receiver.events() {
        common::schema::assert_valid("event.json", &e);
    }
    // Each answered, so no hook is left waiting.
    let ids: Vec<String> = [&edit, &q, &secret]
        .iter()
        .map(|p| answer(&env, p, json!({"decision": "deny"})))
        .collect();
    for h in hooks {
        assert_eq!(decision(h)["behavior"], "deny");
    }
    for id in &ids {
        assert_eq!(ack_of(&env, id)["outcome"], "delivered");
    }
    each_acked_once(&env, &ids);
}

/// A plan (Claude Code `ExitPlanMode`): Approve allows it as the model wrote it; Keep
/// planning denies with the person's note. What Claude Code cannot take for a plan (a
/// session rule, an edited plan) is acked `unsupported` naming the field, the prompt stays
/// open and nothing is printed.
#[test]
fn a_plan_is_approved_as_written_or_kept_in_planning() {
    let env = env();
    let plan_input = json!({"plan": "1. Read the code\n2. Fix the bug", "planFilePath": "/w/.claude/plans/p.md"});
    let plan = as_tool("1", "ExitPlanMode", plan_input.clone());
    let hook = env.spawn_hook("sp-permission", &plan);
    let e = wait_needed(&env, &cc_attention_id(&plan));
    assert_eq!(e["data"]["input"]["plan"], plan_input["plan"]);
    let mut refused = Vec::new();
    for (fields, field) in [
        (json!({"decision": "allow", "scope": "session"}), "scope:"),
        (
            json!({"decision": "allow", "input": {"plan": "another plan"}}),
            "input:",
        ),
    ] {
        let id = answer(&env, &plan, fields);
        let ack = ack_of(&env, &id);
        assert_eq!(ack["outcome"], "unsupported", "{ack}");
        assert!(ack["detail"].as_str().unwrap().starts_with(field), "{ack}");
        assert!(
            ack["detail"].as_str().unwrap().contains("still open"),
            "{ack}"
        );
        refused.push(id);
    }
    assert_eq!(
        env.query::<String>(&format!(
            "select state from attention where attention_id='{}'",
            cc_attention_id(&plan)
        )),
        ["open"]
    );
    let ok = answer(&env, &plan, json!({"decision": "allow"}));
    let d = decision(hook);
    assert_eq!(d, json!({"behavior": "allow", "updatedInput": plan_input}));
    assert_eq!(ack_of(&env, &ok)["outcome"], "delivered");
    refused.push(ok);

    let again = as_tool("2", "ExitPlanMode", plan_input);
    let (d, id) = ask_and_answer(
        &env,
        &again,
        json!({"decision": "deny", "note": "Keep planning: cover the tests too."}),
    );
    assert_eq!(
        d,
        json!({"behavior": "deny", "message": "Keep planning: cover the tests too."})
    );
    refused.push(id);
    // A question is answered once too: no session rule for it.
    let q = question("3");
    let hook = env.spawn_hook("sp-permission", &q);
    wait_needed(&env, &cc_attention_id(&q));
    let id = answer(
        &env,
        &q,
        json!({"decision": "allow", "scope": "session", "answers": {"Which color?": "Red", "Which sizes?": ["S"]}}),
    );
    let ack = ack_of(&env, &id);
    assert_eq!(ack["outcome"], "unsupported", "{ack}");
    assert!(
        ack["detail"].as_str().unwrap().starts_with("scope:"),
        "{ack}"
    );
    refused.push(id);
    let id = answer(&env, &q, json!({"decision": "deny"}));
    assert_eq!(decision(hook)["behavior"], "deny");
    assert_eq!(ack_of(&env, &id)["outcome"], "delivered");
    refused.push(id);
    each_acked_once(&env, &refused);
    assert!(grants(&env).is_empty(), "no grant for a plan or a question");
}

#[test]
fn each_misuse_is_acked_once_naming_the_rule_and_the_prompt_stays_open() {
    let env = env();
    let p = call("1", None, None);
    let hook = env.spawn_hook("sp-permission", &p);
    wait_needed(&env, &cc_attention_id(&p));
    let cases = [
        (
            json!({"decision": "deny", "input": {"command": "ls"}}),
            "input goes with allow only",
        ),
        (
            json!({"decision": "allow", "interrupt": true}),
            "interrupt goes with deny only",
        ),
        (
            json!({"decision": "allow", "input": "ls"}),
            "input must be an object",
        ),
        (
            json!({"decision": "allow", "answers": {"Which?": 3}}),
            "answers must map each question",
        ),
        // Checked when the call is known: this one is no question.
        (
            json!({"decision": "allow", "answers": {"Which?": "A"}}),
            "not a question",
        ),
    ];
    let mut ids = Vec::new();
    for (fields, says) in cases {
        let id = answer(&env, &p, fields);
        let ack = ack_of(&env, &id);
        assert_eq!(ack["outcome"], "failed", "{ack}");
        let detail = ack["detail"].as_str().unwrap();
        assert!(
            detail.contains(says) && detail.contains("DECISIONS 30"),
            "{ack}"
        );
        ids.push(id);
    }
    // Nothing was printed, and a plain answer still answers the prompt.
    let deny = answer(&env, &p, json!({"decision": "deny", "note": "no"}));
    assert_eq!(decision(hook), json!({"behavior": "deny", "message": "no"}));
    assert_eq!(ack_of(&env, &deny)["outcome"], "delivered");
    ids.push(deny);
    each_acked_once(&env, &ids);
}

/// Our signed vectors for DECISIONS 30's fields (in `fixtures/signed-answers/`, made here
/// from fixed keys and nonces; `SP_WRITE_VECTORS=1` writes them anew): each valid shape, and
/// each misuse refused `bad_fields` with the rule named, through the real `sp control verify`.
mod signed_vectors {
    use super::common::signing::vectors::*;
    use super::common::signing::*;
    use serde_json::{json, Value};
    use std::path::PathBuf;

    fn dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/signed-answers")
    }

    /// A vector's name, decision, further fields and expected verdict.
    type Case = (
        &'static str,
        &'static str,
        Vec<(&'static str, Value)>,
        Value,
    );

    fn vectors() -> Vec<(String, Value)> {
        let pk = Passkey::es256(1);
        let get = Ceremony::get(RP);
        let day = DayKey::new(10, &pk, IAT - HOUR, IAT + 11 * HOUR, RP, &get);
        let bad = |why: &str| json!({"ok": false, "code": "bad_fields", "why": why});
        let ok = json!({"ok": true, "via": "grant", "kind": "permission.answer"});
        let cases: Vec<Case> = vec![
            ("scope-session", "allow", vec![("scope", json!("session"))], ok.clone()),
            ("edited-input", "allow", vec![("input", json!({"command": "echo hello > out.txt"}))], ok.clone()),
            ("deny-and-stop", "deny", vec![("note", json!("wrong folder")), ("interrupt", json!(true))], ok.clone()),
            ("question-answers", "allow", vec![("answers", json!({"Which color?": "Blue", "Which sizes?": ["S", "L"]}))], ok.clone()),
            ("all-allow-fields", "allow", vec![("scope", json!("session")), ("input", json!({"command": "ls"})), ("answers", json!({"Which?": "A"}))], ok.clone()),
            ("input-on-deny", "deny", vec![("input", json!({"command": "ls"}))], bad("input goes with allow only (DECISIONS 30)")),
            ("input-not-object", "allow", vec![("input", json!("ls"))], bad("input must be an object, the tool's whole input (DECISIONS 30)")),
            ("interrupt-on-allow", "allow", vec![("interrupt", json!(true))], bad("interrupt goes with deny only (DECISIONS 30)")),
            ("interrupt-not-bool", "deny", vec![("interrupt", json!("yes"))], bad("interrupt must be true or absent (DECISIONS 30)")),
            ("answers-on-deny", "deny", vec![("answers", json!({"Which?": "A"}))], bad("answers go with allow only (DECISIONS 30)")),
            ("answers-not-labels", "allow", vec![("answers", json!({"Which?": 1}))], bad("answers must map each question to a label, or to an array of labels for a multi-select (DECISIONS 30)")),
            ("answers-empty", "allow", vec![("answers", json!({}))], bad("answers must map each question to a label, or to an array of labels for a multi-select (DECISIONS 30)")),
            ("unknown-field", "allow", vec![("updatedInput", json!({"command": "ls"}))], bad("a permission.answer does not carry \"updatedInput\"")),
            ("scope-unknown", "allow", vec![("scope", json!("forever"))], bad("scope is once or session")),
        ];
        let mut out = Vec::new();
        for (i, (name, decision, fields, expect)) in cases.into_iter().enumerate() {
            let mut all = vec![
                ("for", json!("perm-9633ea781128eacb")),
                ("decision", json!(decision)),
            ];
            all.extend(fields);
            // A fixed nonce per vector, so the files are reproducible byte for byte.
            let nonce = b64(&sha256(format!("rule-30-{i}").as_bytes())[..16]);
            let cmd = command(MACHINE, "permission.answer", SESSION, &all, &nonce, IAT);
            out.push((name.to_string(), cmd, expect));
        }
        // A rule-30 field rides only on a permission answer.
        let nonce = b64(&sha256(b"rule-30-prompt")[..16]);
        let prompt = command(
            MACHINE,
            "prompt",
            SESSION,
            &[("text", json!("hi")), ("input", json!({}))],
            &nonce,
            IAT,
        );
        out.push((
            "prompt-with-input".into(),
            prompt,
            bad("a prompt does not carry \"input\""),
        ));
        out.into_iter()
            .map(|(name, cmd, expect)| {
                let file = json!({
                    "name": format!("rule-30-{name}"),
                    "about": "Our own signed-control vector for DECISIONS 30 (crates/sender/tests/rich_answers.rs made it).",
                    "input": {"signed": day.sign(&cmd), "machine": MACHINE, "rp_id": RP,
                              "trusted": [pk.trusted()], "now": NOW},
                    "expect": expect,
                });
                (format!("rule-30-{name}.json"), file)
            })
            .collect()
    }

    #[test]
    fn signed_rule_30_vectors_come_out_as_they_expect() {
        let vectors = vectors();
        if std::env::var_os("SP_WRITE_VECTORS").is_some() {
            std::fs::create_dir_all(dir()).unwrap();
            for (file, v) in &vectors {
                let text = serde_json::to_string_pretty(v).unwrap() + "\n";
                std::fs::write(dir().join(file), text).unwrap();
            }
        }
        let mut failures = Vec::new();
        for (file, made) in &vectors {
            let path = dir().join(file);
            let stored: Value = serde_json::from_slice(
                &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
            )
            .unwrap();
            assert_eq!(&stored, made, "{file} differs from what this test makes");
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_sp"))
                .env("HOME", "/nonexistent")
                .env("SESSIONPIPE_CONFIG", "/nonexistent/config.json")
                .env("SESSIONPIPE_STATE_DIR", "/nonexistent/state")
                .args(["control", "verify"])
                .arg(&path)
                .output()
                .unwrap();
            let got: Value = serde_json::from_slice(&out.stdout).unwrap();
            if got != stored["expect"] {
                failures.push(format!("{file}: expected {}, got {got}", stored["expect"]));
            }
            let want = if stored["expect"]["ok"] == json!(true) {
                0
            } else {
                1
            };
            assert_eq!(out.status.code(), Some(want), "{file}");
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        assert_eq!(
            std::fs::read_dir(dir()).unwrap().count(),
            vectors.len(),
            "a vector file nobody makes"
        );
    }
}

/// Codex's PermissionRequest for a Bash `command` (with its `description`) in `turn` of
/// `session`.
fn codex_bash(session: &str, turn: &str, command: &str, description: &str) -> Value {
    json!({"session_id": session, "turn_id": turn, "transcript_path": null,
        "cwd": "/tmp/sp-ws", "hook_event_name": "PermissionRequest", "model": "gpt-5.1-codex",
        "permission_mode": "default", "tool_name": "Bash",
        "tool_input": {"command": command, "description": description}})
}

/// Runs Codex's `sp-permission` on `p` and waits for its prompt at the receiver; returns the
/// waiting hook and the prompt's attention id.
fn codex_asks(env: &Env, p: &Value) -> (std::process::Child, String) {
    let hook = env.spawn_hook_as("codex", "sp-permission", p);
    let needed = env
        .wait_event(
            "attention.needed",
            json!({"tool": "Bash"}),
            Duration::from_secs(15),
        )
        .expect("attention.needed");
    let id = needed["data"]["attention_id"].as_str().unwrap().to_string();
    (hook, id)
}

/// Codex 0.171's hook answers carry none of DECISIONS 30's fields (its own PermissionRequest
/// output schema refuses `updatedInput`, `updatedPermissions` and `interrupt`), so each is
/// acked `unsupported` naming it, nothing is printed and the prompt stays open for a plain
/// answer.
#[test]
fn codex_hooks_ack_each_field_unsupported_and_the_prompt_stays_open() {
    let env = env();
    let away = env.cmd("sp").args(["away", "on"]).output().unwrap();
    assert!(away.status.success());
    let session = "019a7e3c-5b2d-7f10-9c4e-2a6b8d0f1e3c";
    let p = codex_bash(
        session,
        "019a7e3c-turn-0001",
        "git push origin main",
        "Push",
    );
    let (hook, id) = codex_asks(&env, &p);
    let key = format!("codex:{session}");
    for (fields, named) in [
        (
            json!({"decision": "allow", "input": {"command": "git status"}}),
            "input:",
        ),
        (json!({"decision": "deny", "interrupt": true}), "interrupt:"),
    ] {
        let mut m = json!({"kind": "permission.answer", "for": id});
        m.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        let sent = env.receiver.enqueue(&key, m);
        let sent = sent["id"].as_str().unwrap();
        let ack = ack_of(&env, sent);
        assert_eq!(ack["outcome"], "unsupported", "{ack}");
        assert!(ack["detail"].as_str().unwrap().starts_with(named), "{ack}");
        acked_once(&env, sent);
    }
    let deny = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": id, "decision": "deny", "note": "not now"}),
    );
    assert_eq!(
        decision(hook),
        json!({"behavior": "deny", "message": "not now"})
    );
    assert_eq!(
        ack_of(&env, deny["id"].as_str().unwrap())["outcome"],
        "delivered"
    );
    assert!(grants(&env).is_empty());
}

/// Codex's plain hook keeps `scope: "session"` as our grant (its answer itself carries only
/// `behavior`): asked once, the same command of the same session later (another turn, another
/// `description`) is allowed from the grant at once, unannounced; another command is asked.
#[test]
fn codex_hook_session_grant_asks_once_for_that_command() {
    // Away whatever the receiver says, so each hook waits for a remote answer.
    let mut env = Env::with(
        Default::default(),
        json!({"away": "always", "permission_wait_s": 20}),
    );
    env.start_sync();
    let session = "019a7e3c-5b2d-7f10-9c4e-2a6b8d0f1e4d";
    let key = format!("codex:{session}");
    let p = |turn, command, description| codex_bash(session, turn, command, description);
    let (hook, id) = codex_asks(&env, &p("turn-1", "cargo test", "Test"));
    let sent = env.receiver.enqueue(
        &key,
        json!({"kind": "permission.answer", "for": id, "decision": "allow", "scope": "session"}),
    );
    assert_eq!(decision(hook), json!({"behavior": "allow"}));
    let ack = ack_of(&env, sent["id"].as_str().unwrap());
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    assert!(
        ack["detail"].as_str().unwrap().contains("for the session"),
        "{ack}"
    );
    let before = env.query::<i64>(&format!(
        "select count(*) from attention where session_key='{key}'"
    ))[0];
    // The same command in a later turn, with another justification: from the grant.
    let again = env.spawn_hook_as(
        "codex",
        "sp-permission",
        &p("turn-2", "cargo test", "Run the tests again"),
    );
    assert_eq!(decision(again), json!({"behavior": "allow"}));
    let after = env.query::<i64>(&format!(
        "select count(*) from attention where session_key='{key}'"
    ))[0];
    assert_eq!(after, before, "the granted call opened no attention");
    let g = grants(&env);
    assert_eq!(g.len(), 1, "{g:?}");
    assert_eq!(g[0]["used"], 1, "{g:?}");
    // Another command is asked as usual.
    let mut other = env.spawn_hook_as(
        "codex",
        "sp-permission",
        &p("turn-2", "cargo clean", "Clean"),
    );
    assert!(
        until(Duration::from_secs(15), || env.query::<i64>(&format!(
            "select count(*) from attention where session_key='{key}' and state='open'"
        ))[0]
            == 1),
        "the other command is asked: {:?}\n{}",
        env.query::<String>(&format!(
            "select attention_id || ' ' || state || ' ' || coalesce(message, '') from attention where session_key='{key}'"
        )),
        env.log()
    );
    other.kill().unwrap();
    other.wait().unwrap();
}

/// Why Codex keeps those fields `unsupported`: its own PermissionRequest output schema, read
/// from the pinned 0.171 binary (as harnesses.rs does), reserves `updatedInput`,
/// `updatedPermissions` and `interrupt: true`, and says its hooks fail closed on each.
#[test]
fn codex_0_171_permission_output_has_no_rule_30_fields() {
    let scope =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../e2e/node_modules/@openai");
    let bin = std::fs::read_dir(&scope)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|p| p.file_name().to_string_lossy().starts_with("codex-"))
        .flat_map(|p| {
            std::fs::read_dir(p.path().join("vendor"))
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|t| t.path().join("bin/codex"))
        .find(|b| b.is_file());
    if !common::needs::needs(
        "the pinned Codex CLI 0.171.0 in e2e/node_modules (scripts/e2e-deps.sh)",
        bin.is_some(),
    ) {
        return;
    }
    let bytes = std::fs::read(bin.unwrap()).unwrap();
    let start = b"{\n  \"$schema\": \"http://json-schema.org/draft-07/schema#\"";
    let schema = memchr::memmem::find_iter(&bytes, start)
        .filter_map(|at| {
            serde_json::Deserializer::from_slice(&bytes[at..])
                .into_iter::<Value>()
                .next()?
                .ok()
        })
        .find(|s| s["title"] == "permission-request.command.output")
        .expect("Codex carries its permission-request.command.output schema");
    let decision = &schema["definitions"]["PermissionRequestDecisionWire"]["properties"];
    for field in ["updatedInput", "updatedPermissions", "interrupt"] {
        let about = decision[field]["description"].as_str().unwrap_or_default();
        assert!(
            about.contains("Reserved") && about.contains("fail closed"),
            "Codex 0.171 now takes {field}: {about:?}; honour it in caps.rs"
        );
    }
    let v = jsonschema::validator_for(&schema).unwrap();
    let out = |d: Value| json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": d}});
    assert!(v.is_valid(&out(json!({"behavior": "allow"}))));
    assert!(v.is_valid(&out(json!({"behavior": "deny", "message": "no"}))));
    assert!(!v.is_valid(&out(json!({"behavior": "allow", "answers": {}}))));
}
