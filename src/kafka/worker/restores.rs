//! The worker's side of the restore thread ([`super::restore_thread`]):
//! on each turn the worker takes in what it has done ([`take_restored`])
//! and reads each slice's partition from where the slice goes on.

use std::sync::atomic::Ordering;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::{Offset, TopicPartitionList};

use super::policy::Deciding;
use super::restore_thread::RestoreEvent;
use super::setup::WorkerSetup;
use super::state::WorkerState;
use crate::kafka::clients;

/// The partitions of the slices being restored (paused, with eager rebalancing).
pub(super) fn restoring_list(topic: &str, worker_state: &WorkerState) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for &slice in worker_state.restoring.keys() {
        tpl.add_partition(topic, slice as i32);
    }
    tpl
}

/// Takes in what the restore thread has done: a slice located is decided
/// by the settings' decision until restored (its partition read from after
/// its last output); a restored slice is owned from now, its partition read
/// from where it resumes. What comes for a restore whose slice was revoked
/// meanwhile is dropped.
pub(super) fn take_restored<C: ConsumerContext>(
    setup: &WorkerSetup,
    consumer: &BaseConsumer<C>,
    worker_state: &mut WorkerState,
) {
    while let Ok(event) = worker_state.restorer.done.try_recv() {
        match event {
            RestoreEvent::Located { slice, id, result } => {
                if worker_state.restoring.get(&slice) != Some(&id) {
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
                        if let Err(e) = read_from(setup, consumer, worker_state, slice, next) {
                            worker_state.fatal.get_or_insert(e);
                            continue;
                        }
                        let decision = setup.path.while_restoring.map_or("", |d| d.as_str());
                        log::info!(
                            "slice {slice}: being restored; its records from offset {next} are decided as \
                             \"{decision}\" meanwhile (docs/availability.md)"
                        );
                        worker_state.deciding.insert(slice, Deciding { next, bounds, ranges });
                    }
                    Err(e) => {
                        log::warn!("slice {slice}: cannot read where its outputs stopped ({e}); its records wait")
                    }
                }
            }
            RestoreEvent::Restored { slice, id, result } => {
                if worker_state.restoring.get(&slice) != Some(&id) {
                    log::debug!("slice {slice}: a restore finished after the slice was revoked; dropped");
                    continue;
                }
                worker_state.restoring.remove(&slice);
                let deciding = worker_state.deciding.remove(&slice);
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
                        if let Err(e) = read_from(setup, consumer, worker_state, slice, owned.state.next_offset) {
                            worker_state.fatal.get_or_insert(e);
                            continue;
                        }
                        worker_state.slices.insert(slice, *owned);
                        setup.metrics.init_slice(slice);
                    }
                    Err(e) => {
                        worker_state.fatal.get_or_insert(format!("slice {slice}: restore failed: {e}"));
                    }
                }
                setup.metrics.slices.slices_owned.set(worker_state.slices.len() as i64);
                setup
                    .status
                    .ready
                    .store(worker_state.fatal.is_none() && worker_state.restoring.is_empty(), Ordering::Relaxed);
            }
        }
    }
}

/// Reads the slice's partition from `offset` on: adds it to the consumer's
/// assignment there if it is not in it yet (librdkafka's fetcher starts on
/// it at once), or else seeks it there and resumes it (a partition assigned
/// paused, with eager rebalancing; a partition read for the policy ranges
/// during the restore is not paused and the resume does nothing). The
/// records of the partition the worker has taken already are stale.
pub(super) fn read_from<C: ConsumerContext>(
    setup: &WorkerSetup,
    consumer: &BaseConsumer<C>,
    worker_state: &mut WorkerState,
    slice: u32,
    offset: u64,
) -> Result<(), String> {
    let log_offset = setup.log_position(offset);
    let at = Offset::Offset(log_offset as i64);
    let mut tpl = TopicPartitionList::new();
    let result = tpl.add_partition_offset(&setup.slice_topic, slice as i32, at).and_then(|()| {
        if worker_state.unassigned.remove(&slice) {
            consumer.incremental_assign(&tpl)?;
            super::forward_records(setup, consumer, worker_state, [slice as i32]);
            return Ok(());
        }
        // One assigned a moment ago (`Located`) may not be fetching yet.
        clients::seek_started(consumer, &setup.slice_topic, slice as i32, at).and_then(|()| consumer.resume(&tpl))
    });
    worker_state.gaps.expect(slice, log_offset);
    worker_state.stale.push(slice as i32);
    result.map_err(|e| format!("slice {slice}: cannot read it from offset {offset}: {e}"))
}
