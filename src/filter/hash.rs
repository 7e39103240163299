//! Hash once: one XXH3-128 of the key bytes with a fixed seed.
//!
//! The two 64-bit halves feed everything downstream (design invariant 2):
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
        Probe { base: 0, pos: fastrange(self.h1, m), step: 1 + fastrange(self.h2, m - 1), m }
    }

    /// The probe sequence of the blocked layout over `m` cells in blocks of
    /// `block` cells (a power of two, 2 to 256, dividing `m`): the block from
    /// the low half (multiply-shift), then `a, a+b, a+2b, … (mod block)`
    /// inside it, with `a` and an odd `b` from the top 16 bits of the high
    /// half (the slice uses its low 32). An odd step over a power of two
    /// visits `block` distinct cells before it repeats.
    #[inline]
    pub fn probe_blocked(&self, m: u64, block: u64) -> Probe {
        debug_assert!(block.is_power_of_two() && (2..=256).contains(&block) && m % block == 0);
        let mask = block - 1;
        let base = fastrange(self.h1, m / block) * block;
        Probe { base, pos: (self.h2 >> 48) & mask, step: ((self.h2 >> 56) | 1) & mask, m: block }
    }
}

/// Maps a uniform 64-bit value onto `[0, n)` with one multiplication.
#[inline]
pub fn fastrange(x: u64, n: u64) -> u64 {
    ((u128::from(x) * u128::from(n)) >> 64) as u64
}

/// The cell positions `base + (a, a+b, a+2b, … mod m)` of one key in one
/// generation (`base` = 0 and `m` = the cells in the standard layout; the
/// block's first cell and its size in the blocked layout).
#[derive(Clone, Copy, Debug)]
pub struct Probe {
    base: u64,
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
        Some((self.base + here) as usize)
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
    fn blocked_probe_stays_in_one_block_at_distinct_cells() {
        let m = 64 * 1000;
        for block in [16u64, 32, 64, 128] {
            let mut blocks = vec![0u32; (m / block) as usize];
            for key in 0..20_000u32 {
                let h = KeyHash::of(DEFAULT_SEED, &key.to_le_bytes());
                let cells: Vec<usize> = h.probe_blocked(m, block).take(16).collect();
                let first = cells[0] as u64 / block;
                assert!(cells.iter().all(|&c| c as u64 / block == first), "{cells:?}");
                let mut distinct = cells.clone();
                distinct.sort_unstable();
                distinct.dedup();
                assert_eq!(distinct.len(), 16, "block {block}: {cells:?}");
                blocks[first as usize] += 1;
            }
            // Blocks are used evenly: 20 keys each on average.
            assert!(blocks.iter().all(|&n| n < 60), "block {block}: {:?}", blocks.iter().max());
        }
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
