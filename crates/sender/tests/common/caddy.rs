//! A real `caddy run` as a child, for the tests behind a reverse proxy: started with a
//! Caddyfile in a temp folder (its HOME and data there, never the real ones), its stderr kept
//! line by line, SIGTERMed when dropped.
#![allow(dead_code)]
use super::env::{until, wait_timeout};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Whether caddy is on PATH; without it a test fails when `CI` is set and otherwise says it
/// skipped (needs.rs).
pub fn needs_caddy() -> bool {
    super::needs::needs(
        "caddy on PATH (scripts/test-deps.sh installs it: apt-get install caddy)",
        caddy_installed(),
    )
}

fn caddy_installed() -> bool {
    // Any caddy run makes `$HOME/.step` (its CA library's folder): never the real HOME.
    let home = tempfile::tempdir().unwrap();
    Command::new("caddy")
        .arg("version")
        .env("HOME", home.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A loopback port nothing listens on now, for one of Caddy's.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct CaddyProcess {
    child: Option<Child>,
    /// The Caddyfile, then each line Caddy wrote to stderr.
    log: Arc<Mutex<Vec<String>>>,
}

impl CaddyProcess {
    /// Writes `caddyfile` to `dir` and runs it, with `dir` as HOME and `dir/data` as
    /// XDG_DATA_HOME (where `tls internal` keeps its CA).
    pub fn start(dir: &Path, caddyfile: &str) -> CaddyProcess {
        std::fs::create_dir_all(dir).unwrap();
        let file = dir.join("Caddyfile");
        std::fs::write(&file, caddyfile).unwrap();
        let mut child = Command::new("caddy")
            .args(["run", "--adapter", "caddyfile", "--config"])
            .arg(&file)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", dir)
            .env("XDG_DATA_HOME", dir.join("data"))
            .env("XDG_CONFIG_HOME", dir.join("config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting caddy");
        let log = Arc::new(Mutex::new(vec![format!("--- Caddyfile ---\n{caddyfile}")]));
        let sink = Arc::clone(&log);
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        CaddyProcess {
            child: Some(child),
            log,
        }
    }

    /// Waits (30 s at most) until `up` says Caddy serves; panics with its log if it does not
    /// or if it exited.
    pub fn wait_up(&mut self, mut up: impl FnMut() -> bool) {
        let mut exited = || matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(Some(_))));
        let came_up = until(Duration::from_secs(30), || exited() || up());
        assert!(
            came_up && !exited(),
            "caddy did not come up:\n{}",
            self.log()
        );
    }

    pub fn lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    pub fn log(&self) -> String {
        self.lines().join("\n")
    }
}

impl Drop for CaddyProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            if wait_timeout(&mut c, Duration::from_secs(10)).is_none() {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}
