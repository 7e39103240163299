//! Spectral Bloom Filters (Cohen and Matias, SIGMOD 2003): counters instead
//! of bits, so a filter answers "how many times was x inserted?" with a
//! one-sided error — an estimate is never below the true count.
//!
//! - [`Counters`]: m saturating fixed-width counters (4, 8, 16 or 32 bits)
//!   packed in `u64` words. A saturated counter stays at its maximum (it is
//!   never decremented or wrapped), so it still bounds every count above.
//! - [`Store`]: the counter vector of a filter, either those fixed-width
//!   counters or compact variable-length ones ([`CompactCounters`], the
//!   paper's §4), chosen by [`CounterKind`]; the estimates are the same.
//! - [`Sbf`]: one counter vector with k positions per key (the dedup filter's
//!   double hashing over one XXH3-128), Minimum Selection (MS) queries,
//!   insert, delete, union.
//! - [`Spectral`]: MS, Minimal Increase (MI, "conservative update": only the
//!   minimal counters grow; deletion is refused) or Recurring Minimum (RM: a
//!   primary SBF, a secondary SBF of half its size for keys whose minimum is a
//!   single counter, and the flags filter B_f marking keys moved there).
//! - [`WindowedCounts`] (in `windowed.rs`): counts over a sliding window of
//!   event time, as a ring of sub-windows expired whole (no deletions, so MI
//!   works too), each a chain of filters that grows with what it receives.
//!
//! One-sided error: with no deletes, MS and MI never report less than a
//! key's true count (or report the counter maximum if a counter saturated,
//! which callers treat as "at least that"). RM keeps that bound for every
//! key except one whose B_f bits all get set by other keys after its own
//! inserts (a B_f false positive arriving late, ≈ (1-e^(-γ/5k))^k per key,
//! 3.8·10⁻⁵ at γ = 0.7): the secondary then lacks its earlier copies. In
//! crowded filters it is more: measured on skewed multisets, 1.3–1.5% of
//! keys on average from γ = 2.2 to 2.8 (the worst filter of 4 000: 9.3%;
//! test `recurring_minimum_undercounts_rarely`). Where an undercount must
//! never happen (limits), prefer MI or MS.
//!
//!
//! [`compact_counters`], below this file, is the compact store.
//!
//! Pure: no I/O, no clock.

pub mod compact_counters;
mod windowed;

pub use windowed::{
    DEFAULT_SUBWINDOWS, GROWTH_LEVELS, RING_FALSE_POSITIVE, SUBWINDOWS_MAX, SUBWINDOWS_MIN, WindowedCounts,
};

use std::borrow::Cow;
use std::fmt;

use super::hash::KeyHash;
use super::param_error::ParamError;
use compact_counters::CompactCounters;

/// The most hash positions a key may have (k).
pub const MAX_HASHES: u32 = 16;

/// Why an operation on a spectral filter was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpectralError {
    /// Minimal Increase cannot delete: it did not raise every counter of the
    /// key, so decrementing them would undercount other keys (false negatives).
    #[error("the minimal-increase estimator cannot delete (it would undercount other keys); use ms or rm")]
    DeleteUnsupported,
    /// Deleting more copies than the filter can hold for the key would
    /// undercount other keys.
    #[error("cannot delete {count} copies of a key whose estimate is {estimate}")]
    NotPresent { estimate: u64, count: u32 },
    /// Filters with different parameters cannot be added.
    #[error("cannot unite spectral filters with different {what}: {left} vs {right}")]
    Mismatch { what: &'static str, left: String, right: String },
}

/// m saturating counters of `bits` bits each (a width that divides 64, so a
/// counter never straddles two words).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counters {
    bits: u8,
    len: usize,
    words: Vec<u64>,
}

impl Counters {
    /// `len` counters of `bits` (4, 8, 16 or 32) bits, all zero.
    pub fn new(len: usize, bits: u8) -> Self {
        assert!(matches!(bits, 4 | 8 | 16 | 32), "counter width {bits}");
        let per_word = 64 / bits as usize;
        Counters { bits, len, words: vec![0; len.div_ceil(per_word)] }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn bits(&self) -> u8 {
        self.bits
    }

    /// The saturation value, `2^bits - 1`.
    #[inline]
    pub fn max(&self) -> u32 {
        (u64::MAX >> (64 - self.bits)) as u32
    }

    #[inline]
    fn at(&self, i: usize) -> (usize, u32) {
        let per_word = 64 / self.bits as usize;
        (i / per_word, (i % per_word) as u32 * u32::from(self.bits))
    }

    #[inline]
    pub fn get(&self, i: usize) -> u32 {
        let (w, s) = self.at(i);
        ((self.words[w] >> s) & u64::from(self.max())) as u32
    }

    /// Sets counter `i` to `v` clamped to the maximum.
    #[inline]
    pub fn set(&mut self, i: usize, v: u64) {
        let max = u64::from(self.max());
        let (w, s) = self.at(i);
        self.words[w] = (self.words[w] & !(max << s)) | (v.min(max) << s);
    }

    /// Adds `r` (saturating).
    #[inline]
    pub fn add(&mut self, i: usize, r: u32) {
        self.set(i, u64::from(self.get(i)) + u64::from(r));
    }

    /// Subtracts `r`, except from a saturated counter: its true value is
    /// unknown (at least the maximum), so it stays saturated.
    #[inline]
    pub fn sub(&mut self, i: usize, r: u32) {
        let v = self.get(i);
        if v != self.max() {
            self.set(i, u64::from(v.saturating_sub(r)));
        }
    }

    pub fn clear(&mut self) {
        self.words.fill(0);
    }

    pub fn memory_bytes(&self) -> u64 {
        self.words.len() as u64 * 8
    }

    /// The packed words (for snapshots).
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// Counters from their packed words; `None` if the length does not fit.
    pub fn from_words(len: usize, bits: u8, words: Vec<u64>) -> Option<Self> {
        let c = Counters::new(0, bits);
        (words.len() == len.div_ceil(64 / c.bits as usize)).then_some(Counters { bits, len, words })
    }

    /// Counters at their maximum.
    pub fn saturated(&self) -> u64 {
        (0..self.len).filter(|&i| self.get(i) == self.max()).count() as u64
    }
}

/// How a filter keeps its counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CounterKind {
    /// [`Counters`]: every counter `counter_bits` wide.
    #[default]
    Fixed,
    /// [`CompactCounters`]: each counter as long as its value needs.
    Compact,
}

impl CounterKind {
    pub const ALL: [CounterKind; 2] = [CounterKind::Fixed, CounterKind::Compact];

    pub fn as_str(self) -> &'static str {
        match self {
            CounterKind::Fixed => "fixed",
            CounterKind::Compact => "compact",
        }
    }
}

impl std::str::FromStr for CounterKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        CounterKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown counter store `{s}`: expected fixed or compact"))
    }
}

impl fmt::Display for CounterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A filter's counter vector, of either kind; both saturate at `2^bits - 1`
/// and never decrement a saturated counter, so every estimate is the same.
/// (An enum, not a type parameter: the choice is a run-time setting, and
/// the filters above stay one type.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Store {
    Fixed(Counters),
    Compact(CompactCounters),
}

/// Runs `$e` with `$c` bound to the store's counters, whichever kind.
macro_rules! each {
    ($store:expr, $c:ident => $e:expr) => {
        match $store {
            Store::Fixed($c) => $e,
            Store::Compact($c) => $e,
        }
    };
}

impl Store {
    /// `len` zero counters of `bits` (4, 8, 16 or 32) bits' range.
    pub fn new(kind: CounterKind, len: usize, bits: u8) -> Self {
        match kind {
            CounterKind::Fixed => Store::Fixed(Counters::new(len, bits)),
            CounterKind::Compact => Store::Compact(CompactCounters::new(len, bits)),
        }
    }

    pub fn kind(&self) -> CounterKind {
        match self {
            Store::Fixed(_) => CounterKind::Fixed,
            Store::Compact(_) => CounterKind::Compact,
        }
    }

    pub fn len(&self) -> usize {
        each!(self, c => c.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn bits(&self) -> u8 {
        each!(self, c => c.bits())
    }

    pub fn max(&self) -> u32 {
        each!(self, c => c.max())
    }

    #[inline]
    pub fn get(&self, i: usize) -> u32 {
        each!(self, c => c.get(i))
    }

    #[inline]
    pub fn set(&mut self, i: usize, v: u64) {
        each!(self, c => c.set(i, v))
    }

    #[inline]
    pub fn add(&mut self, i: usize, r: u32) {
        each!(self, c => c.add(i, r))
    }

    #[inline]
    pub fn sub(&mut self, i: usize, r: u32) {
        each!(self, c => c.sub(i, r))
    }

    pub fn clear(&mut self) {
        each!(self, c => c.clear())
    }

    /// Bytes held (for compact counters: the bit string, slack and index).
    pub fn memory_bytes(&self) -> u64 {
        each!(self, c => c.memory_bytes())
    }

    pub fn saturated(&self) -> u64 {
        each!(self, c => c.saturated())
    }

    /// The counters as fixed-width ones: the snapshot form of both kinds, so
    /// a snapshot does not depend on the store (and either restores it).
    pub fn to_fixed(&self) -> Cow<'_, Counters> {
        match self {
            Store::Fixed(c) => Cow::Borrowed(c),
            Store::Compact(c) => {
                let mut f = Counters::new(c.len(), c.bits());
                for (i, v) in c.values().enumerate() {
                    f.set(i, u64::from(v));
                }
                Cow::Owned(f)
            }
        }
    }

    /// Takes the values of `f` (the same length and width).
    fn load(&mut self, f: Counters) {
        *self = match self {
            Store::Fixed(_) => Store::Fixed(f),
            Store::Compact(c) => Store::Compact(CompactCounters::from_values(
                c.len(),
                c.bits(),
                (0..f.len()).map(|i| u64::from(f.get(i))),
            )),
        };
    }
}

/// A key's hash re-mixed with `salt`: independent positions in the
/// secondary SBF and the flags filter from the one XXH3-128 of the key.
#[inline]
pub fn salted(h: &KeyHash, salt: u64) -> KeyHash {
    KeyHash { h1: mix(h.h1 ^ salt), h2: mix(h.h2.rotate_left(32) ^ salt) }
}

/// The SplitMix64 finaliser: a bijection that spreads every input bit.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Salts of the secondary SBF and of the flags filter.
const SECONDARY_SALT: u64 = 0x5EC0_0DA2_7000_0001;
const FLAGS_SALT: u64 = 0xF1A6_5000_0000_0002;

/// A key's k counter positions in a filter of m counters: the same in every
/// filter of that size, so a ring of equal filters computes them once.
#[derive(Clone, Copy, Debug)]
pub struct Slots {
    at: [usize; MAX_HASHES as usize],
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

    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.at[..self.k].iter().copied()
    }
}

/// One spectral Bloom filter: m counters, k positions per key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sbf {
    k: u32,
    counters: Store,
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

    fn slots(&self, h: &KeyHash) -> Slots {
        Slots::of(h, self.counters.len() as u64, self.k)
    }

    /// The minimum of the key's counters (Minimum Selection) and whether
    /// it is held by two or more distinct counters (a recurring minimum).
    fn min_of(&self, s: &Slots) -> (u32, bool) {
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

    fn insert_at(&mut self, s: &Slots, r: u32) {
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

    fn insert_minimal_at(&mut self, s: &Slots, r: u32) {
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

fn same<T: PartialEq + fmt::Display>(what: &'static str, left: T, right: T) -> Result<(), SpectralError> {
    if left == right {
        Ok(())
    } else {
        Err(SpectralError::Mismatch { what, left: left.to_string(), right: right.to_string() })
    }
}

/// How counts are kept and read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Estimator {
    /// Minimum Selection: every counter grows, the minimum is the estimate.
    Ms,
    /// Minimal Increase: only the minimal counters grow. Most accurate; no
    /// deletion.
    Mi,
    /// Recurring Minimum: a secondary SBF for keys with a single minimum.
    Rm,
}

impl Estimator {
    pub const ALL: [Estimator; 3] = [Estimator::Ms, Estimator::Mi, Estimator::Rm];

    pub fn as_str(self) -> &'static str {
        match self {
            Estimator::Ms => "ms",
            Estimator::Mi => "mi",
            Estimator::Rm => "rm",
        }
    }

    pub fn tag(self) -> u8 {
        match self {
            Estimator::Ms => 1,
            Estimator::Mi => 2,
            Estimator::Rm => 3,
        }
    }

    pub fn from_tag(tag: u8) -> Option<Self> {
        Estimator::ALL.into_iter().find(|e| e.tag() == tag)
    }
}

impl std::str::FromStr for Estimator {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Estimator::ALL
            .into_iter()
            .find(|e| e.as_str() == s)
            .ok_or_else(|| format!("unknown estimator `{s}`: expected ms, mi or rm"))
    }
}

impl fmt::Display for Estimator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A plain Bloom filter of bits: Recurring Minimum's B_f.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Flags {
    k: u32,
    bits: Counters,
}

impl Flags {
    fn contains(&self, h: &KeyHash) -> bool {
        h.probe(self.bits.len() as u64).take(self.k as usize).all(|p| self.bits.get(p) != 0)
    }

    fn insert(&mut self, h: &KeyHash) {
        for p in h.probe(self.bits.len() as u64).take(self.k as usize) {
            self.bits.set(p, 1);
        }
    }
}

/// The settings of one spectral filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpectralParams {
    pub estimator: Estimator,
    /// Counters m of the (primary) SBF.
    pub counters: u64,
    /// Hashes k.
    pub hashes: u32,
    /// Bits per counter: 4, 8, 16 or 32 (for compact counters, the range:
    /// they saturate at the same `2^bits - 1`).
    pub counter_bits: u8,
    /// Fixed-width or compact counters (the same estimates).
    pub store: CounterKind,
}

impl SpectralParams {
    /// Validates the settings; errors name the setting, value and rule.
    pub fn validate(&self) -> Result<(), ParamError> {
        if !matches!(self.counter_bits, 4 | 8 | 16 | 32) {
            return Err(ParamError::new("counter_bits", self.counter_bits, "must be 4, 8, 16 or 32"));
        }
        if !(1..=MAX_HASHES).contains(&self.hashes) {
            return Err(ParamError::new("hashes", self.hashes, format!("must be 1 to {MAX_HASHES}")));
        }
        if !(16..=1 << 36).contains(&self.counters) {
            return Err(ParamError::new("counters", self.counters, "must be 16 to 2^36"));
        }
        Ok(())
    }

    /// The largest count a counter holds before it saturates.
    pub fn counter_max(&self) -> u32 {
        (u64::MAX >> (64 - self.counter_bits)) as u32
    }

    /// Counters of RM's secondary SBF (m/2, as in the paper's Table 1) and
    /// bits of its flags filter B_f (m, as the paper's refinement).
    pub fn secondary_counters(&self) -> u64 {
        (self.counters / 2).max(2)
    }

    /// Memory of one filter with fixed-width counters, in bytes (compact
    /// counters vary: [`Spectral::memory_bytes`]).
    pub fn memory_bytes(&self) -> u64 {
        let words = |n: u64, bits: u64| (n * bits).div_ceil(64) * 8;
        let primary = words(self.counters, u64::from(self.counter_bits));
        match self.estimator {
            Estimator::Rm => {
                primary + words(self.secondary_counters(), u64::from(self.counter_bits)) + words(self.counters, 4)
            }
            _ => primary,
        }
    }
}

/// A spectral filter with its estimator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spectral {
    estimator: Estimator,
    primary: Sbf,
    /// RM only: the secondary SBF and B_f.
    secondary: Option<(Sbf, Flags)>,
}

impl Spectral {
    /// An empty filter (`params` must be valid: see [`SpectralParams::validate`]).
    pub fn new(params: &SpectralParams) -> Self {
        let (m, k, bits) = (params.counters as usize, params.hashes, params.counter_bits);
        let secondary = (params.estimator == Estimator::Rm).then(|| {
            // B_f is one bit per position; stored as 4-bit cells (the
            // narrowest counter width) to reuse the counter code.
            let secondary = Sbf::with_store(params.secondary_counters() as usize, k, bits, params.store);
            (secondary, Flags { k, bits: Counters::new(m, 4) })
        });
        Spectral { estimator: params.estimator, primary: Sbf::with_store(m, k, bits, params.store), secondary }
    }

    /// Bytes held by every counter array.
    pub fn memory_bytes(&self) -> u64 {
        let secondary = self.secondary.as_ref().map_or(0, |(s, f)| s.counters.memory_bytes() + f.bits.memory_bytes());
        self.primary.counters.memory_bytes() + secondary
    }

    pub fn estimator(&self) -> Estimator {
        self.estimator
    }

    pub fn primary(&self) -> &Sbf {
        &self.primary
    }

    /// The key's positions in the primary SBF (for [`Self::insert_with`]
    /// and [`Self::query_with`] on any filter with the same parameters).
    pub fn slots(&self, h: &KeyHash) -> Slots {
        self.primary.slots(h)
    }

    /// Adds `r` copies of the key.
    pub fn insert(&mut self, h: &KeyHash, r: u32) {
        let s = self.slots(h);
        self.insert_with(h, &s, r);
    }

    /// [`Self::insert`] with the key's [`Self::slots`] computed already.
    pub fn insert_with(&mut self, h: &KeyHash, s: &Slots, r: u32) {
        match self.estimator {
            Estimator::Ms => self.primary.insert_at(s, r),
            Estimator::Mi => self.primary.insert_minimal_at(s, r),
            Estimator::Rm => {
                self.primary.insert_at(s, r);
                let (min, recurring) = self.primary.min_of(s);
                let (secondary, flags) = self.secondary.as_mut().expect("rm has a secondary");
                let (sh, fh) = (salted(h, SECONDARY_SALT), salted(h, FLAGS_SALT));
                if flags.contains(&fh) {
                    // Once moved, a key follows every insert in the secondary,
                    // recurring minimum or not: skipping one (as the paper's
                    // outline does) would leave its secondary estimate short
                    // of its count if its minimum later became single again.
                    secondary.insert(&sh, r);
                } else if !recurring {
                    // Moved with the primary's estimate (the paper's starting
                    // value), which already counts this insert.
                    secondary.insert(&sh, min);
                    flags.insert(&fh);
                }
            }
        }
    }

    /// The estimated count: at least the true count (or the counter maximum
    /// if a counter saturated); see the module docs for RM's one caveat.
    pub fn query(&self, h: &KeyHash) -> u32 {
        self.query_with(h, &self.slots(h))
    }

    /// [`Self::query`] with the key's [`Self::slots`] computed already.
    #[inline]
    pub fn query_with(&self, h: &KeyHash, s: &Slots) -> u32 {
        let (min, recurring) = self.primary.min_of(s);
        match &self.secondary {
            Some((secondary, flags)) if !recurring && flags.contains(&salted(h, FLAGS_SALT)) => {
                let v = secondary.query(&salted(h, SECONDARY_SALT));
                // Both bound the count above: the smaller is the better.
                if v > 0 { v.min(min) } else { min }
            }
            _ => min,
        }
    }

    /// How many of the key's (distinct) primary counters are zero: those an
    /// insert makes nonzero (every estimator raises all k of them).
    pub fn zeros_at(&self, s: &Slots) -> u64 {
        let c = &self.primary.counters;
        s.iter().enumerate().filter(|&(i, p)| !s.at[..i].contains(&p) && c.get(p) == 0).count() as u64
    }

    /// Nonzero counters of the primary SBF. A key never inserted is
    /// estimated nonzero only if all k of its counters are: with the
    /// share z of nonzero counters, with probability ≈ z^k.
    pub fn nonzero(&self) -> u64 {
        let c = &self.primary.counters;
        (0..c.len()).filter(|&i| c.get(i) != 0).count() as u64
    }

    /// RM: whether the key is marked in B_f as moved to the secondary.
    pub fn is_moved(&self, h: &KeyHash) -> bool {
        self.secondary.as_ref().is_some_and(|(_, flags)| flags.contains(&salted(h, FLAGS_SALT)))
    }

    /// RM: the secondary SBF's estimate for the key (`None` for MS and MI);
    /// for the accuracy bench's breakdown of RM's errors.
    pub fn secondary_estimate(&self, h: &KeyHash) -> Option<u32> {
        self.secondary.as_ref().map(|(s, _)| s.query(&salted(h, SECONDARY_SALT)))
    }

    /// Removes `r` copies: MS decrements all counters; RM the primary and,
    /// for a moved key (flagged in B_f), the secondary unless one of its
    /// counters is below `r`; MI refuses.
    pub fn delete(&mut self, h: &KeyHash, r: u32) -> Result<(), SpectralError> {
        match self.estimator {
            Estimator::Mi => Err(SpectralError::DeleteUnsupported),
            Estimator::Ms => self.primary.delete(h, r),
            Estimator::Rm => {
                self.primary.delete(h, r)?;
                let (secondary, flags) = self.secondary.as_mut().expect("rm has a secondary");
                // Only a moved key's copies are in the secondary: the paper
                // also decrements it for any key with a single minimum, which
                // takes from the moved keys sharing its counters copies they
                // still have (an undercount).
                if flags.contains(&salted(h, FLAGS_SALT)) {
                    let sh = salted(h, SECONDARY_SALT);
                    if secondary.query(&sh) >= r {
                        secondary.delete(&sh, r)?;
                    }
                }
                Ok(())
            }
        }
    }

    /// Adds `other` (same parameters) into this filter: counter vectors add,
    /// RM's flags are OR-ed.
    pub fn union(&mut self, other: &Spectral) -> Result<(), SpectralError> {
        same("estimator", self.estimator, other.estimator)?;
        self.primary.union(&other.primary)?;
        if let (Some((s, f)), Some((os, of))) = (self.secondary.as_mut(), other.secondary.as_ref()) {
            s.union(os)?;
            for i in 0..f.bits.len() {
                if of.bits.get(i) != 0 {
                    f.bits.set(i, 1);
                }
            }
        }
        Ok(())
    }

    pub fn clear(&mut self) {
        self.primary.clear();
        if let Some((s, f)) = self.secondary.as_mut() {
            s.clear();
            f.bits.clear();
        }
    }

    /// Every counter array, primary first, as fixed-width counters (for
    /// snapshots: the same bytes whichever store the filter uses).
    pub fn arrays(&self) -> Vec<Cow<'_, Counters>> {
        let mut v = vec![self.primary.counters.to_fixed()];
        if let Some((s, f)) = &self.secondary {
            v.push(s.counters.to_fixed());
            v.push(Cow::Borrowed(&f.bits));
        }
        v
    }

    /// Replaces the counter arrays (in [`Self::arrays`]' order); `false` if
    /// their number or sizes do not fit.
    pub fn set_arrays(&mut self, words: Vec<Vec<u64>>) -> bool {
        let mut stores: Vec<&mut Store> = vec![&mut self.primary.counters];
        let mut flags = None;
        if let Some((s, f)) = self.secondary.as_mut() {
            stores.push(&mut s.counters);
            flags = Some(f);
        }
        if words.len() != stores.len() + usize::from(flags.is_some()) {
            return false;
        }
        let mut words = words.into_iter();
        // Every array checked before any is replaced: a misfit changes nothing.
        let Some(loaded) = stores
            .iter()
            .zip(words.by_ref())
            .map(|(st, w)| Counters::from_words(st.len(), st.bits(), w))
            .collect::<Option<Vec<_>>>()
        else {
            return false;
        };
        let flag_words = words.next();
        if let (Some(f), Some(w)) = (&flags, &flag_words)
            && f.bits.words.len() != w.len()
        {
            return false;
        }
        for (st, c) in stores.into_iter().zip(loaded) {
            st.load(c);
        }
        if let (Some(f), Some(w)) = (flags, flag_words) {
            f.bits.words = w;
        }
        true
    }
}

/// Counters for an expected number of distinct keys at load `gamma = n·k/m`.
pub fn counters_for(distinct: u64, hashes: u32, gamma: f64) -> u64 {
    ((distinct.max(1) as f64 * f64::from(hashes) / gamma).ceil() as u64).max(16)
}

/// The Bloom error `E_b = (1 - e^(-γ))^k`: the probability that all k
/// counters of a key are shared with other keys (Claim 1).
pub fn bloom_error(gamma: f64, k: u32) -> f64 {
    (1.0 - (-gamma).exp()).powi(k as i32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::hash::DEFAULT_SEED;
    use crate::filter::random::Rng;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn key(i: u64) -> KeyHash {
        KeyHash::of(DEFAULT_SEED, &i.to_le_bytes())
    }

    fn params(estimator: Estimator, counters: u64, bits: u8) -> SpectralParams {
        SpectralParams { estimator, counters, hashes: 5, counter_bits: bits, store: CounterKind::Fixed }
    }

    #[test]
    fn counters_pack_and_saturate() {
        for bits in [4u8, 8, 16, 32] {
            let mut c = Counters::new(100, bits);
            let max = c.max();
            assert_eq!(u64::from(max), (1u64 << bits) - 1);
            c.add(7, 3);
            c.add(8, 5);
            assert_eq!((c.get(6), c.get(7), c.get(8), c.get(9)), (0, 3, 5, 0));
            c.add(7, u32::MAX);
            assert_eq!(c.get(7), max, "saturates");
            c.sub(7, 1);
            assert_eq!(c.get(7), max, "a saturated counter stays saturated");
            c.sub(8, 9);
            assert_eq!(c.get(8), 0);
            assert_eq!(c.saturated(), 1);
        }
    }

    #[test]
    fn exact_counts_when_the_filter_is_sparse() {
        for e in Estimator::ALL {
            let mut f = Spectral::new(&params(e, 1 << 16, 16));
            for i in 0..20u64 {
                f.insert(&key(i), (i + 1) as u32);
            }
            for i in 0..20u64 {
                assert_eq!(f.query(&key(i)), (i + 1) as u32, "{e}");
            }
            assert_eq!(f.query(&key(999)), 0, "{e}");
        }
    }

    #[test]
    fn deletes_restore_and_refuse() {
        let mut ms = Spectral::new(&params(Estimator::Ms, 4096, 8));
        ms.insert(&key(1), 3);
        ms.delete(&key(1), 2).unwrap();
        assert_eq!(ms.query(&key(1)), 1);
        assert_eq!(ms.delete(&key(2), 1), Err(SpectralError::NotPresent { estimate: 0, count: 1 }));
        let mut mi = Spectral::new(&params(Estimator::Mi, 4096, 8));
        mi.insert(&key(1), 3);
        let e = mi.delete(&key(1), 1).unwrap_err();
        assert_eq!(e, SpectralError::DeleteUnsupported);
        assert!(e.to_string().contains("cannot delete"), "{e}");
        assert_eq!(mi.query(&key(1)), 3, "nothing changed");
    }

    #[test]
    fn union_adds_and_refuses_other_shapes() {
        let p = params(Estimator::Ms, 2048, 8);
        let (mut a, mut b) = (Spectral::new(&p), Spectral::new(&p));
        a.insert(&key(1), 2);
        b.insert(&key(1), 3);
        b.insert(&key(2), 1);
        a.union(&b).unwrap();
        assert_eq!((a.query(&key(1)), a.query(&key(2))), (5, 1));
        let c = Spectral::new(&params(Estimator::Ms, 4096, 8));
        assert!(matches!(a.union(&c), Err(SpectralError::Mismatch { what: "counters", .. })));
    }

    /// Skewed multisets into crowded filters (γ = nk/m from 0.5 to 3): no
    /// estimator ever reports less than the true count (no deletes).
    fn one_sided(e: Estimator, distinct: u64, m: u64, draws: usize, seed: u64) -> Result<(), TestCaseError> {
        // RM may undercount a key whose B_f bits other keys set late (see
        // the module docs): rare, counted, bounded here; MS and MI never.
        let (under, keys) = skewed_undercounts(e, distinct, m, draws, seed);
        if e == Estimator::Rm {
            // A bound on the worst case, far above any of 20 000 seeded runs
            // (9.3%, `recurring_minimum_undercounts_rarely`): random seeds
            // must not make it flaky. The rate itself is tested there.
            prop_assert!(under * 100 <= keys.max(60) * 15, "rm undercounts {under} of {keys} keys");
        } else {
            prop_assert_eq!(under, 0, "{} undercounts {} of {} keys", e, under, keys);
        }
        Ok(())
    }

    /// `draws` keys from Zipf(0.8) over `distinct`, 1 to 3 copies each, into
    /// an `e` filter of `m` counters: (keys it reports below their true
    /// count, keys drawn).
    fn skewed_undercounts(e: Estimator, distinct: u64, m: u64, draws: usize, seed: u64) -> (usize, usize) {
        let mut f = Spectral::new(&params(e, m, 16));
        let mut exact: HashMap<u64, u32> = HashMap::new();
        let mut rng = Rng::new(seed);
        let zipf = crate::testkit::workload::Zipf::new(distinct as usize, 0.8);
        for _ in 0..draws {
            let x = zipf.sample(&mut rng);
            let r = 1 + rng.below(3) as u32;
            f.insert(&key(x), r);
            *exact.entry(x).or_default() += r;
        }
        (exact.iter().filter(|&(&x, &n)| f.query(&key(x)) < n).count(), exact.len())
    }

    /// RM's undercount rate (the module docs' caveat), over fixed seeds so
    /// that it cannot flake: the share of keys RM reports below their true
    /// count, per crowding γ, as a mean and a worst case over 300 filters.
    /// Measured on 4 000 seeds per γ (2026-11-27): mean 1.3–1.5% and worst
    /// 7.3–9.3% from γ = 2.2 to 2.8; below γ = 1, none on average.
    fn rm_undercounts(load: f64, seeds: u64) -> (f64, f64) {
        let (mut sum, mut worst) = (0.0, 0.0f64);
        for seed in 0..seeds {
            let distinct = 50 + (seed * 7919) % 350;
            let m = counters_for(distinct, 5, load);
            let drawn = seed * 1_000_003 + (load * 10.0) as u64;
            let (under, keys) = skewed_undercounts(Estimator::Rm, distinct, m, distinct as usize * 4, drawn);
            let under = under as f64 / keys as f64;
            sum += under;
            worst = worst.max(under);
        }
        (sum / seeds as f64, worst)
    }

    #[test]
    fn recurring_minimum_undercounts_rarely() {
        let (mean, _) = rm_undercounts(0.7, 300);
        assert!(mean < 0.001, "γ = 0.7: mean undercount share {mean}");
        for load in [1.5, 2.5, 3.0] {
            let (mean, worst) = rm_undercounts(load, 300);
            assert!(mean < 0.025 && worst < 0.12, "γ = {load}: mean {mean}, worst {worst}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn estimates_never_undercount(distinct in 50u64..400, load in 0.5f64..3.0, seed in any::<u64>()) {
            let m = counters_for(distinct, 5, load);
            for e in Estimator::ALL {
                one_sided(e, distinct, m, distinct as usize * 4, seed)?;
            }
        }

        /// MS and RM with deletes: after removing part of each key's copies,
        /// the estimate still bounds the remaining count.
        #[test]
        fn deletes_never_undercount(distinct in 50u64..300, seed in any::<u64>()) {
            for e in [Estimator::Ms, Estimator::Rm] {
                let mut f = Spectral::new(&params(e, counters_for(distinct, 5, 1.0), 16));
                let mut rng = Rng::new(seed);
                let counts: Vec<u32> = (0..distinct).map(|_| 1 + rng.below(6) as u32).collect();
                for (x, &n) in counts.iter().enumerate() {
                    f.insert(&key(x as u64), n);
                }
                for (x, &n) in counts.iter().enumerate() {
                    f.delete(&key(x as u64), n / 2).unwrap();
                }
                let under = counts.iter().enumerate().filter(|&(x, &n)| f.query(&key(x as u64)) < n - n / 2).count();
                // RM: a B_f false positive deletes from the secondary (module docs).
                let allowed = if e == Estimator::Rm { counts.len().max(60) / 20 } else { 0 };
                prop_assert!(under <= allowed, "{e} undercounts {under} of {} keys", counts.len());
            }
        }
    }

    #[test]
    fn minimal_increase_and_recurring_minimum_beat_minimum_selection() {
        // γ = 1 with skewed counts: MI and RM make fewer errors than MS.
        let n = 2000u64;
        let m = counters_for(n, 5, 1.0);
        let zipf = crate::testkit::workload::Zipf::new(n as usize, 0.5);
        let mut fs: Vec<Spectral> = Estimator::ALL.iter().map(|&e| Spectral::new(&params(e, m, 16))).collect();
        let mut exact = vec![0u32; n as usize];
        let mut rng = Rng::new(9);
        for x in 0..n {
            exact[x as usize] += 1;
            fs.iter_mut().for_each(|f| f.insert(&key(x), 1));
        }
        for _ in 0..20_000 {
            let x = zipf.sample(&mut rng);
            exact[x as usize] += 1;
            fs.iter_mut().for_each(|f| f.insert(&key(x), 1));
        }
        let errors: Vec<usize> =
            fs.iter().map(|f| (0..n).filter(|&x| f.query(&key(x)) != exact[x as usize]).count()).collect();
        assert!(errors[1] * 3 < errors[0] * 2 && errors[2] < errors[0], "ms, mi, rm errors: {errors:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// The same inserts, deletes and unions on fixed and compact counters
        /// (every estimator, crowded filters, narrow counters that saturate)
        /// give the same estimate for every key, the same refusals, and the
        /// same snapshot arrays.
        #[test]
        fn compact_counters_give_the_fixed_estimates(
            seed in any::<u64>(), bits in prop::sample::select(vec![4u8, 8, 16]), m in 64u64..1500,
        ) {
            for e in Estimator::ALL {
                let p = params(e, m, bits);
                let mut fixed = Spectral::new(&p);
                let mut compact = Spectral::new(&SpectralParams { store: CounterKind::Compact, ..p });
                let mut other = Spectral::new(&p);
                let mut other_c = Spectral::new(&SpectralParams { store: CounterKind::Compact, ..p });
                let zipf = crate::testkit::workload::Zipf::new(300, 1.1);
                let mut rng = Rng::new(seed);
                for _ in 0..3000 {
                    let x = zipf.sample(&mut rng);
                    let spread = if rng.below(10) == 0 { 40 } else { 3 };
                    let r = 1 + rng.below(spread) as u32;
                    if rng.below(5) == 0 {
                        prop_assert_eq!(fixed.delete(&key(x), r), compact.delete(&key(x), r), "{} delete", e);
                    } else {
                        fixed.insert(&key(x), r);
                        compact.insert(&key(x), r);
                    }
                    let y = zipf.sample(&mut rng);
                    other.insert(&key(y), 1);
                    other_c.insert(&key(y), 1);
                }
                for x in 0..320 {
                    prop_assert_eq!(fixed.query(&key(x)), compact.query(&key(x)), "{} key {}", e, x);
                }
                fixed.union(&other).unwrap();
                compact.union(&other_c).unwrap();
                for x in 0..320 {
                    prop_assert_eq!(fixed.query(&key(x)), compact.query(&key(x)), "{} union key {}", e, x);
                }
                let (fa, ca) = (fixed.arrays(), compact.arrays());
                prop_assert!(fa.iter().zip(&ca).all(|(a, b)| a.words() == b.words()), "{} arrays differ", e);
                prop_assert!(compact.memory_bytes() > 0);
            }
        }
    }

    /// Per sub-window, per filter, its counter arrays (as a snapshot has them).
    fn ring_arrays(w: &WindowedCounts) -> Vec<Vec<Vec<Vec<u64>>>> {
        let sub = |s: &windowed::SubWindow| -> Vec<Vec<Vec<u64>>> {
            s.filters().iter().map(|f| f.arrays().iter().map(|a| a.words().to_vec()).collect()).collect()
        };
        w.state().0.iter().map(sub).collect()
    }

    #[test]
    fn windowed_counts_on_either_store_agree_and_restore() {
        for e in Estimator::ALL {
            let p = params(e, 256, 8);
            let mut fixed = WindowedCounts::new(p, 1000, 8).unwrap();
            let mut compact =
                WindowedCounts::new(SpectralParams { store: CounterKind::Compact, ..p }, 1000, 8).unwrap();
            let zipf = crate::testkit::workload::Zipf::new(500, 1.0);
            let mut rng = Rng::new(4);
            let mut t = 0;
            for _ in 0..20_000 {
                t += rng.below(3);
                let x = zipf.sample(&mut rng);
                assert_eq!(fixed.observe(&key(x), t), compact.observe(&key(x), t), "{e} at {t}");
            }
            // The snapshot arrays are the fixed-width form for both stores:
            // each restores the other's.
            let (ring, newest) = compact.state();
            assert!(ring.iter().any(|s| s.filters().len() > 1), "{e}: some sub-window grew");
            let arrays = ring_arrays(&compact);
            let mut back = WindowedCounts::new(SpectralParams { store: CounterKind::Compact, ..p }, 1000, 8).unwrap();
            assert!(back.restore(newest, arrays.clone()));
            let mut into_fixed = WindowedCounts::new(p, 1000, 8).unwrap();
            assert!(into_fixed.restore(newest, arrays));
            for x in 0..500 {
                let want = fixed.estimate(&key(x));
                assert_eq!((back.estimate(&key(x)), into_fixed.estimate(&key(x))), (want, want), "{e} key {x}");
            }
            assert_eq!(into_fixed.false_positive(), fixed.false_positive(), "{e}: the loads are re-derived");
            let mut short = ring_arrays(&compact);
            short[3][0][0].pop();
            assert!(!back.restore(newest, short), "a misfit array is refused");
        }
    }

    #[test]
    fn windowed_counts_expire_whole_sub_windows() {
        let p = params(Estimator::Mi, 1 << 12, 8);
        let mut w = WindowedCounts::new(p, 1000, 10).unwrap();
        assert_eq!(w.sub_ms(), 100);
        for t in [0, 50, 150, 990] {
            w.observe(&key(1), t);
        }
        assert_eq!(w.estimate(&key(1)), 4);
        // At t = 1050 the window (50, 1050] still holds t = 150 and 990; the
        // ring holds sub-windows 0..=10 (0 to 1100 ms), so 0 and 50 count too.
        w.advance(1050);
        assert_eq!(w.estimate(&key(1)), 4);
        w.advance(1100);
        assert_eq!(w.estimate(&key(1)), 2, "sub-window 0 expired");
        assert_eq!(w.observe(&key(1), 1100), (2, 3));
        w.advance(5000);
        assert_eq!(w.estimate(&key(1)), 0);
        // A record older than the ring is counted in its oldest sub-window.
        assert_eq!(w.observe(&key(1), 10), (0, 1));
    }

    #[test]
    fn windowed_settings_are_validated() {
        let p = params(Estimator::Ms, 1 << 10, 8);
        let e = WindowedCounts::new(p, 60_000, 4).unwrap_err();
        assert_eq!(e.to_string(), "invalid subwindows = 4: must be 8 to 64");
        let e = WindowedCounts::new(SpectralParams { counter_bits: 5, ..p }, 60_000, 16).unwrap_err();
        assert_eq!(e.to_string(), "invalid counter_bits = 5: must be 4, 8, 16 or 32");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]
        /// Sub-windows far smaller than what they receive grow through
        /// several levels; at every record the estimate still bounds the
        /// exact window count from above (MS and MI), and the ring's
        /// false-positive bound holds while no sub-window is at the cap.
        #[test]
        fn grown_windows_bound_exact_window_counts(
            seed in any::<u64>(), est in 0usize..2, counters in 16u64..200, keys in 100u64..3000,
        ) {
            let e = Estimator::ALL[est];
            let window = 1000;
            let mut w = WindowedCounts::new(params(e, counters, 8), window, 8).unwrap();
            let mut rng = Rng::new(seed);
            let zipf = crate::testkit::workload::Zipf::new(keys as usize, 1.1);
            let mut times: HashMap<u64, Vec<u64>> = HashMap::new();
            let mut t = 0u64;
            for _ in 0..4000 {
                t += rng.below(3);
                let x = zipf.sample(&mut rng);
                let (before, after) = w.observe(&key(x), t);
                let seen = times.entry(x).or_default();
                seen.push(t);
                let exact = seen.iter().filter(|&&s| s + window > t).count() as u64;
                prop_assert!(after >= exact && before + 1 >= exact, "{e}: {before}/{after} against {exact}");
            }
            prop_assert!(w.filters() > 9, "{e}: no sub-window grew");
            let capped = w.state().0.iter().any(|s| s.filters().len() == GROWTH_LEVELS as usize);
            prop_assert!(capped || w.false_positive() <= RING_FALSE_POSITIVE, "{e}: {}", w.false_positive());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]
        /// Against exact sliding-window counts: at every record, the estimate
        /// of its key over the window is at least the exact number of its
        /// copies with time in (t - W, t]. MS and MI: the estimators whose
        /// bound is unconditional (RM's caveat is in the module docs).
        #[test]
        fn windowed_estimates_bound_exact_window_counts(
            subwindows in 8u32..=64, seed in any::<u64>(), est in 0usize..2, jitter in 0u64..200,
        ) {
            let e = Estimator::ALL[est];
            let window = 1000;
            let mut w = WindowedCounts::new(params(e, 512, 8), window, subwindows).unwrap();
            let mut rng = Rng::new(seed);
            let mut times: HashMap<u64, Vec<u64>> = HashMap::new();
            let (mut t, mut newest) = (0u64, 0u64);
            for _ in 0..3000 {
                t += rng.below(20);
                // Out-of-order times within `jitter`, as the reorder buffer
                // may release (no older than the newest time - jitter).
                let at = t.saturating_sub(rng.below(jitter + 1));
                let x = rng.below(60);
                let (before, after) = w.observe(&key(x), at);
                let seen = times.entry(x).or_default();
                seen.push(at);
                newest = newest.max(at);
                let exact = seen.iter().filter(|&&s| s + window > newest).count() as u64;
                prop_assert!(after >= exact, "{e}: after {after} < exact {exact}");
                prop_assert!(before + 1 >= exact || before >= u64::from(w.params().counter_max()));
            }
        }
    }
}
