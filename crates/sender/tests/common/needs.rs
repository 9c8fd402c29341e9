//! "This test needs tool X": the one rule lives in crates/testkit/src/needs.rs. This file
//! stays for the suites that include it by `#[path]` (tests/install.rs).
pub use sessionpipe_testkit::needs::*;
