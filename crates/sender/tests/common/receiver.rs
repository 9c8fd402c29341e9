//! The real `sp-receiver` as a child process (crates/testkit), and a machine (temp HOME, `sp-sync`, the hooks)
//! whose one sink is that receiver with control on.
#![allow(dead_code)]
use super::env::{bin_cmd, run_with_stdin, set_mode, spawn_daemon, spawn_with_stdin, wait_timeout};
use serde_json::{json, Value};
pub use sessionpipe_testkit::receiver::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

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
