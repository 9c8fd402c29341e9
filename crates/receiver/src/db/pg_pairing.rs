//! Pairing on PostgreSQL: machines.rs's SQL through dialect.rs. Approving and handing out
//! the token are each one transaction whose conditional UPDATE decides, so two receivers
//! racing on one code give one approval and one token.
#![cfg_attr(not(test), allow(dead_code))]

use serde_json::{json, Value};

use super::dialect::postgres as q;
use super::machines::{
    ADD_MACHINE_KEY, APPROVE_PAIRING, CREATE_PAIRING, GIVE_TOKEN, MACHINE_BY_TOKEN,
    MACHINE_HAS_SESSIONS, MACHINE_KEYS, MACHINE_KNOWN, MACHINE_SEEN, PAIRING, PAIRING_MACHINE,
    PAIR_MACHINE, REMOVE_MACHINE, SET_TOKEN,
};
use super::pg::PgStore;
use super::store::PairingStore;
use super::Pairing;

// PostgreSQL's own text for two lists: it has no `rowid` (ties in `paired_ms` go by id
// here, by pairing order on SQLite) and spells `json_group_array` `json_agg`.
const LATEST_MACHINE: &str =
    "SELECT id, name FROM machines ORDER BY paired_ms DESC, id DESC LIMIT 1";
const MACHINES: &str = "SELECT m.id, m.name, m.paired_ms, \
    (SELECT coalesce(json_agg(k.id ORDER BY k.id), '[]')::text FROM machine_keys k \
    WHERE k.machine = m.id), m.seen_ms FROM machines m ORDER BY m.paired_ms, m.id";

impl PairingStore for PgStore {
    fn machine_has_sessions(&self, id: &str) -> anyhow::Result<bool> {
        Ok(self
            .pool
            .get()?
            .query_opt(&q(MACHINE_HAS_SESSIONS), &[&id])?
            .is_some())
    }

    fn machine_known(&self, id: &str) -> anyhow::Result<bool> {
        Ok(self
            .pool
            .get()?
            .query_opt(&q(MACHINE_KNOWN), &[&id])?
            .is_some())
    }

    fn machine_by_token(&self, hash: &str) -> anyhow::Result<Option<String>> {
        Ok(self
            .pool
            .get()?
            .query_opt(&q(MACHINE_BY_TOKEN), &[&hash])?
            .map(|r| r.get(0)))
    }

    fn create_pairing(
        &self,
        code: &str,
        machine: &str,
        check: &str,
        name: Option<&str>,
        now_ms: i64,
        expires_ms: i64,
    ) -> anyhow::Result<()> {
        self.pool.get()?.execute(
            &q(CREATE_PAIRING),
            &[&code, &machine, &check, &name, &now_ms, &expires_ms],
        )?;
        Ok(())
    }

    fn pairing(&self, code: &str) -> anyhow::Result<Option<Pairing>> {
        Ok(self
            .pool
            .get()?
            .query_opt(&q(PAIRING), &[&code])?
            .map(|r| Pairing {
                machine: r.get(0),
                check: r.get(1),
                name: r.get(2),
                expires_ms: r.get(3),
                key: r.get(4),
                proof: r.get(5),
                token_given: r.get::<_, i64>(6) != 0,
            }))
    }

    fn approve_pairing(
        &self,
        code: &str,
        key: &Value,
        proof: &Value,
        now_ms: i64,
    ) -> anyhow::Result<bool> {
        let mut c = self.pool.get()?;
        let mut tx = c.transaction()?;
        let n = tx.execute(
            &q(APPROVE_PAIRING),
            &[&code, &key.to_string(), &proof.to_string(), &now_ms],
        )?;
        if n == 0 {
            return Ok(false);
        }
        let r = tx.query_one(&q(PAIRING_MACHINE), &[&code])?;
        let (machine, name): (String, Option<String>) = (r.get(0), r.get(1));
        tx.execute(&q(PAIR_MACHINE), &[&machine, &name, &now_ms])?;
        tx.execute(
            &q(ADD_MACHINE_KEY),
            &[
                &machine,
                &key["id"].as_str().unwrap_or_default(),
                &key["alg"].as_i64().unwrap_or_default(),
                &key["spki"].as_str().unwrap_or_default(),
                &now_ms,
            ],
        )?;
        tx.commit()?;
        Ok(true)
    }

    fn give_token(&self, code: &str, token_hash: &str) -> anyhow::Result<bool> {
        let mut c = self.pool.get()?;
        let mut tx = c.transaction()?;
        if tx.execute(&q(GIVE_TOKEN), &[&code])? == 0 {
            return Ok(false);
        }
        let n = tx.execute(&q(SET_TOKEN), &[&code, &token_hash])?;
        tx.commit()?;
        Ok(n == 1)
    }

    fn machine_keys(&self, machine: &str) -> anyhow::Result<Vec<(String, i64, String)>> {
        Ok(self
            .pool
            .get()?
            .query(&q(MACHINE_KEYS), &[&machine])?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }

    fn latest_machine(&self) -> anyhow::Result<Option<Value>> {
        Ok(self.pool.get()?.query_opt(LATEST_MACHINE, &[])?.map(
            |r| json!({"machine": r.get::<_, String>(0), "name": r.get::<_, Option<String>>(1)}),
        ))
    }

    fn machines(&self) -> anyhow::Result<Vec<Value>> {
        Ok(self
            .pool
            .get()?
            .query(MACHINES, &[])?
            .iter()
            .map(|r| {
                json!({
                    "machine": r.get::<_, String>(0),
                    "name": r.get::<_, Option<String>>(1),
                    "paired_ms": r.get::<_, i64>(2),
                    "keys": serde_json::from_str::<Value>(r.get(3)).unwrap_or(json!([])),
                    "seen_ms": r.get::<_, Option<i64>>(4),
                })
            })
            .collect())
    }

    fn remove_machine(&self, id: &str) -> anyhow::Result<bool> {
        let mut c = self.pool.get()?;
        let mut tx = c.transaction()?;
        let n = tx.execute(&q(REMOVE_MACHINE[0]), &[&id])?;
        for sql in &REMOVE_MACHINE[1..] {
            tx.execute(&q(sql), &[&id])?;
        }
        tx.commit()?;
        Ok(n > 0)
    }

    fn machine_seen(&self, id: &str, now_ms: i64) -> anyhow::Result<bool> {
        let cutoff = now_ms - super::SEEN_EVERY_MS;
        let n = self
            .pool
            .get()?
            .execute(&q(MACHINE_SEEN), &[&id, &now_ms, &cutoff])?;
        Ok(n > 0)
    }
}
