//! The sessionpipe protocol's wire types and validation, shared by both sides: the sender
//! (`sessionpipe-control`: hooks, sp-sync, sp) and the receiver (`sessionpipe-receiver`).
//! One ULID rule, one session-key rule, one signed-control verifier, one clock format, and the small
//! helpers both programs need once: URL origins, text truncation, randomness, hex.
//! Knows nothing about SQL, HTTP or any harness's output.
// No function over 100 lines (clippy.toml sets the threshold): long ones are split where
// they read as steps. Tests and benchmarks, which read as one scenario each, are exempt.
#![warn(clippy::too_many_lines)]
pub mod answer;
pub mod clock;
pub mod control;
pub mod event;
pub mod files;
pub mod hex;
pub mod rand;
pub mod redact;
pub mod signed;
pub mod text;
pub mod url;

/// `^[0-9A-HJKMNP-TV-Z]{26}$`: the protocol's ULID spelling (Crockford base32, upper case).
pub fn is_ulid(s: &str) -> bool {
    s.len() == 26
        && s.bytes().all(|b| {
            b.is_ascii_digit() || (b.is_ascii_uppercase() && !matches!(b, b'I' | b'L' | b'O' | b'U'))
        })
        // The first character carries only 3 bits; above 7 the value overflows 128 bits.
        && s.as_bytes()[0] <= b'7'
}

pub fn new_ulid() -> String {
    ulid::Ulid::new().to_string()
}

/// `<harness>:<id>` split on the first colon (DECISIONS 4).
pub fn split_session_key(key: &str) -> Option<(&str, &str)> {
    let (h, id) = key.split_once(':')?;
    if is_harness_name(h) && is_session_id(id) {
        Some((h, id))
    } else {
        None
    }
}

/// `^[a-z][a-z0-9-]{0,39}$`
pub fn is_harness_name(h: &str) -> bool {
    let b = h.as_bytes();
    !b.is_empty()
        && b.len() <= 40
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// `^[A-Za-z0-9._:-]{1,128}$`
pub fn is_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn ulids_and_keys() {
        assert!(is_ulid("01K6ABCDEFGHJKMNPQRSTVWXYZ"));
        assert!(!is_ulid("01K6ABCDEFGHJKMNPQRSTVWXYI"));
        assert!(!is_ulid("81K6ABCDEFGHJKMNPQRSTVWXYZ"));
        assert!(!is_ulid("01k6abcdefghjkmnpqrstvwxyz"));
        assert!(is_ulid(&new_ulid()));
        assert_eq!(split_session_key("codex:a:b"), Some(("codex", "a:b")));
        assert_eq!(split_session_key("Codex:a"), None);
        assert_eq!(split_session_key("codex:"), None);
        assert_eq!(split_session_key("codex:a b"), None);
    }
}
