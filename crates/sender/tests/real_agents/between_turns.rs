//! Issue 38 with the real Claude Code 2.1.332, offline: a prompt for a session no turn is
//! running in is delivered by a headless run sp-sync launches (DECISIONS 38 `resume`,
//! `fork`), acked `taken`, then once `delivered` with its mode and the model's answer.
use super::*;

/// Every ack entry the receiver got for message `m`, in arrival order: its outcomes.
fn outcomes(s: &Scene, m: &Value) -> Vec<String> {
    s.receiver
        .acks()
        .iter()
        .filter(|a| a["id"] == m["id"])
        .map(|a| a["outcome"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Waits for the final ack of `m` and checks rule 38's sequence: `taken` first, exactly one
/// final ack. Returns the final ack.
pub(super) fn one_final_ack(s: &Scene, m: &Value, limit: Duration) -> Value {
    let ack = s.ack(m, limit);
    let seen = outcomes(s, m);
    assert_eq!(seen.first().map(String::as_str), Some("taken"), "{seen:?}");
    let finals = seen
        .iter()
        .filter(|o| !matches!(o.as_str(), "taken" | "progress"))
        .count();
    assert_eq!(finals, 1, "exactly one final ack: {seen:?}");
    ack
}

/// The session id in a `claude -p` run's result line.
fn session_of(run: &Run) -> String {
    claude_result(run)["session_id"]
        .as_str()
        .expect("a session_id in the result")
        .to_string()
}

/// The model's requests the stand-in answered `SP-SAW:<word>`: those whose newest input
/// carried `SP-ECHO:<word>` (Claude Code may add a system note after it).
fn requests_asking(s: &Scene, word: &str) -> Vec<Value> {
    let saw = format!("SP-SAW:{word}");
    s.agent_requests()
        .into_iter()
        .filter(|r| r["answer"][1] == saw.as_str())
        .collect()
}

/// The run sp-sync recorded for message `id`: (kind, state, session the run reported).
fn run_of(s: &Scene, id: &str) -> (String, String, Option<String>) {
    s.db()
        .query_row(
            "SELECT kind, state, session FROM runs WHERE message_id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .expect("a run for the prompt")
}

/// Whether Claude Code's transcript of session `id` (under ~/.claude/projects) holds `text`.
fn transcript_has(s: &Scene, id: &str, text: &str) -> bool {
    let Ok(dirs) = std::fs::read_dir(s.home.join(".claude/projects")) else {
        return false;
    };
    dirs.flatten().any(|d| {
        std::fs::read_to_string(d.path().join(format!("{id}.jsonl")))
            .is_ok_and(|t| t.contains(text))
    })
}

/// Queues `text` (ending `SP-ECHO:<word>`) for session `key` and waits for its one final ack:
/// `delivered` in `mode` with the model's answer `SP-SAW:<word>`. Returns the ack, and all
/// the text of the model request that answered (its `messages`, or Codex's `input`).
fn delivered_by_run(s: &Scene, key: &str, text: &str, word: &str, mode: &str) -> (Value, String) {
    let m = s.enqueue(
        key,
        json!({"kind": "prompt", "text": format!("{text} SP-ECHO:{word}"), "expires_in_s": 300}),
    );
    let ack = one_final_ack(s, &m, Duration::from_secs(90));
    assert_eq!(ack["outcome"], "delivered", "{ack}");
    assert_eq!(ack["mode"], mode, "{ack}");
    assert_eq!(ack["reply"], format!("SP-SAW:{word}"), "{ack}");
    let asked = requests_asking(s, word);
    let body = &asked.last().expect("the model got the prompt")["body"];
    let all = all_text(if body["messages"].is_null() {
        &body["input"]
    } else {
        &body["messages"]
    });
    (ack, all)
}

#[test]
fn claude_code_prompt_to_an_ended_run_resumes_it_with_its_history() {
    scenario(
        "between_turns::claude_code_prompt_to_an_ended_run_resumes_it_with_its_history",
        &["claude"],
        |s| {
            claude_setup(s, 60);
            let first = finish_ok(s, claude(s, "Remember this. SP-ECHO:PAPAYA"), "claude");
            assert_eq!(claude_result(&first)["result"], "SP-SAW:PAPAYA");
            let key = format!("claude-code:{}", session_of(&first));
            let queued = Instant::now();
            let (ack, all) = delivered_by_run(s, &key, "And now this.", "QUINCE", "resume");
            s.say(&format!("final ack after {:?}: {ack}", queued.elapsed()));
            // The model got the session's history with the new text: a resume.
            assert!(
                all.contains("SP-ECHO:PAPAYA"),
                "the history came along:\n{all}"
            );
            assert!(all.contains("SP-SAW:PAPAYA"), "the answer too:\n{all}");
            let (kind, state, _) = run_of(s, ack["id"].as_str().unwrap());
            assert_eq!((kind.as_str(), state.as_str()), ("resume", "done"));
            // `sp runs` shows it, and its log holds the harness's output.
            let mut sp = Command::new(s.bin.join("sp"));
            s.base_env(&mut sp);
            let out = sp.arg("runs").output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("claude-code resume of"), "{text}");
            let run: String = s
                .db()
                .query_row(
                    "SELECT id FROM runs WHERE message_id = ?1",
                    [ack["id"].as_str().unwrap()],
                    |r| r.get(0),
                )
                .unwrap();
            let mut sp = Command::new(s.bin.join("sp"));
            s.base_env(&mut sp);
            let out = sp.args(["runs", "log", &run]).output().unwrap();
            let log = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{log}");
            assert!(
                log.contains("== stdout") && log.contains("SP-SAW:QUINCE"),
                "{log}"
            );
        },
    );
}

#[test]
fn claude_code_sigkilled_session_is_resumed() {
    scenario(
        "between_turns::claude_code_sigkilled_session_is_resumed",
        &["claude"],
        |s| {
            claude_setup(s, 60);
            let go = s.dir.join("never");
            let mut child = claude(s, &format!("Wait here. SP-HOLD:{}", go.display()));
            let started = s.wait_event(
                "session.started",
                |e| e["harness"]["name"] == "claude-code",
                Duration::from_secs(60),
            );
            let key = session_key_of(&started);
            // Its turn is open (UserPromptSubmit came) and its process holds the session.
            let pid = child.id() as i64;
            assert!(
                until(Duration::from_secs(30), || {
                    s.db()
                        .query_row(
                            "SELECT harness_pid, turn_open FROM sessions WHERE key = ?1",
                            [&key],
                            |r| Ok((r.get::<_, Option<i64>>(0)?, r.get::<_, i64>(1)?)),
                        )
                        .is_ok_and(|row| row == (Some(pid), 1))
                }),
                "the hooks recorded claude's process and its open turn"
            );
            // Its transcript holds the prompt (a resume needs one to resume).
            let id = key.trim_start_matches("claude-code:").to_string();
            assert!(
                until(Duration::from_secs(30), || transcript_has(
                    s,
                    &id,
                    "Wait here."
                )),
                "claude wrote its transcript"
            );
            // SIGKILL: no Stop, no SessionEnd; only the process says it is gone.
            child.kill().unwrap();
            child.wait().unwrap();
            let (_, all) = delivered_by_run(s, &key, "Are you back?", "RESUMED", "resume");
            assert!(all.contains("Wait here."), "the history came along:\n{all}");
        },
    );
}

/// The pid of the sp-sync that last started, from our log (`sp-sync[PID] start (…)`).
pub(super) fn sync_pid(s: &Scene) -> i32 {
    let log =
        std::fs::read_to_string(s.home.join(".local/state/sessionpipe/sp.log")).unwrap_or_default();
    log.lines()
        .rev()
        .find_map(|l| {
            let (_, rest) = l.split_once(" sp-sync[")?;
            let (pid, rest) = rest.split_once(']')?;
            rest.starts_with(" start (").then(|| pid.parse().ok())?
        })
        .expect("sp-sync logged its start")
}

/// SIGKILLs the scenario's sp-sync (`when` says when, in the log) and waits until it is gone;
/// its pid.
pub(super) fn sigkill_sync(s: &Scene, when: &str) -> i32 {
    let pid = sync_pid(s);
    s.say(&format!("SIGKILL sp-sync (pid {pid}) {when}"));
    // SAFETY: a signal to the sp-sync of this scenario's own pid namespace.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    assert!(
        until(Duration::from_secs(10), || unsafe { libc::kill(pid, 0) }
            != 0),
        "sp-sync is gone"
    );
    pid
}

/// Starts another sp-sync, as the next hook would.
pub(super) fn start_second_sync(s: &mut Scene) {
    let mut sync = Command::new(s.bin.join("sp-sync"));
    s.base_env(&mut sync);
    sync.arg("--while-live");
    let child = spawn_logged(s, sync, "sp-sync-2");
    s.extra.push(child);
}

#[test]
fn claude_code_run_outlives_an_sp_sync_restart_and_is_acked_once() {
    scenario(
        "between_turns::claude_code_run_outlives_an_sp_sync_restart_and_is_acked_once",
        &["claude"],
        |s| {
            claude_setup(s, 60);
            let first = finish_ok(s, claude(s, "Remember this. SP-ECHO:FIRST"), "claude");
            let key = format!("claude-code:{}", session_of(&first));
            let go = s.dir.join("go");
            let m = s.enqueue(
                &key,
                json!({"kind": "prompt", "text": format!("Take your time. SP-HOLD:{} SP-ECHO:LATE", go.display()), "expires_in_s": 300}),
            );
            let id = m["id"].as_str().unwrap().to_string();
            // The run is under way: its model call is held.
            assert!(
                until(Duration::from_secs(60), || {
                    s.db()
                        .query_row(
                            "SELECT agent_pid IS NOT NULL FROM runs WHERE message_id = ?1",
                            [&id],
                            |r| r.get::<_, bool>(0),
                        )
                        .unwrap_or(false)
                }),
                "a run started for the prompt"
            );
            let pid = sigkill_sync(s, "mid-run");
            // The turn ends while no sp-sync runs; a new one adopts the run.
            std::fs::write(&go, "").unwrap();
            start_second_sync(s);
            let ack = one_final_ack(s, &m, Duration::from_secs(90));
            assert_eq!(ack["outcome"], "delivered", "{ack}");
            assert_eq!(ack["mode"], "resume", "{ack}");
            assert_eq!(ack["reply"], "SP-SAW:LATE", "{ack}");
            assert_eq!(requests_asking(s, "LATE").len(), 1, "the prompt ran once");
            assert_ne!(sync_pid(s), pid, "a second sp-sync finished it");
        },
    );
}

#[test]
fn claude_code_idle_tui_is_forked() {
    scenario(
        "between_turns::claude_code_idle_tui_is_forked",
        &["claude"],
        |s| {
            claude_setup(s, 60);
            let tui = claude_tui(s, "Say it. SP-ECHO:TUIFIRST");
            tui.wait_screen("SP-SAW:TUIFIRST", Duration::from_secs(60));
            let ended = s.wait_event(
                "turn.ended",
                |e| e["harness"]["name"] == "claude-code",
                Duration::from_secs(60),
            );
            let key = session_key_of(&ended);
            let id = key.trim_start_matches("claude-code:").to_string();
            // Claude Code may write the turn's last line just after its Stop hook ran.
            assert!(
                until(Duration::from_secs(10), || transcript_has(
                    s,
                    &id,
                    "SP-SAW:TUIFIRST"
                )),
                "the TUI's transcript has its answer"
            );
            let before = conversation(s, &id);
            let (ack, all) = delivered_by_run(s, &key, "From the phone.", "FORKED", "fork");
            let fork = ack["session"].as_str().expect("the fork's session id");
            assert_ne!(fork, id, "a new session");
            // The fork carried the history; the live session's transcript is untouched and
            // its terminal never saw the prompt.
            assert!(
                all.contains("SP-SAW:TUIFIRST"),
                "the history came along:\n{all}"
            );
            // (The idle TUI itself appends mode lines; the conversation is what must not move.)
            assert_eq!(
                conversation(s, &id),
                before,
                "one writer on the live transcript"
            );
            assert!(!transcript(s, &id).contains("FORKED"));
            assert!(transcript_has(s, fork, "SP-SAW:FORKED"));
            assert!(!tui.screen().contains("FORKED"), "{}", tui.screen());
            let (kind, _, session) = run_of(s, ack["id"].as_str().unwrap());
            assert_eq!((kind.as_str(), session.as_deref()), ("fork", Some(fork)));
            // The next prompt to the live session goes to the same fork, with its history.
            let (again, all) = delivered_by_run(s, &key, "Once more.", "FORKAGAIN", "fork");
            assert_eq!(again["session"], fork, "{again}");
            assert!(all.contains("SP-SAW:FORKED"), "the fork's history:\n{all}");
            assert_eq!(
                conversation(s, &id),
                before,
                "one writer on the live transcript"
            );
        },
    );
}

/// The user and assistant entries of Claude Code's transcript of session `id`.
fn conversation(s: &Scene, id: &str) -> Vec<Value> {
    transcript(s, id)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "user" || v["type"] == "assistant")
        .collect()
}

/// Claude Code's transcript of session `id`, as it is now.
fn transcript(s: &Scene, id: &str) -> String {
    std::fs::read_dir(s.home.join(".claude/projects"))
        .into_iter()
        .flatten()
        .flatten()
        .find_map(|d| std::fs::read_to_string(d.path().join(format!("{id}.jsonl"))).ok())
        .unwrap_or_default()
}

#[test]
fn codex_prompt_to_an_ended_exec_resumes_it_with_its_history() {
    scenario(
        "between_turns::codex_prompt_to_an_ended_exec_resumes_it_with_its_history",
        &["codex"],
        |s| {
            codex_setup(s, 60);
            git_init_work(s);
            let first = finish_ok(
                s,
                codex_with(s, "Remember this. SP-ECHO:MANGO", false, &["--json"]),
                "codex",
            );
            let thread = first
                .stdout
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|v| v["type"] == "thread.started")
                .and_then(|v| v["thread_id"].as_str().map(str::to_string))
                .unwrap_or_else(|| panic!("no thread.started: {}", first.stdout));
            let key = format!("codex:{thread}");
            let (_, all) = delivered_by_run(s, &key, "And now this.", "GUAVA", "resume");
            assert!(
                all.contains("SP-ECHO:MANGO"),
                "the history came along:\n{all}"
            );
            assert!(all.contains("SP-SAW:MANGO"), "the answer too:\n{all}");
        },
    );
}

/// Seconds since the epoch, as the model stand-in logs its requests (`t`).
fn epoch_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// When the model stand-in got the request it answered `SP-SAW:<word>` (epoch seconds).
fn model_got(s: &Scene, word: &str) -> f64 {
    requests_asking(s, word)
        .first()
        .and_then(|r| r["t"].as_f64())
        .unwrap_or_else(|| panic!("the model never got SP-ECHO:{word}"))
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// `claude -p --resume ID` by hand: spawn → the model's request, in seconds.
fn resume_by_hand(s: &Scene, id: &str, k: usize) -> f64 {
    let word = format!("HAND{k}");
    let t0 = epoch_s();
    finish_ok(
        s,
        claude_with(s, &format!("SP-ECHO:{word}"), &["--resume", id]),
        "claude",
    );
    model_got(s, &word) - t0
}

/// BENCHMARKS.md: queued → the model receives it, in resume mode, against `claude -p
/// --resume` run by hand on the same session (interleaved, same run); and the run's end →
/// its final ack with the reply at the receiver.
#[test]
fn claude_code_resume_latency_against_a_resume_by_hand() {
    scenario(
        "between_turns::claude_code_resume_latency_against_a_resume_by_hand",
        &["claude"],
        |s| {
            const ROUNDS: usize = 9;
            claude_setup(s, 60);
            let first = finish_ok(s, claude(s, "Remember this. SP-ECHO:BASE"), "claude");
            let id = session_of(&first);
            let key = format!("claude-code:{id}");
            let (mut by_hand, mut ours, mut ack_after) = (Vec::new(), Vec::new(), Vec::new());
            let mut launched = Vec::new();
            for k in 0..ROUNDS {
                // Each goes first in every other round: neither gets the warmer cache.
                let hand_first = k % 2 == 0;
                if hand_first {
                    by_hand.push(resume_by_hand(s, &id, k));
                }
                let word = format!("PHONE{k}");
                let t0 = epoch_s();
                let m = s.enqueue(
                    &key,
                    json!({"kind": "prompt", "text": format!("SP-ECHO:{word}"), "expires_in_s": 300}),
                );
                let ack = s.ack(&m, Duration::from_secs(90));
                let arrived = epoch_s();
                assert_eq!(ack["reply"], format!("SP-SAW:{word}"), "{ack}");
                ours.push(model_got(s, &word) - t0);
                // The run's launch (the machine's part ends there) and its agent's exit.
                let (started_ms, ended_ms): (i64, i64) = s
                    .db()
                    .query_row(
                        "SELECT started_ms, ended_ms FROM runs WHERE message_id = ?1",
                        [m["id"].as_str().unwrap()],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .unwrap();
                launched.push(started_ms as f64 / 1000.0 - t0);
                ack_after.push(arrived - ended_ms as f64 / 1000.0);
                if !hand_first {
                    by_hand.push(resume_by_hand(s, &id, k));
                }
            }
            let (h50, o50) = (percentile(&mut by_hand, 0.5), percentile(&mut ours, 0.5));
            s.say(&format!(
                "BENCH queued->model: ours p50 {:.0} ms, by hand p50 {:.0} ms, ratio {:.2}x; \
                 queued->run launched p50 {:.0} ms, max {:.0} ms; \
                 run end->final ack p50 {:.0} ms, max {:.0} ms ({ROUNDS} rounds)",
                o50 * 1000.0,
                h50 * 1000.0,
                o50 / h50,
                percentile(&mut launched, 0.5) * 1000.0,
                percentile(&mut launched, 1.0) * 1000.0,
                percentile(&mut ack_after, 0.5) * 1000.0,
                percentile(&mut ack_after, 1.0) * 1000.0,
            ));
        },
    );
}

#[test]
fn claude_code_resume_streams_progress_and_a_killed_run_is_acked_failed() {
    scenario(
        "between_turns::claude_code_resume_streams_progress_and_a_killed_run_is_acked_failed",
        &["claude"],
        |s| {
            claude_setup(s, 60);
            let first = finish_ok(s, claude(s, "Remember this. SP-ECHO:SLOWBASE"), "claude");
            let key = format!("claude-code:{}", session_of(&first));
            let m = s.enqueue(
                &key,
                json!({"kind": "prompt", "text": "Take long. SP-SLOW", "expires_in_s": 300}),
            );
            let id = m["id"].as_str().unwrap().to_string();
            // The stand-in trickles its answer a chunk a second: `progress` acks, seq rising,
            // each with the answer so far.
            let progress = |s: &Scene| -> Vec<Value> {
                s.receiver
                    .acks()
                    .into_iter()
                    .filter(|a| a["id"] == id.as_str() && a["outcome"] == "progress")
                    .collect()
            };
            assert!(
                until(Duration::from_secs(60), || progress(s).len() >= 2),
                "two progress acks: {:?}",
                s.receiver.acks()
            );
            let p = progress(s);
            let seqs: Vec<u64> = p.iter().map(|a| a["seq"].as_u64().unwrap()).collect();
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "seq rises: {seqs:?}");
            let (a, b) = (
                p[0]["reply"].as_str().unwrap(),
                p[p.len() - 1]["reply"].as_str().unwrap(),
            );
            assert!(
                b.len() > a.len() && b.starts_with(a),
                "the reply grows: {a:?} then {b:?}"
            );
            assert!(
                s.receiver.wait_ack(&id, Duration::ZERO).is_none(),
                "no final ack yet"
            );
            // The run's agent is killed: one final `failed`, naming how it ended.
            let agent: i32 = s
                .db()
                .query_row(
                    "SELECT agent_pid FROM runs WHERE message_id = ?1",
                    [&id],
                    |r| r.get(0),
                )
                .unwrap();
            // SAFETY: a signal to the run's process group, in this scenario's pid namespace.
            assert_eq!(unsafe { libc::kill(-agent, libc::SIGKILL) }, 0);
            let ack = one_final_ack(s, &m, Duration::from_secs(30));
            assert_eq!(ack["outcome"], "failed", "{ack}");
            let detail = ack["detail"].as_str().unwrap_or("");
            assert!(detail.contains("signal 9"), "{ack}");
            assert_eq!(ack.get("reply"), None, "{ack}");
        },
    );
}

/// Issue 38's browser "must show", in Chromium with the real receiver's page: a `claude -p`
/// run ends and its card reads as the conversation, ended; the person types and presses
/// **Send**; sp-sync resumes the session (the model gets the earlier turn); the reply grows on
/// the page as the `progress` acks come, then the final answer, and the status goes working,
/// then idle or ended. No internal id shows on the card.
#[test]
fn claude_code_ended_session_answers_send_from_the_page_as_it_grows() {
    scenario(
        "between_turns::claude_code_ended_session_answers_send_from_the_page_as_it_grows",
        &["claude"],
        |s| {
            use common::browser::Browser;
            const LOGIN: &str = "e2e-login-token-for-the-send-scenario";
            // The receiver people host: its page, and the conversation (tier 2, rule 40).
            s.world.receiver = spreceiver::Receiver::start(spreceiver::ReceiverOptions {
                login_token: Some(LOGIN.into()),
                max_tier: 2,
                ..spreceiver::ReceiverOptions::default()
            })
            .expect("receiver");
            claude_setup(s, 60);
            s.set_config("/sinks/0/tier", json!(2));
            super::start::claude_sync(s);
            let started = Instant::now();
            let mut b = Browser::launch();
            b.call(json!({"op": "goto", "url": format!("{}/", s.receiver.url())}));
            b.call(json!({"op": "fill", "selector": "#token", "value": LOGIN}));
            b.click("#login-form button[type=submit]");
            b.wait("#conn[data-state=\"live\"]");

            // A `-p` run: one turn, then it ends. The page shows the turn, and the session ended.
            let first = finish_ok(s, claude(s, "Remember this. SP-ECHO:PAPAYA"), "claude");
            let id = session_of(&first);
            let key = format!("claude-code:{id}");
            let card = format!("article[data-session=\"{key}\"]");
            let state = format!("{card} .state");
            b.wait(&format!("{state}[data-state=\"ended\"]"));
            let turn = format!("{card} li.turn");
            b.wait(&format!("{turn} .reply"));
            assert_eq!(
                b.text(&format!("{turn} .said")),
                "Remember this. SP-ECHO:PAPAYA"
            );
            assert_eq!(b.text(&format!("{turn} .reply")), "SP-SAW:PAPAYA");

            // Send to the ended session: a resume, and the page says so.
            assert_eq!(b.text(&format!("{card} button.queue")), "Send");
            b.send_text(&card, "Now take your time. SP-SLOW:4", "queue");
            b.call(
                json!({"op": "wait_text", "selector": format!("{card} .form-status"),
                "text": "Sent: the machine resumes the session with it.", "timeout": 30000}),
            );
            let prompt = format!("{card} li.msg[data-kind=\"prompt\"]");
            let mid = b.prompt_id_taken(&prompt);
            let this = format!("{prompt}[data-message=\"{mid}\"]");
            let reply = format!("{this} div.reply");
            let done = format!("{this}[data-status=\"delivered\"]");
            b.wait(&format!("{state}[data-state=\"working\"]"));

            // The reply as it grows: each text the page shows before the final ack.
            let mut grew: Vec<String> = Vec::new();
            let count = |b: &mut Browser, sel: &str| {
                b.call(json!({"op": "count", "selector": sel}))["count"]
                    .as_u64()
                    .unwrap()
            };
            let finished = until(Duration::from_secs(60), || {
                if count(&mut b, &done) > 0 {
                    return true;
                }
                if count(&mut b, &reply) > 0 {
                    let t = b.text(&reply).trim().to_string();
                    if !t.is_empty() && grew.last() != Some(&t) {
                        grew.push(t);
                    }
                }
                false
            });
            assert!(finished, "the final answer came: {grew:?}");
            assert!(
                grew.len() >= 2,
                "the page showed the reply growing: {grew:?}"
            );
            assert!(grew[0].starts_with("SP-SLOW reply."), "{grew:?}");
            assert!(
                grew.windows(2).all(|w| w[1].starts_with(w[0].as_str())),
                "each text grows the one before: {grew:?}"
            );

            // The final answer: the one the final ack carries, in resume mode.
            let ack = one_final_ack(s, &json!({"id": mid}), Duration::from_secs(30));
            assert_eq!(
                (&ack["outcome"], &ack["mode"]),
                (&json!("delivered"), &json!("resume")),
                "{ack}"
            );
            let answer = ack["reply"].as_str().unwrap().trim().to_string();
            assert!(
                answer.starts_with(grew.last().unwrap().as_str()),
                "{ack} {grew:?}"
            );
            b.wait(&format!("{done} div.reply[data-mode=\"resume\"]"));
            assert_eq!(b.text(&format!("{done} div.reply")).trim(), answer);
            b.wait(&format!(
                "{state}:is([data-state=\"idle\"], [data-state=\"ended\"])"
            ));
            let (kind, run_state, _) = run_of(s, &mid);
            assert_eq!((kind.as_str(), run_state.as_str()), ("resume", "done"));

            // The model got the earlier conversation with the new text: a resume.
            let asked: Vec<String> = s
                .agent_requests()
                .iter()
                .map(|r| all_text(&r["body"]["messages"]))
                .filter(|t| t.contains("SP-SLOW:4"))
                .collect();
            let all = asked.first().expect("the model got the message");
            assert!(
                all.contains("SP-ECHO:PAPAYA") && all.contains("SP-SAW:PAPAYA"),
                "{all}"
            );

            // Never an internal id on the card.
            let shown = b.text(&card);
            for internal in [&id[..8], &mid[..8]] {
                assert!(!shown.contains(internal), "{internal} shown: {shown}");
            }
            s.say(&format!(
                "page login to the final answer shown: {:?}; the reply as shown: {grew:?}",
                started.elapsed()
            ));
        },
    );
}
