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
        let (config, rootcert) = parse_url(url)?;
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
            Some(rustls::Error::InvalidCertificate(c)) => {
                let why = match c {
                    rustls::CertificateError::UnknownIssuer => {
                        "no CA among them signed it".to_owned()
                    }
                    other => other.to_string(),
                };
                format!(
                    "TLS refused the server: its certificate did not verify against {}: {why}",
                    self.roots
                )
            }
            Some(other) => format!("TLS with the server failed: {other}"),
            // The client's own words are terse ("db error"): the causes say what happened.
            None => {
                let mut said = e.to_string();
                let mut cause = std::error::Error::source(e);
                while let Some(c) = cause {
                    said = format!("{said}: {c}");
                    cause = c.source();
                }
                said
            }
        }
    }
}

/// Whether `url` is a PostgreSQL URL the client can use, without reading any file.
pub(crate) fn check_url(url: &str) -> anyhow::Result<()> {
    parse_url(url).map(drop)
}

/// The client's settings from `url`, and the `sslrootcert` it names.
fn parse_url(url: &str) -> anyhow::Result<(Config, Option<PathBuf>)> {
    let (rest, rootcert) = take_tls_params(url)?;
    let config: Config = rest.parse().map_err(|e| {
        anyhow::anyhow!(
            "not a PostgreSQL URL ({e}): want postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE, or postgres://USER@/DATABASE?host=/run/postgresql for a unix socket"
        )
    })?;
    Ok((config, rootcert))
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

/// The URL without `sslrootcert` (returned percent-decoded), and with an `sslmode` of
/// `verify-ca`/`verify-full` (which the client's parser refuses) as `require`.
fn take_tls_params(url: &str) -> anyhow::Result<(String, Option<PathBuf>)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let mut kept = Vec::new();
    let mut rootcert = None;
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
            "sslmode" if value == "verify-full" || value == "verify-ca" => {
                kept.push("sslmode=require")
            }
            _ => kept.push(param),
        }
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((rest, rootcert))
}

/// The CA certificates in the PEM file `path` (sslrootcert).
fn read_roots(path: &Path) -> anyhow::Result<rustls::RootCertStore> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    // A CA bundle is some hundreds of KiB at most.
    const ROOTS_MAX: u64 = 4 << 20;
    let len = std::fs::metadata(path)
        .map_err(|e| anyhow::anyhow!("sslrootcert: reading {}: {e}", path.display()))?
        .len();
    if len > ROOTS_MAX {
        bail!(
            "sslrootcert: {} is {len} bytes, more than a CA bundle ({ROOTS_MAX} at most)",
            path.display()
        );
    }
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
    use r2d2_postgres::postgres::config::SslMode;

    use super::*;

    #[test]
    fn sslrootcert_is_taken_out_of_the_url_and_the_rest_kept() {
        let (rest, root) = take_tls_params(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca%20x.pem&connect_timeout=3",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u@h/db?sslmode=require&connect_timeout=3");
        assert_eq!(root, Some(PathBuf::from("/etc/ca x.pem")));
        let (rest, root) = take_tls_params("postgres://u@h/db?sslrootcert=/ca.pem").unwrap();
        assert_eq!(
            (rest.as_str(), root),
            ("postgres://u@h/db", Some("/ca.pem".into()))
        );
        assert_eq!(
            take_tls_params("postgres://u@h/db").unwrap(),
            ("postgres://u@h/db".into(), None)
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

    /// Over a real PostgreSQL with `ssl=on` (pg_cluster.rs).
    mod live {
        use std::sync::mpsc;
        use std::time::{Duration, Instant};

        use super::super::super::pg::PgStore;
        use super::super::super::pg_cluster::{Ca, Cluster, Tcp};
        use super::super::super::pg_wake::{Announcer, Listener, Wakeup};
        use super::*;

        fn ssl_of_this_session(client: &mut Client) -> bool {
            client
                .query_one(
                    "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                    &[],
                )
                .expect("pg_stat_ssl")
                .get(0)
        }

        fn refusal(target: &PgTarget) -> String {
            match target.connect() {
                Ok(_) => panic!("connected"),
                Err(e) => {
                    let said = target.explain(&e);
                    eprintln!("refused: {said}");
                    said
                }
            }
        }

        #[test]
        #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
        fn require_with_the_servers_ca_is_tls_and_another_ca_or_host_is_refused() {
            let pg = Cluster::start_tls(Tcp::TlsOrPlain);
            let ca = pg.ca_file();
            let ca = ca.display();
            let good: PgTarget = pg
                .tcp_url("localhost", &format!("sslmode=require&sslrootcert={ca}"))
                .parse()
                .unwrap();
            assert!(ssl_of_this_session(&mut good.connect().expect("TLS")));
            // verify-full is taken as require.
            let full: PgTarget = pg
                .tcp_url(
                    "localhost",
                    &format!("sslmode=verify-full&sslrootcert={ca}"),
                )
                .parse()
                .unwrap();
            assert!(ssl_of_this_session(&mut full.connect().expect("TLS")));

            // Another CA's certificate file: refused, saying why and against what.
            let other = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(other.path(), Ca::new("another CA").pem).unwrap();
            let wrong: PgTarget = pg
                .tcp_url(
                    "localhost",
                    &format!("sslmode=require&sslrootcert={}", other.path().display()),
                )
                .parse()
                .unwrap();
            let e = refusal(&wrong);
            assert!(
                e.contains("certificate did not verify against the CAs in")
                    && e.contains(&other.path().display().to_string())
                    && e.contains("no CA among them signed it"),
                "{e}"
            );
            // The right CA, but the certificate names localhost, not 127.0.0.1.
            let ip: PgTarget = pg
                .tcp_url("127.0.0.1", &format!("sslmode=require&sslrootcert={ca}"))
                .parse()
                .unwrap();
            let e = refusal(&ip);
            assert!(
                e.contains("certificate not valid for name \"127.0.0.1\""),
                "{e}"
            );
            // Without sslrootcert the public roots do not know the test's CA.
            let public: PgTarget = pg.tcp_url("localhost", "sslmode=require").parse().unwrap();
            assert!(
                refusal(&public).contains("Mozilla roots"),
                "{}",
                refusal(&public)
            );
            // prefer (the default) tries TLS and verifies it: no quiet fall back to plain.
            let prefer: PgTarget = pg
                .tcp_url("localhost", "connect_timeout=5")
                .parse()
                .unwrap();
            assert_eq!(prefer.config.get_ssl_mode(), SslMode::Prefer);
            assert!(
                refusal(&prefer).contains("did not verify"),
                "{}",
                refusal(&prefer)
            );
            let prefer: PgTarget = pg
                .tcp_url("localhost", &format!("sslrootcert={ca}"))
                .parse()
                .unwrap();
            assert!(ssl_of_this_session(&mut prefer.connect().expect("TLS")));

            // disable: plain, which this server's pg_hba lets in.
            let plain: PgTarget = pg.tcp_url("localhost", "sslmode=disable").parse().unwrap();
            assert!(!ssl_of_this_session(&mut plain.connect().expect("plain")));
        }

        #[test]
        #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
        fn a_server_that_lets_in_tls_only_refuses_plain() {
            let pg = Cluster::start_tls(Tcp::TlsOnly);
            let plain: PgTarget = pg.tcp_url("localhost", "sslmode=disable").parse().unwrap();
            let e = refusal(&plain);
            assert!(
                e.contains("pg_hba.conf") && e.contains("no encryption"),
                "{e}"
            );
            let tls: PgTarget = pg
                .tcp_url(
                    "localhost",
                    &format!("sslmode=require&sslrootcert={}", pg.ca_file().display()),
                )
                .parse()
                .unwrap();
            assert!(ssl_of_this_session(&mut tls.connect().expect("TLS")));
            // A unix socket has no TLS: require there fails rather than goes plain.
            let socket: PgTarget = format!("{}?sslmode=require", pg.url()).parse().unwrap();
            let e = refusal(&socket);
            assert!(e.contains("server does not support TLS"), "{e}");
        }

        /// What `sp-receiver` reports at start (a database error: exit 2, cli.rs).
        #[test]
        #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
        fn opening_the_database_with_a_certificate_that_does_not_verify_says_so() {
            let pg = Cluster::start_tls(Tcp::TlsOnly);
            let url = pg.tcp_url("localhost", "sslmode=require");
            let e = match super::super::super::open(&crate::options::Database::Postgres(url)) {
                Ok(_) => panic!("opened"),
                Err(e) => format!("{e:#}"),
            };
            assert!(
                e.starts_with("database postgres://sp@localhost:")
                    && e.contains("cannot connect to the PostgreSQL database: TLS refused the server: its certificate did not verify"),
                "{e}"
            );
        }

        #[test]
        #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
        fn the_store_and_its_wake_run_over_tls() {
            let pg = Cluster::start_tls(Tcp::TlsOnly);
            let url = pg.tcp_url(
                "localhost",
                &format!("sslmode=require&sslrootcert={}", pg.ca_file().display()),
            );
            let store = PgStore::open(&url).expect("open over TLS");
            store.ping().expect("ping");
            let (tx, rx) = mpsc::channel();
            let _l = Listener::start(url.parse().unwrap(), move |w| {
                let _ = tx.send(w);
            });
            let next = |want: &dyn Fn(&Wakeup) -> bool| {
                let t0 = Instant::now();
                loop {
                    let left = Duration::from_secs(10).saturating_sub(t0.elapsed());
                    match rx.recv_timeout(left) {
                        Ok(w) if want(&w) => return w,
                        Ok(_) => {}
                        Err(e) => panic!("no wake within 10 s: {e}"),
                    }
                }
            };
            next(&|w| *w == Wakeup::Connected);
            let announcer = Announcer {
                pool: store.pool.clone(),
                me: "a".into(),
            };
            let version = announcer.send(&["session:s1".to_owned()]);
            assert_eq!(version, Some(1), "the shared page version, over TLS");
            assert_eq!(
                next(&|w| matches!(w, Wakeup::Notified(_))),
                Wakeup::Notified("a\t1\tsession:s1".into())
            );
            // Every connection to it (the pool's and the listener's) is TLS.
            let plain = pg.psql(
                "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) \
                 FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
                 WHERE a.application_name IN ('sp-receiver', 'sp-receiver wake')",
            );
            let (tls, plain) = plain.trim().split_once('|').expect("two counts");
            assert!(tls.parse::<u32>().unwrap() >= 2, "{tls} TLS connections");
            assert_eq!(plain, "0");
        }
    }
}
