//! Multi-level (Bloom tree) deployments on Kafka (docs/tiers.md).
//!
//! - Sparse leaf ([`run_leaf`]): consumes its own input topics, tests each
//!   record against its [`LeafCache`], drops what the cache resolves and
//!   forwards the rest unchanged (key, payload, timestamp, headers, plus
//!   [`LEAF`] and [`LEAF_SOURCE`]) to `tier.parent_topic`; it learns the
//!   root's deliveries from `tier.verdict_topic`. It replaces the slice
//!   workers and the router: no slices, no checkpoints (the cache is a
//!   cache), at-least-once forwarding (a record forwarded twice is judged a
//!   duplicate of itself by the root).
//! - Sparse root ([`RootVerdicts`]): a normal instance on the parent topic
//!   whose slice workers also publish a verdict for every record they
//!   deliver (at least once: on a replay too; learning one twice is
//!   idempotent).
//! - Dense leaf: a normal instance whose output topic is the parent topic;
//!   its outputs carry [`LEAF`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use super::verdicts::{LeafCache, LeafDecision, Learned, VerdictRecord};
use crate::admin::status::Status;
use crate::config::Resolved;
use crate::engine::{Extractor, RecordView, STAMP_BYTES, SourceRef};
use crate::features::feature::OnDistinct;
use crate::filter::{FilterParams, KeyHash};
use crate::kafka::clients::{self, PlainContext, Reader};
use crate::kafka::producer::{OutputProducer, produce_copy, send_waiting};
use crate::kafka::topics::partition_count;
use crate::kafka::{Context, KafkaLayerError};
use crate::metrics::Metrics;

/// On forwarded records: the `app.id` of the leaf that forwarded them.
pub const LEAF: &str = "dedupd.tier.leaf";
/// On records a sparse leaf forwards: their `topic/partition/offset` at the
/// leaf (not `dedupd.source`, which the root's router stamps for itself).
pub const LEAF_SOURCE: &str = "dedupd.tier.source";

/// How often a leaf waits for its forwards and commits its input offsets.
const COMMIT_EVERY: Duration = Duration::from_secs(1);
const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);

/// A sparse root's verdict publisher, held by the slice workers
/// ([`OnDistinct`]).
pub struct RootVerdicts {
    pub topic: String,
    pub seed: u64,
    /// Partitions of the verdict topic: slice `s` writes `s mod partitions`.
    pub partitions: u32,
}

impl RootVerdicts {
    /// Looks up the verdict topic (created by `topics::ensure`).
    pub fn new(cfg: &Resolved, seed: u64) -> Result<RootVerdicts, KafkaLayerError> {
        let topic = cfg.settings.tier.verdict_topic.clone();
        let partitions = topic_partitions(cfg, &topic)?;
        Ok(RootVerdicts { topic, seed, partitions })
    }
}

/// Publishes that a record judged distinct by `slice` was delivered: its
/// key's hash and its event time, re-read as the slice read them (the
/// record was valid, so this cannot fail). On a replay too: verdicts are at
/// least once, learning one twice changes nothing.
impl OnDistinct for RootVerdicts {
    fn distinct(
        &self,
        producer: &OutputProducer,
        extractor: &Extractor,
        metrics: &Metrics,
        slice: u32,
        view: &RecordView<'_>,
    ) -> Result<(), KafkaLayerError> {
        let Ok(extracted) = extractor.extract(view, 0) else {
            return Ok(()); // judged distinct, so readable; nothing to tell otherwise
        };
        let verdict =
            VerdictRecord { seed: self.seed, hash: KeyHash::of(self.seed, &extracted.key), time_ms: extracted.time_ms };
        let bytes = verdict.encode();
        let partition = (slice % self.partitions) as i32;
        let record: BaseRecord<'_, [u8], [u8], ()> = BaseRecord::with_opaque_to(&self.topic, ())
            .partition(partition)
            .payload(&bytes[..])
            .timestamp(extracted.time_ms as i64);
        send_waiting(producer, record)?;
        metrics.verdicts.tier_verdicts.with_label_values(&["published"]).inc();
        Ok(())
    }
}

/// Partitions of an existing `topic`.
fn topic_partitions(cfg: &Resolved, topic: &str) -> Result<u32, KafkaLayerError> {
    let probe: Reader = clients::reader(cfg, &format!("{}-tier", cfg.settings.app.id))
        .create_with_context(PlainContext)
        .context(|| "creating a metadata client".into())?;
    match partition_count(&probe, topic)? {
        Some(n) => Ok(n as u32),
        None => Err(KafkaLayerError::Topics(format!("the topic {topic} does not exist"))),
    }
}

/// What a sparse leaf runs with.
pub struct LeafSetup {
    pub cfg: Resolved,
    pub extractor: Extractor,
    /// The root's filter parameters with lateness = `tier.verdict_delay`.
    pub cache_params: FilterParams,
    pub producer: OutputProducer,
    pub metrics: Arc<Metrics>,
    pub status: Arc<Status>,
}

/// The sparse leaf loop; returns when `stop` is set (after its forwards are
/// acknowledged and its input offsets committed) or on a fatal error.
pub fn run_leaf(setup: Arc<LeafSetup>, stop: Arc<AtomicBool>) -> Result<(), KafkaLayerError> {
    crate::kafka::name_thread("dedupd-leaf");
    let verdicts = verdict_reader(&setup.cfg)?;
    let input = leaf_consumer(&setup.cfg)?;
    let mut leaf = Leaf::new(&setup)?;
    log::info!(
        "sparse leaf: {:?} → {} ({} partitions), learning from {}",
        setup.cfg.settings.input.topics,
        leaf.parent,
        leaf.parent_partitions,
        setup.cfg.settings.tier.verdict_topic
    );
    let mut last_commit = Instant::now();
    let result = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        if let Some(f) = setup.producer.context().failure() {
            break Err(KafkaLayerError::Fatal(f));
        }
        // Verdicts first: what the root has delivered resolves more records.
        leaf.learn(&verdicts);
        if let Err(e) = leaf.take(&input) {
            break Err(e);
        }
        if !setup.status.ready.load(Ordering::Relaxed) && input.assignment().is_ok_and(|a| a.count() > 0) {
            setup.status.ready.store(true, Ordering::Relaxed);
            log::info!("sparse leaf: assigned, forwarding");
        }
        if last_commit.elapsed() >= COMMIT_EVERY {
            last_commit = Instant::now();
            if let Err(e) = commit(&setup.producer, &input, CommitMode::Async) {
                break Err(e);
            }
        }
    };
    if result.is_ok() {
        commit(&setup.producer, &input, CommitMode::Sync)?;
    }
    log::info!("sparse leaf: cache of {} bytes at stop", leaf.cache.memory_bytes());
    result
}

/// The verdict topic from its end: a (re)started leaf's cache starts empty.
fn verdict_reader(cfg: &Resolved) -> Result<Reader, KafkaLayerError> {
    let (id, tier) = (&cfg.settings.app.id, &cfg.settings.tier);
    let verdicts: Reader = clients::reader(cfg, &format!("{id}-leaf-verdicts"))
        .create_with_context(PlainContext)
        .context(|| "creating the verdict reader".into())?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..topic_partitions(cfg, &tier.verdict_topic)? {
        tpl.add_partition_offset(&tier.verdict_topic, p as i32, Offset::End)
            .context(|| format!("assigning {}", tier.verdict_topic))?;
    }
    verdicts.assign(&tpl).context(|| format!("assigning {}", tier.verdict_topic))?;
    Ok(verdicts)
}

/// The leaf's input consumer, subscribed.
fn leaf_consumer(cfg: &Resolved) -> Result<BaseConsumer<PlainContext>, KafkaLayerError> {
    let id = &cfg.settings.app.id;
    let input: BaseConsumer<PlainContext> = clients::input_group_consumer(cfg, id, &format!("{id}-leaf"))
        .create_with_context(PlainContext)
        .context(|| "creating the leaf consumer".into())?;
    let topics: Vec<&str> = cfg.settings.input.topics.iter().map(String::as_str).collect();
    input.subscribe(&topics).context(|| format!("subscribing to {topics:?}"))?;
    Ok(input)
}

/// The sparse leaf's state: its cache of the root's verdicts, and where it forwards.
struct Leaf<'d> {
    setup: &'d LeafSetup,
    parent: &'d str,
    parent_partitions: u32,
    seed: u64,
    cache: LeafCache,
    /// Input topics, with their record counters.
    counters: Vec<(&'d str, prometheus::IntCounter)>,
    /// Lookups: resolved, forwarded.
    lookups: [prometheus::IntCounter; 2],
    /// Verdicts: applied, too old, invalid.
    learned: [prometheus::IntCounter; 3],
    warned_invalid: bool,
}

impl<'d> Leaf<'d> {
    fn new(setup: &'d LeafSetup) -> Result<Self, KafkaLayerError> {
        let cfg = &setup.cfg;
        let parent = cfg.settings.tier.parent_topic.as_str();
        let metrics = &setup.metrics;
        Ok(Leaf {
            setup,
            parent,
            parent_partitions: topic_partitions(cfg, parent)?,
            seed: setup.cache_params.seed,
            cache: LeafCache::new(setup.cache_params.clone(), cfg.order.max_clock_jump_ms),
            counters: cfg.settings.input.topics.iter().map(|t| (t.as_str(), metrics.input_counter(t))).collect(),
            lookups: ["resolved", "forwarded"].map(|r| metrics.verdicts.tier_lookups.with_label_values(&[r])),
            learned: ["applied", "too_old", "invalid"].map(|r| metrics.verdicts.tier_verdicts.with_label_values(&[r])),
            warned_invalid: false,
        })
    }

    /// Takes in every verdict the root has published since the last look.
    fn learn(&mut self, verdicts: &Reader) {
        let [applied, too_old, invalid] = &self.learned;
        while let Some(polled) = verdicts.poll(Duration::ZERO) {
            let Ok(msg) = polled else { continue }; // end-of-partition events
            match VerdictRecord::decode(msg.payload().unwrap_or_default(), self.seed) {
                Ok(v) => match self.cache.learn(&v) {
                    Learned::Applied => applied.inc(),
                    Learned::TooOld => too_old.inc(),
                },
                Err(e) => {
                    invalid.inc();
                    if !self.warned_invalid {
                        self.warned_invalid = true;
                        log::warn!(
                            "{}/{}@{}: {e}; skipped (the leaf forwards more; further ones are only counted)",
                            msg.topic(),
                            msg.partition(),
                            msg.offset()
                        );
                    }
                }
            }
        }
    }

    /// Polls one input record: resolved by the cache, or forwarded to the
    /// root; its offset is stored for the next commit either way.
    fn take(&mut self, input: &BaseConsumer<PlainContext>) -> Result<(), KafkaLayerError> {
        let msg = match input.poll(Duration::from_millis(50)) {
            Some(Ok(msg)) => msg,
            Some(Err(e)) => {
                log::warn!("consuming {:?}: {e}", self.setup.cfg.settings.input.topics);
                return Ok(());
            }
            None => return Ok(()),
        };
        if let Some((_, c)) = self.counters.iter().find(|(t, _)| *t == msg.topic()) {
            c.inc();
        }
        let headers = crate::kafka::headers::pairs(&msg);
        let view = RecordView {
            key: msg.key(),
            payload: msg.payload().unwrap_or_default(),
            headers: &headers,
            timestamp_ms: msg.timestamp().to_millis(),
            decoder: crate::engine::formats::payload_decoder(&self.setup.cfg.decoder),
        };
        // An unreadable record is forwarded as it is: the root
        // dead-letters it with its reason (nothing is lost here).
        let hash = self.setup.extractor.extract(&view, 0).ok().map(|e| (KeyHash::of(self.seed, &e.key), e.time_ms));
        let decision = hash.map_or(LeafDecision::Forward, |(h, t)| self.cache.test(&h, t));
        if decision == LeafDecision::Resolved {
            self.lookups[0].inc();
        } else {
            self.forward(&msg, hash.map(|(h, _)| h))?;
            self.lookups[1].inc();
        }
        // Committed only after the forwards before it are acknowledged ([`commit`]).
        if let Err(e) = input.store_offset_from_message(&msg) {
            log::debug!("storing the offset of {}/{}: {e}", msg.topic(), msg.partition());
        }
        Ok(())
    }

    /// Forwards an input record to the root's input, stamped with this leaf
    /// and the record's source.
    fn forward<M: Message>(&self, msg: &M, hash: Option<KeyHash>) -> Result<(), KafkaLayerError> {
        let partition = match hash {
            Some(h) => h.slice(self.parent_partitions) as i32,
            None => msg.partition() % self.parent_partitions as i32,
        };
        let mut stamp = [0u8; STAMP_BYTES];
        // No source for a topic name longer than Kafka allows (never panics).
        let source = SourceRef::stamp(&mut stamp, msg.topic(), msg.partition(), msg.offset());
        let id = self.setup.cfg.settings.app.id.as_bytes();
        let extra = [(LEAF, id), (LEAF_SOURCE, source.unwrap_or_default())];
        let extra = &extra[..if source.is_some() { 2 } else { 1 }];
        produce_copy(&self.setup.producer, self.parent, partition, msg, extra)
    }
}

/// At least once: waits until everything forwarded so far is acknowledged,
/// then commits the stored input offsets (every record before them was
/// forwarded or resolved).
fn commit(
    producer: &OutputProducer,
    input: &BaseConsumer<PlainContext>,
    mode: CommitMode,
) -> Result<(), KafkaLayerError> {
    producer.flush(FLUSH_TIMEOUT).context(|| "waiting for the forwarded records".into())?;
    match input.commit_consumer_state(mode) {
        // Nothing consumed yet.
        Err(rdkafka::error::KafkaError::ConsumerCommit(rdkafka::types::RDKafkaErrorCode::NoOffset)) => Ok(()),
        other => other.context(|| "committing the leaf's input offsets".into()),
    }
}
