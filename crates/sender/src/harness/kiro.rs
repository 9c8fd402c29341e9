//! Kiro CLI: only what its documentation supports (docs/harness-contracts.md#kiro, kiro.dev
//! `docs/cli/v3/hooks`). Kiro documents no hook answer that allows a prompt (only exit 2 on
//! PreToolUse, a deny) and its Stop "cannot block", so Kiro hooks only keep the session live:
//! sp-sync polls for it and acks every control message `unsupported` at once.
//!
//! Not run here: Kiro's CLI comes only from kiro.dev's installer, which this machine cannot
//! reach (no Kiro CLI is published on npm, crates.io, PyPI or Debian).
//!
//! Unverified: the exact payload. Docs show `{hook_event_name, cwd, tool_name?, tool_input?,
//! tool_response?}`; `session_id` comes from sessionpipe's notes. Both casings and both
//! naming schemes (v3 `SessionStart`, legacy agent-config `agentSpawn`) are read.
use super::{payload, session_ref, Harness, HookInput, Text};

/// The fields of a Kiro hook payload we read, in each spelling its docs and notes show.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Payload {
    cwd: Text,
    source: Text,
    hook_event_name: Text,
    #[serde(rename = "hookEventName")]
    hook_event_name_camel: Text,
    /// The legacy agent-config name of the event.
    trigger: Text,
    session_id: Text,
    #[serde(rename = "sessionId")]
    session_id_camel: Text,
    conversation_id: Text,
    #[serde(rename = "conversationId")]
    conversation_id_camel: Text,
}

pub fn parse(stdin: &[u8]) -> HookInput {
    let p: Payload = match payload(stdin, "Kiro") {
        Ok(p) => p,
        Err(e) => return HookInput::Skip(e),
    };
    let event = p
        .hook_event_name
        .get()
        .or(p.hook_event_name_camel.get())
        .or(p.trigger.get());
    let Some(event) = event else {
        return HookInput::Skip("Kiro payload has no hook_event_name".into());
    };
    let id = p
        .session_id
        .get()
        .or(p.session_id_camel.get())
        .or(p.conversation_id.get())
        .or(p.conversation_id_camel.get());
    let session = match session_ref(Harness::Kiro, id, p.cwd.get(), event) {
        Ok(s) => s,
        Err(e) => return HookInput::Skip(e),
    };
    match event {
        "SessionStart" | "agentSpawn" => HookInput::SessionStart {
            source: p.source.get().unwrap_or("startup").to_string(),
            session,
        },
        // Stop (v3: "session ends"; legacy: the agent finished responding) is left as a sign of
        // life: ending the session here would stop the polls that ack its messages.
        _ => HookInput::Alive { session },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn events() {
        assert!(matches!(
            parse(br#"{"hook_event_name":"agentSpawn","session_id":"k1","cwd":"/w"}"#),
            HookInput::SessionStart { .. }
        ));
        assert!(matches!(
            parse(br#"{"hookEventName":"Stop","sessionId":"k1"}"#),
            HookInput::Alive { .. }
        ));
        assert!(matches!(
            parse(br#"{"hook_event_name":"stop","cwd":"/w"}"#),
            HookInput::Skip(_)
        ));
    }
}
