//! What the suites check of an ack: its outcome, and the words its detail must hold.
#![allow(dead_code)]
use serde_json::Value;

/// Asserts that `ack` has `outcome` and a `detail` containing `part` (the ack printed when
/// not).
#[track_caller]
pub fn assert_ack(ack: &Value, outcome: &str, part: &str) {
    assert_eq!(ack["outcome"], outcome, "{ack}");
    let detail = ack["detail"].as_str().expect("the ack has a detail");
    assert!(detail.contains(part), "{ack}");
}
