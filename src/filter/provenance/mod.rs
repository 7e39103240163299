//! Which sources may have delivered a key: one Bloom filter per source per
//! time generation, indexed so that the all-membership query ("every filter
//! whose k bits are set for K") does not scan all N filters (Crainiceanu &
//! Lemire, *Bloofi: Multidimensional Bloom Filters*, Information Systems 2015).
//!
//! - [`bits`]: the filters themselves (same `m`, `k` and hashes for all).
//! - [`flat`]: Flat-Bloofi, bit-sliced 64 filters to a word.
//! - [`tree`]: Bloofi, a B+-tree of OR-ed filters.
//! - [`Naive`]: the scan every index must agree with.
//! - [`set`]: what a slice keeps — per time generation an index of its
//!   sources' filters, expired with the generation, capped in sources.
//!
//! Pure, like the rest of `filter`: no I/O, no clock.

pub mod bits;
pub mod flat;
pub mod set;
pub mod tree;

use std::collections::BTreeMap;

pub use bits::{Bits, positions};
pub use flat::FlatBloofi;
pub use set::{IndexChoice, Provenance, ProvenanceSpec, SourceAnswer};
pub use tree::Bloofi;

/// A set of same-shaped Bloom filters, each under a `u32` id, answering
/// which of them may hold a key.
pub trait SourceIndex {
    /// Adds filter `id` (not present yet) holding `bits`.
    fn insert(&mut self, id: u32, bits: &Bits);
    /// Sets a key's `positions` in filter `id` (present); returns how many
    /// of them were clear.
    fn add_key(&mut self, id: u32, positions: &[usize]) -> u32;
    /// Deletes filter `id`; its slot is reused. False if it was not there.
    fn remove(&mut self, id: u32) -> bool;
    /// Appends (in no particular order) the id of every filter with all of
    /// `positions` set; returns the work done: filters (tree nodes) checked,
    /// or, for Flat-Bloofi, words read.
    fn query(&self, positions: &[usize], out: &mut Vec<u32>) -> u64;
    /// A copy of filter `id`.
    fn filter(&self, id: u32) -> Option<Bits>;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn memory_bytes(&self) -> usize;
}

/// Sets `positions` in `bits`; returns how many were clear (a position
/// repeated among the k counts once).
pub(crate) fn set_counting(bits: &mut Bits, positions: &[usize]) -> u32 {
    let mut newly = 0;
    for &p in positions {
        newly += u32::from(!bits.get(p));
        bits.set(p);
    }
    newly
}

/// The naive index: every filter checked on every query (the baseline).
#[derive(Clone, Debug, Default)]
pub struct Naive {
    filters: BTreeMap<u32, Bits>,
}

impl Naive {
    pub fn new() -> Self {
        Self::default()
    }
}

impl SourceIndex for Naive {
    fn insert(&mut self, id: u32, bits: &Bits) {
        self.filters.insert(id, bits.clone());
    }

    fn add_key(&mut self, id: u32, positions: &[usize]) -> u32 {
        let f = self.filters.get_mut(&id).expect("filter present");
        set_counting(f, positions)
    }

    fn remove(&mut self, id: u32) -> bool {
        self.filters.remove(&id).is_some()
    }

    fn query(&self, positions: &[usize], out: &mut Vec<u32>) -> u64 {
        out.extend(self.filters.iter().filter(|(_, f)| f.contains(positions)).map(|(&id, _)| id));
        self.filters.len() as u64
    }

    fn filter(&self, id: u32) -> Option<Bits> {
        self.filters.get(&id).cloned()
    }

    fn len(&self) -> usize {
        self.filters.len()
    }

    fn memory_bytes(&self) -> usize {
        self.filters.values().map(|f| f.memory_bytes() + 16).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::KeyHash;
    use crate::filter::random::Rng;

    const M: usize = 1_000;
    const K: u32 = 3;

    fn pos(key: u64) -> Vec<usize> {
        let mut p = Vec::new();
        positions(&KeyHash::of(7, &key.to_le_bytes()), M, K, &mut p);
        p
    }

    fn sorted(index: &dyn SourceIndex, key: u64) -> Vec<u32> {
        let mut out = Vec::new();
        index.query(&pos(key), &mut out);
        out.sort_unstable();
        out
    }

    /// Random inserts, key additions and deletions on all four indexes:
    /// every query answers the naive scan's set, which holds every filter a
    /// key was added to (no false negatives); the tree stays a valid B+-tree.
    #[test]
    fn all_indexes_answer_the_naive_set_under_churn() {
        for (seed, order) in [(1u64, 2usize), (2, 3), (3, 5)] {
            let mut rng = Rng::new(seed);
            let mut naive = Naive::new();
            let mut flat = FlatBloofi::new(M);
            let mut trees = [Bloofi::new(M, order, true), Bloofi::new(M, order, false)];
            let mut truth: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
            let mut next_id = 0u32;
            for step in 0..3_000u64 {
                let live: Vec<u32> = truth.keys().copied().collect();
                match rng.below(10) {
                    0..=2 => {
                        // A new filter with a few keys already in it.
                        let mut bits = Bits::new(M);
                        let keys: Vec<u64> = (0..rng.below(20)).map(|_| rng.below(5_000)).collect();
                        keys.iter().flat_map(|&k| pos(k)).for_each(|p| bits.set(p));
                        naive.insert(next_id, &bits);
                        flat.insert(next_id, &bits);
                        trees.iter_mut().for_each(|t| t.insert(next_id, &bits));
                        truth.insert(next_id, keys);
                        next_id += 1;
                    }
                    3 if !live.is_empty() => {
                        let id = live[rng.below(live.len() as u64) as usize];
                        assert!(naive.remove(id) && flat.remove(id));
                        trees.iter_mut().for_each(|t| assert!(t.remove(id)));
                        truth.remove(&id);
                    }
                    _ if !live.is_empty() => {
                        let id = live[rng.below(live.len() as u64) as usize];
                        let key = rng.below(5_000);
                        let p = pos(key);
                        let newly = naive.add_key(id, &p);
                        assert_eq!(flat.add_key(id, &p), newly);
                        trees.iter_mut().for_each(|t| assert_eq!(t.add_key(id, &p), newly));
                        truth.get_mut(&id).unwrap().push(key);
                    }
                    _ => {}
                }
                if step % 50 == 0 {
                    trees.iter().for_each(Bloofi::check);
                    for key in (0..40).map(|_| rng.below(5_000)) {
                        let want = sorted(&naive, key);
                        for (id, keys) in &truth {
                            if keys.contains(&key) {
                                assert!(want.contains(id), "naive lost filter {id} for key {key}");
                            }
                        }
                        assert_eq!(sorted(&flat, key), want, "flat, key {key}");
                        for t in &trees {
                            assert_eq!(sorted(t, key), want, "tree, key {key}");
                        }
                    }
                    for &id in truth.keys() {
                        let f = naive.filter(id);
                        assert_eq!(flat.filter(id), f);
                        assert_eq!(trees[0].filter(id), f);
                    }
                }
            }
            assert_eq!((flat.len(), trees[0].len()), (truth.len(), truth.len()));
        }
    }

    /// With disjoint, sparse filters a negative query checks the root
    /// alone, and a key in one filter checks about `d·log_d N` nodes.
    #[test]
    fn bloofi_prunes() {
        let m = 20_000;
        let mut tree = Bloofi::new(m, 2, true);
        let mut p = Vec::new();
        for id in 0..500u32 {
            let mut bits = Bits::new(m);
            for key in 0..5u32 {
                positions(&KeyHash::of(7, &(id * 100 + key).to_le_bytes()), m, 7, &mut p);
                p.iter().for_each(|&b| bits.set(b));
            }
            tree.insert(id, &bits);
        }
        tree.check();
        // Between log_{2d} N and the paper's bound floor(log_d N) = 8.
        assert!((4..=8).contains(&tree.height()), "height {}", tree.height());
        let mut out = Vec::new();
        positions(&KeyHash::of(7, &(250 * 100 + 3u32).to_le_bytes()), m, 7, &mut p);
        let checked = tree.query(&p, &mut out);
        assert!(out.contains(&250));
        assert!(checked < 100, "{checked} nodes checked for one hit among 500 filters");
        // Removing every filter leaves an empty tree that answers nothing.
        for id in 0..500u32 {
            assert!(tree.remove(id));
            if id % 37 == 0 {
                tree.check();
            }
        }
        out.clear();
        assert_eq!(tree.query(&p, &mut out), 0);
        assert!(out.is_empty() && tree.is_empty());
    }

    #[test]
    fn flat_reuses_slots_and_drops_empty_groups() {
        let mut flat = FlatBloofi::new(M);
        for id in 0..130 {
            flat.insert(id, &Bits::new(M));
        }
        let full = flat.memory_bytes();
        for id in 64..128 {
            flat.remove(id);
        }
        assert!(flat.memory_bytes() < full, "the emptied group's words are freed");
        flat.insert(500, &Bits::new(M));
        let p = pos(1);
        flat.add_key(500, &p);
        let mut out = Vec::new();
        flat.query(&p, &mut out);
        assert_eq!(out, vec![500]);
        assert_eq!(flat.len(), 67);
    }
}
