//! Turn ends spooled beside the database: a Stop hook with a sink whose session has a
//! current quiet marker ([`super::quiet`]) has nothing to claim and only a `turn.ended` to
//! record; it writes it as one small file, `<state>/spool/<session hash>.<event id>.json`,
//! instead of opening SQLite. The database takes it in:
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

/// A file that does not parse is taken for one being written this long; then it goes.
const PARTIAL_FOR_MS: Millis = 60 * 1000;
/// No spooled file is read past this size.
const MAX_FILE: u64 = 64 * 1024;

#[derive(Serialize, Deserialize)]
struct TurnEndFile {
    event_id: String,
    key: String,
    harness_event: String,
    reason: String,
    at_ms: Millis,
    /// DECISIONS 40: a `tool.started` / `tool.ended` spooled the same way, with its data;
    /// absent, the file is a turn end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data: Option<serde_json::Value>,
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
    spool(state_dir, key, harness_event, reason.as_str(), None)
}

/// Hook side, DECISIONS 40: a `tool.started` or `tool.ended` of the session, spooled as a
/// turn end is (one small file, no database), under the same condition.
pub fn spool_tool_event(
    state_dir: &Path,
    key: &str,
    harness_event: &str,
    kind: &str,
    data: &serde_json::Value,
) -> Result<()> {
    spool(state_dir, key, harness_event, "", Some((kind, data)))
}

fn spool(
    state_dir: &Path,
    key: &str,
    harness_event: &str,
    reason: &str,
    tool: Option<(&str, &serde_json::Value)>,
) -> Result<()> {
    let at_ms = now_ms();
    let f = TurnEndFile {
        event_id: event_id(at_ms),
        key: key.to_string(),
        harness_event: harness_event.to_string(),
        reason: reason.to_string(),
        at_ms,
        kind: tool.map(|(k, _)| k.to_string()),
        data: tool.map(|(_, d)| d.clone()),
    };
    let dir = dir_of(&state_dir.join("control.db"));
    let path = dir.join(format!(
        "{}.{}.json",
        super::quiet::marker_name(&f.key),
        f.event_id
    ));
    let text = serde_json::to_vec(&f)?;
    // Made in place (no rename: one directory change fewer, each a journal entry on ext4);
    // a reader that meets it before its bytes waits for them ([`spooled`]).
    let create = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
    };
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut file = match create() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                    Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
                    _ => create()?,
                }
            }
            other => other?,
        };
        file.write_all(&text)
    };
    write().with_context(|| format!("cannot spool the event in {}", dir.display()))
}

/// A ULID from the clock and 80 bits of the kernel's randomness (no seeded generator to
/// start in a process that makes one id).
fn event_id(at_ms: Millis) -> String {
    let mut bytes = [0u8; 16];
    // SAFETY: getrandom writes at most `len` bytes into the buffer it is given.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        return crate::wire::new_ulid();
    }
    ulid::Ulid::from_parts(at_ms.max(0) as u64, u128::from_le_bytes(bytes)).to_string()
}

/// The spooled turn ends (of the session `only`, or all), oldest first (ULIDs sort by
/// time), each with its file; files that are not ours to read are skipped, ones that do not
/// parse are left for a minute (a hook may be writing them) and then removed.
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
        if !name.ends_with(".json") {
            continue;
        }
        let text = std::fs::read(&path)?;
        match serde_json::from_slice::<TurnEndFile>(&text) {
            Ok(f) => out.push((path, f)),
            // Made and not yet written (the hook writes it right after): the next pass.
            Err(_) if now_ms() - meta.mtime() * 1000 < PARTIAL_FOR_MS => {}
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
        // A spooled tool event leaves the turn open; only a turn end closes it.
        let tool_event = matches!(
            f.kind.as_deref(),
            Some(event::TOOL_STARTED | event::TOOL_ENDED)
        ) && f.data.is_some();
        let touched = tx
            .prepare_cached(
                "UPDATE sessions SET last_event_ms=max(last_event_ms, ?2), \
                 turn_open=CASE WHEN ?4 THEN turn_open ELSE 0 END, \
                 last_event_at=CASE WHEN last_event_ms < ?2 THEN ?3 ELSE last_event_at END WHERE key=?1",
            )?
            .execute(params![f.key, f.at_ms, format_ms(f.at_ms), tool_event])?;
        if touched != 1 {
            crate::logging::warn(&format!(
                "{}: a turn end spooled for a session the database does not hold; removed",
                f.key
            ));
            let _ = std::fs::remove_file(&path);
            continue;
        }
        // A tool event is stored as it was spooled; anything else is a turn end.
        let (kind, data) = match (f.kind.as_deref(), f.data) {
            (Some(k @ (event::TOOL_STARTED | event::TOOL_ENDED)), Some(d)) => (k, d),
            _ => (event::TURN_ENDED, event::turn_ended(reason)),
        };
        emit_as(
            tx,
            &f.key,
            (kind, &f.harness_event, &data),
            (f.at_ms, &f.event_id),
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
    let event_id = crate::wire::new_ulid();
    emit_as(tx, key, (kind, harness_event, data), (now, &event_id))
}

/// [`emit`] with its time and event id given (a spooled turn end's): the event is `(kind,
/// harness_event, data)`, stamped `(now, event_id)`.
fn emit_as(
    tx: &Transaction,
    key: &str,
    (kind, harness_event, data): (&str, &str, &serde_json::Value),
    (now, event_id): (Millis, &str),
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
    // Any file counts, written yet or not.
    std::fs::read_dir(dir).is_ok_and(|mut d| {
        d.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".json")))
    })
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
