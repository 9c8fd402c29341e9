//! Headless agent runs between turns (DECISIONS 38 `resume`, `fork`, `start`): the one
//! runner sp-sync uses to launch an agent with no one at its terminal.
//!
//! - The command line comes from the harness's row ([`Headless`]): no shell, no flag that
//!   skips the harness's approvals, its hooks as installed, so its prompts reach the phone.
//! - A run is recorded in the store before anything is spawned ([`request`]), waits while
//!   [`MAX_RUNNING`] run (at most [`crate::store::RUNS_WAITING_MAX`] wait), and is launched
//!   by sp-sync's [`pass`] as a supervisor: `sp-sync --run-supervisor ID`, in its own session,
//!   so it outlives an sp-sync restart. The supervisor claims the run once, starts the agent
//!   in the session's folder as leader of its own process group, copies its stdout and
//!   stderr to `runs/ID.log` and `runs/ID.err` under the state folder (each capped), kills
//!   the group at [`RUN_TIMEOUT_MS`], and records how the agent ended.
//! - [`pass`] reads each running run's log (after a restart, from the start: it adopts the
//!   runs the last sp-sync left), sends `progress` acks, and at the end the one final ack:
//!   `delivered` with mode, session and the redacted reply, or `failed` with the log's word.
use crate::clock::{now_ms, Millis};
use crate::harness::caps::Headless;
use crate::harness::{Harness, RunOutput};
use crate::store::{NewRun, RunEnd, RunRow, Store};
use anyhow::{anyhow, Context, Result};
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// At most this many runs at once; the rest wait in the store.
pub const MAX_RUNNING: usize = 3;
/// A run's whole life; its process group is killed then.
pub const RUN_TIMEOUT_MS: Millis = 30 * 60_000;
/// Each run's stdout log keeps at most this much (the rest is read and dropped).
pub const LOG_MAX: u64 = 8 << 20;
/// Each run's stderr log keeps at most this much.
pub const ERR_MAX: u64 = 256 << 10;
/// `progress` acks at most this often per run.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(500);
/// The hidden sp-sync argument that makes it a run's supervisor.
pub const SUPERVISOR_ARG: &str = "--run-supervisor";
/// Set in a run's environment: the run's id, so its hooks can tell it is one of ours.
pub const RUN_ENV: &str = "SESSIONPIPE_RUN";
/// A launched run whose supervisor has not claimed it within this long never will.
const CLAIM_GRACE_MS: Millis = 30_000;

/// What a run does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The session's earlier conversation plus the text, in the same session.
    Resume,
    /// As resume, in a new session (the original transcript untouched).
    Fork,
    /// A new session in a folder.
    Start,
    /// A resume with no new text (a parked tool call).
    Continue,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Resume => "resume",
            Kind::Fork => "fork",
            Kind::Start => "start",
            Kind::Continue => "continue",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        [Kind::Resume, Kind::Fork, Kind::Start, Kind::Continue]
            .into_iter()
            .find(|k| k.as_str() == s)
    }

    /// The final ack's `mode` (DECISIONS 38).
    pub fn mode(self) -> &'static str {
        match self {
            Kind::Resume | Kind::Continue => "resume",
            Kind::Fork => "fork",
            Kind::Start => "start",
        }
    }
}

/// A run to ask for.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub kind: Kind,
    pub harness: Harness,
    /// The harness's session id (resume, fork, continue).
    pub session_id: Option<&'a str>,
    /// Our session key (`<harness>:<id>`), so no two runs of ours write one transcript.
    pub session_key: Option<&'a str>,
    /// The folder the run starts in: the session's own (`cwd` of its hooks).
    pub cwd: &'a str,
    pub text: Option<&'a str>,
    /// The control message the run delivers; its final ack follows the run's end.
    pub message_id: Option<&'a str>,
}

/// Where the harness's program is: the file its variable names, else the first executable of
/// that name on PATH. None when there is none (nothing of it can be launched).
pub fn program_path(h: &Headless) -> Option<std::path::PathBuf> {
    locate(std::env::var_os(h.program_env), h.program)
}

/// [`program_path`] with the variable's value given: a path is taken as it is, a bare name
/// (the variable's, else `program`) looked up on PATH as Command would.
fn locate(var: Option<std::ffi::OsString>, program: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    match var.filter(|v| !v.is_empty()).map(std::path::PathBuf::from) {
        Some(p) if p.components().count() > 1 => runnable(&p).then_some(p),
        Some(p) => find_on_path(&p.to_string_lossy(), runnable),
        None => find_on_path(program, runnable),
    }
}

fn find_on_path(
    name: &str,
    runnable: impl Fn(&std::path::Path) -> bool,
) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| runnable(p))
}

/// The argument list of `kind` for `harness`, program first; `Err` names why there is none
/// (the ack's `unsupported` detail).
pub fn command(
    harness: Harness,
    kind: Kind,
    session: Option<&str>,
    text: Option<&str>,
) -> std::result::Result<Vec<String>, String> {
    let h: Headless = harness.caps().headless.ok_or_else(|| {
        format!(
            "{} has no proven headless run, so nothing can deliver this while no turn is running (DECISIONS 38)",
            harness.name()
        )
    })?;
    let args = match kind {
        Kind::Resume => Some(h.resume),
        Kind::Fork => h.fork,
        Kind::Start => Some(h.start),
        Kind::Continue => h.resume_quiet,
    }
    .ok_or_else(|| {
        format!(
            "{} has no headless {} (DECISIONS 38)",
            harness.name(),
            kind.as_str()
        )
    })?;
    let program = std::env::var(h.program_env)
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| h.program.to_string());
    let mut out = vec![program];
    for a in args {
        out.push(match *a {
            "{session}" => session
                .ok_or_else(|| format!("a {} needs a session id", kind.as_str()))?
                .to_string(),
            "{text}" => text
                .ok_or_else(|| format!("a {} needs text", kind.as_str()))?
                .to_string(),
            a => a.to_string(),
        });
    }
    Ok(out)
}

/// The harnesses a run can resume: their ended sessions are still polled.
pub fn resumable() -> Vec<&'static str> {
    Harness::ALL
        .iter()
        .filter(|h| h.caps().headless.is_some())
        .map(|h| h.name())
        .collect()
}

/// DECISIONS 38's delivery decision for a prompt no hook has taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Leave it queued: a hook (the turn's Stop), the API loop or our run in flight takes it.
    Wait,
    Run(Kind),
    Unsupported(String),
}

/// What is known of a prompt's session when deciding.
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionState {
    /// Whether the harness process its hooks last ran under is alive; None: never recorded.
    pub live: Option<bool>,
    pub turn_open: bool,
    /// A turn of it ended since it started (so it is idle, not just starting).
    pub had_turn: bool,
    pub ended: bool,
    /// A run of ours holds it: the next prompt waits, then resumes again.
    pub run_in_flight: bool,
    /// Driven through a server API (OpenCode): the API loop delivers.
    pub api: bool,
    /// How long the prompt has waited.
    pub waited_ms: Millis,
    /// sp-sync cannot find the harness's program (on its PATH, or where its variable says), so
    /// no run of it can be launched.
    pub no_program: bool,
}

/// A live session counts as idle (forked, or `unsupported` where the harness cannot fork) only
/// once its prompt has waited this long, so a Stop hook already on its way takes it first.
pub const FORK_AFTER_MS: Millis = 2_000;

/// api → turn (live, mid-turn) → fork (live and idle, where the harness forks) → resume (no
/// live process holds it) → else `unsupported`, naming why. A harness whose turn state is not
/// reported (no headless run) keeps a live session's prompt for its next Stop.
pub fn decide(harness: Harness, s: SessionState) -> Delivery {
    if s.api || s.run_in_flight {
        return Delivery::Wait;
    }
    let name = harness.name();
    let headless = harness.caps().headless;
    let live = match s.live {
        Some(l) => l,
        // Never recorded (hooks older than this): only an ended session is known free.
        None if s.ended => false,
        None => return Delivery::Wait,
    };
    match (live, headless) {
        (true, _) if s.turn_open => Delivery::Wait,
        (true, None) => Delivery::Wait,
        // Idle only once a turn ended and the prompt waited: a Stop on its way goes first.
        (true, Some(_)) if !s.had_turn || s.waited_ms < FORK_AFTER_MS => Delivery::Wait,
        // Nothing to fork with: the live session's next Stop still takes it (`turn`).
        (true, Some(h)) if h.fork.is_some() && s.no_program => Delivery::Wait,
        (true, Some(h)) if h.fork.is_some() => Delivery::Run(Kind::Fork),
        (true, Some(_)) => Delivery::Unsupported(format!(
            "the {name} session is open and idle in its terminal, and {name} has no headless fork: \
             a resume would be a second writer on its transcript. Type it there, or end that session \
             and send again (DECISIONS 38)"
        )),
        (false, Some(h)) if s.no_program => Delivery::Unsupported(format!(
            "no {name} process holds this session and sp-sync cannot find `{}` to resume it: put \
             it on sp-sync's PATH (as cron runs it) or name it in ${} (DECISIONS 38)",
            h.program, h.program_env
        )),
        (false, Some(_)) => Delivery::Run(Kind::Resume),
        (false, None) => Delivery::Unsupported(format!(
            "no {name} process holds this session and {name} has no proven headless resume, so \
             nothing can deliver it (DECISIONS 38)"
        )),
    }
}

/// Decides each queued prompt ([`decide`]) and records the runs that deliver them.
pub fn deliver_waiting(store: &mut Store) -> Result<()> {
    let now = now_ms();
    for p in store.waiting_prompts(64)? {
        let Some(harness) = Harness::parse(&p.harness) else {
            continue;
        };
        let state = SessionState {
            live: p
                .process
                .map(|(pid, start)| crate::procs::alive(pid, start)),
            turn_open: p.turn_open,
            had_turn: p.had_turn,
            ended: p.ended,
            run_in_flight: store.run_of_session(&p.session_key)?.is_some(),
            // An `sp codex` thread sp-sync follows is the bridge's to deliver (its app-server
            // is the live, idle process here: no fork, and never a second writer).
            api: p.api
                || (harness == Harness::Codex && crate::codex_server::followed(&p.session_id)),
            waited_ms: now - p.received_ms,
            no_program: harness
                .caps()
                .headless
                .is_some_and(|h| program_path(&h).is_none()),
        };
        let kind = match decide(harness, state) {
            Delivery::Wait => continue,
            Delivery::Unsupported(why) => {
                store.finish_message(&p.id, crate::wire::control::Outcome::Unsupported, &why)?;
                continue;
            }
            Delivery::Run(k) => k,
        };
        let cwd = p
            .cwd
            .as_deref()
            .map(|c| crate::paths::untilde(c).to_string_lossy().into_owned())
            .unwrap_or_default();
        // Later messages to a forked session go to the same fork.
        let fork = match kind {
            Kind::Fork => store.last_fork(&p.session_key)?,
            _ => None,
        };
        let argv = match &fork {
            Some(f) => command(harness, Kind::Resume, Some(f), p.text.as_deref()),
            None => command(harness, kind, Some(&p.session_id), p.text.as_deref()),
        };
        let r = Request {
            kind,
            harness,
            session_id: Some(&p.session_id),
            session_key: Some(&p.session_key),
            cwd: &cwd,
            text: p.text.as_deref(),
            message_id: Some(&p.id),
        };
        let recorded = argv
            .map_err(|e| anyhow!(e))
            .and_then(|argv| record(store, &r, argv));
        match recorded {
            Ok(Some(id)) => crate::logging::info(&format!(
                "prompt {} to {}: {} run {id}",
                p.id,
                p.session_key,
                kind.as_str()
            )),
            Ok(None) => {}
            Err(e) => store.finish_message(
                &p.id,
                crate::wire::control::Outcome::Failed,
                &format!("cannot start a {} run: {e:#}", kind.as_str()),
            )?,
        }
    }
    Ok(())
}

/// Records a run (it waits for [`pass`] to launch it). `Ok(None)`: its message was no
/// longer queued (taken by a hook or another run), nothing recorded. `Err` with no run:
/// there is no such command for the harness, or too many runs wait.
pub fn request(store: &mut Store, r: &Request) -> Result<Option<String>> {
    let argv = command(r.harness, r.kind, r.session_id, r.text).map_err(|e| anyhow!(e))?;
    record(store, r, argv)
}

fn record(store: &mut Store, r: &Request, argv: Vec<String>) -> Result<Option<String>> {
    if r.cwd.is_empty() || !std::path::Path::new(r.cwd).is_absolute() {
        return Err(anyhow!(
            "no folder is known for this session (a run starts in the session's own folder)"
        ));
    }
    let id = ulid::Ulid::new().to_string();
    let recorded = store.new_run(&NewRun {
        id: &id,
        message_id: r.message_id,
        session_key: r.session_key,
        harness: r.harness.name(),
        kind: r.kind.as_str(),
        cwd: r.cwd,
        argv: &argv,
    })?;
    Ok(recorded.then_some(id))
}

/// The folder of the runs' logs.
pub fn dir() -> PathBuf {
    crate::paths::state_dir().join("runs")
}

/// A run's stdout (the harness's JSON lines).
pub fn log_path(id: &str) -> PathBuf {
    dir().join(format!("{id}.log"))
}

/// A run's stderr.
pub fn err_path(id: &str) -> PathBuf {
    dir().join(format!("{id}.err"))
}

/// A run id is a ULID; anything else never names a file.
pub fn valid_id(id: &str) -> bool {
    id.len() == 26 && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// What sp-sync keeps between passes for each running run.
#[derive(Default)]
pub struct Tracker {
    runs: HashMap<String, Seen>,
}

#[derive(Default)]
struct Seen {
    offset: u64,
    partial: Vec<u8>,
    out: RunOutput,
    sent: String,
    last_progress: Option<Instant>,
}

/// One pass of sp-sync's runner: launches the waiting runs there is room for, reads the
/// running ones' logs, sends their progress, and finishes those that ended (or whose
/// supervisor is gone). Returns whether any run is open.
pub fn pass(store: &mut Store, t: &mut Tracker) -> Result<bool> {
    deliver_waiting(store)?;
    for r in store.runs_to_launch(MAX_RUNNING, RUN_TIMEOUT_MS)? {
        if let Err(e) = spawn_supervisor(&r.id) {
            crate::logging::warn(&format!("run {}: {e:#}", r.id));
            store.run_exited(&r.id, &format!("cannot start its supervisor: {e:#}"))?;
        }
    }
    let open = store.open_runs()?;
    let now = now_ms();
    for r in &open {
        if r.state != "running" {
            continue;
        }
        let Some(harness) = Harness::parse(&r.harness) else {
            continue;
        };
        let seen = t.runs.entry(r.id.clone()).or_default();
        read_new(&r.id, harness, seen);
        let exit = match &r.exit {
            Some(e) => Some(e.clone()),
            None if r.sup_pid.is_none() => (now - r.started_ms.unwrap_or(now) > CLAIM_GRACE_MS)
                .then(|| "its supervisor never started".to_string()),
            None => {
                let alive = r
                    .sup_pid
                    .zip(r.sup_start)
                    .is_some_and(|(p, s)| crate::procs::alive(p, s));
                if alive {
                    None
                } else {
                    // It may have written its exit since the row was read.
                    match store.run(&r.id)?.and_then(|x| x.exit) {
                        Some(e) => Some(e),
                        None => {
                            Some("its supervisor ended without saying how the agent ended".into())
                        }
                    }
                }
            }
        };
        if let Some(exit) = exit {
            read_new(&r.id, harness, seen);
            let end = ending(r, &seen.out, &exit);
            store.finish_run(&r.id, &end)?;
            crate::logging::info(&format!(
                "run {} ({} {}) ended: {exit}",
                r.id, r.harness, r.kind
            ));
            t.runs.remove(&r.id);
            continue;
        }
        let so_far = seen.out.so_far();
        if r.message_id.is_some()
            && so_far != seen.sent
            && seen
                .last_progress
                .is_none_or(|at| at.elapsed() >= PROGRESS_EVERY)
        {
            seen.sent = so_far;
            seen.last_progress = Some(Instant::now());
            if let Err(e) = store.run_progress(&r.id, &crate::wire::control::ack_reply(&seen.sent))
            {
                crate::logging::debug(&format!("run {}: progress not stored: {e:#}", r.id));
            }
        }
    }
    t.runs.retain(|id, _| open.iter().any(|r| &r.id == id));
    Ok(open.iter().any(|r| r.state != "done"))
}

/// How a run that ended is acked.
fn ending(r: &RunRow, out: &RunOutput, exit: &str) -> RunEnd {
    let kind = Kind::parse(&r.kind).unwrap_or(Kind::Resume);
    let ok = exit == "exit 0" && out.error.is_none() && out.result.is_some();
    let detail = if ok {
        None
    } else {
        let why = out
            .error
            .clone()
            .or_else(|| last_words(&r.id))
            .unwrap_or_else(|| "it gave no answer".into());
        Some(format!(
            "the {} run {}: {why} ({exit})",
            kind.as_str(),
            r.id
        ))
    };
    RunEnd {
        ok,
        mode: kind.mode(),
        // A resume stays in its session; a fork or a start names the new one.
        session: match kind {
            Kind::Fork | Kind::Start => out.session.clone(),
            Kind::Resume | Kind::Continue => None,
        },
        reply: ok.then(|| crate::wire::control::ack_reply(out.reply())),
        detail,
    }
}

/// The last non-empty line of a run's stderr, for a failure's detail.
fn last_words(id: &str) -> Option<String> {
    let text = std::fs::read(err_path(id)).ok()?;
    let text = String::from_utf8_lossy(&text);
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?;
    Some(line.trim().chars().take(500).collect())
}

/// Reads what the run's stdout log gained since the last pass, whole lines only.
fn read_new(id: &str, harness: Harness, seen: &mut Seen) {
    let Some(h) = harness.caps().headless else {
        return;
    };
    let Ok(mut f) = std::fs::File::open(log_path(id)) else {
        return;
    };
    if f.seek(SeekFrom::Start(seen.offset)).is_err() {
        return;
    }
    let mut buf = Vec::new();
    let Ok(n) = f.take(LOG_MAX).read_to_end(&mut buf) else {
        return;
    };
    seen.offset += n as u64;
    seen.partial.extend_from_slice(&buf);
    while let Some(nl) = seen.partial.iter().position(|b| *b == b'\n') {
        let line: Vec<u8> = seen.partial.drain(..=nl).collect();
        (h.read_line)(&mut seen.out, &line);
    }
    // A line longer than the whole log cap is never whole: drop it.
    if seen.partial.len() as u64 > LOG_MAX {
        seen.partial.clear();
    }
}

/// Starts `sp-sync --run-supervisor ID` in its own session, and reaps it when it ends (a
/// restarted sp-sync's runs are reaped by init).
fn spawn_supervisor(id: &str) -> Result<()> {
    let exe = std::env::current_exe().context("cannot locate sp-sync")?;
    let mut cmd = Command::new(exe);
    cmd.arg(SUPERVISOR_ARG)
        .arg(id)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setsid is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            // Its own session: neither sp-sync's end nor its group's signals reach it.
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("cannot start the run's supervisor")?;
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    Ok(())
}

/// The supervisor's `main`: claims run `id` once, runs its agent to the end or the
/// deadline, records how it ended. Exit 0 unless it could not record anything.
pub fn supervise(id: &str) -> ExitCode {
    match supervise_inner(id) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            crate::logging::error(&format!("run {id}: {e:#}"));
            ExitCode::FAILURE
        }
    }
}

fn supervise_inner(id: &str) -> Result<()> {
    if !valid_id(id) {
        return Err(anyhow!("not a run id: {id:?}"));
    }
    let mut store = crate::store::open(&crate::paths::database_file(), Duration::from_secs(10))?;
    let me = std::process::id() as i64;
    let start = crate::procs::start_time(me).unwrap_or(0);
    let Some(run) = store.claim_run(id, me, start)? else {
        // Another supervisor has it, or it is no longer running: nothing to do.
        return Ok(());
    };
    let exit = match run_agent(&mut store, &run) {
        Ok(e) => e,
        Err(e) => format!("{e:#}"),
    };
    store.run_exited(id, &exit)?;
    Ok(())
}

/// Runs the agent; returns how it ended ("exit 0", "signal 9", "timed out after …").
fn run_agent(store: &mut Store, run: &RunRow) -> Result<String> {
    let Some((program, args)) = run.argv.split_first() else {
        return Ok("no command".into());
    };
    crate::files::private_dir(&dir())
        .map_err(|e| anyhow!("cannot use the runs folder {}: {e}", dir().display()))?;
    let (log, _) = crate::files::open_private(&log_path(&run.id), false)?;
    let (err, _) = crate::files::open_private(&err_path(&run.id), false)?;
    let mut cmd = Command::new(program);
    for h in Harness::ALL {
        for var in h.caps().headless.map_or(&[][..], |h| h.child_env) {
            cmd.env_remove(var);
        }
    }
    cmd.args(args)
        .current_dir(&run.cwd)
        .env(RUN_ENV, &run.id)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Leader of its own group: the deadline kills it and everything it started.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return Ok(format!("cannot start {program} in {}: {e}", run.cwd)),
    };
    let pgid = child.id() as i32;
    store.run_agent_started(&run.id, pgid as i64)?;
    let out = child.stdout.take().map(|s| copy_capped(s, log, LOG_MAX));
    let errs = child.stderr.take().map(|s| copy_capped(s, err, ERR_MAX));
    let deadline = run.deadline_ms.unwrap_or(now_ms() + RUN_TIMEOUT_MS);
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if !timed_out && now_ms() >= deadline {
            timed_out = true;
            kill_group(pgid, libc::SIGTERM);
            let until = Instant::now() + Duration::from_secs(5);
            while Instant::now() < until && child.try_wait()?.is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
            kill_group(pgid, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Whatever it left behind in its group goes too, so the pipes close.
    kill_group(pgid, libc::SIGKILL);
    let copies: Vec<_> = [out, errs].into_iter().flatten().collect();
    if !join_within(copies, DRAIN_WAIT) {
        // A process that left the group (setsid) holds them open: the run ended all the same.
        crate::logging::warn(&format!(
            "run {}: its output is still held open {}s after the agent ended; no longer read",
            run.id,
            DRAIN_WAIT.as_secs()
        ));
    }
    use std::os::unix::process::ExitStatusExt;
    Ok(if timed_out {
        format!("timed out after {} min", RUN_TIMEOUT_MS / 60_000)
    } else if let Some(c) = status.code() {
        format!("exit {c}")
    } else {
        format!("signal {}", status.signal().unwrap_or(0))
    })
}

/// How long the copies of an ended agent's output may still take.
const DRAIN_WAIT: Duration = Duration::from_secs(5);

/// Waits for `copies` up to `limit`; whether all ended (the others are left to end with the
/// process).
fn join_within(copies: Vec<std::thread::JoinHandle<()>>, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    while copies.iter().any(|h| !h.is_finished()) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut all = true;
    for h in copies {
        if h.is_finished() {
            let _ = h.join();
        } else {
            all = false;
        }
    }
    all
}

fn kill_group(pgid: i32, sig: i32) {
    if pgid > 1 {
        // SAFETY: a plain signal to the process group we made the agent lead.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

/// Copies a pipe to its log, keeping the first `cap` bytes and reading the rest away (so
/// the agent never blocks on a full pipe).
fn copy_capped(
    mut from: impl Read + Send + 'static,
    mut to: std::fs::File,
    cap: u64,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut kept = 0u64;
        let mut buf = [0u8; 16 << 10];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let room = cap.saturating_sub(kept).min(n as u64) as usize;
            if room > 0 && to.write_all(&buf[..room]).is_ok() {
                kept += room as u64;
            }
        }
        let _ = to.flush();
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An agent's output pipe held open by a process outside its group (which the group kill
    /// does not reach) no longer holds its supervisor: the copy is waited for a bounded time.
    #[test]
    fn an_output_pipe_held_open_elsewhere_is_waited_for_a_bounded_time() {
        let d = tempfile::tempdir().unwrap();
        let log = std::fs::File::create(d.path().join("log")).unwrap();
        let (reader, mut writer) = std::io::pipe().unwrap();
        writer.write_all(b"line\n").unwrap();
        let copy = copy_capped(reader, log, 3);
        let started = Instant::now();
        assert!(!join_within(vec![copy], Duration::from_millis(300)));
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_secs(2),
            "{waited:?}"
        );
        // Closed: the copy ends, keeping its cap.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(writer);
        let log = std::fs::File::create(d.path().join("log2")).unwrap();
        assert!(join_within(
            vec![copy_capped(reader, log, 3)],
            Duration::from_secs(5)
        ));
        assert_eq!(std::fs::read(d.path().join("log")).unwrap(), b"lin");
    }

    #[test]
    fn commands_come_from_the_harness_row_and_never_skip_approvals() {
        let argv = command(Harness::ClaudeCode, Kind::Resume, Some("S1"), Some("-rf /")).unwrap();
        assert_eq!(argv[1..4], ["-p", "--resume", "S1"]);
        // The text is one argument after `--`: never read as a flag.
        assert_eq!(argv[argv.len() - 2..], ["--", "-rf /"]);
        let fork = command(Harness::ClaudeCode, Kind::Fork, Some("S1"), Some("x")).unwrap();
        assert!(fork.contains(&"--fork-session".to_string()));
        let codex = command(Harness::Codex, Kind::Resume, Some("T1"), Some("x")).unwrap();
        assert_eq!(codex[1..5], ["exec", "--json", "resume", "T1"]);
        assert!(command(Harness::Codex, Kind::Fork, Some("T1"), Some("x"))
            .unwrap_err()
            .contains("no headless fork"));
        assert!(
            command(Harness::Cursor, Kind::Resume, Some("T1"), Some("x"))
                .unwrap_err()
                .contains("cursor has no proven headless run")
        );
        for h in Harness::ALL {
            let Some(hl) = h.caps().headless else {
                continue;
            };
            let all = [Some(hl.resume), hl.fork, Some(hl.start), hl.resume_quiet];
            for a in all.into_iter().flatten().flatten() {
                let a = a.to_ascii_lowercase();
                for bad in [
                    "dangerous",
                    "bypass",
                    "yolo",
                    "full-auto",
                    "skip-permissions",
                ] {
                    assert!(!a.contains(bad), "{}: {a}", h.name());
                }
            }
        }
    }

    fn read(h: Harness, lines: &[&str]) -> RunOutput {
        let mut out = RunOutput::default();
        for l in lines {
            (h.caps().headless.unwrap().read_line)(&mut out, l.as_bytes());
        }
        out
    }

    #[test]
    fn claude_stream_json_gives_the_session_the_answer_so_far_and_the_result() {
        let out = read(
            Harness::ClaudeCode,
            &[
                r#"{"type":"system","subtype":"init","session_id":"F1"}"#,
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"one"},{"type":"tool_use","name":"Bash"}]},"session_id":"F1"}"#,
                "not json",
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"two"}]},"session_id":"F1"}"#,
            ],
        );
        assert_eq!(out.session.as_deref(), Some("F1"));
        assert_eq!(out.text, "one\n\ntwo");
        let streaming = read(
            Harness::ClaudeCode,
            &[
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"one"}]}}"#,
                r#"{"type":"stream_event","event":{"type":"message_start"}}"#,
                r#"{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"tw"}}}"#,
                r#"{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"o"}}}"#,
            ],
        );
        assert_eq!(streaming.so_far(), "one\n\ntwo");
        assert_eq!(streaming.text, "one");
        assert_eq!(out.result, None);
        let done = read(
            Harness::ClaudeCode,
            &[
                r#"{"type":"result","subtype":"success","is_error":false,"result":"two","session_id":"F1"}"#,
            ],
        );
        assert_eq!(done.reply(), "two");
        let failed = read(
            Harness::ClaudeCode,
            &[
                r#"{"type":"result","subtype":"error_during_execution","is_error":true,"session_id":"F1"}"#,
            ],
        );
        assert_eq!(failed.error.as_deref(), Some("error_during_execution"));
        assert_eq!(failed.result, None);
        let named = read(
            Harness::ClaudeCode,
            &[
                r#"{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["No conversation found with session ID: F1"]}"#,
            ],
        );
        assert_eq!(
            named.error.as_deref(),
            Some("No conversation found with session ID: F1")
        );
    }

    #[test]
    fn codex_json_gives_the_thread_the_messages_and_the_turn_end() {
        let out = read(
            Harness::Codex,
            &[
                r#"{"type":"thread.started","thread_id":"T9"}"#,
                r#"{"type":"item.completed","item":{"id":"i0","type":"reasoning","text":"hm"}}"#,
                r#"{"type":"item.completed","item":{"id":"i1","type":"agent_message","text":"done it"}}"#,
                r#"{"type":"turn.completed","usage":{}}"#,
            ],
        );
        assert_eq!(out.session.as_deref(), Some("T9"));
        assert_eq!(out.reply(), "done it");
        let failed = read(
            Harness::Codex,
            &[r#"{"type":"turn.failed","error":{"message":"stream disconnected"}}"#],
        );
        assert_eq!(failed.error.as_deref(), Some("stream disconnected"));
    }

    #[test]
    fn the_delivery_decision_follows_rule_38s_order() {
        use Delivery::*;
        let s = SessionState::default;
        let idle = SessionState {
            live: Some(true),
            had_turn: true,
            waited_ms: FORK_AFTER_MS,
            ..s()
        };
        let cc = Harness::ClaudeCode;
        // api, and a run of ours in flight: wait.
        assert_eq!(decide(cc, SessionState { api: true, ..idle }), Wait);
        assert_eq!(
            decide(
                cc,
                SessionState {
                    run_in_flight: true,
                    live: Some(false),
                    ..s()
                }
            ),
            Wait
        );
        // live mid-turn: the Stop delivers (turn).
        assert_eq!(
            decide(
                cc,
                SessionState {
                    turn_open: true,
                    ..idle
                }
            ),
            Wait
        );
        // live idle: a fork (Claude Code), not before the Stop in flight had its chance.
        assert_eq!(decide(cc, idle), Run(Kind::Fork));
        assert_eq!(
            decide(
                cc,
                SessionState {
                    waited_ms: 10,
                    ..idle
                }
            ),
            Wait
        );
        assert!(
            matches!(decide(Harness::Codex, idle), Unsupported(d) if d.contains("no headless fork"))
        );
        assert_eq!(
            decide(
                Harness::Codex,
                SessionState {
                    waited_ms: 10,
                    ..idle
                }
            ),
            Wait
        );
        assert_eq!(
            decide(
                cc,
                SessionState {
                    had_turn: false,
                    ..idle
                }
            ),
            Wait
        );
        // no live process (a SIGKILLed one too): resume.
        let gone = SessionState {
            live: Some(false),
            ..s()
        };
        assert_eq!(decide(cc, gone), Run(Kind::Resume));
        assert_eq!(decide(Harness::Codex, gone), Run(Kind::Resume));
        assert!(
            matches!(decide(Harness::Cursor, gone), Unsupported(d) if d.contains("no proven headless resume"))
        );
        // never recorded: only an ended session is known free.
        assert_eq!(decide(cc, s()), Wait);
        assert_eq!(
            decide(cc, SessionState { ended: true, ..s() }),
            Run(Kind::Resume)
        );
        // a live harness with no reported turn state keeps the prompt for its Stop.
        assert_eq!(decide(Harness::Cursor, idle), Wait);
        // sp-sync cannot find the program: a live idle session still takes it at its next
        // Stop; a session no process holds is told at once why nothing can deliver it.
        let no_program = |s: SessionState| SessionState {
            no_program: true,
            ..s
        };
        assert_eq!(decide(cc, no_program(idle)), Wait);
        assert!(
            matches!(decide(cc, no_program(gone)), Unsupported(d) if d.contains("cannot find `claude`") && d.contains("$SP_CLAUDE"))
        );
    }

    #[test]
    fn a_program_is_found_where_its_variable_says_or_on_path() {
        let missing = std::env::temp_dir().join("sp-no-such-claude");
        // a variable naming a file that is not there: nothing to launch.
        assert_eq!(locate(Some(missing.into()), "claude"), None);
        // naming an executable file: that file.
        assert_eq!(
            locate(Some("/bin/sh".into()), "claude").as_deref(),
            Some(std::path::Path::new("/bin/sh"))
        );
        // a bare name, or no variable: looked up on PATH.
        assert!(locate(Some("sh".into()), "claude").is_some_and(|p| p.ends_with("sh")));
        assert!(locate(None, "sh").is_some_and(|p| p.ends_with("sh")));
        assert_eq!(locate(None, "sp-no-such-program-anywhere"), None);
    }

    #[test]
    fn run_ids_never_name_another_file() {
        assert!(valid_id(&ulid::Ulid::new().to_string()));
        assert!(!valid_id("../../etc/passwd.........."));
        assert!(!valid_id("01K6ABCDEFGHJKMNPQRSTVWXY"));
    }
}
