//! An input record a slice holds for the watermark ([`HeldRecord`]): what
//! its outputs copy, owned, in one buffer. Built when the record arrives,
//! or when a restore reads it back.

use rdkafka::message::{Headers, Message, OwnedMessage};

use crate::engine::SourceRef;
use crate::kafka::out_record::{Origin, OutHeaders, OutRecord, PackedHeaders};
use crate::kafka::slice_log::batch::BatchEntry;
use crate::kafka::slice_log::{Holds, parts};

/// An input record kept until its judgment: key, input payload, source
/// topic and header names and values back to back in `bytes`.
pub struct HeldRecord {
    bytes: Vec<u8>,
    key_len: Option<u32>,
    payload_len: Option<u32>,
    topic_len: u32,
    partition: i32,
    offset: i64,
    header_lens: Vec<(u32, u32)>,
    timestamp_ms: Option<i64>,
    /// What it counts against `slicing.max_held_bytes`: the consumed record's
    /// key, value and headers ([`crate::kafka::record_bytes`]).
    counted: usize,
}

impl HeldRecord {
    /// The arriving record `rec`, brought by a slice-log value of
    /// `value_len` bytes.
    pub fn of(rec: &OutRecord<'_>, value_len: usize) -> Self {
        let source = rec.origin.source();
        Self::build(rec.key, rec.payload, source, rec.headers.iter(), rec.timestamp_ms, value_len)
    }

    /// A batch's record (`slicing.log_format = "batches"`), as it arrives
    /// and as a restore reads it back alike.
    pub fn of_batch_entry(entry: &BatchEntry<'_>) -> Self {
        let value_len = entry.payload.map_or(0, <[u8]>::len);
        Self::build(entry.key, entry.payload, entry.source, entry.headers.iter(), entry.timestamp_ms, value_len)
    }

    /// A record read again by a restore: `msg` as the slice log (`holds`) holds it.
    pub fn restored(holds: Holds, msg: &OwnedMessage) -> Self {
        let framed = parts(holds, msg);
        let own = SourceRef { topic: msg.topic(), partition: msg.partition(), offset: msg.offset() };
        let headers = msg.headers().map(|h| h.iter().map(|h| (h.key, h.value)));
        let value_len = msg.payload().map_or(0, <[u8]>::len);
        let timestamp = msg.timestamp().to_millis();
        let source = framed.source.unwrap_or(own);
        Self::build(msg.key(), framed.payload, source, headers.into_iter().flatten(), timestamp, value_len)
    }

    /// `value_len`: the length of the slice-log record's value (counted,
    /// frame and all, as the record was).
    fn build<'h>(
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        source: SourceRef<'_>,
        headers: impl Iterator<Item = (&'h str, Option<&'h [u8]>)>,
        timestamp_ms: Option<i64>,
        value_len: usize,
    ) -> Self {
        let len = |b: Option<&[u8]>| b.map_or(0, <[u8]>::len);
        let mut bytes = Vec::with_capacity(len(key) + len(payload) + source.topic.len());
        bytes.extend_from_slice(key.unwrap_or_default());
        bytes.extend_from_slice(payload.unwrap_or_default());
        bytes.extend_from_slice(source.topic.as_bytes());
        let head = bytes.len();
        let mut header_lens = Vec::new();
        PackedHeaders::pack(headers, &mut bytes, &mut header_lens);
        HeldRecord {
            counted: len(key) + value_len + bytes.len() - head,
            key_len: key.map(|k| k.len() as u32),
            payload_len: payload.map(|p| p.len() as u32),
            topic_len: source.topic.len() as u32,
            partition: source.partition,
            offset: source.offset,
            header_lens,
            timestamp_ms,
            bytes,
        }
    }

    /// What it counts against `slicing.max_held_bytes`.
    pub fn counted(&self) -> usize {
        self.counted
    }

    /// The record as its copies see it.
    pub fn view(&self) -> OutRecord<'_> {
        let mut rest = &self.bytes[..];
        let mut take = |len: usize| {
            let (taken, after) = rest.split_at(len.min(rest.len()));
            rest = after;
            taken
        };
        let key = self.key_len.map(|len| take(len as usize));
        let payload = self.payload_len.map(|len| take(len as usize));
        let topic = take(self.topic_len as usize);
        // SAFETY: `build` copied these bytes from a `&str` (the source
        // topic) and nothing changes them after: they are UTF-8. Checking
        // them again cost a visible share of the per-record path.
        let topic = unsafe { std::str::from_utf8_unchecked(topic) };
        let source = SourceRef { topic, partition: self.partition, offset: self.offset };
        let headers = match self.header_lens.is_empty() {
            true => OutHeaders::None,
            false => OutHeaders::Packed(PackedHeaders { bytes: rest, lens: &self.header_lens }),
        };
        OutRecord { key, payload, headers, timestamp_ms: self.timestamp_ms, origin: Origin::Source(source) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_record_gives_back_what_it_was_built_of() {
        let headers: [(&str, Option<&[u8]>); 2] = [("h", Some(b"v")), ("none", None)];
        let source = SourceRef { topic: "clicks", partition: 2, offset: 41 };
        let held = HeldRecord::build(Some(b"k"), Some(b"{}"), source, headers.into_iter(), Some(7), 30);
        let view = held.view();
        assert_eq!((view.key, view.payload, view.timestamp_ms), (Some(&b"k"[..]), Some(&b"{}"[..]), Some(7)));
        assert_eq!(view.headers.iter().collect::<Vec<_>>(), headers);
        assert_eq!(view.origin.source(), source);
        assert_eq!(held.counted, 1 + 30 + 1 + 1 + 4);
        let bare = HeldRecord::build(None, None, source, std::iter::empty(), None, 0);
        let view = bare.view();
        assert_eq!((view.key, view.payload, view.headers.count()), (None, None, 0));
        assert_eq!(view.origin.source(), source);
    }
}
