//! `sp doctor`: every check a person would make by hand, each finding with how to fix it.
use super::{show, Done, DB_BUSY};
use crate::config::Config;
use crate::harness::SP_EVENT;
use crate::setup::{self, cron, Registration};
use crate::sync::http::Client;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Ok,
    Info,
    Warn,
    Fail,
}

struct Findings(Vec<(Level, String, Option<String>)>);

impl Findings {
    fn add(&mut self, level: Level, text: impl Into<String>, fix: Option<String>) {
        let text = text.into();
        let tag = match level {
            Level::Ok => "[ok]  ",
            Level::Info => "[info]",
            Level::Warn => "[warn]",
            Level::Fail => "[FAIL]",
        };
        println!("{tag} {text}");
        if let Some(f) = &fix {
            println!("       fix: {f}");
        }
        self.0.push((level, text, fix));
    }
    fn ok(&mut self, t: impl Into<String>) {
        self.add(Level::Ok, t, None)
    }
    fn info(&mut self, t: impl Into<String>) {
        self.add(Level::Info, t, None)
    }
    fn warn(&mut self, t: impl Into<String>, fix: impl Into<String>) {
        self.add(Level::Warn, t, Some(fix.into()))
    }
    fn fail(&mut self, t: impl Into<String>, fix: impl Into<String>) {
        self.add(Level::Fail, t, Some(fix.into()))
    }
}

/// Our binaries sit beside `sp`.
fn bin_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."))
}

pub fn doctor() -> anyhow::Result<Done> {
    let mut f = Findings(Vec::new());
    let config = check_config(&mut f);
    if let Some(c) = &config {
        check_sinks(&mut f, c);
    }
    check_harnesses(&mut f, config.as_ref());
    check_hook_log(&mut f);
    check_codex_app(&mut f, config.as_ref());
    check_schedule(&mut f);
    check_starts(&mut f, config.as_ref());
    check_database(&mut f);
    check_latency(&mut f);
    let fails = f.0.iter().filter(|x| x.0 == Level::Fail).count();
    let warns = f.0.iter().filter(|x| x.0 == Level::Warn).count();
    println!();
    if fails == 0 {
        println!(
            "No problems found{}.",
            if warns > 0 {
                format!(" ({warns} warning(s))")
            } else {
                String::new()
            }
        );
        Ok(Done::Ok)
    } else {
        println!(
            "{fails} problem(s) found{}.",
            if warns > 0 {
                format!(", {warns} warning(s)")
            } else {
                String::new()
            }
        );
        Ok(Done::Problems)
    }
}

fn check_config(f: &mut Findings) -> Option<Config> {
    let path = crate::paths::config_file();
    let shown = show(&path);
    if !path.exists() {
        f.warn(
            format!("config {shown} does not exist: no sink, so nothing leaves this machine"),
            "add a receiver: sp sink add URL --token-file FILE --control",
        );
        return Config::load_from(&path).ok();
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(m) = std::fs::metadata(&path) {
            let mode = m.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                f.fail(
                    format!("config {shown} is readable by others (mode {mode:o}); it names receivers and tokens"),
                    format!("chmod 600 {}", path.display()),
                );
            } else {
                f.ok(format!("config {shown} is private (mode {mode:o})"));
            }
        }
    }
    match Config::load_from(&path) {
        Ok(c) => {
            f.ok(format!(
                "config loads: {} sink(s), {} with control",
                c.sinks.len(),
                c.control_sinks().count()
            ));
            if c.sinks.is_empty() {
                f.warn(
                    "no sink configured",
                    "sp sink add URL --token-file FILE --control",
                );
            }
            Some(c)
        }
        Err(e) => {
            f.fail(
                format!("config does not load: {e:#}"),
                "correct the file as the message says (or rebuild it with sp sink add)",
            );
            None
        }
    }
}

fn check_sinks(f: &mut Findings, config: &Config) {
    let client = Client::new();
    let store = open_store();
    for s in &config.sinks {
        match s.bearer() {
            Ok(t) if t.is_empty() => f.fail(
                format!("sink {}: the token is empty", s.name),
                "put the receiver's bearer token in the token file",
            ),
            Ok(_) => {}
            Err(e) => f.fail(
                format!("sink {}: {e:#}", s.name),
                "make the token file readable by you, mode 600",
            ),
        }
        match super::sink::fetch_wellknown(&client, &s.url) {
            Err(e) => f.fail(
                format!(
                    "sink {}: cannot read the receiver's well-known: {e:#}",
                    s.name
                ),
                match local_receiver_start(&s.url) {
                    Some(how) => format!(
                        "check that {} is right; if it is this machine's sp-receiver, start it again: {how}",
                        s.url
                    ),
                    None => format!("check that {} is right and the receiver is up", s.url),
                },
            ),
            Ok(found) => {
                if s.control.is_on() && found.discovered.control_url.is_none() {
                    f.fail(
                        format!(
                            "sink {}: control is on in the config, but the receiver's well-known lacks control ({})",
                            s.name,
                            found.summary()
                        ),
                        format!(
                            "turn control on at the receiver, or send it events only: sp sink remove {0} && sp sink add {1} --token-file FILE",
                            s.name, s.url
                        ),
                    );
                } else {
                    f.ok(format!(
                        "sink {}: receiver answers ({})",
                        s.name,
                        found.summary()
                    ));
                }
                control_trust(f, s, &found.discovered, store.as_ref());
                check_local_health(f, &client, &s.name, &s.url);
                if s.tier > found.max_tier {
                    f.warn(
                        format!(
                            "sink {}: tier {} is above the receiver's max tier {}",
                            s.name, s.tier, found.max_tier
                        ),
                        format!("add it again with --tier {}", found.max_tier),
                    );
                }
            }
        }
        if let Some(st) = store
            .as_ref()
            .and_then(|st| st.sink_state(&s.name).ok().flatten())
        {
            if let Some(why) = st.control_paused.as_ref().or(st.events_paused.as_ref()) {
                f.fail(
                    format!("sink {}: sp-sync paused it: {why}", s.name),
                    "fix the token (or tier) in the config; a changed config lifts the pause",
                );
            }
        }
    }
}

/// How to start this machine's sp-receiver again, for a sink on loopback: its systemd user
/// service where install.sh made one, else the command install.sh ran (its log beside
/// control.db's folder).
fn local_receiver_start(url: &str) -> Option<String> {
    let origin = spwire::url::parse_origin(url).ok()?;
    if !origin.is_loopback() {
        return None;
    }
    let unit = cron::systemd_dir().join("sp-receiver.service");
    if unit.exists() {
        return Some(
            "systemctl --user start sp-receiver (its log: journalctl --user -u sp-receiver)".into(),
        );
    }
    let log = crate::paths::state_dir().join("sp-receiver.log");
    Some(format!(
        "nohup {} >>{} 2>&1 </dev/null &",
        bin_dir().join("sp-receiver").display(),
        show(&log)
    ))
}

/// A sink on loopback is likely the local sp-receiver: its `/healthz` says whether its
/// database answers too (another receiver answers 404 there, which says nothing).
fn check_local_health(f: &mut Findings, client: &Client, name: &str, url: &str) {
    let Ok(origin) = spwire::url::parse_origin(url) else {
        return;
    };
    if !origin.is_loopback() {
        return;
    }
    let health = format!("{origin}/healthz");
    match client.get(&health, None, Duration::from_secs(5)) {
        Ok(r) if r.status == 200 => f.ok(format!(
            "sink {name}: sp-receiver healthy; its page: {}",
            super::sink::local_page(url).unwrap_or_else(|| format!("{origin}/"))
        )),
        Ok(r) if r.status == 404 => {}
        Ok(r) => f.fail(
            format!(
                "sink {name}: GET {health} answered {}: the receiver's database does not answer",
                r.status
            ),
            "see the receiver's log: journalctl --user -u sp-receiver",
        ),
        Err(e) => f.fail(
            format!("sink {name}: GET {health}: {e}"),
            "see the receiver's log: journalctl --user -u sp-receiver",
        ),
    }
}

fn check_harnesses(f: &mut Findings, config: Option<&Config>) {
    let bin = bin_dir();
    let default = Config::default();
    let config = config.unwrap_or(&default);
    let mut any = false;
    for t in setup::targets() {
        let name = t.harness.name();
        let file = show(&t.file);
        match setup::inspect(&t, &bin, config) {
            Registration::NotInstalled => {}
            Registration::Malformed(m) => {
                any = true;
                f.fail(
                    format!("{name}: {m}"),
                    format!("fix {file} by hand, then run: sp setup install"),
                );
            }
            Registration::Found { changes, programs } => {
                any = true;
                if programs.is_empty() {
                    f.warn(
                        format!("{name} is installed but {file} has none of our hooks"),
                        "sp setup install (or ./install.sh)",
                    );
                    continue;
                }
                let broken: Vec<String> = programs
                    .iter()
                    .filter(|p| !cron::is_executable(p))
                    .map(|p| p.display().to_string())
                    .collect();
                if !broken.is_empty() {
                    f.fail(
                        format!("{name}: hooks in {file} point at missing binaries: {}", broken.join(", ")),
                        "reinstall with ./install.sh, or sp setup install from the folder the binaries are in",
                    );
                } else if changes.is_empty() {
                    f.ok(format!("{name}: our hooks are in {file}"));
                } else {
                    let mut what = Vec::new();
                    what.extend(changes.added.iter().map(|a| format!("missing {a}")));
                    what.extend(changes.updated.iter().map(|a| format!("differs: {a}")));
                    what.extend(changes.removed.iter().map(|a| format!("extra {a}")));
                    f.warn(
                        format!("{name}: {file}: {}", what.join("; ")),
                        "sp setup install (see what it would do with --dry-run)",
                    );
                }
                if setup::gemini_hooks_disabled(&t) {
                    f.fail(
                        format!("{name}: hooks are turned off in {file}"),
                        "set \"hooksConfig\": {\"enabled\": true} in that file",
                    );
                }
            }
        }
    }
    if !any {
        f.info("no harness installed (none of their config folders exists)");
    }
}

/// How far back `sp doctor` reads the hooks' errors in sp.log.
const HOOK_LOG_WINDOW_MS: i64 = 24 * 3_600_000;
/// The most of sp.log it reads (its end).
const HOOK_LOG_TAIL: u64 = 512 * 1024;

/// The hooks' errors and warnings of the last day in sp.log, grouped by what fixes them: a
/// hook registered wrong (a bad `--harness`, an unknown argument) fails; stdin that is not
/// the harness's payload (another harness's, or a try by hand) and the rest warn.
fn check_hook_log(f: &mut Findings) {
    use std::io::{Read, Seek, SeekFrom};
    let path = crate::paths::log_file();
    let Ok(mut file) = std::fs::File::open(&path) else {
        return;
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(HOOK_LOG_TAIL)));
    let mut raw = Vec::new();
    if file.take(HOOK_LOG_TAIL).read_to_end(&mut raw).is_err() {
        return;
    }
    let text = String::from_utf8_lossy(&raw);
    let since = crate::clock::now_ms() - HOOK_LOG_WINDOW_MS;
    // (program, message) -> (times, last at)
    let mut seen: std::collections::BTreeMap<(String, String), (usize, String)> =
        Default::default();
    for line in text.lines() {
        let mut parts = line.splitn(4, ' ');
        let (Some(at), Some(tag), Some(who), Some(msg)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if !matches!(tag, "ERROR" | "WARN") {
            continue;
        }
        let program = who.split('[').next().unwrap_or(who);
        if !crate::harness::HOOK_PROGRAMS.contains(&program) {
            continue;
        }
        if crate::clock::parse_wire(at).is_none_or(|t| t < since) {
            continue;
        }
        let e = seen
            .entry((program.to_string(), msg.to_string()))
            .or_insert((0, String::new()));
        e.0 += 1;
        e.1 = at.to_string();
    }
    let harnesses = crate::harness::Harness::ALL
        .iter()
        .map(|h| h.name())
        .collect::<Vec<_>>()
        .join(", ");
    let log = show(&path);
    let mut any = false;
    for ((program, msg), (n, last)) in &seen {
        any = true;
        let what = format!("{program} logged {n} time(s) in the last day, last at {last}: {msg}");
        let registered_wrong = msg.contains("unknown harness")
            || msg.contains("unknown argument")
            || msg.contains("--harness <NAME> is required");
        if registered_wrong {
            f.fail(
                what,
                format!(
                    "a hook is registered with a wrong command line (it takes --harness NAME, NAME one of {harnesses}); run `sp setup install` to register the hooks again, and remove the wrong line by hand if you wrote it"
                ),
            );
        } else if msg.contains("not a hook payload") {
            f.warn(
                what,
                "if a harness ran it, the hook is registered for another harness: `sp setup install` registers each for its own (a try by hand can be ignored)",
            );
        } else {
            f.warn(what, format!("see {log} around that time"));
        }
    }
    if !any {
        f.ok(format!("hooks logged no error in the last day ({log})"));
    }
}

fn check_schedule(f: &mut Findings) {
    let sync = bin_dir().join("sp-sync");
    match cron::current_line() {
        Ok(Some(line)) => {
            let prog = line
                .split_whitespace()
                .find(|w| w.ends_with("sp-sync") || w.ends_with("sp-sync'"));
            let prog = prog
                .and_then(crate::setup::json::first_word)
                .map(PathBuf::from);
            match prog {
                Some(p) if !cron::is_executable(&p) => f.fail(
                    format!("the crontab line runs {}, which is missing", p.display()),
                    "sp setup install (or ./install.sh)",
                ),
                _ => f.ok("the crontab runs sp-sync every minute"),
            }
        }
        Ok(None) => f.warn(
            "no crontab line for sp-sync: acks and events wait until a hook starts sp-sync",
            format!(
                "sp setup install, or add this line with crontab -e:  {}",
                cron::line(&sync)
            ),
        ),
        Err(_) => match cron::alternative_installed() {
            Some(p) => f.ok(format!("no crontab; sp-sync is scheduled by {}", show(&p))),
            // Nothing that could schedule it here: advise nothing that cannot work.
            None if !cfg!(target_os = "macos") && !cron::user_systemd() => f.info(format!(
                "no crontab and no systemd user manager here: hooks start sp-sync when they need it \
                 (to keep it running, start `{} --daemon` from your login script)",
                show(&sync)
            )),
            None => f.warn(
                "no crontab on this machine and no systemd timer or launchd agent for sp-sync",
                "run sp setup install and follow what it prints for the timer",
            ),
        },
    }
}

/// The PATH cron runs sp-sync with: the crontab's own `PATH=` line, else cron's default.
const CRON_DEFAULT_PATH: &str = "/usr/bin:/bin";

/// DECISIONS 39: a start from the phone runs a harness from sp-sync's PATH, and cron gives
/// sp-sync a bare one; a harness found in your shell may not be found there.
fn check_starts(f: &mut Findings, config: Option<&Config>) {
    let Some(config) = config else { return };
    if !config
        .sinks
        .iter()
        .any(|s| s.control == crate::config::ControlMode::Signed)
    {
        return;
    }
    if config.control.folders.as_ref().is_none_or(Vec::is_empty) {
        f.info("starting sessions from a receiver is off: control.folders lists no folder");
        return;
    }
    let crontab = cron::crontab_command().and_then(|c| cron::read(&c).ok());
    let (path, whose) = match crontab {
        Some(text) if text.contains(cron::MARKER) => (
            text.lines()
                .rev()
                .find_map(|l| l.trim().strip_prefix("PATH="))
                .unwrap_or(CRON_DEFAULT_PATH)
                .to_string(),
            "as cron runs it",
        ),
        _ => (std::env::var("PATH").unwrap_or_default(), "in this shell"),
    };
    let found = crate::sync::start::found_on(std::ffi::OsStr::new(&path));
    let yours = crate::sync::start::found_on(&std::env::var_os("PATH").unwrap_or_default());
    for (h, p) in &found {
        f.ok(format!("sp-sync can start {h} ({}) {whose}", p.display()));
    }
    for (h, p) in yours
        .iter()
        .filter(|(h, _)| !found.iter().any(|(g, _)| g == h))
    {
        let dir = p.parent().map(show).unwrap_or_default();
        f.warn(
            format!("{h} is at {} but not on sp-sync's PATH {whose} ({path}): a start of it from the phone fails", p.display()),
            format!("add a line PATH={dir}:{path} above sp-sync's line (crontab -e)"),
        );
    }
    if found.is_empty() && yours.is_empty() {
        f.warn(
            format!(
                "sp-sync can start no harness: neither claude nor codex is on its PATH {whose} ({path})"
            ),
            "install Claude Code or Codex, or set SP_CLAUDE / SP_CODEX to its program",
        );
    }
}

fn open_store() -> Option<crate::store::Store> {
    let db = crate::paths::database_file();
    if !db.exists() {
        return None;
    }
    crate::store::open(&db, DB_BUSY).ok()
}

fn check_database(f: &mut Findings) {
    let db = crate::paths::database_file();
    let shown = show(&db);
    if !db.exists() {
        f.info(format!(
            "no database yet at {shown}: the first hook creates it"
        ));
        return;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(m) = std::fs::metadata(&db) {
            let mode = m.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                f.warn(
                    format!("database {shown} is readable by others (mode {mode:o})"),
                    format!("chmod 600 {}", db.display()),
                );
            }
        }
    }
    match crate::store::open(&db, DB_BUSY) {
        Err(e) => f.fail(
            format!("cannot open the database {shown}: {e:#}"),
            format!(
                "move it aside (mv {0} {0}.broken); the next hook starts a fresh one",
                db.display()
            ),
        ),
        Ok(store) => match store.integrity_check() {
            Ok(r) if r == "ok" => f.ok(format!(
                "database {shown} passes the integrity check (schema {})",
                store.schema_version().unwrap_or(0)
            )),
            Ok(r) => f.fail(
                format!("database {shown} fails the integrity check: {r}"),
                format!(
                    "move it aside (mv {0} {0}.broken); the next hook starts a fresh one",
                    db.display()
                ),
            ),
            Err(e) => f.fail(
                format!("cannot check the database {shown}: {e:#}"),
                "see the log in the state folder",
            ),
        },
    }
}

/// Runs: one warm-up (it creates the database), then the measured ones.
const LATENCY_RUNS: usize = 20;
/// The protocol's budget for a hook that does not wait.
const LATENCY_BUDGET_MS: u128 = 150;

/// Times `sp-event --harness claude-code` on a SessionStart in a throwaway state folder, as
/// a harness would run it, and reports the median.
fn check_latency(f: &mut Findings) {
    let exe = bin_dir().join(SP_EVENT);
    if !cron::is_executable(&exe) {
        f.fail(
            format!("cannot measure hook latency: {} is missing", exe.display()),
            "reinstall with ./install.sh",
        );
        return;
    }
    let tmp = std::env::temp_dir().join(format!(
        "sp-doctor-{}-{}",
        std::process::id(),
        crate::clock::now_ms()
    ));
    let result = measure(&exe, &tmp);
    let _ = std::fs::remove_dir_all(&tmp);
    match result {
        Err(e) => f.fail(
            format!("hook latency: {} failed: {e:#}", exe.display()),
            "see the log, or run it by hand with --help",
        ),
        Ok(mut times) => {
            times.sort();
            let median = times[times.len() / 2];
            let ms = median.as_secs_f64() * 1000.0;
            let text = format!(
                "hook latency: median {ms:.1} ms over {} runs of sp-event (SessionStart)",
                times.len()
            );
            if median.as_millis() > LATENCY_BUDGET_MS {
                f.warn(
                    format!("{text}, above the {LATENCY_BUDGET_MS} ms budget"),
                    "check the disk the state folder is on, and that no other process holds the database",
                );
            } else {
                f.ok(text);
            }
        }
    }
}

fn measure(exe: &Path, tmp: &Path) -> anyhow::Result<Vec<Duration>> {
    std::fs::create_dir_all(tmp)?;
    let payload = serde_json::json!({
        "session_id": "sp-doctor-latency",
        "transcript_path": "/dev/null",
        "cwd": tmp,
        "hook_event_name": "SessionStart",
        "source": "startup",
    })
    .to_string();
    let mut times = Vec::with_capacity(LATENCY_RUNS);
    for i in 0..=LATENCY_RUNS {
        let mut c = Command::new(exe);
        c.args(["--harness", "claude-code"])
            .env("SESSIONPIPE_STATE_DIR", tmp)
            .env("SESSIONPIPE_CONFIG", tmp.join("no-config.json"))
            .env("SESSIONPIPE_NO_SPAWN", "1")
            .env("SESSIONPIPE_LOG", "warn")
            .current_dir(tmp);
        let start = Instant::now();
        let (ok, _, err) = setup::run_command(c, Some(&payload), Duration::from_secs(10))?;
        let took = start.elapsed();
        if !ok {
            anyhow::bail!("exit status not 0: {}", err.trim());
        }
        if i > 0 {
            times.push(took);
        }
    }
    Ok(times)
}

/// DECISIONS 22: a sink's control mode, named with its risk.
fn control_trust(
    f: &mut Findings,
    s: &crate::config::Sink,
    found: &crate::sync::wellknown::Discovered,
    store: Option<&crate::store::Store>,
) {
    use crate::config::ControlMode;
    match s.control {
        ControlMode::Off => {}
        ControlMode::Unsigned => f.warn(
            format!(
                "sink {}: control is unsigned: whoever holds or sees its bearer token (the receiver's operator, a proxy, another local user on its port) can allow a permission prompt here, which runs code on this machine",
                s.name
            ),
            if found.rp_id.is_some() {
                format!("the receiver speaks signed control: set \"control\": \"signed\" for {0} in the config, then run `sp pair {0}`", s.name)
            } else {
                "prefer a receiver that speaks signed control (its well-known declares control.signing), with \"control\": \"signed\"".to_string()
            },
        ),
        ControlMode::Signed => {
            let keys = store
                .and_then(|st| st.enrolled_keys(Some(&s.name)).ok())
                .unwrap_or_default();
            let paired = store
                .and_then(|st| st.paired_machine(&s.name).ok().flatten())
                .is_some();
            if found.rp_id.is_none() {
                f.fail(
                    format!("sink {}: control is \"signed\" but the receiver does not speak signed control (no control.signing in its well-known)", s.name),
                    "use a receiver that speaks signed control, or set \"control\": true and accept the unsigned mode's risk",
                );
            } else if !paired || keys.is_empty() {
                // A set-up step only the person can take (at this terminal, with their
                // phone): until then hooks work as without a receiver.
                f.warn(
                    format!("sink {}: control is \"signed\" but no passkey is enrolled for it yet, so nothing it carries will run", s.name),
                    format!("sp pair {} (prints a link and six digits; approve on your phone)", s.name),
                );
            } else {
                f.ok(format!(
                    "sink {}: signed control, {} passkey(s) enrolled",
                    s.name,
                    keys.len()
                ));
            }
        }
    }
}

/// Issue 19: whether Codex sessions are attached through `sp codex`'s app-server.
fn check_codex_app(f: &mut Findings, config: Option<&Config>) {
    use crate::codex_server;
    let socket = codex_server::socket_path();
    let shown = show(&socket);
    let live: Vec<String> = config
        .and_then(|c| open_store().and_then(|st| st.live_sessions(c.live_ms()).ok()))
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, h)| h == "codex")
        .map(|(k, _)| k)
        .collect();
    if std::fs::symlink_metadata(&socket).is_err() {
        let how = "start Codex with `sp codex` so prompts and cancels reach a running turn at once";
        if live.is_empty() {
            f.info(format!("codex: no app-server at {shown} ({how})"));
        } else {
            f.info(format!(
                "codex: {} live session(s), none attached: no app-server at {shown} ({how}); \
                 until then cancels and prompts wait for a hook seam",
                live.len()
            ));
        }
        return;
    }
    if let Err(e) = codex_server::checked_socket(&socket) {
        f.fail(
            format!("codex: app-server socket refused: {e:#}"),
            format!("remove {shown}; the next `sp codex` starts a private one"),
        );
        return;
    }
    if let Err(e) = codex_server::probe(&socket) {
        f.warn(
            format!("codex: no app-server answers at {shown}: {e:#}"),
            "the next `sp codex` starts one",
        );
        return;
    }
    let report: Option<serde_json::Value> = std::fs::read_to_string(codex_server::attached_file())
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let fresh = report.as_ref().is_some_and(|r| {
        r["connected"] == true
            && r["at_ms"]
                .as_i64()
                .is_some_and(|t| crate::clock::now_ms() - t < 10_000)
    });
    if !fresh {
        f.info(format!(
            "codex: app-server up at {shown}; sp-sync is not attached (it attaches when a Codex hook starts it)"
        ));
        return;
    }
    let threads: Vec<String> = report.as_ref().map_or(Vec::new(), |r| {
        r["threads"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    });
    f.ok(format!(
        "codex: sp-sync follows {} thread(s) of the app-server at {shown}",
        threads.len()
    ));
    let unattached = live
        .iter()
        .filter(|k| {
            !threads
                .iter()
                .any(|t| k.strip_prefix("codex:") == Some(t.as_str()))
        })
        .count();
    if unattached > 0 {
        f.info(format!(
            "codex: {unattached} live session(s) not on that app-server (not started with `sp codex`): \
             their cancels and prompts wait for a hook seam"
        ));
    }
}
