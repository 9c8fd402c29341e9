//! Harness adapters: each module parses its harness's hook stdin into a [`HookInput`] and
//! renders our answers in that harness's exact output shape. Nothing here knows HTTP or SQL.
pub mod claude_code;

use crate::store::SessionRef;
use crate::wire::control::{Decision, Kind, Outcome};

/// Harnesses with an adapter in this build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Harness {
    ClaudeCode,
}

impl Harness {
    pub const ALL: &'static [Harness] = &[Harness::ClaudeCode];

    pub fn parse(name: &str) -> Option<Harness> {
        match name {
            "claude-code" => Some(Harness::ClaudeCode),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Harness::ClaudeCode => "claude-code",
        }
    }

    /// Parses hook stdin. Anything we do not understand is `Skip`, never an error.
    pub fn parse_input(self, stdin: &[u8]) -> HookInput {
        match self {
            Harness::ClaudeCode => claude_code::parse(stdin),
        }
    }

    /// The exact stdout that answers a permission prompt.
    pub fn render_permission(self, decision: Decision, message: &str) -> String {
        match self {
            Harness::ClaudeCode => claude_code::render_permission(decision, message),
        }
    }

    /// The exact stdout that continues the turn with `reason` as the next instruction.
    pub fn render_block(self, reason: &str) -> String {
        match self {
            Harness::ClaudeCode => claude_code::render_block(reason),
        }
    }

    /// The hook event name that delivers prompts, for ack details.
    pub fn stop_event(self) -> &'static str {
        match self {
            Harness::ClaudeCode => "Stop",
        }
    }

    pub fn permission_event(self) -> &'static str {
        match self {
            Harness::ClaudeCode => "PermissionRequest",
        }
    }
}

/// What a hook event means to us, whatever harness sent it.
#[derive(Debug, Clone, PartialEq)]
pub enum HookInput {
    /// A permission prompt is about to be shown: record it, announce it, wait for an answer.
    Permission { session: SessionRef, attention_id: String, tool: Option<String>, message: Option<String> },
    /// The turn is ending: deliver queued prompts by blocking.
    Stop { session: SessionRef },
    SessionStart { session: SessionRef, source: String },
    SessionEnd { session: SessionRef },
    /// A tool ran or a new prompt came: the terminal resolved a pending prompt.
    /// `attention_id` names the one it resolved when that can be computed.
    TerminalAnswered { session: SessionRef, attention_id: Option<String> },
    /// Any other event of a live session.
    Alive { session: SessionRef },
    /// Not ours to handle (unparseable, another tool's payload, unknown event).
    Skip(String),
}

impl HookInput {
    pub fn session(&self) -> Option<&SessionRef> {
        match self {
            HookInput::Permission { session, .. }
            | HookInput::Stop { session }
            | HookInput::SessionStart { session, .. }
            | HookInput::SessionEnd { session }
            | HookInput::TerminalAnswered { session, .. }
            | HookInput::Alive { session } => Some(session),
            HookInput::Skip(_) => None,
        }
    }
}

/// Which control kinds a harness can take, and by which path (README table).
/// Returns the final outcome for a kind the harness has no path for; None means "deliver".
pub fn route(harness: &str, kind: Kind) -> Option<(Outcome, String)> {
    let unsupported = |why: &str| Some((Outcome::Unsupported, why.to_string()));
    match (harness, kind) {
        ("claude-code", Kind::PermissionAnswer | Kind::Prompt) => None,
        ("claude-code", Kind::Cancel) => {
            unsupported("claude-code has no API to cancel a running turn; never a signal to a pid")
        }
        (h, _) => unsupported(&format!("no adapter for harness {h:?} in this build")),
    }
}

/// `perm-` + first 16 hex digits of sha256(`<prompt_id>|<tool_name>|<tool_input as JSON>`)
/// (DECISIONS 9): the same prompt always gets the same id. `tool_input` keeps its key order.
pub fn minted_attention_id(prompt_id: &str, tool_name: &str, tool_input: &serde_json::Value) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(prompt_id.as_bytes());
    h.update(b"|");
    h.update(tool_name.as_bytes());
    h.update(b"|");
    h.update(serde_json::to_string(tool_input).unwrap_or_default().as_bytes());
    let digest = h.finalize();
    let mut id = String::with_capacity(21);
    id.push_str("perm-");
    for b in &digest[..8] {
        id.push_str(&format!("{b:02x}"));
    }
    id
}

/// Short human text for attention.needed: the tool and what it acts on.
pub fn describe_tool(tool: &str, input: &serde_json::Value) -> String {
    let subject = ["command", "file_path", "path", "url", "pattern", "query", "prompt"]
        .iter()
        .find_map(|k| input.get(*k).and_then(|v| v.as_str()))
        .or_else(|| input.as_object().and_then(|o| o.values().find_map(|v| v.as_str())));
    match subject {
        Some(s) => format!("{tool} {s}"),
        None => tool.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn attention_id_matches_reference() {
        // From the recorded fixture permission-request-bash-2 (sessionpipe conformance).
        let input: serde_json::Value =
            serde_json::from_str(r#"{"command":"echo hi > out.txt","description":"Write text to a file"}"#).unwrap();
        assert_eq!(
            minted_attention_id("5e6e20e7-82a4-4865-8967-b2c9adae76c4", "Bash", &input),
            "perm-17af3749ab63d37e"
        );
    }
}
