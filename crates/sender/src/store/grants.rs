//! Grants for a session (DECISIONS 30 `scope: "session"` on hook harnesses): the machine keeps
//! the person's answer for exactly one tool and one input of one session in one folder (the
//! folder the prompt ran in: the same command elsewhere is another prompt), and sp-permission
//! answers a later identical prompt of that session from it at once. A grant never matches
//! more than the person saw; it ends with its session, at `until` (at most 24 h), or by
//! `sp grants revoke`.
use super::hooks::{clear, finish};
use super::{Answer, SessionRef, Store};
use crate::clock::{format_ms, now_ms, Millis};
use crate::wire::control::Decision;
use crate::wire::event::How;
use anyhow::Result;
use rusqlite::{params, OptionalExtension};
use serde_json::Value;

/// A grant lives at most this long (DECISIONS 30).
pub const GRANT_MAX_MS: Millis = 24 * 3600 * 1000;
/// A grant's input summary is cut to this many characters.
const SUMMARY_MAX: usize = 200;

/// A live grant that answers a prompt.
#[derive(Debug, Clone)]
pub struct Grant {
    pub id: i64,
    pub decision: Decision,
    /// The answer's `input` or `answers` part, as the harness's adapter replays it (JSON).
    pub answer: Option<String>,
    pub who: String,
}

/// One row of `sp grants`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GrantRow {
    pub id: i64,
    pub session: String,
    pub tool: String,
    pub summary: String,
    pub decision: String,
    pub who: String,
    pub created_at: String,
    pub until_at: String,
    pub used: i64,
}

/// What a grant matches: sha256 over the tool, the input's canonical JSON (keys sorted at
/// every level) and the folder the prompt ran in, so the same input in the same folder always
/// matches and any other input, or the same one in another folder, never does.
pub fn matcher(tool: &str, input: &Value, folder: Option<&str>) -> String {
    use sha2::{Digest, Sha256};
    let what = serde_json::json!([tool, canonical(input), folder]);
    let d = Sha256::digest(serde_json::to_vec(&what).unwrap_or_default());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&o[k])))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// What the person's answer made: kept by [`Store::add_grant`].
pub struct NewGrant<'a> {
    pub session_key: &'a str,
    /// The folder the prompt ran in ([`Store::grant_folder`]).
    pub folder: Option<&'a str>,
    pub tool: &'a str,
    pub input: &'a Value,
    pub summary: &'a str,
    pub decision: Decision,
    pub answer: Option<String>,
    pub who: &'a str,
    pub message_id: &'a str,
    /// The answer's own deadline cannot shorten a grant; only this cap and the session do.
    pub until_ms: Option<Millis>,
}

/// Inserts a grant in `tx`; returns its id.
fn insert_grant(tx: &rusqlite::Transaction, g: &NewGrant, now: Millis) -> Result<i64> {
    let until = g
        .until_ms
        .map_or(now + GRANT_MAX_MS, |u| u.min(now + GRANT_MAX_MS));
    let summary = crate::wire::text::truncate(g.summary, SUMMARY_MAX);
    tx.execute(
        "INSERT INTO grants(session_key, tool, matcher, summary, decision, answer, who, message_id, \
           created_ms, created_at, until_ms, until_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        params![
            g.session_key,
            g.tool,
            matcher(g.tool, g.input, g.folder),
            summary,
            g.decision.as_str(),
            g.answer,
            g.who,
            g.message_id,
            now,
            format_ms(now),
            until,
            format_ms(until),
        ],
    )?;
    Ok(tx.last_insert_rowid())
}

impl Store {
    /// Keeps a grant for the session; returns its id.
    pub fn add_grant(&mut self, g: &NewGrant) -> Result<i64> {
        let tx = self.write_tx()?;
        let id = insert_grant(&tx, g, now_ms())?;
        tx.commit()?;
        Ok(id)
    }

    /// [`Store::confirm_answer`] for an answer with `scope: "session"`: the ack `delivered`,
    /// the attention cleared `answered` and the grant kept, in one transaction, so a delivered
    /// session answer always has its grant. Returns the grant's id.
    pub fn confirm_answer_with_grant(
        &mut self,
        s: &SessionRef,
        attention_id: &str,
        answer: &Answer,
        detail: &str,
        g: &NewGrant,
    ) -> Result<i64> {
        let now = now_ms();
        let tx = self.write_tx()?;
        let id = insert_grant(&tx, g, now)?;
        let detail = format!("{detail}; grant {id} for the session");
        finish(&tx, &answer.id, "delivered", Some(&detail), now)?;
        clear(&tx, &s.key(), attention_id, How::Answered, &s.event, now)?;
        tx.commit()?;
        Ok(id)
    }

    /// The folder a grant of `s` is bound to: the one its hook names, else the one the
    /// session last reported from its own hooks (an answer taken off the hook's path).
    pub fn grant_folder(&self, s: &SessionRef) -> Option<String> {
        s.cwd
            .clone()
            .or_else(|| self.session_cwd(&s.key()).ok().flatten().flatten())
    }

    /// The live grant of this session for exactly this tool and input in this folder (a
    /// read: no lock).
    pub fn find_grant(
        &self,
        session_key: &str,
        folder: Option<&str>,
        tool: &str,
        input: &Value,
    ) -> Result<Option<Grant>> {
        let row: Option<(i64, String, Option<String>, String)> = self
            .conn
            .prepare_cached(
                "SELECT id, decision, answer, who FROM grants WHERE session_key=?1 AND tool=?2 \
                   AND matcher=?3 AND ended_at IS NULL AND until_ms > ?4 ORDER BY id DESC LIMIT 1",
            )?
            .query_row(
                params![session_key, tool, matcher(tool, input, folder), now_ms()],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .optional()?;
        Ok(row.and_then(|(id, decision, answer, who)| {
            Decision::parse(&decision).map(|decision| Grant {
                id,
                decision,
                answer,
                who,
            })
        }))
    }

    /// A grant answered another prompt: the session is touched as by any hook event of ours
    /// (DECISIONS 5), and the grant counts the use.
    pub fn grant_used(&mut self, id: i64, s: &SessionRef) -> Result<()> {
        self.record_event(s, None)?;
        self.conn
            .execute("UPDATE grants SET used = used + 1 WHERE id=?1", params![id])?;
        Ok(())
    }

    /// SessionEnd: every grant of the session ends with it. Returns how many ended.
    pub fn end_grants(&mut self, session_key: &str) -> Result<usize> {
        let n = self.conn.execute(
            "UPDATE grants SET ended_at=?2, ended_how='session_ended' WHERE session_key=?1 AND ended_at IS NULL",
            params![session_key, format_ms(now_ms())],
        )?;
        Ok(n)
    }

    /// `sp grants revoke ID`: false when no live grant has that id.
    pub fn revoke_grant(&mut self, id: i64) -> Result<bool> {
        let n = self.conn.execute(
            "UPDATE grants SET ended_at=?2, ended_how='revoked' WHERE id=?1 AND ended_at IS NULL AND until_ms > ?3",
            params![id, format_ms(now_ms()), now_ms()],
        )?;
        Ok(n > 0)
    }

    /// The live grants, oldest first.
    pub fn live_grants(&self) -> Result<Vec<GrantRow>> {
        let rows = self
            .conn
            .prepare(
                "SELECT id, session_key, tool, summary, decision, who, created_at, until_at, used \
                 FROM grants WHERE ended_at IS NULL AND until_ms > ?1 ORDER BY id",
            )?
            .query_map(params![now_ms()], |r| {
                Ok(GrantRow {
                    id: r.get(0)?,
                    session: r.get(1)?,
                    tool: r.get(2)?,
                    summary: r.get(3)?,
                    decision: r.get(4)?,
                    who: r.get(5)?,
                    created_at: r.get(6)?,
                    until_at: r.get(7)?,
                    used: r.get(8)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// A claimed answer the hook cannot carry out as sent (DECISIONS 30, checked when the
    /// call is known): acked `failed` with `detail`; the prompt stays open for another answer.
    pub fn fail_claimed(&mut self, message_id: &str, detail: &str) -> Result<()> {
        self.finish_claimed(message_id, "failed", detail)
    }

    /// A claimed answer acked `outcome` (`failed` or `unsupported`) without being carried
    /// out; the prompt it answered stays open.
    pub fn finish_claimed(&mut self, message_id: &str, outcome: &str, detail: &str) -> Result<()> {
        let tx = self.write_tx()?;
        finish(&tx, message_id, outcome, Some(detail), now_ms())?;
        tx.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn matcher_is_exact_and_ignores_key_order() {
        let a = matcher(
            "Bash",
            &json!({"command": "ls", "description": "list"}),
            Some("/a"),
        );
        assert_eq!(
            a,
            matcher(
                "Bash",
                &json!({"description": "list", "command": "ls"}),
                Some("/a")
            )
        );
        assert_ne!(
            a,
            matcher(
                "Bash",
                &json!({"command": "ls -a", "description": "list"}),
                Some("/a")
            )
        );
        assert_ne!(
            a,
            matcher(
                "Write",
                &json!({"command": "ls", "description": "list"}),
                Some("/a")
            )
        );
        assert_eq!(a.len(), 64);
    }
}
