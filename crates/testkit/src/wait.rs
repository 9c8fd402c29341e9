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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "gave up after 50ms waiting until the sky falls")]
    fn wait_until_fails_naming_what_it_waited_for() {
        wait_until("the sky falls", Duration::from_millis(50), || false);
    }

    #[test]
    fn wait_for_gives_the_value_once_it_comes() {
        let mut n = 0;
        let got = wait_for("the third look", Duration::from_secs(5), || {
            n += 1;
            (n == 3).then_some(n)
        });
        assert_eq!(got, 3);
    }

    #[test]
    fn until_says_false_when_time_runs_out() {
        let t = Instant::now();
        assert!(!until(Duration::from_millis(30), || false));
        assert!(t.elapsed() >= Duration::from_millis(30));
        assert!(until(Duration::from_millis(30), || true));
    }

    #[test]
    fn wait_timeout_gives_the_status_of_an_exited_child_and_none_for_a_running_one() {
        let mut done = std::process::Command::new("true").spawn().unwrap();
        assert!(wait_timeout(&mut done, Duration::from_secs(5)).is_some_and(|s| s.success()));
        let mut running = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert_eq!(wait_timeout(&mut running, Duration::from_millis(50)), None);
        running.kill().unwrap();
        running.wait().unwrap();
    }
}
