use super::*;
use crate::filter::hash::{BLOCK_CELLS, DEFAULT_SEED};
use crate::filter::timer::params::{FilterSpec, Growth};
use crate::testkit::workload::{Rng, Zipf};
use proptest::prelude::*;

fn key(i: u64) -> KeyHash {
    KeyHash::of(DEFAULT_SEED, &i.to_le_bytes())
}

fn filter(spec: &FilterSpec) -> SlidingFilter {
    SlidingFilter::new(spec.resolve().unwrap())
}

/// How a test stream draws its keys.
#[derive(Clone, Copy, Debug)]
enum Keys {
    Uniform,
    Zipf,
}

/// A seeded stream: mostly in order with small steps, now and then a jump
/// of several ticks or past the window (and lateness), late events behind
/// the clock, and bursts of new keys that overfill the filter (growth).
fn stream(seed: u64, events: usize, keys: Keys) -> Vec<Event> {
    let (mut rng, mut now) = (Rng::new(seed), 50_000u64);
    let zipf = Zipf::new(2_000, 1.2);
    (0..events)
        .map(|i| {
            now += match rng.below(1_000) {
                0 => 20_000, // past the window and the lateness: every cell expires
                1..=4 => 1_500,
                5..=9 => 300,
                _ => rng.below(3),
            };
            let time_ms = if rng.below(25) == 0 { now.saturating_sub(rng.below(1_800)) } else { now };
            let burst = (i / 700) % 3 == 1;
            let id = match keys {
                Keys::Uniform if burst => rng.below(8_000),
                Keys::Uniform => rng.below(700),
                Keys::Zipf if burst => 10_000 + rng.below(6_000),
                Keys::Zipf => zipf.sample(&mut rng),
            };
            Event { hash: key(id), time_ms }
        })
        .collect()
}

/// Feeds `events` to a sequential filter one at a time, and to a vertical
/// one (parallel or pipelined) in random batches; the verdicts must be the
/// same, and the states equal after every batch. Returns the sequential
/// counters and the pipelined stats.
fn same_as_sequential(
    spec: &FilterSpec,
    slices: u32,
    threads: usize,
    round: usize,
    pipelined: bool,
    events: &[Event],
    seed: u64,
) -> (crate::filter::FilterCounters, PipelineStats) {
    let mut seq = filter(spec);
    let mut vert = VerticalFilter::new(filter(spec), slices, threads).with_round_events(round);
    let mut rng = Rng::new(seed);
    let (mut stats, mut want, mut got) = (PipelineStats::default(), Vec::new(), Vec::new());
    let mut i = 0;
    let name = format!("{spec:?} S {slices} T {threads} round {round} pipelined {pipelined}");
    while i < events.len() {
        let len = match rng.below(4) {
            0 => 1,
            1 => 1 + rng.below(8) as usize,
            _ => 1 + rng.below(600) as usize,
        };
        let batch = &events[i..(i + len).min(events.len())];
        want.extend(batch.iter().map(|e| seq.observe(&e.hash, e.time_ms)));
        if pipelined {
            stats.add(&vert.observe_pipelined(batch, &mut got));
        } else {
            vert.observe_batch(batch, &mut got);
        }
        assert_eq!(got, want, "{name}: verdicts up to event {}", i + batch.len());
        assert!(*vert.filter() == seq, "{name}: state after event {}", i + batch.len());
        i += batch.len();
    }
    (seq.counters().clone(), stats)
}

fn spec(bits: u8, layout: Layout, growth: Growth, equal_timers: u32, lateness_ms: Option<u64>) -> FilterSpec {
    FilterSpec {
        window_ms: 2_000,
        expected_keys: 300,
        timer_bits: bits,
        layout,
        growth,
        max_generations: if growth == Growth::None { 1 } else { 4 },
        equal_timers,
        lateness_ms,
        // The tick the width allows: 1 ms at 12 and 16 bits (a round is an
        // event or two), ~12 ms at 8, ~270 ms at 4 (rounds of many events).
        ..FilterSpec::default()
    }
}

/// The configurations the equality tests go through: every cell storage
/// (4-bit nibbles, bytes, bit-packed 12, 16 bits), both layouts, every
/// growth, equal timers on and off, lateness on and off.
fn configurations() -> Vec<FilterSpec> {
    let mut out = Vec::new();
    for (n, (bits, layout)) in [
        (8u8, Layout::Standard),
        (4, Layout::Standard),
        (12, Layout::Standard),
        (16, Layout::Blocked),
        (8, Layout::Blocked),
    ]
    .into_iter()
    .enumerate()
    {
        for (m, growth) in [Growth::Density, Growth::Cardinality, Growth::None].into_iter().enumerate() {
            let equal_timers = if (n + m) % 2 == 0 { 3 } else { 0 };
            let lateness = ((n + m) % 3 != 0).then_some(1_000);
            out.push(spec(bits, layout, growth, equal_timers, lateness));
        }
    }
    out
}

/// The core guarantee: parallel rounds give the sequential verdicts and
/// state, for T = 1…4 threads, S not dividing m, rounds from 1 event up,
/// and uniform and Zipf keys.
#[test]
fn parallel_batches_are_the_sequential_filter() {
    let mut grown = 0;
    for (n, spec) in configurations().into_iter().enumerate() {
        let n = n as u64;
        let threads = 1 + (n % 4) as usize;
        // S = 3, 5, 7, 13: none divides m (a multiple of 64, or of 256).
        let slices = [3, 5, 7, 13][(n / 2 % 4) as usize].max(threads as u32);
        let round = [DEFAULT_ROUND_EVENTS, 1, 7, 64][(n % 4) as usize];
        let keys = if n % 2 == 0 { Keys::Zipf } else { Keys::Uniform };
        let events = stream(n, 5_000, keys);
        let (c, _) = same_as_sequential(&spec, slices, threads, round, false, &events, n + 100);
        assert!(c.duplicates > 300 && c.distinct > 300, "{spec:?}: {c:?}");
        assert!(c.late_events > 50, "{spec:?}: {c:?}");
        grown += usize::from(c.generations_created > 1);
    }
    assert!(grown >= 6, "growth in only {grown} streams");
}

/// Every T from 1 to 4 on every configuration, with Zipf keys (many repeats
/// within a round) and the default round.
#[test]
fn every_thread_count_on_zipf_keys() {
    for (n, spec) in configurations().into_iter().enumerate().filter(|(n, _)| n % 3 == 0) {
        for threads in 1..=4 {
            let events = stream(1_000 + n as u64, 2_500, Keys::Zipf);
            same_as_sequential(&spec, 6, threads, DEFAULT_ROUND_EVENTS, false, &events, threads as u64);
        }
    }
}

/// Pipelined testing gives the sequential verdicts and state too.
#[test]
fn pipelined_is_the_sequential_filter() {
    for (n, spec) in configurations().into_iter().enumerate() {
        let keys = if n % 2 == 0 { Keys::Uniform } else { Keys::Zipf };
        let events = stream(500 + n as u64, 3_000, keys);
        let (c, stats) = same_as_sequential(&spec, 5, 1, 1, true, &events, n as u64);
        assert_eq!(stats.lookups, c.events);
        assert_eq!(stats.distinct_lookups, c.distinct);
    }
}

/// A deletable filter goes through the sequential path (and its counting
/// cells): still the same.
#[test]
fn deletable_filters_fall_back_to_sequential() {
    let spec = FilterSpec { deletable: true, ..spec(8, Layout::Standard, Growth::Density, 0, None) };
    let events = stream(9, 3_000, Keys::Zipf);
    same_as_sequential(&spec, 4, 2, DEFAULT_ROUND_EVENTS, false, &events, 1);
    same_as_sequential(&spec, 4, 1, 1, true, &events, 2);
}

/// The combine must see the cells that earlier events of the same round
/// set: a key twice in one round is distinct, then a duplicate. Phase A
/// read the cells before either, so a combine that ignored the round's own
/// writes would call both distinct (and set the cells twice).
#[test]
fn the_combine_sees_writes_earlier_in_the_round() {
    for threads in [1, 2] {
        let spec = spec(8, Layout::Standard, Growth::None, 0, None);
        let mut vert = VerticalFilter::new(filter(&spec), 4, threads);
        let batch: Vec<Event> = [1, 2, 1, 3, 2, 1].iter().map(|&i| Event { hash: key(i), time_ms: 1_000 }).collect();
        let mut out = Vec::new();
        vert.observe_batch(&batch, &mut out);
        let distinct: Vec<bool> = out.iter().map(|v| v.is_distinct()).collect();
        assert_eq!(distinct, [true, true, false, true, false, false], "T {threads}");
        assert_eq!(vert.filter().counters().distinct, 3);
        // Zipf-like: one hot key many times in one round.
        let hot: Vec<Event> = (0..500).map(|i| Event { hash: key(7 + (i % 3 == 0) as u64), time_ms: 1_000 }).collect();
        out.clear();
        vert.observe_batch(&hot, &mut out);
        assert_eq!(out.iter().filter(|v| v.is_distinct()).count(), 2, "T {threads}");
    }
}

/// The slices cover every generation's cells in order, start on whole
/// units (64 cells; blocks in the blocked layout), are as even as that
/// allows, and `owner` agrees with them; in the blocked layout one owner
/// holds all k cells of a key.
#[test]
fn slices_partition_the_cells() {
    for layout in [Layout::Standard, Layout::Blocked] {
        for slices in [1u32, 2, 3, 7, 16] {
            let spec = FilterSpec { expected_keys: 5_000, layout, ..FilterSpec::default() };
            let vert = VerticalFilter::new(filter(&spec), slices, 2);
            let m = vert.filter().generations()[0].cells();
            let unit = if layout == Layout::Blocked { BLOCK_CELLS } else { 64 };
            let mut next = 0;
            for s in 0..slices {
                let r = vert.slice_cells(0, s);
                assert_eq!(r.start, next);
                assert_eq!(r.start % unit, 0);
                let even = m / u64::from(slices);
                assert!(r.end - r.start + unit > even && r.end - r.start < even + 2 * unit, "{layout:?} S {slices}");
                for cell in [r.start, (r.start + r.end) / 2, r.end - 1] {
                    assert_eq!(vert.owner(0, cell), s);
                }
                next = r.end;
            }
            assert_eq!(next, m);
            if layout == Layout::Blocked {
                let k = vert.filter().params().hashes as usize;
                let mut at = [0usize; MAX_HASHES as usize];
                for i in 0..2_000 {
                    positions(&key(i), m, true, k, &mut at);
                    let o = vert.owner(0, at[0] as u64);
                    assert!(at[..k].iter().all(|&c| vert.owner(0, c as u64) == o));
                }
            }
        }
    }
}

/// Pipelining sends at most min(k, S) messages per generation walked, and
/// fewer per lookup on a stream of mostly new keys than on one of mostly
/// duplicates (the paper's Fig. 7c trend); a new key usually stops at the
/// first or second owner. In the blocked layout every walk is one message.
#[test]
fn pipelined_messages_fall_with_the_share_of_new_keys() {
    let spec = FilterSpec {
        window_ms: 1_000_000,
        expected_keys: 20_000,
        growth: Growth::None,
        max_generations: 1,
        ..FilterSpec::default()
    };
    let k = spec.resolve().unwrap().hashes;
    let slices = 16;
    let per_lookup = |distinct_share: f64| {
        let mut vert = VerticalFilter::new(filter(&spec), slices, 1);
        let mut rng = Rng::new(3);
        let (mut fresh, mut out, mut stats) = (0u64, Vec::new(), PipelineStats::default());
        for t in 0..20_000u64 {
            let id = if fresh < 100 || rng.next_f64() < distinct_share {
                fresh += 1;
                fresh
            } else {
                1 + rng.below(fresh)
            };
            let s = vert.observe_pipelined(&[Event { hash: key(id), time_ms: 1_000 + t }], &mut out);
            assert!(s.max_messages <= k.min(slices), "{s:?}");
            stats.add(&s);
        }
        stats
    };
    let (mostly_new, mostly_old) = (per_lookup(0.8), per_lookup(0.2));
    assert!(mostly_new.per_lookup() < mostly_old.per_lookup() * 0.8, "{mostly_new:?} vs {mostly_old:?}");
    assert!(mostly_new.per_lookup() < f64::from(k));
    let new_keys = mostly_new.distinct_messages as f64 / mostly_new.distinct_lookups as f64;
    assert!(new_keys < 2.0, "a new key visits {new_keys} owners on average");
    // Blocked: one owner per key.
    let blocked = FilterSpec { layout: Layout::Blocked, ..spec };
    let mut vert = VerticalFilter::new(filter(&blocked), slices, 1);
    let events: Vec<Event> = (0..5_000).map(|i| Event { hash: key(i % 3_000), time_ms: 1_000 + i }).collect();
    let s = vert.observe_pipelined(&events, &mut Vec::new());
    assert_eq!((s.messages, s.max_messages), (s.lookups, 1));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Arbitrary short streams (small universes, so keys and cells repeat
    /// within rounds; steps from 0 to past the window; late events) and
    /// arbitrary batch and round sizes: the same verdicts and state.
    #[test]
    fn arbitrary_streams_are_judged_sequentially(
        steps in proptest::collection::vec((0u64..40, 0u64..3_000, 0u64..2_500, any::<bool>()), 1..300),
        threads in 1usize..=4,
        slices in 1u32..=9,
        round in 1usize..40,
        config in 0usize..15,
        seed in any::<u64>(),
    ) {
        let spec = configurations()[config].clone();
        let (mut now, mut events) = (10_000u64, Vec::new());
        for (id, step, back, late) in steps {
            now += if step > 2_900 { step * 10 } else { step % 7 };
            let time_ms = if late { now.saturating_sub(back) } else { now };
            events.push(Event { hash: key(id), time_ms });
        }
        let (c, _) = same_as_sequential(&spec, slices, threads, round, false, &events, seed);
        prop_assert_eq!(c.events, events.len() as u64);
    }
}

/// A filter of more than 1 MiB of cells, where phase A prefetches ahead
/// (the path the benchmark takes): the same verdicts and state.
#[test]
fn large_filters_prefetch_and_agree() {
    let spec = FilterSpec {
        window_ms: 60_000,
        expected_keys: 150_000,
        growth: Growth::Density,
        equal_timers: 2,
        ..FilterSpec::default()
    };
    assert!(filter(&spec).worth_prefetching());
    let mut rng = Rng::new(77);
    let zipf = Zipf::new(100_000, 1.2);
    let events: Vec<Event> = (0..30_000u64)
        .map(|t| {
            let id = if t % 2 == 0 { zipf.sample(&mut rng) } else { 1_000_000 + rng.below(200_000) };
            Event { hash: key(id), time_ms: 1_000 + t }
        })
        .collect();
    for threads in [1, 2] {
        same_as_sequential(&spec, 8, threads, DEFAULT_ROUND_EVENTS, false, &events, threads as u64);
    }
}
