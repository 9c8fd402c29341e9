//! `sp setup install|uninstall` and `sp hooks list|print`.
use super::{show, usage, Done};
use crate::config::Config;
use crate::harness::{Harness, SP_EVENT, SP_PERMISSION, SP_STOP};
use crate::setup::{self, cron, Action, Plan, Registration};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;

/// `--bin-dir`, else the folder this `sp` runs from (install.sh puts them side by side).
fn bin_dir(arg: Option<String>) -> Result<PathBuf> {
    let dir = match arg {
        Some(d) => PathBuf::from(d),
        None => std::env::current_exe()
            .context("cannot find where sp runs from; pass --bin-dir")?
            .parent()
            .map(PathBuf::from)
            .context("sp has no parent folder; pass --bin-dir")?,
    };
    // Harnesses run hooks from anywhere: the path must be absolute.
    Ok(std::fs::canonicalize(&dir).unwrap_or(if dir.is_absolute() {
        dir
    } else {
        std::env::current_dir()?.join(dir)
    }))
}

fn print_plan(p: &Plan, dry_run: bool) -> bool {
    let name = p.target.harness.name();
    let file = show(&p.path);
    let would = |s: &str| {
        if dry_run {
            format!("would {s}")
        } else {
            s.to_string()
        }
    };
    let list = |p: &Plan| {
        for a in &p.changes.added {
            println!("    + {a}");
        }
        for u in &p.changes.updated {
            println!("    ~ {u}");
        }
        for r in &p.changes.removed {
            println!("    - {r}");
        }
    };
    match &p.action {
        Action::NotInstalled => println!("  {name:<12} not installed (no {})", show(&p.target.dir)),
        Action::Unchanged => println!("  {name:<12} {file}: nothing to change"),
        Action::Malformed(m) => {
            println!("  {name:<12} {file}: NOT CHANGED: {m}");
            return false;
        }
        Action::Write {
            created, backup, ..
        } => {
            println!(
                "  {name:<12} {file}: {}",
                would(if *created { "create" } else { "update" })
            );
            list(p);
            if backup.is_some() {
                println!("    backup: {}", show(&setup::backup_path(&p.path)));
            }
        }
        Action::Restore { .. } => {
            println!(
                "  {name:<12} {file}: {}",
                would("restore from its backup (the file as it was before install)")
            );
            list(p);
        }
        Action::Delete => {
            println!(
                "  {name:<12} {file}: {} (it held only our hooks)",
                would("delete")
            );
            list(p);
        }
        Action::Strip { .. } => {
            println!(
                "  {name:<12} {file}: {} (it was edited since install, so the backup is not put back)",
                would("update")
            );
            list(p);
            println!(
                "    {} {}: it is out of date",
                would("remove the backup"),
                show(&setup::backup_path(&p.path))
            );
        }
    }
    let stub = show(&p.target.dir);
    match p.stub {
        setup::Stub::None => {}
        setup::Stub::Create => println!(
            "    {} {stub}/node_modules/ and package-lock.json, so OpenCode does not install @opencode-ai/plugin at every start",
            would("create")
        ),
        setup::Stub::Remove => println!(
            "    {} {stub}/node_modules/ and package-lock.json (created by install)",
            would("remove")
        ),
    }
    true
}

fn changed(p: &Plan) -> bool {
    p.stub != setup::Stub::None
        || matches!(
            p.action,
            Action::Write { .. } | Action::Restore { .. } | Action::Strip { .. } | Action::Delete
        )
}

pub fn install(dry_run: bool, bin_dir_arg: Option<String>, no_cron: bool) -> Result<Done> {
    let config = Config::load()
        .context("fix the config before registering hooks (timeouts depend on it)")?;
    let bin = bin_dir(bin_dir_arg)?;
    let missing: Vec<&str> = [SP_PERMISSION, SP_STOP, SP_EVENT, "sp-sync"]
        .into_iter()
        .filter(|b| !cron::is_executable(&bin.join(b)))
        .collect();
    if !missing.is_empty() && !dry_run {
        bail!(
            "{} has no {}; install the binaries there first (install.sh does), or pass --bin-dir",
            bin.display(),
            missing.join(", ")
        );
    }
    println!(
        "{}Hooks (pointing at {}):",
        if dry_run { "[dry run] " } else { "" },
        show(&bin)
    );
    let mut ok = true;
    let mut notes = Vec::new();
    let mut any = false;
    for t in setup::targets() {
        let p = setup::plan(&t, &bin, &config, true);
        ok &= print_plan(&p, dry_run);
        if !dry_run {
            setup::apply(&p).with_context(|| {
                format!("{}: cannot write {}", t.harness.name(), p.path.display())
            })?;
        }
        if !matches!(p.action, Action::NotInstalled | Action::Malformed(_)) {
            any = true;
            if let Some(n) = t.note {
                // The Codex trust step matters only when the file changed; the others always.
                if t.harness != Harness::Codex || changed(&p) {
                    notes.push(format!("{}: {n}", t.harness.name()));
                }
            }
            if setup::gemini_hooks_disabled(&t) {
                notes.push(format!(
                    "gemini-cli: hooks are turned off in {} (\"hooksConfig\": {{\"enabled\": false}}); set it to true",
                    show(&t.file)
                ));
            }
        }
    }
    if !any {
        println!(
            "  No harness found. Install one (Claude Code, Codex, Cursor, …), then run this again."
        );
    }
    println!();
    if no_cron {
        println!("Schedule: skipped (--no-cron).");
    } else {
        let sync = bin.join("sp-sync");
        match cron::install(&sync, dry_run)? {
            cron::Outcome::Added(l) => println!(
                "Schedule: {} crontab line:\n  {l}",
                if dry_run { "would add" } else { "added" }
            ),
            cron::Outcome::Replaced(l) => {
                println!(
                    "Schedule: {} our crontab line with:\n  {l}",
                    if dry_run { "would replace" } else { "replaced" }
                )
            }
            cron::Outcome::Unchanged(_) => println!("Schedule: the crontab line is in place."),
            cron::Outcome::NoCrontab(text) => println!("Schedule: {text}"),
            cron::Outcome::Removed | cron::Outcome::Absent => {}
        }
    }
    if !notes.is_empty() {
        println!();
        println!("Notes:");
        for n in notes {
            println!("  {n}");
        }
    }
    if !ok {
        println!();
        println!("Some settings files were left untouched (see NOT CHANGED above): fix them and run this again.");
        return Ok(Done::Problems);
    }
    Ok(Done::Ok)
}

pub fn uninstall(dry_run: bool, bin_dir_arg: Option<String>) -> Result<Done> {
    // Nothing here depends on the config: removal must work even with a broken one.
    let config = Config::default();
    let bin = bin_dir(bin_dir_arg)?;
    println!("{}Hooks:", if dry_run { "[dry run] " } else { "" });
    let mut ok = true;
    for t in setup::targets() {
        let p = setup::plan(&t, &bin, &config, false);
        if matches!(p.action, Action::NotInstalled) {
            continue;
        }
        ok &= print_plan(&p, dry_run);
        if !dry_run {
            setup::apply(&p).with_context(|| {
                format!("{}: cannot write {}", t.harness.name(), p.path.display())
            })?;
        }
    }
    println!();
    match cron::uninstall(dry_run)? {
        cron::Outcome::Removed => println!(
            "Schedule: {} our crontab line.",
            if dry_run { "would remove" } else { "removed" }
        ),
        cron::Outcome::Absent => println!("Schedule: no crontab line of ours."),
        _ => {
            if let Some(p) = cron::alternative_installed() {
                println!(
                    "Schedule: no crontab here. You installed {} by hand; remove it with:\n  {}",
                    show(&p),
                    if cfg!(target_os = "macos") {
                        format!("launchctl unload -w {0} && rm {0}", p.display())
                    } else {
                        format!(
                            "systemctl --user disable --now {0}.timer && rm {1}/{0}.timer {1}/{0}.service",
                            cron::SYSTEMD_UNIT,
                            cron::systemd_dir().display()
                        )
                    }
                );
            } else {
                println!("Schedule: no crontab here, nothing to remove.");
            }
        }
    }
    println!(
        "\nKept: the config ({}) and the state folder ({}). Delete them by hand if you want them gone.",
        show(&crate::paths::config_file()),
        show(&crate::paths::state_dir())
    );
    Ok(if ok { Done::Ok } else { Done::Problems })
}

pub fn list() -> Result<Done> {
    let config = Config::load().unwrap_or_default();
    let bin = bin_dir(None)?;
    for t in setup::targets() {
        let name = t.harness.name();
        let file = show(&t.file);
        match setup::inspect(&t, &bin, &config) {
            Registration::NotInstalled => {
                println!("{name:<12} not installed (no {})", show(&t.dir))
            }
            Registration::Malformed(m) => println!("{name:<12} {file}: cannot read: {m}"),
            Registration::Found { changes, programs } => {
                let state = if programs.is_empty() {
                    "no hooks of ours".to_string()
                } else if changes.is_empty() {
                    "registered, up to date".to_string()
                } else {
                    format!(
                        "registered, differs from this install ({} to add, {} to update, {} to remove)",
                        changes.added.len(),
                        changes.updated.len(),
                        changes.removed.len()
                    )
                };
                println!("{name:<12} {file}: {state}");
            }
        }
    }
    Ok(Done::Ok)
}

pub fn print(harness: &str, bin_dir_arg: Option<String>) -> Result<Done> {
    // ACP agents are not hooked: the editor runs them behind sp-acp (src/acp).
    if harness == crate::acp::HARNESS {
        print!("{}", crate::acp::zed_snippet(&bin_dir(bin_dir_arg)?));
        return Ok(Done::Ok);
    }
    let Some(h) = Harness::parse(harness) else {
        let names: Vec<&str> = Harness::ALL.iter().map(|h| h.name()).collect();
        return usage(format!(
            "unknown harness {harness:?}; use one of {}, acp",
            names.join(", ")
        ));
    };
    let config = Config::load().unwrap_or_default();
    let t = setup::target(h);
    print!("{}", setup::snippet(&t, &bin_dir(bin_dir_arg)?, &config));
    Ok(Done::Ok)
}
