//! One sliding generation: a timer Bloom filter over `m` cells.
//!
//! A cell holds 0 (empty) or `tick mod R + 1`, the compact time it was last
//! set. It is *alive* while its age (now − stored, mod R) is at most W ticks.
//! Storing the time of setting is equivalent to the paper's countdown timers
//! (remaining = W − age) without decrementing every cell on every tick.
//!
//! Two pieces of bookkeeping keep this exact and cheap:
//! - a histogram of stored values, so the number of live cells is known at
//!   every moment: when tick t starts, exactly the cells stored at tick
//!   t − W − 1 die, and their count is one histogram lookup;
//! - an incremental sweep that clears expired cells, m/L cells per tick, so
//!   every cell is visited at least once every L ticks and no expired value
//!   lives long enough to wrap around R and look young again.

use super::cells::{CellArray, TimerCells, with_cells};
use super::hash::KeyHash;
use super::params::{FilterParams, Growth};
use super::sizing;

/// The slice clock as the cells see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Now {
    /// Absolute tick (`clock_ms / tick_ms`).
    pub tick: u64,
    /// `tick mod R + 1`: what a cell set now stores.
    pub value: u32,
    pub window: u32,
    pub period: u32,
}

impl Now {
    pub(crate) fn at(tick: u64, params: &FilterParams) -> Self {
        let mut now = Now { tick, value: 0, window: params.window_ticks, period: params.period };
        now.value = now.value_at(tick);
        now
    }

    /// What a cell set at `tick` stores.
    #[inline]
    fn value_at(&self, tick: u64) -> u32 {
        (tick % u64::from(self.period)) as u32 + 1
    }

    /// Ticks since a cell stored `value` (non-zero).
    #[inline]
    fn age(&self, value: u32) -> u32 {
        if self.value >= value { self.value - value } else { self.value + self.period - value }
    }

    #[inline]
    fn is_alive(&self, value: u32) -> bool {
        value != 0 && self.age(value) <= self.window
    }
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
}

/// One generation of a slice's filter.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    pub(crate) level: u8,
    pub(crate) m: u64,
    pub(crate) cells: CellArray,
    /// `hist[v - 1]` = number of non-empty cells storing `v`.
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
}

impl Generation {
    pub(crate) fn new(level: u8, params: &FilterParams) -> Self {
        let m = params.level_cells(level);
        let cells = CellArray::new(params.timer_bits, m as usize);
        let stored = StoredGeneration { level, m, cells, inserted: 0, sweep_cursor: 0, sweep_debt: 0 };
        Generation::restore(stored, None, params)
    }

    /// Rebuilds a generation from its stored fields; the histogram and live
    /// count are derived from the cells, so they cannot disagree with them.
    pub(crate) fn restore(stored: StoredGeneration, now: Option<Now>, params: &FilterParams) -> Self {
        let StoredGeneration { level, m, cells, inserted, sweep_cursor, sweep_debt } = stored;
        let p = params.level_fpr(level);
        let mut g = Generation {
            level,
            m,
            cells,
            hist: vec![0; params.period as usize],
            live: 0,
            inserted,
            sweep_cursor,
            sweep_debt,
            full_at_live: (m as f64 * sizing::density_threshold(p, params.hashes)).floor() as u64,
            full_at_keys: sizing::cardinality_threshold(m, params.hashes, p).floor() as u64,
        };
        let (hist, live) = (&mut g.hist, &mut g.live);
        with_cells!(&g.cells, c => {
            for i in 0..m as usize {
                let v = c.get(i);
                if v != 0 {
                    hist[v as usize - 1] += 1;
                    if now.is_some_and(|n| n.is_alive(v)) {
                        *live += 1;
                    }
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
        match growth {
            Growth::Density => self.live > self.full_at_live,
            Growth::Cardinality => self.inserted >= self.full_at_keys,
            Growth::None => false,
        }
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
        self.cells.memory_bytes() + self.hist.len() * 4
    }

    /// Tests a key without changing anything.
    #[inline]
    pub(crate) fn probe(&self, hash: &KeyHash, k: u32, now: &Now) -> Probed {
        with_cells!(&self.cells, c => probe_cells(c, hash.probe(self.m), k, now))
    }

    /// Sets the key's k cells to now.
    #[inline]
    pub(crate) fn insert(&mut self, hash: &KeyHash, k: u32, now: &Now) {
        let (hist, live) = (&mut self.hist, &mut self.live);
        with_cells!(&mut self.cells, c => {
            for i in hash.probe(self.m).take(k as usize) {
                let old = c.get(i);
                if old == now.value {
                    continue; // already set this tick (or a repeated position)
                }
                if old != 0 {
                    hist[old as usize - 1] -= 1;
                    if now.is_alive(old) {
                        *live -= 1;
                    }
                }
                c.set(i, now.value);
                hist[now.value as usize - 1] += 1;
                *live += 1;
            }
        });
        self.inserted += 1;
    }

    /// Moves the generation's view of time one tick forward to `now`: the
    /// cells stored W + 1 ticks ago die, and the sweep clears its share.
    pub(crate) fn step(&mut self, now: &Now, sweep_ticks: u32) {
        if now.tick > u64::from(now.window) {
            let died = now.value_at(now.tick - u64::from(now.window) - 1);
            self.live -= u64::from(self.hist[died as usize - 1]);
        }
        self.sweep_debt += self.m;
        let due = self.sweep_debt / u64::from(sweep_ticks);
        self.sweep_debt %= u64::from(sweep_ticks);
        self.sweep(due.min(self.m), now);
    }

    /// Clears expired cells among the next `count` cells of the sweep.
    fn sweep(&mut self, count: u64, now: &Now) {
        let (hist, m) = (&mut self.hist, self.m as usize);
        let mut cursor = self.sweep_cursor as usize;
        with_cells!(&mut self.cells, c => {
            for _ in 0..count {
                let v = c.get(cursor);
                if v != 0 && !now.is_alive(v) {
                    c.set(cursor, 0);
                    hist[v as usize - 1] -= 1;
                }
                cursor += 1;
                if cursor == m {
                    cursor = 0;
                }
            }
        });
        self.sweep_cursor = cursor as u64;
    }

    /// Empties the generation (every cell has expired).
    pub(crate) fn clear(&mut self) {
        self.cells.clear();
        self.hist.fill(0);
        self.live = 0;
        self.sweep_cursor = 0;
        self.sweep_debt = 0;
    }
}

#[inline]
fn probe_cells<C: TimerCells>(cells: &C, positions: impl Iterator<Item = usize>, k: u32, now: &Now) -> Probed {
    let mut values = [0u32; super::params::MAX_HASHES as usize];
    let k = k as usize;
    for (n, i) in positions.take(k).enumerate() {
        let v = cells.get(i);
        if !now.is_alive(v) {
            // First-test-then-set: one dead cell proves the key is new here.
            return Probed { alive: n as u32, equal: 0 };
        }
        values[n] = v;
    }
    Probed { alive: k as u32, equal: most_equal(&mut values[..k]) }
}

/// The size of the largest group of equal values.
fn most_equal(values: &mut [u32]) -> u32 {
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
    use crate::filter::params::FilterSpec;

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
            g.insert(&key, p.hashes, &now);
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
            assert!(g.hist.iter().all(|&h| h == 0), "the sweep cleared every cell");
        }
    }
}
