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
use crate::filter::timer::params::FilterParams;

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
    /// Whether a duplicate's equal-timer count is taken when no threshold
    /// needs it (`equal_timers_min` 0): its verdict and
    /// `counters.equal_timer_counts` report it. Off, the batch path skips
    /// the count and reports 0 (not stored: a restored filter counts).
    counts_equal_timers: bool,
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
        SlidingFilter { params, clock_ms, now, alive, next_tick_ms, generations, counters, counts_equal_timers: true }
    }

    /// Off: a duplicate judged in a batch run, which is most of them, is
    /// not given its equal-timer count unless `filter.equal_timers` needs
    /// it (pipe mode when no figures are asked for: nothing reads them).
    pub fn count_equal_timers(&mut self, on: bool) {
        self.counts_equal_timers = on;
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
            count_equal: self.counts_equal_timers || params.equal_timers_min() > 0,
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
            self.grow();
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
    /// lets `insert` set its cells in the generation [`Self::insert_target`]
    /// picks (at the current
    /// clock, with its alive table), and adds a generation when that insert
    /// fills the newest one (at the cap, counts the insert as saturated
    /// instead). One path for the ordinary, late, pipelined and vertically
    /// sliced inserts ([`super::vertical`]), so all grow alike.
    #[inline(always)]
    pub(crate) fn insert_distinct(&mut self, insert: impl FnOnce(&mut Generation, &Now, &AliveTable)) -> Verdict {
        self.counters.distinct += 1;
        let at_cap = self.generations.len() >= self.params.max_generations as usize;
        if at_cap && self.all_full() {
            self.counters.saturated_inserts += 1;
        }
        let target = self.insert_target();
        insert(&mut self.generations[target], &self.now, &self.alive);
        if !at_cap && self.all_full() {
            self.grow();
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
        let counts_equal_timers = self.counts_equal_timers;
        *self = SlidingFilter::from_parts(
            self.params.clone(),
            Some(time_ms),
            std::mem::take(&mut self.generations),
            std::mem::take(&mut self.counters),
        );
        self.counts_equal_timers = counts_equal_timers;
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
}

/// Cells below this many bytes (per slice) are assumed to stay in the core's
/// L1 cache, and batches are not prefetched. Alone in a benchmark, cells up
/// to the L2 cache's size stay there, and prefetching them only costs
/// instructions; in a pipeline the records' own work (reading them, their
/// order, their output) pushes the cells out between one event and the
/// next: pipe mode with a filter of 450 KiB ran about 4% faster prefetched
/// (docs/dev/performance.md, section 2).
pub const PREFETCH_MIN_BYTES: usize = 64 << 10;

#[cfg(test)]
mod tests;
