//! The batch form of the slice log (`slicing.log_format = "batches"`): one
//! slice-log record holds the input records one router turn routed to one
//! slice, in routing order, so that the second hop costs one Kafka message
//! per batch rather than per record.
//!
//! The record's value is an envelope like the read orders' and the
//! snapshots' ([`crate::filter::envelope`]): magic, version, a table of the
//! input topic names it uses, the count, then per record its stamp (topic
//! index, partition, offset), which optional parts follow, the router's
//! [`Reading`], the Kafka timestamp, the key, the headers (`dedupd.*`
//! already removed by the router) and the payload; XXH3-64 of everything
//! before it. The `i`-th record of the batch at slice-log offset `o` is at
//! virtual position [`read_order::position`]`(o, i)`, as read orders
//! number theirs, so a batch holds at most [`read_order::MAX_RECORDS`].
//!
//! A batch is checked whole when read ([`Batch::decode`]): a damaged or
//! foreign one is refused with a reason before any of its records is taken.

use crate::engine::SourceRef;
use crate::engine::slice::{MAX_TOPIC_BYTES, Reading};
use crate::filter::envelope::{Reader, begin, open_any, put_u32, put_u64, seal};
use crate::filter::{KeyHash, SnapshotError};
use crate::kafka::out_record::{FramedHeaders, OutHeaders};
pub use crate::kafka::slice_log::batch_parts::BatchParts;
use crate::kafka::slice_log::read_order;

/// The first bytes of a batch.
pub const MAGIC: [u8; 8] = *b"dedupdSB";
/// The format version this build writes and reads.
pub const VERSION: u16 = 1;

/// Bits of a record's `parts` byte: which optional parts follow its stamp.
const HAS_READING: u8 = 1;
const HAS_TIMESTAMP: u8 = 2;
const HAS_KEY: u8 = 4;
const HAS_PAYLOAD: u8 = 8;
/// The envelope around the records: magic, version, the count, the
/// checksum; the topic table's count.
const ENVELOPE_BYTES: usize = 8 + 2 + 4 + 8 + 2;

/// One input record of a batch, borrowed from the batch's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchEntry<'a> {
    pub source: SourceRef<'a>,
    pub reading: Option<Reading>,
    pub timestamp_ms: Option<i64>,
    pub key: Option<&'a [u8]>,
    pub headers: OutHeaders<'a>,
    pub payload: Option<&'a [u8]>,
}

/// Why a batch cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BatchError {
    #[error("not a dedupd slice-log batch: expected magic {expected:?}, got {got:?}")]
    BadMagic { expected: Vec<u8>, got: Vec<u8> },
    #[error(
        "slice-log batch format version {got} is not supported (expected {expected}): read this log with the \
         dedupd release that wrote it"
    )]
    UnsupportedVersion { expected: u16, got: u16 },
    #[error("slice-log batch is truncated: expected at least {expected} bytes, got {got}")]
    Truncated { expected: usize, got: usize },
    #[error("slice-log batch is corrupt: checksum expected {expected:#018x}, got {got:#018x}")]
    ChecksumMismatch { expected: u64, got: u64 },
    #[error("slice-log batch is malformed: {0}")]
    Malformed(String),
}

impl From<SnapshotError> for BatchError {
    fn from(e: SnapshotError) -> Self {
        match e {
            SnapshotError::BadMagic { expected, got } => BatchError::BadMagic { expected, got },
            SnapshotError::UnsupportedVersion { expected, got } => BatchError::UnsupportedVersion { expected, got },
            SnapshotError::Truncated { expected, got } => BatchError::Truncated { expected, got },
            SnapshotError::ChecksumMismatch { expected, got } => BatchError::ChecksumMismatch { expected, got },
            other => BatchError::Malformed(other.to_string()),
        }
    }
}

/// A batch read and checked whole: its records in routing order.
#[derive(Debug, PartialEq, Eq)]
pub struct Batch<'a> {
    pub entries: Vec<BatchEntry<'a>>,
}

impl<'a> Batch<'a> {
    /// Reads a batch written by [`BatchBuilder::finish`], refusing anything else.
    pub fn decode(bytes: &'a [u8]) -> Result<Self, BatchError> {
        let (mut r, _) = open_any(bytes, MAGIC, VERSION..=VERSION)?;
        let topic_count = r.u16()?;
        let mut topics = Vec::with_capacity(usize::from(topic_count));
        for _ in 0..topic_count {
            let len = r.u16()?;
            let name = std::str::from_utf8(r.take(usize::from(len))?)
                .map_err(|_| BatchError::Malformed("a topic name is not UTF-8".into()))?;
            // Routers name input topics only: a longer name is forged or damaged.
            if name.len() > MAX_TOPIC_BYTES {
                return Err(BatchError::Malformed(format!(
                    "a topic name of {} bytes, longer than Kafka allows ({MAX_TOPIC_BYTES})",
                    name.len()
                )));
            }
            topics.push(name);
        }
        let count = r.u32()?;
        if u64::from(count) > read_order::MAX_RECORDS {
            let most = read_order::MAX_RECORDS;
            return Err(BatchError::Malformed(format!("{count} records, at most {most} fit one record's positions")));
        }
        // A record takes at least 17 bytes: a count that cannot fit is refused before allocating for it.
        if u64::from(count) * 17 > bytes.len() as u64 {
            return Err(BatchError::Malformed(format!("{count} records cannot fit in {} bytes", bytes.len())));
        }
        read_entries(r, &topics, count)
    }

    /// The records of a batch kept in memory ([`BatchParts`]), read and
    /// checked as [`Self::decode`] reads an encoded one's.
    pub fn of_parts(parts: &'a BatchParts) -> Result<Self, BatchError> {
        let topics: Vec<&str> = parts.topics.iter().map(String::as_str).collect();
        read_entries(Reader::over(&parts.body), &topics, parts.count)
    }
}

/// Reads `count` records from `r`, which they must fill.
fn read_entries<'a>(mut r: Reader<'a>, topics: &[&'a str], count: u32) -> Result<Batch<'a>, BatchError> {
    let mut entries = Vec::with_capacity(count as usize);
    for i in 0..count {
        entries.push(read_entry(&mut r, topics).map_err(|e| match e {
            BatchError::Malformed(what) => BatchError::Malformed(format!("record {i}: {what}")),
            other => other,
        })?);
    }
    r.finish()?;
    Ok(Batch { entries })
}

fn read_entry<'a>(r: &mut Reader<'a>, topics: &[&'a str]) -> Result<BatchEntry<'a>, BatchError> {
    let index = r.u16()?;
    let topic = *topics
        .get(usize::from(index))
        .ok_or_else(|| BatchError::Malformed(format!("it names topic {index} of {}", topics.len())))?;
    let partition = r.u32()? as i32;
    let offset = r.u64()? as i64;
    if partition < 0 || offset < 0 {
        return Err(BatchError::Malformed(format!("its stamp {topic}/{partition}/{offset}")));
    }
    let parts = r.u8()?;
    if parts & !(HAS_READING | HAS_TIMESTAMP | HAS_KEY | HAS_PAYLOAD) != 0 {
        return Err(BatchError::Malformed(format!("unknown parts {parts:#04x}")));
    }
    let reading = match parts & HAS_READING {
        0 => None,
        _ => {
            let (seed, h1, h2, time_ms) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
            Some(Reading { seed, hash: KeyHash { h1, h2 }, time_ms })
        }
    };
    let timestamp_ms = if parts & HAS_TIMESTAMP == 0 { None } else { Some(r.u64()? as i64) };
    let key = if parts & HAS_KEY == 0 { None } else { Some(sized(r)?) };
    let headers = OutHeaders::Framed(FramedHeaders::read(r)?);
    let payload = if parts & HAS_PAYLOAD == 0 { None } else { Some(sized(r)?) };
    let source = SourceRef { topic, partition, offset };
    Ok(BatchEntry { source, reading, timestamp_ms, key, headers, payload })
}

/// A field written with its u32 length in front.
fn sized<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], BatchError> {
    let len = r.u32()?;
    Ok(r.take(len as usize)?)
}

/// Gathers the records one router turn routes to one slice into a batch,
/// bounded in records and in bytes (the slice log's record-size limit less
/// a margin): [`Self::fits`] says when to [`Self::finish`] one first.
#[derive(Debug)]
pub struct BatchBuilder {
    topics: Vec<String>,
    body: Vec<u8>,
    count: u32,
    max_records: u32,
    max_bytes: usize,
}

impl BatchBuilder {
    /// A builder of batches of at most `max_records` records (and
    /// [`read_order::MAX_RECORDS`]) and `max_bytes` bytes.
    pub fn new(max_records: u32, max_bytes: usize) -> Self {
        let max_records = max_records.clamp(1, read_order::MAX_RECORDS as u32);
        BatchBuilder { topics: Vec::new(), body: Vec::new(), count: 0, max_records, max_bytes }
    }

    pub fn len(&self) -> u32 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether `entry` still fits the batch; an empty batch takes any
    /// record (one too large for the slice log alone is refused by the broker).
    pub fn fits(&self, entry: &BatchEntry<'_>) -> bool {
        let topic = if self.topics.iter().any(|t| t == entry.source.topic) { 0 } else { 2 + entry.source.topic.len() };
        let size = self.encoded_len() + topic + entry_len(entry);
        self.count == 0 || (self.count < self.max_records && size <= self.max_bytes)
    }

    /// The bytes [`Self::finish`] would write now.
    pub fn encoded_len(&self) -> usize {
        ENVELOPE_BYTES + self.topics.iter().map(|t| 2 + t.len()).sum::<usize>() + self.body.len()
    }

    /// Adds `entry` with those of its headers `copied` says (the caller has
    /// asked [`Self::fits`]). `None`, and nothing added, when it cannot be
    /// written: a topic name longer than Kafka allows, a negative stamp, a
    /// part over 4 GiB, more than `u16::MAX` headers.
    #[must_use]
    pub fn push(&mut self, entry: &BatchEntry<'_>, copied: impl Fn(&str) -> bool) -> Option<()> {
        let SourceRef { topic, partition, offset } = entry.source;
        let too_long = |b: Option<&[u8]>| b.is_some_and(|b| u32::try_from(b.len()).is_err());
        if topic.len() > MAX_TOPIC_BYTES
            || partition < 0
            || offset < 0
            || too_long(entry.key)
            || too_long(entry.payload)
        {
            return None;
        }
        let index = self.topics.iter().position(|t| t == topic).unwrap_or(self.topics.len());
        let at = self.body.len();
        let w = &mut self.body;
        w.extend_from_slice(&(index as u16).to_le_bytes());
        put_u32(w, partition as u32);
        put_u64(w, offset as u64);
        let flag = |present: bool, bit: u8| if present { bit } else { 0 };
        w.push(
            flag(entry.reading.is_some(), HAS_READING)
                | flag(entry.timestamp_ms.is_some(), HAS_TIMESTAMP)
                | flag(entry.key.is_some(), HAS_KEY)
                | flag(entry.payload.is_some(), HAS_PAYLOAD),
        );
        if let Some(reading) = entry.reading {
            for word in [reading.seed, reading.hash.h1, reading.hash.h2, reading.time_ms] {
                put_u64(w, word);
            }
        }
        if let Some(ts) = entry.timestamp_ms {
            put_u64(w, ts as u64);
        }
        if let Some(key) = entry.key {
            put_sized(w, key);
        }
        if FramedHeaders::put(w, entry.headers.iter().filter(|(name, _)| copied(name))).is_none() {
            self.body.truncate(at);
            return None;
        }
        if let Some(payload) = entry.payload {
            put_sized(w, payload);
        }
        if index == self.topics.len() {
            self.topics.push(topic.to_string());
        }
        self.count += 1;
        Some(())
    }

    /// Makes room for `bytes` more of records (a builder whose size is
    /// known ahead grows once instead of doubling its way there).
    pub fn reserve(&mut self, bytes: usize) {
        self.body.reserve(bytes);
    }

    /// What the builder gathered, not encoded (no envelope, no checksum:
    /// for a batch that stays in memory), and a new one started.
    pub fn take_parts(&mut self) -> BatchParts {
        let parts = BatchParts {
            topics: std::mem::take(&mut self.topics),
            body: std::mem::take(&mut self.body),
            count: self.count,
        };
        self.count = 0;
        parts
    }

    /// The batch's value, sealed; the builder starts a new batch.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut w = begin(MAGIC, VERSION, self.encoded_len());
        w.extend_from_slice(&(self.topics.len() as u16).to_le_bytes());
        for topic in &self.topics {
            w.extend_from_slice(&(topic.len() as u16).to_le_bytes());
            w.extend_from_slice(topic.as_bytes());
        }
        put_u32(&mut w, self.count);
        w.extend_from_slice(&self.body);
        self.topics.clear();
        self.body.clear();
        self.count = 0;
        seal(w)
    }
}

fn put_sized(w: &mut Vec<u8>, bytes: &[u8]) {
    put_u32(w, bytes.len() as u32);
    w.extend_from_slice(bytes);
}

/// The bytes `entry` takes in a batch's body.
fn entry_len(entry: &BatchEntry<'_>) -> usize {
    let sized = |b: Option<&[u8]>| b.map_or(0, |b| 4 + b.len());
    let headers: usize = entry.headers.iter().map(|(n, v)| 2 + n.len() + 4 + v.map_or(0, <[u8]>::len)).sum();
    2 + 4
        + 8
        + 1
        + entry.reading.map_or(0, |_| 32)
        + entry.timestamp_ms.map_or(0, |_| 8)
        + sized(entry.key)
        + 2
        + headers
        + sized(entry.payload)
}

#[cfg(test)]
mod tests;
