//! `sp grants`: the grants this machine keeps for a session (DECISIONS 30), and revoking one.
use super::{usage, Done, DB_BUSY};
use crate::store;
use anyhow::Result;

/// `sp grants [--json]`: the live grants, oldest first.
pub fn list(json: bool) -> Result<Done> {
    let db = crate::paths::database_file();
    let rows = if db.exists() {
        store::open(&db, DB_BUSY)?.live_grants()?
    } else {
        Vec::new()
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(Done::Ok);
    }
    if rows.is_empty() {
        println!("No grants: every permission prompt is asked.");
        return Ok(Done::Ok);
    }
    for g in rows {
        let used = match g.used {
            0 => "not used yet".to_string(),
            1 => "used once".to_string(),
            n => format!("used {n} times"),
        };
        // The summary names the tool already where the harness's does ("Bash echo hi").
        let summary = crate::wire::text::truncate(&g.summary.replace('\n', " "), 80);
        let call = if summary.starts_with(&g.tool) {
            summary
        } else {
            format!("{} {summary}", g.tool)
        };
        println!(
            "Grant {}: {} `{call}`\n  session {}, until {}; set from {}'s page, {used}",
            g.id, g.decision, g.session, g.until_at, g.who,
        );
    }
    println!("Each ends with its session; `sp grants revoke ID` ends one now.");
    Ok(Done::Ok)
}

/// `sp grants revoke ID`: the next identical call of that session is asked again.
pub fn revoke(id: &str) -> Result<Done> {
    let Ok(n) = id.parse::<i64>() else {
        return usage(format!(
            "grant id {id:?} is not a number; `sp grants` lists them"
        ));
    };
    let mut store = store::open(&crate::paths::database_file(), DB_BUSY)?;
    if store.revoke_grant(n)? {
        println!("Grant {n} revoked: the next such call is asked again.");
        Ok(Done::Ok)
    } else {
        anyhow::bail!("no live grant {n}; `sp grants` lists them")
    }
}
