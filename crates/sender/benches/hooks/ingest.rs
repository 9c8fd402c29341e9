//! sp-sync taking in a backlog: `backlog` messages queued at the receiver for `backlog / 100`
//! live sessions before it starts (a machine back online), each decided on receipt so that it
//! is both stored and acked: late answers for prompts already cleared (acked `expired`) and
//! cancels, which Claude Code cannot take (acked `unsupported`). Timed from sp-sync's start to
//! every message stored, and to the receiver holding an ack for every one (nothing pending).
//! Its floor is a plain client doing the HTTP alone: one poll per session, acks by 100.
use crate::latency::start_sync;
use crate::run::{self, Home};
use crate::stats::verdict;
use crate::{sink_config, Bins, Opts};
use serde_json::{json, Value};
use spreceiver::{Receiver, ReceiverOptions};
use std::path::Path;
use std::time::{Duration, Instant};

const PER_SESSION: usize = 100;

fn sessions(n: usize) -> Vec<String> {
    (0..n)
        .map(|k| format!("0000beef-0000-4000-8000-{k:012}"))
        .collect()
}

fn enqueue_backlog(rx: &Receiver, ids: &[String]) -> usize {
    let mut n = 0;
    for id in ids {
        let key = format!("claude-code:{id}");
        for j in 0..PER_SESSION {
            let m = if j % 2 == 0 {
                json!({"kind": "permission.answer", "for": "perm-bench-late", "decision": "allow", "expires_in_s": 600})
            } else {
                json!({"kind": "cancel", "expires_in_s": 600})
            };
            rx.enqueue(&key, m);
            n += 1;
        }
    }
    n
}

/// The HTTP alone: poll each session once, then ack everything in batches of 100.
fn floor(rx: &Receiver, ids: &[String]) -> (f64, usize) {
    let client = spctl::sync::http::Client::new();
    let path = rx.well_known()["endpoints"]["control"]
        .as_str()
        .unwrap_or("/control")
        .to_string();
    let control = format!("{}{}", rx.url(), path);
    let token = rx.token();
    let started = Instant::now();
    let mut acked = 0;
    let mut batch: Vec<spctl::wire::control::AckOut> = Vec::new();
    let at = spctl::clock::now_rfc3339();
    let send = |batch: &mut Vec<_>, acked: &mut usize| {
        if batch.is_empty() {
            return;
        }
        let body = spctl::wire::control::ack_body(batch).to_string();
        let r = client.post_json(
            &format!("{control}/ack"),
            &token,
            &body,
            &[],
            Duration::from_secs(10),
        );
        if matches!(r, Ok(ref r) if (200..300).contains(&r.status)) {
            *acked += batch.len();
        }
        batch.clear();
    };
    for id in ids {
        let r = client
            .get(
                &format!("{control}?session=claude-code:{id}&wait=0"),
                Some(&token),
                Duration::from_secs(10),
            )
            .expect("floor poll");
        let v: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        for m in v["messages"].as_array().into_iter().flatten() {
            batch.push(spctl::wire::control::AckOut {
                id: m["id"].as_str().unwrap_or("").to_string(),
                outcome: spctl::wire::control::AckStatus::Final(
                    spctl::wire::control::Outcome::Expired,
                ),
                at: at.clone(),
                code: None,
                detail: None,
                mode: None,
                session: None,
                reply: None,
                seq: None,
            });
            if batch.len() == 100 {
                send(&mut batch, &mut acked);
            }
        }
    }
    send(&mut batch, &mut acked);
    (started.elapsed().as_secs_f64(), acked)
}

pub fn run(o: &Opts, bins: &Bins, root: &Path) {
    let n_sessions = (o.backlog / PER_SESSION).max(1);
    let ids = sessions(n_sessions);
    println!(
        "\n== sp-sync ingest: {} messages queued for {n_sessions} sessions, stored and acked ==",
        n_sessions * PER_SESSION
    );
    // The floor, on a receiver of its own with the same backlog.
    let frx = Receiver::start(ReceiverOptions::default()).expect("receiver");
    let total = enqueue_backlog(&frx, &ids);
    let (floor_s, floor_acked) = floor(&frx, &ids);
    frx.stop();

    let rx = Receiver::start(ReceiverOptions::default()).expect("receiver");
    let home = Home::new(&root.join("ingest"));
    home.write_config(&sink_config(&rx.url(), &rx.token(), json!({})));
    // The sessions go live the way they do in use: a SessionStart hook each.
    for id in &ids {
        let mut c = home.command(&bins.event);
        c.args(["--harness", "claude-code"]);
        let input = json!({"session_id": id, "hook_event_name": "SessionStart", "source": "startup", "cwd": "/tmp/bench"});
        assert!(run::run(c, input.to_string().as_bytes()).ok);
    }
    // Each session had a prompt that timed out before the late answers below were sent.
    {
        let db = rusqlite::Connection::open(home.db_path()).unwrap();
        db.busy_timeout(Duration::from_secs(5)).unwrap();
        for id in &ids {
            db.execute(
                "INSERT INTO attention(session_key, attention_id, tool, message, opened_at, wait_until_ms, state, how, cleared_at) \
                 VALUES (?1, 'perm-bench-late', 'Bash', 'Bash make deploy', '2026-01-01T00:00:00.000Z', 0, 'cleared', 'timeout', '2026-01-01T00:02:00.000Z')",
                [format!("claude-code:{id}")],
            )
            .unwrap();
        }
    }
    enqueue_backlog(&rx, &ids);
    let db = rusqlite::Connection::open(home.db_path()).unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap_or(0) };
    let started = Instant::now();
    let sync = start_sync(&home, &bins.sync);
    let (mut stored_at, mut acked_at) = (None, None);
    let until = started + Duration::from_secs(120);
    while Instant::now() < until && acked_at.is_none() {
        std::thread::sleep(Duration::from_millis(10));
        if stored_at.is_none() && count("SELECT count(*) FROM messages") >= total as i64 {
            stored_at = Some(started.elapsed().as_secs_f64());
        }
        // Acked as the receiver sees it: nothing left to deliver for any session.
        if stored_at.is_some()
            && ids
                .iter()
                .all(|id| rx.pending(&format!("claude-code:{id}")).is_empty())
        {
            acked_at = Some(started.elapsed().as_secs_f64());
        }
    }
    drop(sync);
    let acks = rx.acks();
    let mut seen = std::collections::HashSet::new();
    let mut outcomes = std::collections::BTreeMap::new();
    for a in &acks {
        if seen.insert(a["id"].as_str().unwrap_or("").to_string()) {
            *outcomes
                .entry(a["outcome"].as_str().unwrap_or("?").to_string())
                .or_insert(0) += 1;
        }
    }
    let fmt = |t: Option<f64>| {
        t.map(|t| format!("{t:.2} s"))
            .unwrap_or_else(|| "not within 120 s".into())
    };
    println!("  floor: the HTTP alone (one poll per session, acks by 100): {floor_s:.2} s, {floor_acked} acked");
    println!("  sp-sync start -> all {total} stored: {}", fmt(stored_at));
    println!(
        "  sp-sync start -> all {total} acked at the receiver: {} ({} distinct ids acked: {outcomes:?}); target < 5 s: {}",
        fmt(acked_at),
        seen.len(),
        verdict(acked_at.is_some_and(|t| t < 5.0) && seen.len() == total)
    );
    rx.stop();
}
