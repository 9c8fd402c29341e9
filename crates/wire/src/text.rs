//! Cutting text to a limit without splitting a character, the one way both programs do it.

/// At most `max_chars` characters (Unicode scalar values) of `s`, cut on a character
/// boundary; `s` itself when it is that short.
pub fn truncate(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}

/// The longest prefix of `s` of at most `max_bytes` bytes that ends on a character boundary.
pub fn truncate_bytes(s: &str, max_bytes: usize) -> &str {
    if s.len() <= max_bytes {
        return s;
    }
    let mut end = max_bytes;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_splits_a_character() {
        assert_eq!(truncate("héllo", 2), "hé");
        assert_eq!(truncate("héllo", 5), "héllo");
        assert_eq!(truncate("héllo", 50), "héllo");
        assert_eq!(truncate("🦀🦀", 1), "🦀");
        assert_eq!(truncate("abc", 0), "");
        assert_eq!(truncate("", 3), "");
        // "é" is two bytes: a byte limit inside it keeps what comes before.
        assert_eq!(truncate_bytes("héllo", 2), "h");
        assert_eq!(truncate_bytes("héllo", 3), "hé");
        assert_eq!(truncate_bytes("🦀", 3), "");
        assert_eq!(truncate_bytes("abc", 9), "abc");
    }
}
