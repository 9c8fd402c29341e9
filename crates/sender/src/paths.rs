//! One path-resolution rule: environment variable, then XDG default, then the home default.
use std::path::PathBuf;

/// Text for `--help`: every environment variable and file the binaries use.
pub const ENV_HELP: &str = "\
ENVIRONMENT:
  SESSIONPIPE_CONFIG     config file   (default: $XDG_CONFIG_HOME/sessionpipe/config.json,
                                        else ~/.config/sessionpipe/config.json)
  SESSIONPIPE_STATE_DIR  state folder  (default: $XDG_STATE_HOME/sessionpipe/,
                                        else ~/.local/state/sessionpipe/)
                         holds control.db (SQLite queue), sp.log, sp-sync.lock
  SESSIONPIPE_LOG        log level: error, warn, info (default), debug";

fn home() -> PathBuf {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"))
}

fn from_env(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// `$SESSIONPIPE_CONFIG`, else `$XDG_CONFIG_HOME/sessionpipe/config.json`, else `~/.config/sessionpipe/config.json`.
pub fn config_file() -> PathBuf {
    from_env("SESSIONPIPE_CONFIG").unwrap_or_else(|| {
        from_env("XDG_CONFIG_HOME")
            .unwrap_or_else(|| home().join(".config"))
            .join("sessionpipe")
            .join("config.json")
    })
}

/// `$SESSIONPIPE_STATE_DIR`, else `$XDG_STATE_HOME/sessionpipe`, else `~/.local/state/sessionpipe`.
pub fn state_dir() -> PathBuf {
    from_env("SESSIONPIPE_STATE_DIR").unwrap_or_else(|| {
        from_env("XDG_STATE_HOME")
            .unwrap_or_else(|| home().join(".local").join("state"))
            .join("sessionpipe")
    })
}

pub fn database_file() -> PathBuf {
    state_dir().join("control.db")
}

pub fn log_file() -> PathBuf {
    state_dir().join("sp.log")
}

pub fn sync_lock_file() -> PathBuf {
    state_dir().join("sp-sync.lock")
}

/// Reads a path [`tilde`] wrote: `~` back to the home directory.
pub fn untilde(path: &str) -> PathBuf {
    match path.strip_prefix('~') {
        Some("") => home(),
        Some(rest) if rest.starts_with('/') => home().join(&rest[1..]),
        _ => PathBuf::from(path),
    }
}

/// Writes `~` for the home directory, as the protocol wants for `session.cwd`.
pub fn tilde(path: &str) -> String {
    let home = home();
    let home = home.to_string_lossy();
    if home.len() > 1 {
        if path == home {
            return "~".into();
        }
        if let Some(rest) = path.strip_prefix(home.as_ref()) {
            if rest.starts_with('/') {
                return format!("~{rest}");
            }
        }
    }
    path.to_string()
}
