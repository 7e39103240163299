//! Tests of one generation: the age rule, the live count, equal timers.

use super::*;
use crate::filter::hash::DEFAULT_SEED;
use crate::filter::timer::params::FilterSpec;

fn params(bits: u8) -> FilterParams {
    FilterSpec {
        window_ms: 10_000,
        expected_keys: 1000,
        timer_bits: bits,
        tick_ms: Some(1000),
        ..FilterSpec::default()
    }
    .resolve()
    .unwrap()
}

#[test]
fn alive_intervals_match_the_age_rule() {
    for (bits, window_ms) in [(4u8, 60_000), (5, 1_000), (8, 60_000), (8, 7), (12, 60_000), (32, 100_000)] {
        let p = FilterSpec { timer_bits: bits, window_ms, ..FilterSpec::default() }.resolve().unwrap();
        let (w, r) = (p.window_ticks, p.period);
        let mut table = AliveTable::at(&Now::at(0, &p));
        for tick in 0..u64::from(r) * 2 + 3 {
            let now = Now::at(tick, &p);
            let probe = (0..=r.min(600)).chain(r.saturating_sub(600)..=r);
            for v in probe {
                let age = if now.value >= v { now.value - v } else { now.value + r - v };
                let alive = v != 0 && age <= w;
                assert_eq!(now.is_alive(v), alive, "bits {bits} tick {tick} value {v}");
                assert_eq!(now.is_dead(v), v != 0 && !alive, "bits {bits} tick {tick} value {v}");
            }
            // The table follows the same rule, stepped tick by tick.
            if tick == 0 {
                table = AliveTable::at(&now);
            } else {
                table.step(&now);
            }
            assert_eq!(table, AliveTable::at(&now), "bits {bits} tick {tick}");
        }
    }
}

/// The histogram's alive buckets and the live count equal a recount of
/// the cells after every tick, through densities from empty to
/// saturated, repeated positions (a small blocked filter repeats one in
/// ~8% of keys) and many periods of the timer values.
#[test]
fn histogram_alive_buckets_match_a_recount() {
    for (bits, layout) in [(4u8, Layout::Standard), (4, Layout::Blocked), (8, Layout::Blocked), (12, Layout::Standard)]
    {
        let p = FilterSpec {
            window_ms: 10_000,
            expected_keys: 300,
            timer_bits: bits,
            tick_ms: Some(if bits == 4 { 2000 } else { 500 }),
            layout,
            ..FilterSpec::default()
        }
        .resolve()
        .unwrap();
        let mut g = Generation::new(0, &p);
        let mut key = 0u64;
        for tick in 1_000..1_000 + 3 * u64::from(p.period) {
            let now = Now::at(tick, &p);
            g.step(&now, p.sweep_ticks);
            let table = AliveTable::at(&now);
            // Load varies with time: from a trickle to far past the design load.
            for _ in 0..(tick * 37 % 97) {
                key += 1;
                g.insert(&KeyHash::of(DEFAULT_SEED, &key.to_le_bytes()), p.hashes, &now, &table);
            }
            let mut recount = vec![0u32; p.period as usize + 1];
            with_cells!(&g.cells, c => {
                for i in 0..g.m as usize {
                    recount[c.get(i) as usize] += 1;
                }
            });
            let alive = || (1..=p.period).filter(|&v| now.is_alive(v));
            for v in alive() {
                assert_eq!(g.hist[v as usize], recount[v as usize], "bits {bits} {layout:?} tick {tick} value {v}");
            }
            let live: u32 = alive().map(|v| recount[v as usize]).sum();
            assert_eq!(g.live_cells(), u64::from(live), "bits {bits} {layout:?} tick {tick}");
        }
    }
}

#[test]
fn most_equal_counts_the_largest_group() {
    assert_eq!(most_equal(&mut [3, 1, 3, 2, 3, 1]), 3);
    assert_eq!(most_equal(&mut [1, 2, 3]), 1);
    assert_eq!(most_equal(&mut [5]), 1);
}

/// The pairwise count of few values and the sort of more agree with a
/// count of every value's copies, over every length up to 12 (zeros
/// included: the pairwise lanes' padding must not count).
#[test]
fn most_equal_agrees_with_counting_copies() {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    for len in 1..=12usize {
        for _ in 0..2_000 {
            let values: Vec<u32> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state % 4) as u32
                })
                .collect();
            let copies = values.iter().map(|v| values.iter().filter(|&w| w == v).count() as u32).max().unwrap();
            assert_eq!(most_equal(&mut values.clone()), copies, "{values:?}");
        }
    }
}

#[test]
fn cells_live_exactly_window_ticks_and_the_count_follows() {
    for bits in [4u8, 8, 12, 16, 32] {
        let p = params(bits);
        let w = u64::from(p.window_ticks);
        let mut g = Generation::new(0, &p);
        let key = KeyHash::of(DEFAULT_SEED, b"a");
        let start = 1_000_000;
        let now = Now::at(start, &p);
        assert_eq!(g.probe(&key, p.hashes, &now).alive, 0);
        g.insert(&key, p.hashes, &now, &AliveTable::at(&now));
        let live = g.live_cells();
        assert!(live >= 1 && live <= u64::from(p.hashes));
        for t in start + 1..=start + w {
            let now = Now::at(t, &p);
            g.step(&now, p.sweep_ticks);
            assert_eq!(
                g.probe(&key, p.hashes, &now),
                Probed { alive: p.hashes, equal: p.hashes },
                "bits {bits} tick {t}"
            );
            assert_eq!(g.live_cells(), live);
        }
        // Run long past the period: the key must die at W+1 and never come back.
        for t in start + w + 1..start + 5 * u64::from(p.period) {
            let now = Now::at(t, &p);
            g.step(&now, p.sweep_ticks);
            assert_eq!(g.probe(&key, p.hashes, &now).alive, 0, "bits {bits} tick {t}");
            assert_eq!(g.live_cells(), 0);
        }
        let now = Now::at(start + 5 * u64::from(p.period), &p);
        assert!(
            (0..=p.period).filter(|&v| now.is_alive(v)).all(|v| g.hist[v as usize] == 0),
            "no alive value counts a cell"
        );
        with_cells!(&g.cells, c => assert!((0..g.m as usize).all(|i| c.get(i) == 0), "the sweep cleared every cell"));
    }
}
