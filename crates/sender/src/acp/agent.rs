//! Who the agent behind sp-acp is and what its sessions honour, as `session.started` tells the
//! receivers: `data.agent`, the name the page shows ("Gemini CLI", shown as "Gemini CLI (ACP)";
//! the harness stays `acp`, the protocol's registry name), and `data.control` (DECISIONS 30),
//! when each control word takes effect in this session, from what the agent advertised at
//! `initialize`.
use serde_json::{json, Map, Value};

/// At most this many characters of an agent's own name reach the page.
pub const NAME_MAX: usize = 40;

/// What the agent advertised at `initialize` that changes how a message reaches a running turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offers {
    /// Harn's `session/inject` (`steer`, `interrupt_immediate`).
    pub inject: bool,
    /// The `_session/steering` extension (`_meta.steering.supported`).
    pub steering: bool,
    /// Harn 0.10's `session/prompt` with `delivery: "steer"`.
    pub delivery_steer: bool,
    /// claude-agent-acp's `promptQueueing`.
    pub prompt_queueing: bool,
}

impl Offers {
    /// Any way into a running turn at its next tool boundary (or sooner).
    pub fn joins_a_turn(self) -> bool {
        self.inject || self.steering || self.delivery_steer || self.prompt_queueing
    }
}

/// Known agents, by their `agentInfo.name` or command with case and punctuation dropped.
const KNOWN: &[(&[&str], &str)] = &[
    (
        &["claudeagentacp", "claudecodeacp", "claudecode", "claude"],
        "Claude Code",
    ),
    (&["gemini", "geminicli"], "Gemini CLI"),
    (
        &["copilot", "copilotcli", "githubcopilot", "githubcopilotcli"],
        "Copilot CLI",
    ),
    (&["opencode"], "OpenCode"),
    (&["codexacp", "codex"], "Codex"),
    (&["harn", "harncli"], "Harn"),
];

/// Programs that run the agent rather than being it (`npx @agentclientprotocol/claude-agent-acp`).
const LAUNCHERS: &[&str] = &[
    "node", "nodejs", "npx", "pnpx", "bunx", "bun", "deno", "uvx", "python", "python3", "env",
];

/// A known agent's name for people; an npm package name counts without its scope and version.
fn known(name: &str) -> Option<&'static str> {
    let key: String = bare(name)
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    KNOWN
        .iter()
        .find(|(keys, _)| keys.contains(&key.as_str()))
        .map(|(_, shown)| *shown)
}

/// Hostile text made fit for a card: control and format characters dropped, runs of
/// whitespace one space, at most [`NAME_MAX`] characters. None when nothing is left.
pub fn clean_name(name: &str) -> Option<String> {
    let mut out = String::new();
    let mut space = false;
    for c in name.chars() {
        if c.is_whitespace() {
            space = !out.is_empty();
            continue;
        }
        // Cc and the bidi/zero-width format characters that could disguise the name.
        if c.is_control()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
        {
            continue;
        }
        if space {
            out.push(' ');
            space = false;
        }
        out.push(c);
    }
    let clipped: String = out.chars().take(NAME_MAX).collect();
    (!clipped.is_empty()).then_some(clipped)
}

/// The program among the command sp-acp launched: past launchers and their options, its
/// file name without an npm scope or version (`@agentclientprotocol/claude-agent-acp@0.101.0` →
/// `claude-agent-acp`).
fn program(command: &[String]) -> Option<&str> {
    let arg = command.iter().find(|a| {
        let base = a.rsplit('/').next().unwrap_or(a);
        !a.starts_with('-') && !LAUNCHERS.contains(&base)
    })?;
    Some(bare(arg))
}

/// A path or npm package name without its folders, scope and version.
fn bare(name: &str) -> &str {
    let name = name
        .strip_prefix('@')
        .map_or(name, |n| n.split_once('/').map_or(n, |(_, p)| p));
    let name = name.rsplit('/').next().unwrap_or(name);
    name.split('@').next().unwrap_or(name)
}

/// The name the page shows for the agent: a known agent's own name, else its `agentInfo.name`
/// as given (cleaned), else the command sp-acp launched.
pub fn display_name(agent_info: Option<&str>, command: &[String]) -> Option<String> {
    if let Some(n) = agent_info {
        if let Some(shown) = known(n) {
            return Some(shown.to_string());
        }
        if let Some(n) = clean_name(n) {
            return Some(n);
        }
    }
    let p = program(command)?;
    known(p)
        .map(str::to_string)
        .or_else(|| clean_name(p.strip_suffix(".py").unwrap_or(p)))
}

/// Whether the agent's `allow_always` option lasts only as long as the session, so a remote
/// "allow for the session" may pick it. Gemini CLI's is ("Allow for this session"); OpenCode's
/// `always` is kept beyond the session and Copilot CLI's and Claude Code's are not documented
/// as session-bound: for them sp-acp keeps the grant itself.
pub fn always_is_for_the_session(display_name: Option<&str>) -> bool {
    display_name == Some("Gemini CLI")
}

/// `data.control` for a session of this agent: when each of rule 25's modes and a cancel take
/// effect (`now`, `tool_boundary`: after the current tool call, `turn_end`), and which of
/// rule 30's optional `permission.answer` fields are honoured.
pub fn control(offers: Offers) -> Value {
    let steer = if offers.joins_a_turn() {
        "tool_boundary"
    } else {
        "turn_end"
    };
    // Only Harn's `interrupt_immediate` is sooner than the next tool boundary; the others
    // take an interrupt as a steer (rule 25).
    let interrupt = if offers.inject { "now" } else { steer };
    json!({
        "prompt": {"queue": "turn_end", "steer": steer, "interrupt": interrupt},
        "cancel": "now",
        "answer": crate::harness::answer_fields("acp", ""),
    })
}

/// What sp-acp adds to a session's `session.started` data.
pub fn started_data(name: Option<String>, offers: Offers) -> Map<String, Value> {
    let mut m = Map::new();
    if let Some(n) = name {
        m.insert("agent".into(), Value::String(n));
    }
    m.insert("control".into(), control(offers));
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn known_agents_get_their_names() {
        assert_eq!(
            display_name(Some("@zed-industries/claude-agent-acp"), &[]).as_deref(),
            Some("Claude Code")
        );
        assert_eq!(
            display_name(Some("@agentclientprotocol/claude-agent-acp"), &[]).as_deref(),
            Some("Claude Code")
        );
        assert_eq!(
            display_name(Some("@agentclientprotocol/codex-acp"), &[]).as_deref(),
            Some("Codex")
        );
        assert_eq!(
            display_name(Some("Copilot"), &[]).as_deref(),
            Some("Copilot CLI")
        );
        assert_eq!(
            display_name(Some("gemini-cli"), &[]).as_deref(),
            Some("Gemini CLI")
        );
        assert_eq!(
            display_name(
                None,
                &cmd(&["npx", "-y", "@zed-industries/claude-agent-acp@0.23.1"])
            )
            .as_deref(),
            Some("Claude Code")
        );
        assert_eq!(
            display_name(None, &cmd(&["/usr/local/bin/gemini", "--acp"])).as_deref(),
            Some("Gemini CLI")
        );
        assert_eq!(
            display_name(None, &cmd(&["codex-acp"])).as_deref(),
            Some("Codex")
        );
        assert_eq!(
            display_name(None, &cmd(&["harn", "serve", "acp"])).as_deref(),
            Some("Harn")
        );
    }

    #[test]
    fn an_unknown_name_is_shown_cleaned_and_clipped() {
        assert_eq!(
            display_name(Some("My\u{1b}[31m  Agent\u{202e}\n"), &[]).as_deref(),
            Some("My[31m Agent")
        );
        let long = "x".repeat(500);
        assert_eq!(
            display_name(Some(&long), &[]).unwrap().chars().count(),
            NAME_MAX
        );
        // Nothing usable in agentInfo: the command.
        assert_eq!(
            display_name(Some("\u{7}\u{200b}"), &cmd(&["my-agent", "--stdio"])).as_deref(),
            Some("my-agent")
        );
        assert_eq!(display_name(None, &cmd(&["npx"])), None);
    }

    #[test]
    fn control_follows_what_the_agent_offers() {
        let plain = control(Offers::default());
        assert_eq!(plain["prompt"]["steer"], "turn_end");
        assert_eq!(plain["prompt"]["interrupt"], "turn_end");
        assert_eq!(plain["cancel"], "now");
        let steering = control(Offers {
            steering: true,
            ..Offers::default()
        });
        assert_eq!(steering["prompt"]["steer"], "tool_boundary");
        assert_eq!(steering["prompt"]["interrupt"], "tool_boundary");
        let harn = control(Offers {
            inject: true,
            ..Offers::default()
        });
        assert_eq!(harn["prompt"]["interrupt"], "now");
    }
}
