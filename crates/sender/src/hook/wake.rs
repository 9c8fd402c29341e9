//! How the waiting permission hook learns that an answer may have arrived. Every commit to
//! the database, sp-sync's storing an answer included, writes `control.db-wal`; on Linux the
//! hook watches that file with inotify and looks at the store as soon as it changes, instead
//! of on the next tick of a 15 ms timer. The timer stays as the fallback (no inotify, or a
//! watch that could not be set), and as a ceiling on every wait so the hook still notices
//! a timeout or its harness going away.
use std::path::Path;
use std::time::Duration;

/// How often to look with nothing to wake the hook.
const TICK: Duration = Duration::from_millis(15);
/// With a watch on the WAL, the longest wait between looks (timeouts, the parent check).
const WATCHED_TICK: Duration = Duration::from_millis(100);

pub struct Waker {
    #[cfg(target_os = "linux")]
    fd: Option<std::os::fd::OwnedFd>,
}

impl Waker {
    /// Watches the WAL of the database at `db`; falls back to the timer if that fails.
    pub fn new(db: &Path) -> Waker {
        #[cfg(target_os = "linux")]
        {
            let mut wal = db.as_os_str().to_owned();
            wal.push("-wal");
            Waker {
                fd: watch(Path::new(&wal)),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = db;
            Waker {}
        }
    }

    /// The longest wait this waker should be given between looks at the store.
    pub fn tick(&self) -> Duration {
        #[cfg(target_os = "linux")]
        if self.fd.is_some() {
            return WATCHED_TICK;
        }
        TICK
    }

    /// Sleeps up to `max`; returns early when the database was written (or a signal came).
    pub fn wait(&self, max: Duration) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.fd {
            use std::os::fd::AsRawFd;
            let mut p = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = max.as_millis().min(i32::MAX as u128) as libc::c_int;
            // SAFETY: one valid pollfd. A signal ends the wait early (EINTR), which is wanted:
            // the caller checks its signal flag next.
            unsafe { libc::poll(&mut p, 1, ms) };
            drain(fd.as_raw_fd());
            return;
        }
        std::thread::sleep(max);
    }
}

#[cfg(target_os = "linux")]
fn watch(wal: &Path) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(wal.as_os_str().as_bytes()).ok()?;
    // SAFETY: plain syscalls; the fd is owned (and closed) by the OwnedFd from here on.
    unsafe {
        let fd = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let fd = std::os::fd::OwnedFd::from_raw_fd(fd);
        use std::os::fd::AsRawFd;
        if libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), libc::IN_MODIFY) < 0 {
            return None;
        }
        Some(fd)
    }
}

/// Reads every queued event; which one does not matter, only that the file changed.
#[cfg(target_os = "linux")]
fn drain(fd: std::os::fd::RawFd) {
    let mut buf = [0u8; 4096];
    // SAFETY: reads into a buffer we own; the fd is non-blocking, so this ends at EAGAIN.
    while unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
}
