//! Metrics publishing: counters published as the difference from what was
//! published before, gauges and the admin status of each owned slice.

use std::collections::BTreeMap;

use rdkafka::producer::Producer;

use super::owned::OwnedSlice;
use super::setup::WorkerSetup;
use super::state::WorkerState;
use crate::admin::{HeldBy, SliceStatus};
use crate::engine::shrink_target;
use crate::features::FEATURES;
use crate::features::feature::SlicePublish;
use crate::filter::FilterFigures;
use crate::metrics::Metrics;

/// Publishes counters, gauges and status of the owned slices.
pub(super) fn publish(setup: &WorkerSetup, worker_state: &mut WorkerState, high_offsets: &BTreeMap<u32, i64>) {
    let m = &setup.metrics;
    // Room a backlog left in the buffers is given back here, off the per-record path.
    if let Some(to) = shrink_target(worker_state.judged.len(), worker_state.judged.capacity()) {
        worker_state.judged.shrink_to(to);
    }
    m.output.producer_queue.set(i64::from(setup.producer.in_flight_count()));
    let mut status = setup.status.slices.lock().expect("status lock");
    for (slice, owned) in worker_state.slices.iter_mut() {
        let label = slice.to_string();
        publish_counters(setup, &label, owned);
        m.hold.waiting_records.with_label_values(&[&label]).set(owned.held.len() as i64);
        m.hold.held_bytes.with_label_values(&[&label]).set(owned.held.bytes() as i64);
        owned.held.shrink();
        owned.state.order.shrink_spare();
        let filter = publish_filter(m, &label, owned);
        m.checkpoint.checkpoint_age.with_label_values(&[&label]).set(owned.last_checkpoint.elapsed().as_secs_f64());
        // With read orders: read-order records (a router's turn each) not taken in yet.
        let next = setup.log_end(owned.state.next_offset) as i64;
        let lag = high_offsets.get(slice).map_or(0, |&h| (h - next).max(0));
        m.slices.consumer_lag.with_label_values(&[&label]).set(lag);
        status.insert(*slice, slice_status(*slice, owned, &filter, lag));
    }
}

/// The verdict counters, late records, hold overflows and
/// the features' figures of one slice, counters as increments since the
/// last publication.
fn publish_counters(setup: &WorkerSetup, label: &str, owned: &mut OwnedSlice) {
    let m = &setup.metrics;
    let c = &owned.state.counters;
    let p = &owned.published;
    for (result, now, before) in [
        ("distinct", c.distinct, p.distinct),
        ("duplicate", c.duplicates, p.duplicates),
        ("invalid", c.invalid, p.invalid),
        ("resend", c.resends, p.resends),
    ] {
        if now > before {
            m.verdicts.records.with_label_values(&[label, result]).inc_by(now - before);
        }
    }
    if c.late > p.late {
        m.verdicts.late_records.with_label_values(&[label]).inc_by(c.late - p.late);
    }
    owned.published = c.clone();
    let overflows = owned.state.order.overflows();
    if overflows > owned.published_overflows {
        // Once per publication, not per release: a storm of them is one line.
        log::warn!(
            "slice {label}: held more than slicing.max_held = {} records or {} bytes for an input partition \
             nobody routes; released them past it ({} times so far): records of that partition may now arrive late",
            setup.cfg.settings.slicing.max_held,
            setup.path.max_held_bytes,
            overflows
        );
        m.hold.hold_overflows.with_label_values(&[label]).inc_by(overflows - owned.published_overflows);
        owned.published_overflows = overflows;
    }
    for feature in FEATURES {
        let slice = SlicePublish { metrics: m, label, state: &owned.state };
        feature.publish(&setup.cfg, &slice, &mut owned.published_features);
    }
}

/// The filter's counters (as increments) and gauges of one slice.
fn publish_filter(m: &Metrics, label: &str, owned: &mut OwnedSlice) -> FilterFigures {
    let f = owned.state.filter.figures();
    for (i, counter) in [&m.filter.generations_created, &m.filter.generations_dropped, &m.filter.saturated_inserts]
        .into_iter()
        .enumerate()
    {
        if f.counters[i] > owned.published_filter[i] {
            counter.with_label_values(&[label]).inc_by(f.counters[i] - owned.published_filter[i]);
        }
    }
    owned.published_filter = f.counters;
    m.filter.filter_density.with_label_values(&[label]).set(f.density);
    m.filter.filter_generations.with_label_values(&[label]).set(f.generations as i64);
    m.filter.filter_memory_bytes.with_label_values(&[label]).set(f.memory_bytes as i64);
    let peak = m.filter.filter_memory_bytes_peak.with_label_values(&[label]);
    peak.set(peak.get().max(f.memory_bytes as i64));
    m.filter.filter_estimated_fpr.with_label_values(&[label]).set(f.estimated_fpr);
    f
}

/// The admin status of one slice.
fn slice_status(slice: u32, owned: &OwnedSlice, f: &FilterFigures, lag: i64) -> SliceStatus {
    let c = &owned.state.counters;
    SliceStatus {
        slice,
        next_offset: owned.state.next_offset,
        lag,
        replaying_until: owned.replay.highest().filter(|y| y.after >= owned.state.next_offset).map(|y| y.to_string()),
        clock_ms: f.clock_ms,
        generations: f.generations,
        density: f.density,
        estimated_fpr: f.estimated_fpr,
        memory_bytes: f.memory_bytes,
        distinct: c.distinct,
        duplicates: c.duplicates,
        invalid: c.invalid,
        resends: c.resends,
        late: c.late,
        waiting: owned.held.len() as u64,
        last_checkpoint_offset: owned.manifest.as_ref().map(|m| m.offset),
        held_by: owned.state.holding().map(|((topic, partition), time_ms)| HeldBy {
            topic: topic.clone(),
            partition: *partition,
            time_ms,
        }),
    }
}
