//! The checkpoint store and how it writes a snapshot: chunks, then the
//! manifest, then tombstones for the previous snapshot's chunks.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, Producer};
use twox_hash::XxHash3_64;

use super::manifest::{MANIFEST_VERSION, Manifest, SnapshotId, owner_check};
use super::producer::{CheckpointProducer, Deliveries, IO_TIMEOUT, create_producer, flush_delivered, send};
use crate::config::Resolved;
use crate::kafka::clients::{self, PlainContext, Reader};
use crate::kafka::{Context, KafkaLayerError};

/// Reads and writes slice snapshots.
pub struct CheckpointStore {
    pub(super) topic: String,
    /// `app.id`: named in every manifest written, checked in every one read.
    pub(super) app: String,
    pub(super) chunk_bytes: usize,
    /// Replaced after a failed write (see [`CheckpointStore::write`]); a
    /// write in progress keeps the one it started with.
    pub(super) producer: Mutex<Arc<CheckpointProducer>>,
    pub(super) producer_config: ClientConfig,
    pub(super) reader: Mutex<Reader>,
    attempts: Attempts,
    /// The attempts of each slice whose write failed: one of their
    /// manifests may have reached the topic unacknowledged, so their chunks
    /// are tombstoned only once a later manifest of the slice is acknowledged.
    leftovers: Mutex<HashMap<u32, Vec<(SnapshotId, u32)>>>,
}

/// One snapshot to write (the arguments of [`CheckpointStore::write_fenced`]).
#[derive(Clone, Copy)]
struct Request<'a> {
    slice: u32,
    offset: u64,
    flush_log_offset: Option<u64>,
    bytes: &'a [u8],
    params: &'a str,
    previous: Option<&'a Manifest>,
}

/// What a snapshot write checks before each of its steps.
pub struct Fence<'a> {
    /// Whether the slice is still this member's: a write for a slice
    /// released meanwhile is dropped before its chunks or before its manifest.
    pub still_owned: &'a dyn Fn() -> bool,
    /// When the whole write must be done: each step waits for the broker
    /// until then at most (and `IO_TIMEOUT` at most).
    pub deadline: Instant,
}

/// What became of a fenced write.
#[derive(Debug)]
pub enum WriteOutcome {
    Written(Manifest),
    /// The slice was released: nothing more was written from the step named.
    Dropped(&'static str),
}

/// Draws write attempts: 64 bits hashed with keys random to this process
/// from a counter, so attempts differ between processes (with odds of one
/// in 2^64 against) and within one.
struct Attempts {
    keys: RandomState,
    drawn: AtomicU64,
}

impl Attempts {
    fn next(&self) -> u64 {
        self.keys.hash_one(self.drawn.fetch_add(1, Ordering::Relaxed))
    }
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
            attempts: Attempts { keys: RandomState::new(), drawn: AtomicU64::new(0) },
            leftovers: Mutex::new(HashMap::new()),
        })
    }

    /// Writes `bytes` as slice `slice`'s snapshot at `offset` and returns its
    /// manifest once every part is acknowledged ([`Self::write_fenced`]
    /// with no owner to check, each step waiting up to `IO_TIMEOUT`).
    pub fn write(
        &self,
        slice: u32,
        offset: u64,
        bytes: &[u8],
        params: &str,
        previous: Option<&Manifest>,
    ) -> Result<Manifest, KafkaLayerError> {
        let fence = Fence { still_owned: &|| true, deadline: Instant::now() + 2 * IO_TIMEOUT };
        match self.write_fenced(slice, (offset, None), bytes, params, previous, &fence)? {
            WriteOutcome::Written(manifest) => Ok(manifest),
            WriteOutcome::Dropped(before) => {
                Err(KafkaLayerError::Checkpoint { slice, detail: format!("dropped before {before}") })
            }
        }
    }

    /// Writes `bytes` as slice `slice`'s snapshot at slice offset `offset`,
    /// its manifest naming `flush_log_offset` (where a restore from it reads
    /// the flush log, [`Manifest::flush_log_offset`]): its chunks under keys
    /// of a fresh attempt, then its manifest once they are
    /// acknowledged, then (once the manifest is acknowledged) tombstones for
    /// `previous`'s chunks. Dropped, before the chunks or before the
    /// manifest, when `fence` says the slice is no longer this member's.
    ///
    /// After a failed write the next one starts on a new producer: an
    /// idempotent producer whose sequence numbers the broker refused
    /// (`OutOfOrderSequenceNumber`, seen once from the test broker under a
    /// rebalance storm) fails every later write to that partition, so the
    /// slice would never snapshot again. A new producer has a new producer
    /// id and starts its sequences afresh; nothing is lost, as a manifest is
    /// written only after all its chunks are acknowledged.
    pub fn write_fenced(
        &self,
        slice: u32,
        (offset, flush_log_offset): (u64, Option<u64>),
        bytes: &[u8],
        params: &str,
        previous: Option<&Manifest>,
        fence: &Fence<'_>,
    ) -> Result<WriteOutcome, KafkaLayerError> {
        let producer = self.producer.lock().expect("producer lock").clone();
        // A fresh attempt for every write: neither another owner of the
        // slice nor a retry of this write can reuse these chunk keys.
        let id = SnapshotId { seq: previous.map_or(0, |m| m.seq.wrapping_add(1)), attempt: Some(self.attempts.next()) };
        let request = Request { slice, offset, flush_log_offset, bytes, params, previous };
        let written = self.write_with(&producer, id, &request, fence);
        if let Err(e) = &written {
            self.replace_producer(&producer, e);
            let chunks = bytes.chunks(self.chunk_bytes).count() as u32;
            self.leftovers.lock().expect("leftovers lock").entry(slice).or_default().push((id, chunks));
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
        id: SnapshotId,
        request: &Request<'_>,
        fence: &Fence<'_>,
    ) -> Result<WriteOutcome, KafkaLayerError> {
        let Request { slice, offset, flush_log_offset, bytes, params, previous } = *request;
        if !(fence.still_owned)() {
            return Ok(WriteOutcome::Dropped("its chunks"));
        }
        let partition = slice as i32;
        let chunks: Vec<&[u8]> = bytes.chunks(self.chunk_bytes).collect();
        let delivered = Deliveries::new();
        for (i, chunk) in chunks.iter().enumerate() {
            let key = id.chunk_key(slice, i as u32);
            let record = BaseRecord::with_opaque_to(&self.topic, delivered.clone()).partition(partition);
            send(producer, record.key(key.as_bytes()).payload(*chunk), fence.deadline)?;
        }
        // A manifest must never point at a chunk the broker did not take:
        // restore would find the snapshot incomplete and fall back to an
        // older one, or to none.
        let chunks_of = || format!("writing snapshot chunks of slice {slice}");
        flush_delivered(producer, &delivered, fence.deadline, chunks_of)?;
        // Released while the chunks were written: the next owner may have
        // written its own manifest since, which this one must not follow.
        // No manifest will name these chunks: they go at once.
        if !(fence.still_owned)() {
            let keys: Vec<String> = (0..chunks.len() as u32).map(|i| id.chunk_key(slice, i)).collect();
            if let Err(e) = self.tombstone(producer, slice, &keys, fence.deadline) {
                log::warn!("slice {slice}: the chunks of a dropped snapshot are kept: {e}");
            }
            return Ok(WriteOutcome::Dropped("its manifest"));
        }
        let manifest = Manifest {
            format: MANIFEST_VERSION,
            slice,
            seq: id.seq,
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
            flush_log_offset,
            attempt: id.attempt,
        };
        let body = serde_json::to_vec(&manifest).expect("manifest serialises");
        let key = format!("{slice}/manifest");
        let delivered = Deliveries::new();
        let record = BaseRecord::with_opaque_to(&self.topic, delivered.clone()).partition(partition);
        send(producer, record.key(key.as_bytes()).payload(&body), fence.deadline)?;
        flush_delivered(producer, &delivered, fence.deadline, || format!("writing the manifest of slice {slice}"))?;
        // Only now, with the new manifest acknowledged, may the previous
        // one's chunks go (until then it is the snapshot in force), and
        // those of failed attempts, one of which may have been in force.
        let mut keys: Vec<String> =
            previous.map(|p| (0..p.chunks).map(|i| p.chunk_key(i)).collect()).unwrap_or_default();
        let failed = self.leftovers.lock().expect("leftovers lock").remove(&slice).unwrap_or_default();
        keys.extend(failed.iter().flat_map(|&(id, chunks)| (0..chunks).map(move |i| id.chunk_key(slice, i))));
        if let Err(e) = self.tombstone(producer, slice, &keys, fence.deadline) {
            log::warn!("slice {slice}: the chunks of earlier snapshots are kept: {e}");
        }
        Ok(WriteOutcome::Written(manifest))
    }

    /// Queues tombstones (a key with no value) for the chunk `keys` of
    /// `slice`, so that compaction can drop them. Not waited for: a lost
    /// tombstone only keeps an old chunk until the next compaction of its key.
    fn tombstone(
        &self,
        producer: &CheckpointProducer,
        slice: u32,
        keys: &[String],
        deadline: Instant,
    ) -> Result<(), KafkaLayerError> {
        let delivered = Deliveries::new();
        for key in keys {
            let record = BaseRecord::<[u8], [u8], _>::with_opaque_to(&self.topic, delivered.clone());
            send(producer, record.partition(slice as i32).key(key.as_bytes()), deadline)?;
        }
        Ok(())
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
}
