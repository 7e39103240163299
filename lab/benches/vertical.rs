//! Test-then-insert throughput of one slice's filter judged sequentially
//! against the same filter vertically sliced between T threads
//! (`dedupd::filter::timer::vertical`, docs/dev/vertical-slicing.md).
//!
//! The filter is sized for 10 M keys at 1% FPR (k = 7, 8-bit cells: 96 MiB,
//! far beyond any cache), standard layout, no growth, a window of 10 M ms at
//! one event per ms. It is warmed up with 12 M events (more than a window) of the measured key
//! distribution, then every iteration hashes and judges a batch of 4096 events
//! (the clock moves 1 ms per event). Key distributions:
//! - `uniform`: ids uniform over 40 M (about 4 in 5 events distinct: the window holds
//!   ~9 M keys, near the design load);
//! - `zipf1.2`: Zipf(α = 1.2) ranks over 10 M ids, 4 Mi of them drawn beforehand and
//!   replayed over a new id space on every pass (a few hot keys: mostly duplicates,
//!   with many repeats inside one batch).
//!
//! Per distribution: `sequential` (`SlidingFilter::observe_batch`, which
//! prefetches 16 events ahead), `vertical-t1` and `vertical-t2`
//! (`VerticalFilter::observe_batch` with S = 8 vertical slices on 1 and 2
//! threads, rounds of 2048 events) and `pipelined` (one event at a time,
//! owners visited in turn; one thread).
//!
//! `cargo bench --bench vertical` (under 2 minutes); `DEDUPD_BENCH_QUICK=1`
//! for short samples; `DEDUPD_BENCH_ROUND=N` sets the vertical filter's
//! events per round (default 2048). The machines these run on are shared: compare the
//! figures of one run as ratios.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dedupd::filter::{Event, FilterSpec, Growth, KeyHash, SlidingFilter, Verdict, VerticalFilter};
use dedupd::testkit::workload::{Rng, Zipf};

const BATCH: usize = 4096;
const KEYS: u64 = 10_000_000;
/// Zipf ranks drawn beforehand (drawing one costs a binary search over
/// 80 MB), replayed over a new id space on every pass.
const ZIPF_DRAWS: usize = 4 << 20;
/// More than one window: the filter is at its steady state when timing starts.
const WARM_UP_EVENTS: usize = 12_000_000;
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

/// Where a stream's ids come from.
enum Ids {
    /// Uniform over `4·KEYS` ids, drawn as the stream goes.
    Uniform(Rng),
    /// Zipf ranks drawn beforehand; pass p adds `p << 32` to them.
    Zipf { ranks: Vec<u32>, next: usize, pass: u64 },
}

impl Ids {
    fn new(zipf: bool) -> Self {
        if !zipf {
            return Ids::Uniform(Rng::new(11));
        }
        let (mut rng, dist) = (Rng::new(12), Zipf::new(KEYS as usize, 1.2));
        Ids::Zipf { ranks: (0..ZIPF_DRAWS).map(|_| dist.sample(&mut rng) as u32).collect(), next: 0, pass: 0 }
    }

    fn next(&mut self) -> u64 {
        match self {
            Ids::Uniform(rng) => rng.below(4 * KEYS),
            Ids::Zipf { ranks, next, pass } => {
                let id = u64::from(ranks[*next]) + (*pass << 32);
                *next += 1;
                if *next == ranks.len() {
                    (*next, *pass) = (0, *pass + 1);
                }
                id
            }
        }
    }
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

struct Stream {
    ids: Ids,
    seed: u64,
    clock: u64,
    events: Vec<Event>,
}

impl Stream {
    /// The next `n` events, 1 ms apart, hashed (as the daemon hashes each
    /// record's key before judging it).
    fn batch(&mut self, n: usize) -> &[Event] {
        self.events.clear();
        for _ in 0..n {
            self.clock += 1;
            let hash = KeyHash::of(self.seed, &self.ids.next().to_le_bytes());
            self.events.push(Event { hash, time_ms: self.clock });
        }
        &self.events
    }
}

fn vertical_throughput(c: &mut Criterion) {
    for (name, zipf) in [("uniform", false), ("zipf1.2", true)] {
        let mut group = c.benchmark_group(format!("vertical/{name}"));
        group.throughput(Throughput::Elements(BATCH as u64));
        let variants = [
            ("sequential", Kind::Sequential),
            ("vertical-t1", Kind::Vertical(1)),
            ("vertical-t2", Kind::Vertical(2)),
            ("pipelined", Kind::Pipelined),
        ];
        for (variant, kind) in variants {
            let mut state: Option<(Judge, Stream, Vec<Verdict>)> = None;
            group.bench_function(variant, |b| {
                let (judge, stream, out) = state.get_or_insert_with(|| {
                    let seed = filter().params().seed;
                    let mut stream = Stream { ids: Ids::new(zipf), seed, clock: 1_000_000, events: Vec::new() };
                    // The warm-up runs sequentially (the same state either way).
                    let mut warm = filter();
                    let mut out = Vec::with_capacity(BATCH);
                    for _ in 0..WARM_UP_EVENTS / BATCH {
                        out.clear();
                        warm.observe_batch(stream.batch(BATCH), &mut out);
                    }
                    let judge = match kind {
                        Kind::Sequential => Judge::Sequential(warm),
                        Kind::Vertical(threads) => {
                            let v = VerticalFilter::new(warm, SLICES, threads);
                            Judge::Vertical(
                                match std::env::var("DEDUPD_BENCH_ROUND").ok().and_then(|r| r.parse().ok()) {
                                    Some(round) => v.with_round_events(round),
                                    None => v,
                                },
                            )
                        }
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
