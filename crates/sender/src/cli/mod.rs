//! `sp`: set-up and everyday use. Each subcommand is a function that prints its result and
//! returns whether everything was fine; errors go back to `main`, which alone turns them
//! into text and exit codes.
mod codex;
mod control;
mod doctor;
mod grants;
mod pair;
mod runs;
mod setup;
mod sink;
mod status;

use anyhow::Result;
use clap::builder::PossibleValuesParser;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::time::Duration;

/// `sp`'s command line (clap derive). `sp` alone prints the help.
#[derive(Debug, Parser)]
#[command(
    name = "sp",
    version,
    about = "sp: set up and watch the sessionpipe control channel"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Per sink: paused or not, last poll, last error, outbox; live sessions, queued messages,
    /// open permission prompts
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Control messages with state, outcome and timestamps
    Queue {
        #[arg(long)]
        json: bool,
        /// Only this session (`<harness>:<id>`)
        #[arg(long, value_name = "KEY")]
        session: Option<String>,
        #[arg(long, value_parser = PossibleValuesParser::new(QUEUE_STATES))]
        state: Option<String>,
        /// At most the newest N
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
    },
    /// Checks config, sinks, hook registrations, cron, database and hook latency; says how to
    /// fix each problem; exits 1 if any
    Doctor,
    /// Receivers this machine reports to
    #[command(subcommand)]
    Sink(SinkCommand),
    /// Our hooks in every installed harness, and the cron line for sp-sync
    #[command(subcommand)]
    Setup(SetupCommand),
    /// Whether you are away from this machine: only then do Codex, Cursor, Droid and Copilot
    /// CLI wait for a remote answer (Claude Code always waits, beside its own dialog); a
    /// receiver may say it too
    Away {
        #[arg(value_parser = PossibleValuesParser::new(["on", "off", "status"]), default_value = "status")]
        what: String,
    },
    /// Enrolls a passkey for signed control: prints a link and six check digits, waits for
    /// the approval, verifies its proof before trusting it; `--off` ends the pairing
    Pair {
        sink: String,
        /// What the receiver calls this machine
        #[arg(long, conflicts_with = "off")]
        name: Option<String>,
        /// How long to wait for the approval
        #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "off")]
        timeout: Option<u64>,
        /// Ends this machine's pairing with the sink instead (as `sp control off SINK`): the
        /// receiver forgets this machine's token and keys, and no other machine's
        #[arg(long)]
        off: bool,
    },
    /// Grants for a session: a prompt answered "for this session" answers the same tool with
    /// the same input again at once; `revoke ID` ends one
    Grants {
        #[arg(long)]
        json: bool,
        #[command(subcommand)]
        revoke: Option<GrantsCommand>,
    },
    /// Headless runs sp-sync launched to deliver between turns (resume, fork, start);
    /// `log ID` shows one's output
    Runs {
        #[arg(long)]
        json: bool,
        #[command(subcommand)]
        log: Option<RunsCommand>,
    },
    /// Signed control: enrolled passkeys, pairings, verdicts
    #[command(subcommand)]
    Control(ControlCommand),
    /// Each harness's hook file and what the hooks register
    #[command(subcommand)]
    Hooks(HooksCommand),
    /// Codex's terminal UI on this user's app-server (started if need be, socket private to
    /// you), so prompts and cancels from the phone reach the running turn; ARGS go to codex
    /// ($SP_CODEX, else codex)
    #[command(disable_help_flag = true)]
    Codex {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

const QUEUE_STATES: [&str; 7] = [
    "queued",
    "delivering",
    "done",
    "delivered",
    "expired",
    "unsupported",
    "failed",
];

#[derive(Debug, Subcommand)]
enum SinkCommand {
    /// Adds a receiver; --control only if its well-known offers control, --signed (then
    /// `sp pair NAME`) only if it speaks signed control
    Add(sink::AddOptions),
    #[command(visible_alias = "ls")]
    List {
        #[arg(long)]
        json: bool,
    },
    #[command(visible_alias = "rm")]
    Remove { name: String },
}

#[derive(Debug, Subcommand)]
enum SetupCommand {
    /// Registers our hooks in every installed harness and adds the cron line for sp-sync
    /// (install.sh runs this)
    Install {
        #[command(flatten)]
        common: SetupArgs,
        #[arg(long)]
        no_cron: bool,
    },
    /// Removes exactly those hooks and that cron line
    Uninstall {
        #[command(flatten)]
        common: SetupArgs,
    },
}

#[derive(Debug, clap::Args)]
struct SetupArgs {
    /// Say what would change, change nothing
    #[arg(short = 'n', long)]
    dry_run: bool,
    /// Where sp-sync and the hooks are installed
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<String>,
}

#[derive(Debug, Subcommand)]
enum ControlCommand {
    /// The passkeys enrolled on this machine, per sink
    Keys {
        #[arg(long)]
        json: bool,
        #[command(subcommand)]
        remove: Option<KeysCommand>,
    },
    /// Forgets the pairing with that sink (machine id, token, keys) and tells the receiver
    Off { sink: String },
    /// The verdict for one signed control command or enrollment proof (a control-vector
    /// file, or - for stdin) as JSON; exits 1 if refused
    Verify { file: String },
}

#[derive(Debug, Subcommand)]
enum GrantsCommand {
    /// Ends one grant now: the next such call is asked again
    Revoke { id: String },
}

#[derive(Debug, Subcommand)]
enum RunsCommand {
    /// A run's output: its stdout (the harness's JSON lines), then its stderr
    Log { id: String },
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Removes one enrolled key
    #[command(visible_alias = "rm")]
    Remove { id: String },
}

#[derive(Debug, Subcommand)]
enum HooksCommand {
    /// Each harness's hook file and whether our hooks are in it
    List,
    /// The registration `sp setup install` merges into that file; `acp` prints Zed's
    /// agent_servers entry for sp-acp
    Print {
        harness: String,
        #[arg(long, value_name = "DIR")]
        bin_dir: Option<String>,
    },
    /// What each harness supports, as docs/harnesses.md's table (markdown)
    Table,
}

/// What follows the options in `sp --help`: exit codes, environment, each harness's file.
fn help_tail() -> String {
    let files: Vec<String> = crate::setup::targets()
        .iter()
        .map(|t| {
            format!(
                "  {:<12} {}",
                t.harness.name(),
                crate::paths::tilde(&t.file.to_string_lossy())
            )
        })
        .collect();
    format!(
        "Exit status: 0 fine, 1 something is wrong (said on stderr, or by doctor), 2 bad usage.\n\n\
         {}\n  SP_CRONTAB             crontab program to use; a path that does not exist acts as\n\
         \x20                        a machine without crontab (tests)\n\
         \x20 SP_SYSTEMCTL           systemctl program to use; a path that does not exist acts as\n\
         \x20                        a machine without a systemd user manager (tests)\n\
         \x20 SP_CODEX               the Codex program `sp codex` runs (default: codex on PATH)\n\
         \x20 CLAUDE_CONFIG_DIR, CODEX_HOME, XDG_CONFIG_HOME move Claude Code's, Codex's, OpenCode's files\n\n\
         HARNESS FILES (hooks are registered here when the folder exists):\n{}",
        crate::paths::ENV_HELP,
        files.join("\n")
    )
}

fn command() -> clap::Command {
    Cli::command().after_help(help_tail())
}

/// A command line we cannot make sense of: `main` exits 2 for it.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

pub fn usage<T>(msg: impl Into<String>) -> Result<T> {
    Err(Usage(msg.into()).into())
}

/// How a command ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    Ok,
    /// The command ran and reported problems (doctor, a malformed settings file).
    Problems,
}

pub(crate) const DB_BUSY: Duration = Duration::from_secs(5);

/// Parses `sp`'s arguments (without the program name) and runs the command. A command line
/// clap refuses, and `--help` / `--version`, come back as a `clap::Error` for `main` to print.
pub fn run(args: Vec<String>) -> Result<Done> {
    let argv = std::iter::once("sp".to_string()).chain(args);
    let matches = command().try_get_matches_from(argv)?;
    let cli = Cli::from_arg_matches(&matches)?;
    let Some(command) = cli.command else {
        print!("{}", self::command().render_long_help());
        return Ok(Done::Ok);
    };
    match command {
        Command::Status { json } => status::status(json),
        Command::Queue {
            json,
            session,
            state,
            limit,
        } => status::queue(
            &crate::store::status::QueueFilter {
                session,
                state,
                limit,
            },
            json,
        ),
        Command::Doctor => doctor::doctor(),
        Command::Sink(SinkCommand::Add(o)) => sink::add(o),
        Command::Sink(SinkCommand::List { json }) => sink::list(json),
        Command::Sink(SinkCommand::Remove { name }) => sink::remove(&name),
        Command::Setup(SetupCommand::Install { common, no_cron }) => {
            setup::install(common.dry_run, common.bin_dir, no_cron)
        }
        Command::Setup(SetupCommand::Uninstall { common }) => {
            setup::uninstall(common.dry_run, common.bin_dir)
        }
        Command::Away { what } => match what.as_str() {
            "on" => status::set_away(true),
            "off" => status::set_away(false),
            _ => status::away_status(),
        },
        Command::Pair {
            sink, off: true, ..
        } => pair::off(&sink),
        Command::Pair {
            sink,
            name,
            timeout,
            off: false,
        } => pair::pair(pair::PairOptions {
            sink,
            name,
            timeout: timeout.map_or(pair::PAIR_WAIT_MAX, Duration::from_secs),
        }),
        Command::Control(ControlCommand::Keys {
            remove: Some(KeysCommand::Remove { id }),
            ..
        }) => pair::remove_key(&id),
        Command::Control(ControlCommand::Keys { json, remove: None }) => pair::keys(json),
        Command::Control(ControlCommand::Off { sink }) => pair::off(&sink),
        Command::Grants { json, revoke: None } => grants::list(json),
        Command::Grants {
            revoke: Some(GrantsCommand::Revoke { id }),
            ..
        } => grants::revoke(&id),
        Command::Control(ControlCommand::Verify { file }) => control::verify(&file),
        Command::Runs { json, log: None } => runs::list(json),
        Command::Runs {
            log: Some(RunsCommand::Log { id }),
            ..
        } => runs::log(&id),
        Command::Hooks(HooksCommand::List) => setup::list(),
        Command::Hooks(HooksCommand::Table) => {
            print!("{}", crate::harness::caps::readme_table());
            Ok(Done::Ok)
        }
        Command::Hooks(HooksCommand::Print { harness, bin_dir }) => setup::print(&harness, bin_dir),
        Command::Codex { args } => codex::run(args),
    }
}

/// `12s`, `5m`, `3h`, `2d`: how long ago an RFC 3339 time was.
pub(crate) fn age_s(at: &str) -> Option<i64> {
    crate::clock::parse_wire(at).map(|ms| ((crate::clock::now_ms() - ms) / 1000).max(0))
}

pub(crate) fn human_age(secs: i64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

pub(crate) fn ago(at: &Option<String>) -> String {
    match at {
        None => "never".into(),
        Some(t) => match age_s(t) {
            Some(s) => format!("{t} ({} ago)", human_age(s)),
            None => t.clone(),
        },
    }
}

/// A path as the user would type it.
pub(crate) fn show(p: &std::path::Path) -> String {
    crate::paths::tilde(&p.to_string_lossy())
}
