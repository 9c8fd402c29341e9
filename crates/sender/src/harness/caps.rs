//! What we know about each harness, in one place: one row per harness. Routing (which control
//! kinds it takes and how), the permission wait, the hook events and their seams, where and in
//! which shape `sp setup` registers them, and the harness table in docs/harnesses.md are all read from
//! [`CAPS`]; the adapters (`src/harness/<name>.rs`) only parse payloads and render answers.
use super::{CancelSeam, Harness, SP_EVENT, SP_PERMISSION, SP_STOP};
use crate::wire::control::Kind;

/// Timeout of every hook but the permission one: they only touch the local database.
pub const EVENT_TIMEOUT_S: u64 = 10;
/// DECISIONS 10: the harness waits this much longer than the hook, so the hook's own wait
/// always ends first and it can still print its answer.
pub const PERMISSION_MARGIN_S: u64 = 10;

/// How a harness nests its hook handlers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `{"hooks":{Event:[{"matcher"?,"hooks":[handler]}]}}`: Claude Code, Codex, Gemini CLI.
    Grouped,
    /// `{Event:[{"matcher"?,"hooks":[handler]}]}`, the events at the top level: Droid's
    /// `hooks.json` (0.225.2 ignores a `"hooks"` wrapper there, logging only a warning).
    TopGrouped,
    /// `{"version":1,"hooks":{event:[handler]}}`: Cursor, Copilot CLI.
    Flat,
    /// `{"version":"v1","hooks":[{…,"trigger":Event,"action":{…}}]}`: Kiro v3 hook files.
    List,
}

/// How one control kind reaches a harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// A hook of ours prints the answer; the text names the event and shape (README).
    Hook(&'static str),
    /// sp-sync answers through the harness's server API; the text names the call (README).
    Api(&'static str),
    /// No path: acked `unsupported` with this detail.
    Unsupported(&'static str),
}

/// The unit of a harness's hook timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    Millis,
}

impl Unit {
    pub fn of(self, seconds: u64) -> u64 {
        match self {
            Unit::Seconds => seconds,
            Unit::Millis => seconds * 1000,
        }
    }
    pub fn label(self, seconds: u64) -> String {
        match self {
            Unit::Seconds => format!("{seconds} s"),
            Unit::Millis => format!("{} ms", seconds * 1000),
        }
    }
}

/// How a handler names the command it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Claude Code's exec form: `"command": <abs path>, "args": ["--harness", NAME]`, no shell.
    Exec,
    /// `"type":"command","command":"<path> --harness NAME"` (Codex, Droid).
    Command,
    /// Gemini CLI: as `Command`, plus a `name` shown in its hook listings.
    NamedCommand,
    /// Cursor: `{"command": …, "timeout": …}`.
    Bare,
    /// Copilot CLI: `"type":"command","bash": …`.
    Bash,
    /// Kiro v3: one item per hook with `trigger` and `action`.
    KiroItem,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json(Layout),
    /// A whole file of ours: the OpenCode plugin.
    Plugin,
}

/// The harness's own folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// `$VAR`, else `~/<default>`.
    Env(&'static str, &'static str),
    /// `~/<sub>`.
    Home(&'static str),
    /// `$XDG_CONFIG_HOME/<sub>`, else `~/.config/<sub>`.
    XdgConfig(&'static str),
}

/// Top-level fields of a hook file we create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skeleton {
    Empty,
    /// `{"version": 1}` (Cursor, Copilot CLI).
    Version1,
    /// `{"version": "v1"}` (Kiro v3).
    VersionV1,
}

/// Where and how a harness takes our hooks.
#[derive(Debug, Clone, Copy)]
pub struct Registration {
    pub dir: Dir,
    /// The file, relative to `dir`.
    pub file: &'static str,
    pub format: Format,
    pub form: Form,
    /// The handler's timeout field ("" when the harness has none).
    pub timeout_key: &'static str,
    pub unit: Unit,
    /// False where the harness does not document its unit (Cursor).
    pub unit_documented: bool,
    pub skeleton: Skeleton,
    /// Said after registering: what the user must still do, or what to know.
    pub note: Option<&'static str>,
}

/// What the harness does when our permission hook prints nothing.
#[derive(Debug, Clone, Copy)]
pub struct Silence {
    /// README text.
    pub means: &'static str,
    /// Where silence means "run", the harness's own "ask the person" answer, which the
    /// permission hook prints on every path without a remote answer (DECISIONS 27).
    pub ask: Option<&'static str>,
}

/// One harness's row.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub harness: Harness,
    /// The protocol's registry name (DECISIONS 4): the `<harness>` of the session key.
    pub name: &'static str,
    pub permission: Path,
    /// The hook event that asks for permission (for ack details).
    pub permission_event: &'static str,
    pub prompt: Path,
    /// The hook event that delivers queued prompts at the turn's end (for ack details).
    pub stop_event: &'static str,
    /// Tool boundaries that take prompts before the turn's end, with the lowest rank each
    /// takes (DECISIONS 25: 1 = `steer` and `interrupt`, 2 = `interrupt` only).
    pub prompt_seams: &'static [(&'static str, i64)],
    pub cancel: Path,
    /// What a queued `cancel` does at each hook event (DECISIONS 26); others: none.
    pub cancel_seams: &'static [(&'static str, CancelSeam)],
    /// Whether denying a waiting permission also stops the agent (Claude Code's `interrupt`).
    pub deny_stops: bool,
    /// Exactly the hook events registered, spelled as the harness's config spells them, and
    /// which of our binaries each runs.
    pub hooks: &'static [(&'static str, &'static str)],
    /// Matchers that narrow an event to what we use; the rest are registered for everything.
    pub matchers: &'static [(&'static str, &'static str)],
    /// Hook timeouts other than [`EVENT_TIMEOUT_S`], in seconds.
    pub event_timeouts: &'static [(&'static str, u64)],
    pub registration: Registration,
    /// The built-in permission wait in seconds (DECISIONS 10); the config may override it.
    /// 0: the hook never waits (no answer channel, or the answer goes through an API).
    pub default_wait_s: u64,
    pub silence: Silence,
    /// Whether the harness shows its own approval while our permission hook waits, so a wait
    /// costs the person at the desk nothing. The others show theirs only after the hook
    /// returns: their hooks wait only while the person is away (DECISIONS 27).
    pub waits_at_desk: bool,
    /// DECISIONS 30's optional fields of a `permission.answer` this harness's permission hook
    /// honours (`scope` meaning `"session"`); any other is acked `unsupported` naming it.
    pub answer_fields: &'static [&'static str],
    /// How sp-sync runs this harness headless between turns (DECISIONS 38 `resume`, `fork`,
    /// `start`); None: no headless run has been proven, and such a prompt is `unsupported`.
    pub headless: Option<Headless>,
}

/// A harness's headless command lines (`crate::runs`). Each argument list is given to the
/// program as is (no shell) after replacing a whole `{session}` or `{text}` argument; none
/// carries a flag that skips the harness's own approvals, so its hooks (ours) ask as usual.
#[derive(Debug, Clone, Copy)]
pub struct Headless {
    /// The program, found on PATH, unless `program_env` names another.
    pub program: &'static str,
    pub program_env: &'static str,
    /// Sends the session's earlier conversation plus `{text}`, in the same session.
    pub resume: &'static [&'static str],
    /// As `resume`, in a new session (the original transcript untouched): for a session a
    /// live process holds.
    pub fork: Option<&'static [&'static str]>,
    /// A new session in the run's folder.
    pub start: &'static [&'static str],
    /// Resumes with no new text (a parked tool call).
    pub resume_quiet: Option<&'static [&'static str]>,
    /// The hook event that starts a turn (the person's prompt): it always reaches the
    /// database, so sp-sync knows a live session is mid-turn (its prompt waits for the Stop).
    pub turn_event: &'static str,
    /// Variables the harness sets for its hooks and tools, naming itself as their parent:
    /// sp-sync may have been started from such a hook, and a run it launches is no one's
    /// child, so they are removed from every run's environment.
    pub child_env: &'static [&'static str],
    /// Reads one line of the run's stdout into what the run said so far.
    pub read_line: fn(&mut super::RunOutput, &[u8]),
}

/// Claude Code's PermissionRequest takes every one: `updatedInput`, `interrupt`, the
/// question's `answers` in `updatedInput` (`scope` is our own grant only: no
/// `updatedPermissions`, whose rules the page never shows).
const ALL_ANSWER_FIELDS: &[&str] = &["scope", "input", "interrupt", "answers"];

/// A Codex thread on `sp codex`'s app-server: sp-sync answers its approval request with
/// `acceptForSession` (plus our grant) or `cancel` (deny and end the turn), and the model's
/// question (`item/tool/requestUserInput`) with the person's `answers`. The plain hook
/// keeps only our grant ([`CAPS`]' codex row).
pub const CODEX_APP_SERVER_ANSWER_FIELDS: &[&str] = &["scope", "interrupt", "answers"];

const CLAUDE_CANCEL: &str = "at the next tool boundary or the turn's end: `{\"continue\":false}`, before a tool with a `PreToolUse` deny too (2.1.332 runs that tool otherwise); a waiting permission is denied with `interrupt`; expired when the person's next prompt comes first";
const DROID_CANCEL: &str = "at the next tool boundary or the turn's end: `{\"continue\":false}` (0.225.2 ends the run), before a tool with a `PreToolUse` deny too; a `PreToolUse` held for a remote answer is answered so; expired when the person's next prompt comes first";
const COPILOT_CANCEL: &str = "at the next `permissionRequest` (before a tool that asks, also one held for a remote answer): a deny with `\"interrupt\":true`, which ends 1.0.102's run; else at `agentStop`, without a block. 1.0.102 ignores `continue:false`, and a tool that asks no permission cannot be stopped before it runs; expired when the person's next prompt comes first";
const TOOL_SEAMS: &[(&str, i64)] = &[
    ("PostToolUse", 1),
    ("PostToolUseFailure", 1),
    ("PreToolUse", 2),
];

/// The table. Order is [`Harness::ALL`]'s.
pub const CAPS: &[Caps] = &[
    Caps {
        harness: Harness::ClaudeCode,
        name: "claude-code",
        permission: Path::Hook("`PermissionRequest` (`hookSpecificOutput.decision`)"),
        permission_event: "PermissionRequest",
        prompt: Path::Hook("`Stop` block"),
        stop_event: "Stop",
        prompt_seams: TOOL_SEAMS,
        cancel: Path::Hook(CLAUDE_CANCEL),
        cancel_seams: &[
            ("PreToolUse", CancelSeam::Deliver),
            ("PostToolUse", CancelSeam::Deliver),
            ("PostToolUseFailure", CancelSeam::Deliver),
            ("Stop", CancelSeam::Deliver),
            ("PermissionRequest", CancelSeam::DenyPermission),
            ("UserPromptSubmit", CancelSeam::Expire),
            ("SessionStart", CancelSeam::Expire),
        ],
        deny_stops: true,
        hooks: &[
            ("PermissionRequest", SP_PERMISSION),
            ("Stop", SP_STOP),
            ("SessionStart", SP_EVENT),
            ("UserPromptSubmit", SP_EVENT),
            // A headless run asks at PreToolUse (DECISIONS 39): a permission hook's timeout.
            ("PreToolUse", SP_PERMISSION),
            ("PostToolUse", SP_EVENT),
            ("PostToolUseFailure", SP_EVENT),
            ("SessionEnd", SP_EVENT),
        ],
        matchers: &[],
        event_timeouts: &[],
        registration: Registration {
            dir: Dir::Env("CLAUDE_CONFIG_DIR", ".claude"),
            file: "settings.json",
            format: Format::Json(Layout::Grouped),
            form: Form::Exec,
            timeout_key: "timeout",
            unit: Unit::Seconds,
            unit_documented: true,
            skeleton: Skeleton::Empty,
            note: Some("Running sessions pick up hook changes from Claude Code 2.1.280 on; restart older ones."),
        },
        default_wait_s: 120,
        silence: Silence {
            means: "its own dialog, which stays up while the hook waits (`-p`: deny)",
            ask: None,
        },
        waits_at_desk: true,
        answer_fields: ALL_ANSWER_FIELDS,
        headless: Some(Headless {
            program: "claude",
            program_env: "SP_CLAUDE",
            // 2.1.332: `-p --resume ID` keeps the id; `--fork-session` answers with a new one.
            // stream-json (with --verbose, which it requires) gives each message whole;
            // --include-partial-messages adds the text as it streams (the `progress` acks).
            resume: &["-p", "--resume", "{session}", "--output-format", "stream-json", "--verbose", "--include-partial-messages", "--", "{text}"],
            fork: Some(&["-p", "--resume", "{session}", "--fork-session", "--output-format", "stream-json", "--verbose", "--include-partial-messages", "--", "{text}"]),
            // `--session-id`: a start's session is the id the receiver chose (DECISIONS 39),
            // which names its files' folder and the page's new session.
            start: &["-p", "--session-id", "{session}", "--output-format", "stream-json", "--verbose", "--include-partial-messages", "--", "{text}"],
            resume_quiet: Some(&["-p", "--resume", "{session}", "--output-format", "stream-json", "--verbose", "--include-partial-messages"]),
            turn_event: "UserPromptSubmit",
            // 2.1.332's hook environment: a run inheriting them takes itself for a child of a
            // session that is gone (its messaging socket, its session id) and starts slower.
            child_env: &[
                "CLAUDECODE",
                "CLAUDE_CODE_ENTRYPOINT",
                "CLAUDE_CODE_MESSAGING_SOCKET",
                "CLAUDE_CODE_MESSAGING_TOKEN",
                "CLAUDE_CODE_SESSION_ID",
                "CLAUDE_CODE_CHILD_SESSION",
                "CLAUDE_CODE_SESSION_ATTENDED",
                "CLAUDE_CODE_CHILD_NOTES_DIR",
                "CLAUDE_PID",
                "CLAUDE_PROJECT_DIR",
                "CLAUDE_ENV_FILE",
            ],
            read_line: super::claude_code::run_line,
        }),
    },
    Caps {
        harness: Harness::Codex,
        name: "codex",
        permission: Path::Hook("`PermissionRequest` (exact 0.171 schema; `scope: \"session\"` as our grant). Under `sp codex`: sp-sync answers the app-server's approval request (`accept`/`decline`; `acceptForSession` plus our grant for `scope: \"session\"`, `cancel` for a deny with `interrupt`)"),
        permission_event: "PermissionRequest",
        prompt: Path::Hook("`Stop` block (under `sp codex`: `turn/start` when idle, `turn/steer` when busy; `taken`, `progress` from the agent's message deltas, then `delivered` (mode `api`) when that turn ends, with its agent messages as `reply`)"),
        stop_event: "Stop",
        prompt_seams: TOOL_SEAMS,
        cancel: Path::Hook("at the next tool boundary or the turn's end: a `PreToolUse` deny, or `{\"continue\":false}` after a tool; every later tool of that turn is then denied, as 0.171 goes on after `continue:false` (a waiting permission is denied first). Under `sp codex`: `turn/interrupt`, delivered when the turn ends interrupted"),
        cancel_seams: &[
            ("PreToolUse", CancelSeam::Deliver),
            ("PostToolUse", CancelSeam::Deliver),
            ("Stop", CancelSeam::Deliver),
            ("PermissionRequest", CancelSeam::DenyPermission),
            ("UserPromptSubmit", CancelSeam::Expire),
            ("SessionStart", CancelSeam::Expire),
        ],
        deny_stops: false,
        hooks: &[
            ("PermissionRequest", SP_PERMISSION),
            ("Stop", SP_STOP),
            ("SessionStart", SP_EVENT),
            ("UserPromptSubmit", SP_EVENT),
            ("PreToolUse", SP_EVENT),
            ("PostToolUse", SP_EVENT),
            ("SessionEnd", SP_EVENT),
        ],
        matchers: &[],
        // Codex clamps these to 3 s whatever is asked (docs/harness-contracts.md#codex-registration).
        event_timeouts: &[("SessionEnd", 3)],
        registration: Registration {
            dir: Dir::Env("CODEX_HOME", ".codex"),
            file: "hooks.json",
            format: Format::Json(Layout::Grouped),
            form: Form::Command,
            timeout_key: "timeout",
            unit: Unit::Seconds,
            unit_documented: true,
            skeleton: Skeleton::Empty,
            note: Some(
                "Codex runs these hooks only after you trust them. Start `codex`, type `/hooks`, and trust \
                 each sessionpipe hook (sp-permission, sp-stop, sp-event). Trust covers the exact definition, \
                 so do it again whenever this install changes the file.",
            ),
        },
        default_wait_s: 30,
        silence: Silence {
            means: "its own approval, shown when the hook returns",
            ask: None,
        },
        waits_at_desk: false,
        // Its hook schema takes nothing beyond behavior/message; under `sp codex` more
        // (CODEX_APP_SERVER_ANSWER_FIELDS).
        answer_fields: &["scope"],
        headless: Some(Headless {
            program: "codex",
            program_env: "SP_CODEX",
            // 0.171.0: `exec --json` prints `thread.started` first; `exec --json resume ID`
            // sends the thread's earlier conversation plus the text. No fork.
            resume: &["exec", "--json", "resume", "{session}", "--", "{text}"],
            fork: None,
            start: &["exec", "--json", "--", "{text}"],
            resume_quiet: None,
            turn_event: "UserPromptSubmit",
            child_env: &[],
            read_line: super::codex::run_line,
        }),
    },
    Caps {
        harness: Harness::Cursor,
        name: "cursor",
        permission: Path::Hook("`beforeShellExecution` / `beforeMCPExecution` `{\"permission\":…}`"),
        permission_event: "beforeShellExecution",
        prompt: Path::Hook("`stop` `followup_message`"),
        stop_event: "stop",
        prompt_seams: &[],
        cancel: Path::Unsupported(
            "cursor has no API to cancel a running turn; never a signal to a pid",
        ),
        cancel_seams: &[],
        deny_stops: false,
        hooks: &[
            ("beforeShellExecution", SP_PERMISSION),
            ("beforeMCPExecution", SP_PERMISSION),
            ("stop", SP_STOP),
            ("sessionStart", SP_EVENT),
            ("beforeSubmitPrompt", SP_EVENT),
            ("afterShellExecution", SP_EVENT),
            ("afterMCPExecution", SP_EVENT),
            ("sessionEnd", SP_EVENT),
        ],
        matchers: &[],
        event_timeouts: &[],
        registration: Registration {
            dir: Dir::Home(".cursor"),
            file: "hooks.json",
            format: Format::Json(Layout::Flat),
            form: Form::Bare,
            timeout_key: "timeout",
            // Cursor does not document the unit (ms or s; docs/harness-contracts.md#cursor). Its plugin
            // examples read as seconds, so seconds it is; check this on a real Cursor.
            unit: Unit::Seconds,
            unit_documented: false,
            skeleton: Skeleton::Version1,
            note: Some("Cursor's timeout unit is undocumented; these are written as seconds."),
        },
        default_wait_s: 30,
        silence: Silence {
            // A Cursor forum report (3.21.16) says Auto-review mode runs the command even on
            // `ask`; Allowlist and Run Everything modes prompt. Deny is honoured in all three.
            means: "the command runs, so the hook answers `{\"permission\":\"ask\"}` instead (reported ignored in Cursor's Auto-review mode)",
            ask: Some(r#"{"permission":"ask"}"#),
        },
        waits_at_desk: false,
        answer_fields: &[],
        headless: None,
    },
    Caps {
        harness: Harness::CopilotCli,
        name: "copilot-cli",
        permission: Path::Hook("`permissionRequest` flat `{\"behavior\":…}`"),
        permission_event: "permissionRequest",
        prompt: Path::Hook("`agentStop` block"),
        stop_event: "agentStop",
        // Seen with the real 1.0.102: postToolUse `additionalContext` is appended to the
        // tool's result; a preToolUse deny becomes the result and the turn goes on.
        prompt_seams: &[
            ("postToolUse", 1),
            ("postToolUseFailure", 1),
            ("preToolUse", 2),
        ],
        cancel: Path::Hook(COPILOT_CANCEL),
        cancel_seams: &[
            ("permissionRequest", CancelSeam::Deliver),
            ("agentStop", CancelSeam::Deliver),
            ("userPromptSubmitted", CancelSeam::Expire),
            ("sessionStart", CancelSeam::Expire),
        ],
        // Its deny with `interrupt:true` ends the run.
        deny_stops: true,
        // The camelCase names, which also select camelCase payload fields.
        hooks: &[
            ("permissionRequest", SP_PERMISSION),
            ("agentStop", SP_STOP),
            ("sessionStart", SP_EVENT),
            ("userPromptSubmitted", SP_EVENT),
            ("preToolUse", SP_EVENT),
            ("postToolUse", SP_EVENT),
            ("postToolUseFailure", SP_EVENT),
            ("sessionEnd", SP_EVENT),
        ],
        matchers: &[],
        event_timeouts: &[],
        registration: Registration {
            dir: Dir::Home(".copilot"),
            file: "hooks/sessionpipe.json",
            format: Format::Json(Layout::Flat),
            form: Form::Bash,
            timeout_key: "timeoutSec",
            unit: Unit::Seconds,
            unit_documented: true,
            skeleton: Skeleton::Version1,
            note: None,
        },
        default_wait_s: 30,
        silence: Silence {
            means: "its rules and its own prompt (empty output falls through; `-p` then does not run the tool)",
            ask: None,
        },
        waits_at_desk: false,
        answer_fields: &[],
        headless: None,
    },
    Caps {
        harness: Harness::Kiro,
        name: "kiro",
        permission: Path::Unsupported(
            "kiro documents no hook answer that allows or denies a permission prompt",
        ),
        permission_event: "PermissionRequest",
        prompt: Path::Unsupported(
            "kiro's Stop hook cannot block, so a prompt has no path into the session",
        ),
        stop_event: "Stop",
        prompt_seams: &[],
        cancel: Path::Unsupported(
            "kiro has no API to cancel a running turn; never a signal to a pid",
        ),
        cancel_seams: &[],
        deny_stops: false,
        // The v3 trigger names (`.kiro/hooks/*.json`); the legacy agent-config names
        // (`agentSpawn`, `userPromptSubmit`, `postToolUse`, `stop`) are parsed as well.
        hooks: &[
            ("SessionStart", SP_EVENT),
            ("UserPromptSubmit", SP_EVENT),
            ("PostToolUse", SP_EVENT),
            ("Stop", SP_EVENT),
        ],
        matchers: &[],
        event_timeouts: &[],
        registration: Registration {
            dir: Dir::Home(".kiro"),
            file: "hooks/sessionpipe.json",
            format: Format::Json(Layout::List),
            form: Form::KiroItem,
            timeout_key: "timeout",
            unit: Unit::Seconds,
            unit_documented: true,
            skeleton: Skeleton::VersionV1,
            note: Some("Kiro has no remote permission answer; its sessions show as live and take prompts where it allows."),
        },
        default_wait_s: 0,
        silence: Silence {
            means: "n/a: no permission hook is registered",
            ask: None,
        },
        waits_at_desk: false,
        answer_fields: &[],
        headless: None,
    },
    Caps {
        harness: Harness::Droid,
        name: "droid",
        permission: Path::Hook("`PreToolUse` `permissionDecision`"),
        permission_event: "PreToolUse",
        prompt: Path::Hook("`Stop` block"),
        stop_event: "Stop",
        // Seen with the real 0.225.2: a PostToolUse `additionalContext` reaches the model
        // before its next call; a PreToolUse deny keeps the tool from running and the model
        // reads the reason as its result.
        prompt_seams: &[("PostToolUse", 1), ("PreToolUse", 2)],
        cancel: Path::Hook(DROID_CANCEL),
        cancel_seams: &[
            ("PreToolUse", CancelSeam::Deliver),
            ("PostToolUse", CancelSeam::Deliver),
            ("Stop", CancelSeam::Deliver),
            ("UserPromptSubmit", CancelSeam::Expire),
            ("SessionStart", CancelSeam::Expire),
        ],
        // Its permission hook is PreToolUse, where `continue:false` stops it with the denial.
        deny_stops: true,
        hooks: &[
            ("PreToolUse", SP_PERMISSION),
            ("Stop", SP_STOP),
            ("SessionStart", SP_EVENT),
            ("UserPromptSubmit", SP_EVENT),
            ("PostToolUse", SP_EVENT),
            ("SessionEnd", SP_EVENT),
        ],
        matchers: &[],
        event_timeouts: &[],
        registration: Registration {
            dir: Dir::Home(".factory"),
            file: "hooks.json",
            // Seen with the real 0.225.2: the events at the top level, no "hooks" wrapper.
            format: Format::Json(Layout::TopGrouped),
            form: Form::Command,
            timeout_key: "timeout",
            unit: Unit::Seconds,
            unit_documented: true,
            skeleton: Skeleton::Empty,
            note: Some("Droid reads hooks at start-up (`droid exec` 0.225.2 ran a fresh hooks.json without a review)."),
        },
        default_wait_s: 30,
        silence: Silence {
            means: "its normal permission flow (no decision)",
            ask: None,
        },
        waits_at_desk: false,
        answer_fields: &[],
        headless: None,
    },
    Caps {
        harness: Harness::GeminiCli,
        name: "gemini-cli",
        permission: Path::Unsupported(
            "gemini-cli has no permission answer channel (its ToolPermission notification is observe-only)",
        ),
        permission_event: "Notification",
        prompt: Path::Hook("`AfterAgent` block"),
        stop_event: "AfterAgent",
        // 0.61.0 appends AfterTool's `additionalContext` to the tool result the model reads,
        // and gives it a BeforeTool deny's `reason` in place of the tool's result.
        prompt_seams: &[("AfterTool", 1), ("BeforeTool", 2)],
        cancel: Path::Hook("at the next tool boundary or the turn's end: `{\"continue\":false}`, on which 0.61.0 ends the agent (at `BeforeTool` the tool does not run); expired when the person's next prompt comes first"),
        cancel_seams: &[
            ("BeforeTool", CancelSeam::Deliver),
            ("AfterTool", CancelSeam::Deliver),
            ("AfterAgent", CancelSeam::Deliver),
            ("BeforeAgent", CancelSeam::Expire),
            ("SessionStart", CancelSeam::Expire),
        ],
        deny_stops: false,
        // Not AfterModel or BeforeModel: 0.61.0 runs AfterModel once per streamed chunk, and
        // the tool boundaries are where a message or a stop can land cleanly.
        hooks: &[
            ("Notification", SP_PERMISSION),
            ("AfterAgent", SP_STOP),
            ("SessionStart", SP_EVENT),
            ("BeforeAgent", SP_EVENT),
            ("BeforeTool", SP_EVENT),
            ("AfterTool", SP_EVENT),
            ("SessionEnd", SP_EVENT),
        ],
        // Only permission notifications: others would announce a prompt that is not one.
        matchers: &[("Notification", "ToolPermission")],
        event_timeouts: &[],
        registration: Registration {
            dir: Dir::Home(".gemini"),
            file: "settings.json",
            format: Format::Json(Layout::Grouped),
            form: Form::NamedCommand,
            timeout_key: "timeout",
            unit: Unit::Millis,
            unit_documented: true,
            skeleton: Skeleton::Empty,
            note: Some(
                "Gemini CLI has no permission answer channel: prompts are announced, never answered remotely. \
                 On its Stable channel hooks may be off: set \"hooksConfig\": {\"enabled\": true} in settings.json.",
            ),
        },
        default_wait_s: 0,
        silence: Silence {
            means: "nothing: `Notification` only announces (`attention.needed` is still sent); its own dialog asks",
            ask: None,
        },
        waits_at_desk: false,
        answer_fields: &[],
        headless: None,
    },
    Caps {
        harness: Harness::OpenCode,
        name: "opencode",
        permission: Path::Api("sp-sync `POST /permission/:id/reply` (`once`/`reject`, never `always`; `scope: \"session\"` as our grant, which sp-event answers the next identical prompt from; a deny with `interrupt` is the reject, then `POST /session/:id/abort`)"),
        permission_event: "permission.asked",
        prompt: Path::Api(
            "sp-sync `POST /session/:id/prompt_async` when idle; `taken`, then `delivered` (mode `api`) at the next idle with the turn's answer (`GET /session/:id/message`: the assistant's text after the last user message) as `reply`",
        ),
        stop_event: "session.idle",
        prompt_seams: &[],
        cancel: Path::Api("sp-sync `POST /session/:id/abort`"),
        cancel_seams: &[],
        deny_stops: false,
        // No shell hooks: these are the plugin's event names (it runs `sp-event --harness
        // opencode` for each).
        hooks: &[
            ("session.created", SP_EVENT),
            ("session.status", SP_EVENT),
            ("session.idle", SP_EVENT),
            ("permission.asked", SP_EVENT),
            ("permission.replied", SP_EVENT),
            ("session.deleted", SP_EVENT),
        ],
        matchers: &[],
        event_timeouts: &[],
        registration: Registration {
            dir: Dir::XdgConfig("opencode"),
            file: "plugins/sessionpipe.js",
            format: Format::Plugin,
            form: Form::Bare,
            timeout_key: "",
            unit: Unit::Millis,
            unit_documented: true,
            skeleton: Skeleton::Empty,
            note: Some("OpenCode loads plugins at start: restart running OpenCode sessions."),
        },
        default_wait_s: 0,
        silence: Silence {
            means: "n/a: the plugin only reports; its own dialog asks until sp-sync replies",
            ask: None,
        },
        waits_at_desk: false,
        answer_fields: &["scope", "interrupt"],
        headless: None,
    },
];

/// The row of `h`.
pub fn of(h: Harness) -> &'static Caps {
    CAPS.iter()
        .find(|c| c.harness == h)
        .expect("every harness has a row in CAPS")
}

/// The row named `name` (the registry name a session key carries).
pub fn named(name: &str) -> Option<&'static Caps> {
    CAPS.iter().find(|c| c.name == name)
}

impl Caps {
    pub fn path(&self, kind: Kind) -> Path {
        match kind {
            Kind::PermissionAnswer => self.permission,
            Kind::Prompt => self.prompt,
            Kind::Cancel => self.cancel,
            // DECISIONS 39: sp-sync's runner starts a session; no session's hook takes it.
            Kind::Start => Path::Unsupported(
                "a start is run by sp-sync's runner, never through a session's hooks",
            ),
        }
    }

    /// `data.control` of this harness's `session.started`, in sp-acp's shape
    /// (`acp::agent::control`): when each prompt mode and a cancel take effect, and which of
    /// DECISIONS 30's optional `permission.answer` fields its permission hook honours, so
    /// the page offers only those.
    pub fn control(&self) -> serde_json::Value {
        self.control_with(self.answer_fields)
    }

    /// [`Caps::control`] for a session whose path honours `answer_fields` (a Codex thread on
    /// `sp codex`'s app-server honours more than its hook).
    pub fn control_with(&self, answer_fields: &[&str]) -> serde_json::Value {
        let seam_takes = |rank: i64| self.prompt_seams.iter().any(|(_, r)| *r <= rank);
        let at = |unsupported: bool, boundary: bool| {
            if unsupported {
                "no"
            } else if boundary {
                "tool_boundary"
            } else {
                "turn_end"
            }
        };
        let no_prompt = matches!(self.prompt, Path::Unsupported(_));
        let cancel = match self.cancel {
            Path::Unsupported(_) => "no",
            Path::Api(_) => "now",
            Path::Hook(_) => at(
                false,
                self.cancel_seams
                    .iter()
                    .any(|(event, seam)| *event != self.stop_event && *seam == CancelSeam::Deliver),
            ),
        };
        serde_json::json!({
            "prompt": {
                "queue": at(no_prompt, false),
                "steer": at(no_prompt, seam_takes(1)),
                "interrupt": at(no_prompt, seam_takes(2)),
            },
            "cancel": cancel,
            "answer": answer_fields,
        })
    }
}

/// What each harness's row was checked against: the real program, run offline at the version
/// pinned for the suite, or, where no CLI can be had here, its documents.
pub const CHECKED: &[(&str, &str)] = &[
    ("claude-code", "the real CLI, 2.1.332, offline (`crates/sender/tests/real_agents.rs`)"),
    ("codex", "the real CLI, 0.171.0, offline (`crates/sender/tests/real_agents.rs`, `sp_codex.rs`)"),
    ("cursor", "its documents only (cursor.com/docs, as read for docs/harness-contracts.md; no date given there): its CLI comes only from cursor.com's installer, on no registry this machine reaches"),
    ("copilot-cli", "the real CLI, 1.0.102, offline (`crates/sender/tests/real_agents.rs`)"),
    ("kiro", "its documents only (kiro.dev/docs/cli/v3/hooks and the 3.4 changelog, as read for docs/harness-contracts.md; no date given there): its CLI comes only from kiro.dev's installer, on no registry this machine reaches"),
    ("droid", "the real CLI, 0.225.2, offline (`crates/sender/tests/real_agents.rs`)"),
    ("gemini-cli", "the real CLI, 0.61.0, offline (`crates/sender/tests/real_agents.rs`)"),
    ("opencode", "the real CLI, 1.18.33, offline (`crates/sender/tests/real_agents.rs`)"),
];

/// Markers around the generated table in docs/harnesses.md.
pub const README_BEGIN: &str = "<!-- harness-table: generated by `sp hooks table`; do not edit -->";
pub const README_END: &str = "<!-- harness-table end -->";

fn cell(p: Path) -> String {
    match p {
        Path::Hook(s) => format!("delivered: {s}"),
        Path::Api(s) => format!("delivered: {s}"),
        Path::Unsupported(why) => format!("unsupported: {why}"),
    }
}

fn where_(r: &Registration) -> String {
    let dir = match r.dir {
        Dir::Env(_, d) | Dir::Home(d) => format!("~/{d}"),
        Dir::XdgConfig(d) => format!("~/.config/{d}"),
    };
    let shape = match (r.format, r.form) {
        (Format::Plugin, _) => "a JS plugin of ours",
        (Format::Json(Layout::TopGrouped), _) => "`<Event>[].hooks[]` at the top level, `command`",
        (_, Form::Exec) => "`hooks.<Event>[].hooks[]`, exec form (no shell)",
        (_, Form::Command) => "`hooks.<Event>[].hooks[]`, `command`",
        (_, Form::NamedCommand) => "`hooks.<Event>[].hooks[]`, named `command`",
        (_, Form::Bare) => "`{\"version\":1,\"hooks\":{event:[…]}}`, `command`",
        (_, Form::Bash) => "`{\"version\":1,\"hooks\":{event:[…]}}`, `bash`",
        (_, Form::KiroItem) => "v3 `hooks[]` items with `trigger`",
    };
    format!("`{dir}/{}`: {shape}", r.file)
}

fn unit(r: &Registration) -> &'static str {
    match (r.format, r.unit, r.unit_documented) {
        (Format::Plugin, _, _) => "n/a",
        (_, Unit::Seconds, false) => "written as seconds (undocumented)",
        (_, Unit::Seconds, true) => "seconds",
        (_, Unit::Millis, _) => "milliseconds",
    }
}

fn wait(c: &Caps) -> String {
    if c.default_wait_s == 0 {
        return "never waits".into();
    }
    let timeout = c
        .registration
        .unit
        .label(c.default_wait_s + PERMISSION_MARGIN_S);
    let when = if c.waits_at_desk {
        "always (its dialog stays up)"
    } else {
        "only while you are away"
    };
    format!("{} s, {when}; timeout {timeout}", c.default_wait_s)
}

fn prompt_cell(c: &Caps) -> String {
    let mut s = cell(c.prompt);
    // Seams of events this harness registers, grouped by the modes they take.
    let mut seams: Vec<(i64, Vec<String>)> = Vec::new();
    for (e, rank) in c.prompt_seams {
        if !c.hooks.iter().any(|(h, _)| h == e) {
            continue;
        }
        match seams.iter_mut().find(|(r, _)| r == rank) {
            Some((_, events)) => events.push(format!("`{e}`")),
            None => seams.push((*rank, vec![format!("`{e}`")])),
        }
    }
    for (rank, events) in seams {
        let modes = if rank <= 1 {
            "`steer`/`interrupt`"
        } else {
            "`interrupt`"
        };
        s.push_str(&format!("; {modes} at {}", events.join("/")));
    }
    s
}

/// The harness tables of docs/harnesses.md, markers included: what each harness supports, and the hook
/// events registered for it.
pub fn readme_table() -> String {
    let esc = |s: String| s.replace('|', "\\|");
    let mut out = String::new();
    out.push_str(README_BEGIN);
    out.push_str("\n\n| harness | hooks go into | permission.answer | prompt | cancel | permission wait | a silent permission hook means | timeout unit |\n|---|---|---|---|---|---|---|---|\n");
    for c in CAPS {
        let row = [
            c.name.to_string(),
            where_(&c.registration),
            cell(c.permission),
            prompt_cell(c),
            cell(c.cancel),
            wait(c),
            c.silence.means.to_string(),
            unit(&c.registration).to_string(),
        ];
        out.push_str("| ");
        out.push_str(&row.map(esc).join(" | "));
        out.push_str(" |\n");
    }
    out.push_str("\n| harness | hook events registered (binary) |\n|---|---|\n");
    for c in CAPS {
        let events: Vec<String> = c
            .hooks
            .iter()
            .map(|(e, b)| match c.matchers.iter().find(|(m, _)| m == e) {
                Some((_, m)) => format!("`{e}` [{m}] ({b})"),
                None => format!("`{e}` ({b})"),
            })
            .collect();
        out.push_str(&format!("| {} | {} |\n", c.name, esc(events.join(", "))));
    }
    out.push_str("\n| harness | checked against |\n|---|---|\n");
    for c in CAPS {
        let checked = CHECKED
            .iter()
            .find(|(n, _)| *n == c.name)
            .map_or("", |r| r.1);
        out.push_str(&format!("| {} | {} |\n", c.name, esc(checked.to_string())));
    }
    out.push_str(
        "\n| harness | permission.answer fields beyond yes or no (DECISIONS 30) |\n|---|---|\n",
    );
    for c in CAPS {
        let list = |fields: &[&str]| {
            fields
                .iter()
                .map(|f| format!("`{f}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut fields = if c.answer_fields.is_empty() {
            "none: each is acked `unsupported` naming it, the prompt stays open".to_string()
        } else {
            list(c.answer_fields)
        };
        if c.harness == Harness::Codex {
            fields.push_str(&format!(
                " (our grant); under `sp codex` {} (`acceptForSession` plus our grant, `cancel`, a question's answers through `item/tool/requestUserInput`)",
                list(CODEX_APP_SERVER_ANSWER_FIELDS)
            ));
        }
        out.push_str(&format!("| {} | {} |\n", c.name, esc(fields)));
    }
    out.push('\n');
    out.push_str(README_END);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `data.control` follows each row: no prompt path or no cancel says `no`, an API cancel
    /// is `now`, and the answer fields are the row's (DECISIONS 30).
    #[test]
    fn control_follows_the_row() {
        let kiro = of(Harness::Kiro).control();
        assert_eq!(kiro["prompt"]["queue"], "no");
        assert_eq!(kiro["cancel"], "no");
        assert_eq!(kiro["answer"], serde_json::json!([]));
        let cursor = of(Harness::Cursor).control();
        assert_eq!(cursor["prompt"]["queue"], "turn_end");
        assert_eq!(cursor["prompt"]["steer"], "turn_end");
        assert_eq!(cursor["cancel"], "no");
        assert_eq!(of(Harness::OpenCode).control()["cancel"], "now");
        let claude = of(Harness::ClaudeCode).control();
        assert_eq!(claude["prompt"]["interrupt"], "tool_boundary");
        assert_eq!(
            claude["answer"],
            serde_json::json!(["scope", "input", "interrupt", "answers"])
        );
    }

    #[test]
    fn one_row_per_harness_in_order() {
        let rows: Vec<Harness> = CAPS.iter().map(|c| c.harness).collect();
        assert_eq!(rows, Harness::ALL);
        for c in CAPS {
            assert_eq!(named(c.name).map(|r| r.harness), Some(c.harness));
        }
    }

    #[test]
    fn every_harness_says_what_it_was_checked_against() {
        for c in CAPS {
            assert!(
                CHECKED.iter().any(|(n, t)| *n == c.name && !t.is_empty()),
                "{}",
                c.name
            );
        }
    }

    #[test]
    fn cursor_ask_is_its_adapters_answer() {
        assert_eq!(
            of(Harness::Cursor).silence.ask,
            Some(super::super::cursor::render_ask().as_str())
        );
    }

    #[test]
    fn every_seam_is_a_registered_event() {
        for c in CAPS {
            let registered = |e: &str| c.hooks.iter().any(|(h, _)| *h == e);
            for (e, seam) in c.cancel_seams {
                assert!(registered(e), "{} {e} {seam:?}", c.name);
            }
            let named = c.matchers.iter().map(|(e, _)| *e);
            for e in named.chain(c.event_timeouts.iter().map(|(e, _)| *e)) {
                assert!(registered(e), "{} {e}", c.name);
            }
        }
    }
}
