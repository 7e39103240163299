//! Hash once: one XXH3-128 of the key bytes with a fixed seed.
//!
//! The two 64-bit halves feed everything downstream (docs/design.md, invariant 2):
//! the slice comes from the low 32 bits of the high half, and the k cell
//! positions of a generation come from double hashing `g_i = (a + i·b) mod m`,
//! where `a` is derived from the low half and `b` from the high half. The
//! halves are reduced to `[0, m)` with a multiply-shift ("fastrange") instead
//! of a division: it is uniform for any `m` and costs one multiplication.

use twox_hash::XxHash3_128;

/// The seed every dedupd build uses unless configured otherwise. It is written
/// into every snapshot: state hashed with another seed cannot be restored.
pub const DEFAULT_SEED: u64 = 0x6465_6475_7064_0001;

/// The 128-bit hash of one key, split into its halves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyHash {
    /// Low 64 bits: the start of the probe sequence.
    pub h1: u64,
    /// High 64 bits: the probe step (top bits) and the slice (low 32 bits).
    pub h2: u64,
}

impl KeyHash {
    /// Hashes `key` with `seed`.
    #[inline]
    pub fn of(seed: u64, key: &[u8]) -> Self {
        let h = XxHash3_128::oneshot_with_seed(seed, key);
        KeyHash { h1: h as u64, h2: (h >> 64) as u64 }
    }

    /// The slice `H_S(key)` in `[0, slices)`. Uses bits that the probe
    /// sequence barely depends on, so keys of one slice still spread over the
    /// whole of that slice's cells.
    #[inline]
    pub fn slice(&self, slices: u32) -> u32 {
        ((u64::from(self.h2 as u32) * u64::from(slices)) >> 32) as u32
    }

    /// The probe sequence over `m` cells (`m >= 2`).
    #[inline]
    pub fn probe(&self, m: u64) -> Probe {
        debug_assert!(m >= 2);
        Probe { pos: fastrange(self.h1, m), step: 1 + fastrange(self.h2, m - 1), m }
    }

    /// The first `k` positions (k <= 64) of [`Self::probe`] over `m` cells,
    /// in an array (the decaying filters' bits or cells: test, then update).
    #[inline]
    pub fn first_positions(&self, m: u64, k: usize) -> [u64; 64] {
        let mut at = [0u64; 64];
        for (slot, p) in at.iter_mut().zip(self.probe(m).take(k)) {
            *slot = p as u64;
        }
        at
    }

    /// The probe sequence of the blocked layout over `m` cells (a multiple
    /// of [`BLOCK_CELLS`]): the block from the high bits of the low half
    /// (multiply-shift), then the top 8 bits of `a + i·b mod 2^64` inside it
    /// (double hashing in 64 bits, so the k positions are close to
    /// independent: an arithmetic progression mod 256 would let keys share
    /// most of their cells and raise the FPR). `a` joins the low 32 bits of
    /// the low half (the block barely depends on them) and the high 32 bits
    /// of the high half (the slice uses its low 32); `b` is `a` mixed by a
    /// multiplication, made odd.
    #[inline]
    pub fn probe_blocked(&self, m: u64) -> BlockProbe {
        debug_assert!(m % BLOCK_CELLS == 0);
        let base = fastrange(self.h1, m / BLOCK_CELLS) * BLOCK_CELLS;
        let a = (self.h1 << 32) | (self.h2 >> 32);
        BlockProbe { base, x: a, step: a.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1 }
    }
}

/// A key's cell positions in one generation, in either layout.
pub trait Positions: Iterator<Item = usize> + Copy {
    /// The first cell of the key's block in the blocked layout; `None` in
    /// the standard layout (the positions spread over all cells).
    fn block_start(&self) -> Option<usize>;
}

impl Positions for Probe {
    #[inline(always)]
    fn block_start(&self) -> Option<usize> {
        None
    }
}

impl Positions for BlockProbe {
    #[inline(always)]
    fn block_start(&self) -> Option<usize> {
        Some(self.base as usize)
    }
}

/// Cells per block in the blocked layout: 256, so that a block is big enough
/// for its FPR to stay near the standard layout's (blocks fill unevenly; with
/// k = 7 at the 1% design point the theory gives 1.31× the standard FPR at
/// 256 cells, 1.62× at 128, 2.23× at 64), and whole 64-byte lines of any
/// timer width: 2 lines of 4-bit cells, 4 of 8-bit.
pub const BLOCK_CELLS: u64 = 256;

/// The cell positions of one key in the blocked layout: `base` + the top 8
/// bits of `x, x + step, x + 2·step, …` (wrapping).
#[derive(Clone, Copy, Debug)]
pub struct BlockProbe {
    base: u64,
    x: u64,
    step: u64,
}

impl Iterator for BlockProbe {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        let here = self.x >> (64 - BLOCK_CELLS.trailing_zeros());
        self.x = self.x.wrapping_add(self.step);
        Some((self.base + here) as usize)
    }
}

/// Maps a uniform 64-bit value onto `[0, n)` with one multiplication.
#[inline]
pub fn fastrange(x: u64, n: u64) -> u64 {
    ((u128::from(x) * u128::from(n)) >> 64) as u64
}

/// The cell positions `a, a+b, a+2b, … mod m` of one key in one generation
/// of the standard layout.
#[derive(Clone, Copy, Debug)]
pub struct Probe {
    pos: u64,
    step: u64,
    m: u64,
}

impl Iterator for Probe {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        let here = self.pos;
        // Both terms are < m, so one conditional subtraction is the modulo.
        // Written with the sign of `next - m` as a mask (m < 2^63): the
        // compiler must not turn it into a branch, which would mispredict
        // about every other cell.
        let over = (here + self.step).wrapping_sub(self.m);
        self.pos = over.wrapping_add(self.m & ((over as i64 >> 63) as u64));
        Some(here as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_is_double_hashing_mod_m() {
        let h = KeyHash::of(DEFAULT_SEED, b"click-42");
        let m = 1_000_003;
        let a = fastrange(h.h1, m);
        let b = 1 + fastrange(h.h2, m - 1);
        let got: Vec<usize> = h.probe(m).take(9).collect();
        let want: Vec<usize> = (0..9u64).map(|i| ((a + i * b) % m) as usize).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn blocked_probe_stays_in_one_block_spread_evenly() {
        let m = BLOCK_CELLS * 1000;
        let mut blocks = vec![0u32; 1000];
        let mut cells = vec![0u32; BLOCK_CELLS as usize];
        let mut repeats = 0;
        for key in 0..20_000u32 {
            let h = KeyHash::of(DEFAULT_SEED, &key.to_le_bytes());
            let probe: Vec<usize> = h.probe_blocked(m).take(7).collect();
            let first = probe[0] as u64 / BLOCK_CELLS;
            assert!(probe.iter().all(|&c| c as u64 / BLOCK_CELLS == first), "{probe:?}");
            blocks[first as usize] += 1;
            for &c in &probe {
                cells[c % BLOCK_CELLS as usize] += 1;
            }
            let mut distinct = probe.clone();
            distinct.sort_unstable();
            distinct.dedup();
            repeats += probe.len() - distinct.len();
        }
        // Blocks and the cells inside them are used evenly (20 keys per
        // block, 547 probes per cell on average) …
        assert!(blocks.iter().all(|&n| (3..60).contains(&n)), "{:?}", blocks.iter().max());
        assert!(cells.iter().all(|&n| (400..700).contains(&n)), "{cells:?}");
        // … and positions repeat about as often as independent ones would
        // (7 of 256: 21/256 ≈ 8% of keys have a pair; 140 000 probes).
        assert!((1_000..2_400).contains(&repeats), "{repeats} repeated positions");
    }

    #[test]
    fn slices_are_balanced_and_stable() {
        let slices = 8;
        let mut counts = [0u32; 8];
        for i in 0..80_000u32 {
            let h = KeyHash::of(DEFAULT_SEED, &i.to_le_bytes());
            let s = h.slice(slices);
            assert_eq!(s, KeyHash::of(DEFAULT_SEED, &i.to_le_bytes()).slice(slices));
            counts[s as usize] += 1;
        }
        for c in counts {
            assert!((9_500..10_500).contains(&c), "unbalanced slices: {counts:?}");
        }
    }

    #[test]
    fn seed_changes_the_hash() {
        assert_ne!(KeyHash::of(1, b"k"), KeyHash::of(2, b"k"));
    }
}
