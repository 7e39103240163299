//! The decaying filter kinds, `rsbf` and `stable`: fixed memory, no time
//! window, for unbounded streams ("drop anything seen recently, forever").
//! Both forget old keys at random: RSBF by reservoir-sampling resets,
//! Stable by random decrements.
//! [`DecayingSpec`] is what a user asks for, [`DecayingFilter`] one filter of
//! either kind, and [`encode`]/[`decode`] its snapshot.
//!
//! Snapshot (version 1, little-endian, in the envelope of [`super::timer::snapshot`]):
//!
//! ```text
//! magic "DEDUPDCF" | version u16 | kind u8 (1 = rsbf, 2 = stable)
//! rsbf:   hash_seed u64, seed u64, arrays u32, array_bits u64, p_star f64 bits,
//!         rng u64, events, duplicates, reservoir_inserts, forced_inserts (u64 each)
//! stable: hash_seed u64, seed u64, cell_bits u8, cells u64, hashes u32,
//!         decrements f64 bits, rng u64, events, duplicates (u64 each)
//! words: u64 n, n × u64
//! checksum: XXH3-64 of everything above, u64
//! ```
//!
//! Every parameter is checked against the configured filter; a timer-filter
//! snapshot, or one of the other decaying kind, is refused naming the kind.
//!
//! Files from the bottom up (each imports only the shared files of
//! [`crate::filter`], this one both):
//!
//! - [`rsbf`]: the reservoir-sampling Bloom filter.
//! - [`stable`]: the Stable Bloom Filter.
//! - [`kind`]: how both plug into the family of kinds (above this file).

pub mod kind;
pub mod rsbf;
pub mod stable;

use super::envelope::{self, Reader, SnapshotError, TIMER_MAGIC, check, put_u32, put_u64};
use super::hash::{DEFAULT_SEED, KeyHash};
use super::param_error::ParamError;
use rsbf::{DEFAULT_P_STAR, Rsbf, RsbfCounters, RsbfParams};
use stable::{DEFAULT_CELL_BITS, StableCounters, StableFilter, StableParams};

/// The first bytes of a decaying-filter snapshot.
pub const MAGIC: [u8; 8] = *b"DEDUPDCF";
/// The format version this build writes and reads.
pub const VERSION: u16 = 1;

/// The default seed of the filters' PRNG (`filter.seed`, `--seed`).
pub const DEFAULT_RNG_SEED: u64 = 0x0005_EED0_FDED_u64;

/// Which decaying structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecayingKind {
    Rsbf,
    Stable,
}

impl DecayingKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DecayingKind::Rsbf => "rsbf",
            DecayingKind::Stable => "stable",
        }
    }

    fn tag(self) -> u8 {
        match self {
            DecayingKind::Rsbf => 1,
            DecayingKind::Stable => 2,
        }
    }
}

/// What a user asks of a decaying filter.
#[derive(Clone, Debug, PartialEq)]
pub struct DecayingSpec {
    pub kind: DecayingKind,
    /// Memory budget in bits, all of it for the filter's arrays.
    pub memory_bits: u64,
    /// Target FPR: RSBF's k (Eq. 5.27), SBF's stable point.
    pub fpr: f64,
    /// RSBF's k or SBF's K; `None`: chosen from `fpr`.
    pub hashes: Option<u32>,
    /// RSBF's p*.
    pub p_star: f64,
    /// SBF's cell width d.
    pub cell_bits: u8,
    /// Seed of the key hash.
    pub hash_seed: u64,
    /// Seed of the PRNG (reservoir draws, resets, decrements).
    pub seed: u64,
}

impl DecayingSpec {
    pub fn new(kind: DecayingKind, memory_bits: u64, fpr: f64) -> Self {
        DecayingSpec {
            kind,
            memory_bits,
            fpr,
            hashes: None,
            p_star: DEFAULT_P_STAR,
            cell_bits: DEFAULT_CELL_BITS,
            hash_seed: DEFAULT_SEED,
            seed: DEFAULT_RNG_SEED,
        }
    }

    /// Validates the settings and builds an empty filter; errors name the
    /// setting, value and rule.
    pub fn build(&self) -> Result<DecayingFilter, ParamError> {
        Ok(match self.resolve()? {
            DecayingParams::Rsbf(p) => DecayingFilter::Rsbf(Rsbf::new(p)),
            DecayingParams::Stable(p) => DecayingFilter::Stable(StableFilter::new(p)),
        })
    }

    /// Everything the filter's state layout and its random draws depend on,
    /// resolved, as one line (for checkpoint manifests, like the timer
    /// filter's [`crate::filter::FilterParams::fingerprint`]): equal
    /// fingerprints mean a snapshot can be restored. Cheap: nothing is allocated
    /// for the arrays.
    pub fn fingerprint(&self) -> Result<String, ParamError> {
        Ok(match self.resolve()? {
            DecayingParams::Rsbf(p) => format!(
                "kind=rsbf,seed={:#x},rng_seed={:#x},arrays={},array_bits={},p_star={}",
                p.hash_seed, p.seed, p.arrays, p.array_bits, p.p_star
            ),
            DecayingParams::Stable(p) => format!(
                "kind=stable,seed={:#x},rng_seed={:#x},cell_bits={},cells={},hashes={},decrements={}",
                p.hash_seed, p.seed, p.cell_bits, p.cells, p.hashes, p.decrements
            ),
        })
    }

    /// The size of one filter of this spec, resolved without making one.
    pub fn size(&self) -> Result<DecayingSize, ParamError> {
        Ok(match self.resolve()? {
            DecayingParams::Rsbf(p) => DecayingSize {
                cells: u64::from(p.arrays) * p.array_bits,
                cell_bits: 1,
                hashes: p.arrays,
                bytes: p.memory_bytes(),
            },
            DecayingParams::Stable(p) => {
                DecayingSize { cells: p.cells, cell_bits: p.cell_bits, hashes: p.hashes, bytes: p.memory_bytes() }
            }
        })
    }

    fn resolve(&self) -> Result<DecayingParams, ParamError> {
        if !(self.fpr > 0.0 && self.fpr < 1.0) {
            return Err(ParamError::new("fpr", self.fpr, "must be greater than 0 and less than 1"));
        }
        Ok(match self.kind {
            DecayingKind::Rsbf => DecayingParams::Rsbf(RsbfParams::resolve(
                self.memory_bits,
                self.fpr,
                self.hashes,
                self.p_star,
                self.hash_seed,
                self.seed,
            )?),
            DecayingKind::Stable => DecayingParams::Stable(StableParams::resolve(
                self.memory_bits,
                self.fpr,
                self.cell_bits,
                self.hashes,
                self.hash_seed,
                self.seed,
            )?),
        })
    }
}

/// What one decaying filter takes ([`DecayingSpec::size`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecayingSize {
    /// RSBF: the bits of all its arrays; SBF: its cells.
    pub cells: u64,
    pub cell_bits: u8,
    /// RSBF: its arrays, one hash each; SBF: its hashes.
    pub hashes: u32,
    /// What [`DecayingStats::memory_bytes`] reports.
    pub bytes: u64,
}

/// Resolved parameters of either kind.
enum DecayingParams {
    Rsbf(RsbfParams),
    Stable(StableParams),
}

/// One decaying filter of either kind.
#[derive(Clone, Debug, PartialEq)]
pub enum DecayingFilter {
    Rsbf(Rsbf),
    Stable(StableFilter),
}

/// What a decaying filter reports about itself.
#[derive(Clone, Debug, PartialEq)]
pub struct DecayingStats {
    pub kind: &'static str,
    pub events: u64,
    pub duplicates: u64,
    pub memory_bytes: u64,
    pub hashes: u32,
    /// RSBF: ones over all arrays; SBF: non-zero cells.
    pub ones_fraction: f64,
    /// RSBF: 0.5 (Eq. 5.22 at β = 1/2); SBF: its stable point.
    pub expected_ones_fraction: f64,
    /// RSBF: `(1-1/e)^k`, its FPR after warm-up (Eq. 5.26); SBF: the stable FPR.
    pub design_fpr: f64,
}

impl DecayingFilter {
    pub fn kind(&self) -> DecayingKind {
        match self {
            DecayingFilter::Rsbf(_) => DecayingKind::Rsbf,
            DecayingFilter::Stable(_) => DecayingKind::Stable,
        }
    }

    /// The seed keys must be hashed with.
    pub fn hash_seed(&self) -> u64 {
        match self {
            DecayingFilter::Rsbf(f) => f.params().hash_seed,
            DecayingFilter::Stable(f) => f.params().hash_seed,
        }
    }

    /// The verdict [`Self::observe`] would give now, changing nothing.
    pub fn contains(&self, hash: &KeyHash) -> bool {
        match self {
            DecayingFilter::Rsbf(f) => f.contains(hash),
            DecayingFilter::Stable(f) => f.contains(hash),
        }
    }

    /// Test-then-update; true for DUPLICATE.
    #[inline]
    pub fn observe(&mut self, hash: &KeyHash) -> bool {
        match self {
            DecayingFilter::Rsbf(f) => f.observe(hash),
            DecayingFilter::Stable(f) => f.observe(hash),
        }
    }

    pub fn stats(&self) -> DecayingStats {
        match self {
            DecayingFilter::Rsbf(f) => {
                let p = f.params();
                DecayingStats {
                    kind: "rsbf",
                    events: f.counters().events,
                    duplicates: f.counters().duplicates,
                    memory_bytes: p.memory_bytes(),
                    hashes: p.arrays,
                    ones_fraction: f.mean_ones_fraction(),
                    expected_ones_fraction: 0.5,
                    design_fpr: (1.0 - (-1.0f64).exp()).powi(p.arrays as i32),
                }
            }
            DecayingFilter::Stable(f) => {
                let p = f.params();
                DecayingStats {
                    kind: "stable",
                    events: f.counters().events,
                    duplicates: f.counters().duplicates,
                    memory_bytes: p.memory_bytes(),
                    hashes: p.hashes,
                    ones_fraction: f.nonzero_fraction(),
                    expected_ones_fraction: p.stable_nonzero_fraction(),
                    design_fpr: p.stable_fpr(),
                }
            }
        }
    }
}

/// Encodes a decaying filter's complete state.
pub fn encode(filter: &DecayingFilter) -> Vec<u8> {
    let mut w = envelope::begin(MAGIC, VERSION, 128);
    w.push(filter.kind().tag());
    let words = match filter {
        DecayingFilter::Rsbf(f) => {
            let p = f.params();
            let (rng, c, words) = f.state();
            put_u64(&mut w, p.hash_seed);
            put_u64(&mut w, p.seed);
            put_u32(&mut w, p.arrays);
            put_u64(&mut w, p.array_bits);
            put_u64(&mut w, p.p_star.to_bits());
            for v in [rng, c.events, c.duplicates, c.reservoir_inserts, c.forced_inserts] {
                put_u64(&mut w, v);
            }
            words
        }
        DecayingFilter::Stable(f) => {
            let p = f.params();
            let (rng, c, words) = f.state();
            put_u64(&mut w, p.hash_seed);
            put_u64(&mut w, p.seed);
            w.push(p.cell_bits);
            put_u64(&mut w, p.cells);
            put_u32(&mut w, p.hashes);
            put_u64(&mut w, p.decrements.to_bits());
            for v in [rng, c.events, c.duplicates] {
                put_u64(&mut w, v);
            }
            words
        }
    };
    put_u64(&mut w, words.len() as u64);
    w.reserve(words.len() * 8 + 8);
    for &x in words {
        put_u64(&mut w, x);
    }
    envelope::seal(w)
}

/// Restores the state in `bytes` into a filter configured like `configured`
/// (whose own state is ignored), refusing a snapshot taken with other settings.
pub fn decode(bytes: &[u8], configured: &DecayingFilter) -> Result<DecayingFilter, SnapshotError> {
    let kind = configured.kind();
    if bytes.starts_with(&TIMER_MAGIC) {
        return Err(mismatch("kind", "timer", kind.as_str()));
    }
    let mut r = envelope::open(bytes, MAGIC, VERSION)?;
    let tag = r.u8()?;
    if tag != kind.tag() {
        let other = [DecayingKind::Rsbf, DecayingKind::Stable].into_iter().find(|k| k.tag() == tag);
        return match other {
            Some(k) => Err(mismatch("kind", k.as_str(), kind.as_str())),
            None => Err(SnapshotError::Malformed(format!("unknown count filter kind tag {tag}"))),
        };
    }
    match configured {
        DecayingFilter::Rsbf(f) => {
            let p = f.params().clone();
            check(r.u64()?, p.hash_seed, "hash seed")?;
            check(r.u64()?, p.seed, "seed")?;
            check(r.u32()?, p.arrays, "hashes (rsbf arrays k)")?;
            check(r.u64()?, p.array_bits, "rsbf array bits s (memory / k)")?;
            check(f64::from_bits(r.u64()?), p.p_star, "p_star")?;
            let rng = r.u64()?;
            let c = RsbfCounters {
                events: r.u64()?,
                duplicates: r.u64()?,
                reservoir_inserts: r.u64()?,
                forced_inserts: r.u64()?,
            };
            let words = read_words(&mut r)?;
            r.finish()?;
            Rsbf::from_state(p, rng, c, words)
                .map(DecayingFilter::Rsbf)
                .ok_or_else(|| SnapshotError::Malformed("rsbf bit words do not fit the arrays".into()))
        }
        DecayingFilter::Stable(f) => {
            let p = f.params().clone();
            check(r.u64()?, p.hash_seed, "hash seed")?;
            check(r.u64()?, p.seed, "seed")?;
            check(r.u8()?, p.cell_bits, "cell_bits")?;
            check(r.u64()?, p.cells, "stable cells (memory / cell bits)")?;
            check(r.u32()?, p.hashes, "hashes (stable K)")?;
            check(f64::from_bits(r.u64()?), p.decrements, "stable decrements P (from fpr)")?;
            let rng = r.u64()?;
            let c = StableCounters { events: r.u64()?, duplicates: r.u64()? };
            let words = read_words(&mut r)?;
            r.finish()?;
            StableFilter::from_state(p, rng, c, words)
                .map(DecayingFilter::Stable)
                .ok_or_else(|| SnapshotError::Malformed("stable cell words do not fit the cells".into()))
        }
    }
}

/// The kind of the decaying-filter snapshot in `bytes`, if it is one (read
/// before its checksum is checked: for naming what a snapshot is when it is
/// refused, never for restoring it).
pub fn kind_of(bytes: &[u8]) -> Option<DecayingKind> {
    const TAG_AT: usize = MAGIC.len() + 2;
    if !bytes.starts_with(&MAGIC) {
        return None;
    }
    [DecayingKind::Rsbf, DecayingKind::Stable].into_iter().find(|k| bytes.get(TAG_AT) == Some(&k.tag()))
}

fn read_words(r: &mut Reader<'_>) -> Result<Vec<u64>, SnapshotError> {
    let n = r.u64()? as usize;
    let raw = r.take(n.checked_mul(8).ok_or_else(|| SnapshotError::Malformed(format!("{n} words")))?)?;
    Ok(raw.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))).collect())
}

fn mismatch(parameter: &'static str, snapshot: &str, configured: &str) -> SnapshotError {
    SnapshotError::ParameterMismatch { parameter, snapshot: snapshot.to_string(), configured: configured.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::random::Rng;

    /// `n` keys drawn uniformly from `universe` ids with `seed`.
    fn stream(n: usize, universe: u64, seed: u64) -> Vec<KeyHash> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| KeyHash::of(DEFAULT_SEED, &rng.below(universe).to_le_bytes())).collect()
    }

    fn specs() -> [DecayingSpec; 2] {
        [DecayingSpec::new(DecayingKind::Rsbf, 3 * 1024, 0.1), DecayingSpec::new(DecayingKind::Stable, 64 * 48, 0.1)]
    }

    /// The size resolved without a filter is the one a filter reports.
    #[test]
    fn size_is_what_a_filter_reports() {
        for spec in specs().into_iter().chain([DecayingSpec::new(DecayingKind::Stable, 8 << 23, 0.01)]) {
            let size = spec.size().unwrap();
            let stats = spec.build().unwrap().stats();
            assert_eq!((size.bytes, size.hashes), (stats.memory_bytes, stats.hashes), "{spec:?}");
            assert!(size.cells * u64::from(size.cell_bits) <= size.bytes * 8, "{spec:?}: {size:?}");
        }
    }

    /// Snapshot/restore mid-stream (at several points, through warm-up and
    /// the threshold phase) gives exactly the verdicts of an uninterrupted run.
    #[test]
    fn restore_mid_stream_gives_the_uninterrupted_verdicts() {
        let keys = stream(120_000, 8_000, 4);
        for spec in specs() {
            let mut whole = spec.build().unwrap();
            let want: Vec<bool> = keys.iter().map(|h| whole.observe(h)).collect();
            for cut in [500, 1_024, 40_000, 119_999] {
                let mut f = spec.build().unwrap();
                let mut got: Vec<bool> = keys[..cut].iter().map(|h| f.observe(h)).collect();
                let bytes = encode(&f);
                let mut g = decode(&bytes, &spec.build().unwrap()).unwrap();
                assert_eq!(g, f, "{} state differs after restore at {cut}", spec.kind.as_str());
                got.extend(keys[cut..].iter().map(|h| g.observe(h)));
                assert_eq!(got, want, "{} verdicts differ after restore at {cut}", spec.kind.as_str());
                assert_eq!(g, whole);
            }
        }
    }

    #[test]
    fn mismatched_snapshots_are_refused_naming_the_parameter() {
        let [rsbf, stable] = specs();
        let mut f = rsbf.build().unwrap();
        for h in stream(5_000, 1_000, 1) {
            f.observe(&h);
        }
        let bytes = encode(&f);
        let other_seed = DecayingSpec { seed: 1, ..rsbf.clone() }.build().unwrap();
        let e = decode(&bytes, &other_seed).unwrap_err();
        assert!(matches!(e, SnapshotError::ParameterMismatch { parameter: "seed", .. }), "{e}");
        let bigger = DecayingSpec { memory_bits: 3 * 2048, ..rsbf.clone() }.build().unwrap();
        let e = decode(&bytes, &bigger).unwrap_err();
        assert!(e.to_string().contains("rsbf array bits s (memory / k) = 1024"), "{e}");
        let e = decode(&bytes, &stable.build().unwrap()).unwrap_err();
        assert!(e.to_string().contains("kind = rsbf but this filter has kind = stable"), "{e}");

        let timer = crate::filter::FilterSpec { window_ms: 1000, expected_keys: 100, ..Default::default() };
        let timer_bytes =
            crate::filter::timer::snapshot::encode(&crate::filter::SlidingFilter::new(timer.resolve().unwrap()));
        let e = decode(&timer_bytes, &rsbf.build().unwrap()).unwrap_err();
        assert!(e.to_string().contains("kind = timer"), "{e}");

        let mut corrupt = bytes.clone();
        let mid = corrupt.len() / 2;
        corrupt[mid] ^= 1;
        assert!(matches!(decode(&corrupt, &f).unwrap_err(), SnapshotError::ChecksumMismatch { .. }));
        let e = decode(&bytes[..bytes.len() - 9], &f).unwrap_err();
        assert!(matches!(e, SnapshotError::ChecksumMismatch { .. } | SnapshotError::Malformed(_)), "{e}");
    }

    #[test]
    fn settings_are_validated() {
        let e = DecayingSpec::new(DecayingKind::Rsbf, 1 << 20, 1.5).build().unwrap_err();
        assert_eq!(e.to_string(), "invalid fpr = 1.5: must be greater than 0 and less than 1");
        let e = DecayingSpec::new(DecayingKind::Stable, 100, 0.1).build().unwrap_err();
        assert!(e.to_string().starts_with("invalid memory = 100 bits"), "{e}");
    }
}
