//! The admin endpoint's key lookups (`/v1/lookup`, `/v1/count`,
//! `/v1/provenance`), answered from the owned slices under the worker lock.
//! A lookup waits for that lock at most [`LOOKUP_WAIT`] and then answers
//! [`Busy`]: the worker holds it for as long as it waits for the broker.

use std::sync::{Arc, Mutex};

use super::owned::OwnedSlice;
use super::setup::WorkerSetup;
use super::state::WorkerState;
use crate::admin::{Busy, LOOKUP_WAIT, lock_within};
use crate::config::SlicingMode;
use crate::engine::slice::stage::Stage;
use crate::filter::FilterKind;
use crate::features::limits::stage::SliceCounting;
use crate::features::provenance::stage::SliceProvenance;

/// The `/v1/lookup` answer for a key: the verdict it would get now, without
/// inserting it. In repartition mode the key's slice is `H_S(key)`; with
/// input-partitions the producer's partitioner chose it, so every owned
/// slice is asked.
pub(super) fn lookup_fn(setup: &Arc<WorkerSetup>, worker_state: &Arc<Mutex<WorkerState>>) -> crate::admin::LookupFn {
    let (setup, worker_state) = (setup.clone(), worker_state.clone());
    Arc::new(move |key: &[u8]| {
        let (hash, home) = home_slice(&setup, key);
        let worker_state = lock_within(&worker_state, LOOKUP_WAIT).ok_or(Busy)?;
        let results: Vec<serde_json::Value> = asked(&worker_state, home)
            .map(|(s, owned)| {
                // Counting by the dedup key replaces the timer filter: the
                // next copy is a duplicate once the estimate reaches the limit.
                if let Some(c) = owned.state.stages.get::<SliceCounting>().filter(|c| c.judges_instead()) {
                    let estimate = c.stage.estimate(&hash);
                    return serde_json::json!({
                        "slice": s,
                        "duplicate": c.stage.spec().max_per_window.is_some_and(|n| estimate >= n),
                        "kind": "counting",
                        "estimate": estimate,
                    });
                }
                match owned.state.filter.kind() {
                    // No timers: the filter's own test, without its update.
                    FilterKind::Decaying(filter) => serde_json::json!({
                        "slice": s,
                        "duplicate": filter.contains(&hash),
                        "kind": filter.kind().as_str(),
                        "hashes": filter.stats().hashes,
                    }),
                    FilterKind::Cuckoo(filter) => serde_json::json!({
                        "slice": s,
                        "duplicate": filter.contains(&hash),
                        "kind": "cuckoo",
                        "tables": filter.tables().len(),
                        "clock_ms": filter.clock_ms(),
                    }),
                    FilterKind::Timer(filter) => {
                        let l = filter.lookup(&hash);
                        serde_json::json!({
                            "slice": s,
                            "duplicate": l.duplicate,
                            "alive_cells": l.alive_cells,
                            "hashes": setup.filter.params().hashes,
                            "equal_timers": l.equal_timers,
                            "clock_ms": filter.clock_ms(),
                        })
                    }
                }
            })
            .collect();
        Ok(serde_json::json!({
            "key": String::from_utf8_lossy(key),
            "slice": home,
            "owned": !results.is_empty(),
            "results": results,
        }))
    })
}

/// A key's hash and the slice that judges it: `H_S(key)` in repartition
/// mode; `None` with input-partitions (the producer's partitioner chose it,
/// so every owned slice is asked).
///
/// With a separate count key (`limit.count_key`) the router routes by the
/// count key, so a dedup key's slice is not known either: every owned slice
/// is asked.
fn home_slice(setup: &WorkerSetup, key: &[u8]) -> (crate::filter::KeyHash, Option<u32>) {
    let hash = crate::filter::KeyHash::of(setup.filter.params().seed, key);
    let routed_by_key = setup.cfg.stages.counting.as_ref().is_none_or(|c| c.count_key.is_none());
    (hash, routed_slice(setup, &hash, routed_by_key))
}

/// The owned slices a key endpoint asks: `home`, or every one.
pub(super) fn asked(worker_state: &WorkerState, home: Option<u32>) -> impl Iterator<Item = (&u32, &OwnedSlice)> {
    worker_state.slices.iter().filter(move |(s, _)| home.is_none_or(|h| h == **s))
}

/// The slice the router sends a key to, if the router routes by that key
/// (`routed`) in repartition mode; `None` otherwise (ask every owned slice).
fn routed_slice(setup: &WorkerSetup, hash: &crate::filter::KeyHash, routed: bool) -> Option<u32> {
    match setup.cfg.slicing {
        SlicingMode::Repartition if routed => Some(hash.slice(setup.cfg.settings.filter.slices)),
        _ => None,
    }
}

/// The `/v1/count` answer for a count key: its estimated count in the
/// window ending at its slice's newest time. In repartition mode the slice
/// is `H_S(count key)` (the router routes by the count key); with
/// input-partitions every owned slice is asked, and `estimate` is the
/// largest (the others see the key only through collisions).
pub(super) fn count_fn(setup: &Arc<WorkerSetup>, worker_state: &Arc<Mutex<WorkerState>>) -> crate::admin::LookupFn {
    let (setup, worker_state) = (setup.clone(), worker_state.clone());
    Arc::new(move |key: &[u8]| {
        let hash = crate::filter::KeyHash::of(setup.filter.params().seed, key);
        // The router routes by the count key (the dedup key, or limit.count_key).
        let home = routed_slice(&setup, &hash, true);
        let worker_state = lock_within(&worker_state, LOOKUP_WAIT).ok_or(Busy)?;
        let results: Vec<serde_json::Value> = asked(&worker_state, home)
            .filter_map(|(s, owned)| {
                let stage = &owned.state.stages.get::<SliceCounting>()?.stage;
                let counts = stage.counts();
                // The window ends at the newest sub-window's end.
                let newest = counts.state().1;
                Some(serde_json::json!({
                    "slice": s,
                    "estimate": stage.estimate(&hash),
                    "window_ms": counts.window_ms(),
                    "window_end_ms": newest.map(|n| (n + 1) * counts.sub_ms()),
                    "subwindow_ms": counts.sub_ms(),
                }))
            })
            .collect();
        let estimate = results.iter().filter_map(|r| r["estimate"].as_u64()).max();
        Ok(serde_json::json!({
            "key": String::from_utf8_lossy(key),
            "estimate": estimate,
            "slice": home,
            "owned": !results.is_empty(),
            "results": results,
        }))
    })
}

/// The `/v1/provenance` answer for a key: every source that may have
/// delivered it inside what the owned slices keep (no false negatives), and
/// the estimated probability that a source which did not is listed (the
/// largest over the slices asked).
pub(super) fn provenance_fn(
    setup: &Arc<WorkerSetup>,
    worker_state: &Arc<Mutex<WorkerState>>,
) -> crate::admin::LookupFn {
    let (setup, worker_state) = (setup.clone(), worker_state.clone());
    Arc::new(move |key: &[u8]| {
        let (hash, home) = home_slice(&setup, key);
        let worker_state = lock_within(&worker_state, LOOKUP_WAIT).ok_or(Busy)?;
        let mut sources = std::collections::BTreeSet::new();
        let (mut owned, mut estimated_fpr) = (false, 0.0f64);
        for (_, o) in asked(&worker_state, home) {
            if let Some(p) = o.state.stages.get::<SliceProvenance>() {
                owned = true;
                let answer = p.sources.query(&hash);
                sources.extend(answer.sources.iter().map(|s| s.to_string()));
                estimated_fpr = estimated_fpr.max(answer.estimated_fpr);
            }
        }
        Ok(serde_json::json!({
            "key": String::from_utf8_lossy(key),
            "sources": sources,
            "estimated_fpr": estimated_fpr,
            "slice": home,
            "owned": owned,
        }))
    })
}
