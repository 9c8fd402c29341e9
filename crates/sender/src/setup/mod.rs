//! Registering our hooks with each harness: where its file is, how it nests hooks, which
//! unit its timeouts use, all read from the harness's row of the capability table
//! ([`crate::harness::caps::CAPS`]); both `sp setup` and the `hooks/<harness>/` snippets are
//! generated from it, so they cannot drift apart.
pub(crate) mod cron;
pub mod json;

use crate::config::Config;
use crate::harness::{Harness, SP_PERMISSION};
use anyhow::{Context, Result};
use json::{Changes, Entry, Layout, Style};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Ends a backup's name: `settings.json` → `settings.json.sp-backup`.
pub const BACKUP_SUFFIX: &str = ".sp-backup";
/// First line of a file that is wholly ours (the OpenCode plugin).
pub const PLUGIN_MARKER: &str = "// sessionpipe:";
/// The bin folder written into the checked-in `hooks/<harness>/` snippets.
pub const SNIPPET_BIN_DIR: &str = "/home/you/.local/bin";

use crate::harness::caps::{Dir, Form, Skeleton, EVENT_TIMEOUT_S, PERMISSION_MARGIN_S};
pub use crate::harness::caps::{Format, Unit};

/// Where and how one harness takes our hooks.
#[derive(Debug, Clone)]
pub struct Target {
    pub harness: Harness,
    /// The harness's own folder; that it exists is how we tell the harness is installed.
    pub dir: PathBuf,
    pub file: PathBuf,
    pub format: Format,
    form: Form,
    timeout_key: &'static str,
    pub unit: Unit,
    /// Top-level fields of a file we create.
    skeleton: Skeleton,
    /// Said after registering: what the user must still do, or what to know.
    pub note: Option<&'static str>,
}

fn home() -> PathBuf {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| "/".into())
}

fn env_dir(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| home().join(default))
}

fn skeleton(s: Skeleton) -> Value {
    match s {
        Skeleton::Empty => json!({}),
        Skeleton::Version1 => json!({"version": 1}),
        Skeleton::VersionV1 => json!({"version": "v1"}),
    }
}

/// The registration of `h`, from its row of the capability table.
pub fn target(h: Harness) -> Target {
    let r = &h.caps().registration;
    let dir = match r.dir {
        Dir::Env(var, default) => env_dir(var, default),
        Dir::Home(sub) => home().join(sub),
        Dir::XdgConfig(sub) => std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| home().join(".config"))
            .join(sub),
    };
    Target {
        harness: h,
        file: dir.join(r.file),
        dir,
        format: r.format,
        form: r.form,
        timeout_key: r.timeout_key,
        unit: r.unit,
        skeleton: r.skeleton,
        note: r.note,
    }
}

pub fn targets() -> Vec<Target> {
    Harness::ALL.iter().map(|h| target(*h)).collect()
}

/// How long the permission hook may wait for this harness (DECISIONS 10); 0 when it never waits.
pub fn permission_wait_s(h: Harness, config: &Config) -> u64 {
    config.permission_wait_s(h)
}

/// The harness timeout for one hook event, in seconds.
pub fn timeout_s(h: Harness, event: &str, binary: &str, config: &Config) -> u64 {
    if binary == SP_PERMISSION {
        return permission_wait_s(h, config) + PERMISSION_MARGIN_S;
    }
    h.caps()
        .event_timeouts
        .iter()
        .find(|(e, _)| *e == event)
        .map_or(EVENT_TIMEOUT_S, |(_, s)| *s)
}

/// Our entries for this harness, pointing at the binaries in `bin_dir`.
pub fn entries(t: &Target, bin_dir: &Path, config: &Config) -> Vec<Entry> {
    let h = t.harness;
    h.hook_events()
        .iter()
        .map(|(event, binary)| {
            let secs = timeout_s(h, event, binary, config);
            let n = t.unit.of(secs);
            let path = bin_dir.join(binary);
            let line = format!(
                "{} --harness {}",
                json::shell_quote(&path.to_string_lossy()),
                h.name()
            );
            let mut m = Map::new();
            match t.form {
                Form::Exec => {
                    m.insert("type".into(), "command".into());
                    m.insert("command".into(), path.to_string_lossy().into());
                    m.insert("args".into(), json!(["--harness", h.name()]));
                }
                Form::Command => {
                    m.insert("type".into(), "command".into());
                    m.insert("command".into(), line.into());
                }
                Form::NamedCommand => {
                    m.insert("type".into(), "command".into());
                    m.insert("name".into(), format!("sessionpipe {binary}").into());
                    m.insert("command".into(), line.into());
                }
                Form::Bare => {
                    m.insert("command".into(), line.into());
                }
                Form::Bash => {
                    m.insert("type".into(), "command".into());
                    m.insert("bash".into(), line.into());
                }
                Form::KiroItem => {
                    m.insert("name".into(), format!("sessionpipe {event}").into());
                    m.insert("trigger".into(), (*event).into());
                    m.insert("action".into(), json!({"type": "command", "command": line}));
                }
            }
            if !t.timeout_key.is_empty() {
                m.insert(t.timeout_key.into(), n.into());
            }
            if t.form == Form::KiroItem {
                m.insert("enabled".into(), true.into());
            }
            let matcher = h.hook_matcher(event).map(str::to_string);
            if t.form == Form::KiroItem {
                if let Some(mt) = &matcher {
                    m.insert("matcher".into(), mt.clone().into());
                }
            }
            Entry {
                event: (*event).to_string(),
                binary,
                matcher,
                handler: Value::Object(m),
                timeout: t.unit.label(secs),
            }
        })
        .collect()
}

/// The OpenCode plugin: hands the events we listen for to `sp-event --harness opencode`
/// (one run per event, in order, each capped so OpenCode never waits long), in the shape
/// the adapter reads (src/harness/opencode.rs), with the server's URL for sp-sync's replies.
/// Its code is the checked-in hooks/opencode/sessionpipe.js; only its `SP_EVENT`, `EVENTS`
/// and `TIMEOUT_MS` lines are written here, from the registration table.
pub fn opencode_plugin(bin_dir: &Path) -> String {
    let events: Vec<String> = Harness::OpenCode
        .hook_events()
        .iter()
        .map(|(e, _)| serde_json::to_string(e).expect("a string serialises"))
        .collect();
    let bin = serde_json::to_string(&bin_dir.join(crate::harness::SP_EVENT).to_string_lossy())
        .expect("a string serialises");
    let values = [
        ("SP_EVENT", bin),
        ("EVENTS", format!("new Set([{}])", events.join(", "))),
        ("TIMEOUT_MS", (EVENT_TIMEOUT_S * 1000).to_string()),
    ];
    OPENCODE_PLUGIN
        .lines()
        .map(|line| {
            let set = values.iter().find_map(|(name, value)| {
                line.starts_with(&format!("const {name} = "))
                    .then(|| format!("const {name} = {value};"))
            });
            set.unwrap_or_else(|| line.to_string()) + "\n"
        })
        .collect()
}

/// The plugin as `sp hooks print opencode` writes it for [`SNIPPET_BIN_DIR`].
const OPENCODE_PLUGIN: &str = include_str!("../../../../hooks/opencode/sessionpipe.js");

/// The text of `hooks/<harness>/<file>`: what registration writes into an empty file.
pub fn snippet(t: &Target, bin_dir: &Path, config: &Config) -> String {
    match t.format {
        Format::Plugin => opencode_plugin(bin_dir),
        Format::Json(layout) => {
            let mut v = skeleton(t.skeleton);
            json::merge(&mut v, layout, &entries(t, bin_dir, config))
                .expect("a skeleton is an object");
            Style::default().render(&v)
        }
    }
}

/// The file name a snippet is checked in under: `hooks/<harness>/<name>`.
pub fn snippet_name(t: &Target) -> String {
    t.file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

pub fn backup_path(file: &Path) -> PathBuf {
    let mut s = file.as_os_str().to_owned();
    s.push(BACKUP_SUFFIX);
    PathBuf::from(s)
}

/// What registration will do to one harness's file.
#[derive(Debug, Clone)]
pub enum Action {
    /// The harness's folder does not exist.
    NotInstalled,
    Unchanged,
    /// Write `text`; first save `backup` (the bytes before) beside the file when given.
    Write {
        text: String,
        created: bool,
        backup: Option<Vec<u8>>,
    },
    /// Put the pre-install bytes back from the backup, then delete the backup.
    Restore {
        bytes: Vec<u8>,
    },
    /// Uninstall of a file edited since install: write `text` (the file as it is, less our
    /// entries) and delete the backup, which no longer matches it (putting it back would undo
    /// the edits).
    Strip {
        text: String,
    },
    /// The file holds nothing but what we created: delete it.
    Delete,
    /// The file cannot be read as the harness's format; it is left as it is.
    Malformed(String),
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub target: Target,
    /// The real file (a symlink resolved).
    pub path: PathBuf,
    pub action: Action,
    pub changes: Changes,
    /// OpenCode: what to do with the dependency stub beside the plugin ([`opencode_stub`]).
    pub stub: Stub,
}

/// What registration does to OpenCode's dependency stub: `node_modules/` and a
/// `package-lock.json` naming `@opencode-ai/plugin` in its config folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stub {
    None,
    Create,
    Remove,
}

/// The `package-lock.json` of the stub. OpenCode 1.18 installs `@opencode-ai/plugin` into each
/// config folder at every start (`Npm.install`), and once any plugin is configured its first
/// request waits for that install: offline, npm fails only after about 70 s. It installs
/// nothing when `node_modules/` exists and `package-lock.json`'s root lists every package it
/// would add. Our plugin imports nothing from that package, so a config folder that has no
/// `node_modules/`, `package.json` or `package-lock.json` yet gets this lock and an empty
/// `node_modules/`; a folder with any of them is OpenCode's (or yours) and left as it is.
pub fn opencode_stub_lock() -> String {
    let lock = json!({
        "name": "opencode",
        "lockfileVersion": 3,
        "requires": true,
        "packages": {"": {"dependencies": {"@opencode-ai/plugin": "*"}}}
    });
    format!(
        "{}\n",
        serde_json::to_string_pretty(&lock).expect("a lock serialises")
    )
}

/// The stub's paths in OpenCode's config folder: (node_modules, package-lock.json, package.json).
fn stub_paths(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    (
        dir.join("node_modules"),
        dir.join("package-lock.json"),
        dir.join("package.json"),
    )
}

/// Whether install should create the stub, or uninstall remove it (only when it is still
/// exactly ours: the lock byte for byte, and `node_modules/` empty).
pub fn opencode_stub(dir: &Path, install: bool) -> Stub {
    let (modules, lock, package) = stub_paths(dir);
    let exists = |p: &Path| p.symlink_metadata().is_ok();
    if install {
        if !exists(&modules) && !exists(&lock) && !exists(&package) {
            return Stub::Create;
        }
        return Stub::None;
    }
    let ours = std::fs::read(&lock).is_ok_and(|b| b == opencode_stub_lock().as_bytes())
        && !exists(&package)
        && modules.symlink_metadata().is_ok_and(|m| m.is_dir())
        && std::fs::read_dir(&modules).is_ok_and(|mut d| d.next().is_none());
    if ours {
        Stub::Remove
    } else {
        Stub::None
    }
}

fn apply_stub(dir: &Path, stub: Stub) -> Result<()> {
    let (modules, lock, _) = stub_paths(dir);
    match stub {
        Stub::None => Ok(()),
        Stub::Create => {
            std::fs::create_dir(&modules)
                .with_context(|| format!("cannot create {}", modules.display()))?;
            json::write_atomic(&lock, opencode_stub_lock().as_bytes(), None)
        }
        Stub::Remove => {
            std::fs::remove_file(&lock)
                .with_context(|| format!("cannot remove {}", lock.display()))?;
            std::fs::remove_dir(&modules)
                .with_context(|| format!("cannot remove {}", modules.display()))
        }
    }
}

fn read_optional(path: &Path) -> Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// The JSON with every entry of ours taken out.
fn stripped(path: &Path, text: &str, layout: Layout) -> Result<Value> {
    let mut v = json::parse(path, text)?;
    json::merge(&mut v, layout, &[])
        .with_context(|| format!("{}: unexpected layout", path.display()))?;
    Ok(v)
}

fn has_ours(path: &Path, text: &str, layout: Layout) -> bool {
    json::parse(path, text)
        .ok()
        .and_then(|mut v| json::merge(&mut v, layout, &[]).ok())
        .is_some_and(|c| !c.removed.is_empty())
}

/// Plans registering (`install`) or removing (`!install`) our hooks for one harness.
pub fn plan(t: &Target, bin_dir: &Path, config: &Config, install: bool) -> Plan {
    let path = json::resolve(&t.file);
    let mut plan = Plan {
        target: t.clone(),
        path: path.clone(),
        action: Action::Unchanged,
        changes: Changes::default(),
        stub: Stub::None,
    };
    if !t.dir.is_dir() {
        plan.action = Action::NotInstalled;
        return plan;
    }
    let existing = match read_optional(&path) {
        Ok(e) => e,
        Err(e) => {
            plan.action = Action::Malformed(format!("{e:#}"));
            return plan;
        }
    };
    match t.format {
        Format::Plugin => {
            plan_plugin(&mut plan, existing, bin_dir, install);
            // Only beside a plugin of ours.
            if !matches!(plan.action, Action::Malformed(_)) {
                plan.stub = opencode_stub(&t.dir, install);
            }
        }
        Format::Json(layout) => {
            if let Err(e) = plan_json(&mut plan, layout, existing, bin_dir, config, install) {
                plan.action = Action::Malformed(format!("{e:#}"));
                plan.changes = Changes::default();
            }
        }
    }
    plan
}

fn plan_plugin(plan: &mut Plan, existing: Option<Vec<u8>>, bin_dir: &Path, install: bool) {
    let ours = |b: &[u8]| b.starts_with(PLUGIN_MARKER.as_bytes());
    let what = "sessionpipe plugin".to_string();
    match (install, existing) {
        (true, None) => {
            plan.action = Action::Write {
                text: opencode_plugin(bin_dir),
                created: true,
                backup: None,
            };
            plan.changes.added.push(what);
        }
        (true, Some(b)) if !ours(&b) => {
            plan.action = Action::Malformed(format!(
                "{} exists and is not ours; left untouched",
                plan.path.display()
            ));
        }
        (true, Some(b)) => {
            let text = opencode_plugin(bin_dir);
            if b != text.as_bytes() {
                plan.action = Action::Write {
                    text,
                    created: false,
                    backup: None,
                };
                plan.changes.updated.push(what);
            }
        }
        (false, Some(b)) if ours(&b) => {
            plan.action = Action::Delete;
            plan.changes.removed.push(what);
        }
        (false, _) => {}
    }
}

fn plan_json(
    plan: &mut Plan,
    layout: Layout,
    existing: Option<Vec<u8>>,
    bin_dir: &Path,
    config: &Config,
    install: bool,
) -> Result<()> {
    let t = &plan.target;
    let path = plan.path.clone();
    let want = if install {
        entries(t, bin_dir, config)
    } else {
        Vec::new()
    };
    let text = match &existing {
        Some(b) => Some(String::from_utf8(b.clone()).map_err(|_| {
            anyhow::anyhow!("{} is not UTF-8 text; left untouched", path.display())
        })?),
        None => None,
    };
    let (mut root, style) = match &text {
        Some(s) => (json::parse(&path, s)?, Style::detect(s)),
        None if install => (skeleton(t.skeleton), Style::default()),
        None => return Ok(()),
    };
    let changes = json::merge(&mut root, layout, &want).with_context(|| {
        format!(
            "{} has a layout we do not know; left untouched",
            path.display()
        )
    })?;
    if changes.is_empty() {
        return Ok(());
    }
    plan.changes = changes;
    let backup = backup_path(&path);
    let old_backup = read_optional(&backup)?.and_then(|b| String::from_utf8(b).ok());
    if install {
        // Keep an older backup when it differs from the file only in our entries: it is the
        // file as it was before we first touched it, which `--uninstall` can put back exactly.
        let keep_old = match (&old_backup, &text) {
            (Some(old), Some(cur)) => {
                matches!((stripped(&backup, old, layout), stripped(&path, cur, layout)), (Ok(a), Ok(b)) if a == b)
            }
            _ => false,
        };
        plan.action = Action::Write {
            text: style.render(&root),
            created: existing.is_none(),
            backup: if keep_old { None } else { existing },
        };
        return Ok(());
    }
    if let Some(old) = &old_backup {
        if !has_ours(&backup, old, layout) && json::parse(&backup, old).is_ok_and(|v| v == root) {
            plan.action = Action::Restore {
                bytes: old.clone().into_bytes(),
            };
            return Ok(());
        }
    }
    if old_backup.is_none() && root == skeleton(t.skeleton) {
        plan.action = Action::Delete;
        return Ok(());
    }
    if old_backup.is_some() {
        plan.action = Action::Strip {
            text: style.render(&root),
        };
        return Ok(());
    }
    plan.action = Action::Write {
        text: style.render(&root),
        created: false,
        backup: None,
    };
    Ok(())
}

/// Carries out a plan.
pub fn apply(plan: &Plan) -> Result<()> {
    apply_action(plan)?;
    apply_stub(&plan.target.dir, plan.stub)
}

fn apply_action(plan: &Plan) -> Result<()> {
    let path = &plan.path;
    match &plan.action {
        Action::NotInstalled | Action::Unchanged | Action::Malformed(_) => Ok(()),
        Action::Write { text, backup, .. } => {
            if let Some(bytes) = backup {
                json::write_atomic(&backup_path(path), bytes, None)?;
            }
            json::write_atomic(path, text.as_bytes(), None)
        }
        Action::Restore { bytes } => {
            json::write_atomic(path, bytes, None)?;
            std::fs::remove_file(backup_path(path))
                .with_context(|| format!("cannot remove {}", backup_path(path).display()))
        }
        Action::Strip { text } => {
            json::write_atomic(path, text.as_bytes(), None)?;
            std::fs::remove_file(backup_path(path))
                .with_context(|| format!("cannot remove {}", backup_path(path).display()))
        }
        Action::Delete => {
            std::fs::remove_file(path)
                .with_context(|| format!("cannot remove {}", path.display()))?;
            // A folder we made for our own file (Copilot's and Kiro's hooks/) goes with it.
            if let Some(parent) = path
                .parent()
                .filter(|p| *p != plan.target.dir && p.starts_with(&plan.target.dir))
            {
                let _ = std::fs::remove_dir(parent);
            }
            Ok(())
        }
    }
}

/// What `sp doctor` finds about one harness's registration.
#[derive(Debug, Clone)]
pub enum Registration {
    NotInstalled,
    Malformed(String),
    /// Our hooks as they are: `changes` is what an install would do (empty = up to date).
    Found {
        changes: Changes,
        programs: Vec<PathBuf>,
    },
}

/// Compares what is registered with what `bin_dir` and `config` call for.
pub fn inspect(t: &Target, bin_dir: &Path, config: &Config) -> Registration {
    let p = plan(t, bin_dir, config, true);
    match p.action {
        Action::NotInstalled => return Registration::NotInstalled,
        Action::Malformed(m) => return Registration::Malformed(m),
        _ => {}
    }
    let mut programs = Vec::new();
    if let Ok(text) = std::fs::read_to_string(&p.path) {
        match t.format {
            Format::Plugin => {
                if text.starts_with(PLUGIN_MARKER) {
                    if let Some(line) = text.lines().find(|l| l.starts_with("const SP_EVENT = ")) {
                        let lit = line
                            .trim_start_matches("const SP_EVENT = ")
                            .trim_end_matches(';');
                        if let Ok(s) = serde_json::from_str::<String>(lit) {
                            programs.push(PathBuf::from(s));
                        }
                    }
                }
            }
            Format::Json(_) => {
                if let Ok(v) = serde_json::from_str::<Value>(&text) {
                    collect_programs(&v, &mut programs);
                }
            }
        }
    }
    programs.dedup();
    Registration::Found {
        changes: p.changes,
        programs,
    }
}

fn collect_programs(v: &Value, out: &mut Vec<PathBuf>) {
    match v {
        Value::Object(m) => {
            if json::our_binary(v).is_some() {
                if let Some(p) = json::program(v) {
                    let p = PathBuf::from(p);
                    if !out.contains(&p) {
                        out.push(p);
                    }
                }
                return;
            }
            m.values().for_each(|x| collect_programs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_programs(x, out)),
        _ => {}
    }
}

/// Gemini CLI turns hooks off with `hooksConfig.enabled: false`.
pub fn gemini_hooks_disabled(t: &Target) -> bool {
    t.harness == Harness::GeminiCli
        && std::fs::read_to_string(&t.file)
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .is_some_and(|v| v.pointer("/hooksConfig/enabled") == Some(&Value::Bool(false)))
}

/// Runs a command with a time limit. Returns (success, stdout, stderr).
pub fn run_command(
    mut cmd: Command,
    stdin: Option<&str>,
    timeout: Duration,
) -> Result<(bool, String, String)> {
    use std::io::{Read, Write};
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let writer = match (stdin, child.stdin.take()) {
        (Some(text), Some(mut pipe)) => {
            let text = text.to_string();
            Some(std::thread::spawn(move || {
                let _ = pipe.write_all(text.as_bytes());
            }))
        }
        _ => None,
    };
    let reader = |p: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut p) = p {
                let _ = p.read_to_string(&mut s);
            }
            s
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let until = Instant::now() + timeout;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("did not finish within {} s", timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    if let Some(w) = writer {
        let _ = w.join();
    }
    Ok((
        status.success(),
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opencode_plugin_writes_its_values_from_the_table() {
        let p = opencode_plugin(Path::new("/opt/sp"));
        assert!(
            p.starts_with(PLUGIN_MARKER),
            "uninstall finds it by its marker"
        );
        assert_eq!(
            p.matches("\nconst SP_EVENT = \"/opt/sp/sp-event\";\n")
                .count(),
            1
        );
        assert_eq!(p.matches("\nconst TIMEOUT_MS = 10000;\n").count(), 1);
        let events = r#"const EVENTS = new Set(["session.created", "session.status", "session.idle", "permission.asked", "permission.replied", "session.deleted"]);"#;
        assert_eq!(p.matches(events).count(), 1);
        assert!(!p.contains(SNIPPET_BIN_DIR));
        assert!(p.ends_with("});\n"));
    }

    #[test]
    fn timeouts_follow_decision_10() {
        let c = Config::default();
        assert_eq!(
            timeout_s(Harness::ClaudeCode, "PermissionRequest", SP_PERMISSION, &c),
            130
        );
        assert_eq!(
            timeout_s(Harness::Codex, "PermissionRequest", SP_PERMISSION, &c),
            40
        );
        assert_eq!(timeout_s(Harness::Codex, "SessionEnd", "sp-event", &c), 3);
        assert_eq!(
            timeout_s(Harness::Cursor, "beforeShellExecution", SP_PERMISSION, &c),
            40
        );
        let t = target(Harness::GeminiCli);
        let e = entries(&t, Path::new("/b"), &c);
        let n = e.iter().find(|e| e.event == "Notification").unwrap();
        assert_eq!(n.matcher.as_deref(), Some("ToolPermission"));
        assert_eq!(n.handler["timeout"], 10_000);
        let c: Config = serde_json::from_str(
            r#"{"control":{"harness":{"claude-code":{"permission_wait_s":50}}}}"#,
        )
        .unwrap();
        assert_eq!(
            timeout_s(Harness::ClaudeCode, "PermissionRequest", SP_PERMISSION, &c),
            60
        );
    }

    #[test]
    fn every_entry_is_recognised_as_ours() {
        for t in targets() {
            if let Format::Json(_) = t.format {
                for e in entries(&t, Path::new("/opt/my bin"), &Config::default()) {
                    assert_eq!(
                        json::our_binary(&e.handler),
                        Some(e.binary),
                        "{:?} {}",
                        t.harness,
                        e.event
                    );
                    assert_eq!(
                        json::program(&e.handler).unwrap(),
                        format!("/opt/my bin/{}", e.binary)
                    );
                }
            }
        }
    }
}
