//! The real `sp-receiver` as a child process, and a machine (temp HOME, `sp-sync`, the hooks)
//! whose one sink is that receiver with control on.
#![allow(dead_code)]
use super::env::{
    bin, bin_cmd, run_with_stdin, set_mode, spawn_daemon, spawn_with_stdin, wait_timeout,
};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
        let mut c = Command::new(bin("sp-receiver"));
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
        let (child, url, log) = super::listening::spawn_listening(c);
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

/// A machine: temp HOME and state, a config whose one sink is the receiver with control on.
pub struct Machine {
    pub home: PathBuf,
    pub config: PathBuf,
    pub state: PathBuf,
    sync: Option<Child>,
}

impl Machine {
    /// `url`: the receiver as this machine reaches it.
    pub fn new(dir: &Path, url: &str, token_file: &Path) -> Machine {
        let home = dir.join("home");
        std::fs::create_dir_all(&home).unwrap();
        let config = home.join(".config/sessionpipe/config.json");
        std::fs::create_dir_all(config.parent().unwrap()).unwrap();
        let sink = json!({"sinks": [{"name": "phone", "url": url, "tier": 1, "control": true, "token_file": token_file}]});
        std::fs::write(&config, serde_json::to_string_pretty(&sink).unwrap()).unwrap();
        set_mode(&config, 0o600);
        Machine {
            state: home.join(".local/state/sessionpipe"),
            home,
            config,
            sync: None,
        }
    }

    /// A machine in `dir` whose sink is `receiver` (started in `dir/receiver`, so its token
    /// is `dir/receiver/token`), with its `sp-sync` running.
    pub fn syncing_to(dir: &Path, receiver: &SpReceiver) -> Machine {
        let mut machine = Machine::new(dir, &receiver.url, &dir.join("receiver/token"));
        machine.start_sync();
        machine
    }

    /// [`Machine::syncing_to`] with `more`'s top-level keys set in its config first
    /// (`{"control": {...}}`).
    pub fn syncing_with(dir: &Path, receiver: &SpReceiver, more: Value) -> Machine {
        let mut machine = Machine::new(dir, &receiver.url, &dir.join("receiver/token"));
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(&machine.config).unwrap()).unwrap();
        if let (Some(c), Value::Object(more)) = (config.as_object_mut(), more) {
            c.extend(more);
        }
        std::fs::write(&machine.config, config.to_string()).unwrap();
        machine.start_sync();
        machine
    }

    pub fn cmd(&self, name: &str) -> Command {
        bin_cmd(name, &self.home, &self.config, &self.state)
    }

    pub fn start_sync(&mut self) {
        self.sync = Some(spawn_daemon(self.cmd("sp-sync")));
    }

    pub fn hook(&self, name: &str, stdin: &Value) -> std::process::Output {
        let mut c = self.cmd(name);
        c.args(["--harness", "claude-code"]);
        run_with_stdin(c, stdin.to_string().as_bytes())
    }

    pub fn spawn_hook(&self, name: &str, stdin: &Value) -> Child {
        let mut c = self.cmd(name);
        c.args(["--harness", "claude-code"]);
        spawn_with_stdin(c, stdin.to_string().as_bytes())
    }

    /// Whether the sender's store holds message `id`.
    pub fn has_message(&self, id: &str) -> bool {
        let Ok(db) = rusqlite::Connection::open(self.state.join("control.db")) else {
            return false;
        };
        let _ = db.busy_timeout(Duration::from_secs(5));
        db.query_row("select count(*) from messages where id = ?1", [id], |r| {
            r.get::<_, i64>(0)
        })
        .map(|n| n == 1)
        .unwrap_or(false)
    }

    /// Fails unless sp-sync stores message `id` within 15 s.
    pub fn assert_stored(&self, id: &str) {
        let stored = super::env::until(Duration::from_secs(15), || self.has_message(id));
        assert!(stored, "sp-sync stored {id}");
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.state.join("sp.log")).unwrap_or_default()
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        if let Some(mut c) = self.sync.take() {
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            if wait_timeout(&mut c, Duration::from_secs(20)).is_none() {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
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
    let limit = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let body = open_db(path)
            .query_row(
                "SELECT body FROM acks WHERE id = ?1 ORDER BY n LIMIT 1",
                [id],
                |r| r.get::<_, String>(0),
            )
            .ok();
        if let Some(body) = body {
            return serde_json::from_str(&body).unwrap();
        }
        assert!(std::time::Instant::now() < limit, "no ack for {id}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
