//! Stop (DECISIONS 14): block only when prompts are queued; then deliver all of them at once,
//! oldest first. A Stop with nothing queued prints nothing, so no loop can start.
use crate::harness::Harness;
use crate::store::{PromptClaim, SessionRef, Store};
use crate::wire::event::TurnEnd;
use anyhow::Result;

/// One line saying who sent it and through which sink, then the text.
pub fn compose_reason(prompts: &[PromptClaim]) -> String {
    // Each sink once, in order of first appearance (the block budget counts them so).
    let mut sinks: Vec<&str> = Vec::new();
    for p in prompts {
        if !sinks.contains(&p.sink.as_str()) {
            sinks.push(p.sink.as_str());
        }
    }
    let via = sinks
        .iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let via = if sinks.len() == 1 {
        format!("sink {via}")
    } else {
        format!("sinks {via}")
    };
    let texts: Vec<&str> = prompts.iter().map(|p| p.text.as_str()).collect();
    if prompts.len() == 1 {
        format!(
            "Message from the person, sent through sessionpipe ({via}):\n\n{}",
            texts[0]
        )
    } else {
        format!(
            "{} messages from the person, sent through sessionpipe ({via}), oldest first:\n\n{}",
            prompts.len(),
            texts.join("\n\n---\n\n")
        )
    }
}

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
    store.confirm_delivered(&ids, &format!("{} {} hook", harness.name(), session.event))?;
    crate::logging::info(&format!(
        "{}: delivered {} prompt(s) at Stop",
        session.key(),
        ids.len()
    ));
    Ok(())
}
