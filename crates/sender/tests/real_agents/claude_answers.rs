//! Issue 27 with the real Claude Code 2.1.332, offline: answers beyond yes or no
//! (DECISIONS 30, 31) and rule 25's interrupt while a tool runs. Each answer goes through the
//! receiver, sp-sync and our waiting hook, and is acked `delivered` (or `unsupported`).
use super::*;

/// The person's answer to the waiting prompt, acked `delivered`.
fn answer_delivered(s: &Scene, key: &str, attention: &str, fields: Value) {
    let mut m = json!({"kind": "permission.answer", "for": attention});
    m.as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    let m = s.enqueue(key, m);
    let ack = s.ack(&m, Duration::from_secs(30));
    assert_eq!(ack["outcome"], "delivered", "{ack}");
}

/// The content of the last tool result the agent sent the model, as text.
fn last_tool_result(s: &Scene) -> String {
    let reqs = s.agent_requests();
    let msgs = reqs.last().expect("an agent request")["body"]["messages"].clone();
    msgs.as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .rfind(|p| p["type"] == "tool_result")
        .map(|p| all_text(&p["content"]))
        .unwrap_or_default()
}

fn prompts_shown(s: &Scene) -> usize {
    s.receiver
        .events()
        .iter()
        .filter(|e| e["type"] == "attention.needed")
        .count()
}

/// Allow for this session: the model calls the same command twice in one turn; the person
/// is asked once, and both calls run (the second from the machine's grant).
#[test]
fn claude_code_session_grant_asks_once_and_both_calls_run() {
    scenario(
        "claude_answers::claude_code_session_grant_asks_once_and_both_calls_run",
        &["claude"],
        |s| {
            claude_setup(s, 60);
            let child = claude(s, "Run it twice. SP-CALLS:2 SP-RUN:echo ran >> marker.txt");
            let (key, attention, needed) = wait_permission(s, "claude-code");
            // DECISIONS 31: the person sees the call itself.
            assert_eq!(needed["data"]["input"]["command"], "echo ran >> marker.txt");
            let run = answer_and_finish(
                s,
                "claude-code",
                child,
                &key,
                &attention,
                json!({"decision": "allow", "scope": "session"}),
            );
            assert_eq!(s.marker().as_deref(), Some("ran\nran\n"), "both calls ran");
            assert_eq!(prompts_shown(s), 1, "the person was asked once");
            let result = claude_result(&run);
            assert_eq!(
                result["permission_denials"].as_array().map(Vec::len),
                Some(0),
                "{result}"
            );
            assert_eq!(
                s.agent_requests().len(),
                3,
                "two calls and the final answer"
            );
            // The second call was answered from the machine's grant (2.1.332 asked again
            // despite the session rule it was given, docs/harness-contracts.md#measured).
            // The grant ended with the session when `claude -p` exited.
            let grants: Vec<(String, i64, Option<String>)> = s
                .db()
                .prepare("select tool, used, ended_how from grants")
                .unwrap()
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(
                grants,
                [("Bash".to_string(), 1, Some("session_ended".to_string()))]
            );
        },
    );
}

/// Edit & allow: the person's command runs, with the call's other fields as the page sends
/// them (the input the prompt showed, edited); the model's command never runs.
#[test]
fn claude_code_edited_command_runs_instead_of_the_models() {
    scenario(
        "claude_answers::claude_code_edited_command_runs_instead_of_the_models",
        &["claude"],
        |s| {
            claude_setup(s, 60);
            let child = claude(
                s,
                "Write the marker. SP-RUN:echo from-the-model > marker.txt",
            );
            let (key, attention, needed) = wait_permission(s, "claude-code");
            let mut input = needed["data"]["input"].clone();
            assert_eq!(input["command"], "echo from-the-model > marker.txt");
            assert!(needed["data"].get("input_partial").is_none(), "{needed}");
            input["command"] = json!("echo from-the-person > marker.txt");
            answer_and_finish(
                s,
                "claude-code",
                child,
                &key,
                &attention,
                json!({"decision": "allow", "input": input}),
            );
            assert_eq!(s.marker().as_deref(), Some("from-the-person\n"));
            let seen = tool_result_text(s);
            assert!(!seen.contains("from-the-model\n"), "{seen}");
        },
    );
}

/// Deny & stop: the tool does not run and the model is not called again.
#[test]
fn claude_code_deny_and_stop_ends_the_turn() {
    scenario(
        "claude_answers::claude_code_deny_and_stop_ends_the_turn",
        &["claude"],
        |s| {
            claude_setup(s, 60);
            let child = claude(
                s,
                "Write the marker. SP-RUN:echo should-not-run > marker.txt",
            );
            let (key, attention, _) = wait_permission(s, "claude-code");
            answer_delivered(
                s,
                &key,
                &attention,
                json!({"decision": "deny", "interrupt": true, "note": "Stop: use the staging copy instead."}),
            );
            let run = finish_logged(s, child, "claude", CLI_LIMIT);
            s.say(&format!("claude exited {}", run.status));
            assert_eq!(cleared(s, &attention)["data"]["how"], "answered");
            assert_eq!(s.marker(), None, "the tool never ran");
            assert_eq!(
                s.agent_requests().len(),
                1,
                "the model was not called again"
            );
        },
    );
}

/// A question in the TUI (`AskUserQuestion` raises a PermissionRequest there), answered from
/// the receiver: the model's tool result carries the chosen label. An answer Claude Code
/// cannot take for a question (a session rule) is acked `unsupported` naming `scope` first,
/// and the question stays open.
#[test]
fn claude_code_question_in_the_tui_is_answered_from_the_receiver() {
    scenario(
        "claude_answers::claude_code_question_in_the_tui_is_answered_from_the_receiver",
        &["claude"],
        |s| {
            claude_setup(s, 60);
            let _tui = claude_tui(s, "Ask me. SP-ASK:Which color?|Red|Blue");
            let needed = s.wait_event(
                "attention.needed",
                |e| e["data"]["tool"] == "AskUserQuestion",
                Duration::from_secs(60),
            );
            s.say(&format!("attention.needed: {}", needed["data"]));
            let key = session_key_of(&needed);
            let attention = needed["data"]["attention_id"].as_str().unwrap().to_string();
            let q = &needed["data"]["input"]["questions"][0];
            assert_eq!(q["question"], "Which color?");
            assert_eq!(q["options"][1]["label"], "Blue");

            let refused = s.enqueue(
                &key,
                json!({"kind": "permission.answer", "for": attention, "decision": "allow",
                       "scope": "session", "answers": {"Which color?": "Red"}}),
            );
            let ack = s.ack(&refused, Duration::from_secs(30));
            assert_eq!(ack["outcome"], "unsupported", "{ack}");
            assert!(
                ack["detail"].as_str().unwrap().starts_with("scope:"),
                "{ack}"
            );
            assert!(
                !s.receiver
                    .events()
                    .iter()
                    .any(|e| e["type"] == "attention.cleared"),
                "the question is still open"
            );
            assert_eq!(s.agent_requests().len(), 1, "nothing ran");

            answer_delivered(
                s,
                &key,
                &attention,
                json!({"decision": "allow", "answers": {"Which color?": "Blue"}}),
            );
            assert!(
                until(Duration::from_secs(60), || s.agent_requests().len() >= 2),
                "the model was called with the answer"
            );
            let seen = tool_result_text(s);
            assert!(
                seen.contains("Which color?") && seen.contains("Blue"),
                "the tool result carries the chosen label:\n{seen}"
            );
            assert!(!seen.contains("=\"Red\""), "{seen}");
            assert_eq!(cleared(s, &attention)["data"]["how"], "answered");
        },
    );
}

/// Rule 25's interrupt while a tool runs: the model asked for two calls at once; the
/// interrupt arrives during the first, so the second never runs and the model reads the
/// message in the very next request.
#[test]
fn claude_code_interrupt_during_a_running_tool_keeps_the_next_from_running() {
    scenario(
        "claude_answers::claude_code_interrupt_during_a_running_tool_keeps_the_next_from_running",
        &["claude"],
        |s| {
            claude_setup(s, 60);
            let go = s.dir.join("go");
            let first = format!(
                "echo step-1 >> steps.txt; while [ ! -e {} ]; do sleep 0.1; done",
                go.display()
            );
            let child = claude_with(
                s,
                &format!("Two steps. SP-PAIR:{first} SP-AND:echo step-2 >> steps.txt"),
                &["--allowedTools", "Bash"],
            );
            let started = s.wait_event(
                "session.started",
                |e| e["harness"]["name"] == "claude-code",
                Duration::from_secs(60),
            );
            let key = session_key_of(&started);
            assert!(
                until(Duration::from_secs(60), || s.steps() == ["step-1"]),
                "the first call runs: steps {:?}",
                s.steps()
            );
            let m = queue_stored(
                s,
                &key,
                json!({"kind": "prompt", "mode": "interrupt", "expires_in_s": 300,
                       "text": "Not the second step. SP-INTERRUPT:BASALT"}),
            );
            std::fs::write(&go, "").unwrap();
            finish_ok(s, child, "claude");
            let ack = s.ack(&m, Duration::from_secs(30));
            assert_eq!(ack["outcome"], "delivered", "{ack}");
            assert!(
                ack["detail"].as_str().unwrap_or("").contains("PreToolUse"),
                "{ack}"
            );
            assert_eq!(s.steps(), ["step-1"], "the pending call never ran");
            assert_eq!(
                first_request_with(s, "SP-INTERRUPT:BASALT"),
                Some(1),
                "the model read it in the request right after the two calls"
            );
        },
    );
}

/// A plan in the TUI (`ExitPlanMode` in plan mode) answered from the receiver with
/// `fields`: the plan's text reached the receiver, the answer is acked `delivered`, and the
/// tool result the model reads next is returned.
fn plan_answered(s: &Scene, fields: Value) -> String {
    claude_setup(s, 60);
    let tui = claude_tui_in(
        s,
        "Plan it. SP-PLAN:Read the code, then fix the bug.",
        "plan",
    );
    let needed = s.wait_event(
        "attention.needed",
        |e| e["data"]["tool"] == "ExitPlanMode",
        Duration::from_secs(60),
    );
    s.say(&format!("attention.needed: {}", needed["data"]));
    // 2.1.332 hands hooks the plan it read from its plan file (the model's input is empty),
    // with the file's path.
    assert_eq!(
        needed["data"]["input"]["plan"],
        "Read the code, then fix the bug.\n"
    );
    let key = session_key_of(&needed);
    let attention = needed["data"]["attention_id"].as_str().unwrap().to_string();
    answer_delivered(s, &key, &attention, fields);
    // Its requests: the plan's Write, the ExitPlanMode call, then the one after it.
    assert!(
        until(Duration::from_secs(60), || s.agent_requests().len() >= 3),
        "the model was called after the plan: screen\n{}",
        tui.screen()
    );
    assert_eq!(cleared(s, &attention)["data"]["how"], "answered");
    let seen = last_tool_result(s);
    s.say(&format!("tool result: {seen}"));
    seen
}

/// Approve: the model reads Claude Code's own approval of the plan.
#[test]
fn claude_code_plan_in_the_tui_is_approved_from_the_receiver() {
    scenario(
        "claude_answers::claude_code_plan_in_the_tui_is_approved_from_the_receiver",
        &["claude"],
        |s| {
            let seen = plan_answered(s, json!({"decision": "allow"}));
            assert!(
                seen.starts_with("User has approved your plan."),
                "the model read the approval:\n{seen}"
            );
        },
    );
}

/// Keep planning: a deny whose note the model reads; the plan is not approved.
#[test]
fn claude_code_plan_kept_in_planning_from_the_tui() {
    scenario(
        "claude_answers::claude_code_plan_kept_in_planning_from_the_tui",
        &["claude"],
        |s| {
            let note = "Keep planning: cover the tests too. SP-NOTE-PLAN";
            let seen = plan_answered(s, json!({"decision": "deny", "note": note}));
            assert!(seen.contains(note), "the model read the note:\n{seen}");
            assert!(!seen.contains("approved your plan"), "{seen}");
        },
    );
}
