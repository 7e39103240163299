//! The per-record path of a slice log of read orders: a read-order record's input records,
//! read from the input and judged in its order, under the worker lock
//! taken once per run of them ([`RECORDS_PER_LOCK`] at most).

use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use crate::kafka::consumed::Consumed;

use super::records::{apply_logged_flushes, judge, judge_entry, taken};
use super::setup::WorkerSetup;
use super::snapshots::{COPY_STEP_BYTES, copy_some};
use super::state::WorkerState;
use crate::engine::slice::Unframed;
use crate::engine::{Reading, SourceRef};
use crate::kafka::KafkaLayerError;
use crate::kafka::out_record::OutHeaders;
use crate::kafka::slice_log::batch::{Batch, BatchEntry, BatchParts};
use crate::kafka::slice_log::read_order::{self, NamedReadings, NamedRecords, ReadOrder, RunSink};
use crate::kafka::slice_log::{Kind, LogRecord};

/// Records judged under one take of the worker lock, at most: an admin
/// lookup waits for that many judgments (a fraction of a millisecond), not
/// for a whole read-order record; and never for a fetch from the input
/// ([`RunSink::waiting`] lets the lock go).
const RECORDS_PER_LOCK: u32 = 256;

/// Judges the input records the read-order record `msg` names, in its
/// order, from the first the slice has not taken in yet (a slice resumes in
/// the middle of one), reading them from the input with `input`.
pub(super) fn handle_read_order(
    setup: &WorkerSetup,
    worker_state: &Mutex<WorkerState>,
    input: &mut dyn NamedRecords,
    msg: &Consumed<'_>,
    now: Instant,
) -> Result<(), KafkaLayerError> {
    let slice = msg.partition() as u32;
    let Some(next) = worker_state.lock().expect("worker lock").slices.get(&slice).map(|o| o.state.next_offset) else {
        return Ok(()); // fetched just before a revocation
    };
    let mut order = match ReadOrder::decode(msg.payload().unwrap_or_default()) {
        Ok(order) => order,
        Err(e) => {
            // Only routers write these: a record that cannot be read is a
            // bug or a foreign writer, and the records it names are unknown.
            log::error!(
                "slice {slice}: the read-order record at slice-log offset {} cannot be read ({e}); the input \
                 records it names are not judged",
                msg.offset()
            );
            return Ok(());
        }
    };
    order.first_position = read_order::position(msg.offset() as u64, 0);
    let readings = order.readings.as_ref();
    let mut dispatch = Dispatch { setup, worker_state, guard: None, under_lock: 0, slice, now, run: None, readings };
    if let Some(page) = input.handed(msg.payload().unwrap_or_default())
        && judge_page(&mut dispatch, &order, &page, next)?
    {
        return Ok(());
    }
    let mut run_start = order.first_position;
    for run in &order.runs {
        let skip = next.saturating_sub(run_start);
        if skip < u64::from(run.count) {
            let first = run.first + skip as i64;
            let source = SourceRef { topic: &run.topic, partition: run.partition, offset: run.first };
            dispatch.run = Some((source, run_start));
            input.read_run(&run.topic, run.partition, first, run.count - skip as u32, &mut dispatch)?;
        }
        run_start += u64::from(run.count);
    }
    Ok(())
}

/// Judges the records `order` names from `page`, the copy of them the
/// router of this process handed over (`features/shared/handoff.rs`), from
/// virtual position `next` on. False, and nothing judged, when the page is
/// not exactly those records in that order: the slice reads them from the
/// input then.
fn judge_page(
    dispatch: &mut Dispatch<'_, '_>,
    order: &ReadOrder,
    page: &BatchParts,
    next: u64,
) -> Result<bool, KafkaLayerError> {
    let batch = match Batch::of_parts(page) {
        Ok(batch) => batch,
        Err(e) => {
            log::warn!(
                "slice {}: a handed-over page cannot be read ({e}); reading its records from the input",
                dispatch.slice
            );
            return Ok(false);
        }
    };
    let named = |((_, topic, partition, offset), entry): ((u64, &str, i32, i64), &BatchEntry<'_>)| {
        entry.source == SourceRef { topic, partition, offset }
    };
    if batch.entries.len() as u64 != order.len() || !order.records().zip(&batch.entries).all(named) {
        log::warn!(
            "slice {}: a handed-over page does not hold the records its read order names; reading them from the input",
            dispatch.slice
        );
        return Ok(false);
    }
    let mut handed = 0;
    for ((position, ..), entry) in order.records().zip(&batch.entries) {
        if position >= next {
            dispatch.handed(position, entry)?;
            handed += 1;
        }
    }
    dispatch.setup.metrics.input.input_handed.inc_by(handed);
    Ok(true)
}

/// Judges the records of the runs of one read-order record as the input
/// reader hands them over, holding the worker lock across a run of them.
struct Dispatch<'a, 'r> {
    setup: &'a WorkerSetup,
    worker_state: &'a Mutex<WorkerState>,
    guard: Option<MutexGuard<'a, WorkerState>>,
    /// Records judged since the lock was taken.
    under_lock: u32,
    slice: u32,
    now: Instant,
    /// The run being read: its first record's source and virtual position.
    run: Option<(SourceRef<'r>, u64)>,
    /// The router's readings of the records named, if the record carries them.
    readings: Option<&'r NamedReadings>,
}

impl<'a> Dispatch<'a, '_> {
    /// Judges `record`, named at `named`, under the worker lock (taken
    /// again every [`RECORDS_PER_LOCK`] records), and copies a step of a
    /// snapshot being taken.
    fn judge(&mut self, named: &Named<'_>, record: Arrived<'_, '_>) -> Result<(), KafkaLayerError> {
        if self.under_lock == RECORDS_PER_LOCK {
            self.waiting(); // lets a lookup in between
        }
        let worker_state: &'a Mutex<WorkerState> = self.worker_state;
        let guard = self.guard.get_or_insert_with(|| worker_state.lock().expect("worker lock"));
        self.under_lock += 1;
        handle_named(self.setup, guard, self.slice, named, record, self.now)?;
        if let Err(e) = copy_some(self.setup, guard, COPY_STEP_BYTES) {
            log::warn!("snapshot failed: {e}");
        }
        Ok(())
    }

    /// Judges the record at virtual position `position`, from a handed-over page.
    fn handed(&mut self, position: u64, entry: &BatchEntry<'_>) -> Result<(), KafkaLayerError> {
        // The page carries the readings its read order leaves out.
        let reading = self.reading(position).or(entry.reading);
        self.judge(&Named { position, source: entry.source, reading }, Arrived::Handed(entry))
    }

    /// The router's reading of the record at `position`, if the read order carries one.
    fn reading(&self, position: u64) -> Option<Reading> {
        self.readings.and_then(|r| r.get(position % read_order::MAX_RECORDS))
    }
}

impl RunSink for Dispatch<'_, '_> {
    fn record(&mut self, offset: i64, msg: &Consumed<'_>) -> Result<(), KafkaLayerError> {
        let Some((first, run_start)) = self.run else {
            return Err(KafkaLayerError::Internal("named input: a record handed over outside a run".into()));
        };
        let position = run_start + (offset - first.offset) as u64;
        let named = Named { position, source: SourceRef { offset, ..first }, reading: self.reading(position) };
        self.judge(&named, Arrived::Read(msg))
    }

    fn waiting(&mut self) {
        self.guard = None;
        self.under_lock = 0;
    }
}

/// An input record as its read-order record names it.
struct Named<'r> {
    /// Its virtual position.
    position: u64,
    /// Where it was read.
    source: SourceRef<'r>,
    /// The router's reading of it, if the read order carries one.
    reading: Option<Reading>,
}

/// A named input record as it came: read from the input, or copied into a
/// page by the router of this process.
#[derive(Clone, Copy)]
enum Arrived<'r, 'm> {
    Read(&'r Consumed<'m>),
    Handed(&'r BatchEntry<'m>),
}

/// Judges one input record a read-order record names (`named`), as it came.
fn handle_named(
    setup: &WorkerSetup,
    worker_state: &mut WorkerState,
    slice: u32,
    named: &Named<'_>,
    record: Arrived<'_, '_>,
    now: Instant,
) -> Result<(), KafkaLayerError> {
    let offset = named.position;
    let WorkerState { slices, judged, .. } = worker_state;
    let Some(owned) = slices.get_mut(&slice) else {
        return Ok(()); // revoked meanwhile
    };
    if offset < owned.state.next_offset {
        return Ok(()); // already reflected in the state
    }
    apply_logged_flushes(setup, owned, judged)?;
    owned.last_arrival = now;
    // The source makes a record named twice (by a router that re-read its
    // partitions after a crash) a re-sent copy, as the stamp of a routed copy does.
    match record {
        Arrived::Read(msg) => {
            let out_headers = OutHeaders::of(msg);
            let framed = Unframed { source: Some(named.source), payload: msg.payload(), reading: named.reading };
            let record = LogRecord { kind: Kind::Input, headers: out_headers.pairs(), out_headers, framed };
            judged.clear();
            judge(setup, owned, judged, offset, msg, &record)?;
        }
        Arrived::Handed(entry) => judge_entry(setup, owned, judged, offset, entry, named.reading)?,
    }
    taken(setup, owned, judged)
}
