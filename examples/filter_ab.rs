//! One filter configuration's test-then-insert rate, for A/B runs: build the
//! two versions to compare, copy each binary aside, and run them alternately
//! several times (the machines are noisy; alternate, never compare runs taken
//! minutes apart).
//!
//! `cargo run --release --example filter_ab -- BITS standard|blocked KIB`
//! (defaults: 8 blocked 256). The filter gets the window that fills it to 1%
//! FPR with k = 7 (narrow timers: shortened by W/(W + 1), as in
//! `benches/filter.rs`), is warmed up through one window of fresh random
//! 16-byte keys, then timed over 5 × 2000 batches of 4096 events through
//! `observe_batch`, hashing included and key generation subtracted; the best
//! of the 5 is printed, with the hash alone, the cost of a tick (the sweep)
//! and the FPR over all events (every key is new).

use dedupd::filter::{Event, FilterSpec, Growth, KeyHash, Layout, SlidingFilter, Verdict};
use dedupd::testkit::workload::Rng;
use std::time::Instant;
const BATCH: usize = 4096;
fn keys(rng: &mut Rng, n: usize) -> Vec<[u8; 16]> {
    (0..n).map(|_| rng.key16()).collect()
}
/// One batch of fresh keys, one event per ms, through `observe_batch`.
fn observe_fresh(
    f: &mut SlidingFilter,
    rng: &mut Rng,
    clock: &mut u64,
    events: &mut Vec<Event>,
    out: &mut Vec<Verdict>,
) {
    let seed = f.params().seed;
    events.clear();
    for k in &keys(rng, BATCH) {
        *clock += 1;
        events.push(Event { hash: KeyHash::of(seed, k), time_ms: *clock });
    }
    out.clear();
    f.observe_batch(events, out);
}

fn main() {
    let bits: u8 = std::env::args().nth(1).map(|s| s.parse().expect("BITS: a timer width, 4 to 32")).unwrap_or(8);
    let blocked = std::env::args().nth(2).map(|s| s == "blocked").unwrap_or(true);
    let kib: u64 = std::env::args().nth(3).map(|s| s.parse().expect("KIB: bytes of cells in KiB")).unwrap_or(256);
    let bytes = kib << 10;
    let cells = bytes * 8 / u64::from(bits);
    let nkeys = (cells as f64 / 9.585) as u64;
    let probe = FilterSpec { window_ms: nkeys, expected_keys: nkeys, timer_bits: bits, ..FilterSpec::default() };
    let w = f64::from(probe.resolve().expect("filter settings").window_ticks);
    let window_ms = (nkeys as f64 * w / (w + 1.0)) as u64;
    let layout = if blocked { Layout::Blocked } else { Layout::Standard };
    let spec = FilterSpec {
        window_ms,
        expected_keys: nkeys,
        total_cells: Some(cells),
        hashes: Some(7),
        timer_bits: bits,
        growth: Growth::None,
        layout,
        ..FilterSpec::default()
    };
    let mut f = SlidingFilter::new(spec.resolve().expect("filter settings"));
    let seed = f.params().seed;
    let mut rng = Rng::new(1);
    let mut clock = 1_000_000u64;
    let pool: Vec<Vec<[u8; 16]>> = (0..64).map(|_| keys(&mut rng, BATCH)).collect();
    let mut events = Vec::with_capacity(BATCH);
    let mut out = Vec::with_capacity(BATCH);
    // Warm-up: one window and a little more, fresh keys.
    for _ in 0..(nkeys as usize / BATCH + 2) {
        observe_fresh(&mut f, &mut rng, &mut clock, &mut events, &mut out);
    }
    let rounds = 2000;
    let mut best_full = f64::MAX;
    let mut best_hash = f64::MAX;
    for rep in 0..5 {
        let t = Instant::now();
        let mut acc = 0u64;
        for r in 0..rounds {
            let ks = &pool[(r + rep * 7) % 64];
            for k in ks {
                acc ^= KeyHash::of(seed, k).h1;
            }
        }
        std::hint::black_box(acc);
        best_hash = best_hash.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for _ in 0..rounds {
            observe_fresh(&mut f, &mut rng, &mut clock, &mut events, &mut out);
        }
        let el = t.elapsed().as_secs_f64();
        // subtract key generation
        let t = Instant::now();
        for _ in 0..rounds {
            std::hint::black_box(keys(&mut rng, BATCH));
        }
        let kg = t.elapsed().as_secs_f64();
        best_full = best_full.min(el - kg);
    }
    let n = (rounds * BATCH) as f64;
    let tick = f.params().tick_ms;
    let t = Instant::now();
    for _ in 0..2000 {
        clock += tick;
        f.advance(clock);
    }
    let per_tick = t.elapsed().as_secs_f64() / 2000.0;
    println!(
        "tick {} ms: {:.0} ns per tick = {:.2} ns per event; sweep_ticks {}",
        tick,
        per_tick * 1e9,
        per_tick * 1e9 / tick as f64,
        f.params().sweep_ticks
    );
    let c = f.counters();
    println!(
        "{bits}bit blocked={blocked} {kib}KiB: full {:.1} M/s ({:.2} ns/ev), hash only {:.1} M/s ({:.2} ns), fpr {:.3}%",
        n / best_full / 1e6,
        best_full / n * 1e9,
        n / best_hash / 1e6,
        best_hash / n * 1e9,
        100.0 * c.duplicates as f64 / c.events as f64
    );
}
