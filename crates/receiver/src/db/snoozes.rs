//! "Not now" (issue 26): an open prompt the person put off. Until its time is up it is hidden
//! on every page and never pushed; the machine keeps waiting for it all along. It ends by
//! itself, or when the prompt clears (answered, in the terminal or elsewhere).

use serde_json::{json, Value};

use super::driver::{args, Engine};
use super::fmt_ms;
use super::store::SnoozeStore;

// The snoozes' SQL, one text for both stores (written once: driver.rs).
const DROP_ENDED: &str = "DELETE FROM snoozes WHERE until_ms <= ?1";
const OPEN_ATTENTION: &str =
    "SELECT 1 FROM attentions WHERE session_key = ?1 AND attention_id = ?2 AND open = 1";
const COUNT: &str = "SELECT count(*) FROM snoozes";
const SNOOZED_ANY_TIME: &str = "SELECT 1 FROM snoozes WHERE session_key = ?1 AND attention_id = ?2";
const UPSERT: &str = "INSERT INTO snoozes(session_key, attention_id, until_ms, \
    made_ms) VALUES (?1, ?2, ?3, ?4) ON CONFLICT(session_key, attention_id) \
    DO UPDATE SET until_ms = excluded.until_ms, made_ms = excluded.made_ms";
const SNOOZES: &str = "SELECT z.session_key, z.attention_id, z.until_ms \
    FROM snoozes z JOIN attentions a \
    ON a.session_key = z.session_key AND a.attention_id = z.attention_id \
    WHERE z.until_ms > ?1 AND a.open = 1 \
    ORDER BY z.until_ms, z.session_key COLLATE BINARY, z.attention_id COLLATE BINARY";
const SNOOZED: &str = "SELECT 1 FROM snoozes \
    WHERE session_key = ?1 AND attention_id = ?2 AND until_ms > ?3";
const NEXT_END: &str = "SELECT min(until_ms) FROM snoozes WHERE until_ms > ?1";
/// A cleared prompt is no longer put off: if it is asked again, it is news again (events.rs).
pub(super) const UNSNOOZE: &str =
    "DELETE FROM snoozes WHERE session_key = ?1 AND attention_id = ?2";

/// Prompts put off at once; past this a "Not now" is refused (the expired ones go first).
pub const SNOOZES_MAX: i64 = 1000;

/// What a "Not now" did to one prompt.
#[derive(Debug, PartialEq, Eq)]
pub enum Snooze {
    /// Put off until then.
    Until(i64),
    /// No such open prompt (answered or cleared meanwhile).
    NotOpen,
    /// [`SNOOZES_MAX`] prompts are put off already.
    Full,
}

impl<E: Engine> SnoozeStore for E {
    /// Puts off the open prompt `attention_id` of `session` until `until_ms` (a second
    /// "Not now" starts its time again). One transaction that holds the table against other
    /// snoozes, so the cap holds when two receivers put prompts off at once; announced,
    /// since every page hides what is put off.
    fn snooze(
        &self,
        session: &str,
        attention_id: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> anyhow::Result<Snooze> {
        self.tx(|c| {
            let (session, attention_id) = (c.text(session), c.text(attention_id));
            let key = args![&*session, &*attention_id];
            c.lock_writes("snoozes")?;
            c.execute(DROP_ENDED, args![now_ms])?;
            if c.row(OPEN_ATTENTION, key)?.is_none() {
                return Ok(Snooze::NotOpen);
            }
            let live = c.row(COUNT, args![])?.map_or(Ok(0), |r| r.int(0))?;
            let again = c.row(SNOOZED_ANY_TIME, key)?.is_some();
            if live >= SNOOZES_MAX && !again {
                return Ok(Snooze::Full);
            }
            c.execute(UPSERT, args![&*session, &*attention_id, until_ms, now_ms])?;
            c.announce("snoozes")?;
            Ok(Snooze::Until(until_ms))
        })
    }

    /// The open prompts put off now: `[{session, for, until}]`, for the page.
    fn snoozes(&self, now_ms: i64) -> anyhow::Result<Vec<Value>> {
        self.conn(|c| {
            c.rows(SNOOZES, args![now_ms])?
                .iter()
                .map(|r| {
                    Ok(json!({
                        "session": r.text(0)?,
                        "for": r.text(1)?,
                        "until": fmt_ms(r.int(2)?),
                    }))
                })
                .collect()
        })
    }

    /// Whether the prompt is put off now (its push is then never sent).
    fn snoozed(&self, session: &str, attention_id: &str, now_ms: i64) -> anyhow::Result<bool> {
        self.conn(|c| {
            let (session, attention_id) = (c.text(session), c.text(attention_id));
            Ok(c.row(SNOOZED, args![&*session, &*attention_id, now_ms])?
                .is_some())
        })
    }

    /// When the next "Not now" is up (a held page request answers then).
    fn next_snooze_end(&self, now_ms: i64) -> anyhow::Result<Option<i64>> {
        self.conn(|c| {
            Ok(c.row(NEXT_END, args![now_ms])?
                .map(|r| r.opt_int(0))
                .transpose()?
                .flatten())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::store::EventStore;
    use super::super::{Db, Sqlite};
    use super::*;

    fn needed(db: &Sqlite, sid: &str, id: &str, seq: i64, ty: &str) {
        let ev = json!({"protocol":1,"id":ulid::Ulid::new().to_string(),"type":ty,
            "time":"2026-01-01T00:00:00.000Z","tier":1,"harness":{"name":"claude-code"},
            "session":{"id":sid,"seq":seq},"privacy":{"rulesets":["secrets@1"],"pii":false},
            "data":{"attention_id":id,"kind":"permission","tool":"Bash","message":"Bash ls","how":"answered"}});
        db.insert_events(&[&ev], 1_000, None).unwrap();
    }

    #[test]
    fn a_snooze_hides_an_open_prompt_until_its_time_or_its_end() {
        let db = Sqlite::new(Db::open_memory().unwrap());
        let key = "claude-code:s1";
        assert_eq!(db.snooze(key, "p1", 1_000, 5_000).unwrap(), Snooze::NotOpen);
        needed(&db, "s1", "p1", 0, "attention.needed");
        assert_eq!(
            db.snooze(key, "p1", 1_000, 5_000).unwrap(),
            Snooze::Until(5_000)
        );
        assert!(db.snoozed(key, "p1", 4_999).unwrap());
        assert!(!db.snoozed(key, "p1", 5_000).unwrap());
        assert_eq!(db.snoozes(2_000).unwrap().len(), 1);
        assert_eq!(db.next_snooze_end(2_000).unwrap(), Some(5_000));
        assert!(db.snoozes(5_000).unwrap().is_empty());
        // Cleared: the snooze goes with it, so the prompt asked again is news again.
        needed(&db, "s1", "p1", 1, "attention.cleared");
        needed(&db, "s1", "p1", 2, "attention.needed");
        assert!(!db.snoozed(key, "p1", 2_000).unwrap());
    }

    #[test]
    fn snoozes_are_capped() {
        let db = Sqlite::new(Db::open_memory().unwrap());
        for i in 0..=SNOOZES_MAX {
            needed(&db, "s1", &format!("p{i}"), i, "attention.needed");
        }
        for i in 0..SNOOZES_MAX {
            let got = db
                .snooze("claude-code:s1", &format!("p{i}"), 1_000, 9_000)
                .unwrap();
            assert_eq!(got, Snooze::Until(9_000));
        }
        let last = format!("p{SNOOZES_MAX}");
        assert_eq!(
            db.snooze("claude-code:s1", &last, 1_000, 9_000).unwrap(),
            Snooze::Full
        );
        // Put off again: allowed at the cap; and once they are up there is room again.
        assert_eq!(
            db.snooze("claude-code:s1", "p0", 1_000, 9_500).unwrap(),
            Snooze::Until(9_500)
        );
        assert_eq!(
            db.snooze("claude-code:s1", &last, 9_600, 20_000).unwrap(),
            Snooze::Until(20_000)
        );
    }
}
