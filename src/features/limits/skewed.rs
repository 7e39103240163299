//! The counting stage's counts on skewed streams, sized as a user is told
//! to size them (`--expected` = distinct keys per window, default
//! sub-windows), against an exact limiter that counts every arrival in
//! `(t − W, t]` (docs/spectral.md, "Sizing limits"): for limits 1, 3 and 10
//! the share of the exact limiter's deliveries that the stage drops, and
//! whether a key is ever let through more than N times in a window.
//!
//! Streams: Zipf keys with exponents 0.8, 1.0, 1.2 and 1.5, and the words of
//! the Brown Corpus in corpus order (a real-text stream with a Zipf-like
//! head, as identifier or word tokens are); one record per ms, 60 000 per
//! 60 s window, 2.5 windows. `cargo test --lib skewed -- --nocapture`
//! prints the table in docs/spectral.md.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::filter::counting::CountingSpec;
use crate::filter::hash::DEFAULT_SEED;
use crate::filter::random::Rng;
use crate::filter::spectral::{CounterKind, DEFAULT_SUBWINDOWS, Estimator, SpectralParams, WindowedCounts};
use crate::filter::{FilterSpec, KeyHash};
use crate::testkit::text::TextCorpus;
use crate::testkit::workload::Zipf;

const WINDOW_MS: u64 = 60_000;
const RECORDS: u64 = 150_000;
const LIMITS: [u64; 3] = [1, 3, 10];
/// The most an exact limiter's deliveries may be dropped.
const MAX_LOSS: f64 = 0.05;

/// A record: key id (for the exact counts), its hash, its time.
type Record = (u64, KeyHash, u64);

/// Every key's arrival times in the window.
#[derive(Default)]
struct Exact(HashMap<u64, VecDeque<u64>>);

impl Exact {
    /// Counts `x` at `t`; its count in (t − W, t] before this record.
    fn observe(&mut self, x: u64, t: u64) -> u64 {
        let q = self.0.entry(x).or_default();
        while q.front().is_some_and(|&s| s + WINDOW_MS <= t) {
            q.pop_front();
        }
        q.push_back(t);
        q.len() as u64 - 1
    }
}

fn zipf_stream(skew: f64, seed: u64) -> Vec<Record> {
    let zipf = Zipf::new(200_000, skew);
    let mut rng = Rng::new(seed);
    (0..RECORDS)
        .map(|t| {
            let x = zipf.sample(&mut rng);
            (x, KeyHash::of(DEFAULT_SEED, &x.to_le_bytes()), t)
        })
        .collect()
}

/// The Brown Corpus's words (as written, punctuation attached), one per ms.
fn brown_words() -> Vec<Record> {
    let corpus = TextCorpus::load().unwrap_or_else(|e| panic!("{e}"));
    let mut ids: HashMap<String, u64> = HashMap::new();
    let mut out = Vec::with_capacity(RECORDS as usize);
    'lines: for i in 1..=corpus.len() as u64 {
        for w in corpus.key(i).split_whitespace() {
            if out.len() as u64 == RECORDS {
                break 'lines;
            }
            let next = ids.len() as u64;
            let id = *ids.entry(w.to_string()).or_insert(next);
            out.push((id, KeyHash::of(DEFAULT_SEED, w.as_bytes()), out.len() as u64));
        }
    }
    assert_eq!(out.len() as u64, RECORDS, "the corpus has too few words");
    out
}

/// Mean distinct keys over the stream's whole windows `[iW, (i+1)W)`.
fn distinct_per_window(records: &[Record]) -> u64 {
    let mut windows: HashMap<u64, HashSet<u64>> = HashMap::new();
    for &(x, _, t) in records {
        windows.entry(t / WINDOW_MS).or_default().insert(x);
    }
    let last = records.last().map_or(0, |r| r.2 / WINDOW_MS);
    let whole: Vec<usize> = (0..last).map(|w| windows[&w].len()).collect();
    (whole.iter().sum::<usize>() / whole.len()) as u64
}

/// What one run measured, per limit.
struct Outcome {
    exact: [u64; 3],
    lost: [u64; 3],
    over: [u64; 3],
    /// The largest [`WindowedCounts::false_positive`] seen, sampled.
    false_positive: f64,
    /// The most filters and bytes the ring held, sampled.
    filters: usize,
    memory: u64,
}

fn params(estimator: Estimator, expected: u64) -> SpectralParams {
    SpectralParams {
        estimator,
        counters: CountingSpec::counters_for_expected(expected, DEFAULT_SUBWINDOWS, 5),
        hashes: 5,
        counter_bits: 8,
        store: CounterKind::Fixed,
    }
}

/// The stage's counts against the exact limiter: a record passes a limit N
/// iff its key's count before it is below N (the stage's rule,
/// `counting::CountingStage::judge`); every arrival is counted.
fn run(records: &[Record], expected: u64, estimator: Estimator) -> Outcome {
    let mut counts = WindowedCounts::new(params(estimator, expected), WINDOW_MS, DEFAULT_SUBWINDOWS).unwrap();
    let mut exact = Exact::default();
    let mut delivered: [Exact; 3] = Default::default();
    let mut o = Outcome { exact: [0; 3], lost: [0; 3], over: [0; 3], false_positive: 0.0, filters: 0, memory: 0 };
    for (i, &(x, h, t)) in records.iter().enumerate() {
        let (before, _) = counts.observe(&h, t);
        let truth = exact.observe(x, t);
        for (j, n) in LIMITS.into_iter().enumerate() {
            o.exact[j] += u64::from(truth < n);
            o.lost[j] += u64::from(truth < n && before >= n);
            if before < n && delivered[j].observe(x, t) >= n {
                o.over[j] += 1;
            }
        }
        if i % 1000 == 0 {
            o.false_positive = o.false_positive.max(counts.false_positive());
            o.filters = o.filters.max(counts.filters());
            o.memory = o.memory.max(counts.memory_bytes());
        }
    }
    o
}

/// Runs every estimator on `records`; fails naming stream, estimator and
/// limit where the loss passes [`MAX_LOSS`] or MS or MI let a key through
/// more than N times in a window.
fn check(name: &str, records: &[Record]) {
    let expected = distinct_per_window(records);
    let timer = FilterSpec { window_ms: WINDOW_MS, expected_keys: expected, fpr: 0.01, ..FilterSpec::default() }
        .resolve()
        .unwrap()
        .memory_bytes();
    let mut failures = Vec::new();
    for e in Estimator::ALL {
        let o = run(records, expected, e);
        let loss: Vec<f64> = (0..3).map(|j| o.lost[j] as f64 / o.exact[j] as f64).collect();
        eprintln!(
            "| {name} | {expected} | {e} | {:.2}% | {:.2}% | {:.2}% | {} | {:.4} | {} | {} | {timer} |",
            loss[0] * 100.0,
            loss[1] * 100.0,
            loss[2] * 100.0,
            o.over.iter().sum::<u64>(),
            o.false_positive,
            o.filters,
            o.memory,
        );
        for (j, n) in LIMITS.into_iter().enumerate() {
            if loss[j] > MAX_LOSS {
                failures.push(format!(
                    "{name} {e} limit {n}: lost {} of {} ({:.2}%)",
                    o.lost[j],
                    o.exact[j],
                    loss[j] * 100.0
                ));
            }
            // RM can undercount in general (docs/spectral.md); on these
            // seeded streams it does not, and the test holds it to that.
            if o.over[j] > 0 {
                failures.push(format!("{name} {e} limit {n}: {} deliveries over the limit", o.over[j]));
            }
        }
        assert!(o.exact[0] > 1000 && o.lost.iter().zip(&o.exact).all(|(l, x)| l <= x));
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn zipf_streams_lose_little_against_an_exact_limiter() {
    eprintln!(
        "| stream | distinct per window | estimator | loss at 1 | at 3 | at 10 | over | peak false positive | peak filters | peak counting bytes | timer bytes |"
    );
    for (skew, seed) in [(0.8, 1), (1.0, 2), (1.2, 3), (1.5, 4)] {
        check(&format!("Zipf {skew}"), &zipf_stream(skew, seed));
    }
}

#[test]
fn brown_corpus_words_lose_little_against_an_exact_limiter() {
    check("Brown words", &brown_words());
}
