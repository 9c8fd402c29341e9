//! "This test needs tool X": the one rule for a test that needs something from outside the
//! repository (a program such as node or caddy, the release build, a pinned agent CLI).
//!
//! Where it is missing, the test fails when `CI` is set (there everything is installed:
//! scripts/test-deps.sh), and otherwise prints `skipped: <test>: needs <tool>` and returns,
//! which scripts/test.sh counts as skipped. The line goes straight to the process's stderr,
//! past libtest's capture, so it shows even when the test passes. Both crates' tests use
//! this one copy.
use std::io::Write;

/// Whether the test may go on: true when `present`. Otherwise it fails the test when `CI`
/// is set, or prints the skip line and returns false (the caller then returns).
#[must_use]
pub fn needs(tool: &str, present: bool) -> bool {
    present || skip_unless(tool, ci())
}

/// `needs` with the caller's own rule for when a missing `tool` is a failure (the
/// reference's fixtures: `SP_REQUIRE_PEER_DATA`). Always false when it returns.
pub fn skip_unless(tool: &str, required: bool) -> bool {
    let test = current_test();
    assert!(
        !required,
        "{test} needs {tool}, and it is missing (scripts/test-deps.sh installs the tools)"
    );
    let _ = writeln!(std::io::stderr(), "skipped: {test}: needs {tool}");
    false
}

/// `CI` is set (to anything but empty, `0` or `false`).
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.as_str(), "" | "0" | "false"))
}

/// libtest runs each test on a thread named after it.
fn current_test() -> String {
    std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string()
}

/// The program `name` on PATH, if there is one.
pub fn on_path(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    })
}
