//! The one crontab line that runs sp-sync every minute, or, on a machine without crontab, the
//! systemd user timer or launchd agent to use instead (printed, never installed behind the
//! user's back).
use super::json::shell_quote;
use super::run_command as run;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Ends our line, so re-runs find it and `--uninstall` removes exactly it.
pub const MARKER: &str = "# sessionpipe: sp-sync every minute";
const TIMEOUT: Duration = Duration::from_secs(20);
pub const SYSTEMD_UNIT: &str = "sessionpipe-sync";
pub const LAUNCHD_LABEL: &str = "dev.sessionpipe.sync";

/// `$SP_CRONTAB` (a stand-in for tests; a path that does not exist means "no crontab"),
/// else `crontab` on PATH.
pub fn crontab_command() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SP_CRONTAB").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("crontab"))
        .find(|p| is_executable(p))
}

pub fn is_executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

/// Variables cron does not have but the resolution of our files depends on. Cron runs with a
/// bare environment, so a config or state folder moved by them is spelled out in the line.
fn env_prefix() -> String {
    let moved = [
        "SESSIONPIPE_CONFIG",
        "SESSIONPIPE_STATE_DIR",
        "XDG_CONFIG_HOME",
        "XDG_STATE_HOME",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
    if !moved {
        return String::new();
    }
    format!(
        "SESSIONPIPE_CONFIG={} SESSIONPIPE_STATE_DIR={} ",
        cron_quote(&crate::paths::config_file()),
        cron_quote(&crate::paths::state_dir())
    )
}

/// Shell-quotes a path for a crontab line, where `%` also needs a backslash.
fn cron_quote(p: &Path) -> String {
    shell_quote(&p.to_string_lossy()).replace('%', "\\%")
}

/// The whole line for this sp-sync.
pub fn line(sync_bin: &Path) -> String {
    format!(
        "* * * * * {}{} >/dev/null 2>&1 {MARKER}",
        env_prefix(),
        cron_quote(sync_bin)
    )
}

/// The current crontab ("" when the user has none).
pub fn read(crontab: &Path) -> Result<String> {
    let mut c = Command::new(crontab);
    c.arg("-l");
    let (ok, out, err) =
        run(c, None, TIMEOUT).with_context(|| format!("{} -l", crontab.display()))?;
    if ok {
        return Ok(out);
    }
    // "no crontab for <user>" is the empty crontab, not a failure.
    if err.to_ascii_lowercase().contains("no crontab") {
        return Ok(String::new());
    }
    bail!("{} -l failed: {}", crontab.display(), err.trim())
}

/// Installs `text` as the crontab; an empty one is removed (`-r`), as it was before us.
fn write(crontab: &Path, text: &str) -> Result<()> {
    let mut c = Command::new(crontab);
    let (arg, stdin) = if text.is_empty() {
        ("-r", None)
    } else {
        ("-", Some(text))
    };
    c.arg(arg);
    let (ok, _, err) =
        run(c, stdin, TIMEOUT).with_context(|| format!("{} {arg}", crontab.display()))?;
    if !ok {
        bail!("{} {arg} failed: {}", crontab.display(), err.trim());
    }
    Ok(())
}

/// The crontab with our line in place of any older one of ours; None when nothing changes.
pub fn with_line(current: &str, line: &str) -> Option<String> {
    let mut lines: Vec<&str> = current.lines().collect();
    let ours: Vec<usize> = (0..lines.len())
        .filter(|i| lines[*i].contains(MARKER))
        .collect();
    if ours.len() == 1 && lines[ours[0]] == line {
        return None;
    }
    let at = ours.first().copied().unwrap_or(lines.len());
    for i in ours.iter().rev() {
        lines.remove(*i);
    }
    lines.insert(at.min(lines.len()), line);
    Some(lines.join("\n") + "\n")
}

/// The crontab without our line; None when it had none.
pub fn without_line(current: &str) -> Option<String> {
    if !current.lines().any(|l| l.contains(MARKER)) {
        return None;
    }
    let kept: Vec<&str> = current.lines().filter(|l| !l.contains(MARKER)).collect();
    Some(if kept.is_empty() {
        String::new()
    } else {
        kept.join("\n") + "\n"
    })
}

/// What `sp setup` did or would do about scheduling.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Added(String),
    Replaced(String),
    Unchanged(String),
    Removed,
    Absent,
    /// No crontab on this machine: the text to print instead.
    NoCrontab(String),
}

pub fn install(sync_bin: &Path, dry_run: bool) -> Result<Outcome> {
    let Some(crontab) = crontab_command() else {
        return Ok(Outcome::NoCrontab(alternative(sync_bin)));
    };
    let current = read(&crontab)?;
    let line = line(sync_bin);
    match with_line(&current, &line) {
        None => Ok(Outcome::Unchanged(line)),
        Some(text) => {
            let had = current.lines().any(|l| l.contains(MARKER));
            if !dry_run {
                write(&crontab, &text)?;
            }
            Ok(if had {
                Outcome::Replaced(line)
            } else {
                Outcome::Added(line)
            })
        }
    }
}

pub fn uninstall(dry_run: bool) -> Result<Outcome> {
    let Some(crontab) = crontab_command() else {
        return Ok(Outcome::NoCrontab(String::new()));
    };
    let current = read(&crontab)?;
    match without_line(&current) {
        None => Ok(Outcome::Absent),
        Some(text) => {
            if !dry_run {
                write(&crontab, &text)?;
            }
            Ok(Outcome::Removed)
        }
    }
}

/// Our crontab line if there is one, for `sp doctor`. Err when crontab is missing.
pub fn current_line() -> Result<Option<String>> {
    let crontab = crontab_command().context("no crontab on this machine")?;
    Ok(read(&crontab)?
        .lines()
        .find(|l| l.contains(MARKER))
        .map(str::to_string))
}

fn home() -> PathBuf {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| "/".into())
}

pub fn systemd_dir() -> PathBuf {
    std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| home().join(".config"))
        .join("systemd/user")
}

pub fn launchd_plist() -> PathBuf {
    home()
        .join("Library/LaunchAgents")
        .join(format!("{LAUNCHD_LABEL}.plist"))
}

/// Whether a systemd user manager answers here: `systemctl --user show-environment`, with
/// `$SP_SYSTEMCTL` in place of systemctl when set (tests; a path that does not exist means
/// "no systemd").
pub fn user_systemd() -> bool {
    let systemctl = std::env::var_os("SP_SYSTEMCTL")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| "systemctl".into());
    let mut c = Command::new(systemctl);
    c.args(["--user", "show-environment"]);
    matches!(run(c, None, TIMEOUT), Ok((true, _, _)))
}

/// What to do without a scheduler: nothing here can run sp-sync every minute.
pub fn no_scheduler(sync_bin: &Path) -> String {
    format!(
        "No crontab and no systemd user manager here, so nothing runs sp-sync on a schedule.\n\
The hooks start sp-sync when they need it, so prompts still reach the receiver at once;\n\
replies wait for the next hook. To keep it running, start it from your login script:\n  {} --daemon &\n",
        sync_bin.display()
    )
}

/// The systemd user timer (Linux) or launchd agent (macOS) doing what the cron line does, or
/// [`no_scheduler`] on a Linux without a systemd user manager.
pub fn alternative(sync_bin: &Path) -> String {
    let bin = sync_bin.display();
    let env = env_prefix();
    if !cfg!(target_os = "macos") && !user_systemd() {
        return no_scheduler(sync_bin);
    }
    if cfg!(target_os = "macos") {
        let plist = launchd_plist();
        format!(
            "No crontab here. Save this as {plist}:\n\n\
<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
<!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n\
<plist version=\"1.0\"><dict>\n\
  <key>Label</key><string>{LAUNCHD_LABEL}</string>\n\
  <key>ProgramArguments</key><array><string>{bin}</string></array>\n\
  <key>StartInterval</key><integer>60</integer>\n\
  <key>RunAtLoad</key><true/>\n\
</dict></plist>\n\n\
then enable it with:\n  launchctl load -w {plist}\n",
            plist = plist.display()
        )
    } else {
        let dir = systemd_dir();
        let exec = if env.is_empty() {
            bin.to_string()
        } else {
            format!("/usr/bin/env {env}{bin}")
        };
        format!(
            "No crontab here. Run sp-sync every minute with a systemd user timer instead.\n\
Save this as {dir}/{SYSTEMD_UNIT}.service:\n\n\
[Unit]\nDescription=sessionpipe control sync (sp-sync)\n\n\
[Service]\nType=oneshot\nExecStart={exec}\n\n\
and this as {dir}/{SYSTEMD_UNIT}.timer:\n\n\
[Unit]\nDescription=Run sessionpipe sp-sync every minute\n\n\
[Timer]\nOnBootSec=1min\nOnUnitActiveSec=1min\nAccuracySec=5s\n\n\
[Install]\nWantedBy=timers.target\n\n\
then enable it with:\n  systemctl --user daemon-reload && systemctl --user enable --now {SYSTEMD_UNIT}.timer\n",
            dir = dir.display()
        )
    }
}

/// Whether the printed alternative was installed by the user (for `sp doctor`).
pub fn alternative_installed() -> Option<PathBuf> {
    let timer = systemd_dir().join(format!("{SYSTEMD_UNIT}.timer"));
    let plist = launchd_plist();
    [timer, plist].into_iter().find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;
    const L: &str = "* * * * * /b/sp-sync >/dev/null 2>&1 # sessionpipe: sp-sync every minute";

    #[test]
    fn edits_only_our_line() {
        let mine = "MAILTO=me\n0 * * * * backup\n";
        let added = with_line(mine, L).unwrap();
        assert_eq!(added, format!("MAILTO=me\n0 * * * * backup\n{L}\n"));
        assert_eq!(with_line(&added, L), None);
        let moved = with_line(&added, &L.replace("/b/", "/c/")).unwrap();
        assert_eq!(
            moved,
            format!("MAILTO=me\n0 * * * * backup\n{}\n", L.replace("/b/", "/c/"))
        );
        assert_eq!(without_line(&added).unwrap(), mine);
        assert_eq!(without_line(mine), None);
        assert_eq!(with_line("", L).unwrap(), format!("{L}\n"));
        assert_eq!(without_line(&format!("{L}\n")).unwrap(), "");
    }
}
