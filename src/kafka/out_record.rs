//! A record as its copies to the outputs see it ([`OutRecord`]): key, input
//! payload, headers, timestamp and where the input record was read,
//! borrowed from a consumed record or from one a slice holds
//! ([`PackedHeaders`] keeps the headers of an owned one in one buffer,
//! [`FramedHeaders`] are those of a slice-log batch's record).

use rdkafka::message::Headers;

use crate::engine::SourceRef;
use crate::filter::SnapshotError;
use crate::filter::envelope::{Reader, put_u32};
use crate::kafka::consumed::{Consumed, ConsumedHeaders};

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
    /// `msg` with its headers `headers` ([`OutHeaders::of`]), the input
    /// payload `payload` and the input position `source` (`None`: `msg` is
    /// the input record itself).
    pub fn consumed(
        msg: &Consumed<'a>,
        headers: OutHeaders<'a>,
        payload: Option<&'a [u8]>,
        source: Option<SourceRef<'a>>,
    ) -> Self {
        OutRecord {
            key: msg.key(),
            payload,
            headers,
            timestamp_ms: msg.timestamp().to_millis(),
            origin: source.map_or(Origin::Consumed(*msg), Origin::Source),
        }
    }
}

/// Where an [`OutRecord`]'s input record was read.
#[derive(Clone, Copy)]
pub enum Origin<'a> {
    Source(SourceRef<'a>),
    /// The consumed record is the input record: its own position (its
    /// topic's name is looked up only when asked for, which is rare).
    Consumed(Consumed<'a>),
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
    Consumed(&'a ConsumedHeaders),
    Packed(PackedHeaders<'a>),
    Framed(FramedHeaders<'a>),
}

impl<'a> OutHeaders<'a> {
    /// The headers of the consumed record `msg` (librdkafka parses them on
    /// each ask: ask once per record).
    pub fn of(msg: &Consumed<'a>) -> Self {
        msg.headers().map_or(OutHeaders::None, OutHeaders::Consumed)
    }

    pub fn count(&self) -> usize {
        match self {
            OutHeaders::None => 0,
            OutHeaders::Consumed(h) => h.count(),
            OutHeaders::Packed(p) => p.lens.len(),
            OutHeaders::Framed(f) => usize::from(f.count),
        }
    }

    pub fn iter(self) -> impl Iterator<Item = (&'a str, Option<&'a [u8]>)> {
        let mut at = 0;
        let mut framed = Reader::over(match self {
            OutHeaders::Framed(f) => f.bytes,
            _ => &[],
        });
        (0..self.count()).map_while(move |i| match self {
            OutHeaders::None => None,
            OutHeaders::Consumed(h) => h.try_get(i).map(|h| (h.key, h.value)),
            OutHeaders::Packed(p) => p.get(i, &mut at),
            OutHeaders::Framed(_) => FramedHeaders::read_one(&mut framed).ok(),
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

impl std::fmt::Debug for OutHeaders<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Equal when they list the same headers, however they are kept.
impl PartialEq for OutHeaders<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for OutHeaders<'_> {}

/// Marks a header without a value in [`PackedHeaders::lens`] and [`FramedHeaders`].
const NO_VALUE: u32 = u32::MAX;

/// Headers kept in one buffer: each name then its value, back to back;
/// `lens` has their lengths (`u32::MAX` for a value: a header without one).
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

/// A slice-log batch record's headers, as written: their count (u16),
/// then per header its name (u16 length) and value (u32 length,
/// `u32::MAX` for none). Checked when the batch was read
/// ([`Self::read`]), so reading them again cannot fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FramedHeaders<'a> {
    /// The headers after their count.
    bytes: &'a [u8],
    count: u16,
}

impl<'a> FramedHeaders<'a> {
    /// Reads and checks the headers at `r`'s position.
    pub fn read(r: &mut Reader<'a>) -> Result<Self, SnapshotError> {
        let count = r.u16()?;
        let from = r.rest();
        for _ in 0..count {
            Self::read_one(r)?;
        }
        let bytes = &from[..from.len() - r.rest().len()];
        Ok(FramedHeaders { bytes, count })
    }

    fn read_one(r: &mut Reader<'a>) -> Result<(&'a str, Option<&'a [u8]>), SnapshotError> {
        let len = r.u16()?;
        let name = std::str::from_utf8(r.take(usize::from(len))?)
            .map_err(|_| SnapshotError::Malformed("a header name is not UTF-8".into()))?;
        let value = match r.u32()? {
            NO_VALUE => None,
            len => Some(r.take(len as usize)?),
        };
        Ok((name, value))
    }

    /// Writes `headers` in this form. `None` (and `w` as it was) for more
    /// than `u16::MAX` headers or a name longer than `u16::MAX` bytes: no
    /// Kafka record has those.
    pub fn put<'h>(w: &mut Vec<u8>, headers: impl Iterator<Item = (&'h str, Option<&'h [u8]>)>) -> Option<()> {
        let at = w.len();
        w.extend_from_slice(&0u16.to_le_bytes());
        let mut count = 0u16;
        for (name, value) in headers {
            let (Ok(len), Some(more)) = (u16::try_from(name.len()), count.checked_add(1)) else {
                w.truncate(at);
                return None;
            };
            w.extend_from_slice(&len.to_le_bytes());
            w.extend_from_slice(name.as_bytes());
            put_u32(w, value.map_or(NO_VALUE, |v| v.len() as u32));
            w.extend_from_slice(value.unwrap_or_default());
            count = more;
        }
        w[at..at + 2].copy_from_slice(&count.to_le_bytes());
        Some(())
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
