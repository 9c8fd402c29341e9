//! Turn ends spooled beside the database: a Stop hook with a sink whose session has a
//! current quiet marker ([`super::quiet`]) has nothing to claim and only a `turn.ended` to
//! record; it writes it as one small file, `<state>/spool/<session hash>.<event id>.json`
//! (written aside, then renamed into place), instead of opening SQLite. The database takes it in:
//!
//! - before any other event of that session gets its seq ([`emit`] drains the
//!   session's spooled turn ends first, in the same transaction), so the session's events keep
//!   the order they happened in (a session's hooks run one after another);
//! - and within one watch tick of sp-sync ([`Store::drain_spool`]), which then sends it.
//!
//! A file is removed only once its event was already committed before the transaction that
//! finds it (its `event_id` is unique), so a crash at any point neither loses the turn end
//! nor stores it twice.
use super::Store;
use crate::clock::{format_ms, now_ms, Millis};
use crate::wire::event;
use anyhow::{Context, Result};
use rusqlite::{params, OptionalExtension, Transaction};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The folder of spooled turn ends, beside the database.
pub(crate) fn dir_of(db: &Path) -> PathBuf {
    db.parent().unwrap_or(Path::new(".")).join("spool")
}

/// A half-written file older than this was left by a hook that died; it goes.
const STALE_TMP_MS: Millis = 10 * 60 * 1000;
/// No spooled file is read past this size.
const MAX_FILE: u64 = 64 * 1024;

#[derive(Serialize, Deserialize)]
struct TurnEndFile {
    event_id: String,
    key: String,
    harness_event: String,
    reason: String,
    at_ms: Millis,
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Hook side: records the session's `turn.ended` in the spool of the state folder
/// `state_dir` (which the caller found private, [`super::quiet::marked`]).
pub fn spool_turn_end(
    state_dir: &Path,
    key: &str,
    harness_event: &str,
    reason: event::TurnEnd,
) -> Result<()> {
    let dir = dir_of(&state_dir.join("control.db"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
    }
    let f = TurnEndFile {
        event_id: crate::wire::new_ulid(),
        key: key.to_string(),
        harness_event: harness_event.to_string(),
        reason: reason.as_str().to_string(),
        at_ms: now_ms(),
    };
    let name = format!("{}.{}", super::quiet::marker_name(key), f.event_id);
    let tmp = dir.join(format!(".{name}.tmp"));
    let done = dir.join(format!("{name}.json"));
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        file.write_all(&serde_json::to_vec(&f)?)?;
        std::fs::rename(&tmp, &done)
    };
    write().with_context(|| format!("cannot spool the turn end in {}", dir.display()))
}

/// The spooled turn ends (of the session `only`, or all), oldest first (ULIDs sort by
/// time), each with its file; files that are not ours to read are skipped, half-written
/// ones left by a dead hook removed.
fn spooled(dir: &Path, only: Option<&str>) -> Result<Vec<(PathBuf, TurnEndFile)>> {
    let prefix = only.map(|k| format!("{}.", super::quiet::marker_name(k)));
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", dir.display())),
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e?;
        let path = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        if prefix
            .as_ref()
            .is_some_and(|p| !name.starts_with(p.as_str()))
        {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.file_type().is_file() || meta.uid() != euid() || meta.len() > MAX_FILE {
            continue;
        }
        if name.ends_with(".tmp") {
            let made = meta.mtime() * 1000;
            if now_ms() - made > STALE_TMP_MS {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        }
        if !name.ends_with(".json") {
            continue;
        }
        let text = std::fs::read(&path)?;
        match serde_json::from_slice::<TurnEndFile>(&text) {
            Ok(f) => out.push((path, f)),
            Err(e) => {
                crate::logging::warn(&format!(
                    "{}: not a spooled turn end ({e}); removed",
                    path.display()
                ));
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    out.sort_by(|a, b| a.1.event_id.cmp(&b.1.event_id));
    Ok(out)
}

/// Takes the spooled turn ends (of session `only`, or all) into `tx`, the caller holding
/// the write lock. Returns the files whose events it stored: they stay until the caller's
/// COMMIT succeeded (then it may remove them) or a later drain finds them committed.
/// `remove_committed` only when this is the transaction's first drain, so an event "already
/// there" was committed by an earlier transaction, not inserted by this one (which may
/// still roll back).
pub(super) fn drain(
    tx: &Transaction,
    dir: &Path,
    only: Option<&str>,
    remove_committed: bool,
) -> Result<Vec<PathBuf>> {
    let mut stored = Vec::new();
    for (path, f) in spooled(dir, only)? {
        if only.is_some_and(|k| k != f.key) {
            continue;
        }
        let committed = tx
            .prepare_cached("SELECT 1 FROM events WHERE event_id=?1")?
            .query_row(params![f.event_id], |_| Ok(()))
            .optional()?
            .is_some();
        if committed {
            if remove_committed {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        }
        let reason = match f.reason.as_str() {
            "interrupt" => event::TurnEnd::Interrupt,
            _ => event::TurnEnd::Stop,
        };
        let touched = tx
            .prepare_cached(
                "UPDATE sessions SET last_event_ms=max(last_event_ms, ?2), \
                 last_event_at=CASE WHEN last_event_ms < ?2 THEN ?3 ELSE last_event_at END WHERE key=?1",
            )?
            .execute(params![f.key, f.at_ms, format_ms(f.at_ms)])?;
        if touched != 1 {
            crate::logging::warn(&format!(
                "{}: a turn end spooled for a session the database does not hold; removed",
                f.key
            ));
            let _ = std::fs::remove_file(&path);
            continue;
        }
        emit_as(
            tx,
            &f.key,
            event::TURN_ENDED,
            &f.harness_event,
            &event::turn_ended(reason),
            f.at_ms,
            &f.event_id,
        )?;
        stored.push(path);
    }
    Ok(stored)
}

/// Appends an event with the session's next seq, after any turn end of the session still in
/// the spool ([`super::spool`]), so the session's events keep their order.
pub(crate) fn emit(
    tx: &Transaction,
    key: &str,
    kind: &str,
    harness_event: &str,
    data: &serde_json::Value,
    now: Millis,
) -> Result<()> {
    if let Some(db) = tx.path().filter(|p| !p.is_empty()) {
        drain(tx, &dir_of(Path::new(db)), Some(key), false)?;
    }
    emit_as(
        tx,
        key,
        kind,
        harness_event,
        data,
        now,
        &crate::wire::new_ulid(),
    )
}

/// [`emit`] with its time and event id given (a spooled turn end's).
fn emit_as(
    tx: &Transaction,
    key: &str,
    kind: &str,
    harness_event: &str,
    data: &serde_json::Value,
    now: Millis,
    event_id: &str,
) -> Result<()> {
    let (seq, harness, session_id, cwd): (i64, String, String, Option<String>) = tx.query_row(
        "UPDATE sessions SET next_seq = next_seq + 1 WHERE key=?1 \
         RETURNING next_seq - 1, harness, session_id, cwd",
        params![key],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )?;
    tx.prepare_cached(
        "INSERT INTO events(event_id, session_key, seq, type, time, harness, harness_event, session_id, cwd, data) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?
    .execute(params![
        event_id,
        key,
        seq,
        kind,
        format_ms(now),
        harness,
        harness_event,
        session_id,
        cwd,
        data.to_string()
    ])?;
    Ok(())
}

/// Whether any turn end waits in the spool (sp-sync is not idle while one does).
pub(crate) fn pending(dir: &Path) -> bool {
    spooled(dir, None).is_ok_and(|v| !v.is_empty())
}

impl Store {
    /// Takes every spooled turn end into the database (sp-sync, each watch tick that sees
    /// the spool change). Returns how many it stored.
    pub fn drain_spool(&mut self) -> Result<usize> {
        let dir = self.spool_dir.clone();
        // Read without the write lock first: most passes find nothing.
        if spooled(&dir, None)?.is_empty() {
            return Ok(0);
        }
        let tx = self.write_tx()?;
        let stored = drain(&tx, &dir, None, true)?;
        tx.commit()?;
        // Committed: their files are done with.
        for p in &stored {
            let _ = std::fs::remove_file(p);
        }
        Ok(stored.len())
    }

    /// The spool folder, for sp-sync to watch.
    pub fn spool_dir(&self) -> &Path {
        &self.spool_dir
    }
}
