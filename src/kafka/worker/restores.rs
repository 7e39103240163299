//! The restore thread and the worker's side of it: an assigned slice is
//! located (where its outputs stopped) and restored there, one after
//! another, while the worker goes on with the slices it has; the worker
//! takes in what it has done on each turn ([`take_restored`]).

use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::time::Instant;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::context::{WorkerContext, WorkerSetup, WorkerState};
use super::owned::OwnedSlice;
use super::policy::Deciding;
use super::records::log_position;
use crate::config::AvailabilityPolicy;
use crate::kafka::replay::{Destination, ReplayBounds};
use crate::kafka::restore::{PolicyRange, RestoredFrom, Restorer};
use crate::kafka::{KafkaLayerError, clients};

/// A restore asked of the restore thread: the slice and its number.
pub(super) struct RestoreJob {
    pub(super) slice: u32,
    pub(super) id: u64,
}

/// What the restore thread tells the worker about a restore.
pub(super) enum RestoreEvent {
    /// Where the slice's outputs stopped and the policy ranges logged (read
    /// first, before the snapshot, when `availability.policy` is not `wait`).
    Located { slice: u32, id: u64, result: Result<(ReplayBounds, Option<u64>, Vec<PolicyRange>), KafkaLayerError> },
    /// The slice, restored.
    Restored { slice: u32, id: u64, result: Result<Box<OwnedSlice>, KafkaLayerError> },
}

/// The worker's side of the restore thread: restores run there, one after
/// another, while the worker goes on with the slices it has (see
/// docs/availability.md, "How deliver and drop can be added", step 1).
pub(super) struct Restores {
    pub(super) jobs: Option<mpsc::Sender<RestoreJob>>,
    pub(super) done: mpsc::Receiver<RestoreEvent>,
}

impl Restores {
    pub(super) fn start(deps: Arc<WorkerSetup>) -> Restores {
        let (jobs, job_rx) = mpsc::channel::<RestoreJob>();
        let (done_tx, done) = mpsc::channel();
        std::thread::Builder::new()
            .name("dedupd-restores".into())
            .spawn(move || {
                for RestoreJob { slice, id } in job_rx {
                    if deps.cfg.availability != AvailabilityPolicy::Wait {
                        let result = restorer(&deps).locate(slice);
                        if done_tx.send(RestoreEvent::Located { slice, id, result }).is_err() {
                            break;
                        }
                    }
                    let result = restore(&deps, slice).map(Box::new);
                    if done_tx.send(RestoreEvent::Restored { slice, id, result }).is_err() {
                        break;
                    }
                }
            })
            .expect("starting the restore thread");
        Restores { jobs: Some(jobs), done }
    }
}

/// The partitions of the slices being restored (paused, with eager rebalancing).
pub(super) fn restoring_list(topic: &str, inner: &WorkerState) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for &slice in inner.restoring.keys() {
        tpl.add_partition(topic, slice as i32);
    }
    tpl
}

/// Takes in what the restore thread has done: a slice located is decided
/// by `availability.policy` until restored (its partition read from after
/// its last output); a restored slice is owned from now, its partition read
/// from where it resumes. What comes for a restore whose slice was revoked
/// meanwhile is dropped.
pub(super) fn take_restored(deps: &WorkerSetup, consumer: &BaseConsumer<WorkerContext>, inner: &mut WorkerState) {
    while let Ok(event) = inner.restorer.done.try_recv() {
        match event {
            RestoreEvent::Located { slice, id, result } => {
                if inner.restoring.get(&slice) != Some(&id) {
                    continue;
                }
                match result {
                    // A slice that never sent an output has nothing to go on from: it waits.
                    Ok((bounds, _, _)) if bounds.highest().is_none() => {
                        log::info!("slice {slice}: no output yet; its records wait for the restore");
                    }
                    Ok((bounds, snapshot, ranges)) => {
                        // Records below the snapshot's offset are in it: judged, or
                        // waiting for the watermark (judged once it is restored).
                        let next = bounds.highest().map_or(0, |y| y.after + 1).max(snapshot.unwrap_or(0));
                        if let Err(e) = read_from(deps, consumer, inner, slice, next) {
                            inner.fatal.get_or_insert(e);
                            continue;
                        }
                        log::info!(
                            "slice {slice}: being restored; its records from offset {next} are decided by \
                             availability.policy = {} meanwhile",
                            deps.cfg.availability.as_str()
                        );
                        inner.deciding.insert(slice, Deciding { next, bounds, ranges });
                    }
                    Err(e) => {
                        log::warn!("slice {slice}: cannot read where its outputs stopped ({e}); its records wait")
                    }
                }
            }
            RestoreEvent::Restored { slice, id, result } => {
                if inner.restoring.get(&slice) != Some(&id) {
                    log::debug!("slice {slice}: a restore finished after the slice was revoked; dropped");
                    continue;
                }
                inner.restoring.remove(&slice);
                let deciding = inner.deciding.remove(&slice);
                match result {
                    Ok(mut owned) => {
                        if let Some(d) = deciding {
                            for r in d.ranges {
                                if r.to >= owned.state.next_offset && !owned.ranges.contains(&r) {
                                    owned.ranges.push(r);
                                }
                            }
                            owned.ranges.sort_by_key(|r| r.from);
                            owned.replay.merge(&d.bounds);
                            log::info!(
                                "slice {slice}: restored; policy decisions up to offset {} are applied as logged",
                                d.next.saturating_sub(1)
                            );
                        }
                        if let Err(e) = read_from(deps, consumer, inner, slice, owned.state.next_offset) {
                            inner.fatal.get_or_insert(e);
                            continue;
                        }
                        inner.slices.insert(slice, *owned);
                        deps.metrics.init_slice(slice);
                    }
                    Err(e) => {
                        inner.fatal.get_or_insert(format!("slice {slice}: restore failed: {e}"));
                    }
                }
                deps.metrics.slices_owned.set(inner.slices.len() as i64);
                deps.status.ready.store(inner.fatal.is_none() && inner.restoring.is_empty(), Ordering::Relaxed);
            }
        }
    }
}

/// Reads the slice's partition from `offset` on: adds it to the consumer's
/// assignment there if it is not in it yet (librdkafka's fetcher starts on
/// it at once), or else seeks it there and resumes it (a partition assigned
/// paused, with eager rebalancing; a partition read by `availability.policy`
/// during the restore is not paused and the resume does nothing).
pub(super) fn read_from(
    deps: &WorkerSetup,
    consumer: &BaseConsumer<WorkerContext>,
    inner: &mut WorkerState,
    slice: u32,
    offset: u64,
) -> Result<(), String> {
    let at = Offset::Offset(log_position(deps, offset) as i64);
    let mut tpl = TopicPartitionList::new();
    let result = tpl.add_partition_offset(&deps.slice_topic, slice as i32, at).and_then(|()| {
        if inner.unassigned.remove(&slice) {
            return consumer.incremental_assign(&tpl);
        }
        // One assigned a moment ago (`Located`) may not be fetching yet.
        clients::seek_started(consumer, &deps.slice_topic, slice as i32, at).and_then(|()| consumer.resume(&tpl))
    });
    result.map_err(|e| format!("slice {slice}: cannot read it from offset {offset}: {e}"))
}

/// The restore of the slices of this process.
pub(super) fn restorer(deps: &WorkerSetup) -> Restorer<'_> {
    Restorer {
        store: &deps.store,
        reader: &deps.reader,
        params: &deps.params,
        order: deps.cfg.order,
        extractor: &deps.extractor,
        slice_topic: &deps.slice_topic,
        slicing: deps.cfg.slicing,
        leaf: (deps.cfg.tier == crate::config::Tier::DenseLeaf).then_some(deps.cfg.settings.app.id.as_str()),
        flush_topic: &deps.flush_topic,
        destinations: Destination::ALL
            .into_iter()
            .filter_map(|dest| Some((dest, dest.topic(&deps.cfg.settings)?)))
            .collect(),
        on_corrupt: deps.cfg.on_corrupt,
        rejected: &deps.metrics.checkpoint_rejected,
        bounds_ignored: &deps.metrics.restore_bounds_ignored,
        provenance: deps.cfg.provenance.as_ref(),
        counting: deps.cfg.counting.as_ref(),
        start_at_end: deps.cfg.slicing == crate::config::SlicingMode::InputPartitions
            && deps.cfg.input_start == crate::config::InputStart::Latest,
    }
}

pub(super) fn restore(deps: &WorkerSetup, slice: u32) -> Result<OwnedSlice, KafkaLayerError> {
    let started = Instant::now();
    let mut point = restorer(deps).restore(slice)?;
    point.state.passthrough = deps.cfg.passthrough;
    let max_held = usize::try_from(deps.cfg.settings.slicing.max_held).unwrap_or(usize::MAX);
    point.state.order.set_max_held(max_held);
    let source = match point.from {
        RestoredFrom::Snapshot { .. } => "snapshot",
        RestoredFrom::Empty => "empty",
        RestoredFrom::Corrupt(..) => "corrupt",
    };
    deps.metrics.restores.with_label_values(&[source]).inc();
    log::info!("slice {slice}: restored in {:.0} ms", started.elapsed().as_secs_f64() * 1000.0);
    deps.metrics.restore_duration.observe(started.elapsed().as_secs_f64());
    let c = point.state.filter.counters();
    Ok(OwnedSlice {
        copying: None,
        published_filter: [c.generations_created, c.generations_dropped, c.saturated_inserts],
        published: point.state.counters.clone(),
        published_provenance_dropped: point.state.provenance.as_ref().map_or(0, |p| p.sources.dropped()),
        published_overflows: point.state.order.overflows(),
        state: point.state,
        replay: point.bounds,
        last_judged: None,
        ranges: point.ranges,
        held: point.held.into_iter().collect(),
        flushes: point.flushes,
        last_arrival: Instant::now(),
        manifest: point.manifest,
        since_checkpoint: 0,
        last_checkpoint: Instant::now(),
        writing: false,
    })
}
