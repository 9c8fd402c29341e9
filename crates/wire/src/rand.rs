//! Randomness for tokens, nonces and jitter: the operating system's generator through `rand`
//! (its thread generator is a CSPRNG seeded and reseeded from getrandom), never a hand-read
//! `/dev/urandom`.

/// `N` random bytes.
pub fn bytes<const N: usize>() -> [u8; N] {
    use rand::RngCore;
    let mut b = [0u8; N];
    rand::rng().fill_bytes(&mut b);
    b
}

/// A secret of `N` random bytes as lower-case hex (`2 * N` characters).
pub fn hex_token<const N: usize>() -> String {
    crate::hex::encode(bytes::<N>())
}

pub fn u32() -> u32 {
    rand::random()
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_differ_and_have_their_length() {
        let a = super::hex_token::<32>();
        let b = super::hex_token::<32>();
        assert_eq!(a.len(), 64);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(a, b);
        assert_ne!(super::bytes::<16>(), [0; 16]);
    }
}
