//! Repartition mode's first stage: input records → `<app>.slices`,
//! partition `H_S(key)`, unchanged (key, payload, timestamp, headers) but
//! for a stamp with the input topic/partition/offset in front of the payload
//! ([`crate::engine::slice::FRAME_MAGIC`]), and without the headers named
//! `dedupd.*` (reserved to dedupd: [`super::headers`]). In shared mode
//! (`slicing.mode = "shared"`, docs/shared-mode.md) it copies nothing: each
//! turn it writes one read-order record naming the records it routed, in
//! routing order, to the one slice, which re-reads them from the input.
//!
//! Records are routed in event-time order (the time `input.time` reads, the
//! one the slices judge by — not the Kafka timestamp, which can differ)
//! across the input partitions this router owns: the buffered head with
//! the smallest time goes first,
//! and a partition with nothing buffered holds the others back unless it has
//! reached its end (or for at most `MAX_WAIT`), or the record to go is at most
//! `slicing.order_tolerance` newer than the last record read from it (live
//! input: partitions that keep up with each other never wait on one another). A slice's clock is the
//! largest timestamp it has seen, so without this a backlog read partition
//! by partition would push the clock a whole window ahead of the records
//! still to come from other partitions.
//!
//! Input offsets are committed only after the routed records are
//! acknowledged (store offsets only after delivery), so a crash re-sends
//! records rather than losing them; the slice workers catch the re-sent
//! copies exactly by their stamps. Records whose key or time cannot be read
//! go to the dead-letter topic here, since they cannot be given a slice.
//!
//! Committing does not stop routing: every `COMMIT_EVERY` the offsets routed
//! so far become a candidate together with a mark of what the producer had
//! been given ([`super::producer::SentMark`]); a candidate is committed
//! (asynchronously) once its mark is acknowledged. Only a rebalance and the
//! final stop flush the producer and commit synchronously.
//!
//! Every `PROGRESS_EVERY`, if it changed, the router announces to every
//! slice partition how far it has routed each input partition it owns (a
//! *progress record*, header `dedupd.progress`, see
//! [`crate::engine::Progress`]): the largest event time routed from it,
//! and whether it is idle (at its end, nothing new for the lateness, at least `IDLE_AFTER`). The
//! slices hold their watermark at the slowest partition not idle, so when
//! this router dies, its partitions' records, resumed by another router
//! once the group notices, still arrive in order (per-input watermarks, as
//! Flink's; deterministic because they travel in the slice log).
//!
//! Buffered records are the consumer's own messages, held until routed (no
//! copy); a partition is paused (which drops librdkafka's prefetched records
//! of it) only when it runs far ahead of the others.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::producer::Producer;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::join::JoinWatch;
use super::producer::{OutputProducer, SentMark, produce_control, produce_copy, produce_with};
use super::{Context, KafkaLayerError, clients, headers};
use crate::config::{Resolved, SlicingMode};
use crate::engine::read_order::ReadOrderBuilder;
use crate::engine::slice::frame_into;
use crate::engine::{
    Extractor, InvalidRecord, KeySpec, Progress, Reading, RecordView, STAMP_BYTES, SourceRef, shrink_target,
};
use crate::filter::KeyHash;
use crate::metrics::{Metrics, now_ms, observe_since};
use prometheus::local::LocalHistogram;

const COMMIT_EVERY: Duration = Duration::from_millis(500);
const COMMIT_CHECK_EVERY: Duration = Duration::from_millis(10);
const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an empty partition that has not reached its end may hold back the others.
const MAX_WAIT: Duration = Duration::from_secs(2);
/// Records buffered per partition before it is paused. Larger than what
/// librdkafka prefetches per partition (`queued.min.messages`, set below),
/// so partitions that advance together are never paused: pausing drops the
/// prefetched records and costs a fetch round trip to get them again.
const MAX_BUFFERED: usize = 50_000;
/// Records taken from the consumer per turn of the router loop (see `run`).
const POLL_BATCH: usize = 512;
/// How often the router looks whether its progress changed (and then announces it).
const PROGRESS_EVERY: Duration = Duration::from_millis(100);
/// A partition at its end that has delivered nothing for this long — or
/// for `input.lateness`, if longer — is announced idle: it holds no slice
/// back (an idle or empty partition would otherwise keep every slice's
/// watermark where it stopped). Not shorter than the lateness: a slice
/// flushes only after that much silence anyway, and a partition announced
/// idle that receives records while its router is gone is not held for
/// (seen with 0.5 s on a loaded machine: a stream stalling for a moment
/// made its partitions idle, and the records of those a killed member
/// owned came 699 late in the CI storm).
const IDLE_AFTER: Duration = Duration::from_millis(500);
/// The router consumer's prefetch per partition, unless set in `[kafka]`.
const PREFETCH: &str = "20000";
/// Shared mode: input records one read-order record names at most (each
/// turn of the router writes one; a larger turn, several). Well below
/// [`crate::engine::read_order::MAX_RECORDS`], so a record stays a few kilobytes.
const READ_ORDER_RECORDS: u64 = 4096;

/// What the router needs.
pub struct RouterDeps {
    pub cfg: Resolved,
    /// What the router reads: the dedup key, or the count key it routes by.
    pub extractor: Extractor,
    /// `extractor` reads the dedup key (not a count key), so its reading
    /// is the slices' own and travels in the frame ([`Reading`]).
    pub hands_on_reading: bool,
    pub slices: u32,
    /// `<app.id>.slices`.
    pub slice_topic: String,
    pub seed: u64,
    /// Counts the slice topic and the dead-letter topic, partitions `0..slices`.
    pub producer: OutputProducer,
    pub metrics: Arc<Metrics>,
}

type PartitionId = (String, i32);

/// Next offsets to commit, per input partition.
type Pending = BTreeMap<PartitionId, i64>;

/// Offsets to commit once everything the producer had been given when they
/// were taken is acknowledged.
struct Candidate {
    offsets: Pending,
    mark: SentMark,
}

/// Shared between the router loop and its rebalance callbacks.
#[derive(Default)]
struct Shared {
    /// Routed since the last candidate was taken.
    pending: Pending,
    /// Oldest first.
    candidates: VecDeque<Candidate>,
    /// Partitions revoked since the loop last looked: their buffers go.
    revoked: Vec<PartitionId>,
    /// Partitions assigned since the loop last looked.
    assigned: Vec<PartitionId>,
}

struct RouterContext {
    deps: Arc<RouterDeps>,
    shared: Arc<Mutex<Shared>>,
    join: JoinWatch,
    /// Set by the rebalance callbacks (which run inside `poll`, on the
    /// router's thread): the loop then looks at `Shared`'s assignment lists,
    /// and not under the lock for every record.
    rebalanced: AtomicBool,
}

impl ClientContext for RouterContext {
    /// Not asked for (see [`clients`]); never logged.
    fn stats_raw(&self, _: &[u8]) {}

    fn error(&self, error: KafkaError, reason: &str) {
        clients::log_client_error(&error, reason);
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        clients::log_client_message(level, fac, message);
    }
}

impl ConsumerContext for RouterContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            // Hand over cleanly: everything routed so far is delivered and committed.
            let revoked: Vec<PartitionId> =
                tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect();
            if let Err(e) = commit_all(&self.deps, consumer, &self.shared, Some(&revoked)) {
                log::warn!("router: committing before a rebalance: {e}");
            }
            self.shared.lock().expect("router lock").revoked.extend(revoked);
            self.rebalanced.store(true, Ordering::Relaxed);
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let elements = tpl.elements();
            let named: Vec<(&str, i32)> = elements.iter().map(|e| (e.topic(), e.partition())).collect();
            self.join.assigned(&named);
            let assigned: Vec<PartitionId> = named.iter().map(|(t, p)| (t.to_string(), *p)).collect();
            self.shared.lock().expect("router lock").assigned.extend(assigned);
            self.rebalanced.store(true, Ordering::Relaxed);
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, _: &TopicPartitionList) {
        if let Err(e) = result {
            log::warn!("router: committing input offsets: {e}");
        }
    }
}

/// Flushes the producer, then commits synchronously every routed offset (of
/// `only`, if given; the other partitions' offsets stay pending).
fn commit_all<C: ConsumerContext>(
    deps: &RouterDeps,
    consumer: &BaseConsumer<C>,
    shared: &Mutex<Shared>,
    only: Option<&[PartitionId]>,
) -> Result<(), KafkaLayerError> {
    deps.producer.flush(FLUSH_TIMEOUT).context(|| "router: flushing slice records".into())?;
    if let Some(f) = deps.producer.context().failure() {
        return Err(KafkaLayerError::Topology(format!("router: {f}")));
    }
    let chosen =
        |(topic, partition): &PartitionId| only.is_none_or(|o| o.iter().any(|(t, p)| t == topic && p == partition));
    let mut shared = shared.lock().expect("router lock");
    let mut latest = Pending::new();
    // Oldest first, so the newest offset of each partition wins.
    let Shared { pending, candidates, .. } = &mut *shared;
    for offsets in candidates.iter_mut().map(|c| &mut c.offsets).chain(std::iter::once(pending)) {
        offsets.retain(|id, next| {
            if chosen(id) {
                latest.insert(id.clone(), *next);
            }
            !chosen(id)
        });
    }
    drop(shared);
    commit_offsets(consumer, &latest, CommitMode::Sync)
}

/// Moves the pending offsets into a new candidate, then commits (without
/// waiting) the newest offsets of every candidate whose records are all acknowledged.
fn commit_acknowledged<C: ConsumerContext>(
    deps: &RouterDeps,
    consumer: &BaseConsumer<C>,
    shared: &Mutex<Shared>,
    new_candidate: bool,
) -> Result<(), KafkaLayerError> {
    let counts = deps.producer.context().counts();
    let mut latest = Pending::new();
    {
        let mut s = shared.lock().expect("router lock");
        if new_candidate && !s.pending.is_empty() {
            let offsets = std::mem::take(&mut s.pending);
            s.candidates.push_back(Candidate { offsets, mark: counts.mark(None) });
        }
        while s.candidates.front().is_some_and(|c| counts.reached(&c.mark)) {
            let c = s.candidates.pop_front().expect("a candidate");
            latest.extend(c.offsets);
        }
    }
    if latest.is_empty() {
        return Ok(());
    }
    // Checked after the acknowledgements: a failed record before them shows here.
    if let Some(f) = deps.producer.context().failure() {
        return Err(KafkaLayerError::Topology(format!("router: {f}")));
    }
    commit_offsets(consumer, &latest, CommitMode::Async)
}

fn commit_offsets<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    offsets: &Pending,
    mode: CommitMode,
) -> Result<(), KafkaLayerError> {
    if offsets.is_empty() {
        return Ok(());
    }
    let mut tpl = TopicPartitionList::new();
    for ((topic, partition), next) in offsets {
        tpl.add_partition_offset(topic, *partition, Offset::Offset(*next))
            .context(|| "router: building the offsets to commit".into())?;
    }
    consumer.commit(&tpl, mode).context(|| "router: committing input offsets".into())
}

/// A buffered input record, read once: its slice and event time, or why
/// it cannot be read.
struct Read<'c> {
    msg: BorrowedMessage<'c>,
    target: Result<(u32, Reading), InvalidRecord>,
    /// Its place in the routing order (see [`Lane::order_time`]).
    order: i64,
}

impl Read<'_> {
    /// Its place in the routing order: an unreadable record goes at once
    /// (to the dead letters; it holds nothing back).
    fn time(&self) -> i64 {
        if self.target.is_ok() { self.order } else { i64::MIN }
    }
}

/// One input partition's buffered records, in offset order.
struct Lane<'c> {
    records: VecDeque<Read<'c>>,
    /// Event time of the last readable record read from the partition
    /// (outliers left out, see [`Lane::order_time`]).
    last_timestamp: Option<i64>,
    /// Outliers read in a row since the last ordinary record.
    outliers: u32,
    /// When a record last arrived (or the lane was assigned).
    last_arrival: Instant,
    /// The consumer reported the end of the partition after the last record.
    at_end: bool,
    paused: bool,
    /// The largest routing time (outliers left out) of a record routed from
    /// the partition: the progress announced for it.
    routed_max: Option<i64>,
    /// Records routed to the slices from the partition.
    routed: u64,
    /// Unreadable records sent from the partition to the dead letters.
    dead_lettered: u64,
}

impl Lane<'_> {
    fn new() -> Self {
        Lane {
            records: VecDeque::new(),
            last_timestamp: None,
            outliers: 0,
            last_arrival: Instant::now(),
            at_end: false,
            paused: false,
            routed_max: None,
            routed: 0,
            dead_lettered: 0,
        }
    }

    /// What to announce of this lane: its progress and whether it is idle
    /// (`None`: nothing routed yet and not idle — nothing to say).
    fn progress(&self, now: Instant, idle_after: Duration) -> Option<(u64, bool)> {
        // A partition whose every record so far was unreadable (dead-lettered
        // here) has no time to announce, and holding the slices at its start
        // would stop them all while its producer keeps writing such records:
        // with nothing buffered it is idle until a readable record comes.
        let unreadable_only = self.routed_max.is_none() && self.dead_lettered > 0;
        let idle = self.records.is_empty()
            && ((self.at_end && now.duration_since(self.last_arrival) >= idle_after) || unreadable_only);
        let time = self.routed_max.map(|t| u64::try_from(t).unwrap_or(0));
        match (time, idle) {
            (None, false) => None,
            (time, idle) => Some((time.unwrap_or(0), idle)),
        }
    }

    /// Where a readable record at event time `time` goes in the routing
    /// order, and takes it into the lane's progress. An *outlier* — more
    /// than `jump` (input.max_clock_jump) ahead of, or behind, the
    /// partition's last time (before it has one: `latest`, the time last
    /// read from any partition) — is a broken clock until `confirmations`
    /// come in a row (input.jump_confirmations: the stream resumed after a
    /// gap). It is routed in place (ahead: at the partition's last time, or
    /// at once before it has one) and is not the partition's progress:
    /// ordered by a time in the year 3000 it would wait until every other
    /// partition had been read to its end, and taken as progress it would
    /// tell the router that its partition had nothing older to deliver —
    /// either way the records behind it would reach their slices late. Its slice judges it (a time
    /// jump is dead-lettered there). The router's very first record has
    /// nothing to be measured against: it goes first, whatever its time,
    /// and is only `latest` until records confirm another.
    fn order_time(&mut self, time: i64, latest: &mut Option<i64>, jump: i64, confirmations: u32) -> i64 {
        let Some(last) = self.last_timestamp.or(*latest) else {
            *latest = Some(time);
            return i64::MIN;
        };
        let outlier = time.abs_diff(last) > jump.unsigned_abs();
        if outlier && self.outliers + 1 < confirmations.max(1) {
            self.outliers += 1;
            // Ahead: where its own partition is — at once if it has no time
            // yet (another partition's time may be far ahead of this one's:
            // placed there, it would hold back the records behind it).
            return if time > last { self.last_timestamp.unwrap_or(i64::MIN) } else { time };
        }
        self.outliers = 0;
        self.last_timestamp = Some(time);
        *latest = Some(time);
        time
    }

    /// An empty lane may still deliver a record older than every buffered
    /// one: it holds back a record at `next` ms more than `tolerance` ms
    /// newer than its own last record.
    fn holds_back(&self, now: Instant, next: i64, tolerance: i64) -> bool {
        self.records.is_empty()
            && !self.at_end
            && now.duration_since(self.last_arrival) < MAX_WAIT
            && self.last_timestamp.is_none_or(|last| next > last.saturating_add(tolerance))
    }
}

/// The router loop; returns when `stop` is set (after a final commit) or on a fatal error.
pub fn run(deps: Arc<RouterDeps>, stop: Arc<AtomicBool>) -> Result<(), KafkaLayerError> {
    super::name_thread("dedupd-router");
    let shared = Arc::new(Mutex::new(Shared::default()));
    let id = &deps.cfg.settings.app.id;
    let group = format!("{id}.router");
    let join = JoinWatch::new(&deps.cfg, "router", &group);
    let mut config = clients::input_group_consumer(&deps.cfg, &group, &format!("{id}-router"));
    config.set("enable.partition.eof", "true");
    if config.get("queued.min.messages").is_none() {
        config.set("queued.min.messages", PREFETCH);
    }
    let consumer: BaseConsumer<RouterContext> = config
        .create_with_context(RouterContext {
            deps: deps.clone(),
            shared: shared.clone(),
            join,
            rebalanced: AtomicBool::new(false),
        })
        .context(|| "creating the router consumer".into())?;
    let topics: Vec<&str> = deps.cfg.settings.input.topics.iter().map(String::as_str).collect();
    consumer.subscribe(&topics).context(|| format!("subscribing to {topics:?}"))?;
    log::info!("router: reading {topics:?} into {}", deps.cfg.slice_topic());
    consumer.context().join.joining(&topics);
    let mut lanes: BTreeMap<PartitionId, Lane<'_>> = BTreeMap::new();
    let mut last_candidate = Instant::now();
    // Local copies, flushed once per turn of the loop (see `Observer`).
    let received = deps.metrics.stage("router_received").local();
    let sent = deps.metrics.stage("router_sent").local();
    // Per input topic, found by a scan (a handful of topics): no label lookup per record.
    let mut input_counters: Vec<(String, prometheus::IntCounter)> = Vec::new();
    let mut last_commit_check = Instant::now();
    let jump = i64::try_from(deps.cfg.order.max_clock_jump_ms).unwrap_or(i64::MAX);
    // The time last read from any partition (outliers left out): what a
    // partition's first record is measured against.
    let mut latest: Option<i64> = None;
    let mut last_progress = Instant::now();
    let mut announced: Vec<(PartitionId, Announced)> = Vec::new();
    let mut all_partitions = input_partitions(&consumer, &topics, &[]);
    let result = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        // One wait, then whatever librdkafka already holds (up to
        // POLL_BATCH), handled with one reading of the clocks and one
        // routing pass: per record these cost as much as reading the record.
        let mut polled = consumer.poll(Duration::from_millis(10));
        let now = Instant::now();
        let wall_ms = now_ms();
        consumer.context().join.tick(now);
        let mut taken = 0;
        loop {
            // Before each polled event: the rebalance callbacks ran inside
            // the poll, and the end-of-partition event of a partition just
            // assigned (at its end) must find its lane — or it would never be
            // announced idle, and hold every slice until the bound.
            let reassigned = consumer.context().rebalanced.swap(false, Ordering::Relaxed) && {
                let mut s = shared.lock().expect("router lock");
                let changed = !s.revoked.is_empty() || !s.assigned.is_empty();
                for gone in s.revoked.drain(..) {
                    lanes.remove(&gone);
                }
                for new in s.assigned.drain(..) {
                    lanes.entry(new).or_insert_with(Lane::new);
                }
                changed
            };
            if reassigned {
                // Partitions may have been added; and the new owner says what
                // it knows before it routes anything.
                all_partitions = input_partitions(&consumer, &topics, &all_partitions);
                last_progress = now.checked_sub(PROGRESS_EVERY).unwrap_or(now);
            }
            let Some(event) = polled.take() else { break };
            match event {
                Ok(msg) => {
                    // Read once: librdkafka looks the name up and Rust checks its UTF-8 on each ask.
                    let (topic, partition) = (msg.topic(), msg.partition());
                    match input_counters.iter().find(|(t, _)| t == topic) {
                        Some((_, c)) => c.inc(),
                        None => {
                            let c = deps.metrics.input_counter(topic);
                            c.inc();
                            input_counters.push((topic.to_string(), c));
                        }
                    }
                    observe_since(&received, msg.timestamp().to_millis(), wall_ms);
                    let target = read(&deps, &msg);
                    // A handful of lanes: a scan finds one without allocating its key.
                    let lane = match lanes.iter_mut().find(|((t, p), _)| t == topic && *p == partition) {
                        Some((_, lane)) => lane,
                        None => lanes.entry((topic.to_string(), partition)).or_insert_with(Lane::new),
                    };
                    lane.last_arrival = now;
                    let order = match target {
                        Ok((_, r)) => {
                            lane.order_time(event_time(&r), &mut latest, jump, deps.cfg.order.jump_confirmations)
                        }
                        Err(_) => i64::MIN,
                    };
                    lane.at_end = false;
                    if lane.records.len() + 1 >= MAX_BUFFERED && !lane.paused {
                        lane.paused = set_paused(&consumer, topic, partition, true);
                    }
                    lane.records.push_back(Read { msg, target, order });
                }
                // The event names only the partition: with several input topics it
                // marks that partition of each (at worst routing a little out of order).
                Err(KafkaError::PartitionEOF(p)) => {
                    for lane in lanes.iter_mut().filter(|((_, q), _)| *q == p).map(|(_, l)| l) {
                        lane.at_end = true;
                    }
                }
                Err(e) => log::warn!("router: consuming: {e}"),
            }
            taken += 1;
            if taken < POLL_BATCH {
                polled = consumer.poll(Duration::ZERO);
            }
        }
        if now.duration_since(last_progress) >= PROGRESS_EVERY {
            last_progress = now;
            // What the router holds, for the memory it takes (the soak reads them).
            deps.metrics.router_buffered.set(lanes.values().map(|l| l.records.len() as i64).sum());
            for lane in lanes.values_mut() {
                if let Some(to) = shrink_target(lane.records.len(), lane.records.capacity()) {
                    lane.records.shrink_to(to);
                }
            }
            deps.metrics.router_producer_queue.set(i64::from(deps.producer.in_flight_count()));
            if let Err(e) = announce(&deps, &lanes, &all_partitions, now, &mut announced) {
                break Err(e);
            }
        }
        let routed = route_ready(&deps, &consumer, &shared, &mut lanes, now, wall_ms, &sent);
        received.flush();
        sent.flush();
        if let Err(e) = routed {
            break Err(e);
        }
        // Acknowledgements are looked at every few milliseconds, not per record.
        if now.duration_since(last_commit_check) >= COMMIT_CHECK_EVERY {
            last_commit_check = now;
            let new_candidate = now.duration_since(last_candidate) >= COMMIT_EVERY;
            if new_candidate {
                last_candidate = now;
            }
            if let Err(e) = commit_acknowledged(&deps, &consumer, &shared, new_candidate) {
                break Err(e);
            }
        }
    };
    drop(lanes);
    if result.is_ok() {
        commit_all(&deps, &consumer, &shared, None)?;
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
    lanes: &mut BTreeMap<PartitionId, Lane<'_>>,
    now: Instant,
    wall_ms: i64,
    sent: &LocalHistogram,
) -> Result<(), KafkaLayerError> {
    let mut routed: Vec<(usize, i64)> = Vec::new();
    let tolerance = i64::try_from(deps.cfg.order_tolerance_ms).unwrap_or(i64::MAX);
    let mut frame = Vec::new();
    // Shared mode: the records routed are named, not copied (see `write_read_order`).
    let mut named = (deps.cfg.slicing == SlicingMode::Shared).then(|| ReadOrderBuilder::at(0));
    let result = loop {
        let next = lanes.values().enumerate().filter_map(|(i, l)| l.records.front().map(|r| (r.time(), i))).min();
        let Some((timestamp, index)) = next else {
            break Ok(());
        };
        if lanes.values().any(|l| l.holds_back(now, timestamp, tolerance)) {
            break Ok(());
        }
        let (id, lane) = lanes.iter_mut().nth(index).expect("lane exists");
        let Read { msg, target, order } = lane.records.pop_front().expect("non-empty lane");
        if target.is_ok() {
            lane.routed += 1;
            if order != i64::MIN {
                lane.routed_max = Some(lane.routed_max.map_or(order, |m| m.max(order)));
            }
        } else {
            lane.dead_lettered += 1;
        }
        if lane.paused && lane.records.len() < MAX_BUFFERED / 2 {
            lane.paused = set_paused(consumer, &id.0, id.1, false);
        }
        let done = match (named.as_mut(), target) {
            (Some(names), Ok(_)) => {
                names.push(&id.0, msg.partition(), msg.offset());
                if names.next_position() >= READ_ORDER_RECORDS { write_read_order(deps, names) } else { Ok(()) }
            }
            (_, target) => route(deps, &msg, &id.0, target, &mut frame),
        };
        if let Err(e) = done {
            break Err(e);
        }
        observe_since(sent, msg.timestamp().to_millis(), wall_ms);
        match routed.last_mut() {
            Some((i, next)) if *i == index => *next = msg.offset() + 1,
            _ => routed.push((index, msg.offset() + 1)),
        }
    };
    // Written before the offsets become pending: a commit waits for its acknowledgement.
    let result = match (result, named.as_mut()) {
        (Ok(()), Some(names)) => write_read_order(deps, names),
        (result, _) => result,
    };
    if !routed.is_empty() {
        let ids: Vec<&PartitionId> = lanes.keys().collect();
        let mut s = shared.lock().expect("router lock");
        for (index, next) in routed {
            s.pending.insert(ids[index].clone(), next);
        }
    }
    result
}
/// Shared mode: writes what `names` gathered as one read-order record to
/// the slice log (partition 0, the one slice), by the producer that writes
/// the router's progress after it, and starts a new one. The slice judges
/// the records it names, in its order, re-reading them from the input: the
/// records themselves are not copied.
fn write_read_order(deps: &RouterDeps, names: &mut ReadOrderBuilder) -> Result<(), KafkaLayerError> {
    let record = std::mem::replace(names, ReadOrderBuilder::at(0)).take();
    if record.is_empty() {
        return Ok(());
    }
    produce_control(&deps.producer, &deps.slice_topic, 0, headers::READ_ORDER, &record.encode())
}

/// What was announced of a partition: time, idle, owned, and how many
/// records had been routed from it — a record routed from a partition
/// announced idle clears the mark in its slice, so the next idle
/// announcement must go out even if it says the same as the last.
type Announced = (u64, bool, bool, u64);

/// Announces the progress of the owned input partitions to every slice
/// partition, if it changed since `announced` (the last announcement).
/// Written after the records it covers, by the same producer, so each
/// slice sees it after them.
fn announce(
    deps: &RouterDeps,
    lanes: &BTreeMap<PartitionId, Lane<'_>>,
    all: &[PartitionId],
    now: Instant,
    announced: &mut Vec<(PartitionId, Announced)>,
) -> Result<(), KafkaLayerError> {
    let idle_after = IDLE_AFTER.max(Duration::from_millis(deps.cfg.order.lateness_ms));
    // The owned partitions with something to say, then every other input
    // partition as only existing (see `Progress::owned`).
    let mut current: Vec<(&PartitionId, Announced)> = lanes
        .iter()
        .filter_map(|(id, lane)| {
            lane.progress(now, idle_after).map(|(time, idle)| (id, (time, idle, true, lane.routed)))
        })
        .collect();
    for id in all {
        if !current.iter().any(|(c, _)| *c == id) {
            current.push((id, (0, false, false, 0)));
        }
    }
    let same = current.len() == announced.len()
        && current.iter().zip(announced.iter()).all(|(a, b)| *a.0 == b.0 && a.1 == b.1);
    if same {
        return Ok(());
    }
    let entries: Vec<Progress<'_>> = current
        .iter()
        .map(|((topic, partition), (time_ms, idle, owned, _))| Progress {
            topic,
            partition: *partition,
            time_ms: *time_ms,
            idle: *idle,
            owned: *owned,
        })
        .collect();
    let payload = Progress::encode(&entries);
    for slice in 0..deps.slices {
        produce_control(&deps.producer, &deps.slice_topic, slice as i32, headers::PROGRESS, &payload)?;
    }
    *announced = current.into_iter().map(|(id, p)| (id.clone(), p)).collect();
    Ok(())
}

/// Every partition of the input topics, from the broker's metadata
/// (`known` if it cannot be had: a degraded announcement, not an error).
fn input_partitions<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topics: &[&str],
    known: &[PartitionId],
) -> Vec<PartitionId> {
    let mut all = Vec::new();
    for topic in topics {
        match consumer.fetch_metadata(Some(topic), Duration::from_secs(5)) {
            Ok(md) => {
                for t in md.topics() {
                    all.extend(t.partitions().iter().map(|p| (t.name().to_string(), p.id())));
                }
            }
            Err(e) => {
                log::info!(
                    "router: the partitions of {topic} are unknown for now ({e}); only owned ones are announced"
                );
                return known.to_vec();
            }
        }
    }
    all
}

/// A reading's event time as the routing order takes it.
fn event_time(r: &Reading) -> i64 {
    i64::try_from(r.time_ms).unwrap_or(i64::MAX)
}

/// Reads an input record's slice, key hash and event time (once, when it
/// arrives; the slice takes the reading from the frame).
fn read(deps: &RouterDeps, msg: &BorrowedMessage<'_>) -> Result<(u32, Reading), InvalidRecord> {
    // Only a key read from a header needs the header list (librdkafka
    // parses it on each ask).
    let header_list: Vec<(&str, &[u8])> = match deps.extractor.key {
        KeySpec::Header(_) => {
            msg.headers().map(|h| h.iter().map(|h| (h.key, h.value.unwrap_or_default())).collect()).unwrap_or_default()
        }
        _ => Vec::new(),
    };
    let view = RecordView {
        key: msg.key(),
        payload: msg.payload().unwrap_or_default(),
        headers: &header_list,
        timestamp_ms: msg.timestamp().to_millis(),
    };
    let x = deps.extractor.extract(&view, 0)?;
    let hash = KeyHash::of(deps.seed, &x.key);
    Ok((hash.slice(deps.slices), Reading { seed: deps.seed, hash, time_ms: x.time_ms }))
}

/// Sends one input record of `topic` to its slice, or to the dead-letter
/// topic. `frame` is a buffer for the slice record's value (reused).
fn route(
    deps: &RouterDeps,
    msg: &BorrowedMessage<'_>,
    topic: &str,
    target: Result<(u32, Reading), InvalidRecord>,
    frame: &mut Vec<u8>,
) -> Result<(), KafkaLayerError> {
    match target {
        Ok((slice, reading)) => {
            // The stamp goes in front of the payload (see `FRAME_MAGIC`). The
            // input record's own `dedupd.*` headers are not copied
            // (`produce_with`): a slice never takes one for a stamp, a
            // progress record or a delete request, and none reaches an output.
            let reading = deps.hands_on_reading.then_some(&reading);
            frame_into(frame, topic, msg.partition(), msg.offset(), reading, msg.payload()).ok_or_else(|| {
                // Input topics are named in `input.topics`, which allows no longer name.
                KafkaLayerError::Topology(format!("input topic {topic:?} has a name longer than Kafka allows"))
            })?;
            produce_with(&deps.producer, &deps.slice_topic, slice as i32, msg, Some(frame), &[], &[])
        }
        Err(why) => {
            let mut buf = [0u8; STAMP_BYTES];
            deps.metrics.dead_letters.with_label_values(&[why.reason.as_str()]).inc();
            let partition = msg.partition().rem_euclid(deps.slices as i32);
            let mut extra =
                vec![(headers::REASON, why.reason.as_str().as_bytes()), (headers::DETAIL, why.detail.as_bytes())];
            if let Some(stamp) = SourceRef::stamp(&mut buf, topic, msg.partition(), msg.offset()) {
                extra.push((headers::SOURCE, stamp));
            }
            produce_copy(&deps.producer, &deps.cfg.settings.output.dead_letter_topic, partition, msg, &extra)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_lane_holds_back_only_records_beyond_the_tolerance() {
        let now = Instant::now();
        let mut lane = Lane::new();
        // Nothing read yet: it may deliver anything, so it holds everything back.
        assert!(lane.holds_back(now, 1_000, 1_000));
        lane.last_timestamp = Some(10_000);
        assert!(!lane.holds_back(now, 11_000, 1_000), "within the tolerance");
        assert!(lane.holds_back(now, 11_001, 1_000), "beyond it");
        assert!(lane.holds_back(now, 10_001, 0), "strict order");
        assert!(!lane.holds_back(now, 10_000, 0));
        // At its end, or silent for longer than MAX_WAIT, it holds nothing back.
        lane.at_end = true;
        assert!(!lane.holds_back(now, 99_999, 0));
        lane.at_end = false;
        assert!(!lane.holds_back(lane.last_arrival + MAX_WAIT, 99_999, 0));
    }

    /// A lane says nothing before it has routed a record or is idle; it is
    /// idle only at its end, empty, and silent for `IDLE_AFTER`.
    #[test]
    fn a_lane_announces_its_routed_time_and_idleness() {
        let mut lane = Lane::new();
        let t0 = lane.last_arrival;
        assert_eq!(lane.progress(t0, IDLE_AFTER), None);
        lane.at_end = true;
        assert_eq!(lane.progress(t0, IDLE_AFTER), None, "at its end, but not silent for long");
        assert_eq!(lane.progress(t0 + IDLE_AFTER, IDLE_AFTER), Some((0, true)), "an empty partition");
        lane.routed_max = Some(1_700);
        assert_eq!(lane.progress(t0 + IDLE_AFTER, IDLE_AFTER), Some((1_700, true)));
        lane.at_end = false;
        assert_eq!(lane.progress(t0 + IDLE_AFTER * 10, IDLE_AFTER), Some((1_700, false)), "not at its end: never idle");
        // Only unreadable records so far, none buffered: idle, so a producer
        // of bad records cannot hold every slice at this partition's start.
        let mut bad = Lane::new();
        bad.dead_lettered = 3;
        assert_eq!(bad.progress(t0, IDLE_AFTER), Some((0, true)));
    }

    #[test]
    fn an_outlier_is_routed_in_place_until_confirmed() {
        let y3k = 32_503_680_000_000;
        // The router's very first record goes first, whatever its time, and
        // is not its partition's progress (the partition still holds others back).
        let (mut first, mut latest) = (Lane::new(), None);
        assert_eq!(first.order_time(y3k, &mut latest, 60_000, 3), i64::MIN);
        assert_eq!((first.last_timestamp, latest), (None, Some(y3k)));
        assert!(first.holds_back(Instant::now(), 1_000_000, 0));
        // The others are measured against it until three in a row confirm theirs.
        assert_eq!(first.order_time(1_000_000, &mut latest, 60_000, 3), 1_000_000);
        assert_eq!(first.order_time(1_000_010, &mut latest, 60_000, 3), 1_000_010);
        assert_eq!((first.last_timestamp, latest), (None, Some(y3k)));
        assert_eq!(first.order_time(1_000_020, &mut latest, 60_000, 3), 1_000_020);
        assert_eq!((first.last_timestamp, latest), (Some(1_000_020), Some(1_000_020)));

        // The first record of a partition is measured against the other
        // partitions; ahead of them, it goes at once (its partition has no
        // place yet; another's may be far ahead).
        let mut lane = Lane::new();
        let mut latest = Some(1_000_500);
        assert_eq!(lane.order_time(y3k, &mut latest, 60_000, 3), i64::MIN);
        assert_eq!(lane.order_time(1_000_000, &mut latest, 60_000, 3), 1_000_000);
        assert_eq!(lane.order_time(1_000_040, &mut latest, 60_000, 3), 1_000_040);
        // A year-3000 record goes where the partition is; it is not its progress.
        assert_eq!(lane.order_time(y3k, &mut latest, 60_000, 3), 1_000_040);
        assert_eq!((lane.last_timestamp, latest), (Some(1_000_040), Some(1_000_040)));
        assert_eq!(lane.order_time(1_000_045, &mut latest, 60_000, 3), 1_000_045);
        // Far behind: routed at once, and not the partition's progress either.
        assert_eq!(lane.order_time(0, &mut latest, 60_000, 3), 0);
        assert_eq!(lane.last_timestamp, Some(1_000_045));
        assert_eq!(lane.order_time(1_000_050, &mut latest, 60_000, 3), 1_000_050);
        // Three in a row: the stream jumped.
        assert_eq!(lane.order_time(9_000_000, &mut latest, 60_000, 3), 1_000_050);
        assert_eq!(lane.order_time(9_000_010, &mut latest, 60_000, 3), 1_000_050);
        assert_eq!(lane.order_time(9_000_020, &mut latest, 60_000, 3), 9_000_020);
        assert_eq!(lane.order_time(9_000_030, &mut latest, 60_000, 3), 9_000_030);
        assert_eq!((lane.last_timestamp, latest), (Some(9_000_030), Some(9_000_030)));
    }
}
