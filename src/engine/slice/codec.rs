//! The slice snapshot format: a versioned envelope (magic, version,
//! checksum) around the slice's position, marks, counters, held offsets,
//! the feature sections and the filter's own snapshot.

use std::collections::BTreeMap;

use super::super::order::{OrderMarks, OrderSettings, ReorderBuffer};
use super::judgment::SliceCounters;
use super::sections::{self, Sections, VERSION_BASE, VERSION_LOG_FORM};
use super::stages::{SliceStages, StageSetups};
use super::state::{LogForm, SliceState};
use crate::filter::envelope::{self, put_u32, put_u64};
use crate::filter::{FilterChoice, SnapshotError};

/// The first bytes of a slice snapshot.
pub const MAGIC: [u8; 8] = *b"DEDUPDSL";
/// The newest slice snapshot format version this release reads (2:
/// event-time order — lateness counter, order marks, flush log position
/// and held offsets; 3 to 5 add the provenance, counting and progress
/// sections at fixed places; 6 tags its sections: see `sections.rs`; 7
/// adds the form of the slice log, [`LogForm`]). A slice is written in the
/// oldest version that holds what it has, so a release before any of them
/// can restore it; all six are read.
pub const VERSION: u16 = VERSION_LOG_FORM;

/// Encodes a slice: header, position, marks, counters, then the filter's own
/// snapshot, all under one XXH3-64 checksum.
pub fn encode(state: &SliceState) -> Vec<u8> {
    let prepared = state.filter.prepare_copy();
    let head = head(state, prepared.len());
    // 8 bytes after the filter's encoding: the slice envelope's checksum.
    let (buffer, filter) = state.filter.encode(prepared, &head, 8);
    let mut image = SliceImage { buffer, filter };
    image.seal();
    image.into_buffer()
}

/// A snapshot copied while the slice goes on: everything but the filter is
/// laid out when it begins, and the filter copies itself while the slice
/// goes on (copy-on-write, see [`crate::filter::SliceFilter`]), straight
/// into the snapshot's bytes. A checkpoint takes one instead of stopping the
/// slice for a full copy.
impl SliceState {
    /// Starts a snapshot of this state in `buffer`'s memory (a checkpoint
    /// keeps one buffer for its snapshots): [`Self::finish_copy`] gives the
    /// state as it is now, whatever the slice does meanwhile.
    pub fn begin_copy(&mut self, buffer: Vec<u8>) {
        let prepared = self.filter.prepare_copy();
        let head = head(self, prepared.len());
        self.filter.begin_copy(prepared, &head, buffer, 8);
    }

    /// Bytes of filter cells still to copy.
    pub fn copy_bytes_left(&self) -> usize {
        self.filter.copy_bytes_left()
    }

    /// Copies up to `budget_bytes` more (at least one chunk); returns
    /// whether the copy is complete.
    pub fn advance_copy(&mut self, budget_bytes: usize) -> bool {
        self.filter.advance_copy(budget_bytes)
    }

    /// Copies whatever is left: the snapshot of the state as it was when
    /// the copy began (`None`: no copy in progress).
    pub fn finish_copy(&mut self) -> Option<SliceImage> {
        let (buffer, filter) = self.filter.finish_copy()?;
        Some(SliceImage { buffer, filter })
    }
}

/// The slice envelope up to its filter, whose encoding is `filter_len` bytes.
fn head(state: &SliceState, filter_len: usize) -> Vec<u8> {
    let sections = Sections::of(state);
    let version = match state.log_form {
        LogForm::Records => sections.version(),
        LogForm::Batches => VERSION_LOG_FORM,
    };
    head_in(state, &sections, version, filter_len)
}

/// [`head`] in `version`, which must hold the state's sections.
fn head_in(state: &SliceState, sections: &Sections, version: u16, filter_len: usize) -> Vec<u8> {
    let mut w = envelope::begin(MAGIC, version, 128);
    put_u32(&mut w, state.slice);
    put_u64(&mut w, state.next_offset);
    let c = &state.counters;
    for v in [c.distinct, c.duplicates, c.resends, c.invalid, c.late] {
        put_u64(&mut w, v);
    }
    let marks = state.order.marks();
    for mark in [marks.max_seen_ms, marks.watermark_ms] {
        // u64::MAX stands for none: no event time is that large.
        put_u64(&mut w, mark.unwrap_or(u64::MAX));
    }
    put_u64(&mut w, state.flushes_next);
    let held = state.held_offsets();
    put_u64(&mut w, held.len() as u64);
    for (offset, suspect) in held {
        put_u64(&mut w, offset);
        w.push(u8::from(suspect));
    }
    put_u32(&mut w, state.resend_marks.len() as u32);
    for ((topic, partition), offset) in &state.resend_marks {
        w.extend_from_slice(&(topic.len() as u16).to_le_bytes());
        w.extend_from_slice(topic.as_bytes());
        put_u32(&mut w, *partition as u32);
        put_u64(&mut w, *offset as u64);
    }
    sections.write(version, state.order.overflows(), &mut w);
    if version >= VERSION_LOG_FORM {
        w.push(match state.log_form {
            LogForm::Records => 0,
            LogForm::Batches => 1,
        });
    }
    put_u64(&mut w, filter_len as u64);
    w
}

/// [`encode`] with the sections tagged (version 6) whatever they are: what a
/// records-form slice with a section that has no fixed place is written as.
#[cfg(test)]
pub(crate) fn encode_tagged(state: &SliceState) -> Vec<u8> {
    let prepared = state.filter.prepare_copy();
    let version = if state.log_form == LogForm::Records { sections::VERSION_TAGGED } else { VERSION_LOG_FORM };
    let head = head_in(state, &Sections::of(state), version, prepared.len());
    let (buffer, filter) = state.filter.encode(prepared, &head, 8);
    let mut image = SliceImage { buffer, filter };
    image.seal();
    image.into_buffer()
}

/// Restores slice `slice` from `bytes`, checked against the configured
/// filter, with no stage on (a snapshot with a counting stage is refused).
/// The held records are listed in [`SliceState::unfilled`]: the caller
/// re-reads them from the log and calls [`SliceState::refill`].
pub fn decode(
    bytes: &[u8],
    slice: u32,
    filter: &FilterChoice,
    order: OrderSettings,
) -> Result<SliceState, SnapshotError> {
    decode_full(bytes, slice, filter, order, &StageSetups::default())
}

/// [`decode`] with the stages configured as `stages`. Each feature decides
/// what a snapshot taken with its stage set otherwise restores to (see
/// [`SliceStages::restore`]).
pub fn decode_full(
    bytes: &[u8],
    slice: u32,
    filter: &FilterChoice,
    order: OrderSettings,
    stages: &StageSetups,
) -> Result<SliceState, SnapshotError> {
    let (mut r, version) = envelope::open_any(bytes, MAGIC, VERSION_BASE..=VERSION)?;
    let got_slice = r.u32()?;
    if got_slice != slice {
        return Err(SnapshotError::ParameterMismatch {
            parameter: "slice",
            snapshot: got_slice.to_string(),
            configured: slice.to_string(),
        });
    }
    let next_offset = r.u64()?;
    let counters = SliceCounters {
        distinct: r.u64()?,
        duplicates: r.u64()?,
        resends: r.u64()?,
        invalid: r.u64()?,
        late: r.u64()?,
    };
    let mut mark = || r.u64().map(|v| (v != u64::MAX).then_some(v));
    let marks = OrderMarks { max_seen_ms: mark()?, watermark_ms: mark()? };
    let flushes_next = r.u64()?;
    let unfilled = read_held(&mut r, bytes.len())?;
    let resend_marks = read_resend_marks(&mut r)?;
    let found = sections::read(&mut r, version)?;
    let stages = SliceStages::restore(&found.stages, stages, slice)?;
    let log_form = if version >= VERSION_LOG_FORM { read_log_form(&mut r)? } else { LogForm::Records };
    let len = r.u64()? as usize;
    let filter_bytes = r.take(len)?;
    r.finish()?;
    let filter = filter.decode(filter_bytes)?;
    let mut state = SliceState {
        slice,
        filter,
        next_offset,
        resend_marks,
        counters,
        passthrough: false,
        order: ReorderBuffer::restore(order, marks, Vec::new(), Vec::new()),
        unfilled,
        flushes_next,
        stages,
        progress: found.progress,
        log_form,
    };
    let hold = state.hold();
    state.order.hold_at(hold);
    state.order.set_overflows(found.overflows);
    Ok(state)
}

/// The offsets of the held records, with whether each is a suspect
/// (`len`: the snapshot's, which bounds how many there can be).
fn read_held(r: &mut envelope::Reader<'_>, len: usize) -> Result<Vec<(u64, bool)>, SnapshotError> {
    let held = r.u64()?;
    if held > len as u64 / 9 {
        return Err(SnapshotError::Malformed(format!("slice snapshot: {held} held records cannot fit")));
    }
    let mut unfilled = Vec::with_capacity(held as usize);
    for _ in 0..held {
        let offset = r.u64()?;
        let suspect = match r.take(1)?[0] {
            0 => false,
            1 => true,
            other => return Err(SnapshotError::Malformed(format!("slice snapshot: held flag {other}"))),
        };
        unfilled.push((offset, suspect));
    }
    Ok(unfilled)
}

/// The form of the slice log the positions are in (version 7 on).
fn read_log_form(r: &mut envelope::Reader<'_>) -> Result<LogForm, SnapshotError> {
    match r.u8()? {
        0 => Ok(LogForm::Records),
        1 => Ok(LogForm::Batches),
        other => Err(SnapshotError::Malformed(format!("slice snapshot: slice-log form {other}"))),
    }
}

/// The resend marks: the highest input offset seen per input partition.
fn read_resend_marks(r: &mut envelope::Reader<'_>) -> Result<BTreeMap<(String, i32), i64>, SnapshotError> {
    let mut resend_marks = BTreeMap::new();
    for _ in 0..r.u32()? {
        let len = usize::from(r.u16()?);
        let topic = String::from_utf8(r.take(len)?.to_vec())
            .map_err(|_| SnapshotError::Malformed("slice snapshot: a topic name is not UTF-8".into()))?;
        let partition = r.u32()? as i32;
        let offset = r.u64()? as i64;
        resend_marks.insert((topic, partition), offset);
    }
    Ok(resend_marks)
}

/// A slice snapshot copied in full but for its checksums, which take a
/// pass over every byte: [`SliceImage::seal`] computes them on whichever
/// thread writes the snapshot out.
#[derive(Debug)]
pub struct SliceImage {
    /// The snapshot in its first `filter.end + 8` bytes (the buffer may be longer).
    pub(super) buffer: Vec<u8>,
    /// Where the filter's own envelope lies.
    pub(super) filter: std::ops::Range<usize>,
}

impl SliceImage {
    /// Computes the checksums; returns the snapshot's bytes, exactly what
    /// [`encode`] gives for the state.
    pub fn seal(&mut self) -> &[u8] {
        let end = self.filter.end + 8;
        envelope::seal_in_place(&mut self.buffer[self.filter.clone()]);
        envelope::seal_in_place(&mut self.buffer[..end]);
        &self.buffer[..end]
    }

    /// The buffer, for the next snapshot.
    pub fn into_buffer(self) -> Vec<u8> {
        self.buffer
    }
}
