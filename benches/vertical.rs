//! Test-then-insert throughput of one slice's filter judged sequentially
//! against the same filter vertically sliced between T threads
//! (`dedupd::filter::vertical`, docs/vertical-slicing.md).
//!
//! The filter is sized for 10 M keys at 1% FPR (k = 7, 8-bit cells: 96 MiB,
//! far beyond any cache), standard layout, no growth, a window of 10 M ms at
//! one event per ms. It is warmed up with 4 M events of the measured key
//! distribution, then every iteration judges a batch of 4096 events (hashed
//! beforehand; the clock moves 1 ms per event). Key distributions:
//! - `uniform`: ids uniform over 20 M (mostly new keys: ~90% distinct);
//! - `zipf1.2`: Zipf(α = 1.2) ranks over 10 M ids (a few hot keys: ~95% duplicates,
//!   with many repeats inside one batch).
//!
//! Per distribution: `sequential` (`SlidingFilter::observe_batch`, which
//! prefetches 16 events ahead), `vertical-t1` and `vertical-t2`
//! (`VerticalFilter::observe_batch` with S = 8 vertical slices on 1 and 2
//! threads, rounds of 2048 events) and `pipelined` (one event at a time,
//! owners visited in turn; one thread).
//!
//! `cargo bench --bench vertical` (about 3 minutes); `DEDUPD_BENCH_QUICK=1`
//! for short samples. The machines these run on are shared: compare the
//! figures of one run as ratios.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dedupd::bench::workload::{Rng, Zipf};
use dedupd::filter::{Event, FilterSpec, Growth, KeyHash, SlidingFilter, Verdict, VerticalFilter};

const BATCH: usize = 4096;
const KEYS: u64 = 10_000_000;
/// Hashed events drawn per distribution, replayed with new times.
const POOL: usize = 1 << 20;
const WARM_UP_EVENTS: usize = 4_000_000;
const SLICES: u32 = 8;

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

fn filter() -> SlidingFilter {
    let spec = FilterSpec {
        window_ms: KEYS,
        expected_keys: KEYS,
        hashes: Some(7),
        timer_bits: 8,
        growth: Growth::None,
        max_generations: 1,
        ..FilterSpec::default()
    };
    SlidingFilter::new(spec.resolve().expect("valid spec"))
}

/// `POOL` key hashes of a distribution.
fn hashes(zipf: bool) -> Vec<KeyHash> {
    let seed = filter().params().seed;
    let mut rng = Rng::new(if zipf { 12 } else { 11 });
    let dist = zipf.then(|| Zipf::new(KEYS as usize, 1.2));
    (0..POOL)
        .map(|_| {
            let id = match &dist {
                Some(z) => z.sample(&mut rng),
                None => rng.below(2 * KEYS),
            };
            KeyHash::of(seed, &id.to_le_bytes())
        })
        .collect()
}

#[derive(Clone, Copy)]
enum Kind {
    Sequential,
    Vertical(usize),
    Pipelined,
}

/// How a variant judges a batch.
enum Judge {
    Sequential(SlidingFilter),
    Vertical(VerticalFilter),
    Pipelined(VerticalFilter),
}

impl Judge {
    fn observe(&mut self, events: &[Event], out: &mut Vec<Verdict>) {
        match self {
            Judge::Sequential(f) => f.observe_batch(events, out),
            Judge::Vertical(v) => v.observe_batch(events, out),
            Judge::Pipelined(v) => {
                black_box(v.observe_pipelined(events, out));
            }
        }
    }

    fn filter(&self) -> &SlidingFilter {
        match self {
            Judge::Sequential(f) => f,
            Judge::Vertical(v) | Judge::Pipelined(v) => v.filter(),
        }
    }
}

struct Stream<'a> {
    hashes: &'a [KeyHash],
    next: usize,
    clock: u64,
    events: Vec<Event>,
}

impl Stream<'_> {
    /// The next `n` events, 1 ms apart.
    fn batch(&mut self, n: usize) -> &[Event] {
        self.events.clear();
        for _ in 0..n {
            self.clock += 1;
            self.events.push(Event { hash: self.hashes[self.next], time_ms: self.clock });
            self.next = (self.next + 1) % self.hashes.len();
        }
        &self.events
    }
}

fn vertical_throughput(c: &mut Criterion) {
    for (name, zipf) in [("uniform", false), ("zipf1.2", true)] {
        let hashes = hashes(zipf);
        let mut group = c.benchmark_group(format!("vertical/{name}"));
        group.throughput(Throughput::Elements(BATCH as u64));
        let variants = [
            ("sequential", Kind::Sequential),
            ("vertical-t1", Kind::Vertical(1)),
            ("vertical-t2", Kind::Vertical(2)),
            ("pipelined", Kind::Pipelined),
        ];
        for (variant, kind) in variants {
            let mut state: Option<(Judge, Stream<'_>, Vec<Verdict>)> = None;
            group.bench_function(variant, |b| {
                let (judge, stream, out) = state.get_or_insert_with(|| {
                    let mut stream = Stream { hashes: &hashes, next: 0, clock: 1_000_000, events: Vec::new() };
                    // The warm-up runs sequentially (the same state either way).
                    let mut warm = filter();
                    let mut out = Vec::with_capacity(BATCH);
                    for _ in 0..WARM_UP_EVENTS / BATCH {
                        out.clear();
                        warm.observe_batch(stream.batch(BATCH), &mut out);
                    }
                    let judge = match kind {
                        Kind::Sequential => Judge::Sequential(warm),
                        Kind::Vertical(threads) => Judge::Vertical(VerticalFilter::new(warm, SLICES, threads)),
                        Kind::Pipelined => Judge::Pipelined(VerticalFilter::new(warm, SLICES, 1)),
                    };
                    (judge, stream, out)
                });
                b.iter(|| {
                    out.clear();
                    judge.observe(stream.batch(BATCH), out);
                    out.len()
                })
            });
            if let Some((judge, _, _)) = state {
                let c = judge.filter().counters();
                eprintln!(
                    "  {name} {variant}: {:.1}% distinct over {} events",
                    100.0 * c.distinct as f64 / c.events.max(1) as f64,
                    c.events
                );
            }
        }
        group.finish();
    }
}

fn config() -> Criterion {
    let c = Criterion::default().sample_size(10);
    if env_flag("DEDUPD_BENCH_QUICK") {
        c.warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1))
    } else {
        c.warm_up_time(Duration::from_secs(2)).measurement_time(Duration::from_secs(6))
    }
}

criterion_group! {
    name = benches;
    config = config();
    targets = vertical_throughput
}
criterion_main!(benches);
