//! One sp-sync per state folder: it holds an exclusive lock on `sp-sync.lock` for its whole run.
//! Hooks probe the lock and start one, detached, when nobody holds it.
use std::fs::{File, TryLockError};
use std::process::{Command, Stdio};

/// The lock file, created at 0600 without following a symlink, in a private state folder
/// (DECISIONS 24).
fn open_lock_file() -> std::io::Result<File> {
    let path = crate::paths::sync_lock_file();
    if let Some(dir) = path.parent() {
        if let Some(t) = crate::files::private_dir(dir)? {
            crate::logging::info(&t.0);
        }
    }
    let (file, tightened) = crate::files::open_private(&path, false)?;
    if let Some(t) = tightened {
        crate::logging::info(&t.0);
    }
    Ok(file)
}

/// Held for the life of an sp-sync process; dropping it releases the lock.
pub struct SyncLock {
    _file: File,
}

/// Takes the lock, retrying briefly: a hook probing the lock holds it for microseconds.
/// `None` means another sp-sync runs.
pub fn acquire() -> std::io::Result<Option<SyncLock>> {
    let file = open_lock_file()?;
    for _ in 0..30 {
        match file.try_lock() {
            Ok(()) => return Ok(Some(SyncLock { _file: file })),
            Err(TryLockError::WouldBlock) => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            Err(TryLockError::Error(e)) => return Err(e),
        }
    }
    Ok(None)
}

/// Whether an sp-sync holds the lock now.
pub fn is_running() -> bool {
    let Ok(file) = open_lock_file() else {
        return false;
    };
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            false
        }
        Err(_) => true,
    }
}

/// Starts a detached sp-sync when none is running; never waits for it. It stays up while
/// hooks keep reporting (`--while-live`, DECISIONS 28), so cron is only a safety net.
pub fn ensure_running() {
    if std::env::var_os("SESSIONPIPE_NO_SPAWN").is_some_and(|v| !v.is_empty()) || is_running() {
        return;
    }
    let bin = match std::env::current_exe() {
        Ok(p) => p.with_file_name("sp-sync"),
        Err(e) => {
            crate::logging::warn(&format!("cannot locate sp-sync: {e}"));
            return;
        }
    };
    let mut cmd = Command::new(&bin);
    cmd.arg("--while-live")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // Its own process group: the harness's signals to the hook's group must not reach it.
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    match cmd.spawn() {
        Ok(child) => crate::logging::info(&format!("started sp-sync (pid {})", child.id())),
        Err(e) => crate::logging::warn(&format!("cannot start {}: {e}", bin.display())),
    }
}
