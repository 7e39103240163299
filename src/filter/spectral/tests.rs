use super::*;
use crate::filter::hash::DEFAULT_SEED;
use crate::filter::random::Rng;
use proptest::prelude::*;
use std::collections::HashMap;

fn key(i: u64) -> KeyHash {
    KeyHash::of(DEFAULT_SEED, &i.to_le_bytes())
}

fn params(estimator: Estimator, counters: u64, bits: u8) -> SpectralParams {
    SpectralParams { estimator, counters, hashes: 5, counter_bits: bits, store: CounterKind::Fixed }
}

#[test]
fn counters_pack_and_saturate() {
    for bits in [4u8, 8, 16, 32] {
        let mut c = Counters::new(100, bits);
        let max = c.max();
        assert_eq!(u64::from(max), (1u64 << bits) - 1);
        c.add(7, 3);
        c.add(8, 5);
        assert_eq!((c.get(6), c.get(7), c.get(8), c.get(9)), (0, 3, 5, 0));
        c.add(7, u32::MAX);
        assert_eq!(c.get(7), max, "saturates");
        c.sub(7, 1);
        assert_eq!(c.get(7), max, "a saturated counter stays saturated");
        c.sub(8, 9);
        assert_eq!(c.get(8), 0);
        assert_eq!(c.saturated(), 1);
    }
}

#[test]
fn exact_counts_when_the_filter_is_sparse() {
    for e in Estimator::ALL {
        let mut f = Spectral::new(&params(e, 1 << 16, 16));
        for i in 0..20u64 {
            f.insert(&key(i), (i + 1) as u32);
        }
        for i in 0..20u64 {
            assert_eq!(f.query(&key(i)), (i + 1) as u32, "{e}");
        }
        assert_eq!(f.query(&key(999)), 0, "{e}");
    }
}

#[test]
fn deletes_restore_and_refuse() {
    let mut ms = Spectral::new(&params(Estimator::Ms, 4096, 8));
    ms.insert(&key(1), 3);
    ms.delete(&key(1), 2).unwrap();
    assert_eq!(ms.query(&key(1)), 1);
    assert_eq!(ms.delete(&key(2), 1), Err(SpectralError::NotPresent { estimate: 0, count: 1 }));
    let mut mi = Spectral::new(&params(Estimator::Mi, 4096, 8));
    mi.insert(&key(1), 3);
    let e = mi.delete(&key(1), 1).unwrap_err();
    assert_eq!(e, SpectralError::DeleteUnsupported);
    assert!(e.to_string().contains("cannot delete"), "{e}");
    assert_eq!(mi.query(&key(1)), 3, "nothing changed");
}

#[test]
fn union_adds_and_refuses_other_shapes() {
    let p = params(Estimator::Ms, 2048, 8);
    let (mut a, mut b) = (Spectral::new(&p), Spectral::new(&p));
    a.insert(&key(1), 2);
    b.insert(&key(1), 3);
    b.insert(&key(2), 1);
    a.union(&b).unwrap();
    assert_eq!((a.query(&key(1)), a.query(&key(2))), (5, 1));
    let c = Spectral::new(&params(Estimator::Ms, 4096, 8));
    assert!(matches!(a.union(&c), Err(SpectralError::Mismatch { what: "counters", .. })));
}

/// Skewed multisets into crowded filters (γ = nk/m from 0.5 to 3): no
/// estimator ever reports less than the true count (no deletes).
fn one_sided(e: Estimator, distinct: u64, m: u64, draws: usize, seed: u64) -> Result<(), TestCaseError> {
    // RM may undercount a key whose B_f bits other keys set late (see
    // the module docs): rare, counted, bounded here; MS and MI never.
    let (under, keys) = skewed_undercounts(e, distinct, m, draws, seed);
    if e == Estimator::Rm {
        // A bound on the worst case, far above any of 20 000 seeded runs
        // (9.3%, `recurring_minimum_undercounts_rarely`): random seeds
        // must not make it flaky. The rate itself is tested there.
        prop_assert!(under * 100 <= keys.max(60) * 15, "rm undercounts {under} of {keys} keys");
    } else {
        prop_assert_eq!(under, 0, "{} undercounts {} of {} keys", e, under, keys);
    }
    Ok(())
}

/// `draws` keys from Zipf(0.8) over `distinct`, 1 to 3 copies each, into
/// an `e` filter of `m` counters: (keys it reports below their true
/// count, keys drawn).
fn skewed_undercounts(e: Estimator, distinct: u64, m: u64, draws: usize, seed: u64) -> (usize, usize) {
    let mut f = Spectral::new(&params(e, m, 16));
    let mut exact: HashMap<u64, u32> = HashMap::new();
    let mut rng = Rng::new(seed);
    let zipf = crate::testkit::workload::Zipf::new(distinct as usize, 0.8);
    for _ in 0..draws {
        let x = zipf.sample(&mut rng);
        let r = 1 + rng.below(3) as u32;
        f.insert(&key(x), r);
        *exact.entry(x).or_default() += r;
    }
    (exact.iter().filter(|&(&x, &n)| f.query(&key(x)) < n).count(), exact.len())
}

/// RM's undercount rate (the module docs' caveat), over fixed seeds so
/// that it cannot flake: the share of keys RM reports below their true
/// count, per crowding γ, as a mean and a worst case over 300 filters.
/// Measured on 4 000 seeds per γ (2026-11-27): mean 1.3–1.5% and worst
/// 7.3–9.3% from γ = 2.2 to 2.8; below γ = 1, none on average.
fn rm_undercounts(load: f64, seeds: u64) -> (f64, f64) {
    let (mut sum, mut worst) = (0.0, 0.0f64);
    for seed in 0..seeds {
        let distinct = 50 + (seed * 7919) % 350;
        let m = counters_for(distinct, 5, load);
        let drawn = seed * 1_000_003 + (load * 10.0) as u64;
        let (under, keys) = skewed_undercounts(Estimator::Rm, distinct, m, distinct as usize * 4, drawn);
        let under = under as f64 / keys as f64;
        sum += under;
        worst = worst.max(under);
    }
    (sum / seeds as f64, worst)
}

#[test]
fn recurring_minimum_undercounts_rarely() {
    let (mean, _) = rm_undercounts(0.7, 300);
    assert!(mean < 0.001, "γ = 0.7: mean undercount share {mean}");
    for load in [1.5, 2.5, 3.0] {
        let (mean, worst) = rm_undercounts(load, 300);
        assert!(mean < 0.025 && worst < 0.12, "γ = {load}: mean {mean}, worst {worst}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn estimates_never_undercount(distinct in 50u64..400, load in 0.5f64..3.0, seed in any::<u64>()) {
        let m = counters_for(distinct, 5, load);
        for e in Estimator::ALL {
            one_sided(e, distinct, m, distinct as usize * 4, seed)?;
        }
    }

    /// MS and RM with deletes: after removing part of each key's copies,
    /// the estimate still bounds the remaining count.
    #[test]
    fn deletes_never_undercount(distinct in 50u64..300, seed in any::<u64>()) {
        for e in [Estimator::Ms, Estimator::Rm] {
            let mut f = Spectral::new(&params(e, counters_for(distinct, 5, 1.0), 16));
            let mut rng = Rng::new(seed);
            let counts: Vec<u32> = (0..distinct).map(|_| 1 + rng.below(6) as u32).collect();
            for (x, &n) in counts.iter().enumerate() {
                f.insert(&key(x as u64), n);
            }
            for (x, &n) in counts.iter().enumerate() {
                f.delete(&key(x as u64), n / 2).unwrap();
            }
            let under = counts.iter().enumerate().filter(|&(x, &n)| f.query(&key(x as u64)) < n - n / 2).count();
            // RM: a B_f false positive deletes from the secondary (module docs).
            let allowed = if e == Estimator::Rm { counts.len().max(60) / 20 } else { 0 };
            prop_assert!(under <= allowed, "{e} undercounts {under} of {} keys", counts.len());
        }
    }
}

#[test]
fn minimal_increase_and_recurring_minimum_beat_minimum_selection() {
    // γ = 1 with skewed counts: MI and RM make fewer errors than MS.
    let n = 2000u64;
    let m = counters_for(n, 5, 1.0);
    let zipf = crate::testkit::workload::Zipf::new(n as usize, 0.5);
    let mut fs: Vec<Spectral> = Estimator::ALL.iter().map(|&e| Spectral::new(&params(e, m, 16))).collect();
    let mut exact = vec![0u32; n as usize];
    let mut rng = Rng::new(9);
    for x in 0..n {
        exact[x as usize] += 1;
        fs.iter_mut().for_each(|f| f.insert(&key(x), 1));
    }
    for _ in 0..20_000 {
        let x = zipf.sample(&mut rng);
        exact[x as usize] += 1;
        fs.iter_mut().for_each(|f| f.insert(&key(x), 1));
    }
    let errors: Vec<usize> =
        fs.iter().map(|f| (0..n).filter(|&x| f.query(&key(x)) != exact[x as usize]).count()).collect();
    assert!(errors[1] * 3 < errors[0] * 2 && errors[2] < errors[0], "ms, mi, rm errors: {errors:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// The same inserts, deletes and unions on fixed and compact counters
    /// (every estimator, crowded filters, narrow counters that saturate)
    /// give the same estimate for every key, the same refusals, and the
    /// same snapshot arrays.
    #[test]
    fn compact_counters_give_the_fixed_estimates(
        seed in any::<u64>(), bits in prop::sample::select(vec![4u8, 8, 16]), m in 64u64..1500,
    ) {
        for e in Estimator::ALL {
            let p = params(e, m, bits);
            let mut fixed = Spectral::new(&p);
            let mut compact = Spectral::new(&SpectralParams { store: CounterKind::Compact, ..p });
            let mut other = Spectral::new(&p);
            let mut other_c = Spectral::new(&SpectralParams { store: CounterKind::Compact, ..p });
            let zipf = crate::testkit::workload::Zipf::new(300, 1.1);
            let mut rng = Rng::new(seed);
            for _ in 0..3000 {
                let x = zipf.sample(&mut rng);
                let spread = if rng.below(10) == 0 { 40 } else { 3 };
                let r = 1 + rng.below(spread) as u32;
                if rng.below(5) == 0 {
                    prop_assert_eq!(fixed.delete(&key(x), r), compact.delete(&key(x), r), "{} delete", e);
                } else {
                    fixed.insert(&key(x), r);
                    compact.insert(&key(x), r);
                }
                let y = zipf.sample(&mut rng);
                other.insert(&key(y), 1);
                other_c.insert(&key(y), 1);
            }
            for x in 0..320 {
                prop_assert_eq!(fixed.query(&key(x)), compact.query(&key(x)), "{} key {}", e, x);
            }
            fixed.union(&other).unwrap();
            compact.union(&other_c).unwrap();
            for x in 0..320 {
                prop_assert_eq!(fixed.query(&key(x)), compact.query(&key(x)), "{} union key {}", e, x);
            }
            let (fa, ca) = (fixed.arrays(), compact.arrays());
            prop_assert!(fa.iter().zip(&ca).all(|(a, b)| a.words() == b.words()), "{} arrays differ", e);
            prop_assert!(compact.memory_bytes() > 0);
        }
    }
}

/// Per sub-window, per filter, its counter arrays (as a snapshot has them).
fn ring_arrays(w: &WindowedCounts) -> Vec<Vec<Vec<Vec<u64>>>> {
    let sub = |s: &windowed::SubWindow| -> Vec<Vec<Vec<u64>>> {
        s.filters().iter().map(|f| f.arrays().iter().map(|a| a.words().to_vec()).collect()).collect()
    };
    w.state().0.iter().map(sub).collect()
}

#[test]
fn windowed_counts_on_either_store_agree_and_restore() {
    for e in Estimator::ALL {
        let p = params(e, 256, 8);
        let mut fixed = WindowedCounts::new(p, 1000, 8).unwrap();
        let mut compact = WindowedCounts::new(SpectralParams { store: CounterKind::Compact, ..p }, 1000, 8).unwrap();
        let zipf = crate::testkit::workload::Zipf::new(500, 1.0);
        let mut rng = Rng::new(4);
        let mut t = 0;
        for _ in 0..20_000 {
            t += rng.below(3);
            let x = zipf.sample(&mut rng);
            assert_eq!(fixed.observe(&key(x), t), compact.observe(&key(x), t), "{e} at {t}");
        }
        // The snapshot arrays are the fixed-width form for both stores:
        // each restores the other's.
        let (ring, newest) = compact.state();
        assert!(ring.iter().any(|s| s.filters().len() > 1), "{e}: some sub-window grew");
        let arrays = ring_arrays(&compact);
        let mut back = WindowedCounts::new(SpectralParams { store: CounterKind::Compact, ..p }, 1000, 8).unwrap();
        assert!(back.restore(newest, arrays.clone()));
        let mut into_fixed = WindowedCounts::new(p, 1000, 8).unwrap();
        assert!(into_fixed.restore(newest, arrays));
        for x in 0..500 {
            let want = fixed.estimate(&key(x));
            assert_eq!((back.estimate(&key(x)), into_fixed.estimate(&key(x))), (want, want), "{e} key {x}");
        }
        assert_eq!(into_fixed.false_positive(), fixed.false_positive(), "{e}: the loads are re-derived");
        let mut short = ring_arrays(&compact);
        short[3][0][0].pop();
        assert!(!back.restore(newest, short), "a misfit array is refused");
    }
}

#[test]
fn windowed_counts_expire_whole_sub_windows() {
    let p = params(Estimator::Mi, 1 << 12, 8);
    let mut w = WindowedCounts::new(p, 1000, 10).unwrap();
    assert_eq!(w.sub_ms(), 100);
    for t in [0, 50, 150, 990] {
        w.observe(&key(1), t);
    }
    assert_eq!(w.estimate(&key(1)), 4);
    // At t = 1050 the window (50, 1050] still holds t = 150 and 990; the
    // ring holds sub-windows 0..=10 (0 to 1100 ms), so 0 and 50 count too.
    w.advance(1050);
    assert_eq!(w.estimate(&key(1)), 4);
    w.advance(1100);
    assert_eq!(w.estimate(&key(1)), 2, "sub-window 0 expired");
    assert_eq!(w.observe(&key(1), 1100), (2, 3));
    w.advance(5000);
    assert_eq!(w.estimate(&key(1)), 0);
    // A record older than the ring is counted in its oldest sub-window.
    assert_eq!(w.observe(&key(1), 10), (0, 1));
}

#[test]
fn windowed_settings_are_validated() {
    let p = params(Estimator::Ms, 1 << 10, 8);
    let e = WindowedCounts::new(p, 60_000, 4).unwrap_err();
    assert_eq!(e.to_string(), "invalid subwindows = 4: must be 8 to 64");
    let e = WindowedCounts::new(SpectralParams { counter_bits: 5, ..p }, 60_000, 16).unwrap_err();
    assert_eq!(e.to_string(), "invalid counter_bits = 5: must be 4, 8, 16 or 32");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    /// Sub-windows far smaller than what they receive grow through
    /// several levels; at every record the estimate still bounds the
    /// exact window count from above (MS and MI), and the ring's
    /// false-positive bound holds while no sub-window is at the cap.
    #[test]
    fn grown_windows_bound_exact_window_counts(
        seed in any::<u64>(), est in 0usize..2, counters in 16u64..200, keys in 100u64..3000,
    ) {
        let e = Estimator::ALL[est];
        let window = 1000;
        let mut w = WindowedCounts::new(params(e, counters, 8), window, 8).unwrap();
        let mut rng = Rng::new(seed);
        let zipf = crate::testkit::workload::Zipf::new(keys as usize, 1.1);
        let mut times: HashMap<u64, Vec<u64>> = HashMap::new();
        let mut t = 0u64;
        for _ in 0..4000 {
            t += rng.below(3);
            let x = zipf.sample(&mut rng);
            let (before, after) = w.observe(&key(x), t);
            let seen = times.entry(x).or_default();
            seen.push(t);
            let exact = seen.iter().filter(|&&s| s + window > t).count() as u64;
            prop_assert!(after >= exact && before + 1 >= exact, "{e}: {before}/{after} against {exact}");
        }
        prop_assert!(w.filters() > 9, "{e}: no sub-window grew");
        let capped = w.state().0.iter().any(|s| s.filters().len() == GROWTH_LEVELS as usize);
        prop_assert!(capped || w.false_positive() <= RING_FALSE_POSITIVE, "{e}: {}", w.false_positive());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    /// Against exact sliding-window counts: at every record, the estimate
    /// of its key over the window is at least the exact number of its
    /// copies with time in (t - W, t]. MS and MI: the estimators whose
    /// bound is unconditional (RM's caveat is in the module docs).
    #[test]
    fn windowed_estimates_bound_exact_window_counts(
        subwindows in 8u32..=64, seed in any::<u64>(), est in 0usize..2, jitter in 0u64..200,
    ) {
        let e = Estimator::ALL[est];
        let window = 1000;
        let mut w = WindowedCounts::new(params(e, 512, 8), window, subwindows).unwrap();
        let mut rng = Rng::new(seed);
        let mut times: HashMap<u64, Vec<u64>> = HashMap::new();
        let (mut t, mut newest) = (0u64, 0u64);
        for _ in 0..3000 {
            t += rng.below(20);
            // Out-of-order times within `jitter`, as the reorder buffer
            // may release (no older than the newest time - jitter).
            let at = t.saturating_sub(rng.below(jitter + 1));
            let x = rng.below(60);
            let (before, after) = w.observe(&key(x), at);
            let seen = times.entry(x).or_default();
            seen.push(at);
            newest = newest.max(at);
            let exact = seen.iter().filter(|&&s| s + window > newest).count() as u64;
            prop_assert!(after >= exact, "{e}: after {after} < exact {exact}");
            prop_assert!(before + 1 >= exact || before >= u64::from(w.params().counter_max()));
        }
    }
}
