//! How a slice's generations follow its load (docs/design.md, invariant 4)
//! with `sized_growth` ([`crate::filter::FilterSpec::sized_growth`]; off,
//! the newest generation takes every key and a new one takes the level
//! that holds [`GROW_HEADROOM`] times the live keys, as before):
//! which generation takes a distinct key, how large a new one is, and when
//! one is dropped or handed over. Every decision reads only what a snapshot
//! restores (the generations' cells, levels and sizes, and the clock), so a
//! restored slice grows and shrinks as an uninterrupted one would.
//!
//! - **Where a key goes.** The largest generation that is not full takes
//!   it (its cells cost the least FPR per key); an older generation
//!   oversized for the live keys ([`SHRINK_AT`]) only after the newest (it
//!   drains after a handover). A full generation takes keys again once
//!   enough of its cells have expired.
//! - **Growth.** When every generation is full, a new one brings the
//!   capacity to the live keys times [`GROW_HEADROOM`], less what the
//!   generations hold: a load 1.5× the first generation's adds one about
//!   half its size, beside it, instead of one twice its size that the old
//!   one drains into (which held both, full size, for a window).
//! - **Hysteresis.** An emptied generation is dropped only while the others
//!   hold the live keys [`KEEP_EMPTY`] times over, so a load that comes back
//!   (bursts) finds its generation still there; a lone generation hands
//!   over to a smaller level only when the smaller one holds the live keys
//!   [`HANDOVER_MARGIN`] times (below `GROW_HEADROOM`).

use super::generation::{CellWrites, Generation};
use super::sizing;
use super::sliding::SlidingFilter;
use crate::filter::hash::BLOCK_CELLS;
use crate::filter::timer::params::{Growth, Layout, MAX_LEVEL};

/// A new generation brings the capacity to the live keys times this.
pub const GROW_HEADROOM: f64 = 1.5;
/// An emptied generation is kept while the others' capacity is under the
/// live keys times this.
pub const KEEP_EMPTY: f64 = 1.5;
/// An older generation whose capacity passes the live keys times this
/// takes keys only after the newest.
pub const SHRINK_AT: f64 = 3.0;
/// A new generation adds at least this share of the capacity there is.
pub const MIN_STEP: f64 = 0.25;
/// A lone oversized generation hands over to a smaller level that holds the
/// live keys times this. Smaller than `GROW_HEADROOM`, and the gap between
/// the two is the hysteresis that keeps a slice from handing over back and
/// forth.
const HANDOVER_MARGIN: f64 = 1.1;

impl SlidingFilter {
    /// The generation a distinct key goes into: the largest that is not
    /// full (an older oversized one only after the others), else the first
    /// of that order.
    #[inline]
    pub(crate) fn insert_target(&self) -> usize {
        let gens = &self.generations;
        if gens.len() == 1 || !self.params.sized_growth {
            return gens.len() - 1;
        }
        let growth = self.params.growth;
        let live = self.live_keys();
        let newest = gens.len() - 1;
        let rank = |i: usize| {
            let g = &gens[i];
            let class = if g.is_full(growth) {
                2
            } else if i != newest && self.capacity(g) > SHRINK_AT * live {
                1
            } else {
                0
            };
            (class, std::cmp::Reverse(g.cells()), std::cmp::Reverse(i))
        };
        (0..gens.len()).min_by_key(|&i| rank(i)).expect("never empty")
    }

    /// Whether every generation is full (a distinct key would find none
    /// with room).
    pub(crate) fn all_full(&self) -> bool {
        let growth = self.params.growth;
        if !self.params.sized_growth {
            return self.generations.last().expect("never empty").is_full(growth);
        }
        growth != Growth::None && self.generations.iter().all(|g| g.is_full(growth))
    }

    /// Adds a generation sized for the live keys times [`GROW_HEADROOM`],
    /// less the capacity there is: at level 1 or above (its target is
    /// tightened), the smallest level whose cells hold it.
    pub(crate) fn grow(&mut self) {
        if !self.params.sized_growth {
            let level = self.level_for(self.live_keys() * GROW_HEADROOM);
            self.push_generation(level);
            return;
        }
        let have: f64 = self.generations.iter().map(|g| self.capacity(g)).sum();
        let need = (self.live_keys() * GROW_HEADROOM - have).max(have * MIN_STEP);
        let (level, cells) = self.sized_for(need, 1);
        self.push_sized(level, cells);
    }

    /// The smallest level from `from` whose generation holds `keys`, and the
    /// cells that take (rounded up to whole words or blocks); the top level
    /// whole if none does.
    fn sized_for(&self, keys: f64, from: u8) -> (u8, u64) {
        let p = &self.params;
        let round = match p.layout {
            Layout::Standard => 64,
            Layout::Blocked => BLOCK_CELLS,
        };
        for level in from..=MAX_LEVEL {
            let per_cell = sizing::cardinality_threshold(1 << 20, p.hashes, p.level_fpr(level)) / f64::from(1 << 20);
            let cells = ((keys / per_cell).ceil() as u64).max(64).next_multiple_of(round);
            if cells <= p.level_cells(level) {
                return (level, cells);
            }
        }
        (MAX_LEVEL, p.level_cells(MAX_LEVEL))
    }

    /// Keys a generation holds at its target FPR.
    fn capacity(&self, g: &Generation) -> f64 {
        sizing::cardinality_threshold(g.cells(), self.params.hashes, self.params.level_fpr(g.level()))
    }

    pub(crate) fn push_generation(&mut self, level: u8) {
        self.push_sized(level, self.params.level_cells(level));
    }

    fn push_sized(&mut self, level: u8, cells: u64) {
        self.generations.push(Generation::sized(level, cells, &self.params));
        self.counters.generations_created += 1;
        self.counters.generations_max = self.counters.generations_max.max(self.generations.len() as u32);
    }

    /// Keys the live cells of all generations stand for.
    pub(crate) fn live_keys(&self) -> f64 {
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

    /// Drops the emptied generations the others can do without (never the
    /// newest), and lets a lone oversized generation hand over to the
    /// smallest level that holds its load with a margin (it then expires
    /// within a window).
    pub(crate) fn retire<W: CellWrites>(&mut self, writes: &mut W) {
        let live = self.live_keys();
        let mut left: f64 = self.generations.iter().map(|g| self.capacity(g)).sum();
        let newest = self.generations.len() - 1;
        let mut empty: Vec<usize> = (0..newest).filter(|&i| self.generations[i].live_cells() == 0).collect();
        empty.sort_by_key(|&i| self.generations[i].cells());
        let mut drop = Vec::new();
        for i in empty {
            let c = self.capacity(&self.generations[i]);
            if !self.params.sized_growth || left - c >= KEEP_EMPTY * live || c < MIN_STEP * (left - c) {
                left -= c;
                drop.push(i);
            }
        }
        drop.sort_unstable();
        for &i in drop.iter().rev() {
            writes.dropping(&self.generations[i]);
            self.generations.remove(i);
        }
        self.counters.generations_dropped += drop.len() as u64;
        self.hand_over(writes);
    }

    fn hand_over<W: CellWrites>(&mut self, writes: &mut W) {
        let [only] = self.generations.as_slice() else { return };
        if only.level() == 0 && only.cells() <= self.params.cells {
            return;
        }
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

#[cfg(test)]
mod tests {
    use super::super::snapshot::{decode, encode};
    use super::*;
    use crate::filter::hash::{DEFAULT_SEED, KeyHash};
    use crate::filter::timer::params::FilterSpec;
    use crate::testkit::workload::Rng;

    /// Bursts of twice the quiet load, again and again, with the estimate
    /// at the quiet load: the first burst adds generations beside the first
    /// (each smaller than it, not twice its size), they are kept through the
    /// quiet spells (none is added after the first cycle), and the filter's
    /// bytes never pass 1.5× what it holds at the end (no generation filling
    /// while the old one drains).
    #[test]
    fn bursts_settle_on_the_generations_the_first_one_needed() {
        let spec = FilterSpec {
            window_ms: 1_000,
            expected_keys: 12_000,
            tick_ms: Some(10),
            sized_growth: true,
            ..FilterSpec::default()
        };
        let p = spec.resolve().unwrap();
        let mut f = SlidingFilter::new(p.clone());
        let mut rng = Rng::new(5);
        let (mut peak, mut created_after_first_cycle) = (0, 0);
        for ms in 0..15_000u64 {
            let rate = if ms % 3_000 < 2_000 { 15 } else { 30 };
            for _ in 0..rate {
                let id = if rng.below(4) == 0 { rng.below(1_000) } else { rng.next_u64() };
                f.observe(&KeyHash::of(DEFAULT_SEED, &id.to_le_bytes()), ms);
            }
            peak = peak.max(f.memory_bytes());
            if ms == 3_000 {
                created_after_first_cycle = f.counters().generations_created;
            }
        }
        let c = f.counters();
        assert!((2..=3).contains(&created_after_first_cycle), "{c:?}");
        assert_eq!(c.generations_created, created_after_first_cycle, "no generation after the first cycle: {c:?}");
        let first = f.generations()[0].cells();
        assert!(f.generations()[1..].iter().all(|g| g.cells() < first), "{c:?}");
        assert!(peak as f64 <= 1.5 * f.memory_bytes() as f64, "peak {peak} B, now {} B", f.memory_bytes());
    }

    /// Growth and the choice of generation read only what a snapshot
    /// restores: a filter restored at any point judges and grows as the
    /// original.
    #[test]
    fn a_restored_filter_grows_as_the_original() {
        let spec = FilterSpec {
            window_ms: 1_000,
            expected_keys: 3_000,
            tick_ms: Some(10),
            sized_growth: true,
            ..FilterSpec::default()
        };
        let p = spec.resolve().unwrap();
        let mut f = SlidingFilter::new(p.clone());
        let mut rng = Rng::new(9);
        for part in 0..30u64 {
            let mut back = decode(&encode(&f), &p).unwrap();
            for i in 0..2_000u64 {
                let ms = part * 300 + i * 300 / 2_000;
                let rate_up = (part / 5) % 2 == 1;
                let id = if rng.below(if rate_up { 8 } else { 3 }) == 0 { rng.below(500) } else { rng.next_u64() };
                let h = KeyHash::of(DEFAULT_SEED, &id.to_le_bytes());
                assert_eq!(f.observe(&h, ms), back.observe(&h, ms), "part {part}");
            }
            assert!(encode(&back) == encode(&f), "part {part}");
        }
        assert!(f.counters().generations_created >= 2, "{:?}", f.counters());
    }
}
