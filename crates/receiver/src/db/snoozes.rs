//! "Not now" (issue 26): an open prompt the person put off. Until its time is up it is hidden
//! on every page and never pushed; the machine keeps waiting for it all along. It ends by
//! itself, or when the prompt clears (answered, in the terminal or elsewhere).

use rusqlite::{params, OptionalExtension};
use serde_json::{json, Value};

use super::{fmt_ms, Db};

// The snoozes' SQL, one text for both stores (pg_snoozes.rs runs it on PostgreSQL).
pub(super) const DROP_ENDED: &str = "DELETE FROM snoozes WHERE until_ms <= ?1";
pub(super) const OPEN_ATTENTION: &str =
    "SELECT 1 FROM attentions WHERE session_key = ?1 AND attention_id = ?2 AND open = 1";
pub(super) const COUNT: &str = "SELECT count(*) FROM snoozes";
pub(super) const SNOOZED_ANY_TIME: &str =
    "SELECT 1 FROM snoozes WHERE session_key = ?1 AND attention_id = ?2";
pub(super) const UPSERT: &str = "INSERT INTO snoozes(session_key, attention_id, until_ms, \
    made_ms) VALUES (?1, ?2, ?3, ?4) ON CONFLICT(session_key, attention_id) \
    DO UPDATE SET until_ms = excluded.until_ms, made_ms = excluded.made_ms";
pub(super) const SNOOZES: &str = "SELECT z.session_key, z.attention_id, z.until_ms \
    FROM snoozes z JOIN attentions a \
    ON a.session_key = z.session_key AND a.attention_id = z.attention_id \
    WHERE z.until_ms > ?1 AND a.open = 1 \
    ORDER BY z.until_ms, z.session_key COLLATE BINARY, z.attention_id COLLATE BINARY";
pub(super) const SNOOZED: &str = "SELECT 1 FROM snoozes \
    WHERE session_key = ?1 AND attention_id = ?2 AND until_ms > ?3";
pub(super) const NEXT_END: &str = "SELECT min(until_ms) FROM snoozes WHERE until_ms > ?1";
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

impl Db {
    /// Puts off the open prompt `attention_id` of `session` until `until_ms` (a second
    /// "Not now" starts its time again).
    pub fn snooze(
        &mut self,
        session: &str,
        attention_id: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> rusqlite::Result<Snooze> {
        let tx = self.conn.transaction()?;
        tx.execute(DROP_ENDED, params![now_ms])?;
        let open = tx
            .query_row(OPEN_ATTENTION, params![session, attention_id], |_| Ok(()))
            .optional()?
            .is_some();
        if !open {
            return Ok(Snooze::NotOpen);
        }
        let live: i64 = tx.query_row(COUNT, [], |r| r.get(0))?;
        let again = tx
            .query_row(SNOOZED_ANY_TIME, params![session, attention_id], |_| Ok(()))
            .optional()?
            .is_some();
        if live >= SNOOZES_MAX && !again {
            return Ok(Snooze::Full);
        }
        tx.execute(UPSERT, params![session, attention_id, until_ms, now_ms])?;
        tx.commit()?;
        Ok(Snooze::Until(until_ms))
    }

    /// The open prompts put off now: `[{session, for, until}]`, for the page.
    pub fn snoozes(&self, now_ms: i64) -> rusqlite::Result<Vec<Value>> {
        let mut st = self.conn.prepare_cached(SNOOZES)?;
        let rows = st.query_map(params![now_ms], |r| {
            Ok(json!({
                "session": r.get::<_, String>(0)?,
                "for": r.get::<_, String>(1)?,
                "until": fmt_ms(r.get(2)?),
            }))
        })?;
        rows.collect()
    }

    /// Whether the prompt is put off now (its push is then never sent).
    pub fn snoozed(
        &self,
        session: &str,
        attention_id: &str,
        now_ms: i64,
    ) -> rusqlite::Result<bool> {
        Ok(self
            .conn
            .prepare_cached(SNOOZED)?
            .query_row(params![session, attention_id, now_ms], |_| Ok(()))
            .optional()?
            .is_some())
    }

    /// When the next "Not now" is up (a held page request answers then).
    pub fn next_snooze_end(&self, now_ms: i64) -> rusqlite::Result<Option<i64>> {
        self.conn
            .prepare_cached(NEXT_END)?
            .query_row(params![now_ms], |r| r.get(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needed(db: &mut Db, sid: &str, id: &str, seq: i64, ty: &str) {
        let ev = json!({"protocol":1,"id":ulid::Ulid::new().to_string(),"type":ty,
            "time":"2026-01-01T00:00:00.000Z","tier":1,"harness":{"name":"claude-code"},
            "session":{"id":sid,"seq":seq},"privacy":{"rulesets":["secrets@1"],"pii":false},
            "data":{"attention_id":id,"kind":"permission","tool":"Bash","message":"Bash ls","how":"answered"}});
        db.insert_events(&[&ev], 1_000, None).unwrap();
    }

    #[test]
    fn a_snooze_hides_an_open_prompt_until_its_time_or_its_end() {
        let mut db = Db::open_memory().unwrap();
        let key = "claude-code:s1";
        assert_eq!(db.snooze(key, "p1", 1_000, 5_000).unwrap(), Snooze::NotOpen);
        needed(&mut db, "s1", "p1", 0, "attention.needed");
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
        needed(&mut db, "s1", "p1", 1, "attention.cleared");
        needed(&mut db, "s1", "p1", 2, "attention.needed");
        assert!(!db.snoozed(key, "p1", 2_000).unwrap());
    }

    #[test]
    fn snoozes_are_capped() {
        let mut db = Db::open_memory().unwrap();
        for i in 0..=SNOOZES_MAX {
            needed(&mut db, "s1", &format!("p{i}"), i, "attention.needed");
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
