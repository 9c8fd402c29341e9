//! `sp-receiver`: the receiver as a program. A small self-hosted sessionpipe receiver with the
//! page a person answers from, storing everything in its own SQLite file.
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::options::Database;
use super::{Receiver, ReceiverOptions};

/// The port it listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 8787;
/// Tokens shorter than this are refused.
const TOKEN_MIN: usize = 16;
/// What the database keeps (events, messages, acks, logins), and how often it is swept.
const KEEP: Duration = Duration::from_secs(30 * 24 * 3600);
const SWEEP_EVERY: Duration = Duration::from_secs(3600);

/// What `--help` says after the options.
const AFTER_HELP: &str = "\
It serves the sessionpipe protocol (GET /.well-known/sessionpipe; POST {events}; the control
long poll GET {control}?session=&wait= and POST {control}/ack, with the bearer token), GET
/healthz (200 when the server and its database answer) and, at /, a page that shows live
sessions and, at its top, every open permission prompt oldest first (identical ones as one
group, answered together; \"Not now\" hides one everywhere and silences its push for the
--not-now-s window), answers them (Allow / Deny, with an optional note), queues a prompt
for a session's next turn, asks a session to stop, and shows each message's outcome
(delivered, expired, unsupported, failed).

Signed control: `sp pair SINK` on a machine (its sink set to \"control\": \"signed\") prints a
pairing link and six check digits; the page shows the same digits and approves with a
passkey, and from then on signs every answer, message and stop on the device (a day key
under a passkey grant). The receiver carries them per machine
(GET {control}?machine=&wait= with the machine's own token) and can never sign one.

The page always needs the login token, on loopback too (any local user or program can
reach 127.0.0.1). Log in once per browser with the token, or with the --login-url link; the
login is an HttpOnly, SameSite=Strict cookie kept 30 days. Scripts may send
`Authorization: Bearer <login token>` to /page/api/* instead. The bearer token never opens
the page. The page answers only requests addressed to this receiver (the --public-url host,
or localhost / an IP address); login attempts are limited per client and
overall (429 with retry-after).

Limits: request heads of at most 16 KiB and 64 headers, read within 10 s (also the idle
keep-alive limit); bodies of at most batch.max_bytes (events) or 1 MiB; open connections at
most --max-connections and never more than the open-file limit allows (past it new ones
are closed at once). Every limit hit is logged to stderr (a connection left idle past the
head limit, as an open tab's, at debug only).

ENVIRONMENT AND FILES (a flag beats its variable, which beats the default):
  SESSIONPIPE_RECEIVER_TOKEN_FILE        --token-file (default: $XDG_CONFIG_HOME/sessionpipe/
                                         receiver-token, else ~/.config/sessionpipe/receiver-token)
  SESSIONPIPE_RECEIVER_LOGIN_TOKEN_FILE  --login-token-file (default: receiver-login-token in
                                         the same folder)
  SESSIONPIPE_RECEIVER_DB                --db (default: $XDG_STATE_HOME/sessionpipe/receiver.db,
                                         else ~/.local/state/sessionpipe/receiver.db; WAL, 0600)
  SESSIONPIPE_LOG                        log level on stderr: error, warn, info (default), debug
A token file at its default path is created (random, mode 600) when missing; a token file
given by flag or variable must exist. Token files must not be readable by group or others,
and hold one token of at least 16 characters. The database keeps 30 days.

POSTGRESQL: --db postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE (or ...@/DATABASE?host=
/run/postgresql for a unix socket) keeps everything in that database, which must exist
(the tables are made at the first start). Receivers on one database act as one: any of
them serves any machine's poll, page and pairing, and each wakes the others' held polls.
TLS to the database as the URL's sslmode says: disable (plain), prefer (the default: TLS
when the server has it), require (TLS or nothing; verify-ca and verify-full mean the same).
TLS always verifies the server's certificate and host name against the CAs in
sslrootcert=PATH (a PEM file: libpq's parameter, which sp-receiver reads and takes out of
the URL before the client sees it) or else the Mozilla roots; one that does not verify is
refused.

Exit status: 0 stopped by a signal (or --init / --login-url done), 2 bad usage or setup,
1 other failure (e.g. the address is taken).";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Serve,
    Init,
    LoginUrl,
}

/// sp-receiver: a small self-hosted sessionpipe receiver, with a page to answer from a phone.
/// Serves until SIGTERM or SIGINT.
#[derive(Debug, clap::Parser)]
#[command(
    name = "sp-receiver",
    version,
    after_help = AFTER_HELP,
    disable_help_subcommand = true
)]
struct Cli {
    /// Create the token files and the database if missing, print where they are, and exit.
    #[arg(long, conflicts_with = "login_url")]
    init: bool,
    /// Print the page's address with the login token in its fragment (a link that logs in
    /// at once), and exit.
    #[arg(long)]
    login_url: bool,
    /// Address to listen on (port 0 picks a free one). Anything but loopback exposes the
    /// receiver: the page then still needs the login token, but use --tls-cert/--tls-key or
    /// a TLS proxy in front of it.
    #[arg(long, value_name = "HOST:PORT", default_value_t = SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)), value_parser = parse_listen_arg)]
    listen: SocketAddr,
    /// The senders' bearer token (events, control, acks).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// The page's login token; must differ from the bearer token.
    #[arg(long, value_name = "FILE")]
    login_token_file: Option<PathBuf>,
    /// The database: a SQLite file's path, or a `postgres://` URL (receivers sharing one
    /// PostgreSQL database act as one); any other `scheme://` is refused. Taken as a plain
    /// string and checked by `db_arg`: clap's own error would print the value, password too.
    #[arg(long, value_name = "PATH|URL")]
    db: Option<String>,
    /// How long an Allow / Deny from the page stays valid.
    #[arg(long, value_name = "SECONDS", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    permission_expiry_s: u64,
    /// How long a queued prompt stays valid; a Stop stays valid as long as a permission
    /// answer.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    prompt_expiry_s: u64,
    /// Where people open the page (https://HOST behind a TLS proxy); its host is the
    /// passkeys' rp id for signed control, and the Host the page answers to. Default:
    /// http://localhost:PORT, rp id localhost (open the page as localhost, not 127.0.0.1:
    /// rp ids cannot be IP addresses).
    #[arg(long, value_name = "URL", value_parser = parse_public_url)]
    public_url: Option<String>,
    /// Trust X-Forwarded-Proto, -Host and -For from a TLS proxy in front (only then: without
    /// it they are ignored).
    #[arg(long)]
    trust_proxy: bool,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key for --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The most connections open at once (also capped by the open-file limit).
    #[arg(long, value_name = "N", default_value_t = 8192, value_parser = clap::value_parser!(u64).range(16..=1_000_000))]
    max_connections: u64,
    /// Let the page aim Web Push and ntfy at private, loopback and link-local addresses, and
    /// over http there (a self-hosted ntfy on this machine or the LAN). Off: https to a
    /// public address only.
    #[arg(long)]
    allow_private_push: bool,
    /// How long the page's "Not now" puts a prompt off: hidden on every page and not pushed;
    /// the machine keeps waiting for an answer meanwhile.
    #[arg(long, value_name = "SECONDS", default_value_t = crate::options::NOT_NOW_S, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    not_now_s: u64,
}

#[derive(Debug)]
struct Args {
    mode: Mode,
    listen: SocketAddr,
    token_file: Option<PathBuf>,
    login_token_file: Option<PathBuf>,
    db: Option<Database>,
    permission_expiry_s: u64,
    prompt_expiry_s: u64,
    /// `--public-url`: where people open the page; its host is the WebAuthn rp id.
    public_url: Option<String>,
    trust_proxy: bool,
    tls: Option<(PathBuf, PathBuf)>,
    max_connections: usize,
    allow_private_push: bool,
    not_now_s: u64,
}

enum Parsed {
    Run(Args),
    /// `--help` or `--version`: print this and exit 0.
    Print(String),
}

/// A failure `main` reports with exit status 2 (usage and setup) rather than 1.
#[derive(Debug)]
pub struct Setup(pub String);
impl std::fmt::Display for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Setup {}

fn setup<T>(msg: impl Into<String>) -> anyhow::Result<T> {
    Err(Setup(msg.into()).into())
}

fn parse_listen(s: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    // host:port with a name (localhost:8787).
    match s.to_socket_addrs() {
        Ok(mut it) => match it.next() {
            Some(a) => Ok(a),
            None => setup(format!("--listen {s:?}: no address")),
        },
        Err(_) => setup(format!(
            "--listen {s:?}: want HOST:PORT, e.g. 127.0.0.1:{DEFAULT_PORT} or [::1]:{DEFAULT_PORT}"
        )),
    }
}

fn parse_listen_arg(s: &str) -> Result<SocketAddr, String> {
    parse_listen(s).map_err(|e| e.to_string())
}

fn parse_public_url(s: &str) -> Result<String, String> {
    rp_id_of(s).map_err(|e| e.to_string())?;
    Ok(s.trim_end_matches('/').to_owned())
}

fn parse_args(args: &[String]) -> anyhow::Result<Parsed> {
    use clap::error::ErrorKind;
    use clap::Parser;
    let argv = std::iter::once("sp-receiver".to_owned()).chain(args.iter().cloned());
    let c = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            return Ok(Parsed::Print(e.render().to_string()))
        }
        Err(e) => {
            return setup(
                e.render()
                    .to_string()
                    .trim_end()
                    .trim_start_matches("error: "),
            )
        }
    };
    let db = match c.db.as_deref().map(db_arg).transpose() {
        Ok(db) => db,
        Err(e) => return setup(format!("--db: {e}")),
    };
    Ok(Parsed::Run(Args {
        mode: if c.init {
            Mode::Init
        } else if c.login_url {
            Mode::LoginUrl
        } else {
            Mode::Serve
        },
        listen: c.listen,
        token_file: c.token_file,
        login_token_file: c.login_token_file,
        db,
        permission_expiry_s: c.permission_expiry_s,
        prompt_expiry_s: c.prompt_expiry_s,
        public_url: c.public_url,
        trust_proxy: c.trust_proxy,
        tls: c.tls_cert.zip(c.tls_key),
        max_connections: usize::try_from(c.max_connections).unwrap_or(usize::MAX),
        allow_private_push: c.allow_private_push,
        not_now_s: c.not_now_s,
    }))
}

fn home() -> PathBuf {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"))
}

fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn xdg(var: &str, fallback: &[&str]) -> PathBuf {
    env_path(var).unwrap_or_else(|| fallback.iter().fold(home(), |p, c| p.join(c)))
}

/// `$XDG_CONFIG_HOME/sessionpipe`, else `~/.config/sessionpipe`.
pub fn config_dir() -> PathBuf {
    xdg("XDG_CONFIG_HOME", &[".config"]).join("sessionpipe")
}

pub fn default_token_file() -> PathBuf {
    config_dir().join("receiver-token")
}

pub fn default_login_token_file() -> PathBuf {
    config_dir().join("receiver-login-token")
}

/// `SESSIONPIPE_RECEIVER_DB` (read as `--db` is), else the state folder's receiver.db.
pub fn default_db() -> anyhow::Result<Database> {
    match std::env::var("SESSIONPIPE_RECEIVER_DB") {
        Ok(v) if !v.is_empty() => {
            db_arg(&v).or_else(|e| setup(format!("SESSIONPIPE_RECEIVER_DB: {e}")))
        }
        _ => Ok(Database::File(
            xdg("XDG_STATE_HOME", &[".local", "state"])
                .join("sessionpipe")
                .join("receiver.db"),
        )),
    }
}

/// A token file's path and whether it may be created: a path from a flag or variable must
/// exist; the default is created when missing.
fn token_path(flag: &Option<PathBuf>, var: &str, default: PathBuf) -> (PathBuf, bool) {
    match flag.clone().or_else(|| env_path(var)) {
        Some(p) => (p, false),
        None => (default, true),
    }
}

fn random_token() -> anyhow::Result<String> {
    use std::io::Read;
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("reading /dev/urandom")?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Reads a token file (checking its mode and content), creating it first when allowed and
/// missing. Returns the token and whether it was just created.
fn load_token(path: &Path, create: bool, what: &str) -> anyhow::Result<(String, bool)> {
    let mut created = false;
    if create && !path.exists() {
        if let Some(dir) = path.parent() {
            spwire::files::create_missing_dir(dir)
                .with_context(|| format!("cannot create the folder {}", dir.display()))?;
        }
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        match o.open(path) {
            Ok(mut f) => {
                f.write_all(format!("{}\n", random_token()?).as_bytes())
                    .with_context(|| format!("cannot write {}", path.display()))?;
                created = true;
            }
            // Another sp-receiver --init made it just now: read that one.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("cannot create the {what} file {}", path.display()))
            }
        }
    }
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return setup(format!(
                "the {what} file {} does not exist; create it (one token of at least {TOKEN_MIN} characters, chmod 600), or leave the option out to use the default",
                path.display()
            ))
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return setup(format!(
                "the {what} file {} is readable by others (mode {mode:o}); fix with: chmod 600 {}",
                path.display(),
                path.display()
            ));
        }
    }
    #[cfg(not(unix))]
    let _ = meta;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the {what} file {}", path.display()))?;
    let token = text.trim();
    if token.len() < TOKEN_MIN || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return setup(format!(
            "the {what} file {} must hold one token of at least {TOKEN_MIN} printable characters, no spaces",
            path.display()
        ));
    }
    Ok((token.to_owned(), created))
}

struct Setup2 {
    token: String,
    token_file: PathBuf,
    login: String,
    login_file: PathBuf,
    db: Database,
}

fn prepare(a: &Args) -> anyhow::Result<Setup2> {
    let (token_file, c1) = token_path(
        &a.token_file,
        "SESSIONPIPE_RECEIVER_TOKEN_FILE",
        default_token_file(),
    );
    let (login_file, c2) = token_path(
        &a.login_token_file,
        "SESSIONPIPE_RECEIVER_LOGIN_TOKEN_FILE",
        default_login_token_file(),
    );
    let (token, made1) = load_token(&token_file, c1, "bearer token")?;
    let (login, made2) = load_token(&login_file, c2, "login token")?;
    if token == login {
        return setup(format!(
            "the login token ({}) and the bearer token ({}) are the same; the page's login must differ from the senders' token",
            login_file.display(),
            token_file.display()
        ));
    }
    for (made, f, what) in [
        (made1, &token_file, "bearer token"),
        (made2, &login_file, "login token"),
    ] {
        if made {
            eprintln!("sp-receiver: created the {what} file {}", f.display());
        }
    }
    let db = match &a.db {
        Some(d) => d.clone(),
        None => default_db()?,
    };
    Ok(Setup2 {
        token,
        token_file,
        login,
        login_file,
        db,
    })
}

/// `--db`: a file path or a PostgreSQL URL. Any other `scheme://` value is refused rather
/// than taken as a folder name (`mysql://h/db` would make a folder `mysql:` here).
fn db_arg(v: &str) -> Result<Database, String> {
    let scheme = v.split_once("://").map(|(s, _)| s).filter(|s| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    });
    match scheme {
        None if v.is_empty() => Err(
            "an empty path; give the SQLite file, e.g. ~/.local/state/sessionpipe/receiver.db"
                .into(),
        ),
        None => Ok(Database::File(PathBuf::from(v))),
        Some(s) if s.eq_ignore_ascii_case("postgres") || s.eq_ignore_ascii_case("postgresql") => {
            crate::db::check_postgres_url(v).map_err(|e| without_password(v, &format!("{e:#}")))?;
            Ok(Database::Postgres(v.to_owned()))
        }
        Some(s) => Err(format!(
            "{s}:// is not a database sp-receiver knows: --db takes the path of a SQLite file or a postgres:// URL"
        )),
    }
}

/// `msg` about the URL `url` with the URL's password (what follows `user:` before the last
/// `@`, or before the first `/` when there is no `@`) never in it: a URL that fails to
/// parse is not shown anyway, but the parser's own words might quote a part of it.
fn without_password(url: &str, msg: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let auth = match rest.rsplit_once('@') {
        Some((a, _)) => a,
        None => rest.split(['/', '?']).next().unwrap_or(rest),
    };
    match auth.split_once(':').map(|(_, pw)| pw) {
        Some(pw) if !pw.is_empty() => msg.replace(pw, "***"),
        _ => msg.to_owned(),
    }
}

/// The WebAuthn rp id for a `--public-url`: its host, which must be a name (not an IP
/// address), reached over https (plain http only for localhost).
fn rp_id_of(url: &str) -> anyhow::Result<String> {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (s.to_ascii_lowercase(), r),
        None => return setup(format!("--public-url {url:?}: want https://HOST[:PORT]")),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = match authority.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => authority,
    }
    .to_ascii_lowercase();
    let named = !host.is_empty()
        && host.parse::<std::net::IpAddr>().is_err()
        && !host.starts_with('[')
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.'));
    if !named {
        return setup(format!(
            "--public-url {url:?}: the host must be a name (WebAuthn rp ids cannot be IP addresses)"
        ));
    }
    match scheme.as_str() {
        "https" => {}
        "http" if host == "localhost" => {}
        _ => {
            return setup(format!(
                "--public-url {url:?}: passkeys need https (plain http only for localhost)"
            ))
        }
    }
    Ok(host)
}

/// The page's address as people open it: `--public-url`, else `http://localhost:PORT/`
/// (not the IP: the rp id is then `localhost`, and a passkey made for it works only there).
fn public_page_url(listen: SocketAddr, public_url: Option<&str>) -> String {
    match public_url {
        Some(u) => format!("{}/", u.trim_end_matches('/')),
        None => format!("http://localhost:{}/", listen.port()),
    }
}

fn page_url(listen: SocketAddr) -> String {
    let mut a = listen;
    if a.ip().is_unspecified() {
        a.set_ip(if a.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    format!("http://{a}/")
}

fn fragment_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn stamp() -> String {
    super::validate::format_ms_timestamp(time::OffsetDateTime::now_utc())
}

/// Whether the server answers: `GET /healthz` over loopback gets a 200 (the database answers
/// too). Over TLS, a loopback connection being accepted is what is checked.
fn answers_healthz(addr: SocketAddr, tls: bool) -> bool {
    use std::io::Read;
    let mut a = addr;
    if a.ip().is_unspecified() {
        a.set_ip(if a.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&a, Duration::from_secs(5)) else {
        return false;
    };
    if tls {
        return true;
    }
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
    let req = format!("GET /healthz HTTP/1.1\r\nhost: {a}\r\nconnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

/// Under systemd with `WatchdogSec=`: pings the watchdog at half its interval, but only while
/// the server answers `/healthz`, so a server that stops answering is restarted.
fn start_watchdog(addr: SocketAddr, tls: bool, stop: Arc<AtomicBool>) {
    let mut usec = 0;
    if !sd_notify::watchdog_enabled(false, &mut usec) || usec == 0 {
        return;
    }
    let every = Duration::from_micros(usec / 2).max(Duration::from_millis(500));
    let spawned = std::thread::Builder::new()
        .name("sp-receiver-watchdog".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if answers_healthz(addr, tls) {
                    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Watchdog]);
                } else {
                    tracing::error!("watchdog: GET /healthz over loopback did not answer 200");
                }
                std::thread::sleep(every);
            }
        });
    if let Err(e) = spawned {
        tracing::error!("cannot start the watchdog thread: {e}");
    }
}

/// Logs (limits hit, errors) go to stderr, which the systemd unit's journal keeps.
fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(match std::env::var("SESSIONPIPE_LOG").as_deref() {
            Ok("error") => tracing::Level::ERROR,
            Ok("warn") => tracing::Level::WARN,
            Ok("debug") => tracing::Level::DEBUG,
            _ => tracing::Level::INFO,
        })
        .with_ansi(false)
        .with_target(false)
        .try_init();
}

/// Raises the soft open-file limit to the hard one (at most 65536): each connection costs a
/// descriptor, and the connection cap is sized under this limit.
fn raise_nofile() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            let want = lim.rlim_max.min(65_536);
            if lim.rlim_cur < want {
                lim.rlim_cur = want;
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            }
        }
    }
}

/// The options `sp-receiver` serves with: its tokens and database, the page's settings,
/// signed control on (its rp id from `--public-url`, else localhost), no test door, no
/// request log.
fn serve_options(a: &Args, s: &Setup2) -> anyhow::Result<ReceiverOptions> {
    Ok(ReceiverOptions {
        token: s.token.clone(),
        max_tier: 3,
        login_token: Some(s.login.clone()),
        permission_expiry_s: a.permission_expiry_s,
        prompt_expiry_s: a.prompt_expiry_s,
        test_door: false,
        request_log: false,
        db: Some(s.db.clone()),
        rp_id: Some(match &a.public_url {
            Some(u) => rp_id_of(u)?,
            None => "localhost".to_owned(),
        }),
        public_url: a.public_url.clone(),
        trust_proxy: a.trust_proxy,
        tls: a.tls.clone(),
        max_connections: a.max_connections,
        allow_private_push: a.allow_private_push,
        not_now_s: a.not_now_s,
        ..ReceiverOptions::default()
    })
}

/// Runs the command line; errors wrapping [`Setup`] are usage or setup problems.
pub fn run(args: &[String]) -> anyhow::Result<()> {
    let a = match parse_args(args)? {
        Parsed::Print(text) => {
            print!("{text}");
            return Ok(());
        }
        Parsed::Run(a) => a,
    };
    let s = prepare(&a)?;
    match a.mode {
        Mode::LoginUrl => {
            println!(
                "{}#login={}",
                public_page_url(a.listen, a.public_url.as_deref()),
                fragment_encode(&s.login)
            );
            return Ok(());
        }
        Mode::Init => {
            drop(super::db::open(&s.db).map_err(|e| Setup(format!("{e:#}")))?);
            println!("bearer token: {}", s.token_file.display());
            println!("login token:  {}", s.login_file.display());
            println!("database:     {}", s.db);
            println!(
                "page:         {}",
                public_page_url(a.listen, a.public_url.as_deref())
            );
            return Ok(());
        }
        Mode::Serve => {}
    }

    init_logging();
    raise_nofile();
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let opts = serve_options(&a, &s)?;
    let receiver = match Receiver::start_on(a.listen, opts) {
        Ok(r) => r,
        Err(e) if e.chain().any(|c| c.to_string().contains("database")) => {
            return setup(format!("{e:#}"))
        }
        Err(e) => return Err(e),
    };
    let addr = receiver.addr();
    if !addr.ip().is_loopback() && a.tls.is_none() {
        eprintln!(
            "sp-receiver: {addr} is reachable from other machines; the page needs the login token, but this is plain HTTP: use --tls-cert/--tls-key or put a TLS proxy in front of it"
        );
    }
    let scheme = if a.tls.is_some() { "https" } else { "http" };
    eprintln!(
        "{} sp-receiver {}: listening on {scheme}://{addr} (database {}, bearer token {}, login token {})",
        stamp(),
        env!("CARGO_PKG_VERSION"),
        s.db,
        s.token_file.display(),
        s.login_file.display()
    );
    eprintln!(
        "{} sp-receiver: page at {} (listening at {})",
        stamp(),
        public_page_url(addr, a.public_url.as_deref()),
        page_url(addr)
    );
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
    start_watchdog(addr, a.tls.is_some(), Arc::clone(&stop));
    let mut last_sweep = Instant::now() - SWEEP_EVERY;
    while !stop.load(Ordering::Relaxed) {
        if last_sweep.elapsed() >= SWEEP_EVERY {
            last_sweep = Instant::now();
            match receiver.sweep(KEEP) {
                Ok(0) => {}
                Ok(n) => eprintln!("{} sp-receiver: swept {n} old row(s)", stamp()),
                Err(e) => eprintln!("{} sp-receiver: sweep failed: {e:#}", stamp()),
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("{} sp-receiver: stopping", stamp());
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    receiver.stop();
    Ok(())
}

/// The exit status for an error from [`run`]: 2 for usage and setup, 1 otherwise.
pub fn exit_code(e: &anyhow::Error) -> ExitCode {
    if e.downcast_ref::<Setup>().is_some() {
        ExitCode::from(2)
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses() {
        let Parsed::Run(a) = parse_args(&args(&[
            "--listen",
            "0.0.0.0:9000",
            "--db=/x.db",
            "--prompt-expiry-s",
            "60",
        ]))
        .unwrap() else {
            panic!()
        };
        assert_eq!(a.listen, "0.0.0.0:9000".parse().unwrap());
        assert_eq!(a.db, Some(Database::File(PathBuf::from("/x.db"))));
        assert_eq!(a.prompt_expiry_s, 60);
        assert_eq!(a.permission_expiry_s, 120);
        assert!(matches!(
            parse_args(&args(&["--help"])).unwrap(),
            Parsed::Print(_)
        ));
        for bad in [
            &["--nope"][..],
            &["--listen"],
            &["--listen", "nohost"],
            &["--prompt-expiry-s", "0"],
            &["--tls-cert", "/c.pem"],
            &["--init", "--login-url"],
        ] {
            let e = parse_args(&args(bad)).err().unwrap();
            assert!(e.downcast_ref::<Setup>().is_some(), "{bad:?}");
        }
    }

    #[test]
    fn urls() {
        assert_eq!(
            page_url("0.0.0.0:8787".parse().unwrap()),
            "http://127.0.0.1:8787/"
        );
        assert_eq!(fragment_encode("a b/c"), "a%20b%2Fc");
        assert_eq!(
            public_page_url("127.0.0.1:8787".parse().unwrap(), None),
            "http://localhost:8787/"
        );
        assert_eq!(
            rp_id_of("https://Pipe.example.org:8443/x").unwrap(),
            "pipe.example.org"
        );
        assert_eq!(rp_id_of("http://localhost:8787").unwrap(), "localhost");
        for bad in [
            "http://pipe.example.org",
            "https://10.0.0.1",
            "https://[::1]:8",
            "pipe.org",
        ] {
            assert!(rp_id_of(bad).is_err(), "{bad}");
        }
    }
}
