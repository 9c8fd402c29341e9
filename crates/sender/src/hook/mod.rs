//! The hook runtime shared by sp-permission, sp-stop and sp-event: read stdin, let the
//! harness adapter say what it means, act on the store, and print the adapter's answer.
//! A hook never breaks its host: any failure prints nothing, exits 0 and is logged.
//! Most calls find nothing to do: behind a session's quiet marker ([`crate::store::quiet`])
//! the events that only show it alive, and a Stop, are done without opening the database.
mod permission;
mod stop;
mod wake;

use crate::config::Config;
use crate::harness::{Harness, HookInput};
use crate::wire::event::TurnEnd;
use anyhow::{Context, Result};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Set once an answer reached stdout: the fail-closed guard in [`main`] then stays quiet.
static ANSWERED: AtomicBool = AtomicBool::new(false);

/// Hook stdin beyond this is refused unread: no harness sends payloads near it.
pub const STDIN_CAP: u64 = 1 << 20;
/// How long a hook waits for SQLite's write lock before giving up silently.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(3);

pub fn help(program: &str, what: &str) -> String {
    format!(
        "{program} {version}\n{what}\n\nUSAGE:\n  {program} --harness <NAME> < hook-input.json\n\n\
         Reads the harness's hook JSON on stdin and prints that harness's answer, or nothing.\n\
         It always exits 0: a failure prints nothing and is written to the log.\n\n\
         HARNESSES: {harnesses}\n\n{env}\n  SESSIONPIPE_NO_SPAWN   set to stop hooks starting sp-sync when none runs\n",
        version = env!("CARGO_PKG_VERSION"),
        harnesses = Harness::ALL.iter().map(|h| h.name()).collect::<Vec<_>>().join(", "),
        env = crate::paths::ENV_HELP,
    )
}

/// What the command line asked for.
pub enum Cli {
    Run(Harness),
    Help,
    Version,
}

pub fn parse_args(args: &[String]) -> Result<Cli> {
    let mut harness = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" => return Ok(Cli::Help),
            "-V" | "--version" => return Ok(Cli::Version),
            "--harness" => harness = it.next().cloned(),
            s if s.starts_with("--harness=") => harness = Some(s["--harness=".len()..].to_string()),
            other => anyhow::bail!("unknown argument {other:?}"),
        }
    }
    let name = harness.context("--harness <NAME> is required")?;
    let h = Harness::parse(&name).with_context(|| format!("unknown harness {name:?}"))?;
    Ok(Cli::Run(h))
}

fn read_stdin() -> Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(8 * 1024);
    std::io::stdin()
        .lock()
        .take(STDIN_CAP + 1)
        .read_to_end(&mut buf)
        .context("cannot read stdin")?;
    if buf.len() as u64 > STDIN_CAP {
        anyhow::bail!("stdin is larger than {STDIN_CAP} bytes; ignored");
    }
    Ok(buf)
}

/// Writes the whole answer and flushes it; only then may a delivery be confirmed (DECISIONS 21).
pub(crate) fn print_answer(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.write_all(b"\n"))
        .and_then(|_| out.flush())
        .context("cannot write the answer to stdout")?;
    ANSWERED.store(true, Ordering::SeqCst);
    Ok(())
}

/// Runs one hook invocation. Errors are for `main` to log; stdout is written only on success.
pub fn run(harness: Harness) -> Result<()> {
    let stdin = read_stdin()?;
    let input = harness.parse_input(&stdin);
    if let HookInput::Skip(reason) = &input {
        // At the default level: a hook fed something else (another harness's payload, a
        // person trying it by hand) leaves a trace `sp doctor` reports.
        crate::logging::warn(&format!(
            "skipped: stdin is not a hook payload of {} ({reason}); is the hook registered for the harness that runs it?",
            harness.name()
        ));
        return Ok(());
    }
    let config = Config::load().unwrap_or_else(|e| {
        crate::logging::warn(&format!("{e:#}; acting as if no sink were configured"));
        let mut c = Config::default();
        c.broken = true;
        c
    });
    // A headless-capable harness's turn event always reaches the database: it says the
    // session is mid-turn (DECISIONS 38's delivery decision reads it).
    let turn_event = harness
        .caps()
        .headless
        .is_some_and(|h| input.session().is_some_and(|s| s.event == h.turn_event));
    let marked = !turn_event
        && quiet_session(&input)
            .is_some_and(|key| crate::store::quiet::marked(&crate::paths::state_dir(), &key));
    if marked && quiet_done(&config, &input) {
        crate::logging::debug("quiet marker current: nothing pending, the database not opened");
        return Ok(());
    }
    let mut store = crate::store::open(&crate::paths::database_file(), BUSY_TIMEOUT)?;
    // Liveness from the harness's process (DECISIONS 38), recorded with the session.
    if let Some((pid, start)) = harness_process() {
        crate::store::set_harness_process(pid, start);
    }
    if turn_event {
        if let Some(s) = input.session() {
            store.turn_started(s)?;
        }
    }
    // A session first seen at another event than its SessionStart still says what it honours.
    crate::store::set_started_extra(move || {
        let mut extra = serde_json::Map::new();
        extra.insert("control".into(), session_control(harness));
        extra
    });
    // DECISIONS 30: the call itself, for grants and for answers that change its input.
    let call = match &input {
        HookInput::Permission { .. } => harness.permission_call(&stdin),
        HookInput::Api { then, .. } if matches!(**then, HookInput::Permission { .. }) => {
            harness.permission_call(&stdin)
        }
        _ => None,
    };
    act(
        harness,
        &config,
        &mut store,
        input,
        call.as_ref(),
        marked,
        &stdin,
    )
}

/// Shells a harness may run a hook command through: the harness is the shell's parent.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh"];

/// The harness process this hook runs under: its parent, or its grandparent when the
/// parent is a shell; with the process's start time, so a reused pid never counts.
fn harness_process() -> Option<(i64, i64)> {
    let mut pid = std::os::unix::process::parent_id() as i64;
    if let Some((up, comm)) = crate::procs::parent(pid) {
        if SHELLS.contains(&comm.as_str()) && up > 1 {
            pid = up;
        }
    }
    Some((pid, crate::procs::start_time(pid)?))
}

/// The session whose quiet marker ([`crate::store::quiet`]) can spare this event the
/// database: the events that only show the session alive, and a Stop.
fn quiet_session(input: &HookInput) -> Option<String> {
    match input {
        HookInput::Alive { session }
        | HookInput::TerminalAnswered { session, .. }
        | HookInput::Stop { session } => Some(session.key()),
        _ => None,
    }
}

/// With a current quiet marker, nothing is queued, open or stopped for the session and it
/// was touched within the minute: an event that only shows it alive has nothing to do, nor
/// has a Stop with no sink to tell; a Stop with a sink spools its `turn.ended`
/// ([`crate::store::spool`]). Returns whether the event is done.
fn quiet_done(config: &Config, input: &HookInput) -> bool {
    let start_sync = !config.sinks.is_empty();
    match input {
        HookInput::Alive { .. } | HookInput::TerminalAnswered { .. } => {
            if start_sync && matches!(input, HookInput::Alive { .. }) {
                crate::sync_lock::ensure_running();
            }
            true
        }
        HookInput::Stop { session } if start_sync => {
            crate::sync_lock::ensure_running();
            // Nothing to claim, nothing open, no stop mark: the turn ends `stop`, recorded
            // in the spool; sp-sync (or the session's next event) stores it.
            match crate::store::spool::spool_turn_end(
                &crate::paths::state_dir(),
                &session.key(),
                &session.event,
                TurnEnd::Stop,
            ) {
                Ok(()) => true,
                Err(e) => {
                    crate::logging::warn(&format!("{e:#}; storing the turn end in the database"));
                    false
                }
            }
        }
        HookInput::Stop { .. } => true,
        _ => false,
    }
}

/// What the model reads when a tool is denied because the person stopped the session.
const STOPPED_REASON: &str =
    "The person stopped this session through sessionpipe: run no more tools and end your turn.";

/// DECISIONS 26: at a seam where this harness can stop the agent, a queued `cancel` is
/// delivered (printed, flushed, then marked delivered); where its turn is over, it expires.
/// Returns whether the agent was told to stop.
fn cancel_at_seam(
    harness: Harness,
    store: &mut crate::store::Store,
    session: &crate::store::SessionRef,
) -> Result<bool> {
    use crate::harness::CancelSeam;
    match harness.cancel_seam(&session.event) {
        CancelSeam::Deliver => {}
        CancelSeam::Expire => {
            // The person's next prompt (or a new start): a stop of the last turn is over.
            store.clear_stopped(&session.key())?;
            let n = store.expire_cancels(
                session,
                "the turn it was meant for had ended; the person's next prompt came first",
            )?;
            if n > 0 {
                crate::logging::info(&format!("{}: {n} cancel(s) expired", session.key()));
            }
            return Ok(false);
        }
        CancelSeam::None | CancelSeam::DenyPermission => return Ok(false),
    }
    if harness.render_cancel(&session.event, "").is_none()
        || !store.cancel_queued(&session.key())?
    {
        return Ok(false);
    }
    let Some(claim) = store.take_cancels(session, std::process::id())? else {
        return Ok(false);
    };
    let Some((out, how)) = harness.render_cancel(&session.event, &claim.reason()) else {
        return Ok(false);
    };
    // Marked before the answer is printed: a crash between the two leaves a session whose
    // later tools are denied and a cancel that is delivered again, never a stop that lets
    // the next tool run.
    if harness.prompt_seam(&session.event).is_some() {
        store.mark_stopped(&session.key())?;
    }
    print_answer(&out)?;
    store.confirm_delivered(
        &claim.ids,
        &format!("{} {} hook ({how})", harness.name(), session.event),
    )?;
    crate::logging::info(&format!(
        "{}: stopped at {} ({} cancel(s))",
        session.key(),
        session.event,
        claim.ids.len()
    ));
    Ok(true)
}

/// DECISIONS 25: at a tool boundary, the `steer` / `interrupt` prompts sent for it, as the
/// harness's context or denial (a stop comes first). Returns whether anything was printed.
fn at_tool_boundary(
    harness: Harness,
    store: &mut crate::store::Store,
    session: &crate::store::SessionRef,
) -> Result<bool> {
    if store.stopped(&session.key())? {
        if let Some(out) = harness.render_stopped_tool(&session.event, STOPPED_REASON) {
            print_answer(&out)?;
            crate::logging::info(&format!(
                "{}: {} denied, the session was stopped in this turn",
                session.key(),
                session.event
            ));
            return Ok(true);
        }
    }
    if cancel_at_seam(harness, store, session)? {
        return Ok(true);
    }
    let Some(rank) = harness.prompt_seam(&session.event) else {
        return Ok(false);
    };
    // DECISIONS 25: a mode that has a later seam of its own waits for it: an `interrupt`
    // that came while a tool ran is not context after it but the denial of the next tool,
    // so that tool does not run (else the Stop delivers it).
    let upto = harness
        .caps()
        .prompt_seams
        .iter()
        .map(|(_, r)| *r)
        .filter(|r| *r > rank)
        .min()
        .map_or(i64::MAX, |r| r - 1);
    let claims = store.take_seam_prompts_between(session, std::process::id(), (rank, upto))?;
    if claims.is_empty() {
        return Ok(false);
    }
    let Some((out, how)) =
        harness.render_seam_prompt(&session.event, &crate::harness::compose_reason(&claims))
    else {
        return Ok(false);
    };
    print_answer(&out)?;
    let ids: Vec<String> = claims.iter().map(|c| c.id.clone()).collect();
    // The turn goes on with them: their final acks wait for its end (DECISIONS 38).
    store.deliver_for_turn(
        &session.key(),
        &ids,
        &format!("{} {} hook ({how})", harness.name(), session.event),
        harness.reports_turn_text(),
    )?;
    crate::logging::info(&format!(
        "{}: {} prompt(s) delivered at {}",
        session.key(),
        ids.len(),
        session.event
    ));
    Ok(true)
}

/// What `session.started` says the session honours (DECISIONS 30): its harness row's, and for
/// Codex under `sp codex` (hooks run inside the app-server it started, in its environment)
/// what sp-sync's answers to the app-server's approvals honour.
fn session_control(harness: Harness) -> serde_json::Value {
    let caps = harness.caps();
    if harness == Harness::Codex && std::env::var_os(crate::codex_server::APP_SERVER_ENV).is_some()
    {
        return caps.control_with(crate::harness::caps::CODEX_APP_SERVER_ANSWER_FIELDS);
    }
    caps.control()
}

fn on_permission(
    harness: Harness,
    config: &Config,
    store: &mut crate::store::Store,
    session: &crate::store::SessionRef,
    prompt: permission::Prompt,
) -> Result<()> {
    // Where the permission event is itself a seam (Droid's PreToolUse, Copilot CLI's
    // permissionRequest), a stop or an interrupt sent for it answers first; read-only
    // when none is queued.
    if (harness.prompt_seam(&session.event).is_some()
        || harness.cancel_seam(&session.event) == crate::harness::CancelSeam::Deliver)
        && at_tool_boundary(harness, store, session)?
    {
        return Ok(());
    }
    if let Some(call) = prompt.call {
        let granted = if harness.answered_by_api() {
            permission::from_grant_by_api(store, session, &prompt, call)?
        } else {
            permission::from_grant(harness, store, session, call)?
        };
        if granted {
            return Ok(());
        }
    }
    permission::run(harness, config, store, session, prompt)
}

fn on_stop(
    harness: Harness,
    store: &mut crate::store::Store,
    session: &crate::store::SessionRef,
    (start_sync, marked): (bool, bool),
    stdin: &[u8],
) -> Result<()> {
    if start_sync {
        crate::sync_lock::ensure_running();
    }
    // One read says what the rest needs: whether the session was stopped, whether a cancel
    // waits, whether anything is queued at all. A current quiet marker says it already:
    // nothing (a prompt queued since is claimed by the write below all the same).
    let state = if marked {
        crate::store::SeamState {
            live: true,
            fresh: true,
            ..Default::default()
        }
    } else {
        store.seam_state(&session.key())?
    };
    if state.in_flight {
        // DECISIONS 38 `turn` mode: this Stop ends the turn the prompts delivered at the last
        // one started; their final acks carry its text. Read only now: most Stops have none.
        let reply = harness
            .turn_reply(stdin)
            .map(|r| crate::wire::control::ack_reply(&r));
        let n = store.turn_ended_with(&session.key(), reply.as_deref())?;
        crate::logging::info(&format!(
            "{}: the turn of {n} prompt(s) ended ({})",
            session.key(),
            if reply.is_some() {
                "with its reply"
            } else {
                "no reply found"
            }
        ));
    }
    if ends_quiet(store, session, &state, start_sync, marked)? {
        return Ok(());
    }
    // A turn the person stopped at a tool seam ends `interrupt`, not `stop`. With no
    // sink, no one hears of it: the Stop stays read-only when nothing is queued.
    let ends = if state.stopped {
        TurnEnd::Interrupt
    } else {
        TurnEnd::Stop
    };
    let ends = start_sync.then_some(ends);
    if state.stop_mark {
        store.clear_stopped(&session.key())?;
    }
    // A stop beats queued prompts: they wait for the next turn's end.
    if state.cancel_queued && cancel_at_seam(harness, store, session)? {
        store.end_turn(session, TurnEnd::Interrupt)?;
    } else if ends.is_some() || !state.fresh || state.open_attention || state.prompt_rank.is_some()
    {
        stop::run(harness, store, session, ends)?;
    }
    Ok(())
}

/// A hook that only needs the session alive, whose read found nothing pending and no quiet
/// marker: it makes the marker, so the next ones skip the database, and ends. `record`
/// says whether the event writes something anyway (a Stop with a sink), which then runs.
fn ends_quiet(
    store: &mut crate::store::Store,
    session: &crate::store::SessionRef,
    state: &crate::store::SeamState,
    record: bool,
    marked: bool,
) -> Result<bool> {
    if record || marked || !state.idle() {
        return Ok(false);
    }
    store.settle_quiet(&session.key())
}

/// A server API's report that the turn is over (OpenCode's idle).
fn turn_over(store: &mut crate::store::Store, session: &crate::store::SessionRef) -> Result<()> {
    let key = session.key();
    // A report older than the newest stored (its sp-event ran late) left the session
    // busy: that idle is not this turn's end.
    let idle = store.api_session(&key)?.and_then(|a| a.idle);
    if idle != Some(false) {
        let ends = if store.stopped(&key)? {
            TurnEnd::Interrupt
        } else {
            TurnEnd::Stop
        };
        store.clear_stopped(&key)?;
        store.turn_over(session, ends)?;
    }
    Ok(())
}

/// Acts on what the event means. Kept apart from `run` so an API report (OpenCode) can record
/// where the session's server is and then act on the event it came with.
fn act(
    harness: Harness,
    config: &Config,
    store: &mut crate::store::Store,
    input: HookInput,
    call: Option<&crate::harness::Call>,
    marked: bool,
    stdin: &[u8],
) -> Result<()> {
    let start_sync = !config.sinks.is_empty();
    match input {
        HookInput::Permission {
            session,
            attention_id,
            tool,
            message,
        } => on_permission(
            harness,
            config,
            store,
            &session,
            permission::Prompt {
                attention_id: &attention_id,
                tool: tool.as_deref(),
                message: message.as_deref(),
                call,
            },
        )?,
        HookInput::Stop { session } => {
            on_stop(harness, store, &session, (start_sync, marked), stdin)?
        }
        HookInput::SessionStart { session, source } => {
            // The page offers only what the harness honours (DECISIONS 30).
            let mut extra = serde_json::Map::new();
            extra.insert("control".into(), session_control(harness));
            store.record_session(&session, &source, &extra)?;
            cancel_at_seam(harness, store, &session)?;
            if start_sync {
                crate::sync_lock::ensure_running();
            }
        }
        HookInput::SessionEnd { session } => {
            store.end_session(&session)?;
            // DECISIONS 30: a session's grants end with it.
            let n = store.end_grants(&session.key())?;
            if n > 0 {
                crate::logging::info(&format!(
                    "{}: {n} grant(s) ended with the session",
                    session.key()
                ));
            }
        }
        HookInput::TerminalAnswered {
            session,
            attention_id,
        } => {
            // The common case (nothing open, nothing queued, touched within the minute) ends
            // after one read; with nothing pending at all it leaves a quiet marker behind.
            let state = store.seam_state(&session.key())?;
            if ends_quiet(store, &session, &state, false, marked)? {
                return Ok(());
            }
            if state.quiet(harness.prompt_seam(&session.event)) {
                return Ok(());
            }
            let n = store.terminal_answered(&session, attention_id.as_deref())?;
            if n > 0 {
                crate::logging::info(&format!(
                    "{}: terminal answered {n} prompt(s)",
                    session.key()
                ));
            }
            at_tool_boundary(harness, store, &session)?;
        }
        HookInput::Alive { session } => {
            // The common case ends after one read, as for TerminalAnswered.
            let state = store.seam_state(&session.key())?;
            if !ends_quiet(store, &session, &state, false, marked)?
                && !state.quiet(harness.prompt_seam(&session.event))
            {
                store.record_event(&session, None)?;
                at_tool_boundary(harness, store, &session)?;
            }
            if start_sync {
                crate::sync_lock::ensure_running();
            }
        }
        HookInput::TurnOver { session } => {
            turn_over(store, &session)?;
            if start_sync {
                crate::sync_lock::ensure_running();
            }
        }
        HookInput::Api { report, then } => {
            if let Some(session) = then.session() {
                store.api_report(
                    session,
                    report.base_url.as_deref(),
                    report.directory.as_deref(),
                    report.idle,
                    report.seq,
                )?;
            }
            act(harness, config, store, *then, call, false, stdin)?;
        }
        HookInput::Skip(_) => {}
    }
    Ok(())
}

/// The whole of a hook binary's `main`: parse arguments, run, and always exit 0 with nothing
/// on stdout unless an answer was printed. Panics are caught and logged too.
pub fn main(program: &str, what: &str) -> std::process::ExitCode {
    crate::store::tune_for_hook();
    crate::logging::init(program);
    std::panic::set_hook(Box::new(|info| {
        crate::logging::error(&format!("panic: {info}"))
    }));
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse_args(&args) {
        Ok(Cli::Help) => {
            print!("{}", help(program, what));
            return std::process::ExitCode::SUCCESS;
        }
        Ok(Cli::Version) => {
            println!("{program} {}", env!("CARGO_PKG_VERSION"));
            return std::process::ExitCode::SUCCESS;
        }
        Ok(Cli::Run(harness)) => {
            // A permission hook of a harness that reads silence as "run" (Cursor) answers
            // that harness's own "ask the person" on every path that printed nothing: bad
            // config, no or paused sink, a timeout, SIGTERM, the parent gone, an error, a
            // panic (DECISIONS 27). A signal before the wait began is caught here too, so it
            // cannot end the process before the guard speaks.
            let fallback = (program == crate::harness::SP_PERMISSION)
                .then(|| harness.render_no_answer())
                .flatten();
            if fallback.is_some() {
                let flag = Arc::new(AtomicBool::new(false));
                for sig in [
                    signal_hook::consts::SIGTERM,
                    signal_hook::consts::SIGINT,
                    signal_hook::consts::SIGHUP,
                ] {
                    let _ = signal_hook::flag::register(sig, Arc::clone(&flag));
                }
            }
            match std::panic::catch_unwind(|| run(harness)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => crate::logging::error(&format!("{e:#}")),
                Err(_) => {} // already logged by the panic hook
            }
            if let Some(text) = fallback {
                if !ANSWERED.load(Ordering::SeqCst) {
                    match print_answer(&text) {
                        Ok(()) => crate::logging::info(&format!(
                            "{}: no answer printed; answered {text} so the harness asks the person",
                            harness.name()
                        )),
                        Err(e) => crate::logging::error(&format!("{e:#}")),
                    }
                }
            }
        }
        Err(e) => crate::logging::error(&format!("{e:#}; run {program} --help")),
    }
    std::process::ExitCode::SUCCESS
}
