use super::super::order::OrderSettings;
use super::super::record::{Extractor, RecordView};
use super::sections::VERSION_PROGRESS;
use super::*;
use crate::filter::{FilterChoice, FilterSpec, KeyHash, SnapshotError};

fn extractor() -> Extractor {
    Extractor { key: "record-key".parse().unwrap(), time: "record-timestamp".parse().unwrap(), max_record_bytes: 100 }
}

fn rec<'a>(offset: u64, key: &'a [u8], ts: i64, source: Option<SourceRef<'a>>) -> SliceRecord<'a> {
    SliceRecord {
        offset,
        record: RecordView { key: Some(key), payload: b"p", timestamp_ms: Some(ts), ..Default::default() },
        source,
        reading: None,
    }
}

fn params() -> FilterChoice {
    FilterSpec { window_ms: 1000, expected_keys: 100, ..FilterSpec::default() }.resolve().unwrap().into()
}

fn order(lateness_ms: u64) -> OrderSettings {
    OrderSettings { lateness_ms, max_clock_jump_ms: 100_000, jump_confirmations: 3 }
}

/// No lateness, and a slice's first record is its own reference (one
/// confirmation): every record is judged as it arrives.
fn immediate() -> OrderSettings {
    OrderSettings { jump_confirmations: 1, ..order(0) }
}

fn fresh(slice: u32, filter: FilterChoice) -> SliceState {
    SliceState::new(slice, filter, 0, immediate())
}

/// Takes in one record with no lateness: exactly one judgment, its own.
fn one(s: &mut SliceState, r: &SliceRecord<'_>, ex: &Extractor) -> SliceVerdict {
    let mut out = Vec::new();
    s.process(r, ex, &mut out);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].offset, r.offset);
    out.pop().unwrap().verdict
}

/// The router's reading stands for the slice's own: the same verdicts
/// whether a record carries it or is read again; a reading taken with
/// another seed (a decaying kind's) is not used.
#[test]
fn a_routers_reading_gives_the_verdicts_of_reading_the_record_again() {
    let ex = extractor();
    let p = params();
    let keys: Vec<Vec<u8>> = (0..300u32).map(|i| format!("k{}", i % 97).into_bytes()).collect();
    let run = |with: Option<u64>| {
        let mut s = fresh(0, p.clone());
        let mut verdicts = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let ts = 10 * i as i64;
            let mut r = rec(i as u64, key, ts, None);
            r.reading = with.map(|seed| Reading { seed, hash: KeyHash::of(seed, key), time_ms: ts as u64 });
            verdicts.push(one(&mut s, &r, &ex));
        }
        verdicts
    };
    let again = run(None);
    assert!(again.iter().any(|v| matches!(v, SliceVerdict::Duplicate { .. })));
    assert_eq!(run(Some(p.params().seed)), again);
    // A reading whose seed is not the slice's is ignored (read again).
    assert_eq!(run(Some(p.params().seed ^ 1)), again);
    // And it is what the slice judges by: a wrong hash under the slice's
    // seed changes the verdicts (so the test above can fail).
    let mut s = fresh(0, p.clone());
    let mut r = rec(0, b"a", 5, None);
    one(&mut s, &r, &ex);
    r.offset = 1;
    r.reading = Some(Reading { seed: p.params().seed, hash: KeyHash::of(p.params().seed, b"b"), time_ms: 6 });
    assert_eq!(one(&mut s, &r, &ex), SliceVerdict::Distinct);
}

#[test]
fn resends_are_caught_by_input_offset() {
    let mut s = fresh(3, params());
    let ex = extractor();
    let src = |o| Some(SourceRef { topic: "in", partition: 1, offset: o });
    assert_eq!(one(&mut s, &rec(0, b"a", 10, src(5)), &ex), SliceVerdict::Distinct);
    assert_eq!(one(&mut s, &rec(1, b"b", 11, src(6)), &ex), SliceVerdict::Distinct);
    // The router restarted and re-sent input offset 6, then went on.
    assert_eq!(one(&mut s, &rec(2, b"b", 11, src(6)), &ex), SliceVerdict::Resend);
    assert_eq!(one(&mut s, &rec(3, b"c", 12, src(7)), &ex), SliceVerdict::Distinct);
    assert!(matches!(one(&mut s, &rec(4, b"a", 13, src(8)), &ex), SliceVerdict::Duplicate { .. }));
    let other = Some(SourceRef { topic: "in", partition: 2, offset: 0 });
    assert_eq!(one(&mut s, &rec(5, b"d", 14, other), &ex), SliceVerdict::Distinct);
    assert_eq!(s.next_offset, 6);
    assert_eq!(s.counters, SliceCounters { distinct: 4, duplicates: 1, resends: 1, invalid: 0, late: 0 });
}

/// Without provenance the envelope is version 2 (a rollback to the
/// release before provenance still restores it); with it, version 3.
#[test]
fn the_envelope_is_version_2_without_provenance() {
    let mut s = fresh(0, params());
    one(&mut s, &rec(0, b"a", 10, None), &extractor());
    let bytes = encode(&s);
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 2);
    assert_eq!(decode(&bytes, 0, &params(), immediate()).unwrap(), s);
}

#[test]
fn snapshot_round_trip_and_refusals() {
    let mut s = fresh(3, params());
    let ex = extractor();
    for i in 0..500u64 {
        let key = (i % 37).to_le_bytes();
        let source = Some(SourceRef { topic: "t", partition: (i % 3) as i32, offset: i as i64 });
        one(&mut s, &rec(i, &key, i as i64 * 3, source), &ex);
    }
    let bytes = encode(&s);
    assert_eq!(decode(&bytes, 3, &params(), immediate()).unwrap(), s);
    assert!(matches!(
        decode(&bytes, 4, &params(), immediate()),
        Err(SnapshotError::ParameterMismatch { parameter: "slice", .. })
    ));
    let mut bad = bytes.clone();
    bad[20] ^= 0xFF;
    assert!(matches!(decode(&bad, 3, &params(), immediate()), Err(SnapshotError::ChecksumMismatch { .. })));
    let other = FilterSpec { window_ms: 2000, expected_keys: 100, ..FilterSpec::default() }.resolve().unwrap();
    assert!(matches!(decode(&bytes, 3, &other.into(), immediate()), Err(SnapshotError::ParameterMismatch { .. })));
}

/// A copy taken while the slice goes on is the slice as it was when the
/// copy began — filter, offset, re-send marks (a new input partition
/// appears during the copy) and counters — and the slice itself judges
/// exactly as one that was never copied.
#[test]
fn a_copy_is_the_state_when_it_began() {
    let big = FilterSpec { window_ms: 60_000, expected_keys: 200_000, ..FilterSpec::default() }.resolve().unwrap();
    let ex = extractor();
    let feed = |s: &mut SliceState, range: std::ops::Range<u64>| {
        let mut verdicts = Vec::new();
        for i in range {
            let key = (i % 5_000).to_le_bytes();
            let source = Some(SourceRef { topic: "t", partition: (i / 1_000) as i32, offset: i as i64 });
            let r = rec(i, &key, i as i64 * 2, source);
            let mut out = Vec::new();
            s.process(&r, &ex, &mut out);
            verdicts.extend(out);
        }
        verdicts
    };
    let mut s = fresh(3, big.into());
    feed(&mut s, 0..20_000);
    let (expected, mut uncopied) = (encode(&s), s.clone());
    s.begin_copy(Vec::new());
    assert_eq!(s.next_offset, 20_000);
    assert!(s.copy_bytes_left() > 0);
    let with_copy = feed(&mut s, 20_000..25_000);
    assert_eq!(with_copy, feed(&mut uncopied, 20_000..25_000));
    assert_eq!(s, uncopied);
    assert!(s.finish_copy().unwrap().seal() == expected, "the snapshot differs from the state when it began");
    // Into a reused, longer buffer (a larger snapshot before): the same bytes.
    let mut longer = encode(&s);
    longer.extend_from_slice(&[7; 100]);
    uncopied.begin_copy(longer);
    uncopied.advance_copy(usize::MAX);
    assert!(uncopied.finish_copy().unwrap().seal() == encode(&uncopied));
    let timer = s.filter.as_timer().expect("a timer filter");
    assert_eq!(decode(&expected, 3, &timer.params().clone().into(), immediate()).unwrap().next_offset, 20_000);
}

#[test]
fn passthrough_judges_nothing() {
    let mut s = fresh(0, params());
    s.passthrough = true;
    let ex = extractor();
    assert_eq!(one(&mut s, &rec(0, b"a", 10, None), &ex), SliceVerdict::Distinct);
    assert_eq!(one(&mut s, &rec(1, b"a", 11, None), &ex), SliceVerdict::Distinct);
    assert_eq!(s.filter.as_timer().expect("a timer filter").counters().events, 0);
    assert_eq!(s.counters.distinct, 2);
}

/// Records wait for the watermark and are judged in time order; a
/// snapshot keeps the waiting records' offsets, and a restored slice
/// that re-reads them continues exactly as the uninterrupted one.
#[test]
fn event_time_order_survives_a_snapshot() {
    let ex = extractor();
    let mut rng = crate::testkit::workload::Rng::new(5);
    let keys: Vec<[u8; 8]> = (0..3_000u64).map(|i| (i % 700).to_le_bytes()).collect();
    let times: Vec<i64> = (0..3_000i64).map(|i| 10_000 + i * 2 + rng.below(300) as i64).collect();
    let feed = |s: &mut SliceState, range: std::ops::Range<usize>| {
        let mut out = Vec::new();
        for i in range {
            s.process(&rec(i as u64, &keys[i], times[i], None), &ex, &mut out);
        }
        out
    };
    let mut whole = SliceState::new(1, params(), 0, order(300));
    let expected = feed(&mut whole, 0..3_000);
    // Released in time order (ties by offset), never the arrival order.
    let released: Vec<(i64, u64)> = expected.iter().map(|j| (times[j.offset as usize], j.offset)).collect();
    assert!(released.windows(2).all(|w| w[0] <= w[1]));
    assert!(expected.len() < 3_000 && whole.order.waiting_len() > 0);
    assert!(expected.iter().all(|j| j.late_by_ms.is_none()));

    let mut first = SliceState::new(1, params(), 0, order(300));
    let mut got = feed(&mut first, 0..1_700);
    let bytes = encode(&first);
    let mut restored = decode(&bytes, 1, &params(), order(300)).unwrap();
    assert!(!restored.unfilled.is_empty());
    assert!(restored.refill(Vec::new()).is_err(), "a held record that cannot be re-read is an error");
    refill_from(&mut restored, &keys, &times, &ex);
    assert_eq!(restored, first);
    got.extend(feed(&mut restored, 1_700..3_000));
    assert_eq!(got, expected);
    assert_eq!(restored, whole);

    // An idle flush judges what is waiting.
    let mut out = Vec::new();
    whole.flush(&mut out);
    assert_eq!(whole.order.waiting_len(), 0);
    assert_eq!(expected.len() + out.len(), 3_000);
}

/// Puts back the held records of a restored slice, re-read from the
/// "log" (record `o` has key `keys[o]` and time `times[o]`).
fn refill_from(s: &mut SliceState, keys: &[[u8; 8]], times: &[i64], ex: &Extractor) {
    let reread = s
        .unfilled
        .iter()
        .map(|&(o, _)| {
            let r = rec(o, &keys[o as usize], times[o as usize], None);
            let (t, h) = s.held_entry(&r.record, ex).unwrap();
            (o, t, h)
        })
        .collect();
    s.refill(reread).unwrap();
}

fn decaying(kind: crate::filter::DecayingKind) -> FilterChoice {
    let spec = crate::filter::DecayingSpec::new(kind, 3 * 4096, 0.1);
    FilterChoice::Decaying(
        FilterSpec { window_ms: 1000, expected_keys: 1, ..FilterSpec::default() }.resolve().unwrap(),
        spec,
    )
}

/// A decaying slice: records still wait for the watermark; a
/// snapshot copied while the slice goes on, restored and refilled,
/// continues exactly as the uninterrupted slice (the PRNG state is in
/// it); and a snapshot of one kind is refused by a slice of another.
#[test]
fn decaying_kinds_survive_a_snapshot_and_refuse_other_kinds() {
    use crate::filter::DecayingKind;
    let ex = extractor();
    let mut rng = crate::filter::random::Rng::new(3);
    let keys: Vec<[u8; 8]> = (0..8_000u64).map(|_| rng.below(2_500).to_le_bytes()).collect();
    let times: Vec<i64> = (0..8_000i64).map(|i| 10_000 + i * 2 + rng.below(100) as i64).collect();
    let feed = |s: &mut SliceState, range: std::ops::Range<usize>| {
        let mut out = Vec::new();
        for i in range {
            let r = rec(i as u64, &keys[i], times[i], None);
            s.process(&r, &ex, &mut out);
        }
        out
    };
    for kind in [DecayingKind::Rsbf, DecayingKind::Stable] {
        let configured = decaying(kind);
        let mut whole = SliceState::new(1, configured.clone(), 0, order(100));
        let expected = feed(&mut whole, 0..8_000);
        let duplicates = expected.iter().filter(|j| matches!(j.verdict, SliceVerdict::Duplicate { .. })).count();
        assert!(duplicates > 1_000 && duplicates < 7_000, "{kind:?}: {duplicates} duplicates");
        let judged = whole.filter.as_decaying().expect("a decaying kind").stats().events;
        assert_eq!(judged, expected.len() as u64, "the decaying kind judged every released record");

        let mut first = SliceState::new(1, configured.clone(), 0, order(100));
        let mut got = feed(&mut first, 0..3_000);
        let at_copy = first.clone();
        first.begin_copy(vec![9; 5]);
        assert_eq!(first.copy_bytes_left(), 0);
        assert!(first.advance_copy(1));
        feed(&mut first, 3_000..3_500);
        let bytes = first.finish_copy().unwrap().seal().to_vec();
        assert!(bytes == encode(&at_copy), "{kind:?}: the copy is not the state when it began");

        let mut restored = decode(&bytes, 1, &configured, order(100)).unwrap();
        refill_from(&mut restored, &keys, &times, &ex);
        assert_eq!(restored, at_copy);
        got.extend(feed(&mut restored, 3_000..8_000));
        assert_eq!(got, expected, "{kind:?}: verdicts differ after the restore");
        assert_eq!(restored, whole);

        let other = match kind {
            DecayingKind::Rsbf => DecayingKind::Stable,
            DecayingKind::Stable => DecayingKind::Rsbf,
        };
        let e = decode(&bytes, 1, &decaying(other), order(100)).unwrap_err();
        assert!(e.to_string().contains(&format!("kind = {}", kind.as_str())), "{e}");
        let e = decode(&bytes, 1, &params(), order(100)).unwrap_err();
        assert!(e.to_string().contains(&format!("kind = {} but this filter has kind = timer", kind.as_str())), "{e}");
        let timer = encode(&fresh(1, params()));
        let e = decode(&timer, 1, &decaying(kind), order(100)).unwrap_err();
        assert!(e.to_string().contains("kind = timer"), "{e}");
        assert_ne!(configured.fingerprint(), decaying(other).fingerprint());
    }
}

#[test]
fn release_positions_order_and_parse() {
    let a = ReleasePos { after: 7, flush: false, rank: 3 };
    let f = ReleasePos { after: 7, flush: true, rank: 0 };
    assert!(a < f && f < ReleasePos { after: 8, flush: false, rank: 0 });
    assert!(a < ReleasePos::through_arrival(7) && ReleasePos::through_arrival(7) < f);
    let extremes = ReleasePos { after: u64::MAX, flush: true, rank: u32::MAX };
    for p in [a, f, extremes, ReleasePos { after: 0, flush: false, rank: 0 }] {
        assert_eq!(ReleasePos::parse(p.to_string().as_bytes()), Some(p));
        // The header form written without `core::fmt` is the same text.
        assert_eq!(p.text_into(&mut [0; super::RELEASE_TEXT_BYTES]), p.to_string().as_bytes());
    }
    assert_eq!(a.to_string(), "7/3");
    assert_eq!(f.to_string(), "7/flush/0");
    for bad in ["", "7", "7/x", "7/flush", "7/late/1", "7/1/2"] {
        assert_eq!(ReleasePos::parse(bad.as_bytes()), None, "{bad}");
    }
}

mod watermark;
