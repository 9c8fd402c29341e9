//! What API delivery (src/sync/api.rs) does to the store: remember where an API-driven
//! session's server is and whether it is idle (reported by its plugin through a hook), find the
//! messages to deliver through that API, and claim them so each is acted on once.
use super::hooks::{end_waits, finish, PromptClaim, SessionRef, Waits};
use super::Store;
use crate::clock::{now_ms, Millis};
use crate::wire::control::Decision;
use anyhow::Result;
use rusqlite::{params, OptionalExtension};

/// A session driven through its server API, as the plugin last reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiSession {
    pub key: String,
    pub harness: String,
    pub session_id: String,
    pub base_url: Option<String>,
    pub directory: Option<String>,
    /// None until the plugin reported a status.
    pub idle: Option<bool>,
    /// When `base_url` was first reported (a server just started may hang requests).
    pub since_ms: Option<Millis>,
}

/// A queued, unexpired message of an API-driven session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiMessage {
    pub id: String,
    pub kind: String,
    pub attention_id: Option<String>,
    pub session: ApiSession,
}

/// A grant's answer to a prompt of an API-driven session, left by the permission hook for
/// sp-sync to send (DECISIONS 30), with the prompt as the hook read it.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiGrantReply {
    pub session: ApiSession,
    pub request_id: String,
    pub grant_id: i64,
    pub decision: Decision,
    pub hook_event: String,
    pub cwd: Option<String>,
    pub tool: Option<String>,
    pub message: Option<String>,
    pub input: Option<serde_json::Value>,
    pub hook_pid: u32,
}

/// An attention answered through a server API (OpenCode) by sp-sync, not by a waiting hook,
/// stays open this long unless the harness reports it answered first.
pub const API_ATTENTION_OPEN: std::time::Duration = std::time::Duration::from_secs(3600);

/// A grant reply sp-sync has not sent within this is dropped (OpenCode has asked in its TUI).
const GRANT_REPLY_MAX_MS: Millis = 3_600_000;

impl Store {
    /// The permission hook: a grant of the session answers `request_id`; sp-sync sends it.
    pub fn api_grant_reply_queue(
        &mut self,
        s: &SessionRef,
        (request_id, grant_id, decision): (&str, i64, Decision),
        (tool, message, input): (Option<&str>, Option<&str>, Option<&serde_json::Value>),
    ) -> Result<()> {
        self.conn.execute(
            "INSERT OR IGNORE INTO api_grant_replies(session_key, request_id, grant_id, decision, hook_event, cwd, tool, message, input, hook_pid, created_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                s.key(),
                request_id,
                grant_id,
                decision.as_str(),
                s.event,
                s.cwd,
                tool,
                message,
                input.map(|v| v.to_string()),
                std::process::id(),
                now_ms()
            ],
        )?;
        Ok(())
    }

    /// The grant replies waiting for sp-sync, oldest first (stale ones dropped).
    pub fn api_grant_replies(&self) -> Result<Vec<ApiGrantReply>> {
        self.conn.execute(
            "DELETE FROM api_grant_replies WHERE created_ms < ?1",
            params![now_ms() - GRANT_REPLY_MAX_MS],
        )?;
        let rows = self
            .conn
            .prepare_cached(
                "SELECT s.key, s.harness, s.session_id, s.api_url, s.api_directory, s.api_idle, s.api_since_ms, \
                        g.request_id, g.grant_id, g.decision, g.hook_event, g.cwd, g.tool, g.message, g.input, g.hook_pid \
                 FROM api_grant_replies g JOIN sessions s ON s.key = g.session_key \
                 ORDER BY g.created_ms",
            )?
            .query_map([], |r| {
                let input: Option<String> = r.get(14)?;
                Ok(ApiGrantReply {
                    session: session_row(r)?,
                    request_id: r.get(7)?,
                    grant_id: r.get(8)?,
                    decision: Decision::parse(&r.get::<_, String>(9)?).unwrap_or(Decision::Deny),
                    hook_event: r.get(10)?,
                    cwd: r.get(11)?,
                    tool: r.get(12)?,
                    message: r.get(13)?,
                    input: input.and_then(|i| serde_json::from_str(&i).ok()),
                    hook_pid: r.get(15)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// sp-sync sent the reply, or gave up on it.
    pub fn api_grant_reply_done(&mut self, r: &ApiGrantReply) -> Result<()> {
        self.conn.execute(
            "DELETE FROM api_grant_replies WHERE session_key=?1 AND request_id=?2",
            params![r.session.key, r.request_id],
        )?;
        Ok(())
    }

    /// A plugin event: the session is live, its server is at `base_url`, and it is idle or
    /// busy. Unknown parts keep what was stored.
    pub fn api_report(
        &mut self,
        s: &SessionRef,
        base_url: Option<&str>,
        directory: Option<&str>,
        idle: Option<bool>,
        seq: Option<i64>,
    ) -> Result<()> {
        self.record_event(s, None)?;
        let now = now_ms();
        // A report older than the newest one stored (its sp-event finished late) keeps the
        // newer idle/busy state; reports without a seq (older plugins) apply as they come.
        self.conn.execute(
            "UPDATE sessions SET \
               api_since_ms = CASE WHEN ?2 IS NOT NULL AND api_url IS NOT ?2 THEN ?5 ELSE api_since_ms END, \
               api_url = coalesce(?2, api_url), \
               api_directory = coalesce(?3, api_directory), \
               api_idle = CASE WHEN ?6 IS NOT NULL AND api_seq IS NOT NULL AND ?6 < api_seq \
                               THEN api_idle ELSE coalesce(?4, api_idle) END, \
               api_seq = CASE WHEN ?6 IS NOT NULL AND (api_seq IS NULL OR ?6 > api_seq) \
                              THEN ?6 ELSE api_seq END \
             WHERE key = ?1",
            params![s.key(), base_url, directory, idle, now, seq],
        )?;
        Ok(())
    }

    /// The session's API state, if the session is known.
    pub fn api_session(&self, key: &str) -> Result<Option<ApiSession>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT key, harness, session_id, api_url, api_directory, api_idle, api_since_ms FROM sessions WHERE key=?1",
            )?
            .query_row(params![key], session_row)
            .optional()?)
    }

    /// Sessions of `harness` idle again while prompts delivered through its API wait for the
    /// end of their turn (DECISIONS 38): their final ack can carry the turn's reply now.
    pub fn api_turns_done(&self, harness: &str) -> Result<Vec<ApiSession>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT key, harness, session_id, api_url, api_directory, api_idle, api_since_ms FROM sessions \
                 WHERE harness=?1 AND api_idle=1 AND EXISTS(SELECT 1 FROM turn_waits w WHERE w.session_key=key)",
            )?
            .query_map(params![harness], session_row)?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// The prompts waiting for the end of a Codex app-server turn they went into (DECISIONS
    /// 38 `api`), of sessions of `harness`: (session key, turn id, message id), oldest first.
    pub fn api_turn_waits(&self, harness: &str) -> Result<Vec<(String, String, String)>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT w.session_key, w.api_turn, w.message_id FROM turn_waits w \
                 JOIN sessions s ON s.key = w.session_key \
                 WHERE s.harness = ?1 AND w.api_turn IS NOT NULL ORDER BY w.since_ms, w.message_id",
            )?
            .query_map(params![harness], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// Codex app-server turn `turn` of session `key` ended: the prompts that went into it get
    /// their final ack, `delivered` with mode `api` and `reply` (already redacted and capped).
    /// Returns how many.
    pub fn api_turn_ended(&mut self, key: &str, turn: &str, reply: Option<&str>) -> Result<usize> {
        let tx = self.write_tx()?;
        let n = end_waits(&tx, key, Waits::ApiTurn(turn), "api", reply, now_ms())?;
        tx.commit()?;
        Ok(n)
    }

    /// Queued, unexpired messages of sessions of `harness`, oldest `at` first. Expired ones are
    /// left to the sweep, which acks them `expired`.
    pub fn api_queued(&self, harness: &str) -> Result<Vec<ApiMessage>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT m.id, m.kind, m.attention_id, \
                        s.key, s.harness, s.session_id, s.api_url, s.api_directory, s.api_idle, s.api_since_ms \
                 FROM messages m JOIN sessions s ON s.key = m.session_key \
                 WHERE m.state = 'queued' AND s.harness = ?1 AND m.deadline_ms > ?2 \
                 ORDER BY m.at, m.id",
            )?
            .query_map(params![harness, now_ms()], |r| {
                Ok(ApiMessage {
                    id: r.get(0)?,
                    kind: r.get(1)?,
                    attention_id: r.get(2)?,
                    session: ApiSession {
                        key: r.get(3)?,
                        harness: r.get(4)?,
                        session_id: r.get(5)?,
                        base_url: r.get(6)?,
                        directory: r.get(7)?,
                        idle: r.get::<_, Option<i64>>(8)?.map(|i| i != 0),
                        since_ms: r.get(9)?,
                    },
                })
            })?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// Claims one queued, unexpired message (state `delivering`) for an API call.
    pub fn api_claim(&mut self, id: &str, pid: u32) -> Result<bool> {
        let now = now_ms();
        let n = self.conn.execute(
            "UPDATE messages SET state='delivering', claimed_pid=?2, claimed_ms=?3 \
             WHERE id=?1 AND state='queued' AND deadline_ms > ?3",
            params![id, pid, now],
        )?;
        Ok(n == 1)
    }

    /// Claims the queued, unexpired prompts of the session, oldest `at` first, as many as fit
    /// one message of `BLOCK_MAX_CHARS` (the rest go next time), to send as one message.
    pub fn api_take_prompts(&mut self, key: &str, pid: u32) -> Result<Vec<PromptClaim>> {
        // The same claim a Stop makes (every mode: the API has no tool boundary to wait for).
        self.api_take_prompts_ranked(key, pid, 0)
    }

    /// [`Store::api_take_prompts`] for prompts of at least `min_rank` (0 every mode, 1 `steer`
    /// and `interrupt`, 2 `interrupt`): what may go into a turn that is already running.
    pub fn api_take_prompts_ranked(
        &mut self,
        key: &str,
        pid: u32,
        min_rank: i64,
    ) -> Result<Vec<PromptClaim>> {
        let now = now_ms();
        let tx = self.write_tx()?;
        let claims = super::hooks::claim_prompts(&tx, key, pid, now, min_rank)?;
        tx.commit()?;
        Ok(claims)
    }

    /// The API took a prompt: the session is busy until its plugin reports idle again.
    pub fn api_mark_busy(&mut self, key: &str) -> Result<()> {
        self.conn
            .execute("UPDATE sessions SET api_idle=0 WHERE key=?1", params![key])?;
        Ok(())
    }

    /// The session's open attentions, newest first (an app-server approval request is matched
    /// to the attention its PermissionRequest hook opened just before).
    /// Each with the message `attention.needed` carried.
    pub fn api_open_attentions(&self, key: &str) -> Result<Vec<(String, Option<String>)>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT attention_id, message FROM attention WHERE session_key=?1 AND state='open' \
                 ORDER BY opened_at DESC, rowid DESC",
            )?
            .query_map(params![key], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?)
    }

    /// An open attention's tool and message (what a grant for the session matches on an API
    /// harness, whose prompt names no input of its own).
    pub fn api_attention_call(
        &self,
        key: &str,
        attention_id: &str,
    ) -> Result<Option<(Option<String>, Option<String>)>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT tool, message FROM attention WHERE session_key=?1 AND attention_id=?2 AND state='open'",
            )?
            .query_row(params![key, attention_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }

    /// Final outcome of claimed messages after the API call (delivered or failed).
    pub fn api_finish(
        &mut self,
        ids: &[String],
        outcome: crate::wire::control::Outcome,
        detail: &str,
    ) -> Result<()> {
        let now = now_ms();
        let tx = self.write_tx()?;
        for id in ids {
            finish(&tx, id, outcome.as_str(), Some(detail), now)?;
        }
        tx.commit()?;
        Ok(())
    }
}

fn session_row(r: &rusqlite::Row) -> rusqlite::Result<ApiSession> {
    Ok(ApiSession {
        key: r.get(0)?,
        harness: r.get(1)?,
        session_id: r.get(2)?,
        base_url: r.get(3)?,
        directory: r.get(4)?,
        idle: r.get::<_, Option<i64>>(5)?.map(|i| i != 0),
        since_ms: r.get(6)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(s: &Store, id: &str, key: &str) {
        s.conn
            .execute(
                "INSERT INTO messages(id, session_key, sink, kind, text, received_at, deadline_ms, state, mode) \
                 VALUES (?1, ?2, 'phone', 'prompt', 'hi', '2026-01-01T00:00:00.000Z', ?3, 'queued', 'queue')",
                params![id, key, now_ms() + 600_000],
            )
            .unwrap();
    }

    fn ack(s: &Store, id: &str) -> (String, Option<String>, Option<String>) {
        s.conn
            .query_row(
                "SELECT outcome, mode, reply FROM acks WHERE message_id=?1",
                params![id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap()
    }

    /// DECISIONS 38 under `sp codex`: a prompt sp-sync put into an app-server turn is acked
    /// at that turn's end, mode `api`, with its reply; the Stop hook of the same turn (Codex
    /// runs its hooks under the app-server too) ends only the waits a Stop made.
    /// A store with Codex session t1 whose prompt m1 went into app-server turn u1.
    fn waiting() -> (tempfile::TempDir, Store, SessionRef) {
        let d = tempfile::tempdir().unwrap();
        let mut s =
            crate::store::open(&d.path().join("c.db"), std::time::Duration::from_secs(1)).unwrap();
        let session = SessionRef {
            harness: "codex".into(),
            session_id: "t1".into(),
            cwd: None,
            event: "Stop".into(),
            permission_mode: None,
        };
        s.record_event(&session, Some("startup")).unwrap();
        let key = session.key();
        queue(&s, "m1", &key);
        s.deliver_for_api_turn(
            &key,
            &["m1".into()],
            "codex app-server turn/start (turn u1)",
            "u1",
        )
        .unwrap();
        (d, s, session)
    }

    #[test]
    fn an_app_server_turns_prompts_wait_for_that_turn_not_for_a_stop() {
        let (_d, mut s, session) = waiting();
        let key = session.key();
        queue(&s, "m2", &key);
        s.deliver_for_turn(&key, &["m2".into()], "codex Stop hook", true)
            .unwrap();
        assert_eq!(ack(&s, "m1").0, "taken");
        assert_eq!(
            s.api_turn_waits("codex").unwrap(),
            [(key.clone(), "u1".to_string(), "m1".to_string())]
        );
        assert!(s.api_turn_waits("claude-code").unwrap().is_empty());

        // The Stop ends its own wait only.
        assert_eq!(s.turn_ended_with(&key, Some("stop text")).unwrap(), 1);
        assert_eq!(
            ack(&s, "m2"),
            (
                "delivered".into(),
                Some("turn".into()),
                Some("stop text".into())
            )
        );
        assert_eq!(ack(&s, "m1").0, "taken");

        // Progress, then another turn's end (nothing), then its own turn's end.
        assert_eq!(s.turn_progress(&key, "so far").unwrap(), 1);
        assert_eq!(
            ack(&s, "m1"),
            ("progress".into(), None, Some("so far".into()))
        );
        assert_eq!(s.api_turn_ended(&key, "u0", Some("other")).unwrap(), 0);
        assert_eq!(s.api_turn_ended(&key, "u1", Some("the answer")).unwrap(), 1);
        assert_eq!(
            ack(&s, "m1"),
            (
                "delivered".into(),
                Some("api".into()),
                Some("the answer".into())
            )
        );
        // Exactly one final ack: a second end changes nothing.
        assert_eq!(s.api_turn_ended(&key, "u1", Some("again")).unwrap(), 0);
        assert_eq!(ack(&s, "m1").2.as_deref(), Some("the answer"));
        assert!(s.api_turn_waits("codex").unwrap().is_empty());
    }

    /// A session that ends (or a turn the sweep gives up on) ends an app-server turn's wait
    /// with its own mode, `api`, not the Stop's `turn`.
    #[test]
    fn an_app_server_wait_ended_with_its_session_keeps_mode_api() {
        let (_d, mut s, session) = waiting();
        s.end_session(&session).unwrap();
        assert_eq!(
            ack(&s, "m1"),
            ("delivered".into(), Some("api".into()), None)
        );
    }
}
