//! The router's progress records: how far it has routed each input
//! partition it owns, announced to every slice (see the module
//! documentation of [`super`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};

use super::lanes::Lane;
use super::setup::{PartitionId, RouterSetup};
use crate::engine::Progress;
use crate::kafka::producer::produce_control;
use crate::kafka::{KafkaLayerError, headers};

/// How often the router looks whether its progress changed (and then announces it).
pub(super) const PROGRESS_EVERY: Duration = Duration::from_millis(100);
/// A partition at its end that has delivered nothing for this long — or
/// for `input.lateness`, if longer — is announced idle: it holds no slice
/// back (an idle or empty partition would otherwise keep every slice's
/// watermark where it stopped). Not shorter than the lateness: a slice
/// flushes only after that much silence anyway, and a partition announced
/// idle that receives records while its router is killed is not held for
/// (in a rebalance it is: [`hold`]).
pub(super) const IDLE_AFTER: Duration = Duration::from_millis(500);

/// What was announced of a partition: time, idle, owned, and how many
/// records had been routed from it — a record routed from a partition
/// announced idle clears the mark in its slice, so the next idle
/// announcement must go out even if it says the same as the last.
pub(super) type Announced = (u64, bool, bool, u64);

/// Announces the progress of the owned input partitions to every slice
/// partition, if it changed since `announced` (the last announcement).
/// Written after the records it covers, by the same producer, so each
/// slice sees it after them.
pub(super) fn announce(
    setup: &RouterSetup,
    lanes: &BTreeMap<PartitionId, Lane<'_>>,
    all: &[PartitionId],
    now: Instant,
    announced: &mut Vec<(PartitionId, Announced)>,
) -> Result<(), KafkaLayerError> {
    let idle_after = IDLE_AFTER.max(Duration::from_millis(setup.cfg.order.lateness_ms));
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
    send(setup, &entries)?;
    *announced = current.into_iter().map(|(id, p)| (id.clone(), p)).collect();
    Ok(())
}

/// Announces `owned` (this router's partitions, in a rebalance callback)
/// not idle — at time 0: a slice keeps the largest time it knows — and
/// every other partition of `all` as only existing. librdkafka pauses
/// every assigned partition while a rebalance waits for its callbacks, and
/// hands those revoked to another router: records written meanwhile to a
/// partition announced idle, which holds nobody back, would come behind a
/// watermark the other partitions moved on. Held now, such a partition
/// holds the slices until it is announced idle again: after its next end
/// of partition (one comes after every pause), by this router or its new
/// owner. Sent inside the callback (a revocation's before its flush): in
/// every slice's log it comes before anything a new owner writes.
pub(super) fn hold(setup: &RouterSetup, owned: &[PartitionId], all: &[PartitionId]) -> Result<(), KafkaLayerError> {
    let others = all.iter().filter(|id| !owned.contains(id));
    let entries: Vec<Progress<'_>> = owned
        .iter()
        .map(|id| (id, true))
        .chain(others.map(|id| (id, false)))
        .map(|((topic, partition), owned)| Progress { topic, partition: *partition, time_ms: 0, idle: false, owned })
        .collect();
    send(setup, &entries)
}

/// Writes a progress record of `entries` to every slice partition.
fn send(setup: &RouterSetup, entries: &[Progress<'_>]) -> Result<(), KafkaLayerError> {
    let payload = Progress::encode(entries);
    log::debug!("router: progress announced: {:?}", String::from_utf8_lossy(&payload));
    for slice in 0..setup.slices {
        produce_control(&setup.producer, &setup.slice_topic, slice as i32, headers::PROGRESS, &payload)?;
    }
    Ok(())
}

/// Every partition of the input topics, from the broker's metadata
/// (`known` if it cannot be had: a degraded announcement, not an error).
pub(super) fn input_partitions<C: ConsumerContext>(
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
