//! Signed control's machines: pairings (codes, check digits, the passkey's key and proof),
//! paired machines with the SHA-256 of each token, and the keys their approvals carried.

use rusqlite::{params, OptionalExtension};
use serde_json::{json, Value};

use super::Db;

// The pairing's SQL, one text for both stores (pg_pairing.rs runs it on PostgreSQL).
pub(super) const MACHINE_KNOWN: &str = "SELECT 1 FROM machines WHERE id = ?1";
pub(super) const MACHINE_BY_TOKEN: &str = "SELECT id FROM machines WHERE token_hash = ?1";
pub(super) const CREATE_PAIRING: &str =
    "INSERT INTO pairings(code, machine, check_digits, name, created_ms, expires_ms) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
pub(super) const PAIRING: &str =
    "SELECT machine, check_digits, name, expires_ms, key, proof, token_given \
    FROM pairings WHERE code = ?1";
pub(super) const APPROVE_PAIRING: &str =
    "UPDATE pairings SET key = ?2, proof = ?3, paired_ms = ?4 \
    WHERE code = ?1 AND key IS NULL AND expires_ms > ?4";
pub(super) const PAIRING_MACHINE: &str = "SELECT machine, name FROM pairings WHERE code = ?1";
pub(super) const PAIR_MACHINE: &str =
    "INSERT INTO machines(id, name, paired_ms) VALUES (?1, ?2, ?3) \
    ON CONFLICT(id) DO UPDATE SET paired_ms = excluded.paired_ms, \
    name = COALESCE(excluded.name, machines.name)";
pub(super) const ADD_MACHINE_KEY: &str =
    "INSERT INTO machine_keys(machine, id, alg, spki, added_ms) VALUES (?1, ?2, ?3, ?4, ?5) \
    ON CONFLICT(machine, id) DO UPDATE SET alg = excluded.alg, spki = excluded.spki, \
    added_ms = excluded.added_ms";
pub(super) const GIVE_TOKEN: &str = "UPDATE pairings SET token_given = 1 \
    WHERE code = ?1 AND token_given = 0 AND key IS NOT NULL";
pub(super) const SET_TOKEN: &str = "UPDATE machines SET token_hash = ?2 \
    WHERE id = (SELECT machine FROM pairings WHERE code = ?1) AND token_hash IS NULL";
pub(super) const MACHINE_KEYS: &str = "SELECT id, alg, spki FROM machine_keys WHERE machine = ?1";
/// A machine's last contact, when the one stored is older than `?3` (see
/// [`super::SEEN_EVERY_MS`]).
pub(super) const MACHINE_SEEN: &str =
    "UPDATE machines SET seen_ms = ?2 WHERE id = ?1 AND (seen_ms IS NULL OR seen_ms <= ?3)";
/// A session's machine, while that machine is still paired (events.rs asks it too).
pub(super) const SESSION_MACHINE: &str = "SELECT m.id FROM sessions s \
    LEFT JOIN machines m ON m.id = s.machine_id WHERE s.key = ?1";
/// The machine a session is bound to, paired here or removed, and whether it is paired.
pub(super) const SESSION_OWNER: &str = "SELECT s.machine_id, m.id IS NOT NULL FROM sessions s \
    LEFT JOIN machines m ON m.id = s.machine_id WHERE s.key = ?1";
/// Whether a session is bound to a machine (a removed one's id too).
pub(super) const MACHINE_HAS_SESSIONS: &str =
    "SELECT 1 FROM sessions WHERE machine_id = ?1 LIMIT 1";
/// Forgetting a machine, in order (the first says whether it was there).
pub(super) const REMOVE_MACHINE: [&str; 4] = [
    "DELETE FROM machines WHERE id = ?1",
    "DELETE FROM machine_keys WHERE machine = ?1",
    "DELETE FROM pairings WHERE machine = ?1",
    "DELETE FROM messages WHERE machine = ?1 \
    AND NOT EXISTS (SELECT 1 FROM acks a WHERE a.id = messages.id)",
];

/// One pairing (signed control).
pub(crate) struct Pairing {
    pub machine: String,
    pub check: String,
    pub name: Option<String>,
    pub expires_ms: i64,
    /// The key and proof the page's passkey produced (JSON), once approved.
    pub key: Option<String>,
    pub proof: Option<String>,
    pub token_given: bool,
}

impl Db {
    /// Whether `id` is a paired machine.
    pub fn machine_known(&self, id: &str) -> rusqlite::Result<bool> {
        self.conn
            .query_row(MACHINE_KNOWN, params![id], |_| Ok(()))
            .optional()
            .map(|o| o.is_some())
    }

    /// The machine whose token hashes to `hash`.
    pub fn machine_by_token(&self, hash: &str) -> rusqlite::Result<Option<String>> {
        self.conn
            .query_row(MACHINE_BY_TOKEN, params![hash], |r| r.get(0))
            .optional()
    }

    /// The most recently paired machine: `{machine, name}`.
    pub fn latest_machine(&self) -> rusqlite::Result<Option<Value>> {
        self.conn
            .query_row(
                "SELECT id, name FROM machines ORDER BY paired_ms DESC, rowid DESC LIMIT 1",
                [],
                |r| {
                    Ok(json!({"machine": r.get::<_, String>(0)?, "name": r.get::<_, Option<String>>(1)?}))
                },
            )
            .optional()
    }

    #[allow(clippy::too_many_arguments)]
    pub fn create_pairing(
        &mut self,
        code: &str,
        machine: &str,
        check: &str,
        name: Option<&str>,
        now_ms: i64,
        expires_ms: i64,
    ) -> rusqlite::Result<()> {
        self.conn.execute(
            CREATE_PAIRING,
            params![code, machine, check, name, now_ms, expires_ms],
        )?;
        Ok(())
    }

    /// A pairing by its code.
    pub fn pairing(&self, code: &str) -> rusqlite::Result<Option<Pairing>> {
        self.conn
            .query_row(PAIRING, params![code], |r| {
                Ok(Pairing {
                    machine: r.get(0)?,
                    check: r.get(1)?,
                    name: r.get(2)?,
                    expires_ms: r.get(3)?,
                    key: r.get(4)?,
                    proof: r.get(5)?,
                    token_given: r.get::<_, i64>(6)? != 0,
                })
            })
            .optional()
    }

    /// Records what the page's passkey produced for a pending, unexpired pairing, and makes
    /// the machine a paired one. Returns false when the pairing was no longer pending.
    pub fn approve_pairing(
        &mut self,
        code: &str,
        key: &Value,
        proof: &Value,
        now_ms: i64,
    ) -> rusqlite::Result<bool> {
        let tx = self.conn.transaction()?;
        let n = tx.execute(
            APPROVE_PAIRING,
            params![code, key.to_string(), proof.to_string(), now_ms],
        )?;
        if n == 0 {
            return Ok(false);
        }
        let (machine, name): (String, Option<String>) =
            tx.query_row(PAIRING_MACHINE, params![code], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
        tx.execute(PAIR_MACHINE, params![machine, name, now_ms])?;
        tx.execute(
            ADD_MACHINE_KEY,
            params![
                machine,
                key["id"].as_str().unwrap_or_default(),
                key["alg"].as_i64().unwrap_or_default(),
                key["spki"].as_str().unwrap_or_default(),
                now_ms
            ],
        )?;
        tx.commit()?;
        Ok(true)
    }

    /// Hands out the machine token of an approved pairing: `Some(())` when this is the
    /// machine's first token (its hash is stored now, the caller returns the token once);
    /// `None` when the machine already has one or this pairing already gave one.
    pub fn give_token(&mut self, code: &str, token_hash: &str) -> rusqlite::Result<bool> {
        let tx = self.conn.transaction()?;
        let n = tx.execute(GIVE_TOKEN, params![code])?;
        if n == 0 {
            return Ok(false);
        }
        let n = tx.execute(SET_TOKEN, params![code, token_hash])?;
        tx.commit()?;
        Ok(n == 1)
    }

    /// The keys the page's approvals carried for `machine`: `(id, alg, spki)`.
    pub fn machine_keys(&self, machine: &str) -> rusqlite::Result<Vec<(String, i64, String)>> {
        let mut st = self.conn.prepare_cached(MACHINE_KEYS)?;
        let rows = st.query_map(params![machine], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        rows.collect()
    }

    /// Every paired machine as the page shows it, oldest pairing first: `{machine, name,
    /// paired_ms, keys: [key id…]}`.
    pub fn machines(&self) -> rusqlite::Result<Vec<Value>> {
        let mut st = self.conn.prepare_cached(
            "SELECT m.id, m.name, m.paired_ms,
                    (SELECT json_group_array(k.id) FROM machine_keys k WHERE k.machine = m.id),
                    m.seen_ms
             FROM machines m ORDER BY m.paired_ms, m.rowid",
        )?;
        let rows = st.query_map([], |r| {
            let keys: String = r.get(3)?;
            Ok(json!({
                "machine": r.get::<_, String>(0)?,
                "name": r.get::<_, Option<String>>(1)?,
                "paired_ms": r.get::<_, i64>(2)?,
                "keys": serde_json::from_str::<Value>(&keys).unwrap_or(json!([])),
                "seen_ms": r.get::<_, Option<i64>>(4)?,
            }))
        })?;
        rows.collect()
    }

    /// Whether a session is bound to machine `id` (a removed machine's too): pairing again,
    /// that machine gets its id back, and with it its sessions.
    pub fn machine_has_sessions(&self, id: &str) -> rusqlite::Result<bool> {
        self.conn
            .query_row(MACHINE_HAS_SESSIONS, params![id], |_| Ok(()))
            .optional()
            .map(|o| o.is_some())
    }

    /// Notes the machine's contact at `now_ms` unless one was noted within
    /// [`super::SEEN_EVERY_MS`]; whether it was written.
    pub fn machine_seen(&mut self, id: &str, now_ms: i64) -> rusqlite::Result<bool> {
        let n = self.conn.execute(
            MACHINE_SEEN,
            params![id, now_ms, now_ms - super::SEEN_EVERY_MS],
        )?;
        Ok(n > 0)
    }

    /// Forgets a machine: its token, keys, pairings and what is queued for it. Its sessions
    /// stay bound to its id (the page signs nothing for them): the shared token may send for
    /// them (the machine, unpaired, sends with it), no other machine's token may, and the
    /// machine paired again takes them back. Returns whether the machine was there.
    pub fn remove_machine(&mut self, id: &str) -> rusqlite::Result<bool> {
        let tx = self.conn.transaction()?;
        let n = tx.execute(REMOVE_MACHINE[0], params![id])?;
        for sql in &REMOVE_MACHINE[1..] {
            tx.execute(sql, params![id])?;
        }
        tx.commit()?;
        Ok(n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairings_expire_approve_once_and_give_one_token() {
        let mut db = Db::open_memory().unwrap();
        let key = json!({"id": "k1", "alg": -7, "spki": "AAAA"});
        let proof = json!({"cred": "k1", "ad": "a", "cd": "c", "sig": "s"});
        db.create_pairing("old", "m_a", "123456", None, 0, 1000)
            .unwrap();
        assert!(
            !db.approve_pairing("old", &key, &proof, 1000).unwrap(),
            "expired"
        );
        assert!(!db.machine_known("m_a").unwrap());
        db.create_pairing("c1", "m_a", "123456", Some("laptop"), 0, 10_000)
            .unwrap();
        assert!(!db.give_token("c1", "h1").unwrap(), "not approved yet");
        assert!(db.approve_pairing("c1", &key, &proof, 5).unwrap());
        assert!(!db.approve_pairing("c1", &key, &proof, 6).unwrap(), "once");
        assert!(db.machine_known("m_a").unwrap());
        assert!(db.give_token("c1", "h1").unwrap());
        assert!(!db.give_token("c1", "h2").unwrap(), "one answer only");
        assert_eq!(db.machine_by_token("h1").unwrap().as_deref(), Some("m_a"));
        // A second pairing of the same machine never replaces its token.
        db.create_pairing("c2", "m_a", "654321", None, 7, 10_000)
            .unwrap();
        assert!(db.approve_pairing("c2", &key, &proof, 8).unwrap());
        assert!(!db.give_token("c2", "h3").unwrap());
        assert_eq!(db.machine_by_token("h3").unwrap(), None);
        assert_eq!(db.latest_machine().unwrap().unwrap()["name"], "laptop");
        let listed = db.machines().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0]["keys"], json!(["k1"]));
        assert!(db.remove_machine("m_a").unwrap());
        assert!(!db.remove_machine("m_a").unwrap());
        assert_eq!(db.machine_by_token("h1").unwrap(), None);
        assert!(db.pairing("c1").unwrap().is_none());
    }
}
