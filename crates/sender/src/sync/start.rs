//! A verified `start` (DECISIONS 39, docs/start.md): the machine's own gate (the folder on
//! `control.folders`, a harness whose headless mode a real run proves, `control.start_limit`),
//! then its attached files fetched, checked and written without following a symlink, then
//! the message the new session is given.
use super::{Shared, SinkCtx};
use crate::clock::{self, Millis};
use crate::store::starts::Reserve;
use crate::store::Store;
use crate::wire::control::{ControlMessage, Decided, Outcome};
use crate::wire::signed::{Command, FileRef};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The harnesses a start may name: those whose headless run (Claude Code `-p`, Codex
/// `exec`) a real-agent test proves.
pub const STARTABLE: [&str; 2] = ["claude-code", "codex"];
/// All of a start's attached files' downloads, whole (each file's size is capped at 25 MiB
/// by the verifier, and there are at most 10): one slow receiver cannot hold sp-sync longer.
const FILES_TIMEOUT: Duration = Duration::from_secs(120);
/// A hello's whole exchange.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Where a session's files go, under its folder.
const FILES_DIR: [&str; 2] = [".sessionpipe", "files"];

/// The harnesses of [`STARTABLE`] whose headless program is found with this `PATH`: its
/// `SP_CLAUDE` / `SP_CODEX` when set (a path, or a name looked up on `path`), else its
/// program's name on `path`. What sp-sync tells its receivers it can start, and what
/// `sp doctor` checks on the PATH cron gives sp-sync.
pub fn found_on(path: &std::ffi::OsStr) -> Vec<(&'static str, PathBuf)> {
    STARTABLE
        .iter()
        .filter_map(|name| {
            let h = crate::harness::Harness::parse(name)?.caps().headless?;
            let program = std::env::var_os(h.program_env)
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| h.program.into());
            let program = PathBuf::from(program);
            let found = if program.components().count() > 1 {
                crate::setup::cron::is_executable(&program).then_some(program)
            } else {
                std::env::split_paths(path)
                    .map(|d| d.join(&program))
                    .find(|p| crate::setup::cron::is_executable(p))
            };
            found.map(|p| (*name, p))
        })
        .collect()
}

/// DECISIONS 39: tells a receiver what this machine can start (`POST {control}/hello`): the
/// harnesses found on sp-sync's PATH, the allowed folders, and that it takes files. Best
/// effort and informational (the machine checks every start itself): a receiver that does
/// not take hellos is left alone.
pub fn hello(shared: &Shared, ctx: &SinkCtx) {
    let Some(control) = ctx.found().control_url else {
        return;
    };
    let path = std::env::var_os("PATH").unwrap_or_default();
    let body = serde_json::json!({
        "harnesses": found_on(&path).iter().map(|(h, _)| *h).collect::<Vec<_>>(),
        "folders": shared.folders.iter().map(|f| f.to_string_lossy()).collect::<Vec<_>>(),
        "files": true,
        "version": env!("CARGO_PKG_VERSION"),
    });
    let url = format!(
        "{}/hello",
        control
            .split('?')
            .next()
            .unwrap_or(&control)
            .trim_end_matches('/')
    );
    match shared.client.post_json(
        &url,
        ctx.control_token(),
        &body.to_string(),
        &[],
        HELLO_TIMEOUT,
    ) {
        Ok(r) if (200..300).contains(&r.status) => {
            crate::logging::info(&format!("sink {}: hello sent: {body}", ctx.name))
        }
        Ok(r) => crate::logging::debug(&format!(
            "sink {}: hello answered {}; the receiver does not keep what this machine can start",
            ctx.name, r.status
        )),
        Err(e) => crate::logging::debug(&format!("sink {}: hello: {e}", ctx.name)),
    }
}

/// A start that passed the gate, for [`handle`].
#[derive(Debug, Clone)]
pub struct Order {
    pub id: String,
    pub nonce: String,
    /// `<harness>:<id>`.
    pub session: String,
    pub harness: String,
    pub session_id: String,
    /// Canonical.
    pub cwd: PathBuf,
    pub text: String,
    pub files: Vec<FileRef>,
    /// What is queued for the runner once the files are written (kind `start`).
    pub message: Box<ControlMessage>,
}

/// What [`handle`] made of a start.
pub enum Handled {
    /// This message or nonce was seen before: ingest settles it (a redelivery or a replay).
    Seen,
    /// Final at once: over the caps, or a file failed.
    Settled(Box<Decided>),
    /// Queue this message (the model's whole message as its text), then [`launch`] it.
    Launch(Box<ControlMessage>),
}

fn decided(order_id: &str, outcome: Outcome, code: Option<&str>, detail: String) -> Decided {
    Decided {
        id: order_id.to_string(),
        kind: "start".into(),
        outcome,
        code: code.map(str::to_string),
        detail,
        nonce: None,
        add_key: None,
    }
}

/// The part of the gate that needs no store: the folder and the harness. A refusal is the
/// final decision, its nonce recorded by the caller.
pub fn gate(
    id: &str,
    c: &Command,
    folders: &[PathBuf],
    message: ControlMessage,
) -> Result<Order, Box<Decided>> {
    // The session is `claude-code:<uuid>` (the verifier's rule): the id the receiver chose,
    // which names the files' folder; `harness` says which harness runs it.
    let session_id = c.session.split_once(':').map_or("", |(_, id)| id);
    let harness = c.harness.as_deref().unwrap_or("claude-code");
    if !STARTABLE.contains(&harness) {
        return Err(Box::new(decided(
            id,
            Outcome::Unsupported,
            None,
            format!(
                "{harness} cannot be started here: only {} have a headless run this machine \
                 is proven to drive (DECISIONS 39)",
                STARTABLE.join(" and ")
            ),
        )));
    }
    // The id names the session's files folder: nothing but letters, digits and dashes.
    if session_id.is_empty()
        || session_id.len() > 64
        || !session_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(Box::new(decided(
            id,
            Outcome::Refused,
            Some("bad_fields"),
            "a started session's id is letters, digits and dashes".into(),
        )));
    }
    let refuse_folder = |why: String| decided(id, Outcome::Refused, Some("folder"), why);
    if folders.is_empty() {
        return Err(Box::new(refuse_folder(
            "this machine starts nothing: control.folders lists no folder (DECISIONS 39)".into(),
        )));
    }
    let cwd = c.cwd.as_deref().unwrap_or_default();
    // Canonical on both sides, so neither `..` nor a symlink leads out of an allowed folder.
    let Ok(real) = std::fs::canonicalize(cwd) else {
        return Err(Box::new(refuse_folder(format!(
            "the folder {cwd} does not exist on this machine"
        ))));
    };
    let inside = folders
        .iter()
        .any(|f| std::fs::canonicalize(f).is_ok_and(|f| real.starts_with(f)));
    if !inside || !real.is_dir() {
        return Err(Box::new(refuse_folder(format!(
            "the folder {cwd} is not inside control.folders (DECISIONS 39)"
        ))));
    }
    Ok(Order {
        id: id.to_string(),
        nonce: c.nonce.clone(),
        session: c.session.clone(),
        harness: harness.to_string(),
        session_id: session_id.to_string(),
        cwd: real,
        text: c.text.clone().unwrap_or_default(),
        files: c.files.clone(),
        message: Box::new(message),
    })
}

/// Carries out a start that passed [`gate`]: the caps, then the files. Its launch follows
/// once ingest has queued it ([`launch`]).
pub fn handle(
    shared: &Shared,
    ctx: &SinkCtx,
    store: &mut Store,
    order: &Order,
    now: Millis,
) -> anyhow::Result<Handled> {
    let limit = shared.start_limit;
    let settled = |d: Decided| {
        Handled::Settled(Box::new(Decided {
            nonce: Some(order.nonce.clone()),
            ..d
        }))
    };
    let caps = (limit.running, limit.per_hour);
    match store.reserve_start(&order.id, &order.nonce, &order.session, caps, now)? {
        Reserve::Seen => return Ok(Handled::Seen),
        Reserve::Limited { running, last_hour } => {
            return Ok(settled(decided(
                &order.id,
                Outcome::Refused,
                Some("start_limit"),
                format!(
                    "this machine's start limit: {running} running (at most {}), {last_hour} \
                     started in the last hour (at most {}); control.start_limit (DECISIONS 39)",
                    limit.running, limit.per_hour
                ),
            )))
        }
        Reserve::Reserved => {}
    }
    crate::logging::info(&format!(
        "start {} ({}) in {}: {} file(s)",
        order.session,
        order.harness,
        order.cwd.display(),
        order.files.len()
    ));
    let base = ctx.found().control_url.unwrap_or_default();
    let fetch = |f: &FileRef, left: Duration| -> Result<Vec<u8>, String> {
        let url = format!("{}/files/{}", base.trim_end_matches('/'), f.sha256);
        match shared
            .client
            .get_limited(&url, ctx.control_token(), f.size, left)?
        {
            (200, body) => Ok(body),
            (404, _) => Err("the receiver has no such file (gone or expired)".into()),
            (s, _) => Err(format!("the receiver answered {s}")),
        }
    };
    let written = write_files(
        &order.cwd,
        &order.session_id,
        &order.files,
        (&fetch, FILES_TIMEOUT),
    );
    if let Err(why) = written {
        store.drop_start(&order.id)?;
        return Ok(settled(decided(
            &order.id,
            Outcome::Failed,
            Some("file"),
            format!("{why}; nothing was started (DECISIONS 39)"),
        )));
    }
    let text = message(order);
    store.set_start_text(&order.id, &text)?;
    Ok(Handled::Launch(Box::new(ControlMessage {
        text: Some(text),
        ..(*order.message).clone()
    })))
}

/// Asks the runner (DECISIONS 38) for the start's run, in its folder, with its harness's
/// headless command; the run's end writes the final ack with the started session and its
/// reply. A run that cannot be asked for ends the start `failed`, saying why.
pub fn launch(store: &mut Store, order: &Order, text: &str) -> anyhow::Result<()> {
    let asked = match crate::harness::Harness::parse(&order.harness) {
        None => Err(anyhow::anyhow!("no adapter for {}", order.harness)),
        Some(harness) => crate::runs::request(
            store,
            &crate::runs::Request {
                kind: crate::runs::Kind::Start,
                harness,
                session_id: Some(&order.session_id),
                session_key: None,
                cwd: &order.cwd.to_string_lossy(),
                text: Some(text),
                message_id: Some(&order.id),
            },
        ),
    };
    match asked {
        Ok(Some(run)) => {
            crate::logging::info(&format!("start {}: run {run}", order.id));
            Ok(())
        }
        // Taken meanwhile: nothing else takes a start, so this is never expected.
        Ok(None) => Ok(()),
        Err(e) => store.fail_start(
            &order.id,
            &format!("the run could not be started: {e:#}"),
            clock::now_ms(),
        ),
    }
}

/// The message the new session is given: the command's text, then each attached file's path
/// relative to the session's folder, its type and size.
pub fn message(order: &Order) -> String {
    if order.files.is_empty() {
        return order.text.clone();
    }
    let mut out = format!("{}\n\nAttached files (saved in this folder):", order.text);
    for f in &order.files {
        out.push_str(&format!(
            "\n- {}/{}/{} ({}, {})",
            FILES_DIR.join("/"),
            order.session_id,
            f.name,
            f.media_type,
            size_words(f.size)
        ));
    }
    out
}

/// A size in units of 1 024 bytes: KB below a MiB, MB with one decimal above.
fn size_words(size: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if size < MIB {
        format!("{} KB", ((size + 512) / 1024).max(1))
    } else {
        format!("{:.1} MB", size as f64 / MIB as f64)
    }
}

/// Fetches each file, checks its length and sha256, and writes it under
/// `<cwd>/.sessionpipe/files/<session id>/`. Every folder is opened relative to the one
/// above with `O_NOFOLLOW` (a symlink anywhere refuses the files), the session's folder must
/// be new, each file is created exclusively at 0600. All the fetches share `budget`, each
/// given what is left of it. On any failure what was written is removed, and the error
/// names the file and why.
fn write_files(
    cwd: &Path,
    session_id: &str,
    files: &[FileRef],
    (fetch, budget): (&Fetch, Duration),
) -> Result<(), String> {
    if files.is_empty() {
        return Ok(());
    }
    let top = open_dir(None, cwd.as_os_str().as_bytes())
        .map_err(|e| format!("the folder {}: {e}", cwd.display()))?;
    let mut dir = top;
    for (i, name) in FILES_DIR.iter().enumerate() {
        dir = sub_dir(&dir, name, false).map_err(|e| format!("{name}: {e}"))?;
        if i == 0 {
            ignore_itself(&dir).map_err(|e| format!(".sessionpipe/.gitignore: {e}"))?;
        }
    }
    let files_dir = dir;
    let session_dir = sub_dir(&files_dir, session_id, true)
        .map_err(|e| format!("the session's files folder: {e}"))?;
    let mut written: Vec<&str> = Vec::new();
    let result = (|| {
        let until = std::time::Instant::now() + budget;
        for f in files {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "file {:?}: not fetched: the files took over {} s in all",
                    f.name,
                    budget.as_secs_f32()
                ));
            }
            let bytes = fetch(f, left).map_err(|e| format!("file {:?}: {e}", f.name))?;
            check_bytes(f, &bytes).map_err(|e| format!("file {:?}: {e}", f.name))?;
            let file = create_file(&session_dir, &f.name)
                .map_err(|e| format!("file {:?}: cannot write it: {e}", f.name))?;
            written.push(&f.name);
            use std::io::Write;
            std::fs::File::from(file)
                .write_all(&bytes)
                .map_err(|e| format!("file {:?}: cannot write it: {e}", f.name))?;
        }
        Ok(())
    })();
    if result.is_err() {
        for name in &written {
            let _ = unlink_at(&session_dir, name, 0);
        }
        drop(session_dir);
        let _ = unlink_at(&files_dir, session_id, libc::AT_REMOVEDIR);
    }
    result
}

/// Fetches one attached file within the time given.
type Fetch<'a> = dyn Fn(&FileRef, Duration) -> Result<Vec<u8>, String> + 'a;

/// The length and the sha256 the signed command carries: anything else is never written.
fn check_bytes(f: &FileRef, bytes: &[u8]) -> Result<(), String> {
    use base64::Engine;
    use sha2::Digest;
    if bytes.len() as u64 != f.size {
        return Err(format!(
            "its length is {}{} bytes, not the {} signed",
            bytes.len(),
            if bytes.len() as u64 > f.size {
                " or more"
            } else {
                ""
            },
            f.size
        ));
    }
    let got = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(bytes));
    if got != f.sha256 {
        return Err("its bytes do not match the sha256 signed".into());
    }
    Ok(())
}

fn cstr(name: &[u8]) -> std::io::Result<CString> {
    CString::new(name).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

fn cvt(fd: libc::c_int) -> std::io::Result<OwnedFd> {
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor the call just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens a folder without following a symlink at its last component (`at`: relative to it).
fn open_dir(at: Option<&OwnedFd>, name: &[u8]) -> std::io::Result<OwnedFd> {
    let c = cstr(name)?;
    let base = at.map_or(libc::AT_FDCWD, AsRawFd::as_raw_fd);
    // SAFETY: a valid C string and a descriptor we hold (or AT_FDCWD).
    cvt(unsafe {
        libc::openat(
            base,
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    })
}

/// A real folder `name` inside `dir`, made at 0700 when missing; `new`: it must not exist.
fn sub_dir(dir: &OwnedFd, name: &str, new: bool) -> std::io::Result<OwnedFd> {
    let c = cstr(name.as_bytes())?;
    // SAFETY: a valid C string and a descriptor we hold.
    let made = unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o700) };
    if made != 0 {
        let e = std::io::Error::last_os_error();
        if new || e.raw_os_error() != Some(libc::EEXIST) {
            return Err(e);
        }
    }
    open_dir(Some(dir), name.as_bytes()).map_err(|e| {
        if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) {
            std::io::Error::other("not a real folder (a symlink is never followed)")
        } else {
            e
        }
    })
}

/// `.sessionpipe/.gitignore` with the one line `*` when absent, so a repository never
/// picks the folder up.
fn ignore_itself(dir: &OwnedFd) -> std::io::Result<()> {
    match create_file(dir, ".gitignore") {
        Ok(f) => {
            use std::io::Write;
            std::fs::File::from(f).write_all(b"*\n")
        }
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
        Err(e) => Err(e),
    }
}

/// A new file at 0600, never over an existing path and never through a symlink.
fn create_file(dir: &OwnedFd, name: &str) -> std::io::Result<OwnedFd> {
    let c = cstr(name.as_bytes())?;
    // SAFETY: a valid C string and a descriptor we hold.
    cvt(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    })
}

fn unlink_at(dir: &OwnedFd, name: &str, flags: libc::c_int) -> std::io::Result<()> {
    let c = cstr(name.as_bytes())?;
    // SAFETY: a valid C string and a descriptor we hold.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), flags) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_units_of_1024() {
        assert_eq!(size_words(183_402), "179 KB");
        assert_eq!(size_words(1), "1 KB");
        assert_eq!(size_words(1_258_291), "1.2 MB");
    }

    /// A receiver that sends a start's files slowly holds sp-sync at most the files' budget
    /// in all, not a timeout per file: each fetch gets what is left; once none is, the start
    /// fails naming the file, and what was written is removed.
    #[test]
    fn a_starts_files_share_one_time_budget() {
        use base64::Engine;
        use sha2::Digest;
        let d = tempfile::tempdir().unwrap();
        let sha =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(b"hi"));
        let files: Vec<FileRef> = ["a.txt", "b.txt", "c.txt"]
            .iter()
            .map(|n| FileRef {
                name: n.to_string(),
                media_type: "text/plain".into(),
                size: 2,
                sha256: sha.clone(),
            })
            .collect();
        let given = std::sync::Mutex::new(Vec::new());
        let slow = |_: &FileRef, left: Duration| {
            given.lock().unwrap().push(left);
            std::thread::sleep(Duration::from_millis(150));
            Ok(b"hi".to_vec())
        };
        let budget = Duration::from_millis(250);
        let err = write_files(d.path(), "s-1", &files, (&slow, budget)).unwrap_err();
        assert!(err.starts_with("file \"c.txt\": not fetched"), "{err}");
        let given = given.into_inner().unwrap();
        assert_eq!(given.len(), 2, "{given:?}");
        assert!(
            given[0] <= budget && given[1] < Duration::from_millis(110),
            "{given:?}"
        );
        let left = d.path().join(".sessionpipe/files");
        assert_eq!(std::fs::read_dir(&left).unwrap().count(), 0, "nothing kept");
        // Within the budget, all are written.
        let quick = |_: &FileRef, _| Ok(b"hi".to_vec());
        write_files(d.path(), "s-2", &files, (&quick, budget)).unwrap();
        assert_eq!(std::fs::read(left.join("s-2/c.txt")).unwrap(), b"hi");
    }

    #[test]
    fn a_symlinked_files_folder_refuses_the_files_and_writes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join(".sessionpipe")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), d.path().join(".sessionpipe/files")).unwrap();
        let f = FileRef {
            name: "a.txt".into(),
            media_type: "text/plain".into(),
            size: 2,
            sha256: "x".into(),
        };
        let fetch = |_: &FileRef, _| Ok(b"hi".to_vec());
        let err = write_files(d.path(), "s-1", &[f], (&fetch, FILES_TIMEOUT)).unwrap_err();
        assert!(err.contains("symlink"), "{err}");
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    }
}
