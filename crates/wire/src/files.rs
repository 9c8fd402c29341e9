//! Private files in the state and config folders (DECISIONS 24). Another local user is as
//! hostile as a receiver: files we create are opened with `O_NOFOLLOW` (a symlink planted
//! in their place is refused, never written through), and what we find looser than 0700
//! (folders) or 0600 (files) is tightened when it is ours, or refused with a message saying
//! how to fix it when tightening would be wrong (it belongs to someone else, or it is not a
//! plain file). Callers log each `Tightened` note once: after the chmod there is nothing
//! left to note.
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Something we made private; the text says what and from which mode.
#[derive(Debug, Clone, PartialEq)]
pub struct Tightened(pub String);

fn refuse(msg: String) -> io::Error {
    io::Error::other(msg)
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Creates `dir` (and missing parents) at 0700, or checks the one there: it must be a folder
/// of this user; a looser mode is tightened to 0700.
pub fn private_dir(dir: &Path) -> io::Result<Option<Tightened>> {
    if !dir.exists() {
        let mut b = std::fs::DirBuilder::new();
        b.recursive(true).mode(0o700);
        b.create(dir)?;
    }
    // A folder that is a symlink is the user's own arrangement; what it points at is checked.
    let meta = std::fs::metadata(dir)?;
    if !meta.is_dir() {
        return Err(refuse(format!(
            "{} is not a folder; remove it or point SESSIONPIPE_STATE_DIR elsewhere",
            dir.display()
        )));
    }
    if meta.uid() != euid() {
        return Err(refuse(format!(
            "folder {} belongs to another user (uid {}); refused: use a folder of your own \
             (SESSIONPIPE_STATE_DIR) or chown it to yourself",
            dir.display(),
            meta.uid()
        )));
    }
    tighten(dir, meta.mode(), 0o700)
}

/// Creates `dir` (and missing parents) at 0700 when it is not there yet; `""` (a bare file
/// name's parent: the working folder) and a folder already there are left as they are.
pub fn create_missing_dir(dir: &Path) -> io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

fn tighten(path: &Path, mode: u32, want: u32) -> io::Result<Option<Tightened>> {
    let mode = mode & 0o7777;
    if mode & 0o077 == 0 {
        return Ok(None);
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(want))?;
    Ok(Some(Tightened(format!(
        "tightened {} from mode {mode:o} to {want:o}",
        path.display()
    ))))
}

/// Checks an open file: a plain file of this user with one link; a looser mode than 0600 is
/// tightened (on the open descriptor, so no path is followed).
fn check_open(file: &File, path: &Path) -> io::Result<Option<Tightened>> {
    let meta = file.metadata()?;
    check_meta(&meta, path)?;
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 == 0 {
        return Ok(None);
    }
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(Some(Tightened(format!(
        "tightened {} from mode {mode:o} to 600",
        path.display()
    ))))
}

/// A plain file of this user with one link.
fn check_meta(meta: &std::fs::Metadata, path: &Path) -> io::Result<()> {
    if !meta.is_file() {
        return Err(refuse(format!(
            "{} is not a plain file; refused: remove it (rm {})",
            path.display(),
            path.display()
        )));
    }
    if meta.uid() != euid() {
        return Err(refuse(format!(
            "{} belongs to another user (uid {}); refused: remove it (rm {})",
            path.display(),
            meta.uid(),
            path.display()
        )));
    }
    if meta.nlink() > 1 {
        return Err(refuse(format!(
            "{} has other hard links; refused: remove it (rm {}) and it is made afresh",
            path.display(),
            path.display()
        )));
    }
    Ok(())
}

fn symlink_refused(path: &Path, e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        refuse(format!(
            "{} is a symbolic link; refused (nothing is written through it): remove it (rm {})",
            path.display(),
            path.display()
        ))
    } else {
        e
    }
}

/// Opens (creating at 0600 if missing) a file of ours without following a symlink, for
/// appending (`append`) or for writing in place; checked as `check_open` says.
pub fn open_private(path: &Path, append: bool) -> io::Result<(File, Option<Tightened>)> {
    let mut o = OpenOptions::new();
    o.create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    if append {
        o.append(true);
    } else {
        o.write(true).truncate(false);
    }
    let file = o.open(path).map_err(|e| symlink_refused(path, e))?;
    let note = check_open(&file, path)?;
    Ok((file, note))
}

/// A file that someone else (SQLite) opens by path, if it exists: not a symlink, a plain
/// file of this user with one link, tightened to 0600 when looser. Missing is fine.
///
/// Checked with `lstat`, never opened: closing any descriptor of a file drops every POSIX
/// lock this process holds on it, and SQLite's locks on the database, `-wal` and `-shm`
/// live in this process while other threads open the store.
pub fn check_existing(path: &Path) -> io::Result<Option<Tightened>> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if meta.file_type().is_symlink() {
        return Err(symlink_refused(
            path,
            io::Error::from_raw_os_error(libc::ELOOP),
        ));
    }
    check_meta(&meta, path)?;
    // Not a symlink (just checked) in a folder only we can write: the path is this file.
    tighten(path, meta.mode(), 0o600)
}

/// Creates `path` at 0600 if it does not exist, without following a symlink planted there
/// (O_CREAT|O_EXCL never does), then checks it as `check_existing` does. The descriptor is
/// closed before anyone else in this process opens the file.
pub fn create_or_check(path: &Path) -> io::Result<Option<Tightened>> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
    {
        Ok(_) => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => check_existing(path),
        Err(e) => Err(e),
    }
}

/// A SQLite database file before SQLite opens it (DECISIONS 24): created with `create_or_check`,
/// and its `-wal`, `-shm` and `-journal`, where they exist, checked with `check_existing`.
/// Returns what was tightened, for the caller to log; the error names the file.
pub fn prepare_sqlite_file(path: &Path) -> io::Result<Vec<Tightened>> {
    let named = |p: &Path, e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", p.display()));
    let mut notes: Vec<Tightened> = create_or_check(path)
        .map_err(|e| named(path, e))?
        .into_iter()
        .collect();
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut side = path.as_os_str().to_owned();
        side.push(suffix);
        let side = std::path::PathBuf::from(side);
        notes.extend(check_existing(&side).map_err(|e| named(&side, e))?);
    }
    Ok(notes)
}

/// The folder of the config file: nobody else may be able to replace the config (that would
/// choose the receivers allowed to answer). Our own `sessionpipe` folder is tightened to
/// 0700; any other folder (a custom `SESSIONPIPE_CONFIG`) is never chmodded, only refused
/// when group or others can write to it, or when it belongs to another user but root.
pub fn check_config_dir(dir: &Path) -> io::Result<Option<Tightened>> {
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let ours = meta.uid() == euid();
    if ours && dir.file_name().is_some_and(|n| n == "sessionpipe") {
        return tighten(dir, meta.mode(), 0o700);
    }
    let writable_by_others = meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0;
    if writable_by_others || (!ours && meta.uid() != 0) {
        return Err(refuse(format!(
            "the config's folder {} can be changed by other users (mode {:o}, uid {}); refused: \
             fix with chmod go-w {} (if it is yours) or move the config to a folder of your own",
            dir.display(),
            meta.mode() & 0o7777,
            meta.uid(),
            dir.display()
        )));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_symlinks_and_tightens_loose_modes() {
        let d = tempfile::tempdir().unwrap();
        let state = d.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
        let t = private_dir(&state).unwrap();
        assert!(t.is_some());
        assert_eq!(std::fs::metadata(&state).unwrap().mode() & 0o777, 0o700);
        assert_eq!(private_dir(&state).unwrap(), None, "tightened once");

        let target = d.path().join("elsewhere");
        std::fs::write(&target, "x").unwrap();
        let link = state.join("sp.log");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = open_private(&link, true).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(check_existing(&link).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "x");

        let f = state.join("control.db");
        std::fs::write(&f, "").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(check_existing(&f).unwrap().is_some());
        assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o777, 0o600);
        assert_eq!(check_existing(&state.join("missing")).unwrap(), None);

        let hard = state.join("hard");
        std::fs::hard_link(&target, &hard).unwrap();
        assert!(open_private(&hard, true).is_err());
    }
}
