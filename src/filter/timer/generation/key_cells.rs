//! The loops over one key's k cells in a concrete cell array (test,
//! equal timers, set, probe, prefetch) that a generation's methods and its
//! batched run share.

use super::Probed;
use crate::filter::hash::{BLOCK_CELLS, Positions};
use crate::filter::timer::cells::TimerCells;
use crate::filter::timer::clock::{AliveTable, Now};

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
pub(super) fn prefetch_cells<C: TimerCells>(cells: &C, positions: impl Positions, k: u32) {
    if let Some(start) = positions.block_start() {
        let first = cells.cell_addr(start);
        let last = cells.cell_addr(start + BLOCK_CELLS as usize - 1);
        let lines = last as usize / 64 - first as usize / 64 + 1;
        if lines <= WHOLE_BLOCK_LINES {
            let line = first.wrapping_sub(first as usize % 64);
            for n in 0..lines {
                crate::filter::timer::cells::prefetch(line.wrapping_add(64 * n));
            }
            return;
        }
    }
    for i in positions.take(k as usize) {
        crate::filter::timer::cells::prefetch(cells.cell_addr(i));
    }
}

/// Whether all k cells at `positions` are alive: the test of
/// test-then-insert, lean (no counts, no early exit, no branch on a cell).
#[inline(always)]
pub(super) fn all_alive<C: TimerCells>(
    cells: &C,
    positions: impl Iterator<Item = usize>,
    k: u32,
    alive: &AliveTable,
) -> bool {
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
pub(super) fn equal_timers_at<C: TimerCells>(cells: &C, positions: impl Iterator<Item = usize>, k: u32) -> u32 {
    let mut values = [0u32; crate::filter::timer::params::MAX_HASHES as usize];
    for (v, i) in values.iter_mut().zip(positions.take(k as usize)) {
        *v = cells.get(i);
    }
    match values.first_chunk::<FEW>() {
        Some(lanes) if k as usize <= FEW => most_equal_in_lanes(lanes, k as usize),
        _ => most_equal(&mut values[..k as usize]),
    }
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
/// again, see [`super::Generation::step_telling`]).
#[inline(always)]
pub(super) fn set_cells<C: TimerCells>(
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
pub(super) fn probe_cells<C: TimerCells>(
    cells: &C,
    positions: impl Iterator<Item = usize>,
    k: u32,
    now: &Now,
) -> Probed {
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
    if values.len() <= FEW {
        return most_equal_of_few(values);
    }
    values.sort_unstable();
    let (mut best, mut run) = (1, 1);
    for w in values.windows(2) {
        run = if w[0] == w[1] { run + 1 } else { 1 };
        best = best.max(run);
    }
    best
}

/// Up to this many values (k = 7 is the default) are counted pairwise.
const FEW: usize = 8;

/// [`most_equal`] for at most [`FEW`] values: for each value, how many of
/// them equal it, counted over a fixed width of lanes without a branch (the
/// compiler makes it a vector compare; lanes past the values do not count).
/// A sort of seven values mispredicts its compares about half the time: in
/// a profile of pipe mode it was a fifth of the filter's time.
#[inline]
fn most_equal_of_few(values: &[u32]) -> u32 {
    let mut lanes = [0u32; FEW];
    lanes[..values.len()].copy_from_slice(values);
    most_equal_in_lanes(&lanes, values.len())
}

/// [`most_equal`] of the first `n` of `lanes`: for each lane, how many of
/// the `n` values equal it, all lanes at once (the lanes past `n` are
/// counted too, and never read).
#[inline(always)]
fn most_equal_in_lanes(lanes: &[u32; FEW], n: usize) -> u32 {
    let mut counts = [0u32; FEW];
    for &v in &lanes[..n] {
        for (count, &x) in counts.iter_mut().zip(lanes) {
            *count += u32::from(x == v);
        }
    }
    counts[..n].iter().copied().max().unwrap_or(0)
}
