//! What the router writes into the slice log around an input record: the
//! source stamp, the frame (its reading of the record before the payload)
//! and the progress records.

use crate::filter::KeyHash;

/// Where the router read a slice record: its input topic, partition and offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceRef<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
}

impl<'a> SourceRef<'a> {
    /// Parses the router's `topic/partition/offset` stamp (topic names cannot
    /// contain `/`). A topic name longer than Kafka allows
    /// ([`MAX_TOPIC_BYTES`]) is no stamp the router wrote (a forged or
    /// damaged frame): refused, so every source parsed here can be stamped
    /// again ([`SourceRef::stamp`]).
    pub fn parse(stamp: &'a [u8]) -> Option<Self> {
        let text = std::str::from_utf8(stamp).ok()?;
        let mut parts = text.rsplitn(3, '/');
        let offset = parts.next()?.parse().ok()?;
        let partition = parts.next()?.parse().ok()?;
        let topic = parts.next()?;
        (!topic.is_empty() && topic.len() <= MAX_TOPIC_BYTES).then_some(SourceRef { topic, partition, offset })
    }

    /// Writes the stamp `topic/partition/offset` into `buf` (no allocation
    /// and no `core::fmt` per record) and returns it; `None`, and nothing
    /// written, when `topic` is longer than Kafka allows
    /// ([`MAX_TOPIC_BYTES`]): such a name can only come from a forged or
    /// damaged record, and never makes this panic.
    pub fn stamp<'b>(buf: &'b mut [u8; STAMP_BYTES], topic: &str, partition: i32, offset: i64) -> Option<&'b [u8]> {
        if topic.len() > MAX_TOPIC_BYTES {
            return None;
        }
        let (mut p, mut o) = (itoa::Buffer::new(), itoa::Buffer::new());
        let mut len = 0;
        for part in [topic.as_bytes(), b"/", p.format(partition).as_bytes(), b"/", o.format(offset).as_bytes()] {
            // Always room (see `STAMP_BYTES`); checked all the same.
            buf.get_mut(len..len + part.len())?.copy_from_slice(part);
            len += part.len();
        }
        Some(&buf[..len])
    }
}

/// The longest topic name Kafka allows, in bytes.
pub const MAX_TOPIC_BYTES: usize = 249;

/// The first bytes of a slice-log record's value as the router writes it:
/// the stamp travels in front of the payload, not in a header. A header
/// costs librdkafka an allocated list and an entry per record on both sides
/// of the hop (writing it, parsing it, copying it on, freeing it): about a
/// tenth of repartition mode's CPU. The value's tail is the input payload,
/// byte for byte; the input's own headers stay headers.
///
/// Written by earlier releases (and read still): the stamp alone. Since
/// [`FRAME_MAGIC_READ`], the router's [`Reading`] follows the stamp.
pub const FRAME_MAGIC: [u8; 4] = *b"\0dS1";
/// [`FRAME_MAGIC`] of an input record whose value was null (a tombstone):
/// nothing follows the stamp, and the copies dedupd writes have a null
/// value again (an empty value would lose the delete for compacted topics).
pub const FRAME_MAGIC_NULL: [u8; 4] = *b"\0dS0";
/// A frame with the router's [`Reading`] (32 bytes) between the stamp and
/// the payload: the slice judges by it instead of reading the key and time
/// from the payload a second time (the hop's JSON parse and key hash, paid
/// once per record as in input-partitions mode).
pub const FRAME_MAGIC_READ: [u8; 4] = *b"\0dS3";
/// [`FRAME_MAGIC_READ`] of a null value.
pub const FRAME_MAGIC_READ_NULL: [u8; 4] = *b"\0dS2";

/// What the router read of an input record when it routed it: the key's
/// hash, with the seed it hashed with, and the event time. The same
/// extractor and the same bytes give the same reading in the slice, so a
/// slice may take it instead of reading the record again — when its own
/// hash seed is `seed` (a decaying kind hashes with its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    pub seed: u64,
    pub hash: KeyHash,
    pub time_ms: u64,
}

impl Reading {
    const BYTES: usize = 32;

    fn put(&self, buf: &mut Vec<u8>) {
        for word in [self.seed, self.hash.h1, self.hash.h2, self.time_ms] {
            buf.extend_from_slice(&word.to_be_bytes());
        }
    }

    fn get(bytes: &[u8; Self::BYTES]) -> Self {
        let word = |i: usize| u64::from_be_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        Reading { seed: word(0), hash: KeyHash { h1: word(1), h2: word(2) }, time_ms: word(3) }
    }
}

/// Writes a slice-log value: the magic ([`FRAME_MAGIC_READ`] with a
/// `reading`, else [`FRAME_MAGIC`]; their `_NULL` forms for a null
/// payload), the stamp's length (u16, big endian), the stamp
/// `topic/partition/offset`, the reading if any, then `payload`. Reuses `buf`.
///
/// `None` (and `buf` left empty) when `topic` is longer than Kafka allows
/// ([`SourceRef::stamp`]).
#[must_use]
pub fn frame_into(
    buf: &mut Vec<u8>,
    topic: &str,
    partition: i32,
    offset: i64,
    reading: Option<&Reading>,
    payload: Option<&[u8]>,
) -> Option<()> {
    let mut stamp = [0u8; STAMP_BYTES];
    buf.clear();
    let stamp = SourceRef::stamp(&mut stamp, topic, partition, offset)?;
    buf.extend_from_slice(match (reading.is_some(), payload.is_some()) {
        (true, true) => &FRAME_MAGIC_READ,
        (true, false) => &FRAME_MAGIC_READ_NULL,
        (false, true) => &FRAME_MAGIC,
        (false, false) => &FRAME_MAGIC_NULL,
    });
    buf.extend_from_slice(&(stamp.len() as u16).to_be_bytes());
    buf.extend_from_slice(stamp);
    if let Some(r) = reading {
        r.put(buf);
    }
    buf.extend_from_slice(payload.unwrap_or_default());
    Some(())
}

/// A repartition-mode slice-log record's parts (see [`unframe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unframed<'a> {
    /// The input position (`None`: a control record, or a broken frame).
    pub source: Option<SourceRef<'a>>,
    /// The input record's payload.
    pub payload: Option<&'a [u8]>,
    /// The router's reading, if the frame carries one.
    pub reading: Option<Reading>,
}

/// A repartition-mode slice-log record's input position, the router's
/// reading and the input payload. Records written by an earlier release
/// carry the stamp as a `dedupd.source` header (`source_header`) and the
/// payload as is; the router removes that header from input records, so a
/// header on a framed record cannot be forged. A record with neither (a
/// control record) has no source.
pub fn unframe<'a>(source_header: Option<&'a [u8]>, value: &'a [u8]) -> Unframed<'a> {
    let whole = Unframed { source: None, payload: Some(value), reading: None };
    if let Some(stamp) = source_header {
        return Unframed { source: SourceRef::parse(stamp), ..whole };
    }
    let Some((magic, rest)) = value.split_first_chunk::<4>() else {
        return whole;
    };
    let (read, null) = match *magic {
        FRAME_MAGIC => (false, false),
        FRAME_MAGIC_NULL => (false, true),
        FRAME_MAGIC_READ => (true, false),
        FRAME_MAGIC_READ_NULL => (true, true),
        _ => return whole,
    };
    let Some((len, rest)) = rest.split_first_chunk::<2>() else {
        return whole;
    };
    let len = u16::from_be_bytes(*len) as usize;
    let (Some(source), Some(rest)) = (rest.get(..len).and_then(SourceRef::parse), rest.get(len..)) else {
        return whole;
    };
    let (reading, rest) = match read {
        false => (None, rest),
        true => match rest.split_first_chunk::<{ Reading::BYTES }>() {
            Some((bytes, rest)) => (Some(Reading::get(bytes)), rest),
            None => return whole,
        },
    };
    match (null, rest) {
        (true, []) => Unframed { source: Some(source), payload: None, reading },
        (false, payload) => Unframed { source: Some(source), payload: Some(payload), reading },
        (true, _) => whole,
    }
}

/// Room for any stamp: a topic name of at most [`MAX_TOPIC_BYTES`], two
/// `/`, an `i32` and an `i64` in decimal.
pub const STAMP_BYTES: usize = 320;

/// A router's announcement, in a *progress record* of the slice log, of
/// how far it has routed one input partition it owns: the largest event
/// time routed from it, and whether the partition is idle (at its end with
/// nothing new for a while: then it holds nobody back). The slices keep
/// these per input partition and hold their watermark at the slowest
/// partition that is not idle (see [`super::SliceState::announce`]).
///
/// A router also lists the input partitions it does not route (or has
/// nothing to say of yet) with `owned` false: a slice that has not heard
/// of such a partition then holds at its start (time 0) until its router
/// announces it — otherwise a router that starts late, or takes a
/// partition over, would find its records behind a watermark the others
/// moved on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub time_ms: u64,
    pub idle: bool,
    /// `false`: only says that the partition exists (`time_ms` and `idle` unused).
    pub owned: bool,
}

impl<'a> Progress<'a> {
    /// The payload of a progress record: one `topic/partition/time/state`
    /// line per input partition (`state`: `0` routed, `1` idle, `u` not
    /// routed by this router).
    pub fn encode(entries: &[Progress<'_>]) -> Vec<u8> {
        let mut text = String::new();
        for e in entries {
            let state = match (e.owned, e.idle) {
                (false, _) => "u",
                (true, false) => "0",
                (true, true) => "1",
            };
            text.push_str(&format!("{}/{}/{}/{state}\n", e.topic, e.partition, e.time_ms));
        }
        text.into_bytes()
    }

    /// Parses a progress record's payload; `None` if any line is not one.
    pub fn parse_all(payload: &'a [u8]) -> Option<Vec<Progress<'a>>> {
        let text = std::str::from_utf8(payload).ok()?;
        text.lines()
            .map(|line| {
                let mut parts = line.rsplitn(4, '/');
                let (owned, idle) = match parts.next()? {
                    "0" => (true, false),
                    "1" => (true, true),
                    "u" => (false, false),
                    _ => return None,
                };
                let time_ms = parts.next()?.parse().ok()?;
                let partition = parts.next()?.parse().ok()?;
                let topic = parts.next().filter(|t| !t.is_empty())?;
                Some(Progress { topic, partition, time_ms, idle, owned })
            })
            .collect()
    }
}

/// What a slice knows of one input partition's progress (repartition mode).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InputProgress {
    /// The largest event time a router announced having routed from it.
    pub time_ms: u64,
    /// Announced idle, and no record of it has come since.
    pub idle: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(source, payload)` of an unframed value that carries no reading.
    fn bare<'a>(u: Unframed<'a>) -> (Option<SourceRef<'a>>, Option<&'a [u8]>) {
        assert_eq!(u.reading, None, "{u:?}");
        (u.source, u.payload)
    }

    #[test]
    fn a_framed_value_gives_back_its_stamp_and_payload() {
        let mut buf = Vec::new();
        frame_into(&mut buf, "clicks", 2, 41, None, Some(br#"{"id":"a"}"#)).unwrap();
        let want = SourceRef { topic: "clicks", partition: 2, offset: 41 };
        assert_eq!(bare(unframe(None, &buf)), (Some(want), Some(&br#"{"id":"a"}"#[..])));
        // A null value (a tombstone) stays null, an empty one empty.
        let mut null = Vec::new();
        frame_into(&mut null, "clicks", 2, 41, None, None).unwrap();
        assert_eq!(bare(unframe(None, &null)), (Some(want), None));
        frame_into(&mut null, "clicks", 2, 41, None, Some(b"")).unwrap();
        assert_eq!(bare(unframe(None, &null)), (Some(want), Some(&b""[..])));
        // A payload that itself starts like a frame is framed again, and
        // unframed once.
        let inner = buf.clone();
        frame_into(&mut buf, "t", 0, 1, None, Some(&inner)).unwrap();
        assert_eq!(unframe(None, &buf).payload, Some(&inner[..]));
        // An earlier release's record: the header's stamp, the value as is.
        assert_eq!(bare(unframe(Some(b"clicks/2/41"), b"\0dS1xx")), (Some(want), Some(&b"\0dS1xx"[..])));
        // Control records and broken frames have no source and keep their value.
        for v in
            [&b""[..], b"{}", b"\0dS1", b"\0dS1\0", b"\0dS1\0\x09clicks/2", b"\0dS1\0\x03a/b", b"\0dS3\0\x03a/1/2\0"]
        {
            assert_eq!(bare(unframe(None, v)), (None, Some(v)), "{v:?}");
        }
    }

    #[test]
    fn a_frame_carries_the_routers_reading_before_the_payload() {
        let reading = Reading { seed: 7, hash: KeyHash { h1: u64::MAX, h2: 3 }, time_ms: 1_700_000_000_123 };
        let want = SourceRef { topic: "clicks", partition: 2, offset: 41 };
        let mut buf = Vec::new();
        for payload in [Some(&br#"{"id":"a"}"#[..]), Some(b""), None] {
            frame_into(&mut buf, "clicks", 2, 41, Some(&reading), payload).unwrap();
            assert_eq!(unframe(None, &buf), Unframed { source: Some(want), payload, reading: Some(reading) });
            // Cut anywhere inside the reading: not a frame.
            let cut = 4 + 2 + "clicks/2/41".len() + 31;
            assert_eq!(bare(unframe(None, &buf[..cut])), (None, Some(&buf[..cut])));
        }
    }

    #[test]
    fn source_stamps() {
        let mut buf = [0u8; STAMP_BYTES];
        let stamp = SourceRef::stamp(&mut buf, "clicks.v2", 7, 12345).unwrap();
        assert_eq!(SourceRef::parse(stamp), Some(SourceRef { topic: "clicks.v2", partition: 7, offset: 12345 }));
        // The longest stamp fits.
        let topic = "t".repeat(249);
        let stamp = SourceRef::stamp(&mut buf, &topic, i32::MIN, i64::MIN).unwrap().to_vec();
        assert_eq!(stamp, format!("{topic}/{}/{}", i32::MIN, i64::MIN).as_bytes());
        assert_eq!(SourceRef::parse(&stamp).map(|s| s.topic), Some(&topic[..]));
        assert_eq!(SourceRef::parse(b"nope"), None);
        assert_eq!(SourceRef::parse(b"/1/2"), None);
    }

    /// A topic name longer than Kafka allows (only a forged or damaged record
    /// carries one) is refused, never a panic: no stamp is written, none is
    /// parsed, and a frame naming one is no frame.
    #[test]
    fn a_topic_name_longer_than_kafka_allows_is_refused_not_a_panic() {
        let mut buf = [0u8; STAMP_BYTES];
        for len in [250, 300, 320, 1000, 65_535] {
            let topic = "t".repeat(len);
            assert_eq!(SourceRef::stamp(&mut buf, &topic, i32::MAX, i64::MAX), None, "{len}");
            assert_eq!(SourceRef::stamp(&mut buf, &topic, 0, 0), None, "{len}");
            let stamp = format!("{topic}/1/2");
            assert_eq!(SourceRef::parse(stamp.as_bytes()), None, "{len}");
            // A forged slice-log frame with that stamp, as only a writer
            // other than the router could put into the slice log.
            let mut forged = FRAME_MAGIC.to_vec();
            forged.extend_from_slice(&(stamp.len() as u16).to_be_bytes());
            forged.extend_from_slice(stamp.as_bytes());
            forged.extend_from_slice(b"not json");
            assert_eq!(bare(unframe(None, &forged)), (None, Some(&forged[..])), "{len}");
            // The same stamp in an earlier release's header.
            assert_eq!(unframe(Some(stamp.as_bytes()), b"{}").source, None, "{len}");
            let mut frame = vec![1, 2, 3];
            assert_eq!(frame_into(&mut frame, &topic, 0, 0, None, Some(b"{}")), None, "{len}");
            assert!(frame.is_empty());
        }
    }

    #[test]
    fn progress_payloads() {
        let entries = [
            Progress { topic: "clicks.v2", partition: 3, time_ms: 1_700_000_000_000, idle: false, owned: true },
            Progress { topic: "a/b", partition: 0, time_ms: 0, idle: true, owned: true },
            Progress { topic: "c", partition: 9, time_ms: 0, idle: false, owned: false },
        ];
        let bytes = Progress::encode(&entries);
        assert_eq!(Progress::parse_all(&bytes).unwrap(), entries);
        assert_eq!(Progress::parse_all(b"").unwrap(), []);
        for bad in [&b"t/1/2"[..], b"t/1/2/3", b"t/1/2/U", b"/1/2/0", b"t/x/2/0", b"t/1/-2/0", b"\xff/1/2/0"] {
            assert_eq!(Progress::parse_all(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
