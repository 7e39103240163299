//! The Dynamic Bloom Filter of Guo et al. (IEEE TKDE 2010): a list of counting Bloom filters of
//! capacity `c` each, sharing `m`, `k` and the hashes.
//!
//! dedupd's slices do not use this structure for verdicts (they use timer
//! generations, which expire); it is the paper's reference model, kept pure
//! and small so that its formulas (Eq. 3) and its operations (first-fit
//! insert, delete only when exactly one filter matches, merge of
//! under-filled filters, Def. 3 union by concatenation) can be checked, and
//! so that the deletable timer generations (`dedupd::filter::timer::generation`) can be
//! compared with it.

use dedupd::filter::DeleteRefusal;
use dedupd::filter::KeyHash;
use dedupd::filter::timer::generation::COUNTER_MAX;
use dedupd::filter::timer::sizing::bloom_fpr;

/// One counting Bloom filter of a DBF (an "SBF" in the paper).
#[derive(Clone, Debug, PartialEq)]
struct Counting {
    counts: Vec<u8>,
    /// n_r: keys inserted and not deleted.
    keys: u64,
}

/// Why two DBFs cannot be united.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot unite dynamic Bloom filters with different parameters: (m, k, c) = {left:?} and {right:?}")]
pub struct UnionMismatch {
    pub left: (u64, u32, u64),
    pub right: (u64, u32, u64),
}

/// A Dynamic Bloom Filter over counting filters.
#[derive(Clone, Debug, PartialEq)]
pub struct DynamicBloom {
    m: u64,
    k: u32,
    capacity: u64,
    filters: Vec<Counting>,
}

impl DynamicBloom {
    /// An empty DBF of one filter: `m` counters, `k` hashes, `capacity` keys per filter.
    pub fn new(m: u64, k: u32, capacity: u64) -> Self {
        assert!(m >= 2 && k >= 1 && capacity >= 1, "a DBF needs m >= 2, k >= 1, c >= 1");
        DynamicBloom { m, k, capacity, filters: vec![Counting { counts: vec![0; m as usize], keys: 0 }] }
    }

    /// s: the number of filters.
    pub fn filters(&self) -> usize {
        self.filters.len()
    }

    /// Keys held (inserted and not deleted).
    pub fn keys(&self) -> u64 {
        self.filters.iter().map(|f| f.keys).sum()
    }

    fn positions(&self, hash: &KeyHash) -> impl Iterator<Item = usize> {
        hash.probe(self.m).take(self.k as usize)
    }

    fn holds(&self, f: &Counting, hash: &KeyHash) -> bool {
        self.positions(hash).all(|i| f.counts[i] != 0)
    }

    /// Insert (first fit): into the first filter with fewer than `c` keys,
    /// or a new one. No membership test (the paper's plain insert).
    pub fn insert(&mut self, hash: &KeyHash) {
        let at = match self.filters.iter().position(|f| f.keys < self.capacity) {
            Some(at) => at,
            None => {
                self.filters.push(Counting { counts: vec![0; self.m as usize], keys: 0 });
                self.filters.len() - 1
            }
        };
        let positions: Vec<usize> = self.positions(hash).collect();
        let f = &mut self.filters[at];
        for i in positions {
            f.counts[i] = f.counts[i].saturating_add(1);
        }
        f.keys += 1;
    }

    /// Whether some filter holds all k counters of the key non-zero.
    pub fn contains(&self, hash: &KeyHash) -> bool {
        self.filters.iter().any(|f| self.holds(f, hash))
    }

    /// Delete: only when exactly one filter holds the key; then its
    /// counters are decremented (saturated ones are left) and under-filled
    /// filters are merged.
    pub fn delete(&mut self, hash: &KeyHash) -> Result<(), DeleteRefusal> {
        let mut hits = self.filters.iter().enumerate().filter(|(_, f)| self.holds(f, hash)).map(|(i, _)| i);
        let (Some(at), None) = (hits.next(), hits.next()) else {
            return Err(if self.contains(hash) { DeleteRefusal::Ambiguous } else { DeleteRefusal::Absent });
        };
        let positions: Vec<usize> = self.positions(hash).collect();
        let f = &mut self.filters[at];
        for i in positions {
            if f.counts[i] != COUNTER_MAX {
                f.counts[i] -= 1;
            }
        }
        f.keys -= 1;
        self.merge_underfilled();
        Ok(())
    }

    /// The paper's Merge(): a filter j with room takes in the first later
    /// filter l whose keys fit with its own (`n_j + n_l < c`), by counter
    /// addition (saturating), and l is dropped.
    fn merge_underfilled(&mut self) {
        for j in 0..self.filters.len() {
            let nj = self.filters[j].keys;
            if nj >= self.capacity {
                continue;
            }
            if let Some(l) = (j + 1..self.filters.len()).find(|&l| nj + self.filters[l].keys < self.capacity) {
                let gone = self.filters.remove(l);
                let f = &mut self.filters[j];
                for (c, g) in f.counts.iter_mut().zip(gone.counts) {
                    *c = c.saturating_add(g);
                }
                f.keys += gone.keys;
                return;
            }
        }
    }

    /// Def. 3: the union of two DBFs with the same parameters is the
    /// concatenation of their filter lists (not an OR: each filter keeps
    /// its own count, so the union stays deletable).
    pub fn union(mut self, other: DynamicBloom) -> Result<DynamicBloom, UnionMismatch> {
        let (a, b) = ((self.m, self.k, self.capacity), (other.m, other.k, other.capacity));
        if a != b {
            return Err(UnionMismatch { left: a, right: b });
        }
        self.filters.extend(other.filters);
        Ok(self)
    }
}

/// `f_BF(m, k, n) = (1 - e^(-kn/m))^k`: the false-positive rate of one
/// Bloom filter of `m` cells and `k` hashes holding `n` keys.
pub fn f_bf(m: u64, k: u32, n: u64) -> f64 {
    bloom_fpr(m as f64, f64::from(k), n as f64)
}

/// Eq. 3: the false-positive rate of a DBF of capacity `c` per filter
/// holding `n` keys: `1 - (1 - f_BF(m,k,c))^⌊n/c⌋ · (1 - f_BF(m,k,n - c⌊n/c⌋))`.
pub fn f_dbf(m: u64, k: u32, c: u64, n: u64) -> f64 {
    let full = n / c;
    let rest = n - c * full;
    1.0 - (1.0 - f_bf(m, k, c)).powi(full as i32) * (1.0 - f_bf(m, k, rest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dedupd::filter::random::Rng;

    const M: u64 = 1280;
    const K: u32 = 7;
    const C: u64 = 133;

    fn key(rng: &mut Rng) -> KeyHash {
        KeyHash::of(0x5eed, &rng.key16())
    }

    #[test]
    fn the_papers_numbers() {
        assert!((f_bf(M, K, C) - 0.00985).abs() < 0.00001, "f_BF(1280,7,133) = {}", f_bf(M, K, C));
        for (n, expected) in [(2 * C, 0.0196), (5 * C, 0.0483), (10 * C, 0.0942)] {
            let f = f_dbf(M, K, C, n);
            assert!((f - expected).abs() < 0.0001, "f_DBF(n = {n}) = {f}, the note says {expected}");
        }
        // At 10c the DBF is about 10× one filter at capacity, a plain BF about 100×.
        let ratio = f_dbf(M, K, C, 10 * C) / f_bf(M, K, C);
        assert!((9.0..10.0).contains(&ratio), "{ratio}");
        assert!(f_bf(M, K, 10 * C) / f_bf(M, K, C) > 100.0);
    }

    /// Measured over many independent DBFs (the spread of one filter's FPR
    /// is large at these sizes): within 20% of Eq. 3.
    #[test]
    fn measured_fpr_follows_eq_3() {
        let mut rng = Rng::new(16);
        for (n, expected) in [(2 * C, 0.0196), (5 * C, 0.0483), (10 * C, 0.0942)] {
            let (trials, queries) = (200, 2_000);
            let mut false_positives = 0u64;
            for _ in 0..trials {
                let mut dbf = DynamicBloom::new(M, K, C);
                for _ in 0..n {
                    dbf.insert(&key(&mut rng));
                }
                assert_eq!(dbf.filters() as u64, n.div_ceil(C));
                // Fresh random keys: members with probability ~2^-128.
                false_positives += (0..queries).filter(|_| dbf.contains(&key(&mut rng))).count() as u64;
            }
            let measured = false_positives as f64 / (trials * queries) as f64;
            let error = (measured - expected).abs() / expected;
            assert!(error < 0.2, "n = {n}: measured {measured:.5}, Eq. 3 gives {expected} ({:.0}% off)", error * 100.0);
        }
    }

    #[test]
    fn delete_forgets_one_key_and_refuses_ambiguity() {
        let mut rng = Rng::new(7);
        let mut dbf = DynamicBloom::new(M, K, C);
        let keys: Vec<KeyHash> = (0..3 * C).map(|_| key(&mut rng)).collect();
        for k in &keys {
            dbf.insert(k);
        }
        assert_eq!(dbf.filters(), 3);
        let mut deleted = 0;
        for k in &keys[..C as usize] {
            match dbf.delete(k) {
                Ok(()) => deleted += 1,
                Err(why) => assert_eq!(why, DeleteRefusal::Ambiguous),
            }
        }
        // Few keys of the first filter also match another one (f2(n) of the paper).
        assert!(deleted >= C as usize * 9 / 10, "{deleted} of {C} deleted");
        // No false negatives for the keys not deleted.
        assert!(keys[C as usize..].iter().all(|k| dbf.contains(k)));
        // The other filters are full: nothing fits into the emptied first one yet.
        assert_eq!(dbf.filters(), 3);
        // Once the last one is half empty, the first takes it in.
        let upper = &keys[2 * C as usize..];
        for k in &upper[..C as usize / 2 + 4] {
            if dbf.delete(k).is_ok() {
                deleted += 1;
            }
        }
        assert_eq!(dbf.filters(), 2);
        assert_eq!(dbf.keys(), 3 * C - deleted as u64);
        assert!(keys[C as usize..2 * C as usize].iter().chain(&upper[C as usize / 2 + 4..]).all(|k| dbf.contains(k)));
        let absent = key(&mut rng);
        if !dbf.contains(&absent) {
            assert_eq!(dbf.delete(&absent), Err(DeleteRefusal::Absent));
        }
        // A key inserted twice into different filters is ambiguous.
        let mut two = DynamicBloom::new(M, K, 1);
        two.insert(&absent);
        two.insert(&absent);
        assert_eq!(two.delete(&absent), Err(DeleteRefusal::Ambiguous));
        assert!(two.contains(&absent));
    }

    #[test]
    fn union_is_concatenation() {
        let mut rng = Rng::new(3);
        let (mut a, mut b) = (DynamicBloom::new(M, K, C), DynamicBloom::new(M, K, C));
        let (ka, kb): (Vec<_>, Vec<_>) = (0..C).map(|_| (key(&mut rng), key(&mut rng))).unzip();
        ka.iter().for_each(|k| a.insert(k));
        kb.iter().for_each(|k| b.insert(k));
        let u = a.clone().union(b).unwrap();
        assert_eq!(u.filters(), 2);
        assert!(ka.iter().chain(&kb).all(|k| u.contains(k)));
        assert_eq!(u.keys(), 2 * C);
        let other = DynamicBloom::new(M, K, C + 1);
        assert!(a.union(other).is_err());
    }
}
