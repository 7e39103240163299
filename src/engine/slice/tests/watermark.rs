//! The watermark held by the routers' progress (repartition mode).

use std::collections::BTreeMap;

use super::*;

/// A slice log of two input partitions (`in/0`, `in/1`): records
/// (index into `times`/`keys`) and routers' progress records.
#[derive(Clone)]
enum Entry {
    Rec(usize),
    Announce(Vec<(i32, u64, bool)>),
}

/// Feeds `log[range]` (slice offset = index in `log`); returns every
/// judgment as (record index, verdict, late).
fn feed_log(
    s: &mut SliceState,
    log: &[Entry],
    range: std::ops::Range<usize>,
    keys: &[[u8; 8]],
    times: &[i64],
) -> Vec<(usize, SliceVerdict, bool)> {
    let ex = extractor();
    let mut out = Vec::new();
    for o in range {
        match &log[o] {
            Entry::Rec(i) => {
                let src = SourceRef { topic: "in", partition: (*i % 2) as i32, offset: *i as i64 };
                s.process(&rec(o as u64, &keys[*i], times[*i], Some(src)), &ex, &mut out);
            }
            Entry::Announce(a) => {
                let entries: Vec<Progress<'_>> = a
                    .iter()
                    .map(|&(partition, time_ms, idle)| Progress { topic: "in", partition, time_ms, idle, owned: true })
                    .collect();
                let bytes = Progress::encode(&entries);
                s.announce(o as u64, &Progress::parse_all(&bytes).unwrap(), &mut out);
            }
        }
    }
    let index = |o: u64| match log[o as usize] {
        Entry::Rec(i) => i,
        Entry::Announce(_) => panic!("a progress record was judged"),
    };
    out.into_iter().map(|j| (index(j.offset), j.verdict, j.late_by_ms.is_some())).collect()
}

/// Records of partition 1 (odd indices) stop at `from` while its router
/// is gone; partition 0 goes on for `gap` records; then partition 1's
/// records resume. Routers announce every 20 records, the dead one not
/// at all. Returns the log and the log without any announcement.
fn storm_log(times: &[i64], from: usize, gap: usize) -> (Vec<Entry>, Vec<Entry>) {
    let n = times.len();
    let mut order: Vec<usize> = (0..from).collect();
    order.extend((from..from + gap).filter(|i| i % 2 == 0));
    order.extend((from..from + gap).filter(|i| i % 2 == 1));
    order.extend(from + gap..n);
    let mut log = Vec::new();
    let mut max = [0u64; 2];
    for (k, &i) in order.iter().enumerate() {
        log.push(Entry::Rec(i));
        max[i % 2] = max[i % 2].max(times[i] as u64);
        let dead = k >= from && k < from + gap / 2;
        if k % 20 == 19 {
            let mut a = vec![(0, max[0], false)];
            if !dead {
                a.push((1, max[1], false));
            }
            log.push(Entry::Announce(a));
        }
    }
    let plain = log.iter().filter(|e| matches!(e, Entry::Rec(_))).cloned().collect();
    (log, plain)
}

/// The failure of issue 19's rebalance storm, in one slice: an input
/// partition's router dies, the other goes on far beyond the lateness,
/// then the partition resumes. Without progress records its records are
/// late and verdicts differ from the in-order run; with them the slice
/// holds and every verdict is the in-order one. A snapshot taken in the
/// middle of the hold (version 5) restores it exactly.
#[test]
fn an_unrouted_partition_holds_the_watermark() {
    let n = 2_000;
    let mut rng = crate::testkit::workload::Rng::new(19);
    let keys: Vec<[u8; 8]> = (0..n).map(|_| rng.below(150).to_le_bytes()).collect();
    let times: Vec<i64> = (0..n as i64).map(|i| 10_000 + i * 5).collect();
    let in_order: Vec<Entry> = (0..n).map(Entry::Rec).collect();
    let verdicts = |j: Vec<(usize, SliceVerdict, bool)>| -> BTreeMap<usize, (SliceVerdict, bool)> {
        j.into_iter().map(|(i, v, late)| (i, (v, late))).collect()
    };
    let finish = |s: &mut SliceState, out: &mut Vec<(usize, SliceVerdict, bool)>, log: &[Entry]| {
        let mut rest = Vec::new();
        // The end of the input: nothing holds any more.
        s.order.hold_at(None);
        s.flush(&mut rest);
        out.extend(rest.into_iter().map(|j| match log[j.offset as usize] {
            Entry::Rec(i) => (i, j.verdict, j.late_by_ms.is_some()),
            Entry::Announce(_) => unreachable!(),
        }));
    };
    let mut reference = SliceState::new(0, params(), 0, order(300));
    let mut want = feed_log(&mut reference, &in_order, 0..n, &keys, &times);
    finish(&mut reference, &mut want, &in_order);
    let want = verdicts(want);
    assert_eq!(want.len(), n);
    assert!(want.values().all(|(_, late)| !late));

    // 600 records of partition 0 = 3 s ahead of partition 1, lateness 300 ms.
    let (log, plain) = storm_log(&times, 600, 1_200);
    let mut without = SliceState::new(0, params(), 0, order(300));
    let mut got = feed_log(&mut without, &plain, 0..plain.len(), &keys, &times);
    finish(&mut without, &mut got, &plain);
    let late = got.iter().filter(|(_, _, late)| *late).count();
    assert!(late > 500, "{late} late without the hold");
    assert_ne!(verdicts(got), want, "the storm changes verdicts without the hold");

    let mut whole = SliceState::new(0, params(), 0, order(300));
    let mut got = feed_log(&mut whole, &log, 0..log.len(), &keys, &times);
    let (uninterrupted, at_end) = (got.clone(), whole.clone());
    finish(&mut whole, &mut got, &log);
    assert_eq!(verdicts(got), want, "with the hold, every verdict is the in-order one");
    assert_eq!(whole.order.overflows(), 0);

    // A snapshot in the hold: partition 1 silent, partition 0 far ahead.
    let mid = log.iter().position(|e| matches!(e, Entry::Rec(i) if *i == 1_400)).unwrap();
    let mut first = SliceState::new(0, params(), 0, order(300));
    let mut got = feed_log(&mut first, &log, 0..mid, &keys, &times);
    assert!(first.order.waiting_len() > 300, "{} waiting", first.order.waiting_len());
    let bytes = encode(&first);
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), VERSION_PROGRESS, "progress: version 5");
    let mut restored = decode(&bytes, 0, &params(), order(300)).unwrap();
    let reread = restored
        .unfilled
        .clone()
        .iter()
        .map(|&(o, _)| {
            let Entry::Rec(i) = log[o as usize] else { panic!("a progress record was held") };
            let r = rec(o, &keys[i], times[i], None);
            let (t, h) = restored.held_entry(&r.record, &extractor()).unwrap();
            (o, t, h)
        })
        .collect();
    restored.refill(reread).unwrap();
    assert_eq!(restored, first);
    assert_eq!(restored.hold(), first.hold());
    got.extend(feed_log(&mut restored, &log, mid..log.len(), &keys, &times));
    assert_eq!(got, uninterrupted, "the restored slice releases as the uninterrupted one");
    assert_eq!(restored, at_end);
}

/// An idle partition holds nobody back; a record of it clears the mark.
/// The bound releases past the hold and is counted.
#[test]
fn idle_partitions_and_the_bound() {
    let keys: Vec<[u8; 8]> = (0..400u64).map(|i| i.to_le_bytes()).collect();
    let times: Vec<i64> = (0..400i64).map(|i| 10_000 + i * 10).collect();
    // A partition only said to exist holds at its start: nothing goes.
    let mut s = SliceState::new(0, params(), 0, order(100));
    let exists = Progress { topic: "in", partition: 1, time_ms: 0, idle: false, owned: false };
    let mut out = Vec::new();
    s.announce(0, &[exists], &mut out);
    assert_eq!(s.hold(), Some(0));
    let first = vec![Entry::Announce(vec![]), Entry::Rec(0), Entry::Rec(2), Entry::Rec(4), Entry::Rec(6)];
    assert!(feed_log(&mut s, &first, 1..5, &keys, &times).is_empty());
    // Once announced, "exists" changes nothing.
    s.announce(5, &[Progress { owned: true, time_ms: 10_050, ..exists }], &mut out);
    assert_eq!(s.hold(), Some(10_050));
    s.announce(6, &[exists], &mut out);
    assert_eq!(s.hold(), Some(10_050));
    assert_eq!(out.len(), 0, "the watermark is 9 950: nothing yet");
    // A topic no router names any more (taken out of input.topics) is
    // forgotten, or it would hold the watermark where it stopped.
    let mut gone = SliceState::new(0, params(), 0, order(100));
    let old = Progress { topic: "old", partition: 0, time_ms: 0, idle: false, owned: false };
    gone.announce(0, &[old, Progress { owned: true, time_ms: 5_000, ..exists }], &mut out);
    assert_eq!(gone.hold(), Some(0));
    gone.announce(1, &[Progress { owned: true, time_ms: 5_000, ..exists }], &mut out);
    assert_eq!(gone.hold(), Some(5_000));

    // Partition 1 announced idle at 10 000: only partition 0 (even
    // indices, announced at 12 000) holds.
    let mut log = vec![Entry::Announce(vec![(0, 12_000, false), (1, 10_000, true)])];
    log.extend((0..200).filter(|i| i % 2 == 0).map(Entry::Rec));
    let mut s = SliceState::new(0, params(), 0, order(100));
    let out = feed_log(&mut s, &log, 0..log.len(), &keys, &times);
    assert_eq!(out.len(), 95, "released up to 11 980 - 100");
    assert_eq!(s.hold(), Some(12_000));
    assert_eq!(s.holding(), Some((&("in".to_string(), 0), 12_000)), "partition 0 holds");
    // A record of partition 1 (at 12 010) clears its idle mark, and is
    // its progress up to the largest time seen (11 980): partition 1
    // holds again, so the records of partition 0 that follow wait.
    log.push(Entry::Rec(201));
    assert!(feed_log(&mut s, &log, log.len() - 1..log.len(), &keys, &times).is_empty());
    assert_eq!(s.hold(), Some(11_980));
    assert_eq!(s.holding(), Some((&("in".to_string(), 1), 11_980)), "partition 1 holds again");
    assert!(!s.progress[&("in".to_string(), 1)].idle);
    let before = s.order.waiting_len();
    log.extend((202..260).filter(|i| i % 2 == 0).map(Entry::Rec));
    assert!(feed_log(&mut s, &log, log.len() - 29..log.len(), &keys, &times).is_empty());
    assert_eq!(s.order.waiting_len(), before + 29);
    assert_eq!(s.order.waiting_len(), 35);
    // Bounded: at most 30 held, the next record releases past the hold.
    s.order.set_max_held(30);
    log.push(Entry::Rec(260));
    let out = feed_log(&mut s, &log, log.len() - 1..log.len(), &keys, &times);
    assert!(!out.is_empty());
    assert_eq!(s.order.overflows(), 1);
    // The count is in the snapshot.
    let back = decode(&encode(&s), 0, &params(), order(100)).unwrap();
    assert_eq!(back.order.overflows(), 1);
    assert_eq!(back.progress, s.progress);
}

/// A record far ahead of every time seen (more than `input.max_clock_jump`:
/// a broken clock) is no progress of its partition. Taken as progress up to
/// the largest time seen, it let the watermark pass a partition read behind
/// the others — its router catching up after a rebalance — and that
/// partition's next records came late (a shared-mode rebalance storm).
#[test]
fn a_clock_jump_is_no_progress() {
    let keys: Vec<[u8; 8]> = (0..400u64).map(|i| i.to_le_bytes()).collect();
    // Partition 0 (even indices) runs 2 s ahead of partition 1 (odd).
    let mut times: Vec<i64> = (0..400i64).map(|i| if i % 2 == 0 { 12_000 + i * 10 } else { 10_000 + i * 10 }).collect();
    times[201] += 86_400_000; // a day ahead
    let mut log = vec![Entry::Announce(vec![(0, 12_000, false), (1, 10_000, false)])];
    log.extend((0..200).filter(|i| i % 2 == 0).map(Entry::Rec));
    let mut s = SliceState::new(0, params(), 0, order(100));
    let mut out = feed_log(&mut s, &log, 0..log.len(), &keys, &times);
    assert_eq!(s.hold(), Some(10_000), "partition 1 holds");
    log.push(Entry::Rec(201));
    out.extend(feed_log(&mut s, &log, log.len() - 1..log.len(), &keys, &times));
    assert_eq!(s.hold(), Some(10_000), "the jump moved partition 1's progress");
    // Partition 1 goes on from where it was: 12 030 on, 1.9 s behind.
    let from = log.len();
    log.extend((203..300).filter(|i| i % 2 == 1).map(Entry::Rec));
    out.extend(feed_log(&mut s, &log, from..log.len(), &keys, &times));
    assert!(!out.is_empty());
    let late: Vec<usize> = out.iter().filter(|(_, _, late)| *late).map(|(i, _, _)| *i).collect();
    assert!(late.is_empty(), "late: {late:?}");
    assert_eq!(s.hold(), Some(12_990), "partition 1's records are its progress");
    assert_eq!(s.order.overflows(), 0);
}
