//! Slice snapshots in the compacted checkpoint topic, partition = slice.
//!
//! A snapshot is written as chunks (any filter size fits under the broker's
//! message size limit) under keys `<slice>/<seq>/<i>`, then a manifest under
//! `<slice>/manifest` naming the offset, the chunks, their total size and
//! checksum, the partition offset of its first chunk, and the format version.
//! The manifest goes last: a snapshot exists once its manifest does, and a
//! crash mid-write leaves the previous manifest in force. Chunks of the
//! previous snapshot are then tombstoned so compaction can drop them. A later
//! snapshot of the same slice uses the next sequence number, so a half-written
//! attempt never overwrites the chunks a manifest points at.
//!
//! Restore reads the partition from its tail: it searches backwards for the
//! newest manifest, then reads from the snapshot's first chunk up to that
//! manifest. An uncompacted partition (Tansu never compacts) holds every
//! snapshot ever written, and reading them all made a restore's time grow with
//! the number of snapshots. Whenever the tail read finds something it does not
//! expect, restore scans the whole partition as it always did, so a corrupt
//! snapshot is reported exactly as before.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use twox_hash::XxHash3_64;

use super::clients::{self, PlainContext, Reader};
use super::{Context, KafkaLayerError};
use crate::config::Resolved;
use crate::filter::SnapshotError;

/// The checkpoint manifest format version.
///
/// `first_chunk_offset` was added without a new version: it is optional, and a
/// manifest without it is still read (see [`CheckpointStore::read_latest`]).
pub const MANIFEST_VERSION: u16 = 1;

const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// What a snapshot consists of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u16,
    pub slice: u32,
    pub seq: u64,
    /// The slice offset the snapshot was taken at: it reflects every record below.
    pub offset: u64,
    pub chunks: u32,
    pub bytes: u64,
    /// XXH3-64 of the concatenated chunks.
    pub checksum: u64,
    /// Milliseconds since the epoch when written (for checkpoint age).
    pub written_at_ms: u64,
    /// The filter parameters the snapshot was taken with ([`crate::filter::FilterParams::fingerprint`]).
    pub params: String,
    /// The checkpoint partition offset of chunk 0 (from the producer's delivery
    /// report), so that restore reads just this snapshot. Manifests written
    /// before this field existed lack it; restore then assumes the chunks lie
    /// right before their manifest, which the write order makes true, and
    /// checks it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_chunk_offset: Option<u64>,
    /// The `app.id` of the application that wrote the snapshot: restore
    /// refuses another application's ([`CheckpointStore::check_owner`]).
    /// Manifests written before this field existed lack it, and are taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
}

/// Why a stored snapshot could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Kafka(#[from] KafkaLayerError),
    #[error("corrupt checkpoint: {1}")]
    Corrupt(Rejection, String),
}

/// What was wrong with a snapshot restore refused: the `reason` label of
/// `dedupd_checkpoint_rejected_total`, so that an operator can tell damage
/// in the topic from a change of settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rejection {
    /// The newest manifest is not JSON, or of a manifest format this build does not read.
    Manifest,
    /// A chunk the manifest names is not in the topic.
    MissingChunk,
    /// The chunks' bytes do not match the manifest's size and checksum, or
    /// the snapshot's own checksum (a flipped byte, a truncated chunk).
    Checksum,
    /// A snapshot format version this build does not read.
    Version,
    /// Taken with other filter parameters (or for another slice).
    Parameters,
    /// Checksums right but the content impossible (bad magic, fields out of range).
    Malformed,
    /// A record the snapshot held for the watermark can no longer be read from the slice log.
    HeldRecord,
    /// Written by another application (its manifest names another `app.id`):
    /// never restored, whatever `checkpoint.on_corrupt` says.
    Application,
}

impl Rejection {
    pub const ALL: [Rejection; 8] = [
        Rejection::Manifest,
        Rejection::MissingChunk,
        Rejection::Checksum,
        Rejection::Version,
        Rejection::Parameters,
        Rejection::Malformed,
        Rejection::HeldRecord,
        Rejection::Application,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::Manifest => "manifest",
            Rejection::MissingChunk => "missing_chunk",
            Rejection::Checksum => "checksum",
            Rejection::Version => "version",
            Rejection::Parameters => "parameters",
            Rejection::Malformed => "malformed",
            Rejection::HeldRecord => "held_record",
            Rejection::Application => "application",
        }
    }
}

impl From<&SnapshotError> for Rejection {
    fn from(e: &SnapshotError) -> Self {
        match e {
            SnapshotError::UnsupportedVersion { .. } => Rejection::Version,
            SnapshotError::ChecksumMismatch { .. } => Rejection::Checksum,
            SnapshotError::ParameterMismatch { .. } => Rejection::Parameters,
            SnapshotError::BadMagic { .. } | SnapshotError::Truncated { .. } | SnapshotError::Malformed(_) => {
                Rejection::Malformed
            }
        }
    }
}

/// What reading a slice's newest snapshot cost: restore time is mostly this
/// read, and it must not grow with the number of snapshots the partition keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Records handed to the reader (chunks, manifests, tombstones), counting
    /// a record again each time it is read.
    pub records: u64,
    /// Their key and value bytes.
    pub bytes: u64,
    /// Why the tail read was not enough and the whole partition was scanned.
    pub full_scan: Option<String>,
}

impl ReadStats {
    fn count(&mut self, key: &[u8], value: Option<&[u8]>) {
        self.records += 1;
        self.bytes += (key.len() + value.map_or(0, <[u8]>::len)) as u64;
    }
}

/// Delivery outcome of the records of one write step (the chunks, the
/// manifest or the tombstones), filled in by the producer's delivery reports.
struct Deliveries {
    /// The lowest offset the broker gave any of them; `i64::MAX` until one is delivered.
    first_offset: AtomicI64,
    /// The first delivery that failed.
    failed: Mutex<Option<KafkaError>>,
}

impl Deliveries {
    fn new() -> Arc<Self> {
        Arc::new(Deliveries { first_offset: AtomicI64::new(i64::MAX), failed: Mutex::new(None) })
    }

    fn failure(&self) -> Option<KafkaError> {
        self.failed.lock().expect("deliveries lock").clone()
    }

    fn first_offset(&self) -> Option<u64> {
        u64::try_from(self.first_offset.load(Ordering::Relaxed)).ok().filter(|&o| o < i64::MAX as u64)
    }
}

/// Routes each delivery report to the [`Deliveries`] of its write step.
struct CheckpointProducerContext;

impl ClientContext for CheckpointProducerContext {
    /// Not asked for (see [`clients`]); never logged.
    fn stats_raw(&self, _: &[u8]) {}

    fn error(&self, error: KafkaError, reason: &str) {
        clients::log_client_error(&error, reason);
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        clients::log_client_message(level, fac, message);
    }
}

impl ProducerContext for CheckpointProducerContext {
    type DeliveryOpaque = Arc<Deliveries>;

    fn delivery(&self, result: &DeliveryResult<'_>, deliveries: Arc<Deliveries>) {
        match result {
            Ok(m) => {
                // A broker that does not know the offset reports -1: then
                // the manifest simply has no first_chunk_offset.
                if m.offset() >= 0 {
                    deliveries.first_offset.fetch_min(m.offset(), Ordering::Relaxed);
                }
            }
            Err((e, _)) => {
                deliveries.failed.lock().expect("deliveries lock").get_or_insert_with(|| e.clone());
            }
        }
    }
}

type CheckpointProducer = ThreadedProducer<CheckpointProducerContext>;

/// Queues one checkpoint record, waiting while the producer's queue is full.
fn send(
    producer: &CheckpointProducer,
    mut record: BaseRecord<'_, [u8], [u8], Arc<Deliveries>>,
) -> Result<(), KafkaLayerError> {
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                std::thread::sleep(Duration::from_millis(2));
            }
            Err((e, _)) => {
                return Err(KafkaLayerError::Client { context: "queueing a checkpoint record".into(), source: e });
            }
        }
    }
}

/// Waits until every queued record is answered; the first of `delivered`
/// that the broker refused is the error.
fn flush_delivered(
    producer: &CheckpointProducer,
    delivered: &Deliveries,
    what: impl Fn() -> String,
) -> Result<(), KafkaLayerError> {
    producer.flush(IO_TIMEOUT).context(&what)?;
    match delivered.failure() {
        Some(e) => Err(KafkaLayerError::Client { context: what(), source: e }),
        None => Ok(()),
    }
}

fn create_producer(config: &ClientConfig) -> Result<CheckpointProducer, KafkaLayerError> {
    config.create_with_context(CheckpointProducerContext).context(|| "creating the checkpoint producer".into())
}

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

/// Reads and writes slice snapshots.
pub struct CheckpointStore {
    topic: String,
    /// `app.id`: named in every manifest written, checked in every one read.
    app: String,
    chunk_bytes: usize,
    /// Replaced after a failed write (see [`CheckpointStore::write`]); a
    /// write in progress keeps the one it started with.
    producer: Mutex<Arc<CheckpointProducer>>,
    producer_config: ClientConfig,
    reader: Mutex<Reader>,
}

impl CheckpointStore {
    pub fn new(cfg: &Resolved) -> Result<Self, KafkaLayerError> {
        let id = &cfg.settings.app.id;
        let mut pc = clients::producer(cfg, &format!("{id}-checkpoints"));
        pc.set("message.max.bytes", (cfg.settings.checkpoint.chunk_bytes + 64 * 1024).to_string());
        Ok(CheckpointStore {
            topic: cfg.settings.checkpoint.topic.clone(),
            app: id.clone(),
            chunk_bytes: cfg.settings.checkpoint.chunk_bytes,
            producer: Mutex::new(Arc::new(create_producer(&pc)?)),
            producer_config: pc,
            reader: Mutex::new(
                clients::reader(cfg, &format!("{id}-checkpoint-reader"))
                    .create_with_context(PlainContext)
                    .context(|| "creating the checkpoint reader".into())?,
            ),
        })
    }

    /// Writes `bytes` as slice `slice`'s snapshot at `offset` and returns its
    /// manifest once every part is acknowledged.
    ///
    /// After a failed write the next one starts on a new producer: an
    /// idempotent producer whose sequence numbers the broker refused
    /// (`OutOfOrderSequenceNumber`, seen once from the test broker under a
    /// rebalance storm) fails every later write to that partition, so the
    /// slice would never snapshot again. A new producer has a new producer
    /// id and starts its sequences afresh; nothing is lost, as a manifest is
    /// written only after all its chunks are acknowledged.
    pub fn write(
        &self,
        slice: u32,
        offset: u64,
        bytes: &[u8],
        params: &str,
        previous: Option<&Manifest>,
    ) -> Result<Manifest, KafkaLayerError> {
        let producer = self.producer.lock().expect("producer lock").clone();
        let written = self.write_with(&producer, slice, offset, bytes, params, previous);
        if let Err(e) = &written {
            self.replace_producer(&producer, e);
        }
        written
    }

    /// For tests: raises a fatal error in the current producer (librdkafka's
    /// `rd_kafka_test_fatal_error`, as an idempotent producer's broker-refused
    /// sequence would), so that its next write fails.
    #[doc(hidden)]
    pub fn fail_producer_for_test(&self) {
        let producer = self.producer.lock().expect("producer lock").clone();
        let reason = c"a fatal error raised by a test";
        // SAFETY: the handle is alive (held by `producer`) and `reason` is a
        // NUL-terminated string that outlives the call, which copies it.
        unsafe {
            rdkafka::bindings::rd_kafka_test_fatal_error(
                producer.client().native_ptr(),
                rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                reason.as_ptr(),
            );
        }
    }

    /// Puts a new producer in place of `failed`, unless another write has
    /// already done so.
    fn replace_producer(&self, failed: &Arc<CheckpointProducer>, why: &KafkaLayerError) {
        let mut current = self.producer.lock().expect("producer lock");
        if !Arc::ptr_eq(&current, failed) {
            return;
        }
        match create_producer(&self.producer_config) {
            Ok(fresh) => {
                log::info!("checkpoint producer replaced by a new one after a failed snapshot write ({why})");
                *current = Arc::new(fresh);
            }
            // Kept: the next write tries again with it and, failing, here again.
            Err(e) => log::warn!("cannot replace the checkpoint producer after a failed write: {e}"),
        }
    }

    fn write_with(
        &self,
        producer: &CheckpointProducer,
        slice: u32,
        offset: u64,
        bytes: &[u8],
        params: &str,
        previous: Option<&Manifest>,
    ) -> Result<Manifest, KafkaLayerError> {
        let seq = previous.map_or(0, |m| m.seq + 1);
        let partition = slice as i32;
        let chunks: Vec<&[u8]> = bytes.chunks(self.chunk_bytes).collect();
        let delivered = Deliveries::new();
        for (i, chunk) in chunks.iter().enumerate() {
            let key = format!("{slice}/{seq}/{i}");
            send(
                producer,
                BaseRecord::with_opaque_to(&self.topic, delivered.clone())
                    .partition(partition)
                    .key(key.as_bytes())
                    .payload(*chunk),
            )?;
        }
        // A manifest must never point at a chunk the broker did not take:
        // restore would find the snapshot incomplete and fall back to an
        // older one, or to none.
        flush_delivered(producer, &delivered, || format!("writing snapshot chunks of slice {slice}"))?;
        let manifest = Manifest {
            format: MANIFEST_VERSION,
            slice,
            seq,
            offset,
            chunks: chunks.len() as u32,
            bytes: bytes.len() as u64,
            checksum: XxHash3_64::oneshot(bytes),
            written_at_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            params: params.to_string(),
            first_chunk_offset: delivered.first_offset(),
            app: Some(self.app.clone()),
        };
        let body = serde_json::to_vec(&manifest).expect("manifest serialises");
        let key = format!("{slice}/manifest");
        let delivered = Deliveries::new();
        send(
            producer,
            BaseRecord::with_opaque_to(&self.topic, delivered.clone())
                .partition(partition)
                .key(key.as_bytes())
                .payload(&body),
        )?;
        flush_delivered(producer, &delivered, || format!("writing the manifest of slice {slice}"))?;
        if let Some(prev) = previous {
            // Not waited for: a lost tombstone only keeps an old chunk until
            // the next compaction of its key; the snapshot is complete.
            let delivered = Deliveries::new();
            for i in 0..prev.chunks {
                let key = format!("{slice}/{}/{i}", prev.seq);
                // A tombstone: a key with no value.
                send(
                    producer,
                    BaseRecord::<[u8], [u8], _>::with_opaque_to(&self.topic, delivered.clone())
                        .partition(partition)
                        .key(key.as_bytes()),
                )?;
            }
        }
        Ok(manifest)
    }

    /// Whether the snapshot of `manifest` is this application's: refused,
    /// with an error naming both applications and the way out, when its
    /// manifest names another `app.id` (two applications writing one
    /// checkpoint topic would restore each other's state, and compaction
    /// would keep only one of their manifests per slice). A manifest that
    /// names none, written by a release before manifests named their
    /// application, is taken with a warning: an upgrade keeps its state.
    pub fn check_owner(&self, manifest: &Manifest) -> Result<(), KafkaLayerError> {
        owner_check(&self.topic, &self.app, manifest)
    }

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
    /// interrupted write) under key `<slice>/<seq>/<i>` tells where its run
    /// began: `i` records back. The next window reaches there, which lands
    /// on the manifest without fetching chunk payloads; without such a key
    /// the windows grow fourfold.
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
        let mut window: Vec<(i64, u64, u64, Option<Vec<u8>>)> = Vec::new();
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
        if manifest.format != MANIFEST_VERSION {
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
        let mut keep = |seq: u64, i: u64, value: Option<&[u8]>| {
            if seq == manifest.seq
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
                && let Some(seq) = value.and_then(|v| serde_json::from_slice::<Manifest>(v).ok()).map(|m| m.seq)
            {
                latest.retain(|k, _| chunk_seq(k).is_none_or(|s| s == seq));
            }
            latest.insert(key.to_vec(), value.map(<[u8]>::to_vec));
        })?;
        let Some(Some(body)) = latest.get(manifest_key.as_bytes()) else {
            return Ok(None);
        };
        let manifest: Manifest = serde_json::from_slice(body)
            .map_err(|e| ReadError::Corrupt(Rejection::Manifest, format!("slice {slice}: unreadable manifest: {e}")))?;
        if manifest.format != MANIFEST_VERSION {
            return Err(ReadError::Corrupt(
                Rejection::Manifest,
                format!(
                    "slice {slice}: manifest format {} is not supported (expected {MANIFEST_VERSION})",
                    manifest.format
                ),
            ));
        }
        // Sized by what is there, not by the manifest's claim, which may be garbage.
        let mut bytes = Vec::new();
        for i in 0..manifest.chunks {
            match latest.get(format!("{slice}/{}/{i}", manifest.seq).as_bytes()) {
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

/// [`CheckpointStore::check_owner`] for application `app` reading `topic`.
fn owner_check(topic: &str, app: &str, manifest: &Manifest) -> Result<(), KafkaLayerError> {
    match manifest.app.as_deref() {
        Some(owner) if owner == app => Ok(()),
        Some(owner) => Err(KafkaLayerError::Checkpoint {
            slice: manifest.slice,
            detail: format!(
                "the newest snapshot in {topic} (snapshot {} at slice offset {}) belongs to application {owner:?}, \
                 not to this one, {app:?}: two applications share the checkpoint topic. Give each its own: set \
                 checkpoint.topic (empty, the default, is \"<app.id>.checkpoints\")",
                manifest.seq, manifest.offset
            ),
        }),
        None => {
            log::warn!(
                "slice {}: the snapshot's manifest in {topic} names no application (written by an earlier \
                 release); taken as {app:?}'s. Its next snapshot names it",
                manifest.slice
            );
            Ok(())
        }
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

/// The sequence number in a chunk key `<slice>/<seq>/<i>`.
fn chunk_seq(key: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(key).ok()?;
    let mut parts = text.split('/');
    let (_, seq, _) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    seq.parse().ok()
}

/// The sequence number and index in a chunk key `<slice>/<seq>/<i>` of `slice`.
fn chunk_key(key: &[u8], slice: u32) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(key).ok()?;
    let mut parts = text.split('/');
    let (s, seq, i) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || s.parse::<u32>().ok()? != slice {
        return None;
    }
    Some((seq.parse().ok()?, i.parse().ok()?))
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

/// Reads the records of partition `partition` of `topic` from offset `start`
/// up to `stop` (exclusive), or to the current end when `stop` is None,
/// calling `each(offset, key, value)` in offset order. `high` is the listed
/// high watermark.
///
/// The end is where the fetch reports end-of-partition, not the listed high
/// watermark: some Kafka-compatible brokers (Tansu) list it as the last
/// *batch's* base offset + 1, so that batch's records lie beyond it.
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
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut next = start;
    let result = loop {
        if stop.is_some_and(|stop| next >= stop) {
            break Ok(());
        }
        if Instant::now() > deadline {
            break Err(KafkaLayerError::Timeout(format!(
                "reading {topic}/{partition} up to offset {}, stuck at {next}",
                stop.unwrap_or(high)
            )));
        }
        match reader.poll(Duration::from_millis(50)) {
            // Offsets may have gaps (compaction, transaction markers): a
            // record at or past `stop` ends the range too.
            Some(Ok(m)) if stop.is_some_and(|stop| m.offset() >= stop) => break Ok(()),
            Some(Ok(m)) => {
                next = m.offset() + 1;
                each(m.offset(), m.key().unwrap_or_default(), m.payload(), &m);
            }
            // The listed end is a lower bound of the real one, so an
            // end-of-partition event before reaching it is stale.
            Some(Err(KafkaError::PartitionEOF(p))) if p == partition && next >= high => break Ok(()),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(first_chunk_offset: Option<u64>) -> Manifest {
        Manifest {
            format: MANIFEST_VERSION,
            slice: 3,
            seq: 9,
            offset: 120,
            chunks: 2,
            bytes: 10,
            checksum: 7,
            written_at_ms: 1,
            params: "p".into(),
            first_chunk_offset,
            app: None,
        }
    }

    /// A snapshot of another application is refused with an error naming
    /// both and what to set; one that names none (an earlier release's) is
    /// taken; the application is written into every new manifest.
    #[test]
    fn a_manifest_of_another_application_is_refused() {
        let mut m = manifest(Some(41));
        m.app = Some("fraud-a".into());
        let e = owner_check("shared.checkpoints", "fraud-b", &m).unwrap_err().to_string();
        assert!(e.contains("slice 3") && e.contains("shared.checkpoints"), "{e}");
        assert!(e.contains("\"fraud-a\"") && e.contains("\"fraud-b\""), "{e}");
        assert!(e.contains("set checkpoint.topic"), "{e}");
        assert!(owner_check("shared.checkpoints", "fraud-a", &m).is_ok());
        m.app = None;
        assert!(owner_check("shared.checkpoints", "fraud-b", &m).is_ok());
        let mut named = manifest(Some(41));
        named.app = Some("fraud-a".into());
        let text = serde_json::to_string(&named).unwrap();
        assert!(text.ends_with(r#","first_chunk_offset":41,"app":"fraud-a"}"#), "{text}");
        assert_eq!(serde_json::from_str::<Manifest>(&text).unwrap(), named);
    }

    #[test]
    fn manifests_without_the_first_chunk_offset_stay_readable_and_are_written_as_before() {
        let old = r#"{"format":1,"slice":3,"seq":9,"offset":120,"chunks":2,"bytes":10,"checksum":7,"written_at_ms":1,"params":"p"}"#;
        assert_eq!(serde_json::from_str::<Manifest>(old).unwrap(), manifest(None));
        assert_eq!(serde_json::to_string(&manifest(None)).unwrap(), old);
        let new = serde_json::to_string(&manifest(Some(41))).unwrap();
        assert!(new.ends_with(r#","first_chunk_offset":41}"#), "{new}");
        assert_eq!(serde_json::from_str::<Manifest>(&new).unwrap(), manifest(Some(41)));
    }

    #[test]
    fn chunk_keys_of_one_slice() {
        assert_eq!(chunk_key(b"3/9/0", 3), Some((9, 0)));
        assert_eq!(chunk_key(b"3/9/17", 3), Some((9, 17)));
        assert_eq!(chunk_key(b"4/9/17", 3), None);
        assert_eq!(chunk_key(b"3/manifest", 3), None);
        assert_eq!(chunk_key(b"3/9/1/2", 3), None);
        assert_eq!(chunk_key(b"3/x/1", 3), None);
        assert_eq!(chunk_key(b"\xff/9/1", 3), None);
        assert_eq!(chunk_key(b"", 3), None);
    }
}
