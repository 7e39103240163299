//! Gaps in the slice log. Only dedupd's routers write `<app.id>.slices`,
//! with idempotent producers and no transactions, so on a Kafka broker the
//! offsets of a slice's partition follow one another without a gap. A
//! broker that lets a reader see past a batch it has numbered but not yet
//! stored answers a fetch with the batches after it, and the reader moves
//! on: seen on the test broker with two routers writing one slice partition
//! (docs/dev/broker.md, "Offsets visible before their records"), where the
//! slice skipped those records for good — they were never judged and never
//! delivered.
//!
//! So a record beyond the offset a slice expects next is not taken in: the
//! partition is read again from the expected offset, until the records in
//! between have arrived. It is read again only once a record past the gap
//! has come since the last seek (and at most every [`REREAD_EVERY`]): a seek
//! drops the fetch in flight, and a fetch the broker holds longer than the
//! interval (`fetch.wait.max.ms`) would otherwise never be answered. A gap still open after
//! [`PATIENCE`] is taken as real (offsets that hold nothing a reader is given,
//! such as a foreign transactional writer's markers): the slice goes on,
//! with an error in the log and `dedupd_slice_log_gaps_total{outcome="skipped"}`.
//! Input-partitions mode reads the input itself, where gaps are normal
//! (compaction, transactions): there nothing is checked.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::Offset;
use rdkafka::consumer::{BaseConsumer, ConsumerContext};

use super::setup::WorkerSetup;
use crate::config::SlicingMode;
use crate::kafka::clients;

/// How often a slice with a gap reads its partition again from the offset expected.
pub(super) const REREAD_EVERY: Duration = Duration::from_millis(50);
/// How long a gap may stay open before the slice goes on without its records.
pub(super) const PATIENCE: Duration = Duration::from_secs(30);

/// What to do with a polled slice-log record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Admit {
    /// Take it in (it is the next expected, or an old one the slice skips itself).
    Take,
    /// Leave it: records before it have not arrived yet (`opened`: the
    /// first offset missing, when this record opened the gap).
    Leave { opened: Option<u64> },
    /// Take it in: the gap before it stayed open past [`PATIENCE`].
    TakeAfterGap { expected: u64, waited: Duration },
}

/// A gap seen in one slice's partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Open {
    /// The first offset missing.
    expected: u64,
    since: Instant,
    /// When the partition may be read again from `expected`.
    reread_at: Instant,
    /// Whether a record past the gap came since the last seek: the fetch
    /// the seek started has been answered, without the records missing.
    answered: bool,
}

/// The next log offset each slice expects, and the gaps open.
#[derive(Debug, Default)]
pub(super) struct SliceLogGaps {
    next: BTreeMap<u32, u64>,
    open: BTreeMap<u32, Open>,
}

impl SliceLogGaps {
    /// The slice's partition is read from `log_offset` on (assigned or sought there).
    pub(super) fn expect(&mut self, slice: u32, log_offset: u64) {
        self.next.insert(slice, log_offset);
        self.open.remove(&slice);
    }

    /// The slice is no longer read here.
    pub(super) fn forget(&mut self, slice: u32) {
        self.next.remove(&slice);
        self.open.remove(&slice);
    }

    /// Whether the record at `log_offset` of the slice's partition is
    /// taken in now; a record taken moves the offset expected past it.
    pub(super) fn admit(&mut self, slice: u32, log_offset: u64, now: Instant) -> Admit {
        let Some(next) = self.next.get_mut(&slice) else {
            return Admit::Take; // not positioned by the worker: nothing to hold it to
        };
        if log_offset < *next {
            return Admit::Take; // read again after a seek: the slice knows it has it
        }
        if log_offset == *next {
            *next += 1;
            self.open.remove(&slice);
            return Admit::Take;
        }
        let expected = *next;
        let opened = !self.open.contains_key(&slice);
        let open = self.open.entry(slice).or_insert(Open { expected, since: now, reread_at: now, answered: true });
        open.answered = true;
        let waited = now.saturating_duration_since(open.since);
        if waited < PATIENCE {
            return Admit::Leave { opened: opened.then_some(expected) };
        }
        *next = log_offset + 1;
        self.open.remove(&slice);
        Admit::TakeAfterGap { expected, waited }
    }

    /// The slices whose partition is to be read again now, from the offset
    /// each expects: those whose last read was answered past the gap, at
    /// most every [`REREAD_EVERY`].
    pub(super) fn rereads_due(&mut self, now: Instant) -> Vec<(u32, u64)> {
        let mut due = Vec::new();
        for (&slice, open) in &mut self.open {
            if open.answered && now >= open.reread_at {
                open.reread_at = now + REREAD_EVERY;
                open.answered = false;
                due.push((slice, open.expected));
            }
        }
        due
    }
}

/// Whether the slice-log record at `log_offset` of `slice` is taken in now
/// (see the module documentation); logs and counts each gap.
pub(super) fn admitted(
    setup: &WorkerSetup,
    gaps: &mut SliceLogGaps,
    slice: u32,
    log_offset: u64,
    now: Instant,
) -> bool {
    if setup.cfg.slicing == SlicingMode::InputPartitions {
        return true;
    }
    match gaps.admit(slice, log_offset, now) {
        Admit::Take => true,
        Admit::Leave { opened: None } => false,
        Admit::Leave { opened: Some(expected) } => {
            setup.metrics.slices.slice_log_gaps.with_label_values(&[&slice.to_string(), "waited"]).inc();
            log::info!(
                "slice {slice}: the slice log gave offset {log_offset} before offsets {expected}..{log_offset} \
                 could be read; reading them again until they can"
            );
            false
        }
        Admit::TakeAfterGap { expected, waited } => {
            setup.metrics.slices.slice_log_gaps.with_label_values(&[&slice.to_string(), "skipped"]).inc();
            log::error!(
                "slice {slice}: offsets {expected}..{log_offset} of {} could not be read for {:.0} s; going on \
                 without whatever they held (records there, if any, are not judged)",
                setup.slice_topic,
                waited.as_secs_f64()
            );
            true
        }
    }
}

/// Reads the partitions of the slices waiting on a gap again from the
/// offset each expects (see [`SliceLogGaps::rereads_due`]); the records
/// of theirs the worker has taken already go to `stale`.
pub(super) fn reread<C: ConsumerContext>(
    setup: &WorkerSetup,
    consumer: &BaseConsumer<C>,
    gaps: &mut SliceLogGaps,
    stale: &mut Vec<i32>,
    now: Instant,
) {
    for (slice, log_offset) in gaps.rereads_due(now) {
        let at = Offset::Offset(log_offset as i64);
        if let Err(e) = clients::seek_started(consumer, &setup.slice_topic, slice as i32, at) {
            log::warn!("slice {slice}: cannot read its partition again from offset {log_offset}: {e}");
        }
        stale.push(slice as i32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The records of a slice partition arrive as the test broker gave them
    /// when two routers wrote it: the batch at 10..16 became readable only
    /// after the one at 16.., which the fetch returned first.
    #[test]
    fn a_record_past_a_gap_waits_until_the_gap_is_filled() {
        let t = Instant::now();
        let mut gaps = SliceLogGaps::default();
        gaps.expect(3, 10);
        assert_eq!(gaps.admit(3, 16, t), Admit::Leave { opened: Some(10) }, "offsets 10..16 not read yet");
        assert_eq!(gaps.admit(3, 17, t), Admit::Leave { opened: None });
        assert_eq!(gaps.rereads_due(t), vec![(3, 10)], "read again from 10 at once");
        assert_eq!(gaps.rereads_due(t + REREAD_EVERY * 10), vec![], "not while the fetch of that seek is unanswered");
        assert_eq!(
            gaps.admit(3, 16, t + REREAD_EVERY / 2),
            Admit::Leave { opened: None },
            "answered, still past the gap"
        );
        assert_eq!(gaps.rereads_due(t + REREAD_EVERY / 2), vec![], "not before REREAD_EVERY");
        assert_eq!(gaps.rereads_due(t + REREAD_EVERY), vec![(3, 10)]);
        // Read again from 10: the batch is there now.
        for offset in 10..18 {
            assert_eq!(gaps.admit(3, offset, t + REREAD_EVERY), Admit::Take, "offset {offset}");
        }
        assert_eq!(gaps.rereads_due(t + REREAD_EVERY * 4), vec![], "the gap is closed");
        // Records the slice has taken in already, polled again after a seek.
        assert_eq!(gaps.admit(3, 12, t), Admit::Take);
        assert_eq!(gaps.admit(3, 18, t), Admit::Take);
    }

    #[test]
    fn a_gap_open_past_the_patience_is_skipped_once() {
        let t = Instant::now();
        let mut gaps = SliceLogGaps::default();
        gaps.expect(0, 5);
        assert_eq!(gaps.admit(0, 9, t), Admit::Leave { opened: Some(5) });
        assert_eq!(
            gaps.admit(0, 9, t + PATIENCE / 2),
            Admit::Leave { opened: None },
            "the gap counts from when it was first seen"
        );
        assert_eq!(gaps.admit(0, 9, t + PATIENCE), Admit::TakeAfterGap { expected: 5, waited: PATIENCE });
        assert_eq!(gaps.admit(0, 10, t + PATIENCE), Admit::Take);
        assert_eq!(gaps.rereads_due(t + PATIENCE * 2), vec![]);
    }

    #[test]
    fn a_seek_or_a_revocation_resets_what_is_expected() {
        let t = Instant::now();
        let mut gaps = SliceLogGaps::default();
        assert_eq!(gaps.admit(1, 100, t), Admit::Take, "a slice not positioned here is not checked");
        gaps.expect(1, 40);
        assert_eq!(gaps.admit(1, 41, t), Admit::Leave { opened: Some(40) });
        gaps.expect(1, 41); // sought elsewhere (after a stall, say): that gap is no longer ours
        assert_eq!(gaps.rereads_due(t), vec![]);
        assert_eq!(gaps.admit(1, 41, t), Admit::Take);
        gaps.forget(1);
        assert_eq!(gaps.admit(1, 90, t), Admit::Take);
    }
}
