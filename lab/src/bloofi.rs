//! `dedupd-lab bloofi`: the all-membership query over N Bloom filters —
//! the naive scan, Bloofi with and without the saturation rule, and
//! Flat-Bloofi — in the Bloofi paper's default setting (§7.1, Table 1):
//! m = 100,992 bits, k = 7, n = 100 elements per filter, disjoint data
//! (filter i holds the integers `[i·n, (i+1)·n)`), order d = 2, filters
//! inserted one by one, Hamming distance. Queries are uniform integers of
//! `[0, N·n)`: each is in exactly one filter.
//!
//! Keys are hashed as everywhere in dedupd (one XXH3-128 of the integer's 8
//! bytes, double hashing), not with the paper's `a·x mod m`.
//!
//! Writes `bloofi.csv` (one row per N and index: filters or nodes checked
//! per query, words read, µs per query, matches per query, bytes, build
//! seconds); `scripts/plot_bloofi.py` draws it. Each index is built, timed
//! and dropped before the next, so memory peaks at one index (Bloofi at
//! N = 100,000: about 1.9 GB).

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;

use dedupd::filter::KeyHash;
use dedupd::filter::provenance::{Bits, Bloofi, FlatBloofi, Naive, SourceIndex, positions};
use dedupd::filter::random::Rng;

/// Flags of `dedupd-lab bloofi`.
#[derive(Debug, clap::Args)]
pub struct BloofiArgs {
    /// Numbers of filters N.
    #[arg(long, value_delimiter = ',', default_value = "100,300,1000,2000,3000,5000,10000,30000,100000")]
    pub filters: Vec<usize>,
    /// Bits per filter m (the paper: 100,992, for 10,000 expected elements at 1%).
    #[arg(long, default_value_t = 100_992)]
    pub bits: usize,
    /// Hash functions k.
    #[arg(long, default_value_t = 7)]
    pub hashes: u32,
    /// Elements per filter n.
    #[arg(long, default_value_t = 100)]
    pub elements: u64,
    /// Bloofi order d.
    #[arg(long, default_value_t = 2)]
    pub order: usize,
    /// Queries per index and N (the naive scan gets a tenth, at least 100),
    /// each timed in 5 passes (the fastest counts).
    #[arg(long, default_value_t = 10_000)]
    pub queries: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Directory for bloofi.csv.
    #[arg(long, default_value = "docs/dev/provenance")]
    pub out: PathBuf,
}

/// One measured index at one N.
struct Row {
    index: &'static str,
    checked: f64,
    micros: f64,
    matches: f64,
    bytes: usize,
    build_s: f64,
}

const SEED: u64 = dedupd::filter::hash::DEFAULT_SEED;
/// Timed passes over the queries; the fastest counts.
const ROUNDS: usize = 5;

fn filter_of(i: usize, a: &BloofiArgs, p: &mut Vec<usize>) -> Bits {
    let mut bits = Bits::new(a.bits);
    for x in i as u64 * a.elements..(i as u64 + 1) * a.elements {
        positions(&KeyHash::of(SEED, &x.to_le_bytes()), a.bits, a.hashes, p);
        p.iter().for_each(|&b| bits.set(b));
    }
    bits
}

fn measure(index: &'static str, a: &BloofiArgs, n: usize, build: impl FnOnce() -> Box<dyn SourceIndex>) -> Row {
    let started = Instant::now();
    let ix = build();
    let build_s = started.elapsed().as_secs_f64();
    let queries = if index == "naive" { (a.queries / 10).max(100) } else { a.queries };
    let mut rng = Rng::new(a.seed);
    let hashes: Vec<Vec<usize>> = (0..queries)
        .map(|_| {
            let mut p = Vec::new();
            positions(&KeyHash::of(SEED, &rng.below(n as u64 * a.elements).to_le_bytes()), a.bits, a.hashes, &mut p);
            p
        })
        .collect();
    let mut out = Vec::new();
    // The fastest of ROUNDS passes over the same queries: the first pass
    // warms the caches, and on a shared machine a pass can lose its core.
    let mut micros = f64::INFINITY;
    let (mut checked, mut matches) = (0u64, 0usize);
    for _ in 0..ROUNDS {
        (checked, matches) = (0, 0);
        let started = Instant::now();
        for p in &hashes {
            out.clear();
            checked += ix.query(p, &mut out);
            matches += out.len();
        }
        micros = micros.min(started.elapsed().as_secs_f64() * 1e6 / queries as f64);
    }
    let q = queries as f64;
    Row { index, checked: checked as f64 / q, micros, matches: matches as f64 / q, bytes: ix.memory_bytes(), build_s }
}

pub fn run(a: &BloofiArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let path = a.out.join("bloofi.csv");
    let mut csv = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    writeln!(csv, "filters,index,checked_per_query,micros_per_query,matches_per_query,bytes,build_seconds")?;
    for &n in &a.filters {
        let mut rows = Vec::new();
        let mut p = Vec::new();
        // Inserts the N filters one by one into an empty index.
        let mut fill = |mut ix: Box<dyn SourceIndex>| {
            (0..n).for_each(|i| ix.insert(i as u32, &filter_of(i, a, &mut p)));
            ix
        };
        rows.push(measure("flat-bloofi", a, n, || fill(Box::new(FlatBloofi::new(a.bits)))));
        for (name, rule) in [("bloofi", true), ("bloofi-no-saturation-rule", false)] {
            rows.push(measure(name, a, n, || fill(Box::new(Bloofi::new(a.bits, a.order, rule)))));
        }
        rows.push(measure("naive", a, n, || fill(Box::new(Naive::new()))));
        for r in rows {
            eprintln!(
                "N = {n:>6} {:<26} {:>10.2} checked/query {:>10.2} µs/query {:>6.2} matches {:>12} bytes, built in {:.1} s",
                r.index, r.checked, r.micros, r.matches, r.bytes, r.build_s
            );
            writeln!(
                csv,
                "{n},{},{:.2},{:.3},{:.3},{},{:.2}",
                r.index, r.checked, r.micros, r.matches, r.bytes, r.build_s
            )?;
        }
    }
    eprintln!("wrote {}", path.display());
    Ok(())
}
