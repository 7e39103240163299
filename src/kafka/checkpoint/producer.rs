//! The checkpoint producer: each write step's delivery reports are
//! gathered, so a write knows where its first chunk landed and whether the
//! broker refused any record.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};

use crate::kafka::{Context, KafkaLayerError, clients};

/// How long one read or write of the checkpoint topic waits for the broker.
pub(super) const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// Delivery outcome of the records of one write step (the chunks, the
/// manifest or the tombstones), filled in by the producer's delivery reports.
pub(super) struct Deliveries {
    /// The lowest offset the broker gave any of them; `i64::MAX` until one is delivered.
    first_offset: AtomicI64,
    /// The first delivery that failed.
    failed: Mutex<Option<KafkaError>>,
}

impl Deliveries {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Deliveries { first_offset: AtomicI64::new(i64::MAX), failed: Mutex::new(None) })
    }

    pub(super) fn failure(&self) -> Option<KafkaError> {
        self.failed.lock().expect("deliveries lock").clone()
    }

    pub(super) fn first_offset(&self) -> Option<u64> {
        u64::try_from(self.first_offset.load(Ordering::Relaxed)).ok().filter(|&o| o < i64::MAX as u64)
    }
}

/// Routes each delivery report to the [`Deliveries`] of its write step.
pub(super) struct CheckpointProducerContext;

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

pub(super) type CheckpointProducer = ThreadedProducer<CheckpointProducerContext>;

/// Queues one checkpoint record, waiting while the producer's queue is
/// full, until `deadline` at most.
pub(super) fn send(
    producer: &CheckpointProducer,
    mut record: BaseRecord<'_, [u8], [u8], Arc<Deliveries>>,
    deadline: Instant,
) -> Result<(), KafkaLayerError> {
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), r)) => {
                if Instant::now() >= deadline {
                    return Err(KafkaLayerError::Timeout("queueing a checkpoint record: the queue stayed full".into()));
                }
                record = r;
                std::thread::sleep(Duration::from_millis(2));
            }
            Err((e, _)) => {
                return Err(KafkaLayerError::Client { context: "queueing a checkpoint record".into(), source: e });
            }
        }
    }
}

/// Waits until every queued record is answered, for [`IO_TIMEOUT`] and
/// until `deadline` at most; the first of `delivered` that the broker
/// refused is the error.
pub(super) fn flush_delivered(
    producer: &CheckpointProducer,
    delivered: &Deliveries,
    deadline: Instant,
    what: impl Fn() -> String,
) -> Result<(), KafkaLayerError> {
    let timeout = deadline.saturating_duration_since(Instant::now()).min(IO_TIMEOUT);
    if timeout.is_zero() {
        return Err(KafkaLayerError::Timeout(format!("{}: the write's deadline has passed", what())));
    }
    producer.flush(timeout).context(&what)?;
    match delivered.failure() {
        Some(e) => Err(KafkaLayerError::Client { context: what(), source: e }),
        None => Ok(()),
    }
}

pub(super) fn create_producer(config: &ClientConfig) -> Result<CheckpointProducer, KafkaLayerError> {
    config.create_with_context(CheckpointProducerContext).context(|| "creating the checkpoint producer".into())
}
