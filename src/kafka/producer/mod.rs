//! The producers' shared parts: delivery watching (the first failure stops
//! the daemon; acknowledged outputs are timed end to end; records sent and
//! acknowledged are counted per partition) and copying a consumed record to
//! another topic with extra headers, waiting while the bounded queue is full
//! (back-pressure).
//!
//! The counts replace flushing. An idempotent producer delivers, and reports,
//! the records of one partition in the order they were sent, so once a
//! partition's acknowledged count reaches the count sent at some moment,
//! every record sent to it before that moment is acknowledged. The router
//! commits input offsets and the slice workers write snapshots on that
//! condition, without stopping the pipeline for a flush of everything in
//! flight.
//!
//! The reports are served by a thread of our own ([`poll_thread`]), an
//! event of reports at a time.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders, Timestamp};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;

use self::poll_thread::PollThread;

use super::out_record::OutRecord;
use super::size_limits::{self, RecordLimits};
use super::topic_handles::{self, TopicHandles};
use super::{Context, KafkaLayerError, clients, headers};
use crate::config::Resolved;
use crate::metrics::Observer;

pub mod poll_thread;

/// Records delivery failures (the worker loop turns the first into a stop)
/// and the end-to-end latency of acknowledged outputs.
pub struct DeliveryWatch {
    failure: Mutex<Option<String>>,
    /// The histogram of record timestamp → acknowledged, of the first topic counted.
    latency: Option<prometheus::Histogram>,
    counts: DeliveryCounts,
    /// The limits read at start-up, named when the broker refuses a record for its size.
    limits: RecordLimits,
}

impl DeliveryWatch {
    /// The first delivery failure, if any.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().expect("failure lock").clone()
    }

    /// Records sent and acknowledged per partition.
    pub fn counts(&self) -> &DeliveryCounts {
        &self.counts
    }

    /// An acknowledged record of the `topic`th topic counted (`None`: a
    /// topic not counted), read at `now_ms`: counted, and timed into
    /// `latency` (this watch's histogram or a local copy of it) when of the
    /// first. A report comes after any failure of an earlier record of its
    /// partition (reports come in send order), so a count never passes a
    /// failure.
    fn acknowledged(
        &self,
        topic: Option<usize>,
        partition: i32,
        offset: i64,
        (timestamp, now_ms): (Timestamp, i64),
        latency: Option<&impl Observer>,
    ) {
        let Some(t) = topic else { return };
        if t == 0
            && let Some(histogram) = latency
        {
            crate::metrics::observe_since(histogram, timestamp.to_millis(), now_ms);
        }
        self.counts.acked_at(t, partition, offset);
    }

    /// A record of `topic`/`partition` that was not delivered (`size`: its
    /// size, asked for a refusal for size): the first failure is kept.
    fn failed(&self, e: &KafkaError, topic: &str, partition: i32, size: impl FnOnce() -> u64) {
        let mut f = self.failure.lock().expect("failure lock");
        if f.is_none() {
            *f = Some(failure_text(e, topic, partition, size, &self.limits));
        }
    }
}

/// Records sent and acknowledged, per partition of each counted topic.
pub struct DeliveryCounts {
    topics: Vec<String>,
    /// `[topic][partition]`
    sent: Vec<Vec<AtomicU64>>,
    acked: Vec<Vec<AtomicU64>>,
    /// One past the highest offset acknowledged (0: none yet): where a
    /// partition's log ended after this producer's last write there.
    ends: Vec<Vec<AtomicU64>>,
}

/// What had been sent to some partitions at one moment: `(topic, partition, count)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SentMark(Vec<(usize, usize, u64)>);

impl DeliveryCounts {
    /// Counts partitions `0..partitions` of each of `topics` (others are not counted).
    pub fn new(topics: Vec<String>, partitions: usize) -> Self {
        let zeros = || (0..partitions).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
        DeliveryCounts {
            sent: topics.iter().map(|_| zeros()).collect(),
            acked: topics.iter().map(|_| zeros()).collect(),
            ends: topics.iter().map(|_| zeros()).collect(),
            topics,
        }
    }

    /// The position of `topic` among the counted topics.
    fn topic_index(&self, topic: &str) -> Option<usize> {
        self.topics.iter().position(|x| x == topic)
    }

    fn slot(&self, topic: &str, partition: i32) -> Option<(usize, usize)> {
        self.slot_at(self.topic_index(topic)?, partition)
    }

    fn slot_at(&self, t: usize, partition: i32) -> Option<(usize, usize)> {
        let p = usize::try_from(partition).ok().filter(|&p| p < self.sent[t].len())?;
        Some((t, p))
    }

    /// Counts a record queued for `topic`/`partition` (by the one thread that sends there).
    pub(crate) fn sent(&self, topic: &str, partition: i32) {
        if let Some(t) = self.topic_index(topic) {
            self.sent_at(t, partition);
        }
    }

    /// [`DeliveryCounts::sent`] by the topic's position among those counted.
    fn sent_at(&self, t: usize, partition: i32) {
        if let Some((t, p)) = self.slot_at(t, partition) {
            self.sent[t][p].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn acked_at(&self, t: usize, partition: i32, offset: i64) {
        if let Some((t, p)) = self.slot_at(t, partition) {
            // Before the count: whoever sees the count sees the end too.
            self.ends[t][p].fetch_max(u64::try_from(offset + 1).unwrap_or(0), Ordering::Relaxed);
            self.acked[t][p].fetch_add(1, Ordering::Release);
        }
    }

    /// One past the highest offset of `topic`/`partition` acknowledged so
    /// far, if any: an offset every later write there lies at or beyond.
    pub fn end(&self, topic: &str, partition: i32) -> Option<u64> {
        let (t, p) = self.slot(topic, partition)?;
        Some(self.ends[t][p].load(Ordering::Acquire)).filter(|&e| e > 0)
    }

    /// What has been sent so far to `partition` of every counted topic, or to
    /// every counted partition.
    pub fn mark(&self, partition: Option<usize>) -> SentMark {
        let mut mark = Vec::new();
        for (t, parts) in self.sent.iter().enumerate() {
            for (p, sent) in parts.iter().enumerate() {
                if partition.is_none_or(|only| only == p) {
                    let n = sent.load(Ordering::Relaxed);
                    if n > 0 {
                        mark.push((t, p, n));
                    }
                }
            }
        }
        SentMark(mark)
    }

    /// Whether every record counted in `mark` has been acknowledged.
    pub fn reached(&self, mark: &SentMark) -> bool {
        mark.0.iter().all(|&(t, p, n)| self.acked[t][p].load(Ordering::Acquire) >= n)
    }
}

impl ClientContext for DeliveryWatch {
    /// Not asked for (see [`clients`]); never logged.
    fn stats_raw(&self, _: &[u8]) {}

    fn error(&self, error: KafkaError, reason: &str) {
        clients::log_client_error(&error, reason);
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        clients::log_client_message(level, fac, message);
    }
}

impl ProducerContext for DeliveryWatch {
    type DeliveryOpaque = ();
    /// Reports served by rust-rdkafka's own poll (`flush`, the purge at
    /// drop); the poll thread serves the others ([`poll_thread`]).
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(m) => {
                let (topic, times) = (self.counts.topic_index(m.topic()), (m.timestamp(), crate::metrics::now_ms()));
                self.acknowledged(topic, m.partition(), m.offset(), times, self.latency.as_ref())
            }
            Err((e, m)) => self.failed(e, m.topic(), m.partition(), || {
                size_limits::record_size(m.key(), m.payload(), size_limits::header_lens(m.headers()))
                    - size_limits::OWN_HEADERS
            }),
        }
    }
}

/// A record as the daemon's producers send it.
type OutBaseRecord<'a> = BaseRecord<'a, [u8], [u8], ()>;

/// The daemon's producer, with librdkafka handles of the topics it counts
/// ([`TopicHandles`]: their records are sent without naming the topic) and
/// the thread serving its delivery reports ([`poll_thread`]).
pub struct OutputProducer {
    /// Declared before `topics` and `producer`: it stops before they drop.
    _poll_thread: PollThread,
    /// Declared before `producer`: dropped before the client they were made of.
    topics: TopicHandles,
    producer: BaseProducer<DeliveryWatch>,
}

impl OutputProducer {
    fn new(producer: BaseProducer<DeliveryWatch>) -> std::io::Result<Self> {
        let topics = TopicHandles::new(&producer, &producer.context().counts.topics);
        let poll_thread = PollThread::start(&producer, topics.addresses())?;
        Ok(OutputProducer { _poll_thread: poll_thread, topics, producer })
    }

    /// The position of `topic` among the topics counted (and their handles).
    fn counted(&self, topic: &str) -> Option<usize> {
        self.producer.context().counts.topic_index(topic)
    }

    /// Sends `record`, of the `counted`th topic counted if any: through
    /// that topic's handle.
    // The record comes back whole on a failure, as from rust-rdkafka's `send`.
    #[allow(clippy::result_large_err)]
    fn send<'a>(
        &self,
        counted: Option<usize>,
        record: OutBaseRecord<'a>,
    ) -> Result<(), (KafkaError, OutBaseRecord<'a>)> {
        match counted.and_then(|t| self.topics.get(t)) {
            Some(handle) => topic_handles::send_to(&self.producer, handle, record),
            None => self.producer.send(record),
        }
    }
}

impl std::ops::Deref for OutputProducer {
    type Target = BaseProducer<DeliveryWatch>;

    fn deref(&self) -> &Self::Target {
        &self.producer
    }
}

/// What a failed delivery stops the daemon with. A refusal for size names
/// the topic's limit as read at start-up: the record path dead-letters what
/// exceeds that, so the broker's limit is lower now (or was not reported and
/// is below Kafka's default), and a restart reads it again.
fn failure_text(
    e: &KafkaError,
    topic: &str,
    partition: i32,
    size: impl FnOnce() -> u64,
    limits: &RecordLimits,
) -> String {
    let mut text = format!("delivery to {topic}/{partition} failed: {e}");
    if e.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageSizeTooLarge) {
        let size = size();
        let known = limits.of_topic(topic).map_or_else(
            || "dedupd does not check it".to_string(),
            |l| format!("its limit read at start-up was {} bytes", l.bytes),
        );
        text.push_str(&format!(
            ": topic {topic} refused a batch holding a record of about {size} bytes, and {known}. Its \
             max.message.bytes was lowered since start-up, or its broker does not report it and takes less than \
             Kafka's default: set max.message.bytes on the topic. A restart reads the limits again and \
             dead-letters what exceeds them ({})",
            size_limits::REASON
        ));
    }
    text
}

/// Creates a producer; with `latency`, acknowledged records of the first of
/// the `counted` topics are timed from their timestamps. Records sent to partitions
/// `0..partitions` of `counted` topics are counted ([`DeliveryCounts`]).
/// With `limits` (the topics it writes), its batches fit the smallest of them.
pub fn output_producer(
    cfg: &Resolved,
    name: &str,
    latency: Option<prometheus::Histogram>,
    counted: Vec<String>,
    partitions: usize,
    limits: Option<&RecordLimits>,
) -> Result<OutputProducer, KafkaLayerError> {
    let counts = DeliveryCounts::new(counted, partitions);
    let mut config = clients::producer(cfg, &format!("{}-{name}", cfg.settings.app.id));
    gapless(&mut config);
    if let Some(limits) = limits {
        // The broker refuses a whole batch larger than its topic's limit,
        // however small its records: librdkafka's batches (1 MB by default)
        // must stay within the smallest.
        let configured = config.get("batch.size").and_then(|v| v.parse().ok());
        config.set("batch.size", limits.batch_size(configured).to_string());
    }
    let limits = limits.cloned().unwrap_or_default();
    let producer = config
        .create_with_context(DeliveryWatch { failure: Mutex::new(None), latency, counts, limits })
        .context(|| format!("creating the {name} producer"))?;
    OutputProducer::new(producer)
        .map_err(|e| KafkaLayerError::Internal(format!("starting the {name} producer's poll thread: {e}")))
}

/// What the outputs' replay bounds need of their producer, unless `[kafka]`
/// says otherwise: no record delivered after one that failed
/// (`enable.gapless.guarantee`: a failure is fatal to the producer, so
/// restore's highest position never lies beyond a record that was never
/// written), and no record given up while the broker is away
/// (`message.timeout.ms = 0`: retried until it is back, while back-pressure
/// holds the worker; librdkafka's 5 minutes would fail the delivery and
/// stop the daemon in a longer outage).
fn gapless(config: &mut rdkafka::ClientConfig) {
    if config.get("enable.gapless.guarantee").is_none() {
        config.set("enable.gapless.guarantee", "true");
    }
    if config.get("message.timeout.ms").is_none() {
        config.set("message.timeout.ms", "0");
    }
}

/// Waits until every record counted in `mark` is acknowledged; fails on a
/// delivery failure or after `timeout`.
pub fn wait_acked(producer: &OutputProducer, mark: &SentMark, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        // Acknowledged first, failure second: a failure reported before the
        // counted acknowledgements is then seen.
        let reached = producer.context().counts.reached(mark);
        if let Some(f) = producer.context().failure() {
            return Err(f);
        }
        if reached {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("records not acknowledged within {timeout:?}"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Sends a copy of `msg` to `topic`/`partition` with `extra` headers.
pub fn produce_copy<M: Message>(
    producer: &OutputProducer,
    topic: &str,
    partition: i32,
    msg: &M,
    extra: &[(&str, &[u8])],
) -> Result<(), KafkaLayerError> {
    produce_with(producer, topic, partition, msg, msg.payload(), extra, &[])
}

/// [`produce_copy`] with another payload, and without the headers named in
/// `skip`. A record that ends up with no header is sent without a header
/// list (librdkafka allocates one per record otherwise).
///
/// Headers named `dedupd.*` ([`headers::PREFIX`]) are never copied from
/// `msg`: only those in `extra`, which dedupd writes itself, are sent. `msg`
/// is an input record (or the router's copy of one), and restore trusts what
/// it reads back from dedupd's headers on the outputs (the replay bound,
/// `dedupd.policy.after`), so an input record carrying such a header of its
/// own must not be able to steer it.
pub fn produce_with<M: Message>(
    producer: &OutputProducer,
    topic: &str,
    partition: i32,
    msg: &M,
    payload: Option<&[u8]>,
    extra: &[(&str, &[u8])],
    skip: &[&str],
) -> Result<(), KafkaLayerError> {
    let copied_headers = msg.headers().map(|h| (h.count(), h.iter().map(|h| (h.key, h.value))));
    let mut record = with_headers(topic, partition, copied_headers, extra, skip);
    if let Some(k) = msg.key() {
        record = record.key(k);
    }
    if let Some(p) = payload {
        record = record.payload(p);
    }
    if let Some(ts) = msg.timestamp().to_millis() {
        record = record.timestamp(ts);
    }
    send_counted(producer, record)
}

/// [`produce_with`] of a record a judgment copies ([`OutRecord`]: its
/// payload is the input record's).
pub fn produce_out(
    producer: &OutputProducer,
    topic: &str,
    partition: i32,
    rec: &OutRecord<'_>,
    extra: &[(&str, &[u8])],
) -> Result<(), KafkaLayerError> {
    let copied_headers = Some((rec.headers.count(), rec.headers.iter())).filter(|(count, _)| *count > 0);
    let mut record = with_headers(topic, partition, copied_headers, extra, &[]);
    if let Some(k) = rec.key {
        record = record.key(k);
    }
    if let Some(p) = rec.payload {
        record = record.payload(p);
    }
    if let Some(ts) = rec.timestamp_ms {
        record = record.timestamp(ts);
    }
    send_counted(producer, record)
}

/// A record for `topic`/`partition` with the `copied` headers (their count
/// and the headers; see [`copied`]) and `extra`; no header list when it
/// would be empty.
fn with_headers<'a, 'h>(
    topic: &'a str,
    partition: i32,
    copied_headers: Option<(usize, impl Iterator<Item = (&'h str, Option<&'h [u8]>)>)>,
    extra: &[(&str, &[u8])],
    skip: &[&str],
) -> BaseRecord<'a, [u8], [u8], ()> {
    let mut hs: Option<OwnedHeaders> = None;
    if let Some((count, list)) = copied_headers {
        let capacity = count + extra.len();
        for (key, value) in list {
            // Our own headers from an earlier stage are replaced, not repeated.
            if !copied(key, skip) || extra.iter().any(|(k, _)| *k == key) {
                continue;
            }
            let list = hs.take().unwrap_or_else(|| OwnedHeaders::new_with_capacity(capacity));
            hs = Some(list.insert(Header { key, value }));
        }
    }
    for (k, v) in extra {
        let list = hs.take().unwrap_or_else(|| OwnedHeaders::new_with_capacity(extra.len()));
        hs = Some(list.insert(Header { key: k, value: Some(*v) }));
    }
    let record: BaseRecord<'a, [u8], [u8], ()> = BaseRecord::with_opaque_to(topic, ()).partition(partition);
    match hs {
        Some(hs) => record.headers(hs),
        None => record,
    }
}

/// Whether an input record's header `name` is copied: never a reserved
/// `dedupd.*` one (dedupd's own from an earlier stage are replaced by
/// `extra`, and one an input producer wrote is dropped), nor one in `skip`.
fn copied(name: &str, skip: &[&str]) -> bool {
    !headers::is_reserved(name) && !skip.contains(&name)
}

/// Produces a record the pipeline writes itself (a router's progress
/// record): one `header` (empty value) and `payload`, no key.
pub fn produce_control(
    producer: &OutputProducer,
    topic: &str,
    partition: i32,
    header: &str,
    payload: &[u8],
) -> Result<(), KafkaLayerError> {
    let hs = OwnedHeaders::new_with_capacity(1).insert(Header { key: header, value: Some(&b""[..]) });
    let record: BaseRecord<'_, [u8], [u8], ()> =
        BaseRecord::with_opaque_to(topic, ()).partition(partition).headers(hs).payload(payload);
    send_counted(producer, record)
}

/// Produces a record of `extra` headers alone (no key, no value), with
/// `timestamp`: a dead letter whose input record's key and headers exceed
/// the dead-letter topic's limit by themselves.
pub fn produce_bare(
    producer: &OutputProducer,
    topic: &str,
    partition: i32,
    timestamp: Option<i64>,
    extra: &[(&str, &[u8])],
) -> Result<(), KafkaLayerError> {
    let mut hs = OwnedHeaders::new_with_capacity(extra.len());
    for (k, v) in extra {
        hs = hs.insert(Header { key: k, value: Some(*v) });
    }
    let mut record: BaseRecord<'_, [u8], [u8], ()> =
        BaseRecord::with_opaque_to(topic, ()).partition(partition).headers(hs);
    if let Some(ts) = timestamp {
        record = record.timestamp(ts);
    }
    send_counted(producer, record)
}

/// [`send_waiting`], then counts the record as sent to its topic and
/// partition (for the acknowledgement marks).
fn send_counted(producer: &OutputProducer, record: OutBaseRecord<'_>) -> Result<(), KafkaLayerError> {
    // Looked up once: the handle and the count are both by position.
    let (counted, partition) = (producer.counted(record.topic), record.partition.unwrap_or(-1));
    send_through(producer, counted, record)?;
    if let Some(t) = counted {
        producer.context().counts.sent_at(t, partition);
    }
    Ok(())
}

/// Sends `record`, waiting while the producer's queue is full.
pub fn send_waiting(producer: &OutputProducer, record: OutBaseRecord<'_>) -> Result<(), KafkaLayerError> {
    send_through(producer, producer.counted(record.topic), record)
}

/// [`send_waiting`] of a record of the `counted`th topic counted, if any.
fn send_through(
    producer: &OutputProducer,
    counted: Option<usize>,
    mut record: OutBaseRecord<'_>,
) -> Result<(), KafkaLayerError> {
    loop {
        match producer.send(counted, record) {
            Ok(()) => return Ok(()),
            // Back-pressure: the queue is bounded, so wait for deliveries.
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((e, r)) => {
                return Err(KafkaLayerError::Client {
                    context: format!("producing to {}/{}", r.topic, r.partition.unwrap_or(-1)),
                    source: e,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_input_headers_are_never_copied() {
        for name in [
            headers::POLICY,
            headers::POLICY_AFTER,
            headers::RELEASE,
            headers::SLICE_OFFSET,
            headers::SOURCE,
            headers::DELETE,
            headers::PROGRESS,
            headers::READ_ORDER,
            crate::features::tiers::io::LEAF,
            "dedupd.anything.new",
        ] {
            assert!(!copied(name, &[]), "{name} copied");
        }
        for name in ["trace-id", "dedupd", "Dedupd.policy", "x.dedupd.policy", "feed"] {
            assert!(copied(name, &[]), "{name} dropped");
        }
        assert!(!copied("feed", &["feed"]));
    }

    #[test]
    fn outputs_are_gapless_and_never_time_out_unless_kafka_says_otherwise() {
        let mut config = rdkafka::ClientConfig::new();
        gapless(&mut config);
        assert_eq!(config.get("enable.gapless.guarantee"), Some("true"));
        assert_eq!(config.get("message.timeout.ms"), Some("0"));
        let mut set = rdkafka::ClientConfig::new();
        set.set("message.timeout.ms", "600000");
        gapless(&mut set);
        assert_eq!(set.get("message.timeout.ms"), Some("600000"), "an operator's value is kept");
    }
}
