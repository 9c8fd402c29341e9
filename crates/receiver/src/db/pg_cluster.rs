//! A throwaway PostgreSQL for the tests (issue 29): Debian's server (`postgresql`, which
//! scripts/test-deps.sh installs), a cluster made by `initdb` in a temp folder, listening
//! only on a unix socket in that folder, stopped and removed when dropped. `initdb` refuses
//! root, so under root the cluster runs as `nobody` (`runuser`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "../../../sender/tests/common/needs.rs"]
mod needs;

pub(crate) struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_nobody: bool,
}

/// The newest `/usr/lib/postgresql/<version>/bin` with the server in it.
fn server_bin() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("pg_ctl").is_file()).then_some((v, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

fn ok(what: &str, out: std::io::Result<Output>) -> String {
    let out = out.unwrap_or_else(|e| panic!("{what}: cannot run it: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Cluster {
    /// A running cluster, or None when PostgreSQL is not installed (the test then returns;
    /// with `CI` set it fails instead: needs.rs).
    pub fn start() -> Option<Cluster> {
        let bin = server_bin();
        if !needs::needs("PostgreSQL (Debian's postgresql package)", bin.is_some()) {
            return None;
        }
        let bin = bin?;
        let dir = tempfile::Builder::new()
            .prefix("sp-pg-")
            .tempdir()
            .expect("temp folder");
        let as_nobody = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
        if as_nobody {
            let id = |flag: &str| -> u32 {
                ok(
                    "id nobody",
                    Command::new("id").args([flag, "nobody"]).output(),
                )
                .trim()
                .parse()
                .expect("nobody's id")
            };
            std::os::unix::fs::chown(dir.path(), Some(id("-u")), Some(id("-g")))
                .expect("giving the temp folder to nobody");
        }
        let c = Cluster {
            dir,
            bin,
            as_nobody,
        };
        let data = c.data();
        ok(
            "initdb",
            c.server("initdb")
                .args([
                    "-U",
                    "sp",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-locale",
                    "-N",
                    "-D",
                ])
                .arg(&data)
                .output(),
        );
        let opts = format!(
            "-c listen_addresses='' -k {} -c fsync=off -c full_page_writes=off",
            c.dir.path().display()
        );
        ok(
            "pg_ctl start",
            c.server("pg_ctl")
                .args(["-w", "-t", "60", "-D"])
                .arg(&data)
                .arg("-l")
                .arg(c.dir.path().join("log"))
                .args(["-o", &opts, "start"])
                .output(),
        );
        Some(c)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The server's program `name`, run as nobody under root.
    fn server(&self, name: &str) -> Command {
        let prog = self.bin.join(name);
        if self.as_nobody {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(prog);
            c
        } else {
            Command::new(prog)
        }
    }

    /// The socket folder (`host=` for a client).
    pub fn host(&self) -> &Path {
        self.dir.path()
    }

    /// The URL a client connects with (the socket folder as the host, percent-encoded).
    pub fn url(&self) -> String {
        let host = self.host().to_str().expect("a UTF-8 temp path");
        format!("postgres://sp@{}/postgres", host.replace('/', "%2F"))
    }

    /// Runs `sql` in one transaction in the database `postgres`, stopping at the first
    /// error (a failure of the test); returns what it printed (unaligned, tuples only).
    pub fn psql(&self, sql: &str) -> String {
        ok(
            "psql",
            Command::new(self.bin.join("psql"))
                .arg("-h")
                .arg(self.host())
                .args(["-U", "sp", "-d", "postgres", "-X", "-q", "-A", "-t"])
                .args(["-v", "ON_ERROR_STOP=1", "--single-transaction", "-c", sql])
                .output(),
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self
            .server("pg_ctl")
            .args(["-m", "immediate", "-w", "-D"])
            .arg(self.data())
            .arg("stop")
            .output();
    }
}
