//! Snapshots: a slice's snapshot is copied while the slice goes on (a step
//! after each record, more when the worker is idle), then handed to the
//! checkpoint writer thread ([`super::writer`]), which writes it once the
//! outputs before it are acknowledged (see the module documentation of [`super`]).

use std::time::{Duration, Instant};

use rdkafka::producer::Producer;

use super::owned::{Copying, OwnedSlice};
use super::setup::WorkerSetup;
use super::state::WorkerState;
use super::writer::{ANSWER_MARGIN, Done, Job, WRITE_DEADLINE, Writer, Written};
use crate::kafka::KafkaLayerError;

/// A snapshot that stops its slice's worker longer than this is logged as a warning.
const STALL_WARNING: Duration = Duration::from_millis(100);

/// Bytes of cells copied after each record while a snapshot is copied:
/// a pause of tens of µs per record; ~500 records copy 123 MiB.
pub(super) const COPY_STEP_BYTES: usize = 256 << 10;
/// Bytes of cells copied per turn of the worker loop that found no record
/// (a few ms, faulting in the pages of a new buffer included).
pub(super) const IDLE_COPY_BYTES: usize = 4 << 20;

/// Takes a snapshot of the slice: begins a copy of its state (everything
/// but the filter's cells now; the cells while the slice goes on).
pub(super) fn begin_snapshot(setup: &WorkerSetup, buffer: &mut Option<Vec<u8>>, owned: &mut OwnedSlice) {
    let taken = Instant::now();
    let slice = owned.state.slice;
    owned.state.begin_copy(buffer.take().unwrap_or_default());
    let offset = owned.state.next_offset;
    let mark = setup.producer.context().counts().mark(Some(slice as usize));
    // Taken on the worker thread, which logs flushes and ranges and waits
    // for them: whatever it logs after this lies at or beyond the end it
    // has seen acknowledged.
    let pending = !owned.flushes.is_empty() || owned.ranges.iter().any(|r| r.to >= offset);
    let logged = setup.producer.context().counts().end(&setup.flush_topic, slice as i32);
    let flush_log_offset = owned.flush_log.read_from(pending, logged);
    log::debug!(
        "slice {slice}: snapshot at offset {offset} taken, {} bytes of cells to copy",
        owned.state.copy_bytes_left()
    );
    owned.copying = Some(Copying {
        offset,
        mark,
        previous: owned.manifest.clone(),
        flush_log_offset,
        taken,
        longest_pause: taken.elapsed(),
        records: 0,
    });
    owned.writing = true;
    owned.since_checkpoint = 0;
}

/// Copies up to `budget` more bytes of the snapshot being copied, if any,
/// and hands it to the writer once complete.
pub(super) fn copy_some(
    setup: &WorkerSetup,
    worker_state: &mut WorkerState,
    budget: usize,
) -> Result<(), KafkaLayerError> {
    let WorkerState { slices, writer, .. } = worker_state;
    let Some(owned) = slices.values_mut().find(|o| o.copying.is_some()) else {
        return Ok(());
    };
    let c = owned.copying.as_mut().expect("found copying");
    let started = Instant::now();
    let complete = owned.state.advance_copy(budget);
    c.longest_pause = c.longest_pause.max(started.elapsed());
    if complete { hand_over(setup, writer, owned, false) } else { Ok(()) }
}

/// Finishes the slice's snapshot copy (whatever is left, at once) and hands
/// it to the checkpoint writer. `releasing`: the slice is being released or
/// the process is stopping, so the copy could not wait (logged as such).
fn hand_over(
    setup: &WorkerSetup,
    writer: &mut Writer,
    owned: &mut OwnedSlice,
    releasing: bool,
) -> Result<(), KafkaLayerError> {
    let Some(Copying { offset, mark, previous, flush_log_offset, taken, longest_pause, records }) =
        owned.copying.take()
    else {
        return Ok(());
    };
    let slice = owned.state.slice;
    let started = Instant::now();
    let image = owned.state.finish_copy().expect("a copy begun with the Copying");
    let longest_pause = longest_pause.max(started.elapsed());
    let jobs = writer
        .jobs
        .as_ref()
        .ok_or_else(|| KafkaLayerError::Checkpoint { slice, detail: "the checkpoint writer has stopped".into() })?;
    let (epoch, deadline) = (writer.ownership.epoch(slice), Instant::now() + WRITE_DEADLINE);
    jobs.send(Job { slice, offset, image, mark, previous, flush_log_offset, taken, epoch, deadline })
        .map_err(|_| KafkaLayerError::Checkpoint { slice, detail: "the checkpoint writer has stopped".into() })?;
    writer.outstanding += 1;
    let line = format!(
        "slice {slice}: snapshot at offset {offset} copied{} in {:.1} ms alongside {records} records, longest_pause_ms={:.2}",
        if releasing { " at release" } else { "" },
        taken.elapsed().as_secs_f64() * 1000.0,
        longest_pause.as_secs_f64() * 1000.0
    );
    if longest_pause > STALL_WARNING && !releasing {
        log::warn!("{line}");
    } else {
        log::debug!("{line}");
    }
    setup.metrics.checkpoint.checkpoint_stall.observe(longest_pause.as_secs_f64());
    Ok(())
}

/// Takes in a written snapshot; returns its error, if any. An answer for an
/// earlier ownership of its slice (released since) changes nothing of the
/// slice owned now.
fn apply(setup: &WorkerSetup, worker_state: &mut WorkerState, written: Written) -> Option<KafkaLayerError> {
    worker_state.writer.outstanding -= 1;
    worker_state.buffer = Some(written.buffer);
    let slice = written.slice;
    let label = slice.to_string();
    let current = worker_state.writer.ownership.holds(slice, written.epoch);
    let owned = worker_state.slices.get_mut(&slice).filter(|_| current);
    match written.result {
        Ok(Done::Written(manifest, bytes)) => {
            log::debug!(
                "slice {slice}: snapshot at offset {} written, bytes={bytes} write_ms={:.0}",
                manifest.offset,
                written.took.as_secs_f64() * 1000.0
            );
            setup.metrics.checkpoint.checkpoints.with_label_values(&[&label]).inc();
            setup.metrics.checkpoint.checkpoint_bytes.with_label_values(&[&label]).set(bytes as i64);
            setup.metrics.checkpoint.checkpoint_duration.observe(written.took.as_secs_f64());
            if let Some(owned) = owned {
                owned.writing = false;
                owned.manifest = Some(manifest);
                owned.last_checkpoint = Instant::now();
            }
            None
        }
        Ok(Done::Dropped(before)) => {
            log::info!("slice {slice}: snapshot dropped before {before}: the slice was released after it was taken");
            setup.metrics.checkpoint.checkpoint_dropped.with_label_values(&[&label]).inc();
            if let Some(owned) = owned {
                owned.writing = false;
            }
            None
        }
        Err(e) => {
            setup.metrics.checkpoint.checkpoint_failures.with_label_values(&[&label]).inc();
            let Some(owned) = owned else {
                // Not the failure of the slice owned now, if any: only logged.
                log::warn!("slice {slice}: snapshot failed after the slice was released: {e}");
                return None;
            };
            owned.writing = false;
            // Due again: the records it covered are not in any snapshot.
            owned.since_checkpoint += 1;
            Some(e)
        }
    }
}

/// Takes in every snapshot written so far, without waiting.
pub(super) fn apply_written(setup: &WorkerSetup, worker_state: &mut WorkerState) {
    while let Ok(w) = worker_state.writer.written.try_recv() {
        let slice = w.slice;
        if let Some(e) = apply(setup, worker_state, w) {
            log::warn!("slice {slice}: snapshot failed: {e}");
        }
    }
}

/// Waits until no snapshot of `slice` is being written; returns the error
/// of the one it waited for, if it failed.
///
/// The wait ends when the slice's write must have ended, as its job was
/// queued before now: [`WRITE_DEADLINE`] (and the writer's
/// [`ANSWER_MARGIN`]) from now, whatever other slices' answers come first.
pub(super) fn wait_written(
    setup: &WorkerSetup,
    worker_state: &mut WorkerState,
    slice: u32,
) -> Result<(), KafkaLayerError> {
    let WorkerState { slices, writer, .. } = &mut *worker_state;
    if let Some(owned) = slices.get_mut(&slice) {
        hand_over(setup, writer, owned, true)?;
    }
    let until = Instant::now() + WRITE_DEADLINE + ANSWER_MARGIN;
    let mut failure = Ok(());
    while worker_state.slices.get(&slice).is_some_and(|o| o.writing) {
        let left = until.saturating_duration_since(Instant::now());
        let w = worker_state.writer.written.recv_timeout(left).map_err(|_| KafkaLayerError::Checkpoint {
            slice,
            detail: format!("the checkpoint writer did not answer within {:?}", WRITE_DEADLINE + ANSWER_MARGIN),
        })?;
        let of = w.slice;
        if let Some(e) = apply(setup, worker_state, w) {
            if of == slice {
                failure = Err(e);
            } else {
                log::warn!("slice {of}: snapshot failed: {e}");
            }
        }
    }
    failure
}

/// Snapshots `slice` and waits until the snapshot is written (on release and
/// shutdown). A slice snapshotted since its last record needs no new one.
pub(super) fn checkpoint_now(
    setup: &WorkerSetup,
    worker_state: &mut WorkerState,
    slice: u32,
) -> Result<(), KafkaLayerError> {
    // A failed write in flight leaves the slice due: it is retried here.
    let _ = wait_written(setup, worker_state, slice);
    let WorkerState { slices, buffer, .. } = &mut *worker_state;
    let Some(owned) = slices.get_mut(&slice) else {
        return Ok(());
    };
    if owned.since_checkpoint == 0 && owned.manifest.is_some() {
        return Ok(());
    }
    // Copied at once by `wait_written`: the slice is being released.
    begin_snapshot(setup, buffer, owned);
    wait_written(setup, worker_state, slice)
}
