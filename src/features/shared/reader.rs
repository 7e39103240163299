//! Shared mode's input reader (`slicing.mode = "shared"`,
//! docs/shared-mode.md): the one slice judges the input records the
//! routers' read-order records name, in their order, reading them from the
//! input topics itself — no copy of a record travels through the slice log.
//!
//! The reader is a consumer by assignment (no group, no commits): a
//! partition is added the first time a read-order record names it, and each
//! partition has a queue of its own (librdkafka's partition queues, taken
//! off a batch at a time: [`BatchQueue`]), so that a run of one partition
//! is read from that partition's queue alone and nothing is buffered for
//! the runs of other partitions that come first. Within a partition the
//! runs go forward: records between two runs (those a router sent to the
//! dead letters) are read and passed over; a run behind the queue's
//! position (a router that re-read its partitions after a crash names them
//! again) or far ahead of it (a restore) is sought.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::Offset;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;

use super::handoff::Handoff;
use crate::config::Resolved;
use crate::kafka::clients::{self, PlainContext};
use crate::kafka::consumed::{BatchQueue, error_of};
use crate::kafka::slice_log::batch::BatchParts;
use crate::kafka::slice_log::read_order::{NamedRecords, RunSink};
use crate::kafka::{Context, KafkaLayerError};

/// How long a named record may take to come before the slice gives up (the
/// process stops; its replacement resumes from the last snapshot).
const WAIT: Duration = Duration::from_secs(30);
/// Records passed over by reading rather than by a seek (a seek costs a
/// fetch round trip and drops what was prefetched).
const SKIP_BY_READING: i64 = 10_000;
/// Records prefetched per partition: what one router turn takes of it, many times over.
const PREFETCH: &str = "20000";

/// One input partition of the reader.
struct Partition {
    queue: BatchQueue,
    /// The offset its queue delivers next.
    next: i64,
}

/// Reads the input records read-order records name (see the module documentation).
pub struct InputReader {
    /// By topic, then partition. Before the consumer: its queues are given
    /// back before it is destroyed (fields drop in their order).
    partitions: HashMap<String, HashMap<i32, Partition>>,
    consumer: BaseConsumer<PlainContext>,
    /// Named records that could not be read (gone by retention): logged and counted.
    missing: prometheus::IntCounter,
    /// The pages of named records the router of this process hands over.
    handoff: Option<Arc<Handoff>>,
}

impl InputReader {
    /// A reader counting the named records it finds gone in `missing`,
    /// taking those `handoff` brings first.
    pub fn new(
        cfg: &Resolved,
        missing: prometheus::IntCounter,
        handoff: Option<Arc<Handoff>>,
    ) -> Result<Self, KafkaLayerError> {
        let mut config = clients::input_reader(cfg, &format!("{}-shared-input", cfg.settings.app.id));
        if config.get("queued.min.messages").is_none() {
            config.set("queued.min.messages", PREFETCH);
        }
        if handoff.is_some() {
            // The handoff's pages take the other half of the prefetch.
            let kbytes = Handoff::reader_prefetch(cfg.budget.consumer_queue) / 1024;
            config.set("queued.max.messages.kbytes", kbytes.max(1).to_string());
        }
        let consumer: BaseConsumer<PlainContext> =
            config.create_with_context(PlainContext).context(|| "creating the shared input reader".into())?;
        Ok(InputReader { partitions: HashMap::new(), consumer, missing, handoff })
    }

    /// Hands `sink` the records at offsets `first..first + count` of
    /// `topic`/`partition`, in offset order (telling it before a wait). A
    /// record that is no longer there (deleted by retention before a
    /// replay reached it) is logged and counted, and passed over.
    pub fn read_run(
        &mut self,
        topic: &str,
        partition: i32,
        first: i64,
        count: u32,
        sink: &mut dyn RunSink,
    ) -> Result<(), KafkaLayerError> {
        let end = first + i64::from(count);
        self.position(topic, partition, first)?;
        let Partition { queue, next } =
            self.partitions.get_mut(topic).and_then(|t| t.get_mut(&partition)).expect("positioned above");
        let mut deadline = Instant::now() + WAIT;
        while *next < end {
            // A record already fetched is taken without a wait (nor a clock
            // read); before waiting, the sink lets go of its lock.
            if !queue.ready(Duration::ZERO) {
                sink.waiting();
                queue.ready(Duration::from_millis(100));
            }
            let Some(m) = queue.next_record() else {
                // Serves the consumer's own events (errors, logs); its
                // partitions deliver records to their own queues only.
                if let Some(Ok(m)) = self.consumer.poll(Duration::ZERO) {
                    log::warn!(
                        "shared input: an unexpected record of {}/{} on the main queue",
                        m.topic(),
                        m.partition()
                    );
                }
                if Instant::now() > deadline {
                    return Err(KafkaLayerError::Timeout(format!(
                        "reading {topic}/{partition} at offset {next} (the slice judges records {first}..{end} of it)"
                    )));
                }
                continue;
            };
            if let Some(e) = error_of(&m) {
                return Err(e).context(|| format!("reading {topic}/{partition}"));
            }
            let offset = m.offset();
            if offset < *next {
                continue; // delivered before a seek took effect
            }
            let expected = (*next).max(first);
            if offset > expected && expected < end {
                let gone = offset.min(end) - expected;
                self.missing.inc_by(gone as u64);
                log::error!(
                    "shared input: {gone} records of {topic}/{partition} from offset {expected} are named by the \
                     read order but gone from the input (retention?): not judged"
                );
            }
            *next = offset + 1;
            deadline = Instant::now() + WAIT;
            if offset >= first && offset < end {
                sink.record(offset, &m)?;
            }
        }
        Ok(())
    }

    /// Makes the queue of `topic`/`partition` deliver `offset` next (or a
    /// little before it, passed over by reading).
    fn position(&mut self, topic: &str, partition: i32, offset: i64) -> Result<(), KafkaLayerError> {
        let known = self.partitions.get(topic).and_then(|t| t.get(&partition)).map(|p| p.next);
        match known {
            Some(next) if next <= offset && offset - next <= SKIP_BY_READING => Ok(()),
            Some(_) => {
                clients::seek_started(&self.consumer, topic, partition, Offset::Offset(offset))
                    .context(|| format!("seeking {topic}/{partition} to offset {offset}"))?;
                let p = self.partitions.get_mut(topic).and_then(|t| t.get_mut(&partition)).expect("known");
                // What was taken off the queue before the seek is not what it delivers next.
                p.queue.discard();
                p.next = offset;
                Ok(())
            }
            None => {
                // Split before it is assigned, so that no record of it reaches the main queue.
                let queue = BatchQueue::of_partition(self.consumer.client(), topic, partition).ok_or_else(|| {
                    KafkaLayerError::Internal(format!("shared input: no queue for {topic}/{partition}"))
                })?;
                let mut tpl = TopicPartitionList::new();
                tpl.add_partition_offset(topic, partition, Offset::Offset(offset))
                    .context(|| "building an assignment".into())?;
                self.consumer
                    .incremental_assign(&tpl)
                    .context(|| format!("assigning {topic}/{partition} at offset {offset}"))?;
                self.partitions
                    .entry(topic.to_string())
                    .or_default()
                    .insert(partition, Partition { queue, next: offset });
                Ok(())
            }
        }
    }
}

impl NamedRecords for InputReader {
    fn handed(&mut self, read_order: &[u8]) -> Option<BatchParts> {
        self.handoff.as_ref()?.take(read_order)
    }

    fn read_run(
        &mut self,
        topic: &str,
        partition: i32,
        first: i64,
        count: u32,
        sink: &mut dyn RunSink,
    ) -> Result<(), KafkaLayerError> {
        InputReader::read_run(self, topic, partition, first, count, sink)
    }
}
