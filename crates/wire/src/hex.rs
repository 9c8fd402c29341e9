//! Lower-case hex, for digests and tokens (the `hex` crate).

pub fn encode(bytes: impl AsRef<[u8]>) -> String {
    ::hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn lower_case_two_digits_a_byte() {
        assert_eq!(super::encode([0x00, 0x0f, 0xab, 0xff]), "000fabff");
        assert_eq!(super::encode([]), "");
    }
}
