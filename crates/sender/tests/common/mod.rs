pub mod acks;
pub mod caddy;
pub mod cc_session;
pub mod chaos;
pub mod csrf;
pub mod e2e;
pub mod env;
pub mod needs;
pub mod page;
pub mod pairing;
pub mod queue_row;
pub mod receiver;
pub mod schema;
pub mod standin;
// Written once in crates/testkit (both crates' tests use them); here under the names the
// suites use. Each test binary uses only some of them.
#[allow(unused_imports)]
pub use sessionpipe_testkit::{browser, fixtures, http, listening, receiver_help, signing};
