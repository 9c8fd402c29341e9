//! Where the tests' fixtures come from.
//!
//! Our own, in `tests/fixtures/` (written here from `shared/spec`, so every clone runs them):
//! hook payloads, delivery fixtures and the few protocol schemas we do not ship in
//! `schemas/`. The reference's, in `../shared/peer-data` (or `$SP_PEER_DATA`), are an extra
//! cross-check: tests named `peer_*` run them when they are present and say they skipped
//! otherwise; `SP_REQUIRE_PEER_DATA=1` (CI) makes their absence a failure.
#![allow(dead_code)]
use std::path::{Path, PathBuf};

/// `tests/fixtures/` in this crate.
pub const OWN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

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
/// tests/common/needs.rs. A failure instead when they are required (`SP_REQUIRE_PEER_DATA`,
/// not `CI`: CI's newcomer run has no ../shared beside its clone, by design).
pub fn peer_or_skip(what: &str) -> Option<PathBuf> {
    let dir = peer_path();
    if dir.is_dir() {
        return Some(dir);
    }
    super::needs::skip_unless(
        &format!(
            "the reference's fixtures at {} ({what}; or set SP_PEER_DATA)",
            dir.display()
        ),
        peer_required(),
    );
    None
}
