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
    /// The counting stage, and the extractor of its count key (`None`: the
    /// dedup key, and the stage replaces the timer filter).
    counting: Option<(CountingStage, Option<Extractor>)>,
    /// The dedup key's hash and the count key's, in event-time order.
    order: ReorderBuffer<(KeyHash, KeyHash)>,
    /// Position of the next record pushed.
    next_position: u64,
    /// Released events of the current batch, and their positions and lateness.
    events: Vec<Event>,
    released: Vec<Release>,
    verdicts: Vec<Verdict>,
}

/// A released record waiting for its verdict: position, lateness, count
/// key hash and time.
#[derive(Clone, Copy)]
struct Release {
    position: u64,
    late_by_ms: Option<u64>,
    count_hash: KeyHash,
    time_ms: u64,
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
            order: ReorderBuffer::new(order),
            next_position: 0,
            events: Vec::new(),
            released: Vec::new(),
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
        let extractor = count_key.map(|key| Extractor { key, time: TimeSpec::Arrival, ..self.extractor.clone() });
        self.counting = Some((stage, extractor));
        self
    }

    /// The counting stage, if any.
    pub fn counting_stage(&self) -> Option<&CountingStage> {
        self.counting.as_ref().map(|(s, _)| s)
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
        self.order.waiting_len() + self.order.suspects_len()
    }

    /// Takes in the next records (positions continue from the last batch)
    /// and appends to `out` the judgments that are due: unreadable records
    /// at once, the others as the watermark releases them.
    pub fn push_batch(&mut self, records: &[RecordView<'_>], arrival_ms: u64, out: &mut Vec<Judged>) {
        let Deduplicator {
            order,
            events,
            released,
            extractor,
            seed,
            passthrough,
            next_position,
            judges,
            arrival_order,
            counting,
            ..
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
            let count_hash = match counting {
                Some((_, Some(e))) => match e.extract(rec, arrival_ms) {
                    Ok(c) => KeyHash::of(*seed, &c.key),
                    Err(mut why) => {
                        why.detail = format!("count key: {}", why.detail);
                        out.push(Judged { position, outcome: Outcome::Invalid(why), late_by_ms: None, count: None });
                        continue;
                    }
                },
                _ => hash,
            };
            let jump = order.settings().max_clock_jump_ms;
            order.push(x.time_ms, position, (hash, count_hash), |r| take(r, events, released, out, jump));
        }
        self.judge_released(out);
    }

    /// The end of the input: judges everything still held.
    pub fn finish(&mut self, out: &mut Vec<Judged>) {
        let Deduplicator { order, events, released, .. } = self;
        let jump = order.settings().max_clock_jump_ms;
        order.finish(|r| take(r, events, released, out, jump));
        self.judge_released(out);
    }

    fn judge_released(&mut self, out: &mut Vec<Judged>) {
        self.verdicts.clear();
        // A stage counting by the dedup key replaces the timer filter.
        let replaced = matches!(self.counting, Some((_, None)));
        if replaced {
            self.verdicts.resize(self.events.len(), Verdict::Distinct);
        } else if !self.judges.is_empty() {
            judge_each(&mut self.judges, &self.events, &mut self.verdicts);
        } else {
            self.filter.observe_batch(&self.events, &mut self.verdicts);
        }
        for (r, verdict) in self.released.iter().zip(&self.verdicts) {
            let mut outcome = match verdict {
                Verdict::Distinct => Outcome::Distinct,
                Verdict::Duplicate { equal_timers } => Outcome::Duplicate { equal_timers: *equal_timers },
            };
            let mut count = None;
            if let (Some((stage, _)), Outcome::Distinct) = (self.counting.as_mut(), &outcome) {
                let mark = stage.judge(&r.count_hash, r.time_ms);
                if mark.limited {
                    outcome = Outcome::Duplicate { equal_timers: 0 };
                }
                count = Some(mark);
            }
            out.push(Judged { position: r.position, outcome, late_by_ms: r.late_by_ms, count });
        }
        self.events.clear();
        self.released.clear();
    }
}

/// Queues a released record for judging, or reports a rejected one.
fn take(
    r: Released<(KeyHash, KeyHash)>,
    events: &mut Vec<Event>,
    released: &mut Vec<Release>,
    out: &mut Vec<Judged>,
    max_clock_jump_ms: u64,
) {
    match r {
        Released::Judge { time_ms, position, item: (hash, count_hash), late_by_ms } => {
            events.push(Event { hash, time_ms });
            released.push(Release { position, late_by_ms, count_hash, time_ms });
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
