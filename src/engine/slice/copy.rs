//! A slice's snapshot copied while the slice goes on (copy-on-write), and
//! the slice's operations while such a copy is in progress.

use super::super::record::Extractor;
use super::codec::{SliceImage, head, image};
use super::frame::Progress;
use super::judgment::{Judgment, SliceRecord};
use super::state::SliceState;
use crate::filter::copy::CHUNK_BYTES;
use crate::filter::count as count_codec;
use crate::filter::snapshot::Skeleton;
use crate::filter::{DeleteRefusal, FilterCopy, KeyHash, SlidingFilter, Verdict};

/// A slice's snapshot as the slice was at [`SliceState::begin_copy`],
/// copied while the slice goes on: everything but the filter's cells is
/// laid out when it begins, the cells are copied in chunks, copy-on-write
/// (see [`crate::filter::copy`]), straight into the snapshot's bytes. A
/// checkpoint takes one instead of stopping the slice for a full copy.
/// While it is in progress, every record of the slice must go through
/// [`SliceState::process_copying`] with it.
#[derive(Debug)]
pub struct SliceCopy {
    offset: u64,
    filter: Copied,
}

/// How a snapshot's filter part is copied.
#[derive(Debug)]
enum Copied {
    /// The timer filter's cells, chunk by chunk while the slice goes on.
    Cells(FilterCopy),
    /// A count-based filter, encoded whole when the copy began: the slice
    /// stops for one copy of its share of `filter.memory` (a pause over
    /// 100 ms is logged as a warning, and measured in
    /// `dedupd_checkpoint_stall_seconds`). Copy-on-write would save less
    /// than for timers: every record after the warm-up writes random words
    /// all over the arrays (the resets and decrements).
    Whole(SliceImage),
}

impl SliceState {
    /// Starts a snapshot of this state in `buffer`'s memory (see
    /// [`SliceCopy`]; a checkpoint keeps one buffer for its snapshots).
    pub fn begin_copy(&self, mut buffer: Vec<u8>) -> SliceCopy {
        if let Some(count) = &self.count {
            let image = image(self, &count_codec::encode(count), buffer);
            return SliceCopy { offset: self.next_offset, filter: Copied::Whole(image) };
        }
        let head = head(self, Skeleton::of(&self.filter).len());
        if buffer.len() < head.len() {
            buffer.resize(head.len(), 0);
        }
        buffer[..head.len()].copy_from_slice(&head);
        // 8 bytes after the filter's encoding: the slice envelope's checksum.
        let filter = FilterCopy::begin(&self.filter, buffer, head.len(), 8, CHUNK_BYTES);
        SliceCopy { offset: self.next_offset, filter: Copied::Cells(filter) }
    }

    /// [`Self::process`] while `copy` (begun on this state) is in progress:
    /// the same judgments and state, and the copy stays the state as it was
    /// when the copy began.
    pub fn process_copying(
        &mut self,
        rec: &SliceRecord<'_>,
        extractor: &Extractor,
        copy: &mut SliceCopy,
        out: &mut Vec<Judgment>,
    ) {
        self.take(rec, extractor, out, |filter, hash, time_ms| copy.observe(filter, hash, time_ms))
    }

    /// [`Self::flush`] while `copy` is in progress.
    pub fn flush_copying(&mut self, copy: &mut SliceCopy, out: &mut Vec<Judgment>) {
        self.flushes_next = self.next_offset;
        self.release(out, |order, emit| order.flush(emit), |filter, hash, time_ms| copy.observe(filter, hash, time_ms))
    }

    /// [`Self::announce`] while `copy` is in progress.
    pub fn announce_copying(
        &mut self,
        offset: u64,
        entries: &[Progress<'_>],
        copy: &mut SliceCopy,
        out: &mut Vec<Judgment>,
    ) {
        self.announce_with(offset, entries, out, |filter, hash, time_ms| copy.observe(filter, hash, time_ms))
    }

    /// [`Self::delete`] while `copy` is in progress.
    pub fn delete_copying(&mut self, offset: u64, key: &[u8], copy: &mut SliceCopy) -> Result<(), DeleteRefusal> {
        self.next_offset = offset + 1;
        let hash = KeyHash::of(self.filter.params().seed, key);
        match &mut copy.filter {
            Copied::Cells(cells) => self.filter.delete_copying(&hash, cells),
            // A count kind's copy is already whole, and its timer filter idle.
            Copied::Whole(_) => self.filter.delete(&hash),
        }
    }

    /// Applies a decision of `availability.policy` to the slice log's
    /// record `rec` (see [`Self::decide_with`]); `copy`: a snapshot copy in
    /// progress, which stays the state as it was when it began.
    pub fn decide(
        &mut self,
        rec: &SliceRecord<'_>,
        extractor: &Extractor,
        deliver: bool,
        copy: Option<&mut SliceCopy>,
    ) -> bool {
        match copy {
            Some(copy) => self.decide_with(rec, extractor, deliver, |f, hash, time_ms| copy.observe(f, hash, time_ms)),
            None => self.decide_with(rec, extractor, deliver, |f, hash, time_ms| f.observe(hash, time_ms)),
        }
    }
}

impl SliceCopy {
    /// Judges an event of the timer filter while this copy is in progress
    /// (a count-based filter, copied whole, never comes here).
    fn observe(&mut self, filter: &mut SlidingFilter, hash: &KeyHash, time_ms: u64) -> Verdict {
        match &mut self.filter {
            Copied::Cells(c) => filter.observe_copying(hash, time_ms, c),
            Copied::Whole(_) => filter.observe(hash, time_ms),
        }
    }

    /// The slice offset the snapshot was taken at (it reflects every record below).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes of filter cells still to copy.
    pub fn bytes_left(&self) -> usize {
        match &self.filter {
            Copied::Cells(c) => c.bytes_left(),
            Copied::Whole(_) => 0,
        }
    }

    /// Copies up to `budget_bytes` more (at least one chunk) from `source`,
    /// the state the copy was begun on; returns whether it is complete.
    pub fn advance(&mut self, source: &SliceState, budget_bytes: usize) -> bool {
        match &mut self.filter {
            Copied::Cells(c) => c.advance(&source.filter, budget_bytes),
            Copied::Whole(_) => true,
        }
    }

    /// Copies whatever is left from `source` (the state the copy was begun
    /// on): the snapshot of that state as it was when the copy began.
    pub fn finish(self, source: &SliceState) -> SliceImage {
        match self.filter {
            Copied::Cells(c) => {
                let (buffer, filter) = c.finish(&source.filter);
                SliceImage { buffer, filter }
            }
            Copied::Whole(image) => image,
        }
    }
}
