//! How the cuckoo kind plugs into the family, seen from outside it: its
//! settings, its memory plan, pipe mode's judging, `dedupd check-config`'s
//! sizing and the merge of slices (the tests of what the rest of the crate
//! does with it live here, beside the kind).

use super::{CuckooFilter, CuckooSpec};
use crate::config::{ConfigError, Resolved, Settings};
use crate::engine::dedup::tests::{judge_all, order};
use crate::engine::merge::{MergeError, merge};
use crate::engine::{Deduplicator, Extractor, OrderSettings, Outcome, SliceState};
use crate::filter::{FilterChoice, FilterKind, FilterParams, FilterSpec, KeyHash, KindSpec, SliceFilter, Verdict};

fn load(env: &[(&str, &str)]) -> Result<Resolved, ConfigError> {
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    Settings::load_from(Some(std::path::Path::new("config/dedupd.toml")), env)
}

fn rejected(env: &[(&str, &str)]) -> String {
    load(env).unwrap_err().to_string()
}

/// The cuckoo table filter: sized from the timer filter's settings, its
/// parameters in the fingerprint; a target its slots cannot reach
/// fails at start-up naming the setting.
#[test]
fn the_cuckoo_kind_is_resolved_and_validated() {
    let r = load(&[("DEDUPD__FILTER__KIND", "cuckoo")]).unwrap();
    let KindSpec::Cuckoo(spec) = &r.kind else { panic!("{:?}", r.kind) };
    assert_eq!((spec.slices, spec.fpr, spec.window_ms), (r.settings.filter.slices, 0.01, r.settings.filter.window));
    let choice = r.filter_choice().unwrap();
    assert!(matches!(choice, FilterChoice::Cuckoo(..)));
    assert!(choice.fingerprint().starts_with("kind=cuckoo,"), "{}", choice.fingerprint());
    assert!(choice.params().cells <= 64 * 2, "the idle timer filter is the smallest there is");
    assert_eq!(load(&[]).unwrap().kind, KindSpec::Timer);
    let e = rejected(&[("DEDUPD__FILTER__KIND", "cuckoo"), ("DEDUPD__FILTER__FPR", "0.0001")]);
    assert!(e.starts_with("invalid setting filter.fpr = 0.0001: needs 17-bit fingerprints"), "{e}");
    assert!(e.ends_with("(filter.kind = cuckoo)"), "{e}");
}

/// The cap lowers the table count as it lowers the timer filter's
/// generations, and the kind's parameters run with it.
#[test]
fn the_memory_cap_lowers_the_table_count() {
    // Caps above a small container's limit are refused there: those figures need room.
    if crate::memory::limit::container_limit().is_some_and(|l| l.bytes < 4 << 30) {
        return;
    }
    let env = [("DEDUPD__FILTER__KIND", "cuckoo"), ("DEDUPD__FILTER__MAX_MEMORY", "512MiB")];
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    let cuckoo = Settings::load_from(None, env).unwrap();
    let KindSpec::Cuckoo(spec) = &cuckoo.kind else { panic!("{:?}", cuckoo.kind) };
    let tables = spec.max_tables;
    assert!((1..12).contains(&tables) && cuckoo.memory.capped(), "{tables} tables: {}", cuckoo.memory);
    assert!(cuckoo.memory.worst_case <= 512 << 20, "{}", cuckoo.memory);
    let choice = cuckoo.filter_choice().unwrap();
    assert!(matches!(choice, FilterChoice::Cuckoo(_, p) if p.max_tables == tables));
}

/// `dedupd check-config`: the kind's level-0 table's 16-bit slots, not the
/// idle timer filter.
#[test]
fn the_sizing_is_the_tables() {
    // The cuckoo kind: its level-0 table's 16-bit slots, not the idle timer filter.
    let cuckoo = crate::cli::check_config::Sizing::of(&load(&[("DEDUPD__FILTER__KIND", "cuckoo")]).unwrap());
    assert_eq!((cuckoo.cell_bits, cuckoo.hashes), (16, 2), "{cuckoo:?}");
    assert_eq!(cuckoo.bytes_per_slice, cuckoo.cells * 2);
    assert!(cuckoo.cells > 1000, "{cuckoo:?}");
    assert!(cuckoo.to_string().starts_with("filter sizing: cuckoo, 8 slices, each "), "{cuckoo}");
}

/// The cuckoo kind judges like the timer filter: in event-time order
/// within the lateness, one table filter per slice, forgetting after the window.
#[test]
fn the_cuckoo_kind_judges_in_event_time_order() {
    let cuckoo = |lateness_ms| {
        let spec = CuckooSpec { window_ms: 1000, expected_keys: Some(100), slices: 4, ..CuckooSpec::default() };
        let params = spec.resolve().unwrap();
        let extractor =
            Extractor { key: "json:/k".parse().unwrap(), time: "json:/t".parse().unwrap(), max_record_bytes: 1 << 20 };
        let one = SliceFilter::from(FilterKind::Cuckoo(CuckooFilter::new(params)));
        Deduplicator::per_slice(vec![one; 4], extractor, order(lateness_ms))
    };
    let lines = [r#"{"k":"a","t":1200}"#, r#"{"k":"a","t":1000}"#, r#"{"k":"b","t":1500}"#, r#"{"k":"a","t":2500}"#];
    let dup = Outcome::Duplicate { equal_timers: 0 };
    assert_eq!(
        judge_all(&mut cuckoo(500), &lines),
        [dup.clone(), Outcome::Distinct, Outcome::Distinct, Outcome::Distinct]
    );
    assert_eq!(judge_all(&mut cuckoo(0), &lines)[..2], [Outcome::Distinct, dup]);
    let d = cuckoo(0);
    assert_eq!(d.memory_bytes(), d.judges().iter().map(|f| f.as_cuckoo().unwrap().memory_bytes() as u64).sum::<u64>());
}

fn params(slices: u32) -> FilterParams {
    FilterSpec { window_ms: 10_000, expected_keys: 4_000, slices, tick_ms: Some(100), ..FilterSpec::default() }
        .resolve()
        .unwrap()
}

fn tables(slices: u32) -> FilterChoice {
    let spec = CuckooSpec { window_ms: 10_000, expected_keys: Some(4_000), slices, ..CuckooSpec::default() };
    FilterChoice::Cuckoo(params(slices), spec.resolve().unwrap())
}

/// The cuckoo kind's tables unite as the timer's generations do: 16
/// slices merged into 8 remember every key of the window, keep their
/// false positives few, count every event, and snapshot under the new
/// parameters; a timer filter's slices do not become a cuckoo table.
#[test]
fn merged_cuckoo_slices_remember_every_key() {
    let order = OrderSettings { lateness_ms: 0, max_clock_jump_ms: 600_000, jump_confirmations: 16 };
    let (c16, c8) = (tables(16), tables(8));
    let mut old: Vec<SliceState> = (0..16).map(|i| SliceState::new(i, c16.clone(), 0, order)).collect();
    let seed = c16.params().seed;
    let key = |i: u64| KeyHash::of(seed, &i.to_le_bytes());
    for i in 0..3_000u64 {
        let h = key(i);
        old[h.slice(16) as usize].filter.observe(&h, 1_000 + i * 2);
    }
    let merged = merge(old.clone(), 8, &c8, order).unwrap();
    let table = |s: &SliceState| s.filter.as_cuckoo().unwrap().clone();
    for i in 0..3_000u64 {
        let h = key(i);
        assert!(table(&merged[h.slice(8) as usize]).contains(&h), "key {i} forgotten");
    }
    let fresh = (10_000..12_000u64).filter(|&i| table(&merged[key(i).slice(8) as usize]).contains(&key(i)));
    assert!(fresh.count() < 60, "too many false positives");
    let events = |states: &[SliceState]| states.iter().map(|s| table(s).counters().events).sum::<u64>();
    assert_eq!(events(&merged), events(&old));
    assert!(merged.iter().all(|s| table(s).tables().len() >= 2), "each new slice holds two old slices' tables");
    // A merged slice judges on: an old key is a duplicate, a new one is stored.
    let mut five = merged[5].clone();
    let old_key = (0..3_000u64).map(key).find(|h| h.slice(8) == 5).unwrap();
    assert!(matches!(five.filter.observe(&old_key, 7_000), Verdict::Duplicate { .. }));
    let bytes = crate::engine::slice::encode(&merged[5]);
    let back = crate::engine::slice::decode(&bytes, 5, &c8, order).unwrap();
    assert_eq!(back, merged[5]);
    let timers: Vec<SliceState> = (0..16).map(|i| SliceState::new(i, params(16), 0, order)).collect();
    let e = merge(timers, 8, &c8, order).unwrap_err();
    assert!(matches!(&e, MergeError::Parameters { parameter: "kind", .. }), "{e}");
    let wider = CuckooSpec { window_ms: 20_000, expected_keys: Some(4_000), slices: 8, ..CuckooSpec::default() };
    let wider = FilterChoice::Cuckoo(params(8), wider.resolve().unwrap());
    assert!(matches!(merge(old, 8, &wider, order), Err(MergeError::Parameters { .. })));
}

/// Without `filter.expected_keys` the cuckoo kind starts each slice at
/// its small first table and is planned with its largest tables grown
/// from it; the timer kind refuses the empty estimate, naming it.
#[test]
fn an_absent_estimate_is_planned_from_the_small_start() {
    let none = [("DEDUPD__FILTER__KIND", "cuckoo"), ("DEDUPD__FILTER__EXPECTED_KEYS", "")];
    let r = load(&none).unwrap();
    let KindSpec::Cuckoo(spec) = &r.kind else { panic!("{:?}", r.kind) };
    assert_eq!(spec.expected_keys, None);
    let p = spec.resolve().unwrap();
    assert_eq!(p.buckets, crate::filter::cuckoo::params::START_BUCKETS);
    let slices = u64::from(r.settings.filter.slices);
    let top = p.table_bytes(super::params::MAX_LEVEL);
    assert!(r.memory.worst_case >= slices * p.table_bytes(0), "{}", r.memory);
    if !r.memory.capped() {
        assert!(r.memory.worst_case >= slices * top * u64::from(p.max_tables), "{}", r.memory);
    }
    assert!(r.memory.to_string().contains("filter"), "check-config prints a plan: {}", r.memory);
    let e = load(&[("DEDUPD__FILTER__EXPECTED_KEYS", "")]).unwrap_err().to_string();
    assert!(e.starts_with("invalid setting filter.expected_keys"), "{e}");
}
