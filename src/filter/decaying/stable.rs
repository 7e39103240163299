//! The Stable Bloom Filter (SBF; Deng and Rafiei, SIGMOD 2006), the baseline
//! the RSBF paper compares with.
//!
//! m cells of d bits, `Max = 2^d - 1`, K hashes. Per element: probe its K
//! cells (DUPLICATE if all are non-zero), then decrement P cells chosen
//! uniformly at random by one (not below 0), then set its K cells to Max.
//! The fraction of zero cells converges to the stable point
//! `(1/(1 + 1/(P(1/K - 1/m))))^Max`, so the stable FPR is
//! `(1 - that)^K`; P is chosen so that this equals the target FPR:
//! `P = 1/[((1/(1 - FPR_t^(1/K)))^(1/Max) - 1)(1/K - 1/m)]`.
//!
//! Choices the notes leave open, made here:
//! - P is rarely a whole number: each element decrements `⌊P⌋` cells, plus
//!   one more with probability `P - ⌊P⌋`, so the mean is P exactly and the
//!   stable point is the formula's.
//! - K (unless given): the K in 1..=16 that minimises an estimate of the FNR
//!   at equal stable FPR — for a key that comes back after m/10 elements, the
//!   chance that one of its K cells was decremented Max times meanwhile,
//!   `1 - (1 - Pr[Poisson(δP/m) >= Max])^K` with δ = m/10 (ignoring re-sets
//!   by other keys, which only help). More hashes need a smaller P but expose
//!   more cells; with d = 2 and FPR_t = 0.1 this picks K = 2. The ranking is
//!   the same for gaps up to about m/5; beyond, every K forgets.
//! - d defaults to 2 bits (Max = 3), one of the settings Deng and Rafiei use.
//! - Cells are packed ⌊64/d⌋ to a 64-bit word (never straddling words), so a
//!   memory budget of M bits gives `⌊M/64⌋·⌊64/d⌋` cells.
//!
//! The random decrements come from one seeded [`Rng`] whose state is part
//! of the filter and its snapshot.

use crate::filter::hash::KeyHash;
use crate::filter::param_error::ParamError;
use crate::filter::random::Rng;

/// Default cell width d (Max = 3).
pub const DEFAULT_CELL_BITS: u8 = 2;

/// Resolved parameters of one SBF.
#[derive(Clone, Debug, PartialEq)]
pub struct StableParams {
    /// d: bits per cell (1 to 8).
    pub cell_bits: u8,
    /// m.
    pub cells: u64,
    /// K.
    pub hashes: u32,
    /// P: mean decrements per element.
    pub decrements: f64,
    pub hash_seed: u64,
    pub seed: u64,
}

impl StableParams {
    pub fn resolve(
        memory_bits: u64,
        fpr: f64,
        cell_bits: u8,
        hashes: Option<u32>,
        hash_seed: u64,
        seed: u64,
    ) -> Result<Self, ParamError> {
        if !(1..=8).contains(&cell_bits) {
            return Err(ParamError::new("cell_bits", cell_bits, "must be between 1 and 8 for stable"));
        }
        if !(fpr > 0.0 && fpr < 1.0) {
            return Err(ParamError::new("fpr", fpr, "must be greater than 0 and less than 1"));
        }
        let cells = (memory_bits / 64) * u64::from(64 / cell_bits);
        if cells < 64 {
            return Err(ParamError::new(
                "memory",
                format!("{memory_bits} bits"),
                format!("must hold at least 64 cells of {cell_bits} bits (whole 64-bit words) for stable"),
            ));
        }
        let max = max_value(cell_bits);
        let k = match hashes {
            Some(k) => k,
            None => (1..=16)
                .min_by(|&a, &b| fnr_estimate(a, max, fpr, cells).total_cmp(&fnr_estimate(b, max, fpr, cells)))
                .unwrap_or(1),
        };
        if !(1..=64).contains(&k) || u64::from(k) >= cells {
            return Err(ParamError::new("hashes", k, "must be between 1 and 64 (and fewer than the cells) for stable"));
        }
        let decrements = decrements_for(fpr, k, max, cells);
        Ok(StableParams { cell_bits, cells, hashes: k, decrements, hash_seed, seed })
    }

    pub fn max(&self) -> u8 {
        max_value(self.cell_bits)
    }

    /// Bytes the cells take (whole words).
    pub fn memory_bytes(&self) -> u64 {
        self.cells.div_ceil(u64::from(64 / self.cell_bits)) * 8
    }

    /// The stable point's fraction of non-zero cells.
    pub fn stable_nonzero_fraction(&self) -> f64 {
        let (p, k, m) = (self.decrements, f64::from(self.hashes), self.cells as f64);
        1.0 - (1.0 / (1.0 + 1.0 / (p * (1.0 / k - 1.0 / m)))).powi(i32::from(self.max()))
    }

    /// The stable FPR: `stable_nonzero_fraction^K`.
    pub fn stable_fpr(&self) -> f64 {
        self.stable_nonzero_fraction().powi(self.hashes as i32)
    }
}

fn max_value(cell_bits: u8) -> u8 {
    ((1u16 << cell_bits) - 1) as u8
}

/// P for a stable FPR of `fpr`.
pub fn decrements_for(fpr: f64, k: u32, max: u8, cells: u64) -> f64 {
    let k = f64::from(k);
    let inner = (1.0 / (1.0 - fpr.powf(1.0 / k))).powf(1.0 / f64::from(max)) - 1.0;
    1.0 / (inner * (1.0 / k - 1.0 / cells as f64))
}

/// The FNR estimate K is chosen by (module docs).
fn fnr_estimate(k: u32, max: u8, fpr: f64, cells: u64) -> f64 {
    let p = decrements_for(fpr, k, max, cells);
    let lambda = p / 10.0; // δ·P/m with δ = m/10
    let mut below = 0.0;
    let mut term = (-lambda).exp();
    for j in 0..u32::from(max) {
        below += term;
        term *= lambda / f64::from(j + 1);
    }
    1.0 - below.min(1.0).powi(k as i32)
}

/// What the SBF did, over its whole life.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StableCounters {
    pub events: u64,
    pub duplicates: u64,
}

/// One Stable Bloom Filter.
#[derive(Clone, Debug, PartialEq)]
pub struct StableFilter {
    params: StableParams,
    per_word: u64,
    mask: u64,
    words: Vec<u64>,
    /// Non-zero cells (kept exactly; rebuilt from the cells on restore).
    nonzero: u64,
    rng: Rng,
    counters: StableCounters,
}

impl StableFilter {
    pub fn new(params: StableParams) -> Self {
        let per_word = u64::from(64 / params.cell_bits);
        StableFilter {
            words: vec![0; params.cells.div_ceil(per_word) as usize],
            per_word,
            mask: u64::from(params.max()),
            nonzero: 0,
            rng: Rng::new(params.seed),
            counters: StableCounters::default(),
            params,
        }
    }

    pub fn params(&self) -> &StableParams {
        &self.params
    }

    pub fn counters(&self) -> &StableCounters {
        &self.counters
    }

    /// The element's K cells (the first K entries).
    #[inline]
    fn positions(&self, hash: &KeyHash) -> [u64; 64] {
        hash.first_positions(self.params.cells, self.params.hashes as usize)
    }

    /// The verdict [`Self::observe`] would give now, without changing
    /// anything (the daemon's `/v1/lookup`).
    pub fn contains(&self, hash: &KeyHash) -> bool {
        let at = self.positions(hash);
        at[..self.params.hashes as usize].iter().all(|&c| self.get(c) != 0)
    }

    /// Test, decrement P random cells, set the K cells to Max; true for DUPLICATE.
    pub fn observe(&mut self, hash: &KeyHash) -> bool {
        let k = self.params.hashes as usize;
        let at = self.positions(hash);
        let duplicate = at[..k].iter().all(|&c| self.get(c) != 0);
        self.counters.events += 1;
        self.counters.duplicates += u64::from(duplicate);

        let whole = self.params.decrements.floor();
        let extra = self.rng.next_f64() < self.params.decrements - whole;
        for _ in 0..whole as u64 + u64::from(extra) {
            let c = self.rng.below(self.params.cells);
            let v = self.get(c);
            if v > 0 {
                self.put(c, v - 1);
            }
        }
        let max = self.mask;
        for &c in &at[..k] {
            self.put(c, max);
        }
        duplicate
    }

    /// Fraction of non-zero cells.
    pub fn nonzero_fraction(&self) -> f64 {
        self.nonzero as f64 / self.params.cells as f64
    }

    #[inline]
    fn place(&self, c: u64) -> (usize, u32) {
        ((c / self.per_word) as usize, ((c % self.per_word) * u64::from(self.params.cell_bits)) as u32)
    }

    #[inline]
    fn get(&self, c: u64) -> u64 {
        let (w, shift) = self.place(c);
        (self.words[w] >> shift) & self.mask
    }

    #[inline]
    fn put(&mut self, c: u64, v: u64) {
        let (w, shift) = self.place(c);
        let old = (self.words[w] >> shift) & self.mask;
        self.nonzero = self.nonzero + u64::from(v != 0) - u64::from(old != 0);
        self.words[w] = (self.words[w] & !(self.mask << shift)) | (v << shift);
    }

    /// The state a snapshot stores: PRNG state, counters and the cell words.
    pub(crate) fn state(&self) -> (u64, &StableCounters, &[u64]) {
        (self.rng.state(), &self.counters, &self.words)
    }

    /// Rebuilds a filter from [`Self::state`]; `None` if the words do not
    /// fit the parameters (wrong count, or bits set outside the cells).
    pub(crate) fn from_state(
        params: StableParams,
        rng: u64,
        counters: StableCounters,
        words: Vec<u64>,
    ) -> Option<Self> {
        let mut f = StableFilter::new(params);
        if words.len() != f.words.len() {
            return None;
        }
        let used = f.per_word * u64::from(f.params.cell_bits);
        if used < 64 && words.iter().any(|w| w >> used != 0) {
            return None;
        }
        if f.params.cells % f.per_word != 0 {
            return None; // resolve() always gives whole words of cells
        }
        f.words = words;
        f.nonzero = (0..f.params.cells).filter(|&c| f.get(c) != 0).count() as u64;
        f.rng = Rng::new(rng);
        f.counters = counters;
        Some(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::hash::DEFAULT_SEED;

    fn key(id: u64) -> KeyHash {
        KeyHash::of(DEFAULT_SEED, &id.to_le_bytes())
    }

    #[test]
    fn parameters_meet_the_stable_point_formula() {
        let p = StableParams::resolve(1 << 20, 0.1, 2, None, DEFAULT_SEED, 1).unwrap();
        assert_eq!((p.cells, p.hashes, p.max()), (1 << 19, 2, 3));
        assert!((p.stable_fpr() - 0.1).abs() < 1e-9, "{}", p.stable_fpr());
        assert!(p.decrements > 1.0, "{}", p.decrements);
        let p3 = StableParams::resolve(64 * 100, 0.01, 3, Some(4), DEFAULT_SEED, 1).unwrap();
        assert_eq!(p3.cells, 100 * 21);
        assert!((p3.stable_fpr() - 0.01).abs() < 1e-9);
        let e = StableParams::resolve(1 << 20, 0.1, 9, None, 1, 1).unwrap_err();
        assert!(e.to_string().contains("cell_bits = 9"), "{e}");
        assert!(StableParams::resolve(64, 0.1, 2, None, 1, 1).is_err());
    }

    /// On a long stream of fresh keys the non-zero fraction converges to
    /// the stable point, and so does the FPR.
    #[test]
    fn converges_to_the_stable_point() {
        let p = StableParams::resolve(64 * 256, 0.1, 2, None, DEFAULT_SEED, 5).unwrap();
        let want = p.stable_nonzero_fraction();
        let mut f = StableFilter::new(p);
        let mut false_dups = 0;
        for id in 0..400_000u64 {
            let dup = f.observe(&key(id));
            if id >= 200_000 {
                false_dups += u64::from(dup);
            }
        }
        let got = f.nonzero_fraction();
        assert!((got - want).abs() < 0.03, "non-zero fraction {got}, stable point {want}");
        let fpr = false_dups as f64 / 200_000.0;
        assert!((0.085..0.115).contains(&fpr), "FPR {fpr}");
        let recount = (0..f.params.cells).filter(|&c| f.get(c) != 0).count() as u64;
        assert_eq!(recount, f.nonzero);
    }

    #[test]
    fn a_key_just_seen_is_a_duplicate() {
        let mut f = StableFilter::new(StableParams::resolve(1 << 16, 0.1, 2, None, DEFAULT_SEED, 5).unwrap());
        for id in 0..10_000 {
            f.observe(&key(id));
            assert!(f.observe(&key(id)));
        }
    }
}
