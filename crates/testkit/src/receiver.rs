//! The real `sp-receiver` as a child process: started on a free loopback port with its files
//! in a folder, stopped with SIGTERM when dropped; and its database read from outside.
use crate::wait::{wait_for, wait_timeout};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The `sp-receiver` cargo built beside the running test binary (`target/<profile>/`).
/// `cargo test -p sessionpipe-receiver` builds it; the sender's tests need `cargo build
/// --bins` first (scripts/test.sh does). Never the proof of an older build: it fails when a
/// source of the receiver or the wire crate is newer than the binary.
pub fn sp_receiver_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test>-<hash>
    let p = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test binary under target/<profile>/deps")
        .join("sp-receiver");
    let built = std::fs::metadata(&p).and_then(|m| m.modified());
    let Ok(built) = built else {
        panic!(
            "{} is missing: build it with `cargo build --bins` (scripts/test.sh does)",
            p.display()
        );
    };
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let newest = ["wire/src", "receiver/src"]
        .iter()
        .filter_map(|d| newest_source(&crates.join(d)))
        .max();
    if let Some((_, newer)) = newest.filter(|(t, _)| *t > built) {
        panic!(
            "{} is newer than {}: rebuild it with `cargo build --bins`",
            newer.display(),
            p.display()
        );
    }
    p
}

/// The most recently changed file under `dir`, with its time.
pub fn newest_source(dir: &Path) -> Option<(SystemTime, PathBuf)> {
    let mut best: Option<(SystemTime, PathBuf)> = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        let cand = if p.is_dir() {
            newest_source(&p)
        } else {
            e.metadata().and_then(|m| m.modified()).ok().map(|t| (t, p))
        };
        if let Some(c) = cand {
            if best.as_ref().is_none_or(|b| c.0 > b.0) {
                best = Some(c);
            }
        }
    }
    best
}

/// Sets a file's permission bits (a secret file: 0600).
pub fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The senders' bearer token and the page's login token the receivers here run with.
pub const TOKEN: &str = "sender-bearer-token-0123456789";
pub const LOGIN: &str = "page-login-token-9876543210abcdef";

pub fn write_secret(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, format!("{text}\n")).unwrap();
    set_mode(path, 0o600);
}

/// A running `sp-receiver --listen 127.0.0.1:0` with its files in `dir`.
pub struct SpReceiver {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`, as it says it listens.
    pub url: String,
    pub dir: PathBuf,
    log: Arc<Mutex<String>>,
}

impl SpReceiver {
    /// The command line `start` runs, without `--listen` (for `--login-url` and the like).
    pub fn command(dir: &Path) -> Command {
        SpReceiver::command_on(dir, dir.join("receiver.db").as_os_str())
    }

    /// `command` with the database `db`: a file path or a `postgres://` URL.
    pub fn command_on(dir: &Path, db: &std::ffi::OsStr) -> Command {
        write_secret(&dir.join("token"), TOKEN);
        write_secret(&dir.join("login-token"), LOGIN);
        let mut c = Command::new(sp_receiver_bin());
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", dir)
            .arg("--token-file")
            .arg(dir.join("token"))
            .arg("--login-token-file")
            .arg(dir.join("login-token"))
            .arg("--db")
            .arg(db);
        c
    }

    pub fn start(dir: &Path, extra: &[&str]) -> SpReceiver {
        SpReceiver::start_on(dir, dir.join("receiver.db").as_os_str(), extra)
    }

    /// `start` with the database `db`: a file path or a `postgres://` URL.
    pub fn start_on(dir: &Path, db: &std::ffi::OsStr, extra: &[&str]) -> SpReceiver {
        let mut c = SpReceiver::command_on(dir, db);
        c.args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let (child, url, log) = crate::listening::spawn_listening(c);
        SpReceiver {
            child: Some(child),
            url,
            dir: dir.to_owned(),
            log,
        }
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Its process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, as a crash or a lost host: nothing is closed cleanly. Returns once it is gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, as a service manager stops it; returns the exit code.
    pub fn stop(&mut self) -> Option<i32> {
        let mut c = self.child.take()?;
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let status = wait_timeout(&mut c, Duration::from_secs(10));
        if status.is_none() {
            let _ = c.kill();
        }
        c.wait().ok().and_then(|s| s.code())
    }
}

impl Drop for SpReceiver {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A connection to a receiver's database file, waiting up to 5 s on its lock.
pub fn open_db(path: &Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(path).unwrap();
    c.busy_timeout(Duration::from_secs(5)).unwrap();
    c
}

/// The first ack the receiver whose database is `path` recorded for message `id`, waiting up
/// to 30 s for it.
pub fn first_ack(path: &Path, id: &str) -> Value {
    let body = wait_for(
        &format!("the receiver records an ack for {id}"),
        Duration::from_secs(30),
        || {
            open_db(path)
                .query_row(
                    "SELECT body FROM acks WHERE id = ?1 ORDER BY n LIMIT 1",
                    [id],
                    |r| r.get::<_, String>(0),
                )
                .ok()
        },
    );
    serde_json::from_str(&body).unwrap()
}
