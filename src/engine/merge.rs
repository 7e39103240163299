//! Merging slice states to shrink the number of slices (`dedupd checkpoint
//! merge`): the union of slice filters with identical parameters, as the
//! Dynamic Bloom Filter paper unites DBFs (Def. 3): the generations are
//! concatenated, not OR-ed, so each keeps its own size, fill threshold,
//! sweep position and (deletable filters) counting cells. Pure: the kafka
//! layer reads and writes the snapshots.
//!
//! Which old slices a new slice takes: `H_S(key)` is a multiply-shift of 32
//! bits of the key hash, so old slice `i` of `S` holds the hash values
//! `[⌈i·2³²/S⌉, ⌈(i+1)·2³²/S⌉)`, and new slice `j` of `S'` takes every old
//! slice whose range meets its own (16 → 8: slices 2j and 2j + 1; when `S'`
//! does not divide `S` an old slice is split between two new ones, and both
//! take all of it: a false positive more, never a false negative).
//!
//! New slice `j` goes on reading partition `j` of the slice log, so its
//! position, idle-flush log position and output partition are old slice
//! `j`'s; the filter is the union of its sources; the re-send marks are the
//! largest of every old slice (a record the router sends again is caught by
//! whichever slice it now goes to). Old slices must have no record waiting
//! for the watermark (a merge is for a drained, stopped daemon).

use std::collections::BTreeMap;

use super::order::{OrderMarks, OrderSettings, ReorderBuffer};
use super::slice::{InputProgress, SliceCounters, SliceState};
use crate::engine::slice::stages::SliceStages;
use crate::filter::{FilterChoice, KindName, SliceFilter, UniteError};

/// Why slice states cannot be merged.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MergeError {
    #[error("merging {from} slices into {to}: {rule}")]
    Counts { from: u32, to: u32, rule: &'static str },
    #[error(
        "slice {slice} has {waiting} records waiting for the watermark in its snapshot: stop the daemon once it has \
         judged everything (an idle flush releases them), then merge"
    )]
    Waiting { slice: u32, waiting: usize },
    #[error("the filters differ in {parameter} ({left} and {right}): only filters with identical parameters unite")]
    Parameters { parameter: &'static str, left: String, right: String },
    #[error(
        "slice {slice} holds a filter.kind = {kind} filter: {} (run the count kinds with their slice count, or \
         start the new slices cold)",
        KindName::UNITING
    )]
    KindDoesNotUnite { slice: u32, kind: &'static str },
    #[error("new slice {slice} would hold {generations} generations (at most {most} are restored)")]
    TooManyGenerations { slice: u32, generations: usize, most: usize },
}

/// `sources(from, to)[j]`: the old slices new slice `j` takes.
pub fn sources(from: u32, to: u32) -> Vec<Vec<u32>> {
    let new_slice = |x: u64| ((x * u64::from(to)) >> 32) as u32;
    let mut out = vec![Vec::new(); to as usize];
    for i in 0..from {
        let lo = (u64::from(i) << 32).div_ceil(u64::from(from));
        let hi = (u64::from(i + 1) << 32).div_ceil(u64::from(from)) - 1;
        for j in new_slice(lo)..=new_slice(hi) {
            out[j as usize].push(i);
        }
    }
    out
}

/// Merges `old` (old slice `i` at index `i`, all of one filter's
/// parameters) into `to` slices with `filter` (the filter settings for `to`
/// slices) and `order` (the event-time settings).
pub fn merge(
    old: Vec<SliceState>,
    to: u32,
    filter: &FilterChoice,
    order: OrderSettings,
) -> Result<Vec<SliceState>, MergeError> {
    let from = old.len() as u32;
    if to == 0 || to >= from {
        return Err(MergeError::Counts { from, to, rule: "the new count must be at least 1 and below the old one" });
    }
    for s in &old {
        if !s.filter.unites() {
            return Err(MergeError::KindDoesNotUnite { slice: s.slice, kind: s.filter.kind_name() });
        }
        if !s.unfilled.is_empty() || s.order.held().next().is_some() {
            return Err(MergeError::Waiting { slice: s.slice, waiting: s.unfilled.len().max(s.order.held().count()) });
        }
    }
    let resend_marks = largest_resend_marks(&old);
    let plan = sources(from, to);
    let mut merged = Vec::with_capacity(to as usize);
    for (j, from_slices) in plan.iter().enumerate() {
        let j = j as u32;
        let parts: Vec<&SliceState> = from_slices.iter().map(|&i| &old[i as usize]).collect();
        // Each old slice's counts go to one new slice (the first that takes it).
        let mut counters = SliceCounters::default();
        for s in parts.iter().filter(|s| plan.iter().position(|p| p.contains(&s.slice)) == Some(j as usize)) {
            counters.add(&s.counters);
        }
        let marks = OrderMarks {
            max_seen_ms: parts.iter().filter_map(|s| s.order.marks().max_seen_ms).max(),
            watermark_ms: parts.iter().filter_map(|s| s.order.marks().watermark_ms).max(),
        };
        let own = &old[j as usize];
        merged.push(SliceState {
            slice: j,
            filter: unite_filters(&parts, filter, j)?,
            next_offset: own.next_offset,
            resend_marks: resend_marks.clone(),
            counters,
            // No stage: which sources saw a key is not merged (a merged
            // slice's provenance starts empty, docs/deletion-merge.md), and a
            // counting stage's snapshots are refused by `decode` (the slice
            // is configured without it) before this.
            stages: SliceStages::default(),
            passthrough: false,
            order: ReorderBuffer::restore(order, marks, Vec::new(), Vec::new()),
            unfilled: Vec::new(),
            flushes_next: own.flushes_next,
            progress: slowest_progress(&parts),
            log_form: own.log_form,
        });
    }
    Ok(merged)
}

/// The union of the parts' filters, of the kind `filter` chooses (the
/// parts must all hold it: kinds that do not unite were refused before).
fn unite_filters(parts: &[&SliceState], filter: &FilterChoice, slice: u32) -> Result<SliceFilter, MergeError> {
    let filters: Vec<&SliceFilter> = parts.iter().map(|s| &s.filter).collect();
    filter.unite(&filters).map_err(|e| match e {
        UniteError::Parameters { parameter, left, right } => MergeError::Parameters { parameter, left, right },
        UniteError::TooManyParts { parts, most } => MergeError::TooManyGenerations { slice, generations: parts, most },
        UniteError::NotUnitable { kind } => MergeError::KindDoesNotUnite { slice, kind },
    })
}

/// The largest re-send mark of every old slice, per input partition: a
/// record the router sends again is caught by whichever slice it now goes to.
fn largest_resend_marks(old: &[SliceState]) -> BTreeMap<(String, i32), i64> {
    let mut marks: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for s in old {
        for (input, &offset) in &s.resend_marks {
            let mark = marks.entry(input.clone()).or_insert(offset);
            *mark = (*mark).max(offset);
        }
    }
    marks
}

/// The slowest partition's progress of the parts: the merged slice holds
/// where the most held of them did (the hold only delays releases; it
/// never judges differently).
fn slowest_progress(parts: &[&SliceState]) -> BTreeMap<(String, i32), InputProgress> {
    let mut progress: BTreeMap<(String, i32), InputProgress> = BTreeMap::new();
    for s in parts {
        for (id, p) in &s.progress {
            let e = progress.entry(id.clone()).or_insert(*p);
            e.time_ms = e.time_ms.min(p.time_ms);
            e.idle &= p.idle;
        }
    }
    progress
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::{FilterParams, FilterSpec, KeyHash};

    #[test]
    fn every_key_lands_in_a_slice_that_took_its_old_slice() {
        let mut rng = crate::filter::random::Rng::new(9);
        for (from, to) in [(16, 8), (16, 4), (16, 6), (7, 3), (8, 1), (5, 4)] {
            let plan = sources(from, to);
            if from % to == 0 {
                // Exact: each old slice goes to one new slice.
                assert_eq!(plan.iter().map(Vec::len).sum::<usize>(), from as usize, "{from} → {to}");
            }
            for _ in 0..20_000 {
                let h = KeyHash { h1: rng.next_u64(), h2: rng.next_u64() };
                assert!(plan[h.slice(to) as usize].contains(&h.slice(from)), "{from} → {to}: {h:?}");
            }
        }
        assert_eq!(sources(16, 8)[3], vec![6, 7]);
    }

    fn params(slices: u32) -> FilterParams {
        FilterSpec { window_ms: 10_000, expected_keys: 4_000, slices, tick_ms: Some(100), ..FilterSpec::default() }
            .resolve()
            .unwrap()
    }

    /// Keys judged by 16 slices, merged into 8: every key of the window is
    /// a duplicate in its new slice, and new keys are mostly distinct.
    #[test]
    fn merged_slices_remember_every_key() {
        let order = OrderSettings { lateness_ms: 0, max_clock_jump_ms: 600_000, jump_confirmations: 16 };
        let (p16, p8) = (params(16), params(8));
        let mut old: Vec<SliceState> = (0..16).map(|i| SliceState::new(i, p16.clone(), 0, order)).collect();
        let key = |i: u64| KeyHash::of(p16.seed, &i.to_le_bytes());
        for i in 0..3_000u64 {
            let h = key(i);
            // The slices' clocks differ: each sees only its own keys.
            old[h.slice(16) as usize].filter.observe(&h, 1_000 + i * 2);
        }
        old[3].resend_marks.insert(("in".into(), 0), 41);
        old[12].resend_marks.insert(("in".into(), 0), 77);
        let merged = merge(old.clone(), 8, &p8.clone().into(), order).unwrap();
        assert_eq!(merged.len(), 8);
        for i in 0..3_000u64 {
            let h = key(i);
            assert!(merged[h.slice(8) as usize].filter.as_timer().unwrap().lookup(&h).duplicate, "key {i} forgotten");
        }
        let fresh = (10_000..12_000u64)
            .filter(|&i| merged[key(i).slice(8) as usize].filter.as_timer().unwrap().lookup(&key(i)).duplicate);
        assert!(fresh.count() < 100, "too many false positives");
        assert!(merged.iter().all(|s| s.resend_marks[&("in".to_string(), 0)] == 77));
        let total = |states: &[SliceState]| states.iter().map(|s| s.counters.distinct).sum::<u64>();
        assert_eq!(total(&merged), total(&old));
        // A merged slice encodes and decodes under the new parameters.
        let bytes = super::super::slice::encode(&merged[5]);
        let back = super::super::slice::decode(&bytes, 5, &p8.clone().into(), order).unwrap();
        assert_eq!(back, merged[5]);
        // Refusals.
        assert!(matches!(merge(old.clone(), 16, &p8.clone().into(), order), Err(MergeError::Counts { .. })));
        let other = FilterSpec { window_ms: 20_000, slices: 8, tick_ms: Some(100), ..FilterSpec::default() };
        let other = other.resolve().unwrap();
        assert!(matches!(
            merge(old, 8, &other.into(), order),
            Err(MergeError::Parameters { parameter: "window_ms", .. })
        ));
    }
}
