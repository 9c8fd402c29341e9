//! One interface, two stores (issue 29, DECISIONS 35): what the receiver asks of its
//! database, implemented by SQLite (`Sqlite`, the default) and PostgreSQL (`PgStore`), with
//! the same SQL text (PostgreSQL's through dialect.rs) and the same tests, which run here
//! against both. Every method is `&self`: the store holds its own lock (SQLite) or pool
//! (PostgreSQL), never the receiver's state lock. Every area is written once over the
//! driver seam (driver.rs: `impl<E: Engine>`), the engines differing only in the seam's
//! methods.
//!
//! Every area: the control queue and its acks, logins, settings, pairing, push devices,
//! events and the page's view of them, "Not now", and upkeep (sweep, what the test door
//! reads); so both stores are a whole [`Store`] (checked at build below). Where the engines
//! must differ, the seam says how: per-session locks for ingest (`Conn::lock_sessions`),
//! the page read in one snapshot (`Engine::snapshot`), a NUL in an attention's fields kept
//! as U+FFFD (PostgreSQL's text holds none: `Conn::text`). The JSON inside stored bodies is
//! read in Rust for both (sessions.rs), not by either engine's JSON functions.
//!
//! The tests run one body per area on both stores; `a_day_shows_the_same_on_both_stores`
//! feeds one realistic day to each and compares all they show as JSON, before and after a
//! sweep; and two PostgreSQL stores store the same events at once.
#![cfg_attr(not(test), allow(dead_code))]

use serde_json::Value;

use super::pg::PgStore;
use super::{
    Approval, LatestMachine, LoginKey, Machine, NewPairing, Pairing, Queued, SessionOwner, Snooze,
    Sqlite, Stored,
};
use crate::push::{Device, QuietHours, Subscription};
use spwire::signed::TrustedKey;

/// The control queue: unsigned messages per session, signed envelopes per machine, each
/// served until its first ack or its expiry (queue.rs says what each does).
pub(crate) trait QueueStore {
    fn insert_message(
        &self,
        session: &str,
        value: &Value,
        expires_ms: Option<i64>,
        now_ms: i64,
    ) -> anyhow::Result<()>;
    fn insert_envelope(
        &self,
        machine: &str,
        session: &str,
        kind: &str,
        value: &Value,
        expires_ms: i64,
        now_ms: i64,
    ) -> anyhow::Result<()>;
    fn pending(&self, session: &str, now_ms: i64) -> anyhow::Result<Vec<Queued>>;
    fn machine_pending(&self, machine: &str, now_ms: i64) -> anyhow::Result<Vec<Queued>>;
    fn mark_polled(&self, rows: &[i64], now_ms: i64) -> anyhow::Result<usize>;
    fn next_expiry(&self, now_ms: i64) -> anyhow::Result<Option<i64>>;
    fn insert_acks(&self, acks: &[Value], now_ms: i64) -> anyhow::Result<()>;
    fn first_ack(&self, id: &str) -> anyhow::Result<Option<Value>>;
    fn message_session(&self, id: &str) -> anyhow::Result<Option<String>>;
    fn message_machine(&self, id: &str) -> anyhow::Result<Option<Option<String>>>;
    fn put_file(
        &self,
        machine: &str,
        sha256: &str,
        body_b64: &str,
        expires_ms: i64,
    ) -> anyhow::Result<()>;
    fn file(&self, machine: &str, sha256: &str, now_ms: i64) -> anyhow::Result<Option<String>>;
}

/// Page logins (logins.rs, written once over the driver seam).
pub(crate) trait LoginStore {
    fn add_login(&self, hash: &str, token_fp: &str, now_ms: i64) -> anyhow::Result<()>;
    fn login_valid(&self, login: LoginKey<'_>) -> anyhow::Result<bool>;
    fn remove_login(&self, hash: &str) -> anyhow::Result<()>;
    /// A valid login's CSRF secret, set to `fresh` the first time (by whichever receiver
    /// asks first); `None`: no such login (as [`LoginStore::login_valid`]).
    fn login_csrf(&self, login: LoginKey<'_>, fresh: &str) -> anyhow::Result<Option<String>>;
    /// Takes a login attempt from `client`'s allowance and the overall one (limits.rs);
    /// `Err(s)`: none is allowed for `s` seconds.
    fn take_login_attempt(&self, client: &str, now_ms: i64) -> anyhow::Result<Result<(), u64>>;
    /// A login that succeeded gives its attempt back (only guesses count).
    fn give_back_login_attempt(&self, client: &str, now_ms: i64) -> anyhow::Result<()>;
}

/// Named settings (settings.rs, written once over the driver seam).
pub(crate) trait SettingStore {
    fn away(&self) -> anyhow::Result<bool>;
    fn set_away(&self, away: bool, now_ms: i64) -> anyhow::Result<()>;
    fn setting(&self, name: &str) -> anyhow::Result<Option<String>>;
    fn set_setting(&self, name: &str, value: Option<&str>, now_ms: i64) -> anyhow::Result<()>;
    /// Sets a setting unless it is set (by any receiver); the value it then has.
    fn first_setting(&self, name: &str, value: &str, now_ms: i64) -> anyhow::Result<String>;
}

/// Pairing a machine (machines.rs, written once over the driver seam): a code made through one receiver may be approved and
/// its token taken through another.
pub(crate) trait PairingStore {
    fn machine_known(&self, id: &str) -> anyhow::Result<bool>;
    fn machine_by_token(&self, hash: &str) -> anyhow::Result<Option<String>>;
    fn create_pairing(&self, pairing: &NewPairing<'_>, now_ms: i64) -> anyhow::Result<()>;
    fn pairing(&self, code: &str) -> anyhow::Result<Option<Pairing>>;
    fn approve_pairing(&self, code: &str, a: &Approval<'_>, now_ms: i64) -> anyhow::Result<bool>;
    fn give_token(&self, code: &str, token_hash: &str) -> anyhow::Result<bool>;
    fn machine_keys(&self, machine: &str) -> anyhow::Result<Vec<TrustedKey>>;
    fn latest_machine(&self) -> anyhow::Result<Option<LatestMachine>>;
    fn machines(&self) -> anyhow::Result<Vec<Machine>>;
    fn remove_machine(&self, id: &str) -> anyhow::Result<bool>;
    /// Whether a session is bound to machine `id` (a removed machine's too).
    fn machine_has_sessions(&self, id: &str) -> anyhow::Result<bool>;
    /// The machine came with its token at `now_ms` (the page shows its last contact):
    /// written only when the last one stored is older than a few seconds
    /// ([`super::SEEN_EVERY_MS`]), so a busy poller does not write on every request.
    /// Whether it was written.
    fn machine_seen(&self, id: &str, now_ms: i64) -> anyhow::Result<bool>;
}

/// The devices pushed to and what each push did (push.rs).
pub(crate) trait PushStore {
    fn push_subscribe(
        &self,
        sub: &Subscription,
        name: Option<&str>,
        now_ms: i64,
    ) -> anyhow::Result<Option<String>>;
    fn push_devices(&self) -> anyhow::Result<Vec<Device>>;
    fn push_remove(&self, id_or_endpoint: &str) -> anyhow::Result<bool>;
    fn push_set_quiet(&self, id: &str, quiet: bool) -> anyhow::Result<bool>;
    fn push_set_quiet_hours(&self, id: &str, hours: Option<&QuietHours>) -> anyhow::Result<bool>;
    fn push_record(
        &self,
        target: &str,
        what: &str,
        result: &str,
        now_ms: i64,
    ) -> anyhow::Result<()>;
    fn push_log(&self, limit: i64) -> anyhow::Result<Vec<Value>>;
    /// Claims the push `key` names (one per prompt, its withdrawal, a turn's end, a failed
    /// message): true for the one receiver whose claim took, which alone sends it.
    fn claim_push(&self, key: &str, now_ms: i64) -> anyhow::Result<bool>;
    /// Whether the push `key` names was claimed (by any receiver).
    fn push_claimed(&self, key: &str) -> anyhow::Result<bool>;
}

/// Events as they arrive and the page's view built from them (events.rs, sessions.rs;
/// written once over the driver seam).
pub(crate) trait EventStore {
    fn insert_events(
        &self,
        events: &[&Value],
        now_ms: i64,
        machine: Option<&str>,
    ) -> anyhow::Result<Vec<Stored>>;
    fn page_sessions(&self, now_ms: i64, live_ms: i64) -> anyhow::Result<Vec<Value>>;
    fn session_machine(&self, key: &str) -> anyhow::Result<Option<Option<String>>>;
    /// The machine a session is bound to (a removed one's too) and whether it is paired.
    fn session_owner(&self, key: &str) -> anyhow::Result<Option<SessionOwner>>;
}

/// Prompts put off with "Not now" (snoozes.rs).
pub(crate) trait SnoozeStore {
    fn snooze(
        &self,
        session: &str,
        attention_id: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> anyhow::Result<Snooze>;
    fn snoozes(&self, now_ms: i64) -> anyhow::Result<Vec<Value>>;
    fn snoozed(&self, session: &str, attention_id: &str, now_ms: i64) -> anyhow::Result<bool>;
    fn next_snooze_end(&self, now_ms: i64) -> anyhow::Result<Option<i64>>;
}

/// Upkeep and what the test door reads: the health check's read, forgetting old rows, and
/// every event and ack as stored.
pub(crate) trait Upkeep {
    fn ping(&self) -> anyhow::Result<()>;
    fn sweep(&self, now_ms: i64, keep_ms: i64) -> anyhow::Result<usize>;
    fn events(&self) -> anyhow::Result<Vec<Value>>;
    fn acks(&self) -> anyhow::Result<Vec<Value>>;
}

/// Everything the receiver asks of its database: what `State` holds, either store.
pub(crate) trait Store:
    QueueStore
    + LoginStore
    + SettingStore
    + PairingStore
    + PushStore
    + EventStore
    + SnoozeStore
    + Upkeep
    + Send
    + Sync
{
}

impl<T> Store for T where
    T: QueueStore
        + LoginStore
        + SettingStore
        + PairingStore
        + PushStore
        + EventStore
        + SnoozeStore
        + Upkeep
        + Send
        + Sync
{
}

// Both stores are whole stores, what `State` may hold (checked at every build).
const _: fn(Sqlite) -> Box<dyn Store> = |s| Box::new(s);
const _: fn(PgStore) -> Box<dyn Store> = |s| Box::new(s);

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::pg::PgStore;
    use super::super::pg_cluster::Cluster;
    use super::super::{fmt_ms, Db};
    use super::*;

    const ID: &str = "01K6ZZZZZZZZZZZZZZZZZZZZZZ";

    /// A login as a request names it.
    fn login<'a>(hash: &'a str, token_fp: &'a str, since_ms: i64) -> LoginKey<'a> {
        LoginKey {
            hash,
            token_fp,
            since_ms,
        }
    }

    /// A pairing as the pairing route makes it.
    fn pairing<'a>(
        code: &'a str,
        machine: &'a str,
        check: &'a str,
        name: Option<&'a str>,
        expires_ms: i64,
    ) -> NewPairing<'a> {
        NewPairing {
            code,
            machine,
            check,
            name,
            expires_ms,
        }
    }

    /// The queue's behaviour, whichever store keeps it.
    fn queue_behaviour(s: &dyn QueueStore) {
        let now = 1_800_000_000_000;
        let m = json!({"id": ID, "kind": "prompt", "text": "hi"});
        s.insert_message("codex:s", &m, Some(now + 1000), now)
            .unwrap();
        s.insert_message("codex:s", &json!({"kind": "note"}), None, now)
            .unwrap();
        let p = s.pending("codex:s", now).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].body, m);
        assert!(p[0].n < p[1].n, "oldest first");
        assert_eq!(s.mark_polled(&[p[0].n, p[1].n], now).unwrap(), 2);
        assert_eq!(s.mark_polled(&[p[0].n], now).unwrap(), 0);
        assert_eq!(
            s.pending("codex:s", now + 1000).unwrap().len(),
            1,
            "expired"
        );
        assert_eq!(s.next_expiry(now).unwrap(), Some(now + 1000));
        assert_eq!(s.message_session(ID).unwrap().as_deref(), Some("codex:s"));
        assert_eq!(s.message_machine(ID).unwrap(), Some(None));
        assert_eq!(s.message_machine("nope").unwrap(), None);

        let ack = |outcome: &str| json!({"id": ID, "outcome": outcome, "at": "x"});
        s.insert_acks(&[ack("delivered"), ack("failed")], now)
            .unwrap();
        assert_eq!(s.pending("codex:s", now).unwrap().len(), 1, "acked");
        assert_eq!(s.first_ack(ID).unwrap().unwrap()["outcome"], "delivered");
        assert_eq!(s.first_ack("nope").unwrap(), None);
        assert_eq!(s.next_expiry(now).unwrap(), None);

        let e = json!({"id": "E1", "v": 1});
        s.insert_envelope("m1", "codex:s", "prompt", &e, now + 5, now)
            .unwrap();
        assert_eq!(s.machine_pending("m1", now).unwrap()[0].body, e);
        assert!(s.machine_pending("m2", now).unwrap().is_empty());
        assert!(s.machine_pending("m1", now + 5).unwrap().is_empty());
        assert_eq!(
            s.pending("codex:s", now).unwrap().len(),
            1,
            "not the envelope"
        );
        assert_eq!(s.message_machine("E1").unwrap(), Some(Some("m1".into())));
    }

    /// DECISIONS 38, whichever store keeps it: a `taken` holds a message back from the polls
    /// for 35 minutes, is no final ack, and the page shows the newest interim ack until the
    /// final one, with its `mode` and `reply`; an ack without them (an older sender) reads
    /// as before.
    fn taken_behaviour(s: &dyn Store) {
        const T: &str = "01K6TAKEN00000000000000000";
        const OLD: &str = "01K6OLDSENDER0000000000000";
        let now = 1_800_000_000_000;
        let key = "claude-code:t1";
        let started = cc(
            "t1",
            0,
            "session.started",
            json!({}),
            json!({"source": "startup"}),
        );
        s.insert_events(&[&started], now, None).unwrap();
        for id in [T, OLD] {
            let m = json!({"id": id, "kind": "prompt", "text": format!("do {id}")});
            s.insert_message(key, &m, Some(now + 3_600_000), now)
                .unwrap();
        }
        assert_eq!(s.pending(key, now).unwrap().len(), 2);
        let ack = |id: &str, more: Value| {
            let mut a = json!({"id": id, "at": "2027-01-15T08:00:00.000Z"});
            a.as_object_mut()
                .unwrap()
                .extend(more.as_object().unwrap().clone());
            a
        };
        s.insert_acks(&[ack(T, json!({"outcome": "taken"}))], now)
            .unwrap();
        s.insert_acks(&[ack(OLD, json!({"outcome": "delivered"}))], now)
            .unwrap();
        assert!(s.pending(key, now).unwrap().is_empty(), "taken: not served");
        assert!(s.pending(key, now + 35 * 60_000 - 1).unwrap().is_empty());
        let later = s.pending(key, now + 35 * 60_000).unwrap();
        assert_eq!(later.len(), 1, "served again after 35 minutes");
        assert_eq!(later[0].body["id"], T);
        assert_eq!(s.first_ack(T).unwrap(), None, "taken is not final");
        let shown = |s: &dyn Store, id: &str| -> Value {
            let page = s.page_sessions(now, 3_600_000).unwrap();
            let ses = page.iter().find(|x| x["key"] == key).expect("the session");
            ses["messages"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["id"] == id)
                .cloned()
                .unwrap()
        };
        assert_eq!(shown(s, T)["status"], "taken");
        s.insert_acks(
            &[ack(
                T,
                json!({"outcome": "progress", "seq": 1, "reply": "Running"}),
            )],
            now + 1,
        )
        .unwrap();
        let m = shown(s, T);
        assert_eq!(
            (&m["status"], &m["ack_reply"]),
            (&json!("progress"), &json!("Running"))
        );
        s.insert_acks(
            &[ack(
                T,
                json!({"outcome": "delivered", "mode": "turn", "reply": "All done.\nNo errors."}),
            )],
            now + 2,
        )
        .unwrap();
        // A late interim ack changes nothing once the final one is in.
        s.insert_acks(
            &[ack(
                T,
                json!({"outcome": "progress", "seq": 2, "reply": "late"}),
            )],
            now + 3,
        )
        .unwrap();
        let m = shown(s, T);
        assert_eq!(
            (&m["status"], &m["ack_mode"], &m["ack_reply"]),
            (
                &json!("delivered"),
                &json!("turn"),
                &json!("All done.\nNo errors.")
            )
        );
        assert_eq!(
            s.first_ack(T).unwrap().unwrap()["reply"],
            "All done.\nNo errors."
        );
        assert!(
            s.pending(key, now + 36 * 60_000).unwrap().is_empty(),
            "final"
        );
        let old = shown(s, OLD);
        assert_eq!(old["status"], "delivered");
        assert!(
            old.get("ack_reply").is_none() && old.get("ack_mode").is_none(),
            "{old}"
        );
    }

    /// DECISIONS 39: a start's file is served to the machine it was kept for only, until it
    /// expires (the later expiry when kept twice), and a sweep after that removes it.
    fn files_behaviour(s: &dyn Store) {
        let now = 1_000_000;
        s.put_file("m1", "h", "aGk=", now + 10).unwrap();
        s.put_file("m1", "h", "aGk=", now + 5).unwrap();
        assert_eq!(
            s.file("m1", "h", now + 10).unwrap().as_deref(),
            Some("aGk=")
        );
        assert_eq!(s.file("m2", "h", now).unwrap(), None, "another machine's");
        assert_eq!(s.file("m1", "h", now + 11).unwrap(), None, "expired");
        s.sweep(now + 10, 3_600_000).unwrap();
        assert!(s.file("m1", "h", now).unwrap().is_some(), "not yet expired");
        s.sweep(now + 11, 3_600_000).unwrap();
        assert_eq!(s.file("m1", "h", now).unwrap(), None, "swept");
    }

    /// DECISIONS 39, whichever store keeps it: a prompt announced again with `parked_until`
    /// stays open with it (asked when first asked) and makes its session parked, until then
    /// and not after; one asked without it carries none.
    fn parked_behaviour(s: &dyn Store) {
        let now = 1_800_000_000_000;
        let t0 = now - 3_600_000;
        let until = now + 23 * 3_600_000;
        let parked = |id: &str| {
            let mut d = needed(id);
            d["parked_until"] = json!(fmt_ms(until));
            d
        };
        let page = |at: i64| s.page_sessions(at, 60_000).unwrap();
        s.insert_events(
            &[&cc("k", 1, "attention.needed", json!({}), needed("p1"))],
            t0,
            None,
        )
        .unwrap();
        let first = page(t0)[0]["attentions"][0]["needed_at"].clone();
        s.insert_events(
            &[&cc("k", 2, "attention.needed", json!({}), parked("p1"))],
            now,
            None,
        )
        .unwrap();
        // An open prompt asked again by an agent still waiting (a second, unparked session).
        s.insert_events(
            &[&event(
                "codex",
                "w",
                1,
                "attention.needed",
                json!({}),
                needed("w1"),
            )],
            now,
            None,
        )
        .unwrap();
        let p = page(now + 3_600_000);
        let k = session(&p, "claude-code:k");
        assert_eq!(ids(&k["attentions"]), ["p1"]);
        assert_eq!(k["attentions"][0]["parked_until"], fmt_ms(until));
        assert_eq!(
            k["attentions"][0]["needed_at"], first,
            "asked when first asked"
        );
        assert_eq!(k["status"], "parked");
        let w = session(&p, "codex:w");
        assert_eq!(w["attentions"][0]["parked_until"], Value::Null);
        assert_eq!(w["status"], "waiting");
        let last = page(until - 1);
        assert_eq!(ids(&session(&last, "claude-code:k")["attentions"]), ["p1"]);
        let after = page(until);
        assert!(
            after.iter().all(|x| x["key"] != "claude-code:k"),
            "gone after parked_until: {after:?}"
        );
        // Answered: it ends as any prompt does.
        s.insert_events(
            &[&cc(
                "k",
                3,
                "attention.cleared",
                json!({}),
                cleared("p1", "answered"),
            )],
            now,
            None,
        )
        .unwrap();
        assert_eq!(
            session(&page(now), "claude-code:k")["attentions"],
            json!([])
        );
    }

    #[test]
    fn parked_prompts_on_sqlite() {
        parked_behaviour(&Sqlite::new(Db::open_memory().unwrap()));
    }

    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn parked_prompts_on_postgres() {
        let pg = Cluster::start();
        parked_behaviour(&PgStore::open(&pg.url()).unwrap());
    }

    #[test]
    fn start_files_on_sqlite() {
        files_behaviour(&Sqlite::new(Db::open_memory().unwrap()));
    }

    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn start_files_on_postgres() {
        let pg = Cluster::start();
        files_behaviour(&PgStore::open(&pg.url()).unwrap());
    }

    #[test]
    fn acks_taken_and_replies_on_sqlite() {
        taken_behaviour(&Sqlite::new(Db::open_memory().unwrap()));
    }

    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn acks_taken_and_replies_on_postgres() {
        let pg = Cluster::start();
        taken_behaviour(&PgStore::open(&pg.url()).unwrap());
    }

    #[test]
    fn the_queue_on_sqlite() {
        queue_behaviour(&Sqlite::new(Db::open_memory().unwrap()));
    }

    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn the_queue_on_postgres() {
        let pg = Cluster::start();
        queue_behaviour(&PgStore::open(&pg.url()).unwrap());
    }

    fn login_behaviour(s: &dyn LoginStore) {
        s.add_login("h1", "fp", 100).unwrap();
        assert!(s.login_valid(login("h1", "fp", 99)).unwrap());
        assert!(
            !s.login_valid(login("h1", "fp", 100)).unwrap(),
            "made before since"
        );
        assert!(
            !s.login_valid(login("h1", "other", 0)).unwrap(),
            "another login token"
        );
        assert!(!s.login_valid(login("h2", "fp", 0)).unwrap());
        s.add_login("h1", "fp2", 200).unwrap();
        assert!(
            s.login_valid(login("h1", "fp2", 150)).unwrap(),
            "made again"
        );
        assert!(!s.login_valid(login("h1", "fp", 0)).unwrap());
        s.remove_login("h1").unwrap();
        assert!(!s.login_valid(login("h1", "fp2", 0)).unwrap());
    }

    fn setting_behaviour(s: &dyn SettingStore) {
        assert!(!s.away().unwrap());
        s.set_away(true, 1).unwrap();
        assert!(s.away().unwrap());
        s.set_away(false, 2).unwrap();
        assert!(!s.away().unwrap());
        assert_eq!(s.setting("ntfy_url").unwrap(), None);
        s.set_setting("ntfy_url", Some("https://a"), 1).unwrap();
        s.set_setting("ntfy_url", Some("https://b"), 2).unwrap();
        assert_eq!(s.setting("ntfy_url").unwrap().as_deref(), Some("https://b"));
        s.set_setting("ntfy_url", None, 3).unwrap();
        assert_eq!(s.setting("ntfy_url").unwrap(), None);
        assert_eq!(s.first_setting("vapid", "k1", 4).unwrap(), "k1");
        assert_eq!(
            s.first_setting("vapid", "k2", 5).unwrap(),
            "k1",
            "the first kept"
        );
        assert_eq!(s.setting("vapid").unwrap().as_deref(), Some("k1"));
    }

    #[test]
    fn logins_and_settings_on_sqlite() {
        let db = Sqlite::new(Db::open_memory().unwrap());
        login_behaviour(&db);
        setting_behaviour(&db);
    }

    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn logins_and_settings_on_postgres() {
        let pg = Cluster::start();
        let a = PgStore::open(&pg.url()).unwrap();
        login_behaviour(&a);
        setting_behaviour(&a);
        // What one receiver stores another reads: a login made through A holds on B.
        let b = PgStore::open(&pg.url()).unwrap();
        a.add_login("h9", "fp", 5).unwrap();
        assert!(b.login_valid(login("h9", "fp", 0)).unwrap());
        b.set_away(true, 6).unwrap();
        assert!(a.away().unwrap());
        // Two receivers making a key (VAPID) at once: the first stored is both's.
        assert_eq!(a.first_setting("key", "from-a", 7).unwrap(), "from-a");
        assert_eq!(b.first_setting("key", "from-b", 8).unwrap(), "from-a");
    }

    /// A login made through `a` used through `b`: one CSRF secret, whichever asks first; and
    /// the login attempts, counted together.
    fn login_across(a: &dyn LoginStore, b: &dyn LoginStore) {
        let now = 1_800_000_000_000;
        assert_eq!(
            b.login_csrf(login("h1", "fp", 0), "c-b").unwrap(),
            None,
            "no login"
        );
        a.add_login("h1", "fp", now).unwrap();
        assert_eq!(
            b.login_csrf(login("h1", "fp", now - 1), "c-b")
                .unwrap()
                .as_deref(),
            Some("c-b"),
            "made by the first to ask"
        );
        assert_eq!(
            a.login_csrf(login("h1", "fp", now - 1), "c-a")
                .unwrap()
                .as_deref(),
            Some("c-b"),
            "the other reads the same"
        );
        assert_eq!(
            a.login_csrf(login("h1", "fp", now), "c-a").unwrap(),
            None,
            "too old"
        );
        assert_eq!(
            a.login_csrf(login("h1", "fp2", 0), "c-a").unwrap(),
            None,
            "other token"
        );
        // Made again (same hash): a new secret.
        b.add_login("h1", "fp", now + 1).unwrap();
        assert_eq!(
            a.login_csrf(login("h1", "fp", now), "c-2")
                .unwrap()
                .as_deref(),
            Some("c-2")
        );
        b.remove_login("h1").unwrap();
        assert_eq!(a.login_csrf(login("h1", "fp", 0), "c-3").unwrap(), None);

        // Five a minute per client, whichever receiver is asked.
        for i in 0..5 {
            let s: &dyn LoginStore = if i % 2 == 0 { a } else { b };
            assert_eq!(s.take_login_attempt("10.0.0.1", now).unwrap(), Ok(()));
        }
        assert_eq!(b.take_login_attempt("10.0.0.1", now).unwrap(), Err(12));
        assert_eq!(
            a.take_login_attempt("10.0.0.1", now + 11_000).unwrap(),
            Err(1)
        );
        // A success gives its attempt back.
        a.give_back_login_attempt("10.0.0.1", now).unwrap();
        assert_eq!(b.take_login_attempt("10.0.0.1", now).unwrap(), Ok(()));
        assert!(a.take_login_attempt("10.0.0.1", now).unwrap().is_err());
        // A refill later, one more.
        assert_eq!(
            b.take_login_attempt("10.0.0.1", now + 12_000).unwrap(),
            Ok(())
        );
        // Overall: 30 a minute, whoever asks (full again by now; one taken just above).
        for i in 0..29u8 {
            let s: &dyn LoginStore = if i % 2 == 0 { a } else { b };
            assert_eq!(
                s.take_login_attempt(&format!("10.1.0.{i}"), now + 12_000)
                    .unwrap(),
                Ok(()),
                "{i}"
            );
        }
        assert_eq!(
            a.take_login_attempt("10.2.0.1", now + 12_000).unwrap(),
            Err(2)
        );
        assert_eq!(
            b.take_login_attempt("10.2.0.1", now + 14_000).unwrap(),
            Ok(())
        );
        // A minute on, every bucket is full again and forgotten.
        let later = now + 14_000 + 60_000;
        assert_eq!(a.take_login_attempt("10.0.0.1", later).unwrap(), Ok(()));
    }

    #[test]
    fn logins_across_two_connections_on_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let a = Sqlite::new(Db::open_file(&dir.path().join("r.db")).unwrap());
        let b = Sqlite::new(Db::open_file(&dir.path().join("r.db")).unwrap());
        login_across(&a, &b);
        let rows: i64 = a
            .db()
            .conn
            .query_row("SELECT count(*) FROM login_attempts", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            rows, 2,
            "only the buckets not full: the client's and overall"
        );
    }

    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn logins_across_two_stores_on_postgres() {
        let pg = Cluster::start();
        let a = PgStore::open(&pg.url()).unwrap();
        let b = PgStore::open(&pg.url()).unwrap();
        login_across(&a, &b);
        assert_eq!(pg.psql("SELECT count(*) FROM login_attempts"), "2\n");
    }

    /// Eight receivers trying one client's login at once take exactly its five attempts;
    /// eight asking for a login's CSRF secret at once all get the same one.
    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn login_attempts_and_csrf_hold_under_a_race_on_postgres() {
        let pg = Cluster::start();
        let url = pg.url();
        let now = 1_800_000_000_000;
        PgStore::open(&url)
            .unwrap()
            .add_login("h", "fp", now)
            .unwrap();
        let got: Vec<(Result<(), u64>, String)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|i| {
                    let url = &url;
                    s.spawn(move || {
                        let st = PgStore::open(url).unwrap();
                        let csrf = st
                            .login_csrf(login("h", "fp", 0), &format!("c{i}"))
                            .unwrap()
                            .unwrap();
                        (st.take_login_attempt("10.9.9.9", now).unwrap(), csrf)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(got.iter().filter(|g| g.0.is_ok()).count(), 5, "{got:?}");
        assert!(got.iter().all(|g| g.1 == got[0].1), "{got:?}");
    }

    /// A pairing made through `a` and carried on through `b` (the same store or another
    /// on the same database).
    // One pairing story across two stores, each step asserting what the one before left.
    #[allow(clippy::too_many_lines)]
    fn pairing_behaviour(a: &dyn PairingStore, b: &dyn PairingStore) {
        let now = 1_000;
        a.create_pairing(
            &pairing("C1", "m1", "42", Some("laptop"), now + 600_000),
            now,
        )
        .unwrap();
        let p = b.pairing("C1").unwrap().expect("the pairing");
        assert_eq!((p.machine.as_str(), p.check.as_str()), ("m1", "42"));
        assert_eq!(p.name.as_deref(), Some("laptop"));
        assert_eq!(p.expires_ms, now + 600_000);
        assert!(p.key.is_none() && p.proof.is_none() && !p.token_given);
        assert!(b.pairing("nope").unwrap().is_none());
        assert!(!a.machine_known("m1").unwrap());

        let key = TrustedKey {
            id: "k1".into(),
            alg: -7,
            spki: "MFkw".into(),
        };
        let (none, signed) = (json!({}), json!({"sig": 1}));
        let approval = |proof| Approval { key: &key, proof };
        assert!(
            !b.approve_pairing("C1", &approval(&none), now + 600_000)
                .unwrap(),
            "expired"
        );
        assert!(b
            .approve_pairing("C1", &approval(&signed), now + 5)
            .unwrap());
        assert!(
            !a.approve_pairing("C1", &approval(&none), now + 6).unwrap(),
            "once"
        );
        assert!(a.machine_known("m1").unwrap());
        let p = a.pairing("C1").unwrap().unwrap();
        // Stored as the JSON the page sent (what the pairing's status answer gives back).
        assert_eq!(
            p.key.as_deref(),
            Some(r#"{"id":"k1","alg":-7,"spki":"MFkw"}"#)
        );
        assert_eq!(p.proof.as_deref(), Some(r#"{"sig":1}"#));
        assert_eq!(
            a.machine_keys("m1").unwrap(),
            vec![TrustedKey {
                id: "k1".into(),
                alg: -7,
                spki: "MFkw".into()
            }]
        );

        assert!(!a.give_token("nope", "H").unwrap());
        assert!(a.give_token("C1", "H1").unwrap());
        assert!(!b.give_token("C1", "H2").unwrap(), "one token per pairing");
        assert!(b.pairing("C1").unwrap().unwrap().token_given);
        assert_eq!(b.machine_by_token("H1").unwrap().as_deref(), Some("m1"));
        assert_eq!(b.machine_by_token("H2").unwrap(), None);

        // Paired again (a new key): the key is replaced, not added twice.
        a.create_pairing(&pairing("C2", "m1", "7", None, now + 600_000), now)
            .unwrap();
        let key2 = TrustedKey {
            id: "k1".into(),
            alg: -8,
            spki: "MCow".into(),
        };
        let again = Approval {
            key: &key2,
            proof: &json!({}),
        };
        assert!(b.approve_pairing("C2", &again, now + 9).unwrap());
        assert_eq!(a.machine_keys("m1").unwrap().len(), 1);
        assert_eq!(a.machine_keys("m1").unwrap()[0].alg, -8);
        assert!(
            !a.give_token("C2", "H3").unwrap(),
            "the machine has its token"
        );

        // The JSON the page's state carries, field for field and in this order.
        assert_eq!(
            serde_json::to_string(&b.latest_machine().unwrap()).unwrap(),
            r#"{"machine":"m1","name":"laptop"}"#
        );
        assert_eq!(
            serde_json::to_string(&b.machines().unwrap()).unwrap(),
            format!(
                r#"[{{"machine":"m1","name":"laptop","paired_ms":{},"keys":["k1"],"seen_ms":null}}]"#,
                now + 9
            )
        );
        // Its last contact, written through either, at most every few seconds.
        let every = super::super::SEEN_EVERY_MS;
        assert!(a.machine_seen("m1", now + 10).unwrap());
        assert!(
            !b.machine_seen("m1", now + 10 + every - 1).unwrap(),
            "too soon"
        );
        assert_eq!(b.machines().unwrap()[0].seen_ms, Some(now + 10));
        assert!(b.machine_seen("m1", now + 10 + every).unwrap());
        assert_eq!(a.machines().unwrap()[0].seen_ms, Some(now + 10 + every));
        assert!(!a.machine_seen("nope", now).unwrap(), "no such machine");
        assert!(a.remove_machine("m1").unwrap());
        assert!(!b.remove_machine("m1").unwrap());
        assert_eq!(b.machine_by_token("H1").unwrap(), None);
        assert!(b.pairing("C1").unwrap().is_none());
        assert!(b.machine_keys("m1").unwrap().is_empty());
        assert_eq!(b.latest_machine().unwrap(), None);
        assert!(b.machines().unwrap().is_empty());
        // The latest is the one paired last, and the last listed.
        for (code, m, at) in [("C3", "m3", now + 30), ("C4", "m2", now + 20)] {
            a.create_pairing(&pairing(code, m, "1", None, now + 600_000), now)
                .unwrap();
            assert!(b.approve_pairing(code, &approval(&none), at).unwrap());
        }
        assert_eq!(a.latest_machine().unwrap().unwrap().machine, "m3");
        let listed: Vec<String> = b
            .machines()
            .unwrap()
            .into_iter()
            .map(|m| m.machine)
            .collect();
        assert_eq!(listed, ["m2", "m3"]);
    }

    #[test]
    fn pairing_on_sqlite() {
        // Two connections to one file.
        let dir = tempfile::tempdir().unwrap();
        let a = Sqlite::new(Db::open_file(&dir.path().join("r.db")).unwrap());
        let b = Sqlite::new(Db::open_file(&dir.path().join("r.db")).unwrap());
        pairing_behaviour(&a, &b);
    }

    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn pairing_across_two_stores_on_postgres() {
        let pg = Cluster::start();
        let a = PgStore::open(&pg.url()).unwrap();
        let b = PgStore::open(&pg.url()).unwrap();
        pairing_behaviour(&a, &b);
    }

    /// Push devices and the push log, through `a` and read through `b`.
    fn push_behaviour(a: &dyn PushStore, b: &dyn PushStore) {
        let sub = |e: &str| Subscription {
            endpoint: format!("https://push.example/{e}"),
            p256dh: "P".into(),
            auth: "A".into(),
        };
        let id = a
            .push_subscribe(&sub("1"), Some("phone"), 10)
            .unwrap()
            .unwrap();
        assert_eq!(id.len(), 16);
        let again = b.push_subscribe(&sub("1"), None, 20).unwrap();
        assert_eq!(again.as_deref(), Some(id.as_str()), "renewed, not added");
        a.push_subscribe(&sub("2"), None, 30).unwrap().unwrap();
        let ds = b.push_devices().unwrap();
        assert_eq!(ds.len(), 2);
        assert_eq!(
            (ds[0].name.as_deref(), ds[0].created_ms),
            (Some("phone"), 10)
        );
        assert!(ds[0].hears(0) && ds[0].quiet_hours.is_none());

        assert!(a.push_set_quiet(&id, true).unwrap());
        assert!(!a.push_set_quiet("nope", true).unwrap());
        assert!(!b.push_devices().unwrap()[0].hears(0));
        let hours = QuietHours {
            from: 1320,
            to: 420,
            tz: "Europe/Paris".into(),
        };
        assert!(a.push_set_quiet_hours(&id, Some(&hours)).unwrap());
        assert_eq!(b.push_devices().unwrap()[0].quiet_hours, Some(hours));
        assert!(a.push_set_quiet_hours(&id, None).unwrap());
        assert_eq!(b.push_devices().unwrap()[0].quiet_hours, None);

        assert!(b.push_remove("https://push.example/2").unwrap());
        assert!(b.push_remove(&id).unwrap());
        assert!(!a.push_remove(&id).unwrap());
        assert!(a.push_devices().unwrap().is_empty());

        let kept = crate::push::LOG_KEPT;
        for i in 0..kept + 3 {
            a.push_record("phone", &format!("w{i}"), "ok", i).unwrap();
        }
        let log = b.push_log(1000).unwrap();
        assert_eq!(log.len() as i64, kept, "the newest kept");
        assert_eq!(log[0]["what"], format!("w{}", kept + 2));
        assert_eq!(b.push_log(2).unwrap().len(), 2);

        // One push per notice: the first claim takes, through either store.
        assert!(!b.push_claimed("needed|s|p1").unwrap());
        assert!(a.claim_push("needed|s|p1", 5).unwrap());
        assert!(!b.claim_push("needed|s|p1", 6).unwrap());
        assert!(!a.claim_push("needed|s|p1", 7).unwrap());
        assert!(b.push_claimed("needed|s|p1").unwrap());
        assert!(b.claim_push("cleared|s|p1", 8).unwrap());
    }

    #[test]
    fn push_devices_on_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let a = Sqlite::new(Db::open_file(&dir.path().join("r.db")).unwrap());
        let b = Sqlite::new(Db::open_file(&dir.path().join("r.db")).unwrap());
        push_behaviour(&a, &b);
    }

    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn push_devices_across_two_stores_on_postgres() {
        let pg = Cluster::start();
        let a = PgStore::open(&pg.url()).unwrap();
        let b = PgStore::open(&pg.url()).unwrap();
        push_behaviour(&a, &b);
    }

    /// Eight receivers claiming one push at once: exactly one sends it.
    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn one_claim_of_a_push_wins_a_race_on_postgres() {
        let pg = Cluster::start();
        let url = pg.url();
        let won: Vec<bool> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| {
                    let url = &url;
                    s.spawn(move || {
                        PgStore::open(url)
                            .unwrap()
                            .claim_push("needed|codex:s|perm-1", 1)
                            .unwrap()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(won.iter().filter(|w| **w).count(), 1, "{won:?}");
        assert_eq!(pg.psql("SELECT count(*) FROM push_claims"), "1\n");
    }

    /// An event of `harness:sid` as a machine sends it; `session` adds fields to its session.
    fn event(harness: &str, sid: &str, seq: i64, ty: &str, session: Value, data: Value) -> Value {
        let mut s = json!({"id": sid, "seq": seq});
        if let (Some(s), Value::Object(more)) = (s.as_object_mut(), session) {
            s.extend(more);
        }
        json!({"protocol": 1, "id": format!("01K70000000000000000{seq:06}"), "type": ty,
            "time": "2027-01-15T08:00:00.000Z", "tier": 1, "harness": {"name": harness},
            "session": s, "privacy": {"rulesets": ["secrets@1"], "pii": false}, "data": data})
    }

    fn cc(sid: &str, seq: i64, ty: &str, session: Value, data: Value) -> Value {
        event("claude-code", sid, seq, ty, session, data)
    }

    fn needed(id: &str) -> Value {
        json!({"attention_id": id, "kind": "permission", "tool": "Bash", "message": format!("Bash {id}")})
    }

    fn cleared(id: &str, how: &str) -> Value {
        json!({"attention_id": id, "how": how})
    }

    /// Pairs `machine` through the page's steps, so its token may claim sessions.
    fn pair(s: &dyn Store, machine: &str) {
        let code = format!("C-{machine}");
        s.create_pairing(&pairing(&code, machine, "00", None, 1 << 60), 0)
            .unwrap();
        let key = TrustedKey {
            id: format!("k-{machine}"),
            alg: -7,
            spki: "MFkw".into(),
        };
        let approval = Approval {
            key: &key,
            proof: &json!({}),
        };
        assert!(s.approve_pairing(&code, &approval, 1).unwrap());
    }

    fn session<'a>(page: &'a [Value], key: &str) -> &'a Value {
        page.iter()
            .find(|x| x["key"] == key)
            .unwrap_or_else(|| panic!("{key} not on the page: {page:?}"))
    }

    /// Each prompt of a session's `cleared` with how it ended.
    fn how_ended(session: &Value) -> Vec<(&str, &str)> {
        session["cleared"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["attention_id"].as_str().unwrap(),
                    c["ended"].as_str().unwrap(),
                )
            })
            .collect()
    }

    /// DECISIONS 34, whichever store keeps it: a prompt that ended says how, from its
    /// event and whether a page's answer for it was delivered (read from the answer's body,
    /// plain or a signed command).
    fn prompt_ended_behaviour(sq: &dyn Store) {
        let now = 1_800_000_000_000;
        let ev = |seq, ty: &str, data: Value| cc("s", seq, ty, json!({}), data);
        let needed = |seq, id: &str| {
            ev(
                seq,
                "attention.needed",
                json!({"attention_id": id, "tool": "Bash", "message": "Bash ls"}),
            )
        };
        let cleared = |seq, id: &str, how: &str| {
            ev(
                seq,
                "attention.cleared",
                json!({"attention_id": id, "how": how}),
            )
        };
        let evs = [
            needed(1, "p-page"),
            needed(2, "p-term"),
            needed(3, "p-late"),
            needed(4, "p-open"),
        ];
        sq.insert_events(&evs.iter().collect::<Vec<_>>(), now, None)
            .unwrap();
        // A signed answer from a page for p-page, delivered; an unsigned one for p-term that
        // the machine refused (the terminal answered it).
        let cmd = json!({"v":1,"t":"sessionpipe.control","machine":"m","kind":"permission.answer",
            "session":"claude-code:s","for":"p-page","decision":"allow"})
        .to_string();
        sq.insert_message(
            "claude-code:s",
            &json!({"id": "m1", "kind": "permission.answer", "cmd": cmd}),
            None,
            now,
        )
        .unwrap();
        sq.insert_message(
            "claude-code:s",
            &json!({"id": "m2", "kind": "permission.answer", "for": "p-term", "decision": "deny"}),
            None,
            now,
        )
        .unwrap();
        sq.insert_acks(
            &[
                json!({"id": "m1", "outcome": "delivered", "at": "2026-01-01T00:00:00.000Z"}),
                json!({"id": "m2", "outcome": "expired", "at": "2026-01-01T00:00:00.000Z"}),
            ],
            now,
        )
        .unwrap();
        let evs = [
            cleared(5, "p-page", "answered"),
            cleared(6, "p-term", "answered"),
        ];
        sq.insert_events(&evs.iter().collect::<Vec<_>>(), now, None)
            .unwrap();
        // Ended long ago: no longer listed.
        sq.insert_events(
            &[&cleared(7, "p-late", "timeout")],
            now - super::super::sessions::CLEARED_FOR_MS - 1,
            None,
        )
        .unwrap();
        let s = &sq.page_sessions(now, 3_600_000).unwrap()[0];
        let ended = how_ended(s);
        assert_eq!(ended.len(), 2, "{ended:?}");
        assert!(ended.contains(&("p-page", "page")), "{ended:?}");
        assert!(ended.contains(&("p-term", "terminal")), "{ended:?}");
        assert_eq!(s["attentions"][0]["attention_id"], "p-open");
    }

    #[test]
    fn how_a_prompt_ended_on_sqlite() {
        prompt_ended_behaviour(&Sqlite::new(Db::open_memory().unwrap()));
    }

    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn how_a_prompt_ended_on_postgres() {
        let pg = Cluster::start();
        prompt_ended_behaviour(&PgStore::open(&pg.url()).unwrap());
    }

    fn ids(list: &Value) -> Vec<&str> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|a| a["attention_id"].as_str().unwrap())
            .collect()
    }

    /// Ingest: dedup, the machine a session belongs to, attentions by seq, "Not now" ended
    /// by a clear, a session's fields merged.
    // One story, step after step, each asserting what the one before left.
    #[allow(clippy::too_many_lines)]
    fn events_behaviour(s: &dyn Store) {
        use Stored::{Duplicate, Foreign, New};
        let now = 1_800_000_000_000;
        let live = 3_600_000;
        pair(s, "m_a");
        pair(s, "m_b");
        let start = |sid: &str| {
            cc(
                sid,
                0,
                "session.started",
                json!({}),
                json!({"source": "startup"}),
            )
        };
        let a0 = cc(
            "a",
            0,
            "session.started",
            json!({"cwd": "~/a", "model": "opus"}),
            json!({"source": "startup"}),
        );
        assert_eq!(s.insert_events(&[&a0], now, Some("m_a")).unwrap(), [New]);
        assert_eq!(
            s.insert_events(&[&start("b")], now, Some("m_b")).unwrap(),
            [New]
        );
        assert_eq!(s.insert_events(&[&start("u")], now, None).unwrap(), [New]);
        assert_eq!(s.insert_events(&[&start("v")], now, None).unwrap(), [New]);
        // Machine A's token, and the shared token, cannot touch B's session, nor confirm
        // B's own event.
        let b1 = cc("b", 1, "attention.needed", json!({}), needed("pb"));
        assert_eq!(
            s.insert_events(&[&b1], now, Some("m_a")).unwrap(),
            [Foreign]
        );
        assert_eq!(s.insert_events(&[&b1], now, None).unwrap(), [Foreign]);
        assert_eq!(
            s.insert_events(&[&start("b")], now, Some("m_a")).unwrap(),
            [Foreign]
        );
        // An unowned session is claimed by the first paired machine that sends for it.
        let u1 = cc("u", 1, "turn.ended", json!({}), json!({"reason": "stop"}));
        assert_eq!(s.insert_events(&[&u1], now, Some("m_a")).unwrap(), [New]);
        let u2 = cc("u", 2, "turn.ended", json!({}), json!({"reason": "stop"}));
        assert_eq!(s.insert_events(&[&u2], now, None).unwrap(), [Foreign]);
        // Duplicates, in one batch and across batches.
        let a1 = cc(
            "a",
            1,
            "attention.needed",
            json!({}),
            json!({"attention_id": "p1", "kind": "permission", "tool": "Bash", "message": "ls",
                   "input": {"command": "ls", "description": "list"}, "input_partial": true}),
        );
        assert_eq!(
            s.insert_events(&[&a1, &a1], now, Some("m_a")).unwrap(),
            [New, Duplicate]
        );
        assert_eq!(
            s.insert_events(&[&a0], now, Some("m_a")).unwrap(),
            [Duplicate]
        );
        assert_eq!(
            s.session_machine("claude-code:a").unwrap(),
            Some(Some("m_a".into()))
        );
        assert_eq!(
            s.session_machine("claude-code:u").unwrap(),
            Some(Some("m_a".into()))
        );
        assert_eq!(s.session_machine("claude-code:v").unwrap(), Some(None));
        assert_eq!(s.session_machine("claude-code:nope").unwrap(), None);

        let page = s.page_sessions(now, live).unwrap();
        let a = session(&page, "claude-code:a");
        assert_eq!(a["state"], "needs you");
        assert_eq!(a["machine_id"], "m_a");
        assert_eq!(
            a["attentions"][0]["input"],
            json!({"command": "ls", "description": "list"})
        );
        assert_eq!(a["attentions"][0]["input_partial"], true);
        assert!(session(&page, "claude-code:v").get("machine_id").is_none());

        // Put off, then cleared: no longer put off. A needed older than the clear does not
        // open it again.
        assert_eq!(
            s.snooze("claude-code:a", "p1", now, now + 60_000).unwrap(),
            Snooze::Until(now + 60_000)
        );
        assert!(s.snoozed("claude-code:a", "p1", now).unwrap());
        let a3 = cc(
            "a",
            3,
            "attention.cleared",
            json!({}),
            cleared("p1", "answered"),
        );
        let a2 = cc("a", 2, "attention.needed", json!({}), needed("p1"));
        assert_eq!(
            s.insert_events(&[&a3, &a2], now, Some("m_a")).unwrap(),
            [New, New]
        );
        assert!(!s.snoozed("claude-code:a", "p1", now).unwrap());
        assert!(s.snoozes(now).unwrap().is_empty());
        // Cleared first, its needed late: closed.
        let a5 = cc(
            "a",
            5,
            "attention.cleared",
            json!({}),
            cleared("p2", "timeout"),
        );
        let a4 = cc("a", 4, "attention.needed", json!({}), needed("p2"));
        s.insert_events(&[&a5], now, Some("m_a")).unwrap();
        s.insert_events(&[&a4], now, Some("m_a")).unwrap();
        // Needed, put off, and a clear older than it: still open and still put off.
        let a7 = cc("a", 7, "attention.needed", json!({}), needed("p3"));
        s.insert_events(&[&a7], now, Some("m_a")).unwrap();
        assert_eq!(
            s.snooze("claude-code:a", "p3", now, now + 9_000).unwrap(),
            Snooze::Until(now + 9_000)
        );
        let a6 = cc(
            "a",
            6,
            "attention.cleared",
            json!({}),
            cleared("p3", "answered"),
        );
        s.insert_events(&[&a6], now, Some("m_a")).unwrap();
        assert!(s.snoozed("claude-code:a", "p3", now).unwrap());
        assert_eq!(s.next_snooze_end(now).unwrap(), Some(now + 9_000));
        assert_eq!(
            s.snoozes(now).unwrap(),
            [
                json!({"session": "claude-code:a", "for": "p3", "until": super::super::fmt_ms(now + 9_000)})
            ]
        );
        // Fields merged: an empty one never blanks, a late event (older seq) fills one but
        // leaves the state to the latest.
        let a9 = cc(
            "a",
            9,
            "turn.ended",
            json!({"cwd": "", "branch": "main"}),
            json!({"reason": "stop"}),
        );
        let a8 = cc(
            "a",
            8,
            "tool.started",
            json!({"title": "Fix it"}),
            json!({}),
        );
        s.insert_events(&[&a9, &a8], now, Some("m_a")).unwrap();
        // Ended: off the page, unless a prompt is open.
        let u3 = cc(
            "u",
            3,
            "session.ended",
            json!({}),
            json!({"reason": "exit"}),
        );
        assert_eq!(s.insert_events(&[&u3], now, Some("m_a")).unwrap(), [New]);
        // A page's answer names the call it answered, after its prompt ended too.
        let answer = json!({"id": "01K6ABCDEFGHJKMNPQRSTVWXYZ", "kind": "permission.answer",
            "for": "p1", "decision": "allow", "at": "2026-01-01T00:00:00.000Z",
            "expires_at": "2026-01-01T00:01:00.000Z"});
        s.insert_message("claude-code:a", &answer, Some(now + 60_000), now)
            .unwrap();

        let page = s.page_sessions(now, live).unwrap();
        let a = session(&page, "claude-code:a");
        let call = &a["messages"][0]["call"];
        assert_eq!(
            (&call["tool"], &call["message"]),
            (&json!("Bash"), &json!("ls")),
            "{a}"
        );
        assert_eq!(
            (&a["cwd"], &a["model"], &a["branch"], &a["title"]),
            (
                &json!("~/a"),
                &json!("opus"),
                &json!("main"),
                &json!("Fix it")
            )
        );
        assert_eq!(a["last_type"], "turn.ended");
        assert_eq!(a["state"], "needs you");
        assert_eq!(ids(&a["attentions"]), ["p3"]);
        let ended = how_ended(a);
        assert_eq!(ended, [("p1", "terminal"), ("p2", "timeout")]);
        // An ended session stays listed (rule 40: the page says it ended, and Send resumes it).
        assert_eq!(session(&page, "claude-code:u")["status"], "ended");
        assert_eq!(session(&page, "claude-code:b")["state"], "started");
        assert!(
            s.page_sessions(now + live, live)
                .unwrap()
                .iter()
                .all(|x| x["key"] == "claude-code:a"),
            "only a prompt keeps a session listed"
        );
    }

    #[test]
    fn events_on_sqlite() {
        events_behaviour(&Sqlite::new(Db::open_memory().unwrap()));
    }

    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn events_on_postgres() {
        let pg = Cluster::start();
        events_behaviour(&PgStore::open(&pg.url()).unwrap());
    }

    /// "Not now": only an open prompt, at most [`super::super::SNOOZES_MAX`] at once (again
    /// allowed at the cap; room once they are up).
    fn snooze_behaviour(s: &dyn Store) {
        use super::super::SNOOZES_MAX;
        let key = "claude-code:s1";
        assert_eq!(s.snooze(key, "p0", 1_000, 9_000).unwrap(), Snooze::NotOpen);
        let evs: Vec<Value> = (0..=SNOOZES_MAX)
            .map(|i| {
                cc(
                    "s1",
                    i,
                    "attention.needed",
                    json!({}),
                    needed(&format!("p{i}")),
                )
            })
            .collect();
        s.insert_events(&evs.iter().collect::<Vec<_>>(), 1_000, None)
            .unwrap();
        for i in 0..SNOOZES_MAX {
            assert_eq!(
                s.snooze(key, &format!("p{i}"), 1_000, 9_000).unwrap(),
                Snooze::Until(9_000)
            );
        }
        let last = format!("p{SNOOZES_MAX}");
        assert_eq!(s.snooze(key, &last, 1_000, 9_000).unwrap(), Snooze::Full);
        assert_eq!(
            s.snooze(key, "p0", 1_000, 9_500).unwrap(),
            Snooze::Until(9_500)
        );
        assert_eq!(s.snoozes(2_000).unwrap().len() as i64, SNOOZES_MAX);
        assert_eq!(s.snoozes(2_000).unwrap().last().unwrap()["for"], "p0");
        assert_eq!(s.next_snooze_end(9_000).unwrap(), Some(9_500));
        assert!(!s.snoozed(key, "p1", 9_000).unwrap());
        assert_eq!(
            s.snooze(key, &last, 9_600, 20_000).unwrap(),
            Snooze::Until(20_000)
        );
        assert_eq!(
            s.snooze("claude-code:nope", "p0", 9_600, 20_000).unwrap(),
            Snooze::NotOpen
        );
    }

    #[test]
    fn snoozes_on_sqlite() {
        snooze_behaviour(&Sqlite::new(Db::open_memory().unwrap()));
    }

    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn snoozes_on_postgres() {
        let pg = Cluster::start();
        snooze_behaviour(&PgStore::open(&pg.url()).unwrap());
    }

    const T0: i64 = 1_800_000_000_000;

    /// A day of two machines and the shared token, fed to a store; what it then shows (the
    /// page, what is put off, every event and ack), before and after a sweep.
    // One day in order; both stores are fed exactly this and compared.
    #[allow(clippy::too_many_lines)]
    fn a_day(s: &dyn Store) -> Value {
        let earlier = T0 - 2 * 3_600_000;
        let now = T0;
        pair(s, "m_a");
        pair(s, "m_b");
        let wire = |ms: i64| super::super::fmt_ms(ms);
        let mut stored = Vec::new();
        // Earlier: a Codex session on A that ended, its prompt answered at the terminal.
        let x = |seq, ty: &str, data| event("codex", "x1", seq, ty, json!({"cwd": "~/old"}), data);
        let old = [
            x(0, "session.started", json!({"source": "startup"})),
            x(1, "attention.needed", needed("px")),
            x(2, "attention.cleared", cleared("px", "answered")),
            x(3, "session.ended", json!({"reason": "exit"})),
        ];
        stored.push(
            s.insert_events(&old.iter().collect::<Vec<_>>(), earlier, Some("m_a"))
                .unwrap(),
        );
        s.insert_message(
            "codex:x1",
            &json!({"id": "01K7OLD0000000000000000000", "kind": "prompt", "text": "old"}),
            Some(earlier + 60_000),
            earlier,
        )
        .unwrap();
        s.insert_acks(&[json!({"id": "01K7OLD0000000000000000000", "outcome": "delivered", "at": wire(earlier)})], earlier).unwrap();

        // Now: Claude Code on A with prompts; answers from the page, unsigned and signed.
        let a = |seq, ty: &str, session, data| cc("s1", seq, ty, session, data);
        let s1 = [
            a(
                0,
                "session.started",
                json!({"cwd": "~/work", "repo": "git@x:y.git", "branch": "main", "model": "opus"}),
                json!({"source": "startup"}),
            ),
            a(
                1,
                "attention.needed",
                json!({}),
                json!({"attention_id": "p1", "kind": "permission", "tool": "Bash",
                "message": "Bash rm -rf build", "input": {"command": "rm -rf build", "description": "clean"}}),
            ),
            a(
                2,
                "attention.needed",
                json!({}),
                json!({"attention_id": "p2", "kind": "permission", "tool": "Edit",
                "message": "Edit main.rs", "input": {"file_path": "main.rs", "old_string": "a\u{0}b"}, "input_partial": true}),
            ),
            a(
                3,
                "attention.needed",
                json!({"title": "Clean up"}),
                needed("p3"),
            ),
            a(4, "attention.needed", json!({}), needed("p4")),
        ];
        stored.push(
            s.insert_events(&s1.iter().collect::<Vec<_>>(), now - 5_000, Some("m_a"))
                .unwrap(),
        );
        let cmd = json!({"v": 1, "t": "sessionpipe.control", "machine": "m_a", "kind": "permission.answer",
            "session": "claude-code:s1", "for": "p2", "decision": "allow"}).to_string();
        s.insert_envelope("m_a", "claude-code:s1", "permission.answer",
            &json!({"id": "01K7E00000000000000000000A", "cmd": cmd, "sig": "x", "at": wire(now - 4_000), "expires_at": wire(now + 60_000)}),
            now + 60_000, now - 4_000).unwrap();
        s.insert_message("claude-code:s1", &json!({"id": "01K7M00000000000000000000A", "kind": "permission.answer", "for": "p1",
            "decision": "deny", "note": "not that", "at": wire(now - 4_000), "expires_at": wire(now + 60_000)}), Some(now + 60_000), now - 4_000).unwrap();
        s.insert_message("claude-code:s1", &json!({"id": "01K7M00000000000000000000B", "kind": "prompt", "text": "then run\u{0} the tests",
            "mode": "queue", "at": wire(now - 3_000), "expires_at": wire(now + 60_000)}), Some(now + 60_000), now - 3_000).unwrap();
        s.insert_message(
            "claude-code:s1",
            &json!({"id": "01K7M00000000000000000000C", "kind": "prompt", "text": "too late"}),
            Some(now - 1),
            now - 3_000,
        )
        .unwrap();
        s.insert_message("claude-code:s1", &json!({"id": "01K7M00000000000000000000D", "kind": "permission.answer", "for": "p3", "decision": "allow"}), Some(now + 60_000), now - 3_000).unwrap();
        s.insert_message(
            "claude-code:s1",
            &json!({"kind": "note", "text": "no id"}),
            None,
            now - 3_000,
        )
        .unwrap();
        let polled: Vec<i64> = s
            .pending("claude-code:s1", now - 2_000)
            .unwrap()
            .iter()
            .map(|p| p.n)
            .take(3)
            .collect();
        s.mark_polled(&polled, now - 2_000).unwrap();
        let env: Vec<i64> = s
            .machine_pending("m_a", now - 2_000)
            .unwrap()
            .iter()
            .map(|p| p.n)
            .collect();
        s.mark_polled(&env, now - 2_000).unwrap();
        s.insert_acks(&[
            json!({"id": "01K7E00000000000000000000A", "outcome": "delivered", "at": wire(now - 1_500)}),
            json!({"id": "01K7M00000000000000000000A", "outcome": "delivered", "at": wire(now - 1_500)}),
            json!({"id": "01K7M00000000000000000000A", "outcome": "failed", "at": wire(now - 1_400), "detail": "twice"}),
            json!({"id": "01K7M00000000000000000000D", "outcome": "refused", "at": wire(now - 1_400), "code": "stale_key"}),
        ], now - 1_000).unwrap();
        assert_eq!(
            s.snooze("claude-code:s1", "p4", now - 900, now + 30_000)
                .unwrap(),
            Snooze::Until(now + 30_000)
        );
        let s1b = [
            a(5, "attention.cleared", json!({}), cleared("p1", "answered")),
            a(6, "attention.cleared", json!({}), cleared("p2", "answered")),
            a(7, "attention.cleared", json!({}), cleared("p3", "answered")),
            a(8, "turn.started", json!({"branch": ""}), json!({})),
        ];
        stored.push(
            s.insert_events(&s1b.iter().collect::<Vec<_>>(), now - 800, Some("m_a"))
                .unwrap(),
        );

        // B: an agent over ACP with what it takes, idle; the shared token's session too.
        let b = |seq, ty: &str, data| event("acp", "s2", seq, ty, json!({"cwd": "/srv"}), data);
        let s2 = [
            b(
                0,
                "session.started",
                json!({"source": "startup", "agent": "Helper\u{202e}", "control":
                {"prompt": {"queue": "turn_end", "steer": "tool_boundary"}, "cancel": "now", "answer": ["scope", "input"]}}),
            ),
            b(1, "turn.ended", json!({"reason": "stop"})),
        ];
        stored.push(
            s.insert_events(&s2.iter().collect::<Vec<_>>(), now - 700, Some("m_b"))
                .unwrap(),
        );
        let shared = [
            cc(
                "s3",
                0,
                "session.started",
                json!({"machine": "ci-runner"}),
                json!({"source": "startup"}),
            ),
            cc("s3", 1, "attention.needed", json!({}), needed("q1")),
        ];
        stored.push(
            s.insert_events(&shared.iter().collect::<Vec<_>>(), now - 600, None)
                .unwrap(),
        );
        stored.push(
            s.insert_events(&[&shared[1], &s2[1]], now - 500, Some("m_b"))
                .unwrap(),
        );

        let seen = |s: &dyn Store| {
            let machines = [
                "claude-code:s1",
                "acp:s2",
                "claude-code:s3",
                "codex:x1",
                "nope",
            ]
            .map(|k| s.session_machine(k).unwrap());
            json!({
                "page": s.page_sessions(now, 3_600_000).unwrap(),
                "later": s.page_sessions(now + 10 * 3_600_000, 3_600_000).unwrap(),
                "snoozes": s.snoozes(now).unwrap(),
                "next_snooze_end": s.next_snooze_end(now).unwrap(),
                "events": s.events().unwrap(),
                "acks": s.acks().unwrap(),
                "machines": machines,
            })
        };
        s.ping().unwrap();
        let before = seen(s);
        let swept = s.sweep(now, 3_600_000).unwrap();
        let after = seen(s);
        let stored: Vec<Vec<String>> = stored
            .iter()
            .map(|b| b.iter().map(|x| format!("{x:?}")).collect())
            .collect();
        json!({"stored": stored, "before": before, "swept": swept, "after": after})
    }

    /// The same day on SQLite and on PostgreSQL shows the same JSON, to the byte.
    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn a_day_shows_the_same_on_both_stores() {
        let pg = Cluster::start();
        let want = a_day(&Sqlite::new(Db::open_memory().unwrap()));
        let got = a_day(&PgStore::open(&pg.url()).unwrap());
        // What the day is meant to show, so the comparison is of something.
        let s1 = session(want["before"]["page"].as_array().unwrap(), "claude-code:s1");
        let ended = how_ended(s1);
        assert_eq!(
            ended,
            [("p1", "page"), ("p2", "page"), ("p3", "terminal")],
            "{s1:#}"
        );
        assert_eq!(ids(&s1["attentions"]), ["p4"]);
        let statuses: Vec<&str> = s1["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["status"].as_str().unwrap())
            .collect();
        assert_eq!(
            statuses,
            [
                "queued",
                "refused",
                "expired",
                "sent",
                "delivered",
                "delivered"
            ],
            "{s1:#}"
        );
        assert_eq!(s1["messages"][1]["detail"], "stale_key");
        assert_eq!(want["before"]["snoozes"].as_array().unwrap().len(), 1);
        assert_eq!(
            want["swept"],
            4 + 2 + 1 + 1,
            "the old session's events, rows, message and ack"
        );
        assert_eq!(
            want["after"]["events"].as_array().unwrap().len(),
            want["before"]["events"].as_array().unwrap().len() - 4
        );
        assert_eq!(
            serde_json::to_string_pretty(&got).unwrap(),
            serde_json::to_string_pretty(&want).unwrap()
        );
    }

    /// Two receivers storing the same events at once, in batches naming the same sessions
    /// in opposite orders: each event stored once (one of them says New, the other
    /// Duplicate), and what the page shows is what one store fed in turn shows.
    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn two_receivers_storing_the_same_events_at_once_store_each_once() {
        let pg = Cluster::start();
        let now = T0;
        let evs: Vec<Value> = (0..120)
            .map(|i| {
                let (sid, seq) = (format!("s{}", i % 3), i / 3);
                // Each field from one event of its own, so a merge that lost one would show.
                let field = ["cwd", "repo", "model", "title", "url"][(seq % 5) as usize];
                let session = json!({ field: format!("{field} of {sid}"), "branch": "main" });
                match seq % 4 {
                    1 => cc(
                        &sid,
                        seq,
                        "attention.needed",
                        session,
                        needed(&format!("p{seq}")),
                    ),
                    2 if seq % 8 == 2 => cc(
                        &sid,
                        seq,
                        "attention.cleared",
                        session,
                        cleared(&format!("p{}", seq - 1), "answered"),
                    ),
                    _ => cc(&sid, seq, "tool.started", session, json!({})),
                }
            })
            .collect();
        let batches: Vec<Vec<&Value>> = evs.chunks(6).map(|c| c.iter().collect()).collect();
        let a = PgStore::open(&pg.url()).unwrap();
        let b = PgStore::open(&pg.url()).unwrap();
        let barrier = std::sync::Barrier::new(2);
        let (got_a, got_b) = std::thread::scope(|t| {
            // Each batch sent by both at the same moment; a batch that fails is kept as
            // such, so the other thread is not left waiting.
            let ha = t.spawn(|| {
                batches
                    .iter()
                    .map(|bt| {
                        barrier.wait();
                        a.insert_events(bt, now, None).map_err(|e| format!("{e:#}"))
                    })
                    .collect::<Vec<_>>()
            });
            let hb = t.spawn(|| {
                batches
                    .iter()
                    .map(|bt| {
                        let rev: Vec<&Value> = bt.iter().rev().copied().collect();
                        barrier.wait();
                        let got = b.insert_events(&rev, now, None);
                        got.map(|g| g.into_iter().rev().collect::<Vec<_>>())
                            .map_err(|e| format!("{e:#}"))
                    })
                    .collect::<Vec<_>>()
            });
            (ha.join().unwrap(), hb.join().unwrap())
        });
        let stored = |got: Vec<Result<Vec<Stored>, String>>| -> Vec<Stored> {
            got.into_iter()
                .flat_map(|b| b.expect("every batch stored"))
                .collect()
        };
        let (got_a, got_b) = (stored(got_a), stored(got_b));
        for (i, (x, y)) in got_a.iter().zip(&got_b).enumerate() {
            assert!(
                matches!(
                    (x, y),
                    (Stored::New, Stored::Duplicate) | (Stored::Duplicate, Stored::New)
                ),
                "event {i}: {x:?} and {y:?}"
            );
        }
        let news = got_a.iter().filter(|x| **x == Stored::New).count();
        eprintln!(
            "pg: two receivers, 120 events each: {news} stored by A, {} by B",
            120 - news
        );
        let c = PgStore::open(&pg.url()).unwrap();
        assert_eq!(c.events().unwrap().len(), 120);
        let one = Sqlite::new(Db::open_memory().unwrap());
        for bt in &batches {
            one.insert_events(bt, now, None).unwrap();
        }
        let want = one.page_sessions(now, 3_600_000).unwrap();
        assert_eq!(want.len(), 3);
        assert_eq!(want[0]["url"], "url of s0");
        assert_eq!(
            ids(&want[0]["attentions"]),
            ["p13", "p21", "p29", "p37", "p5"]
        );
        assert_eq!(c.page_sessions(now, 3_600_000).unwrap(), want);
    }

    /// An attention's fields come as the machine sent them; a NUL, which PostgreSQL's text
    /// cannot hold, is kept as U+FFFD rather than failing the batch (and with it every
    /// later event of the machine's spool).
    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn an_attention_with_a_nul_is_stored_with_a_replacement_on_postgres() {
        let pg = Cluster::start();
        let s = PgStore::open(&pg.url()).unwrap();
        let ev = |seq: i64, ty: &str, data: Value| {
            json!({"protocol": 1, "id": format!("01K70000000000000000{seq:06}"), "type": ty,
                "time": "2027-01-15T08:00:00.000Z", "tier": 1, "harness": {"name": "codex"},
                "session": {"id": "s", "seq": seq}, "privacy": {"rulesets": [], "pii": false},
                "data": data})
        };
        let needed = ev(
            0,
            "attention.needed",
            json!({"attention_id": "p\u{0}1", "tool": "Ba\u{0}sh", "message": "a\u{0}b",
                   "input": {"command": "x\u{0}y"}}),
        );
        let now = 1_800_000_000_000;
        assert_eq!(
            s.insert_events(&[&needed], now, None).unwrap(),
            [Stored::New]
        );
        let page = s.page_sessions(now, 60_000).unwrap();
        let a = &page[0]["attentions"][0];
        assert_eq!(
            (&a["attention_id"], &a["tool"], &a["message"]),
            (
                &json!("p\u{fffd}1"),
                &json!("Ba\u{fffd}sh"),
                &json!("a\u{fffd}b")
            )
        );
        // The input is JSON text, its NUL escaped: kept as it came.
        assert_eq!(a["input"], json!({"command": "x\u{0}y"}));
        assert_eq!(s.events().unwrap(), [needed]);
        // The page's id for it is the one that snoozes and clears it.
        assert_eq!(
            s.snooze("codex:s", "p\u{fffd}1", now, now + 5).unwrap(),
            Snooze::Until(now + 5)
        );
        assert!(
            s.snoozed("codex:s", "p\u{0}1", now).unwrap(),
            "asked with the NUL"
        );
        assert_eq!(s.session_machine("codex:s\u{0}").unwrap(), None);
        let clear = ev(
            1,
            "attention.cleared",
            json!({"attention_id": "p\u{0}1", "how": "answ\u{0}ered"}),
        );
        s.insert_events(&[&clear], now, None).unwrap();
        assert!(!s.snoozed("codex:s", "p\u{fffd}1", now).unwrap());
        let page = s.page_sessions(now, 60_000).unwrap();
        assert_eq!(page[0]["cleared"][0]["how"], "answ\u{fffd}ered");
        // A message whose JSON holds a NUL (which PostgreSQL's JSON functions refuse) is
        // listed as it came: the page reads bodies in Rust, on either store.
        let answer = json!({"id": "01K7NUL0000000000000000000", "kind": "permission.answer",
            "for": "p\u{0}1", "decision": "allow"});
        s.insert_message("codex:s", &answer, None, now).unwrap();
        let page = s.page_sessions(now, 60_000).unwrap();
        assert_eq!(page[0]["messages"][0]["for"], "p\u{0}1");
    }
}
