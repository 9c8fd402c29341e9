//! The quiet marker: one empty file per live session, `<state>/quiet/<hash of the key>`,
//! whose presence says "nothing can be pending for this session's hooks", so the hooks that
//! only show the session alive (PostToolUse, UserPromptSubmit, ...) and a Stop skip SQLite
//! altogether: one `stat` of the state folder and one of the marker instead of opening the
//! database and parsing its schema (most of a hook's cost, BENCHMARKS.md). A Stop with a
//! sink spools its `turn.ended` ([`super::spool`]).
//!
//! The invariant (never "quiet" while something is pending):
//! - every writer that could give a seam hook work (a message ingested for the session, an
//!   attention opened, a stop mark set, the session ended) removes the marker inside its
//!   write transaction, before COMMIT; when the removal fails, the transaction fails with it;
//! - a marker is (re)made only by [`super::Store::settle_quiet`], while it holds the write lock
//!   (`BEGIN IMMEDIATE`) and after reading, in that transaction, that nothing is pending.
//!
//! Writers and settlers serialise on the write lock, so a marker seen by a hook was made
//! after every commit that could matter to it and before any later one: the hook acts as if
//! it ran just before that later writer. Crash points: a writer dying after the removal and
//! before COMMIT leaves no marker (the full path runs); a settler dying after writing the
//! marker and before COMMIT leaves a marker whose "nothing pending" it read under the lock.
//!
//! Liveness (DECISIONS 5, 28) is unchanged: the marker's mtime is the `last_event_ms`
//! written in the same transaction, and it counts only while that is under a minute old,
//! exactly when [`super::Store::record_event`] would skip its write too.
use crate::clock::{now_ms, Millis};
use anyhow::{Context, Result};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A marker older than this says nothing: the session is touched again. The store's hooks
/// touch a session at most once a minute by this same figure.
pub(crate) const MARKER_FOR_MS: Millis = 60_000;

/// The folder of the markers, beside the database.
pub(crate) fn dir_of(db: &Path) -> PathBuf {
    db.parent().unwrap_or(Path::new(".")).join("quiet")
}

/// The marker's file name: the first 128 bits of SHA-256 of the session key, in hex (a key
/// is the harness's text; a hash keeps it a plain, bounded name).
pub(crate) fn marker_name(key: &str) -> String {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(key.as_bytes());
    h[..16].iter().map(|b| format!("{b:02x}")).collect()
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether the session `key` of the database in `state_dir` has a current quiet marker.
/// Any doubt answers false (the full path runs): a state folder that is not this user's
/// private folder (where nobody else could have made the file), a marker that is not a plain
/// file of this user, or one not made within the last minute (by this clock).
pub fn marked(state_dir: &Path, key: &str) -> bool {
    let Ok(dir) = std::fs::metadata(state_dir) else {
        return false;
    };
    if !dir.is_dir() || dir.uid() != euid() || dir.mode() & 0o077 != 0 {
        return false;
    }
    let path = state_dir.join("quiet").join(marker_name(key));
    let Ok(m) = std::fs::symlink_metadata(path) else {
        return false;
    };
    if !m.file_type().is_file() || m.uid() != euid() {
        return false;
    }
    let made = m.mtime() * 1000 + m.mtime_nsec() / 1_000_000;
    let age = now_ms() - made;
    (0..MARKER_FOR_MS).contains(&age)
}

/// Removes the session's marker. Called inside a writer's transaction, before COMMIT: an
/// error (other than "there was none") must fail that transaction.
pub(crate) fn unmark(dir: &Path, key: &str) -> Result<()> {
    match std::fs::remove_file(dir.join(marker_name(key))) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| {
            format!(
                "cannot remove the quiet marker of {key} in {}; nothing was stored",
                dir.display()
            )
        }),
    }
}

/// Makes (or refreshes) the marker with mtime `at`. Only under the write lock.
pub(crate) fn mark(dir: &Path, key: &str, at: Millis) -> Result<()> {
    if let Some(t) = crate::files::private_dir(dir)? {
        crate::logging::info(&t.0);
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.join(marker_name(key)))?;
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(at.max(0) as u64);
    file.set_modified(at)?;
    Ok(())
}
