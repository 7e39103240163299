//! Repartition mode's first stage: input records → `<app>.slices`,
//! partition `H_S(key)`, unchanged (key, payload, timestamp, headers) but
//! for a stamp with the input topic/partition/offset in front of the payload
//! ([`crate::engine::slice::FRAME_MAGIC`]), and without the headers named
//! `dedupd.*` (reserved to dedupd: [`super::headers`]). When the slice log
//! holds read orders ([`super::slice_log::Holds`]) it copies nothing: each
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
//! Flink's; deterministic because they travel in the slice log). In a
//! rebalance every partition the router owns is announced not idle first
//! (`progress::hold`): records written to one while librdkafka pauses it,
//! or before its new owner reads it, are waited for.
//!
//! Buffered records are the consumer's own messages, held until routed (no
//! copy); a partition is paused (which drops librdkafka's prefetched records
//! of it) only when it runs far ahead of the others.
//!
//! Files of this folder, from the bottom up (a file imports only files
//! above it in this list): `setup.rs` ([`RouterSetup`]), `commits.rs` (the
//! offsets committed once acknowledged), `lanes.rs` (one buffer per input
//! partition), `route.rs` (reading and routing a record), `progress.rs`
//! (the progress records), `context.rs` (the consumer's rebalance
//! callbacks). This file holds the loop: poll, buffer each record in its
//! lane, announce progress, route what is ready, commit what is acknowledged.

mod commits;
mod context;
mod lanes;
mod progress;
mod route;
mod setup;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::local::LocalHistogram;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;

use super::join::JoinWatch;
use super::{Context, KafkaLayerError, clients};
use crate::engine::shrink_target;
use crate::features::shared::handoff::Handing;
use crate::kafka::consumed::{BatchQueue, Consumed, KeptRecord, end_of_partition, error_of};
use crate::kafka::out_record::OutHeaders;
use crate::kafka::statistics::InputLag;
use crate::metrics::{now_ms, observe_since};
use commits::{COMMIT_CHECK_EVERY, COMMIT_EVERY, CommitBook, commit_acknowledged, commit_at_stop};
use context::RouterContext;
use lanes::{Full, Lane, Read, pause_at, resume_at_end};
use progress::{Announced, PROGRESS_EVERY, announce, input_partitions};
use route::{event_time, read, route_ready};
use setup::PartitionId;
pub use setup::RouterSetup;

/// Records taken from the consumer per turn of the router loop.
const POLL_BATCH: usize = 512;
/// How long a turn waits for records when there are none.
const RECORDS_WAIT: Duration = Duration::from_millis(10);
/// The router consumer's prefetch per partition, unless set in `[kafka]`.
const PREFETCH: &str = "20000";

/// Runs the router ([`run`]); when its producer fails — an idempotence
/// error that leaves it unusable, such as the test broker's out-of-order
/// sequence (docs/dev/broker.md, finding 12) — starts it again with a new
/// producer and a new consumer from the committed input positions. That is
/// what a restart of the process does, without stopping the slices: the
/// records sent again are dropped by the slices as exact re-sends
/// (docs/design.md, invariant 3). Waits 1 s before the first new start,
/// doubling up to 30 s while it fails again within a minute. Any other error
/// ends it, as does `stop`.
pub fn run_restarting(
    mut make: impl FnMut() -> Result<Arc<RouterSetup>, KafkaLayerError>,
    stop: Arc<AtomicBool>,
) -> Result<(), KafkaLayerError> {
    let mut backoff = RESTART_FIRST;
    loop {
        let setup = make()?;
        let started = Instant::now();
        let failed = match run(setup.clone(), stop.clone()) {
            Err(e) if !stop.load(Ordering::Relaxed) && producer_failed(&setup) => e,
            result => return result,
        };
        if started.elapsed() > RESTART_CALM {
            backoff = RESTART_FIRST;
        }
        log::error!(
            "router: its producer failed ({failed}); starting the router again in {backoff:?} with a new producer, from \
             the committed input positions (the slices drop what it sends again)"
        );
        setup.metrics.router.router_restarts.inc();
        drop(setup);
        let until = Instant::now() + backoff;
        while Instant::now() < until {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        backoff = (backoff * 2).min(RESTART_MOST);
    }
}

/// The first wait before the router starts again after its producer failed.
const RESTART_FIRST: Duration = Duration::from_secs(1);
/// The longest wait.
const RESTART_MOST: Duration = Duration::from_secs(30);
/// A router that ran this long before failing starts again after [`RESTART_FIRST`].
const RESTART_CALM: Duration = Duration::from_secs(60);

/// Whether the router's producer can send no more: a delivery failed (the
/// output producer is gapless: one failure is final) or librdkafka raised a
/// fatal error.
fn producer_failed(setup: &RouterSetup) -> bool {
    setup.producer.context().failure().is_some() || setup.producer.client().fatal_error().is_some()
}

/// The router loop; returns when `stop` is set (after a final commit) or on a fatal error.
pub fn run(setup: Arc<RouterSetup>, stop: Arc<AtomicBool>) -> Result<(), KafkaLayerError> {
    super::name_thread("dedupd-router");
    let book = Arc::new(Mutex::new(CommitBook::default()));
    let consumer = subscribe(&setup, &book)?;
    // Before the first poll: the rebalances run inside it and forward the
    // partitions they assign here.
    let mut records = BatchQueue::new(consumer.client());
    *consumer.context().records_to.lock().expect("router lock") = Some(records.target());
    let mut router = Router::new(&setup, &consumer);
    book.lock().expect("router lock").input_partitions.clone_from(&router.all_partitions);
    let result = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        if let Err(e) = router.turn(&consumer, &mut records, &book) {
            break Err(e);
        }
    };
    drop(router);
    // Gone before the consumer (librdkafka waits for its queues to go).
    *consumer.context().records_to.lock().expect("router lock") = None;
    drop(records);
    if result.is_ok() {
        commit_at_stop(&setup, &consumer, &book)?;
    }
    drop(consumer);
    result
}

/// The router consumer, subscribed to the input topics.
fn subscribe(
    setup: &Arc<RouterSetup>,
    book: &Arc<Mutex<CommitBook>>,
) -> Result<BaseConsumer<RouterContext>, KafkaLayerError> {
    let id = &setup.cfg.settings.app.id;
    let group = format!("{id}.router");
    let join = JoinWatch::new(&setup.cfg, "router", &group);
    let mut config = clients::input_group_consumer(&setup.cfg, &group, &format!("{id}-router"));
    config.set("enable.partition.eof", "true");
    if config.get("queued.min.messages").is_none() {
        config.set("queued.min.messages", PREFETCH);
    }
    // Statistics feed the input-lag gauge.
    config.set(clients::STATISTICS_INTERVAL, clients::statistics_interval(&setup.cfg, 2000));
    let input_lag = InputLag::new(setup.cfg.settings.input.topics.clone(), &setup.cfg, &setup.metrics);
    let context = RouterContext {
        setup: setup.clone(),
        book: book.clone(),
        join,
        rebalanced: AtomicBool::new(false),
        input_lag,
        records_to: Mutex::new(None),
    };
    let consumer: BaseConsumer<RouterContext> =
        config.create_with_context(context).context(|| "creating the router consumer".into())?;
    let topics: Vec<&str> = setup.cfg.settings.input.topics.iter().map(String::as_str).collect();
    consumer.subscribe(&topics).context(|| format!("subscribing to {topics:?}"))?;
    log::info!("router: reading {topics:?} into {}", setup.cfg.slice_topic());
    consumer.context().join.joining(&topics);
    Ok(consumer)
}

/// The router loop's state between turns; `'c`: the consumer its buffered
/// records belong to.
struct Router<'c> {
    setup: Arc<RouterSetup>,
    topics: Vec<String>,
    lanes: BTreeMap<PartitionId, Lane<'c>>,
    /// Every partition of the input topics (announced as existing).
    all_partitions: Vec<PartitionId>,
    /// The time last read from any partition (outliers left out): what a
    /// partition's first record is measured against.
    latest: Option<i64>,
    /// `input.max_clock_jump`, in ms.
    jump: i64,
    /// Per input topic, found by a scan (a handful of topics): no label lookup per record.
    input_counters: Vec<(String, prometheus::IntCounter)>,
    last_candidate: Instant,
    last_commit_check: Instant,
    last_progress: Instant,
    announced: Vec<(PartitionId, Announced)>,
    /// Local copies, flushed once per turn of the loop (see `Observer`).
    received: LocalHistogram,
    sent: LocalHistogram,
}

impl<'c> Router<'c> {
    fn new(setup: &Arc<RouterSetup>, consumer: &BaseConsumer<RouterContext>) -> Self {
        let topics: Vec<String> = setup.cfg.settings.input.topics.clone();
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        let now = Instant::now();
        Router {
            setup: setup.clone(),
            all_partitions: input_partitions(consumer, &names, &[]),
            topics,
            lanes: BTreeMap::new(),
            latest: None,
            jump: i64::try_from(setup.cfg.order.max_clock_jump_ms).unwrap_or(i64::MAX),
            input_counters: Vec::new(),
            last_candidate: now,
            last_commit_check: now,
            last_progress: now,
            announced: Vec::new(),
            received: setup.metrics.stage("router_received").local(),
            sent: setup.metrics.stage("router_sent").local(),
        }
    }

    /// One turn: one wait, then whatever librdkafka already holds (up to
    /// [`POLL_BATCH`]), handled with one reading of the clocks and one
    /// routing pass: per record these cost as much as reading the record.
    /// The consumer's own queue first: its poll runs the rebalance
    /// callbacks, and it brings the records fetched before their partition
    /// was forwarded (older than any in the records queue); then the
    /// records queue, a batch at a time.
    fn turn(
        &mut self,
        consumer: &'c BaseConsumer<RouterContext>,
        records: &mut BatchQueue,
        book: &Mutex<CommitBook>,
    ) -> Result<(), KafkaLayerError> {
        let mut polled = consumer.poll(Duration::ZERO);
        // Shared mode: while the slice of this process has not caught up
        // with the records handed to it, none is taken from the consumer
        // (`features/shared/handoff.rs`).
        let waiting = self.setup.handoff.as_ref().is_some_and(|h| h.handing(Instant::now()) == Handing::Wait);
        if polled.is_none() {
            self.take_rebalance(consumer, records, book, Instant::now());
            match self.setup.handoff.as_ref().filter(|_| waiting) {
                Some(handoff) => handoff.wait(RECORDS_WAIT),
                None => _ = records.ready(RECORDS_WAIT),
            }
        }
        let now = Instant::now();
        let wall_ms = now_ms();
        consumer.context().join.tick(now);
        if waiting {
            // Taking nothing, it cannot tell a quiet partition: none is
            // announced idle for the time it waited.
            self.lanes.values_mut().for_each(|lane| lane.last_arrival = now);
        }
        let mut taken = 0;
        loop {
            // Before each polled event: the rebalance callbacks ran inside
            // the poll, and the end-of-partition event of a partition just
            // assigned (at its end) must find its lane — or it would never be
            // announced idle, and hold every slice until the bound.
            self.take_rebalance(consumer, records, book, now);
            let Some(event) = polled.take() else { break };
            match event {
                Ok(msg) => self.take(consumer, records, KeptRecord::polled(msg), now, wall_ms),
                Err(e) => self.take_error(e, None),
            }
            taken += 1;
            if taken < POLL_BATCH {
                polled = consumer.poll(Duration::ZERO);
            }
        }
        while !waiting && taken < POLL_BATCH {
            let Some(msg) = records.next_kept(consumer) else { break };
            match error_of(&msg.get()) {
                None => self.take(consumer, records, msg, now, wall_ms),
                Some(e) => self.take_queued_error(e, &msg.get()),
            }
            taken += 1;
        }
        if now.duration_since(self.last_progress) >= PROGRESS_EVERY {
            self.last_progress = now;
            self.announce(now)?;
        }
        let routed = route_ready(&self.setup, consumer, book, &mut self.lanes, now, wall_ms, &self.sent);
        self.received.flush();
        self.sent.flush();
        routed?;
        self.commit(consumer, book, now)
    }

    /// Lanes of the partitions revoked go, with the records taken of them
    /// and not yet handed out (if a partition comes back, it is read from
    /// its committed offset); lanes of those assigned come.
    fn take_rebalance(
        &mut self,
        consumer: &BaseConsumer<RouterContext>,
        records: &mut BatchQueue,
        book: &Mutex<CommitBook>,
        now: Instant,
    ) {
        if !consumer.context().rebalanced.swap(false, Ordering::Relaxed) {
            return;
        }
        let mut s = book.lock().expect("router lock");
        let changed = !s.revoked.is_empty() || !s.assigned.is_empty();
        let revoked: Vec<PartitionId> = s.revoked.drain(..).collect();
        let assigned: Vec<PartitionId> = s.assigned.drain(..).collect();
        drop(s);
        for gone in &revoked {
            self.lanes.remove(gone);
        }
        // Every partition kept was paused by librdkafka meanwhile (those
        // assigned now start from their committed offsets), to resume
        // after the last record taken off the records queue: a record not
        // handed out yet counts, so it decides before the lane's last.
        // Records may have come while it was paused: its end is known again
        // only from the end of partition librdkafka reports after a pause.
        for ((topic, partition), lane) in self.lanes.iter_mut() {
            let handed_out = lane.end_offset.take();
            let end = match records.last_left_of(topic, *partition) {
                Some(left) => end_of_partition(&left),
                None => handed_out,
            };
            if let Some(end) = end {
                resume_at_end(consumer, (topic, *partition), end);
            }
            lane.at_end = false;
        }
        // Records taken of a partition revoked go; and an end taken before
        // the pause is not one now (the pin above has its offset).
        records.discard_where(|r| end_of_partition(r).is_some() || revoked.iter().any(|(t, p)| r.is_of(t, *p)));
        for new in assigned {
            self.lanes.entry(new).or_insert_with(Lane::new);
        }
        if changed {
            // Partitions may have been added.
            let names: Vec<&str> = self.topics.iter().map(String::as_str).collect();
            self.all_partitions = input_partitions(consumer, &names, &self.all_partitions);
            book.lock().expect("router lock").input_partitions.clone_from(&self.all_partitions);
        }
        // The callback announced every partition held (`progress::hold`):
        // what was announced before says nothing of what the slices know.
        // Said again now, as a new owner says what it knows before it
        // routes anything.
        self.announced.clear();
        self.last_progress = now.checked_sub(PROGRESS_EVERY).unwrap_or(now);
    }

    /// Takes a consumer error; the end of a partition marks its lane. An
    /// end taken off the records queue also names its offset (`end_offset`:
    /// the next to fetch), where the partition resumes after a rebalance.
    fn take_error(&mut self, e: KafkaError, queued: Option<(&str, i64)>) {
        match e {
            // A polled event names only the partition: with several input
            // topics it marks that partition of each (at worst routing a
            // little out of order). One off the records queue names its topic.
            KafkaError::PartitionEOF(p) => {
                let topic = queued.map(|(topic, _)| topic);
                for ((t, q), lane) in self.lanes.iter_mut() {
                    if *q == p && topic.is_none_or(|topic| topic == t) {
                        lane.at_end = true;
                        lane.end_offset = queued.map(|(_, offset)| offset).or(lane.end_offset);
                    }
                }
            }
            e => log::warn!("router: consuming: {e}"),
        }
    }

    /// Takes an error off the records queue. The consumer's poll tells its
    /// context of every error it hands out (an end of partition is logged
    /// at debug, `clients::log_client_error`); one off this queue passes the
    /// context by, so it is told here. Only an end names its topic: another
    /// error may come without one.
    fn take_queued_error(&mut self, e: KafkaError, record: &Consumed<'_>) {
        let end = end_of_partition(record).map(|end| (record.topic(), end));
        // An end of partition is logged at debug only: its line is not made per end unless shown.
        if end.is_none() || log::log_enabled!(target: "rdkafka::client", log::Level::Debug) {
            let reason = match end {
                Some((topic, end)) => format!("{topic} [{}] reached its end at offset {end}", record.partition()),
                None => format!("partition {} at offset {}", record.partition(), record.offset()),
            };
            clients::log_client_error(&e, &reason);
        }
        self.take_error(e, end);
    }

    /// Takes an input record: read once and buffered in its partition's lane.
    fn take(
        &mut self,
        consumer: &BaseConsumer<RouterContext>,
        records: &mut BatchQueue,
        kept: KeptRecord<'c>,
        now: Instant,
        wall_ms: i64,
    ) {
        let msg = kept.get();
        // Read once: librdkafka looks the name up and Rust checks its UTF-8 on each ask.
        let (topic, partition) = (msg.topic(), msg.partition());
        match self.input_counters.iter().find(|(t, _)| t == topic) {
            Some((_, c)) => c.inc(),
            None => {
                let c = self.setup.metrics.input_counter(topic);
                c.inc();
                self.input_counters.push((topic.to_string(), c));
            }
        }
        observe_since(&self.received, msg.timestamp().to_millis(), wall_ms);
        // Asked once: librdkafka parses a record's headers on each ask.
        let headers = OutHeaders::of(&msg);
        let target = read(&self.setup, &msg, headers);
        // A handful of lanes: a scan finds one without allocating its key.
        let mut lane_count = self.lanes.len();
        let lane = match self.lanes.iter_mut().find(|((t, p), _)| t == topic && *p == partition) {
            Some((_, lane)) => lane,
            None => {
                lane_count += 1;
                self.lanes.entry((topic.to_string(), partition)).or_insert_with(Lane::new)
            }
        };
        lane.last_arrival = now;
        let order = match target {
            Ok((_, r)) => {
                lane.order_time(event_time(&r), &mut self.latest, self.jump, self.setup.cfg.order.jump_confirmations)
            }
            Err(_) => i64::MIN,
        };
        lane.at_end = false;
        lane.end_offset = None;
        let max_bytes = lanes::lane_share(self.setup.cfg.budget.router, lane_count);
        let bytes = crate::kafka::record_bytes(&msg, headers);
        let has_headers = !matches!(headers, OutHeaders::None);
        if let Some(full) = lane.fills(bytes, max_bytes) {
            lane.paused = pause_at(consumer, records, (topic, partition), msg.offset() + 1);
            if full == Full::Bytes && lane.paused {
                self.setup.metrics.router.router_byte_pauses.inc();
            }
        }
        lane.push(Read { msg: kept, target, order, bytes, has_headers });
    }

    /// Announces the progress of the owned partitions if it changed, and
    /// publishes what the router holds.
    fn announce(&mut self, now: Instant) -> Result<(), KafkaLayerError> {
        let setup = &self.setup;
        // What the router holds, for the memory it takes (the soak reads them).
        setup.metrics.router.router_buffered.set(self.lanes.values().map(|l| l.records.len() as i64).sum());
        setup.metrics.router.router_buffered_bytes.set(self.lanes.values().map(|l| l.bytes as i64).sum());
        for lane in self.lanes.values_mut() {
            if let Some(to) = shrink_target(lane.records.len(), lane.records.capacity()) {
                lane.records.shrink_to(to);
            }
        }
        setup.metrics.router.router_producer_queue.set(i64::from(setup.producer.in_flight_count()));
        announce(setup, &self.lanes, &self.all_partitions, now, &mut self.announced)
    }

    /// Commits what is acknowledged; acknowledgements are looked at every
    /// few milliseconds, not per record.
    fn commit(
        &mut self,
        consumer: &BaseConsumer<RouterContext>,
        book: &Mutex<CommitBook>,
        now: Instant,
    ) -> Result<(), KafkaLayerError> {
        if now.duration_since(self.last_commit_check) < COMMIT_CHECK_EVERY {
            return Ok(());
        }
        self.last_commit_check = now;
        let new_candidate = now.duration_since(self.last_candidate) >= COMMIT_EVERY;
        if new_candidate {
            self.last_candidate = now;
        }
        commit_acknowledged(&self.setup, consumer, book, new_candidate)
    }
}
