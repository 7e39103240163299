//! The counting stage: frequency limits and flags over a sliding window of
//! event time, from windowed Spectral Bloom Filter counts
//! ([`crate::filter::spectral::WindowedCounts`]) — no key is stored for
//! counting.
//!
//! Every record that reaches the stage is counted under its count key at its
//! event time (records come in event-time order from the reorder buffer).
//! - **Limit** N: a record is let through only if the key's estimated count
//!   in the window *before* it is below N; otherwise it is a duplicate (the
//!   (N+1)-th copy). Every arrival counts, delivered or not, as an exact
//!   "N per window" limiter counts. Estimates never fall below the true count
//!   (MS and MI; RM's rare caveat is in [`crate::filter::spectral`]), so a
//!   key is never let through more than N times in any window of length W;
//!   the error is the other way: a key blocked early.
//! - **Flag** T: the record whose estimated count (itself included) reaches
//!   T is flagged — copied to the flag output with the estimate. The key is
//!   then remembered (its 128-bit hash and the time) for one window: its
//!   later records in that window are counted but not flagged again; once W
//!   has passed since its flag, its next record at or above T is flagged
//!   again. The remembered set holds only flagged keys, and a flag needs only
//!   `estimate >= T` (not a crossing from below, which collisions could
//!   hide), so a key whose true count reaches T is always flagged: no false
//!   negatives.
//!
//! [`encode`] and [`decode`] carry the stage's whole state (for checkpoints:
//! the daemon does not run the stage yet).

use std::collections::HashMap;

use crate::filter::KeyHash;
use crate::filter::ParamError;
use crate::filter::envelope::{self as snapshot, SnapshotError, check, put_u32, put_u64};
use crate::filter::spectral::{Estimator, GROWTH_LEVELS, SpectralParams, WindowedCounts, counters_for};

/// The first bytes of a counting-stage snapshot.
pub const MAGIC: [u8; 8] = *b"DEDUPDSB";
/// The format version this build writes when a sub-window has grown (more
/// than one filter); a ring that never grew is written as version 1, byte
/// for byte as before, so an older release restores it. Both are read.
pub const VERSION: u16 = 2;

/// What the counting stage does.
#[derive(Clone, Debug, PartialEq)]
pub struct CountingSpec {
    pub params: SpectralParams,
    pub window_ms: u64,
    pub subwindows: u32,
    /// The most records of a key let through per window.
    pub max_per_window: Option<u64>,
    /// The count at which a key is flagged.
    pub flag_threshold: Option<u64>,
}

impl CountingSpec {
    /// Counters of each sub-window's first filter for `expected` distinct
    /// count keys per window: `2·expected/subwindows` keys at γ = nk/m =
    /// 0.7. A sub-window that receives more grows (see
    /// [`WindowedCounts`]), so this sets only where growth starts.
    pub fn counters_for_expected(expected: u64, subwindows: u32, hashes: u32) -> u64 {
        counters_for((2 * expected).div_ceil(u64::from(subwindows.max(1))), hashes.max(1), 0.7)
    }

    /// Validates the settings (names are the pipe-mode flags' and the daemon
    /// settings' common ones) and builds the stage.
    pub fn build(&self) -> Result<CountingStage, ParamError> {
        let counts = WindowedCounts::new(self.params, self.window_ms, self.subwindows)?;
        let max = u64::from(self.params.counter_max());
        for (setting, v) in [("max_per_window", self.max_per_window), ("flag_threshold", self.flag_threshold)] {
            match v {
                Some(0) => return Err(ParamError::new(setting, 0, "must be at least 1")),
                // A saturated counter reads as its maximum: limits and
                // thresholds up to it still hold; above it they could not.
                Some(n) if n > max => {
                    return Err(ParamError::new(
                        setting,
                        n,
                        format!(
                            "must be at most {max}, the largest count of {}-bit counters",
                            self.params.counter_bits
                        ),
                    ));
                }
                _ => {}
            }
        }
        Ok(CountingStage {
            spec: self.clone(),
            counts,
            flagged: HashMap::new(),
            pruned_at: 0,
            stats: CountingStats::default(),
        })
    }
}

/// What the stage decided for one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountMark {
    /// The key's estimated count in the window, this record included.
    pub estimate: u64,
    /// Over the limit: a duplicate.
    pub limited: bool,
    /// The record that reaches the flag threshold.
    pub flagged: bool,
}

/// The stage's running figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CountingStats {
    pub counted: u64,
    pub limited: u64,
    pub flagged: u64,
}

/// Windowed counts plus the keys flagged in the last window.
#[derive(Clone, Debug)]
pub struct CountingStage {
    spec: CountingSpec,
    counts: WindowedCounts,
    /// Flagged keys (both hash halves) and when they were flagged.
    flagged: HashMap<(u64, u64), u64>,
    /// Time of the last pass dropping flags older than the window.
    pruned_at: u64,
    stats: CountingStats,
}

impl CountingStage {
    pub fn spec(&self) -> &CountingSpec {
        &self.spec
    }

    pub fn counts(&self) -> &WindowedCounts {
        &self.counts
    }

    pub fn stats(&self) -> CountingStats {
        self.stats
    }

    /// The probability that a key with no record in the window is
    /// estimated at 1 or more now (see [`WindowedCounts::false_positive`]).
    pub fn false_positive(&self) -> f64 {
        self.counts.false_positive()
    }

    /// Keys flagged within the last window.
    pub fn flagged_keys(&self) -> usize {
        self.flagged.len()
    }

    /// Counts one record of the count key `h` at `time_ms`.
    pub fn judge(&mut self, h: &KeyHash, time_ms: u64) -> CountMark {
        let (before, estimate) = self.counts.observe(h, time_ms);
        self.stats.counted += 1;
        let limited = self.spec.max_per_window.is_some_and(|n| before >= n);
        self.stats.limited += u64::from(limited);
        let window = self.spec.window_ms;
        let mut flagged = false;
        if let Some(t) = self.spec.flag_threshold
            && estimate >= t
        {
            let now = time_ms.max(self.pruned_at);
            match self.flagged.get(&(h.h1, h.h2)) {
                Some(&at) if at + window > now => {}
                _ => {
                    self.flagged.insert((h.h1, h.h2), now);
                    flagged = true;
                    self.stats.flagged += 1;
                }
            }
        }
        // Once per sub-window: forget flags a window old (they may fire again).
        if time_ms >= self.pruned_at + self.counts.sub_ms() {
            self.pruned_at = time_ms;
            self.flagged.retain(|_, at| *at + window > time_ms);
        }
        CountMark { estimate, limited, flagged }
    }

    /// The key's estimated count in the window ending at the newest time seen.
    pub fn estimate(&self, h: &KeyHash) -> u64 {
        self.counts.estimate(h)
    }
}

/// Encodes the stage's whole state — the ring's counters, the newest
/// sub-window, the flagged keys and the figures — so that a restored stage
/// judges the rest of a stream exactly as one that never stopped (the
/// checkpoint a daemon would write; in the envelope of [`snapshot`]):
///
/// ```text
/// magic "DEDUPDSB" | version u16 | estimator u8 | counters u64 | hashes u32 | counter_bits u8
/// window_ms u64 | subwindows u32 | max_per_window u64 | flag_threshold u64 (0 = none)
/// newest u64 (u64::MAX = none) | pruned_at u64 | counted, limited, flagged u64
/// flagged keys: u64 n, n × (h1 u64, h2 u64, at u64), sorted
/// per sub-window: (version 2: filters u32) per filter, level 0 first,
/// per counter array: u64 n, n × u64 | checksum u64
/// ```
pub fn encode(stage: &CountingStage) -> Vec<u8> {
    let spec = &stage.spec;
    let (ring, newest) = stage.counts.state();
    let grown = ring.iter().any(|s| s.filters().len() > 1);
    let version = if grown { VERSION } else { 1 };
    let mut w = snapshot::begin(MAGIC, version, 128 + stage.counts.memory_bytes() as usize);
    w.push(spec.params.estimator.tag());
    put_u64(&mut w, spec.params.counters);
    put_u32(&mut w, spec.params.hashes);
    w.push(spec.params.counter_bits);
    put_u64(&mut w, spec.window_ms);
    put_u32(&mut w, spec.subwindows);
    put_u64(&mut w, spec.max_per_window.unwrap_or(0));
    put_u64(&mut w, spec.flag_threshold.unwrap_or(0));
    put_u64(&mut w, newest.unwrap_or(u64::MAX));
    put_u64(&mut w, stage.pruned_at);
    for v in [stage.stats.counted, stage.stats.limited, stage.stats.flagged] {
        put_u64(&mut w, v);
    }
    // Sorted: the same state gives the same bytes.
    let mut flagged: Vec<_> = stage.flagged.iter().map(|(&(h1, h2), &at)| (h1, h2, at)).collect();
    flagged.sort_unstable();
    put_u64(&mut w, flagged.len() as u64);
    for (h1, h2, at) in flagged {
        for v in [h1, h2, at] {
            put_u64(&mut w, v);
        }
    }
    for sub in ring {
        if grown {
            put_u32(&mut w, sub.filters().len() as u32);
        }
        for filter in sub.filters() {
            for array in filter.arrays() {
                put_u64(&mut w, array.words().len() as u64);
                for &x in array.words() {
                    put_u64(&mut w, x);
                }
            }
        }
    }
    snapshot::seal(w)
}

/// Restores a stage from [`encode`]'s bytes into one built from `spec`,
/// refusing a snapshot taken with other settings (naming the setting).
pub fn decode(bytes: &[u8], spec: &CountingSpec) -> Result<CountingStage, SnapshotError> {
    let mut stage = spec.build().map_err(|e| SnapshotError::Malformed(format!("configured stage: {e}")))?;
    let (mut r, version) = snapshot::open_any(bytes, MAGIC, 1..=VERSION)?;
    let tag = r.u8()?;
    let estimator = Estimator::from_tag(tag).map(|e| e.as_str()).unwrap_or("unknown");
    check(estimator, spec.params.estimator.as_str(), "estimator")?;
    check(r.u64()?, spec.params.counters, "counters per sub-window")?;
    check(r.u32()?, spec.params.hashes, "hashes")?;
    check(r.u8()?, spec.params.counter_bits, "counter_bits")?;
    check(r.u64()?, spec.window_ms, "window_ms")?;
    check(r.u32()?, spec.subwindows, "subwindows")?;
    check(r.u64()?, spec.max_per_window.unwrap_or(0), "max_per_window")?;
    check(r.u64()?, spec.flag_threshold.unwrap_or(0), "flag_threshold")?;
    let newest = Some(r.u64()?).filter(|&n| n != u64::MAX);
    stage.pruned_at = r.u64()?;
    stage.stats = CountingStats { counted: r.u64()?, limited: r.u64()?, flagged: r.u64()? };
    let n = r.u64()?;
    for _ in 0..n {
        let (h1, h2, at) = (r.u64()?, r.u64()?, r.u64()?);
        stage.flagged.insert((h1, h2), at);
    }
    let (ring, _) = stage.counts.state();
    // A ring has at least 9 sub-windows; every filter has the same arrays.
    let per_filter = ring[0].filters()[0].arrays().len();
    let mut arrays = Vec::with_capacity(ring.len());
    for _ in 0..ring.len() {
        // Version 1: one filter per sub-window.
        let filters = if version == 1 { 1 } else { r.u32()? };
        if !(1..=GROWTH_LEVELS).contains(&filters) {
            return Err(SnapshotError::Malformed(format!("a sub-window of {filters} filters")));
        }
        let mut sub = Vec::with_capacity(filters as usize);
        for _ in 0..filters {
            let mut filter = Vec::with_capacity(per_filter);
            for _ in 0..per_filter {
                let words = r.u64()? as usize;
                let raw =
                    r.take(words.checked_mul(8).ok_or_else(|| SnapshotError::Malformed(format!("{words} words")))?)?;
                filter.push(raw.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))).collect());
            }
            sub.push(filter);
        }
        arrays.push(sub);
    }
    r.finish()?;
    if !stage.counts.restore(newest, arrays) {
        return Err(SnapshotError::Malformed("counter arrays do not fit the configured filters".into()));
    }
    Ok(stage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::hash::DEFAULT_SEED;
    use crate::filter::random::Rng;
    use crate::filter::spectral::{CounterKind, Estimator};
    use proptest::prelude::*;
    use std::collections::VecDeque;

    fn spec(estimator: Estimator, counters: u64, max: Option<u64>, flag: Option<u64>) -> CountingSpec {
        CountingSpec {
            params: SpectralParams { estimator, counters, hashes: 5, counter_bits: 8, store: CounterKind::Fixed },
            window_ms: 1000,
            subwindows: 16,
            max_per_window: max,
            flag_threshold: flag,
        }
    }

    fn key(i: u64) -> KeyHash {
        KeyHash::of(DEFAULT_SEED, &i.to_le_bytes())
    }

    /// An exact limiter and flagger: every key's arrival times in the window.
    #[derive(Default)]
    pub struct Exact {
        times: HashMap<u64, VecDeque<u64>>,
    }

    impl Exact {
        /// Counts `x` at `t`; its count in (t - W, t] before this record.
        pub fn observe(&mut self, x: u64, t: u64, window: u64) -> u64 {
            let q = self.times.entry(x).or_default();
            while q.front().is_some_and(|&s| s + window <= t) {
                q.pop_front();
            }
            let before = q.len() as u64;
            q.push_back(t);
            before
        }
    }

    /// `n` records (key, time) of Zipf(`skew`) keys over 300, times rising
    /// by 0 to `gap - 1` ms.
    fn zipf_records(n: usize, skew: f64, seed: u64, gap: u64) -> Vec<(u64, u64)> {
        let zipf = crate::testkit::workload::Zipf::new(300, skew);
        let mut rng = Rng::new(seed);
        let mut t = 0;
        (0..n)
            .map(|_| {
                t += rng.below(gap);
                (zipf.sample(&mut rng), t)
            })
            .collect()
    }

    /// Snapshot and restore mid-stream (every estimator) gives exactly the
    /// marks of an uninterrupted run; other settings are refused by name.
    #[test]
    fn restore_mid_stream_gives_the_uninterrupted_marks() {
        let records = zipf_records(6000, 0.9, 3, 4);
        for e in Estimator::ALL {
            let sp = spec(e, 512, Some(3), Some(5));
            let mut whole = sp.build().unwrap();
            let want: Vec<CountMark> = records.iter().map(|&(x, t)| whole.judge(&key(x), t)).collect();
            for cut in [0, 1, 2500, 5999] {
                let mut s = sp.build().unwrap();
                let mut got: Vec<CountMark> = records[..cut].iter().map(|&(x, t)| s.judge(&key(x), t)).collect();
                let bytes = encode(&s);
                let grown = s.counts().filters() > 17;
                assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), if grown { 2 } else { 1 }, "{e} at {cut}");
                let mut back = decode(&bytes, &sp).unwrap();
                assert_eq!(encode(&back), bytes, "{e}: re-encoding differs at {cut}");
                got.extend(records[cut..].iter().map(|&(x, t)| back.judge(&key(x), t)));
                assert_eq!(got, want, "{e}: marks differ after restore at {cut}");
            }
            let bytes = encode(&whole);
            let e2 = decode(&bytes, &CountingSpec { subwindows: 32, ..sp.clone() }).unwrap_err();
            assert!(e2.to_string().contains("subwindows"), "{e2}");
            let mut bad = bytes.clone();
            let mid = bad.len() / 2;
            bad[mid] ^= 1;
            assert!(matches!(decode(&bad, &sp), Err(SnapshotError::ChecksumMismatch { .. })));
        }
    }

    /// Compact counters write the fixed store's snapshot bytes (one format
    /// for both), restore mid-stream to the uninterrupted marks, and a
    /// snapshot of one store restores into the other.
    #[test]
    fn compact_counters_round_trip_through_the_snapshot() {
        let records = zipf_records(5000, 1.2, 8, 3);
        for e in Estimator::ALL {
            let fixed = spec(e, 256, Some(4), Some(6));
            let mut compact = fixed.clone();
            compact.params.store = CounterKind::Compact;
            let (mut f, mut c) = (fixed.build().unwrap(), compact.build().unwrap());
            let cut = 3000;
            for &(x, t) in &records[..cut] {
                assert_eq!(f.judge(&key(x), t), c.judge(&key(x), t), "{e}");
            }
            let bytes = encode(&c);
            assert_eq!(bytes, encode(&f), "{e}: compact and fixed snapshots differ");
            let mut back = decode(&bytes, &compact).unwrap();
            let mut cross = decode(&bytes, &fixed).unwrap();
            for &(x, t) in &records[cut..] {
                let want = f.judge(&key(x), t);
                assert_eq!((back.judge(&key(x), t), cross.judge(&key(x), t)), (want, want), "{e}");
            }
        }
    }

    /// A ring that never grew is written as version 1 (which releases that
    /// read only version 1 restore); a version-1 snapshot whose filters are
    /// over the growth bound (one a release without growth wrote) restores
    /// and grows at its sub-window's next record, and the overloaded
    /// filter's counts still count.
    #[test]
    fn version_1_snapshots_restore_and_grow() {
        let records = zipf_records(3000, 1.0, 5, 4);
        let sp = spec(Estimator::Mi, 1 << 14, Some(3), None);
        let mut s = sp.build().unwrap();
        for &(x, t) in &records {
            s.judge(&key(x), t);
        }
        assert_eq!(s.counts().filters(), 17, "large filters do not grow");
        let bytes = encode(&s);
        assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 1);
        // The newest sub-window's filter, as an older release would have
        // left it on a heavier stream: every counter at 1 or more.
        let newest = s.counts().newest().unwrap();
        let slot = (newest % 17) as usize;
        let words = (1u64 << 14) / 8;
        let end = bytes.len() - 8 - (16 - slot) * (8 + words as usize * 8);
        let mut old = bytes[..bytes.len() - 8].to_vec();
        for b in &mut old[end - words as usize * 8..end] {
            *b |= 1;
        }
        let old = snapshot::seal(old);
        let mut back = decode(&old, &sp).unwrap();
        assert!(back.false_positive() > 0.5, "{}", back.false_positive());
        let t = records.last().unwrap().1;
        back.judge(&key(1), t);
        assert_eq!(back.counts().filters(), 18, "the overloaded sub-window grew");
        assert!(back.estimate(&key(1)) > s.estimate(&key(1)));
        let again = encode(&back);
        assert_eq!(u16::from_le_bytes([again[8], again[9]]), 2);
        let mut twice = decode(&again, &sp).unwrap();
        assert_eq!(encode(&twice), again);
        assert_eq!(twice.judge(&key(2), t), back.judge(&key(2), t));
    }

    #[test]
    fn settings_are_validated() {
        let e = spec(Estimator::Mi, 1024, Some(300), None).build().unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid max_per_window = 300: must be at most 255, the largest count of 8-bit counters"
        );
        let e = spec(Estimator::Mi, 1024, None, Some(0)).build().unwrap_err();
        assert_eq!(e.to_string(), "invalid flag_threshold = 0: must be at least 1");
    }

    #[test]
    fn the_n_plus_first_copy_is_limited_and_the_crossing_one_flagged() {
        let mut s = spec(Estimator::Mi, 1 << 12, Some(3), Some(4)).build().unwrap();
        let marks: Vec<CountMark> = (0..6).map(|i| s.judge(&key(1), 10 * i)).collect();
        assert_eq!(marks.iter().map(|m| m.limited).collect::<Vec<_>>(), [false, false, false, true, true, true]);
        assert_eq!(marks.iter().map(|m| m.flagged).collect::<Vec<_>>(), [false, false, false, true, false, false]);
        assert_eq!(marks[3].estimate, 4);
        // A window later the key is let through and flagged afresh.
        let later: Vec<CountMark> = (0..4).map(|i| s.judge(&key(1), 2000 + i)).collect();
        assert!(later.iter().take(3).all(|m| !m.limited));
        assert!(later[3].flagged && later[3].limited);
        assert_eq!(s.stats(), CountingStats { counted: 10, limited: 4, flagged: 2 });
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]
        /// Crowded filters, skewed keys, MS and MI: in every window of length
        /// W a key is let through at most N times, and every record at which
        /// a key's exact count reaches T has its key flagged within the last
        /// window (no false negatives).
        #[test]
        fn never_more_than_n_per_window_and_no_missed_flags(
            seed in any::<u64>(), n in 1u64..6, t in 2u64..12, est in 0usize..2, counters in 64u64..1024,
        ) {
            let e = Estimator::ALL[est];
            let window = 1000;
            let mut s = spec(e, counters, Some(n), Some(t)).build().unwrap();
            let mut exact = Exact::default();
            let mut delivered = Exact::default();
            let mut last_flag: HashMap<u64, u64> = HashMap::new();
            let mut rng = Rng::new(seed);
            let zipf = crate::testkit::workload::Zipf::new(200, 0.9);
            let mut time = 0;
            for _ in 0..4000 {
                time += rng.below(8);
                let x = zipf.sample(&mut rng);
                let m = s.judge(&key(x), time);
                let before = exact.observe(x, time, window);
                if m.flagged {
                    last_flag.insert(x, time);
                }
                if before + 1 >= t {
                    let at = last_flag.get(&x).copied();
                    prop_assert!(at.is_some_and(|a| a + window > time), "{e}: key {x} count {} not flagged", before + 1);
                }
                if !m.limited {
                    let d = delivered.observe(x, time, window);
                    prop_assert!(d < n, "{e}: key {x} delivered {} times in a window, limit {n}", d + 1);
                }
            }
        }
    }
}
