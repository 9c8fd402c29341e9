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
    println!("ID  SESSION  TOOL  INPUT  DECISION  UNTIL  (BY, USED)");
    for g in rows {
        println!(
            "{}  {}  {}  {}  {}  {}  ({}, used {} more time(s))",
            g.id,
            g.session,
            g.tool,
            crate::wire::text::truncate(&g.summary.replace('\n', " "), 80),
            g.decision,
            g.until_at,
            g.who,
            g.used
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
