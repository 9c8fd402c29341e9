//! What the sender's and the receiver's tests share, written once (issue 36): the rule for a
//! test that needs an outside tool, waits that fail when time runs out, the real
//! `sp-receiver` as a child process, plain HTTP, our fixtures, a signing device, a Web Push
//! service and device, and the page's browser. A dev-dependency only (`publish = false`):
//! nothing here reaches the hooks or the release binaries. The sender's `tests/common/`
//! re-exports these modules under the same names.
pub mod browser;
pub mod fixtures;
pub mod http;
pub mod listening;
pub mod needs;
pub mod push;
pub mod receiver;
pub mod receiver_help;
pub mod signing;
pub mod wait;
