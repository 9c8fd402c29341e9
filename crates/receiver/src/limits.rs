//! The receiver's limits in one place: the request head, the body, connections, and login
//! attempts; and the throttled log of limits hit (an attack cannot flood the journal).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Largest request head (request line and headers).
pub(crate) const MAX_HEAD: usize = 16 * 1024;
/// Most headers in one request.
pub(crate) const MAX_HEADERS: usize = 64;
/// A request head must arrive within this; also the idle keep-alive limit.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A request body must arrive within this.
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// A request may take its longest hold plus this.
pub(crate) const REQUEST_SLACK: Duration = Duration::from_secs(60);
/// The pause after an accept error that is about the process (EMFILE...), not the client.
pub(crate) const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// Descriptors kept for everything but client connections (database, logs, a new accept).
pub(crate) const FD_RESERVE: u64 = 64;
/// Past the cap, a body is still read (and dropped) up to this many bytes so the 413 reaches
/// a client that sends it all before reading.
pub(crate) const DRAIN_MAX: usize = 8 << 20;
/// A body refused from its head: at most this much of it is read (and dropped) ...
pub(crate) const DISCARD_MAX: usize = 64 << 10;
/// ... within this, before the answer.
pub(crate) const DISCARD_WITHIN: Duration = Duration::from_millis(200);
/// How often one kind of limit is logged.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(5);

/// Logs one line per kind per [`LOG_EVERY`], with how many happened since the last line.
#[derive(Default)]
pub(crate) struct LimitLog {
    kinds: Mutex<HashMap<&'static str, (Instant, u64)>>,
}

impl LimitLog {
    pub fn hit(&self, kind: &'static str, detail: &dyn std::fmt::Display) {
        let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let entry = kinds.entry(kind).or_insert((now - LOG_EVERY, 0));
        entry.1 += 1;
        if now.duration_since(entry.0) >= LOG_EVERY {
            tracing::warn!(kind, count = entry.1, "limit: {detail}");
            *entry = (now, 0);
        }
    }
}

/// The most connections served at once: `wanted`, but never more than the descriptors left.
pub(crate) fn connection_cap(wanted: usize) -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        1024
    };
    let by_fds = soft.saturating_sub(FD_RESERVE).max(16);
    wanted.min(usize::try_from(by_fds).unwrap_or(usize::MAX))
}

/// Largest body read on routes other than events (whose cap is `batch.max_bytes`).
pub(crate) const OTHER_BODY_CAP: usize = 1 << 20;
/// Largest `POST /login` body: a login token and where to go next, nothing more (anyone may
/// send one, so a stranger's body stays small).
pub(crate) const LOGIN_BODY_CAP: usize = 16 << 10;

/// Login attempts: per client and overall, token buckets.
const LOGIN_PER_CLIENT: Bucket = Bucket::new(5.0, 60.0);
const LOGIN_OVERALL: Bucket = Bucket::new(30.0, 60.0);
/// Clients tracked at most (past this, those back at full allowance are forgotten).
const CLIENTS_KEPT: usize = 10_000;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Bucket {
    cap: f64,
    /// Seconds to refill from empty.
    per_s: f64,
    tokens: f64,
    at: Option<Instant>,
}

impl Bucket {
    const fn new(cap: f64, refill_s: f64) -> Bucket {
        Bucket {
            cap,
            per_s: cap / refill_s,
            tokens: cap,
            at: None,
        }
    }
    fn refill(&mut self, now: Instant) {
        if let Some(at) = self.at {
            let gained = now.saturating_duration_since(at).as_secs_f64() * self.per_s;
            self.tokens = (self.tokens + gained).min(self.cap);
        }
        self.at = Some(now);
    }
    /// Seconds until one attempt is allowed (0: now).
    fn wait_s(&self) -> u64 {
        if self.tokens >= 1.0 {
            0
        } else {
            ((1.0 - self.tokens) / self.per_s).ceil().max(1.0) as u64
        }
    }
}

/// The login rate limit: an attempt takes one from its client's bucket and the overall one;
/// a successful login gives them back (only guesses count).
#[derive(Debug)]
pub(crate) struct LoginLimits {
    overall: Bucket,
    clients: HashMap<IpAddr, Bucket>,
}

impl Default for LoginLimits {
    fn default() -> Self {
        LoginLimits {
            overall: LOGIN_OVERALL,
            clients: HashMap::new(),
        }
    }
}

impl LoginLimits {
    /// Takes an attempt, or says in how many seconds one is allowed.
    pub fn take(&mut self, client: IpAddr, now: Instant) -> Result<(), u64> {
        if self.clients.len() >= CLIENTS_KEPT {
            self.clients.retain(|_, b| {
                b.refill(now);
                b.tokens < b.cap
            });
        }
        let mine = self.clients.entry(client).or_insert(LOGIN_PER_CLIENT);
        mine.refill(now);
        self.overall.refill(now);
        let wait = mine.wait_s().max(self.overall.wait_s());
        if wait > 0 {
            return Err(wait);
        }
        mine.tokens -= 1.0;
        self.overall.tokens -= 1.0;
        Ok(())
    }

    pub fn give_back(&mut self, client: IpAddr) {
        if let Some(b) = self.clients.get_mut(&client) {
            b.tokens = (b.tokens + 1.0).min(b.cap);
        }
        self.overall.tokens = (self.overall.tokens + 1.0).min(self.overall.cap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_attempts_are_limited_per_client_and_overall() {
        let mut l = LoginLimits::default();
        let t = Instant::now();
        let a = IpAddr::from([10, 0, 0, 1]);
        for _ in 0..5 {
            assert_eq!(l.take(a, t), Ok(()));
        }
        let wait = l.take(a, t).unwrap_err();
        assert!((1..=12).contains(&wait), "{wait}");
        // A success gives its attempt back.
        l.give_back(a);
        assert_eq!(l.take(a, t), Ok(()));
        // Overall: 30 a minute, whoever asks.
        let mut l = LoginLimits::default();
        for i in 0..30u8 {
            assert_eq!(l.take(IpAddr::from([10, 1, 0, i]), t), Ok(()));
        }
        assert!(l.take(IpAddr::from([10, 2, 0, 1]), t).is_err());
        assert_eq!(
            l.take(IpAddr::from([10, 2, 0, 1]), t + Duration::from_secs(2)),
            Ok(())
        );
    }
}
