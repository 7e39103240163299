//! Growth of cost (issue #5): time per event and memory of one slice's
//! filter against its size and against its window population, as CSV for
//! `scripts/plot_cost.py`.
//!
//! Each point: a filter warmed up through one full window of fresh random
//! 16-byte keys (one event per ms), then timed over `EVENTS` more, hashing
//! included (`KeyHash::of` + `SlidingFilter::observe_batch` in batches of
//! 4096, as the daemon's slice worker calls it). Every key is new, so every
//! duplicate verdict is a false positive.
//!
//! - `size`: k = 7, 8-bit timers, the window holding exactly the keys that
//!   fill the filter to 1% FPR, no growth; filters of 16 KiB to 1 GiB of
//!   cells, standard and blocked layout.
//! - `population`: a filter sized for 1M keys (8-bit timers, density
//!   growth), windows holding 1/8 to 16 times that many keys: memory follows
//!   the load through generations, and each event is tested against every
//!   generation.
//!
//! `cargo run --release --example cost_curve > docs/dev/performance/cost.csv`
//! (about 4 minutes; needs ~3 GiB of RAM).

use std::time::Instant;

use dedupd::filter::{Event, FilterSpec, Growth, KeyHash, Layout, SlidingFilter, Verdict};
use dedupd::testkit::workload::Rng;

const BATCH: usize = 4096;
/// Timed events per point (at least).
const EVENTS: u64 = 8 << 20;
/// Cells per key at 1% FPR with k = 7.
const CELLS_PER_KEY: f64 = 9.585;

struct Point {
    /// Events per second, hashing included.
    rate: f64,
    fpr: f64,
    memory: usize,
    generations: usize,
}

/// Runs `warm` events to fill the window, then times `timed` events.
fn run(f: &mut SlidingFilter, warm: u64, timed: u64) -> Point {
    let seed = f.params().seed;
    let mut rng = Rng::new(7);
    let mut clock = 1_000_000u64;
    let (mut keys, mut events, mut out) =
        (Vec::with_capacity(BATCH), Vec::<Event>::with_capacity(BATCH), Vec::<Verdict>::with_capacity(BATCH));
    let mut step = |f: &mut SlidingFilter, n: u64| {
        let mut done = 0;
        while done < n {
            let len = (n - done).min(BATCH as u64) as usize;
            keys.clear();
            keys.extend((0..len).map(|_| {
                let mut k = [0u8; 16];
                k[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
                k[8..].copy_from_slice(&rng.next_u64().to_le_bytes());
                k
            }));
            events.clear();
            for k in &keys {
                clock += 1;
                events.push(Event { hash: KeyHash::of(seed, k), time_ms: clock });
            }
            out.clear();
            f.observe_batch(&events, &mut out);
            done += len as u64;
        }
    };
    step(f, warm);
    let before = f.counters().clone();
    // Key generation is timed too; measured alone it is a small share, and
    // the same for every point.
    let start = Instant::now();
    step(f, timed);
    let secs = start.elapsed().as_secs_f64();
    let c = f.counters();
    Point {
        rate: timed as f64 / secs,
        fpr: (c.duplicates - before.duplicates) as f64 / (c.events - before.events) as f64,
        memory: f.memory_bytes(),
        generations: f.generations().len(),
    }
}

fn main() {
    println!(
        "curve,layout,cells_bytes,window_keys,expected_keys,ns_per_event,events_per_s,fpr,memory_bytes,generations"
    );
    for layout in [Layout::Standard, Layout::Blocked] {
        let mut kib = 16u64;
        while kib <= 1 << 20 {
            let bytes = kib << 10;
            let cells = bytes; // 8-bit timers
            let keys = (cells as f64 / CELLS_PER_KEY) as u64;
            let spec = FilterSpec {
                window_ms: keys,
                expected_keys: keys,
                total_cells: Some(cells),
                hashes: Some(7),
                timer_bits: 8,
                growth: Growth::None,
                layout,
                ..FilterSpec::default()
            };
            let mut f = SlidingFilter::new(spec.resolve().expect("valid spec"));
            let p = run(&mut f, keys, EVENTS.max(keys));
            println!(
                "size,{},{bytes},{keys},{keys},{:.2},{:.0},{:.5},{},{}",
                layout.as_str(),
                1e9 / p.rate,
                p.rate,
                p.fpr,
                p.memory,
                p.generations
            );
            kib *= 4;
        }
    }
    let expected = 1u64 << 20;
    for load in [0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0] {
        let keys = (expected as f64 * load) as u64;
        let spec = FilterSpec {
            window_ms: keys,
            expected_keys: expected,
            hashes: Some(7),
            timer_bits: 8,
            growth: Growth::Density,
            ..FilterSpec::default()
        };
        let mut f = SlidingFilter::new(spec.resolve().expect("valid spec"));
        // Two windows of warm-up: growth settles on its levels in the first.
        let p = run(&mut f, 2 * keys, EVENTS.max(keys));
        println!(
            "population,standard,{},{keys},{expected},{:.2},{:.0},{:.5},{},{}",
            f.params().cells,
            1e9 / p.rate,
            p.rate,
            p.fpr,
            p.memory,
            p.generations
        );
    }
}
