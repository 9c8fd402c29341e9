//! sessionpipe control channel, machine side.
//!
//! Inbound:  receiver → [`sync`] (HTTP, [`wire`] types, validation) → [`store`] → [`hook`] → [`harness`] adapter → stdout.
//! Outbound: [`hook`] → [`store`] (events, acks) → [`sync`] → receiver.
pub mod cli;
pub mod clock;
pub mod config;
pub mod files;
pub mod harness;
pub mod hook;
pub mod logging;
pub mod paths;
pub mod receiver;
pub mod setup;
pub mod store;
pub mod sync;
pub mod wire;
