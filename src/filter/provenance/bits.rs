//! A plain Bloom filter of `m` bits: the per-source filter every index holds.
//! All filters of one index share `m`, `k` and the hash seed (Bloofi §3), so
//! a key's k bit positions are computed once per query, not once per filter.

use crate::filter::KeyHash;

/// The k bit positions of a key in filters of `m` bits: the same double
/// hashing as the timer filters (docs/design.md, invariant 2), so one XXH3-128 per
/// key serves the dedup filter and the provenance index alike.
pub fn positions(hash: &KeyHash, m: usize, k: u32, out: &mut Vec<usize>) {
    out.clear();
    out.extend(hash.probe(m as u64).take(k as usize));
}

/// Most hash functions a provenance filter may use (the settings allow 30).
pub const MAX_HASHES: usize = 32;

/// [`positions`] on the stack, for the per-record path: the positions are
/// the first `k` of the array.
pub fn positions_array(hash: &KeyHash, m: usize, k: u32) -> [usize; MAX_HASHES] {
    let mut out = [0; MAX_HASHES];
    for (slot, p) in out.iter_mut().zip(hash.probe(m as u64).take(k as usize)) {
        *slot = p;
    }
    out
}

/// `m` bits in 64-bit words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bits {
    words: Vec<u64>,
    m: usize,
}

impl Bits {
    pub fn new(m: usize) -> Self {
        Bits { words: vec![0; m.div_ceil(64)], m }
    }

    /// From raw words (snapshot decoding); bits past `m` must be clear.
    pub fn from_words(words: Vec<u64>, m: usize) -> Option<Self> {
        let tail_ok = m % 64 == 0 || words.last().is_none_or(|w| w >> (m % 64) == 0);
        (words.len() == m.div_ceil(64) && tail_ok).then_some(Bits { words, m })
    }

    pub fn m(&self) -> usize {
        self.m
    }

    pub fn words(&self) -> &[u64] {
        &self.words
    }

    #[inline]
    pub fn set(&mut self, bit: usize) {
        self.words[bit / 64] |= 1 << (bit % 64);
    }

    #[inline]
    pub fn get(&self, bit: usize) -> bool {
        self.words[bit / 64] >> (bit % 64) & 1 == 1
    }

    /// Whether every one of `positions` is set (the filter may hold the key).
    #[inline]
    pub fn contains(&self, positions: &[usize]) -> bool {
        positions.iter().all(|&p| self.get(p))
    }

    pub fn or_with(&mut self, other: &Bits) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
    }

    pub fn clear(&mut self) {
        self.words.iter_mut().for_each(|w| *w = 0);
    }

    pub fn ones(&self) -> u64 {
        self.words.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    /// Every bit set: the node can answer no query negatively (the
    /// saturation rule's test).
    pub fn all_ones(&self) -> bool {
        self.ones() == self.m as u64
    }

    /// `|A xor B|`: the distance Bloofi places new filters by.
    pub fn hamming(&self, other: &Bits) -> u64 {
        self.words.iter().zip(&other.words).map(|(a, b)| u64::from((a ^ b).count_ones())).sum()
    }

    /// The false-positive probability of a filter this full: `(ones/m)^k`.
    pub fn fpr(&self, k: u32) -> f64 {
        (self.ones() as f64 / self.m as f64).powi(k as i32)
    }

    pub fn memory_bytes(&self) -> usize {
        self.words.len() * 8
    }
}
