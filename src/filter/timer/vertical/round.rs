//! The combine's view of the cells during a round (phase B): phase A's
//! table, overridden by the cells that earlier events of the round set.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// The combine's view of the cells during a round.
pub(super) struct RoundView<'a> {
    pub(super) reads: &'a [AtomicU32],
    pub(super) overrides: &'a mut Overrides,
    /// Generations read in phase A (those at the start of the round).
    pub(super) read: usize,
    /// The first generation that may have been written in this round.
    pub(super) written_from: usize,
    pub(super) k: usize,
    /// The current event's first entry in `reads`.
    pub(super) slot: usize,
}

impl RoundView<'_> {
    /// The current value of cell `cell`, the `j`-th of the current event,
    /// in generation `g`: set earlier in the round, or as read at its start
    /// (a generation added in the round started empty).
    #[inline]
    pub(super) fn value(&self, g: usize, j: usize, cell: usize) -> u32 {
        if g >= self.written_from
            && let Some(v) = self.overrides.get(g, cell)
        {
            return v;
        }
        if g < self.read { self.reads[self.slot + g * self.k + j].load(Relaxed) } else { 0 }
    }
}

/// A map (generation, cell) → value for one round: open addressing with
/// linear probing, emptied in O(1) by moving to a new epoch.
#[derive(Default)]
pub(super) struct Overrides {
    slots: Vec<Slot>,
    epoch: u32,
}

#[derive(Clone, Copy, Default)]
struct Slot {
    key: u64,
    value: u32,
    /// The slot is in use in this epoch only.
    epoch: u32,
}

impl Overrides {
    /// Empties the map, with room for `most` entries at half load at least.
    pub(super) fn begin(&mut self, most: usize) {
        let want = (most * 2).next_power_of_two().max(64);
        if self.slots.len() < want {
            self.slots = vec![Slot::default(); want];
            self.epoch = 0;
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.slots.fill(Slot::default());
            self.epoch = 1;
        }
    }

    #[inline]
    fn key(g: usize, cell: usize) -> u64 {
        ((g as u64) << 56) | cell as u64
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h ^ (h >> 29)) as usize & (self.slots.len() - 1)
    }

    #[inline]
    fn get(&self, g: usize, cell: usize) -> Option<u32> {
        let (key, mask) = (Self::key(g, cell), self.slots.len() - 1);
        let mut i = self.home(key);
        loop {
            let slot = self.slots[i];
            if slot.epoch != self.epoch {
                return None;
            }
            if slot.key == key {
                return Some(slot.value);
            }
            i = (i + 1) & mask;
        }
    }

    #[inline]
    pub(super) fn set(&mut self, g: usize, cell: usize, value: u32) {
        let (key, mask, epoch) = (Self::key(g, cell), self.slots.len() - 1, self.epoch);
        let mut i = self.home(key);
        loop {
            let slot = &mut self.slots[i];
            if slot.epoch != epoch || slot.key == key {
                *slot = Slot { key, value, epoch };
                return;
            }
            i = (i + 1) & mask;
        }
    }
}
