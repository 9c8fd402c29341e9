//! sp-sync: long-polls each control sink for every live session, stores what arrives, and
//! sends the ack and event outboxes. Threads, not async: one per (session × control sink)
//! poll, one ack sender and one event sender per sink, and a supervisor.
pub(crate) mod api;
pub(crate) mod backoff;
mod codex_bridge;
mod discover;
pub mod http;
mod owner;
mod parked;
mod poll;
mod runs;
mod send;
mod signed;
pub(crate) mod start;
pub mod wellknown;

use crate::config::{Config, ControlMode, Sink};
use crate::store::{self, Store};
use anyhow::{Context, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use wellknown::Discovered;

/// `sp-sync`'s command line (clap derive); no option is the bounded run cron starts.
#[derive(Debug, clap::Parser)]
#[command(
    name = "sp-sync",
    version,
    about = "sp-sync: the sessionpipe control channel's sender",
    long_about = "sp-sync: the sessionpipe control channel's sender\n\n\
        With no option, a bounded run for cron: polls, stores and sends for up to 55 s, then exits."
)]
pub struct Cli {
    /// One pass: a poll without waiting per live session, then acks and events
    #[arg(long, group = "mode")]
    once: bool,
    /// Run until stopped (SIGTERM or SIGINT)
    #[arg(long, group = "mode")]
    daemon: bool,
    /// Like the default, but for up to N seconds
    #[arg(long = "for", value_name = "N", group = "mode",
          value_parser = clap::value_parser!(u64).range(1..))]
    for_secs: Option<u64>,
    /// What the hooks start: runs until no hook has reported for S seconds
    /// (default 1800) with nothing left to send, so a prompt queued during a long turn is in
    /// the queue when its Stop looks
    #[arg(long, value_name = "S", group = "mode", num_args = 0..=1,
          value_parser = clap::value_parser!(u64).range(1..))]
    while_live: Option<Option<u64>>,
}

impl Cli {
    pub fn mode(&self) -> Mode {
        match (self.once, self.daemon, self.for_secs, self.while_live) {
            (true, ..) => Mode::Once,
            (_, true, ..) => Mode::Daemon,
            (_, _, Some(n), _) => Mode::Bounded(Duration::from_secs(n)),
            (_, _, _, Some(idle)) => {
                Mode::WhileLive(idle.map_or(WHILE_LIVE_IDLE, Duration::from_secs))
            }
            _ => Mode::Bounded(DEFAULT_RUN),
        }
    }
}

/// `sp-sync`'s arguments (with the program name first) read; `--help`, `--version` and a
/// command line clap refuses come back as the `clap::Error` for `main` to print.
pub fn parse_args(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> std::result::Result<Mode, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let after = format!(
        "Only one sp-sync runs per state folder; a second one exits 0 at once.\n\
         A config that does not load: --once and the bounded run exit 2; --daemon and\n\
         --while-live wait for it to be fixed (read again when it changes).\n\
         Exit status: 0 done (or another sp-sync runs), 2 bad config, 1 other failure.\n\n{}",
        crate::paths::ENV_HELP
    );
    let matches = Cli::command()
        .after_help(after)
        .try_get_matches_from(args)?;
    Ok(Cli::from_arg_matches(&matches)?.mode())
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    Bounded(Duration),
    Once,
    Daemon,
    /// Until no hook has reported for this long and nothing is left to send.
    WhileLive(Duration),
}

/// How long `--while-live` stays up after the last hook report.
pub const WHILE_LIVE_IDLE: Duration = Duration::from_secs(1800);

pub const DEFAULT_RUN: Duration = Duration::from_secs(55);
/// Sessions and sinks are re-read this often.
const REFRESH_EVERY: Duration = Duration::from_millis(200);
/// How often the supervisor looks for commits by other processes (hooks) to wake senders.
const WATCH_EVERY: Duration = Duration::from_millis(10);
/// The spool of turn ends is read at least this often ([`crate::store::spool`]).
const SPOOL_EVERY: Duration = Duration::from_millis(250);
/// A changed spool is read once it has been still this long: a burst of tool calls is taken
/// in one drain, and the drain does not compete for the CPU with the hook that wrote it.
const SPOOL_SETTLE: Duration = Duration::from_millis(20);
const SWEEP_EVERY: Duration = Duration::from_secs(2);
const DB_BUSY: Duration = Duration::from_secs(5);
/// A back-off's sleep looks at the clocks this often (the test clock moves without notice).
const SLEEP_LOOK: Duration = Duration::from_millis(50);

/// Why `run` refused to start; `main` maps it to an exit status.
#[derive(Debug)]
pub enum RunError {
    Config(anyhow::Error),
    Other(anyhow::Error),
}

/// A sink as the threads see it: config plus what discovery found.
#[derive(Debug)]
pub(crate) struct SinkCtx {
    pub name: String,
    pub token: String,
    pub fingerprint: String,
    pub tier: u8,
    /// The seed's unsigned per-session polls.
    pub control: bool,
    /// Signed control (DECISIONS 22): this machine's pairing with the sink, when it has one.
    pub signed: Option<crate::store::trust::PairedMachine>,
    pub machine: Option<String>,
    found: std::sync::RwLock<Discovered>,
    /// Set on any failure of this sink: the supervisor re-reads its well-known (DECISIONS 24).
    stale: AtomicBool,
}

impl SinkCtx {
    /// What the sink's well-known says now (re-read after a failure).
    pub fn found(&self) -> Discovered {
        self.found.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Any failure of this sink (transport error, redirect, unexpected status, unreadable
    /// answer): noted for `sp status`, and the cached well-known is dropped so it is read
    /// again before it is trusted any longer (DECISIONS 24).
    pub fn failed(&self, store: &mut Store, error: &str) {
        let _ = store.note_error(&self.name, error);
        if let Err(e) = store.forget_wellknown(&self.name) {
            crate::logging::warn(&format!(
                "sink {}: cannot drop its cached well-known: {e:#}",
                self.name
            ));
        }
        self.stale.store(true, Ordering::Relaxed);
    }
}

impl SinkCtx {
    /// The bearer for everything sent to the sink, events, polls and acks: a paired
    /// machine's own token (never the sink token, docs/protocol.md#control-2 step 4; DECISIONS 33: the
    /// receiver attributes each session to the machine whose token its events carry), else
    /// the sink's.
    pub fn control_token(&self) -> &str {
        self.signed.as_ref().map_or(&self.token, |m| &m.token)
    }

    fn polls_control(&self) -> bool {
        (self.control || self.signed.is_some()) && self.found().control_url.is_some()
    }
}

pub(crate) struct Shared {
    pub client: http::Client,
    pub mode: Mode,
    pub deadline: Option<Instant>,
    pub live_ms: i64,
    pub wait_max_s: u64,
    /// Signed control's folder allowlist (empty: every folder).
    pub folders: Vec<std::path::PathBuf>,
    /// DECISIONS 36's opt-out: allows and starts act on the page's day key alone.
    pub allow_with_day_key: bool,
    /// DECISIONS 39: the machine's own caps on starts.
    pub start_limit: crate::config::StartLimit,
    stop: AtomicBool,
    wake: (Mutex<u64>, Condvar),
}

impl Shared {
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    pub fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    pub fn notify(&self) {
        let (m, c) = &self.wake;
        *m.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        c.notify_all();
    }

    /// Waits up to `d` for new work (a notify) or a stop; like `sleep`, `d` passes in real
    /// time or on the machine's clock, whichever comes first.
    pub fn wait_work(&self, seen: &mut u64, d: Duration) {
        let (m, c) = &self.wake;
        let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
        let until = Instant::now() + d;
        let until_ms = crate::clock::now_ms().saturating_add(d.as_millis() as i64);
        while *g == *seen && !self.stopping() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || crate::clock::now_ms() >= until_ms {
                break;
            }
            g = c
                .wait_timeout(g, left.min(Duration::from_millis(250)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *seen = *g;
    }

    /// Sleeps `d` (a backoff); only a stop cuts it short. It ends when `d` has passed in
    /// real time or on the machine's clock, whichever comes first: a test that moves the
    /// test clock (src/clock.rs) past the deadline ends the wait at its next look.
    pub fn sleep(&self, d: Duration) {
        let until = Instant::now() + d;
        let until_ms = crate::clock::now_ms().saturating_add(d.as_millis() as i64);
        while !self.stopping() {
            let left = until.saturating_duration_since(Instant::now());
            let left_ms = until_ms.saturating_sub(crate::clock::now_ms());
            if left.is_zero() || left_ms <= 0 {
                return;
            }
            std::thread::sleep(left.min(SLEEP_LOOK));
        }
    }

    pub fn open_store(&self) -> Result<Store> {
        store::open(&crate::paths::database_file(), DB_BUSY)
    }
}

/// A fingerprint of the sink's config, so a pause holds until the config changes. The token
/// goes in hashed; the token itself is never stored.
pub fn fingerprint(s: &Sink) -> String {
    use sha2::{Digest, Sha256};
    let token = s.bearer().unwrap_or_default();
    let d = Sha256::digest(
        format!("{}|{}|{}|{}|{}", s.name, s.url, s.control, s.tier, token).as_bytes(),
    );
    spwire::hex::encode(&d[..8])
}

pub fn run(mode: Mode) -> std::result::Result<(), RunError> {
    let first = Config::load();
    // One pass, or cron's bounded run: a bad config is the caller's to see (exit 2).
    if matches!(mode, Mode::Once | Mode::Bounded(_)) {
        if let Err(e) = first {
            return Err(RunError::Config(e));
        }
    }
    let Some(_lock) = crate::sync_lock::acquire()
        .context("cannot open the sp-sync lock file")
        .map_err(RunError::Other)?
    else {
        crate::logging::debug("another sp-sync runs; exiting");
        return Ok(());
    };
    let signal = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&signal))
            .map_err(|e| RunError::Other(e.into()))?;
    }
    let deadline = match mode {
        Mode::Bounded(d) => Some(Instant::now() + d),
        _ => None,
    };
    let mut config = match first {
        Ok(c) => c,
        Err(e) => wait_for_fixed_config(e, mode, deadline, &signal)?,
    };
    loop {
        let shared = Arc::new(Shared {
            client: http::Client::new(),
            mode,
            deadline,
            live_ms: config.live_ms(),
            wait_max_s: config.control.wait_max_s.unwrap_or(25).min(25),
            folders: config.control.folders.clone().unwrap_or_default(),
            allow_with_day_key: config.control.allow_with_day_key,
            start_limit: config
                .control
                .start_limit
                .unwrap_or(crate::config::StartLimit::DEFAULT),
            stop: AtomicBool::new(false),
            wake: (Mutex::new(0), Condvar::new()),
        });
        crate::logging::info(&format!("start ({mode:?}, {} sink(s))", config.sinks.len()));
        let stamp = config_stamp(&config.path);
        let restart = Supervisor::new(shared, config, Arc::clone(&signal), stamp)
            .and_then(|mut s| s.run())
            .map_err(RunError::Other)?;
        if !restart {
            crate::logging::info("stop");
            return Ok(());
        }
        // The config changed under us: start over with the new one (a fixed token lifts a pause).
        config = match Config::load() {
            Ok(c) => c,
            Err(e) => wait_for_fixed_config(e, mode, deadline, &signal)?,
        };
        crate::logging::info("config changed; restarting");
    }
}

/// A config that does not load is re-read at most this often while sp-sync waits for a fix.
const CONFIG_RETRY: Duration = Duration::from_secs(2);

/// The config does not load: wait for it to be fixed rather than stop, so what the hooks
/// stored meanwhile goes out once it is, without waiting for the next hook. Reads it again
/// when the file changes, at most every [`CONFIG_RETRY`]; gives up (exit 2) at a signal, at
/// the bounded run's end, or after `--while-live`'s idle span.
fn wait_for_fixed_config(
    mut err: anyhow::Error,
    mode: Mode,
    deadline: Option<Instant>,
    signal: &AtomicBool,
) -> std::result::Result<Config, RunError> {
    let give_up = match mode {
        Mode::Daemon => None,
        Mode::WhileLive(idle) => Some(Instant::now() + idle),
        Mode::Bounded(_) | Mode::Once => Some(deadline.unwrap_or_else(Instant::now)),
    };
    crate::logging::error(&format!(
        "{err:#}; waiting for the config to be fixed (read again when it changes)"
    ));
    let path = crate::paths::config_file();
    let mut stamp = config_stamp(&path);
    let mut last_read = Instant::now();
    loop {
        if signal.load(Ordering::Relaxed) || give_up.is_some_and(|g| Instant::now() >= g) {
            return Err(RunError::Config(err));
        }
        std::thread::sleep(Duration::from_millis(100));
        if last_read.elapsed() < CONFIG_RETRY {
            continue;
        }
        let now_stamp = config_stamp(&path);
        if now_stamp == stamp {
            continue;
        }
        last_read = Instant::now();
        stamp = now_stamp;
        match Config::load() {
            Ok(c) => {
                crate::logging::info("the config loads again; starting");
                return Ok(c);
            }
            Err(e) => {
                crate::logging::error(&format!("{e:#}; still waiting for the config to be fixed"));
                err = e;
            }
        }
    }
}

/// What identifies a config file's version cheaply: its modification time and size.
fn config_stamp(path: &std::path::Path) -> Option<(std::time::SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// When a sink's well-known is read again after a failure: once the delay has passed in
/// real time or on the machine's clock (which a test moves), like `Shared::sleep`.
struct DiscoveryRetry {
    at: Instant,
    at_ms: crate::clock::Millis,
    failures: u32,
}

impl DiscoveryRetry {
    fn after(delay: Duration, failures: u32) -> Self {
        DiscoveryRetry {
            at: Instant::now() + delay,
            at_ms: crate::clock::now_ms().saturating_add(delay.as_millis() as i64),
            failures,
        }
    }

    fn due(&self) -> bool {
        Instant::now() >= self.at || crate::clock::now_ms() >= self.at_ms
    }
}

struct Supervisor {
    shared: Arc<Shared>,
    config: Config,
    signal: Arc<AtomicBool>,
    store: Store,
    sinks: HashMap<String, Arc<SinkCtx>>,
    /// Sinks whose discovery failed: when to try again and how many failures so far.
    discovery_retry: HashMap<String, DiscoveryRetry>,
    polls: HashMap<(String, String), JoinHandle<()>>,
    senders: Vec<JoinHandle<()>>,
    config_stamp: Option<(std::time::SystemTime, u64)>,
}

impl Supervisor {
    fn new(
        shared: Arc<Shared>,
        config: Config,
        signal: Arc<AtomicBool>,
        config_stamp: Option<(std::time::SystemTime, u64)>,
    ) -> Result<Supervisor> {
        let store = shared.open_store()?;
        Ok(Supervisor {
            shared,
            config,
            signal,
            store,
            sinks: HashMap::new(),
            discovery_retry: HashMap::new(),
            polls: HashMap::new(),
            senders: Vec::new(),
            config_stamp,
        })
    }

    /// Discovers sinks not yet known; returns the ones newly ready.
    fn discover(&mut self) -> Vec<Arc<SinkCtx>> {
        let mut ready = Vec::new();
        for sink in self.config.sinks.clone() {
            if self.sinks.contains_key(&sink.name) {
                continue;
            }
            if self
                .discovery_retry
                .get(&sink.name)
                .is_some_and(|r| !r.due())
            {
                continue;
            }
            match self.discover_one(&sink) {
                Ok(ctx) => {
                    self.discovery_retry.remove(&sink.name);
                    let ctx = Arc::new(ctx);
                    self.sinks.insert(sink.name.clone(), Arc::clone(&ctx));
                    ready.push(ctx);
                }
                Err(e) => self.discovery_failed(&sink.name, format!("{e:#}")),
            }
        }
        ready
    }

    fn discover_one(&mut self, sink: &Sink) -> Result<SinkCtx> {
        let live_since = crate::clock::now_ms() - self.shared.live_ms;
        self.store.ensure_sink(&sink.name, live_since)?;
        let fp = fingerprint(sink);
        if self.store.lift_pauses_if_config_changed(&sink.name, &fp)? {
            crate::logging::info(&format!(
                "sink {}: config changed; pauses lifted",
                sink.name
            ));
        }
        let found = discover::discover(&self.shared.client, &mut self.store, sink)?;
        if sink.control.is_on() && found.control_url.is_none() {
            crate::logging::warn(&format!(
                "sink {}: control is on in the config but the receiver's well-known does not list control; not polling",
                sink.name
            ));
        }
        let signed = match sink.control {
            ControlMode::Signed => {
                let paired = self.store.paired_machine(&sink.name)?;
                if paired.is_none() {
                    crate::logging::warn(&format!(
                        "sink {}: control is \"signed\" but this machine is not paired with it; run `sp pair {}`",
                        sink.name, sink.name
                    ));
                }
                paired
            }
            _ => None,
        };
        Ok(SinkCtx {
            name: sink.name.clone(),
            token: sink.bearer()?,
            fingerprint: fp,
            tier: sink.tier,
            control: sink.control == ControlMode::Unsigned,
            signed,
            machine: crate::config::machine_name(self.config.machine.as_deref()),
            found: std::sync::RwLock::new(found),
            stale: AtomicBool::new(false),
        })
    }

    /// Re-reads the well-known of every sink that failed since it was last read, on the
    /// discovery retry schedule; the threads pick up what it says at their next request.
    fn rediscover(&mut self) {
        let stale: Vec<Arc<SinkCtx>> = self
            .sinks
            .values()
            .filter(|c| c.stale.load(Ordering::Relaxed))
            .cloned()
            .collect();
        for ctx in stale {
            if self
                .discovery_retry
                .get(&ctx.name)
                .is_some_and(|r| !r.due())
            {
                continue;
            }
            let Some(sink) = self
                .config
                .sinks
                .iter()
                .find(|s| s.name == ctx.name)
                .cloned()
            else {
                continue;
            };
            ctx.stale.store(false, Ordering::Relaxed);
            match discover::discover(&self.shared.client, &mut self.store, &sink) {
                Ok(found) => {
                    self.discovery_retry.remove(&ctx.name);
                    crate::logging::debug(&format!("sink {}: well-known read again", ctx.name));
                    *ctx.found.write().unwrap_or_else(|e| e.into_inner()) = found;
                }
                Err(e) => {
                    ctx.stale.store(true, Ordering::Relaxed);
                    self.discovery_failed(
                        &ctx.name,
                        format!("reading its well-known again: {e:#}"),
                    );
                }
            }
        }
    }

    /// Schedules the next read of a sink's well-known on the control schedule, and records
    /// the back-off and the error.
    fn discovery_failed(&mut self, name: &str, error: String) {
        let failures = self.discovery_retry.get(name).map_or(0, |r| r.failures) + 1;
        let delay = backoff::delay(backoff::CONTROL, failures);
        backoff::record(&format!("sink {name}"), &error, delay);
        let _ = self.store.note_error(name, &error);
        self.discovery_retry
            .insert(name.to_string(), DiscoveryRetry::after(delay, failures));
    }

    fn start_senders(&mut self, ctx: &Arc<SinkCtx>) {
        let (s, c) = (Arc::clone(&self.shared), Arc::clone(ctx));
        self.senders
            .push(std::thread::spawn(move || send::events_loop(&s, &c)));
        if ctx.polls_control() {
            let (s, c) = (Arc::clone(&self.shared), Arc::clone(ctx));
            self.senders
                .push(std::thread::spawn(move || send::acks_loop(&s, &c)));
        }
    }

    /// Starts a poll for every live session × control sink that has none.
    fn refresh_polls(&mut self) -> Result<()> {
        self.polls.retain(|_, h| !h.is_finished());
        let sessions = self
            .store
            .polled_sessions(self.shared.live_ms, &crate::runs::resumable())?;
        for ctx in self.sinks.values() {
            // One poll per machine for a paired signed sink, whatever the number of sessions.
            if ctx.signed.is_some()
                && ctx.found().control_url.is_some()
                && !self.store.control_paused(&ctx.name)?
            {
                let id = (signed::POLL_KEY.to_string(), ctx.name.clone());
                if !self.polls.contains_key(&id) {
                    let (s, c) = (Arc::clone(&self.shared), Arc::clone(ctx));
                    self.polls
                        .insert(id, std::thread::spawn(move || signed::poll_loop(&s, &c)));
                }
            }
            if !ctx.control
                || ctx.found().control_url.is_none()
                || self.store.control_paused(&ctx.name)?
            {
                continue;
            }
            for (key, harness) in &sessions {
                let id = (key.clone(), ctx.name.clone());
                if self.polls.contains_key(&id) {
                    continue;
                }
                let (s, c, k, h) = (
                    Arc::clone(&self.shared),
                    Arc::clone(ctx),
                    key.clone(),
                    harness.clone(),
                );
                self.polls.insert(
                    id,
                    std::thread::spawn(move || poll::poll_loop(&s, &c, &k, &h)),
                );
            }
        }
        Ok(())
    }

    fn sweep(&mut self) {
        match self.store.sweep() {
            Ok(r) if r != Default::default() => {
                crate::logging::info(&format!("sweep: {r:?}"));
                self.shared.notify();
            }
            Ok(_) => {}
            Err(e) => crate::logging::warn(&format!("sweep failed: {e:#}")),
        }
    }

    /// Takes spooled turn ends into the database; returns whether the pass failed and is to
    /// be tried again.
    fn drain_spool(&mut self) -> bool {
        match self.store.drain_spool() {
            Ok(0) => false,
            Ok(n) => {
                crate::logging::debug(&format!("{n} spooled turn end(s) stored"));
                self.shared.notify();
                false
            }
            Err(e) => {
                crate::logging::warn(&format!("cannot take in the spooled turn ends: {e:#}"));
                true
            }
        }
    }

    /// Runs until stopped; returns true when it stopped because the config changed.
    fn run(&mut self) -> Result<bool> {
        if self.shared.mode == Mode::Once {
            self.run_once()?;
            return Ok(false);
        }
        let mut restart = false;
        let mut last_version = data_version(&self.store).unwrap_or(0);
        let mut last_spool = None;
        let mut spool_left = true;
        let mut last_drain = Instant::now();
        let mut spool_changed: Option<Instant> = None;
        let mut last_refresh = Instant::now() - REFRESH_EVERY;
        let mut last_sweep = Instant::now() - SWEEP_EVERY;
        // Harnesses with a server API (OpenCode) get their messages at once, not at a hook.
        let shared = Arc::clone(&self.shared);
        self.senders
            .push(std::thread::spawn(move || api::api_loop(&shared)));
        // Headless runs between turns (DECISIONS 38): launched, followed, acked.
        let shared = Arc::clone(&self.shared);
        self.senders
            .push(std::thread::spawn(move || runs::runs_loop(&shared)));
        // Codex sessions started with `sp codex`: a second client of their app-server.
        let shared = Arc::clone(&self.shared);
        self.senders.push(std::thread::spawn(move || {
            codex_bridge::follow_loop(&shared)
        }));
        while !self.shared.stopping() {
            if self.signal.load(Ordering::Relaxed) {
                self.shared.stop.store(true, Ordering::Relaxed);
                break;
            }
            if last_refresh.elapsed() >= REFRESH_EVERY {
                last_refresh = Instant::now();
                for ctx in self.discover() {
                    self.start_senders(&ctx);
                }
                self.rediscover();
                if let Err(e) = self.refresh_polls() {
                    crate::logging::warn(&format!("cannot read live sessions: {e:#}"));
                }
            }
            if last_sweep.elapsed() >= SWEEP_EVERY {
                last_sweep = Instant::now();
                self.sweep();
                if let Mode::WhileLive(idle) = self.shared.mode {
                    if !crate::paths::database_file().exists() {
                        crate::logging::info("the state folder is gone; stopping");
                        break;
                    }
                    match self.store.idle_for() {
                        Ok(Some(quiet)) if quiet >= idle.as_millis() as i64 => {
                            crate::logging::info(&format!(
                                "no hook has reported for {}s and nothing is left to send; stopping",
                                quiet / 1000
                            ));
                            break;
                        }
                        Ok(_) => {}
                        Err(e) => crate::logging::warn(&format!("cannot tell whether idle: {e:#}")),
                    }
                }
                if config_stamp(&self.config.path) != self.config_stamp {
                    restart = true;
                    break;
                }
            }
            // A Stop hook spooled its turn end ([`crate::store::spool`]): take it in.
            // The folder's mtime says when it changed, but only to the kernel's coarse clock:
            // two changes within one tick look the same, so it is also read every
            // SPOOL_EVERY whatever its mtime says.
            let spool = spool_stamp(&self.store);
            if spool != last_spool {
                last_spool = spool;
                spool_changed = Some(Instant::now());
            }
            let settled = spool_changed.is_some_and(|at| at.elapsed() >= SPOOL_SETTLE);
            if settled || spool_left || last_drain.elapsed() >= SPOOL_EVERY {
                spool_changed = None;
                last_drain = Instant::now();
                spool_left = self.drain_spool();
            }
            // Hooks commit in other processes; a changed data_version means new events or acks.
            if let Ok(v) = data_version(&self.store) {
                if v != last_version {
                    last_version = v;
                    self.shared.notify();
                }
            }
            std::thread::sleep(WATCH_EVERY);
        }
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.notify();
        // Polls in flight are left behind: an unacked message is redelivered, and a write
        // cut short by the exit is rolled back by SQLite. Waiting could take a whole poll.
        self.polls.clear();
        self.drain_spool();
        self.sweep();
        // Senders make a last pass after the stop, so acks decided at the end still go out.
        for h in self.senders.drain(..) {
            let _ = h.join();
        }
        Ok(restart)
    }

    fn run_once(&mut self) -> Result<()> {
        let ready = self.discover();
        let sessions = self
            .store
            .polled_sessions(self.shared.live_ms, &crate::runs::resumable())?;
        for ctx in &ready {
            if ctx.signed.is_some()
                && ctx.found().control_url.is_some()
                && !self.store.control_paused(&ctx.name)?
            {
                signed::poll_once(&self.shared, ctx, &mut self.store, 0);
            }
            if ctx.control
                && ctx.found().control_url.is_some()
                && !self.store.control_paused(&ctx.name)?
            {
                for (key, harness) in &sessions {
                    poll::poll_once(&self.shared, ctx, &mut self.store, key, harness, 0);
                }
            }
        }
        self.drain_spool();
        self.sweep();
        api::pass(&mut self.store);
        for ctx in &ready {
            send::flush(&self.shared, ctx, &mut self.store);
        }
        Ok(())
    }
}

/// When the spool folder last changed (a file spooled, renamed into place or removed).
fn spool_stamp(store: &Store) -> Option<std::time::SystemTime> {
    std::fs::metadata(store.spool_dir())
        .and_then(|m| m.modified())
        .ok()
}

fn data_version(store: &Store) -> Result<i64> {
    Ok(store
        .connection()
        .query_row("PRAGMA data_version", [], |r| r.get(0))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(args: &[&str]) -> std::result::Result<Mode, clap::error::ErrorKind> {
        let argv = std::iter::once("sp-sync").chain(args.iter().copied());
        parse_args(argv.map(Into::into)).map_err(|e| e.kind())
    }

    #[test]
    fn command_lines() {
        assert_eq!(mode(&[]), Ok(Mode::Bounded(DEFAULT_RUN)));
        assert_eq!(mode(&["--once"]), Ok(Mode::Once));
        assert_eq!(mode(&["--daemon"]), Ok(Mode::Daemon));
        assert_eq!(
            mode(&["--for", "5"]),
            Ok(Mode::Bounded(Duration::from_secs(5)))
        );
        assert_eq!(
            mode(&["--while-live"]),
            Ok(Mode::WhileLive(WHILE_LIVE_IDLE))
        );
        assert_eq!(
            mode(&["--while-live", "60"]),
            Ok(Mode::WhileLive(Duration::from_secs(60)))
        );
        assert!(mode(&["--for", "0"]).is_err());
        assert!(mode(&["--for"]).is_err());
        assert!(mode(&["--while-live", "0"]).is_err());
        assert_eq!(
            mode(&["--once", "--daemon"]),
            Err(clap::error::ErrorKind::ArgumentConflict)
        );
        assert_eq!(
            mode(&["--bogus"]),
            Err(clap::error::ErrorKind::UnknownArgument)
        );
        assert_eq!(mode(&["--help"]), Err(clap::error::ErrorKind::DisplayHelp));
    }
}
