//! The receiver under load (issue 13): the real `sp-receiver` binary with N machines each
//! holding a control long poll at once, while a phone asks for the page.
//!
//! ```sh
//! cargo bench -p sessionpipe-receiver --bench receiver_load                    # 2,000 machines
//! cargo bench -p sessionpipe-receiver --bench receiver_load -- --machines 500
//! SP_RECEIVER_BIN=/path/to/sp-receiver cargo bench -p sessionpipe-receiver --bench receiver_load
//! ```
//!
//! It measures, before the load and with every machine's poll held:
//! * the page's latency, p50/p99 over fresh connections: `GET /` (the page), `GET
//!   /page/api/state` (both with the login token as a bearer, as a script would) and `GET
//!   /.well-known/sessionpipe`;
//! * the receiver's memory (`VmRSS`, `VmHWM`) and threads, from `/proc/PID/status`;
//! * enqueue → poll answer: a prompt queued through the page's enqueue action
//!   (`POST /page/api/enqueue`) for one machine's session, timed from just before the request
//!   until that machine's held poll has read the answer carrying it (the machine then acks
//!   it and polls again, as sp-sync does).
//!
//! With `--push` it measures telling the person instead (issue 14): the receiver pushes to
//! a fake push service on loopback (plain HTTP, which the receiver allows to loopback only),
//! with the person away:
//! * `attention.needed` → push: from just before the event's `POST` until the push service
//!   has read the whole push request, one device subscribed;
//! * with `--devices` (1,000) subscribed: each fan-out's time, from the event's `POST` until
//!   the push service has read the push for every device, and the page's latency (`GET /`,
//!   `GET /page/api/state`, fresh connections) while the fan-outs run, against idle.
//!
//! ```sh
//! cargo bench -p sessionpipe-receiver --bench receiver_load -- --push
//! cargo bench -p sessionpipe-receiver --bench receiver_load -- --push --devices 200 --fanouts 4
//! ```
//!
//! With `--postgres ADMIN_URL` (issue 29) the load runs on two receivers on one PostgreSQL
//! instead: a fresh database made on that cluster (`scripts/pg-cluster.sh start DIR` prints
//! such a URL), machine I polling receiver I mod 2, and each sample queued through the other
//! receiver than the one holding that machine's poll (queued on B → answered on A, the wake
//! crossing over `LISTEN`/`NOTIFY`); it reports both receivers' memory.
//!
//! ```sh
//! cargo bench -p sessionpipe-receiver --bench receiver_load -- --postgres "$(scripts/pg-cluster.sh start /tmp/pg)"
//! ```
//!
//! A machine is one thread (short stack) with one keep-alive connection polling
//! `GET {control}?session=codex:load-I&wait=25` with the shared bearer token, re-polling at
//! once after each answer: the unsigned per-session poll, which is the same hold
//! (`longpoll::poll`) the signed per-machine poll uses. It is a benchmark, not a test: it
//! prints figures and fails only when the receiver or the load cannot be set up.
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};

const TOKEN: &str = "load-bench-bearer-token-0123456789";
const LOGIN: &str = "load-bench-login-token-9876543210";
/// The receiver's `control.wait_max_s`; each machine asks for all of it.
const WAIT_S: u64 = 25;
/// A machine's thread stack: it only formats short requests and reads short answers.
const MACHINE_STACK: usize = 128 * 1024;
/// Cap on any one answer a client here reads.
const MAX_BODY: usize = 4 << 20;

struct Opts {
    machines: usize,
    page_requests: usize,
    samples: usize,
    bin: PathBuf,
    /// `--push`: the push measurements instead of the held polls.
    push: bool,
    devices: usize,
    push_samples: usize,
    fanouts: usize,
    /// `--postgres ADMIN_URL`: two receivers on a fresh database of that cluster.
    postgres: Option<String>,
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("receiver_load: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn parse_opts() -> anyhow::Result<Opts> {
    let mut o = Opts {
        machines: 2000,
        page_requests: 200,
        samples: 100,
        bin: std::env::var_os("SP_RECEIVER_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_sp-receiver"))),
        push: false,
        devices: 1000,
        push_samples: 200,
        fanouts: 10,
        postgres: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut num = |name: &str| -> anyhow::Result<usize> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|n| *n > 0)
                .with_context(|| format!("{name} takes a positive whole number"))
        };
        match a.as_str() {
            "--machines" => o.machines = num("--machines")?,
            "--page-requests" => o.page_requests = num("--page-requests")?,
            "--samples" => o.samples = num("--samples")?,
            "--devices" => o.devices = num("--devices")?,
            "--push-samples" => o.push_samples = num("--push-samples")?,
            "--fanouts" => o.fanouts = num("--fanouts")?,
            "--push" => o.push = true,
            "--postgres" => {
                o.postgres = Some(
                    it.next()
                        .filter(|u| u.starts_with("postgres://") || u.starts_with("postgresql://"))
                        .context("--postgres takes a postgres:// URL (the admin database)")?,
                )
            }
            // cargo bench passes --bench to every bench target.
            "--bench" => {}
            other => bail!(
                "unknown argument {other:?}; takes --machines N (2000), --page-requests N (200), --samples N (100), \
                 --postgres ADMIN_URL (two receivers on PostgreSQL), \
                 or --push with --devices N (1000), --push-samples N (200), --fanouts N (10), --page-requests N"
            ),
        }
    }
    if o.samples > o.machines {
        o.samples = o.machines;
    }
    Ok(o)
}

/// Raises the soft open-files limit to what the load needs (the receiver, started after,
/// inherits it): one socket per machine on each side, plus room.
fn raise_nofile(machines: usize) -> anyhow::Result<u64> {
    let want = (machines as u64) * 2 + 512;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        bail!("getrlimit: {}", std::io::Error::last_os_error());
    }
    if lim.rlim_cur >= want {
        return Ok(lim.rlim_cur);
    }
    if lim.rlim_max < want {
        bail!(
            "{machines} machines need {want} open files and the hard limit is {}: raise it (ulimit -Hn) or pass --machines",
            lim.rlim_max
        );
    }
    lim.rlim_cur = want;
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        bail!("setrlimit: {}", std::io::Error::last_os_error());
    }
    Ok(want)
}

// ---------------------------------------------------------------------------------------
// A small HTTP/1.1 client over one connection
// ---------------------------------------------------------------------------------------

struct Conn {
    r: BufReader<TcpStream>,
    host: String,
}

struct Answer {
    status: u16,
    body: Vec<u8>,
    close: bool,
}

impl Conn {
    fn open(addr: &str, host: &str) -> std::io::Result<Conn> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        // Longer than any hold, so a stuck receiver shows as an error, not a hang.
        s.set_read_timeout(Some(Duration::from_secs(WAIT_S + 35)))?;
        Ok(Conn {
            r: BufReader::new(s),
            host: host.to_owned(),
        })
    }

    fn send(
        &mut self,
        method: &str,
        path: &str,
        auth: &str,
        body: Option<&Value>,
    ) -> std::io::Result<()> {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let ctype = if body.is_empty() {
            ""
        } else {
            "content-type: application/json\r\n"
        };
        let req = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {auth}\r\n{ctype}content-length: {}\r\n\r\n{body}",
            self.host,
            body.len()
        );
        self.r.get_mut().write_all(req.as_bytes())
    }

    fn read(&mut self) -> std::io::Result<Answer> {
        let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_owned());
        let mut line = String::new();
        if self.r.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("status line"))?;
        let (mut len, mut chunked, mut close) = (None, false, false);
        loop {
            line.clear();
            if self.r.read_line(&mut line)? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_ascii_lowercase());
                match k.as_str() {
                    "content-length" => len = v.parse::<usize>().ok(),
                    "transfer-encoding" => chunked = v.contains("chunked"),
                    "connection" => close = v.contains("close"),
                    _ => {}
                }
            }
        }
        let mut body = Vec::new();
        if status == 204 || status == 304 {
        } else if chunked {
            loop {
                line.clear();
                self.r.read_line(&mut line)?;
                let n = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                    .map_err(|_| bad("chunk size"))?;
                if n == 0 {
                    line.clear();
                    self.r.read_line(&mut line)?;
                    break;
                }
                if body.len() + n > MAX_BODY {
                    return Err(bad("answer too long"));
                }
                let at = body.len();
                body.resize(at + n + 2, 0);
                self.r.read_exact(&mut body[at..])?;
                body.truncate(at + n);
            }
        } else if let Some(n) = len {
            if n > MAX_BODY {
                return Err(bad("answer too long"));
            }
            body.resize(n, 0);
            self.r.read_exact(&mut body)?;
        } else {
            (&mut self.r).take(MAX_BODY as u64).read_to_end(&mut body)?;
            close = true;
        }
        Ok(Answer {
            status,
            body,
            close,
        })
    }
}

/// One request on a fresh connection, as a phone's first request is.
fn once(
    addr: &str,
    host: &str,
    method: &str,
    path: &str,
    auth: &str,
    body: Option<&Value>,
) -> anyhow::Result<Answer> {
    let mut c = Conn::open(addr, host)?;
    c.send(method, path, auth, body)?;
    Ok(c.read()?)
}

// ---------------------------------------------------------------------------------------
// The receiver
// ---------------------------------------------------------------------------------------

struct Receiver {
    child: Child,
    addr: String,
    /// `localhost:PORT`: the host the page is opened as by default (`--public-url` unset).
    host: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    fn start(bin: &Path, dir: &Path) -> anyhow::Result<Receiver> {
        Receiver::start_on(bin, dir, dir.join("receiver.db").as_os_str())
    }

    /// `start` with the database `db`: a SQLite file or a `postgres://` URL.
    fn start_on(bin: &Path, dir: &Path, db: &std::ffi::OsStr) -> anyhow::Result<Receiver> {
        for (name, t) in [("token", TOKEN), ("login-token", LOGIN)] {
            let p = dir.join(name);
            std::fs::write(&p, format!("{t}\n"))?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))?;
        }
        let mut child = Command::new(bin)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", dir)
            .args(["--listen", "127.0.0.1:0", "--token-file"])
            .arg(dir.join("token"))
            .arg("--login-token-file")
            .arg(dir.join("login-token"))
            .arg("--db")
            .arg(db)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&log);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_owned());
                }
                let mut l = sink.lock().unwrap();
                // Keep the first lines and the last few hundred.
                if l.len() >= 400 {
                    l.remove(20);
                }
                l.push(line);
            }
        });
        let Ok(addr) = rx.recv_timeout(Duration::from_secs(20)) else {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "sp-receiver did not start: {}",
                log.lock().unwrap().join("\n")
            );
        };
        let port = addr.rsplit(':').next().unwrap_or("").to_owned();
        Ok(Receiver {
            child,
            addr,
            host: format!("localhost:{port}"),
            log,
        })
    }

    fn status(&self) -> Mem {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let field = |name: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        Mem {
            rss_kib: field("VmRSS:"),
            hwm_kib: field("VmHWM:"),
            threads: field("Threads:"),
        }
    }

    /// The receiver's CPU time so far (utime + stime, in clock ticks).
    fn cpu_ticks(&self) -> u64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // Fields after the command name, which is in parentheses and may hold spaces.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<u64> = rest
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        // utime and stime are fields 14 and 15 of stat; 12 and 13 after the name.
        f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)
    }

    /// Waits until the receiver has used no CPU for `quiet` (it has taken up every request
    /// sent so far), at most `limit`; returns how long that took.
    fn settle(&self, quiet: Duration, limit: Duration) -> Duration {
        let t = Instant::now();
        let mut last = self.cpu_ticks();
        let mut since = Instant::now();
        while t.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(100));
            let now = self.cpu_ticks();
            if now != last {
                last = now;
                since = Instant::now();
            } else if since.elapsed() >= quiet {
                break;
            }
        }
        t.elapsed()
    }

    fn stop(mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let end = Instant::now() + Duration::from_secs(15);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Clone, Copy)]
struct Mem {
    rss_kib: u64,
    hwm_kib: u64,
    threads: u64,
}

// ---------------------------------------------------------------------------------------
// Machines
// ---------------------------------------------------------------------------------------

#[derive(Default)]
struct Counters {
    /// Polls written and not yet answered.
    holding: AtomicUsize,
    /// Machines that have written their first poll.
    started: AtomicUsize,
    answers_200: AtomicUsize,
    answers_204: AtomicUsize,
    other: AtomicUsize,
    errors: AtomicUsize,
}

fn now_stamp() -> String {
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    time::OffsetDateTime::now_utc()
        .format(&fmt)
        .unwrap_or_default()
}

/// One machine: poll, read, ack what came, poll again, until `stop`.
fn machine(
    i: usize,
    addr: String,
    host: String,
    c: Arc<Counters>,
    stop: Arc<AtomicBool>,
    got: mpsc::Sender<(String, Instant)>,
) {
    let path = format!("/api/sessionpipe/v1/control?session=codex:load-{i}&wait={WAIT_S}");
    let mut first = true;
    let mut conn: Option<Conn> = None;
    let mut backoff = Duration::from_millis(50);
    while !stop.load(Ordering::Relaxed) {
        let mut cn = match conn.take() {
            Some(cn) => cn,
            None => match Conn::open(&addr, &host) {
                Ok(cn) => cn,
                Err(_) => {
                    c.errors.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    continue;
                }
            },
        };
        if cn.send("GET", &path, TOKEN, None).is_err() {
            c.errors.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        c.holding.fetch_add(1, Ordering::SeqCst);
        if first {
            first = false;
            c.started.fetch_add(1, Ordering::SeqCst);
        }
        let a = cn.read();
        c.holding.fetch_sub(1, Ordering::SeqCst);
        let a = match a {
            Ok(a) => a,
            Err(_) => {
                if !stop.load(Ordering::Relaxed) {
                    c.errors.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(backoff);
                continue;
            }
        };
        let at = Instant::now();
        backoff = Duration::from_millis(50);
        match a.status {
            200 => {
                c.answers_200.fetch_add(1, Ordering::Relaxed);
                let ids: Vec<String> = serde_json::from_slice::<Value>(&a.body)
                    .ok()
                    .and_then(|v| v["messages"].as_array().cloned())
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|m| m["id"].as_str().map(str::to_owned))
                    .collect();
                for id in &ids {
                    let _ = got.send((id.clone(), at));
                }
                let acks: Vec<Value> = ids
                    .iter()
                    .map(|id| json!({"id": id, "outcome": "delivered", "at": now_stamp()}))
                    .collect();
                let ok = cn
                    .send(
                        "POST",
                        "/api/sessionpipe/v1/control/ack",
                        TOKEN,
                        Some(&json!({ "acks": acks })),
                    )
                    .and_then(|_| cn.read())
                    .is_ok_and(|r| r.status == 202);
                if !ok {
                    c.errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            }
            204 => {
                c.answers_204.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                c.other.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(backoff);
            }
        }
        if !a.close {
            conn = Some(cn);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Measuring
// ---------------------------------------------------------------------------------------

struct Lat {
    p50: f64,
    p99: f64,
    max: f64,
    n: usize,
    failed: usize,
}

fn lat(mut v: Vec<Duration>, failed: usize) -> Lat {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let at = |p: usize| v.get((v.len() * p / 100).min(v.len().saturating_sub(1)));
    Lat {
        p50: at(50).map(|d| ms(*d)).unwrap_or(f64::NAN),
        p99: at(99).map(|d| ms(*d)).unwrap_or(f64::NAN),
        max: v.last().map(|d| ms(*d)).unwrap_or(f64::NAN),
        n: v.len(),
        failed,
    }
}

const PAGE_PATHS: [(&str, &str); 3] = [
    ("GET / (the page)", "/"),
    ("GET /page/api/state", "/page/api/state"),
    ("GET /.well-known/sessionpipe", "/.well-known/sessionpipe"),
];

/// `n` rounds of the page's requests, interleaved, each on a fresh connection.
fn page_latency(r: &Receiver, n: usize) -> Vec<Lat> {
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); PAGE_PATHS.len()];
    let mut failed = vec![0; PAGE_PATHS.len()];
    for _ in 0..n {
        for (k, (_, path)) in PAGE_PATHS.iter().enumerate() {
            let t = Instant::now();
            match once(&r.addr, &r.host, "GET", path, LOGIN, None) {
                Ok(a) if a.status == 200 => times[k].push(t.elapsed()),
                _ => failed[k] += 1,
            }
        }
    }
    times
        .into_iter()
        .zip(failed)
        .map(|(t, f)| lat(t, f))
        .collect()
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> anyhow::Result<()> {
    let end = Instant::now() + limit;
    while !f() {
        if Instant::now() > end {
            bail!("{what}: not within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn commit() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let head = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    // The receiver's own last change, which is what the binary is built from.
    let src = git(&["log", "-1", "--format=%h %cs", "--abbrev=12", "--", "src"])
        .unwrap_or_else(|| "unknown".into());
    let dirty = git(&["status", "--porcelain", "--", "src"]).is_some_and(|s| !s.is_empty());
    format!(
        "receiver source at {src}{}, checkout at {head}",
        if dirty { " + uncommitted changes" } else { "" }
    )
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

fn run() -> anyhow::Result<()> {
    let o = parse_opts()?;
    let nofile = raise_nofile(if o.push { 0 } else { o.machines })?;
    let dir = std::env::temp_dir().join(format!("sp-receiver-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = if o.push {
        measure_push(&o, &dir)
    } else if let Some(admin) = &o.postgres {
        measure_two(&o, &dir, nofile, admin)
    } else {
        measure(&o, &dir, nofile)
    };
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Where the receiver binary came from, for the report's first line.
fn built_from() -> String {
    if std::env::var_os("SP_RECEIVER_BIN").is_some() {
        "SP_RECEIVER_BIN: built elsewhere, say from which commit".to_owned()
    } else {
        commit()
    }
}

/// The receivers under load and the machines polling them: machine I polls receiver
/// I mod (how many there are), each with its poll held.
struct Fleet {
    rs: Vec<Receiver>,
    c: Arc<Counters>,
    stop: Arc<AtomicBool>,
    /// Each message id a machine's poll read, and when.
    rx: mpsc::Receiver<(String, Instant)>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// From the first machine started until every machine held a poll.
    ramp: Duration,
    /// The fewest polls seen held while measuring.
    min_held: AtomicUsize,
}

impl Fleet {
    /// Starts `o.machines` machines on `rs` and waits (2 min at most) until each holds a
    /// poll; on failure stops the receivers and says why, with their logs.
    fn start(o: &Opts, rs: Vec<Receiver>) -> anyhow::Result<Fleet> {
        let c = Arc::new(Counters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel::<(String, Instant)>();
        let ramp = Instant::now();
        let mut threads = Vec::with_capacity(o.machines);
        for i in 0..o.machines {
            let r = &rs[i % rs.len()];
            let (addr, host, c, stop, tx) = (
                r.addr.clone(),
                r.host.clone(),
                Arc::clone(&c),
                Arc::clone(&stop),
                tx.clone(),
            );
            threads.push(
                std::thread::Builder::new()
                    .name(format!("machine-{i}"))
                    .stack_size(MACHINE_STACK)
                    .spawn(move || machine(i, addr, host, c, stop, tx))
                    .context("starting a machine thread")?,
            );
        }
        drop(tx);
        let setup = wait_for(
            "every machine holding a poll",
            Duration::from_secs(120),
            || {
                c.started.load(Ordering::SeqCst) == o.machines
                    && c.holding.load(Ordering::SeqCst) == o.machines
            },
        );
        if let Err(e) = setup {
            stop.store(true, Ordering::SeqCst);
            let held = c.holding.load(Ordering::SeqCst);
            let errors = c.errors.load(Ordering::SeqCst);
            let logs: Vec<String> = rs
                .iter()
                .map(|r| r.log.lock().unwrap().join("\n"))
                .collect();
            let whose = if rs.len() == 1 {
                "receiver log"
            } else {
                "receivers' logs"
            };
            for r in rs {
                r.stop();
            }
            bail!(
                "{e}: {held} holding, {errors} client errors; {whose}:\n{}",
                logs.join("\n---\n")
            );
        }
        Ok(Fleet {
            rs,
            c,
            stop,
            rx,
            threads,
            ramp: ramp.elapsed(),
            min_held: AtomicUsize::new(o.machines),
        })
    }

    /// Notes how many polls are held now (for the fewest held while measuring).
    fn note_held(&self) {
        self.min_held
            .fetch_min(self.c.holding.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    /// `o.samples` prompts, sample K for machine `machine(K)` queued through receiver
    /// `through(I)` of that machine I: enqueue → that machine's poll answer, and each
    /// enqueue's round trip.
    fn enqueue_samples(
        &self,
        o: &Opts,
        machine: impl Fn(usize) -> usize,
        through: impl Fn(usize) -> usize,
    ) -> (Lat, Lat) {
        let mut e2e = Vec::new();
        let mut enqueue_rt = Vec::new();
        let mut failed = 0;
        let mut early: HashMap<String, Instant> = HashMap::new();
        for k in 0..o.samples {
            let i = machine(k);
            let r = &self.rs[through(i)];
            let body = json!({"session": format!("codex:load-{i}"), "message": {"kind": "prompt", "text": format!("load sample {k}")}});
            let t0 = Instant::now();
            let a = once(
                &r.addr,
                &r.host,
                "POST",
                "/page/api/enqueue",
                LOGIN,
                Some(&body),
            );
            let t1 = Instant::now();
            let id = match a {
                Ok(a) if a.status == 200 => serde_json::from_slice::<Value>(&a.body)
                    .ok()
                    .and_then(|v| v["id"].as_str().map(str::to_owned)),
                _ => None,
            };
            let Some(id) = id else {
                failed += 1;
                continue;
            };
            enqueue_rt.push(t1 - t0);
            let arrived = early.remove(&id).or_else(|| loop {
                match self.rx.recv_timeout(Duration::from_secs(WAIT_S + 5)) {
                    Ok((got, at)) if got == id => break Some(at),
                    Ok((got, at)) => {
                        early.insert(got, at);
                    }
                    Err(_) => break None,
                }
            });
            match arrived {
                Some(at) => e2e.push(at.saturating_duration_since(t0)),
                None => failed += 1,
            }
            self.note_held();
        }
        (lat(e2e, failed), lat(enqueue_rt, 0))
    }

    /// Stops the machines and the receivers (which ends every held poll); the machines'
    /// answer counts: with messages, empty (204), other, client errors.
    fn finish(self) -> [usize; 4] {
        self.stop.store(true, Ordering::SeqCst);
        let counts = [
            self.c.answers_200.load(Ordering::SeqCst),
            self.c.answers_204.load(Ordering::SeqCst),
            self.c.other.load(Ordering::SeqCst),
            self.c.errors.load(Ordering::SeqCst),
        ];
        for r in self.rs {
            r.stop();
        }
        for t in self.threads {
            let _ = t.join();
        }
        counts
    }
}

fn print_machine_side(counts: [usize; 4]) {
    println!(
        "machine side: {} answers with messages, {} empty (204), {} other, {} client errors",
        counts[0], counts[1], counts[2], counts[3]
    );
}

/// The enqueue → poll answer row of the "under load" table, with its header.
fn print_e2e(what: &str, e2e: &Lat) {
    println!("| under load | p50 ms | p99 ms | max ms | n |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    println!(
        "| {what} | {:.2} | {:.2} | {:.2} | {}{} |",
        e2e.p50,
        e2e.p99,
        e2e.max,
        e2e.n,
        if e2e.failed > 0 {
            format!(" ({} failed)", e2e.failed)
        } else {
            String::new()
        }
    );
}

fn print_mem_header() {
    println!("| receiver | VmRSS MiB | VmHWM MiB | threads |");
    println!("| --- | ---: | ---: | ---: |");
}

fn print_mem_row(name: &str, m: &Mem) {
    println!(
        "| {name} | {} | {} | {} |",
        mib(m.rss_kib),
        mib(m.hwm_kib),
        m.threads
    );
}

fn measure(o: &Opts, dir: &Path, nofile: u64) -> anyhow::Result<()> {
    println!("receiver_load: {} ({})", o.bin.display(), built_from());
    println!(
        "machines {}, page rounds {}, enqueue samples {}, open files {nofile}",
        o.machines, o.page_requests, o.samples
    );
    let r = Receiver::start(&o.bin, dir)?;
    // Warm up: the first answers fill caches and prepare statements.
    let _ = page_latency(&r, 10);
    let idle = page_latency(&r, o.page_requests);
    let idle_mem = r.status();

    let fleet = Fleet::start(o, vec![r])?;
    let r = &fleet.rs[0];
    // Every poll is written; wait until the receiver has taken them all up (it goes quiet).
    let settled = r.settle(Duration::from_millis(500), Duration::from_secs(60));
    let load_mem = r.status();
    let loaded = page_latency(r, o.page_requests);
    fleet.note_held();

    // Enqueue → poll answer, spread over the machines.
    let (e2e, enqueue_rt) = fleet.enqueue_samples(o, |k| k * (o.machines / o.samples), |_| 0);
    let end_mem = fleet.rs[0].status();
    let (ramp, min_held) = (fleet.ramp, fleet.min_held.load(Ordering::SeqCst));
    let counts = fleet.finish();

    println!();
    println!(
        "all {} machines had sent a poll after {:.1} s, the receiver was quiet {:.1} s later; at least {} held while measuring",
        o.machines,
        ramp.as_secs_f64(),
        settled.as_secs_f64(),
        min_held
    );
    print_machine_side(counts);
    println!();
    println!("| request (fresh connection) | idle p50 ms | idle p99 ms | under load p50 ms | under load p99 ms | under load max ms |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for ((name, _), (i, l)) in PAGE_PATHS.iter().zip(idle.iter().zip(&loaded)) {
        let fails = if i.failed + l.failed > 0 {
            format!(" ({} failed idle, {} under load)", i.failed, l.failed)
        } else {
            String::new()
        };
        println!(
            "| {name}{fails} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            i.p50, i.p99, l.p50, l.p99, l.max
        );
    }
    println!();
    print_e2e("enqueue → the held poll reads the answer", &e2e);
    println!(
        "| `POST /page/api/enqueue` round trip | {:.2} | {:.2} | {:.2} | {} |",
        enqueue_rt.p50, enqueue_rt.p99, enqueue_rt.max, enqueue_rt.n
    );
    println!();
    print_mem_header();
    for (name, m) in [
        ("idle, after the idle page requests", idle_mem),
        ("every machine holding a poll", load_mem),
        ("after the enqueue samples", end_mem),
    ] {
        print_mem_row(name, &m);
    }
    let per = (load_mem.rss_kib.saturating_sub(idle_mem.rss_kib)) as f64 / o.machines as f64;
    println!();
    println!("{per:.1} KiB of RSS per held poll");
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Two receivers on one PostgreSQL (issue 29): `--postgres ADMIN_URL`
// ---------------------------------------------------------------------------------------

/// A fresh database on the cluster at `admin` (the admin database's URL); its URL.
fn fresh_database(admin: &str) -> anyhow::Result<String> {
    use r2d2_postgres::postgres::{Client, NoTls};
    let name = format!("load_{}", std::process::id());
    let mut c = Client::connect(admin, NoTls).with_context(|| format!("connecting to {admin}"))?;
    c.batch_execute(&format!("CREATE DATABASE {name}"))
        .context("creating the bench's database")?;
    // The admin URL names its database in the path: `…/postgres?host=…` or `…/postgres`.
    let (head, query) = admin.split_once('?').unwrap_or((admin, ""));
    let base = head
        .rsplit_once('/')
        .map(|(b, _)| b)
        .context("a URL with a database")?;
    Ok(if query.is_empty() {
        format!("{base}/{name}")
    } else {
        format!("{base}/{name}?{query}")
    })
}

/// How many connections the database `db` has open now (both receivers' pools and listeners).
fn connections(admin: &str, db: &str) -> String {
    use r2d2_postgres::postgres::{Client, NoTls};
    let name = db
        .split('?')
        .next()
        .and_then(|h| h.rsplit('/').next())
        .unwrap_or("");
    Client::connect(admin, NoTls)
        .and_then(|mut c| {
            c.query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1",
                &[&name],
            )
        })
        .map(|r| r.get::<_, i64>(0).to_string())
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

fn measure_two(o: &Opts, dir: &Path, nofile: u64, admin: &str) -> anyhow::Result<()> {
    println!(
        "receiver_load --postgres: {} ({})",
        o.bin.display(),
        built_from()
    );
    println!(
        "two receivers on one PostgreSQL; machines {} (half on each), enqueue samples {}, open files {nofile}",
        o.machines, o.samples
    );
    let db = fresh_database(admin)?;
    let mut rs = Vec::new();
    for name in ["a", "b"] {
        let d = dir.join(name);
        std::fs::create_dir_all(&d)?;
        rs.push(Receiver::start_on(&o.bin, &d, db.as_ref())?);
    }
    let _ = page_latency(&rs[0], 10);
    let _ = page_latency(&rs[1], 10);
    let idle_mem: Vec<Mem> = rs.iter().map(Receiver::status).collect();
    let idle_conns = connections(admin, &db);

    let fleet = Fleet::start(o, rs)?;
    let rs = &fleet.rs;
    let settled = rs[0].settle(Duration::from_millis(500), Duration::from_secs(60))
        + rs[1].settle(Duration::from_millis(500), Duration::from_secs(60));
    let load_mem: Vec<Mem> = rs.iter().map(Receiver::status).collect();
    let load_conns = connections(admin, &db);
    fleet.note_held();

    // Each sample queued through the receiver that does not hold that machine's poll.
    let (e2e, _) = fleet.enqueue_samples(
        o,
        |k| (k * (o.machines / o.samples) + k) % o.machines,
        |i| (i + 1) % 2,
    );
    let end_mem: Vec<Mem> = fleet.rs.iter().map(Receiver::status).collect();
    let (ramp, min_held) = (fleet.ramp, fleet.min_held.load(Ordering::SeqCst));
    let counts = fleet.finish();

    println!();
    println!(
        "all {} machines had sent a poll after {:.1} s, both receivers were quiet {:.1} s later; at least {} held while measuring",
        o.machines,
        ramp.as_secs_f64(),
        settled.as_secs_f64(),
        min_held
    );
    print_machine_side(counts);
    println!("connections to the database: {idle_conns} idle, {load_conns} with every poll held");
    println!();
    print_e2e(
        "queued on one receiver → the other's held poll reads the answer",
        &e2e,
    );
    println!();
    print_mem_header();
    for (name, m) in [
        ("idle", &idle_mem),
        ("every machine holding a poll", &load_mem),
        ("after the enqueue samples", &end_mem),
    ] {
        for (r, m) in ["A", "B"].iter().zip(m) {
            print_mem_row(&format!("{r}, {name}"), m);
        }
    }
    let per: f64 = (0..2)
        .map(|k| load_mem[k].rss_kib.saturating_sub(idle_mem[k].rss_kib) as f64)
        .sum::<f64>()
        / o.machines as f64;
    println!();
    println!("{per:.1} KiB of RSS per held poll (both receivers)");
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Telling the person (issue 14): `--push`
// ---------------------------------------------------------------------------------------

/// A push service on loopback: reads each request whole, answers 201 (as FCM and Mozilla
/// do), and reports its path and the moment it was read.
struct FakePush {
    url: String,
    got: mpsc::Receiver<(String, Instant)>,
}

fn fake_push() -> anyhow::Result<FakePush> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}", l.local_addr()?);
    let (tx, got) = mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming().map_while(Result::ok) {
            let tx = tx.clone();
            std::thread::spawn(move || serve_push(s, tx));
        }
    });
    Ok(FakePush { url, got })
}

/// One keep-alive connection of the fake push service.
fn serve_push(s: TcpStream, tx: mpsc::Sender<(String, Instant)>) {
    let _ = s.set_nodelay(true);
    let mut r = BufReader::new(s);
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        let (mut len, mut chunked) = (0usize, false);
        loop {
            line.clear();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                let k = k.trim().to_ascii_lowercase();
                if k == "content-length" {
                    len = v.trim().parse().unwrap_or(0);
                } else if k == "transfer-encoding" {
                    chunked = v.to_ascii_lowercase().contains("chunked");
                }
            }
        }
        let read = if chunked {
            read_chunked(&mut r)
        } else if len <= MAX_BODY {
            let mut body = vec![0; len];
            r.read_exact(&mut body)
        } else {
            return;
        };
        if read.is_err() {
            return;
        }
        let at = Instant::now();
        if tx.send((path, at)).is_err() {
            return;
        }
        let ok = b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n";
        if r.get_mut().write_all(ok).is_err() {
            return;
        }
    }
}

fn read_chunked(r: &mut BufReader<TcpStream>) -> std::io::Result<()> {
    let mut line = String::new();
    loop {
        line.clear();
        r.read_line(&mut line)?;
        let n = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidData))?;
        let mut skip = vec![0; n + 2];
        r.read_exact(&mut skip)?;
        if n == 0 {
            return Ok(());
        }
    }
}

const PUSH_SESSION: &str = "push-bench-1";

fn push_event(kind: &str, seq: u64, data: Value) -> Value {
    json!({
        "protocol": 1, "id": ulid::Ulid::new().to_string(), "type": kind, "time": now_stamp(),
        "tier": 1, "harness": {"name": "claude-code", "event": "PermissionRequest"},
        "session": {"id": PUSH_SESSION, "seq": seq, "cwd": "~/src/api"},
        "privacy": {"rulesets": ["secrets@1"], "pii": false}, "data": data
    })
}

/// Posts one event as a sender does (bearer token, fresh connection); 202 expected.
fn post_event(r: &Receiver, ev: Value) -> anyhow::Result<()> {
    let a = once(
        &r.addr,
        &r.host,
        "POST",
        "/api/sessionpipe/v1/events",
        TOKEN,
        Some(&json!({ "events": [ev] })),
    )?;
    if a.status != 202 {
        bail!("events: {} {}", a.status, String::from_utf8_lossy(&a.body));
    }
    Ok(())
}

/// A page action with the login token as a bearer (no cookie, so no CSRF); 200 expected.
fn page_post(r: &Receiver, path: &str, body: Value) -> anyhow::Result<Value> {
    let a = once(&r.addr, &r.host, "POST", path, LOGIN, Some(&body))?;
    if a.status != 200 {
        bail!("{path}: {} {}", a.status, String::from_utf8_lossy(&a.body));
    }
    Ok(serde_json::from_slice(&a.body).unwrap_or(Value::Null))
}

/// Waits for the push service to have read `n` pushes; when each was read.
fn pushes(p: &FakePush, n: usize, limit: Duration) -> anyhow::Result<Vec<(String, Instant)>> {
    let end = Instant::now() + limit;
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        let left = end.saturating_duration_since(Instant::now());
        match p.got.recv_timeout(left) {
            Ok(x) => got.push(x),
            Err(_) => bail!("{} of {n} pushes within {limit:?}", got.len()),
        }
    }
    Ok(got)
}

const PUSH_PAGE_PATHS: [(&str, &str); 2] = [
    ("GET / (the page)", "/"),
    ("GET /page/api/state", "/page/api/state"),
];

/// One round of the page's requests, each on a fresh connection.
fn push_page_round(addr: &str, host: &str, times: &mut [Vec<Duration>], failed: &mut [usize]) {
    for (k, (_, path)) in PUSH_PAGE_PATHS.iter().enumerate() {
        let t = Instant::now();
        match once(addr, host, "GET", path, LOGIN, None) {
            Ok(a) if a.status == 200 => times[k].push(t.elapsed()),
            _ => failed[k] += 1,
        }
    }
}

fn measure_push(o: &Opts, dir: &Path) -> anyhow::Result<()> {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    let built = if std::env::var_os("SP_RECEIVER_BIN").is_some() {
        "SP_RECEIVER_BIN: built elsewhere, say from which commit".to_owned()
    } else {
        commit()
    };
    println!("receiver_load --push: {} ({built})", o.bin.display());
    println!(
        "devices {}, latency samples {}, fan-outs {}, page rounds (idle) {}",
        o.devices, o.push_samples, o.fanouts, o.page_requests
    );
    let r = Receiver::start(&o.bin, dir)?;
    let service = fake_push()?;
    let result = push_run(o, &r, &service, &|i: usize| {
        // What a browser sends: its own P-256 key and auth secret (the same for every
        // device here: the receiver encrypts for each one all the same).
        let key = web_push_native::p256::SecretKey::from_slice(&[7u8; 32])
            .expect("a valid scalar")
            .public_key();
        json!({"op": "subscribe", "name": format!("bench device {i}"), "subscription": {
            "endpoint": format!("{}/push/d{i}", service.url),
            "keys": {"p256dh": URL_SAFE_NO_PAD.encode(key.to_sec1_bytes()),
                     "auth": URL_SAFE_NO_PAD.encode([i as u8; 16])}}})
    });
    if result.is_err() {
        eprintln!("receiver log:\n{}", r.log.lock().unwrap().join("\n"));
    }
    r.stop();
    result
}

fn push_run(
    o: &Opts,
    r: &Receiver,
    service: &FakePush,
    subscription: &dyn Fn(usize) -> Value,
) -> anyhow::Result<()> {
    let mut seq = 0u64;
    post_event(
        r,
        push_event("session.started", seq, json!({"source": "startup"})),
    )?;
    page_post(r, "/page/api/away", json!({"away": true}))?;
    page_post(r, "/page/api/push", subscription(0))?;

    // attention.needed → push, one device. Each prompt is cleared again (a second push,
    // waited for too) so the state stays one prompt deep and no push is left in flight.
    let mut to_push = Vec::new();
    let mut post_rt = Vec::new();
    for k in 0..o.push_samples + 10 {
        seq += 1;
        let id = format!("lat-{k}");
        let ev = push_event(
            "attention.needed",
            seq,
            json!({"attention_id": id, "kind": "permission", "tool": "Bash", "message": "cargo test"}),
        );
        let t0 = Instant::now();
        post_event(r, ev)?;
        let t1 = Instant::now();
        let (_, at) = pushes(service, 1, Duration::from_secs(20))?.remove(0);
        seq += 1;
        post_event(
            r,
            push_event(
                "attention.cleared",
                seq,
                json!({"attention_id": id, "how": "answered"}),
            ),
        )?;
        pushes(service, 1, Duration::from_secs(20))?;
        // The first ten warm up (connections to the push service, prepared statements).
        if k >= 10 {
            to_push.push(at.saturating_duration_since(t0));
            post_rt.push(t1 - t0);
        }
    }
    let to_push = lat(to_push, 0);
    let post_rt = lat(post_rt, 0);

    // The other devices, then the page idle with all of them subscribed.
    let t = Instant::now();
    for i in 1..o.devices {
        page_post(r, "/page/api/push", subscription(i))?;
    }
    let subscribing = t.elapsed();
    let mut idle_t = vec![Vec::new(); PUSH_PAGE_PATHS.len()];
    let mut idle_f = vec![0; PUSH_PAGE_PATHS.len()];
    for _ in 0..10 {
        push_page_round(&r.addr, &r.host, &mut idle_t, &mut idle_f);
    }
    idle_t.iter_mut().for_each(Vec::clear);
    for _ in 0..o.page_requests {
        push_page_round(&r.addr, &r.host, &mut idle_t, &mut idle_f);
    }
    let idle_mem = r.status();

    // Fan-outs (a prompt, then its clearing, and so on) while a phone asks for the page
    // over and over on fresh connections.
    let stop = Arc::new(AtomicBool::new(false));
    let phone = {
        let (addr, host, stop) = (r.addr.clone(), r.host.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut t = vec![Vec::new(); PUSH_PAGE_PATHS.len()];
            let mut f = vec![0; PUSH_PAGE_PATHS.len()];
            while !stop.load(Ordering::Relaxed) {
                push_page_round(&addr, &host, &mut t, &mut f);
            }
            (t, f)
        })
    };
    let mut fanout = Vec::new();
    let mut first = Vec::new();
    let mut peak_threads = 0;
    for f in 0..o.fanouts {
        let id = format!("fan-{}", f / 2);
        seq += 1;
        let ev = if f % 2 == 0 {
            push_event(
                "attention.needed",
                seq,
                json!({"attention_id": id, "kind": "permission", "tool": "Bash", "message": "cargo test"}),
            )
        } else {
            push_event(
                "attention.cleared",
                seq,
                json!({"attention_id": id, "how": "answered"}),
            )
        };
        let t0 = Instant::now();
        post_event(r, ev)?;
        peak_threads = peak_threads.max(r.status().threads);
        let got = pushes(service, o.devices, Duration::from_secs(120))?;
        let mut paths: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
        paths.sort_unstable();
        paths.dedup();
        if paths.len() != o.devices {
            bail!(
                "fan-out {f}: {} pushes went to {} devices",
                got.len(),
                paths.len()
            );
        }
        let last = got.iter().map(|(_, at)| *at).max().unwrap_or(t0);
        let one = got.iter().map(|(_, at)| *at).min().unwrap_or(t0);
        fanout.push(last.saturating_duration_since(t0));
        first.push(one.saturating_duration_since(t0));
    }
    stop.store(true, Ordering::SeqCst);
    let (busy_t, busy_f) = phone.join().expect("the phone thread");
    let end_mem = r.status();

    let total: Duration = fanout.iter().sum();
    let pushes_sent = o.devices * o.fanouts;
    let fan = lat(fanout, 0);
    let first = lat(first, 0);
    println!();
    println!(
        "subscribing {} devices through the page took {:.1} s",
        o.devices,
        subscribing.as_secs_f64()
    );
    println!();
    println!("| one device subscribed | p50 ms | p99 ms | max ms | n |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    println!(
        "| `attention.needed` POST → push read by the push service | {:.2} | {:.2} | {:.2} | {} |",
        to_push.p50, to_push.p99, to_push.max, to_push.n
    );
    println!(
        "| the event's `POST` round trip | {:.2} | {:.2} | {:.2} | {} |",
        post_rt.p50, post_rt.p99, post_rt.max, post_rt.n
    );
    println!();
    println!(
        "| {} devices subscribed, {} fan-outs | p50 ms | max ms |",
        o.devices, o.fanouts
    );
    println!("| --- | ---: | ---: |");
    println!(
        "| event POST → first device's push read | {:.1} | {:.1} |",
        first.p50, first.max
    );
    println!(
        "| event POST → every device's push read (the fan-out) | {:.1} | {:.1} |",
        fan.p50, fan.max
    );
    println!();
    println!(
        "{pushes_sent} pushes in {:.2} s of fan-out: {:.0} pushes/s",
        total.as_secs_f64(),
        pushes_sent as f64 / total.as_secs_f64()
    );
    println!();
    println!("| request (fresh connection) | idle p50 ms | idle p99 ms | during fan-outs p50 ms | during fan-outs p99 ms | during fan-outs max ms | n during |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (k, (name, _)) in PUSH_PAGE_PATHS.iter().enumerate() {
        let i = lat(idle_t[k].clone(), idle_f[k]);
        let b = lat(busy_t[k].clone(), busy_f[k]);
        let fails = if i.failed + b.failed > 0 {
            format!(" ({} failed idle, {} during)", i.failed, b.failed)
        } else {
            String::new()
        };
        println!(
            "| {name}{fails} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
            i.p50, i.p99, b.p50, b.p99, b.max, b.n
        );
    }
    println!();
    println!("| receiver | VmRSS MiB | VmHWM MiB | threads |");
    println!("| --- | ---: | ---: | ---: |");
    println!(
        "| {} devices, idle | {} | {} | {} |",
        o.devices,
        mib(idle_mem.rss_kib),
        mib(idle_mem.hwm_kib),
        idle_mem.threads
    );
    println!(
        "| after the fan-outs (most threads seen during: {peak_threads}) | {} | {} | {} |",
        mib(end_mem.rss_kib),
        mib(end_mem.hwm_kib),
        end_mem.threads
    );
    Ok(())
}
