//! The counter vectors: fixed-width saturating counters, and the store
//! that is either those or the compact ones.

use std::borrow::Cow;
use std::fmt;

use super::compact_counters::CompactCounters;

/// m saturating counters of `bits` bits each (a width that divides 64, so a
/// counter never straddles two words).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counters {
    bits: u8,
    len: usize,
    pub(super) words: Vec<u64>,
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
    pub(super) fn load(&mut self, f: Counters) {
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
