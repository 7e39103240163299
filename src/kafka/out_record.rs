//! A record as its copies to the outputs see it ([`OutRecord`]): key, input
//! payload, headers, timestamp and where the input record was read,
//! borrowed from a consumed record or from one a slice holds
//! ([`PackedHeaders`] keeps the headers of an owned one in one buffer).

use rdkafka::message::{BorrowedHeaders, BorrowedMessage, Headers, Message};

use crate::engine::SourceRef;

/// What a judgment's copies are made of (see the module documentation).
#[derive(Clone, Copy)]
pub struct OutRecord<'a> {
    pub key: Option<&'a [u8]>,
    /// The input record's payload (out of the router's frame, in repartition mode).
    pub payload: Option<&'a [u8]>,
    pub headers: OutHeaders<'a>,
    pub timestamp_ms: Option<i64>,
    pub origin: Origin<'a>,
}

impl<'a> OutRecord<'a> {
    /// `msg` with the input payload `payload` and the input position
    /// `source` (`None`: `msg` is the input record itself).
    pub fn consumed(msg: &'a BorrowedMessage<'a>, payload: Option<&'a [u8]>, source: Option<SourceRef<'a>>) -> Self {
        OutRecord {
            key: msg.key(),
            payload,
            headers: msg.headers().map_or(OutHeaders::None, OutHeaders::Consumed),
            timestamp_ms: msg.timestamp().to_millis(),
            origin: source.map_or(Origin::Consumed(msg), Origin::Source),
        }
    }
}

/// Where an [`OutRecord`]'s input record was read.
#[derive(Clone, Copy)]
pub enum Origin<'a> {
    Source(SourceRef<'a>),
    /// The consumed record is the input record: its own position (its
    /// topic's name is looked up only when asked for, which is rare).
    Consumed(&'a BorrowedMessage<'a>),
}

impl<'a> Origin<'a> {
    pub fn source(self) -> SourceRef<'a> {
        match self {
            Origin::Source(source) => source,
            Origin::Consumed(msg) => SourceRef { topic: msg.topic(), partition: msg.partition(), offset: msg.offset() },
        }
    }
}

/// An [`OutRecord`]'s headers, as (name, value) pairs in their order; a
/// header without a value stays one.
#[derive(Clone, Copy)]
pub enum OutHeaders<'a> {
    None,
    Consumed(&'a BorrowedHeaders),
    Packed(PackedHeaders<'a>),
}

impl<'a> OutHeaders<'a> {
    pub fn count(&self) -> usize {
        match self {
            OutHeaders::None => 0,
            OutHeaders::Consumed(h) => h.count(),
            OutHeaders::Packed(p) => p.lens.len(),
        }
    }

    pub fn iter(self) -> impl Iterator<Item = (&'a str, Option<&'a [u8]>)> {
        let mut at = 0;
        (0..self.count()).map_while(move |i| match self {
            OutHeaders::None => None,
            OutHeaders::Consumed(h) => h.try_get(i).map(|h| (h.key, h.value)),
            OutHeaders::Packed(p) => p.get(i, &mut at),
        })
    }

    /// The (name, value) lengths, as [`crate::kafka::size_limits::record_size`] counts them.
    pub fn lens(self) -> impl Iterator<Item = (usize, usize)> + 'a {
        self.iter().map(|(k, v)| (k.len(), v.map_or(0, <[u8]>::len)))
    }

    /// As the extractors read them (a header without a value reads as empty).
    pub fn pairs(self) -> Vec<(&'a str, &'a [u8])> {
        self.iter().map(|(k, v)| (k, v.unwrap_or_default())).collect()
    }
}

/// Marks a header without a value in [`PackedHeaders::lens`].
const NO_VALUE: u32 = u32::MAX;

/// Headers kept in one buffer: each name then its value, back to back;
/// `lens` has their lengths ([`NO_VALUE`] for a header without one).
#[derive(Clone, Copy)]
pub struct PackedHeaders<'a> {
    pub bytes: &'a [u8],
    pub lens: &'a [(u32, u32)],
}

impl<'a> PackedHeaders<'a> {
    /// Appends `headers` to `bytes` and their lengths to `lens`.
    pub fn pack<'h>(
        headers: impl Iterator<Item = (&'h str, Option<&'h [u8]>)>,
        bytes: &mut Vec<u8>,
        lens: &mut Vec<(u32, u32)>,
    ) {
        for (name, value) in headers {
            bytes.extend_from_slice(name.as_bytes());
            bytes.extend_from_slice(value.unwrap_or_default());
            lens.push((name.len() as u32, value.map_or(NO_VALUE, |v| v.len() as u32)));
        }
    }

    /// The `i`-th header, `at` being where it starts in `bytes` (moved past it).
    fn get(&self, i: usize, at: &mut usize) -> Option<(&'a str, Option<&'a [u8]>)> {
        let (name_len, value_len) = *self.lens.get(i)?;
        let name = self.bytes.get(*at..*at + name_len as usize)?;
        *at += name_len as usize;
        let value = match value_len {
            NO_VALUE => None,
            len => {
                let value = self.bytes.get(*at..*at + len as usize)?;
                *at += len as usize;
                Some(value)
            }
        };
        Some((std::str::from_utf8(name).ok()?, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_headers_read_back_in_order_with_the_valueless_ones() {
        let given: [(&str, Option<&[u8]>); 3] = [("a", Some(b"1")), ("empty", None), ("b", Some(b""))];
        let (mut bytes, mut lens) = (Vec::new(), Vec::new());
        PackedHeaders::pack(given.into_iter(), &mut bytes, &mut lens);
        let headers = OutHeaders::Packed(PackedHeaders { bytes: &bytes, lens: &lens });
        assert_eq!(headers.count(), 3);
        assert_eq!(headers.iter().collect::<Vec<_>>(), given);
        assert_eq!(headers.lens().collect::<Vec<_>>(), [(1, 1), (5, 0), (1, 0)]);
        assert_eq!(headers.pairs(), [("a", &b"1"[..]), ("empty", b""), ("b", b"")]);
        assert_eq!(OutHeaders::None.iter().count(), 0);
    }
}
