//! The producers' shared parts: delivery watching (the first failure stops
//! the daemon; acknowledged outputs are timed end to end) and copying a
//! consumed record to another topic with extra headers, waiting while the
//! bounded queue is full (back-pressure).

use std::sync::Mutex;
use std::time::Duration;

use rdkafka::ClientContext;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;

use super::{Context, KafkaLayerError, clients};
use crate::config::Resolved;

/// Records delivery failures (the worker loop turns the first into a stop)
/// and the end-to-end latency of acknowledged outputs.
pub struct DeliveryWatch {
    failure: Mutex<Option<String>>,
    /// The output topic and the histogram of record timestamp → acknowledged.
    latency: Option<(String, prometheus::Histogram)>,
}

impl DeliveryWatch {
    /// The first delivery failure, if any.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().expect("failure lock").clone()
    }
}

impl ClientContext for DeliveryWatch {}

impl ProducerContext for DeliveryWatch {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let (Ok(m), Some((topic, histogram))) = (result, &self.latency)
            && m.topic() == topic
            && let Some(ts) = m.timestamp().to_millis()
        {
            let now =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
            histogram.observe((now - ts).max(0) as f64 / 1000.0);
        }
        if let Err((e, m)) = result {
            let mut f = self.failure.lock().expect("failure lock");
            if f.is_none() {
                *f = Some(format!("delivery to {}/{} failed: {e}", m.topic(), m.partition()));
            }
        }
    }
}

pub type OutputProducer = ThreadedProducer<DeliveryWatch>;

/// Creates a producer; with `latency`, acknowledged records of that topic
/// are timed from their timestamps.
pub fn output_producer(
    cfg: &Resolved,
    name: &str,
    latency: Option<(String, prometheus::Histogram)>,
) -> Result<OutputProducer, KafkaLayerError> {
    clients::producer(cfg, &format!("{}-{name}", cfg.settings.app.id))
        .create_with_context(DeliveryWatch { failure: Mutex::new(None), latency })
        .context(|| format!("creating the {name} producer"))
}

/// Sends a copy of `msg` to `topic`/`partition` with `extra` headers.
pub fn produce_copy<C: ProducerContext + 'static, M: Message>(
    producer: &ThreadedProducer<C>,
    topic: &str,
    partition: i32,
    msg: &M,
    extra: &[(&str, &[u8])],
) -> Result<(), KafkaLayerError>
where
    C::DeliveryOpaque: Default,
{
    let count = msg.headers().map_or(0, |h| h.count());
    let mut hs = OwnedHeaders::new_with_capacity(count + extra.len());
    if let Some(h) = msg.headers() {
        for h in h.iter() {
            // Our own headers from an earlier stage are replaced, not repeated.
            if extra.iter().any(|(k, _)| *k == h.key) {
                continue;
            }
            hs = hs.insert(Header { key: h.key, value: h.value });
        }
    }
    for (k, v) in extra {
        hs = hs.insert(Header { key: k, value: Some(*v) });
    }
    let mut record: BaseRecord<'_, [u8], [u8], C::DeliveryOpaque> =
        BaseRecord::with_opaque_to(topic, C::DeliveryOpaque::default()).partition(partition).headers(hs);
    if let Some(k) = msg.key() {
        record = record.key(k);
    }
    if let Some(p) = msg.payload() {
        record = record.payload(p);
    }
    if let Some(ts) = msg.timestamp().to_millis() {
        record = record.timestamp(ts);
    }
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            // Back-pressure: the queue is bounded, so wait for deliveries.
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((e, _)) => {
                return Err(KafkaLayerError::Client {
                    context: format!("producing to {topic}/{partition}"),
                    source: e,
                });
            }
        }
    }
}
