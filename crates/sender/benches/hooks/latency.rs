//! A permission answer, from the moment the test receiver accepts it (`enqueue`) to the moment
//! the waiting sp-permission prints it, with `sp-sync --daemon` running. Its floor is the
//! receiver's own hand-off: the same enqueue reaching a plain long poll held on loopback.
use crate::run::{self, Home};
use crate::stats::{median, ms, percentile, verdict};
use crate::{sink_config, Bins, Opts, Payloads};
use serde_json::{json, Value};
use spreceiver::{Receiver, ReceiverOptions, Route};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const ALLOW: &str = r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}"#;

/// Waits until the receiver holds a long poll for `session` (sent, not yet answered).
fn held_poll(rx: &Receiver, session: &str, timeout: Duration) -> bool {
    let until = Instant::now() + timeout;
    while Instant::now() < until {
        if rx
            .requests()
            .iter()
            .any(|r| r.route == Some(Route::Poll) && r.status.is_none() && r.url.contains(session))
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

fn control_url(rx: &Receiver) -> String {
    let path = rx.well_known()["endpoints"]["control"]
        .as_str()
        .unwrap_or("/control")
        .to_string();
    format!("{}{}", rx.url(), path)
}

pub struct SyncProc(Child);

impl Drop for SyncProc {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn start_sync(home: &Home, bin: &Path) -> SyncProc {
    let mut c = home.command(bin);
    c.arg("--daemon")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    SyncProc(c.spawn().expect("starting sp-sync"))
}

pub fn run(o: &Opts, bins: &Bins, root: &Path, p: &Payloads) {
    println!("\n== Permission answer latency: receiver enqueue -> waiting hook prints it (sp-sync running) ==");
    one(o, bins, root, p, None, "");
    one(o, bins, root, p, Some(o.rows), "");
    if let Some(dir) = &o.baseline {
        let base = Bins {
            stop: dir.join("sp-stop"),
            event: dir.join("sp-event"),
            permission: dir.join("sp-permission"),
            sync: dir.join("sp-sync"),
            floor: bins.floor.clone(),
        };
        one(
            o,
            &base,
            root,
            p,
            None,
            &format!(" (baseline build {})", dir.display()),
        );
    }
}

#[allow(clippy::zombie_processes)] // the hooks are reaped by wait4
fn one(o: &Opts, bins: &Bins, root: &Path, p: &Payloads, rows: Option<i64>, tag: &str) {
    let rx = Receiver::start(ReceiverOptions::default()).expect("starting the test receiver");
    let dir = format!("latency-{}-{}", rows.unwrap_or(0), tag.len());
    let home = Home::new(&root.join(dir));
    home.write_config(&sink_config(
        &rx.url(),
        &rx.token(),
        json!({"permission_wait_s": 60}),
    ));
    match rows {
        None => println!("  -- new database{tag} --"),
        Some(n) => {
            std::fs::create_dir_all(&home.state).unwrap();
            let secs = crate::fill::fill(&home.db_path(), n, &p.key(), &p.session_id, &p.cwd);
            println!("  -- {n} rows of history (filled in {secs:.1} s) --");
        }
    }
    let sync = start_sync(&home, &bins.sync);
    let key = p.key();
    let client = spctl::sync::http::Client::new();
    let poll_base = control_url(&rx);
    let (mut lat, mut floor, mut rss, mut cpu, mut wall) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut failures = 0;
    let with_time = run::have_time();
    for i in 0..o.answers {
        // The floor: a plain client's long poll gets the same kind of enqueue.
        let fsession = format!("claude-code:bench-floor-{i}");
        let (ftx, frx) = mpsc::channel();
        {
            let (client, url) = (
                client.clone(),
                format!("{poll_base}?session={fsession}&wait=20"),
            );
            let token = rx.token();
            std::thread::spawn(move || {
                let r = client.get(&url, Some(&token), Duration::from_secs(30));
                let _ = ftx.send((Instant::now(), r.map(|r| r.status)));
            });
        }
        if held_poll(&rx, &fsession, Duration::from_secs(5)) {
            let t0 = Instant::now();
            rx.enqueue(&fsession, json!({"kind": "prompt", "text": "floor"}));
            if let Ok((t1, Ok(200))) = frx.recv_timeout(Duration::from_secs(10)) {
                floor.push(ms(t1 - t0));
            }
        }

        // The hook: a new prompt each time (its attention id hashes the command).
        let mut input = p.permission.clone();
        input["tool_input"]["command"] = json!(format!("echo bench-{i} > out.txt"));
        let rss_file = home.home.join("rss.txt");
        let _ = std::fs::remove_file(&rss_file);
        let mut c = if with_time {
            home.command_rss(&bins.permission, &rss_file)
        } else {
            home.command(&bins.permission)
        };
        c.args(["--harness", "claude-code"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let started = Instant::now();
        let mut child = c.spawn().expect("starting sp-permission");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.to_string().as_bytes())
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (ltx, lrx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(out).read_line(&mut line);
            let _ = ltx.send((Instant::now(), line));
        });
        let message = format!("Bash echo bench-{i} > out.txt");
        let needed = rx.wait_event(Duration::from_secs(15), |e| {
            e["type"] == "attention.needed" && e["data"]["message"] == message.as_str()
        });
        let Some(needed) = needed else {
            println!("  answer {i}: attention.needed never reached the receiver");
            failures += 1;
            let _ = child.kill();
            run::wait4(child.id());
            continue;
        };
        let attention = needed["data"]["attention_id"].as_str().unwrap().to_string();
        if !held_poll(&rx, &key, Duration::from_secs(10)) {
            println!("  answer {i}: no poll held for the session");
        }
        let t0 = Instant::now();
        let msg = rx.enqueue(
            &key,
            json!({"kind": "permission.answer", "for": attention, "decision": "allow"}),
        );
        match lrx.recv_timeout(Duration::from_secs(20)) {
            Ok((t1, line)) if line.trim_end() == ALLOW => lat.push(ms(t1 - t0)),
            Ok((_, line)) => {
                println!("  answer {i}: unexpected output {line:?}");
                failures += 1;
            }
            Err(_) => {
                println!("  answer {i}: the hook printed nothing within 20 s");
                failures += 1;
                let _ = child.kill();
            }
        }
        let (_, usage) = run::wait4(child.id());
        wall.push(ms(started.elapsed()));
        if let Some(kb) = run::read_rss(&rss_file) {
            rss.push(kb);
        }
        cpu.push(ms(Duration::from_secs(usage.ru_utime.tv_sec as u64)
            + Duration::from_micros(usage.ru_utime.tv_usec as u64)
            + Duration::from_secs(usage.ru_stime.tv_sec as u64)
            + Duration::from_micros(usage.ru_stime.tv_usec as u64)));
        let id = msg["id"].as_str().unwrap_or_default();
        if rx.wait_ack(id, Duration::from_secs(10)).is_none() {
            println!("  answer {i}: no ack within 10 s");
        }
    }
    // A hook that waits and gets nothing: what polling for an answer costs while it waits.
    let idle = if rows.is_none() {
        idle_wait_cpu(bins, &root.join(format!("idle-{}", tag.len())), p, &rx)
    } else {
        None
    };
    drop(sync);
    let (m, p99) = (median(&lat), percentile(&lat, 99.0));
    let mut slowest: Vec<(usize, f64)> = lat.iter().copied().enumerate().collect();
    slowest.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
    slowest.truncate(3);
    let (fm, fp99) = (median(&floor), percentile(&floor, 99.0));
    println!("  {:<46} {:>8} {:>8}", "(ms)", "median", "p99");
    println!(
        "  {:<46} {fm:>8.2} {fp99:>8.2}   ({} samples)",
        "floor: enqueue -> a held long poll answered",
        floor.len()
    );
    println!(
        "  {:<46} {m:>8.2} {p99:>8.2}   ({} samples) target median < 50, p99 < 200: {}",
        "enqueue -> sp-permission prints the answer",
        lat.len(),
        verdict(m < 50.0 && p99 < 200.0)
    );
    println!(
        "  slowest answers (number: ms): {}",
        slowest
            .iter()
            .map(|(i, v)| format!("{i}: {v:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let max_rss = rss.iter().max().copied().unwrap_or(0) as f64 / 1024.0;
    println!(
        "  waiting hook: peak memory {max_rss:.1} MB (target < 10 MB: {}); whole run {:.0} ms median, CPU {:.1} ms median; failures {failures}",
        if rss.is_empty() { "not measured: no /usr/bin/time" } else { verdict(max_rss < 10.0) },
        median(&wall),
        median(&cpu)
    );
    if let Some((secs, cpu_ms, rss_kb)) = idle {
        println!(
            "  a hook waiting {secs} s for no answer: {cpu_ms:.1} ms CPU in all (start, wait, give up), peak memory {:.1} MB",
            rss_kb as f64 / 1024.0
        );
    }
}

/// Runs sp-permission with a 3 s wait and no answer; returns (seconds, CPU ms, peak KiB).
fn idle_wait_cpu(bins: &Bins, root: &Path, p: &Payloads, rx: &Receiver) -> Option<(u64, f64, i64)> {
    let secs = 3;
    let home = Home::new(root);
    home.write_config(&sink_config(
        &rx.url(),
        &rx.token(),
        json!({"permission_wait_s": secs}),
    ));
    let rss_file = home.home.join("rss.txt");
    let mut c = home.command_rss(&bins.permission, &rss_file);
    c.args(["--harness", "claude-code"]);
    let mut input: Value = p.permission.clone();
    input["tool_input"]["command"] = json!("echo idle");
    let r = run::run(c, input.to_string().as_bytes());
    if !r.ok || !r.stdout.is_empty() || r.sample.wall < Duration::from_secs(secs) {
        println!(
            "  idle wait: unexpected run ({:?}, {:?})",
            r.sample.wall,
            String::from_utf8_lossy(&r.stdout)
        );
        return None;
    }
    Some((
        secs,
        ms(r.sample.cpu),
        run::read_rss(&rss_file).unwrap_or(0),
    ))
}
