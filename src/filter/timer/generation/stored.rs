//! The fields of a generation that a snapshot stores, and the check that
//! a generation dedupd ran could hold the cells restored into one.

use crate::filter::timer::cells::{CellArray, TimerCells, with_cells};
use crate::filter::timer::clock::Now;

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
    /// be (see the module docs of [`super`]):
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
