//! DECISIONS 39: an answer to a parked prompt resumes its run. The run ended waiting for the
//! prompt (Claude Code `defer`); a run with no new text (`claude -p --resume ID`) re-fires
//! the same call, whose hook takes the stored answer: the answer stays with the hook, never
//! with the run, so one answer is carried out at most once however many runs start.
use crate::harness::Harness;
use crate::runs::{Kind, Request};
use crate::store::Store;
use anyhow::Result;

/// At most this many resumes requested per pass.
const PER_PASS: usize = 4;

/// Requests a run for each parked prompt whose answer waits and that nothing else will take
/// (no hook waits, no run of ours on the session, none launched for this park yet).
pub(crate) fn resume_answered(store: &mut Store) -> Result<()> {
    for p in store.parked_answered(PER_PASS)? {
        let Some(harness) = Harness::parse(&p.harness) else {
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
            // until the prompt's 24 h end, then expires; the next pass tries again.
            Err(e) => crate::logging::warn(&format!(
                "{} {}: cannot resume the parked run: {e:#}",
                p.session_key, p.attention_id
            )),
        }
    }
    Ok(())
}
