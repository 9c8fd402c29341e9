//! DECISIONS 37 on the page (issue 35), with the real `sp-receiver` binary, real hooks and
//! sp-sync in a temp HOME and headless Chromium: a prompt whose call was masked says "parts
//! hidden" on its face, is never grouped with its twin (two machines' identical-looking masked
//! prompts stay two), and offers no Allow for this session; two calls with the same exact
//! input are one group, by the machine's hash of that input.
//!
//! Needs chromium, Node.js and playwright-core (`scripts/test-deps.sh`); without them the
//! browser test fails, never passes silently.
mod common;

use common::browser::{missing_browser_deps, Browser};
use common::env::*;
use common::fixtures::cc_attention_id;
use common::receiver::{Machine, SpReceiver, LOGIN};
use serde_json::{json, Value};
use std::time::Duration;

fn ask(session: &str, n: u32, command: &str) -> Value {
    let mut p = payload(CC_PERMISSION);
    p["session_id"] = json!(session);
    p["prompt_id"] = json!(format!("c27f8a10-4e6d-4b93-8f25-{n:0>12}"));
    p["tool_input"]["command"] = json!(command);
    p
}

fn eval(b: &mut Browser, script: &str) -> Value {
    b.call(json!({"op": "eval", "script": script}))["value"].clone()
}

#[test]
fn a_masked_prompt_says_parts_hidden_and_is_never_grouped_or_allowed_for_the_session() {
    if let Some(why) = missing_browser_deps() {
        panic!("the browser test cannot run: {why}");
    }
    let dir = tempfile::tempdir().unwrap();
    let receiver = SpReceiver::start(&dir.path().join("receiver"), &[]);
    let machine = Machine::syncing_to(dir.path(), &receiver);
    let mut b = Browser::launch();
    b.call(json!({"op": "goto", "url": format!("{}/", receiver.url)}));
    b.call(json!({"op": "fill", "selector": "#token", "value": LOGIN}));
    b.click("#login-form button[type=submit]");
    b.wait("#conn[data-state=\"live\"]");

    // Two sessions each ask a masked call (the same text on the page) and a plain one.
    let masked = "mysql -u root -pMyPw-7781 app";
    let plain = "echo same > out.txt";
    let asks: Vec<Value> = (0..2)
        .flat_map(|i| {
            let s = format!("9a1b2c3d-0000-4000-8000-00000000000{i}");
            [ask(&s, 10 + i, masked), ask(&s, 20 + i, plain)]
        })
        .collect();
    let hooks: Vec<_> = asks
        .iter()
        .map(|p| machine.spawn_hook("sp-permission", p))
        .collect();
    for p in &asks {
        b.call(json!({"op": "wait", "selector": format!("[data-attention=\"{}\"]", cc_attention_id(p)), "state": "attached", "timeout": 60000}));
    }
    // The plain twins are one group of 2 (their exact inputs' hashes match); the masked
    // twins, which look the same on the page, are no group.
    b.call(json!({"op": "wait", "selector": "#inbox-list > .inbox-group[data-count=\"2\"]", "timeout": 30000}));
    assert_eq!(
        eval(
            &mut b,
            "document.querySelectorAll('#inbox-list > .inbox-group').length"
        ),
        json!(1)
    );
    let head = b.text("#inbox-list > .inbox-group .group-head");
    assert!(head.contains(plain), "{head}");
    for p in &asks {
        let id = cc_attention_id(p);
        let is_masked = p["tool_input"]["command"] == masked;
        let state = eval(
            &mut b,
            &format!(
                "(() => {{ const el = document.querySelector('[data-attention=\"{id}\"]'); \
                 return {{hidden: el.querySelector('.att-hidden').hidden, \
                 mark: el.querySelector('.att-hidden').textContent, \
                 session: el.querySelector('.allow-session').hidden, \
                 grouped: !!el.closest('.inbox-group'), \
                 text: el.querySelector('.att-msg').textContent}}; }})()"
            ),
        );
        assert_eq!(state["hidden"], json!(!is_masked), "{id}: {state}");
        assert_eq!(state["grouped"], json!(!is_masked), "{id}: {state}");
        if is_masked {
            assert_eq!(state["mark"], "parts hidden");
            assert_eq!(
                state["session"],
                json!(true),
                "no Allow for this session: {state}"
            );
            assert!(
                !state["text"].as_str().unwrap().contains("MyPw-7781"),
                "{state}"
            );
        }
    }
    // Deny each on the page (the group with Deny all) so no hook is left waiting.
    for p in asks.iter().filter(|p| p["tool_input"]["command"] == masked) {
        let id = cc_attention_id(p);
        b.click(&format!("[data-attention=\"{id}\"] button.deny"));
    }
    b.click("#inbox-list > .inbox-group button.deny-all");
    for h in hooks {
        let out = finish(h, Duration::from_secs(60));
        assert!(stdout(&out).contains("\"deny\""), "{}", stdout(&out));
    }
}
