//! Slice snapshots in the compacted checkpoint topic, partition = slice.
//!
//! A snapshot is written as chunks (any filter size fits under the broker's
//! message size limit) under keys `<slice>/<seq>/<i>`, then a manifest under
//! `<slice>/manifest` naming the offset, the chunks, their total size and
//! checksum, and the format version. The manifest goes last: a snapshot
//! exists once its manifest does, and a crash mid-write leaves the previous
//! manifest in force. Chunks of the previous snapshot are then tombstoned so
//! compaction can drop them. A later snapshot of the same slice uses the next
//! sequence number, so a half-written attempt never overwrites the chunks a
//! manifest points at.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use twox_hash::XxHash3_64;

use super::{Context, KafkaLayerError, clients};
use crate::config::Resolved;

/// The checkpoint manifest format version.
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
}

/// Why a stored snapshot could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Kafka(#[from] KafkaLayerError),
    #[error("corrupt checkpoint: {0}")]
    Corrupt(String),
}

/// Reads and writes slice snapshots.
pub struct CheckpointStore {
    topic: String,
    chunk_bytes: usize,
    producer: ThreadedProducer<DefaultProducerContext>,
    reader: Mutex<BaseConsumer>,
}

impl CheckpointStore {
    pub fn new(cfg: &Resolved) -> Result<Self, KafkaLayerError> {
        let id = &cfg.settings.app.id;
        let mut pc = clients::producer(cfg, &format!("{id}-checkpoints"));
        pc.set("message.max.bytes", (cfg.settings.checkpoint.chunk_bytes + 64 * 1024).to_string());
        Ok(CheckpointStore {
            topic: cfg.settings.checkpoint.topic.clone(),
            chunk_bytes: cfg.settings.checkpoint.chunk_bytes,
            producer: pc.create().context(|| "creating the checkpoint producer".into())?,
            reader: Mutex::new(
                clients::reader(cfg, &format!("{id}-checkpoint-reader"))
                    .create()
                    .context(|| "creating the checkpoint reader".into())?,
            ),
        })
    }

    /// Writes `bytes` as slice `slice`'s snapshot at `offset` and returns its
    /// manifest once every part is acknowledged.
    pub fn write(
        &self,
        slice: u32,
        offset: u64,
        bytes: &[u8],
        params: &str,
        previous: Option<&Manifest>,
    ) -> Result<Manifest, KafkaLayerError> {
        let seq = previous.map_or(0, |m| m.seq + 1);
        let partition = slice as i32;
        let chunks: Vec<&[u8]> = bytes.chunks(self.chunk_bytes).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            let key = format!("{slice}/{seq}/{i}");
            self.send(BaseRecord::to(&self.topic).partition(partition).key(key.as_bytes()).payload(*chunk))?;
        }
        self.producer.flush(IO_TIMEOUT).context(|| format!("writing snapshot chunks of slice {slice}"))?;
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
        };
        let body = serde_json::to_vec(&manifest).expect("manifest serialises");
        let key = format!("{slice}/manifest");
        self.send(BaseRecord::to(&self.topic).partition(partition).key(key.as_bytes()).payload(&body))?;
        self.producer.flush(IO_TIMEOUT).context(|| format!("writing the manifest of slice {slice}"))?;
        if let Some(prev) = previous {
            for i in 0..prev.chunks {
                let key = format!("{slice}/{}/{i}", prev.seq);
                // A tombstone: a key with no value.
                self.send(BaseRecord::<[u8], [u8]>::to(&self.topic).partition(partition).key(key.as_bytes()))?;
            }
        }
        Ok(manifest)
    }

    fn send(&self, mut record: BaseRecord<'_, [u8], [u8]>) -> Result<(), KafkaLayerError> {
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((
                    rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                    r,
                )) => {
                    record = r;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err((e, _)) => {
                    return Err(KafkaLayerError::Client { context: "queueing a checkpoint record".into(), source: e });
                }
            }
        }
    }

    /// The newest complete snapshot of `slice`: its manifest and bytes.
    ///
    /// One pass over the partition keeps the latest value of each key, but
    /// when it reads a manifest it drops the chunks of every other snapshot:
    /// a snapshot's chunks all come before its manifest, so those chunks can
    /// never be the newest manifest's. Without compaction the partition holds
    /// every snapshot ever written; memory stays at about two of them.
    pub fn read_latest(&self, slice: u32) -> Result<Option<(Manifest, Vec<u8>)>, ReadError> {
        let reader = self.reader.lock().expect("reader lock");
        let manifest_key = format!("{slice}/manifest");
        let mut latest: HashMap<Vec<u8>, Option<Vec<u8>>> = HashMap::new();
        read_partition(&reader, &self.topic, slice as i32, ReadFrom::Start, |_, key, value, _| {
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
            .map_err(|e| ReadError::Corrupt(format!("slice {slice}: unreadable manifest: {e}")))?;
        if manifest.format != MANIFEST_VERSION {
            return Err(ReadError::Corrupt(format!(
                "slice {slice}: manifest format {} is not supported (expected {MANIFEST_VERSION})",
                manifest.format
            )));
        }
        let mut bytes = Vec::with_capacity(manifest.bytes as usize);
        for i in 0..manifest.chunks {
            match latest.get(format!("{slice}/{}/{i}", manifest.seq).as_bytes()) {
                Some(Some(chunk)) => bytes.extend_from_slice(chunk),
                _ => {
                    return Err(ReadError::Corrupt(format!(
                        "slice {slice}: chunk {i} of snapshot {} is missing",
                        manifest.seq
                    )));
                }
            }
        }
        let checksum = XxHash3_64::oneshot(&bytes);
        if bytes.len() as u64 != manifest.bytes || checksum != manifest.checksum {
            return Err(ReadError::Corrupt(format!(
                "slice {slice}: snapshot {} has {} bytes with checksum {checksum:#x}, the manifest says {} bytes, {:#x}",
                manifest.seq,
                bytes.len(),
                manifest.bytes,
                manifest.checksum
            )));
        }
        Ok(Some((manifest, bytes)))
    }
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

/// Where [`read_partition`] starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadFrom {
    /// The first retained record.
    Start,
    /// The last record (and whatever follows it).
    Last,
}

/// Reads partition `partition` of `topic` to its current end, calling
/// `each(offset, key, value)` in offset order.
///
/// The end is where the fetch reports end-of-partition, not the listed high
/// watermark: some Kafka-compatible brokers (Tansu) list it as the last
/// *batch's* base offset + 1, so that batch's records lie beyond it.
pub fn read_partition(
    reader: &BaseConsumer,
    topic: &str,
    partition: i32,
    from: ReadFrom,
    mut each: impl FnMut(i64, &[u8], Option<&[u8]>, &rdkafka::message::BorrowedMessage<'_>),
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
    };
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(start)).context(|| "building an assignment".into())?;
    reader.assign(&tpl).context(|| format!("reading {topic}/{partition}"))?;
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut next = start;
    let result = loop {
        if Instant::now() > deadline {
            break Err(KafkaLayerError::Timeout(format!(
                "reading {topic}/{partition} up to offset {high}, stuck at {next}"
            )));
        }
        match reader.poll(Duration::from_millis(50)) {
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
