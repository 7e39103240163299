//! The restore thread: an assigned slice is located (where its outputs
//! stopped) and restored there, one after another, while the worker goes on
//! with the slices it has.

use std::sync::{Arc, mpsc};
use std::time::Instant;

use super::owned::OwnedSlice;
use super::setup::WorkerSetup;
use crate::features::FEATURES;
use crate::features::feature::PublishedCounts;
use crate::kafka::KafkaLayerError;
use crate::kafka::replay::{Destination, ReplayBounds};
use crate::kafka::restore::{PolicyRange, RestoredFrom, Restorer};

/// A restore asked of the restore thread: the slice and its number.
pub(super) struct RestoreJob {
    pub(super) slice: u32,
    pub(super) id: u64,
}

/// What the restore thread tells the worker about a restore.
pub(super) enum RestoreEvent {
    /// Where the slice's outputs stopped and the policy ranges logged (read
    /// first, before the snapshot, when the settings decide the records of a
    /// slice being restored).
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
    pub(super) fn start(setup: Arc<WorkerSetup>) -> Restores {
        let (jobs, job_rx) = mpsc::channel::<RestoreJob>();
        let (done_tx, done) = mpsc::channel();
        std::thread::Builder::new()
            .name("dedupd-restores".into())
            .spawn(move || {
                for RestoreJob { slice, id } in job_rx {
                    if setup.path.while_restoring.is_some() {
                        let result = restorer(&setup).locate(slice);
                        if done_tx.send(RestoreEvent::Located { slice, id, result }).is_err() {
                            break;
                        }
                    }
                    let result = restore(&setup, slice).map(Box::new);
                    if done_tx.send(RestoreEvent::Restored { slice, id, result }).is_err() {
                        break;
                    }
                }
            })
            .expect("starting the restore thread");
        Restores { jobs: Some(jobs), done }
    }
}

/// The restore of the slices of this process.
pub(super) fn restorer(setup: &WorkerSetup) -> Restorer<'_> {
    Restorer {
        store: &setup.store,
        reader: &setup.reader,
        filter: &setup.filter,
        order: setup.cfg.order,
        extractor: &setup.extractor,
        decoder: crate::engine::formats::payload_decoder(&setup.cfg.decoder),
        slice_topic: &setup.slice_topic,
        log: setup.path.log_format,
        app: &setup.cfg.settings.app.id,
        output_mark: setup.path.output_header.as_ref().map(|(name, value)| (*name, value.as_str())),
        flush_topic: &setup.flush_topic,
        destinations: Destination::ALL
            .into_iter()
            .filter_map(|dest| Some((dest, dest.topic(&setup.cfg.settings)?)))
            .collect(),
        on_corrupt: setup.cfg.on_corrupt,
        rejected: &setup.metrics.restore.checkpoint_rejected,
        bounds_ignored: &setup.metrics.restore.restore_bounds_ignored,
        stages: &setup.stages,
        start_at_end: setup.cfg.slicing == crate::config::SlicingMode::InputPartitions
            && setup.cfg.input_start == crate::config::InputStart::Latest,
    }
}

pub(super) fn restore(setup: &WorkerSetup, slice: u32) -> Result<OwnedSlice, KafkaLayerError> {
    let started = Instant::now();
    let mut point = restorer(setup).restore(slice)?;
    point.state.passthrough = setup.cfg.passthrough;
    let max_held = usize::try_from(setup.cfg.settings.slicing.max_held).unwrap_or(usize::MAX);
    point.state.order.set_max_held(max_held);
    let source = match point.from {
        RestoredFrom::Snapshot { .. } => "snapshot",
        RestoredFrom::Empty => "empty",
        RestoredFrom::Corrupt(..) => "corrupt",
    };
    setup.metrics.restore.restores.with_label_values(&[source]).inc();
    log::info!("slice {slice}: restored in {:.0} ms", started.elapsed().as_secs_f64() * 1000.0);
    setup.metrics.restore.restore_duration.observe(started.elapsed().as_secs_f64());
    let figures = point.state.filter.figures();
    let mut published_features = PublishedCounts::new();
    for feature in &FEATURES {
        feature.restored(&point.state, &mut published_features);
    }
    Ok(OwnedSlice {
        copying: None,
        published_filter: figures.counters,
        published: point.state.counters.clone(),
        published_features,
        published_overflows: point.state.order.overflows(),
        state: point.state,
        replay: point.bounds,
        last_judged: None,
        ranges: point.ranges,
        held: point.held.into_iter().collect(),
        flushes: point.flushes,
        flush_log: point.flush_log,
        last_arrival: Instant::now(),
        manifest: point.manifest,
        since_checkpoint: 0,
        last_checkpoint: Instant::now(),
        writing: false,
    })
}
