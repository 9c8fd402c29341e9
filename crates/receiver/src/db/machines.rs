//! Signed control's machines: pairings (codes, check digits, the passkey's key and proof),
//! paired machines with the SHA-256 of each token, and the keys their approvals carried;
//! written once for both stores (driver.rs). Approving and handing out the token are each
//! one transaction whose conditional UPDATE decides, so two receivers racing on one code
//! give one approval and one token.

use serde::Serialize;
use serde_json::Value;
use spwire::signed::TrustedKey;

use super::driver::{args, Conn, Engine, Row};
use super::store::PairingStore;

// The pairing's SQL, one text for both stores.
const MACHINE_KNOWN: &str = "SELECT 1 FROM machines WHERE id = ?1";
const MACHINE_BY_TOKEN: &str = "SELECT id FROM machines WHERE token_hash = ?1";
const CREATE_PAIRING: &str =
    "INSERT INTO pairings(code, machine, check_digits, name, created_ms, expires_ms) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
const PAIRING: &str = "SELECT machine, check_digits, name, expires_ms, key, proof, token_given \
    FROM pairings WHERE code = ?1";
const APPROVE_PAIRING: &str = "UPDATE pairings SET key = ?2, proof = ?3, paired_ms = ?4 \
    WHERE code = ?1 AND key IS NULL AND expires_ms > ?4";
const PAIRING_MACHINE: &str = "SELECT machine, name FROM pairings WHERE code = ?1";
const PAIR_MACHINE: &str = "INSERT INTO machines(id, name, paired_ms) VALUES (?1, ?2, ?3) \
    ON CONFLICT(id) DO UPDATE SET paired_ms = excluded.paired_ms, \
    name = COALESCE(excluded.name, machines.name)";
const ADD_MACHINE_KEY: &str =
    "INSERT INTO machine_keys(machine, id, alg, spki, added_ms) VALUES (?1, ?2, ?3, ?4, ?5) \
    ON CONFLICT(machine, id) DO UPDATE SET alg = excluded.alg, spki = excluded.spki, \
    added_ms = excluded.added_ms";
const GIVE_TOKEN: &str = "UPDATE pairings SET token_given = 1 \
    WHERE code = ?1 AND token_given = 0 AND key IS NOT NULL";
const SET_TOKEN: &str = "UPDATE machines SET token_hash = ?2 \
    WHERE id = (SELECT machine FROM pairings WHERE code = ?1) AND token_hash IS NULL";
const MACHINE_KEYS: &str = "SELECT id, alg, spki FROM machine_keys WHERE machine = ?1";
/// A machine's last contact, when the one stored is older than `?3` (see
/// [`super::SEEN_EVERY_MS`]).
const MACHINE_SEEN: &str =
    "UPDATE machines SET seen_ms = ?2 WHERE id = ?1 AND (seen_ms IS NULL OR seen_ms <= ?3)";
/// Whether a session is bound to a machine (a removed one's id too).
const MACHINE_HAS_SESSIONS: &str = "SELECT 1 FROM sessions WHERE machine_id = ?1 LIMIT 1";

/// Every paired machine with its keys' ids, one row per key (or one with a NULL key), oldest
/// pairing first, each machine's keys by id. Where the engines differ: a tie in `paired_ms`
/// (one millisecond) goes by SQLite's `rowid`, the order the machines were first paired in;
/// PostgreSQL keeps no insertion order for this table (no identity column, and no migration
/// for one), so there by id ([`Conn::insertion_order`]).
fn machines_sql(c: &dyn Conn) -> String {
    format!(
        "SELECT m.id, m.name, m.paired_ms, m.seen_ms, k.id FROM machines m \
        LEFT JOIN machine_keys k ON k.machine = m.id \
        ORDER BY m.paired_ms, m.{}, k.id COLLATE BINARY",
        c.insertion_order("id")
    )
}

/// A session's machine, while that machine is still paired (events.rs asks it too).
pub(super) const SESSION_MACHINE: &str = "SELECT m.id FROM sessions s \
    LEFT JOIN machines m ON m.id = s.machine_id WHERE s.key = ?1";
/// The machine a session is bound to, paired here or removed, and whether it is paired.
pub(super) const SESSION_OWNER: &str = "SELECT s.machine_id, m.id IS NOT NULL FROM sessions s \
    LEFT JOIN machines m ON m.id = s.machine_id WHERE s.key = ?1";
/// Forgetting a machine, in order (the first says whether it was there).
const REMOVE_MACHINE: [&str; 4] = [
    "DELETE FROM machines WHERE id = ?1",
    "DELETE FROM machine_keys WHERE machine = ?1",
    "DELETE FROM pairings WHERE machine = ?1",
    "DELETE FROM messages WHERE machine = ?1 \
    AND NOT EXISTS (SELECT 1 FROM acks a WHERE a.id = messages.id)",
];

/// A pairing as made: its code, the machine it pairs, the check digits and name it asks
/// with, and when it expires.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NewPairing<'a> {
    pub code: &'a str,
    pub machine: &'a str,
    pub check: &'a str,
    pub name: Option<&'a str>,
    pub expires_ms: i64,
}

/// What the page's passkey produced to approve a pairing: its key (the machine's key from
/// now on) and the proof it signed; each stored as its JSON.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Approval<'a> {
    pub key: &'a TrustedKey,
    pub proof: &'a Value,
}

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

impl Pairing {
    fn from_row(r: &Row) -> anyhow::Result<Pairing> {
        Ok(Pairing {
            machine: r.text(0)?,
            check: r.text(1)?,
            name: r.opt_text(2)?,
            expires_ms: r.int(3)?,
            key: r.opt_text(4)?,
            proof: r.opt_text(5)?,
            token_given: r.int(6)? != 0,
        })
    }
}

/// The most recently paired machine, as the page's state names it (`{machine, name}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct LatestMachine {
    pub machine: String,
    pub name: Option<String>,
}

/// A paired machine as the page lists it: `{machine, name, paired_ms, keys: [key id…],
/// seen_ms}` (the JSON the page's state carries, in this order).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Machine {
    pub machine: String,
    pub name: Option<String>,
    pub paired_ms: i64,
    pub keys: Vec<String>,
    /// Its last contact (written at most every [`super::SEEN_EVERY_MS`]), if any.
    pub seen_ms: Option<i64>,
}

/// Forgets a machine (see [`PairingStore::remove_machine`]); whether it was there.
fn remove_machine(c: &mut dyn Conn, id: &str) -> anyhow::Result<bool> {
    let n = c.execute(REMOVE_MACHINE[0], args![id])?;
    for sql in &REMOVE_MACHINE[1..] {
        c.execute(sql, args![id])?;
    }
    Ok(n > 0)
}

impl<E: Engine> PairingStore for E {
    /// Whether `id` is a paired machine.
    fn machine_known(&self, id: &str) -> anyhow::Result<bool> {
        self.conn(|c| Ok(c.row(MACHINE_KNOWN, args![id])?.is_some()))
    }

    /// The machine whose token hashes to `hash`.
    fn machine_by_token(&self, hash: &str) -> anyhow::Result<Option<String>> {
        self.conn(|c| {
            c.row(MACHINE_BY_TOKEN, args![hash])?
                .map(|r| r.text(0))
                .transpose()
        })
    }

    fn create_pairing(&self, p: &NewPairing<'_>, now_ms: i64) -> anyhow::Result<()> {
        let a = args![p.code, p.machine, p.check, p.name, now_ms, p.expires_ms];
        self.conn(|c| c.execute(CREATE_PAIRING, a).map(drop))
    }

    /// A pairing by its code.
    fn pairing(&self, code: &str) -> anyhow::Result<Option<Pairing>> {
        self.conn(|c| {
            c.row(PAIRING, args![code])?
                .map(|r| Pairing::from_row(&r))
                .transpose()
        })
    }

    /// Records what the page's passkey produced for a pending, unexpired pairing, and makes
    /// the machine a paired one. Returns false when the pairing was no longer pending.
    fn approve_pairing(&self, code: &str, a: &Approval<'_>, now_ms: i64) -> anyhow::Result<bool> {
        let key_text = serde_json::to_string(a.key)?;
        let proof_text = a.proof.to_string();
        self.tx(|c| {
            if c.execute(
                APPROVE_PAIRING,
                args![code, &*key_text, &*proof_text, now_ms],
            )? == 0
            {
                return Ok(false);
            }
            let r = c
                .row(PAIRING_MACHINE, args![code])?
                .ok_or_else(|| anyhow::anyhow!("pairing {code} gone"))?;
            let (machine, name) = (r.text(0)?, r.opt_text(1)?);
            c.execute(PAIR_MACHINE, args![&*machine, name.as_deref(), now_ms])?;
            let k = a.key;
            c.execute(
                ADD_MACHINE_KEY,
                args![&*machine, &*k.id, k.alg, &*k.spki, now_ms],
            )?;
            Ok(true)
        })
    }

    /// Hands out the machine token of an approved pairing: true when this is the machine's
    /// first token (its hash is stored now, the caller returns the token once); false when
    /// the machine already has one or this pairing already gave one.
    fn give_token(&self, code: &str, token_hash: &str) -> anyhow::Result<bool> {
        self.tx(|c| {
            if c.execute(GIVE_TOKEN, args![code])? == 0 {
                return Ok(false);
            }
            Ok(c.execute(SET_TOKEN, args![code, token_hash])? == 1)
        })
    }

    /// The keys the page's approvals carried for `machine`: what its signed commands are
    /// verified with (the wire's own type).
    fn machine_keys(&self, machine: &str) -> anyhow::Result<Vec<TrustedKey>> {
        self.conn(|c| {
            c.rows(MACHINE_KEYS, args![machine])?
                .iter()
                .map(|r| {
                    Ok(TrustedKey {
                        id: r.text(0)?,
                        alg: r.int(1)?,
                        spki: r.text(2)?,
                    })
                })
                .collect()
        })
    }

    /// The last machine [`PairingStore::machines`] lists.
    fn latest_machine(&self) -> anyhow::Result<Option<LatestMachine>> {
        Ok(self.machines()?.pop().map(|m| LatestMachine {
            machine: m.machine,
            name: m.name,
        }))
    }

    /// Every paired machine as the page shows it, oldest pairing first.
    fn machines(&self) -> anyhow::Result<Vec<Machine>> {
        self.conn(|c| {
            let sql = machines_sql(c);
            let mut out: Vec<Machine> = Vec::new();
            for r in c.rows(&sql, args![])? {
                let id = r.text(0)?;
                // One row per key: a machine's rows come together (ordered by machine).
                if out.last().is_none_or(|m| m.machine != id) {
                    out.push(Machine {
                        machine: id,
                        name: r.opt_text(1)?,
                        paired_ms: r.int(2)?,
                        keys: Vec::new(),
                        seen_ms: r.opt_int(3)?,
                    });
                }
                if let (Some(m), Some(key)) = (out.last_mut(), r.opt_text(4)?) {
                    m.keys.push(key);
                }
            }
            Ok(out)
        })
    }

    /// Forgets a machine: its token, keys, pairings and what is queued for it. Its sessions
    /// stay bound to its id (the page signs nothing for them): the shared token may send for
    /// them (the machine, unpaired, sends with it), no other machine's token may, and the
    /// machine paired again takes them back. Returns whether the machine was there.
    fn remove_machine(&self, id: &str) -> anyhow::Result<bool> {
        self.tx(|c| remove_machine(c, id))
    }

    /// Whether a session is bound to machine `id` (a removed machine's too): pairing again,
    /// that machine gets its id back, and with it its sessions.
    fn machine_has_sessions(&self, id: &str) -> anyhow::Result<bool> {
        self.conn(|c| Ok(c.row(MACHINE_HAS_SESSIONS, args![id])?.is_some()))
    }

    /// Notes the machine's contact at `now_ms` unless one was noted within
    /// [`super::SEEN_EVERY_MS`]; whether it was written.
    fn machine_seen(&self, id: &str, now_ms: i64) -> anyhow::Result<bool> {
        let cutoff = now_ms - super::SEEN_EVERY_MS;
        self.conn(|c| Ok(c.execute(MACHINE_SEEN, args![id, now_ms, cutoff])? > 0))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{Db, Sqlite};
    use super::*;

    fn pairing<'a>(code: &'a str, name: Option<&'a str>, expires_ms: i64) -> NewPairing<'a> {
        NewPairing {
            code,
            machine: "m_a",
            check: "123456",
            name,
            expires_ms,
        }
    }

    #[test]
    fn pairings_expire_approve_once_and_give_one_token() {
        let db = Sqlite::new(Db::open_memory().unwrap());
        let key = TrustedKey {
            id: "k1".into(),
            alg: -7,
            spki: "AAAA".into(),
        };
        let proof = json!({"cred": "k1", "ad": "a", "cd": "c", "sig": "s"});
        let approval = Approval {
            key: &key,
            proof: &proof,
        };
        db.create_pairing(&pairing("old", None, 1000), 0).unwrap();
        assert!(
            !db.approve_pairing("old", &approval, 1000).unwrap(),
            "expired"
        );
        assert!(!db.machine_known("m_a").unwrap());
        db.create_pairing(&pairing("c1", Some("laptop"), 10_000), 0)
            .unwrap();
        assert!(!db.give_token("c1", "h1").unwrap(), "not approved yet");
        assert!(db.approve_pairing("c1", &approval, 5).unwrap());
        assert!(!db.approve_pairing("c1", &approval, 6).unwrap(), "once");
        assert!(db.machine_known("m_a").unwrap());
        assert!(db.give_token("c1", "h1").unwrap());
        assert!(!db.give_token("c1", "h2").unwrap(), "one answer only");
        assert_eq!(db.machine_by_token("h1").unwrap().as_deref(), Some("m_a"));
        // A second pairing of the same machine never replaces its token.
        db.create_pairing(&pairing("c2", None, 10_000), 7).unwrap();
        assert!(db.approve_pairing("c2", &approval, 8).unwrap());
        assert!(!db.give_token("c2", "h3").unwrap());
        assert_eq!(db.machine_by_token("h3").unwrap(), None);
        assert_eq!(
            db.latest_machine().unwrap().unwrap().name.as_deref(),
            Some("laptop")
        );
        let listed = db.machines().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].keys, ["k1"]);
        assert!(db.remove_machine("m_a").unwrap());
        assert!(!db.remove_machine("m_a").unwrap());
        assert_eq!(db.machine_by_token("h1").unwrap(), None);
        assert!(db.pairing("c1").unwrap().is_none());
    }
}
