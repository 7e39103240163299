//! Per-event test-then-insert through `SlidingFilter::observe`, the path
//! the slice engine takes (growth and lateness on), for A/B runs of two
//! builds (copy each binary aside and alternate them, as with `filter_ab`).
//! 2 M events over 60 s of event time into a filter sized for 1 M keys per
//! 60 s window: half are copies of one of the last 100 000 keys, 1 in 50
//! comes up to 1.5 s behind the clock. Keys, hashes and times are made
//! before timing; each of 5 repetitions starts a fresh filter; the best is
//! printed as ns per event, with the verdict counts (equal across builds
//! that judge alike).
//!
//! `cargo run --release --example observe_ab`

use dedupd::filter::{FilterSpec, KeyHash, SlidingFilter, Verdict};
use dedupd::testkit::workload::Rng;
use std::time::Instant;

fn main() {
    let spec =
        FilterSpec { window_ms: 60_000, expected_keys: 1_000_000, lateness_ms: Some(2_000), ..FilterSpec::default() };
    let params = spec.resolve().expect("filter settings");
    let seed = SlidingFilter::new(params.clone()).params().seed;
    let mut rng = Rng::new(7);
    let n: u64 = 2_000_000;
    let mut recent: Vec<[u8; 16]> = Vec::with_capacity(100_000);
    let events: Vec<(KeyHash, u64)> = (0..n)
        .map(|i| {
            let key = if !recent.is_empty() && rng.below(2) == 0 {
                recent[rng.below(recent.len() as u64) as usize]
            } else {
                let k = rng.key16();
                if recent.len() < 100_000 {
                    recent.push(k);
                } else {
                    recent[rng.below(100_000) as usize] = k;
                }
                k
            };
            let mut t = 1_000_000 + i * 3 / 100;
            if rng.below(50) == 0 {
                t -= rng.below(1_500);
            }
            (KeyHash::of(seed, &key), t)
        })
        .collect();
    let mut best = f64::MAX;
    let mut counts = (0u64, 0u64);
    for _ in 0..5 {
        let mut f = SlidingFilter::new(params.clone());
        let (mut distinct, mut duplicates) = (0u64, 0u64);
        let start = Instant::now();
        for (hash, t) in &events {
            match f.observe(hash, *t) {
                Verdict::Distinct => distinct += 1,
                _ => duplicates += 1,
            }
        }
        best = best.min(start.elapsed().as_secs_f64() * 1e9 / n as f64);
        counts = (distinct, duplicates);
    }
    println!("observe_ab ns_per_event={best:.1} distinct={} duplicates={}", counts.0, counts.1);
}
