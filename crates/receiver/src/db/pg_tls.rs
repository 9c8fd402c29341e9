//! TLS to PostgreSQL (issue 29): what a `postgres://` URL asks for, made into the client's
//! settings and one rustls connector (ring, as the receiver's own TLS) that the pool, the
//! wake's listening connection and so the announcer all use.
//!
//! As libpq reads the URL: `sslmode=disable` is plain; `prefer` (the client's default) tries
//! TLS and goes plain only when the server says it has none (a unix socket never has);
//! `require` is TLS or nothing. Whenever TLS is made, the server's certificate is verified,
//! host name included, against the CAs in `sslrootcert=PATH` (libpq's parameter, taken out
//! of the URL here since the client's parser knows no such thing) or else the Mozilla roots
//! of webpki-roots: the same in every image and container, already in the build (the push
//! client's), where the system's store may be missing or differ per host; a private CA (a
//! managed database's, one's own) is what sslrootcert is for. libpq's `verify-ca` and
//! `verify-full` are taken as `require`, which verifies as `verify-full` does.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use anyhow::{bail, Context};
use r2d2_postgres::postgres::config::SslMode;
use r2d2_postgres::postgres::{Client, Config, Error as PgError};
use r2d2_postgres::{r2d2, PostgresConnectionManager};
use tokio_rustls::rustls;

/// The connector every PostgreSQL connection of the receiver is made with.
pub(crate) type PgTls = tokio_postgres_rustls::MakeRustlsConnect;
/// The pool of the PostgreSQL store (and of the announcer, which shares it).
pub(crate) type PgPool = r2d2::Pool<PostgresConnectionManager<PgTls>>;

/// Where to connect and how: the client's settings and the TLS they are made with.
#[derive(Clone)]
pub(crate) struct PgTarget {
    pub config: Config,
    pub tls: PgTls,
    /// What a server's certificate is verified against, for the messages.
    roots: String,
}

impl FromStr for PgTarget {
    type Err = anyhow::Error;

    fn from_str(url: &str) -> anyhow::Result<PgTarget> {
        PgTarget::parse(url)
    }
}

impl PgTarget {
    /// Reads a `postgres://` URL, its `sslrootcert` file included.
    pub fn parse(url: &str) -> anyhow::Result<PgTarget> {
        let (rest, rootcert, verify) = take_tls_params(url)?;
        let mut config: Config = rest.parse().map_err(|e| {
            anyhow::anyhow!(
                "not a PostgreSQL URL ({e}): want postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE, or postgres://USER@/DATABASE?host=/run/postgresql for a unix socket"
            )
        })?;
        if verify {
            config.ssl_mode(SslMode::Require);
        }
        let (roots, described) = match &rootcert {
            Some(path) => (read_roots(path)?, format!("the CAs in {}", path.display())),
            None => (
                rustls::RootCertStore {
                    roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
                },
                "the Mozilla roots (webpki-roots; give sslrootcert=PATH for a private CA)"
                    .to_owned(),
            ),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_root_certificates(roots)
            .with_no_client_auth();
        // What libpq 17 sends, and what a server asked with sslnegotiation=direct requires.
        client.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(PgTarget {
            config,
            tls: PgTls::new(client),
            roots: described,
        })
    }

    /// One connection, outside any pool.
    pub fn connect(&self) -> Result<Client, PgError> {
        self.config.connect(self.tls.clone())
    }

    /// The pool's connection manager.
    pub fn manager(&self) -> PostgresConnectionManager<PgTls> {
        PostgresConnectionManager::new(self.config.clone(), self.tls.clone())
    }

    /// `e` with what it means when TLS refused the server (its certificate did not verify,
    /// or does not name the host).
    pub fn explain(&self, e: &PgError) -> String {
        match tls_error(e) {
            Some(rustls::Error::InvalidCertificate(c)) => format!(
                "TLS refused the server: its certificate did not verify against {} for the host in the URL: {c}",
                self.roots
            ),
            Some(other) => format!("TLS with the server failed: {other}"),
            None => e.to_string(),
        }
    }
}

/// The rustls error under a connection's error, if that is what it was.
fn tls_error(e: &PgError) -> Option<&rustls::Error> {
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(t) = c.downcast_ref::<rustls::Error>() {
            return Some(t);
        }
        if let Some(t) = c
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(t);
        }
        cause = c.source();
    }
    None
}

/// The URL without the parameters read here: `sslrootcert` (percent-decoded) and an
/// `sslmode` of `verify-ca`/`verify-full` (then `true`: TLS is required).
fn take_tls_params(url: &str) -> anyhow::Result<(String, Option<PathBuf>, bool)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None, false));
    };
    let mut kept = Vec::new();
    let (mut rootcert, mut verify) = (None, false);
    for param in query.split('&') {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        match key {
            "sslrootcert" => {
                let path = percent_encoding::percent_decode_str(value)
                    .decode_utf8()
                    .context("sslrootcert: not UTF-8")?;
                if path.is_empty() {
                    bail!("sslrootcert is empty: give the PEM file of the CA that signed the server's certificate");
                }
                rootcert = Some(PathBuf::from(path.as_ref()));
            }
            "sslmode" if value == "verify-full" || value == "verify-ca" => verify = true,
            _ => kept.push(param),
        }
    }
    if verify {
        kept.push("sslmode=require");
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((rest, rootcert, verify))
}

/// The CA certificates in the PEM file `path` (sslrootcert).
fn read_roots(path: &Path) -> anyhow::Result<rustls::RootCertStore> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| anyhow::anyhow!("sslrootcert: reading {}: {e}", path.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        bail!(
            "sslrootcert: {} holds no usable PEM certificate",
            path.display()
        );
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslrootcert_is_taken_out_of_the_url_and_the_rest_kept() {
        let (rest, root, verify) = take_tls_params(
            "postgres://u@h/db?sslmode=require&sslrootcert=%2Fetc%2Fca%20x.pem&connect_timeout=3",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u@h/db?sslmode=require&connect_timeout=3");
        assert_eq!(root, Some(PathBuf::from("/etc/ca x.pem")));
        assert!(!verify);
        let (rest, root, _) = take_tls_params("postgres://u@h/db?sslrootcert=/ca.pem").unwrap();
        assert_eq!(
            (rest.as_str(), root),
            ("postgres://u@h/db", Some("/ca.pem".into()))
        );
        assert_eq!(
            take_tls_params("postgres://u@h/db").unwrap(),
            ("postgres://u@h/db".into(), None, false)
        );
    }

    #[test]
    fn verify_full_and_verify_ca_are_require() {
        for mode in ["verify-full", "verify-ca"] {
            let t = PgTarget::parse(&format!("postgres://u@h/db?sslmode={mode}")).unwrap();
            assert_eq!(t.config.get_ssl_mode(), SslMode::Require, "{mode}");
        }
        let t = PgTarget::parse("postgres://u@h/db?sslmode=disable").unwrap();
        assert_eq!(t.config.get_ssl_mode(), SslMode::Disable);
        let t = PgTarget::parse("postgres://u@h/db").unwrap();
        assert_eq!(t.config.get_ssl_mode(), SslMode::Prefer);
        let e = PgTarget::parse("postgres://u@h/db?sslmode=sometimes")
            .err()
            .expect("refused");
        assert!(format!("{e:#}").contains("not a PostgreSQL URL"), "{e:#}");
    }

    #[test]
    fn a_root_file_that_cannot_be_used_is_refused_saying_so() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = PgTarget::parse(&format!(
            "postgres://u@h/db?sslmode=require&sslrootcert={}",
            missing.display()
        ))
        .err()
        .expect("refused");
        assert!(
            format!("{e:#}").contains(&format!("sslrootcert: reading {}", missing.display())),
            "{e:#}"
        );
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = PgTarget::parse(&format!(
            "postgres://u@h/db?sslrootcert={}",
            empty.display()
        ))
        .err()
        .expect("refused");
        assert!(
            format!("{e:#}").contains("no usable PEM certificate"),
            "{e:#}"
        );
        let e = PgTarget::parse("postgres://u@h/db?sslrootcert=")
            .err()
            .expect("refused");
        assert!(format!("{e:#}").contains("sslrootcert is empty"), "{e:#}");
    }
}
