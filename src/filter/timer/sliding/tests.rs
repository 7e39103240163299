//! Tests of a slice's filter: the window, late events, growth and its cap, batches, deletes, lookups.

use super::*;
use crate::filter::hash::DEFAULT_SEED;
use crate::filter::timer::params::{FilterSpec, Growth};

fn filter(spec: FilterSpec) -> SlidingFilter {
    SlidingFilter::new(spec.resolve().unwrap())
}

fn key(i: u64) -> KeyHash {
    KeyHash::of(DEFAULT_SEED, &i.to_le_bytes())
}

#[test]
fn duplicates_inside_the_window_only() {
    let mut f = filter(FilterSpec { window_ms: 1000, expected_keys: 100, tick_ms: Some(10), ..FilterSpec::default() });
    assert_eq!(f.observe(&key(1), 5_000), Verdict::Distinct);
    assert!(!f.observe(&key(1), 5_999).is_distinct());
    // One tick of slack at most: alive through 5000/10 + 100 ticks.
    assert!(!f.observe(&key(1), 6_009).is_distinct());
    assert_eq!(f.observe(&key(1), 6_010), Verdict::Distinct);
    // The window runs from the delivered occurrence: duplicates do not renew it.
    assert!(!f.observe(&key(1), 7_000).is_distinct());
    assert!(!f.observe(&key(1), 7_019).is_distinct());
    assert_eq!(f.observe(&key(1), 7_020), Verdict::Distinct);
    let c = f.counters();
    assert_eq!((c.events, c.distinct, c.duplicates), (7, 3, 4));
    assert_eq!(c.equal_timer_counts[f.params().hashes as usize], 4);
}

#[test]
fn late_events_use_the_clock() {
    let mut f = filter(FilterSpec { window_ms: 1000, expected_keys: 100, ..FilterSpec::default() });
    f.observe(&key(1), 10_000);
    assert_eq!(f.observe(&key(2), 1_000), Verdict::Distinct);
    assert!(!f.observe(&key(2), 10_900).is_distinct(), "key 2 was set at the clock, 10 000");
    assert_eq!(f.counters().late_events, 1);
    assert_eq!(f.clock_ms(), Some(10_900));
}

/// With lateness, an event behind the clock is judged at its own time:
/// its copy 900 ms before it is inside its window even though the
/// clock has moved 1.5 s past it; without lateness it is judged at the
/// clock, where that copy has expired.
#[test]
fn late_events_are_judged_at_their_own_time_with_lateness() {
    let spec =
        FilterSpec { window_ms: 1000, expected_keys: 100, tick_ms: Some(10), timer_bits: 16, ..FilterSpec::default() };
    for (lateness, want_duplicate) in [(None, false), (Some(2_000), true)] {
        let mut f = filter(FilterSpec { lateness_ms: lateness, ..spec.clone() });
        f.observe(&key(1), 10_000);
        f.observe(&key(2), 11_000);
        f.observe(&key(3), 12_400);
        let v = f.observe(&key(1), 10_900);
        assert_eq!(!v.is_distinct(), want_duplicate, "lateness {lateness:?}: {v:?}");
        assert_eq!(f.clock_ms(), Some(12_400));
        assert_eq!(f.counters().late_events, 1);
    }
    // A late key is inserted at its own time: alive until its time + the
    // window, not the clock's.
    let mut f = filter(FilterSpec { lateness_ms: Some(2_000), ..spec.clone() });
    f.observe(&key(9), 20_000);
    assert!(f.observe(&key(5), 19_000).is_distinct());
    assert!(!f.observe(&key(5), 19_500).is_distinct(), "inside its window at its own time");
    assert!(!f.observe(&key(5), 20_009).is_distinct(), "one tick of slack");
    assert!(f.observe(&key(5), 20_010).is_distinct(), "its window ran from 19 000, not 20 000");
    // A later copy already delivered makes an earlier late one a duplicate,
    // and the late insert never makes a newer cell older.
    let mut f = filter(FilterSpec { lateness_ms: Some(2_000), ..spec });
    f.observe(&key(7), 30_000);
    f.observe(&key(8), 31_000);
    let before = f.clone();
    assert!(!f.observe(&key(7), 29_500).is_distinct());
    assert_eq!(f.generations, before.generations, "a duplicate changes no cell");
    assert!(f.observe(&key(6), 30_500).is_distinct());
    assert!(!f.observe(&key(6), 31_400).is_distinct());
    assert!(f.observe(&key(6), 31_510).is_distinct());
}

/// No false negative for a late event within the lateness: whenever its
/// key was delivered less than the window before its own time (at or
/// before it), it is a duplicate — whatever the width and layout.
#[test]
fn no_false_negative_for_late_events_within_the_lateness() {
    use crate::filter::timer::params::Layout;
    use crate::testkit::workload::Rng;
    use std::collections::HashMap;
    for bits in [4u8, 8, 16] {
        for layout in [Layout::Standard, Layout::Blocked] {
            let (window_ms, lateness_ms) = (2_000u64, 1_500u64);
            let spec = FilterSpec {
                window_ms,
                expected_keys: 400,
                timer_bits: bits,
                layout,
                growth: Growth::None,
                lateness_ms: Some(lateness_ms),
                ..FilterSpec::default()
            };
            let mut f = filter(spec);
            let tick = f.params().tick_ms;
            let mut delivered: HashMap<u64, Vec<u64>> = HashMap::new();
            let (mut rng, mut now, mut late_checked) = (Rng::new(u64::from(bits) + 100), 100_000u64, 0);
            for _ in 0..20_000 {
                now += rng.below(3);
                let k = rng.below(500);
                // Late by up to the lateness, counted in whole ticks behind the clock.
                let late = rng.below(4) == 0;
                let t = if late { now.saturating_sub(rng.below(lateness_ms / tick * tick + 1)) } else { now };
                let v = f.observe(&key(k), t);
                let times = delivered.entry(k).or_default();
                if late && t < now {
                    let covered = times.iter().any(|&d| d <= t && t - d < window_ms);
                    if covered {
                        late_checked += 1;
                        assert!(
                            !v.is_distinct(),
                            "{bits}-bit {layout:?}: key {k} at {t} (clock {now}) delivered at {times:?}"
                        );
                    }
                }
                if v.is_distinct() {
                    times.push(t);
                }
            }
            assert!(late_checked > 500, "{bits}-bit {layout:?}: only {late_checked} late events checked");
        }
    }
}

/// In-order events (never behind the clock) get exactly the verdicts and
/// counters whether lateness is on or not: with no disorder, lateness
/// changes no output.
#[test]
fn lateness_changes_nothing_for_ordered_events() {
    use crate::filter::timer::params::Layout;
    use crate::testkit::workload::Rng;
    for bits in [4u8, 6, 8, 16, 32] {
        for layout in [Layout::Standard, Layout::Blocked] {
            for (growth, equal_timers) in [(Growth::Density, 0), (Growth::Cardinality, 3)] {
                let spec = FilterSpec {
                    window_ms: 2_000,
                    expected_keys: 300,
                    timer_bits: bits,
                    layout,
                    growth,
                    equal_timers,
                    ..FilterSpec::default()
                };
                let (mut plain, mut late) =
                    (filter(spec.clone()), filter(FilterSpec { lateness_ms: Some(500), ..spec }));
                let (mut rng, mut now) = (Rng::new(u64::from(bits)), 50_000u64);
                let (mut a, mut b) = (Vec::new(), Vec::new());
                let mut batch = Vec::new();
                for i in 0..8_000u64 {
                    now += if rng.below(500) == 0 { 3_000 } else { rng.below(3) };
                    let universe = if (i / 1_000) % 2 == 1 { 6_000 } else { 600 };
                    let e = Event { hash: key(rng.below(universe)), time_ms: now };
                    a.push(plain.observe(&e.hash, e.time_ms));
                    batch.push(e);
                    if batch.len() == 61 {
                        late.observe_batch(&batch, &mut b);
                        batch.clear();
                    }
                }
                late.observe_batch(&batch, &mut b);
                assert_eq!(a, b, "{bits}-bit {layout:?} {growth:?}");
                assert_eq!(plain.counters(), late.counters());
            }
        }
    }
}

#[test]
fn density_growth_adds_and_drops_generations() {
    let spec = FilterSpec { window_ms: 1000, expected_keys: 1000, tick_ms: Some(10), ..FilterSpec::default() };
    let mut f = filter(spec);
    for i in 0..5_000 {
        f.observe(&key(i), 100_000 + i / 10);
    }
    assert!(f.generations().len() > 1, "5× the expected keys in the window must grow the filter");
    let c = f.counters().clone();
    assert!(c.generations_created as usize >= f.generations().len());
    // Quiet period longer than the window: everything expires.
    f.observe(&key(u64::MAX), 200_000);
    assert_eq!(f.generations().len(), 1);
    assert_eq!(f.generations()[0].level(), 0);
    assert!(f.counters().generations_dropped >= c.generations_created - 1);
}

#[test]
fn the_cap_bounds_generations_and_counts_saturation() {
    let spec = FilterSpec {
        window_ms: 1_000_000,
        expected_keys: 100,
        max_generations: 2,
        tick_ms: Some(10_000),
        ..FilterSpec::default()
    };
    let mut f = filter(spec);
    for i in 0..10_000 {
        f.observe(&key(i), 1_000 + i);
    }
    assert_eq!(f.generations().len(), 2);
    assert!(f.counters().saturated_inserts > 0);
    assert_eq!(f.counters().generations_max, 2);
}

/// `observe_batch` takes a compiled run for one generation within a
/// tick; whatever the widths, layouts, growth, cap, batch sizes, late
/// events, clock jumps and duplicates, it must leave exactly the state
/// and verdicts of `observe` one event at a time.
#[test]
fn observe_batch_is_observe_in_turn() {
    use crate::filter::timer::params::Layout;
    use crate::testkit::workload::Rng;
    let mut runs = 0;
    for bits in [4u8, 6, 8, 16, 32] {
        for layout in [Layout::Standard, Layout::Blocked] {
            // k = 7 runs compiled with k as a constant, 5 with k read at run time.
            for (growth, max_generations, hashes) in [
                (Growth::Density, 4, 7),
                (Growth::Cardinality, 3, 5),
                (Growth::Density, 1, 5),
                (Growth::None, 1, 7),
                (Growth::Density, 4, 5),
                (Growth::None, 1, 5),
            ] {
                let spec = FilterSpec {
                    hashes: Some(hashes),
                    window_ms: 2_000,
                    expected_keys: 300,
                    timer_bits: bits,
                    layout,
                    growth,
                    max_generations,
                    equal_timers: 2,
                    // Every other stream judges late events at their own time.
                    lateness_ms: (hashes == 5).then_some(1_000),
                    ..FilterSpec::default()
                };
                let (mut one, mut batched) = (filter(spec.clone()), filter(spec));
                let (mut rng, mut now, mut pending) = (Rng::new(u64::from(bits)), 50_000u64, Vec::new());
                let (mut want, mut got) = (Vec::new(), Vec::new());
                for i in 0..6_000u64 {
                    now += if rng.below(500) == 0 { 3_000 } else { rng.below(3) };
                    let t = if rng.below(30) == 0 { now.saturating_sub(rng.below(1_500)) } else { now };
                    // Bursts of new keys overfill the filter (growth, the cap).
                    let universe = if (i / 1_000) % 2 == 1 { 6_000 } else { 600 };
                    let e = Event { hash: key(rng.below(universe)), time_ms: t };
                    want.push(one.observe(&e.hash, e.time_ms));
                    pending.push(e);
                    if rng.below(40) == 0 {
                        batched.observe_batch(&pending, &mut got);
                        pending.clear();
                    }
                }
                batched.observe_batch(&pending, &mut got);
                let name = format!("{bits}-bit {layout:?} {growth:?} cap {max_generations} k {hashes}");
                assert_eq!(got, want, "{name}: verdicts");
                assert_eq!(batched, one, "{name}: state");
                let c = one.counters();
                assert!(c.duplicates > 100 && c.late_events > 100, "{name}: {c:?}");
                runs += usize::from(c.generations_created > 1 || c.saturated_inserts > 0);
            }
        }
    }
    assert!(runs >= 30, "growth or saturation in {runs} of 60 streams");
}

fn deletable(spec: FilterSpec) -> SlidingFilter {
    filter(FilterSpec { deletable: true, ..spec })
}

#[test]
fn delete_lets_the_next_copy_through_and_changes_no_other_verdict() {
    let spec = FilterSpec { window_ms: 10_000, expected_keys: 2_000, tick_ms: Some(100), ..FilterSpec::default() };
    let (mut plain, mut counting) = (filter(spec.clone()), deletable(spec));
    let mut rng = crate::filter::random::Rng::new(16);
    let mut t = 1_000;
    for _ in 0..1_500 {
        t += rng.below(3);
        let k = key(rng.below(1_000));
        assert_eq!(plain.observe(&k, t), counting.observe(&k, t), "counting cells change no verdict");
    }
    // Keys seen so far (all inside the window): delete some, then every
    // key comes again.
    let seen: Vec<u64> = (0..1_000).filter(|&i| counting.lookup(&key(i)).duplicate).collect();
    assert!(seen.len() > 600);
    let mut deleted = Vec::new();
    for &i in seen.iter().step_by(10) {
        match counting.delete(&key(i)) {
            Ok(()) => deleted.push(i),
            Err(why) => panic!("key {i}: {why}"),
        }
    }
    assert_eq!(plain.delete(&key(seen[0])), Err(DeleteRefusal::NotDeletable));
    for &i in &seen {
        let (p, c) = (plain.observe(&key(i), t), counting.observe(&key(i), t));
        assert!(!p.is_distinct(), "key {i} without delete");
        if deleted.contains(&i) {
            assert!(c.is_distinct(), "deleted key {i} is delivered again");
        } else {
            // (The equal-timer count may differ: a deleted key sent
            // again refreshes the cells it shares.)
            assert_eq!(p.is_distinct(), c.is_distinct(), "key {i} not deleted: same verdict");
        }
    }
    // Delivered again, a deleted key is in the window again.
    assert!(counting.lookup(&key(deleted[0])).duplicate);
    let never = (5_000..).map(key).find(|k| !counting.lookup(k).duplicate).unwrap();
    assert_eq!(counting.delete(&never), Err(DeleteRefusal::Absent));
    // Expired keys are absent too.
    counting.advance(t + 20_000);
    assert_eq!(counting.delete(&key(seen[1])), Err(DeleteRefusal::Absent));
}

#[test]
fn delete_refuses_a_key_two_generations_hold() {
    let mut f = deletable(FilterSpec { window_ms: 1000, expected_keys: 100, ..FilterSpec::default() });
    f.observe(&key(1), 10);
    f.push_generation(0);
    let now = f.now();
    let k = f.params.hashes;
    let (alive, newest) = (f.alive.clone(), f.generations.last_mut().unwrap());
    newest.count_insert(&key(1), k, &now);
    newest.insert(&key(1), k, &now, &alive);
    let before = f.clone();
    assert_eq!(f.delete(&key(1)), Err(DeleteRefusal::Ambiguous));
    assert_eq!(f, before, "a refused delete changes nothing");
}

#[test]
fn counts_saturate_and_are_never_decremented_past_saturation() {
    let mut f = deletable(FilterSpec { window_ms: 1000, expected_keys: 100, ..FilterSpec::default() });
    f.observe(&key(1), 10);
    let now = f.now();
    let k = f.params.hashes;
    let g = &mut f.generations[0];
    for _ in 0..300 {
        g.count_insert(&key(1), k, &now);
    }
    f.delete(&key(1)).unwrap();
    // Saturated: the cells stay, so the key stays (no false negative for
    // the inserts the counter could not count).
    assert!(f.lookup(&key(1)).duplicate);
}

#[test]
fn lookup_does_not_insert() {
    let mut f = filter(FilterSpec { window_ms: 1000, expected_keys: 100, ..FilterSpec::default() });
    f.observe(&key(1), 10);
    let before = f.clone();
    let hit = f.lookup(&key(1));
    assert!(hit.duplicate);
    assert_eq!(hit.alive_cells, f.params().hashes);
    assert!(!f.lookup(&key(2)).duplicate);
    assert_eq!(f, before);
}

/// Without the equal-timer count (pipe mode without figures), a batch
/// judges every event as with it and leaves the same cells; only the
/// counts differ. A threshold that needs the count takes it anyway.
#[test]
fn equal_timer_counts_off_change_no_verdict() {
    use crate::testkit::workload::Rng;
    for equal_timers in [0, 3] {
        // One generation and long ticks: the batch runs judge most events.
        let spec = FilterSpec {
            window_ms: 60_000,
            tick_ms: Some(1_000),
            expected_keys: 300,
            equal_timers,
            ..FilterSpec::default()
        };
        let (mut counted, mut uncounted) = (filter(spec.clone()), filter(spec));
        uncounted.count_equal_timers(false);
        let (mut rng, mut now) = (Rng::new(7), 50_000u64);
        let (mut want, mut got) = (Vec::new(), Vec::new());
        for _ in 0..40 {
            let batch: Vec<Event> = (0..100)
                .map(|_| {
                    now += rng.below(3);
                    Event { hash: key(rng.below(200)), time_ms: now }
                })
                .collect();
            counted.observe_batch(&batch, &mut want);
            uncounted.observe_batch(&batch, &mut got);
        }
        let kinds = |v: &[Verdict]| v.iter().map(|v| v.is_distinct()).collect::<Vec<_>>();
        assert_eq!(kinds(&got), kinds(&want), "equal_timers {equal_timers}: verdicts");
        assert_eq!(uncounted.generations(), counted.generations(), "equal_timers {equal_timers}: cells");
        let uncounted_zero = got.iter().filter(|v| **v == Verdict::Duplicate { equal_timers: 0 }).count();
        let duplicates = want.iter().filter(|v| !v.is_distinct()).count();
        assert!(duplicates > 500, "{duplicates} duplicates");
        if equal_timers == 0 {
            assert!(uncounted_zero * 10 > duplicates * 9, "{uncounted_zero} of {duplicates} not counted");
        } else {
            assert_eq!(got, want, "a threshold takes the count");
        }
    }
}
