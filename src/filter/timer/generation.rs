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
//!
//! Beside the generation itself: `stored` (the fields a snapshot stores),
//! `key_cells` (the loops over one key's cells) and `run` (the batched
//! test-then-insert while one generation is the filter's only one).

use super::cells::{CellArray, TimerCells, with_cells};
use super::clock::{AliveTable, Now};
use super::sizing;
use crate::filter::hash::{BLOCK_CELLS, BlockProbe, KeyHash, Probe};
use crate::filter::timer::params::{FilterParams, Growth, Layout};

mod key_cells;
mod run;
mod stored;

pub(crate) use key_cells::most_equal;
use key_cells::{all_alive, equal_timers_at, prefetch_cells, probe_cells, set_cells};
pub(crate) use run::{Judged, Run};
pub(crate) use stored::StoredGeneration;

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
        Generation::sized(level, params.level_cells(level), params)
    }

    /// A generation of `level` (its FPR target) with `m` cells, at most the
    /// level's (growth sizes it from the live keys).
    pub(crate) fn sized(level: u8, m: u64, params: &FilterParams) -> Self {
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

#[cfg(test)]
mod tests;
