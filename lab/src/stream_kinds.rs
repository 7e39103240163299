//! `dedupd-lab stream-kinds`: the decaying kinds (RSBF, SBF) and the
//! timer filter at equal memory on uniform streams with a given share of
//! distinct records, against the exact answer "was this key ever seen
//! before" (the question RSBF and SBF approximate: no window).
//!
//! The timer filter gets the same memory as 4-bit timer cells, one
//! generation (no growth: growing would use more memory), a window as long
//! as the whole stream (record i at time i ms; the span it must remember),
//! and k = round((m/D)·ln 2) for the stream's D distinct keys (the best k
//! for a plain Bloom filter holding D keys — it is told D, the others are not).
//!
//! SBF runs twice: with the target FPR (the paper's setting, 0.1) and as
//! `stable-matched`, with its stable FPR set to the FPR RSBF measured on the
//! same stream and memory, so that the FNRs compare at equal FPR.
//!
//! Writes `summary.csv` (one row per stream, memory and kind: FPR, FNR,
//! parameters) and `convergence.csv` (per 1% of the stream: the fraction of
//! ones, and the FPR and FNR inside that stretch). `scripts/plot_stream_kinds.py`
//! draws them.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;

use dedupd::filter::decaying::DEFAULT_RNG_SEED;
use dedupd::filter::hash::DEFAULT_SEED;
use dedupd::filter::{DecayingFilter, DecayingKind, DecayingSpec, FilterSpec, Growth, KeyHash, SlicedFilter, Verdict};
use dedupd::testkit::oracle::Confusion;
use dedupd::testkit::workload::Rng;

/// Flags of `dedupd-lab stream-kinds`.
#[derive(Debug, clap::Args)]
pub struct StreamKindsArgs {
    /// Records per stream.
    #[arg(long, default_value_t = 10_000_000)]
    pub records: u64,
    /// Shares of distinct records (the paper's: 0.76, 0.49, 0.15, 0.10).
    #[arg(long, value_delimiter = ',', default_value = "0.76,0.49,0.15,0.10")]
    pub distinct: Vec<f64>,
    /// Filter memory in bits, as powers of two (20 = 2^20 bits = 128 KiB).
    #[arg(long, value_delimiter = ',', default_value = "18,20,22,24")]
    pub memory_log2_bits: Vec<u32>,
    /// Target FPR of RSBF's k and SBF's stable point (the paper: 0.1).
    #[arg(long, default_value_t = 0.1)]
    pub fpr: f64,
    /// Seeds the streams and the filters' PRNG.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Directory for the CSV files.
    #[arg(long, default_value = "docs/dev/rsbf-stable")]
    pub out: PathBuf,
}

/// Points per stream in `convergence.csv`.
const SAMPLES: u64 = 100;

/// The universe U for which `records` uniform draws hold a share `distinct`
/// of distinct values: `U(1 - e^(-N/U)) = distinct·N`, solved for x = N/U
/// in `(1 - e^-x)/x = distinct` by bisection (the left side falls from 1 to 0).
pub fn universe_for(records: u64, distinct: f64) -> u64 {
    let (mut lo, mut hi) = (1e-9f64, 1e3f64);
    for _ in 0..200 {
        let x = (lo + hi) / 2.0;
        if (1.0 - (-x).exp()) / x > distinct { lo = x } else { hi = x }
    }
    ((records as f64 / lo).round() as u64).max(1)
}

/// One kind under test.
enum Under {
    Decaying(DecayingFilter),
    Timer(SlicedFilter),
}

impl Under {
    fn observe(&mut self, h: &KeyHash, i: u64) -> bool {
        match self {
            Under::Decaying(f) => f.observe(h),
            Under::Timer(f) => matches!(f.observe(h, i), Verdict::Duplicate { .. }),
        }
    }

    /// RSBF: ones over all arrays; SBF: non-zero cells; timer: live cells.
    fn ones(&self) -> f64 {
        match self {
            Under::Decaying(f) => f.stats().ones_fraction,
            Under::Timer(f) => {
                let s = f.stats();
                s.live_cells as f64 / f.params().cells as f64
            }
        }
    }
}

pub fn run(args: &StreamKindsArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let create = |name: &str| -> anyhow::Result<std::io::BufWriter<std::fs::File>> {
        let p = args.out.join(name);
        Ok(std::io::BufWriter::new(std::fs::File::create(&p).with_context(|| format!("creating {}", p.display()))?))
    };
    let mut summary = create("summary.csv")?;
    let mut conv = create("convergence.csv")?;
    writeln!(
        summary,
        "distinct_target,distinct,records,universe,memory_bits,kind,hashes,detail,fpr,fnr,ones_fraction,expected_ones_fraction,seconds"
    )?;
    writeln!(conv, "distinct_target,memory_bits,kind,position,ones_fraction,fpr,fnr")?;
    let n = args.records;
    for &share in &args.distinct {
        let universe = universe_for(n, share);
        // Each run regenerates the same stream and its truth from the seed
        // (no gigabytes of stored hashes for long streams).
        let stream_seed = args.seed ^ share.to_bits();
        let distinct_keys = {
            let mut seen = vec![0u64; universe.div_ceil(64) as usize];
            let mut distinct = 0u64;
            each_record(n, universe, stream_seed, &mut seen, |_, _, dup| distinct += u64::from(!dup));
            distinct
        };
        eprintln!("stream: {n} records, {:.1}% distinct (U = {universe})", 100.0 * distinct_keys as f64 / n as f64);
        for &log2 in &args.memory_log2_bits {
            let bits = 1u64 << log2;
            // RSBF's measured FPR, for the SBF tuned to it.
            let mut rsbf_fpr = args.fpr;
            for kind in ["rsbf", "stable", "stable-matched", "timer"] {
                let (mut under, hashes_k, detail, expected) = match kind {
                    "timer" => {
                        let cells = bits / 4;
                        let k =
                            ((cells as f64 / distinct_keys as f64) * std::f64::consts::LN_2).round().clamp(1.0, 32.0);
                        let spec = FilterSpec {
                            window_ms: n + 1,
                            timer_bits: 4,
                            total_cells: Some(cells),
                            hashes: Some(k as u32),
                            growth: Growth::None,
                            max_generations: 1,
                            expected_keys: distinct_keys.max(1),
                            ..FilterSpec::default()
                        };
                        let f = SlicedFilter::new(&spec).map_err(|e| anyhow::anyhow!("{e}"))?;
                        (Under::Timer(f), k as u32, format!("m={cells} 4-bit cells; window={n}ms"), f64::NAN)
                    }
                    _ => {
                        let ck = if kind == "rsbf" { DecayingKind::Rsbf } else { DecayingKind::Stable };
                        // "stable-matched": the SBF whose stable FPR is the
                        // one RSBF measured, so FNRs compare at equal FPR.
                        let fpr = if kind == "stable-matched" { rsbf_fpr.clamp(1e-6, 0.5) } else { args.fpr };
                        let spec =
                            DecayingSpec { seed: DEFAULT_RNG_SEED ^ args.seed, ..DecayingSpec::new(ck, bits, fpr) };
                        let f = spec.build().map_err(|e| anyhow::anyhow!("{e}"))?;
                        let detail = match &f {
                            DecayingFilter::Rsbf(r) => format!("s={} p*={}", r.params().array_bits, r.params().p_star),
                            DecayingFilter::Stable(s) => {
                                let p = s.params();
                                format!(
                                    "m={} Max={} P={:.2} fpr_t={:.5}",
                                    p.cells,
                                    p.max(),
                                    p.decrements,
                                    p.stable_fpr()
                                )
                            }
                        };
                        let st = f.stats();
                        (Under::Decaying(f), st.hashes, detail, st.expected_ones_fraction)
                    }
                };
                let started = Instant::now();
                let (mut all, mut stretch) = (Confusion::default(), Confusion::default());
                let every = (n / SAMPLES).max(1);
                let mut seen = vec![0u64; universe.div_ceil(64) as usize];
                let mut rows = String::new();
                each_record(n, universe, stream_seed, &mut seen, |i, h, dup| {
                    let said = under.observe(h, i);
                    all.record(said, dup);
                    stretch.record(said, dup);
                    if (i + 1) % every == 0 {
                        rows.push_str(&format!(
                            "{share},{bits},{kind},{},{:.6},{:.6},{:.6}\n",
                            i + 1,
                            under.ones(),
                            stretch.fpr(),
                            stretch.fnr()
                        ));
                        stretch = Confusion::default();
                    }
                });
                conv.write_all(rows.as_bytes())?;
                let secs = started.elapsed().as_secs_f64();
                if kind == "rsbf" {
                    rsbf_fpr = all.fpr();
                }
                writeln!(
                    summary,
                    "{share},{:.4},{n},{universe},{bits},{kind},{hashes_k},{detail},{:.6},{:.6},{:.6},{expected:.6},{secs:.2}",
                    distinct_keys as f64 / n as f64,
                    all.fpr(),
                    all.fnr(),
                    under.ones()
                )?;
                eprintln!(
                    "  2^{log2} bits {kind:14}: FPR {:6.3}% FNR {:6.2}% ones {:.3} ({secs:.1}s)",
                    100.0 * all.fpr(),
                    100.0 * all.fnr(),
                    under.ones()
                );
            }
        }
    }
    summary.flush()?;
    conv.flush()?;
    Ok(())
}

/// Calls `f(i, hash, duplicate)` for the `n` records of the uniform stream
/// over `universe` ids with `seed`; `duplicate` is the exact answer (the id
/// was drawn before), kept in the bitset `seen` (zeroed, one bit per id).
fn each_record(n: u64, universe: u64, seed: u64, seen: &mut [u64], mut f: impl FnMut(u64, &KeyHash, bool)) {
    let mut rng = Rng::new(seed);
    for i in 0..n {
        let id = rng.below(universe);
        let (w, b) = ((id / 64) as usize, 1u64 << (id % 64));
        let duplicate = seen[w] & b != 0;
        seen[w] |= b;
        f(i, &KeyHash::of(DEFAULT_SEED, &id.to_le_bytes()), duplicate);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn universe_gives_the_share_of_distinct_draws() {
        for share in [0.76, 0.49, 0.15, 0.10] {
            let n = 200_000;
            let u = universe_for(n, share);
            let mut rng = Rng::new(1);
            let mut seen = std::collections::HashSet::new();
            for _ in 0..n {
                seen.insert(rng.below(u));
            }
            let got = seen.len() as f64 / n as f64;
            assert!((got - share).abs() < 0.005, "{share}: {got}");
        }
    }
}
