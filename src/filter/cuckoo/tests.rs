use std::collections::HashMap;

use super::bucket;
use super::params::{DESIGN_LOAD, table_fpr};
use super::snapshot::{decode, encode};
use super::*;
use crate::filter::envelope::SnapshotError;
use crate::filter::hash::{DEFAULT_SEED, KeyHash};
use crate::filter::random::Rng;
use crate::filter::timer::sliding::DeleteRefusal;
use crate::testkit::oracle::{Confusion, ExactWindow};

pub(super) fn key(i: u64) -> KeyHash {
    KeyHash::of(DEFAULT_SEED, &i.to_le_bytes())
}

pub(super) fn spec(window_ms: u64, expected_keys: u64) -> CuckooSpec {
    CuckooSpec { window_ms, expected_keys: Some(expected_keys), ..CuckooSpec::default() }
}

/// Ids drawn from `universe` at a steady rate of `per_ms` events per ms
/// (times from 0), some of them repeats within the window.
pub(super) fn stream(n: usize, universe: u64, per_ms: u64, seed: u64) -> Vec<(u64, u64)> {
    let mut rng = Rng::new(seed);
    (0..n as u64).map(|i| (rng.below(universe), i / per_ms)).collect()
}

/// A stream like a feed with retries: at `per_ms` events per ms, a quarter
/// of the events repeat a key of the last half window, one in twenty a key
/// of any time before (mostly outside the window), the rest are new keys.
pub(super) fn retries(n: usize, per_ms: u64, window_ms: u64, seed: u64) -> Vec<(u64, u64)> {
    let mut rng = Rng::new(seed);
    let recent = (per_ms * window_ms / 2).max(1);
    let mut ids: Vec<u64> = Vec::with_capacity(n);
    let mut next = 0;
    for _ in 0..n {
        let at = ids.len() as u64;
        let draw = rng.next_f64();
        let id = if at > 0 && draw < 0.25 {
            ids[(at - 1 - rng.below(recent.min(at))) as usize]
        } else if at > 0 && draw < 0.30 {
            ids[rng.below(at) as usize]
        } else {
            next += 1;
            next
        };
        ids.push(id);
    }
    ids.into_iter().enumerate().map(|(i, id)| (id, i as u64 / per_ms)).collect()
}

/// The filter's own deliveries as the truth: an event whose key the filter
/// delivered less than a window before (at the clock) must be a duplicate,
/// whatever the filter said of copies in between.
struct Delivered {
    window_ms: u64,
    clock: u64,
    at: HashMap<u64, u64>,
}

impl Delivered {
    fn must_be_duplicate(&mut self, id: u64, time_ms: u64) -> bool {
        self.clock = self.clock.max(time_ms);
        self.at.get(&id).is_some_and(|&t| self.clock - t < self.window_ms)
    }

    fn delivered(&mut self, id: u64) {
        self.at.insert(id, self.clock);
    }
}

/// Runs the filter and the exact oracle over a stream: the confusion, and
/// how many copies of a key the filter itself delivered inside the window
/// were called distinct (false negatives of its own making: must be 0).
pub(super) fn run(f: &mut CuckooFilter, events: &[(u64, u64)], window_ms: u64) -> (Confusion, u64) {
    let t = trace(f, events, window_ms);
    (t.confusion, t.misses)
}

/// What [`trace`] saw.
pub(super) struct Trace {
    pub confusion: Confusion,
    pub misses: u64,
    /// The largest resident bytes after any event.
    pub peak_bytes: usize,
    /// Tables created by then, every 1 000 events.
    pub created: Vec<u64>,
}

/// [`run`], recording the filter's memory and growth as it goes.
pub(super) fn trace(f: &mut CuckooFilter, events: &[(u64, u64)], window_ms: u64) -> Trace {
    let mut exact = ExactWindow::new(window_ms);
    let mut own = Delivered { window_ms, clock: 0, at: HashMap::new() };
    let mut t = Trace { confusion: Confusion::default(), misses: 0, peak_bytes: 0, created: Vec::new() };
    for (i, &(id, time)) in events.iter().enumerate() {
        let dup = f.observe(&key(id), time);
        t.confusion.record(dup, exact.observe(&id, time));
        if own.must_be_duplicate(id, time) && !dup {
            t.misses += 1;
        }
        if !dup {
            own.delivered(id);
        }
        t.peak_bytes = t.peak_bytes.max(f.memory_bytes());
        if i % 1_000 == 0 {
            t.created.push(f.counters().tables_created);
        }
    }
    t
}

#[test]
fn resolves_ten_bit_fingerprints_and_seven_bit_stamps_at_one_percent() {
    let p = spec(60_000, 1_000).resolve().unwrap();
    assert_eq!((p.fingerprint_bits, p.clock_bits, p.period), (10, 7, 127));
    assert_eq!((p.window_ticks, p.sweep_ticks, p.tick_ms), (117, 9, 513));
    assert!(p.window_ticks + p.lateness_ticks + p.sweep_ticks < p.period);
    assert!(table_fpr(10, DESIGN_LOAD) < 0.01);
    // Other targets: a bit of fingerprint more is a bit of stamp less.
    let at = |fpr| CuckooSpec { fpr, ..spec(60_000, 1_000) }.resolve().unwrap();
    let (tight, loose) = (at(0.001), at(0.05));
    assert_eq!((tight.fingerprint_bits, tight.clock_bits, tight.window_ticks), (13, 4, 10));
    assert_eq!((loose.fingerprint_bits, loose.clock_bits, loose.window_ticks), (8, 9, 477));
    let e = CuckooSpec { fpr: 0.0005, ..spec(60_000, 1_000) }.resolve().unwrap_err();
    assert_eq!(e.setting, "fpr");
    assert!(e.to_string().contains("needs 14-bit fingerprints"), "{e}");
}

/// Every 12-bit prefix code stands for one sorted multiset of four nibbles
/// and back; the 220 words past the last code are not buckets.
#[test]
fn every_prefix_code_round_trips() {
    let fields = 0x000F_EDCB_A987_6543_u64;
    let mut seen = std::collections::HashSet::new();
    for code in 0..bucket::CODES {
        let word = u64::from(code) << 52 | fields;
        assert!(bucket::is_valid(word));
        let e = bucket::decode(word);
        let nibbles = e.map(|x| x >> bucket::FIELD_BITS);
        assert!(nibbles.is_sorted(), "code {code}: {nibbles:?}");
        assert!(seen.insert(nibbles), "code {code}: {nibbles:?} twice");
        assert_eq!(bucket::encode(e), word, "code {code}");
        assert_eq!((0..4).map(|i| bucket::field(word, i)).collect::<Vec<_>>(), e.map(|x| x & 0x1FFF).to_vec());
    }
    assert_eq!(seen.len(), 3_876);
    assert!(!bucket::is_valid(u64::from(bucket::CODES) << 52));
    assert!(!bucket::is_valid(u64::MAX));
    assert_eq!(bucket::encode([0; 4]), 0, "an all-zero word is an empty bucket");
}

/// Encoding sorts by nibble and keeps slots of one nibble in their order.
#[test]
fn encoding_sorts_by_nibble_stably() {
    let e = |nibble: u32, field: u32| nibble << bucket::FIELD_BITS | field;
    let word = bucket::encode([e(9, 1), e(3, 2), e(9, 3), e(3, 4)]);
    assert_eq!(bucket::decode(word), [e(3, 2), e(3, 4), e(9, 1), e(9, 3)]);
    // A cleared field keeps its nibble and its place.
    let cleared = bucket::clear_field(word, 1);
    assert_eq!(bucket::decode(cleared), [e(3, 2), e(3, 0), e(9, 1), e(9, 3)]);
    assert_eq!(bucket::encode(bucket::decode(cleared)), cleared);
    assert_eq!(bucket::occupied(cleared), 3);
}

/// Each bucket of each table is canonical (re-encoding changes nothing)
/// and its occupied slots are the table's count.
fn assert_canonical(f: &CuckooFilter) {
    for t in f.tables() {
        for &w in t.words() {
            assert!(bucket::is_valid(w));
            assert_eq!(bucket::encode(bucket::decode(w)), w);
        }
        assert_eq!(t.occupied(), t.words().iter().map(|&w| u64::from(bucket::occupied(w))).sum::<u64>());
    }
}

/// Inserts, deletes and sweeps on one filter: every bucket stays sorted and
/// canonical; a delete or a sweep only empties fields (no code changes, no
/// slot moves); no key the filter delivered in the window is lost.
#[test]
fn buckets_stay_sorted_through_inserts_deletes_and_sweeps() {
    let p = spec(1_000, 300).resolve().unwrap();
    let mut f = CuckooFilter::new(p.clone());
    let mut rng = Rng::new(5);
    let (mut t, mut clears) = (0, 0);
    for _ in 0..12_000 {
        let before: Vec<(u8, Vec<u64>)> = f.tables().iter().map(|t| (t.level, t.words().to_vec())).collect();
        let id = rng.below(6_000);
        match rng.below(10) {
            0 => {
                let _ = f.delete(&key(id));
            }
            1 => {
                t += p.tick_ms;
                f.advance(t);
            }
            _ => {
                f.observe(&key(id), t);
                assert!(f.contains(&key(id)), "just observed");
                assert_canonical(&f);
                continue;
            }
        }
        assert_canonical(&f);
        if f.tables().iter().map(|t| t.level).ne(before.iter().map(|b| b.0)) {
            continue;
        }
        for ((_, old), new) in before.iter().zip(f.tables()) {
            for (&a, &b) in old.iter().zip(new.words()) {
                assert_eq!(a >> 52, b >> 52, "a clear changed a code");
                assert!((0..4).all(|i| bucket::field(b, i) == bucket::field(a, i) || bucket::field(b, i) == 0));
                clears += u64::from(a != b);
            }
        }
    }
    assert!(clears > 1_000, "{clears} buckets cleared");
    assert!(f.counters().tables_created >= 2, "{:?}", f.counters());
}

#[test]
fn no_false_negative_within_the_window_and_fpr_under_target() {
    let window = 1_000;
    // 40 events per ms, 70% new keys: each window holds ~28 000 distinct keys.
    let events = retries(400_000, 40, window, 7);
    let mut f = CuckooFilter::new(spec(window, 30_000).resolve().unwrap());
    let (c, misses) = run(&mut f, &events, window);
    assert_eq!(misses, 0);
    assert!(c.fpr() < 0.01, "FPR {}", c.fpr());
    assert!(c.true_duplicates > 80_000, "{c:?}");
    assert_eq!(f.counters().forced_evictions, 0);
    assert_eq!(f.tables().len(), 1);
}

/// Keys that come back about a window later are where rounding the expiry
/// towards keeping costs false positives: a copy delivered in the last
/// part of its tick is kept for the rest of that tick (half a tick on
/// average). On ids drawn uniformly (each id's copies a Poisson process of
/// rate r per ms), a distinct event is called a duplicate for it with
/// probability about r · tick / 2, beside the table's own 8α/2^f.
#[test]
fn rounding_towards_keeping_costs_what_the_formula_says() {
    let window = 1_000;
    let (universe, per_ms) = (60_000, 40);
    let events = stream(400_000, universe, per_ms, 7);
    let p = spec(window, 30_000).resolve().unwrap();
    let mut f = CuckooFilter::new(p.clone());
    let (c, misses) = run(&mut f, &events, window);
    assert_eq!(misses, 0);
    let rate = per_ms as f64 / universe as f64;
    let formula = table_fpr(p.fingerprint_bits, DESIGN_LOAD) + rate * p.tick_ms as f64 / 2.0;
    assert!(c.fpr() < formula * 1.15 && c.fpr() > formula * 0.5, "FPR {}, formula {formula}", c.fpr());
}

#[test]
fn fpr_is_near_the_formula() {
    let p = spec(1_000, 20_000).resolve().unwrap();
    let mut f = CuckooFilter::new(p.clone());
    for i in 0..20_000 {
        assert!(!f.observe(&key(i), 0) || i > 0);
    }
    let slots = (p.buckets * 4) as f64;
    let alive: u64 = f.tables().iter().map(|t| t.alive_slots(f.clock())).sum();
    let want = table_fpr(p.fingerprint_bits, alive as f64 / slots);
    let probes = 400_000u64;
    let fp = (1_000_000..1_000_000 + probes).filter(|&i| f.contains(&key(i))).count() as f64 / probes as f64;
    assert!((fp - want).abs() < want * 0.15, "measured {fp}, formula {want}");
    assert_eq!(f.tables().len(), 1);
}

#[test]
fn an_estimate_ten_times_low_grows_and_keeps_fpr_under_two_percent() {
    let window = 1_000;
    let events = retries(600_000, 40, window, 11);
    let mut f = CuckooFilter::new(spec(window, 3_000).resolve().unwrap());
    let (c, misses) = run(&mut f, &events, window);
    assert_eq!(misses, 0);
    assert!(c.fpr() <= 0.02, "FPR {}", c.fpr());
    // One growth sized from the keys seen (not a ladder of 4× steps).
    assert!((2..=3).contains(&f.counters().tables_created), "{:?}", f.counters());
    assert_eq!(f.counters().forced_evictions, 0);
    // The small tables drained: a lone table holds the window.
    assert_eq!(f.tables().len(), 1, "{:?}", f.counters());
}

#[test]
fn a_failed_insert_forgets_no_key() {
    let p = spec(1_000, 500).resolve().unwrap();
    let mut f = CuckooFilter::new(p);
    let n = 5_000;
    for i in 0..n {
        f.observe(&key(i), 10);
    }
    assert!(f.counters().failed_kicks >= 1, "{:?}", f.counters());
    assert!(f.tables().len() >= 2);
    assert!((0..n).all(|i| f.contains(&key(i))));
}

#[test]
fn keys_expire_after_the_window_rounded_up_to_a_tick_and_never_alias() {
    let p = spec(1_000, 1_000).resolve().unwrap();
    let tick = p.tick_ms;
    let mut f = CuckooFilter::new(p.clone());
    assert!(!f.observe(&key(1), 0));
    assert!(f.observe(&key(1), 999));
    // Kept to the end of the tick its copy was delivered in, a window
    // later: a little longer than the window, never less.
    assert!(f.observe(&key(1), 1_000 + tick - 1));
    assert!(!f.observe(&key(2), 1_000 + tick));
    assert!(!f.contains(&key(1)));
    // Many stamp periods later, with the clock stepping tick by tick, an
    // old slot has been swept and does not come back to life.
    let mut t = 1_000 + tick;
    for _ in 0..3 * u64::from(p.period) {
        t += tick;
        f.advance(t);
        assert!(!f.contains(&key(1)), "aliased at {t}");
    }
    assert!(!f.observe(&key(1), t));
}

/// A jump of the clock by most of the window (the stream paused): the slots
/// that expired during it are swept at their own ticks, and none wraps
/// round to look young at the new clock.
#[test]
fn a_jump_of_the_clock_expires_what_left_the_window() {
    let p = spec(1_000, 1_000).resolve().unwrap();
    for pause in [300, 500, 900, 999] {
        let mut f = CuckooFilter::new(p.clone());
        for i in 0..500 {
            f.observe(&key(i), i);
        }
        f.observe(&key(10_000), 1_500);
        f.observe(&key(10_001), 1_500 + pause);
        let kept: Vec<u64> = (0..500).filter(|&i| f.contains(&key(i))).collect();
        // Keys delivered more than a window (plus a tick) before are gone.
        let clock = 1_500 + pause;
        assert!(kept.iter().all(|&i| i + 1_000 + p.tick_ms > clock), "pause {pause}: {kept:?}");
        assert!((0..500).filter(|&i| i + 1_000 > clock).all(|i| f.contains(&key(i))), "pause {pause}");
    }
}

#[test]
fn late_records_are_judged_at_their_own_time_within_the_lateness() {
    let late = CuckooSpec { lateness_ms: Some(300), ..spec(1_000, 1_000) };
    let mut f = CuckooFilter::new(late.resolve().unwrap());
    assert!(!f.observe(&key(1), 0));
    assert!(!f.observe(&key(2), 1_200));
    // Behind the clock, 200 ms after key 1's delivery: a duplicate at its own time.
    assert!(f.observe(&key(1), 200));
    // Delivered late at its own time: a copy at that time is a duplicate.
    assert!(!f.observe(&key(3), 1_000));
    assert!(f.observe(&key(3), 1_100));
    assert_eq!(f.counters().late_events, 3);
    // Without lateness, the same late record is judged at the clock.
    let mut g = CuckooFilter::new(spec(1_000, 1_000).resolve().unwrap());
    assert!(!g.observe(&key(1), 0));
    assert!(!g.observe(&key(2), 1_200));
    assert!(!g.observe(&key(1), 200));
}

#[test]
fn delete_clears_exactly_the_stored_key() {
    let mut f = CuckooFilter::new(spec(1_000, 1_000).resolve().unwrap());
    assert_eq!(f.delete(&key(1)), Err(DeleteRefusal::Absent));
    for i in 0..500 {
        f.observe(&key(i), 5);
    }
    assert_eq!(f.delete(&key(7)), Ok(()));
    assert!(!f.contains(&key(7)));
    assert!((0..500).filter(|&i| i != 7).all(|i| f.contains(&key(i))));
    assert!(!f.observe(&key(7), 6));
    assert_eq!(f.delete(&key(100_000)), Err(DeleteRefusal::Absent));
}

/// Two slots of one fingerprint: key 1 delivered again after its window
/// while its first slot is still kept for the lateness, into a newer table.
/// Either slot could be another key's, so neither is deleted (as the timer
/// filter refuses a key two generations hold).
#[test]
fn delete_refuses_a_fingerprint_two_slots_hold() {
    let late = CuckooSpec { lateness_ms: Some(300), ..spec(1_000, 200) };
    let p = late.resolve().unwrap();
    let mut f = CuckooFilter::new(p.clone());
    f.observe(&key(1), 0);
    let again = 1_000 + p.tick_ms;
    let mut i = 2;
    while f.tables().len() < 2 {
        f.observe(&key(i), again);
        i += 1;
    }
    assert!(!f.observe(&key(1), again), "out of the window");
    assert_eq!(f.delete(&key(1)), Err(DeleteRefusal::Ambiguous));
    assert!(f.contains(&key(1)));
}

#[test]
fn snapshot_round_trips_and_refuses_damage_and_other_settings() {
    let late = CuckooSpec { lateness_ms: Some(100), ..spec(1_000, 2_000) };
    let p = late.resolve().unwrap();
    let mut f = CuckooFilter::new(p.clone());
    for (id, t) in stream(12_000, 20_000, 10, 3) {
        f.observe(&key(id), t);
    }
    assert!(f.tables().len() >= 2, "the snapshot holds several tables");
    let bytes = encode(&f);
    let back = decode(&bytes, &p).unwrap();
    assert_eq!(back, f);
    assert_eq!(encode(&back), bytes);
    // The restored filter judges the rest of the stream as the original.
    let (mut a, mut b) = (f, back);
    for (id, t) in stream(5_000, 20_000, 10, 4) {
        assert_eq!(a.observe(&key(id), t + 3_000), b.observe(&key(id), t + 3_000));
    }

    // The 16-bit slot format (version 1) is refused by its version.
    let mut v1 = bytes.clone();
    v1[8..10].copy_from_slice(&1u16.to_le_bytes());
    let e = decode(&v1, &p).unwrap_err();
    assert_eq!(e, SnapshotError::UnsupportedVersion { expected: 2, got: 1 });
    assert!(e.to_string().contains("version 1 is not supported (expected 2)"), "{e}");
    let mut bad_code = bytes.clone();
    let last_word = bytes.len() - 16;
    bad_code[last_word..last_word + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    crate::filter::envelope::seal_in_place(&mut bad_code);
    assert!(matches!(decode(&bad_code, &p), Err(SnapshotError::Malformed(_))));

    let mut damaged = bytes.clone();
    damaged[40] ^= 1;
    assert!(matches!(decode(&damaged, &p), Err(SnapshotError::ChecksumMismatch { .. })));
    let other = CuckooSpec { expected_keys: Some(4_000), ..late }.resolve().unwrap();
    assert!(matches!(decode(&bytes, &other), Err(SnapshotError::ParameterMismatch { .. })));
    assert!(matches!(decode(b"DEDUPDSS\x01\x00........", &p), Err(SnapshotError::BadMagic { .. })));
}

#[test]
fn a_snapshot_is_pinned() {
    let mut f = CuckooFilter::new(spec(1_000, 64).resolve().unwrap());
    for i in 0..40 {
        f.observe(&key(i), i * 10);
    }
    let bytes = encode(&f);
    let checksum = u64::from_le_bytes(bytes[bytes.len() - 8..].try_into().unwrap());
    // 16 buckets of 4 slots, one u64 each: 128 bytes of buckets in 318.
    assert_eq!((bytes.len(), &bytes[..10]), (318, &b"DEDUPDCK\x02\x00"[..]));
    assert_eq!(checksum, 0xd7ee_d95a_4ed7_11a5, "the format or the hashing changed: a new version");
}

#[test]
fn a_loose_target_keeps_four_fingerprint_bits() {
    let p = CuckooSpec { fpr: 0.9, ..spec(1_000, 100) }.resolve().unwrap();
    assert_eq!((p.fingerprint_bits, p.clock_bits), (4, 13));
    let mut f = CuckooFilter::new(p);
    assert!(!f.observe(&key(1), 0));
    assert!(f.observe(&key(1), 999));
    f.advance(5_000);
    assert!(!f.contains(&key(1)));
}
