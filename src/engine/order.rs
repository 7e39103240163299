//! Event-time order under disorder (docs/design.md, invariant 7).
//!
//! Records arrive in any order; verdicts must be those of the exact oracle
//! over event-time order. A [`ReorderBuffer`] holds each record until the
//! *watermark* — the largest time seen minus the lateness — passes it, then
//! releases records in (time, position) order. What is released when
//! follows only from the sequence of records pushed (and the explicit
//! [`ReorderBuffer::flush`] calls), never from a clock, so a replay of the
//! same log makes the same decisions.
//!
//! Three kinds of record leave the buffer:
//! - **in order**: released once the watermark reaches its time;
//! - **late**: it arrived behind the watermark (more than the lateness
//!   behind the largest time seen). It is released at once, before anything
//!   buffered (all of which is newer), and the caller judges it at its own
//!   time (the filter keeps cells for the window plus the lateness);
//! - **rejected**: its time is more than `max_clock_jump` ahead of the
//!   largest time seen. One such record would move the clock far enough to
//!   expire the window, so it is held as a *suspect*: if the next readable
//!   records are not suspects too, it is rejected (dead-lettered by the
//!   caller with reason `time_jump`); if `jump_confirmations` suspects
//!   arrive in a row, the stream really jumped (it resumed after a gap) and
//!   they are all admitted in arrival order.
//!
//! **The hold** (repartition mode, per-input watermarks): the caller may
//! also set a *hold*, the time up to which every input that can still
//! deliver has progressed (see [`super::slice`]); the watermark then never
//! passes `min(largest time seen, hold) - lateness`, so records of an input
//! that nobody routes for a while (its router died and the group has not
//! handed it over yet) find, when they come, everything newer still
//! waiting. The hold is bounded: while more than `max_held` records wait,
//! it is ignored (the watermark goes where it would without it) and each
//! such release is counted ([`ReorderBuffer::overflows`]). Both follow from
//! what was pushed and held, so a replay decides the same.
//!
//! The first records have no largest time to be measured against: were the
//! very first one stamped in the year 3000, the clock would start there and
//! every later record would be late, judged at the clock's edge forever.
//! So the first `jump_confirmations` records are all held as suspects; then
//! (or at a flush or the end, if fewer come) those more than
//! `max_clock_jump` ahead of their median time are rejected and the others
//! admitted in arrival order — what they would have met had the offenders
//! never come.

use std::cmp::Ordering;

use wait_queue::WaitQueue;

mod wait_queue;

/// The capacity to shrink a collection of `len` items to when it has room
/// for far more (`capacity`): a backlog (a stalled worker, a slow broker)
/// grows the buffers that hold records, and Rust's collections keep their
/// largest capacity — after the backlog the memory stays taken though the
/// records are gone. Far more: over twice the items plus 1024, so a
/// collection that breathes around its usual size is not reallocated over
/// and over; to a quarter above what it holds.
pub fn shrink_target(len: usize, capacity: usize) -> Option<usize> {
    (capacity > 2 * len + 1024).then_some(len + len / 4)
}

/// How a buffer orders records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrderSettings {
    /// How far behind the largest time seen a record may arrive and still be
    /// judged in event-time order, in ms.
    pub lateness_ms: u64,
    /// A record more than this far ahead of the largest time seen is a
    /// suspect, in ms.
    pub max_clock_jump_ms: u64,
    /// Suspects in a row that confirm a jump (at least 1).
    pub jump_confirmations: u32,
}

/// A record leaving the buffer, in the order the caller must judge records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Released<T> {
    /// Judge it now, at `time_ms`. `late_by_ms` is set for a record that
    /// arrived behind the watermark: by how much.
    Judge { time_ms: u64, position: u64, item: T, late_by_ms: Option<u64> },
    /// Its time was `ahead_ms` ahead of the largest time seen and no other
    /// record confirmed the jump: it is not judged.
    Reject { time_ms: u64, position: u64, item: T, ahead_ms: u64 },
}

/// A record waiting in the buffer.
#[derive(Clone, Debug)]
pub struct Waiting<T> {
    pub time_ms: u64,
    pub position: u64,
    pub item: T,
}

impl<T> PartialEq for Waiting<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.time_ms, self.position) == (other.time_ms, other.position)
    }
}
impl<T> Eq for Waiting<T> {}
impl<T> PartialOrd for Waiting<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Waiting<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.time_ms, self.position).cmp(&(other.time_ms, other.position))
    }
}

/// The part of a buffer's state that is not its records: with the records
/// (re-read from the log) it restores the buffer exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrderMarks {
    /// The largest time admitted so far.
    pub max_seen_ms: Option<u64>,
    /// Records at or before this time have been released.
    pub watermark_ms: Option<u64>,
}

/// Holds records until the watermark passes them (see the module docs).
#[derive(Clone, Debug)]
pub struct ReorderBuffer<T> {
    settings: OrderSettings,
    marks: OrderMarks,
    waiting: WaitQueue<T>,
    /// Records too far ahead, in arrival order, awaiting confirmation.
    suspects: Vec<Waiting<T>>,
    /// The watermark stays at or below this minus the lateness (`None`: no hold).
    hold_ms: Option<u64>,
    /// More records waiting than this: the hold is ignored.
    max_held: usize,
    /// Releases the hold's bound forced.
    overflows: u64,
}

impl<T> ReorderBuffer<T> {
    pub fn new(settings: OrderSettings) -> Self {
        Self::restore(settings, OrderMarks::default(), Vec::new(), Vec::new())
    }

    /// A buffer as it was: its marks, the records that were waiting and the
    /// suspects (in arrival order).
    pub fn restore(
        settings: OrderSettings,
        marks: OrderMarks,
        waiting: impl IntoIterator<Item = Waiting<T>>,
        suspects: Vec<Waiting<T>>,
    ) -> Self {
        ReorderBuffer {
            settings,
            marks,
            waiting: waiting.into_iter().collect(),
            suspects,
            hold_ms: None,
            max_held: usize::MAX,
            overflows: 0,
        }
    }

    /// Puts back the waiting records and suspects of a restored buffer,
    /// keeping its marks, hold, bound and overflow count.
    pub fn put_back(&mut self, waiting: impl IntoIterator<Item = Waiting<T>>, suspects: Vec<Waiting<T>>) {
        self.waiting = waiting.into_iter().collect();
        self.suspects = suspects;
    }

    /// Bounds the hold: while more than `max_held` records wait it is ignored.
    pub fn set_max_held(&mut self, max_held: usize) {
        self.max_held = max_held;
    }

    /// The hold (see the module docs).
    pub fn hold_ms(&self) -> Option<u64> {
        self.hold_ms
    }

    /// Gives back the room a backlog left: the buffer keeps the capacity of
    /// the most records it ever held (see [`shrink_target`]).
    pub fn shrink_spare(&mut self) {
        self.waiting.shrink_spare();
        if let Some(to) = shrink_target(self.suspects.len(), self.suspects.capacity()) {
            self.suspects.shrink_to(to);
        }
    }

    /// Releases the hold's bound forced so far.
    pub fn overflows(&self) -> u64 {
        self.overflows
    }

    /// Restores the overflow count (from a snapshot).
    pub fn set_overflows(&mut self, overflows: u64) {
        self.overflows = overflows;
    }

    /// Sets the hold without releasing anything: for a hold that can only
    /// have gone down (a lower hold never lowers the watermark).
    pub fn hold_at(&mut self, hold_ms: Option<u64>) {
        self.hold_ms = hold_ms;
    }

    /// Sets the hold and releases what it no longer holds back.
    pub fn set_hold(&mut self, hold_ms: Option<u64>, mut emit: impl FnMut(Released<T>)) {
        self.hold_ms = hold_ms;
        if let Some(to) = self.marks.max_seen_ms.and_then(|max| self.target(max)) {
            self.raise_watermark(to, &mut emit);
        }
    }

    /// Where the watermark goes with `max` the largest time seen: the
    /// lateness behind `max`, or behind the hold if that is lower and no
    /// more than `max_held` records wait.
    fn target(&mut self, max: u64) -> Option<u64> {
        let free = max.checked_sub(self.settings.lateness_ms);
        let Some(hold) = self.hold_ms.filter(|&h| h < max) else {
            return free;
        };
        let held = hold.checked_sub(self.settings.lateness_ms);
        if held >= free {
            return free;
        }
        if self.waiting.len() > self.max_held {
            self.overflows += 1;
            return free;
        }
        held
    }

    /// How far a flush releases: to the largest time seen — unless an
    /// input holds, which has not said it is idle and may still deliver
    /// records up to the lateness behind its progress: then no further
    /// than the watermark already is (the hold is lifted by its progress,
    /// or by its router announcing it idle, not by the slice's silence,
    /// which is what a rebalance looks like from here).
    fn flush_limit(&self) -> Option<u64> {
        let max = self.marks.max_seen_ms?;
        match self.hold_ms {
            None => Some(max),
            Some(h) => h.min(max).checked_sub(self.settings.lateness_ms),
        }
    }

    pub fn settings(&self) -> &OrderSettings {
        &self.settings
    }

    pub fn marks(&self) -> OrderMarks {
        self.marks
    }

    /// Records waiting for the watermark.
    pub fn waiting_len(&self) -> usize {
        self.waiting.len()
    }

    /// Records held as suspects.
    pub fn suspects_len(&self) -> usize {
        self.suspects.len()
    }

    /// Every record held (waiting or suspect), in no particular order.
    pub fn held(&self) -> impl Iterator<Item = (&Waiting<T>, bool)> {
        self.waiting.iter().map(|w| (w, false)).chain(self.suspects.iter().map(|s| (s, true)))
    }

    /// The smallest position held, if any.
    pub fn oldest_position(&self) -> Option<u64> {
        self.held().map(|(w, _)| w.position).min()
    }

    /// Takes in one record (positions increase with arrival) and passes
    /// whatever it releases to `emit`, in judging order.
    pub fn push(&mut self, time_ms: u64, position: u64, item: T, mut emit: impl FnMut(Released<T>)) {
        let record = Waiting { time_ms, position, item };
        match self.marks.max_seen_ms {
            None => {
                self.suspects.push(record);
                if self.suspects.len() >= self.settings.jump_confirmations.max(1) as usize {
                    self.settle_first(&mut emit);
                }
            }
            Some(_) if self.jumps_ahead(time_ms) => {
                self.suspects.push(record);
                if self.suspects.len() >= self.settings.jump_confirmations.max(1) as usize {
                    for s in std::mem::take(&mut self.suspects) {
                        self.admit(s, &mut emit);
                    }
                }
            }
            _ => {
                self.reject_suspects(&mut emit);
                self.admit(record, &mut emit);
            }
        }
    }

    /// Whether a record at `time_ms` is more than `max_clock_jump` ahead
    /// of the largest time seen (none seen: no): a broken clock until
    /// confirmed, held as a suspect by [`Self::push`].
    pub fn jumps_ahead(&self, time_ms: u64) -> bool {
        self.marks.max_seen_ms.is_some_and(|max| time_ms.saturating_sub(max) > self.settings.max_clock_jump_ms)
    }

    /// Whether a [`Self::flush`] would release anything: records wait for
    /// the watermark, or the first records are held.
    pub fn flush_pending(&self) -> bool {
        let limit = self.flush_limit();
        self.waiting.peek().is_some_and(|w| limit.is_some_and(|l| w.time_ms <= l))
            || (self.marks.max_seen_ms.is_none() && !self.suspects.is_empty())
    }

    /// Whether the hold alone keeps records waiting: records wait, none of
    /// which a [`Self::flush`] would release.
    pub fn hold_keeps_back(&self) -> bool {
        self.hold_ms.is_some() && !self.waiting.is_empty() && !self.flush_pending()
    }

    /// Releases every waiting record past the hold, as [`Self::flush`] does
    /// without one: the hold's bound was reached in bytes (the caller's
    /// measure; counted as an overflow). The watermark moves to the largest
    /// time seen; records the held input delivers behind it later are late.
    pub fn flush_past_hold(&mut self, mut emit: impl FnMut(Released<T>)) {
        self.overflows += 1;
        if self.marks.max_seen_ms.is_none() {
            self.settle_first(&mut emit);
        }
        if let Some(max) = self.marks.max_seen_ms {
            self.raise_watermark(max, &mut emit);
        }
    }

    /// Releases every waiting record, as if the lateness were over (an idle
    /// input, or its end): the watermark moves to the largest time seen —
    /// not past the hold's watermark, though (see `flush_limit`).
    /// The first records, held for want of a reference, are settled first;
    /// later suspects stay held: nothing has confirmed or refuted them yet.
    pub fn flush(&mut self, mut emit: impl FnMut(Released<T>)) {
        if self.marks.max_seen_ms.is_none() {
            self.settle_first(&mut emit);
        }
        if let Some(limit) = self.flush_limit() {
            self.raise_watermark(limit, &mut emit);
        }
    }

    /// The end of the input: nothing can come after, so suspects are
    /// admitted (no later record can be hurt by the jump) and everything is
    /// released.
    pub fn finish(&mut self, mut emit: impl FnMut(Released<T>)) {
        self.hold_ms = None;
        if self.marks.max_seen_ms.is_none() {
            self.settle_first(&mut emit);
        }
        for s in std::mem::take(&mut self.suspects) {
            self.admit(s, &mut emit);
        }
        self.flush(emit);
    }

    /// Settles the first records (held while no time had been admitted):
    /// those more than `max_clock_jump` ahead of their median time are
    /// rejected, the others admitted in arrival order.
    fn settle_first(&mut self, emit: &mut impl FnMut(Released<T>)) {
        let mut times: Vec<u64> = self.suspects.iter().map(|s| s.time_ms).collect();
        if times.is_empty() {
            return;
        }
        times.sort_unstable();
        let median = times[(times.len() - 1) / 2];
        for s in std::mem::take(&mut self.suspects) {
            let ahead_ms = s.time_ms.saturating_sub(median);
            if ahead_ms > self.settings.max_clock_jump_ms {
                let Waiting { time_ms, position, item } = s;
                emit(Released::Reject { time_ms, position, item, ahead_ms });
            } else {
                self.admit(s, emit);
            }
        }
    }

    fn reject_suspects(&mut self, emit: &mut impl FnMut(Released<T>)) {
        let max = self.marks.max_seen_ms.unwrap_or(0);
        for Waiting { time_ms, position, item } in self.suspects.drain(..) {
            // Saturating: a restored suspect's time is re-read from the log,
            // and with other `input.time` settings it need not be ahead at all.
            emit(Released::Reject { time_ms, position, item, ahead_ms: time_ms.saturating_sub(max) });
        }
    }

    fn admit(&mut self, record: Waiting<T>, emit: &mut impl FnMut(Released<T>)) {
        if let Some(watermark) = self.marks.watermark_ms
            && record.time_ms < watermark
        {
            let Waiting { time_ms, position, item } = record;
            emit(Released::Judge { time_ms, position, item, late_by_ms: Some(watermark - time_ms) });
            return;
        }
        let max = self.marks.max_seen_ms.map_or(record.time_ms, |m| m.max(record.time_ms));
        self.marks.max_seen_ms = Some(max);
        self.waiting.push(record);
        if let Some(watermark) = self.target(max) {
            self.raise_watermark(watermark, emit);
        }
    }

    fn raise_watermark(&mut self, to: u64, emit: &mut impl FnMut(Released<T>)) {
        let watermark = self.marks.watermark_ms.map_or(to, |w| w.max(to));
        self.marks.watermark_ms = Some(watermark);
        while self.waiting.peek().is_some_and(|w| w.time_ms <= watermark) {
            let Waiting { time_ms, position, item } = self.waiting.pop().expect("peeked");
            emit(Released::Judge { time_ms, position, item, late_by_ms: None });
        }
    }
}

#[cfg(test)]
mod tests;
