//! `/v1/count`: a count key's estimated count in the window.

use super::stage::SliceCounting;
use crate::features::lookups::{Asked, KeyLookup};
use crate::filter::KeyHash;

pub const COUNT: KeyLookup = KeyLookup {
    name: "count",
    off: "no counting stage: set limit.max_per_window or flag.threshold to turn it on\n",
    on: |stages| super::stage::counting(stages).is_some(),
    // The router routes by the count key (the dedup key, or limit.count_key).
    routed_always: true,
    answer,
};

/// A count key's estimated count in the window ending at its slice's
/// newest time. In repartition mode the slice is `H_S(count key)`; with
/// input-partitions every owned slice is asked, and `estimate` is the
/// largest (the others see the key only through collisions).
fn answer(key: &[u8], hash: &KeyHash, home: Option<u32>, slices: Asked<'_>) -> serde_json::Value {
    let results: Vec<serde_json::Value> = slices
        .filter_map(|(s, state)| {
            let stage = &state.stages.get::<SliceCounting>()?.stage;
            let counts = stage.counts();
            // The window ends at the newest sub-window's end.
            let newest = counts.state().1;
            Some(serde_json::json!({
                "slice": s,
                "estimate": stage.estimate(hash),
                "window_ms": counts.window_ms(),
                "window_end_ms": newest.map(|n| (n + 1) * counts.sub_ms()),
                "subwindow_ms": counts.sub_ms(),
            }))
        })
        .collect();
    let estimate = results.iter().filter_map(|r| r["estimate"].as_u64()).max();
    serde_json::json!({
        "key": String::from_utf8_lossy(key),
        "estimate": estimate,
        "slice": home,
        "owned": !results.is_empty(),
        "results": results,
    })
}
