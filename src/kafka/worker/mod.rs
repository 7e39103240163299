//! The slice workers: one group consumer on the slice topic; each assigned
//! partition is a slice whose state this process owns until it is revoked.
//!
//! Ordering of the exactly-once protocol (design invariant 5):
//! - on assignment, a slice is restored (snapshot X, last output Y) on the
//!   restore thread while the worker goes on with its other slices; its
//!   partition joins the consumer's assignment only once restored, at X
//!   (with `availability.policy` `deliver` or `drop` it joins earlier, after
//!   its last output, and its records are decided meanwhile, each range
//!   logged first: see `Deciding` in `policy.rs` and docs/availability.md);
//! - records up to Y are replayed silently, later ones are emitted to
//!   partition s of the output topics with the slice offset in a header;
//! - a snapshot at offset X is written only after the producer has
//!   acknowledged every output of the slice sent so far (so every output
//!   below X);
//! - on revocation, the slice is snapshotted before release, and the release
//!   waits for the write.
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
//! Where things are (files of this folder):
//! - `context.rs`: [`WorkerSetup`] (what the worker is started with), the
//!   state the loop and the rebalance callbacks share under the worker
//!   lock (`WorkerState`, one `OwnedSlice` per slice), and the rebalance
//!   callbacks of [`WorkerContext`].
//! - `restores.rs`: the restore thread; assigned slices join the worker
//!   through `take_restored`.
//! - `records.rs`: the per-record path. A record polled by [`run`] goes to
//!   `handle` (in shared mode a read-order record to `handle_read_order`);
//!   an input record is judged by `judge`, a record of a slice being
//!   restored or of a policy range is decided in `policy.rs`; the
//!   judgments go to `emit.rs`. Idle flushes are here too.
//! - `emit.rs`: the outputs, flags and verdicts of a judgment.
//! - `policy.rs`: `availability.policy`'s decisions while a slice is restored.
//! - `snapshots.rs`: the snapshot copy and the checkpoint writer thread.
//! - `lookups.rs`: the admin endpoint's key lookups.
//! - `publish.rs`: metrics and status of the owned slices.
//!
//! This file holds the loop ([`run`]): poll, handle each record, advance
//! the snapshot being copied, then the housekeeping (idle flushes,
//! snapshots due, metrics).

mod context;
mod emit;
mod lookups;
mod policy;
mod publish;
mod records;
mod restores;
mod snapshots;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::Producer;

use context::WorkerState;
pub use context::{WorkerContext, WorkerSetup};
use lookups::{count_fn, lookup_fn, provenance_fn};
use publish::{after_stall, publish};
use records::{flush_idle, handle, handle_read_order, is_read_order};
use restores::{Restores, take_restored};
use snapshots::{
    COPY_STEP_BYTES, IDLE_COPY_BYTES, Writer, apply_written, begin_snapshot, checkpoint_now, copy_some, wait_written,
};

use super::join::JoinWatch;
use super::shared::InputReader;
use super::{Context, KafkaLayerError, clients};
use crate::config::SlicingMode;
use crate::metrics::{now_ms, observe_since};

/// A gap this long between two turns of the worker loop means the worker
/// itself stood still (a stopped process, a starved CPU, a long GC-like
/// pause), not that its slices received nothing. A turn normally takes one
/// poll (100 ms) plus one record's work.
const WORKER_STALL: Duration = Duration::from_secs(1);
/// After such a stall, no snapshot starts for this long (see [`after_stall`]).
const STALL_SETTLE: Duration = Duration::from_secs(2);
/// Records taken from the consumer per turn of the worker loop (see `run`).
const POLL_BATCH: usize = 256;
/// How often the worker looks for idle slices with records waiting.
const IDLE_CHECK_EVERY: Duration = Duration::from_millis(50);

/// The slice worker loop. Returns when `stop` is set (after snapshotting
/// every owned slice) or on a fatal error.
pub fn run(deps: Arc<WorkerSetup>, stop: Arc<AtomicBool>) -> Result<(), KafkaLayerError> {
    super::name_thread("dedupd-slices");
    let writer = Writer::start(deps.clone());
    let restorer = Restores::start(deps.clone());
    let inner = Arc::new(Mutex::new(WorkerState {
        slices: BTreeMap::new(),
        judged: Vec::new(),
        fatal: None,
        writer,
        buffer: None,
        restoring: BTreeMap::new(),
        unassigned: BTreeSet::new(),
        deciding: BTreeMap::new(),
        restores_asked: 0,
        restorer,
    }));
    let high_offsets = Arc::new(Mutex::new(BTreeMap::new()));
    let id = &deps.cfg.settings.app.id;
    let join = JoinWatch::new(&deps.cfg, "slice workers", id);
    let context = WorkerContext { deps: deps.clone(), inner: inner.clone(), high_offsets: high_offsets.clone(), join };
    *deps.status.lookup.lock().expect("status lock") = Some(lookup_fn(&deps, &inner));
    let owner = inner.clone();
    let delete = super::deletes::delete_fn(
        &deps.cfg,
        deps.params.seed,
        deps.params.deletable,
        &deps.slice_topic,
        deps.status.clone(),
        move |slice| owner.lock().expect("worker lock").slices.contains_key(&slice),
    )?;
    *deps.status.delete.lock().expect("status lock") = Some(delete);
    if deps.cfg.provenance.is_some() {
        *deps.status.provenance.lock().expect("status lock") = Some(provenance_fn(&deps, &inner));
    }
    if deps.cfg.counting.is_some() {
        *deps.status.count.lock().expect("status lock") = Some(count_fn(&deps, &inner));
    }
    let mut config = clients::group_consumer(&deps.cfg, id, &format!("{id}-slices"));
    // Statistics feed the consumer-lag gauge; no other client asks for them.
    config.set(clients::STATISTICS_INTERVAL, clients::statistics_interval(&deps.cfg, 2000));
    let consumer: BaseConsumer<WorkerContext> =
        config.create_with_context(context).context(|| "creating the slice consumer".into())?;
    consumer.subscribe(&[&deps.slice_topic]).context(|| format!("subscribing to {}", deps.slice_topic))?;
    consumer.context().join.joining(&[&deps.slice_topic]);

    // Shared mode: the slice reads the input records the read order names.
    let mut input = match deps.cfg.slicing {
        SlicingMode::Shared => Some(InputReader::new(&deps.cfg, deps.metrics.input_missing.clone())?),
        _ => None,
    };
    let settings = &deps.cfg.settings.checkpoint;
    let interval = Duration::from_millis(settings.interval);
    let mut last_housekeeping = Instant::now();
    let mut last_idle_check = Instant::now();
    let mut last_turn = Instant::now();
    let mut snapshots_from = Instant::now();
    // A local copy, flushed once per turn of the loop (see `Observer`).
    let received = deps.metrics.stage("slice_received").local();
    let result = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        {
            let mut guard = inner.lock().expect("worker lock");
            take_restored(&deps, &consumer, &mut guard);
            if let Some(f) = guard.fatal.clone() {
                break Err(KafkaLayerError::Topology(f));
            }
        }
        if let Some(f) = deps.producer.context().failure() {
            break Err(KafkaLayerError::Topology(f));
        }
        // One wait, then whatever librdkafka already holds (up to
        // POLL_BATCH), with one reading of the clocks: per record, they cost
        // as much as judging it. The worker lock is taken per record, not
        // held across a poll: rebalance callbacks run inside `poll` and take it.
        let mut polled = consumer.poll(Duration::from_millis(100));
        let now = Instant::now();
        let wall_ms = now_ms();
        consumer.context().join.tick(now);
        let mut events = 0;
        let mut failed = None;
        while let Some(event) = polled.take() {
            match event {
                Ok(msg) => {
                    observe_since(&received, msg.timestamp().to_millis(), wall_ms);
                    if let Some(input) = input.as_mut().filter(|_| is_read_order(&msg)) {
                        if let Err(e) = handle_read_order(&deps, &inner, input, &msg, now) {
                            failed = Some(e);
                            break;
                        }
                        events += 1;
                        if events < POLL_BATCH {
                            polled = consumer.poll(Duration::ZERO);
                        }
                        continue;
                    }
                    let mut guard = inner.lock().expect("worker lock");
                    if let Err(e) = handle(&deps, &mut guard, &msg, now) {
                        failed = Some(e);
                        break;
                    }
                    // A snapshot being copied advances by a step per record,
                    // as before batching: the pause per record stays short.
                    if let Err(e) = copy_some(&deps, &mut guard, COPY_STEP_BYTES) {
                        log::warn!("snapshot failed: {e}");
                    }
                }
                Err(e) => log::warn!("consuming {}: {e}", deps.slice_topic),
            }
            events += 1;
            if events < POLL_BATCH {
                polled = consumer.poll(Duration::ZERO);
            }
        }
        received.flush();
        if let Some(e) = failed {
            break Err(e);
        }
        if events == 0
            && let Err(e) = copy_some(&deps, &mut inner.lock().expect("worker lock"), IDLE_COPY_BYTES)
        {
            log::warn!("snapshot failed: {e}");
        }
        let stalled = last_turn.elapsed();
        last_turn = Instant::now();
        if stalled >= WORKER_STALL {
            after_stall(&mut inner.lock().expect("worker lock"), stalled);
            snapshots_from = last_turn + STALL_SETTLE;
        }
        if last_idle_check.elapsed() >= IDLE_CHECK_EVERY {
            last_idle_check = Instant::now();
            if let Err(e) = flush_idle(&deps, &mut inner.lock().expect("worker lock")) {
                break Err(e);
            }
        }
        if last_housekeeping.elapsed() >= Duration::from_millis(200) {
            last_housekeeping = Instant::now();
            let mut guard = inner.lock().expect("worker lock");
            apply_written(&deps, &mut guard);
            let WorkerState { slices, writer, buffer, .. } = &mut *guard;
            // The most overdue slice first; one snapshot in the writer's hands at a time.
            let due = slices
                .values()
                .filter(|o| !o.writing && o.since_checkpoint > 0)
                .filter(|o| {
                    (settings.interval_records > 0 && o.since_checkpoint >= settings.interval_records)
                        || o.last_checkpoint.elapsed() >= interval
                })
                .min_by_key(|o| o.last_checkpoint)
                .map(|o| o.state.slice);
            let in_progress = writer.outstanding > 0 || slices.values().any(|o| o.copying.is_some());
            let settled = Instant::now() >= snapshots_from;
            if !in_progress
                && settled
                && let Some(owned) = due.and_then(|s| slices.get_mut(&s))
            {
                begin_snapshot(&deps, buffer, owned);
            }
            publish(&deps, &mut guard, &high_offsets.lock().expect("offsets lock"));
        }
    };

    // Graceful stop: snapshot every slice, then leave the group.
    let mut guard = inner.lock().expect("worker lock");
    let owned: Vec<u32> = guard.slices.keys().copied().collect();
    for slice in owned {
        // After a failure only the writes in flight finish.
        let done = if result.is_ok() {
            checkpoint_now(&deps, &mut guard, slice)
        } else {
            wait_written(&deps, &mut guard, slice)
        };
        if let Err(e) = done {
            log::warn!("slice {slice}: snapshot on shutdown failed: {e}");
        }
    }
    publish(&deps, &mut guard, &BTreeMap::new());
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
    inner.lock().expect("worker lock").writer.stop();
    result
}
