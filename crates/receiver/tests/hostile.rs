//! The real `sp-receiver` binary under the attacks that used to stop it or cost it memory:
//! idle connections past the open-file limit, a huge header line, slowloris, login guessing,
//! a CSRF value derived from the cookie, a foreign `Host`, and the test door in a release
//! build. Plain `TcpStream` HTTP, so every byte on the wire is the test's.
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};

// Both crates' tests' one rule for "this test needs tool X", and the one way to start a
// server that says where it listens.
use sessionpipe_testkit::wait::until;
use sessionpipe_testkit::{listening, needs};

const SP_RECEIVER: &str = env!("CARGO_BIN_EXE_sp-receiver");
const TOKEN: &str = "hostile-bearer-token-0123456789";
const LOGIN: &str = "hostile-login-token-0123456789";

struct Running {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write_secret(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("{text}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// Starts `bin` on 127.0.0.1:0, under `ulimit -n NOFILE` when given, and waits for its
/// "listening on" line.
fn start(bin: &Path, nofile: Option<u32>) -> Running {
    start_with_env(bin, nofile, &[])
}

fn start_with_env(bin: &Path, nofile: Option<u32>, env: &[(&str, &str)]) -> Running {
    start_full(bin, nofile, env, &[], tempfile::tempdir().unwrap())
}

fn start_full(
    bin: &Path,
    nofile: Option<u32>,
    env: &[(&str, &str)],
    extra: &[&str],
    dir: tempfile::TempDir,
) -> Running {
    write_secret(&dir.path().join("token"), TOKEN);
    write_secret(&dir.path().join("login"), LOGIN);
    let mut c = Command::new("sh");
    let mut ulimit = nofile.map_or(String::new(), |n| format!("ulimit -n {n} && "));
    if env.iter().any(|(k, _)| *k == "WATCHDOG_USEC") {
        // systemd names the pid the watchdog is for: the shell's, which exec keeps.
        ulimit.push_str("export WATCHDOG_PID=$$ && ");
    }
    c.arg("-c")
        .arg(format!("{ulimit}exec \"$0\" \"$@\""))
        .arg(bin)
        .args(["--listen", "127.0.0.1:0", "--token-file"])
        .arg(dir.path().join("token"))
        .arg("--login-token-file")
        .arg(dir.path().join("login"))
        .arg("--db")
        .arg(dir.path().join("receiver.db"))
        .args(extra)
        .env("HOME", dir.path())
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let (child, url, log) = listening::spawn_listening(c);
    // `http://ADDR` or `https://ADDR`.
    let addr = url.split("://").nth(1).unwrap_or(&url);
    let addr = addr.parse().expect("a socket address");
    Running {
        child,
        addr,
        log,
        _dir: dir,
    }
}

struct Resp {
    status: u16,
    head: String,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }
}

/// One request on a new connection (`Connection: close`); `None` when the connection was
/// closed without an answer (shed).
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Option<Resp> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).ok()?;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some(Resp {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    })
}

fn get(addr: SocketAddr, path: &str) -> Option<Resp> {
    request(addr, "GET", path, &[], "")
}

/// Raises this process's soft open-file limit to `want` (at most the hard limit).
fn raise_nofile(want: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    if lim.rlim_cur < want {
        lim.rlim_cur = want.min(lim.rlim_max);
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    }
    lim.rlim_cur
}

fn status_kb(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}

fn login(r: &Running) -> (String, String) {
    let resp = request(
        r.addr,
        "POST",
        "/login",
        &[("content-type", "application/x-www-form-urlencoded")],
        &format!("token={LOGIN}"),
    )
    .expect("an answer");
    assert_eq!(resp.status, 303, "{}", resp.body);
    let set = resp.header("set-cookie").expect("a cookie");
    let cookie = set.split(';').next().unwrap().trim().to_owned();
    let state = request(r.addr, "GET", "/page/api/state", &[("cookie", &cookie)], "").unwrap();
    assert_eq!(state.status, 200, "{}", state.body);
    let v: serde_json::Value = serde_json::from_str(&state.body).unwrap();
    (cookie, v["csrf"].as_str().unwrap().to_owned())
}

#[test]
fn six_hundred_idle_connections_under_ulimit_1024_do_not_stop_it() {
    raise_nofile(4096);
    let r = start(Path::new(SP_RECEIVER), Some(1024));
    let mut idle = Vec::new();
    for _ in 0..600 {
        match TcpStream::connect_timeout(&r.addr, Duration::from_secs(5)) {
            Ok(s) => idle.push(s),
            Err(e) => panic!("connect {}: {e}", idle.len()),
        }
    }
    // While they are held the page answers (each connection costs one descriptor, the cap
    // stays under the limit).
    let page = get(r.addr, "/login").expect("the page answers while 600 connections idle");
    assert_eq!(page.status, 200);
    drop(idle);
    // And it goes on serving after they close.
    for _ in 0..20 {
        assert_eq!(get(r.addr, "/healthz").expect("healthz").status, 200);
    }
    // Past the cap: 1100 connections, more than the limit allows; new ones are shed, the
    // server survives, and serves again once they close.
    let mut many = Vec::new();
    for _ in 0..1100 {
        if let Ok(s) = TcpStream::connect_timeout(&r.addr, Duration::from_secs(2)) {
            many.push(s);
        }
    }
    drop(many);
    assert!(
        until(Duration::from_secs(20), || get(r.addr, "/healthz")
            .is_some_and(|h| h.status == 200)),
        "serving again after 1100 connections; log:\n{}",
        r.log.lock().unwrap()
    );
    // The log is read from the server's stderr by a thread: wait for the line.
    assert!(
        until(Duration::from_secs(5), || r
            .log
            .lock()
            .unwrap()
            .contains("limit")),
        "the shedding is logged"
    );
}

#[test]
fn a_200_mib_header_line_costs_under_16_mb() {
    let r = start(Path::new(SP_RECEIVER), None);
    let pid = r.child.id();
    assert_eq!(get(r.addr, "/healthz").unwrap().status, 200);
    let before = status_kb(pid, "VmRSS:");
    let mut s = TcpStream::connect(r.addr).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nx-big: ")
        .unwrap();
    let chunk = vec![b'a'; 1 << 20];
    let mut sent = 0usize;
    for _ in 0..200 {
        if s.write_all(&chunk).is_err() {
            break;
        }
        sent += chunk.len();
    }
    // The server stopped reading at its head limit: the connection is closed with a 431
    // (or cut) long before 200 MiB.
    assert!(sent < 200 << 20, "the server kept reading a 200 MiB header");
    let hwm = status_kb(pid, "VmHWM:");
    let after = status_kb(pid, "VmRSS:");
    eprintln!("VmRSS before {before} kB, after {after} kB, VmHWM {hwm} kB, sent {sent} bytes");
    assert!(
        hwm < before + 16 * 1024,
        "VmHWM {hwm} kB vs {before} kB before"
    );
    assert_eq!(get(r.addr, "/healthz").unwrap().status, 200);
}

#[test]
fn two_thousand_slowloris_connections_do_not_stop_the_page() {
    let have = raise_nofile(8192);
    assert!(
        have >= 2200,
        "need 2200 open files for this test, the hard limit allows {have}"
    );
    let r = start(Path::new(SP_RECEIVER), None);
    let mut slow = Vec::new();
    for _ in 0..2000 {
        let mut s = TcpStream::connect_timeout(&r.addr, Duration::from_secs(5)).unwrap();
        // A head that never ends.
        let _ = s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nx-slow: ");
        slow.push(s);
    }
    let page = get(r.addr, "/login").expect("the page answers");
    assert_eq!(page.status, 200);
    // Answered while every one of them still hangs (not once the head timeout cut them).
    assert!(
        slow.iter().all(still_waiting),
        "the page answered only after the slow heads were cut"
    );
    // The head timeout closes them (10 s): the server reads EOF on each.
    let mut closed = 0;
    for s in &mut slow[..50] {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut b = [0u8; 512];
        match s.read(&mut b) {
            // EOF, or a 408 and then EOF: closed by the server.
            Ok(_) => closed += 1,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => closed += 1,
        }
    }
    assert_eq!(closed, 50);
    assert_eq!(get(r.addr, "/healthz").unwrap().status, 200);
}

#[test]
fn the_test_door_answers_404_in_a_release_build() {
    let debug = Path::new(SP_RECEIVER);
    let release: PathBuf = debug
        .parent()
        .and_then(Path::parent)
        .map(|t| t.join("release/sp-receiver"))
        .unwrap();
    let tool = format!(
        "the release build {} (scripts/test.sh builds it: cargo build --release)",
        release.display()
    );
    if !needs::needs(&tool, release.exists()) {
        return;
    }
    let r = start(&release, None);
    let body = r#"{"session":"codex:x","message":{"kind":"cancel"}}"#;
    for (method, path) in [
        ("POST", "/test/enqueue"),
        ("GET", "/test/events"),
        ("GET", "/test/acks"),
    ] {
        let resp = request(
            r.addr,
            method,
            path,
            &[("content-type", "application/json")],
            body,
        )
        .unwrap();
        assert_eq!(resp.status, 404, "{method} {path}: {}", resp.body);
    }
    assert_eq!(get(r.addr, "/healthz").unwrap().status, 200);
}

#[test]
fn a_csrf_value_derived_from_the_cookie_is_refused() {
    let r = start(Path::new(SP_RECEIVER), None);
    let (cookie, csrf) = login(&r);
    let value = cookie.split_once('=').unwrap().1;
    let derived: String = Sha256::digest(format!("sessionpipe csrf|{value}").as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_ne!(
        derived, csrf,
        "the CSRF value is not derived from the cookie"
    );
    let body = r#"{"session":"codex:s1","message":{"kind":"prompt","text":"hi"}}"#;
    let send = |token: &str| {
        request(
            r.addr,
            "POST",
            "/page/api/enqueue",
            &[
                ("cookie", &cookie),
                ("content-type", "application/json"),
                ("x-sessionpipe-csrf", token),
            ],
            body,
        )
        .unwrap()
    };
    let refused = send(&derived);
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body.contains("csrf"));
    assert_eq!(send(&csrf).status, 200);
}

#[test]
fn login_guesses_are_limited_overall() {
    let r = start(Path::new(SP_RECEIVER), None);
    let addr = r.addr;
    let guesses: Vec<_> = (0..100)
        .map(|i| {
            std::thread::spawn(move || {
                request(
                    addr,
                    "POST",
                    "/login",
                    &[("content-type", "application/x-www-form-urlencoded")],
                    &format!("token=guess{i:04}"),
                )
                .map(|r| (r.status, r.header("retry-after")))
            })
        })
        .collect();
    let answers: Vec<_> = guesses.into_iter().map(|g| g.join().unwrap()).collect();
    let limited = answers
        .iter()
        .filter(|a| matches!(a, Some((429, Some(_)))))
        .count();
    let wrong = answers
        .iter()
        .filter(|a| matches!(a, Some((401, _))))
        .count();
    eprintln!("100 parallel guesses: {limited} got 429, {wrong} got 401");
    assert!(
        limited >= 90,
        "{limited} of 100 guesses got 429 with retry-after ({wrong} got 401)"
    );
    assert!(wrong <= 5, "{wrong} guesses were checked");
    // The log is read from the server's stderr by a thread: wait for the line.
    assert!(
        until(Duration::from_secs(5), || r
            .log
            .lock()
            .unwrap()
            .contains("login")),
        "the limit is logged"
    );
}

#[test]
fn a_foreign_host_is_refused() {
    let r = start(Path::new(SP_RECEIVER), None);
    let port = r.addr.port();
    let rebound = format!("rebind.attacker.example:{port}");
    for path in ["/", "/login", "/page/api/state"] {
        let resp = request(r.addr, "GET", path, &[("host", &rebound)], "").unwrap();
        assert_eq!(resp.status, 403, "{path}: {}", resp.body);
        assert!(resp.body.contains("host_not_allowed"), "{}", resp.body);
    }
    let form = request(
        r.addr,
        "POST",
        "/login",
        &[
            ("host", &rebound),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        &format!("token={LOGIN}"),
    )
    .unwrap();
    assert_eq!(form.status, 403);
    assert!(form.header("set-cookie").is_none());
    // Its own names still work.
    let local = format!("localhost:{port}");
    assert_eq!(
        request(r.addr, "GET", "/login", &[("host", &local)], "")
            .unwrap()
            .status,
        200
    );
    assert_eq!(get(r.addr, "/login").unwrap().status, 200);
    // X-Forwarded-Host is not trusted without --trust-proxy.
    let resp = request(
        r.addr,
        "GET",
        "/login",
        &[("host", &rebound), ("x-forwarded-host", &local)],
        "",
    )
    .unwrap();
    assert_eq!(resp.status, 403);
}

#[test]
fn under_systemd_it_says_ready_and_pings_the_watchdog() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let r = start_with_env(
        Path::new(SP_RECEIVER),
        None,
        &[
            ("NOTIFY_SOCKET", sock_path.to_str().unwrap()),
            ("WATCHDOG_USEC", "1000000"),
        ],
    );
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while !(seen.iter().any(|m: &String| m.contains("READY=1"))
        && seen.iter().filter(|m| m.contains("WATCHDOG=1")).count() >= 2)
    {
        let n = sock
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("{e}; got {seen:?}; log:\n{}", r.log.lock().unwrap()));
        seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
}

#[test]
fn with_tls_it_serves_https_and_a_host_only_secure_cookie() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl (Debian's openssl package) makes the test certificate");
    assert!(made.status.success(), "{made:?}");
    let (c, k) = (
        cert.to_str().unwrap().to_owned(),
        key.to_str().unwrap().to_owned(),
    );
    let r = start_full(
        Path::new(SP_RECEIVER),
        None,
        &[],
        &["--tls-cert", &c, "--tls-key", &k],
        dir,
    );
    assert!(r.log.lock().unwrap().contains("listening on https://"));
    let url = format!("https://{}", r.addr);
    let curl = |args: &[&str]| {
        let out = Command::new("curl")
            .args(["-sk", "--max-time", "10", "-D", "-", "-o", "/dev/null"])
            .args(args)
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let health = curl(&[&format!("{url}/healthz")]);
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let login = curl(&["--data", &format!("token={LOGIN}"), &format!("{url}/login")]);
    assert!(login.starts_with("HTTP/1.1 303"), "{login}");
    let cookie = login
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .expect("a cookie");
    assert!(cookie.contains("__Host-sessionpipe="), "{cookie}");
    assert!(cookie.contains("; Secure"), "{cookie}");
    // Plain HTTP on the TLS port gets no HTTP answer.
    assert!(get(r.addr, "/healthz").is_none_or(|r| r.status != 200));
}

#[test]
fn two_thousand_held_long_polls_cost_no_threads() {
    let have = raise_nofile(8192);
    assert!(
        have >= 2200,
        "need 2200 open files for this test, the hard limit allows {have}"
    );
    let r = start(Path::new(SP_RECEIVER), None);
    let pid = r.child.id();
    let threads_before = status_kb(pid, "Threads:");
    let mut held = Vec::new();
    for i in 0..2000 {
        let mut s = TcpStream::connect_timeout(&r.addr, Duration::from_secs(5)).unwrap();
        let req = format!(
            "GET /api/sessionpipe/v1/control?session=codex:held{i}&wait=20 HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {TOKEN}\r\n\r\n",
            r.addr
        );
        s.write_all(req.as_bytes()).unwrap();
        held.push(s);
    }
    // The page answers while all 2000 are held (none answered yet).
    assert_eq!(get(r.addr, "/healthz").unwrap().status, 200);
    let page = get(r.addr, "/login").expect("the page answers");
    assert_eq!(page.status, 200);
    assert!(
        held.iter().all(still_waiting),
        "the page answered only after the held polls were"
    );
    let threads = status_kb(pid, "Threads:");
    eprintln!("threads: {threads_before} before, {threads} with 2000 polls held");
    // A held poll holds no thread: the threads stay within the blocking pool's cap (64) plus
    // the fixed ones (the runtime's 2 workers, main, the accept, push and signal threads),
    // far from one per poll; and /healthz and the page, which need a pool thread, answered
    // at once above, which they could not if 2,000 polls were holding the pool's 64.
    assert!(threads <= 64 + 16, "{threads} threads for 2000 held polls");
    // They are really held: one answers 204 only when its wait runs out.
    held[0]
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut b = [0u8; 64];
    assert!(
        held[0].read(&mut b).is_err(),
        "a poll answered before its wait ran out"
    );
}

const EVENTS: &str = "/api/sessionpipe/v1/events";

/// Writes a head declaring a `declared`-byte body, then `send` bytes of it (stopping early
/// when the server closes); returns the connection, still open on this side.
fn post_partial(
    addr: SocketAddr,
    path: &str,
    token: &str,
    declared: usize,
    send: usize,
) -> TcpStream {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\ncontent-length: {declared}\r\n\r\n"
    );
    s.write_all(head.as_bytes()).unwrap();
    let chunk = vec![b' '; 64 << 10];
    let mut sent = 0;
    while sent < send {
        let n = chunk.len().min(send - sent);
        if s.write_all(&chunk[..n]).is_err() {
            break;
        }
        sent += n;
    }
    s
}

/// The status line's code of what `s` reads within `within`; `None` for nothing (or a reset
/// before any byte).
/// Whether the server has neither answered on `s` nor closed it: the connection still waits.
fn still_waiting(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let waiting =
        matches!(s.peek(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    s.set_nonblocking(false).unwrap();
    waiting
}

fn read_status(s: &mut TcpStream, within: Duration) -> Option<u16> {
    s.set_read_timeout(Some(within)).unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 1024];
    while !got.windows(2).any(|w| w == b"\r\n") {
        match s.read(&mut b) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&b[..n]),
        }
    }
    String::from_utf8_lossy(&got)
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[test]
fn a_thousand_strangers_sending_bodies_cost_under_256_mib() {
    let have = raise_nofile(8192);
    assert!(
        have >= 1200,
        "need 1200 open files for this test, the hard limit allows {have}"
    );
    let r = start(Path::new(SP_RECEIVER), None);
    let pid = r.child.id();
    assert_eq!(get(r.addr, "/healthz").unwrap().status, 200);
    let before = status_kb(pid, "VmRSS:");
    // Each declares a 50 MB batch with a wrong token and sends 1 MiB of it (issue 28's
    // attack); all are held open on this side while the receiver is measured.
    let held: Vec<TcpStream> = (0..1000)
        .map(|i| post_partial(r.addr, EVENTS, &format!("wrong-{i}"), 50_000_000, 1 << 20))
        .collect();
    let during = status_kb(pid, "VmRSS:");
    let hwm = status_kb(pid, "VmHWM:");
    eprintln!("VmRSS before {before} kB, with 1000 held {during} kB, VmHWM {hwm} kB");
    assert!(
        hwm < before + 256 * 1024,
        "VmHWM {hwm} kB against {before} kB before"
    );
    // Every one was answered 401 (or reset once answered) and none got anything else.
    let mut answered = 0;
    for mut s in held {
        match read_status(&mut s, Duration::from_secs(5)) {
            Some(401) => answered += 1,
            None => {}
            Some(other) => panic!("a stranger's batch was answered {other}"),
        }
    }
    assert!(answered > 0, "no stranger read its 401");
    // The page still answers, and the memory is back near where it was.
    assert_eq!(get(r.addr, "/healthz").unwrap().status, 200);
    let after = status_kb(pid, "VmRSS:");
    eprintln!("VmRSS after {after} kB ({answered} read their 401)");
    assert!(
        after < before + 32 * 1024,
        "VmRSS {after} kB after, {before} kB before"
    );
}

#[test]
fn a_declared_body_over_the_cap_is_answered_413_at_once() {
    let r = start(Path::new(SP_RECEIVER), None);
    // The rest of each body is never sent, and the receiver would wait 30 s for it
    // (BODY_TIMEOUT): an answer within 5 s is one given without waiting for the body.
    let mut s = post_partial(r.addr, EVENTS, TOKEN, 50_000_000, 1024);
    let status = read_status(&mut s, Duration::from_secs(5));
    assert_eq!(status, Some(413), "log:\n{}", r.log.lock().unwrap());

    // A stranger declaring a body and sending none of it: 401, no wait for the body.
    let mut s = post_partial(r.addr, EVENTS, "not-the-token", 50_000_000, 0);
    assert_eq!(read_status(&mut s, Duration::from_secs(5)), Some(401));

    // The login form's post is anyone's: its body is capped small.
    let mut s = post_partial(r.addr, "/login", "", 1 << 20, 0);
    assert_eq!(read_status(&mut s, Duration::from_secs(5)), Some(413));
}

#[test]
fn bodies_in_flight_past_the_budget_are_answered_503() {
    let r = spreceiver::Receiver::start(spreceiver::ReceiverOptions {
        token: TOKEN.to_owned(),
        max_bytes: 512 << 10,
        body_budget: 1 << 20,
        ..Default::default()
    })
    .unwrap();
    let addr = r.addr();
    // Three batches of 480 KiB, heads sent, bodies not yet: two fit the 1 MiB budget, the
    // one the receiver comes to last does not and is refused before its body is read.
    let mut three: Vec<TcpStream> = (0..3)
        .map(|_| post_partial(addr, EVENTS, TOKEN, 480 << 10, 0))
        .collect();
    let answers: Vec<Option<u16>> = three
        .iter_mut()
        .map(|s| read_status(s, Duration::from_secs(2)))
        .collect();
    assert_eq!(
        answers.iter().filter(|a| **a == Some(503)).count(),
        1,
        "{answers:?}"
    );
    assert_eq!(
        answers.iter().filter(|a| a.is_none()).count(),
        2,
        "{answers:?}"
    );
    // A small one still fits beside the two held.
    let small = request(
        addr,
        "POST",
        EVENTS,
        &[("authorization", &format!("Bearer {TOKEN}"))],
        r#"{"events":[]}"#,
    )
    .unwrap();
    assert_eq!(small.status, 400, "{}", small.body);
    // The two held send their bodies (not JSON: 400) and give their shares back.
    for (s, a) in three.iter_mut().zip(&answers) {
        if a.is_none() {
            s.write_all(&vec![b' '; 480 << 10]).unwrap();
            assert_eq!(read_status(s, Duration::from_secs(5)), Some(400));
        }
    }
    let mut again = post_partial(addr, EVENTS, TOKEN, 480 << 10, 480 << 10);
    assert_eq!(read_status(&mut again, Duration::from_secs(5)), Some(400));
}

#[test]
fn slow_login_bodies_do_not_starve_the_paired_persons_events_acks_and_page() {
    let have = raise_nofile(8192);
    assert!(
        have >= 1400,
        "need 1400 open files for this test, the hard limit allows {have}"
    );
    let r = start(Path::new(SP_RECEIVER), None);
    // 1,200 strangers trickle login bodies: 1,000 declare a full one (16 KiB), 200 a small
    // one (to fill what is left). Each asks `expect: 100-continue`, so the receiver says
    // when it starts reading a body (its share of the budget taken; 503 when none is left);
    // each then sends `token=` and no more, and is held until its 30 s run out.
    let mut slow: Vec<TcpStream> = (0..1200)
        .map(|i| {
            let declared = if i < 1000 { 16 << 10 } else { 100 };
            let mut s = TcpStream::connect_timeout(&r.addr, Duration::from_secs(5)).unwrap();
            s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
            let head = format!(
                "POST /login HTTP/1.1\r\nhost: {}\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: {declared}\r\nexpect: 100-continue\r\n\r\n",
                r.addr
            );
            s.write_all(head.as_bytes()).unwrap();
            s
        })
        .collect();
    let (mut held, mut refused) = (0, 0);
    for s in &mut slow {
        match read_status(s, Duration::from_secs(20)) {
            Some(100) => {
                let _ = s.write_all(b"token=");
                held += 1;
            }
            Some(503) => refused += 1,
            other => panic!("a slow login body was answered {other:?}"),
        }
    }
    eprintln!("slow login bodies: {held} held, {refused} refused 503");
    let bearer = format!("Bearer {TOKEN}");
    let id = "01JAAAAAAAAAAAAAAAAAAAAAAA";
    let event = format!(
        r#"{{"events":[{{"protocol":1,"id":"{id}","type":"session.started","time":"2026-01-01T00:00:00.000Z","tier":0,"harness":{{"name":"codex"}},"session":{{"id":"s1","seq":0}},"privacy":{{"rulesets":[],"pii":false}},"data":{{}}}}]}}"#
    );
    let ev = request(
        r.addr,
        "POST",
        EVENTS,
        &[("authorization", &bearer)],
        &event,
    )
    .expect("an answer to the event batch");
    assert_eq!(ev.status, 202, "events: {}", ev.body);
    let page = request(
        r.addr,
        "POST",
        "/page/api/enqueue",
        &[
            ("authorization", &format!("Bearer {LOGIN}")),
            ("content-type", "application/json"),
        ],
        r#"{"session":"codex:s1","message":{"kind":"prompt","text":"hi"}}"#,
    )
    .expect("an answer to the page action");
    assert_eq!(page.status, 200, "page: {}", page.body);
    let msg: serde_json::Value = serde_json::from_str(&page.body).unwrap();
    let msg_id = msg["id"].as_str().expect("the queued message's id");
    let ack = request(
        r.addr,
        "POST",
        "/api/sessionpipe/v1/control/ack",
        &[("authorization", &bearer)],
        &format!(
            r#"{{"acks":[{{"id":"{msg_id}","outcome":"delivered","at":"2026-01-01T00:00:01.000Z"}}]}}"#
        ),
    )
    .expect("an answer to the ack");
    assert_eq!(ack.status, 202, "ack: {}", ack.body);
    // The strangers still held are cut when their bodies' time runs out.
    drop(slow);
    assert_eq!(get(r.addr, "/healthz").unwrap().status, 200);
}
