//! One cuckoo table: semi-sorted buckets of 4 slots ([`super::bucket`]),
//! one `u64` each; a slot's entry is a fingerprint (high f bits) and a
//! stamp (low c bits, 0 = empty), f + c = 17; partial-key cuckoo hashing
//! over any number of buckets.
//!
//! A key's buckets are `i1 = fastrange(h1, n)` and `i2 = alt(i1, fp)`,
//! where `alt(i, fp) = (H(fp) − i) mod n`: an involution for any n (the
//! XOR of Fan et al. needs n a power of two, which would waste up to half
//! the memory), so a slot moved out of either bucket finds the other from
//! its fingerprint alone.
//!
//! A slot is addressed as `bucket · 4 + position`; a write to a bucket may
//! move its slots (the re-sort), a clear never does.

use super::bucket::{self, Entries};
use super::clock::Clock;
use super::params::BUCKET_SLOTS;
use crate::filter::advise_huge_pages;
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

/// Where an insert found its key's slot in the key's buckets.
enum Found {
    /// A slot of the same fingerprint, still kept: (bucket, position).
    Kept(usize, usize),
    /// The first free slot (empty or expired).
    Free(usize, usize),
    /// Neither: the buckets are full of kept slots.
    Full,
}

/// One table of a slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    pub level: u8,
    buckets: u64,
    /// One semi-sorted bucket per word.
    words: Vec<u64>,
    /// Slots with a stamp (alive, kept or expired but not yet swept).
    occupied: u64,
    /// The next bucket the sweep visits.
    cursor: u64,
}

impl Table {
    pub fn new(level: u8, buckets: u64) -> Self {
        let words = vec![0; buckets as usize];
        // Before the first write: a lookup lands on a random page, and with
        // 4 KiB pages it would miss the TLB as well as the caches.
        advise_huge_pages(&words);
        Table { level, buckets, words, occupied: 0, cursor: 0 }
    }

    /// Rebuilds a table from a snapshot's fields; `None` if they disagree
    /// or a word is not a bucket.
    pub fn from_state(level: u8, buckets: u64, cursor: u64, words: Vec<u64>) -> Option<Self> {
        if words.len() as u64 != buckets || cursor >= buckets.max(1) || !words.iter().all(|&w| bucket::is_valid(w)) {
            return None;
        }
        let occupied = words.iter().map(|&w| u64::from(bucket::occupied(w))).sum();
        advise_huge_pages(&words);
        Some(Table { level, buckets, words, occupied, cursor })
    }

    pub fn buckets(&self) -> u64 {
        self.buckets
    }

    /// The buckets' words, in bucket order.
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    pub fn occupied(&self) -> u64 {
        self.occupied
    }

    pub fn memory_bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// Where `hash` goes in this table.
    #[inline]
    pub fn place(&self, hash: &KeyHash, clock: &Clock) -> Place {
        let fp = clock.fingerprint(hash);
        let i1 = fastrange(hash.h1, self.buckets);
        Place { fp, i1, i2: self.alt(i1, fp) }
    }

    /// Prefetches the key's two buckets (a hint only).
    #[inline]
    pub fn prefetch(&self, hash: &KeyHash, clock: &Clock) {
        let p = self.place(hash, clock);
        for i in [p.i1, p.i2] {
            crate::filter::timer::cells::prefetch(self.words[i as usize..].as_ptr().cast());
        }
    }

    /// The other bucket of a fingerprint in bucket `i`.
    #[inline]
    fn alt(&self, i: u64, fp: u16) -> u64 {
        let h = fastrange(u64::from(fp).wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15), self.buckets);
        let n = self.buckets;
        // (h − i) mod n with h, i < n: one subtraction, not a division.
        if h >= i { h - i } else { h + n - i }
    }

    #[inline]
    fn entries(&self, i: usize) -> Entries {
        bucket::decode(self.words[i])
    }

    /// The key's buckets (the second only when it is another one).
    #[inline]
    fn candidates(p: &Place) -> impl Iterator<Item = usize> + use<> {
        let second = (p.i2 != p.i1).then_some(p.i2 as usize);
        std::iter::once(p.i1 as usize).chain(second)
    }

    /// Whether a slot of the key's fingerprint is set and at most `limit`
    /// ticks old.
    #[inline]
    pub fn holds_within(&self, p: &Place, clock: &Clock, limit: u32) -> bool {
        let want = clock.fp_field(p.fp);
        self.holding(p.i1 as usize, want, clock, limit).is_some()
            || self.holding(p.i2 as usize, want, clock, limit).is_some()
    }

    /// The position of a slot of bucket `i` holding the entry fingerprint
    /// `want` at most `limit` ticks old: the field first, the nibble (a
    /// load from the code table) only when the field matches.
    #[inline]
    fn holding(&self, i: usize, want: u32, clock: &Clock, limit: u32) -> Option<usize> {
        let w = self.words[i];
        let low = clock.fp_mask & bucket::FIELD_MASK;
        let (want_field, want_nibble) = (want & low, want >> bucket::FIELD_BITS);
        (0..BUCKET_SLOTS).find(|&k| {
            let field = bucket::field(w, k);
            field & low == want_field && clock.is_within(field, limit) && bucket::nibble(w, k) == want_nibble
        })
    }

    /// The slots (`bucket · 4 + position`) holding the key's fingerprint
    /// kept at the clock (what a delete would clear).
    pub fn kept_slots(&self, p: &Place, clock: &Clock) -> Vec<usize> {
        let want = clock.fp_field(p.fp);
        let kept = move |(i, e): (usize, Entries)| {
            (0..BUCKET_SLOTS)
                .filter(move |&k| e[k] & clock.fp_mask == want && clock.is_within(e[k], clock.retain))
                .map(move |k| i * BUCKET_SLOTS + k)
        };
        Self::candidates(p).map(|i| (i, self.entries(i))).flat_map(kept).collect()
    }

    /// Empties one slot (a delete); no slot moves.
    pub fn clear_slot(&mut self, j: usize) {
        let (i, k) = (j / BUCKET_SLOTS, j % BUCKET_SLOTS);
        if bucket::field(self.words[i], k) != 0 {
            self.words[i] = bucket::clear_field(self.words[i], k);
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
        let entry = clock.fp_field(p.fp) | u32::from(stamp);
        match self.find(p, clock) {
            Found::Kept(i, k) => {
                if clock.age(bucket::field(self.words[i], k)) > age {
                    self.put(i, k, entry);
                }
                true
            }
            Found::Free(i, k) => {
                self.put(i, k, entry);
                true
            }
            Found::Full => self.make_room(p, clock, entry) || self.kick(p, clock, entry),
        }
    }

    /// The key's kept slot, else the first free slot of its buckets.
    #[inline]
    fn find(&self, p: &Place, clock: &Clock) -> Found {
        let want = clock.fp_field(p.fp);
        for i in Self::candidates(p) {
            if let Some(k) = self.holding(i, want, clock, clock.retain) {
                return Found::Kept(i, k);
            }
        }
        for i in Self::candidates(p) {
            if let Some(k) = self.free_in(i, clock) {
                return Found::Free(i, k);
            }
        }
        Found::Full
    }

    /// A free (empty or expired) slot of bucket `i`: its stamp alone says.
    #[inline]
    fn free_in(&self, i: usize, clock: &Clock) -> Option<usize> {
        let w = self.words[i];
        (0..BUCKET_SLOTS).find(|&k| !clock.is_within(bucket::field(w, k), clock.retain))
    }

    /// Writes `entry` into slot `k` of bucket `i` (re-sorting the bucket).
    #[inline]
    fn put(&mut self, i: usize, k: usize, entry: u32) {
        let mut e = self.entries(i);
        if bucket::field(self.words[i], k) == 0 {
            self.occupied += 1;
        }
        e[k] = entry;
        self.words[i] = bucket::encode(e);
    }

    /// Moves one slot of the key's full buckets to its other bucket if that
    /// has room, and puts `entry` in its place. The eight other buckets are
    /// prefetched together first, so that their cache misses overlap: at
    /// the load a table runs at, this nearly always finds room, where a
    /// kick chain pays one miss after another. The first slot in bucket
    /// order whose other bucket has room moves (deterministic, as `kick`).
    fn make_room(&mut self, p: &Place, clock: &Clock, entry: u32) -> bool {
        let mut alts = [(0usize, 0usize, 0u32, 0usize); 2 * BUCKET_SLOTS];
        let mut n = 0;
        for i in Self::candidates(p) {
            for (k, &moved) in self.entries(i).iter().enumerate() {
                let to = self.alt(i as u64, clock.fingerprint_of(moved)) as usize;
                crate::filter::timer::cells::prefetch(self.words[to..].as_ptr().cast());
                alts[n] = (i, k, moved, to);
                n += 1;
            }
        }
        for &(i, k, moved, to) in &alts[..n] {
            if to != i
                && let Some(free) = self.free_in(to, clock)
            {
                self.put(to, free, moved);
                self.put(i, k, entry);
                return true;
            }
        }
        false
    }

    /// Moves slots to their other buckets until one has room for `entry`;
    /// undoes every move if none has within [`MAX_KICKS`], so a failed
    /// insert forgets nothing. The victim in each bucket is chosen from the
    /// carried entry and the step (deterministic: a replay moves the same
    /// slots).
    fn kick(&mut self, p: &Place, clock: &Clock, entry: u32) -> bool {
        let mut moves: Vec<(usize, u64)> = Vec::with_capacity(16);
        let (mut carried, mut at) = (entry, if p.fp & 1 == 0 { p.i1 } else { p.i2 } as usize);
        for step in 0..MAX_KICKS {
            let pick = ((u64::from(carried).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize + step) % BUCKET_SLOTS;
            moves.push((at, self.words[at]));
            let mut e = self.entries(at);
            (carried, e[pick]) = (e[pick], carried);
            self.words[at] = bucket::encode(e);
            at = self.alt(at as u64, clock.fingerprint_of(carried)) as usize;
            if let Some(k) = self.free_in(at, clock) {
                self.put(at, k, carried);
                return true;
            }
        }
        for (i, was) in moves.into_iter().rev() {
            self.words[i] = was;
        }
        false
    }

    /// Stores the key in its buckets in place of the slot with the oldest
    /// stamp (at the cap on tables only: the one way a key is forgotten,
    /// counted).
    pub fn force(&mut self, p: &Place, clock: &Clock, stamp: u16) {
        let slots = Self::candidates(p).flat_map(|i| (0..BUCKET_SLOTS).map(move |k| (i, k)));
        let (i, k) = slots.max_by_key(|&(i, k)| clock.age(self.entries(i)[k])).expect("a bucket has slots");
        self.put(i, k, clock.fp_field(p.fp) | u32::from(stamp));
    }

    /// Clears the expired slots of the next `buckets` buckets: a run of
    /// buckets from the cursor (wrapping once), each slot judged by one load
    /// from a table of the stamps that have expired; no bucket is re-sorted.
    pub fn sweep(&mut self, buckets: u64, clock: &Clock) {
        let n = self.buckets;
        let mut left = buckets.min(n);
        let expired = clock.expired_stamps();
        while left > 0 {
            let run = left.min(n - self.cursor);
            let (from, to) = (self.cursor as usize, (self.cursor + run) as usize);
            let mut cleared = 0;
            for w in &mut self.words[from..to] {
                cleared += bucket::clear_expired(w, &expired, clock.stamp_mask);
            }
            self.occupied -= cleared;
            self.cursor = (self.cursor + run) % n;
            left -= run;
        }
    }

    /// Empties every slot (the clock jumped past everything kept).
    pub fn clear(&mut self) {
        self.words.fill(0);
        self.occupied = 0;
    }

    /// Slots kept at the clock (at most W + Lt ticks old), those at most
    /// `recent` ticks old, and the age of the oldest (0 when none is): a
    /// scan of the stamps.
    pub fn kept_profile(&self, clock: &Clock, recent: u32) -> (u64, u64, u32) {
        let (mut kept, mut young, mut oldest) = (0, 0, 0);
        for &w in &self.words {
            for k in 0..BUCKET_SLOTS {
                let age = clock.age(bucket::field(w, k));
                if age <= clock.retain {
                    kept += 1;
                    young += u64::from(age <= recent);
                    oldest = oldest.max(age);
                }
            }
        }
        (kept, young, oldest)
    }

    /// Slots alive at the clock (for the FPR estimate); a scan of the stamps.
    pub fn alive_slots(&self, clock: &Clock) -> u64 {
        let alive =
            |&w: &u64| (0..BUCKET_SLOTS).filter(|&k| clock.is_within(bucket::field(w, k), clock.window)).count();
        self.words.iter().map(alive).sum::<usize>() as u64
    }
}
