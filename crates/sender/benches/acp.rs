//! What sp-acp adds to every frame (issue 16). The "agent" is `cat`, which writes back each
//! line as it reads it; the benchmark plays the editor and sends one frame at a time, waiting
//! for it to come back. Directly to `cat` that round trip is two pipe hops; through
//! `sp-acp -- cat` the frame also passes the proxy twice (editor → agent, agent → editor), read,
//! parsed and written each time. The added latency per frame is half the difference of the
//! round trips. Direct and proxied rounds alternate so both see the same machine.
//!
//! `cargo bench --bench acp` (`-- --frames N` to change the 10,000). It prints a Markdown
//! table for BENCHMARKS.md; it never fails on a time.
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

struct Pipe {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    line: Vec<u8>,
}

impl Pipe {
    fn start(mut c: Command) -> Pipe {
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::with_capacity(1 << 20, child.stdout.take().unwrap());
        Pipe {
            child,
            stdin,
            stdout,
            line: Vec::with_capacity(1 << 20),
        }
    }

    /// One round trip of `frame`, in microseconds.
    fn round_trip(&mut self, frame: &[u8]) -> f64 {
        let t = Instant::now();
        self.stdin.write_all(frame).unwrap();
        self.stdin.flush().unwrap();
        self.line.clear();
        self.stdout.read_until(b'\n', &mut self.line).unwrap();
        let us = t.elapsed().as_secs_f64() * 1e6;
        assert_eq!(self.line.len(), frame.len(), "the frame came back whole");
        us
    }
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

/// A `session/update` notification of about `size` bytes, as agents stream them.
fn frame(size: usize) -> Vec<u8> {
    let head = r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"ses_bench","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":""#;
    let tail = "\"}}}}\n";
    let pad = size.saturating_sub(head.len() + tail.len());
    let mut f = head.as_bytes().to_vec();
    f.extend(std::iter::repeat_n(b'a', pad));
    f.extend_from_slice(tail.as_bytes());
    f
}

fn kb(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let frames: usize = args
        .iter()
        .position(|a| a == "--frames")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut proxied = {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sp-acp"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("SESSIONPIPE_NO_SPAWN", "1")
            .args(["--", "cat"]);
        Pipe::start(c)
    };
    let mut direct = Pipe::start(Command::new("cat"));
    println!("| frame | frames | direct p50 µs | direct p99 µs | via sp-acp p50 µs | via sp-acp p99 µs | added per frame p50 µs | added per frame p99 µs |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    // Below a pipe's 64 KiB: the frame is written whole before it is read back.
    for size in [300usize, 8 * 1024, 48 * 1024] {
        let f = frame(size);
        let n = frames;
        // Warm-up: page in both paths.
        for _ in 0..100 {
            direct.round_trip(&f);
            proxied.round_trip(&f);
        }
        let (mut d, mut p) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for _ in 0..n {
            d.push(direct.round_trip(&f));
            p.push(proxied.round_trip(&f));
        }
        let (d50, d99) = (percentile(&mut d, 50.0), percentile(&mut d, 99.0));
        let (p50, p99) = (percentile(&mut p, 50.0), percentile(&mut p, 99.0));
        println!(
            "| {} B | {n} | {d50:.1} | {d99:.1} | {p50:.1} | {p99:.1} | {:.1} | {:.1} |",
            f.len(),
            (p50 - d50) / 2.0,
            (p99 - d99) / 2.0
        );
    }
    let pid = proxied.child.id();
    println!(
        "\nsp-acp resident memory after the run: {} KiB now (VmRSS), {} KiB at its peak (VmHWM)",
        kb(pid, "VmRSS:").unwrap_or(0),
        kb(pid, "VmHWM:").unwrap_or(0)
    );
    drop(proxied.stdin);
    drop(direct.stdin);
    let _ = proxied.child.wait();
    let _ = direct.child.wait();
}
