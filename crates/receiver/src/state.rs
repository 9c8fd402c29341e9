//! Everything the receiver remembers: the database (events, queue, acks, page logins), held
//! in [`Shared::db`] with its own lock (SQLite) or pool (PostgreSQL) inside, never under the
//! state's lock; and, behind one mutex and one condvar, what it keeps in memory (the page's
//! version, what polls were told, what only tests look at: counters, the request log, queued
//! faults, rejected events). A slow or dead database so holds up only the calls that wait on
//! it, never `/healthz` or the polls of others.
//!
//! Every change a waiter could care about (a message enqueued or first taken by a poll, an
//! event or ack recorded, the receiver going down) bumps [`State::version`] and ends with
//! [`Shared::notify`], which wakes the held long polls (async tasks waiting on a `watch`) and
//! the in-process test API's waits (threads on a condvar).

use std::collections::HashMap;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use serde_json::{Map, Value};
use time::OffsetDateTime;

use crate::db::{Queued, Store};
use crate::limits::{LimitLog, LOGIN_BODY_BUDGET};
use crate::options::ReceiverOptions;
#[cfg(feature = "testing")]
use crate::options::{Fault, RequestRecord, Route};
use crate::validate::{format_ms_timestamp, parse_ms_timestamp};

/// The key a change that concerns every held poll touches (the Away switch, going down).
pub(crate) const ALL: &str = "*";
/// Database calls at once (see [`Shared::db_slots`]): one more than PostgreSQL's pool, so a
/// call that finds the pool spent waits there (bounded) and SQLite's calls queue on its lock.
const DB_SLOTS: usize = 9;
/// `/healthz`'s pings at once.
const HEALTH_SLOTS: usize = 2;
/// How long `/healthz` waits for the database's answer before it says 503.
pub(crate) const HEALTH_WAIT: std::time::Duration = std::time::Duration::from_millis(500);
/// Poll keys remembered in [`Marks`]; past this they are forgotten, as if all were touched.
const MARKS_MAX: usize = 10_000;

/// Which poll keys changed when: a held poll looks at the database again only when its key
/// (or every key) was touched since its last look, so one enqueue does not send every held
/// poll to SQLite. Behind its own small lock, never held across a database call.
#[derive(Default)]
pub(crate) struct Marks {
    seq: u64,
    all: u64,
    keys: HashMap<String, u64>,
}

impl Marks {
    fn touch(&mut self, keys: Vec<String>) {
        for k in keys {
            self.seq += 1;
            if k == ALL || (self.keys.len() >= MARKS_MAX && !self.keys.contains_key(&k)) {
                self.keys.clear();
                self.all = self.seq;
            } else {
                self.keys.insert(k, self.seq);
            }
        }
    }

    /// The latest mark: a look that starts now has seen everything up to it.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Whether `key` (or every key) was touched after `since`.
    pub fn changed_since(&self, key: &str, since: u64) -> bool {
        self.all > since || self.keys.get(key).is_some_and(|s| *s > since)
    }
}

/// Rejected events kept for inspection (the oldest are dropped past this).
const REJECTED_KEPT: usize = 1000;

/// Why a message was not queued.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The request was wrong (400, with this reason).
    Bad(String),
    /// The database failed (500).
    Db(anyhow::Error),
}

pub(crate) struct State {
    /// The page's version: moves on every change the page shows. On a shared database it is
    /// the shared sequence's (see [`State::bump`]).
    pub version: u64,
    /// Whether the database is shared (PostgreSQL): the version then moves only to the
    /// shared sequence's numbers.
    pub shared_db: bool,
    pub rejected: Vec<Value>,
    #[cfg(feature = "testing")]
    pub poll_sessions: Vec<String>,
    #[cfg(feature = "testing")]
    pub faults: HashMap<Route, VecDeque<Fault>>,
    #[cfg(feature = "testing")]
    pub requests: Vec<RequestRecord>,
    /// Bumped each time the receiver goes down; a request handler that was started under an
    /// older generation gives up without answering (its connection has been cut).
    pub generation: u64,
    pub stopped: bool,
    /// The poll keys (a session key, `machine:<id>`, or [`ALL`]) whose pending rows changed
    /// since the last [`Shared::notify`], which hands them to [`Shared::marks`].
    pub touched: Vec<String>,
    /// The Away word each poller (a session key, or `machine:<id>`) was last told: a poll
    /// from one that has not heard the current word is answered at once (DECISIONS 27).
    pub away_told: HashMap<String, bool>,
    /// The push worker's handle (push.rs): notices go to it, never a wait.
    pub pusher: Option<crate::push::Pusher>,
    /// DECISIONS 39, the receiver's own policy before it queues a start: when each login's
    /// starts of the last hour were queued (in memory: the machine's caps are the gate).
    pub starts: HashMap<String, VecDeque<i64>>,
    /// DECISIONS 39: per page login (the SHA-256 of its cookie), when it uploaded each start
    /// file of the last hour (in memory, like `starts`).
    pub uploads: HashMap<String, VecDeque<i64>>,
    /// DECISIONS 39: what each machine's last hello said it can start (harnesses, folders).
    pub can_start: HashMap<String, Value>,
}

pub(crate) struct Shared {
    /// The options, fixed for the receiver's life.
    pub opts: Arc<ReceiverOptions>,
    /// The database: each call takes the store's own lock or a pooled connection.
    pub db: Box<dyn Store>,
    pub state: Mutex<State>,
    pub changed: Condvar,
    /// Bumped with every notify: what held requests (async) wait on.
    pub watch: tokio::sync::watch::Sender<u64>,
    /// `POST {events}` requests seen (any status, faults included).
    pub event_posts: AtomicUsize,
    /// Control poll requests seen (any status, faults included).
    pub polls: AtomicUsize,
    /// Control polls held now: each looked, found nothing, and waits for a change.
    pub held: AtomicUsize,
    /// Database calls running at once: a few, so a herd of held polls waking together does
    /// not grow a thread for each.
    pub db_slots: tokio::sync::Semaphore,
    /// `/healthz`'s pings running at once (apart from [`Shared::db_slots`]).
    pub health_slots: Arc<tokio::sync::Semaphore>,
    /// Which held polls have something new to look at.
    pub marks: Mutex<Marks>,
    /// Where limits hit are logged (throttled).
    pub limits: LimitLog,
    /// Request bodies in flight, in KiB: each read first takes its size from here.
    pub bodies: Arc<tokio::sync::Semaphore>,
    /// `POST /login` bodies in flight, in KiB (anyone's: apart from [`Shared::bodies`]).
    pub login_bodies: Arc<tokio::sync::Semaphore>,
    /// The bound address (`127.0.0.1:PORT` for tests), fixed for the receiver's life
    /// (set_down/up rebinds the same port).
    pub addr: SocketAddr,
    /// On a shared (PostgreSQL) database: how this receiver tells the others what changed.
    pub announcer: std::sync::OnceLock<crate::db::Announcer>,
}

impl Shared {
    pub fn new(opts: ReceiverOptions, db: Box<dyn Store>, addr: SocketAddr) -> Shared {
        // Never below one body of the largest cap, or that body could never be read.
        let budget_kib = opts.body_budget.max(opts.max_bytes).max(1 << 20) / 1024 + 1;
        let opts = Arc::new(opts);
        Shared {
            opts,
            db,
            bodies: Arc::new(tokio::sync::Semaphore::new(budget_kib)),
            login_bodies: Arc::new(tokio::sync::Semaphore::new(LOGIN_BODY_BUDGET / 1024)),
            state: Mutex::new(State {
                version: 1,
                shared_db: false,
                rejected: Vec::new(),
                #[cfg(feature = "testing")]
                poll_sessions: Vec::new(),
                #[cfg(feature = "testing")]
                faults: HashMap::new(),
                #[cfg(feature = "testing")]
                requests: Vec::new(),
                generation: 0,
                stopped: false,
                touched: Vec::new(),
                away_told: HashMap::new(),
                starts: HashMap::new(),
                uploads: HashMap::new(),
                can_start: HashMap::new(),
                pusher: None,
            }),
            changed: Condvar::new(),
            watch: tokio::sync::watch::Sender::new(0),
            event_posts: AtomicUsize::new(0),
            polls: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            db_slots: tokio::sync::Semaphore::new(DB_SLOTS),
            health_slots: Arc::new(tokio::sync::Semaphore::new(HEALTH_SLOTS)),
            marks: Mutex::new(Marks::default()),
            limits: Default::default(),
            addr,
            announcer: std::sync::OnceLock::new(),
        }
    }

    /// Locks the state; a panic in another thread while holding the lock does not make
    /// the receiver unusable (the data is plain records).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes every waiter (held requests and the test API's waits) to look again, here and,
    /// on a shared database, on every other receiver (after the change is committed).
    pub fn notify(&self) {
        let touched = std::mem::take(&mut self.lock().touched);
        if let Some(a) = self.announcer.get() {
            let shared_version = a.send(&touched);
            let mut st = self.lock();
            match shared_version {
                Some(v) => st.catch_up(v),
                // Not announced (the database is failing): the page here still moves.
                None => st.version = st.version.wrapping_add(1),
            }
        }
        self.wake_local(touched);
    }

    /// What another receiver announced, or (`version` None, `keys` `*`) what may have been
    /// missed: the page's version moves up to the announced one and the polls of `keys` look
    /// again.
    pub fn remote_change(&self, version: Option<u64>, keys: Vec<String>) {
        if let Some(v) = version {
            self.lock().catch_up(v);
        }
        self.wake_local(keys);
    }

    /// Wakes this receiver's waiters only: `touched` poll keys look again.
    pub fn wake_local(&self, touched: Vec<String>) {
        if !touched.is_empty() {
            self.marks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .touch(touched);
        }
        self.changed.notify_all();
        self.watch.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Whether the receiver is still up in `generation` (not gone down or stopped since).
    #[cfg(feature = "testing")]
    pub fn same_generation(&self, generation: u64) -> bool {
        !self.lock().cut_since(generation)
    }

    /// Runs `f` here (it may block: see [`Shared::with_db`]); wakes every waiter afterwards
    /// when `f` changed something ([`Ctx::bump`]).
    pub fn run<T>(&self, f: impl FnOnce(&mut Ctx<'_>) -> T) -> T {
        let mut ctx = Ctx {
            db: &*self.db,
            opts: &self.opts,
            shared: self,
            changed: false,
        };
        let out = f(&mut ctx);
        if ctx.changed {
            self.notify();
        }
        out
    }

    /// Runs `f` on a thread for blocking work (the database), never on an async worker, and
    /// without the state's lock: `f` takes it only for what it keeps in memory
    /// ([`Ctx::mem`]); wakes every waiter afterwards when `f` changed something.
    pub async fn with_db<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut Ctx<'_>) -> T + Send + 'static,
    ) -> T {
        // Never closed, so a slot always comes.
        let _slot = self.db_slots.acquire().await;
        let shared = self.clone();
        let joined = tokio::task::spawn_blocking(move || shared.run(f)).await;
        match joined {
            Ok(v) => v,
            // A panic in `f` is a bug: the request fails, the receiver goes on.
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}

/// What every handler gets: the shared state and the serving generation it was accepted
/// under (a request of an older generation is cut, never answered).
#[derive(Clone)]
pub(crate) struct AppState {
    pub shared: Arc<Shared>,
    pub generation: u64,
}

/// The receiver's clock: the real UTC time shifted by `clock_offset_ms`, truncated to
/// milliseconds (the wire precision).
fn clock(opts: &ReceiverOptions) -> OffsetDateTime {
    let t = OffsetDateTime::now_utc() + time::Duration::milliseconds(opts.clock_offset_ms);
    t.replace_millisecond(t.millisecond()).unwrap_or(t)
}

fn ms(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

/// What a database call gets: the store, the options, and the state's lock for the moment
/// it needs what is kept in memory ([`Ctx::mem`]; never held across a call of the store).
pub(crate) struct Ctx<'a> {
    pub db: &'a dyn Store,
    pub opts: &'a ReceiverOptions,
    shared: &'a Shared,
    changed: bool,
}

impl Ctx<'_> {
    /// What is kept in memory, locked until the guard is dropped.
    pub fn mem(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// The receiver's clock.
    pub fn now(&self) -> OffsetDateTime {
        clock(self.opts)
    }

    /// The receiver's clock in Unix milliseconds.
    pub fn now_ms(&self) -> i64 {
        ms(self.now())
    }

    /// Records a change the page (and other waiters) should see: waiters are woken when
    /// the call ends.
    pub fn bump(&mut self) {
        self.mem().bump();
        self.changed = true;
    }

    /// Marks `key`'s polls to look again (at the end of the call).
    pub fn touch(&mut self, key: String) {
        self.mem().touched.push(key);
    }

    /// Messages of `session` that are neither acked nor expired, oldest first.
    pub fn pending(&mut self, session: &str) -> anyhow::Result<Vec<Value>> {
        Ok(self
            .pending_rows(session)?
            .into_iter()
            .map(|q| q.body)
            .collect())
    }

    /// Like [`Ctx::pending`], with each message's row number.
    pub fn pending_rows(&mut self, session: &str) -> anyhow::Result<Vec<Queued>> {
        let now = self.now_ms();
        self.db.pending(session, now)
    }

    pub fn push_rejected(&mut self, entry: Value) {
        self.mem().push_rejected(entry);
    }

    /// Builds the full message from a partial one (see `Receiver::enqueue`) and queues it.
    /// Without `expires_in_s` it expires `default_expiry_ms` after `at`.
    pub fn enqueue(
        &mut self,
        session: &str,
        partial: &Map<String, Value>,
        default_expiry_ms: i64,
    ) -> Result<Value, Refused> {
        let now = self.now();
        let expires_ms = match partial.get("expires_in_s") {
            None | Some(Value::Null) => default_expiry_ms,
            Some(v) => {
                let s = v
                    .as_f64()
                    .ok_or_else(|| Refused::Bad("expires_in_s must be a number".into()))?;
                if !s.is_finite() || s.abs() > 1e12 {
                    return Err(Refused::Bad("expires_in_s out of range".into()));
                }
                (s * 1000.0).round() as i64
            }
        };
        let mut out = Map::new();
        let id = match partial.get("id") {
            Some(Value::String(s)) => s.clone(),
            _ => ulid::Ulid::new().to_string(),
        };
        out.insert("id".into(), Value::String(id));
        for (k, v) in partial {
            if !matches!(k.as_str(), "id" | "at" | "expires_at" | "expires_in_s") {
                out.insert(k.clone(), v.clone());
            }
        }
        let at = match partial.get("at") {
            Some(Value::String(s)) => s.clone(),
            _ => format_ms_timestamp(now),
        };
        let expires_at = match partial.get("expires_at") {
            Some(Value::String(s)) => s.clone(),
            _ => format_ms_timestamp(now + time::Duration::milliseconds(expires_ms)),
        };
        out.insert("at".into(), Value::String(at));
        out.insert("expires_at".into(), Value::String(expires_at));
        let value = Value::Object(out);
        self.enqueue_raw(session, value.clone())
            .map_err(Refused::Db)?;
        Ok(value)
    }

    /// Queues exactly this value. It expires at its `expires_at` when that parses (the strict
    /// wire form, else any RFC 3339), never otherwise.
    pub fn enqueue_raw(&mut self, session: &str, value: Value) -> anyhow::Result<()> {
        let expires = value
            .get("expires_at")
            .and_then(Value::as_str)
            .and_then(|s| {
                parse_ms_timestamp(s).or_else(|| {
                    OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
                })
            });
        let expires_ms = expires.map(|e| (e.unix_timestamp_nanos() / 1_000_000) as i64);
        let now = self.now_ms();
        self.db.insert_message(session, &value, expires_ms, now)?;
        self.touch(session.to_owned());
        self.bump();
        Ok(())
    }

    /// Whether signed control is on (control offered and an rp id declared).
    pub fn signed(&self) -> bool {
        self.has_control() && self.opts.rp_id.is_some()
    }

    /// The base pairing links start with: `public_url`, else `http://localhost:PORT`.
    pub fn page_base(&self, port: u16) -> String {
        match &self.opts.public_url {
            Some(u) => u.trim_end_matches('/').to_owned(),
            None => format!("http://localhost:{port}"),
        }
    }

    pub fn has_control(&self) -> bool {
        self.opts.capabilities.iter().any(|c| c == "control")
    }

    /// Hands a notice to the push worker (push.rs).
    pub fn notify(&self, notice: crate::push::Notice) {
        if let Some(p) = &self.mem().pusher {
            p.notify(notice);
        }
    }
}

impl State {
    /// Records a change the page should see. On a shared database the version becomes the
    /// shared one when the change is announced ([`Shared::notify`]).
    fn bump(&mut self) {
        if !self.shared_db {
            self.version = self.version.wrapping_add(1);
        }
    }

    /// The page's version on a shared database: the latest of every receiver's changes
    /// (never back: a page holding a newer number is answered at once, as after a restart).
    pub fn catch_up(&mut self, shared_version: u64) {
        self.version = self.version.max(shared_version);
    }

    pub fn push_rejected(&mut self, entry: Value) {
        if self.rejected.len() >= REJECTED_KEPT {
            self.rejected.remove(0);
        }
        self.rejected.push(entry);
    }

    /// Whether the receiver went down or stopped since `generation` (a request accepted
    /// then is cut, never answered).
    pub fn cut_since(&self, generation: u64) -> bool {
        self.generation != generation || self.stopped
    }

    #[cfg(feature = "testing")]
    pub fn take_fault(&mut self, route: Route) -> Option<Fault> {
        self.faults.get_mut(&route).and_then(VecDeque::pop_front)
    }
}

/// The push worker's view of the receiver: its database, one call at a time (never while
/// a push is sent). Weak, so the worker does not keep a
/// stopped receiver alive.
pub(crate) struct PushView(pub std::sync::Weak<Shared>);

impl crate::push::PushStore for PushView {
    fn away(&self) -> bool {
        self.0
            .upgrade()
            .is_some_and(|s| s.db.away().unwrap_or(false))
    }

    fn subscriptions(&self, withdrawal: bool) -> Vec<crate::push::Subscription> {
        let Some(s) = self.0.upgrade() else {
            return Vec::new();
        };
        let (devices, now) = (s.db.push_devices().unwrap_or_default(), ms(clock(&s.opts)));
        devices
            .into_iter()
            .filter(|d| withdrawal || d.hears(now))
            .map(|d| d.sub)
            .collect()
    }

    fn has_quiet_devices(&self) -> bool {
        let Some(s) = self.0.upgrade() else {
            return false;
        };
        let (devices, now) = (s.db.push_devices().unwrap_or_default(), ms(clock(&s.opts)));
        devices.iter().any(|d| !d.hears(now))
    }

    fn ntfy(&self) -> Option<crate::push::Ntfy> {
        let s = self.0.upgrade()?;
        let url = s.db.setting("ntfy_url").ok().flatten()?;
        let token = s.db.setting("ntfy_token").ok().flatten();
        let content = s.db.setting("ntfy_content").ok().flatten().as_deref() == Some("1");
        Some(crate::push::Ntfy {
            url,
            token,
            content,
        })
    }

    fn vapid(&self) -> Option<crate::push::Vapid> {
        let s = self.0.upgrade()?;
        s.run(|c| vapid_of(c).ok())
    }

    fn page_url(&self) -> String {
        let Some(s) = self.0.upgrade() else {
            return String::new();
        };
        let public = s.opts.public_url.clone();
        public.unwrap_or_else(|| format!("http://{}", s.addr))
    }

    fn contact(&self) -> String {
        let url = self.page_url();
        if url.starts_with("https://") {
            url
        } else {
            "mailto:sp-receiver@localhost".into()
        }
    }

    fn drop_subscription(&self, endpoint: &str) {
        if let Some(s) = self.0.upgrade() {
            s.run(|c| {
                if c.db.push_remove(endpoint).unwrap_or(false) {
                    c.bump();
                }
            });
        }
    }

    fn claim(&self, key: &str) -> bool {
        let Some(s) = self.0.upgrade() else {
            return false;
        };
        let now = ms(clock(&s.opts));
        // A claim the database could not take: sent anyway (twice beats never).
        s.db.claim_push(key, now).unwrap_or_else(|e| {
            tracing::warn!("push claim {key}: {e}; sending anyway");
            true
        })
    }

    fn claimed(&self, key: &str) -> bool {
        self.0
            .upgrade()
            .is_some_and(|s| s.db.push_claimed(key).unwrap_or(false))
    }

    fn put_off(&self, session: &str, attention_id: &str) -> bool {
        let Some(s) = self.0.upgrade() else {
            return false;
        };
        let now = ms(clock(&s.opts));
        s.db.snoozed(session, attention_id, now).unwrap_or(false)
    }

    fn record(&self, target: &str, what: &str, result: &str) {
        if let Some(s) = self.0.upgrade() {
            s.run(|c| {
                let now = c.now_ms();
                if c.db.push_record(target, what, result, now).is_ok() {
                    c.bump();
                }
            });
        }
    }
}

/// This receiver's VAPID key pair, made the first time it is asked for.
pub(crate) fn vapid_of(st: &mut Ctx<'_>) -> anyhow::Result<crate::push::Vapid> {
    if let Some(v) = st
        .db
        .setting("vapid")?
        .and_then(|s| crate::push::Vapid::from_secret(&s))
    {
        return Ok(v);
    }
    let v = crate::push::Vapid::generate();
    // Receivers sharing the database making one at once: the first stored is everyone's
    // (pages subscribe with its public key); one stored that no longer reads is replaced.
    let now = st.now_ms();
    let kept = st.db.first_setting("vapid", &v.secret(), now)?;
    if let Some(kept) = crate::push::Vapid::from_secret(&kept) {
        return Ok(kept);
    }
    st.db.set_setting("vapid", Some(&v.secret()), now)?;
    Ok(v)
}
