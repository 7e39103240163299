//! The slice workers: one group consumer on the slice topic; each assigned
//! partition is a slice whose state this process owns until it is revoked.
//!
//! Ordering of the exactly-once protocol (docs/design.md, invariant 5):
//! - on assignment, a slice is restored (snapshot X, last output Y) on the
//!   restore thread while the worker goes on with its other slices; its
//!   partition joins the consumer's assignment only once restored, at X
//!   (when the settings decide its records while it is restored, it joins
//!   earlier, after its last output, and its records are decided meanwhile,
//!   each range logged first: see `Deciding` in `policy.rs` and
//!   docs/availability.md);
//! - each judgment's record goes to partition s of its topic, with its slice
//!   offset and release position, unless that topic's replay bound Y
//!   (`crate::kafka::replay`) says the partition holds it already;
//! - a snapshot at offset X is written only after the producer has
//!   acknowledged every output of the slice sent so far (so every output
//!   below X);
//! - on revocation, the slice is snapshotted before release, and the release
//!   waits for the write (each write ends within `writer::WRITE_DEADLINE` of
//!   being queued, and the release waits no longer); then the writer is
//!   fenced off the slice: what of it is still queued or being written is
//!   dropped before its next step (`writer::Ownership`).
//!
//! Snapshots do not stop the worker: a snapshot is copied *while the slice
//! goes on* (copy-on-write, [`crate::engine::SliceState::begin_copy`]): its encoding is laid
//! out at once but for the filter's cells (bytes), then the cells are copied
//! into it in 64 KiB chunks — a few after each record, more when the worker
//! is idle, and any chunk about to be written before it is written — so the
//! snapshot is the state at one offset while the worker never stops for
//! more than a chunk or two. Then the checkpoint writer thread waits until
//! what had been sent to the slice's output partitions at that offset is
//! acknowledged, computes the checksums and writes it. One snapshot is in
//! progress at a time.
//!
//! The snapshot is copied straight into one buffer that the worker keeps
//! and the writer hands back after each write: memory for snapshots is one
//! slice's encoding, not a second copy of every slice, and after the first
//! snapshot copying writes into pages already mapped.
//!
//! A delivery failure is fatal: the process stops and its replacement
//! resumes from the last snapshot and the last acknowledged output.
//!
//! Where things are (files of this folder), from the bottom up (a file
//! imports only files above it in this list):
//! - `setup.rs`: [`WorkerSetup`], what the worker is started with.
//! - `gaps.rs`: a record read past slice-log offsets not read yet waits
//!   until they are (a broker that shows a batch before the ones below it).
//! - `owned.rs`: `OwnedSlice`, a slice this member owns; the one place that
//!   routes its changes through a snapshot copy in progress.
//! - `writer.rs`: the checkpoint writer thread.
//! - `restore_thread.rs`: the restore thread (locates and restores slices).
//! - `emit.rs`: the outputs, flags and verdicts of a judgment.
//! - `policy.rs`: the policy ranges' decisions while a slice is restored
//!   (`Deciding`), and writes to the flush log.
//! - `state.rs`: `WorkerState`, what the loop, the rebalance callbacks and
//!   the admin lookups share under the worker lock.
//! - `snapshots.rs`: the snapshot copy, handed to the writer thread.
//! - `restores.rs`: restored slices join the worker (`take_restored`).
//! - `records.rs`: the per-record path. A record polled by [`run`] goes to
//!   `handle` (a read-order record to `read_orders.rs`),
//!   which reads it once (`crate::kafka::slice_log::LogRecord`: input,
//!   progress, delete request or a foreign record) and takes it in as what
//!   it is: an input record is judged by `judge`, a record of a slice being
//!   restored or of a policy range is decided in `policy.rs`; the
//!   judgments go to `emit.rs`. A batch (`slicing.log_format = "batches"`)
//!   is read once and its records judged one by one at their virtual
//!   positions (`take_batch`). Idle flushes are here too.
//! - `read_orders.rs`: the per-record path of read orders: the input records a
//!   read-order record names, judged under one take of the worker lock per
//!   run of them.
//! - `held.rs`: the records a slice holds for the watermark, owned.
//! - `stall.rs`: the worker standing still (a stopped process): what it
//!   polls on waking is not handled until the group has had time to take
//!   its slices away.
//! - `lookups.rs`: the admin endpoint's key lookups.
//! - `publish.rs`: metrics and status of the owned slices.
//! - `commits.rs`: the snapshot offsets committed to the group, for lag tools.
//! - `context.rs`: the rebalance protocol ([`WorkerContext`]); `on_assign`
//!   and `on_revoke` are its two hooks.
//!
//! This file holds the loop ([`run`]): take in the restored slices, one
//! turn (poll, take in each record, advancing the snapshot being copied),
//! then the housekeeping (idle flushes, the snapshot due, metrics). The
//! records come a batch at a time from a queue of their own
//! ([`crate::kafka::consumed::BatchQueue`]): each assignment forwards its
//! partitions there (`forward_records`), and the consumer's own poll
//! serves the rebalances. Records taken and not yet handed out of a
//! partition revoked or sought are stale (`WorkerState::stale`): a seek
//! makes librdkafka drop what it holds, not what it has handed over.

mod commits;
mod context;
mod emit;
mod gaps;
mod held;
mod lookups;
mod owned;
mod policy;
mod publish;
mod read_orders;
mod records;
mod restore_thread;
mod restores;
mod setup;
mod snapshots;
mod stall;
mod state;
mod writer;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::producer::Producer;

use commits::SafeOffsets;
pub use context::WorkerContext;
use lookups::{feature_fn, lookup_fn};
use publish::publish;
use read_orders::handle_read_order;
use records::{flush_idle, handle, is_read_order};
use restores::take_restored;
pub use setup::{RecordPath, WorkerSetup};
use snapshots::{
    COPY_STEP_BYTES, IDLE_COPY_BYTES, apply_written, begin_snapshot, checkpoint_now, copy_some, wait_written,
};
use stall::{SETTLE, StallWatch, Turn, seek_back};
use state::WorkerState;

use super::join::JoinWatch;
use super::statistics::InputLag;
use super::{Context, KafkaLayerError, clients};
use crate::config::SlicingMode;
use crate::features::feature::WorkerView;
use crate::kafka::consumed::{BatchQueue, Consumed, error_of};
use crate::kafka::slice_log::read_order::NamedRecords;
use crate::metrics::{now_ms, observe_since};

/// Records taken from the consumer per turn of the worker loop (see `run`).
const POLL_BATCH: usize = 256;
/// How long a turn waits for a record when none is there.
const RECORDS_WAIT: Duration = Duration::from_millis(100);
/// How often the worker looks for idle slices with records waiting.
const IDLE_CHECK_EVERY: Duration = Duration::from_millis(50);

/// The slice worker loop. Returns when `stop` is set (after snapshotting
/// every owned slice) or on a fatal error.
pub fn run(setup: Arc<WorkerSetup>, stop: Arc<AtomicBool>) -> Result<(), KafkaLayerError> {
    super::name_thread("dedupd-slices");
    let worker_state = Arc::new(Mutex::new(WorkerState::new(&setup)));
    serve_admin(&setup, &worker_state)?;
    let high_offsets = Arc::new(Mutex::new(BTreeMap::new()));
    let consumer = subscribe(&setup, &worker_state, &high_offsets)?;
    // Before the first poll: the rebalances run inside it and forward the
    // partitions they assign here.
    let mut records = BatchQueue::new(consumer.client());
    worker_state.lock().expect("worker lock").records_to = Some(records.target());
    let mut worker = Loop::new(setup.clone(), worker_state.clone(), high_offsets)?;
    let result = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        let turn = worker.take_restored(&consumer).and_then(|()| worker.turn(&consumer, &mut records));
        if let Err(e) = turn.and_then(|()| worker.housekeeping(&consumer)) {
            break Err(e);
        }
    };
    // Gone before the consumer (librdkafka waits for its queues to go).
    worker_state.lock().expect("worker lock").records_to = None;
    drop(records);
    shut_down(&setup, &worker_state, consumer, &result);
    result
}

/// Forwards the records of the slice-log `partitions` just assigned to the
/// worker loop's records queue, if there is one: read there a batch at a
/// time (see [`BatchQueue::forward`]).
fn forward_records<C: ConsumerContext>(
    setup: &WorkerSetup,
    consumer: &BaseConsumer<C>,
    worker_state: &WorkerState,
    partitions: impl IntoIterator<Item = i32>,
) {
    let Some(target) = worker_state.records_to else { return };
    let topic = setup.slice_topic.as_str();
    // SAFETY: `run` clears `records_to` before the queue goes.
    unsafe { BatchQueue::forward(target, consumer.client(), partitions.into_iter().map(|p| (topic, p))) };
}

/// Gives the admin endpoint its key lookups and the features' key actions,
/// answered from this worker's slices.
fn serve_admin(setup: &Arc<WorkerSetup>, worker_state: &Arc<Mutex<WorkerState>>) -> Result<(), KafkaLayerError> {
    *setup.status.lookup.lock().expect("status lock") = Some(lookup_fn(setup, worker_state));
    let owner = worker_state.clone();
    let view = WorkerView {
        cfg: &setup.cfg,
        seed: setup.filter.params().seed,
        deletable: setup.filter.params().deletable,
        slice_topic: &setup.slice_topic,
        // A worker busy past the wait (waiting for the broker) is taken for
        // not owning the slice: the answer is 202 queued, not a long wait.
        owns: Arc::new(move |slice| {
            crate::admin::lock_within(&owner, crate::admin::LOOKUP_WAIT).is_some_and(|w| w.slices.contains_key(&slice))
        }),
    };
    for (name, action) in crate::features::key_actions(&view)? {
        setup.status.key_actions.lock().expect("status lock").insert(name, action.answer);
        // One worker per process: a second would keep the first's.
        let _ = setup.requests_applied.set(action.applied);
    }
    let mut endpoints = setup.status.feature_lookups.lock().expect("status lock");
    for lookup in crate::features::key_lookups().filter(|l| (l.on)(&setup.cfg.stages)) {
        endpoints.entry(lookup.name).or_default().answer = Some(feature_fn(setup, worker_state, lookup));
    }
    Ok(())
}

/// The slice consumer, subscribed: its context runs the rebalance protocol.
fn subscribe(
    setup: &Arc<WorkerSetup>,
    worker_state: &Arc<Mutex<WorkerState>>,
    high_offsets: &Arc<Mutex<BTreeMap<u32, i64>>>,
) -> Result<BaseConsumer<WorkerContext>, KafkaLayerError> {
    let id = &setup.cfg.settings.app.id;
    let join = JoinWatch::new(&setup.cfg, "slice workers", id);
    let input_topics = match setup.cfg.slicing {
        SlicingMode::InputPartitions => setup.cfg.settings.input.topics.clone(),
        _ => Vec::new(),
    };
    let input_lag = InputLag::new(input_topics, &setup.cfg, &setup.metrics);
    let context = WorkerContext {
        setup: setup.clone(),
        worker_state: worker_state.clone(),
        high_offsets: high_offsets.clone(),
        join,
        input_lag,
    };
    let mut config = clients::group_consumer(&setup.cfg, id, &format!("{id}-slices"));
    // Statistics feed the lag gauges (the router's consumer asks for them too).
    config.set(clients::STATISTICS_INTERVAL, clients::statistics_interval(&setup.cfg, 2000));
    let consumer: BaseConsumer<WorkerContext> =
        config.create_with_context(context).context(|| "creating the slice consumer".into())?;
    consumer.subscribe(&[&setup.slice_topic]).context(|| format!("subscribing to {}", setup.slice_topic))?;
    consumer.context().join.joining(&[&setup.slice_topic]);
    Ok(consumer)
}

/// The worker loop's own state between turns.
struct Loop {
    setup: Arc<WorkerSetup>,
    worker_state: Arc<Mutex<WorkerState>>,
    high_offsets: Arc<Mutex<BTreeMap<u32, i64>>>,
    /// A slice log of read orders: the slice reads the input records they name.
    input: Option<Box<dyn NamedRecords>>,
    stall: StallWatch,
    /// No snapshot starts before this (after a stall).
    snapshots_from: Instant,
    last_housekeeping: Instant,
    last_idle_check: Instant,
    /// The snapshot offsets committed for the lag tools.
    safe_offsets: SafeOffsets,
    /// Whether the last turn took in nothing: a snapshot being copied then
    /// advances by more than a step.
    idle: bool,
    /// A local copy, flushed once per turn of the loop (see `Observer`).
    received: prometheus::local::LocalHistogram,
}

impl Loop {
    fn new(
        setup: Arc<WorkerSetup>,
        worker_state: Arc<Mutex<WorkerState>>,
        high_offsets: Arc<Mutex<BTreeMap<u32, i64>>>,
    ) -> Result<Self, KafkaLayerError> {
        let input =
            crate::features::named_records(&setup.cfg, &setup.metrics.input.input_missing, setup.handoff.as_ref())?;
        let received = setup.metrics.stage("slice_received").local();
        let now = Instant::now();
        Ok(Loop {
            setup,
            worker_state,
            high_offsets,
            input,
            stall: StallWatch::new(),
            snapshots_from: now,
            last_housekeeping: now,
            last_idle_check: now,
            safe_offsets: SafeOffsets::default(),
            idle: false,
            received,
        })
    }

    /// Takes in the slices the restore thread has restored; a fatal error
    /// of the rebalance callbacks or of the producer ends the loop.
    fn take_restored(&mut self, consumer: &BaseConsumer<WorkerContext>) -> Result<(), KafkaLayerError> {
        let mut guard = self.worker_state.lock().expect("worker lock");
        take_restored(&self.setup, consumer, &mut guard);
        match guard.fatal.clone().or_else(|| self.setup.producer.context().failure()) {
            Some(f) => Err(KafkaLayerError::Fatal(f)),
            None => Ok(()),
        }
    }

    /// One turn: one wait, then whatever librdkafka already holds (up to
    /// [`POLL_BATCH`]), with one reading of the clocks: per record, they
    /// cost as much as judging it. The consumer's own queue first: its poll
    /// runs the rebalance callbacks, and it brings the records fetched
    /// before their partition was forwarded (older than any in the records
    /// queue); then the records queue, a batch at a time. The worker lock
    /// is taken per record, not held across a poll: rebalance callbacks run
    /// inside `poll` and take it.
    fn turn(
        &mut self,
        consumer: &BaseConsumer<WorkerContext>,
        records: &mut BatchQueue,
    ) -> Result<(), KafkaLayerError> {
        {
            let WorkerState { gaps, stale, .. } = &mut *self.worker_state.lock().expect("worker lock");
            gaps::reread(&self.setup, consumer, gaps, stale, Instant::now());
        } // the lock goes before the poll: the rebalance callbacks take it
        let mut polled = consumer.poll(Duration::ZERO);
        self.discard_stale(records);
        if polled.is_none() {
            records.ready(RECORDS_WAIT);
        }
        let now = Instant::now();
        let wall_ms = now_ms();
        consumer.context().join.tick(now);
        // A stall is seen before what was polled is handled (see `stall.rs`).
        // (The worker lock is let go before the match: polls inside it run
        // the rebalance callbacks, which take it.)
        let turn = self.stall.polled(&mut self.worker_state.lock().expect("worker lock"), now);
        match turn {
            Turn::Handle => {}
            Turn::Settle => {
                self.snapshots_from = now + SETTLE;
                for _ in 0..POLL_BATCH {
                    match polled.take() {
                        Some(_) => polled = consumer.poll(Duration::ZERO),
                        None => break,
                    }
                }
                records.discard();
                return Ok(());
            }
            Turn::Resume => {
                // What was polled with the seeks pending is read again after them.
                drop(polled.take());
                records.discard();
                seek_back(&self.setup, consumer, &mut self.worker_state.lock().expect("worker lock"));
                return Ok(());
            }
        }
        let mut events = 0;
        let mut result = Ok(());
        while let Some(event) = polled.take() {
            match event {
                Ok(msg) => result = self.take_received(&Consumed::of(&msg), now, wall_ms),
                Err(e) => log::warn!("consuming {}: {e}", self.setup.slice_topic),
            }
            events += 1;
            if result.is_err() {
                break;
            }
            if events < POLL_BATCH {
                polled = consumer.poll(Duration::ZERO);
            }
        }
        self.discard_stale(records);
        while result.is_ok() && events < POLL_BATCH {
            let Some(msg) = records.next_record() else { break };
            match error_of(&msg) {
                None => result = self.take_received(&msg, now, wall_ms),
                Some(e) => log::warn!("consuming {}: {e}", self.setup.slice_topic),
            }
            events += 1;
        }
        self.received.flush();
        self.idle = events == 0;
        result
    }

    /// After a poll (it runs the rebalance callbacks) or a seek: the
    /// records taken before it of a partition revoked or sought are stale,
    /// and go. (A partition given back or sought is read again from where
    /// its restore or seek puts it; records taken after are that.)
    fn discard_stale(&self, records: &mut BatchQueue) {
        let stale = std::mem::take(&mut self.worker_state.lock().expect("worker lock").stale);
        if !stale.is_empty() {
            records.discard_where(|r| stale.contains(&r.partition()));
        }
    }

    /// Takes in one slice-log record just received.
    fn take_received(&mut self, msg: &Consumed<'_>, now: Instant, wall_ms: i64) -> Result<(), KafkaLayerError> {
        observe_since(&self.received, msg.timestamp().to_millis(), wall_ms);
        self.take(msg, now)
    }

    /// Takes in one slice-log record.
    fn take(&mut self, msg: &Consumed<'_>, now: Instant) -> Result<(), KafkaLayerError> {
        let (slice, log_offset) = (msg.partition() as u32, msg.offset() as u64);
        let mut guard = self.worker_state.lock().expect("worker lock");
        if !gaps::admitted(&self.setup, &mut guard.gaps, slice, log_offset, now) {
            return Ok(()); // read again once the records before it can be
        }
        if let Some(input) = self.input.as_mut().filter(|_| is_read_order(msg)) {
            drop(guard);
            return handle_read_order(&self.setup, &self.worker_state, input.as_mut(), msg, now);
        }
        handle(&self.setup, &mut guard, msg, now)?;
        // A snapshot being copied advances by a step per record: the pause
        // per record stays short.
        if let Err(e) = copy_some(&self.setup, &mut guard, COPY_STEP_BYTES) {
            log::warn!("snapshot failed: {e}");
        }
        Ok(())
    }

    /// What the worker does between turns: copies more of a snapshot when
    /// idle, flushes idle slices, starts the snapshot due, publishes metrics.
    fn housekeeping(&mut self, consumer: &BaseConsumer<WorkerContext>) -> Result<(), KafkaLayerError> {
        let setup = &self.setup;
        if self.idle
            && let Err(e) = copy_some(setup, &mut self.worker_state.lock().expect("worker lock"), IDLE_COPY_BYTES)
        {
            log::warn!("snapshot failed: {e}");
        }
        if self.stall.turn_ended(&mut self.worker_state.lock().expect("worker lock")) {
            self.snapshots_from = Instant::now() + SETTLE;
        }
        if self.last_idle_check.elapsed() >= IDLE_CHECK_EVERY && !self.stall.settling() {
            self.last_idle_check = Instant::now();
            flush_idle(setup, &mut self.worker_state.lock().expect("worker lock"))?;
        }
        if self.last_housekeeping.elapsed() >= Duration::from_millis(200) {
            self.last_housekeeping = Instant::now();
            let mut guard = self.worker_state.lock().expect("worker lock");
            apply_written(setup, &mut guard);
            if Instant::now() >= self.snapshots_from {
                start_due_snapshot(setup, &mut guard);
            }
            publish(setup, &mut guard, &self.high_offsets.lock().expect("offsets lock"));
            self.safe_offsets.commit(setup, consumer, &guard);
        }
        Ok(())
    }
}

/// Starts the snapshot of the most overdue slice, if one is due (by
/// `checkpoint.interval` or `checkpoint.interval_records`): one snapshot
/// in the writer's hands at a time.
fn start_due_snapshot(setup: &WorkerSetup, worker_state: &mut WorkerState) {
    let settings = &setup.cfg.settings.checkpoint;
    let interval = Duration::from_millis(settings.interval);
    let WorkerState { slices, writer, buffer, .. } = worker_state;
    if writer.outstanding > 0 || slices.values().any(|o| o.copying.is_some()) {
        return;
    }
    let due = slices
        .values_mut()
        .filter(|o| !o.writing && o.since_checkpoint > 0)
        .filter(|o| {
            (settings.interval_records > 0 && o.since_checkpoint >= settings.interval_records)
                || o.last_checkpoint.elapsed() >= interval
        })
        .min_by_key(|o| o.last_checkpoint);
    if let Some(owned) = due {
        begin_snapshot(setup, buffer, owned);
    }
}

/// Graceful stop: snapshot every slice (after a failure, only the writes
/// in flight finish), then leave the group.
fn shut_down(
    setup: &WorkerSetup,
    worker_state: &Mutex<WorkerState>,
    consumer: BaseConsumer<WorkerContext>,
    result: &Result<(), KafkaLayerError>,
) {
    let mut guard = worker_state.lock().expect("worker lock");
    let owned: Vec<u32> = guard.slices.keys().copied().collect();
    for slice in owned {
        let done = if result.is_ok() {
            checkpoint_now(setup, &mut guard, slice)
        } else {
            wait_written(setup, &mut guard, slice)
        };
        if let Err(e) = done {
            log::warn!("slice {slice}: snapshot on shutdown failed: {e}");
        }
    }
    publish(setup, &mut guard, &BTreeMap::new());
    // Nothing left to snapshot on the revocation that closing triggers.
    for owned in guard.slices.values_mut() {
        owned.since_checkpoint = 0;
    }
    // A restore in progress is not waited for: its slice was never owned.
    guard.restoring.clear();
    guard.deciding.clear();
    guard.restorer.jobs = None;
    drop(guard);
    drop(consumer);
    worker_state.lock().expect("worker lock").writer.stop();
}
