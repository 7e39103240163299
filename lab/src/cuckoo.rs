//! `dedupd-lab cuckoo`: the cuckoo table filter beside the timer filter at
//! the same target, on a real-text stream, against the exact answer.
//!
//! The stream is the word bigrams of the Brown Corpus in corpus order
//! (lower-cased, punctuation trimmed), `--rate` events per second of event
//! time: text repeats its bigrams as a feed repeats its keys, unevenly
//! and at every distance. Each filter runs three ways in the same run:
//! the timer filter, the cuckoo table with `expected` right (the most keys
//! the exact oracle holds in a window), and the cuckoo table with
//! `expected` ten times too low.
//!
//! Bits per key: resident bytes × 8 over the keys in the window at that
//! moment, sampled every 1 000 events after the first window; "at peak"
//! is that ratio when the resident bytes were largest (the latest such
//! sample), "worst" the largest ratio of any sample.

use anyhow::Context as _;

use dedupd::filter::cuckoo::{CuckooFilter, CuckooSpec};
use dedupd::filter::hash::DEFAULT_SEED;
use dedupd::filter::{FilterSpec, KeyHash, SlidingFilter};
use dedupd::testkit::oracle::{Confusion, ExactWindow};
use dedupd::testkit::text::TextCorpus;

/// Flags of `dedupd-lab cuckoo`.
#[derive(Debug, clap::Args)]
pub struct CuckooArgs {
    /// Sliding window in ms.
    #[arg(long, default_value_t = 60_000)]
    pub window_ms: u64,
    /// Events per second of event time.
    #[arg(long, default_value_t = 2_000)]
    pub rate: u64,
    /// Target FPR of both kinds.
    #[arg(long, default_value_t = 0.01)]
    pub fpr: f64,
}

/// One filter under test.
enum Under {
    Timer(Box<SlidingFilter>),
    Cuckoo(Box<CuckooFilter>),
}

impl Under {
    fn observe(&mut self, h: &KeyHash, t: u64) -> bool {
        match self {
            Under::Timer(f) => !f.observe(h, t).is_distinct(),
            Under::Cuckoo(f) => f.observe(h, t),
        }
    }

    fn memory_bytes(&self) -> usize {
        match self {
            Under::Timer(f) => f.memory_bytes(),
            Under::Cuckoo(f) => f.memory_bytes(),
        }
    }
}

struct Run {
    name: &'static str,
    filter: Under,
    confusion: Confusion,
    peak_bytes: usize,
    bits_at_peak: f64,
    worst_bits: f64,
}

/// The Brown Corpus's word bigrams in corpus order.
fn bigrams() -> anyhow::Result<Vec<String>> {
    let corpus = TextCorpus::load().map_err(anyhow::Error::msg)?;
    let mut words = Vec::new();
    for i in 1..=corpus.len() as u64 {
        for w in corpus.key(i).split_whitespace() {
            let w = w.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase();
            if !w.is_empty() {
                words.push(w);
            }
        }
    }
    Ok(words.windows(2).map(|p| format!("{} {}", p[0], p[1])).collect())
}

pub fn run(args: &CuckooArgs) -> anyhow::Result<()> {
    let keys = bigrams().context("the real-text stream")?;
    let time = |i: usize| i as u64 * 1_000 / args.rate;
    let hashes: Vec<KeyHash> = keys.iter().map(|k| KeyHash::of(DEFAULT_SEED, k.as_bytes())).collect();

    // The right estimate: the most keys the exact answer holds in a window.
    let mut exact = ExactWindow::new(args.window_ms);
    let mut expected = 0;
    for (i, k) in keys.iter().enumerate() {
        exact.observe(k, time(i));
        expected = expected.max(exact.keys_in_window() as u64);
    }

    let timer =
        FilterSpec { window_ms: args.window_ms, fpr: args.fpr, expected_keys: expected, ..FilterSpec::default() };
    let cuckoo =
        |expected_keys| CuckooSpec { window_ms: args.window_ms, fpr: args.fpr, expected_keys, ..CuckooSpec::default() };
    let mut runs = [
        ("timer", Under::Timer(Box::new(SlidingFilter::new(timer.resolve()?)))),
        ("cuckoo", Under::Cuckoo(Box::new(CuckooFilter::new(cuckoo(expected).resolve()?)))),
        ("cuckoo, expected 10x low", Under::Cuckoo(Box::new(CuckooFilter::new(cuckoo(expected / 10).resolve()?)))),
    ]
    .map(|(name, filter)| Run {
        name,
        filter,
        confusion: Confusion::default(),
        peak_bytes: 0,
        bits_at_peak: 0.0,
        worst_bits: 0.0,
    });

    let mut exact = ExactWindow::new(args.window_ms);
    for (i, (k, h)) in keys.iter().zip(&hashes).enumerate() {
        let t = time(i);
        let truth = exact.observe(k, t);
        let sample = i % 1_000 == 0 && t >= args.window_ms;
        for r in &mut runs {
            let said = r.filter.observe(h, t);
            r.confusion.record(said, truth);
            if sample {
                let bytes = r.filter.memory_bytes();
                let bits = bytes as f64 * 8.0 / exact.keys_in_window().max(1) as f64;
                r.worst_bits = r.worst_bits.max(bits);
                if bytes >= r.peak_bytes {
                    (r.peak_bytes, r.bits_at_peak) = (bytes, bits);
                }
            }
        }
    }

    println!(
        "stream: {} Brown Corpus word bigrams, {} per s, window {} ms, target FPR {}, expected (right) {expected}",
        keys.len(),
        args.rate,
        args.window_ms,
        args.fpr
    );
    println!("| filter | FPR | FNR | peak bytes | bits/key at peak | worst bits/key |");
    println!("|---|---|---|---|---|---|");
    for r in &runs {
        println!(
            "| {} | {:.5} | {:.5} | {} | {:.1} | {:.1} |",
            r.name,
            r.confusion.fpr(),
            r.confusion.fnr(),
            r.peak_bytes,
            r.bits_at_peak,
            r.worst_bits
        );
    }
    Ok(())
}
