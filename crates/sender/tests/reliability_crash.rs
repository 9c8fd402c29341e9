//! Issue 6 §2, crashes: sp-sync is SIGKILLed at random points of its work over a mixed
//! workload, and hooks are SIGKILLed mid-run; then a clean sp-sync finishes. Afterwards every
//! message has exactly one final outcome, no prompt reached a harness twice, no permission was
//! answered twice, every ack and event reached the receiver, and the database passes
//! `PRAGMA integrity_check` after every kill.
//!
//! Size: `SP_CRASH_RUNS` runs (default 30, CI), `SP_CRASH_PAR` at once (default 2).
//! `scripts/reliability-long.sh` runs 200+ and collects the `FIGURE` lines.
mod common;
use common::chaos::*;
use common::env::*;
use serde_json::{json, Value};
use spreceiver::ReceiverOptions;
use std::collections::{BTreeMap, HashMap};
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const STOP_SESSIONS: [&str; 2] = ["crash-stop-a", "crash-stop-b"];
const PERM_SESSIONS: [&str; 2] = ["crash-perm-a", "crash-perm-b"];
const PERM_WAIT_S: u64 = 3;

/// What one message of the workload is and what it may end as.
#[derive(Debug, Clone)]
enum Planned {
    /// A prompt whose text carries `token`; `short` ones may expire before a Stop.
    Prompt { token: String, short: bool },
    /// A permission.answer for an attention a hook waits on.
    Answer { attention: String, decision: String },
    /// Decided at once by sp-sync: (outcome it must get).
    AtOnce(&'static str),
}

#[derive(Default)]
struct Tally {
    runs: AtomicUsize,
    sync_kills: AtomicUsize,
    hook_kills: AtomicUsize,
    hooks_run: AtomicUsize,
    messages: AtomicUsize,
    integrity_checks: AtomicUsize,
    prompts_delivered: AtomicUsize,
    answers_delivered: AtomicUsize,
    orphaned_claims: AtomicUsize,
    outcomes: Mutex<BTreeMap<String, usize>>,
    max_finish_ms: AtomicUsize,
}

struct HookRun {
    session: String,
    stdout: String,
    killed: bool,
}

fn reap(mut c: Child, session: &str, killed: bool) -> HookRun {
    if killed {
        let _ = c.kill();
    }
    let out = c.wait_with_output().expect("hook output");
    if !killed {
        assert_eq!(out.status.code(), Some(0), "a hook always exits 0");
        assert!(
            out.stderr.is_empty(),
            "a hook writes nothing to stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    HookRun {
        session: session.to_string(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        killed,
    }
}

fn check_integrity(env: &Env, tally: &Tally, when: &str) {
    assert_eq!(integrity(env), "ok", "integrity_check {when}");
    tally.integrity_checks.fetch_add(1, Ordering::Relaxed);
}

fn one_run(run: usize, seed: u64, tally: &Tally) {
    let mut rng = Rng::new(seed);
    let env = Env::with(
        ReceiverOptions {
            wait_max_s: 5,
            ..Default::default()
        },
        json!({"permission_wait_s": PERM_WAIT_S}),
    );
    for s in STOP_SESSIONS.iter().chain(&PERM_SESSIONS) {
        let out = env.hook_json("sp-event", &cc_start(s));
        assert!(out.status.success() && out.stdout.is_empty());
    }
    // Permission hooks wait before sp-sync starts; one attention each.
    let mut perm_hooks: Vec<(Child, String, String, bool)> = Vec::new();
    let mut plan: HashMap<String, Planned> = HashMap::new();
    let mut attentions = Vec::new();
    for i in 0..4 {
        let session = PERM_SESSIONS[i % 2];
        let (payload, attention) = cc_permission(
            session,
            &format!("prompt-{run}-{i}"),
            &format!("echo {run} {i}"),
        );
        let child = env.spawn_hook("sp-permission", &payload);
        perm_hooks.push((child, session.to_string(), attention.clone(), false));
        attentions.push((session, attention));
    }
    assert!(
        eventually(Duration::from_secs(10), || env
            .query::<i64>("SELECT count(*) FROM attention WHERE state='open'")
            .first()
            .is_some_and(|n| *n == 4)),
        "the permission hooks opened their attentions"
    );
    // The workload, all enqueued before sp-sync first runs.
    let mut enqueue = |session: &str, m: Value, p: Planned| {
        let m = env.receiver.enqueue(&cc_key(session), m);
        plan.insert(m["id"].as_str().unwrap().to_string(), p);
    };
    for (session, attention) in &attentions {
        let decision = if rng.chance(0.5) { "allow" } else { "deny" };
        enqueue(
            session,
            json!({"kind": "permission.answer", "for": attention, "decision": decision, "note": format!("n-{attention}")}),
            Planned::Answer {
                attention: attention.clone(),
                decision: decision.into(),
            },
        );
        if rng.chance(0.3) {
            // A second, contrary answer for the same prompt: at most one may act.
            let other = if decision == "allow" { "deny" } else { "allow" };
            enqueue(
                session,
                json!({"kind": "permission.answer", "for": attention, "decision": other}),
                Planned::Answer {
                    attention: attention.clone(),
                    decision: other.into(),
                },
            );
        }
    }
    for i in 0..8 {
        let session = STOP_SESSIONS[i % 2];
        let token = format!("<<run{run}-p{i}>>");
        enqueue(
            session,
            json!({"kind": "prompt", "text": format!("do {token}"), "expires_in_s": 120}),
            Planned::Prompt {
                token,
                short: false,
            },
        );
    }
    for (i, session) in STOP_SESSIONS.iter().enumerate() {
        let token = format!("<<run{run}-short{i}>>");
        enqueue(
            session,
            json!({"kind": "prompt", "text": format!("do {token}"), "expires_in_s": 2}),
            Planned::Prompt { token, short: true },
        );
    }
    enqueue(
        PERM_SESSIONS[0],
        json!({"kind": "permission.answer", "for": "perm-00000000deadbeef", "decision": "allow"}),
        Planned::AtOnce("failed"),
    );
    enqueue(
        STOP_SESSIONS[0],
        // A kind no harness knows: decided at once. (A cancel now waits for a hook seam.)
        json!({"kind": "pause"}),
        Planned::AtOnce("unsupported"),
    );
    enqueue(
        STOP_SESSIONS[1],
        // A kind no harness knows: decided at once. (A cancel now waits for a hook seam.)
        json!({"kind": "pause"}),
        Planned::AtOnce("unsupported"),
    );
    enqueue(
        STOP_SESSIONS[0],
        json!({"kind": "prompt", "note": "no text"}),
        Planned::AtOnce("failed"),
    );
    enqueue(
        STOP_SESSIONS[1],
        json!({"kind": "start", "text": "x"}),
        Planned::AtOnce("unsupported"),
    );
    // The same prompt redelivered under two sessions (a confused receiver): stored once,
    // delivered (if at all) only to the session that first polled it.
    let dup_token = format!("<<run{run}-dup>>");
    let dup = env.receiver.enqueue(
        &cc_key(STOP_SESSIONS[0]),
        json!({"kind": "prompt", "text": format!("do {dup_token}"), "expires_in_s": 120}),
    );
    env.receiver
        .enqueue_raw(&cc_key(STOP_SESSIONS[1]), dup.clone());
    plan.insert(
        dup["id"].as_str().unwrap().to_string(),
        Planned::Prompt {
            token: dup_token,
            short: false,
        },
    );
    tally.messages.fetch_add(plan.len(), Ordering::Relaxed);

    let stop_runs: Mutex<Vec<HookRun>> = Mutex::new(Vec::new());
    let stopping = AtomicBool::new(false);
    let chaos_seed = rng.next_u64();
    std::thread::scope(|scope| {
        // Stop hooks all along, some killed a few ms in.
        scope.spawn(|| {
            let mut rng = Rng::new(chaos_seed);
            while !stopping.load(Ordering::Relaxed) {
                let session = STOP_SESSIONS[rng.below(2) as usize];
                let child = env.spawn_hook("sp-stop", &cc_stop(session));
                let killed = rng.chance(0.3);
                if killed {
                    std::thread::sleep(rng.millis(15));
                    tally.hook_kills.fetch_add(1, Ordering::Relaxed);
                }
                tally.hooks_run.fetch_add(1, Ordering::Relaxed);
                stop_runs.lock().unwrap().push(reap(child, session, killed));
                std::thread::sleep(rng.millis(200));
            }
        });
        // sp-sync: started and SIGKILLed 1 to 3 times, each after 0-1.5 s.
        let rounds = 1 + rng.below(3);
        for round in 0..rounds {
            let mut sync = spawn_sync(&env);
            std::thread::sleep(rng.millis(1500));
            sigkill(&mut sync);
            tally.sync_kills.fetch_add(1, Ordering::Relaxed);
            check_integrity(
                &env,
                tally,
                &format!("run {run}: after sp-sync kill {round}"),
            );
            // Now and then a waiting permission hook dies too.
            if rng.chance(0.25) {
                let i = rng.below(perm_hooks.len() as u64) as usize;
                if !perm_hooks[i].3 {
                    let _ = perm_hooks[i].0.kill();
                    perm_hooks[i].3 = true;
                    tally.hook_kills.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        stopping.store(true, Ordering::Relaxed);
    });
    check_integrity(&env, tally, &format!("run {run}: after the chaos"));
    let mut perm_runs: Vec<(String, HookRun)> = Vec::new();
    for (child, session, attention, killed) in perm_hooks {
        let mut child = child;
        if !killed && wait_timeout(&mut child, Duration::from_secs(PERM_WAIT_S + 15)).is_none() {
            panic!("run {run}: a permission hook did not finish");
        }
        tally.hooks_run.fetch_add(1, Ordering::Relaxed);
        perm_runs.push((attention, reap(child, &session, killed)));
    }
    // A clean sp-sync finishes everything: Stops end the turns (delivering what is queued,
    // cancelling prompts nobody waits on any more), and it runs until the receiver holds a
    // final ack for every message and every event.
    let started = Instant::now();
    let finished = finish_cleanly(
        &env,
        Duration::from_secs(90),
        || {
            // A turn ends only where something waits: each Stop that delivers nothing is a
            // new `turn.ended`, and a Stop every round would keep the outbox from emptying.
            let waiting = sessions_with_work(&env);
            for s in STOP_SESSIONS
                .iter()
                .chain(&PERM_SESSIONS)
                .filter(|s| waiting.contains(&cc_key(s)))
            {
                let out = env.hook_json("sp-stop", &cc_stop(s));
                assert_eq!(out.status.code(), Some(0));
                stop_runs.lock().unwrap().push(HookRun {
                    session: s.to_string(),
                    stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                    killed: false,
                });
            }
        },
        || {
            settled(&env)
                && STOP_SESSIONS
                    .iter()
                    .chain(&PERM_SESSIONS)
                    .all(|s| env.receiver.pending(&cc_key(s)).is_empty())
        },
    );
    tally
        .max_finish_ms
        .fetch_max(started.elapsed().as_millis() as usize, Ordering::Relaxed);
    assert!(
        finished,
        "run {run} (seed {seed}): the clean sp-sync did not settle everything\n{}",
        env.log()
    );
    check_integrity(&env, tally, &format!("run {run}: at the end"));

    let outcomes = check_final_state(&env);
    {
        let mut all = tally.outcomes.lock().unwrap();
        for (k, v) in outcomes {
            *all.entry(k).or_default() += v;
        }
    }
    let msgs = db_messages(&env);
    let details: HashMap<String, Option<String>> = env
        .query::<String>("SELECT id FROM messages")
        .into_iter()
        .map(|id| {
            let d = env
                .db()
                .query_row("SELECT detail FROM messages WHERE id=?1", [&id], |r| {
                    r.get(0)
                })
                .unwrap();
            (id, d)
        })
        .collect();
    let stop_runs = stop_runs.into_inner().unwrap();
    for (id, p) in &plan {
        let stored = msgs.get(id);
        let outcome = stored.and_then(|m| m.1.clone());
        let orphaned = details
            .get(id)
            .cloned()
            .flatten()
            .is_some_and(|d| d.contains("hook ended before confirming"));
        if orphaned {
            tally.orphaned_claims.fetch_add(1, Ordering::Relaxed);
        }
        match p {
            Planned::AtOnce(want) => {
                assert_eq!(outcome.as_deref(), Some(*want), "run {run}: {id}");
            }
            Planned::Prompt { token, short } => {
                let seen: Vec<&HookRun> = stop_runs
                    .iter()
                    .filter(|h| h.stdout.contains(token.as_str()))
                    .collect();
                assert!(
                    seen.len() <= 1,
                    "run {run}: prompt {token} reached a harness {} times",
                    seen.len()
                );
                match outcome.as_deref() {
                    Some("delivered") => {
                        assert_eq!(
                            seen.len(),
                            1,
                            "run {run}: delivered prompt {token} is in exactly one Stop answer"
                        );
                        assert_eq!(
                            cc_key(&seen[0].session),
                            stored.unwrap().2,
                            "run {run}: {token} went to its own session"
                        );
                        tally.prompts_delivered.fetch_add(1, Ordering::Relaxed);
                    }
                    Some("failed") => {
                        assert!(orphaned, "run {run}: {token} failed: {:?}", details.get(id))
                    }
                    Some("expired") => {
                        assert!(
                            seen.is_empty(),
                            "run {run}: expired {token} was not delivered"
                        );
                        assert!(
                            *short,
                            "run {run}: only the short prompts can expire ({token})"
                        );
                    }
                    None => assert!(
                        *short,
                        "run {run}: {token} was never stored, yet not short-lived"
                    ),
                    Some(o) => panic!("run {run}: prompt {token} ended {o}"),
                }
                if let Some(h) = seen.first() {
                    assert!(!h.stdout.is_empty());
                    if !h.killed {
                        assert!(stop_reason(&h.stdout).is_some());
                    }
                }
            }
            Planned::Answer {
                attention,
                decision,
            } => {
                let runs: Vec<&HookRun> = perm_runs
                    .iter()
                    .filter(|(a, _)| a == attention)
                    .map(|(_, h)| h)
                    .collect();
                assert_eq!(runs.len(), 1);
                let printed = if runs[0].killed && !runs[0].stdout.trim().is_empty() {
                    permission_printed(&runs[0].stdout)
                } else if runs[0].killed {
                    None
                } else {
                    permission_printed(&runs[0].stdout)
                };
                match outcome.as_deref() {
                    Some("delivered") => {
                        assert_eq!(
                            printed.as_deref(),
                            Some(decision.as_str()),
                            "run {run}: delivered answer printed as sent"
                        );
                        tally.answers_delivered.fetch_add(1, Ordering::Relaxed);
                    }
                    Some("expired") => {}
                    Some("failed") => assert!(
                        orphaned,
                        "run {run}: answer {id} failed: {:?}",
                        details.get(id)
                    ),
                    other => panic!("run {run}: answer {id} ended {other:?}"),
                }
            }
        }
    }
    // Per attention: at most one decision printed, and only one that was sent for it and
    // never with a contrary answer delivered.
    for (attention, h) in &perm_runs {
        let Some(printed) = permission_printed(&h.stdout) else {
            continue;
        };
        let delivered_or_orphaned: Vec<&String> = plan
            .iter()
            .filter(|(id, p)| {
                matches!(p, Planned::Answer { attention: a, decision } if a == attention && *decision == printed)
                    && matches!(msgs.get(*id).and_then(|m| m.1.as_deref()), Some("delivered") | Some("failed"))
            })
            .map(|(id, _)| id)
            .collect();
        assert_eq!(
            delivered_or_orphaned.len(),
            1,
            "run {run}: {attention} printed {printed} for exactly one answer sent"
        );
    }
    // Nothing printed by a Stop that was not a queued prompt of that session.
    for h in &stop_runs {
        if h.stdout.trim().is_empty() {
            continue;
        }
        for token in h
            .stdout
            .split("<<")
            .skip(1)
            .map(|t| t.split(">>").next().unwrap())
        {
            assert!(
                token.starts_with(&format!("run{run}-")),
                "run {run}: unknown text {token}"
            );
        }
    }
    tally.runs.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn sigkill_at_random_points_loses_nothing_and_doubles_nothing() {
    let runs = env_usize("SP_CRASH_RUNS", 30);
    let par = env_usize("SP_CRASH_PAR", 2).max(1);
    let base = seed();
    let tally = Tally::default();
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..par {
            s.spawn(|| loop {
                let run = next.fetch_add(1, Ordering::Relaxed);
                if run >= runs {
                    return;
                }
                let seed = base.wrapping_add(run as u64 * 7919);
                one_run(run, seed, &tally);
            });
        }
    });
    let f = |n: &AtomicUsize| n.load(Ordering::Relaxed);
    figure("crash", "runs", f(&tally.runs));
    figure("crash", "sp_sync_sigkills", f(&tally.sync_kills));
    figure("crash", "hooks_run", f(&tally.hooks_run));
    figure("crash", "hook_sigkills", f(&tally.hook_kills));
    figure("crash", "messages", f(&tally.messages));
    figure("crash", "integrity_checks_ok", f(&tally.integrity_checks));
    figure(
        "crash",
        "prompts_delivered_once",
        f(&tally.prompts_delivered),
    );
    figure(
        "crash",
        "answers_delivered_once",
        f(&tally.answers_delivered),
    );
    figure(
        "crash",
        "claims_orphaned_by_kill_acked_failed",
        f(&tally.orphaned_claims),
    );
    for (k, v) in tally.outcomes.lock().unwrap().iter() {
        figure("crash", &format!("outcome_{k}"), v);
    }
    figure("crash", "max_final_settle_ms", f(&tally.max_finish_ms));
    figure("crash", "wall_s", started.elapsed().as_secs());
    assert_eq!(f(&tally.runs), runs);
}
