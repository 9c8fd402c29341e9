//! Where the tests' fixtures come from.
//!
//! Our own, in `crates/sender/tests/fixtures/` (written from docs/protocol.md, so every clone runs them):
//! hook payloads, delivery fixtures and the few protocol schemas we do not ship in
//! `schemas/`. The reference's, in `../shared/peer-data` (or `$SP_PEER_DATA`), are an extra
//! cross-check: tests named `peer_*` run them when they are present and say they skipped
//! otherwise; `SP_REQUIRE_PEER_DATA=1` (CI) makes their absence a failure.
use serde_json::Value;
use std::path::{Path, PathBuf};

/// `crates/sender/tests/fixtures/`, where our own fixtures live (both crates' tests read them).
pub const OWN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sender/tests/fixtures");

/// A file of our own fixtures.
pub fn own(rel: &str) -> PathBuf {
    Path::new(OWN).join(rel)
}

/// Whether the reference's fixtures must be there (`SP_REQUIRE_PEER_DATA=1`, as in CI).
pub fn peer_required() -> bool {
    matches!(
        std::env::var("SP_REQUIRE_PEER_DATA").as_deref(),
        Ok("1" | "true" | "yes")
    )
}

/// Where the reference's fixtures would be: `$SP_PEER_DATA`, else `../shared/peer-data`.
pub fn peer_path() -> PathBuf {
    std::env::var_os("SP_PEER_DATA")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/peer-data"))
}

/// The reference's fixtures folder, or None when this clone has none beside it. Panics when
/// they are required and missing.
pub fn peer_dir() -> Option<PathBuf> {
    let dir = peer_path();
    if dir.is_dir() {
        return Some(dir);
    }
    assert!(
        !peer_required(),
        "SP_REQUIRE_PEER_DATA is set but the reference's fixtures are not at {} (set SP_PEER_DATA)",
        dir.display()
    );
    None
}

/// For a `peer_*` cross-check test: the folder, or None after the skip line of
/// [`crate::needs`]. A failure instead when they are required (`SP_REQUIRE_PEER_DATA`,
/// not `CI`: CI's newcomer run has no ../shared beside its clone, by design).
pub fn peer_or_skip(what: &str) -> Option<PathBuf> {
    let dir = peer_path();
    if dir.is_dir() {
        return Some(dir);
    }
    crate::needs::skip_unless(
        &format!(
            "the reference's fixtures at {} ({what}; or set SP_PEER_DATA)",
            dir.display()
        ),
        peer_required(),
    );
    None
}

/// Subset match with the conformance rules: only the keys listed are compared, arrays must
/// have equal length, and the string `"*"` matches anything.
pub fn subset_match(expected: &Value, actual: &Value, path: &str) -> Result<(), String> {
    match (expected, actual) {
        (Value::String(s), _) if s == "*" => Ok(()),
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                let av = a
                    .get(k)
                    .ok_or_else(|| format!("{path}.{k}: missing in {actual}"))?;
                subset_match(ev, av, &format!("{path}.{k}"))?;
            }
            Ok(())
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                return Err(format!(
                    "{path}: expected {} items, got {}: {actual}",
                    e.len(),
                    a.len()
                ));
            }
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                subset_match(ev, av, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        (e, a) if e == a => Ok(()),
        (e, a) => Err(format!("{path}: expected {e}, got {a}")),
    }
}

/// Whether a well-known document lists capability `cap`.
pub fn offers(well_known: &Value, cap: &str) -> bool {
    well_known["capabilities"]
        .as_array()
        .is_some_and(|caps| caps.iter().any(|c| c == cap))
}

/// Checks a delivery fixture step's `expect` (its `status`, and its `body` as a subset)
/// against the answer; `step` names the step in the failure.
pub fn check_expect(step: &str, expect: &Value, status: u16, text: &str) {
    if let Some(want) = expect.get("status") {
        assert_eq!(
            Some(u64::from(status)),
            want.as_u64(),
            "{step}: status; body {text:?}"
        );
    }
    if let Some(body) = expect.get("body") {
        let got: Value = serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("{step}: body is not JSON ({e}): {text:?}"));
        if let Err(e) = subset_match(body, &got, "body") {
            panic!("{step}: {e}");
        }
    }
}

/// The attention id DECISIONS 9 mints for a Claude Code permission prompt, computed here
/// from the rule (independently of the sender's own `minted_attention_id`).
pub fn cc_attention_id(p: &Value) -> String {
    use sha2::{Digest, Sha256};
    let s = format!(
        "{}|{}|{}",
        p["prompt_id"].as_str().unwrap(),
        p["tool_name"].as_str().unwrap(),
        serde_json::to_string(&p["tool_input"]).unwrap()
    );
    let hex: String = Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("perm-{}", &hex[..16])
}
