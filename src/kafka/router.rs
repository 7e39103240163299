//! Repartition mode's first stage: input records → `<app>.slices`,
//! partition `H_S(key)`, unchanged (key, payload, timestamp, headers) plus a
//! `dedupd.source` stamp with the input topic/partition/offset.
//!
//! Records are routed in timestamp order across the input partitions this
//! router owns: the buffered head with the smallest timestamp goes first,
//! and a partition with nothing buffered holds the others back unless it has
//! reached its end (or for at most `MAX_WAIT`). A slice's clock is the
//! largest timestamp it has seen, so without this a backlog read partition
//! by partition would push the clock a whole window ahead of the records
//! still to come from other partitions.
//!
//! Input offsets are committed only after the routed records are
//! acknowledged (store offsets only after delivery), so a crash re-sends
//! records rather than losing them; the slice workers catch the re-sent
//! copies exactly by their stamps. Records whose key or time cannot be read
//! go to the dead-letter topic here, since they cannot be given a slice.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message, OwnedMessage};
use rdkafka::producer::Producer;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::producer::{OutputProducer, produce_copy};
use super::{Context, KafkaLayerError, clients, headers};
use crate::config::Resolved;
use crate::engine::{Extractor, RecordView, SourceRef};
use crate::filter::KeyHash;
use crate::metrics::Metrics;

const COMMIT_EVERY: Duration = Duration::from_millis(500);
const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an empty partition that has not reached its end may hold back the others.
const MAX_WAIT: Duration = Duration::from_secs(2);
/// Records buffered per partition before it is paused.
const MAX_BUFFERED: usize = 2000;

/// What the router needs.
pub struct RouterDeps {
    pub cfg: Resolved,
    pub extractor: Extractor,
    pub slices: u32,
    pub seed: u64,
    pub producer: OutputProducer,
    pub metrics: Arc<Metrics>,
}

type PartitionId = (String, i32);

/// Next offsets to commit, per input partition.
type Pending = BTreeMap<PartitionId, i64>;

/// Shared between the router loop and its rebalance callbacks.
#[derive(Default)]
struct Shared {
    pending: Pending,
    /// Partitions revoked since the loop last looked: their buffers go.
    revoked: Vec<PartitionId>,
    /// Partitions assigned since the loop last looked.
    assigned: Vec<PartitionId>,
}

struct RouterContext {
    deps: Arc<RouterDeps>,
    shared: Arc<Mutex<Shared>>,
}

impl ClientContext for RouterContext {}

impl ConsumerContext for RouterContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            // Hand over cleanly: everything routed so far is delivered and committed.
            let revoked: Vec<PartitionId> =
                tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect();
            if let Err(e) = commit(&self.deps, consumer, &self.shared, Some(&revoked)) {
                log::warn!("router: committing before a rebalance: {e}");
            }
            self.shared.lock().expect("router lock").revoked.extend(revoked);
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let assigned: Vec<PartitionId> =
                tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect();
            self.shared.lock().expect("router lock").assigned.extend(assigned);
        }
    }
}

/// Flushes the producer, then commits the pending offsets (of `only`, if given).
fn commit<C: ConsumerContext>(
    deps: &RouterDeps,
    consumer: &BaseConsumer<C>,
    shared: &Mutex<Shared>,
    only: Option<&[PartitionId]>,
) -> Result<(), KafkaLayerError> {
    deps.producer.flush(FLUSH_TIMEOUT).context(|| "router: flushing slice records".into())?;
    if let Some(f) = deps.producer.context().failure() {
        return Err(KafkaLayerError::Topology(format!("router: {f}")));
    }
    let mut shared = shared.lock().expect("router lock");
    let mut tpl = TopicPartitionList::new();
    shared.pending.retain(|(topic, partition), next| {
        let chosen = only.is_none_or(|o| o.iter().any(|(t, p)| t == topic && p == partition));
        if chosen {
            let _ = tpl.add_partition_offset(topic, *partition, Offset::Offset(*next));
        }
        !chosen
    });
    drop(shared);
    if tpl.count() > 0 {
        consumer.commit(&tpl, CommitMode::Sync).context(|| "router: committing input offsets".into())?;
    }
    Ok(())
}

/// One input partition's buffered records, in offset order.
struct Lane {
    records: VecDeque<OwnedMessage>,
    /// When a record last arrived (or the lane was assigned).
    last_arrival: Instant,
    /// The consumer reported the end of the partition after the last record.
    at_end: bool,
    paused: bool,
}

impl Lane {
    fn new() -> Self {
        Lane { records: VecDeque::new(), last_arrival: Instant::now(), at_end: false, paused: false }
    }

    /// An empty lane may still deliver a record older than every buffered one.
    fn holds_back(&self) -> bool {
        self.records.is_empty() && !self.at_end && self.last_arrival.elapsed() < MAX_WAIT
    }
}

/// The router loop; returns when `stop` is set (after a final commit) or on a fatal error.
pub fn run(deps: Arc<RouterDeps>, stop: Arc<AtomicBool>) -> Result<(), KafkaLayerError> {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let id = &deps.cfg.settings.app.id;
    let consumer: BaseConsumer<RouterContext> =
        clients::group_consumer(&deps.cfg, &format!("{id}.router"), &format!("{id}-router"))
            .set("enable.partition.eof", "true")
            .create_with_context(RouterContext { deps: deps.clone(), shared: shared.clone() })
            .context(|| "creating the router consumer".into())?;
    let topics: Vec<&str> = deps.cfg.settings.input.topics.iter().map(String::as_str).collect();
    consumer.subscribe(&topics).context(|| format!("subscribing to {topics:?}"))?;
    log::info!("router: reading {topics:?} into {}", deps.cfg.slice_topic());
    let mut lanes: BTreeMap<PartitionId, Lane> = BTreeMap::new();
    let mut last_commit = Instant::now();
    let result = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        match consumer.poll(Duration::from_millis(10)) {
            Some(Ok(msg)) => {
                deps.metrics.input_records.with_label_values(&[msg.topic()]).inc();
                let lane = lanes.entry((msg.topic().to_string(), msg.partition())).or_insert_with(Lane::new);
                lane.records.push_back(msg.detach());
                lane.last_arrival = Instant::now();
                lane.at_end = false;
                if lane.records.len() >= MAX_BUFFERED && !lane.paused {
                    lane.paused = set_paused(&consumer, msg.topic(), msg.partition(), true);
                }
            }
            // The event names only the partition: with several input topics it
            // marks that partition of each (at worst routing a little out of order).
            Some(Err(KafkaError::PartitionEOF(p))) => {
                for lane in lanes.iter_mut().filter(|((_, q), _)| *q == p).map(|(_, l)| l) {
                    lane.at_end = true;
                }
            }
            Some(Err(e)) => log::warn!("router: consuming: {e}"),
            None => {}
        }
        {
            let mut s = shared.lock().expect("router lock");
            for gone in s.revoked.drain(..) {
                lanes.remove(&gone);
            }
            for new in s.assigned.drain(..) {
                lanes.entry(new).or_insert_with(Lane::new);
            }
        }
        if let Err(e) = route_ready(&deps, &consumer, &shared, &mut lanes) {
            break Err(e);
        }
        if last_commit.elapsed() >= COMMIT_EVERY {
            last_commit = Instant::now();
            if let Err(e) = commit(&deps, &consumer, &shared, None) {
                break Err(e);
            }
        }
    };
    if result.is_ok() {
        commit(&deps, &consumer, &shared, None)?;
    }
    drop(consumer);
    result
}

fn set_paused<C: ConsumerContext>(consumer: &BaseConsumer<C>, topic: &str, partition: i32, pause: bool) -> bool {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, partition);
    let result = if pause { consumer.pause(&tpl) } else { consumer.resume(&tpl) };
    match result {
        Ok(()) => pause,
        Err(e) => {
            log::warn!("router: {} {topic}/{partition}: {e}", if pause { "pausing" } else { "resuming" });
            !pause
        }
    }
}

/// Routes buffered records in timestamp order while no partition that may
/// still deliver an earlier record is empty.
fn route_ready<C: ConsumerContext>(
    deps: &RouterDeps,
    consumer: &BaseConsumer<C>,
    shared: &Mutex<Shared>,
    lanes: &mut BTreeMap<PartitionId, Lane>,
) -> Result<(), KafkaLayerError> {
    loop {
        if lanes.values().any(Lane::holds_back) {
            return Ok(());
        }
        let next = lanes
            .iter()
            .filter_map(|(id, l)| {
                l.records.front().map(|m| (m.timestamp().to_millis().unwrap_or(i64::MIN), id.clone()))
            })
            .min();
        let Some((_, id)) = next else {
            return Ok(());
        };
        let lane = lanes.get_mut(&id).expect("lane exists");
        let msg = lane.records.pop_front().expect("non-empty lane");
        if lane.paused && lane.records.len() < MAX_BUFFERED / 2 {
            lane.paused = set_paused(consumer, &id.0, id.1, false);
        }
        route(deps, &msg)?;
        shared.lock().expect("router lock").pending.insert(id, msg.offset() + 1);
    }
}

/// Sends one input record to its slice, or to the dead-letter topic.
fn route(deps: &RouterDeps, msg: &OwnedMessage) -> Result<(), KafkaLayerError> {
    let header_list: Vec<(&str, &[u8])> =
        msg.headers().map(|h| h.iter().map(|h| (h.key, h.value.unwrap_or_default())).collect()).unwrap_or_default();
    let view = RecordView {
        key: msg.key(),
        payload: msg.payload().unwrap_or_default(),
        headers: &header_list,
        timestamp_ms: msg.timestamp().to_millis(),
    };
    let stamp = SourceRef::stamp(msg.topic(), msg.partition(), msg.offset());
    match deps.extractor.extract(&view, 0) {
        Ok(x) => {
            let slice = KeyHash::of(deps.seed, &x.key).slice(deps.slices);
            produce_copy(
                &deps.producer,
                &deps.cfg.slice_topic(),
                slice as i32,
                msg,
                &[(headers::SOURCE, stamp.as_bytes())],
            )
        }
        Err(why) => {
            deps.metrics.dead_letters.with_label_values(&[why.reason.as_str()]).inc();
            let partition = msg.partition().rem_euclid(deps.slices as i32);
            produce_copy(
                &deps.producer,
                &deps.cfg.settings.output.dead_letter_topic,
                partition,
                msg,
                &[
                    (headers::REASON, why.reason.as_str().as_bytes()),
                    (headers::DETAIL, why.detail.as_bytes()),
                    (headers::SOURCE, stamp.as_bytes()),
                ],
            )
        }
    }
}
