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
//!
//! Tool events (DECISIONS 40) come on every tool call, so they are not a file each (a new
//! inode per call is most of what spooling cost the hook): each line of the session's log
//! `<session hash>.tools` is one event, appended under a shared `flock`. A drain renames
//! the log to `<session hash>.<id>.drain` and takes it under an exclusive lock, so no
//! writer still adds to it once it is read (a writer checks, holding its lock, that the
//! path it opened is still the log; else it opens the new one); the drained file goes as a
//! `.json` file does, once its events are committed.
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
/// A session's tool log takes no more than this (sp-sync drains it every quarter second);
/// past it a hook stores its tool event in the database instead.
const MAX_TOOL_LOG: u64 = 1024 * 1024;
/// The endings of a session's tool log, and of a drained one.
const TOOL_LOG: &str = ".tools";
const DRAINING: &str = ".drain";

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
    spool(state_dir, key, harness_event, reason.as_str())
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
    let at_ms = now_ms();
    let f = TurnEndFile {
        event_id: event_id(at_ms),
        key: key.to_string(),
        harness_event: harness_event.to_string(),
        reason: String::new(),
        at_ms,
        kind: Some(kind.to_string()),
        data: Some(data.clone()),
    };
    let mut line = serde_json::to_vec(&f)?;
    line.push(b'\n');
    let dir = dir_of(&state_dir.join("control.db"));
    let path = dir.join(format!("{}{TOOL_LOG}", super::quiet::marker_name(key)));
    append_line(&dir, &path, &line)
        .with_context(|| format!("cannot spool the tool event in {}", dir.display()))
}

/// Appends `line` to the log at `path` as one write, holding a shared lock on the file that
/// is still the log (a drain may have renamed the one opened: then the new one).
fn append_line(dir: &Path, path: &Path, line: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut how = std::fs::OpenOptions::new();
    how.append(true).create(true);
    for _ in 0..3 {
        let mut file = open_in(dir, path, &mut how)?;
        // A drain holds its lock for one read; a stopped sp-sync never holds the hook.
        lock_within(&file, libc::LOCK_SH, HOOK_LOCK_WAIT)?;
        let meta = file.metadata()?;
        let still = std::fs::symlink_metadata(path).is_ok_and(|m| m.ino() == meta.ino());
        if !still {
            continue;
        }
        if meta.uid() != euid() || meta.len() + line.len() as u64 > MAX_TOOL_LOG {
            return Err(std::io::Error::other(format!(
                "{} is full or not ours",
                path.display()
            )));
        }
        return file.write_all(line);
    }
    Err(std::io::Error::other("the tool log kept moving"))
}

/// Opens `path` in the spool folder `dir` the way `how` says (0600, never through a link),
/// making the folder (0700) when it is not there yet.
fn open_in(
    dir: &Path,
    path: &Path,
    how: &mut std::fs::OpenOptions,
) -> std::io::Result<std::fs::File> {
    how.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    match how.open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match std::fs::DirBuilder::new().mode(0o700).create(dir) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
                _ => how.open(path),
            }
        }
        other => other,
    }
}

/// How long a hook waits for a drain's lock on the tool log, and a drain for a writer's.
const HOOK_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(100);
const DRAIN_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// Takes `op` (`LOCK_SH`, `LOCK_EX`) on `file`, trying for at most `wait`.
fn lock_within(file: &std::fs::File, op: i32, wait: std::time::Duration) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let until = std::time::Instant::now() + wait;
    loop {
        // SAFETY: flock on a descriptor the caller owns; released when it is closed.
        if unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) || std::time::Instant::now() >= until {
            return Err(e);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Renames each tool log (of the session with file name prefix `prefix`, or all) to a
/// drained file, so new lines go to a new log.
fn take_tool_logs(dir: &Path, prefix: Option<&str>) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    let names: Vec<String> = entries
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<_>>()?;
    // A session's drained logs sort by name in the order they were taken: a new one's id
    // follows the newest there (ids made in one millisecond would sort by chance).
    let newest = |hash: &str| {
        names
            .iter()
            .filter_map(|n| n.strip_prefix(hash)?.strip_prefix('.'))
            .filter_map(|n| n.strip_suffix(DRAINING))
            .filter_map(|id| ulid::Ulid::from_string(id).ok())
            .max()
    };
    for name in &names {
        let Some(hash) = name.strip_suffix(TOOL_LOG) else {
            continue;
        };
        if prefix.is_some_and(|p| !name.starts_with(p)) {
            continue;
        }
        let mut id = ulid::Ulid::new();
        if let Some(after) = newest(hash)
            .filter(|n| *n >= id)
            .and_then(|n| n.increment())
        {
            id = after;
        }
        let to = dir.join(format!("{hash}.{id}{DRAINING}"));
        match std::fs::rename(dir.join(name), &to) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot take {name}")),
        }
    }
    Ok(())
}

/// The events of a drained tool log, once no writer holds it (an empty one is removed).
fn read_drained(path: &Path) -> Result<Vec<TurnEndFile>> {
    use std::io::Read;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    // A writer that opened it before the rename finishes its one write first; one that
    // holds it longer leaves it to the next drain.
    if lock_within(&file, libc::LOCK_EX, DRAIN_LOCK_WAIT).is_err() {
        crate::logging::warn(&format!(
            "{}: still written; left for the next drain",
            path.display()
        ));
        return Ok(Vec::new());
    }
    let mut text = Vec::new();
    (&file)
        .take(MAX_TOOL_LOG + MAX_FILE)
        .read_to_end(&mut text)?;
    if text.is_empty() {
        let _ = std::fs::remove_file(path);
    }
    let mut out = Vec::new();
    for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice::<TurnEndFile>(line) {
            Ok(f) => out.push(f),
            // A line cut by a hook that died mid-write: the rest of the log still counts.
            Err(e) => crate::logging::warn(&format!(
                "{}: a line that is not a tool event ({e}); skipped",
                path.display()
            )),
        }
    }
    Ok(out)
}

fn spool(state_dir: &Path, key: &str, harness_event: &str, reason: &str) -> Result<()> {
    let at_ms = now_ms();
    let f = TurnEndFile {
        event_id: event_id(at_ms),
        key: key.to_string(),
        harness_event: harness_event.to_string(),
        reason: reason.to_string(),
        at_ms,
        kind: None,
        data: None,
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
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut how = std::fs::OpenOptions::new();
        how.write(true).create_new(true);
        let mut file = open_in(&dir, &path, &mut how)?;
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

/// The spooled events (of the session `only`, or all), oldest first, each with its file
/// (a drained tool log's lines share theirs); files that are not ours to read are skipped,
/// ones that do not parse are left for a minute (a hook may be writing them) and then removed.
fn spooled(dir: &Path, only: Option<&str>) -> Result<Vec<(PathBuf, TurnEndFile)>> {
    let prefix = only.map(|k| format!("{}.", super::quiet::marker_name(k)));
    take_tool_logs(dir, prefix.as_deref())?;
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", dir.display())),
    };
    let mut out = Vec::new();
    // By name: a session's drained logs in the order they were taken (their ids sort so).
    let mut entries = entries.collect::<std::io::Result<Vec<_>>>()?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for e in entries {
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
        if !meta.file_type().is_file() || meta.uid() != euid() {
            continue;
        }
        if name.ends_with(DRAINING) {
            for f in read_drained(&path)? {
                out.push((path.clone(), f));
            }
            continue;
        }
        if meta.len() > MAX_FILE || !name.ends_with(".json") {
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
    // In time order; a log's lines within one millisecond keep the order they were written
    // in (a stable sort: the ids' random part would shuffle them).
    out.sort_by_key(|(_, f)| f.at_ms);
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
        d.any(|e| {
            e.is_ok_and(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.ends_with(".json") || name.ends_with(TOOL_LOG) || name.ends_with(DRAINING)
            })
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(dir: &Path, key: &str, n: usize) {
        let state = dir.parent().unwrap();
        let data = serde_json::json!({"tool": "Bash", "summary": format!("call {n}")});
        spool_tool_event(state, key, "PreToolUse", event::TOOL_STARTED, &data).unwrap();
    }

    fn summaries(got: &[(PathBuf, TurnEndFile)]) -> Vec<String> {
        got.iter()
            .map(|(_, f)| {
                f.data.as_ref().unwrap()["summary"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }

    /// Tool events append to one log a session (no file each); a drain takes the log whole
    /// and later events start a new one; both read back in order.
    #[test]
    fn tool_events_append_to_one_log_and_a_drain_takes_it_whole() {
        let state = tempfile::tempdir().unwrap();
        let dir = dir_of(&state.path().join("control.db"));
        for n in 0..3 {
            tool(&dir, "claude-code:a", n);
        }
        let names = || {
            let mut v: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names().len(), 1, "{:?}", names());
        assert!(names()[0].ends_with(".tools"));
        take_tool_logs(&dir, None).unwrap();
        tool(&dir, "claude-code:a", 3);
        let got = spooled(&dir, None).unwrap();
        assert_eq!(summaries(&got), ["call 0", "call 1", "call 2", "call 3"]);
        // Both logs are drained files now, each read whole; nothing is left to append to.
        assert!(
            names().iter().all(|n| n.ends_with(".drain")),
            "{:?}",
            names()
        );
        assert_eq!(names().len(), 2);
        // Another session's log is not taken by a drain of this one.
        tool(&dir, "claude-code:b", 9);
        let only_a = spooled(&dir, Some("claude-code:a")).unwrap();
        assert_eq!(only_a.len(), 4);
        assert!(names().iter().any(|n| n.ends_with(".tools")));
    }

    /// A line cut short (a hook killed mid-write) is skipped, the others kept; a full log
    /// refuses more (the hook then stores its event in the database).
    #[test]
    fn a_cut_line_is_skipped_and_a_full_log_refuses_more() {
        let state = tempfile::tempdir().unwrap();
        let dir = dir_of(&state.path().join("control.db"));
        tool(&dir, "claude-code:a", 0);
        let log = dir.join(format!(
            "{}{TOOL_LOG}",
            super::super::quiet::marker_name("claude-code:a")
        ));
        let mut text = std::fs::read(&log).unwrap();
        text.extend_from_slice(b"{\"event_id\":\"01K");
        std::fs::write(&log, &text).unwrap();
        assert_eq!(summaries(&spooled(&dir, None).unwrap()), ["call 0"]);
        std::fs::write(&log, vec![b' '; MAX_TOOL_LOG as usize]).unwrap();
        let data = serde_json::json!({"tool": "Bash"});
        let err = spool_tool_event(
            state.path(),
            "claude-code:a",
            "PreToolUse",
            event::TOOL_STARTED,
            &data,
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("full"), "{err:#}");
    }
}
