//! Who sent a request and the key it names (percent-decoded: keys are bytes).

/// The address a request came from, put into its extensions by
/// [`super::server`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer(pub std::net::SocketAddr);

/// `text` percent-decoded, `+` as a space.
pub fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], escaped) {
            (_, Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', None) => {
                out.push(b' ');
                i += 1;
            }
            (b, None) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}
