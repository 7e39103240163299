//! One spectral Bloom filter: a key's counter positions and the Minimum
//! Selection filter over one counter vector.

use std::fmt;

use super::{CounterKind, KeyHash, MAX_HASHES, SpectralError, Store};

/// A key's hash re-mixed with `salt`: independent positions in the
/// secondary SBF and the flags filter from the one XXH3-128 of the key.
#[inline]
pub fn salted(h: &KeyHash, salt: u64) -> KeyHash {
    KeyHash { h1: mix(h.h1 ^ salt), h2: mix(h.h2.rotate_left(32) ^ salt) }
}

/// The SplitMix64 finaliser: a bijection that spreads every input bit.
#[inline]
pub(super) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Salts of the secondary SBF and of the flags filter.
pub(super) const SECONDARY_SALT: u64 = 0x5EC0_0DA2_7000_0001;
pub(super) const FLAGS_SALT: u64 = 0xF1A6_5000_0000_0002;

/// A key's k counter positions in a filter of m counters: the same in every
/// filter of that size, so a ring of equal filters computes them once.
#[derive(Clone, Copy, Debug)]
pub struct Slots {
    pub(super) at: [usize; MAX_HASHES as usize],
    k: usize,
}

impl Slots {
    /// The first `k` positions of the key's probe over `m` counters.
    pub fn of(h: &KeyHash, m: u64, k: u32) -> Slots {
        let mut s = Slots { at: [0; MAX_HASHES as usize], k: k as usize };
        for (slot, pos) in s.at.iter_mut().zip(h.probe(m).take(k as usize)) {
            *slot = pos;
        }
        s
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.at[..self.k].iter().copied()
    }
}

/// One spectral Bloom filter: m counters, k positions per key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sbf {
    k: u32,
    pub(super) counters: Store,
}

impl Sbf {
    /// `m >= 2` fixed-width counters of `bits` bits, `1..=MAX_HASHES` hashes.
    pub fn new(m: usize, k: u32, bits: u8) -> Self {
        Self::with_store(m, k, bits, CounterKind::Fixed)
    }

    /// [`Self::new`] with counters of the given kind.
    pub fn with_store(m: usize, k: u32, bits: u8, kind: CounterKind) -> Self {
        assert!(m >= 2 && (1..=MAX_HASHES).contains(&k));
        Sbf { k, counters: Store::new(kind, m, bits) }
    }

    pub fn hashes(&self) -> u32 {
        self.k
    }

    pub fn counters(&self) -> &Store {
        &self.counters
    }

    pub(super) fn slots(&self, h: &KeyHash) -> Slots {
        Slots::of(h, self.counters.len() as u64, self.k)
    }

    /// The minimum of the key's counters (Minimum Selection) and whether
    /// it is held by two or more distinct counters (a recurring minimum).
    pub(super) fn min_of(&self, s: &Slots) -> (u32, bool) {
        let mut min = u32::MAX;
        let mut at = usize::MAX;
        let mut recurring = false;
        for p in s.iter() {
            let v = self.counters.get(p);
            if v < min {
                (min, at, recurring) = (v, p, false);
            } else if v == min && p != at {
                recurring = true;
            }
        }
        (min, recurring)
    }

    /// The Minimum Selection estimate: never below the key's true count
    /// (or at the counters' maximum when they saturated).
    pub fn query(&self, h: &KeyHash) -> u32 {
        self.min_of(&self.slots(h)).0
    }

    /// Whether the key's minimum is held by two or more of its counters.
    pub fn is_recurring(&self, h: &KeyHash) -> bool {
        self.min_of(&self.slots(h)).1
    }

    /// Adds `r` copies to every counter of the key.
    pub fn insert(&mut self, h: &KeyHash, r: u32) {
        let s = self.slots(h);
        self.insert_at(&s, r);
    }

    pub(super) fn insert_at(&mut self, s: &Slots, r: u32) {
        // A position repeated in the probe sequence gets its r once: every
        // key's counters then hold at least its count, and no more than needed.
        for (i, p) in s.iter().enumerate() {
            if !s.at[..i].contains(&p) {
                self.counters.add(p, r);
            }
        }
    }

    /// Minimal Increase: raises only what must grow for the key's minimum to
    /// rise by `r` (every counter to at least `min + r`).
    pub fn insert_minimal(&mut self, h: &KeyHash, r: u32) {
        let s = self.slots(h);
        self.insert_minimal_at(&s, r);
    }

    pub(super) fn insert_minimal_at(&mut self, s: &Slots, r: u32) {
        let target = u64::from(self.min_of(s).0) + u64::from(r);
        for p in s.iter() {
            if u64::from(self.counters.get(p)) < target {
                self.counters.set(p, target);
            }
        }
    }

    /// Removes `r` copies; refused (nothing changed) if some counter of the
    /// key holds fewer than `r`: the key cannot have been inserted that often.
    pub fn delete(&mut self, h: &KeyHash, r: u32) -> Result<(), SpectralError> {
        let s = self.slots(h);
        let min = self.min_of(&s).0;
        if min < r {
            return Err(SpectralError::NotPresent { estimate: u64::from(min), count: r });
        }
        for (i, p) in s.iter().enumerate() {
            if !s.at[..i].contains(&p) {
                self.counters.sub(p, r);
            }
        }
        Ok(())
    }

    /// Adds `other`'s counters to these (saturating): the SBF of the union
    /// of both multisets.
    pub fn union(&mut self, other: &Sbf) -> Result<(), SpectralError> {
        same("counters", self.counters.len(), other.counters.len())?;
        same("hashes", self.k, other.k)?;
        same("counter bits", self.counters.bits(), other.counters.bits())?;
        for i in 0..self.counters.len() {
            self.counters.add(i, other.counters.get(i));
        }
        Ok(())
    }

    pub fn clear(&mut self) {
        self.counters.clear();
    }
}

pub(super) fn same<T: PartialEq + fmt::Display>(what: &'static str, left: T, right: T) -> Result<(), SpectralError> {
    if left == right {
        Ok(())
    } else {
        Err(SpectralError::Mismatch { what, left: left.to_string(), right: right.to_string() })
    }
}
