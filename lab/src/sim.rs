//! A pure, seeded simulator of the paper's distributed Bloom filters
//! (one-is-enough §3 and §6), for `dedupd-lab design-space`: plain bit
//! filters (no timers, no Kafka), sliced horizontally (Def. 1) or vertically
//! (Def. 2), with failed slices, pipelined and parallel lookups, the x-of-k
//! fault-tolerance heuristic, and Bloom trees (dense and sparse, top-down
//! testing). The engine's slicing is horizontal only; this is where the rest
//! of the design space is measured before anything of it is built.
//!
//! Keys are hashed the engine's way ([`KeyHash`], double hashing), so the
//! positions, and their small departures from independent hashes, are the
//! ones the daemon would have.

use dedupd::filter::KeyHash;
use dedupd::testkit::workload::Rng;

/// A plain bit array.
#[derive(Clone, Debug)]
pub struct Bits {
    words: Vec<u64>,
}

impl Bits {
    pub fn new(len: u64) -> Self {
        Bits { words: vec![0; len.div_ceil(64) as usize] }
    }

    #[inline]
    pub fn get(&self, i: u64) -> bool {
        self.words[(i / 64) as usize] >> (i % 64) & 1 == 1
    }

    #[inline]
    pub fn set(&mut self, i: u64) {
        self.words[(i / 64) as usize] |= 1 << (i % 64);
    }

    pub fn ones(&self) -> u64 {
        self.words.iter().map(|w| u64::from(w.count_ones())).sum()
    }
}

/// A key's k cell positions over `m` cells (the engine's double hashing).
#[inline]
pub fn positions(h: &KeyHash, m: u64, k: u32) -> impl Iterator<Item = u64> {
    h.probe(m.max(2)).take(k as usize).map(|p| p as u64)
}

/// The cells for `n` keys at false-positive rate `p` with k hashes:
/// `m = ⌈-k·n / ln(1 - p^(1/k))⌉` (Eq. 2 solved for m; the paper presets
/// its filters this way, "at the optimal size given an estimation of the
/// input size").
pub fn cells_for(n: u64, p: f64, k: u32) -> u64 {
    let k = f64::from(k);
    ((-k * n.max(1) as f64 / (1.0 - p.powf(1.0 / k)).ln()).ceil() as u64).max(2)
}

/// A horizontal Bloom filter (Def. 1): S filters of ⌈m/S⌉ cells; a key
/// lives in slice `H_S(key)` only.
#[derive(Clone, Debug)]
pub struct Horizontal {
    slices: Vec<Bits>,
    cells: u64,
    k: u32,
}

impl Horizontal {
    pub fn new(m: u64, slices: u32, k: u32) -> Self {
        let cells = m.div_ceil(u64::from(slices)).max(2);
        Horizontal { slices: (0..slices).map(|_| Bits::new(cells)).collect(), cells, k }
    }

    pub fn slices(&self) -> u32 {
        self.slices.len() as u32
    }

    /// Cells over all slices (⌈m/S⌉·S).
    pub fn cells(&self) -> u64 {
        self.cells * self.slices.len() as u64
    }

    pub fn slice_of(&self, h: &KeyHash) -> usize {
        h.slice(self.slices()) as usize
    }

    pub fn contains(&self, h: &KeyHash) -> bool {
        let s = &self.slices[self.slice_of(h)];
        positions(h, self.cells, self.k).all(|p| s.get(p))
    }

    /// First-test-then-set; true when the key was judged a duplicate.
    pub fn observe(&mut self, h: &KeyHash) -> bool {
        if self.contains(h) {
            return true;
        }
        let (cells, k, at) = (self.cells, self.k, self.slice_of(h));
        let s = &mut self.slices[at];
        positions(h, cells, k).for_each(|p| s.set(p));
        false
    }

    /// The lookup when the slices marked in `failed` are down: a key of a
    /// failed slice is a duplicate if `failed_is_duplicate` (Eq. 5), else
    /// distinct (the symmetric choice: false negatives instead).
    pub fn contains_with_failures(&self, h: &KeyHash, failed: &[bool], failed_is_duplicate: bool) -> bool {
        if failed[self.slice_of(h)] { failed_is_duplicate } else { self.contains(h) }
    }
}

/// A vertical Bloom filter (Def. 2): one filter of m cells, slice i owning
/// cells `[i·m/S, (i+1)·m/S)`. A key's k cells may live on k slices.
#[derive(Clone, Debug)]
pub struct Vertical {
    bits: Bits,
    m: u64,
    k: u32,
    slices: u32,
}

impl Vertical {
    pub fn new(m: u64, slices: u32, k: u32) -> Self {
        let m = m.max(2);
        Vertical { bits: Bits::new(m), m, k, slices }
    }

    pub fn cells(&self) -> u64 {
        self.m
    }

    /// The slice that owns cell `p`.
    #[inline]
    pub fn owner(&self, p: u64) -> u32 {
        ((u128::from(p) * u128::from(self.slices)) / u128::from(self.m)) as u32
    }

    /// The key's owners in the order of its first cell on each (the order a
    /// pipeline visits them), each once.
    pub fn owners(&self, h: &KeyHash) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.k as usize);
        for p in positions(h, self.m, self.k) {
            let o = self.owner(p);
            if !out.contains(&o) {
                out.push(o);
            }
        }
        out
    }

    pub fn contains(&self, h: &KeyHash) -> bool {
        positions(h, self.m, self.k).all(|p| self.bits.get(p))
    }

    /// First-test-then-set; true when the key was judged a duplicate.
    pub fn observe(&mut self, h: &KeyHash) -> bool {
        if self.contains(h) {
            return true;
        }
        for p in positions(h, self.m, self.k) {
            self.bits.set(p);
        }
        false
    }

    /// Messages of a pipelined lookup: the owners are visited in turn, each
    /// testing all of the key's cells it holds, until one finds an unset
    /// cell (the key is distinct) or the last one answers (§3.1,
    /// "Parallelism & Pipelining"). A parallel lookup sends
    /// `owners(h).len()` messages.
    pub fn pipelined_messages(&self, h: &KeyHash) -> u32 {
        let owners = self.owners(h);
        for (i, &o) in owners.iter().enumerate() {
            let unset = positions(h, self.m, self.k).any(|p| self.owner(p) == o && !self.bits.get(p));
            if unset {
                return i as u32 + 1;
            }
        }
        owners.len() as u32
    }

    /// The lookup when the slices marked in `failed` are down: distinct if
    /// any live cell is unset (a live unset cell proves it); otherwise a
    /// duplicate iff at least `x` of the k cells are live. `x = 0` treats a
    /// failed cell as set (Eq. 6); `x = 1..k-1` is the vertical
    /// fault-tolerance heuristic; `x = k` treats every key with a failed
    /// cell as distinct (the symmetric choice).
    pub fn contains_with_failures(&self, h: &KeyHash, failed: &[bool], x: u32) -> bool {
        let mut live = 0;
        for p in positions(h, self.m, self.k) {
            if failed[self.owner(p) as usize] {
                continue;
            }
            if !self.bits.get(p) {
                return false;
            }
            live += 1;
        }
        live >= x
    }
}

/// Jain's fairness index `(Σx)² / (S·Σx²)`: 1 when every slice gets the
/// same load, 1/S when one slice gets all of it.
pub fn fairness(loads: &[u64]) -> f64 {
    let sum: f64 = loads.iter().map(|&x| x as f64).sum();
    let squares: f64 = loads.iter().map(|&x| (x as f64).powi(2)).sum();
    if squares == 0.0 { 1.0 } else { sum * sum / (loads.len() as f64 * squares) }
}

/// The busiest slice's share of the load (optimal: 1/S).
pub fn max_share(loads: &[u64]) -> f64 {
    let sum: u64 = loads.iter().sum();
    if sum == 0 { 0.0 } else { *loads.iter().max().unwrap_or(&0) as f64 / sum as f64 }
}

/// `f` distinct slices of `s` chosen at random, as a mask.
pub fn fail_slices(rng: &mut Rng, s: u32, f: u32) -> Vec<bool> {
    let mut order: Vec<u32> = (0..s).collect();
    // Partial Fisher-Yates: the first f of a random permutation.
    for i in 0..f.min(s) as usize {
        let j = i + rng.below((s as usize - i) as u64) as usize;
        order.swap(i, j);
    }
    let mut failed = vec![false; s as usize];
    for &i in &order[..f.min(s) as usize] {
        failed[i as usize] = true;
    }
    failed
}

// ---------------------------------------------------------------------------
// Closed forms of §3.2.

/// Eq. 5: horizontal, a failed slice's keys are duplicates:
/// `f/S + (1 - f/S)·P_fp`.
pub fn eq5_horizontal_failed(f: f64, s: f64, p_fp: f64) -> f64 {
    f / s + (1.0 - f / s) * p_fp
}

/// Eq. 6: vertical, a failed cell counts as set:
/// `(f/S + (1 - f/S)·(1 - e^(-kn/m)))^k`, with `P_fp^(1/k)` as the fill.
pub fn eq6_vertical_failed(f: f64, s: f64, p_fp: f64, k: f64) -> f64 {
    (f / s + (1.0 - f / s) * p_fp.powf(1.0 / k)).powf(k)
}

/// Def. 3, horizontal: the least S with Eq. 5 ≤ `p_max`:
/// `f·(1 - P_fp)/(P_max - P_fp)`.
pub fn sf_horizontal(f: f64, p_fp: f64, p_max: f64) -> f64 {
    f * (1.0 - p_fp) / (p_max - p_fp)
}

/// Def. 3, vertical: `f·(1 - P_fp^(1/k))/(P_max^(1/k) - P_fp^(1/k))`.
pub fn sf_vertical(f: f64, p_fp: f64, p_max: f64, k: f64) -> f64 {
    let (a, b) = (p_fp.powf(1.0 / k), p_max.powf(1.0 / k));
    f * (1.0 - a) / (b - a)
}

fn binomial(n: u32, r: u32) -> f64 {
    (0..r).fold(1.0, |acc, i| acc * f64::from(n - i) / f64::from(i + 1))
}

/// P(exactly `live` of k cells are on live slices), q = 1 - f/S.
fn live_cells(k: u32, live: u32, q: f64) -> f64 {
    binomial(k, live) * q.powi(live as i32) * (1.0 - q).powi((k - live) as i32)
}

/// The x-of-k heuristic's false-negative rate for a true duplicate (all its
/// cells set): fewer than x of its k cells are live, `P(Bin(k, 1-f/S) < x)`.
pub fn heuristic_fnr(k: u32, x: u32, f: f64, s: f64) -> f64 {
    // `+ 0.0`: an empty float sum is -0.0.
    (0..x.min(k + 1)).map(|l| live_cells(k, l, 1.0 - f / s)).sum::<f64>() + 0.0
}

/// The heuristic's false-positive rate for a new key when each cell is set
/// with probability `fill` = `P_fp^(1/k)`: at least x cells live, all set.
pub fn heuristic_fpr(k: u32, x: u32, f: f64, s: f64, fill: f64) -> f64 {
    (x..=k).map(|l| live_cells(k, l, 1.0 - f / s) * fill.powi(l as i32)).sum::<f64>() + 0.0
}

/// The paper's printed form for the heuristic, `((1 - f/S)·fill)^x`: the
/// chance that x *given* cells are live and set.
pub fn heuristic_fpr_paper(x: u32, f: f64, s: f64, fill: f64) -> f64 {
    ((1.0 - f / s) * fill).powi(x as i32)
}

/// The paper's printed vertical false-negative rate when failed cells count
/// as unset, `Σ_{i=1..k} (f/S)^i (1-f/S)^(k-i)` (no binomial coefficients;
/// the exact rate is `1 - (1 - f/S)^k`).
pub fn vertical_fnr_paper(k: u32, f: f64, s: f64) -> f64 {
    (1..=k).map(|i| (f / s).powi(i as i32) * (1.0 - f / s).powi((k - i) as i32)).sum()
}

/// Expected messages of a parallel vertical lookup: distinct owners among k
/// uniform positions, `S·(1 - (1 - 1/S)^k)`.
pub fn parallel_messages(k: u32, s: u32) -> f64 {
    let s = f64::from(s);
    s * (1.0 - (1.0 - 1.0 / s).powi(k as i32))
}

// ---------------------------------------------------------------------------
// Bloom trees (§6).

/// How a Bloom tree inserts (§6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TreeKind {
    /// Test-and-set on the way up (Alg. 1): events are stored near every
    /// producer that sent them.
    Dense,
    /// Test up to a hit or the root, then set the path of a distinct event
    /// (Alg. 2): each event stored once.
    Sparse,
}

impl TreeKind {
    pub fn name(self) -> &'static str {
        match self {
            TreeKind::Dense => "dense",
            TreeKind::Sparse => "sparse",
        }
    }
}

/// Per-level counts of a tree run; level 0 is the root, level `depth` the leaves.
#[derive(Clone, Debug, Default)]
pub struct TreeCounts {
    /// Events judged duplicates at each level.
    pub hits: Vec<u64>,
    /// Filter accesses (tests and sets; a test-and-set is one) per level,
    /// bottom-up lookups and inserts.
    pub accesses: Vec<u64>,
    /// Tests sent down by top-down testing, per level tested.
    pub topdown_accesses: Vec<u64>,
    /// Hits that top-down testing overruled (judged distinct), per level.
    pub overruled: Vec<u64>,
}

/// A complete Bloom tree of `fanout^depth` leaves, every node a filter of
/// the same m and k (the configuration Props. 3 and 4 assume).
#[derive(Clone, Debug)]
pub struct BloomTree {
    levels: Vec<Vec<Bits>>,
    fanout: usize,
    m: u64,
    k: u32,
    kind: TreeKind,
    /// Top-down testing below hits above this level (None: off).
    threshold: Option<usize>,
    /// After top-down testing overrules a hit, go on up the tree instead of
    /// judging the key distinct at once (the paper stops; see [`Self::observe`]).
    pub resume_after_overrule: bool,
    pub counts: TreeCounts,
}

impl BloomTree {
    pub fn new(kind: TreeKind, depth: usize, fanout: usize, m: u64, k: u32, threshold: Option<usize>) -> Self {
        let levels = (0..=depth).map(|j| (0..fanout.pow(j as u32)).map(|_| Bits::new(m)).collect()).collect();
        let zeros = vec![0; depth + 1];
        let counts = TreeCounts {
            hits: zeros.clone(),
            accesses: zeros.clone(),
            topdown_accesses: zeros.clone(),
            overruled: zeros,
        };
        BloomTree { levels, fanout, m, k, kind, threshold, resume_after_overrule: false, counts }
    }

    pub fn depth(&self) -> usize {
        self.levels.len() - 1
    }

    pub fn leaves(&self) -> usize {
        self.levels[self.depth()].len()
    }

    fn contains(&self, level: usize, node: usize, h: &KeyHash) -> bool {
        let f = &self.levels[level][node];
        positions(h, self.m, self.k).all(|p| f.get(p))
    }

    fn set(&mut self, level: usize, node: usize, h: &KeyHash) {
        let (m, k) = (self.m, self.k);
        let f = &mut self.levels[level][node];
        positions(h, m, k).for_each(|p| f.set(p));
    }

    /// The event from producer leaf `leaf`: true when judged a duplicate.
    pub fn observe(&mut self, leaf: usize, h: &KeyHash) -> bool {
        let depth = self.depth();
        let mut node = leaf;
        let mut from = None;
        // The nodes tested and missed, leaf first (Alg. 2's stack).
        let mut missed = Vec::with_capacity(depth + 1);
        for level in (0..=depth).rev() {
            self.counts.accesses[level] += 1;
            if self.contains(level, node, h) {
                let overruled = self.threshold.is_some_and(|t| level < t) && !self.confirm(level, node, from, h);
                if !overruled {
                    self.counts.hits[level] += 1;
                    return true;
                }
                // Top-down testing found no other child holding the key: the
                // hit was a false positive. The paper then judges the key
                // distinct; but a hit below the lowest common ancestor of
                // this producer and an earlier one is overruled too, and the
                // key's copy is then missed (a false negative). Resuming the
                // climb asks the ancestors as well.
                self.counts.overruled[level] += 1;
                if !self.resume_after_overrule {
                    self.set_missed(&missed, h);
                    return false;
                }
            } else if self.kind == TreeKind::Dense {
                self.set(level, node, h);
            }
            missed.push((level, node));
            from = Some(node);
            node /= self.fanout;
        }
        self.set_missed(&missed, h);
        false
    }

    /// Sparse trees set the path of a distinct key on the way back down
    /// (one more access per node); dense trees set it on the way up.
    fn set_missed(&mut self, missed: &[(usize, usize)], h: &KeyHash) {
        if self.kind == TreeKind::Sparse {
            for &(level, node) in missed.iter().rev() {
                self.counts.accesses[level] += 1;
                self.set(level, node, h);
            }
        }
    }

    /// Top-down testing (§6): is the key in a child of (`level`, `node`)
    /// other than `from`, confirmed down to the threshold level?
    fn confirm(&mut self, level: usize, node: usize, from: Option<usize>, h: &KeyHash) -> bool {
        let threshold = self.threshold.unwrap_or(0);
        let first = node * self.fanout;
        for child in (first..first + self.fanout).filter(|&c| Some(c) != from) {
            self.counts.topdown_accesses[level + 1] += 1;
            if self.contains(level + 1, child, h) && (level + 1 >= threshold || self.confirm(level + 1, child, None, h))
            {
                return true;
            }
        }
        false
    }

    /// The root's cells (for Prop. 3).
    pub fn root(&self) -> &Bits {
        &self.levels[0][0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dedupd::filter::hash::DEFAULT_SEED;
    use dedupd::filter::timer::sizing::{bloom_fpr, horizontal_fpr};

    fn key(i: u64) -> KeyHash {
        KeyHash::of(DEFAULT_SEED, &i.to_le_bytes())
    }

    /// Fresh keys (ids above any inserted) and their share judged present.
    fn rate(lookups: u64, mut present: impl FnMut(&KeyHash) -> bool) -> f64 {
        (0..lookups).filter(|i| present(&key(1 << 40 | i))).count() as f64 / lookups as f64
    }

    const N: u64 = 5_000;
    const K: u32 = 4;

    fn filled_vertical(p: f64, slices: u32) -> Vertical {
        let mut v = Vertical::new(cells_for(N, p, K), slices, K);
        (0..N).for_each(|i| {
            v.observe(&key(i));
        });
        v
    }

    #[test]
    fn sizing_gives_the_target_rate() {
        let m = cells_for(N, 0.05, K);
        assert!((bloom_fpr(m as f64, 4.0, N as f64) - 0.05).abs() < 1e-4);
    }

    #[test]
    fn vertical_slicing_keeps_the_unsliced_rate() {
        // Eq. 3: slicing vertically does not change which cells a key sets.
        let v = filled_vertical(0.05, 16);
        let got = rate(40_000, |h| v.contains(h));
        assert!((got - 0.05).abs() < 0.006, "{got}");
        assert_eq!(v.owners(&key(3)).len(), {
            let mut o: Vec<u32> = positions(&key(3), v.cells(), K).map(|p| v.owner(p)).collect();
            o.sort_unstable();
            o.dedup();
            o.len()
        });
    }

    #[test]
    fn horizontal_slicing_follows_eq4() {
        let m = cells_for(N, 0.05, K);
        let mut h = Horizontal::new(m, 64, K);
        (0..N).for_each(|i| {
            h.observe(&key(i));
        });
        let want = horizontal_fpr(h.cells() as f64, 4.0, N as f64, 64.0);
        let got = rate(40_000, |k| h.contains(k));
        assert!((got - want).abs() / want < 0.15, "{got} vs {want}");
    }

    #[test]
    fn failures_follow_eq5_and_eq6() {
        let m = cells_for(N, 0.05, K);
        let mut h = Horizontal::new(m, 40, K);
        let v = filled_vertical(0.05, 40);
        (0..N).for_each(|i| {
            h.observe(&key(i));
        });
        let failed = fail_slices(&mut Rng::new(5), 40, 8);
        assert_eq!(failed.iter().filter(|&&f| f).count(), 8);
        // A fixed failure set: the share of keys it covers varies around
        // f/S by chance, hence the loose tolerances.
        let got_h = rate(40_000, |k| h.contains_with_failures(k, &failed, true));
        let want_h = eq5_horizontal_failed(8.0, 40.0, 0.05);
        assert!((got_h - want_h).abs() < 0.04, "{got_h} vs {want_h}");
        let got_v = rate(40_000, |k| v.contains_with_failures(k, &failed, 0));
        let want_v = eq6_vertical_failed(8.0, 40.0, 0.05, 4.0);
        assert!((got_v - want_v).abs() / want_v < 0.15, "{got_v} vs {want_v}");
        assert!(got_v < got_h, "vertical tolerates failures better");
        // Failed = distinct: no false positive beyond the live slices' own.
        let got_d = rate(40_000, |k| h.contains_with_failures(k, &failed, false));
        assert!(got_d < 0.05, "{got_d}");
    }

    #[test]
    fn the_papers_sf_example() {
        // P_max = 0.15, f = 4: vertical needs fewer than 20 slices,
        // horizontal more than 30 (for a base rate of 0.02 or 0.05, k = 4).
        for p in [0.02, 0.05] {
            assert!(sf_vertical(4.0, p, 0.15, 4.0) < 20.0);
            assert!(sf_horizontal(4.0, p, 0.15) > 30.0);
            // S_f is where Eq. 5 and Eq. 6 reach P_max.
            let s = sf_horizontal(4.0, p, 0.15);
            assert!((eq5_horizontal_failed(4.0, s, p) - 0.15).abs() < 1e-12);
            let s = sf_vertical(4.0, p, 0.15, 4.0);
            assert!((eq6_vertical_failed(4.0, s, p, 4.0) - 0.15).abs() < 1e-12);
        }
    }

    #[test]
    fn the_heuristic_trades_false_positives_for_false_negatives() {
        let k = 8;
        let mut v = Vertical::new(cells_for(N, 0.05, k), 40, k);
        (0..N).for_each(|i| {
            v.observe(&key(i));
        });
        let fill = v.bits.ones() as f64 / v.cells() as f64;
        let mut fnr = Vec::new();
        for x in 0..=k {
            let (mut fp, mut fn_) = (0.0, 0.0);
            let mut rng = Rng::new(x.into());
            for _ in 0..10 {
                let failed = fail_slices(&mut rng, 40, 8);
                fp += rate(4_000, |h| v.contains_with_failures(h, &failed, x)) / 10.0;
                fn_ +=
                    (0..N).filter(|&i| !v.contains_with_failures(&key(i), &failed, x)).count() as f64 / N as f64 / 10.0;
            }
            let (want_fp, want_fn) = (heuristic_fpr(k, x, 8.0, 40.0, fill), heuristic_fnr(k, x, 8.0, 40.0));
            assert!((fp - want_fp).abs() < 0.01 + 0.2 * want_fp, "x={x}: fpr {fp} vs {want_fp}");
            assert!((fn_ - want_fn).abs() < 0.01 + 0.1 * want_fn, "x={x}: fnr {fn_} vs {want_fn}");
            fnr.push(fn_);
        }
        assert_eq!(fnr[0], 0.0);
        assert!(fnr.windows(2).all(|w| w[0] <= w[1]), "{fnr:?}");
    }

    #[test]
    fn pipelining_saves_messages_on_distinct_keys() {
        let v = filled_vertical(0.05, 16);
        let fresh: Vec<KeyHash> = (0..20_000).map(|i| key(1 << 41 | i)).collect();
        let parallel = fresh.iter().map(|h| v.owners(h).len() as f64).sum::<f64>() / 20_000.0;
        let want = parallel_messages(K, 16);
        // Double hashing spreads a key's k positions a little more evenly
        // than independent hashes (an arithmetic progression rarely lands
        // twice in one range), so slightly more owners than the closed form.
        assert!(parallel >= want && parallel < 1.03 * want, "{parallel} vs {want}");
        let piped = fresh.iter().map(|h| f64::from(v.pipelined_messages(h))).sum::<f64>() / 20_000.0;
        assert!(piped < 0.6 * parallel, "{piped} vs {parallel}");
        // A stored key is visited on every owner.
        assert!((0..100).all(|i| v.pipelined_messages(&key(i)) as usize == v.owners(&key(i)).len()));
    }

    #[test]
    fn fairness_and_share() {
        assert_eq!(fairness(&[5, 5, 5, 5]), 1.0);
        assert_eq!(fairness(&[8, 0, 0, 0]), 0.25);
        assert_eq!(max_share(&[1, 3]), 0.75);
    }

    /// Keys from 8 producers with locality: producer j sends keys mostly
    /// from its own range, sometimes another producer's.
    fn local_stream() -> Vec<(usize, u64)> {
        let mut rng = Rng::new(9);
        (0..20_000)
            .map(|_| {
                let leaf = rng.below(8) as usize;
                let home = if rng.next_f64() < 0.8 { leaf as u64 } else { rng.below(8) };
                (leaf, home * 1_000 + rng.below(1_000))
            })
            .collect()
    }

    /// False positives: keys never seen judged duplicates; false negatives:
    /// keys delivered before judged distinct.
    fn run_tree(kind: TreeKind, threshold: Option<usize>, resume: bool) -> (BloomTree, u64, u64) {
        let mut tree = BloomTree::new(kind, 3, 2, cells_for(8_000, 0.2, K), K, threshold);
        tree.resume_after_overrule = resume;
        let (mut seen, mut delivered) = (std::collections::HashSet::new(), std::collections::HashSet::new());
        let (mut fp, mut fn_) = (0, 0);
        for (leaf, id) in local_stream() {
            let dup = tree.observe(leaf, &key(id));
            fp += u64::from(dup && seen.insert(id));
            fn_ += u64::from(!dup && !delivered.insert(id));
            seen.insert(id);
        }
        (tree, fp, fn_)
    }

    #[test]
    fn trees_never_miss_a_duplicate_and_dense_ones_resolve_locally() {
        let (dense, dense_fp, dense_fn) = run_tree(TreeKind::Dense, None, false);
        let (sparse, sparse_fp, sparse_fn) = run_tree(TreeKind::Sparse, None, false);
        assert_eq!((dense_fn, sparse_fn), (0, 0));
        assert!(dense_fp > 0 && sparse_fp > 0, "the root is sized for a 20% FPR");
        // Locality: the dense tree finds more duplicates at the leaves and
        // asks the root far less often (the sparse tree also sets it).
        assert!(dense.counts.hits[3] > sparse.counts.hits[3], "{:?} {:?}", dense.counts, sparse.counts);
        assert!(3 * dense.counts.accesses[0] < 2 * sparse.counts.accesses[0], "{:?} {:?}", dense.counts, sparse.counts);
        // Prop. 3: the roots hold the same cells (up to false positives below the root).
        let (a, b) = (dense.root().ones() as f64, sparse.root().ones() as f64);
        assert!((a - b).abs() / b < 0.01, "{a} vs {b}");
    }

    #[test]
    fn top_down_testing_removes_false_positives_only() {
        let (_, plain_fp, _) = run_tree(TreeKind::Sparse, None, false);
        let mut paper_fn = 0;
        for threshold in 1..=3 {
            let (tree, fp, fn_) = run_tree(TreeKind::Sparse, Some(threshold), true);
            assert_eq!(fn_, 0, "threshold {threshold}");
            assert!(fp < plain_fp / 2, "threshold {threshold}: {fp} vs {plain_fp}");
            assert!(tree.counts.overruled.iter().sum::<u64>() > 0);
            // Stopping at an overruled hit, as the paper does, misses copies.
            paper_fn += run_tree(TreeKind::Sparse, Some(threshold), false).2;
        }
        assert!(paper_fn > 0);
    }
}
