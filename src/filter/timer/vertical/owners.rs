//! Which vertical slice and which thread own which cells of a generation,
//! and what an owner does with its cells in a pass of the threads (phases
//! A and C).

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use super::{Write, positions};
use crate::filter::event::{Event, PREFETCH_DISTANCE};
use crate::filter::hash::BLOCK_CELLS;
use crate::filter::timer::SlidingFilter;
use crate::filter::timer::cells::{CellsPart, PART_ALIGN, prefetch};
use crate::filter::timer::params::{Layout, MAX_HASHES};

/// Where the slices and the threads' ranges of cells begin.
#[derive(Clone, Copy)]
pub(super) struct Geometry {
    slices: u32,
    pub(super) threads: usize,
    /// Slice boundaries are multiples of this many cells.
    unit: u64,
    pub(super) blocked: bool,
}

impl Geometry {
    pub(super) fn of(filter: &SlidingFilter, slices: u32, threads: usize) -> Self {
        let blocked = filter.params().layout == Layout::Blocked;
        let unit = if blocked { BLOCK_CELLS } else { PART_ALIGN as u64 };
        debug_assert!(unit % PART_ALIGN as u64 == 0);
        Geometry { slices, threads, unit, blocked }
    }

    /// The first cell of slice `i` in a generation of `m` cells (`m` for `i = S`).
    pub(super) fn start(&self, m: u64, i: u32) -> u64 {
        if i >= self.slices {
            return m;
        }
        let exact = (u128::from(i) * u128::from(m) / u128::from(self.slices)) as u64;
        exact / self.unit * self.unit
    }

    /// The slice that owns `cell`.
    pub(super) fn owner(&self, m: u64, cell: usize) -> u32 {
        let cell = cell as u64;
        // At or after the rounded start of this slice; at most a few
        // boundaries before the owner.
        let mut s = (u128::from(cell) * u128::from(self.slices) / u128::from(m)) as u32;
        while s + 1 < self.slices && self.start(m, s + 1) <= cell {
            s += 1;
        }
        s
    }

    /// The end of thread `t`'s cells: the start of the first slice of thread t + 1.
    pub(super) fn thread_end(&self, m: u64, t: usize) -> usize {
        let first_of_next = (t + 1) * self.slices as usize / self.threads;
        self.start(m, first_of_next as u32) as usize
    }
}

/// What an owner needs in a pass besides its cells.
pub(super) struct Owner<'a> {
    /// Cells per generation.
    pub(super) shapes: &'a [u64],
    pub(super) blocked: bool,
    pub(super) k: usize,
    pub(super) prefetch: bool,
}

impl Owner<'_> {
    /// Phase C: the writes to this owner's cells, in order.
    pub(super) fn write(&self, parts: &mut [CellsPart<'_>], writes: &[Write]) {
        for w in writes {
            let part = &mut parts[w.generation as usize];
            if part.holds(w.cell) {
                part.set(w.cell, w.value);
            }
        }
    }

    /// Phase A: this owner's cells of every event and generation into the
    /// table; the cells of the event [`PREFETCH_DISTANCE`] ahead are
    /// prefetched meanwhile (large filters).
    pub(super) fn read(&self, parts: &[CellsPart<'_>], events: &[Event], reads: &[AtomicU32]) {
        let (k, generations) = (self.k, parts.len());
        let mut at = [0usize; MAX_HASHES as usize];
        for (n, e) in events.iter().enumerate() {
            if self.prefetch
                && let Some(ahead) = events.get(n + PREFETCH_DISTANCE)
            {
                for (part, &m) in parts.iter().zip(self.shapes) {
                    positions(&ahead.hash, m, self.blocked, k, &mut at);
                    at[..k].iter().filter(|&&i| part.holds(i)).for_each(|&i| prefetch(part.cell_addr(i)));
                }
            }
            for (g, (part, &m)) in parts.iter().zip(self.shapes).enumerate() {
                positions(&e.hash, m, self.blocked, k, &mut at);
                let slot = (n * generations + g) * k;
                for (j, &i) in at[..k].iter().enumerate() {
                    if part.holds(i) {
                        reads[slot + j].store(part.get(i), Relaxed);
                    }
                }
            }
        }
    }
}
