//! `sp`: set-up and everyday use. Each subcommand is a function that prints its result and
//! returns whether everything was fine; errors go back to `main`, which alone turns them
//! into text and exit codes.
mod codex;
mod control;
mod doctor;
mod pair;
mod setup;
mod sink;
mod status;

use anyhow::Result;
use std::time::Duration;

pub const HELP: &str = "\
sp: set up and watch the sessionpipe control channel

USAGE:
  sp status [--json]       per sink: paused or not, last poll, last error, outbox;
                           live sessions, queued messages, open permission prompts
  sp queue [--json] [--session KEY] [--state STATE] [--limit N]
                           control messages with state, outcome and timestamps;
                           STATE: queued, delivering, done, delivered, expired, unsupported, failed
  sp doctor                checks config, sinks, hook registrations, cron, database and
                           hook latency; says how to fix each problem; exits 1 if any
  sp sink add URL --token-file FILE [--control|--signed] [--tier N] [--name NAME] [--no-check]
                           adds a receiver; --control only if its well-known offers control,
                           --signed (then `sp pair NAME`) only if it speaks signed control
  sp sink list [--json]
  sp sink remove NAME
  sp setup install [--dry-run] [--bin-dir DIR] [--no-cron]
                           registers our hooks in every installed harness and adds the
                           cron line for sp-sync (install.sh runs this)
  sp setup uninstall [--dry-run]
                           removes exactly those hooks and that cron line
  sp away [on|off|status] whether you are away from this machine: only then do Codex, Cursor,
                           Droid and Copilot CLI wait for a remote answer (Claude Code always
                           waits, beside its own dialog); a receiver may say it too
  sp pair SINK [--name NAME] [--timeout SECS]
                           enrolls a passkey for signed control: prints a link and six check
                           digits, waits for the approval, verifies its proof before trusting it
  sp control keys [--json] the passkeys enrolled on this machine, per sink
  sp control keys remove ID
  sp control off SINK      forgets the pairing with that sink (machine id, token, keys) and
                           tells the receiver
  sp control verify FILE   the verdict for one signed control command or enrollment proof
                           (a control-vector file, or - for stdin) as JSON; exits 1 if refused
  sp hooks list            each harness's hook file and whether our hooks are in it
  sp hooks print HARNESS [--bin-dir DIR]
                           the registration `sp setup install` merges into that file;
                           `acp` prints Zed's agent_servers entry for sp-acp
  sp hooks table           what each harness supports, as the README's table (markdown)
  sp codex [ARGS…]         Codex's terminal UI on this user's app-server (started if need
                           be, socket private to you), so prompts and cancels from the phone
                           reach the running turn; ARGS go to codex ($SP_CODEX, else codex)

OPTIONS:
  -h, --help     this text
  -V, --version  the version

Exit status: 0 fine, 1 something is wrong (said on stderr, or by doctor), 2 bad usage.
";

fn help_text() -> String {
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
        "sp {}\n{HELP}\n{}\n  SP_CRONTAB             crontab program to use; a path that does not exist acts as\n\
         \x20                        a machine without crontab (tests)\n\
         \x20 SP_SYSTEMCTL           systemctl program to use; a path that does not exist acts as\n\
         \x20                        a machine without a systemd user manager (tests)\n\
         \x20 SP_CODEX               the Codex program `sp codex` runs (default: codex on PATH)\n\
         \x20 CLAUDE_CONFIG_DIR, CODEX_HOME, XDG_CONFIG_HOME move Claude Code's, Codex's, OpenCode's files\n\n\
         HARNESS FILES (hooks are registered here when the folder exists):\n{}\n",
        env!("CARGO_PKG_VERSION"),
        crate::paths::ENV_HELP,
        files.join("\n")
    )
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

/// The remaining words of the command line.
pub(crate) struct Args(Vec<String>);

impl Args {
    pub fn flag(&mut self, name: &str) -> bool {
        let before = self.0.len();
        self.0.retain(|a| a != name);
        self.0.len() != before
    }

    pub fn value(&mut self, name: &str) -> Result<Option<String>> {
        let prefix = format!("{name}=");
        if let Some(i) = self.0.iter().position(|a| a.starts_with(&prefix)) {
            return Ok(Some(self.0.remove(i)[prefix.len()..].to_string()));
        }
        let Some(i) = self.0.iter().position(|a| a == name) else {
            return Ok(None);
        };
        if i + 1 >= self.0.len() {
            return usage(format!("{name} needs a value"));
        }
        self.0.remove(i);
        Ok(Some(self.0.remove(i)))
    }

    pub fn positional(&mut self, what: &str) -> Result<String> {
        match self.0.iter().position(|a| !a.starts_with('-') || a == "-") {
            Some(i) => Ok(self.0.remove(i)),
            None => usage(format!("missing {what}")),
        }
    }

    pub fn finish(self) -> Result<()> {
        match self.0.first() {
            None => Ok(()),
            Some(a) => usage(format!("unexpected argument {a:?}")),
        }
    }
}

pub(crate) const DB_BUSY: Duration = Duration::from_secs(5);

pub fn run(args: Vec<String>) -> Result<Done> {
    // Everything after `sp codex` is Codex's, --help included.
    if args.first().is_some_and(|a| a == "codex") {
        return codex::run(args[1..].to_vec());
    }
    let mut args = Args(args);
    if args.flag("-V") | args.flag("--version") {
        println!("sp {}", env!("CARGO_PKG_VERSION"));
        return Ok(Done::Ok);
    }
    if args.0.is_empty()
        || args.flag("-h") | args.flag("--help")
        || args.0.first().is_some_and(|a| a == "help")
    {
        print!("{}", help_text());
        return Ok(Done::Ok);
    }
    let cmd = args.positional("command")?;
    match cmd.as_str() {
        "status" => {
            let json = args.flag("--json");
            args.finish()?;
            status::status(json)
        }
        "queue" => {
            let json = args.flag("--json");
            let filter = crate::store::status::QueueFilter {
                session: args.value("--session")?,
                state: args.value("--state")?,
                limit: match args.value("--limit")? {
                    None => None,
                    Some(n) => Some(
                        n.parse()
                            .map_err(|_| Usage(format!("--limit takes a number, not {n:?}")))?,
                    ),
                },
            };
            if let Some(s) = &filter.state {
                const STATES: &[&str] = &[
                    "queued",
                    "delivering",
                    "done",
                    "delivered",
                    "expired",
                    "unsupported",
                    "failed",
                ];
                if !STATES.contains(&s.as_str()) {
                    return usage(format!("--state {s:?}: use one of {}", STATES.join(", ")));
                }
            }
            args.finish()?;
            status::queue(&filter, json)
        }
        "doctor" => {
            args.finish()?;
            doctor::doctor()
        }
        "sink" => {
            let sub = args.positional("sink command (add, list, remove)")?;
            match sub.as_str() {
                "add" => {
                    let opts = sink::AddOptions {
                        control: args.flag("--control"),
                        signed: args.flag("--signed"),
                        no_check: args.flag("--no-check"),
                        token_file: args.value("--token-file")?,
                        tier: match args.value("--tier")? {
                            None => 0,
                            Some(t) => match t.parse::<u8>() {
                                Ok(n) if n <= 3 => n,
                                _ => return usage(format!("--tier {t:?}: tiers are 0 to 3")),
                            },
                        },
                        name: args.value("--name")?,
                        url: args.positional("URL")?,
                    };
                    args.finish()?;
                    sink::add(opts)
                }
                "list" | "ls" => {
                    let json = args.flag("--json");
                    args.finish()?;
                    sink::list(json)
                }
                "remove" | "rm" => {
                    let name = args.positional("sink NAME")?;
                    args.finish()?;
                    sink::remove(&name)
                }
                other => usage(format!(
                    "unknown sink command {other:?}; use add, list or remove"
                )),
            }
        }
        "setup" => {
            let sub = args.positional("setup command (install, uninstall)")?;
            let dry_run = args.flag("--dry-run") | args.flag("-n");
            let bin_dir = args.value("--bin-dir")?;
            match sub.as_str() {
                "install" => {
                    let no_cron = args.flag("--no-cron");
                    args.finish()?;
                    setup::install(dry_run, bin_dir, no_cron)
                }
                "uninstall" => {
                    args.finish()?;
                    setup::uninstall(dry_run, bin_dir)
                }
                other => usage(format!(
                    "unknown setup command {other:?}; use install or uninstall"
                )),
            }
        }
        "away" => {
            let what = args
                .positional("on, off or status")
                .unwrap_or_else(|_| "status".into());
            args.finish()?;
            match what.as_str() {
                "on" => status::set_away(true),
                "off" => status::set_away(false),
                "status" => status::away_status(),
                other => usage(format!("sp away {other:?}: use on, off or status")),
            }
        }
        "pair" => {
            let name = args.value("--name")?;
            let timeout = match args.value("--timeout")? {
                None => pair::PAIR_WAIT_MAX,
                Some(t) => match t.parse::<u64>() {
                    Ok(n) if n >= 1 => Duration::from_secs(n),
                    _ => return usage(format!("--timeout {t:?}: a number of seconds")),
                },
            };
            let sink = args.positional("SINK")?;
            args.finish()?;
            pair::pair(pair::PairOptions {
                sink,
                name,
                timeout,
            })
        }
        "control" => {
            let sub = args.positional("control command (keys, off, verify)")?;
            match sub.as_str() {
                "verify" => {
                    let file = args.positional("FILE")?;
                    args.finish()?;
                    control::verify(&file)
                }
                "keys" => {
                    if args.0.first().is_some_and(|a| a == "remove" || a == "rm") {
                        args.0.remove(0);
                        let id = args.positional("key ID")?;
                        args.finish()?;
                        return pair::remove_key(&id);
                    }
                    let json = args.flag("--json");
                    args.finish()?;
                    pair::keys(json)
                }
                "off" => {
                    let sink = args.positional("SINK")?;
                    args.finish()?;
                    pair::off(&sink)
                }
                other => usage(format!(
                    "unknown control command {other:?}; use keys, off or verify"
                )),
            }
        }
        "hooks" => {
            let sub = args.positional("hooks command (list, print, table)")?;
            match sub.as_str() {
                "list" => {
                    args.finish()?;
                    setup::list()
                }
                "table" => {
                    args.finish()?;
                    print!("{}", crate::harness::caps::readme_table());
                    Ok(Done::Ok)
                }
                "print" => {
                    let bin_dir = args.value("--bin-dir")?;
                    let harness = args.positional("HARNESS")?;
                    args.finish()?;
                    setup::print(&harness, bin_dir)
                }
                other => usage(format!(
                    "unknown hooks command {other:?}; use list, print or table"
                )),
            }
        }
        other => usage(format!("unknown command {other:?}")),
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
