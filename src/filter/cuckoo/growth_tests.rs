//! Growth sized from the keys seen, hysteresis, and sizing without an
//! estimate ([`super::growth`]).

use super::snapshot::{decode, encode};
use super::tests::{key, run, spec, trace};
use super::*;
use crate::filter::random::Rng;
use crate::testkit::oracle::ExactWindow;

/// Events at `rate(ms)` per ms for `total_ms`: a quarter of them repeat a
/// key of the last half window, the rest are new keys.
fn varying(rate: impl Fn(u64) -> u64, total_ms: u64, window_ms: u64, seed: u64) -> Vec<(u64, u64)> {
    let mut rng = Rng::new(seed);
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut next = 0;
    for ms in 0..total_ms {
        for _ in 0..rate(ms) {
            let recent = out.partition_point(|&(_, t)| t + window_ms / 2 < ms);
            let id = if rng.next_f64() < 0.25 && recent < out.len() {
                out[recent + rng.below((out.len() - recent) as u64) as usize].0
            } else {
                next += 1;
                next
            };
            out.push((id, ms));
        }
    }
    out
}

/// The most distinct keys the exact answer holds in one window.
fn most_in_window(events: &[(u64, u64)], window_ms: u64) -> usize {
    let mut exact = ExactWindow::new(window_ms);
    events.iter().map(|&(id, t)| (exact.observe(&id, t), exact.keys_in_window()).1).max().unwrap_or(0)
}

/// A load half again the estimate from the start: one table is added beside
/// the first (not one 4× larger), sized from the keys of the first window
/// extrapolated to a whole window, times 1.5, less the first; both keep
/// taking keys, and no table is added or dropped after that. Capacity for
/// 1.5× the keys at the design load: 16 · 1.5 / 0.95 · (W + 1)/W ≈ 25.5
/// bits per key.
#[test]
fn a_load_half_again_the_estimate_adds_one_table_of_about_half_its_size() {
    let window = 1_000;
    let events = varying(|_| 40, 12 * window, window, 3);
    let most = most_in_window(&events, window) as u64;
    let mut f = CuckooFilter::new(spec(window, most * 2 / 3).resolve().unwrap());
    let first = f.memory_bytes();
    let t = trace(&mut f, &events, window);
    assert_eq!(t.misses, 0);
    assert_eq!(f.counters().tables_created, 2, "{:?}", f.counters());
    assert_eq!(t.created[t.created.len() / 2], 2, "no table added in the second half: {:?}", t.created);
    assert_eq!(f.tables().len(), 2);
    let added = f.tables()[1].memory_bytes() as f64 / first as f64;
    assert!((0.5..=1.0).contains(&added), "the new table is {added:.2}x the first");
    let bits = t.peak_bytes as f64 * 8.0 / most as f64;
    assert!(bits <= 27.0, "{bits:.1} bits per peak window key");
    assert!(t.confusion.fpr() < 0.012, "FPR {}", t.confusion.fpr());
}

/// Bursts of twice the quiet load, again and again, with the estimate at
/// the average: the tables the first burst needs are kept through the
/// quiet spells (no grow, shrink, grow), and the memory stays under 24
/// bits per key of the fullest window.
#[test]
fn bursts_settle_on_the_tables_the_first_one_needed() {
    let window = 1_000;
    let rate = |ms: u64| if ms % (3 * window) < 2 * window { 15 } else { 30 };
    let events = varying(rate, 15 * window, window, 5);
    let most = most_in_window(&events, window);
    let mut f = CuckooFilter::new(spec(window, (most * 2 / 3) as u64).resolve().unwrap());
    let t = trace(&mut f, &events, window);
    assert_eq!(t.misses, 0);
    let created = t.created[t.created.len() / 3];
    assert!(created <= 3, "{:?}", f.counters());
    assert_eq!(f.counters().tables_created, created, "no table after the first cycle: {:?}", t.created);
    let peak = t.peak_bytes;
    let bits = peak as f64 * 8.0 / most as f64;
    assert!(bits <= 24.0, "{bits:.1} bits per peak window key");
}

/// Without an estimate the first table is small and the next is sized
/// from the keys it has seen, extrapolated to a whole window: few tables,
/// no key of the window forgotten, and once the small one drains a lone
/// table near the size the right estimate gives.
#[test]
fn without_an_estimate_the_filter_sizes_itself() {
    let window = 1_000;
    let events = varying(|_| 40, 10 * window, window, 7);
    let most = most_in_window(&events, window) as u64;
    let none = CuckooSpec { expected_keys: None, ..spec(window, 1) }.resolve().unwrap();
    assert_eq!(none.buckets, params::START_BUCKETS);
    let mut f = CuckooFilter::new(none);
    let (c, misses) = run(&mut f, &events, window);
    assert_eq!(misses, 0);
    assert!(c.fpr() < 0.01, "FPR {}", c.fpr());
    assert!(f.counters().tables_created <= 3, "{:?}", f.counters());
    assert_eq!(f.tables().len(), 1, "{:?}", f.counters());
    let right = CuckooFilter::new(spec(window, most).resolve().unwrap()).memory_bytes();
    let ratio = f.memory_bytes() as f64 / right as f64;
    assert!((0.5..=1.6).contains(&ratio), "{ratio:.2}x the right estimate's table");
}

/// When the load falls to a tenth, the lone table hands over to a smaller
/// one and drains; the smaller one holds the rest without growing again.
#[test]
fn a_lone_table_hands_over_when_the_load_falls() {
    let window = 1_000;
    let events = varying(|ms| if ms < 3 * window { 40 } else { 4 }, 9 * window, window, 9);
    let mut f = CuckooFilter::new(spec(window, 4_000).resolve().unwrap());
    let t = trace(&mut f, &events, window);
    assert_eq!(t.misses, 0);
    assert_eq!(f.tables().len(), 1, "{:?}", f.counters());
    assert!(f.memory_bytes() * 3 < t.peak_bytes, "{} B left of {} B", f.memory_bytes(), t.peak_bytes);
    assert!(f.counters().tables_created <= 3, "{:?}", f.counters());
}

/// Growth and shrinking read only what a snapshot restores: a filter
/// restored at any point judges and grows exactly as the original.
#[test]
fn a_restored_filter_grows_and_shrinks_as_the_original() {
    let window = 1_000;
    let rate = |ms: u64| if ms % (3 * window) < 2 * window { 10 } else { 30 };
    let events = varying(rate, 9 * window, window, 13);
    let p = spec(window, 5_000).resolve().unwrap();
    let mut f = CuckooFilter::new(p.clone());
    for (n, part) in events.chunks(7_919).enumerate() {
        let mut back = decode(&encode(&f), &p).unwrap();
        for &(id, t) in part {
            assert_eq!(f.observe(&key(id), t), back.observe(&key(id), t), "part {n}");
        }
        assert_eq!(encode(&back), encode(&f), "part {n}");
    }
    assert!(f.counters().tables_created >= 2, "{:?}", f.counters());
}

/// The batch path is [`CuckooFilter::observe`] in turn: the same verdicts
/// and the same state, with a table large enough to prefetch.
#[test]
fn observe_batch_is_observe_in_turn() {
    use crate::filter::event::Event;
    let window = 1_000;
    let events = varying(|ms| if ms % 2_000 < 1_000 { 150 } else { 300 }, 3 * window, window, 17);
    let p = spec(window, 450_000).resolve().unwrap();
    let (mut one, mut batched) = (CuckooFilter::new(p.clone()), CuckooFilter::new(p));
    assert!(batched.worth_prefetching(), "{} B", batched.memory_bytes());
    let mut out = Vec::new();
    for part in events.chunks(777) {
        let batch: Vec<Event> = part.iter().map(|&(id, t)| Event { hash: key(id), time_ms: t }).collect();
        out.clear();
        batched.observe_batch(&batch, &mut out);
        let each: Vec<bool> = part.iter().map(|&(id, t)| one.observe(&key(id), t)).collect();
        assert_eq!(out, each);
    }
    assert_eq!(encode(&batched), encode(&one));
    assert!(one.counters().duplicates > 1_000, "{:?}", one.counters());
}
