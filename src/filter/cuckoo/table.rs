//! One cuckoo table: buckets of 4 slots of 16 bits, each a fingerprint
//! (high f bits) and a stamp (low c bits, 0 = empty), with partial-key
//! cuckoo hashing over any number of buckets.
//!
//! A key's buckets are `i1 = fastrange(h1, n)` and `i2 = alt(i1, fp)`,
//! where `alt(i, fp) = (H(fp) − i) mod n`: an involution for any n (the
//! XOR of Fan et al. needs n a power of two, which would waste up to half
//! the memory), so a slot moved out of either bucket finds the other from
//! its fingerprint alone.

use super::clock::Clock;
use super::params::BUCKET_SLOTS;
use crate::filter::hash::{KeyHash, fastrange};

/// Longest kick chain before an insert gives up (and is rolled back).
pub const MAX_KICKS: usize = 500;

/// A key as one table sees it: its fingerprint and its two buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub fp: u16,
    pub i1: u64,
    pub i2: u64,
}

/// One table of a slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    pub level: u8,
    buckets: u64,
    /// `buckets · 4` slots, bucket by bucket.
    slots: Vec<u16>,
    /// Slots with a stamp (alive, kept or expired but not yet swept).
    occupied: u64,
    /// The next bucket the sweep visits.
    cursor: u64,
}

impl Table {
    pub fn new(level: u8, buckets: u64) -> Self {
        Table { level, buckets, slots: vec![0; buckets as usize * BUCKET_SLOTS], occupied: 0, cursor: 0 }
    }

    /// Rebuilds a table from a snapshot's fields; `None` if they disagree.
    pub fn from_state(level: u8, buckets: u64, cursor: u64, slots: Vec<u16>) -> Option<Self> {
        if slots.len() as u64 != buckets * BUCKET_SLOTS as u64 || cursor >= buckets.max(1) {
            return None;
        }
        Some(Table { level, buckets, occupied: 0, cursor, slots }.recount())
    }

    fn recount(mut self) -> Self {
        self.occupied = self.slots.iter().filter(|&&s| s != 0).count() as u64;
        self
    }

    pub fn buckets(&self) -> u64 {
        self.buckets
    }

    pub fn slots(&self) -> &[u16] {
        &self.slots
    }

    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    pub fn occupied(&self) -> u64 {
        self.occupied
    }

    pub fn memory_bytes(&self) -> usize {
        self.slots.len() * 2
    }

    /// Where `hash` goes in this table.
    #[inline]
    pub fn place(&self, hash: &KeyHash, clock: &Clock) -> Place {
        let fp = clock.fingerprint(hash);
        let i1 = fastrange(hash.h1, self.buckets);
        Place { fp, i1, i2: self.alt(i1, fp) }
    }

    /// The other bucket of a fingerprint in bucket `i`.
    #[inline]
    fn alt(&self, i: u64, fp: u16) -> u64 {
        let h = fastrange(u64::from(fp).wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15), self.buckets);
        let n = self.buckets;
        (h + n - i) % n
    }

    #[inline]
    fn bucket(&self, i: u64) -> &[u16] {
        let at = i as usize * BUCKET_SLOTS;
        &self.slots[at..at + BUCKET_SLOTS]
    }

    /// Slot indexes of the key's two buckets (the second bucket's only when
    /// it is another one).
    #[inline]
    fn candidates(&self, p: &Place) -> impl Iterator<Item = usize> + use<> {
        let (a, b) = (p.i1 as usize * BUCKET_SLOTS, p.i2 as usize * BUCKET_SLOTS);
        let second = if p.i2 == p.i1 { 0 } else { BUCKET_SLOTS };
        (a..a + BUCKET_SLOTS).chain(b..b + second)
    }

    /// Whether a slot of the key's fingerprint is set and at most `limit`
    /// ticks old.
    #[inline]
    pub fn holds_within(&self, p: &Place, clock: &Clock, limit: u32) -> bool {
        let want = clock.fp_field(p.fp);
        let hit = |b: &[u16]| b.iter().any(|&s| s & clock.fp_mask == want && clock.is_within(s, limit));
        hit(self.bucket(p.i1)) || hit(self.bucket(p.i2))
    }

    /// The slots holding the key's fingerprint kept at the clock (what a
    /// delete would clear).
    pub fn kept_slots(&self, p: &Place, clock: &Clock) -> Vec<usize> {
        let want = clock.fp_field(p.fp);
        let kept = |&j: &usize| self.slots[j] & clock.fp_mask == want && clock.is_within(self.slots[j], clock.retain);
        self.candidates(p).filter(kept).collect()
    }

    /// Empties one slot (a delete).
    pub fn clear_slot(&mut self, j: usize) {
        if self.slots[j] != 0 {
            self.slots[j] = 0;
            self.occupied -= 1;
        }
    }

    /// Stores the key stamped `stamp` (a value of the clock's period, at most
    /// `age` ticks old); false, with the table as before, when no room was
    /// found in [`MAX_KICKS`] moves. A slot of the same fingerprint still
    /// kept in either bucket is restamped (the later stamp wins) instead of
    /// taking a second slot: the key it stands for is the same to every
    /// lookup. Expired slots (older than the window and lateness) count as
    /// free.
    pub fn insert(&mut self, p: &Place, clock: &Clock, stamp: u16, age: u32) -> bool {
        let want = clock.fp_field(p.fp);
        let entry = want | stamp;
        let mut free = None;
        for j in self.candidates(p) {
            let s = self.slots[j];
            if s & clock.fp_mask == want && clock.is_within(s, clock.retain) {
                if clock.age(s) > age {
                    self.slots[j] = entry;
                }
                return true;
            }
            if free.is_none() && !clock.is_within(s, clock.retain) {
                free = Some(j);
            }
        }
        if let Some(j) = free {
            self.put(j, entry);
            return true;
        }
        self.kick(p, clock, entry)
    }

    /// Writes `entry` into a free slot `j`.
    #[inline]
    fn put(&mut self, j: usize, entry: u16) {
        if self.slots[j] == 0 {
            self.occupied += 1;
        }
        self.slots[j] = entry;
    }

    /// Moves slots to their other buckets until one has room for `entry`;
    /// undoes every move if none has within [`MAX_KICKS`], so a failed
    /// insert forgets nothing. The victim in each bucket is chosen from the
    /// carried fingerprint and the step (deterministic: a replay moves the
    /// same slots).
    fn kick(&mut self, p: &Place, clock: &Clock, entry: u16) -> bool {
        let mut moves: Vec<(usize, u16)> = Vec::with_capacity(16);
        let (mut carried, mut at) = (entry, if p.fp & 1 == 0 { p.i1 } else { p.i2 });
        for step in 0..MAX_KICKS {
            let pick = (u64::from(carried).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize + step;
            let j = at as usize * BUCKET_SLOTS + pick % BUCKET_SLOTS;
            moves.push((j, self.slots[j]));
            (carried, self.slots[j]) = (self.slots[j], carried);
            at = self.alt(at, clock.fingerprint_of(carried));
            let base = at as usize * BUCKET_SLOTS;
            if let Some(k) = (base..base + BUCKET_SLOTS).find(|&k| !clock.is_within(self.slots[k], clock.retain)) {
                self.put(k, carried);
                return true;
            }
        }
        for (j, was) in moves.into_iter().rev() {
            self.slots[j] = was;
        }
        false
    }

    /// Stores `entry` in the key's buckets in place of the slot with the
    /// oldest stamp (at the cap on tables only: the one way a key is
    /// forgotten, counted).
    pub fn force(&mut self, p: &Place, clock: &Clock, stamp: u16) {
        let oldest = self.candidates(p).max_by_key(|&j| clock.age(self.slots[j])).expect("a bucket has slots");
        self.put(oldest, clock.fp_field(p.fp) | stamp);
    }

    /// Clears the expired slots of the next `buckets` buckets: a run of
    /// slots from the cursor (wrapping once), each judged by one load from
    /// a table of the stamps that have expired.
    pub fn sweep(&mut self, buckets: u64, clock: &Clock) {
        let n = self.buckets;
        let mut left = buckets.min(n);
        let expired = clock.expired_stamps();
        let mask = !clock.fp_mask;
        while left > 0 {
            let run = left.min(n - self.cursor);
            let (from, to) = (self.cursor as usize * BUCKET_SLOTS, (self.cursor + run) as usize * BUCKET_SLOTS);
            let mut cleared = 0;
            for s in &mut self.slots[from..to] {
                let dead = expired[usize::from(*s & mask)];
                cleared += u64::from(dead);
                *s &= u16::from(dead).wrapping_sub(1);
            }
            self.occupied -= cleared;
            self.cursor = (self.cursor + run) % n;
            left -= run;
        }
    }

    /// Empties every slot (the clock jumped past everything kept).
    pub fn clear(&mut self) {
        self.slots.fill(0);
        self.occupied = 0;
    }

    /// Slots alive at the clock (for the FPR estimate); a scan.
    pub fn alive_slots(&self, clock: &Clock) -> u64 {
        self.slots.iter().filter(|&&s| clock.is_within(s, clock.window)).count() as u64
    }
}
