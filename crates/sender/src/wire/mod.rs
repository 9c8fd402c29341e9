//! The protocol's wire shapes, from the shared `spwire` crate (control messages we read,
//! acks and events we write), and the sender's reading of the well-known document.
pub use spwire::{
    control, event, is_harness_name, is_session_id, is_ulid, new_ulid, redact, signed,
    split_session_key,
};
pub mod wellknown;
