//! The estimators (MS, MI, RM) and the spectral filter that runs one.

use std::borrow::Cow;
use std::fmt;

use super::sbf::{FLAGS_SALT, SECONDARY_SALT, same};
use super::{CounterKind, Counters, KeyHash, MAX_HASHES, ParamError, Sbf, Slots, SpectralError, Store, salted};

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
