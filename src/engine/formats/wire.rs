//! The Confluent wire format: `0x00`, the schema id (4 bytes, big-endian),
//! then the body; a Protobuf body starts with its message indexes (a count
//! and that many indexes, zigzag varints; a lone `0` is the index `[0]`).

/// The byte every record in the wire format starts with.
pub const MAGIC: u8 = 0;

/// Most message indexes (nesting levels) a Protobuf record may name.
pub const MAX_MESSAGE_INDEXES: usize = 32;

/// The schema id and the body of a record in the wire format.
pub fn split(payload: &[u8]) -> Result<(u32, &[u8]), String> {
    match payload {
        [MAGIC, a, b, c, d, body @ ..] => Ok((u32::from_be_bytes([*a, *b, *c, *d]), body)),
        [MAGIC, ..] => Err(format!("{} bytes: shorter than the wire format's 5-byte header", payload.len())),
        [first, ..] => Err(format!("not in the Confluent wire format: it starts with 0x{first:02x}, not 0x00")),
        [] => Err("an empty record is not in the Confluent wire format".to_string()),
    }
}

/// A varint (at most 10 bytes) and what follows it.
fn varint(bytes: &[u8]) -> Result<(u64, &[u8]), String> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok((value, &bytes[i + 1..]));
        }
    }
    Err("a message index is not a complete varint".to_string())
}

/// A zigzag varint as a signed number.
fn zigzag(bytes: &[u8]) -> Result<(i64, &[u8]), String> {
    let (v, rest) = varint(bytes)?;
    Ok((((v >> 1) as i64) ^ -((v & 1) as i64), rest))
}

/// The message indexes at the start of a Protobuf body, and the message.
pub fn message_indexes(body: &[u8]) -> Result<(Vec<usize>, &[u8]), String> {
    let (count, mut rest) = zigzag(body)?;
    if count == 0 {
        return Ok((vec![0], rest));
    }
    let count = usize::try_from(count)
        .ok()
        .filter(|&n| n <= MAX_MESSAGE_INDEXES)
        .ok_or_else(|| format!("{count} message indexes: at most {MAX_MESSAGE_INDEXES}, none negative"))?;
    let mut indexes = Vec::with_capacity(count);
    for _ in 0..count {
        let (index, after) = zigzag(rest)?;
        indexes.push(usize::try_from(index).map_err(|_| format!("a negative message index {index}"))?);
        rest = after;
    }
    Ok((indexes, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_and_indexes() {
        assert_eq!(split(&[0, 0, 0, 1, 2, 9, 9]), Ok((258, &[9u8, 9][..])));
        assert_eq!(split(&[0, 0, 0, 0, 7]), Ok((7, &[][..])));
        assert!(split(&[0, 0, 1]).unwrap_err().contains("shorter"));
        assert!(split(b"{\"a\":1}").unwrap_err().contains("starts with 0x7b"));
        assert!(split(&[]).is_err());
        assert_eq!(message_indexes(&[0, 8]), Ok((vec![0], &[8u8][..])));
        assert_eq!(message_indexes(&[2, 2, 8]), Ok((vec![1], &[8u8][..])));
        assert_eq!(message_indexes(&[4, 2, 6]), Ok((vec![1, 3], &[][..])));
        assert!(message_indexes(&[2, 1]).unwrap_err().contains("negative"));
        assert!(message_indexes(&[1]).unwrap_err().contains("none negative"));
        assert!(message_indexes(&[0x80, 0x80]).unwrap_err().contains("varint"));
        assert!(message_indexes(&[0xfe, 0x01]).unwrap_err().contains("at most 32"));
        assert!(message_indexes(&[0xff; 12]).is_err());
    }
}
