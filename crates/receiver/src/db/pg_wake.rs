//! The wake between receivers on one PostgreSQL (issue 29, DECISIONS 35): whatever one
//! receiver changes it announces with `pg_notify` in the same transaction (delivered at
//! commit, so a woken reader sees the change), and every receiver keeps one connection of
//! its own `LISTEN`ing, on a thread, calling back for each notification. When that
//! connection drops it reconnects with backoff, and meanwhile calls back on a short floor
//! so held polls re-read rather than wait for a wake that cannot come; after each
//! (re)connect it calls back once, for what was missed while it was down.
//!
//! What is announced: a session's key (a message queued for it), `machine:<id>` (an
//! envelope), `acks`, `settings`, `events` (a batch stored something new) and `snoozes`.
//!
//! Not wired yet: the store it wakes for (pg.rs) does not serve queries yet.
#![cfg_attr(not(test), allow(dead_code))]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use r2d2_postgres::postgres::fallible_iterator::FallibleIterator;
use r2d2_postgres::postgres::{Client, Error as PgError, GenericClient};

use super::pg_tls::{PgPool, PgTarget};

/// The channel every receiver listens on.
pub(crate) const CHANNEL: &str = "sp_receiver";
/// While the listening connection is down, waiters are woken this often to re-read.
pub(crate) const FLOOR: Duration = Duration::from_millis(250);
/// Reconnect attempts: the first after this, doubling up to `BACKOFF_MAX`.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How often the listening thread looks whether it should stop.
const STOP_CHECK: Duration = Duration::from_millis(200);

/// Why the callback ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wakeup {
    /// A receiver announced a change (the payload names what changed).
    Notified(String),
    /// Listening (again): anything may have changed meanwhile.
    Connected,
    /// The listening connection is down: re-read on the floor.
    Floor,
}

/// Announces a change to every receiver, at the commit of `tx` (or at once outside one).
pub(crate) fn announce(tx: &mut impl GenericClient, what: &str) -> Result<(), PgError> {
    tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &what])?;
    Ok(())
}

/// Announces this receiver's changes to the others after they are committed: the poll keys
/// touched (a session, `machine:<id>`, or `*`), behind this receiver's own id so that its
/// own listener can skip them.
pub(crate) struct Announcer {
    pub(super) pool: PgPool,
    pub(super) me: String,
}

/// PostgreSQL refuses a payload of 8,000 bytes or more: past this, "everything".
const PAYLOAD_MAX: usize = 7_900;

impl Announcer {
    /// This receiver's id in its announcements.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// Tells every receiver that `keys` changed (an empty list: only what the page shows),
    /// with the page's next version, which it returns: one number for all receivers (a
    /// sequence), so a page that one receiver answered and the next asks (a proxy spreads
    /// them) is held there, not answered at once because two counters differ. A failure is
    /// logged: the others then see the change at their next read (a held poll's deadline, a
    /// page's next request), nothing is lost.
    pub fn send(&self, keys: &[String]) -> Option<u64> {
        let mut keys = keys.join("\n");
        if keys.len() > PAYLOAD_MAX {
            keys = "*".into();
        }
        let sent = self
            .pool
            .get()
            .map_err(|e| e.to_string())
            .and_then(|mut c| {
                c.query_one(
                    "SELECT v, pg_notify($1, $2 || E'\\t' || v::text || E'\\t' || $3)
                     FROM (SELECT nextval('sp_page_version') AS v) AS next",
                    &[&CHANNEL, &self.me, &keys],
                )
                .map(|r| r.get::<_, i64>(0))
                .map_err(|e| e.to_string())
            });
        match sent {
            Ok(v) => u64::try_from(v).ok(),
            Err(e) => {
                tracing::warn!("cannot announce a change to the other receivers: {e}");
                None
            }
        }
    }

    /// The page's latest version across receivers (when announcements may have been missed).
    pub fn latest(&self) -> Option<u64> {
        let mut c = self.pool.get().ok()?;
        let v: i64 = c
            .query_one(
                "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM sp_page_version",
                &[],
            )
            .ok()?
            .get(0);
        u64::try_from(v).ok()
    }
}

/// An announcement: who sent it, the page's version it carries, the poll keys it touched.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Announcement {
    /// `None` for one without a sender (the queue's own, made inside its transaction).
    pub from: Option<String>,
    pub version: Option<u64>,
    pub keys: Vec<String>,
}

/// Reads an announcement: `FROM \t VERSION \t KEYS` (keys one a line) from
/// [`Announcer::send`], or bare keys from the stores' in-transaction ones.
pub(crate) fn parse(payload: &str) -> Announcement {
    let mut parts = payload.splitn(3, '\t');
    let (from, version, keys) = match (parts.next(), parts.next(), parts.next()) {
        (Some(from), Some(v), Some(keys)) => (Some(from.to_owned()), v.parse().ok(), keys),
        _ => (None, None, payload),
    };
    let keys = keys
        .split('\n')
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
        .collect();
    Announcement {
        from,
        version,
        keys,
    }
}

/// The listening thread; stopped (and joined) when dropped.
pub(crate) struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    pub fn start(target: PgTarget, on_wake: impl Fn(Wakeup) + Send + 'static) -> Listener {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("sp-pg-wake".into())
            .spawn(move || listen(&target, &stopping, &on_wake))
            .expect("spawning the wake thread");
        Listener {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn connect(target: &PgTarget) -> Result<Client, PgError> {
    let mut target = target.clone();
    target.config.application_name("sp-receiver wake");
    let mut client = target.connect()?;
    client.batch_execute(&format!("LISTEN {CHANNEL}"))?;
    Ok(client)
}

fn listen(target: &PgTarget, stop: &AtomicBool, on_wake: &dyn Fn(Wakeup)) {
    let stopped = || stop.load(Ordering::Relaxed);
    let mut backoff = BACKOFF_MIN;
    while !stopped() {
        match connect(target) {
            Ok(mut client) => {
                backoff = BACKOFF_MIN;
                on_wake(Wakeup::Connected);
                while !stopped() {
                    let next = client.notifications().timeout_iter(STOP_CHECK).next();
                    match next {
                        Ok(Some(n)) => on_wake(Wakeup::Notified(n.payload().to_string())),
                        Err(e) => {
                            tracing::warn!("the PostgreSQL wake connection dropped: {e}");
                            break;
                        }
                        Ok(None) if client.is_closed() => break,
                        Ok(None) => {}
                    }
                }
            }
            Err(e) => tracing::warn!(
                "cannot listen on PostgreSQL (retrying in {backoff:?}): {}",
                target.explain(&e)
            ),
        }
        // Down: re-read on the floor until the next attempt.
        let retry = Instant::now() + backoff;
        while !stopped() {
            on_wake(Wakeup::Floor);
            let left = retry.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(FLOOR));
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use r2d2_postgres::postgres::{Config, NoTls};

    use super::super::pg_cluster::Cluster;
    use super::*;

    fn wait_for(rx: &mpsc::Receiver<Wakeup>, want: &Wakeup) -> Duration {
        let t0 = Instant::now();
        loop {
            let left = Duration::from_secs(10).saturating_sub(t0.elapsed());
            match rx.recv_timeout(left) {
                Ok(w) if &w == want => return t0.elapsed(),
                Ok(_) => {}
                Err(e) => panic!("no {want:?} within 10 s: {e}"),
            }
        }
    }

    #[test]
    fn an_announcement_reads_as_sender_version_and_keys() {
        let a = parse("01KREC\t42\tcodex:s\nmachine:m1");
        assert_eq!(a.from.as_deref(), Some("01KREC"));
        assert_eq!(a.version, Some(42));
        assert_eq!(a.keys, ["codex:s", "machine:m1"]);
        // The stores' own, inside their transactions: bare keys, no version.
        let a = parse("machine:m1");
        assert_eq!(
            (a.from, a.version, a.keys),
            (None, None, vec!["machine:m1".to_owned()])
        );
        // Only the page changed.
        let a = parse("01KREC\t7\t");
        assert_eq!((a.version, a.keys.len()), (Some(7), 0));
    }

    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn a_change_announced_on_one_connection_wakes_the_listener_at_commit() {
        let pg = Cluster::start();
        let (tx, rx) = mpsc::channel();
        let _l = Listener::start(pg.url().parse().expect("url"), move |w| {
            let _ = tx.send(w);
        });
        wait_for(&rx, &Wakeup::Connected);
        let mut other: Client = pg.url().parse::<Config>().unwrap().connect(NoTls).unwrap();
        let mut t = other.transaction().unwrap();
        announce(&mut t, "session:s1").unwrap();
        // Not before the commit.
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "woken before the commit"
        );
        t.commit().unwrap();
        let took = wait_for(&rx, &Wakeup::Notified("session:s1".into()));
        assert!(took < Duration::from_secs(1), "{took:?}");

        // Commit on one connection → callback on the listener's thread, 200 times.
        let mut took: Vec<Duration> = (0..200)
            .map(|i| {
                let t0 = Instant::now();
                announce(&mut other, &format!("n{i}")).unwrap();
                wait_for(&rx, &Wakeup::Notified(format!("n{i}")));
                t0.elapsed()
            })
            .collect();
        took.sort();
        let (p50, p99) = (took[100], took[197]);
        eprintln!("pg wake: commit to callback p50 {p50:?}, p99 {p99:?} (200 rounds)");
        assert!(p50 < Duration::from_millis(50), "p50 {p50:?}");
    }

    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn a_dropped_connection_is_made_again_and_wakes_meanwhile() {
        let pg = Cluster::start();
        let (tx, rx) = mpsc::channel();
        let _l = Listener::start(pg.url().parse().expect("url"), move |w| {
            let _ = tx.send(w);
        });
        wait_for(&rx, &Wakeup::Connected);
        let killed = pg.psql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE application_name = 'sp-receiver wake'",
        );
        assert_eq!(killed, "1\n");
        wait_for(&rx, &Wakeup::Floor);
        wait_for(&rx, &Wakeup::Connected);
        pg.psql("SELECT pg_notify('sp_receiver', 'again')");
        wait_for(&rx, &Wakeup::Notified("again".into()));
    }

    #[test]
    fn with_no_database_waiters_are_woken_on_the_floor() {
        let (tx, rx) = mpsc::channel();
        let target: PgTarget = "postgres://sp@%2Fnonexistent-sp-socket/postgres"
            .parse()
            .unwrap();
        let _l = Listener::start(target, move |w| {
            let _ = tx.send(w);
        });
        let t0 = Instant::now();
        for _ in 0..6 {
            assert_eq!(
                rx.recv_timeout(Duration::from_secs(5))
                    .expect("a floor wake"),
                Wakeup::Floor
            );
        }
        // The first attempts back off briefly: their wakes come well within a floor each.
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    }
}
