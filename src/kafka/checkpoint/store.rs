//! The checkpoint store and how it writes a snapshot: chunks, then the
//! manifest, then tombstones for the previous snapshot's chunks.

use std::sync::{Arc, Mutex};

use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, Producer};
use twox_hash::XxHash3_64;

use super::manifest::{MANIFEST_VERSION, Manifest, owner_check};
use super::producer::{CheckpointProducer, Deliveries, create_producer, flush_delivered, send};
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
        self.write_noting(slice, offset, bytes, params, previous, None)
    }

    /// [`CheckpointStore::write`], the manifest naming the flush log offset
    /// a restore from this snapshot reads from ([`Manifest::flush_log_offset`]).
    pub fn write_noting(
        &self,
        slice: u32,
        offset: u64,
        bytes: &[u8],
        params: &str,
        previous: Option<&Manifest>,
        flush_log_offset: Option<u64>,
    ) -> Result<Manifest, KafkaLayerError> {
        let producer = self.producer.lock().expect("producer lock").clone();
        let written = self.write_with(&producer, slice, (offset, flush_log_offset), bytes, params, previous);
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

    /// Writes the snapshot taken at slice offset `offset`, its manifest
    /// naming `flush_log_offset`.
    fn write_with(
        &self,
        producer: &CheckpointProducer,
        slice: u32,
        (offset, flush_log_offset): (u64, Option<u64>),
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
            flush_log_offset,
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
}
