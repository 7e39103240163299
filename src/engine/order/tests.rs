use super::*;

#[test]
fn spare_room_is_given_back_after_a_backlog() {
    assert_eq!(shrink_target(10_000, 28_672), Some(12_500));
    // Around its usual size, or small: left alone.
    assert_eq!(shrink_target(10_000, 16_384), None);
    assert_eq!(shrink_target(0, 1024), None);
    let mut b =
        ReorderBuffer::new(OrderSettings { lateness_ms: 1000, max_clock_jump_ms: 1 << 40, jump_confirmations: 1 });
    let mut released = 0;
    // Times far apart: each new record passes the watermark of the ones before only at the flush.
    for i in 0..50_000u64 {
        b.push(500 + i / 100, i, (), |_| released += 1);
    }
    b.flush(|_| released += 1);
    assert_eq!(released, 50_000);
    assert!(b.waiting.is_empty() && b.waiting.capacity() >= 50_000);
    b.shrink_spare();
    assert!(b.waiting.capacity() < 1024, "capacity {} after the backlog", b.waiting.capacity());
}

fn settings(lateness_ms: u64) -> OrderSettings {
    OrderSettings { lateness_ms, max_clock_jump_ms: 10_000, jump_confirmations: 3 }
}

/// Pushes `(time, position)` records; returns what came out, as
/// `(position, late_by)` for judged and `(position, "reject")` for rejected.
fn run(b: &mut ReorderBuffer<()>, records: &[(u64, u64)]) -> Vec<String> {
    let mut out = Vec::new();
    for &(t, p) in records {
        b.push(t, p, (), |r| out.push(describe(&r)));
    }
    out
}

fn describe(r: &Released<()>) -> String {
    match r {
        Released::Judge { position, late_by_ms: None, .. } => format!("{position}"),
        Released::Judge { position, late_by_ms: Some(l), .. } => format!("{position} late {l}"),
        Released::Reject { position, ahead_ms, .. } => format!("{position} reject {ahead_ms}"),
    }
}

#[test]
fn releases_in_time_order_once_the_watermark_passes() {
    let mut b = ReorderBuffer::new(settings(100));
    // Arrival order: 0@1000, 1@1050, 2@1020, 3@1150 (watermark 1050), 4@1300 (watermark 1200).
    let out = run(&mut b, &[(1000, 0), (1050, 1), (1020, 2), (1150, 3), (1300, 4)]);
    assert_eq!(out, ["0", "2", "1", "3"]);
    assert_eq!(b.marks(), OrderMarks { max_seen_ms: Some(1300), watermark_ms: Some(1200) });
    // Behind the watermark: late, released at once.
    assert_eq!(run(&mut b, &[(1199, 5)]), ["5 late 1"]);
    // Ties in time: by position.
    assert_eq!(run(&mut b, &[(1250, 6), (1250, 7), (1400, 8)]), ["6", "7", "4"]);
    let mut rest = Vec::new();
    b.flush(|r| rest.push(describe(&r)));
    assert_eq!(rest, ["8"]);
    assert_eq!(b.waiting_len(), 0);
}

#[test]
fn zero_lateness_is_arrival_order_for_ordered_input() {
    let mut b = ReorderBuffer::new(settings(0));
    assert_eq!(run(&mut b, &[(5, 0), (5, 1), (7, 2), (6, 3)]), ["0", "1", "2", "3 late 1"]);
}

#[test]
fn a_lone_jump_is_rejected_and_a_confirmed_one_admitted() {
    let mut b = ReorderBuffer::new(settings(0));
    // The first three are settled together, against their median (1 001).
    assert_eq!(run(&mut b, &[(1_000, 0), (99_000, 1), (1_001, 2)]), ["0", "1 reject 97999", "2"]);
    // Two suspects, then a normal record: both rejected.
    assert_eq!(run(&mut b, &[(50_000, 3), (50_001, 4), (1_002, 5)]), ["3 reject 48999", "4 reject 49000", "5"]);
    // Three in a row: the stream resumed after a gap.
    assert_eq!(run(&mut b, &[(90_000, 6), (90_001, 7)]), Vec::<String>::new());
    assert_eq!(b.suspects_len(), 2);
    assert_eq!(run(&mut b, &[(90_002, 8), (90_003, 9)]), ["6", "7", "8", "9"]);
    // A flush leaves suspects held; the end of input admits them.
    assert!(run(&mut b, &[(200_000, 10)]).is_empty());
    let mut out = Vec::new();
    b.flush(|r| out.push(describe(&r)));
    assert!(out.is_empty());
    b.finish(|r| out.push(describe(&r)));
    assert_eq!(out, ["10"]);
}

/// A stream whose very first record is stamped in the year 3000: it is
/// rejected, and the clock starts with the others.
#[test]
fn the_first_records_are_measured_against_each_other() {
    let year_3000 = 32_503_680_000_000;
    let mut b = ReorderBuffer::new(settings(0));
    assert!(run(&mut b, &[(year_3000, 0), (1_000, 1)]).is_empty(), "held until three have come");
    assert_eq!(b.suspects_len(), 2);
    assert_eq!(run(&mut b, &[(1_010, 2)]), [format!("0 reject {}", year_3000 - 1_010), "1".into(), "2".into()]);
    assert_eq!(b.marks().max_seen_ms, Some(1_010));
    assert_eq!(run(&mut b, &[(1_020, 3)]), ["3"]);

    // Before 1970 (time 0) first: admitted, and late for nothing (it comes first).
    let mut b = ReorderBuffer::new(settings(0));
    assert_eq!(run(&mut b, &[(0, 0), (5_000, 1), (5_001, 2)]), ["0", "1", "2"]);

    // Fewer than three, then a flush (an idle slice): settled with what came.
    let mut b = ReorderBuffer::new(settings(0));
    assert!(!b.flush_pending());
    assert!(run(&mut b, &[(1_000, 0), (year_3000, 1)]).is_empty());
    assert!(b.flush_pending());
    let mut out = Vec::new();
    b.flush(|r| out.push(describe(&r)));
    // The lower median (1 000) is the reference: a tie goes to the earlier time.
    assert_eq!(out, ["0".to_string(), format!("1 reject {}", year_3000 - 1_000)]);
    assert!(!b.flush_pending());
}

#[test]
fn a_restored_buffer_continues_identically() {
    let mut rng = crate::testkit::workload::Rng::new(7);
    let records: Vec<(u64, u64)> = (0..2_000u64).map(|i| (10_000 + i * 3 + rng.below(400), i)).collect();
    let mut whole = ReorderBuffer::new(settings(250));
    let expected = run(&mut whole, &records);
    let mut first = ReorderBuffer::new(settings(250));
    let mut got = run(&mut first, &records[..1_000]);
    let waiting: Vec<Waiting<()>> = first.held().filter(|(_, s)| !s).map(|(w, _)| w.clone()).collect();
    let mut second = ReorderBuffer::restore(settings(250), first.marks(), waiting, Vec::new());
    got.extend(run(&mut second, &records[1_000..]));
    assert_eq!(got, expected);
}

/// Whatever the arrival order, as long as no record comes more than the
/// lateness behind the largest time before it, the released order is
/// the (time, position) order of the whole input.
#[test]
fn bounded_disorder_comes_out_sorted() {
    let mut rng = crate::testkit::workload::Rng::new(11);
    for lateness in [0u64, 1, 50, 500] {
        // Times jittered by less than the lateness around an increasing base.
        let records: Vec<(u64, u64)> =
            (0..5_000u64).map(|i| (1_000 + i + rng.below(lateness + 1).min(lateness), i)).collect();
        let mut b = ReorderBuffer::new(settings(lateness));
        let mut out = Vec::new();
        for &(t, p) in &records {
            b.push(t, p, (), |r| out.push(r));
        }
        b.finish(|r| out.push(r));
        let got: Vec<(u64, u64)> = out
            .iter()
            .map(|r| match r {
                Released::Judge { time_ms, position, late_by_ms: None, .. } => (*time_ms, *position),
                other => panic!("lateness {lateness}: {other:?}"),
            })
            .collect();
        let mut sorted = records.clone();
        sorted.sort();
        assert_eq!(got, sorted, "lateness {lateness}");
    }
}

/// The hold keeps the watermark behind an input that may still deliver:
/// a record that comes from it later, older than the largest time seen
/// by more than the lateness, is still in order. Raising the hold
/// releases; a flush stops at the hold.
#[test]
fn the_hold_keeps_the_watermark_behind_it() {
    let mut b = ReorderBuffer::new(settings(100));
    let mut out = Vec::new();
    b.set_hold(Some(990), |r| out.push(describe(&r)));
    assert!(out.is_empty());
    // 0@1000 .. 5@1500: without the hold the watermark would be 1 400.
    let out = run(&mut b, &[(1_000, 0), (1_100, 1), (1_200, 2), (1_300, 3), (1_400, 4), (1_500, 5)]);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(b.marks().watermark_ms, Some(890), "hold 990 - lateness 100, below every record");
    // A flush releases nothing past the hold.
    assert!(!b.flush_pending());
    // The held-back input resumes at 950: in order, not late.
    assert!(run(&mut b, &[(950, 6)]).is_empty());
    assert!(!b.flush_pending());
    let mut out = Vec::new();
    b.set_hold(Some(1_250), |r| out.push(describe(&r)));
    assert_eq!(out, ["6", "0", "1"], "released up to 1 150");
    assert!(!b.flush_pending());
    b.flush(|r| out.push(describe(&r)));
    assert_eq!(out, ["6", "0", "1"], "a flush stops at the hold's watermark");
    assert_eq!(b.marks().watermark_ms, Some(1_150));
    // No hold: back to largest time - lateness, then a flush releases all.
    let mut out = Vec::new();
    b.set_hold(None, |r| out.push(describe(&r)));
    assert_eq!(out, ["2", "3", "4"]);
    assert!(b.flush_pending());
    b.flush(|r| out.push(describe(&r)));
    assert_eq!(out, ["2", "3", "4", "5"]);
    assert_eq!(b.overflows(), 0);
}

/// More than `max_held` records waiting: the hold is ignored (released
/// as without it) and counted; a record of the held input is then late.
#[test]
fn the_hold_is_bounded() {
    let mut b = ReorderBuffer::new(settings(100));
    b.set_max_held(3);
    b.set_hold(Some(1_000), |_| unreachable!("nothing waits"));
    assert!(run(&mut b, &[(1_000, 0), (1_200, 1), (1_300, 2)]).is_empty());
    assert_eq!(b.waiting_len(), 3);
    // A fourth: more than 3 wait, released as if there were no hold (to 1 300).
    assert_eq!(run(&mut b, &[(1_400, 3)]), ["0", "1", "2"]);
    assert_eq!(b.overflows(), 1);
    assert_eq!(run(&mut b, &[(950, 4)]), ["4 late 350"]);
    // Under the bound again, the hold holds: the watermark stays.
    assert!(run(&mut b, &[(1_500, 5), (1_600, 6)]).is_empty());
    assert_eq!(b.marks().watermark_ms, Some(1_300));
    assert_eq!(b.overflows(), 1);
    // finish ignores the hold: nothing more can come.
    let mut out = Vec::new();
    b.finish(|r| out.push(describe(&r)));
    assert_eq!(out, ["3", "5", "6"]);
}

/// A flush past the hold (the held records took more bytes than the slice
/// may hold): the records only the hold kept back are released, up to the
/// largest time seen, and counted as an overflow; a plain flush would
/// release none of them, and a record of the held input is late after it.
#[test]
fn a_flush_past_the_hold_releases_what_only_the_hold_kept() {
    let mut b = ReorderBuffer::new(settings(100));
    b.set_hold(Some(1_000), |_| unreachable!("nothing waits"));
    assert!(run(&mut b, &[(1_000, 0), (1_200, 1), (1_300, 2)]).is_empty());
    assert!(!b.flush_pending() && b.hold_keeps_back(), "only the hold keeps them");
    let mut out = Vec::new();
    b.flush(|r| out.push(describe(&r)));
    assert!(out.is_empty(), "a plain flush stops at the hold: {out:?}");
    b.flush_past_hold(|r| out.push(describe(&r)));
    assert_eq!(out, ["0", "1", "2"]);
    assert_eq!((b.overflows(), b.marks().watermark_ms), (1, Some(1_300)));
    assert!(!b.hold_keeps_back(), "nothing waits");
    assert_eq!(run(&mut b, &[(1_250, 3)]), ["3 late 50"]);
    // Without a hold there is nothing to go past.
    let free = ReorderBuffer::<()>::new(settings(100));
    assert!(!free.hold_keeps_back());
}
