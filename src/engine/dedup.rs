//! Batched deduplication of records in event-time order: extract, hash,
//! reorder within the lateness, then test what the watermark releases.
//!
//! The batch is the unit of work because hashing a whole batch before
//! touching the filter lets the memory accesses of its events overlap
//! (prefetching in [`SlicedFilter::observe_batch`]). Records are judged in
//! (time, position) order once the watermark passes them (see
//! [`super::order`]), so a judgment may come in a later batch than its
//! record, or at [`Deduplicator::finish`]. Processing is deterministic: the
//! same records in the same order give the same judgments.
//!
//! With a counting stage ([`Deduplicator::with_counting`]) every record the
//! dedup filter lets through is then counted under its count key, at its
//! event time, in the order of judgment (see [`crate::filter::counting`]). When the
//! count key is the dedup key itself, the counting stage replaces the
//! timer filter (a limit of N is then "N copies per window", and N = 1 is
//! dedup by counts); otherwise replays of a dedup key are dropped first and
//! not counted.
//!
//! Another kind of filter judges instead of the timer filter
//! ([`SliceFilter`]): a windowed kind like the timer filter, in event-time
//! order within the lateness, one filter per slice
//! ([`Deduplicator::per_slice`]); a kind with no window and no notion of
//! time (the decaying kinds) at once, in arrival order, by one filter
//! ([`Deduplicator::in_arrival_order`]).

use std::num::NonZeroU64;

use super::order::{OrderSettings, Released, ReorderBuffer};
use super::record::{Extractor, InvalidRecord, KeySpec, RecordView, TimeSpec};
use crate::filter::counting::{CountMark, CountingStage};
use crate::filter::{Event, KeyHash, SliceFilter, SlicedFilter, Verdict};

/// What became of one record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Distinct,
    Duplicate { equal_timers: u8 },
    Invalid(InvalidRecord),
}

/// The outcome of the record at `position` (0 for the first record pushed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judged {
    pub position: u64,
    pub outcome: Outcome,
    /// For a record that arrived more than the lateness behind the largest
    /// time seen: by how much it missed the watermark, in ms.
    pub late_by_ms: Option<u64>,
    /// What the counting stage decided, if there is one and the record
    /// reached it.
    pub count: Option<CountMark>,
}

/// Records in, judgments out, over a sliced filter.
pub struct Deduplicator {
    filter: SlicedFilter,
    /// Filters of another kind judge instead of `filter` (which then stays
    /// empty) unless this is empty: one per slice, or one for the whole
    /// stream with `arrival_order`.
    judges: Vec<SliceFilter>,
    /// Whether `judges` judges records as they come, unordered.
    arrival_order: bool,
    extractor: Extractor,
    seed: u64,
    passthrough: bool,
    /// The counting stage. Without a count key of its own ([`Order::Keys`])
    /// it counts by the dedup key, and replaces the timer filter.
    counting: Option<CountingStage>,
    /// The records in event-time order, with their keys' hashes.
    order: Order,
    /// Position of the next record pushed.
    next_position: u64,
    /// The current batch's released records, waiting for their verdicts.
    released: ReleasedBatch,
    verdicts: Vec<Verdict>,
}

/// Records waiting for the watermark, each with the hashes its judging
/// needs: the dedup key's alone unless the counting stage has a count key
/// of its own. A whole lateness of records waits here, so the entry is
/// kept to what is needed (32 bytes, or 48 with a count key).
enum Order {
    /// The dedup key's hash.
    Key(ReorderBuffer<KeyHash>),
    /// The dedup key's hash and the count key's, read by `count_key`.
    Keys { buffer: ReorderBuffer<(KeyHash, KeyHash)>, count_key: Extractor },
}

impl Order {
    fn settings(&self) -> &OrderSettings {
        match self {
            Order::Key(o) => o.settings(),
            Order::Keys { buffer, .. } => buffer.settings(),
        }
    }

    fn held(&self) -> usize {
        match self {
            Order::Key(o) => o.waiting_len() + o.suspects_len(),
            Order::Keys { buffer, .. } => buffer.waiting_len() + buffer.suspects_len(),
        }
    }
}

/// The hashes a waiting record carries ([`Order`]).
trait Hashes {
    /// Whether the count key's hash is a hash of its own.
    const PAIRED: bool;
    /// The dedup key's hash and the count key's.
    fn pair(self) -> (KeyHash, KeyHash);
}

impl Hashes for KeyHash {
    const PAIRED: bool = false;
    fn pair(self) -> (KeyHash, KeyHash) {
        (self, self)
    }
}

impl Hashes for (KeyHash, KeyHash) {
    const PAIRED: bool = true;
    fn pair(self) -> (KeyHash, KeyHash) {
        self
    }
}

/// The records of a batch released for judging, index by index: the
/// filter's events, and each one's position and lateness (by how much it
/// missed the watermark: never 0), and its count key's hash when the
/// counting stage has a count key of its own.
#[derive(Default)]
struct ReleasedBatch {
    events: Vec<Event>,
    at: Vec<(u64, Option<NonZeroU64>)>,
    count_hashes: Vec<KeyHash>,
}

impl ReleasedBatch {
    fn clear(&mut self) {
        self.events.clear();
        self.at.clear();
        self.count_hashes.clear();
    }
}

impl Deduplicator {
    pub fn new(filter: SlicedFilter, extractor: Extractor, order: OrderSettings) -> Self {
        let seed = filter.params().seed;
        Deduplicator {
            filter,
            judges: Vec::new(),
            arrival_order: false,
            extractor,
            seed,
            passthrough: false,
            counting: None,
            order: Order::Key(ReorderBuffer::new(order)),
            next_position: 0,
            released: ReleasedBatch::default(),
            verdicts: Vec::new(),
        }
    }

    /// Records judged by one filter of a kind with no window, in arrival
    /// order as they come (nothing to reorder: times are still extracted,
    /// and unreadable ones reported, exactly as for the timer filter).
    pub fn in_arrival_order(filter: SliceFilter, extractor: Extractor) -> Self {
        let order = OrderSettings { lateness_ms: 0, max_clock_jump_ms: u64::MAX, jump_confirmations: 1 };
        // The unused timer filter: the smallest one there is.
        let idle = crate::filter::FilterSpec { expected_keys: 1, slices: 1, ..Default::default() };
        let idle = SlicedFilter::new(&idle).expect("the smallest timer filter is valid");
        Deduplicator { judges: vec![filter], arrival_order: true, ..Deduplicator::new(idle, extractor, order) }
    }

    /// Records judged by filters of a windowed kind, one per slice (keys
    /// spread by their hash as over the timer filter's slices), in
    /// event-time order.
    pub fn per_slice(filters: Vec<SliceFilter>, extractor: Extractor, order: OrderSettings) -> Self {
        assert!(!filters.is_empty(), "at least one slice");
        let seed = filters[0].hash_seed();
        let idle = crate::filter::FilterSpec { expected_keys: 1, slices: 1, seed, ..Default::default() };
        let idle = SlicedFilter::new(&idle).expect("the smallest timer filter is valid");
        Deduplicator { judges: filters, ..Deduplicator::new(idle, extractor, order) }
    }

    /// The filters that judge instead of the timer filter (empty when it judges).
    pub fn judges(&self) -> &[SliceFilter] {
        &self.judges
    }

    /// Bytes the judging filter holds now.
    pub fn memory_bytes(&self) -> u64 {
        match self.judges.is_empty() {
            true => self.filter.slices().iter().map(|f| f.memory_bytes() as u64).sum(),
            false => self.judges.iter().map(SliceFilter::memory_bytes).sum(),
        }
    }

    /// Adds the counting stage; `count_key` `None` counts by the dedup key
    /// (and replaces the timer filter), else by that key of each record.
    pub fn with_counting(mut self, stage: CountingStage, count_key: Option<KeySpec>) -> Self {
        // The time comes from the dedup extractor; `arrival` here reads nothing.
        if let Some(key) = count_key {
            let count_key = Extractor { key, time: TimeSpec::Arrival, ..self.extractor.clone() };
            self.order = Order::Keys { buffer: ReorderBuffer::new(*self.order.settings()), count_key };
        }
        self.counting = Some(stage);
        self
    }

    /// The counting stage, if any.
    pub fn counting_stage(&self) -> Option<&CountingStage> {
        self.counting.as_ref()
    }

    /// With `on`, records are read (key and time extracted, unreadable ones
    /// reported) exactly as otherwise, but not ordered, hashed or filtered:
    /// every readable record is distinct at once. What dedup costs is the
    /// difference.
    pub fn with_passthrough(mut self, on: bool) -> Self {
        self.passthrough = on;
        self
    }

    pub fn filter(&self) -> &SlicedFilter {
        &self.filter
    }

    /// Records waiting for the watermark or for a jump to be confirmed.
    pub fn held(&self) -> usize {
        self.order.held()
    }

    /// Takes in the next records (positions continue from the last batch)
    /// and appends to `out` the judgments that are due: unreadable records
    /// at once, the others as the watermark releases them.
    pub fn push_batch(&mut self, records: &[RecordView<'_>], arrival_ms: u64, out: &mut Vec<Judged>) {
        let Deduplicator {
            order, released, extractor, seed, passthrough, next_position, judges, arrival_order, ..
        } = self;
        for rec in records {
            let position = *next_position;
            *next_position += 1;
            let x = match extractor.extract(rec, arrival_ms) {
                Ok(x) => x,
                Err(e) => {
                    out.push(Judged { position, outcome: Outcome::Invalid(e), late_by_ms: None, count: None });
                    continue;
                }
            };
            if *passthrough {
                out.push(Judged { position, outcome: Outcome::Distinct, late_by_ms: None, count: None });
                continue;
            }
            if *arrival_order {
                let f = &mut judges[0];
                let outcome = match f.observe(&KeyHash::of(f.hash_seed(), &x.key), x.time_ms) {
                    Verdict::Distinct => Outcome::Distinct,
                    Verdict::Duplicate { equal_timers } => Outcome::Duplicate { equal_timers },
                };
                out.push(Judged { position, outcome, late_by_ms: None, count: None });
                continue;
            }
            let hash = KeyHash::of(*seed, &x.key);
            let jump = order.settings().max_clock_jump_ms;
            match order {
                Order::Key(o) => o.push(x.time_ms, position, hash, |r| take(r, released, out, jump)),
                Order::Keys { buffer, count_key } => {
                    let count_hash = match count_key.extract(rec, arrival_ms) {
                        Ok(c) => KeyHash::of(*seed, &c.key),
                        Err(mut why) => {
                            why.detail = format!("count key: {}", why.detail);
                            let outcome = Outcome::Invalid(why);
                            out.push(Judged { position, outcome, late_by_ms: None, count: None });
                            continue;
                        }
                    };
                    buffer.push(x.time_ms, position, (hash, count_hash), |r| take(r, released, out, jump));
                }
            }
        }
        self.judge_released(out);
    }

    /// The end of the input: judges everything still held.
    pub fn finish(&mut self, out: &mut Vec<Judged>) {
        let Deduplicator { order, released, .. } = self;
        let jump = order.settings().max_clock_jump_ms;
        match order {
            Order::Key(o) => o.finish(|r| take(r, released, out, jump)),
            Order::Keys { buffer, .. } => buffer.finish(|r| take(r, released, out, jump)),
        }
        self.judge_released(out);
    }

    fn judge_released(&mut self, out: &mut Vec<Judged>) {
        self.verdicts.clear();
        let ReleasedBatch { events, at, count_hashes } = &self.released;
        // A stage counting by the dedup key replaces the timer filter.
        let replaced = self.counting.is_some() && matches!(self.order, Order::Key(_));
        if replaced {
            self.verdicts.resize(events.len(), Verdict::Distinct);
        } else if !self.judges.is_empty() {
            judge_each(&mut self.judges, events, &mut self.verdicts);
        } else {
            self.filter.observe_batch(events, &mut self.verdicts);
        }
        for (i, (&(position, late_by_ms), verdict)) in at.iter().zip(&self.verdicts).enumerate() {
            let mut outcome = match verdict {
                Verdict::Distinct => Outcome::Distinct,
                Verdict::Duplicate { equal_timers } => Outcome::Duplicate { equal_timers: *equal_timers },
            };
            let mut count = None;
            if let (Some(stage), Outcome::Distinct) = (self.counting.as_mut(), &outcome) {
                // Without a count key of its own, the count key is the dedup key.
                let count_hash = count_hashes.get(i).unwrap_or(&events[i].hash);
                let mark = stage.judge(count_hash, events[i].time_ms);
                if mark.limited {
                    outcome = Outcome::Duplicate { equal_timers: 0 };
                }
                count = Some(mark);
            }
            out.push(Judged { position, outcome, late_by_ms: late_by_ms.map(NonZeroU64::get), count });
        }
        self.released.clear();
    }
}

/// Queues a released record for judging, or reports a rejected one.
fn take<T: Hashes>(r: Released<T>, released: &mut ReleasedBatch, out: &mut Vec<Judged>, max_clock_jump_ms: u64) {
    match r {
        Released::Judge { time_ms, position, item, late_by_ms } => {
            let (hash, count_hash) = item.pair();
            released.events.push(Event { hash, time_ms });
            // Late: it missed the watermark by a whole ms or more.
            released.at.push((position, late_by_ms.and_then(NonZeroU64::new)));
            if T::PAIRED {
                released.count_hashes.push(count_hash);
            }
        }
        Released::Reject { time_ms, position, ahead_ms, .. } => {
            let why = InvalidRecord::time_jump(time_ms, ahead_ms, max_clock_jump_ms);
            out.push(Judged { position, outcome: Outcome::Invalid(why), late_by_ms: None, count: None });
        }
    }
}

/// The verdicts of one filter per slice on `events`, each judged by its
/// slice's filter in order; where the filters are large enough
/// ([`SliceFilter::worth_prefetching`]), the memory of the event
/// [`PREFETCH_DISTANCE`] places later is fetched while one is judged (as
/// the kinds' own batch paths do).
fn judge_each(filters: &mut [SliceFilter], events: &[Event], out: &mut Vec<Verdict>) {
    use crate::filter::timer::sliding::PREFETCH_DISTANCE;
    let slices = filters.len() as u32;
    let prefetch = filters.iter().any(SliceFilter::worth_prefetching);
    for (i, e) in events.iter().enumerate() {
        if prefetch && let Some(ahead) = events.get(i + PREFETCH_DISTANCE) {
            filters[ahead.hash.slice(slices) as usize].prefetch(&ahead.hash);
        }
        out.push(filters[e.hash.slice(slices) as usize].observe(&e.hash, e.time_ms));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::engine::InvalidReason;
    use crate::filter::FilterSpec;

    pub(crate) fn order(lateness_ms: u64) -> OrderSettings {
        OrderSettings { lateness_ms, max_clock_jump_ms: 100_000, jump_confirmations: 3 }
    }

    /// Judges `lines` (JSON payloads) as one batch to the end: the outcomes
    /// in position order.
    pub(crate) fn judge_all(d: &mut Deduplicator, lines: &[&str]) -> Vec<Outcome> {
        let recs: Vec<RecordView> =
            lines.iter().map(|l| RecordView { payload: l.as_bytes(), ..Default::default() }).collect();
        let mut out = Vec::new();
        d.push_batch(&recs, 0, &mut out);
        d.finish(&mut out);
        assert_eq!(d.held(), 0);
        out.sort_by_key(|j| j.position);
        assert_eq!(out.iter().map(|j| j.position).collect::<Vec<_>>(), (0..lines.len() as u64).collect::<Vec<_>>());
        out.into_iter().map(|j| j.outcome).collect()
    }

    fn dedup(lateness_ms: u64) -> Deduplicator {
        let spec = FilterSpec { window_ms: 1000, expected_keys: 100, slices: 4, ..FilterSpec::default() };
        let extractor =
            Extractor { key: "json:/k".parse().unwrap(), time: "json:/t".parse().unwrap(), max_record_bytes: 1 << 20 };
        Deduplicator::new(SlicedFilter::new(&spec).unwrap(), extractor, order(lateness_ms))
    }

    #[test]
    fn one_outcome_per_record() {
        let mut d = dedup(0);
        let lines = [r#"{"k":"a","t":1}"#, "oops", r#"{"k":"b","t":2}"#, r#"{"k":"a","t":3}"#, r#"{"k":"a","t":2000}"#];
        let out = judge_all(&mut d, &lines);
        assert_eq!(out[0], Outcome::Distinct);
        assert!(matches!(out[1], Outcome::Invalid(_)));
        assert_eq!(out[2], Outcome::Distinct);
        assert!(matches!(out[3], Outcome::Duplicate { .. }));
        assert_eq!(out[4], Outcome::Distinct);

        let mut p = dedup(0).with_passthrough(true);
        let out = judge_all(&mut p, &lines);
        assert!(matches!(out[1], Outcome::Invalid(_)));
        assert_eq!(&out[2..], &[Outcome::Distinct, Outcome::Distinct, Outcome::Distinct]);
        assert_eq!(p.filter().stats().events, 0);
    }

    /// A copy that arrives before its original, within the lateness: the
    /// original (earlier time) is the distinct one.
    #[test]
    fn the_earlier_copy_wins_within_the_lateness() {
        let lines = [r#"{"k":"a","t":1200}"#, r#"{"k":"a","t":1000}"#, r#"{"k":"b","t":1500}"#];
        assert_eq!(
            judge_all(&mut dedup(500), &lines)[..2],
            [Outcome::Duplicate { equal_timers: 7 }, Outcome::Distinct]
        );
        // Without lateness the arrival order decides.
        assert_eq!(judge_all(&mut dedup(0), &lines)[..2], [Outcome::Distinct, Outcome::Duplicate { equal_timers: 7 }]);
    }

    #[test]
    fn a_time_jump_is_dead_lettered() {
        let lines = [r#"{"k":"a","t":1000}"#, r#"{"k":"b","t":99999999}"#, r#"{"k":"c","t":1001}"#];
        let out = judge_all(&mut dedup(0), &lines);
        match &out[1] {
            Outcome::Invalid(why) => assert_eq!(why.reason, InvalidReason::TimeJump, "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(out[2], Outcome::Distinct);
    }
}
