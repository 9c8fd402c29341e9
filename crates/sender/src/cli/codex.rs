//! `sp codex [ARGS…]`: Codex's terminal UI attached to one app-server per user (issue 19), so
//! sp-sync can be a second client of the same live thread (src/sync/codex_bridge.rs). Starts
//! `codex app-server --listen unix://<state>/codex/app-server.sock` when none answers there
//! (under a lock, so two `sp codex` at once start one), then execs `codex --remote unix://…
//! ARGS…`: the terminal is Codex's. The folder is 0700; Codex makes the socket 0600 in its
//! own 0700 folder and puts a symlink at our path; we connect only after checking both.
use super::Done;
use crate::codex_server;
use anyhow::{bail, Context, Result};
use std::fs::{File, TryLockError};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a new app-server may take to answer on its socket.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long to wait for another `sp codex` that is starting the app-server.
const LOCK_TIMEOUT: Duration = Duration::from_secs(40);
const POLL_FLOOR: Duration = Duration::from_millis(100);

/// The Codex program: `$SP_CODEX`, else `codex` on PATH.
fn codex_program() -> String {
    std::env::var("SP_CODEX")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "codex".into())
}

pub fn run(args: Vec<String>) -> Result<Done> {
    let socket = ensure_app_server()?;
    let url = format!("unix://{}", socket.display());
    let program = codex_program();
    // exec: only returns on failure.
    let e = Command::new(&program)
        .arg("--remote")
        .arg(&url)
        .args(&args)
        .exec();
    bail!("cannot run {program}: {e} (install Codex, or set SP_CODEX to its path)")
}

/// The socket of a running app-server, started if need be.
pub fn ensure_app_server() -> Result<std::path::PathBuf> {
    let dir = codex_server::dir();
    for d in [crate::paths::state_dir(), dir.clone()] {
        if let Some(t) =
            crate::files::private_dir(&d).with_context(|| format!("preparing {}", d.display()))?
        {
            crate::logging::info(&t.0);
        }
    }
    let socket = codex_server::socket_path();
    if codex_server::probe(&socket).is_ok() {
        return Ok(socket);
    }
    let (lock, _) = crate::files::open_private(&dir.join("app-server.lock"), false)?;
    take_lock(&lock)?;
    // Another sp codex may have started it while we waited for the lock.
    if codex_server::probe(&socket).is_ok() {
        return Ok(socket);
    }
    start(&socket)?;
    Ok(socket)
}

fn take_lock(f: &File) -> Result<()> {
    let until = Instant::now() + LOCK_TIMEOUT;
    loop {
        match f.try_lock() {
            Ok(()) => return Ok(()),
            Err(TryLockError::WouldBlock) if Instant::now() < until => {
                std::thread::sleep(POLL_FLOOR)
            }
            Err(TryLockError::WouldBlock) => {
                bail!("another sp codex has been starting the app-server for {LOCK_TIMEOUT:?}")
            }
            Err(TryLockError::Error(e)) => return Err(e.into()),
        }
    }
}

fn start(socket: &Path) -> Result<()> {
    // A stale link or socket from an app-server that is gone: Codex wants the path free.
    if let Ok(m) = std::fs::symlink_metadata(socket) {
        use std::os::unix::fs::FileTypeExt;
        if m.file_type().is_symlink() || m.file_type().is_socket() {
            std::fs::remove_file(socket)
                .with_context(|| format!("removing the stale {}", socket.display()))?;
        } else {
            bail!(
                "{} is neither a socket nor a link; remove it",
                socket.display()
            );
        }
    }
    let log_path = codex_server::dir().join("app-server.log");
    let (log, _) = crate::files::open_private(&log_path, true)?;
    let program = codex_program();
    let mut cmd = Command::new(&program);
    cmd.arg("app-server")
        .arg("--listen")
        .arg(format!("unix://{}", socket.display()))
        .env(codex_server::APP_SERVER_ENV, "1")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // SAFETY: setsid and umask are async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            // Its own session: it outlives this terminal and is not hit by its Ctrl-C.
            libc::setsid();
            libc::umask(0o077);
            Ok(())
        });
    }
    let mut child = cmd.spawn().with_context(|| {
        format!("cannot start {program} app-server (install Codex, or set SP_CODEX)")
    })?;
    crate::logging::info(&format!(
        "started codex app-server (pid {}) on {}",
        child.id(),
        socket.display()
    ));
    let until = Instant::now() + START_TIMEOUT;
    loop {
        if codex_server::probe(socket).is_ok() {
            // It outlives us: after the exec, Codex's UI is its parent, then init.
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            bail!(
                "codex app-server exited ({status}) before it answered; see {}",
                log_path.display()
            );
        }
        if Instant::now() >= until {
            bail!(
                "codex app-server did not answer on {} within {START_TIMEOUT:?}; see {}",
                socket.display(),
                log_path.display()
            );
        }
        std::thread::sleep(POLL_FLOOR);
    }
}
