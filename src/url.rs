//! Percent-encoding of one URL path segment, for the HTTP clients (an admin
//! key, a schema registry subject).

/// Every byte but the unreserved ones (letters, digits, `-._~`) as `%XX`.
pub fn percent_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_path_segment() {
        assert_eq!(super::percent_encode(b"a b/c%"), "a%20b%2Fc%25");
        assert_eq!(super::percent_encode(b"clicks-value.v1~"), "clicks-value.v1~");
        assert_eq!(super::percent_encode("ads/ad.proto é?#".as_bytes()), "ads%2Fad.proto%20%C3%A9%3F%23");
    }
}
