//! sessionpipe control channel, machine side.
//!
//! Inbound:  receiver → [`sync`] (HTTP, [`wire`] types, validation) → [`store`] → [`hook`] → [`harness`] adapter → stdout.
//! Outbound: [`hook`] → [`store`] (events, acks) → [`sync`] → receiver.
pub mod acp;
pub mod cli;
pub mod codex_app;
pub use spwire::{clock, files};
pub mod config;
pub mod harness;
pub mod hook;
pub mod logging;
pub mod paths;
pub mod setup;
pub mod store;
pub mod sync;
pub mod wire;
