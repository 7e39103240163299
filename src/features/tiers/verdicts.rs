//! Multi-level (Bloom tree) deployments, paper §6: the pure parts of a
//! sparse tree (docs/tiers.md).
//!
//! In a sparse tree a leaf only *tests*; what it cannot resolve it forwards
//! to the root, which judges as a single instance would and publishes a
//! [`VerdictRecord`] for every record it delivers. A leaf *sets* its filter
//! only from those verdicts ([`LeafCache::learn`]), at the delivered
//! record's own event time. So a leaf drops a record only when the root has
//! delivered its key less than the window before it (up to the leaf's FPR),
//! i.e. only a record the root would also judge a duplicate; and removing
//! records that are duplicates changes no other verdict (only delivered
//! records set timers, docs/design.md, invariant 3). The root's output is therefore
//! a single-level run's over all the leaves' inputs, whatever the timing.

use crate::filter::{FilterParams, KeyHash, SlidingFilter};

/// `dv`: a dedupd verdict.
const MAGIC: [u8; 2] = *b"dv";
/// Version 1: magic, version, seed, h1, h2, event time (all u64 LE).
pub const VERDICT_VERSION: u8 = 1;
/// Bytes of one encoded verdict.
pub const VERDICT_BYTES: usize = 2 + 1 + 8 * 4;

/// One record the root delivered: its key's hash (with the seed it was
/// taken with, so that a leaf hashing with another seed refuses it instead
/// of learning garbage) and its event time. No checksum of its own: a Kafka
/// record batch carries a CRC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerdictRecord {
    pub seed: u64,
    pub hash: KeyHash,
    pub time_ms: u64,
}

/// Why a verdict record cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerdictError {
    #[error("a verdict record has {expected} bytes, this one {got}")]
    Length { expected: usize, got: usize },
    #[error("not a dedupd verdict (magic {got:02x?}, expected {expected:02x?})")]
    Magic { expected: [u8; 2], got: [u8; 2] },
    #[error("verdict format version {got}, this build reads version {expected}")]
    Version { expected: u8, got: u8 },
    #[error(
        "verdict hashed with filter.seed {got}, this leaf hashes with {expected}: set the same filter.seed on every level"
    )]
    Seed { expected: u64, got: u64 },
}

impl VerdictRecord {
    pub fn encode(&self) -> [u8; VERDICT_BYTES] {
        let mut b = [0u8; VERDICT_BYTES];
        b[..2].copy_from_slice(&MAGIC);
        b[2] = VERDICT_VERSION;
        for (i, v) in [self.seed, self.hash.h1, self.hash.h2, self.time_ms].into_iter().enumerate() {
            b[3 + 8 * i..11 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// Reads a verdict hashed with `seed`.
    pub fn decode(bytes: &[u8], seed: u64) -> Result<VerdictRecord, VerdictError> {
        if bytes.len() != VERDICT_BYTES {
            return Err(VerdictError::Length { expected: VERDICT_BYTES, got: bytes.len() });
        }
        let magic = [bytes[0], bytes[1]];
        if magic != MAGIC {
            return Err(VerdictError::Magic { expected: MAGIC, got: magic });
        }
        if bytes[2] != VERDICT_VERSION {
            return Err(VerdictError::Version { expected: VERDICT_VERSION, got: bytes[2] });
        }
        let word = |i: usize| u64::from_le_bytes(bytes[3 + 8 * i..11 + 8 * i].try_into().expect("8 bytes"));
        let got = word(0);
        if got != seed {
            return Err(VerdictError::Seed { expected: seed, got });
        }
        Ok(VerdictRecord { seed, hash: KeyHash { h1: word(1), h2: word(2) }, time_ms: word(3) })
    }
}

/// What a leaf does with a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeafDecision {
    /// The root delivered its key less than the window before it: dropped here.
    Resolved,
    /// Anything else: the root judges it.
    Forward,
}

/// What became of a verdict a leaf read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Learned {
    /// Set at its event time.
    Applied,
    /// More than `tier.verdict_delay` behind the leaf's clock: skipped (it
    /// could only be set at a later time, which would drop too much).
    TooOld,
}

/// A sparse leaf's filter: a cache of the root's recent deliveries. It is
/// never the only copy of anything (the root judges whatever it does not
/// resolve), so it is not checkpointed: a restarted leaf starts empty and
/// forwards more until the verdicts fill it again.
pub struct LeafCache {
    filter: SlidingFilter,
    /// `tier.verdict_delay`: how far behind the clock a verdict is still set.
    delay_ms: u64,
    /// A record further ahead of the clock than this is forwarded without
    /// moving it (one absurd timestamp must not expire the whole cache).
    max_jump_ms: u64,
}

impl LeafCache {
    /// `params` are the root's filter parameters (same window, tick, k,
    /// equal timers, seed) with lateness set to `tier.verdict_delay`.
    pub fn new(params: FilterParams, max_jump_ms: u64) -> Self {
        let delay_ms = params.lateness_ms.unwrap_or(0);
        LeafCache { filter: SlidingFilter::new(params), delay_ms, max_jump_ms }
    }

    /// Tests a record at its own event time, without setting anything.
    /// Only a record at or ahead of the cache's clock is tested: cells may
    /// hold deliveries later than an older record, which do not make it a
    /// duplicate, so such a record goes to the root.
    pub fn test(&mut self, hash: &KeyHash, time_ms: u64) -> LeafDecision {
        let Some(clock) = self.filter.clock_ms() else {
            return LeafDecision::Forward;
        };
        if time_ms < clock || time_ms - clock > self.max_jump_ms {
            return LeafDecision::Forward;
        }
        self.filter.advance(time_ms);
        if self.filter.lookup(hash).duplicate { LeafDecision::Resolved } else { LeafDecision::Forward }
    }

    /// Sets a delivery the root published, at its event time.
    pub fn learn(&mut self, verdict: &VerdictRecord) -> Learned {
        if let Some(clock) = self.filter.clock_ms() {
            if clock.saturating_sub(verdict.time_ms) > self.delay_ms {
                return Learned::TooOld;
            }
            if verdict.time_ms.saturating_sub(clock) > self.max_jump_ms {
                return Learned::TooOld;
            }
        }
        // A verdict for a key the cache already holds changes nothing: a
        // later delivery is already set, or the cells are a false positive.
        self.filter.observe(&verdict.hash, verdict.time_ms);
        Learned::Applied
    }

    pub fn memory_bytes(&self) -> usize {
        self.filter.memory_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::FilterSpec;

    const W: u64 = 60_000;

    fn cache() -> LeafCache {
        let spec = FilterSpec {
            window_ms: W,
            expected_keys: 10_000,
            fpr: 0.001,
            slices: 1,
            lateness_ms: Some(10_000),
            ..FilterSpec::default()
        };
        LeafCache::new(spec.resolve().unwrap(), W)
    }

    fn delivered(key: &str, t: u64) -> VerdictRecord {
        VerdictRecord { seed: 7, hash: KeyHash::of(7, key.as_bytes()), time_ms: t }
    }

    #[test]
    fn verdicts_round_trip_and_bad_ones_are_named() {
        let v = delivered("k", 123_456);
        assert_eq!(VerdictRecord::decode(&v.encode(), 7), Ok(v));
        let bytes = v.encode();
        assert_eq!(VerdictRecord::decode(&bytes[1..], 7), Err(VerdictError::Length { expected: 35, got: 34 }));
        let mut bad = bytes;
        bad[0] = b'x';
        assert!(matches!(VerdictRecord::decode(&bad, 7), Err(VerdictError::Magic { .. })));
        let mut newer = bytes;
        newer[2] = 2;
        assert_eq!(VerdictRecord::decode(&newer, 7), Err(VerdictError::Version { expected: 1, got: 2 }));
        let e = VerdictRecord::decode(&bytes, 8).unwrap_err();
        assert_eq!(e, VerdictError::Seed { expected: 8, got: 7 });
        assert!(e.to_string().contains("filter.seed"), "{e}");
    }

    #[test]
    fn a_leaf_drops_only_what_the_root_delivered_within_the_window_before_it() {
        let mut c = cache();
        let h = |k: &str| KeyHash::of(7, k.as_bytes());
        // Nothing learned yet: everything goes to the root.
        assert_eq!(c.test(&h("a"), 1_000), LeafDecision::Forward);
        assert_eq!(c.learn(&delivered("a", 1_000)), Learned::Applied);
        assert_eq!(c.test(&h("a"), 5_000), LeafDecision::Resolved);
        assert_eq!(c.test(&h("b"), 5_000), LeafDecision::Forward);
        // Past the window from the delivery: the root may deliver it again.
        assert_eq!(c.test(&h("a"), 1_000 + W + 1_000), LeafDecision::Forward);
    }

    #[test]
    fn a_record_older_than_a_learned_delivery_goes_to_the_root() {
        let mut c = cache();
        let h = KeyHash::of(7, b"a");
        c.learn(&delivered("a", 50_000));
        // At 40 s the key had not been delivered yet (it was at 50 s).
        assert_eq!(c.test(&h, 40_000), LeafDecision::Forward);
        assert_eq!(c.test(&h, 50_000), LeafDecision::Resolved);
    }

    #[test]
    fn a_late_verdict_is_set_at_its_own_time_and_a_too_late_one_is_skipped() {
        let mut c = cache();
        let h = KeyHash::of(7, b"a");
        // The leaf's input ran ahead to 100 s before the verdict for 95 s came.
        c.learn(&delivered("z", 100_000));
        assert_eq!(c.learn(&delivered("a", 95_000)), Learned::Applied);
        assert_eq!(c.test(&h, 100_000 + W - 10_000), LeafDecision::Resolved);
        // Set at 95 s, not at the clock: at 95 s + W it has expired.
        assert_eq!(c.test(&h, 95_000 + W + 1_000), LeafDecision::Forward);
        // 20 s behind the clock: more than tier.verdict_delay (10 s).
        assert_eq!(c.learn(&delivered("b", 95_000 + W + 1_000 - 20_000)), Learned::TooOld);
        assert_eq!(c.test(&KeyHash::of(7, b"b"), 95_000 + W + 1_000), LeafDecision::Forward);
    }

    #[test]
    fn an_absurd_timestamp_does_not_expire_the_cache() {
        let mut c = cache();
        let h = KeyHash::of(7, b"a");
        c.learn(&delivered("a", 1_000));
        assert_eq!(c.test(&h, 1_000 + 86_400_000), LeafDecision::Forward);
        assert_eq!(c.test(&h, 2_000), LeafDecision::Resolved);
    }
}
