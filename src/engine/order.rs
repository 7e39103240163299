//! Event-time order under disorder (design invariant 7).
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

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

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
    waiting: BinaryHeap<Reverse<Waiting<T>>>,
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
            waiting: waiting.into_iter().map(Reverse).collect(),
            suspects,
            hold_ms: None,
            max_held: usize::MAX,
            overflows: 0,
        }
    }

    /// Puts back the waiting records and suspects of a restored buffer,
    /// keeping its marks, hold, bound and overflow count.
    pub fn put_back(&mut self, waiting: impl IntoIterator<Item = Waiting<T>>, suspects: Vec<Waiting<T>>) {
        self.waiting = waiting.into_iter().map(Reverse).collect();
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
        if let Some(to) = shrink_target(self.waiting.len(), self.waiting.capacity()) {
            self.waiting.shrink_to(to);
        }
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
        self.waiting.iter().map(|w| (&w.0, false)).chain(self.suspects.iter().map(|s| (s, true)))
    }

    /// The smallest position held, if any.
    pub fn oldest_position(&self) -> Option<u64> {
        self.held().map(|(w, _)| w.position).min()
    }

    /// Takes in one record (positions increase with arrival) and passes
    /// whatever it releases to `emit`, in judging order.
    pub fn push(&mut self, time_ms: u64, position: u64, item: T, mut emit: impl FnMut(Released<T>)) {
        let record = Waiting { time_ms, position, item };
        let jump = self.settings.max_clock_jump_ms;
        match self.marks.max_seen_ms {
            None => {
                self.suspects.push(record);
                if self.suspects.len() >= self.settings.jump_confirmations.max(1) as usize {
                    self.settle_first(&mut emit);
                }
            }
            Some(max) if time_ms.saturating_sub(max) > jump => {
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

    /// Whether a [`Self::flush`] would release anything: records wait for
    /// the watermark, or the first records are held.
    pub fn flush_pending(&self) -> bool {
        let limit = self.flush_limit();
        self.waiting.peek().is_some_and(|w| limit.is_some_and(|l| w.0.time_ms <= l))
            || (self.marks.max_seen_ms.is_none() && !self.suspects.is_empty())
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
        self.waiting.push(Reverse(record));
        if let Some(watermark) = self.target(max) {
            self.raise_watermark(watermark, emit);
        }
    }

    fn raise_watermark(&mut self, to: u64, emit: &mut impl FnMut(Released<T>)) {
        let watermark = self.marks.watermark_ms.map_or(to, |w| w.max(to));
        self.marks.watermark_ms = Some(watermark);
        while self.waiting.peek().is_some_and(|w| w.0.time_ms <= watermark) {
            let Waiting { time_ms, position, item } = self.waiting.pop().expect("peeked").0;
            emit(Released::Judge { time_ms, position, item, late_by_ms: None });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spare_room_is_given_back_after_a_backlog() {
        assert_eq!(shrink_target(10_000, 28_672), Some(12_500));
        // Around its usual size, or small: left alone.
        assert_eq!(shrink_target(10_000, 16_384), None);
        assert_eq!(shrink_target(0, 1024), None);
        let mut b =
            ReorderBuffer::new(OrderSettings { lateness_ms: 1000, max_clock_jump_ms: 1 << 40, jump_confirmations: 1 });
        let mut released = 0;
        // Times far apart: each new record passes the watermark of the ones before only at the flush.
        for i in 0..50_000u64 {
            b.push(500 + i / 100, i, (), |_| released += 1);
        }
        b.flush(|_| released += 1);
        assert_eq!(released, 50_000);
        assert!(b.waiting.is_empty() && b.waiting.capacity() >= 50_000);
        b.shrink_spare();
        assert!(b.waiting.capacity() < 1024, "capacity {} after the backlog", b.waiting.capacity());
    }

    fn settings(lateness_ms: u64) -> OrderSettings {
        OrderSettings { lateness_ms, max_clock_jump_ms: 10_000, jump_confirmations: 3 }
    }

    /// Pushes `(time, position)` records; returns what came out, as
    /// `(position, late_by)` for judged and `(position, "reject")` for rejected.
    fn run(b: &mut ReorderBuffer<()>, records: &[(u64, u64)]) -> Vec<String> {
        let mut out = Vec::new();
        for &(t, p) in records {
            b.push(t, p, (), |r| out.push(describe(&r)));
        }
        out
    }

    fn describe(r: &Released<()>) -> String {
        match r {
            Released::Judge { position, late_by_ms: None, .. } => format!("{position}"),
            Released::Judge { position, late_by_ms: Some(l), .. } => format!("{position} late {l}"),
            Released::Reject { position, ahead_ms, .. } => format!("{position} reject {ahead_ms}"),
        }
    }

    #[test]
    fn releases_in_time_order_once_the_watermark_passes() {
        let mut b = ReorderBuffer::new(settings(100));
        // Arrival order: 0@1000, 1@1050, 2@1020, 3@1150 (watermark 1050), 4@1300 (watermark 1200).
        let out = run(&mut b, &[(1000, 0), (1050, 1), (1020, 2), (1150, 3), (1300, 4)]);
        assert_eq!(out, ["0", "2", "1", "3"]);
        assert_eq!(b.marks(), OrderMarks { max_seen_ms: Some(1300), watermark_ms: Some(1200) });
        // Behind the watermark: late, released at once.
        assert_eq!(run(&mut b, &[(1199, 5)]), ["5 late 1"]);
        // Ties in time: by position.
        assert_eq!(run(&mut b, &[(1250, 6), (1250, 7), (1400, 8)]), ["6", "7", "4"]);
        let mut rest = Vec::new();
        b.flush(|r| rest.push(describe(&r)));
        assert_eq!(rest, ["8"]);
        assert_eq!(b.waiting_len(), 0);
    }

    #[test]
    fn zero_lateness_is_arrival_order_for_ordered_input() {
        let mut b = ReorderBuffer::new(settings(0));
        assert_eq!(run(&mut b, &[(5, 0), (5, 1), (7, 2), (6, 3)]), ["0", "1", "2", "3 late 1"]);
    }

    #[test]
    fn a_lone_jump_is_rejected_and_a_confirmed_one_admitted() {
        let mut b = ReorderBuffer::new(settings(0));
        // The first three are settled together, against their median (1 001).
        assert_eq!(run(&mut b, &[(1_000, 0), (99_000, 1), (1_001, 2)]), ["0", "1 reject 97999", "2"]);
        // Two suspects, then a normal record: both rejected.
        assert_eq!(run(&mut b, &[(50_000, 3), (50_001, 4), (1_002, 5)]), ["3 reject 48999", "4 reject 49000", "5"]);
        // Three in a row: the stream resumed after a gap.
        assert_eq!(run(&mut b, &[(90_000, 6), (90_001, 7)]), Vec::<String>::new());
        assert_eq!(b.suspects_len(), 2);
        assert_eq!(run(&mut b, &[(90_002, 8), (90_003, 9)]), ["6", "7", "8", "9"]);
        // A flush leaves suspects held; the end of input admits them.
        assert!(run(&mut b, &[(200_000, 10)]).is_empty());
        let mut out = Vec::new();
        b.flush(|r| out.push(describe(&r)));
        assert!(out.is_empty());
        b.finish(|r| out.push(describe(&r)));
        assert_eq!(out, ["10"]);
    }

    /// A stream whose very first record is stamped in the year 3000: it is
    /// rejected, and the clock starts with the others.
    #[test]
    fn the_first_records_are_measured_against_each_other() {
        let year_3000 = 32_503_680_000_000;
        let mut b = ReorderBuffer::new(settings(0));
        assert!(run(&mut b, &[(year_3000, 0), (1_000, 1)]).is_empty(), "held until three have come");
        assert_eq!(b.suspects_len(), 2);
        assert_eq!(run(&mut b, &[(1_010, 2)]), [format!("0 reject {}", year_3000 - 1_010), "1".into(), "2".into()]);
        assert_eq!(b.marks().max_seen_ms, Some(1_010));
        assert_eq!(run(&mut b, &[(1_020, 3)]), ["3"]);

        // Before 1970 (time 0) first: admitted, and late for nothing (it comes first).
        let mut b = ReorderBuffer::new(settings(0));
        assert_eq!(run(&mut b, &[(0, 0), (5_000, 1), (5_001, 2)]), ["0", "1", "2"]);

        // Fewer than three, then a flush (an idle slice): settled with what came.
        let mut b = ReorderBuffer::new(settings(0));
        assert!(!b.flush_pending());
        assert!(run(&mut b, &[(1_000, 0), (year_3000, 1)]).is_empty());
        assert!(b.flush_pending());
        let mut out = Vec::new();
        b.flush(|r| out.push(describe(&r)));
        // The lower median (1 000) is the reference: a tie goes to the earlier time.
        assert_eq!(out, ["0".to_string(), format!("1 reject {}", year_3000 - 1_000)]);
        assert!(!b.flush_pending());
    }

    #[test]
    fn a_restored_buffer_continues_identically() {
        let mut rng = crate::testkit::workload::Rng::new(7);
        let records: Vec<(u64, u64)> = (0..2_000u64).map(|i| (10_000 + i * 3 + rng.below(400), i)).collect();
        let mut whole = ReorderBuffer::new(settings(250));
        let expected = run(&mut whole, &records);
        let mut first = ReorderBuffer::new(settings(250));
        let mut got = run(&mut first, &records[..1_000]);
        let waiting: Vec<Waiting<()>> = first.held().filter(|(_, s)| !s).map(|(w, _)| w.clone()).collect();
        let mut second = ReorderBuffer::restore(settings(250), first.marks(), waiting, Vec::new());
        got.extend(run(&mut second, &records[1_000..]));
        assert_eq!(got, expected);
    }

    /// Whatever the arrival order, as long as no record comes more than the
    /// lateness behind the largest time before it, the released order is
    /// the (time, position) order of the whole input.
    #[test]
    fn bounded_disorder_comes_out_sorted() {
        let mut rng = crate::testkit::workload::Rng::new(11);
        for lateness in [0u64, 1, 50, 500] {
            // Times jittered by less than the lateness around an increasing base.
            let records: Vec<(u64, u64)> =
                (0..5_000u64).map(|i| (1_000 + i + rng.below(lateness + 1).min(lateness), i)).collect();
            let mut b = ReorderBuffer::new(settings(lateness));
            let mut out = Vec::new();
            for &(t, p) in &records {
                b.push(t, p, (), |r| out.push(r));
            }
            b.finish(|r| out.push(r));
            let got: Vec<(u64, u64)> = out
                .iter()
                .map(|r| match r {
                    Released::Judge { time_ms, position, late_by_ms: None, .. } => (*time_ms, *position),
                    other => panic!("lateness {lateness}: {other:?}"),
                })
                .collect();
            let mut sorted = records.clone();
            sorted.sort();
            assert_eq!(got, sorted, "lateness {lateness}");
        }
    }

    /// The hold keeps the watermark behind an input that may still deliver:
    /// a record that comes from it later, older than the largest time seen
    /// by more than the lateness, is still in order. Raising the hold
    /// releases; a flush stops at the hold.
    #[test]
    fn the_hold_keeps_the_watermark_behind_it() {
        let mut b = ReorderBuffer::new(settings(100));
        let mut out = Vec::new();
        b.set_hold(Some(990), |r| out.push(describe(&r)));
        assert!(out.is_empty());
        // 0@1000 .. 5@1500: without the hold the watermark would be 1 400.
        let out = run(&mut b, &[(1_000, 0), (1_100, 1), (1_200, 2), (1_300, 3), (1_400, 4), (1_500, 5)]);
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(b.marks().watermark_ms, Some(890), "hold 990 - lateness 100, below every record");
        // A flush releases nothing past the hold.
        assert!(!b.flush_pending());
        // The held-back input resumes at 950: in order, not late.
        assert!(run(&mut b, &[(950, 6)]).is_empty());
        assert!(!b.flush_pending());
        let mut out = Vec::new();
        b.set_hold(Some(1_250), |r| out.push(describe(&r)));
        assert_eq!(out, ["6", "0", "1"], "released up to 1 150");
        assert!(!b.flush_pending());
        b.flush(|r| out.push(describe(&r)));
        assert_eq!(out, ["6", "0", "1"], "a flush stops at the hold's watermark");
        assert_eq!(b.marks().watermark_ms, Some(1_150));
        // No hold: back to largest time - lateness, then a flush releases all.
        let mut out = Vec::new();
        b.set_hold(None, |r| out.push(describe(&r)));
        assert_eq!(out, ["2", "3", "4"]);
        assert!(b.flush_pending());
        b.flush(|r| out.push(describe(&r)));
        assert_eq!(out, ["2", "3", "4", "5"]);
        assert_eq!(b.overflows(), 0);
    }

    /// More than `max_held` records waiting: the hold is ignored (released
    /// as without it) and counted; a record of the held input is then late.
    #[test]
    fn the_hold_is_bounded() {
        let mut b = ReorderBuffer::new(settings(100));
        b.set_max_held(3);
        b.set_hold(Some(1_000), |_| unreachable!("nothing waits"));
        assert!(run(&mut b, &[(1_000, 0), (1_200, 1), (1_300, 2)]).is_empty());
        assert_eq!(b.waiting_len(), 3);
        // A fourth: more than 3 wait, released as if there were no hold (to 1 300).
        assert_eq!(run(&mut b, &[(1_400, 3)]), ["0", "1", "2"]);
        assert_eq!(b.overflows(), 1);
        assert_eq!(run(&mut b, &[(950, 4)]), ["4 late 350"]);
        // Under the bound again, the hold holds: the watermark stays.
        assert!(run(&mut b, &[(1_500, 5), (1_600, 6)]).is_empty());
        assert_eq!(b.marks().watermark_ms, Some(1_300));
        assert_eq!(b.overflows(), 1);
        // finish ignores the hold: nothing more can come.
        let mut out = Vec::new();
        b.finish(|r| out.push(describe(&r)));
        assert_eq!(out, ["3", "5", "6"]);
    }
}
