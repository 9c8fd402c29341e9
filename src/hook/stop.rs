//! Stop (DECISIONS 14): block only when prompts are queued; then deliver all of them at once,
//! oldest first. A Stop with nothing queued prints nothing, so no loop can start.
use crate::harness::Harness;
use crate::store::{PromptClaim, SessionRef, Store};
use anyhow::Result;

/// One line saying who sent it and through which sink, then the text.
pub fn compose_reason(prompts: &[PromptClaim]) -> String {
    let mut sinks: Vec<&str> = prompts.iter().map(|p| p.sink.as_str()).collect();
    sinks.dedup();
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

pub fn run(harness: Harness, store: &mut Store, session: &SessionRef) -> Result<()> {
    let claims = store.take_prompts(session, std::process::id())?;
    if claims.is_empty() {
        return Ok(());
    }
    super::print_answer(&harness.render_block(&compose_reason(&claims)))?;
    let ids: Vec<String> = claims.iter().map(|c| c.id.clone()).collect();
    store.confirm_delivered(&ids, &format!("{} {} hook", harness.name(), session.event))?;
    crate::logging::info(&format!(
        "{}: delivered {} prompt(s) at Stop",
        session.key(),
        ids.len()
    ));
    Ok(())
}
