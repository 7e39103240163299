//! The state of one slice and how it takes in the slice log: records
//! judged in event-time order, router progress, delete requests and policy
//! decisions (see the module documentation of [`super`]).

use std::collections::BTreeMap;

use super::super::order::{OrderSettings, Released, ReorderBuffer, Waiting};
use super::super::record::{Extractor, InvalidRecord, RecordView};
use super::frame::{InputProgress, Progress, SourceRef};
use super::judgment::{Judgment, SliceCounters, SliceRecord, SliceVerdict};
use super::stage::{Arrival, Judging, StageNotes};
use super::stages::{SliceStages, StageSetups};
use crate::filter::{DeleteRefusal, FilterChoice, KeyHash, SliceFilter, Verdict};

/// The state of one slice.
#[derive(Clone, Debug)]
pub struct SliceState {
    pub slice: u32,
    /// The filter that judges every released record, of the configured
    /// kind. A decaying kind's records are still released in event-time
    /// order (the same order buffer), so its verdicts follow from the log
    /// alone as the timer filter's do.
    pub filter: SliceFilter,
    /// The next slice offset to process: the state reflects every record below it.
    pub next_offset: u64,
    /// Highest input offset seen per input (topic, partition).
    pub resend_marks: BTreeMap<(String, i32), i64>,
    pub counters: SliceCounters,
    /// Pass-through: every readable record is distinct and the filter is not
    /// touched (a setting, not state: not in the snapshot). For measuring
    /// what deduplication costs.
    pub passthrough: bool,
    /// Records waiting for the watermark (or held as time-jump suspects):
    /// their key hashes, times and offsets.
    pub order: ReorderBuffer<KeyHash>,
    /// Held records a restored slice has not re-read from its log yet:
    /// offset and whether it is a suspect (see [`Self::refill`]).
    pub unfilled: Vec<(u64, bool)>,
    /// Idle flushes logged after a slice offset below this one have been
    /// applied (a slice flushes at most once after a record).
    pub flushes_next: u64,
    /// The features' stages the slice runs beside its filter, as configured.
    pub stages: SliceStages,
    /// Per input (topic, partition) announced by a router's progress
    /// record: how far it has been routed (repartition mode; empty
    /// otherwise). The watermark is held at the slowest one not idle.
    pub progress: BTreeMap<(String, i32), InputProgress>,
    /// The form of the slice log the positions above are in (in the
    /// snapshot from version 7): a restore with the other form must not
    /// read them as its own (see [`LogForm`]).
    pub log_form: LogForm,
}

/// The form of a repartition slice log, which decides what a slice's
/// positions (`next_offset`, held offsets, release positions) mean.
/// Positions of the two forms do not compare: a snapshot records its form
/// so that a restore configured with the other one can refuse it, or carry
/// it over when nothing is left to read in the old form.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogForm {
    /// One slice-log record per position: positions are slice-log offsets
    /// (`slicing.log_format = "records"`). The other modes have a form of
    /// their own each and record this one: every snapshot before version 7
    /// reads as it.
    #[default]
    Records,
    /// Batches: position `offset · 2^16 + index` (`slicing.log_format = "batches"`).
    Batches,
}

impl LogForm {
    /// The setting's value for this form, as errors name it.
    pub fn setting(self) -> &'static str {
        match self {
            LogForm::Records => "records",
            LogForm::Batches => "batches",
        }
    }
}

/// Equal when everything the snapshot holds is (the order settings and
/// pass-through are settings, the rest is state).
impl PartialEq for SliceState {
    fn eq(&self, other: &Self) -> bool {
        let held = |s: &SliceState| {
            let mut h: Vec<(u64, u64, bool)> = s.order.held().map(|(w, sus)| (w.position, w.time_ms, sus)).collect();
            h.sort_unstable();
            h
        };
        (self.slice, &self.filter, self.next_offset, &self.resend_marks, &self.counters)
            == (other.slice, &other.filter, other.next_offset, &other.resend_marks, &other.counters)
            && (self.order.marks(), &self.unfilled, self.flushes_next)
                == (other.order.marks(), &other.unfilled, other.flushes_next)
            && held(self) == held(other)
            && self.stages == other.stages
            && (&self.progress, self.order.overflows()) == (&other.progress, other.order.overflows())
            && self.log_form == other.log_form
    }
}

impl SliceState {
    /// A fresh slice that starts at `offset`, judging with the filter
    /// chosen (a timer filter's parameters choose the timer filter).
    pub fn new(slice: u32, filter: impl Into<FilterChoice>, offset: u64, order: OrderSettings) -> Self {
        SliceState {
            slice,
            filter: SliceFilter::new(filter.into()),
            next_offset: offset,
            resend_marks: BTreeMap::new(),
            counters: SliceCounters::default(),
            passthrough: false,
            order: ReorderBuffer::new(order),
            unfilled: Vec::new(),
            flushes_next: 0,
            stages: SliceStages::default(),
            progress: BTreeMap::new(),
            log_form: LogForm::Records,
        }
    }

    /// Turns the stages on as `setup` says (a stage restored with the
    /// slice is kept) or off; `dedup` is the dedup key's extractor.
    pub fn set_stages(&mut self, setup: &StageSetups) {
        self.stages.set(setup)
    }

    /// Takes in the next record of the slice log and appends to `out` the
    /// judgments it releases, in order (their release positions are
    /// `(rec.offset, rank in out)`).
    pub fn process(&mut self, rec: &SliceRecord<'_>, extractor: &Extractor, out: &mut Vec<Judgment>) {
        self.take(rec, extractor, out)
    }

    /// An idle flush after the last record taken in: judges every record
    /// waiting for the watermark (release positions `(next_offset - 1,
    /// flush, rank)`).
    pub fn flush(&mut self, out: &mut Vec<Judgment>) {
        self.flushes_next = self.next_offset;
        self.release(out, |order, emit| order.flush(emit))
    }

    /// [`Self::flush`] past the hold (see [`ReorderBuffer::flush_past_hold`]):
    /// the records it keeps back take more bytes than the slice may hold.
    pub fn flush_past_hold(&mut self, out: &mut Vec<Judgment>) {
        self.flushes_next = self.next_offset;
        self.release(out, |order, emit| order.flush_past_hold(emit))
    }

    /// Takes in the progress record at `offset` (see [`Progress`]) and
    /// appends to `out` the judgments it releases (release positions
    /// `(offset, rank)`). It judges nothing itself.
    pub fn announce(&mut self, offset: u64, entries: &[Progress<'_>], out: &mut Vec<Judgment>) {
        self.next_offset = offset + 1;
        // Every router names every partition of the input topics it reads:
        // a topic no longer named (taken out of `input.topics`) would hold
        // the watermark where it stopped, for good.
        if !entries.is_empty() {
            self.progress.retain(|(topic, _), _| entries.iter().any(|e| e.topic == topic));
        }
        for e in entries {
            let known = self.progress.entry((e.topic.to_string(), e.partition)).or_default();
            if !e.owned {
                continue; // known now (from time 0, not idle) if it was not
            }
            // The largest time wins: an old owner's last announcement may
            // come after the new owner's first.
            known.time_ms = known.time_ms.max(e.time_ms);
            known.idle = e.idle;
        }
        let hold = self.hold();
        self.release(out, |order, emit| order.set_hold(hold, emit))
    }

    /// A record of a known input partition is progress too (it need not
    /// wait for the next announcement), up to the largest time seen, and a
    /// partition announced idle delivers again: it holds the others back
    /// again. The new hold applies to the record's own push.
    ///
    /// A time more than `input.max_clock_jump` ahead of the largest seen
    /// (a broken clock, held as a suspect) is no progress at all: capped at
    /// the largest time seen it would still move a partition read behind
    /// the others (its router lags, or catches up after a rebalance) to the
    /// front, and that partition's next records would come late.
    fn progress_from_record(&mut self, src: SourceRef<'_>, time_ms: u64) {
        if self.order.jumps_ahead(time_ms) {
            return;
        }
        let Some((_, p)) = self.progress.iter_mut().find(|((t, p), _)| *p == src.partition && t == src.topic) else {
            return;
        };
        let upto = self.order.marks().max_seen_ms.map_or(0, |m| m.min(time_ms));
        if p.idle || upto > p.time_ms {
            p.idle = false;
            p.time_ms = p.time_ms.max(upto);
            let hold = self.hold();
            self.order.hold_at(hold);
        }
    }

    /// The slowest input partition that is not idle: the watermark stays
    /// the lateness behind it (`None`: nothing holds).
    pub fn hold(&self) -> Option<u64> {
        self.holding().map(|(_, time_ms)| time_ms)
    }

    /// The input partition [`Self::hold`] follows, and its progress.
    pub fn holding(&self) -> Option<(&(String, i32), u64)> {
        self.progress.iter().filter(|(_, p)| !p.idle).map(|(id, p)| (id, p.time_ms)).min_by_key(|(_, t)| *t)
    }

    fn take(&mut self, rec: &SliceRecord<'_>, extractor: &Extractor, out: &mut Vec<Judgment>) {
        let offset = rec.offset;
        self.next_offset = offset + 1;
        let now = |verdict| Judgment { offset, verdict, late_by_ms: None, notes: StageNotes::default() };
        if let Some(src) = rec.source {
            // A handful of input partitions: a scan finds the mark without
            // allocating a key per record.
            let mark = self.resend_marks.iter_mut().find(|((t, p), _)| *p == src.partition && t == src.topic);
            match mark {
                Some((_, mark)) if *mark >= src.offset => {
                    self.counters.resends += 1;
                    out.push(now(SliceVerdict::Resend));
                    return;
                }
                Some((_, mark)) => *mark = src.offset,
                None => {
                    self.resend_marks.insert((src.topic.to_string(), src.partition), src.offset);
                }
            }
        }
        let seed = self.hash_seed();
        // The router read this record with the same extractor; its reading
        // is what reading it again here would give.
        let (hash, time_ms) = match rec.reading {
            Some(r) if r.seed == seed => (r.hash, r.time_ms),
            _ => match extractor.extract(&rec.record, 0) {
                Ok(x) => (KeyHash::of(seed, &x.key), x.time_ms),
                Err(e) => {
                    self.counters.invalid += 1;
                    out.push(now(SliceVerdict::Invalid(e)));
                    return;
                }
            },
        };
        if self.passthrough {
            self.counters.distinct += 1;
            out.push(now(SliceVerdict::Distinct));
            return;
        }
        if let Some(src) = rec.source {
            self.progress_from_record(src, time_ms);
        }
        let arrival = Arrival { offset, record: &rec.record, topic: rec.source.map(|s| s.topic), seed };
        if let Err(why) = self.stages.arrived(&arrival) {
            self.counters.invalid += 1;
            out.push(now(SliceVerdict::Invalid(why)));
            return;
        }
        self.release(out, |order, emit| order.push(time_ms, offset, hash, emit))
    }

    /// Applies a delete request that is the slice log's record at `offset`
    /// (a control record `DELETE /v1/keys/{key}` wrote there): the key is forgotten at this
    /// point of the log, so a replay after a restart forgets it at the same
    /// point and every later verdict is the same. It judges nothing and
    /// releases nothing; records waiting for the watermark are not in the
    /// filter yet and are not touched.
    pub fn delete(&mut self, offset: u64, key: &[u8]) -> Result<(), DeleteRefusal> {
        self.next_offset = offset + 1;
        let hash = KeyHash::of(self.filter.hash_seed(), key);
        self.filter.delete(&hash)
    }

    /// Applies a decision of `availability.policy` (logged in the flush log)
    /// to the slice log's record `rec`, instead of judging it: `deliver`
    /// observes its key at its time (inserted unless already in the window:
    /// the record was delivered) and counts it distinct; `drop` changes
    /// nothing but the counters. Neither goes through the order buffer: a
    /// policy record was released at once. The resend mark of its input
    /// partition moves as for any record. Returns `false`, and changes
    /// nothing, for a record whose key or time cannot be read:
    /// that one is judged as usual.
    pub fn decide(&mut self, rec: &SliceRecord<'_>, extractor: &Extractor, deliver: bool) -> bool {
        let Ok(x) = extractor.extract(&rec.record, 0) else {
            return false;
        };
        self.next_offset = rec.offset + 1;
        if let Some(src) = rec.source {
            let mark = self.resend_marks.entry((src.topic.to_string(), src.partition)).or_insert(src.offset);
            *mark = (*mark).max(src.offset);
        }
        if !deliver {
            self.counters.duplicates += 1;
            return true;
        }
        self.counters.distinct += 1;
        if self.passthrough {
            return true;
        }
        let hash = KeyHash::of(self.hash_seed(), &x.key);
        self.filter.observe(&hash, x.time_ms);
        true
    }

    /// Runs `step` on the order buffer and judges what it releases.
    fn release(
        &mut self,
        out: &mut Vec<Judgment>,
        step: impl FnOnce(&mut ReorderBuffer<KeyHash>, &mut dyn FnMut(Released<KeyHash>)),
    ) {
        let SliceState { order, filter, counters, stages, .. } = self;
        let max_clock_jump_ms = order.settings().max_clock_jump_ms;
        // A stage that judges instead of the filter replaces the timer filter only.
        let filter_judges = !(stages.judges_instead() && filter.as_timer().is_some());
        let mut judge = |r: Released<KeyHash>| match r {
            Released::Judge { time_ms, position, item, late_by_ms } => {
                counters.late += u64::from(late_by_ms.is_some());
                let mut verdict = if filter_judges { filter.observe(&item, time_ms) } else { Verdict::Distinct };
                let notes = stages.judged(Judging { position, hash: &item, time_ms }, &mut verdict);
                let verdict = match verdict {
                    Verdict::Distinct => {
                        counters.distinct += 1;
                        SliceVerdict::Distinct
                    }
                    Verdict::Duplicate { equal_timers } => {
                        counters.duplicates += 1;
                        SliceVerdict::Duplicate { equal_timers }
                    }
                };
                out.push(Judgment { offset: position, verdict, late_by_ms, notes });
            }
            Released::Reject { time_ms, position, ahead_ms, .. } => {
                counters.invalid += 1;
                stages.refused(position);
                let why = InvalidRecord::time_jump(time_ms, ahead_ms, max_clock_jump_ms);
                let verdict = SliceVerdict::Invalid(why);
                out.push(Judgment { offset: position, verdict, late_by_ms: None, notes: StageNotes::default() });
            }
        };
        step(order, &mut judge);
    }

    /// What a held record re-read from the log contributes to the buffer:
    /// its time and key hash (`None` if it cannot be read, which a record
    /// that was held could).
    pub fn held_entry(&self, record: &RecordView<'_>, extractor: &Extractor) -> Option<(u64, KeyHash)> {
        let x = extractor.extract(record, 0).ok()?;
        Some((x.time_ms, KeyHash::of(self.hash_seed(), &x.key)))
    }

    /// Gives the stages back what they kept of a held record re-read from
    /// the log (a restored slice). `false` if it cannot be read, which a
    /// record that was held could.
    pub fn refill_stages(&mut self, offset: u64, record: &RecordView<'_>) -> bool {
        let seed = self.hash_seed();
        // No topic: what a stage keeps of a held record beyond the snapshot
        // (a count key) comes from the record alone; provenance's sources of
        // held records are in the snapshot.
        self.stages.refill(&Arrival { offset, record, topic: None, seed })
    }

    /// The seed keys are hashed with: the judging filter's.
    fn hash_seed(&self) -> u64 {
        self.filter.hash_seed()
    }

    /// Puts back the held records of a restored slice, re-read from the
    /// log: `(offset, time, hash)` for every offset of [`Self::unfilled`].
    /// Fails, naming the first, if any is missing.
    pub fn refill(&mut self, records: Vec<(u64, u64, KeyHash)>) -> Result<(), u64> {
        let found: BTreeMap<u64, (u64, KeyHash)> = records.into_iter().map(|(o, t, h)| (o, (t, h))).collect();
        let (mut waiting, mut suspects) = (Vec::new(), Vec::new());
        for &(offset, suspect) in &self.unfilled {
            let &(time_ms, item) = found.get(&offset).ok_or(offset)?;
            let w = Waiting { time_ms, position: offset, item };
            if suspect { suspects.push(w) } else { waiting.push(w) }
        }
        self.order.put_back(waiting, suspects);
        self.unfilled.clear();
        Ok(())
    }

    /// The offsets of the held records, oldest first, with whether each is
    /// a suspect (what the snapshot stores of the buffer).
    pub fn held_offsets(&self) -> Vec<(u64, bool)> {
        let mut held: Vec<(u64, bool)> = self.order.held().map(|(w, suspect)| (w.position, suspect)).collect();
        held.extend_from_slice(&self.unfilled);
        held.sort_unstable();
        held
    }
}
