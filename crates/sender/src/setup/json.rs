//! Merging our hook entries into a harness's JSON file without disturbing anything else:
//! other tools' entries keep their place and content, the file keeps its indentation, and
//! a file we cannot read as JSON is never written.
use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};
use std::io::Write;
use std::path::{Path, PathBuf};

pub use crate::harness::caps::Layout;

/// Our binaries: a handler running one of these is ours, wherever it is installed.
pub const OUR_BINARIES: &[&str] = &["sp-permission", "sp-stop", "sp-event"];

/// One hook entry we want in the file.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub event: String,
    pub binary: &'static str,
    pub matcher: Option<String>,
    /// The handler object (for `List`, the whole item).
    pub handler: Value,
    /// The timeout as the harness reads it, for reports ("130 s", "10000 ms").
    pub timeout: String,
}

/// What a merge did, for the report.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Changes {
    pub added: Vec<String>,
    pub updated: Vec<String>,
    pub removed: Vec<String>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.updated.is_empty() && self.removed.is_empty()
    }
}

/// The program a handler runs: `command` (exec form when `args` is present), else the first
/// word of the `command`/`bash` string; Kiro nests it in `action`.
pub fn program(handler: &Value) -> Option<String> {
    if let Some(action) = handler.get("action").filter(|a| a.is_object()) {
        return program(action);
    }
    let cmd = handler
        .get("command")
        .or_else(|| handler.get("bash"))
        .and_then(Value::as_str)?;
    if handler.get("args").is_some_and(Value::is_array) {
        return Some(cmd.to_string());
    }
    first_word(cmd)
}

/// Which of our binaries a handler runs, if any.
pub fn our_binary(handler: &Value) -> Option<&'static str> {
    let prog = program(handler)?;
    let base = prog.rsplit('/').next().unwrap_or(&prog);
    OUR_BINARIES.iter().copied().find(|b| *b == base)
}

/// The first shell word of a command string, with '…', "…" and \ quoting undone.
pub fn first_word(cmd: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = cmd.trim_start().chars().peekable();
    let mut started = false;
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => break,
            '\'' => {
                started = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    out.push(c);
                }
            }
            '"' => {
                started = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => {
                            if let Some(n) = chars.next() {
                                out.push(n);
                            }
                        }
                        c => out.push(c),
                    }
                }
            }
            '\\' => {
                started = true;
                if let Some(n) = chars.next() {
                    out.push(n);
                }
            }
            c => {
                started = true;
                out.push(c);
            }
        }
    }
    started.then_some(out)
}

/// Quotes a word for a POSIX shell only when it needs it.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+@:,=".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn describe(e: &Entry) -> String {
    match &e.matcher {
        Some(m) => format!("{} [{m}] → {} ({})", e.event, e.binary, e.timeout),
        None => format!("{} → {} ({})", e.event, e.binary, e.timeout),
    }
}

/// Brings `root` to exactly `want` of our entries. Ours already in place are updated where
/// they differ; ours not wanted are removed, with the groups, events and `hooks` object that
/// only they filled; missing ones are appended. Nothing else is touched.
pub fn merge(root: &mut Value, layout: Layout, want: &[Entry]) -> Result<Changes> {
    if layout == Layout::TopGrouped {
        // The same groups, one level up: merged as Grouped inside a wrapper, then unwrapped.
        if !root.is_object() {
            bail!("the top level is not a JSON object");
        }
        let mut wrapped = serde_json::json!({ "hooks": root.take() });
        let changes = merge(&mut wrapped, Layout::Grouped, want);
        *root = match wrapped.get_mut("hooks").map(Value::take) {
            Some(events) => events,
            None => Value::Object(Map::new()),
        };
        return changes;
    }
    let Some(obj) = root.as_object_mut() else {
        bail!("the top level is not a JSON object");
    };
    let mut changes = Changes::default();
    match layout {
        Layout::TopGrouped => unreachable!("unwrapped above"),
        Layout::Grouped | Layout::Flat => merge_events(obj, layout, want, &mut changes)?,
        Layout::List => merge_list(obj, want, &mut changes)?,
    }
    Ok(changes)
}

/// `merge` for a `"hooks"` object of events (Grouped, Flat).
fn merge_events(
    obj: &mut Map<String, Value>,
    layout: Layout,
    want: &[Entry],
    changes: &mut Changes,
) -> Result<()> {
    let mut pending = Pending(want.iter().map(Some).collect());
    // Entries found in place but under another matcher: removed here, appended again below.
    let mut reappend: Vec<&Entry> = Vec::new();
    let hooks = match obj.get_mut("hooks") {
        None => None,
        Some(Value::Object(m)) => Some(m),
        Some(_) => bail!("\"hooks\" is not an object"),
    };
    let mut drop_hooks = false;
    if let Some(hooks) = hooks {
        for (event, list) in hooks.iter() {
            if !list.is_array() {
                bail!("\"hooks\".{event:?} is not a list");
            }
        }
        let mut emptied = Vec::new();
        for (event, list) in hooks.iter_mut() {
            let arr = list.as_array_mut().expect("checked above");
            let before = arr.len();
            if layout == Layout::Flat {
                walk_handlers(arr, event, None, &mut pending, changes, &mut reappend);
            } else {
                walk_groups(arr, event, &mut pending, changes, &mut reappend);
            }
            if before > 0 && arr.is_empty() {
                emptied.push(event.clone());
            }
        }
        hooks.retain(|k, _| !emptied.contains(k));
        drop_hooks = hooks.is_empty() && !emptied.is_empty();
    }
    if drop_hooks {
        obj.retain(|k, _| k != "hooks");
    }
    let rest: Vec<&Entry> = reappend
        .into_iter()
        .chain(pending.0.into_iter().flatten())
        .collect();
    if rest.is_empty() {
        return Ok(());
    }
    let hooks = obj
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .expect("checked above");
    for e in rest {
        let list = hooks
            .entry(e.event.clone())
            .or_insert_with(|| Value::Array(Vec::new()))
            .as_array_mut()
            .expect("checked above");
        list.push(match layout {
            Layout::Grouped => group_of(e),
            _ => e.handler.clone(),
        });
        changes.added.push(describe(e));
    }
    Ok(())
}

/// One event's groups (`{"matcher"?, "hooks": [handler]}`): our handlers in them walked, and
/// a group that held only ours dropped.
fn walk_groups<'a>(
    arr: &mut Vec<Value>,
    event: &str,
    pending: &mut Pending<'a>,
    changes: &mut Changes,
    reappend: &mut Vec<&'a Entry>,
) {
    let mut kept = Vec::with_capacity(arr.len());
    for mut group in arr.drain(..) {
        let matcher = group
            .get("matcher")
            .and_then(Value::as_str)
            .map(str::to_string);
        let Some(handlers) = group.get_mut("hooks").and_then(Value::as_array_mut) else {
            kept.push(group);
            continue;
        };
        let had = handlers.len();
        walk_handlers(
            handlers,
            event,
            Some(matcher.as_deref()),
            pending,
            changes,
            reappend,
        );
        if had > 0 && handlers.is_empty() {
            continue; // the group held only our handler
        }
        kept.push(group);
    }
    *arr = kept;
}

/// `merge` for a `"hooks"` list of items naming their event (List: Kiro).
fn merge_list(obj: &mut Map<String, Value>, want: &[Entry], changes: &mut Changes) -> Result<()> {
    let mut pending = Pending(want.iter().map(Some).collect());
    let list = match obj.get_mut("hooks") {
        None => None,
        Some(Value::Array(a)) => Some(a),
        Some(_) => bail!("\"hooks\" is not a list"),
    };
    let mut drop_hooks = false;
    if let Some(list) = list {
        let before = list.len();
        let mut kept = Vec::with_capacity(list.len());
        for item in list.drain(..) {
            let Some(binary) = our_binary(&item) else {
                kept.push(item);
                continue;
            };
            let event = item
                .get("trigger")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            match pending.claim(&event, binary) {
                Some(e) => {
                    if item != e.handler {
                        changes.updated.push(describe(e));
                    }
                    kept.push(e.handler.clone());
                }
                None => changes.removed.push(format!("{event} → {binary}")),
            }
        }
        *list = kept;
        drop_hooks = before > 0 && list.is_empty();
    }
    if drop_hooks {
        obj.retain(|k, _| k != "hooks");
    }
    let rest: Vec<&Entry> = pending.0.into_iter().flatten().collect();
    if rest.is_empty() {
        return Ok(());
    }
    let list = obj
        .entry("hooks")
        .or_insert_with(|| Value::Array(Vec::new()))
        .as_array_mut()
        .expect("checked above");
    for e in rest {
        list.push(e.handler.clone());
        changes.added.push(describe(e));
    }
    Ok(())
}

/// The wanted entries not yet found in the file.
struct Pending<'a>(Vec<Option<&'a Entry>>);

impl<'a> Pending<'a> {
    fn claim(&mut self, event: &str, binary: &str) -> Option<&'a Entry> {
        self.0
            .iter_mut()
            .find(|p| p.is_some_and(|e| e.event == event && e.binary == binary))
            .and_then(Option::take)
    }
}

/// One list of handlers: keeps others', updates or drops ours. `group_matcher` is the
/// group's matcher (Grouped), or None for Flat, where a handler carries no matcher.
fn walk_handlers<'a>(
    handlers: &mut Vec<Value>,
    event: &str,
    group_matcher: Option<Option<&str>>,
    pending: &mut Pending<'a>,
    changes: &mut Changes,
    reappend: &mut Vec<&'a Entry>,
) {
    let mut kept = Vec::with_capacity(handlers.len());
    for h in handlers.drain(..) {
        let Some(binary) = our_binary(&h) else {
            kept.push(h);
            continue;
        };
        match pending.claim(event, binary) {
            Some(e) => {
                let same_matcher = group_matcher.is_none_or(|m| m == e.matcher.as_deref());
                if !same_matcher {
                    changes.updated.push(describe(e));
                    reappend.push(e);
                    continue;
                }
                if h != e.handler {
                    changes.updated.push(describe(e));
                }
                kept.push(e.handler.clone());
            }
            None => changes.removed.push(format!("{event} → {binary}")),
        }
    }
    *handlers = kept;
}

fn group_of(e: &Entry) -> Value {
    let mut g = Map::new();
    if let Some(m) = &e.matcher {
        g.insert("matcher".into(), Value::String(m.clone()));
    }
    g.insert("hooks".into(), Value::Array(vec![e.handler.clone()]));
    Value::Object(g)
}

/// How a file was laid out, so a rewrite looks like the original.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Style {
    /// None: one line, no indentation.
    pub indent: Option<String>,
    pub final_newline: bool,
}

impl Default for Style {
    fn default() -> Self {
        Style {
            indent: Some("  ".into()),
            final_newline: true,
        }
    }
}

impl Style {
    pub fn detect(text: &str) -> Style {
        let body = text.trim_end();
        if !body.contains('\n') && !body.is_empty() {
            return Style {
                indent: None,
                final_newline: text.ends_with('\n'),
            };
        }
        let indent = body
            .lines()
            .skip(1)
            .find(|l| !l.trim().is_empty())
            .map(|l| {
                l.chars()
                    .take_while(|c| *c == ' ' || *c == '\t')
                    .collect::<String>()
            })
            .filter(|i| !i.is_empty())
            .unwrap_or_else(|| "  ".into());
        Style {
            indent: Some(indent),
            final_newline: text.ends_with('\n') || text.is_empty(),
        }
    }

    pub fn render(&self, v: &Value) -> String {
        let mut out = match &self.indent {
            None => serde_json::to_string(v).expect("a Value always serialises"),
            Some(indent) => {
                let mut buf = Vec::new();
                let fmt = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
                let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
                serde::Serialize::serialize(v, &mut ser).expect("a Value always serialises");
                String::from_utf8(buf).expect("serde_json writes UTF-8")
            }
        };
        if self.final_newline {
            out.push('\n');
        }
        out
    }
}

/// Reads a settings file as JSON. An empty file counts as `{}`; anything unparsable is an
/// error naming the line, and the file must then be left as it is.
pub fn parse(path: &Path, text: &str) -> Result<Value> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    serde_json::from_str(text).map_err(|e| {
        anyhow::anyhow!(
            "{} is not valid JSON (line {}, column {}: {e}); left untouched: fix it by hand, then run the install again",
            path.display(),
            e.line(),
            e.column()
        )
    })
}

/// The real file behind a symlink, so a dotfiles link keeps pointing at the edited file.
pub fn resolve(path: &Path) -> PathBuf {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
        }
        _ => path.to_path_buf(),
    }
}

/// Writes a file whole or not at all (temp file in the same folder, then rename), keeping
/// the mode of the file it replaces; `mode` applies to a new file.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: Option<u32>) -> Result<()> {
    #[cfg(unix)]
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path)
            .ok()
            .map(|m| m.permissions().mode() & 0o7777)
            .or(mode)
    };
    write_checked(path, bytes, mode, |_| Ok(()))
}

/// Writes a file whole or not at all with exactly `mode` (where given): `check` reads the
/// temp file first, and a file it refuses is never put in place.
pub fn write_checked(
    path: &Path,
    bytes: &[u8],
    mode: Option<u32>,
    check: impl FnOnce(&Path) -> Result<()>,
) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.sp-tmp-{}", std::process::id()));
    let result = (|| -> Result<()> {
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create_new(true);
        #[cfg(unix)]
        if let Some(m) = mode {
            std::os::unix::fs::OpenOptionsExt::mode(&mut o, m);
        }
        let mut f = o
            .open(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        f.write_all(bytes)?;
        // The umask may have narrowed the mode asked for at creation.
        #[cfg(unix)]
        if let Some(m) = mode {
            use std::os::unix::fs::PermissionsExt;
            f.set_permissions(std::fs::Permissions::from_mode(m))?;
        }
        f.sync_all()?;
        drop(f);
        check(&tmp)?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot replace {}", path.display()))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(event: &str, binary: &'static str, timeout: u64) -> Entry {
        Entry {
            event: event.into(),
            binary,
            matcher: None,
            handler: json!({"type":"command","command":format!("/b/{binary} --harness codex"),"timeout":timeout}),
            timeout: format!("{timeout} s"),
        }
    }

    #[test]
    fn words() {
        assert_eq!(first_word("/a/b --x").as_deref(), Some("/a/b"));
        assert_eq!(
            first_word("'/a b/sp-stop' --harness x").as_deref(),
            Some("/a b/sp-stop")
        );
        assert_eq!(first_word(r#""/a \"b/c" x"#).as_deref(), Some(r#"/a "b/c"#));
        assert_eq!(first_word("   ").as_deref(), None);
        assert_eq!(shell_quote("/usr/bin/sp"), "/usr/bin/sp");
        assert_eq!(shell_quote("/a b/it's"), r"'/a b/it'\''s'");
    }

    #[test]
    fn grouped_merge_is_idempotent_and_reversible() {
        let original = json!({"model":"x","hooks":{"Stop":[{"hooks":[{"type":"command","command":"other-tool stop"}]}]}});
        let want = vec![
            entry("PermissionRequest", "sp-permission", 40),
            entry("Stop", "sp-stop", 10),
        ];
        let mut v = original.clone();
        let c = merge(&mut v, Layout::Grouped, &want).unwrap();
        assert_eq!(c.added.len(), 2);
        assert_eq!(v["hooks"]["Stop"].as_array().unwrap().len(), 2);
        assert_eq!(v["hooks"]["Stop"][0], original["hooks"]["Stop"][0]);
        let once = v.clone();
        assert!(merge(&mut v, Layout::Grouped, &want).unwrap().is_empty());
        assert_eq!(v, once);
        // A changed timeout updates in place.
        let want2 = vec![
            entry("PermissionRequest", "sp-permission", 70),
            entry("Stop", "sp-stop", 10),
        ];
        let c = merge(&mut v, Layout::Grouped, &want2).unwrap();
        assert_eq!(c.updated.len(), 1);
        assert_eq!(
            v["hooks"]["PermissionRequest"][0]["hooks"][0]["timeout"],
            70
        );
        let c = merge(&mut v, Layout::Grouped, &[]).unwrap();
        assert_eq!(c.removed.len(), 2);
        assert_eq!(v, original);
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            serde_json::to_string(&original).unwrap()
        );
    }

    #[test]
    fn refuses_unexpected_shapes() {
        let mut v = json!([1]);
        assert!(merge(&mut v, Layout::Grouped, &[]).is_err());
        let mut v = json!({"hooks":{"Stop":{}}});
        assert!(merge(&mut v, Layout::Grouped, &[]).is_err());
    }

    #[test]
    fn style_round_trips() {
        for text in [
            "{\n  \"a\": [\n    1\n  ]\n}\n",
            "{\n    \"a\": 1\n}",
            "{\"a\":1}\n",
            "{\n\t\"a\": {}\n}\n",
        ] {
            let v: Value = serde_json::from_str(text).unwrap();
            assert_eq!(Style::detect(text).render(&v), text);
        }
    }

    #[test]
    fn top_grouped_keeps_the_events_at_the_top_level() {
        let e = Entry {
            event: "PreToolUse".into(),
            binary: "sp-permission",
            matcher: None,
            timeout: "40 s".into(),
            handler: json!({"type": "command", "command": "/b/sp-permission --harness droid", "timeout": 40}),
        };
        let mut v = json!({"Stop": [{"hooks": [{"type": "command", "command": "theirs"}]}]});
        let c = merge(&mut v, Layout::TopGrouped, std::slice::from_ref(&e)).unwrap();
        assert_eq!(c.added.len(), 1);
        assert!(v.get("hooks").is_none(), "{v}");
        assert_eq!(
            v["PreToolUse"][0]["hooks"][0]["command"],
            "/b/sp-permission --harness droid"
        );
        assert_eq!(v["Stop"][0]["hooks"][0]["command"], "theirs");
        assert!(merge(&mut v, Layout::TopGrouped, &[e]).unwrap().is_empty());
        merge(&mut v, Layout::TopGrouped, &[]).unwrap();
        assert_eq!(
            v,
            json!({"Stop": [{"hooks": [{"type": "command", "command": "theirs"}]}]})
        );
    }
}
