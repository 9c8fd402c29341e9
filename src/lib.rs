//! sessionpipe control channel, machine side.
//!
//! Inbound:  receiver → [`sync`] (HTTP, [`wire`] types, validation) → [`store`] → [`hook`] → [`harness`] adapter → stdout.
//! Outbound: [`hook`] → [`store`] (events, acks) → [`sync`] → receiver.
pub mod config;
pub mod paths;
pub mod clock;
pub mod logging;
pub mod wire;
pub mod store;
pub mod harness;
pub mod hook;
pub mod sync;
pub mod receiver;
pub mod setup;
pub mod cli;
