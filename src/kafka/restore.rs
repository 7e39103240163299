//! Where a slice resumes (design invariant 5).
//!
//! Load the newest valid snapshot (taken at slice offset X), read the last
//! output record of partition s (its source offset Y), replay X..=Y without
//! emitting, and continue from Y+1. Because the engine is deterministic, the
//! replay rebuilds exactly the state an uninterrupted run had, and the output
//! continues exactly where it stopped. Without a usable snapshot the slice
//! starts from the beginning of its retained log, also silently up to Y.

use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::message::{Headers, Message};

use super::checkpoint::{CheckpointStore, Manifest, ReadError, ReadFrom, ReadStats, read_partition};
use super::clients::Reader;
use super::{Context, KafkaLayerError, headers};
use crate::config::CorruptPolicy;
use crate::engine::SliceState;
use crate::engine::slice as slice_codec;
use crate::filter::FilterParams;

const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// How a slice came back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoredFrom {
    Snapshot {
        seq: u64,
        offset: u64,
    },
    /// No snapshot existed.
    Empty,
    /// The snapshot could not be used; the reason is logged and counted.
    Corrupt(String),
}

/// A restored slice and where to consume from.
pub struct ResumePoint {
    pub state: SliceState,
    pub manifest: Option<Manifest>,
    /// The first slice offset to consume.
    pub start: u64,
    /// Records up to and including this offset are replayed silently.
    pub replay_until: Option<u64>,
    pub from: RestoredFrom,
}

/// The slice offset in the header of the last record of `topic`/`partition`.
pub fn last_source_offset(reader: &Reader, topic: &str, partition: i32) -> Result<Option<u64>, KafkaLayerError> {
    let mut last: Option<Option<u64>> = None;
    read_partition(reader, topic, partition, ReadFrom::Last, |_, _, _, m| {
        let found = m.headers().and_then(|h| h.iter().find(|h| h.key == headers::SLICE_OFFSET)).and_then(|h| h.value);
        last = Some(found.and_then(|v| std::str::from_utf8(v).ok()).and_then(|s| s.parse::<u64>().ok()));
    })?;
    match last {
        None => Ok(None),
        Some(Some(y)) => Ok(Some(y)),
        Some(None) => Err(KafkaLayerError::Topology(format!(
            "the last record of {topic}/{partition} has no {} header: is another application writing to this \
             topic? dedupd needs its output partitions to itself",
            headers::SLICE_OFFSET
        ))),
    }
}

/// Everything restore needs.
pub struct Restorer<'a> {
    pub store: &'a CheckpointStore,
    pub reader: &'a Reader,
    pub params: &'a FilterParams,
    pub slice_topic: &'a str,
    /// Topics whose partition s only slice s writes, with the offset header.
    pub output_topics: Vec<&'a str>,
    pub on_corrupt: CorruptPolicy,
}

impl Restorer<'_> {
    pub fn restore(&self, slice: u32) -> Result<ResumePoint, KafkaLayerError> {
        let mut read = ReadStats::default();
        let started = Instant::now();
        let latest = self.store.read_latest_counted(slice, &mut read);
        // Restore time is mostly this read: say how much of the topic it took.
        log::info!(
            "slice {slice}: read {} checkpoint records, {:.1} MiB in {:.0} ms{}",
            read.records,
            read.bytes as f64 / (1 << 20) as f64,
            started.elapsed().as_secs_f64() * 1000.0,
            read.full_scan.as_ref().map_or(String::new(), |why| format!(" (whole partition: {why})"))
        );
        let (state, manifest, from) = match latest {
            Ok(Some((m, _))) if m.params != self.params.fingerprint() => {
                let why = format!(
                    "the snapshot was taken with {} but the filter is configured with {}",
                    m.params,
                    self.params.fingerprint()
                );
                (None, Some(m), RestoredFrom::Corrupt(why))
            }
            Ok(Some((m, bytes))) => match slice_codec::decode(&bytes, slice, self.params) {
                Ok(state) => {
                    let from = RestoredFrom::Snapshot { seq: m.seq, offset: m.offset };
                    (Some(state), Some(m), from)
                }
                Err(e) => (None, Some(m), RestoredFrom::Corrupt(e.to_string())),
            },
            Ok(None) => (None, None, RestoredFrom::Empty),
            Err(ReadError::Corrupt(why)) => (None, None, RestoredFrom::Corrupt(why)),
            Err(ReadError::Kafka(e)) => return Err(e),
        };
        if let RestoredFrom::Corrupt(why) = &from {
            log::error!("slice {slice}: the snapshot cannot be used: {why}");
            if self.on_corrupt == CorruptPolicy::Fail {
                return Err(KafkaLayerError::Checkpoint {
                    slice,
                    detail: format!("{why} (checkpoint.on_corrupt = fail)"),
                });
            }
        }
        let state = match state {
            Some(s) => s,
            None => {
                let (low, _) = self
                    .reader
                    .fetch_watermarks(self.slice_topic, slice as i32, IO_TIMEOUT)
                    .context(|| format!("watermarks of {}/{slice}", self.slice_topic))?;
                SliceState::new(slice, self.params.clone(), low.max(0) as u64)
            }
        };
        let mut last = None;
        for topic in &self.output_topics {
            last = last.max(last_source_offset(self.reader, topic, slice as i32)?);
        }
        let start = state.next_offset;
        let replay_until = last.filter(|&y| y >= start);
        log::info!(
            "slice {slice}: restored from {from:?}, consuming from offset {start}{}",
            replay_until.map_or(String::new(), |y| format!(", silently up to {y}"))
        );
        Ok(ResumePoint { state, manifest, start, replay_until, from })
    }
}
