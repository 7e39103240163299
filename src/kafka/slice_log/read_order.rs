//! The read order of shared mode (docs/shared-mode.md): which input
//! records, in which order, one process handed to its one filter.
//!
//! In shared mode one slice judges every input partition. The order in
//! which the consumer delivers records of different partitions depends on
//! fetch timing, and verdicts of late records, time-jump suspects and the
//! release positions of every judgment depend on that order — so it is
//! written down instead of re-decided: before a batch is judged, one
//! *read-order record* naming it (runs of consecutive offsets of one input
//! partition, in the order handed over) is appended to the read-order log.
//! The *virtual log* is the sequence of input records the read-order log
//! names; a record's place in it, its *virtual position*, plays the part
//! of the slice offset everywhere else (snapshot at X, held records,
//! release positions, replay up to Y). The position of the i-th record a
//! read-order record names is that record's offset in the slice log times
//! 2^[`INDEX_BITS`] plus i ([`position`]): the slice log's own offsets
//! order the records, so routers (several may write the log, each for its
//! input partitions) need not agree on positions, and a slice resumes at
//! position X by reading the slice log from [`log_offset`]`(X)`. Other
//! records of the slice log (a router's progress, a delete request) are at
//! index 0 of their offset. A replay re-reads the read-order log
//! and the input ranges it names and so meets the same records in the same
//! order (docs/design.md, invariant 1). Records are small: a batch of hundreds of
//! input records from a few partitions is a few runs.
//!
//! A read-order record also carries the router's reading of each record it
//! names (key hash and event time, [`NamedReadings`]): the slice takes it
//! instead of reading the record's key and time a second time, as a batch's
//! records spare it that (version 2; version 1 records, written before, have
//! none and stay readable: the slice reads those records itself).
//!
//! The encoding is versioned and checksummed like the snapshots
//! ([`crate::filter::timer::snapshot`]): magic, version, the body, XXH3-64 of
//! everything before it.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::kafka::consumed::Consumed;

use crate::engine::Reading;
use crate::engine::slice::MAX_TOPIC_BYTES;
use crate::filter::envelope::{begin, open_any, put_u32, put_u64, seal};
use crate::filter::{KeyHash, SnapshotError};
use crate::kafka::KafkaLayerError;
use crate::kafka::slice_log::batch_parts::BatchParts;

/// Reads the input records a read order names, for the slice that judges
/// them (the slicing mode whose slice log holds read orders provides it).
pub trait NamedRecords: Send {
    /// The records the read-order record `read_order` (its bytes) names,
    /// if they came another way than the input: a slice-log batch of them
    /// (its parts), to be checked against the record before use.
    fn handed(&mut self, _read_order: &[u8]) -> Option<BatchParts> {
        None
    }

    /// Hands `sink` the records at offsets `first..first + count` of
    /// `topic`/`partition`, in offset order.
    fn read_run(
        &mut self,
        topic: &str,
        partition: i32,
        first: i64,
        count: u32,
        sink: &mut dyn RunSink,
    ) -> Result<(), KafkaLayerError>;
}

/// What takes the records of a run ([`NamedRecords::read_run`]).
pub trait RunSink {
    /// Takes the record at `offset`.
    fn record(&mut self, offset: i64, msg: &Consumed<'_>) -> Result<(), KafkaLayerError>;

    /// The reader is about to wait for the input: what the sink keeps from
    /// others meanwhile (a lock) it lets go of.
    fn waiting(&mut self) {}
}

/// Bits of a virtual position that index the records of one read-order record.
pub const INDEX_BITS: u32 = 16;
/// The most records one read-order record may name.
pub const MAX_RECORDS: u64 = 1 << INDEX_BITS;

/// The virtual position of the `index`-th record named by the read-order
/// record at `log_offset` of the slice log (`index` below [`MAX_RECORDS`]).
pub fn position(log_offset: u64, index: u64) -> u64 {
    debug_assert!(index < MAX_RECORDS && log_offset < 1 << (64 - INDEX_BITS));
    (log_offset << INDEX_BITS) | index
}

/// The slice-log offset of the record that names virtual position `position`.
pub fn log_offset(position: u64) -> u64 {
    position >> INDEX_BITS
}

/// The first bytes of a read-order record.
pub const MAGIC: [u8; 8] = *b"dedupdRO";
/// The format version this build writes.
pub const VERSION: u16 = 2;
/// The oldest version this build reads: version 1 carries no readings.
pub const OLDEST_VERSION: u16 = 1;
/// Bytes of one record's reading in the encoding: key hash and time.
const READING_BYTES: usize = 24;
/// Readings a builder makes room for at its first record (a router turn's
/// records, at most, as the router reads them).
const READINGS_AT_FIRST: usize = 512;

/// Consecutive offsets of one input partition, handed over in offset order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    /// Shared by the runs of one topic: with partitions interleaved there
    /// is a run per record or so, and a name copied per run showed.
    pub topic: Arc<str>,
    pub partition: i32,
    /// The first offset of the run.
    pub first: i64,
    /// How many records (at least 1).
    pub count: u32,
}

impl Run {
    /// The offset after the run's last record.
    pub fn end(&self) -> i64 {
        self.first + i64::from(self.count)
    }
}

/// One read-order record: the virtual position of its first record and the
/// runs that follow from it, in the order they were judged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadOrder {
    pub first_position: u64,
    pub runs: Vec<Run>,
    /// The router's reading of each record named, in order (`None`: a
    /// version 1 record, or records the writer did not read).
    pub readings: Option<NamedReadings>,
}

/// The router's readings of the records a read order names: one key hash
/// seed (the slice's) and, per record, its key hash and event time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedReadings {
    pub seed: u64,
    pub of: Vec<(KeyHash, u64)>,
}

impl NamedReadings {
    /// The reading of the `index`-th record named.
    pub fn get(&self, index: u64) -> Option<Reading> {
        let &(hash, time_ms) = self.of.get(usize::try_from(index).ok()?)?;
        Some(Reading { seed: self.seed, hash, time_ms })
    }
}

/// Why a read-order record or a sequence of them cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReadOrderError {
    #[error("not a dedupd read-order record: expected magic {expected:?}, got {got:?}")]
    BadMagic { expected: Vec<u8>, got: Vec<u8> },
    #[error(
        "read-order record format version {got} is not supported (expected {expected}): read this log with the \
         dedupd release that wrote it"
    )]
    UnsupportedVersion { expected: u16, got: u16 },
    #[error("read-order record is truncated: expected at least {expected} bytes, got {got}")]
    Truncated { expected: usize, got: usize },
    #[error("read-order record is corrupt: checksum expected {expected:#018x}, got {got:#018x}")]
    ChecksumMismatch { expected: u64, got: u64 },
    #[error("read-order record is malformed: {0}")]
    Malformed(String),
    #[error(
        "the read-order log has a gap: expected a record starting at virtual position {expected}, got {got} \
         (records of it were lost or written by two owners)"
    )]
    Gap { expected: u64, got: u64 },
}

/// The envelope's refusals, in this record's words; a field that runs
/// past the end is malformed.
impl From<SnapshotError> for ReadOrderError {
    fn from(e: SnapshotError) -> Self {
        match e {
            SnapshotError::BadMagic { expected, got } => ReadOrderError::BadMagic { expected, got },
            SnapshotError::UnsupportedVersion { expected, got } => ReadOrderError::UnsupportedVersion { expected, got },
            SnapshotError::Truncated { expected, got } => ReadOrderError::Truncated { expected, got },
            SnapshotError::ChecksumMismatch { expected, got } => ReadOrderError::ChecksumMismatch { expected, got },
            other => ReadOrderError::Malformed(other.to_string()),
        }
    }
}

impl ReadOrder {
    /// How many input records the record names.
    pub fn len(&self) -> u64 {
        self.runs.iter().map(|r| u64::from(r.count)).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// The virtual position after its last record.
    pub fn end_position(&self) -> u64 {
        self.first_position + self.len()
    }

    /// Every record it names: (virtual position, topic, partition, offset), in order.
    pub fn records(&self) -> impl Iterator<Item = (u64, &str, i32, i64)> + '_ {
        let mut position = self.first_position;
        self.runs.iter().flat_map(move |run| {
            let start = position;
            position += u64::from(run.count);
            (0..run.count).map(move |i| (start + u64::from(i), &*run.topic, run.partition, run.first + i64::from(i)))
        })
    }

    /// Where the record at virtual `position` was read, if this record names it.
    pub fn locate(&self, position: u64) -> Option<(&str, i32, i64)> {
        let mut at = position.checked_sub(self.first_position)?;
        for run in &self.runs {
            if at < u64::from(run.count) {
                return Some((&*run.topic, run.partition, run.first + at as i64));
            }
            at -= u64::from(run.count);
        }
        None
    }

    /// Moves `cut` (per input partition, the next offset to read) past the
    /// records this one names before virtual position `until` (all of them
    /// when `until` is at or past its end): what a snapshot taken at
    /// `until` records as the input positions of its cut.
    pub fn advance_cut(&self, cut: &mut BTreeMap<(String, i32), i64>, until: u64) {
        let mut position = self.first_position;
        for run in &self.runs {
            if position >= until {
                return;
            }
            let taken = (until - position).min(u64::from(run.count));
            let next = run.first + taken as i64;
            let entry = cut.entry((run.topic.to_string(), run.partition)).or_insert(next);
            *entry = (*entry).max(next);
            position += u64::from(run.count);
        }
    }

    /// The record's encoding: magic, version, first position, a table of
    /// the topic names it uses, the runs (topic index, partition, first
    /// offset, count), the readings (a byte 0 for none; 1, the seed and per
    /// record named its key hash's halves and time), checksum.
    pub fn encode(&self) -> Vec<u8> {
        let mut topics: Vec<&str> = Vec::new();
        let readings = self.readings.as_ref().map_or(0, |r| r.of.len());
        let mut w = begin(MAGIC, VERSION, 32 + self.runs.len() * 18 + readings * READING_BYTES);
        put_u64(&mut w, self.first_position);
        let indices: Vec<u16> = self
            .runs
            .iter()
            .map(|run| {
                let i = topics.iter().position(|t| *t == &*run.topic).unwrap_or_else(|| {
                    topics.push(&*run.topic);
                    topics.len() - 1
                });
                u16::try_from(i).expect("fewer than 65 536 input topics")
            })
            .collect();
        w.extend_from_slice(&(topics.len() as u16).to_le_bytes());
        for topic in &topics {
            // Kafka topic names are at most 249 bytes.
            w.extend_from_slice(&(topic.len() as u16).to_le_bytes());
            w.extend_from_slice(topic.as_bytes());
        }
        put_u32(&mut w, u32::try_from(self.runs.len()).expect("fewer than 2^32 runs"));
        for (run, index) in self.runs.iter().zip(indices) {
            w.extend_from_slice(&index.to_le_bytes());
            put_u32(&mut w, run.partition as u32);
            put_u64(&mut w, run.first as u64);
            put_u32(&mut w, run.count);
        }
        match &self.readings {
            None => w.push(0),
            Some(readings) => {
                w.push(1);
                put_u64(&mut w, readings.seed);
                for (hash, time_ms) in &readings.of {
                    for word in [hash.h1, hash.h2, *time_ms] {
                        put_u64(&mut w, word);
                    }
                }
            }
        }
        seal(w)
    }

    /// Reads a record written by [`Self::encode`], refusing anything else.
    pub fn decode(bytes: &[u8]) -> Result<Self, ReadOrderError> {
        // The snapshots' envelope: magic, version and checksum checked the same way.
        let (mut r, version) = open_any(bytes, MAGIC, OLDEST_VERSION..=VERSION)?;
        let first_position = r.u64()?;
        let topic_count = r.u16()?;
        let mut topics = Vec::with_capacity(usize::from(topic_count));
        for _ in 0..topic_count {
            let len = r.u16()?;
            let name = r.take(usize::from(len))?;
            let name =
                std::str::from_utf8(name).map_err(|_| ReadOrderError::Malformed("a topic name is not UTF-8".into()))?;
            // Routers name input topics only: a longer name is forged or damaged.
            if name.len() > MAX_TOPIC_BYTES {
                return Err(ReadOrderError::Malformed(format!(
                    "a topic name of {} bytes, longer than Kafka allows ({MAX_TOPIC_BYTES})",
                    name.len()
                )));
            }
            topics.push(Arc::<str>::from(name));
        }
        let run_count = r.u32()?;
        // Each run takes 18 bytes: a count that cannot fit is refused before allocating for it.
        if u64::from(run_count) * 18 > bytes.len() as u64 {
            return Err(ReadOrderError::Malformed(format!("{run_count} runs cannot fit in {} bytes", bytes.len())));
        }
        let mut runs = Vec::with_capacity(run_count as usize);
        let mut end = first_position;
        for _ in 0..run_count {
            let index = r.u16()?;
            let topic = topics
                .get(usize::from(index))
                .ok_or_else(|| ReadOrderError::Malformed(format!("run names topic {index} of {}", topics.len())))?;
            let partition = r.u32()? as i32;
            let first = r.u64()?;
            let count = r.u32()?;
            if partition < 0 || first > i64::MAX as u64 - u64::from(count) || count == 0 {
                return Err(ReadOrderError::Malformed(format!(
                    "run {topic}/{partition} from offset {first}, {count} records"
                )));
            }
            end = end
                .checked_add(u64::from(count))
                .ok_or_else(|| ReadOrderError::Malformed("virtual positions overflow".into()))?;
            runs.push(Run { topic: topic.clone(), partition, first: first as i64, count });
        }
        let named = end - first_position;
        if named > MAX_RECORDS {
            return Err(ReadOrderError::Malformed(format!(
                "{named} records named, at most {MAX_RECORDS} fit one record's positions"
            )));
        }
        let readings = if version >= 2 { Self::decode_readings(&mut r, named)? } else { None };
        r.finish()?;
        Ok(ReadOrder { first_position, runs, readings })
    }

    /// The readings of a version 2 record naming `named` records: none, or
    /// one per record named.
    fn decode_readings(
        r: &mut crate::filter::envelope::Reader<'_>,
        named: u64,
    ) -> Result<Option<NamedReadings>, ReadOrderError> {
        match r.u8()? {
            0 => Ok(None),
            1 => {
                let seed = r.u64()?;
                // A count the bytes cannot hold is refused before allocating for it.
                let need = named as usize * READING_BYTES;
                if r.rest().len() < need {
                    return Err(ReadOrderError::Malformed(format!(
                        "{named} readings cannot fit in the {} bytes left",
                        r.rest().len()
                    )));
                }
                let mut of = Vec::with_capacity(named as usize);
                for _ in 0..named {
                    let (h1, h2, time_ms) = (r.u64()?, r.u64()?, r.u64()?);
                    of.push((KeyHash { h1, h2 }, time_ms));
                }
                Ok(Some(NamedReadings { seed, of }))
            }
            flag => Err(ReadOrderError::Malformed(format!("readings flag {flag}, expected 0 or 1"))),
        }
    }
}

/// Checks that `next` continues a log whose records so far end at virtual
/// position `end` (the first record of a log may start anywhere: the log's
/// start can have been deleted by retention).
pub fn check_follows(end: Option<u64>, next: &ReadOrder) -> Result<(), ReadOrderError> {
    match end {
        Some(expected) if expected != next.first_position => {
            Err(ReadOrderError::Gap { expected, got: next.first_position })
        }
        _ => Ok(()),
    }
}

/// Gathers the records handed to the filter into one [`ReadOrder`],
/// extending the last run while records of its partition follow in offset
/// order.
#[derive(Debug)]
pub struct ReadOrderBuilder {
    order: ReadOrder,
    /// The topic names of the runs so far, one allocation each.
    topics: Vec<Arc<str>>,
    /// How many records `order` names: [`ReadOrder::len`] walks the runs,
    /// and with partitions interleaved there is a run per record or so.
    len: u64,
}

impl ReadOrderBuilder {
    /// A builder whose first record will have virtual position `first_position`.
    pub fn at(first_position: u64) -> Self {
        ReadOrderBuilder { order: ReadOrder { first_position, ..ReadOrder::default() }, topics: Vec::new(), len: 0 }
    }

    /// The virtual position the next record handed over gets.
    pub fn next_position(&self) -> u64 {
        self.order.first_position + self.len
    }

    /// Notes the next record handed to the filter, read as `reading` (one
    /// seed for every record: the slice's; `None` when its reading travels
    /// another way, a handed-over page: the same for every record of one
    /// read order); returns its virtual position.
    pub fn push(&mut self, topic: &str, partition: i32, offset: i64, reading: Option<Reading>) -> u64 {
        let position = self.next_position();
        debug_assert!(self.len == 0 || reading.is_some() == self.order.readings.is_some(), "all readings or none");
        if let Some(reading) = reading {
            // Room for a router turn's records at once: growing a record's
            // readings one doubling at a time showed in the router's profile.
            let readings = self
                .order
                .readings
                .get_or_insert_with(|| NamedReadings { seed: reading.seed, of: Vec::with_capacity(READINGS_AT_FIRST) });
            debug_assert_eq!(readings.seed, reading.seed, "one seed per read order");
            readings.of.push((reading.hash, reading.time_ms));
        }
        self.len += 1;
        match self.order.runs.last_mut() {
            Some(run)
                if run.partition == partition
                    && run.end() == offset
                    && *run.topic == *topic
                    && run.count < u32::MAX =>
            {
                run.count += 1
            }
            _ => {
                let topic = match self.topics.iter().find(|t| ***t == *topic) {
                    Some(known) => Arc::clone(known),
                    None => {
                        self.topics.push(Arc::from(topic));
                        Arc::clone(self.topics.last().expect("just pushed"))
                    }
                };
                self.order.runs.push(Run { topic, partition, first: offset, count: 1 })
            }
        }
        position
    }

    /// The record so far (to be written before its records are judged); the
    /// builder goes on from its end.
    pub fn take(&mut self) -> ReadOrder {
        let next = ReadOrder { first_position: self.next_position(), ..ReadOrder::default() };
        self.len = 0;
        std::mem::replace(&mut self.order, next)
    }
}

#[cfg(test)]
mod tests;
