//! The per-record path: a slice-log record is taken in (judged, or a
//! router's progress, a delete request, a batch's records, a record of a
//! policy range), its judgments emitted ([`super::emit`]); and the idle
//! flushes that release what waits for the watermark.

use std::time::Instant;

use rdkafka::message::Headers;

use crate::kafka::consumed::Consumed;

use super::emit::emit;
use super::owned::OwnedSlice;
use super::policy::{decide_early, decide_logged, log_and_wait};
use super::setup::WorkerSetup;
use super::state::WorkerState;
use crate::engine::slice::{MAX_TOPIC_BYTES, StageNotes};
use crate::engine::{
    InvalidReason, InvalidRecord, Judgment, Progress, Reading, RecordView, ReleasePos, SliceRecord, SliceVerdict,
    SourceRef,
};
use crate::filter::SliceFilter;
use crate::filter::timer::sliding::PREFETCH_DISTANCE;
use crate::kafka::held_record::HeldRecord;
use crate::kafka::out_record::{Origin, OutRecord};
use crate::kafka::restore::{LoggedFlush, PolicyRange, flush_record, range_of};
use crate::kafka::slice_log::batch::{Batch, BatchEntry};
use crate::kafka::slice_log::{Holds, Kind, LogRecord, broken_frame, read_order};
use crate::kafka::{KafkaLayerError, headers};

/// Flushes every owned slice that holds records for the watermark and has
/// received nothing for the lateness (at least 100 ms): with no more input,
/// nothing would ever release them. Not during a silent replay, which must
/// only flush where the original run did (its flushes are logged). Not
/// past the hold either (repartition mode): a slice that hears only
/// progress records, or nothing, while an input partition that is not idle
/// waits for its router (a rebalance), releases nothing that partition
/// may still come before.
pub(super) fn flush_idle(setup: &WorkerSetup, worker_state: &mut WorkerState) -> Result<(), KafkaLayerError> {
    let idle_after = setup.path.idle_after;
    let WorkerState { slices, judged, .. } = worker_state;
    for owned in slices.values_mut() {
        apply_logged_flushes(setup, owned, judged)?;
        if owned.state.order.flush_pending() && !replaying(owned) && owned.last_arrival.elapsed() >= idle_after {
            idle_flush(setup, owned, judged, false)?;
        }
    }
    Ok(())
}

/// Whether the slice is in a silent replay, which must flush only where
/// the original run did (its flushes are logged).
fn replaying(owned: &OwnedSlice) -> bool {
    !owned.flushes.is_empty() || owned.replay.all().any(|y| arrivals_to_replay(y, owned.state.next_offset))
}

/// Flushes a slice that holds more than `slicing.max_held_bytes` of
/// records, as an idle flush: logged before it is applied, so a replay
/// releases at the same place and the verdicts still follow from the logs
/// (docs/design.md, invariant 1) — the trigger is memory, the decision is in the
/// log. When the hold alone keeps the records back (an input partition
/// nobody routes), the flush goes past it, logged as such, as the hold's
/// bound in records (`slicing.max_held`) does: the memory is bounded in
/// bytes whatever holds the records.
fn flush_over_budget(
    setup: &WorkerSetup,
    owned: &mut OwnedSlice,
    judged: &mut Vec<Judgment>,
) -> Result<(), KafkaLayerError> {
    let over = owned.held.bytes() as u64 > setup.path.max_held_bytes;
    if !over || replaying(owned) {
        return Ok(());
    }
    let past_hold = if owned.state.order.flush_pending() {
        false
    } else if owned.state.order.hold_keeps_back() {
        true
    } else {
        return Ok(());
    };
    setup.metrics.hold.held_bytes_flushes.with_label_values(&[&owned.state.slice.to_string()]).inc();
    idle_flush(setup, owned, judged, past_hold)
}

/// Whether a silent replay up to the last output `y` still waits for the
/// arrival of a record, the slice having taken in every record before
/// `next_offset`. Then an idle flush must wait: its judgments would come
/// before ones the replay has still to make. Once the record `y` names
/// has arrived (`y.after < next_offset`), every judgment up to `y` has been
/// made — a flush now comes after it. (A flush `y` is the logged flushes'
/// business.) Not `y.after >= next_offset - 1`: a slice restored right
/// after its last output would then never flush its waiting records when
/// no record comes after (a rebalance storm's last restore).
fn arrivals_to_replay(y: ReleasePos, next_offset: u64) -> bool {
    !y.flush && y.after >= next_offset
}

/// Processes one slice-log record: reads it once ([`LogRecord`]), then
/// takes it in as what it is — an input record judged, a router's progress,
/// a delete request, or a record a policy range decides — and emits the
/// judgments it releases; then applies a logged idle flush that came right
/// after it (replay).
pub(super) fn handle(
    setup: &WorkerSetup,
    worker_state: &mut WorkerState,
    msg: &Consumed<'_>,
    now: Instant,
) -> Result<(), KafkaLayerError> {
    let slice = msg.partition() as u32;
    let WorkerState { slices, judged, deciding, .. } = worker_state;
    let Some(owned) = slices.get_mut(&slice) else {
        return match deciding.get_mut(&slice) {
            Some(d) => decide_early(setup, d, slice, msg, &LogRecord::read(setup.path.log_format, msg)),
            None => Ok(()), // fetched just before a revocation, or while restoring
        };
    };
    // With read orders or batches, a slice-log record (a router's
    // progress, a delete request) is at index 0 of its offset's virtual
    // positions; a batch's records at the ones after (a slice may resume
    // in the middle of a batch).
    let offset = setup.slice_position(msg.offset() as u64);
    let batch_end = (setup.path.log_format == Holds::Batches).then(|| setup.slice_position(msg.offset() as u64 + 1));
    if offset < owned.state.next_offset && batch_end.is_none_or(|end| end <= owned.state.next_offset) {
        return Ok(()); // already reflected in the state
    }
    // A logged idle flush due after the slice's last record comes before
    // this one: a slice restored from a snapshot taken between a record and
    // the flush after it must not wait for the worker's idle check, which a
    // record arriving first would overtake (the flush would be skipped, and
    // the replay would release its records at other positions).
    apply_logged_flushes(setup, owned, judged)?;
    let record = LogRecord::read(setup.path.log_format, msg);
    if record.kind == Kind::Batch {
        return take_batch(setup, owned, judged, msg, &record, now);
    }
    if offset < owned.state.next_offset {
        return Ok(()); // a control record already taken in
    }
    owned.ranges.retain(|r| r.to >= offset);
    let entry = Entry::of(&record, range_of(&owned.ranges, offset));
    if entry.arrives() {
        owned.last_arrival = now;
    }
    judged.clear();
    match entry {
        Entry::Input(record) => judge(setup, owned, judged, offset, msg, record)?,
        Entry::Decided(record, range) => decide_logged(setup, owned, msg, record, range)?,
        Entry::Progress { decided: false } => take_progress(setup, owned, judged, offset, msg)?,
        Entry::Progress { decided: true } => owned.state.next_offset = offset + 1,
        Entry::Foreign => {
            log::warn!(
                "slice {slice}: the record at slice-log offset {} is not one dedupd writes; skipped",
                msg.offset()
            );
            owned.state.next_offset = offset + 1;
        }
        Entry::Delete => take_delete(setup, owned, offset, msg),
    }
    taken(setup, owned, judged)
}

/// Takes in the batch `msg` (read as `record`). One that cannot be read
/// (damaged, or written by another writer) is refused whole at its first
/// position, to the dead letters with the reason `bad_frame` and why: the
/// records in it are unknown. A replay refuses it again at the same place.
fn take_batch(
    setup: &WorkerSetup,
    owned: &mut OwnedSlice,
    judged: &mut Vec<Judgment>,
    msg: &Consumed<'_>,
    record: &LogRecord<'_>,
    now: Instant,
) -> Result<(), KafkaLayerError> {
    let log_offset = msg.offset() as u64;
    let batch = match Batch::decode(msg.payload().unwrap_or_default()) {
        Ok(batch) => batch,
        Err(e) => {
            let offset = read_order::position(log_offset, 0);
            if offset < owned.state.next_offset {
                return Ok(());
            }
            owned.last_arrival = now;
            let why = InvalidRecord { reason: InvalidReason::BadFrame, detail: format!("{e}") };
            judged.clear();
            refuse(setup, owned, judged, offset, msg, record, why)?;
            return taken(setup, owned, judged);
        }
    };
    owned.last_arrival = now;
    let prefetch = owned.state.filter.worth_prefetching();
    for (i, entry) in batch.entries.iter().enumerate() {
        let position = read_order::position(log_offset, i as u64);
        if position < owned.state.next_offset {
            continue; // already reflected in the state
        }
        if prefetch {
            prefetch_ahead(&owned.state.filter, &batch, i);
        }
        judge_entry(setup, owned, judged, position, entry, entry.reading)?;
        taken(setup, owned, judged)?;
    }
    Ok(())
}

/// Judges a batch's record `entry` (a slice-log batch's, or shared mode's
/// handed-over page's) at virtual position `position`, with the router's
/// reading of it if there is one.
pub(super) fn judge_entry(
    setup: &WorkerSetup,
    owned: &mut OwnedSlice,
    judged: &mut Vec<Judgment>,
    position: u64,
    entry: &BatchEntry<'_>,
    reading: Option<Reading>,
) -> Result<(), KafkaLayerError> {
    let header_list = entry.headers.pairs();
    let out = OutRecord {
        key: entry.key,
        payload: entry.payload,
        headers: entry.headers,
        timestamp_ms: entry.timestamp_ms,
        origin: Origin::Source(entry.source),
    };
    let value_len = entry.payload.map_or(0, <[u8]>::len);
    let arrival = Arrival { out, source: Some(entry.source), reading, header_list: &header_list, value_len };
    judged.clear();
    judge_arrival(setup, owned, judged, position, &arrival)
}

/// Starts fetching the filter memory of the batch's record
/// [`PREFETCH_DISTANCE`] places after `i` from the router's reading of it,
/// so that a large filter's cache misses overlap as in its own batch path
/// (a hint: a record judged by other means is judged the same).
fn prefetch_ahead(filter: &SliceFilter, batch: &Batch<'_>, i: usize) {
    if let Some(ahead) = batch.entries.get(i + PREFETCH_DISTANCE).and_then(|e| e.reading)
        && ahead.seed == filter.hash_seed()
    {
        filter.prefetch(&ahead.hash);
    }
}

/// What a slice-log record is to its slice: its kind ([`LogRecord`], read
/// once) placed against the policy ranges logged.
enum Entry<'r, 'm> {
    /// An input record: judged.
    Input(&'r LogRecord<'m>),
    /// An input record inside a decided range: decided, not judged.
    Decided(&'r LogRecord<'m>, PolicyRange),
    /// A router's progress; inside a decided range it moves nothing
    /// (nothing is released there).
    Progress { decided: bool },
    /// A delete request.
    Delete,
    /// Not a record dedupd writes: skipped.
    Foreign,
}

impl<'r, 'm> Entry<'r, 'm> {
    fn of(record: &'r LogRecord<'m>, decided: Option<PolicyRange>) -> Self {
        match (record.kind, decided) {
            (Kind::Input, None) => Entry::Input(record),
            (Kind::Input, Some(range)) => Entry::Decided(record, range),
            (Kind::Progress, decided) => Entry::Progress { decided: decided.is_some() },
            (Kind::Delete, _) => Entry::Delete,
            // Taken before (`take_batch`); never placed against policy ranges.
            (Kind::Foreign | Kind::Batch, _) => Entry::Foreign,
        }
    }

    /// Whether it is an arrival: a slice that receives none is idle (a
    /// router's progress is not one: see [`take_progress`]).
    fn arrives(&self) -> bool {
        matches!(self, Entry::Input(_) | Entry::Decided(..) | Entry::Delete)
    }
}

/// What follows every record a slice takes in: one more record since its
/// snapshot, and the logged idle flush that came right after it (replay).
pub(super) fn taken(
    setup: &WorkerSetup,
    owned: &mut OwnedSlice,
    judged: &mut Vec<Judgment>,
) -> Result<(), KafkaLayerError> {
    owned.since_checkpoint += 1;
    apply_logged_flushes(setup, owned, judged)
}

/// A router's progress record (see `crate::kafka::router`): not input, and
/// not an arrival either — a slice that receives only these is idle, and
/// its idle flush (up to the hold) is what releases its last records.
fn take_progress(
    setup: &WorkerSetup,
    owned: &mut OwnedSlice,
    judged: &mut Vec<Judgment>,
    offset: u64,
    msg: &Consumed<'_>,
) -> Result<(), KafkaLayerError> {
    // Only routers write these: a malformed one is a bug or a foreign
    // writer; it announces nothing (at the same place in a replay).
    // A topic name longer than Kafka allows is no input partition either
    // (and would not fit the snapshot's 16-bit name lengths past 64 KiB).
    let entries = Progress::parse_all(msg.payload().unwrap_or_default())
        .filter(|entries| entries.iter().all(|e| e.topic.len() <= MAX_TOPIC_BYTES))
        .unwrap_or_else(|| {
            log::warn!(
                "slice {}: the progress record at offset {offset} cannot be read (or names a topic longer than \
                 Kafka allows); skipped",
                owned.state.slice
            );
            Vec::new()
        });
    owned.state.announce(offset, &entries, judged);
    emit(setup, owned, judged, ReleasePos { after: offset, flush: false, rank: 0 }, None)
}

/// A delete request (written by a feature's key action), applied here, in
/// the log's order; the request waits for the outcome at the slice-log
/// offset it wrote.
fn take_delete(setup: &WorkerSetup, owned: &mut OwnedSlice, offset: u64, msg: &Consumed<'_>) {
    let key = msg.key().unwrap_or_default();
    let outcome = owned.state.delete(offset, key);
    if let Some(applied) = setup.requests_applied.get() {
        applied(owned.state.slice, msg.offset() as u64, outcome);
    }
}

/// Judges the consumed input record `msg` (read as `record`) at slice
/// offset (with read orders: virtual position) `offset` ([`judge_arrival`]);
/// a repartition-mode record whose frame is broken is refused instead.
pub(super) fn judge(
    setup: &WorkerSetup,
    owned: &mut OwnedSlice,
    judged: &mut Vec<Judgment>,
    offset: u64,
    msg: &Consumed<'_>,
    record: &LogRecord<'_>,
) -> Result<(), KafkaLayerError> {
    let (framed, header_list) = (&record.framed, &record.headers);
    let source_header = header_list.iter().find(|(k, _)| *k == headers::SOURCE).map(|(_, v)| *v);
    if let Some(why) = broken_frame(setup.path.log_format, msg.payload(), source_header, framed) {
        return refuse(setup, owned, judged, offset, msg, record, why);
    }
    let arrival = Arrival {
        out: OutRecord::consumed(msg, record.out_headers, framed.payload, framed.source),
        source: framed.source,
        reading: framed.reading,
        header_list,
        value_len: msg.payload().map_or(0, <[u8]>::len),
    };
    judge_arrival(setup, owned, judged, offset, &arrival)
}

/// An input record arriving at its slice, whatever form of the slice log
/// brought it: as its copies see it ([`OutRecord`]), as the extractors
/// read its headers, with its source and the router's reading if the
/// slice log carries them.
pub(super) struct Arrival<'a> {
    pub(super) out: OutRecord<'a>,
    /// Its input position when the slice log is not the input itself.
    pub(super) source: Option<SourceRef<'a>>,
    pub(super) reading: Option<Reading>,
    pub(super) header_list: &'a [(&'a str, &'a [u8])],
    /// The length of the slice-log value that brought it (what a held
    /// record counts, frame and all).
    pub(super) value_len: usize,
}

/// Judges the input record `arrival` at slice offset (with read orders:
/// virtual position) `offset`: emits the judgments it releases and keeps it
/// if it waits.
pub(super) fn judge_arrival(
    setup: &WorkerSetup,
    owned: &mut OwnedSlice,
    judged: &mut Vec<Judgment>,
    offset: u64,
    arrival: &Arrival<'_>,
) -> Result<(), KafkaLayerError> {
    let out = &arrival.out;
    let record = RecordView {
        key: out.key,
        payload: out.payload.unwrap_or_default(),
        headers: arrival.header_list,
        timestamp_ms: out.timestamp_ms,
        decoder: crate::engine::formats::payload_decoder(&setup.cfg.decoder),
    };
    let slice_record = SliceRecord { offset, record, source: arrival.source, reading: arrival.reading };
    owned.process(&slice_record, &setup.extractor, judged);
    if let Some(input) = &setup.input_counter {
        input.inc();
    }
    // No judgment of its own: it waits for the watermark.
    if !judged.iter().any(|j| j.offset == offset) {
        owned.held.insert(offset, HeldRecord::of(out, arrival.value_len));
    }
    emit(setup, owned, judged, ReleasePos { after: offset, flush: false, rank: 0 }, Some((offset, out)))?;
    // During a replay (logged flushes still to apply) this waits: the order
    // against `taken`'s logged flushes does not matter.
    flush_over_budget(setup, owned, judged)
}

/// Dead-letters the record at slice offset `offset` unjudged, for `why`:
/// what the slice does with any unreadable record (counted invalid, its
/// own release), without reading the record's bytes as a record. A replay
/// refuses it again at the same place.
fn refuse(
    setup: &WorkerSetup,
    owned: &mut OwnedSlice,
    judged: &mut Vec<Judgment>,
    offset: u64,
    msg: &Consumed<'_>,
    record: &LogRecord<'_>,
    why: InvalidRecord,
) -> Result<(), KafkaLayerError> {
    owned.state.next_offset = offset + 1;
    owned.state.counters.invalid += 1;
    if let Some(input) = &setup.input_counter {
        input.inc();
    }
    let verdict = SliceVerdict::Invalid(why);
    judged.push(Judgment { offset, verdict, late_by_ms: None, notes: StageNotes::default() });
    let rec = OutRecord::consumed(msg, record.out_headers, record.framed.payload, record.framed.source);
    emit(setup, owned, judged, ReleasePos { after: offset, flush: false, rank: 0 }, Some((offset, &rec)))
}

/// Applies the logged idle flushes due after the slice's last record (a
/// replay flushes where the original run did).
pub(super) fn apply_logged_flushes(
    setup: &WorkerSetup,
    owned: &mut OwnedSlice,
    judged: &mut Vec<Judgment>,
) -> Result<(), KafkaLayerError> {
    let last = owned.state.next_offset.checked_sub(1);
    while let Some(&flush) = owned.flushes.front() {
        if Some(flush.after) > last {
            break;
        }
        owned.flushes.pop_front();
        if Some(flush.after) == last {
            flush_slice(setup, owned, judged, flush.past_hold)?;
        }
    }
    Ok(())
}

/// Judges every record the slice holds for the watermark (an idle flush,
/// already logged) and emits the judgments.
fn flush_slice(
    setup: &WorkerSetup,
    owned: &mut OwnedSlice,
    judged: &mut Vec<Judgment>,
    past_hold: bool,
) -> Result<(), KafkaLayerError> {
    judged.clear();
    if past_hold {
        owned.state.flush_past_hold(judged);
    } else {
        owned.state.flush(judged);
    }
    let after = owned.state.next_offset.saturating_sub(1);
    setup.metrics.hold.idle_flushes.with_label_values(&[&owned.state.slice.to_string()]).inc();
    emit(setup, owned, judged, ReleasePos { after, flush: true, rank: 0 }, None)
}

/// Writes an idle flush of the slice to its flush log, waits until the
/// broker has it, then applies it: a restart replays it at the same place.
pub(super) fn idle_flush(
    setup: &WorkerSetup,
    owned: &mut OwnedSlice,
    judged: &mut Vec<Judgment>,
    past_hold: bool,
) -> Result<(), KafkaLayerError> {
    let slice = owned.state.slice;
    let after = owned.state.next_offset.saturating_sub(1);
    let payload = flush_record(LoggedFlush { after, past_hold });
    log_and_wait(setup, slice, payload.as_bytes(), &format!("idle flush after offset {after}"))?;
    owned.since_checkpoint += 1;
    flush_slice(setup, owned, judged, past_hold)
}

/// Whether a slice-log record is a router's read-order record.
pub(super) fn is_read_order(msg: &Consumed<'_>) -> bool {
    msg.headers().is_some_and(|h| h.iter().any(|h| h.key == headers::READ_ORDER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_flush_waits_only_for_arrivals_a_replay_has_still_to_judge() {
        let at = |after, flush| ReleasePos { after, flush, rank: 0 };
        // Restored at offset 1879 (records 0..=1878 taken in), last output
        // released by the arrival of 1878: nothing left to replay.
        assert!(!arrivals_to_replay(at(1878, false), 1879));
        assert!(!arrivals_to_replay(at(1500, false), 1879));
        // The last output came from records not read again yet.
        assert!(arrivals_to_replay(at(1879, false), 1879));
        assert!(arrivals_to_replay(at(2000, false), 1879));
        // A flush is replayed from the flush log, not by arrivals.
        assert!(!arrivals_to_replay(at(2000, true), 1879));
    }
}
