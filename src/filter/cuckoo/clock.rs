//! The slice clock as the slots see it: the current tick, the stamp a slot
//! set now stores, which stamps are alive or kept, and how a key's hash
//! becomes a fingerprint.

use super::bucket::ENTRY_BITS;
use super::params::{CuckooParams, MAX_CLOCK_BITS};
use crate::filter::hash::KeyHash;

/// The clock at one tick, with the slot layout it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    /// Absolute tick (`clock_ms / tick_ms`).
    pub tick: u64,
    /// `tick mod R + 1`: the stamp a slot set now stores.
    pub value: u16,
    pub period: u32,
    /// W: a slot at most this many ticks old is alive (a duplicate's).
    pub window: u32,
    /// W + Lt: a slot at most this old is kept (not reusable).
    pub retain: u32,
    /// The fingerprint's bits of a slot's 17-bit entry (its high f bits).
    pub fp_mask: u32,
    /// The stamp's bits (its low c bits).
    pub stamp_mask: u32,
    clock_bits: u32,
    fp_bits: u32,
}

impl Clock {
    pub fn at(tick: u64, p: &CuckooParams) -> Self {
        Clock {
            tick,
            value: stamp_at(tick, p.period),
            period: p.period,
            window: p.window_ticks,
            retain: p.retain_ticks(),
            fp_mask: ((1u32 << ENTRY_BITS) - 1) & !((1u32 << p.clock_bits) - 1),
            stamp_mask: (1u32 << p.clock_bits) - 1,
            clock_bits: p.clock_bits,
            fp_bits: p.fingerprint_bits,
        }
    }

    /// The stamp of a slot set `delta` ticks before the clock.
    #[inline]
    pub fn stamp_behind(&self, delta: u32) -> u16 {
        stamp_at(self.tick.saturating_sub(u64::from(delta)), self.period)
    }

    /// A key's fingerprint: the top f bits of the hash's high half (the
    /// slice uses its low 32 bits, the buckets the low half).
    #[inline]
    pub fn fingerprint(&self, hash: &KeyHash) -> u16 {
        (hash.h2 >> (64 - self.fp_bits)) as u16
    }

    /// A fingerprint in its place in a slot's entry.
    #[inline]
    pub fn fp_field(&self, fp: u16) -> u32 {
        u32::from(fp) << self.clock_bits
    }

    /// The fingerprint an entry holds.
    #[inline]
    pub fn fingerprint_of(&self, entry: u32) -> u16 {
        (entry >> self.clock_bits) as u16
    }

    /// Ticks since an entry's stamp (in `0..R`); `u32::MAX` for an empty
    /// slot. Reads the stamp bits only, so a bucket's field will do.
    #[inline]
    pub fn age(&self, entry: u32) -> u32 {
        let v = entry & self.stamp_mask;
        if v == 0 {
            return u32::MAX;
        }
        let now = u32::from(self.value);
        if v > now { now + self.period - v } else { now - v }
    }

    /// For each stamp value (the index, up to 2^c − 1): whether a slot
    /// holding it is set and older than W + Lt (what the sweep clears).
    pub fn expired_stamps(&self) -> [bool; 1 << MAX_CLOCK_BITS] {
        let mut expired = [false; 1 << MAX_CLOCK_BITS];
        for (v, e) in expired.iter_mut().enumerate().take(self.period as usize + 1).skip(1) {
            *e = self.age(v as u32) > self.retain;
        }
        expired
    }

    /// Whether an entry is set and at most `limit` ticks old.
    #[inline]
    pub fn is_within(&self, entry: u32, limit: u32) -> bool {
        self.age(entry) <= limit
    }
}

/// What a slot set at `tick` stores: `tick mod R + 1`.
#[inline]
fn stamp_at(tick: u64, period: u32) -> u16 {
    (tick % u64::from(period)) as u16 + 1
}
