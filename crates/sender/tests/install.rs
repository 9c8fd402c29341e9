//! install.sh against a temp HOME holding other tools' hooks: ours are merged in with the
//! right timeouts, theirs are left as they were, a second run changes nothing, and
//! `--uninstall` gives back the original files byte for byte. The crontab is a stand-in.
use serde_json::{json, Value};
use spctl::config::Config;
use spctl::setup;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

#[path = "common/needs.rs"]
mod needs;

/// The repository's root (this crate is crates/sender).
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const OUR_BINARIES: &[&str] = &["sp", "sp-sync", "sp-permission", "sp-stop", "sp-event"];

struct Home {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    prefix: PathBuf,
    crontab_file: PathBuf,
    crontab: PathBuf,
}

/// What the user had before: other tools' hooks in four harnesses, each in its own style.
const CLAUDE: &str = r#"{
  "model": "opus",
  "permissions": {
    "allow": [
      "Bash(git status)"
    ]
  },
  "hooks": {
    "PermissionRequest": [
      {
        "matcher": "Bash",
        "hooks": [
          {
            "type": "command",
            "command": "/opt/guard/bin/guard check",
            "timeout": 5
          }
        ]
      }
    ],
    "Stop": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "notify-send done"
          }
        ]
      }
    ]
  }
}
"#;

const CODEX: &str = r#"{
    "hooks": {
        "Stop": [
            {
                "hooks": [
                    {
                        "type": "command",
                        "command": "python3 ~/.codex/hooks/log_stop.py",
                        "timeout": 30
                    }
                ]
            }
        ]
    }
}"#;

const GEMINI: &str = r#"{
  "theme": "GitHub",
  "hooksConfig": {
    "enabled": true
  },
  "hooks": {
    "BeforeTool": [
      {
        "matcher": "run_shell_command",
        "hooks": [
          {
            "type": "command",
            "name": "secret-scan",
            "command": "$HOME/.gemini/hooks/scan.sh",
            "timeout": 5000
          }
        ]
      }
    ],
    "SessionStart": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "echo '{}'"
          }
        ]
      }
    ]
  }
}
"#;

const CURSOR: &str = "{\"version\":1,\"hooks\":{\"afterFileEdit\":[{\"command\":\"./hooks/format.sh\"}],\"stop\":[{\"command\":\"./hooks/audit.sh\",\"loop_limit\":3}]}}\n";

const USER_CRON: &str = "MAILTO=me@example.com\n0 3 * * * /usr/bin/backup --nightly\n";

fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_sp"))
        .parent()
        .unwrap()
        .to_path_buf()
}

impl Home {
    fn new() -> Home {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let home = root.join("home");
        std::fs::create_dir_all(&home).unwrap();
        let crontab_file = root.join("crontab.txt");
        let crontab = root.join("fake-crontab");
        // Behaves as crontab(1) does for -l, - and -r, on a file instead of the spool.
        std::fs::write(
            &crontab,
            format!(
                "#!/bin/sh\nf='{}'\ncase \"$1\" in\n  -l) if [ -f \"$f\" ]; then cat \"$f\"; else echo \"no crontab for $(id -un)\" >&2; exit 1; fi ;;\n  -) cat > \"$f\" ;;\n  -r) rm -f \"$f\" ;;\n  *) exit 2 ;;\nesac\n",
                crontab_file.display()
            ),
        )
        .unwrap();
        set_mode(&crontab, 0o755);
        Home {
            prefix: root.join("prefix"),
            _dir: dir,
            root,
            home,
            crontab_file,
            crontab,
        }
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.home.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.home.join(rel)).unwrap()
    }

    fn json(&self, rel: &str) -> Value {
        serde_json::from_str(&self.read(rel)).unwrap()
    }

    /// install.sh with the binaries cargo built for the tests, in this HOME with a plain
    /// PATH; the prefix and the schedulers it finds are the caller's to set.
    fn script(&self) -> Command {
        let mut c = Command::new("bash");
        c.arg(format!("{ROOT}/install.sh"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &self.home)
            .env("SP_SKIP_BUILD", "1")
            .env("SP_NO_RECEIVER", "1")
            .env("SP_BUILD_DIR", bin_dir())
            .stdin(Stdio::null());
        c
    }

    /// install.sh as a person runs it, but with the binaries cargo built for the tests.
    fn install(&self, args: &[&str]) -> Output {
        let mut c = self.script();
        c.args(args)
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("PREFIX", &self.prefix)
            .env("SP_CRONTAB", &self.crontab)
            .current_dir(&self.root);
        let out = c.output().unwrap();
        eprintln!(
            "--- install.sh {args:?}\n{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        out
    }

    /// Every file under HOME plus the crontab, with its bytes.
    fn snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut out = BTreeMap::new();
        walk(&self.home, &mut out);
        if let Ok(b) = std::fs::read(&self.crontab_file) {
            out.insert(self.crontab_file.clone(), b);
        }
        out
    }
}

fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.insert(p.clone(), std::fs::read(&p).unwrap());
        }
    }
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The handlers of ours for one event (Grouped layout), with the group's matcher.
fn ours_grouped(v: &Value, event: &str) -> Vec<(Option<String>, Value)> {
    let mut out = Vec::new();
    for g in v["hooks"][event].as_array().cloned().unwrap_or_default() {
        for h in g["hooks"].as_array().cloned().unwrap_or_default() {
            if setup::json::our_binary(&h).is_some() {
                out.push((g["matcher"].as_str().map(str::to_string), h));
            }
        }
    }
    out
}

/// Every event list of the original is still there, in order, at the front of the new list;
/// every other top-level field is unchanged.
fn assert_theirs_unchanged(before: &str, after: &Value) {
    let before: Value = serde_json::from_str(before).unwrap();
    for (k, v) in before.as_object().unwrap() {
        if k != "hooks" {
            assert_eq!(&after[k], v, "field {k} changed");
        }
    }
    for (event, list) in before["hooks"].as_object().unwrap() {
        let list = list.as_array().unwrap();
        let now = after["hooks"][event].as_array().unwrap();
        assert_eq!(
            &now[..list.len()],
            &list[..],
            "{event}: other tools' hooks changed"
        );
    }
}

#[test]
fn install_merges_ours_keeps_theirs_is_idempotent_and_uninstall_restores() {
    let h = Home::new();
    h.write(".claude/settings.json", CLAUDE);
    h.write(".codex/hooks.json", CODEX);
    h.write(".gemini/settings.json", GEMINI);
    h.write(".cursor/hooks.json", CURSOR);
    std::fs::write(&h.crontab_file, USER_CRON).unwrap();
    let original = h.snapshot();

    let out = h.install(&[]);
    assert!(out.status.success());
    let bin = h.prefix.join("bin");
    for b in OUR_BINARIES {
        assert!(bin.join(b).is_file(), "{b} installed");
    }
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("/hooks"),
        "the Codex trust step is spelled out: {stdout}"
    );
    assert!(stdout.contains("is not on your PATH"));

    // Claude Code: exec form, 120 s wait + 10 s.
    let claude = h.json(".claude/settings.json");
    assert_theirs_unchanged(CLAUDE, &claude);
    let perm = ours_grouped(&claude, "PermissionRequest");
    assert_eq!(perm.len(), 1);
    assert_eq!(perm[0].0, None, "our permission hook matches every tool");
    assert_eq!(
        perm[0].1,
        json!({"type":"command","command":bin.join("sp-permission"),"args":["--harness","claude-code"],"timeout":130})
    );
    assert_eq!(ours_grouped(&claude, "Stop")[0].1["timeout"], 10);
    for ev in [
        "SessionStart",
        "UserPromptSubmit",
        "PostToolUse",
        "PostToolUseFailure",
        "SessionEnd",
    ] {
        let e = ours_grouped(&claude, ev);
        assert_eq!(e.len(), 1, "{ev}");
        assert_eq!(e[0].1["command"], json!(bin.join("sp-event")));
    }

    // Codex: command strings, 30 s wait + 10 s, SessionEnd at its 3 s clamp.
    let codex = h.json(".codex/hooks.json");
    assert_theirs_unchanged(CODEX, &codex);
    let p = ours_grouped(&codex, "PermissionRequest");
    assert_eq!(
        p[0].1["command"],
        format!("{} --harness codex", bin.join("sp-permission").display())
    );
    assert_eq!(p[0].1["timeout"], 40);
    assert_eq!(ours_grouped(&codex, "SessionEnd")[0].1["timeout"], 3);
    assert!(
        h.read(".codex/hooks.json")
            .starts_with("{\n    \"hooks\": {\n        \"Stop\": ["),
        "Codex file keeps its 4-space indent"
    );

    // Gemini CLI: milliseconds; the permission notification only.
    let gemini = h.json(".gemini/settings.json");
    assert_theirs_unchanged(GEMINI, &gemini);
    let n = ours_grouped(&gemini, "Notification");
    assert_eq!(n[0].0.as_deref(), Some("ToolPermission"));
    assert_eq!(n[0].1["timeout"], 10_000);
    assert_eq!(ours_grouped(&gemini, "AfterAgent")[0].1["timeout"], 10_000);
    assert_eq!(ours_grouped(&gemini, "SessionStart").len(), 1);

    // Cursor: flat handlers, seconds.
    let cursor = h.json(".cursor/hooks.json");
    assert_theirs_unchanged(CURSOR, &cursor);
    let shell = cursor["hooks"]["beforeShellExecution"].as_array().unwrap();
    assert_eq!(
        shell,
        &vec![
            json!({"command": format!("{} --harness cursor", bin.join("sp-permission").display()), "timeout": 40})
        ]
    );
    assert_eq!(cursor["hooks"]["stop"].as_array().unwrap().len(), 2);
    assert!(
        h.read(".cursor/hooks.json").starts_with("{\"version\":1,"),
        "a one-line file stays one line"
    );

    // Backups of the originals sit beside the files.
    assert_eq!(h.read(".claude/settings.json.sp-backup"), CLAUDE);
    assert_eq!(h.read(".codex/hooks.json.sp-backup"), CODEX);

    // Cron: the user's lines kept, ours added once.
    let cron = std::fs::read_to_string(&h.crontab_file).unwrap();
    assert!(cron.starts_with(USER_CRON));
    let ours: Vec<&str> = cron.lines().filter(|l| l.contains("sp-sync")).collect();
    assert_eq!(
        ours,
        vec![format!(
            "* * * * * {} >/dev/null 2>&1 # sessionpipe: sp-sync every minute",
            bin.join("sp-sync").display()
        )]
    );

    // A second run changes nothing at all.
    let after_first = h.snapshot();
    let binaries_before: Vec<_> = OUR_BINARIES
        .iter()
        .map(|b| std::fs::metadata(bin.join(b)).unwrap().modified().unwrap())
        .collect();
    let out = h.install(&[]);
    assert!(out.status.success());
    assert_eq!(h.snapshot(), after_first, "second run is byte-identical");
    let binaries_after: Vec<_> = OUR_BINARIES
        .iter()
        .map(|b| std::fs::metadata(bin.join(b)).unwrap().modified().unwrap())
        .collect();
    assert_eq!(
        binaries_before, binaries_after,
        "identical binaries are not copied again"
    );
    assert!(text(&out.stdout).contains("nothing to change"));

    // --uninstall: back to the original bytes, binaries gone, cron as it was.
    let out = h.install(&["--uninstall"]);
    assert!(out.status.success());
    assert_eq!(
        h.snapshot(),
        original,
        "uninstall restores every file exactly"
    );
    for b in OUR_BINARIES {
        assert!(!bin.join(b).exists(), "{b} removed");
    }
}

#[test]
fn uninstall_after_the_user_edited_the_file_removes_only_ours() {
    let h = Home::new();
    h.write(".claude/settings.json", CLAUDE);
    assert!(h.install(&[]).status.success());
    // The user adds a setting after install: the backup no longer matches, so uninstall
    // takes our entries out and keeps the edit.
    let mut v = h.json(".claude/settings.json");
    v["theme"] = json!("dark");
    h.write(
        ".claude/settings.json",
        &(serde_json::to_string_pretty(&v).unwrap() + "\n"),
    );
    let out = h.install(&["--uninstall"]);
    assert!(out.status.success());
    // The backup is out of date (putting it back would undo the edit): it goes too.
    assert!(!h.home.join(".claude/settings.json.sp-backup").exists());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("remove the backup"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let mut expected: Value = serde_json::from_str(CLAUDE).unwrap();
    expected["theme"] = json!("dark");
    assert_eq!(
        h.read(".claude/settings.json"),
        serde_json::to_string_pretty(&expected).unwrap() + "\n"
    );
}

#[test]
fn reinstalling_elsewhere_moves_our_entries_instead_of_adding_more() {
    let h = Home::new();
    h.write(".codex/hooks.json", CODEX);
    assert!(h.install(&[]).status.success());
    let other = h.root.join("other-prefix");
    let mut c = h.script();
    c.env("PREFIX", &other).env("SP_CRONTAB", &h.crontab);
    assert!(c.output().unwrap().status.success());
    let codex = h.json(".codex/hooks.json");
    let p = ours_grouped(&codex, "PermissionRequest");
    assert_eq!(p.len(), 1);
    assert!(p[0].1["command"]
        .as_str()
        .unwrap()
        .starts_with(&other.join("bin").display().to_string()));
    let cron = std::fs::read_to_string(&h.crontab_file).unwrap();
    assert_eq!(cron.lines().count(), 1);
    assert!(cron.contains(&other.join("bin/sp-sync").display().to_string()));
}

#[test]
fn malformed_settings_file_is_reported_and_left_untouched() {
    let h = Home::new();
    let broken = "{\n  \"hooks\": {\n    \"Stop\": [\n";
    h.write(".claude/settings.json", broken);
    h.write(".codex/hooks.json", CODEX);
    let out = h.install(&[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a file left untouched is a failure to report"
    );
    let stdout = text(&out.stdout);
    assert!(stdout.contains("NOT CHANGED"), "{stdout}");
    assert!(
        stdout.contains("settings.json is not valid JSON (line 4"),
        "{stdout}"
    );
    assert_eq!(h.read(".claude/settings.json"), broken);
    assert!(!h.home.join(".claude/settings.json.sp-backup").exists());
    // The other harnesses are still set up.
    assert_eq!(ours_grouped(&h.json(".codex/hooks.json"), "Stop").len(), 1);
    // The same for a file whose shape is not the harness's.
    let misshapen = "{\"hooks\": [\"not\", \"an object\"]}";
    h.write(".claude/settings.json", misshapen);
    let out = h.install(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("\"hooks\" is not an object"));
    assert_eq!(h.read(".claude/settings.json"), misshapen);
}

#[test]
fn dry_run_changes_nothing() {
    let h = Home::new();
    h.write(".claude/settings.json", CLAUDE);
    h.write(".cursor/hooks.json", CURSOR);
    let before = h.snapshot();
    let out = h.install(&["--dry-run"]);
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    assert!(stdout.contains("would install"), "{stdout}");
    assert!(stdout.contains("would update"), "{stdout}");
    assert!(
        stdout.contains("+ PermissionRequest → sp-permission (130 s)"),
        "{stdout}"
    );
    assert!(stdout.contains("would add crontab line"), "{stdout}");
    assert_eq!(h.snapshot(), before);
    assert!(!h.prefix.join("bin/sp").exists());
}

#[test]
fn fresh_machine_without_crontab_gets_the_timer_printed() {
    let h = Home::new();
    let mut c = h.script();
    c.env("SP_CRONTAB", h.root.join("no-such-crontab"))
        .env("SP_SYSTEMCTL", fake_systemctl(&h.root));
    let out = c.output().unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        h.home.join(".local/bin/sp").is_file(),
        "PREFIX defaults to ~/.local"
    );
    assert!(stdout.contains("No harness found"));
    if cfg!(target_os = "linux") {
        assert!(
            stdout.contains("systemctl --user enable --now sessionpipe-sync.timer"),
            "{stdout}"
        );
        assert!(stdout.contains(&format!(
            "ExecStart={}",
            h.home.join(".local/bin/sp-sync").display()
        )));
    }
}

/// hooks/<harness>/<file> are generated from the registration table, so they cannot drift.
/// Regenerate with: SP_BLESS=1 cargo test --test install snippets
#[test]
fn snippets_match_the_registration_table() {
    let bless = std::env::var_os("SP_BLESS").is_some();
    for t in setup::targets() {
        let path = Path::new(ROOT)
            .join("hooks")
            .join(t.harness.name())
            .join(setup::snippet_name(&t));
        let want = setup::snippet(&t, Path::new(setup::SNIPPET_BIN_DIR), &Config::default());
        if bless {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path)
            .unwrap_or_else(|_| panic!("{} is missing", path.display()));
        assert_eq!(
            have,
            want,
            "{} differs from `sp hooks print {} --bin-dir {}`",
            path.display(),
            t.harness.name(),
            setup::SNIPPET_BIN_DIR
        );
    }
}

/// The generated OpenCode plugin, loaded by node as OpenCode would load it, runs the real
/// sp-event with a payload the adapter understands. Needs node (tests/common/needs.rs).
#[test]
fn opencode_plugin_hands_events_to_sp_event() {
    let node = Command::new("node").arg("--version").output().is_ok();
    if !needs::needs("node (scripts/test-deps.sh installs it)", node) {
        return;
    }
    let h = Home::new();
    let plugin = h.root.join("sessionpipe.mjs");
    std::fs::write(&plugin, setup::opencode_plugin(&bin_dir())).unwrap();
    let state = h.root.join("state");
    let script = format!(
        "const m = await import({:?});\n\
         const hooks = await m.Sessionpipe({{ directory: '/work/proj', serverUrl: new URL('http://127.0.0.1:4096/') }});\n\
         await hooks.event({{ event: {{ type: 'session.created', properties: {{ info: {{ id: 'ses_abc123' }} }} }} }});\n\
         await hooks.event({{ event: {{ type: 'message.updated', properties: {{ sessionID: 'ses_other' }} }} }});\n",
        format!("file://{}", plugin.display())
    );
    let out = Command::new("node")
        .args(["--input-type=module", "-e", &script])
        .env("HOME", &h.home)
        .env("SESSIONPIPE_STATE_DIR", &state)
        .env("SESSIONPIPE_CONFIG", h.root.join("none.json"))
        .env("SESSIONPIPE_NO_SPAWN", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let db = rusqlite::Connection::open(state.join("control.db")).unwrap();
    let keys: Vec<(String, Option<String>)> = db
        .prepare("SELECT key, cwd FROM sessions ORDER BY key")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        keys,
        vec![(
            "opencode:ses_abc123".to_string(),
            Some("/work/proj".to_string())
        )],
        "only forwarded events arrive"
    );
}

/// A systemctl whose `--user show-environment` answers, as on a desktop with a user manager.
fn fake_systemctl(dir: &Path) -> PathBuf {
    let p = dir.join("systemctl");
    std::fs::write(&p, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    p
}

#[test]
fn no_crontab_and_no_user_systemd_advises_nothing_that_cannot_work() {
    let h = Home::new();
    let mut c = h.script();
    c.env("SP_CRONTAB", h.root.join("no-such-crontab"))
        .env("SP_SYSTEMCTL", h.root.join("no-such-systemctl"));
    let out = c.output().unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("nothing runs sp-sync on a schedule"),
        "{stdout}"
    );
    assert!(stdout.contains("--daemon"), "{stdout}");
    assert!(!stdout.contains("systemctl"), "{stdout}");
    assert!(!stdout.contains("crontab -e"), "{stdout}");
    let doctor = Command::new(h.home.join(".local/bin/sp"))
        .arg("doctor")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &h.home)
        .env("SP_CRONTAB", h.root.join("no-such-crontab"))
        .env("SP_SYSTEMCTL", h.root.join("no-such-systemctl"))
        .output()
        .unwrap();
    let report = text(&doctor.stdout);
    assert!(
        report.contains("no crontab and no systemd user manager here"),
        "{report}"
    );
    assert!(!report.contains("crontab -e"), "{report}");
    assert!(
        !report.contains("follow what it prints for the timer"),
        "{report}"
    );
}

/// install.sh finds the build where cargo puts it (CARGO_TARGET_DIR honoured), and blames
/// the option that was used when binaries are missing.
#[test]
fn install_sh_looks_for_the_build_where_cargo_puts_it() {
    let h = Home::new();
    let target = h.root.join("elsewhere");
    let run = |envs: &[(&str, &Path)]| {
        let mut c = Command::new("bash");
        c.arg(format!("{ROOT}/install.sh"))
            .arg("--dry-run")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &h.home)
            .env("SP_SKIP_BUILD", "1")
            .env("SP_NO_RECEIVER", "1")
            .env("SP_CRONTAB", &h.crontab)
            .stdin(Stdio::null());
        for (k, v) in envs {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let out = run(&[("CARGO_TARGET_DIR", &target)]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("{}/release/sp is missing", target.display())),
        "{err}"
    );
    assert!(err.contains("SP_SKIP_BUILD=1"), "{err}");
    assert!(!err.contains("--no-build"), "{err}");
    // SP_BUILD_DIR wins.
    let out = run(&[("CARGO_TARGET_DIR", &target), ("SP_BUILD_DIR", &bin_dir())]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Issue 17: OpenCode installs `@opencode-ai/plugin` into its config folder at every start and,
/// with a plugin there, waits for it (offline: ~70 s). Install leaves a fresh config folder as a
/// finished install would (an empty node_modules/ and a lock naming the package), never touches
/// a folder that already has any of them, and uninstall takes the stub back only while it is
/// still exactly ours.
#[test]
fn opencode_gets_a_dependency_stub_only_in_a_fresh_config_folder() {
    let cfg = ".config/opencode";
    let h = Home::new();
    h.write(&format!("{cfg}/opencode.json"), "{\"autoupdate\": false}\n");
    let original = h.snapshot();
    let out = h.install(&[]);
    assert!(out.status.success());
    assert!(
        text(&out.stdout).contains("package-lock.json"),
        "{}",
        text(&out.stdout)
    );
    let dir = h.home.join(cfg);
    assert!(dir.join("plugins/sessionpipe.js").is_file());
    assert_eq!(
        h.read(&format!("{cfg}/package-lock.json")),
        setup::opencode_stub_lock()
    );
    let lock: Value = h.json(&format!("{cfg}/package-lock.json"));
    assert!(lock["packages"][""]["dependencies"]["@opencode-ai/plugin"].is_string());
    assert!(dir.join("node_modules").is_dir());
    assert!(!dir.join("package.json").exists());
    let first = h.snapshot();
    assert!(h.install(&[]).status.success());
    assert_eq!(h.snapshot(), first, "a second install changes nothing");
    assert!(h.install(&["--uninstall"]).status.success());
    assert_eq!(h.snapshot(), original);
    assert!(
        !dir.join("node_modules").exists(),
        "our empty node_modules/ is taken back"
    );

    // A folder OpenCode (or the person) already set up keeps what it has.
    let h = Home::new();
    let package = "{\"dependencies\": {\"left-pad\": \"1.3.0\"}}\n";
    h.write(&format!("{cfg}/package.json"), package);
    let original = h.snapshot();
    assert!(h.install(&[]).status.success());
    let dir = h.home.join(cfg);
    assert!(dir.join("plugins/sessionpipe.js").is_file());
    assert!(!dir.join("node_modules").exists() && !dir.join("package-lock.json").exists());
    assert_eq!(h.read(&format!("{cfg}/package.json")), package);
    assert!(h.install(&["--uninstall"]).status.success());
    assert_eq!(h.snapshot(), original);

    // Once something was installed into node_modules/, uninstall leaves the stub alone.
    let h = Home::new();
    std::fs::create_dir_all(h.home.join(cfg)).unwrap();
    assert!(h.install(&[]).status.success());
    h.write(&format!("{cfg}/node_modules/left-pad/package.json"), "{}");
    assert!(h.install(&["--uninstall"]).status.success());
    assert!(h.home.join(cfg).join("package-lock.json").is_file());
    assert!(h.home.join(cfg).join("node_modules/left-pad").is_dir());
    assert!(!h.home.join(cfg).join("plugins/sessionpipe.js").exists());
}

/// Installing a new sp-sync stops the old one still running from the same folder (the new
/// hooks trust quiet markers that only the new sp-sync removes); the next hook starts the new
/// one. The stand-in for the old sp-sync is `sleep` run under its name.
#[test]
fn a_new_sp_sync_stops_the_old_one_running_from_the_same_folder() {
    let h = Home::new();
    assert!(h.install(&[]).status.success());
    let sync = h.prefix.join("bin/sp-sync");
    std::fs::copy("/bin/sleep", &sync).unwrap();
    let mut old = Command::new(&sync).arg("120").spawn().unwrap();

    let out = h.install(&[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("stopped the running sp-sync (the old version)"),
        "{}",
        text(&out.stdout)
    );
    let status = old.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGTERM),
        "{status:?}"
    );
    assert_eq!(
        std::fs::read(&sync).unwrap(),
        std::fs::read(bin_dir().join("sp-sync")).unwrap()
    );
}

/// DECISIONS 40: the local receiver install.sh sets up is a tier-2 sink (the page on this
/// machine shows each turn's prompt and answer); the dry run says so and changes nothing.
#[test]
fn the_local_receiver_is_added_at_tier_2() {
    let h = Home::new();
    let before = h.snapshot();
    // A port nothing answers on (8787 may hold the machine's own receiver, as in CI).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut c = h.script();
    c.env_remove("SP_NO_RECEIVER")
        .arg("--dry-run")
        .env("PREFIX", &h.prefix)
        .env("SP_CRONTAB", &h.crontab)
        .env("SP_RECEIVER_PORT", port.to_string())
        .current_dir(&h.root);
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "would add the sink 'local' (http://127.0.0.1:{port}, signed control, tier 2"
        )),
        "{stdout}"
    );
    assert_eq!(h.snapshot(), before);
    let script = std::fs::read_to_string(format!("{ROOT}/install.sh")).unwrap();
    let add: Vec<&str> = script
        .lines()
        .filter(|l| l.contains("sink add") && l.contains("--name local"))
        .collect();
    assert_eq!(add.len(), 1, "{add:?}");
    assert!(add[0].contains("--tier 2"), "{}", add[0]);
}

/// A local receiver port that is not a port is refused before anything is done, saying how to
/// fix it.
#[test]
fn a_receiver_port_that_is_not_a_port_is_refused() {
    let h = Home::new();
    let before = h.snapshot();
    for bad in ["abc", "0", "65536", "80a"] {
        let mut c = h.script();
        c.env_remove("SP_NO_RECEIVER")
            .arg("--dry-run")
            .env("PREFIX", &h.prefix)
            .env("SP_CRONTAB", &h.crontab)
            .env("SP_RECEIVER_PORT", bad)
            .current_dir(&h.root);
        let out = c.output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{bad}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "SP_RECEIVER_PORT must be a port number from 1 to 65535 (got '{bad}')"
            )),
            "{bad}: {stderr}"
        );
    }
    assert_eq!(h.snapshot(), before);
}

/// Issue 37: every page address install.sh prints (and the unit it writes describes) is one
/// where passkeys work: localhost, never the IP address the receiver listens on.
#[test]
fn install_sh_names_the_page_at_localhost() {
    let script = std::fs::read_to_string(format!("{ROOT}/install.sh")).unwrap();
    let pages: Vec<&str> = script
        .lines()
        .filter(|l| l.contains("page") && l.contains("http://"))
        .collect();
    assert!(pages.len() >= 2, "{pages:#?}");
    for line in pages {
        assert!(!line.contains("http://127.0.0.1"), "{line}");
        assert!(line.contains("http://localhost:"), "{line}");
    }
}

/// The processes whose executable is one of `dir`'s files (gone or not).
fn running_from(dir: &Path) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(exe) = std::fs::read_link(e.path().join("exe")) {
            let exe = exe.to_string_lossy().into_owned();
            if exe.starts_with(&format!("{}/", dir.display())) {
                found.push((pid, exe));
            }
        }
    }
    found
}

/// Issue 37: uninstall stops what install.sh or the hooks started from its binaries (sp-sync,
/// the hooks' `--while-live` one among them, and the local sp-receiver), so nothing keeps
/// running from a deleted binary; a program of the same name elsewhere is left running.
#[test]
fn uninstall_leaves_nothing_running_from_its_binaries() {
    let h = Home::new();
    assert!(h.install(&[]).status.success());
    let bin = h.prefix.join("bin");
    // Stand-ins that stay up as the real ones do (the real sp-sync --while-live exits once
    // no session is live, which would prove nothing): sleep, under our names.
    let mut children = Vec::new();
    for name in ["sp-sync", "sp-receiver"] {
        let exe = bin.join(name);
        std::fs::remove_file(&exe).ok();
        std::fs::copy("/bin/sleep", &exe).unwrap();
        children.push(Command::new(&exe).arg("300").spawn().unwrap());
    }
    let elsewhere = h.root.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::copy("/bin/sleep", elsewhere.join("sp-sync")).unwrap();
    let other = Command::new(elsewhere.join("sp-sync"))
        .arg("300")
        .spawn()
        .unwrap();
    // Whatever happens below, the stand-in elsewhere ends with the test.
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut other = Reap(other);
    assert_eq!(running_from(&bin).len(), 2, "{:?}", running_from(&bin));

    let out = h.install(&["--uninstall"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&format!("stopped what ran from {}", bin.display())),
        "{}",
        text(&out.stdout)
    );
    for mut c in children {
        let status = c.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGTERM),
            "{status:?}"
        );
    }
    assert_eq!(running_from(&bin), vec![]);
    assert!(!bin.join("sp-sync").exists());
    assert_eq!(
        other.0.try_wait().unwrap(),
        None,
        "another sp-sync was stopped"
    );
}

/// Issue 37: the test dependencies install changes no service. While scripts/deps-lib.sh's
/// apt-get runs, a policy-rc.d refuses every start; a unit the install enabled (caddy's on
/// port 80) is disabled again and a PostgreSQL cluster it made is dropped; what was enabled
/// before stays. Against a folder standing in for / and a stand-in apt-get that does what
/// Debian's caddy and postgresql packages do.
#[test]
fn test_deps_leave_no_service_enabled_or_started() {
    let h = Home::new();
    let sys = h.root.join("sys");
    let fake = h.root.join("fakebin");
    let log = h.root.join("calls.log");
    let wants = sys.join("etc/systemd/system/multi-user.target.wants");
    std::fs::create_dir_all(&wants).unwrap();
    std::fs::create_dir_all(&fake).unwrap();
    std::os::unix::fs::symlink("/lib/systemd/system/ssh.service", wants.join("ssh.service"))
        .unwrap();
    let script = |name: &str, body: &str| {
        let p = fake.join(name);
        std::fs::write(
            &p,
            format!(
                "#!/bin/bash\nlog='{}'\nsys='{}'\n{body}",
                log.display(),
                sys.display()
            ),
        )
        .unwrap();
        set_mode(&p, 0o755);
    };
    // As the packages' scripts do: start the service through policy-rc.d's say, enable it,
    // and postgresql-common makes the cluster `main`.
    script(
        "apt-get",
        r#"echo "apt-get $*" >>"$log"
[ "$1" = install ] || exit 0
if [ -x "$sys/usr/sbin/policy-rc.d" ] && ! "$sys/usr/sbin/policy-rc.d" caddy.service start; then
    echo "start refused" >>"$log"
else
    echo "caddy started" >>"$log"
fi
ln -s /lib/systemd/system/caddy.service "$sys/etc/systemd/system/multi-user.target.wants/caddy.service"
mkdir -p "$sys/etc/postgresql/17/main"
"#,
    );
    script("systemctl", r#"echo "systemctl $*" >>"$log""#);
    script(
        "pg_dropcluster",
        r#"echo "pg_dropcluster $*" >>"$log"; rm -r "$sys/etc/postgresql/$2/$3""#,
    );
    script("sudo", r#"[ "$1" = -n ] && shift; exec "$@""#);
    std::fs::create_dir_all(sys.join("usr/sbin")).unwrap();
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            ". '{ROOT}/scripts/deps-lib.sh'; deps_apt /nonexistent/caddy:caddy /nonexistent/initdb:postgresql; echo \"missing: ${{deps_missing[*]}}\""
        ))
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", fake.display()))
        .env("SP_DEPS_SYSROOT", &sys)
        .output()
        .unwrap();
    let said = text(&out.stdout);
    let calls = std::fs::read_to_string(&log).unwrap();
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert!(
        said.contains("missing: \n") || said.ends_with("missing: \n"),
        "{said}"
    );
    assert!(
        calls.contains("apt-get install -y -q caddy postgresql"),
        "{calls}"
    );
    assert!(calls.contains("start refused"), "{calls}");
    assert!(!calls.contains("caddy started"), "{calls}");
    assert!(
        calls.contains("systemctl disable --now caddy.service"),
        "{calls}"
    );
    assert!(!calls.contains("ssh.service"), "{calls}");
    assert!(calls.contains("pg_dropcluster --stop 17 main"), "{calls}");
    assert!(said.contains("disabled caddy.service"), "{said}");
    // As found: the policy gone, caddy not enabled, ssh still enabled, no cluster.
    assert!(!sys.join("usr/sbin/policy-rc.d").exists());
    assert!(std::fs::symlink_metadata(wants.join("caddy.service")).is_err());
    assert!(std::fs::symlink_metadata(wants.join("ssh.service")).is_ok());
    assert!(!sys.join("etc/postgresql/17/main").exists());
}
