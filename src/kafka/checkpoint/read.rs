//! Reading a slice's newest snapshot back: from the partition's tail when
//! it can, the whole partition when the tail does not settle it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use twox_hash::XxHash3_64;

use super::manifest::{
    MANIFEST_VERSION, Manifest, ReadError, ReadStats, Rejection, SnapshotId, chunk_key, chunk_seq, readable_format,
};
use super::producer::IO_TIMEOUT;
use super::store::CheckpointStore;
use crate::kafka::clients::Reader;
use crate::kafka::{Context, KafkaLayerError};

/// The newest manifest record of a slice's partition, where the backward
/// search found it.
struct NewestManifest {
    /// Its offset.
    at: i64,
    /// Its value (`None`: a tombstone).
    body: Option<Vec<u8>>,
    /// The start of the window it was found in: records from there on have
    /// been read.
    window_start: i64,
    /// The partition's retained range when the search began.
    low: i64,
    high: i64,
}

impl CheckpointStore {
    /// The newest complete snapshot of `slice`: its manifest and bytes.
    pub fn read_latest(&self, slice: u32) -> Result<Option<(Manifest, Vec<u8>)>, ReadError> {
        self.read_latest_counted(slice, &mut ReadStats::default())
    }

    /// [`CheckpointStore::read_latest`], adding what it read to `stats`.
    ///
    /// First from the tail: the newest manifest, then only its snapshot's
    /// chunks. If that finds anything inconsistent (no manifest readable at
    /// the tail, a chunk missing, a checksum that does not match), the whole
    /// partition is scanned as before, and its verdict stands: a corrupt
    /// newest snapshot is reported as corrupt, with the same message.
    pub fn read_latest_counted(
        &self,
        slice: u32,
        stats: &mut ReadStats,
    ) -> Result<Option<(Manifest, Vec<u8>)>, ReadError> {
        let reader = self.reader.lock().expect("reader lock");
        match self.read_tail(&reader, slice, stats)? {
            Tail::Found(manifest, bytes) => return Ok(Some((manifest, bytes))),
            Tail::NoManifest => return Ok(None),
            Tail::Inconsistent(why) => {
                log::warn!("slice {slice}: reading the newest snapshot from the tail failed ({why}); scanning all");
                stats.full_scan = Some(why);
            }
        }
        self.read_full(&reader, slice, stats)
    }

    /// The manifest of the newest snapshot of `slice` from the tail of its
    /// partition, without its chunks (the same search as
    /// [`Self::read_latest`]); `None` when the tail has no readable one.
    /// Another application's manifest is an error ([`Self::check_owner`]).
    pub fn latest_manifest(&self, slice: u32) -> Result<Option<Manifest>, KafkaLayerError> {
        let reader = self.reader.lock().expect("reader lock");
        let found = self.find_newest_manifest(&reader, slice, |_, _, _, _| {})?;
        let manifest = found.and_then(|f| f.body).and_then(|b| serde_json::from_slice::<Manifest>(&b).ok());
        if let Some(m) = &manifest {
            self.check_owner(m)?;
        }
        Ok(manifest)
    }

    /// Searches `slice`'s partition backwards for its newest manifest record;
    /// `None` if there is none. `seen` gets each record read, with the start
    /// of the window it was read in.
    ///
    /// The search reads windows of offsets ending where the previous one
    /// began, so no manifest can be skipped. The partition's tail is usually
    /// the previous snapshot's tombstones, and a tombstone (or a chunk of an
    /// interrupted write) under key `<slice>/<seq>[.<attempt>]/<i>` tells
    /// where its run began: `i` records back. The next window reaches there,
    /// which lands on the manifest without fetching chunk payloads; without
    /// such a key the windows grow fourfold.
    fn find_newest_manifest(
        &self,
        reader: &Reader,
        slice: u32,
        mut seen: impl FnMut(i64, i64, &[u8], Option<&[u8]>),
    ) -> Result<Option<NewestManifest>, KafkaLayerError> {
        let partition = slice as i32;
        let topic = &self.topic;
        let (low, high) = reader
            .fetch_watermarks(topic, partition, IO_TIMEOUT)
            .context(|| format!("watermarks of {topic}/{partition}"))?;
        if high <= low {
            return Ok(None);
        }
        let manifest_key = format!("{slice}/manifest");
        // The listed end may be the last batch's base + 1 (Tansu): the first
        // window starts there and reads to the real end.
        let (mut start, mut stop, mut span) = (high - 1, None, 1i64);
        loop {
            let mut newest = None;
            let mut hint = None;
            read_range(reader, topic, partition, start, stop, high, |offset, key, value, _| {
                seen(start, offset, key, value);
                if key == manifest_key.as_bytes() {
                    newest = Some((offset, value.map(<[u8]>::to_vec)));
                } else if let Some((_, i)) = chunk_key(key, slice)
                    && hint.is_none()
                {
                    hint = Some(offset.saturating_sub(i64::try_from(i).unwrap_or(i64::MAX)).saturating_sub(1));
                }
            })?;
            if let Some((at, body)) = newest {
                return Ok(Some(NewestManifest { at, body, window_start: start, low, high }));
            }
            if start <= low {
                return Ok(None);
            }
            span = span.saturating_mul(4);
            let next = hint.filter(|&h| h < start).unwrap_or(start.saturating_sub(span)).max(low);
            (stop, start) = (Some(start), next);
        }
    }

    /// Finds the newest manifest ([`Self::find_newest_manifest`]), then
    /// reads its chunks.
    fn read_tail(&self, reader: &Reader, slice: u32, stats: &mut ReadStats) -> Result<Tail, KafkaLayerError> {
        let partition = slice as i32;
        let topic = &self.topic;
        // The chunk records (and tombstones) of the window being read: if it
        // holds the newest manifest, some of them may be its chunks, which
        // need not be fetched again.
        let mut window: Vec<(i64, SnapshotId, u64, Option<Vec<u8>>)> = Vec::new();
        let mut window_start = None;
        let found = self.find_newest_manifest(reader, slice, |start, offset, key, value| {
            stats.count(key, value);
            if window_start != Some(start) {
                window.clear();
                window_start = Some(start);
            }
            if let Some((seq, i)) = chunk_key(key, slice) {
                window.push((offset, seq, i, value.map(<[u8]>::to_vec)));
            }
        })?;
        let Some(NewestManifest { at: manifest_at, body, window_start: start, low, high }) = found else {
            return Ok(Tail::NoManifest);
        };

        let Some(body) = body else {
            return Ok(Tail::Inconsistent(format!("the manifest at offset {manifest_at} is a tombstone")));
        };
        let manifest: Manifest = match serde_json::from_slice(&body) {
            Ok(m) => m,
            Err(e) => {
                return Ok(Tail::Inconsistent(format!("the manifest at offset {manifest_at} is unreadable: {e}")));
            }
        };
        if !readable_format(manifest.format) {
            return Ok(Tail::Inconsistent(format!("manifest format {}", manifest.format)));
        }
        let first = match manifest.first_chunk_offset {
            Some(first) => i64::try_from(first).unwrap_or(i64::MAX),
            None => manifest_at - i64::from(manifest.chunks),
        };
        // Each chunk is one record between the first and the manifest.
        if first < low || first > manifest_at - i64::from(manifest.chunks) {
            return Ok(Tail::Inconsistent(format!(
                "snapshot {}: {} chunks cannot lie between offsets {first} and {manifest_at} (retained from {low})",
                manifest.seq, manifest.chunks
            )));
        }
        // The last value of each chunk key before the manifest is the one it
        // names: what lies below the last window is read now, in offset
        // order, then the window's records override it.
        let mut parts: Vec<Option<Vec<u8>>> = vec![None; manifest.chunks as usize];
        let mut keep = |id: SnapshotId, i: u64, value: Option<&[u8]>| {
            if id == manifest.id()
                && let Some(part) = usize::try_from(i).ok().and_then(|i| parts.get_mut(i))
            {
                *part = value.map(<[u8]>::to_vec);
            }
        };
        read_range(reader, topic, partition, first, Some(start.min(manifest_at)), high, |_, key, value, _| {
            stats.count(key, value);
            if let Some((seq, i)) = chunk_key(key, slice) {
                keep(seq, i, value);
            }
        })?;
        for (_, seq, i, value) in window.iter().filter(|(offset, ..)| (first..manifest_at).contains(offset)) {
            keep(*seq, *i, value.as_deref());
        }
        drop(window);
        if let Some(i) = parts.iter().position(Option::is_none) {
            return Ok(Tail::Inconsistent(format!(
                "chunk {i} of snapshot {} is not between offsets {first} and {manifest_at}",
                manifest.seq
            )));
        }
        let mut bytes = Vec::with_capacity(parts.iter().flatten().map(Vec::len).sum());
        for part in parts.into_iter().flatten() {
            bytes.extend_from_slice(&part);
        }
        if bytes.len() as u64 != manifest.bytes || XxHash3_64::oneshot(&bytes) != manifest.checksum {
            return Ok(Tail::Inconsistent(format!(
                "snapshot {}: the chunks between offsets {first} and {manifest_at} do not match the manifest",
                manifest.seq
            )));
        }
        Ok(Tail::Found(manifest, bytes))
    }

    /// The newest complete snapshot from a scan of the whole partition.
    ///
    /// One pass over the partition keeps the latest value of each key, but
    /// when it reads a manifest it drops the chunks of every other snapshot:
    /// a snapshot's chunks all come before its manifest, so those chunks can
    /// never be the newest manifest's. Without compaction the partition holds
    /// every snapshot ever written; memory stays at about two of them.
    fn read_full(
        &self,
        reader: &Reader,
        slice: u32,
        stats: &mut ReadStats,
    ) -> Result<Option<(Manifest, Vec<u8>)>, ReadError> {
        let manifest_key = format!("{slice}/manifest");
        let mut latest: HashMap<Vec<u8>, Option<Vec<u8>>> = HashMap::new();
        read_partition(reader, &self.topic, slice as i32, ReadFrom::Start, |_, key, value, _| {
            stats.count(key, value);
            if key == manifest_key.as_bytes()
                && let Some(id) = value.and_then(|v| serde_json::from_slice::<Manifest>(v).ok()).map(|m| m.id())
            {
                latest.retain(|k, _| chunk_seq(k).is_none_or(|s| s == id));
            }
            latest.insert(key.to_vec(), value.map(<[u8]>::to_vec));
        })?;
        let Some(Some(body)) = latest.get(manifest_key.as_bytes()) else {
            return Ok(None);
        };
        let manifest: Manifest = serde_json::from_slice(body)
            .map_err(|e| ReadError::Corrupt(Rejection::Manifest, format!("slice {slice}: unreadable manifest: {e}")))?;
        if !readable_format(manifest.format) {
            return Err(ReadError::Corrupt(
                Rejection::Manifest,
                format!(
                    "slice {slice}: manifest format {} is not supported (expected 1 to {MANIFEST_VERSION})",
                    manifest.format
                ),
            ));
        }
        // Sized by what is there, not by the manifest's claim, which may be garbage.
        let mut bytes = Vec::new();
        for i in 0..manifest.chunks {
            match latest.get(manifest.chunk_key(i).as_bytes()) {
                Some(Some(chunk)) => bytes.extend_from_slice(chunk),
                _ => {
                    return Err(ReadError::Corrupt(
                        Rejection::MissingChunk,
                        format!("slice {slice}: chunk {i} of snapshot {} is missing", manifest.seq),
                    ));
                }
            }
        }
        let checksum = XxHash3_64::oneshot(&bytes);
        if bytes.len() as u64 != manifest.bytes || checksum != manifest.checksum {
            return Err(ReadError::Corrupt(
                Rejection::Checksum,
                format!(
                    "slice {slice}: snapshot {} has {} bytes with checksum {checksum:#x}, the manifest says {} bytes, \
                     {:#x}",
                    manifest.seq,
                    bytes.len(),
                    manifest.bytes,
                    manifest.checksum
                ),
            ));
        }
        Ok(Some((manifest, bytes)))
    }
}

/// What the tail of a checkpoint partition gave.
enum Tail {
    Found(Manifest, Vec<u8>),
    /// The partition holds no manifest record at all.
    NoManifest,
    /// Something the tail read cannot settle; the whole partition decides.
    Inconsistent(String),
}

/// Where [`read_partition`] starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadFrom {
    /// The first retained record.
    Start,
    /// The last record (and whatever follows it).
    Last,
    /// This offset (or the first retained record after it).
    Offset(i64),
}

/// Reads partition `partition` of `topic` to its current end, calling
/// `each(offset, key, value)` in offset order.
pub fn read_partition(
    reader: &Reader,
    topic: &str,
    partition: i32,
    from: ReadFrom,
    each: impl FnMut(i64, &[u8], Option<&[u8]>, &rdkafka::message::BorrowedMessage<'_>),
) -> Result<(), KafkaLayerError> {
    let (low, high) = reader
        .fetch_watermarks(topic, partition, IO_TIMEOUT)
        .context(|| format!("watermarks of {topic}/{partition}"))?;
    if high <= low {
        return Ok(());
    }
    let start = match from {
        ReadFrom::Start => low,
        ReadFrom::Last => high - 1,
        ReadFrom::Offset(at) => at.max(low),
    };
    read_range(reader, topic, partition, start, None, high, each)
}

/// Reads the records of `topic`/`partition` from `start` up to `stop`
/// (exclusive), calling `each` as [`read_partition`] does.
pub fn read_partition_range(
    reader: &Reader,
    topic: &str,
    partition: i32,
    start: i64,
    stop: i64,
    each: impl FnMut(i64, &[u8], Option<&[u8]>, &rdkafka::message::BorrowedMessage<'_>),
) -> Result<(), KafkaLayerError> {
    let (low, high) = reader
        .fetch_watermarks(topic, partition, IO_TIMEOUT)
        .context(|| format!("watermarks of {topic}/{partition}"))?;
    read_range(reader, topic, partition, start.max(low), Some(stop), high, each)
}

/// How long a read of a partition may go without a record or its end before
/// it fails: a read that makes progress is never cut short, however long the
/// partition, since a read that failed on its total time would fail again
/// after every restart.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Replaces [`STALL_TIMEOUT`] (milliseconds), for tests that need a stall
/// to be seen in seconds.
pub const STALL_TIMEOUT_ENV: &str = "DEDUPD_READ_STALL_TIMEOUT_MS";

/// [`STALL_TIMEOUT`], or what [`STALL_TIMEOUT_ENV`] says (read once; a value
/// that is not a positive number of milliseconds is ignored with a warning).
pub fn stall_timeout() -> Duration {
    static TIMEOUT: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *TIMEOUT.get_or_init(|| match std::env::var(STALL_TIMEOUT_ENV) {
        Err(_) => STALL_TIMEOUT,
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Duration::from_millis(ms),
            _ => {
                log::warn!(
                    "{STALL_TIMEOUT_ENV}={v:?} is not a positive number of milliseconds; using {STALL_TIMEOUT:?}"
                );
                STALL_TIMEOUT
            }
        },
    })
}

/// How far a read of `topic`/`partition` has come: past its last record
/// (`next`), or past what the consumer passed over after it — transaction
/// markers, which are never delivered, and aborted records when reading
/// committed only. Without this, a partition whose last offsets are such
/// would never be read to its end (the last record read lies before it).
fn past(reader: &Reader, topic: &str, partition: i32, next: i64) -> i64 {
    let position = reader.position().ok().and_then(|tpl| match tpl.find_partition(topic, partition)?.offset() {
        Offset::Offset(o) => Some(o),
        _ => None,
    });
    position.map_or(next, |o| o.max(next))
}

/// Reads the records of partition `partition` of `topic` from offset `start`
/// up to `stop` (exclusive), or to the current end when `stop` is None,
/// calling `each(offset, key, value)` in offset order. `high` is the listed
/// high watermark.
///
/// The end is where the fetch reports end-of-partition, not the listed high
/// watermark: some Kafka-compatible brokers (Tansu) list it as the last
/// *batch's* base offset + 1, so that batch's records lie beyond it.
///
/// It fails when nothing (no record, no end-of-partition) has arrived for
/// [`stall_timeout`], not on its total time.
fn read_range(
    reader: &Reader,
    topic: &str,
    partition: i32,
    start: i64,
    stop: Option<i64>,
    high: i64,
    mut each: impl FnMut(i64, &[u8], Option<&[u8]>, &rdkafka::message::BorrowedMessage<'_>),
) -> Result<(), KafkaLayerError> {
    if stop.is_some_and(|stop| stop <= start) {
        return Ok(());
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(start)).context(|| "building an assignment".into())?;
    reader.assign(&tpl).context(|| format!("reading {topic}/{partition}"))?;
    let stall = stall_timeout();
    let began = Instant::now();
    let mut progress = began;
    let (mut next, mut records) = (start, 0u64);
    let result = loop {
        if stop.is_some_and(|stop| next >= stop) {
            break Ok(());
        }
        let silent = progress.elapsed();
        if silent > stall {
            break Err(KafkaLayerError::Timeout(format!(
                "reading {topic}/{partition} from offset {start} up to offset {}: nothing arrived for {:.1} s \
                 (the limit), stopped at offset {next} after {records} records in {:.1} s",
                stop.unwrap_or(high),
                silent.as_secs_f64(),
                began.elapsed().as_secs_f64()
            )));
        }
        match reader.poll(Duration::from_millis(50)) {
            // Offsets may have gaps (compaction, transaction markers): a
            // record at or past `stop` ends the range too.
            Some(Ok(m)) if stop.is_some_and(|stop| m.offset() >= stop) => break Ok(()),
            Some(Ok(m)) => {
                next = m.offset() + 1;
                records += 1;
                progress = Instant::now();
                each(m.offset(), m.key().unwrap_or_default(), m.payload(), &m);
            }
            // The listed end is a lower bound of the real one, so an
            // end-of-partition event before reaching it is stale.
            Some(Err(KafkaError::PartitionEOF(p)))
                if p == partition && past(reader, topic, partition, next) >= high =>
            {
                break Ok(());
            }
            Some(Err(KafkaError::PartitionEOF(_))) => {}
            Some(Err(e)) => {
                break Err(KafkaLayerError::Client { context: format!("reading {topic}/{partition}"), source: e });
            }
            None => {}
        }
    };
    reader.unassign().context(|| "releasing the reader".into())?;
    result
}
