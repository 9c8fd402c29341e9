//! Running a hook the way a harness does: stdin piped in and closed, stdout read, and the
//! child reaped with `wait4` so its own CPU time comes back with it.
use crate::stats::Sample;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The environment of every process the benchmark runs: nothing inherited but PATH, and the
/// config and state folder of one temp "home".
#[derive(Debug, Clone)]
pub struct Home {
    pub home: PathBuf,
    pub state: PathBuf,
    pub config: PathBuf,
}

impl Home {
    pub fn new(root: &Path) -> Home {
        let home = root.join("home");
        std::fs::create_dir_all(&home).unwrap();
        Home {
            state: home.join(".local/state/sessionpipe"),
            config: home.join(".config/sessionpipe/config.json"),
            home,
        }
    }

    pub fn write_config(&self, config: &serde_json::Value) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(self.config.parent().unwrap()).unwrap();
        std::fs::write(&self.config, serde_json::to_string_pretty(config).unwrap()).unwrap();
        std::fs::set_permissions(&self.config, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    pub fn db_path(&self) -> PathBuf {
        self.state.join("control.db")
    }

    pub fn command(&self, program: &Path) -> Command {
        self.command_as(Command::new(program))
    }

    /// `program` run under GNU time, which writes the child's peak RSS (KiB) to `rss_file`.
    /// (`ru_maxrss` read by this process itself would count the benchmark's own memory:
    /// Linux keeps the high-water mark of the image a spawned child replaced at exec.)
    pub fn command_rss(&self, program: &Path, rss_file: &Path) -> Command {
        let mut c = Command::new(TIME);
        c.args(["-f", "%M", "-o"]).arg(rss_file).arg(program);
        self.command_as(c)
    }

    fn command_as(&self, mut c: Command) -> Command {
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("SESSIONPIPE_CONFIG", &self.config)
            .env("SESSIONPIPE_STATE_DIR", &self.state)
            .env("SESSIONPIPE_NO_SPAWN", "1")
            // As an interactive Claude Code sets it for its hooks (the recorded payloads are
            // an interactive session's).
            .env("CLAUDE_CODE_SESSION_ATTENDED", "1")
            .current_dir(&self.home);
        c
    }
}

pub const TIME: &str = "/usr/bin/time";

pub fn have_time() -> bool {
    Command::new(TIME)
        .args(["-f", "%M", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The peak RSS, KiB, GNU time wrote.
pub fn read_rss(file: &Path) -> Option<i64> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .rev()
        .find_map(|l| l.trim().parse().ok())
}

/// What one run produced.
pub struct Ran {
    pub sample: Sample,
    pub stdout: Vec<u8>,
    pub ok: bool,
}

fn tv(t: libc::timeval) -> Duration {
    Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
}

/// Spawns `cmd`, writes `stdin` and closes it, waits. Wall time is spawn to reaped.
#[allow(clippy::zombie_processes)] // reaped by wait4, which std's Child does not know of
pub fn run(mut cmd: Command, stdin: &[u8]) -> Ran {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    {
        let mut pipe = child.stdin.take().unwrap();
        // A process that exits without reading everything is not an error here.
        let _ = pipe.write_all(stdin);
    }
    let (status, usage) = wait4(child.id());
    let wall = started.elapsed();
    let mut stdout = Vec::new();
    let _ = child.stdout.take().unwrap().read_to_end(&mut stdout);
    Ran {
        sample: Sample {
            wall,
            cpu: tv(usage.ru_utime) + tv(usage.ru_stime),
        },
        stdout,
        ok: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
    }
}

/// Reaps one child and returns its wait status and its own rusage.
pub fn wait4(pid: u32) -> (i32, libc::rusage) {
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter for wait4.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: pid is our own unreaped child; both pointers are valid for the call.
        let r = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
        if r == pid as libc::pid_t {
            return (status, usage);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            panic!("wait4({pid}): {e}");
        }
    }
}

/// Compiles the process floor, a trivial Rust program that reads stdin and exits, with the
/// same optimisation settings as our release profile.
pub fn build_floor(src: &Path, out: &Path) -> PathBuf {
    let bin = out.join("sp-bench-floor");
    let fresh = match (std::fs::metadata(&bin), std::fs::metadata(src)) {
        (Ok(b), Ok(s)) => b.modified().ok() >= s.modified().ok(),
        _ => false,
    };
    if !fresh {
        std::fs::create_dir_all(out).unwrap();
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let status = Command::new(rustc)
            .args([
                "--edition",
                "2021",
                "-C",
                "opt-level=3",
                "-C",
                "codegen-units=1",
                "-C",
                "strip=symbols",
                "-o",
            ])
            .arg(&bin)
            .arg(src)
            .status()
            .expect("running rustc for the process floor");
        assert!(status.success(), "rustc could not build {}", src.display());
    }
    bin
}
