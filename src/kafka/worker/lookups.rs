//! The admin endpoint's key lookups (`/v1/lookup` and each feature's
//! `/v1/<name>`), answered from the owned slices under the worker lock.
//! A lookup waits for that lock at most [`LOOKUP_WAIT`] and then answers
//! [`Busy`]: the worker holds it for as long as it waits for the broker.

use std::sync::{Arc, Mutex};

use super::owned::OwnedSlice;
use super::setup::WorkerSetup;
use super::state::WorkerState;
use crate::admin::{Busy, LOOKUP_WAIT, lock_within};
use crate::config::SlicingMode;
use crate::features::lookups::KeyLookup;

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
                // A stage that judges instead of the filter answers instead.
                let mut answer = owned.state.stages.lookup(&hash).unwrap_or_else(|| owned.state.filter.lookup(&hash));
                if let Some(fields) = answer.as_object_mut() {
                    fields.insert("slice".into(), (*s).into());
                }
                answer
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
/// When the router routes by another key than the dedup key (a stage's
/// own key: `WorkerSetup::routes_by_dedup_key` is false), a dedup key's
/// slice is not known either: every owned slice is asked.
fn home_slice(setup: &WorkerSetup, key: &[u8]) -> (crate::filter::KeyHash, Option<u32>) {
    let hash = crate::filter::KeyHash::of(setup.filter.params().seed, key);
    (hash, routed_slice(setup, &hash, setup.routes_by_dedup_key))
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

/// A feature's key endpoint ([`KeyLookup`]), answered from the owned
/// slices' states under the worker lock.
pub(super) fn feature_fn(
    setup: &Arc<WorkerSetup>,
    worker_state: &Arc<Mutex<WorkerState>>,
    lookup: &'static KeyLookup,
) -> crate::admin::LookupFn {
    let (setup, worker_state) = (setup.clone(), worker_state.clone());
    Arc::new(move |key: &[u8]| {
        let hash = crate::filter::KeyHash::of(setup.filter.params().seed, key);
        let home = routed_slice(&setup, &hash, lookup.routed_always || setup.routes_by_dedup_key);
        let worker_state = lock_within(&worker_state, LOOKUP_WAIT).ok_or(Busy)?;
        let mut slices = asked(&worker_state, home).map(|(s, owned)| (*s, &owned.state));
        Ok((lookup.answer)(key, &hash, home, &mut slices))
    })
}
