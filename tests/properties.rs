//! Property tests of the filter engine: no false negatives, snapshots that
//! restore bit for bit, and no panics on arbitrary input.

use std::collections::HashMap;

use dedupd::engine::{Deduplicator, Extractor, OrderSettings, RecordView};
use dedupd::filter::timer::snapshot;
use dedupd::filter::{FilterSpec, Growth, KeyHash, Layout, SlicedFilter, SlidingFilter, Verdict};
use proptest::prelude::*;

fn growth() -> impl Strategy<Value = Growth> {
    prop_oneof![Just(Growth::Density), Just(Growth::Cardinality), Just(Growth::None)]
}

fn layout() -> impl Strategy<Value = Layout> {
    prop_oneof![Just(Layout::Standard), Just(Layout::Blocked)]
}

/// Small filters (so they fill, grow and expire) in every timer width and
/// both layouts.
fn spec() -> impl Strategy<Value = FilterSpec> {
    (4u8..=32, 1u64..5_000, 5u64..400, growth(), 1u32..4, prop::option::of(1u64..50), 1u32..6, layout()).prop_map(
        |(timer_bits, window_ms, expected_keys, growth, slices, tick_ms, max_generations, layout)| {
            // The blocked layout takes the widths that tile a cache line.
            let timer_bits =
                if layout == Layout::Blocked { [4, 8, 16, 32][usize::from(timer_bits % 4)] } else { timer_bits };
            FilterSpec {
                window_ms,
                expected_keys,
                growth,
                slices,
                timer_bits,
                // Coarse ticks need wide windows in narrow timers: let resolve() pick when unsure.
                tick_ms: tick_ms.filter(|t| window_ms.div_ceil(*t) < (1u64 << timer_bits) - 4),
                max_generations,
                layout,
                ..FilterSpec::default()
            }
        },
    )
}

/// Events as (key, time step): keys from a small universe so copies recur.
fn events(max: usize) -> impl Strategy<Value = Vec<(u16, u16)>> {
    prop::collection::vec((0u16..300, prop_oneof![8 => 0u16..20, 1 => 0u16..10_000]), 1..max)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// With equal timers off, a copy of a key the filter delivered less than
    /// one window ago is always a duplicate, whatever the growth, slicing,
    /// timer width, tick or load.
    #[test]
    fn no_false_negatives_inside_the_window(spec in spec(), events in events(3_000)) {
        let mut filter = SlicedFilter::new(&spec).unwrap();
        let mut delivered: HashMap<u16, u64> = HashMap::new();
        let mut now = 1_000_000u64;
        for (key, step) in events {
            now += u64::from(step);
            let hash = KeyHash::of(spec.seed, &key.to_le_bytes());
            let verdict = filter.observe(&hash, now);
            if let Some(&t) = delivered.get(&key) && now - t < spec.window_ms {
                prop_assert!(!verdict.is_distinct(), "key {} delivered at {} came back at {} as distinct", key, t, now);
            }
            if verdict.is_distinct() {
                delivered.insert(key, now);
            }
        }
    }

    /// Snapshot, restore, and carry on: the same verdicts and bit-identical
    /// state as the filter that never stopped.
    #[test]
    fn snapshot_restore_continues_identically(
        spec in spec(),
        equal_timers in 0u32..4,
        events in events(2_000),
        split in any::<prop::sample::Index>(),
    ) {
        let spec = FilterSpec { slices: 1, equal_timers, ..spec };
        let params = spec.resolve().unwrap();
        let mut whole = SlidingFilter::new(params.clone());
        let split = split.index(events.len());
        let mut now = 5_000u64;
        let mut times = Vec::new();
        for (_, step) in &events {
            now += u64::from(*step);
            times.push(now);
        }
        let hash = |k: u16| KeyHash::of(spec.seed, &k.to_le_bytes());
        for ((key, _), t) in events[..split].iter().zip(&times) {
            whole.observe(&hash(*key), *t);
        }
        let bytes = snapshot::encode(&whole);
        let mut restored = snapshot::decode(&bytes, &params).unwrap();
        prop_assert_eq!(&restored, &whole);
        for ((key, _), t) in events[split..].iter().zip(&times[split..]) {
            let a: Verdict = whole.observe(&hash(*key), *t);
            let b: Verdict = restored.observe(&hash(*key), *t);
            prop_assert_eq!(a, b);
        }
        prop_assert_eq!(&restored, &whole);
        prop_assert_eq!(snapshot::encode(&restored), snapshot::encode(&whole));
    }

    /// Arbitrary bytes as records, any key and time source: an outcome per
    /// record, never a panic.
    #[test]
    fn arbitrary_records_never_panic(
        lines in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 1..64),
        json in prop::collection::vec(("[a-z\"{}:,0-9 -]{0,40}", any::<i64>()), 0..32),
        key in prop::sample::select(vec!["line", "json:/id", "json:/a/b", "json:", "record-key", "header:h"]),
        time in prop::sample::select(vec!["arrival", "json:/ts", "record-timestamp"]),
    ) {
        let spec = FilterSpec { window_ms: 1_000, expected_keys: 50, slices: 2, ..FilterSpec::default() };
        let extractor = Extractor { key: key.parse().unwrap(), time: time.parse().unwrap(), max_record_bytes: 48 };
        let order = OrderSettings { lateness_ms: 100, max_clock_jump_ms: 1_000, jump_confirmations: 2 };
        let mut d = Deduplicator::new(SlicedFilter::new(&spec).unwrap(), extractor, order);
        let mut payloads: Vec<Vec<u8>> = lines;
        for (text, ts) in json {
            payloads.push(format!("{{\"id\":\"{text}\",\"ts\":{ts}}}").into_bytes());
            payloads.push(format!("{{\"id\":{ts},\"ts\":\"{text}\"}}").into_bytes());
        }
        let views: Vec<RecordView> = payloads
            .iter()
            .map(|p| RecordView { payload: p, key: p.get(..3), timestamp_ms: p.first().map(|b| i64::from(*b) - 100), ..Default::default() })
            .collect();
        let mut out = Vec::new();
        d.push_batch(&views, u64::MAX - 5, &mut out);
        d.finish(&mut out);
        let mut positions: Vec<u64> = out.iter().map(|j| j.position).collect();
        positions.sort_unstable();
        prop_assert_eq!(positions, (0..views.len() as u64).collect::<Vec<_>>());
    }

    /// Arbitrary and damaged snapshots are refused with an error, never a panic.
    #[test]
    fn damaged_snapshots_are_refused(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let params = FilterSpec { window_ms: 1_000, expected_keys: 20, ..FilterSpec::default() }.resolve().unwrap();
        prop_assert!(snapshot::decode(&bytes, &params).is_err());
        let mut f = SlidingFilter::new(params.clone());
        for i in 0..200u32 {
            f.observe(&KeyHash::of(params.seed, &i.to_le_bytes()), u64::from(i) * 7);
        }
        let good = snapshot::encode(&f);
        let mut bad = good.clone();
        for (at, x) in flips {
            bad[at.index(good.len())] ^= x;
        }
        prop_assert!(snapshot::decode(&bad, &params).is_err());
        prop_assert!(snapshot::decode(&good[..cut.index(good.len())], &params).is_err());
    }

    /// Any times, including the extremes, in any order: no panic, and the
    /// clock only moves forward.
    #[test]
    fn extreme_times_never_panic(spec in spec(), times in prop::collection::vec(any::<u64>(), 1..200)) {
        let mut f = SlidingFilter::new(FilterSpec { slices: 1, ..spec }.resolve().unwrap());
        let mut clock = 0;
        for (i, t) in times.into_iter().enumerate() {
            f.observe(&KeyHash::of(1, &(i % 7).to_le_bytes()), t);
            clock = clock.max(t);
            prop_assert_eq!(f.clock_ms(), Some(clock));
            prop_assert!(f.generations().len() <= spec.max_generations as usize);
        }
    }
}

/// Settings of every kind: a clear error or a working filter, never a panic.
#[test]
fn arbitrary_settings_resolve_or_fail_cleanly() {
    let mut runner = proptest::test_runner::TestRunner::default();
    runner
        .run(
            &(any::<u64>(), any::<f64>(), any::<u64>(), any::<u32>(), any::<u8>(), any::<Option<u64>>(), any::<u32>()),
            |(window_ms, fpr, expected_keys, slices, timer_bits, tick_ms, equal_timers)| {
                let spec = FilterSpec {
                    window_ms,
                    fpr,
                    expected_keys: expected_keys % 10_000_000,
                    slices: slices % 70_000,
                    timer_bits,
                    tick_ms,
                    equal_timers,
                    ..FilterSpec::default()
                };
                for layout in [Layout::Standard, Layout::Blocked] {
                    if let Err(e) = (FilterSpec { layout, ..spec.clone() }).resolve() {
                        assert!(!e.rule.is_empty() && !e.setting.is_empty());
                    }
                }
                Ok(())
            },
        )
        .unwrap();
}
