//! Arbitrary record streams through a slice — any timestamps (negative,
//! absent, i64::MAX, far jumps), any disorder, re-sends, idle flushes and
//! snapshot/restore at any point: never a panic, every record judged at most
//! once and held otherwise, and a slice restored from its snapshot judges
//! the rest exactly as the one that never stopped (design invariants 1, 5, 7).
#![no_main]

use std::collections::{BTreeMap, BTreeSet};

use dedupd::engine::slice::{self, SliceState};
use dedupd::engine::{Judgment, OrderSettings, RecordView, SliceRecord, SourceRef};
use dedupd::filter::FilterSpec;
use dedupd_fuzz::record_key_extractor;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Time {
    /// Any timestamp at all.
    Absolute(i64),
    /// Near the previous one (the usual case, and the one that reaches the filter's window logic).
    Relative(i16),
    Missing,
}

#[derive(Arbitrary, Debug)]
enum Op {
    Record { key: u8, time: Time, source: Option<(bool, u8, i16)> },
    Flush,
    Restore,
}

#[derive(Arbitrary, Debug)]
struct Input {
    window_s: u8,
    lateness_ms: u16,
    max_clock_jump_ms: u32,
    jump_confirmations: u8,
    timer_bits: u8,
    ops: Vec<Op>,
}

/// One record of the log, kept so that a restore can re-read held ones.
struct Logged {
    key: Vec<u8>,
    ts: Option<i64>,
}

fuzz_target!(|input: Input| {
    let window_ms = (u64::from(input.window_s) + 1) * 1_000;
    let lateness_ms = u64::from(input.lateness_ms) % window_ms;
    let spec = FilterSpec {
        window_ms,
        expected_keys: 64,
        timer_bits: [4, 8, 16, 32][usize::from(input.timer_bits % 4)],
        lateness_ms: Some(lateness_ms),
        equal_timers: 2,
        ..FilterSpec::default()
    };
    let Ok(params) = spec.resolve() else { return };
    let order = OrderSettings {
        lateness_ms,
        max_clock_jump_ms: u64::from(input.max_clock_jump_ms).max(1),
        jump_confirmations: u32::from(input.jump_confirmations % 8).max(1),
    };
    let ex = record_key_extractor();
    let mut steady = SliceState::new(7, params.clone(), 0, order);
    let mut restored = SliceState::new(7, params.clone(), 0, order);
    let (mut out_a, mut out_b): (Vec<Judgment>, Vec<Judgment>) = (Vec::new(), Vec::new());
    let mut log: BTreeMap<u64, Logged> = BTreeMap::new();
    let mut last_ts: i64 = 1_000_000;
    let mut offset = 0u64;
    for op in input.ops.iter().take(512) {
        match op {
            Op::Record { key, time, source } => {
                let ts = match time {
                    Time::Absolute(t) => Some(*t),
                    Time::Relative(d) => Some(last_ts.saturating_add(i64::from(*d) * 10)),
                    Time::Missing => None,
                };
                if let Some(t) = ts {
                    last_ts = t;
                }
                let key = format!("k{key}").into_bytes();
                let topic = |other: bool| if other { "b" } else { "a" };
                let src = source.map(|(t, p, o)| SourceRef {
                    topic: topic(t),
                    partition: i32::from(p % 4),
                    offset: i64::from(o),
                });
                let rec = SliceRecord {
                    offset,
                    record: RecordView { key: Some(&key), payload: b"p", timestamp_ms: ts, ..Default::default() },
                    source: src,
                    reading: None,
                };
                steady.process(&rec, &ex, &mut out_a);
                restored.process(&rec, &ex, &mut out_b);
                log.insert(offset, Logged { key, ts });
                offset += 1;
            }
            Op::Flush => {
                steady.flush(&mut out_a);
                restored.flush(&mut out_b);
            }
            Op::Restore => {
                let bytes = slice::encode(&restored);
                let mut back =
                    slice::decode(&bytes, 7, &params.clone().into(), order).expect("a slice's own snapshot decodes");
                let held: Vec<(u64, u64, _)> = back
                    .unfilled
                    .iter()
                    .filter_map(|&(o, _)| {
                        let l = &log[&o];
                        let view =
                            RecordView { key: Some(&l.key), payload: b"p", timestamp_ms: l.ts, ..Default::default() };
                        back.held_entry(&view, &ex).map(|(t, h)| (o, t, h))
                    })
                    .collect();
                back.refill(held).expect("every held record is in the log");
                assert!(back == restored, "the restored slice differs from the one snapshotted");
                restored = back;
            }
        }
        assert_eq!(out_a, out_b, "a restored slice judged differently");
    }
    // Every record judged at most once; the others are still held.
    let judged: BTreeSet<u64> = out_a.iter().map(|j| j.offset).collect();
    assert_eq!(judged.len(), out_a.len(), "a record was judged twice");
    let held: BTreeSet<u64> = steady.held_offsets().into_iter().map(|(o, _)| o).collect();
    assert!(judged.is_disjoint(&held), "a record was judged and is still held");
    assert_eq!(judged.len() + held.len(), offset as usize, "a record was lost");
});
