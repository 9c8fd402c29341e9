//! sp-sync's thread for headless runs ([`crate::runs`]): launches, follows and finishes them.
use super::Shared;
use std::time::Duration;

/// A pass this often while a run is open (progress at most every 500 ms needs it).
const RUNNING_EVERY: Duration = Duration::from_millis(200);
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
        if open {
            shared.sleep(RUNNING_EVERY);
        } else {
            shared.wait_work(&mut seen, IDLE_EVERY);
        }
    }
}
