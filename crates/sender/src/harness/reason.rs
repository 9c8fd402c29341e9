//! The text a harness is given for the person's queued prompts (a Stop's block reason, a
//! prompt sent into a live session).
use crate::store::PromptClaim;

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
