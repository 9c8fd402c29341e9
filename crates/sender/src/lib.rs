//! sessionpipe control channel, machine side.
//!
//! Inbound:  receiver → [`sync`] (HTTP, [`wire`] types, validation) → [`store`] → [`hook`] → [`harness`] adapter → stdout.
//! Outbound: [`hook`] → [`store`] (events, acks) → [`sync`] → receiver.
//!
//! The modules form layers; each imports only those below it (tests/layers.rs checks this):
//! `cli` · `acp` · `hook`, `sync` · `runs` · `setup` · `config` · `harness` · `store` · `codex_server`,
//! `sync_lock` · `logging` · `procs` · `paths`, with the wire crate beneath them all.
pub mod acp;
pub mod cli;
pub mod codex_server;
pub mod config;
pub mod harness;
pub mod hook;
pub mod logging;
pub mod paths;
pub mod procs;
pub mod runs;
pub mod setup;
pub mod store;
pub mod sync;
pub(crate) mod sync_lock;

/// The protocol's wire shapes (control messages we read, acks and events we write).
pub use spwire as wire;
pub use spwire::{clock, files};
