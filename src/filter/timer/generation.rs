//! One sliding generation: a timer Bloom filter over `m` cells.
//!
//! A cell holds 0 (empty) or `tick mod R + 1`, the compact time it was last
//! set. It is *alive* while its age (now − stored, mod R) is at most W ticks.
//! Storing the time of setting is equivalent to the paper's countdown timers
//! (remaining = W − age) without decrementing every cell on every tick.
//!
//! Two pieces of bookkeeping keep this exact and cheap:
//! - a histogram of the values of alive cells, so the number of live cells
//!   is known at every moment: when tick t starts, exactly the cells stored
//!   at tick t − W − 1 die, and their count is one histogram lookup. Only
//!   alive values' buckets mean anything: an overwrite decrements the old
//!   value's bucket whatever it was (no test, no select on the hot path), so
//!   dead values' buckets fill with garbage that no one reads, and a bucket
//!   is zeroed when its value becomes now again (no cell holds it then);
//! - an incremental sweep that clears expired cells, m/L cells per tick, so
//!   every cell is visited at least once every L ticks and no expired value
//!   lives long enough to wrap around R and look young again (which is also
//!   why a bucket is empty again when its value comes round: R − W − 1 > L
//!   ticks after it emptied).

use super::cells::{CellArray, TimerCells, with_cells};
use super::clock::{AliveTable, Now};
use super::sizing;
use crate::filter::event::{Event, FilterCounters, PREFETCH_DISTANCE, Verdict};
use crate::filter::hash::{BLOCK_CELLS, BlockProbe, KeyHash, Positions, Probe};
use crate::filter::timer::params::{FilterParams, Growth, Layout};

/// Evaluates `$body` with `$p` bound to the probe sequence of `$hash` in
/// generation `$g` (all positions: take k): a [`Probe`] in the standard
/// layout, a [`BlockProbe`] in the blocked one. Each body is compiled for
/// both, so neither pays for the other.
macro_rules! with_positions {
    ($g:expr, $hash:expr, $p:ident => $body:expr) => {
        if $g.block == 0 {
            let $p: Probe = $hash.probe($g.m);
            $body
        } else {
            let $p: BlockProbe = $hash.probe_blocked($g.m);
            $body
        }
    };
}

/// Cells the sweep clears in one run (a run is one pass of a vectorised
/// select; a tick's share is usually a few runs).
const SWEEP_RUN: usize = 4096;

/// Counters saturate here: a saturated counter is never decremented again
/// (it may stand for more insertions than it can count), so a delete can
/// never clear a cell another key still needs.
pub const COUNTER_MAX: u8 = u8::MAX;

/// What a filter tells before it writes cells.
pub(crate) trait CellWrites {
    /// Whether the calls do anything (false: the callers skip them, and
    /// with them any work done only to make them).
    const ACTIVE: bool;
    /// Cell `i` of `g` is about to change.
    fn cell(&mut self, g: &Generation, i: usize);
    /// Cells `start..start + n` of `g` are about to change.
    fn cells(&mut self, g: &Generation, start: usize, n: usize);
    /// Any cell of `g` may change (it is about to be cleared).
    fn all(&mut self, g: &Generation);
    /// `g` is about to be dropped.
    fn dropping(&mut self, g: &Generation);
}

/// No one to tell: the ordinary path.
pub(crate) struct Untold;

impl CellWrites for Untold {
    const ACTIVE: bool = false;
    #[inline(always)]
    fn cell(&mut self, _: &Generation, _: usize) {}
    #[inline(always)]
    fn cells(&mut self, _: &Generation, _: usize, _: usize) {}
    #[inline(always)]
    fn all(&mut self, _: &Generation) {}
    #[inline(always)]
    fn dropping(&mut self, _: &Generation) {}
}

/// What a generation says about one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Probed {
    /// How many of the k cells are alive.
    pub alive: u32,
    /// The largest number of alive cells holding one and the same time
    /// (computed only when all k are alive, else 0).
    pub equal: u32,
}

/// The fields of a generation that a snapshot stores.
pub(crate) struct StoredGeneration {
    pub level: u8,
    pub m: u64,
    pub cells: CellArray,
    pub inserted: u64,
    pub sweep_cursor: u64,
    pub sweep_debt: u64,
    /// The counting cells of a deletable filter.
    pub counts: Option<Vec<u8>>,
}

impl StoredGeneration {
    /// The first set cell that a generation dedupd ran cannot hold, if
    /// any: its position, its value and why it cannot be.
    ///
    /// Restoring such a cell would leave a live count that no longer
    /// matches the cells (and a cell that comes alive by itself), so the
    /// restored filter would not be the one snapshotted. Two things cannot
    /// be (see the module docs):
    /// - a time before tick 0: the steps of the first W ticks retire nothing;
    /// - a time value that comes round again (looks young) before the sweep
    ///   clears it: every set cell is cleared, once expired, before its age
    ///   reaches R.
    pub(crate) fn first_impossible_cell(&self, now: &Now, sweep_ticks: u32) -> Option<(u64, u32, &'static str)> {
        let (m, period, sweep_ticks) = (self.m, u64::from(now.period), u64::from(sweep_ticks));
        // The cells in the order the sweep visits them, from the cursor. After
        // n steps the sweep has cleared ⌊(debt + n·m) / L⌋ cells, so the j-th
        // is cleared at step n = ⌈((j + 1)·L − debt) / m⌉: kept incrementally
        // (one pass at restore, no division per cell).
        let order = (self.sweep_cursor..m).chain(0..self.sweep_cursor);
        let (mut due, mut n) = (sweep_ticks - self.sweep_debt, 0u64);
        with_cells!(&self.cells, c => order.into_iter().find_map(|i| {
            while n * m < due {
                n += 1;
            }
            due += sweep_ticks;
            let v = c.get(i as usize);
            if v == 0 {
                return None;
            }
            let age = u64::from(now.age(v));
            if age > now.tick {
                Some((i, v, "is older than the clock: a time before tick 0"))
            } else if age + n >= period {
                Some((i, v, "would look young again before the sweep clears it"))
            } else {
                None
            }
        }))
    }
}

/// One generation of a slice's filter.
#[derive(Clone, Debug)]
pub struct Generation {
    pub(crate) level: u8,
    pub(crate) m: u64,
    /// Cells per block in the blocked layout; 0 in the standard layout.
    block: u64,
    pub(crate) cells: CellArray,
    /// `hist[v]` = number of cells storing `v`, exact for the alive values
    /// `v` in `1..=R` only: the buckets of dead values, and `hist[0]` (empty
    /// cells), take decrements that no one reads (see [`Self::insert`]).
    hist: Vec<u32>,
    /// Cells alive now (the exact z of the density z/m).
    live: u64,
    /// Keys inserted (for cardinality growth; never decremented).
    pub(crate) inserted: u64,
    /// Next cell the sweep visits.
    pub(crate) sweep_cursor: u64,
    /// Fractional sweep progress: cells owed × L.
    pub(crate) sweep_debt: u64,
    /// Derived from the level: the generation is full above this many live
    /// cells (density growth) …
    full_at_live: u64,
    /// … or from this many inserted keys (cardinality growth).
    full_at_keys: u64,
    /// Deletable filters only: per cell, how many inserts set it since it
    /// was last empty (saturating at [`COUNTER_MAX`], which is then never
    /// decremented). A cell's timer holds the newest of those inserts, so
    /// all of them expire with it; a counter is only read while its cell is
    /// kept, and an insert into an empty or expired cell restarts it at 1,
    /// so the sweep need not touch the counters.
    pub(crate) counts: Option<Vec<u8>>,
}

/// Equal when everything a snapshot stores and everything derived from it
/// is: the histogram's meaningful buckets follow from the cells and the
/// clock (and are covered by `live`), its dead buckets are garbage.
impl PartialEq for Generation {
    fn eq(&self, other: &Self) -> bool {
        let Generation {
            level,
            m,
            block,
            cells,
            hist: _,
            live,
            inserted,
            sweep_cursor,
            sweep_debt,
            full_at_live,
            full_at_keys,
            counts,
        } = self;
        counts == &other.counts
            && (level, m, block, cells, live, inserted, sweep_cursor, sweep_debt, full_at_live, full_at_keys)
                == (
                    &other.level,
                    &other.m,
                    &other.block,
                    &other.cells,
                    &other.live,
                    &other.inserted,
                    &other.sweep_cursor,
                    &other.sweep_debt,
                    &other.full_at_live,
                    &other.full_at_keys,
                )
    }
}

impl Generation {
    pub(crate) fn new(level: u8, params: &FilterParams) -> Self {
        let m = params.level_cells(level);
        let cells = CellArray::new(params.timer_bits, m as usize);
        let counts = params.deletable.then(|| vec![0u8; m as usize]);
        let stored = StoredGeneration { level, m, cells, inserted: 0, sweep_cursor: 0, sweep_debt: 0, counts };
        Generation::restore(stored, None, params)
    }

    /// Rebuilds a generation from its stored fields; the histogram and live
    /// count are derived from the cells, so they cannot disagree with them.
    pub(crate) fn restore(stored: StoredGeneration, now: Option<Now>, params: &FilterParams) -> Self {
        let StoredGeneration { level, m, cells, inserted, sweep_cursor, sweep_debt, counts } = stored;
        let p = params.level_fpr(level);
        let block = match params.layout {
            Layout::Standard => 0,
            Layout::Blocked => BLOCK_CELLS,
        };
        let mut g = Generation {
            level,
            m,
            block,
            cells,
            hist: vec![0; params.period as usize + 1],
            live: 0,
            inserted,
            sweep_cursor,
            sweep_debt,
            full_at_live: (m as f64 * sizing::density_threshold(p, params.hashes)).floor() as u64,
            full_at_keys: sizing::cardinality_threshold(m, params.hashes, p).floor() as u64,
            counts,
        };
        let (hist, live) = (&mut g.hist, &mut g.live);
        with_cells!(&g.cells, c => {
            for i in 0..m as usize {
                let v = c.get(i);
                if now.is_some_and(|n| n.is_alive(v)) {
                    hist[v as usize] += 1;
                    *live += 1;
                }
            }
        });
        g
    }

    pub fn level(&self) -> u8 {
        self.level
    }

    pub fn cells(&self) -> u64 {
        self.m
    }

    pub fn live_cells(&self) -> u64 {
        self.live
    }

    pub fn inserted(&self) -> u64 {
        self.inserted
    }

    /// Whether the generation has reached its share of the FPR budget.
    pub(crate) fn is_full(&self, growth: Growth) -> bool {
        self.full_at(growth).reached(self.live, self.inserted)
    }

    fn full_at(&self, growth: Growth) -> FullAt {
        FullAt { growth, live: self.full_at_live, keys: self.full_at_keys }
    }

    /// Keys the live cells stand for, `-(m/k)·ln(1 - z/m)`.
    pub fn estimated_keys(&self, k: u32) -> f64 {
        sizing::keys_from_density(self.m, k, self.density())
    }

    pub fn density(&self) -> f64 {
        self.live as f64 / self.m as f64
    }

    /// `(z/m)^k`: the FPR this generation's current density predicts.
    pub fn estimated_fpr(&self, k: u32) -> f64 {
        sizing::fpr_from_density(self.density(), k)
    }

    pub fn memory_bytes(&self) -> usize {
        self.cells.memory_bytes() + self.hist.len() * 4 + self.counts.as_ref().map_or(0, Vec::len)
    }

    /// Deletable filters: counts one insert of the key into its counting
    /// cells. Called before the insert sets the timers: a cell that is
    /// empty or expired until now restarts its count.
    pub(crate) fn count_insert(&mut self, hash: &KeyHash, k: u32, now: &Now) {
        let mut positions = [0usize; crate::filter::timer::params::MAX_HASHES as usize];
        self.for_each_position_into(hash, k, &mut positions);
        let Generation { cells, counts, .. } = self;
        let Some(counts) = counts.as_mut() else { return };
        with_cells!(&*cells, c => {
            for &i in &positions[..k as usize] {
                let old = c.get(i);
                counts[i] = if old != 0 && !now.is_dead(old) { counts[i].saturating_add(1) } else { 1 };
            }
        });
    }

    /// Whether all k cells of the key are kept (set and not yet expired for
    /// late events either): the generation may hold the key.
    pub(crate) fn holds_kept(&self, hash: &KeyHash, k: u32, now: &Now) -> bool {
        with_positions!(self, hash, positions => with_cells!(&self.cells, c => {
            positions.take(k as usize).all(|i| {
                let v = c.get(i);
                v != 0 && !now.is_dead(v)
            })
        }))
    }

    /// Deletable filters: takes one insert of the key out of its counting
    /// cells, emptying each cell whose count falls to 0 (no other insert
    /// still needs it); saturated counts stay. Tells `writes` of each cell
    /// first. Returns how many cells were emptied.
    pub(crate) fn uncount<W: CellWrites>(&mut self, hash: &KeyHash, k: u32, now: &Now, writes: &mut W) -> u32 {
        let mut positions = [0usize; crate::filter::timer::params::MAX_HASHES as usize];
        self.for_each_position_into(hash, k, &mut positions);
        let positions = &positions[..k as usize];
        if W::ACTIVE {
            for &i in positions {
                writes.cell(self, i);
            }
        }
        let Generation { cells, hist, live, counts, .. } = self;
        let Some(counts) = counts.as_mut() else { return 0 };
        let mut emptied = 0;
        with_cells!(cells, c => {
            for &i in positions {
                match counts[i] {
                    0 | COUNTER_MAX => {}
                    1 => {
                        counts[i] = 0;
                        let old = c.get(i);
                        if old != 0 && now.is_alive(old) {
                            hist[old as usize] -= 1;
                            *live -= 1;
                        }
                        c.set(i, 0);
                        emptied += 1;
                    }
                    _ => counts[i] -= 1,
                }
            }
        });
        emptied
    }

    /// The key's k cell positions, into `out`.
    fn for_each_position_into(&self, hash: &KeyHash, k: u32, out: &mut [usize]) {
        with_positions!(self, hash, positions => {
            for (o, i) in out.iter_mut().zip(positions.take(k as usize)) {
                *o = i;
            }
        })
    }

    /// Tests a key without changing anything.
    #[inline]
    pub(crate) fn probe(&self, hash: &KeyHash, k: u32, now: &Now) -> Probed {
        with_positions!(self, hash, positions => {
            with_cells!(&self.cells, c => probe_cells(c, positions, k, now))
        })
    }

    /// Prefetches the cache lines of the key's k cells.
    #[inline]
    pub(crate) fn prefetch(&self, hash: &KeyHash, k: u32) {
        with_positions!(self, hash, positions => with_cells!(&self.cells, c => prefetch_cells(c, positions, k)))
    }

    /// The value of cell `i` (< m).
    #[cfg(feature = "vertical")]
    #[inline]
    pub(crate) fn cell(&self, i: usize) -> u32 {
        with_cells!(&self.cells, c => c.get(i))
    }

    /// Calls `each` with the positions of the key's k cells.
    pub(crate) fn for_each_position(&self, hash: &KeyHash, k: u32, mut each: impl FnMut(usize)) {
        with_positions!(self, hash, positions => positions.take(k as usize).for_each(&mut each))
    }

    /// Whether all k cells of the key are alive: the test of test-then-insert,
    /// lean (no counts, no early exit, no branch on a cell).
    #[inline]
    pub(crate) fn contains(&self, hash: &KeyHash, k: u32, alive: &AliveTable) -> bool {
        with_positions!(self, hash, positions => with_cells!(&self.cells, c => all_alive(c, positions, k, alive)))
    }

    /// The largest number of the key's k cells holding one time (for a key
    /// whose k cells are all alive).
    #[cold]
    pub(crate) fn equal_timers(&self, hash: &KeyHash, k: u32) -> u32 {
        with_positions!(self, hash, positions => with_cells!(&self.cells, c => equal_timers_at(c, positions, k)))
    }

    /// Sets the key's k cells to now.
    #[inline]
    pub(crate) fn insert(&mut self, hash: &KeyHash, k: u32, now: &Now, alive: &AliveTable) {
        let alive_before = with_positions!(self, hash, positions => {
            with_cells!(&mut self.cells, c => set_cells(c, &mut self.hist, positions, k, now, alive))
        });
        self.live += u64::from(k - alive_before);
        self.inserted += 1;
    }

    /// For an event behind the clock (see `SlidingFilter::observe_late`):
    /// if all k cells of the key are set at most `limit` ticks ago, the
    /// largest number of them holding one time.
    pub(crate) fn late_match(&self, hash: &KeyHash, k: u32, now: &Now, limit: u32) -> Option<u32> {
        let mut values = [0u32; crate::filter::timer::params::MAX_HASHES as usize];
        let mut all = true;
        with_positions!(self, hash, positions => with_cells!(&self.cells, c => {
            for (v, i) in values.iter_mut().zip(positions.take(k as usize)) {
                *v = c.get(i);
                all &= now.is_within(*v, limit);
            }
        }));
        all.then(|| most_equal(&mut values[..k as usize]))
    }

    /// Inserts a key `delta` ticks behind the clock (`delta` at most the
    /// lateness): each cell takes that tick's time unless it holds a later
    /// one. The live count and the alive values' buckets stay exact.
    pub(crate) fn insert_late(&mut self, hash: &KeyHash, k: u32, now: &Now, delta: u32) {
        let Generation { cells, hist, live, .. } = self;
        with_positions!(self, hash, positions => with_cells!(cells, c => {
            for i in positions.take(k as usize) {
                if let Some(value) = late_cell(hist, live, c.get(i), now, delta) {
                    c.set(i, value);
                }
            }
        }));
        self.inserted += 1;
    }

    #[cfg(feature = "vertical")]
    /// The bookkeeping of [`Self::insert`] for one of the key's cells,
    /// holding `old`, without writing the cell (its owner writes now's
    /// value into it later, see [`super::vertical`]). Per cell what
    /// `set_cells` does for k cells at once: the histogram and the live
    /// count end up the same (wrapping arithmetic, as there).
    #[inline]
    pub(crate) fn account_set(&mut self, old: u32, now: &Now) {
        let bucket = &mut self.hist[old as usize];
        *bucket = bucket.wrapping_sub(1);
        let bucket = &mut self.hist[now.value as usize];
        *bucket = bucket.wrapping_add(1);
        self.live = self.live + 1 - u64::from(now.is_alive(old));
    }

    #[cfg(feature = "vertical")]
    /// The bookkeeping of [`Self::insert_late`] for one cell holding `old`,
    /// without writing it: the value its owner is to write, if the cell
    /// changes.
    #[inline]
    pub(crate) fn account_late_set(&mut self, old: u32, now: &Now, delta: u32) -> Option<u32> {
        late_cell(&mut self.hist, &mut self.live, old, now, delta)
    }

    #[cfg(feature = "vertical")]
    /// Counts one key inserted by [`Self::account_set`] or
    /// [`Self::account_late_set`] (cardinality growth).
    #[inline]
    pub(crate) fn account_inserted(&mut self) {
        self.inserted += 1;
    }

    /// Test-then-insert for `events` in turn while this generation is the
    /// filter's only one and the clock stays in the tick of `run`: exactly
    /// the verdicts, counters and state of [`super::SlidingFilter::observe`]
    /// on each event, with the layout and cell width dispatched once per run
    /// instead of per event and the counts kept in registers. Ends before
    /// an event of a later tick, and after an insert that fills the
    /// generation when the filter may add another (the caller adds it).
    pub(crate) fn observe_run(&mut self, events: &[Event], run: &Run<'_>, judged: Judged<'_>) -> RunEnd {
        let (m, full_at) = (self.m, self.full_at(run.growth));
        let Generation { block, cells, hist, live, inserted, .. } = self;
        let counts = (live, inserted, full_at);
        with_cells!(cells, c => {
            if *block != 0 {
                observe_cells::<_, _, 0>(c, hist, counts, |h: &KeyHash| h.probe_blocked(m), events, run, judged)
            } else if run.k == UNROLLED_K {
                observe_cells::<_, _, UNROLLED_K>(c, hist, counts, |h: &KeyHash| h.probe(m), events, run, judged)
            } else {
                observe_cells::<_, _, 0>(c, hist, counts, |h: &KeyHash| h.probe(m), events, run, judged)
            }
        })
    }

    /// [`Self::step_telling`] with no one to tell.
    #[cfg(test)]
    pub(crate) fn step(&mut self, now: &Now, sweep_ticks: u32) {
        self.step_telling(now, sweep_ticks, &mut Untold);
    }

    /// Moves the generation's view of time one tick forward to `now`: the
    /// cells stored W + 1 ticks ago die, and the sweep clears its share,
    /// telling `writes` which cells it is about to change first.
    pub(crate) fn step_telling<W: CellWrites>(&mut self, now: &Now, sweep_ticks: u32, writes: &mut W) {
        if now.tick > u64::from(now.window) {
            let died = now.value_at(now.tick - u64::from(now.window) - 1);
            // Exact up to this moment: the cells still holding `died`.
            self.live -= u64::from(self.hist[died as usize]);
        }
        // No cell holds now's value (the sweep cleared it at least W + 1
        // ticks ago), but its bucket may hold the garbage of decrements
        // made while it was dead.
        self.hist[now.value as usize] = 0;
        self.sweep_debt += self.m;
        let due = self.sweep_debt / u64::from(sweep_ticks);
        self.sweep_debt %= u64::from(sweep_ticks);
        self.sweep(due.min(self.m), now, writes);
    }

    /// Clears expired cells among the next `count` cells of the sweep, in
    /// runs of up to 4096 cells, each cleared with a branch-free select per
    /// cell (whether a cell has expired is a coin toss at the design
    /// density). The histogram needs no update: clearing a dead cell changes
    /// no alive value's bucket.
    fn sweep<W: CellWrites>(&mut self, count: u64, now: &Now, writes: &mut W) {
        let m = self.m as usize;
        let mut cursor = self.sweep_cursor as usize;
        let mut left = count as usize;
        while left > 0 {
            let n = left.min(SWEEP_RUN).min(m - cursor);
            if W::ACTIVE {
                writes.cells(self, cursor, n);
            }
            with_cells!(&mut self.cells, c => c.clear_dead(cursor, n, now));
            left -= n;
            cursor += n;
            if cursor == m {
                cursor = 0;
            }
        }
        self.sweep_cursor = cursor as u64;
    }

    /// Empties the generation (every cell has expired).
    pub(crate) fn clear(&mut self) {
        self.cells.clear();
        if let Some(counts) = self.counts.as_mut() {
            counts.fill(0);
        }
        self.hist.fill(0);
        self.live = 0;
        self.sweep_cursor = 0;
        self.sweep_debt = 0;
    }
}

/// The late insert of one cell holding `old`, `delta` ticks behind the
/// clock (see [`Generation::insert_late`]): the value to store unless the
/// cell holds one as late or later already, with the live count and the
/// alive values' buckets kept exact.
#[inline]
fn late_cell(hist: &mut [u32], live: &mut u64, old: u32, now: &Now, delta: u32) -> Option<u32> {
    if now.is_within(old, delta) {
        return None; // as late or later already
    }
    if old != 0 && now.is_alive(old) {
        hist[old as usize] -= 1;
        *live -= 1;
    }
    let value = now.value_at(now.tick - u64::from(delta));
    if delta <= now.window {
        hist[value as usize] += 1;
        *live += 1;
    }
    Some(value)
}

/// When a generation is full, by its live cells or its inserted keys.
#[derive(Clone, Copy)]
struct FullAt {
    growth: Growth,
    live: u64,
    keys: u64,
}

impl FullAt {
    #[inline(always)]
    fn reached(self, live: u64, inserted: u64) -> bool {
        match self.growth {
            Growth::Density => live > self.live,
            Growth::Cardinality => inserted >= self.keys,
            Growth::None => false,
        }
    }
}

/// What stays fixed through a run of events (see [`Generation::observe_run`]).
pub(crate) struct Run<'a> {
    pub now: Now,
    pub alive: &'a AliveTable,
    pub k: u32,
    pub equal_min: u32,
    pub growth: Growth,
    /// The filter has its maximum of generations: a full one takes keys on.
    pub at_cap: bool,
    /// The first ms of the next tick: an event at or after it ends the run.
    pub next_tick_ms: u64,
    /// Prefetch the cells of the event [`PREFETCH_DISTANCE`] places ahead.
    pub prefetch: bool,
    /// Events behind the clock are judged at their own time (lateness on):
    /// such an event ends the run and goes through the filter's late path.
    pub late_own_time: bool,
}

/// Where a run's verdicts and counts go.
pub(crate) struct Judged<'a> {
    pub clock_ms: &'a mut u64,
    pub counters: &'a mut FilterCounters,
    pub out: &'a mut Vec<Verdict>,
}

/// How a run ended: after `handled` events; `filled` if the last one filled
/// the generation and the filter is to add one.
pub(crate) struct RunEnd {
    pub handled: usize,
    pub filled: bool,
}

/// The k compiled as a constant into the standard layout's run: the
/// default (FPR 1% gives k = 7). Unrolled, its probe loops run ~6% faster
/// (256 KiB, 8-bit); the blocked layout's run measured ~7% slower unrolled,
/// so it keeps k at run time.
const UNROLLED_K: u32 = 7;

/// The loop of [`Generation::observe_run`] for one cell width and layout;
/// `K` is k as a compile-time constant, or 0 to read it from `run`.
#[inline(always)]
fn observe_cells<C: TimerCells, P: Positions, const K: u32>(
    cells: &mut C,
    hist: &mut [u32],
    (live, inserted, full_at): (&mut u64, &mut u64, FullAt),
    positions: impl Fn(&KeyHash) -> P,
    events: &[Event],
    run: &Run<'_>,
    judged: Judged<'_>,
) -> RunEnd {
    let Judged { clock_ms, counters, out } = judged;
    let k = if K == 0 { run.k } else { K };
    debug_assert_eq!(k, run.k);
    let (mut live_now, mut inserted_now, mut clock) = (*live, *inserted, *clock_ms);
    let (mut distinct, mut duplicates, mut late, mut saturated) = (0u64, 0u64, 0u64, 0u64);
    let mut end = RunEnd { handled: 0, filled: false };
    for (n, e) in events.iter().enumerate() {
        if e.time_ms >= run.next_tick_ms || (run.late_own_time && e.time_ms < clock) {
            break;
        }
        if run.prefetch
            && let Some(ahead) = events.get(n + PREFETCH_DISTANCE)
        {
            prefetch_cells(cells, positions(&ahead.hash), k);
        }
        end.handled = n + 1;
        // The clock never goes back: a late event is judged at the clock
        // (with lateness on, it ended the run above instead).
        late += u64::from(e.time_ms < clock);
        clock = clock.max(e.time_ms);
        let at = positions(&e.hash);
        if all_alive(cells, at, k, run.alive) {
            let equal = equal_timers_at(cells, at, k);
            if equal >= run.equal_min {
                duplicates += 1;
                counters.equal_timer_counts[equal as usize] += 1;
                out.push(Verdict::Duplicate { equal_timers: equal as u8 });
                continue;
            }
        }
        distinct += 1;
        saturated += u64::from(run.at_cap && full_at.reached(live_now, inserted_now));
        live_now += u64::from(k - set_cells(cells, hist, at, k, &run.now, run.alive));
        inserted_now += 1;
        out.push(Verdict::Distinct);
        if !run.at_cap && full_at.reached(live_now, inserted_now) {
            end.filled = true;
            break;
        }
    }
    (*live, *inserted, *clock_ms) = (live_now, inserted_now, clock);
    counters.events += end.handled as u64;
    counters.distinct += distinct;
    counters.duplicates += duplicates;
    counters.late_events += late;
    counters.saturated_inserts += saturated;
    end
}

/// Blocks of at most this many cache lines are prefetched whole.
const WHOLE_BLOCK_LINES: usize = 4;

/// Prefetches the cache lines of the k cells at `positions`. A block of the
/// blocked layout that spans at most [`WHOLE_BLOCK_LINES`] lines (4-bit and
/// 8-bit cells: 2 and 4 lines, of which a key touches ~2 and ~3.5) is
/// prefetched one line at a time — a prefetch per line instead of one per
/// cell, so fewer prefetches wait for the same line. Measured at 1 GiB,
/// 8-bit (docs/dev/performance.md): +13% on average over 7 alternating runs,
/// +40% in a bare loop of the same accesses, within noise in criterion.
/// A wider block (8 lines of 16-bit cells, ~4.4 of them touched) and the
/// standard layout are prefetched cell by cell.
#[inline(always)]
fn prefetch_cells<C: TimerCells>(cells: &C, positions: impl Positions, k: u32) {
    if let Some(start) = positions.block_start() {
        let first = cells.cell_addr(start);
        let last = cells.cell_addr(start + BLOCK_CELLS as usize - 1);
        let lines = last as usize / 64 - first as usize / 64 + 1;
        if lines <= WHOLE_BLOCK_LINES {
            let line = first.wrapping_sub(first as usize % 64);
            for n in 0..lines {
                super::cells::prefetch(line.wrapping_add(64 * n));
            }
            return;
        }
    }
    for i in positions.take(k as usize) {
        super::cells::prefetch(cells.cell_addr(i));
    }
}

/// Whether all k cells at `positions` are alive: the test of
/// test-then-insert, lean (no counts, no early exit, no branch on a cell).
#[inline(always)]
fn all_alive<C: TimerCells>(cells: &C, positions: impl Iterator<Item = usize>, k: u32, alive: &AliveTable) -> bool {
    let mut all = 1;
    for i in positions.take(k as usize) {
        // SAFETY: a probe over m cells yields positions below m, and the
        // array holds m cells (`Generation` invariant); a cell holds at most R.
        all &= unsafe { alive.get_unchecked(cells.get_unchecked(i)) };
    }
    all != 0
}

/// The largest number of the k cells at `positions` holding one time (for
/// a key whose k cells are all alive).
#[cold]
fn equal_timers_at<C: TimerCells>(cells: &C, positions: impl Iterator<Item = usize>, k: u32) -> u32 {
    let mut values = [0u32; crate::filter::timer::params::MAX_HASHES as usize];
    for (v, i) in values.iter_mut().zip(positions.take(k as usize)) {
        *v = cells.get(i);
    }
    most_equal(&mut values[..k as usize])
}

/// Sets the k cells at `positions` to now and returns how many of them
/// were alive before.
///
/// Branch-free per cell, with no select either: whether a cell is empty,
/// alive or expired is a coin toss at the design density. Each cell leaves
/// its old value's bucket and joins now's; the k joins are applied once.
/// That is exact for every alive value, including now (a cell already
/// holding now, or a position repeated in the key's probe sequence, leaves
/// and joins now's bucket: no change). An empty or dead old value's bucket
/// takes a decrement no one reads (it is zeroed before its value is stored
/// again, see [`Generation::step_telling`]).
#[inline(always)]
fn set_cells<C: TimerCells>(
    cells: &mut C,
    hist: &mut [u32],
    positions: impl Iterator<Item = usize>,
    k: u32,
    now: &Now,
    alive: &AliveTable,
) -> u32 {
    let mut alive_before = 0u32;
    for i in positions.take(k as usize) {
        // SAFETY: a probe over m cells yields positions below m, and the
        // array holds m cells (`Generation` invariant); a cell holds at most
        // R, and the histogram has R + 1 buckets.
        let old = unsafe { cells.get_unchecked(i) };
        unsafe { cells.set_unchecked(i, now.value) };
        let bucket = unsafe { hist.get_unchecked_mut(old as usize) };
        *bucket = bucket.wrapping_sub(1);
        alive_before += unsafe { alive.get_unchecked(old) };
    }
    // Wrapping: the loop may have taken now's bucket below zero first.
    let now_bucket = &mut hist[now.value as usize];
    *now_bucket = now_bucket.wrapping_add(k);
    alive_before
}

#[inline]
fn probe_cells<C: TimerCells>(cells: &C, positions: impl Iterator<Item = usize>, k: u32, now: &Now) -> Probed {
    let mut values = [0u32; crate::filter::timer::params::MAX_HASHES as usize];
    let k = k as usize;
    // All k cells are read without a branch on their values (the reads are
    // independent, so they overlap; an early exit at the first dead cell
    // would mispredict about once per key). `alive` counts the cells before
    // the first dead one: one dead cell proves the key is new here.
    let mut alive_mask = 0u64;
    for (n, i) in positions.take(k).enumerate() {
        let v = cells.get(i);
        values[n] = v;
        alive_mask |= u64::from(now.is_alive(v)) << n;
    }
    let alive = (!alive_mask).trailing_zeros().min(k as u32);
    if alive < k as u32 {
        return Probed { alive, equal: 0 };
    }
    Probed { alive, equal: most_equal(&mut values[..k]) }
}

/// The size of the largest group of equal values.
pub(crate) fn most_equal(values: &mut [u32]) -> u32 {
    values.sort_unstable();
    let (mut best, mut run) = (1, 1);
    for w in values.windows(2) {
        run = if w[0] == w[1] { run + 1 } else { 1 };
        best = best.max(run);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::hash::DEFAULT_SEED;
    use crate::filter::timer::params::FilterSpec;

    fn params(bits: u8) -> FilterParams {
        FilterSpec {
            window_ms: 10_000,
            expected_keys: 1000,
            timer_bits: bits,
            tick_ms: Some(1000),
            ..FilterSpec::default()
        }
        .resolve()
        .unwrap()
    }

    #[test]
    fn alive_intervals_match_the_age_rule() {
        for (bits, window_ms) in [(4u8, 60_000), (5, 1_000), (8, 60_000), (8, 7), (12, 60_000), (32, 100_000)] {
            let p = FilterSpec { timer_bits: bits, window_ms, ..FilterSpec::default() }.resolve().unwrap();
            let (w, r) = (p.window_ticks, p.period);
            let mut table = AliveTable::at(&Now::at(0, &p));
            for tick in 0..u64::from(r) * 2 + 3 {
                let now = Now::at(tick, &p);
                let probe = (0..=r.min(600)).chain(r.saturating_sub(600)..=r);
                for v in probe {
                    let age = if now.value >= v { now.value - v } else { now.value + r - v };
                    let alive = v != 0 && age <= w;
                    assert_eq!(now.is_alive(v), alive, "bits {bits} tick {tick} value {v}");
                    assert_eq!(now.is_dead(v), v != 0 && !alive, "bits {bits} tick {tick} value {v}");
                }
                // The table follows the same rule, stepped tick by tick.
                if tick == 0 {
                    table = AliveTable::at(&now);
                } else {
                    table.step(&now);
                }
                assert_eq!(table, AliveTable::at(&now), "bits {bits} tick {tick}");
            }
        }
    }

    /// The histogram's alive buckets and the live count equal a recount of
    /// the cells after every tick, through densities from empty to
    /// saturated, repeated positions (a small blocked filter repeats one in
    /// ~8% of keys) and many periods of the timer values.
    #[test]
    fn histogram_alive_buckets_match_a_recount() {
        for (bits, layout) in
            [(4u8, Layout::Standard), (4, Layout::Blocked), (8, Layout::Blocked), (12, Layout::Standard)]
        {
            let p = FilterSpec {
                window_ms: 10_000,
                expected_keys: 300,
                timer_bits: bits,
                tick_ms: Some(if bits == 4 { 2000 } else { 500 }),
                layout,
                ..FilterSpec::default()
            }
            .resolve()
            .unwrap();
            let mut g = Generation::new(0, &p);
            let mut key = 0u64;
            for tick in 1_000..1_000 + 3 * u64::from(p.period) {
                let now = Now::at(tick, &p);
                g.step(&now, p.sweep_ticks);
                let table = AliveTable::at(&now);
                // Load varies with time: from a trickle to far past the design load.
                for _ in 0..(tick * 37 % 97) {
                    key += 1;
                    g.insert(&KeyHash::of(DEFAULT_SEED, &key.to_le_bytes()), p.hashes, &now, &table);
                }
                let mut recount = vec![0u32; p.period as usize + 1];
                with_cells!(&g.cells, c => {
                    for i in 0..g.m as usize {
                        recount[c.get(i) as usize] += 1;
                    }
                });
                let alive = || (1..=p.period).filter(|&v| now.is_alive(v));
                for v in alive() {
                    assert_eq!(g.hist[v as usize], recount[v as usize], "bits {bits} {layout:?} tick {tick} value {v}");
                }
                let live: u32 = alive().map(|v| recount[v as usize]).sum();
                assert_eq!(g.live_cells(), u64::from(live), "bits {bits} {layout:?} tick {tick}");
            }
        }
    }

    #[test]
    fn most_equal_counts_the_largest_group() {
        assert_eq!(most_equal(&mut [3, 1, 3, 2, 3, 1]), 3);
        assert_eq!(most_equal(&mut [1, 2, 3]), 1);
        assert_eq!(most_equal(&mut [5]), 1);
    }

    #[test]
    fn cells_live_exactly_window_ticks_and_the_count_follows() {
        for bits in [4u8, 8, 12, 16, 32] {
            let p = params(bits);
            let w = u64::from(p.window_ticks);
            let mut g = Generation::new(0, &p);
            let key = KeyHash::of(DEFAULT_SEED, b"a");
            let start = 1_000_000;
            let now = Now::at(start, &p);
            assert_eq!(g.probe(&key, p.hashes, &now).alive, 0);
            g.insert(&key, p.hashes, &now, &AliveTable::at(&now));
            let live = g.live_cells();
            assert!(live >= 1 && live <= u64::from(p.hashes));
            for t in start + 1..=start + w {
                let now = Now::at(t, &p);
                g.step(&now, p.sweep_ticks);
                assert_eq!(
                    g.probe(&key, p.hashes, &now),
                    Probed { alive: p.hashes, equal: p.hashes },
                    "bits {bits} tick {t}"
                );
                assert_eq!(g.live_cells(), live);
            }
            // Run long past the period: the key must die at W+1 and never come back.
            for t in start + w + 1..start + 5 * u64::from(p.period) {
                let now = Now::at(t, &p);
                g.step(&now, p.sweep_ticks);
                assert_eq!(g.probe(&key, p.hashes, &now).alive, 0, "bits {bits} tick {t}");
                assert_eq!(g.live_cells(), 0);
            }
            let now = Now::at(start + 5 * u64::from(p.period), &p);
            assert!(
                (0..=p.period).filter(|&v| now.is_alive(v)).all(|v| g.hist[v as usize] == 0),
                "no alive value counts a cell"
            );
            with_cells!(&g.cells, c => assert!((0..g.m as usize).all(|i| c.get(i) == 0), "the sweep cleared every cell"));
        }
    }
}
