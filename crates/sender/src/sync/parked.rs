//! DECISIONS 39: an answer to a parked prompt resumes its run. The run ended waiting for the
//! prompt (Claude Code `defer`); a run with no new text (`claude -p --resume ID`) re-fires
//! the same call, whose hook takes the stored answer: the answer stays with the hook, never
//! with the run, so one answer is carried out at most once however many runs start.
use crate::harness::Harness;
use crate::runs::{Kind, Request};
use crate::store::Store;
use anyhow::Result;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// At most this many resumes requested per pass.
const PER_PASS: usize = 4;
/// A parked prompt whose run could not be requested is tried again after this: its warning
/// is not logged every pass, and the prompts parked after it get their turn meanwhile.
const RETRY_AFTER: Duration = Duration::from_secs(30);
/// At most this many parked prompts held back at once.
const HELD_MAX: usize = 64;

/// The parked prompts held back after a failed try, until when (kept across passes).
#[derive(Default)]
pub(crate) struct Held(HashMap<(String, String), Instant>);

/// Requests a run for each parked prompt whose answer waits and that nothing else will take
/// (no hook waits, no run of ours on the session, none launched for this park yet), at most
/// [`PER_PASS`] tries a pass, skipping those `held` back.
pub(crate) fn resume_answered(store: &mut Store, held: &mut Held) -> Result<()> {
    let now = Instant::now();
    held.0.retain(|_, until| *until > now);
    let mut tried = 0;
    for p in store.parked_answered(PER_PASS + held.0.len())? {
        let key = (p.session_key.clone(), p.attention_id.clone());
        if tried >= PER_PASS || held.0.contains_key(&key) {
            continue;
        }
        tried += 1;
        let mut hold = || {
            if held.0.len() < HELD_MAX {
                held.0.insert(key.clone(), now + RETRY_AFTER);
            }
        };
        let Some(harness) = Harness::parse(&p.harness) else {
            hold();
            continue;
        };
        let req = Request {
            kind: Kind::Continue,
            harness,
            session_id: Some(&p.session_id),
            session_key: Some(&p.session_key),
            cwd: p.cwd.as_deref().unwrap_or(""),
            text: None,
            // The answer is the hook's to claim and ack, not the run's.
            message_id: None,
        };
        match crate::runs::request(store, &req) {
            Ok(Some(id)) => crate::logging::info(&format!(
                "{} {}: answered while parked; run {id} resumes it",
                p.session_key, p.attention_id
            )),
            Ok(None) => {}
            // Nothing can resume it (no folder, too many runs waiting): the answer waits
            // until the prompt's 24 h end, then expires; a pass after RETRY_AFTER tries again.
            Err(e) => {
                crate::logging::warn(&format!(
                    "{} {}: cannot resume the parked run (tried again in {}s): {e:#}",
                    p.session_key,
                    p.attention_id,
                    RETRY_AFTER.as_secs()
                ));
                hold();
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SessionRef;

    /// Parks an answered prompt of a new claude-code session `n` in folder `cwd`.
    fn parked(s: &mut Store, n: usize, cwd: &str) -> String {
        let session = SessionRef {
            harness: "claude-code".into(),
            session_id: format!("s{n}"),
            cwd: Some(cwd.into()),
            event: "PreToolUse".into(),
            permission_mode: None,
        };
        s.record_event(&session, None).unwrap();
        let key = session.key();
        let now = crate::clock::now_ms();
        s.open_attention(
            &session,
            &format!("perm-{n}"),
            Some("Bash"),
            None,
            now + 600_000,
            1,
        )
        .unwrap();
        s.conn
            .execute(
                "UPDATE attention SET parked_ms=?2, hook_pid=NULL WHERE session_key=?1",
                rusqlite::params![key, now - 100_000 + n as i64],
            )
            .unwrap();
        s.conn
            .execute(
                "INSERT INTO messages(id, session_key, sink, kind, received_at, deadline_ms, state, attention_id) \
                 VALUES (?1, ?2, 'phone', 'permission.answer', '2026-01-01T00:00:00.000Z', ?3, 'queued', ?4)",
                rusqlite::params![format!("m{n}"), key, now + 600_000, format!("perm-{n}")],
            )
            .unwrap();
        key
    }

    fn runs_of(s: &Store, key: &str) -> i64 {
        s.conn
            .query_row(
                "SELECT count(*) FROM runs WHERE session_key=?1",
                [key],
                |r| r.get(0),
            )
            .unwrap()
    }

    /// Parked prompts whose run cannot be requested (here: no absolute folder) are held back
    /// for a while: the next pass gets to the one parked after them instead of trying the same
    /// four again and again.
    #[test]
    fn parked_prompts_that_cannot_resume_do_not_keep_the_others_waiting() {
        let d = tempfile::tempdir().unwrap();
        let mut s = crate::store::open(&d.path().join("c.db"), Duration::from_secs(1)).unwrap();
        let stuck: Vec<String> = (0..PER_PASS)
            .map(|n| parked(&mut s, n, "not/absolute"))
            .collect();
        let last = parked(&mut s, 9, d.path().to_str().unwrap());
        let mut held = Held::default();
        resume_answered(&mut s, &mut held).unwrap();
        assert_eq!(runs_of(&s, &last), 0, "four tries a pass, the oldest first");
        assert_eq!(held.0.len(), PER_PASS);
        resume_answered(&mut s, &mut held).unwrap();
        assert_eq!(
            runs_of(&s, &last),
            1,
            "the next pass resumed the one after them"
        );
        for k in &stuck {
            assert_eq!(runs_of(&s, k), 0);
        }
        assert_eq!(
            held.0.len(),
            PER_PASS,
            "the stuck ones stay held, not tried again"
        );
    }
}
