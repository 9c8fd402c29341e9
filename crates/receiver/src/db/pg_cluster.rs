//! A throwaway PostgreSQL for the receiver's tests (issue 29), started and stopped by
//! scripts/pg-cluster.sh, the one implementation (its header says why bash): a cluster in a
//! temp folder, listening only on a unix socket there, stopped and removed when dropped.
//! What this adds is Rust's: [`Cluster::start_tls`] makes a CA and a certificate for
//! `localhost` (rcgen) and asks the script to listen on 127.0.0.1 (a free port) with
//! `ssl=on` as well.
//!
//! A test that needs one carries `#[cfg_attr(not(has_postgres), ignore = …)]`
//! (scripts/has_postgres.rs): without PostgreSQL it shows as ignored, never as passed; with
//! it, or with `CI` set, it runs, and a cluster that cannot start fails it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The one way to start a cluster.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/pg-cluster.sh");

pub(crate) struct Cluster {
    dir: tempfile::TempDir,
    /// The server's programs (`pg-cluster.sh bin`), for `psql`.
    bin: PathBuf,
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

/// Runs the script; its stdout (a failure of the test when it fails).
fn script(args: &[&std::ffi::OsStr]) -> String {
    ok(
        "scripts/pg-cluster.sh",
        Command::new("bash").arg(SCRIPT).args(args).output(),
    )
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
    /// A running cluster (PostgreSQL not installed: the test fails, saying so; tests that
    /// need one are ignored without it, see the module's header).
    pub fn start() -> Cluster {
        Self::start_with(None)
    }

    /// A running cluster that also listens on 127.0.0.1 with TLS, letting in what `tcp`
    /// says; its CA's certificate is [`Cluster::ca_file`].
    pub fn start_tls(tcp: Tcp) -> Cluster {
        Self::start_with(Some(tcp))
    }

    fn start_with(tcp: Option<Tcp>) -> Cluster {
        let bin = PathBuf::from(script(&["bin".as_ref()]).trim_end());
        let dir = tempfile::Builder::new()
            .prefix("sp-pg-")
            .tempdir()
            .expect("temp folder");
        let Some(tcp) = tcp else {
            script(&["start".as_ref(), dir.path().as_os_str()]);
            return Cluster {
                dir,
                bin,
                port: None,
            };
        };
        // A free port: the kernel's pick, released for the server to take.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        // The certificate and key, for the script to copy into the cluster's folder.
        let ca = Ca::new("sp test CA");
        let (cert, key) = ca.server(&["localhost"]);
        let files = tempfile::tempdir().expect("temp folder");
        let (cert_file, key_file) = (files.path().join("crt"), files.path().join("key"));
        std::fs::write(&cert_file, cert).expect("writing the certificate");
        std::fs::write(&key_file, key).expect("writing the key");
        let hba = match tcp {
            Tcp::TlsOrPlain => "host",
            Tcp::TlsOnly => "hostssl",
        };
        let port_text = port.to_string();
        script(&[
            "start".as_ref(),
            dir.path().as_os_str(),
            "--tls".as_ref(),
            port_text.as_ref(),
            cert_file.as_os_str(),
            key_file.as_os_str(),
            hba.as_ref(),
        ]);
        let c = Cluster {
            dir,
            bin,
            port: Some(port),
        };
        std::fs::write(c.ca_file(), &ca.pem).expect("writing the CA");
        c
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
    /// Stops the server at once (its connections cut), as a crash or an outage would; its
    /// folder goes with it.
    pub fn stop(&self) {
        script(&["stop".as_ref(), self.dir.path().as_os_str()]);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Stopped already, or a test failing: the script says so on stderr.
        let _ = Command::new("bash")
            .arg(SCRIPT)
            .arg("stop")
            .arg(self.dir.path())
            .output();
    }
}
