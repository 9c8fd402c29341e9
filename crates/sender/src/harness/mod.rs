//! Harness adapters: each module parses its harness's hook stdin into a [`HookInput`] and
//! renders our answers in that harness's exact output shape. Nothing here knows HTTP or SQL.
pub mod caps;
pub(crate) mod claude_code;
pub(crate) mod codex;
pub(crate) mod copilot_cli;
pub(crate) mod cursor;
pub(crate) mod droid;
pub(crate) mod gemini_cli;
pub(crate) mod kiro;
pub(crate) mod opencode;
mod reason;

pub use reason::compose_reason;

use crate::store::SessionRef;
use crate::wire::control::{Decision, Kind, Outcome};

/// What a headless run (`crate::runs`) has said so far, read from its stdout line by line
/// by its harness's [`caps::Headless::read_line`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunOutput {
    /// The session the run is in (a fork's or a new session's id).
    pub session: Option<String>,
    /// The agent's whole text messages so far, in order.
    pub text: String,
    /// The text of the message streaming now, not yet whole.
    pub partial: String,
    /// The turn's final answer, once the harness reported the turn ended well.
    pub result: Option<String>,
    /// What the harness reported as the turn's failure.
    pub error: Option<String>,
}

impl RunOutput {
    fn add_text(&mut self, t: &str) {
        self.partial.clear();
        if t.is_empty() {
            return;
        }
        if !self.text.is_empty() {
            self.text.push_str("\n\n");
        }
        self.text.push_str(t);
    }

    /// The answer so far, for a `progress` ack: the whole messages, then the streaming one.
    pub fn so_far(&self) -> String {
        match (self.text.is_empty(), self.partial.is_empty()) {
            (_, true) => self.text.clone(),
            (true, false) => self.partial.clone(),
            (false, false) => format!("{}\n\n{}", self.text, self.partial),
        }
    }

    /// The reply a final ack carries: the harness's final answer, else all it said.
    pub fn reply(&self) -> &str {
        self.result.as_deref().unwrap_or(&self.text)
    }
}

/// Harnesses with an adapter in this build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Harness {
    ClaudeCode,
    Codex,
    Cursor,
    CopilotCli,
    Kiro,
    Droid,
    GeminiCli,
    OpenCode,
}

/// Our three hook binaries. They run the same flow; the name says which answer the harness
/// waits for, so registration can give `sp-permission` the long timeout.
pub const SP_PERMISSION: &str = "sp-permission";
pub const SP_STOP: &str = "sp-stop";
pub const SP_EVENT: &str = "sp-event";
/// The hook binaries, as they name themselves in the log.
pub const HOOK_PROGRAMS: [&str; 3] = [SP_PERMISSION, SP_STOP, SP_EVENT];

impl Harness {
    pub const ALL: &'static [Harness] = &[
        Harness::ClaudeCode,
        Harness::Codex,
        Harness::Cursor,
        Harness::CopilotCli,
        Harness::Kiro,
        Harness::Droid,
        Harness::GeminiCli,
        Harness::OpenCode,
    ];

    pub fn parse(name: &str) -> Option<Harness> {
        caps::named(name).map(|c| c.harness)
    }

    /// The protocol's registry name (DECISIONS 4): the `<harness>` of the session key.
    pub fn name(self) -> &'static str {
        self.caps().name
    }

    /// This harness's row of the capability table.
    pub fn caps(self) -> &'static caps::Caps {
        caps::of(self)
    }

    /// Exactly which hook events must be registered, and which of our binaries each runs
    /// ([`caps::Caps::hooks`]).
    pub fn hook_events(self) -> &'static [(&'static str, &'static str)] {
        self.caps().hooks
    }

    /// The matcher a registration should put on `event`, when one narrows it to what we use.
    pub fn hook_matcher(self, event: &str) -> Option<&'static str> {
        self.caps()
            .matchers
            .iter()
            .find(|(e, _)| *e == event)
            .map(|(_, m)| *m)
    }

    /// The built-in permission wait in seconds (DECISIONS 10); the config may override it.
    /// 0 means the hook never waits.
    pub fn default_permission_wait_s(self) -> u64 {
        self.caps().default_wait_s
    }

    /// Whether a waiting permission hook can answer at all (else it announces and returns).
    pub fn answers_permission(self) -> bool {
        matches!(self.caps().permission, caps::Path::Hook(_))
    }

    /// Whether this harness shows its own approval while our permission hook waits
    /// ([`caps::Caps::waits_at_desk`], DECISIONS 27).
    pub fn waits_at_desk(self) -> bool {
        self.caps().waits_at_desk
    }

    /// Whether sp-sync answers this harness's permission prompts through its server API
    /// (OpenCode) rather than a waiting hook.
    pub fn answered_by_api(self) -> bool {
        matches!(self.caps().permission, caps::Path::Api(_))
    }

    /// Parses hook stdin. Anything we do not understand is `Skip`, never an error.
    pub fn parse_input(self, stdin: &[u8]) -> HookInput {
        match self {
            Harness::ClaudeCode => claude_code::parse(stdin),
            Harness::Codex => codex::parse(stdin),
            Harness::Cursor => cursor::parse(stdin),
            Harness::CopilotCli => copilot_cli::parse(stdin),
            Harness::Kiro => kiro::parse(stdin),
            Harness::Droid => droid::parse(stdin),
            Harness::GeminiCli => gemini_cli::parse(stdin),
            Harness::OpenCode => opencode::parse(stdin),
        }
    }

    /// The exact stdout that answers a permission prompt. `event` is the hook event that
    /// asked (Cursor answers beforeShellExecution and beforeMCPExecution alike).
    pub fn render_permission(self, decision: Decision, message: &str) -> String {
        match self {
            Harness::ClaudeCode => claude_code::render_permission(decision, message),
            Harness::Codex => codex::render_permission(decision, message),
            Harness::Cursor => cursor::render_permission(decision, message),
            Harness::CopilotCli => copilot_cli::render_permission(decision, message),
            Harness::Droid => droid::render_permission(decision, message),
            // No answer channel: the hook never waits, so this is never printed.
            Harness::Kiro | Harness::GeminiCli | Harness::OpenCode => String::new(),
        }
    }

    /// The call a permission prompt is about, where this adapter reads one (Claude Code).
    pub fn permission_call(self, stdin: &[u8]) -> Option<Call> {
        match self {
            Harness::ClaudeCode => claude_code::call(stdin),
            Harness::Codex => codex::call(stdin),
            Harness::OpenCode => opencode::call(stdin),
            _ => None,
        }
    }

    /// The final text of the turn a Stop ends, as the harness reports it (DECISIONS 38
    /// `turn` mode), not yet redacted: Claude Code's and Codex's `last_assistant_message`;
    /// for a Claude Code that leaves it out, the tail of its transcript.
    pub fn turn_reply(self, stdin: &[u8]) -> Option<String> {
        match self {
            Harness::ClaudeCode => claude_code::turn_reply(stdin),
            Harness::Codex => last_assistant_message(stdin),
            _ => None,
        }
    }

    /// Whether its Stop reports the turn's text ([`Harness::turn_reply`]): only then does a
    /// prompt delivered in place wait for its turn's end for its final ack (DECISIONS 38).
    pub fn reports_turn_text(self) -> bool {
        matches!(self, Harness::ClaudeCode | Harness::Codex)
    }

    /// Whether this harness's permission hook keeps grants for a session (DECISIONS 30).
    pub fn keeps_grants(self) -> bool {
        self.caps().answer_fields.contains(&"scope")
    }

    /// The stdout of an answer carrying DECISIONS 30's fields for `call`. Only a harness whose
    /// [`caps::Caps::answer_fields`] name them is given one (the rest are acked `unsupported`
    /// on arrival); `Err` is the `failed` detail when this call cannot take it.
    pub fn render_rich_permission(self, a: &RichAnswer, call: &Call) -> Result<String, String> {
        match self {
            Harness::ClaudeCode => claude_code::render_rich_permission(a, call),
            Harness::Codex => codex::render_rich_permission(a),
            _ => Err(format!(
                "{} cannot carry DECISIONS 30's answer fields; nothing ran",
                self.name()
            )),
        }
    }

    /// DECISIONS 30: a field of this answer the harness cannot honour for this call, named
    /// (acked `unsupported`, nothing runs, the prompt stays open); `None` when it can.
    pub fn unsupported_for_call(self, a: &RichAnswer, call: &Call) -> Option<String> {
        match self {
            Harness::ClaudeCode => claude_code::unsupported_for_call(a, call),
            _ => None,
        }
    }

    /// What to print when a permission hook ends without a remote answer: the harness's own
    /// "ask the person" where its silence means "run" (Cursor); None prints nothing, so the
    /// harness's own behaviour stands.
    pub fn render_no_answer(self) -> Option<String> {
        self.caps().silence.ask.map(str::to_string)
    }

    /// What a queued `cancel` does at this hook event of this harness (DECISIONS 26).
    pub fn cancel_seam(self, event: &str) -> CancelSeam {
        self.caps()
            .cancel_seams
            .iter()
            .find(|(e, _)| *e == event)
            .map_or(CancelSeam::None, |(_, s)| *s)
    }

    /// The lowest prompt rank this hook event takes (DECISIONS 25), `None` where it is no
    /// tool boundary of this harness.
    pub fn prompt_seam(self, event: &str) -> Option<i64> {
        self.caps()
            .prompt_seams
            .iter()
            .find(|(e, _)| *e == event)
            .map(|(_, r)| *r)
    }

    /// The stdout that hands prompts to the model at a tool boundary, and the seam's name.
    pub fn render_seam_prompt(self, event: &str, text: &str) -> Option<(String, &'static str)> {
        match self {
            // Codex 0.171 takes the same shapes at these two events (its schemas).
            Harness::ClaudeCode | Harness::Codex => claude_code::render_seam_prompt(event, text),
            Harness::GeminiCli => gemini_cli::render_seam_prompt(event, text),
            Harness::Droid => droid::render_seam_prompt(event, text),
            Harness::CopilotCli => copilot_cli::render_seam_prompt(event, text),
            _ => None,
        }
    }

    /// The stdout that stops the agent at this seam, and how (for the ack); `None` where the
    /// harness has none.
    pub fn render_cancel(self, event: &str, reason: &str) -> Option<(String, &'static str)> {
        match self {
            Harness::ClaudeCode => Some(claude_code::render_cancel(event, reason)),
            Harness::Codex => Some(codex::render_cancel(event, reason)),
            Harness::GeminiCli => Some(gemini_cli::render_cancel(event, reason)),
            Harness::Droid => Some(droid::render_cancel(event, reason)),
            Harness::CopilotCli => copilot_cli::render_cancel(event, reason),
            _ => None,
        }
    }

    /// Before a tool of a session that was stopped at an earlier seam of this turn: the
    /// stdout that keeps the tool from running (DECISIONS 26: no further tool runs).
    pub fn render_stopped_tool(self, event: &str, reason: &str) -> Option<String> {
        match (self, event) {
            (Harness::ClaudeCode | Harness::Codex, "PreToolUse") => {
                claude_code::render_seam_prompt(event, reason).map(|(out, _)| out)
            }
            (Harness::GeminiCli, "BeforeTool") => {
                gemini_cli::render_seam_prompt(event, reason).map(|(out, _)| out)
            }
            (Harness::Droid, "PreToolUse") => Some(droid::render_cancel(event, reason).0),
            _ => None,
        }
    }

    /// Whether denying a waiting permission also stops the agent (Claude Code's `interrupt`);
    /// where it does not (Codex), the cancel stays queued for the next seam.
    pub fn permission_deny_stops(self) -> bool {
        self.caps().deny_stops
    }

    /// The stdout of a permission hook that denies because the session was stopped.
    pub fn render_cancel_permission(self, message: &str) -> String {
        match self {
            Harness::ClaudeCode => claude_code::render_cancel_permission(message),
            // Droid asks at PreToolUse itself: the stop's own answer there denies and stops.
            Harness::Droid => droid::render_cancel("PreToolUse", message).0,
            Harness::CopilotCli => copilot_cli::render_cancel_permission(message),
            _ => self.render_permission(Decision::Deny, message),
        }
    }

    /// The exact stdout that continues the turn with `reason` as the next instruction.
    pub fn render_block(self, reason: &str) -> String {
        match self {
            Harness::ClaudeCode => claude_code::render_block(reason),
            Harness::Codex => codex::render_block(reason),
            Harness::Cursor => cursor::render_block(reason),
            Harness::CopilotCli => copilot_cli::render_block(reason),
            Harness::Droid => droid::render_block(reason),
            Harness::GeminiCli => gemini_cli::render_block(reason),
            // No blocking turn end: prompts are unsupported (Kiro) or go through the API (OpenCode).
            Harness::Kiro | Harness::OpenCode => String::new(),
        }
    }

    /// The hook event name that delivers prompts, for ack details.
    pub fn stop_event(self) -> &'static str {
        self.caps().stop_event
    }

    pub fn permission_event(self) -> &'static str {
        self.caps().permission_event
    }
}

/// What a hook event means to us, whatever harness sent it.
#[derive(Debug, Clone, PartialEq)]
pub enum HookInput {
    /// A permission prompt is about to be shown: record it, announce it, wait for an answer.
    Permission {
        session: SessionRef,
        attention_id: String,
        tool: Option<String>,
        message: Option<String>,
    },
    /// The turn is ending: deliver queued prompts by blocking.
    Stop {
        session: SessionRef,
    },
    SessionStart {
        session: SessionRef,
        source: String,
    },
    SessionEnd {
        session: SessionRef,
    },
    /// A tool ran or a new prompt came: the terminal resolved a pending prompt.
    /// `attention_id` names the one it resolved when that can be computed.
    TerminalAnswered {
        session: SessionRef,
        attention_id: Option<String>,
    },
    /// Any other event of a live session.
    Alive {
        session: SessionRef,
    },
    /// The session went idle after a turn (OpenCode's `session.idle`): it waits for the
    /// person, unless a queued prompt starts the next turn.
    TurnOver {
        session: SessionRef,
    },
    /// A harness driven through its server API (OpenCode) said where that API is and whether
    /// the session is idle; `then` is what the event means otherwise.
    Api {
        report: ApiReport,
        then: Box<HookInput>,
    },
    /// Not ours to handle (unparseable, another tool's payload, unknown event).
    Skip(String),
}

/// What a queued `cancel` does at one hook event (DECISIONS 26).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelSeam {
    /// Not a seam: the cancel stays queued.
    None,
    /// Stop the agent here (a tool boundary, the turn's end).
    Deliver,
    /// A waiting permission prompt is denied, and the agent stopped with it.
    DenyPermission,
    /// The turn it was meant for is over (the person typed the next prompt): acked `expired`.
    Expire,
}

/// What an API-driven harness's plugin reports with each event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiReport {
    /// The server's base URL, e.g. `http://127.0.0.1:4096`.
    pub base_url: Option<String>,
    /// The instance directory the server routes the session by (`?directory=`).
    pub directory: Option<String>,
    /// Some(true) when the session went idle, Some(false) when busy, None when unknown.
    pub idle: Option<bool>,
    /// The plugin's order of this report (rising within one OpenCode process and across its
    /// restarts); a report older than the last one stored does not change `idle`.
    pub seq: Option<i64>,
}

impl HookInput {
    pub fn session(&self) -> Option<&SessionRef> {
        match self {
            HookInput::Permission { session, .. }
            | HookInput::Stop { session }
            | HookInput::SessionStart { session, .. }
            | HookInput::SessionEnd { session }
            | HookInput::TerminalAnswered { session, .. }
            | HookInput::Alive { session }
            | HookInput::TurnOver { session } => Some(session),
            HookInput::Api { then, .. } => then.session(),
            HookInput::Skip(_) => None,
        }
    }
}

/// Which control kinds a harness can take, and by which path ([`caps::CAPS`]).
/// Returns the final outcome for a kind the harness has no path for; None means "deliver":
/// by the harness's hook answer, or for OpenCode by sp-sync through its server API.
pub fn route(harness: &str, kind: Kind) -> Option<(Outcome, String)> {
    // sp-acp sessions: the proxy on the agent's stdio delivers all three (src/acp); `acp` is
    // no hook harness, so it has no row in the table.
    if harness == "acp" {
        return None;
    }
    match caps::named(harness).map(|c| c.path(kind)) {
        Some(caps::Path::Hook(_) | caps::Path::Api(_)) => None,
        Some(caps::Path::Unsupported(why)) => Some((Outcome::Unsupported, why.to_string())),
        None => Some((
            Outcome::Unsupported,
            format!("no adapter for harness {harness:?} in this build"),
        )),
    }
}

/// The DECISIONS 30 fields a session honours: its harness row's, and for a Codex thread
/// sp-sync follows on `sp codex`'s app-server ([`caps::CODEX_APP_SERVER_ANSWER_FIELDS`]) those
/// of the app-server's approval (`acceptForSession`, `cancel`). sp-acp keeps grants and
/// rejects then cancels.
pub fn answer_fields(harness: &str, session_id: &str) -> &'static [&'static str] {
    match harness {
        "acp" => &["scope", "interrupt"],
        "codex" if crate::codex_server::followed(session_id) => {
            caps::CODEX_APP_SERVER_ANSWER_FIELDS
        }
        _ => caps::named(harness).map_or(&[], |c| c.answer_fields),
    }
}

/// [`route`] for one message of session `key`, after DECISIONS 30's optional answer fields:
/// one the session's path cannot honour ([`answer_fields`]) is acked `unsupported` naming the
/// field; nothing runs and the prompt stays open.
pub fn route_message(
    harness: &str,
    key: &str,
    m: &crate::wire::control::ControlMessage,
) -> Option<(Outcome, String)> {
    if m.kind == Kind::PermissionAnswer {
        let session_id = key.split_once(':').map_or("", |(_, id)| id);
        let honoured = answer_fields(harness, session_id);
        let mut asked = m.rich.fields();
        if m.scope == crate::wire::control::Scope::Session {
            asked.insert(0, "scope");
        }
        if let Some(f) = asked.into_iter().find(|f| !honoured.contains(f)) {
            let why = if f == "scope" {
                format!("scope: {harness} sessions keep no grant for the session (DECISIONS 30)")
            } else if harness == "codex" && caps::CODEX_APP_SERVER_ANSWER_FIELDS.contains(&f) {
                format!("{f}: codex's permission hook has no such field; only a session started with `sp codex` (its app-server) takes it (DECISIONS 30)")
            } else {
                format!("{f}: {harness}'s permission answer has no such field (DECISIONS 30)")
            };
            return Some((
                Outcome::Unsupported,
                format!("{why}; nothing ran, the prompt stays open"),
            ));
        }
    }
    route(harness, m.kind)
}

/// A Stop payload's `last_assistant_message` (Claude Code, Codex), when it has a non-empty one.
pub(crate) fn last_assistant_message(stdin: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Stop {
        last_assistant_message: Option<String>,
    }
    let s: Stop = serde_json::from_slice(stdin).ok()?;
    s.last_assistant_message.filter(|m| !m.trim().is_empty())
}

/// A permission prompt's call as the harness put it, where the adapter reads it (Claude
/// Code): what a grant matches, and what an answer's `input` or `answers` build on.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub tool: String,
    pub input: serde_json::Value,
    /// The harness's own "always allow" offers (Claude Code `permission_suggestions`).
    pub suggestions: Vec<serde_json::Value>,
}

/// The stdout of an answer with DECISIONS 30's fields, for a harness that honours them; `Err`
/// names the rule when the answer cannot be carried out for this call (ack `failed`).
pub struct RichAnswer<'a> {
    pub decision: Decision,
    pub message: &'a str,
    pub rich: &'a crate::wire::control::Rich,
    /// `scope: "session"`: the answer is for the session (the machine keeps a grant; no rule
    /// of the harness's own is handed over, the page never shows one).
    pub session_rule: bool,
}

/// `perm-` + first 16 hex digits of sha256(`<prompt_id>|<tool_name>|<tool_input as JSON>`)
/// (DECISIONS 9): the same prompt always gets the same id. `tool_input` keeps its key order.
pub fn minted_attention_id(
    prompt_id: &str,
    tool_name: &str,
    tool_input: &serde_json::Value,
) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(prompt_id.as_bytes());
    h.update(b"|");
    h.update(tool_name.as_bytes());
    h.update(b"|");
    h.update(
        serde_json::to_string(tool_input)
            .unwrap_or_default()
            .as_bytes(),
    );
    let digest = h.finalize();
    format!("perm-{}", spwire::hex::encode(&digest[..8]))
}

/// The attention id of a call the harness names (DECISIONS 32): its id, `-` and the first 8
/// hex digits of sha256 over its input as JSON, so one call id asked again with another input
/// is a new prompt that needs its own answer. None when that is no usable id.
pub fn named_attention_id(call_id: &str, input: &serde_json::Value) -> Option<String> {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(serde_json::to_vec(input).unwrap_or_default());
    let id = format!("{call_id}-{}", spwire::hex::encode(&digest[..4]));
    crate::wire::is_session_id(&id).then_some(id)
}

/// The hook payload as a JSON object, or why it is not one.
pub(crate) fn object(stdin: &[u8], harness: &str) -> Result<serde_json::Value, String> {
    match serde_json::from_slice::<serde_json::Value>(stdin) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(format!(
            "stdin is not a {harness} hook payload: not a JSON object"
        )),
        Err(e) => Err(format!("stdin is not a {harness} hook payload: {e}")),
    }
}

/// The first of `names` that `v` holds (tolerant of snake_case and camelCase spellings).
pub(crate) fn field<'a>(v: &'a serde_json::Value, names: &[&str]) -> Option<&'a serde_json::Value> {
    names
        .iter()
        .find_map(|n| v.get(*n).filter(|x| !x.is_null()))
}

/// The first of `names` that `v` holds as a string.
pub(crate) fn text<'a>(v: &'a serde_json::Value, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|n| v.get(*n).and_then(|x| x.as_str()))
}

/// Tool arguments that some harnesses send as a JSON string (Copilot `toolArgs`, older
/// Cursor `tool_input`): parsed when the string holds JSON, kept as is otherwise.
pub(crate) fn tool_args(v: &serde_json::Value) -> serde_json::Value {
    match v.as_str().map(str::trim) {
        Some(s) if s.starts_with('{') || s.starts_with('[') => {
            serde_json::from_str(s).unwrap_or_else(|_| v.clone())
        }
        _ => v.clone(),
    }
}

/// A hook payload's `permission_mode` as kept on the session: a short word, else None.
pub(crate) fn mode_of(mode: Option<&str>) -> Option<String> {
    mode.filter(|m| !m.is_empty() && m.len() <= 40 && m.bytes().all(|b| b.is_ascii_alphanumeric()))
        .map(str::to_string)
}

/// A session of `harness` with a valid id, or why not.
pub(crate) fn session_ref(
    harness: Harness,
    id: Option<&str>,
    cwd: Option<&str>,
    event: &str,
) -> Result<SessionRef, String> {
    match id {
        Some(id) if crate::wire::is_session_id(id) => Ok(SessionRef {
            harness: harness.name().into(),
            session_id: id.to_string(),
            cwd: cwd.map(str::to_string),
            event: event.to_string(),
            permission_mode: None,
        }),
        Some(_) => Err(format!(
            "{} payload has an invalid session id",
            harness.name()
        )),
        None => Err(format!("{} payload has no session id", harness.name())),
    }
}

/// How a harness names the session events every adapter reads alike.
pub(crate) struct Lifecycle {
    pub start: &'static str,
    pub end: &'static str,
    /// The person sent a new prompt.
    pub prompt: &'static str,
    /// The start's `source` when the payload has none.
    pub default_source: &'static str,
}

/// Claude Code's spelling, which Codex and Droid share.
pub(crate) const PASCAL_LIFECYCLE: Lifecycle = Lifecycle {
    start: "SessionStart",
    end: "SessionEnd",
    prompt: "UserPromptSubmit",
    default_source: "unknown",
};

impl Lifecycle {
    /// The session's start, its end, and the person's new prompt, which tells that the
    /// terminal answered whatever was pending (no id to name it); any other event is a sign
    /// of life.
    pub(crate) fn read(&self, event: &str, session: SessionRef, source: Option<&str>) -> HookInput {
        if event == self.start {
            HookInput::SessionStart {
                source: source.unwrap_or(self.default_source).to_string(),
                session,
            }
        } else if event == self.end {
            HookInput::SessionEnd { session }
        } else if event == self.prompt {
            HookInput::TerminalAnswered {
                attention_id: None,
                session,
            }
        } else {
            HookInput::Alive { session }
        }
    }
}

/// Short human text for attention.needed: the tool and what it acts on.
pub fn describe_tool(tool: &str, input: &serde_json::Value) -> String {
    let subject = [
        "command",
        "file_path",
        "path",
        "url",
        "pattern",
        "query",
        "prompt",
    ]
    .iter()
    .find_map(|k| input.get(*k).and_then(|v| v.as_str()))
    .or_else(|| {
        input
            .as_object()
            .and_then(|o| o.values().find_map(|v| v.as_str()))
    });
    match subject {
        Some(s) => format!("{tool} {s}"),
        None => tool.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DECISIONS 32 on every harness that names calls: one call id with two inputs is two
    /// prompts; the same call asked again is the same prompt.
    #[test]
    fn a_named_call_is_bound_to_its_input_on_every_harness() {
        type Payload = fn(&str) -> String;
        type Parse = fn(&[u8]) -> HookInput;
        let cases: [(&str, Parse, Payload); 4] = [
            ("codex", codex::parse, |cmd| {
                format!(
                    r#"{{"session_id":"s1","turn_id":"t1","cwd":"/w","hook_event_name":"PermissionRequest","tool_name":"Bash","tool_input":{{"command":"{cmd}"}},"tool_use_id":"call_7"}}"#
                )
            }),
            ("cursor", cursor::parse, |cmd| {
                format!(
                    r#"{{"conversation_id":"c1","generation_id":"g1","hook_event_name":"beforeShellExecution","command":"{cmd}","cwd":"/w","tool_use_id":"call_7"}}"#
                )
            }),
            ("copilot", copilot_cli::parse, |cmd| {
                format!(
                    r#"{{"hookName":"permissionRequest","sessionId":"s1","toolName":"bash","toolArgs":{{"command":"{cmd}"}},"toolCallId":"call_7"}}"#
                )
            }),
            ("droid", droid::parse, |cmd| {
                format!(
                    r#"{{"session_id":"d1","hook_event_name":"PreToolUse","tool_name":"Execute","tool_input":{{"command":"{cmd}"}},"tool_use_id":"call_7"}}"#
                )
            }),
        ];
        for (name, parse, payload) in cases {
            let id = |cmd: &str| match parse(payload(cmd).as_bytes()) {
                HookInput::Permission { attention_id, .. } => attention_id,
                other => panic!("{name}: {other:?}"),
            };
            let (ls, rm) = (id("ls"), id("rm -rf /w"));
            assert!(
                ls.starts_with("call_7-") && ls.len() == "call_7-".len() + 8,
                "{name}: {ls}"
            );
            assert_ne!(ls, rm, "{name}: two inputs, one prompt");
            assert_eq!(ls, id("ls"), "{name}: the same call is the same prompt");
        }
    }

    /// DECISIONS 30: a field no path here honours is acked `unsupported` on arrival, naming it.
    #[test]
    fn rule_30_fields_only_where_honoured() {
        let answer = |extra: serde_json::Value| {
            let mut v = serde_json::json!({"id": "01K6ZZZZZZZZZZZZZZZZZZZZZZ", "kind": "permission.answer",
                "for": "p1", "decision": "allow", "at": "2026-01-01T00:00:00.000Z",
                "expires_at": "2026-01-01T00:01:00.000Z"});
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            match crate::wire::control::check(&v) {
                crate::wire::control::Checked::Valid(m) => m,
                other => panic!("{other:?}"),
            }
        };
        let session = answer(serde_json::json!({"scope": "session"}));
        assert_eq!(route_message("acp", "acp:s1", &session), None);
        assert_eq!(
            route_message("claude-code", "claude-code:s1", &session),
            None
        );
        // Codex keeps our grant on the plain hook path too.
        assert_eq!(route_message("codex", "codex:s1", &session), None);
        let (o, why) = route_message("droid", "droid:s1", &session).unwrap();
        assert_eq!(o, Outcome::Unsupported);
        assert!(why.starts_with("scope:"), "{why}");
        let stop = answer(serde_json::json!({"decision": "deny", "interrupt": true}));
        assert_eq!(route_message("acp", "acp:s1", &stop), None);
        assert_eq!(route_message("claude-code", "claude-code:s1", &stop), None);
        // A Codex thread not on our app-server: its hook cannot stop the turn.
        let (o, why) = route_message("codex", "codex:not-followed", &stop).unwrap();
        assert_eq!(o, Outcome::Unsupported);
        assert!(
            why.starts_with("interrupt:") && why.contains("sp codex"),
            "{why}"
        );
        let (o, why) = route_message("droid", "droid:s1", &stop).unwrap();
        assert_eq!(o, Outcome::Unsupported, "{why}");
        let edit = answer(serde_json::json!({"input": {"command": "ls"}}));
        let (o, why) = route_message("codex", "codex:s1", &edit).unwrap();
        assert_eq!(o, Outcome::Unsupported);
        assert!(why.starts_with("input:"), "{why}");
        assert_eq!(
            route_message(
                "claude-code",
                "claude-code:s1",
                &answer(serde_json::json!({}))
            ),
            None
        );
    }

    #[test]
    fn permission_answers_in_each_harness_shape() {
        let claude = r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":"#;
        let droid = r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"#;
        let table = [
            (
                Harness::ClaudeCode,
                format!(r#"{claude}{{"behavior":"allow"}}}}}}"#),
                format!(r#"{claude}{{"behavior":"deny","message":"no"}}}}}}"#),
            ),
            // Codex 0.171 takes Claude Code's shape exactly.
            (
                Harness::Codex,
                format!(r#"{claude}{{"behavior":"allow"}}}}}}"#),
                format!(r#"{claude}{{"behavior":"deny","message":"no"}}}}}}"#),
            ),
            (
                Harness::Droid,
                format!(r#"{droid}"allow"}}}}"#),
                format!(r#"{droid}"deny","permissionDecisionReason":"no"}}}}"#),
            ),
            (
                Harness::CopilotCli,
                r#"{"behavior":"allow"}"#.into(),
                r#"{"behavior":"deny","message":"no"}"#.into(),
            ),
            (
                Harness::Cursor,
                r#"{"permission":"allow"}"#.into(),
                r#"{"permission":"deny","user_message":"no","agent_message":"no"}"#.into(),
            ),
        ];
        for (h, allow, deny) in table {
            assert_eq!(h.render_permission(Decision::Allow, "no"), allow, "{h:?}");
            assert_eq!(h.render_permission(Decision::Deny, "no"), deny, "{h:?}");
        }
    }

    #[test]
    fn claude_shaped_stops_skip_bad_sessions_and_subagents() {
        for h in [Harness::ClaudeCode, Harness::Codex, Harness::Droid] {
            let parse = |payload: &str| h.parse_input(payload.as_bytes());
            for no_session in [
                r#"{"hook_event_name":"Stop"}"#,
                r#"{"session_id":"a b","hook_event_name":"Stop"}"#,
            ] {
                assert!(matches!(parse(no_session), HookInput::Skip(_)), "{h:?}");
            }
            let stop = parse(r#"{"session_id":"s1","hook_event_name":"Stop"}"#);
            assert!(matches!(stop, HookInput::Stop { .. }), "{h:?}");
            // A subagent's Stop is no turn end: it delivers nothing.
            let sub = parse(r#"{"session_id":"s1","hook_event_name":"Stop","agent_id":"a"}"#);
            assert!(matches!(sub, HookInput::Alive { .. }), "{h:?}");
        }
    }

    #[test]
    fn attention_id_matches_reference() {
        // From the recorded fixture permission-request-bash-2 (sessionpipe conformance).
        let input: serde_json::Value = serde_json::from_str(
            r#"{"command":"echo hi > out.txt","description":"Write text to a file"}"#,
        )
        .unwrap();
        assert_eq!(
            minted_attention_id("5e6e20e7-82a4-4865-8967-b2c9adae76c4", "Bash", &input),
            "perm-17af3749ab63d37e"
        );
    }
}
