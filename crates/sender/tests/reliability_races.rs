//! Issue 6 §3, races: many hook processes and sp-sync at once on one database. No
//! `database is locked` reaches a harness (every hook exits 0, prints only its own answer, and
//! the log holds no lock failure), and every prompt is delivered exactly once, to its own
//! session.
//!
//! Size: `SP_RACE_HOOKS` hook processes (default 100) over `SP_RACE_SESSIONS` sessions
//! (default 10) while sp-sync ingests `SP_RACE_MESSAGES` prompts (default 1000). The long run
//! uses 200 / 20 / 5000.
mod common;
use common::chaos::*;
use common::env::*;
use serde_json::json;
use spreceiver::ReceiverOptions;
use std::collections::HashMap;
use std::process::Child;
use std::sync::Mutex;
use std::time::{Duration, Instant};

struct Ran {
    bin: &'static str,
    session: String,
    stdout: String,
    ms: u128,
}

fn run_hook(
    env: &Env,
    bin: &'static str,
    session: &str,
    stdin: &serde_json::Value,
) -> (Child, &'static str, String, Instant) {
    (
        spawn_with(env, bin, "claude-code", stdin.to_string().as_bytes()),
        bin,
        session.to_string(),
        Instant::now(),
    )
}

fn collect(list: Vec<(Child, &'static str, String, Instant)>, out: &Mutex<Vec<Ran>>) {
    // One waiter per child, so each latency is that hook's own.
    std::thread::scope(|s| {
        for (c, bin, session, t0) in list {
            s.spawn(move || {
                let o = c.wait_with_output().unwrap();
                let ms = t0.elapsed().as_millis();
                assert_eq!(o.status.code(), Some(0), "{bin} exits 0");
                assert!(
                    o.stderr.is_empty(),
                    "{bin} stderr: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
                out.lock().unwrap().push(Ran {
                    bin,
                    session,
                    stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
                    ms,
                });
            });
        }
    });
}

#[test]
fn many_hooks_and_sp_sync_at_once_deliver_every_prompt_once_to_its_own_session() {
    let hooks = env_usize("SP_RACE_HOOKS", 100);
    let n_sessions = env_usize("SP_RACE_SESSIONS", 10);
    let messages = env_usize("SP_RACE_MESSAGES", 1000);
    let mut rng = Rng::new(seed());
    let env = Env::with(
        ReceiverOptions {
            wait_max_s: 5,
            ..Default::default()
        },
        json!({"permission_wait_s": 1}),
    );
    let sessions: Vec<String> = (0..n_sessions).map(|i| format!("race-{i:02}")).collect();
    for s in &sessions {
        make_live(&env, s);
    }
    let started = Instant::now();
    let _sync = SyncGuard::start(&env);
    let ran: Mutex<Vec<Ran>> = Mutex::new(Vec::new());
    // token -> (session, (at, id)): the order a Stop block must follow (oldest `at` first,
    // ties by id).
    let mut texts: HashMap<String, (String, (String, String))> = HashMap::new();
    std::thread::scope(|scope| {
        // The receiver gets the prompts in bursts while the hooks run.
        let feeder = scope.spawn(|| {
            let mut toks = Vec::new();
            let bursts = 10;
            for b in 0..bursts {
                for i in (b * messages / bursts)..((b + 1) * messages / bursts) {
                    let s = &sessions[i % sessions.len()];
                    let token = format!("<<{s}-m{i:05}>>");
                    let m = env.receiver.enqueue(&cc_key(s), json!({"kind": "prompt", "text": format!("do {token}"), "expires_in_s": 900}));
                    let order = (m["at"].as_str().unwrap().to_string(), m["id"].as_str().unwrap().to_string());
                    toks.push((token, (s.clone(), order)));
                }
                std::thread::sleep(Duration::from_millis(300));
            }
            toks
        });
        // Hooks in four waves, each wave all at once: Stops, session events and permission
        // prompts nobody answers (they wait 1 s and print nothing).
        let waves = 4;
        let mut handles = Vec::new();
        for w in 0..waves {
            let mut batch = Vec::new();
            for _ in 0..(hooks / waves + usize::from(w < hooks % waves)) {
                let s = &sessions[rng.below(sessions.len() as u64) as usize];
                let roll = rng.below(10);
                batch.push(if roll < 6 {
                    run_hook(&env, "sp-stop", s, &cc_stop(s))
                } else if roll < 8 {
                    let ev = if roll == 6 {
                        "UserPromptSubmit"
                    } else {
                        "Notification"
                    };
                    run_hook(&env, "sp-event", s, &cc(s, ev))
                } else {
                    let (p, _) = cc_permission(s, &format!("race-{}", rng.next_u64()), "ls");
                    run_hook(&env, "sp-permission", s, &p)
                });
            }
            let ran = &ran;
            handles.push(scope.spawn(move || collect(batch, ran)));
            std::thread::sleep(Duration::from_millis(700));
        }
        for h in handles {
            h.join().unwrap();
        }
        texts.extend(feeder.join().unwrap());
    });
    let storm_s = started.elapsed().as_secs_f64();
    // Then each session's Stops take what is still queued.
    let mut finals: Vec<Ran> = Vec::new();
    let done = eventually(Duration::from_secs(120), || {
        // Only where something waits: a Stop that delivers nothing emits `turn.ended`, and
        // one every round would keep the outbox from emptying.
        let waiting = sessions_with_work(&env);
        for s in sessions.iter().filter(|s| waiting.contains(&cc_key(s))) {
            let t0 = Instant::now();
            let out = env.hook_json("sp-stop", &cc_stop(s));
            assert_eq!(out.status.code(), Some(0));
            finals.push(Ran {
                bin: "sp-stop",
                session: s.clone(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                ms: t0.elapsed().as_millis(),
            });
        }
        settled(&env)
            && sessions
                .iter()
                .all(|s| env.receiver.pending(&cc_key(s)).is_empty())
    });
    assert!(done, "everything delivered and acked");
    let mut all = ran.into_inner().unwrap();
    let storm_hooks = all.len();
    all.extend(finals);
    // Every prompt exactly once, in a Stop of its own session, oldest first in each block.
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut blocks = 0;
    for r in &all {
        if r.bin != "sp-stop" {
            assert!(r.stdout.is_empty(), "{} printed {}", r.bin, r.stdout);
            continue;
        }
        let Some(reason) = stop_reason(&r.stdout) else {
            continue;
        };
        blocks += 1;
        let mut last = None;
        for t in reason.split("<<").skip(1) {
            let token = format!("<<{}>>", t.split(">>").next().unwrap());
            let (session, idx) = texts
                .get(&token)
                .unwrap_or_else(|| panic!("unknown text {token}"));
            assert_eq!(
                session, &r.session,
                "{token} went to {} instead of its own session",
                r.session
            );
            assert!(last.is_none_or(|l| l < idx), "oldest first within a block");
            last = Some(idx);
            *seen
                .entry(texts.get_key_value(&token).unwrap().0.as_str())
                .or_default() += 1;
        }
    }
    for token in texts.keys() {
        assert_eq!(
            seen.get(token.as_str()).copied().unwrap_or(0),
            1,
            "{token} delivered exactly once"
        );
    }
    let log = env.log();
    let locked = log
        .lines()
        .filter(|l| l.contains("database is locked") || l.contains("database is busy"))
        .count();
    if locked > 0 {
        // Everything the failing processes logged.
        let pids: Vec<String> = log
            .lines()
            .filter(|l| l.contains("database is locked") || l.contains("database is busy"))
            .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
            .collect();
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| pids.iter().any(|p| l.contains(p.as_str())))
            .collect();
        panic!("{locked} lock failure(s):\n{}", lines.join("\n"));
    }
    assert!(
        !log.contains("ERROR"),
        "no errors logged:\n{}",
        log.lines()
            .filter(|l| l.contains("ERROR"))
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let outcomes = check_final_state(&env);
    assert_eq!(outcomes.get("delivered").copied().unwrap_or(0), messages);
    let mut lat: Vec<u128> = all
        .iter()
        .filter(|r| r.bin == "sp-stop")
        .map(|r| r.ms)
        .collect();
    lat.sort();
    figure("races", "hook_processes_concurrent", storm_hooks);
    figure("races", "hook_processes_total", all.len());
    figure("races", "sessions", n_sessions);
    figure("races", "prompts_ingested", messages);
    figure("races", "prompts_delivered_exactly_once", seen.len());
    figure("races", "stop_blocks", blocks);
    figure("races", "database_locked_failures", locked);
    figure("races", "stop_hook_ms_p50", lat[lat.len() / 2]);
    figure("races", "stop_hook_ms_p99", lat[lat.len() * 99 / 100]);
    figure("races", "stop_hook_ms_max", lat[lat.len() - 1]);
    figure("races", "storm_wall_s", format!("{storm_s:.1}"));
}
