//! Inputs the fuzz targets (fuzz/, `scripts/fuzz.sh`) found to crash dedupd
//! or to restore a slice that was not the one snapshotted, kept as ordinary
//! tests so that CI holds them without the fuzzer: each feeds the exact
//! bytes (in tests/fuzz/) to the function that failed and asserts its answer.
//!
//! The snapshots are real ones (the samples of fuzz/src/lib.rs) edited by
//! `snapshot_mutated`, their checksums recomputed; `fuzz/src/bin/decoded.rs`
//! turns a crashing input into the bytes decoded.

use dedupd::config::{ConfigError, Settings};
use dedupd::engine::slice::{self, SliceState};
use dedupd::engine::{Extractor, InvalidReason, OrderSettings, RecordView, SliceRecord, SliceVerdict};
use dedupd::filter::{FilterChoice, FilterSpec, KeyHash, Layout, SnapshotError};

/// The filter of the fuzz samples.
fn params(timer_bits: u8, layout: Layout, lateness_ms: u64) -> FilterChoice {
    let spec = FilterSpec {
        window_ms: 2_000,
        expected_keys: 150,
        timer_bits,
        layout,
        lateness_ms: Some(lateness_ms),
        ..FilterSpec::default()
    };
    spec.resolve().unwrap().into()
}

fn order(lateness_ms: u64) -> OrderSettings {
    OrderSettings { lateness_ms, max_clock_jump_ms: 5_000, jump_confirmations: 3 }
}

fn found(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fuzz/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn malformed(got: Result<SliceState, SnapshotError>) -> String {
    match got {
        Err(SnapshotError::Malformed(why)) => why,
        Err(e) => panic!("expected a malformed snapshot, got {e}"),
        Ok(_) => panic!("expected a malformed snapshot, it was restored"),
    }
}

/// A filter that never saw an event (no clock) with one cell set: restored,
/// the cell was left out of the live count and came alive once the clock
/// started, so the slice's next snapshot restored another filter.
#[test]
fn set_cells_without_a_clock_are_refused() {
    let bytes = found("snapshot-set-cells-without-clock.bin");
    let why = malformed(slice::decode(&bytes, 0, &params(8, Layout::Standard, 0), order(0)));
    assert!(why.contains("no clock (it never saw an event)"), "{why}");
}

/// A cell holding a time older than the clock allows (found as one the
/// sweep would not clear before it came round again): it would look young
/// by itself, and the live count (hence growth) would drift from the cells.
#[test]
fn a_cell_that_would_come_round_again_is_refused() {
    let bytes = found("snapshot-cell-wraps-before-the-sweep.bin");
    let why = malformed(slice::decode(&bytes, 1, &params(32, Layout::Standard, 50), order(50)));
    assert!(why.starts_with("cell 1219 holds the time value 3326, which is older than the clock"), "{why}");
}

/// A clock at time 0 and cells holding times before it: the steps of the
/// first window retire nothing, so they stayed in the live count for good.
#[test]
fn a_cell_older_than_the_clock_is_refused() {
    let bytes = found("snapshot-cell-older-than-the-clock.bin");
    let why = malformed(slice::decode(&bytes, 0, &params(8, Layout::Standard, 0), order(0)));
    assert!(why.contains("which is older than the clock: a time before tick 0"), "{why}");
}

/// A slice whose largest time seen lies beyond the times of its held
/// time-jump suspects as re-read from the log (as after a change of
/// `input.time`): rejecting them subtracted into an overflow, a panic in
/// debug builds. They are rejected as time jumps, 0 ms ahead.
#[test]
fn restored_suspects_behind_the_clock_are_rejected_without_overflow() {
    let p = params(16, Layout::Blocked, 50);
    let mut state = slice::decode(&found("snapshot-suspect-behind-the-clock.bin"), 5, &p, order(50)).unwrap();
    let suspects: Vec<u64> = state.unfilled.iter().filter(|(_, suspect)| *suspect).map(|(o, _)| *o).collect();
    assert!(!suspects.is_empty());
    let max_seen = state.order.marks().max_seen_ms.unwrap();
    // The times the fuzz target gave the held records when it put them back.
    let held =
        state.unfilled.iter().map(|&(o, _)| (o, o * 13, KeyHash::of(p.params().seed, &o.to_le_bytes()))).collect();
    state.refill(held).unwrap();
    assert!(suspects.iter().all(|o| o * 13 < max_seen), "the suspects are behind the clock");

    let ex = Extractor {
        key: "record-key".parse().unwrap(),
        time: "record-timestamp".parse().unwrap(),
        max_record_bytes: 1 << 16,
    };
    let offset = state.next_offset;
    let record =
        RecordView { key: Some(b"k"), payload: b"p", timestamp_ms: Some(max_seen as i64), ..Default::default() };
    let mut out = Vec::new();
    state.process(&SliceRecord { offset, record, source: None, reading: None }, &ex, &mut out);
    let rejected: Vec<u64> = out
        .iter()
        .filter(|j| matches!(&j.verdict, SliceVerdict::Invalid(e) if e.reason == InvalidReason::TimeJump))
        .map(|j| j.offset)
        .collect();
    assert_eq!(rejected, suspects);
    let SliceVerdict::Invalid(e) = &out[0].verdict else { panic!("{out:?}") };
    assert!(e.detail.contains(" is 0 ms ahead of the largest time seen"), "{e}");
}

/// `config` found `DEDUPD__FILTER__EXPECTED_KEYS=inf`: the loader read it
/// as u64::MAX keys, and sizing their cells overflowed (a panic in debug
/// builds; in release the product wrapped and could pass the size check).
/// `inf` is no count now (the setting takes a count or nothing), and the
/// largest counts (2^60) are refused by the sizing rule without an overflow.
#[test]
fn expected_keys_of_inf_is_refused_by_name() {
    let load =
        |value: &str| Settings::load_from_str("", [("DEDUPD__FILTER__EXPECTED_KEYS".to_string(), value.to_string())]);
    match load("inf") {
        Err(ConfigError::Load(message)) => {
            assert!(message.contains("filter.expected_keys") && message.contains("\"inf\""), "{message}");
        }
        other => panic!("expected filter.expected_keys = inf to be refused, got {other:?}"),
    }
    match load(&(1u64 << 60).to_string()) {
        Err(ConfigError::Invalid { setting, rule, .. }) => {
            assert_eq!(setting, "filter.expected_keys");
            assert_eq!(rule, "needs more than 1 TiB of cells per slice");
        }
        other => panic!("expected filter.expected_keys = 2^60 to be refused, got {other:?}"),
    }
}
