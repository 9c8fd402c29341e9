//! `sp runs`: the headless runs sp-sync launched between turns (DECISIONS 38), and a run's
//! log.
use super::{usage, Done, DB_BUSY};
use crate::store;
use anyhow::Result;

/// `sp runs [--json]`: the newest runs, newest first.
pub fn list(json: bool) -> Result<Done> {
    let db = crate::paths::database_file();
    let rows = if db.exists() {
        store::open(&db, DB_BUSY)?.recent_runs(50)?
    } else {
        Vec::new()
    };
    if json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "id": r.id, "harness": r.harness, "kind": r.kind, "state": r.state,
                    "session": r.session_key, "new_session": r.session, "message": r.message_id,
                    "cwd": r.cwd, "exit": r.exit, "outcome": r.outcome, "detail": r.detail,
                    "created": crate::clock::format_ms(r.created_ms),
                    "log": crate::runs::log_path(&r.id),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(Done::Ok);
    }
    if rows.is_empty() {
        println!("No runs: nothing was delivered to an idle or ended session yet.");
        return Ok(Done::Ok);
    }
    for r in rows {
        let how = match (r.state.as_str(), r.outcome.as_deref()) {
            ("done", Some(o)) => format!("{o}, {}", r.exit.as_deref().unwrap_or("no exit")),
            (s, _) => s.to_string(),
        };
        println!(
            "Run {}: {} {} of {} in {}: {how}",
            r.id,
            r.harness,
            r.kind,
            r.session_key.as_deref().unwrap_or("a new session"),
            r.cwd,
        );
        if let Some(d) = &r.detail {
            println!("  {d}");
        }
    }
    println!("`sp runs log ID` shows a run's output.");
    Ok(Done::Ok)
}

/// `sp runs log ID`: what the run printed (stdout, then stderr).
pub fn log(id: &str) -> Result<Done> {
    if !crate::runs::valid_id(id) {
        return usage(format!("{id:?} is not a run id (`sp runs` lists them)"));
    }
    let mut any = false;
    for (what, path) in [
        ("stdout", crate::runs::log_path(id)),
        ("stderr", crate::runs::err_path(id)),
    ] {
        if let Ok(text) = std::fs::read(&path) {
            any = true;
            println!("== {what} ({})", path.display());
            println!("{}", String::from_utf8_lossy(&text).trim_end());
        }
    }
    if !any {
        return usage(format!("no log for run {id} (`sp runs` lists them)"));
    }
    Ok(Done::Ok)
}
