//! Stop (DECISIONS 14): block only when prompts are queued; then deliver all of them at once,
//! oldest first. A Stop with nothing queued prints nothing, so no loop can start.
use crate::harness::{compose_reason, Harness};
use crate::store::{SessionRef, Store};
use crate::wire::event::TurnEnd;
use anyhow::Result;

pub fn run(
    harness: Harness,
    store: &mut Store,
    session: &SessionRef,
    ends: Option<TurnEnd>,
) -> Result<()> {
    let claims = store.take_prompts(session, std::process::id(), ends)?;
    if claims.is_empty() {
        return Ok(());
    }
    let reason = compose_reason(&claims);
    if reason.chars().count() > crate::store::BLOCK_MAX_CHARS {
        // The budget in take_prompts counts what compose_reason writes; this is a bug.
        crate::logging::error(&format!(
            "{}: a Stop block of {} characters is over the limit",
            session.key(),
            reason.chars().count()
        ));
    }
    super::print_answer(&harness.render_block(&reason))?;
    let ids: Vec<String> = claims.iter().map(|c| c.id.clone()).collect();
    // The turn goes on with them; their final acks wait for its end, the next Stop
    // (DECISIONS 38 `turn` mode).
    store.deliver_for_turn(
        &session.key(),
        &ids,
        &format!("{} {} hook", harness.name(), session.event),
        harness.reports_turn_text(),
    )?;
    crate::logging::info(&format!(
        "{}: delivered {} prompt(s) at Stop",
        session.key(),
        ids.len()
    ));
    Ok(())
}
