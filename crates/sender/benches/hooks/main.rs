//! `cargo bench --bench hooks`: what a hook costs beside the cost of starting a process, how
//! that holds with 1,000,000 rows of history, how fast a permission answer reaches the waiting
//! hook, and how fast sp-sync takes in a backlog. Every figure is printed beside its floor and
//! its target (issue 7). It is a benchmark, not a test: it never fails on a time.
//!
//!   cargo bench --bench hooks                 full run (a few minutes)
//!   cargo bench --bench hooks -- --quick      the short CI-sized run
//!   cargo bench --bench hooks -- --help       every option
//!
//! The hooks run from the release build cargo made for the bench, with HOME, SESSIONPIPE_CONFIG
//! and SESSIONPIPE_STATE_DIR in a temp dir and SESSIONPIPE_NO_SPAWN=1; sp-sync runs only in
//! the answer-latency and ingest parts, against the test receiver on loopback.
#![allow(clippy::too_many_arguments)]
mod fill;
mod ingest;
mod latency;
mod redact;
mod run;
mod stats;
mod verify;

use run::Home;
use serde_json::{json, Value};
use stats::{summarize, verdict, Sample, Summary};
use std::path::{Path, PathBuf};
use std::process::Command;

const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");
/// Our Claude Code payload fixtures (tests/fixtures/hook-payloads/claude-code).
const PAYLOADS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/hook-payloads/claude-code"
);
const CC_STOP: &str = "stop.json";
const CC_PERMISSION: &str = "permission-request.json";

const HELP: &str = "\
hooks benchmark (issue 7)

USAGE: cargo bench --bench hooks [-- OPTIONS]

OPTIONS:
  --quick          short CI-sized run: fewer runs, 100,000 rows, fewer answers, smaller backlog
  --runs N         runs of each hook scenario (default 400; quick 40)
  --rows N         rows of history in the big database (default 1000000; quick 100000)
  --answers N      permission answers timed (default 150; quick 12)
  --backlog N      messages sp-sync ingests, over N/100 sessions (default 10000; quick 2000)
  --only LIST      comma list of parts: hooks, latency, ingest, verify, redact, callgrind (default: all
                   but callgrind)
  --no-node        skip the Node.js hook even when benches/hooks/node_modules is installed
  --keep           keep the temp dir and print where it is
  --baseline DIR   also run the hooks from DIR (another build's target/release), interleaved in
                   the same rounds on databases of their own: before/after in one run
";

pub struct Opts {
    pub quick: bool,
    pub runs: usize,
    pub rows: i64,
    pub answers: usize,
    pub backlog: usize,
    pub parts: Vec<String>,
    pub node: bool,
    pub keep: bool,
    pub baseline: Option<PathBuf>,
}

fn parse_opts() -> Option<Opts> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo test --all-targets` runs bench targets without `--bench`: do nothing there.
    if !args.iter().any(|a| a == "--bench") {
        println!("hooks benchmark: run it with `cargo bench --bench hooks`; nothing to do under cargo test");
        return None;
    }
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return None;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let mut o = Opts {
        quick,
        runs: if quick { 40 } else { 400 },
        rows: if quick { 100_000 } else { 1_000_000 },
        answers: if quick { 12 } else { 150 },
        backlog: if quick { 2_000 } else { 10_000 },
        parts: vec![
            "hooks".into(),
            "latency".into(),
            "ingest".into(),
            "verify".into(),
            "redact".into(),
        ],
        node: true,
        keep: false,
        baseline: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = |name: &str| -> usize {
            it.next()
                .and_then(|v| v.replace('_', "").parse().ok())
                .unwrap_or_else(|| panic!("{name} wants a number"))
        };
        match a.as_str() {
            "--runs" => o.runs = num("--runs").max(1),
            "--rows" => o.rows = num("--rows").max(100) as i64,
            "--answers" => o.answers = num("--answers").max(1),
            "--backlog" => o.backlog = num("--backlog").max(100),
            "--only" => {
                o.parts = it
                    .next()
                    .expect("--only wants a list")
                    .split(',')
                    .map(str::to_string)
                    .collect()
            }
            "--no-node" => o.node = false,
            "--keep" => o.keep = true,
            "--baseline" => o.baseline = Some(it.next().expect("--baseline wants a folder").into()),
            _ => {}
        }
    }
    Some(o)
}

pub struct Bins {
    pub stop: PathBuf,
    pub event: PathBuf,
    pub permission: PathBuf,
    pub sync: PathBuf,
    pub floor: PathBuf,
}

fn payload(name: &str) -> Value {
    let text = std::fs::read_to_string(format!("{PAYLOADS}/{name}"))
        .unwrap_or_else(|e| panic!("reading the payload fixture {name}: {e}"));
    let fixture: Value = serde_json::from_str(&text).unwrap();
    fixture["stdin"].clone()
}

/// The recorded payloads, and the other non-waiting events made from them.
pub struct Payloads {
    pub stop: Value,
    pub permission: Value,
    pub session_id: String,
    pub cwd: String,
}

impl Payloads {
    fn load() -> Payloads {
        let stop = payload(CC_STOP);
        let permission = payload(CC_PERMISSION);
        Payloads {
            session_id: stop["session_id"].as_str().unwrap().to_string(),
            cwd: stop["cwd"].as_str().unwrap().to_string(),
            stop,
            permission,
        }
    }

    fn key(&self) -> String {
        format!("claude-code:{}", self.session_id)
    }

    fn event(&self, name: &str) -> Value {
        let base = |p: &Value| {
            let mut v = json!({});
            for k in [
                "session_id",
                "transcript_path",
                "cwd",
                "prompt_id",
                "permission_mode",
            ] {
                v[k] = p[k].clone();
            }
            v["hook_event_name"] = json!(name);
            v
        };
        match name {
            "Stop" => self.stop.clone(),
            "UserPromptSubmit" => {
                let mut v = base(&self.stop);
                v["prompt"] = json!("Run the tests again and fix whatever fails.");
                v
            }
            "SessionStart" => {
                let mut v = base(&self.stop);
                v["source"] = json!("resume");
                v["model"] = json!("claude-opus-4");
                v
            }
            "PreToolUse" | "PostToolUse" => {
                let mut v = base(&self.permission);
                v["tool_name"] = self.permission["tool_name"].clone();
                v["tool_input"] = self.permission["tool_input"].clone();
                if name == "PostToolUse" {
                    v["tool_response"] = json!({"stdout": "", "stderr": "cat: /nonexistent-file-xyz: No such file or directory", "interrupted": false});
                }
                v
            }
            other => panic!("no payload for {other}"),
        }
    }
}

/// One process run over and over.
struct Scenario {
    id: String,
    program: PathBuf,
    args: Vec<String>,
    stdin: Vec<u8>,
    home: Home,
    /// Runs only every n-th round (the Node.js hook is slow).
    every: usize,
    /// A new session each run (SessionStart as it comes: the first event of a session).
    new_session: bool,
    runs: usize,
    samples: Vec<Sample>,
    failures: usize,
}

impl Scenario {
    fn new(id: &str, program: &Path, args: &[&str], stdin: &Value, home: &Home) -> Scenario {
        Scenario {
            id: id.into(),
            program: program.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            stdin: stdin.to_string().into_bytes(),
            home: home.clone(),
            every: 1,
            new_session: false,
            runs: 0,
            samples: Vec::new(),
            failures: 0,
        }
    }

    /// Peak memory of one run, measured under GNU time.
    fn rss(&mut self, file: &Path) -> Option<i64> {
        self.runs += 1;
        let mut c = self.home.command_rss(&self.program, file);
        c.args(&self.args);
        let _ = std::fs::remove_file(file);
        run::run(c, &self.input());
        run::read_rss(file)
    }

    fn input(&self) -> Vec<u8> {
        if !self.new_session {
            return self.stdin.clone();
        }
        let mut v: Value = serde_json::from_slice(&self.stdin).unwrap();
        v["session_id"] = json!(format!("0000cafe-0000-4000-8000-{:012}", self.runs));
        v.to_string().into_bytes()
    }

    fn once(&mut self, record: bool) {
        let mut c = self.home.command(&self.program);
        c.args(&self.args);
        let input = self.input();
        self.runs += 1;
        let r = run::run(c, &input);
        // Nothing is queued in these scenarios: any output, or a failing exit, is a failure.
        if !r.ok || !r.stdout.is_empty() {
            self.failures += 1;
        }
        if record {
            self.samples.push(r.sample);
        }
    }
}

fn sink_config(url: &str, token: &str, control: Value) -> Value {
    json!({
        "sinks": [{"name": "phone", "url": url, "tier": 1, "control": true, "token": token}],
        "control": control,
    })
}

fn file_size(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

fn first_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .unwrap_or_default()
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines().next().map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse::<u64>()
                    .unwrap_or(0)
            })
        })
        .unwrap_or(0);
    format!(
        "{cpu}, {cores} cores, {:.0} GiB; {}; {}; SQLite {}",
        mem as f64 / 1048576.0,
        first_line("uname", &["-sr"]),
        first_line(
            &std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()),
            &["--version"]
        ),
        rusqlite::version(),
    )
}

fn node_hook() -> Option<(PathBuf, String)> {
    let script = Path::new(MANIFEST).join("benches/hooks/hook.js");
    if !Path::new(MANIFEST)
        .join("benches/hooks/node_modules/better-sqlite3")
        .is_dir()
    {
        return None;
    }
    let v = first_line("node", &["--version"]);
    if v.is_empty() {
        return None;
    }
    Some((script, v))
}

fn print_row(label: &str, s: &Summary, extra: &str) {
    println!(
        "  {label:<46} {:>8.3} {:>8.3} {:>7.1} {:>7.3}  {extra}",
        s.median, s.p99, s.max_rss_mb, s.median_cpu
    );
}

/// Live sessions sp-sync polls while the "beside" hooks run (issue 15).
const BESIDE_SESSIONS: usize = 20;

fn hooks(o: &Opts, bins: &Bins, root: &Path, p: &Payloads) {
    println!("\n== Hooks: one process per event, nothing queued ==");
    let empty = Home::new(&root.join("empty"));
    let big = Home::new(&root.join("big"));
    let beside = Home::new(&root.join("beside"));
    let config = sink_config("http://127.0.0.1:9", "bench-token", json!({}));
    empty.write_config(&config);
    big.write_config(&config);
    // Beside: a real sp-sync long-polling a real receiver on loopback for 20 live sessions.
    let rx = spreceiver::Receiver::start(spreceiver::ReceiverOptions::default())
        .expect("the bench receiver");
    beside.write_config(&sink_config(&rx.url(), &rx.token(), json!({})));
    std::fs::create_dir_all(&big.state).unwrap();
    print!("filling {} rows of history ... ", o.rows);
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    let secs = fill::fill(&big.db_path(), o.rows, &p.key(), &p.session_id, &p.cwd);
    let counted = fill::count(&big.db_path());
    println!(
        "{counted} rows (plus the live session's {} messages, {} acks, {} events) in {secs:.1} s; file {:.0} MB",
        fill::LIVE_HISTORY,
        fill::LIVE_HISTORY,
        fill::LIVE_HISTORY,
        file_size(&big.db_path()) as f64 / 1e6
    );
    let events = [
        ("stop", "sp-stop Stop", &bins.stop, "Stop"),
        (
            "prompt",
            "sp-event UserPromptSubmit",
            &bins.event,
            "UserPromptSubmit",
        ),
        ("pre", "sp-event PreToolUse", &bins.event, "PreToolUse"),
        // Claude Code registers PreToolUse to sp-permission (it may park a headless run's
        // prompt): the hook it runs on every tool call. Not run from a baseline build, whose
        // sp-permission may wait for an answer there.
        (
            "pre-perm",
            "sp-permission PreToolUse (Claude Code's)",
            &bins.permission,
            "PreToolUse",
        ),
        ("post", "sp-event PostToolUse", &bins.event, "PostToolUse"),
        (
            "start",
            "sp-event SessionStart, new session (writes)",
            &bins.event,
            "SessionStart",
        ),
    ];
    let mut sc: Vec<Scenario> = Vec::new();
    sc.push(Scenario::new("floor", &bins.floor, &[], &p.stop, &empty));
    for (home, tag) in [(&empty, "empty"), (&big, "big"), (&beside, "beside")] {
        for (id, _, bin, ev) in events {
            let mut s = Scenario::new(
                &format!("{id}-{tag}"),
                bin,
                &["--harness", "claude-code"],
                &p.event(ev),
                home,
            );
            s.new_session = id == "start";
            sc.push(s);
        }
    }
    // The same scenarios from a baseline build, on databases it created (its schema).
    let base_homes = o.baseline.as_ref().map(|dir| {
        let homes = [
            Home::new(&root.join("empty-base")),
            Home::new(&root.join("big-base")),
        ];
        for (home, tag) in [(&homes[0], "empty"), (&homes[1], "big")] {
            home.write_config(&config);
            let mut first = p.event("SessionStart");
            if tag == "big" {
                first["session_id"] = json!("0000f111-0000-4000-8000-000000000000");
            }
            let mut c = home.command(&dir.join("sp-event"));
            c.args(["--harness", "claude-code"]);
            assert!(
                run::run(c, first.to_string().as_bytes()).ok,
                "baseline sp-event"
            );
            if tag == "big" {
                fill::fill(&home.db_path(), o.rows, &p.key(), &p.session_id, &p.cwd);
            }
            for (id, _, bin, ev) in events.iter().copied().filter(|e| e.0 != "pre-perm") {
                let bin = dir.join(bin.file_name().unwrap());
                let mut s = Scenario::new(
                    &format!("{id}-{tag}-base"),
                    &bin,
                    &["--harness", "claude-code"],
                    &p.event(ev),
                    home,
                );
                s.new_session = id == "start";
                sc.push(s);
            }
        }
        // Beside: the baseline's hooks on the same database and beside the same sp-sync (a
        // build of the same schema), so before and after share every round's load.
        for (id, _, bin, ev) in events.iter().copied().filter(|e| e.0 != "pre-perm") {
            let bin = dir.join(bin.file_name().unwrap());
            let mut s = Scenario::new(
                &format!("{id}-beside-base"),
                &bin,
                &["--harness", "claude-code"],
                &p.event(ev),
                &beside,
            );
            s.new_session = id == "start";
            s.runs = 1_000_000;
            sc.push(s);
        }
        homes
    });
    let node = if o.node { node_hook() } else { None };
    if let Some((script, _)) = &node {
        for (home, tag) in [(&empty, "empty"), (&big, "big")] {
            let mut s = Scenario::new(
                &format!("node-{tag}"),
                Path::new("node"),
                &[],
                &p.stop,
                home,
            );
            s.args = vec![script.to_string_lossy().into_owned()];
            s.every = 5;
            sc.push(s);
        }
    }
    // A SessionStart makes the session under test live (as in use; the big database has it).
    for home in [&empty, &beside] {
        let mut s = Scenario::new(
            "live",
            &bins.event,
            &["--harness", "claude-code"],
            &p.event("SessionStart"),
            home,
        );
        s.once(false);
    }
    // 19 more live sessions beside the one under test, then sp-sync, holding a poll for each.
    for i in 1..BESIDE_SESSIONS {
        let mut start = p.event("SessionStart");
        start["session_id"] = json!(format!("0000beef-0000-4000-8000-{i:012}"));
        let mut c = beside.command(&bins.event);
        c.args(["--harness", "claude-code"]);
        assert!(
            run::run(c, start.to_string().as_bytes()).ok,
            "a live session beside"
        );
    }
    let sync = latency::start_sync(&beside, &bins.sync);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    // Sessions sp-sync has polled (each poll is held up to the receiver's wait, then again).
    let polled = || {
        rx.requests()
            .iter()
            .filter(|r| r.route == Some(spreceiver::Route::Poll))
            .filter_map(|r| {
                r.url
                    .split("session=")
                    .nth(1)
                    .map(|q| q.split('&').next().unwrap_or("").to_string())
            })
            .collect::<std::collections::HashSet<_>>()
            .len()
    };
    while polled() < BESIDE_SESSIONS && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    println!(
        "beside: sp-sync long-polls {} live sessions on the receiver",
        polled()
    );
    let warmup = 10.min(o.runs);
    let rounds = warmup + o.runs;
    print!(
        "{} rounds over {} scenarios, interleaved ",
        rounds,
        sc.len()
    );
    std::io::stdout().flush().unwrap();
    // A new order each round (a fixed seed, so runs compare): a scenario that writes leaves
    // the disk busy for the next, and with a fixed order (rotated or not) the same scenario
    // always came next and paid for it (sp-event PreToolUse after UserPromptSubmit read up
    // to 1.3x sp-permission's same PreToolUse).
    let mut order: Vec<usize> = (0..sc.len()).collect();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for round in 0..rounds {
        shuffle(&mut order, &mut seed);
        for &k in &order {
            let s = &mut sc[k];
            if round % s.every == 0 {
                s.once(round >= warmup);
            }
        }
        if round % (rounds / 10).max(1) == 0 {
            print!(".");
            std::io::stdout().flush().unwrap();
        }
    }
    println!();
    // Peak memory, from a few runs of each under GNU time.
    let mut rss: std::collections::HashMap<String, i64> = Default::default();
    if run::have_time() {
        let file = root.join("rss.txt");
        for s in sc.iter_mut() {
            let n = if s.id.starts_with("node") { 3 } else { 10 };
            let peak = (0..n).filter_map(|_| s.rss(&file)).max();
            if let Some(kb) = peak {
                rss.insert(s.id.clone(), kb);
            }
        }
    }
    let get = |id: &str| {
        sc.iter().find(|s| s.id == id).map(|s| {
            let mut m = summarize(&s.samples);
            m.max_rss_mb = rss
                .get(id)
                .map(|kb| *kb as f64 / 1024.0)
                .unwrap_or(f64::NAN);
            m
        })
    };
    let floor = get("floor").unwrap();
    println!(
        "\n  {:<46} {:>8} {:>8} {:>7} {:>7}  vs floor / target",
        "scenario (ms; peak RSS MB; CPU ms)", "median", "p99", "RSS", "CPU"
    );
    print_row(
        "process floor: trivial binary reading stdin",
        &floor,
        "1.00x",
    );
    println!("  -- alone (no other process has the database open), empty database: only the live session --");
    for (id, label, ..) in events {
        let s = get(&format!("{id}-empty")).unwrap();
        let ratio = s.median / floor.median;
        let ok = ratio <= 3.0 && s.median < 3.0;
        print_row(
            label,
            &s,
            &format!(
                "{ratio:.2}x floor; target <= 3x and < 3 ms: {}",
                verdict(ok)
            ),
        );
    }
    if get("node-empty").is_some() {
        let s = get("node-empty").unwrap();
        let stop = get("stop-empty").unwrap();
        print_row(
            "node + better-sqlite3 Stop (same look-up)",
            &s,
            &format!(
                "{:.2}x floor; {:.1}x sp-stop",
                s.median / floor.median,
                s.median / stop.median
            ),
        );
    }
    println!("  -- alone, {} rows of history --", o.rows);
    for (id, label, ..) in events {
        let s = get(&format!("{id}-big")).unwrap();
        let e = get(&format!("{id}-empty")).unwrap();
        let ratio = s.median / e.median;
        print_row(
            label,
            &s,
            &format!(
                "{ratio:.2}x empty ({:.2}x floor); target <= 1.2x empty: {}",
                s.median / floor.median,
                verdict(ratio <= 1.2)
            ),
        );
    }
    if let (Some(s), Some(e)) = (get("node-big"), get("node-empty")) {
        print_row(
            "node + better-sqlite3 Stop (same look-up)",
            &s,
            &format!("{:.2}x empty", s.median / e.median),
        );
    }
    if let Some(dir) = &o.baseline {
        println!(
            "  -- baseline build {} (alone), and this build's change --",
            dir.display()
        );
        for tag in ["empty", "big"] {
            for (id, label, ..) in events {
                let (Some(b), Some(n)) = (
                    get(&format!("{id}-{tag}-base")),
                    get(&format!("{id}-{tag}")),
                ) else {
                    continue;
                };
                print_row(
                    &format!("{label} [{tag}]"),
                    &b,
                    &format!(
                        "{:.2}x floor; this build {:.3} ms = {:+.0}%",
                        b.median / floor.median,
                        n.median,
                        (n.median / b.median - 1.0) * 100.0
                    ),
                );
            }
        }
    }
    drop(base_homes);
    println!("  -- beside a running sp-sync long-polling {BESIDE_SESSIONS} live sessions --");
    let p90 = |id: &str| {
        sc.iter()
            .find(|s| s.id == id)
            .map(|s| {
                let wall: Vec<f64> = s.samples.iter().map(|x| stats::ms(x.wall)).collect();
                stats::percentile(&wall, 90.0)
            })
            .unwrap_or(f64::NAN)
    };
    let floor_p90 = p90("floor");
    println!("  (p90: floor {floor_p90:.3} ms; the ratio of p90s follows each median ratio)");
    for (id, label, ..) in events {
        let s = get(&format!("{id}-beside")).unwrap();
        let ratio = s.median / floor.median;
        let ratio90 = p90(&format!("{id}-beside")) / floor_p90;
        // Issue 15: the hooks that run on every tool call stay within 1.5x of the floor;
        // issue 28: sp-stop too.
        let (ok, target) = if matches!(id, "pre" | "post" | "stop") {
            (ratio <= 1.5, "<= 1.5x")
        } else {
            (ratio <= 3.0 && s.median < 3.0, "<= 3x and < 3 ms")
        };
        print_row(
            label,
            &s,
            &format!(
                "{ratio:.2}x floor (p90 {ratio90:.2}x); target {target}: {}",
                verdict(ok)
            ),
        );
    }
    if o.baseline.is_some() {
        for (id, label, ..) in events {
            let Some(b) = get(&format!("{id}-beside-base")) else {
                continue;
            };
            let n = get(&format!("{id}-beside")).unwrap();
            print_row(
                &format!("{label} [baseline]"),
                &b,
                &format!(
                    "{:.2}x floor (p90 {:.2}x); this build {:+.0}%",
                    b.median / floor.median,
                    p90(&format!("{id}-beside-base")) / floor_p90,
                    (n.median / b.median - 1.0) * 100.0
                ),
            );
        }
    }
    drop(sync);
    drop(rx);
    let max_rss = sc
        .iter()
        .filter(|s| !s.id.starts_with("node") && s.id != "floor" && !s.id.ends_with("-base"))
        .filter_map(|s| get(&s.id).map(|m| m.max_rss_mb))
        .fold(0.0, f64::max);
    println!(
        "\n  peak memory of a hook process: {max_rss:.1} MB (floor {:.1} MB); target < 10 MB: {}",
        floor.max_rss_mb,
        verdict(max_rss < 10.0)
    );
    let failures: usize = sc.iter().map(|s| s.failures).sum();
    println!(
        "  runs per scenario: {} ({} for Node.js); runs that printed something or failed: {failures}",
        o.runs,
        o.runs / 5
    );
    println!(
        "  sizes: sp-stop {:.2} MB, sp-event {:.2} MB, sp-permission {:.2} MB, floor {:.2} MB",
        file_size(&bins.stop) as f64 / 1e6,
        file_size(&bins.event) as f64 / 1e6,
        file_size(&bins.permission) as f64 / 1e6,
        file_size(&bins.floor) as f64 / 1e6
    );
}

fn callgrind(o: &Opts, bins: &Bins, root: &Path, p: &Payloads) {
    println!("\n== Instructions (valgrind --tool=callgrind; repeatable whatever the machine is doing) ==");
    if first_line("valgrind", &["--version"]).is_empty() {
        println!("  skipped: valgrind is not installed");
        return;
    }
    let empty = Home::new(&root.join("cg-empty"));
    let big = Home::new(&root.join("cg-big"));
    let config = sink_config("http://127.0.0.1:9", "bench-token", json!({}));
    empty.write_config(&config);
    big.write_config(&config);
    std::fs::create_dir_all(&big.state).unwrap();
    fill::fill(&big.db_path(), o.rows, &p.key(), &p.session_id, &p.cwd);
    let count = |home: &Home, bin: &Path, args: &[&str], ev: &str| -> u64 {
        let out = root.join("cg.out");
        let mut c = home.command(Path::new("valgrind"));
        c.arg("--tool=callgrind")
            .arg(format!("--callgrind-out-file={}", out.display()))
            .arg(bin)
            .args(args);
        let r = run::run(c, p.event(ev).to_string().as_bytes());
        assert!(r.ok, "valgrind run failed");
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        text.lines()
            .find_map(|l| {
                l.strip_prefix("totals:")
                    .or_else(|| l.strip_prefix("summary:"))
            })
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    // Make the sessions live first, and quiet (a PostToolUse with nothing pending leaves the
    // session's quiet marker), then count a second, settled run.
    for home in [&empty, &big] {
        for ev in ["SessionStart", "PostToolUse"] {
            count(home, &bins.event, &["--harness", "claude-code"], ev);
        }
    }
    let floor = count(&empty, &bins.floor, &[], "Stop");
    println!("  {:<46} {:>14}", "process floor", floor);
    for (label, home) in [
        ("sp-stop Stop, empty database", &empty),
        ("sp-stop Stop, big database", &big),
    ] {
        count(home, &bins.stop, &["--harness", "claude-code"], "Stop");
        let n = count(home, &bins.stop, &["--harness", "claude-code"], "Stop");
        println!(
            "  {label:<46} {n:>14}   {:.1}x floor",
            n as f64 / floor as f64
        );
    }
    for (label, home) in [
        ("sp-event PostToolUse, empty database", &empty),
        ("sp-event PostToolUse, big database", &big),
    ] {
        let n = count(
            home,
            &bins.event,
            &["--harness", "claude-code"],
            "PostToolUse",
        );
        println!(
            "  {label:<46} {n:>14}   {:.1}x floor",
            n as f64 / floor as f64
        );
    }
}

fn main() {
    let Some(o) = parse_opts() else { return };
    let target_dir = Path::new(env!("CARGO_BIN_EXE_sp-stop"))
        .parent()
        .unwrap()
        .to_path_buf();
    let bins = Bins {
        stop: env!("CARGO_BIN_EXE_sp-stop").into(),
        event: env!("CARGO_BIN_EXE_sp-event").into(),
        permission: env!("CARGO_BIN_EXE_sp-permission").into(),
        sync: env!("CARGO_BIN_EXE_sp-sync").into(),
        floor: run::build_floor(
            &Path::new(MANIFEST).join("benches/hooks/floor.rs"),
            &target_dir,
        ),
    };
    let tmp = tempfile::Builder::new()
        .prefix("sp-bench-")
        .tempdir()
        .unwrap();
    let root = tmp.path().to_path_buf();
    let p = Payloads::load();
    println!(
        "sessionpipe-control hooks benchmark ({})",
        if o.quick { "quick" } else { "full" }
    );
    println!("machine: {}", machine());
    println!("binaries: {}", target_dir.display());
    if o.node {
        match node_hook() {
            Some((_, v)) => println!("node: {v} with better-sqlite3 from benches/hooks/node_modules"),
            None => println!(
                "node: skipped (run `npm ci --prefix crates/sender/benches/hooks` to compare with a Node.js hook)"
            ),
        }
    }
    for part in &o.parts {
        match part.as_str() {
            "hooks" => hooks(&o, &bins, &root, &p),
            "latency" => latency::run(&o, &bins, &root, &p),
            "ingest" => ingest::run(&o, &bins, &root),
            "callgrind" => callgrind(&o, &bins, &root, &p),
            "verify" => verify::run(&o),
            "redact" => redact::run(&o),
            other => println!(
                "unknown part {other:?} (hooks, latency, ingest, verify, redact, callgrind)"
            ),
        }
    }
    if o.keep {
        let kept = tmp.keep();
        println!("\nkept {}", kept.display());
    }
}

/// Fisher-Yates with xorshift64 from `seed` (no crate for a benchmark's order).
fn shuffle(v: &mut [usize], seed: &mut u64) {
    for i in (1..v.len()).rev() {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        v.swap(i, (*seed % (i as u64 + 1)) as usize);
    }
}
