//! A small seeded PRNG (SplitMix64) whose whole state is one `u64`: the
//! decaying filters draw their random resets and decrements from it and
//! store that word in their snapshots, so a restored filter makes the same
//! draws as one that never stopped. The workloads of the benchmarks use it
//! too. Not for anything secret.

use super::hash::fastrange;

/// SplitMix64 (Steele, Lea and Flood): one addition and two multiply-xorshift
/// rounds per draw, passes BigCrush, and any `u64` is a valid state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The whole state (for snapshots): `Rng::new(r.state())` draws what `r` would.
    pub fn state(&self) -> u64 {
        self.0
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A random 16-byte key (the benchmarks' keys).
    pub fn key16(&mut self) -> [u8; 16] {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&self.next_u64().to_le_bytes());
        k[8..].copy_from_slice(&self.next_u64().to_le_bytes());
        k
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n) (multiply-shift: bias below 2^-64·n, irrelevant here).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        fastrange(self.next_u64(), n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_resumes_the_sequence() {
        let mut a = Rng::new(42);
        a.next_u64();
        let mut b = Rng::new(a.state());
        assert_eq!(
            (0..10).map(|_| a.next_u64()).collect::<Vec<_>>(),
            (0..10).map(|_| b.next_u64()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn below_is_uniform_enough() {
        let mut r = Rng::new(7);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[r.below(10) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (9_500..10_500).contains(&c)), "{counts:?}");
    }
}
