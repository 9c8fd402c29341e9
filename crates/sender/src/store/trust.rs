//! Signed control's machine-side state (DECISIONS 22): paired sinks, enrolled passkeys and the
//! nonce store. Keys arrive only through a verified enrollment proof (`sp pair`) or a
//! verified `key.add`; nothing here checks signatures, the callers do.
use super::Store;
use crate::clock::{self, Millis};
use crate::wire::signed::{TrustedKey, NONCE_TTL_MS};
use anyhow::Result;
use rusqlite::{params, OptionalExtension, Transaction};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairedMachine {
    pub sink: String,
    pub machine: String,
    pub token: String,
    pub rp_id: String,
    pub paired_at: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrolledKey {
    pub sink: String,
    pub key: TrustedKey,
    pub name: Option<String>,
    pub added_at: String,
    pub added_via: String,
}

impl Store {
    pub fn paired_machine(&self, sink: &str) -> Result<Option<PairedMachine>> {
        Ok(self
            .conn
            .query_row(
                "SELECT sink, machine, token, rp_id, paired_at FROM control_machines WHERE sink = ?1",
                [sink],
                |r| {
                    Ok(PairedMachine {
                        sink: r.get(0)?,
                        machine: r.get(1)?,
                        token: r.get(2)?,
                        rp_id: r.get(3)?,
                        paired_at: r.get(4)?,
                    })
                },
            )
            .optional()?)
    }

    /// Records a pairing whose proof verified: the machine (its token only on the first
    /// pairing; a later one keeps the token it has) and the key, in one transaction.
    pub fn enroll(
        &mut self,
        sink: &str,
        machine: &str,
        token: Option<&str>,
        rp_id: &str,
        key: &TrustedKey,
        name: Option<&str>,
    ) -> Result<()> {
        let now = clock::now_rfc3339();
        let tx = self.conn.transaction()?;
        let existing: Option<String> = tx
            .query_row(
                "SELECT machine FROM control_machines WHERE sink = ?1",
                [sink],
                |r| r.get(0),
            )
            .optional()?;
        match (existing, token) {
            // A new machine id with a first pairing's token: the receiver forgot the old one
            // (removed on its page). The old id, its token and its keys are void there.
            (Some(m), Some(t)) if m != machine => {
                tx.execute("DELETE FROM control_keys WHERE sink = ?1", [sink])?;
                tx.execute(
                    "UPDATE control_machines SET machine = ?2, token = ?3, rp_id = ?4, paired_at = ?5 WHERE sink = ?1",
                    params![sink, machine, t, rp_id, now],
                )?;
            }
            (Some(m), _) if m != machine => anyhow::bail!(
                "the receiver answered for machine {machine}, but this machine is {m} there, and handed over no token; run `sp control off {sink}` first to pair as a new machine"
            ),
            (Some(_), Some(t)) => {
                tx.execute(
                    "UPDATE control_machines SET token = ?2, rp_id = ?3 WHERE sink = ?1",
                    params![sink, t, rp_id],
                )?;
            }
            (Some(_), None) => {}
            (None, Some(t)) => {
                tx.execute(
                    "INSERT INTO control_machines (sink, machine, token, rp_id, paired_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![sink, machine, t, rp_id, now],
                )?;
            }
            (None, None) => anyhow::bail!(
                "the receiver paired a first key without handing over the machine's token; it does not follow the protocol"
            ),
        }
        tx.execute(
            "INSERT OR REPLACE INTO control_keys (sink, id, alg, spki, name, added_at, added_via) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pair')",
            params![sink, key.id, key.alg, key.spki, name, now],
        )?;
        // A pause from a refused machine token ends with a new pairing (events are sent with
        // it too, DECISIONS 33).
        tx.execute(
            "UPDATE sinks SET control_paused = NULL, events_paused = NULL WHERE name = ?1",
            [sink],
        )?;
        tx.commit()?;
        Ok(())
    }

    pub fn enrolled_keys(&self, sink: Option<&str>) -> Result<Vec<EnrolledKey>> {
        let mut st = self.conn.prepare(
            "SELECT sink, id, alg, spki, name, added_at, added_via FROM control_keys
             WHERE ?1 IS NULL OR sink = ?1 ORDER BY sink, added_at, id",
        )?;
        let rows = st.query_map([sink], |r| {
            Ok(EnrolledKey {
                sink: r.get(0)?,
                key: TrustedKey {
                    id: r.get(1)?,
                    alg: r.get(2)?,
                    spki: r.get(3)?,
                },
                name: r.get(4)?,
                added_at: r.get(5)?,
                added_via: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Removes one key, from every sink that holds it; the number of rows removed.
    pub fn remove_key(&mut self, id: &str) -> Result<usize> {
        Ok(self
            .conn
            .execute("DELETE FROM control_keys WHERE id = ?1", [id])?)
    }

    /// Forgets a paired sink: its machine id, token and keys.
    pub fn unpair(&mut self, sink: &str) -> Result<(usize, bool)> {
        let tx = self.conn.transaction()?;
        let keys = tx.execute("DELETE FROM control_keys WHERE sink = ?1", [sink])?;
        let machine = tx.execute("DELETE FROM control_machines WHERE sink = ?1", [sink])? > 0;
        if machine {
            // Events go with the sink's token again: a pause from the machine's ends.
            tx.execute(
                "UPDATE sinks SET control_paused = NULL, events_paused = NULL WHERE name = ?1",
                [sink],
            )?;
        }
        tx.commit()?;
        Ok((keys, machine))
    }

    /// The folder a session reported from its own hooks (never from a command): `None` when no
    /// session of this key has run on this machine, `Some(None)` when it named no folder.
    /// The permission mode the session's hooks last reported (DECISIONS 36), if any.
    pub fn session_mode(&self, key: &str) -> Result<Option<String>> {
        Ok(self
            .conn
            .prepare_cached("SELECT permission_mode FROM sessions WHERE key = ?1")?
            .query_row([key], |r| r.get(0))
            .optional()?
            .flatten())
    }

    pub fn session_cwd(&self, key: &str) -> Result<Option<Option<String>>> {
        Ok(self
            .conn
            .prepare_cached("SELECT cwd FROM sessions WHERE key = ?1")?
            .query_row([key], |r| r.get(0))
            .optional()?)
    }
}

/// docs/protocol.md#control-5 step 5, inside the transaction that stores the command: whether `nonce` is
/// new (recording it) or was seen in the last 25 h.
pub(crate) fn fresh_nonce(tx: &Transaction, nonce: &str, now: Millis) -> Result<bool> {
    tx.prepare_cached("DELETE FROM control_nonces WHERE seen_ms < ?1")?
        .execute(params![now - NONCE_TTL_MS])?;
    Ok(tx
        .prepare_cached("INSERT OR IGNORE INTO control_nonces(nonce, seen_ms) VALUES (?1, ?2)")?
        .execute(params![nonce, now])?
        == 1)
}

/// A key a trusted device vouched for with a verified `key.add`, in the same transaction.
pub(crate) fn enroll_vouched_key(
    tx: &Transaction,
    sink: &str,
    key: &TrustedKey,
    name: Option<&str>,
    at: &str,
) -> Result<()> {
    tx.prepare_cached(
        "INSERT OR IGNORE INTO control_keys (sink, id, alg, spki, name, added_at, added_via) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'key.add')",
    )?
    .execute(params![sink, key.id, key.alg, key.spki, name, at])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let d = tempfile::tempdir().unwrap();
        let s =
            crate::store::open(&d.path().join("c.db"), std::time::Duration::from_secs(1)).unwrap();
        (d, s)
    }

    #[test]
    fn a_nonce_is_seen_for_25_hours_then_forgotten() {
        let (_d, mut s) = store();
        let tx = s.conn.transaction().unwrap();
        assert!(fresh_nonce(&tx, "n1", 1_000).unwrap());
        assert!(!fresh_nonce(&tx, "n1", 2_000).unwrap());
        assert!(!fresh_nonce(&tx, "n1", 1_000 + NONCE_TTL_MS).unwrap());
        assert!(fresh_nonce(&tx, "n1", 1_001 + NONCE_TTL_MS).unwrap());
    }

    #[test]
    fn a_first_pairing_needs_the_machine_token_and_one_machine_per_sink() {
        let (_d, mut s) = store();
        let k = TrustedKey {
            id: "k".repeat(16),
            alg: -7,
            spki: "AAAA".into(),
        };
        assert!(s
            .enroll("r", "m_aaaaaaaaaaaaaaaaaa", None, "rp", &k, None)
            .is_err());
        s.enroll(
            "r",
            "m_aaaaaaaaaaaaaaaaaa",
            Some("tok"),
            "rp",
            &k,
            Some("laptop"),
        )
        .unwrap();
        let k2 = TrustedKey {
            id: "j".repeat(16),
            ..k.clone()
        };
        s.enroll("r", "m_aaaaaaaaaaaaaaaaaa", None, "rp", &k2, None)
            .unwrap();
        assert_eq!(s.paired_machine("r").unwrap().unwrap().token, "tok");
        // Another machine id without a first pairing's token is refused.
        assert!(s
            .enroll("r", "m_bbbbbbbbbbbbbbbbbb", None, "rp", &k2, None)
            .is_err());
        assert_eq!(s.enrolled_keys(Some("r")).unwrap().len(), 2);
        assert_eq!(s.remove_key(&k.id).unwrap(), 1);
        assert_eq!(s.unpair("r").unwrap(), (1, true));
        assert!(s.paired_machine("r").unwrap().is_none());
    }

    /// The receiver forgot the machine (removed on its page) and paired it as a new one: the
    /// new id and token replace the old, whose keys are dropped.
    #[test]
    fn a_new_machine_id_with_its_token_replaces_the_removed_one() {
        let (_d, mut s) = store();
        let k = TrustedKey {
            id: "k".repeat(16),
            alg: -7,
            spki: "AAAA".into(),
        };
        let k2 = TrustedKey {
            id: "j".repeat(16),
            ..k.clone()
        };
        s.enroll("r", "m_aaaaaaaaaaaaaaaaaa", Some("tok"), "rp", &k, None)
            .unwrap();
        s.enroll("r", "m_bbbbbbbbbbbbbbbbbb", Some("t2"), "rp", &k2, None)
            .unwrap();
        let m = s.paired_machine("r").unwrap().unwrap();
        assert_eq!(
            (m.machine.as_str(), m.token.as_str()),
            ("m_bbbbbbbbbbbbbbbbbb", "t2")
        );
        let keys: Vec<String> = s
            .enrolled_keys(Some("r"))
            .unwrap()
            .into_iter()
            .map(|k| k.key.id)
            .collect();
        assert_eq!(keys, vec![k2.id.clone()]);
    }
}
