//! The receiver's limits in one place: the request head, the body, connections, and login
//! attempts; and the throttled log of limits hit (an attack cannot flood the journal).

use std::collections::HashMap;
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
            // An idle tab's keep-alive connection running out is routine: debug, not warn.
            if kind == "head_timeout" {
                tracing::debug!(kind, count = entry.1, "limit: {detail}");
            } else {
                tracing::warn!(kind, count = entry.1, "limit: {detail}");
            }
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
/// Login bodies in flight at once, in bytes: their own budget, apart from the authenticated
/// routes' (`body_budget`), so that strangers trickling login bodies cannot make the paired
/// person's events, acks and page actions answer 503 (about 120 full login bodies).
pub(crate) const LOGIN_BODY_BUDGET: usize = 2 << 20;

/// Login attempts: per client and overall, token buckets kept in the database (db/logins.rs),
/// so that receivers sharing one count them together. A bucket is stored as the time it is
/// full again (ms); none stored, or a time past, is a full bucket.
pub(crate) const LOGIN_PER_CLIENT: Bucket = Bucket::new(5, 60_000);
pub(crate) const LOGIN_OVERALL: Bucket = Bucket::new(30, 60_000);
/// The overall bucket's key (a client's is its address).
pub(crate) const LOGIN_ALL: &str = "*";

#[derive(Clone, Copy, Debug)]
pub(crate) struct Bucket {
    cap: i64,
    /// Milliseconds to refill one attempt.
    token_ms: i64,
}

impl Bucket {
    const fn new(cap: i64, refill_ms: i64) -> Bucket {
        Bucket {
            cap,
            token_ms: refill_ms / cap,
        }
    }

    /// Milliseconds to refill one attempt: what a success gives back.
    pub fn token_ms(&self) -> i64 {
        self.token_ms
    }

    /// Milliseconds until one attempt is allowed (0 or less: now).
    fn wait_ms(&self, full_ms: Option<i64>, now_ms: i64) -> i64 {
        full_ms.unwrap_or(now_ms).max(now_ms) - now_ms - (self.cap - 1) * self.token_ms
    }

    /// When the bucket is full again once an attempt is taken from it.
    fn taken(&self, full_ms: Option<i64>, now_ms: i64) -> i64 {
        full_ms.unwrap_or(now_ms).max(now_ms) + self.token_ms
    }
}

/// A login attempt from a client whose bucket is full at `client` with the overall one full
/// at `overall`: both buckets' new times, or in how many seconds an attempt is allowed.
pub(crate) fn take_login_attempt(
    client: Option<i64>,
    overall: Option<i64>,
    now_ms: i64,
) -> Result<(i64, i64), u64> {
    let wait = LOGIN_PER_CLIENT
        .wait_ms(client, now_ms)
        .max(LOGIN_OVERALL.wait_ms(overall, now_ms));
    if wait > 0 {
        return Err(((wait + 999) / 1000).max(1) as u64);
    }
    Ok((
        LOGIN_PER_CLIENT.taken(client, now_ms),
        LOGIN_OVERALL.taken(overall, now_ms),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_attempts_are_limited_per_client_and_overall() {
        let t = 1_000_000;
        let (mut client, mut overall) = (None, None);
        for _ in 0..5 {
            let (c, o) = take_login_attempt(client, overall, t).unwrap();
            (client, overall) = (Some(c), Some(o));
        }
        assert_eq!(take_login_attempt(client, overall, t), Err(12));
        // One attempt back a refill later (12 s a client, 2 s overall).
        assert_eq!(take_login_attempt(client, overall, t + 11_999), Err(1));
        assert!(take_login_attempt(client, overall, t + 12_000).is_ok());
        // A bucket full long ago is a full bucket.
        assert!(take_login_attempt(Some(0), Some(0), t).is_ok());
        // Overall: 30 a minute, whoever asks.
        let mut overall = None;
        for _ in 0..30 {
            overall = Some(take_login_attempt(None, overall, t).unwrap().1);
        }
        assert_eq!(take_login_attempt(None, overall, t), Err(2));
        assert!(take_login_attempt(None, overall, t + 2_000).is_ok());
    }
}
