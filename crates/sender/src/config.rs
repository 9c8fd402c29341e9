//! The config file (DECISIONS 19): the protocol's `{machine?, sinks:[…]}` plus our `control` tunables.
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub machine: Option<String>,
    #[serde(default)]
    pub sinks: Vec<Sink>,
    #[serde(default)]
    pub control: ControlTunables,
    /// Written by the protocol's reference tool into the same file; not ours to read.
    #[serde(default, rename = "harnesses")]
    _harnesses: Option<serde_json::Value>,
    #[serde(default, rename = "update_check")]
    _update_check: Option<serde_json::Value>,
    #[serde(default, rename = "keep_days")]
    _keep_days: Option<serde_json::Value>,
    /// Where the config came from; set by `load`.
    #[serde(skip)]
    pub path: PathBuf,
    /// Set by a hook that could not load the config and goes on without sinks: no receiver
    /// can answer what it asks now.
    #[serde(skip)]
    pub broken: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sink {
    pub name: String,
    pub url: String,
    #[serde(default)]
    pub tier: u8,
    /// `false`, `true` (the seed's unsigned per-session poll) or `"signed"` (DECISIONS 22).
    #[serde(default)]
    pub control: ControlMode,
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    #[serde(default)]
    pub secret: Option<String>,
    /// Protocol fields the reference tool keeps per sink; accepted, not used.
    #[serde(default, rename = "pii")]
    _pii: Option<serde_json::Value>,
    #[serde(default, rename = "max_tier")]
    _max_tier: Option<serde_json::Value>,
    #[serde(default, rename = "well_known_at")]
    _well_known_at: Option<serde_json::Value>,
    #[serde(default, rename = "paused")]
    _paused: Option<serde_json::Value>,
}

fn away_always<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<bool, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(false),
        Some(s) if s == "always" => Ok(true),
        Some(_) => Err(serde::de::Error::custom(
            "control.away is \"always\" or absent (`sp away on|off` switches it otherwise)",
        )),
    }
}

/// A sink's control mode. Only a signed sink's commands are verified against keys enrolled at
/// this machine's terminal; an unsigned one trusts the receiver's bearer token (the seed's
/// contract, kept for the receivers that speak only it; `sp doctor` warns).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ControlMode {
    #[default]
    Off,
    Unsigned,
    Signed,
}

impl ControlMode {
    pub fn is_on(self) -> bool {
        self != ControlMode::Off
    }
    /// The value as the config writes it.
    pub fn to_json(self) -> serde_json::Value {
        match self {
            ControlMode::Off => false.into(),
            ControlMode::Unsigned => true.into(),
            ControlMode::Signed => "signed".into(),
        }
    }
}

impl std::fmt::Display for ControlMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ControlMode::Off => "off",
            ControlMode::Unsigned => "on (unsigned)",
            ControlMode::Signed => "signed",
        })
    }
}

impl<'de> Deserialize<'de> for ControlMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::Bool(false) | serde_json::Value::Null => Ok(ControlMode::Off),
            serde_json::Value::Bool(true) => Ok(ControlMode::Unsigned),
            serde_json::Value::String(s) if s == "signed" => Ok(ControlMode::Signed),
            _ => Err(serde::de::Error::custom(
                "control is false, true (unsigned) or \"signed\"",
            )),
        }
    }
}

/// `control.start_limit` (DECISIONS 39).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StartLimit {
    pub running: u32,
    pub per_hour: u32,
}

impl StartLimit {
    pub const DEFAULT: StartLimit = StartLimit {
        running: 2,
        per_hour: 10,
    };
    /// The largest values a config may set: a start is a whole agent run.
    pub const MAX_RUNNING: u32 = 10;
    pub const MAX_PER_HOUR: u32 = 100;
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ControlTunables {
    #[serde(default)]
    pub permission_wait_s: Option<u64>,
    /// Signed control's folder allowlist (docs/protocol.md#control-5 step 6): when set, a command acts only
    /// on a session whose own folder is inside one of these absolute paths.
    #[serde(default)]
    pub folders: Option<Vec<PathBuf>>,
    /// DECISIONS 36's opt-out, off by default: `true` lets a signed allow or start act on the
    /// page's day key alone, without a passkey touch over that command; then any script the
    /// receiver serves the page can allow.
    #[serde(default)]
    pub allow_with_day_key: bool,
    /// DECISIONS 39: how many sessions a verified `start` may have running at once and
    /// start in an hour (defaults [`StartLimit::DEFAULT`]); beyond, refused `start_limit`.
    #[serde(default)]
    pub start_limit: Option<StartLimit>,
    /// `"always"`: the person counts as away for good (DECISIONS 27).
    #[serde(default, deserialize_with = "away_always")]
    pub away: bool,
    #[serde(default)]
    pub wait_max_s: Option<u64>,
    #[serde(default)]
    pub live_hours: Option<f64>,
    #[serde(default)]
    pub harness: BTreeMap<String, HarnessTunables>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct HarnessTunables {
    #[serde(default)]
    pub permission_wait_s: Option<u64>,
}

impl Config {
    /// Reads the config at the resolved path. A missing file is an empty config (no sinks).
    pub fn load() -> Result<Config> {
        Self::load_from(&crate::paths::config_file())
    }

    pub fn load_from(path: &Path) -> Result<Config> {
        // DECISIONS 24: nobody else may be able to change which receivers we trust.
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if let Some(t) = crate::files::check_config_dir(dir)
                .with_context(|| format!("config {}", path.display()))?
            {
                crate::logging::info(&t.0);
            }
        }
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Config {
                    path: path.to_path_buf(),
                    ..Config::default()
                })
            }
            Err(e) => {
                return Err(e).with_context(|| format!("cannot read config {}", path.display()))
            }
        };
        let mut config: Config = serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "config {} is not valid: {} (shape: {{\"sinks\":[{{\"name\",\"url\",\"tier\",\"control\",\"token_file\"}}],\"control\":{{…}}}})",
                path.display(),
                json_error_in_words(&e, &text)
            )
        })?;
        config.path = path.to_path_buf();
        config.validate()?;
        if config.sinks.iter().any(|s| s.token.is_some()) {
            check_private(path, "config")?;
        } else {
            tighten_config(path)?;
        }
        for sink in &config.sinks {
            if let Some(f) = &sink.token_file {
                check_private(f, "token file")?;
            }
        }
        Ok(config)
    }

    fn validate(&self) -> Result<()> {
        let p = self.path.display();
        let mut names = std::collections::HashSet::new();
        for s in &self.sinks {
            if s.name.is_empty()
                || s.name.len() > 40
                || !s
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
            {
                bail!(
                    "config {p}: sink name {:?} must be 1-40 of a-z, 0-9, '-', '_'",
                    s.name
                );
            }
            if !names.insert(s.name.as_str()) {
                bail!(
                    "config {p}: two sinks are named {:?}; give each a unique name",
                    s.name
                );
            }
            if s.tier > 3 {
                bail!(
                    "config {p}: sink {:?} has tier {}; tiers are 0 to 3",
                    s.name,
                    s.tier
                );
            }
            check_url(&s.url).with_context(|| format!("config {p}: sink {:?}", s.name))?;
            if s.token.is_some() && s.token_file.is_some() {
                bail!(
                    "config {p}: sink {:?} has both token and token_file; keep one",
                    s.name
                );
            }
            if s.control.is_on() && s.token.is_none() && s.token_file.is_none() {
                bail!("config {p}: sink {:?} has control on but no token; add \"token\" or \"token_file\"", s.name);
            }
        }
        if let Some(folders) = &self.control.folders {
            if let Some(f) = folders.iter().find(|f| !f.is_absolute()) {
                bail!(
                    "config {p}: control.folders has {:?}; use absolute paths",
                    f.display().to_string()
                );
            }
        }
        if let Some(l) = self.control.start_limit {
            if !(1..=StartLimit::MAX_RUNNING).contains(&l.running) {
                bail!(
                    "config {p}: control.start_limit.running is {}; use 1 to {} (sessions started \
                     from a receiver running at once)",
                    l.running,
                    StartLimit::MAX_RUNNING
                );
            }
            if !(1..=StartLimit::MAX_PER_HOUR).contains(&l.per_hour) {
                bail!(
                    "config {p}: control.start_limit.per_hour is {}; use 1 to {} (starts in any hour)",
                    l.per_hour,
                    StartLimit::MAX_PER_HOUR
                );
            }
        }
        if let Some(w) = self.control.wait_max_s {
            if !(1..=60).contains(&w) {
                bail!("config {p}: control.wait_max_s is {w}; use 1 to 60");
            }
        }
        if let Some(h) = self.control.live_hours {
            if h.is_nan() || h <= 0.0 {
                bail!("config {p}: control.live_hours must be a positive number of hours");
            }
        }
        Ok(())
    }

    pub fn control_sinks(&self) -> impl Iterator<Item = &Sink> {
        self.sinks.iter().filter(|s| s.control.is_on())
    }

    /// How long `harness`'s permission hook waits for an answer (DECISIONS 10): per harness
    /// beats global beats the built-in default of its row in the capability table. 0 for a
    /// harness whose hook never waits, whatever the config says.
    pub fn permission_wait_s(&self, harness: crate::harness::Harness) -> u64 {
        let default = harness.default_permission_wait_s();
        if default == 0 {
            return 0;
        }
        self.control
            .harness
            .get(harness.name())
            .and_then(|h| h.permission_wait_s)
            .or(self.control.permission_wait_s)
            .unwrap_or(default)
    }

    pub fn live_ms(&self) -> i64 {
        (self.control.live_hours.unwrap_or(24.0) * 3_600_000.0) as i64
    }
}

/// This machine's name as the receiver shows it: the config's `machine`, else the host name
/// (the one `sp pair` shows), else `None`.
pub fn machine_name(config_machine: Option<&str>) -> Option<String> {
    config_machine
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(String::from)
        .or_else(host_name)
}

/// The host name from /etc/hostname, else gethostname(2).
pub fn host_name() -> Option<String> {
    let from_file = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty());
    from_file.or_else(|| {
        let mut buf = [0u8; 256];
        // SAFETY: buf is writable for its whole length, and its last byte stays 0.
        let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
        let end = buf.iter().position(|&b| b == 0).unwrap_or(0);
        (rc == 0 && end > 0).then(|| String::from_utf8_lossy(&buf[..end]).into_owned())
    })
}

impl Sink {
    /// The bearer token, from the config or the token file. Never logged.
    pub fn bearer(&self) -> Result<String> {
        if let Some(t) = &self.token {
            return Ok(t.trim().to_string());
        }
        if let Some(f) = &self.token_file {
            let t = std::fs::read_to_string(f).with_context(|| {
                format!(
                    "sink {:?}: cannot read token file {}",
                    self.name,
                    f.display()
                )
            })?;
            return Ok(t.trim().to_string());
        }
        bail!("sink {:?} has no token", self.name)
    }
}

/// serde's text for a value of the wrong type quotes the value ("invalid type: string \"…\",
/// expected u8"), and a value in a config may be a token put in the wrong place: keep only
/// the key, what it expects in words, and where.
fn json_error_in_words(e: &serde_json::Error, text: &str) -> String {
    let msg = e.to_string();
    let at = format!("line {} column {}", e.line(), e.column());
    for what in ["invalid type", "invalid value", "invalid length"] {
        if let Some(rest) = msg.strip_prefix(what).and_then(|r| r.strip_prefix(": ")) {
            let key = key_before(text, e.line(), e.column())
                .map(|k| format!("\"{k}\" "))
                .unwrap_or_default();
            return match rest.rsplit_once(", expected ") {
                Some((_, expected)) => {
                    let expected = expected.split(" at line ").next().unwrap_or(expected);
                    format!("{key}should be {} ({at})", in_words(expected))
                }
                None => format!("{key}has an {what} ({at})"),
            };
        }
    }
    format!("fix the JSON: {msg}")
}

/// serde's name of an expected type, as a person says it.
fn in_words(expected: &str) -> String {
    match expected {
        "u8" => "a whole number from 0 to 255".into(),
        "u16" | "u32" | "u64" | "usize" => "a whole number, 0 or more".into(),
        "i8" | "i16" | "i32" | "i64" => "a whole number".into(),
        "f32" | "f64" => "a number".into(),
        "a boolean" => "true or false".into(),
        other => other.into(),
    }
}

/// The last `"key":` at or before line `line`, column `col` (1-based) of `text`.
fn key_before(text: &str, line: usize, col: usize) -> Option<String> {
    let mut upto = String::new();
    for (i, l) in text.lines().enumerate() {
        if i + 1 == line {
            upto.push_str(l.get(..col.min(l.len()))?);
            break;
        }
        upto.push_str(l);
        upto.push('\n');
    }
    let end = upto.rfind("\":")?;
    let before = &upto[..end];
    let start = before.rfind('"')?;
    Some(before[start + 1..].to_string()).filter(|k| k.len() <= 64)
}

/// `https://` anywhere; `http://` only to loopback, where nothing crosses a network
/// (`spwire::url` is the one reading of a URL's origin).
pub fn check_url(url: &str) -> Result<()> {
    match spwire::url::check_sink_url(url) {
        Ok(_) => Ok(()),
        Err(e) => bail!("url {url:?} {e}"),
    }
}

#[cfg(unix)]
fn check_private(path: &Path, what: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot read {what} {}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        bail!(
            "{what} {} holds a token and is readable by others (mode {:o}); fix with: chmod 600 {}",
            path.display(),
            mode,
            path.display()
        );
    }
    Ok(())
}

/// A config without a token in it that is looser than 0600: ours is tightened (logged once);
/// one that others can write and that we cannot tighten is refused.
#[cfg(unix)]
fn tighten_config(path: &Path) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot read config {}", path.display()))?;
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 == 0 {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if meta.uid() == unsafe { libc::geteuid() } {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("cannot chmod 600 config {}", path.display()))?;
        crate::logging::info(&format!(
            "tightened {} from mode {mode:o} to 600",
            path.display()
        ));
    } else if mode & 0o022 != 0 {
        bail!(
            "config {} can be changed by other users (mode {mode:o}, owner uid {}); refused: \
             fix with chown and chmod 600, or use a config of your own",
            path.display(),
            meta.uid()
        );
    }
    Ok(())
}

#[cfg(not(unix))]
fn tighten_config(_: &Path) -> Result<()> {
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_: &Path, _: &str) -> Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_limit_defaults_to_2_and_10_and_a_bad_one_says_how_to_fix_it() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.json");
        let load = |control: &str| {
            std::fs::write(&p, format!(r#"{{"sinks":[],"control":{control}}}"#)).unwrap();
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
            Config::load_from(&p)
        };
        assert_eq!(load("{}").unwrap().control.start_limit, None);
        assert_eq!(
            load(r#"{"start_limit":{"running":1,"per_hour":3}}"#)
                .unwrap()
                .control
                .start_limit,
            Some(StartLimit {
                running: 1,
                per_hour: 3
            })
        );
        for (bad, says) in [
            (
                r#"{"start_limit":{"running":0,"per_hour":3}}"#,
                "control.start_limit.running is 0; use 1 to 10",
            ),
            (
                r#"{"start_limit":{"running":2,"per_hour":1000}}"#,
                "control.start_limit.per_hour is 1000; use 1 to 100",
            ),
            (
                r#"{"start_limit":{"running":2}}"#,
                "missing field `per_hour`",
            ),
            (
                r#"{"start_limit":{"running":2,"per_hour":3,"daily":9}}"#,
                "unknown field `daily`",
            ),
        ] {
            let e = load(bad).unwrap_err();
            assert!(format!("{e:#}").contains(says), "{bad}: {e:#}");
        }
    }

    #[test]
    fn control_modes_and_away_as_the_loader_reads_them() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.json");
        let load = |text: &str| {
            std::fs::write(&p, text).unwrap();
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
            Config::load_from(&p)
        };
        let c = load(r#"{"sinks":[{"name":"a","url":"https://r.example","control":"signed","token":"t"},{"name":"b","url":"https://r.example","control":true,"token":"t"},{"name":"c","url":"https://r.example"}],"control":{"away":"always"}}"#).unwrap();
        let modes: Vec<ControlMode> = c.sinks.iter().map(|s| s.control).collect();
        assert_eq!(
            modes,
            [ControlMode::Signed, ControlMode::Unsigned, ControlMode::Off]
        );
        assert!(c.control.away);
        let e = load(
            r#"{"sinks":[{"name":"a","url":"https://r.example","control":"yes","token":"t"}]}"#,
        )
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("control is false, true (unsigned) or \"signed\""),
            "{e:#}"
        );
        let e = load(r#"{"sinks":[{"name":"a","url":"https://r.example","control":"signed"}]}"#)
            .unwrap_err();
        assert!(
            format!("{e:#}").contains("has control on but no token"),
            "{e:#}"
        );
        let e = load(r#"{"sinks":[],"control":{"away":"sometimes"}}"#).unwrap_err();
        assert!(
            format!("{e:#}").contains("control.away is \"always\""),
            "{e:#}"
        );
    }

    #[test]
    fn urls() {
        assert!(check_url("https://example.com/x").is_ok());
        assert!(check_url("http://127.0.0.1:8080").is_ok());
        assert!(check_url("http://localhost/x").is_ok());
        assert!(check_url("http://[::1]:9/").is_ok());
        assert!(check_url("http://example.com").is_err());
        assert!(check_url("http://10.0.0.1").is_err());
        assert!(check_url("http://127.0.0.1.evil.com/").is_err());
        assert!(check_url("http://127.0.0.1:80@evil.com/").is_err());
        assert!(check_url("http://[::1]@evil.com/").is_err());
        assert!(check_url("ftp://x").is_err());
    }

    #[test]
    fn waits() {
        let c: Config = serde_json::from_str(
            r#"{"sinks":[],"control":{"permission_wait_s":60,"harness":{"codex":{"permission_wait_s":20}}}}"#,
        )
        .unwrap();
        use crate::harness::Harness;
        assert_eq!(c.permission_wait_s(Harness::Codex), 20);
        assert_eq!(c.permission_wait_s(Harness::ClaudeCode), 60);
        assert_eq!(c.permission_wait_s(Harness::GeminiCli), 0);
        assert_eq!(
            Config::default().permission_wait_s(Harness::ClaudeCode),
            120
        );
        assert_eq!(Config::default().permission_wait_s(Harness::Codex), 30);
    }
}
