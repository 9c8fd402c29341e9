//! sp-sync's thread for headless runs ([`crate::runs`]): launches, follows and finishes them.
use super::Shared;
use std::time::Duration;

/// A pass at least this often while a run is open (progress at most every 500 ms needs it),
/// and at once when woken: a supervisor recording its agent's exit, or a new prompt, wakes it
/// (another process's commit changes the database's data_version, which sp-sync watches).
const RUNNING_EVERY: Duration = Duration::from_millis(200);
/// Never two passes closer than this: a pass's own writes wake it again.
const PASS_FLOOR: Duration = Duration::from_millis(20);
/// With no run open, look again this often (or at once when woken).
const IDLE_EVERY: Duration = Duration::from_secs(1);

pub(crate) fn runs_loop(shared: &Shared) {
    let mut store = match shared.open_store() {
        Ok(s) => s,
        Err(e) => {
            crate::logging::error(&format!("runs: {e:#}"));
            return;
        }
    };
    let mut tracker = crate::runs::Tracker::default();
    let mut seen = 0u64;
    let mut held = super::parked::Held::default();
    while !shared.stopping() {
        let began = std::time::Instant::now();
        // DECISIONS 39: answered parked prompts become runs before this pass launches runs.
        if let Err(e) = super::parked::resume_answered(&mut store, &mut held) {
            crate::logging::warn(&format!("parked: {e:#}"));
        }
        let open = match crate::runs::pass(&mut store, &mut tracker) {
            Ok(open) => open,
            Err(e) => {
                crate::logging::warn(&format!("runs: {e:#}"));
                false
            }
        };
        shared.wait_work(&mut seen, if open { RUNNING_EVERY } else { IDLE_EVERY });
        shared.sleep(PASS_FLOOR.saturating_sub(began.elapsed()));
    }
}
