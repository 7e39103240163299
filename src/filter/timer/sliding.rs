//! One slice's filter: a list of sliding generations under one clock
//! (one-is-enough §4 and §5).
//!
//! Every event is tested against all generations (first-test-then-set) and,
//! when distinct, inserted into the newest. The newest generation is *full*
//! once it has used its share of the FPR budget (density `z/m > p_ℓ^(1/k)` or
//! cardinality); then a new one starts. A generation with no live cell is
//! dropped. Generation levels let a slice follow its load in both
//! directions: level ℓ has `m·g^ℓ` cells and target `p·r^ℓ`, so under a
//! sustained overload the sum of the generations' rates stays below
//! `p/(1-r)` while capacity grows geometrically. A new generation takes the
//! smallest level that holds the slice's live keys with headroom (so a
//! steady load does not climb levels, even with cardinality growth whose
//! counts never go down); when the load falls back, a lone oversized
//! generation hands over to the smallest level that fits and expires.
//! With `g = 1, r = 1` this is exactly the paper's scheme of equal generations.
//!
//! At the cap (`max_generations`) no generation is added: the newest keeps
//! taking keys past its threshold, its FPR rises above the target, memory
//! stays bounded, and every such insert is counted as `saturated_inserts`.

use super::clock::{AliveTable, Now};
use super::generation::{CellWrites, Generation, Judged, Run, Untold};
use super::sizing;
pub use crate::filter::event::{Event, FilterCounters, PREFETCH_DISTANCE, Verdict};
use crate::filter::hash::KeyHash;
use crate::filter::timer::params::{FilterParams, Growth, MAX_LEVEL};

/// Why [`SlidingFilter::delete`] refused to remove a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeleteRefusal {
    /// No filter holds the key.
    #[error("the key is not in the window")]
    Absent,
    /// Two or more filters hold the key: deleting from one could leave a
    /// false positive, deleting from all could create false negatives.
    #[error(
        "the key is ambiguous: more than one generation holds all of its cells, and deleting it could make \
         other keys' copies pass (kept; it expires with the window)"
    )]
    Ambiguous,
    /// The filter has no counting cells (`filter.deletable = false`).
    #[error("the filter is not deletable (set filter.deletable = true)")]
    NotDeletable,
}

/// What a lookup (a test without insertion) finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lookup {
    /// The verdict the key would get now.
    pub duplicate: bool,
    /// Alive cells of the key in the generation that matched, or the most in any.
    pub alive_cells: u32,
    /// Equal-timer count in that generation (0 unless all k cells are alive).
    pub equal_timers: u32,
}

/// The filter of one slice.
#[derive(Clone, Debug, PartialEq)]
pub struct SlidingFilter {
    pub(crate) params: FilterParams,
    /// The slice clock: the largest event time seen, in ms.
    pub(crate) clock_ms: Option<u64>,
    /// The clock in ticks, derived from `clock_ms` and cached: most events
    /// fall in the current tick and need no division.
    now: Now,
    /// Which cell values are alive at `now` (derived from it).
    alive: AliveTable,
    /// The first ms of the next tick.
    next_tick_ms: u64,
    /// Oldest first; never empty.
    pub(crate) generations: Vec<Generation>,
    pub(crate) counters: FilterCounters,
}

impl SlidingFilter {
    pub fn new(params: FilterParams) -> Self {
        let counters = FilterCounters {
            generations_created: 1,
            generations_max: 1,
            equal_timer_counts: vec![0; params.hashes as usize + 1],
            ..FilterCounters::default()
        };
        let first = Generation::new(0, &params);
        SlidingFilter::from_parts(params, None, vec![first], counters)
    }

    /// Assembles a filter from its state (also used by snapshot restore).
    pub(crate) fn from_parts(
        params: FilterParams,
        clock_ms: Option<u64>,
        generations: Vec<Generation>,
        counters: FilterCounters,
    ) -> Self {
        let tick = clock_ms.unwrap_or(0) / params.tick_ms;
        let now = Now::at(tick, &params);
        let next_tick_ms = (tick + 1).saturating_mul(params.tick_ms);
        let alive = AliveTable::at(&now);
        SlidingFilter { params, clock_ms, now, alive, next_tick_ms, generations, counters }
    }

    pub fn params(&self) -> &FilterParams {
        &self.params
    }

    pub fn counters(&self) -> &FilterCounters {
        &self.counters
    }

    pub fn generations(&self) -> &[Generation] {
        &self.generations
    }

    /// The slice clock in ms (`None` before the first event).
    pub fn clock_ms(&self) -> Option<u64> {
        self.clock_ms
    }

    /// Bytes held by cells, timer histograms and the alive table.
    pub fn memory_bytes(&self) -> usize {
        self.alive.memory_bytes() + self.generations.iter().map(Generation::memory_bytes).sum::<usize>()
    }

    /// The FPR the current densities predict, combined over generations.
    pub fn estimated_fpr(&self) -> f64 {
        sizing::combined_fpr(self.generations.iter().map(|g| g.estimated_fpr(self.params.hashes)))
    }

    /// Test-then-insert for a batch, verdicts appended to `out` in order:
    /// exactly the verdicts and state of [`Self::observe`] on each event in
    /// turn. While one event is judged, the cells of the event
    /// [`PREFETCH_DISTANCE`] places later are prefetched, so the cache
    /// misses of a batch overlap instead of following one another (only
    /// prefetched, never reordered: an event sees every insert before it).
    /// Filters below [`PREFETCH_MIN_BYTES`] are not prefetched.
    ///
    /// The usual case — one generation, events within the current tick —
    /// goes through `Generation::observe_run`, a loop compiled for the
    /// filter's cell width and layout; an event that starts a tick, or
    /// meets more than one generation, goes through [`Self::observe`].
    pub fn observe_batch(&mut self, events: &[Event], out: &mut Vec<Verdict>) {
        out.reserve(events.len());
        let prefetch = self.worth_prefetching();
        if prefetch {
            for e in events.iter().take(PREFETCH_DISTANCE) {
                self.prefetch(&e.hash);
            }
        }
        let mut i = 0;
        while i < events.len() {
            // The run loop does not keep counting cells: a deletable
            // filter judges every event through `observe`.
            if self.generations.len() == 1 && self.clock_ms.is_some() && !self.params.deletable {
                i += self.observe_run(&events[i..], prefetch, out);
                if i == events.len() {
                    break;
                }
            }
            if prefetch && let Some(ahead) = events.get(i + PREFETCH_DISTANCE) {
                self.prefetch(&ahead.hash);
            }
            out.push(self.observe(&events[i].hash, events[i].time_ms));
            i += 1;
        }
    }

    /// Judges events through the lone generation until one starts a tick or
    /// an insert fills the generation (then the next one is added here, as
    /// [`Self::observe`] does); returns how many were judged.
    fn observe_run(&mut self, events: &[Event], prefetch: bool, out: &mut Vec<Verdict>) -> usize {
        let params = &self.params;
        let run = Run {
            now: self.now,
            alive: &self.alive,
            k: params.hashes,
            equal_min: params.equal_timers_min(),
            growth: params.growth,
            at_cap: params.max_generations <= 1,
            next_tick_ms: self.next_tick_ms,
            prefetch,
            late_own_time: params.lateness_ms.is_some(),
        };
        let mut clock_ms = self.clock_ms.expect("a run starts after the first event");
        let judged = Judged { clock_ms: &mut clock_ms, counters: &mut self.counters, out };
        let end = self.generations[0].observe_run(events, &run, judged);
        self.clock_ms = Some(clock_ms);
        if end.filled {
            let level = self.level_for(self.live_keys() * HEADROOM);
            self.push_generation(level);
        }
        end.handled
    }

    /// Whether the cells are large enough to miss the core's own caches
    /// (below that, prefetching only costs instructions).
    #[inline]
    pub fn worth_prefetching(&self) -> bool {
        self.generations.iter().map(|g| g.cells.memory_bytes()).sum::<usize>() >= PREFETCH_MIN_BYTES
    }

    /// Prefetches the key's cells in every generation (a hint only).
    #[inline]
    pub fn prefetch(&self, hash: &KeyHash) {
        for g in &self.generations {
            g.prefetch(hash, self.params.hashes);
        }
    }

    /// Test-then-insert for one event at `time_ms`.
    pub fn observe(&mut self, hash: &KeyHash, time_ms: u64) -> Verdict {
        self.observe_telling(hash, time_ms, &mut Untold)
    }

    /// [`Self::observe`], telling `writes` of every cell write before it
    /// happens (a copy in progress, see [`super::copy`]).
    #[inline]
    pub(crate) fn observe_telling<W: CellWrites>(&mut self, hash: &KeyHash, time_ms: u64, writes: &mut W) -> Verdict {
        if self.is_late_at_own_time(time_ms) {
            return self.observe_late(hash, time_ms, writes);
        }
        self.advance_telling(time_ms, writes);
        self.counters.events += 1;
        if let Some(equal) = self.duplicate_in(hash) {
            return self.count_duplicate(equal);
        }
        self.insert_event(hash, None, writes)
    }

    /// Inserts a distinct event into the newest generation: at the clock,
    /// or `late_delta` ticks behind it ([`Generation::insert_late`]).
    #[inline(always)]
    pub(crate) fn insert_event<W: CellWrites>(
        &mut self,
        hash: &KeyHash,
        late_delta: Option<u32>,
        writes: &mut W,
    ) -> Verdict {
        let k = self.params.hashes;
        self.insert_distinct(|newest, now, alive| {
            if W::ACTIVE {
                newest.for_each_position(hash, k, |i| writes.cell(newest, i));
            }
            newest.count_insert(hash, k, now);
            match late_delta {
                None => newest.insert(hash, k, now, alive),
                Some(delta) => newest.insert_late(hash, k, now, delta),
            }
        })
    }

    /// Counts a duplicate whose largest equal-timer group is `equal`.
    #[inline(always)]
    pub(crate) fn count_duplicate(&mut self, equal: u32) -> Verdict {
        self.counters.duplicates += 1;
        self.counters.equal_timer_counts[equal as usize] += 1;
        Verdict::Duplicate { equal_timers: equal as u8 }
    }

    /// The second half of test-then-insert for a distinct event: counts it,
    /// lets `insert` set its cells in the newest generation (at the current
    /// clock, with its alive table), and adds a generation when that insert
    /// fills the newest one (at the cap, counts the insert as saturated
    /// instead). One path for the ordinary, late, pipelined and vertically
    /// sliced inserts ([`super::vertical`]), so all grow alike.
    #[inline(always)]
    pub(crate) fn insert_distinct(&mut self, insert: impl FnOnce(&mut Generation, &Now, &AliveTable)) -> Verdict {
        self.counters.distinct += 1;
        let at_cap = self.generations.len() >= self.params.max_generations as usize;
        let growth = self.params.growth;
        let newest = self.generations.last_mut().expect("never empty");
        if at_cap && growth != Growth::None && newest.is_full(growth) {
            self.counters.saturated_inserts += 1;
        }
        insert(newest, &self.now, &self.alive);
        if !at_cap && newest.is_full(growth) {
            let level = self.level_for(self.live_keys() * HEADROOM);
            self.push_generation(level);
        }
        Verdict::Distinct
    }

    /// Whether an event at `time_ms` is judged at its own time, behind the
    /// clock (lateness on, and the clock past it): [`Self::observe_late`].
    #[inline(always)]
    pub(crate) fn is_late_at_own_time(&self, time_ms: u64) -> bool {
        self.params.lateness_ms.is_some() && self.clock_ms.is_some_and(|clock| time_ms < clock)
    }

    /// How many ticks an event at `time_ms` behind the clock is judged
    /// behind it: its lag, at most the lateness.
    #[inline]
    pub(crate) fn late_delta(&self, time_ms: u64) -> u32 {
        let p = &self.params;
        (self.now.tick - time_ms / p.tick_ms).min(u64::from(p.lateness_ticks)) as u32
    }

    /// Test-then-insert for an event behind the clock, with lateness on
    /// (docs/design.md, invariant 7): judged at its own time. Its tick is δ behind
    /// the clock's; with δc = min(δ, Lt) (an event later than the lateness
    /// is judged as if it were at the edge of what is kept), it is a
    /// duplicate iff some generation holds all k of its cells at most
    /// W + δc ticks old — set less than the window before its own time, or
    /// after it (its key was delivered at or after it). A distinct one sets
    /// each cell to its time unless the cell holds a later one (max(cell,
    /// t)); the clock does not move.
    #[cold]
    fn observe_late<W: CellWrites>(&mut self, hash: &KeyHash, time_ms: u64, writes: &mut W) -> Verdict {
        let now = self.now();
        let (k, equal_min) = (self.params.hashes, self.params.equal_timers_min());
        let delta = self.late_delta(time_ms);
        self.counters.events += 1;
        self.counters.late_events += 1;
        let limit = now.window + delta;
        for g in self.generations.iter().rev() {
            if let Some(equal) = g.late_match(hash, k, &now, limit)
                && equal >= equal_min
            {
                return self.count_duplicate(equal);
            }
        }
        self.insert_event(hash, Some(delta), writes)
    }

    /// Forgets a key (deletable filters): when exactly one generation holds
    /// all k cells of the key (kept, so also for late events), one insert
    /// is taken out of its counting cells and the cells no other insert
    /// needs are emptied, so a copy of the key sent next is distinct.
    /// Refused when no generation or several hold it: deleting from one
    /// would leave the key present, deleting from all could empty cells
    /// another key needs (the DBF rule of Dynamic Bloom Filters). The clock does
    /// not move.
    pub fn delete(&mut self, hash: &KeyHash) -> Result<(), DeleteRefusal> {
        self.delete_telling(hash, &mut Untold)
    }

    /// [`Self::delete`], telling `writes` of every cell write first.
    pub(crate) fn delete_telling<W: CellWrites>(
        &mut self,
        hash: &KeyHash,
        writes: &mut W,
    ) -> Result<(), DeleteRefusal> {
        if !self.params.deletable {
            return Err(DeleteRefusal::NotDeletable);
        }
        if self.clock_ms.is_none() {
            return Err(DeleteRefusal::Absent);
        }
        let now = self.now();
        let k = self.params.hashes;
        let mut holding = self.generations.iter().enumerate().filter(|(_, g)| g.holds_kept(hash, k, &now));
        match (holding.next(), holding.next()) {
            (None, _) => Err(DeleteRefusal::Absent),
            (Some(_), Some(_)) => Err(DeleteRefusal::Ambiguous),
            (Some((at, _)), None) => {
                self.generations[at].uncount(hash, k, &now, writes);
                Ok(())
            }
        }
    }

    /// Tests a key at the current clock without inserting it.
    pub fn lookup(&self, hash: &KeyHash) -> Lookup {
        let now = self.now();
        if let Some((_, p)) = self.matching_generation(hash, &now) {
            return Lookup { duplicate: true, alive_cells: p.alive, equal_timers: p.equal };
        }
        let best = self.generations.iter().map(|g| g.probe(hash, self.params.hashes, &now)).max_by_key(|p| p.alive);
        let best = best.expect("never empty");
        Lookup { duplicate: false, alive_cells: best.alive, equal_timers: best.equal }
    }

    /// Moves the slice clock to `time_ms` if that is later (the clock never
    /// goes back: a late event is judged at the clock, or with lateness on
    /// at its own time by [`Self::observe`]).
    #[inline]
    pub fn advance(&mut self, time_ms: u64) {
        self.advance_telling(time_ms, &mut Untold);
    }

    #[inline]
    fn advance_telling<W: CellWrites>(&mut self, time_ms: u64, writes: &mut W) {
        let Some(clock) = self.clock_ms else {
            self.start_clock(time_ms);
            return;
        };
        if time_ms <= clock {
            if time_ms < clock {
                self.counters.late_events += 1;
            }
            return;
        }
        self.clock_ms = Some(time_ms);
        if time_ms < self.next_tick_ms {
            return; // same tick
        }
        self.next_tick(time_ms, writes);
    }

    /// The first event sets the clock.
    #[cold]
    fn start_clock(&mut self, time_ms: u64) {
        *self = SlidingFilter::from_parts(
            self.params.clone(),
            Some(time_ms),
            std::mem::take(&mut self.generations),
            std::mem::take(&mut self.counters),
        );
    }

    /// The clock enters a later tick: the generations step through every
    /// tick in between (or are cleared when the gap exceeds the window).
    #[inline(never)]
    fn next_tick<W: CellWrites>(&mut self, time_ms: u64, writes: &mut W) {
        let (from, to) = (self.now.tick, time_ms / self.params.tick_ms);
        self.now = Now::at(to, &self.params);
        self.next_tick_ms = (to + 1).saturating_mul(self.params.tick_ms);
        if to - from > u64::from(self.params.window_ticks + self.params.lateness_ticks) {
            // Every cell is older than the window (and the lateness it is
            // kept for): skip the tick-by-tick work.
            for g in &mut self.generations {
                writes.all(g);
                g.clear();
            }
            self.alive.reset(&self.now);
        } else {
            for tick in from + 1..=to {
                let now = Now::at(tick, &self.params);
                self.alive.step(&now);
                for g in &mut self.generations {
                    g.step_telling(&now, self.params.sweep_ticks, writes);
                }
            }
        }
        self.retire(writes);
    }

    pub(crate) fn now(&self) -> Now {
        self.now
    }

    #[cfg(feature = "vertical")]
    /// The first ms of the next tick: an event at or after it moves the
    /// clock into a later tick (steps and sweeps the generations).
    pub(crate) fn next_tick_ms(&self) -> u64 {
        self.next_tick_ms
    }

    /// The equal-timer count of the key in the newest generation that calls
    /// it a duplicate, if any: [`Self::matching_generation`] for the hot path.
    #[inline]
    fn duplicate_in(&self, hash: &KeyHash) -> Option<u32> {
        let (k, equal_min) = (self.params.hashes, self.params.equal_timers_min());
        for g in self.generations.iter().rev() {
            if g.contains(hash, k, &self.alive) {
                let equal = g.equal_timers(hash, k);
                if equal >= equal_min {
                    return Some(equal);
                }
            }
        }
        None
    }

    /// The newest generation that calls the key a duplicate, with its probe.
    fn matching_generation(&self, hash: &KeyHash, now: &Now) -> Option<(usize, super::generation::Probed)> {
        let (k, equal_min) = (self.params.hashes, self.params.equal_timers_min());
        self.generations
            .iter()
            .enumerate()
            .rev()
            .map(|(i, g)| (i, g.probe(hash, k, now)))
            .find(|(_, p)| p.alive == k && p.equal >= equal_min)
    }

    fn push_generation(&mut self, level: u8) {
        self.generations.push(Generation::new(level, &self.params));
        self.counters.generations_created += 1;
        self.counters.generations_max = self.counters.generations_max.max(self.generations.len() as u32);
    }

    /// Keys the live cells of all generations stand for.
    fn live_keys(&self) -> f64 {
        self.generations.iter().map(|g| g.estimated_keys(self.params.hashes)).sum()
    }

    /// The smallest level whose generation holds `keys` at its target FPR
    /// (the top level if none does).
    fn level_for(&self, keys: f64) -> u8 {
        let p = &self.params;
        (0..MAX_LEVEL)
            .find(|&l| sizing::cardinality_threshold(p.level_cells(l), p.hashes, p.level_fpr(l)) >= keys)
            .unwrap_or(MAX_LEVEL)
    }

    /// Drops generations with no live cell, and lets a lone oversized
    /// generation hand over to the smallest level that holds its load with a
    /// margin (it then expires within a window).
    fn retire<W: CellWrites>(&mut self, writes: &mut W) {
        let before = self.generations.len();
        let newest = before - 1;
        let mut i = 0;
        self.generations.retain(|g| {
            i += 1;
            let keep = i - 1 == newest || g.live_cells() > 0;
            if !keep {
                writes.dropping(g);
            }
            keep
        });
        self.counters.generations_dropped += (before - self.generations.len()) as u64;

        if let [only] = self.generations.as_slice()
            && only.level > 0
        {
            if only.live_cells() == 0 {
                writes.dropping(only);
                self.generations.clear();
                self.counters.generations_dropped += 1;
                self.push_generation(0);
            } else if self.params.max_generations > 1 {
                let fits = self.level_for(self.live_keys() * HANDOVER_MARGIN);
                if self.params.level_cells(fits) < self.generations[0].cells() {
                    self.push_generation(fits);
                }
            }
        }
    }
}

/// Cells below this many bytes (per slice) are assumed to stay in the core's
/// L2 cache, and batches are not prefetched.
pub const PREFETCH_MIN_BYTES: usize = 1 << 20;

/// A new generation (the newest is full) is sized for the live keys times
/// this: room for a load that is still rising.
const HEADROOM: f64 = 1.5;

/// A lone oversized generation hands over to a smaller level that holds the
/// live keys times this. Smaller than `HEADROOM`, and the gap between the two
/// is the hysteresis that keeps a slice from handing over back and forth.
const HANDOVER_MARGIN: f64 = 1.1;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::hash::DEFAULT_SEED;
    use crate::filter::timer::params::FilterSpec;

    fn filter(spec: FilterSpec) -> SlidingFilter {
        SlidingFilter::new(spec.resolve().unwrap())
    }

    fn key(i: u64) -> KeyHash {
        KeyHash::of(DEFAULT_SEED, &i.to_le_bytes())
    }

    #[test]
    fn duplicates_inside_the_window_only() {
        let mut f =
            filter(FilterSpec { window_ms: 1000, expected_keys: 100, tick_ms: Some(10), ..FilterSpec::default() });
        assert_eq!(f.observe(&key(1), 5_000), Verdict::Distinct);
        assert!(!f.observe(&key(1), 5_999).is_distinct());
        // One tick of slack at most: alive through 5000/10 + 100 ticks.
        assert!(!f.observe(&key(1), 6_009).is_distinct());
        assert_eq!(f.observe(&key(1), 6_010), Verdict::Distinct);
        // The window runs from the delivered occurrence: duplicates do not renew it.
        assert!(!f.observe(&key(1), 7_000).is_distinct());
        assert!(!f.observe(&key(1), 7_019).is_distinct());
        assert_eq!(f.observe(&key(1), 7_020), Verdict::Distinct);
        let c = f.counters();
        assert_eq!((c.events, c.distinct, c.duplicates), (7, 3, 4));
        assert_eq!(c.equal_timer_counts[f.params().hashes as usize], 4);
    }

    #[test]
    fn late_events_use_the_clock() {
        let mut f = filter(FilterSpec { window_ms: 1000, expected_keys: 100, ..FilterSpec::default() });
        f.observe(&key(1), 10_000);
        assert_eq!(f.observe(&key(2), 1_000), Verdict::Distinct);
        assert!(!f.observe(&key(2), 10_900).is_distinct(), "key 2 was set at the clock, 10 000");
        assert_eq!(f.counters().late_events, 1);
        assert_eq!(f.clock_ms(), Some(10_900));
    }

    /// With lateness, an event behind the clock is judged at its own time:
    /// its copy 900 ms before it is inside its window even though the
    /// clock has moved 1.5 s past it; without lateness it is judged at the
    /// clock, where that copy has expired.
    #[test]
    fn late_events_are_judged_at_their_own_time_with_lateness() {
        let spec = FilterSpec {
            window_ms: 1000,
            expected_keys: 100,
            tick_ms: Some(10),
            timer_bits: 16,
            ..FilterSpec::default()
        };
        for (lateness, want_duplicate) in [(None, false), (Some(2_000), true)] {
            let mut f = filter(FilterSpec { lateness_ms: lateness, ..spec.clone() });
            f.observe(&key(1), 10_000);
            f.observe(&key(2), 11_000);
            f.observe(&key(3), 12_400);
            let v = f.observe(&key(1), 10_900);
            assert_eq!(!v.is_distinct(), want_duplicate, "lateness {lateness:?}: {v:?}");
            assert_eq!(f.clock_ms(), Some(12_400));
            assert_eq!(f.counters().late_events, 1);
        }
        // A late key is inserted at its own time: alive until its time + the
        // window, not the clock's.
        let mut f = filter(FilterSpec { lateness_ms: Some(2_000), ..spec.clone() });
        f.observe(&key(9), 20_000);
        assert!(f.observe(&key(5), 19_000).is_distinct());
        assert!(!f.observe(&key(5), 19_500).is_distinct(), "inside its window at its own time");
        assert!(!f.observe(&key(5), 20_009).is_distinct(), "one tick of slack");
        assert!(f.observe(&key(5), 20_010).is_distinct(), "its window ran from 19 000, not 20 000");
        // A later copy already delivered makes an earlier late one a duplicate,
        // and the late insert never makes a newer cell older.
        let mut f = filter(FilterSpec { lateness_ms: Some(2_000), ..spec });
        f.observe(&key(7), 30_000);
        f.observe(&key(8), 31_000);
        let before = f.clone();
        assert!(!f.observe(&key(7), 29_500).is_distinct());
        assert_eq!(f.generations, before.generations, "a duplicate changes no cell");
        assert!(f.observe(&key(6), 30_500).is_distinct());
        assert!(!f.observe(&key(6), 31_400).is_distinct());
        assert!(f.observe(&key(6), 31_510).is_distinct());
    }

    /// No false negative for a late event within the lateness: whenever its
    /// key was delivered less than the window before its own time (at or
    /// before it), it is a duplicate — whatever the width and layout.
    #[test]
    fn no_false_negative_for_late_events_within_the_lateness() {
        use crate::filter::timer::params::Layout;
        use crate::testkit::workload::Rng;
        use std::collections::HashMap;
        for bits in [4u8, 8, 16] {
            for layout in [Layout::Standard, Layout::Blocked] {
                let (window_ms, lateness_ms) = (2_000u64, 1_500u64);
                let spec = FilterSpec {
                    window_ms,
                    expected_keys: 400,
                    timer_bits: bits,
                    layout,
                    growth: Growth::None,
                    lateness_ms: Some(lateness_ms),
                    ..FilterSpec::default()
                };
                let mut f = filter(spec);
                let tick = f.params().tick_ms;
                let mut delivered: HashMap<u64, Vec<u64>> = HashMap::new();
                let (mut rng, mut now, mut late_checked) = (Rng::new(u64::from(bits) + 100), 100_000u64, 0);
                for _ in 0..20_000 {
                    now += rng.below(3);
                    let k = rng.below(500);
                    // Late by up to the lateness, counted in whole ticks behind the clock.
                    let late = rng.below(4) == 0;
                    let t = if late { now.saturating_sub(rng.below(lateness_ms / tick * tick + 1)) } else { now };
                    let v = f.observe(&key(k), t);
                    let times = delivered.entry(k).or_default();
                    if late && t < now {
                        let covered = times.iter().any(|&d| d <= t && t - d < window_ms);
                        if covered {
                            late_checked += 1;
                            assert!(
                                !v.is_distinct(),
                                "{bits}-bit {layout:?}: key {k} at {t} (clock {now}) delivered at {times:?}"
                            );
                        }
                    }
                    if v.is_distinct() {
                        times.push(t);
                    }
                }
                assert!(late_checked > 500, "{bits}-bit {layout:?}: only {late_checked} late events checked");
            }
        }
    }

    /// In-order events (never behind the clock) get exactly the verdicts and
    /// counters whether lateness is on or not: with no disorder, lateness
    /// changes no output.
    #[test]
    fn lateness_changes_nothing_for_ordered_events() {
        use crate::filter::timer::params::Layout;
        use crate::testkit::workload::Rng;
        for bits in [4u8, 6, 8, 16, 32] {
            for layout in [Layout::Standard, Layout::Blocked] {
                for (growth, equal_timers) in [(Growth::Density, 0), (Growth::Cardinality, 3)] {
                    let spec = FilterSpec {
                        window_ms: 2_000,
                        expected_keys: 300,
                        timer_bits: bits,
                        layout,
                        growth,
                        equal_timers,
                        ..FilterSpec::default()
                    };
                    let (mut plain, mut late) =
                        (filter(spec.clone()), filter(FilterSpec { lateness_ms: Some(500), ..spec }));
                    let (mut rng, mut now) = (Rng::new(u64::from(bits)), 50_000u64);
                    let (mut a, mut b) = (Vec::new(), Vec::new());
                    let mut batch = Vec::new();
                    for i in 0..8_000u64 {
                        now += if rng.below(500) == 0 { 3_000 } else { rng.below(3) };
                        let universe = if (i / 1_000) % 2 == 1 { 6_000 } else { 600 };
                        let e = Event { hash: key(rng.below(universe)), time_ms: now };
                        a.push(plain.observe(&e.hash, e.time_ms));
                        batch.push(e);
                        if batch.len() == 61 {
                            late.observe_batch(&batch, &mut b);
                            batch.clear();
                        }
                    }
                    late.observe_batch(&batch, &mut b);
                    assert_eq!(a, b, "{bits}-bit {layout:?} {growth:?}");
                    assert_eq!(plain.counters(), late.counters());
                }
            }
        }
    }

    #[test]
    fn density_growth_adds_and_drops_generations() {
        let spec = FilterSpec { window_ms: 1000, expected_keys: 1000, tick_ms: Some(10), ..FilterSpec::default() };
        let mut f = filter(spec);
        for i in 0..5_000 {
            f.observe(&key(i), 100_000 + i / 10);
        }
        assert!(f.generations().len() > 1, "5× the expected keys in the window must grow the filter");
        let c = f.counters().clone();
        assert!(c.generations_created as usize >= f.generations().len());
        // Quiet period longer than the window: everything expires.
        f.observe(&key(u64::MAX), 200_000);
        assert_eq!(f.generations().len(), 1);
        assert_eq!(f.generations()[0].level(), 0);
        assert!(f.counters().generations_dropped >= c.generations_created - 1);
    }

    #[test]
    fn the_cap_bounds_generations_and_counts_saturation() {
        let spec = FilterSpec {
            window_ms: 1_000_000,
            expected_keys: 100,
            max_generations: 2,
            tick_ms: Some(10_000),
            ..FilterSpec::default()
        };
        let mut f = filter(spec);
        for i in 0..10_000 {
            f.observe(&key(i), 1_000 + i);
        }
        assert_eq!(f.generations().len(), 2);
        assert!(f.counters().saturated_inserts > 0);
        assert_eq!(f.counters().generations_max, 2);
    }

    /// `observe_batch` takes a compiled run for one generation within a
    /// tick; whatever the widths, layouts, growth, cap, batch sizes, late
    /// events, clock jumps and duplicates, it must leave exactly the state
    /// and verdicts of `observe` one event at a time.
    #[test]
    fn observe_batch_is_observe_in_turn() {
        use crate::filter::timer::params::Layout;
        use crate::testkit::workload::Rng;
        let mut runs = 0;
        for bits in [4u8, 6, 8, 16, 32] {
            for layout in [Layout::Standard, Layout::Blocked] {
                // k = 7 runs compiled with k as a constant, 5 with k read at run time.
                for (growth, max_generations, hashes) in [
                    (Growth::Density, 4, 7),
                    (Growth::Cardinality, 3, 5),
                    (Growth::Density, 1, 5),
                    (Growth::None, 1, 7),
                    (Growth::Density, 4, 5),
                    (Growth::None, 1, 5),
                ] {
                    let spec = FilterSpec {
                        hashes: Some(hashes),
                        window_ms: 2_000,
                        expected_keys: 300,
                        timer_bits: bits,
                        layout,
                        growth,
                        max_generations,
                        equal_timers: 2,
                        // Every other stream judges late events at their own time.
                        lateness_ms: (hashes == 5).then_some(1_000),
                        ..FilterSpec::default()
                    };
                    let (mut one, mut batched) = (filter(spec.clone()), filter(spec));
                    let (mut rng, mut now, mut pending) = (Rng::new(u64::from(bits)), 50_000u64, Vec::new());
                    let (mut want, mut got) = (Vec::new(), Vec::new());
                    for i in 0..6_000u64 {
                        now += if rng.below(500) == 0 { 3_000 } else { rng.below(3) };
                        let t = if rng.below(30) == 0 { now.saturating_sub(rng.below(1_500)) } else { now };
                        // Bursts of new keys overfill the filter (growth, the cap).
                        let universe = if (i / 1_000) % 2 == 1 { 6_000 } else { 600 };
                        let e = Event { hash: key(rng.below(universe)), time_ms: t };
                        want.push(one.observe(&e.hash, e.time_ms));
                        pending.push(e);
                        if rng.below(40) == 0 {
                            batched.observe_batch(&pending, &mut got);
                            pending.clear();
                        }
                    }
                    batched.observe_batch(&pending, &mut got);
                    let name = format!("{bits}-bit {layout:?} {growth:?} cap {max_generations} k {hashes}");
                    assert_eq!(got, want, "{name}: verdicts");
                    assert_eq!(batched, one, "{name}: state");
                    let c = one.counters();
                    assert!(c.duplicates > 100 && c.late_events > 100, "{name}: {c:?}");
                    runs += usize::from(c.generations_created > 1 || c.saturated_inserts > 0);
                }
            }
        }
        assert!(runs >= 30, "growth or saturation in {runs} of 60 streams");
    }

    fn deletable(spec: FilterSpec) -> SlidingFilter {
        filter(FilterSpec { deletable: true, ..spec })
    }

    #[test]
    fn delete_lets_the_next_copy_through_and_changes_no_other_verdict() {
        let spec = FilterSpec { window_ms: 10_000, expected_keys: 2_000, tick_ms: Some(100), ..FilterSpec::default() };
        let (mut plain, mut counting) = (filter(spec.clone()), deletable(spec));
        let mut rng = crate::filter::random::Rng::new(16);
        let mut t = 1_000;
        for _ in 0..1_500 {
            t += rng.below(3);
            let k = key(rng.below(1_000));
            assert_eq!(plain.observe(&k, t), counting.observe(&k, t), "counting cells change no verdict");
        }
        // Keys seen so far (all inside the window): delete some, then every
        // key comes again.
        let seen: Vec<u64> = (0..1_000).filter(|&i| counting.lookup(&key(i)).duplicate).collect();
        assert!(seen.len() > 600);
        let mut deleted = Vec::new();
        for &i in seen.iter().step_by(10) {
            match counting.delete(&key(i)) {
                Ok(()) => deleted.push(i),
                Err(why) => panic!("key {i}: {why}"),
            }
        }
        assert_eq!(plain.delete(&key(seen[0])), Err(DeleteRefusal::NotDeletable));
        for &i in &seen {
            let (p, c) = (plain.observe(&key(i), t), counting.observe(&key(i), t));
            assert!(!p.is_distinct(), "key {i} without delete");
            if deleted.contains(&i) {
                assert!(c.is_distinct(), "deleted key {i} is delivered again");
            } else {
                // (The equal-timer count may differ: a deleted key sent
                // again refreshes the cells it shares.)
                assert_eq!(p.is_distinct(), c.is_distinct(), "key {i} not deleted: same verdict");
            }
        }
        // Delivered again, a deleted key is in the window again.
        assert!(counting.lookup(&key(deleted[0])).duplicate);
        let never = (5_000..).map(key).find(|k| !counting.lookup(k).duplicate).unwrap();
        assert_eq!(counting.delete(&never), Err(DeleteRefusal::Absent));
        // Expired keys are absent too.
        counting.advance(t + 20_000);
        assert_eq!(counting.delete(&key(seen[1])), Err(DeleteRefusal::Absent));
    }

    #[test]
    fn delete_refuses_a_key_two_generations_hold() {
        let mut f = deletable(FilterSpec { window_ms: 1000, expected_keys: 100, ..FilterSpec::default() });
        f.observe(&key(1), 10);
        f.push_generation(0);
        let now = f.now();
        let k = f.params.hashes;
        let (alive, newest) = (f.alive.clone(), f.generations.last_mut().unwrap());
        newest.count_insert(&key(1), k, &now);
        newest.insert(&key(1), k, &now, &alive);
        let before = f.clone();
        assert_eq!(f.delete(&key(1)), Err(DeleteRefusal::Ambiguous));
        assert_eq!(f, before, "a refused delete changes nothing");
    }

    #[test]
    fn counts_saturate_and_are_never_decremented_past_saturation() {
        let mut f = deletable(FilterSpec { window_ms: 1000, expected_keys: 100, ..FilterSpec::default() });
        f.observe(&key(1), 10);
        let now = f.now();
        let k = f.params.hashes;
        let g = &mut f.generations[0];
        for _ in 0..300 {
            g.count_insert(&key(1), k, &now);
        }
        f.delete(&key(1)).unwrap();
        // Saturated: the cells stay, so the key stays (no false negative for
        // the inserts the counter could not count).
        assert!(f.lookup(&key(1)).duplicate);
    }

    #[test]
    fn lookup_does_not_insert() {
        let mut f = filter(FilterSpec { window_ms: 1000, expected_keys: 100, ..FilterSpec::default() });
        f.observe(&key(1), 10);
        let before = f.clone();
        let hit = f.lookup(&key(1));
        assert!(hit.duplicate);
        assert_eq!(hit.alive_cells, f.params().hashes);
        assert!(!f.lookup(&key(2)).duplicate);
        assert_eq!(f, before);
    }
}
