//! "Poll until", written once: a wait either sees its state or fails the test saying what it
//! waited for. Nothing here ends silently when time runs out.
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Whether `f` came to hold within `d` (checked every 20 ms, and once more at the end).
pub fn until(d: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// Waits until `f` holds; FAILS the test, naming `what`, when `d` runs out first.
#[track_caller]
pub fn wait_until(what: &str, d: Duration, f: impl FnMut() -> bool) {
    assert!(until(d, f), "gave up after {d:?} waiting until {what}");
}

/// Waits until `f` gives a value and returns it; FAILS the test, naming `what`, when `d`
/// runs out first.
#[track_caller]
pub fn wait_for<T>(what: &str, d: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let mut got = None;
    wait_until(what, d, || {
        got = f();
        got.is_some()
    });
    got.expect("wait_until saw it")
}

/// The child's exit status once it has exited, or None when `d` ran out first (the child
/// is left running: the caller decides).
pub fn wait_timeout(c: &mut Child, d: Duration) -> Option<ExitStatus> {
    let mut status = None;
    until(d, || {
        status = c.try_wait().ok().flatten();
        status.is_some()
    });
    status
}
