//! A test's own way into sp-receiver's queue (the binary has no test door): a row written into
//! its database file as the receiver writes one for a signed envelope, or as one that meddles.
#![allow(dead_code)]
use serde_json::{json, Value};
use std::path::Path;

/// Writes `envelope` (its `id` replaced by a new one) as a `permission.answer` for `machine`
/// and `session` into the receiver database at `db`, expiring in 120 s. Returns the new id.
pub fn inject_answer(db: &Path, machine: &str, session: &str, envelope: &Value) -> String {
    let id = ulid::Ulid::new().to_string();
    let mut env = envelope.clone();
    env["id"] = json!(id);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    super::receiver::open_db(db)
        .execute(
            "INSERT INTO messages(id, session, kind, body, expires_ms, enqueued_ms, enqueued_at, machine)
             VALUES (?1, ?2, 'permission.answer', ?3, ?4, ?5, 'test', ?6)",
            rusqlite::params![id, session, env.to_string(), now + 120_000, now, machine],
        )
        .unwrap();
    id
}
