//! Events and the page's view on PostgreSQL: events.rs's and sessions.rs's SQL through
//! dialect.rs, the same decisions (events.rs's `owner_check`, `merged_info`,
//! `attention_write`) and the same JSON (sessions.rs's `*_view`).
//!
//! Two receivers may store events of one session at once (READ COMMITTED). The writes are
//! upserts, so neither fails on the other's new row, and an event is stored once by its
//! UNIQUE key; but a session's fields are merged from what was stored before, its owner is
//! checked before its events are, and an attention follows seq: reads then writes. So a
//! batch first takes a transaction-scoped lock per session it names (in one order, so two
//! batches never wait on each other in a cycle), and each session is then written by one
//! receiver at a time, as SQLite writes everything.
//!
//! The page reads one snapshot (REPEATABLE READ, read only). Where sessions.rs asks SQLite's
//! JSON functions (whether a page's answer for a prompt was delivered; an ack's `code`), this
//! reads the bodies and asks sessions.rs's `answer_for` and `ack_code`: PostgreSQL 15 has no
//! test for valid JSON, and its JSON functions refuse a `\u0000` that SQLite's take, which
//! would break the page for everyone on one message.
#![cfg_attr(not(test), allow(dead_code))]

use std::collections::HashSet;

use r2d2_postgres::postgres::types::{ToSql, Type};
use r2d2_postgres::postgres::{IsolationLevel, Transaction};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::dialect::postgres as q;
use super::events::{
    attention_write, merged_info, owner_check, AttentionWrite, EventKey, Owner, ATTENTION_CLEARED,
    ATTENTION_NEEDED, CLAIM_SESSION, INSERT_EVENT, SESSION_INFO, UPSERT_SESSION,
};
use super::fmt_ms;
use super::machines::{SESSION_MACHINE, SESSION_OWNER};
use super::pg::PgStore;
use super::pg_wake::announce;
use super::sessions::{
    ack_code, answer_for, attention_view, cleared_view, current_tool, message_status_view,
    name_calls, session_view, turn_view, SessionRow, ShownAck, ANSWERED_CALL, CLEARED_FOR_MS,
    CLEARED_LISTED, LAST_TOOL, OPEN_ATTENTIONS, PAGE_MESSAGES, PAGE_SESSIONS, PAGE_TURNS,
    TRANSCRIPTS,
};
use super::snoozes::UNSNOOZE;
use super::store::EventStore;
use super::Stored;

/// The first number of the two-number advisory locks taken per session ("sp" in ASCII);
/// the second is from the session's key.
const SESSION_LOCK: i32 = 0x7370;

/// sessions.rs's cleared prompts without the JSON: `by_page` comes from
/// [`DELIVERED_ANSWERS`].
const CLEARED: &str = "SELECT attention_id, tool, message, how, cleared_at FROM attentions \
    WHERE session_key = ?1 AND open = 0 AND cleared_at >= ?2 \
    ORDER BY cleared_at COLLATE BINARY DESC, attention_id COLLATE BINARY LIMIT ?3";
/// The bodies of a session's answers to prompts that were delivered.
const DELIVERED_ANSWERS: &str = "SELECT m.body FROM messages m JOIN acks k ON k.id = m.id \
    WHERE m.session = ?1 AND m.kind = 'permission.answer' AND k.outcome = 'delivered'";
/// sessions.rs's messages with the body of the ack that says most (its first final one,
/// else its newest `taken` or `progress`), for its `code`, `mode` and `reply`.
const MESSAGES: &str = "SELECT m.body, m.expires_ms, m.first_polled_at, a.outcome, a.detail, \
    a.body, a.received_at FROM messages m \
    LEFT JOIN acks a ON a.n = (SELECT n FROM acks WHERE acks.id = m.id \
    ORDER BY CASE WHEN outcome IN ('taken', 'progress') THEN -n ELSE n - 9000000000000000000 END \
    LIMIT 1) \
    WHERE m.session = ?1 ORDER BY m.n DESC LIMIT ?2";

/// Text as PostgreSQL can keep it: its `text` holds no NUL, which SQLite's does (an
/// attention's fields come as the machine sent them); so a NUL reads U+FFFD here, and a
/// name asked for with one (a page's snooze of that prompt) is asked for the same way.
pub(super) fn pg_text(s: Option<String>) -> Option<String> {
    s.map(|t| {
        if t.contains('\0') {
            t.replace('\0', "\u{fffd}")
        } else {
            t
        }
    })
}

/// The second number of `key`'s lock (two keys sharing one only wait for each other).
fn lock_of(key: &str) -> i32 {
    let h = Sha256::digest(key.as_bytes());
    i32::from_be_bytes([h[0], h[1], h[2], h[3]])
}

/// The two numbers of `key`'s ingest lock (what a test holds to freeze an ingest).
#[cfg(all(test, feature = "testing"))]
pub(crate) fn session_lock(key: &str) -> (i32, i32) {
    (SESSION_LOCK, lock_of(key))
}

/// Takes the locks of these sessions until the end of `tx`, in ascending order (one
/// statement: `unnest` yields the array in its order).
fn lock_sessions<'a>(
    tx: &mut Transaction<'_>,
    keys: impl Iterator<Item = &'a str>,
) -> anyhow::Result<()> {
    let mut locks: Vec<i32> = keys.map(lock_of).collect();
    locks.sort_unstable();
    locks.dedup();
    tx.execute_typed(
        "SELECT pg_advisory_xact_lock($1, k) FROM unnest($2) AS k",
        &[(&SESSION_LOCK, Type::INT4), (&locks, Type::INT4_ARRAY)],
    )?;
    Ok(())
}

/// A parameter sent as text or as a 64-bit integer: with its type given, each statement of
/// the ingest is one round trip (nothing prepared first).
fn text(v: &(dyn ToSql + Sync)) -> (&(dyn ToSql + Sync), Type) {
    (v, Type::TEXT)
}

fn int(v: &(dyn ToSql + Sync)) -> (&(dyn ToSql + Sync), Type) {
    (v, Type::INT8)
}

impl EventStore for PgStore {
    fn insert_events(
        &self,
        events: &[&Value],
        now_ms: i64,
        machine: Option<&str>,
    ) -> anyhow::Result<Vec<Stored>> {
        let keys: Vec<EventKey> = events.iter().map(|ev| EventKey::of(ev)).collect();
        let now_at = fmt_ms(now_ms);
        let mut c = self.pool.get()?;
        let mut tx = c.transaction()?;
        lock_sessions(&mut tx, keys.iter().map(|e| e.key.as_str()))?;
        let mut out = Vec::with_capacity(events.len());
        for (ev, e) in events.iter().zip(&keys) {
            let owner: Option<(String, bool)> = tx
                .query_typed_opt(&q(SESSION_OWNER), &[text(&e.key)])?
                .and_then(|r| Some((r.get::<_, Option<String>>(0)?, r.get(1))));
            match owner_check(owner.as_ref().map(|(o, p)| (o.as_str(), *p)), machine) {
                Owner::Foreign => {
                    out.push(Stored::Foreign);
                    continue;
                }
                Owner::Claim => {
                    tx.execute_typed(&q(CLAIM_SESSION), &[text(&e.key), text(&machine)])?;
                }
                Owner::Keep => {}
            }
            let n = tx.execute_typed(
                &q(INSERT_EVENT),
                &[
                    text(&e.harness),
                    text(&e.sid),
                    int(&e.seq),
                    text(&e.ty),
                    text(&ev["id"].as_str().unwrap_or_default()),
                    int(&now_ms),
                    text(&now_at),
                    text(&ev.to_string()),
                ],
            )?;
            if n == 0 {
                out.push(Stored::Duplicate);
                continue;
            }
            out.push(Stored::New);
            let old: Option<String> = tx
                .query_typed_opt(&q(SESSION_INFO), &[text(&e.key)])?
                .map(|r| r.get(0));
            tx.execute_typed(
                &q(UPSERT_SESSION),
                &[
                    text(&e.key),
                    text(&e.harness),
                    text(&e.sid),
                    text(&now_at),
                    int(&now_ms),
                    text(&e.ty),
                    int(&e.seq),
                    text(&merged_info(old.as_deref(), ev, e.ty)),
                    int(&i64::from(e.ty == "session.ended")),
                    text(&machine),
                ],
            )?;
            match attention_write(e.ty, &ev["data"]) {
                Some(AttentionWrite::Needed {
                    id,
                    kind,
                    tool,
                    message,
                    input,
                    partial,
                    sha256,
                    parked_until_ms,
                }) => {
                    let id = pg_text(Some(id));
                    let (kind, tool, message) = (pg_text(kind), pg_text(tool), pg_text(message));
                    tx.execute_typed(
                        &q(ATTENTION_NEEDED),
                        &[
                            text(&e.key),
                            text(&id),
                            text(&kind),
                            text(&tool),
                            text(&message),
                            int(&e.seq),
                            text(&now_at),
                            text(&input),
                            int(&partial),
                            text(&sha256),
                            int(&parked_until_ms),
                        ],
                    )?;
                }
                Some(AttentionWrite::Cleared { id, how }) => {
                    let (id, how) = (pg_text(Some(id)), pg_text(how));
                    let n = tx.execute_typed(
                        &q(ATTENTION_CLEARED),
                        &[
                            text(&e.key),
                            text(&id),
                            text(&how),
                            int(&e.seq),
                            text(&now_at),
                        ],
                    )?;
                    if n > 0 {
                        tx.execute_typed(&q(UNSNOOZE), &[text(&e.key), text(&id)])?;
                    }
                }
                None => {}
            }
        }
        if out.contains(&Stored::New) {
            announce(&mut tx, "events")?;
        }
        tx.commit()?;
        Ok(out)
    }

    fn page_sessions(&self, now_ms: i64, live_ms: i64) -> anyhow::Result<Vec<Value>> {
        let mut c = self.pool.get()?;
        let mut tx = c
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()?;
        let rows = tx.query(&q(PAGE_SESSIONS), &[&(now_ms - live_ms), &now_ms])?;
        let mut out = Vec::with_capacity(rows.len());
        if rows.is_empty() {
            return Ok(out);
        }
        let open = tx.prepare(&q(OPEN_ATTENTIONS))?;
        let cleared = tx.prepare(&q(CLEARED))?;
        let answers = tx.prepare(&q(DELIVERED_ANSWERS))?;
        let messages = tx.prepare(&q(MESSAGES))?;
        let call = tx.prepare(&q(ANSWERED_CALL))?;
        let transcripts = tx.prepare(&q(TRANSCRIPTS))?;
        let last_tool = tx.prepare(&q(LAST_TOOL))?;
        let since = fmt_ms(now_ms - CLEARED_FOR_MS);
        for r in rows {
            let row = SessionRow {
                key: r.get(0),
                harness: r.get(1),
                sid: r.get(2),
                first_at: r.get(3),
                last_at: r.get(4),
                last_type: r.get(5),
                info: r.get(6),
                ended: r.get::<_, i64>(7) != 0,
                machine_id: r.get(8),
            };
            let key = row.key.as_str();
            let attentions = tx
                .query(&open, &[&key, &now_ms])?
                .iter()
                .map(|r| {
                    attention_view(
                        r.get(0),
                        r.get(1),
                        r.get(2),
                        r.get(3),
                        r.get(4),
                        (r.get(5), r.get::<_, i64>(6) != 0, r.get(7)),
                        r.get(8),
                    )
                })
                .collect();
            let ended = tx.query(&cleared, &[&key, &since, &CLEARED_LISTED])?;
            // Only an answered prompt asks whether the answer came from a page.
            let answered = ended
                .iter()
                .any(|r| r.get::<_, Option<&str>>(3) == Some("answered"));
            let by_page: HashSet<String> = if answered {
                tx.query(&answers, &[&key])?
                    .iter()
                    .filter_map(|r| answer_for(r.get(0)))
                    .collect()
            } else {
                HashSet::new()
            };
            let ended = ended
                .iter()
                .map(|r| {
                    let id: String = r.get(0);
                    let page = by_page.contains(&id);
                    cleared_view(id, r.get(1), r.get(2), r.get(3), r.get(4), page)
                })
                .collect();
            let mut listed: Vec<Value> = tx
                .query(&messages, &[&key, &(PAGE_MESSAGES as i64)])?
                .iter()
                .map(|r| {
                    let detail: Option<String> = r.get(4);
                    let ack: Option<&str> = r.get(5);
                    message_status_view(
                        r.get(0),
                        r.get(1),
                        r.get(2),
                        ShownAck {
                            outcome: r.get(3),
                            detail: detail.or_else(|| ack.and_then(ack_code)),
                            at: r.get(6),
                            body: ack,
                        },
                        now_ms,
                    )
                })
                .collect();
            name_calls(&mut listed, |id| {
                Ok::<_, anyhow::Error>(
                    tx.query_opt(&call, &[&key, &pg_text(Some(id.into()))])?
                        .map(|r| (r.get(0), r.get(1), r.get(2))),
                )
            })?;
            let turns = tx
                .query(&transcripts, &[&row.harness, &row.sid, &PAGE_TURNS])?
                .iter()
                .filter_map(|r| turn_view(r.get(0), r.get(1)))
                .collect();
            let tool = tx
                .query_opt(&last_tool, &[&row.harness, &row.sid])?
                .and_then(|r| current_tool(r.get(0), r.get(1)));
            out.push(session_view(row, attentions, ended, listed, (turns, tool)));
        }
        tx.commit()?;
        Ok(out)
    }

    fn session_owner(&self, key: &str) -> anyhow::Result<Option<(Option<String>, bool)>> {
        Ok(self
            .pool
            .get()?
            .query_opt(&q(SESSION_OWNER), &[&pg_text(Some(key.into()))])?
            .map(|r| (r.get(0), r.get(1))))
    }

    fn session_machine(&self, key: &str) -> anyhow::Result<Option<Option<String>>> {
        Ok(self
            .pool
            .get()?
            .query_opt(&q(SESSION_MACHINE), &[&pg_text(Some(key.into()))])?
            .map(|r| r.get(0)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::pg_cluster::Cluster;
    use super::super::store::{SnoozeStore, Upkeep};
    use super::super::Snooze;
    use super::*;

    /// An attention's fields come as the machine sent them; a NUL, which PostgreSQL's text
    /// cannot hold, is kept as U+FFFD rather than failing the batch (and with it every
    /// later event of the machine's spool).
    #[test]
    #[cfg_attr(not(has_postgres), ignore = "PostgreSQL not installed")]
    fn an_attention_with_a_nul_is_stored_with_a_replacement() {
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
    }
}
