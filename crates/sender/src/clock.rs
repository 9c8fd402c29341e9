//! The machine's clock: wall-clock time, which a test may move forward (never back).
//!
//! The receiver's tests shift its clock in process (`clock_offset_ms`); the sender's binaries
//! are separate processes, so a test names a file in `SESSIONPIPE_TEST_CLOCK` holding an offset
//! in milliseconds, read at every look at the clock (a test moves it while sp-sync runs).
//! Unset, the clock is the real one and no file is read. The offset only ever moves time
//! forward: an expiry can come sooner, never later, so no setting of it makes an expired answer
//! valid again (docs/testing.md, "The test clock").
use std::path::PathBuf;
use std::sync::OnceLock;

pub use spwire::clock::{format_ms, parse_wire, Millis};

/// The environment variable naming the offset file.
pub const TEST_CLOCK_ENV: &str = "SESSIONPIPE_TEST_CLOCK";
/// Past this the offset file is not an offset (it holds one integer).
const MAX_FILE_BYTES: u64 = 32;
/// The farthest a test moves the clock: a week covers every expiry the machine keeps.
const MAX_OFFSET_MS: i64 = 7 * 24 * 3600 * 1000;

/// Milliseconds since the Unix epoch, moved forward by the test clock when one is set.
pub fn now_ms() -> Millis {
    spwire::clock::now_ms().saturating_add(offset_ms())
}

pub fn now_rfc3339() -> String {
    format_ms(now_ms())
}

fn offset_ms() -> i64 {
    static FILE: OnceLock<Option<PathBuf>> = OnceLock::new();
    match FILE.get_or_init(|| std::env::var_os(TEST_CLOCK_ENV).map(PathBuf::from)) {
        Some(path) => read_offset(path),
        None => 0,
    }
}

/// The offset in the file, or 0 when it is absent, unreadable, not ours alone, or not a
/// number. Negative values count as 0 and large ones as the cap.
fn read_offset(path: &std::path::Path) -> i64 {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    else {
        return 0;
    };
    let Ok(meta) = f.metadata() else { return 0 };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !meta.is_file() || meta.uid() != me || meta.mode() & 0o022 != 0 {
        return 0;
    }
    let mut text = String::new();
    if f.take(MAX_FILE_BYTES).read_to_string(&mut text).is_err() {
        return 0;
    }
    text.trim()
        .parse::<i64>()
        .map_or(0, |ms| ms.clamp(0, MAX_OFFSET_MS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_file_moves_forward_only_and_must_be_ours() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("clock");
        assert_eq!(read_offset(&p), 0, "absent");
        std::fs::write(&p, "3600000\n").unwrap();
        let set = |mode| {
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .unwrap()
        };
        set(0o600);
        assert_eq!(read_offset(&p), 3_600_000);
        set(0o622);
        assert_eq!(read_offset(&p), 0, "writable by others");
        set(0o600);
        std::fs::write(&p, "-5000").unwrap();
        assert_eq!(read_offset(&p), 0, "backwards");
        std::fs::write(&p, "99999999999999").unwrap();
        assert_eq!(read_offset(&p), MAX_OFFSET_MS);
        std::fs::write(&p, "soon").unwrap();
        assert_eq!(read_offset(&p), 0);
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        std::fs::write(&p, "1000").unwrap();
        assert_eq!(read_offset(&link), 0, "a symlink is not followed");
    }
}
