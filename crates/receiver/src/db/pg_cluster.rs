//! A throwaway PostgreSQL for the tests (issue 29): Debian's server (`postgresql`, which
//! scripts/test-deps.sh installs), a cluster made by `initdb` in a temp folder, listening
//! only on a unix socket in that folder, stopped and removed when dropped. `initdb` refuses
//! root, so under root the cluster runs as `nobody` (`runuser`).
//!
//! [`Cluster::start_tls`] also listens on 127.0.0.1 (a free port) with `ssl=on`, its
//! certificate for `localhost` signed by a CA made in the test (rcgen).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sessionpipe_testkit::needs;

pub(crate) struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_nobody: bool,
    /// The TCP port on 127.0.0.1 (a TLS cluster's; also its socket's name).
    port: Option<u16>,
}

/// What a TLS cluster's pg_hba.conf lets in over TCP.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tcp {
    /// TLS or plain (`host`).
    TlsOrPlain,
    /// TLS only (`hostssl`).
    TlsOnly,
}

/// A CA made for a test: its certificate (PEM) and what signs with it.
pub(crate) struct Ca {
    pub pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("CA certificate");
        Ca {
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A certificate for `names` and its key, both PEM.
    fn server(&self, names: &[&str]) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let params = rcgen::CertificateParams::new(names).expect("server params");
        let key = rcgen::KeyPair::generate().expect("server key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("server certificate");
        (cert.pem(), key.serialize_pem())
    }
}

/// nobody's user and group ids.
fn nobody() -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        ok(
            "id nobody",
            Command::new("id").args([flag, "nobody"]).output(),
        )
        .trim()
        .parse()
        .expect("nobody's id")
    };
    (id("-u"), id("-g"))
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
        Self::start_with(None)
    }

    /// A running cluster that also listens on 127.0.0.1 with TLS, letting in what `tcp`
    /// says; its CA's certificate is [`Cluster::ca_file`].
    pub fn start_tls(tcp: Tcp) -> Option<Cluster> {
        Self::start_with(Some(tcp))
    }

    fn start_with(tcp: Option<Tcp>) -> Option<Cluster> {
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
            let (uid, gid) = nobody();
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .expect("giving the temp folder to nobody");
        }
        let port = tcp.map(|_| {
            // A free port: the kernel's pick, released for the server to take.
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port()
        });
        let c = Cluster {
            dir,
            bin,
            as_nobody,
            port,
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
        let mut opts = format!(
            "-c listen_addresses='' -k {} -c fsync=off -c full_page_writes=off",
            c.dir.path().display()
        );
        if let (Some(tcp), Some(port)) = (tcp, port) {
            opts = format!(
                "-k {} -c fsync=off -c full_page_writes=off {}",
                c.dir.path().display(),
                c.tls_options(tcp, port)
            );
        }
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

    /// Makes the CA, the server's certificate and pg_hba.conf; the server's options.
    fn tls_options(&self, tcp: Tcp, port: u16) -> String {
        let ca = Ca::new("sp test CA");
        std::fs::write(self.ca_file(), &ca.pem).expect("writing the CA");
        let (cert, key) = ca.server(&["localhost"]);
        let (cert_file, key_file) = (
            self.dir.path().join("server.crt"),
            self.dir.path().join("server.key"),
        );
        std::fs::write(&cert_file, cert).expect("writing the certificate");
        std::fs::write(&key_file, key).expect("writing the key");
        // The server refuses a key others can read, or that is not its own.
        std::fs::set_permissions(
            &key_file,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .expect("key mode");
        if self.as_nobody {
            let (uid, gid) = nobody();
            for f in [&cert_file, &key_file] {
                std::os::unix::fs::chown(f, Some(uid), Some(gid)).expect("chown");
            }
        }
        let host = match tcp {
            Tcp::TlsOrPlain => "host",
            Tcp::TlsOnly => "hostssl",
        };
        std::fs::write(
            self.data().join("pg_hba.conf"),
            format!("local all all trust\n{host} all all 127.0.0.1/32 trust\n"),
        )
        .expect("writing pg_hba.conf");
        format!(
            "-c listen_addresses=127.0.0.1 -p {port} -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
            cert_file.display(),
            key_file.display()
        )
    }

    /// The PEM file of the CA that signed a TLS cluster's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The URL of a TLS cluster over TCP: `host` (`localhost`, `127.0.0.1`) and its port,
    /// with `query` (`sslmode=…`).
    pub fn tcp_url(&self, host: &str, query: &str) -> String {
        let port = self.port.expect("a cluster started with start_tls");
        format!("postgres://sp@{host}:{port}/postgres?{query}")
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
        let port = self.port.map(|p| format!(":{p}")).unwrap_or_default();
        format!("postgres://sp@{}{port}/postgres", host.replace('/', "%2F"))
    }

    /// Runs `sql` in one transaction in the database `postgres`, stopping at the first
    /// error (a failure of the test); returns what it printed (unaligned, tuples only).
    pub fn psql(&self, sql: &str) -> String {
        let mut psql = Command::new(self.bin.join("psql"));
        if let Some(port) = self.port {
            psql.arg("-p").arg(port.to_string());
        }
        ok(
            "psql",
            psql.arg("-h")
                .arg(self.host())
                .args(["-U", "sp", "-d", "postgres", "-X", "-q", "-A", "-t"])
                .args(["-v", "ON_ERROR_STOP=1", "--single-transaction", "-c", sql])
                .output(),
        )
    }
}

impl Cluster {
    /// Stops the server at once (its connections cut), as a crash or an outage would.
    pub fn stop(&self) {
        let _ = self
            .server("pg_ctl")
            .args(["-m", "immediate", "-w", "-D"])
            .arg(self.data())
            .arg("stop")
            .output();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}
